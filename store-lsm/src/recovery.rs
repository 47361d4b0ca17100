//! Opening: the schema check, and the in-memory state rebuilt from one scan of each
//! keyspace except the bodies (which are never read at open).
//!
//! - `k` keys give the interned queue names; `d` and `s` the destinations and
//!   subscriptions.
//! - `q` keys give the reference count of every queue, and, sorted by message id, which
//!   bodies are shared by several queues and the bytes of live bodies (each reference
//!   carries its body's length).
//! - `t` and `x` keys give the transactions: those without a prepare record were in flight
//!   when the process stopped and are rolled back here (their records deleted).
//! - The next message id is the `00 'n'` key, written with every unit that adds.
//! - Without the `00 'c'` key the last run did not close cleanly: messages recovered are
//!   delivered marked redelivered. The key is deleted at open (durably) so that a crash of
//!   this run is seen by the next.

use std::collections::HashMap;

use store::{record, Failpoints, StoreError, TxnId};

use crate::engine::{Engine, KeyValue, WriteBatch};
use crate::error::LsmError;
use crate::keys::{self, TxnRecord};
use crate::state::{State, Txn};
use crate::{FAILPOINT_READ, FAILPOINT_SYNC, FAILPOINT_WRITE};

/// What open found besides the state.
pub struct Opened {
    pub state: State,
    /// The last run did not close cleanly.
    pub crashed: bool,
}

fn scan<'a>(
    engine: &'a dyn Engine,
    failpoints: &Failpoints,
    prefix: u8,
) -> Result<impl Iterator<Item = Result<KeyValue, LsmError>> + 'a, StoreError> {
    failpoints.check(FAILPOINT_READ)?;
    let (start, end) = keys::keyspace(prefix);
    Ok(engine.range(&start, &end))
}

pub fn recover(engine: &dyn Engine, failpoints: &Failpoints) -> Result<Opened, StoreError> {
    failpoints.check(FAILPOINT_READ)?;
    let mut cleanup = WriteBatch::new();
    match engine.get(keys::SCHEMA)? {
        Some(value) => {
            let found = keys::value_u32(keys::SCHEMA, &value)?;
            if found > keys::SCHEMA_VERSION {
                return Err(
                    LsmError::SchemaTooNew { found, supported: keys::SCHEMA_VERSION }.into()
                );
            }
        }
        None => cleanup.put(keys::SCHEMA.to_vec(), keys::SCHEMA_VERSION.to_be_bytes().to_vec()),
    }
    let crashed = engine.get(keys::CLEAN)?.is_none();
    let mut state = State { next_queue_id: 1, next_message_id: 1, ..State::default() };
    if let Some(value) = engine.get(keys::NEXT_ID)? {
        state.next_message_id = keys::value_u64(keys::NEXT_ID, &value)?.max(1);
    }

    for entry in scan(engine, failpoints, keys::QUEUE_NAME)? {
        let (key, value) = entry?;
        let qid = keys::parse_queue_name(&key)?;
        let queue = record::decode_queue_key(&value)?;
        state.next_queue_id = state.next_queue_id.max(qid.saturating_add(1));
        state.queue_ids.insert(queue.clone(), qid);
        state.queues.insert(qid, queue);
    }
    for entry in scan(engine, failpoints, keys::DESTINATION)? {
        let (key, _) = entry?;
        state.destinations.insert(record::decode_destination(&key[1..])?);
    }
    for entry in scan(engine, failpoints, keys::SUBSCRIPTION)? {
        let (_, value) = entry?;
        let info = record::decode_subscription(&value)?;
        state.subscriptions.insert(info.key.clone(), info);
    }

    // (id, body length) of every reference; sorted, equal ids are one shared body.
    let mut references: Vec<(u64, u32)> = Vec::new();
    for entry in scan(engine, failpoints, keys::REFERENCE)? {
        let (key, value) = entry?;
        let (qid, page) = keys::parse_reference(&key)?;
        if !state.queues.contains_key(&qid) {
            return Err(LsmError::corrupt(&key, "reference to a queue with no name").into());
        }
        *state.counts.entry(qid).or_default() += 1;
        references.push((page.id.0, keys::value_u32(&key, &value)?));
    }
    references.sort_unstable();
    for run in references.chunk_by(|a, b| a.0 == b.0) {
        let (id, len) = run[0];
        state.live_bytes += u64::from(len);
        if run.len() > 1 {
            state.shared.insert(id, run.len() as u32);
        }
        state.next_message_id = state.next_message_id.max(id.saturating_add(1));
    }
    drop(references);

    let mut prepared: Vec<TxnId> = Vec::new();
    for entry in scan(engine, failpoints, keys::TXN_PREPARED)? {
        let (key, _) = entry?;
        prepared.push(keys::parse_txn_prepared(&key)?);
    }
    let mut txns: HashMap<TxnId, Txn> = HashMap::new();
    for entry in scan(engine, failpoints, keys::TXN_OP)? {
        let (key, value) = entry?;
        let (txn, seq) = keys::parse_txn_op(&key)?;
        if prepared.contains(&txn) {
            let state = txns.entry(txn).or_insert(Txn { prepared: true, next_seq: 0 });
            state.next_seq = state.next_seq.max(seq.saturating_add(1));
            // Its adds were counted into the next id when written; check it decodes.
            TxnRecord::decode(&key, &value)?;
        } else {
            // In flight without a prepare: rolled back.
            cleanup.delete(key);
        }
    }
    for txn in prepared {
        // A prepare of a transaction without operations still ends with commit/rollback.
        txns.entry(txn).or_insert(Txn { prepared: true, next_seq: 0 });
    }
    state.txns = txns;

    if !crashed {
        cleanup.delete(keys::CLEAN.to_vec());
    }
    if !cleanup.is_empty() {
        failpoints.check(FAILPOINT_WRITE)?;
        engine.write(cleanup)?;
        failpoints.check(FAILPOINT_SYNC)?;
        engine.sync()?;
    }
    Ok(Opened { state, crashed })
}
