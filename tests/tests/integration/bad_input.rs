//! Bad input on one connection gets that connection an ERROR frame and a close, and touches
//! nothing else: other connections keep sending and receiving, stored messages stay stored.

use anyhow::{ensure, Context as _};
use client::{AckMode, StompClient, Subscription};
use protocol::stomp::Frame;
use rand::{Rng, SeedableRng};
use tests::{connect, recv, start_broker, stomp_addr, stored_count, RawConnection, PERSISTENT};

/// The frame size limit of the fixture's broker.
const MAX_FRAME_SIZE: usize = 64 * 1024;
/// The header count limit of the fixture's broker.
const MAX_HEADERS: usize = 32;
/// The default header line limit (the fixture keeps it).
const MAX_HEADER_LENGTH: usize = 10 * 1024;

/// One kind of bad input.
struct Case {
    name: &'static str,
    /// Whether to complete CONNECT before sending the bytes.
    connect_first: bool,
    bytes: Vec<u8>,
    /// The `receipt-id` the ERROR must carry, if the bad frame asked for a receipt.
    receipt: Option<&'static str>,
}

fn send_with_headers(headers: &[String], body: &[u8]) -> Vec<u8> {
    let mut bytes = b"SEND\ndestination:/queue/bad\n".to_vec();
    for header in headers {
        bytes.extend_from_slice(header.as_bytes());
        bytes.push(b'\n');
    }
    bytes.push(b'\n');
    bytes.extend_from_slice(body);
    bytes.push(0);
    bytes
}

fn malformed_header() -> Case {
    Case {
        name: "header line without a colon",
        connect_first: true,
        bytes: b"SEND\ndestination:/queue/bad\nno-colon-here\n\nbody\0".to_vec(),
        receipt: None,
    }
}

fn unknown_command() -> Case {
    Case {
        name: "unknown command",
        connect_first: true,
        bytes: b"FOO\n\n\0".to_vec(),
        receipt: None,
    }
}

fn send_without_destination() -> Case {
    Case {
        name: "SEND without destination",
        connect_first: true,
        bytes: b"SEND\nreceipt:no-destination\n\nbody\0".to_vec(),
        receipt: Some("no-destination"),
    }
}

fn oversize_frame() -> Case {
    Case {
        name: "128 KiB body without content-length over a 64 KiB limit",
        connect_first: true,
        bytes: send_with_headers(&[], &vec![b'x'; 2 * MAX_FRAME_SIZE]),
        receipt: None,
    }
}

fn oversize_frame_with_content_length() -> Case {
    let length = format!("content-length:{}", 2 * MAX_FRAME_SIZE);
    Case {
        name: "128 KiB body with content-length over a 64 KiB limit",
        connect_first: true,
        bytes: send_with_headers(&[length], &vec![0; 2 * MAX_FRAME_SIZE]),
        receipt: None,
    }
}

fn tls_client_hello() -> Case {
    let mut bytes = vec![0x16, 0x03, 0x01, 0x02, 0x00, 0x01, 0x00, 0x01, 0xfc, 0x03, 0x03];
    let mut rng = rand::rngs::StdRng::seed_from_u64(0x5eed);
    bytes.extend((0..500).map(|_| rng.gen::<u8>()));
    Case { name: "a TLS ClientHello", connect_first: false, bytes, receipt: None }
}

fn too_many_headers() -> Case {
    let headers: Vec<String> = (0..MAX_HEADERS + 8).map(|i| format!("h{i}:v")).collect();
    Case {
        name: "too many headers",
        connect_first: true,
        bytes: send_with_headers(&headers, b"x"),
        receipt: None,
    }
}

fn header_too_long() -> Case {
    let header = format!("long:{}", "v".repeat(MAX_HEADER_LENGTH + 1024));
    Case {
        name: "header line too long",
        connect_first: true,
        bytes: send_with_headers(&[header], b"x"),
        receipt: None,
    }
}

fn invalid_priority() -> Case {
    let headers = ["priority:11".to_owned(), "receipt:bad-priority".to_owned()];
    Case {
        name: "priority out of range",
        connect_first: true,
        bytes: send_with_headers(&headers, b"x"),
        receipt: Some("bad-priority"),
    }
}

fn all_cases() -> Vec<Case> {
    vec![
        malformed_header(),
        unknown_command(),
        send_without_destination(),
        oversize_frame(),
        oversize_frame_with_content_length(),
        tls_client_hello(),
        too_many_headers(),
        header_too_long(),
        invalid_priority(),
    ]
}

/// A broker with a stored persistent message nobody consumes, a live subscriber on another
/// connection, and a producer.
struct Fixture {
    broker: broker::BrokerHandle,
    producer: StompClient,
    subscriber: StompClient,
    live: Subscription,
    probes: usize,
}

impl Fixture {
    async fn start() -> anyhow::Result<Fixture> {
        let broker = start_broker(|config| {
            config.transport.max_frame_size = MAX_FRAME_SIZE;
            config.transport.max_headers = MAX_HEADERS;
            config.transport.max_header_length = MAX_HEADER_LENGTH;
        })
        .await?;
        let producer = connect(&broker).await?;
        producer.send_with_receipt("/queue/stored", "stored", &[PERSISTENT]).await?;
        let subscriber = connect(&broker).await?;
        let live = subscriber.subscribe("/queue/live", AckMode::ClientIndividual, &[]).await?;
        Ok(Fixture { broker, producer, subscriber, live, probes: 0 })
    }

    /// Sends `case` on a connection of its own: it must get an ERROR, then be closed.
    async fn reject(&mut self, case: &Case) -> anyhow::Result<Frame> {
        let addr = stomp_addr(&self.broker)?;
        let mut raw = if case.connect_first {
            RawConnection::connect(addr, &[]).await?.0
        } else {
            RawConnection::open(addr).await?
        };
        raw.write_bytes_lenient(&case.bytes).await;
        let error = raw.expect_error_then_close().await?;
        ensure!(
            error.get("message").is_some_and(|m| !m.is_empty()),
            "ERROR without a message: {error:?}"
        );
        ensure!(
            error.get("receipt-id") == case.receipt,
            "ERROR should carry receipt-id {:?}: {error:?}",
            case.receipt
        );
        Ok(error)
    }

    /// The other connections still work and the stored message is still stored.
    async fn assert_unaffected(&mut self) -> anyhow::Result<()> {
        self.probes += 1;
        let body = format!("probe-{}", self.probes);
        self.producer.send_with_receipt("/queue/live", body.clone(), &[PERSISTENT]).await?;
        let message = recv(&mut self.live).await?;
        ensure!(message.body() == body.as_bytes(), "expected {body}, got {message:?}");
        self.subscriber.ack(&message).await?;
        ensure!(stored_count(&self.broker, "stored")? == 1, "the stored message is gone");
        Ok(())
    }

    /// The stored message is still delivered, then the broker stops.
    async fn finish(self) -> anyhow::Result<()> {
        let mut stored =
            self.subscriber.subscribe("/queue/stored", AckMode::ClientIndividual, &[]).await?;
        let message = recv(&mut stored).await?;
        ensure!(&message.body()[..] == b"stored", "{message:?}");
        self.subscriber.ack(&message).await?;
        ensure!(stored_count(&self.broker, "stored")? == 0);
        self.broker.shutdown().await;
        Ok(())
    }
}

/// Runs one case on a fresh fixture.
async fn rejects_and_leaves_others_intact(case: Case) -> anyhow::Result<Frame> {
    let mut fixture = Fixture::start().await?;
    let error = fixture.reject(&case).await.with_context(|| case.name)?;
    fixture.assert_unaffected().await.with_context(|| format!("after {}", case.name))?;
    fixture.finish().await?;
    Ok(error)
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn header_line_without_colon_gets_error_and_close() -> anyhow::Result<()> {
    rejects_and_leaves_others_intact(malformed_header()).await?;
    Ok(())
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn unknown_command_gets_error_and_close() -> anyhow::Result<()> {
    let error = rejects_and_leaves_others_intact(unknown_command()).await?;
    let message = error.get("message").unwrap_or_default();
    ensure!(message.contains("FOO"), "the ERROR should name the command: {error:?}");
    Ok(())
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn send_without_destination_gets_error_and_close() -> anyhow::Result<()> {
    rejects_and_leaves_others_intact(send_without_destination()).await?;
    Ok(())
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn oversize_frame_gets_error_and_close() -> anyhow::Result<()> {
    rejects_and_leaves_others_intact(oversize_frame()).await?;
    rejects_and_leaves_others_intact(oversize_frame_with_content_length()).await?;
    Ok(())
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn tls_client_hello_gets_error_and_close() -> anyhow::Result<()> {
    rejects_and_leaves_others_intact(tls_client_hello()).await?;
    Ok(())
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn too_many_headers_get_error_and_close() -> anyhow::Result<()> {
    rejects_and_leaves_others_intact(too_many_headers()).await?;
    Ok(())
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn header_line_too_long_gets_error_and_close() -> anyhow::Result<()> {
    rejects_and_leaves_others_intact(header_too_long()).await?;
    Ok(())
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn invalid_priority_gets_error_with_receipt_id_and_close() -> anyhow::Result<()> {
    rejects_and_leaves_others_intact(invalid_priority()).await?;
    Ok(())
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn bad_input_in_turn_leaves_other_connections_and_stored_messages_intact(
) -> anyhow::Result<()> {
    let mut fixture = Fixture::start().await?;
    for case in all_cases() {
        fixture.reject(&case).await.with_context(|| case.name)?;
        fixture.assert_unaffected().await.with_context(|| format!("after {}", case.name))?;
    }
    fixture.finish().await
}

/// A client that trickles an incomplete handshake, a byte at a time, is closed once the
/// connect timeout has passed since it connected, on every protocol: its bytes do not
/// move the deadline (on AMQP they once did, so a slow client could hold a connection and
/// its memory for ever without opening it).
#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn a_trickled_handshake_is_closed_at_the_connect_timeout_on_every_protocol(
) -> anyhow::Result<()> {
    use std::time::{Duration, Instant};
    use tokio::io::{AsyncReadExt, AsyncWriteExt};
    const CONNECT_TIMEOUT: Duration = Duration::from_millis(600);
    let broker = start_broker(|config| {
        config.transport.connect_timeout = CONNECT_TIMEOUT;
        config.transport.connectors = ["stomp", "tcp", "amqp"]
            .iter()
            .map(|scheme| format!("{scheme}://127.0.0.1:0").parse().expect("a valid connector URI"))
            .collect();
    })
    .await?;
    let handshakes: [(&str, std::net::SocketAddr, &[u8]); 3] = [
        // A CONNECT frame that never ends.
        ("STOMP", stomp_addr(&broker)?, b"CONNECT\naccept-version:1.2\nhost:x\n\n"),
        // A WireFormatInfo's size prefix, then its first bytes.
        ("OpenWire", broker.openwire_addr().context("no OpenWire connector")?, &[0, 0, 16, 0, 1]),
        // The SASL header, then a sasl-init that never ends.
        (
            "AMQP",
            broker.amqp_addr().context("no AMQP connector")?,
            b"AMQP\x03\x01\x00\x00\x00\x00\x10\x00\x02\x01",
        ),
    ];
    for (protocol, addr, bytes) in handshakes {
        let started = Instant::now();
        let mut socket = tokio::net::TcpStream::connect(addr).await?;
        let (mut reader, mut writer) = socket.split();
        let trickle = async {
            for byte in bytes.iter().cycle() {
                if writer.write_all(&[*byte]).await.is_err() {
                    break;
                }
                tokio::time::sleep(Duration::from_millis(50)).await;
            }
        };
        // Whatever the broker answers before it closes (its own handshake, an error).
        let closed = async {
            let mut answer = Vec::new();
            let _ = reader.read_to_end(&mut answer).await;
        };
        tokio::select! {
            () = closed => {}
            () = trickle => {}
            () = tokio::time::sleep(CONNECT_TIMEOUT * 8) => {
                anyhow::bail!("{protocol}: a trickled handshake kept its connection past the connect timeout")
            }
        }
        let elapsed = started.elapsed();
        ensure!(
            elapsed >= CONNECT_TIMEOUT * 9 / 10,
            "{protocol}: closed too early, after {elapsed:?}"
        );
    }
    // The broker serves a client that completes its handshake.
    let client = connect(&broker).await?;
    client.send_with_receipt("/queue/after-trickle", "served", &[]).await?;
    broker.shutdown().await;
    Ok(())
}
