//! Publishing advisories (see [`advisory`](crate::core::advisory) for what they are): as
//! non-persistent topic messages routed under the registry lock to the subscriptions of their
//! advisory topic, built only when one exists.

use std::sync::atomic::{AtomicU64, Ordering};
use std::sync::Arc;

use store::{Destination, Message, MessageId, PropertyValue};

use super::Core;
use crate::core::advisory::*;
use crate::core::dead_letter::DLQ_DELIVERY_FAILURE_CAUSE;
use crate::core::queue::QueueCommand;
use crate::core::registry::Registry;
use crate::core::slow::{NoticeReceiver, NoticeSender};
use crate::core::types::{ConnectionId, ConsumerId, ADVISORY_DESTINATION, ADVISORY_OPERATION};
use crate::core::wildcard::DestinationFilter;

/// Routes the message `build` makes to every subscription of `topic`; builds nothing when
/// there is none.
pub(super) fn publish_in(
    registry: &mut Registry,
    ids: &AtomicU64,
    topic: &str,
    build: impl FnOnce(MessageId) -> Message,
) {
    if !registry.topic_subscriptions.any_match(topic) {
        return;
    }
    let message = Arc::new(build(MessageId(ids.fetch_add(1, Ordering::Relaxed))));
    for queue in registry.topic_route(topic, &message, false, ConnectionId::BROKER, &[], None) {
        queue.send(QueueCommand::Enqueue(vec![message.clone()]));
    }
}

/// Announces the stop of a consumer the core detached itself (a slow consumer aborted on a
/// connection that cannot be told).
pub(super) fn consumer_stopped(registry: &mut Registry, ids: &AtomicU64, consumer: ConsumerId) {
    let Some((destination, connection)) = registry.advisories.consumer_stopped(consumer) else {
        return;
    };
    let topic = consumer_topic(&destination);
    let count = registry.advisories.consumer_count(&destination);
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
pub(super) fn message_dead_lettered(
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
            (DLQ_DELIVERY_FAILURE_CAUSE, PropertyValue::String(cause.into())),
        ];
        properties.extend(message_facts(message));
        advisory_message(id, &topic, properties)
    });
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
    pub fn consumer_notices(&self, connection: ConnectionId) -> NoticeReceiver {
        let (tx, rx) = NoticeSender::channel();
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
            || !self.settings.policies.for_destination(destination).advisories.no_consumers
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
        started: Option<(&Destination, ConnectionId)>,
    ) {
        let (destination, connection, operation) = match started {
            Some((destination, connection)) => {
                registry.advisories.consumer_started(consumer, destination, connection);
                (destination.clone(), connection, "add")
            }
            None => match registry.advisories.consumer_stopped(consumer) {
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
        if !registry.topic_subscriptions.any_match(&topic) {
            return;
        }
        let count = registry.advisories.consumer_count(&destination);
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
    pub fn connection_opened(
        &self,
        connection: ConnectionId,
        client_id: Option<&str>,
        id: Option<&str>,
    ) {
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
    pub(super) fn advise_connection_closed(
        &self,
        registry: &mut Registry,
        connection: ConnectionId,
    ) {
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
