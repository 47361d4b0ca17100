//! The compact ordered map behind each stored queue: message id -> where its body is.
//!
//! One [`RefList`] per queue and priority level. It is a B-tree of sorted chunks of up to
//! [`CHUNK`] [`Slot`]s (20 bytes each: id, packed location, record size) rather than a
//! `BTreeMap<u64, _>` per reference, so a reference costs about 20 bytes instead of ~40-60:
//! two million pending references take ~40 MB (see `heap_bytes` and the test
//! `two_million_references_fit_in_64_mib`). Ids arrive nearly in order, so inserts are
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

/// One reference: 20 bytes (packed to 4-byte alignment).
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
#[repr(C, packed(4))]
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

/// The references of one queue at one priority, ordered by id.
#[derive(Debug, Default, Clone)]
pub struct RefList {
    /// Keyed by a lower bound of the chunk's ids (above every id of the chunk before it).
    chunks: BTreeMap<u64, Vec<Slot>>,
    len: usize,
}

/// Estimated heap bytes of one chunk besides its slots (B-tree entry and node share).
const CHUNK_OVERHEAD: usize = 64;

impl RefList {
    #[cfg(test)]
    pub fn len(&self) -> usize {
        self.len
    }

    fn chunk_key(&self, id: u64) -> Option<u64> {
        self.chunks.range(..=id).next_back().map(|(key, _)| *key)
    }

    pub fn get(&self, id: u64) -> Option<Slot> {
        let chunk = self.chunks.get(&self.chunk_key(id)?)?;
        let at = chunk.binary_search_by_key(&id, Slot::id).ok()?;
        chunk.get(at).copied()
    }

    /// Sets the location of the reference to `id`; false if there is none.
    pub fn relocate(&mut self, id: u64, loc: Loc, size: u32) -> bool {
        let Some(key) = self.chunk_key(id) else { return false };
        let Some(chunk) = self.chunks.get_mut(&key) else { return false };
        match chunk.binary_search_by_key(&id, Slot::id) {
            Ok(at) => {
                chunk[at].loc = loc;
                chunk[at].size = size;
                true
            }
            Err(_) => false,
        }
    }

    /// Inserts `slot`; false (and nothing changes) if the id is already there.
    pub fn insert(&mut self, slot: Slot) -> bool {
        let id = slot.id;
        let key = match self.chunk_key(id) {
            Some(key) => key,
            None => match self.chunks.pop_first() {
                // Below every chunk: the first chunk takes it, under a lower key.
                Some((_, chunk)) => {
                    self.chunks.insert(id, chunk);
                    id
                }
                None => {
                    self.chunks.insert(id, Vec::with_capacity(4));
                    id
                }
            },
        };
        let Some(chunk) = self.chunks.get_mut(&key) else { return false };
        let at = match chunk.binary_search_by_key(&id, Slot::id) {
            Ok(_) => return false,
            Err(at) => at,
        };
        self.len += 1;
        if chunk.len() < CHUNK {
            chunk.insert(at, slot);
            return true;
        }
        if at == chunk.len() {
            // Appending to a full chunk: start the next one (ids mostly arrive in order).
            let mut next = Vec::with_capacity(CHUNK);
            next.push(slot);
            self.chunks.insert(id, next);
            return true;
        }
        // Split: near the end keep the left chunk full, else halve.
        let split = if at >= CHUNK * 3 / 4 { at } else { CHUNK / 2 };
        let mut tail = chunk.split_off(split);
        if at < split {
            chunk.insert(at, slot);
        } else {
            tail.insert(at - split, slot);
        }
        let tail_key = tail.first().map_or(id, Slot::id);
        self.chunks.insert(tail_key, tail);
        true
    }

    /// Removes the reference to `id`.
    pub fn remove(&mut self, id: u64) -> Option<Slot> {
        let key = self.chunk_key(id)?;
        let chunk = self.chunks.get_mut(&key)?;
        let at = chunk.binary_search_by_key(&id, Slot::id).ok()?;
        let slot = chunk.remove(at);
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
            .flat_map(|(_, chunk)| chunk.iter().copied())
            .skip_while(move |slot| after.is_some_and(|after| slot.id() <= after))
    }

    pub fn iter(&self) -> impl Iterator<Item = Slot> + '_ {
        self.chunks.values().flat_map(|chunk| chunk.iter().copied())
    }

    /// An estimate of the heap bytes this list holds.
    pub fn heap_bytes(&self) -> usize {
        self.chunks
            .values()
            .map(|chunk| chunk.capacity() * std::mem::size_of::<Slot>() + CHUNK_OVERHEAD)
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
    fn slot_is_twenty_bytes() {
        assert_eq!(std::mem::size_of::<Slot>(), 20);
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
    fn two_million_references_fit_in_64_mib() {
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
        assert!(bytes < 64 * 1024 * 1024, "index of 2M references takes {bytes} bytes");
        eprintln!("2M references: {:.1} MiB", bytes as f64 / (1024.0 * 1024.0));
    }
}
