//! The composition of the core: [`Core`], which owns the store, the routing table and the id
//! counters, and every operation adapters call on it. Its parts, by file: `send` routing and
//! storing a message, `subscribe` consumers and acknowledgements, `transaction` local
//! transactions, `flow` the waits of producer flow control, `scheduler` delayed and repeated
//! delivery, `gc` the removal of inactive destinations, `statistics` what the admin endpoint
//! shows, `composite` configured composite destinations, `advise` publishing advisories,
//! `operations` what an administrator does to destinations (purge, delete, move), and
//! `observer` the task that turns queue events into advisories, dead-letter moves, consumer
//! aborts and removals. Nothing below the engine uses it.

mod advise;
mod client_ids;
mod composite;
mod exactly_once;
mod flow;
mod gc;
mod observer;
mod operations;
mod persistent_sessions;
pub mod scheduler;
mod send;
mod statistics;
mod subscribe;
mod temporary;
mod transaction;

use std::sync::atomic::{AtomicU64, Ordering};
use std::sync::Arc;

use parking_lot::Mutex;
use store::{
    Destination, DestinationKind, MessageId, MessageStore, StoreError, SubscriptionKey, TxnId,
};

pub use client_ids::ClientIdHeld;
pub use composite::{CompositeRule, CompositeTarget, Composites};
pub use flow::{held_sends_refusal, HeldSends, RoomFuture, SendAdmission};
pub use operations::{ConsumerListing, DurableListing, OperationError, Retried};
pub use statistics::{ProducerListing, ProducerRegistration};
pub use transaction::Transaction;

use crate::core::dead_letter::DeadLetterSettings;
use crate::core::events::EventSink;
use crate::core::flow::{self as gates, FlowSettings};
use crate::core::policy;
use crate::core::queue::{
    ConsumerSpec, MemoryLimits, QueueCommand, QueueFactory, QueueHandle, QueueStats,
};
use crate::core::recovery::RecentMessages;
use crate::core::registry::{Registry, TopicSubscription};
use crate::core::retained::{self, RetainedMessages};
use crate::core::selector::Selector;
use crate::core::sessions::{self, SessionTable};
use crate::core::temp_store::TempStore;
use crate::core::types::{ConnectionId, ConsumerId, VirtualTopicRule};
use crate::core::wildcard::DestinationFilter;

/// Settings the core takes from the configuration.
#[derive(Debug, Clone)]
pub struct CoreSettings {
    /// Prefetch for consumers that do not ask for one.
    pub default_prefetch: u32,
    pub virtual_topics: Vec<VirtualTopicRule>,
    /// Configured composite destinations by name (see [`composite`]).
    pub composites: Composites,
    /// Holds messages with `AMQ_SCHEDULED_*` properties until due (ActiveMQ's
    /// `schedulerSupport`); when off, those properties are ignored.
    pub scheduler: bool,
    /// Where undeliverable messages go, the STOMP redelivery limit and the expiry sweep.
    pub dead_letters: DeadLetterSettings,
    /// How much memory each queue and all of them together may hold (see `queue/paging.rs`).
    pub memory: MemoryLimits,
    /// What a send that finds no room does (see [`flow`]).
    pub flow: FlowSettings,
    /// Each destination's policy (see [`policy`]).
    pub policies: Arc<policy::Policies>,
    /// The temporary store stored queues spill non-persistent messages to (see
    /// [`temp_store`]); `None`: they stay in memory, held by producer flow control.
    pub temp_store: Option<Arc<TempStore>>,
    /// How many queues may exist (`[destinations] max_destinations`); `None`: no limit.
    pub max_destinations: Option<usize>,
}

impl Default for CoreSettings {
    fn default() -> Self {
        CoreSettings {
            default_prefetch: 1000,
            virtual_topics: vec![VirtualTopicRule {
                name: DestinationFilter::new("VirtualTopic.>"),
                prefix: "Consumer.*.".to_owned(),
            }],
            composites: Composites::new(),
            scheduler: true,
            dead_letters: DeadLetterSettings::default(),
            memory: MemoryLimits::default(),
            flow: FlowSettings::default(),
            policies: Arc::default(),
            temp_store: None,
            max_destinations: None,
        }
    }
}

/// What a consumer subscribes to.
pub struct SubscribeRequest {
    /// A queue or topic; its name may hold wildcards.
    pub destination: Destination,
    pub spec: ConsumerSpec,
    /// Makes a topic subscription durable under this identity.
    pub durable: Option<SubscriptionKey>,
    /// Replays recent topic messages to the new subscriber.
    pub retroactive: bool,
    /// Skips messages sent by the subscriber's own connection (topics only).
    pub no_local: bool,
    /// The subscribing connection.
    pub connection: ConnectionId,
}

/// The broker's shared state: the store, the routing table and the id counters.
pub struct Core {
    store: Arc<dyn MessageStore>,
    settings: CoreSettings,
    /// What every new queue starts with.
    factory: QueueFactory,
    /// The routing table: the one lock, held for lookups and channel pushes only.
    registry: Arc<Mutex<Registry>>,
    /// Client ids of connected clients that claimed one, with their connection.
    client_ids: client_ids::ClientIds,
    /// Shared with the dead-letter task, which gives each dead-letter copy a new id.
    next_message_id: Arc<AtomicU64>,
    next_consumer_id: AtomicU64,
    next_connection_id: AtomicU64,
    next_transaction_id: AtomicU64,
    /// Scheduled delivery, when enabled.
    scheduler: Option<scheduler::Scheduler>,
    /// Closed while the store is at its size limit (see [`flow`]).
    store_space: gates::FlowGate,
    /// Closed while the temporary store is at its size limit (see [`flow`]).
    temp_space: gates::FlowGate,
    /// Producers per destination, for the statistics.
    producers: Arc<statistics::ProducerCounts>,
    /// The retained message of each topic (see [`retained`]).
    retained: RetainedMessages,
    /// The records of sessions that outlive their connection (see [`sessions`]).
    sessions: SessionTable,
    /// The QoS 2 state of MQTT's persistent sessions (see [`crate::core::exactly_once`]).
    exactly_once: crate::core::exactly_once::ExactlyOnceMarks,
    /// Exactly-once sends wait here to be dispatched once durable.
    durable_enqueues: crate::core::exactly_once::DurableEnqueues,
}

impl Core {
    /// Recovers the store's contents and starts a task per stored queue and durable
    /// subscription.
    pub fn recover(
        store: Arc<dyn MessageStore>,
        settings: CoreSettings,
    ) -> Result<Arc<Core>, StoreError> {
        let recovered = store.recover()?;
        let first_transaction = recovered.prepared.iter().map(|t| t.0 + 1).max().unwrap_or(1);
        let settings_scheduler = settings.scheduler;
        let (events, observed) = EventSink::new();
        let factory = QueueFactory {
            store: store.clone(),
            dead_letters: Arc::new(settings.dead_letters.clone()),
            memory: settings.memory.clone(),
            policies: settings.policies.clone(),
            events,
            temp_store: settings.temp_store.clone(),
        };
        let retained = RetainedMessages::recover(&*store)?;
        let sessions = Core::recover_sessions(&*store)?;
        let exactly_once = crate::core::exactly_once::ExactlyOnceMarks::recover(&*store)?;
        let collects_garbage = gc::sweep_period(&settings.policies).is_some();
        let recent = RecentMessages::new(settings.policies.clone(), settings.memory.clone());
        let virtual_consumers =
            crate::core::virtual_topics::VirtualConsumers::new(&settings.virtual_topics);
        let core = Arc::new_cyclic(|core| {
            // The observer serves every queue's events from the first queue on (recovered queues
            // may dead-letter expired messages at once).
            tokio::spawn(observer::run(core.clone(), observed));
            Core {
                store,
                settings,
                factory,
                registry: Arc::new(Mutex::new(Registry {
                    collects_garbage,
                    recent,
                    virtual_consumers,
                    ..Registry::default()
                })),
                client_ids: client_ids::ClientIds::default(),
                next_message_id: Arc::new(AtomicU64::new(recovered.next_message_id.0.max(1))),
                next_consumer_id: AtomicU64::new(1),
                next_connection_id: AtomicU64::new(1),
                next_transaction_id: AtomicU64::new(first_transaction),
                scheduler: settings_scheduler.then(scheduler::Scheduler::new),
                store_space: gates::FlowGate::default(),
                temp_space: gates::FlowGate::default(),
                producers: Arc::default(),
                retained,
                sessions,
                exactly_once,
                durable_enqueues: crate::core::exactly_once::DurableEnqueues::start(),
            }
        });
        {
            let reserved = [
                scheduler::store_queue().destination,
                retained::store_queue().destination,
                sessions::store_queue().destination,
                crate::core::exactly_once::received_queue().destination,
                crate::core::exactly_once::released_queue().destination,
            ];
            let mut registry = core.registry.lock();
            // One line for the whole store (a line per queue buried the log of a broker with
            // many queues): what was recovered, with the messages waiting.
            let mut messages = 0u64;
            for destination in &recovered.destinations {
                // The scheduler's store queue holds jobs and the retained messages' queue
                // retained copies, not a destination's messages.
                if destination.kind.is_queue() && !reserved.contains(destination) {
                    let (handle, _) = registry.queue(&destination.name, &core.factory)?;
                    messages += core.store.count(&handle.key)?;
                }
            }
            let (queues, subscriptions) = (registry.queues.len(), recovered.subscriptions.len());
            for info in recovered.subscriptions {
                let handle = registry.spawn_queue(info.queue(), true, &core.factory)?;
                let selector = match Selector::parse_optional(info.selector.as_deref()) {
                    Ok(selector) => selector.map(Arc::new),
                    Err(error) => {
                        // It was valid when stored; a later parser may be stricter.
                        tracing::warn!(subscription = ?info.key, %error,
                            "stored durable subscription selector no longer parses; ignored");
                        None
                    }
                };
                registry.topic_subscriptions.insert(TopicSubscription {
                    filter: DestinationFilter::new(&info.topic.name),
                    queue: handle.clone(),
                    no_local_connection: None,
                    temporary: false,
                    selector,
                });
                messages += core.store.count(&handle.key)?;
                registry.durable.insert(info.key, (handle, None));
            }
            // What is created from now on is new while the broker runs: its store reads must
            // not happen under the routing lock.
            registry.loads_in_task = true;
            let prepared = recovered.prepared.len();
            tracing::info!(
                store = core.store.name(),
                queues,
                subscriptions,
                messages,
                prepared,
                "recovered the store"
            );
        }
        core.resume_session_expiry();
        match &core.scheduler {
            Some(scheduler) => scheduler.handle.add(scheduler::recover_jobs(&core.store)?),
            None => {
                let waiting = core.store.count(&scheduler::store_queue())?;
                if waiting > 0 {
                    tracing::warn!(
                        waiting,
                        "the store holds scheduled messages but the \
                        scheduler is off ([broker] scheduler = false): they wait until it is on"
                    );
                }
            }
        }
        Ok(core)
    }

    pub fn store(&self) -> &Arc<dyn MessageStore> {
        &self.store
    }

    pub fn settings(&self) -> &CoreSettings {
        &self.settings
    }

    pub fn next_message_id(&self) -> MessageId {
        MessageId(self.next_message_id.fetch_add(1, Ordering::Relaxed))
    }

    /// The prefetch of a new consumer of `destination` that asked for `requested` (`None`:
    /// nothing): its policy's for its kind when it asked for nothing or for its client's
    /// default, else what it asked for (see [`policy::Policy::prefetch_for`]).
    pub fn prefetch_for(
        &self,
        destination: &Destination,
        durable: bool,
        requested: Option<u32>,
    ) -> u32 {
        let kind = match (destination.kind.is_queue(), durable) {
            (true, _) => policy::ConsumerKind::Queue,
            (false, true) => policy::ConsumerKind::DurableTopic,
            (false, false) => policy::ConsumerKind::Topic,
        };
        // A wildcard or composite subscription takes the policy of its pattern's name.
        let policy = self.settings.policies.for_destination(destination);
        policy.prefetch_for(kind, requested, self.settings.default_prefetch)
    }

    /// The memory limit of `destination`: its policy's, else the broker's default.
    pub fn memory_limit_of(&self, destination: &Destination) -> u64 {
        let policy = self.settings.policies.for_destination(destination);
        let default = self.settings.memory.destination_limit();
        policy.memory_limit.unwrap_or(u64::try_from(default).unwrap_or(u64::MAX))
    }

    pub fn next_consumer_id(&self) -> ConsumerId {
        ConsumerId(self.next_consumer_id.fetch_add(1, Ordering::Relaxed))
    }

    pub fn next_connection_id(&self) -> ConnectionId {
        ConnectionId(self.next_connection_id.fetch_add(1, Ordering::Relaxed))
    }

    /// The queue named `name` if it exists.
    pub fn existing_queue(&self, name: &str) -> Option<QueueHandle> {
        self.registry.lock().queues.get(name).cloned()
    }

    /// Whether `destination` exists already (authorization asks: creating one takes the
    /// admin right): a queue in the registry, a live temporary destination, or a topic
    /// something was published to or someone subscribed to by its exact name.
    pub fn destination_exists(&self, destination: &Destination) -> bool {
        let registry = self.registry.lock();
        match destination.kind {
            DestinationKind::Queue => registry.queues.contains_key(&destination.name),
            DestinationKind::TempQueue | DestinationKind::TempTopic => {
                registry.temporary.contains_key(destination)
            }
            DestinationKind::Topic => {
                registry.topic_counters.published.contains_key(&destination.name)
                    || registry.topic_subscriptions.subscribed_as(&destination.name, false)
            }
        }
    }

    /// The queue of a durable subscription, if it exists.
    pub fn durable_subscription(&self, key: &SubscriptionKey) -> Option<QueueHandle> {
        self.registry.lock().durable.get(key).map(|(queue, _)| queue.clone())
    }

    /// The durable subscriptions of `client_id`, each with its topic: what a persistent MQTT
    /// session resumes, or a clean one discards, when its client connects.
    pub fn durable_subscriptions_of(&self, client_id: &str) -> Vec<(SubscriptionKey, Destination)> {
        let registry = self.registry.lock();
        registry
            .durable
            .iter()
            .filter(|(key, _)| &*key.client_id == client_id)
            .map(|(key, (queue, _))| (key.clone(), queue.key().destination.clone()))
            .collect()
    }

    /// Claims a JMS client id for `connection`; false if another connection holds it
    /// (ActiveMQ refuses a second connection with the same client id).
    pub fn claim_client_id(&self, client_id: &str, connection: ConnectionId) -> bool {
        self.client_ids.claim(client_id, connection, None)
    }

    /// Claims a client id for `connection` as [`claim_client_id`](Self::claim_client_id)
    /// does, as a connection that gives it up to a newcomer: `close` is cancelled when one
    /// [takes it over](Self::take_over_client_id) (MQTT-3.1.4-3).
    pub fn claim_client_id_yielding(
        &self,
        client_id: &str,
        connection: ConnectionId,
        close: tokio_util::sync::CancellationToken,
    ) -> bool {
        self.client_ids.claim(client_id, connection, Some(close))
    }

    /// Asks the connection other than `connection` that holds `client_id` to close, if it
    /// claimed the id as one that yields; `None` if nobody else holds it. The caller waits for
    /// the release (never while holding a lock), then claims the id.
    pub fn take_over_client_id(
        &self,
        client_id: &str,
        connection: ConnectionId,
    ) -> Option<ClientIdHeld> {
        self.client_ids.take_over(client_id, connection)
    }

    /// Releases the client id `connection` claimed, if any.
    pub fn release_client_id(&self, connection: ConnectionId) {
        self.client_ids.release(connection);
    }

    /// Starts a local transaction.
    pub fn begin(&self) -> Transaction {
        Transaction::new(TxnId(self.next_transaction_id.fetch_add(1, Ordering::Relaxed)))
    }

    /// Every queue's name and counters.
    pub async fn queue_stats(&self) -> Vec<(Arc<str>, QueueStats)> {
        let handles: Vec<QueueHandle> = self.registry.lock().queues.values().cloned().collect();
        let mut stats = Vec::with_capacity(handles.len());
        for handle in handles {
            if let Some(s) = handle.stats().await {
                stats.push((handle.key.destination.name.clone(), s));
            }
        }
        stats
    }

    /// Stops every queue task and the scheduler (at shutdown, after connections have closed).
    pub fn stop_queues(&self) {
        let mut registry = self.registry.lock();
        for handle in registry.drain_queues() {
            handle.send(QueueCommand::Stop);
        }
        for subscription in registry.topic_subscriptions.drain() {
            subscription.queue.send(QueueCommand::Stop);
        }
        registry.durable.clear();
        registry.consumers.clear();
        registry.recent.forget_all();
        if let Some(scheduler) = &self.scheduler {
            scheduler.handle.stop();
        }
    }
}
