//! The spool: a queue's messages that are not in the store (non-persistent ones, or all of a
//! queue that is not stored) spilled to the temporary store beyond the window, and read back
//! from it. Apart from `paging.rs` because the window treats both stores alike; only here is
//! the temporary store's side written.

use std::sync::Arc;

use futures_util::FutureExt;
use store::{Message, Operation, PageKey, QueueKey, UnitOfWork};

use super::{held_size, Queue, QueuedMessage};
use crate::core::temp_store::TempStore;

/// A queue's spilled messages (not in the store: non-persistent ones, or all of a queue that
/// is not stored) in the temporary store: its own queue of references there (see
/// `temp_store.rs`).
#[derive(Debug)]
pub(super) struct Spool {
    pub(super) temp: Arc<TempStore>,
    pub(super) key: QueueKey,
    /// Messages of this queue in the temporary store.
    pub(super) count: usize,
    /// Their bytes as flow control counts them (`memory_size` plus [`ENTRY_OVERHEAD`] each):
    /// they still count against the destination's limit when producer flow control is on, as
    /// when they were in memory, so that spilling changes where they wait, not who waits.
    pub(super) bytes: usize,
    /// The last spill was refused (the temporary store is full or failed): logged once.
    pub(super) refusing: bool,
}

impl Queue {
    /// Spills a non-persistent message after the window to the temporary store; gives it
    /// back when there is none or it refuses (full, failed): it then waits in memory.
    pub(in crate::core::queue) fn spool(
        &mut self,
        queued: QueuedMessage,
    ) -> Result<(), QueuedMessage> {
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
        spool.bytes += queued.held_size();
        self.paging.pin(self.handle.stored, &queued, false);
        self.leave_in_store(queued);
        Ok(())
    }

    /// Takes messages read back into memory out of the temporary store.
    pub(in crate::core::queue) fn unspool(&mut self, messages: &[Arc<Message>]) {
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
    pub(in crate::core::queue) fn drop_spool(&mut self) {
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
}
