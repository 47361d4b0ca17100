//! Paging: a stored queue keeps only a window of its messages in memory.
//!
//! # The window
//!
//! A queue holds in memory the lowest-keyed part of its stored queue (in [`PageKey`] order:
//! priority, then id), up to its memory limits, and remembers where that part ends: the
//! window's boundary ([`Window`]). Every stored reference with a key up to the boundary is in
//! memory (ready, in flight, or awaiting a transaction's end) or on its way ([`Arriving`]);
//! references after it may be in the store only. The boundary is one key, not an entry per
//! message, so a queue of 2,000,000 messages costs the queue task no more than its window
//! (the store's own index is another matter: see the journal's documentation).
//!
//! - **Page-in.** When the window runs low (what it holds falls below half the destination
//!   limit, or no ready message is left inside it while a consumer has credit), the queue
//!   reads the next pages after the boundary (`read_page`) into the window and moves the
//!   boundary to the last key read; a short page means the store holds nothing more, and the
//!   window is complete. At start a queue loads only its first window.
//! - **New messages.** A persistent message enqueued with a key after the boundary is not
//!   kept (it is in the store, and is paged in when its turn comes). One inside the window is
//!   inserted, and if the queue is then over its limits, the highest-keyed persistent ready
//!   messages are evicted (they are in the store) and the boundary moves down before them.
//!   A message given back by a consumer (a NACK, a consumer that went) is treated the same
//!   way; its delivery count is remembered until it is paged in again.
//! - **In flight.** Delivered messages stay in memory until acknowledged and are never
//!   evicted; prefetch bounds their number and [`Queue::may_take`] their bytes (the queue's
//!   within its limit, every queue's within the broker's, each consumer's within its share),
//!   so a consumer that stops reading cannot pull the queue past its limits.
//! - **Selectors and groups.** A consumer that finds nothing for it inside the window scans
//!   the stored messages after the boundary (a page at a time, at most
//!   `SCAN_PAGES_PER_TURN` pages per turn, remembering how far it got in `stored_scan`), and
//!   gets the first one it matches directly, without moving the boundary.
//! - **Limits.** Each queue keeps to its destination limit; all queues together to the
//!   broker's ([`MemoryLimits`]), counted as [`Message::memory_size`] plus [`ENTRY_OVERHEAD`]
//!   per message held. Eviction never goes below `MIN_WINDOW` ready messages (or one page of
//!   large messages, see [`Paging::page_limit`]), so that a
//!   queue keeps making progress under the broker limit.
//! - **Non-persistent messages** of a stored queue leave memory the same way when the broker
//!   has a temporary store (`temp_store.rs`): evicted or arriving after the boundary, they are
//!   added to the queue's own queue in the temporary store (its [`Spool`]), and the boundary
//!   rule holds for both stores at once: a page-in ([`Queue::read_beyond`]) reads a page
//!   after the boundary from each and keeps what is up to the smaller of their ends, merged
//!   in page order, so one order (priority, then arrival) covers persistent and non-persistent
//!   messages. A message read back is acked in the temporary store at once: it is always in
//!   exactly one place, so acks, expiry, dead letters and redelivery need nothing more. One the
//!   temporary store refuses (full, failed) stays in memory after the boundary and waits until
//!   the window reaches it, as every non-persistent message did before.
//!   Queues that are not stored (non-durable topic subscribers, temporary queues) spill all
//!   their messages the same way (their store part is simply empty), except a subscriber with
//!   a pending message limit, which discards instead (ActiveMQ's fileCursor and
//!   pendingMessageLimitStrategy).
//! - **Not paged:** without a temporary store, non-persistent messages and queues that are
//!   not stored stay in memory, and so do a discarding subscriber's messages. Their
//!   bytes are counted apart (`Paging::pinned`, with the spilled ones beside it) and producer
//!   flow control holds them to the limits (`flow.rs`). Nor is the expiry sweep: it looks at
//!   the window only (a message paged in expired is dead-lettered when it would be
//!   dispatched).
//!
//! # Messages still being written: the rule
//!
//! Both engines make a submitted unit visible to `read_page` as soon as `submit` returns, long
//! before its completion resolves (the memory store applies it at once; the journal applies it
//! to its index and serves the body from memory until written), while the queue gets the
//! message's `Enqueue` later: right after the submit for a plain send, only once the commit
//! is durable for a transaction, the dead-letter copy and a scheduled fire. A page-in between
//! the two would read the message, and the `Enqueue` would then add it a second time (after it
//! was perhaps delivered and acknowledged). So whoever stores a message for a queue first
//! registers it with the queue ([`QueueHandle::announce`](super::QueueHandle::announce)),
//! then submits, then enqueues; the queue forgets it when the `Enqueue` arrives. **Paging (and
//! the scan beyond the window) skips announced messages: a message enters a queue's memory
//! through its `Enqueue` when it has one, through a page-in otherwise.** Since the `Enqueue`
//! comes after the page-in passed the message's key, it finds the message inside the window
//! and keeps it; one that arrives after the boundary is left to a later page-in, which no
//! longer skips it. Nothing is skipped for good: a message that is neither announced nor held
//! is paged in, and an engine that made units visible only once durable would need the same
//! rule plus a page-in that stops at the oldest unfinished write (not needed today).

use std::collections::{HashMap, HashSet};
use std::sync::atomic::{AtomicUsize, Ordering};
use std::sync::Arc;

use futures_util::FutureExt;
use parking_lot::Mutex;
use store::{
    Message, MessageId, Operation, PageKey, QueueKey, StoreError, StoredMessage, UnitOfWork,
};

use super::{FlowGate, ProducerAudit, Queue, QueueCommand, QueuedMessage, Selector, TempStore};
use crate::core::types::off_the_runtime;

/// Messages read from the store per page.
const PAGE: usize = 512;
/// Pages a page-in reads in one turn after the start (the start reads the whole first
/// window), so that a queue task never stalls long on the store.
const PAGES_PER_TURN: usize = 8;
/// Pages a consumer's scan beyond the window reads in one turn before other commands get
/// theirs (it goes on at the next turn).
const SCAN_PAGES_PER_TURN: usize = 16;
/// Messages a page read holds while the queue has not seen the size of its messages yet.
const UNKNOWN_SIZE_PAGE: usize = 16;
/// Eviction keeps at least this many ready messages.
const MIN_WINDOW: usize = 64;
/// Bytes a held message costs beyond [`Message::memory_size`]: its map entry and
/// `QueuedMessage`, the `Arc`, the leaf node of its property map (a `BTreeMap` allocates a
/// whole node for one entry) and allocator rounding. An estimate, measured with 1 KiB STOMP
/// messages carrying one property: a window of 64 MiB counted with 512 here took 74 MiB of
/// heap (~800 bytes a message beyond `memory_size`), so the limit was not what it held.
pub(crate) const ENTRY_OVERHEAD: usize = 800;
/// The most messages a browse returns, as ActiveMQ's `maxBrowsePageSize`.
pub(crate) const MAX_BROWSE: usize = 400;
/// Pages of stored messages a browse reads at most beyond the window.
const BROWSE_PAGES: usize = 64;

/// The memory limits a queue keeps to: its own and the broker's, which every queue shares.
/// Cheap to clone.
#[derive(Clone, Debug)]
pub struct MemoryLimits {
    destination: usize,
    broker: Arc<BrokerMemory>,
}

#[derive(Debug)]
struct BrokerMemory {
    /// Bytes held by every queue, as each last counted them.
    used: AtomicUsize,
    limit: usize,
    /// The part of `used` that cannot page out (see [`Paging::pinned`]): what flow control
    /// holds to the limit.
    pinned: AtomicUsize,
    /// Closed while `pinned` is over the limit.
    gate: FlowGate,
    /// Queues whose own gate is closed (the send path looks for them only when there are).
    blocked_queues: AtomicUsize,
    /// Counts the broker's own gate (for [`FlowGate::update`]).
    broker_blocked: AtomicUsize,
    /// The part of `used` that is in flight (delivered, not acknowledged), as each queue last
    /// counted it: it cannot be evicted, so dispatch keeps it to the broker's limit.
    in_flight: AtomicUsize,
}

impl MemoryLimits {
    /// `destination` bytes per queue, `broker` bytes for all of them.
    pub fn new(destination: u64, broker: u64) -> Self {
        let bytes = |limit: u64| usize::try_from(limit).unwrap_or(usize::MAX);
        MemoryLimits {
            destination: bytes(destination),
            broker: Arc::new(BrokerMemory {
                used: AtomicUsize::new(0),
                limit: bytes(broker),
                pinned: AtomicUsize::new(0),
                gate: FlowGate::default(),
                blocked_queues: AtomicUsize::new(0),
                broker_blocked: AtomicUsize::new(0),
                in_flight: AtomicUsize::new(0),
            }),
        }
    }

    /// Bytes every queue holds together.
    pub fn broker_used(&self) -> usize {
        self.broker.used.load(Ordering::Relaxed)
    }

    pub fn destination_limit(&self) -> usize {
        self.destination
    }

    /// The same broker limit with a destination policy's own limit (`None`: this one).
    pub fn with_destination_limit(&self, limit: Option<u64>) -> MemoryLimits {
        match limit {
            Some(limit) => MemoryLimits {
                destination: usize::try_from(limit).unwrap_or(usize::MAX),
                broker: self.broker.clone(),
            },
            None => self.clone(),
        }
    }

    pub fn broker_limit(&self) -> usize {
        self.broker.limit
    }

    /// Moves the broker's usage by bytes held outside the queues (topics' subscription
    /// recovery buffers), so that stored queues page out to make room for them.
    pub(in crate::core) fn account_elsewhere(&self, before: usize, after: usize) {
        if after >= before {
            self.broker.used.fetch_add(after - before, Ordering::Relaxed);
        } else {
            self.broker.used.fetch_sub(before - after, Ordering::Relaxed);
        }
    }

    /// Bytes every queue holds that cannot page out (non-persistent messages, and every
    /// message of a queue that is not stored): what producer flow control counts.
    pub fn broker_pinned(&self) -> usize {
        self.broker.pinned.load(Ordering::Relaxed)
    }

    pub(in crate::core) fn broker_gate(&self) -> &FlowGate {
        &self.broker.gate
    }

    /// How many queues block their producers now.
    pub(in crate::core) fn blocked_queues(&self) -> usize {
        self.broker.blocked_queues.load(Ordering::Acquire)
    }
}

impl Default for MemoryLimits {
    /// The configuration's defaults: 64 MiB per destination, 1 GiB for the broker.
    fn default() -> Self {
        MemoryLimits::new(64 << 20, 1 << 30)
    }
}

/// Persistent messages on their way into a stored queue: submitted (or about to be) to the
/// store, their `Enqueue` not yet taken by the queue task. See the module documentation.
#[derive(Debug, Default)]
pub(crate) struct Arriving(Mutex<HashSet<MessageId>>);

impl Arriving {
    pub(crate) fn insert(&self, id: MessageId) {
        self.0.lock().insert(id);
    }

    pub(crate) fn remove(&self, id: MessageId) {
        self.0.lock().remove(&id);
    }

    pub(crate) fn is_empty(&self) -> bool {
        self.0.lock().is_empty()
    }
}

/// Which part of a stored queue is in memory.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub(super) enum Window {
    /// All of it: the store holds nothing for this queue that is not in memory or arriving.
    /// Always so for queues that are not stored.
    Complete,
    /// Every stored reference up to this key is in memory or arriving; the store may hold
    /// more after it. `None`: nothing was paged in yet.
    Partial(Option<PageKey>),
}

impl Window {
    /// True if a stored message with this key may be in the store only.
    pub(super) fn beyond(self, key: PageKey) -> bool {
        match self {
            Window::Complete => false,
            Window::Partial(None) => true,
            Window::Partial(Some(boundary)) => key > boundary,
        }
    }
}

/// A queue's paging state.
#[derive(Debug)]
pub(super) struct Paging {
    pub(super) window: Window,
    limits: MemoryLimits,
    /// Bytes of this queue counted in the broker's usage.
    accounted: usize,
    /// Bytes (with [`ENTRY_OVERHEAD`] each) of the messages held that cannot page out:
    /// non-persistent ones, or all of them in a queue that is not stored. Producer flow control
    /// holds this to the limits (the rest pages out).
    pinned: usize,
    /// `pinned` as counted in the broker's.
    pinned_accounted: usize,
    /// This queue's in-flight bytes as counted in the broker's.
    in_flight_accounted: usize,
    /// A running average of the size of this queue's messages as the limits count them
    /// ([`held_size`]; 0 before the first): what one more delivery is expected to cost, and
    /// how many messages a page may hold.
    typical: usize,
    /// Delivery counts of messages given back or evicted while beyond the window (so out of
    /// memory), restored when they are paged in again.
    returned: HashMap<MessageId, u32>,
    /// A [`QueueCommand::Resume`] is on its way to this queue.
    pub(super) resume_sent: bool,
    /// Where this queue's messages that are not in the store go beyond the window; `None`:
    /// they stay in memory (a broker without a temporary store, or a subscriber that discards
    /// by its pending message limit).
    spool: Option<Spool>,
}

/// A queue's spilled messages (not in the store: non-persistent ones, or all of a queue that
/// is not stored) in the temporary store: its own queue of references there (see
/// `temp_store.rs`).
#[derive(Debug)]
struct Spool {
    temp: Arc<TempStore>,
    key: QueueKey,
    /// Messages of this queue in the temporary store.
    count: usize,
    /// Their bytes as flow control counts them (`memory_size` plus [`ENTRY_OVERHEAD`] each):
    /// they still count against the destination's limit when producer flow control is on, as
    /// when they were in memory, so that spilling changes where they wait, not who waits.
    bytes: usize,
    /// The last spill was refused (the temporary store is full or failed): logged once.
    refusing: bool,
}

/// Where a message after the window is kept.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
enum Source {
    /// The broker's store (a persistent message of a stored queue).
    Store,
    /// The temporary store (a message spilled there: non-persistent, or of a queue that is
    /// not stored).
    Spool,
}

/// What [`Queue::read_beyond`] read after a key, from both sources merged in page order.
struct Beyond {
    messages: Vec<(StoredMessage, Source)>,
    /// Every message of either source up to this key is in `messages`, later ones may exist;
    /// `None`: nothing is kept after the last of `messages`.
    end: Option<PageKey>,
}

impl Paging {
    pub(super) fn new(limits: MemoryLimits, temp: Option<Arc<TempStore>>, key: &QueueKey) -> Self {
        Paging {
            window: Window::Complete,
            limits,
            accounted: 0,
            pinned: 0,
            pinned_accounted: 0,
            in_flight_accounted: 0,
            typical: 0,
            returned: HashMap::new(),
            resume_sent: false,
            spool: temp.map(|temp| Spool {
                key: temp.spool_key(key),
                temp,
                count: 0,
                bytes: 0,
                refusing: false,
            }),
        }
    }

    /// Messages of this queue spilled to the temporary store.
    pub(super) fn spooled(&self) -> usize {
        self.spool.as_ref().map_or(0, |spool| spool.count)
    }

    /// True if the store may hold messages of this queue that are not in memory.
    pub(super) fn has_more(&self) -> bool {
        matches!(self.window, Window::Partial(_))
    }

    /// Takes a message's size into the running average (weighing the last one an eighth).
    pub(super) fn note_size(&mut self, message: &Message) {
        let size = held_size(message);
        self.typical = match self.typical {
            0 => size,
            typical => (typical * 7 + size) / 8,
        };
    }

    /// Messages a page read may hold: [`PAGE`], fewer when the messages are so large that
    /// a page of them would be more than an eighth of the destination limit (a page of 512
    /// messages of 256 KiB read 128 MiB at once, whatever the limit), at least one. Before
    /// the first message is seen its size is unknown, so a short page is read.
    fn page_limit(&self) -> usize {
        match self.typical {
            0 => UNKNOWN_SIZE_PAGE,
            typical => (self.limits.destination / 8 / typical).clamp(1, PAGE),
        }
    }

    /// Ready messages eviction keeps: [`MIN_WINDOW`], or a page when a page is fewer (a
    /// floor of 64 messages of 256 KiB kept 16 MiB past a 32 MiB limit).
    fn min_window(&self) -> usize {
        MIN_WINDOW.min(self.page_limit())
    }

    /// Counts `message` in (`held`) or out of the bytes that cannot page out, if it is one
    /// (`stored`: the queue keeps persistent messages in the store).
    pub(super) fn pin(&mut self, stored: bool, message: &Message, held: bool) {
        if stored && message.is_persistent() {
            return;
        }
        let bytes = message.memory_size() + ENTRY_OVERHEAD;
        self.pinned = if held { self.pinned + bytes } else { self.pinned.saturating_sub(bytes) };
    }
}

/// The key just before `key` in page order (for a boundary that excludes `key`).
fn before(key: PageKey) -> Option<PageKey> {
    match key.id.0.checked_sub(1) {
        Some(id) => Some(PageKey { priority: key.priority, id: MessageId(id) }),
        None => key
            .priority
            .checked_add(1)
            .map(|priority| PageKey { priority, id: MessageId(u64::MAX) }),
    }
}

/// Bytes a message counts for in flow control, the spool and the memory limits.
pub(super) fn held_size(message: &Message) -> usize {
    message.memory_size() + ENTRY_OVERHEAD
}

impl Queue {
    /// True if `message` is kept in this queue's store (so it may leave memory at any time).
    pub(super) fn in_store(&self, message: &Message) -> bool {
        self.handle.stored && message.is_persistent()
    }

    /// True if `message` may leave memory: it is in the store, or it can spill to the
    /// temporary store (a non-persistent message, or any message of a queue that is not
    /// stored, when the queue has a spool).
    fn pageable(&self, message: &Message) -> bool {
        self.in_store(message) || self.paging.spool.is_some()
    }

    /// Messages held in memory: ready, in flight, awaiting a transaction's end.
    fn held_count(&self) -> usize {
        self.ready.len()
            + self.consumers.iter().map(|c| c.in_flight.len()).sum::<usize>()
            + self.awaiting_transaction.len()
    }

    /// What the queue holds, as the limits count it.
    fn held_bytes(&self) -> usize {
        self.memory_bytes + self.held_count() * ENTRY_OVERHEAD
    }

    /// Bytes of the messages this queue's consumers hold in flight.
    pub(super) fn in_flight_bytes(&self) -> usize {
        self.consumers.iter().map(|c| c.in_flight_bytes).sum()
    }

    /// True if consumer `index` may be given one more message (of the queue's typical size)
    /// by the memory limits. In-flight messages cannot be evicted, so without this a
    /// consumer that never acknowledges (a client that stopped reading) was given its whole
    /// prefetch, paged in past both limits (600 messages of 256 KiB took the broker to 385
    /// MiB with limits of 32 and 48 MiB) and starved the queue's other consumers. So: the
    /// queue's in-flight bytes stay within its destination limit, every queue's together
    /// within the broker's, and each consumer's within its share of the destination limit
    /// (the limit divided among the consumers), so that one stuck consumer leaves the rest
    /// to the others. A consumer that holds nothing may always take one message, however
    /// large, so every consumer makes progress. `queue` is [`Queue::in_flight_bytes`], summed
    /// once by the caller (who asks for every consumer in turn).
    pub(super) fn may_take(&self, index: usize, queue: usize) -> bool {
        let consumer = &self.consumers[index];
        if consumer.in_flight_bytes == 0 {
            return true;
        }
        let cost = self.paging.typical.max(ENTRY_OVERHEAD);
        let destination = self.paging.limits.destination;
        let sharing = match self.consumers.iter().any(|c| c.spec.exclusive) {
            true => 1,
            false => self.consumers.len().max(1),
        };
        let broker = &self.paging.limits.broker;
        let elsewhere = broker
            .in_flight
            .load(Ordering::Relaxed)
            .saturating_sub(self.paging.in_flight_accounted);
        consumer.in_flight_bytes.saturating_add(cost) <= destination / sharing
            && queue.saturating_add(cost) <= destination
            && elsewhere.saturating_add(queue).saturating_add(cost) <= broker.limit
    }

    /// The broker's usage with this queue's current holding in it.
    fn broker_usage(&self, held: usize) -> usize {
        self.paging.limits.broker_used().saturating_sub(self.paging.accounted) + held
    }

    fn over_limits(&self) -> bool {
        let held = self.held_bytes();
        held > self.paging.limits.destination
            || self.broker_usage(held) > self.paging.limits.broker.limit
            || (self.policy.lazy_dispatch && self.ready.len() > self.free_credit())
    }

    /// How many more messages the consumers could take now: what a lazy-dispatch queue
    /// keeps in memory (its policy's `lazy_dispatch`).
    fn free_credit(&self) -> usize {
        let free = |c: &super::Consumer| match c.spec.prefetch {
            0 => usize::try_from(c.pulls).unwrap_or(usize::MAX),
            prefetch => (prefetch as usize).saturating_sub(c.in_flight.len() - c.released),
        };
        self.consumers.iter().map(free).fold(0, usize::saturating_add)
    }

    /// True if this message is in memory already or will come through an `Enqueue`.
    fn is_held(&self, message: &Message, arriving: &HashSet<MessageId>) -> bool {
        arriving.contains(&message.id)
            || self.ready.contains_key(&PageKey::of(message))
            || self.awaiting_transaction.contains_key(&message.id)
            || self.consumers.iter().any(|c| c.in_flight.contains_key(&message.id))
    }

    /// Loads the first window at start (only that: a deep queue starts at once). Every
    /// message loaded is recorded in `audit`.
    pub(super) fn load_first_window(
        &mut self,
        audit: &mut ProducerAudit,
    ) -> Result<(), StoreError> {
        self.paging.window = Window::Partial(None);
        while self.paging.has_more() && !self.over_limits() {
            self.read_next_page(Some(audit))?;
        }
        self.shrink();
        if !self.ready.is_empty() {
            // Debug: the broker sums up recovery in one line (`Core::recover`), however many
            // queues there are.
            tracing::debug!(queue = ?self.handle.key, messages = self.ready.len(),
                complete = !self.paging.has_more(), "recovered");
        }
        self.account();
        Ok(())
    }

    /// Reads what follows `after` in the store and, when this queue spilled messages, in the
    /// temporary store, merged in page order. Both are read a page at a time; where both pages
    /// are full, the messages after the smaller last key are left for the next read, so that
    /// everything up to `end` is read from both and the window's rule holds for both.
    /// `limit` messages at most from each (a browse, which keeps what it reads anyway, reads
    /// whole pages; paging and scans read [`Paging::page_limit`]).
    fn read_beyond(&self, after: Option<PageKey>, limit: usize) -> Result<Beyond, StoreError> {
        let stored = match self.handle.stored {
            true => off_the_runtime(|| self.store.read_page(&self.handle.key, after, limit))?,
            false => Vec::new(),
        };
        let spooled = match &self.paging.spool {
            Some(spool) if spool.count > 0 => match spool.temp.opened() {
                Some(temp) => off_the_runtime(|| temp.read_page(&spool.key, after, limit))?,
                None => Vec::new(),
            },
            _ => Vec::new(),
        };
        let full_page_end = |page: &[StoredMessage]| match page.last() {
            Some(last) if page.len() == limit => Some(PageKey::of(&last.message)),
            _ => None,
        };
        let end = match (full_page_end(&stored), full_page_end(&spooled)) {
            (Some(stored), Some(spooled)) => Some(stored.min(spooled)),
            (stored, spooled) => stored.or(spooled),
        };
        let mut messages: Vec<(StoredMessage, Source)> = stored
            .into_iter()
            .map(|stored| (stored, Source::Store))
            .chain(spooled.into_iter().map(|spooled| (spooled, Source::Spool)))
            .filter(|(stored, _)| end.is_none_or(|end| PageKey::of(&stored.message) <= end))
            .collect();
        messages.sort_by_key(|(stored, _)| PageKey::of(&stored.message));
        Ok(Beyond { messages, end })
    }

    /// Reads the page after the window into it and moves the boundary to its end.
    fn read_next_page(&mut self, mut audit: Option<&mut ProducerAudit>) -> Result<(), StoreError> {
        let Window::Partial(after) = self.paging.window else { return Ok(()) };
        let beyond = self.read_beyond(after, self.paging.page_limit())?;
        self.paging.window = match beyond.end {
            Some(end) => Window::Partial(Some(end)),
            None => Window::Complete,
        };
        // Everything read from the temporary store leaves it: back in memory, it is held like
        // any non-persistent message (and spilled again if evicted).
        let unspooled: Vec<Arc<Message>> = beyond
            .messages
            .iter()
            .filter(|(_, source)| *source == Source::Spool)
            .map(|(stored, _)| stored.message.clone())
            .collect();
        self.unspool(&unspooled);
        let fresh: Vec<_> = {
            let arriving = self.handle.arriving.0.lock();
            beyond
                .messages
                .into_iter()
                .filter(|(stored, _)| !self.is_held(&stored.message, &arriving))
                .map(|(stored, _)| stored)
                .collect()
        };
        for stored in fresh {
            if let Some(audit) = audit.as_deref_mut() {
                audit.record_recovered(&stored.message);
            }
            let mut queued = QueuedMessage::new(stored.message);
            // Possibly seen by a consumer before an unclean stop: goes out redelivered.
            queued.delivery_count = self
                .paging
                .returned
                .remove(&queued.message.id)
                .unwrap_or(u32::from(stored.redelivered));
            self.memory_bytes += queued.message.memory_size();
            self.paging.pin(self.handle.stored, &queued.message, true);
            self.paging.note_size(&queued.message);
            self.make_ready(queued);
        }
        Ok(())
    }

    /// Spills a non-persistent message after the window to the temporary store; gives it
    /// back when there is none or it refuses (full, failed): it then waits in memory.
    pub(super) fn spool(&mut self, queued: QueuedMessage) -> Result<(), QueuedMessage> {
        let Some(spool) = &mut self.paging.spool else { return Err(queued) };
        let Some(temp) = spool.temp.store() else { return Err(queued) };
        let unit = UnitOfWork::with(Operation::AddMessage {
            message: queued.message.clone(),
            queues: vec![spool.key.clone()],
            txn: None,
        });
        // Not waited for: nothing in the temporary store needs to be durable, and a unit is
        // readable as soon as it is submitted. A refusal (full, closed, poisoned) is at once.
        if let Some(Err(error)) = temp.submit(unit).now_or_never() {
            if !std::mem::replace(&mut spool.refusing, true) {
                tracing::warn!(queue = ?self.handle.key, %error,
                    "the temporary store refuses messages: non-persistent messages stay in memory");
            }
            return Err(queued);
        }
        spool.refusing = false;
        spool.count += 1;
        spool.bytes += held_size(&queued.message);
        self.paging.pin(self.handle.stored, &queued.message, false);
        self.leave_in_store(queued);
        Ok(())
    }

    /// Takes messages read back into memory out of the temporary store.
    fn unspool(&mut self, messages: &[Arc<Message>]) {
        let Some(spool) = &mut self.paging.spool else { return };
        if messages.is_empty() {
            return;
        }
        let mut unit = UnitOfWork::new();
        for message in messages {
            spool.count = spool.count.saturating_sub(1);
            spool.bytes = spool.bytes.saturating_sub(held_size(message));
            unit.push(Operation::Ack {
                queue: spool.key.clone(),
                key: PageKey::of(message),
                txn: None,
            });
        }
        let Some(temp) = spool.temp.opened() else { return };
        if let Some(Err(error)) = temp.submit(unit).now_or_never() {
            tracing::warn!(queue = ?self.handle.key, %error,
                "cannot remove messages read back from the temporary store");
        }
    }

    /// The queue stops: its spilled messages leave the temporary store.
    pub(super) fn drop_spool(&mut self) {
        let Some(spool) = &mut self.paging.spool else { return };
        if spool.count == 0 {
            return;
        }
        spool.count = 0;
        spool.bytes = 0;
        let (Some(temp), Some(subscription)) = (spool.temp.opened(), &spool.key.subscription)
        else {
            return;
        };
        let unit = UnitOfWork::with(Operation::RemoveSubscription(subscription.clone()));
        if let Some(Err(error)) = temp.submit(unit).now_or_never() {
            tracing::debug!(queue = ?self.handle.key, %error,
                "cannot remove the spilled messages of a stopped queue (the temporary store is \
                 wiped at the next start)");
        }
    }

    /// A message after the window leaves memory: it is in the store (or was just spilled to
    /// the temporary store).
    pub(super) fn leave_in_store(&mut self, queued: QueuedMessage) {
        let key = PageKey::of(&queued.message);
        self.memory_bytes = self.memory_bytes.saturating_sub(queued.message.memory_size());
        if queued.delivery_count > 0 {
            self.paging.returned.insert(queued.message.id, queued.delivery_count);
        }
        // Consumers whose scan beyond the window passed it must see it again.
        for consumer in &mut self.consumers {
            if consumer.stored_scan.is_some_and(|scanned| scanned >= key) {
                consumer.stored_scan = before(key);
            }
        }
    }

    /// Takes the ids of enqueued messages off the arriving list.
    pub(super) fn arrived(&self, messages: &[Arc<Message>]) {
        if !self.handle.stored {
            return;
        }
        let mut arriving = self.handle.arriving.0.lock();
        for message in messages {
            arriving.remove(&message.id);
        }
    }

    /// After every command: keep to the limits, page in what the window lacks, dispatch,
    /// count the queue's memory in the broker's.
    pub(super) fn settle(&mut self) {
        self.shrink();
        self.fill();
        self.dispatch();
        self.account();
    }

    /// Evicts the highest-keyed persistent ready messages while over the limits.
    fn shrink(&mut self) {
        let mut evicted = false;
        // Once the temporary store refuses, only persistent messages leave in this turn.
        let mut spool_refused = false;
        while self.ready.len() > self.paging.min_window() && self.over_limits() {
            let last = self.ready.iter().rev().find(|(_, queued)| {
                self.in_store(&queued.message) || (!spool_refused && self.pageable(&queued.message))
            });
            let Some(key) = last.map(|(key, _)| *key) else { break };
            let Some(queued) = self.ready.remove(&key) else { break };
            if self.in_store(&queued.message) {
                self.leave_in_store(queued);
            } else if let Err(queued) = self.spool(queued) {
                self.ready.insert(key, queued);
                spool_refused = true;
                continue;
            }
            self.paging.window = Window::Partial(before(key));
            evicted = true;
        }
        if evicted {
            // The messages between the new boundary and the old one were never scanned as
            // stored ones.
            for consumer in &mut self.consumers {
                consumer.stored_scan = None;
            }
        }
    }

    /// Pages in when the window runs low: below half the destination limit, or without a
    /// ready message inside it while a consumer could take one.
    fn fill(&mut self) {
        if !self.paging.has_more() {
            return;
        }
        // A consumer that holds its share of the limits in flight does not count: paging in
        // for it would only grow memory past the limits.
        let in_flight = self.in_flight_bytes();
        let starving = (0..self.consumers.len())
            .any(|index| self.consumers[index].has_credit() && self.may_take(index, in_flight))
            && self.ready.keys().next().is_none_or(|key| self.paging.window.beyond(*key));
        let held = self.held_bytes();
        let low = match self.policy.lazy_dispatch {
            true => self.ready.len() < self.free_credit(),
            false => {
                held < self.paging.limits.destination / 2
                    && self.broker_usage(held) < self.paging.limits.broker.limit
            }
        };
        if !starving && !low {
            return;
        }
        for _ in 0..PAGES_PER_TURN {
            if let Err(error) = self.read_next_page(None) {
                tracing::warn!(queue = ?self.handle.key, %error,
                    "cannot page messages in from the store; retrying at the next command");
                return;
            }
            if !self.paging.has_more() || self.over_limits() {
                break;
            }
        }
    }

    /// True if the store (or the temporary store) holds more while no ready message is left
    /// inside the window.
    pub(super) fn window_ran_dry(&self) -> bool {
        self.paging.has_more()
            && self.ready.keys().next().is_none_or(|key| self.paging.window.beyond(*key))
    }

    /// Reads the next page into the window now; false if the store cannot be read.
    pub(super) fn page_in_now(&mut self) -> bool {
        match self.read_next_page(None) {
            Ok(()) => true,
            Err(error) => {
                tracing::warn!(queue = ?self.handle.key, %error,
                    "cannot page messages in from the store; retrying at the next command");
                false
            }
        }
    }

    /// The first stored message after the window for consumer `index` (its selector and
    /// message groups allowing), read from the store and counted as held; `None` when the
    /// window is complete, nothing matches, or the scan stopped at its per-turn limit (a
    /// [`QueueCommand::Resume`] then continues it).
    pub(super) fn next_stored_for(&mut self, index: usize) -> Option<QueuedMessage> {
        let Window::Partial(boundary) = self.paging.window else { return None };
        let mut after = boundary.max(self.consumers[index].stored_scan);
        for _ in 0..SCAN_PAGES_PER_TURN {
            let beyond = match self.read_beyond(after, self.paging.page_limit()) {
                Ok(beyond) => beyond,
                Err(error) => {
                    tracing::warn!(queue = ?self.handle.key, %error,
                        "cannot read stored messages beyond the window");
                    return None;
                }
            };
            let full = beyond.end.is_some();
            let found = {
                let arriving = self.handle.arriving.0.lock();
                let mut found = None;
                for (stored, source) in beyond.messages {
                    after = Some(PageKey::of(&stored.message));
                    if !self.is_held(&stored.message, &arriving)
                        && self.wants(index, &stored.message)
                    {
                        found = Some((stored, source));
                        break;
                    }
                }
                found
            };
            self.consumers[index].stored_scan = after;
            if let Some((stored, source)) = found {
                if source == Source::Spool {
                    self.unspool(std::slice::from_ref(&stored.message));
                }
                let mut queued = QueuedMessage::new(stored.message);
                queued.delivery_count = self
                    .paging
                    .returned
                    .remove(&queued.message.id)
                    .unwrap_or(u32::from(stored.redelivered));
                self.memory_bytes += queued.message.memory_size();
                self.paging.pin(self.handle.stored, &queued.message, true);
                return Some(queued);
            }
            if !full {
                return None;
            }
        }
        if !self.paging.resume_sent {
            self.paging.resume_sent = self.handle.send(QueueCommand::Resume);
        }
        None
    }

    /// True if consumer `index` may take `message`: its selector matches and no other
    /// consumer owns the message's group.
    fn wants(&self, index: usize, message: &Message) -> bool {
        let consumer = &self.consumers[index];
        let group_allows = match &message.headers.group_id {
            Some(group) => self.groups.get(group).is_none_or(|owner| *owner == consumer.spec.id),
            None => true,
        };
        group_allows && consumer.spec.selector.as_ref().is_none_or(|s| s.matches(message))
    }

    /// Adds to a browse the stored messages after the window, until it holds
    /// [`MAX_BROWSE`] messages.
    pub(super) fn browse_stored(
        &self,
        selector: Option<&Selector>,
        now: i64,
        messages: &mut Vec<(PageKey, Arc<Message>)>,
    ) {
        let Window::Partial(mut after) = self.paging.window else { return };
        for _ in 0..BROWSE_PAGES {
            if messages.len() >= MAX_BROWSE {
                return;
            }
            let beyond = match self.read_beyond(after, PAGE) {
                Ok(beyond) => beyond,
                Err(error) => {
                    tracing::warn!(queue = ?self.handle.key, %error,
                        "cannot read stored messages for a browser");
                    return;
                }
            };
            let full = beyond.end.is_some();
            let arriving = self.handle.arriving.0.lock();
            for (stored, _) in beyond.messages {
                let message = stored.message;
                after = Some(PageKey::of(&message));
                if !self.is_held(&message, &arriving)
                    && !message.is_expired(now)
                    && selector.is_none_or(|s| s.matches(&message))
                {
                    messages.push((PageKey::of(&message), message));
                }
            }
            if !full {
                return;
            }
        }
    }

    /// Ready messages that are in the store or the temporary store only, beyond the window
    /// (for the statistics).
    pub(super) fn stored_beyond_window(&self) -> usize {
        if !self.paging.has_more() {
            return 0;
        }
        let stored = match self.handle.stored {
            true => off_the_runtime(|| self.store.count(&self.handle.key)).unwrap_or(0),
            false => 0,
        };
        let in_memory = self
            .ready
            .values()
            .chain(self.consumers.iter().flat_map(|c| c.in_flight.values()))
            .chain(self.awaiting_transaction.values())
            .filter(|queued| self.in_store(&queued.message))
            .count();
        usize::try_from(stored).unwrap_or(usize::MAX).saturating_sub(in_memory)
            + self.paging.spooled()
    }

    /// Brings the broker's usage up to date with this queue's, and the flow control gates
    /// (this queue's and the broker's) with both.
    fn account(&mut self) {
        let held = self.held_bytes();
        let broker = &self.paging.limits.broker;
        if held >= self.paging.accounted {
            broker.used.fetch_add(held - self.paging.accounted, Ordering::Relaxed);
        } else {
            broker.used.fetch_sub(self.paging.accounted - held, Ordering::Relaxed);
        }
        self.paging.accounted = held;
        let in_flight = self.in_flight_bytes();
        if in_flight >= self.paging.in_flight_accounted {
            broker
                .in_flight
                .fetch_add(in_flight - self.paging.in_flight_accounted, Ordering::Relaxed);
        } else {
            broker
                .in_flight
                .fetch_sub(self.paging.in_flight_accounted - in_flight, Ordering::Relaxed);
        }
        self.paging.in_flight_accounted = in_flight;
        // What cannot page out: messages held that are not in the store, and messages sent
        // to this task that it has not taken yet.
        let inbox = self.handle.inbox.load(Ordering::Relaxed);
        let pinned = self.paging.pinned;
        let total = if pinned >= self.paging.pinned_accounted {
            broker.pinned.fetch_add(pinned - self.paging.pinned_accounted, Ordering::Relaxed)
                + (pinned - self.paging.pinned_accounted)
        } else {
            broker
                .pinned
                .fetch_sub(self.paging.pinned_accounted - pinned, Ordering::Relaxed)
                .saturating_sub(self.paging.pinned_accounted - pinned)
        };
        self.paging.pinned_accounted = pinned;
        let spooled = self.paging.spool.as_ref().map_or(0, |spool| spool.bytes);
        let destination_usage = pinned.saturating_add(spooled).saturating_add(inbox);
        // Without producer flow control the destination's own limit never holds a send (the
        // broker's still does).
        let limit = match self.policy.producer_flow_control {
            true => self.paging.limits.destination,
            false => usize::MAX,
        };
        if self.handle.gate.update(destination_usage, limit, &broker.blocked_queues) {
            tracing::debug!(queue = ?self.handle.key, blocked = self.handle.gate.is_blocked(),
                pinned, "producer flow control");
            self.gate_changed();
        }
        broker.gate.update(total, broker.limit, &broker.broker_blocked);
    }

    /// The queue stops: its memory no longer counts, and its producers no longer wait.
    pub(super) fn release_memory(&mut self) {
        let broker = &self.paging.limits.broker;
        broker.used.fetch_sub(self.paging.accounted, Ordering::Relaxed);
        self.paging.accounted = 0;
        broker.in_flight.fetch_sub(self.paging.in_flight_accounted, Ordering::Relaxed);
        self.paging.in_flight_accounted = 0;
        let total = broker
            .pinned
            .fetch_sub(self.paging.pinned_accounted, Ordering::Relaxed)
            .saturating_sub(self.paging.pinned_accounted);
        self.paging.pinned_accounted = 0;
        self.handle.gate.open(&broker.blocked_queues);
        broker.gate.update(total, broker.limit, &broker.broker_blocked);
    }
}

#[cfg(test)]
mod tests {
    use std::time::Duration;

    use store::{
        DeliveryMode, Destination, MemoryStore, MessageStore, Operation, PropertyValue, QueueKey,
        UnitOfWork,
    };
    use tokio::sync::{mpsc, oneshot};

    use super::super::Delivery;
    use super::super::{spawn, ConsumerSpec, FirstWindow, QueueHandle};
    use super::*;
    use crate::core::dead_letter::DeadLetterSettings;
    use crate::core::types::{AckMode, ConsumerId};

    /// A destination limit that holds a few dozen 1 KiB messages.
    const SMALL: u64 = 64 << 10;

    fn key() -> QueueKey {
        QueueKey::destination(Destination::queue("PAGED"))
    }

    fn message(id: u64, priority: u8) -> Arc<Message> {
        let mut message =
            Message::new(MessageId(id), format!("ID:t-1:1:1:1:{id}"), key().destination);
        message.headers.delivery_mode = DeliveryMode::Persistent;
        message.headers.priority = priority;
        message.body = vec![b'x'; 1024].into();
        Arc::new(message)
    }

    fn store_all(store: &MemoryStore, messages: &[Arc<Message>]) {
        for message in messages {
            let unit = UnitOfWork::with(Operation::AddMessage {
                message: message.clone(),
                queues: vec![key()],
                txn: None,
            });
            assert!(store.submit(unit).is_ready());
        }
    }

    fn start(store: &Arc<MemoryStore>, limit: u64) -> QueueHandle {
        let dead_letters = Arc::new(DeadLetterSettings::default());
        let store: Arc<dyn MessageStore> = store.clone();
        let limits = MemoryLimits::new(limit, 1 << 30);
        let policy = Arc::default();
        let audit = &mut ProducerAudit::default();
        spawn(
            key(),
            true,
            store,
            dead_letters,
            limits,
            policy,
            Default::default(),
            FirstWindow::Now(audit),
            None,
        )
        .expect("the queue starts")
    }

    /// A queue like [`start`]'s that spills non-persistent messages to `temp`.
    fn start_spilling(
        store: &Arc<MemoryStore>,
        temp: Arc<dyn MessageStore>,
        limit: u64,
    ) -> QueueHandle {
        let dead_letters = Arc::new(DeadLetterSettings::default());
        let store: Arc<dyn MessageStore> = store.clone();
        let limits = MemoryLimits::new(limit, 1 << 30);
        let audit = &mut ProducerAudit::default();
        let temp = Arc::new(TempStore::new(0, Box::new(move || Ok(temp.clone()))));
        let events = Default::default();
        spawn(
            key(),
            true,
            store,
            dead_letters,
            limits,
            Arc::default(),
            events,
            FirstWindow::Now(audit),
            Some(temp),
        )
        .expect("the queue starts")
    }

    fn non_persistent(id: u64, priority: u8) -> Arc<Message> {
        let mut message = (*message(id, priority)).clone();
        message.headers.delivery_mode = DeliveryMode::NonPersistent;
        Arc::new(message)
    }

    /// Bytes of the bodies the temporary store holds.
    fn spooled(temp: &MemoryStore) -> u64 {
        temp.usage().used_bytes
    }

    /// In-flight bytes bound dispatch, but not those of messages acknowledged in an open
    /// transaction: a transaction larger than the limit must be able to finish.
    #[tokio::test]
    async fn a_transaction_may_take_more_than_the_limit_before_it_commits() {
        let store = Arc::new(MemoryStore::new());
        let queue = start(&store, SMALL);
        for id in 1..=200 {
            send(&queue, &store, message(id, 4));
        }
        let mut deliveries = consumer(&queue, 1, None);
        for _ in 0..200 {
            let delivery = tokio::time::timeout(Duration::from_secs(5), deliveries.recv())
                .await
                .expect("a delivery while the transaction is open")
                .expect("the queue is running");
            let ids = vec![delivery.message.id];
            queue.send(QueueCommand::AckInTransaction { consumer: ConsumerId(1), ids });
        }
    }

    /// A consumer that acknowledges nothing holds at most its share of the destination limit
    /// in flight (with two consumers, half), however large its prefetch; the other consumer
    /// gets the rest.
    #[tokio::test]
    async fn a_consumer_that_acknowledges_nothing_holds_its_share_of_the_limit() {
        let store = Arc::new(MemoryStore::new());
        let queue = start(&store, SMALL);
        let subscribe = |id: u64| {
            let (sink, deliveries) = mpsc::unbounded_channel();
            queue.send(QueueCommand::Subscribe(ConsumerSpec {
                id: ConsumerId(id),
                prefetch: 1000,
                ack_mode: AckMode::ClientIndividual,
                exclusive: false,
                priority: 0,
                sink,
                selector: None,
                counts_redeliveries: false,
            }));
            deliveries
        };
        let mut stuck = subscribe(1);
        let mut other = subscribe(2);
        for id in 1..=200 {
            send(&queue, &store, message(id, 4));
        }
        let mut received = 0;
        while received < 150 {
            let delivery = tokio::time::timeout(Duration::from_secs(5), other.recv())
                .await
                .expect("the other consumer is served")
                .expect("the queue is running");
            received += 1;
            queue.send(QueueCommand::Ack {
                consumer: ConsumerId(2),
                ids: vec![delivery.message.id],
                done: None,
            });
        }
        let mut held = 0;
        while let Ok(delivery) = stuck.try_recv() {
            held += held_size(&delivery.message);
        }
        assert!(held > 0 && held <= SMALL as usize / 2, "the stuck consumer holds {held} bytes");
    }

    #[tokio::test]
    async fn spilling_to_a_journal_drains_in_order() {
        let dir = tempfile::tempdir().expect("a temporary directory");
        let options = store_journal::JournalOptions {
            sync: store::SyncPolicy::Never,
            ..store_journal::JournalOptions::default()
        };
        let temp = store_journal::JournalStore::open(dir.path(), options).expect("opens");
        temp.recover().expect("recovers");
        let store = Arc::new(MemoryStore::new());
        let queue = start_spilling(&store, Arc::new(temp), SMALL);
        let messages: Vec<_> = (1..=3000).map(|id| non_persistent(id, (id % 3) as u8)).collect();
        for message in &messages {
            send(&queue, &store, message.clone());
        }
        assert_eq!(queue.stats().await.expect("stats").ready, 3000);
        let mut deliveries = consumer(&queue, 1, None);
        let received = drain(&queue, &mut deliveries).await;
        assert_eq!(keys(&received), in_page_order(&messages));
    }

    /// Sends `message` as `Core::send` does: a persistent one is stored first.
    fn send(queue: &QueueHandle, store: &MemoryStore, message: Arc<Message>) {
        if message.is_persistent() {
            queue.announce(&message);
            store_all(store, std::slice::from_ref(&message));
        }
        queue.send(QueueCommand::Enqueue(vec![message]));
    }

    #[tokio::test]
    async fn non_persistent_messages_beyond_the_limit_spill_and_come_back_in_order() {
        let (store, temp) = (Arc::new(MemoryStore::new()), Arc::new(MemoryStore::new()));
        let queue = start_spilling(&store, temp.clone(), SMALL);
        let mut messages = Vec::new();
        for id in 1..=2000 {
            // Persistent and not, priorities mixed: one order over both stores.
            let priority = (id % 5) as u8 * 2;
            let message =
                if id % 3 == 0 { message(id, priority) } else { non_persistent(id, priority) };
            send(&queue, &store, message.clone());
            messages.push(message);
        }
        let stats = queue.stats().await.expect("stats");
        assert_eq!(stats.ready, 2000, "spilled messages count as ready");
        assert!(stats.memory_bytes < 2 * SMALL as usize, "{} bytes held", stats.memory_bytes);
        assert!(spooled(&temp) > 1000 * 1024, "only {} bytes spilled", spooled(&temp));
        let mut deliveries = consumer(&queue, 1, None);
        let received = drain(&queue, &mut deliveries).await;
        assert_eq!(keys(&received), in_page_order(&messages));
        assert_eq!(spooled(&temp), 0, "everything read back left the temporary store");
        assert_eq!(store.count(&key()).expect("count"), 0);
    }

    #[tokio::test]
    async fn spilled_messages_that_expire_leave_the_temporary_store_undelivered() {
        let (store, temp) = (Arc::new(MemoryStore::new()), Arc::new(MemoryStore::new()));
        let queue = start_spilling(&store, temp.clone(), SMALL);
        let expiration = crate::core::queue::now_millis() + 200;
        for id in 1..=500 {
            let mut message = (*non_persistent(id, 4)).clone();
            message.headers.expiration = expiration;
            send(&queue, &store, Arc::new(message));
        }
        let kept = non_persistent(501, 4);
        send(&queue, &store, kept.clone());
        assert_eq!(queue.stats().await.expect("stats").ready, 501);
        assert!(spooled(&temp) > 0);
        tokio::time::sleep(Duration::from_millis(300)).await;
        let mut deliveries = consumer(&queue, 1, None);
        let received = drain(&queue, &mut deliveries).await;
        assert_eq!(keys(&received), vec![PageKey::of(&kept)], "expired ones are never delivered");
        let stats = queue.stats().await.expect("stats");
        assert_eq!((stats.ready, stats.expired), (0, 500));
        assert_eq!(spooled(&temp), 0, "nothing is left in the temporary store");
    }

    #[tokio::test]
    async fn a_selector_finds_spilled_messages_and_a_stopped_queue_drops_its_spill() {
        let (store, temp) = (Arc::new(MemoryStore::new()), Arc::new(MemoryStore::new()));
        let queue = start_spilling(&store, temp.clone(), SMALL);
        for id in 1..=1000 {
            let mut message = (*non_persistent(id, 4)).clone();
            if id == 990 {
                message.properties.insert("color".into(), PropertyValue::String("red".into()));
            }
            send(&queue, &store, Arc::new(message));
        }
        let mut reds = consumer(&queue, 1, Some("color = 'red'"));
        let received = drain(&queue, &mut reds).await;
        assert_eq!(received.iter().map(|m| m.id.0).collect::<Vec<_>>(), vec![990]);
        let (reply, browsed) = oneshot::channel();
        queue.send(QueueCommand::Browse { selector: None, reply });
        assert_eq!(browsed.await.expect("browsed").len(), MAX_BROWSE);
        assert!(spooled(&temp) > 0);
        queue.send(QueueCommand::Stop);
        tokio::time::sleep(Duration::from_millis(100)).await;
        assert_eq!(spooled(&temp), 0, "a stopped queue leaves nothing in the temporary store");
    }

    fn consumer(
        queue: &QueueHandle,
        id: u64,
        selector: Option<&str>,
    ) -> mpsc::UnboundedReceiver<Delivery> {
        let (sink, deliveries) = mpsc::unbounded_channel();
        queue.send(QueueCommand::Subscribe(ConsumerSpec {
            id: ConsumerId(id),
            prefetch: 10,
            ack_mode: AckMode::ClientIndividual,
            exclusive: false,
            priority: 0,
            sink,
            selector: selector.map(|s| Arc::new(Selector::parse(s).expect("selector parses"))),
            counts_redeliveries: false,
        }));
        deliveries
    }

    /// Receives and acknowledges until nothing comes for a while.
    async fn drain(
        queue: &QueueHandle,
        deliveries: &mut mpsc::UnboundedReceiver<Delivery>,
    ) -> Vec<Arc<Message>> {
        let mut received = Vec::new();
        while let Ok(Some(delivery)) =
            tokio::time::timeout(Duration::from_millis(300), deliveries.recv()).await
        {
            let (done, _) = oneshot::channel();
            queue.send(QueueCommand::Ack {
                consumer: delivery.consumer,
                ids: vec![delivery.message.id],
                done: Some(done),
            });
            received.push(delivery.message);
        }
        received
    }

    fn in_page_order(messages: &[Arc<Message>]) -> Vec<PageKey> {
        let mut keys: Vec<PageKey> = messages.iter().map(|m| PageKey::of(m)).collect();
        keys.sort();
        keys
    }

    fn keys(messages: &[Arc<Message>]) -> Vec<PageKey> {
        messages.iter().map(|m| PageKey::of(m)).collect()
    }

    #[test]
    fn the_key_before_excludes_exactly_one_key() {
        let key = PageKey { priority: 4, id: MessageId(10) };
        assert_eq!(before(key), Some(PageKey { priority: 4, id: MessageId(9) }));
        let first = PageKey { priority: 4, id: MessageId(0) };
        let previous = before(first).expect("a higher priority exists");
        assert!(previous < first && PageKey { priority: 5, id: MessageId(7) } <= previous);
        let window = Window::Partial(before(key));
        assert!(window.beyond(key) && !window.beyond(PageKey { priority: 4, id: MessageId(9) }));
    }

    #[tokio::test]
    async fn a_deep_queue_loads_only_its_first_window() {
        let store = Arc::new(MemoryStore::new());
        let messages: Vec<_> = (1..=2000).map(|id| message(id, 4)).collect();
        store_all(&store, &messages);
        let queue = start(&store, SMALL);
        let stats = queue.stats().await.expect("stats");
        assert_eq!(stats.ready, 2000, "the stored messages count as ready");
        assert!(
            stats.memory_bytes < 2 * SMALL as usize,
            "{} bytes held for a 64 KiB limit",
            stats.memory_bytes
        );
    }

    #[tokio::test]
    async fn a_deep_queue_drains_completely_in_priority_order() {
        let store = Arc::new(MemoryStore::new());
        let mut messages: Vec<_> = (1..=1500).map(|id| message(id, (id % 3) as u8 * 3)).collect();
        store_all(&store, &messages);
        let queue = start(&store, SMALL);
        // While nobody consumes: high-priority messages fall inside the window (and evict its
        // tail), low-priority ones after it (they stay in the store only).
        for id in 1501..=1700 {
            let message = message(id, if id % 2 == 0 { 9 } else { 0 });
            queue.announce(&message);
            store_all(&store, std::slice::from_ref(&message));
            queue.send(QueueCommand::Enqueue(vec![message.clone()]));
            messages.push(message);
        }
        let stats = queue.stats().await.expect("stats");
        assert_eq!(stats.ready, 1700);
        assert!(stats.memory_bytes < 2 * SMALL as usize, "{} bytes held", stats.memory_bytes);
        let mut deliveries = consumer(&queue, 1, None);
        let received = drain(&queue, &mut deliveries).await;
        assert_eq!(keys(&received), in_page_order(&messages));
        assert_eq!(store.count(&key()).expect("count"), 0);
    }

    #[tokio::test]
    async fn a_message_still_arriving_is_not_paged_in_twice() {
        let store = Arc::new(MemoryStore::new());
        let messages: Vec<_> = (1..=1000).map(|id| message(id, 4)).collect();
        store_all(&store, &messages);
        let queue = start(&store, SMALL);
        // Stored (and readable) but its Enqueue not sent yet, as between a send's submit and
        // its enqueue, or a transaction's commit and its completion.
        let late = message(1001, 4);
        queue.announce(&late);
        store_all(&store, std::slice::from_ref(&late));
        let mut deliveries = consumer(&queue, 1, None);
        let received = drain(&queue, &mut deliveries).await;
        assert_eq!(keys(&received), in_page_order(&messages), "the arriving one is skipped");
        queue.send(QueueCommand::Enqueue(vec![late.clone()]));
        let received = drain(&queue, &mut deliveries).await;
        assert_eq!(keys(&received), vec![PageKey::of(&late)], "delivered once, by its Enqueue");
        assert_eq!(queue.stats().await.expect("stats").ready, 0);
    }

    #[tokio::test]
    async fn a_returned_message_beyond_the_window_keeps_its_delivery_count() {
        let store = Arc::new(MemoryStore::new());
        let messages: Vec<_> = (1..=1000).map(|id| message(id, 4)).collect();
        store_all(&store, &messages);
        let queue = start(&store, SMALL);
        let mut deliveries = consumer(&queue, 1, Some("JMSPriority = 4"));
        let first = deliveries.recv().await.expect("a delivery");
        // A burst of high-priority messages evicts the window's tail and more: the boundary
        // moves before the returned message.
        for id in 1001..=1200 {
            let message = message(id, 9);
            queue.announce(&message);
            store_all(&store, std::slice::from_ref(&message));
            queue.send(QueueCommand::Enqueue(vec![message]));
        }
        queue.send(QueueCommand::Unsubscribe(ConsumerId(1)));
        let mut deliveries = consumer(&queue, 2, Some("JMSPriority = 4"));
        let again = deliveries.recv().await.expect("delivered again");
        assert_eq!(again.message.id, first.message.id);
        assert!(again.redelivered && again.delivery_count == 2);
    }

    #[tokio::test]
    async fn a_selector_finds_its_matches_beyond_the_window() {
        let store = Arc::new(MemoryStore::new());
        let mut messages: Vec<_> = (1..=3000).map(|id| message(id, 4)).collect();
        for id in [2990, 2995] {
            let mut red = (*message(id, 4)).clone();
            red.properties.insert("color".into(), PropertyValue::String("red".into()));
            messages[id as usize - 1] = Arc::new(red);
        }
        store_all(&store, &messages);
        let queue = start(&store, SMALL);
        let mut reds = consumer(&queue, 1, Some("color = 'red'"));
        let received = drain(&queue, &mut reds).await;
        assert_eq!(received.iter().map(|m| m.id.0).collect::<Vec<_>>(), vec![2990, 2995]);
        let (reply, browsed) = oneshot::channel();
        queue.send(QueueCommand::Browse { selector: None, reply });
        let browsed = browsed.await.expect("browsed");
        assert_eq!(browsed.len(), MAX_BROWSE, "a browse is bounded");
        assert!(browsed.windows(2).all(|pair| pair[0].id < pair[1].id));
        let mut rest = consumer(&queue, 2, None);
        assert_eq!(drain(&queue, &mut rest).await.len(), 2998);
    }
}
