//! # store-lsm: ferromq's LSM store
//!
//! This crate owns [`LsmStore`], the [`store::MessageStore`] that keeps messages in an
//! ordered key-value engine behind a small [`Engine`] trait (TiKV's engine traits in
//! miniature: write batches, point reads, range scans, an explicit sync), with two engines:
//!
//! - **sled** 0.34, pure Rust: the part LevelDB-in-Java plays in seed 001;
//! - **RocksDB** through the `rocksdb` crate, linking Debian's `librocksdb-dev` 7.8.3 (the
//!   `rocksdb` cargo feature, on by default; `.cargo/config.toml` points `ROCKSDB_LIB_DIR`
//!   at it so that nothing builds RocksDB from source): LevelDB over JNI in seed 001.
//!
//! ```no_run
//! use std::path::Path;
//! use store::MessageStore;
//! use store_lsm::{EngineKind, LsmOptions, LsmStore};
//!
//! let options = LsmOptions { engine: EngineKind::Sled, ..LsmOptions::default() };
//! let store = LsmStore::open(Path::new("data/lsm"), options)?;
//! let recovered = store.recover()?;
//! # let _ = recovered;
//! store.close()?;
//! # Ok::<(), store::StoreError>(())
//! ```
//!
//! ## Layout
//!
//! One keyspace per kind of record, one byte of prefix each (`keys.rs` has the table): a
//! body is stored once under `'m' id`; each queue holding it has a reference
//! `'q' qid (255 - priority) id`, so a queue's references sort in [`store::PageKey`] order
//! (priority first, then id) and `read_page` is one range scan from just after the given
//! key, with a point read of each body. Queue names are interned to a `u32` (`'k'` keys) so
//! that reference keys stay 14 bytes. An ack deletes its reference, and the body with its
//! last one; bodies shared by several queues have their reference count in memory (a body
//! not counted there has one reference). Transactional adds and acks are streamed under
//! `'t' txn seq` and applied (or dropped) by the commit (rollback); a prepare is a
//! `'x' txn` key.
//!
//! ## Writing
//!
//! `submit` validates the unit ([`store::validate_unit`]), builds its puts and deletes on
//! the caller's thread (reading through the unwritten units and the engine), puts them in
//! an in-memory overlay that every read consults, and queues them for the writer thread,
//! which turns everything queued into one engine write batch and syncs it per the
//! [`SyncPolicy`] (`writer.rs`). The bytes queued are counted in a [`store::Backlog`] so
//! that the broker paces producers faster than the disk. `max_size` bounds the bytes of
//! live bodies: adds beyond it fail with [`StoreError::Full`], acks always work.
//!
//! ## Recovery
//!
//! At open, one scan of every keyspace but the bodies rebuilds the counts, shared
//! reference counts, live bytes, interned names, destinations, subscriptions and prepared
//! transactions; unprepared transactions are rolled back (`recovery.rs`). The engine's own
//! log makes each write batch atomic after a crash, so a unit (always inside one batch) is
//! there whole or not at all. The scan reads 14-byte keys and 4-byte values per pending
//! reference, never a body; `recovery_of_many_references_is_a_key_scan` (ignored, run it in
//! release) measures it: 1,000,000 pending 100-byte messages on one queue reopened in 3.1 s
//! on RocksDB and 60 s on sled (2 shared cores; sled's own open, which replays its log
//! since its last snapshot, was not separated from the key scan).
//!
//! ## Failures
//!
//! Every engine I/O checks a failpoint first ([`FAILPOINTS`]). A failed write or sync
//! poisons the store ([`StoreError::Poisoned`]); reads go on; a restart recovers what
//! reached the disk.
//!
//! ## Crashes and power cuts
//!
//! The tests kill a child process writing with several threads (`tests/crash.rs`, over the
//! shared harness `store::kit::crash`), six times on one directory, and check its ledger
//! after each reopen: every confirmed unit there and whole, no unit half there, no
//! confirmed ack undone. The power-loss variant
//! runs the child under [`store::powercut`] (an `LD_PRELOAD` library that keeps the
//! durable image of the directory: data durable once its file is fsynced, names once their
//! directory is) and reopens the image. It found that sled never syncs its directory, so a
//! new store's `db` file could vanish with a power cut: the sled engine syncs the directory
//! once it is open. It also fails, as it should, if the sled engine's `fdatasync` after
//! sled's `flush` (a `sync_file_range`) or RocksDB's synced `flush_wal` is taken out.
#![cfg_attr(not(test), deny(clippy::unwrap_used))]

use std::path::{Path, PathBuf};
use std::sync::atomic::{AtomicBool, AtomicU64, Ordering};
use std::sync::Arc;
use std::thread::JoinHandle;

use parking_lot::{Condvar, Mutex, RwLock};
use store::record;
use store::{
    validate_unit, Backlog, Completion, Failpoints, MessageId, MessageStore, PageKey, QueueKey,
    Recovered, StoreError, StoreUsage, StoredMessage, SyncPolicy, TxnId, UnitOfWork,
};

pub mod engine;
mod error;
mod keys;
mod recovery;
mod state;
pub mod testing;
mod view;
mod writer;

#[cfg(test)]
mod tests;

pub use engine::{Engine, EngineKind, WriteBatch};
pub use error::LsmError;
pub use keys::SCHEMA_VERSION;

use state::{Builder, State};
use writer::{Queued, WriterQueue};

/// Checked before opening the engine.
pub const FAILPOINT_OPEN: &str = "lsm.open";
/// Checked before every engine read (point read or scan).
pub const FAILPOINT_READ: &str = "lsm.read";
/// Checked before every engine write batch.
pub const FAILPOINT_WRITE: &str = "lsm.write";
/// Checked before every engine sync.
pub const FAILPOINT_SYNC: &str = "lsm.sync";
/// Every failpoint the LSM store checks.
pub const FAILPOINTS: &[&str] = &[FAILPOINT_OPEN, FAILPOINT_READ, FAILPOINT_WRITE, FAILPOINT_SYNC];

/// 32 MiB of units waiting for the writer, as the journal.
pub const DEFAULT_MAX_BACKLOG: u64 = 32 * 1024 * 1024;

/// How an [`LsmStore`] is configured.
#[derive(Debug, Clone)]
pub struct LsmOptions {
    pub engine: EngineKind,
    /// When a unit counts as durable (`Always`: after the engine's sync of its batch).
    pub sync: SyncPolicy,
    /// The most bytes of live message bodies: beyond it adds are refused with
    /// [`StoreError::Full`] while acks and removals still work (0 = no limit).
    pub max_size: u64,
    /// The most bytes of units waiting for the writer (see [`store::Backlog`]; 0 = none).
    pub max_backlog: u64,
    /// The failpoints checked before every I/O (see [`FAILPOINTS`]).
    pub failpoints: Failpoints,
}

impl Default for LsmOptions {
    fn default() -> Self {
        LsmOptions {
            engine: EngineKind::default(),
            sync: SyncPolicy::Always,
            max_size: 0,
            max_backlog: DEFAULT_MAX_BACKLOG,
            failpoints: Failpoints::new(),
        }
    }
}

/// Counters of the writer, for tests and benchmarks.
#[derive(Debug, Default)]
pub struct Stats {
    pub units: AtomicU64,
    pub batches: AtomicU64,
    pub syncs: AtomicU64,
}

/// A snapshot of [`Stats`].
#[derive(Debug, Clone, Copy, PartialEq, Eq, Default)]
pub struct LsmStats {
    /// Units written.
    pub units: u64,
    /// Write batches (group commits).
    pub batches: u64,
    /// Engine syncs (fsyncs of the engine's log).
    pub syncs: u64,
}

/// What the store and its writer thread share.
pub(crate) struct Inner {
    pub engine: Box<dyn Engine>,
    pub state: RwLock<State>,
    pub queue: Mutex<WriterQueue>,
    pub wake: Condvar,
    pub backlog: Backlog,
    pub options: LsmOptions,
    pub stats: Stats,
    poisoned: Mutex<Option<String>>,
}

impl Inner {
    pub fn poisoned(&self) -> Option<String> {
        self.poisoned.lock().clone()
    }

    pub fn poison(&self, reason: String) {
        tracing::error!(%reason, "LSM store poisoned: refusing writes until restarted");
        self.poisoned.lock().get_or_insert(reason);
    }
}

/// The LSM [`MessageStore`]. Every method takes `&self`; dropping it without
/// [`MessageStore::close`] writes what was submitted but leaves the store marked unclean.
pub struct LsmStore {
    inner: Arc<Inner>,
    writer: Mutex<Option<JoinHandle<()>>>,
    closed: AtomicBool,
    dir: PathBuf,
    /// The last run did not close cleanly: messages that were there at open are delivered
    /// marked redelivered.
    crashed: bool,
    /// Ids below this were there at open.
    first_new_id: u64,
    name: &'static str,
}

impl std::fmt::Debug for LsmStore {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        f.debug_struct("LsmStore").field("dir", &self.dir).field("engine", &self.name).finish()
    }
}

impl LsmStore {
    /// Opens (creating when missing) the store in `dir` and recovers it.
    pub fn open(dir: &Path, options: LsmOptions) -> Result<LsmStore, StoreError> {
        if let SyncPolicy::Periodic(interval) = options.sync {
            if interval.is_zero() {
                return Err(StoreError::Invalid {
                    reason: "LSM periodic sync interval is zero".into(),
                });
            }
        }
        options.failpoints.check(FAILPOINT_OPEN)?;
        std::fs::create_dir_all(dir)
            .map_err(|e| StoreError::io(format!("creating {}", dir.display()), e))?;
        let engine = options.engine.open(dir)?;
        let opened = recovery::recover(engine.as_ref(), &options.failpoints)?;
        let first_new_id = opened.state.next_message_id;
        let name = match options.engine {
            EngineKind::Sled => "lsm-sled",
            EngineKind::RocksDb => "lsm-rocksdb",
        };
        let inner = Arc::new(Inner {
            engine,
            state: RwLock::new(opened.state),
            queue: Mutex::new(WriterQueue::default()),
            wake: Condvar::new(),
            backlog: Backlog::new(options.max_backlog),
            options,
            stats: Stats::default(),
            poisoned: Mutex::new(None),
        });
        let writer_inner = Arc::clone(&inner);
        let writer = std::thread::Builder::new()
            .name("lsm-writer".into())
            .spawn(move || writer::run(writer_inner))
            .map_err(|e| StoreError::io("starting the LSM writer thread", e))?;
        Ok(LsmStore {
            inner,
            writer: Mutex::new(Some(writer)),
            closed: AtomicBool::new(false),
            dir: dir.to_path_buf(),
            crashed: opened.crashed,
            first_new_id,
            name,
        })
    }

    /// The engine's name (`"sled"`, `"rocksdb"`).
    pub fn engine_name(&self) -> &'static str {
        self.inner.engine.name()
    }

    pub fn stats(&self) -> LsmStats {
        let stats = &self.inner.stats;
        LsmStats {
            units: stats.units.load(Ordering::Relaxed),
            batches: stats.batches.load(Ordering::Relaxed),
            syncs: stats.syncs.load(Ordering::Relaxed),
        }
    }

    /// Bytes of the engine's files in the store's directory (reads the directory: not for
    /// hot paths; [`MessageStore::usage`] is the cheap, logical figure).
    pub fn disk_bytes(&self) -> u64 {
        fn walk(dir: &Path) -> u64 {
            let Ok(entries) = std::fs::read_dir(dir) else { return 0 };
            entries
                .filter_map(Result::ok)
                .map(|entry| match entry.metadata() {
                    Ok(meta) if meta.is_dir() => walk(&entry.path()),
                    Ok(meta) => meta.len(),
                    Err(_) => 0,
                })
                .sum()
        }
        walk(&self.dir)
    }

    fn check_open(&self) -> Result<(), StoreError> {
        if self.closed.load(Ordering::Acquire) {
            return Err(StoreError::Closed);
        }
        Ok(())
    }

    fn enqueue(&self, unit: UnitOfWork) -> Result<Completion, StoreError> {
        self.check_open()?;
        if let Some(reason) = self.inner.poisoned() {
            return Err(StoreError::Poisoned { reason });
        }
        let inner = &*self.inner;
        let mut state = inner.state.write();
        validate_unit(&unit.operations, |txn| state.txn_state(txn))?;
        let adding = state::added_bytes(&unit.operations);
        let limit = inner.options.max_size;
        if adding > 0 && limit > 0 && state.live_bytes.saturating_add(adding) > limit {
            return Err(StoreError::Full {
                reason: format!(
                    "the LSM store holds {} bytes of messages, its max_size is {limit}",
                    state.live_bytes
                ),
            });
        }
        let mut builder = Builder::new(&state, inner.engine.as_ref(), &inner.options.failpoints);
        for operation in unit.operations {
            builder.apply(operation)?;
        }
        let (writes, delta) = builder.finish();
        let seq = state.next_seq;
        state.next_seq += 1;
        state.apply(delta, &writes, seq);
        let bytes: u64 =
            writes.iter().map(|(k, v)| (k.len() + v.as_ref().map_or(0, Vec::len)) as u64).sum();
        let (completer, completion) = Completion::pending();
        inner.backlog.add(bytes);
        // Queued under the state lock, so that the writer sees units in submission order.
        inner.queue.lock().units.push(Queued { seq, writes, completer, bytes });
        drop(state);
        inner.wake.notify_one();
        Ok(completion)
    }

    /// Stops the writer after it wrote everything queued.
    fn stop_writer(&self) {
        self.inner.queue.lock().closing = true;
        self.inner.wake.notify_one();
        if let Some(writer) = self.writer.lock().take() {
            if writer.join().is_err() {
                self.inner.poison("the LSM writer thread panicked".into());
            }
        }
    }
}

impl MessageStore for LsmStore {
    fn name(&self) -> &'static str {
        self.name
    }

    fn recover(&self) -> Result<Recovered, StoreError> {
        self.check_open()?;
        let state = self.inner.state.read();
        let mut destinations = state.destinations.clone();
        destinations.extend(
            state
                .counts
                .keys()
                .filter_map(|qid| state.queues.get(qid))
                .map(|q| q.destination.clone()),
        );
        let mut prepared: Vec<TxnId> =
            state.txns.iter().filter(|(_, t)| t.prepared).map(|(txn, _)| *txn).collect();
        prepared.sort_unstable();
        Ok(Recovered {
            destinations: destinations.into_iter().collect(),
            subscriptions: state.subscriptions.values().cloned().collect(),
            prepared,
            next_message_id: MessageId(state.next_message_id),
        })
    }

    fn submit(&self, unit: UnitOfWork) -> Completion {
        match self.enqueue(unit) {
            Ok(completion) => completion,
            Err(e) => Completion::ready(Err(e)),
        }
    }

    fn read_page(
        &self,
        queue: &QueueKey,
        after: Option<PageKey>,
        limit: usize,
    ) -> Result<Vec<StoredMessage>, StoreError> {
        self.check_open()?;
        let inner = &*self.inner;
        let state = inner.state.read();
        let Some(qid) = state.queue_ids.get(queue).copied() else {
            return Ok(Vec::new());
        };
        inner.options.failpoints.check(FAILPOINT_READ)?;
        let (start, end) = keys::references(qid, after);
        let references = view::live(view::Merge::new(
            view::overlay_range(&state.overlay, &start, &end),
            view::engine_range(inner.engine.as_ref(), &start, &end),
        ));
        let mut page = Vec::with_capacity(limit.min(1024));
        for entry in references.take(limit) {
            let (key, _) = entry.map_err(StoreError::from)?;
            let (_, page_key) = keys::parse_reference(&key)?;
            let body_key = keys::body(page_key.id);
            let body = state.get(inner.engine.as_ref(), &inner.options.failpoints, &body_key)?;
            let Some(body) = body else {
                return Err(LsmError::corrupt(&key, "reference to a message without a body").into());
            };
            let encoded =
                body.get(1..).ok_or_else(|| LsmError::corrupt(&body_key, "empty body"))?;
            let message = record::decode_message(encoded)?;
            page.push(StoredMessage {
                message: Arc::new(message),
                redelivered: self.crashed && page_key.id.0 < self.first_new_id,
            });
        }
        Ok(page)
    }

    fn count(&self, queue: &QueueKey) -> Result<u64, StoreError> {
        self.check_open()?;
        let state = self.inner.state.read();
        Ok(state.queue_ids.get(queue).and_then(|qid| state.counts.get(qid)).copied().unwrap_or(0))
    }

    fn usage(&self) -> StoreUsage {
        StoreUsage {
            used_bytes: self.inner.state.read().live_bytes,
            limit_bytes: self.inner.options.max_size,
        }
    }

    fn backlog(&self) -> Option<&Backlog> {
        Some(&self.inner.backlog)
    }

    fn close(&self) -> Result<(), StoreError> {
        if self.closed.swap(true, Ordering::AcqRel) {
            return Ok(());
        }
        self.stop_writer();
        if let Some(reason) = self.inner.poisoned() {
            return Err(StoreError::Poisoned { reason });
        }
        // The clean-shutdown marker: the next open delivers nothing as redelivered.
        let failpoints = &self.inner.options.failpoints;
        let mut batch = WriteBatch::new();
        batch.put(keys::CLEAN.to_vec(), Vec::new());
        failpoints.check(FAILPOINT_WRITE)?;
        self.inner.engine.write(batch)?;
        failpoints.check(FAILPOINT_SYNC)?;
        self.inner.engine.sync()?;
        Ok(())
    }
}

impl Drop for LsmStore {
    fn drop(&mut self) {
        // Joined here so that the engine (and its directory lock) is released when the
        // store is dropped: a reopen right after must find it free.
        self.stop_writer();
    }
}
