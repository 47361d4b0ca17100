//! Seed 001's scenario S7, the parts shared by `benches/s7.rs` (journal, broker in process)
//! and `benches/store_compare.rs` (every store, the broker as its own process): one thread
//! enqueues persistent 1 KiB messages one by one, each send waiting for the broker's
//! confirmation, then dequeues them one by one; the figure is the mean time per call.
//!
//! - OpenWire ([`run_openwire`], `client::openwire`): a persistent send is synchronous (the
//!   broker's Response comes once the message is on disk); a dequeue is `receive` plus an
//!   individual `ack`, with the client's default prefetch (seed 001's ActiveMQ client had
//!   prefetch on).
//! - AMQP ([`run_amqp`], `client::amqp`): an unsettled durable transfer, the call returning
//!   with the `accepted` disposition; a dequeue is a receive on a link with credit 1 plus
//!   `accept` (which grants the next credit in the same write), as the seed's Qpid client did.
//!
//! [`fsync_rate`] measures the disk the figures are about, in the same run, because these
//! machines' virtual disks vary with load.

use std::fs::File;
use std::net::SocketAddr;
use std::os::unix::fs::FileExt;
use std::path::Path;
use std::time::{Duration, Instant};

use anyhow::Context;
use bytes::Bytes;
use client::amqp::{AmqpClient, AmqpOptions, Header, Message};
use client::openwire::{
    Destination, OpenWireClient, OpenWireOptions, OutgoingMessage, SessionMode, SubscribeOptions,
};

use crate::efficiency::thread_cpu_time;

/// The body size of every S7 message, as in the seed.
pub const MESSAGE_SIZE: usize = 1024;
const RECEIVE_TIMEOUT: Duration = Duration::from_secs(30);

/// Seed 001's figures (protocol, store, enqueue ms, dequeue ms), as the seed gives them:
/// ActiveMQ 5.9.0, client on another VM over a gigabit LAN.
pub const SEED: &[(&str, &str, &str, &str)] = &[
    ("OpenWire", "KahaDB", "57.9", "0.3"),
    ("OpenWire", "LevelDB (Java)", "28.6", "0.2"),
    ("OpenWire", "LevelDB (JNI)", "26.3", "0.2"),
    ("AMQP (Qpid JMS)", "KahaDB", "24.0", "25.7"),
    ("AMQP (Qpid JMS)", "LevelDB (Java)", "0.9", "1.0"),
    ("AMQP (Qpid JMS)", "LevelDB (JNI)", "0.9", "0.9"),
];

/// The two protocols seed 001 compares.
#[derive(Clone, Copy, PartialEq, Eq, Debug)]
pub enum Protocol {
    OpenWire,
    Amqp,
}

impl Protocol {
    pub const BOTH: [Protocol; 2] = [Protocol::OpenWire, Protocol::Amqp];

    pub fn name(self) -> &'static str {
        match self {
            Protocol::OpenWire => "OpenWire",
            Protocol::Amqp => "AMQP 1.0",
        }
    }

    /// The client that speaks it, for tables.
    pub fn client(self) -> &'static str {
        match self {
            Protocol::OpenWire => "OpenWire (client::openwire)",
            Protocol::Amqp => "AMQP 1.0 (client::amqp)",
        }
    }
}

/// Mean milliseconds per call of one run.
#[derive(Clone, Copy, Debug)]
pub struct Run {
    pub enqueue_ms: f64,
    pub dequeue_ms: f64,
}

/// One S7 run of `messages` over `protocol` against the connector at `addr` (OpenWire's or
/// AMQP's), on a queue of its own.
pub async fn run(
    protocol: Protocol,
    addr: SocketAddr,
    queue: &str,
    messages: usize,
) -> anyhow::Result<Run> {
    match protocol {
        Protocol::OpenWire => run_openwire(addr, queue, messages).await,
        Protocol::Amqp => run_amqp(addr, queue, messages).await,
    }
}

fn body() -> Bytes {
    Bytes::from((0..MESSAGE_SIZE).map(|i| (i % 251) as u8).collect::<Vec<u8>>())
}

fn mean_ms(total: Duration, calls: usize) -> f64 {
    total.as_secs_f64() * 1000.0 / calls.max(1) as f64
}

/// S7 over OpenWire: synchronous persistent sends, then receive plus individual ack.
pub async fn run_openwire(addr: SocketAddr, queue: &str, messages: usize) -> anyhow::Result<Run> {
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

/// S7 over AMQP 1.0: unsettled durable transfers until `accepted`, then receive with credit
/// 1 plus accept.
pub async fn run_amqp(addr: SocketAddr, queue: &str, messages: usize) -> anyhow::Result<Run> {
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

/// `fdatasync`s of 4 KiB overwrites in a preallocated file in `dir` for `time`, per second
/// (the journal writes into preallocated segments).
pub fn fsync_rate(dir: &Path, time: Duration) -> anyhow::Result<f64> {
    fsync_probe(dir, time).map(|probe| probe.per_second)
}

/// What [`fsync_probe`] measured.
#[derive(Debug, Clone, Copy)]
pub struct FsyncProbe {
    /// `fdatasync`s per second.
    pub per_second: f64,
    /// The CPU time (user and system) of a write and its `fdatasync`: a broker spends it on
    /// every sync, whatever else it does.
    pub cpu_per_sync: Duration,
}

/// [`fsync_rate`], with the CPU each sync cost the probing thread.
pub fn fsync_probe(dir: &Path, time: Duration) -> anyhow::Result<FsyncProbe> {
    let slots: u64 = 256;
    let path = dir.join("fsync-probe.bin");
    let file = File::create(&path)?;
    file.write_all_at(&vec![0u8; (slots * 4096) as usize], 0)?;
    file.sync_all()?;
    let block = vec![0xA5u8; 4096];
    let cpu_before = thread_cpu_time()?;
    let start = Instant::now();
    let mut n = 0u64;
    while start.elapsed() < time {
        file.write_all_at(&block, (n % slots) * 4096)?;
        file.sync_data()?;
        n += 1;
    }
    let per_second = n as f64 / start.elapsed().as_secs_f64();
    let cpu = thread_cpu_time()?.saturating_sub(cpu_before);
    drop(file);
    std::fs::remove_file(&path)?;
    Ok(FsyncProbe { per_second, cpu_per_sync: cpu / u32::try_from(n.max(1)).unwrap_or(u32::MAX) })
}
