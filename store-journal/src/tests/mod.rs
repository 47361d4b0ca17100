//! The journal store's own tests: the conformance kit, recovery (torn tails, corruption,
//! checkpoints, a randomized model), power loss, group commit, failures, space and
//! compaction. Helpers shared by them live here.

use std::path::Path;
use std::sync::Arc;

use store::kit::block_on;
use store::{
    Destination, Message, MessageId, MessageStore, Operation, PageKey, QueueKey, SyncPolicy,
    UnitOfWork,
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

pub use store::kit::units::{
    ack_message as ack, add, ids, message, queue, read_stored as read_all, submit, submit_ok,
};

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
