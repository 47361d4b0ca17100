//! The store contract: what every persistence engine offers the broker.
//!
//! The broker hands the store [`UnitOfWork`]s and gets a [`Completion`] back at once; the
//! completion resolves when the unit is durable per the store's [`SyncPolicy`]. Units are
//! applied in the order they were submitted, so an ack submitted after the add of the same
//! message always finds it. Reads ([`MessageStore::read_page`]) see every unit whose submit
//! call has returned, durable or not.
//!
//! Addressing: a store keeps *queues of references*. A queue is named by a [`QueueKey`]: a
//! destination, plus a subscription for a durable topic subscription (which is a stored cursor
//! over its topic, kept as its own queue of references). A message body is stored once, by
//! [`MessageId`], and referenced from each queue that holds it; the body is dropped when the
//! last reference is acked.

use std::future::Future;
use std::pin::Pin;
use std::sync::Arc;
use std::task::{Context, Poll};
use std::time::Duration;

use tokio::sync::oneshot;

use crate::backlog::Backlog;
use crate::error::StoreError;
use crate::message::{Destination, Message, MessageId};

/// A durable topic subscription's identity: JMS client id plus subscription name.
#[derive(Debug, Clone, PartialEq, Eq, PartialOrd, Ord, Hash)]
pub struct SubscriptionKey {
    pub client_id: Arc<str>,
    pub name: Arc<str>,
}

/// The name of one stored queue of message references: a queue destination, or a durable
/// subscription on a topic.
#[derive(Debug, Clone, PartialEq, Eq, PartialOrd, Ord, Hash)]
pub struct QueueKey {
    pub destination: Destination,
    pub subscription: Option<SubscriptionKey>,
}

impl QueueKey {
    pub fn destination(destination: Destination) -> Self {
        QueueKey { destination, subscription: None }
    }

    /// The queue of the durable subscription `key` on `topic`.
    pub fn durable(topic: Destination, key: SubscriptionKey) -> Self {
        QueueKey { destination: topic, subscription: Some(key) }
    }
}

/// A stored durable subscription, as recovery reports it.
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct SubscriptionInfo {
    pub key: SubscriptionKey,
    /// The topic (or wildcard topic) subscribed to.
    pub topic: Destination,
    /// The JMS selector, if any.
    pub selector: Option<Arc<str>>,
    pub no_local: bool,
}

impl SubscriptionInfo {
    /// The queue this subscription's references are filed under: its topic, with its key.
    pub fn queue(&self) -> QueueKey {
        QueueKey::durable(self.topic.clone(), self.key.clone())
    }
}

/// A transaction identifier, chosen by the broker, unique among the store's open transactions.
#[derive(Debug, Clone, Copy, PartialEq, Eq, PartialOrd, Ord, Hash)]
pub struct TxnId(pub u64);

/// The order of references inside a queue: higher priority first, then increasing message id
/// (the broker assigns ids in acceptance order). [`MessageStore::read_page`] resumes strictly
/// after a `PageKey`.
#[derive(Debug, Clone, Copy, PartialEq, Eq, Hash)]
pub struct PageKey {
    pub priority: u8,
    pub id: MessageId,
}

impl PageKey {
    pub fn of(message: &Message) -> Self {
        PageKey { priority: message.priority(), id: message.id }
    }
}

impl Ord for PageKey {
    fn cmp(&self, other: &Self) -> std::cmp::Ordering {
        other.priority.cmp(&self.priority).then(self.id.cmp(&other.id))
    }
}

impl PartialOrd for PageKey {
    fn partial_cmp(&self, other: &Self) -> Option<std::cmp::Ordering> {
        Some(self.cmp(other))
    }
}

/// One change inside a unit of work.
#[derive(Debug, Clone)]
pub enum Operation {
    /// Declares a destination so that recovery reports it even while empty.
    AddDestination(Destination),
    /// Removes a destination, every queue under it (its durable subscriptions included) and
    /// their references.
    RemoveDestination(Destination),
    /// Declares a durable subscription; its queue starts empty. Declaring a key that exists
    /// replaces its info and keeps its queue.
    AddSubscription(SubscriptionInfo),
    /// Removes a durable subscription and the references its queue held (its queue is the
    /// [`QueueKey`] with this subscription, under whichever destination).
    RemoveSubscription(SubscriptionKey),
    /// Stores `message` once and adds a reference to it in each of `queues`. Inside a
    /// transaction the references become visible to reads only when the transaction commits.
    AddMessage { message: Arc<Message>, queues: Vec<QueueKey>, txn: Option<TxnId> },
    /// Removes the reference filed under `key` (the message's [`PageKey::of`]: its priority
    /// and id) from `queue` (an acknowledgement); engines that index references by (queue,
    /// priority, id) remove it without looking the message up. Inside a transaction the
    /// reference stays until the transaction commits. Acking a key that is not there (the
    /// message may have been removed with its destination, or the key names another priority)
    /// is not an error and changes nothing.
    Ack { queue: QueueKey, key: PageKey, txn: Option<TxnId> },
    /// The transaction's operations are all written; after recovery it is reported as
    /// prepared (XA) instead of being rolled back. A prepared transaction takes no more
    /// operations and no second prepare ([`StoreError::Invalid`]).
    Prepare(TxnId),
    /// Applies every operation of the transaction atomically.
    ///
    /// A transaction begins with its first tagged operation (there is no begin record), so
    /// prepare, commit or rollback of a transaction the store does not have (no operation
    /// ever tagged with it, already ended, or rolled back by recovery) is
    /// [`StoreError::Invalid`].
    Commit(TxnId),
    /// Discards every operation of the transaction.
    Rollback(TxnId),
}

/// Operations the store applies in order, made durable together.
#[derive(Debug, Clone, Default)]
pub struct UnitOfWork {
    pub operations: Vec<Operation>,
    /// Nobody waits for this unit to be durable: an acknowledgement the client does not ask
    /// to have confirmed, which ActiveMQ's journal writes without a sync too. A store may
    /// complete it once written and make it durable with the next unit that needs a sync
    /// (an append-only log syncs what came before), or within [`LAZY_SYNC_WITHIN`]; a crash
    /// before then may bring its acknowledged messages back, redelivered, never lose any.
    /// Stores that sync every unit anyway may ignore it.
    pub lazy: bool,
}

/// How long a lazily durable unit ([`UnitOfWork::lazy`]) waits at most for a sync.
pub const LAZY_SYNC_WITHIN: Duration = Duration::from_millis(200);

impl UnitOfWork {
    pub fn new() -> Self {
        UnitOfWork::default()
    }

    pub fn with(operation: Operation) -> Self {
        UnitOfWork { operations: vec![operation], lazy: false }
    }

    /// These operations, as one unit nobody waits to see durable ([`UnitOfWork::lazy`]).
    pub fn lazy(operations: Vec<Operation>) -> Self {
        UnitOfWork { operations, lazy: true }
    }

    pub fn push(&mut self, operation: Operation) -> &mut Self {
        self.operations.push(operation);
        self
    }

    pub fn is_empty(&self) -> bool {
        self.operations.is_empty()
    }
}

/// When a unit counts as durable.
#[derive(Debug, Clone, Copy, PartialEq, Eq, Default)]
pub enum SyncPolicy {
    /// Synced to stable storage before its completion resolves (the default).
    #[default]
    Always,
    /// Synced at least this often; the completion resolves once written to the OS.
    Periodic(Duration),
    /// Never synced explicitly; the completion resolves once written to the OS.
    Never,
}

/// Resolves when a submitted unit is durable per the sync policy, or failed.
///
/// Dropping a completion does not cancel the unit: the store applies it regardless.
#[must_use = "a completion says whether the unit became durable"]
pub struct Completion {
    state: CompletionState,
}

enum CompletionState {
    Ready(Option<Result<(), StoreError>>),
    Pending(oneshot::Receiver<Result<(), StoreError>>),
}

/// The store side of a [`Completion`]: resolve it once the unit is durable.
#[derive(Debug)]
pub struct Completer(oneshot::Sender<Result<(), StoreError>>);

impl Completer {
    pub fn complete(self, result: Result<(), StoreError>) {
        // The broker may have stopped waiting; the unit's fate does not depend on that.
        let _ = self.0.send(result);
    }
}

impl Completion {
    /// A completion that resolves later, through the returned [`Completer`].
    pub fn pending() -> (Completer, Completion) {
        let (tx, rx) = oneshot::channel();
        (Completer(tx), Completion { state: CompletionState::Pending(rx) })
    }

    /// A completion that is already resolved.
    pub fn ready(result: Result<(), StoreError>) -> Self {
        Completion { state: CompletionState::Ready(Some(result)) }
    }

    /// True if the completion has already resolved (without consuming its result).
    pub fn is_ready(&self) -> bool {
        matches!(self.state, CompletionState::Ready(_))
    }
}

impl Future for Completion {
    type Output = Result<(), StoreError>;

    fn poll(mut self: Pin<&mut Self>, cx: &mut Context<'_>) -> Poll<Self::Output> {
        match &mut self.state {
            CompletionState::Ready(result) => {
                Poll::Ready(result.take().unwrap_or(Err(StoreError::Closed)))
            }
            CompletionState::Pending(rx) => match Pin::new(rx).poll(cx) {
                Poll::Ready(Ok(result)) => Poll::Ready(result),
                // The store dropped the completer without resolving it: it shut down.
                Poll::Ready(Err(_)) => Poll::Ready(Err(StoreError::Closed)),
                Poll::Pending => Poll::Pending,
            },
        }
    }
}

impl std::fmt::Debug for Completion {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        f.debug_struct("Completion").field("ready", &self.is_ready()).finish()
    }
}

/// What a store holds at start, before the broker serves anything.
#[derive(Debug, Clone, Default)]
pub struct Recovered {
    /// Every declared destination (and every destination holding references).
    pub destinations: Vec<Destination>,
    /// Every durable subscription.
    pub subscriptions: Vec<SubscriptionInfo>,
    /// Transactions that were prepared but neither committed nor rolled back. Transactions
    /// in flight without a prepare record were rolled back by recovery.
    pub prepared: Vec<TxnId>,
    /// The smallest message id greater than every id the store has ever held (even ids
    /// acked since), and at least 1; the broker assigns new ids from here so that ids stay
    /// unique and increasing.
    pub next_message_id: MessageId,
}

/// One reference read back from a queue.
#[derive(Debug, Clone)]
pub struct StoredMessage {
    pub message: Arc<Message>,
    /// The message may have been dispatched before the broker stopped without a clean
    /// shutdown: deliver it marked redelivered (JMS allows false positives, never false
    /// negatives). Always false after a clean close.
    pub redelivered: bool,
}

/// How much room a store takes, as [`MessageStore::usage`] reports it.
#[derive(Debug, Clone, Copy, PartialEq, Eq, Default)]
pub struct StoreUsage {
    /// Bytes in use: for the journal, the bytes of records in its data files (and those
    /// queued for its writer); for the memory store, the bytes of the message bodies it holds.
    pub used_bytes: u64,
    /// The most it may use (the journal's `max_size`); 0 when there is no limit.
    pub limit_bytes: u64,
}

/// The persistence contract. Object-safe: the broker holds an `Arc<dyn MessageStore>` chosen
/// at run time.
pub trait MessageStore: Send + Sync + 'static {
    /// A short name for logs and benchmark tables (`"memory"`, `"journal"`, ...).
    fn name(&self) -> &'static str;

    /// Reads what the store holds: destinations, subscriptions, prepared transactions and the
    /// next message id. Called once at start, before any submit.
    fn recover(&self) -> Result<Recovered, StoreError>;

    /// Queues `unit` for writing and returns at once. Units are applied in submission order;
    /// the completion resolves when the unit is durable per the sync policy.
    ///
    /// A unit is all or nothing: when its completion fails, nothing of it was applied, except
    /// that after a failed sync recovery may still find the whole unit (never a part of it).
    fn submit(&self, unit: UnitOfWork) -> Completion;

    /// Up to `limit` messages referenced by `queue`, in [`PageKey`] order (priority, then id),
    /// strictly after `after` (from the start when `None`). Transactional references appear
    /// only once committed.
    fn read_page(
        &self,
        queue: &QueueKey,
        after: Option<PageKey>,
        limit: usize,
    ) -> Result<Vec<StoredMessage>, StoreError>;

    /// Number of references `queue` holds (committed ones).
    fn count(&self, queue: &QueueKey) -> Result<u64, StoreError>;

    /// How much room the store takes, for the broker's statistics; cheap (no I/O, no scan).
    /// The default knows nothing (zeros): every engine reports its own, wrappers need not.
    fn usage(&self) -> StoreUsage {
        StoreUsage::default()
    }

    /// The bytes this store has accepted and not yet written, for engines that write in the
    /// background: the broker's send path waits while it is full, so that producers faster
    /// than the disk are paced instead of filling memory. `None` (the default): units are
    /// applied as they are submitted and nothing accumulates.
    fn backlog(&self) -> Option<&Backlog> {
        None
    }

    /// Finishes every submitted unit, makes it durable and releases the store's resources.
    /// Later submits fail with [`StoreError::Closed`].
    fn close(&self) -> Result<(), StoreError>;
}

/// What a store holds for a transaction id, as [`validate_unit`] asks it.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub enum TxnState {
    /// No open transaction by that id.
    Unknown,
    /// Open: it takes operations, a prepare, a commit or a rollback.
    Open,
    /// Prepared: only a commit or a rollback.
    Prepared,
}

/// Checks that every operation of a unit can be applied under the contract's transaction
/// rules, following the transactions the unit itself begins and ends: operations of a
/// prepared transaction, a second prepare, and a prepare, commit or rollback of a transaction
/// the store does not have are [`StoreError::Invalid`]. `held` says what the store holds for
/// a transaction before the unit. Every engine validates a unit with this before applying any
/// of it, so that a refused unit applies nothing.
pub fn validate_unit(
    operations: &[Operation],
    held: impl Fn(TxnId) -> TxnState,
) -> Result<(), StoreError> {
    let invalid = |reason: String| StoreError::Invalid { reason };
    let unknown = |verb: &str, txn: TxnId| {
        invalid(format!(
            "cannot {verb} transaction {}: the store has no such open transaction",
            txn.0
        ))
    };
    let mut overlay: std::collections::HashMap<TxnId, TxnState> = Default::default();
    let state = |overlay: &std::collections::HashMap<TxnId, TxnState>, txn: TxnId| {
        overlay.get(&txn).copied().unwrap_or_else(|| held(txn))
    };
    for operation in operations {
        match operation {
            Operation::AddMessage { txn: Some(txn), .. }
            | Operation::Ack { txn: Some(txn), .. } => {
                if state(&overlay, *txn) == TxnState::Prepared {
                    return Err(invalid(format!(
                        "transaction {} is prepared; it takes no more operations",
                        txn.0
                    )));
                }
                overlay.insert(*txn, TxnState::Open);
            }
            Operation::Prepare(txn) => match state(&overlay, *txn) {
                TxnState::Open => {
                    overlay.insert(*txn, TxnState::Prepared);
                }
                TxnState::Prepared => {
                    return Err(invalid(format!("transaction {} is already prepared", txn.0)))
                }
                TxnState::Unknown => return Err(unknown("prepare", *txn)),
            },
            Operation::Commit(txn) | Operation::Rollback(txn) => {
                if state(&overlay, *txn) == TxnState::Unknown {
                    let verb = if matches!(operation, Operation::Commit(_)) {
                        "commit"
                    } else {
                        "roll back"
                    };
                    return Err(unknown(verb, *txn));
                }
                overlay.insert(*txn, TxnState::Unknown);
            }
            _ => {}
        }
    }
    Ok(())
}
