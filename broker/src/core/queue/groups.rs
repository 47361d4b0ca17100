//! Message groups: which consumer owns each group (JMSXGroupID), in the three forms of
//! ActiveMQ's `messageGroupMapFactory`.
//!
//! - **Simple**: every group until its owner goes or the group is closed (JMSXGroupSeq -1).
//!   Unbounded: as many entries as groups ever seen open.
//! - **Cached** (ActiveMQ's default, 1024): the most recently assigned groups only; the least
//!   recently used one is forgotten when the cache is full, and its next message goes to
//!   whichever consumer gets it first, which then owns the group.
//! - **Hash bucket**: groups hash into a fixed number of buckets, each with one owner, so
//!   memory stays bounded however many groups there are; groups sharing a bucket share an
//!   owner, and closing a group frees its bucket.

use std::collections::hash_map::DefaultHasher;
use std::collections::{BTreeMap, HashMap};
use std::hash::{Hash, Hasher};
use std::sync::Arc;

use conf::MessageGroupMap;

use crate::core::types::ConsumerId;

/// The owners of a queue's message groups.
#[derive(Debug)]
pub(crate) enum GroupMap {
    Simple(HashMap<Arc<str>, ConsumerId>),
    Cached(LruGroups),
    HashBucket { buckets: Box<[Option<ConsumerId>]>, owned: usize },
}

/// Groups with their owner and the last time (a counter) each was assigned.
#[derive(Debug)]
pub(crate) struct LruGroups {
    capacity: usize,
    owners: HashMap<Arc<str>, (ConsumerId, u64)>,
    by_use: BTreeMap<u64, Arc<str>>,
    clock: u64,
}

impl GroupMap {
    pub(crate) fn new(kind: MessageGroupMap) -> GroupMap {
        match kind {
            MessageGroupMap::Simple => GroupMap::Simple(HashMap::new()),
            MessageGroupMap::Cached { cache_size } => GroupMap::Cached(LruGroups {
                capacity: cache_size.max(1),
                owners: HashMap::new(),
                by_use: BTreeMap::new(),
                clock: 0,
            }),
            MessageGroupMap::HashBucket { buckets } => GroupMap::HashBucket {
                buckets: vec![None; buckets.max(1)].into_boxed_slice(),
                owned: 0,
            },
        }
    }

    /// The owner of `group`, if it has one.
    pub(crate) fn get(&self, group: &str) -> Option<&ConsumerId> {
        match self {
            GroupMap::Simple(owners) => owners.get(group),
            GroupMap::Cached(lru) => lru.owners.get(group).map(|(owner, _)| owner),
            GroupMap::HashBucket { buckets, .. } => {
                buckets.get(bucket_of(group, buckets.len())).and_then(Option::as_ref)
            }
        }
    }

    /// True if no group has an owner.
    pub(crate) fn is_empty(&self) -> bool {
        match self {
            GroupMap::Simple(owners) => owners.is_empty(),
            GroupMap::Cached(lru) => lru.owners.is_empty(),
            GroupMap::HashBucket { owned, .. } => *owned == 0,
        }
    }

    /// `group`'s message goes to `consumer`: it owns the group from now on if nobody does.
    /// Returns true if another group lost its owner to make room (the cache was full), so
    /// that consumers that passed its messages over look at them again.
    pub(crate) fn assign(&mut self, group: &Arc<str>, consumer: ConsumerId) -> bool {
        match self {
            GroupMap::Simple(owners) => {
                owners.entry(group.clone()).or_insert(consumer);
                false
            }
            GroupMap::Cached(lru) => lru.assign(group, consumer),
            GroupMap::HashBucket { buckets, owned } => {
                let index = bucket_of(group, buckets.len());
                if let Some(bucket @ None) = buckets.get_mut(index) {
                    *bucket = Some(consumer);
                    *owned += 1;
                }
                false
            }
        }
    }

    /// `group` is closed (its last message, JMSXGroupSeq -1, went out).
    pub(crate) fn close(&mut self, group: &str) {
        match self {
            GroupMap::Simple(owners) => {
                owners.remove(group);
            }
            GroupMap::Cached(lru) => {
                if let Some((_, used)) = lru.owners.remove(group) {
                    lru.by_use.remove(&used);
                }
            }
            GroupMap::HashBucket { buckets, owned } => {
                let index = bucket_of(group, buckets.len());
                if let Some(bucket @ Some(_)) = buckets.get_mut(index) {
                    *bucket = None;
                    *owned -= 1;
                }
            }
        }
    }

    /// `consumer` went: its groups have no owner any more. Returns true if it owned any.
    pub(crate) fn release_consumer(&mut self, consumer: ConsumerId) -> bool {
        match self {
            GroupMap::Simple(owners) => {
                let before = owners.len();
                owners.retain(|_, owner| *owner != consumer);
                owners.len() < before
            }
            GroupMap::Cached(lru) => {
                let before = lru.owners.len();
                let by_use = &mut lru.by_use;
                lru.owners.retain(|_, (owner, used)| {
                    let keep = *owner != consumer;
                    if !keep {
                        by_use.remove(used);
                    }
                    keep
                });
                lru.owners.len() < before
            }
            GroupMap::HashBucket { buckets, owned } => {
                let before = *owned;
                for bucket in buckets.iter_mut() {
                    if *bucket == Some(consumer) {
                        *bucket = None;
                        *owned -= 1;
                    }
                }
                *owned < before
            }
        }
    }
}

impl LruGroups {
    fn assign(&mut self, group: &Arc<str>, consumer: ConsumerId) -> bool {
        self.clock += 1;
        let now = self.clock;
        if let Some((_, used)) = self.owners.get_mut(group) {
            // Still owned: only its place in the use order changes.
            self.by_use.remove(used);
            *used = now;
            self.by_use.insert(now, group.clone());
            return false;
        }
        self.owners.insert(group.clone(), (consumer, now));
        self.by_use.insert(now, group.clone());
        let mut evicted = false;
        while self.owners.len() > self.capacity {
            let Some((_, oldest)) = self.by_use.pop_first() else { break };
            self.owners.remove(&oldest);
            evicted = true;
        }
        evicted
    }
}

fn bucket_of(group: &str, buckets: usize) -> usize {
    let mut hasher = DefaultHasher::new();
    group.hash(&mut hasher);
    // The remainder is below `buckets`, a usize.
    usize::try_from(hasher.finish() % buckets as u64).unwrap_or(0)
}

#[cfg(test)]
mod tests {
    use super::*;

    const A: ConsumerId = ConsumerId(1);
    const B: ConsumerId = ConsumerId(2);

    fn group(name: &str) -> Arc<str> {
        name.into()
    }

    #[test]
    fn the_first_consumer_owns_a_group_until_it_closes_or_goes() {
        for kind in [
            MessageGroupMap::Simple,
            MessageGroupMap::Cached { cache_size: 8 },
            MessageGroupMap::HashBucket { buckets: 64 },
        ] {
            let mut groups = GroupMap::new(kind);
            assert!(groups.is_empty());
            groups.assign(&group("g"), A);
            groups.assign(&group("g"), B);
            assert_eq!(groups.get("g"), Some(&A), "{kind:?}");
            groups.close("g");
            assert_eq!(groups.get("g"), None, "{kind:?}");
            groups.assign(&group("g"), B);
            assert!(groups.release_consumer(B), "{kind:?}");
            assert!(!groups.release_consumer(B), "{kind:?}");
            assert!(groups.is_empty(), "{kind:?}");
        }
    }

    #[test]
    fn the_cache_forgets_the_least_recently_used_group() {
        let mut groups = GroupMap::new(MessageGroupMap::Cached { cache_size: 2 });
        assert!(!groups.assign(&group("one"), A));
        assert!(!groups.assign(&group("two"), B));
        // "one" is used again, so "two" is now the oldest.
        assert!(!groups.assign(&group("one"), B));
        assert!(groups.assign(&group("three"), B));
        assert_eq!(groups.get("one"), Some(&A));
        assert_eq!(groups.get("two"), None);
        assert_eq!(groups.get("three"), Some(&B));
    }

    #[test]
    fn hash_buckets_bound_the_memory_whatever_the_number_of_groups() {
        let mut groups = GroupMap::new(MessageGroupMap::HashBucket { buckets: 4 });
        for index in 0..10_000 {
            groups.assign(&group(&format!("group-{index}")), A);
        }
        let GroupMap::HashBucket { buckets, owned } = &groups else { unreachable!() };
        assert_eq!((buckets.len(), *owned), (4, 4));
        assert!((0..100).all(|index| groups.get(&format!("other-{index}")) == Some(&A)));
    }
}
