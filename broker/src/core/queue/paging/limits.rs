//! The memory limits and their accounting: what a queue holds, as the limits count it, what
//! it may still take in flight, and how its holding is counted in the broker's usage and in
//! the flow control gates. Apart from `paging.rs` because it is the arithmetic of the limits,
//! which the window's moves (page-in, eviction) only consult.

use std::sync::atomic::{AtomicUsize, Ordering};
use std::sync::Arc;

use store::Message;

use super::{Queue, QueuedMessage, ENTRY_OVERHEAD, MESSAGE_OVERHEAD};
use crate::core::flow::FlowGate;

/// The memory limits a queue keeps to: its own and the broker's, which every queue shares.
/// Cheap to clone.
#[derive(Clone, Debug)]
pub struct MemoryLimits {
    pub(super) destination: usize,
    pub(super) broker: Arc<BrokerMemory>,
}

#[derive(Debug)]
pub(super) struct BrokerMemory {
    /// Bytes held by every queue, as each last counted them.
    pub(super) used: AtomicUsize,
    pub(super) limit: usize,
    /// The part of `used` that cannot page out (see [`Paging::pinned`]): what flow control
    /// holds to the limit.
    pub(super) pinned: AtomicUsize,
    /// Closed while `pinned` is over the limit.
    pub(super) gate: FlowGate,
    /// Queues whose own gate is closed (the send path looks for them only when there are).
    pub(super) blocked_queues: Arc<AtomicUsize>,
    /// Counts the broker's own gate (for [`FlowGate::update`]).
    pub(super) broker_blocked: AtomicUsize,
    /// The part of `used` that is in flight (delivered, not acknowledged), as each queue last
    /// counted it: it cannot be evicted, so dispatch keeps it to the broker's limit.
    pub(super) in_flight: AtomicUsize,
    /// The part of `used` that is the bodies of messages held by several queues at once,
    /// counted once each ([`SharedBody`]).
    pub(super) shared: AtomicUsize,
}

/// The body of a message that several queues hold at once (a topic's subscriptions): one
/// `Arc<Message>`, so its bytes (with [`MESSAGE_OVERHEAD`]) count once in the broker's usage
/// and, if it is non-persistent, in what the broker's flow control holds to its limit, from
/// its routing until the last queue lets it go (this is dropped); each queue adds only its
/// own holding of it (`HOLDER_OVERHEAD`) to the broker's. Counted in each, a message to 50
/// subscribers took 50 times its memory from the broker's limit, and their backlogs spilled
/// to the temporary store long before the broker held that much (ActiveMQ too counts a topic
/// message once for all its subscriptions). Each queue's own figures and limit (its
/// destination limit, its consumers' in-flight shares, its statistics) still count the
/// message whole, so a subscriber that stops reading is held to them as before; the broker's
/// in-flight figure too counts it in each queue that has it in flight.
#[derive(Debug)]
pub(crate) struct SharedBody {
    bytes: usize,
    /// Non-persistent: it counts in the broker's `pinned` too (no queue can page it out).
    pinned: bool,
    broker: Arc<BrokerMemory>,
}

impl SharedBody {
    fn gate_update(&self) {
        let broker = &self.broker;
        let pinned = broker.pinned.load(Ordering::Relaxed);
        broker.gate.update(pinned, broker.limit, &broker.broker_blocked);
    }
}

impl Drop for SharedBody {
    fn drop(&mut self) {
        let broker = &self.broker;
        broker.used.fetch_sub(self.bytes, Ordering::Relaxed);
        broker.shared.fetch_sub(self.bytes, Ordering::Relaxed);
        if self.pinned {
            broker.pinned.fetch_sub(self.bytes, Ordering::Relaxed);
            self.gate_update();
        }
    }
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
                blocked_queues: Arc::new(AtomicUsize::new(0)),
                broker_blocked: AtomicUsize::new(0),
                in_flight: AtomicUsize::new(0),
                shared: AtomicUsize::new(0),
            }),
        }
    }

    /// Counts `message`'s body once in the broker's usage, for as long as the body returned
    /// lives: for a message routed to several queues at once, each of which holds a clone.
    pub(crate) fn share(&self, message: &Message) -> Arc<SharedBody> {
        let body = SharedBody {
            bytes: message.memory_size() + MESSAGE_OVERHEAD,
            pinned: !message.is_persistent(),
            broker: self.broker.clone(),
        };
        let broker = &self.broker;
        broker.used.fetch_add(body.bytes, Ordering::Relaxed);
        broker.shared.fetch_add(body.bytes, Ordering::Relaxed);
        if body.pinned {
            broker.pinned.fetch_add(body.bytes, Ordering::Relaxed);
            body.gate_update();
        }
        Arc::new(body)
    }

    /// Bytes of message bodies that several queues hold, each counted once: the part of
    /// [`MemoryLimits::broker_used`] that no single queue's share of it holds.
    pub fn broker_shared(&self) -> usize {
        self.broker.shared.load(Ordering::Relaxed)
    }

    /// The broker's count of closed queue gates, for a queue's handle.
    pub(in crate::core::queue) fn blocked_queues_counter(&self) -> &AtomicUsize {
        &self.broker.blocked_queues
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

/// [`Queue::count_memory`] on the two fields it changes, for a caller that holds a consumer
/// of the queue borrowed.
pub(in crate::core::queue) fn count_memory(
    memory_bytes: &mut usize,
    paging: &mut super::Paging,
    queued: &QueuedMessage,
    held: bool,
) {
    let shared = queued.shared_size();
    if held {
        *memory_bytes += queued.size;
        paging.shared_held += shared;
    } else {
        *memory_bytes = memory_bytes.saturating_sub(queued.size);
        paging.shared_held = paging.shared_held.saturating_sub(shared);
    }
}

impl Default for MemoryLimits {
    /// The configuration's defaults: 64 MiB per destination, 1 GiB for the broker.
    fn default() -> Self {
        MemoryLimits::new(64 << 20, 1 << 30)
    }
}

impl Queue {
    /// Messages held in memory: ready, in flight, awaiting a transaction's end.
    pub(in crate::core::queue) fn held_count(&self) -> usize {
        self.ready.len()
            + self.consumers.iter().map(|c| c.in_flight.len()).sum::<usize>()
            + self.awaiting_transaction.len()
    }

    /// What the queue holds, as the limits count it.
    pub(in crate::core::queue) fn held_bytes(&self) -> usize {
        self.memory_bytes + self.held_count() * ENTRY_OVERHEAD
    }

    /// Counts `queued` in (`held`) or out of the bytes the queue holds.
    pub(in crate::core::queue) fn count_memory(&mut self, queued: &QueuedMessage, held: bool) {
        count_memory(&mut self.memory_bytes, &mut self.paging, queued, held);
    }

    /// What the queue holds as the broker's usage counts it: [`Queue::held_bytes`] but the
    /// bodies of messages other queues hold too, which the broker's counts once.
    fn broker_held(&self) -> usize {
        self.held_bytes().saturating_sub(self.paging.shared_held)
    }

    /// Bytes of the messages this queue's consumers hold in flight.
    pub(in crate::core::queue) fn in_flight_bytes(&self) -> usize {
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
    pub(in crate::core::queue) fn may_take(&self, index: usize, queue: usize) -> bool {
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

    /// How far past the destination limit messages that cannot page out to the store may go
    /// before they spill, while producer flow control paces the destination: the send that
    /// closes the gate, and the sends already on their way or held when it reopens, arrive
    /// past the limit. Spilling them would put the queue in spill mode (each later message
    /// through the temporary store and back, which doubled the broker's CPU per message in
    /// S1) for as long as its producer keeps up with the gate. At most an eighth of the
    /// limit, and only as much as such messages hold.
    fn pacing_allowance(&self) -> usize {
        match self.policy.producer_flow_control {
            true => self.paging.pinned.min(self.paging.limits.destination / 8),
            false => 0,
        }
    }

    /// The broker's usage with this queue's current holding in it.
    pub(in crate::core::queue) fn broker_usage(&self) -> usize {
        self.paging.limits.broker_used().saturating_sub(self.paging.accounted) + self.broker_held()
    }

    pub(in crate::core::queue) fn over_limits(&self) -> bool {
        let held = self.held_bytes();
        held > self.paging.limits.destination.saturating_add(self.pacing_allowance())
            || self.broker_usage() > self.paging.limits.broker.limit
            || (self.policy.lazy_dispatch && self.ready.len() > self.free_credit())
    }

    /// How many more messages the consumers could take now: what a lazy-dispatch queue
    /// keeps in memory (its policy's `lazy_dispatch`).
    pub(in crate::core::queue) fn free_credit(&self) -> usize {
        let free = |c: &super::super::Consumer| match c.spec.prefetch {
            0 => usize::try_from(c.pulls).unwrap_or(usize::MAX),
            prefetch => (prefetch as usize).saturating_sub(c.in_flight.len() - c.released),
        };
        self.consumers.iter().map(free).fold(0, usize::saturating_add)
    }

    /// Brings the broker's usage up to date with this queue's, and the flow control gates
    /// (this queue's and the broker's) with both.
    pub(in crate::core::queue) fn account(&mut self) {
        let held = self.broker_held();
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
        // The broker's leaves out the shared bodies, which it counts once (`SharedBody`).
        let broker_pinned = pinned.saturating_sub(self.paging.shared_pinned);
        let accounted = self.paging.pinned_accounted;
        let total = if broker_pinned >= accounted {
            broker.pinned.fetch_add(broker_pinned - accounted, Ordering::Relaxed)
                + (broker_pinned - accounted)
        } else {
            broker
                .pinned
                .fetch_sub(accounted - broker_pinned, Ordering::Relaxed)
                .saturating_sub(accounted - broker_pinned)
        };
        self.paging.pinned_accounted = broker_pinned;
        let spooled = self.paging.spool.as_ref().map_or(0, |spool| spool.bytes);
        let settled = pinned.saturating_add(spooled);
        let destination_usage = settled.saturating_add(inbox);
        // Without producer flow control the destination's own limit never holds a send (the
        // broker's still does).
        let limit = match self.policy.producer_flow_control {
            true => self.paging.limits.destination,
            false => usize::MAX,
        };
        // For the senders, which close the gate themselves when what they add to the inbox
        // takes the queue past its limit (`QueueHandle::send`).
        self.handle.settled.store(settled, Ordering::Relaxed);
        self.handle.flow_limit.store(limit, Ordering::Relaxed);
        self.handle.gate.update(destination_usage, limit, &broker.blocked_queues);
        // A sender may have closed the gate first: what changed is what the task saw last.
        let blocked = self.handle.gate.is_blocked();
        if blocked != self.paging.gate_blocked {
            self.paging.gate_blocked = blocked;
            tracing::debug!(queue = ?self.handle.key, blocked, pinned, "producer flow control");
            self.gate_changed();
        }
        broker.gate.update(total, broker.limit, &broker.broker_blocked);
    }

    /// The queue stops: its memory no longer counts, and its producers no longer wait.
    pub(in crate::core::queue) fn release_memory(&mut self) {
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
        // No sender may close the gate of a queue that is gone.
        self.handle.flow_limit.store(usize::MAX, Ordering::Relaxed);
        self.handle.gate.open(&broker.blocked_queues);
        broker.gate.update(total, broker.limit, &broker.broker_blocked);
    }
}
