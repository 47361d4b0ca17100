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
}

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
        let data = read_all(handle.as_ref(), file)?;
        let mut pos = if file == start.file { start.offset as usize } else { 0 };
        if let Some(stop) = garbage.take() {
            // The previous file ended in garbage: a valid record here means it was damage in
            // the middle of the log, otherwise the log ended there.
            if matches!(frame::parse(&data, pos), Parsed::Record { .. }) {
                corruption = Some(stop);
            } else {
                garbage = Some(stop);
            }
            break;
        }
        loop {
            match frame::parse(&data, pos) {
                Parsed::Record { kind, unit_end, payload, len } => {
                    let command = match record::decode(kind, payload) {
                        Ok(command) => command,
                        Err(e) => {
                            corruption = Some(Stop {
                                file,
                                offset: pos as u64,
                                reason: format!("a {kind:?} record does not decode: {e}"),
                                bytes: len as u64,
                            });
                            break;
                        }
                    };
                    if unit.is_empty() {
                        unit_start = Some(Position { file, offset: pos as u64 });
                    }
                    let size = u32::try_from(len).unwrap_or(u32::MAX);
                    unit.push(Pending { command, at: loc(file, pos as u32), size });
                    pos += len;
                    if unit_end {
                        for pending in unit.drain(..) {
                            apply(&mut index, pending);
                        }
                        unit_start = None;
                    }
                }
                Parsed::End | Parsed::Bad(_)
                    if data[pos.min(data.len())..].iter().all(|b| *b == 0) =>
                {
                    break;
                }
                Parsed::End | Parsed::Bad(_) => {
                    let reason = match frame::parse(&data, pos) {
                        Parsed::Bad(reason) => reason,
                        _ => "zeros followed by data".to_owned(),
                    };
                    let last_nonzero = data.iter().rposition(|b| *b != 0).map_or(pos, |at| at + 1);
                    let stop = Stop {
                        file,
                        offset: pos as u64,
                        reason,
                        bytes: last_nonzero.saturating_sub(pos) as u64,
                    };
                    if frame::find_valid_after(&data, pos).is_some() {
                        corruption = Some(stop);
                    } else {
                        garbage = Some(stop);
                    }
                    break;
                }
            }
        }
        if corruption.is_some() {
            break;
        }
        if let Some(used) = segments.get_mut(&file) {
            *used = pos as u64;
        }
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
    let handles = handles.into_iter().filter(|(file, _)| segments.contains_key(file)).collect();
    Ok(Recovered { index, segments, handles, checkpoint, rolled_back, clean })
}

fn read_all(handle: &dyn DiskFile, file: u32) -> Result<Vec<u8>, StoreError> {
    let context = || format!("reading {}", segment_name(file));
    let len = handle.len().map_err(|e| io_error(context(), e))?;
    // Offsets are 32 bits: no data file the journal writes is larger.
    let len =
        usize::try_from(len).ok().filter(|len| *len <= u32::MAX as usize).ok_or_else(|| {
            StoreError::Corrupt {
                location: segment_name(file),
                reason: format!("{len} bytes is larger than any data file the journal writes"),
            }
        })?;
    let mut data = vec![0u8; len];
    handle.read_at(0, &mut data).map_err(|e| io_error(context(), e))?;
    Ok(data)
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
