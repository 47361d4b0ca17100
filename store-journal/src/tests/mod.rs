//! The journal store's own tests: the conformance kit, recovery (torn tails, corruption,
//! checkpoints, a randomized model), power loss, group commit, failures, space and
//! compaction. Helpers shared by them live here.

use std::path::Path;
use std::sync::Arc;

use bytes::Bytes;
use store::kit::block_on;
use store::{
    Destination, Message, MessageId, MessageStore, Operation, PageKey, QueueKey, StoreError,
    StoredMessage, SyncPolicy, UnitOfWork,
};

use crate::{JournalOptions, JournalStore};

mod commit;
mod crash;
mod model;
mod recovery;
mod space;

mod conformance {
    use crate::testing::JournalHarness;

    store::conformance_tests!(JournalHarness::new());
}

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

pub fn ack(queue: &QueueKey, message: &Message) -> Operation {
    Operation::Ack { queue: queue.clone(), key: PageKey::of(message), txn: None }
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

/// Everything `queue` holds, in page order.
pub fn read_all(store: &dyn MessageStore, queue: &QueueKey) -> Vec<StoredMessage> {
    let mut all = Vec::new();
    let mut after = None;
    loop {
        let page = store.read_page(queue, after, 100).unwrap_or_else(|e| panic!("read_page: {e}"));
        let Some(last) = page.last() else { break };
        after = Some(PageKey::of(&last.message));
        let done = page.len() < 100;
        all.extend(page);
        if done {
            break;
        }
    }
    all
}

pub fn ids(store: &dyn MessageStore, queue: &QueueKey) -> Vec<u64> {
    read_all(store, queue).iter().map(|s| s.message.id.0).collect()
}

/// Small segments and checkpoints, so that tests roll files and checkpoint.
pub fn small_options(segment_size: u64, checkpoint_bytes: u64) -> JournalOptions {
    JournalOptions {
        segment_size,
        checkpoint_bytes,
        sync: SyncPolicy::Always,
        ..JournalOptions::default()
    }
}

pub fn open(dir: &Path, options: &JournalOptions) -> JournalStore {
    JournalStore::open(dir, options.clone()).unwrap_or_else(|e| panic!("open failed: {e}"))
}

pub fn temp_dir() -> tempfile::TempDir {
    tempfile::Builder::new()
        .prefix("ferromq-journal-test-")
        .tempdir()
        .unwrap_or_else(|e| panic!("temporary directory: {e}"))
}

/// The data files in `dir` (by name), sorted.
pub fn data_files(dir: &Path) -> Vec<String> {
    let mut names: Vec<String> = std::fs::read_dir(dir)
        .unwrap_or_else(|e| panic!("listing {}: {e}", dir.display()))
        .filter_map(|entry| entry.ok())
        .map(|entry| entry.file_name().to_string_lossy().into_owned())
        .filter(|name| crate::segment::parse_segment(name).is_some())
        .collect();
    names.sort();
    names
}

#[test]
fn journal_store_is_send_and_sync() {
    fn shared<T: Send + Sync + 'static>() {}
    shared::<JournalStore>();
    let dir = temp_dir();
    let store: Box<dyn MessageStore> = Box::new(open(dir.path(), &JournalOptions::default()));
    assert_eq!(store.name(), "journal");
}
