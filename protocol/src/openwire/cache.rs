//! The marshalling cache: when negotiated, ids and destinations that a command holds in a
//! *cached* field are sent in full once, with a slot index, and afterwards as the index alone.
//!
//! Each direction has its own cache: the encoder side decides the indexes ([`EncodeCache`]),
//! the decoder side stores what it is told ([`DecodeCache`]). The encoder follows Java's
//! `OpenWireFormat` exactly (slots handed out round-robin; before each command, the oldest
//! entries are evicted until 100 slots are free; `null` is a cacheable value) so that our
//! bytes match what a Java peer would write for the same commands.

use std::hash::Hasher;

use rustc_hash::{FxHashMap, FxHasher};

use super::commands::DataStructure;
use super::error::WireError;
use super::marshal::WireObject;

/// Slots kept free by the eviction sweep before each command (Java's constant).
const FREE_SLOTS: usize = 100;

/// Java's cache size when a peer negotiates 0 (`Short.MAX_VALUE / 2`).
pub(crate) const DEFAULT_WHEN_ZERO: usize = (i16::MAX / 2) as usize;

/// A cached value: `None` is Java's `null`, which is cached like any other value.
pub(crate) type CacheValue = Option<DataStructure>;

/// A value's key in the [`EncodeCache`]: a hash of its type byte and fields, so that a value
/// is looked up without being copied into a [`DataStructure`] first.
pub(crate) fn fingerprint<T: WireObject>(value: Option<&T>) -> u64 {
    let mut hasher = FxHasher::default();
    match value {
        None => hasher.write_u8(0),
        Some(value) => {
            hasher.write_u8(1);
            hasher.write_u8(value.data_type());
            value.hash_fields(&mut hasher);
        }
    }
    hasher.finish()
}

/// What [`EncodeCache::find`] found under a fingerprint.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub(crate) enum Found {
    /// The value, in this slot.
    Slot(i16),
    /// Nothing: the value may be added.
    Nothing,
    /// Another value with the same fingerprint (a hash collision): the value cannot be
    /// cached while that one is.
    Other,
}

/// The sending side's cache.
#[derive(Debug)]
pub(crate) struct EncodeCache {
    /// The negotiated number of slots.
    size: usize,
    /// The slots handed out so far (they grow up to `size`, one by one: a connection that
    /// caches a few ids holds a few slots, not a thousand), with each value's fingerprint.
    slots: Vec<(CacheValue, u64)>,
    /// Fingerprint to slot.
    index: FxHashMap<u64, i16>,
    next: usize,
    next_eviction: usize,
    /// Additions of the command being encoded (slot, what the slot held, fingerprint
    /// indexed), so that a command that fails to encode leaves the cache as it was.
    journal: Vec<(usize, (CacheValue, u64), u64)>,
    journal_next: usize,
}

impl EncodeCache {
    /// A cache of `size` slots (at most `i16::MAX`, as indexes are shorts).
    pub(crate) fn new(size: usize) -> EncodeCache {
        let size = size.clamp(1, i16::MAX as usize);
        EncodeCache {
            size,
            slots: Vec::new(),
            index: FxHashMap::default(),
            next: 0,
            next_eviction: 0,
            journal: Vec::new(),
            journal_next: 0,
        }
    }

    /// Starts a command: what it adds can be undone with [`Self::rollback`].
    pub(crate) fn begin(&mut self) {
        self.journal.clear();
        self.journal_next = self.next;
    }

    /// Undoes the additions since [`Self::begin`].
    pub(crate) fn rollback(&mut self) {
        while let Some((slot, previous, key)) = self.journal.pop() {
            self.index.remove(&key);
            self.slots[slot] = previous;
        }
        self.next = self.journal_next;
    }

    /// Evicts the oldest entries until [`FREE_SLOTS`] are free; run before each command.
    pub(crate) fn sweep(&mut self) {
        let keep = self.size.saturating_sub(FREE_SLOTS);
        // Java loops `while size > length - 100`, which never ends for caches of at most 100
        // slots; stopping when the map is empty makes those caches merely useless.
        while self.index.len() > keep && !self.index.is_empty() {
            // A slot not handed out yet holds nothing, as Java's never-set `null`.
            let evicted = match self.slots.get_mut(self.next_eviction) {
                Some(slot) => std::mem::replace(slot, empty_slot()).1,
                None => empty_slot().1,
            };
            self.index.remove(&evicted);
            self.next_eviction = (self.next_eviction + 1) % self.size;
        }
    }

    /// The slot of the value with `fingerprint` for which `is_value` holds.
    pub(crate) fn find(&self, fingerprint: u64, is_value: impl Fn(&CacheValue) -> bool) -> Found {
        let Some(&slot) = self.index.get(&fingerprint) else { return Found::Nothing };
        match self.slots.get(slot as usize) {
            Some((value, _)) if is_value(value) => Found::Slot(slot),
            _ => Found::Other,
        }
    }

    /// Caches `value` (whose fingerprint is `fingerprint`) in the next slot; `-1` when the
    /// cache is full (the value is then sent in full every time).
    pub(crate) fn add(&mut self, fingerprint: u64, value: CacheValue) -> i16 {
        let slot = self.next;
        self.next = (self.next + 1) % self.size;
        if self.index.len() < self.size {
            if slot >= self.slots.len() {
                self.slots.resize_with(slot + 1, empty_slot);
            }
            let previous = std::mem::replace(&mut self.slots[slot], (value, fingerprint));
            self.journal.push((slot, previous, fingerprint));
            self.index.insert(fingerprint, slot as i16);
            // `slot` < size <= i16::MAX.
            slot as i16
        } else {
            -1
        }
    }
}

/// A slot holding nothing: Java's `null`, with its fingerprint.
fn empty_slot() -> (CacheValue, u64) {
    (None, fingerprint::<DataStructure>(None))
}

/// The receiving side's cache.
#[derive(Debug)]
pub(crate) struct DecodeCache {
    /// The negotiated number of slots.
    size: usize,
    /// `None`: never set; `Some(None)`: a cached `null`. Grows up to `size` as slots are set;
    /// a slot beyond its end was never set.
    slots: Vec<Option<CacheValue>>,
}

impl DecodeCache {
    /// A cache of `size` slots.
    pub(crate) fn new(size: usize) -> DecodeCache {
        let size = size.clamp(1, i16::MAX as usize);
        DecodeCache { size, slots: Vec::new() }
    }

    /// Checks that `index` may be stored (`-1`: the sender's cache was full; not stored).
    pub(crate) fn check(&self, index: i16) -> Result<Option<usize>, WireError> {
        if index == -1 {
            return Ok(None);
        }
        match usize::try_from(index) {
            Ok(i) if i < self.size => Ok(Some(i)),
            _ => Err(WireError::CacheIndexOutOfRange { index, size: self.size }),
        }
    }

    /// The value at `index`.
    pub(crate) fn get(&self, index: i16) -> Result<&CacheValue, WireError> {
        let i = self.check(index)?.ok_or(WireError::CacheMiss(index))?;
        self.slots.get(i).and_then(Option::as_ref).ok_or(WireError::CacheMiss(index))
    }

    /// Stores `value` at slot `i` (checked with [`Self::check`]).
    pub(crate) fn set(&mut self, i: usize, value: CacheValue) {
        if i >= self.size {
            return;
        }
        if i >= self.slots.len() {
            self.slots.resize(i + 1, None);
        }
        self.slots[i] = Some(value);
    }
}

#[cfg(test)]
mod tests {
    use super::*;
    use crate::openwire::commands::ConnectionId;

    fn id(n: usize) -> CacheValue {
        Some(DataStructure::ConnectionId(connection(n)))
    }

    fn connection(n: usize) -> ConnectionId {
        ConnectionId { value: format!("ID:{n}") }
    }

    /// Adds connection id `n` (`None`: null).
    fn add(c: &mut EncodeCache, n: Option<usize>) -> i16 {
        let id = n.map(connection);
        c.add(fingerprint(id.as_ref()), id.map(DataStructure::ConnectionId))
    }

    /// The slot of connection id `n` (`None`: null).
    fn get(c: &EncodeCache, n: Option<usize>) -> Option<i16> {
        let id = n.map(connection);
        let is_value = |v: &CacheValue| *v == id.clone().map(DataStructure::ConnectionId);
        match c.find(fingerprint(id.as_ref()), is_value) {
            Found::Slot(slot) => Some(slot),
            Found::Nothing | Found::Other => None,
        }
    }

    #[test]
    fn slots_are_handed_out_in_order_and_found_again() {
        let mut c = EncodeCache::new(1024);
        assert_eq!(add(&mut c, Some(0)), 0);
        assert_eq!(add(&mut c, None), 1);
        assert_eq!(get(&c, Some(0)), Some(0));
        assert_eq!(get(&c, None), Some(1));
        assert_eq!(get(&c, Some(2)), None);
    }

    #[test]
    fn another_value_with_the_same_fingerprint_is_not_taken_for_the_cached_one() {
        let mut c = EncodeCache::new(1024);
        let fingerprint = fingerprint(Some(&connection(0)));
        assert_eq!(c.add(fingerprint, id(0)), 0);
        assert_eq!(c.find(fingerprint, |v| *v == id(0)), Found::Slot(0));
        assert_eq!(c.find(fingerprint, |v| *v == id(1)), Found::Other);
    }

    #[test]
    fn the_sweep_keeps_a_hundred_slots_free() {
        let mut c = EncodeCache::new(200);
        for n in 0..150 {
            c.sweep();
            add(&mut c, Some(n));
        }
        c.sweep();
        assert_eq!(get(&c, Some(0)), None);
        assert_eq!(get(&c, Some(49)), None);
        assert_eq!(get(&c, Some(50)), Some(50));
        assert_eq!(add(&mut c, Some(150)), 150);
    }

    #[test]
    fn rollback_forgets_the_failed_commands_additions() {
        let mut c = EncodeCache::new(1024);
        c.begin();
        add(&mut c, Some(0));
        c.begin();
        add(&mut c, Some(1));
        c.rollback();
        assert_eq!(get(&c, Some(0)), Some(0));
        assert_eq!(get(&c, Some(1)), None);
        assert_eq!(add(&mut c, Some(2)), 1);
    }

    #[test]
    fn tiny_caches_do_not_loop_forever() {
        let mut c = EncodeCache::new(10);
        add(&mut c, Some(1));
        c.sweep();
        assert_eq!(get(&c, Some(1)), None);
    }

    #[test]
    fn caches_hold_only_the_slots_they_used() {
        let mut encode = EncodeCache::new(1024);
        add(&mut encode, Some(0));
        add(&mut encode, Some(1));
        assert_eq!(encode.slots.len(), 2);
        let mut decode = DecodeCache::new(1024);
        decode.set(2, id(2));
        assert_eq!(decode.slots.len(), 3);
        assert_eq!(decode.get(1), Err(WireError::CacheMiss(1)));
        assert_eq!(decode.get(900), Err(WireError::CacheMiss(900)));
        assert_eq!(decode.get(2), Ok(&id(2)));
    }

    #[test]
    fn the_decoder_rejects_unknown_and_out_of_range_slots() {
        let mut c = DecodeCache::new(4);
        assert_eq!(c.get(0), Err(WireError::CacheMiss(0)));
        assert!(matches!(c.check(4), Err(WireError::CacheIndexOutOfRange { .. })));
        assert_eq!(c.check(-1), Ok(None));
        c.set(0, None);
        assert_eq!(c.get(0), Ok(&None));
    }
}
