//! Space: the store limit, a full disk, and compaction keeping old files from piling up.

use std::path::Path;

use store::{MessageStore, StoreError, SyncPolicy};

use super::*;
use crate::testing::SimulatedDisk;

#[test]
fn over_max_size_adds_are_refused_while_acks_still_work() {
    let dir = temp_dir();
    let options = JournalOptions { max_size: 256 * 1024, ..small_options(32 * 1024, 16 * 1024) };
    let store = open(dir.path(), &options);
    let q = queue("Q");
    let mut sent = Vec::new();
    let refused = loop {
        let m = message(sent.len() as u64 + 1, &q, 4, 2000);
        match submit(&store, vec![add(&m, &[&q])]) {
            Ok(()) => sent.push(m),
            Err(e) => break e,
        }
        assert!(sent.len() < 1000, "max_size never tripped");
    };
    assert!(matches!(refused, StoreError::Full { .. }), "{refused}");
    assert!(sent.len() > 100, "only {} messages fit", sent.len());
    // A refused add is refused at once, and applied nowhere.
    let extra = message(5000, &q, 4, 2000);
    let completion = store.submit(UnitOfWork::with(add(&extra, &[&q])));
    assert!(completion.is_ready());
    assert!(matches!(block_on(completion), Err(StoreError::Full { .. })));
    assert_eq!(store.count(&q).unwrap_or(0), sent.len() as u64);
    // Consumers drain: acks, destinations, transactions still work.
    for m in &sent {
        submit_ok(&store, vec![ack(&q, m)]);
    }
    submit_ok(&store, vec![Operation::AddDestination(Destination::queue("STILL.OK"))]);
    assert_eq!(store.count(&q).unwrap_or(1), 0);
    // Reclaiming (after a few checkpoints of acks) frees the space again.
    let mut accepted = false;
    for round in 0..200u64 {
        let filler = Operation::AddDestination(Destination::queue(format!(
            "FILLER.{round}.{}",
            "x".repeat(1000)
        )));
        submit_ok(&store, vec![filler]);
        if submit(&store, vec![add(&message(10_000 + round, &q, 4, 10), &[&q])]).is_ok() {
            accepted = true;
            break;
        }
    }
    assert!(
        accepted,
        "adds accepted again once space was reclaimed: files {:?}",
        store.data_files()
    );
}

#[test]
fn full_disk_refuses_adds_but_acks_use_the_reserve() {
    let disk = SimulatedDisk::new();
    let dir = Path::new("/sim/full");
    let segment = 16 * 1024;
    // Room for the head, the reserve and a few more segments.
    disk.set_capacity(Some(6 * segment + 4096));
    let options = JournalOptions { sync: SyncPolicy::Always, ..small_options(segment, 1 << 40) };
    let store = JournalStore::open_with_disk(disk.disk(), dir, options)
        .unwrap_or_else(|e| panic!("open: {e}"));
    let q = queue("Q");
    let mut sent = Vec::new();
    let refused = loop {
        let m = message(sent.len() as u64 + 1, &q, 4, 300);
        match submit(&store, vec![add(&m, &[&q])]) {
            Ok(()) => sent.push(m),
            Err(e) => break e,
        }
        assert!(sent.len() < 10_000, "the disk never filled");
    };
    assert!(matches!(refused, StoreError::Full { .. }), "{refused}");
    assert!(!disk.file_names(dir).iter().any(|n| n == crate::RESERVE_FILE), "reserve released");
    // Every confirmed add is readable, and acks go on (into the space of the reserve).
    assert_eq!(store.count(&q).unwrap_or(0), sent.len() as u64);
    let half = sent.len() / 2;
    for m in sent.iter().take(half) {
        submit_ok(&store, vec![ack(&q, m)]);
    }
    assert_eq!(store.count(&q).unwrap_or(0), (sent.len() - half) as u64);
}

#[test]
fn one_old_message_does_not_pin_every_later_file() {
    let dir = temp_dir();
    let mib = 1024 * 1024;
    let options = JournalOptions { sync: SyncPolicy::Never, ..small_options(mib, mib / 2) };
    let store = open(dir.path(), &options);
    let q = queue("Q");
    let old = message(1, &q, 4, 1000);
    submit_ok(&store, vec![add(&old, &[&q])]);
    let mut most_files = 0;
    let mut id = 2u64;
    // ~64 MiB of traffic, 16 messages of 4 KiB a unit, each acked by the next unit.
    let mut previous: Vec<Arc<Message>> = Vec::new();
    while id < 16_000 {
        let batch: Vec<Arc<Message>> = (0..16).map(|i| message(id + i, &q, 4, 4096)).collect();
        id += 16;
        let mut operations: Vec<Operation> = batch.iter().map(|m| add(m, &[&q])).collect();
        operations.extend(previous.iter().map(|m| ack(&q, m)));
        submit_ok(&store, operations);
        previous = batch;
        most_files = most_files.max(data_files(dir.path()).len());
    }
    submit_ok(&store, previous.iter().map(|m| ack(&q, m)).collect());
    // Two more checkpoints' worth of traffic lets the last compacted files go.
    assert_eq!(ids(&store, &q), [1]);
    store.close().unwrap_or_else(|e| panic!("close: {e}"));
    drop(store);
    let remaining = data_files(dir.path());
    eprintln!(
        "compaction: at most {most_files} data files during the run, {remaining:?} at the end"
    );
    assert!(remaining.len() <= 3, "data files left: {remaining:?}");
    assert!(most_files <= 5, "at most {most_files} data files at once");
    let store = open(dir.path(), &options);
    let read = read_all(&store, &q);
    assert_eq!(read.len(), 1);
    assert_eq!(*read[0].message, *old, "the old message survived its moves");
}

/// The scale: one unacknowledged message at the head of a queue, then 1 GiB of later
/// messages sent and acked, with the default 32 MiB data files: at most 3 data files remain.
#[test]
fn one_old_message_does_not_pin_files_after_a_gibibyte() {
    let dir = temp_dir();
    let options = JournalOptions { sync: SyncPolicy::Never, ..JournalOptions::default() };
    let store = open(dir.path(), &options);
    let q = queue("Q");
    let old = message(1, &q, 4, 1000);
    submit_ok(&store, vec![add(&old, &[&q])]);
    let body = 64 * 1024;
    let total: u64 = 1 << 30;
    let mut id = 2u64;
    let mut previous: Vec<Arc<Message>> = Vec::new();
    let mut most_files = 0;
    while (id - 2) * body as u64 <= total {
        let batch: Vec<Arc<Message>> = (0..8).map(|i| message(id + i, &q, 4, body)).collect();
        id += 8;
        let mut operations: Vec<Operation> = batch.iter().map(|m| add(m, &[&q])).collect();
        operations.extend(previous.iter().map(|m| ack(&q, m)));
        submit_ok(&store, operations);
        previous = batch;
        most_files = most_files.max(data_files(dir.path()).len());
    }
    submit_ok(&store, previous.iter().map(|m| ack(&q, m)).collect());
    assert_eq!(ids(&store, &q), [1]);
    store.close().unwrap_or_else(|e| panic!("close: {e}"));
    drop(store);
    let remaining = data_files(dir.path());
    eprintln!("1 GiB: at most {most_files} data files during the run, {remaining:?} at the end");
    assert!(remaining.len() <= 3, "data files left: {remaining:?}");
    let store = open(dir.path(), &options);
    let read = read_all(&store, &q);
    assert_eq!(read.len(), 1);
    assert_eq!(*read[0].message, *old, "the old message survived its moves");
}

/// Idle checkpoints free the files of acknowledged messages whatever the sync policy: with
/// `never` the files written since the last sync were never synced, which once kept the
/// writer from ever checkpointing while idle (the broker's temporary store, which never
/// syncs, then kept every file of a drained spill).
#[test]
fn acked_files_are_reclaimed_while_idle_without_syncs() {
    let dir = temp_dir();
    let options = JournalOptions {
        sync: SyncPolicy::Never,
        checkpoint_interval: std::time::Duration::from_millis(50),
        ..small_options(32 * 1024, 1 << 30)
    };
    let store = open(dir.path(), &options);
    let q = queue("Q");
    let sent: Vec<_> = (1..=200).map(|id| message(id, &q, 4, 2000)).collect();
    for m in &sent {
        submit_ok(&store, vec![add(m, &[&q])]);
    }
    for m in &sent {
        submit_ok(&store, vec![ack(&q, m)]);
    }
    let full = store.usage().used_bytes;
    let deadline = std::time::Instant::now() + std::time::Duration::from_secs(10);
    while store.usage().used_bytes > 64 * 1024 {
        assert!(
            std::time::Instant::now() < deadline,
            "{} of {full} bytes still used: files {:?}",
            store.usage().used_bytes,
            store.data_files()
        );
        std::thread::sleep(std::time::Duration::from_millis(20));
    }
}

/// A consumer that lags its producer by a couple of files drains each file while checkpoints
/// pass over it: none of those messages is rewritten at the head (they were, once a file fell
/// below the compaction threshold, which doubled the journal's writes behind a slow
/// consumer), and the drained files are deleted all the same.
#[test]
fn files_a_lagging_consumer_drains_are_not_compacted() {
    let dir = temp_dir();
    let mib = 1024 * 1024;
    let options = JournalOptions { sync: SyncPolicy::Never, ..small_options(mib, mib / 2) };
    let store = open(dir.path(), &options);
    let q = queue("Q");
    // 16 MiB of 4 KiB messages, each acked 512 messages (2 MiB) after it was added.
    let lag = 512;
    for id in 1..=4096u64 {
        let mut operations = vec![add(&message(id, &q, 4, 4096), &[&q])];
        if id > lag {
            operations.push(ack(&q, &message(id - lag, &q, 4, 0)));
        }
        submit_ok(&store, operations);
    }
    let stats = store.stats();
    assert!(stats.checkpoints >= 16, "checkpoints: {stats:?}");
    assert_eq!(stats.relocated_messages, 0, "messages about to be acked were moved: {stats:?}");
    assert!(stats.deleted_files >= 8, "drained files are deleted: {stats:?}");
    assert!(stats.data_files <= 6, "data files: {stats:?}");
}
