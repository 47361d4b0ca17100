//! Store-only micro-benchmark of the SQL store beside the journal, through the contract.
//!
//! `cargo bench -p benches --bench sql_stores` runs, for the journal, SQLite and PostgreSQL
//! (a throwaway server on loopback, see `store_jdbc::testing::PgCluster`), all under
//! `SyncPolicy::Always`: 1, 8 and 64 writer threads that each, in a loop, submit a unit
//! adding one persistent 1 KiB message to their queue, wait for its completion, then submit
//! and wait for the unit acking it. A fixed number of enqueue+ack pairs per configuration;
//! reported are units per second (an enqueue and an ack count as two units) and syncs per
//! unit (the journal's fdatasyncs; the SQL store's COMMITs, each one sync under `always`),
//! which shows how much group commit shares.
//!
//! PostgreSQL runs twice: as a lone store, and fenced by a lease as a broker of an
//! active/standby pair runs it (`SqlOptions::lease_holder`: each batch's transaction first
//! reads the lease row `FOR SHARE`), so that the fence's cost is a ratio measured in one run.
//!
//! Output: a markdown table on stdout and in `target/bench-results/sql_stores.md`.
//! `-- --quick` (what `scripts/test` passes) runs a tenth of the pairs. Without PostgreSQL
//! installed its rows are skipped with a message (unless `FERROMQ_REQUIRE_POSTGRES` is set).

use std::path::{Path, PathBuf};
use std::sync::Arc;
use std::time::{Duration, Instant};

use bytes::Bytes;
use store::kit::block_on;
use store::{
    BodyKind, Destination, Message, MessageId, MessageStore, Operation, PageKey, QueueKey,
    SyncPolicy, UnitOfWork,
};
use store_jdbc::testing::PgCluster;
use store_jdbc::{Lease, LeaseOptions, SqlOptions, SqlStore};
use store_journal::{JournalOptions, JournalStore};

const BODY_SIZE: usize = 1024;
const WRITERS: [usize; 3] = [1, 8, 64];

/// Enqueue+ack pairs per configuration in a full run (quick mode: a tenth).
fn pairs(writers: usize, quick: bool) -> usize {
    let full = match writers {
        1 => 1_000,
        8 => 4_000,
        _ => 12_800,
    };
    if quick {
        full / 10
    } else {
        full
    }
}

/// One store under test, with how to read its sync counter.
struct Subject {
    name: &'static str,
    store: Arc<dyn MessageStore>,
    syncs: Box<dyn Fn() -> u64>,
    /// Held for the subject's life when its writes are fenced by a lease.
    _lease: Option<Lease>,
}

struct Row {
    store: &'static str,
    writers: usize,
    units: u64,
    elapsed: Duration,
    syncs: u64,
}

fn message(id: u64, queue: &QueueKey) -> Arc<Message> {
    let mut message =
        Message::new(MessageId(id), format!("ID:bench:{id}"), queue.destination.clone());
    message.body_kind = BodyKind::Bytes;
    message.body = Bytes::from(vec![b'x'; BODY_SIZE]);
    Arc::new(message)
}

fn run(subject: &Subject, writers: usize, quick: bool) -> Row {
    let per_writer = pairs(writers, quick) / writers;
    let syncs_before = (subject.syncs)();
    let started = Instant::now();
    std::thread::scope(|scope| {
        for w in 0..writers {
            let store = Arc::clone(&subject.store);
            scope.spawn(move || {
                let queue =
                    QueueKey::destination(Destination::queue(format!("BENCH.{writers}.{w}")));
                for i in 0..per_writer {
                    let id = (writers * 1_000_000 + w * 10_000 + i) as u64 + 1;
                    let m = message(id, &queue);
                    let add = Operation::AddMessage {
                        message: Arc::clone(&m),
                        queues: vec![queue.clone()],
                        txn: None,
                    };
                    block_on(store.submit(UnitOfWork::with(add))).expect("enqueue");
                    let ack =
                        Operation::Ack { queue: queue.clone(), key: PageKey::of(&m), txn: None };
                    block_on(store.submit(UnitOfWork::with(ack))).expect("ack");
                }
            });
        }
    });
    Row {
        store: subject.name,
        writers,
        units: (per_writer * writers * 2) as u64,
        elapsed: started.elapsed(),
        syncs: (subject.syncs)() - syncs_before,
    }
}

fn journal(dir: &Path) -> Subject {
    let options = JournalOptions { sync: SyncPolicy::Always, ..JournalOptions::default() };
    let store =
        Arc::new(JournalStore::open(&dir.join("journal"), options).expect("open the journal"));
    let counter = Arc::clone(&store);
    Subject {
        name: "journal",
        store,
        syncs: Box::new(move || counter.stats().fsyncs),
        _lease: None,
    }
}

fn sql(name: &'static str, url: &str, dir: &Path) -> Subject {
    sql_with(name, url, dir, SqlOptions::default(), None)
}

fn sql_with(
    name: &'static str,
    url: &str,
    dir: &Path,
    options: SqlOptions,
    lease: Option<Lease>,
) -> Subject {
    let store = Arc::new(SqlStore::open(url, dir, options).expect("open the SQL store"));
    let counter = Arc::clone(&store);
    Subject { name, store, syncs: Box::new(move || counter.stats().commits), _lease: lease }
}

/// PostgreSQL with its writes fenced by a lease this bench holds (longer than the run).
fn fenced_postgres(url: &str, dir: &Path) -> Subject {
    let holder = "sql_stores bench".to_owned();
    let options = LeaseOptions {
        holder: holder.clone(),
        predecessor: None,
        duration: Duration::from_secs(3600),
        io_timeout: Duration::from_secs(5),
    };
    let mut lease = Lease::new(url, options).expect("a PostgreSQL url");
    lease.try_acquire().expect("take the lease");
    let options = SqlOptions { lease_holder: Some(holder), ..SqlOptions::default() };
    sql_with("postgres (lease-fenced)", url, dir, options, Some(lease))
}

fn results_dir() -> PathBuf {
    // CARGO_TARGET_DIR when set, else the workspace's target/.
    let target = std::env::var_os("CARGO_TARGET_DIR")
        .map(PathBuf::from)
        .unwrap_or_else(|| Path::new(env!("CARGO_MANIFEST_DIR")).join("../target"));
    target.join("bench-results")
}

fn main() {
    let quick = std::env::args().any(|a| a == "--quick");
    let dir = match std::env::var_os("FERROMQ_BENCH_DIR") {
        Some(base) => tempfile::tempdir_in(base),
        None => tempfile::tempdir(),
    }
    .expect("a temporary directory");
    let cluster = PgCluster::start();
    let mut subjects = vec![journal(dir.path()), sql("sqlite", "sqlite://ferromq.db", dir.path())];
    if let Some(cluster) = &cluster {
        subjects.push(sql("postgres", &cluster.create_database(), dir.path()));
        subjects.push(fenced_postgres(&cluster.create_database(), dir.path()));
    }
    let mut rows = Vec::new();
    // Writer counts outermost: the stores take turns at each, so that a noisy phase of the
    // shared machine hits all of them alike.
    for writers in WRITERS {
        for subject in &subjects {
            let row = run(subject, writers, quick);
            eprintln!(
                "store={} writers={} units={} syncs={} syncs_per_unit={:.3} units_per_sec={:.0}",
                row.store,
                row.writers,
                row.units,
                row.syncs,
                row.syncs as f64 / row.units as f64,
                row.units as f64 / row.elapsed.as_secs_f64()
            );
            rows.push(row);
        }
    }
    for subject in &subjects {
        subject.store.close().expect("close");
    }
    let mut table = String::from(
        "| store | writers | units | units/s | syncs/unit |\n|---|---:|---:|---:|---:|\n",
    );
    for row in &rows {
        table.push_str(&format!(
            "| {} | {} | {} | {:.0} | {:.3} |\n",
            row.store,
            row.writers,
            row.units,
            row.units as f64 / row.elapsed.as_secs_f64(),
            row.syncs as f64 / row.units as f64
        ));
    }
    println!(
        "\nenqueue+ack of 1 KiB persistent messages, sync = always{}\n\n{table}",
        if quick { " (quick mode)" } else { "" }
    );
    let out = results_dir();
    if std::fs::create_dir_all(&out).is_ok() {
        let _ = std::fs::write(out.join("sql_stores.md"), &table);
    }
}
