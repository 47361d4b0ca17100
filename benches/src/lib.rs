//! # benches: ferromq's benchmarks
//!
//! Run with `cargo bench -p benches` (add `-- --quick` for the bounded smoke mode CI runs).
//! Figures come only from here and from `ferromq perf`, never from timed tests.
//!
//! - `benches/stomp_queue.rs`: end-to-end queue scenarios through the real broker over STOMP
//!   on loopback (BENCHMARKS.md's S1, S2 and S6 shapes), optionally side by side with a peer
//!   broker (`FERROMQ_BENCH_PEER=host:port`, for example Apache ActiveMQ's STOMP connector),
//!   alternating runs and reporting the ratio.
//! - `benches/s7.rs`: seed 001's S7, per-call latency of confirmed persistent sends and of
//!   receive-and-acknowledge, over OpenWire and over AMQP 1.0, on the journal store (broker
//!   in process).
//! - `benches/store_compare.rs`: the seed scenarios S1-S8 through the `ferromq` binary against
//!   every store (journal, LSM on sled and on RocksDB, SQL on SQLite and on PostgreSQL), with
//!   the disk's fsync rate measured in the same run; a markdown table and an SVG chart in
//!   `target/bench-results/`.
//! - `benches/efficiency.rs`: the broker process's own CPU time (and read/write syscalls) per
//!   message, ferromq beside Apache ActiveMQ, in `scripts/compare-activemq`'s S1, S2, S3, S5
//!   and S6, with the clients' CPU, the disk's fsync rate and the loopback round trip of the
//!   same run, and S2's and S5's share of that physical floor.
//! - `benches/mqtt.rs`: MQTT throughput and CPU per message at QoS 0 and 1 (1 to 1, 50 to 1,
//!   1 to 50) and 10,000 idle MQTT connections' memory, ferromq (with and without fsync)
//!   beside Debian's mosquitto ([`mosquitto`]), the same in-process client driving both.
//! - `benches/paging.rs` and `benches/connections.rs`: the `ferromq` binary as its own
//!   process ([`process::FerromqProcess`]), so that its resident memory is the broker's alone.
//! - `benches/journal.rs`, `benches/stores.rs`, `benches/sql_stores.rs`: the stores alone,
//!   through the store contract, without the broker.
//!
//! The library holds what several benches share: [`process`] (the broker binary as a child
//! process, on a chosen store, with an AMQP connector when asked), [`s7`] (seed 001's
//! per-call runs and the disk's fsync probe), [`perf_pair`] (a `ferromq perf` consumer and
//! producer system against one queue), [`efficiency`] (a process's CPU and syscall counters,
//! ActiveMQ as a process, `ferromq perf` clients as child processes), [`forward`] (seed 004's
//! consume-and-forward flow), [`relay`] (S6's socket traffic alone: the CPU floor of its
//! reads and writes) and [`chart`] (a grouped bar chart in SVG).

use std::path::{Path, PathBuf};
use std::time::Duration;

pub mod chart;
pub mod efficiency;
pub mod forward;
pub mod mosquitto;
pub mod perf_pair;
pub mod process;
pub mod relay;
pub mod s7;

/// Sorted latency samples and their percentiles.
pub struct Latencies(Vec<Duration>);

impl Latencies {
    pub fn new(mut samples: Vec<Duration>) -> Self {
        samples.sort_unstable();
        Latencies(samples)
    }

    /// The `p`-th percentile (0-100), or zero without samples.
    pub fn percentile(&self, p: f64) -> Duration {
        if self.0.is_empty() {
            return Duration::ZERO;
        }
        let rank = ((p / 100.0) * (self.0.len() - 1) as f64).round() as usize;
        self.0[rank.min(self.0.len() - 1)]
    }
}

/// The median of a few runs' rates.
pub fn median(mut values: Vec<f64>) -> f64 {
    values.sort_by(|a, b| a.total_cmp(b));
    values.get(values.len() / 2).copied().unwrap_or(0.0)
}

/// Where benches write their tables and charts: `bench-results` under `CARGO_TARGET_DIR`, or
/// under the workspace's `target` when it is not set.
pub fn results_dir() -> PathBuf {
    let target = std::env::var_os("CARGO_TARGET_DIR")
        .map(PathBuf::from)
        .unwrap_or_else(|| Path::new(env!("CARGO_MANIFEST_DIR")).join("../target"));
    target.join("bench-results")
}

/// Writes a bench's table or chart to `path` and says where.
pub fn write_result(path: &Path, text: &str) -> anyhow::Result<()> {
    use anyhow::Context as _;
    std::fs::write(path, text).with_context(|| format!("writing {}", path.display()))?;
    println!("written to {}", path.display());
    Ok(())
}
