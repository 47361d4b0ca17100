//! The composition of the core: [`Core`], which owns the store, the routing table and the id
//! counters, and every operation adapters call on it. Its parts, by file: `send` routing and
//! storing a message, `subscribe` consumers and acknowledgements, `transaction` local
//! transactions, `flow` the waits of producer flow control, `scheduler` delayed and repeated
//! delivery, `gc` the removal of inactive destinations, `statistics` what the admin endpoint
//! shows, `composite` configured composite destinations, `advise` publishing advisories, and
//! `observer` the task that turns queue events into advisories, dead-letter moves, consumer
//! aborts and removals. Nothing below the engine uses it.

mod advise;
mod composite;
mod flow;
mod gc;
mod observer;
pub mod scheduler;
mod statistics;
mod transaction;

use std::sync::atomic::{AtomicU64, Ordering};
use std::sync::Arc;

use parking_lot::Mutex;
use store::{
    Completion, Destination, DestinationKind, Message, MessageId, MessageStore, Operation,
    QueueKey, StoreError, SubscriptionInfo, SubscriptionKey, TxnId, UnitOfWork,
};

pub use composite::{CompositeRule, CompositeTarget, Composites};
pub use flow::{held_sends_refusal, HeldSends, RoomFuture, SendAdmission};
pub use statistics::ProducerRegistration;
pub use transaction::Transaction;

use crate::core::dead_letter::DeadLetterSettings;
use crate::core::events::EventSink;
use crate::core::flow::{self as gates, FlowSettings};
use crate::core::policy;
use crate::core::queue::{ConsumerSpec, MemoryLimits, QueueCommand, QueueHandle, QueueStats};
use crate::core::registry::{Attachment, Registry, SelectorVerdicts, Temporary, TopicSubscription};
use crate::core::selector::Selector;
use crate::core::temp_store::TempStore;
use crate::core::types::ConnectionId;
use crate::core::types::{
    composite_parts, ConsumerId, CoreError, VirtualTopicRule, ADVISORY_DESTINATION,
    ADVISORY_OPERATION, ADVISORY_TEMP_QUEUE, ADVISORY_TEMP_TOPIC,
};
use crate::core::wildcard::DestinationFilter;

/// Enqueues into `queue` the recent messages (as each topic's subscription recovery policy
/// keeps them, see [`recovery`]) of every topic `filter` matches that `selector`, if any,
/// matches.
fn replay_recent(
    registry: &mut Registry,
    filter: &DestinationFilter,
    temporary: bool,
    selector: Option<&Selector>,
    queue: &QueueHandle,
) {
    let mut recent = registry.recent_of(filter, temporary);
    recent.retain(|message| selector.iter().all(|selector| selector.matches(message)));
    if !recent.is_empty() {
        queue.send(QueueCommand::Enqueue(recent));
    }
}

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
    /// Shared with the dead-letter task (which holds it weakly).
    registry: Arc<Mutex<Registry>>,
    /// JMS client ids of connected clients that claimed one, with their connection.
    client_ids: Mutex<std::collections::HashMap<Arc<str>, ConnectionId>>,
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
        let dead_letters = Arc::new(settings.dead_letters.clone());
        let (events, observed) = EventSink::new();
        let memory = settings.memory.clone();
        let policies = settings.policies.clone();
        let collects_garbage = gc::sweep_period(&policies).is_some();
        let temp_store = settings.temp_store.clone();
        let virtual_consumers =
            crate::core::virtual_topics::VirtualConsumers::new(&settings.virtual_topics);
        let core = Arc::new_cyclic(|core| {
            // The observer serves every queue's events from the first queue on (recovered queues
            // may dead-letter expired messages at once).
            tokio::spawn(observer::run(core.clone(), observed));
            Core {
                store,
                settings,
                registry: Arc::new(Mutex::new(Registry {
                    dead_letters,
                    events,
                    memory,
                    policies,
                    collects_garbage,
                    temp_store,
                    virtual_consumers,
                    ..Registry::default()
                })),
                client_ids: Mutex::new(std::collections::HashMap::new()),
                next_message_id: Arc::new(AtomicU64::new(recovered.next_message_id.0.max(1))),
                next_consumer_id: AtomicU64::new(1),
                next_connection_id: AtomicU64::new(1),
                next_transaction_id: AtomicU64::new(first_transaction),
                scheduler: settings_scheduler.then(scheduler::Scheduler::new),
                store_space: gates::FlowGate::default(),
                temp_space: gates::FlowGate::default(),
                producers: Arc::default(),
            }
        });
        {
            let scheduler_queue = scheduler::store_queue();
            let mut registry = core.registry.lock();
            // One line for the whole store (a line per queue buried the log of a broker with
            // many queues): what was recovered, with the messages waiting.
            let mut messages = 0u64;
            for destination in &recovered.destinations {
                // The scheduler's store queue holds jobs, not a destination's messages.
                if destination.kind.is_queue() && *destination != scheduler_queue.destination {
                    let (handle, _) = registry.queue(&destination.name, &core.store)?;
                    messages += core.store.count(&handle.key)?;
                }
            }
            let (queues, subscriptions) = (registry.queues.len(), recovered.subscriptions.len());
            for info in recovered.subscriptions {
                let handle = registry.spawn_queue(info.queue(), true, &core.store)?;
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

    /// Accepts a message from `connection`: routes it, stores it where it is stored (once,
    /// referenced by each stored queue), and hands it to its queues, or, inside a
    /// transaction, keeps it for the commit. The completion resolves when the message is
    /// durable (at once when nothing was stored); the message may be dispatched before that
    /// (concurrent store and dispatch).
    ///
    /// A message with `AMQ_SCHEDULED_*` properties goes to the scheduler instead (see
    /// [`scheduler`]); an invalid schedule is refused with [`CoreError::InvalidSchedule`].
    pub fn send(
        &self,
        message: Arc<Message>,
        connection: ConnectionId,
        transaction: Option<&mut Transaction>,
    ) -> Result<Completion, CoreError> {
        // Checked first: a refused schedule must not count as seen by the audit.
        let schedule = self.schedule_of(&message)?;
        let verdicts = match schedule {
            None => self.judge_selectors(&message),
            Some(_) => None,
        };
        let mut registry = self.registry.lock();
        // Under the registry lock, so that an original and its resend (on another connection)
        // are judged in the order they are routed.
        if registry.audit.is_duplicate(&message) {
            tracing::debug!(id = %message.message_id, destination = %message.destination,
                "duplicate send ignored (a resend after failover)");
            return Ok(Completion::ready(Ok(())));
        }
        if let Some(schedule) = schedule {
            drop(registry);
            return self.schedule(message, schedule, transaction);
        }
        // A transacted topic message is published (and becomes recent for retroactive
        // subscribers) at the commit: an aborted one must never be replayed.
        let publish = transaction.is_none();
        let route = self.route(&mut registry, &message, connection, publish, verdicts.as_ref())?;
        let stored: Vec<QueueKey> = if message.is_persistent() {
            route.iter().filter(|q| q.stored).map(|q| (*q.key).clone()).collect()
        } else {
            Vec::new()
        };
        let txn = transaction.as_ref().map(|t| t.id);
        let stores_something = !stored.is_empty();
        // Announced before the submit makes it readable, so that paging leaves it to the
        // `Enqueue`; a transaction's sends are announced (and enqueued) at its commit.
        let arrivals = match transaction.is_some() {
            true => Vec::new(),
            false => route.iter().map(|queue| queue.announce(&message)).collect(),
        };
        let mut unit = UnitOfWork::new();
        if stores_something {
            unit.push(Operation::AddMessage { message: message.clone(), queues: stored, txn });
        }
        // A store that refuses at once must not see the message dispatched: the producer is
        // told it failed and may send it again (see `stage`).
        let staged = crate::core::queue::stage(&*self.store, unit, arrivals)?;
        if let Some(transaction) = transaction {
            transaction.has_store_records |= stores_something;
            transaction.sends.push((route, message, connection));
        }
        Ok(staged.enqueue())
    }

    /// The selectors of the subscriptions `message` may reach through its topics, evaluated
    /// on copies of them without the routing lock, so that a topic with many selector
    /// subscribers does not hold every other send up (see [`SelectorVerdicts`]).
    fn judge_selectors(&self, message: &Message) -> Option<SelectorVerdicts> {
        let targets = self.targets(message);
        let topics: Vec<(&str, bool)> = targets
            .iter()
            .filter(|part| !part.kind.is_queue())
            .map(|part| (&*part.name, part.kind == DestinationKind::TempTopic))
            .collect();
        if topics.is_empty() {
            return None;
        }
        let judged = self.registry.lock().topic_subscriptions.selectors_for(&topics);
        SelectorVerdicts::judge(judged, message)
    }

    /// Every queue a message sent by `connection` lands in, for a plain, composite (`A,B`) or
    /// configured composite destination ([`Core::targets`]). `publish` also keeps topic
    /// messages for retroactive subscribers. Topic subscriptions' selectors come from
    /// `verdicts` when they still apply, else they are evaluated here, under the lock.
    pub(crate) fn route(
        &self,
        registry: &mut Registry,
        message: &Arc<Message>,
        connection: ConnectionId,
        publish: bool,
        verdicts: Option<&SelectorVerdicts>,
    ) -> Result<Vec<QueueHandle>, CoreError> {
        let mut route: Vec<QueueHandle> = Vec::new();
        let targets = self.targets(message);
        // Every new queue part is checked before any is created: a refused composite send
        // creates nothing.
        for part in targets.iter().filter(|part| part.kind == DestinationKind::Queue) {
            if !DestinationFilter::is_pattern(&part.name) {
                self.room_for_queue(registry, &part.name)?;
            }
        }
        for part in targets {
            if DestinationFilter::is_pattern(&part.name) {
                return Err(CoreError::WildcardSend(part.to_string()));
            }
            let reached = match part.kind {
                DestinationKind::Queue => vec![self.declare_queue(registry, &part.name)?],
                DestinationKind::TempQueue => match registry.temporary.get(&part) {
                    Some(Temporary { queue: Some(queue), .. }) => vec![queue.clone()],
                    _ => return Err(CoreError::NoSuchTemporary(part.to_string())),
                },
                DestinationKind::Topic | DestinationKind::TempTopic => {
                    let temporary = part.kind == DestinationKind::TempTopic;
                    if temporary && !registry.temporary.contains_key(&part) {
                        return Err(CoreError::NoSuchTemporary(part.to_string()));
                    }
                    if publish {
                        registry.remember_recent(&part, message);
                        if !temporary {
                            registry.topic_counters.published(&part.name);
                        }
                    }
                    let reached = registry.topic_route(
                        &part.name,
                        message,
                        temporary,
                        connection,
                        &self.settings.virtual_topics,
                        verdicts,
                    );
                    if reached.is_empty() && publish {
                        self.advise_no_consumers(registry, &part, message);
                    }
                    reached
                }
            };
            for queue in reached {
                if !route.iter().any(|q| q.same_queue(&queue)) {
                    route.push(queue);
                }
            }
        }
        Ok(route)
    }

    /// Creates a temporary queue or topic owned by `connection`; it goes when the connection
    /// releases it or closes. Announced on the `ActiveMQ.Advisory.Temp*` topics, which the
    /// ActiveMQ JMS client watches before it sends to a temporary destination.
    pub fn create_temporary(
        &self,
        destination: Destination,
        connection: ConnectionId,
    ) -> Result<(), CoreError> {
        let mut registry = self.registry.lock();
        if registry.temporary.contains_key(&destination) {
            return Ok(());
        }
        let queue = match destination.kind {
            DestinationKind::TempQueue => Some(registry.spawn_queue(
                QueueKey::destination(destination.clone()),
                false,
                &self.store,
            )?),
            DestinationKind::TempTopic => None,
            _ => return Err(CoreError::NotTemporary(destination.to_string())),
        };
        registry.temporary.insert(destination.clone(), Temporary { owner: connection, queue });
        self.advise(&mut registry, &destination, "add");
        Ok(())
    }

    /// Deletes a temporary destination of `connection`. Refused while another connection
    /// consumes from it, or when `connection` does not own it.
    pub fn delete_temporary(
        &self,
        destination: &Destination,
        connection: ConnectionId,
    ) -> Result<(), CoreError> {
        let mut registry = self.registry.lock();
        match registry.temporary.get(destination) {
            None => return Ok(()),
            Some(temporary) if temporary.owner != connection => {
                return Err(CoreError::NotOwner(destination.to_string()))
            }
            Some(_) => {}
        }
        self.drop_temporary(&mut registry, destination);
        Ok(())
    }

    /// Deletes every temporary destination `connection` created (it is closing).
    pub fn release_connection(&self, connection: ConnectionId) {
        let mut registry = self.registry.lock();
        let owned: Vec<Destination> = registry
            .temporary
            .iter()
            .filter(|(_, temporary)| temporary.owner == connection)
            .map(|(destination, _)| destination.clone())
            .collect();
        for destination in owned {
            self.drop_temporary(&mut registry, &destination);
        }
        self.advise_connection_closed(&mut registry, connection);
    }

    fn drop_temporary(&self, registry: &mut Registry, destination: &Destination) {
        if let Some(temporary) = registry.temporary.remove(destination) {
            if let Some(queue) = temporary.queue {
                queue.send(QueueCommand::Stop);
            }
            registry.audit.forget(destination);
            registry.forget_recent(destination);
            self.advise(registry, destination, "remove");
        }
    }

    /// Publishes an advisory about a temporary destination (`operation` is "add" or
    /// "remove") to `ActiveMQ.Advisory.TempQueue` or `ActiveMQ.Advisory.TempTopic`. The
    /// message carries the destination and operation as properties; each protocol adapter
    /// renders it the way its clients expect (OpenWire: a DestinationInfo).
    fn advise(&self, registry: &mut Registry, destination: &Destination, operation: &str) {
        let topic = match destination.kind {
            DestinationKind::TempQueue => ADVISORY_TEMP_QUEUE,
            DestinationKind::TempTopic => ADVISORY_TEMP_TOPIC,
            _ => return,
        };
        let properties = vec![
            (ADVISORY_DESTINATION, store::PropertyValue::String(destination.to_string().into())),
            (ADVISORY_OPERATION, store::PropertyValue::String(operation.into())),
        ];
        self.publish_advisory(registry, topic, properties);
    }

    /// Whether the queues `destination` names (each queue part of a composite) exist or may
    /// be created within the destination limits; asked where a client names a destination
    /// before it uses it (an AMQP producer link), so that the refusal comes at once.
    pub fn check_room_for(&self, destination: &Destination) -> Result<(), CoreError> {
        let registry = self.registry.lock();
        composite_parts(destination)
            .iter()
            .filter(|part| part.kind == DestinationKind::Queue)
            .filter(|part| !DestinationFilter::is_pattern(&part.name))
            .try_for_each(|part| self.room_for_queue(&registry, &part.name))
    }

    /// Refuses a queue that does not exist yet when one more would pass `[destinations]
    /// max_destinations` or the `max_destinations` of its policy. Only queues a client asks
    /// for go through here: recovered and dead-letter queues are never refused, but count.
    fn room_for_queue(&self, registry: &Registry, name: &str) -> Result<(), CoreError> {
        if registry.queues.contains_key(name) {
            return Ok(());
        }
        let refused = |limit, scope| CoreError::TooManyDestinations {
            destination: format!("queue://{name}"),
            limit,
            scope,
        };
        if let Some(limit) = self.settings.max_destinations {
            if registry.queues.len() >= limit {
                return Err(refused(limit, "by [destinations] max_destinations".to_owned()));
            }
        }
        let policy = self.settings.policies.for_destination(&Destination::queue(name));
        if let Some(cap) = &policy.max_destinations {
            // A scan, as ActiveMQ's: it runs only when a new queue is created under a policy
            // with a limit, which is rare next to sends.
            let matching = registry.queues.keys().filter(|queue| cap.pattern.matches(queue));
            if matching.count() >= cap.max {
                let scope = format!("for the policy queue = \"{}\"", cap.pattern.as_str());
                return Err(refused(cap.max, scope));
            }
        }
        Ok(())
    }

    /// Declares a queue destination to the store when it is first used (within the
    /// destination limits, see [`Core::check_room_for`]).
    fn declare_queue(
        &self,
        registry: &mut Registry,
        name: &Arc<str>,
    ) -> Result<QueueHandle, CoreError> {
        self.room_for_queue(registry, name)?;
        let (handle, created) = registry.queue(name, &self.store)?;
        if created {
            self.advise_queue_created(registry, name);
            // Not awaited: a later unit (an add) is applied after it, and a queue lost in a
            // crash before any message reached it is harmless.
            drop(self.store.submit(UnitOfWork::with(Operation::AddDestination(
                Destination::queue(name.clone()),
            ))));
        }
        Ok(handle)
    }

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

    fn attach(&self, request: SubscribeRequest) -> Result<(), CoreError> {
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
            let queue = registry.spawn_queue(key, false, &self.store)?;
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
    fn durable_queue(
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
        let queue = registry.spawn_queue(info.queue(), true, &self.store)?;
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

    fn drop_durable(&self, registry: &mut Registry, key: &SubscriptionKey) -> Completion {
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
    fn queues_of(&self, consumer: ConsumerId) -> Vec<QueueHandle> {
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

    /// Claims a JMS client id for `connection`; false if another connection holds it
    /// (ActiveMQ refuses a second connection with the same client id).
    pub fn claim_client_id(&self, client_id: &str, connection: ConnectionId) -> bool {
        let mut ids = self.client_ids.lock();
        match ids.get(client_id) {
            Some(owner) => *owner == connection,
            None => {
                ids.insert(client_id.into(), connection);
                true
            }
        }
    }

    /// Releases the client id `connection` claimed, if any.
    pub fn release_client_id(&self, connection: ConnectionId) {
        self.client_ids.lock().retain(|_, owner| *owner != connection);
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
        queue.send(QueueCommand::Poison { consumer, ids, cause });
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
        let topics: Vec<Destination> = registry.recent.keys().cloned().collect();
        for topic in &topics {
            registry.forget_recent(topic);
        }
        if let Some(scheduler) = &self.scheduler {
            scheduler.handle.stop();
        }
    }
}
