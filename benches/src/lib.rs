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
//!   receive-and-acknowledge, over OpenWire and over AMQP 1.0, on the journal store.
//!
//! - `benches/paging.rs` and `benches/connections.rs`: the `ferromq` binary as its own
//!   process ([`process::FerromqProcess`]), so that its resident memory is the broker's alone.
//!
//! Each scenario runs on the journal store and (persistent ones) on the memory store. The
//! store comparisons of the seeds grow as the LSM and SQL stores arrive.

use std::time::Duration;

pub mod process;

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
