//! Crash tests: a child process writes through the store and is SIGKILLed mid-write; then
//! every unit it saw confirmed is there, no unit is half there, no confirmed ack is undone,
//! and every recovered message reads back as redelivered.
//!
//! The child is this test binary again, running [`crash_child`] (ignored unless started by
//! a crash test with `FERROMQ_JDBC_CRASH_URL` set). It prints one line per confirmed unit,
//! written straight to its stdout (a pipe, so every line written before the kill is read).
//!
//! [`sqlite_power_loss_keeps_every_completed_unit`] runs the SQLite rounds under
//! `store::powercut`: each kill is a power cut (the database directory is replaced by its
//! durable image before the reopen). PostgreSQL has no such test: it is a server with its
//! own durability, which a power cut of our process's machine does not reach.

use std::collections::BTreeSet;
use std::io::{BufRead, BufReader, Write};
use std::path::Path;
use std::process::{Command, Stdio};
use std::sync::Arc;
use std::time::Duration;

use rand::{Rng, SeedableRng};
use store::powercut::PowerCut;

use super::*;
use crate::testing::{PgCluster, SqliteHarness};
use crate::{SqlOptions, SqlStore};

const URL_VAR: &str = "FERROMQ_JDBC_CRASH_URL";
const BASE_VAR: &str = "FERROMQ_JDBC_CRASH_BASE";
const WRITERS: u64 = 4;
const ROUNDS: u64 = 6;
/// Starts each line the child reports on.
const MARK: &str = "@crash@ ";
/// A child nobody killed (its parent died) stops by itself after this long.
const CHILD_LIFETIME: Duration = Duration::from_secs(120);

fn queues(writer: u64) -> (QueueKey, QueueKey) {
    (queue(&format!("CRASH.Q.{writer}")), queue(&format!("CRASH.R.{writer}")))
}

#[test]
#[ignore = "the crash tests' child process; runs only when started by them"]
fn crash_child() {
    let Ok(url) = std::env::var(URL_VAR) else { return };
    let base: u64 = std::env::var(BASE_VAR).ok().and_then(|b| b.parse().ok()).unwrap_or(0);
    let store =
        Arc::new(SqlStore::open(&url, Path::new("/"), SqlOptions::default()).expect("child: open"));
    let say = |line: String| {
        let mut out = std::io::stdout().lock();
        // On a line of its own: libtest's "test ... " has no newline before the first one.
        let _ = writeln!(out, "\n{MARK}{line}");
        let _ = out.flush();
    };
    say("open".into());
    let started = std::time::Instant::now();
    std::thread::scope(|scope| {
        for writer in 0..WRITERS {
            let store = Arc::clone(&store);
            scope.spawn(move || {
                let (q, r) = queues(writer);
                for i in 1.. {
                    if started.elapsed() > CHILD_LIFETIME {
                        return;
                    }
                    let id = base + writer * 100_000 + i;
                    let unit = vec![
                        add(&message(id, &q, 4, 300), &[&q]),
                        add(&message(id + 50_000, &r, 4, 300), &[&r]),
                    ];
                    if submit(store.as_ref(), unit).is_err() {
                        return;
                    }
                    say(format!("added {id}"));
                    if i > 2 && i % 3 == 0 {
                        let victim = id - 2;
                        say(format!("acking {victim}"));
                        if submit(store.as_ref(), vec![ack(&q, victim)]).is_err() {
                            return;
                        }
                        say(format!("acked {victim}"));
                    }
                }
            });
        }
    });
}

#[derive(Default)]
struct Seen {
    added: BTreeSet<u64>,
    acking: BTreeSet<u64>,
    acked: BTreeSet<u64>,
}

/// Kills the child when the test fails before it does.
struct KillOnDrop(std::process::Child);

impl Drop for KillOnDrop {
    fn drop(&mut self) {
        let _ = self.0.kill();
        let _ = self.0.wait();
    }
}

fn run_child(url: &str, base: u64, kill_after: Duration, power_cut: Option<&PowerCut>) -> Seen {
    let exe = std::env::current_exe().expect("the test binary");
    let mut command = Command::new(exe);
    if let Some(cut) = power_cut {
        cut.apply(&mut command).unwrap_or_else(|e| panic!("{e}"));
    }
    let mut child = command
        .args([
            "--exact",
            "tests::crash::crash_child",
            "--ignored",
            "--nocapture",
            "--test-threads=1",
        ])
        .env(URL_VAR, url)
        .env(BASE_VAR, base.to_string())
        .stdin(Stdio::null())
        .stdout(Stdio::piped())
        .stderr(Stdio::inherit())
        .spawn()
        .expect("spawn the child");
    let stdout = child.stdout.take().expect("child stdout");
    let mut child = KillOnDrop(child);
    let (opened_tx, opened_rx) = std::sync::mpsc::channel();
    let reader = std::thread::spawn(move || {
        let mut seen = Seen::default();
        for line in BufReader::new(stdout).lines().map_while(Result::ok) {
            let Some(line) = line.strip_prefix(MARK) else { continue };
            let mut words = line.split_whitespace();
            let (Some(what), id) = (words.next(), words.next().and_then(|w| w.parse::<u64>().ok()))
            else {
                continue;
            };
            match (what, id) {
                ("open", _) => {
                    let _ = opened_tx.send(());
                }
                ("added", Some(id)) => {
                    seen.added.insert(id);
                }
                ("acking", Some(id)) => {
                    seen.acking.insert(id);
                }
                ("acked", Some(id)) => {
                    seen.acked.insert(id);
                }
                _ => {}
            }
        }
        seen
    });
    opened_rx.recv_timeout(Duration::from_secs(60)).expect("the child opened the store");
    std::thread::sleep(kill_after);
    child.0.kill().expect("SIGKILL the child");
    let _ = child.0.wait();
    reader.join().expect("reader")
}

/// [`ROUNDS`] kills of a writing child, each followed by a reopen that checks what it
/// confirmed; under `power_cut`, each kill is a power cut.
fn crash_rounds(url: &str, power_cut: Option<&PowerCut>) {
    let mut rng = rand::rngs::StdRng::seed_from_u64(0x5eed);
    let mut confirmed_ever: BTreeSet<u64> = BTreeSet::new();
    for round in 0..ROUNDS {
        let base = (round + 1) * 10_000_000;
        if let Some(cut) = power_cut {
            cut.arm().unwrap_or_else(|e| panic!("{e}"));
        }
        let kill_after = Duration::from_millis(rng.gen_range(150..700));
        let seen = run_child(url, base, kill_after, power_cut);
        if let Some(cut) = power_cut {
            cut.restore().unwrap_or_else(|e| panic!("{e}"));
        }
        assert!(!seen.added.is_empty(), "round {round}: the child confirmed nothing");
        let store = SqlStore::open(url, Path::new("/"), SqlOptions::default()).expect("reopen");
        let recovered = store.recover().expect("recover");
        let (mut in_q, mut in_r) = (BTreeSet::new(), BTreeSet::new());
        for writer in 0..WRITERS {
            let (q, r) = queues(writer);
            for (id, redelivered) in read_all(&store, &q) {
                assert!(
                    redelivered,
                    "round {round}: message {id} recovered after a crash is not marked redelivered"
                );
                in_q.insert(id);
            }
            in_r.extend(read_all(&store, &r).into_iter().map(|(id, _)| id - 50_000));
        }
        for id in &seen.added {
            assert!(in_r.contains(id), "round {round}: confirmed unit {id} lost");
            if !seen.acking.contains(id) {
                assert!(in_q.contains(id), "round {round}: confirmed unit {id} lost from Q");
            }
        }
        for id in &seen.acked {
            assert!(!in_q.contains(id), "round {round}: confirmed ack of {id} undone");
        }
        for id in in_q.iter().chain(&in_r).filter(|id| **id >= base && !seen.added.contains(id)) {
            assert_eq!(in_q.contains(id), in_r.contains(id), "round {round}: unit {id} half there");
        }
        confirmed_ever.extend(&seen.added);
        let lost: Vec<_> = confirmed_ever.difference(&in_r).collect();
        assert!(lost.is_empty(), "round {round}: confirmed in an earlier round and lost: {lost:?}");
        assert!(
            recovered.next_message_id.0 > seen.added.iter().max().copied().unwrap_or(0) + 50_000
        );
        eprintln!(
            "crash round {round}: {} confirmed units ({} acks) present after {}",
            seen.added.len(),
            seen.acked.len(),
            if power_cut.is_some() { "a power cut" } else { "SIGKILL" }
        );
        if round % 2 == 1 {
            store.close().expect("close");
        }
    }
}

#[test]
fn sqlite_child_killed_mid_write_loses_no_confirmed_unit() {
    let harness = SqliteHarness::new();
    crash_rounds(&harness.url(), None);
}

#[test]
fn sqlite_power_loss_keeps_every_completed_unit() {
    let dir = tempfile::Builder::new().prefix("ferromq-sqlite-power-").tempdir().expect("dir");
    let data = dir.path().join("data");
    let cut = PowerCut::new(&data);
    crash_rounds(&format!("sqlite://{}", data.join("ferromq.db").display()), Some(&cut));
}

#[test]
fn postgres_child_killed_mid_write_loses_no_confirmed_unit() {
    let Some(cluster) = PgCluster::shared() else { return };
    crash_rounds(&cluster.create_database(), None);
}
