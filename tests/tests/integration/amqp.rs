//! ferromq over AMQP 1.0: Qpid Proton (Python), a real third-party client, runs the checks of
//! `tests/python/amqp_checks.py` against an embedded broker; raw-socket tests send what no
//! client would (another protocol, garbage, an oversize frame); cross-protocol tests send
//! with one protocol and receive with the other.
//!
//! The interpreter is `$FERROMQ_PYTHON` (set by `scripts/test`, whose venv sees Debian's
//! `python3-qpid-proton`), else the repository's `.venv/bin/python`.

use std::path::{Path, PathBuf};
use std::process::{Command, Stdio};
use std::time::Duration;

use anyhow::{bail, Context};
use bytes::BytesMut;
use client::AckMode;
use protocol::amqp::{
    condition, AmqpFrame, Close, Codec, Decoded, Frame, Limits, Open, Performative, ProtocolHeader,
    Transfer,
};
use tokio::io::{AsyncReadExt, AsyncWriteExt};
use tokio::net::TcpStream;

const CHECK_TIMEOUT: Duration = Duration::from_secs(180);

pub(crate) fn repository_root() -> PathBuf {
    Path::new(env!("CARGO_MANIFEST_DIR")).join("..")
}

pub(crate) fn python() -> anyhow::Result<PathBuf> {
    if let Some(configured) = std::env::var_os("FERROMQ_PYTHON").filter(|v| !v.is_empty()) {
        return Ok(PathBuf::from(configured));
    }
    let venv = repository_root().join(".venv/bin/python");
    if venv.exists() {
        return Ok(venv);
    }
    bail!("Qpid Proton is not installed: run scripts/test, which creates .venv")
}

fn amqp_config(config: &mut conf::Config) {
    config.transport.connectors = vec![
        "amqp://127.0.0.1:0".parse().expect("valid"),
        "stomp://127.0.0.1:0".parse().expect("valid"),
    ];
}

/// Runs one check of `amqp_checks.py` against `addr` (also the AMQP half of the JMS
/// `amqp_interop` check in `jms.rs`).
pub(crate) async fn proton(
    addr: std::net::SocketAddr,
    check: &str,
    extra: &[&str],
) -> anyhow::Result<()> {
    let python = python()?;
    let mut args = vec![
        repository_root().join("tests/python/amqp_checks.py").display().to_string(),
        "--url".to_owned(),
        format!("amqp://{addr}"),
        "--check".to_owned(),
        check.to_owned(),
    ];
    args.extend(extra.iter().map(|s| (*s).to_owned()));
    let check = check.to_owned();
    tokio::task::spawn_blocking(move || {
        let mut child = Command::new(&python)
            .args(&args)
            .env("PYTHONUNBUFFERED", "1")
            .env("PYTHONDONTWRITEBYTECODE", "1")
            .stdin(Stdio::null())
            .stdout(Stdio::piped())
            .stderr(Stdio::piped())
            .spawn()
            .with_context(|| format!("cannot run {}", python.display()))?;
        let deadline = std::time::Instant::now() + CHECK_TIMEOUT;
        while child.try_wait()?.is_none() {
            if std::time::Instant::now() > deadline {
                let _ = child.kill();
                bail!("check {check} timed out");
            }
            std::thread::sleep(Duration::from_millis(20));
        }
        let output = child.wait_with_output()?;
        let stdout = String::from_utf8_lossy(&output.stdout);
        if !output.status.success() || !stdout.contains(&format!("ok {check}")) {
            bail!(
                "Proton check `{check}` failed\n--- stdout\n{stdout}\n--- stderr\n{}",
                String::from_utf8_lossy(&output.stderr)
            );
        }
        Ok(())
    })
    .await?
}

async fn run_check(check: &str) -> anyhow::Result<()> {
    let broker = tests::start_broker(amqp_config).await?;
    let addr = broker.amqp_addr().context("no AMQP connector")?;
    let result = proton(addr, check, &[]).await;
    broker.shutdown().await;
    result
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn amqp_proton_queue_send_and_receive_in_order() -> anyhow::Result<()> {
    run_check("queue").await
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn amqp_proton_topic_subscribers_each_get_every_message() -> anyhow::Result<()> {
    run_check("topic").await
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn amqp_proton_properties_and_headers_survive() -> anyhow::Result<()> {
    run_check("properties").await
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn amqp_proton_five_mib_message_spans_frames() -> anyhow::Result<()> {
    run_check("large").await
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn amqp_proton_link_credit_is_respected() -> anyhow::Result<()> {
    run_check("credit").await
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn amqp_proton_released_modified_rejected_outcomes() -> anyhow::Result<()> {
    run_check("outcomes").await
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn amqp_proton_selector_filter() -> anyhow::Result<()> {
    run_check("selector").await
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn amqp_proton_durable_subscription_across_reconnects() -> anyhow::Result<()> {
    run_check("durable").await
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn amqp_proton_transaction_commit_and_rollback() -> anyhow::Result<()> {
    run_check("transactions").await
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn amqp_proton_a_container_id_is_held_by_one_connection_at_a_time() -> anyhow::Result<()> {
    run_check("client_id_claimed").await
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn amqp_proton_durable_subscription_survives_a_restart() -> anyhow::Result<()> {
    let data = tempfile::tempdir()?;
    let journal = |config: &mut conf::Config| {
        amqp_config(config);
        config.store.kind = conf::StoreKind::Journal;
        config.broker.data_dir = data.path().to_path_buf();
    };
    let topic = ["--address", "topic://restart", "--client-id", "client-r"];
    let broker = tests::start_broker(journal).await?;
    let addr = broker.amqp_addr().context("no AMQP connector")?;
    proton(addr, "durable_subscribe", &topic).await?;
    proton(addr, "durable_publish", &[&topic[..], &["--count", "3"]].concat()).await?;
    broker.shutdown().await;
    let broker = tests::start_broker(journal).await?;
    let addr = broker.amqp_addr().context("no AMQP connector")?;
    let result =
        proton(addr, "durable_receive", &[&topic[..], &["--count", "3", "--close"]].concat()).await;
    broker.shutdown().await;
    result
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn amqp_to_stomp_keeps_headers_and_properties() -> anyhow::Result<()> {
    let broker = tests::start_broker(amqp_config).await?;
    let addr = broker.amqp_addr().context("no AMQP connector")?;
    let stomp = tests::connect(&broker).await?;
    let mut sub = stomp.subscribe("/queue/cross", AckMode::Auto, &[]).await?;
    proton(addr, "send", &["--address", "cross", "--body", "from amqp"]).await?;
    let message = tests::recv(&mut sub).await?;
    assert_eq!(&message.body()[..], b"from amqp");
    assert_eq!(message.header("type"), Some("amqp-type"));
    assert_eq!(message.header("correlation-id"), Some("corr-x"), "an application's own id");
    assert_eq!(message.header("color"), Some("red"));
    assert_eq!(message.header("count"), Some("7"));
    assert_eq!(message.header("persistent"), Some("true"));
    broker.shutdown().await;
    Ok(())
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn stomp_to_amqp_keeps_headers_and_properties() -> anyhow::Result<()> {
    let broker = tests::start_broker(amqp_config).await?;
    let addr = broker.amqp_addr().context("no AMQP connector")?;
    let stomp = tests::connect(&broker).await?;
    let headers = [("correlation-id", "corr-s"), ("color", "blue"), ("persistent", "true")];
    stomp.send_with_receipt("/queue/back", "from stomp", &headers).await?;
    let result = proton(addr, "receive_from_stomp", &["--address", "back"]).await;
    broker.shutdown().await;
    result
}

/// Reads until the connection closes (or 5 s pass), decoding what the broker sent.
async fn read_frames(socket: &mut TcpStream) -> anyhow::Result<Vec<Decoded>> {
    let mut codec = Codec::new(Limits::default());
    let mut buffer = BytesMut::new();
    let mut decoded = Vec::new();
    let deadline = tokio::time::Instant::now() + Duration::from_secs(5);
    loop {
        let read = tokio::time::timeout_at(deadline, socket.read_buf(&mut buffer)).await;
        let closed = !matches!(read, Ok(Ok(n)) if n > 0);
        while let Ok(Some(item)) = codec.decode(&mut buffer) {
            decoded.push(item);
        }
        if closed {
            return Ok(decoded);
        }
    }
}

fn close_condition(decoded: &[Decoded]) -> Option<String> {
    decoded.iter().find_map(|d| match d {
        Decoded::Frame(Frame::Amqp(AmqpFrame {
            performative: Performative::Close(Close { error: Some(error) }),
            ..
        })) => Some(error.condition.as_str().to_owned()),
        _ => None,
    })
}

/// Opens a connection without SASL and returns the socket after the broker's open.
async fn opened(addr: std::net::SocketAddr, max_frame_size: u32) -> anyhow::Result<TcpStream> {
    let mut socket = TcpStream::connect(addr).await?;
    let mut out = BytesMut::new();
    Codec::encode_header(ProtocolHeader::AMQP, &mut out);
    let open = Open {
        container_id: "raw".into(),
        max_frame_size: Some(max_frame_size),
        ..Open::default()
    };
    Codec::new(Limits::default()).encode(&AmqpFrame::new(0, open).into(), &mut out)?;
    socket.write_all(&out).await?;
    Ok(socket)
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn amqp_refuses_another_protocol_with_its_header() -> anyhow::Result<()> {
    let broker = tests::start_broker(amqp_config).await?;
    let addr = broker.amqp_addr().context("no AMQP connector")?;
    let mut socket = TcpStream::connect(addr).await?;
    socket.write_all(b"CONNECT\naccept-version:1.2\n\n\0").await?;
    let mut answer = Vec::new();
    tokio::time::timeout(Duration::from_secs(5), socket.read_to_end(&mut answer)).await??;
    assert_eq!(answer, ProtocolHeader::AMQP.to_bytes());
    // Other connections are unaffected.
    proton(addr, "queue", &[]).await?;
    broker.shutdown().await;
    Ok(())
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn amqp_closes_with_decode_error_on_garbage() -> anyhow::Result<()> {
    let broker = tests::start_broker(amqp_config).await?;
    let addr = broker.amqp_addr().context("no AMQP connector")?;
    let mut socket = opened(addr, 65536).await?;
    // A frame whose body is not a performative (0xff is no format code).
    socket.write_all(&[0, 0, 0, 12, 2, 0, 0, 0, 0xff, 0xff, 0xff, 0xff]).await?;
    let decoded = read_frames(&mut socket).await?;
    assert_eq!(close_condition(&decoded).as_deref(), Some(condition::DECODE_ERROR), "{decoded:?}");
    broker.shutdown().await;
    Ok(())
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn amqp_closes_on_a_frame_over_max_frame_size() -> anyhow::Result<()> {
    let broker = tests::start_broker(amqp_config).await?;
    let addr = broker.amqp_addr().context("no AMQP connector")?;
    let mut socket = opened(addr, 65536).await?;
    // A header announcing 16 MiB, above the broker's 1 MiB max-frame-size.
    socket.write_all(&[1, 0, 0, 0, 2, 0, 0, 0]).await?;
    let decoded = read_frames(&mut socket).await?;
    assert_eq!(
        close_condition(&decoded).as_deref(),
        Some(condition::CONNECTION_FRAMING_ERROR),
        "{decoded:?}"
    );
    broker.shutdown().await;
    Ok(())
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn amqp_closes_on_a_transfer_on_an_unattached_link() -> anyhow::Result<()> {
    let broker = tests::start_broker(amqp_config).await?;
    let addr = broker.amqp_addr().context("no AMQP connector")?;
    let mut socket = opened(addr, 65536).await?;
    let codec = Codec::new(Limits::default());
    let mut out = BytesMut::new();
    let begin = protocol::amqp::Begin {
        next_outgoing_id: 0,
        incoming_window: 100,
        outgoing_window: 100,
        ..Default::default()
    };
    codec.encode(&AmqpFrame::new(0, begin).into(), &mut out)?;
    let transfer = Transfer { handle: 9, delivery_id: Some(0), ..Transfer::default() };
    let body = protocol::amqp::Message::with_value("x").to_bytes()?;
    codec.encode(&AmqpFrame::transfer(0, transfer, body).into(), &mut out)?;
    socket.write_all(&out).await?;
    let decoded = read_frames(&mut socket).await?;
    assert_eq!(
        close_condition(&decoded).as_deref(),
        Some(condition::SESSION_UNATTACHED_HANDLE),
        "{decoded:?}"
    );
    broker.shutdown().await;
    Ok(())
}
