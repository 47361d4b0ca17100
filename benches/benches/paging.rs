//! Bounded memory with paging (issue 7's memory benchmark): a queue of 2,000,000 persistent
//! 1 KiB messages with no consumer, on the journal store with the default memory limits
//! (`destinations.memory_limit` 64 MiB, `broker.memory_limit` 1 GiB), then drained completely
//! and in order. Reports the peak resident memory while filling and while draining.
//!
//! `cargo bench -p benches --bench paging` runs the full count; `-- --quick` sends 100,000
//! (CI's smoke mode); `FERROMQ_BENCH_PAGING_MESSAGES=N` sets another count.
//!
//! The broker runs in this process, so the figure is the peak RSS (`VmHWM` in
//! `/proc/self/status`) of the broker plus one STOMP producer and consumer: an upper bound of
//! the broker's own. The aim is the destination limit plus 100 MB. The producer sends without
//! receipts except one every [`PACE`] messages and on its last (receipts come in order, each
//! once its message is durable).

use std::time::{Duration, Instant};

use anyhow::{bail, ensure, Context};
use client::{AckMode, ConnectOptions, StompClient};

const FULL: u64 = 2_000_000;
const QUICK: u64 = 100_000;
const BODY: usize = 1024;
const QUEUE: &str = "/queue/paging.bench";
/// The producer waits for a receipt every this many messages. Without producer flow control
/// (not built yet) an unpaced producer outruns the disk, and the journal's backlog of bodies
/// not yet written (held in memory until written) grows without bound: that measures the
/// missing flow control, not the queue. ActiveMQ would block such a producer.
const PACE: u64 = 1000;

/// A line of `/proc/self/status` in KiB (`VmRSS`, `VmHWM`).
fn status_kb(field: &str) -> u64 {
    let status = std::fs::read_to_string("/proc/self/status").unwrap_or_default();
    status
        .lines()
        .find(|line| line.starts_with(field))
        .and_then(|line| line.split_whitespace().nth(1))
        .and_then(|kb| kb.parse().ok())
        .unwrap_or(0)
}

fn mib(kb: u64) -> f64 {
    kb as f64 / 1024.0
}

fn main() -> anyhow::Result<()> {
    let quick = std::env::args().any(|a| a == "--quick");
    let messages: u64 = match std::env::var("FERROMQ_BENCH_PAGING_MESSAGES") {
        Ok(text) => {
            text.parse().with_context(|| format!("FERROMQ_BENCH_PAGING_MESSAGES={text}"))?
        }
        Err(_) if quick => QUICK,
        Err(_) => FULL,
    };
    let runtime = tokio::runtime::Builder::new_multi_thread().enable_all().build()?;
    runtime.block_on(async move {
        let data = tempfile::tempdir()?;
        let mut config = conf::Config::default();
        config.broker.data_dir = data.path().to_path_buf();
        config.transport.connectors = vec!["stomp://127.0.0.1:0".parse()?];
        config.admin.enabled = false;
        let limit_kb = config.destinations.memory_limit / 1024;
        let broker = broker::Broker::start(config).await?;
        let addr = broker.stomp_addr().context("no STOMP connector")?;
        let at_start = status_kb("VmRSS:");

        let started = Instant::now();
        let producer = StompClient::connect(addr, ConnectOptions::default()).await?;
        let body = bytes::Bytes::from(vec![b'p'; BODY]);
        for sequence in 1..messages {
            let text = sequence.to_string();
            let headers = [("persistent", "true"), ("x-sequence", text.as_str())];
            if sequence % PACE == 0 {
                producer.send_with_receipt(QUEUE, body.clone(), &headers).await?;
            } else {
                producer.send(QUEUE, body.clone(), &headers).await?;
            }
        }
        let last = messages.to_string();
        producer
            .send_with_receipt(
                QUEUE,
                body.clone(),
                &[("persistent", "true"), ("x-sequence", &last)],
            )
            .await?;
        let filled_in = started.elapsed();
        let peak_filling = status_kb("VmHWM:");
        let stats = broker.queue_stats("paging.bench").await.context("the queue exists")?;
        ensure!(stats.ready as u64 == messages, "{} ready of {messages}", stats.ready);
        println!(
            "filled: RSS now {:.1} MiB, the queue holds {:.1} MiB of messages",
            mib(status_kb("VmRSS:")),
            stats.memory_bytes as f64 / (1 << 20) as f64
        );

        let started = Instant::now();
        let consumer = StompClient::connect(addr, ConnectOptions::default()).await?;
        let mut subscription = consumer.subscribe(QUEUE, AckMode::Auto, &[]).await?;
        for expected in 1..=messages {
            let message = subscription.recv_timeout(Duration::from_secs(60)).await?;
            let sequence: u64 =
                message.header("x-sequence").and_then(|s| s.parse().ok()).unwrap_or(0);
            if sequence != expected {
                bail!("message {sequence} came where {expected} was due");
            }
        }
        let drained_in = started.elapsed();
        let peak = status_kb("VmHWM:");
        broker.shutdown().await;

        let aim_kb = limit_kb + 100 * 1024;
        println!(
            "{:<10} {:>9} {:>9} {:>13} {:>13} {:>12} {:>12} {:>9}",
            "messages",
            "fill s",
            "drain s",
            "RSS at start",
            "peak filling",
            "peak total",
            "aim",
            "within"
        );
        println!(
            "{:<10} {:>9.1} {:>9.1} {:>9.1} MiB {:>9.1} MiB {:>8.1} MiB {:>8.1} MiB {:>9}",
            messages,
            filled_in.as_secs_f64(),
            drained_in.as_secs_f64(),
            mib(at_start),
            mib(peak_filling),
            mib(peak),
            mib(aim_kb),
            if peak < aim_kb { "yes" } else { "NO" }
        );
        anyhow::Ok(())
    })
}
