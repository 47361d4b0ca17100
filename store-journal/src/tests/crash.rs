//! Crash and power-loss tests, run by the shared harness `store::kit::crash` (the same
//! workload, ledger and checks as every engine's): every unit whose completion fired is
//! there after the crash, no unit is half there, no confirmed ack is undone.
//!
//! [`power_loss_keeps_every_completed_unit`] loses power in this process, over the simulated
//! disk, and also checks that no completion fired before a sync.
//! [`kill_9_rounds_keep_every_confirmed_unit`] SIGKILLs a child process (this test binary,
//! running [`crash_child`]) writing to a real directory, and
//! [`power_cut_rounds_keep_every_completed_unit`] does so under `store::powercut`.

use std::collections::BTreeMap;
use std::path::Path;

use parking_lot::Mutex;
use store::kit::crash::{self, Child, Event};
use store::powercut::PowerCut;
use store::MessageStore;

use super::*;
use crate::testing::SimulatedDisk;

const DIR_ENV: &str = "FERROMQ_JOURNAL_CRASH_DIR";
const CHILD: &str = "tests::crash::crash_child";

/// Small segments and checkpoints, so that the rounds roll files and checkpoint.
fn options() -> JournalOptions {
    small_options(32 * 1024, 16 * 1024)
}

fn open_at(dir: &Path) -> Arc<dyn MessageStore> {
    Arc::new(open(dir, &options()))
}

#[test]
#[ignore = "the crash tests' child process; runs only when started by them"]
fn crash_child() {
    let Ok(dir) = std::env::var(DIR_ENV) else { return };
    crash::child(open_at(Path::new(&dir)));
}

#[test]
fn power_loss_keeps_every_completed_unit() {
    let disk = SimulatedDisk::new();
    let dir = Path::new("/sim/power");
    let open_sim = || -> Arc<dyn MessageStore> {
        Arc::new(
            JournalStore::open_with_disk(disk.disk(), dir, options())
                .unwrap_or_else(|e| panic!("open: {e}")),
        )
    };
    // Per writer, the sync count when its unit (or ack) was submitted.
    let syncs_at_submit = Mutex::new(BTreeMap::new());
    let observe = |event: Event| {
        let Some(writer) = event.writer() else { return };
        let syncs = disk.sync_count();
        match event {
            Event::Submitting { .. } | Event::Acking { .. } => {
                syncs_at_submit.lock().insert(writer, syncs);
            }
            _ => {
                let before = syncs_at_submit.lock()[&writer];
                assert!(syncs > before, "a completion fired before any sync: {event:?}");
            }
        }
    };
    crash::rounds(
        "journal simulated power loss",
        |life| crash::in_process(open_sim(), life.kill_after, || disk.lose_power(), &observe),
        open_sim,
    );
    eprintln!("{} syncs", disk.sync_count());
}

#[test]
fn kill_9_rounds_keep_every_confirmed_unit() {
    let dir = temp_dir();
    Child::new(CHILD).env(DIR_ENV, dir.path()).rounds("journal", || open_at(dir.path()));
}

#[test]
fn power_cut_rounds_keep_every_completed_unit() {
    let dir = temp_dir();
    let data = dir.path().join("data");
    let cut = PowerCut::new(&data);
    Child::new(CHILD).env(DIR_ENV, &data).power_cut(&cut).rounds("journal", || open_at(&data));
}
