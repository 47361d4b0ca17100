//! The crash and power-loss harness every store engine runs: a writer is killed mid-write,
//! the store is reopened, and what the writer saw confirmed is checked against what the
//! store holds. One copy here, so that every engine is held to the same checks.
//!
//! **The workload** ([`write()`]): [`WRITERS`] threads submit units through the
//! [`MessageStore`] contract. A unit of writer `w` adds message `id` to the queues
//! `CRASH.Q.w` and `CRASH.R.w` and message `id + 1` to `CRASH.R.w`; now and then a writer
//! acks an earlier confirmed unit's reference in `CRASH.Q.w` (never in `CRASH.R.w`). Each
//! step is reported as an [`Event`] before it is submitted and after its completion.
//!
//! **The child** ([`child`]): an engine's crash tests start their own test binary again,
//! running an `#[ignore]`d `crash_child` test that opens the store at the location its
//! environment names and calls [`child`]: it recovers, then writes and prints each event on
//! stdout as a ledger line starting with a marker (libtest's own output is ignored). A child
//! nobody kills (its parent died) stops writing after [`CHILD_LIFETIME`].
//!
//! **The parent** ([`Child::rounds`]): [`ROUNDS`] rounds on one location. Each starts the
//! child, reads its ledger, SIGKILLs it after a random delay (every third round early, while
//! it opens and recovers), optionally as a power cut ([`PowerCut`]: the data directory is
//! replaced by its durable image after the kill), reopens the store with the engine's
//! closure and checks ([`History::check`]):
//!
//! - every unit confirmed, in this round or an earlier one, is there whole (its reference
//!   in Q unless an ack of it was submitted), and so is every unit a reopen saw whole;
//! - no unit is half there, and nothing is there that was never submitted;
//! - no confirmed ack is undone (an acked reference never comes back), nor any ack a reopen
//!   saw applied;
//! - every recovered message is marked redelivered (unless the child may have been killed
//!   before it opened a store closed cleanly);
//! - the recovered `next_message_id` is above every id confirmed or present.
//!
//! The reopened store is closed cleanly after odd rounds and dropped after even ones. The
//! delays come from a seed, printed by every run; `FERROMQ_CRASH_SEED` replays it.
//!
//! An engine that can lose power within its own process (the journal's simulated disk)
//! runs the same rounds with [`rounds`] and [`in_process`] instead of a child.

use std::collections::{BTreeMap, BTreeSet};
use std::ffi::{OsStr, OsString};
use std::io::{BufRead, BufReader, Write};
use std::process::{Command, Stdio};
use std::sync::atomic::{AtomicBool, Ordering};
use std::sync::{mpsc, Arc};
use std::time::{Duration, Instant};

use parking_lot::Mutex;
use rand::rngs::StdRng;
use rand::{Rng, SeedableRng};

use super::units::{ack_id, add, message, queue, read_flags, submit};
use crate::contract::{MessageStore, QueueKey};
use crate::powercut::PowerCut;

/// Names the seed of the delays to replay.
pub const SEED_ENV: &str = "FERROMQ_CRASH_SEED";
/// Writer threads of the workload.
pub const WRITERS: u64 = 4;
/// Kills (or power cuts) per test, on one location.
pub const ROUNDS: u64 = 6;
/// A child nobody killed stops writing after this long.
pub const CHILD_LIFETIME: Duration = Duration::from_secs(120);
/// How long the parent waits for the child to open the store.
const OPEN_TIMEOUT: Duration = Duration::from_secs(60);
/// Starts each ledger line the child prints.
const MARK: &str = "@crash@ ";
/// The ids of writer `w` start at `base + w * WRITER_IDS`.
const WRITER_IDS: u64 = 1_000_000;
const BODY_LEN: usize = 300;

/// The two queues of `writer`: Q's references are acked now and then, R's never.
pub fn queues(writer: u64) -> (QueueKey, QueueKey) {
    (queue(&format!("CRASH.Q.{writer}")), queue(&format!("CRASH.R.{writer}")))
}

/// One step of the workload, as the ledger records it.
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub enum Event {
    /// The store is open and recovered; the writers start.
    Opened,
    /// Unit `id` is about to be submitted.
    Submitting { writer: u64, id: u64 },
    /// Unit `id` completed successfully.
    Added { writer: u64, id: u64 },
    /// The ack of unit `id`'s reference in Q is about to be submitted.
    Acking { writer: u64, id: u64 },
    /// That ack completed successfully.
    Acked { writer: u64, id: u64 },
}

impl Event {
    fn line(self) -> String {
        match self {
            Event::Opened => "open".into(),
            Event::Submitting { writer, id } => format!("submitting {writer} {id}"),
            Event::Added { writer, id } => format!("added {writer} {id}"),
            Event::Acking { writer, id } => format!("acking {writer} {id}"),
            Event::Acked { writer, id } => format!("acked {writer} {id}"),
        }
    }

    fn parse(line: &str) -> Option<Event> {
        let mut words = line.split_whitespace();
        let what = words.next()?;
        if what == "open" {
            return Some(Event::Opened);
        }
        let writer = words.next()?.parse().ok()?;
        let id = words.next()?.parse().ok()?;
        Some(match what {
            "submitting" => Event::Submitting { writer, id },
            "added" => Event::Added { writer, id },
            "acking" => Event::Acking { writer, id },
            "acked" => Event::Acked { writer, id },
            _ => return None,
        })
    }

    /// The writer this event is about, if any.
    pub fn writer(self) -> Option<u64> {
        match self {
            Event::Opened => None,
            Event::Submitting { writer, .. }
            | Event::Added { writer, .. }
            | Event::Acking { writer, .. }
            | Event::Acked { writer, .. } => Some(writer),
        }
    }
}

/// What one writer did: unit ids submitted and confirmed, acks submitted and confirmed.
#[derive(Clone, Debug, Default)]
pub struct WriterLedger {
    pub submitted: BTreeSet<u64>,
    pub added: BTreeSet<u64>,
    pub acking: BTreeSet<u64>,
    pub acked: BTreeSet<u64>,
}

impl WriterLedger {
    fn extend(&mut self, other: &WriterLedger) {
        self.submitted.extend(&other.submitted);
        self.added.extend(&other.added);
        self.acking.extend(&other.acking);
        self.acked.extend(&other.acked);
    }
}

/// What one life of the workload did.
#[derive(Clone, Debug, Default)]
pub struct Ledger {
    /// The store was opened and recovered.
    pub opened: bool,
    pub writers: BTreeMap<u64, WriterLedger>,
}

impl Ledger {
    pub fn record(&mut self, event: Event) {
        let Some(writer) = event.writer() else {
            self.opened = true;
            return;
        };
        let done = self.writers.entry(writer).or_default();
        match event {
            Event::Opened => false,
            Event::Submitting { id, .. } => done.submitted.insert(id),
            Event::Added { id, .. } => done.added.insert(id),
            Event::Acking { id, .. } => done.acking.insert(id),
            Event::Acked { id, .. } => done.acked.insert(id),
        };
    }

    /// Units confirmed in this life.
    pub fn confirmed(&self) -> usize {
        self.writers.values().map(|w| w.added.len()).sum()
    }
}

/// The workload: [`WRITERS`] threads write units with ids from `base` while `keep_going`
/// holds and the store accepts them, reporting each step to `report` (see the module
/// documentation). Returns when every writer has stopped.
pub fn write(
    store: &Arc<dyn MessageStore>,
    base: u64,
    keep_going: &(dyn Fn() -> bool + Sync),
    report: &(dyn Fn(Event) + Sync),
) {
    std::thread::scope(|scope| {
        for writer in 0..WRITERS {
            let store = store.as_ref();
            scope.spawn(move || {
                let (q, r) = queues(writer);
                let first = base + writer * WRITER_IDS;
                for i in 1u64.. {
                    if !keep_going() {
                        return;
                    }
                    let id = first + 2 * i;
                    let unit = vec![
                        add(&message(id, &q, 4, BODY_LEN), &[&q, &r]),
                        add(&message(id + 1, &r, 4, BODY_LEN), &[&r]),
                    ];
                    report(Event::Submitting { writer, id });
                    if submit(store, unit).is_err() {
                        return;
                    }
                    report(Event::Added { writer, id });
                    if i > 2 && i % 2 == 0 {
                        let victim = id - 4;
                        report(Event::Acking { writer, id: victim });
                        if submit(store, vec![ack_id(&q, victim)]).is_err() {
                            return;
                        }
                        report(Event::Acked { writer, id: victim });
                    }
                }
            });
        }
    });
}

/// The child's side: recovers `store` (just opened by the engine's `crash_child` test) and
/// writes, printing every event as a ledger line, until killed or [`CHILD_LIFETIME`] ends.
pub fn child(store: Arc<dyn MessageStore>) {
    let started = Instant::now();
    let recovered = store.recover().unwrap_or_else(|e| panic!("crash child: recover: {e}"));
    let say = |event: Event| {
        let mut out = std::io::stdout().lock();
        // On a line of its own: libtest's "test ... " has no newline before the first one.
        let _ = writeln!(out, "\n{MARK}{}", event.line());
        let _ = out.flush();
    };
    say(Event::Opened);
    write(&store, recovered.next_message_id.0, &|| started.elapsed() < CHILD_LIFETIME, &say);
}

/// One life of the workload, as the rounds ask for it.
#[derive(Clone, Copy, Debug)]
pub struct Life {
    pub round: u64,
    /// Killed while it opens and recovers (the delay counts from the start), not writing.
    pub early: bool,
    /// When to kill it: after the store is open, or (early) after the start.
    pub kill_after: Duration,
}

/// One life in this process, for an engine that loses power in-process: recovers `store`,
/// writes, and after `kill_after` calls `power_off` (from then on the store must fail every
/// unit, as a simulated disk that lost power does) and stops the writers. `observe` sees
/// every event before the ledger records it (to check something of the engine at each).
pub fn in_process(
    store: Arc<dyn MessageStore>,
    kill_after: Duration,
    power_off: impl FnOnce(),
    observe: &(dyn Fn(Event) + Sync),
) -> Ledger {
    let recovered = store.recover().unwrap_or_else(|e| panic!("recover: {e}"));
    let ledger = Mutex::new(Ledger { opened: true, ..Ledger::default() });
    let stop = AtomicBool::new(false);
    std::thread::scope(|scope| {
        scope.spawn(|| {
            let report = |event: Event| {
                observe(event);
                ledger.lock().record(event);
            };
            write(&store, recovered.next_message_id.0, &|| !stop.load(Ordering::SeqCst), &report);
        });
        std::thread::sleep(kill_after);
        power_off();
        stop.store(true, Ordering::SeqCst);
    });
    ledger.into_inner()
}

/// The child process of an engine's crash tests: its test binary again, running one test
/// (the engine's `crash_child`) with the environment naming the store's location.
pub struct Child<'a> {
    test: String,
    env: Vec<(String, OsString)>,
    power_cut: Option<&'a PowerCut>,
}

/// Kills the child when the test fails before it does.
struct KillOnDrop(std::process::Child);

impl Drop for KillOnDrop {
    fn drop(&mut self) {
        let _ = self.0.kill();
        let _ = self.0.wait();
    }
}

impl<'a> Child<'a> {
    /// The child runs `test` (its full path, e.g. `tests::crash::crash_child`) of the
    /// current test binary.
    pub fn new(test: &str) -> Self {
        Child { test: test.into(), env: Vec::new(), power_cut: None }
    }

    /// Sets `key` in the child's environment (where the store is, engine options).
    pub fn env(mut self, key: &str, value: impl AsRef<OsStr>) -> Self {
        self.env.push((key.into(), value.as_ref().to_owned()));
        self
    }

    /// Every kill is a power cut of `cut`'s data directory.
    pub fn power_cut(mut self, cut: &'a PowerCut) -> Self {
        self.power_cut = Some(cut);
        self
    }

    /// Runs [`ROUNDS`] rounds of this child on one location, each followed by a reopen
    /// with `reopen` and the checks; `label` names the engine in messages.
    pub fn rounds(&self, label: &str, reopen: impl FnMut() -> Arc<dyn MessageStore>) {
        let what = if self.power_cut.is_some() { "power cut" } else { "kill -9" };
        rounds(&format!("{label} {what}"), |life| self.life(life), reopen);
    }

    /// Starts the child, reads its ledger and kills it as `life` says (under the power
    /// cut, the data directory is its durable image afterwards).
    pub fn life(&self, life: &Life) -> Ledger {
        if let Some(cut) = self.power_cut {
            cut.arm().unwrap_or_else(|e| panic!("{e}"));
        }
        let mut command =
            Command::new(std::env::current_exe().unwrap_or_else(|e| panic!("test binary: {e}")));
        command
            .args(["--exact", &self.test, "--ignored", "--nocapture", "--test-threads=1"])
            .envs(self.env.iter().map(|(k, v)| (k, v)))
            .stdin(Stdio::null())
            .stdout(Stdio::piped())
            .stderr(Stdio::inherit());
        if let Some(cut) = self.power_cut {
            cut.apply(&mut command).unwrap_or_else(|e| panic!("{e}"));
        }
        let mut child =
            KillOnDrop(command.spawn().unwrap_or_else(|e| panic!("spawning the child: {e}")));
        let stdout = child.0.stdout.take().unwrap_or_else(|| panic!("the child's stdout"));
        let (opened_tx, opened_rx) = mpsc::channel();
        let reader = std::thread::spawn(move || {
            let mut ledger = Ledger::default();
            for line in BufReader::new(stdout).lines().map_while(Result::ok) {
                let Some(event) = line.strip_prefix(MARK).and_then(Event::parse) else {
                    continue;
                };
                if event == Event::Opened {
                    let _ = opened_tx.send(());
                }
                ledger.record(event);
            }
            ledger
        });
        if !life.early {
            opened_rx.recv_timeout(OPEN_TIMEOUT).unwrap_or_else(|e| {
                panic!("round {}: the child did not open the store: {e}", life.round)
            });
        }
        std::thread::sleep(life.kill_after);
        child.0.kill().unwrap_or_else(|e| panic!("SIGKILL the child: {e}"));
        let _ = child.0.wait();
        let ledger = reader.join().unwrap_or_else(|_| panic!("the ledger reader panicked"));
        if let Some(cut) = self.power_cut {
            cut.restore().unwrap_or_else(|e| panic!("{e}"));
        }
        ledger
    }
}

/// A random generator seeded from [`SEED_ENV`] or at random; prints the seed.
pub fn seeded_rng(label: &str) -> StdRng {
    let seed: u64 = std::env::var(SEED_ENV)
        .ok()
        .and_then(|s| s.parse().ok())
        .unwrap_or_else(|| rand::thread_rng().gen());
    eprintln!("{label}: crash seed {seed} ({SEED_ENV}={seed} replays the delays)");
    StdRng::seed_from_u64(seed)
}

/// [`ROUNDS`] lives of the workload on one location: each is run by `life` and ends in a
/// kill, then `reopen` opens the store again and [`History::check`] checks it. The
/// reopened store is closed cleanly after odd rounds and dropped after even ones.
pub fn rounds(
    label: &str,
    mut life: impl FnMut(&Life) -> Ledger,
    mut reopen: impl FnMut() -> Arc<dyn MessageStore>,
) {
    let mut rng = seeded_rng(label);
    let mut history = History::default();
    let mut closed_cleanly = false;
    for round in 0..ROUNDS {
        let early = round % 3 == 2;
        let millis = if early { rng.gen_range(5..60) } else { rng.gen_range(150..700) };
        let ledger = life(&Life { round, early, kill_after: Duration::from_millis(millis) });
        let what = format!("{label} round {round}");
        let store = reopen();
        // A child killed before it reported the store open may not have opened it: after a
        // clean close, its messages may come back not redelivered.
        let crashed = ledger.opened || !closed_cleanly;
        history.check(&what, &ledger, store.as_ref(), crashed);
        assert!(early || ledger.confirmed() > 0, "{what}: the workload confirmed nothing");
        eprintln!(
            "{what} ({} after {millis} ms): {} units and {} acks confirmed, all present",
            if early { "killed from the start" } else { "killed writing" },
            ledger.confirmed(),
            ledger.writers.values().map(|w| w.acked.len()).sum::<usize>(),
        );
        closed_cleanly = round % 2 == 1;
        if closed_cleanly {
            store.close().unwrap_or_else(|e| panic!("{what}: close: {e}"));
        }
    }
}

/// What every earlier round established, per writer: everything submitted, every unit
/// confirmed or seen whole after a reopen, every ack confirmed or seen applied.
#[derive(Debug, Default)]
pub struct History {
    writers: BTreeMap<u64, WriterLedger>,
}

impl History {
    /// Adds `ledger` (this round's) to the history, recovers the reopened `store` and checks
    /// it (see the module documentation); `what` names the round in failures. Unless
    /// `crashed` (the store was surely open when killed), recovered messages may come back
    /// not redelivered.
    pub fn check(&mut self, what: &str, ledger: &Ledger, store: &dyn MessageStore, crashed: bool) {
        for (writer, done) in &ledger.writers {
            self.writers.entry(*writer).or_default().extend(done);
        }
        let recovered = store.recover().unwrap_or_else(|e| panic!("{what}: recover: {e}"));
        let mut highest = 0;
        for (writer, known) in &mut self.writers {
            let (q, r) = queues(*writer);
            let what = format!("{what}, writer {writer}");
            let (flags_q, flags_r) = (read_flags(store, &q), read_flags(store, &r));
            let first_new = flags_q.iter().chain(&flags_r).find(|(_, again)| crashed && !again);
            if let Some((id, _)) = first_new {
                panic!("{what}: message {id} recovered after a crash is not marked redelivered");
            }
            let in_q: BTreeSet<u64> = flags_q.into_iter().map(|(id, _)| id).collect();
            let in_r: BTreeSet<u64> = flags_r.into_iter().map(|(id, _)| id).collect();
            highest = [highest, known.added.last().map_or(0, |id| id + 1)]
                .into_iter()
                .chain(in_q.last().copied())
                .chain(in_r.last().copied())
                .max()
                .unwrap_or(0);
            let unknown: Vec<&u64> = in_q
                .iter()
                .filter(|id| !known.submitted.contains(id))
                .chain(in_r.iter().filter(|id| {
                    !known.submitted.contains(id)
                        && !known.submitted.contains(&id.saturating_sub(1))
                }))
                .collect();
            assert!(unknown.is_empty(), "{what}: never submitted, yet present: {}", few(&unknown));
            let whole = |id: &u64| {
                in_r.contains(id)
                    && in_r.contains(&(id + 1))
                    && (known.acking.contains(id) || in_q.contains(id))
            };
            let lost: Vec<&u64> = known.added.iter().filter(|id| !whole(id)).collect();
            assert!(
                lost.is_empty(),
                "{what}: units confirmed (in this round or earlier) or seen whole after an \
                 earlier reopen are lost, whole or in part: {}",
                few(&lost)
            );
            let half: Vec<&u64> = known
                .submitted
                .iter()
                .filter(|id| {
                    let there = [in_q.contains(id), in_r.contains(id), in_r.contains(&(**id + 1))];
                    there.contains(&true) && !whole(id)
                })
                .collect();
            assert!(half.is_empty(), "{what}: units half there: {}", few(&half));
            let undone: Vec<&u64> = known.acked.intersection(&in_q).collect();
            assert!(
                undone.is_empty(),
                "{what}: acks confirmed (or seen applied after an earlier reopen) undone: {}",
                few(&undone)
            );
            // What this reopen read is durable from now on: units there whole stay, and so
            // do the acks it saw applied.
            let seen_whole: Vec<u64> =
                known.submitted.iter().copied().filter(|id| in_r.contains(id)).collect();
            known.added.extend(seen_whole);
            let seen_acked: Vec<u64> = known
                .acking
                .iter()
                .copied()
                .filter(|id| in_r.contains(id) && !in_q.contains(id))
                .collect();
            known.acked.extend(seen_acked);
        }
        assert!(
            recovered.next_message_id.0 > highest,
            "{what}: recovered next_message_id {} is not above {highest}, an id confirmed or \
             present",
            recovered.next_message_id.0
        );
    }
}

/// `ids` for a failure message: how many, and the first few.
fn few(ids: &[&u64]) -> String {
    let shown: Vec<&&u64> = ids.iter().take(12).collect();
    let more = if ids.len() > shown.len() { ", ..." } else { "" };
    format!("{} ids: {shown:?}{more}", ids.len())
}

#[cfg(test)]
mod tests {
    use super::*;
    use crate::memory::MemoryStore;

    /// A memory store written by the workload for a moment, and its ledger.
    fn written() -> (Arc<dyn MessageStore>, Ledger) {
        let store: Arc<dyn MessageStore> = Arc::new(MemoryStore::new());
        let ledger = in_process(Arc::clone(&store), Duration::from_millis(50), || {}, &|_| {});
        assert!(ledger.confirmed() > 0);
        (store, ledger)
    }

    /// Checks `store` against its ledger after `damage` (to either); the failure message.
    fn check_after(damage: impl FnOnce(&dyn MessageStore, &mut Ledger)) -> Option<String> {
        let (store, mut ledger) = written();
        damage(store.as_ref(), &mut ledger);
        // The memory store never crashed: its messages are not redelivered.
        let checked = std::panic::catch_unwind(std::panic::AssertUnwindSafe(|| {
            History::default().check("self-test", &ledger, store.as_ref(), false)
        }));
        checked.err().map(|panic| match panic.downcast::<String>() {
            Ok(message) => *message,
            Err(_) => "a panic".into(),
        })
    }

    #[test]
    fn ledger_lines_parse_back() {
        for event in [
            Event::Opened,
            Event::Submitting { writer: 1, id: 7 },
            Event::Added { writer: 2, id: 9 },
            Event::Acking { writer: 3, id: 11 },
            Event::Acked { writer: 0, id: 13 },
        ] {
            assert_eq!(Event::parse(&event.line()), Some(event));
        }
        assert_eq!(Event::parse("test tests::crash::crash_child ..."), None);
    }

    #[test]
    fn the_checks_pass_on_what_the_ledger_says() {
        assert_eq!(check_after(|_, _| {}), None);
    }

    #[test]
    fn the_checks_fail_on_a_lost_unit_a_half_unit_an_undone_ack_and_a_stranger() {
        use super::super::units::submit_ok;
        let (q, r) = queues(1);
        let lost = check_after(|store, ledger| {
            let id = *ledger.writers[&1].added.first().expect("a confirmed unit");
            submit_ok(store, vec![ack_id(&q, id), ack_id(&r, id)]);
        });
        assert!(lost.is_some_and(|m| m.contains("lost")), "a lost unit passed");
        let half = check_after(|store, ledger| {
            let id = ledger.writers[&1].submitted.last().expect("a unit") + 100;
            ledger.record(Event::Submitting { writer: 1, id });
            submit_ok(store, vec![add(&message(id, &q, 4, 1), &[&q, &r])]);
        });
        assert!(half.is_some_and(|m| m.contains("half there")), "a half unit passed");
        let undone = check_after(|store, ledger| {
            let id = *ledger.writers[&1].acked.first().expect("an ack");
            submit_ok(store, vec![add(&message(id, &q, 4, 1), &[&q])]);
        });
        assert!(undone.is_some_and(|m| m.contains("undone")), "an undone ack passed");
        let stranger = check_after(|store, _| {
            submit_ok(store, vec![add(&message(1, &q, 4, 1), &[&q, &r])]);
        });
        assert!(stranger.is_some_and(|m| m.contains("never submitted")), "a stranger passed");
    }
}
