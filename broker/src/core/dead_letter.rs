//! Dead letters: messages that cannot be delivered (a client gave up on them, the broker's
//! redelivery limit was reached, or they expired) move to a dead-letter queue, or are dropped.
//!
//! A queue task that gives up on a message takes it out of its own state and hands it, with
//! the cause, to the broker's one dead-letter task over an unbounded channel ([`DeadLetters`]).
//! The task decides ([`verdict`], ActiveMQ's dead-letter strategies) and, under the registry
//! lock, declares the dead-letter queue if needed and submits one unit of work: the copy's
//! `AddMessage` to the dead-letter queue and the `Ack` of the original's stored reference.
//! The store applies a unit whole or not at all, so a crash never loses or duplicates a dead
//! letter: either the original is still in its queue or the copy is in the dead-letter queue.
//! Only then does the copy go to the dead-letter queue's task.
//!
//! The copy is a new message, as ActiveMQ's: a new broker id (the store files bodies by id),
//! the same JMS message id, body and properties, its destination the dead-letter queue and
//! [`Message::original_destination`] where it came from, plus ActiveMQ's properties
//! `dlqDeliveryFailureCause`, `originalExpiration` (it no longer expires) and, for a
//! non-persistent message made persistent, `originalDeliveryMode`.
//!
//! Every move is announced on `ActiveMQ.Advisory.MessageDLQd.<Type>.<name>` of the destination
//! the message left (when anyone listens), as ActiveMQ announces it whatever the policy.
//!
//! A dead-letter queue is an ordinary queue. A message that fails there, or expires there, is
//! dropped: never dead-lettered again (ActiveMQ's loop guard does the same).

use std::sync::Arc;
use std::time::Duration;

use store::{
    DeliveryMode, Destination, DestinationKind, Message, MessageId, PropertyValue, QueueKey,
};

/// Property naming why a message was dead-lettered (ActiveMQ's
/// `ActiveMQMessage.DLQ_DELIVERY_FAILURE_CAUSE_PROPERTY`).
pub const DLQ_DELIVERY_FAILURE_CAUSE: &str = "dlqDeliveryFailureCause";
/// Property holding a dead letter's expiration before it was cleared.
pub const ORIGINAL_EXPIRATION: &str = "originalExpiration";
/// Property marking a non-persistent message that was made persistent to be dead-lettered.
pub const ORIGINAL_DELIVERY_MODE: &str = "originalDeliveryMode";

/// Which dead-letter queue a message goes to (ActiveMQ's dead-letter strategies).
#[derive(Debug, Clone, PartialEq, Eq)]
pub enum DeadLetterStrategy {
    /// Every dead letter goes to this queue (`ActiveMQ.DLQ` by default).
    Shared { queue: Arc<str> },
    /// Queue `Q`'s go to `<queue_prefix>Q`, topic `T`'s to `<topic_prefix>T`.
    Individual { queue_prefix: Arc<str>, topic_prefix: Arc<str> },
    /// Dead letters are dropped.
    Discarding,
}

/// What happens to messages that cannot be delivered, and how often queues look for expired
/// ones. One for the whole broker today; per-destination policies would hold one each.
#[derive(Debug, Clone)]
pub struct DeadLetterSettings {
    pub strategy: DeadLetterStrategy,
    /// Deliveries beyond which the broker dead-letters a message that consumers counting on
    /// the broker (STOMP) give back; `None` for no limit.
    pub max_redeliveries: Option<u32>,
    /// Dead-letter non-persistent messages (made persistent) instead of dropping them.
    pub process_non_persistent: bool,
    /// Dead-letter expired messages instead of dropping them.
    pub process_expired: bool,
    /// How often each queue sweeps out expired messages; `None` never.
    pub expire_messages_period: Option<Duration>,
}

impl Default for DeadLetterSettings {
    /// ActiveMQ's defaults: the shared `ActiveMQ.DLQ`, 6 redeliveries, non-persistent messages
    /// dropped, expired ones dead-lettered, a sweep every 30 s.
    fn default() -> Self {
        DeadLetterSettings {
            strategy: DeadLetterStrategy::Shared { queue: "ActiveMQ.DLQ".into() },
            max_redeliveries: Some(6),
            process_non_persistent: false,
            process_expired: true,
            expire_messages_period: Some(Duration::from_secs(30)),
        }
    }
}

impl DeadLetterSettings {
    /// True if `queue` is a dead-letter queue: the shared one, or (individual strategy) one
    /// named with either prefix.
    pub fn is_dead_letter_queue(&self, queue: &QueueKey) -> bool {
        if queue.subscription.is_some() || queue.destination.kind != DestinationKind::Queue {
            return false;
        }
        let name = &*queue.destination.name;
        match &self.strategy {
            DeadLetterStrategy::Shared { queue } => name == &**queue,
            DeadLetterStrategy::Individual { queue_prefix, topic_prefix } => {
                name.starts_with(&**queue_prefix) || name.starts_with(&**topic_prefix)
            }
            DeadLetterStrategy::Discarding => false,
        }
    }

    /// True if a message delivered `deliveries` times and given back is past the limit.
    pub fn redeliveries_exceeded(&self, deliveries: u32) -> bool {
        self.max_redeliveries.is_some_and(|max| deliveries > max)
    }
}

/// Why a message is given up on.
#[derive(Debug, Clone, PartialEq)]
pub enum Cause {
    /// The client gave up on it (OpenWire's poison ack), with the reason it sent, as Java's
    /// `Throwable.toString()`.
    Poisoned(Option<String>),
    /// Given back by consumers relying on the broker's count (STOMP) after this many deliveries.
    Redeliveries { deliveries: u32, limit: u32 },
    /// Its expiration time passed before it was delivered.
    Expired,
}

impl Cause {
    /// The text of `dlqDeliveryFailureCause`, worded as ActiveMQ words its causes.
    pub(crate) fn describe(&self, message: &Message) -> String {
        match self {
            Cause::Poisoned(Some(reason)) => reason.clone(),
            Cause::Poisoned(None) => "java.lang.Throwable: poisoned by the consumer".to_owned(),
            Cause::Redeliveries { deliveries, limit } => format!(
                "java.lang.Throwable: Delivery[{deliveries}] exceeds redelivery policy limit: \
                 maximumRedeliveries = {limit} (broker-side)"
            ),
            Cause::Expired => format!(
                "java.lang.Throwable: Message Expired. Expiration:{}",
                message.headers.expiration
            ),
        }
    }
}

/// A message a queue gave up on, on its way to the observer (`engine/observer.rs`).
#[derive(Debug)]
pub(crate) struct DeadLetter {
    /// The queue it was in.
    pub queue: Arc<QueueKey>,
    /// Whether that queue keeps persistent messages in the store (so the original's
    /// reference must be removed).
    pub stored: bool,
    pub message: Arc<Message>,
    pub cause: Cause,
    /// The settings of the queue's policy: where its dead letters go.
    pub settings: Arc<DeadLetterSettings>,
}

/// What becomes of a message given up on.
#[derive(Debug, Clone, PartialEq)]
pub(crate) enum Verdict {
    /// Dropped, for this reason.
    Drop(&'static str),
    /// Copied to this dead-letter queue; `original` is recorded as where it came from.
    MoveTo { queue: Destination, original: Destination },
}

/// Decides a message's fate by the settings, as ActiveMQ's `RegionBroker.sendToDeadLetterQueue`
/// and `AbstractDeadLetterStrategy.isSendToDeadLetterQueue` do.
pub(crate) fn verdict(
    settings: &DeadLetterSettings,
    queue: &QueueKey,
    message: &Message,
    cause: &Cause,
) -> Verdict {
    if settings.is_dead_letter_queue(queue) {
        return Verdict::Drop("it failed in a dead-letter queue");
    }
    if !message.is_persistent() && !settings.process_non_persistent {
        return Verdict::Drop("it is non-persistent");
    }
    if *cause == Cause::Expired && !settings.process_expired {
        return Verdict::Drop("it expired");
    }
    // Where it came from: the queue it was in, or for a topic subscription, the topic.
    let original = if queue.subscription.is_none() && queue.destination.kind.is_queue() {
        queue.destination.clone()
    } else {
        message.destination.clone()
    };
    let name: Arc<str> = match &settings.strategy {
        DeadLetterStrategy::Discarding => return Verdict::Drop("the discarding strategy"),
        DeadLetterStrategy::Shared { queue } => queue.clone(),
        DeadLetterStrategy::Individual { queue_prefix, topic_prefix } => {
            let prefix = if original.kind.is_queue() { queue_prefix } else { topic_prefix };
            format!("{prefix}{}", original.name).into()
        }
    };
    let queue = Destination::queue(name);
    if queue == original {
        return Verdict::Drop("it failed in a dead-letter queue");
    }
    Verdict::MoveTo { queue, original }
}

/// The dead-letter copy of `message`: a new broker id, in `queue`, from `original`.
pub(crate) fn copy_of(
    message: &Message,
    id: MessageId,
    queue: Destination,
    original: Destination,
    cause: &Cause,
) -> Message {
    let mut copy = message.clone();
    copy.id = id;
    copy.destination = queue;
    copy.original_destination = Some(original);
    copy.properties
        .entry(ORIGINAL_EXPIRATION.into())
        .or_insert(PropertyValue::Long(message.headers.expiration));
    copy.headers.expiration = 0;
    if !message.is_persistent() {
        copy.headers.delivery_mode = DeliveryMode::Persistent;
        copy.properties
            .insert(ORIGINAL_DELIVERY_MODE.into(), PropertyValue::String("NON_PERSISTENT".into()));
    }
    copy.properties.insert(
        DLQ_DELIVERY_FAILURE_CAUSE.into(),
        PropertyValue::String(cause.describe(message).into()),
    );
    copy
}

#[cfg(test)]
mod tests {
    use super::*;
    use store::SubscriptionKey;

    fn message(destination: Destination) -> Message {
        let mut message = Message::new(MessageId(7), "ID:p:1:1:1:1", destination);
        message.headers.expiration = 1234;
        message.properties.insert("color".into(), PropertyValue::String("red".into()));
        message
    }

    fn individual() -> DeadLetterSettings {
        DeadLetterSettings {
            strategy: DeadLetterStrategy::Individual {
                queue_prefix: "ActiveMQ.DLQ.Queue.".into(),
                topic_prefix: "ActiveMQ.DLQ.Topic.".into(),
            },
            ..DeadLetterSettings::default()
        }
    }

    #[test]
    fn shared_strategy_sends_everything_to_activemq_dlq() {
        let settings = DeadLetterSettings::default();
        let queue = QueueKey::destination(Destination::queue("orders"));
        assert_eq!(
            verdict(&settings, &queue, &message(Destination::queue("orders")), &Cause::Expired),
            Verdict::MoveTo {
                queue: Destination::queue("ActiveMQ.DLQ"),
                original: Destination::queue("orders")
            }
        );
    }

    #[test]
    fn individual_strategy_names_the_queue_after_the_destination() {
        let settings = individual();
        let queue = QueueKey::destination(Destination::queue("orders"));
        let cause = Cause::Poisoned(None);
        assert_eq!(
            verdict(&settings, &queue, &message(Destination::queue("orders")), &cause),
            Verdict::MoveTo {
                queue: Destination::queue("ActiveMQ.DLQ.Queue.orders"),
                original: Destination::queue("orders")
            }
        );
        // A durable subscription's messages go to the topic's dead-letter queue.
        let durable = QueueKey::durable(
            Destination::topic("prices"),
            SubscriptionKey { client_id: "c".into(), name: "s".into() },
        );
        assert_eq!(
            verdict(&settings, &durable, &message(Destination::topic("prices")), &cause),
            Verdict::MoveTo {
                queue: Destination::queue("ActiveMQ.DLQ.Topic.prices"),
                original: Destination::topic("prices")
            }
        );
    }

    #[test]
    fn messages_failing_in_a_dead_letter_queue_are_dropped() {
        let cause = Cause::Poisoned(None);
        let shared = DeadLetterSettings::default();
        let dlq = QueueKey::destination(Destination::queue("ActiveMQ.DLQ"));
        let dead = message(Destination::queue("ActiveMQ.DLQ"));
        assert!(matches!(verdict(&shared, &dlq, &dead, &cause), Verdict::Drop(_)));
        assert!(matches!(verdict(&shared, &dlq, &dead, &Cause::Expired), Verdict::Drop(_)));
        let own = QueueKey::destination(Destination::queue("ActiveMQ.DLQ.Queue.orders"));
        assert!(matches!(verdict(&individual(), &own, &dead, &cause), Verdict::Drop(_)));
    }

    #[test]
    fn non_persistent_and_expired_messages_follow_the_settings() {
        let queue = QueueKey::destination(Destination::queue("orders"));
        let mut fleeting = message(Destination::queue("orders"));
        fleeting.headers.delivery_mode = DeliveryMode::NonPersistent;
        let mut settings = DeadLetterSettings::default();
        let cause = Cause::Redeliveries { deliveries: 7, limit: 6 };
        assert!(matches!(verdict(&settings, &queue, &fleeting, &cause), Verdict::Drop(_)));
        settings.process_non_persistent = true;
        assert!(matches!(verdict(&settings, &queue, &fleeting, &cause), Verdict::MoveTo { .. }));
        settings.process_expired = false;
        let lasting = message(Destination::queue("orders"));
        assert!(matches!(verdict(&settings, &queue, &lasting, &Cause::Expired), Verdict::Drop(_)));
        settings.strategy = DeadLetterStrategy::Discarding;
        assert!(matches!(verdict(&settings, &queue, &lasting, &cause), Verdict::Drop(_)));
    }

    #[test]
    fn the_copy_keeps_the_message_and_records_where_and_why() {
        let mut original = message(Destination::queue("orders"));
        original.headers.delivery_mode = DeliveryMode::NonPersistent;
        let cause = Cause::Redeliveries { deliveries: 7, limit: 6 };
        let copy = copy_of(
            &original,
            MessageId(99),
            Destination::queue("ActiveMQ.DLQ"),
            Destination::queue("orders"),
            &cause,
        );
        assert_eq!(copy.id, MessageId(99));
        assert_eq!(copy.message_id, original.message_id);
        assert_eq!(copy.body, original.body);
        assert_eq!(copy.destination, Destination::queue("ActiveMQ.DLQ"));
        assert_eq!(copy.original_destination, Some(Destination::queue("orders")));
        assert_eq!(copy.headers.expiration, 0);
        assert!(copy.is_persistent());
        let property = |name: &str| copy.properties.get(name).cloned();
        assert_eq!(property("color"), Some(PropertyValue::String("red".into())));
        assert_eq!(property(ORIGINAL_EXPIRATION), Some(PropertyValue::Long(1234)));
        assert_eq!(
            property(ORIGINAL_DELIVERY_MODE),
            Some(PropertyValue::String("NON_PERSISTENT".into()))
        );
        let Some(PropertyValue::String(text)) = property(DLQ_DELIVERY_FAILURE_CAUSE) else {
            panic!("no failure cause");
        };
        assert!(
            text.starts_with("java.lang.Throwable: Delivery[7] exceeds redelivery policy limit")
        );
    }

    #[test]
    fn the_redelivery_limit_counts_deliveries() {
        let settings = DeadLetterSettings::default();
        assert!(!settings.redeliveries_exceeded(6));
        assert!(settings.redeliveries_exceeded(7));
        let unlimited = DeadLetterSettings { max_redeliveries: None, ..settings };
        assert!(!unlimited.redeliveries_exceeded(u32::MAX));
    }
}
