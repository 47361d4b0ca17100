//! The consumer queues of virtual topics, kept by the topic that feeds them as queues come and
//! go, so that a publish to a virtual topic finds them without scanning every queue.
//!
//! A rule (`CoreSettings::virtual_topics`) with prefix `P` feeds topic `T` (a name the rule's
//! pattern matches) to every queue the pattern `P` + `T` matches: for the default
//! `Consumer.*.`, `Consumer.A.VirtualTopic.Orders` is a consumer queue of
//! `VirtualTopic.Orders`. The concatenation is of strings, not levels: the prefix's whole
//! levels (`Consumer`, `*`) come first, then its last, partial level (empty here) joins the
//! topic's first. A queue has at most one topic per prefix: what follows the prefix's whole
//! levels and its partial level in the queue's name. That holds while `P` + `T` has no
//! wildcard past the prefix's whole levels; for a topic where it might ([`Self::consumers`]
//! says so), the caller matches the pattern against every queue, as before the index.

use std::collections::HashMap;
use std::sync::Arc;

use super::types::VirtualTopicRule;

/// Each distinct prefix of the rules, with its consumer queues by topic.
#[derive(Default)]
pub(crate) struct VirtualConsumers {
    prefixes: Vec<Prefix>,
}

struct Prefix {
    text: Box<str>,
    /// The prefix's levels before its last `.`: `None` for `*`, any one level. Never `>`'s
    /// "the rest": these are never the pattern's last level, so `>` here is literal.
    levels: Vec<Option<Box<str>>>,
    /// What follows the last `.`, which joins the topic's first level.
    partial: Box<str>,
    queues: HashMap<Box<str>, Vec<Arc<str>>>,
}

impl Prefix {
    fn new(text: &str) -> Prefix {
        let mut levels: Vec<Option<Box<str>>> =
            text.split('.').map(|level| (level != "*").then(|| level.into())).collect();
        // `split` yields at least one part: the partial level, literal even when `*` (it is
        // one only if the topic's first level is empty, which `consumers` leaves to the scan).
        let partial = text.rsplit('.').next().unwrap_or_default().into();
        levels.pop();
        Prefix { text: text.into(), levels, partial, queues: HashMap::new() }
    }

    /// The topic whose consumer queue `queue` is under this prefix, if any.
    fn topic_of<'q>(&self, queue: &'q str) -> Option<&'q str> {
        let mut rest = queue;
        for level in &self.levels {
            let (head, tail) = rest.split_once('.')?;
            if level.as_deref().is_some_and(|exact| exact != head) {
                return None;
            }
            rest = tail;
        }
        rest.strip_prefix(&*self.partial)
    }

    /// True if `P` + `topic` has only exact levels past the prefix's whole levels, so that
    /// the queues it matches are exactly those [`Prefix::topic_of`] files under `topic`.
    fn exact_after_prefix(&self, topic: &str) -> bool {
        let wildcard = |level: &str| level == "*" || level == ">";
        let mut levels = topic.split('.');
        let first = levels.next().unwrap_or_default();
        let joined_is_wildcard = match (self.partial.is_empty(), first.is_empty()) {
            (true, _) => wildcard(first),
            (false, true) => wildcard(&self.partial),
            (false, false) => false,
        };
        // A `>` before the last level is literal: treating it as a wildcard only sends more
        // topics to the scan, which is always right.
        !joined_is_wildcard && !levels.any(wildcard)
    }
}

impl VirtualConsumers {
    pub fn new(rules: &[VirtualTopicRule]) -> VirtualConsumers {
        let mut prefixes: Vec<Prefix> = Vec::new();
        for rule in rules {
            if !prefixes.iter().any(|p| *p.text == *rule.prefix) {
                prefixes.push(Prefix::new(&rule.prefix));
            }
        }
        VirtualConsumers { prefixes }
    }

    /// Files a new queue under the topics it consumes.
    pub fn queue_added(&mut self, queue: &Arc<str>) {
        for prefix in &mut self.prefixes {
            if let Some(topic) = prefix.topic_of(queue) {
                prefix.queues.entry(topic.into()).or_default().push(queue.clone());
            }
        }
    }

    /// Forgets a queue that is gone.
    pub fn queue_removed(&mut self, queue: &str) {
        for prefix in &mut self.prefixes {
            let Some(topic) = prefix.topic_of(queue) else { continue };
            if let Some(queues) = prefix.queues.get_mut(topic) {
                queues.retain(|q| **q != *queue);
                if queues.is_empty() {
                    prefix.queues.remove(topic);
                }
            }
        }
    }

    /// Forgets every queue.
    pub fn clear(&mut self) {
        for prefix in &mut self.prefixes {
            prefix.queues.clear();
        }
    }

    /// The names of the consumer queues of `topic` under `prefix`, or `None` when the index
    /// cannot tell (a prefix no rule had when the index was made, or a topic whose consumer
    /// pattern has wildcards of its own): the caller then scans.
    pub fn consumers(&self, prefix: &str, topic: &str) -> Option<&[Arc<str>]> {
        let prefix = self.prefixes.iter().find(|p| *p.text == *prefix)?;
        if !prefix.exact_after_prefix(topic) {
            return None;
        }
        Some(prefix.queues.get(topic).map_or(&[][..], Vec::as_slice))
    }
}

#[cfg(test)]
mod tests {
    use rand::rngs::StdRng;
    use rand::{Rng, SeedableRng};

    use super::*;
    use crate::core::wildcard::DestinationFilter;

    fn rules(prefixes: &[&str]) -> Vec<VirtualTopicRule> {
        let rule = |prefix: &&str| VirtualTopicRule {
            name: DestinationFilter::new(">"),
            prefix: (*prefix).to_owned(),
        };
        prefixes.iter().map(rule).collect()
    }

    /// What the index answers, or the scan it leaves to the caller, against the scan alone.
    fn check(index: &VirtualConsumers, queues: &[Arc<str>], prefix: &str, topic: &str) {
        let pattern = DestinationFilter::new(&format!("{prefix}{topic}"));
        let mut scanned: Vec<&str> =
            queues.iter().filter(|q| pattern.matches(q)).map(|q| &**q).collect();
        scanned.sort_unstable();
        if let Some(found) = index.consumers(prefix, topic) {
            let mut found: Vec<&str> = found.iter().map(|q| &**q).collect();
            found.sort_unstable();
            assert_eq!(found, scanned, "prefix {prefix:?} topic {topic:?}");
        }
    }

    #[test]
    fn the_default_and_seed_002_s_rules_find_their_consumer_queues() {
        let mut index = VirtualConsumers::new(&rules(&["Consumer.*.", "VirtualQueueConsumer.*."]));
        let names = [
            "Consumer.A.VirtualTopic.Orders",
            "Consumer.B.VirtualTopic.Orders",
            "Consumer.A.VirtualTopic.Orders.EU",
            "Consumer.VirtualTopic.Orders",
            "VirtualQueueConsumer.B.MyTopic",
            "Other",
        ];
        let queues: Vec<Arc<str>> = names.iter().map(|n| Arc::from(*n)).collect();
        queues.iter().for_each(|q| index.queue_added(q));
        let orders = index.consumers("Consumer.*.", "VirtualTopic.Orders").unwrap();
        assert_eq!(orders.len(), 2);
        assert_eq!(index.consumers("VirtualQueueConsumer.*.", "MyTopic").unwrap().len(), 1);
        assert_eq!(index.consumers("Unknown.", "MyTopic"), None);
        index.queue_removed("Consumer.A.VirtualTopic.Orders");
        let orders = index.consumers("Consumer.*.", "VirtualTopic.Orders").unwrap();
        assert_eq!(&*orders[0], "Consumer.B.VirtualTopic.Orders");
        index.clear();
        assert!(index.consumers("Consumer.*.", "VirtualTopic.Orders").unwrap().is_empty());
    }

    /// Random prefixes, queues and topics over a small alphabet: wherever the index answers,
    /// it answers as matching `prefix + topic` against every queue.
    #[test]
    fn randomized_lookups_equal_the_scan() {
        const PARTS: &[&str] = &["a", "b", "*", ">", "", "a.", "*.", ".", "b*", ">."];
        let mut rng = StdRng::seed_from_u64(3);
        let random = |rng: &mut StdRng, most: usize| {
            let count = rng.gen_range(1..=most);
            (0..count).map(|_| PARTS[rng.gen_range(0..PARTS.len())]).collect::<String>()
        };
        for _ in 0..200 {
            let prefixes: Vec<String> = (0..3).map(|_| random(&mut rng, 3)).collect();
            let prefix_refs: Vec<&str> = prefixes.iter().map(String::as_str).collect();
            let mut index = VirtualConsumers::new(&rules(&prefix_refs));
            let mut queues: Vec<Arc<str>> = Vec::new();
            for _ in 0..40 {
                let queue: Arc<str> = random(&mut rng, 6).into();
                if queues.contains(&queue) {
                    continue;
                }
                index.queue_added(&queue);
                queues.push(queue);
            }
            for _ in 0..10 {
                let gone = queues.swap_remove(rng.gen_range(0..queues.len()));
                index.queue_removed(&gone);
            }
            for _ in 0..40 {
                let topic = random(&mut rng, 4);
                for prefix in &prefixes {
                    check(&index, &queues, prefix, &topic);
                }
            }
        }
    }
}
