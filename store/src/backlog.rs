//! [`Backlog`]: the bytes a store has accepted but not yet written, bounded.
//!
//! An engine that queues submitted units for a background writer (the journal) holds every
//! unit's records in memory until they are written. A producer that sends faster than the
//! disk writes would grow that queue without bound, so the engine counts the bytes queued in
//! a `Backlog` and the broker's send path waits while it is full (see
//! [`MessageStore::backlog`](crate::MessageStore::backlog)). Submitting never waits: the
//! bound is kept by the callers that check [`Backlog::is_full`] first, which keeps `submit`
//! usable from any thread and from a queue task that must never wait.

use std::sync::atomic::{AtomicBool, AtomicU64, Ordering};

use tokio::sync::Notify;

/// Bytes submitted and not yet written, with a limit and a signal for those waiting for room.
#[derive(Debug)]
pub struct Backlog {
    bytes: AtomicU64,
    limit: u64,
    /// Set when the bytes reach the limit; cleared once they fall to half of it, so that a
    /// waiting producer resumes with room for a batch rather than for one unit.
    full: AtomicBool,
    room: Notify,
}

impl Backlog {
    /// A backlog of at most `limit` bytes (0: no limit).
    pub fn new(limit: u64) -> Self {
        Backlog {
            bytes: AtomicU64::new(0),
            limit,
            full: AtomicBool::new(false),
            room: Notify::new(),
        }
    }

    /// Counts `bytes` more submitted.
    pub fn add(&self, bytes: u64) {
        let now = self.bytes.fetch_add(bytes, Ordering::Relaxed) + bytes;
        if self.limit > 0 && now >= self.limit {
            self.full.store(true, Ordering::Release);
        }
    }

    /// Counts `bytes` written (or failed): they no longer wait.
    pub fn remove(&self, bytes: u64) {
        let now = self.bytes.fetch_sub(bytes, Ordering::Relaxed).saturating_sub(bytes);
        if now <= self.limit / 2 && self.full.swap(false, Ordering::AcqRel) {
            self.room.notify_waiters();
        }
    }

    /// Bytes submitted and not yet written.
    pub fn bytes(&self) -> u64 {
        self.bytes.load(Ordering::Relaxed)
    }

    pub fn limit(&self) -> u64 {
        self.limit
    }

    /// True while the backlog is over its limit (and has not yet fallen to half of it).
    pub fn is_full(&self) -> bool {
        self.full.load(Ordering::Acquire)
    }

    /// Resolves once the backlog has room (at once if it has).
    pub async fn room(&self) {
        loop {
            let notified = self.room.notified();
            tokio::pin!(notified);
            // Registered before the check, so that a `remove` between the check and the
            // await is not missed.
            notified.as_mut().enable();
            if !self.is_full() {
                return;
            }
            notified.await;
        }
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn full_at_the_limit_and_room_again_at_half() {
        let backlog = Backlog::new(100);
        backlog.add(60);
        assert!(!backlog.is_full());
        backlog.add(40);
        assert!(backlog.is_full());
        backlog.remove(40);
        assert!(backlog.is_full(), "60 bytes is above half the limit");
        backlog.remove(10);
        assert!(!backlog.is_full());
        assert_eq!(backlog.bytes(), 50);
    }

    #[test]
    fn no_limit_is_never_full() {
        let backlog = Backlog::new(0);
        backlog.add(u64::from(u32::MAX));
        assert!(!backlog.is_full());
    }
}
