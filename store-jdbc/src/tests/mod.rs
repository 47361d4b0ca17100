//! The SQL store's own tests: the conformance kit on SQLite and on PostgreSQL, and the
//! failures particular to a database.

mod sqlite_conformance {
    use crate::testing::SqliteHarness;

    store::conformance_tests!(SqliteHarness::new());
}

mod postgres_conformance {
    use crate::testing::PostgresHarness;

    // Without PostgreSQL installed (and not required) each case returns after the loud skip
    // message that `PgCluster` prints.
    store::conformance_tests!(match PostgresHarness::new() {
        Some(harness) => harness,
        None => return,
    });
}

mod counts;
mod crash;
mod failures;
mod lease;

use std::sync::Arc;

use bytes::Bytes;
use store::kit::block_on;
use store::{
    Destination, Message, MessageId, MessageStore, Operation, PageKey, QueueKey, StoreError,
    UnitOfWork,
};

pub fn queue(name: &str) -> QueueKey {
    QueueKey::destination(Destination::queue(name))
}

/// A message with a body of `body_len` bytes.
pub fn message(id: u64, queue: &QueueKey, priority: u8, body_len: usize) -> Arc<Message> {
    let mut message =
        Message::new(MessageId(id), format!("ID:test:{id}"), queue.destination.clone());
    message.headers.priority = priority;
    message.body_kind = store::BodyKind::Bytes;
    message.body = Bytes::from(vec![b'x'; body_len]);
    Arc::new(message)
}

pub fn add(message: &Arc<Message>, queues: &[&QueueKey]) -> Operation {
    Operation::AddMessage {
        message: Arc::clone(message),
        queues: queues.iter().map(|q| (*q).clone()).collect(),
        txn: None,
    }
}

pub fn ack(queue: &QueueKey, id: u64) -> Operation {
    Operation::Ack {
        queue: queue.clone(),
        key: PageKey { priority: 4, id: MessageId(id) },
        txn: None,
    }
}

pub fn submit(store: &dyn MessageStore, operations: Vec<Operation>) -> Result<(), StoreError> {
    block_on(store.submit(UnitOfWork { operations }))
}

#[track_caller]
pub fn submit_ok(store: &dyn MessageStore, operations: Vec<Operation>) {
    if let Err(e) = submit(store, operations) {
        panic!("unit failed: {e}");
    }
}

/// Every (id, redelivered) `queue` holds, in page order.
pub fn read_all(store: &dyn MessageStore, queue: &QueueKey) -> Vec<(u64, bool)> {
    let mut all = Vec::new();
    let mut after = None;
    loop {
        let page = store.read_page(queue, after, 500).unwrap_or_else(|e| panic!("read_page: {e}"));
        let Some(last) = page.last() else { break };
        after = Some(PageKey::of(&last.message));
        let done = page.len() < 500;
        all.extend(page.iter().map(|s| (s.message.id.0, s.redelivered)));
        if done {
            break;
        }
    }
    all
}

pub fn ids(store: &dyn MessageStore, queue: &QueueKey) -> Vec<u64> {
    read_all(store, queue).into_iter().map(|(id, _)| id).collect()
}

#[test]
fn sqlite_reads_a_page_as_one_primary_key_range() {
    let harness = crate::testing::SqliteHarness::new();
    let store = crate::SqlStore::open(&harness.url(), harness.dir(), crate::SqlOptions::default())
        .expect("open");
    store.close().expect("close");
    let target = crate::Target::parse(&harness.url(), harness.dir()).expect("url");
    let mut db = crate::db::connect(&target, crate::db::Durability::Full).expect("connect");
    let plan = db
        .query(
            &format!("EXPLAIN QUERY PLAN {}", crate::store::READ_PAGE),
            &[
                crate::db::Param::Int(1),
                crate::db::Param::Int(0),
                crate::db::Param::Int(0),
                crate::db::Param::Int(10),
            ],
        )
        .expect("explain");
    let plan = format!("{plan:?}");
    assert!(
        plan.contains("USING PRIMARY KEY (queue=? AND (priority_rank,msg_id)>(?,?))"),
        "read_page is not one index range: {plan}"
    );
    assert!(!plan.contains("TEMP B-TREE"), "read_page sorts: {plan}");
}
