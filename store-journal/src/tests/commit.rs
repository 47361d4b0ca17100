//! Group commit, sync policies, cancelled adds, poisoning.

use std::path::Path;
use std::sync::atomic::{AtomicU64, Ordering};
use std::time::{Duration, Instant};

use store::{FailAction, MessageStore, StoreError};

use super::*;
use crate::testing::SimulatedDisk;
use crate::FP_SYNC;

#[test]
fn group_commit_batches_concurrent_units() {
    let dir = temp_dir();
    let store = Arc::new(open(dir.path(), &JournalOptions::default()));
    let (threads, per_thread) = (64u64, 40u64);
    let next = Arc::new(AtomicU64::new(1));
    let started = Instant::now();
    std::thread::scope(|scope| {
        for t in 0..threads {
            let (store, next) = (Arc::clone(&store), Arc::clone(&next));
            scope.spawn(move || {
                let q = queue(&format!("GROUP.{}", t % 8));
                for _ in 0..per_thread {
                    let id = next.fetch_add(1, Ordering::Relaxed);
                    submit_ok(store.as_ref(), vec![add(&message(id, &q, 4, 256), &[&q])]);
                }
            });
        }
    });
    let units = threads * per_thread;
    let fsyncs = store.fsync_count();
    eprintln!(
        "group commit: {units} units from {threads} threads, {fsyncs} fsyncs ({:.3} per unit) in {:?}",
        fsyncs as f64 / units as f64,
        started.elapsed()
    );
    assert!(fsyncs < units / 4, "{fsyncs} fsyncs for {units} units");
    let total: u64 = (0..8).map(|i| store.count(&queue(&format!("GROUP.{i}"))).unwrap_or(0)).sum();
    assert_eq!(total, units);
}

#[test]
fn add_acked_before_its_write_is_never_written() {
    let disk = SimulatedDisk::new();
    let dir = Path::new("/sim/cancel");
    let options = small_options(64 * 1024, 1 << 40);
    let store = JournalStore::open_with_disk(disk.disk(), dir, options.clone())
        .unwrap_or_else(|e| panic!("{e}"));
    let (q, r) = (queue("Q"), queue("R"));
    let first = message(1, &q, 4, 64);
    let cancelled = message(2, &q, 4, 64);
    let kept = message(3, &q, 4, 64);
    // The writer is held in the sync of the first unit's batch ...
    disk.hold_syncs();
    let c1 = store.submit(UnitOfWork::with(add(&first, &[&q])));
    disk.wait_for_held_sync();
    // ... while a message is sent to two queues and acked by both (finally), and another is
    // acked in only one of its queues.
    let c2 = store.submit(UnitOfWork::with(add(&cancelled, &[&q, &r])));
    let c3 = store.submit(UnitOfWork::with(add(&kept, &[&q, &r])));
    let c4 = store.submit(UnitOfWork::with(ack(&q, &cancelled)));
    let c5 = store
        .submit(UnitOfWork { operations: vec![ack(&r, &cancelled), ack(&q, &kept)], lazy: false });
    assert_eq!(ids(&store, &q), [1]);
    assert_eq!(ids(&store, &r), [3]);
    disk.release_syncs();
    for completion in [c1, c2, c3, c4, c5] {
        block_on(completion).unwrap_or_else(|e| panic!("unit failed: {e}"));
    }
    let segment = disk.contents(&dir.join("db-00000001.log")).unwrap_or_default();
    let contains = |needle: &[u8]| segment.windows(needle.len()).any(|w| w == needle);
    assert!(contains(b"message 1;"));
    assert!(contains(b"message 3;"), "an add still referenced is written");
    assert!(!contains(b"message 2;"), "the cancelled add was written");
    drop(store);
    let store =
        JournalStore::open_with_disk(disk.disk(), dir, options).unwrap_or_else(|e| panic!("{e}"));
    assert_eq!(ids(&store, &q), [1]);
    assert_eq!(ids(&store, &r), [3]);
    let recovered = store.recover().unwrap_or_else(|e| panic!("{e}"));
    assert!(recovered.next_message_id.0 > 3, "ids of dropped adds are not reused");
}

#[test]
fn failed_sync_poisons_until_reopen_and_reads_go_on() {
    let dir = temp_dir();
    let options = small_options(64 * 1024, 1 << 40);
    let store = open(dir.path(), &options);
    let q = queue("Q");
    submit_ok(&store, vec![add(&message(1, &q, 4, 50), &[&q])]);
    options.failpoints.arm(FP_SYNC, FailAction::Once);
    match submit(&store, vec![add(&message(2, &q, 4, 50), &[&q])]) {
        Err(StoreError::Poisoned { reason }) => assert!(reason.contains(FP_SYNC), "{reason}"),
        other => panic!("expected Poisoned, got {other:?}"),
    }
    for unit in [vec![add(&message(3, &q, 4, 50), &[&q])], vec![ack(&q, &message(1, &q, 4, 0))]] {
        assert!(matches!(submit(&store, unit), Err(StoreError::Poisoned { .. })));
    }
    // Reads keep working (the failed unit may show: it was applied, it may be on disk).
    assert_eq!(ids(&store, &q)[0], 1);
    assert!(matches!(store.close(), Err(StoreError::Poisoned { .. })));
    drop(store);
    let store = open(dir.path(), &options);
    let after = ids(&store, &q);
    assert!(after == [1] || after == [1, 2], "{after:?}");
    submit_ok(&store, vec![add(&message(4, &q, 4, 50), &[&q])]);
}

#[test]
fn periodic_sync_completes_before_syncing_and_syncs_within_the_interval() {
    let dir = temp_dir();
    let options = JournalOptions {
        sync: store::SyncPolicy::Periodic(Duration::from_millis(50)),
        ..small_options(64 * 1024, 1 << 40)
    };
    let store = open(dir.path(), &options);
    let q = queue("Q");
    let before = store.fsync_count();
    for id in 1..=20 {
        submit_ok(&store, vec![add(&message(id, &q, 4, 50), &[&q])]);
    }
    let deadline = Instant::now() + Duration::from_secs(5);
    while store.fsync_count() == before && Instant::now() < deadline {
        std::thread::sleep(Duration::from_millis(10));
    }
    let synced = store.fsync_count() - before;
    assert!(synced >= 1, "a periodic sync happened");
    assert!(synced < 20, "not a sync per unit: {synced}");
}

#[test]
fn never_policy_does_not_sync() {
    let dir = temp_dir();
    let options =
        JournalOptions { sync: store::SyncPolicy::Never, ..small_options(64 * 1024, 1 << 40) };
    let store = open(dir.path(), &options);
    let q = queue("Q");
    for id in 1..=20 {
        submit_ok(&store, vec![add(&message(id, &q, 4, 50), &[&q])]);
    }
    assert_eq!(store.fsync_count(), 0);
    drop(store);
    let store = open(dir.path(), &options);
    assert_eq!(ids(&store, &q).len(), 20, "written to the OS, so a process crash loses nothing");
}

/// A unit nobody waits to see durable (an acknowledgement the client does not have
/// confirmed) completes once written, without a sync of its own; the journal syncs it
/// within `LAZY_SYNC_WITHIN` when no other unit does it first, and a unit that needs a sync
/// covers the lazy ones before it.
#[test]
fn lazy_units_complete_without_a_sync_and_are_synced_soon_after() {
    let dir = temp_dir();
    let options = JournalOptions { sync: SyncPolicy::Always, ..small_options(1 << 20, 1 << 30) };
    let store = open(dir.path(), &options);
    let q = queue("Q");
    let (first, second) = (message(1, &q, 4, 100), message(2, &q, 4, 100));
    submit_ok(&store, vec![add(&first, &[&q]), add(&second, &[&q])]);
    let synced = store.stats().fsyncs;
    block_on(store.submit(UnitOfWork::lazy(vec![ack(&q, &first)]))).expect("written");
    assert_eq!(store.stats().fsyncs, synced, "a lazy unit completed without its own sync");
    let deadline = std::time::Instant::now() + std::time::Duration::from_secs(3);
    while store.stats().fsyncs == synced {
        assert!(std::time::Instant::now() < deadline, "the lazy unit was never synced");
        std::thread::sleep(std::time::Duration::from_millis(5));
    }
    let synced = store.stats().fsyncs;
    block_on(store.submit(UnitOfWork::lazy(vec![ack(&q, &second)]))).expect("written");
    submit_ok(&store, vec![add(&message(3, &q, 4, 100), &[&q])]);
    assert_eq!(store.stats().fsyncs, synced + 1, "the next durable unit synced both");
    assert_eq!(ids(&store, &q), [3]);
}

/// Lazy units that keep coming (a consumer draining a queue, no producer) are synced every
/// `LAZY_SYNC_WITHIN` while they last. (Here the writer waits for each unit; one whose queue
/// never empties is synced by the batch that finds the window over, in `write_pieces`.)
#[test]
fn a_stream_of_lazy_units_is_synced_while_it_lasts() {
    let dir = temp_dir();
    let options = JournalOptions { sync: SyncPolicy::Always, ..small_options(1 << 20, 1 << 30) };
    let store = open(dir.path(), &options);
    let q = queue("Q");
    let messages: Vec<_> = (1..=100_000).map(|id| message(id, &q, 4, 10)).collect();
    for chunk in messages.chunks(10_000) {
        submit_ok(&store, chunk.iter().map(|m| add(m, &[&q])).collect());
    }
    let synced = store.stats().fsyncs;
    let started = std::time::Instant::now();
    // Acks one at a time, each waited for (written), so that the writer never falls idle.
    for (acked, message) in messages.iter().enumerate() {
        block_on(store.submit(UnitOfWork::lazy(vec![ack(&q, message)]))).expect("written");
        if store.stats().fsyncs >= synced + 2 {
            eprintln!("two syncs after {acked} lazy acks in {:?}", started.elapsed());
            return;
        }
    }
    panic!("{} syncs in {:?} of lazy units", store.stats().fsyncs - synced, started.elapsed());
}
