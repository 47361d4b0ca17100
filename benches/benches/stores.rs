//! Store-only micro-benchmarks through the contract (`MessageStore`), every store side by
//! side: `cargo bench -p benches --bench stores`.
//!
//! Each writer thread repeats: submit a unit adding one persistent 1 KiB message to its own
//! queue, wait for its completion, submit a unit acking it, wait. Units per second and
//! engine syncs (fsyncs) per unit are measured with 1, 8 and 64 writers under
//! `SyncPolicy::Always`, for a fixed time per configuration (3 s; `--quick`: 0.3 s, what
//! `scripts/test` runs). Output: one line per configuration on stdout and a markdown table
//! in `target/bench-results/stores.md` (or `$CARGO_TARGET_DIR/bench-results`).
//!
//! Adding a store: one more entry in [`stores`], a name and a function that opens it in a
//! directory and returns it with a counter of its syncs. `FERROMQ_BENCH_DIR` names the
//! directory the stores are created in (default: the system's temporary directory).

use std::path::{Path, PathBuf};
use std::sync::atomic::{AtomicBool, AtomicU64, Ordering};
use std::sync::{Arc, Barrier};
use std::time::{Duration, Instant};

use bytes::Bytes;
use store::kit::block_on;
use store::{
    BodyKind, Destination, Message, MessageId, MessageStore, Operation, PageKey, QueueKey,
    SyncPolicy, UnitOfWork,
};

const BODY_SIZE: usize = 1024;
const WRITERS: [usize; 3] = [1, 8, 64];

/// A store opened for the bench, with a way to read its sync counter.
struct Opened {
    store: Arc<dyn MessageStore>,
    syncs: Box<dyn Fn() -> u64>,
}

type Open = fn(&Path) -> Opened;

/// Every store the bench compares, by name.
fn stores() -> Vec<(&'static str, Open)> {
    vec![("journal", open_journal), ("lsm-sled", open_lsm_sled), ("lsm-rocksdb", open_lsm_rocksdb)]
}

fn open_journal(dir: &Path) -> Opened {
    let options = store_journal::JournalOptions { sync: SyncPolicy::Always, ..Default::default() };
    let store = Arc::new(store_journal::JournalStore::open(dir, options).expect("open journal"));
    let counter = Arc::clone(&store);
    Opened { store, syncs: Box::new(move || counter.stats().fsyncs) }
}

fn open_lsm(dir: &Path, engine: store_lsm::EngineKind) -> Opened {
    let options = store_lsm::LsmOptions { engine, sync: SyncPolicy::Always, ..Default::default() };
    let store = Arc::new(store_lsm::LsmStore::open(dir, options).expect("open the LSM store"));
    let counter = Arc::clone(&store);
    Opened { store, syncs: Box::new(move || counter.stats().syncs) }
}

fn open_lsm_sled(dir: &Path) -> Opened {
    open_lsm(dir, store_lsm::EngineKind::Sled)
}

fn open_lsm_rocksdb(dir: &Path) -> Opened {
    open_lsm(dir, store_lsm::EngineKind::RocksDb)
}

fn message(id: u64, queue: &QueueKey, body: &Bytes) -> Arc<Message> {
    let mut message =
        Message::new(MessageId(id), format!("ID:bench-stores:1:1:{id}"), queue.destination.clone());
    message.body_kind = BodyKind::Bytes;
    message.body = body.clone();
    Arc::new(message)
}

struct Row {
    store: &'static str,
    writers: usize,
    units_per_sec: f64,
    syncs_per_unit: f64,
}

/// `writers` threads enqueue and ack for `time`; units per second and syncs per unit.
fn run(name: &'static str, open: Open, writers: usize, time: Duration) -> Row {
    let dir = tempfile::Builder::new()
        .prefix("ferromq-bench-stores-")
        .tempdir_in(bench_dir())
        .expect("a temporary directory");
    let Opened { store, syncs } = open(dir.path());
    let next_id = AtomicU64::new(store.recover().expect("recover").next_message_id.0);
    let body = Bytes::from(vec![0x5Au8; BODY_SIZE]);
    let stop = AtomicBool::new(false);
    let units = AtomicU64::new(0);
    let barrier = Barrier::new(writers + 1);
    let syncs_before = syncs();
    let elapsed = std::thread::scope(|scope| {
        for w in 0..writers {
            let (store, next_id, body, stop, units, barrier) =
                (&store, &next_id, &body, &stop, &units, &barrier);
            scope.spawn(move || {
                let queue = QueueKey::destination(Destination::queue(format!("BENCH.{w}")));
                barrier.wait();
                while !stop.load(Ordering::Relaxed) {
                    let id = next_id.fetch_add(1, Ordering::Relaxed);
                    let message = message(id, &queue, body);
                    let key = PageKey::of(&message);
                    let add =
                        Operation::AddMessage { message, queues: vec![queue.clone()], txn: None };
                    block_on(store.submit(UnitOfWork::with(add))).expect("enqueue");
                    let ack = Operation::Ack { queue: queue.clone(), key, txn: None };
                    block_on(store.submit(UnitOfWork::with(ack))).expect("ack");
                    units.fetch_add(2, Ordering::Relaxed);
                }
            });
        }
        barrier.wait();
        let start = Instant::now();
        std::thread::sleep(time);
        stop.store(true, Ordering::Relaxed);
        start
    });
    let elapsed = elapsed.elapsed();
    let units = units.load(Ordering::Relaxed);
    let synced = syncs() - syncs_before;
    store.close().expect("close");
    Row {
        store: name,
        writers,
        units_per_sec: units as f64 / elapsed.as_secs_f64(),
        syncs_per_unit: synced as f64 / units.max(1) as f64,
    }
}

fn bench_dir() -> PathBuf {
    std::env::var_os("FERROMQ_BENCH_DIR").map(PathBuf::from).unwrap_or_else(std::env::temp_dir)
}

fn results_dir() -> PathBuf {
    let target = std::env::var_os("CARGO_TARGET_DIR")
        .map(PathBuf::from)
        .unwrap_or_else(|| Path::new(env!("CARGO_MANIFEST_DIR")).join("../target"));
    target.join("bench-results")
}

fn main() {
    let args: Vec<String> = std::env::args().skip(1).collect();
    let quick = args.iter().any(|a| a == "--quick");
    // `cargo bench` passes `--bench`; a first argument that is not a flag filters stores.
    let filter = args.iter().find(|a| !a.starts_with('-')).cloned();
    let time = if quick { Duration::from_millis(300) } else { Duration::from_secs(3) };
    let mut rows = Vec::new();
    for (name, open) in stores() {
        if filter.as_deref().is_some_and(|f| !name.contains(f)) {
            continue;
        }
        for writers in WRITERS {
            let row = run(name, open, writers, time);
            println!(
                "store={} writers={} units_per_sec={:.0} fsyncs_per_unit={:.3}",
                row.store, row.writers, row.units_per_sec, row.syncs_per_unit
            );
            rows.push(row);
        }
    }
    let mut table = String::from(
        "| store | writers | units/s (enqueue + ack, 1 KiB, sync always) | fsyncs per unit |\n\
         |---|---:|---:|---:|\n",
    );
    for row in &rows {
        table.push_str(&format!(
            "| {} | {} | {:.0} | {:.3} |\n",
            row.store, row.writers, row.units_per_sec, row.syncs_per_unit
        ));
    }
    let dir = results_dir();
    let written =
        std::fs::create_dir_all(&dir).and_then(|()| std::fs::write(dir.join("stores.md"), &table));
    match written {
        Ok(()) => println!("table written to {}", dir.join("stores.md").display()),
        Err(e) => eprintln!("could not write {}: {e}", dir.display()),
    }
    print!("{table}");
}
