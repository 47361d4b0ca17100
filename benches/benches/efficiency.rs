//! What a message costs each broker in CPU, ferromq beside Apache ActiveMQ Classic:
//! `cargo bench -p benches --bench efficiency` (`-- --quick`: small counts, one run; CI's
//! smoke mode).
//!
//! Scenarios S1, S2, S3, S5 and S6 of `scripts/compare-activemq`, with its perf keys and 1 KiB
//! messages (`producer.messageSize=1024`), run by the same client against both brokers:
//! `ferromq perf consumer`, then `ferromq perf producer`, as child processes of the release
//! binary, over OpenWire on loopback. The producer starts once the broker has announced the
//! consumers on `ActiveMQ.Advisory.Consumer.Queue.<queue>` (both brokers publish it; the perf
//! tool prints nothing when it has subscribed). Per run:
//!
//! - msgs/s as `scripts/compare-activemq` has it: the consumer's `Messages received in the
//!   whole run` line, messages over its seconds (first message to last);
//! - broker µs/msg: the broker process's user + system time (`/proc/PID/stat`, every thread:
//!   the JVM's compiler and collector threads too), from just before the consumer starts to
//!   just after both clients have exited, over the messages received;
//! - client µs/msg: the producer's and the consumer's CPU time together (read when each
//!   has exited, see [`PerfClient`](benches::efficiency::PerfClient)), over the same messages;
//! - read/write syscalls per message: `syscr + syscw` of `/proc/PID/io` over the same window
//!   (which leaves out send/recv: see the note under the table);
//! - each process's CPU over the run's wall time in cores, the rest of the machine's (to see
//!   a client that cannot keep up, or other work sharing the machine), and for ActiveMQ the
//!   shares of its CPU in the JVM's compiler and collector threads.
//!
//! Before each run both brokers must have gone quiet (under 0.05 cores for half a second, up
//! to 15 s), so that what one run leaves a broker to do stays out of the next one's figures.
//!
//! Brokers: ferromq as [`FerromqProcess`] (journal store, `sync = "always"`), ActiveMQ by
//! `../shared/peers/activemq/start.sh` (KahaDB, its defaults), both started once on free
//! ports and up throughout; each run is one broker while the other idles, ferromq then
//! ActiveMQ, on a queue of its own, after one unmeasured warm-up each (the JVM compiles its
//! hot code during the first messages, which would otherwise land on the first scenario).
//! Each cell is the median of the runs. Without ActiveMQ installed (`/usr/share/activemq`)
//! only ferromq runs, with a line saying so, unless `FERROMQ_REQUIRE_ACTIVEMQ=1`, which makes
//! that an error.
//!
//! In the same run: the disk's fdatasync rate at the start and at the end
//! (`benches::s7::fsync_rate`, in the directory holding both brokers' data), the loopback
//! round trip (median of 2000 one-byte ping-pongs), and from them the floor of the
//! fsync-bound scenarios: S2 cannot beat 1/(fsync + round trip) messages per second, S5 (2
//! messages a commit) 2/(fsync + round trip). And the CPU floors: the CPU of a sync (the same
//! probe, `benches::s7::fsync_probe`) and of a scenario's socket traffic alone
//! (`benches::relay`: a relay that answers and passes messages on and does nothing else, with
//! S6's 25+25 clients and with 1+1), which no broker's CPU per message goes below: S2 a sync
//! and the 1+1 traffic, S5 a sync, S6 its traffic.
//!
//! Output: stdout, `bench-results/efficiency.md` and `bench-results/efficiency.svg` (broker
//! µs/msg by scenario) under `CARGO_TARGET_DIR` (default `target`). Environment:
//! `FERROMQ_EFFICIENCY_SCENARIOS=S1,S3` runs only those, `FERROMQ_EFFICIENCY_RUNS=N` sets the
//! runs, `FERROMQ_EFFICIENCY_BROKERS=ferromq` leaves ActiveMQ out, `FERROMQ_BENCH_DIR` is
//! where the brokers' data goes (default: the system's temporary directory), `FERROMQ_SHARED`
//! where `peers/activemq/start.sh` is (default `../shared`).

use std::collections::HashMap;
use std::path::{Path, PathBuf};
use std::time::{Duration, Instant};

use anyhow::{bail, ensure, Context};
use benches::chart::{grouped_bars, Group};
use benches::efficiency::{
    clock_ticks_per_second, file_system_type, loopback_round_trip, ActivemqProcess,
    ProcessCounters, RunFigures, Runner, Target, QUIET_CORES, SETTLE_TIMEOUT,
};
use benches::process::FerromqProcess;
use benches::relay::{relay_floor, RelayFloor};
use benches::s7::fsync_probe;
use benches::{median, results_dir, write_result};

/// Ping-pongs of the loopback round trip.
const ROUND_TRIPS: usize = 2000;
/// S6's producers, and its consumers.
const S6_CLIENTS: usize = 25;

/// Counts and repetitions of one mode.
struct Sizes {
    runs: usize,
    s1: u64,
    s2: u64,
    s3: u64,
    s5: u64,
    /// S6's duration, in milliseconds as the perf keys take it.
    s6_ms: u64,
    /// Messages of each warm-up scenario (non-persistent, then persistent asynchronous).
    warmup: u64,
    /// How long each fdatasync probe lasts.
    probe: Duration,
    /// How long S6's socket floor is measured (`benches::relay`).
    relay: Duration,
    /// A run that takes longer fails (its clients are killed).
    run_timeout: Duration,
}

impl Sizes {
    /// `scripts/compare-activemq`'s full counts.
    fn full() -> Sizes {
        Sizes {
            runs: 3,
            s1: 100_000,
            s2: 10_000,
            s3: 20_000,
            s5: 10_000,
            s6_ms: 30_000,
            warmup: 20_000,
            probe: Duration::from_secs(1),
            relay: Duration::from_secs(5),
            run_timeout: Duration::from_secs(30 * 60),
        }
    }

    fn quick() -> Sizes {
        Sizes {
            runs: 1,
            s1: 5_000,
            s2: 500,
            s3: 2_000,
            s5: 500,
            s6_ms: 3_000,
            warmup: 5_000,
            probe: Duration::from_millis(500),
            relay: Duration::from_millis(500),
            run_timeout: Duration::from_secs(90),
        }
    }
}

/// One scenario: `scripts/compare-activemq`'s id, description, clients per side and keys.
struct Scenario {
    id: &'static str,
    what: String,
    clients: usize,
    producer: String,
    consumer: String,
}

const SCENARIO_IDS: [&str; 5] = ["S1", "S2", "S3", "S5", "S6"];

/// The scenarios, keys copied from `scripts/compare-activemq`.
fn scenarios(s: &Sizes) -> Vec<Scenario> {
    let one = |id, what: &str, producer: String, consumer: String| Scenario {
        id,
        what: what.to_owned(),
        clients: 1,
        producer,
        consumer,
    };
    let (n1, n2, n3, n5, d6) = (s.s1, s.s2, s.s3, s.s5, s.s6_ms);
    vec![
        one(
            "S1",
            "non-persistent, 1+1, dups-ok",
            format!(
                "producer.deliveryMode=nonpersistent producer.sendType=count \
                 producer.sendCount={n1}"
            ),
            format!("consumer.sessAckMode=dupsAck consumer.recvType=count consumer.recvCount={n1}"),
        ),
        one(
            "S2",
            "persistent, sync send, 1+1",
            format!("producer.deliveryMode=persistent producer.sendType=count producer.sendCount={n2}"),
            format!("consumer.recvType=count consumer.recvCount={n2}"),
        ),
        one(
            "S3",
            "persistent, async send, 1+1",
            format!(
                "producer.deliveryMode=persistent factory.useAsyncSend=true producer.sendType=count \
                 producer.sendCount={n3}"
            ),
            format!("consumer.recvType=count consumer.recvCount={n3}"),
        ),
        one(
            "S5",
            "persistent, 2 per transaction",
            format!(
                "producer.deliveryMode=persistent producer.sessTransacted=true \
                 producer.commitAfterXMsgs=2 producer.sendType=count producer.sendCount={n5}"
            ),
            format!(
                "consumer.sessTransacted=true consumer.commitAfterXMsgs=2 consumer.recvType=count \
                 consumer.recvCount={n5}"
            ),
        ),
        Scenario {
            id: "S6",
            what: format!("persistent, {S6_CLIENTS}+{S6_CLIENTS}, {d6} ms"),
            clients: S6_CLIENTS,
            producer: format!("producer.deliveryMode=persistent producer.sendDuration={d6}"),
            consumer: format!("consumer.recvDuration={d6}"),
        },
    ]
}

/// The unmeasured warm-up: S1's and S3's keys with a smaller count.
fn warmups(s: &Sizes) -> Vec<Scenario> {
    let small = Sizes { s1: s.warmup, s3: s.warmup, ..Sizes::quick() };
    scenarios(&small).into_iter().filter(|x| matches!(x.id, "S1" | "S3")).collect()
}

/// A few words under a scenario's bars.
fn chart_caption(id: &str) -> &'static str {
    match id {
        "S1" => "non-persistent",
        "S2" => "sync send",
        "S3" => "async send",
        "S5" => "tx of 2",
        "S6" => "25+25 clients",
        _ => "",
    }
}

#[derive(Debug, Clone, Copy, PartialEq, Eq, Hash)]
enum BrokerKind {
    Ferromq,
    Activemq,
}

impl BrokerKind {
    fn name(self) -> &'static str {
        match self {
            BrokerKind::Ferromq => "ferromq",
            BrokerKind::Activemq => "ActiveMQ",
        }
    }
}

/// A broker under measurement.
struct Broker {
    kind: BrokerKind,
    target: Target,
}

impl Broker {
    /// The scenario's run against this broker on `queue`.
    fn run(&self, runner: &Runner, scenario: &Scenario, queue: &str) -> anyhow::Result<RunFigures> {
        runner.run(&self.target, scenario.clients, &scenario.producer, &scenario.consumer, queue)
    }
}

/// What the environment asks for on top of the mode.
struct Selection {
    scenarios: Vec<&'static str>,
    runs: usize,
    activemq: bool,
}

impl Selection {
    fn from_env(sizes: &Sizes) -> anyhow::Result<Selection> {
        let scenarios = match std::env::var("FERROMQ_EFFICIENCY_SCENARIOS") {
            Ok(list) if !list.trim().is_empty() => {
                let mut picked = Vec::new();
                for name in list.split(',').map(str::trim).filter(|n| !n.is_empty()) {
                    let id = SCENARIO_IDS
                        .iter()
                        .find(|id| id.eq_ignore_ascii_case(name))
                        .with_context(|| {
                            format!(
                                "FERROMQ_EFFICIENCY_SCENARIOS: no scenario `{name}` (there are {})",
                                SCENARIO_IDS.join(", ")
                            )
                        })?;
                    picked.push(*id);
                }
                picked
            }
            _ => SCENARIO_IDS.to_vec(),
        };
        let runs = match std::env::var("FERROMQ_EFFICIENCY_RUNS") {
            Ok(text) => {
                let runs: usize = text.trim().parse().with_context(|| {
                    format!("FERROMQ_EFFICIENCY_RUNS={text:?} is not a number of runs")
                })?;
                ensure!(runs > 0, "FERROMQ_EFFICIENCY_RUNS must be at least 1");
                runs
            }
            Err(_) => sizes.runs,
        };
        let activemq = match std::env::var("FERROMQ_EFFICIENCY_BROKERS") {
            Ok(list) => {
                let names: Vec<String> =
                    list.split(',').map(|n| n.trim().to_ascii_lowercase()).collect();
                for name in &names {
                    ensure!(
                        matches!(name.as_str(), "ferromq" | "activemq"),
                        "FERROMQ_EFFICIENCY_BROKERS: `{name}` is neither ferromq nor activemq"
                    );
                }
                ensure!(
                    names.iter().any(|n| n == "ferromq"),
                    "FERROMQ_EFFICIENCY_BROKERS must name ferromq (its binary is the client of both)"
                );
                names.iter().any(|n| n == "activemq")
            }
            Err(_) => true,
        };
        Ok(Selection { scenarios, runs, activemq })
    }
}

/// The disk and the brokers' idle CPU, measured together: the brokers idle while the disk is
/// probed.
struct Probe {
    fsync_per_second: f64,
    /// CPU time of a 4 KiB write and its fdatasync.
    cpu_per_sync: Duration,
    /// Milliseconds of CPU per second each broker spent idle.
    idle_ms_per_second: Vec<(BrokerKind, f64)>,
}

fn probe(runner: &Runner, dir: &Path, brokers: &[Broker], time: Duration) -> anyhow::Result<Probe> {
    let before: Vec<ProcessCounters> =
        brokers.iter().map(|b| ProcessCounters::read(b.target.pid)).collect::<Result<_, _>>()?;
    let started = Instant::now();
    let fsync = fsync_probe(dir, time).context("probing the disk's fdatasync rate")?;
    let elapsed = started.elapsed().as_secs_f64();
    let mut idle_ms_per_second = Vec::new();
    for (broker, before) in brokers.iter().zip(before) {
        let after = ProcessCounters::read(broker.target.pid)?;
        let ticks = after.cpu_ticks.saturating_sub(before.cpu_ticks);
        idle_ms_per_second.push((broker.kind, runner.seconds(ticks) * 1000.0 / elapsed));
    }
    Ok(Probe {
        fsync_per_second: fsync.per_second,
        cpu_per_sync: fsync.cpu_per_sync,
        idle_ms_per_second,
    })
}

/// Every run's figures and what failed.
#[derive(Default)]
struct Results {
    runs: HashMap<(&'static str, BrokerKind), Vec<RunFigures>>,
    failures: Vec<String>,
    /// Runs started while a broker was still busy after [`SETTLE_TIMEOUT`].
    unsettled: usize,
}

impl Results {
    /// The median of one figure over a cell's runs (`None` without runs or figures).
    fn median(
        &self,
        id: &'static str,
        kind: BrokerKind,
        figure: impl Fn(&RunFigures) -> Option<f64>,
    ) -> Option<f64> {
        let values: Vec<f64> = self.runs.get(&(id, kind))?.iter().filter_map(figure).collect();
        (!values.is_empty()).then(|| median(values))
    }
}

fn ferromq_binary() -> anyhow::Result<PathBuf> {
    if let Some(path) = std::env::var_os("FERROMQ_BIN") {
        return Ok(PathBuf::from(path));
    }
    // <target>/release/deps/efficiency-<hash>; FerromqProcess::start has built the binary.
    let exe = std::env::current_exe()?;
    let profile = exe.parent().and_then(Path::parent).context("the bench's target directory")?;
    let binary = profile.join("ferromq");
    ensure!(binary.is_file(), "no ferromq binary at {}", binary.display());
    Ok(binary)
}

/// ActiveMQ, or `None` with a line saying why (an error when `FERROMQ_REQUIRE_ACTIVEMQ=1`).
fn start_activemq(dir: &Path) -> anyhow::Result<Option<ActivemqProcess>> {
    let required =
        std::env::var_os("FERROMQ_REQUIRE_ACTIVEMQ").is_some_and(|v| !v.is_empty() && v != "0");
    let why = if ActivemqProcess::installed() {
        let shared = std::env::var_os("FERROMQ_SHARED")
            .map(PathBuf::from)
            .unwrap_or_else(|| Path::new(env!("CARGO_MANIFEST_DIR")).join("../../shared"));
        let script = shared.join("peers/activemq/start.sh");
        println!("starting Apache ActiveMQ ({})", script.display());
        let started = Instant::now();
        let started_broker = match script.is_file() {
            true => ActivemqProcess::start(&script, dir),
            // A clean clone (CI) has no ../shared: the integration tests' broker instead.
            false => ActivemqProcess::start_own()
                .and_then(|broker| broker.context("Apache ActiveMQ is not installed")),
        };
        match started_broker {
            Ok(broker) => {
                println!(
                    "ActiveMQ pid {} on {} after {:.1?}",
                    broker.pid(),
                    broker.openwire,
                    started.elapsed()
                );
                return Ok(Some(broker));
            }
            Err(error) => format!("ActiveMQ did not start: {error:#}"),
        }
    } else {
        format!(
            "Apache ActiveMQ is missing (no {}): only ferromq runs. Install Debian's `activemq`",
            benches::efficiency::ACTIVEMQ_JAR
        )
    };
    if required {
        bail!("FERROMQ_REQUIRE_ACTIVEMQ is set: {why}");
    }
    println!("{why} (FERROMQ_REQUIRE_ACTIVEMQ=1 makes this an error)");
    Ok(None)
}

fn main() -> anyhow::Result<()> {
    let quick = std::env::args().any(|a| a == "--quick");
    let mut sizes = if quick { Sizes::quick() } else { Sizes::full() };
    let selection = Selection::from_env(&sizes)?;
    sizes.runs = selection.runs;
    let load_at_start = load_average();
    let bench_dir =
        std::env::var_os("FERROMQ_BENCH_DIR").map(PathBuf::from).unwrap_or_else(std::env::temp_dir);
    // Declared first, dropped last: the brokers stop before their directories go.
    let work = tempfile::Builder::new().prefix("ferromq-efficiency-").tempdir_in(&bench_dir)?;
    let ferromq_dir = work.path().join("ferromq");
    std::fs::create_dir_all(&ferromq_dir)?;
    // Builds the release binary first when it is not up to date; the clock starts after.
    let ferromq = FerromqProcess::start(&ferromq_dir, "").context("starting ferromq")?;
    let started = Instant::now();
    let binary = ferromq_binary()?;
    let activemq_wanted = selection.activemq;
    let activemq = if activemq_wanted {
        start_activemq(&work.path().join("activemq"))?
    } else {
        println!("ActiveMQ left out (FERROMQ_EFFICIENCY_BROKERS)");
        None
    };
    let mut brokers = vec![Broker {
        kind: BrokerKind::Ferromq,
        target: Target { openwire: ferromq.openwire, pid: ferromq.pid(), jvm: false },
    }];
    if let Some(activemq) = &activemq {
        brokers.push(Broker {
            kind: BrokerKind::Activemq,
            target: Target { openwire: activemq.openwire, pid: activemq.pid(), jvm: true },
        });
    }
    let runner = Runner {
        binary,
        ticks_per_second: clock_ticks_per_second(),
        // One worker: the advisory watcher's connection is served while the main thread
        // waits on the clients, and takes no more than a thread from the brokers.
        runtime: tokio::runtime::Builder::new_multi_thread()
            .worker_threads(1)
            .enable_all()
            .build()?,
        runs_dir: work.path().join("runs"),
        run_timeout: sizes.run_timeout,
        pids: brokers.iter().map(|b| b.target.pid).collect(),
    };

    let mut results = Results::default();
    results.unsettled += usize::from(!runner.settle()?);
    let first = probe(&runner, work.path(), &brokers, sizes.probe)?;
    let round_trip = loopback_round_trip(ROUND_TRIPS)?;
    results.unsettled += usize::from(!runner.settle()?);
    let relay = relay_floor(S6_CLIENTS, sizes.relay).context("measuring S6's socket floor")?;
    let relay_one = relay_floor(1, sizes.relay).context("measuring S2's socket floor")?;
    println!(
        "disk: {:.0} fdatasyncs/s, {:.1} µs of CPU each; loopback round trip {:.1} µs; socket \
         floors: S6 {:.1} µs/msg at {:.0} msgs/s, 1+1 {:.1} µs/msg",
        first.fsync_per_second,
        first.cpu_per_sync.as_secs_f64() * 1e6,
        round_trip.as_secs_f64() * 1e6,
        relay.cpu_us_per_message,
        relay.rate,
        relay_one.cpu_us_per_message
    );
    for broker in &brokers {
        for warmup in warmups(&sizes) {
            let queue = format!("EFF.warmup.{}.{}", warmup.id, broker.kind.name());
            let figures = broker
                .run(&runner, &warmup, &queue)
                .with_context(|| format!("warming {} up with {}", broker.kind.name(), warmup.id))?;
            println!("warm-up {} {}: {:.0} msgs/s", broker.kind.name(), warmup.id, figures.rate);
        }
    }

    let chosen: Vec<Scenario> =
        scenarios(&sizes).into_iter().filter(|s| selection.scenarios.contains(&s.id)).collect();
    for scenario in &chosen {
        for run in 1..=sizes.runs {
            for broker in &brokers {
                let name = broker.kind.name();
                let queue = format!("EFF.{}.{}.{run}", scenario.id, name);
                results.unsettled += usize::from(!runner.settle()?);
                match broker.run(&runner, scenario, &queue) {
                    Ok(f) => {
                        println!(
                            "{} run {run}/{} {name:<8}: {:>8.0} msgs/s (consumer {:.2} s, producer \
                             {:.2} s), broker {:>7.1} µs/msg ({:.2} \
                             cores), clients {:>7.1} µs/msg (producer {:.2}, consumer {:.2} cores), \
                             {} read/write syscalls/msg, rest of the machine {:.2} cores{}",
                            scenario.id,
                            sizes.runs,
                            f.rate,
                            f.consumer_seconds,
                            f.producer_seconds,
                            f.broker_us,
                            f.broker_cores,
                            f.client_us,
                            f.producer_cores,
                            f.consumer_cores,
                            f.syscalls.map_or("-".to_owned(), |s| format!("{s:.1}")),
                            f.other_cores,
                            match broker.target.jvm {
                                true => format!(
                                    "; JIT {:.0}%, GC {:.0}% of the broker's",
                                    f.jit_share * 100.0,
                                    f.gc_share * 100.0
                                ),
                                false => String::new(),
                            },
                        );
                        results.runs.entry((scenario.id, broker.kind)).or_default().push(f);
                    }
                    Err(error) => {
                        let what = format!("{} run {run} {name}: {error:#}", scenario.id);
                        println!("FAILED: {what}");
                        results.failures.push(what);
                    }
                }
            }
        }
    }
    results.unsettled += usize::from(!runner.settle()?);
    let last = probe(&runner, work.path(), &brokers, sizes.probe)?;

    let report = Report {
        quick,
        sizes: &sizes,
        scenarios: &chosen,
        activemq: activemq.is_some(),
        activemq_wanted,
        results: &results,
        probes: [&first, &last],
        round_trip,
        relay,
        relay_one,
        binary: &runner.binary,
        fs: file_system_type(work.path()).unwrap_or_else(|| "file system unknown".to_owned()),
        load: (load_at_start, load_average()),
    };
    let table = report.markdown(started.elapsed());
    println!("\n{table}");
    let dir = results_dir();
    std::fs::create_dir_all(&dir).with_context(|| format!("creating {}", dir.display()))?;
    write_result(&dir.join("efficiency.md"), &table)?;
    write_result(&dir.join("efficiency.svg"), &report.chart())?;
    drop(activemq);
    drop(ferromq);
    if !results.failures.is_empty() {
        bail!("{} run(s) failed:\n{}", results.failures.len(), results.failures.join("\n"));
    }
    Ok(())
}

/// A command's trimmed stdout, or `unknown`.
fn command_output(program: &str, args: &[&str]) -> String {
    std::process::Command::new(program)
        .args(args)
        .output()
        .ok()
        .filter(|out| out.status.success())
        .map(|out| String::from_utf8_lossy(&out.stdout).trim().to_owned())
        .filter(|text| !text.is_empty())
        .unwrap_or_else(|| "unknown".to_owned())
}

fn load_average() -> String {
    std::fs::read_to_string("/proc/loadavg")
        .ok()
        .and_then(|text| text.split_whitespace().next().map(str::to_owned))
        .unwrap_or_else(|| "?".to_owned())
}

fn mem_total_gib() -> f64 {
    let meminfo = std::fs::read_to_string("/proc/meminfo").unwrap_or_default();
    let kib: f64 = meminfo
        .lines()
        .find_map(|line| line.strip_prefix("MemTotal:"))
        .and_then(|rest| rest.split_whitespace().next())
        .and_then(|kib| kib.parse().ok())
        .unwrap_or(0.0);
    kib / 1024.0 / 1024.0
}

/// The finished measurement, as a table and a chart.
struct Report<'a> {
    quick: bool,
    sizes: &'a Sizes,
    scenarios: &'a [Scenario],
    activemq: bool,
    activemq_wanted: bool,
    results: &'a Results,
    probes: [&'a Probe; 2],
    round_trip: Duration,
    /// S6's socket traffic alone (`benches::relay`), and one producer's and one consumer's.
    relay: RelayFloor,
    relay_one: RelayFloor,
    binary: &'a Path,
    fs: String,
    load: (String, String),
}

/// A figure with `decimals`, or `-`.
fn cell(value: Option<f64>, decimals: usize) -> String {
    value.map_or("-".to_owned(), |v| format!("{v:.decimals$}"))
}

/// `a / b` when both are there and `b` is not zero.
fn ratio(a: Option<f64>, b: Option<f64>) -> Option<f64> {
    match (a, b) {
        (Some(a), Some(b)) if b > 0.0 => Some(a / b),
        _ => None,
    }
}

impl Report<'_> {
    /// The floor of `id` in msgs/s: messages per fsync-bound round trip over fsync plus the
    /// round trip, with the faster of the two fsync rates measured.
    fn floor(&self, id: &str) -> Option<f64> {
        let per_commit = match id {
            "S2" => 1.0,
            "S5" => 2.0,
            _ => return None,
        };
        let fsync = self.probes.iter().map(|p| p.fsync_per_second).fold(0.0, f64::max);
        (fsync > 0.0).then(|| per_commit / (1.0 / fsync + self.round_trip.as_secs_f64()))
    }

    /// The CPU a message of `id` costs any broker on this machine, in µs: its syncs and its
    /// socket traffic, where they are measured.
    fn cpu_floor(&self, id: &str) -> Option<f64> {
        let sync_us = self
            .probes
            .iter()
            .map(|p| p.cpu_per_sync.as_secs_f64() * 1e6)
            .fold(f64::INFINITY, f64::min);
        match id {
            "S2" => Some(sync_us + self.relay_one.cpu_us_per_message),
            "S5" => Some(sync_us),
            "S6" => Some(self.relay.cpu_us_per_message),
            _ => None,
        }
    }

    fn markdown(&self, took: Duration) -> String {
        let s = self.sizes;
        let (f, a) = (BrokerKind::Ferromq, BrokerKind::Activemq);
        let r = self.results;
        let mut out = format!(
            "Broker CPU per message, ferromq and Apache ActiveMQ, {} mode: `cargo bench -p benches \
             --bench efficiency{}`, {took:.0?} in all.\n\n",
            if self.quick { "QUICK (smoke-test counts, not figures to quote)" } else { "full" },
            if self.quick { " -- --quick" } else { "" },
        );
        out.push_str(&format!(
            "- Machine: {} cores (nproc), {:.1} GiB (MemTotal); load average {} at the start, {} \
             at the end.\n",
            std::thread::available_parallelism().map_or(0, |n| n.get()),
            mem_total_gib(),
            self.load.0,
            self.load.1
        ));
        out.push_str(&format!(
            "- Versions: {}; ActiveMQ {}{}.\n",
            command_output(&self.binary.display().to_string(), &["--version"]),
            command_output("dpkg-query", &["-W", "-f", "${Version}", "activemq"]),
            match (self.activemq, self.activemq_wanted) {
                (true, _) => "",
                (false, true) => " (not run: missing or did not start)",
                (false, false) => " (left out by FERROMQ_EFFICIENCY_BROKERS)",
            }
        ));
        out.push_str(&format!(
            "- Disk ({}, holding both brokers' data): {:.0} fdatasyncs/s of 4 KiB at the start, \
             {:.0} at the end; {:.1} and {:.1} µs of CPU a sync.\n",
            self.fs,
            self.probes[0].fsync_per_second,
            self.probes[1].fsync_per_second,
            self.probes[0].cpu_per_sync.as_secs_f64() * 1e6,
            self.probes[1].cpu_per_sync.as_secs_f64() * 1e6
        ));
        out.push_str(&format!(
            "- Loopback TCP round trip (1 byte each way, median of {ROUND_TRIPS}): {:.1} µs.\n",
            self.round_trip.as_secs_f64() * 1e6
        ));
        out.push_str(&format!(
            "- Floor (faster fsync rate + round trip): S2 1/(fsync + rtt) = {} msgs/s, S5 \
             2/(fsync + rtt) = {} msgs/s.\n",
            cell(self.floor("S2"), 0),
            cell(self.floor("S5"), 0)
        ));
        out.push_str(&format!(
            "- S6's socket floor (`benches::relay`: S6's {S6_CLIENTS} producers and {S6_CLIENTS} \
             consumers against a relay on one tokio thread that answers and passes on each \
             message, with no broker work): {:.1} µs of CPU a message at {:.0} msgs/s. No \
             broker's S6 costs less on this machine; its fsyncs come on top.\n",
            self.relay.cpu_us_per_message, self.relay.rate
        ));
        out.push_str(&format!(
            "- CPU floors, µs a message: S2 {} (an fdatasync, the cheaper probe's, and one \
             producer's and one consumer's socket traffic: the relay with 1+1, {:.1}); S5 {} (an \
             fdatasync: a producer's and a consumer's commit per two messages); S6 {} (its socket \
             floor; its syncs come on top).\n",
            cell(self.cpu_floor("S2"), 1),
            self.relay_one.cpu_us_per_message,
            cell(self.cpu_floor("S5"), 1),
            cell(self.cpu_floor("S6"), 1)
        ));
        for (when, probe) in ["start", "end"].iter().zip(self.probes) {
            let idle: Vec<String> = probe
                .idle_ms_per_second
                .iter()
                .map(|(kind, ms)| format!("{} {ms:.1}", kind.name()))
                .collect();
            out.push_str(&format!(
                "- Idle broker CPU during the disk probe at the {when}, ms per second: {}.\n",
                idle.join(", ")
            ));
        }
        out.push_str(&format!(
            "- Counts: S1 {}, S2 {}, S3 {}, S5 {} messages, S6 {} ms; 1 KiB messages; {} run(s) \
             per cell, medians; brokers alternated per run; one warm-up of {} messages (S1's \
             and S3's keys) per broker first.\n\n",
            s.s1, s.s2, s.s3, s.s5, s.s6_ms, s.runs, s.warmup
        ));

        out.push_str(
            "| scenario | ferromq msgs/s | ActiveMQ msgs/s | ratio | ferromq broker µs/msg | \
             ActiveMQ broker µs/msg | CPU ratio (ActiveMQ/ferromq) | ferromq client µs/msg \
             (producer+consumer) | ActiveMQ-run client µs/msg | read/write syscalls/msg ferromq \
             / ActiveMQ | % of floor ferromq / ActiveMQ |\n\
             |---|---:|---:|---:|---:|---:|---:|---:|---:|---:|---:|\n",
        );
        for scenario in self.scenarios {
            let id = scenario.id;
            let rate = |k| r.median(id, k, |x| Some(x.rate));
            let broker_us = |k| r.median(id, k, |x| Some(x.broker_us));
            let client_us = |k| r.median(id, k, |x| Some(x.client_us));
            let syscalls = |k| r.median(id, k, |x| x.syscalls);
            let floor = |k| ratio(rate(k), self.floor(id)).map(|x| x * 100.0);
            let floor_cell = match self.floor(id) {
                Some(_) => format!("{}% / {}%", cell(floor(f), 0), cell(floor(a), 0)),
                None => "-".to_owned(),
            };
            out.push_str(&format!(
                "| {id} {} | {} | {} | {} | {} | {} | {} | {} | {} | {} / {} | {floor_cell} |\n",
                scenario.what,
                cell(rate(f), 0),
                cell(rate(a), 0),
                ratio(rate(f), rate(a)).map_or("-".to_owned(), |x| format!("{x:.2}x")),
                cell(broker_us(f), 1),
                cell(broker_us(a), 1),
                ratio(broker_us(a), broker_us(f)).map_or("-".to_owned(), |x| format!("{x:.2}x")),
                cell(client_us(f), 1),
                cell(client_us(a), 1),
                cell(syscalls(f), 1),
                cell(syscalls(a), 1),
            ));
        }
        let floored: Vec<String> = self
            .scenarios
            .iter()
            .filter_map(|scenario| {
                let floor = self.cpu_floor(scenario.id)?;
                let broker_us = |k| r.median(scenario.id, k, |x| Some(x.broker_us));
                let tenth = broker_us(a).map(|us| us / 10.0);
                Some(format!(
                    "{} ferromq {}x, ActiveMQ {}x (a tenth of ActiveMQ's: {} µs{})",
                    scenario.id,
                    cell(ratio(broker_us(f), Some(floor)), 1),
                    cell(ratio(broker_us(a), Some(floor)), 1),
                    cell(tenth, 1),
                    if tenth.is_some_and(|t| t < floor) { ", below the floor" } else { "" }
                ))
            })
            .collect();
        if !floored.is_empty() {
            out.push_str(&format!(
                "\nBroker CPU per message as a multiple of its CPU floor: {}.\n",
                floored.join("; ")
            ));
        }
        out.push_str(
            "\nCPU busy over each run (consumer start to the last client's exit), in cores, \
             medians: broker / producer / consumer / rest of the machine (the idle broker, the \
             bench, anything else running). A client near 1.0 is what limits the run; a large \
             rest means the figures shared the machine. JIT / GC: the shares of ActiveMQ's broker \
             CPU in the JVM's compiler threads, and in its garbage collector and VM threads (lower \
             bounds: threads that ended during the run are missed).\n\n\
             | scenario | ferromq run | ActiveMQ run | ActiveMQ JIT / GC |\n|---|---:|---:|---:|\n",
        );
        for scenario in self.scenarios {
            let busy = |k| {
                let figure =
                    |g: fn(&RunFigures) -> f64| cell(r.median(scenario.id, k, |x| Some(g(x))), 2);
                if r.runs.contains_key(&(scenario.id, k)) {
                    format!(
                        "{} / {} / {} / {}",
                        figure(|x| x.broker_cores),
                        figure(|x| x.producer_cores),
                        figure(|x| x.consumer_cores),
                        figure(|x| x.other_cores)
                    )
                } else {
                    "-".to_owned()
                }
            };
            let jit = r.median(scenario.id, a, |x| Some(x.jit_share * 100.0));
            let gc = r.median(scenario.id, a, |x| Some(x.gc_share * 100.0));
            let jvm = match (jit, gc) {
                (Some(jit), Some(gc)) => format!("{jit:.0}% / {gc:.0}%"),
                _ => "-".to_owned(),
            };
            out.push_str(&format!("| {} | {} | {} | {jvm} |\n", scenario.id, busy(f), busy(a)));
        }
        out.push_str(
            "\nBroker µs/msg: the broker process's user + system time, every thread (the JVM's \
             compiler, collector and timer threads too, and what the broker does in the \
             background while the run lasts), over the messages the consumer received. Client \
             µs/msg: the two `ferromq perf` processes' CPU time over the same messages. \
             Read/write syscalls: `syscr + syscw` of /proc/PID/io, which count read, write, \
             pread, pwrite, readv and writev only, not send/recv, epoll or futex: ferromq's \
             sockets (Rust's std and tokio send and receive with sendto/recvfrom) are not in \
             it, its journal writes are, while Java's NIO reads and writes sockets with \
             read/write, so ActiveMQ's socket traffic is counted; a lower bound for ferromq, \
             not a like-for-like count.\n",
        );
        if r.unsettled > 0 {
            out.push_str(&format!(
                "\n{} run(s) or probes started with a broker still busy after {SETTLE_TIMEOUT:?} \
                 (more than {QUIET_CORES} cores): their broker figures include that work.\n",
                r.unsettled
            ));
        }
        if !r.failures.is_empty() {
            out.push_str("\nFailed (their cells are empty):\n\n");
            for failure in &r.failures {
                out.push_str(&format!("- {}\n", failure.replace('\n', " ")));
            }
        }
        out
    }

    fn chart(&self) -> String {
        let kinds = [BrokerKind::Ferromq, BrokerKind::Activemq];
        let groups: Vec<Group> = self
            .scenarios
            .iter()
            .map(|scenario| Group {
                label: scenario.id.to_owned(),
                caption: chart_caption(scenario.id).to_owned(),
                values: kinds
                    .iter()
                    .map(|k| self.results.median(scenario.id, *k, |x| Some(x.broker_us)))
                    .collect(),
            })
            .collect();
        let series: Vec<String> = kinds.iter().map(|k| k.name().to_owned()).collect();
        let title = format!(
            "Broker CPU per message, ferromq and ActiveMQ ({} mode, median of {})",
            if self.quick { "quick" } else { "full" },
            self.sizes.runs
        );
        grouped_bars(&title, "broker CPU µs per message", &series, &groups)
    }
}
