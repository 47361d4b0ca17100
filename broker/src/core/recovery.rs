//! Subscription recovery: the recent messages of a topic that a retroactive subscriber
//! receives before the live ones (ActiveMQ's `subscriptionRecoveryPolicy`).
//!
//! Each topic that was published to keeps a [`RecoveryBuffer`] in the routing table, shaped by
//! its policy's [`SubscriptionRecovery`]: nothing (no buffer is even allocated), the last N
//! messages, the last N bytes (the default, 64 KiB), the last message, or the messages of the
//! last duration. The buffers hold the same `Arc<Message>` the subscribers got, so a message
//! costs its bytes once however many buffers and queues hold it.
//!
//! Memory stays bounded whatever the policy: a buffer never holds more bytes than its topic's
//! memory limit (a timed or fixed-count policy on a busy topic would otherwise grow without
//! bound; the oldest messages go first), expired JMS messages are dropped as soon as a push or a
//! replay notices them, and the routing table counts every buffer's bytes in the broker's memory
//! usage, so that stored queues page out to make room for them. A timed buffer forgets what is
//! older than its duration when a message is pushed or replayed; a topic that goes quiet keeps
//! its last messages (within the limits) until then, or until the topic is removed.

use std::collections::{HashMap, VecDeque};
use std::sync::Arc;
use std::time::Duration;

use conf::SubscriptionRecovery;
use store::{Destination, DestinationKind, Message};
use tokio::time::Instant;

use super::policy::Policies;
use super::queue::MemoryLimits;
use super::types::now_millis;
use super::wildcard::DestinationFilter;

/// Every topic's recent messages, as its policy says; no buffer for a topic whose policy
/// keeps nothing. The buffers' bytes count in the broker's memory.
#[derive(Default)]
pub(crate) struct RecentMessages {
    buffers: HashMap<Destination, RecoveryBuffer>,
    policies: Arc<Policies>,
    memory: MemoryLimits,
}

impl RecentMessages {
    pub fn new(policies: Arc<Policies>, memory: MemoryLimits) -> RecentMessages {
        RecentMessages { buffers: HashMap::new(), policies, memory }
    }

    /// Keeps `message` (just published to `topic`) for retroactive subscribers, as the topic's
    /// subscription recovery policy says.
    pub fn remember(&mut self, topic: &Destination, message: &Arc<Message>) {
        let (now, now_millis) = (Instant::now(), now_millis());
        let buffer = match self.buffers.get_mut(topic) {
            Some(buffer) => buffer,
            None => {
                // Looked up once per topic, and again per send only for topics that keep
                // nothing (which then cost no allocation).
                let policy = self.policies.for_destination(topic);
                let ceiling = self.memory.with_destination_limit(policy.memory_limit);
                let Some(buffer) =
                    RecoveryBuffer::new(policy.subscription_recovery, ceiling.destination_limit())
                else {
                    return;
                };
                self.buffers.entry(topic.clone()).or_insert(buffer)
            }
        };
        let before = buffer.bytes();
        buffer.push(message.clone(), now, now_millis);
        self.memory.account_elsewhere(before, buffer.bytes());
    }

    /// The recent messages of every topic `filter` matches (temporary topics only for a
    /// `temporary` subscription), oldest first per topic.
    pub fn of(&mut self, filter: &DestinationFilter, temporary: bool) -> Vec<Arc<Message>> {
        let (now, now_millis) = (Instant::now(), now_millis());
        let mut recent = Vec::new();
        for (topic, buffer) in &mut self.buffers {
            if (topic.kind == DestinationKind::TempTopic) != temporary
                || !filter.matches(&topic.name)
            {
                continue;
            }
            let before = buffer.bytes();
            recent.extend(buffer.recover(now, now_millis).cloned());
            self.memory.account_elsewhere(before, buffer.bytes());
        }
        recent
    }

    /// Forgets a topic's recent messages (the topic is gone).
    pub fn forget(&mut self, topic: &Destination) {
        if let Some(buffer) = self.buffers.remove(topic) {
            self.memory.account_elsewhere(buffer.bytes(), 0);
        }
    }

    /// Forgets every topic's recent messages (the broker stops).
    pub fn forget_all(&mut self) {
        for (_, buffer) in self.buffers.drain() {
            self.memory.account_elsewhere(buffer.bytes(), 0);
        }
    }
}

/// A recent message with the time it was kept (for the timed policy).
#[derive(Debug)]
struct Recent {
    message: Arc<Message>,
    kept_at: Instant,
}

/// The recent messages of one topic, oldest first.
#[derive(Debug)]
pub(crate) struct RecoveryBuffer {
    policy: Kept,
    /// The most bytes the buffer holds whatever its policy: the topic's memory limit.
    ceiling: usize,
    messages: VecDeque<Recent>,
    /// [`Message::memory_size`] of every message held.
    bytes: usize,
    /// The earliest JMS expiration among the messages held (0: none expires), so that expired
    /// messages are looked for only once one may be.
    next_expiry: i64,
}

/// What a buffer keeps: the policy without its `None` case.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
enum Kept {
    Count(usize),
    Bytes(usize),
    Last,
    Duration(Duration),
}

impl RecoveryBuffer {
    /// A buffer for `policy`, holding at most `ceiling` bytes; `None` when the policy keeps
    /// nothing, so that such topics cost no allocation.
    pub fn new(policy: SubscriptionRecovery, ceiling: usize) -> Option<RecoveryBuffer> {
        let policy = match policy {
            SubscriptionRecovery::None => return None,
            SubscriptionRecovery::FixedCount { maximum_size } => Kept::Count(maximum_size),
            SubscriptionRecovery::FixedSize { maximum_size } => {
                Kept::Bytes(usize::try_from(maximum_size).unwrap_or(usize::MAX))
            }
            SubscriptionRecovery::LastImage => Kept::Last,
            SubscriptionRecovery::Timed { recover_duration_ms } => {
                Kept::Duration(recover_duration_ms)
            }
        };
        Some(RecoveryBuffer {
            policy,
            ceiling,
            messages: VecDeque::new(),
            bytes: 0,
            next_expiry: 0,
        })
    }

    /// Bytes of the messages held.
    pub fn bytes(&self) -> usize {
        self.bytes
    }

    /// Keeps `message`, just published, and forgets what the policy no longer covers. A
    /// message that has already expired (`now_millis` is the wall clock, for JMS expiration)
    /// is not kept.
    pub fn push(&mut self, message: Arc<Message>, now: Instant, now_millis: i64) {
        self.forget_expired(now, now_millis);
        if message.is_expired(now_millis) {
            return;
        }
        let expiration = message.headers.expiration;
        if expiration > 0 && (self.next_expiry == 0 || expiration < self.next_expiry) {
            self.next_expiry = expiration;
        }
        self.bytes += message.memory_size();
        self.messages.push_back(Recent { message, kept_at: now });
        let (count, bytes) = match self.policy {
            Kept::Count(count) => (count, self.ceiling),
            Kept::Bytes(bytes) => (usize::MAX, bytes.min(self.ceiling)),
            Kept::Last => (1, self.ceiling),
            Kept::Duration(_) => (usize::MAX, self.ceiling),
        };
        while self.messages.len() > count || self.bytes > bytes {
            if self.pop_oldest().is_none() {
                break;
            }
        }
    }

    /// The messages a retroactive subscriber gets now, oldest first, after forgetting those
    /// that are too old or expired.
    pub fn recover(
        &mut self,
        now: Instant,
        now_millis: i64,
    ) -> impl Iterator<Item = &Arc<Message>> {
        self.forget_expired(now, now_millis);
        self.messages.iter().map(|recent| &recent.message)
    }

    fn pop_oldest(&mut self) -> Option<Recent> {
        let oldest = self.messages.pop_front()?;
        self.bytes -= oldest.message.memory_size();
        Some(oldest)
    }

    /// Forgets messages older than a timed policy's duration and messages whose JMS
    /// expiration has passed.
    fn forget_expired(&mut self, now: Instant, now_millis: i64) {
        if let Kept::Duration(duration) = self.policy {
            while self.messages.front().is_some_and(|oldest| now - oldest.kept_at >= duration) {
                self.pop_oldest();
            }
        }
        if self.next_expiry == 0 || now_millis < self.next_expiry {
            return;
        }
        let mut bytes = 0;
        let mut next_expiry = 0;
        self.messages.retain(|recent| {
            if recent.message.is_expired(now_millis) {
                bytes += recent.message.memory_size();
                return false;
            }
            let expiration = recent.message.headers.expiration;
            if expiration > 0 && (next_expiry == 0 || expiration < next_expiry) {
                next_expiry = expiration;
            }
            true
        });
        self.bytes -= bytes;
        self.next_expiry = next_expiry;
    }
}

#[cfg(test)]
mod tests {
    use super::*;
    use store::{Destination, MessageId};

    const MIB: usize = 1 << 20;

    fn message(id: u64, body: &str) -> Arc<Message> {
        let mut message =
            Message::new(MessageId(id), format!("ID:t:1:1:{id:04}"), Destination::topic("T"));
        message.body = body.as_bytes().to_vec().into();
        Arc::new(message)
    }

    fn expiring(id: u64, expiration: i64) -> Arc<Message> {
        let mut message = (*message(id, "e")).clone();
        message.headers.expiration = expiration;
        Arc::new(message)
    }

    fn ids(buffer: &mut RecoveryBuffer, now: Instant, now_millis: i64) -> Vec<u64> {
        buffer.recover(now, now_millis).map(|m| m.id.0).collect()
    }

    fn filled(policy: SubscriptionRecovery, ceiling: usize, count: u64) -> RecoveryBuffer {
        let mut buffer = RecoveryBuffer::new(policy, ceiling).expect("a buffer");
        let now = Instant::now();
        for id in 1..=count {
            buffer.push(message(id, "0123456789"), now, 0);
        }
        buffer
    }

    #[test]
    fn no_recovery_allocates_no_buffer() {
        assert!(RecoveryBuffer::new(SubscriptionRecovery::None, MIB).is_none());
    }

    #[test]
    fn fixed_count_keeps_the_last_n_messages() {
        let mut buffer = filled(SubscriptionRecovery::FixedCount { maximum_size: 3 }, MIB, 10);
        assert_eq!(ids(&mut buffer, Instant::now(), 0), [8, 9, 10]);
        assert_eq!(buffer.bytes(), 3 * message(1, "0123456789").memory_size());
    }

    #[test]
    fn fixed_size_keeps_the_last_bytes() {
        let size = message(1, "0123456789").memory_size();
        let policy = SubscriptionRecovery::FixedSize { maximum_size: (size * 4 + size / 2) as u64 };
        let mut buffer = filled(policy, MIB, 10);
        assert_eq!(ids(&mut buffer, Instant::now(), 0), [7, 8, 9, 10]);
        assert_eq!(buffer.bytes(), 4 * size);
        // The default is ActiveMQ's 64 KiB.
        assert_eq!(
            SubscriptionRecovery::default(),
            SubscriptionRecovery::FixedSize { maximum_size: 64 << 10 }
        );
    }

    #[test]
    fn last_image_keeps_the_last_message_only() {
        let mut buffer = filled(SubscriptionRecovery::LastImage, MIB, 5);
        assert_eq!(ids(&mut buffer, Instant::now(), 0), [5]);
    }

    #[test]
    fn timed_forgets_what_is_older_than_the_duration_on_push_and_on_replay() {
        let policy =
            SubscriptionRecovery::Timed { recover_duration_ms: Duration::from_millis(300) };
        let mut buffer = RecoveryBuffer::new(policy, MIB).expect("a buffer");
        let start = Instant::now();
        buffer.push(message(1, "old"), start, 0);
        buffer.push(message(2, "newer"), start + Duration::from_millis(200), 0);
        buffer.push(message(3, "newest"), start + Duration::from_millis(350), 0);
        // The push at 350 ms forgot the first.
        assert_eq!(buffer.messages.len(), 2);
        assert_eq!(ids(&mut buffer, start + Duration::from_millis(400), 0), [2, 3]);
        assert_eq!(ids(&mut buffer, start + Duration::from_millis(520), 0), [3]);
        assert_eq!(ids(&mut buffer, start + Duration::from_millis(650), 0), Vec::<u64>::new());
        assert_eq!(buffer.bytes(), 0);
    }

    #[test]
    fn every_policy_stays_within_the_topics_memory_limit() {
        let size = message(1, "0123456789").memory_size();
        let ceiling = size * 3;
        let policies = [
            SubscriptionRecovery::FixedCount { maximum_size: 100 },
            SubscriptionRecovery::FixedSize { maximum_size: 1 << 30 },
            SubscriptionRecovery::Timed { recover_duration_ms: Duration::from_secs(3600) },
        ];
        for policy in policies {
            let mut buffer = filled(policy, ceiling, 10);
            assert_eq!(ids(&mut buffer, Instant::now(), 0), [8, 9, 10], "{policy:?}");
            assert!(buffer.bytes() <= ceiling);
        }
        // A single message over the limit is not kept.
        let mut last = RecoveryBuffer::new(SubscriptionRecovery::LastImage, 10).expect("a buffer");
        last.push(message(1, "0123456789"), Instant::now(), 0);
        assert_eq!(ids(&mut last, Instant::now(), 0), Vec::<u64>::new());
    }

    #[test]
    fn expired_messages_are_never_kept_or_replayed() {
        let mut buffer =
            RecoveryBuffer::new(SubscriptionRecovery::FixedCount { maximum_size: 10 }, MIB)
                .expect("a buffer");
        let now = Instant::now();
        buffer.push(expiring(1, 1_000), now, 2_000);
        assert_eq!(buffer.messages.len(), 0, "already expired when published");
        buffer.push(expiring(2, 5_000), now, 2_000);
        buffer.push(message(3, "lasting"), now, 2_000);
        buffer.push(expiring(4, 3_000), now, 2_000);
        assert_eq!(ids(&mut buffer, now, 2_500), [2, 3, 4]);
        assert_eq!(ids(&mut buffer, now, 3_000), [2, 3]);
        // A push notices expirations too.
        buffer.push(message(5, "later"), now, 6_000);
        assert_eq!(buffer.messages.len(), 2);
        assert_eq!(
            buffer.bytes(),
            message(3, "lasting").memory_size() + message(5, "later").memory_size()
        );
        assert_eq!(buffer.next_expiry, 0);
    }
}
