//! Advisory messages: the broker announces what happens to it on `ActiveMQ.Advisory.*` topics,
//! as ActiveMQ does, for monitoring tools and for clients that react to consumers coming and
//! going.
//!
//! The core publishes an advisory as an ordinary non-persistent topic message whose
//! properties say what it is about ([`ADVISORY_KIND`], [`ADVISORY_OPERATION`],
//! [`ADVISORY_DESTINATION`], [`ADVISORY_SUBJECT`], and ActiveMQ's `consumerCount`); each
//! protocol adapter renders it the way its clients expect (OpenWire: the ConsumerInfo,
//! ConnectionInfo, DestinationInfo or RemoveInfo the JMS client's `AdvisorySupport` reads as
//! the message's data structure; STOMP: the properties as headers).
//!
//! Building an advisory costs a message; it is built only when some subscription matches its
//! topic, so a broker nobody monitors pays a lookup per event and nothing more.
//!
//! Topics, as ActiveMQ names them (`<Type>` is `Queue`, `Topic`, `TempQueue` or `TempTopic`,
//! ActiveMQ's `getDestinationTypeAsString`):
//! - `ActiveMQ.Advisory.Connection`: connections opened and closed;
//! - `ActiveMQ.Advisory.Consumer.Queue.<name>` / `.Topic.<name>` (and `TempQueue`,
//!   `TempTopic`): consumers started and stopped, with the destination's consumer count;
//! - `ActiveMQ.Advisory.Producer.Queue.<name>` / `.Topic.<name>`: producers, with
//!   `producerCount`;
//! - `ActiveMQ.Advisory.Queue`: queues created, and removed when inactive (`gc.rs`, which
//!   also announces inactive topics' removal on `ActiveMQ.Advisory.Topic`);
//! - `ActiveMQ.Advisory.TempQueue` / `TempTopic`: temporary destinations (see
//!   [`Core::create_temporary`](super::Core::create_temporary));
//! - `ActiveMQ.Advisory.MessageDLQd.<Type>.<name>`: a message of destination `<name>` moved to
//!   a dead-letter queue (always, as in ActiveMQ);
//! - switched on per destination policy (`advisory_*` keys of `[[policies]]`):
//!   `SlowConsumer.<Type>.<name>` (a consumer became slow, see [`slow`](super::slow)),
//!   `FastProducer.<Type>.<name>` (a send is held by flow control), `FULL.<Type>.<name>` (the
//!   destination's memory gate closed), `MessageDiscarded.Topic.<name>` (the pending message
//!   limit dropped a subscriber's message), `MessageDelivered.<Type>.<name>` and
//!   `MessageConsumed.<Type>.<name>` (each delivery and acknowledgement), and
//!   `NoConsumer.<Type>.<name>` (a non-persistent message sent where nobody consumes: the
//!   message itself, as in ActiveMQ).
//!
//! Message advisories carry ActiveMQ's properties (`orignalMessageId` and
//! `orignalDestination`, spelled as ActiveMQ spells them, `consumerId`, `producerId`,
//! `usageName`, `discardedCount`) and ours ([`ADVISORY_MESSAGE_ID`], [`ADVISORY_DESTINATION`]).
//! Over OpenWire the consumer ones carry the ConsumerInfo; the message ones carry their facts as
//! properties only (ActiveMQ also attaches a copy of the message as the data structure).
//!
//! This module builds advisories and keeps what they need to remember; publishing them is
//! the core's (`engine/advise.rs`), and queue tasks report what their policy announces as
//! events (`events.rs`) that the core's observer publishes.
//!
//! No advisories are published about advisory topics themselves.

use std::collections::HashMap;

use store::{Destination, DestinationKind, Message, MessageId, PropertyValue};

use super::types::{now_millis, ConnectionId, ConsumerId, ADVISORY_DESTINATION};
use super::wildcard::DestinationFilter;

/// Property of an advisory message: what it is about, "connection", "consumer" or
/// "destination".
pub const ADVISORY_KIND: &str = "ferromq.advisory.kind";
/// Property of an advisory message: the id of the connection or consumer it is about.
pub const ADVISORY_SUBJECT: &str = "ferromq.advisory.subject";
/// Property of a consumer advisory: how many consumers the destination has now (ActiveMQ's
/// name).
pub const CONSUMER_COUNT: &str = "consumerCount";
/// Property of a producer advisory: how many producers the destination has now (ActiveMQ's
/// name).
pub const PRODUCER_COUNT: &str = "producerCount";
/// Property of a connection advisory: the client id, when the connection has one.
pub const ADVISORY_CLIENT_ID: &str = "ferromq.advisory.clientId";

/// Property of a message advisory: the JMS id of the message it is about.
pub const ADVISORY_MESSAGE_ID: &str = "ferromq.advisory.messageId";
/// ActiveMQ's property of a message advisory: the message's JMS id (`AdvisorySupport`'s
/// `MSG_PROPERTY_MESSAGE_ID`, misspelled there and so here).
pub const ORIGINAL_MESSAGE_ID: &str = "orignalMessageId";
/// ActiveMQ's property of a message advisory: the message's qualified destination
/// (`MSG_PROPERTY_DESTINATION`, same spelling).
pub const ORIGINAL_DESTINATION: &str = "orignalDestination";
/// ActiveMQ's property naming the consumer a slow consumer or discard advisory is about.
pub const CONSUMER_ID: &str = "consumerId";
/// ActiveMQ's property naming the producer a fast producer advisory is about.
pub const PRODUCER_ID: &str = "producerId";
/// ActiveMQ's property naming the usage a FULL advisory is about.
pub const USAGE_NAME: &str = "usageName";
/// ActiveMQ's property: how many messages the subscriber has had discarded so far.
pub const DISCARDED_COUNT: &str = "discardedCount";

/// The advisory topic of connections.
pub const ADVISORY_CONNECTION: &str = "ActiveMQ.Advisory.Connection";
/// The advisory topic of queue creation.
pub const ADVISORY_QUEUE: &str = "ActiveMQ.Advisory.Queue";
/// Prefix of every advisory topic.
pub const ADVISORY_PREFIX: &str = "ActiveMQ.Advisory.";

/// What the core remembers to announce removals: each consumer's destination and connection,
/// and the connections that were announced.
#[derive(Default)]
pub(crate) struct AdvisoryState {
    consumers: HashMap<ConsumerId, (Destination, ConnectionId)>,
    /// How many of `consumers` each destination has, for the advisories' `consumerCount`
    /// without counting them all each time.
    consumer_counts: HashMap<Destination, usize>,
    /// Announced connections with the id they were announced under.
    pub connections: HashMap<ConnectionId, String>,
    /// Each connection's channel for what the broker tells it about its consumers (a slow
    /// consumer abort), registered by the adapter ([`Core::consumer_notices`]).
    pub notices: HashMap<ConnectionId, super::slow::NoticeSender>,
}

impl AdvisoryState {
    /// Remembers a consumer of `destination` on `connection` (in place of what it was).
    pub fn consumer_started(
        &mut self,
        consumer: ConsumerId,
        destination: &Destination,
        connection: ConnectionId,
    ) {
        if let Some((before, _)) =
            self.consumers.insert(consumer, (destination.clone(), connection))
        {
            self.uncount(&before);
        }
        *self.consumer_counts.entry(destination.clone()).or_default() += 1;
    }

    /// Forgets a consumer; returns its destination and connection.
    pub fn consumer_stopped(
        &mut self,
        consumer: ConsumerId,
    ) -> Option<(Destination, ConnectionId)> {
        let (destination, connection) = self.consumers.remove(&consumer)?;
        self.uncount(&destination);
        Some((destination, connection))
    }

    fn uncount(&mut self, destination: &Destination) {
        if let Some(count) = self.consumer_counts.get_mut(destination) {
            *count -= 1;
            if *count == 0 {
                self.consumer_counts.remove(destination);
            }
        }
    }

    /// A consumer's destination and connection.
    pub fn consumer(&self, consumer: ConsumerId) -> Option<&(Destination, ConnectionId)> {
        self.consumers.get(&consumer)
    }

    /// How many consumers `destination` has.
    pub fn consumer_count(&self, destination: &Destination) -> usize {
        self.consumer_counts.get(destination).copied().unwrap_or(0)
    }
}

/// `ActiveMQ.Advisory.<kind>.<Type>.<name>`, or `None` for what no advisory is about: advisory
/// topics themselves, wildcard patterns and composite names.
pub(crate) fn advisory_topic(kind: &str, destination: &Destination) -> Option<String> {
    let name = &destination.name;
    if name.starts_with(ADVISORY_PREFIX)
        || DestinationFilter::is_pattern(name)
        || name.contains(',')
    {
        return None;
    }
    Some(format!("{ADVISORY_PREFIX}{kind}.{}.{name}", type_name(destination.kind)))
}

/// ActiveMQ's `getDestinationTypeAsString`.
pub(crate) fn type_name(kind: DestinationKind) -> &'static str {
    match kind {
        DestinationKind::Queue => "Queue",
        DestinationKind::Topic => "Topic",
        DestinationKind::TempQueue => "TempQueue",
        DestinationKind::TempTopic => "TempTopic",
    }
}

/// The properties naming the message an advisory is about, ours and ActiveMQ's.
pub(crate) fn message_facts(message: &Message) -> [(&'static str, PropertyValue); 4] {
    let id = PropertyValue::String(message.message_id.clone());
    let destination = PropertyValue::String(message.destination.to_string().into());
    [
        (ADVISORY_MESSAGE_ID, id.clone()),
        (ORIGINAL_MESSAGE_ID, id),
        (ADVISORY_DESTINATION, destination.clone()),
        (ORIGINAL_DESTINATION, destination),
    ]
}

/// A new advisory message on `topic` with `properties`.
pub(crate) fn advisory_message(
    id: MessageId,
    topic: &str,
    properties: Vec<(&str, PropertyValue)>,
) -> Message {
    let mut message =
        Message::new(id, format!("ID:ferromq-advisory:1:1:{}", id.0), Destination::topic(topic));
    message.headers.delivery_mode = store::DeliveryMode::NonPersistent;
    message.headers.timestamp = now_millis();
    for (name, value) in properties {
        message.properties.insert(name.into(), value);
    }
    message
}

/// The id an advisory gives a consumer: stable from its start to its stop.
pub(crate) fn consumer_subject(connection: ConnectionId, consumer: ConsumerId) -> String {
    format!("ID:ferromq-connection-{connection}:1:{}", consumer.0)
}

pub(crate) fn connection_subject(connection: ConnectionId) -> String {
    format!("ID:ferromq-connection-{connection}")
}

/// The consumer advisory topic of `destination`.
pub fn consumer_topic(destination: &Destination) -> String {
    let kind = match destination.kind {
        DestinationKind::Queue => "Queue",
        DestinationKind::Topic => "Topic",
        DestinationKind::TempQueue => "TempQueue",
        DestinationKind::TempTopic => "TempTopic",
    };
    format!("{ADVISORY_PREFIX}Consumer.{kind}.{}", destination.name)
}

/// The NoConsumer advisory: the message itself on the advisory topic (a new broker id; the
/// same JMS id, headers, properties and body), non-persistent like every advisory.
pub(crate) fn no_consumer_copy(id: MessageId, topic: &str, message: &Message) -> Message {
    let mut copy = message.clone();
    copy.id = id;
    copy.original_destination = Some(message.destination.clone());
    copy.destination = Destination::topic(topic);
    for (name, value) in message_facts(message) {
        copy.properties.insert(name.into(), value);
    }
    copy
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn consumer_counts_follow_starts_and_stops() {
        let mut state = AdvisoryState::default();
        let (a, b) = (Destination::queue("A"), Destination::topic("A"));
        state.consumer_started(ConsumerId(1), &a, ConnectionId(7));
        state.consumer_started(ConsumerId(2), &a, ConnectionId(7));
        state.consumer_started(ConsumerId(3), &b, ConnectionId(8));
        assert_eq!((state.consumer_count(&a), state.consumer_count(&b)), (2, 1));
        // Started again elsewhere: it moves.
        state.consumer_started(ConsumerId(2), &b, ConnectionId(7));
        assert_eq!((state.consumer_count(&a), state.consumer_count(&b)), (1, 2));
        assert_eq!(state.consumer_stopped(ConsumerId(1)), Some((a.clone(), ConnectionId(7))));
        assert_eq!(state.consumer_stopped(ConsumerId(1)), None);
        assert_eq!(state.consumer_count(&a), 0);
        assert!(!state.consumer_counts.contains_key(&a), "no count is kept at zero");
        assert_eq!(state.consumer(ConsumerId(3)), Some(&(b.clone(), ConnectionId(8))));
        let counted = |d: &Destination| state.consumers.values().filter(|(c, _)| c == d).count();
        assert_eq!(state.consumer_count(&b), counted(&b));
    }
}
