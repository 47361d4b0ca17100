//! Seed 001's scenario S7: one thread enqueues 1,000 persistent 1 KiB messages one by one,
//! each send waiting for the broker's confirmation, then dequeues them one by one; the
//! figure is the mean time per call, over OpenWire and over AMQP 1.0, against the journal
//! store with its fsyncs (the default).
//!
//! - OpenWire (`client::openwire`): a persistent send is synchronous (the broker's Response
//!   comes once the message is on disk); a dequeue is `receive` plus an individual `ack`,
//!   with the client's default prefetch (seed 001's ActiveMQ client had prefetch on).
//! - AMQP (`client::amqp`): an unsettled durable transfer, the call returning with the
//!   `accepted` disposition; a dequeue is a receive on a link with credit 1 plus `accept`
//!   (which grants the next credit in the same write), as the seed's Qpid client did.
//!
//! One broker (connectors for both protocols, journal under a temporary directory on the
//! disk the figures are about) serves every run; runs alternate the protocols (OpenWire,
//! AMQP, OpenWire, ...) on fresh queues, and the table gives the median of 3 runs. The
//! disk's `fdatasync` rate (4 KiB writes, the journal's pattern) is measured in the same
//! process before and after, because these machines' virtual disks vary with load.
//!
//! `cargo bench -p benches --bench s7` (about a minute); `-- --quick`: 100 messages, 1 run.
//! Output: stdout, and a markdown table in `target/bench-results/s7.md`. The data directory
//! is under `FERROMQ_BENCH_DIR` if set, else the system's temporary directory.

use std::fs::File;
use std::os::unix::fs::FileExt;
use std::path::{Path, PathBuf};
use std::time::{Duration, Instant};

use anyhow::Context;
use benches::median;
use bytes::Bytes;
use client::amqp::{AmqpClient, AmqpOptions, Header, Message};
use client::openwire::{
    Destination, OpenWireClient, OpenWireOptions, OutgoingMessage, SessionMode, SubscribeOptions,
};

const MESSAGE_SIZE: usize = 1024;
const RECEIVE_TIMEOUT: Duration = Duration::from_secs(30);

/// Seed 001's figures (ms per call), as the seed gives them: ActiveMQ 5.9.0, client on
/// another VM over a gigabit LAN.
const SEED: &[(&str, &str, &str, &str)] = &[
    ("OpenWire", "KahaDB", "57.9", "0.3"),
    ("OpenWire", "LevelDB (Java)", "28.6", "0.2"),
    ("OpenWire", "LevelDB (JNI)", "26.3", "0.2"),
    ("AMQP (Qpid JMS)", "KahaDB", "24.0", "25.7"),
    ("AMQP (Qpid JMS)", "LevelDB (Java)", "0.9", "1.0"),
    ("AMQP (Qpid JMS)", "LevelDB (JNI)", "0.9", "0.9"),
];

#[derive(Clone, Copy, PartialEq, Eq, Debug)]
enum Protocol {
    OpenWire,
    Amqp,
}

impl Protocol {
    fn name(self) -> &'static str {
        match self {
            Protocol::OpenWire => "OpenWire",
            Protocol::Amqp => "AMQP 1.0",
        }
    }
}

/// Mean milliseconds per call of one run.
struct Run {
    enqueue_ms: f64,
    dequeue_ms: f64,
}

fn main() -> anyhow::Result<()> {
    let quick = std::env::args().any(|a| a == "--quick");
    let (messages, runs) = if quick { (100, 1) } else { (1000, 3) };
    let probe_time = if quick { Duration::from_millis(200) } else { Duration::from_secs(1) };
    let base = std::env::var_os("FERROMQ_BENCH_DIR").map_or_else(std::env::temp_dir, PathBuf::from);
    let data = tempfile::Builder::new().prefix("ferromq-s7-").tempdir_in(&base)?;
    let runtime = tokio::runtime::Builder::new_multi_thread().enable_all().build()?;
    let fsync_before = fsync_rate(data.path(), probe_time)?;
    let results = runtime.block_on(async {
        let mut config = conf::Config::default();
        config.store.kind = conf::StoreKind::Journal;
        config.broker.data_dir = data.path().join("broker");
        config.transport.connectors =
            vec!["tcp://127.0.0.1:0".parse()?, "amqp://127.0.0.1:0".parse()?];
        config.admin.enabled = false;
        let broker = broker::Broker::start(config).await?;
        let openwire = broker.openwire_addr().context("no OpenWire connector")?;
        let amqp = broker.amqp_addr().context("no AMQP connector")?;
        let mut results: Vec<(Protocol, Vec<Run>)> =
            vec![(Protocol::OpenWire, Vec::new()), (Protocol::Amqp, Vec::new())];
        for run in 0..runs {
            for (protocol, runs) in &mut results {
                let queue = format!("s7.{}.{run}", protocol.name().replace(' ', "-"));
                let result = match protocol {
                    Protocol::OpenWire => run_openwire(openwire, &queue, messages).await,
                    Protocol::Amqp => run_amqp(amqp, &queue, messages).await,
                }
                .with_context(|| format!("{} run {run}", protocol.name()))?;
                println!(
                    "run {run} {:<9} enqueue {:.3} ms/call, dequeue {:.3} ms/call",
                    protocol.name(),
                    result.enqueue_ms,
                    result.dequeue_ms
                );
                runs.push(result);
            }
        }
        broker.shutdown().await;
        anyhow::Ok(results)
    })?;
    let fsync_after = fsync_rate(data.path(), probe_time)?;

    let mut table = String::new();
    table.push_str(&format!(
        "S7: {messages} persistent {MESSAGE_SIZE}-byte messages enqueued one by one (each send \
         confirmed), then dequeued one by one; mean ms per call, median of {runs} run(s); \
         ferromq journal store (fsync on), client and broker on loopback.\n\
         Disk: {fsync_before:.0} fdatasyncs/s of 4 KiB before, {fsync_after:.0}/s after.\n\n"
    ));
    table.push_str("| protocol (client) | store | enqueue ms/call | dequeue ms/call |\n");
    table.push_str("|---|---|---:|---:|\n");
    for (protocol, runs) in &results {
        let enqueue = median(runs.iter().map(|r| r.enqueue_ms).collect());
        let dequeue = median(runs.iter().map(|r| r.dequeue_ms).collect());
        let client = match protocol {
            Protocol::OpenWire => "OpenWire (client::openwire)",
            Protocol::Amqp => "AMQP 1.0 (client::amqp)",
        };
        table.push_str(&format!("| {client} | ferromq journal | {enqueue:.3} | {dequeue:.3} |\n"));
    }
    for (protocol, store, enqueue, dequeue) in SEED {
        table.push_str(&format!(
            "| {protocol} (seed 001) | ActiveMQ 5.9 {store} | {enqueue} | {dequeue} |\n"
        ));
    }
    println!("\n{table}");
    let results_dir = target_dir().join("bench-results");
    std::fs::create_dir_all(&results_dir)?;
    let path = results_dir.join("s7.md");
    std::fs::write(&path, &table).with_context(|| format!("writing {}", path.display()))?;
    println!("written to {}", path.display());
    Ok(())
}

fn target_dir() -> PathBuf {
    std::env::var_os("CARGO_TARGET_DIR")
        .map(PathBuf::from)
        .unwrap_or_else(|| Path::new(env!("CARGO_MANIFEST_DIR")).join("../target"))
}

fn body() -> Bytes {
    Bytes::from((0..MESSAGE_SIZE).map(|i| (i % 251) as u8).collect::<Vec<u8>>())
}

fn mean_ms(total: Duration, calls: usize) -> f64 {
    total.as_secs_f64() * 1000.0 / calls as f64
}

async fn run_openwire(
    addr: std::net::SocketAddr,
    queue: &str,
    messages: usize,
) -> anyhow::Result<Run> {
    let client =
        OpenWireClient::connect(&addr.ip().to_string(), addr.port(), OpenWireOptions::default())
            .await?;
    let destination = Destination::queue(queue);
    let session = client.session(SessionMode::Individual).await?;
    let producer = session.producer(Some(destination.clone())).await?;
    let message = OutgoingMessage::bytes(body()).persistent(true);
    let mut enqueue = Duration::ZERO;
    for _ in 0..messages {
        let start = Instant::now();
        producer.send(&message).await?;
        enqueue += start.elapsed();
    }
    // A new session for the dequeue, as in the seed.
    let session = client.session(SessionMode::Individual).await?;
    let mut consumer = session.consumer(SubscribeOptions::new(destination)).await?;
    let mut dequeue = Duration::ZERO;
    for i in 0..messages {
        let start = Instant::now();
        let received =
            consumer.receive(RECEIVE_TIMEOUT).await?.with_context(|| format!("message {i}"))?;
        consumer.ack(&received).await?;
        dequeue += start.elapsed();
        anyhow::ensure!(received.body_bytes().len() == MESSAGE_SIZE, "message {i}'s body");
    }
    client.close().await?;
    Ok(Run { enqueue_ms: mean_ms(enqueue, messages), dequeue_ms: mean_ms(dequeue, messages) })
}

async fn run_amqp(addr: std::net::SocketAddr, queue: &str, messages: usize) -> anyhow::Result<Run> {
    let client =
        AmqpClient::connect(&addr.ip().to_string(), addr.port(), AmqpOptions::default()).await?;
    let address = format!("queue://{queue}");
    let sender = client.sender(&address).await?;
    let mut message = Message::with_data(body());
    message.header = Some(Header { durable: Some(true), ..Header::default() });
    // Encoded once: the figure is about the round trip, not our encoder.
    let payload = message.to_bytes()?;
    let mut enqueue = Duration::ZERO;
    for _ in 0..messages {
        let start = Instant::now();
        sender.send_bytes(payload.clone()).await?;
        enqueue += start.elapsed();
    }
    let mut receiver = client.receiver(&address, 1).await?;
    let mut dequeue = Duration::ZERO;
    for i in 0..messages {
        let start = Instant::now();
        let delivery =
            receiver.receive(RECEIVE_TIMEOUT).await?.with_context(|| format!("message {i}"))?;
        receiver.accept(&delivery).await?;
        dequeue += start.elapsed();
    }
    client.close().await?;
    Ok(Run { enqueue_ms: mean_ms(enqueue, messages), dequeue_ms: mean_ms(dequeue, messages) })
}

/// `fdatasync`s of 4 KiB overwrites in a preallocated file for `time`, per second (the
/// journal writes into preallocated segments).
fn fsync_rate(dir: &Path, time: Duration) -> anyhow::Result<f64> {
    let slots: u64 = 256;
    let path = dir.join("fsync-probe.bin");
    let file = File::create(&path)?;
    file.write_all_at(&vec![0u8; (slots * 4096) as usize], 0)?;
    file.sync_all()?;
    let block = vec![0xA5u8; 4096];
    let start = Instant::now();
    let mut n = 0u64;
    while start.elapsed() < time {
        file.write_all_at(&block, (n % slots) * 4096)?;
        file.sync_data()?;
        n += 1;
    }
    let rate = n as f64 / start.elapsed().as_secs_f64();
    drop(file);
    std::fs::remove_file(&path)?;
    Ok(rate)
}
