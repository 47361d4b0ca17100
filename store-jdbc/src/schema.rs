//! The schema: created at start, migrated by version, refused when newer than this build.
//!
//! `ferromq_schema` holds one row, the version of the schema the database has. At start the
//! store runs, in one transaction, every migration after that version (all of them on an
//! empty database) and records the new version; a database whose version is newer than
//! [`SCHEMA_VERSION`] was written by a newer ferromq and is refused
//! ([`JdbcError::SchemaTooNew`]) rather than misread. Migrations are append-only: a released
//! migration is never edited, a change is a new one.

use crate::db::{column, Database, Param};
use crate::error::JdbcError;

/// The schema version this build writes and understands.
pub const SCHEMA_VERSION: i64 = 1;

/// The lock row in `ferromq_lock` that an active broker holds (see [`MIGRATIONS`]).
pub const BROKER_LOCK: &str = "broker";

/// Migration `n` (1-based) takes the schema from version `n - 1` to `n`. Portable DDL:
/// `{blob}` and `{without_rowid}` are spelled per database by [`Database::ddl`].
///
/// Version 1, in the spirit of ActiveMQ's JDBC adapter (ACTIVEMQ_MSGS, ACTIVEMQ_ACKS,
/// ACTIVEMQ_LOCK), with bodies stored once and referenced per queue:
///
/// - `ferromq_msgs(id, body)`: each message once, by broker id; `body` is the message's
///   `store::record` encoding (headers, properties and body), as ActiveMQ stores the
///   marshalled message.
/// - `ferromq_queues(id, queue_key)`: a small integer per stored queue (a destination, or a
///   durable subscription's queue), so that references carry 8 bytes instead of a name
///   (ActiveMQ's CONTAINER column, normalized).
/// - `ferromq_refs(queue, priority_rank, msg_id, txn)`: one row per reference, primary key
///   `(queue, priority_rank, msg_id)`, which is the read order: `priority_rank` is
///   `255 - priority`, so ascending rank is descending priority and one row-value comparison
///   `(priority_rank, msg_id) > (?, ?)` resumes a page on the index (a mixed ASC/DESC order
///   could not). `txn` is set while the reference belongs to an uncommitted transaction;
///   reads skip those rows and COMMIT clears the column. Indexed by `msg_id` (to drop a body
///   with its last reference) and by `txn` (partial: only transactional rows).
/// - `ferromq_destinations`, `ferromq_subscriptions`: what recovery reports.
/// - `ferromq_txns(txn, prepared)`, `ferromq_txn_acks`: open transactions and the acks they
///   apply at COMMIT (ActiveMQ's XA tables, ACTIVEMQ_ACKS' role for transactions).
/// - `ferromq_state(name, value)`: `next_message_id` (greater than every id ever stored) and
///   `clean_shutdown` (1 after a close; 0 while a broker runs, so that after a crash the
///   recovered messages are delivered marked redelivered).
/// - `ferromq_lock(name, holder, lease_expires_ms)`: one row, `broker`, for active/standby
///   brokers sharing one database (issue 12). A broker becomes active by taking the lease:
///   `UPDATE ferromq_lock SET holder = me, lease_expires_ms = now + lease WHERE name =
///   'broker' AND (holder IS NULL OR holder = me OR lease_expires_ms < now)` changing one
///   row, and keeps it by renewing before it expires; a standby retries the same statement.
///   Like ActiveMQ's lease locker (not its row lock held in an open transaction), a lease
///   survives a restarted database and expires on its own when the active broker dies.
///   Version 1 creates the row unheld; [`crate::Lease`] takes it.
pub const MIGRATIONS: &[&[&str]] = &[&[
    "CREATE TABLE ferromq_msgs (id BIGINT PRIMARY KEY, body {blob} NOT NULL)",
    "CREATE TABLE ferromq_queues (id BIGINT PRIMARY KEY, queue_key {blob} NOT NULL)",
    "CREATE TABLE ferromq_refs (queue BIGINT NOT NULL, priority_rank BIGINT NOT NULL, \
     msg_id BIGINT NOT NULL, txn BIGINT, PRIMARY KEY (queue, priority_rank, msg_id)) {without_rowid}",
    "CREATE INDEX ferromq_refs_by_msg ON ferromq_refs (msg_id)",
    "CREATE INDEX ferromq_refs_by_txn ON ferromq_refs (txn) WHERE txn IS NOT NULL",
    "CREATE TABLE ferromq_destinations (destination {blob} PRIMARY KEY)",
    "CREATE TABLE ferromq_subscriptions (client_id TEXT NOT NULL, name TEXT NOT NULL, \
     info {blob} NOT NULL, PRIMARY KEY (client_id, name))",
    "CREATE TABLE ferromq_txns (txn BIGINT PRIMARY KEY, prepared BIGINT NOT NULL)",
    "CREATE TABLE ferromq_txn_acks (txn BIGINT NOT NULL, queue BIGINT NOT NULL, \
     priority_rank BIGINT NOT NULL, msg_id BIGINT NOT NULL)",
    "CREATE INDEX ferromq_txn_acks_by_txn ON ferromq_txn_acks (txn)",
    "CREATE TABLE ferromq_state (name TEXT PRIMARY KEY, value BIGINT NOT NULL)",
    "INSERT INTO ferromq_state (name, value) VALUES ('next_message_id', 1), ('clean_shutdown', 1)",
    "CREATE TABLE ferromq_lock (name TEXT PRIMARY KEY, holder TEXT, lease_expires_ms BIGINT NOT NULL)",
    "INSERT INTO ferromq_lock (name, holder, lease_expires_ms) VALUES ('broker', NULL, 0)",
]];

/// Creates or migrates the schema of `db` to [`SCHEMA_VERSION`]; refuses a newer one.
pub fn prepare(db: &mut dyn Database, target: &str) -> Result<(), JdbcError> {
    db.execute_batch("BEGIN")?;
    let result = migrate(db, target);
    match result {
        Ok(()) => db.execute_batch("COMMIT"),
        Err(error) => {
            // The error says what went wrong; a failed rollback adds nothing to it.
            let _ = db.execute_batch("ROLLBACK");
            Err(error)
        }
    }
}

fn migrate(db: &mut dyn Database, target: &str) -> Result<(), JdbcError> {
    db.execute_batch("CREATE TABLE IF NOT EXISTS ferromq_schema (version BIGINT NOT NULL)")?;
    let rows = db.query("SELECT version FROM ferromq_schema", &[])?;
    let found = match rows.as_slice() {
        [] => 0,
        [row] => column(row, 0, "ferromq_schema")?.int("ferromq_schema")?,
        _ => {
            return Err(JdbcError::Corrupt {
                table: "ferromq_schema",
                reason: format!("{} rows where there must be one", rows.len()),
            })
        }
    };
    if found > SCHEMA_VERSION {
        return Err(JdbcError::SchemaTooNew {
            target: target.to_string(),
            found,
            supported: SCHEMA_VERSION,
        });
    }
    if found == SCHEMA_VERSION {
        return Ok(());
    }
    let from = usize::try_from(found.max(0)).unwrap_or(0);
    for (index, migration) in MIGRATIONS.iter().enumerate().skip(from) {
        for statement in *migration {
            let sql = db.ddl(statement);
            db.execute_batch(&sql)?;
        }
        tracing::info!(target, version = index + 1, "migrated the store's schema");
    }
    db.execute_batch("DELETE FROM ferromq_schema")?;
    db.execute("INSERT INTO ferromq_schema (version) VALUES (?1)", &[Param::Int(SCHEMA_VERSION)])?;
    Ok(())
}
