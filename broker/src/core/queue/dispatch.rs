//! Dispatch: how ready messages reach consumers. A message becomes ready ([`Queue::make_ready`],
//! new or back from a consumer), the next consumer in turn with credit is chosen (exclusive
//! first, then the highest priority, round-robin), the first ready message it may take is
//! found (its selector's scan cursor, message groups, the window's boundary), and it is
//! delivered and held in flight. Apart from `queue.rs` because it is the one part of the task
//! that runs after every command (through `settle`), and the part most often tuned.

use std::ops::Bound;
use std::sync::Arc;

use store::{Message, PageKey};

use super::paging::MAX_BROWSE;
use super::{now_millis, Delivery, Queue, QueuedMessage};
use crate::core::dead_letter::Cause;
use crate::core::selector::Selector;

impl Queue {
    /// Hands ready messages to consumers with credit, round-robin, highest priority first.
    /// A consumer with a selector gets the first ready message it matches; messages nobody
    /// matches stay, and later ones may pass them.
    pub(super) fn dispatch(&mut self) {
        let now = now_millis();
        // Consumers with credit but nothing they match, for this round (allocated only when
        // a selector leaves one without a message).
        let mut exhausted: Vec<bool> = Vec::new();
        while (!self.ready.is_empty() || self.paging.has_more()) && !self.consumers.is_empty() {
            let Some(index) = self.next_consumer_with_credit(&exhausted) else { return };
            let found = match self.next_message_for(index) {
                Some(key) => self.ready.remove(&key),
                // The window ran dry while consumers still have credit: page the next page in
                // (as `fill` does for a starving queue) instead of searching the store once per
                // message, which read a page for each one delivered.
                None if self.window_ran_dry() && self.page_in_now() => continue,
                // Nothing for it in the window: the first stored message beyond it that is.
                None => self.next_stored_for(index),
            };
            let Some(mut queued) = found else {
                exhausted.resize(self.consumers.len(), false);
                exhausted[index] = true;
                continue;
            };
            if queued.message.is_expired(now) {
                // Never delivered: dead-lettered or dropped.
                self.dead_letter(queued, Cause::Expired);
                continue;
            }
            if let Some(group) = &queued.message.headers.group_id {
                if queued.message.headers.group_seq == -1 {
                    self.groups.close(group);
                } else if self.groups.assign(group, self.consumers[index].spec.id) {
                    // A group the cache forgot may now go to consumers that passed it over.
                    self.forget_scans();
                }
            }
            let consumer = &mut self.consumers[index];
            let delivery = Delivery {
                consumer: consumer.spec.id,
                queue: self.handle.clone(),
                message: queued.message.clone(),
                redelivered: queued.delivery_count > 0,
                delivery_count: queued.delivery_count + 1,
            };
            queued.delivery_count += 1;
            if consumer.spec.sink.send(delivery).is_err() {
                // The connection is gone without unsubscribing: put the message back untouched
                // and drop the consumer, returning what it held.
                queued.delivery_count -= 1;
                let id = consumer.spec.id;
                self.make_ready(queued);
                self.remove_consumer(id);
                if index < exhausted.len() {
                    exhausted.remove(index);
                }
                continue;
            }
            consumer.pulls = consumer.pulls.saturating_sub(1);
            let (id, message) = (consumer.spec.id, queued.message.clone());
            consumer.hold(queued);
            self.advise_delivered(id, &message);
            // Strict order fills the consumers in the order they came (ActiveMQ's
            // strictOrderDispatch); otherwise the next message goes to the next consumer.
            if !self.policy.strict_order_dispatch {
                self.next_consumer = (index + 1) % self.consumers.len();
            }
        }
    }

    /// The next consumer in turn that has credit and is not `exhausted`.
    pub(super) fn next_consumer_with_credit(&self, exhausted: &[bool]) -> Option<usize> {
        let in_flight = self.in_flight_bytes();
        let available = |index: usize| {
            self.consumers[index].has_credit()
                && !exhausted.get(index).copied().unwrap_or(false)
                && self.may_take(index, in_flight)
        };
        // While an exclusive consumer is subscribed, the first one gets everything.
        if let Some(index) = self.consumers.iter().position(|c| c.spec.exclusive) {
            return available(index).then_some(index);
        }
        let count = self.consumers.len();
        let highest = (0..count).filter(|&i| available(i)).map(|i| self.consumers[i].spec.priority);
        let highest = highest.max()?;
        (0..count)
            .map(|offset| (self.next_consumer + offset) % count)
            .find(|&i| available(i) && self.consumers[i].spec.priority == highest)
    }

    /// The key of the first ready message for consumer `index`: the first of all without a
    /// selector; with one, the earlier of its first missed message and the first match after
    /// its scan cursor, which this call advances over every message that does not match.
    /// Only messages inside the window count: a non-persistent one beyond it waits until the
    /// stored messages before it are paged in.
    pub(super) fn next_message_for(&mut self, index: usize) -> Option<PageKey> {
        let Queue { consumers, ready, groups, paging, .. } = self;
        let window = paging.window;
        let inside = |key: &PageKey| !window.beyond(*key);
        let consumer = &mut consumers[index];
        let id = consumer.spec.id;
        // A message of a group that sticks to another consumer is not for this one.
        let allowed = |queued: &QueuedMessage| match &queued.message.headers.group_id {
            Some(group) => groups.get(group).is_none_or(|owner| *owner == id),
            None => true,
        };
        let Some(selector) = &consumer.spec.selector else {
            if groups.is_empty() {
                return ready.keys().next().copied().filter(inside);
            }
            // Messages held for other consumers' groups are passed over (a scan as long as
            // the run of them at the head of the queue).
            return ready
                .iter()
                .take_while(|(key, _)| inside(key))
                .find(|(_, queued)| allowed(queued))
                .map(|(key, _)| *key);
        };
        while let Some(first) = consumer.missed.first() {
            if ready.get(first).is_some_and(allowed) {
                break;
            }
            consumer.missed.pop_first();
        }
        let missed = consumer.missed.first().copied();
        let after = match consumer.scanned {
            Some(scanned) => Bound::Excluded(scanned),
            None => Bound::Unbounded,
        };
        for (key, queued) in ready.range((after, Bound::Unbounded)).take_while(|(k, _)| inside(k)) {
            if missed.is_some_and(|missed| missed < *key) {
                break;
            }
            if allowed(queued) && selector.matches(&queued.message) {
                return Some(*key);
            }
            // Passed over for a group too: releasing groups resets the scan.
            consumer.scanned = Some(*key);
        }
        missed
    }

    /// Makes a message ready (new, or back from a consumer): consumers with a selector whose
    /// scan already passed its position test it now, so that a deep queue is not scanned again.
    pub(super) fn make_ready(&mut self, mut queued: QueuedMessage) {
        queued.consumed = false;
        let key = PageKey::of(&queued.message);
        if self.paging.window.beyond(key) {
            // After the window: paged in again when its turn comes, from the store, or from
            // the temporary store a non-persistent message spills to. One that cannot spill
            // waits here, after the window, until the window reaches it.
            if self.in_store(&queued.message) {
                self.leave_in_store(queued);
                return;
            }
            match self.spool(queued) {
                Ok(()) => return,
                Err(kept) => queued = kept,
            }
        }
        for consumer in &mut self.consumers {
            if let (Some(selector), Some(scanned)) = (&consumer.spec.selector, consumer.scanned) {
                if key <= scanned && selector.matches(&queued.message) {
                    consumer.missed.insert(key);
                }
            }
        }
        self.ready.insert(key, queued);
    }

    /// Every consumer's selector scan starts over (messages it passed over for another
    /// consumer's group may be for it now).
    pub(super) fn forget_scans(&mut self) {
        for consumer in &mut self.consumers {
            consumer.scanned = None;
            consumer.missed.clear();
        }
    }

    /// At most [`MAX_BROWSE`] messages (ActiveMQ's `maxBrowsePageSize`), the first in
    /// delivery order: the window's, then stored ones beyond it.
    pub(super) fn browse(&self, selector: Option<&Selector>) -> Vec<Arc<Message>> {
        let now = now_millis();
        let in_flight = self.consumers.iter().flat_map(|c| c.in_flight.values());
        let mut messages: Vec<(PageKey, Arc<Message>)> = self
            .ready
            .values()
            .chain(in_flight)
            .filter(|queued| !queued.message.is_expired(now))
            .filter(|queued| selector.is_none_or(|s| s.matches(&queued.message)))
            .map(|queued| (PageKey::of(&queued.message), queued.message.clone()))
            .collect();
        self.browse_stored(selector, now, &mut messages);
        messages.sort_by_key(|(key, _)| *key);
        messages.truncate(MAX_BROWSE);
        messages.into_iter().map(|(_, message)| message).collect()
    }
}
