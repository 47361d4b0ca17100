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
//! Queue tasks and the dead-letter task publish through an [`Advisor`], which takes the
//! registry lock for the publish only (no queue state is touched under it).
//!
//! No advisories are published about advisory topics themselves.

use std::collections::HashMap;
use std::sync::atomic::{AtomicU64, Ordering};
use std::sync::{Arc, Weak};

use parking_lot::Mutex;
use store::{Destination, DestinationKind, Message, MessageId, PropertyValue};
use tokio::sync::mpsc;

use super::queue::{self, QueueCommand};
use super::registry::Registry;
use super::slow::ConsumerNotice;
use super::wildcard::DestinationFilter;
use super::{ConsumerId, Core, ADVISORY_DESTINATION, ADVISORY_OPERATION};

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
    consumers: HashMap<ConsumerId, (Destination, u64)>,
    /// Announced connections with the id they were announced under.
    connections: HashMap<u64, String>,
    /// Where queue tasks publish from (they hold a clone).
    pub advisor: Advisor,
    /// Each connection's channel for what the broker tells it about its consumers (a slow
    /// consumer abort), registered by the adapter ([`Core::consumer_notices`]).
    notices: HashMap<u64, mpsc::UnboundedSender<ConsumerNotice>>,
}

/// A queue task's (or the dead-letter task's) way to publish advisories and abort consumers:
/// the registry, held weakly (the tasks must not keep the core alive), and the message ids.
#[derive(Clone, Default)]
pub(crate) struct Advisor {
    registry: Weak<Mutex<Registry>>,
    ids: Arc<AtomicU64>,
}

impl std::fmt::Debug for Advisor {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        f.write_str("Advisor")
    }
}

impl Advisor {
    pub fn new(registry: Weak<Mutex<Registry>>, ids: Arc<AtomicU64>) -> Advisor {
        Advisor { registry, ids }
    }

    fn with_registry(&self, f: impl FnOnce(&mut Registry, &AtomicU64)) {
        if let Some(registry) = self.registry.upgrade() {
            f(&mut registry.lock(), &self.ids);
        }
    }

    /// Publishes an advisory about `destination` on `ActiveMQ.Advisory.<kind>.<Type>.<name>`,
    /// if the destination is one an advisory can name and anyone listens.
    pub fn publish(
        &self,
        kind: &str,
        destination: &Destination,
        properties: Vec<(&str, PropertyValue)>,
    ) {
        let Some(topic) = advisory_topic(kind, destination) else { return };
        self.with_registry(|registry, ids| {
            publish_in(registry, ids, &topic, |id| advisory_message(id, &topic, properties));
        });
    }

    /// Publishes an advisory about `message` (delivered, consumed, discarded), with
    /// `properties` beside the message's id and destination and, when given, the consumer's
    /// id as its advisories name it (`consumerId`).
    pub fn publish_about(
        &self,
        kind: &str,
        destination: &Destination,
        message: &Message,
        consumer: Option<ConsumerId>,
        mut properties: Vec<(&str, PropertyValue)>,
    ) {
        let Some(topic) = advisory_topic(kind, destination) else { return };
        self.with_registry(|registry, ids| {
            let subject = consumer.and_then(|consumer| {
                let (_, connection) = registry.advisories.consumers.get(&consumer)?;
                Some(consumer_subject(*connection, consumer))
            });
            publish_in(registry, ids, &topic, |id| {
                properties.extend(message_facts(message));
                if let Some(subject) = subject {
                    properties.push((CONSUMER_ID, PropertyValue::String(subject.into())));
                }
                advisory_message(id, &topic, properties)
            });
        });
    }

    /// Publishes `message`, which arrived at `destination` while it has no consumer, on
    /// `ActiveMQ.Advisory.NoConsumer.<Type>.<name>` (see [`Core::advise_no_consumers`]).
    pub fn no_consumer(&self, destination: &Destination, message: &Message) {
        let Some(topic) = advisory_topic("NoConsumer", destination) else { return };
        self.with_registry(|registry, ids| {
            publish_in(registry, ids, &topic, |id| no_consumer_copy(id, &topic, message));
        });
    }

    /// Announces that `consumer` of `destination` became slow, on
    /// `ActiveMQ.Advisory.SlowConsumer.<Type>.<name>`: as a consumer advisory (operation
    /// "slow"; OpenWire renders its ConsumerInfo) with ActiveMQ's `consumerId`.
    pub fn slow_consumer(&self, consumer: ConsumerId, destination: &Destination) {
        let Some(topic) = advisory_topic("SlowConsumer", destination) else { return };
        self.with_registry(|registry, ids| {
            let Some((_, connection)) = registry.advisories.consumers.get(&consumer) else {
                return;
            };
            let subject = consumer_subject(*connection, consumer);
            let properties = vec![
                (ADVISORY_KIND, PropertyValue::String("consumer".into())),
                (ADVISORY_OPERATION, PropertyValue::String("slow".into())),
                (ADVISORY_DESTINATION, PropertyValue::String(destination.to_string().into())),
                (ADVISORY_SUBJECT, PropertyValue::String(subject.clone().into())),
                (CONSUMER_ID, PropertyValue::String(subject.into())),
            ];
            publish_in(registry, ids, &topic, |id| advisory_message(id, &topic, properties));
        });
    }

    /// Has `consumer` closed by its connection (the slow consumer strategy gave up on it):
    /// the adapter closes the consumer (OpenWire: a ConsumerControl asking the client to) or
    /// the whole connection. A connection without a notice channel has the consumer detached
    /// here instead, its in-flight messages back in their queues.
    pub fn abort(&self, notice: ConsumerNotice) {
        let ConsumerNotice::Abort { consumer, .. } = &notice;
        let consumer = *consumer;
        self.with_registry(|registry, ids| {
            let Some((_, connection)) = registry.advisories.consumers.get(&consumer) else {
                return;
            };
            let connection = *connection;
            if let Some(notices) = registry.advisories.notices.get(&connection) {
                if notices.send(notice).is_ok() {
                    return;
                }
            }
            registry.detach(consumer);
            consumer_stopped(registry, ids, consumer);
        });
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
fn type_name(kind: DestinationKind) -> &'static str {
    match kind {
        DestinationKind::Queue => "Queue",
        DestinationKind::Topic => "Topic",
        DestinationKind::TempQueue => "TempQueue",
        DestinationKind::TempTopic => "TempTopic",
    }
}

/// The properties naming the message an advisory is about, ours and ActiveMQ's.
fn message_facts(message: &Message) -> [(&'static str, PropertyValue); 4] {
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
fn advisory_message(id: MessageId, topic: &str, properties: Vec<(&str, PropertyValue)>) -> Message {
    let mut message =
        Message::new(id, format!("ID:ferromq-advisory:1:1:{}", id.0), Destination::topic(topic));
    message.headers.delivery_mode = store::DeliveryMode::NonPersistent;
    message.headers.timestamp = queue::now_millis();
    for (name, value) in properties {
        message.properties.insert(name.into(), value);
    }
    message
}

/// Routes the message `build` makes to every subscription of `topic`; builds nothing when
/// there is none.
fn publish_in(
    registry: &mut Registry,
    ids: &AtomicU64,
    topic: &str,
    build: impl FnOnce(MessageId) -> Message,
) {
    if !registry.topic_subscriptions.iter().any(|s| s.filter.matches(topic)) {
        return;
    }
    let message = Arc::new(build(MessageId(ids.fetch_add(1, Ordering::Relaxed))));
    for queue in registry.topic_route(topic, &message, false, 0, &[]) {
        queue.send(QueueCommand::Enqueue(vec![message.clone()]));
    }
}

/// Announces the stop of a consumer the core detached itself (a slow consumer aborted on a
/// connection that cannot be told).
fn consumer_stopped(registry: &mut Registry, ids: &AtomicU64, consumer: ConsumerId) {
    let Some((destination, connection)) = registry.advisories.consumers.remove(&consumer) else {
        return;
    };
    let topic = consumer_topic(&destination);
    let count = registry.advisories.consumers.values().filter(|(d, _)| *d == destination).count();
    let properties = vec![
        (ADVISORY_KIND, PropertyValue::String("consumer".into())),
        (ADVISORY_OPERATION, PropertyValue::String("remove".into())),
        (ADVISORY_DESTINATION, PropertyValue::String(destination.to_string().into())),
        (ADVISORY_SUBJECT, PropertyValue::String(consumer_subject(connection, consumer).into())),
        (CONSUMER_COUNT, PropertyValue::Int(i32::try_from(count).unwrap_or(i32::MAX))),
    ];
    if advisory_topic("Consumer", &destination).is_some() {
        publish_in(registry, ids, &topic, |id| advisory_message(id, &topic, properties));
    }
}

/// Announces a message moved to a dead-letter queue on
/// `ActiveMQ.Advisory.MessageDLQd.<Type>.<name>` of `original`, the destination it left (a
/// queue, or a subscription's topic); ActiveMQ publishes it whatever the policy says.
pub(crate) fn message_dead_lettered(
    registry: &mut Registry,
    ids: &AtomicU64,
    message: &Message,
    original: &Destination,
    dead_letter_queue: &Destination,
    cause: &str,
) {
    let Some(topic) = advisory_topic("MessageDLQd", original) else { return };
    publish_in(registry, ids, &topic, |id| {
        let mut properties = vec![
            (ADVISORY_KIND, PropertyValue::String("message".into())),
            (
                "ferromq.advisory.deadLetterQueue",
                PropertyValue::String(dead_letter_queue.to_string().into()),
            ),
            (super::dead_letter::DLQ_DELIVERY_FAILURE_CAUSE, PropertyValue::String(cause.into())),
        ];
        properties.extend(message_facts(message));
        advisory_message(id, &topic, properties)
    });
}

/// The id an advisory gives a consumer: stable from its start to its stop.
fn consumer_subject(connection: u64, consumer: ConsumerId) -> String {
    format!("ID:ferromq-connection-{connection}:1:{}", consumer.0)
}

fn connection_subject(connection: u64) -> String {
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

impl Core {
    /// Publishes an advisory on `topic` with `properties`, if anyone listens there.
    pub(super) fn publish_advisory(
        &self,
        registry: &mut Registry,
        topic: &str,
        properties: Vec<(&str, PropertyValue)>,
    ) {
        publish_in(registry, &self.next_message_id, topic, |id| {
            advisory_message(id, topic, properties)
        });
    }

    /// Registers `connection`'s channel for what the broker tells it about its consumers (a
    /// slow consumer aborted by the policy's strategy); it is dropped when the connection is
    /// released ([`Core::release_connection`]).
    pub fn consumer_notices(&self, connection: u64) -> mpsc::UnboundedReceiver<ConsumerNotice> {
        let (tx, rx) = mpsc::unbounded_channel();
        self.registry.lock().advisories.notices.insert(connection, tx);
        rx
    }

    /// Publishes a non-persistent `message` sent to `destination`, which nobody consumes, on
    /// `ActiveMQ.Advisory.NoConsumer.<Type>.<name>` when the destination's policy asks
    /// (`send_advisory_if_no_consumers`): a copy of the message itself, as ActiveMQ does
    /// (which, like here, does so for non-persistent messages only).
    pub(super) fn advise_no_consumers(
        &self,
        registry: &mut Registry,
        destination: &Destination,
        message: &Message,
    ) {
        if message.is_persistent()
            || !registry.policies.for_destination(destination).advisories.no_consumers
        {
            return;
        }
        let Some(topic) = advisory_topic("NoConsumer", destination) else { return };
        publish_in(registry, &self.next_message_id, &topic, |id| {
            no_consumer_copy(id, &topic, message)
        });
    }

    /// Publishes a fast producer advisory (`advisory_for_fast_producers`) when a send to
    /// `destination` is held by flow control: `producerId` is the producer part of the
    /// message's ActiveMQ id, when it has one.
    pub(super) fn advise_fast_producer(&self, destination: &Destination, message: &Message) {
        if !self.settings.policies.for_destination(destination).advisories.fast_producers {
            return;
        }
        let mut properties = vec![
            (ADVISORY_KIND, PropertyValue::String("producer".into())),
            (ADVISORY_OPERATION, PropertyValue::String("fast".into())),
            (ADVISORY_DESTINATION, PropertyValue::String(destination.to_string().into())),
        ];
        // `ID:<connection>:<session>:<producer>:<sequence>`: the producer is all but the last
        // (the subject lets OpenWire render the advisory's ProducerInfo, as ActiveMQ does).
        if let Some((producer, _)) = message.message_id.rsplit_once(':') {
            if message.message_id.starts_with("ID:") {
                properties.push((PRODUCER_ID, PropertyValue::String(producer.into())));
                properties.push((ADVISORY_SUBJECT, PropertyValue::String(producer.into())));
            }
        }
        let Some(topic) = advisory_topic("FastProducer", destination) else { return };
        let mut registry = self.registry.lock();
        publish_in(&mut registry, &self.next_message_id, &topic, |id| {
            advisory_message(id, &topic, properties)
        });
    }

    /// Announces a consumer's start ("add") or stop ("remove") on its destination's consumer
    /// advisory topic, and keeps what its stop will need.
    pub(super) fn advise_consumer(
        &self,
        registry: &mut Registry,
        consumer: ConsumerId,
        started: Option<(&Destination, u64)>,
    ) {
        let (destination, connection, operation) = match started {
            Some((destination, connection)) => {
                registry.advisories.consumers.insert(consumer, (destination.clone(), connection));
                (destination.clone(), connection, "add")
            }
            None => match registry.advisories.consumers.remove(&consumer) {
                Some((destination, connection)) => (destination, connection, "remove"),
                None => return,
            },
        };
        // Not about advisory topics, and not about wildcard or composite subscriptions: an
        // advisory topic is named after one destination.
        let name = &destination.name;
        if name.starts_with(ADVISORY_PREFIX)
            || DestinationFilter::is_pattern(name)
            || name.contains(',')
        {
            return;
        }
        let topic = consumer_topic(&destination);
        if !registry.topic_subscriptions.iter().any(|s| s.filter.matches(&topic)) {
            return;
        }
        let count =
            registry.advisories.consumers.values().filter(|(d, _)| *d == destination).count();
        let properties = vec![
            (ADVISORY_KIND, PropertyValue::String("consumer".into())),
            (ADVISORY_OPERATION, PropertyValue::String(operation.into())),
            (ADVISORY_DESTINATION, PropertyValue::String(destination.to_string().into())),
            (
                ADVISORY_SUBJECT,
                PropertyValue::String(consumer_subject(connection, consumer).into()),
            ),
            (CONSUMER_COUNT, PropertyValue::Int(i32::try_from(count).unwrap_or(i32::MAX))),
        ];
        self.publish_advisory(registry, &topic, properties);
    }

    /// Announces a producer's start or stop on `ActiveMQ.Advisory.Producer.Queue.<name>` /
    /// `.Topic.<name>`, with the destination's producer count after it.
    pub(super) fn advise_producer(
        &self,
        destination: &Destination,
        producer: &str,
        started: bool,
        count: u64,
    ) {
        if destination.name.starts_with(ADVISORY_PREFIX) {
            return;
        }
        let kind = if destination.kind.is_queue() { "Queue" } else { "Topic" };
        let topic = format!("{ADVISORY_PREFIX}Producer.{kind}.{}", destination.name);
        let mut registry = self.registry.lock();
        let properties = vec![
            (ADVISORY_KIND, PropertyValue::String("producer".into())),
            (
                ADVISORY_OPERATION,
                PropertyValue::String(if started { "add" } else { "remove" }.into()),
            ),
            (ADVISORY_DESTINATION, PropertyValue::String(destination.to_string().into())),
            (ADVISORY_SUBJECT, PropertyValue::String(producer.into())),
            (PRODUCER_COUNT, PropertyValue::Int(i32::try_from(count).unwrap_or(i32::MAX))),
        ];
        self.publish_advisory(&mut registry, &topic, properties);
    }

    /// Announces a connection on `ActiveMQ.Advisory.Connection` once it has identified
    /// itself (STOMP CONNECT, OpenWire ConnectionInfo), under the protocol's own id for it
    /// when it has one (OpenWire's ConnectionId); its close is announced by
    /// [`Core::release_connection`].
    pub fn connection_opened(&self, connection: u64, client_id: Option<&str>, id: Option<&str>) {
        let mut registry = self.registry.lock();
        if registry.advisories.connections.contains_key(&connection) {
            return;
        }
        let subject = id.map_or_else(|| connection_subject(connection), str::to_owned);
        registry.advisories.connections.insert(connection, subject.clone());
        let mut properties = vec![
            (ADVISORY_KIND, PropertyValue::String("connection".into())),
            (ADVISORY_OPERATION, PropertyValue::String("add".into())),
            (ADVISORY_SUBJECT, PropertyValue::String(subject.into())),
        ];
        if let Some(client_id) = client_id {
            properties.push((ADVISORY_CLIENT_ID, PropertyValue::String(client_id.into())));
        }
        self.publish_advisory(&mut registry, ADVISORY_CONNECTION, properties);
    }

    /// Announces the close of a connection announced by [`Core::connection_opened`].
    pub(super) fn advise_connection_closed(&self, registry: &mut Registry, connection: u64) {
        registry.advisories.notices.remove(&connection);
        let Some(subject) = registry.advisories.connections.remove(&connection) else {
            return;
        };
        let properties = vec![
            (ADVISORY_KIND, PropertyValue::String("connection".into())),
            (ADVISORY_OPERATION, PropertyValue::String("remove".into())),
            (ADVISORY_SUBJECT, PropertyValue::String(subject.into())),
        ];
        self.publish_advisory(registry, ADVISORY_CONNECTION, properties);
    }

    /// Announces a new queue on `ActiveMQ.Advisory.Queue`.
    pub(super) fn advise_queue_created(&self, registry: &mut Registry, name: &str) {
        let properties = vec![
            (ADVISORY_KIND, PropertyValue::String("destination".into())),
            (ADVISORY_OPERATION, PropertyValue::String("add".into())),
            (ADVISORY_DESTINATION, PropertyValue::String(format!("queue://{name}").into())),
        ];
        self.publish_advisory(registry, ADVISORY_QUEUE, properties);
    }
}

/// The NoConsumer advisory: the message itself on the advisory topic (a new broker id; the
/// same JMS id, headers, properties and body), non-persistent like every advisory.
fn no_consumer_copy(id: MessageId, topic: &str, message: &Message) -> Message {
    let mut copy = message.clone();
    copy.id = id;
    copy.original_destination = Some(message.destination.clone());
    copy.destination = Destination::topic(topic);
    for (name, value) in message_facts(message) {
        copy.properties.insert(name.into(), value);
    }
    copy
}
