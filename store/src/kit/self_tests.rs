//! The kit checked against an engine that fails the way a journal does: a failed sync after
//! the write reached the "disk" (the unit is applied yet reported failed), then poisoned
//! until reopened. The kit must accept that behaviour, not only the memory engine's.

use std::sync::atomic::{AtomicBool, Ordering};

use super::*;
use crate::contract::{Completion, StoredMessage};
use crate::memory::MemoryStore;

const SYNC: &str = "poisoning.sync";

struct PoisoningStore {
    inner: MemoryStore,
    failpoints: Failpoints,
    poisoned: AtomicBool,
}

impl MessageStore for PoisoningStore {
    fn name(&self) -> &'static str {
        "poisoning"
    }

    fn recover(&self) -> Result<Recovered, StoreError> {
        self.inner.recover()
    }

    fn submit(&self, unit: UnitOfWork) -> Completion {
        if self.poisoned.load(Ordering::Acquire) {
            return Completion::ready(Err(StoreError::Poisoned { reason: "sync failed".into() }));
        }
        let written = block_on(self.inner.submit(unit));
        if written.is_ok() {
            if let Err(e) = self.failpoints.check(SYNC) {
                self.poisoned.store(true, Ordering::Release);
                return Completion::ready(Err(e));
            }
        }
        Completion::ready(written)
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

struct PoisoningHarness {
    store: MemoryStore,
    failpoints: Failpoints,
}

impl PoisoningHarness {
    fn new() -> Self {
        PoisoningHarness { store: MemoryStore::new(), failpoints: Failpoints::new() }
    }
}

impl StoreHarness for PoisoningHarness {
    fn open(&mut self) -> Result<Arc<dyn MessageStore>, StoreError> {
        Ok(Arc::new(PoisoningStore {
            inner: self.store.reopen(),
            failpoints: self.failpoints.clone(),
            poisoned: AtomicBool::new(false),
        }))
    }

    fn failpoints(&self) -> Failpoints {
        self.failpoints.clone()
    }

    fn failpoint_names(&self) -> &'static [&'static str] {
        &[SYNC]
    }
}

crate::conformance_tests!(PoisoningHarness::new());
