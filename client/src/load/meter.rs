//! [`Meter`]: live per-thread message counts that a sampler or a progress display reads
//! while a load run goes on.

use std::sync::atomic::{AtomicBool, AtomicU64, Ordering};
use std::sync::{Arc, OnceLock};
use std::time::Instant;

use tokio::sync::Notify;

/// Live counts of one load run, one counter per thread, shared between the run's threads
/// (which add to them) and whoever watches (which reads them).
///
/// Each thread counts a message once it is sent (confirmed, for synchronous sends) or
/// received and acknowledged. [`Meter::take`] reads and resets a thread's count since the
/// last take (the perf sampler's per-interval throughput); [`Meter::total`] never resets.
/// Latencies are recorded only while [`Meter::is_measuring`], so a sampler can leave ramp-up
/// and ramp-down out of the percentiles as it leaves them out of the throughput.
#[derive(Debug, Clone)]
pub struct Meter {
    inner: Arc<Inner>,
}

#[derive(Debug)]
struct Inner {
    since_take: Vec<AtomicU64>,
    totals: Vec<AtomicU64>,
    measuring: AtomicBool,
    started: OnceLock<Instant>,
    start_signal: Notify,
}

impl Meter {
    /// A meter for `threads` threads, measuring from the start.
    pub fn new(threads: usize) -> Meter {
        let counters = || (0..threads).map(|_| AtomicU64::new(0)).collect();
        Meter {
            inner: Arc::new(Inner {
                since_take: counters(),
                totals: counters(),
                measuring: AtomicBool::new(true),
                started: OnceLock::new(),
                start_signal: Notify::new(),
            }),
        }
    }

    /// How many threads it counts.
    pub fn threads(&self) -> usize {
        self.inner.totals.len()
    }

    /// Counts one message of `thread` (ignored for a thread the meter does not have).
    pub fn count(&self, thread: usize) {
        if let (Some(since), Some(total)) =
            (self.inner.since_take.get(thread), self.inner.totals.get(thread))
        {
            since.fetch_add(1, Ordering::Relaxed);
            total.fetch_add(1, Ordering::Relaxed);
        }
    }

    /// `thread`'s messages since the last take, resetting them to zero.
    pub fn take(&self, thread: usize) -> u64 {
        self.inner.since_take.get(thread).map_or(0, |count| count.swap(0, Ordering::Relaxed))
    }

    /// Every thread's messages since the last take, resetting them.
    pub fn take_all(&self) -> Vec<u64> {
        (0..self.threads()).map(|thread| self.take(thread)).collect()
    }

    /// `thread`'s messages since the run started.
    pub fn total(&self, thread: usize) -> u64 {
        self.inner.totals.get(thread).map_or(0, |count| count.load(Ordering::Relaxed))
    }

    /// All threads' messages since the run started.
    pub fn grand_total(&self) -> u64 {
        (0..self.threads()).map(|thread| self.total(thread)).sum()
    }

    /// Whether latencies are being recorded now.
    pub fn is_measuring(&self) -> bool {
        self.inner.measuring.load(Ordering::Relaxed)
    }

    /// Starts or stops recording latencies.
    pub fn set_measuring(&self, measuring: bool) {
        self.inner.measuring.store(measuring, Ordering::Relaxed);
    }

    /// Marks the run's clock start (the producers' start, the consumers' first message);
    /// later calls change nothing. Returns the start.
    pub fn mark_start(&self) -> Instant {
        let start = *self.inner.started.get_or_init(Instant::now);
        self.inner.start_signal.notify_waiters();
        start
    }

    /// The run's clock start, once marked.
    pub fn started(&self) -> Option<Instant> {
        self.inner.started.get().copied()
    }

    /// Waits until the run's clock starts.
    pub async fn wait_start(&self) -> Instant {
        loop {
            let notified = self.inner.start_signal.notified();
            if let Some(start) = self.started() {
                return start;
            }
            notified.await;
        }
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn take_resets_and_total_keeps() {
        let meter = Meter::new(2);
        meter.count(0);
        meter.count(0);
        meter.count(1);
        meter.count(7); // not a thread: ignored
        assert_eq!(meter.take_all(), vec![2, 1]);
        meter.count(1);
        assert_eq!(meter.take_all(), vec![0, 1]);
        assert_eq!((meter.total(0), meter.total(1), meter.grand_total()), (2, 2, 4));
    }

    #[tokio::test]
    async fn the_start_is_marked_once() {
        let meter = Meter::new(1);
        assert!(meter.started().is_none());
        let waiter = tokio::spawn({
            let meter = meter.clone();
            async move { meter.wait_start().await }
        });
        tokio::task::yield_now().await;
        let first = meter.mark_start();
        assert_eq!(meter.mark_start(), first);
        assert_eq!(waiter.await.expect("waiter"), first);
    }
}
