//! How each [`Operation`] of a unit becomes SQL, inside the writer's open transaction.
//!
//! Bodies are stored once (`ferromq_msgs`) and referenced per queue (`ferromq_refs`); a body
//! is deleted in the same transaction as its last reference, by one statement that checks no
//! other reference remains (indexed by `msg_id`). Transactional adds are written at once with
//! their `txn` column set (invisible to reads), transactional acks wait in `ferromq_txn_acks`;
//! COMMIT clears the column and applies the acks, ROLLBACK deletes both.

use std::sync::Arc;

use store::record::{encode_destination, encode_message, encode_queue_key, encode_subscription};
use store::{Destination, Message, Operation, PageKey, QueueKey, SubscriptionKey, TxnId, TxnState};

use crate::db::{column, Database, Param};
use crate::error::JdbcError;
use crate::state::{unsigned, Bookkeeping};

/// `255 - priority`: ascending rank is descending priority (see `schema`).
pub fn rank(priority: u8) -> i64 {
    255 - i64::from(priority)
}

/// A message or transaction id as a column value. Ids above `i64::MAX` cannot be stored.
pub fn signed(id: u64, what: &str) -> Result<i64, JdbcError> {
    i64::try_from(id).map_err(|_| JdbcError::Corrupt {
        table: "ferromq_msgs",
        reason: format!("{what} {id} does not fit a 64-bit signed column"),
    })
}

/// Applies the operations of one validated unit.
pub struct Applier<'a> {
    pub db: &'a mut dyn Database,
    pub book: &'a mut Bookkeeping,
}

/// Rows changed, as a count change.
fn count_delta(rows: u64) -> i64 {
    i64::try_from(rows).unwrap_or(i64::MAX)
}

const DELETE_ORPHAN: &str = "DELETE FROM ferromq_msgs WHERE id = ?1 \
     AND NOT EXISTS (SELECT 1 FROM ferromq_refs WHERE msg_id = ?1)";

impl Applier<'_> {
    pub fn apply(&mut self, operation: &Operation) -> Result<(), JdbcError> {
        match operation {
            Operation::AddDestination(destination) => {
                let key = encode_destination(destination);
                self.db.execute(
                    "INSERT INTO ferromq_destinations (destination) VALUES (?1) \
                     ON CONFLICT (destination) DO NOTHING",
                    &[Param::Blob(&key)],
                )?;
            }
            Operation::RemoveDestination(destination) => self.remove_destination(destination)?,
            Operation::AddSubscription(info) => {
                let bytes = encode_subscription(info);
                self.db.execute(
                    "INSERT INTO ferromq_subscriptions (client_id, name, info) VALUES (?1, ?2, ?3) \
                     ON CONFLICT (client_id, name) DO UPDATE SET info = excluded.info",
                    &[Param::Text(&info.key.client_id), Param::Text(&info.key.name), Param::Blob(&bytes)],
                )?;
            }
            Operation::RemoveSubscription(key) => self.remove_subscription(key)?,
            Operation::AddMessage { message, queues, txn } => {
                self.add(message, queues, *txn)?;
            }
            Operation::Ack { queue, key, txn: None } => self.ack(queue, *key)?,
            Operation::Ack { queue, key, txn: Some(txn) } => {
                self.begin_txn(*txn)?;
                if let Some(queue) = self.book.queues.get(queue).copied() {
                    self.db.execute(
                        "INSERT INTO ferromq_txn_acks (txn, queue, priority_rank, msg_id) \
                         VALUES (?1, ?2, ?3, ?4)",
                        &[
                            Param::Int(signed(txn.0, "transaction id")?),
                            Param::Int(queue),
                            Param::Int(rank(key.priority)),
                            Param::Int(signed(key.id.0, "message id")?),
                        ],
                    )?;
                }
            }
            Operation::Prepare(txn) => {
                self.db.execute(
                    "UPDATE ferromq_txns SET prepared = 1 WHERE txn = ?1",
                    &[Param::Int(signed(txn.0, "transaction id")?)],
                )?;
                self.book.txns.insert(*txn, TxnState::Prepared);
            }
            Operation::Commit(txn) => self.commit(*txn)?,
            Operation::Rollback(txn) => self.rollback(*txn)?,
        }
        Ok(())
    }

    fn begin_txn(&mut self, txn: TxnId) -> Result<(), JdbcError> {
        if self.book.txn_state(txn) == TxnState::Unknown {
            self.db.execute(
                "INSERT INTO ferromq_txns (txn, prepared) VALUES (?1, 0) ON CONFLICT (txn) DO NOTHING",
                &[Param::Int(signed(txn.0, "transaction id")?)],
            )?;
            self.book.txns.insert(txn, TxnState::Open);
        }
        Ok(())
    }

    /// The id of `queue`, created (in this transaction) if it has none yet.
    fn queue_id(&mut self, queue: &QueueKey) -> Result<i64, JdbcError> {
        if let Some(id) = self.book.queues.get(queue) {
            return Ok(*id);
        }
        let id = self.book.next_queue_id;
        let key = encode_queue_key(queue);
        self.db.execute(
            "INSERT INTO ferromq_queues (id, queue_key) VALUES (?1, ?2)",
            &[Param::Int(id), Param::Blob(&key)],
        )?;
        self.book.next_queue_id += 1;
        self.book.queues.insert(queue.clone(), id);
        self.book.queues_changed = true;
        Ok(id)
    }

    fn add(
        &mut self,
        message: &Arc<Message>,
        queues: &[QueueKey],
        txn: Option<TxnId>,
    ) -> Result<(), JdbcError> {
        self.book.next_message_id = self.book.next_message_id.max(message.id.0.saturating_add(1));
        if let Some(txn) = txn {
            self.begin_txn(txn)?;
        }
        if queues.is_empty() {
            return Ok(());
        }
        let id = signed(message.id.0, "message id")?;
        let body = encode_message(message);
        self.db.execute(
            "INSERT INTO ferromq_msgs (id, body) VALUES (?1, ?2) ON CONFLICT (id) DO NOTHING",
            &[Param::Int(id), Param::Blob(&body)],
        )?;
        let txn = match txn {
            Some(txn) => Param::Int(signed(txn.0, "transaction id")?),
            None => Param::Null,
        };
        let committed = matches!(txn, Param::Null);
        for queue in queues {
            let queue = self.queue_id(queue)?;
            let inserted = self.db.execute(
                "INSERT INTO ferromq_refs (queue, priority_rank, msg_id, txn) VALUES (?1, ?2, ?3, ?4) \
                 ON CONFLICT (queue, priority_rank, msg_id) DO NOTHING",
                &[Param::Int(queue), Param::Int(rank(message.priority())), Param::Int(id), txn],
            )?;
            if committed {
                self.book.count_references(queue, count_delta(inserted));
            }
        }
        Ok(())
    }

    /// Removes a committed reference and, if it was the last, its body.
    fn ack(&mut self, queue: &QueueKey, key: PageKey) -> Result<(), JdbcError> {
        let Some(queue) = self.book.queues.get(queue).copied() else { return Ok(()) };
        self.ack_id(queue, rank(key.priority), signed(key.id.0, "message id")?)
    }

    fn ack_id(&mut self, queue: i64, rank: i64, id: i64) -> Result<(), JdbcError> {
        let removed = self.db.execute(
            "DELETE FROM ferromq_refs WHERE queue = ?1 AND priority_rank = ?2 AND msg_id = ?3 \
             AND txn IS NULL",
            &[Param::Int(queue), Param::Int(rank), Param::Int(id)],
        )?;
        if removed > 0 {
            self.book.count_references(queue, -count_delta(removed));
            self.db.execute(DELETE_ORPHAN, &[Param::Int(id)])?;
        }
        Ok(())
    }

    fn commit(&mut self, txn: TxnId) -> Result<(), JdbcError> {
        let id = signed(txn.0, "transaction id")?;
        // The transaction's references join their queues' counts (the partial index on
        // `txn` keeps this a small range).
        let per_queue = self.db.query(
            "SELECT queue, COUNT(*) FROM ferromq_refs WHERE txn = ?1 GROUP BY queue",
            &[Param::Int(id)],
        )?;
        for row in per_queue {
            let queue = column(&row, 0, "ferromq_refs")?.int("ferromq_refs")?;
            let added = column(&row, 1, "ferromq_refs")?.int("ferromq_refs")?;
            self.book.count_references(queue, added);
        }
        self.db.execute("UPDATE ferromq_refs SET txn = NULL WHERE txn = ?1", &[Param::Int(id)])?;
        let acks = self.db.query(
            "SELECT queue, priority_rank, msg_id FROM ferromq_txn_acks WHERE txn = ?1",
            &[Param::Int(id)],
        )?;
        for row in acks {
            let get = |index| column(&row, index, "ferromq_txn_acks")?.int("ferromq_txn_acks");
            self.ack_id(get(0)?, get(1)?, get(2)?)?;
        }
        self.end_txn(txn, id)
    }

    fn rollback(&mut self, txn: TxnId) -> Result<(), JdbcError> {
        let id = signed(txn.0, "transaction id")?;
        // Bodies referenced only by this transaction's references go with them.
        self.db.execute(
            "DELETE FROM ferromq_msgs WHERE id IN (SELECT msg_id FROM ferromq_refs WHERE txn = ?1) \
             AND NOT EXISTS (SELECT 1 FROM ferromq_refs r WHERE r.msg_id = ferromq_msgs.id \
             AND (r.txn IS NULL OR r.txn <> ?1))",
            &[Param::Int(id)],
        )?;
        self.db.execute("DELETE FROM ferromq_refs WHERE txn = ?1", &[Param::Int(id)])?;
        self.end_txn(txn, id)
    }

    fn end_txn(&mut self, txn: TxnId, id: i64) -> Result<(), JdbcError> {
        self.db.execute("DELETE FROM ferromq_txn_acks WHERE txn = ?1", &[Param::Int(id)])?;
        self.db.execute("DELETE FROM ferromq_txns WHERE txn = ?1", &[Param::Int(id)])?;
        self.book.txns.remove(&txn);
        Ok(())
    }

    /// Drops every reference of a stored queue, the bodies only it held, and the queue.
    fn remove_queue(&mut self, queue: &QueueKey) -> Result<(), JdbcError> {
        let Some(id) = self.book.queues.remove(queue) else { return Ok(()) };
        self.book.queues_changed = true;
        self.book.forget_count(id);
        self.db.execute(
            "DELETE FROM ferromq_msgs WHERE id IN (SELECT msg_id FROM ferromq_refs WHERE queue = ?1) \
             AND NOT EXISTS (SELECT 1 FROM ferromq_refs r WHERE r.msg_id = ferromq_msgs.id \
             AND r.queue <> ?1)",
            &[Param::Int(id)],
        )?;
        self.db.execute("DELETE FROM ferromq_refs WHERE queue = ?1", &[Param::Int(id)])?;
        self.db.execute("DELETE FROM ferromq_queues WHERE id = ?1", &[Param::Int(id)])?;
        Ok(())
    }

    fn remove_destination(&mut self, destination: &Destination) -> Result<(), JdbcError> {
        let doomed: Vec<QueueKey> =
            self.book.queues.keys().filter(|q| &q.destination == destination).cloned().collect();
        for queue in doomed {
            self.remove_queue(&queue)?;
        }
        // Its durable subscriptions go too; they are few, so decode them all.
        let rows = self.db.query("SELECT client_id, name, info FROM ferromq_subscriptions", &[])?;
        for row in rows {
            let info = column(&row, 2, "ferromq_subscriptions")?.blob("ferromq_subscriptions")?;
            let info = store::record::decode_subscription(info).map_err(|e| {
                JdbcError::Corrupt { table: "ferromq_subscriptions", reason: e.to_string() }
            })?;
            if &info.topic == destination {
                self.db.execute(
                    "DELETE FROM ferromq_subscriptions WHERE client_id = ?1 AND name = ?2",
                    &[Param::Text(&info.key.client_id), Param::Text(&info.key.name)],
                )?;
            }
        }
        let key = encode_destination(destination);
        self.db.execute(
            "DELETE FROM ferromq_destinations WHERE destination = ?1",
            &[Param::Blob(&key)],
        )?;
        Ok(())
    }

    fn remove_subscription(&mut self, key: &SubscriptionKey) -> Result<(), JdbcError> {
        let doomed: Vec<QueueKey> = self
            .book
            .queues
            .keys()
            .filter(|q| q.subscription.as_ref() == Some(key))
            .cloned()
            .collect();
        for queue in doomed {
            self.remove_queue(&queue)?;
        }
        self.db.execute(
            "DELETE FROM ferromq_subscriptions WHERE client_id = ?1 AND name = ?2",
            &[Param::Text(&key.client_id), Param::Text(&key.name)],
        )?;
        Ok(())
    }
}

/// Rolls back every transaction that was not prepared, as a restart must (the contract:
/// recovery rolls back what was not prepared). Runs inside the open transaction at start.
pub fn roll_back_unprepared(
    db: &mut dyn Database,
    book: &mut Bookkeeping,
) -> Result<(), JdbcError> {
    let open: Vec<TxnId> = book
        .txns
        .iter()
        .filter(|(_, state)| **state == TxnState::Open)
        .map(|(txn, _)| *txn)
        .collect();
    for txn in open {
        Applier { db: &mut *db, book: &mut *book }.rollback(txn)?;
    }
    Ok(())
}

/// Reads `ferromq_txns`' prepared ids, for recovery.
pub fn prepared(db: &mut dyn Database) -> Result<Vec<TxnId>, JdbcError> {
    let mut prepared = Vec::new();
    for row in db.query("SELECT txn FROM ferromq_txns WHERE prepared <> 0 ORDER BY txn", &[])? {
        prepared.push(TxnId(unsigned(
            column(&row, 0, "ferromq_txns")?.int("ferromq_txns")?,
            "ferromq_txns",
        )?));
    }
    Ok(prepared)
}
