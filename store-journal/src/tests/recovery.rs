//! Recovery: torn tails, corruption in the middle, checkpoints, damaged snapshots, the
//! clean-shutdown marker, prepared transactions across checkpoints.

use std::collections::BTreeSet;
use std::fs::OpenOptions;
use std::os::unix::fs::FileExt;
use std::path::Path;

use store::{MessageStore, Operation, StoreError, TxnId};

use super::*;
use crate::frame::{self, Parsed};
use crate::segment::segment_name;

/// Options under which nothing is checkpointed before close.
fn no_checkpoint() -> JournalOptions {
    small_options(64 * 1024, 1 << 40)
}

/// Writes one unit per message `ids` into queue Q, then drops the store (a crash).
fn write_and_crash(dir: &Path, ids: std::ops::RangeInclusive<u64>) {
    let store = open(dir, &no_checkpoint());
    let q = queue("Q");
    for id in ids {
        submit_ok(&store, vec![add(&message(id, &q, 4, 100), &[&q])]);
    }
    drop(store);
}

/// The offsets of the records of a data file.
fn record_offsets(path: &Path) -> Vec<(usize, usize)> {
    let data = std::fs::read(path).unwrap_or_else(|e| panic!("reading {}: {e}", path.display()));
    let mut offsets = Vec::new();
    let mut at = 0;
    while let Parsed::Record { len, .. } = frame::parse(&data, at) {
        offsets.push((at, len));
        at += len;
    }
    offsets
}

fn damage(path: &Path, offset: u64, bytes: &[u8]) {
    let file = OpenOptions::new().write(true).open(path).unwrap_or_else(|e| panic!("open: {e}"));
    file.write_all_at(bytes, offset).unwrap_or_else(|e| panic!("write: {e}"));
}

fn segment(dir: &Path, file: u32) -> std::path::PathBuf {
    dir.join(segment_name(file))
}

#[test]
fn torn_tail_short_write_is_truncated() {
    let dir = temp_dir();
    write_and_crash(dir.path(), 1..=10);
    let path = segment(dir.path(), 1);
    let records = record_offsets(&path);
    assert_eq!(records.len(), 10);
    let (last, len) = records[9];
    // A short write: the last record stops halfway, the rest of the file is gone.
    let file = OpenOptions::new().write(true).open(&path).unwrap_or_else(|e| panic!("{e}"));
    file.set_len((last + len / 2) as u64).unwrap_or_else(|e| panic!("{e}"));
    let store = open(dir.path(), &no_checkpoint());
    assert_eq!(ids(&store, &queue("Q")), (1..=9).collect::<Vec<_>>());
    // The repair holds: more writes, another crash, the same prefix plus the new unit.
    submit_ok(&store, vec![add(&message(11, &queue("Q"), 4, 100), &[&queue("Q")])]);
    drop(store);
    let store = open(dir.path(), &no_checkpoint());
    assert_eq!(ids(&store, &queue("Q")), [1, 2, 3, 4, 5, 6, 7, 8, 9, 11]);
}

#[test]
fn torn_tail_garbage_after_the_last_record_is_dropped() {
    let dir = temp_dir();
    write_and_crash(dir.path(), 1..=10);
    let path = segment(dir.path(), 1);
    let (last, len) = record_offsets(&path)[9];
    let garbage: Vec<u8> = (0..300u32).map(|i| (i * 7 + 13) as u8 | 1).collect();
    damage(&path, (last + len) as u64, &garbage);
    let store = open(dir.path(), &no_checkpoint());
    assert_eq!(ids(&store, &queue("Q")), (1..=10).collect::<Vec<_>>());
    drop(store);
    let store = open(dir.path(), &no_checkpoint());
    assert_eq!(
        ids(&store, &queue("Q")),
        (1..=10).collect::<Vec<_>>(),
        "garbage truncated for good"
    );
}

#[test]
fn torn_tail_zeroed_record_end_is_dropped() {
    let dir = temp_dir();
    write_and_crash(dir.path(), 1..=10);
    let path = segment(dir.path(), 1);
    let (last, len) = record_offsets(&path)[9];
    // The last sectors never reached the disk: the record ends in zeros (preallocation).
    damage(&path, (last + len - 20) as u64, &[0u8; 20]);
    let store = open(dir.path(), &no_checkpoint());
    assert_eq!(ids(&store, &queue("Q")), (1..=9).collect::<Vec<_>>());
}

#[test]
fn unfinished_unit_is_dropped_whole() {
    let dir = temp_dir();
    let store = open(dir.path(), &no_checkpoint());
    let (q, r) = (queue("Q"), queue("R"));
    submit_ok(&store, vec![add(&message(1, &q, 4, 100), &[&q])]);
    // One unit of three records.
    submit_ok(
        &store,
        vec![
            add(&message(2, &q, 4, 100), &[&q]),
            add(&message(3, &r, 4, 100), &[&r]),
            Operation::AddDestination(Destination::queue("DECLARED")),
        ],
    );
    drop(store);
    let path = segment(dir.path(), 1);
    let records = record_offsets(&path);
    assert_eq!(records.len(), 4);
    // The crash came after the unit's first two records.
    let (third, _) = records[3];
    let file = OpenOptions::new().write(true).open(&path).unwrap_or_else(|e| panic!("{e}"));
    file.set_len(third as u64).unwrap_or_else(|e| panic!("{e}"));
    let store = open(dir.path(), &no_checkpoint());
    assert_eq!(ids(&store, &q), [1]);
    assert_eq!(ids(&store, &r), Vec::<u64>::new());
    let recovered = store.recover().unwrap_or_else(|e| panic!("{e}"));
    assert!(!recovered.destinations.contains(&Destination::queue("DECLARED")));
}

#[test]
fn corruption_in_the_middle_refused_with_file_and_offset() {
    let dir = temp_dir();
    write_and_crash(dir.path(), 1..=10);
    let path = segment(dir.path(), 1);
    let (fifth, _) = record_offsets(&path)[4];
    damage(&path, (fifth + 30) as u64, b"\xff\xfe");
    let strict = JournalOptions { refuse_on_corruption: true, ..no_checkpoint() };
    match JournalStore::open(dir.path(), strict) {
        Err(StoreError::Corrupt { location, reason }) => {
            assert_eq!(location, format!("db-00000001.log offset {fifth}"), "{reason}");
        }
        Err(e) => panic!("expected Corrupt, got {e}"),
        Ok(_) => panic!("expected Corrupt, the store opened"),
    }
    // Nothing was changed by the refusal: the default opens with what precedes the damage.
    let store = open(dir.path(), &no_checkpoint());
    assert_eq!(ids(&store, &queue("Q")), [1, 2, 3, 4]);
    submit_ok(&store, vec![add(&message(20, &queue("Q"), 4, 100), &[&queue("Q")])]);
    drop(store);
    let store = open(dir.path(), &no_checkpoint());
    assert_eq!(ids(&store, &queue("Q")), [1, 2, 3, 4, 20]);
}

#[test]
fn damage_at_the_end_of_a_file_followed_by_a_newer_file_is_corruption() {
    let dir = temp_dir();
    // One run that rolls to a second file (a reopen after a crash checkpoints at its new
    // head, so only files written since one open are replayed together).
    write_and_crash(dir.path(), 1..=600);
    assert!(segment(dir.path(), 2).exists(), "the run rolled to a second file");
    let first = segment(dir.path(), 1);
    let records = record_offsets(&first);
    let (last, len) = records[records.len() - 1];
    damage(&first, (last + len - 8) as u64, &[0u8; 8]);
    let strict = JournalOptions { refuse_on_corruption: true, ..no_checkpoint() };
    assert!(matches!(JournalStore::open(dir.path(), strict), Err(StoreError::Corrupt { .. })));
    let store = open(dir.path(), &no_checkpoint());
    assert_eq!(ids(&store, &queue("Q")), (1..records.len() as u64).collect::<Vec<_>>());
    drop(store);
    assert!(dir.path().join("db-00000002.log.corrupt").exists(), "later file set aside");
}

#[test]
fn checkpoint_then_more_writes_then_crash_recovers_everything() {
    let dir = temp_dir();
    let options = small_options(16 * 1024, 4 * 1024);
    let store = open(dir.path(), &options);
    let (q, r) = (queue("Q"), queue("R"));
    let messages: Vec<_> = (1..=120).map(|id| message(id, &q, (id % 10) as u8, 200)).collect();
    for m in &messages[..100] {
        submit_ok(&store, vec![add(m, &[&q, &r])]);
    }
    let snapshots = || {
        std::fs::read_dir(dir.path())
            .unwrap_or_else(|e| panic!("{e}"))
            .filter_map(|e| e.ok())
            .filter(|e| crate::checkpoint::parse_name(&e.file_name().to_string_lossy()).is_some())
            .count()
    };
    assert!(snapshots() >= 1, "checkpoints were written");
    for m in &messages[100..] {
        submit_ok(&store, vec![add(m, &[&q])]);
    }
    submit_ok(&store, messages[..30].iter().map(|m| ack(&q, m)).collect());
    submit_ok(&store, messages[..60].iter().map(|m| ack(&r, m)).collect());
    drop(store);

    let expected = |from: usize, to: usize| {
        let mut keys: Vec<_> =
            messages[from..to].iter().map(|m| (PageKey::of(m), m.id.0)).collect();
        keys.sort();
        keys.into_iter().map(|(_, id)| id).collect::<Vec<_>>()
    };
    let store = open(dir.path(), &options);
    let read = read_all(&store, &q);
    assert_eq!(read.iter().map(|s| s.message.id.0).collect::<Vec<_>>(), expected(30, 120));
    assert!(
        read.iter().all(|s| s.redelivered),
        "after a crash every message may have been delivered"
    );
    assert_eq!(ids(&store, &r), expected(60, 100));
    for stored in &read {
        assert_eq!(*stored.message, *messages[stored.message.id.0 as usize - 1]);
    }
    let fresh = message(500, &q, 4, 10);
    submit_ok(&store, vec![add(&fresh, &[&q])]);
    assert!(!read_all(&store, &q).iter().any(|s| s.message.id.0 == 500 && s.redelivered));
    store.close().unwrap_or_else(|e| panic!("close: {e}"));
    drop(store);
    let store = open(dir.path(), &options);
    let read = read_all(&store, &q);
    assert_eq!(read.len(), 91);
    assert!(read.iter().all(|s| !s.redelivered), "after a clean close nothing is redelivered");
}

#[test]
fn damaged_snapshots_fall_back_to_an_older_one_or_a_full_replay() {
    let dir = temp_dir();
    let options = small_options(16 * 1024, 4 * 1024);
    let q = queue("Q");
    let store = open(dir.path(), &options);
    for id in 1..=80 {
        submit_ok(&store, vec![add(&message(id, &q, 4, 300), &[&q])]);
    }
    store.close().unwrap_or_else(|e| panic!("close: {e}"));
    drop(store);
    let mut snapshots: Vec<String> = std::fs::read_dir(dir.path())
        .unwrap_or_else(|e| panic!("{e}"))
        .filter_map(|e| e.ok())
        .map(|e| e.file_name().to_string_lossy().into_owned())
        .filter(|name| crate::checkpoint::parse_name(name).is_some())
        .collect();
    snapshots.sort();
    assert_eq!(snapshots.len(), 2, "the two newest snapshots are kept: {snapshots:?}");
    let newest = dir.path().join(&snapshots[1]);
    let mut bytes = std::fs::read(&newest).unwrap_or_else(|e| panic!("{e}"));
    let middle = bytes.len() / 2;
    bytes[middle] ^= 0x55;
    std::fs::write(&newest, &bytes).unwrap_or_else(|e| panic!("{e}"));
    let store = open(dir.path(), &options);
    assert_eq!(ids(&store, &q), (1..=80).collect::<Vec<_>>(), "older snapshot used");
    drop(store);
    // Every snapshot damaged: a full replay.
    for entry in
        std::fs::read_dir(dir.path()).unwrap_or_else(|e| panic!("{e}")).filter_map(|e| e.ok())
    {
        let name = entry.file_name().to_string_lossy().into_owned();
        if crate::checkpoint::parse_name(&name).is_some() {
            std::fs::write(entry.path(), b"FMQSNAP1 not really").unwrap_or_else(|e| panic!("{e}"));
        }
    }
    let store = open(dir.path(), &options);
    assert_eq!(ids(&store, &q), (1..=80).collect::<Vec<_>>(), "full replay");
}

#[test]
fn prepared_transaction_survives_checkpoints_and_reclaiming() {
    let dir = temp_dir();
    let options = small_options(16 * 1024, 4 * 1024);
    let (q, t) = (queue("Q"), queue("T"));
    let store = open(dir.path(), &options);
    let held = message(1, &t, 4, 200);
    submit_ok(
        &store,
        vec![
            Operation::AddMessage {
                message: Arc::clone(&held),
                queues: vec![t.clone()],
                txn: Some(TxnId(7)),
            },
            Operation::Prepare(TxnId(7)),
        ],
    );
    // Traffic that fills and reclaims many files.
    for id in 2..=600u64 {
        let m = message(id, &q, 4, 300);
        submit_ok(&store, vec![add(&m, &[&q])]);
        submit_ok(&store, vec![ack(&q, &m)]);
    }
    let files = store.data_files();
    assert!(files.contains(&1), "the file with the prepared transaction is kept: {files:?}");
    drop(store);
    let store = open(dir.path(), &options);
    let recovered = store.recover().unwrap_or_else(|e| panic!("{e}"));
    assert_eq!(recovered.prepared, vec![TxnId(7)]);
    assert!(recovered.next_message_id.0 > 600);
    submit_ok(&store, vec![Operation::Commit(TxnId(7))]);
    store.close().unwrap_or_else(|e| panic!("close: {e}"));
    drop(store);
    let store = open(dir.path(), &options);
    let read = read_all(&store, &t);
    assert_eq!(read.len(), 1);
    assert_eq!(*read[0].message, *held);
    assert_eq!(ids(&store, &q), Vec::<u64>::new());
}

#[test]
fn reopening_many_times_keeps_every_file_it_needs() {
    let dir = temp_dir();
    let options = small_options(8 * 1024, 2 * 1024);
    let q = queue("Q");
    let mut live = BTreeSet::new();
    let mut next = 1u64;
    for round in 0..30 {
        let store = open(dir.path(), &options);
        assert_eq!(ids(&store, &q).into_iter().collect::<BTreeSet<_>>(), live, "round {round}");
        for _ in 0..10 {
            submit_ok(&store, vec![add(&message(next, &q, 4, 150), &[&q])]);
            live.insert(next);
            next += 1;
        }
        let acked: Vec<u64> =
            live.iter().copied().filter(|id| id % 3 != 0 || round % 5 == 4).take(12).collect();
        for id in &acked {
            submit_ok(&store, vec![ack(&q, &message(*id, &q, 4, 0))]);
            live.remove(id);
        }
        if round % 2 == 0 {
            store.close().unwrap_or_else(|e| panic!("close: {e}"));
        }
    }
}

/// The crash test's finding: with the default 32 MiB segments and 8 MiB checkpoints, short
/// runs ended by a crash never checkpointed, every open added a preallocated head and every
/// recovery read all of them. Now each open after a crash checkpoints at its head, so the
/// files of earlier runs are reclaimed (or compacted and then reclaimed).
#[test]
fn unclean_reopens_with_default_segments_keep_the_data_files_bounded() {
    let dir = temp_dir();
    let options = JournalOptions::default();
    assert_eq!(options.segment_size, crate::DEFAULT_SEGMENT_SIZE);
    let q = queue("Q");
    let mut live = BTreeSet::new();
    let mut next = 1u64;
    let mut most_files = 0;
    for round in 0..30 {
        let started = std::time::Instant::now();
        let store = open(dir.path(), &options);
        let opened = started.elapsed();
        let files = data_files(dir.path());
        most_files = most_files.max(files.len());
        assert!(files.len() <= 4, "round {round}: data files after open: {files:?}");
        assert_eq!(
            ids(&store, &q).into_iter().collect::<BTreeSet<_>>(),
            live,
            "round {round}: every confirmed message (and no acked one) is there"
        );
        if round > 0 {
            assert!(store.stats().checkpoints >= 1, "round {round}: no checkpoint at open");
        }
        // A little traffic: 20 messages, and acks of the previous rounds' messages except
        // every 7th, which stays for good.
        let acks: Vec<u64> = live.iter().copied().filter(|id| id % 7 != 0).collect();
        for id in next..next + 20 {
            submit_ok(&store, vec![add(&message(id, &q, 4, 2000), &[&q])]);
            live.insert(id);
        }
        next += 20;
        for id in acks {
            submit_ok(&store, vec![ack(&q, &message(id, &q, 4, 0))]);
            live.remove(&id);
        }
        eprintln!("round {round}: opened in {opened:?}, data files {files:?}");
        // A crash: dropped without close.
        drop(store);
    }
    let store = open(dir.path(), &options);
    assert_eq!(ids(&store, &q).into_iter().collect::<BTreeSet<_>>(), live);
    assert!(live.len() > 50, "messages stayed across the rounds: {}", live.len());
    drop(store);
    let files = data_files(dir.path());
    assert!(files.len() <= 4, "data files at the end: {files:?} (at most {most_files})");
}

/// A [`Disk`](crate::Disk) that counts the bytes read from data files.
#[derive(Debug)]
struct CountingDisk {
    inner: Arc<dyn crate::Disk>,
    read: Arc<std::sync::atomic::AtomicU64>,
}

#[derive(Debug)]
struct CountingFile {
    inner: Arc<dyn crate::DiskFile>,
    read: Option<Arc<std::sync::atomic::AtomicU64>>,
}

impl CountingDisk {
    fn wrap(&self, path: &Path, inner: Arc<dyn crate::DiskFile>) -> Arc<dyn crate::DiskFile> {
        let name = path.file_name().map(|n| n.to_string_lossy().into_owned()).unwrap_or_default();
        let data = crate::segment::parse_segment(&name).is_some();
        Arc::new(CountingFile { inner, read: data.then(|| Arc::clone(&self.read)) })
    }
}

impl crate::Disk for CountingDisk {
    fn create_dir_all(&self, dir: &Path) -> std::io::Result<()> {
        self.inner.create_dir_all(dir)
    }
    fn list(&self, dir: &Path) -> std::io::Result<Vec<String>> {
        self.inner.list(dir)
    }
    fn open(&self, path: &Path) -> std::io::Result<Arc<dyn crate::DiskFile>> {
        Ok(self.wrap(path, self.inner.open(path)?))
    }
    fn create(&self, path: &Path) -> std::io::Result<Arc<dyn crate::DiskFile>> {
        Ok(self.wrap(path, self.inner.create(path)?))
    }
    fn rename(&self, from: &Path, to: &Path) -> std::io::Result<()> {
        self.inner.rename(from, to)
    }
    fn remove(&self, path: &Path) -> std::io::Result<()> {
        self.inner.remove(path)
    }
    fn exists(&self, path: &Path) -> std::io::Result<bool> {
        self.inner.exists(path)
    }
    fn sync_dir(&self, dir: &Path) -> std::io::Result<()> {
        self.inner.sync_dir(dir)
    }
}

impl crate::DiskFile for CountingFile {
    fn write_at(&self, offset: u64, data: &[u8]) -> std::io::Result<()> {
        self.inner.write_at(offset, data)
    }
    fn read_at(&self, offset: u64, buf: &mut [u8]) -> std::io::Result<()> {
        if let Some(read) = &self.read {
            read.fetch_add(buf.len() as u64, std::sync::atomic::Ordering::SeqCst);
        }
        self.inner.read_at(offset, buf)
    }
    fn len(&self) -> std::io::Result<u64> {
        self.inner.len()
    }
    fn set_len(&self, len: u64) -> std::io::Result<()> {
        self.inner.set_len(len)
    }
    fn allocate(&self, len: u64) -> std::io::Result<()> {
        self.inner.allocate(len)
    }
    fn sync(&self) -> std::io::Result<()> {
        self.inner.sync()
    }
}

#[test]
fn opening_after_a_crash_does_not_read_a_mostly_empty_head_whole() {
    let dir = temp_dir();
    let read = Arc::new(std::sync::atomic::AtomicU64::new(0));
    let disk: Arc<dyn crate::Disk> =
        Arc::new(CountingDisk { inner: Arc::new(crate::RealDisk), read: Arc::clone(&read) });
    let options = JournalOptions::default();
    let open_counting = || {
        JournalStore::open_with_disk(Arc::clone(&disk), dir.path(), options.clone())
            .unwrap_or_else(|e| panic!("open: {e}"))
    };
    let q = queue("Q");
    let store = open_counting();
    for id in 1..=50 {
        submit_ok(&store, vec![add(&message(id, &q, 4, 1000), &[&q])]);
    }
    drop(store);
    let written = std::fs::metadata(segment(dir.path(), 1)).map(|m| m.len()).unwrap_or(0);
    assert_eq!(written, options.segment_size, "the head is preallocated");
    read.store(0, std::sync::atomic::Ordering::SeqCst);
    let store = open_counting();
    let bytes = read.load(std::sync::atomic::Ordering::SeqCst);
    eprintln!("opening after a crash read {bytes} bytes of data files");
    assert!(bytes >= 50 * 1000, "the records were read: {bytes}");
    assert!(
        bytes <= 256 * 1024,
        "{bytes} bytes read of a {} byte head holding about 55 KB",
        options.segment_size
    );
    assert_eq!(ids(&store, &q), (1..=50).collect::<Vec<_>>());
    // Once more, now from the checkpoint written at that open: nothing of file 1 is read.
    drop(store);
    read.store(0, std::sync::atomic::Ordering::SeqCst);
    let store = open_counting();
    let bytes = read.load(std::sync::atomic::Ordering::SeqCst);
    assert!(bytes <= 128 * 1024, "{bytes} bytes read of an empty head");
    // Bodies are still read from file 1 when asked for.
    assert_eq!(ids(&store, &q), (1..=50).collect::<Vec<_>>());
}

#[test]
fn an_empty_head_is_reused_instead_of_piling_up() {
    let dir = temp_dir();
    let options = no_checkpoint();
    let q = queue("Q");
    // Opens without traffic, closed or crashed: still one data file.
    for round in 0..5 {
        let store = open(dir.path(), &options);
        if round % 2 == 0 {
            store.close().unwrap_or_else(|e| panic!("close: {e}"));
        }
        drop(store);
        assert_eq!(data_files(dir.path()), ["db-00000001.log"], "round {round}");
    }
    write_and_crash(dir.path(), 1..=3);
    assert_eq!(data_files(dir.path()), ["db-00000001.log"]);
    // The next run's head holds only a record torn by the crash: cut to nothing, and reused.
    let store = open(dir.path(), &options);
    submit_ok(&store, vec![add(&message(4, &q, 4, 100), &[&q])]);
    drop(store);
    assert_eq!(data_files(dir.path()), ["db-00000001.log", "db-00000002.log"]);
    let head = segment(dir.path(), 2);
    let file = OpenOptions::new().write(true).open(&head).unwrap_or_else(|e| panic!("{e}"));
    file.set_len(20).unwrap_or_else(|e| panic!("{e}"));
    drop(file);
    let store = open(dir.path(), &options);
    assert_eq!(ids(&store, &q), [1, 2, 3]);
    assert_eq!(data_files(dir.path()), ["db-00000001.log", "db-00000002.log"]);
    let len = std::fs::metadata(&head).map(|m| m.len()).unwrap_or(0);
    assert_eq!(len, options.segment_size, "the reused head is preallocated again");
    submit_ok(&store, vec![add(&message(5, &q, 4, 100), &[&q])]);
    drop(store);
    let store = open(dir.path(), &options);
    assert_eq!(ids(&store, &q), [1, 2, 3, 5]);
}

#[test]
fn a_full_replay_without_snapshots_reclaims_at_once() {
    let dir = temp_dir();
    // Small files and no checkpoint while running: one run rolls through several files.
    let options = small_options(4096, 1 << 40);
    let q = queue("Q");
    let kept = message(1, &q, 4, 100);
    let store = open(dir.path(), &options);
    submit_ok(&store, vec![add(&kept, &[&q])]);
    for id in 2..200 {
        let m = message(id, &q, 4, 100);
        submit_ok(&store, vec![add(&m, &[&q])]);
        submit_ok(&store, vec![ack(&q, &m)]);
    }
    drop(store);
    let before = data_files(dir.path());
    assert!(before.len() >= 6, "{before:?}");
    let store = open(dir.path(), &options);
    assert_eq!(ids(&store, &q), [1]);
    // Two checkpoints at open: the files without live data went at once; the first file
    // (its live message moved to the head by compaction) goes two checkpoints later.
    assert_eq!(store.stats().checkpoints, 2);
    let after = data_files(dir.path());
    assert!(after.len() <= 2, "files kept after a full replay: {after:?}");
    drop(store);
    let store = open(dir.path(), &options);
    let read = read_all(&store, &q);
    assert_eq!(read.len(), 1);
    assert_eq!(*read[0].message, *kept);
}
