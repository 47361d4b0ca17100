//! [`MemoryStore`]: the in-memory engine.
//!
//! Everything lives in one state behind a lock: message bodies once per [`MessageId`] with
//! a reference count, and per queue an ordered set of [`PageKey`]s, so that
//! [`MessageStore::read_page`] is a range scan (`O(log n + limit)`). Transactions are streamed
//! into the store like every other operation: each transaction's adds and acks are held here,
//! keyed by [`TxnId`], until its commit applies them or its rollback drops them.
//!
//! Memory is durable by definition for this engine: every unit is applied while `submit`
//! runs and its completion is already resolved when `submit` returns.
//!
//! [`MemoryStore::reopen`] builds a new instance over the same state as a restarted process
//! would find it (open transactions without a prepare are rolled back), so the conformance kit
//! exercises recovery on this engine too; [`MemoryHarness`] is that kit's harness.

use std::collections::{BTreeMap, BTreeSet, HashMap};
use std::ops::Bound;
use std::sync::atomic::{AtomicBool, Ordering};
use std::sync::Arc;

use parking_lot::RwLock;

use crate::contract::{
    validate_unit, Completion, MessageStore, Operation, PageKey, QueueKey, Recovered, StoreUsage,
    StoredMessage, SubscriptionInfo, SubscriptionKey, TxnId, TxnState, UnitOfWork,
};
use crate::error::StoreError;
use crate::failpoint::Failpoints;
use crate::kit::StoreHarness;
use crate::message::{Destination, Message, MessageId};

/// Checked before applying each unit; firing fails the whole unit, nothing of it applied.
pub const FAILPOINT_SUBMIT: &str = "memory.submit";
/// Checked before each `read_page` and `count`.
pub const FAILPOINT_READ: &str = "memory.read";
/// Every failpoint the memory engine checks.
pub const FAILPOINTS: &[&str] = &[FAILPOINT_SUBMIT, FAILPOINT_READ];

/// The in-memory [`MessageStore`]. Cheap to share behind an `Arc`; every method takes `&self`.
#[derive(Debug)]
pub struct MemoryStore {
    state: Arc<RwLock<State>>,
    /// The generation of the shared state this instance was opened at; a later
    /// [`MemoryStore::reopen`] makes this instance stale (its "process" is gone).
    generation: u64,
    closed: AtomicBool,
    failpoints: Failpoints,
}

/// One stored body and the number of queue references to it.
#[derive(Debug)]
struct Body {
    message: Arc<Message>,
    references: usize,
}

/// A transactional operation held until its transaction ends.
#[derive(Debug)]
enum TxnOperation {
    Add { message: Arc<Message>, queues: Vec<QueueKey> },
    Ack { queue: QueueKey, key: PageKey },
}

#[derive(Debug, Default)]
struct Transaction {
    operations: Vec<TxnOperation>,
    prepared: bool,
}

/// Everything the store holds; shared by every instance opened over it.
#[derive(Debug)]
struct State {
    bodies: HashMap<MessageId, Body>,
    /// The [`Message::memory_size`] of every body held: the store's usage.
    body_bytes: u64,
    /// Only non-empty queues are kept.
    queues: HashMap<QueueKey, BTreeSet<PageKey>>,
    destinations: BTreeSet<Destination>,
    subscriptions: BTreeMap<SubscriptionKey, SubscriptionInfo>,
    transactions: HashMap<TxnId, Transaction>,
    /// One more than the largest id ever added (1 for a store that never held a message).
    next_message_id: u64,
    /// Bumped by every reopen; instances of older generations behave as closed.
    generation: u64,
}

impl Default for State {
    fn default() -> Self {
        State {
            bodies: HashMap::new(),
            body_bytes: 0,
            queues: HashMap::new(),
            destinations: BTreeSet::new(),
            subscriptions: BTreeMap::new(),
            transactions: HashMap::new(),
            next_message_id: 1,
            generation: 0,
        }
    }
}

impl Default for MemoryStore {
    fn default() -> Self {
        MemoryStore::new()
    }
}

impl MemoryStore {
    /// An empty store with its own (never armed) failpoint registry.
    pub fn new() -> Self {
        MemoryStore::with_failpoints(Failpoints::new())
    }

    /// An empty store that consults `failpoints` before every "I/O" (see [`FAILPOINTS`]).
    pub fn with_failpoints(failpoints: Failpoints) -> Self {
        MemoryStore {
            state: Arc::new(RwLock::new(State::default())),
            generation: 0,
            closed: AtomicBool::new(false),
            failpoints,
        }
    }

    /// A new instance over the same state, as a restarted process would find it: open
    /// transactions without a prepare are rolled back, prepared ones are kept (and reported
    /// by [`MessageStore::recover`]). Every earlier instance behaves as closed from now on.
    pub fn reopen(&self) -> MemoryStore {
        let mut state = self.state.write();
        state.generation += 1;
        state.transactions.retain(|_, transaction| transaction.prepared);
        MemoryStore {
            state: Arc::clone(&self.state),
            generation: state.generation,
            closed: AtomicBool::new(false),
            failpoints: self.failpoints.clone(),
        }
    }

    /// The failpoint registry this store consults.
    pub fn failpoints(&self) -> &Failpoints {
        &self.failpoints
    }

    fn check_open(&self, state: &State) -> Result<(), StoreError> {
        if self.closed.load(Ordering::Acquire) || state.generation != self.generation {
            return Err(StoreError::Closed);
        }
        Ok(())
    }

    fn apply(&self, unit: UnitOfWork) -> Result<(), StoreError> {
        let mut state = self.state.write();
        self.check_open(&state)?;
        self.failpoints.check(FAILPOINT_SUBMIT)?;
        // Validate first, so that an invalid unit applies nothing; applying cannot fail.
        validate_unit(&unit.operations, |txn| state.txn_state(txn))?;
        for operation in unit.operations {
            state.apply(operation);
        }
        Ok(())
    }
}

impl State {
    /// What this state holds for `txn`, for the contract's unit validation.
    fn txn_state(&self, txn: TxnId) -> TxnState {
        match self.transactions.get(&txn) {
            Some(transaction) if transaction.prepared => TxnState::Prepared,
            Some(_) => TxnState::Open,
            None => TxnState::Unknown,
        }
    }

    /// Applies one validated operation.
    fn apply(&mut self, operation: Operation) {
        match operation {
            Operation::AddDestination(destination) => {
                self.destinations.insert(destination);
            }
            Operation::RemoveDestination(destination) => {
                let doomed: Vec<QueueKey> = self
                    .queues
                    .keys()
                    .filter(|queue| queue.destination == destination)
                    .cloned()
                    .collect();
                for queue in doomed {
                    self.remove_queue(&queue);
                }
                self.subscriptions.retain(|_, info| info.topic != destination);
                self.destinations.remove(&destination);
            }
            Operation::AddSubscription(info) => {
                self.subscriptions.insert(info.key.clone(), info);
            }
            Operation::RemoveSubscription(key) => {
                let doomed: Vec<QueueKey> = self
                    .queues
                    .keys()
                    .filter(|queue| queue.subscription.as_ref() == Some(&key))
                    .cloned()
                    .collect();
                for queue in doomed {
                    self.remove_queue(&queue);
                }
                self.subscriptions.remove(&key);
            }
            Operation::AddMessage { message, queues, txn } => {
                self.next_message_id = self.next_message_id.max(message.id.0.saturating_add(1));
                match txn {
                    Some(txn) => self
                        .transactions
                        .entry(txn)
                        .or_default()
                        .operations
                        .push(TxnOperation::Add { message, queues }),
                    None => self.add_references(&message, &queues),
                }
            }
            Operation::Ack { queue, key, txn } => match txn {
                Some(txn) => self
                    .transactions
                    .entry(txn)
                    .or_default()
                    .operations
                    .push(TxnOperation::Ack { queue, key }),
                None => self.remove_reference(&queue, key),
            },
            Operation::Prepare(txn) => {
                if let Some(transaction) = self.transactions.get_mut(&txn) {
                    transaction.prepared = true;
                }
            }
            Operation::Commit(txn) => {
                for operation in
                    self.transactions.remove(&txn).map(|t| t.operations).unwrap_or_default()
                {
                    match operation {
                        TxnOperation::Add { message, queues } => {
                            self.add_references(&message, &queues)
                        }
                        TxnOperation::Ack { queue, key } => self.remove_reference(&queue, key),
                    }
                }
            }
            Operation::Rollback(txn) => {
                self.transactions.remove(&txn);
            }
        }
    }

    fn add_references(&mut self, message: &Arc<Message>, queues: &[QueueKey]) {
        for queue in queues {
            let body = self.bodies.entry(message.id).or_insert_with(|| {
                self.body_bytes += message.memory_size() as u64;
                Body { message: Arc::clone(message), references: 0 }
            });
            // The body stored first wins, so every queue files the id under one PageKey.
            let key = PageKey::of(&body.message);
            if self.queues.entry(queue.clone()).or_default().insert(key) {
                body.references += 1;
            }
        }
        if self.bodies.get(&message.id).is_some_and(|body| body.references == 0) {
            self.remove_body(message.id);
        }
    }

    /// Removes the reference filed under `key`; a key the queue does not hold (another
    /// priority included) changes nothing.
    fn remove_reference(&mut self, queue: &QueueKey, key: PageKey) {
        let Some(references) = self.queues.get_mut(queue) else {
            return;
        };
        if references.remove(&key) {
            if references.is_empty() {
                self.queues.remove(queue);
            }
            self.release_body(key.id);
        }
    }

    fn remove_queue(&mut self, queue: &QueueKey) {
        if let Some(references) = self.queues.remove(queue) {
            for key in references {
                self.release_body(key.id);
            }
        }
    }

    fn release_body(&mut self, id: MessageId) {
        if let Some(body) = self.bodies.get_mut(&id) {
            body.references = body.references.saturating_sub(1);
            if body.references == 0 {
                self.remove_body(id);
            }
        }
    }

    fn remove_body(&mut self, id: MessageId) {
        if let Some(body) = self.bodies.remove(&id) {
            self.body_bytes = self.body_bytes.saturating_sub(body.message.memory_size() as u64);
        }
    }
}

impl MessageStore for MemoryStore {
    fn name(&self) -> &'static str {
        "memory"
    }

    fn recover(&self) -> Result<Recovered, StoreError> {
        let state = self.state.read();
        self.check_open(&state)?;
        let mut destinations = state.destinations.clone();
        destinations.extend(state.queues.keys().map(|queue| queue.destination.clone()));
        let mut prepared: Vec<TxnId> =
            state.transactions.iter().filter(|(_, t)| t.prepared).map(|(txn, _)| *txn).collect();
        prepared.sort_unstable();
        Ok(Recovered {
            destinations: destinations.into_iter().collect(),
            subscriptions: state.subscriptions.values().cloned().collect(),
            prepared,
            next_message_id: MessageId(state.next_message_id),
        })
    }

    fn submit(&self, unit: UnitOfWork) -> Completion {
        Completion::ready(self.apply(unit))
    }

    fn read_page(
        &self,
        queue: &QueueKey,
        after: Option<PageKey>,
        limit: usize,
    ) -> Result<Vec<StoredMessage>, StoreError> {
        let state = self.state.read();
        self.check_open(&state)?;
        self.failpoints.check(FAILPOINT_READ)?;
        let Some(references) = state.queues.get(queue) else {
            return Ok(Vec::new());
        };
        let start = after.map_or(Bound::Unbounded, Bound::Excluded);
        references
            .range((start, Bound::Unbounded))
            .take(limit)
            .map(|key| match state.bodies.get(&key.id) {
                Some(body) => {
                    Ok(StoredMessage { message: Arc::clone(&body.message), redelivered: false })
                }
                None => Err(StoreError::Corrupt {
                    location: format!("memory queue {queue:?}"),
                    reason: format!("reference to message {} without a body", key.id),
                }),
            })
            .collect()
    }

    fn count(&self, queue: &QueueKey) -> Result<u64, StoreError> {
        let state = self.state.read();
        self.check_open(&state)?;
        self.failpoints.check(FAILPOINT_READ)?;
        Ok(state.queues.get(queue).map_or(0, |references| references.len() as u64))
    }

    fn usage(&self) -> StoreUsage {
        StoreUsage { used_bytes: self.state.read().body_bytes, limit_bytes: 0 }
    }

    fn close(&self) -> Result<(), StoreError> {
        self.closed.store(true, Ordering::Release);
        Ok(())
    }
}

/// The conformance kit's harness for [`MemoryStore`]: each [`StoreHarness::open`] after the
/// first is a [`MemoryStore::reopen`] of the same state.
#[derive(Debug)]
pub struct MemoryHarness {
    store: MemoryStore,
}

impl MemoryHarness {
    pub fn new() -> Self {
        MemoryHarness { store: MemoryStore::new() }
    }
}

impl Default for MemoryHarness {
    fn default() -> Self {
        MemoryHarness::new()
    }
}

impl StoreHarness for MemoryHarness {
    fn open(&mut self) -> Result<Arc<dyn MessageStore>, StoreError> {
        Ok(Arc::new(self.store.reopen()))
    }

    fn failpoints(&self) -> Failpoints {
        self.store.failpoints().clone()
    }

    fn failpoint_names(&self) -> &'static [&'static str] {
        FAILPOINTS
    }
}

#[cfg(test)]
mod tests {
    use super::*;
    use crate::kit::block_on;

    crate::conformance_tests!(MemoryHarness::new());

    fn queue(name: &str) -> QueueKey {
        QueueKey::destination(Destination::queue(name))
    }

    fn add(id: u64, queues: &[QueueKey]) -> Operation {
        let message = Message::new(MessageId(id), format!("ID:test:{id}"), Destination::queue("Q"));
        Operation::AddMessage { message: Arc::new(message), queues: queues.to_vec(), txn: None }
    }

    #[test]
    fn submit_completes_immediately() {
        let store = MemoryStore::new();
        let completion = store.submit(UnitOfWork::with(add(1, &[queue("Q")])));
        assert!(completion.is_ready());
        block_on(completion).expect("memory submit succeeds");
    }

    #[test]
    fn body_is_shared_and_freed_at_the_last_ack() {
        let store = MemoryStore::new();
        let (a, b) = (queue("A"), queue("B"));
        block_on(store.submit(UnitOfWork::with(add(7, &[a.clone(), b.clone()])))).expect("add");
        let from_a = store.read_page(&a, None, 10).expect("read A");
        let from_b = store.read_page(&b, None, 10).expect("read B");
        assert!(Arc::ptr_eq(&from_a[0].message, &from_b[0].message), "one body, two references");
        assert_eq!(store.state.read().bodies[&MessageId(7)].references, 2);
        let key = PageKey::of(&from_a[0].message);
        let ack = |q: &QueueKey| Operation::Ack { queue: q.clone(), key, txn: None };
        block_on(store.submit(UnitOfWork::with(ack(&a)))).expect("ack A");
        assert_eq!(store.state.read().bodies[&MessageId(7)].references, 1);
        block_on(store.submit(UnitOfWork::with(ack(&b)))).expect("ack B");
        let state = store.state.read();
        assert!(state.bodies.is_empty(), "body freed after the last ack");
        assert!(state.queues.is_empty(), "empty queues are not kept");
    }

    #[test]
    fn duplicate_reference_is_counted_once() {
        let store = MemoryStore::new();
        let a = queue("A");
        block_on(store.submit(UnitOfWork::with(add(3, &[a.clone(), a.clone()])))).expect("add");
        assert_eq!(store.count(&a).expect("count"), 1);
        assert_eq!(store.state.read().bodies[&MessageId(3)].references, 1);
    }

    #[test]
    fn stale_instance_behaves_as_closed_after_reopen() {
        let store = MemoryStore::new();
        let reopened = store.reopen();
        assert!(matches!(block_on(store.submit(UnitOfWork::new())), Err(StoreError::Closed)));
        assert!(matches!(store.count(&queue("Q")), Err(StoreError::Closed)));
        block_on(reopened.submit(UnitOfWork::new())).expect("the new instance works");
    }
}
