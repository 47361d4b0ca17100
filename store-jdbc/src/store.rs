//! [`SqlStore`]: the [`MessageStore`] over SQLite or PostgreSQL.

use std::collections::{BTreeSet, HashMap};
use std::path::Path;
use std::sync::atomic::{AtomicBool, AtomicU64, Ordering};
use std::sync::Arc;
use std::thread::JoinHandle;
use std::time::Instant;

use parking_lot::{Condvar, Mutex, RwLock};
use store::record::{decode_destination, decode_message, decode_queue_key, decode_subscription};
use store::{
    Backlog, Completion, Failpoints, MessageStore, Operation, PageKey, QueueKey, Recovered,
    StoreError, StoreUsage, StoredMessage, SyncPolicy, UnitOfWork,
};

use crate::apply::{prepared, rank, roll_back_unprepared, signed};
use crate::db::{self, column, Database, Durability, Param};
use crate::error::JdbcError;
use crate::state::{self, state_value, unsigned};
use crate::url::Target;
use crate::writer::{Inbox, Pending, RunState, Writer};

/// Checked when the store opens, before it connects.
pub const FAILPOINT_OPEN: &str = "jdbc.open";
/// Checked before each batch (before BEGIN): fails every unit of the batch.
pub const FAILPOINT_BATCH: &str = "jdbc.batch";
/// Checked after a batch's statements, before its COMMIT: the batch is rolled back.
pub const FAILPOINT_COMMIT: &str = "jdbc.commit";
/// Checked before each read (`read_page`, `count`, `recover`).
pub const FAILPOINT_READ: &str = "jdbc.read";
/// Every failpoint the SQL store checks.
pub const FAILPOINTS: &[&str] =
    &[FAILPOINT_OPEN, FAILPOINT_BATCH, FAILPOINT_COMMIT, FAILPOINT_READ];

/// One page of a queue: bounded, because the primary key (queue, priority_rank, msg_id) is
/// the read order, so this is one index range of at most `limit` rows however deep the
/// queue (a test pins SQLite's plan).
pub(crate) const READ_PAGE: &str = "SELECT m.id, m.body FROM ferromq_refs r \
     JOIN ferromq_msgs m ON m.id = r.msg_id \
     WHERE r.queue = ?1 AND (r.priority_rank, r.msg_id) > (?2, ?3) AND r.txn IS NULL \
     ORDER BY r.priority_rank, r.msg_id LIMIT ?4";

/// Default [`SqlOptions::max_backlog`]: as the journal's, a few batches of unwritten units.
pub const DEFAULT_MAX_BACKLOG: u64 = 32 << 20;

/// How the SQL store behaves.
#[derive(Debug, Clone)]
pub struct SqlOptions {
    /// When a unit counts as durable: `Always` commits with a sync (SQLite
    /// `synchronous=FULL`, PostgreSQL `synchronous_commit=on`); `Periodic` commits without
    /// one (SQLite `NORMAL`, synced by a WAL checkpoint every interval; PostgreSQL
    /// `synchronous_commit=off`); `Never` leaves it to the OS (SQLite `OFF`).
    pub sync: SyncPolicy,
    /// The most bytes the database may take (0: no limit): past it new messages are refused
    /// with [`StoreError::Full`] while acks still work.
    pub max_size: u64,
    /// The most bytes of submitted units waiting for the writer; see [`store::Backlog`].
    pub max_backlog: u64,
    /// The failpoint registry the store consults (tests arm it).
    pub failpoints: Failpoints,
    /// On PostgreSQL, the holder of the broker's lease (see [`crate::Lease`]): every batch
    /// then writes only while that lease is valid on the database's clock, checked inside
    /// the batch's own transaction with the lock row held `FOR SHARE` until it commits (a
    /// takeover's UPDATE of the row waits for the commit). A write the broker sent before it
    /// fenced itself but that reaches the database after its lease expired is refused, so
    /// the two brokers of a pair never both write. `None`: no check (one broker, or SQLite).
    pub lease_holder: Option<String>,
}

impl Default for SqlOptions {
    fn default() -> Self {
        SqlOptions {
            sync: SyncPolicy::Always,
            max_size: 0,
            max_backlog: DEFAULT_MAX_BACKLOG,
            failpoints: Failpoints::new(),
            lease_holder: None,
        }
    }
}

/// Counters for tests and benchmarks.
#[derive(Debug, Clone, Copy, PartialEq, Eq, Default)]
pub struct SqlStats {
    /// Units the writer has finished (successfully or not).
    pub units: u64,
    /// Successful COMMITs: under the `always` policy, one sync each.
    pub commits: u64,
}

/// Units processed by the writer, for the read barrier.
pub struct Progress {
    pub done: u64,
}

/// What the store's handle, its writer and its readers share.
pub struct Shared {
    pub inbox: Mutex<Inbox>,
    pub work: Condvar,
    pub progress: Mutex<Progress>,
    pub progressed: Condvar,
    /// Queue ids by key: the writer's copy, shared so that reads need no lookup query.
    pub queues: RwLock<HashMap<QueueKey, i64>>,
    /// Committed references per queue id, published by the writer after each COMMIT (before
    /// the units complete), so that `count` is a lookup, not a `COUNT(*)` of a deep queue.
    pub counts: RwLock<HashMap<i64, u64>>,
    pub failpoints: Failpoints,
    pub backlog: Backlog,
    pub used_bytes: AtomicU64,
    pub limit_bytes: u64,
    pub units: AtomicU64,
    pub commits: AtomicU64,
    pub next_message_id: AtomicU64,
    /// Messages below this id were stored before an unclean stop: read back as redelivered.
    pub redeliver_below: u64,
    /// What the writer's final step (recording a clean close) returned.
    pub close_result: Mutex<Option<Result<(), StoreError>>>,
    /// Set by the writer while it cannot reach the database (the last connection error),
    /// cleared when it reconnects. `submit` fails at once meanwhile, so that the broker
    /// refuses the send before dispatching the message, instead of delivering a message
    /// whose producer is told it was not stored.
    pub unreachable: Mutex<Option<StoreError>>,
}

impl Shared {
    pub fn is_full(&self) -> bool {
        self.limit_bytes > 0 && self.used_bytes.load(Ordering::Relaxed) >= self.limit_bytes
    }

    pub fn full_error(&self) -> StoreError {
        StoreError::Full {
            reason: format!(
                "the database takes {} bytes, max_size is {}",
                self.used_bytes.load(Ordering::Relaxed),
                self.limit_bytes
            ),
        }
    }
}

/// The SQL store: one writer thread (group commit) and one reader connection.
///
/// Reads see every unit whose `submit` has returned, as the contract requires, by waiting
/// for the writer to have finished those units (a read barrier) before querying: the
/// database then holds them, committed (or they failed and apply nothing). The wait is one
/// batch at most; the broker reads only when it pages a queue in.
pub struct SqlStore {
    shared: Arc<Shared>,
    target: Target,
    durability: Durability,
    reader: Mutex<Option<Box<dyn Database>>>,
    writer: Mutex<Option<JoinHandle<()>>>,
    closed: AtomicBool,
}

fn durability(sync: SyncPolicy) -> Durability {
    match sync {
        SyncPolicy::Always => Durability::Full,
        SyncPolicy::Periodic(_) => Durability::Deferred,
        SyncPolicy::Never => Durability::Off,
    }
}

impl SqlStore {
    /// Opens the store at `url` (see [`crate::url`]), a relative SQLite path under `base`:
    /// connects, creates or migrates the schema, rolls back transactions that were not
    /// prepared, and starts the writer.
    pub fn open(url: &str, base: &Path, options: SqlOptions) -> Result<SqlStore, StoreError> {
        let target = Target::parse(url, base)?;
        SqlStore::open_target(target, options)
    }

    /// Opens the store at `target`; see [`SqlStore::open`]. Callable from any thread, a
    /// tokio runtime's included (as every method of the store).
    pub fn open_target(target: Target, options: SqlOptions) -> Result<SqlStore, StoreError> {
        off_runtime(&target.clone(), move || SqlStore::open_here(target, options))
    }

    fn open_here(target: Target, options: SqlOptions) -> Result<SqlStore, StoreError> {
        options.failpoints.check(FAILPOINT_OPEN)?;
        let durability = durability(options.sync);
        let mut db = db::connect(&target, durability)?;
        crate::schema::prepare(db.as_mut(), &target.describe())?;
        let (book, clean) = start(db.as_mut())?;
        let reader = db::connect(&target, durability)?;
        let used_bytes = db.size_bytes().unwrap_or(0);
        let shared = Arc::new(Shared {
            inbox: Mutex::new(Inbox {
                pending: Default::default(),
                submitted: 0,
                state: RunState::Running,
            }),
            work: Condvar::new(),
            progress: Mutex::new(Progress { done: 0 }),
            progressed: Condvar::new(),
            queues: RwLock::new(book.queues.clone()),
            counts: RwLock::new(book.counts.clone()),
            failpoints: options.failpoints.clone(),
            backlog: Backlog::new(options.max_backlog),
            used_bytes: AtomicU64::new(used_bytes),
            limit_bytes: options.max_size,
            units: AtomicU64::new(0),
            commits: AtomicU64::new(0),
            next_message_id: AtomicU64::new(book.next_message_id),
            redeliver_below: if clean { 0 } else { book.next_message_id },
            close_result: Mutex::new(None),
            unreachable: Mutex::new(None),
        });
        let writer = Writer {
            shared: Arc::clone(&shared),
            target: target.clone(),
            durability,
            sync: options.sync,
            stored_next_id: book.next_message_id,
            book,
            db: Some(db),
            backoff: std::time::Duration::from_millis(100),
            retry_at: None,
            last_connect_error: None,
            last_sync: Instant::now(),
            dirty: false,
            last_size: Some(Instant::now()),
            lease_holder: match target {
                Target::Postgres { .. } => options.lease_holder.clone(),
                _ => None,
            },
        };
        let handle = std::thread::Builder::new()
            .name("sql-store-writer".into())
            .spawn(move || writer.run())
            .map_err(|e| StoreError::io("starting the SQL store's writer thread", e))?;
        tracing::info!(target = ?target, clean, "SQL store opened");
        Ok(SqlStore {
            shared,
            target,
            durability,
            reader: Mutex::new(Some(reader)),
            writer: Mutex::new(Some(handle)),
            closed: AtomicBool::new(false),
        })
    }

    /// The database this store uses (without a password).
    pub fn target(&self) -> String {
        self.target.describe()
    }

    pub fn stats(&self) -> SqlStats {
        SqlStats {
            units: self.shared.units.load(Ordering::Relaxed),
            commits: self.shared.commits.load(Ordering::Relaxed),
        }
    }

    /// Waits until the writer has finished every unit submitted before this call.
    fn barrier(&self) {
        let target = self.shared.inbox.lock().submitted;
        let mut progress = self.shared.progress.lock();
        while progress.done < target {
            self.shared.progressed.wait(&mut progress);
        }
    }

    /// Runs `read` on the reader connection, after the barrier. A connection found lost is
    /// reopened and the read tried once more (a restarted PostgreSQL shows only when used).
    fn read<T: Send>(
        &self,
        read: impl Fn(&mut dyn Database) -> Result<T, JdbcError> + Sync,
    ) -> Result<T, StoreError> {
        if self.closed.load(Ordering::Acquire) {
            return Err(StoreError::Closed);
        }
        self.shared.failpoints.check(FAILPOINT_READ)?;
        self.barrier();
        self.off_runtime(|| {
            let mut reader = self.reader.lock();
            for attempt in 0..2 {
                if reader.as_ref().is_some_and(|db| db.is_broken()) {
                    *reader = None;
                }
                let db = match reader.as_mut() {
                    Some(db) => db,
                    None => reader.insert(db::connect(&self.target, self.durability)?),
                };
                match read(db.as_mut()) {
                    Err(error) if error.connection_lost() && attempt == 0 => *reader = None,
                    outcome => return Ok(outcome?),
                }
            }
            Err(StoreError::Closed)
        })
    }

    fn off_runtime<T: Send>(&self, work: impl FnOnce() -> T + Send) -> T {
        off_runtime(&self.target, work)
    }

    fn stop(&self, clean: bool) -> Result<(), StoreError> {
        {
            let mut inbox = self.shared.inbox.lock();
            if inbox.state == RunState::Running {
                inbox.state = RunState::Stopping { clean };
            }
            self.shared.work.notify_all();
        }
        let handle = self.writer.lock().take();
        let Some(handle) = handle else { return Ok(()) };
        if handle.join().is_err() {
            return Err(StoreError::Poisoned {
                reason: "the SQL store's writer thread panicked".into(),
            });
        }
        let reader = self.reader.lock().take();
        self.off_runtime(move || drop(reader));
        self.shared.close_result.lock().take().unwrap_or(Ok(()))
    }
}

/// Runs `work`, which may connect to the database, use a connection or drop one, where the
/// synchronous PostgreSQL client can block. That client drives each connection with a tokio
/// runtime of its own, which panics when entered or dropped on a thread already running
/// one, as the broker's threads are (the broker recovered the store there and aborted at its
/// first start on PostgreSQL). On such a thread, a PostgreSQL store's `work` runs on a
/// scoped thread of its own; SQLite needs no runtime, nor does a plain thread.
fn off_runtime<T: Send>(target: &Target, work: impl FnOnce() -> T + Send) -> T {
    let in_runtime = tokio::runtime::Handle::try_current().is_ok();
    if !in_runtime || !matches!(target, Target::Postgres { .. }) {
        return work();
    }
    std::thread::scope(|scope| match scope.spawn(work).join() {
        Ok(outcome) => outcome,
        Err(panic) => std::panic::resume_unwind(panic),
    })
}

/// At open, in one transaction: roll back what was not prepared, read whether the last stop
/// was clean and mark this run as not (yet) cleanly stopped.
fn start(db: &mut dyn Database) -> Result<(state::Bookkeeping, bool), JdbcError> {
    db.execute_batch("BEGIN")?;
    let result = (|| {
        let mut book = state::load(db)?;
        roll_back_unprepared(db, &mut book)?;
        let clean = state_value(db, "clean_shutdown")? != 0;
        db.execute("UPDATE ferromq_state SET value = 0 WHERE name = 'clean_shutdown'", &[])?;
        Ok((book, clean))
    })();
    match result {
        Ok(outcome) => {
            db.execute_batch("COMMIT")?;
            Ok(outcome)
        }
        Err(error) => {
            let _ = db.execute_batch("ROLLBACK");
            Err(error)
        }
    }
}

/// What a unit counts for in the backlog: its bodies and a little per operation.
fn unit_bytes(unit: &UnitOfWork) -> u64 {
    unit.operations
        .iter()
        .map(|op| match op {
            Operation::AddMessage { message, queues, .. } => {
                message.memory_size() as u64 + 32 * queues.len() as u64
            }
            _ => 64,
        })
        .sum()
}

impl MessageStore for SqlStore {
    fn name(&self) -> &'static str {
        match self.target {
            Target::Sqlite(_) => "sqlite",
            Target::Postgres { .. } => "postgres",
        }
    }

    fn recover(&self) -> Result<Recovered, StoreError> {
        let queues = self.shared.queues.read().clone();
        let by_id: HashMap<i64, QueueKey> = queues.into_iter().map(|(k, id)| (id, k)).collect();
        let next_message_id = self.shared.next_message_id.load(Ordering::Relaxed);
        self.read(|db| {
            let mut destinations = BTreeSet::new();
            for row in db.query("SELECT destination FROM ferromq_destinations", &[])? {
                let bytes =
                    column(&row, 0, "ferromq_destinations")?.blob("ferromq_destinations")?;
                destinations.insert(decode_destination(bytes).map_err(|e| JdbcError::Corrupt {
                    table: "ferromq_destinations",
                    reason: e.to_string(),
                })?);
            }
            for row in db.query("SELECT DISTINCT queue FROM ferromq_refs WHERE txn IS NULL", &[])? {
                let id = column(&row, 0, "ferromq_refs")?.int("ferromq_refs")?;
                match by_id.get(&id) {
                    Some(queue) => {
                        destinations.insert(queue.destination.clone());
                    }
                    None => {
                        // A reference to a queue the writer never loaded: read it directly.
                        let rows = db.query(
                            "SELECT queue_key FROM ferromq_queues WHERE id = ?1",
                            &[Param::Int(id)],
                        )?;
                        let Some(row) = rows.first() else {
                            return Err(JdbcError::Corrupt {
                                table: "ferromq_refs",
                                reason: format!("references to queue {id}, which does not exist"),
                            });
                        };
                        let key = decode_queue_key(
                            column(row, 0, "ferromq_queues")?.blob("ferromq_queues")?,
                        )
                        .map_err(|e| JdbcError::Corrupt {
                            table: "ferromq_queues",
                            reason: e.to_string(),
                        })?;
                        destinations.insert(key.destination);
                    }
                }
            }
            let mut subscriptions = Vec::new();
            for row in
                db.query("SELECT info FROM ferromq_subscriptions ORDER BY client_id, name", &[])?
            {
                let bytes =
                    column(&row, 0, "ferromq_subscriptions")?.blob("ferromq_subscriptions")?;
                subscriptions.push(decode_subscription(bytes).map_err(|e| JdbcError::Corrupt {
                    table: "ferromq_subscriptions",
                    reason: e.to_string(),
                })?);
            }
            Ok(Recovered {
                destinations: destinations.into_iter().collect(),
                subscriptions,
                prepared: prepared(db)?,
                next_message_id: store::MessageId(next_message_id.max(1)),
            })
        })
    }

    fn submit(&self, unit: UnitOfWork) -> Completion {
        if let Some(error) = self.shared.unreachable.lock().clone() {
            return Completion::ready(Err(error));
        }
        let bytes = unit_bytes(&unit);
        let (completer, completion) = Completion::pending();
        {
            let mut inbox = self.shared.inbox.lock();
            if inbox.state != RunState::Running {
                return Completion::ready(Err(StoreError::Closed));
            }
            inbox.submitted += 1;
            inbox.pending.push_back(Pending { unit, completer, bytes });
            self.shared.backlog.add(bytes);
        }
        self.shared.work.notify_one();
        completion
    }

    fn read_page(
        &self,
        queue: &QueueKey,
        after: Option<PageKey>,
        limit: usize,
    ) -> Result<Vec<StoredMessage>, StoreError> {
        let (after_rank, after_id) = match after {
            Some(key) => (rank(key.priority), signed(key.id.0, "message id")?),
            None => (-1, -1),
        };
        let limit = i64::try_from(limit).unwrap_or(i64::MAX);
        let redeliver_below = self.shared.redeliver_below;
        self.read(|db| {
            let Some(queue) = self.shared.queues.read().get(queue).copied() else {
                return Ok(Vec::new());
            };
            let rows = db.query(
                READ_PAGE,
                &[
                    Param::Int(queue),
                    Param::Int(after_rank),
                    Param::Int(after_id),
                    Param::Int(limit),
                ],
            )?;
            let mut page = Vec::with_capacity(rows.len());
            for row in rows {
                let id = unsigned(
                    column(&row, 0, "ferromq_msgs")?.int("ferromq_msgs")?,
                    "ferromq_msgs",
                )?;
                let body = column(&row, 1, "ferromq_msgs")?.blob("ferromq_msgs")?;
                let message = decode_message(body).map_err(|e| JdbcError::Corrupt {
                    table: "ferromq_msgs",
                    reason: format!("message {id}: {e}"),
                })?;
                page.push(StoredMessage {
                    message: Arc::new(message),
                    redelivered: id < redeliver_below,
                });
            }
            Ok(page)
        })
    }

    fn count(&self, queue: &QueueKey) -> Result<u64, StoreError> {
        if self.closed.load(Ordering::Acquire) {
            return Err(StoreError::Closed);
        }
        self.shared.failpoints.check(FAILPOINT_READ)?;
        // The barrier, as for every read: the units submitted before are counted.
        self.barrier();
        let Some(queue) = self.shared.queues.read().get(queue).copied() else { return Ok(0) };
        Ok(self.shared.counts.read().get(&queue).copied().unwrap_or(0))
    }

    fn usage(&self) -> StoreUsage {
        StoreUsage {
            used_bytes: self.shared.used_bytes.load(Ordering::Relaxed),
            limit_bytes: self.shared.limit_bytes,
        }
    }

    fn backlog(&self) -> Option<&Backlog> {
        Some(&self.shared.backlog)
    }

    fn close(&self) -> Result<(), StoreError> {
        self.closed.store(true, Ordering::Release);
        self.stop(true)
    }
}

impl Drop for SqlStore {
    fn drop(&mut self) {
        // Without a close: finish the queued units (their submitters may wait for them) but
        // record no clean shutdown, as a process that died would not.
        let _ = self.stop(false);
    }
}
