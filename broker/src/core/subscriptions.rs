//! Every topic subscription, indexed by its destination pattern (see [`trie`](super::trie)) so
//! that a publish or an advisory visits only the subscriptions that match its topic.
//!
//! A subscription keeps an id for its whole life, never reused, and its selector never changes
//! (a durable subscriber that changes its selector gets a new subscription). A send judges the
//! selectors of its topics' subscriptions before it takes the routing lock ([`SelectorVerdicts`],
//! on the copies [`TopicSubscriptions::selectors_for`] hands out); a verdict stays good for as
//! long as its subscription exists, so the route under the lock evaluates only the selectors of
//! subscriptions that came meanwhile.

use std::collections::{BTreeMap, HashMap};
use std::sync::Arc;

use store::Message;

use super::queue::QueueHandle;
use super::selector::Selector;
use super::trie::PatternIndex;
use super::types::{off_the_runtime, ConnectionId};
use super::wildcard::DestinationFilter;

/// A subscription that receives a copy of every matching topic message.
#[derive(Clone)]
pub(crate) struct TopicSubscription {
    pub filter: DestinationFilter,
    pub queue: QueueHandle,
    /// A subscriber that asked not to receive its own connection's messages.
    pub no_local_connection: Option<ConnectionId>,
    /// Subscribed to a temporary topic: temporary and ordinary topics never match each
    /// other, even through wildcards (as in ActiveMQ).
    pub temporary: bool,
    /// Only messages this selector matches are routed to the subscription (so a durable
    /// subscription stores nothing else).
    pub selector: Option<Arc<Selector>>,
}

/// A subscription's identity: given in order, never reused.
#[derive(Debug, Clone, Copy, PartialEq, Eq, PartialOrd, Ord, Hash)]
pub(crate) struct SubscriptionId(u64);

/// The queue a subscription feeds, as a map key: the address of its shared key, which the
/// subscription's handle keeps alive (so no other queue can have it meanwhile).
fn queue_identity(queue: &QueueHandle) -> usize {
    Arc::as_ptr(&queue.key) as usize
}

#[derive(Default)]
pub(crate) struct TopicSubscriptions {
    /// In the order they came (ids grow), which is the order routes list them in.
    by_id: BTreeMap<SubscriptionId, TopicSubscription>,
    /// Ordinary and temporary topics apart: they never match each other.
    ordinary: PatternIndex<SubscriptionId>,
    temporary: PatternIndex<SubscriptionId>,
    /// A queue may be fed by several subscriptions (a composite subscriber's).
    by_queue: HashMap<usize, Vec<SubscriptionId>>,
    next_id: u64,
}

impl TopicSubscriptions {
    /// Every subscription, oldest first.
    pub fn iter(&self) -> impl Iterator<Item = &TopicSubscription> {
        self.by_id.values()
    }

    fn index(&self, temporary: bool) -> &PatternIndex<SubscriptionId> {
        if temporary {
            &self.temporary
        } else {
            &self.ordinary
        }
    }

    pub fn insert(&mut self, subscription: TopicSubscription) -> SubscriptionId {
        let id = SubscriptionId(self.next_id);
        self.next_id += 1;
        let index = if subscription.temporary { &mut self.temporary } else { &mut self.ordinary };
        index.insert(&subscription.filter, id);
        self.by_queue.entry(queue_identity(&subscription.queue)).or_default().push(id);
        self.by_id.insert(id, subscription);
        id
    }

    /// Removes every subscription that feeds `queue`; returns how many.
    pub fn remove_queue(&mut self, queue: &QueueHandle) -> usize {
        let Some(ids) = self.by_queue.remove(&queue_identity(queue)) else { return 0 };
        for id in &ids {
            if let Some(subscription) = self.by_id.remove(id) {
                let index =
                    if subscription.temporary { &mut self.temporary } else { &mut self.ordinary };
                index.remove(&subscription.filter, id);
            }
        }
        ids.len()
    }

    /// The subscriptions that feed `queue`, oldest first.
    pub fn of_queue(&self, queue: &QueueHandle) -> impl Iterator<Item = &TopicSubscription> {
        let ids = self.by_queue.get(&queue_identity(queue)).map_or(&[][..], Vec::as_slice);
        ids.iter().filter_map(|id| self.by_id.get(id))
    }

    /// Sets who the subscriptions that feed `queue` skip the messages of.
    pub fn set_no_local(&mut self, queue: &QueueHandle, no_local: Option<ConnectionId>) {
        for id in self.by_queue.get(&queue_identity(queue)).into_iter().flatten() {
            if let Some(subscription) = self.by_id.get_mut(id) {
                subscription.no_local_connection = no_local;
            }
        }
    }

    /// Removes every subscription.
    pub fn drain(&mut self) -> Vec<TopicSubscription> {
        let drained = std::mem::take(&mut self.by_id).into_values().collect();
        *self = TopicSubscriptions { next_id: self.next_id, ..Default::default() };
        drained
    }

    /// The subscriptions of `topic` (a temporary one or not), oldest first: only those
    /// visited.
    pub fn matching(
        &self,
        topic: &str,
        temporary: bool,
    ) -> Vec<(SubscriptionId, &TopicSubscription)> {
        let mut ids = Vec::new();
        self.index(temporary).for_each_match(topic, |id| ids.push(*id));
        // In the order they came, as when they were one list; and once each.
        ids.sort_unstable();
        ids.dedup();
        ids.into_iter().filter_map(|id| Some((id, self.by_id.get(&id)?))).collect()
    }

    /// True if some subscription (of a temporary topic or not) matches `topic`.
    pub fn any_match(&self, topic: &str) -> bool {
        self.ordinary.matches_any(topic) || self.temporary.matches_any(topic)
    }

    /// True if some subscription of `temporary` topics or ordinary ones matches `topic`.
    pub fn any_match_of(&self, topic: &str, temporary: bool) -> bool {
        self.index(temporary).matches_any(topic)
    }

    /// True if some subscription of `temporary` topics or ordinary ones was made with
    /// exactly `pattern`.
    pub fn subscribed_as(&self, pattern: &str, temporary: bool) -> bool {
        if !DestinationFilter::is_pattern(pattern) {
            return self.index(temporary).has_exact(pattern);
        }
        // A wildcard name is rarely asked about: the trie is not searched by pattern.
        self.iter().any(|s| s.temporary == temporary && s.filter.as_str() == pattern)
    }

    /// The selectors of the subscriptions of `topics` (`(name, temporary)`) that have one,
    /// each once, for [`SelectorVerdicts::judge`] to evaluate without the routing lock.
    pub fn selectors_for(&self, topics: &[(&str, bool)]) -> Vec<(SubscriptionId, Arc<Selector>)> {
        let mut ids = Vec::new();
        for (topic, temporary) in topics {
            self.index(*temporary).for_each_match(topic, |id| ids.push(*id));
        }
        ids.sort_unstable();
        ids.dedup();
        ids.into_iter()
            .filter_map(|id| Some((id, self.by_id.get(&id)?.selector.clone()?)))
            .collect()
    }
}

/// Which subscriptions a message's selectors let through, decided without the routing lock on
/// copies of the selectors ([`TopicSubscriptions::selectors_for`]). A subscription keeps its
/// selector for life, so a verdict holds while its subscription exists; one that came after
/// the copies has no verdict, and the route evaluates its selector under the lock.
pub(crate) struct SelectorVerdicts {
    passes: HashMap<SubscriptionId, bool>,
}

impl SelectorVerdicts {
    /// Evaluates every selector of `judged` against `message`. None if there is none.
    pub fn judge(
        judged: Vec<(SubscriptionId, Arc<Selector>)>,
        message: &Message,
    ) -> Option<SelectorVerdicts> {
        if judged.is_empty() {
            return None;
        }
        let evaluate =
            || judged.iter().map(|(id, selector)| (*id, selector.matches(message))).collect();
        // Many selectors take long: other tasks of this worker move elsewhere meanwhile.
        let passes = if judged.len() >= 64 { off_the_runtime(evaluate) } else { evaluate() };
        Some(SelectorVerdicts { passes })
    }

    /// Whether subscription `id`'s selector matched, if it was judged.
    pub fn passes(&self, id: SubscriptionId) -> Option<bool> {
        self.passes.get(&id).copied()
    }
}
