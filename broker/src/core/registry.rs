//! The routing table: which queues exist, which subscriptions listen on which topics, which
//! consumers are attached where. One lock guards it; it is held only to read or change the
//! table and to push commands into unbounded queue channels, never across an `.await`, so
//! that a send's fan-out is atomic (every subscriber sees one topic's messages in one order).

use std::collections::{HashMap, VecDeque};
use std::sync::Arc;

use store::{Destination, Message, MessageStore, QueueKey, StoreError, SubscriptionKey};

use super::queue::{self, ConsumerSpec, QueueCommand, QueueHandle};
use super::wildcard::DestinationFilter;
use super::{ConsumerId, VirtualTopicRule};

/// A subscription that receives a copy of every matching topic message.
pub(crate) struct TopicSubscription {
    pub filter: DestinationFilter,
    pub queue: QueueHandle,
    /// A subscriber that asked not to receive its own connection's messages.
    pub no_local_connection: Option<u64>,
}

/// Where a consumer is attached, so that closing it detaches it everywhere.
pub(crate) enum Attachment {
    /// A consumer on one queue, or on every queue matching a wildcard (new ones included).
    Queue { queues: Vec<QueueHandle>, wildcard: Option<(DestinationFilter, ConsumerSpec)> },
    /// A non-durable topic subscriber and its private, never-stored queue.
    Topic { queue: QueueHandle },
    /// The active consumer of a durable subscription.
    Durable { key: SubscriptionKey, queue: QueueHandle },
}

/// Recently published messages per topic, replayed to retroactive subscribers (ActiveMQ's
/// fixed-size subscription recovery policy).
#[derive(Default)]
pub(crate) struct RecentMessages {
    messages: VecDeque<Arc<Message>>,
    bytes: usize,
}

impl RecentMessages {
    pub fn push(&mut self, message: Arc<Message>, limit: usize) {
        self.bytes += message.memory_size();
        self.messages.push_back(message);
        while self.bytes > limit {
            match self.messages.pop_front() {
                Some(old) => self.bytes -= old.memory_size(),
                None => break,
            }
        }
    }

    pub fn iter(&self) -> impl Iterator<Item = &Arc<Message>> {
        self.messages.iter()
    }
}

#[derive(Default)]
pub(crate) struct Registry {
    pub queues: HashMap<Arc<str>, QueueHandle>,
    pub topic_subscriptions: Vec<TopicSubscription>,
    /// Durable subscriptions by identity, with the consumer attached to each, if any.
    pub durable: HashMap<SubscriptionKey, (QueueHandle, Option<ConsumerId>)>,
    pub consumers: HashMap<ConsumerId, Attachment>,
    pub recent: HashMap<Arc<str>, RecentMessages>,
}

impl Registry {
    /// The queue destination `name`, created on first use. A new queue picks up every
    /// wildcard consumer whose pattern matches it. Returns whether it was created.
    pub fn queue(
        &mut self,
        name: &Arc<str>,
        store: &Arc<dyn MessageStore>,
    ) -> Result<(QueueHandle, bool), StoreError> {
        if let Some(handle) = self.queues.get(name) {
            return Ok((handle.clone(), false));
        }
        let key = QueueKey::destination(Destination::queue(name.clone()));
        let handle = queue::spawn(key, true, store.clone())?;
        for attachment in self.consumers.values_mut() {
            if let Attachment::Queue { queues, wildcard: Some((filter, spec)) } = attachment {
                if filter.matches(name) {
                    handle.send(QueueCommand::Subscribe(spec.clone()));
                    queues.push(handle.clone());
                }
            }
        }
        self.queues.insert(name.clone(), handle.clone());
        Ok((handle, true))
    }

    /// Keeps `message` (just published to its topic) for retroactive subscribers.
    pub fn remember_recent(&mut self, message: &Arc<Message>, limit: usize) {
        self.recent
            .entry(message.destination.name.clone())
            .or_default()
            .push(message.clone(), limit);
    }

    /// Every queue a message sent to topic `topic` lands in: matching subscriptions (minus
    /// no-local ones of the sending connection) and virtual topic consumer queues.
    pub fn topic_route(
        &self,
        topic: &str,
        connection: u64,
        virtual_topics: &[VirtualTopicRule],
    ) -> Vec<QueueHandle> {
        let mut route: Vec<QueueHandle> = self
            .topic_subscriptions
            .iter()
            .filter(|s| s.filter.matches(topic) && s.no_local_connection != Some(connection))
            .map(|s| s.queue.clone())
            .collect();
        for rule in virtual_topics {
            if !rule.name.matches(topic) {
                continue;
            }
            let consumer_queues = DestinationFilter::new(&format!("{}{topic}", rule.prefix));
            route.extend(
                self.queues
                    .iter()
                    .filter(|(name, _)| consumer_queues.matches(name))
                    .map(|(_, handle)| handle.clone()),
            );
        }
        route
    }

    /// Detaches a consumer from everything it is attached to.
    pub fn detach(&mut self, consumer: ConsumerId) {
        let Some(attachment) = self.consumers.remove(&consumer) else { return };
        match attachment {
            Attachment::Queue { queues, .. } => {
                for queue in queues {
                    queue.send(QueueCommand::Unsubscribe(consumer));
                }
            }
            Attachment::Topic { queue } => {
                // A non-durable subscription ends with its subscriber.
                self.topic_subscriptions.retain(|s| !s.queue.same_queue(&queue));
                queue.send(QueueCommand::Stop);
            }
            Attachment::Durable { key, queue } => {
                queue.send(QueueCommand::Unsubscribe(consumer));
                if let Some((_, active)) = self.durable.get_mut(&key) {
                    if *active == Some(consumer) {
                        *active = None;
                    }
                }
            }
        }
    }
}
