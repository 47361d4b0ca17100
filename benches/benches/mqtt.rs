//! MQTT (issue 21): ferromq beside Debian's mosquitto 2.0, the same client driving both, one
//! broker measured at a time while the others idle.
//!
//! `cargo bench -p benches --bench mqtt` runs everything at full size; `-- --quick` is CI's
//! smoke mode (1 s per run, 1,000 idle connections, one run, no QoS 1 clean-session
//! scenarios: about a minute once built), which prints the aims but fails only on errors. Without mosquitto installed
//! (`/usr/sbin/mosquitto`) only ferromq runs, with a line saying so, unless
//! `FERROMQ_REQUIRE_MOSQUITTO=1` makes that an error.
//!
//! ## Brokers
//!
//! - `ferromq sync`: the release `ferromq` binary ([`FerromqProcess`]) with an `mqtt://`
//!   connector on the journal store with `sync = "always"` (a QoS 1 PUBLISH is on disk
//!   before its PUBACK);
//! - `ferromq nosync`: the same with `sync = "never"` (the journal writes, the operating
//!   system decides when they reach the disk): mosquitto does not fsync QoS 1 messages, so
//!   this is the like-for-like comparison;
//! - `mosquitto`: `/usr/sbin/mosquitto` on a configuration of ours ([`MosquittoProcess`]):
//!   a loopback listener, anonymous clients, `persistence false`, `max_inflight_messages`
//!   large enough for the scenarios and `max_queued_messages` unlimited, everything else its
//!   defaults.
//!
//! ## Throughput and CPU
//!
//! Each of 1 publisher to 1 subscriber, 50 publishers to 1 subscriber and 1 publisher to 50
//! subscribers, at:
//!
//! - QoS 0, clean sessions;
//! - QoS 1, the subscribers' sessions kept (clean session 0): a QoS 1 message is then held
//!   for its subscriber until acknowledged even across a disconnect, which on ferromq means
//!   stored (a durable subscription) and with `ferromq sync` synced before the publisher's
//!   PUBACK, and on mosquitto (without persistence) kept in memory. Each session is ended
//!   after its run (a clean session under the same client id);
//! - QoS 1, clean sessions (full mode only): ferromq then stores nothing, as ActiveMQ keeps
//!   a topic's messages out of its store when no durable subscription wants them, so its
//!   two configurations do the same work. The `broker disk B/msg` column (`write_bytes` of
//!   `/proc/PID/io`) shows which runs touched the disk.
//!
//! Each run on a topic of its own; MQTT 3.1.1 (`5` in `FERROMQ_MQTT_VERSION` for 5.0), 1 KiB
//! payloads. The load generator is `client::mqtt` in
//! this process, on a tokio runtime of its own: the subscribers connect and subscribe (SUBACK),
//! the publishers connect, then each publisher publishes for the run's seconds, QoS 1
//! windowed ([`PUBLISH_WINDOW`] unacknowledged per publisher) and waiting for every PUBACK at
//! the end (QoS 0: until its client has written every publish to the socket; a broker that
//! holds a publisher back for [`PUBLISH_TIMEOUT`] fails the run). Each payload starts with its publisher's number and sequence number, so each
//! subscriber checks, per publisher, that messages come in order and once: a duplicate or a
//! message out of order is an error; a gap is a lost message. The run ends when every
//! subscriber has every message, or [`LOSS_WAIT`] after the last one arrived: a loss at QoS
//! 1 is an error, a loss at QoS 0 (a broker may drop them under overload) is reported.
//!
//! Per run: msgs/s published (messages sent over the first publish to the last receipt) and
//! delivered (messages received over the same time: 50x for 1 to 50); the broker process's
//! user + system time (`/proc/PID/stat`, every thread) over the run per message received; the
//! same for this process, the client (nothing else runs in it meanwhile), so that a ratio
//! between brokers is not one between clients; each one's CPU over the wall time in cores,
//! and the rest of the machine's. Each cell is the median of the runs. Before each run the
//! brokers must have gone quiet (as `benches/efficiency.rs` has it, `settle`).
//!
//! ## Idle connections
//!
//! On fresh brokers, before the throughput runs: 10,000 MQTT connections (CONNECT, and one
//! QoS 1 SUBSCRIBE to one of a hundred topics, as a device would), opened 64 at a time; the
//! broker's resident memory (`VmRSS`) before and after, per connection, its peak (`VmHWM`),
//! its threads. Every connection must still be open at the end. The bench raises its
//! file-descriptor limit to the hard limit first (the brokers inherit it).
//!
//! ## Aims (reported, never failed on)
//!
//! ferromq at least mosquitto's throughput (delivered msgs/s) in each scenario, at QoS 0 and at
//! QoS 1 (with and without fsync); ferromq with 10,000 idle connections under 150 MiB.
//!
//! ## Output and environment
//!
//! stdout, `bench-results/mqtt.md` and `bench-results/mqtt.svg` (delivered msgs/s by
//! scenario) under `CARGO_TARGET_DIR` (default `target`). The disk's fdatasync rate is
//! measured in the same run, in the brokers' directory, since the `ferromq sync` QoS 1 figures
//! depend on it.
//!
//! - `FERROMQ_MQTT_SECONDS=S`: each run's publishing time (10; quick 1);
//! - `FERROMQ_MQTT_RUNS=N`: runs of each scenario and broker (3; quick 1);
//! - `FERROMQ_MQTT_CONNECTIONS=N`: idle connections (10,000; quick 1,000; 0 skips them);
//! - `FERROMQ_MQTT_PAYLOAD=BYTES`: payload size (1024, at least 8);
//! - `FERROMQ_MQTT_VERSION=3|5`: MQTT 3.1.1 (default) or 5.0;
//! - `FERROMQ_MQTT_SCENARIOS=qos0-1to1,qos1-50to1,...`: only those (of `qos0|qos1` and
//!   `1to1|50to1|1to50`);
//! - `FERROMQ_MQTT_BROKERS=ferromq-sync,ferromq-nosync,mosquitto`: only those;
//! - `FERROMQ_REQUIRE_MOSQUITTO=1`: mosquitto missing is an error;
//! - `FERROMQ_MQTT_MOSQUITTO_NODELAY=1`: mosquitto with `set_tcp_nodelay true` (Nagle's
//!   algorithm off, as ferromq and the client have it). Its default, kept here, leaves Nagle
//!   on, which coalesces its many small writes: measured here, up to twice the QoS 0
//!   throughput and half the client's CPU;
//! - `FERROMQ_BENCH_DIR`: where the brokers' data goes (default: the system's temporary
//!   directory); `FERROMQ_BIN`: another `ferromq` binary.

use std::collections::VecDeque;
use std::net::SocketAddr;
use std::path::Path;
use std::sync::atomic::{AtomicBool, AtomicU64, Ordering};
use std::sync::Arc;
use std::time::{Duration, Instant};

use anyhow::{bail, ensure, Context};
use benches::chart::{grouped_bars, Group};
use benches::efficiency::{
    clock_ticks_per_second, machine_busy_ticks, settle, ProcessCounters, QUIET_CORES, QUIET_WINDOW,
};
use benches::mosquitto::{MosquittoProcess, MosquittoSettings};
use benches::process::{status_kb, FerromqProcess, Launch};
use benches::s7::fsync_probe;
use benches::{median, results_dir, write_result};
use bytes::BytesMut;
use client::mqtt::{Confirmation, MqttClient, MqttOptions, QoS, Version};
use tokio::task::JoinSet;

/// QoS 1 publishes each publisher keeps unacknowledged (and QoS 0 ones queued in its client).
const PUBLISH_WINDOW: usize = 100;
/// How long a publisher's client may wait for a publish to be written (QoS 0) or
/// acknowledged (QoS 1): a broker holding a publisher back (flow control while its
/// subscribers catch up) is no error, one that holds it for this long is.
const PUBLISH_TIMEOUT: Duration = Duration::from_secs(120);
/// How long after the last message arrived a run waits for the missing ones.
const LOSS_WAIT: Duration = Duration::from_secs(3);
/// How long a subscriber waits for one message before it looks whether the run is over.
const RECEIVE_POLL: Duration = Duration::from_millis(50);
/// How often the run looks whether every message has arrived.
const PROGRESS_POLL: Duration = Duration::from_millis(5);
/// The many side of 50 to 1 and 1 to 50.
const MANY: usize = 50;
/// Connections opened at once (the listeners' accept backlogs are bounded).
const OPENING_AT_ONCE: usize = 64;
/// Descriptors this process needs besides its connections'.
const FILES_BESIDES_CONNECTIONS: u64 = 512;
/// Topics the idle connections subscribe to.
const IDLE_TOPICS: usize = 100;
/// mosquitto's limits: far above what a run keeps in flight, and no limit to what it queues
/// (0), so that it drops nothing a client could still take (past `max_queued_messages` it
/// drops QoS 0 messages and refuses QoS 1 ones: on a machine where its publishers ran fast,
/// a QoS 1 50 to 1 run queued past a million and lost 423,150 deliveries).
const MOSQUITTO_MAX_INFLIGHT: u32 = 1000;
const MOSQUITTO_MAX_QUEUED: u32 = 0;
/// The aim for 10,000 idle connections.
const RSS_AIM_MIB: f64 = 150.0;

/// The sizes of a mode, after the environment.
struct Sizes {
    quick: bool,
    seconds: f64,
    runs: usize,
    connections: usize,
    payload: usize,
    version: Version,
    /// How long a broker may stay busy before a run starts anyway.
    settle_timeout: Duration,
    fsync_probe: Duration,
    /// mosquitto with Nagle's algorithm off, as ferromq has it (not its default).
    mosquitto_nodelay: bool,
}

impl Sizes {
    fn from_env(quick: bool) -> anyhow::Result<Sizes> {
        let seconds = env_parse("FERROMQ_MQTT_SECONDS", if quick { 1.0 } else { 10.0 })?;
        ensure!(seconds > 0.0, "FERROMQ_MQTT_SECONDS must be above 0");
        let runs = env_parse("FERROMQ_MQTT_RUNS", if quick { 1 } else { 3 })?;
        ensure!(runs > 0, "FERROMQ_MQTT_RUNS must be at least 1");
        let connections =
            env_parse("FERROMQ_MQTT_CONNECTIONS", if quick { 1_000 } else { 10_000 })?;
        let payload = env_parse("FERROMQ_MQTT_PAYLOAD", 1024)?;
        ensure!(payload >= 8, "FERROMQ_MQTT_PAYLOAD must be at least 8 bytes (the sequence)");
        let version = match std::env::var("FERROMQ_MQTT_VERSION").as_deref() {
            Err(_) | Ok("3") | Ok("3.1.1") => Version::V3_1_1,
            Ok("5") | Ok("5.0") => Version::V5_0,
            Ok(other) => bail!("FERROMQ_MQTT_VERSION={other}: 3 (3.1.1) or 5 (5.0)"),
        };
        let mosquitto_nodelay = env_parse::<u8>("FERROMQ_MQTT_MOSQUITTO_NODELAY", 0)? != 0;
        Ok(Sizes {
            mosquitto_nodelay,
            quick,
            seconds,
            runs,
            connections,
            payload,
            version,
            settle_timeout: Duration::from_secs(if quick { 3 } else { 15 }),
            fsync_probe: Duration::from_millis(if quick { 300 } else { 1000 }),
        })
    }
}

/// `name`'s value parsed, or `default` when it is not set.
fn env_parse<T: std::str::FromStr>(name: &str, default: T) -> anyhow::Result<T> {
    match std::env::var(name) {
        Ok(text) => text.trim().parse().map_err(|_| anyhow::anyhow!("{name}={text:?}")),
        Err(_) => Ok(default),
    }
}

#[derive(Debug, Clone, Copy, PartialEq, Eq)]
enum BrokerKind {
    FerromqSync,
    FerromqNoSync,
    Mosquitto,
}

const BROKER_KINDS: [BrokerKind; 3] =
    [BrokerKind::FerromqSync, BrokerKind::FerromqNoSync, BrokerKind::Mosquitto];

impl BrokerKind {
    fn name(self) -> &'static str {
        match self {
            BrokerKind::FerromqSync => "ferromq sync",
            BrokerKind::FerromqNoSync => "ferromq nosync",
            BrokerKind::Mosquitto => "mosquitto",
        }
    }

    /// The name in `FERROMQ_MQTT_BROKERS` and in topics.
    fn id(self) -> &'static str {
        match self {
            BrokerKind::FerromqSync => "ferromq-sync",
            BrokerKind::FerromqNoSync => "ferromq-nosync",
            BrokerKind::Mosquitto => "mosquitto",
        }
    }
}

/// A broker process, kept alive for the whole bench.
enum Process {
    Ferromq(FerromqProcess),
    Mosquitto(MosquittoProcess),
}

struct Broker {
    kind: BrokerKind,
    addr: SocketAddr,
    pid: u32,
    process: Process,
}

impl Broker {
    /// A ferromq with an MQTT connector on the journal with `sync`, room for `connections`.
    fn ferromq(kind: BrokerKind, dir: &Path, connections: usize) -> anyhow::Result<Broker> {
        let sync = if kind == BrokerKind::FerromqSync { "always" } else { "never" };
        let config = format!(
            "[transport]\nmax_connections = {}\n\n[store]\nkind = \"journal\"\nsync = \"{sync}\"\n",
            connections + 1000
        );
        let process =
            FerromqProcess::launch(dir, &Launch { config, mqtt: true, ..Launch::default() })?;
        let addr = process.mqtt.context("ferromq has no MQTT connector")?;
        Ok(Broker { kind, addr, pid: process.pid(), process: Process::Ferromq(process) })
    }

    fn mosquitto(dir: &Path, tcp_nodelay: bool) -> anyhow::Result<Broker> {
        let settings = MosquittoSettings {
            max_inflight_messages: MOSQUITTO_MAX_INFLIGHT,
            max_queued_messages: MOSQUITTO_MAX_QUEUED,
            tcp_nodelay,
        };
        let process = MosquittoProcess::start(dir, settings)?;
        Ok(Broker {
            kind: BrokerKind::Mosquitto,
            addr: process.addr,
            pid: process.pid(),
            process: Process::Mosquitto(process),
        })
    }

    /// An error if the process has exited.
    fn check_running(&mut self) -> anyhow::Result<()> {
        match &mut self.process {
            Process::Ferromq(process) => {
                ensure!(process.status_kb("VmRSS:") > 0, "{} has exited", self.kind.name())
            }
            Process::Mosquitto(process) => {
                ensure!(process.is_running(), "mosquitto has exited:\n{}", process.logs())
            }
        }
        Ok(())
    }
}

/// One scenario: a QoS, the subscribers' sessions and a shape.
#[derive(Debug, Clone, Copy)]
struct Scenario {
    qos: QoS,
    /// The subscribers keep their sessions (3.1.1's clean session 0, 5.0's clean start 0
    /// with the session kept): their QoS 1 messages are held for them even while they are
    /// away, which for ferromq means stored (a durable subscription), and for mosquitto
    /// (without persistence) kept in memory. With clean sessions ferromq stores nothing
    /// either, as ActiveMQ keeps a topic's messages from its store when no durable
    /// subscription wants them.
    persistent_session: bool,
    publishers: usize,
    subscribers: usize,
}

impl Scenario {
    /// QoS 0 with clean sessions, QoS 1 with persistent sessions, then QoS 1 with clean
    /// sessions; each 1 to 1, 50 to 1, 1 to 50.
    fn all() -> Vec<Scenario> {
        let shapes = [(1, 1), (MANY, 1), (1, MANY)];
        [(QoS::AtMostOnce, false), (QoS::AtLeastOnce, true), (QoS::AtLeastOnce, false)]
            .into_iter()
            .flat_map(|(qos, persistent_session)| {
                shapes.map(|(publishers, subscribers)| Scenario {
                    qos,
                    persistent_session,
                    publishers,
                    subscribers,
                })
            })
            .collect()
    }

    /// The default selection: all of them, but quick mode leaves QoS 1 with clean sessions
    /// out (CI's two minutes).
    fn default_selection(quick: bool) -> Vec<Scenario> {
        let mut all = Scenario::all();
        if quick {
            all.retain(|s| s.qos == QoS::AtMostOnce || s.persistent_session);
        }
        all
    }

    /// `qos0-50to1`, `qos1-1to50` (persistent sessions), `qos1clean-1to1`.
    fn id(&self) -> String {
        let clean =
            if self.qos != QoS::AtMostOnce && !self.persistent_session { "clean" } else { "" };
        format!("qos{}{clean}-{}to{}", self.qos as u8, self.publishers, self.subscribers)
    }

    /// `QoS 1 50 to 1, kept sessions`.
    fn label(&self) -> String {
        let sessions = match (self.qos, self.persistent_session) {
            (QoS::AtMostOnce, _) => "",
            (_, true) => ", kept sessions",
            (_, false) => ", clean sessions",
        };
        format!("QoS {} {}{sessions}", self.qos as u8, self.shape())
    }

    fn shape(&self) -> String {
        format!("{} to {}", self.publishers, self.subscribers)
    }
}

/// One run's figures.
#[derive(Debug, Clone, Copy)]
struct RunFigures {
    sent: u64,
    /// Deliveries due: every message sent, to every subscriber.
    expected: u64,
    received: u64,
    /// First publish to the last receipt.
    seconds: f64,
    broker_us: f64,
    client_us: f64,
    /// Bytes the broker had written to the disk (`write_bytes` of `/proc/PID/io`, what
    /// reached the block layer) per message received: whether the store was involved.
    disk_bytes: f64,
    broker_cores: f64,
    client_cores: f64,
    other_cores: f64,
}

impl RunFigures {
    fn sent_rate(&self) -> f64 {
        self.sent as f64 / self.seconds
    }

    fn delivered_rate(&self) -> f64 {
        self.received as f64 / self.seconds
    }

    fn lost(&self) -> u64 {
        self.expected.saturating_sub(self.received)
    }
}

/// Idle connections' figures.
struct IdleFigures {
    connections: usize,
    rss_before_kb: u64,
    rss_after_kb: u64,
    peak_kb: u64,
    threads: u64,
    open_seconds: f64,
}

impl IdleFigures {
    fn per_connection_bytes(&self) -> f64 {
        (self.rss_after_kb.saturating_sub(self.rss_before_kb) * 1024) as f64
            / self.connections as f64
    }
}

/// What the runs give back to the table.
struct Cell {
    scenario: Scenario,
    kind: BrokerKind,
    runs: Vec<RunFigures>,
}

impl Cell {
    fn median(&self, figure: impl Fn(&RunFigures) -> f64) -> f64 {
        median(self.runs.iter().map(figure).collect())
    }
}

fn main() -> anyhow::Result<()> {
    let quick = std::env::args().any(|a| a == "--quick");
    let sizes = Sizes::from_env(quick)?;
    let scenarios = chosen_scenarios(quick)?;
    let mut kinds = chosen_brokers()?;

    let limit = rlimit::increase_nofile_limit(u64::MAX).context("raise the open file limit")?;
    let mut connections = sizes.connections;
    let needed = connections as u64 + FILES_BESIDES_CONNECTIONS;
    if connections > 0 && limit < needed {
        ensure!(
            quick,
            "{connections} connections need about {needed} open files, and the hard limit is \
             {limit} (raise it with ulimit -Hn)"
        );
        connections = limit.saturating_sub(FILES_BESIDES_CONNECTIONS) as usize;
        println!("the hard open file limit {limit} allows {connections} connections");
    }

    let required =
        std::env::var_os("FERROMQ_REQUIRE_MOSQUITTO").is_some_and(|v| !v.is_empty() && v != "0");
    if kinds.contains(&BrokerKind::Mosquitto) && !MosquittoProcess::installed() {
        ensure!(!required, "FERROMQ_REQUIRE_MOSQUITTO is set and mosquitto is not installed");
        println!("mosquitto is not installed (/usr/sbin/mosquitto): ferromq runs alone");
        kinds.retain(|kind| *kind != BrokerKind::Mosquitto);
    }

    let base = std::env::var_os("FERROMQ_BENCH_DIR").map(std::path::PathBuf::from);
    let dir = match &base {
        Some(base) => tempfile::tempdir_in(base)?,
        None => tempfile::tempdir()?,
    };
    let mut brokers = Vec::new();
    for kind in &kinds {
        let broker_dir = dir.path().join(kind.id());
        std::fs::create_dir_all(&broker_dir)?;
        let broker = match kind {
            BrokerKind::Mosquitto => Broker::mosquitto(&broker_dir, sizes.mosquitto_nodelay)?,
            _ => Broker::ferromq(*kind, &broker_dir, connections)?,
        };
        println!("{} pid {} MQTT on {}", kind.name(), broker.pid, broker.addr);
        if broker.kind != BrokerKind::Mosquitto && std::env::var_os("FERROMQ_BIN").is_none() {
            // The first launch built the binary; the second must run the same one, not a
            // rebuild of sources edited meanwhile.
            let exe = std::env::current_exe()?;
            let profile = exe.parent().and_then(Path::parent).context("the target directory")?;
            std::env::set_var("FERROMQ_BIN", profile.join("ferromq"));
        }
        brokers.push(broker);
    }
    let fsync = fsync_probe(dir.path(), sizes.fsync_probe).context("probing the disk")?;
    println!(
        "MQTT {}, {} B payloads, {} s per run, {} run(s); the disk: {:.0} fdatasync/s",
        version_name(sizes.version),
        sizes.payload,
        sizes.seconds,
        sizes.runs,
        fsync.per_second
    );

    let runtime = tokio::runtime::Builder::new_multi_thread().enable_all().build()?;
    let ticks_per_second = clock_ticks_per_second();
    let pids: Vec<u32> = brokers.iter().map(|b| b.pid).collect();

    // Idle connections first, on fresh brokers: their memory is then the connections' and
    // the broker's own, not what the throughput runs left allocated. The two ferromq
    // configurations differ only in the store's sync: one of them is enough.
    let mut idle = Vec::new();
    if connections > 0 {
        let mut ferromq_done = false;
        for broker in &brokers {
            let is_ferromq = broker.kind != BrokerKind::Mosquitto;
            if is_ferromq && ferromq_done {
                continue;
            }
            ferromq_done |= is_ferromq;
            settle(&pids, QUIET_WINDOW, QUIET_CORES, sizes.settle_timeout, ticks_per_second)?;
            let figures = runtime
                .block_on(idle_connections(broker, connections, sizes.version))
                .with_context(|| format!("{}: idle connections", broker.kind.name()))?;
            println!(
                "{}: {} idle connections in {:.1} s, RSS {:.1} -> {:.1} MiB ({:.0} B each), \
                 peak {:.1} MiB, {} threads",
                broker.kind.name(),
                figures.connections,
                figures.open_seconds,
                mib(figures.rss_before_kb),
                mib(figures.rss_after_kb),
                figures.per_connection_bytes(),
                mib(figures.peak_kb),
                figures.threads
            );
            idle.push((broker.kind, figures));
        }
    }

    let mut cells: Vec<Cell> = Vec::new();
    for scenario in &scenarios {
        for broker in &brokers {
            cells.push(Cell { scenario: *scenario, kind: broker.kind, runs: Vec::new() });
        }
    }
    let broker_count = brokers.len();
    for run in 0..sizes.runs {
        for (index, scenario) in scenarios.iter().enumerate() {
            // Brokers alternate within a scenario, so that a slow spell of the machine falls
            // on all of them alike.
            for (offset, broker) in brokers.iter_mut().enumerate() {
                let busiest = settle(
                    &pids,
                    QUIET_WINDOW,
                    QUIET_CORES,
                    sizes.settle_timeout,
                    ticks_per_second,
                )?;
                if busiest >= QUIET_CORES {
                    println!("a broker still used {busiest:.2} cores; going on");
                }
                let topic = format!("bench/{}/{}/{run}", broker.kind.id(), scenario.id());
                let figures = runtime
                    .block_on(throughput(broker, *scenario, &topic, &sizes, ticks_per_second))
                    .with_context(|| format!("{} {}", broker.kind.name(), scenario.id()))?;
                broker.check_running()?;
                println!(
                    "{:<11} {:<15} sent {:>8} received {:>9} lost {:>6} in {:>6.2} s: {:>8.0} \
                     msgs/s in, {:>8.0} out, broker {:>6.1} us/msg, client {:>6.1} us/msg",
                    scenario.id(),
                    broker.kind.name(),
                    figures.sent,
                    figures.received,
                    figures.lost(),
                    figures.seconds,
                    figures.sent_rate(),
                    figures.delivered_rate(),
                    figures.broker_us,
                    figures.client_us
                );
                cells[index * broker_count + offset].runs.push(figures);
            }
        }
    }

    let report = Report { sizes: &sizes, fsync_per_second: fsync.per_second, cells, idle };
    let table = report.markdown();
    println!("\n{table}");
    let out = results_dir();
    std::fs::create_dir_all(&out)?;
    write_result(&out.join("mqtt.md"), &table)?;
    write_result(&out.join("mqtt.svg"), &report.chart())?;
    Ok(())
}

fn version_name(version: Version) -> &'static str {
    match version {
        Version::V5_0 => "5.0",
        Version::V3_1 => "3.1",
        Version::V3_1_1 => "3.1.1",
    }
}

fn mib(kb: u64) -> f64 {
    kb as f64 / 1024.0
}

fn chosen_scenarios(quick: bool) -> anyhow::Result<Vec<Scenario>> {
    let all = Scenario::all();
    let Ok(list) = std::env::var("FERROMQ_MQTT_SCENARIOS") else {
        return Ok(Scenario::default_selection(quick));
    };
    let mut chosen = Vec::new();
    for name in list.split(',').map(str::trim).filter(|n| !n.is_empty()) {
        let scenario =
            all.iter().find(|s| s.id().eq_ignore_ascii_case(name)).with_context(|| {
                let ids: Vec<String> = all.iter().map(Scenario::id).collect();
                format!(
                    "FERROMQ_MQTT_SCENARIOS: no scenario `{name}` (there are {})",
                    ids.join(", ")
                )
            })?;
        chosen.push(*scenario);
    }
    ensure!(!chosen.is_empty(), "FERROMQ_MQTT_SCENARIOS names no scenario");
    Ok(chosen)
}

fn chosen_brokers() -> anyhow::Result<Vec<BrokerKind>> {
    let Ok(list) = std::env::var("FERROMQ_MQTT_BROKERS") else { return Ok(BROKER_KINDS.to_vec()) };
    let mut chosen = Vec::new();
    for name in list.split(',').map(str::trim).filter(|n| !n.is_empty()) {
        let kind =
            BROKER_KINDS.iter().find(|k| k.id().eq_ignore_ascii_case(name)).with_context(|| {
                format!(
                    "FERROMQ_MQTT_BROKERS: no broker `{name}` (ferromq-sync, ferromq-nosync, \
                     mosquitto)"
                )
            })?;
        chosen.push(*kind);
    }
    ensure!(!chosen.is_empty(), "FERROMQ_MQTT_BROKERS names no broker");
    Ok(chosen)
}

fn options(version: Version) -> MqttOptions {
    MqttOptions {
        version,
        keep_alive: Duration::from_secs(60),
        max_in_flight: PUBLISH_WINDOW,
        ..MqttOptions::default()
    }
}

/// A clean session under a generated client id.
async fn connect(addr: SocketAddr, version: Version) -> anyhow::Result<MqttClient> {
    connect_with(addr, options(version)).await
}

async fn connect_with(addr: SocketAddr, options: MqttOptions) -> anyhow::Result<MqttClient> {
    MqttClient::connect(&addr.ip().to_string(), addr.port(), options)
        .await
        .with_context(|| format!("connecting to {addr}"))
}

/// A subscriber's connection: a clean session, or the session of `client_id` kept.
async fn connect_subscriber(
    addr: SocketAddr,
    version: Version,
    client_id: &str,
    persistent: bool,
) -> anyhow::Result<MqttClient> {
    let mut options = options(version);
    if persistent {
        options.client_id = client_id.to_owned();
        options.clean_session = false;
    }
    connect_with(addr, options).await
}

/// Ends the kept session of `client_id` (its subscription, on ferromq a durable one with its
/// store records): a clean session under the same id, at once disconnected.
async fn discard_session(
    addr: SocketAddr,
    version: Version,
    client_id: &str,
) -> anyhow::Result<()> {
    let options = MqttOptions { client_id: client_id.to_owned(), ..options(version) };
    connect_with(addr, options).await?.disconnect().await.context("disconnecting")
}

/// What one subscriber saw: per publisher, the sequence number it expects next.
struct Received {
    client: MqttClient,
    next: Vec<u32>,
    count: u64,
    last: Option<Instant>,
}

/// One run of `scenario` against `broker` on `topic`.
async fn throughput(
    broker: &Broker,
    scenario: Scenario,
    topic: &str,
    sizes: &Sizes,
    ticks_per_second: u64,
) -> anyhow::Result<RunFigures> {
    let qos = scenario.qos;
    let stop = Arc::new(AtomicBool::new(false));
    let total = Arc::new(AtomicU64::new(0));
    let mut subscribers = JoinSet::new();
    let subscriber_ids: Vec<String> = (0..scenario.subscribers)
        .map(|index| format!("{topic}/s{index}").replace('/', "-"))
        .collect();
    for client_id in &subscriber_ids {
        let client =
            connect_subscriber(broker.addr, sizes.version, client_id, scenario.persistent_session)
                .await?;
        let granted = client.subscribe(topic, qos).await?;
        ensure!(granted == qos, "subscribed to {topic} at {qos:?}, granted {granted:?}");
        subscribers.spawn(receive(client, scenario.publishers, stop.clone(), total.clone()));
    }
    let mut publishers = Vec::with_capacity(scenario.publishers);
    for _ in 0..scenario.publishers {
        let options = MqttOptions { timeout: PUBLISH_TIMEOUT, ..options(sizes.version) };
        publishers.push(connect_with(broker.addr, options).await?);
    }

    let own_pid = std::process::id();
    let broker_before = ProcessCounters::read(broker.pid)?;
    let disk_before = disk_write_bytes(broker.pid);
    let client_before = ProcessCounters::read(own_pid)?;
    let machine_before = machine_busy_ticks()?;
    let started = Instant::now();
    let until = started + Duration::from_secs_f64(sizes.seconds);
    let mut publishing = JoinSet::new();
    for (index, client) in publishers.into_iter().enumerate() {
        let (topic, payload) = (topic.to_owned(), sizes.payload);
        publishing.spawn(publish(client, topic, qos, index as u32, payload, until));
    }
    let mut clients = Vec::new();
    let mut sent = 0u64;
    while let Some(result) = publishing.join_next().await {
        let (client, count) = result??;
        sent += count;
        clients.push(client);
    }
    let expected = sent * scenario.subscribers as u64;

    // Every message, or none for LOSS_WAIT; a subscriber's failure ends the run at once.
    let mut last_count = total.load(Ordering::Relaxed);
    let mut last_progress = Instant::now();
    loop {
        let count = total.load(Ordering::Relaxed);
        if count >= expected {
            break;
        }
        if count != last_count {
            (last_count, last_progress) = (count, Instant::now());
        } else if last_progress.elapsed() >= LOSS_WAIT {
            break;
        }
        if let Some(result) = subscribers.try_join_next() {
            result??;
            bail!("a subscriber ended before the run did");
        }
        tokio::time::sleep(PROGRESS_POLL).await;
    }
    let broker_after = ProcessCounters::read(broker.pid)?;
    let disk_after = disk_write_bytes(broker.pid);
    let client_after = ProcessCounters::read(own_pid)?;
    let machine_after = machine_busy_ticks()?;
    let wall = started.elapsed().as_secs_f64();
    stop.store(true, Ordering::Relaxed);

    let mut received = 0u64;
    let mut last = started;
    while let Some(result) = subscribers.join_next().await {
        let subscriber = result??;
        received += subscriber.count;
        last = last.max(subscriber.last.unwrap_or(started));
        clients.push(subscriber.client);
    }
    ensure!(
        received <= expected,
        "{received} messages received of {expected} due (the sequence checks missed a duplicate)"
    );
    if qos != QoS::AtMostOnce && received < expected {
        bail!("QoS 1: {} of {expected} deliveries lost", expected - received);
    }
    ensure!(received > 0, "no message arrived");
    for client in clients {
        client.disconnect().await.context("disconnecting")?;
    }
    if scenario.persistent_session {
        for client_id in &subscriber_ids {
            discard_session(broker.addr, sizes.version, client_id).await?;
        }
    }

    let seconds_of = |ticks: u64| ticks as f64 / ticks_per_second as f64;
    let broker_cpu = seconds_of(broker_after.cpu_ticks.saturating_sub(broker_before.cpu_ticks));
    let client_cpu = seconds_of(client_after.cpu_ticks.saturating_sub(client_before.cpu_ticks));
    let machine = seconds_of(machine_after.saturating_sub(machine_before));
    let per_message = |cpu: f64| cpu * 1e6 / received as f64;
    Ok(RunFigures {
        sent,
        expected,
        received,
        seconds: last.duration_since(started).as_secs_f64().max(1e-6),
        broker_us: per_message(broker_cpu),
        client_us: per_message(client_cpu),
        disk_bytes: disk_after.saturating_sub(disk_before) as f64 / received as f64,
        broker_cores: broker_cpu / wall,
        client_cores: client_cpu / wall,
        other_cores: (machine - broker_cpu - client_cpu).max(0.0) / wall,
    })
}

/// Publishes to `topic` until `until`, then waits for every acknowledgement (QoS 1); the
/// client back and how many it published. Each payload begins with `index` and the sequence
/// number (big-endian u32 each).
async fn publish(
    client: MqttClient,
    topic: String,
    qos: QoS,
    index: u32,
    payload: usize,
    until: Instant,
) -> anyhow::Result<(MqttClient, u64)> {
    let template = vec![b'm'; payload];
    let mut pending: VecDeque<Confirmation> = VecDeque::with_capacity(PUBLISH_WINDOW + 1);
    let mut sequence: u32 = 0;
    while Instant::now() < until {
        let mut body = BytesMut::from(&template[..]);
        body[..4].copy_from_slice(&index.to_be_bytes());
        body[4..8].copy_from_slice(&sequence.to_be_bytes());
        pending.push_back(client.publish(&topic, body.freeze(), qos, false).await?);
        sequence += 1;
        while pending.len() > PUBLISH_WINDOW {
            if let Some(confirmation) = pending.pop_front() {
                confirmation.wait().await.context("a publish")?;
            }
        }
    }
    for confirmation in pending {
        confirmation.wait().await.context("a publish")?;
    }
    Ok((client, u64::from(sequence)))
}

/// Receives until `stop`, checking each publisher's sequence: a number below the one expected
/// is a duplicate or out of order (an error); one above it follows lost messages.
async fn receive(
    client: MqttClient,
    publishers: usize,
    stop: Arc<AtomicBool>,
    total: Arc<AtomicU64>,
) -> anyhow::Result<Received> {
    let mut seen = Received { client, next: vec![0; publishers], count: 0, last: None };
    loop {
        let Some(message) = seen.client.recv(RECEIVE_POLL).await? else {
            if stop.load(Ordering::Relaxed) {
                return Ok(seen);
            }
            continue;
        };
        let payload = &message.payload;
        ensure!(payload.len() >= 8, "a payload of {} bytes", payload.len());
        let word = |at: usize| {
            u32::from_be_bytes([payload[at], payload[at + 1], payload[at + 2], payload[at + 3]])
        };
        let (publisher, sequence) = (word(0) as usize, word(4));
        let next = seen
            .next
            .get_mut(publisher)
            .with_context(|| format!("a message of publisher {publisher}"))?;
        ensure!(
            sequence >= *next,
            "publisher {publisher}'s message {sequence} came after its message {}",
            *next - 1
        );
        *next = sequence + 1;
        seen.count += 1;
        seen.last = Some(Instant::now());
        total.fetch_add(1, Ordering::Relaxed);
    }
}

/// Opens `count` idle connections to `broker`, each subscribed to one of [`IDLE_TOPICS`]
/// topics at QoS 1, and measures the broker's memory.
async fn idle_connections(
    broker: &Broker,
    count: usize,
    version: Version,
) -> anyhow::Result<IdleFigures> {
    let rss_before_kb = settled_rss(broker.pid).await;
    let started = Instant::now();
    let mut opened = Vec::with_capacity(count);
    let mut opening = JoinSet::new();
    let addr = broker.addr;
    for index in 0..count {
        if opening.len() >= OPENING_AT_ONCE {
            opened.push(opening.join_next().await.context("a connection task")???);
        }
        opening.spawn(async move {
            let client =
                connect(addr, version).await.with_context(|| format!("idle connection {index}"))?;
            let topic = format!("bench/idle/{}", index % IDLE_TOPICS);
            client.subscribe(&topic, QoS::AtLeastOnce).await?;
            anyhow::Ok(client)
        });
    }
    while let Some(result) = opening.join_next().await {
        opened.push(result??);
    }
    let open_seconds = started.elapsed().as_secs_f64();
    let rss_after_kb = settled_rss(broker.pid).await;
    let peak_kb = status_kb(broker.pid, "VmHWM:");
    let threads = status_kb(broker.pid, "Threads:");
    let closed = opened.iter().filter(|client| client.is_closed()).count();
    ensure!(closed == 0, "{closed} of {count} idle connections were closed");
    // Dropping a client sends DISCONNECT: how idle devices leave is of no interest here.
    drop(opened);
    Ok(IdleFigures {
        connections: count,
        rss_before_kb,
        rss_after_kb,
        peak_kb,
        threads,
        open_seconds,
    })
}

/// `write_bytes` of `/proc/PID/io`: what the process caused to be written to storage; 0
/// where it cannot be read.
fn disk_write_bytes(pid: u32) -> u64 {
    let io = std::fs::read_to_string(format!("/proc/{pid}/io")).unwrap_or_default();
    io.lines()
        .find_map(|line| line.strip_prefix("write_bytes:"))
        .and_then(|value| value.trim().parse().ok())
        .unwrap_or(0)
}

/// The resident memory once the broker has handled what was just opened.
async fn settled_rss(pid: u32) -> u64 {
    tokio::time::sleep(Duration::from_secs(1)).await;
    status_kb(pid, "VmRSS:")
}

/// The tables, the aims and the chart.
struct Report<'a> {
    sizes: &'a Sizes,
    fsync_per_second: f64,
    cells: Vec<Cell>,
    idle: Vec<(BrokerKind, IdleFigures)>,
}

impl Report<'_> {
    fn cell(&self, id: &str, kind: BrokerKind) -> Option<&Cell> {
        self.cells.iter().find(|c| c.scenario.id() == id && c.kind == kind && !c.runs.is_empty())
    }

    fn markdown(&self) -> String {
        let s = self.sizes;
        let mut out = format!(
            "# MQTT: ferromq beside mosquitto\n\n{} mode: MQTT {}, {} B payloads, {} s of \
             publishing per run, {} run(s) per cell (medians), QoS 1 windows of \
             {PUBLISH_WINDOW}; the disk did {:.0} fdatasync/s. `ferromq sync` syncs the \
             journal before each QoS 1 PUBACK, `ferromq nosync` leaves it to the operating \
             system (mosquitto, `persistence false`, writes nothing).\n\n",
            if s.quick { "Quick" } else { "Full" },
            version_name(s.version),
            s.payload,
            s.seconds,
            s.runs,
            self.fsync_per_second
        );
        out.push_str(
            "| scenario | broker | sent | lost | msgs/s in | msgs/s delivered | broker µs/msg \
             | client µs/msg | broker disk B/msg | broker cores | client cores | other cores |\n\
             |---|---|---:|---:|---:|---:|---:|---:|---:|---:|---:|---:|\n",
        );
        for cell in &self.cells {
            if cell.runs.is_empty() {
                continue;
            }
            let lost: u64 = cell.runs.iter().map(RunFigures::lost).sum();
            let sent: u64 = cell.runs.iter().map(|r| r.sent).sum();
            out.push_str(&format!(
                "| {} | {} | {} | {} | {:.0} | {:.0} | {:.1} | {:.1} | {:.0} | {:.2} | {:.2} | \
                 {:.2} |\n",
                cell.scenario.label(),
                cell.kind.name(),
                sent,
                lost,
                cell.median(RunFigures::sent_rate),
                cell.median(RunFigures::delivered_rate),
                cell.median(|r| r.broker_us),
                cell.median(|r| r.client_us),
                cell.median(|r| r.disk_bytes),
                cell.median(|r| r.broker_cores),
                cell.median(|r| r.client_cores),
                cell.median(|r| r.other_cores),
            ));
        }
        out.push_str(
            "\nµs/msg: CPU time (user + system, every thread) over the run per message \
             received; for 1 to 50 a message is one delivery. Sent and lost add up all runs.\n",
        );

        out.push_str("\n## Aims\n\n");
        let mut ids: Vec<String> = self.cells.iter().map(|c| c.scenario.id()).collect();
        ids.dedup();
        let mut any = false;
        for id in &ids {
            let Some(peer) = self.cell(id, BrokerKind::Mosquitto) else { continue };
            let peer_rate = peer.median(RunFigures::delivered_rate);
            for kind in [BrokerKind::FerromqNoSync, BrokerKind::FerromqSync] {
                let Some(ours) = self.cell(id, kind) else { continue };
                // Without kept sessions the store is not involved: one ferromq line is enough.
                if !ours.scenario.persistent_session
                    && kind == BrokerKind::FerromqSync
                    && self.cell(id, BrokerKind::FerromqNoSync).is_some()
                {
                    continue;
                }
                let rate = ours.median(RunFigures::delivered_rate);
                let ratio = rate / peer_rate;
                any = true;
                out.push_str(&format!(
                    "- {}: {} {:.0} msgs/s, mosquitto {:.0}: {:.2}x (aim at least 1x: {}); \
                     broker CPU {:.1} vs {:.1} µs/msg\n",
                    ours.scenario.label(),
                    kind.name(),
                    rate,
                    peer_rate,
                    ratio,
                    if ratio >= 1.0 { "met" } else { "MISSED" },
                    ours.median(|r| r.broker_us),
                    peer.median(|r| r.broker_us),
                ));
            }
        }
        if !any {
            out.push_str("- throughput: no mosquitto figures to compare with\n");
        }
        if let Some((_, figures)) = self.idle.iter().find(|(k, _)| *k != BrokerKind::Mosquitto) {
            let rss = mib(figures.rss_after_kb);
            let scaled = if figures.connections == 10_000 {
                String::new()
            } else {
                format!(
                    " (the aim is for 10,000; {} measured, which at {:.0} B each would be \
                     {:.1} MiB)",
                    figures.connections,
                    figures.per_connection_bytes(),
                    mib(figures.rss_before_kb)
                        + figures.per_connection_bytes() * 10_000.0 / 1048576.0
                )
            };
            out.push_str(&format!(
                "- {} idle connections: ferromq {rss:.1} MiB resident (aim under {RSS_AIM_MIB} \
                 MiB: {}){scaled}\n",
                figures.connections,
                if rss < RSS_AIM_MIB { "met" } else { "MISSED" }
            ));
        }
        out.push_str("\nThe aims are reported, not enforced.\n");

        if !self.idle.is_empty() {
            out.push_str(
                "\n## Idle connections\n\nEach: CONNECT and one QoS 1 SUBSCRIBE; RSS one second \
                 after the last opened.\n\n\
                 | broker | connections | RSS before | RSS with them | per connection | peak \
                 RSS | threads | opened in |\n|---|---:|---:|---:|---:|---:|---:|---:|\n",
            );
            for (kind, f) in &self.idle {
                let name = match kind {
                    BrokerKind::Mosquitto => "mosquitto",
                    _ => "ferromq",
                };
                out.push_str(&format!(
                    "| {name} | {} | {:.1} MiB | {:.1} MiB | {:.0} B | {:.1} MiB | {} | {:.1} s \
                     |\n",
                    f.connections,
                    mib(f.rss_before_kb),
                    mib(f.rss_after_kb),
                    f.per_connection_bytes(),
                    mib(f.peak_kb),
                    f.threads,
                    f.open_seconds
                ));
            }
        }
        out
    }

    fn chart(&self) -> String {
        let mut kinds: Vec<BrokerKind> = Vec::new();
        for cell in &self.cells {
            if !kinds.contains(&cell.kind) {
                kinds.push(cell.kind);
            }
        }
        let series: Vec<String> = kinds.iter().map(|k| k.name().to_owned()).collect();
        let mut groups: Vec<Group> = Vec::new();
        for cell in &self.cells {
            let label = match (cell.scenario.qos, cell.scenario.persistent_session) {
                (QoS::AtMostOnce, _) => "QoS 0".to_owned(),
                (_, true) => "QoS 1 kept".to_owned(),
                (_, false) => "QoS 1 clean".to_owned(),
            };
            let caption = cell.scenario.shape();
            let position = kinds.iter().position(|k| *k == cell.kind).unwrap_or(0);
            let value = (!cell.runs.is_empty()).then(|| cell.median(RunFigures::delivered_rate));
            match groups.iter_mut().find(|g| g.label == label && g.caption == caption) {
                Some(group) => group.values[position] = value,
                None => {
                    let mut values = vec![None; kinds.len()];
                    values[position] = value;
                    groups.push(Group { label, caption, values });
                }
            }
        }
        let title = format!(
            "MQTT delivered msgs/s ({} mode, MQTT {}, {} B)",
            if self.sizes.quick { "quick" } else { "full" },
            version_name(self.sizes.version),
            self.sizes.payload
        );
        grouped_bars(&title, "delivered msgs/s", &series, &groups)
    }
}
