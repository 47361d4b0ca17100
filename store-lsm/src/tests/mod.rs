//! The LSM store's own tests: the conformance kit on both engines, recovery, group commit,
//! the size limit, and crash tests (a child process killed mid-write).

mod conformance_sled {
    use crate::testing::LsmHarness;
    use crate::EngineKind;

    store::conformance_tests!(LsmHarness::new(EngineKind::Sled));
}

#[cfg(feature = "rocksdb")]
mod conformance_rocksdb {
    use crate::testing::LsmHarness;
    use crate::EngineKind;

    store::conformance_tests!(LsmHarness::new(EngineKind::RocksDb));
}

mod crash;
mod store_tests;

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

/// A message with a body of `body_len` bytes that names its id.
pub fn message(id: u64, queue: &QueueKey, priority: u8, body_len: usize) -> Arc<Message> {
    let mut message =
        Message::new(MessageId(id), format!("ID:test:{id}"), queue.destination.clone());
    message.headers.priority = priority;
    message.body_kind = store::BodyKind::Bytes;
    let mut body = format!("message {id};").into_bytes();
    body.resize(body_len.max(body.len()), b'x');
    message.body = Bytes::from(body);
    Arc::new(message)
}

pub fn add(message: &Arc<Message>, queues: &[&QueueKey]) -> Operation {
    Operation::AddMessage {
        message: Arc::clone(message),
        queues: queues.iter().map(|q| (*q).clone()).collect(),
        txn: None,
    }
}

pub fn ack_id(queue: &QueueKey, id: u64) -> Operation {
    Operation::Ack {
        queue: queue.clone(),
        key: PageKey { priority: 4, id: MessageId(id) },
        txn: None,
    }
}

pub fn submit(store: &dyn MessageStore, operations: Vec<Operation>) -> Result<(), StoreError> {
    block_on(store.submit(UnitOfWork { operations }))
}

/// Every id `queue` holds, in page order, with the redelivered flags.
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

pub fn engines() -> Vec<crate::EngineKind> {
    let mut engines = vec![crate::EngineKind::Sled];
    if crate::EngineKind::RocksDb.is_available() {
        engines.push(crate::EngineKind::RocksDb);
    }
    engines
}
