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
//! Topics, as ActiveMQ names them:
//! - `ActiveMQ.Advisory.Connection`: connections opened and closed;
//! - `ActiveMQ.Advisory.Consumer.Queue.<name>` / `.Topic.<name>` (and `TempQueue`,
//!   `TempTopic`): consumers started and stopped, with the destination's consumer count;
//! - `ActiveMQ.Advisory.Queue`: queues created, and removed when inactive (`gc.rs`, which
//!   also announces inactive topics' removal on `ActiveMQ.Advisory.Topic`);
//! - `ActiveMQ.Advisory.TempQueue` / `TempTopic`: temporary destinations (see
//!   [`Core::create_temporary`](super::Core::create_temporary)).
//!
//! No advisories are published about advisory topics themselves.

use std::collections::HashMap;
use std::sync::Arc;

use store::{Destination, DestinationKind, Message, PropertyValue};

use super::queue::{self, QueueCommand};
use super::registry::Registry;
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
        if !registry.topic_subscriptions.iter().any(|s| s.filter.matches(topic)) {
            return;
        }
        let id = self.next_message_id();
        let mut message = Message::new(
            id,
            format!("ID:ferromq-advisory:1:1:{}", id.0),
            Destination::topic(topic),
        );
        message.headers.delivery_mode = store::DeliveryMode::NonPersistent;
        message.headers.timestamp = queue::now_millis();
        for (name, value) in properties {
            message.properties.insert(name.into(), value);
        }
        let message = Arc::new(message);
        for queue in registry.topic_route(topic, &message, false, 0, &[]) {
            queue.send(QueueCommand::Enqueue(vec![message.clone()]));
        }
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
