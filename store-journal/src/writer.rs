//! The writer: one OS thread that owns the journal's head and does every write and sync.
//!
//! Group commit without a linger timer: the writer blocks for the first unit, then, under
//! the index lock, drains every unit already queued, places their records (assigning each
//! its file and offset, rolling to a new segment when the head is full) and encodes them
//! into one buffer per segment; then, without the lock, it makes one write per segment and
//! one `fdatasync` (under [`SyncPolicy::Always`]) and completes every unit of the batch.
//! `Periodic` completes once written and syncs at most every interval; `Never` never syncs.
//!
//! An add whose every reference was acked (finally, outside a transaction) before its batch
//! is dropped with those acks (see [`Index::locate_add`]); a watermark record then keeps its
//! id from being handed out again.
//!
//! A failed write, sync or segment creation poisons the store: the batch's units and every
//! later one fail with [`StoreError::Poisoned`]; reads keep working (bodies not written stay
//! in memory).

use std::collections::{BTreeSet, HashSet};
use std::mem;
use std::sync::atomic::Ordering;
use std::sync::mpsc::{Receiver, RecvTimeoutError, Sender};
use std::sync::Arc;
use std::time::Instant;

use bytes::Bytes;
use parking_lot::RwLockWriteGuard;
use store::{
    Backlog, Completer, Message, MessageId, QueueKey, StoreError, SyncPolicy, TxnId,
    LAZY_SYNC_WITHIN,
};

use crate::checkpoint::{Encoded, Live, Position};
use crate::disk::{is_out_of_space, DiskFile};
use crate::engine::{Shared, State};
use crate::frame::{self, frame_len};
use crate::record::{self, Kind};
use crate::refs::{loc, loc_file, Loc};
use crate::segment::segment_name;
use crate::{io_error, FP_CREATE_SEGMENT, FP_SYNC, FP_WRITE, RESERVE_FILE};

/// What a record does to the index when the writer places it.
#[derive(Debug)]
pub enum Role {
    Plain,
    /// An add, registered in the index under `token` at submit.
    Add {
        token: u64,
        id: MessageId,
        priority: u8,
        queues: Vec<QueueKey>,
    },
    /// An ack; `releases` is the pending add whose reference it removed.
    Ack {
        releases: Option<u64>,
    },
}

/// One encoded record of a submitted unit.
#[derive(Debug)]
pub struct PendingRecord {
    pub kind: Kind,
    pub payload: Vec<u8>,
    /// The open transaction this record belongs to (adds, acks and prepares).
    pub txn: Option<TxnId>,
    pub role: Role,
}

/// A submitted unit on its way to the writer.
#[derive(Debug)]
pub struct Unit {
    pub records: Vec<PendingRecord>,
    /// Written without a sync of its own ([`store::UnitOfWork::lazy`]).
    pub lazy: bool,
    /// Bytes counted in [`State::queued_bytes`] for it.
    pub bytes: u64,
    pub completer: Option<Completer>,
}

/// What the writer thread is sent.
#[derive(Debug)]
pub enum Msg {
    Unit(Unit),
    /// Finish everything, checkpoint, mark the shutdown clean, stop; reply with the outcome.
    Close(Sender<Result<(), StoreError>>),
    /// Finish every queued unit and stop (the store was dropped without close: unclean).
    Stop,
}

/// A live message that compaction rewrites at the head.
#[derive(Debug)]
pub struct Relocation {
    pub id: MessageId,
    pub priority: u8,
    pub old: Loc,
    pub message: Arc<Message>,
    /// The encoded message record, as read from the old file.
    pub body: Bytes,
    pub queues: Vec<QueueKey>,
}

/// The index captured at the end of a batch, for a checkpoint.
pub struct Captured {
    pub position: Position,
    pub snapshot: Encoded,
    pub live: Live,
}

/// Bytes of one segment written by a batch.
struct Piece {
    file: u32,
    offset: u64,
    bytes: Vec<u8>,
    /// Create the segment first, preallocated to this size.
    create: Option<u64>,
}

/// The writer thread's state.
pub struct Writer {
    pub(crate) shared: Arc<Shared>,
    rx: Receiver<Msg>,
    pub(crate) head: u32,
    head_offset: u64,
    head_capacity: u64,
    /// Segments written since their last sync.
    dirty: BTreeSet<u32>,
    last_sync: Instant,
    pub(crate) since_checkpoint: u64,
    pub(crate) checkpoint_seq: u64,
    /// The last checkpoint's position and live bytes (reclaiming needs two in a row).
    pub(crate) previous: Option<(Position, Live)>,
    pub(crate) relocations: Vec<Relocation>,
    /// A close or stop found while draining, handled after the batch.
    pub(crate) control: Option<Msg>,
}

fn poisoned(reason: &str) -> StoreError {
    StoreError::Poisoned { reason: reason.to_owned() }
}

impl Writer {
    pub fn new(shared: Arc<Shared>, rx: Receiver<Msg>, last_segment: u32) -> Self {
        Writer {
            shared,
            rx,
            head: last_segment,
            head_offset: 0,
            head_capacity: 0,
            dirty: BTreeSet::new(),
            last_sync: Instant::now(),
            since_checkpoint: 0,
            checkpoint_seq: 0,
            previous: None,
            relocations: Vec::new(),
            control: None,
        }
    }

    /// Starts a fresh head segment after the newest one.
    pub fn start_head(&mut self) -> Result<(), StoreError> {
        let file = self.head + 1;
        let capacity = self.shared.options.segment_size;
        self.create_segment(file, capacity)?;
        self.set_head(file, capacity);
        Ok(())
    }

    /// Makes segment `file`, the newest, which holds no record (a head the last run never
    /// wrote to, or whose torn tail recovery cut to nothing), the head again instead of
    /// starting another file. It is truncated to nothing and preallocated anew first:
    /// recovery only checked the start of its zeros ([`crate::recovery::ZERO_PROBE`]), and
    /// no stale byte of an interrupted write may follow the records written now.
    pub fn reuse_head(&mut self, file: u32) -> Result<(), StoreError> {
        let shared = Arc::clone(&self.shared);
        let failpoints = &shared.options.failpoints;
        let capacity = shared.options.segment_size;
        let name = segment_name(file);
        let handle = shared.files.get(file).map_err(|e| io_error(format!("opening {name}"), e))?;
        failpoints.check(FP_CREATE_SEGMENT)?;
        handle.set_len(0).map_err(|e| io_error(format!("truncating {name}"), e))?;
        self.allocate(&name, handle.as_ref(), capacity)?;
        failpoints.check(FP_SYNC)?;
        handle.sync().map_err(|e| io_error(format!("syncing {name}"), e))?;
        tracing::debug!(segment = %name, "reusing the empty head segment");
        self.set_head(file, capacity);
        Ok(())
    }

    fn set_head(&mut self, file: u32, capacity: u64) {
        self.head = file;
        self.head_offset = 0;
        self.head_capacity = capacity;
        self.shared.state.write().set_used(file, 0);
    }

    /// The thread's loop.
    pub fn run(mut self) {
        loop {
            let msg = match self.control.take() {
                Some(msg) => msg,
                None => match self.next_message() {
                    Some(msg) => msg,
                    None => continue,
                },
            };
            match msg {
                Msg::Unit(unit) => {
                    self.run_batch(vec![unit], false);
                    if self.since_checkpoint >= self.shared.options.checkpoint_bytes {
                        self.checkpoint_in_background();
                    }
                }
                Msg::Close(reply) => {
                    let result = self.close();
                    let _ = reply.send(result);
                    return;
                }
                Msg::Stop => {
                    self.run_batch(Vec::new(), false);
                    if self.shared.options.sync != SyncPolicy::Never {
                        let _ = self.sync_dirty();
                    }
                    return;
                }
            }
        }
    }

    /// Blocks for the next message; `None` after a periodic sync or an idle checkpoint timed
    /// out the wait.
    fn next_message(&mut self) -> Option<Msg> {
        // Idle with something to checkpoint: wait at most the checkpoint interval. Files
        // written since the last sync wait for the periodic sync first; without syncs they
        // stay unsynced until the checkpoint syncs them, so they must not hold it back (they
        // did: a journal that never syncs never checkpointed while idle, so acks freed
        // nothing until more was written).
        let idle_checkpoint = self.since_checkpoint > 0 || self.reclaimable();
        let unsynced_waits = self.shared.options.sync != SyncPolicy::Never;
        if idle_checkpoint && (self.dirty.is_empty() || !unsynced_waits) {
            return match self.rx.recv_timeout(self.shared.options.checkpoint_interval) {
                Ok(msg) => Some(msg),
                Err(RecvTimeoutError::Timeout) => {
                    tracing::debug!("idle journal: checkpoint");
                    self.checkpoint_in_background();
                    None
                }
                Err(RecvTimeoutError::Disconnected) => Some(Msg::Stop),
            };
        }
        // Periodic syncs, and under `Always` the lazily durable units written since the last
        // sync (synced with the next unit that needs it, or at the latest after this).
        let interval = match self.shared.options.sync {
            SyncPolicy::Periodic(interval) => Some(interval),
            SyncPolicy::Always => Some(LAZY_SYNC_WITHIN),
            SyncPolicy::Never => None,
        };
        match interval {
            Some(interval) if !self.dirty.is_empty() => {
                let wait = interval.saturating_sub(self.last_sync.elapsed());
                match self.rx.recv_timeout(wait) {
                    Ok(msg) => Some(msg),
                    Err(RecvTimeoutError::Timeout) => {
                        if let Err(e) = self.sync_dirty() {
                            self.poison(&e);
                        }
                        None
                    }
                    Err(RecvTimeoutError::Disconnected) => Some(Msg::Stop),
                }
            }
            _ => Some(self.rx.recv().unwrap_or(Msg::Stop)),
        }
    }

    /// Reserves `len` bytes at the head (rolling to a new segment when they do not fit) and
    /// returns where, with the piece to append the record to.
    fn place<'a>(
        &mut self,
        pieces: &'a mut Vec<Piece>,
        state: &mut State,
        len: usize,
    ) -> (Loc, &'a mut Vec<u8>) {
        let len = len as u64;
        if self.head_offset + len > self.head_capacity {
            let capacity = self.shared.options.segment_size.max(len);
            self.head += 1;
            self.head_offset = 0;
            self.head_capacity = capacity;
            pieces.push(Piece {
                file: self.head,
                offset: 0,
                bytes: Vec::new(),
                create: Some(capacity),
            });
        }
        if !matches!(pieces.last(), Some(piece) if piece.file == self.head) {
            pieces.push(Piece {
                file: self.head,
                offset: self.head_offset,
                bytes: Vec::new(),
                create: None,
            });
        }
        let at = self.head_offset;
        self.head_offset += len;
        self.since_checkpoint += len;
        state.set_used(self.head, self.head_offset);
        let offset = u32::try_from(at).unwrap_or(u32::MAX);
        let piece = pieces.len() - 1;
        (loc(self.head, offset), &mut pieces[piece].bytes)
    }

    /// Writes one batch: `units` and every unit queued behind them (and any pending
    /// relocations). With `capture`, returns the index as of the batch's end.
    pub fn run_batch(&mut self, mut units: Vec<Unit>, capture: bool) -> Option<Captured> {
        let shared = Arc::clone(&self.shared);
        let mut state = shared.state.write();
        while let Ok(msg) = self.rx.try_recv() {
            match msg {
                Msg::Unit(unit) => units.push(unit),
                control => {
                    self.control = Some(control);
                    break;
                }
            }
        }
        state.queued_bytes = state.queued_bytes.saturating_sub(units.iter().map(|u| u.bytes).sum());
        if let Some(reason) = state.poisoned.clone() {
            drop(state);
            complete(&self.shared.backlog, units, &Err(poisoned(&reason)));
            return None;
        }
        let mut pieces: Vec<Piece> = Vec::new();
        let mut placed: Vec<Loc> = Vec::new();
        self.place_relocations(&mut state, &mut pieces, &mut placed);
        let mut dropped: HashSet<u64> = HashSet::new();
        for unit in &units {
            // Which records are written: not an add whose references are all gone, nor an ack
            // of such an add.
            let keep: Vec<bool> = unit
                .records
                .iter()
                .map(|record| match &record.role {
                    Role::Add { token, .. } => {
                        let dead = state
                            .index
                            .pending
                            .get(token)
                            .is_some_and(|b| b.refs == 0 && !b.in_txn);
                        if dead {
                            state.index.pending.remove(token);
                            dropped.insert(*token);
                        }
                        !dead
                    }
                    Role::Ack { releases: Some(token) } => !dropped.contains(token),
                    _ => true,
                })
                .collect();
            let last = keep.iter().rposition(|k| *k);
            for (i, record) in unit.records.iter().enumerate() {
                if !keep[i] {
                    continue;
                }
                let len = frame_len(record.payload.len());
                let (at, buf) = self.place(&mut pieces, &mut state, len);
                frame::append(buf, record.kind, Some(i) == last, &record.payload);
                let size = u32::try_from(len).unwrap_or(u32::MAX);
                if let Role::Add { token, id, priority, queues } = &record.role {
                    if let Some(at) =
                        state
                            .index
                            .locate_add(*token, *id, *priority, queues, record.txn, || (at, size))
                    {
                        placed.push(at);
                    }
                }
                if let Some(txn) = record.txn {
                    state.index.note_txn_record(txn, loc_file(at), size);
                }
            }
        }
        if !dropped.is_empty() {
            self.shared.dropped_adds.fetch_add(dropped.len() as u64, Ordering::Relaxed);
            let payload = record::encode_watermark(MessageId(state.index.next_message_id));
            let (_, buf) = self.place(&mut pieces, &mut state, frame_len(payload.len()));
            frame::append(buf, Kind::Watermark, true, &payload);
        }
        // The lock is released before any I/O; a capture encodes the index under a read lock
        // (reads go on, submits wait).
        let captured = if capture {
            let position = Position { file: self.head, offset: self.head_offset };
            let state = RwLockWriteGuard::downgrade(state);
            let (snapshot, live) = crate::checkpoint::encode(&state.index, position);
            Some(Captured { position, snapshot, live })
        } else {
            drop(state);
            None
        };
        // A batch of lazily durable units only (or of relocations) waits for the next sync.
        let sync = units.iter().any(|unit| !unit.lazy);
        let result = self.write_pieces(pieces, sync);
        match result {
            Ok(()) => {
                if !placed.is_empty() {
                    let mut state = shared.state.write();
                    for at in placed {
                        state.index.unwritten.remove(&at);
                    }
                }
                complete(&self.shared.backlog, units, &Ok(()));
                captured
            }
            Err(e) => {
                let reason = self.poison(&e);
                complete(&self.shared.backlog, units, &Err(poisoned(&reason)));
                None
            }
        }
    }

    fn place_relocations(
        &mut self,
        state: &mut State,
        pieces: &mut Vec<Piece>,
        placed: &mut Vec<Loc>,
    ) {
        for relocation in mem::take(&mut self.relocations) {
            let Relocation { id, priority, old, message, body, queues } = relocation;
            let queues: Vec<QueueKey> = queues
                .into_iter()
                .filter(|queue| {
                    state
                        .index
                        .queues
                        .get(queue)
                        .and_then(|refs| refs.get(priority, id.0))
                        .is_some_and(|slot| slot.loc() == old)
                })
                .collect();
            if queues.is_empty() {
                continue;
            }
            let payload = record::encode_add(id, priority, body, &queues, None);
            let len = frame_len(payload.len());
            let (at, buf) = self.place(pieces, state, len);
            frame::append(buf, Kind::Relocate, true, &payload);
            state.index.apply_relocate(
                id,
                priority,
                &queues,
                at,
                u32::try_from(len).unwrap_or(u32::MAX),
            );
            state.index.unwritten.insert(at, message);
            placed.push(at);
        }
    }

    /// Creates the batch's new segments, writes each piece, and syncs per the policy. A unit
    /// may span two segments: the older one is synced before the newer one is written, so that
    /// a power loss cannot keep the end of a unit without its beginning.
    fn write_pieces(&mut self, pieces: Vec<Piece>, sync: bool) -> Result<(), StoreError> {
        let shared = Arc::clone(&self.shared);
        let failpoints = &shared.options.failpoints;
        let count = pieces.len();
        for (i, piece) in pieces.into_iter().enumerate() {
            if let Some(capacity) = piece.create {
                self.create_segment(piece.file, capacity)?;
            }
            if piece.bytes.is_empty() {
                continue;
            }
            let file = self
                .shared
                .files
                .get(piece.file)
                .map_err(|e| io_error(format!("opening {}", segment_name(piece.file)), e))?;
            failpoints.check(FP_WRITE)?;
            file.write_at(piece.offset, &piece.bytes).map_err(|e| {
                io_error(
                    format!("writing {} at offset {}", segment_name(piece.file), piece.offset),
                    e,
                )
            })?;
            self.dirty.insert(piece.file);
            if i + 1 < count && self.shared.options.sync != SyncPolicy::Never {
                self.sync_dirty()?;
            }
        }
        match self.shared.options.sync {
            // A stream of lazy units alone still reaches the disk within LAZY_SYNC_WITHIN.
            SyncPolicy::Always if sync || self.last_sync.elapsed() >= LAZY_SYNC_WITHIN => {
                self.sync_dirty()
            }
            SyncPolicy::Periodic(interval) if self.last_sync.elapsed() >= interval => {
                self.sync_dirty()
            }
            _ => Ok(()),
        }
    }

    /// `fdatasync`s every segment written since its last sync, oldest first.
    pub fn sync_dirty(&mut self) -> Result<(), StoreError> {
        while let Some(&file) = self.dirty.first() {
            self.shared.options.failpoints.check(FP_SYNC)?;
            let handle = self
                .shared
                .files
                .get(file)
                .map_err(|e| io_error(format!("opening {}", segment_name(file)), e))?;
            handle.sync().map_err(|e| io_error(format!("syncing {}", segment_name(file)), e))?;
            self.shared.syncs.fetch_add(1, Ordering::Relaxed);
            self.dirty.remove(&file);
        }
        self.last_sync = Instant::now();
        Ok(())
    }

    /// Creates segment `file` preallocated to `capacity` bytes, durably (see
    /// [`Writer::allocate`] for a full disk).
    fn create_segment(&mut self, file: u32, capacity: u64) -> Result<(), StoreError> {
        let shared = Arc::clone(&self.shared);
        let failpoints = &shared.options.failpoints;
        let name = segment_name(file);
        failpoints.check(FP_CREATE_SEGMENT)?;
        let path = self.shared.files.path(file);
        let disk = &self.shared.disk;
        let handle = disk.create(&path).map_err(|e| io_error(format!("creating {name}"), e))?;
        self.allocate(&name, handle.as_ref(), capacity)?;
        failpoints.check(FP_SYNC)?;
        handle.sync().map_err(|e| io_error(format!("syncing {name}"), e))?;
        disk.sync_dir(&self.shared.dir)
            .map_err(|e| io_error(format!("syncing {}", self.shared.dir.display()), e))?;
        self.shared.files.insert(file, handle);
        Ok(())
    }

    /// Preallocates a segment. Out of space, the reserve file is released so that acks can
    /// still be written, and adds are refused from then on (until reclaiming frees space).
    fn allocate(&self, name: &str, handle: &dyn DiskFile, capacity: u64) -> Result<(), StoreError> {
        if let Err(e) = handle.allocate(capacity) {
            if !is_out_of_space(&e) {
                return Err(io_error(format!("preallocating {name}"), e));
            }
            let released = self.release_reserve();
            tracing::warn!(segment = %name, released, "disk full: new messages are refused until space is freed");
            self.shared.state.write().disk_full = true;
            handle.allocate(capacity).map_err(|e| io_error(format!("preallocating {name}"), e))?;
        }
        Ok(())
    }

    /// Deletes the reserve file; true if there was one.
    fn release_reserve(&self) -> bool {
        let path = self.shared.dir.join(RESERVE_FILE);
        matches!(self.shared.disk.exists(&path), Ok(true)) && self.shared.disk.remove(&path).is_ok()
    }

    /// Records the failure that poisons the store; returns its reason.
    pub fn poison(&mut self, error: &StoreError) -> String {
        let mut state = self.shared.state.write();
        let reason = state.poisoned.get_or_insert_with(|| error.to_string()).clone();
        drop(state);
        tracing::error!(error = %error, "journal write failed; the store is poisoned until reopened");
        reason
    }
}

fn complete(backlog: &Backlog, units: Vec<Unit>, result: &Result<(), StoreError>) {
    backlog.remove(units.iter().map(|unit| unit.bytes).sum());
    for unit in units {
        if let Some(completer) = unit.completer {
            completer.complete(result.clone());
        }
    }
}
