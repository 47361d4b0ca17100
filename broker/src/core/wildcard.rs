//! Destination wildcards as ActiveMQ defines them: `.` separates levels, `*` matches exactly
//! one level, `>` matches every remaining level, none included (ActiveMQ 5.17 delivers a
//! message sent to `A.B` to a subscriber on `A.B.>`; the JMS interop check pins it), and
//! only as the last level.

use std::fmt;

/// A parsed destination name pattern.
#[derive(Debug, Clone, PartialEq, Eq, Hash)]
pub struct DestinationFilter {
    text: Box<str>,
    levels: Box<[Level]>,
}

#[derive(Debug, Clone, PartialEq, Eq, Hash)]
enum Level {
    Exact(Box<str>),
    AnyOne,
    AnyRest,
}

impl DestinationFilter {
    /// Parses `pattern`. Never fails: a `>` that is not the last level is matched literally,
    /// as ActiveMQ does.
    pub fn new(pattern: &str) -> Self {
        let parts: Vec<&str> = pattern.split('.').collect();
        let last = parts.len() - 1;
        let levels = parts
            .iter()
            .enumerate()
            .map(|(index, part)| match *part {
                "*" => Level::AnyOne,
                ">" if index == last => Level::AnyRest,
                exact => Level::Exact(exact.into()),
            })
            .collect();
        DestinationFilter { text: pattern.into(), levels }
    }

    /// True if the pattern has a wildcard level.
    pub fn is_wildcard(&self) -> bool {
        self.levels.iter().any(|level| !matches!(level, Level::Exact(_)))
    }

    /// True if `name` would parse into a pattern with a wildcard level; checked on every send,
    /// so it parses nothing.
    pub fn is_pattern(name: &str) -> bool {
        name.split('.').any(|level| level == "*") || name == ">" || name.ends_with(".>")
    }

    /// True if a destination named `name` (which has no wildcards itself) matches.
    pub fn matches(&self, name: &str) -> bool {
        let mut parts = name.split('.');
        for level in self.levels.iter() {
            match level {
                Level::AnyRest => return true,
                Level::AnyOne => {
                    if parts.next().is_none() {
                        return false;
                    }
                }
                Level::Exact(exact) => {
                    if parts.next() != Some(&**exact) {
                        return false;
                    }
                }
            }
        }
        parts.next().is_none()
    }

    pub fn as_str(&self) -> &str {
        &self.text
    }

    /// The pattern's levels as [`matches`](Self::matches) reads them, for indexes that must
    /// agree with it (see [`trie`](super::trie)).
    pub fn levels(&self) -> impl Iterator<Item = PatternLevel<'_>> {
        self.levels.iter().map(|level| match level {
            Level::Exact(exact) => PatternLevel::Exact(exact),
            Level::AnyOne => PatternLevel::AnyOne,
            Level::AnyRest => PatternLevel::AnyRest,
        })
    }
}

/// One level of a parsed pattern.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub enum PatternLevel<'a> {
    /// Matches this exact level (never `*`; `>` when it is not the last level).
    Exact(&'a str),
    /// `*`: exactly one level.
    AnyOne,
    /// `>` as the last level: every remaining level, none included.
    AnyRest,
}

impl fmt::Display for DestinationFilter {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        f.write_str(&self.text)
    }
}

#[cfg(test)]
mod tests {
    use super::DestinationFilter;

    #[test]
    fn star_matches_exactly_one_level() {
        let filter = DestinationFilter::new("PRICE.*.IBM");
        assert!(filter.matches("PRICE.STOCK.IBM"));
        assert!(!filter.matches("PRICE.IBM"));
        assert!(!filter.matches("PRICE.STOCK.NYSE.IBM"));
        assert!(!filter.matches("PRICE.STOCK.IBM.X"));
    }

    #[test]
    fn greater_than_matches_every_remaining_level_none_included() {
        let filter = DestinationFilter::new("PRICE.>");
        assert!(filter.matches("PRICE.STOCK"));
        assert!(filter.matches("PRICE.STOCK.NYSE.IBM"));
        assert!(filter.matches("PRICE"));
        assert!(!filter.matches("PRICES.STOCK"));
        assert!(DestinationFilter::new(">").matches("ANYTHING.AT.ALL"));
    }

    #[test]
    fn exact_patterns_match_only_themselves() {
        let filter = DestinationFilter::new("A.B");
        assert!(!filter.is_wildcard());
        assert!(!DestinationFilter::is_pattern("A.B"));
        assert!(DestinationFilter::is_pattern("A.*.B"));
        assert!(DestinationFilter::is_pattern("A.>"));
        assert!(!DestinationFilter::is_pattern("A.>.C"));
        assert!(filter.matches("A.B"));
        assert!(!filter.matches("A.B.C"));
        assert!(!filter.matches("A"));
    }

    #[test]
    fn greater_than_before_the_end_is_literal() {
        let filter = DestinationFilter::new("A.>.C");
        assert!(filter.matches("A.>.C"));
        assert!(!filter.matches("A.B.C"));
    }
}
