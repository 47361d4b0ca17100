//! [`Lease`]: the row `ferromq_lock('broker')` that makes one broker of an active/standby pair
//! sharing a PostgreSQL database the active one (issue 12), in the spirit of ActiveMQ's
//! `LeaseDatabaseLocker`.
//!
//! - **Acquire** is one conditional UPDATE: the row becomes ours (holder, and an expiry of
//!   the database's now plus the lease) when it is unheld, already ours, expired, or held by
//!   a dead predecessor of ours (see [`LeaseOptions::predecessor`]). Zero rows changed means
//!   another broker holds a valid lease: [`LeaseError::Held`] names it.
//! - **Renew** is the same UPDATE restricted to `holder = me`; zero rows changed means the
//!   row was taken ([`LeaseError::Lost`]).
//! - **Release** (at a clean shutdown) empties the row, so that a standby takes over at its
//!   next try instead of after the expiry.
//!
//! Every time is the database's clock (`clock_timestamp()`), never a broker's: the brokers'
//! clocks may disagree, the one database clock orders every acquire and renewal. The caller
//! still has to stop using the database before the lease can expire there: it measures that
//! locally, from the monotonic instant it *sent* the last successful renewal (the database's
//! expiry is at least a lease after that instant).
//!
//! A lease has a connection of its own, never the store's writer connection, so that a busy
//! store cannot delay a renewal; the connection's connect, TCP and statement timeouts are
//! [`LeaseOptions::io_timeout`], so that a call cannot hang on a dead network for long (the
//! caller's deadline must not depend on the call returning anyway). A lost connection is
//! reopened at the next call.
//!
//! PostgreSQL only: a SQLite database is a local file under the broker's data directory,
//! whose lock already keeps a second broker out.

use std::time::Duration;

use crate::db::postgres::PostgresDatabase;
use crate::db::{column, Database, Durability, Param, Value};
use crate::error::JdbcError;
use crate::schema::{self, BROKER_LOCK};
use crate::url::Target;

/// The database's clock in milliseconds since the Unix epoch. `clock_timestamp()`, not
/// `now()`: `now()` is the start of the transaction.
pub(crate) const DATABASE_NOW_MS: &str = "(extract(epoch from clock_timestamp()) * 1000)::bigint";

/// What a lease is taken with.
#[derive(Debug, Clone)]
pub struct LeaseOptions {
    /// Who takes it, unique per broker process (the broker uses its name, host, pid and start
    /// time); shown to the brokers that wait.
    pub holder: String,
    /// A holder whose text ends with this (non-empty) suffix is a dead predecessor of this
    /// broker and is replaced at once, without waiting for its lease to expire. The caller
    /// guarantees that such a holder is dead: the broker uses a token of its data directory,
    /// whose lock every holder kept for its whole life and which the caller now holds.
    pub predecessor: Option<String>,
    /// How long an acquire or renewal keeps the lease, on the database's clock.
    pub duration: Duration,
    /// The most a connect or a statement may take (connect timeout, TCP user timeout and
    /// `statement_timeout`).
    pub io_timeout: Duration,
}

/// Why the lease could not be taken or kept.
#[derive(Debug, thiserror::Error)]
#[non_exhaustive]
pub enum LeaseError {
    /// The store url is not a PostgreSQL one.
    #[error("a lease needs a PostgreSQL store url, not {url}: a SQLite database is local to the data directory, whose lock keeps other brokers out")]
    NotPostgres { url: String },
    /// Another broker holds a valid lease.
    #[error("the PostgreSQL database {target} is in use by another broker ({holder}), whose lease expires in {expires_in_ms} ms unless renewed")]
    Held { target: String, holder: String, expires_in_ms: i64 },
    /// The row is no longer ours: another broker took it after our lease expired.
    #[error("the lease on the PostgreSQL database {target} is no longer held by this broker (now held by {})", holder.as_deref().unwrap_or("nobody"))]
    Lost { target: String, holder: Option<String> },
    /// The database failed (unreachable, a timeout, a broken row).
    #[error(transparent)]
    Database(#[from] JdbcError),
}

/// The lease on a PostgreSQL database; see the module documentation.
pub struct Lease {
    config: postgres::Config,
    /// `host:port/database`, for messages.
    display: String,
    options: LeaseOptions,
    /// The connection, `None` until the first call and after a failure (reopened then).
    db: Option<PostgresDatabase>,
}

impl std::fmt::Debug for Lease {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        write!(f, "Lease(postgres://{}, holder {})", self.display, self.options.holder)
    }
}

impl Lease {
    /// A lease on the database of `url`, which must be a PostgreSQL one
    /// ([`LeaseError::NotPostgres`] otherwise); connects at the first call. Not to be dropped
    /// on a tokio runtime's thread (the synchronous client's own runtime panics there): keep
    /// it on a thread of its own.
    pub fn new(url: &str, options: LeaseOptions) -> Result<Lease, LeaseError> {
        match Target::parse(url, std::path::Path::new("/"))? {
            Target::Postgres { config, display } => {
                let mut config = *config;
                let io = options.io_timeout.max(Duration::from_millis(1));
                let connect = config.get_connect_timeout().map_or(io, |url| (*url).min(io));
                config.connect_timeout(connect).tcp_user_timeout(io);
                Ok(Lease { config, display, options, db: None })
            }
            Target::Sqlite(_) => Err(LeaseError::NotPostgres { url: crate::url::redact(url) }),
        }
    }

    /// `postgres://host:port/database` (without credentials), for messages.
    pub fn target(&self) -> String {
        format!("postgres://{}", self.display)
    }

    /// This broker's holder text.
    pub fn holder(&self) -> &str {
        &self.options.holder
    }

    /// Takes the lease if it is free, ours, expired or a dead predecessor's; otherwise
    /// [`LeaseError::Held`] with the holder.
    pub fn try_acquire(&mut self) -> Result<(), LeaseError> {
        let sql = format!(
            "UPDATE ferromq_lock SET holder = ?1, lease_expires_ms = {DATABASE_NOW_MS} + ?2 \
             WHERE name = ?3 AND (holder IS NULL OR holder = ?1 \
             OR lease_expires_ms < {DATABASE_NOW_MS} \
             OR (?4 <> '' AND right(holder, char_length(?4)) = ?4))"
        );
        let predecessor = self.options.predecessor.clone().unwrap_or_default();
        let changed = self.execute(
            &sql,
            &[
                Param::Text(&self.options.holder.clone()),
                Param::Int(self.duration_ms()),
                Param::Text(BROKER_LOCK),
                Param::Text(&predecessor),
            ],
        )?;
        if changed == 1 {
            return Ok(());
        }
        let (holder, expires_in_ms) = self.current()?;
        Err(LeaseError::Held {
            target: self.target(),
            holder: holder.unwrap_or_else(|| "nobody".to_owned()),
            expires_in_ms,
        })
    }

    /// Extends our lease by a lease from the database's now; [`LeaseError::Lost`] when the
    /// row is no longer ours.
    pub fn renew(&mut self) -> Result<(), LeaseError> {
        let sql = format!(
            "UPDATE ferromq_lock SET lease_expires_ms = {DATABASE_NOW_MS} + ?2 \
             WHERE name = ?3 AND holder = ?1"
        );
        let holder = self.options.holder.clone();
        let changed = self.execute(
            &sql,
            &[Param::Text(&holder), Param::Int(self.duration_ms()), Param::Text(BROKER_LOCK)],
        )?;
        if changed == 1 {
            return Ok(());
        }
        let (holder, _) = self.current()?;
        Err(LeaseError::Lost { target: self.target(), holder })
    }

    /// Gives the lease up (if it is still ours), so that a standby takes over at once.
    pub fn release(&mut self) -> Result<(), LeaseError> {
        let holder = self.options.holder.clone();
        self.execute(
            "UPDATE ferromq_lock SET holder = NULL, lease_expires_ms = 0 \
             WHERE name = ?2 AND holder = ?1",
            &[Param::Text(&holder), Param::Text(BROKER_LOCK)],
        )?;
        Ok(())
    }

    /// The current holder (`None` when unheld) and how long its lease runs from the
    /// database's now, in milliseconds (negative once expired).
    pub fn current(&mut self) -> Result<(Option<String>, i64), LeaseError> {
        let sql = format!(
            "SELECT holder, lease_expires_ms - {DATABASE_NOW_MS} FROM ferromq_lock WHERE name = ?1"
        );
        let rows = self.query(&sql, &[Param::Text(BROKER_LOCK)])?;
        let Some(row) = rows.first() else {
            return Err(LeaseError::Database(JdbcError::Corrupt {
                table: "ferromq_lock",
                reason: format!("no row '{BROKER_LOCK}'"),
            }));
        };
        let holder = match column(row, 0, "ferromq_lock")? {
            Value::Null => None,
            value => Some(value.text("ferromq_lock")?.to_owned()),
        };
        let expires_in = column(row, 1, "ferromq_lock")?.int("ferromq_lock")?;
        Ok((holder, expires_in))
    }

    fn duration_ms(&self) -> i64 {
        i64::try_from(self.options.duration.as_millis()).unwrap_or(i64::MAX / 4)
    }

    /// The connection, opened (with the schema created or migrated: the lease is taken
    /// before the store opens, on a database that may be empty) when there is none.
    fn connection(&mut self) -> Result<&mut PostgresDatabase, JdbcError> {
        if self.db.as_ref().is_some_and(|db| db.is_broken()) {
            self.db = None;
        }
        if self.db.is_none() {
            // Durable commits: an acquired lease must survive a restart of the server.
            let mut db =
                PostgresDatabase::connect(self.config.clone(), &self.display, Durability::Full)?;
            // The migration first, without the timeout: DDL on a loaded server may take
            // longer than a renewal may.
            schema::prepare(&mut db, &self.target())?;
            let timeout_ms = self.options.io_timeout.as_millis().max(1);
            db.execute_batch(&format!("SET statement_timeout = {timeout_ms}"))?;
            self.db = Some(db);
        }
        // Just set above when it was empty.
        self.db.as_mut().ok_or_else(|| JdbcError::Corrupt {
            table: "ferromq_lock",
            reason: "no connection".to_owned(),
        })
    }

    fn execute(&mut self, sql: &str, params: &[Param<'_>]) -> Result<u64, JdbcError> {
        let result = self.connection()?.execute(sql, params);
        if result.is_err() {
            // Whatever failed (a timeout leaves the connection in doubt), start afresh.
            self.db = None;
        }
        result
    }

    fn query(&mut self, sql: &str, params: &[Param<'_>]) -> Result<Vec<crate::db::Row>, JdbcError> {
        let result = self.connection()?.query(sql, params);
        if result.is_err() {
            self.db = None;
        }
        result
    }
}
