//! What the writer keeps in memory beside the database, and how it reloads it: the queue
//! ids and the committed reference count of each queue (both shared with the readers), the
//! open transactions (to validate units before applying them) and the next message id.
//!
//! The database is the truth: after any failed batch, and after every reconnect, the writer
//! reloads this state from it ([`load`]), because a rolled-back batch may have changed the
//! copies in memory and a COMMIT that failed with a lost connection may or may not have
//! happened.

use std::collections::{HashMap, HashSet};

use store::record::decode_queue_key;
use store::{QueueKey, TxnId, TxnState};

use crate::db::{column, Database};
use crate::error::JdbcError;

/// The writer's copy of the database's bookkeeping.
#[derive(Debug, Default, Clone)]
pub struct Bookkeeping {
    pub queues: HashMap<QueueKey, i64>,
    pub next_queue_id: i64,
    pub txns: HashMap<TxnId, TxnState>,
    pub next_message_id: u64,
    /// Set when `queues` changed since the readers' copy was last published.
    pub queues_changed: bool,
    /// Committed references per queue id (a queue without any has no entry), so that
    /// `count` needs no `COUNT(*)` over a deep queue.
    pub counts: HashMap<i64, u64>,
    /// Queues whose count changed since the readers' copy was last published.
    pub counts_changed: HashSet<i64>,
}

impl Bookkeeping {
    /// Adds `delta` committed references to `queue`'s count.
    pub fn count_references(&mut self, queue: i64, delta: i64) {
        if delta == 0 {
            return;
        }
        let count = self.counts.entry(queue).or_insert(0);
        *count = count.saturating_add_signed(delta);
        self.counts_changed.insert(queue);
    }

    /// Forgets a removed queue's count.
    pub fn forget_count(&mut self, queue: i64) {
        self.counts.remove(&queue);
        self.counts_changed.insert(queue);
    }

    pub fn txn_state(&self, txn: TxnId) -> TxnState {
        self.txns.get(&txn).copied().unwrap_or(TxnState::Unknown)
    }
}

/// A stored integer as a `u64` (ids and counters are never negative).
pub fn unsigned(value: i64, table: &'static str) -> Result<u64, JdbcError> {
    u64::try_from(value)
        .map_err(|_| JdbcError::Corrupt { table, reason: format!("negative value {value}") })
}

/// Reads an integer from `ferromq_state`.
pub fn state_value(db: &mut dyn Database, name: &str) -> Result<i64, JdbcError> {
    let rows = db.query(
        "SELECT value FROM ferromq_state WHERE name = ?1",
        &[crate::db::Param::Text(name)],
    )?;
    match rows.first() {
        Some(row) => column(row, 0, "ferromq_state")?.int("ferromq_state"),
        None => {
            Err(JdbcError::Corrupt { table: "ferromq_state", reason: format!("no `{name}` row") })
        }
    }
}

/// Loads the bookkeeping from the database.
pub fn load(db: &mut dyn Database) -> Result<Bookkeeping, JdbcError> {
    let mut book = Bookkeeping { next_queue_id: 1, ..Bookkeeping::default() };
    for row in db.query("SELECT id, queue_key FROM ferromq_queues", &[])? {
        let id = column(&row, 0, "ferromq_queues")?.int("ferromq_queues")?;
        let key = decode_queue_key(column(&row, 1, "ferromq_queues")?.blob("ferromq_queues")?)
            .map_err(|e| JdbcError::Corrupt { table: "ferromq_queues", reason: e.to_string() })?;
        book.next_queue_id = book.next_queue_id.max(id + 1);
        book.queues.insert(key, id);
    }
    for row in db.query("SELECT txn, prepared FROM ferromq_txns", &[])? {
        let txn = unsigned(column(&row, 0, "ferromq_txns")?.int("ferromq_txns")?, "ferromq_txns")?;
        let prepared = column(&row, 1, "ferromq_txns")?.int("ferromq_txns")? != 0;
        book.txns.insert(TxnId(txn), if prepared { TxnState::Prepared } else { TxnState::Open });
    }
    // One scan of the references at open (and after a failed batch): then the writer keeps
    // the counts as it commits.
    for row in
        db.query("SELECT queue, COUNT(*) FROM ferromq_refs WHERE txn IS NULL GROUP BY queue", &[])?
    {
        let queue = column(&row, 0, "ferromq_refs")?.int("ferromq_refs")?;
        let count =
            unsigned(column(&row, 1, "ferromq_refs")?.int("ferromq_refs")?, "ferromq_refs")?;
        book.counts.insert(queue, count);
    }
    book.next_message_id = unsigned(state_value(db, "next_message_id")?, "ferromq_state")?.max(1);
    Ok(book)
}
