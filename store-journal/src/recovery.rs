//! Opening a journal: load the newest valid snapshot, replay the records after its
//! position, repair the tail.
//!
//! Rules:
//! - Records are replayed a unit at a time: a unit is applied only once the record carrying
//!   the unit-end bit is read, so a unit cut short by a crash is never half applied.
//! - Where a segment stops parsing (zeros, a bad checksum, a short record), the rest of that
//!   file decides: only zeros is the normal end of a segment; otherwise, if a valid record
//!   follows in that file, or the next segment starts with one, it is **corruption in the
//!   middle** (reported with file and offset: by default the store opens with everything
//!   before it, logging an error, truncating there and setting later files aside as
//!   `*.corrupt`; with `refuse_on_corruption` opening fails with [`StoreError::Corrupt`]).
//!   If nothing valid follows, it is a **torn tail**: it is truncated (with any incomplete
//!   unit) and a warning says what was dropped.
//! - Transactions open at the end of the log are rolled back unless prepared; prepared ones
//!   are reported by `recover`.
//!
//! Reading: a data file is read forward in chunks (64 KiB, doubling up to 4 MiB), never
//! whole, and only from the snapshot's position on. Where the records stop at a header of
//! zeros, the next [`ZERO_PROBE`] bytes are checked (a block at a time) instead of the whole
//! preallocated rest of the file: zeros there are the end of the data, anything else is
//! looked at as above (then the rest of that file is read). So opening reads about the bytes
//! written since the last checkpoint, not every preallocated segment in full. Bytes further
//! on that a torn write left behind a long run of zeros are never read as records: that
//! file is not written again (a new head is started, or an empty one is truncated first,
//! see `Writer::reuse_head`), so every recovery stops at the same place. The price: damage
//! that zeroes more than [`ZERO_PROBE`] bytes in the middle of a file, from a record header
//! on, reads as the end of that file's data rather than as corruption (a zeroed sector or a
//! few pages is still caught).

use std::collections::BTreeMap;
use std::path::Path;
use std::sync::Arc;

use store::{StoreError, TxnId};

use crate::checkpoint::{self, Live, Position};
use crate::disk::{Disk, DiskFile};
use crate::error::Damage;
use crate::frame::{self, Parsed};
use crate::index::Index;
use crate::options::JournalOptions;
use crate::record::{self, Command};
use crate::refs::{loc, loc_file, Loc};
use crate::segment::{parse_segment, segment_name};
use crate::{io_error, CLEAN_SHUTDOWN_FILE, FP_DELETE, FP_READ, FP_SYNC, FP_WRITE};

/// What opening found.
pub struct Recovered {
    pub index: Index,
    /// Every data file, with the bytes used in it.
    pub segments: BTreeMap<u32, u64>,
    /// Handles of the files replayed.
    pub handles: Vec<(u32, Arc<dyn DiskFile>)>,
    /// The snapshot loaded: its sequence number, position and live bytes.
    pub checkpoint: Option<(u64, Position, Live)>,
    /// Unprepared transactions rolled back (their rollback records are still to be written).
    pub rolled_back: Vec<TxnId>,
    /// The last close was clean.
    pub clean: bool,
    /// Records were read after the snapshot's position (or none was loaded), or part of the
    /// log was cut: the next recovery would have to do it again unless a checkpoint is
    /// written now.
    pub replayed: bool,
    /// The newest data file, when it holds no record (a head the last run never wrote to, or
    /// whose torn tail was cut to nothing): the writer reuses it as its head.
    pub empty_head: Option<u32>,
}

/// Where the records of a data file stop at a header of zeros, this many bytes after it
/// must be zeros too (checked a block at a time) for it to be the end of the data; anything
/// else is a torn tail or damage, and the rest of the file is read to tell which. The rest
/// of a preallocated segment is not read.
pub const ZERO_PROBE: u64 = 64 * 1024;
/// The first read of a data file; each further read doubles, up to [`MAX_CHUNK`].
const FIRST_CHUNK: u64 = 64 * 1024;
const MAX_CHUNK: u64 = 4 * 1024 * 1024;

/// Where the valid log stops in a file, and why.
struct Stop {
    file: u32,
    offset: u64,
    reason: String,
    /// Bytes from `offset` to the last non-zero byte of the file.
    bytes: u64,
}

/// One record of the unit being read.
struct Pending {
    command: Command,
    at: Loc,
    size: u32,
}

pub fn recover(
    disk: &dyn Disk,
    dir: &Path,
    options: &JournalOptions,
) -> Result<Recovered, StoreError> {
    let failpoints = &options.failpoints;
    let names = disk.list(dir).map_err(|e| io_error(format!("listing {}", dir.display()), e))?;
    let files: Vec<u32> = {
        let mut files: Vec<u32> = names.iter().filter_map(|name| parse_segment(name)).collect();
        files.sort_unstable();
        files
    };
    let clean = names.iter().any(|name| name == CLEAN_SHUTDOWN_FILE);
    let snapshot = checkpoint::load_latest(disk, dir, &names, failpoints)?;
    if let Some(snapshot) = &snapshot {
        for (file, bytes) in &snapshot.live.bytes {
            if *bytes > 0 && files.binary_search(file).is_err() {
                return Err(StoreError::Corrupt {
                    location: segment_name(*file),
                    reason: format!(
                        "the index snapshot has {bytes} live bytes in this data file, which is missing"
                    ),
                });
            }
        }
    }
    let snapshot_missing = snapshot.is_none();
    let (mut index, start, checkpoint) = match snapshot {
        Some(s) => (s.index, s.position, Some((s.seq, s.position, s.live))),
        None => (
            Index::default(),
            Position { file: files.first().copied().unwrap_or(1), offset: 0 },
            None,
        ),
    };

    let mut segments = BTreeMap::new();
    let mut handles = Vec::new();
    for &file in &files {
        let path = dir.join(segment_name(file));
        let handle =
            disk.open(&path).map_err(|e| io_error(format!("opening {}", path.display()), e))?;
        let len = handle.len().map_err(|e| io_error(format!("reading {}", path.display()), e))?;
        segments.insert(file, len);
        // Only the files replayed stay open here (the rest are opened when read).
        if file >= start.file {
            handles.push((file, handle));
        }
    }

    let mut unit: Vec<Pending> = Vec::new();
    let mut unit_start: Option<Position> = None;
    let mut garbage: Option<Stop> = None;
    let mut corruption: Option<Stop> = None;
    let mut replayed = false;
    let mut bytes_read = 0u64;
    let mut expected = start.file;
    for (file, handle) in &handles {
        let file = *file;
        if file != expected {
            corruption = Some(Stop {
                file: expected,
                offset: 0,
                reason: format!("data file {} is missing", segment_name(expected)),
                bytes: 0,
            });
            break;
        }
        expected = file + 1;
        failpoints.check(FP_READ)?;
        let mut reader = SegmentReader::new(handle.as_ref(), file)?;
        let mut pos = if file == start.file { start.offset } else { 0 };
        if let Some(stop) = garbage.take() {
            // The previous file ended in garbage: a valid record here means it was damage in
            // the middle of the log, otherwise the log ended there.
            if matches!(reader.parse(pos)?, Parsed::Record { .. }) {
                corruption = Some(stop);
            } else {
                garbage = Some(stop);
            }
            bytes_read += reader.read;
            break;
        }
        loop {
            let step = match reader.parse(pos)? {
                Parsed::Record { kind, unit_end, payload, len } => {
                    Step::Record { kind, unit_end, command: record::decode(kind, payload), len }
                }
                Parsed::End => Step::End,
                Parsed::Bad(reason) => Step::Bad(reason),
            };
            match step {
                Step::Record { kind, unit_end, command, len } => {
                    replayed = true;
                    let command = match command {
                        Ok(command) => command,
                        Err(e) => {
                            corruption = Some(Stop {
                                file,
                                offset: pos,
                                reason: format!("a {kind:?} record does not decode: {e}"),
                                bytes: len as u64,
                            });
                            break;
                        }
                    };
                    if unit.is_empty() {
                        unit_start = Some(Position { file, offset: pos });
                    }
                    let size = u32::try_from(len).unwrap_or(u32::MAX);
                    let offset = u32::try_from(pos).unwrap_or(u32::MAX);
                    unit.push(Pending { command, at: loc(file, offset), size });
                    pos += len as u64;
                    if unit_end {
                        for pending in unit.drain(..) {
                            apply(&mut index, pending);
                        }
                        unit_start = None;
                    }
                }
                Step::End if reader.zeros_after(pos, ZERO_PROBE)? => break,
                Step::End | Step::Bad(_) => {
                    let reason = match step {
                        Step::Bad(reason) => reason,
                        _ => "zeros followed by data".to_owned(),
                    };
                    // Damage or a torn write: the rest of this file decides which.
                    let rest = reader.rest(pos)?;
                    let stop =
                        Stop { file, offset: pos, reason, bytes: frame::nonzero_len(rest) as u64 };
                    if frame::find_valid_after(rest, 0).is_some() {
                        corruption = Some(stop);
                    } else {
                        garbage = Some(stop);
                    }
                    break;
                }
            }
        }
        bytes_read += reader.read;
        if corruption.is_some() {
            break;
        }
        if let Some(used) = segments.get_mut(&file) {
            *used = pos;
        }
    }
    tracing::debug!(files = handles.len(), bytes_read, "journal replayed");
    replayed |= corruption.is_some() || garbage.is_some() || unit_start.is_some();
    if snapshot_missing && segments.len() > 1 {
        // A full replay: checkpoint, so that the files before the head become reclaimable.
        replayed = true;
    }

    if let Some(stop) = corruption {
        // Everything from the start of the unit the damage is in goes.
        let cut = unit_start.unwrap_or(Position { file: stop.file, offset: stop.offset });
        if options.refuse_on_corruption {
            let reason =
                format!("{}; valid records follow (refuse_on_corruption is set)", stop.reason);
            return Err(Damage::new(stop.file, stop.offset, reason).into());
        }
        tracing::error!(
            file = %segment_name(stop.file),
            offset = stop.offset,
            reason = %stop.reason,
            "journal corrupt in the middle: opening with everything before {}; later data files are set aside as *.corrupt",
            segment_name(cut.file),
        );
        truncate(disk, dir, &handles, &mut segments, cut, failpoints, true)?;
    } else if let Some(stop) = garbage {
        let cut = unit_start.unwrap_or(Position { file: stop.file, offset: stop.offset });
        tracing::warn!(
            file = %segment_name(stop.file),
            offset = stop.offset,
            bytes = stop.bytes,
            reason = %stop.reason,
            "journal tail torn (an interrupted write): dropping it from {} offset {}",
            segment_name(cut.file),
            cut.offset,
        );
        truncate(disk, dir, &handles, &mut segments, cut, failpoints, false)?;
    } else if let Some(cut) = unit_start {
        tracing::warn!(
            file = %segment_name(cut.file),
            offset = cut.offset,
            records = unit.len(),
            "journal ends inside a unit of work (an interrupted write): dropping its records",
        );
        truncate(disk, dir, &handles, &mut segments, cut, failpoints, false)?;
    }

    let rolled_back: Vec<TxnId> =
        index.txns.iter().filter(|(_, t)| !t.prepared).map(|(txn, _)| *txn).collect();
    for txn in &rolled_back {
        index.apply_rollback(*txn);
    }
    if !rolled_back.is_empty() {
        tracing::info!(transactions = ?rolled_back, "rolled back transactions that were not prepared");
    }
    let handles: Vec<(u32, Arc<dyn DiskFile>)> =
        handles.into_iter().filter(|(file, _)| segments.contains_key(file)).collect();
    // The newest file, if it was read and holds no record.
    let empty_head = match (segments.iter().next_back(), handles.last()) {
        (Some((&last, &0)), Some((read, _))) if *read == last => Some(last),
        _ => None,
    };
    Ok(Recovered { index, segments, handles, checkpoint, rolled_back, clean, replayed, empty_head })
}

/// One step of replaying a file (what [`Parsed`] found, owned).
enum Step {
    Record { kind: record::Kind, unit_end: bool, command: Result<Command, StoreError>, len: usize },
    End,
    Bad(String),
}

/// Reads a data file forward in chunks, keeping the bytes from the record being parsed on.
struct SegmentReader<'a> {
    handle: &'a dyn DiskFile,
    file: u32,
    len: u64,
    /// The file offset of `buf[0]`.
    base: u64,
    buf: Vec<u8>,
    /// The size of the next read ahead.
    chunk: u64,
    /// Bytes read from the file so far.
    read: u64,
}

impl<'a> SegmentReader<'a> {
    fn new(handle: &'a dyn DiskFile, file: u32) -> Result<Self, StoreError> {
        let len =
            handle.len().map_err(|e| io_error(format!("reading {}", segment_name(file)), e))?;
        // Offsets are 32 bits: no data file the journal writes is larger.
        if len > u64::from(u32::MAX) {
            return Err(StoreError::Corrupt {
                location: segment_name(file),
                reason: format!("{len} bytes is larger than any data file the journal writes"),
            });
        }
        Ok(SegmentReader {
            handle,
            file,
            len,
            base: 0,
            buf: Vec::new(),
            chunk: FIRST_CHUNK,
            read: 0,
        })
    }

    /// Makes the buffer hold the file from `at` to `at + want` (or to its end), dropping the
    /// bytes before `at`; with `ahead`, reads at least a chunk more.
    fn fill(&mut self, at: u64, want: u64, ahead: bool) -> Result<(), StoreError> {
        let end = at.saturating_add(want).min(self.len);
        let have = self.base + self.buf.len() as u64;
        if at >= self.base && end <= have {
            return Ok(());
        }
        if at < self.base || at >= have {
            self.buf.clear();
            self.base = at;
        } else if at > self.base {
            self.buf.drain(..(at - self.base) as usize);
            self.base = at;
        }
        let from = self.base + self.buf.len() as u64;
        let to = if ahead { end.max(from.saturating_add(self.chunk)) } else { end }.min(self.len);
        if to > from {
            let old = self.buf.len();
            self.buf.resize(old + (to - from) as usize, 0);
            self.handle
                .read_at(from, &mut self.buf[old..])
                .map_err(|e| io_error(format!("reading {}", segment_name(self.file)), e))?;
            self.read += to - from;
            if ahead {
                self.chunk = (self.chunk * 2).min(MAX_CHUNK);
            }
        }
        Ok(())
    }

    /// What is at offset `at`: the header is read, then as much as it says the record takes.
    fn parse(&mut self, at: u64) -> Result<Parsed<'_>, StoreError> {
        self.fill(at, frame::HEADER as u64, true)?;
        let rel = (at - self.base) as usize;
        if let Some(header) = self.buf.get(rel..rel + frame::HEADER) {
            if !frame::all_zero(header) {
                let len = u32::from_le_bytes([header[0], header[1], header[2], header[3]]);
                self.fill(at, (frame::HEADER as u64) + u64::from(len), true)?;
            }
        }
        Ok(frame::parse(&self.buf, (at - self.base) as usize))
    }

    /// True if the `probe` bytes from `at` (or up to the end of the file) are zeros.
    fn zeros_after(&mut self, at: u64, probe: u64) -> Result<bool, StoreError> {
        self.fill(at, probe, false)?;
        let rel = (at - self.base) as usize;
        let end = rel.saturating_add(probe as usize).min(self.buf.len());
        Ok(frame::all_zero(&self.buf[rel.min(end)..end]))
    }

    /// The rest of the file from `at`.
    fn rest(&mut self, at: u64) -> Result<&[u8], StoreError> {
        self.fill(at, self.len.saturating_sub(at), false)?;
        let rel = ((at - self.base) as usize).min(self.buf.len());
        Ok(&self.buf[rel..])
    }
}

/// Cuts the log at `cut`: that file is truncated there, later files are removed (a torn
/// tail: they hold nothing complete) or set aside as `*.corrupt` (`quarantine`).
fn truncate(
    disk: &dyn Disk,
    dir: &Path,
    handles: &[(u32, Arc<dyn DiskFile>)],
    segments: &mut BTreeMap<u32, u64>,
    cut: Position,
    failpoints: &store::Failpoints,
    quarantine: bool,
) -> Result<(), StoreError> {
    for (file, handle) in handles {
        if *file == cut.file {
            failpoints.check(FP_WRITE)?;
            handle
                .set_len(cut.offset)
                .map_err(|e| io_error(format!("truncating {}", segment_name(*file)), e))?;
            failpoints.check(FP_SYNC)?;
            handle.sync().map_err(|e| io_error(format!("syncing {}", segment_name(*file)), e))?;
            segments.insert(*file, cut.offset);
        } else if *file > cut.file {
            let path = dir.join(segment_name(*file));
            if quarantine {
                failpoints.check(FP_WRITE)?;
                let aside = dir.join(format!("{}.corrupt", segment_name(*file)));
                disk.rename(&path, &aside)
                    .map_err(|e| io_error(format!("renaming {}", path.display()), e))?;
            } else {
                failpoints.check(FP_DELETE)?;
                disk.remove(&path)
                    .map_err(|e| io_error(format!("deleting {}", path.display()), e))?;
            }
            segments.remove(file);
        }
    }
    failpoints.check(FP_SYNC)?;
    disk.sync_dir(dir).map_err(|e| io_error(format!("syncing {}", dir.display()), e))
}

/// Applies one replayed record to the index.
fn apply(index: &mut Index, pending: Pending) {
    let Pending { command, at, size } = pending;
    let file = loc_file(at);
    match command {
        Command::AddMessage { id, priority, queues, txn } => {
            index.apply_add(id, priority, &queues, txn, at, size);
            if let Some(txn) = txn {
                index.note_txn_record(txn, file, size);
            }
        }
        Command::Ack { queue, key, txn } => {
            index.apply_ack(&queue, key, txn);
            if let Some(txn) = txn {
                index.note_txn_record(txn, file, size);
            }
        }
        Command::AddDestination(destination) => index.apply_add_destination(destination),
        Command::RemoveDestination(destination) => index.apply_remove_destination(&destination),
        Command::AddSubscription(info) => index.apply_add_subscription(info),
        Command::RemoveSubscription(key) => index.apply_remove_subscription(&key),
        Command::Prepare(txn) => {
            index.apply_prepare(txn);
            index.note_txn_record(txn, file, size);
        }
        Command::Commit(txn) => index.apply_commit(txn),
        Command::Rollback(txn) => index.apply_rollback(txn),
        Command::Relocate { id, priority, queues } => {
            index.apply_relocate(id, priority, &queues, at, size)
        }
        Command::Watermark(next) => index.apply_watermark(next),
    }
}
