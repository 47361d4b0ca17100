//! Checkpoints as the writer runs them, and reclaiming space after each one.
//!
//! **Deleting.** A data file is deleted when it lies wholly before the *previous*
//! checkpoint's position and has no live bytes in either of the last two checkpoints. So
//! both snapshots kept on disk find every file they need: a damaged newest snapshot falls
//! back to the one before without loss.
//!
//! **Compacting.** After a checkpoint, a data file wholly before it (so not the head) whose
//! live bytes are below `compaction_threshold` of its size, that holds no record of an open
//! transaction and whose live bytes did not fall since the checkpoint before (no consumer is
//! draining it: what they are about to ack is not worth rewriting) has its live messages
//! rewritten at the head as `Relocate` records (the body and the queues still referencing
//! it; the index then points there). The file then
//! has no live bytes, and is deleted two checkpoints later. So one old unacknowledged
//! message moves forward instead of pinning every file after it. Each checkpoint moves at
//! most `checkpoint_bytes` of live data (or one file's, if more), the sparsest files first,
//! written in batches of 1 MiB so that only that much of it is in memory at once.

use std::collections::{HashMap, HashSet};
use std::sync::atomic::Ordering;
use std::sync::Arc;

use store::{MessageId, QueueKey, StoreError};

use crate::checkpoint::{self, Live};
use crate::refs::{is_pending, loc_file, Loc};
use crate::segment::{read_message_record, segment_name};
use crate::writer::{Captured, Relocation, Writer};
use crate::{io_error, CLEAN_SHUTDOWN_FILE, FP_DELETE, FP_READ, FP_SYNC, FP_WRITE, RESERVE_FILE};

/// A live body found in a file being compacted: id, priority, record size, and the queues
/// referencing it.
type LiveBody = (MessageId, u8, u32, Vec<QueueKey>);

/// Which files a checkpoint compacts.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub enum Compact {
    No,
    /// Every sparse file: at open, when no consumer drains any yet.
    Sparse,
    /// Sparse files whose live bytes did not fall since the checkpoint before.
    Settled,
}

/// Bytes of live records a compaction moves per batch (one write; see [`Writer::compact`]).
const RELOCATION_BATCH: u64 = 1024 * 1024;

impl Writer {
    /// A checkpoint taken while the store runs: a failure is logged and reported by
    /// `close` (the journal itself is intact; the next checkpoint tries again).
    pub fn checkpoint_in_background(&mut self) {
        let Some(captured) = self.run_batch(Vec::new(), true) else { return };
        if let Err(e) = self.sync_dirty() {
            self.poison(&e);
            return;
        }
        if let Err(e) = self.write_checkpoint(captured, Compact::Settled) {
            tracing::warn!(error = %e, "journal checkpoint or reclaim failed; retrying at the next one");
            self.shared.maintenance_error.lock().get_or_insert(e);
        }
    }

    /// The checkpoint written at open, before serving, when recovery replayed anything (see
    /// the crate documentation): at the new head, so that the next recovery starts there. Its
    /// reclaiming deletes the files wholly before the snapshot recovery loaded that neither
    /// needs, and its compaction moves the live messages of sparse files forward. Without a
    /// loaded snapshot (a first checkpoint, or all of them damaged) a second one is written
    /// at once when that lets files go: both snapshots then cover the same position, and any
    /// file before it without live bytes is needed by neither.
    ///
    /// A failure to make the replayed journal durable fails the open; a failed snapshot or
    /// reclaim is logged and reported by `close`, like a checkpoint while running.
    pub fn checkpoint_at_open(&mut self) -> Result<(), StoreError> {
        let loaded = self.previous.is_some();
        for round in 0..2 {
            let Some(captured) = self.run_batch(Vec::new(), true) else {
                let reason = self.shared.state.read().poisoned.clone().unwrap_or_default();
                return Err(StoreError::Poisoned { reason });
            };
            self.sync_dirty()?;
            if let Err(e) = self.write_checkpoint(
                captured,
                match round {
                    0 => Compact::Sparse,
                    _ => Compact::No,
                },
            ) {
                tracing::warn!(error = %e, "journal checkpoint at open failed; retrying at the next one");
                self.shared.maintenance_error.lock().get_or_insert(e);
                return Ok(());
            }
            if loaded || !self.reclaimable() {
                break;
            }
        }
        Ok(())
    }

    /// True if the next checkpoint's reclaiming would delete a file (none of the last
    /// checkpoint's live bytes, wholly before it).
    pub(crate) fn reclaimable(&self) -> bool {
        let Some((position, live)) = &self.previous else { return false };
        let state = self.shared.state.read();
        state
            .segments
            .keys()
            .any(|&file| file < position.file && file != self.head && live.of(file) == 0)
    }

    /// Writes the captured snapshot, prunes old ones, deletes reclaimable data files and,
    /// with `compact`, rewrites sparse ones.
    pub fn write_checkpoint(
        &mut self,
        captured: Captured,
        compact: Compact,
    ) -> Result<(), StoreError> {
        self.since_checkpoint = 0;
        let seq = self.checkpoint_seq + 1;
        let shared = Arc::clone(&self.shared);
        let failpoints = &shared.options.failpoints;
        checkpoint::write(shared.disk.as_ref(), &shared.dir, failpoints, seq, &captured.snapshot)?;
        tracing::debug!(seq, bytes = captured.snapshot.len(), "journal checkpoint written");
        self.checkpoint_seq = seq;
        shared.checkpoints.fetch_add(1, Ordering::Relaxed);
        let mut first_error = None;
        if let Err(e) = checkpoint::prune(shared.disk.as_ref(), &shared.dir, failpoints, seq - 1) {
            first_error.get_or_insert(e);
        }
        if let Err(e) = self.reclaim(&captured.live) {
            first_error.get_or_insert(e);
        }
        let before = self.previous.replace((captured.position, captured.live)).map(|(_, l)| l);
        if compact != Compact::No {
            let settled_since = before.as_ref().filter(|_| compact == Compact::Settled);
            if let Err(e) = self.compact(settled_since) {
                first_error.get_or_insert(e);
            }
        }
        first_error.map_or(Ok(()), Err)
    }

    /// Deletes data files that neither of the last two checkpoints needs.
    fn reclaim(&mut self, live: &Live) -> Result<(), StoreError> {
        let Some((previous, previous_live)) = &self.previous else { return Ok(()) };
        let doomed: Vec<u32> = {
            let state = self.shared.state.read();
            state
                .segments
                .keys()
                .copied()
                .filter(|&file| {
                    file < previous.file
                        && file != self.head
                        && previous_live.of(file) == 0
                        && live.of(file) == 0
                })
                .collect()
        };
        if doomed.is_empty() {
            return Ok(());
        }
        let shared = Arc::clone(&self.shared);
        for file in &doomed {
            shared.options.failpoints.check(FP_DELETE)?;
            let path = shared.files.path(*file);
            match shared.disk.remove(&path) {
                Ok(()) => {}
                Err(e) if e.kind() == std::io::ErrorKind::NotFound => {}
                Err(e) => return Err(io_error(format!("deleting {}", segment_name(*file)), e)),
            }
            shared.files.forget(*file);
            shared.deleted_files.fetch_add(1, Ordering::Relaxed);
            shared.state.write().remove_segment(*file);
        }
        tracing::debug!(files = ?doomed, "deleted journal files with no live data");
        shared.options.failpoints.check(FP_SYNC)?;
        shared
            .disk
            .sync_dir(&shared.dir)
            .map_err(|e| io_error("syncing the journal directory", e))?;
        if shared.state.read().disk_full {
            match self.create_reserve() {
                Ok(()) => {
                    shared.state.write().disk_full = false;
                    tracing::info!("journal space freed; new messages are accepted again");
                }
                Err(e) => tracing::debug!(error = %e, "still out of space"),
            }
        }
        Ok(())
    }

    /// Creates the reserve file: one segment of preallocated space, released when a new
    /// segment cannot be allocated, so that acks can still be written on a full disk.
    pub fn create_reserve(&self) -> Result<(), StoreError> {
        let shared = &self.shared;
        let path = shared.dir.join(RESERVE_FILE);
        shared.options.failpoints.check(FP_WRITE)?;
        let file =
            shared.disk.create(&path).map_err(|e| io_error("creating the space reserve", e))?;
        if let Err(e) = file.allocate(shared.options.segment_size) {
            let _ = shared.disk.remove(&path);
            return Err(io_error("allocating the space reserve", e));
        }
        Ok(())
    }

    /// Rewrites the live messages of sparse files at the head. `before` is the live bytes of
    /// the checkpoint before this one: a file whose live bytes fell since then is being
    /// drained by its consumers and is left to them (rewriting what is about to be acked
    /// doubled the journal's writes behind a lagging consumer; the profile of S3 put 9% of
    /// the broker's CPU there).
    fn compact(&mut self, before: Option<&Live>) -> Result<(), StoreError> {
        let Some((position, live)) = &self.previous else { return Ok(()) };
        let threshold = self.shared.options.compaction_threshold;
        let budget = self.shared.options.checkpoint_bytes.max(1);
        let mut candidates: Vec<(u64, u32)> = {
            let state = self.shared.state.read();
            state
                .segments
                .iter()
                .filter(|(&file, &used)| {
                    let bytes = live.of(file);
                    file < position.file
                        && file != self.head
                        && !live.txn_files.contains(&file)
                        && bytes > 0
                        && (bytes as f64) < threshold * (used.max(1) as f64)
                        && before.is_none_or(|before| before.of(file) <= bytes)
                })
                .map(|(&file, _)| (live.of(file), file))
                .collect()
        };
        if candidates.is_empty() {
            return Ok(());
        }
        candidates.sort_unstable();
        let mut chosen = HashSet::new();
        let mut total = 0u64;
        for (bytes, file) in candidates {
            if !chosen.is_empty() && total + bytes > budget {
                break;
            }
            total += bytes;
            chosen.insert(file);
        }
        // Every live body in the chosen files, with the queues referencing it.
        let mut found: HashMap<Loc, LiveBody> = HashMap::new();
        {
            let state = self.shared.state.read();
            for (queue, refs) in &state.index.queues {
                for (priority, slot) in refs.iter() {
                    let at = slot.loc();
                    if !is_pending(at) && chosen.contains(&loc_file(at)) {
                        found
                            .entry(at)
                            .or_insert_with(|| {
                                (MessageId(slot.id()), priority, slot.size(), Vec::new())
                            })
                            .3
                            .push(queue.clone());
                    }
                }
            }
        }
        let moved = found.len();
        tracing::debug!(files = ?chosen, messages = moved, bytes = total, "compacting journal files");
        // In file order (sequential reads), and in batches of at most RELOCATION_BATCH bytes:
        // a relocated body is held twice (decoded, to serve reads until written, and
        // encoded) until its batch is written, and a file half drained by consumers still
        // holds up to half a segment of live messages.
        let mut found: Vec<(Loc, LiveBody)> = found.into_iter().collect();
        found.sort_unstable_by_key(|(at, _)| *at);
        let mut batch_bytes = 0u64;
        for (old, (id, priority, size, queues)) in found {
            let (message, body) = self.read_body(old, size)?;
            self.relocations.push(Relocation { id, priority, old, message, body, queues });
            self.shared.relocated.fetch_add(1, Ordering::Relaxed);
            batch_bytes += u64::from(size);
            if batch_bytes >= RELOCATION_BATCH {
                self.run_batch(Vec::new(), false);
                batch_bytes = 0;
                // A close (or stop) waits for no compaction, and a poisoned store writes
                // nothing: the rest stays where it is (the next checkpoint finds the file
                // sparse again).
                if self.control.is_some() || self.shared.state.read().poisoned.is_some() {
                    break;
                }
            }
        }
        if !self.relocations.is_empty() {
            self.run_batch(Vec::new(), false);
        }
        Ok(())
    }

    /// Reads the add record at `at` back: the decoded message and its encoded form.
    fn read_body(
        &self,
        at: Loc,
        size: u32,
    ) -> Result<(Arc<store::Message>, bytes::Bytes), StoreError> {
        let file = loc_file(at);
        self.shared.options.failpoints.check(FP_READ)?;
        let handle = self
            .shared
            .files
            .get(file)
            .map_err(|e| io_error(format!("opening {}", segment_name(file)), e))?;
        let record = read_message_record(handle.as_ref(), at, size)?;
        let message = store::record::decode_message(&record.message)?;
        Ok((Arc::new(message), record.message))
    }

    /// Finishes everything for `close`: the last units, a sync, a checkpoint, the
    /// clean-shutdown marker.
    pub fn close(&mut self) -> Result<(), StoreError> {
        let captured = self.run_batch(Vec::new(), true);
        if let Some(reason) = self.shared.state.read().poisoned.clone() {
            return Err(StoreError::Poisoned { reason });
        }
        if let Err(e) = self.sync_dirty() {
            let reason = self.poison(&e);
            return Err(StoreError::Poisoned { reason });
        }
        let mut first_error = None;
        if let Some(captured) = captured {
            if let Err(e) = self.write_checkpoint(captured, Compact::No) {
                first_error.get_or_insert(e);
            }
        }
        if let Err(e) = self.write_clean_marker() {
            first_error.get_or_insert(e);
        }
        let background = self.shared.maintenance_error.lock().take();
        match first_error.or(background) {
            Some(e) => Err(e),
            None => Ok(()),
        }
    }

    fn write_clean_marker(&self) -> Result<(), StoreError> {
        let shared = &self.shared;
        let path = shared.dir.join(CLEAN_SHUTDOWN_FILE);
        shared.options.failpoints.check(FP_WRITE)?;
        let file = shared
            .disk
            .create(&path)
            .map_err(|e| io_error("writing the clean-shutdown marker", e))?;
        shared.options.failpoints.check(FP_SYNC)?;
        file.sync().map_err(|e| io_error("syncing the clean-shutdown marker", e))?;
        shared.disk.sync_dir(&shared.dir).map_err(|e| io_error("syncing the journal directory", e))
    }
}
