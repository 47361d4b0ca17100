//! Reading through the layers: a unit's own writes, then the overlay of units queued for
//! the writer, then the engine. Reads see every submitted unit (the contract) although the
//! writer thread writes them later.
//!
//! Correctness of the layering rests on one rule: an overlay entry is removed only after
//! the batch holding it (or a later value for its key) is in the engine. A reader that
//! copies or borrows the overlay first and scans the engine after therefore never misses a
//! key; where both hold it the overlay's value is the newer (or the same).

use std::collections::BTreeMap;
use std::iter::Peekable;
use std::ops::Bound;

use crate::engine::Engine;
use crate::error::LsmError;

/// A value waiting for the writer: `None` is a delete. `seq` is the unit that set it.
#[derive(Debug, Clone)]
pub struct Pending {
    pub value: Option<Vec<u8>>,
    pub seq: u64,
}

pub type Overlay = BTreeMap<Vec<u8>, Pending>;
pub type UnitWrites = BTreeMap<Vec<u8>, Option<Vec<u8>>>;

/// A key and its value in some layer; `None` hides the key in the layers below.
pub type Entry = Result<(Vec<u8>, Option<Vec<u8>>), LsmError>;

/// Merges two sorted streams of entries; on equal keys `newer` wins.
pub struct Merge<A: Iterator<Item = Entry>, B: Iterator<Item = Entry>> {
    newer: Peekable<A>,
    older: Peekable<B>,
}

impl<A: Iterator<Item = Entry>, B: Iterator<Item = Entry>> Merge<A, B> {
    pub fn new(newer: A, older: B) -> Self {
        Merge { newer: newer.peekable(), older: older.peekable() }
    }
}

impl<A: Iterator<Item = Entry>, B: Iterator<Item = Entry>> Iterator for Merge<A, B> {
    type Item = Entry;

    fn next(&mut self) -> Option<Entry> {
        use std::cmp::Ordering::*;
        let order = match (self.newer.peek(), self.older.peek()) {
            (None, None) => return None,
            (Some(Err(_)), _) | (Some(_), None) => Less,
            (_, Some(Err(_))) | (None, Some(_)) => Greater,
            (Some(Ok((a, _))), Some(Ok((b, _)))) => a.cmp(b),
        };
        match order {
            Less => self.newer.next(),
            Greater => self.older.next(),
            Equal => {
                self.older.next();
                self.newer.next()
            }
        }
    }
}

fn bounds(start: &[u8], end: &[u8]) -> (Bound<Vec<u8>>, Bound<Vec<u8>>) {
    (Bound::Included(start.to_vec()), Bound::Excluded(end.to_vec()))
}

pub fn overlay_range<'a>(
    overlay: &'a Overlay,
    start: &[u8],
    end: &[u8],
) -> impl Iterator<Item = Entry> + 'a {
    overlay.range(bounds(start, end)).map(|(k, p)| Ok((k.clone(), p.value.clone())))
}

pub fn unit_range<'a>(
    writes: &'a UnitWrites,
    start: &[u8],
    end: &[u8],
) -> impl Iterator<Item = Entry> + 'a {
    writes.range(bounds(start, end)).map(|(k, v)| Ok((k.clone(), v.clone())))
}

pub fn engine_range<'a>(
    engine: &'a dyn Engine,
    start: &[u8],
    end: &[u8],
) -> impl Iterator<Item = Entry> + 'a {
    engine.range(start, end).map(|entry| entry.map(|(k, v)| (k, Some(v))))
}

/// Live keys only: drops the deletes of upper layers.
pub fn live(
    entries: impl Iterator<Item = Entry>,
) -> impl Iterator<Item = Result<(Vec<u8>, Vec<u8>), LsmError>> {
    entries.filter_map(|entry| match entry {
        Ok((key, Some(value))) => Some(Ok((key, value))),
        Ok((_, None)) => None,
        Err(e) => Some(Err(e)),
    })
}

#[cfg(test)]
mod tests {
    use super::*;

    fn entries(items: &[(&str, Option<&str>)]) -> Vec<Entry> {
        items
            .iter()
            .map(|(k, v)| Ok((k.as_bytes().to_vec(), v.map(|v| v.as_bytes().to_vec()))))
            .collect()
    }

    #[test]
    fn newer_layer_wins_and_deletes_hide_older_keys() {
        let newer = entries(&[("b", Some("B2")), ("c", None), ("e", Some("E"))]);
        let older =
            entries(&[("a", Some("A")), ("b", Some("B1")), ("c", Some("C")), ("d", Some("D"))]);
        let merged: Vec<(Vec<u8>, Vec<u8>)> =
            live(Merge::new(newer.into_iter(), older.into_iter()))
                .map(|e| e.expect("ok"))
                .collect();
        let text: Vec<(String, String)> = merged
            .into_iter()
            .map(|(k, v)| (String::from_utf8_lossy(&k).into(), String::from_utf8_lossy(&v).into()))
            .collect();
        let expected = [("a", "A"), ("b", "B2"), ("d", "D"), ("e", "E")];
        assert_eq!(text, expected.map(|(k, v)| (k.to_string(), v.to_string())));
    }
}
