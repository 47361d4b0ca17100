//! What the store keeps in memory beside the engine, and how a unit of work becomes a
//! write batch.
//!
//! In memory: the overlay of units the writer has not written yet, the interned queue
//! names, a reference count per queue, reference counts of bodies shared by more than one
//! queue (a body not in that map has exactly one reference), the bytes of live bodies,
//! declared destinations and subscriptions, and the open transactions. All of it but the
//! overlay is rebuilt at open from a scan of the keys (`recovery.rs`).
//!
//! [`Builder`] turns one unit into the puts and deletes of its batch, reading through the
//! layers (its own writes, the overlay, the engine) and keeping every change to the
//! in-memory state in a [`Delta`], so that a unit whose reads fail applies nothing.

use std::collections::{BTreeMap, BTreeSet, HashMap};

use store::record;
use store::{
    Destination, Failpoints, MessageId, Operation, PageKey, QueueKey, SubscriptionInfo,
    SubscriptionKey, TxnId, TxnState,
};

use crate::engine::{Engine, KeyValue};
use crate::error::LsmError;
use crate::keys::{self, TxnRecord};
use crate::view::{self, Merge, Overlay, UnitWrites};
use crate::FAILPOINT_READ;

/// An open transaction: prepared or not, and the sequence number of its next operation.
#[derive(Debug, Clone, Copy, Default)]
pub struct Txn {
    pub prepared: bool,
    pub next_seq: u32,
}

#[derive(Debug, Default)]
pub struct State {
    pub overlay: Overlay,
    /// The sequence number of the next unit (orders overlay entries against batches).
    pub next_seq: u64,
    pub queue_ids: HashMap<QueueKey, u32>,
    pub queues: HashMap<u32, QueueKey>,
    pub next_queue_id: u32,
    /// References per queue (committed ones); queues without references are absent.
    pub counts: HashMap<u32, u64>,
    /// Reference counts of bodies referenced by two queues or more.
    pub shared: HashMap<u64, u32>,
    /// Bytes of the bodies held (the `m` values).
    pub live_bytes: u64,
    pub destinations: BTreeSet<Destination>,
    pub subscriptions: BTreeMap<SubscriptionKey, SubscriptionInfo>,
    pub txns: HashMap<TxnId, Txn>,
    pub next_message_id: u64,
}

impl State {
    pub fn txn_state(&self, txn: TxnId) -> TxnState {
        match self.txns.get(&txn) {
            Some(t) if t.prepared => TxnState::Prepared,
            Some(_) => TxnState::Open,
            None => TxnState::Unknown,
        }
    }

    /// Reads `key` through the overlay and the engine.
    pub fn get(
        &self,
        engine: &dyn Engine,
        failpoints: &Failpoints,
        key: &[u8],
    ) -> Result<Option<Vec<u8>>, store::StoreError> {
        if let Some(pending) = self.overlay.get(key) {
            return Ok(pending.value.clone());
        }
        failpoints.check(FAILPOINT_READ)?;
        Ok(engine.get(key)?)
    }

    /// Applies a built unit's changes to the in-memory state.
    pub fn apply(&mut self, delta: Delta, writes: &UnitWrites, seq: u64) {
        for (queue, qid) in delta.new_queues {
            self.queues.insert(qid, queue.clone());
            self.queue_ids.insert(queue, qid);
        }
        self.next_queue_id = delta.next_queue_id;
        for (qid, change) in delta.counts {
            let count = self.counts.entry(qid).or_default();
            *count = count.saturating_add_signed(change);
            if *count == 0 {
                self.counts.remove(&qid);
            }
        }
        for (id, refs) in delta.shared {
            if refs >= 2 {
                self.shared.insert(id, refs);
            } else {
                self.shared.remove(&id);
            }
        }
        self.live_bytes = self.live_bytes.saturating_add_signed(delta.live_bytes);
        if let Some(destinations) = delta.destinations {
            self.destinations = destinations;
        }
        if let Some(subscriptions) = delta.subscriptions {
            self.subscriptions = subscriptions;
        }
        for (txn, state) in delta.txns {
            match state {
                Some(state) => self.txns.insert(txn, state),
                None => self.txns.remove(&txn),
            };
        }
        self.next_message_id = delta.next_message_id;
        for (key, value) in writes {
            self.overlay.insert(key.clone(), view::Pending { value: value.clone(), seq });
        }
    }
}

/// The in-memory changes of one unit.
#[derive(Debug, Default)]
pub struct Delta {
    new_queues: Vec<(QueueKey, u32)>,
    next_queue_id: u32,
    counts: HashMap<u32, i64>,
    /// New reference counts of bodies (below 2: no longer shared).
    shared: HashMap<u64, u32>,
    live_bytes: i64,
    destinations: Option<BTreeSet<Destination>>,
    subscriptions: Option<BTreeMap<SubscriptionKey, SubscriptionInfo>>,
    txns: HashMap<TxnId, Option<Txn>>,
    next_message_id: u64,
}

/// Builds one unit's batch over a state it only reads.
pub struct Builder<'a> {
    state: &'a State,
    engine: &'a dyn Engine,
    failpoints: &'a Failpoints,
    pub writes: UnitWrites,
    delta: Delta,
}

impl<'a> Builder<'a> {
    pub fn new(state: &'a State, engine: &'a dyn Engine, failpoints: &'a Failpoints) -> Self {
        let delta = Delta {
            next_queue_id: state.next_queue_id,
            next_message_id: state.next_message_id,
            ..Delta::default()
        };
        Builder { state, engine, failpoints, writes: UnitWrites::new(), delta }
    }

    /// The unit's writes and in-memory changes; the next message id is stored with every
    /// unit that raises it, so that recovery never hands out an id twice.
    pub fn finish(mut self) -> (UnitWrites, Delta) {
        if self.delta.next_message_id != self.state.next_message_id {
            let next = self.delta.next_message_id.to_be_bytes().to_vec();
            self.put(keys::NEXT_ID.to_vec(), next);
        }
        (self.writes, self.delta)
    }

    fn get(&self, key: &[u8]) -> Result<Option<Vec<u8>>, store::StoreError> {
        if let Some(value) = self.writes.get(key) {
            return Ok(value.clone());
        }
        self.state.get(self.engine, self.failpoints, key)
    }

    /// Every live key in `start..end` through the three layers, collected (the caller
    /// writes to the same keys next).
    fn scan(&self, start: &[u8], end: &[u8]) -> Result<Vec<KeyValue>, store::StoreError> {
        self.failpoints.check(FAILPOINT_READ)?;
        let merged = Merge::new(
            view::unit_range(&self.writes, start, end),
            Merge::new(
                view::overlay_range(&self.state.overlay, start, end),
                view::engine_range(self.engine, start, end),
            ),
        );
        Ok(view::live(merged).collect::<Result<Vec<_>, LsmError>>()?)
    }

    fn put(&mut self, key: Vec<u8>, value: Vec<u8>) {
        self.writes.insert(key, Some(value));
    }

    fn delete(&mut self, key: Vec<u8>) {
        self.writes.insert(key, None);
    }

    fn queue_id(&self, queue: &QueueKey) -> Option<u32> {
        self.state
            .queue_ids
            .get(queue)
            .copied()
            .or_else(|| self.delta.new_queues.iter().find(|(q, _)| q == queue).map(|(_, qid)| *qid))
    }

    /// The queue's id, interning (and storing) its name the first time.
    fn intern(&mut self, queue: &QueueKey) -> u32 {
        if let Some(qid) = self.queue_id(queue) {
            return qid;
        }
        let qid = self.delta.next_queue_id;
        self.delta.next_queue_id = qid.saturating_add(1);
        self.put(keys::queue_name(qid), record::encode_queue_key(queue));
        self.delta.new_queues.push((queue.clone(), qid));
        qid
    }

    /// Queues (known or new in this unit) matching `filter`.
    fn queues_where(&self, filter: impl Fn(&QueueKey) -> bool) -> Vec<u32> {
        let known = self.state.queue_ids.iter().map(|(q, id)| (q, *id));
        let new = self.delta.new_queues.iter().map(|(q, id)| (q, *id));
        known.chain(new).filter(|(q, _)| filter(q)).map(|(_, id)| id).collect()
    }

    fn refs_of(&self, id: MessageId) -> u32 {
        match self.delta.shared.get(&id.0) {
            Some(refs) => *refs,
            None => self.state.shared.get(&id.0).copied().unwrap_or(1),
        }
    }

    fn destinations(&mut self) -> &mut BTreeSet<Destination> {
        let state = self.state;
        self.delta.destinations.get_or_insert_with(|| state.destinations.clone())
    }

    fn subscriptions(&mut self) -> &mut BTreeMap<SubscriptionKey, SubscriptionInfo> {
        let state = self.state;
        self.delta.subscriptions.get_or_insert_with(|| state.subscriptions.clone())
    }

    fn txn(&self, txn: TxnId) -> Txn {
        match self.delta.txns.get(&txn) {
            Some(state) => state.unwrap_or_default(),
            None => self.state.txns.get(&txn).copied().unwrap_or_default(),
        }
    }

    /// Appends a transactional record to `txn`.
    fn txn_record(&mut self, txn: TxnId, record: TxnRecord) {
        let mut state = self.txn(txn);
        let seq = state.next_seq;
        state.next_seq = seq.saturating_add(1);
        self.delta.txns.insert(txn, Some(state));
        self.put(keys::txn_op(txn, seq), record.encode());
    }

    /// Applies one operation (the unit was validated first).
    pub fn apply(&mut self, operation: Operation) -> Result<(), store::StoreError> {
        match operation {
            Operation::AddDestination(destination) => {
                self.put(keys::destination(&record::encode_destination(&destination)), Vec::new());
                self.destinations().insert(destination);
            }
            Operation::RemoveDestination(destination) => {
                for qid in self.queues_where(|q| q.destination == destination) {
                    self.remove_queue(qid)?;
                }
                let doomed: Vec<SubscriptionKey> = self
                    .subscriptions()
                    .iter()
                    .filter(|(_, info)| info.topic == destination)
                    .map(|(key, _)| key.clone())
                    .collect();
                for key in doomed {
                    self.delete(keys::subscription(&key));
                    self.subscriptions().remove(&key);
                }
                self.delete(keys::destination(&record::encode_destination(&destination)));
                self.destinations().remove(&destination);
            }
            Operation::AddSubscription(info) => {
                self.put(keys::subscription(&info.key), record::encode_subscription(&info));
                self.subscriptions().insert(info.key.clone(), info);
            }
            Operation::RemoveSubscription(key) => {
                for qid in self.queues_where(|q| q.subscription.as_ref() == Some(&key)) {
                    self.remove_queue(qid)?;
                }
                self.delete(keys::subscription(&key));
                self.subscriptions().remove(&key);
            }
            Operation::AddMessage { message, queues, txn } => {
                let page = PageKey::of(&message);
                let mut qids: Vec<u32> = queues.iter().map(|q| self.intern(q)).collect();
                qids.sort_unstable();
                qids.dedup();
                let mut body = Vec::with_capacity(message.body.len() + 128);
                body.push(page.priority);
                body.extend_from_slice(&record::encode_message(&message));
                match txn {
                    Some(txn) => {
                        self.delta.next_message_id =
                            self.delta.next_message_id.max(page.id.0.saturating_add(1));
                        self.txn_record(txn, TxnRecord::Add { page, qids, body });
                    }
                    None => self.add_references(page, &qids, body)?,
                }
            }
            Operation::Ack { queue, key, txn } => match txn {
                Some(txn) => {
                    let qid = self.intern(&queue);
                    self.txn_record(txn, TxnRecord::Ack { qid, page: key });
                }
                None => {
                    if let Some(qid) = self.queue_id(&queue) {
                        self.remove_reference(qid, key)?;
                    }
                }
            },
            Operation::Prepare(txn) => {
                let mut state = self.txn(txn);
                state.prepared = true;
                self.delta.txns.insert(txn, Some(state));
                self.put(keys::txn_prepared(txn), Vec::new());
            }
            Operation::Commit(txn) | Operation::Rollback(txn) => {
                let commit = matches!(operation, Operation::Commit(_));
                let (start, end) = keys::txn_ops(txn);
                for (key, value) in self.scan(&start, &end)? {
                    if commit {
                        match TxnRecord::decode(&key, &value)? {
                            TxnRecord::Add { page, qids, body } => {
                                self.add_references(page, &qids, body)?
                            }
                            TxnRecord::Ack { qid, page } => self.remove_reference(qid, page)?,
                        }
                    }
                    self.delete(key);
                }
                self.delete(keys::txn_prepared(txn));
                self.delta.txns.insert(txn, None);
            }
        }
        Ok(())
    }

    /// Stores `body` (unless stored already) and a reference to it in each queue.
    fn add_references(
        &mut self,
        page: PageKey,
        qids: &[u32],
        body: Vec<u8>,
    ) -> Result<(), store::StoreError> {
        let id = page.id;
        // Ids below the next id may name a body already stored (an id added twice): the
        // body stored first wins and keeps its priority. Fresh ids skip the lookup.
        let existing =
            if id.0 < self.delta.next_message_id { self.get(&keys::body(id))? } else { None };
        self.delta.next_message_id = self.delta.next_message_id.max(id.0.saturating_add(1));
        let (page, mut refs, len) = match &existing {
            Some(stored) => {
                let priority = *stored
                    .first()
                    .ok_or_else(|| LsmError::corrupt(&keys::body(id), "empty body"))?;
                (PageKey { priority, id }, self.refs_of(id), stored.len())
            }
            None => (page, 0, body.len()),
        };
        let len_value = (len as u32).to_be_bytes().to_vec();
        for qid in qids {
            let key = keys::reference(*qid, page);
            if existing.is_some() && self.get(&key)?.is_some() {
                continue;
            }
            self.put(key, len_value.clone());
            *self.delta.counts.entry(*qid).or_default() += 1;
            refs += 1;
        }
        if existing.is_none() && refs > 0 {
            self.put(keys::body(id), body);
            self.delta.live_bytes += len as i64;
        }
        if refs > 0 {
            self.delta.shared.insert(id.0, refs);
        }
        Ok(())
    }

    /// Removes one reference if the queue holds it, and the body with its last reference.
    fn remove_reference(&mut self, qid: u32, page: PageKey) -> Result<(), store::StoreError> {
        let key = keys::reference(qid, page);
        let Some(value) = self.get(&key)? else {
            return Ok(());
        };
        let len = keys::value_u32(&key, &value)?;
        self.delete(key);
        self.release(qid, page.id, len);
        Ok(())
    }

    fn release(&mut self, qid: u32, id: MessageId, len: u32) {
        *self.delta.counts.entry(qid).or_default() -= 1;
        let refs = self.refs_of(id).saturating_sub(1);
        self.delta.shared.insert(id.0, refs);
        if refs == 0 {
            self.delete(keys::body(id));
            self.delta.live_bytes -= i64::from(len);
        }
    }

    /// Drops every reference of a queue.
    fn remove_queue(&mut self, qid: u32) -> Result<(), store::StoreError> {
        let (start, end) = keys::references(qid, None);
        for (key, value) in self.scan(&start, &end)? {
            let (_, page) = keys::parse_reference(&key)?;
            let len = keys::value_u32(&key, &value)?;
            self.delete(key);
            self.release(qid, page.id, len);
        }
        Ok(())
    }
}

/// Bytes of the bodies a unit adds (for the size limit).
pub fn added_bytes(operations: &[Operation]) -> u64 {
    operations
        .iter()
        .map(|op| match op {
            Operation::AddMessage { message, .. } => message.memory_size() as u64,
            _ => 0,
        })
        .sum()
}
