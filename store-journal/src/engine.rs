//! [`JournalStore`]: the [`MessageStore`] over the journal.
//!
//! `submit` encodes the unit's records on the caller's thread, then, under the index lock,
//! validates the unit, applies it to the index (so reads see it at once) and queues it for
//! the writer thread; it never waits for I/O. Reads take the lock only to find locations,
//! then read bodies from the segments (`pread` through the shared handle cache).

use std::collections::BTreeMap;
use std::path::{Path, PathBuf};
use std::sync::atomic::{AtomicU64, Ordering};
use std::sync::mpsc;
use std::sync::Arc;
use std::thread::JoinHandle;

use parking_lot::{Mutex, RwLock};
use store::{
    Backlog, Completion, Message, MessageStore, Operation, PageKey, QueueKey, Recovered,
    StoreError, StoreUsage, StoredMessage, UnitOfWork,
};

use crate::disk::{Disk, DiskFile, RealDisk};
use crate::frame::frame_len;
use crate::index::Index;
use crate::options::JournalOptions;
use crate::record::{self, Kind};
use crate::recovery;
use crate::refs::{is_pending, loc_file, Loc, PENDING};
use crate::segment::{read_message_record, segment_name, FileCache};
use crate::writer::{Msg, PendingRecord, Role, Unit, Writer};
use crate::{io_error, CLEAN_SHUTDOWN_FILE, FP_DELETE, FP_READ, FP_SYNC, RESERVE_FILE};

/// What the index lock guards: the index and the store's status.
#[derive(Debug, Default)]
pub struct State {
    pub index: Index,
    pub closed: bool,
    /// Why the store is poisoned, once a write or sync failed.
    pub poisoned: Option<String>,
    /// Every data file with the bytes used in it (records placed so far); change it through
    /// [`State::set_used`] and [`State::remove_segment`], which keep the total.
    pub segments: BTreeMap<u32, u64>,
    segments_total: u64,
    /// Bytes of units submitted but not yet placed by the writer.
    pub queued_bytes: u64,
    /// A segment could not be allocated: adds are refused until space is freed.
    pub disk_full: bool,
}

impl State {
    /// Bytes of data files plus bytes queued for the writer.
    fn used_bytes(&self) -> u64 {
        self.segments_total + self.queued_bytes
    }

    pub fn set_used(&mut self, file: u32, used: u64) {
        let old = self.segments.insert(file, used).unwrap_or(0);
        self.segments_total = (self.segments_total + used).saturating_sub(old);
    }

    pub fn remove_segment(&mut self, file: u32) {
        if let Some(old) = self.segments.remove(&file) {
            self.segments_total = self.segments_total.saturating_sub(old);
        }
    }
}

/// What the store's handle, its readers and the writer thread share.
#[derive(Debug)]
pub struct Shared {
    pub dir: PathBuf,
    pub disk: Arc<dyn Disk>,
    pub options: JournalOptions,
    pub state: RwLock<State>,
    pub files: FileCache,
    /// `fdatasync` calls on data files.
    pub syncs: AtomicU64,
    /// Checkpoints written, messages relocated by compaction, data files deleted.
    pub checkpoints: AtomicU64,
    pub relocated: AtomicU64,
    pub deleted_files: AtomicU64,
    /// Adds dropped from their batch because every reference was acked first.
    pub dropped_adds: AtomicU64,
    /// Ids below this were recovered after an unclean shutdown: they may have been
    /// delivered already, so they are returned marked redelivered.
    pub redeliver_below: u64,
    /// The first failure of background maintenance (checkpoint, delete, compaction), reported
    /// by `close`.
    pub maintenance_error: Mutex<Option<StoreError>>,
    /// Bytes of units submitted and not yet written (or failed): what the writer still holds.
    pub backlog: Backlog,
}

/// What [`JournalStore::stats`] reports.
#[derive(Debug, Clone, Copy, PartialEq, Eq, Default)]
pub struct JournalStats {
    /// See [`JournalStore::fsync_count`].
    pub fsyncs: u64,
    pub checkpoints: u64,
    /// Live messages rewritten at the head by compaction.
    pub relocated_messages: u64,
    pub deleted_files: u64,
    /// Adds never written because every reference was acked before their batch.
    pub dropped_adds: u64,
    /// Data files now.
    pub data_files: usize,
}

/// ferromq's journal store: see the [crate documentation](crate).
#[derive(Debug)]
pub struct JournalStore {
    shared: Arc<Shared>,
    tx: mpsc::Sender<Msg>,
    writer: Mutex<Option<JoinHandle<()>>>,
}

impl JournalStore {
    /// Opens (creating if needed) the journal store in `dir` and recovers it.
    pub fn open(dir: &Path, options: JournalOptions) -> Result<JournalStore, StoreError> {
        JournalStore::open_with_disk(Arc::new(RealDisk), dir, options)
    }

    /// Opens the journal store in `dir` of `disk` (tests pass a
    /// [`SimulatedDisk`](crate::testing::SimulatedDisk)).
    pub fn open_with_disk(
        disk: Arc<dyn Disk>,
        dir: &Path,
        options: JournalOptions,
    ) -> Result<JournalStore, StoreError> {
        options.validate()?;
        let failpoints = options.failpoints.clone();
        disk.create_dir_all(dir).map_err(|e| io_error(format!("creating {}", dir.display()), e))?;
        let recovered = recovery::recover(disk.as_ref(), dir, &options)?;
        if recovered.clean {
            // From now on a crash is an unclean shutdown.
            failpoints.check(FP_DELETE)?;
            disk.remove(&dir.join(CLEAN_SHUTDOWN_FILE))
                .map_err(|e| io_error("removing the clean-shutdown marker", e))?;
            failpoints.check(FP_SYNC)?;
            disk.sync_dir(dir).map_err(|e| io_error(format!("syncing {}", dir.display()), e))?;
        }
        let redeliver_below = if recovered.clean { 0 } else { recovered.index.next_message_id };
        let last_segment = recovered.segments.keys().next_back().copied().unwrap_or(0);
        let files = FileCache::new(Arc::clone(&disk), dir);
        for (file, handle) in recovered.handles {
            files.insert(file, handle);
        }
        let shared = Arc::new(Shared {
            dir: dir.to_path_buf(),
            disk: Arc::clone(&disk),
            state: RwLock::new({
                let mut state = State { index: recovered.index, ..State::default() };
                for (file, used) in recovered.segments {
                    state.set_used(file, used);
                }
                state
            }),
            backlog: Backlog::new(options.max_backlog),
            options,
            files,
            syncs: AtomicU64::new(0),
            checkpoints: AtomicU64::new(0),
            relocated: AtomicU64::new(0),
            deleted_files: AtomicU64::new(0),
            dropped_adds: AtomicU64::new(0),
            redeliver_below,
            maintenance_error: Mutex::new(None),
        });
        let (tx, rx) = mpsc::channel();
        let mut writer = Writer::new(Arc::clone(&shared), rx, last_segment);
        if let Some((seq, position, live)) = recovered.checkpoint {
            writer.checkpoint_seq = seq;
            writer.previous = Some((position, live));
        }
        match recovered.empty_head {
            Some(file) => writer.reuse_head(file)?,
            None => writer.start_head()?,
        }
        if !recovered.rolled_back.is_empty() {
            // Written now, so that a transaction id the broker reuses cannot pick up the
            // operations of the one recovery rolled back.
            let records = recovered
                .rolled_back
                .iter()
                .map(|txn| PendingRecord {
                    kind: Kind::Rollback,
                    payload: record::encode_txn(*txn),
                    txn: None,
                    role: Role::Plain,
                })
                .collect();
            writer.run_batch(vec![Unit { records, lazy: false, bytes: 0, completer: None }], false);
            writer.sync_dirty()?;
            if let Some(reason) = shared.state.read().poisoned.clone() {
                return Err(StoreError::Poisoned { reason });
            }
        }
        if recovered.replayed || !recovered.rolled_back.is_empty() {
            // The next recovery starts at the new head instead of replaying all of this again.
            writer.checkpoint_at_open()?;
        }
        let reserve = dir.join(RESERVE_FILE);
        if !matches!(disk.exists(&reserve), Ok(true)) {
            if let Err(e) = writer.create_reserve() {
                tracing::warn!(error = %e, "no space reserve for the journal (acks on a full disk may fail)");
                if matches!(e, StoreError::Full { .. }) {
                    // Nearly full already: refuse adds until reclaiming frees space.
                    shared.state.write().disk_full = true;
                }
            }
        }
        let writer = std::thread::Builder::new()
            .name("journal-writer".into())
            .spawn(move || writer.run())
            .map_err(|e| io_error("starting the journal writer thread", e))?;
        Ok(JournalStore { shared, tx, writer: Mutex::new(Some(writer)) })
    }

    /// `fdatasync` calls that made units durable since open: one per batch under
    /// `SyncPolicy::Always`, plus those at segment rolls, checkpoints and close (the syncs that
    /// create a segment, and snapshot and directory syncs, are not counted). For benchmarks.
    pub fn fsync_count(&self) -> u64 {
        self.shared.syncs.load(Ordering::Relaxed)
    }

    /// Counters of the journal's own work since open.
    pub fn stats(&self) -> JournalStats {
        let shared = &self.shared;
        JournalStats {
            fsyncs: shared.syncs.load(Ordering::Relaxed),
            checkpoints: shared.checkpoints.load(Ordering::Relaxed),
            relocated_messages: shared.relocated.load(Ordering::Relaxed),
            deleted_files: shared.deleted_files.load(Ordering::Relaxed),
            dropped_adds: shared.dropped_adds.load(Ordering::Relaxed),
            data_files: shared.state.read().segments.len(),
        }
    }

    /// The data files (segment numbers) the store has now.
    pub fn data_files(&self) -> Vec<u32> {
        self.shared.state.read().segments.keys().copied().collect()
    }

    /// An estimate of the heap bytes the index's references take.
    pub fn index_heap_bytes(&self) -> usize {
        self.shared.state.read().index.heap_bytes()
    }

    /// The directory the store lives in.
    pub fn dir(&self) -> &Path {
        &self.shared.dir
    }

    /// Encodes a unit's records (outside the lock: message encoding is the costly part).
    fn encode(unit: &UnitOfWork) -> Vec<PendingRecord> {
        unit.operations
            .iter()
            .map(|operation| match operation {
                Operation::AddMessage { message, queues, txn } => {
                    let mut unique: Vec<QueueKey> = Vec::with_capacity(queues.len());
                    for queue in queues {
                        if !unique.contains(queue) {
                            unique.push(queue.clone());
                        }
                    }
                    let priority = message.priority();
                    PendingRecord {
                        kind: Kind::AddMessage,
                        payload: record::encode_add_message(message, priority, &unique, *txn),
                        txn: *txn,
                        role: Role::Add { token: 0, id: message.id, priority, queues: unique },
                    }
                }
                Operation::Ack { queue, key, txn } => PendingRecord {
                    kind: Kind::Ack,
                    payload: record::encode_ack(queue, *key, *txn),
                    txn: *txn,
                    role: Role::Ack { releases: None },
                },
                Operation::AddDestination(d) => {
                    plain(Kind::AddDestination, record::encode_destination(d))
                }
                Operation::RemoveDestination(d) => {
                    plain(Kind::RemoveDestination, record::encode_destination(d))
                }
                Operation::AddSubscription(info) => {
                    plain(Kind::AddSubscription, record::encode_subscription(info))
                }
                Operation::RemoveSubscription(key) => {
                    plain(Kind::RemoveSubscription, record::encode_subscription_key(key))
                }
                Operation::Prepare(txn) => PendingRecord {
                    kind: Kind::Prepare,
                    payload: record::encode_txn(*txn),
                    txn: Some(*txn),
                    role: Role::Plain,
                },
                Operation::Commit(txn) => plain(Kind::Commit, record::encode_txn(*txn)),
                Operation::Rollback(txn) => plain(Kind::Rollback, record::encode_txn(*txn)),
            })
            .collect()
    }
}

fn plain(kind: Kind, payload: Vec<u8>) -> PendingRecord {
    PendingRecord { kind, payload, txn: None, role: Role::Plain }
}

/// Where a body read comes from.
enum Source {
    Memory(Arc<Message>),
    Disk(Arc<dyn DiskFile>, Loc, u32),
}

impl MessageStore for JournalStore {
    fn name(&self) -> &'static str {
        "journal"
    }

    fn recover(&self) -> Result<Recovered, StoreError> {
        let state = self.shared.state.read();
        if state.closed {
            return Err(StoreError::Closed);
        }
        let index = &state.index;
        Ok(Recovered {
            destinations: index.all_destinations(),
            subscriptions: index.subscriptions.values().cloned().collect(),
            prepared: index.prepared(),
            next_message_id: store::MessageId(index.next_message_id),
        })
    }

    fn submit(&self, unit: UnitOfWork) -> Completion {
        let mut records = JournalStore::encode(&unit);
        let bytes: u64 = records.iter().map(|r| frame_len(r.payload.len()) as u64).sum();
        let adds = unit.operations.iter().any(|op| matches!(op, Operation::AddMessage { .. }));
        let mut state = self.shared.state.write();
        if state.closed {
            return Completion::ready(Err(StoreError::Closed));
        }
        if let Some(reason) = &state.poisoned {
            return Completion::ready(Err(StoreError::Poisoned { reason: reason.clone() }));
        }
        if let Err(e) = state.index.validate(&unit.operations) {
            return Completion::ready(Err(e));
        }
        if adds {
            let max = self.shared.options.max_size;
            if state.disk_full {
                return Completion::ready(Err(StoreError::Full {
                    reason: "the disk under the journal is full".into(),
                }));
            }
            if max > 0 && state.used_bytes() + bytes > max {
                return Completion::ready(Err(StoreError::Full {
                    reason: format!(
                        "the journal holds {} bytes of its max_size {max}",
                        state.used_bytes()
                    ),
                }));
            }
        }
        if records.is_empty() {
            return Completion::ready(Ok(()));
        }
        let index = &mut state.index;
        for (operation, record) in unit.operations.into_iter().zip(records.iter_mut()) {
            match operation {
                Operation::AddMessage { message, txn, .. } => {
                    if let Role::Add { token, id, priority, queues } = &mut record.role {
                        *token = index.register_pending(message, txn.is_some());
                        index.apply_add(*id, *priority, queues, txn, PENDING | *token, 0);
                    }
                }
                Operation::Ack { queue, key, txn } => {
                    record.role = Role::Ack { releases: index.apply_ack(&queue, key, txn) };
                }
                Operation::AddDestination(d) => index.apply_add_destination(d),
                Operation::RemoveDestination(d) => index.apply_remove_destination(&d),
                Operation::AddSubscription(info) => index.apply_add_subscription(info),
                Operation::RemoveSubscription(key) => index.apply_remove_subscription(&key),
                Operation::Prepare(txn) => index.apply_prepare(txn),
                Operation::Commit(txn) => index.apply_commit(txn),
                Operation::Rollback(txn) => index.apply_rollback(txn),
            }
        }
        state.queued_bytes += bytes;
        self.shared.backlog.add(bytes);
        let (completer, completion) = Completion::pending();
        let unit = Unit { records, lazy: unit.lazy, bytes, completer: Some(completer) };
        if let Err(mpsc::SendError(Msg::Unit(unit))) = self.tx.send(Msg::Unit(unit)) {
            // The writer is gone (it only stops once the store is closed).
            self.shared.backlog.remove(unit.bytes);
            if let Some(completer) = unit.completer {
                completer.complete(Err(StoreError::Closed));
            }
        }
        completion
    }

    fn read_page(
        &self,
        queue: &QueueKey,
        after: Option<PageKey>,
        limit: usize,
    ) -> Result<Vec<StoredMessage>, StoreError> {
        let sources: Vec<(u64, Source)> = {
            let state = self.shared.state.read();
            if state.closed {
                return Err(StoreError::Closed);
            }
            let index = &state.index;
            let mut sources = Vec::new();
            for slot in index.page(queue, after, limit) {
                let at = slot.loc();
                let source = if is_pending(at) {
                    match index.pending.get(&(at & !PENDING)) {
                        Some(body) => Source::Memory(Arc::clone(&body.message)),
                        None => {
                            return Err(StoreError::Corrupt {
                                location: format!("journal index of {queue:?}"),
                                reason: format!("message {} has no body", slot.id()),
                            })
                        }
                    }
                } else if let Some(message) = index.unwritten.get(&at) {
                    Source::Memory(Arc::clone(message))
                } else {
                    // The handle is taken under the lock: a file deleted later stays readable.
                    let handle = self.shared.files.get(loc_file(at)).map_err(|e| {
                        io_error(format!("opening {}", segment_name(loc_file(at))), e)
                    })?;
                    Source::Disk(handle, at, slot.size())
                };
                sources.push((slot.id(), source));
            }
            sources
        };
        if sources.iter().any(|(_, source)| matches!(source, Source::Disk(..))) {
            self.shared.options.failpoints.check(FP_READ)?;
        }
        sources
            .into_iter()
            .map(|(id, source)| {
                let message = match source {
                    Source::Memory(message) => message,
                    Source::Disk(handle, at, size) => {
                        let record = read_message_record(handle.as_ref(), at, size)?;
                        Arc::new(store::record::decode_message(&record.message)?)
                    }
                };
                Ok(StoredMessage { message, redelivered: id < self.shared.redeliver_below })
            })
            .collect()
    }

    fn count(&self, queue: &QueueKey) -> Result<u64, StoreError> {
        let state = self.shared.state.read();
        if state.closed {
            return Err(StoreError::Closed);
        }
        Ok(state.index.count(queue))
    }

    fn backlog(&self) -> Option<&Backlog> {
        Some(&self.shared.backlog)
    }

    fn usage(&self) -> StoreUsage {
        let used_bytes = self.shared.state.read().used_bytes();
        StoreUsage { used_bytes, limit_bytes: self.shared.options.max_size }
    }

    fn close(&self) -> Result<(), StoreError> {
        let Some(writer) = self.writer.lock().take() else { return Ok(()) };
        self.shared.state.write().closed = true;
        let (reply, result) = mpsc::channel();
        let result = match self.tx.send(Msg::Close(reply)) {
            Ok(()) => result.recv().unwrap_or(Err(StoreError::Closed)),
            Err(_) => Err(StoreError::Closed),
        };
        if writer.join().is_err() {
            return Err(StoreError::Poisoned {
                reason: "the journal writer thread panicked".into(),
            });
        }
        result
    }
}

impl Drop for JournalStore {
    fn drop(&mut self) {
        // Dropped without close: finish the queued units, but leave no clean-shutdown
        // marker (the next open treats this as a crash).
        if let Some(writer) = self.writer.lock().take() {
            self.shared.state.write().closed = true;
            let _ = self.tx.send(Msg::Stop);
            let _ = writer.join();
        }
    }
}
