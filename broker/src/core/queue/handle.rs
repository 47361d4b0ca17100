//! The handle every part of the broker reaches a queue's task through, and the state its
//! handles share with the task (what is on its way to the queue, its flow-control gate).

use std::sync::atomic::Ordering;
use std::sync::Arc;

use store::{Message, QueueKey};
use tokio::sync::{mpsc, oneshot};

use super::{Arriving, MemoryLimits, QueueCommand, QueueStats};
use crate::core::flow::FlowGate;

/// A cheap, cloneable handle to a queue's task: one pointer, so that a delivery (which
/// carries one) stays small in the channels it waits in, and a clone is one count.
#[derive(Clone, Debug)]
pub struct QueueHandle(Arc<QueueShared>);

/// What every handle of a queue shares with the others and with the queue's task.
#[derive(Debug)]
pub struct QueueShared {
    pub(crate) key: Arc<QueueKey>,
    /// Whether persistent messages in this queue are kept in the store. Queue destinations and
    /// durable subscriptions are; non-durable topic subscribers are not.
    pub(crate) stored: bool,
    /// Persistent messages submitted to the store for this queue whose `Enqueue` the task has
    /// not taken yet: paging skips them (see `paging.rs`). Only [`Arrival`]s change it.
    pub(super) arriving: Arriving,
    /// Closed while this queue holds more than its memory limit of messages that cannot page
    /// out: producers wait (see `flow.rs`).
    pub(crate) gate: Arc<FlowGate>,
    /// Bytes of messages sent to the task (`Enqueue`) that it has not taken yet. A producer
    /// faster than the task fills its channel; counting these in the flow control gate keeps
    /// that backlog bounded like the messages the queue holds.
    pub(super) inbox: std::sync::atomic::AtomicUsize,
    /// What the gate counts but the inbox, as the task last counted it, and the limit it
    /// holds that to (`usize::MAX` without producer flow control): a send whose messages take
    /// the sum past the limit closes the gate at once. Left to the task alone, the gate
    /// closed only once the task had taken the messages, and a fast producer's connection
    /// got thousands of sends past the limit meanwhile (they spilled to the temporary store).
    pub(super) settled: std::sync::atomic::AtomicUsize,
    pub(super) flow_limit: std::sync::atomic::AtomicUsize,
    /// The queue's memory limits: the broker's usage, where a message routed here and to
    /// other queues at once counts its body once ([`MemoryLimits::share`]), and its count of
    /// closed queue gates (see [`FlowGate::update`]).
    pub(super) memory: MemoryLimits,
    /// Commands sent to the task: compared with those it has taken, it tells the core that
    /// nothing reached an idle queue since it said so (see [`QueueCommand::Retire`]).
    pub(super) sent: std::sync::atomic::AtomicU64,
    pub(super) tx: mpsc::UnboundedSender<QueueCommand>,
}

impl std::ops::Deref for QueueHandle {
    type Target = QueueShared;

    fn deref(&self) -> &QueueShared {
        &self.0
    }
}

/// What messages on their way to a queue task count in its inbox: what they will count once
/// the task holds them (see `Paging::pin`).
pub(super) fn inbox_bytes(messages: &[Arc<Message>]) -> usize {
    messages.iter().map(|m| m.memory_size() + super::paging::ENTRY_OVERHEAD).sum()
}

impl QueueHandle {
    pub(super) fn new(
        key: QueueKey,
        stored: bool,
        tx: mpsc::UnboundedSender<QueueCommand>,
        memory: MemoryLimits,
    ) -> Self {
        QueueHandle(Arc::new(QueueShared {
            key: Arc::new(key),
            stored,
            arriving: Arriving::default(),
            gate: Arc::default(),
            inbox: Default::default(),
            settled: Default::default(),
            flow_limit: std::sync::atomic::AtomicUsize::new(usize::MAX),
            memory,
            sent: Default::default(),
            tx,
        }))
    }

    pub(crate) fn send(&self, command: QueueCommand) -> bool {
        if let QueueCommand::Enqueue(messages) | QueueCommand::EnqueueShared { messages, .. } =
            &command
        {
            let bytes = inbox_bytes(messages);
            let inbox = self.inbox.fetch_add(bytes, Ordering::Relaxed) + bytes;
            let used = self.settled.load(Ordering::Relaxed).saturating_add(inbox);
            let limit = self.flow_limit.load(Ordering::Relaxed);
            if used > limit {
                self.gate.update(used, limit, self.memory.blocked_queues_counter());
            }
        }
        self.sent.fetch_add(1, std::sync::atomic::Ordering::Relaxed);
        self.tx.send(command).is_ok()
    }

    /// True if the task has taken every command sent to it when it had taken `taken`.
    pub(crate) fn nothing_sent_since(&self, taken: u64) -> bool {
        self.sent.load(std::sync::atomic::Ordering::Relaxed) == taken
    }

    pub fn name(&self) -> &str {
        &self.key.destination.name
    }

    pub fn key(&self) -> &QueueKey {
        &self.key
    }

    /// True if no message is on its way to the task: no `Enqueue` it has not taken, no
    /// announced message still to come (a transaction's or a scheduled fire's).
    pub(crate) fn is_quiet(&self) -> bool {
        self.inbox.load(std::sync::atomic::Ordering::Relaxed) == 0 && self.arriving.is_empty()
    }

    /// True if both handles lead to the same task.
    pub fn same_queue(&self, other: &QueueHandle) -> bool {
        self.tx.same_channel(&other.tx)
    }

    /// The queue's counters, or `None` if the queue has stopped.
    pub async fn stats(&self) -> Option<QueueStats> {
        let (tx, rx) = oneshot::channel();
        if !self.send(QueueCommand::Stats(tx)) {
            return None;
        }
        rx.await.ok()
    }
}
