//! [`LoadReport`], [`Latencies`] and the HdrHistogram behind them.

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
    /// The 99.9th percentile.
    pub p999: Duration,
    /// The largest sample.
    pub max: Duration,
}

impl fmt::Display for Latencies {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        write!(
            f,
            "{} p50 {}, p90 {}, p99 {}, p99.9 {}, max {}",
            self.what,
            millis(self.p50),
            millis(self.p90),
            millis(self.p99),
            millis(self.p999),
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

/// Latencies are kept in nanoseconds to three significant digits (0.1 %), from 1 ns up to
/// an hour; HdrHistogram keeps that in constant memory whatever the message count.
const SIGNIFICANT_DIGITS: u8 = 3;
/// The largest value recorded as itself; longer waits are recorded as this (an hour).
const HIGHEST_NANOS: u64 = 3_600_000_000_000;

/// A histogram of durations (HdrHistogram): constant memory, each value kept to within
/// 0.1 %, the maximum kept exactly up to an hour.
#[derive(Debug, Clone)]
pub(crate) struct Histogram {
    inner: hdrhistogram::Histogram<u64>,
}

impl Default for Histogram {
    fn default() -> Histogram {
        // The bounds are constants that HdrHistogram accepts; a failure here is a bug.
        #[allow(clippy::expect_used)]
        let inner = hdrhistogram::Histogram::new_with_bounds(1, HIGHEST_NANOS, SIGNIFICANT_DIGITS)
            .expect("valid histogram bounds");
        Histogram { inner }
    }
}

impl Histogram {
    pub(crate) fn record(&mut self, value: Duration) {
        let nanos = u64::try_from(value.as_nanos()).unwrap_or(u64::MAX).clamp(1, HIGHEST_NANOS);
        // Within the bounds by the clamp, so this cannot fail.
        let _ = self.inner.record(nanos);
    }

    pub(crate) fn merge(&mut self, other: &Histogram) {
        // Same bounds on both sides, so this cannot fail.
        let _ = self.inner.add(&other.inner);
    }

    /// The value below which `quantile` (0 to 1) of the samples fall.
    fn value_at(&self, quantile: f64) -> Duration {
        Duration::from_nanos(self.inner.value_at_quantile(quantile))
    }

    /// The percentiles, labelled `what`; `None` without samples.
    pub(crate) fn latencies(&self, what: &'static str) -> Option<Latencies> {
        (!self.inner.is_empty()).then(|| Latencies {
            what,
            count: self.inner.len(),
            p50: self.value_at(0.50),
            p90: self.value_at(0.90),
            p99: self.value_at(0.99),
            p999: self.value_at(0.999),
            max: Duration::from_nanos(self.inner.max()),
        })
    }
}

#[cfg(test)]
mod tests {
    use super::*;

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
            assert!((actual - expected).abs() <= expected / 500.0, "{actual} vs {expected}");
        };
        close(latencies.p50, 500);
        close(latencies.p90, 900);
        close(latencies.p99, 990);
        close(latencies.p999, 999);
        close(latencies.max, 1000);

        let mut other = Histogram::default();
        other.record(Duration::from_secs(2));
        histogram.merge(&other);
        let merged = histogram.latencies("x").expect("samples");
        assert_eq!(merged.count, 1001);
        close(merged.max, 2_000_000);
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
                p999: Duration::from_micros(900),
                max: Duration::from_micros(3100),
            }),
        };
        assert_eq!(
            report.to_string(),
            "Produced 10000 messages in 1.23 s: 8130 msgs/s (send latency p50 0.12 ms, \
             p90 0.20 ms, p99 0.40 ms, p99.9 0.90 ms, max 3.10 ms)"
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
