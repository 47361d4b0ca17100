//! Crash tests, run by the shared harness `store::kit::crash`: a child process (this test
//! binary, running [`crash_child`]) writes with several threads and prints its ledger; the
//! parent SIGKILLs it, reopens the store and checks the ledger against it, over several
//! rounds on one directory (so that recovery after a kill is itself killed into).
//!
//! A SIGKILL loses what the process held (the writer's queue, sled's unflushed buffers),
//! not the OS page cache, so it tests the store's own ordering: a completion resolves only
//! after its batch reached the engine and was synced.
//!
//! [`power_loss_keeps_every_completed_unit`] runs the same rounds under `store::powercut`:
//! after each kill the data directory is replaced by its durable image, as if the power had
//! gone.

use std::path::Path;
use std::sync::Arc;

use store::kit::crash::{self, Child};
use store::powercut::PowerCut;
use store::MessageStore;

use super::engines;
use crate::{EngineKind, LsmOptions, LsmStore};

const DIR_ENV: &str = "FERROMQ_LSM_CRASH_DIR";
const ENGINE_ENV: &str = "FERROMQ_LSM_CRASH_ENGINE";

fn engine_from(name: &str) -> EngineKind {
    match name {
        "rocksdb" => EngineKind::RocksDb,
        _ => EngineKind::Sled,
    }
}

fn open(dir: &Path, engine: EngineKind) -> Arc<dyn MessageStore> {
    let options = LsmOptions { engine, ..LsmOptions::default() };
    Arc::new(
        LsmStore::open(dir, options)
            .unwrap_or_else(|e| panic!("{}: open {}: {e}", engine.name(), dir.display())),
    )
}

/// The child's workload; does nothing unless started by the crash tests.
#[test]
#[ignore = "the crash tests' child process; runs only when started by them"]
fn crash_child() {
    let (Ok(dir), Ok(engine)) = (std::env::var(DIR_ENV), std::env::var(ENGINE_ENV)) else {
        return;
    };
    crash::child(open(Path::new(&dir), engine_from(&engine)));
}

/// The rounds of a child writing to `dir` with `engine`, each kill a power cut under `cut`.
fn crash_rounds(engine: EngineKind, dir: &Path, cut: Option<&PowerCut>) {
    let mut child =
        Child::new("tests::crash::crash_child").env(DIR_ENV, dir).env(ENGINE_ENV, engine.name());
    if let Some(cut) = cut {
        child = child.power_cut(cut);
    }
    child.rounds(engine.name(), || open(dir, engine));
}

#[test]
fn kill_9_rounds_keep_every_confirmed_unit() {
    for engine in engines() {
        let dir = tempfile::Builder::new().prefix("ferromq-lsm-crash-").tempdir().expect("dir");
        crash_rounds(engine, dir.path(), None);
    }
}

#[test]
fn power_loss_keeps_every_completed_unit() {
    for engine in engines() {
        let dir = tempfile::Builder::new().prefix("ferromq-lsm-power-").tempdir().expect("dir");
        let data = dir.path().join("data");
        crash_rounds(engine, &data, Some(&PowerCut::new(&data)));
    }
}
