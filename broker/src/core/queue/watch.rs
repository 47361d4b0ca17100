//! What a queue task watches for the destination policy besides dispatching: slow consumers
//! (see [`slow`](crate::core::slow)), the pending message limit of non-durable topic
//! subscribers, and the policy's advisories about deliveries, acknowledgements, a full
//! memory gate and messages nobody consumes.

use std::sync::Arc;

use store::{Destination, Message};
use tokio::time::Instant;

use super::{Queue, QueuedMessage};
use crate::core::events::QueueEvent;
use crate::core::slow::{self, ConsumerNotice};
use crate::core::types::ConsumerId;

impl Queue {
    /// After a command, once dispatch is done: notes which consumers are slow, and announces
    /// those that have just become so.
    pub(super) fn watch_slow(&mut self) {
        if self.consumers.is_empty() {
            return;
        }
        let now = Instant::now();
        for index in 0..self.consumers.len() {
            let slow = self.is_slow(index);
            let consumer = &mut self.consumers[index];
            if consumer.slow.observe(slow, now) {
                let id = consumer.spec.id;
                tracing::debug!(queue = ?self.handle.key, consumer = id.0, "slow consumer");
                if self.policy.advisories.slow_consumers {
                    let destination = self.handle.key.destination.clone();
                    self.events.send(QueueEvent::Slow { consumer: id, destination });
                }
            }
        }
    }

    /// Whether consumer `index` is slow: its prefetch is full and messages wait that it could
    /// take. Once slow, it stays so until it has credit again or nothing waits (its selector
    /// is not tried again on every command).
    fn is_slow(&mut self, index: usize) -> bool {
        let consumer = &self.consumers[index];
        if consumer.spec.prefetch == 0 || consumer.has_credit() {
            return false;
        }
        if self.ready.is_empty() && !self.paging.has_more() {
            return false;
        }
        if consumer.slow.is_slow() || (consumer.spec.selector.is_none() && self.groups.is_empty()) {
            return true;
        }
        self.next_message_for(index).is_some()
    }

    /// The periodic check of the slow consumer strategy: aborts consumers slow too long or at
    /// too many consecutive checks.
    pub(super) fn check_slow(&mut self) {
        let Some(strategy) = self.policy.slow_consumer_strategy else { return };
        let now = Instant::now();
        for consumer in &mut self.consumers {
            if !consumer.slow.check(&strategy, now) {
                continue;
            }
            let reason = slow::abort_reason(&strategy, &consumer.slow, now);
            tracing::info!(queue = ?self.handle.key, consumer = consumer.spec.id.0, %reason,
                "aborting slow consumer");
            self.events.send(QueueEvent::Abort(ConsumerNotice::Abort {
                consumer: consumer.spec.id,
                destination: self.handle.key.destination.clone(),
                close_connection: strategy.abort_connection,
                reason,
            }));
        }
    }

    /// A non-durable topic subscriber's queue keeps at most `pending_message_limit` messages
    /// waiting beyond what its consumer has room for: the oldest waiting are discarded (never
    /// those in flight). Called after messages arrive, before dispatch.
    pub(super) fn discard_over_limit(&mut self) {
        let Some(limit) = self.policy.pending_message_limit else { return };
        if self.handle.stored || self.handle.key.subscription.is_none() {
            return;
        }
        let room: usize = self.consumers.iter().map(|c| c.credit()).sum();
        while self.ready.len() > limit.saturating_add(room) {
            // The first in delivery order: among equal priorities, the oldest.
            let Some((_, queued)) = self.ready.pop_first() else { break };
            self.discard(queued);
        }
    }

    fn discard(&mut self, queued: QueuedMessage) {
        self.discarded += 1;
        self.count_memory(&queued, false);
        self.paging.pin(self.handle.stored, &queued, false);
        let message = queued.message;
        tracing::debug!(queue = ?self.handle.key, id = %message.message_id,
            "pending message limit: message discarded");
        if self.policy.advisories.discarding_messages {
            self.events.send(QueueEvent::Discarded {
                destination: message.destination.clone(),
                consumer: self.consumers.first().map(|c| c.spec.id),
                discarded: self.discarded,
                message,
            });
        }
    }

    /// Where a message advisory of this queue goes: the queue, or for a topic subscription
    /// the topic the message was published to.
    fn advised_destination<'a>(&'a self, message: &'a Message) -> &'a Destination {
        if self.handle.key.subscription.is_none() {
            &self.handle.key.destination
        } else {
            &message.destination
        }
    }

    /// `advisory_for_delivery`: a message went to `consumer`.
    pub(super) fn advise_delivered(&self, consumer: ConsumerId, message: &Arc<Message>) {
        if self.policy.advisories.delivery {
            let destination = self.advised_destination(message).clone();
            let message = message.clone();
            self.events.send(QueueEvent::Delivered { destination, message, consumer });
        }
    }

    /// `advisory_for_consumed`: `consumer` acknowledged a message.
    pub(super) fn advise_consumed(&self, consumer: ConsumerId, message: &Arc<Message>) {
        if self.policy.advisories.consumed {
            let destination = self.advised_destination(message).clone();
            let message = message.clone();
            self.events.send(QueueEvent::Consumed { destination, message, consumer });
        }
    }

    /// `send_advisory_if_no_consumers` for a queue: a non-persistent message arrived while
    /// it has no consumer (topics are announced by the core, which routes them).
    pub(super) fn advise_no_consumer(&self, message: &Arc<Message>) {
        if self.policy.advisories.no_consumers
            && self.consumers.is_empty()
            && self.handle.key.subscription.is_none()
            && !message.is_persistent()
        {
            let destination = self.handle.key.destination.clone();
            self.events.send(QueueEvent::NoConsumer { destination, message: message.clone() });
        }
    }

    /// The memory gate opened or closed: `advisory_when_full` announces the close on
    /// `ActiveMQ.Advisory.FULL.<Type>.<name>`.
    pub(super) fn gate_changed(&self) {
        if !self.policy.advisories.when_full || !self.handle.gate.is_blocked() {
            return;
        }
        let destination = self.handle.key.destination.clone();
        self.events.send(QueueEvent::GateFull { destination });
    }
}
