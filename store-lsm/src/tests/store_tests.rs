//! Behaviour of the LSM store beyond the kit: group commit, the size limit, redelivery
//! after an unclean stop, the schema check, and recovery time of many references.

use std::time::{Duration, Instant};

use store::{MessageStore, StoreError, SyncPolicy};

use super::*;
use crate::{EngineKind, LsmOptions, LsmStore};

fn temp_dir() -> tempfile::TempDir {
    tempfile::Builder::new()
        .prefix("ferromq-lsm-test-")
        .tempdir()
        .unwrap_or_else(|e| panic!("temporary directory: {e}"))
}

fn open(dir: &std::path::Path, options: LsmOptions) -> LsmStore {
    LsmStore::open(dir, options).unwrap_or_else(|e| panic!("open: {e}"))
}

#[test]
fn concurrent_writers_share_syncs() {
    for engine in engines() {
        let dir = temp_dir();
        let store = Arc::new(open(dir.path(), LsmOptions { engine, ..LsmOptions::default() }));
        let writers = 32;
        let per_writer = 40;
        std::thread::scope(|scope| {
            for w in 0..writers {
                let store = Arc::clone(&store);
                scope.spawn(move || {
                    let q = queue(&format!("Q.{w}"));
                    for i in 0..per_writer {
                        let m = message(1 + w * 1000 + i, &q, 4, 1024);
                        submit(store.as_ref(), vec![add(&m, &[&q])]).expect("add");
                        submit(store.as_ref(), vec![ack_id(&q, m.id.0)]).expect("ack");
                    }
                });
            }
        });
        let stats = store.stats();
        let units = (writers * per_writer * 2) as f64;
        let per_unit = stats.syncs as f64 / units;
        eprintln!("{}: {stats:?}, {per_unit:.3} syncs per unit", engine.name());
        assert_eq!(stats.units, units as u64);
        assert!(per_unit < 0.7, "{}: {per_unit} syncs per unit: no group commit", engine.name());
        store.close().expect("close");
    }
}

#[test]
fn max_size_refuses_adds_but_acks_still_work() {
    for engine in engines() {
        let dir = temp_dir();
        let options = LsmOptions { engine, max_size: 8 * 1024, ..LsmOptions::default() };
        let store = open(dir.path(), options.clone());
        let q = queue("FULL");
        let mut id = 1;
        let full = loop {
            match submit(&store, vec![add(&message(id, &q, 4, 1000), &[&q])]) {
                Ok(()) => id += 1,
                Err(e) => break e,
            }
            assert!(id < 100, "{}: the limit never tripped", engine.name());
        };
        assert!(matches!(full, StoreError::Full { .. }), "{}: {full}", engine.name());
        assert!(store.usage().used_bytes <= 8 * 1024);
        assert_eq!(store.usage().limit_bytes, 8 * 1024);
        submit(&store, vec![ack_id(&q, 1), ack_id(&q, 2)]).expect("acks work when full");
        submit(&store, vec![add(&message(id, &q, 4, 1000), &[&q])]).expect("room again");
        store.close().expect("close");
        drop(store);
        let store = open(dir.path(), options);
        assert_eq!(store.count(&q).expect("count"), id - 2);
        let used = store.usage().used_bytes;
        assert!(used > 0 && used <= 8 * 1024, "recovered usage {used}");
    }
}

#[test]
fn messages_are_redelivered_after_an_unclean_stop_only() {
    for engine in engines() {
        let dir = temp_dir();
        let options = LsmOptions { engine, ..LsmOptions::default() };
        let q = queue("REDELIVER");
        let store = open(dir.path(), options.clone());
        submit(&store, vec![add(&message(1, &q, 4, 10), &[&q])]).expect("add");
        drop(store); // no close: an unclean stop
        let store = open(dir.path(), options.clone());
        submit(&store, vec![add(&message(2, &q, 4, 10), &[&q])]).expect("add");
        assert_eq!(read_all(&store, &q), vec![(1, true), (2, false)], "{}", engine.name());
        store.close().expect("close");
        drop(store);
        let store = open(dir.path(), options);
        assert_eq!(read_all(&store, &q), vec![(1, false), (2, false)], "{}", engine.name());
    }
}

#[test]
fn schema_from_a_newer_version_is_refused() {
    for engine in engines() {
        let dir = temp_dir();
        {
            let raw = engine.open(dir.path()).expect("engine");
            let mut batch = crate::WriteBatch::new();
            batch.put(crate::keys::SCHEMA.to_vec(), 99u32.to_be_bytes().to_vec());
            raw.write(batch).expect("write");
            raw.sync().expect("sync");
        }
        let error = LsmStore::open(dir.path(), LsmOptions { engine, ..LsmOptions::default() })
            .expect_err("a newer schema must be refused");
        assert!(error.to_string().contains("schema version is 99"), "{error}");
    }
}

#[test]
fn periodic_and_never_policies_complete_and_persist() {
    for engine in engines() {
        for sync in [SyncPolicy::Periodic(Duration::from_millis(20)), SyncPolicy::Never] {
            let dir = temp_dir();
            let options = LsmOptions { engine, sync, ..LsmOptions::default() };
            let store = open(dir.path(), options.clone());
            let q = queue("P");
            for id in 1..=20 {
                submit(&store, vec![add(&message(id, &q, 4, 100), &[&q])]).expect("add");
            }
            std::thread::sleep(Duration::from_millis(50));
            if matches!(sync, SyncPolicy::Periodic(_)) {
                assert!(store.stats().syncs >= 1, "periodic policy never synced");
            }
            store.close().expect("close");
            drop(store);
            let store = open(dir.path(), options);
            assert_eq!(store.count(&q).expect("count"), 20);
        }
    }
}

/// Recovery is a scan of the reference keys; this measures it for many references
/// (`FERROMQ_LSM_RECOVERY_MESSAGES`, default 1,000,000; run in release:
/// `cargo test --release -p store-lsm -- --ignored recovery_of_many --nocapture`).
#[test]
#[ignore]
fn recovery_of_many_references_is_a_key_scan() {
    let total: u64 = std::env::var("FERROMQ_LSM_RECOVERY_MESSAGES")
        .ok()
        .and_then(|v| v.parse().ok())
        .unwrap_or(1_000_000);
    for engine in engines() {
        let dir = temp_dir();
        let options = LsmOptions { engine, sync: SyncPolicy::Never, ..LsmOptions::default() };
        let store = open(dir.path(), options.clone());
        let q = queue("DEEP");
        let started = Instant::now();
        let mut id = 1;
        while id <= total {
            let unit: Vec<_> = (id..(id + 1000).min(total + 1))
                .map(|i| add(&message(i, &q, 4, 100), &[&q]))
                .collect();
            id += unit.len() as u64;
            let completion = store.submit(store::UnitOfWork { operations: unit, lazy: false });
            if let Some(backlog) = store.backlog() {
                while backlog.is_full() {
                    std::thread::sleep(Duration::from_millis(1));
                }
            }
            drop(completion);
        }
        store.close().expect("close");
        drop(store);
        let written = started.elapsed();
        let started = Instant::now();
        let store = open(dir.path(), options);
        let recovered = started.elapsed();
        assert_eq!(store.count(&q).expect("count"), total);
        eprintln!(
            "{}: {total} messages written in {written:?}, recovered in {recovered:?}",
            engine.name()
        );
    }
}

#[test]
fn engine_kind_names() {
    assert_eq!(EngineKind::Sled.name(), "sled");
    assert_eq!(EngineKind::RocksDb.name(), "rocksdb");
}
