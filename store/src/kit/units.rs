//! Building blocks for an engine's own tests (recovery, crashes, space, counts), beside the
//! conformance cases: messages of a chosen size, the operations on them, submitting units
//! and reading queues back. One copy here, so that every engine's tests mean the same by
//! "a message" and "what a queue holds".

use std::sync::Arc;

use bytes::Bytes;

use super::block_on;
use crate::contract::{MessageStore, Operation, PageKey, QueueKey, StoredMessage, UnitOfWork};
use crate::error::StoreError;
use crate::message::{BodyKind, Destination, Message, MessageId};

/// How many messages [`read_stored`] asks for at once.
const PAGE: usize = 100;

pub fn queue(name: &str) -> QueueKey {
    QueueKey::destination(Destination::queue(name))
}

/// A bytes message for `queue`'s destination with a body of at least `body_len` bytes that
/// begins with its id (so that a body read back names the message it came from).
pub fn message(id: u64, queue: &QueueKey, priority: u8, body_len: usize) -> Arc<Message> {
    let mut message =
        Message::new(MessageId(id), format!("ID:test:{id}"), queue.destination.clone());
    message.headers.priority = priority;
    message.body_kind = BodyKind::Bytes;
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

/// The ack of `message` in `queue`.
pub fn ack_message(queue: &QueueKey, message: &Message) -> Operation {
    Operation::Ack { queue: queue.clone(), key: PageKey::of(message), txn: None }
}

/// The ack of message `id`, sent at priority 4.
pub fn ack_id(queue: &QueueKey, id: u64) -> Operation {
    Operation::Ack {
        queue: queue.clone(),
        key: PageKey { priority: 4, id: MessageId(id) },
        txn: None,
    }
}

pub fn submit(store: &dyn MessageStore, operations: Vec<Operation>) -> Result<(), StoreError> {
    block_on(store.submit(UnitOfWork { operations, lazy: false }))
}

#[track_caller]
pub fn submit_ok(store: &dyn MessageStore, operations: Vec<Operation>) {
    if let Err(e) = submit(store, operations) {
        panic!("unit failed: {e}");
    }
}

/// Everything `queue` holds, in page order.
pub fn read_stored(store: &dyn MessageStore, queue: &QueueKey) -> Vec<StoredMessage> {
    let mut all = Vec::new();
    let mut after = None;
    loop {
        let page = store.read_page(queue, after, PAGE).unwrap_or_else(|e| panic!("read_page: {e}"));
        let Some(last) = page.last() else { break };
        after = Some(PageKey::of(&last.message));
        let done = page.len() < PAGE;
        all.extend(page);
        if done {
            break;
        }
    }
    all
}

/// Every (id, redelivered) `queue` holds, in page order.
pub fn read_flags(store: &dyn MessageStore, queue: &QueueKey) -> Vec<(u64, bool)> {
    read_stored(store, queue).iter().map(|s| (s.message.id.0, s.redelivered)).collect()
}

/// The ids `queue` holds, in page order.
pub fn ids(store: &dyn MessageStore, queue: &QueueKey) -> Vec<u64> {
    read_stored(store, queue).iter().map(|s| s.message.id.0).collect()
}
