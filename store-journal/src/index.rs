//! The in-memory index: what the store holds, and where each body is in the journal.
//!
//! Per stored queue, per priority, a compact ordered map id -> location ([`QueueRefs`]);
//! bodies are read back from the journal files, never kept here (except for the short time
//! between `submit` and the write, see [`PendingBody`]). Reference counts are kept only for
//! bodies referenced by more than one queue ([`Index::multi`]); a body absent from that map is
//! referenced once. Destinations, durable subscriptions and open transactions (their
//! operations, with the locations of their add records) complete it.
//!
//! The same `apply_*` methods serve `submit` (where an add's location is not known yet: it is
//! [`PENDING`] | a token until the writer places the record, see [`Index::locate_add`]) and
//! recovery (which replays records with their real locations), so both follow
//! [`store::MemoryStore`]'s semantics.

use std::collections::{BTreeMap, BTreeSet, HashMap};
use std::sync::Arc;

use store::{
    validate_unit, Destination, Message, MessageId, Operation, PageKey, QueueKey, StoreError,
    SubscriptionInfo, SubscriptionKey, TxnId, TxnState,
};

use crate::refs::{is_pending, Loc, QueueRefs, Slot, PENDING};

/// An add whose record the writer has not placed yet: the body stays in memory (reads use
/// it) and its references are counted, so that an add whose every reference is acked before
/// the writer gets to it is dropped from the batch, with those acks.
#[derive(Debug)]
pub struct PendingBody {
    pub message: Arc<Message>,
    /// References made by this add (committed ones, for a transactional add).
    pub refs: u32,
    /// The add belongs to a transaction that is still open.
    pub in_txn: bool,
}

/// A transactional operation, held until its transaction ends.
#[derive(Debug, Clone)]
pub enum TxnOp {
    Add { id: MessageId, priority: u8, queues: Vec<QueueKey>, loc: Loc, size: u32 },
    Ack { queue: QueueKey, key: PageKey },
}

#[derive(Debug, Default, Clone)]
pub struct Txn {
    pub ops: Vec<TxnOp>,
    pub prepared: bool,
    /// (file, bytes) of every record of this transaction in the journal: they stay live
    /// (their files are neither deleted nor compacted) while the transaction is open.
    pub records: Vec<(u32, u32)>,
}

#[derive(Debug)]
pub struct Index {
    /// Only non-empty queues are kept.
    pub queues: HashMap<QueueKey, QueueRefs>,
    /// Reference counts of placed bodies referenced by two queues or more.
    pub multi: HashMap<u64, u32>,
    /// Adds not yet placed by the writer, by token.
    pub pending: HashMap<u64, PendingBody>,
    /// Bodies placed but not yet written (or whose write failed), by location.
    pub unwritten: HashMap<Loc, Arc<Message>>,
    pub destinations: BTreeSet<Destination>,
    pub subscriptions: BTreeMap<SubscriptionKey, SubscriptionInfo>,
    pub txns: HashMap<TxnId, Txn>,
    /// One more than the largest id ever added (at least 1).
    pub next_message_id: u64,
    next_token: u64,
}

impl Default for Index {
    fn default() -> Self {
        Index {
            queues: HashMap::new(),
            multi: HashMap::new(),
            pending: HashMap::new(),
            unwritten: HashMap::new(),
            destinations: BTreeSet::new(),
            subscriptions: BTreeMap::new(),
            txns: HashMap::new(),
            next_message_id: 1,
            next_token: 1,
        }
    }
}

impl Index {
    /// Checks that every operation of a unit can be applied (the contract's rules).
    pub fn validate(&self, operations: &[Operation]) -> Result<(), StoreError> {
        validate_unit(operations, |txn| match self.txns.get(&txn) {
            Some(t) if t.prepared => TxnState::Prepared,
            Some(_) => TxnState::Open,
            None => TxnState::Unknown,
        })
    }

    /// Registers the body of an add that the writer has not placed yet; returns its token.
    /// The add's location is then `PENDING | token`.
    pub fn register_pending(&mut self, message: Arc<Message>, in_txn: bool) -> u64 {
        let token = self.next_token;
        self.next_token += 1;
        self.pending.insert(token, PendingBody { message, refs: 0, in_txn });
        token
    }

    /// Adds a message: references in `queues` now, or held by its transaction.
    pub fn apply_add(
        &mut self,
        id: MessageId,
        priority: u8,
        queues: &[QueueKey],
        txn: Option<TxnId>,
        loc: Loc,
        size: u32,
    ) {
        self.next_message_id = self.next_message_id.max(id.0.saturating_add(1));
        match txn {
            Some(txn) => self.txns.entry(txn).or_default().ops.push(TxnOp::Add {
                id,
                priority,
                queues: queues.to_vec(),
                loc,
                size,
            }),
            None => self.add_refs(id, priority, queues, loc, size),
        }
    }

    fn add_refs(&mut self, id: MessageId, priority: u8, queues: &[QueueKey], loc: Loc, size: u32) {
        let mut inserted = 0u32;
        for queue in queues {
            let refs = self.queues.entry(queue.clone()).or_default();
            if refs.insert(priority, Slot { id: id.0, loc, size }) {
                inserted += 1;
            }
        }
        if is_pending(loc) {
            if let Some(body) = self.pending.get_mut(&(loc & !PENDING)) {
                body.refs += inserted;
            }
        } else if inserted > 0 {
            match self.multi.get_mut(&id.0) {
                Some(count) => *count += inserted,
                None if inserted >= 2 => {
                    self.multi.insert(id.0, inserted);
                }
                None => {}
            }
        }
    }

    /// Releases one reference to the body at `slot`.
    fn release(&mut self, slot: Slot) {
        let loc = slot.loc();
        if is_pending(loc) {
            if let Some(body) = self.pending.get_mut(&(loc & !PENDING)) {
                body.refs = body.refs.saturating_sub(1);
            }
        } else if let Some(count) = self.multi.get_mut(&slot.id()) {
            *count -= 1;
            if *count <= 1 {
                self.multi.remove(&slot.id());
            }
        }
    }

    fn remove_ref(&mut self, queue: &QueueKey, priority: u8, id: u64) -> Option<Slot> {
        let refs = self.queues.get_mut(queue)?;
        let slot = refs.remove(priority, id)?;
        if refs.is_empty() {
            self.queues.remove(queue);
        }
        self.release(slot);
        Some(slot)
    }

    fn remove_queue(&mut self, queue: &QueueKey) {
        if let Some(refs) = self.queues.remove(queue) {
            for (_, slot) in refs.iter() {
                self.release(slot);
            }
        }
    }

    /// An ack. Returns the token of the pending add whose reference it removed, if any: when
    /// that add is dropped from its batch, so is this ack.
    pub fn apply_ack(&mut self, queue: &QueueKey, key: PageKey, txn: Option<TxnId>) -> Option<u64> {
        if let Some(txn) = txn {
            self.txns.entry(txn).or_default().ops.push(TxnOp::Ack { queue: queue.clone(), key });
            return None;
        }
        let slot = self.remove_ref(queue, key.priority, key.id.0)?;
        is_pending(slot.loc()).then_some(slot.loc() & !PENDING)
    }

    pub fn apply_add_destination(&mut self, destination: Destination) {
        self.destinations.insert(destination);
    }

    pub fn apply_remove_destination(&mut self, destination: &Destination) {
        let doomed: Vec<QueueKey> =
            self.queues.keys().filter(|q| q.destination == *destination).cloned().collect();
        for queue in doomed {
            self.remove_queue(&queue);
        }
        self.subscriptions.retain(|_, info| info.topic != *destination);
        self.destinations.remove(destination);
    }

    pub fn apply_add_subscription(&mut self, info: SubscriptionInfo) {
        self.subscriptions.insert(info.key.clone(), info);
    }

    pub fn apply_remove_subscription(&mut self, key: &SubscriptionKey) {
        let doomed: Vec<QueueKey> =
            self.queues.keys().filter(|q| q.subscription.as_ref() == Some(key)).cloned().collect();
        for queue in doomed {
            self.remove_queue(&queue);
        }
        self.subscriptions.remove(key);
    }

    pub fn apply_prepare(&mut self, txn: TxnId) {
        if let Some(t) = self.txns.get_mut(&txn) {
            t.prepared = true;
        }
    }

    pub fn apply_commit(&mut self, txn: TxnId) {
        let Some(t) = self.txns.remove(&txn) else { return };
        for op in t.ops {
            match op {
                TxnOp::Add { id, priority, queues, loc, size } => {
                    if is_pending(loc) {
                        if let Some(body) = self.pending.get_mut(&(loc & !PENDING)) {
                            body.in_txn = false;
                        }
                    }
                    self.add_refs(id, priority, &queues, loc, size);
                }
                TxnOp::Ack { queue, key } => {
                    self.remove_ref(&queue, key.priority, key.id.0);
                }
            }
        }
    }

    pub fn apply_rollback(&mut self, txn: TxnId) {
        let Some(t) = self.txns.remove(&txn) else { return };
        for op in t.ops {
            if let TxnOp::Add { loc, .. } = op {
                if is_pending(loc) {
                    if let Some(body) = self.pending.get_mut(&(loc & !PENDING)) {
                        body.in_txn = false;
                    }
                }
            }
        }
    }

    /// A body rewritten at `loc` (compaction): every queue in `queues` now references it
    /// there (a queue that lacks the reference gets it: a replay that lost the original add).
    pub fn apply_relocate(
        &mut self,
        id: MessageId,
        priority: u8,
        queues: &[QueueKey],
        loc: Loc,
        size: u32,
    ) {
        self.next_message_id = self.next_message_id.max(id.0.saturating_add(1));
        for queue in queues {
            let refs = self.queues.entry(queue.clone()).or_default();
            if !refs.relocate(priority, id.0, loc, size) {
                refs.insert(priority, Slot { id: id.0, loc, size });
            }
        }
        if queues.len() >= 2 {
            self.multi.insert(id.0, queues.len() as u32);
        } else {
            self.multi.remove(&id.0);
        }
    }

    pub fn apply_watermark(&mut self, next: MessageId) {
        self.next_message_id = self.next_message_id.max(next.0);
    }

    /// Notes a record of transaction `txn` at (file, size), if the transaction is open.
    pub fn note_txn_record(&mut self, txn: TxnId, file: u32, size: u32) {
        if let Some(t) = self.txns.get_mut(&txn) {
            t.records.push((file, size));
        }
    }

    /// The writer placed (or dropped) the add of `token`. Returns false if the add is to be
    /// dropped: no reference to it is left and no open transaction holds it. Otherwise every
    /// reference (and the transaction's operation) gets the real location, and the body
    /// stays readable from memory until the write completes.
    pub fn locate_add(
        &mut self,
        token: u64,
        id: MessageId,
        priority: u8,
        queues: &[QueueKey],
        txn: Option<TxnId>,
        place: impl FnOnce() -> (Loc, u32),
    ) -> Option<Loc> {
        let body = self.pending.remove(&token)?;
        if body.refs == 0 && !body.in_txn {
            return None;
        }
        let (loc, size) = place();
        let pending = PENDING | token;
        for queue in queues {
            if let Some(refs) = self.queues.get_mut(queue) {
                if refs.get(priority, id.0).is_some_and(|slot| slot.loc() == pending) {
                    refs.relocate(priority, id.0, loc, size);
                }
            }
        }
        if body.refs >= 2 {
            *self.multi.entry(id.0).or_insert(0) += body.refs;
        }
        if body.in_txn {
            if let Some(t) = txn.and_then(|txn| self.txns.get_mut(&txn)) {
                for op in t.ops.iter_mut().rev() {
                    if let TxnOp::Add { loc: op_loc, size: op_size, .. } = op {
                        if *op_loc == pending {
                            *op_loc = loc;
                            *op_size = size;
                            break;
                        }
                    }
                }
            }
        }
        self.unwritten.insert(loc, body.message);
        Some(loc)
    }

    /// Up to `limit` references of `queue` after `after`, in page order, with priorities.
    pub fn page(&self, queue: &QueueKey, after: Option<PageKey>, limit: usize) -> Vec<Slot> {
        let Some(refs) = self.queues.get(queue) else { return Vec::new() };
        let mut out = Vec::new();
        for priority in (0..=9u8).rev() {
            if out.len() >= limit {
                break;
            }
            let level = &refs.levels[usize::from(priority)];
            let resume = match after {
                Some(after) if priority > after.priority => continue,
                Some(after) if priority == after.priority => Some(after.id.0),
                _ => None,
            };
            out.extend(level.iter_after(resume).take(limit - out.len()));
        }
        out
    }

    pub fn count(&self, queue: &QueueKey) -> u64 {
        self.queues.get(queue).map_or(0, |refs| refs.count() as u64)
    }

    /// Every destination, declared or holding references.
    pub fn all_destinations(&self) -> Vec<Destination> {
        let mut all = self.destinations.clone();
        all.extend(self.queues.keys().map(|q| q.destination.clone()));
        all.into_iter().collect()
    }

    pub fn prepared(&self) -> Vec<TxnId> {
        let mut prepared: Vec<TxnId> =
            self.txns.iter().filter(|(_, t)| t.prepared).map(|(txn, _)| *txn).collect();
        prepared.sort_unstable();
        prepared
    }

    /// An estimate of the heap bytes of the references (the part that grows with messages).
    pub fn heap_bytes(&self) -> usize {
        self.queues.values().map(QueueRefs::heap_bytes).sum::<usize>() + self.multi.capacity() * 16
    }
}
