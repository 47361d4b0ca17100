//! What queue tasks tell the rest of the core: typed events on one unbounded channel, which
//! the core's observer task turns into advisories, dead-letter moves, consumer aborts and the
//! removal of idle queues (`engine/observer.rs`).
//!
//! Why events and not call-backs: a queue task owns its state and must never wait on anyone,
//! and it must not know the routing table. It reports what happened and goes on; whoever
//! cares (advisories, dead letters, garbage collection) observes. The data flows one way,
//! from the queues up, and no queue holds a handle back into the registry.

use std::sync::Arc;

use store::{Destination, Message, QueueKey};
use tokio::sync::mpsc;

use super::dead_letter::DeadLetter;
use super::slow::ConsumerNotice;
use super::types::ConsumerId;

/// Something a queue task reports.
#[derive(Debug)]
pub(crate) enum QueueEvent {
    /// `advisory_for_delivery`: `message` went to `consumer`; `destination` is the queue, or
    /// for a topic subscription the topic it was published to.
    Delivered { destination: Destination, message: Arc<Message>, consumer: ConsumerId },
    /// `advisory_for_consumed`: `consumer` acknowledged `message`.
    Consumed { destination: Destination, message: Arc<Message>, consumer: ConsumerId },
    /// `advisory_for_discarded`: the pending message limit dropped `message`, the queue's
    /// `discarded`th so far.
    Discarded {
        destination: Destination,
        message: Arc<Message>,
        consumer: Option<ConsumerId>,
        discarded: u64,
    },
    /// `advisory_for_slow_consumers`: `consumer` of `destination` has just become slow.
    Slow { consumer: ConsumerId, destination: Destination },
    /// The slow consumer strategy gave up on a consumer: its connection is to close it.
    Abort(ConsumerNotice),
    /// `advisory_when_full`: the destination's memory gate closed.
    GateFull { destination: Destination },
    /// `send_advisory_if_no_consumers`: a non-persistent `message` arrived at a queue without
    /// consumers.
    NoConsumer { destination: Destination, message: Arc<Message> },
    /// The queue gave a message up (expired, poisoned, redelivered too often).
    DeadLettered(DeadLetter),
    /// A queue created while the broker runs read these messages, carrying producers' message
    /// ids, from the store: the audit records them, as it records what is recovered at start.
    Loaded { messages: Vec<Arc<Message>> },
    /// The queue has been idle for the timeout of a `Retire` it was sent, having taken
    /// `taken` commands in all: it may be removed if no command was sent to it since.
    Idle { queue: Arc<QueueKey>, taken: u64 },
}

/// Where queue tasks send their events. Cheap to clone; a send after the observer is gone (the
/// broker is stopping) is dropped.
#[derive(Debug, Clone)]
pub(crate) struct EventSink(mpsc::UnboundedSender<QueueEvent>);

impl EventSink {
    /// A sink and the receiving end the observer serves.
    pub fn new() -> (EventSink, mpsc::UnboundedReceiver<QueueEvent>) {
        let (tx, rx) = mpsc::unbounded_channel();
        (EventSink(tx), rx)
    }

    pub fn send(&self, event: QueueEvent) {
        if let Err(unsent) = self.0.send(event) {
            if let QueueEvent::DeadLettered(letter) = unsent.0 {
                // It stays where the store has it and comes back at the next start.
                tracing::debug!(id = %letter.message.message_id,
                    "dead letter not processed: the broker is stopping");
            }
        }
    }
}

impl Default for EventSink {
    /// A sink whose events go nowhere (queue tasks of unit tests, a registry not wired yet).
    fn default() -> Self {
        EventSink::new().0
    }
}
