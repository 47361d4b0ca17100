//! The bytes a connection has handed its writer task and that are not written yet.
//!
//! The writer's channel is unbounded (the connection must never wait on its own writer while
//! it owns state), so a client that stops reading its socket would let the broker queue
//! encoded deliveries without bound: one encoded copy beside each in-flight message. The
//! connection counts the delivery bytes it queues here and stops taking deliveries from its
//! queues while more than [`MAX_OUTBOUND_BYTES`] wait; the deliveries then wait unencoded
//! in the connection's delivery channel, where they are the queues' in-flight messages that
//! the memory limits count (`core/queue/paging.rs`). Nothing blocks: the connection simply
//! does not poll its deliveries until the writer has written some.

use std::sync::atomic::{AtomicUsize, Ordering};
use std::sync::Arc;

use tokio::sync::Notify;

/// Encoded delivery bytes a connection lets wait for its writer. A few large messages, or
/// hundreds of small ones: enough to keep a reading client's socket busy between two writes.
pub(crate) const MAX_OUTBOUND_BYTES: usize = 2 << 20;

/// Shared by a connection (which counts what it queues) and its writer (which counts what it
/// wrote). Cheap to clone.
#[derive(Clone, Debug, Default)]
pub(crate) struct Outbound(Arc<Shared>);

#[derive(Debug, Default)]
struct Shared {
    queued: AtomicUsize,
    written: Notify,
}

impl Outbound {
    /// `bytes` more were handed to the writer.
    pub(crate) fn queued(&self, bytes: usize) {
        self.0.queued.fetch_add(bytes, Ordering::AcqRel);
    }

    /// The writer wrote `bytes` of what was counted.
    pub(crate) fn written(&self, bytes: usize) {
        if bytes == 0 {
            return;
        }
        // Saturating: a write the connection did not count (a miscount) must never wrap the
        // counter, which would stop the connection's deliveries for good.
        let _ = self.0.queued.fetch_update(Ordering::AcqRel, Ordering::Acquire, |queued| {
            Some(queued.saturating_sub(bytes))
        });
        // A stored permit if the connection is not waiting yet, so the wake-up is not lost.
        self.0.written.notify_one();
    }

    /// True while the connection may queue another delivery (one always goes, however large).
    pub(crate) fn has_room(&self) -> bool {
        self.0.queued.load(Ordering::Acquire) < MAX_OUTBOUND_BYTES
    }

    /// Resolves once there is room (at once if there is).
    pub(crate) async fn room(&self) {
        while !self.has_room() {
            self.0.written.notified().await;
        }
    }
}
