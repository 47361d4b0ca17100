//! Settling deliveries: what happens to a message once a consumer has it. An ack removes it
//! (and its stored reference), a transaction's ack holds it until the transaction ends, a nack
//! or a departing consumer gives it back (redelivered, or dead-lettered past the redelivery
//! limit), a release gives it back uncounted, a poison ack and the expiry sweep dead-letter
//! it. Apart from `queue.rs` and `dispatch.rs` because every path here ends a delivery and
//! none starts one: the counters, the memory accounting and the dead-letter report that each
//! of them must keep right are in one place.

use store::{Completion, MessageId, Operation, PageKey, UnitOfWork};

use super::{now_millis, paging, AckMode, ConsumerId, Queue, QueuedMessage};
use crate::core::dead_letter::{Cause, DeadLetter};
use crate::core::events::QueueEvent;

impl Queue {
    pub(super) fn remove_consumer(&mut self, id: ConsumerId) {
        let Some(position) = self.consumers.iter().position(|c| c.spec.id == id) else { return };
        let consumer = self.consumers.remove(position);
        if self.groups.release_consumer(id) {
            // Its groups move to whichever consumer gets their next message: consumers that
            // passed those messages over must look at them again.
            self.forget_scans();
        }
        if self.next_consumer > position {
            self.next_consumer -= 1;
        }
        if self.next_consumer >= self.consumers.len() {
            self.next_consumer = 0;
        }
        let returned = consumer.in_flight.len();
        for (id, mut queued) in consumer.in_flight {
            if queued.acked_in_transaction {
                self.awaiting_transaction.insert(id, queued);
                continue;
            }
            // Auto-ack messages count as in flight only until written; one that was not
            // written yet was never seen by the client, so it goes back unmarked.
            if consumer.spec.ack_mode == AckMode::Auto {
                queued.delivery_count -= 1;
            }
            // Unacknowledged when its consumer went: counted like a NACK.
            let counted =
                consumer.spec.counts_redeliveries && consumer.spec.ack_mode != AckMode::Auto;
            self.give_back(queued, counted);
        }
        if returned > 0 {
            tracing::debug!(queue = ?self.handle.key, returned, "consumer closed with unacknowledged messages");
        }
    }

    /// Acknowledges `ids`; with `lazy`, nobody waits for the acks to be durable
    /// ([`UnitOfWork::lazy`]).
    pub(super) fn ack(
        &mut self,
        consumer: ConsumerId,
        ids: &[MessageId],
        lazy: bool,
    ) -> Completion {
        let Some(consumer) = self.consumers.iter_mut().find(|c| c.spec.id == consumer) else {
            return Completion::ready(Ok(()));
        };
        let mut unit = UnitOfWork { lazy, ..UnitOfWork::new() };
        let mut consumed = Vec::new();
        let consumer_id = consumer.spec.id;
        for id in ids {
            if let Some(queued) = consumer.take(id) {
                if queued.releases_credit() {
                    consumer.released -= 1;
                }
                if self.policy.advisories.consumed {
                    consumed.push(queued.message.clone());
                }
                self.acked += 1;
                paging::count_memory(&mut self.memory_bytes, &mut self.paging, &queued, false);
                self.paging.pin(self.handle.stored, &queued, false);
                if self.handle.stored && queued.message.is_persistent() {
                    unit.push(Operation::Ack {
                        queue: (*self.handle.key).clone(),
                        key: PageKey::of(&queued.message),
                        txn: None,
                    });
                }
            }
        }
        for message in &consumed {
            self.advise_consumed(consumer_id, message);
        }
        if unit.is_empty() {
            Completion::ready(Ok(()))
        } else {
            self.store.submit(unit)
        }
    }

    /// The client handed these in-flight messages to the application: they stop counting
    /// against the consumer's prefetch until they are acknowledged or come back.
    pub(super) fn consumed(&mut self, consumer: ConsumerId, ids: &[MessageId]) {
        let Some(consumer) = self.consumer_mut(consumer) else { return };
        for id in ids {
            if let Some(queued) = consumer.in_flight.get_mut(id) {
                let releases = !queued.releases_credit();
                queued.consumed = true;
                if releases {
                    consumer.released += 1;
                    let held_size = queued.held_size();
                    consumer.uncount(held_size);
                }
            }
        }
    }

    pub(super) fn ack_in_transaction(&mut self, consumer: ConsumerId, ids: &[MessageId]) {
        let Some(consumer) = self.consumer_mut(consumer) else { return };
        for id in ids {
            if let Some(queued) = consumer.in_flight.get_mut(id) {
                let releases = !queued.releases_credit();
                queued.acked_in_transaction = true;
                if releases {
                    consumer.released += 1;
                    let held_size = queued.held_size();
                    consumer.uncount(held_size);
                }
            }
        }
    }

    /// A transaction that acknowledged `ids` ended: committed (the messages are gone) or
    /// rolled back (they are delivered again, marked redelivered).
    pub(super) fn end_transaction(
        &mut self,
        ids: &[MessageId],
        committed: bool,
        keep_delivered: bool,
    ) {
        'ids: for id in ids {
            let mut found = self.awaiting_transaction.remove(id);
            if found.is_none() {
                for consumer in &mut self.consumers {
                    if consumer.in_flight.get(id).is_some_and(|q| q.acked_in_transaction) {
                        if keep_delivered && !committed {
                            if let Some(queued) = consumer.in_flight.get_mut(id) {
                                queued.acked_in_transaction = false;
                                if !queued.consumed {
                                    consumer.released -= 1;
                                    // Back in flight unacknowledged: it counts again.
                                    consumer.in_flight_bytes += queued.held_size();
                                }
                            }
                            continue 'ids;
                        }
                        consumer.released -= 1;
                        found = consumer.take(id);
                        break;
                    }
                }
            }
            let Some(mut queued) = found else { continue };
            if committed {
                self.acked += 1;
                self.count_memory(&queued, false);
                self.paging.pin(self.handle.stored, &queued, false);
            } else {
                queued.acked_in_transaction = false;
                self.make_ready(queued);
            }
        }
    }

    pub(super) fn nack(&mut self, consumer: ConsumerId, ids: &[MessageId]) {
        let Some(consumer) = self.consumers.iter_mut().find(|c| c.spec.id == consumer) else {
            return;
        };
        let mut returned = Vec::with_capacity(ids.len());
        for id in ids {
            if let Some(queued) = consumer.take(id) {
                if queued.releases_credit() {
                    consumer.released -= 1;
                }
                returned.push(queued);
            }
        }
        let counted = consumer.spec.counts_redeliveries;
        for queued in returned {
            self.give_back(queued, counted);
        }
    }

    /// Like [`Self::nack`], but the deliveries do not count: the delivery count goes back to
    /// what it was, so the message is not marked redelivered nor nearer the dead-letter limit.
    pub(super) fn release(&mut self, consumer: ConsumerId, ids: &[MessageId]) {
        let Some(consumer) = self.consumers.iter_mut().find(|c| c.spec.id == consumer) else {
            return;
        };
        let mut returned = Vec::with_capacity(ids.len());
        for id in ids {
            if let Some(mut queued) = consumer.take(id) {
                if queued.releases_credit() {
                    consumer.released -= 1;
                }
                queued.delivery_count = queued.delivery_count.saturating_sub(1);
                returned.push(queued);
            }
        }
        for queued in returned {
            self.give_back(queued, false);
        }
    }

    /// The consumer's client gave up on these in-flight messages: they go to the dead-letter
    /// task, which removes their stored references.
    pub(super) fn poison(
        &mut self,
        consumer: ConsumerId,
        ids: &[MessageId],
        cause: Option<String>,
    ) {
        let Some(consumer) = self.consumer_mut(consumer) else { return };
        let mut poisoned = Vec::with_capacity(ids.len());
        for id in ids {
            if let Some(queued) = consumer.take(id) {
                if queued.releases_credit() {
                    consumer.released -= 1;
                }
                poisoned.push(queued);
            }
        }
        for queued in poisoned {
            self.dead_letter(queued, Cause::Poisoned(cause.clone()));
        }
    }

    /// A message back from a consumer: dead-lettered when `counted` (the broker counts the
    /// consumer's redeliveries) and it was delivered more often than allowed, else ready again,
    /// marked redelivered.
    pub(super) fn give_back(&mut self, queued: QueuedMessage, counted: bool) {
        let settings = &self.dead_letters;
        if counted && settings.redeliveries_exceeded(queued.delivery_count) {
            let cause = Cause::Redeliveries {
                deliveries: queued.delivery_count,
                limit: settings.max_redeliveries.unwrap_or(0),
            };
            self.dead_letter(queued, cause);
        } else {
            self.make_ready(queued);
        }
    }

    /// The periodic sweep: every expired message waiting here leaves (dead-lettered or
    /// dropped); in-flight ones were delivered before they expired.
    pub(super) fn expire(&mut self) {
        let now = now_millis();
        let expired: Vec<PageKey> = self
            .ready
            .iter()
            .filter(|(_, queued)| queued.message.is_expired(now))
            .map(|(key, _)| *key)
            .collect();
        if !expired.is_empty() {
            tracing::debug!(queue = ?self.handle.key, count = expired.len(), "expired messages swept");
        }
        for key in expired {
            if let Some(queued) = self.ready.remove(&key) {
                self.dead_letter(queued, Cause::Expired);
            }
        }
    }

    /// Takes a message this queue gives up on to the dead-letter task, which moves it to a
    /// dead-letter queue or drops it, and removes its stored reference here either way.
    pub(super) fn dead_letter(&mut self, queued: QueuedMessage, cause: Cause) {
        match cause {
            Cause::Expired => self.expired += 1,
            Cause::Poisoned(_) | Cause::Redeliveries { .. } => self.dead_lettered += 1,
        }
        self.count_memory(&queued, false);
        self.paging.pin(self.handle.stored, &queued, false);
        let message = queued.message;
        self.events.send(QueueEvent::DeadLettered(DeadLetter {
            queue: self.handle.key.clone(),
            stored: self.handle.stored,
            message,
            cause,
            settings: self.dead_letters.clone(),
        }));
    }
}
