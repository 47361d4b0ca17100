//! Bad input and a database that goes away: each refuses to start, or fails sends, with a
//! message that says what to fix; nothing confirmed is lost.

use std::collections::BTreeSet;
use std::path::Path;
use std::sync::atomic::{AtomicBool, Ordering};
use std::sync::Arc;
use std::time::{Duration, Instant};

use parking_lot::Mutex;
use store::kit::block_on;
use store::{MessageStore, UnitOfWork};

use super::*;
use crate::testing::{PgCluster, SqliteHarness};
use crate::{SqlOptions, SqlStore};

fn open_error(url: &str) -> String {
    match SqlStore::open(url, Path::new("/"), SqlOptions::default()) {
        Ok(_) => panic!("{url}: the store opened"),
        Err(error) => error.to_string(),
    }
}

#[test]
fn unreachable_postgres_refuses_to_start_with_a_clear_message() {
    // A port nobody listens on: bound, then released.
    let port = std::net::TcpListener::bind("127.0.0.1:0")
        .and_then(|l| l.local_addr())
        .map(|a| a.port())
        .expect("free port");
    let started = Instant::now();
    let error = open_error(&format!("postgres://ferromq:pw@127.0.0.1:{port}/ferromq"));
    assert!(
        error
            .contains(&format!("cannot connect to PostgreSQL at ferromq@127.0.0.1:{port}/ferromq")),
        "{error}"
    );
    assert!(error.to_lowercase().contains("refused"), "{error}");
    assert!(!error.contains(":pw@"), "the password is not shown: {error}");
    assert!(started.elapsed() < Duration::from_secs(10), "refused quickly");
}

#[test]
fn wrong_postgres_credentials_refuse_to_start_with_a_clear_message() {
    let Some(cluster) = PgCluster::shared() else { return };
    let url = cluster.create_database();
    let wrong = url.replace(PgCluster::PASSWORD, "not-the-password");
    let error = open_error(&wrong);
    assert!(error.contains("cannot connect to PostgreSQL"), "{error}");
    assert!(error.contains("password authentication failed"), "{error}");
    let error = open_error(&url.replace("/ferromq_", "/no_such_database_"));
    assert!(error.contains("does not exist"), "{error}");
}

fn newer_schema_is_refused(url: &str, base: &Path) {
    let store = SqlStore::open(url, base, SqlOptions::default()).expect("open");
    let q = queue("SCHEMA");
    submit_ok(&store, vec![add(&message(1, &q, 4, 10), &[&q])]);
    store.close().expect("close");
    drop(store);
    let target = crate::Target::parse(url, base).expect("url");
    let mut db = crate::db::connect(&target, crate::db::Durability::Full).expect("connect");
    db.execute(
        "UPDATE ferromq_schema SET version = ?1",
        &[crate::db::Param::Int(crate::schema::SCHEMA_VERSION + 1)],
    )
    .expect("bump the version");
    drop(db);
    let error = match SqlStore::open(url, base, SqlOptions::default()) {
        Ok(_) => panic!("a newer schema opened"),
        Err(error) => error.to_string(),
    };
    let newer = crate::schema::SCHEMA_VERSION + 1;
    assert!(
        error.contains(&format!("schema version {newer}, newer than this build supports")),
        "{error}"
    );
    assert!(error.contains("upgrade ferromq"), "{error}");
}

#[test]
fn newer_schema_version_refuses_to_start_on_sqlite() {
    let harness = SqliteHarness::new();
    newer_schema_is_refused(&harness.url(), harness.dir());
}

#[test]
fn newer_schema_version_refuses_to_start_on_postgres() {
    let Some(cluster) = PgCluster::shared() else { return };
    newer_schema_is_refused(&cluster.create_database(), Path::new("/"));
}

#[test]
fn sqlite_in_a_directory_that_cannot_be_created_refuses_to_start() {
    // Root ignores permission bits, so a path under a regular file stands in for a
    // directory the broker cannot write.
    let harness = SqliteHarness::new();
    let file = harness.dir().join("not-a-directory");
    std::fs::write(&file, b"x").expect("write");
    let error = open_error(&format!("sqlite://{}/store/ferromq.db", file.display()));
    assert!(error.contains("cannot open the SQLite database"), "{error}");
    assert!(error.contains("cannot create the directory"), "{error}");
}

/// What the writers of [`database_going_away_under_load`] saw.
#[derive(Default)]
struct Ledger {
    confirmed: BTreeSet<u64>,
    failures: Vec<String>,
    confirmed_after_return: usize,
}

#[test]
fn postgres_going_away_under_load_fails_sends_clearly_loses_nothing_and_recovers() {
    let Some(cluster) = PgCluster::start() else { return };
    let url = cluster.create_database();
    let store =
        Arc::new(SqlStore::open(&url, Path::new("/"), SqlOptions::default()).expect("open"));
    let q = queue("AWAY");
    let ledger = Arc::new(Mutex::new(Ledger::default()));
    let stop = Arc::new(AtomicBool::new(false));
    let back = Arc::new(AtomicBool::new(false));
    std::thread::scope(|scope| {
        // The scope joins the writers before a failed assertion below unwinds out of it: stop
        // them on every way out, or a failure (a slow recovery on a loaded machine) would hang
        // the test with its writers looping instead of reporting.
        let _stop_writers = StopOnDrop(Arc::clone(&stop));
        for writer in 0..4u64 {
            let (store, ledger, stop, back, q) = (
                Arc::clone(&store),
                Arc::clone(&ledger),
                Arc::clone(&stop),
                Arc::clone(&back),
                q.clone(),
            );
            scope.spawn(move || {
                let mut i = 0;
                while !stop.load(Ordering::SeqCst) {
                    i += 1;
                    let id = writer * 1_000_000 + i;
                    let was_back = back.load(Ordering::SeqCst);
                    let unit = UnitOfWork::with(add(&message(id, &q, 4, 1024), &[&q]));
                    match block_on(store.submit(unit)) {
                        Ok(()) => {
                            let mut ledger = ledger.lock();
                            ledger.confirmed.insert(id);
                            if was_back {
                                ledger.confirmed_after_return += 1;
                            }
                        }
                        Err(error) => {
                            ledger.lock().failures.push(error.to_string());
                            std::thread::sleep(Duration::from_millis(5));
                        }
                    }
                }
            });
        }
        std::thread::sleep(Duration::from_millis(400));
        let before = ledger.lock().confirmed.len();
        assert!(before > 0, "nothing confirmed before the database went away");
        cluster.stop_server().expect("stop the server");
        // Down until a write has failed (the writers' next submits and the store's first
        // failed write may be slow to come round on a loaded machine), 700 ms at least.
        std::thread::sleep(Duration::from_millis(700));
        let deadline = Instant::now() + Duration::from_secs(10);
        while ledger.lock().failures.is_empty() {
            assert!(Instant::now() < deadline, "sends kept succeeding without a database");
            std::thread::sleep(Duration::from_millis(20));
        }
        cluster.start_server().expect("start the server again");
        back.store(true, Ordering::SeqCst);
        // Generous: the writer's reconnect backoff tops out at 5 s, and CI machines are busy.
        let deadline = Instant::now() + Duration::from_secs(60);
        while ledger.lock().confirmed_after_return < 50 {
            assert!(
                Instant::now() < deadline,
                "the store did not recover once the database came back"
            );
            std::thread::sleep(Duration::from_millis(20));
        }
        stop.store(true, Ordering::SeqCst);
    });
    let ledger = std::mem::take(&mut *ledger.lock());
    let sample = &ledger.failures[0];
    assert!(sample.contains("PostgreSQL"), "the failure names the database: {sample}");
    eprintln!(
        "{} confirmed, {} failed sends while the database was away; first failure: {sample}",
        ledger.confirmed.len(),
        ledger.failures.len()
    );
    let present: BTreeSet<u64> = ids(store.as_ref(), &q).into_iter().collect();
    let lost: Vec<_> = ledger.confirmed.difference(&present).collect();
    assert!(lost.is_empty(), "confirmed and lost: {lost:?}");
    // And after a restart of the store.
    store.close().expect("close");
    drop(store);
    let store = SqlStore::open(&url, Path::new("/"), SqlOptions::default()).expect("reopen");
    let present: BTreeSet<u64> = ids(&store, &q).into_iter().collect();
    assert!(ledger.confirmed.is_subset(&present), "confirmed units lost across a restart");
    store.close().expect("close");
}

#[test]
fn store_opened_while_postgres_is_down_refuses_and_starts_once_it_is_up() {
    let Some(cluster) = PgCluster::start() else { return };
    let url = cluster.create_database();
    cluster.stop_server().expect("stop");
    let error = open_error(&url);
    assert!(error.contains("cannot connect to PostgreSQL"), "{error}");
    cluster.start_server().expect("start");
    let store = SqlStore::open(&url, Path::new("/"), SqlOptions::default()).expect("open once up");
    let q = queue("UP");
    submit_ok(&store, vec![add(&message(1, &q, 4, 10), &[&q])]);
    assert!(matches!(store.close(), Ok(())));
}

/// Sets its flag when dropped, also while a panic unwinds.
struct StopOnDrop(Arc<AtomicBool>);

impl Drop for StopOnDrop {
    fn drop(&mut self) {
        self.0.store(true, Ordering::SeqCst);
    }
}

/// The broker calls the store from its tokio worker threads, where the synchronous
/// PostgreSQL client's own runtime would panic (it aborted the broker's first start on
/// PostgreSQL): open, submit, read, count, recover and close there, and drop a store.
#[test]
fn postgres_store_works_from_inside_a_tokio_runtime() {
    let Some(cluster) = PgCluster::shared() else { return };
    let url = cluster.create_database();
    let runtime = tokio::runtime::Builder::new_current_thread().build().expect("runtime");
    runtime.block_on(async {
        let store = SqlStore::open(&url, Path::new("/"), SqlOptions::default()).expect("open");
        let q = queue("IN.RUNTIME");
        store.submit(UnitOfWork::with(add(&message(1, &q, 4, 10), &[&q]))).await.expect("add");
        assert_eq!(ids(&store, &q), vec![1]);
        assert_eq!(store.count(&q).expect("count"), 1);
        store.recover().expect("recover");
        store.close().expect("close");
        let dropped = SqlStore::open(&url, Path::new("/"), SqlOptions::default()).expect("open");
        assert_eq!(dropped.count(&q).expect("count"), 1);
        drop(dropped);
    });
}
