//! [`ControlledStore`]: a [`MemoryStore`] whose completions a test controls, to see what the
//! broker does while a write is not yet durable, or when it fails.
//!
//! Every unit is applied to the memory store at once (reads see it, as the contract says);
//! only its completion is held back or replaced, per kind of unit: units containing an
//! `AddMessage` follow [`ControlledStore::set_adds`], units containing an `Ack` follow
//! [`ControlledStore::set_acks`], units containing a `Commit` follow
//! [`ControlledStore::set_commits`], everything else passes. Reads can be made slow
//! ([`ControlledStore::set_read_delay`]): each blocks its thread, as a read from a database
//! that stopped answering does.

use std::sync::{Mutex, MutexGuard};
use std::time::Duration;

use anyhow::Context as _;
use store::{
    Completer, Completion, MemoryStore, MessageStore, Operation, PageKey, QueueKey, Recovered,
    StoreError, StoredMessage, UnitOfWork,
};
use tokio::sync::watch;

/// What happens to the completion of a kind of unit.
#[derive(Debug, Clone, Copy, PartialEq, Eq, Default)]
pub enum Policy {
    /// Completes as the memory store does (at once).
    #[default]
    Pass,
    /// Applied, but its completion waits for [`ControlledStore::release`].
    Hold,
    /// Not applied; the completion is an error at once.
    Fail,
}

/// A memory store with controllable completions. Share it as an `Arc` between the broker
/// and the test.
#[derive(Debug)]
pub struct ControlledStore {
    inner: MemoryStore,
    state: Mutex<State>,
    /// The number of completions currently held back.
    held_count: watch::Sender<usize>,
    /// The number of `read_page` calls under way.
    reading: watch::Sender<usize>,
}

#[derive(Debug, Default)]
struct State {
    adds: Policy,
    acks: Policy,
    commits: Policy,
    held: Vec<(Completer, Completion)>,
    read_delay: Duration,
}

impl Default for ControlledStore {
    fn default() -> Self {
        ControlledStore::new()
    }
}

impl ControlledStore {
    /// An empty store where every unit passes.
    pub fn new() -> ControlledStore {
        ControlledStore {
            inner: MemoryStore::new(),
            state: Mutex::new(State::default()),
            held_count: watch::channel(0).0,
            reading: watch::channel(0).0,
        }
    }

    fn state(&self) -> MutexGuard<'_, State> {
        // A test that panicked while holding the lock has failed already; keep going.
        self.state.lock().unwrap_or_else(|poisoned| poisoned.into_inner())
    }

    /// Sets the policy for units that add messages.
    pub fn set_adds(&self, policy: Policy) {
        self.state().adds = policy;
    }

    /// Sets the policy for units that commit a transaction.
    pub fn set_commits(&self, policy: Policy) {
        self.state().commits = policy;
    }

    /// Sets the policy for units that acknowledge messages.
    pub fn set_acks(&self, policy: Policy) {
        self.state().acks = policy;
    }

    /// Makes every `read_page` block its thread for `delay` before it reads.
    pub fn set_read_delay(&self, delay: Duration) {
        self.state().read_delay = delay;
    }

    /// Waits until at least `count` reads are under way (blocked by the read delay), at most
    /// `limit`.
    pub async fn wait_reading(&self, count: usize, limit: Duration) -> anyhow::Result<()> {
        let mut reading = self.reading.subscribe();
        tokio::time::timeout(limit, reading.wait_for(|reading| *reading >= count))
            .await
            .with_context(|| {
                format!(
                    "expected {count} store reads under way within {limit:?}, have {}",
                    *self.reading.borrow()
                )
            })?
            .context("the store is gone")?;
        Ok(())
    }

    /// How many completions are held back right now.
    pub fn held(&self) -> usize {
        *self.held_count.borrow()
    }

    /// Waits until at least `count` completions are held back, at most `limit`.
    pub async fn wait_held(&self, count: usize, limit: Duration) -> anyhow::Result<()> {
        let mut held = self.held_count.subscribe();
        tokio::time::timeout(limit, held.wait_for(|held| *held >= count))
            .await
            .with_context(|| {
                format!(
                    "expected {count} held store completions within {limit:?}, have {}",
                    self.held()
                )
            })?
            .context("the store is gone")?;
        Ok(())
    }

    /// Completes every held unit with the memory store's result, in submission order.
    pub async fn release(&self) {
        let held = std::mem::take(&mut self.state().held);
        self.held_count.send_replace(0);
        for (completer, completion) in held {
            completer.complete(completion.await);
        }
    }

    /// The policy `unit` falls under.
    fn policy_for(&self, unit: &UnitOfWork) -> Policy {
        let state = self.state();
        let mut policy = Policy::Pass;
        for operation in &unit.operations {
            let this = match operation {
                Operation::AddMessage { .. } => state.adds,
                Operation::Ack { .. } => state.acks,
                Operation::Commit(_) => state.commits,
                _ => Policy::Pass,
            };
            policy = match (policy, this) {
                (Policy::Fail, _) | (_, Policy::Fail) => Policy::Fail,
                (Policy::Hold, _) | (_, Policy::Hold) => Policy::Hold,
                _ => Policy::Pass,
            };
        }
        policy
    }
}

impl MessageStore for ControlledStore {
    fn name(&self) -> &'static str {
        "controlled-memory"
    }

    fn recover(&self) -> Result<Recovered, StoreError> {
        self.inner.recover()
    }

    fn submit(&self, unit: UnitOfWork) -> Completion {
        match self.policy_for(&unit) {
            Policy::Pass => self.inner.submit(unit),
            Policy::Fail => {
                Completion::ready(Err(StoreError::Injected { name: "tests.controlled_store" }))
            }
            Policy::Hold => {
                let applied = self.inner.submit(unit);
                let (completer, completion) = Completion::pending();
                let mut state = self.state();
                state.held.push((completer, applied));
                self.held_count.send_replace(state.held.len());
                completion
            }
        }
    }

    fn read_page(
        &self,
        queue: &QueueKey,
        after: Option<PageKey>,
        limit: usize,
    ) -> Result<Vec<StoredMessage>, StoreError> {
        let delay = self.state().read_delay;
        if !delay.is_zero() {
            self.reading.send_modify(|reading| *reading += 1);
            std::thread::sleep(delay);
            self.reading.send_modify(|reading| *reading -= 1);
        }
        self.inner.read_page(queue, after, limit)
    }

    fn count(&self, queue: &QueueKey) -> Result<u64, StoreError> {
        self.inner.count(queue)
    }

    fn close(&self) -> Result<(), StoreError> {
        self.inner.close()
    }
}
