//! The conformance kit: one suite of tests, generic over the [`MessageStore`] contract, that
//! every store engine runs as it stands (the idea of nats-server's tests over every store).
//!
//! An engine provides a [`StoreHarness`] (how to open its store at one location, again and
//! again, to simulate restarts, and which failpoints it checks), then expands
//! [`conformance_tests!`](crate::conformance_tests) in its tests:
//!
//! ```ignore
//! #[cfg(test)]
//! mod conformance {
//!     store::conformance_tests!(crate::JournalHarness::new());
//! }
//! ```
//!
//! which generates one `#[test]` per case. Each case is also a plain function here,
//! `case(h: &mut dyn StoreHarness)`, so that an engine can run one under a debugger.
//!
//! The cases block on completions with [`block_on`], a small executor that panics when a
//! completion does not resolve within [`COMPLETION_TIMEOUT`]: stores resolve completions
//! from their own threads, so no runtime is needed.
//!
//! Layout: this file holds the harness trait, the macro and helpers; the cases live in
//! `cases_basic` (adds, reads, acks, destinations, restarts), `cases_txn` (transactions) and
//! `cases_failure` (closing and failpoints). Every case function is re-exported here.
//! Beside the cases: [`units`] (building blocks for an engine's own tests) and [`crash`]
//! (the crash and power-loss harness every engine's crash tests run).

use std::future::Future;
use std::sync::Arc;
use std::task::{Context, Poll, Wake, Waker};
use std::thread::{self, Thread};
use std::time::{Duration, Instant};

use bytes::Bytes;

use crate::contract::{MessageStore, Operation, PageKey, QueueKey, Recovered, TxnId, UnitOfWork};
use crate::error::StoreError;
use crate::failpoint::Failpoints;
use crate::message::{Destination, Message, MessageId};

mod cases_basic;
mod cases_failure;
mod cases_txn;
pub mod crash;
mod ports;
#[cfg(test)]
mod self_tests;
pub mod units;

pub use cases_basic::*;
pub use cases_failure::*;
pub use cases_txn::*;
pub use ports::{listening_addrs, loopback_port};

/// How a store engine is opened by the kit.
pub trait StoreHarness {
    /// Opens the store at this harness's location; called again after a close (or a drop) to
    /// simulate a restart.
    fn open(&mut self) -> Result<Arc<dyn MessageStore>, StoreError>;
    /// The failpoints registry shared with every store this harness opens.
    fn failpoints(&self) -> Failpoints;
    /// Every failpoint name the engine checks (each is exercised by the kit).
    fn failpoint_names(&self) -> &'static [&'static str];
}

/// Expands to one `#[test]` per conformance case, each building a fresh harness with `$make`
/// (an expression of a type implementing [`StoreHarness`](crate::kit::StoreHarness)).
#[macro_export]
macro_rules! conformance_tests {
    ($make:expr) => {
        $crate::conformance_tests!(@cases $make;
            empty_store_recovers_empty,
            add_then_read_in_priority_then_id_order,
            read_page_pages_with_after_and_limit,
            ack_removes_reference,
            ack_with_the_key_of_the_reference_removes_it_at_any_priority,
            ack_of_unknown_reference_is_harmless,
            body_stored_once_freed_after_last_ack,
            destinations_and_subscriptions_recovered,
            redeclared_subscription_keeps_its_queue,
            remove_destination_drops_references,
            remove_subscription_drops_its_references,
            units_apply_in_submission_order,
            reads_see_units_before_they_complete,
            lazy_units_apply_in_order_and_survive_reopen,
            completions_all_resolve,
            large_message_round_trips,
            next_message_id_exceeds_every_id_ever_added,
            data_survives_repeated_reopen,
            failed_unit_applies_nothing,
            txn_adds_invisible_until_commit,
            txn_acks_take_effect_at_commit,
            txn_rollback_discards_adds_and_acks,
            interleaved_transactions,
            unknown_txn_is_invalid,
            txn_operations_after_prepare_are_invalid,
            open_txn_rolled_back_on_reopen,
            prepared_txn_survives_reopen_and_commits,
            close_then_submit_is_closed,
            close_finishes_submitted_units,
            every_failpoint_fails_cleanly_once,
            every_failpoint_fails_cleanly_always,
        );
    };
    (@cases $make:expr; $($case:ident),* $(,)?) => {
        $(
            #[test]
            fn $case() {
                let mut harness = $make;
                $crate::kit::$case(&mut harness);
            }
        )*
    };
}

/// How long [`block_on`] waits for a completion before failing the test.
pub const COMPLETION_TIMEOUT: Duration = Duration::from_secs(60);

struct ThreadWaker(Thread);

impl Wake for ThreadWaker {
    fn wake(self: Arc<Self>) {
        self.0.unpark();
    }

    fn wake_by_ref(self: &Arc<Self>) {
        self.0.unpark();
    }
}

/// Runs `future` to completion on this thread (parking between polls). Panics if it is not
/// done within [`COMPLETION_TIMEOUT`]: in the kit, a completion that never resolves is a bug.
/// For tests only; the broker awaits completions on its runtime.
pub fn block_on<F: Future>(future: F) -> F::Output {
    let mut future = std::pin::pin!(future);
    let waker = Waker::from(Arc::new(ThreadWaker(thread::current())));
    let mut cx = Context::from_waker(&waker);
    let deadline = Instant::now() + COMPLETION_TIMEOUT;
    loop {
        if let Poll::Ready(output) = future.as_mut().poll(&mut cx) {
            return output;
        }
        let now = Instant::now();
        assert!(now < deadline, "a completion did not resolve within {COMPLETION_TIMEOUT:?}");
        thread::park_timeout(deadline - now);
    }
}

// ----- helpers shared by the cases -----

/// A store opened and recovered.
pub(crate) struct Opened {
    pub store: Arc<dyn MessageStore>,
    pub recovered: Recovered,
}

pub(crate) fn open(h: &mut dyn StoreHarness) -> Opened {
    let store = h.open().unwrap_or_else(|e| panic!("opening the store failed: {e}"));
    let recovered = store.recover().unwrap_or_else(|e| panic!("recovery failed: {e}"));
    Opened { store, recovered }
}

/// Closes `store`, drops it and opens the store again, as a clean restart does.
pub(crate) fn restart(h: &mut dyn StoreHarness, store: Arc<dyn MessageStore>) -> Opened {
    store.close().unwrap_or_else(|e| panic!("closing the store failed: {e}"));
    drop(store);
    open(h)
}

/// Drops `store` without closing it and opens the store again.
pub(crate) fn reopen_after_drop(h: &mut dyn StoreHarness, store: Arc<dyn MessageStore>) -> Opened {
    drop(store);
    open(h)
}

pub(crate) fn submit(
    store: &dyn MessageStore,
    operations: Vec<Operation>,
) -> Result<(), StoreError> {
    block_on(store.submit(UnitOfWork { operations, lazy: false }))
}

/// Submits a unit and panics unless it completes successfully.
pub(crate) fn submit_ok(store: &dyn MessageStore, operations: Vec<Operation>) {
    unit_ok(store, UnitOfWork { operations, lazy: false });
}

/// Submits a lazy unit ([`UnitOfWork::lazy`]) and panics unless it completes successfully.
pub(crate) fn submit_lazy_ok(store: &dyn MessageStore, operations: Vec<Operation>) {
    unit_ok(store, UnitOfWork::lazy(operations));
}

fn unit_ok(store: &dyn MessageStore, unit: UnitOfWork) {
    let described = format!("{:?}", unit.operations);
    if let Err(e) = block_on(store.submit(unit)) {
        panic!("unit failed: {e}\nunit: {}", truncate(&described));
    }
}

/// Submits a unit and panics unless it fails with [`StoreError::Invalid`].
pub(crate) fn submit_invalid(store: &dyn MessageStore, operations: Vec<Operation>, what: &str) {
    match submit(store, operations) {
        Err(StoreError::Invalid { .. }) => {}
        other => panic!("{what}: expected StoreError::Invalid, got {other:?}"),
    }
}

fn truncate(text: &str) -> &str {
    match text.char_indices().nth(2000) {
        Some((at, _)) => &text[..at],
        None => text,
    }
}

pub(crate) fn queue(name: &str) -> QueueKey {
    QueueKey::destination(Destination::queue(name))
}

/// A message with the given id and priority, a small body naming it and a property.
pub(crate) fn message(id: u64, destination: &Destination, priority: u8) -> Arc<Message> {
    let mut message = Message::new(MessageId(id), format!("ID:kit:1:1:{id}"), destination.clone());
    message.headers.priority = priority;
    message.body_kind = crate::message::BodyKind::Text;
    message.body = Bytes::from(format!("body of message {id}"));
    message.properties.insert("kit-id".into(), crate::message::PropertyValue::Long(id as i64));
    Arc::new(message)
}

/// A priority-4 message for `queue`'s destination.
pub(crate) fn message_for(id: u64, queue: &QueueKey) -> Arc<Message> {
    message(id, &queue.destination, crate::message::DEFAULT_PRIORITY)
}

pub(crate) fn add(message: &Arc<Message>, queues: &[&QueueKey]) -> Operation {
    Operation::AddMessage {
        message: Arc::clone(message),
        queues: queues.iter().map(|q| (*q).clone()).collect(),
        txn: None,
    }
}

pub(crate) fn add_txn(message: &Arc<Message>, queues: &[&QueueKey], txn: u64) -> Operation {
    Operation::AddMessage {
        message: Arc::clone(message),
        queues: queues.iter().map(|q| (*q).clone()).collect(),
        txn: Some(TxnId(txn)),
    }
}

/// The key `queue` files `message` under, which its ack names.
pub(crate) fn key(message: &Message) -> PageKey {
    PageKey::of(message)
}

/// The key of a message made by [`message_for`] (priority 4), for acks of ids the case has
/// no message at hand for (or never added).
pub(crate) fn key_for(id: u64) -> PageKey {
    PageKey { priority: crate::message::DEFAULT_PRIORITY, id: MessageId(id) }
}

pub(crate) fn ack(queue: &QueueKey, key: PageKey) -> Operation {
    Operation::Ack { queue: queue.clone(), key, txn: None }
}

pub(crate) fn ack_txn(queue: &QueueKey, key: PageKey, txn: u64) -> Operation {
    Operation::Ack { queue: queue.clone(), key, txn: Some(TxnId(txn)) }
}

/// Every message `queue` holds, read in pages (so paging is exercised everywhere).
pub(crate) fn read_all(store: &dyn MessageStore, queue: &QueueKey) -> Vec<Arc<Message>> {
    let mut all = Vec::new();
    let mut after: Option<PageKey> = None;
    loop {
        let page = store
            .read_page(queue, after, 64)
            .unwrap_or_else(|e| panic!("read_page({queue:?}) failed: {e}"));
        assert!(
            page.len() <= 64,
            "read_page({queue:?}) returned {} messages for limit 64",
            page.len()
        );
        let mut previous = after;
        for stored in &page {
            let key = PageKey::of(&stored.message);
            if let Some(previous) = previous {
                assert!(
                    key > previous,
                    "read_page({queue:?}) returned {key:?} out of order, after {previous:?}"
                );
            }
            previous = Some(key);
        }
        let Some(last) = page.last() else { break };
        after = Some(PageKey::of(&last.message));
        let done = page.len() < 64;
        all.extend(page.into_iter().map(|stored| stored.message));
        if done {
            break;
        }
    }
    all
}

/// The ids `queue` holds, in read order.
pub(crate) fn ids(store: &dyn MessageStore, queue: &QueueKey) -> Vec<u64> {
    read_all(store, queue).iter().map(|m| m.id.0).collect()
}

pub(crate) fn count(store: &dyn MessageStore, queue: &QueueKey) -> u64 {
    store.count(queue).unwrap_or_else(|e| panic!("count({queue:?}) failed: {e}"))
}

/// Asserts that `queue` holds exactly `expected` (in this order) and counts as many.
#[track_caller]
pub(crate) fn assert_queue(store: &dyn MessageStore, queue: &QueueKey, expected: &[u64]) {
    assert_eq!(ids(store, queue), expected, "messages in {queue:?}");
    assert_eq!(count(store, queue), expected.len() as u64, "count of {queue:?}");
}
