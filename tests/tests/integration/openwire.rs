//! The OpenWire adapter driven with the codec over TCP: the handshake, a send and receive,
//! and bad input, which closes only the connection that sent it.

use std::net::SocketAddr;
use std::time::Duration;

use anyhow::{bail, Context as _};
use broker::BrokerHandle;
use bytes::BytesMut;
use protocol::openwire::{self as ow, Codec, Command, WireFormat, WireFormatInfo, MAGIC};
use tokio::io::{AsyncReadExt, AsyncWriteExt};
use tokio::net::TcpStream;

const MAX_FRAME_SIZE: usize = 64 * 1024;
const WAIT: Duration = Duration::from_secs(5);

async fn start() -> anyhow::Result<(BrokerHandle, SocketAddr)> {
    let broker = tests::start_broker(|config| {
        config.transport.connectors = vec![
            "stomp://127.0.0.1:0".parse().expect("uri"),
            "tcp://127.0.0.1:0".parse().expect("uri"),
        ];
        config.transport.max_frame_size = MAX_FRAME_SIZE;
    })
    .await?;
    let addr = broker
        .connectors()
        .iter()
        .find(|c| c.uri.scheme.as_str() == "tcp")
        .map(|c| c.local_addr)
        .context("no tcp connector")?;
    Ok((broker, addr))
}

struct Client {
    socket: TcpStream,
    codec: Codec,
    buffer: BytesMut,
    next_id: i32,
}

impl Client {
    /// Connects and completes the handshake (both WireFormatInfos, the BrokerInfo).
    async fn connect(addr: SocketAddr) -> anyhow::Result<Client> {
        let socket = TcpStream::connect(addr).await?;
        let mut client =
            Client { socket, codec: Codec::new(1 << 24), buffer: BytesMut::new(), next_id: 1 };
        let Command::WireFormatInfo(broker_info) = client.read().await? else {
            bail!("the broker did not start with its WireFormatInfo");
        };
        assert_eq!(broker_info.version, 12);
        assert!(broker_info.tight_encoding_enabled() && broker_info.cache_enabled());
        assert_eq!(broker_info.max_inactivity_duration(), 30_000);
        let local = WireFormatInfo::announcing(&WireFormat::default(), "ActiveMQ", "5.17.2");
        client.write(&local.clone().into()).await?;
        client.codec.negotiate(&local, &broker_info)?;
        let Command::BrokerInfo(info) = client.read().await? else {
            bail!("no BrokerInfo after the handshake");
        };
        assert!(info.broker_id.is_some() && info.broker_url.is_some());
        Ok(client)
    }

    async fn write(&mut self, command: &Command) -> anyhow::Result<()> {
        let bytes = self.codec.encode_to_bytes(command)?;
        self.socket.write_all(&bytes).await?;
        Ok(())
    }

    /// Sends `command` as a request; returns its command id.
    async fn request(&mut self, mut command: Command) -> anyhow::Result<i32> {
        let id = self.next_id;
        self.next_id += 1;
        command.set_command_id(id);
        self.write(&command).await?;
        Ok(id)
    }

    /// The next command, skipping keep-alives.
    async fn read(&mut self) -> anyhow::Result<Command> {
        loop {
            if let Some(command) = self.codec.decode(&mut self.buffer)? {
                if matches!(command, Command::KeepAliveInfo(_)) {
                    continue;
                }
                return Ok(command);
            }
            let n = tokio::time::timeout(WAIT, self.socket.read_buf(&mut self.buffer))
                .await
                .context("nothing from the broker")??;
            if n == 0 {
                bail!("the broker closed the connection");
            }
        }
    }

    /// Expects the answer to request `id`: Ok for a Response, the exception class and
    /// message for an ExceptionResponse.
    async fn answer(&mut self, id: i32) -> anyhow::Result<Result<(), (String, String)>> {
        loop {
            match self.read().await? {
                Command::Response(r) if r.correlation_id == id => return Ok(Ok(())),
                Command::ExceptionResponse(e) if e.correlation_id == id => {
                    let t = e.exception.clone().unwrap_or_default();
                    return Ok(Err((t.class_name, t.message.unwrap_or_default())));
                }
                _ => {}
            }
        }
    }

    /// Sends a request that must succeed.
    async fn ok(&mut self, command: Command) -> anyhow::Result<()> {
        assert!(command.response_required());
        let id = self.request(command).await?;
        match self.answer(id).await? {
            Ok(()) => Ok(()),
            Err(e) => bail!("refused: {e:?}"),
        }
    }

    /// True once the broker has closed the connection (within [`WAIT`]).
    async fn closed(&mut self) -> bool {
        let deadline = tokio::time::Instant::now() + WAIT;
        loop {
            let mut scratch = [0u8; 4096];
            match tokio::time::timeout_at(deadline, self.socket.read(&mut scratch)).await {
                Ok(Ok(0)) | Ok(Err(_)) => return true,
                Ok(Ok(_)) => continue,
                Err(_) => return false,
            }
        }
    }
}

fn connection_id(name: &str) -> ow::ConnectionId {
    ow::ConnectionId { value: format!("ID:test-{name}:1") }
}

/// Opens connection, session, a producer and a consumer on `queue`.
async fn open(client: &mut Client, name: &str, queue: &str, prefetch: i32) -> anyhow::Result<()> {
    let connection = connection_id(name);
    client
        .ok(Command::ConnectionInfo(Box::new(ow::ConnectionInfo {
            response_required: true,
            connection_id: Some(connection.clone()),
            client_id: Some(format!("client-{name}")),
            ..Default::default()
        })))
        .await?;
    client
        .ok(Command::SessionInfo(ow::SessionInfo {
            response_required: true,
            session_id: Some(ow::SessionId { connection_id: connection.value.clone(), value: 1 }),
            ..Default::default()
        }))
        .await?;
    client
        .ok(Command::ConsumerInfo(Box::new(ow::ConsumerInfo {
            response_required: true,
            consumer_id: Some(consumer_id(name)),
            destination: Some(ow::Destination::queue(queue)),
            prefetch_size: prefetch,
            ..Default::default()
        })))
        .await?;
    client
        .ok(Command::ProducerInfo(Box::new(ow::ProducerInfo {
            response_required: true,
            producer_id: Some(producer_id(name)),
            ..Default::default()
        })))
        .await
}

fn consumer_id(name: &str) -> ow::ConsumerId {
    ow::ConsumerId { connection_id: connection_id(name).value, session_id: 1, value: 1 }
}

fn producer_id(name: &str) -> ow::ProducerId {
    ow::ProducerId { connection_id: connection_id(name).value, session_id: 1, value: 1 }
}

fn text_message(name: &str, queue: &str, seq: i64, text: &str) -> anyhow::Result<Command> {
    let mut m = ow::Message::new(ow::MessageType::Text);
    m.producer_id = Some(producer_id(name));
    m.destination = Some(ow::Destination::queue(queue));
    m.message_id = Some(ow::MessageId {
        producer_id: Some(producer_id(name)),
        producer_sequence_id: seq,
        ..Default::default()
    });
    m.persistent = true;
    m.response_required = true;
    m.priority = 4;
    m.set_text(Some(text), false)?;
    let mut p = ow::PrimitiveMap::new();
    p.insert("n", 42i32);
    m.set_properties(&p)?;
    Ok(Command::Message(Box::new(m)))
}

/// Sends a text message and receives it back with the id, properties and ack.
async fn round_trip(client: &mut Client, name: &str, queue: &str) -> anyhow::Result<()> {
    client.ok(text_message(name, queue, 1, "hello openwire")?).await?;
    let dispatch = loop {
        if let Command::MessageDispatch(d) = client.read().await? {
            break d;
        }
    };
    let message = dispatch.message.context("a message")?;
    assert_eq!(message.text()?.as_deref(), Some("hello openwire"));
    assert_eq!(message.properties()?.get("n").and_then(ow::PrimitiveValue::as_i64), Some(42));
    let id = message.message_id.clone().context("a message id")?;
    assert_eq!(id.producer_id, Some(producer_id(name)));
    assert_eq!(id.producer_sequence_id, 1);
    client
        .ok(Command::MessageAck(Box::new(ow::MessageAck {
            response_required: true,
            consumer_id: Some(consumer_id(name)),
            destination: Some(ow::Destination::queue(queue)),
            ack_type: ow::ack_type::STANDARD,
            first_message_id: Some(id.clone()),
            last_message_id: Some(id),
            message_count: 1,
            ..Default::default()
        })))
        .await
}

#[tokio::test]
async fn handshake_send_receive_and_ack() -> anyhow::Result<()> {
    let (broker, addr) = start().await?;
    let mut client = Client::connect(addr).await?;
    open(&mut client, "a", "OW.ROUND", 10).await?;
    round_trip(&mut client, "a", "OW.ROUND").await?;
    tests::wait_until("the ack lands", || async {
        tests::stored_count(&broker, "OW.ROUND").map(|n| n == 0).unwrap_or(false)
    })
    .await?;
    broker.shutdown().await;
    Ok(())
}

#[tokio::test]
async fn invalid_selectors_and_xa_get_the_expected_exceptions() -> anyhow::Result<()> {
    let (broker, addr) = start().await?;
    let mut client = Client::connect(addr).await?;
    open(&mut client, "b", "OW.REFUSE", 10).await?;
    let consumer = |value: i64, selector: &str| {
        let mut info = ow::ConsumerInfo {
            consumer_id: Some(ow::ConsumerId { value, ..consumer_id("b") }),
            destination: Some(ow::Destination::queue("OW.REFUSE")),
            prefetch_size: 10,
            selector: Some(selector.into()),
            ..Default::default()
        };
        info.response_required = true;
        Command::ConsumerInfo(Box::new(info))
    };
    let id = client.request(consumer(2, "color = ")).await?;
    let refused = client.answer(id).await?.expect_err("an invalid selector is refused");
    assert_eq!(refused.0, "javax.jms.InvalidSelectorException");
    assert!(refused.1.contains("invalid selector at column 9"), "{}", refused.1);
    let id = client.request(consumer(3, "color = 'red' AND JMSPriority > 3")).await?;
    client.answer(id).await?.expect("a valid selector is accepted");
    let xa = ow::TransactionInfo {
        response_required: true,
        connection_id: Some(connection_id("b")),
        transaction_id: Some(ow::TransactionId::Xa(ow::XaTransactionId {
            format_id: 1,
            global_transaction_id: Some(bytes::Bytes::from_static(b"g")),
            branch_qualifier: Some(bytes::Bytes::from_static(b"b")),
        })),
        transaction_type: ow::transaction_type::BEGIN,
        ..Default::default()
    };
    let id = client.request(Command::TransactionInfo(Box::new(xa))).await?;
    let refused = client.answer(id).await?.expect_err("XA is refused");
    assert!(refused.1.contains("XA transactions are not supported"), "{}", refused.1);
    // The connection still works.
    round_trip(&mut client, "b", "OW.REFUSE").await?;
    broker.shutdown().await;
    Ok(())
}

/// Bad bytes after (or instead of) the handshake: only that connection closes.
#[tokio::test]
async fn bad_input_closes_only_that_connection() -> anyhow::Result<()> {
    let (broker, addr) = start().await?;
    let mut healthy = Client::connect(addr).await?;
    open(&mut healthy, "ok", "OW.HEALTHY", 10).await?;

    // Not OpenWire at all: an HTTP request (read as a huge size prefix).
    let mut http = TcpStream::connect(addr).await?;
    http.write_all(b"GET / HTTP/1.1\r\nHost: x\r\n\r\n").await?;
    let mut http =
        Client { socket: http, codec: Codec::new(1 << 20), buffer: BytesMut::new(), next_id: 1 };
    assert!(http.closed().await, "an HTTP request is refused");

    // A WireFormatInfo with the wrong magic.
    let mut wrong_magic = TcpStream::connect(addr).await?;
    let mut frame = Vec::new();
    let body_len = 1 + MAGIC.len() + 4 + 1;
    frame.extend_from_slice(&(body_len as i32).to_be_bytes());
    frame.push(1); // WIREFORMAT_INFO
    frame.extend_from_slice(b"NotAMQ!!");
    frame.extend_from_slice(&12i32.to_be_bytes());
    frame.push(0); // no properties
    wrong_magic.write_all(&frame).await?;
    let mut wrong_magic = Client {
        socket: wrong_magic,
        codec: Codec::new(1 << 20),
        buffer: BytesMut::new(),
        next_id: 1,
    };
    assert!(wrong_magic.closed().await, "a wrong magic is refused");

    // An unknown command type after the handshake.
    let mut unknown = Client::connect(addr).await?;
    unknown.socket.write_all(&[0, 0, 0, 2, 0xEE, 0]).await?;
    assert!(unknown.closed().await, "an unknown command type closes the connection");

    // A frame over the broker's maximum frame size.
    let mut oversized = Client::connect(addr).await?;
    oversized.socket.write_all(&((MAX_FRAME_SIZE as i32) + 1).to_be_bytes()).await?;
    assert!(oversized.closed().await, "a frame over the limit closes the connection");

    // A truncated frame: the broker waits for the rest (the connection stays open).
    let mut truncated = Client::connect(addr).await?;
    truncated.socket.write_all(&[0, 0, 0, 100, 21]).await?;
    let mut scratch = [0u8; 64];
    let waited =
        tokio::time::timeout(Duration::from_millis(500), truncated.socket.read(&mut scratch)).await;
    assert!(waited.is_err(), "a truncated frame is waited for, not answered: {waited:?}");

    // Everyone else is unaffected.
    round_trip(&mut healthy, "ok", "OW.HEALTHY").await?;
    drop(truncated);
    broker.shutdown().await;
    Ok(())
}

#[tokio::test]
async fn stomp_and_openwire_exchange_messages() -> anyhow::Result<()> {
    let (broker, addr) = start().await?;
    let mut client = Client::connect(addr).await?;
    open(&mut client, "x", "OW.CROSS", 10).await?;
    let stomp = tests::connect(&broker).await?;
    stomp.send("/queue/OW.CROSS", "from stomp", &[]).await?;
    let dispatch = loop {
        if let Command::MessageDispatch(d) = client.read().await? {
            break d;
        }
    };
    let message = dispatch.message.context("a message")?;
    // The STOMP client sends content-length: a BytesMessage, as with ActiveMQ.
    match message.body(1 << 20)? {
        ow::Body::Text(Some(text)) => assert_eq!(text, "from stomp"),
        ow::Body::Bytes(bytes) => assert_eq!(&bytes[..], b"from stomp"),
        other => bail!("unexpected body {other:?}"),
    }
    broker.shutdown().await;
    Ok(())
}

/// Texts of the messages dispatched to the client until `quiet` passes without one, acking
/// none of them.
async fn dispatched_texts(client: &mut Client, quiet: Duration) -> anyhow::Result<Vec<String>> {
    let mut texts = Vec::new();
    while let Ok(command) = tokio::time::timeout(quiet, client.read()).await {
        if let Command::MessageDispatch(dispatch) = command? {
            let message = dispatch.message.context("a dispatched message")?;
            texts.push(message.text()?.unwrap_or_default());
        }
    }
    Ok(texts)
}

/// A `failover:` client resends what it had in flight: the producer audit confirms the
/// resend without enqueueing it again, within one run of the broker and after a restart
/// (the audit is rebuilt from the store).
#[tokio::test]
async fn resent_messages_are_confirmed_but_not_delivered_twice() -> anyhow::Result<()> {
    let data = tempfile::tempdir()?;
    let start_on_journal = || {
        tests::start_broker(|config| {
            config.transport.connectors = vec!["tcp://127.0.0.1:0".parse().expect("uri")];
            config.store.kind = conf::StoreKind::Journal;
            config.broker.data_dir = data.path().to_path_buf();
        })
    };
    let openwire = |broker: &BrokerHandle| {
        broker
            .connectors()
            .first()
            .map(|connector| connector.local_addr)
            .context("no tcp connector")
    };
    let queue = "OW.DUPLICATES";
    let broker = start_on_journal().await?;
    let mut client = Client::connect(openwire(&broker)?).await?;
    // Prefetch 0 and no pull: nothing is dispatched while the producer sends.
    open(&mut client, "dup", queue, 0).await?;
    client.ok(text_message("dup", queue, 1, "one")?).await?;
    client.ok(text_message("dup", queue, 2, "two")?).await?;
    client.ok(text_message("dup", queue, 2, "two, resent")?).await?;
    client.ok(text_message("dup", queue, 1, "one, resent")?).await?;
    assert_eq!(tests::stored_count(&broker, queue)?, 2, "the resends are not stored");
    drop(client);
    broker.shutdown().await;

    let broker = start_on_journal().await?;
    let mut client = Client::connect(openwire(&broker)?).await?;
    open(&mut client, "dup", queue, 0).await?;
    client.ok(text_message("dup", queue, 2, "two, resent after the restart")?).await?;
    client.ok(text_message("dup", queue, 3, "three")?).await?;
    // The failover transport's way to turn a consumer restored with prefetch 0 back on.
    client
        .write(&Command::ConsumerControl(Box::new(ow::ConsumerControl {
            consumer_id: Some(consumer_id("dup")),
            destination: Some(ow::Destination::queue(queue)),
            prefetch: 10,
            ..Default::default()
        })))
        .await?;
    let texts = dispatched_texts(&mut client, Duration::from_millis(500)).await?;
    assert_eq!(texts, ["one", "two", "three"]);
    broker.shutdown().await;
    Ok(())
}

/// After the handshake a protocol error reaches the client as a ConnectionError (which the
/// JMS client hands to the connection's exception listener) before the socket closes.
#[tokio::test]
async fn protocol_errors_after_the_handshake_are_reported_with_a_connection_error(
) -> anyhow::Result<()> {
    let (broker, addr) = start().await?;
    for (what, bytes) in [
        ("an unknown command type", vec![0, 0, 0, 2, 0xEE, 0]),
        ("a frame over the maximum size", ((MAX_FRAME_SIZE as i32) + 1).to_be_bytes().to_vec()),
    ] {
        let mut client = Client::connect(addr).await?;
        client.socket.write_all(&bytes).await?;
        let error = loop {
            match client.read().await.with_context(|| format!("after {what}"))? {
                Command::ConnectionError(error) => break error,
                _ => continue,
            }
        };
        let exception = error.exception.context("the ConnectionError has an exception")?;
        assert_eq!(exception.class_name, "java.io.IOException", "{what}");
        assert!(exception.message.is_some_and(|m| m.starts_with("ferromq closed")), "{what}");
        assert!(client.closed().await, "{what}: the connection closes");
    }
    broker.shutdown().await;
    Ok(())
}
