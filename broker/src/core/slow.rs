//! Slow consumers, as ActiveMQ detects and handles them: detected by each queue task, reported
//! by an advisory, and optionally aborted by the destination policy's
//! `slow_consumer_strategy` (ActiveMQ's `AbortSlowConsumerStrategy`).
//!
//! A consumer is slow while its prefetch is full and messages wait that it could take: for a
//! topic subscriber, its subscription queue holds messages beyond those in flight to it; for
//! a queue consumer, the queue has ready messages for it (its selector and message groups
//! considered). Each queue task looks after every command, once its dispatch is done, and
//! keeps per consumer a [`SlowState`]: since when it is slow, and for how many consecutive
//! checks. Becoming slow publishes `ActiveMQ.Advisory.SlowConsumer.<Type>.<name>` when the
//! policy has `advisory_for_slow_consumers`.
//!
//! With a strategy, the queue task also checks every `check_period` (a timer only in queues
//! whose policy has one): a consumer slow for `max_slow_duration`, or at `max_slow_count`
//! consecutive checks, is aborted. The queue does not drop the consumer itself: it sends a
//! [`ConsumerNotice::Abort`] to the consumer's connection, whose adapter closes it the way
//! its protocol can (OpenWire: a ConsumerControl with `close`, after which the JMS client
//! closes the consumer, as with ActiveMQ; or a ConnectionError and the close of the whole
//! connection with `abort_connection`; STOMP, which cannot close one subscription: an ERROR
//! frame naming the subscription, then the close). The consumer's in-flight messages then go
//! back to the queue by the usual removal path.
//!
//! Non-durable topic subscribers can also be bounded by `pending_message_limit` (ActiveMQ's
//! `constantPendingMessageLimitStrategy`): the subscriber's queue keeps at most that many
//! messages waiting beyond those in flight, discarding the oldest, so a slow subscriber
//! neither grows without bound nor, through its queue's memory gate, stalls the topic's
//! producers.

use std::time::Duration;

use conf::SlowConsumerStrategy;
use store::Destination;
use tokio::time::{Instant, Interval};

use super::types::ConsumerId;

/// What the broker tells a connection about one of its consumers.
#[derive(Debug, Clone, PartialEq, Eq)]
#[non_exhaustive]
pub enum ConsumerNotice {
    /// The slow consumer strategy gave up on the consumer: close it, or the whole connection
    /// when `close_connection`.
    Abort {
        consumer: ConsumerId,
        /// What it consumes.
        destination: Destination,
        close_connection: bool,
        /// Why, for the client and the log.
        reason: String,
    },
}

/// Where the broker sends a connection its [`ConsumerNotice`]s. The notices travel boxed: an
/// unbounded channel allocates room for 32 items as soon as it exists, every connection has
/// one, and it is nearly always empty (2 KiB a connection with the notice inline, 256 bytes
/// boxed).
#[derive(Debug, Clone)]
pub struct NoticeSender(tokio::sync::mpsc::UnboundedSender<Box<ConsumerNotice>>);

/// A connection's end of its notices channel.
pub type NoticeReceiver = tokio::sync::mpsc::UnboundedReceiver<Box<ConsumerNotice>>;

impl NoticeSender {
    /// A channel for one connection's notices.
    pub fn channel() -> (NoticeSender, NoticeReceiver) {
        let (sender, receiver) = tokio::sync::mpsc::unbounded_channel();
        (NoticeSender(sender), receiver)
    }

    /// Sends `notice`; it comes back if the connection is gone.
    pub fn send(&self, notice: ConsumerNotice) -> Result<(), ConsumerNotice> {
        self.0.send(Box::new(notice)).map_err(|unsent| *unsent.0)
    }
}

/// A consumer's slowness, as its queue task tracks it.
#[derive(Debug, Clone, Copy, Default)]
pub(crate) struct SlowState {
    /// When it became slow; `None` while it is not.
    since: Option<Instant>,
    /// Consecutive periodic checks that found it slow.
    checks: u32,
    /// An abort was sent for it: not sent again while the connection closes it.
    aborted: bool,
}

impl SlowState {
    pub fn is_slow(&self) -> bool {
        self.since.is_some()
    }

    /// Records whether the consumer is slow now; true when it has just become slow.
    pub fn observe(&mut self, slow: bool, now: Instant) -> bool {
        match (slow, self.since) {
            (true, None) => {
                self.since = Some(now);
                self.checks = 0;
                true
            }
            (false, Some(_)) => {
                self.since = None;
                self.checks = 0;
                false
            }
            _ => false,
        }
    }

    /// A periodic check by `strategy`: true if the consumer is to be aborted now (once).
    pub fn check(&mut self, strategy: &SlowConsumerStrategy, now: Instant) -> bool {
        let Some(since) = self.since else { return false };
        if self.aborted {
            return false;
        }
        self.checks = self.checks.saturating_add(1);
        let by_count =
            strategy.max_slow_count > 0 && i64::from(self.checks) >= strategy.max_slow_count;
        let by_duration = !strategy.max_slow_duration.is_zero()
            && now.duration_since(since) >= strategy.max_slow_duration;
        self.aborted = by_count || by_duration;
        self.aborted
    }

    /// How long it has been slow, at `now`.
    pub fn slow_for(&self, now: Instant) -> Duration {
        self.since.map_or(Duration::ZERO, |since| now.duration_since(since))
    }

    pub fn checks(&self) -> u32 {
        self.checks
    }
}

/// The timer of a queue's periodic slow consumer check: only when its policy has a strategy
/// that can abort anything (ActiveMQ's does nothing without a count or duration limit).
pub(crate) fn check_timer(strategy: Option<&SlowConsumerStrategy>) -> Option<Interval> {
    let strategy = strategy?;
    if strategy.max_slow_count <= 0 && strategy.max_slow_duration.is_zero() {
        return None;
    }
    let period = strategy.check_period.max(Duration::from_millis(10));
    let mut timer = tokio::time::interval_at(Instant::now() + period, period);
    timer.set_missed_tick_behavior(tokio::time::MissedTickBehavior::Delay);
    Some(timer)
}

/// The next tick of the check; never, without a timer.
pub(crate) async fn next_check(timer: &mut Option<Interval>) {
    match timer {
        Some(timer) => {
            timer.tick().await;
        }
        None => std::future::pending().await,
    }
}

/// The reason an abort gives, worded like ActiveMQ's.
pub(crate) fn abort_reason(
    strategy: &SlowConsumerStrategy,
    state: &SlowState,
    now: Instant,
) -> String {
    format!(
        "Consumer was slow too often (>{} checks) or too long (>{} ms): slow for {} ms over {} \
         checks",
        strategy.max_slow_count,
        strategy.max_slow_duration.as_millis(),
        state.slow_for(now).as_millis(),
        state.checks()
    )
}

#[cfg(test)]
mod tests {
    use super::*;

    fn strategy(count: i64, duration_ms: u64) -> SlowConsumerStrategy {
        SlowConsumerStrategy {
            max_slow_count: count,
            max_slow_duration: Duration::from_millis(duration_ms),
            check_period: Duration::from_millis(100),
            abort_connection: false,
        }
    }

    #[test]
    fn becoming_slow_is_reported_once_and_recovery_resets_the_count() {
        let start = Instant::now();
        let mut state = SlowState::default();
        assert!(!state.observe(false, start));
        assert!(state.observe(true, start), "became slow");
        assert!(!state.observe(true, start), "still slow: not reported again");
        assert!(!state.check(&strategy(3, 0), start));
        assert_eq!(state.checks(), 1);
        assert!(!state.observe(false, start));
        assert!(!state.is_slow());
        assert_eq!(state.checks(), 0, "consecutive checks only");
    }

    #[test]
    fn aborted_at_the_count_or_the_duration_and_only_once() {
        let start = Instant::now();
        let mut state = SlowState::default();
        state.observe(true, start);
        assert!(!state.check(&strategy(2, 0), start));
        assert!(state.check(&strategy(2, 0), start), "second consecutive check");
        assert!(!state.check(&strategy(2, 0), start), "aborted once");

        let mut state = SlowState::default();
        state.observe(true, start);
        let strategy = strategy(-1, 500);
        assert!(!state.check(&strategy, start + Duration::from_millis(499)));
        assert!(state.check(&strategy, start + Duration::from_millis(500)));
    }

    #[test]
    fn no_timer_without_a_limit() {
        assert!(check_timer(None).is_none());
        assert!(check_timer(Some(&strategy(-1, 0))).is_none());
    }
}
