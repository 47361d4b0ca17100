//! A queue of messages with its consumers: one task owns all of its state and is fed by an
//! unbounded channel.
//!
//! The same task type serves every place messages wait for consumers: a queue destination, a
//! durable topic subscription (a stored queue of references under its topic), and a
//! non-durable topic subscriber (a queue that is never stored).
//!
//! Why a task and an unbounded channel: the queue must never wait on anyone while it owns its
//! state (DESIGN.md's no-deadlock rule). Commands come in without back-pressure (producers are
//! paused by flow control before they get here, never the queue), and deliveries go out to
//! connections without back-pressure too, bounded by each consumer's prefetch and by the
//! memory limits, which count in-flight bytes (`paging.rs`).
//!
//! Messages wait in `ready`, ordered by [`PageKey`] (priority, then id). A delivered message
//! moves to its consumer's in-flight set; an ack removes it (and, for a persistent message in a
//! stored queue, removes its stored reference); a nack, or the consumer going away, puts it back
//! in `ready` at its original position with its delivery count raised, so it goes out marked
//! redelivered. An ack inside a transaction frees the consumer's credit but keeps the message
//! until the transaction ends: a commit drops it, a rollback makes it deliverable again.
//!
//! A stored queue keeps only a window of its ready messages in memory, within its memory
//! limits, and pages the rest in from the store as consumers drain (`paging.rs`).
//!
//! The task's parts, by file: this one has the types, the handle, `spawn` and the run loop
//! that takes commands; `dispatch.rs` makes messages ready and delivers them; `settle.rs` is
//! everything that ends a delivery (acks, nacks, releases, poison, transactions' ends,
//! consumers going, expiry, dead-lettering); `paging.rs` the window over the store;
//! `watch.rs` slow consumers, the pending message limit and advisories; `groups.rs` message
//! groups.

use std::collections::{BTreeMap, BTreeSet, HashMap};
use std::hash::BuildHasherDefault;
use std::sync::Arc;

use rustc_hash::FxHasher;
use store::{Completion, Message, MessageId, MessageStore, PageKey, QueueKey, StoreError};
use tokio::sync::{mpsc, oneshot};

use super::audit::ProducerAudit;
use super::dead_letter::DeadLetterSettings;
use super::events::{EventSink, QueueEvent};
use super::policy::{Policies, Policy};
use super::selector::Selector;
use super::slow::{self, SlowState};
use super::temp_store::TempStore;
pub(crate) use super::types::now_millis;
use super::types::{AckMode, ConsumerId};

mod arrival;
mod dispatch;
mod groups;
mod handle;
mod operations;
mod paging;
mod settle;
mod watch;

pub(crate) use arrival::{stage, Arrival, Staged};
use groups::GroupMap;
pub use handle::{QueueHandle, QueueShared};
pub(crate) use operations::{shown_selector, Disposal, Inspect, Origins, Take, Taken, Which};
pub use operations::{ConsumerDetail, InspectedMessage, Inspection};
pub(crate) use paging::Arriving;
pub use paging::MemoryLimits;
use paging::Paging;

/// A map keyed by message id, hashed with FxHash: ids are the broker's own sequence (no
/// client picks them), and a consumer's in-flight map is looked up on every delivery and ack,
/// where SipHash was a visible share of the queue task's time.
pub(crate) type MessageMap<V> = HashMap<MessageId, V, BuildHasherDefault<FxHasher>>;

/// A message handed to a consumer.
#[derive(Debug, Clone)]
pub struct Delivery {
    pub consumer: ConsumerId,
    /// The queue it comes from, to which its ack goes (a wildcard consumer has several).
    pub queue: QueueHandle,
    pub message: Arc<Message>,
    /// True if the message was delivered before (to this or another consumer).
    pub redelivered: bool,
    /// 1 on first delivery.
    pub delivery_count: u32,
}

/// A message waiting in a queue, with the queue's delivery state beside it.
#[derive(Debug, Clone)]
struct QueuedMessage {
    message: Arc<Message>,
    /// How many times it has been handed to a consumer before.
    delivery_count: u32,
    /// Acknowledged inside a transaction that has not ended yet.
    acked_in_transaction: bool,
    /// Handed to the application, the client says (OpenWire's delivered ack), though not
    /// acknowledged yet.
    consumed: bool,
    /// `message.memory_size()`, computed once: the accounting needs it some eight times in
    /// a message's life, and by its ack the message's properties are out of the cache.
    size: usize,
    /// The count of the message's body in the broker's usage, when several queues hold it
    /// (the same `Arc`): let go with the last of them. This queue's own figures count the
    /// message whole all the same; only what it adds to the broker's leaves the body out.
    shared: Option<Arc<paging::SharedBody>>,
}

impl QueuedMessage {
    fn new(message: Arc<Message>) -> Self {
        let size = message.memory_size();
        QueuedMessage {
            message,
            delivery_count: 0,
            acked_in_transaction: false,
            consumed: false,
            size,
            shared: None,
        }
    }

    /// A message other queues hold too, its body counted once in the broker's usage by
    /// `body`.
    fn sharing(message: Arc<Message>, body: Arc<paging::SharedBody>) -> Self {
        QueuedMessage { shared: Some(body), ..QueuedMessage::new(message) }
    }

    /// Bytes it counts for in flow control, the spool and the memory limits.
    fn held_size(&self) -> usize {
        self.size + paging::ENTRY_OVERHEAD
    }

    /// Of [`QueuedMessage::held_size`], what the broker's usage counts once for every queue
    /// that holds the message ([`paging::SharedBody`]), not in this queue's share; 0 for a
    /// message this queue holds alone.
    fn shared_size(&self) -> usize {
        match self.shared {
            Some(_) => self.size + paging::MESSAGE_OVERHEAD,
            None => 0,
        }
    }

    /// An in-flight message that no longer counts against its consumer's prefetch.
    fn releases_credit(&self) -> bool {
        self.acked_in_transaction || self.consumed
    }
}

/// A consumer as a connection registers it with a queue.
#[derive(Clone)]
pub struct ConsumerSpec {
    pub id: ConsumerId,
    /// The most unacknowledged messages it may hold. 0 means none until it pulls
    /// ([`QueueCommand::Pull`]: OpenWire's prefetch 0 consumers).
    pub prefetch: u32,
    pub ack_mode: AckMode,
    /// An exclusive consumer gets every message while it is subscribed; the others wait
    /// (ActiveMQ's `activemq.exclusive`).
    pub exclusive: bool,
    /// Consumer priority (ActiveMQ's `consumer.priority`, 0 by default): messages go to the
    /// highest-priority consumers that have credit; lower ones get messages only while all
    /// higher ones are full.
    pub priority: i8,
    /// Where deliveries go: the owning connection's delivery channel.
    pub sink: mpsc::UnboundedSender<Delivery>,
    /// Only messages this selector matches go to the consumer; the others wait for other
    /// consumers. Parsed once, when the consumer subscribes.
    pub selector: Option<Arc<Selector>>,
    /// The broker counts this consumer's redeliveries: a message it gives back (NACK, or still
    /// unacknowledged when it goes) after more deliveries than the dead-letter settings allow
    /// is dead-lettered. True for STOMP consumers; OpenWire clients count for themselves and
    /// send a poison ack ([`QueueCommand::Poison`]).
    pub counts_redeliveries: bool,
}

/// What a connection (or the broker) asks a queue to do.
pub(crate) enum QueueCommand {
    /// Messages accepted by the broker (already submitted to the store if they are stored).
    Enqueue(Vec<Arc<Message>>),
    /// The same, for messages other queues hold too (the same `Arc`s, routed to several
    /// queues at once), with the count of each one's body in the broker's usage (`None`:
    /// that one is this queue's alone).
    EnqueueShared {
        messages: Vec<Arc<Message>>,
        bodies: Box<[Option<Arc<paging::SharedBody>>]>,
    },
    Subscribe(ConsumerSpec),
    /// The consumer is gone: its unacknowledged messages go back, marked redelivered.
    Unsubscribe(ConsumerId),
    /// The consumer has finished with these messages. The completion (sent on `done` if
    /// given) resolves when the removal is durable.
    Ack {
        consumer: ConsumerId,
        ids: Vec<MessageId>,
        done: Option<oneshot::Sender<Completion>>,
    },
    /// The consumer acknowledged these inside a transaction (whose store records the
    /// connection has written): they stop counting against its prefetch.
    AckInTransaction {
        consumer: ConsumerId,
        ids: Vec<MessageId>,
    },
    /// The transaction committed: the messages are gone (the store applied the acks).
    TransactionCommitted {
        ids: Vec<MessageId>,
    },
    /// The transaction rolled back: the messages become deliverable again.
    TransactionRolledBack {
        ids: Vec<MessageId>,
        /// Messages whose consumer is still there stay in flight with it, unacknowledged.
        keep_delivered: bool,
    },
    /// The client handed these to the application and will acknowledge them later.
    Consumed {
        consumer: ConsumerId,
        ids: Vec<MessageId>,
    },
    /// The consumer gives these messages back for redelivery.
    Nack {
        consumer: ConsumerId,
        ids: Vec<MessageId>,
    },
    /// The consumer gives these back unprocessed (AMQP's `released`): they go back as if
    /// never delivered, not counted as redeliveries.
    Release {
        consumer: ConsumerId,
        ids: Vec<MessageId>,
    },
    /// The consumer's client gave up on these (OpenWire's poison ack, `cause` its reason):
    /// they leave the queue for the dead-letter task.
    Poison {
        consumer: ConsumerId,
        ids: Vec<MessageId>,
        /// Boxed, as rare: the command's size is paid 32 times by every queue's channel (an
        /// unbounded channel allocates its slots in blocks of 32 as soon as it exists), and
        /// a `Box<String>` is one word where a `String` is three.
        #[allow(clippy::box_collection)]
        cause: Option<Box<String>>,
    },
    Stats(oneshot::Sender<QueueStats>),
    /// A snapshot of the messages in the queue (waiting or in flight), in delivery order,
    /// that `selector` matches: for queue browsers, which consume nothing.
    Browse {
        selector: Option<Arc<Selector>>,
        reply: oneshot::Sender<Vec<Arc<Message>>>,
    },
    /// The consumer's prefetch changes (OpenWire's ConsumerControl).
    SetPrefetch {
        consumer: ConsumerId,
        prefetch: u32,
    },
    /// The consumer saw only these of its in-flight messages (OpenWire's close tells which
    /// were handed to the application); the others, prefetched but never delivered, go back
    /// not marked redelivered. Listing what was seen, not what was not, keeps messages still
    /// on their way to the connection (not yet known to it) unmarked too.
    SeenOnly {
        consumer: ConsumerId,
        seen: Vec<MessageId>,
    },
    /// A prefetch-0 consumer asks for one message (OpenWire's MessagePull).
    Pull {
        consumer: ConsumerId,
    },
    /// The pull ended (timed out or was immediate): answers true if no message was delivered
    /// for it, and withdraws the credit.
    EndPull {
        consumer: ConsumerId,
        unused: oneshot::Sender<bool>,
    },
    /// A scan of the stored messages beyond the window stopped at its per-turn limit: go on
    /// (the queue sends this to itself, so that other commands get their turn meanwhile).
    Resume,
    /// Stop the task (broker shutdown, or the subscription was removed).
    Stop,
    /// The inactive-destination sweep (`engine/gc.rs`): if the queue has held no message and
    /// had no consumer for `after`, it reports [`QueueEvent::Idle`] with the count of commands
    /// it has taken; the core removes it from the routing table if no command was sent to it
    /// since, and stops it.
    Retire {
        after: std::time::Duration,
    },
    /// An administrator takes messages out: purge, remove, move, retry (`operations.rs`).
    /// This and the next two are boxed, as rare and large: every queue's channel pays for the
    /// largest command 32 times over (see `Poison`).
    Take(Box<Take>),
    /// An administrator looks at messages (`operations.rs`).
    Inspect(Box<Inspect>),
    /// The original destinations of dead letters, before a retry (`operations.rs`).
    Origins(Box<Origins>),
    /// The queue's consumers, for the admin endpoint (`operations.rs`).
    Consumers(oneshot::Sender<Vec<ConsumerDetail>>),
}

/// A snapshot of a queue's counters. The counts since the queue started (`enqueued`,
/// `acked`, `expired`, `dead_lettered`) start from zero at every broker start, as ActiveMQ's;
/// messages recovered from the store are ready (or in flight) without being counted enqueued.
#[derive(Debug, Clone, Copy, PartialEq, Eq, Default)]
pub struct QueueStats {
    /// Messages waiting for a consumer.
    pub ready: usize,
    /// Messages delivered and not yet acknowledged.
    pub in_flight: usize,
    pub consumers: usize,
    /// Messages acknowledged since the queue started (ActiveMQ's dequeue count).
    pub acked: u64,
    /// Messages that entered the queue since it started (a redelivery is not counted again).
    pub enqueued: u64,
    /// Messages that expired before delivery and left (dead-lettered or dropped).
    pub expired: u64,
    /// Messages given up on for another reason (a poison ack, too many redeliveries) and
    /// moved to a dead-letter queue or dropped.
    pub dead_lettered: u64,
    /// Bytes of the messages held, ready or in flight ([`Message::memory_size`]). A message
    /// held by several queues (a topic's subscriptions) counts in each (the broker's usage
    /// counts its body once: `MemoryLimits::broker_shared`).
    pub memory_bytes: usize,
    /// Messages discarded by the pending message limit (non-durable topic subscribers).
    pub discarded: u64,
    /// Consumers that are slow now (see [`slow`](super::slow)).
    pub slow_consumers: usize,
}

struct Consumer {
    spec: ConsumerSpec,
    in_flight: MessageMap<QueuedMessage>,
    /// In-flight messages that do not use credit ([`QueuedMessage::releases_credit`]):
    /// acknowledged in an open transaction, or consumed by the application and awaiting a
    /// later acknowledgement (how a client-acknowledge or transacted consumer gets more than
    /// its prefetch before it acknowledges, like ActiveMQ's prefetch extension).
    released: usize,
    /// Outstanding pulls of a prefetch-0 consumer: each allows one message.
    pulls: u32,
    /// For a consumer with a selector: every ready message up to this key was tested and does
    /// not match, so the next search starts after it (a deep queue is scanned once per
    /// consumer, not once per dispatch).
    scanned: Option<PageKey>,
    /// Messages that match the selector and became ready at or before `scanned` after the
    /// scan passed (returned by another consumer, or of a higher priority). Entries whose
    /// message has left `ready` are dropped lazily.
    missed: BTreeSet<PageKey>,
    /// How far this consumer's scan of the stored messages beyond the window has gone: every
    /// stored message after the window up to this key was tested and is not for it (see
    /// `paging.rs`).
    stored_scan: Option<PageKey>,
    slow: SlowState,
    /// Bytes of its in-flight messages that use credit, as the limits count them
    /// ([`paging::held_size`]): what it holds of the queue's and the broker's memory limits
    /// for dispatch. Messages that released their credit (acknowledged in an open
    /// transaction, consumed by the application) do not count: the client has them and took
    /// them on, and a transaction larger than the limit must still be able to finish.
    in_flight_bytes: usize,
}

impl Consumer {
    /// A message delivered to it is in flight until acknowledged or given back.
    fn hold(&mut self, queued: QueuedMessage) {
        self.in_flight_bytes += queued.held_size();
        self.in_flight.insert(queued.message.id, queued);
    }

    /// Takes an in-flight message out of its in-flight set.
    fn take(&mut self, id: &MessageId) -> Option<QueuedMessage> {
        let queued = self.in_flight.remove(id)?;
        if !queued.releases_credit() {
            self.uncount(queued.held_size());
        }
        Some(queued)
    }

    /// An in-flight message stops counting in `in_flight_bytes` (taken, or its credit
    /// released).
    fn uncount(&mut self, held_size: usize) {
        self.in_flight_bytes = self.in_flight_bytes.saturating_sub(held_size);
    }

    fn has_credit(&self) -> bool {
        if self.spec.prefetch == 0 {
            return self.pulls > 0;
        }
        self.in_flight.len() - self.released < self.spec.prefetch as usize
    }

    /// How many more messages it may take now.
    fn credit(&self) -> usize {
        if self.spec.prefetch == 0 {
            return self.pulls as usize;
        }
        (self.spec.prefetch as usize).saturating_sub(self.in_flight.len() - self.released)
    }
}

/// The state one queue task owns.
struct Queue {
    handle: QueueHandle,
    store: Arc<dyn MessageStore>,
    ready: BTreeMap<PageKey, QueuedMessage>,
    consumers: Vec<Consumer>,
    /// Index into `consumers` of the next one to offer a message to (round-robin).
    next_consumer: usize,
    /// Messages acknowledged in a transaction by a consumer that has gone since: they wait
    /// here for the transaction's end.
    awaiting_transaction: MessageMap<QueuedMessage>,
    acked: u64,
    /// The other counters of [`QueueStats`]: plain fields, since only this task touches them.
    enqueued: u64,
    expired: u64,
    dead_lettered: u64,
    /// Bytes of every message held (ready, in flight, awaiting a transaction's end).
    memory_bytes: usize,
    /// Message groups (JMSXGroupID) and the consumer each sticks to: the first consumer a
    /// group's message goes to gets all of them until it closes or the group is closed
    /// (JMSXGroupSeq -1).
    groups: GroupMap,
    /// What becomes of messages this queue gives up on (expired, poisoned, redelivered too
    /// often): its policy's dead-letter settings.
    dead_letters: Arc<DeadLetterSettings>,
    /// Which part of the stored queue is in memory, and the memory limits.
    paging: Paging,
    /// The destination's policy (the topic's, for a subscription's queue).
    policy: Arc<Policy>,
    /// Since when the queue has held no message and had no consumer (for `Retire`).
    idle_since: Option<tokio::time::Instant>,
    /// Where the queue reports what the policy announces, its dead letters and its idleness.
    events: EventSink,
    /// Messages discarded by the pending message limit.
    discarded: u64,
    /// Commands taken from the channel, for [`QueueHandle::nothing_sent_since`].
    taken: u64,
}

/// When a stored queue reads its first window of messages from the store.
pub(crate) enum FirstWindow<'a> {
    /// Before the task starts, recording what it reads in `audit` (at the broker's start,
    /// so that a client's resend of a message accepted before the restart is recognised as a
    /// duplicate).
    Now(&'a mut ProducerAudit),
    /// In the task, before its first command: a queue created while the broker runs is
    /// created under the routing lock, which must never wait for the store (a read may be a
    /// round trip to PostgreSQL). Messages sent to it meanwhile are announced before they are
    /// stored, so the read skips them and their `Enqueue` brings them. What it reads that
    /// carries a producer's message id is reported ([`QueueEvent::Loaded`]) for the audit.
    InTask,
}

/// What every queue task starts with besides its key: the core holds one, and the registry
/// asks it for each queue it creates.
pub(crate) struct QueueFactory {
    pub store: Arc<dyn MessageStore>,
    /// The broker's dead-letter settings, for queues whose policy has none of its own.
    pub dead_letters: Arc<DeadLetterSettings>,
    /// The memory limits every queue keeps to (the broker's is shared).
    pub memory: MemoryLimits,
    pub policies: Arc<Policies>,
    /// Where every queue's task reports its events (see [`events`](super::events)).
    pub events: EventSink,
    /// Where stored queues spill non-persistent messages beyond their memory limits (none
    /// for a broker without a data directory).
    pub temp_store: Option<Arc<TempStore>>,
}

impl QueueFactory {
    /// Starts the task of queue `key` with its destination's policy (a subscription's queue
    /// takes its topic's), loading what the store holds for it when it is `stored` (see
    /// [`FirstWindow`]). A queue spills to the temporary store what it cannot keep in memory
    /// and that is not in the store (non-persistent messages; every message of a queue that
    /// is not stored), unless it discards by a pending message limit (see `paging.rs`).
    pub fn spawn(
        &self,
        key: QueueKey,
        stored: bool,
        first_window: FirstWindow<'_>,
    ) -> Result<QueueHandle, StoreError> {
        let policy = self.policies.for_destination(&key.destination);
        let dead_letters = policy.dead_letters.clone().unwrap_or_else(|| self.dead_letters.clone());
        let limits = self.memory.with_destination_limit(policy.memory_limit);
        let surroundings = Surroundings {
            store: self.store.clone(),
            dead_letters,
            limits,
            policy,
            events: self.events.clone(),
            temp_store: self.temp_store.clone(),
        };
        spawn(key, stored, surroundings, first_window)
    }
}

/// One queue's part of the [`QueueFactory`].
struct Surroundings {
    store: Arc<dyn MessageStore>,
    dead_letters: Arc<DeadLetterSettings>,
    limits: MemoryLimits,
    policy: Arc<Policy>,
    events: EventSink,
    temp_store: Option<Arc<TempStore>>,
}

fn spawn(
    key: QueueKey,
    stored: bool,
    surroundings: Surroundings,
    first_window: FirstWindow<'_>,
) -> Result<QueueHandle, StoreError> {
    let Surroundings { store, dead_letters, limits, policy, events, temp_store } = surroundings;
    // A non-durable subscriber with a pending message limit discards what waits beyond it
    // instead (ActiveMQ's pendingMessageLimitStrategy); every other queue spills.
    let discards = !stored && key.subscription.is_some() && policy.pending_message_limit.is_some();
    let spills = !discards;
    let (tx, rx) = mpsc::unbounded_channel();
    let handle = QueueHandle::new(key, stored, tx, limits.clone());
    let mut queue = Queue {
        handle: handle.clone(),
        store,
        ready: BTreeMap::new(),
        consumers: Vec::new(),
        next_consumer: 0,
        awaiting_transaction: MessageMap::default(),
        acked: 0,
        enqueued: 0,
        expired: 0,
        dead_lettered: 0,
        memory_bytes: 0,
        groups: GroupMap::new(policy.message_group_map),
        dead_letters,
        paging: Paging::new(limits, temp_store.filter(|_| spills), &handle.key),
        policy,
        idle_since: None,
        events,
        discarded: 0,
        taken: 0,
    };
    let load_in_task = match first_window {
        FirstWindow::Now(audit) if stored => {
            queue.load_first_window(audit)?;
            false
        }
        FirstWindow::Now(_) => false,
        FirstWindow::InTask => stored,
    };
    tokio::spawn(queue.run(rx, load_in_task));
    Ok(handle)
}

impl Queue {
    /// Reads the first window in the task (see [`FirstWindow::InTask`]). A store that cannot
    /// be read now is read again at the next command, as when paging in.
    fn load_first_window_in_task(&mut self) {
        let mut audit = ProducerAudit::default();
        if let Err(error) = self.load_first_window(&mut audit) {
            tracing::warn!(queue = ?self.handle.key, %error,
                "cannot read the queue's messages from the store; retrying at the next command");
            return;
        }
        let audited: Vec<Arc<Message>> = self
            .ready
            .values()
            .filter(|queued| super::audit::is_producer_message_id(&queued.message.message_id))
            .map(|queued| queued.message.clone())
            .collect();
        if !audited.is_empty() {
            self.events.send(QueueEvent::Loaded { messages: audited });
        }
    }

    async fn run(mut self, mut rx: mpsc::UnboundedReceiver<QueueCommand>, load_in_task: bool) {
        if load_in_task {
            self.load_first_window_in_task();
        }
        let mut sweep = self.dead_letters.expire_messages_period.map(|period| {
            let mut sweep = tokio::time::interval_at(tokio::time::Instant::now() + period, period);
            sweep.set_missed_tick_behavior(tokio::time::MissedTickBehavior::Delay);
            sweep
        });
        let mut slow_check = slow::check_timer(self.policy.slow_consumer_strategy.as_ref());
        loop {
            self.note_idle();
            let command = tokio::select! {
                command = rx.recv() => match command {
                    Some(command) => {
                        self.taken += 1;
                        command
                    }
                    None => break,
                },
                () = next_sweep(&mut sweep) => {
                    self.expire();
                    self.settle();
                    continue;
                }
                () = slow::next_check(&mut slow_check) => {
                    self.check_slow();
                    continue;
                }
            };
            match command {
                QueueCommand::Enqueue(messages) => self.enqueue(messages, None),
                QueueCommand::EnqueueShared { messages, bodies } => {
                    self.enqueue(messages, Some(bodies))
                }
                QueueCommand::Subscribe(spec) => {
                    // Most queues have one consumer, and a topic subscription's always has:
                    // room for one, not the four a first push makes room for (180 bytes
                    // each, in every idle subscriber's queue).
                    if self.consumers.capacity() == 0 {
                        self.consumers.reserve_exact(1);
                    }
                    self.consumers.push(Consumer {
                        spec,
                        in_flight: MessageMap::default(),
                        released: 0,
                        pulls: 0,
                        scanned: None,
                        missed: BTreeSet::new(),
                        stored_scan: None,
                        slow: SlowState::default(),
                        in_flight_bytes: 0,
                    });
                }
                QueueCommand::Unsubscribe(consumer) => self.remove_consumer(consumer),
                QueueCommand::Ack { consumer, ids, done } => {
                    // Nobody waits to see an ack durable that nobody waits for (an auto or
                    // dups-ok ack, a client ack the client does not have confirmed): it
                    // goes to the store lazily, as ActiveMQ's journal writes such acks.
                    let completion = self.ack(consumer, &ids, done.is_none());
                    if let Some(done) = done {
                        // The connection may be gone; the ack stands regardless.
                        let _ = done.send(completion);
                    }
                }
                QueueCommand::AckInTransaction { consumer, ids } => {
                    self.ack_in_transaction(consumer, &ids)
                }
                QueueCommand::TransactionCommitted { ids } => {
                    self.end_transaction(&ids, true, false)
                }
                QueueCommand::TransactionRolledBack { ids, keep_delivered } => {
                    self.end_transaction(&ids, false, keep_delivered)
                }
                QueueCommand::Nack { consumer, ids } => self.nack(consumer, &ids),
                QueueCommand::Release { consumer, ids } => self.release(consumer, &ids),
                QueueCommand::Poison { consumer, ids, cause } => {
                    self.poison(consumer, &ids, cause.map(|cause| *cause))
                }
                QueueCommand::Consumed { consumer, ids } => self.consumed(consumer, &ids),
                QueueCommand::Stats(reply) => {
                    let _ = reply.send(self.stats());
                }
                QueueCommand::SeenOnly { consumer, seen } => {
                    if let Some(consumer) = self.consumer_mut(consumer) {
                        for (id, queued) in consumer.in_flight.iter_mut() {
                            if !queued.acked_in_transaction && !seen.contains(id) {
                                queued.delivery_count = queued.delivery_count.saturating_sub(1);
                            }
                        }
                    }
                }
                QueueCommand::Browse { selector, reply } => {
                    let _ = reply.send(self.browse(selector.as_deref()));
                }
                QueueCommand::SetPrefetch { consumer, prefetch } => {
                    if let Some(consumer) = self.consumer_mut(consumer) {
                        consumer.spec.prefetch = prefetch;
                        consumer.pulls = 0;
                    }
                }
                QueueCommand::Pull { consumer } => {
                    if let Some(consumer) = self.consumer_mut(consumer) {
                        consumer.pulls = 1;
                    }
                }
                QueueCommand::EndPull { consumer, unused } => {
                    let pending = self.consumer_mut(consumer).map_or(0, |c| {
                        let pulls = c.pulls;
                        c.pulls = 0;
                        pulls
                    });
                    let _ = unused.send(pending > 0);
                }
                QueueCommand::Resume => self.paging.resume_sent = false,
                QueueCommand::Take(take) => self.take_messages(*take),
                QueueCommand::Inspect(inspect) => self.inspect(*inspect),
                QueueCommand::Origins(origins) => self.origins(*origins),
                QueueCommand::Consumers(reply) => self.consumer_details(reply),
                QueueCommand::Stop => break,
                QueueCommand::Retire { after } => {
                    if self.idle_since.is_some_and(|since| since.elapsed() >= after) {
                        let queue = self.handle.key.clone();
                        self.events.send(QueueEvent::Idle { queue, taken: self.taken });
                    }
                }
            }
            self.settle();
            self.watch_slow();
        }
        self.release_memory();
        self.drop_spool();
    }

    /// Starts or ends the idle period: no message held (in memory or beyond the window) and
    /// no consumer (so nothing in flight).
    fn note_idle(&mut self) {
        let idle = self.ready.is_empty()
            && self.consumers.is_empty()
            && self.awaiting_transaction.is_empty()
            && !self.paging.has_more();
        match (idle, self.idle_since) {
            (true, None) => self.idle_since = Some(tokio::time::Instant::now()),
            (false, Some(_)) => self.idle_since = None,
            _ => {}
        }
    }

    /// Takes messages sent to the queue, each with the count of its body in the broker's
    /// usage when other queues hold it too.
    fn enqueue(
        &mut self,
        messages: Vec<Arc<Message>>,
        bodies: Option<Box<[Option<Arc<paging::SharedBody>>]>>,
    ) {
        let bytes = handle::inbox_bytes(&messages);
        self.handle.inbox.fetch_sub(bytes, std::sync::atomic::Ordering::Relaxed);
        self.arrived(&messages);
        let mut bodies = bodies.map(|bodies| bodies.into_vec().into_iter());
        for message in messages {
            self.enqueued += 1;
            let body = bodies.as_mut().and_then(Iterator::next).flatten();
            let queued = match body {
                Some(body) => QueuedMessage::sharing(message, body),
                None => QueuedMessage::new(message),
            };
            self.count_memory(&queued, true);
            self.paging.pin(self.handle.stored, &queued, true);
            self.paging.note_size(queued.size);
            self.advise_no_consumer(&queued.message);
            self.make_ready(queued);
        }
        self.discard_over_limit();
    }

    fn stats(&self) -> QueueStats {
        QueueStats {
            ready: self.ready.len() + self.stored_beyond_window(),
            in_flight: self.consumers.iter().map(|c| c.in_flight.len()).sum::<usize>()
                + self.awaiting_transaction.len(),
            consumers: self.consumers.len(),
            acked: self.acked,
            enqueued: self.enqueued,
            expired: self.expired,
            dead_lettered: self.dead_lettered,
            memory_bytes: self.memory_bytes,
            discarded: self.discarded,
            slow_consumers: self.consumers.iter().filter(|c| c.slow.is_slow()).count(),
        }
    }

    fn consumer_mut(&mut self, id: ConsumerId) -> Option<&mut Consumer> {
        self.consumers.iter_mut().find(|c| c.spec.id == id)
    }
}

/// The next tick of the expiry sweep; never, when there is none.
async fn next_sweep(sweep: &mut Option<tokio::time::Interval>) {
    match sweep {
        Some(sweep) => {
            sweep.tick().await;
        }
        None => std::future::pending().await,
    }
}

#[cfg(test)]
mod tests;
