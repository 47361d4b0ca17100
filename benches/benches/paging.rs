//! Bounded memory with paging (issue 7's memory benchmark): a queue of 2,000,000 persistent
//! 1 KiB messages with no consumer, on the journal store with the default memory limits
//! (`destinations.memory_limit` 64 MiB, `broker.memory_limit` 1 GiB), then drained completely
//! and in order. The aim: the broker's resident memory stays under its destination memory
//! limit plus 100 MB (taken as 100 MiB) while filling and while draining.
//!
//! `cargo bench -p benches --bench paging` runs the full count; `-- --quick` sends 100,000
//! (CI's smoke mode: it reports the verdict but fails only on errors);
//! `FERROMQ_BENCH_PAGING_MESSAGES=N` sets another count.
//!
//! The broker is the release `ferromq` binary as its own process with the default
//! configuration ([`FerromqProcess`]); the producer and the consumer are STOMP clients in this
//! process. The figures are the broker's peak RSS (`VmHWM` in `/proc/<pid>/status`, reset
//! between the two phases), so nothing of the load generator is counted. The producer sends
//! without receipts except one every [`PACE`] messages and on its last (receipts come in
//! order, each once its message is durable), as the test of the binary does.

use std::time::{Duration, Instant};

use anyhow::{bail, ensure, Context};
use benches::process::FerromqProcess;
use client::{AckMode, ConnectOptions, StompClient};

const FULL: u64 = 2_000_000;
const QUICK: u64 = 100_000;
const BODY: usize = 1024;
const QUEUE: &str = "/queue/paging.bench";
/// The producer waits for a receipt every this many messages, so that it cannot run far
/// ahead of the broker: the benchmark measures the queue, not a backlog of unread sends.
const PACE: u64 = 1000;
/// The aim is the destination memory limit plus this much.
const AIM_MARGIN_KB: u64 = 100 * 1024;
/// Progress lines (resident memory as the queue grows and shrinks) per phase.
const PROGRESS_LINES: u64 = 10;

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
    ensure!(messages > 0, "FERROMQ_BENCH_PAGING_MESSAGES must be at least 1");
    let limit_kb = conf::Config::default().destinations.memory_limit / 1024;
    let aim_kb = limit_kb + AIM_MARGIN_KB;

    let dir = tempfile::tempdir()?;
    // The defaults: the journal store, 64 MiB per destination, 1 GiB for the broker.
    let broker = FerromqProcess::start(dir.path(), "")?;
    println!("ferromq pid {} on {}", broker.pid(), broker.stomp);
    let runtime = tokio::runtime::Builder::new_multi_thread().enable_all().build()?;
    let (at_start, peak_filling, filled_rss, filled_in, peak_draining, drained_rss, drained_in) =
        runtime.block_on(async {
            let at_start = broker.status_kb("VmRSS:");
            let every = (messages / PROGRESS_LINES).max(1);
            let progress = |phase: &str, done: u64| {
                if done.is_multiple_of(every) {
                    println!(
                        "{phase} {done:>9}: broker RSS {:>6.1} MiB, peak {:>6.1} MiB",
                        mib(broker.status_kb("VmRSS:")),
                        mib(broker.status_kb("VmHWM:"))
                    );
                }
            };

            let started = Instant::now();
            let producer = StompClient::connect(broker.stomp, ConnectOptions::default()).await?;
            let body = bytes::Bytes::from(vec![b'p'; BODY]);
            for sequence in 1..=messages {
                let text = sequence.to_string();
                let headers = [("persistent", "true"), ("x-sequence", text.as_str())];
                if sequence.is_multiple_of(PACE) || sequence == messages {
                    producer.send_with_receipt(QUEUE, body.clone(), &headers).await?;
                } else {
                    producer.send(QUEUE, body.clone(), &headers).await?;
                }
                progress("filled", sequence);
            }
            let filled_in = started.elapsed();
            let peak_filling = broker.status_kb("VmHWM:");
            // Settled: what the broker keeps for a full queue once the writes are done.
            tokio::time::sleep(Duration::from_secs(1)).await;
            let filled_rss = broker.status_kb("VmRSS:");
            broker.reset_peak_rss()?;

            let started = Instant::now();
            let consumer = StompClient::connect(broker.stomp, ConnectOptions::default()).await?;
            let mut subscription = consumer.subscribe(QUEUE, AckMode::Auto, &[]).await?;
            for expected in 1..=messages {
                let message = subscription.recv_timeout(Duration::from_secs(60)).await?;
                let sequence: u64 =
                    message.header("x-sequence").and_then(|s| s.parse().ok()).unwrap_or(0);
                if sequence != expected {
                    bail!("message {sequence} came where {expected} was due");
                }
                ensure!(message.body().len() == BODY, "message {sequence} lost its body");
                progress("drained", expected);
            }
            let drained_in = started.elapsed();
            if let Ok(extra) = subscription.recv_timeout(Duration::from_millis(500)).await {
                bail!("a message came after the last one: {:?}", extra.header("x-sequence"));
            }
            let peak_draining = broker.status_kb("VmHWM:");
            let drained_rss = broker.status_kb("VmRSS:");
            anyhow::Ok((
                at_start,
                peak_filling,
                filled_rss,
                filled_in,
                peak_draining,
                drained_rss,
                drained_in,
            ))
        })?;
    drop(broker);

    println!(
        "{:<10} {:>7} {:>8} {:>12} {:>12} {:>12} {:>13} {:>12} {:>10}",
        "messages",
        "fill s",
        "drain s",
        "RSS start",
        "peak fill",
        "RSS filled",
        "peak drain",
        "RSS drained",
        "aim"
    );
    println!(
        "{:<10} {:>7.1} {:>8.1} {:>8.1} MiB {:>8.1} MiB {:>8.1} MiB {:>9.1} MiB {:>8.1} MiB \
         {:>6.1} MiB",
        messages,
        filled_in.as_secs_f64(),
        drained_in.as_secs_f64(),
        mib(at_start),
        mib(peak_filling),
        mib(filled_rss),
        mib(peak_draining),
        mib(drained_rss),
        mib(aim_kb),
    );
    let met = peak_filling < aim_kb && peak_draining < aim_kb;
    println!(
        "{}: {messages} messages: broker peak RSS {:.1} MiB filling, {:.1} MiB draining (aim < \
         {:.1} MiB: destinations.memory_limit {:.0} MiB + 100 MiB){}",
        if met { "PASS" } else { "FAIL" },
        mib(peak_filling),
        mib(peak_draining),
        mib(aim_kb),
        mib(limit_kb),
        if quick { "; quick mode reports the aim without failing on it" } else { "" }
    );
    if !met && !quick {
        bail!("the aim was missed");
    }
    Ok(())
}
