//! [`RecordingStore`]: a [`MemoryStore`] that records every operation submitted to it, so a
//! test can check what the broker stored and how (one `AddMessage` referenced by several
//! queues, transaction tags, commit records).

use std::sync::{Mutex, MutexGuard};

use store::{
    Completion, MemoryStore, MessageStore, Operation, PageKey, QueueKey, Recovered, StoreError,
    StoredMessage, TxnId, UnitOfWork,
};

/// A memory store that keeps a log of the operations it was given, in submission order.
#[derive(Debug, Default)]
pub struct RecordingStore {
    inner: MemoryStore,
    log: Mutex<Vec<Operation>>,
}

/// One `AddMessage` as the log saw it.
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct RecordedAdd {
    /// The message's body, lossily decoded.
    pub body: String,
    pub queues: Vec<QueueKey>,
    pub txn: Option<TxnId>,
}

impl RecordingStore {
    pub fn new() -> RecordingStore {
        RecordingStore::default()
    }

    /// A recording store over `inner`'s state reopened, as after a restart (see
    /// [`MemoryStore::reopen`]); its log starts empty.
    pub fn reopen(&self) -> RecordingStore {
        RecordingStore { inner: self.inner.reopen(), log: Mutex::default() }
    }

    fn log(&self) -> MutexGuard<'_, Vec<Operation>> {
        self.log.lock().unwrap_or_else(|poisoned| poisoned.into_inner())
    }

    /// Every operation submitted so far.
    pub fn operations(&self) -> Vec<Operation> {
        self.log().clone()
    }

    /// Every `AddMessage` submitted so far.
    pub fn adds(&self) -> Vec<RecordedAdd> {
        self.log()
            .iter()
            .filter_map(|operation| match operation {
                Operation::AddMessage { message, queues, txn } => Some(RecordedAdd {
                    body: String::from_utf8_lossy(&message.body).into_owned(),
                    queues: queues.clone(),
                    txn: *txn,
                }),
                _ => None,
            })
            .collect()
    }

    /// The transactions committed so far, in order.
    pub fn commits(&self) -> Vec<TxnId> {
        self.log()
            .iter()
            .filter_map(|operation| match operation {
                Operation::Commit(txn) => Some(*txn),
                _ => None,
            })
            .collect()
    }

    /// The transactions rolled back so far, in order.
    pub fn rollbacks(&self) -> Vec<TxnId> {
        self.log()
            .iter()
            .filter_map(|operation| match operation {
                Operation::Rollback(txn) => Some(*txn),
                _ => None,
            })
            .collect()
    }
}

impl MessageStore for RecordingStore {
    fn name(&self) -> &'static str {
        "recording-memory"
    }

    fn recover(&self) -> Result<Recovered, StoreError> {
        self.inner.recover()
    }

    fn submit(&self, unit: UnitOfWork) -> Completion {
        self.log().extend(unit.operations.iter().cloned());
        self.inner.submit(unit)
    }

    fn read_page(
        &self,
        queue: &QueueKey,
        after: Option<PageKey>,
        limit: usize,
    ) -> Result<Vec<StoredMessage>, StoreError> {
        self.inner.read_page(queue, after, limit)
    }

    fn count(&self, queue: &QueueKey) -> Result<u64, StoreError> {
        self.inner.count(queue)
    }

    fn close(&self) -> Result<(), StoreError> {
        self.inner.close()
    }
}
