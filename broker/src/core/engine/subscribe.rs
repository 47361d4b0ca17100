//! Consumers: subscribing (queues, topics, durable and retroactive subscriptions, wildcards
//! and composites), closing them, browsing, prefetch and pulls, and settling what they were
//! delivered.

use std::sync::Arc;

use store::{
    Completion, Destination, DestinationKind, Message, MessageId, Operation, QueueKey,
    SubscriptionInfo, SubscriptionKey, UnitOfWork,
};

use crate::core::queue::{ConsumerSpec, QueueCommand, QueueHandle};
use crate::core::registry::{Attachment, Registry, Temporary, TopicSubscription};
use crate::core::selector::Selector;
use crate::core::types::{composite_parts, ConnectionId, ConsumerId, CoreError};
use crate::core::wildcard::DestinationFilter;

use super::{Core, SubscribeRequest};

impl Core {
    /// Attaches a consumer to a queue (or every queue matching a wildcard), or subscribes it
    /// to a topic, durably or not.
    ///
    /// A consumer's selector filters on its queues as they dispatch, and on its topic
    /// subscriptions as messages are routed (so a durable subscription stores only what its
    /// selector matches; the subscription's queue then needs no selector of its own).
    pub fn subscribe(&self, request: SubscribeRequest) -> Result<(), CoreError> {
        let (destination, consumer, connection) =
            (request.destination.clone(), request.spec.id, request.connection);
        self.attach(request)?;
        let mut registry = self.registry.lock();
        self.advise_consumer(&mut registry, consumer, Some((&destination, connection)));
        Ok(())
    }

    pub(super) fn attach(&self, request: SubscribeRequest) -> Result<(), CoreError> {
        let SubscribeRequest { destination, spec, durable, retroactive, no_local, connection } =
            request;
        let consumer = spec.id;
        let mut registry = self.registry.lock();
        let topic_spec = ConsumerSpec { selector: None, ..spec.clone() };
        if let Some(key) = durable {
            if destination.kind != DestinationKind::Topic || destination.name.contains(',') {
                return Err(CoreError::Unsupported(
                    "durable subscriptions on non-topic or composite",
                ));
            }
            let no_local = no_local.then_some(connection);
            let selector = spec.selector.clone();
            let (queue, created) = self.durable_queue(
                &mut registry,
                key,
                &destination,
                consumer,
                no_local,
                selector.clone(),
            )?;
            if retroactive && created {
                let filter = DestinationFilter::new(&destination.name);
                replay_recent(&mut registry, &filter, false, selector.as_deref(), &queue);
            }
            queue.send(QueueCommand::Subscribe(topic_spec));
            return Ok(());
        }
        let mut attachment = Attachment::default();
        let mut topics = Vec::new();
        let parts = composite_parts(&destination);
        // As for a send: a refused composite subscription creates no queue.
        for part in parts.iter().filter(|part| part.kind == DestinationKind::Queue) {
            if !DestinationFilter::is_pattern(&part.name) {
                self.room_for_queue(&registry, &part.name)?;
            }
        }
        for part in parts {
            let filter = DestinationFilter::new(&part.name);
            match part.kind {
                DestinationKind::Queue if filter.is_wildcard() => {
                    for (name, queue) in &registry.queues {
                        if filter.matches(name) {
                            attachment.queues.push(queue.clone());
                        }
                    }
                    attachment.wildcards.push((filter, spec.clone()));
                }
                DestinationKind::Queue => {
                    attachment.queues.push(self.declare_queue(&mut registry, &part.name)?);
                }
                DestinationKind::TempQueue => match registry.temporary.get(&part) {
                    Some(Temporary { owner, queue: Some(queue) }) if *owner == connection => {
                        attachment.queues.push(queue.clone());
                    }
                    Some(_) => return Err(CoreError::NotOwner(part.to_string())),
                    None => return Err(CoreError::NoSuchTemporary(part.to_string())),
                },
                DestinationKind::TempTopic if !registry.temporary.contains_key(&part) => {
                    return Err(CoreError::NoSuchTemporary(part.to_string()))
                }
                DestinationKind::Topic | DestinationKind::TempTopic => {
                    topics.push((filter, part.kind == DestinationKind::TempTopic))
                }
            }
        }
        for queue in &attachment.queues {
            queue.send(QueueCommand::Subscribe(spec.clone()));
        }
        if !topics.is_empty() {
            // One private queue per subscriber, fed by each topic it subscribed to.
            let key = QueueKey {
                destination: destination.clone(),
                subscription: Some(SubscriptionKey {
                    client_id: format!("connection-{connection}").into(),
                    name: format!("consumer-{}", consumer.0).into(),
                }),
            };
            let queue = registry.spawn_queue(key, false, &self.factory)?;
            for (filter, temporary) in topics {
                if retroactive {
                    replay_recent(
                        &mut registry,
                        &filter,
                        temporary,
                        spec.selector.as_deref(),
                        &queue,
                    );
                }
                registry.topic_subscriptions.insert(TopicSubscription {
                    filter,
                    queue: queue.clone(),
                    no_local_connection: no_local.then_some(connection),
                    temporary,
                    selector: spec.selector.clone(),
                });
            }
            queue.send(QueueCommand::Subscribe(topic_spec));
            attachment.private = Some(queue);
        }
        registry.consumers.insert(consumer, attachment);
        Ok(())
    }

    /// The queue of durable subscription `key`, created (and stored) if new or if its topic
    /// or selector changed, and marked active for `consumer`. Returns whether it was created.
    /// A changed selector replaces the subscription and drops its messages, as ActiveMQ does.
    ///
    /// `no_local` is the subscribing connection if it asked not to receive its own messages.
    /// The flag is applied, not only stored: a durable noLocal
    /// subscriber got its own connection's messages; now the subscription skips the messages
    /// of the connection attached last with noLocal (ActiveMQ compares the producer's
    /// connection with the durable consumer's).
    pub(super) fn durable_queue(
        &self,
        registry: &mut Registry,
        key: SubscriptionKey,
        topic: &Destination,
        consumer: ConsumerId,
        no_local: Option<ConnectionId>,
        selector: Option<Arc<Selector>>,
    ) -> Result<(QueueHandle, bool), CoreError> {
        let in_use = || CoreError::DurableInUse {
            client_id: key.client_id.to_string(),
            name: key.name.to_string(),
        };
        if let Some((queue, active)) = registry.durable.get(&key) {
            if active.is_some() {
                return Err(in_use());
            }
            let same_selector =
                registry.topic_subscriptions.of_queue(queue).next().is_some_and(|s| {
                    s.selector.as_ref().map(|s| s.text()) == selector.as_ref().map(|s| s.text())
                });
            if queue.key.destination == *topic && same_selector {
                let queue = queue.clone();
                registry.topic_subscriptions.set_no_local(&queue, no_local);
                registry.durable.insert(key.clone(), (queue.clone(), Some(consumer)));
                registry.consumers.insert(
                    consumer,
                    Attachment {
                        queues: vec![queue.clone()],
                        durable: Some(key),
                        ..Default::default()
                    },
                );
                return Ok((queue, false));
            }
            // Subscribing under the same name to another topic or with another selector
            // replaces the subscription, as in JMS.
            drop(self.drop_durable(registry, &key));
        }
        let info = SubscriptionInfo {
            key: key.clone(),
            topic: topic.clone(),
            selector: selector.as_ref().map(|s| Arc::from(s.text())),
            no_local: no_local.is_some(),
        };
        let queue = registry.spawn_queue(info.queue(), true, &self.factory)?;
        // Not awaited, like a queue declaration: the subscription's first add comes after it.
        drop(self.store.submit(UnitOfWork::with(Operation::AddSubscription(info))));
        registry.topic_subscriptions.insert(TopicSubscription {
            filter: DestinationFilter::new(&topic.name),
            queue: queue.clone(),
            no_local_connection: no_local,
            temporary: false,
            selector,
        });
        registry.durable.insert(key.clone(), (queue.clone(), Some(consumer)));
        registry.consumers.insert(
            consumer,
            Attachment { queues: vec![queue.clone()], durable: Some(key), ..Default::default() },
        );
        Ok((queue, true))
    }

    pub(super) fn drop_durable(
        &self,
        registry: &mut Registry,
        key: &SubscriptionKey,
    ) -> Completion {
        if let Some((queue, _)) = registry.durable.remove(key) {
            registry.topic_subscriptions.remove_queue(&queue);
            queue.send(QueueCommand::Stop);
            if registry.collects_garbage {
                registry.ended_subscriptions.push(queue.key.destination.name.clone());
            }
        }
        self.store.submit(UnitOfWork::with(Operation::RemoveSubscription(key.clone())))
    }

    /// Removes a durable subscription and its stored messages. Refused while a consumer is
    /// attached to it.
    pub fn remove_durable(&self, key: &SubscriptionKey) -> Result<Completion, CoreError> {
        let mut registry = self.registry.lock();
        match registry.durable.get(key) {
            None => Err(CoreError::NoSuchDurable {
                client_id: key.client_id.to_string(),
                name: key.name.to_string(),
            }),
            Some((_, Some(_))) => Err(CoreError::DurableInUse {
                client_id: key.client_id.to_string(),
                name: key.name.to_string(),
            }),
            Some((_, None)) => Ok(self.drop_durable(&mut registry, key)),
        }
    }

    /// Detaches a consumer; its unacknowledged messages return to their queues. A
    /// non-durable topic subscription ends with it; a durable one stays.
    pub fn unsubscribe(&self, consumer: ConsumerId) {
        let mut registry = self.registry.lock();
        registry.detach(consumer);
        self.advise_consumer(&mut registry, consumer, None);
    }

    /// The queues a consumer is attached to.
    pub(super) fn queues_of(&self, consumer: ConsumerId) -> Vec<QueueHandle> {
        let registry = self.registry.lock();
        registry
            .consumers
            .get(&consumer)
            .map_or_else(Vec::new, |a| a.queues.iter().chain(a.private.iter()).cloned().collect())
    }

    /// The messages of queue `name` that `selector` matches, in delivery order, without
    /// consuming them (a queue browser). Empty for a queue that does not exist.
    pub fn browse(
        &self,
        name: &str,
        selector: Option<Arc<Selector>>,
    ) -> impl std::future::Future<Output = Vec<Arc<Message>>> + Send + 'static {
        let (reply, snapshot) = tokio::sync::oneshot::channel();
        if let Some(queue) = self.existing_queue(name) {
            queue.send(QueueCommand::Browse { selector, reply });
        }
        async move { snapshot.await.unwrap_or_default() }
    }

    /// Changes a consumer's prefetch, on the queues it consumes from and for queues its
    /// wildcards match later. From 0 to more, any outstanding pull is replaced by the credit.
    pub fn set_prefetch(&self, consumer: ConsumerId, prefetch: u32) {
        let mut registry = self.registry.lock();
        let Some(attachment) = registry.consumers.get_mut(&consumer) else { return };
        for (_, spec) in &mut attachment.wildcards {
            spec.prefetch = prefetch;
        }
        for queue in attachment.queues.iter().chain(attachment.private.iter()) {
            queue.send(QueueCommand::SetPrefetch { consumer, prefetch });
        }
    }

    /// A prefetch-0 consumer asks for one message (OpenWire's MessagePull): each of its
    /// queues may hand it one, until [`Core::end_pull`].
    pub fn pull(&self, consumer: ConsumerId) {
        for queue in self.queues_of(consumer) {
            queue.send(QueueCommand::Pull { consumer });
        }
    }

    /// Ends a pull: resolves to true if no queue delivered a message for it (the caller then
    /// tells the client there is none), withdrawing what credit is left.
    pub fn end_pull(
        &self,
        consumer: ConsumerId,
    ) -> impl std::future::Future<Output = bool> + Send + 'static {
        let replies: Vec<_> = self
            .queues_of(consumer)
            .into_iter()
            .filter_map(|queue| {
                let (tx, rx) = tokio::sync::oneshot::channel();
                queue.send(QueueCommand::EndPull { consumer, unused: tx }).then_some(rx)
            })
            .collect();
        async move {
            let mut unused = true;
            for reply in replies {
                unused &= reply.await.unwrap_or(true);
            }
            unused
        }
    }

    /// Detaches a consumer like [`Core::unsubscribe`], but of its in-flight messages only
    /// those in `seen` go back marked redelivered; the others were never handed to the
    /// application.
    pub fn unsubscribe_seen_only(&self, consumer: ConsumerId, seen: Vec<MessageId>) {
        for queue in self.queues_of(consumer) {
            queue.send(QueueCommand::SeenOnly { consumer, seen: seen.clone() });
        }
        self.unsubscribe(consumer);
    }

    /// Acknowledges messages; resolves when the acks are durable.
    pub async fn ack(
        &self,
        queue: &QueueHandle,
        consumer: ConsumerId,
        ids: Vec<MessageId>,
    ) -> Result<(), CoreError> {
        let (tx, rx) = tokio::sync::oneshot::channel();
        if !queue.send(QueueCommand::Ack { consumer, ids, done: Some(tx) }) {
            return Err(CoreError::ShuttingDown);
        }
        let completion = rx.await.map_err(|_| CoreError::ShuttingDown)?;
        Ok(completion.await?)
    }

    /// Acknowledges without waiting for durability (auto-ack after a write).
    pub fn ack_now(&self, queue: &QueueHandle, consumer: ConsumerId, ids: Vec<MessageId>) {
        queue.send(QueueCommand::Ack { consumer, ids, done: None });
    }

    /// Gives messages back for redelivery.
    /// The client handed these messages to its application and acknowledges them later: they
    /// stop counting against the consumer's prefetch (OpenWire's delivered ack).
    pub fn consumed(&self, queue: &QueueHandle, consumer: ConsumerId, ids: Vec<MessageId>) {
        queue.send(QueueCommand::Consumed { consumer, ids });
    }

    pub fn nack(&self, queue: &QueueHandle, consumer: ConsumerId, ids: Vec<MessageId>) {
        queue.send(QueueCommand::Nack { consumer, ids });
    }

    /// Gives messages back unprocessed and uncounted (AMQP's `released` outcome): they are
    /// redelivered as if never delivered.
    pub fn release(&self, queue: &QueueHandle, consumer: ConsumerId, ids: Vec<MessageId>) {
        queue.send(QueueCommand::Release { consumer, ids });
    }

    /// The consumer's client gave up on these messages (OpenWire's poison ack, after its
    /// redelivery policy's maximum): they move to a dead-letter queue or are dropped, as the
    /// dead-letter settings say. `cause` is the client's reason, as Java's
    /// `Throwable.toString()`.
    pub fn poison(
        &self,
        queue: &QueueHandle,
        consumer: ConsumerId,
        ids: Vec<MessageId>,
        cause: Option<String>,
    ) {
        queue.send(QueueCommand::Poison { consumer, ids, cause: cause.map(Box::new) });
    }
}

/// Enqueues into `queue` the recent messages (as each topic's subscription recovery policy
/// keeps them, see [`recovery`]) of every topic `filter` matches that `selector`, if any,
/// matches.
pub(super) fn replay_recent(
    registry: &mut Registry,
    filter: &DestinationFilter,
    temporary: bool,
    selector: Option<&Selector>,
    queue: &QueueHandle,
) {
    let mut recent = registry.recent.of(filter, temporary);
    recent.retain(|message| selector.iter().all(|selector| selector.matches(message)));
    if !recent.is_empty() {
        queue.send(QueueCommand::Enqueue(recent));
    }
}
