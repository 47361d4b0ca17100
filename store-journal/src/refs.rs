//! The compact ordered map behind each stored queue: message id -> where its body is.
//!
//! One [`RefList`] per queue and priority level. It is a B-tree of sorted chunks of up to
//! [`CHUNK`] entries of 16 bytes (the id's distance from the chunk's key as a `u32`, the
//! record size, the packed location) rather than a `BTreeMap<u64, _>` per reference, so a
//! reference costs about 16 bytes instead of ~40-60: two million pending references take
//! ~32 MB (see `heap_bytes` and the test `two_million_references_take_about_32_mb`). A chunk
//! spans less than 2^32 ids; an id further from the chunk before it starts a chunk of its own. Ids arrive nearly in order, so inserts are
//! appends to the last chunk, and a full last chunk starts a new one (chunks stay full).
//! Acks from the front remove from the first chunk; a chunk that drains to a quarter of its
//! capacity is shrunk.

use std::collections::BTreeMap;

/// A body's location: segment file number in the high 32 bits, offset in the low 32 bits.
/// While the body's add record waits for the writer, the location is [`PENDING`] | the add's
/// token instead (file numbers stay below 2^31, so real locations never have that bit).
pub type Loc = u64;

/// Marks a location that is not assigned yet (see [`Loc`]).
pub const PENDING: Loc = 1 << 63;

pub fn loc(file: u32, offset: u32) -> Loc {
    (u64::from(file) << 32) | u64::from(offset)
}

pub fn loc_file(loc: Loc) -> u32 {
    (loc >> 32) as u32
}

pub fn loc_offset(loc: Loc) -> u32 {
    loc as u32
}

pub fn is_pending(loc: Loc) -> bool {
    loc & PENDING != 0
}

/// The most references in one chunk.
pub const CHUNK: usize = 512;

/// One reference, as the index hands it out.
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub struct Slot {
    pub id: u64,
    pub loc: Loc,
    /// Bytes of the body's record (header included).
    pub size: u32,
}

impl Slot {
    pub fn id(&self) -> u64 {
        self.id
    }

    pub fn loc(&self) -> Loc {
        self.loc
    }

    pub fn size(&self) -> u32 {
        self.size
    }
}

/// One reference as a chunk stores it: 16 bytes, the id as its distance from the chunk's
/// key (a chunk spans less than 2^32 ids), so that 2,000,000 references take 32 MB, not the
/// 40 MB of a whole id per reference.
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
struct Entry {
    /// The id minus the chunk's key.
    delta: u32,
    size: u32,
    loc: Loc,
}

impl Entry {
    fn slot(self, key: u64) -> Slot {
        Slot { id: key + u64::from(self.delta), loc: self.loc, size: self.size }
    }
}

/// The entry of `slot` in the chunk keyed `key`, if its id is in the chunk's span.
fn entry(key: u64, slot: Slot) -> Option<Entry> {
    let delta = u32::try_from(slot.id.checked_sub(key)?).ok()?;
    Some(Entry { delta, size: slot.size, loc: slot.loc })
}

/// The references of one queue at one priority, ordered by id.
#[derive(Debug, Default, Clone)]
pub struct RefList {
    /// Keyed by a lower bound of the chunk's ids (above every id of the chunk before it);
    /// every id of a chunk is less than 2^32 above its key.
    chunks: BTreeMap<u64, Vec<Entry>>,
    len: usize,
}

/// Estimated heap bytes of one chunk besides its entries (B-tree entry and node share).
const CHUNK_OVERHEAD: usize = 64;

impl RefList {
    pub fn len(&self) -> usize {
        self.len
    }

    fn chunk_key(&self, id: u64) -> Option<u64> {
        self.chunks.range(..=id).next_back().map(|(key, _)| *key)
    }

    /// The chunk that would hold `id` and the position of `id` in it (`Ok`: there).
    fn find(&self, id: u64) -> Option<(u64, Result<usize, usize>)> {
        let key = self.chunk_key(id)?;
        let chunk = self.chunks.get(&key)?;
        let delta = u32::try_from(id - key).ok()?;
        Some((key, chunk.binary_search_by_key(&delta, |e| e.delta)))
    }

    pub fn get(&self, id: u64) -> Option<Slot> {
        let (key, Ok(at)) = self.find(id)? else { return None };
        Some(self.chunks.get(&key)?.get(at)?.slot(key))
    }

    /// Sets the location of the reference to `id`; false if there is none.
    pub fn relocate(&mut self, id: u64, loc: Loc, size: u32) -> bool {
        let Some((key, Ok(at))) = self.find(id) else { return false };
        let Some(entry) = self.chunks.get_mut(&key).and_then(|chunk| chunk.get_mut(at)) else {
            return false;
        };
        entry.loc = loc;
        entry.size = size;
        true
    }

    /// Starts a chunk keyed `slot`'s id holding only it.
    fn new_chunk(&mut self, slot: Slot, capacity: usize) {
        let mut chunk = Vec::with_capacity(capacity);
        chunk.push(Entry { delta: 0, size: slot.size, loc: slot.loc });
        self.chunks.insert(slot.id, chunk);
        self.len += 1;
    }

    /// Inserts `slot`; false (and nothing changes) if the id is already there.
    pub fn insert(&mut self, slot: Slot) -> bool {
        let id = slot.id;
        let Some(key) = self.chunk_key(id) else {
            // Below every chunk: the first chunk takes it under a lower key, if its ids stay
            // within 2^32 of it; otherwise it starts a chunk of its own.
            let rekeyed = match self.chunks.first_key_value() {
                Some((&first, chunk)) => chunk
                    .last()
                    .is_some_and(|last| first + u64::from(last.delta) - id <= u64::from(u32::MAX))
                    .then_some(first),
                None => None,
            };
            match rekeyed.and_then(|first| Some((first, self.chunks.remove(&first)?))) {
                Some((first, mut chunk)) => {
                    let shift = (first - id) as u32;
                    for entry in &mut chunk {
                        entry.delta += shift;
                    }
                    chunk.insert(0, Entry { delta: 0, size: slot.size, loc: slot.loc });
                    self.chunks.insert(id, chunk);
                    self.len += 1;
                }
                None => self.new_chunk(slot, 4),
            }
            return true;
        };
        let Some(new) = entry(key, slot) else {
            // Beyond the span of the chunk before it, so above all of its ids: a chunk of its
            // own.
            self.new_chunk(slot, 4);
            return true;
        };
        let Some(chunk) = self.chunks.get_mut(&key) else { return false };
        let at = match chunk.binary_search_by_key(&new.delta, |e| e.delta) {
            Ok(_) => return false,
            Err(at) => at,
        };
        if chunk.len() < CHUNK {
            chunk.insert(at, new);
            self.len += 1;
            return true;
        }
        if at == chunk.len() {
            // Appending to a full chunk: start the next one (ids mostly arrive in order).
            self.new_chunk(slot, CHUNK);
            return true;
        }
        // Split: near the end keep the left chunk full, else halve.
        let split = if at >= CHUNK * 3 / 4 { at } else { CHUNK / 2 };
        let mut tail = chunk.split_off(split);
        if at < split {
            chunk.insert(at, new);
        } else {
            tail.insert(at - split, new);
        }
        // The tail's key is its first id; its entries are rebased on it.
        let base = tail.first().map_or(0, |e| e.delta);
        for entry in &mut tail {
            entry.delta -= base;
        }
        self.chunks.insert(key + u64::from(base), tail);
        self.len += 1;
        true
    }

    /// Removes the reference to `id`.
    pub fn remove(&mut self, id: u64) -> Option<Slot> {
        let (key, Ok(at)) = self.find(id)? else { return None };
        let chunk = self.chunks.get_mut(&key)?;
        let slot = chunk.remove(at).slot(key);
        self.len -= 1;
        if chunk.is_empty() {
            self.chunks.remove(&key);
        } else if chunk.capacity() > 16 && chunk.len() < chunk.capacity() / 4 {
            chunk.shrink_to(chunk.len() * 2);
        }
        Some(slot)
    }

    /// References with an id above `after` (all when `None`), in id order.
    pub fn iter_after(&self, after: Option<u64>) -> impl Iterator<Item = Slot> + '_ {
        let start = after.and_then(|after| self.chunk_key(after));
        let chunks = match start {
            Some(key) => self.chunks.range(key..),
            None => self.chunks.range(..),
        };
        chunks
            .flat_map(|(&key, chunk)| chunk.iter().map(move |entry| entry.slot(key)))
            .skip_while(move |slot| after.is_some_and(|after| slot.id() <= after))
    }

    pub fn iter(&self) -> impl Iterator<Item = Slot> + '_ {
        self.chunks.iter().flat_map(|(&key, chunk)| chunk.iter().map(move |e| e.slot(key)))
    }

    /// An estimate of the heap bytes this list holds.
    pub fn heap_bytes(&self) -> usize {
        self.chunks
            .values()
            .map(|chunk| chunk.capacity() * std::mem::size_of::<Entry>() + CHUNK_OVERHEAD)
            .sum()
    }
}

/// The priority levels of JMS (0-9).
pub const LEVELS: usize = 10;

/// One stored queue: a [`RefList`] per priority.
#[derive(Debug, Default, Clone)]
pub struct QueueRefs {
    pub levels: [RefList; LEVELS],
    count: usize,
}

impl QueueRefs {
    pub fn count(&self) -> usize {
        self.count
    }

    pub fn is_empty(&self) -> bool {
        self.count == 0
    }

    pub fn get(&self, priority: u8, id: u64) -> Option<Slot> {
        self.levels.get(usize::from(priority))?.get(id)
    }

    pub fn insert(&mut self, priority: u8, slot: Slot) -> bool {
        let Some(level) = self.levels.get_mut(usize::from(priority)) else { return false };
        let inserted = level.insert(slot);
        self.count += usize::from(inserted);
        inserted
    }

    pub fn remove(&mut self, priority: u8, id: u64) -> Option<Slot> {
        let slot = self.levels.get_mut(usize::from(priority))?.remove(id)?;
        self.count -= 1;
        Some(slot)
    }

    pub fn relocate(&mut self, priority: u8, id: u64, loc: Loc, size: u32) -> bool {
        self.levels
            .get_mut(usize::from(priority))
            .is_some_and(|level| level.relocate(id, loc, size))
    }

    /// Every reference with its priority, highest priority first, then by id.
    pub fn iter(&self) -> impl Iterator<Item = (u8, Slot)> + '_ {
        (0..LEVELS as u8)
            .rev()
            .flat_map(move |p| self.levels[usize::from(p)].iter().map(move |s| (p, s)))
    }

    pub fn heap_bytes(&self) -> usize {
        self.levels.iter().map(RefList::heap_bytes).sum()
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    fn slot(id: u64) -> Slot {
        Slot { id, loc: loc(1, id as u32), size: 100 }
    }

    #[test]
    fn an_entry_is_sixteen_bytes() {
        assert_eq!(std::mem::size_of::<Entry>(), 16);
    }

    /// Ids more than 2^32 apart cannot share a chunk: each insert order still works.
    #[test]
    fn ids_far_apart_keep_their_order() {
        let far = 1u64 << 33;
        let ids = [far + 5, 3, far * 3, far + 4, 2, far * 3 + 1, u64::MAX - 1, 1, far * 2];
        let mut list = RefList::default();
        for id in ids {
            assert!(list.insert(slot(id)));
            assert!(!list.insert(slot(id)), "duplicate {id} refused");
        }
        let mut sorted = ids.to_vec();
        sorted.sort_unstable();
        assert!(list.iter().map(|s| s.id()).eq(sorted.iter().copied()));
        assert!(list.iter_after(Some(far)).map(|s| s.id()).eq(sorted[3..].iter().copied()));
        for id in ids {
            assert_eq!(list.get(id), Some(slot(id)));
        }
        assert_eq!(list.get(far), None);
        assert!(list.relocate(far * 3, loc(9, 9), 7));
        assert_eq!(list.get(far * 3).map(|s| (s.loc(), s.size())), Some((loc(9, 9), 7)));
        for id in ids {
            assert_eq!(list.remove(id).map(|s| s.id()), Some(id));
        }
        assert_eq!(list.len(), 0);
        assert_eq!(list.iter().count(), 0);
    }

    /// Full chunks split wherever an id lands in them, and a lower id re-keys the first.
    #[test]
    fn splits_and_rekeys_keep_every_reference() {
        let mut list = RefList::default();
        for id in (1000..1000 + 3 * CHUNK as u64).map(|n| n * 2) {
            assert!(list.insert(slot(id)));
        }
        // Into the middle and near the end of full chunks, and below the first.
        let extra: Vec<u64> =
            (0..CHUNK as u64).map(|n| 2001 + n * 6).chain([11, 7, 1999]).collect();
        for id in &extra {
            assert!(list.insert(slot(*id)));
        }
        let mut all: Vec<u64> = (1000..1000 + 3 * CHUNK as u64).map(|n| n * 2).collect();
        all.extend(&extra);
        all.sort_unstable();
        assert_eq!(list.len(), all.len());
        assert!(list.iter().map(|s| s.id()).eq(all.iter().copied()));
        for id in &all {
            assert_eq!(list.get(*id), Some(slot(*id)), "{id}");
        }
    }

    #[test]
    fn inserts_in_any_order_iterate_in_id_order() {
        use rand::seq::SliceRandom;
        let mut ids: Vec<u64> = (1..=5000).collect();
        ids.shuffle(&mut rand::thread_rng());
        let mut list = RefList::default();
        for id in &ids {
            assert!(list.insert(slot(*id)));
        }
        assert!(!list.insert(slot(17)), "duplicates refused");
        assert_eq!(list.len(), 5000);
        assert!(list.iter().map(|s| s.id()).eq(1..=5000));
        assert!(list.iter_after(Some(4000)).map(|s| s.id()).eq(4001..=5000));
        assert!(list.iter_after(Some(0)).map(|s| s.id()).eq(1..=5000));
        for id in (1..=5000).filter(|id| id % 3 != 0) {
            assert_eq!(list.remove(id).map(|s| s.id()), Some(id));
        }
        assert_eq!(list.remove(1), None);
        assert!(list.iter().map(|s| s.id()).eq((1..=5000).filter(|id| id % 3 == 0)));
        assert!(list.iter_after(Some(10)).map(|s| s.id()).eq((11..=5000).filter(|id| id % 3 == 0)));
        assert_eq!(list.get(9).map(|s| s.id()), Some(9));
        assert!(list.get(10).is_none());
        assert!(list.relocate(9, loc(7, 7), 5));
        assert_eq!(list.get(9).map(|s| (s.loc(), s.size())), Some((loc(7, 7), 5)));
    }

    #[test]
    fn two_million_references_take_about_32_mb() {
        let mut queue = QueueRefs::default();
        for id in 1..=2_000_000u64 {
            // Mostly in order, some pairs swapped (concurrent producers).
            let id = match id % 97 {
                0 => id + 1,
                1 if id > 1 => id - 1,
                _ => id,
            };
            queue.insert((id % 10) as u8, slot(id));
        }
        let bytes = queue.heap_bytes();
        assert_eq!(queue.count(), 2_000_000);
        assert!(bytes < 34 * 1000 * 1000, "index of 2M references takes {bytes} bytes");
        eprintln!("2M references: {:.1} MiB", bytes as f64 / (1024.0 * 1024.0));
    }
}
