//! Crash tests of the real `ferromq` binary on the journal store (the default store), and the
//! kill -9 rounds on every other store.
//!
//! - [`kill_9_rounds_lose_no_confirmed_message_and_resurrect_no_acked_one`]: many rounds on
//!   one data directory of: start the broker, run producers and consumers over STOMP at once,
//!   SIGKILL the broker at a random moment. The test keeps a ledger of what the broker
//!   confirmed (a RECEIPT for a SEND: the message is durable; a RECEIPT for an ACK: the ack is
//!   durable) and checks every delivery against it, then drains the queues at the end:
//!   every confirmed message that was never acked comes back, no message whose ack was
//!   confirmed ever comes back, nothing that was never sent appears, and a message delivered
//!   twice is marked `redelivered:true` the second time. Unconfirmed sends may or may not
//!   survive, and so may messages whose ack was not confirmed.
//!   The same rounds run on an active/standby pair sharing the journal
//!   ([`standby_pair_kill_9_rounds_lose_no_confirmed_message_and_resurrect_no_acked_one`]:
//!   each round's broker waits as the standby of the one before and takes over when it is
//!   killed), on a PostgreSQL pair whose brokers have data directories of their own, kept
//!   apart by the database's lease only
//!   ([`postgres_standby_pair_kill_9_rounds_lose_no_confirmed_message_and_resurrect_no_acked_one`]),
//!   and on the LSM store, on each engine
//!   ([`lsm_sled_kill_9_rounds_lose_no_confirmed_message_and_resurrect_no_acked_one`],
//!   [`lsm_rocksdb_kill_9_rounds_lose_no_confirmed_message_and_resurrect_no_acked_one`]),
//!   and on the SQL store over SQLite and over PostgreSQL
//!   ([`jdbc_sqlite_kill_9_rounds_lose_no_confirmed_message_and_resurrect_no_acked_one`],
//!   [`jdbc_postgres_kill_9_rounds_lose_no_confirmed_message_and_resurrect_no_acked_one`]).
//! - [`second_broker_on_the_same_data_dir_refuses_and_the_first_is_unharmed`].
//! - [`a_standby_waits_for_the_lock_and_takes_over_when_the_active_broker_dies`], and what
//!   guards the one data directory's exclusion:
//!   [`exactly_one_broker_serves_a_data_directory_through_rounds_of_takeovers`] and
//!   [`a_connect_to_a_port_proves_nothing_the_readiness_line_does`].
//! - [`journal_is_the_default_and_survives_a_clean_restart`].
//!
//! The random choices (kill delays, message sizes, which deliveries are left unacked) come
//! from a seed printed at the start; `FERROMQ_CRASH_SEED=<seed>` replays them (the timing of
//! the processes still varies). Every spawned broker is wrapped in [`Process`] (from
//! `common/`), which kills it when the test ends, passes or fails; its output goes to files in
//! the test's temporary directory, and is printed when a check fails.

mod common;

use std::collections::{BTreeMap, BTreeSet};
use std::net::{SocketAddr, TcpStream};
use std::sync::atomic::{AtomicU64, Ordering};
use std::sync::{Arc, Mutex};
use std::time::{Duration, Instant};

use common::{
    flock_holders, free_port, is_timeout, listening_addrs, loopback, path_str, receive_exactly,
    send_confirmed, temp_dir, Process, RawFrame, RawStomp, EXIT_TIMEOUT, FRAME_TIMEOUT,
};

/// Rounds of the crash test; every [`EARLY_KILL_EVERY`]th one kills the broker while it
/// starts (recovering) instead of under traffic.
const ROUNDS: u64 = 30;
const EARLY_KILL_EVERY: u64 = 6;
/// Concurrent producers and consumers of each traffic round.
const PRODUCERS: u64 = 3;
const CONSUMERS: u64 = 2;
/// The queues the producers spread their messages over (every consumer subscribes to all).
const QUEUES: [&str; 2] = ["/queue/crash.a", "/queue/crash.b"];
/// The header carrying the test's id of a message.
const ID_HEADER: &str = "x-crash-id";
/// The share (in percent) of deliveries a consumer leaves unacknowledged.
const UNACKED_PERCENT: u64 = 15;
/// Consumers start up to this long after the producers, so that a backlog builds up.
const CONSUMER_DELAY_MS: u64 = 250;
/// The crash test's configuration: still the journal, with small data files and frequent
/// checkpoints, so that twenty short rounds roll segments, write checkpoints and reclaim
/// files (all of which a kill can interrupt). With the defaults (32 MiB segments, a
/// checkpoint every 8 MiB) rounds this short never checkpoint, and every restart adds a
/// preallocated head segment that the next recovery reads whole.
const CRASH_CONFIG: &str = "[store]\nkind = \"journal\"\nsegment_size = 1_048_576\n\
                            checkpoint_bytes = 262_144\n";

// ----- a small deterministic random generator (splitmix64) -----

struct Rng(u64);

impl Rng {
    fn next(&mut self) -> u64 {
        self.0 = self.0.wrapping_add(0x9E37_79B9_7F4A_7C15);
        let mut z = self.0;
        z = (z ^ (z >> 30)).wrapping_mul(0xBF58_476D_1CE4_E5B9);
        z = (z ^ (z >> 27)).wrapping_mul(0x94D0_49BB_1331_11EB);
        z ^ (z >> 31)
    }

    /// Uniform in `low..high`.
    fn range(&mut self, low: u64, high: u64) -> u64 {
        low + self.next() % (high - low)
    }

    fn percent(&mut self, percent: u64) -> bool {
        self.next() % 100 < percent
    }

    fn fork(&mut self) -> Rng {
        Rng(self.next())
    }
}

fn seed() -> u64 {
    match std::env::var("FERROMQ_CRASH_SEED") {
        Ok(text) => text.trim().parse().expect("FERROMQ_CRASH_SEED is a number"),
        Err(_) => std::time::SystemTime::now()
            .duration_since(std::time::UNIX_EPOCH)
            .map(|d| d.as_nanos() as u64)
            .unwrap_or(1),
    }
}

// ----- the crash test's ledger -----

/// What the test sent and what the broker confirmed, over every round.
#[derive(Default)]
struct Ledger {
    /// Every message sent (its SEND written or being written): id -> (round, queue, body).
    sent: BTreeMap<u64, (u64, usize, Vec<u8>)>,
    /// Sends the broker confirmed with a RECEIPT: durable.
    confirmed: BTreeSet<u64>,
    /// How often each message was delivered.
    delivered: BTreeMap<u64, u32>,
    /// Messages an ACK was sent for.
    ack_sent: BTreeSet<u64>,
    /// Acks the broker confirmed with a RECEIPT: the message must never come back.
    ack_confirmed: BTreeSet<u64>,
    /// What went wrong, checked after each round.
    violations: Vec<String>,
}

impl Ledger {
    /// Checks one delivery against what was sent and acked, and records it.
    fn delivery(&mut self, round: u64, frame: &RawFrame) -> Option<u64> {
        let Some(id) = frame.header(ID_HEADER).and_then(|v| v.parse::<u64>().ok()) else {
            self.violations.push(format!("round {round}: a message without an id: {frame:?}"));
            return None;
        };
        let redelivered = frame.header("redelivered") == Some("true");
        let destination = frame.header("destination").unwrap_or_default();
        match self.sent.get(&id) {
            None => self.violations.push(format!(
                "round {round}: message {id} was delivered but never sent ({})",
                frame.describe()
            )),
            Some((sent_round, queue, body)) => {
                if *body != frame.body {
                    self.violations.push(format!(
                        "round {round}: message {id} (sent in round {sent_round}) came back \
                         with a different body ({} bytes instead of {})",
                        frame.body.len(),
                        body.len()
                    ));
                }
                if destination != QUEUES[*queue] {
                    self.violations.push(format!(
                        "round {round}: message {id} was sent to {} but delivered from \
                         {destination}",
                        QUEUES[*queue]
                    ));
                }
            }
        }
        if self.ack_confirmed.contains(&id) {
            self.violations.push(format!(
                "round {round}: message {id} came back although its ack was confirmed \
                 (redelivered:{redelivered})"
            ));
        }
        let times = self.delivered.entry(id).or_insert(0);
        if *times > 0 && !redelivered {
            self.violations.push(format!(
                "round {round}: message {id} was delivered again ({} times before) without \
                 redelivered:true",
                *times
            ));
        }
        *times += 1;
        Some(id)
    }
}

struct Counters {
    next_id: AtomicU64,
}

/// One producer connection: sends persistent messages one at a time, each waiting for its
/// RECEIPT, until the connection breaks (the broker was killed).
fn produce(
    addr: SocketAddr,
    round: u64,
    ledger: Arc<Mutex<Ledger>>,
    counters: Arc<Counters>,
    mut rng: Rng,
) {
    let Ok(mut stomp) = RawStomp::connect(addr) else { return };
    loop {
        let id = counters.next_id.fetch_add(1, Ordering::Relaxed);
        let queue = rng.range(0, QUEUES.len() as u64) as usize;
        // Mostly small bodies, some of a few KiB, a few larger than a page.
        let size = match rng.range(0, 100) {
            0..=79 => rng.range(16, 512),
            80..=97 => rng.range(512, 4096),
            _ => rng.range(16 * 1024, 64 * 1024),
        } as usize;
        let mut body = format!("message {id} of round {round}:").into_bytes();
        let filler = b'a' + (id % 26) as u8;
        body.resize(size.max(body.len()), filler);
        ledger.lock().expect("ledger").sent.insert(id, (round, queue, body.clone()));
        let id_text = id.to_string();
        let receipt = format!("send-{id}");
        let headers = [
            ("destination", QUEUES[queue]),
            ("persistent", "true"),
            (ID_HEADER, id_text.as_str()),
            ("receipt", receipt.as_str()),
        ];
        if stomp.send_frame("SEND", &headers, &body).is_err() {
            return;
        }
        match stomp.read_frame() {
            Ok(frame) if frame.command == "RECEIPT" => {
                let mut ledger = ledger.lock().expect("ledger");
                if frame.header("receipt-id") == Some(receipt.as_str()) {
                    ledger.confirmed.insert(id);
                } else {
                    ledger.violations.push(format!(
                        "round {round}: waiting for {receipt}, got {}",
                        frame.describe()
                    ));
                    return;
                }
            }
            Ok(frame) => {
                ledger.lock().expect("ledger").violations.push(format!(
                    "round {round}: a producer waiting for {receipt} got {}",
                    frame.describe()
                ));
                return;
            }
            Err(_) => return,
        }
    }
}

/// One consumer connection subscribed to every queue with client-individual acks: checks
/// each delivery against the ledger and acks it with a receipt (pipelined, without waiting),
/// except a random few left unacknowledged. Runs until the connection breaks.
fn consume(addr: SocketAddr, round: u64, ledger: Arc<Mutex<Ledger>>, mut rng: Rng) {
    std::thread::sleep(Duration::from_millis(rng.range(0, CONSUMER_DELAY_MS)));
    let Ok(mut stomp) = RawStomp::connect(addr) else { return };
    for (i, queue) in QUEUES.iter().enumerate() {
        let id = format!("sub-{i}");
        let headers = [("destination", *queue), ("id", id.as_str()), ("ack", "client-individual")];
        if stomp.send_frame("SUBSCRIBE", &headers, b"").is_err() {
            return;
        }
    }
    loop {
        let frame = match stomp.read_frame() {
            Ok(frame) => frame,
            Err(_) => return,
        };
        match frame.command.as_str() {
            "MESSAGE" => {
                let Some(id) = ledger.lock().expect("ledger").delivery(round, &frame) else {
                    return;
                };
                if rng.percent(UNACKED_PERCENT) {
                    continue;
                }
                let Some(ack) = frame.header("ack") else {
                    let mut ledger = ledger.lock().expect("ledger");
                    ledger.violations.push(format!("round {round}: no ack header: {frame:?}"));
                    return;
                };
                let receipt = format!("ack-{id}");
                ledger.lock().expect("ledger").ack_sent.insert(id);
                if stomp.send_frame("ACK", &[("id", ack), ("receipt", &receipt)], b"").is_err() {
                    return;
                }
            }
            "RECEIPT" => {
                let receipt = frame.header("receipt-id").unwrap_or_default();
                let mut ledger = ledger.lock().expect("ledger");
                match receipt.strip_prefix("ack-").and_then(|id| id.parse::<u64>().ok()) {
                    Some(id) => {
                        ledger.ack_confirmed.insert(id);
                    }
                    None => ledger.violations.push(format!(
                        "round {round}: a consumer got an unexpected {}",
                        frame.describe()
                    )),
                }
            }
            _ => {
                ledger
                    .lock()
                    .expect("ledger")
                    .violations
                    .push(format!("round {round}: a consumer got {}", frame.describe()));
                return;
            }
        }
    }
}

/// Fails the test with every violation recorded so far, the seed and the broker's stderr.
fn assert_no_violations(ledger: &Mutex<Ledger>, seed: u64, round: u64, stderr: &str) {
    let ledger = ledger.lock().expect("ledger");
    if ledger.violations.is_empty() {
        return;
    }
    let shown: Vec<&String> = ledger.violations.iter().take(20).collect();
    panic!(
        "seed {seed} (FERROMQ_CRASH_SEED={seed}), round {round}: {} violation(s):\n{}\n\
         broker stderr of the round:\n{stderr}",
        ledger.violations.len(),
        shown.iter().map(|s| format!("  {s}")).collect::<Vec<_>>().join("\n")
    );
}

#[test]
fn kill_9_rounds_lose_no_confirmed_message_and_resurrect_no_acked_one() {
    kill_9_rounds(CRASH_CONFIG);
}

/// The same rounds on the LSM store, sled engine.
#[test]
fn lsm_sled_kill_9_rounds_lose_no_confirmed_message_and_resurrect_no_acked_one() {
    kill_9_rounds("[store]\nkind = \"lsm\"\nengine = \"sled\"\n");
}

/// The same rounds on the LSM store, RocksDB engine.
#[test]
fn lsm_rocksdb_kill_9_rounds_lose_no_confirmed_message_and_resurrect_no_acked_one() {
    kill_9_rounds("[store]\nkind = \"lsm\"\nengine = \"rocksdb\"\n");
}

/// The same rounds on the SQL store over SQLite (the database under the data directory).
#[test]
fn jdbc_sqlite_kill_9_rounds_lose_no_confirmed_message_and_resurrect_no_acked_one() {
    kill_9_rounds("[store]\nkind = \"jdbc\"\nurl = \"sqlite://store/ferromq.db\"\n");
}

/// The same rounds on the SQL store over PostgreSQL: a throwaway server on loopback
/// (`store_jdbc::testing::PgCluster`) that outlives every killed broker.
#[test]
fn jdbc_postgres_kill_9_rounds_lose_no_confirmed_message_and_resurrect_no_acked_one() {
    let Some(cluster) = store_jdbc::testing::PgCluster::shared() else { return };
    let url = cluster.create_database();
    kill_9_rounds(&format!("[store]\nkind = \"jdbc\"\nurl = \"{url}\"\n"));
}

/// Issue 12: the same rounds on an active/standby pair sharing the journal: each round's
/// broker is the standby of the one before, started (and waiting for the lock) before that
/// one is killed, and serves on a port of its own once it takes over.
#[test]
fn standby_pair_kill_9_rounds_lose_no_confirmed_message_and_resurrect_no_acked_one() {
    kill_9_rounds_with(CRASH_CONFIG, true);
}

/// Issue 12 on PostgreSQL: the same rounds on an active/standby pair sharing a database, each
/// broker on a data directory of its own (alternating between two, as two machines would),
/// so that only the PostgreSQL lease keeps the standby out: it takes over once the killed
/// broker's lease expired (a short lease: 1500 ms, renewed every 300 ms). Fewer rounds than
/// on the journal, since each takeover waits for the lease to expire.
#[test]
fn postgres_standby_pair_kill_9_rounds_lose_no_confirmed_message_and_resurrect_no_acked_one() {
    let Some(cluster) = store_jdbc::testing::PgCluster::shared() else { return };
    let url = cluster.create_database();
    let store = format!(
        "[store]\nkind = \"jdbc\"\nurl = \"{url}\"\nlease_ms = 1500\nlease_renew_ms = 300\n"
    );
    kill_9_rounds_on(&store, Pair { standby: true, data_dirs: 2, rounds: 12 });
}

/// How the rounds run their brokers.
#[derive(Clone, Copy)]
struct Pair {
    /// Every broker is started as the standby of the one before it (`[broker] standby`),
    /// before that one is killed, and takes over.
    standby: bool,
    /// Round `n`'s broker runs on data directory `n % data_dirs` (one: all share it).
    data_dirs: u64,
    rounds: u64,
}

/// Rounds of kill -9 under traffic on one data directory, the store configured by
/// `store_config` (a TOML `[store]` section).
fn kill_9_rounds(store_config: &str) {
    kill_9_rounds_with(store_config, false);
}

/// [`kill_9_rounds`]; with `standby`, every broker is started as the standby of the one
/// before it (`[broker] standby`), before that one is killed, and takes over.
fn kill_9_rounds_with(store_config: &str, standby: bool) {
    kill_9_rounds_on(store_config, Pair { standby, data_dirs: 1, rounds: ROUNDS });
}

fn kill_9_rounds_on(store_config: &str, pair: Pair) {
    let Pair { standby, data_dirs, rounds } = pair;
    let seed = seed();
    eprintln!("crash test seed {seed} (replay with FERROMQ_CRASH_SEED={seed})");
    let mut rng = Rng(seed);
    let dir = temp_dir();
    let data_dir = |round: u64| match data_dirs {
        1 => dir.path().join("data"),
        _ => dir.path().join(format!("data-{}", round % data_dirs)),
    };
    let data = data_dir(0);
    let config = dir.path().join("crash.toml");
    let config_text = match standby {
        true => format!("[broker]\nstandby = true\nlock_retry_ms = 50\n\n{store_config}"),
        false => store_config.to_owned(),
    };
    std::fs::write(&config, config_text).expect("write the configuration");
    // A broker on a fresh port, named after its round, on that round's data directory.
    let launch = |name: &str, round: u64| {
        let port = free_port();
        (Process::start_configured(dir.path(), name, &config, &data_dir(round), port), port)
    };
    // With `standby`: the next round's broker, already waiting for the lock.
    let mut next: Option<(Process, u16)> = None;
    let ledger = Arc::new(Mutex::new(Ledger::default()));
    let counters = Arc::new(Counters { next_id: AtomicU64::new(1) });
    let started = Instant::now();
    let mut traffic_rounds = 0;
    let mut slowest_start = Duration::ZERO;
    let mut most_pending = 0;

    for round in 0..rounds {
        let (mut broker, port) =
            next.take().unwrap_or_else(|| launch(&format!("round-{round}"), round));
        let addr = loopback(port);
        if round % EARLY_KILL_EVERY == EARLY_KILL_EVERY - 1 {
            if standby {
                next = Some(launch(&format!("round-{}", round + 1), round + 1));
            }
            // Killed while it opens and recovers the journal (or just after; a standby
            // perhaps while it still waits for the lock).
            std::thread::sleep(Duration::from_millis(rng.range(5, 80)));
            broker.kill_9();
            continue;
        }
        let start = Instant::now();
        broker.wait_accepting(addr);
        slowest_start = slowest_start.max(start.elapsed());
        traffic_rounds += 1;
        let mut threads = Vec::new();
        for _ in 0..CONSUMERS {
            let (ledger, rng) = (ledger.clone(), rng.fork());
            threads.push(std::thread::spawn(move || consume(addr, round, ledger, rng)));
        }
        for _ in 0..PRODUCERS {
            let (ledger, counters, rng) = (ledger.clone(), counters.clone(), rng.fork());
            threads.push(std::thread::spawn(move || produce(addr, round, ledger, counters, rng)));
        }
        if standby {
            next = Some(launch(&format!("round-{}", round + 1), round + 1));
        }
        std::thread::sleep(Duration::from_millis(rng.range(50, 400)));
        broker.kill_9();
        for thread in threads {
            thread.join().expect("a client thread panicked");
        }
        assert_no_violations(&ledger, seed, round, &broker.stderr());
        let ledger = ledger.lock().expect("ledger");
        let pending = ledger.confirmed.iter().filter(|id| !ledger.ack_sent.contains(id)).count();
        most_pending = most_pending.max(pending);
    }

    // Drain everything on a last broker (the last standby, taking over), acking each message
    // with a receipt.
    let (mut broker, port) = next.take().unwrap_or_else(|| launch("drain", rounds));
    let addr = loopback(port);
    broker.wait_accepting(addr);
    let mut stomp = RawStomp::open(addr);
    for (i, queue) in QUEUES.iter().enumerate() {
        // No receipt: the first subscription's messages may come before it.
        let id = format!("drain-{i}");
        let headers = [("destination", *queue), ("id", id.as_str()), ("ack", "client-individual")];
        stomp.send_frame("SUBSCRIBE", &headers, b"").expect("subscribe");
    }
    stomp.set_read_timeout(Duration::from_millis(100));
    let mut drained = BTreeSet::new();
    let mut acks_waiting = BTreeSet::new();
    let mut idle_since = Instant::now();
    // Done once every ack is confirmed and nothing arrived for a while.
    while !(acks_waiting.is_empty() && idle_since.elapsed() > Duration::from_millis(1500)) {
        assert!(
            idle_since.elapsed() < FRAME_TIMEOUT,
            "seed {seed}: the drain got no frame for {FRAME_TIMEOUT:?} with {} acks unconfirmed",
            acks_waiting.len()
        );
        let frame = match stomp.read_frame() {
            Ok(frame) => frame,
            Err(e) if is_timeout(&e) => continue,
            Err(e) => panic!("seed {seed}: draining: {e}; stderr:\n{}", broker.stderr()),
        };
        idle_since = Instant::now();
        match frame.command.as_str() {
            "MESSAGE" => {
                let id = ledger.lock().expect("ledger").delivery(rounds, &frame);
                let Some(id) = id else { continue };
                assert!(
                    drained.insert(id),
                    "seed {seed}: message {id} delivered twice in the drain"
                );
                let ack = frame.header("ack").expect("an ack header").to_owned();
                let receipt = format!("drain-ack-{id}");
                stomp.send_frame("ACK", &[("id", &ack), ("receipt", &receipt)], b"").expect("ack");
                acks_waiting.insert(receipt);
            }
            "RECEIPT" => {
                let receipt = frame.header("receipt-id").unwrap_or_default();
                assert!(acks_waiting.remove(receipt), "unexpected {}", frame.describe());
            }
            _ => panic!("seed {seed}: the drain got {}", frame.describe()),
        }
    }
    assert_no_violations(&ledger, seed, rounds, &broker.stderr());

    let ledger = ledger.lock().expect("ledger");
    let lost: Vec<u64> = ledger
        .confirmed
        .iter()
        .filter(|id| !ledger.ack_sent.contains(id) && !drained.contains(id))
        .copied()
        .collect();
    let describe = |id: &u64| {
        let (round, queue, body) = &ledger.sent[id];
        format!(
            "{id} (round {round}, {}, {} bytes, delivered {} times before the drain)",
            QUEUES[*queue],
            body.len(),
            ledger.delivered.get(id).copied().unwrap_or(0) - u32::from(drained.contains(id))
        )
    };
    assert!(
        lost.is_empty(),
        "seed {seed}: {} confirmed and never acked message(s) were lost: {}\nstderr of the \
         drain:\n{}",
        lost.len(),
        lost.iter().take(20).map(describe).collect::<Vec<_>>().join(", "),
        broker.stderr()
    );
    let unconfirmed_survivors = drained.iter().filter(|id| !ledger.confirmed.contains(id)).count();
    let acked_unconfirmed: BTreeSet<u64> =
        ledger.ack_sent.difference(&ledger.ack_confirmed).copied().collect();
    eprintln!(
        "crash test seed {seed}: {rounds} rounds ({traffic_rounds} under traffic) in {:.1?}, \
         slowest start {slowest_start:.1?}, at most {most_pending} confirmed messages pending; \
         sent {}, confirmed {}, delivered {}, acks sent {}, acks confirmed {}; drained {} \
         ({} of them unconfirmed sends, {} with an unconfirmed ack)",
        started.elapsed(),
        ledger.sent.len(),
        ledger.confirmed.len(),
        ledger.delivered.len(),
        ledger.ack_sent.len(),
        ledger.ack_confirmed.len(),
        drained.len(),
        unconfirmed_survivors,
        drained.intersection(&acked_unconfirmed).count(),
    );
    assert!(
        ledger.confirmed.len() >= 100 && ledger.ack_confirmed.len() >= 20,
        "seed {seed}: too little traffic to mean anything ({} confirmed sends, {} confirmed acks)",
        ledger.confirmed.len(),
        ledger.ack_confirmed.len()
    );

    // The drain's acks are durable through a clean stop: nothing is left.
    drop(stomp);
    broker.stop();
    let port = free_port();
    let mut broker = Process::start_configured(dir.path(), "empty", &config, &data, port);
    broker.wait_accepting(loopback(port));
    let mut stomp = RawStomp::open(loopback(port));
    for (i, queue) in QUEUES.iter().enumerate() {
        let id = format!("empty-{i}");
        let headers = [("destination", *queue), ("id", id.as_str()), ("ack", "client-individual")];
        stomp.send_frame("SUBSCRIBE", &headers, b"").expect("subscribe");
    }
    stomp.set_read_timeout(Duration::from_millis(700));
    match stomp.read_frame() {
        Err(e) if is_timeout(&e) => {}
        Ok(frame) => panic!("seed {seed}: after the drain, still {}", frame.describe()),
        Err(e) => panic!("seed {seed}: {e}"),
    }
    drop(stomp);
    broker.stop();
}

// ----- data directory lock and clean restart -----

#[test]
fn second_broker_on_the_same_data_dir_refuses_and_the_first_is_unharmed() {
    let dir = temp_dir();
    let data = dir.path().join("data");
    let queue = "/queue/lock.test";
    let port_a = free_port();
    let mut a = Process::start_broker(dir.path(), "a", &data, port_a);
    a.wait_accepting(loopback(port_a));
    let mut stomp = RawStomp::open(loopback(port_a));
    let mut expected = send_confirmed(&mut stomp, queue, "before", 20);

    // B refuses at once, naming the lock and A's pid.
    let port_b = free_port();
    let mut b = Process::start_broker(dir.path(), "b-refused", &data, port_b);
    let status = b.wait_exit(EXIT_TIMEOUT);
    let stderr = b.stderr();
    assert!(!status.success(), "a second broker on the data dir exited {status}:\n{stderr}");
    assert!(stderr.contains("lock"), "stderr should say the data directory is locked:\n{stderr}");
    assert!(stderr.contains(path_str(&data)), "stderr should name the data directory:\n{stderr}");
    assert!(
        stderr.contains(&a.pid().to_string()),
        "stderr should name the process holding the lock ({}):\n{stderr}",
        a.pid()
    );
    assert!(
        TcpStream::connect_timeout(&loopback(port_b), Duration::from_millis(200)).is_err(),
        "the refused broker must not have served"
    );

    // A is unharmed: still running, its lock intact, its messages there, still accepting.
    assert!(a.try_status().is_none(), "broker A stopped:\n{}", a.stderr());
    let lock = std::fs::read_to_string(data.join("lock")).unwrap_or_default();
    assert_eq!(lock.trim(), a.pid().to_string(), "the lock file should still hold A's pid");
    expected.extend(send_confirmed(&mut stomp, queue, "after", 5));
    let mut reader = RawStomp::open(loopback(port_a));
    // Received without acks: they go back to the queue when the reader disconnects.
    receive_exactly(&mut reader, queue, &expected, false);
    reader.request("DISCONNECT", &[], b"", "bye");
    drop(reader);
    drop(stomp);
    a.stop();

    // Once A stopped cleanly, B starts on the same directory and delivers them all.
    let port_b = free_port();
    let mut b = Process::start_broker(dir.path(), "b", &data, port_b);
    b.wait_accepting(loopback(port_b));
    let mut stomp = RawStomp::open(loopback(port_b));
    receive_exactly(&mut stomp, queue, &expected, true);
    drop(stomp);
    b.stop();
}

/// Issue 12's shared store, on the journal: two brokers with `standby = true` on one data
/// directory; the second waits for the lock without serving, takes over when the first is
/// SIGKILLed, and delivers every message the first confirmed.
#[test]
fn a_standby_waits_for_the_lock_and_takes_over_when_the_active_broker_dies() {
    let dir = temp_dir();
    let data = dir.path().join("data");
    let config = dir.path().join("standby.toml");
    std::fs::write(&config, "[broker]\nstandby = true\nlock_retry_ms = 100\n")
        .unwrap_or_else(|e| panic!("writing {}: {e}", config.display()));
    let queue = "/queue/standby.test";
    // Every connector on a port the kernel picks, read back from the broker's own readiness
    // line: a connect to a chosen port once reached another process while this test's
    // active broker had not started (see `exactly_one_broker_serves_a_data_directory...`).
    let mut a = Process::start_configured(dir.path(), "active", &config, &data, 0);
    let addr_a = a.wait_ready().addr("stomp");
    let lock = data.join("lock");
    assert_eq!(flock_holders(&lock), [a.pid()], "the active broker holds the lock");
    // The standby's admin endpoint must be known while it waits (it prints its readiness
    // line only once it serves): a free port, checked below to be the standby's own.
    let admin_b = loopback(free_port());
    let admin_bind = admin_b.to_string();
    let mut b =
        Process::start_listening(dir.path(), "standby", &config, &data, STOMP_ANY, &admin_bind);
    wait_until_waiting(&mut b);
    assert_eq!(b.listening(), [admin_b], "a waiting standby serves its admin endpoint only");
    // Its admin endpoint says so, and dstat too.
    let admin = broker::admin::AdminClient::new(&format!("http://{admin_b}"))
        .unwrap_or_else(|e| panic!("{e}"));
    let runtime = tokio::runtime::Builder::new_current_thread()
        .enable_all()
        .build()
        .unwrap_or_else(|e| panic!("{e}"));
    let waiting = runtime.block_on(admin.status()).unwrap_or_else(|e| panic!("{e}"));
    assert_eq!(waiting.role, broker::admin::BrokerRole::Waiting, "{waiting:?}");
    let url = format!("http://{admin_b}");
    let mut dstat = Process::start(dir.path(), "dstat-waiting", &["dstat", "--url", &url]);
    let said = dstat.succeed(EXIT_TIMEOUT);
    assert!(said.contains("is a standby, waiting for the data directory's lock since"), "{said}");
    let mut stomp = RawStomp::open(addr_a);
    let expected = send_confirmed(&mut stomp, queue, "confirmed", 50);
    drop(stomp);

    a.kill_9();
    let ready_b = b.wait_ready();
    assert!(b.stderr().contains("taking over"), "{}", b.output());
    assert_eq!(flock_holders(&lock), [b.pid()], "the standby took the lock over");
    let active = runtime.block_on(admin.status()).unwrap_or_else(|e| panic!("{e}"));
    assert_eq!(active.role, broker::admin::BrokerRole::Active, "{active:?}");
    assert!(active.since_unix_ms >= waiting.since_unix_ms, "{waiting:?} then {active:?}");
    let mut stomp = RawStomp::open(ready_b.addr("stomp"));
    receive_exactly(&mut stomp, queue, &expected, true);
    drop(stomp);
    b.stop();
}

/// A STOMP connector on a port the kernel picks.
const STOMP_ANY: &str = "stomp://127.0.0.1:0";

/// Waits until a standby says that it waits for the lock, failing if it exits or serves
/// (prints its readiness line) instead.
fn wait_until_waiting(standby: &mut Process) {
    let deadline = Instant::now() + Duration::from_secs(60);
    while !standby.stderr().contains("waiting as its standby") {
        assert!(standby.try_status().is_none(), "the standby exited:\n{}", standby.output());
        assert!(
            Instant::now() < deadline,
            "the standby never said it waits:\n{}",
            standby.output()
        );
        std::thread::sleep(Duration::from_millis(20));
    }
    assert!(
        !standby.stdout().contains("ferromq ready"),
        "a standby that waits must not serve:\n{}",
        standby.output()
    );
}

/// The cause of the second active broker seen once in this file's standby test: the test
/// took a connect to its chosen port for "the active broker serves", and the listener it
/// reached was another process's. The active broker, whose port was taken, failed to bind
/// and exited, releasing the lock; the standby then found the directory free and served
/// without ever waiting. Here the other process is this test's own listener: the connect
/// succeeds, the broker never prints its readiness line, and the second broker serves at
/// once. What tests now wait for instead is the readiness line of their own child.
#[test]
fn a_connect_to_a_port_proves_nothing_the_readiness_line_does() {
    let dir = temp_dir();
    let data = dir.path().join("data");
    let config = dir.path().join("standby.toml");
    std::fs::write(&config, "[broker]\nstandby = true\nlock_retry_ms = 100\n")
        .unwrap_or_else(|e| panic!("writing {}: {e}", config.display()));
    let other = std::net::TcpListener::bind("127.0.0.1:0").expect("bind");
    let taken = other.local_addr().expect("address");
    let mut a = Process::start_configured(dir.path(), "active", &config, &data, taken.port());
    assert!(TcpStream::connect(taken).is_ok(), "what the old check saw: {taken} accepts");
    let status = a.wait_exit(EXIT_TIMEOUT);
    assert!(!status.success(), "a broker whose port is taken must fail:\n{}", a.output());
    assert!(a.stderr().contains("in use"), "{}", a.output());
    assert!(!a.stdout().contains("ferromq ready"), "it never said it was ready:\n{}", a.output());
    // The directory is free again: a second broker serves at once, without waiting.
    let mut b = Process::start_configured(dir.path(), "standby", &config, &data, 0);
    b.wait_ready();
    assert!(!b.stderr().contains("waiting as its standby"), "{}", b.output());
    b.stop();
}

/// Rounds of brokers on one data directory that each may serve (all configured as standby):
/// two start at once, then every round starts one or two more while the active one is under
/// load, and kills the active one (SIGKILL or SIGTERM); exactly one takes over. A watcher
/// reads every broker's listening sockets from `/proc` every few milliseconds and fails if
/// two brokers ever listen at once; each round checks that the serving broker holds the
/// lock's flock and that every waiting broker said it waits and listens on nothing (the
/// admin endpoint is off). At the end the last broker holds every confirmed message.
#[test]
fn exactly_one_broker_serves_a_data_directory_through_rounds_of_takeovers() {
    const LOCK_ROUNDS: usize = 10;
    let dir = temp_dir();
    let data = dir.path().join("data");
    let lock = data.join("lock");
    let config = dir.path().join("standby.toml");
    let text = "[broker]\nstandby = true\nlock_retry_ms = 20\n[admin]\nenabled = false\n";
    std::fs::write(&config, text).unwrap_or_else(|e| panic!("writing {}: {e}", config.display()));
    let queue = "/queue/exclusion.test";
    let started = std::cell::Cell::new(0);
    let start = || {
        let name = format!("broker-{}", started.get());
        started.set(started.get() + 1);
        Process::start_configured(dir.path(), &name, &config, &data, 0)
    };

    // The watcher: every pid started, and the first moment two of them listened at once.
    let pids: Arc<Mutex<Vec<u32>>> = Arc::default();
    let overlap: Arc<Mutex<Option<String>>> = Arc::default();
    let stop = Arc::new(std::sync::atomic::AtomicBool::new(false));
    let watcher = {
        let (pids, overlap, stop) = (pids.clone(), overlap.clone(), stop.clone());
        std::thread::spawn(move || {
            while !stop.load(Ordering::Relaxed) {
                let now: Vec<u32> = pids.lock().expect("pids").clone();
                let serving: Vec<(u32, Vec<SocketAddr>)> = now
                    .into_iter()
                    .map(|pid| (pid, listening_addrs(pid)))
                    .filter(|(_, addrs)| !addrs.is_empty())
                    .collect();
                // One pass reads each process at its own moment: A seen listening, then B
                // seen listening may only mean that A stopped and B took over in between.
                // Reading them all again, in reverse order, settles it: a broker listens
                // over one interval, so A listening before and after B's reading was
                // listening at the same moment as B.
                if serving.len() > 1 {
                    let again: Vec<u32> = serving
                        .iter()
                        .rev()
                        .map(|(pid, _)| *pid)
                        .filter(|pid| !listening_addrs(*pid).is_empty())
                        .collect();
                    if again.len() == serving.len() {
                        overlap.lock().expect("overlap").get_or_insert(format!("{serving:?}"));
                    }
                }
                std::thread::sleep(Duration::from_millis(2));
            }
        })
    };

    // Two at once: one serves, the other waits.
    let mut brokers = vec![start(), start()];
    pids.lock().expect("pids").extend(brokers.iter().map(Process::pid));
    let mut active = serving_one_of(&mut brokers);
    let mut expected = Vec::new();
    for round in 0..LOCK_ROUNDS {
        let fresh: Vec<Process> = (0..1 + round % 2).map(|_| start()).collect();
        pids.lock().expect("pids").extend(fresh.iter().map(Process::pid));
        brokers.extend(fresh);
        // Load on the active broker while the new standbys start and poll the lock.
        let mut stomp = RawStomp::open(active.1.addr("stomp"));
        expected.extend(send_confirmed(&mut stomp, queue, &format!("round{round}"), 20));
        for (n, broker) in brokers.iter_mut().enumerate() {
            if n != active.0 {
                wait_until_waiting(broker);
                assert!(broker.listening().is_empty(), "a standby listens:\n{}", broker.output());
            }
        }
        expected.extend(send_confirmed(&mut stomp, queue, &format!("round{round}-late"), 20));
        drop(stomp);
        let serving = &mut brokers[active.0];
        assert_eq!(flock_holders(&lock), [serving.pid()], "round {round}: the lock's holder");
        let text = std::fs::read_to_string(&lock).unwrap_or_default();
        assert_eq!(text.trim(), serving.pid().to_string(), "round {round}: the lock file");
        if round % 2 == 0 {
            serving.kill_9();
        } else {
            serving.stop();
        }
        brokers.remove(active.0);
        active = serving_one_of(&mut brokers);
        if let Some(overlap) = overlap.lock().expect("overlap").as_ref() {
            panic!("round {round}: two brokers listened at once: {overlap}");
        }
    }
    let mut stomp = RawStomp::open(active.1.addr("stomp"));
    receive_exactly(&mut stomp, queue, &expected, true);
    drop(stomp);
    stop.store(true, Ordering::Relaxed);
    watcher.join().expect("the watcher panicked");
    if let Some(overlap) = overlap.lock().expect("overlap").as_ref() {
        panic!("two brokers listened at once: {overlap}");
    }
    for broker in &mut brokers {
        broker.stop();
    }
}

/// Waits until exactly one of `brokers` serves (prints its readiness line) and the others
/// wait for the lock; returns which one and what it bound.
fn serving_one_of(brokers: &mut [Process]) -> (usize, common::Ready) {
    let deadline = Instant::now() + Duration::from_secs(60);
    loop {
        let ready: Vec<(usize, common::Ready)> = brokers
            .iter()
            .enumerate()
            .filter_map(|(n, b)| b.stdout().lines().find_map(common::Ready::parse).map(|r| (n, r)))
            .collect();
        let outputs = |brokers: &[Process]| {
            brokers.iter().map(Process::output).collect::<Vec<_>>().join("\n")
        };
        assert!(ready.len() <= 1, "two brokers serve one data directory:\n{}", outputs(brokers));
        for broker in brokers.iter_mut() {
            assert!(broker.try_status().is_none(), "a broker exited:\n{}", broker.output());
        }
        if let [(n, _)] = ready.as_slice() {
            let n = *n;
            // Its own line, with its own pid, naming what it listens on.
            let own = brokers[n].wait_ready();
            assert!(brokers[n].listening().contains(&own.addr("stomp")), "{own:?}");
            return (n, own);
        }
        assert!(Instant::now() < deadline, "no broker serves:\n{}", outputs(brokers));
        std::thread::sleep(Duration::from_millis(10));
    }
}

#[test]
fn journal_is_the_default_and_survives_a_clean_restart() {
    let dir = temp_dir();
    let data = dir.path().join("data");
    let queue = "/queue/restart.test";
    let port = free_port();
    let mut broker = Process::start_broker(dir.path(), "first", &data, port);
    broker.wait_accepting(loopback(port));
    let mut stomp = RawStomp::open(loopback(port));
    let mut expected = send_confirmed(&mut stomp, queue, "persistent", 30);
    // A body larger than a page, and a non-persistent message that must not survive.
    let large = format!("large-{}", "x".repeat(200 * 1024));
    stomp.request(
        "SEND",
        &[("destination", queue), ("persistent", "true")],
        large.as_bytes(),
        "large",
    );
    expected.push(large);
    stomp.request(
        "SEND",
        &[("destination", queue), ("persistent", "false")],
        b"transient",
        "transient",
    );
    drop(stomp);
    // No store was configured: the messages are in the journal under <data>/journal.
    let journal = data.join("journal");
    let files = std::fs::read_dir(&journal)
        .unwrap_or_else(|e| panic!("no journal directory {}: {e}", journal.display()))
        .count();
    assert!(files > 0, "the journal directory {} is empty", journal.display());

    broker.stop();
    assert!(
        journal.join(store_journal::CLEAN_SHUTDOWN_FILE).exists(),
        "a clean stop should leave the journal's clean-shutdown marker"
    );

    let port = free_port();
    let mut broker = Process::start_broker(dir.path(), "second", &data, port);
    broker.wait_accepting(loopback(port));
    let mut stomp = RawStomp::open(loopback(port));
    let frames = receive_exactly(&mut stomp, queue, &expected, true);
    for frame in &frames {
        assert_eq!(frame.header("persistent"), Some("true"), "{}", frame.describe());
        assert_eq!(
            frame.header("redelivered"),
            Some("false"),
            "after a clean stop nothing was delivered before: {:?}",
            frame.headers
        );
    }
    drop(stomp);
    broker.stop();

    // The acks survived the second clean stop too.
    let port = free_port();
    let mut broker = Process::start_broker(dir.path(), "third", &data, port);
    broker.wait_accepting(loopback(port));
    let mut stomp = RawStomp::open(loopback(port));
    receive_exactly(&mut stomp, queue, &[], false);
    drop(stomp);
    broker.stop();
}

/// Priority order is kept by the store: persistent messages of mixed priorities sent before a
/// SIGKILL come back highest priority first (in send order within a priority) after the restart.
#[test]
fn priority_order_survives_a_kill_9() {
    let dir = temp_dir();
    let data = dir.path().join("data");
    let queue = "/queue/priority.restart";
    let port = free_port();
    let mut broker = Process::start_broker(dir.path(), "first", &data, port);
    broker.wait_accepting(loopback(port));
    let mut stomp = RawStomp::open(loopback(port));
    let priorities = [4u8, 0, 9, 5, 1, 9, 7, 4, 0, 3];
    for (n, priority) in priorities.iter().enumerate() {
        let priority = priority.to_string();
        let headers = [("destination", queue), ("persistent", "true"), ("priority", &priority)];
        stomp.request("SEND", &headers, format!("p{n}").as_bytes(), &format!("send-{n}"));
    }
    drop(stomp);
    broker.kill_9();

    let port = free_port();
    let mut broker = Process::start_broker(dir.path(), "second", &data, port);
    broker.wait_accepting(loopback(port));
    let mut stomp = RawStomp::open(loopback(port));
    let mut order: Vec<usize> = (0..priorities.len()).collect();
    // Stable: send order within a priority.
    order.sort_by_key(|&n| std::cmp::Reverse(priorities[n]));
    let expected: Vec<String> = order.iter().map(|n| format!("p{n}")).collect();
    let frames = receive_exactly(&mut stomp, queue, &expected, true);
    for (frame, n) in frames.iter().zip(&order) {
        assert_eq!(frame.header("priority"), Some(priorities[*n].to_string().as_str()));
    }
    drop(stomp);
    broker.stop();
}
