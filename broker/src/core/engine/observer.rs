//! The observer: one task that serves the events of every queue task (see
//! [`events`](crate::core::events)) in the order they come. It publishes the advisories a
//! policy switches on, moves dead letters, has slow consumers closed by their connections, and
//! removes queues that reported themselves idle.
//!
//! Dead letters, as ActiveMQ's strategies decide them ([`verdict`]): under the registry lock,
//! the observer declares the dead-letter queue if needed and submits one unit of work, the
//! copy's `AddMessage` to the dead-letter queue and the `Ack` of the original's stored
//! reference. The store applies a unit whole or not at all, so a crash never loses or
//! duplicates a dead letter: either the original is still in its queue or the copy is in the
//! dead-letter queue. Only then does the copy go to the dead-letter queue's task.

use std::sync::atomic::{AtomicU64, Ordering};
use std::sync::{Arc, Weak};

use store::{MessageId, Operation, PageKey, PropertyValue, UnitOfWork};
use tokio::sync::mpsc;

use super::{advise, Core};
use crate::core::advisory::{
    advisory_message, advisory_topic, consumer_subject, message_facts, no_consumer_copy,
    ADVISORY_KIND, ADVISORY_SUBJECT, CONSUMER_ID, DISCARDED_COUNT, USAGE_NAME,
};
use crate::core::dead_letter::{copy_of, verdict, Cause, DeadLetter, Verdict};
use crate::core::events::QueueEvent;
use crate::core::queue::{stage, QueueFactory};
use crate::core::registry::Registry;
use crate::core::slow::ConsumerNotice;
use crate::core::types::{ConsumerId, ADVISORY_DESTINATION, ADVISORY_OPERATION};

/// Serves `events` until every queue task and the core are gone.
pub(super) async fn run(core: Weak<Core>, mut events: mpsc::UnboundedReceiver<QueueEvent>) {
    while let Some(event) = events.recv().await {
        let Some(core) = core.upgrade() else { break };
        core.observe(event);
    }
}

impl Core {
    fn observe(&self, event: QueueEvent) {
        let ids = &*self.next_message_id;
        let message_kind = || (ADVISORY_KIND, PropertyValue::String("message".into()));
        match event {
            QueueEvent::Delivered { destination, message, consumer } => {
                self.advise_message("MessageDelivered", &destination, &message, consumer)
            }
            QueueEvent::Consumed { destination, message, consumer } => {
                self.advise_message("MessageConsumed", &destination, &message, consumer)
            }
            QueueEvent::Discarded { destination, message, consumer, discarded } => {
                let mut registry = self.registry.lock();
                let count = i32::try_from(discarded).unwrap_or(i32::MAX);
                let properties = vec![message_kind(), (DISCARDED_COUNT, PropertyValue::Int(count))];
                let about = (&*message, consumer);
                publish_about(
                    &mut registry,
                    ids,
                    "MessageDiscarded",
                    &destination,
                    about,
                    properties,
                );
            }
            QueueEvent::Slow { consumer, destination } => {
                // A consumer advisory (operation "slow"; OpenWire renders its ConsumerInfo)
                // with ActiveMQ's `consumerId`.
                let Some(topic) = advisory_topic("SlowConsumer", &destination) else { return };
                let mut registry = self.registry.lock();
                let Some((_, connection)) = registry.advisories.consumer(consumer) else {
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
                advise::publish_in(&mut registry, ids, &topic, |id| {
                    advisory_message(id, &topic, properties)
                });
            }
            QueueEvent::Abort(notice) => self.abort(notice),
            QueueEvent::GateFull { destination } => {
                let Some(topic) = advisory_topic("FULL", &destination) else { return };
                let properties = vec![
                    (ADVISORY_KIND, PropertyValue::String("usage".into())),
                    (ADVISORY_DESTINATION, PropertyValue::String(destination.to_string().into())),
                    (USAGE_NAME, PropertyValue::String(format!("{destination}:memory").into())),
                ];
                let mut registry = self.registry.lock();
                advise::publish_in(&mut registry, ids, &topic, |id| {
                    advisory_message(id, &topic, properties)
                });
            }
            QueueEvent::NoConsumer { destination, message } => {
                let Some(topic) = advisory_topic("NoConsumer", &destination) else { return };
                let mut registry = self.registry.lock();
                advise::publish_in(&mut registry, ids, &topic, |id| {
                    no_consumer_copy(id, &topic, &message)
                });
            }
            QueueEvent::DeadLettered(letter) => {
                let mut registry = self.registry.lock();
                dead_letter(&mut registry, &self.factory, ids, letter);
            }
            QueueEvent::Loaded { messages } => {
                let mut registry = self.registry.lock();
                for message in &messages {
                    registry.audit.record_recovered(message);
                }
            }
            QueueEvent::Idle { queue, taken } => self.retire_idle(&queue, taken),
        }
    }

    /// A delivered or consumed message's advisory (`kind`), naming `consumer`.
    fn advise_message(
        &self,
        kind: &str,
        destination: &store::Destination,
        message: &store::Message,
        consumer: ConsumerId,
    ) {
        let properties = vec![(ADVISORY_KIND, PropertyValue::String("message".into()))];
        let mut registry = self.registry.lock();
        let ids = &*self.next_message_id;
        publish_about(&mut registry, ids, kind, destination, (message, Some(consumer)), properties);
    }

    /// Has `consumer` closed by its connection (the slow consumer strategy gave up on it):
    /// the adapter closes the consumer (OpenWire: a ConsumerControl asking the client to) or
    /// the whole connection. A connection without a notice channel has the consumer detached
    /// here instead, its in-flight messages back in their queues.
    fn abort(&self, notice: ConsumerNotice) {
        let ConsumerNotice::Abort { consumer, .. } = &notice;
        let consumer = *consumer;
        let mut registry = self.registry.lock();
        let Some((_, connection)) = registry.advisories.consumer(consumer) else {
            return;
        };
        let connection = *connection;
        if let Some(notices) = registry.advisories.notices.get(&connection) {
            if notices.send(notice).is_ok() {
                return;
            }
        }
        registry.detach(consumer);
        advise::consumer_stopped(&mut registry, &self.next_message_id, consumer);
    }
}

/// Publishes an advisory of `kind` about a message (delivered, consumed, discarded) of
/// `destination`, with `properties` beside the message's id and destination and, when given,
/// the consumer's id as its advisories name it (`consumerId`).
fn publish_about(
    registry: &mut Registry,
    ids: &AtomicU64,
    kind: &str,
    destination: &store::Destination,
    (message, consumer): (&store::Message, Option<ConsumerId>),
    mut properties: Vec<(&str, PropertyValue)>,
) {
    let Some(topic) = advisory_topic(kind, destination) else { return };
    let subject = consumer.and_then(|consumer| {
        let (_, connection) = registry.advisories.consumer(consumer)?;
        Some(consumer_subject(*connection, consumer))
    });
    advise::publish_in(registry, ids, &topic, |id| {
        properties.extend(message_facts(message));
        if let Some(subject) = subject {
            properties.push((CONSUMER_ID, PropertyValue::String(subject.into())));
        }
        advisory_message(id, &topic, properties)
    });
}

/// Moves a dead letter to its dead-letter queue, or drops it, as its settings say.
fn dead_letter(
    registry: &mut Registry,
    factory: &QueueFactory,
    ids: &AtomicU64,
    letter: DeadLetter,
) {
    let store = &factory.store;
    let DeadLetter { queue: from, stored, message, cause, settings } = letter;
    let ack = (stored && message.is_persistent()).then(|| Operation::Ack {
        queue: (*from).clone(),
        key: PageKey::of(&message),
        txn: None,
    });
    let (queue, original) = match verdict(&settings, &from, &message, &cause) {
        Verdict::Drop(why) => {
            if cause == Cause::Expired {
                tracing::debug!(id = %message.message_id, queue = ?from, "expired message dropped: {why}");
            } else {
                tracing::warn!(id = %message.message_id, queue = ?from, ?cause, "undeliverable message dropped: {why}");
            }
            if let Some(ack) = ack {
                // Nobody waits for this removal; a failure poisons the store, which says so.
                drop(store.submit(UnitOfWork::with(ack)));
            }
            return;
        }
        Verdict::MoveTo { queue, original } => (queue, original),
    };
    // Declared before the copy is stored, and the copy announced, so that a new queue's task
    // does not load the copy and also get it enqueued.
    let (handle, created) = match registry.queue(&queue.name, factory) {
        Ok(found) => found,
        Err(error) => {
            tracing::error!(%error, id = %message.message_id, "cannot open dead-letter queue {queue}; the message stays stored where it was");
            return;
        }
    };
    let id = MessageId(ids.fetch_add(1, Ordering::Relaxed));
    let advised = original.clone();
    let copy = Arc::new(copy_of(&message, id, queue.clone(), original, &cause));
    let mut unit = UnitOfWork::new();
    if created {
        unit.push(Operation::AddDestination(queue.clone()));
    }
    unit.push(Operation::AddMessage {
        message: copy.clone(),
        queues: vec![handle.key().clone()],
        txn: None,
    });
    if let Some(ack) = ack {
        unit.push(ack);
    }
    let arrival = handle.announce(&copy);
    let staged = match stage(&**store, unit, vec![arrival]) {
        Ok(staged) => staged,
        Err(error) => {
            // Refused whole (full, closed, poisoned): the original is still stored where it
            // was, and comes back there at the next start.
            tracing::error!(%error, id = %message.message_id, "cannot move the message to dead-letter queue {queue}; it stays stored where it was");
            return;
        }
    };
    tracing::debug!(id = %message.message_id, from = ?from, to = %queue, ?cause, "dead-lettered");
    // Nobody waits for the move to be durable: a failure later poisons the store, which says
    // so, and the original is still stored where it was.
    drop(staged.enqueue());
    advise::message_dead_lettered(
        registry,
        ids,
        &message,
        &advised,
        &queue,
        &cause.describe(&message),
    );
}
