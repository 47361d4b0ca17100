//! The routing table: which queues exist, which subscriptions listen on which topics, which
//! consumers are attached where. One lock guards it; it is held only to read or change the
//! table and to push commands into unbounded queue channels, never across an `.await`, so
//! that a send's fan-out is atomic (every subscriber sees one topic's messages in one order).

use std::collections::HashMap;
use std::sync::Arc;

use store::{
    Destination, DestinationKind, Message, MessageStore, QueueKey, StoreError, SubscriptionKey,
};

use super::advisory::AdvisoryState;
use super::audit::ProducerAudit;
use super::dead_letter::DeadLetterSettings;
use super::events::EventSink;
use super::policy::Policies;
use super::queue::{self, ConsumerSpec, MemoryLimits, QueueCommand, QueueHandle};
use super::recovery::RecoveryBuffer;
use super::selector::Selector;
use super::statistics::TopicCounters;
use super::temp_store::TempStore;
use super::types::{now_millis, off_the_runtime, ConsumerId, VirtualTopicRule};
use super::wildcard::DestinationFilter;

/// A subscription that receives a copy of every matching topic message.
#[derive(Clone)]
pub(crate) struct TopicSubscription {
    pub filter: DestinationFilter,
    pub queue: QueueHandle,
    /// A subscriber that asked not to receive its own connection's messages.
    pub no_local_connection: Option<u64>,
    /// Subscribed to a temporary topic: temporary and ordinary topics never match each
    /// other, even through wildcards (as in ActiveMQ).
    pub temporary: bool,
    /// Only messages this selector matches are routed to the subscription (so a durable
    /// subscription stores nothing else).
    pub selector: Option<Arc<Selector>>,
}

/// Every topic subscription, shared copy-on-write: a send takes a snapshot under the lock and
/// evaluates the selectors of its topic's subscriptions without it ([`SelectorVerdicts`]);
/// a change while a snapshot is out copies the list.
#[derive(Default)]
pub(crate) struct TopicSubscriptions(Arc<Vec<TopicSubscription>>);

impl std::ops::Deref for TopicSubscriptions {
    type Target = [TopicSubscription];

    fn deref(&self) -> &[TopicSubscription] {
        &self.0
    }
}

impl TopicSubscriptions {
    /// The list, to change it.
    pub fn edit(&mut self) -> &mut Vec<TopicSubscription> {
        Arc::make_mut(&mut self.0)
    }

    pub fn snapshot(&self) -> Arc<Vec<TopicSubscription>> {
        self.0.clone()
    }
}

/// Which subscriptions of a snapshot of [`TopicSubscriptions`] a message's selectors let
/// through, decided without the routing lock. Only good while the list is still the snapshot
/// (nothing subscribed or left since); otherwise the route evaluates under the lock.
pub(crate) struct SelectorVerdicts {
    snapshot: Arc<Vec<TopicSubscription>>,
    /// By position in the snapshot: true if the subscription has no selector, or its selector
    /// matches the message.
    passes: Vec<bool>,
}

impl SelectorVerdicts {
    /// Evaluates, against `message`, the selector of every subscription in `snapshot` that
    /// listens on one of `topics` (`(name, temporary)`). None if no such subscription has a
    /// selector.
    pub fn judge(
        snapshot: Arc<Vec<TopicSubscription>>,
        topics: &[(&str, bool)],
        message: &Message,
    ) -> Option<SelectorVerdicts> {
        let judged = |s: &TopicSubscription| {
            s.selector.is_some()
                && topics
                    .iter()
                    .any(|(topic, temporary)| s.temporary == *temporary && s.filter.matches(topic))
        };
        let count = snapshot.iter().filter(|s| judged(s)).count();
        if count == 0 {
            return None;
        }
        let evaluate = || {
            snapshot
                .iter()
                .map(|s| match &s.selector {
                    Some(selector) if judged(s) => selector.matches(message),
                    _ => true,
                })
                .collect()
        };
        // Many selectors take long: other tasks of this worker move elsewhere meanwhile.
        let passes = if count >= 64 { off_the_runtime(evaluate) } else { evaluate() };
        Some(SelectorVerdicts { snapshot, passes })
    }
}

/// Where a consumer is attached, so that closing it detaches it everywhere. A composite
/// consumer (`A,B`) may be attached to several queues and topics at once.
#[derive(Default)]
pub(crate) struct Attachment {
    /// Shared queues it consumes from: queue destinations (wildcard matches included),
    /// temporary queues, a durable subscription's queue.
    pub queues: Vec<QueueHandle>,
    /// Queue-name wildcards: queues created later that match get the consumer too.
    pub wildcards: Vec<(DestinationFilter, ConsumerSpec)>,
    /// Its own non-durable topic subscription queue, which ends with it.
    pub private: Option<QueueHandle>,
    /// The durable subscription it is the active consumer of.
    pub durable: Option<SubscriptionKey>,
}

/// A temporary destination: lives as long as the connection that created it.
pub(crate) struct Temporary {
    pub owner: u64,
    /// A temporary queue's queue (never stored); `None` for a temporary topic.
    pub queue: Option<QueueHandle>,
}

#[derive(Default)]
pub(crate) struct Registry {
    pub queues: HashMap<Arc<str>, QueueHandle>,
    pub topic_subscriptions: TopicSubscriptions,
    /// Durable subscriptions by identity, with the consumer attached to each, if any.
    pub durable: HashMap<SubscriptionKey, (QueueHandle, Option<ConsumerId>)>,
    pub consumers: HashMap<ConsumerId, Attachment>,
    /// Each topic's recent messages for retroactive subscribers, as its policy says (see
    /// [`recovery`](super::recovery)); no entry for a topic whose policy keeps nothing.
    pub recent: HashMap<Destination, RecoveryBuffer>,
    /// Temporary queues and topics by destination.
    pub temporary: HashMap<Destination, Temporary>,
    /// Duplicate detection for resent messages, per destination and producer.
    pub audit: ProducerAudit,
    /// What advisories about consumers and connections need to remember.
    pub advisories: AdvisoryState,
    /// The broker's dead-letter settings, for queues whose policy has none of its own.
    pub dead_letters: Arc<DeadLetterSettings>,
    /// Where every queue's task reports its events (see [`events`](super::events)).
    pub events: EventSink,
    /// The memory limits every queue keeps to (the broker's is shared).
    pub memory: MemoryLimits,
    /// Messages published per topic, for the statistics.
    pub topic_counters: TopicCounters,
    /// Every destination's policy.
    pub policies: Arc<Policies>,
    /// Where stored queues spill non-persistent messages beyond their memory limits (none
    /// for a broker without a data directory).
    pub temp_store: Option<Arc<TempStore>>,
    /// Some policy removes inactive destinations (see [`gc`](super::gc)).
    pub collects_garbage: bool,
    /// Queues created from now on read their first window in their own task, not under the
    /// routing lock (set once the store is recovered; see [`queue::FirstWindow`]).
    pub loads_in_task: bool,
    /// Topic subscriptions that ended since the last inactive-destination sweep, by the
    /// destination they subscribed to (only while `collects_garbage`): their topics were active
    /// until now.
    pub ended_subscriptions: Vec<Arc<str>>,
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
        let handle = self.spawn_queue(key, true, store)?;
        for attachment in self.consumers.values_mut() {
            for (filter, spec) in &attachment.wildcards {
                if filter.matches(name) {
                    handle.send(QueueCommand::Subscribe(spec.clone()));
                    attachment.queues.push(handle.clone());
                }
            }
        }
        self.queues.insert(name.clone(), handle.clone());
        Ok((handle, true))
    }

    /// Starts the task of queue `key` with its destination's policy (a subscription's queue
    /// takes its topic's); `stored`: it keeps persistent messages in the store.
    pub fn spawn_queue(
        &mut self,
        key: QueueKey,
        stored: bool,
        store: &Arc<dyn MessageStore>,
    ) -> Result<QueueHandle, StoreError> {
        let policy = self.policies.for_destination(&key.destination);
        let dead_letters = policy.dead_letters.clone().unwrap_or_else(|| self.dead_letters.clone());
        let limits = self.memory.with_destination_limit(policy.memory_limit);
        let events = self.events.clone();
        let first_window = match self.loads_in_task {
            true => queue::FirstWindow::InTask,
            false => queue::FirstWindow::Now(&mut self.audit),
        };
        let temp_store = self.temp_store.clone();
        queue::spawn(
            key,
            stored,
            store.clone(),
            dead_letters,
            limits,
            policy,
            events,
            first_window,
            temp_store,
        )
    }

    /// Keeps `message` (just published to `topic`) for retroactive subscribers, as the topic's
    /// subscription recovery policy says.
    pub fn remember_recent(&mut self, topic: &Destination, message: &Arc<Message>) {
        let (now, now_millis) = (tokio::time::Instant::now(), now_millis());
        let buffer = match self.recent.get_mut(topic) {
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
                self.recent.entry(topic.clone()).or_insert(buffer)
            }
        };
        let before = buffer.bytes();
        buffer.push(message.clone(), now, now_millis);
        self.memory.account_elsewhere(before, buffer.bytes());
    }

    /// The recent messages of every topic `filter` matches (temporary topics only for a
    /// `temporary` subscription), oldest first per topic.
    pub fn recent_of(&mut self, filter: &DestinationFilter, temporary: bool) -> Vec<Arc<Message>> {
        let (now, now_millis) = (tokio::time::Instant::now(), now_millis());
        let mut recent = Vec::new();
        for (topic, buffer) in &mut self.recent {
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
    pub fn forget_recent(&mut self, topic: &Destination) {
        if let Some(buffer) = self.recent.remove(topic) {
            self.memory.account_elsewhere(buffer.bytes(), 0);
        }
    }

    /// Every queue `message`, sent to topic `topic`, lands in: matching subscriptions whose
    /// selector matches it (minus no-local ones of the sending connection) and virtual topic
    /// consumer queues. Selectors are taken from `verdicts` when they were judged on the
    /// current subscriptions, else evaluated here.
    pub fn topic_route(
        &self,
        topic: &str,
        message: &Message,
        temporary: bool,
        connection: u64,
        virtual_topics: &[VirtualTopicRule],
        verdicts: Option<&SelectorVerdicts>,
    ) -> Vec<QueueHandle> {
        let verdicts = verdicts.filter(|v| Arc::ptr_eq(&v.snapshot, &self.topic_subscriptions.0));
        let mut route: Vec<QueueHandle> = self
            .topic_subscriptions
            .iter()
            .enumerate()
            .filter(|(index, s)| {
                s.temporary == temporary
                    && s.filter.matches(topic)
                    && s.no_local_connection != Some(connection)
                    && match verdicts {
                        Some(verdicts) => verdicts.passes[*index],
                        None => s.selector.iter().all(|selector| selector.matches(message)),
                    }
            })
            .map(|(_, s)| s.queue.clone())
            .collect();
        if temporary {
            return route;
        }
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
        for queue in attachment.queues {
            queue.send(QueueCommand::Unsubscribe(consumer));
        }
        if let Some(queue) = attachment.private {
            // A non-durable subscription ends with its subscriber.
            self.topic_subscriptions.edit().retain(|s| !s.queue.same_queue(&queue));
            queue.send(QueueCommand::Stop);
            if self.collects_garbage {
                self.ended_subscriptions.push(queue.key.destination.name.clone());
            }
        }
        if let Some(key) = attachment.durable {
            if let Some((_, active)) = self.durable.get_mut(&key) {
                if *active == Some(consumer) {
                    *active = None;
                }
            }
        }
    }
}
