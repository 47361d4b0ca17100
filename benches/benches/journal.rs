//! Micro-benchmarks of the journal store alone, without the broker.
//!
//! `cargo bench -p benches --bench journal` measures, in one run:
//!
//! 1. the disk: `fdatasync`s a second of 4 KiB writes (overwriting a preallocated file, as the
//!    journal does, and appending), before and after the writer benchmarks, because the
//!    disk of these machines varies with load (BENCHMARKS.md);
//! 2. group commit (criterion): units of work per second, each one `AddMessage` of a 1 KiB
//!    body, with 1, 8 and 64 writer threads that each submit a unit and wait for its
//!    completion before the next, under `SyncPolicy::Always`; and the `fdatasync`s per unit
//!    over each whole configuration (the store's own counter), printed as
//!    `writers=64 units=N fsyncs=M fsyncs_per_unit=X units_per_sec=Y`. The gate: with 64
//!    writers, fewer than 0.1 fsyncs per unit (PASS/FAIL; a failure exits non-zero in a full
//!    run);
//! 3. recovery: N pending 1 KiB messages on one queue (1,000,000 in a full run, 20,000 in
//!    quick mode) written with `SyncPolicy::Never`, then the time of `JournalStore::open` +
//!    `recover()` + `count`, after an unclean stop (the store dropped without `close`, like
//!    a kill: no clean-shutdown marker, the index from the last periodic checkpoint plus the
//!    journal after it) and after a clean one. BENCHMARKS.md aims at 1,000,000 recovered in
//!    under 10 s (reported, not gated).
//!
//! `-- --quick` (what `scripts/test` passes to every bench) uses tiny sample counts and
//! measurement times so the whole binary finishes in well under 30 s. The arguments are read
//! here, not by criterion's command line: a first argument that is not a flag filters the
//! criterion benchmarks by name (`-- writers/64`). `FERROMQ_BENCH_DIR` names the directory
//! the stores are created in (default: the system's temporary directory), so that another
//! disk can be measured.

use std::fs::{File, OpenOptions};
use std::io::Write;
use std::os::unix::fs::FileExt;
use std::path::{Path, PathBuf};
use std::sync::atomic::{AtomicU64, Ordering};
use std::sync::{Arc, Barrier};
use std::time::{Duration, Instant};

use bytes::Bytes;
use criterion::{BenchmarkId, Criterion, Throughput};
use store::kit::block_on;
use store::{
    BodyKind, Completion, Destination, Message, MessageId, MessageStore, Operation, QueueKey,
    SyncPolicy, UnitOfWork,
};
use store_journal::{JournalOptions, JournalStore};

const BODY_SIZE: usize = 1024;
const WRITERS: [usize; 3] = [1, 8, 64];
/// The gate on group commit: with 64 writers, fewer fsyncs than this per unit.
const GATE_WRITERS: usize = 64;
const GATE_FSYNCS_PER_UNIT: f64 = 0.1;
/// Units submitted and not yet completed while the recovery data is written.
const SETUP_WINDOW: usize = 2048;

struct Mode {
    quick: bool,
    filter: Option<String>,
    /// Pending messages for the recovery benchmark.
    recovery_messages: u64,
    /// Runs of each recovery measurement (the median is reported).
    recovery_runs: usize,
    /// How long each raw fsync measurement runs.
    disk_time: Duration,
}

impl Mode {
    fn from_args() -> Mode {
        let args: Vec<String> = std::env::args().skip(1).collect();
        let quick = args.iter().any(|a| a == "--quick");
        let filter = args.iter().find(|a| !a.starts_with('-')).cloned();
        Mode {
            quick,
            filter,
            recovery_messages: if quick { 20_000 } else { 1_000_000 },
            recovery_runs: if quick { 1 } else { 3 },
            disk_time: if quick { Duration::from_millis(300) } else { Duration::from_secs(1) },
        }
    }

    fn criterion(&self) -> Criterion {
        let criterion = if self.quick {
            Criterion::default()
                .sample_size(10)
                .warm_up_time(Duration::from_millis(200))
                .measurement_time(Duration::from_millis(600))
                .without_plots()
        } else {
            Criterion::default()
                .sample_size(20)
                .warm_up_time(Duration::from_secs(2))
                .measurement_time(Duration::from_secs(6))
                .without_plots()
        };
        match &self.filter {
            Some(filter) => criterion.with_filter(filter.clone()),
            None => criterion,
        }
    }
}

fn bench_dir() -> PathBuf {
    std::env::var_os("FERROMQ_BENCH_DIR").map(PathBuf::from).unwrap_or_else(std::env::temp_dir)
}

fn temp_dir(prefix: &str) -> tempfile::TempDir {
    tempfile::Builder::new()
        .prefix(prefix)
        .tempdir_in(bench_dir())
        .expect("create a temporary directory for the bench")
}

// ----- the disk -----

/// `fdatasync`s a second of 4 KiB writes: overwriting a preallocated file (what the journal
/// does in its preallocated segments), then appending to an empty one.
fn disk_fsync_rate(dir: &Path, time: Duration, when: &str) {
    let block = vec![0xA5u8; 4096];
    let slots: u64 = 1024;
    let path = dir.join("fsync-overwrite.bin");
    let file = File::create(&path).expect("create the fsync probe");
    file.set_len(slots * 4096).expect("size the fsync probe");
    file.write_all_at(&vec![0u8; (slots * 4096) as usize], 0).expect("fill the fsync probe");
    file.sync_all().expect("sync the fsync probe");
    let (overwrite_rate, overwrite_mean) = sync_loop(time, |n| {
        file.write_all_at(&block, (n % slots) * 4096).expect("write the fsync probe");
        file.sync_data().expect("fdatasync the fsync probe");
    });
    drop(file);
    let _ = std::fs::remove_file(&path);

    let path = dir.join("fsync-append.bin");
    let mut file =
        OpenOptions::new().create(true).append(true).open(&path).expect("create the append probe");
    let (append_rate, append_mean) = sync_loop(time, |_| {
        file.write_all(&block).expect("append to the probe");
        file.sync_data().expect("fdatasync the append probe");
    });
    drop(file);
    let _ = std::fs::remove_file(&path);
    println!(
        "disk ({when}): {overwrite_rate:.0} fdatasyncs/s of 4 KiB overwrites (mean {:.3} ms), \
         {append_rate:.0}/s of 4 KiB appends (mean {:.3} ms)",
        ms(overwrite_mean),
        ms(append_mean)
    );
}

/// Runs `op(n)` for `time`; returns its rate per second and its mean duration.
fn sync_loop(time: Duration, mut op: impl FnMut(u64)) -> (f64, Duration) {
    let start = Instant::now();
    let mut n = 0;
    while start.elapsed() < time {
        op(n);
        n += 1;
    }
    let elapsed = start.elapsed();
    (n as f64 / elapsed.as_secs_f64(), elapsed / n.max(1) as u32)
}

fn ms(d: Duration) -> f64 {
    d.as_secs_f64() * 1000.0
}

// ----- units -----

fn message(id: u64, queue: &QueueKey, body: &Bytes) -> Arc<Message> {
    let mut message = Message::new(
        MessageId(id),
        format!("ID:bench-journal:1:1:{id}"),
        queue.destination.clone(),
    );
    message.body_kind = BodyKind::Bytes;
    message.body = body.clone();
    Arc::new(message)
}

fn add(id: u64, queue: &QueueKey, body: &Bytes) -> UnitOfWork {
    UnitOfWork::with(Operation::AddMessage {
        message: message(id, queue, body),
        queues: vec![queue.clone()],
        txn: None,
    })
}

fn open(dir: &Path, sync: SyncPolicy) -> JournalStore {
    let options = JournalOptions { sync, ..JournalOptions::default() };
    JournalStore::open(dir, options).expect("open the journal")
}

/// What one writer configuration did over its whole criterion run (warm-up included).
#[derive(Default)]
struct Totals {
    units: AtomicU64,
    nanos: AtomicU64,
}

/// `writers` threads each submit `iters / writers` (or one more) units, one at a time, each
/// awaited; returns the time from their common start to the last completion.
fn run_writers(
    store: &JournalStore,
    writers: usize,
    iters: u64,
    next_id: &AtomicU64,
    queue: &QueueKey,
    body: &Bytes,
) -> Duration {
    let barrier = Barrier::new(writers + 1);
    std::thread::scope(|scope| {
        for writer in 0..writers as u64 {
            let units = iters / writers as u64 + u64::from(writer < iters % writers as u64);
            let barrier = &barrier;
            scope.spawn(move || {
                barrier.wait();
                for _ in 0..units {
                    let id = next_id.fetch_add(1, Ordering::Relaxed);
                    block_on(store.submit(add(id, queue, body))).expect("a unit failed");
                }
            });
        }
        barrier.wait();
        let start = Instant::now();
        // Leaving the scope joins every writer.
        start
    })
    .elapsed()
}

/// Criterion's benchmarks of group commit; returns whether the gate passed.
fn bench_units(criterion: &mut Criterion) -> bool {
    let body = Bytes::from(vec![b'x'; BODY_SIZE]);
    let queue = QueueKey::destination(Destination::queue("bench.journal"));
    let mut results = Vec::new();
    let mut group = criterion.benchmark_group("journal_units");
    group.throughput(Throughput::Elements(1));
    for writers in WRITERS {
        let dir = temp_dir("ferromq-bench-journal-");
        let store = open(dir.path(), SyncPolicy::Always);
        let next_id = AtomicU64::new(1);
        let totals = Totals::default();
        let fsyncs_before = store.fsync_count();
        group.bench_function(BenchmarkId::new("add_1KiB_sync_always_writers", writers), |b| {
            b.iter_custom(|iters| {
                let elapsed = run_writers(&store, writers, iters, &next_id, &queue, &body);
                totals.units.fetch_add(iters, Ordering::Relaxed);
                totals.nanos.fetch_add(elapsed.as_nanos() as u64, Ordering::Relaxed);
                elapsed
            })
        });
        let units = totals.units.load(Ordering::Relaxed);
        if units > 0 {
            let fsyncs = store.fsync_count() - fsyncs_before;
            let per_unit = fsyncs as f64 / units as f64;
            let rate = units as f64 / (totals.nanos.load(Ordering::Relaxed) as f64 / 1e9);
            results.push((writers, units, fsyncs, per_unit, rate));
        }
        store.close().expect("close the journal");
    }
    group.finish();

    println!();
    let mut passed = true;
    for (writers, units, fsyncs, per_unit, rate) in &results {
        println!(
            "writers={writers} units={units} fsyncs={fsyncs} fsyncs_per_unit={per_unit:.4} \
             units_per_sec={rate:.0}"
        );
        if *writers == GATE_WRITERS {
            let pass = *per_unit < GATE_FSYNCS_PER_UNIT;
            passed &= pass;
            println!(
                "gate: writers={writers} fsyncs_per_unit={per_unit:.4} < {GATE_FSYNCS_PER_UNIT}: \
                 {}",
                if pass { "PASS" } else { "FAIL" }
            );
        }
    }
    passed
}

// ----- recovery -----

fn bench_recovery(mode: &Mode) {
    let n = mode.recovery_messages;
    let dir = temp_dir("ferromq-bench-recovery-");
    let queue = QueueKey::destination(Destination::queue("bench.recovery"));
    let body = Bytes::from(vec![b'r'; BODY_SIZE]);

    let setup = Instant::now();
    let store = open(dir.path(), SyncPolicy::Never);
    store.recover().expect("recover the empty journal");
    let mut window: std::collections::VecDeque<Completion> =
        std::collections::VecDeque::with_capacity(SETUP_WINDOW);
    for id in 1..=n {
        if window.len() == SETUP_WINDOW {
            let oldest = window.pop_front().expect("a completion");
            block_on(oldest).expect("a setup unit failed");
        }
        window.push_back(store.submit(add(id, &queue, &body)));
    }
    for completion in window {
        block_on(completion).expect("a setup unit failed");
    }
    let written = setup.elapsed();
    // Dropped without close: like a kill, no clean-shutdown marker and no final checkpoint.
    drop(store);
    let bytes = dir_bytes(dir.path());
    println!(
        "\nrecovery: {n} pending {BODY_SIZE} B messages written in {:.2} s ({:.0} units/s, \
         sync never), {:.1} MiB of data files (preallocated)",
        written.as_secs_f64(),
        n as f64 / written.as_secs_f64(),
        bytes as f64 / (1024.0 * 1024.0)
    );

    let mut unclean = Vec::new();
    let mut clean = Vec::new();
    for run in 0..mode.recovery_runs {
        // After an unclean stop (the previous store was dropped without close).
        let (elapsed, store) = timed_open(dir.path(), &queue, n);
        unclean.push(elapsed);
        if run == 0 {
            println!("recovery: index {:.1} MiB", store.index_heap_bytes() as f64 / 1048576.0);
        }
        store.close().expect("close the journal");
        drop(store);
        // After a clean stop.
        let (elapsed, store) = timed_open(dir.path(), &queue, n);
        clean.push(elapsed);
        drop(store); // unclean again for the next run
    }
    let unclean = median(unclean);
    let clean = median(clean);
    println!(
        "recovery: open + recover + count of {n} pending messages: {:.3} s after an unclean \
         stop, {:.3} s after a clean stop (median of {})",
        unclean.as_secs_f64(),
        clean.as_secs_f64(),
        mode.recovery_runs
    );
    if n >= 1_000_000 {
        println!(
            "recovery aim (BENCHMARKS.md: 1,000,000 pending after kill -9 in under 10 s): {}",
            if unclean < Duration::from_secs(10) { "met" } else { "NOT met" }
        );
    }
}

fn timed_open(dir: &Path, queue: &QueueKey, expected: u64) -> (Duration, JournalStore) {
    let start = Instant::now();
    let store = open(dir, SyncPolicy::Always);
    let recovered = store.recover().expect("recover the journal");
    let count = store.count(queue).expect("count the queue");
    let elapsed = start.elapsed();
    assert_eq!(count, expected, "recovered {count} of {expected} messages");
    assert!(recovered.next_message_id.0 > expected, "next id {:?}", recovered.next_message_id);
    (elapsed, store)
}

fn median(mut values: Vec<Duration>) -> Duration {
    values.sort();
    values[values.len() / 2]
}

fn dir_bytes(dir: &Path) -> u64 {
    std::fs::read_dir(dir)
        .map(|entries| {
            entries
                .filter_map(Result::ok)
                .filter(|e| e.file_name().to_string_lossy().ends_with(".log"))
                .filter_map(|e| e.metadata().ok())
                .map(|m| m.len())
                .sum()
        })
        .unwrap_or(0)
}

fn main() {
    let mode = Mode::from_args();
    println!(
        "journal benchmarks ({} mode) in {}",
        if mode.quick { "quick" } else { "full" },
        bench_dir().display()
    );
    let probe = temp_dir("ferromq-bench-disk-");
    disk_fsync_rate(probe.path(), mode.disk_time, "before");

    let mut criterion = mode.criterion();
    let passed = bench_units(&mut criterion);
    criterion.final_summary();
    disk_fsync_rate(probe.path(), mode.disk_time, "after the writer benchmarks");

    let recovery_selected = match mode.filter.as_deref() {
        Some(filter) => "recovery".contains(filter),
        None => true,
    };
    if recovery_selected {
        bench_recovery(&mode);
    }
    if !passed && !mode.quick {
        eprintln!("journal bench: the group commit gate failed");
        std::process::exit(1);
    }
}
