//! The waits of producer flow control (see [`flow`](crate::core::flow) for what has no
//! room): what blocks a send, the future that resolves when it may go, the watch of the
//! stores' sizes, and the sends a connection holds meanwhile.

use std::collections::VecDeque;
use std::future::Future;
use std::hash::Hash;
use std::pin::Pin;
use std::sync::atomic::AtomicUsize;
use std::sync::Arc;

use futures_util::stream::{FuturesUnordered, StreamExt};
use store::{DestinationKind, Message, StoreUsage};

use super::Core;
use crate::core::flow::*;
use crate::core::types::{ClientKeyed, ConnectionId, CoreError};
use crate::core::wildcard::DestinationFilter;

impl Core {
    /// What keeps `message` (from `connection`) from being accepted now, if anything: the
    /// store's backlog (persistent messages), the broker's memory, or a destination the
    /// message would reach. Cheap while nothing is blocked: three atomic loads.
    pub fn blocker(&self, message: &Message, connection: ConnectionId) -> Option<Blocker> {
        if message.is_persistent() {
            if self.store_space.is_blocked() {
                return Some(Blocker::StoreFull);
            }
            if self.store().backlog().is_some_and(|b| b.is_full()) {
                return Some(Blocker::Store);
            }
        } else if let Some(temp) = &self.settings().temp_store {
            if self.temp_space.is_blocked() {
                return Some(Blocker::TempFull);
            }
            if temp.opened().and_then(|t| t.backlog()).is_some_and(|b| b.is_full()) {
                return Some(Blocker::Temp);
            }
        }
        let memory = &self.settings().memory;
        if memory.broker_gate().is_blocked() {
            return Some(Blocker::Broker);
        }
        if memory.blocked_queues() == 0 {
            return None;
        }
        // Selectors are judged before the routing lock is taken, as for a send.
        let verdicts = self.judge_selectors(message);
        let registry = self.registry.lock();
        for part in self.targets(message) {
            let queues = match part.kind {
                DestinationKind::Queue => {
                    registry.queues.get(&*part.name).cloned().into_iter().collect()
                }
                DestinationKind::TempQueue => registry
                    .temporary
                    .get(&part)
                    .and_then(|t| t.queue.clone())
                    .into_iter()
                    .collect(),
                DestinationKind::Topic | DestinationKind::TempTopic => {
                    if DestinationFilter::is_pattern(&part.name) {
                        continue;
                    }
                    registry.topic_route(
                        &part.name,
                        message,
                        part.kind == DestinationKind::TempTopic,
                        connection,
                        &self.settings().virtual_topics,
                        verdicts.as_ref(),
                    )
                }
            };
            if let Some(queue) = queues.into_iter().find(|q| q.gate.is_blocked()) {
                return Some(Blocker::Destination(
                    queue.key.destination.clone(),
                    queue.gate.clone(),
                ));
            }
        }
        None
    }

    /// Resolves when `message` may be sent: at once if nothing blocks it, otherwise once every
    /// blocker has room. Refused with [`CoreError::NoSpace`] at once when the settings say
    /// `fail_if_no_space` without a timeout, or when the timeout passes first.
    pub async fn wait_for_room(
        self: Arc<Self>,
        message: Arc<Message>,
        connection: ConnectionId,
    ) -> Result<(), CoreError> {
        let settings = self.settings().flow;
        let deadline = settings.fail_after.map(|after| tokio::time::Instant::now() + after);
        let mut announced = false;
        loop {
            let Some(blocker) = self.blocker(&message, connection) else { return Ok(()) };
            if !std::mem::replace(&mut announced, true) {
                // `advisory_for_fast_producers`: once per held send, about the destination
                // whose memory holds it (or the one sent to, when the broker or store does).
                let destination = match &blocker {
                    Blocker::Destination(destination, _) => destination,
                    Blocker::Store
                    | Blocker::StoreFull
                    | Blocker::Temp
                    | Blocker::TempFull
                    | Blocker::Broker => &message.destination,
                };
                self.advise_fast_producer(destination, &message);
            }
            if settings.fail_if_no_space && deadline.is_none() {
                return Err(self.no_space(&blocker, &message));
            }
            let wait = async {
                match &blocker {
                    Blocker::Store => {
                        if let Some(backlog) = self.store().backlog() {
                            backlog.room().await;
                        }
                    }
                    Blocker::StoreFull => self.store_space.wait_open().await,
                    Blocker::Temp => {
                        let temp = self.settings().temp_store.as_ref();
                        if let Some(backlog) =
                            temp.and_then(|t| t.opened()).and_then(|t| t.backlog())
                        {
                            backlog.room().await;
                        }
                    }
                    Blocker::TempFull => self.temp_space.wait_open().await,
                    Blocker::Broker => self.settings().memory.broker_gate().wait_open().await,
                    Blocker::Destination(_, gate) => gate.wait_open().await,
                }
            };
            match deadline {
                Some(deadline) => {
                    if tokio::time::timeout_at(deadline, wait).await.is_err() {
                        return Err(self.no_space(&blocker, &message));
                    }
                }
                None => wait.await,
            }
        }
    }

    /// The refusal a producer gets, worded like ActiveMQ's (the JMS client shows it in a
    /// `javax.jms.ResourceAllocationException`).
    fn no_space(&self, blocker: &Blocker, message: &Message) -> CoreError {
        let memory = &self.settings().memory;
        let what = match blocker {
            Blocker::Store => format!(
                "Usage Manager Store Limit reached: the store's backlog of unwritten messages \
                 is at its limit of {} bytes",
                self.store().backlog().map_or(0, |b| b.limit())
            ),
            Blocker::StoreFull => {
                let usage = self.store().usage();
                format!(
                    "Usage Manager Store Limit reached: the store uses {} bytes of its max_size \
                     of {} bytes ([store] max_size)",
                    usage.used_bytes, usage.limit_bytes
                )
            }
            Blocker::Temp => format!(
                "Usage Manager Temp Store Limit reached: the temporary store's backlog of \
                 unwritten messages is at its limit of {} bytes",
                self.settings()
                    .temp_store
                    .as_ref()
                    .and_then(|t| t.opened())
                    .and_then(|t| t.backlog())
                    .map_or(0, |b| b.limit())
            ),
            Blocker::TempFull => {
                let usage = self.settings().temp_store.as_ref().map(|t| t.usage());
                let usage = usage.unwrap_or_default();
                format!(
                    "Usage Manager Temp Store Limit reached: the temporary store uses {} bytes of \
                     its temp_limit of {} bytes ([broker] temp_limit)",
                    usage.used_bytes, usage.limit_bytes
                )
            }
            Blocker::Broker => format!(
                "Usage Manager Memory Limit reached: the broker's memory_limit of {} bytes \
                 ([broker] memory_limit) is full",
                memory.broker_limit()
            ),
            Blocker::Destination(destination, _) => format!(
                "Usage Manager Memory Limit reached on {}: its memory_limit of {} bytes \
                 ([destinations] memory_limit or its policy's) is full",
                destination,
                self.memory_limit_of(destination)
            ),
        };
        CoreError::NoSpace(format!(
            "{what}; the message {} was refused (send_fail_if_no_space)",
            message.message_id
        ))
    }
}

impl Core {
    /// Starts watching the store's size against its limit, and the temporary store's against
    /// `[broker] temp_limit` (once; stores without a limit need no watch). The watch ends with
    /// the core.
    pub fn start_store_watch(self: &Arc<Self>) {
        let store_limited = self.store().usage().limit_bytes != 0;
        let temp_limited =
            self.settings().temp_store.as_ref().is_some_and(|t| t.usage().limit_bytes != 0);
        if !store_limited && !temp_limited {
            return;
        }
        let core = Arc::downgrade(self);
        tokio::spawn(async move {
            let mut tick = tokio::time::interval(STORE_WATCH_PERIOD);
            tick.set_missed_tick_behavior(tokio::time::MissedTickBehavior::Delay);
            loop {
                tick.tick().await;
                let Some(core) = core.upgrade() else { return };
                if store_limited {
                    watch_space(&core.store_space, core.store().usage(), "store", "persistent");
                }
                if let Some(temp) = core.settings().temp_store.as_ref().filter(|_| temp_limited) {
                    watch_space(
                        &core.temp_space,
                        temp.usage(),
                        "temporary store",
                        "non-persistent",
                    );
                }
            }
        });
    }

    /// True while the temporary store is at its limit (non-persistent sends wait).
    pub fn temp_store_full(&self) -> bool {
        self.temp_space.is_blocked()
    }
}

/// Closes `gate` when `usage` comes within the headroom of its limit, opens it once twice the
/// headroom is free again.
fn watch_space(gate: &FlowGate, usage: StoreUsage, store: &str, sends: &str) {
    let unused = AtomicUsize::new(0);
    let headroom = store_headroom(usage.limit_bytes);
    let full = usage.used_bytes + headroom >= usage.limit_bytes;
    let roomy = usage.used_bytes + 2 * headroom < usage.limit_bytes;
    let changed = match (gate.is_blocked(), full, roomy) {
        (false, true, _) => gate.set(true, &unused),
        (true, _, true) => gate.set(false, &unused),
        _ => false,
    };
    if changed {
        tracing::warn!(
            used = usage.used_bytes,
            limit = usage.limit_bytes,
            full = gate.is_blocked(),
            "{store} limit: {sends} sends {}",
            if gate.is_blocked() { "wait" } else { "resume" }
        );
    }
}

/// A future that resolves once a held send may go ahead (or is refused).
pub type RoomFuture = Pin<Box<dyn Future<Output = Result<(), CoreError>> + Send>>;

/// A [`RoomFuture`] that names the key it waits for.
type KeyedRoom<K> = Pin<Box<dyn Future<Output = (K, Result<(), CoreError>)> + Send>>;

/// What [`HeldSends::admit`] decided.
pub enum SendAdmission<T> {
    /// The send finds room: submit it now.
    Now(T, Arc<Message>),
    /// The send is held until there is room. `forced`: the oldest held send, which goes ahead
    /// now past the limit (the connection holds all it may).
    Held { forced: Option<(T, Arc<Message>)> },
    /// The connection holds all it may and the flow settings refuse what finds no room: the
    /// client is told so ([`held_sends_refusal`]).
    Refused(T),
}

/// Why a send was [refused](SendAdmission::Refused), the same for every protocol.
pub fn held_sends_refusal() -> String {
    format!(
        "{MAX_HELD_SENDS} sends of this connection are waiting for room already; the message was \
         refused (send_fail_if_no_space)"
    )
}

/// Sends a connection holds because they found no room: one FIFO per key (an OpenWire
/// producer, or the whole STOMP connection), so that one producer's messages stay in order
/// while other producers' sends go on. Only the head of each FIFO waits for room; the ones
/// behind it start waiting when it has gone.
pub struct HeldSends<K, T> {
    queues: ClientKeyed<K, VecDeque<Held<T>>>,
    waiting: FuturesUnordered<KeyedRoom<K>>,
    /// Keys whose head found room at once when it became the head: released without a wait
    /// (a producer let go by an open gate would otherwise cost a boxed wait per message).
    ready: VecDeque<K>,
    held: usize,
    bytes: usize,
}

/// One held send, with its size as counted when it was held (the message is cold by the
/// time it is released).
struct Held<T> {
    item: T,
    message: Arc<Message>,
    bytes: usize,
}

impl<K, T> Default for HeldSends<K, T> {
    fn default() -> Self {
        HeldSends {
            queues: ClientKeyed::default(),
            waiting: FuturesUnordered::new(),
            ready: VecDeque::new(),
            held: 0,
            bytes: 0,
        }
    }
}

impl<K: Clone + Eq + Hash + Send + 'static, T> HeldSends<K, T> {
    /// True if sends of `key` are held: a new one must queue behind them.
    pub fn holds(&self, key: &K) -> bool {
        self.queues.contains_key(key)
    }

    pub fn is_empty(&self) -> bool {
        self.held == 0
    }

    /// True when the connection holds as much as it may: past this an adapter refuses or
    /// forces sends (see the adapters).
    pub fn is_full(&self) -> bool {
        self.held >= MAX_HELD_SENDS || self.bytes >= MAX_HELD_BYTES
    }

    /// Producer flow control for a send of `connection` that is not in a transaction: it goes
    /// ahead now if it finds room and no earlier send of `key` waits; else it is held (the
    /// connection goes on reading meanwhile). A connection holding all it may either has the
    /// send refused, when the flow settings say to (`send_fail_if_no_space`), or lets its
    /// oldest held send go ahead past the limit, so that its memory stays bounded and its
    /// order kept (an asynchronous sender without a window cannot be paced otherwise).
    pub fn admit(
        &mut self,
        core: &Arc<Core>,
        connection: ConnectionId,
        key: K,
        item: T,
        message: Arc<Message>,
    ) -> SendAdmission<T> {
        if !self.holds(&key) && core.blocker(&message, connection).is_none() {
            return SendAdmission::Now(item, message);
        }
        let mut forced = None;
        if self.is_full() {
            if core.settings().flow.fail_if_no_space {
                return SendAdmission::Refused(item);
            }
            forced = self.force_oldest(core, connection);
        }
        self.hold(core, connection, key, item, message);
        SendAdmission::Held { forced }
    }

    /// Holds a send of `key` until [`Core::wait_for_room`] lets it go.
    fn hold(
        &mut self,
        core: &Arc<Core>,
        connection: ConnectionId,
        key: K,
        item: T,
        message: Arc<Message>,
    ) {
        let bytes = message.memory_size();
        self.held += 1;
        self.bytes += bytes;
        let queue = self.queues.entry(key.clone()).or_default();
        let first = queue.is_empty();
        queue.push_back(Held { item, message: message.clone(), bytes });
        if first {
            self.wait(core, connection, key, message);
        }
    }

    fn wait(&mut self, core: &Arc<Core>, connection: ConnectionId, key: K, message: Arc<Message>) {
        // What `wait_for_room` would answer at once.
        if core.blocker(&message, connection).is_none() {
            self.ready.push_back(key);
            return;
        }
        let room = core.clone().wait_for_room(message, connection);
        self.waiting.push(Box::pin(async move { (key, room.await) }));
    }

    /// The next send whose wait ended, with its outcome; the next one of its key starts
    /// waiting. Pending for ever while nothing is held (poll it only when not empty).
    pub async fn next(
        &mut self,
        core: &Arc<Core>,
        connection: ConnectionId,
    ) -> ((T, Arc<Message>), Result<(), CoreError>) {
        loop {
            let (key, result) = match self.ready.pop_front() {
                Some(key) => (key, Ok(())),
                None => match self.waiting.next().await {
                    Some(done) => done,
                    None => return std::future::pending().await,
                },
            };
            if let Some(done) = self.release_head(core, connection, &key) {
                return (done, result);
            }
        }
    }

    /// Takes the oldest held send of the connection's first key, without waiting (for an
    /// adapter that forces sends past the limit when it holds too many). Its wait is dropped.
    pub fn force_oldest(
        &mut self,
        core: &Arc<Core>,
        connection: ConnectionId,
    ) -> Option<(T, Arc<Message>)> {
        let key = self.queues.keys().next()?.clone();
        // The head's wait is in `waiting`; it will end and find a different head: harmless,
        // since a wait only says "there was room" and the send path checks nothing more.
        self.release_head(core, connection, &key)
    }

    fn release_head(
        &mut self,
        core: &Arc<Core>,
        connection: ConnectionId,
        key: &K,
    ) -> Option<(T, Arc<Message>)> {
        let queue = self.queues.get_mut(key)?;
        let Held { item, message, bytes } = queue.pop_front()?;
        self.held -= 1;
        self.bytes = self.bytes.saturating_sub(bytes);
        match queue.front() {
            Some(next) => {
                let next = next.message.clone();
                self.wait(core, connection, key.clone(), next);
            }
            None => {
                self.queues.remove(key);
            }
        }
        Some((item, message))
    }
}
