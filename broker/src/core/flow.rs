//! Producer flow control: a send waits while its destination, the broker or the store has no
//! room, and resumes once there is (ActiveMQ's producer flow control with `systemUsage`).
//!
//! # What has no room
//!
//! - **A destination** whose messages that cannot page out to the store (non-persistent ones,
//!   and every message of a queue that is not stored: non-durable topic subscribers,
//!   temporary queues), in memory or spilled to the temporary store, exceed its memory limit.
//!   Persistent messages of a stored queue never fill it: they page out (`queue/paging.rs`).
//!   Spilled messages still count, so that a destination with producer flow control holds
//!   its producers as before and only sends that cannot be paced spill; without it they
//!   spill freely. The queue task owns the count and sets its
//!   [`FlowGate`] after every command; it opens again at [`RESUME_PERCENT`] of the limit (like
//!   ActiveMQ's `cursorMemoryHighWaterMark`), so that a blocked producer resumes with room for
//!   more than one message.
//! - **The broker**: the same count over every queue against `[broker] memory_limit`.
//! - **The store**: its backlog of submitted, unwritten units (`store::Backlog`), for
//!   persistent messages, so that producers faster than the disk are paced; and its size
//!   against its limit (`[store] max_size`, ActiveMQ's `storeUsage`): a watch
//!   ([`Core::start_store_watch`]) closes a gate for persistent sends when the store is within
//!   [`STORE_HEADROOM`] of its limit, and opens it once acks and compaction have freed twice
//!   that, so that a full store holds producers (or refuses them, per `send_fail_if_no_space`)
//!   instead of failing each send.
//! - **The temporary store** (`[broker] temp_limit`, ActiveMQ's `tempUsage`), for
//!   non-persistent messages, which stored queues spill there beyond their memory limits
//!   (`core/temp_store.rs`): the same watch and headroom against its size, and its backlog of
//!   unwritten units, exactly as the store's for persistent messages (ActiveMQ's `checkUsage`
//!   waits on `tempUsage` for every non-persistent send).
//!
//! # Who waits
//!
//! The send path asks [`Core::blocker`] before [`Core::send`]: a few atomics, and the routing
//! lock only while some destination is blocked. Nothing in the core waits: the adapters hold a
//! blocked send in their connection (a per-producer FIFO, [`HeldSends`]) and await
//! [`Core::wait_for_room`] beside reading, so a connection keeps reading (acks, pulls, other
//! producers' sends) while one of its sends waits, and a consumer on the same connection can
//! always drain the destination its producer waits for.

use std::sync::atomic::{AtomicBool, AtomicUsize, Ordering};
use std::sync::Arc;
use std::time::Duration;

use store::Destination;
use tokio::sync::Notify;

/// A blocked gate opens again once usage falls to this percentage of the limit.
pub const RESUME_PERCENT: usize = 70;

/// How close to its limit the store may come before persistent sends wait: an eighth of the
/// limit, at most [`STORE_HEADROOM`], so that what producers send between two looks of the
/// watch ([`STORE_WATCH_PERIOD`]) still fits. A send that still finds the store full is
/// refused by the store with a clear error.
pub fn store_headroom(limit: u64) -> u64 {
    (limit / 8).min(STORE_HEADROOM)
}

/// The largest headroom kept below the store's limit: what a fast producer writes in
/// [`STORE_WATCH_PERIOD`] with room to spare.
pub const STORE_HEADROOM: u64 = 64 << 20;

/// How often the store's size is checked against its limit (a read lock on the store's
/// state: negligible at this rate, unlike a look on every send).
pub const STORE_WATCH_PERIOD: Duration = Duration::from_millis(10);

/// What a send over a limit does (ActiveMQ's `systemUsage` attributes of the same names).
#[derive(Debug, Clone, Copy, Default, PartialEq, Eq)]
pub struct FlowSettings {
    /// Refuse a send that finds no room instead of waiting (`sendFailIfNoSpace`).
    pub fail_if_no_space: bool,
    /// Wait at most this long, then refuse (`sendFailIfNoSpaceAfterTimeout`); `None`: wait
    /// until there is room (or, with `fail_if_no_space`, refuse at once).
    pub fail_after: Option<Duration>,
}

/// Whether a destination (or the broker) takes more messages. Set by the owner of the usage
/// (a queue task, for its queue); read by the send path.
#[derive(Debug, Default)]
pub struct FlowGate {
    blocked: AtomicBool,
    opened: Notify,
}

impl FlowGate {
    pub(crate) fn is_blocked(&self) -> bool {
        self.blocked.load(Ordering::Acquire)
    }

    /// Blocks the gate when `used` exceeds `limit`, opens it when `used` has fallen to
    /// [`RESUME_PERCENT`] of it; `blocked_count` counts the blocked gates (so that the send
    /// path looks for them only when there are some). Returns true if the gate changed.
    pub(crate) fn update(&self, used: usize, limit: usize, blocked_count: &AtomicUsize) -> bool {
        if self.is_blocked() {
            if used <= limit / 100 * RESUME_PERCENT {
                self.open(blocked_count);
                return true;
            }
        } else if used > limit && !self.blocked.swap(true, Ordering::AcqRel) {
            blocked_count.fetch_add(1, Ordering::AcqRel);
            return true;
        }
        false
    }

    /// Opens the gate (its owner is gone, or usage fell) and wakes the senders waiting on it.
    pub(crate) fn open(&self, blocked_count: &AtomicUsize) {
        if self.blocked.swap(false, Ordering::AcqRel) {
            blocked_count.fetch_sub(1, Ordering::AcqRel);
            self.opened.notify_waiters();
        }
    }

    /// Blocks or opens the gate as `blocked` says (for owners with their own hysteresis).
    pub(crate) fn set(&self, blocked: bool, blocked_count: &AtomicUsize) -> bool {
        if blocked {
            let changed = !self.blocked.swap(true, Ordering::AcqRel);
            if changed {
                blocked_count.fetch_add(1, Ordering::AcqRel);
            }
            changed
        } else {
            let changed = self.is_blocked();
            self.open(blocked_count);
            changed
        }
    }

    /// Resolves once the gate is open.
    pub(crate) async fn wait_open(&self) {
        loop {
            let notified = self.opened.notified();
            tokio::pin!(notified);
            notified.as_mut().enable();
            if !self.is_blocked() {
                return;
            }
            notified.await;
        }
    }
}

/// What a send waits for.
pub enum Blocker {
    /// The store's backlog of unwritten units is full.
    Store,
    /// The store is at its size limit.
    StoreFull,
    /// The temporary store's backlog of unwritten units is full.
    Temp,
    /// The temporary store is at its size limit.
    TempFull,
    /// The broker's memory limit is reached.
    Broker,
    /// This destination's memory limit is reached.
    Destination(Destination, Arc<FlowGate>),
}

/// How many sends a connection holds at most before it stops holding (see
/// [`HeldSends::is_full`]).
pub const MAX_HELD_SENDS: usize = 1024;
/// How many bytes of messages a connection holds at most.
pub const MAX_HELD_BYTES: usize = 16 << 20;
