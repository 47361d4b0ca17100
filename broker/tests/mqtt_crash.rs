//! MQTT across broker restarts and kill -9, with paho-mqtt (Python) as the clients
//! (`tests/python/mqtt_crash_client.py`, run by `$FERROMQ_PYTHON`, else the repository's
//! `.venv/bin/python`) and the real `ferromq` binary with an `mqtt://` connector:
//!
//! - [`qos2_is_exactly_once_across_kill_9_rounds_mqtt_3_1_1`] and
//!   [`qos2_is_exactly_once_across_kill_9_rounds_mqtt_5`]: a paho publisher and a paho
//!   subscriber, both persistent sessions, exchange numbered QoS 2 messages while the broker
//!   is SIGKILLed at random moments and restarted on the same journal and port, round after
//!   round. The client processes outlive the broker (paho keeps a session's in-flight QoS 2
//!   state in memory) and reconnect on their own. The ledger is their output: every message
//!   whose PUBCOMP (5.0: with a success reason) the publisher got arrives exactly once, no
//!   message arrives twice, nothing arrives that was never published, and every reconnect
//!   finds its session (Session Present 1). The same rounds with clean restarts (SIGTERM):
//!   [`qos2_is_exactly_once_across_clean_restarts_mqtt_3_1_1`] and
//!   [`qos2_is_exactly_once_across_clean_restarts_mqtt_5`].
//!   What makes this hold is the QoS 2 state the broker stores (`core::exactly_once`): a
//!   received PUBLISH is marked in the unit that stores it (a resend after the crash is
//!   answered, not stored again) and dispatched only once durable; a delivery the client
//!   answered with PUBREC is marked before its acknowledgement (a resumed session gets
//!   PUBREL again, not the message). paho-mqtt 2.1.0 resends a PUBLISH whose PUBREL it had
//!   sent when it tries to reconnect more than once; the driver keeps such a message in its
//!   "resend PUBREL" state (see `ReconnectSafeClient` in the script).
//! - `persistent_session_survives_restarts_on_*` (journal, LSM on sled and on RocksDB, SQL on
//!   SQLite and on PostgreSQL): persistent sessions of both versions subscribe at QoS 1 and
//!   2 and go away; QoS 1 and 2 messages published meanwhile, and after the restart, are
//!   delivered when they come back with Session Present 1, once after a clean stop and once
//!   after a kill -9.
//! - [`retained_messages_survive_a_kill_9`] (journal) and `retained_messages_survive_a_kill_9_on_*`
//!   (the other stores): retained messages (replaced, cleared, QoS 1 and 2) are what a new
//!   subscription of either version gets after a kill -9.
//!
//! The kill moments come from a seed printed at the start; `FERROMQ_CRASH_SEED=<seed>`
//! replays them (the processes' timing still varies).

mod common;

use std::collections::{BTreeMap, BTreeSet};
use std::io::{BufRead, BufReader, Write};
use std::path::{Path, PathBuf};
use std::process::{Child, ChildStdin, Command, Stdio};
use std::sync::{Arc, Mutex};
use std::time::{Duration, Instant};

use common::{crash_seed, free_port, loopback, temp_dir, Process, SeededRng};

/// The journal as crash.rs configures it for its kill rounds: small segments and frequent
/// checkpoints, so that short rounds roll segments and checkpoint too.
const JOURNAL: &str =
    "[store]\nkind = \"journal\"\nsegment_size = 1_048_576\ncheckpoint_bytes = 262_144\n";
const LSM_SLED: &str = "[store]\nkind = \"lsm\"\nengine = \"sled\"\n";
const LSM_ROCKSDB: &str = "[store]\nkind = \"lsm\"\nengine = \"rocksdb\"\n";
const JDBC_SQLITE: &str = "[store]\nkind = \"jdbc\"\nurl = \"sqlite://store/ferromq.db\"\n";

/// Kill rounds of the exactly-once test; every [`EARLY_KILL_EVERY`]th one kills the broker
/// while it starts (recovering, the clients knocking) rather than under traffic.
const ROUNDS: u64 = 10;
const EARLY_KILL_EVERY: u64 = 4;
/// QoS 2 messages the publisher keeps unconfirmed at once.
const WINDOW: u32 = 8;
/// How many PUBCOMPs a traffic round waits for before the kill can come.
const PROGRESS_PER_ROUND: usize = 5;
/// How long anything a test waits for may take (a reconnect, the drain, one paho command).
const WAIT: Duration = Duration::from_secs(45);
/// How long nothing more may arrive before a receiver is taken to have it all.
const QUIET: Duration = Duration::from_millis(1500);
const POLL: Duration = Duration::from_millis(20);

const VERSIONS: [&str; 2] = ["3.1.1", "5.0"];

// ----- the paho processes -----

fn repository_root() -> PathBuf {
    Path::new(env!("CARGO_MANIFEST_DIR")).join("..")
}

fn python() -> PathBuf {
    match std::env::var_os("FERROMQ_PYTHON").filter(|value| !value.is_empty()) {
        Some(configured) => PathBuf::from(configured),
        None => repository_root().join(".venv/bin/python"),
    }
}

/// One run of `mqtt_crash_client.py`, killed on drop; its stdout lines gathered as they come
/// (the ledger), its stderr in a file shown when a check fails.
struct Paho {
    name: String,
    child: Child,
    stdin: Option<ChildStdin>,
    lines: Arc<Mutex<Vec<String>>>,
    stderr_path: PathBuf,
}

impl Paho {
    fn start(dir: &Path, name: &str, port: u16, args: &[&str]) -> Paho {
        let script = repository_root().join("tests/python/mqtt_crash_client.py");
        let stderr_path = dir.join(format!("{name}.paho.stderr"));
        let stderr = std::fs::File::create(&stderr_path).expect("create the stderr file");
        let python = python();
        let mut child = Command::new(&python)
            .arg(&script)
            .args(["--port", &port.to_string()])
            .args(args)
            .stdin(Stdio::piped())
            .stdout(Stdio::piped())
            .stderr(stderr)
            .spawn()
            .unwrap_or_else(|e| {
                panic!("running {} (paho-mqtt; run scripts/test): {e}", python.display())
            });
        let stdout = child.stdout.take().expect("the child's stdout");
        let lines: Arc<Mutex<Vec<String>>> = Arc::default();
        let gathered = lines.clone();
        std::thread::spawn(move || {
            for line in BufReader::new(stdout).lines().map_while(Result::ok) {
                gathered.lock().expect("lines").push(line);
            }
        });
        let stdin = child.stdin.take();
        Paho { name: name.to_owned(), child, stdin, lines, stderr_path }
    }

    fn lines(&self) -> Vec<String> {
        self.lines.lock().expect("lines").clone()
    }

    /// How many lines start with `prefix`.
    fn count(&self, prefix: &str) -> usize {
        self.lines.lock().expect("lines").iter().filter(|line| line.starts_with(prefix)).count()
    }

    fn output(&self) -> String {
        let stderr = std::fs::read_to_string(&self.stderr_path).unwrap_or_default();
        format!(
            "--- paho {} stdout:\n{}\n--- stderr:\n{stderr}",
            self.name,
            self.lines().join("\n")
        )
    }

    /// Waits, at most [`WAIT`], until `done` holds for the lines so far; fails early if the
    /// process exits.
    fn wait_until(&mut self, what: &str, done: impl Fn(&[String]) -> bool) {
        let deadline = Instant::now() + WAIT;
        loop {
            if done(&self.lines()) {
                return;
            }
            if let Ok(Some(status)) = self.child.try_wait() {
                // Its last lines may still be on their way.
                std::thread::sleep(Duration::from_millis(100));
                if done(&self.lines()) {
                    return;
                }
                panic!("paho {} exited ({status}) before {what}\n{}", self.name, self.output());
            }
            assert!(
                Instant::now() < deadline,
                "paho {}: no {what} within {WAIT:?}\n{}",
                self.name,
                self.output()
            );
            std::thread::sleep(POLL);
        }
    }

    fn command(&mut self, line: &str) {
        let stdin = self.stdin.as_mut().expect("the child's stdin");
        writeln!(stdin, "{line}").unwrap_or_else(|e| panic!("telling paho {}: {e}", self.name));
        stdin.flush().unwrap_or_else(|e| panic!("telling paho {}: {e}", self.name));
    }

    /// Waits, at most [`WAIT`], for a successful exit and the line `ok` it prints last.
    fn succeed(&mut self) -> Vec<String> {
        self.stdin = None;
        self.wait_until("its final ok", |lines| lines.last().is_some_and(|line| line == "ok"));
        let deadline = Instant::now() + WAIT;
        let status = loop {
            if let Some(status) = self.child.try_wait().expect("query the child's status") {
                break status;
            }
            assert!(
                Instant::now() < deadline,
                "paho {} did not exit\n{}",
                self.name,
                self.output()
            );
            std::thread::sleep(POLL);
        };
        assert!(status.success(), "paho {} exited with {status}\n{}", self.name, self.output());
        self.lines()
    }
}

impl Drop for Paho {
    fn drop(&mut self) {
        if let Ok(None) = self.child.try_wait() {
            let _ = self.child.kill();
            let _ = self.child.wait();
        }
    }
}

/// Runs one paho command to its end; its lines.
fn paho(dir: &Path, name: &str, port: u16, args: &[&str]) -> Vec<String> {
    Paho::start(dir, name, port, args).succeed()
}

// ----- the broker -----

/// Where a test runs its brokers: one data directory and configuration.
struct Site {
    dir: tempfile::TempDir,
    config: PathBuf,
    data: PathBuf,
    /// Brokers started so far, to name the next one.
    started: std::cell::Cell<usize>,
}

impl Site {
    fn new(store_config: &str) -> Site {
        let dir = temp_dir();
        let config = dir.path().join("broker.toml");
        std::fs::write(&config, store_config).expect("write the configuration");
        let data = dir.path().join("data");
        Site { dir, config, data, started: Default::default() }
    }

    fn path(&self) -> &Path {
        self.dir.path()
    }

    /// Starts a broker with one MQTT connector on `port` (on the site's data directory).
    fn launch(&self, port: u16) -> Process {
        let name = format!("broker-{}", self.started.get());
        self.started.set(self.started.get() + 1);
        let connector = format!("mqtt://127.0.0.1:{port}");
        Process::start_listening(
            self.dir.path(),
            &name,
            &self.config,
            &self.data,
            &connector,
            "127.0.0.1:0",
        )
    }

    /// [`Site::launch`], then waits until it serves there: its own readiness line names the
    /// port, and `/proc` shows this process listening on it.
    fn serve(&self, port: u16) -> Process {
        let mut broker = self.launch(port);
        broker.wait_accepting(loopback(port));
        assert!(
            broker.listening().contains(&loopback(port)),
            "the broker does not listen on {port} itself\n{}",
            broker.output()
        );
        broker
    }
}

// ----- QoS 2 exactly once across kill -9 -----

#[test]
fn qos2_is_exactly_once_across_kill_9_rounds_mqtt_3_1_1() {
    qos2_exactly_once_across_restarts("3.1.1", Restart::Kill);
}

#[test]
fn qos2_is_exactly_once_across_kill_9_rounds_mqtt_5() {
    qos2_exactly_once_across_restarts("5.0", Restart::Kill);
}

/// The same rounds with clean restarts (SIGTERM) instead of kills.
#[test]
fn qos2_is_exactly_once_across_clean_restarts_mqtt_3_1_1() {
    qos2_exactly_once_across_restarts("3.1.1", Restart::Clean);
}

#[test]
fn qos2_is_exactly_once_across_clean_restarts_mqtt_5() {
    qos2_exactly_once_across_restarts("5.0", Restart::Clean);
}

/// How the exactly-once rounds end each broker.
#[derive(Clone, Copy, PartialEq, Eq, Debug)]
enum Restart {
    /// SIGKILL at a random moment, every [`EARLY_KILL_EVERY`]th round while it recovers.
    Kill,
    /// SIGTERM at a random moment, waiting for the clean exit.
    Clean,
}

/// What the two clients' lines say, checked at the end.
#[derive(Default)]
struct Exchange {
    /// Message number by the packet id the publisher gave it (paho does not reuse one for
    /// 65535 messages, far more than a run publishes).
    sent_by_mid: BTreeMap<u16, u64>,
    /// The PUBCOMP reason code of each confirmed packet id.
    done_by_mid: BTreeMap<u16, u8>,
    /// The DUP flags of each delivery of each message number the subscriber got.
    received: BTreeMap<u64, Vec<bool>>,
    /// Payloads the subscriber got that are no message number.
    strangers: Vec<String>,
}

impl Exchange {
    fn read(publisher: &[String], subscriber: &[String]) -> Exchange {
        let mut exchange = Exchange::default();
        for line in publisher {
            let words: Vec<&str> = line.split_whitespace().collect();
            let value = |key: &str| {
                words.iter().find_map(|word| word.strip_prefix(key)?.parse::<u64>().ok())
            };
            match words.first() {
                Some(&"sent") => {
                    let number = words.get(1).and_then(|word| word.parse().ok());
                    let mid = value("mid=");
                    if let (Some(number), Some(mid)) = (number, mid) {
                        exchange.sent_by_mid.insert(mid as u16, number);
                    }
                }
                Some(&"done") => {
                    if let (Some(mid), Some(rc)) = (value("mid="), value("rc=")) {
                        exchange.done_by_mid.insert(mid as u16, rc as u8);
                    }
                }
                _ => {}
            }
        }
        for line in subscriber {
            let Some(rest) = line.strip_prefix("recv ") else { continue };
            let payload = rest.split_whitespace().next().unwrap_or_default();
            let dup = rest.contains(" dup=1");
            match payload.parse::<u64>() {
                Ok(number) => exchange.received.entry(number).or_default().push(dup),
                Err(_) => exchange.strangers.push(line.clone()),
            }
        }
        exchange
    }

    fn sent(&self) -> BTreeSet<u64> {
        self.sent_by_mid.values().copied().collect()
    }

    /// The message numbers whose PUBCOMP came with a success reason.
    fn completed(&self) -> BTreeSet<u64> {
        self.done_by_mid
            .iter()
            .filter(|(_, rc)| **rc < 0x80)
            .filter_map(|(mid, _)| self.sent_by_mid.get(mid).copied())
            .collect()
    }

    /// What breaks exactly once, once every message is through.
    fn violations(&self) -> Vec<String> {
        let mut violations = Vec::new();
        let sent = self.sent();
        for (number, dups) in &self.received {
            if dups.len() > 1 {
                // A recovered message is marked redelivered: a later delivery with DUP clear
                // is another stored copy (the publisher's resend taken for a new message); one
                // with DUP set, the same message sent again after the client had it (or such
                // a copy, recovered).
                let flags: Vec<&str> =
                    dups.iter().map(|dup| if *dup { "1" } else { "0" }).collect();
                let cause = match dups[1..].iter().any(|dup| !*dup) {
                    true => "stored twice",
                    false => "sent again",
                };
                violations.push(format!(
                    "message {number} arrived {} times ({cause}; DUP {})",
                    dups.len(),
                    flags.join(",")
                ));
            }
        }
        for number in self.received.keys() {
            if !sent.contains(number) {
                violations.push(format!("message {number} arrived but was never published"));
            }
        }
        for stranger in &self.strangers {
            violations.push(format!("a message that was never published: {stranger}"));
        }
        for number in self.completed() {
            if !self.received.contains_key(&number) {
                violations.push(format!("message {number} got its PUBCOMP but never arrived"));
            }
        }
        for mid in self.done_by_mid.keys() {
            if !self.sent_by_mid.contains_key(mid) {
                violations.push(format!("a PUBCOMP for packet id {mid}, which was never sent"));
            }
        }
        violations
    }
}

/// Every CONNACK after the first must have resumed the session: Session Present 1, success.
fn reconnect_violations(who: &str, lines: &[String]) -> Vec<String> {
    lines
        .iter()
        .filter(|line| line.starts_with("connected "))
        .enumerate()
        .filter(|(n, line)| {
            line.as_str() != if *n == 0 { "connected sp=0 rc=0" } else { "connected sp=1 rc=0" }
        })
        .map(|(n, line)| format!("{who}'s CONNACK {n} was {line:?}"))
        .collect()
}

fn qos2_exactly_once_across_restarts(version: &str, restart: Restart) {
    let seed = crash_seed();
    eprintln!("MQTT crash test seed {seed} (replay with FERROMQ_CRASH_SEED={seed})");
    let mut rng = SeededRng(seed);
    let site = Site::new(JOURNAL);
    let port = free_port();
    let mut broker = site.serve(port);
    let topic = "crash/qos2/numbers";
    let client = |role: &str| format!("crash-{role}-{}", version.replace('.', ""));
    let (subscriber_id, publisher_id) = (client("subscriber"), client("publisher"));
    let mut subscriber = Paho::start(
        site.path(),
        "subscriber",
        port,
        &["subscriber", "--version", version, "--client-id", &subscriber_id, "--filter", topic],
    );
    subscriber.wait_until("SUBACK", |lines| lines.iter().any(|line| line == "subscribed 2"));
    let window = WINDOW.to_string();
    let mut publisher = Paho::start(
        site.path(),
        "publisher",
        port,
        &[
            "publisher",
            "--version",
            version,
            "--client-id",
            &publisher_id,
            "--topic",
            topic,
            "--window",
            &window,
        ],
    );
    let started = Instant::now();
    let fail = |why: String, broker: &Process, publisher: &Paho, subscriber: &Paho| -> ! {
        panic!(
            "seed {seed} (FERROMQ_CRASH_SEED={seed}), MQTT {version}, {restart:?} restarts: \
             {why}\n{}\n{}\n{}",
            publisher.output(),
            subscriber.output(),
            broker.output()
        )
    };

    for round in 0..ROUNDS {
        if restart == Restart::Kill && round % EARLY_KILL_EVERY == EARLY_KILL_EVERY - 1 {
            // Killed while it recovers, the clients knocking; the next round's broker then
            // recovers what two kills left.
            broker.kill_9();
            broker = site.launch(port);
            std::thread::sleep(Duration::from_millis(rng.range(5, 120)));
        } else {
            // Traffic in this round first, so that every kill hits messages in flight.
            let before = publisher.count("done ");
            publisher.wait_until("progress", |lines| {
                lines.iter().filter(|line| line.starts_with("done ")).count()
                    >= before + PROGRESS_PER_ROUND
            });
            std::thread::sleep(Duration::from_millis(rng.range(0, 300)));
        }
        match restart {
            Restart::Kill => broker.kill_9(),
            Restart::Clean => broker.stop(),
        }
        broker = site.serve(port);
    }

    // The last broker lives: the publisher stops, its messages in flight complete, and the
    // subscriber gets what it is owed.
    publisher.command("stop");
    publisher.wait_until("the PUBCOMP of every message", |lines| {
        let sent = lines.iter().filter(|line| line.starts_with("sent ")).count();
        lines.iter().filter(|line| line.starts_with("done ")).count() >= sent
    });
    let expected = Exchange::read(&publisher.lines(), &subscriber.lines()).completed();
    subscriber.wait_until("every completed message", |lines| {
        let exchange = Exchange::read(&publisher.lines(), lines);
        expected.iter().all(|number| exchange.received.contains_key(number))
    });
    // Then a quiet moment, for a duplicate still on its way.
    let mut last = subscriber.count("recv ");
    let mut quiet_since = Instant::now();
    while quiet_since.elapsed() < QUIET {
        std::thread::sleep(POLL);
        let now = subscriber.count("recv ");
        if now != last {
            (last, quiet_since) = (now, Instant::now());
        }
        assert!(started.elapsed() < Duration::from_secs(110), "the subscriber never went quiet");
    }
    publisher.command("exit");
    subscriber.command("exit");

    let (publisher_lines, subscriber_lines) = (publisher.lines(), subscriber.lines());
    let exchange = Exchange::read(&publisher_lines, &subscriber_lines);
    let mut violations = exchange.violations();
    violations.extend(reconnect_violations("the publisher", &publisher_lines));
    violations.extend(reconnect_violations("the subscriber", &subscriber_lines));
    if !violations.is_empty() {
        let shown: Vec<String> = violations.iter().take(20).cloned().collect();
        fail(
            format!(
                "{} violation(s) ({} sent again, {} stored twice, {} lost):\n  {}",
                violations.len(),
                violations.iter().filter(|v| v.contains("(sent again")).count(),
                violations.iter().filter(|v| v.contains("(stored twice")).count(),
                violations.iter().filter(|v| v.contains("never arrived")).count(),
                shown.join("\n  ")
            ),
            &broker,
            &publisher,
            &subscriber,
        );
    }
    let refused = exchange.done_by_mid.values().filter(|rc| **rc >= 0x80).count();
    eprintln!(
        "MQTT {version} crash test seed {seed}: {ROUNDS} restarts ({restart:?}) in {:.1?}; \
         published {}, completed {} ({refused} PUBCOMPs with a failure reason), received {}; \
         {} reconnects",
        started.elapsed(),
        exchange.sent_by_mid.len(),
        exchange.completed().len(),
        exchange.received.len(),
        publisher.count("connected ") + subscriber.count("connected ") - 2,
    );
    assert!(exchange.completed().len() >= 40, "too little traffic to mean anything");
    broker.stop();
}

// ----- persistent sessions across restarts, on every store -----

#[test]
fn persistent_session_survives_restarts_on_the_journal() {
    persistent_session_survives_restarts(JOURNAL);
}

#[test]
fn persistent_session_survives_restarts_on_lsm_sled() {
    persistent_session_survives_restarts(LSM_SLED);
}

#[test]
fn persistent_session_survives_restarts_on_lsm_rocksdb() {
    persistent_session_survives_restarts(LSM_ROCKSDB);
}

#[test]
fn persistent_session_survives_restarts_on_jdbc_sqlite() {
    persistent_session_survives_restarts(JDBC_SQLITE);
}

/// On PostgreSQL: a throwaway server (`store_jdbc::testing::PgCluster`) that outlives the
/// brokers; skipped, loudly, where PostgreSQL is not installed, unless
/// `FERROMQ_REQUIRE_POSTGRES` is set.
#[test]
fn persistent_session_survives_restarts_on_jdbc_postgres() {
    let Some(cluster) = store_jdbc::testing::PgCluster::shared() else { return };
    let url = cluster.create_database();
    persistent_session_survives_restarts(&format!("[store]\nkind = \"jdbc\"\nurl = \"{url}\"\n"));
}

/// For each version, a persistent session subscribes to `…/qos1/#` at QoS 1 and `…/qos2/#`
/// at QoS 2 (in two connections: the second resumes the first's session) and goes away;
/// messages are published to both at their QoS; the broker restarts (a clean stop, then, in
/// a second phase, a kill -9); more are published before the session comes back, with
/// Session Present 1, to every one of them, in order, at its QoS, and nothing else.
fn persistent_session_survives_restarts(store_config: &str) {
    let site = Site::new(store_config);
    let mut port = free_port();
    let mut broker = site.serve(port);
    for (phase, kill) in [("clean", false), ("kill", true)] {
        let mut expected: BTreeMap<&str, Vec<String>> = BTreeMap::new();
        for version in VERSIONS {
            let id = session_id(phase, version);
            for (qos, first) in [("1", "sp=0"), ("2", "sp=1")] {
                let filter = format!("{id}/qos{qos}/#");
                let args = [
                    "subscribe",
                    "--version",
                    version,
                    "--client-id",
                    &id,
                    "--filter",
                    &filter,
                    "--qos",
                    qos,
                ];
                let lines = paho(site.path(), &format!("{id}-subscribe-{qos}"), port, &args);
                assert_eq!(
                    lines,
                    [
                        format!("connected {first} rc=0"),
                        format!("subscribed {qos}"),
                        "ok".to_owned()
                    ],
                    "{phase}, {version}: subscribing to {filter}"
                );
            }
            expected.insert(version, Vec::new());
        }
        // One publisher for every session's messages, of the other version after the restart.
        let publish = |port: u16, when: &str, expected: &mut BTreeMap<&str, Vec<String>>| {
            let publisher_version = if when == "before" { VERSIONS[0] } else { VERSIONS[1] };
            let mut args: Vec<String> =
                ["publish", "--version", publisher_version].map(String::from).into();
            let mut published = 0;
            for version in VERSIONS {
                let id = session_id(phase, version);
                for qos in ["1", "2"] {
                    let topic = format!("{id}/qos{qos}/{when}");
                    for n in 0..3 {
                        let payload = format!("{when}-q{qos}-{n}");
                        let list = expected.get_mut(version).expect("a version's list");
                        list.push(format!("recv {topic} qos={qos} retain=0 {payload}"));
                        args.extend(["--message".into(), topic.clone(), qos.into(), payload]);
                        published += 1;
                    }
                }
            }
            let args: Vec<&str> = args.iter().map(String::as_str).collect();
            let lines = paho(site.path(), &format!("{phase}-publish-{when}"), port, &args);
            let done = lines.iter().filter(|line| line.starts_with("done ")).collect::<Vec<_>>();
            assert_eq!(done.len(), published, "{phase}: publishing {when}: {lines:?}");
            assert!(done.iter().all(|line| line.ends_with(" rc=0")), "{phase}: {lines:?}");
        };
        publish(port, "before", &mut expected);
        if kill {
            broker.kill_9();
        } else {
            broker.stop();
        }
        port = free_port();
        broker = site.serve(port);
        publish(port, "after", &mut expected);
        for version in VERSIONS {
            let id = session_id(phase, version);
            let list = &expected[version];
            let count = list.len().to_string();
            let args = [
                "receive",
                "--version",
                version,
                "--client-id",
                &id,
                "--persistent",
                "--count",
                &count,
            ];
            let lines = paho(site.path(), &format!("{id}-receive"), port, &args);
            assert_eq!(
                lines.first().map(String::as_str),
                Some("connected sp=1 rc=0"),
                "{phase}, {version}: {lines:?}\n{}",
                broker.output()
            );
            // Each topic's messages in order; the topics of a subscription, and the two
            // subscriptions, may interleave.
            let got: Vec<&String> = lines.iter().filter(|line| line.starts_with("recv ")).collect();
            for topic_messages in ["qos1/before", "qos2/before", "qos1/after", "qos2/after"] {
                let of = |line: &&String| line.contains(&format!("/{topic_messages} "));
                let want: Vec<&String> = list.iter().filter(of).collect();
                let have: Vec<&String> = got.iter().copied().filter(of).collect();
                assert_eq!(
                    have,
                    want,
                    "{phase} restart, MQTT {version}: what the session got\n{}",
                    broker.output()
                );
            }
            assert_eq!(got.len(), list.len(), "{phase}, {version}: exactly these: {lines:?}");
        }
    }
    broker.stop();
}

fn session_id(phase: &str, version: &str) -> String {
    format!("session-{phase}-{}", version.replace('.', ""))
}

// ----- retained messages across kill -9 -----

/// Retained messages published at QoS 1 and 2 (one replaced, one cleared by an empty
/// payload), each confirmed, then a kill -9: after the restart a new subscription of either
/// version gets the retained ones, with the retain flag, and not the cleared one.
#[test]
fn retained_messages_survive_a_kill_9() {
    retained_messages_survive_a_kill_9_on(JOURNAL);
}

#[test]
fn retained_messages_survive_a_kill_9_on_lsm_sled() {
    retained_messages_survive_a_kill_9_on(LSM_SLED);
}

#[test]
fn retained_messages_survive_a_kill_9_on_lsm_rocksdb() {
    retained_messages_survive_a_kill_9_on(LSM_ROCKSDB);
}

#[test]
fn retained_messages_survive_a_kill_9_on_jdbc_sqlite() {
    retained_messages_survive_a_kill_9_on(JDBC_SQLITE);
}

#[test]
fn retained_messages_survive_a_kill_9_on_jdbc_postgres() {
    let Some(cluster) = store_jdbc::testing::PgCluster::shared() else { return };
    let url = cluster.create_database();
    retained_messages_survive_a_kill_9_on(&format!("[store]\nkind = \"jdbc\"\nurl = \"{url}\"\n"));
}

/// Publishes alternate between the versions.
fn retained_messages_survive_a_kill_9_on(store_config: &str) {
    let site = Site::new(store_config);
    let port = free_port();
    let mut broker = site.serve(port);
    let retained = [
        ("retain/kill/a", "1", "a-first"),
        ("retain/kill/a", "1", "a-second"),
        ("retain/kill/b", "2", "b-only"),
        ("retain/kill/c", "1", "c-cleared"),
        ("retain/kill/c", "1", ""),
        ("retain/kill/d/deep", "2", "d-first"),
        ("retain/kill/d/deep", "2", "d-second"),
    ];
    for (n, (topic, qos, payload)) in retained.iter().enumerate() {
        let args = [
            "publish",
            "--version",
            VERSIONS[n % 2],
            "--topic",
            topic,
            "--qos",
            qos,
            "--retain",
            &format!("--payload={payload}"),
        ];
        let lines = paho(site.path(), &format!("retain-publish-{n}"), port, &args);
        assert!(lines.contains(&"done 0 rc=0".to_owned()), "publishing {topic}: {lines:?}");
    }
    broker.kill_9();
    let mut broker = site.serve(port);
    for version in VERSIONS {
        let args = [
            "receive",
            "--version",
            version,
            "--client-id",
            "retain-reader",
            "--filter",
            "retain/kill/#",
            "--qos",
            "2",
            "--count",
            "3",
        ];
        let lines = paho(site.path(), &format!("retain-receive-{version}"), port, &args);
        let got: BTreeSet<&str> =
            lines.iter().filter(|line| line.starts_with("recv ")).map(String::as_str).collect();
        let want: BTreeSet<&str> = [
            "recv retain/kill/a qos=1 retain=1 a-second",
            "recv retain/kill/b qos=2 retain=1 b-only",
            "recv retain/kill/d/deep qos=2 retain=1 d-second",
        ]
        .into();
        assert_eq!(
            got,
            want,
            "MQTT {version}: the retained messages after a kill -9: {lines:?}\n{}",
            broker.output()
        );
        assert_eq!(lines.iter().filter(|line| line.starts_with("recv ")).count(), 3, "{lines:?}");
    }
    broker.stop();
}
