//! Seed 001's scenario S7: one thread enqueues 1,000 persistent 1 KiB messages one by one,
//! each send waiting for the broker's confirmation, then dequeues them one by one; the
//! figure is the mean time per call, over OpenWire and over AMQP 1.0, against the journal
//! store with its fsyncs (the default).
//!
//! How each protocol sends and receives is in `benches::s7` (shared with `store_compare`,
//! which runs the same calls against every store through the broker binary).
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

use std::path::PathBuf;
use std::time::Duration;

use anyhow::Context;
use benches::s7::{fsync_rate, Protocol, Run, MESSAGE_SIZE, SEED};
use benches::{median, results_dir};

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
            Protocol::BOTH.iter().map(|protocol| (*protocol, Vec::new())).collect();
        for run in 0..runs {
            for (protocol, runs) in &mut results {
                let queue = format!("s7.{}.{run}", protocol.name().replace(' ', "-"));
                let addr = match protocol {
                    Protocol::OpenWire => openwire,
                    Protocol::Amqp => amqp,
                };
                let result = benches::s7::run(*protocol, addr, &queue, messages)
                    .await
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
        let client = protocol.client();
        table.push_str(&format!("| {client} | ferromq journal | {enqueue:.3} | {dequeue:.3} |\n"));
    }
    for (protocol, store, enqueue, dequeue) in SEED {
        table.push_str(&format!(
            "| {protocol} (seed 001) | ActiveMQ 5.9 {store} | {enqueue} | {dequeue} |\n"
        ));
    }
    println!("\n{table}");
    let results_dir = results_dir();
    std::fs::create_dir_all(&results_dir)?;
    let path = results_dir.join("s7.md");
    std::fs::write(&path, &table).with_context(|| format!("writing {}", path.display()))?;
    println!("written to {}", path.display());
    Ok(())
}
