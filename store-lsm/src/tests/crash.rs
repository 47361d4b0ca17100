//! Crash tests: a child process (this test binary, running [`crash_child`]) writes to a
//! store with several threads and prints a ledger line for every unit submitted and every
//! unit confirmed; the parent SIGKILLs it at a random moment, reopens the store and checks
//! that every confirmed unit is there whole, that no unit is half there, that no confirmed
//! ack is undone, and that recovered messages are marked redelivered. Several rounds run on
//! one directory, so that recovery after a kill is itself killed into.
//!
//! A SIGKILL loses what the process held (the writer's queue, sled's unflushed buffers),
//! not the OS page cache, so it tests the store's own ordering: a completion resolves only
//! after its batch reached the engine and was synced.
//!
//! [`power_loss_keeps_every_completed_unit`] runs the same child under `store::powercut`
//! (an `LD_PRELOAD` library keeping the durable image of the data directory: data durable
//! only once its file is fsynced, names once their directory is), and after each kill
//! replaces the directory by that image, as if the power had gone: the same checks hold.

use std::collections::{BTreeMap, BTreeSet};
use std::io::{BufRead, BufReader, Write};
use std::process::{Command, Stdio};
use std::time::Duration;

use rand::{Rng, SeedableRng};
use store::powercut::PowerCut;

use super::*;
use crate::{EngineKind, LsmOptions, LsmStore};

const DIR_ENV: &str = "FERROMQ_LSM_CRASH_DIR";
const ENGINE_ENV: &str = "FERROMQ_LSM_CRASH_ENGINE";
const THREADS: u64 = 4;
const ROUNDS: u64 = 6;

fn engine_from(name: &str) -> EngineKind {
    match name {
        "rocksdb" => EngineKind::RocksDb,
        _ => EngineKind::Sled,
    }
}

/// The child's workload; does nothing unless started by [`kill_9_rounds_keep_every_confirmed_unit`].
#[test]
#[ignore]
fn crash_child() {
    let (Ok(dir), Ok(engine)) = (std::env::var(DIR_ENV), std::env::var(ENGINE_ENV)) else {
        return;
    };
    let options = LsmOptions { engine: engine_from(&engine), ..LsmOptions::default() };
    let store = Arc::new(LsmStore::open(std::path::Path::new(&dir), options).expect("open"));
    let base = store.recover().expect("recover").next_message_id.0;
    let out = Arc::new(parking_lot::Mutex::new(std::io::stdout()));
    let ledger = |line: String| {
        let mut out = out.lock();
        let _ = writeln!(out, "ledger {line}");
        let _ = out.flush();
    };
    std::thread::scope(|scope| {
        for t in 0..THREADS {
            let store = Arc::clone(&store);
            let ledger = &ledger;
            scope.spawn(move || {
                let (q, r) = (queue(&format!("Q.{t}")), queue(&format!("R.{t}")));
                let mut i = 0u64;
                loop {
                    i += 1;
                    let id = base + t * 1_000_000 + i;
                    ledger(format!("submit {t} {id}"));
                    // One unit, two queues: Q.t's reference may be acked later, R.t's never.
                    let m = message(id, &q, 4, 300);
                    if submit(store.as_ref(), vec![add(&m, &[&q, &r])]).is_err() {
                        return;
                    }
                    ledger(format!("added {t} {id}"));
                    if i > 2 && i.is_multiple_of(2) {
                        let victim = id - 2;
                        ledger(format!("ack-submit {t} {victim}"));
                        if submit(store.as_ref(), vec![ack_id(&q, victim)]).is_err() {
                            return;
                        }
                        ledger(format!("acked {t} {victim}"));
                    }
                }
            });
        }
    });
}

#[derive(Default)]
struct Ledger {
    submitted: BTreeSet<u64>,
    added: BTreeSet<u64>,
    ack_submitted: BTreeSet<u64>,
    acked: BTreeSet<u64>,
}

fn run_child(
    dir: &std::path::Path,
    engine: EngineKind,
    kill_after: Duration,
    power_cut: Option<&PowerCut>,
) -> BTreeMap<u64, Ledger> {
    let exe = std::env::current_exe().expect("test binary");
    let mut command = Command::new(exe);
    command
        .args([
            "--exact",
            "tests::crash::crash_child",
            "--ignored",
            "--nocapture",
            "--test-threads=1",
        ])
        .env(DIR_ENV, dir)
        .env(ENGINE_ENV, engine.name())
        .stdout(Stdio::piped())
        .stderr(Stdio::null());
    if let Some(cut) = power_cut {
        cut.apply(&mut command).unwrap_or_else(|e| panic!("{e}"));
    }
    let mut child = command.spawn().expect("spawn the child");
    let stdout = child.stdout.take().expect("child stdout");
    let reader = std::thread::spawn(move || {
        let mut ledgers: BTreeMap<u64, Ledger> = BTreeMap::new();
        for line in BufReader::new(stdout).lines() {
            let Ok(line) = line else { break };
            let parts: Vec<&str> = line.split_whitespace().collect();
            let [_, what, t, id] = parts[..] else { continue };
            let (Ok(t), Ok(id)) = (t.parse::<u64>(), id.parse::<u64>()) else { continue };
            let ledger = ledgers.entry(t).or_default();
            match what {
                "submit" => ledger.submitted.insert(id),
                "added" => ledger.added.insert(id),
                "ack-submit" => ledger.ack_submitted.insert(id),
                "acked" => ledger.acked.insert(id),
                _ => false,
            };
        }
        ledgers
    });
    std::thread::sleep(kill_after);
    child.kill().expect("SIGKILL the child");
    let _ = child.wait();
    reader.join().expect("ledger reader")
}

#[test]
fn kill_9_rounds_keep_every_confirmed_unit() {
    let mut rng = seeded_rng();
    for engine in engines() {
        let dir = tempfile::Builder::new().prefix("ferromq-lsm-crash-").tempdir().expect("dir");
        crash_rounds(engine, dir.path(), None, &mut rng);
    }
}

/// The kill -9 rounds with the power cut at each kill: the data directory is replaced by its
/// durable image (`store::powercut`) before the store is reopened.
#[test]
fn power_loss_keeps_every_completed_unit() {
    let mut rng = seeded_rng();
    for engine in engines() {
        let dir = tempfile::Builder::new().prefix("ferromq-lsm-power-").tempdir().expect("dir");
        let data = dir.path().join("data");
        let cut = PowerCut::new(&data);
        crash_rounds(engine, &data, Some(&cut), &mut rng);
    }
}

fn seeded_rng() -> rand::rngs::StdRng {
    let seed: u64 = std::env::var("FERROMQ_CRASH_SEED")
        .ok()
        .and_then(|s| s.parse().ok())
        .unwrap_or_else(|| rand::thread_rng().gen());
    eprintln!("crash seed {seed} (FERROMQ_CRASH_SEED replays the delays)");
    rand::rngs::StdRng::seed_from_u64(seed)
}

/// [`ROUNDS`] kills of a writing child on `dir`, each followed by a reopen that checks the
/// ledger; under `power_cut`, each kill is a power cut.
fn crash_rounds(
    engine: EngineKind,
    dir: &std::path::Path,
    power_cut: Option<&PowerCut>,
    rng: &mut rand::rngs::StdRng,
) {
    let what = if power_cut.is_some() { "power cut" } else { "crash" };
    // Per thread: every unit ever confirmed (its R.t reference is never acked).
    let mut confirmed_ever: BTreeMap<u64, BTreeSet<u64>> = BTreeMap::new();
    let mut acked_ever: BTreeSet<u64> = BTreeSet::new();
    for round in 0..ROUNDS {
        // Every third round kills early, while the child opens and recovers.
        let delay = if round % 3 == 2 { rng.gen_range(5..60) } else { rng.gen_range(300..900) };
        if let Some(cut) = power_cut {
            cut.arm().unwrap_or_else(|e| panic!("{e}"));
        }
        let ledgers = run_child(dir, engine, Duration::from_millis(delay), power_cut);
        if let Some(cut) = power_cut {
            cut.restore().unwrap_or_else(|e| panic!("{e}"));
        }
        let store = LsmStore::open(dir, LsmOptions { engine, ..LsmOptions::default() })
            .unwrap_or_else(|e| panic!("{} round {round}: reopen failed: {e}", engine.name()));
        let mut confirmed = 0;
        for (t, ledger) in &ledgers {
            let (q, r) = (queue(&format!("Q.{t}")), queue(&format!("R.{t}")));
            let in_q_flags = read_all(&store, &q);
            let in_r_flags = read_all(&store, &r);
            assert!(
                in_q_flags.iter().chain(&in_r_flags).all(|(_, redelivered)| *redelivered),
                "{} round {round}: a recovered message is not marked redelivered",
                engine.name()
            );
            let in_q: BTreeSet<u64> = in_q_flags.into_iter().map(|(id, _)| id).collect();
            let in_r: BTreeSet<u64> = in_r_flags.into_iter().map(|(id, _)| id).collect();
            for id in &ledger.submitted {
                if ledger.added.contains(id) {
                    confirmed += 1;
                    assert!(
                        in_r.contains(id),
                        "{} {what} round {round}: confirmed {id} lost",
                        engine.name()
                    );
                    if !ledger.ack_submitted.contains(id) {
                        assert!(
                            in_q.contains(id),
                            "{} {what} round {round}: confirmed {id} lost from Q",
                            engine.name()
                        );
                    }
                } else if !ledger.ack_submitted.contains(id) {
                    assert_eq!(
                        in_q.contains(id),
                        in_r.contains(id),
                        "{} {what} round {round}: unit {id} half there",
                        engine.name()
                    );
                }
            }
            acked_ever.extend(ledger.acked.iter().copied());
            let resurrected: Vec<&u64> = acked_ever.intersection(&in_q).collect();
            assert!(
                resurrected.is_empty(),
                "{} {what} round {round}: acked came back: {resurrected:?}",
                engine.name()
            );
            let ever = confirmed_ever.entry(*t).or_default();
            ever.extend(ledger.added.iter().copied());
            let lost: Vec<&u64> = ever.difference(&in_r).collect();
            assert!(
                lost.is_empty(),
                "{} {what} round {round}: confirmed earlier, lost: {lost:?}",
                engine.name()
            );
        }
        eprintln!(
            "{} {what} round {round} (kill after {delay} ms): {confirmed} confirmed units present",
            engine.name()
        );
        // A clean close between some rounds, a drop (unclean) between others.
        if round % 2 == 1 {
            store.close().expect("close");
        }
    }
}
