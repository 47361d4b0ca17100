//! An index of destination name patterns ([`DestinationFilter`]s) that finds the patterns
//! matching a name by visiting only them, as ActiveMQ's `DestinationMap` or NATS's sublist
//! do: a topic publish, a policy lookup or an advisory costs what matches, not what exists.
//!
//! Patterns without wildcards sit in a map by their whole name (one hash per lookup, the
//! common case); the others in a trie of their levels, split on `.`, where `*` is a child of
//! its own (never the literal level `*` of a name) and `>` (only ever the last level) keeps
//! its values at the node it follows, since it matches the remaining levels, none included.
//! The answer is exactly [`DestinationFilter::matches`]'s: the trie is built from the
//! filter's own parsed levels (see the randomized comparison in the tests).

use std::collections::HashMap;

use super::wildcard::{DestinationFilter, PatternLevel};

/// Values (a subscription id, a policy rule) by the pattern they were inserted under.
#[derive(Debug, Clone)]
pub(crate) struct PatternIndex<T> {
    exact: HashMap<Box<str>, Vec<T>>,
    wildcards: Node<T>,
    /// How many values `wildcards` holds: a lookup skips the walk when none.
    wildcard_values: usize,
}

#[derive(Debug, Clone)]
struct Node<T> {
    children: HashMap<Box<str>, Node<T>>,
    any_one: Option<Box<Node<T>>>,
    /// Patterns that end here with `>`.
    rest: Vec<T>,
    /// Patterns that end at this level.
    here: Vec<T>,
}

impl<T> Default for PatternIndex<T> {
    fn default() -> Self {
        PatternIndex { exact: HashMap::new(), wildcards: Node::default(), wildcard_values: 0 }
    }
}

impl<T> Default for Node<T> {
    fn default() -> Self {
        Node { children: HashMap::new(), any_one: None, rest: Vec::new(), here: Vec::new() }
    }
}

impl<T> Node<T> {
    fn is_empty(&self) -> bool {
        self.children.is_empty()
            && self.any_one.is_none()
            && self.rest.is_empty()
            && self.here.is_empty()
    }

    fn visit<'a>(&'a self, mut parts: std::str::Split<'_, char>, found: &mut impl FnMut(&'a T)) {
        self.rest.iter().for_each(&mut *found);
        match parts.next() {
            None => self.here.iter().for_each(found),
            Some(part) => {
                if let Some(child) = self.children.get(part) {
                    child.visit(parts.clone(), found);
                }
                if let Some(child) = &self.any_one {
                    child.visit(parts, found);
                }
            }
        }
    }
}

impl<T: PartialEq> Node<T> {
    /// Removes `value` from under `levels`, and the nodes it leaves empty; true if found.
    fn remove(&mut self, levels: &[PatternLevel<'_>], value: &T) -> bool {
        let take = |values: &mut Vec<T>| match values.iter().position(|v| v == value) {
            Some(index) => {
                values.remove(index);
                true
            }
            None => false,
        };
        match levels.split_first() {
            None => take(&mut self.here),
            Some((PatternLevel::AnyRest, _)) => take(&mut self.rest),
            Some((PatternLevel::AnyOne, below)) => {
                let Some(child) = &mut self.any_one else { return false };
                let removed = child.remove(below, value);
                if child.is_empty() {
                    self.any_one = None;
                }
                removed
            }
            Some((PatternLevel::Exact(level), below)) => {
                let Some(child) = self.children.get_mut(*level) else { return false };
                let removed = child.remove(below, value);
                if child.is_empty() {
                    self.children.remove(*level);
                }
                removed
            }
        }
    }
}

impl<T> PatternIndex<T> {
    /// Adds `value` under `pattern` (a value may be added under several patterns, or twice).
    pub fn insert(&mut self, pattern: &DestinationFilter, value: T) {
        if !pattern.is_wildcard() {
            self.exact.entry(pattern.as_str().into()).or_default().push(value);
            return;
        }
        self.wildcard_values += 1;
        let mut node = &mut self.wildcards;
        for level in pattern.levels() {
            node = match level {
                PatternLevel::Exact(level) => node.children.entry(level.into()).or_default(),
                PatternLevel::AnyOne => node.any_one.get_or_insert_with(Box::default),
                PatternLevel::AnyRest => {
                    node.rest.push(value);
                    return;
                }
            };
        }
        node.here.push(value);
    }

    /// Calls `found` with every value whose pattern matches `name` (once per insertion),
    /// visiting only the trie's matching branches.
    pub fn for_each_match<'a>(&'a self, name: &str, mut found: impl FnMut(&'a T)) {
        if let Some(values) = self.exact.get(name) {
            values.iter().for_each(&mut found);
        }
        if self.wildcard_values > 0 {
            self.wildcards.visit(name.split('.'), &mut found);
        }
    }

    /// True if some value was inserted under `name`, which has no wildcards.
    pub fn has_exact(&self, name: &str) -> bool {
        self.exact.contains_key(name)
    }

    /// True if some pattern matches `name`.
    pub fn matches_any(&self, name: &str) -> bool {
        let mut any = false;
        self.for_each_match(name, |_| any = true);
        any
    }

    #[cfg(test)]
    pub fn is_empty(&self) -> bool {
        self.exact.is_empty() && self.wildcard_values == 0
    }
}

impl<T: PartialEq> PatternIndex<T> {
    /// Removes one insertion of `value` under `pattern`; true if there was one.
    pub fn remove(&mut self, pattern: &DestinationFilter, value: &T) -> bool {
        if !pattern.is_wildcard() {
            let Some(values) = self.exact.get_mut(pattern.as_str()) else { return false };
            let Some(index) = values.iter().position(|v| v == value) else { return false };
            values.remove(index);
            if values.is_empty() {
                self.exact.remove(pattern.as_str());
            }
            return true;
        }
        let levels: Vec<PatternLevel<'_>> = pattern.levels().collect();
        let removed = self.wildcards.remove(&levels, value);
        self.wildcard_values -= usize::from(removed);
        removed
    }
}

#[cfg(test)]
mod tests {
    use rand::rngs::StdRng;
    use rand::{Rng, SeedableRng};

    use super::*;

    fn matches(index: &PatternIndex<usize>, name: &str) -> Vec<usize> {
        let mut found = Vec::new();
        index.for_each_match(name, |value| found.push(*value));
        found.sort_unstable();
        found
    }

    fn scan(patterns: &[Option<DestinationFilter>], name: &str) -> Vec<usize> {
        let matching = patterns.iter().enumerate();
        matching
            .filter(|(_, p)| p.as_ref().is_some_and(|p| p.matches(name)))
            .map(|(i, _)| i)
            .collect()
    }

    const PATTERNS: &[&str] = &[
        "A", "A.B", "A.B.C", "A.*", "A.*.C", "*.B", "*", ">", "A.>", "A.B.>", "*.>", "A.>.C",
        "A..B", "", ".", "A.*.>", "*.*", "B.*.*.D", "A.B.*",
    ];
    const NAMES: &[&str] = &[
        "A", "A.B", "A.B.C", "A.C", "A.X.C", "B", "B.B", "A.>.C", "A..B", "", ".", "A.B.C.D",
        "A.*", "*", ">", "B.X.Y.D", "A.B.", "X.Y.Z",
    ];

    #[test]
    fn lookups_match_as_the_filters_do() {
        let patterns: Vec<Option<DestinationFilter>> =
            PATTERNS.iter().map(|p| Some(DestinationFilter::new(p))).collect();
        let mut index = PatternIndex::default();
        for (value, pattern) in patterns.iter().enumerate() {
            index.insert(pattern.as_ref().unwrap(), value);
        }
        for name in NAMES {
            assert_eq!(matches(&index, name), scan(&patterns, name), "name {name:?}");
            assert_eq!(index.matches_any(name), !scan(&patterns, name).is_empty());
        }
        // `>` matches the level it follows, none included; `*` never a missing level.
        assert!(matches(&index, "A").contains(&8));
        assert!(!matches(&index, "A").contains(&3));
        // A name's `*` level is literal: only wildcards match it.
        assert_eq!(matches(&index, "*"), vec![6, 7, 10]);
    }

    #[test]
    fn removing_leaves_the_other_patterns_and_prunes_the_trie() {
        let mut index = PatternIndex::default();
        let a = DestinationFilter::new("A.*.C");
        let b = DestinationFilter::new("A.>");
        index.insert(&a, 1);
        index.insert(&a, 2);
        index.insert(&b, 3);
        assert!(!index.remove(&a, &9));
        assert!(!index.remove(&DestinationFilter::new("A.*"), &1));
        assert!(index.remove(&a, &1));
        assert_eq!(matches(&index, "A.B.C"), vec![2, 3]);
        assert!(index.remove(&a, &2));
        assert!(index.remove(&b, &3));
        assert!(index.is_empty());
        assert!(index.wildcards.is_empty(), "no empty node is left behind");
    }

    /// Random patterns and names over a small alphabet (so that they often match), added
    /// and removed at random: the index always answers as a scan of the filters.
    #[test]
    fn randomized_lookups_equal_the_scan() {
        const LEVELS: &[&str] = &["a", "b", "c", "*", ">", ""];
        let mut rng = StdRng::seed_from_u64(19);
        let random_name = |rng: &mut StdRng| {
            let count = rng.gen_range(1..=5);
            let levels: Vec<&str> =
                (0..count).map(|_| LEVELS[rng.gen_range(0..LEVELS.len())]).collect();
            levels.join(".")
        };
        let mut patterns: Vec<Option<DestinationFilter>> = Vec::new();
        let mut index = PatternIndex::default();
        for round in 0..3000 {
            if round % 3 == 2 && !patterns.is_empty() {
                let victim = rng.gen_range(0..patterns.len());
                if let Some(pattern) = patterns[victim].take() {
                    assert!(index.remove(&pattern, &victim));
                }
            } else {
                let pattern = DestinationFilter::new(&random_name(&mut rng));
                index.insert(&pattern, patterns.len());
                patterns.push(Some(pattern));
            }
            for _ in 0..5 {
                let name = random_name(&mut rng);
                assert_eq!(matches(&index, &name), scan(&patterns, &name), "name {name:?}");
            }
        }
    }
}
