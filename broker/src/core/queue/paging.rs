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
//!   per message held. A message routed to several queues at once is one `Arc` they share:
//!   each queue's own figures count it whole, but its body (with the message's own overhead)
//!   counts once in the broker's usage (`SharedBody`), each queue adding only its holding
//!   ([`HOLDER_OVERHEAD`]). Eviction never goes below `MIN_WINDOW` ready messages (or one page of
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
//! then submits, then enqueues; the queue forgets it when the `Enqueue` arrives. The
//! announcement is an [`Arrival`](super::Arrival) that must be enqueued and withdraws itself
//! when dropped, and [`stage`](super::stage) submits the unit (`arrival.rs`), so that no path
//! leaves a message announced or enqueues one withdrawn. **Paging (and
//! the scan beyond the window) skips announced messages: a message enters a queue's memory
//! through its `Enqueue` when it has one, through a page-in otherwise.** Since the `Enqueue`
//! comes after the page-in passed the message's key, it finds the message inside the window
//! and keeps it; one that arrives after the boundary is left to a later page-in, which no
//! longer skips it. Nothing is skipped for good: a message that is neither announced nor held
//! is paged in, and an engine that made units visible only once durable would need the same
//! rule plus a page-in that stops at the oldest unfinished write (not needed today).
//!
//! # Files
//!
//! This file moves the window (page-in, eviction, the scan beyond it, browsing it);
//! `limits.rs` has the memory limits and their accounting, `spool.rs` the temporary store's
//! side of spilling, and `tests.rs` the unit tests.

use std::sync::Arc;

use parking_lot::Mutex;
use rustc_hash::FxHashSet;
use store::{Message, MessageId, PageKey, QueueKey, StoreError, StoredMessage};

use super::{MessageMap, ProducerAudit, Queue, QueueCommand, QueuedMessage, Selector, TempStore};
use crate::core::types::off_the_runtime;

mod limits;
mod spool;

pub(super) use limits::count_memory;
pub use limits::MemoryLimits;
pub(crate) use limits::SharedBody;
use spool::Spool;

/// Messages read from the store per page.
pub(super) const PAGE: usize = 512;
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
/// Of [`ENTRY_OVERHEAD`], what each queue's holding of a message costs (its `QueuedMessage`
/// and map entry, an estimate); the rest ([`MESSAGE_OVERHEAD`]) is the message's own, which
/// the broker's usage counts once however many queues hold it (see `SharedBody`).
pub(crate) const HOLDER_OVERHEAD: usize = 128;
/// Of [`ENTRY_OVERHEAD`], what the message itself costs beyond its `memory_size`.
pub(crate) const MESSAGE_OVERHEAD: usize = ENTRY_OVERHEAD - HOLDER_OVERHEAD;
/// The most messages a browse returns, as ActiveMQ's `maxBrowsePageSize`.
pub(crate) const MAX_BROWSE: usize = 400;
/// Pages of stored messages a browse reads at most beyond the window.
const BROWSE_PAGES: usize = 64;

/// Persistent messages on their way into a stored queue: submitted (or about to be) to the
/// store, their `Enqueue` not yet taken by the queue task. See the module documentation.
#[derive(Debug, Default)]
pub(crate) struct Arriving(pub(super) Mutex<FxHashSet<MessageId>>);

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
    /// Of `pinned`, the shared bodies (see `SharedBody`) that the broker's counts once.
    shared_pinned: usize,
    /// Of what the queue holds, the bytes of shared bodies that the broker's usage counts
    /// once ([`QueuedMessage::shared_size`]).
    shared_held: usize,
    /// This queue's in-flight bytes as counted in the broker's.
    in_flight_accounted: usize,
    /// A running average of the size of this queue's messages as the limits count them
    /// ([`held_size`]; 0 before the first): what one more delivery is expected to cost, and
    /// how many messages a page may hold.
    typical: usize,
    /// Delivery counts of messages given back or evicted while beyond the window (so out of
    /// memory), restored when they are paged in again.
    pub(super) returned: MessageMap<u32>,
    /// Whether the flow-control gate was closed when the task last looked (a sender may close
    /// it between two looks: see `QueueHandle::send`).
    pub(super) gate_blocked: bool,
    /// A [`QueueCommand::Resume`] is on its way to this queue.
    pub(super) resume_sent: bool,
    /// Where this queue's messages that are not in the store go beyond the window; `None`:
    /// they stay in memory (a broker without a temporary store, or a subscriber that discards
    /// by its pending message limit).
    spool: Option<Spool>,
}

/// Where a message after the window is kept.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub(super) enum Source {
    /// The broker's store (a persistent message of a stored queue).
    Store,
    /// The temporary store (a message spilled there: non-persistent, or of a queue that is
    /// not stored).
    Spool,
}

/// What [`Queue::read_beyond`] read after a key, from both sources merged in page order.
pub(super) struct Beyond {
    pub(super) messages: Vec<(StoredMessage, Source)>,
    /// Every message of either source up to this key is in `messages`, later ones may exist;
    /// `None`: nothing is kept after the last of `messages`.
    pub(super) end: Option<PageKey>,
}

impl Paging {
    pub(super) fn new(limits: MemoryLimits, temp: Option<Arc<TempStore>>, key: &QueueKey) -> Self {
        Paging {
            window: Window::Complete,
            limits,
            accounted: 0,
            pinned: 0,
            pinned_accounted: 0,
            shared_pinned: 0,
            shared_held: 0,
            in_flight_accounted: 0,
            typical: 0,
            returned: MessageMap::default(),
            gate_blocked: false,
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
    pub(super) fn note_size(&mut self, memory_size: usize) {
        let size = memory_size + ENTRY_OVERHEAD;
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

    /// Counts `queued` in (`held`) or out of the bytes that cannot page out, if it is one
    /// (`stored`: the queue keeps persistent messages in the store).
    pub(super) fn pin(&mut self, stored: bool, queued: &QueuedMessage, held: bool) {
        if stored && queued.message.is_persistent() {
            return;
        }
        let bytes = queued.held_size();
        // A shared non-persistent body is pinned once for all its holders (`SharedBody`).
        let shared = match queued.message.is_persistent() {
            true => 0,
            false => queued.shared_size(),
        };
        if held {
            self.pinned += bytes;
            self.shared_pinned += shared;
        } else {
            self.pinned = self.pinned.saturating_sub(bytes);
            self.shared_pinned = self.shared_pinned.saturating_sub(shared);
        }
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

    /// True if this message is in memory already or will come through an `Enqueue`.
    pub(super) fn is_held(&self, message: &Message, arriving: &FxHashSet<MessageId>) -> bool {
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
    pub(super) fn read_beyond(
        &self,
        after: Option<PageKey>,
        limit: usize,
    ) -> Result<Beyond, StoreError> {
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
            self.count_memory(&queued, true);
            self.paging.pin(self.handle.stored, &queued, true);
            self.paging.note_size(queued.size);
            self.make_ready(queued);
        }
        Ok(())
    }

    /// A message after the window leaves memory: it is in the store (or was just spilled to
    /// the temporary store).
    pub(super) fn leave_in_store(&mut self, queued: QueuedMessage) {
        let key = PageKey::of(&queued.message);
        self.count_memory(&queued, false);
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
                    && self.broker_usage() < self.paging.limits.broker.limit
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
                self.count_memory(&queued, true);
                self.paging.pin(self.handle.stored, &queued, true);
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
}

#[cfg(test)]
mod tests;
