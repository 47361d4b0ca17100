//! # store-jdbc: ferromq's SQL store
//!
//! One [`SqlStore`] implements the [`store::MessageStore`] contract over two databases, chosen
//! by the `[store] url`:
//!
//! - `sqlite://PATH`: SQLite, embedded (`rusqlite`, compiled in), in WAL mode, with
//!   `synchronous=FULL` under the `always` sync policy (`NORMAL` under `periodic`, `OFF`
//!   under `never`);
//! - `postgres://user:password@host:port/database`: a PostgreSQL server (the synchronous
//!   `postgres` client), `synchronous_commit` on under `always`, off otherwise.
//!
//! It plays the part of ActiveMQ's JDBC persistence adapter in the store comparisons.
//!
//! ## The schema
//!
//! In the spirit of ActiveMQ's ACTIVEMQ_MSGS, ACTIVEMQ_ACKS and ACTIVEMQ_LOCK, with each body
//! stored once and referenced per queue; [`schema::MIGRATIONS`] documents every table.
//! `ferromq_msgs(id, body)` holds the messages, `ferromq_refs(queue, priority_rank, msg_id,
//! txn)` one row per reference with the read order as its primary key, `ferromq_queues`,
//! `ferromq_destinations`, `ferromq_subscriptions`, `ferromq_txns` and `ferromq_txn_acks` the
//! rest of the contract, `ferromq_state` the next message id and the clean-shutdown flag,
//! `ferromq_lock` the lease that active/standby brokers share ([`Lease`]), and `ferromq_schema` the
//! schema version. The schema is created at start and migrated by version; a database with
//! a newer version than this build refuses to start ([`JdbcError::SchemaTooNew`]).
//!
//! ## Paging
//!
//! `read_page` is one bounded query, `WHERE queue = ? AND (priority_rank, msg_id) > (?, ?)
//! ORDER BY priority_rank, msg_id LIMIT ?`, an index range over the primary key; never the
//! unbounded `SELECT ... ORDER BY id` that stalled ActiveMQ's JDBC store on deep queues.
//!
//! ## Batching
//!
//! `submit` queues the unit and returns a pending [`store::Completion`]. One writer thread
//! ([`writer`]) takes every queued unit, applies them in one SQL transaction and COMMITs
//! once: one sync for the whole batch under `always`; the completions resolve after the
//! COMMIT. Units are validated with [`store::validate_unit`] before any of their statements
//! run; a failed statement rolls back and the batch's units are retried one by one so that
//! one bad unit fails alone. Bytes queued and unwritten are counted in a [`store::Backlog`],
//! which paces the broker's send path. Reads use a second connection and first wait for
//! the writer to finish every unit submitted before them, which is how they see units whose
//! completion has not resolved yet. `count` reads no table: the writer keeps each queue's
//! committed references in memory (loaded at open and after a failed batch, published after
//! each COMMIT).
//!
//! ## Failures
//!
//! A lost PostgreSQL connection fails the batch in flight with an error naming the server;
//! the writer reconnects with a backoff, and once a reconnect has failed `submit` refuses
//! units at once with the connection error (so the broker refuses the send before it
//! dispatches the message) until the server is back. Every method may be called from a
//! tokio runtime's thread: the synchronous `postgres` client, whose own runtime cannot run
//! there, is then used from a scoped thread. Nothing confirmed is lost: a unit completes only after its
//! COMMIT. After a crash (no clean close recorded) every recovered message reads back as
//! redelivered. Failpoints ([`FAILPOINTS`]) sit before the open, before each batch, before
//! each COMMIT and before each read.
//!
//! ## Active/standby: the lease
//!
//! [`Lease`] takes, renews and releases the row `ferromq_lock('broker')` on its own
//! PostgreSQL connection, every time on the database's clock, so that of the brokers sharing
//! one database exactly one is active (see the `lease` module). SQLite has none: its file is
//! local to one broker's data directory, whose lock keeps a second broker out.
//!
//! ## Crashes and power cuts
//!
//! A child process writing with several threads is SIGKILLed six times on one database
//! (SQLite and PostgreSQL; the shared harness `store::kit::crash`), and on SQLite the same rounds run as power cuts under
//! [`store::powercut`] (the database directory replaced by its durable image: data
//! durable once its file is fsynced, names once their directory is). The power-cut test
//! fails if `synchronous=FULL` is weakened to `NORMAL`. PostgreSQL has no power-cut test
//! here: it is a server whose durability (its WAL, `fsync`, `synchronous_commit = on` under
//! `always`) is its own, out of reach of a cut of the broker's process.
//!
//! ```no_run
//! use std::path::Path;
//! use store::MessageStore;
//! use store_jdbc::{SqlOptions, SqlStore};
//!
//! let store = SqlStore::open("sqlite://store.db", Path::new("/var/lib/ferromq"), SqlOptions::default())
//!     .expect("open the SQL store");
//! let recovered = store.recover().expect("recover");
//! println!("next message id {:?}", recovered.next_message_id);
//! ```
#![cfg_attr(not(test), deny(clippy::unwrap_used))]

mod apply;
pub mod db;
mod error;
pub mod lease;
pub mod schema;
mod state;
mod store;
pub mod testing;
pub mod url;
mod writer;

pub use crate::error::JdbcError;
pub use crate::lease::{Lease, LeaseError, LeaseOptions};
pub use crate::store::{
    SqlOptions, SqlStats, SqlStore, DEFAULT_MAX_BACKLOG, FAILPOINTS, FAILPOINT_BATCH,
    FAILPOINT_COMMIT, FAILPOINT_OPEN, FAILPOINT_READ,
};
pub use crate::url::Target;

#[cfg(test)]
mod tests;
