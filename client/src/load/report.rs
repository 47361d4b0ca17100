//! [`LoadReport`], [`Latencies`] and the small histogram behind them.

use std::fmt;
use std::time::Duration;

/// Which side of a load run a report is about.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub enum Role {
    /// Messages sent.
    Producer,
    /// Messages received.
    Consumer,
}

/// The outcome of a load run.
#[derive(Debug, Clone, PartialEq)]
pub struct LoadReport {
    /// Producer or consumer.
    pub role: Role,
    /// Messages sent (confirmed where the run waited for confirmations) or received and
    /// acknowledged, all threads together.
    pub messages: u64,
    /// The messages asked for: the per-thread count times the number of threads. A consumer
    /// stopped by its receive timeout reports fewer.
    pub expected: u64,
    /// From the moment every thread was ready (producer) or the first message arrived
    /// (consumer) to the last confirmed message.
    pub elapsed: Duration,
    /// Messages per thread, in thread order (`producer-1` first).
    pub per_thread: Vec<u64>,
    /// Percentiles of what the run waited for, when it waited for something.
    pub latency: Option<Latencies>,
}

impl LoadReport {
    /// Messages per second over [`LoadReport::elapsed`]; `None` when nothing was timed.
    pub fn rate(&self) -> Option<f64> {
        let seconds = self.elapsed.as_secs_f64();
        (seconds > 0.0 && self.messages > 0).then(|| self.messages as f64 / seconds)
    }

    /// Whether every thread got through its message count.
    pub fn is_complete(&self) -> bool {
        self.messages >= self.expected
    }
}

impl fmt::Display for LoadReport {
    /// `Produced 10000 messages in 1.23 s: 8130 msgs/s (send latency p50 0.12 ms, p90
    /// 0.20 ms, p99 0.40 ms, max 3.1 ms)`; `Consumed 42 of 1000 messages ...` when a
    /// consumer stopped early.
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        let verb = match self.role {
            Role::Producer => "Produced",
            Role::Consumer => "Consumed",
        };
        write!(f, "{verb} {}", self.messages)?;
        if !self.is_complete() {
            write!(f, " of {}", self.expected)?;
        }
        write!(f, " messages in {:.2} s", self.elapsed.as_secs_f64())?;
        if let Some(rate) = self.rate() {
            write!(f, ": {rate:.0} msgs/s")?;
        }
        if let Some(latency) = &self.latency {
            write!(f, " ({latency})")?;
        }
        Ok(())
    }
}

/// Percentiles of one kind of wait, e.g. from a SEND to its receipt.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub struct Latencies {
    /// What was measured: `send latency` (SEND to RECEIPT), `commit latency` (COMMIT to
    /// RECEIPT), `ack latency` (ACK to RECEIPT) or `gap between messages` (a consumer's
    /// inter-arrival time).
    pub what: &'static str,
    /// How many samples.
    pub count: u64,
    /// The median.
    pub p50: Duration,
    /// The 90th percentile.
    pub p90: Duration,
    /// The 99th percentile.
    pub p99: Duration,
    /// The largest sample.
    pub max: Duration,
}

impl fmt::Display for Latencies {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        write!(
            f,
            "{} p50 {}, p90 {}, p99 {}, max {}",
            self.what,
            millis(self.p50),
            millis(self.p90),
            millis(self.p99),
            millis(self.max)
        )
    }
}

/// `0.12 ms`, `3.1 ms`, `250 ms`: about three significant digits.
fn millis(duration: Duration) -> String {
    let ms = duration.as_secs_f64() * 1000.0;
    if ms < 10.0 {
        format!("{ms:.2} ms")
    } else if ms < 100.0 {
        format!("{ms:.1} ms")
    } else {
        format!("{ms:.0} ms")
    }
}

/// Sub-buckets per power of two: values are kept to within 1/64 (1.6 %).
const SUB_BITS: u32 = 6;
const SUB_BUCKETS: u64 = 1 << SUB_BITS;

/// A log-linear histogram of durations in nanoseconds: constant memory whatever the
/// message count, each value kept to within 1.6 %, the maximum kept exactly.
#[derive(Debug, Clone, Default)]
pub(crate) struct Histogram {
    counts: Vec<u64>,
    total: u64,
    max: u64,
}

impl Histogram {
    pub(crate) fn record(&mut self, value: Duration) {
        let nanos = u64::try_from(value.as_nanos()).unwrap_or(u64::MAX);
        let index = bucket(nanos);
        if self.counts.len() <= index {
            self.counts.resize(index + 1, 0);
        }
        self.counts[index] += 1;
        self.total += 1;
        self.max = self.max.max(nanos);
    }

    pub(crate) fn merge(&mut self, other: &Histogram) {
        if self.counts.len() < other.counts.len() {
            self.counts.resize(other.counts.len(), 0);
        }
        for (mine, theirs) in self.counts.iter_mut().zip(&other.counts) {
            *mine += theirs;
        }
        self.total += other.total;
        self.max = self.max.max(other.max);
    }

    /// The value below which `quantile` (0 to 1) of the samples fall: the upper end of
    /// the bucket holding that rank, never above the maximum.
    fn value_at(&self, quantile: f64) -> Duration {
        if self.total == 0 {
            return Duration::ZERO;
        }
        let rank = ((quantile * self.total as f64).ceil() as u64).clamp(1, self.total);
        let mut seen = 0;
        for (index, count) in self.counts.iter().enumerate() {
            seen += count;
            if seen >= rank {
                return Duration::from_nanos(bucket_high(index).min(self.max));
            }
        }
        Duration::from_nanos(self.max)
    }

    /// The percentiles, labelled `what`; `None` without samples.
    pub(crate) fn latencies(&self, what: &'static str) -> Option<Latencies> {
        (self.total > 0).then(|| Latencies {
            what,
            count: self.total,
            p50: self.value_at(0.50),
            p90: self.value_at(0.90),
            p99: self.value_at(0.99),
            max: Duration::from_nanos(self.max),
        })
    }
}

/// Values below 64 have a bucket each; above, each power of two is split in 64.
fn bucket(value: u64) -> usize {
    if value < SUB_BUCKETS {
        return value as usize;
    }
    let magnitude = 63 - value.leading_zeros(); // >= SUB_BITS
    let shift = magnitude - SUB_BITS;
    let sub = (value >> shift) - SUB_BUCKETS; // 0..64
    ((u64::from(shift) + 1) * SUB_BUCKETS + sub) as usize
}

/// The largest value that falls in bucket `index`.
fn bucket_high(index: usize) -> u64 {
    let index = index as u64;
    if index < SUB_BUCKETS {
        return index;
    }
    let shift = index / SUB_BUCKETS - 1;
    let sub = index % SUB_BUCKETS + SUB_BUCKETS;
    let high = (u128::from(sub + 1) << shift) - 1;
    u64::try_from(high).unwrap_or(u64::MAX)
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn buckets_are_contiguous_and_tight() {
        let mut previous_high = None;
        for index in 0..(40 * SUB_BUCKETS as usize) {
            let high = bucket_high(index);
            assert_eq!(bucket(high), index, "the top of bucket {index} lands in it");
            if let Some(previous) = previous_high {
                assert_eq!(bucket(previous + 1), index, "no gap before bucket {index}");
            }
            previous_high = Some(high);
        }
        for value in [1u64, 63, 64, 65, 1000, 123_456, 10_000_000_000, u64::MAX / 3] {
            let high = bucket_high(bucket(value));
            assert!(high >= value && (high - value) as f64 <= value as f64 / 60.0, "{value}");
        }
    }

    #[test]
    fn percentiles_of_a_known_distribution() {
        let mut histogram = Histogram::default();
        for micros in 1..=1000u64 {
            histogram.record(Duration::from_micros(micros));
        }
        let latencies = histogram.latencies("send latency").expect("samples");
        assert_eq!(latencies.count, 1000);
        let close = |actual: Duration, micros: u64| {
            let expected = micros as f64 * 1000.0;
            let actual = actual.as_nanos() as f64;
            assert!((actual - expected).abs() <= expected / 60.0, "{actual} vs {expected}");
        };
        close(latencies.p50, 500);
        close(latencies.p90, 900);
        close(latencies.p99, 990);
        assert_eq!(latencies.max, Duration::from_micros(1000));

        let mut other = Histogram::default();
        other.record(Duration::from_secs(2));
        histogram.merge(&other);
        let merged = histogram.latencies("x").expect("samples");
        assert_eq!((merged.count, merged.max), (1001, Duration::from_secs(2)));
        assert!(Histogram::default().latencies("x").is_none());
    }

    #[test]
    fn report_summary_reads_like_the_brief() {
        let report = LoadReport {
            role: Role::Producer,
            messages: 10_000,
            expected: 10_000,
            elapsed: Duration::from_millis(1230),
            per_thread: vec![10_000],
            latency: Some(Latencies {
                what: "send latency",
                count: 10_000,
                p50: Duration::from_micros(120),
                p90: Duration::from_micros(200),
                p99: Duration::from_micros(400),
                max: Duration::from_micros(3100),
            }),
        };
        assert_eq!(
            report.to_string(),
            "Produced 10000 messages in 1.23 s: 8130 msgs/s (send latency p50 0.12 ms, \
             p90 0.20 ms, p99 0.40 ms, max 3.10 ms)"
        );
        let partial = LoadReport {
            role: Role::Consumer,
            messages: 42,
            expected: 1000,
            elapsed: Duration::ZERO,
            per_thread: vec![42],
            latency: None,
        };
        assert_eq!(partial.to_string(), "Consumed 42 of 1000 messages in 0.00 s");
        assert!(!partial.is_complete());
    }
}
