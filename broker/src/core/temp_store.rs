//! The temporary store: where queues spill non-persistent messages beyond their memory limit
//! (ActiveMQ's `tmp_storage` and its systemUsage `tempUsage`).
//!
//! It is a second [`MessageStore`] beside the broker's own, kept apart because nothing in it
//! may survive a restart (non-persistent messages are lost when the broker stops, as JMS
//! says) and because it must never cost the persistent store a sync. The broker gives it an
//! opener (a journal under `<data_dir>/tmp_storage` without syncs, see `embedded.rs`); it is
//! opened on first use, so a broker that never spills creates nothing on disk.
//!
//! Each queue task that spills files its messages under a queue key of its own
//! ([`TempStore::spool_key`]): the destination with a subscription named after a number
//! unique to the task. A task that stops removes its references with one
//! `RemoveSubscription`, which cannot touch a later task of the same destination (a queue
//! removed as inactive and created again) nor another subscription of a topic.

use std::sync::atomic::{AtomicU64, Ordering};
use std::sync::{Arc, OnceLock};

use parking_lot::Mutex;
use store::{MessageStore, QueueKey, StoreError, StoreUsage, SubscriptionKey};

/// Opens the temporary store's engine (wiping what an earlier run left).
pub type TempStoreOpener =
    Box<dyn Fn() -> Result<Arc<dyn MessageStore>, StoreError> + Send + Sync + 'static>;

/// The client id of every spool key: no durable subscription of a client can have it, since
/// the temporary store holds nothing else.
const SPOOL_CLIENT: &str = "ferromq.spool";

/// The broker's temporary store, opened lazily.
pub struct TempStore {
    opener: TempStoreOpener,
    store: OnceLock<Arc<dyn MessageStore>>,
    /// Held while opening; true once an open failed (logged once, not retried: a queue keeps
    /// its non-persistent messages in memory then, as without a temporary store).
    open_failed: Mutex<bool>,
    /// The most bytes it may use (`[broker] temp_limit`; 0: no limit).
    limit: u64,
    next_spool: AtomicU64,
}

impl std::fmt::Debug for TempStore {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        f.debug_struct("TempStore")
            .field("opened", &self.store.get().is_some())
            .field("limit", &self.limit)
            .finish()
    }
}

impl TempStore {
    /// A temporary store of at most `limit` bytes that `opener` opens on first use.
    pub fn new(limit: u64, opener: TempStoreOpener) -> Self {
        TempStore {
            opener,
            store: OnceLock::new(),
            open_failed: Mutex::new(false),
            limit,
            next_spool: AtomicU64::new(1),
        }
    }

    /// The store, opened now if it was not yet; `None` if it cannot be opened.
    pub(crate) fn store(&self) -> Option<&Arc<dyn MessageStore>> {
        if let Some(store) = self.store.get() {
            return Some(store);
        }
        let mut failed = self.open_failed.lock();
        if *failed {
            return None;
        }
        if let Some(store) = self.store.get() {
            return Some(store);
        }
        match (self.opener)() {
            Ok(store) => {
                tracing::info!(limit = self.limit, "temporary store opened");
                Some(self.store.get_or_init(|| store))
            }
            Err(error) => {
                tracing::error!(%error,
                    "cannot open the temporary store: non-persistent messages stay in memory");
                *failed = true;
                None
            }
        }
    }

    /// The store if it was opened (never opens it).
    pub(crate) fn opened(&self) -> Option<&Arc<dyn MessageStore>> {
        self.store.get()
    }

    /// Bytes used (0 until opened) and the limit.
    pub fn usage(&self) -> StoreUsage {
        let used_bytes = self.opened().map_or(0, |store| store.usage().used_bytes);
        StoreUsage { used_bytes, limit_bytes: self.limit }
    }

    /// A queue key for one queue task's spilled messages (see the module documentation).
    pub(crate) fn spool_key(&self, queue: &QueueKey) -> QueueKey {
        let number = self.next_spool.fetch_add(1, Ordering::Relaxed);
        QueueKey::durable(
            queue.destination.clone(),
            SubscriptionKey { client_id: SPOOL_CLIENT.into(), name: number.to_string().into() },
        )
    }

    /// Closes the store if it was opened (at broker shutdown).
    pub fn close(&self) -> Result<(), StoreError> {
        match self.opened() {
            Some(store) => store.close(),
            None => Ok(()),
        }
    }
}
