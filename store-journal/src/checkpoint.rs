//! Checkpoints: the index written to a snapshot file, so that recovery replays only the
//! journal after it.
//!
//! A snapshot is `index-<seq>.snapshot`, holding: the journal position it covers (replay
//! starts there), the next message id, destinations, subscriptions, every queue's
//! references (id, priority, location, record size), the reference counts of shared bodies,
//! the open transactions (operations with the locations of their records) and the live bytes
//! of every data file. It is written to a `.tmp` file, synced, renamed and the directory
//! synced; the two newest are kept (a damaged newest one falls back to the one before, whose
//! files reclaiming keeps, see [`crate::compaction`]).
//!
//! File format: `FMQSNAP2`, payload length (u64 LE), CRC32C of the payload (u32 LE), payload
//! (prost [`SnapshotRecord`]). A snapshot that fails its checksum or does not decode is
//! ignored (and renamed `*.corrupt`): recovery then uses an older one, or replays everything.
//!
//! **References are delta-encoded** (`QueueSnapshot::packed`, format 2): per priority level,
//! varints of the id's increase, the location's and the size's change, 4 to 6 bytes a
//! reference instead of format 1's fixed 21 (`QueueSnapshot::entries`, still read). A
//! checkpoint holds its encoding in memory from the capture to the write, so this is what a
//! checkpoint of 2,000,000 references costs: ~8 MB, where format 1 took 42 MB plus a second
//! copy of it for the framing. The encoding is kept as pieces ([`Encoded`]), each queue's
//! references one piece, written one after the other: never copied into one buffer.

use std::collections::{BTreeMap, BTreeSet, HashSet};
use std::path::Path;

use prost::encoding::{decode_varint, encode_key, encode_varint, encoded_len_varint, WireType};
use prost::Message as _;
use store::record::{DestinationRecord, QueueKeyRecord, SubscriptionRecord};
use store::{
    Destination, Failpoints, MessageId, PageKey, QueueKey, StoreError, SubscriptionInfo, TxnId,
};

use crate::disk::Disk;
use crate::index::{Index, Txn, TxnOp};
use crate::refs::{is_pending, loc, loc_file, loc_offset, QueueRefs, Slot, LEVELS};
use crate::{io_error, FP_CHECKPOINT, FP_DELETE, FP_READ, FP_SYNC};

/// Snapshots written now (delta-encoded references).
const MAGIC: &[u8; 8] = b"FMQSNAP2";
/// Snapshots of earlier versions (fixed 21-byte references), still read. A version that
/// knows only this one sets a newer snapshot aside as damaged instead of misreading it.
const MAGIC_V1: &[u8; 8] = b"FMQSNAP1";
/// Magic, payload length, CRC32C.
const HEADER: usize = 20;
const PREFIX: &str = "index-";
const SUFFIX: &str = ".snapshot";

/// A journal position: replay starts at `offset` of segment `file`.
#[derive(Debug, Clone, Copy, PartialEq, Eq, PartialOrd, Ord)]
pub struct Position {
    pub file: u32,
    pub offset: u64,
}

/// Live bytes per data file at a checkpoint.
#[derive(Debug, Clone, Default)]
pub struct Live {
    /// Bytes of live add records and of open transactions' records, per file.
    pub bytes: BTreeMap<u32, u64>,
    /// Files holding records of open transactions (never compacted).
    pub txn_files: BTreeSet<u32>,
}

impl Live {
    pub fn of(&self, file: u32) -> u64 {
        self.bytes.get(&file).copied().unwrap_or(0)
    }
}

#[derive(Clone, PartialEq, prost::Message)]
pub struct SnapshotRecord {
    #[prost(uint32, tag = "1")]
    pub position_file: u32,
    #[prost(uint64, tag = "2")]
    pub position_offset: u64,
    #[prost(uint64, tag = "3")]
    pub next_message_id: u64,
    #[prost(message, repeated, tag = "4")]
    pub destinations: Vec<DestinationRecord>,
    #[prost(message, repeated, tag = "5")]
    pub subscriptions: Vec<SubscriptionRecord>,
    #[prost(message, repeated, tag = "6")]
    pub queues: Vec<QueueSnapshot>,
    #[prost(message, repeated, tag = "7")]
    pub txns: Vec<TxnSnapshot>,
    /// (id u64, count u32) LE, for bodies referenced by two queues or more.
    #[prost(bytes = "vec", tag = "8")]
    pub multi: Vec<u8>,
    /// (file u32, bytes u64) LE.
    #[prost(bytes = "vec", tag = "9")]
    pub live: Vec<u8>,
}

#[derive(Clone, PartialEq, prost::Message)]
pub struct QueueSnapshot {
    #[prost(message, optional, tag = "1")]
    pub key: Option<QueueKeyRecord>,
    /// Format 1 (read only): (priority u8, id u64, location u64, size u32) LE, 21 bytes each.
    #[prost(bytes = "vec", tag = "2")]
    pub entries: Vec<u8>,
    /// Format 2: see [`pack_refs`].
    #[prost(bytes = "vec", tag = "3")]
    pub packed: Vec<u8>,
}

#[derive(Clone, PartialEq, prost::Message)]
pub struct TxnSnapshot {
    #[prost(uint64, tag = "1")]
    pub txn: u64,
    #[prost(bool, tag = "2")]
    pub prepared: bool,
    #[prost(message, repeated, tag = "3")]
    pub ops: Vec<TxnOpSnapshot>,
    /// (file u32, size u32) LE.
    #[prost(bytes = "vec", tag = "4")]
    pub records: Vec<u8>,
}

#[derive(Clone, PartialEq, prost::Message)]
pub struct TxnOpSnapshot {
    /// An ack (of `id` at `priority` in `queues[0]`) rather than an add.
    #[prost(bool, tag = "1")]
    pub ack: bool,
    #[prost(uint64, tag = "2")]
    pub id: u64,
    #[prost(uint32, tag = "3")]
    pub priority: u32,
    #[prost(message, repeated, tag = "4")]
    pub queues: Vec<QueueKeyRecord>,
    #[prost(uint64, tag = "5")]
    pub loc: u64,
    #[prost(uint32, tag = "6")]
    pub size: u32,
}

const ENTRY: usize = 21;

/// A snapshot ready to write: the file's bytes as pieces, in order (the header first).
pub struct Encoded {
    pieces: Vec<Vec<u8>>,
}

impl Encoded {
    /// The file's size.
    pub fn len(&self) -> usize {
        self.pieces.iter().map(Vec::len).sum()
    }

    /// The pieces, in file order.
    pub fn pieces(&self) -> impl Iterator<Item = &[u8]> {
        self.pieces.iter().map(Vec::as_slice)
    }

    /// The whole file in one buffer (tests).
    #[cfg(test)]
    pub fn to_vec(&self) -> Vec<u8> {
        self.pieces.concat()
    }
}

/// The references of one queue, format 2: for each priority level that has any, highest
/// first, `varint priority, varint count`, then per reference in id order `varint (id -
/// previous id)`, `varint zigzag(file - previous file)`, `varint zigzag(offset - previous
/// end)` (the previous offset plus size: where the record would be if it followed the
/// previous one), `varint zigzag(size - previous size)`, the previous values starting at 0 on
/// each level. Ids arrive nearly in order, records lie one after the other and messages are
/// often alike, so a reference takes 4 to 6 bytes.
fn pack_refs(refs: &QueueRefs) -> Vec<u8> {
    // A first guess that rarely needs to grow much: one allocation of about the final size.
    let mut out = Vec::with_capacity(refs.count() * 5 + 16);
    for priority in (0..LEVELS as u8).rev() {
        let level = &refs.levels[usize::from(priority)];
        let count = level.len();
        if count == 0 {
            continue;
        }
        encode_varint(u64::from(priority), &mut out);
        encode_varint(count as u64, &mut out);
        let (mut id, mut file, mut end, mut size) = (0u64, 0i64, 0i64, 0i64);
        for slot in level.iter() {
            let (slot_file, slot_offset, slot_size) = (
                i64::from(loc_file(slot.loc())),
                i64::from(loc_offset(slot.loc())),
                i64::from(slot.size()),
            );
            encode_varint(slot.id().wrapping_sub(id), &mut out);
            encode_varint(zigzag(slot_file - file), &mut out);
            encode_varint(zigzag(slot_offset - end), &mut out);
            encode_varint(zigzag(slot_size - size), &mut out);
            (id, file, end, size) = (slot.id(), slot_file, slot_offset + slot_size, slot_size);
        }
    }
    out
}

fn zigzag(value: i64) -> u64 {
    ((value << 1) ^ (value >> 63)) as u64
}

fn unzigzag(value: u64) -> i64 {
    ((value >> 1) as i64) ^ -((value & 1) as i64)
}

/// Reads [`pack_refs`]' encoding into `refs`.
fn unpack_refs(mut bytes: &[u8], refs: &mut QueueRefs) -> Result<(), StoreError> {
    let bytes = &mut bytes;
    let varint = |bytes: &mut &[u8]| {
        decode_varint(bytes).map_err(|e| corrupt(format!("queue references: {e}")))
    };
    while !bytes.is_empty() {
        let level = varint(bytes)?;
        let priority = u8::try_from(level)
            .ok()
            .filter(|p| usize::from(*p) < LEVELS)
            .ok_or_else(|| corrupt("priority out of range"))?;
        let count = varint(bytes)?;
        let (mut id, mut file, mut end, mut size) = (0u64, 0i64, 0i64, 0i64);
        for _ in 0..count {
            id = id.wrapping_add(varint(bytes)?);
            file = file.wrapping_add(unzigzag(varint(bytes)?));
            let offset = end.wrapping_add(unzigzag(varint(bytes)?));
            size = size.wrapping_add(unzigzag(varint(bytes)?));
            end = offset.wrapping_add(size);
            let (Ok(slot_file), Ok(slot_offset), Ok(slot_size)) =
                (u32::try_from(file), u32::try_from(offset), u32::try_from(size))
            else {
                return Err(corrupt("reference location or size out of range"));
            };
            let slot = Slot { id, loc: loc(slot_file, slot_offset), size: slot_size };
            if is_pending(slot.loc()) {
                return Err(corrupt("reference without a location"));
            }
            refs.insert(priority, slot);
        }
    }
    Ok(())
}

/// Appends the key and length of a length-delimited field of a prost message.
fn field_header(tag: u32, len: usize, out: &mut Vec<u8>) {
    encode_key(tag, WireType::LengthDelimited, out);
    encode_varint(len as u64, out);
}

/// Encodes the index as a snapshot covering `position`, and computes the live bytes per
/// file. The index must hold no pending adds (the writer captures it right after placing
/// every submitted unit).
///
/// The payload is a [`SnapshotRecord`] written by hand in pieces: prost merges repeated
/// fields that occur more than once, so the record without its queues comes first and then,
/// per queue, the field `queues` framing a [`QueueSnapshot`] whose `packed` references are a
/// piece of their own (the framing needs only their length).
pub fn encode(index: &Index, position: Position) -> (Encoded, Live) {
    let mut live = Live::default();
    let mut shared_seen: HashSet<u64> = HashSet::new();
    let mut pieces = vec![Vec::new()];
    for (key, refs) in &index.queues {
        for (_, slot) in refs.iter() {
            let (id, loc, size) = (slot.id(), slot.loc(), slot.size());
            if is_pending(loc) {
                continue;
            }
            if !index.multi.contains_key(&id) || shared_seen.insert(loc) {
                *live.bytes.entry(loc_file(loc)).or_insert(0) += u64::from(size);
            }
        }
        let packed = pack_refs(refs);
        let key = QueueKeyRecord::from(key);
        let key_len = key.encoded_len();
        let packed_header = {
            let mut header = Vec::new();
            field_header(3, packed.len(), &mut header);
            header
        };
        let queue_len = key_len + prost::encoding::key_len(1) + encoded_len_varint(key_len as u64);
        let queue_len = queue_len + packed_header.len() + packed.len();
        let mut framing = Vec::with_capacity(32 + key_len);
        field_header(6, queue_len, &mut framing);
        field_header(1, key_len, &mut framing);
        key.encode_raw(&mut framing);
        framing.extend_from_slice(&packed_header);
        pieces.push(framing);
        pieces.push(packed);
    }
    let mut txns = Vec::with_capacity(index.txns.len());
    for (txn, t) in &index.txns {
        let mut records = Vec::with_capacity(t.records.len() * 8);
        for (file, size) in &t.records {
            records.extend_from_slice(&file.to_le_bytes());
            records.extend_from_slice(&size.to_le_bytes());
            *live.bytes.entry(*file).or_insert(0) += u64::from(*size);
            live.txn_files.insert(*file);
        }
        let ops = t
            .ops
            .iter()
            .map(|op| match op {
                TxnOp::Add { id, priority, queues, loc, size } => TxnOpSnapshot {
                    ack: false,
                    id: id.0,
                    priority: u32::from(*priority),
                    queues: queues.iter().map(QueueKeyRecord::from).collect(),
                    loc: *loc,
                    size: *size,
                },
                TxnOp::Ack { queue, key } => TxnOpSnapshot {
                    ack: true,
                    id: key.id.0,
                    priority: u32::from(key.priority),
                    queues: vec![QueueKeyRecord::from(queue)],
                    loc: 0,
                    size: 0,
                },
            })
            .collect();
        txns.push(TxnSnapshot { txn: txn.0, prepared: t.prepared, ops, records });
    }
    let mut multi = Vec::with_capacity(index.multi.len() * 12);
    for (id, count) in &index.multi {
        multi.extend_from_slice(&id.to_le_bytes());
        multi.extend_from_slice(&count.to_le_bytes());
    }
    let mut live_bytes = Vec::with_capacity(live.bytes.len() * 12);
    for (file, bytes) in &live.bytes {
        live_bytes.extend_from_slice(&file.to_le_bytes());
        live_bytes.extend_from_slice(&bytes.to_le_bytes());
    }
    let record = SnapshotRecord {
        position_file: position.file,
        position_offset: position.offset,
        next_message_id: index.next_message_id,
        destinations: index.destinations.iter().map(DestinationRecord::from).collect(),
        subscriptions: index.subscriptions.values().map(SubscriptionRecord::from).collect(),
        queues: Vec::new(),
        txns,
        multi,
        live: live_bytes,
    };
    // The header goes first but depends on the whole payload: a placeholder, filled in once
    // every piece is there.
    let head = &mut pieces[0];
    head.reserve(HEADER + record.encoded_len());
    head.extend_from_slice(MAGIC);
    head.extend_from_slice(&[0u8; HEADER - 8]);
    record.encode_raw(head);
    let mut crc = crc32c::crc32c(&pieces[0][HEADER..]);
    let mut payload_len = pieces[0].len() - HEADER;
    for piece in &pieces[1..] {
        crc = crc32c::crc32c_append(crc, piece);
        payload_len += piece.len();
    }
    pieces[0][8..16].copy_from_slice(&(payload_len as u64).to_le_bytes());
    pieces[0][16..HEADER].copy_from_slice(&crc.to_le_bytes());
    (Encoded { pieces }, live)
}

/// A snapshot read back.
#[derive(Debug)]
pub struct Snapshot {
    pub seq: u64,
    pub position: Position,
    pub live: Live,
    pub index: Index,
}

fn corrupt(reason: impl Into<String>) -> StoreError {
    StoreError::Corrupt { location: "index snapshot".into(), reason: reason.into() }
}

fn chunks<const N: usize>(bytes: &[u8], what: &str) -> Result<Vec<[u8; N]>, StoreError> {
    if !bytes.len().is_multiple_of(N) {
        return Err(corrupt(format!("{what}: {} bytes is not a multiple of {N}", bytes.len())));
    }
    Ok(bytes
        .chunks_exact(N)
        .map(|chunk| {
            let mut array = [0u8; N];
            array.copy_from_slice(chunk);
            array
        })
        .collect())
}

fn u64_at(bytes: &[u8], at: usize) -> u64 {
    let mut array = [0u8; 8];
    array.copy_from_slice(&bytes[at..at + 8]);
    u64::from_le_bytes(array)
}

fn u32_at(bytes: &[u8], at: usize) -> u32 {
    let mut array = [0u8; 4];
    array.copy_from_slice(&bytes[at..at + 4]);
    u32::from_le_bytes(array)
}

fn priority(value: u32) -> Result<u8, StoreError> {
    u8::try_from(value).ok().filter(|p| *p <= 9).ok_or_else(|| corrupt("priority out of range"))
}

/// Decodes a snapshot file's bytes.
pub fn decode(bytes: &[u8], seq: u64) -> Result<Snapshot, StoreError> {
    if bytes.len() < HEADER || (&bytes[..8] != MAGIC && &bytes[..8] != MAGIC_V1) {
        return Err(corrupt("not a snapshot (bad magic or too short)"));
    }
    let len = u64_at(bytes, 8);
    let crc = u32_at(bytes, 16);
    let payload = &bytes[HEADER..];
    if payload.len() as u64 != len {
        return Err(corrupt(format!("payload is {} bytes, header says {len}", payload.len())));
    }
    if crc32c::crc32c(payload) != crc {
        return Err(corrupt("checksum mismatch"));
    }
    let record = SnapshotRecord::decode(payload).map_err(|e| corrupt(e.to_string()))?;
    let mut index = Index::default();
    index.next_message_id = record.next_message_id.max(1);
    for destination in record.destinations {
        index.destinations.insert(Destination::try_from(destination)?);
    }
    for subscription in record.subscriptions {
        let info = SubscriptionInfo::try_from(subscription)?;
        index.subscriptions.insert(info.key.clone(), info);
    }
    for queue in record.queues {
        let key = QueueKey::try_from(queue.key.ok_or_else(|| corrupt("queue without key"))?)?;
        let refs = index.queues.entry(key).or_default();
        for entry in chunks::<ENTRY>(&queue.entries, "queue entries")? {
            let priority = priority(u32::from(entry[0]))?;
            let slot =
                Slot { id: u64_at(&entry, 1), loc: u64_at(&entry, 9), size: u32_at(&entry, 17) };
            if is_pending(slot.loc()) {
                return Err(corrupt("reference without a location"));
            }
            refs.insert(priority, slot);
        }
        unpack_refs(&queue.packed, refs)?;
    }
    index.queues.retain(|_, refs| !refs.is_empty());
    for txn in record.txns {
        let mut t = Txn { prepared: txn.prepared, ..Txn::default() };
        for op in txn.ops {
            let priority =
                u8::try_from(op.priority).map_err(|_| corrupt("priority out of range"))?;
            let mut queues = op.queues.into_iter().map(QueueKey::try_from);
            t.ops.push(if op.ack {
                let queue =
                    queues.next().ok_or_else(|| corrupt("transactional ack without queue"))??;
                TxnOp::Ack { queue, key: PageKey { priority, id: MessageId(op.id) } }
            } else {
                if priority > 9 {
                    return Err(corrupt("priority out of range"));
                }
                TxnOp::Add {
                    id: MessageId(op.id),
                    priority,
                    queues: queues.collect::<Result<_, _>>()?,
                    loc: op.loc,
                    size: op.size,
                }
            });
        }
        for record in chunks::<8>(&txn.records, "transaction records")? {
            t.records.push((u32_at(&record, 0), u32_at(&record, 4)));
        }
        index.txns.insert(TxnId(txn.txn), t);
    }
    for entry in chunks::<12>(&record.multi, "reference counts")? {
        index.multi.insert(u64_at(&entry, 0), u32_at(&entry, 8));
    }
    let mut live = Live::default();
    for entry in chunks::<12>(&record.live, "live bytes")? {
        live.bytes.insert(u32_at(&entry, 0), u64_at(&entry, 4));
    }
    for t in index.txns.values() {
        live.txn_files.extend(t.records.iter().map(|(file, _)| *file));
    }
    Ok(Snapshot {
        seq,
        position: Position { file: record.position_file, offset: record.position_offset },
        live,
        index,
    })
}

pub fn file_name(seq: u64) -> String {
    format!("{PREFIX}{seq:010}{SUFFIX}")
}

/// The sequence number of a snapshot file name.
pub fn parse_name(name: &str) -> Option<u64> {
    name.strip_prefix(PREFIX)?.strip_suffix(SUFFIX)?.parse().ok()
}

/// Writes snapshot `seq`: temporary file, sync, rename, directory sync.
pub fn write(
    disk: &dyn Disk,
    dir: &Path,
    failpoints: &Failpoints,
    seq: u64,
    snapshot: &Encoded,
) -> Result<(), StoreError> {
    let name = file_name(seq);
    let path = dir.join(&name);
    let tmp = dir.join(format!("{name}.tmp"));
    failpoints.check(FP_CHECKPOINT)?;
    let file = disk.create(&tmp).map_err(|e| io_error(format!("creating {}", tmp.display()), e))?;
    let mut at = 0u64;
    for piece in snapshot.pieces() {
        file.write_at(at, piece).map_err(|e| io_error(format!("writing {}", tmp.display()), e))?;
        at += piece.len() as u64;
    }
    failpoints.check(FP_SYNC)?;
    file.sync().map_err(|e| io_error(format!("syncing {}", tmp.display()), e))?;
    disk.rename(&tmp, &path).map_err(|e| io_error(format!("renaming {}", tmp.display()), e))?;
    disk.sync_dir(dir).map_err(|e| io_error(format!("syncing {}", dir.display()), e))?;
    Ok(())
}

/// Loads the newest valid snapshot among `names` (a directory listing). Damaged snapshots
/// are logged and renamed `*.corrupt`; `Ok(None)` when none is valid.
pub fn load_latest(
    disk: &dyn Disk,
    dir: &Path,
    names: &[String],
    failpoints: &Failpoints,
) -> Result<Option<Snapshot>, StoreError> {
    let mut seqs: Vec<u64> = names.iter().filter_map(|name| parse_name(name)).collect();
    seqs.sort_unstable_by(|a, b| b.cmp(a));
    for seq in seqs {
        let path = dir.join(file_name(seq));
        failpoints.check(FP_READ)?;
        let file =
            disk.open(&path).map_err(|e| io_error(format!("opening {}", path.display()), e))?;
        let len = file.len().map_err(|e| io_error(format!("reading {}", path.display()), e))?;
        let mut bytes = vec![0u8; usize::try_from(len).unwrap_or(usize::MAX).min(1 << 40)];
        file.read_at(0, &mut bytes)
            .map_err(|e| io_error(format!("reading {}", path.display()), e))?;
        match decode(&bytes, seq) {
            Ok(snapshot) => return Ok(Some(snapshot)),
            Err(e) => {
                tracing::warn!(
                    snapshot = %path.display(),
                    error = %e,
                    "index snapshot is damaged; ignoring it (an older one, or a full replay, is used)"
                );
                let aside = dir.join(format!("{}.corrupt", file_name(seq)));
                if let Err(e) = disk.rename(&path, &aside) {
                    tracing::warn!(snapshot = %path.display(), error = %e, "could not set the damaged snapshot aside");
                }
            }
        }
    }
    Ok(None)
}

/// Deletes snapshots older than `keep_from` and leftover temporary files.
pub fn prune(
    disk: &dyn Disk,
    dir: &Path,
    failpoints: &Failpoints,
    keep_from: u64,
) -> Result<(), StoreError> {
    let names = disk.list(dir).map_err(|e| io_error(format!("listing {}", dir.display()), e))?;
    for name in names {
        let old = parse_name(&name).is_some_and(|seq| seq < keep_from)
            || (name.starts_with(PREFIX) && name.ends_with(".snapshot.tmp"));
        if old {
            failpoints.check(FP_DELETE)?;
            let path = dir.join(&name);
            disk.remove(&path).map_err(|e| io_error(format!("deleting {}", path.display()), e))?;
        }
    }
    Ok(())
}

#[cfg(test)]
mod tests {
    use super::*;
    use rand::{Rng, SeedableRng};
    use store::Destination;

    fn queue(name: &str) -> QueueKey {
        QueueKey::destination(Destination::queue(name))
    }

    /// An index with references in several queues and priorities, ids out of order, records
    /// in several files (the cases the deltas must survive).
    fn sample_index() -> Index {
        let mut rng = rand::rngs::StdRng::seed_from_u64(7);
        let mut index = Index::default();
        for (q, name) in ["a", "b"].iter().enumerate() {
            let refs = index.queues.entry(queue(name)).or_default();
            let mut file = 1u32;
            let mut offset = 0u32;
            for n in 0..5_000u64 {
                let id =
                    if rng.gen_bool(0.05) { rng.gen_range(1..u64::MAX / 2) } else { n * 3 + 1 };
                if rng.gen_bool(0.01) {
                    file += rng.gen_range(1..4);
                    offset = 0;
                }
                let size = if rng.gen_bool(0.01) { rng.gen_range(1..u32::MAX) } else { 1200 };
                offset = offset.wrapping_add(if rng.gen_bool(0.1) { 7 } else { 1200 });
                let slot = Slot { id, loc: loc(file + q as u32, offset), size };
                refs.insert(rng.gen_range(0..10), slot);
            }
        }
        index.next_message_id = u64::MAX / 2 + 1;
        index
    }

    fn refs_of(index: &Index) -> Vec<(String, u8, u64, u64, u32)> {
        let mut all: Vec<_> = index
            .queues
            .iter()
            .flat_map(|(key, refs)| {
                refs.iter().map(move |(p, s)| (format!("{key:?}"), p, s.id(), s.loc(), s.size()))
            })
            .collect();
        all.sort();
        all
    }

    #[test]
    fn packed_references_decode_to_the_same_index() {
        let index = sample_index();
        let position = Position { file: 9, offset: 4096 };
        let (encoded, live) = encode(&index, position);
        let bytes = encoded.to_vec();
        assert_eq!(bytes.len(), encoded.len());
        let snapshot = decode(&bytes, 3).expect("decodes");
        assert_eq!(snapshot.position, position);
        assert_eq!(snapshot.index.next_message_id, index.next_message_id);
        assert_eq!(refs_of(&snapshot.index), refs_of(&index));
        assert_eq!(snapshot.live.bytes, live.bytes);
        // A few bytes a reference (here some are random on purpose).
        let per_ref = bytes.len() as f64 / 10_000.0;
        assert!(per_ref < 10.0, "{per_ref} bytes a reference");
    }

    /// What a deep queue of alike messages costs in a snapshot: 4 bytes a reference.
    #[test]
    fn contiguous_references_take_four_bytes() {
        let mut index = Index::default();
        let refs = index.queues.entry(queue("deep")).or_default();
        let (mut file, mut offset) = (1u32, 0u32);
        for id in 1..=100_000u64 {
            if offset > 32 << 20 {
                (file, offset) = (file + 1, 0);
            }
            refs.insert(4, Slot { id, loc: loc(file, offset), size: 1200 });
            offset += 1200;
        }
        let (encoded, _) = encode(&index, Position { file, offset: u64::from(offset) });
        let per_ref = encoded.len() as f64 / 100_000.0;
        assert!(per_ref < 4.1, "{per_ref} bytes a reference");
        let snapshot = decode(&encoded.to_vec(), 1).expect("decodes");
        assert_eq!(refs_of(&snapshot.index), refs_of(&index));
    }

    #[test]
    fn a_damaged_packed_snapshot_is_refused() {
        let (encoded, _) = encode(&sample_index(), Position { file: 1, offset: 0 });
        let mut bytes = encoded.to_vec();
        let at = bytes.len() / 2;
        bytes[at] ^= 0x40;
        assert!(decode(&bytes, 1).is_err(), "the checksum catches it");
    }

    /// Snapshots of format 1 (fixed 21-byte references, written by earlier versions) are
    /// still read.
    #[test]
    fn format_one_snapshots_are_still_read() {
        let index = sample_index();
        let mut queues = Vec::new();
        for (key, refs) in &index.queues {
            let mut entries = Vec::new();
            for (priority, slot) in refs.iter() {
                entries.push(priority);
                entries.extend_from_slice(&slot.id().to_le_bytes());
                entries.extend_from_slice(&slot.loc().to_le_bytes());
                entries.extend_from_slice(&slot.size().to_le_bytes());
            }
            queues.push(QueueSnapshot {
                key: Some(QueueKeyRecord::from(key)),
                entries,
                packed: Vec::new(),
            });
        }
        let record = SnapshotRecord {
            position_file: 2,
            position_offset: 10,
            next_message_id: index.next_message_id,
            queues,
            ..SnapshotRecord::default()
        };
        let payload = record.encode_to_vec();
        let mut bytes = MAGIC_V1.to_vec();
        bytes.extend_from_slice(&(payload.len() as u64).to_le_bytes());
        bytes.extend_from_slice(&crc32c::crc32c(&payload).to_le_bytes());
        bytes.extend_from_slice(&payload);
        let snapshot = decode(&bytes, 1).expect("a format 1 snapshot decodes");
        assert_eq!(refs_of(&snapshot.index), refs_of(&index));
    }
}
