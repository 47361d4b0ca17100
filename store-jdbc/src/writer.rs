//! The writer thread: group commit of submitted units, one SQL transaction per round.
//!
//! `submit` queues a unit and returns; the writer takes everything queued, opens one
//! transaction, validates and applies each unit in order, and COMMITs once. Under the
//! `always` sync policy that COMMIT is the batch's one sync; every unit of the batch completes
//! after it. Concurrent producers therefore share syncs: the more units wait while one
//! COMMIT runs, the bigger the next batch.
//!
//! Failures keep units whole:
//! - an invalid unit (the contract's transaction rules) or one refused because the store is
//!   full is skipped before any of it is written; the rest of the batch goes on;
//! - a failed statement rolls the transaction back, and the units of the batch are retried
//!   one transaction each, so that one bad unit fails alone;
//! - a failpoint, a lost connection or a failed COMMIT fails the whole batch (after a lost
//!   connection the COMMIT may have happened: the contract allows a failed unit to be found
//!   whole later, never in part).
//!
//! After any failure the writer reloads its bookkeeping from the database. A lost PostgreSQL
//! connection is reopened at the next batch, with a backoff (100 ms doubling to 5 s) during
//! which batches fail at once with the last connection error. Once a reconnect has failed,
//! `submit` itself refuses units with that error (`Shared::unreachable`), so the broker
//! refuses the send before it dispatches the message, and the writer retries the connection
//! on its own at each backoff step: sends fail quickly and clearly while the database is
//! away, and work again once it is back.

use std::collections::VecDeque;
use std::sync::atomic::Ordering;
use std::sync::Arc;
use std::time::{Duration, Instant};

use store::{validate_unit, Completer, Operation, StoreError, SyncPolicy, UnitOfWork};

use crate::apply::Applier;
use crate::db::{self, Database, Durability, Param};
use crate::error::JdbcError;
use crate::state::{self, Bookkeeping};
use crate::store::{Shared, FAILPOINT_BATCH, FAILPOINT_COMMIT};
use crate::url::Target;

/// A unit waiting for the writer.
pub struct Pending {
    pub unit: UnitOfWork,
    pub completer: Completer,
    /// What it counts for in the backlog.
    pub bytes: u64,
}

/// Whether the writer runs or stops once it has drained its queue.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub enum RunState {
    Running,
    /// Stop after the queued units; `clean`: record a clean shutdown (a `close`, not a drop).
    Stopping {
        clean: bool,
    },
}

/// The queue between `submit` and the writer.
pub struct Inbox {
    pub pending: VecDeque<Pending>,
    /// Units submitted so far (the sequence number of the last one).
    pub submitted: u64,
    pub state: RunState,
}

const BACKOFF_START: Duration = Duration::from_millis(100);
const BACKOFF_MAX: Duration = Duration::from_secs(5);
/// How often PostgreSQL's size is asked for (`usage` must stay cheap; SQLite's is a `stat`).
const SIZE_REFRESH: Duration = Duration::from_secs(1);

pub struct Writer {
    pub shared: Arc<Shared>,
    pub target: Target,
    pub durability: Durability,
    pub sync: SyncPolicy,
    pub db: Option<Box<dyn Database>>,
    pub book: Bookkeeping,
    /// The next message id the database holds (so that it is written only when it moves).
    pub stored_next_id: u64,
    pub backoff: Duration,
    pub retry_at: Option<Instant>,
    pub last_connect_error: Option<StoreError>,
    pub last_sync: Instant,
    pub dirty: bool,
    pub last_size: Option<Instant>,
    /// See [`crate::SqlOptions::lease_holder`] (PostgreSQL only).
    pub lease_holder: Option<String>,
}

/// Why a batch failed, and whether its units may be retried one by one.
struct BatchFailure {
    error: StoreError,
    retry_alone: bool,
}

impl Writer {
    pub fn run(mut self) {
        loop {
            let (batch, stop) = self.next_batch();
            if !batch.is_empty() {
                self.process(batch);
            }
            if let Some(clean) = stop {
                let result = self.finish(clean);
                *self.shared.close_result.lock() = Some(result);
                break;
            }
        }
    }

    /// Everything queued (waiting for work, or for the periodic sync), and whether to stop.
    fn next_batch(&mut self) -> (Vec<Pending>, Option<bool>) {
        let mut inbox = self.shared.inbox.lock();
        loop {
            if !inbox.pending.is_empty() {
                let batch: Vec<Pending> = inbox.pending.drain(..).collect();
                return (batch, None);
            }
            if let RunState::Stopping { clean } = inbox.state {
                return (Vec::new(), Some(clean));
            }
            // While the database is unreachable `submit` refuses units at once, so no batch
            // comes to reconnect: try again when the backoff allows.
            if let (None, Some(retry_at)) = (&self.db, self.retry_at) {
                if Instant::now() < retry_at {
                    self.shared.work.wait_until(&mut inbox, retry_at);
                } else {
                    drop(inbox);
                    let _ = self.connection();
                    inbox = self.shared.inbox.lock();
                }
                continue;
            }
            match self.sync {
                SyncPolicy::Periodic(interval) if self.dirty => {
                    let due = self.last_sync + interval;
                    if Instant::now() >= due {
                        drop(inbox);
                        self.periodic_sync();
                        inbox = self.shared.inbox.lock();
                    } else {
                        self.shared.work.wait_until(&mut inbox, due);
                    }
                }
                _ => self.shared.work.wait(&mut inbox),
            }
        }
    }

    fn periodic_sync(&mut self) {
        self.last_sync = Instant::now();
        self.dirty = false;
        if let Some(db) = self.db.as_mut() {
            if let Err(error) = db.sync() {
                tracing::warn!(%error, "periodic sync of the SQL store failed");
            }
        }
    }

    fn process(&mut self, batch: Vec<Pending>) {
        let units: Vec<&UnitOfWork> = batch.iter().map(|p| &p.unit).collect();
        let outcomes = match self.write(&units) {
            Ok(outcomes) => outcomes,
            Err(BatchFailure { error, retry_alone: true }) if units.len() > 1 => {
                tracing::debug!(%error, units = units.len(), "batch failed; retrying its units one by one");
                units
                    .iter()
                    .map(|unit| match self.write(std::slice::from_ref(unit)) {
                        Ok(mut outcome) => outcome.pop().unwrap_or(Ok(())),
                        Err(failure) => Err(failure.error),
                    })
                    .collect()
            }
            Err(failure) => vec![Err(failure.error); units.len()],
        };
        let count = batch.len() as u64;
        for (pending, outcome) in batch.into_iter().zip(outcomes) {
            self.shared.backlog.remove(pending.bytes);
            pending.completer.complete(outcome);
        }
        self.shared.units.fetch_add(count, Ordering::Relaxed);
        self.refresh_size();
        let mut progress = self.shared.progress.lock();
        progress.done += count;
        self.shared.progressed.notify_all();
    }

    /// The connection, reopened if it was lost (not more often than the backoff allows).
    fn connection(&mut self) -> Result<(), StoreError> {
        if self.db.as_ref().is_some_and(|db| db.is_broken()) {
            tracing::warn!(target = ?self.target, "lost the connection to the store's database");
            self.db = None;
        }
        if self.db.is_some() {
            return Ok(());
        }
        if let (Some(retry_at), Some(error)) = (self.retry_at, &self.last_connect_error) {
            if Instant::now() < retry_at {
                return Err(error.clone());
            }
        }
        let reconnected = db::connect(&self.target, self.durability).and_then(|mut db| {
            let book = state::load(db.as_mut())?;
            Ok((db, book))
        });
        match reconnected {
            Ok((db, book)) => {
                tracing::info!(target = ?self.target, "connected to the store's database");
                self.install(book);
                self.db = Some(db);
                self.backoff = BACKOFF_START;
                self.retry_at = None;
                self.last_connect_error = None;
                *self.shared.unreachable.lock() = None;
                Ok(())
            }
            Err(error) => {
                let error = StoreError::from(error);
                tracing::warn!(%error, retry_in = ?self.backoff, "cannot reach the store's database");
                self.retry_at = Some(Instant::now() + self.backoff);
                self.backoff = (self.backoff * 2).min(BACKOFF_MAX);
                self.last_connect_error = Some(error.clone());
                *self.shared.unreachable.lock() = Some(error.clone());
                Err(error)
            }
        }
    }

    /// Takes reloaded bookkeeping, sharing the queue ids with the readers.
    fn install(&mut self, book: Bookkeeping) {
        *self.shared.queues.write() = book.queues.clone();
        *self.shared.counts.write() = book.counts.clone();
        self.stored_next_id = book.next_message_id;
        // Ids only grow: a rolled-back add's id is not handed out again by the broker anyway.
        let next = self.book.next_message_id.max(book.next_message_id);
        self.book = book;
        self.book.next_message_id = next;
    }

    /// After a failure: roll back and reload the bookkeeping; a connection that cannot do
    /// that is dropped (reopened at the next batch).
    fn recover_from_failure(&mut self) {
        let Some(db) = self.db.as_mut() else { return };
        let _ = db.execute_batch("ROLLBACK");
        match state::load(db.as_mut()) {
            Ok(book) => self.install(book),
            Err(error) => {
                tracing::warn!(%error, "cannot reload the SQL store's state; reconnecting");
                self.db = None;
            }
        }
    }

    /// Writes `units` in one transaction: per-unit outcomes, or the failure of all.
    fn write(
        &mut self,
        units: &[&UnitOfWork],
    ) -> Result<Vec<Result<(), StoreError>>, BatchFailure> {
        let fail = |error: StoreError| BatchFailure { error, retry_alone: false };
        self.shared.failpoints.check(FAILPOINT_BATCH).map_err(fail)?;
        self.connection().map_err(fail)?;
        let outcome = self.write_connected(units);
        if outcome.is_err() {
            self.recover_from_failure();
        }
        outcome
    }

    fn write_connected(
        &mut self,
        units: &[&UnitOfWork],
    ) -> Result<Vec<Result<(), StoreError>>, BatchFailure> {
        let shared = Arc::clone(&self.shared);
        let (Some(db), book) = (self.db.as_mut(), &mut self.book) else {
            return Err(BatchFailure { error: StoreError::Closed, retry_alone: false });
        };
        let statement_failed = |error: JdbcError| BatchFailure {
            retry_alone: !error.connection_lost(),
            error: error.into(),
        };
        db.execute_batch("BEGIN").map_err(statement_failed)?;
        if let Some(holder) = &self.lease_holder {
            check_lease(db.as_mut(), holder, &self.target)
                .map_err(|error| BatchFailure { retry_alone: false, error: error.into() })?;
        }
        let full = shared.is_full();
        let mut outcomes = Vec::with_capacity(units.len());
        for unit in units {
            if let Err(error) = validate_unit(&unit.operations, |txn| book.txn_state(txn)) {
                outcomes.push(Err(error));
                continue;
            }
            if full && unit.operations.iter().any(|op| matches!(op, Operation::AddMessage { .. })) {
                outcomes.push(Err(shared.full_error()));
                continue;
            }
            let mut applier = Applier { db: db.as_mut(), book: &mut *book };
            for operation in &unit.operations {
                applier.apply(operation).map_err(statement_failed)?;
            }
            outcomes.push(Ok(()));
        }
        if book.next_message_id != self.stored_next_id {
            let next = crate::apply::signed(book.next_message_id, "next message id")
                .map_err(statement_failed)?;
            db.execute(
                "UPDATE ferromq_state SET value = ?1 WHERE name = 'next_message_id'",
                &[Param::Int(next)],
            )
            .map_err(statement_failed)?;
        }
        shared
            .failpoints
            .check(FAILPOINT_COMMIT)
            .map_err(|error| BatchFailure { error, retry_alone: false })?;
        db.execute_batch("COMMIT")
            .map_err(|error| BatchFailure { error: error.into(), retry_alone: false })?;
        self.stored_next_id = book.next_message_id;
        if std::mem::take(&mut book.queues_changed) {
            *shared.queues.write() = book.queues.clone();
        }
        if !book.counts_changed.is_empty() {
            let mut counts = shared.counts.write();
            for queue in book.counts_changed.drain() {
                match book.counts.get(&queue) {
                    Some(count) => counts.insert(queue, *count),
                    None => counts.remove(&queue),
                };
            }
        }
        shared.commits.fetch_add(1, Ordering::Relaxed);
        shared.next_message_id.fetch_max(book.next_message_id, Ordering::Relaxed);
        self.dirty = true;
        Ok(outcomes)
    }

    fn refresh_size(&mut self) {
        let due = match (&self.target, self.last_size) {
            (Target::Sqlite(_), _) | (_, None) => true,
            (_, Some(last)) => last.elapsed() >= SIZE_REFRESH,
        };
        if !due {
            return;
        }
        if let Some(db) = self.db.as_mut() {
            if let Ok(size) = db.size_bytes() {
                self.shared.used_bytes.store(size, Ordering::Relaxed);
            }
            self.last_size = Some(Instant::now());
        }
    }

    /// At stop: a clean close records it (so the next start does not mark messages
    /// redelivered) after syncing what the periodic policy left unsynced.
    fn finish(&mut self, clean: bool) -> Result<(), StoreError> {
        if !clean {
            return Ok(());
        }
        self.connection()?;
        let Some(db) = self.db.as_mut() else { return Err(StoreError::Closed) };
        db.execute("UPDATE ferromq_state SET value = 1 WHERE name = 'clean_shutdown'", &[])?;
        db.sync()?;
        Ok(())
    }
}

/// Fails unless `holder` holds a valid lease (on the database's clock), and keeps the lock
/// row share-locked until the transaction ends, so that no other broker takes the lease
/// before this batch commits (see [`crate::SqlOptions::lease_holder`]).
fn check_lease(db: &mut dyn Database, holder: &str, target: &Target) -> Result<(), JdbcError> {
    let sql = format!(
        "SELECT holder FROM ferromq_lock WHERE name = ?1 AND holder = ?2 \
         AND lease_expires_ms > {} FOR SHARE",
        crate::lease::DATABASE_NOW_MS
    );
    let rows = db.query(&sql, &[Param::Text(crate::schema::BROKER_LOCK), Param::Text(holder)])?;
    if !rows.is_empty() {
        return Ok(());
    }
    let current = db.query(
        "SELECT holder FROM ferromq_lock WHERE name = ?1",
        &[Param::Text(crate::schema::BROKER_LOCK)],
    )?;
    let holder = match current.first().map(|row| db::column(row, 0, "ferromq_lock")) {
        Some(Ok(db::Value::Text(current))) if current == holder => {
            "this broker, but its lease expired".to_owned()
        }
        Some(Ok(db::Value::Text(current))) => current.clone(),
        _ => "nobody".to_owned(),
    };
    Err(JdbcError::LeaseLost { target: target.describe(), holder })
}
