//! The seed scenarios of `../shared/BENCHMARKS.md` through the real broker against every
//! store: `cargo bench -p benches --bench store_compare` (`-- --quick`: tiny counts, one run).
//!
//! Each store in turn runs under the `ferromq` release binary as its own process
//! ([`FerromqProcess`], with OpenWire and AMQP connectors on loopback, `sync = "always"`),
//! on a fresh data directory: the journal (the default), the LSM store on sled and on
//! RocksDB, the SQL store on SQLite and on PostgreSQL (a throwaway cluster the bench starts,
//! see `store_jdbc::testing::PgCluster`, a fresh database per broker start; without
//! PostgreSQL installed its column is left out with a line saying so, unless
//! `FERROMQ_REQUIRE_POSTGRES=1`, which makes that an error). Against each:
//!
//! - a warm-up (persistent messages through a producer and a consumer, discarded);
//! - S7 (seed 001): one thread enqueues persistent 1 KiB messages one by one (each send
//!   confirmed), then dequeues them (receive + ack); mean ms per call, over OpenWire and
//!   over AMQP 1.0 (`benches::s7`, the same calls as `benches/s7.rs`);
//! - S1-S6 (seed 003's JBoss-style table, seed 000's 25+25 clients) with `ferromq perf`'s
//!   load generator (`benches::perf_pair`: the perf plugin's keys, the same as
//!   `scripts/compare-activemq`), consumers first, fixed message counts; the figure is seed
//!   003's, messages received over the time from the producers' start to the last message
//!   received, in msgs/s, with the consumers' end-to-end latency;
//! - S8 (seed 004): consume-and-forward from one queue to another, one at a time
//!   (`benches::forward`), forwarded msgs/s.
//!
//! Runs alternate the stores (journal, sled, RocksDB, SQLite, PostgreSQL, journal, ...) and
//! each cell is the median of the runs. Before each store's turn the disk's `fdatasync` rate
//! is measured (4 KiB writes, `benches::s7::fsync_rate`), because the virtual disks of these
//! machines vary with load; the table gives it per store.
//!
//! Output: stdout, `bench-results/store_compare.md` (scenario rows, store columns) and
//! `bench-results/store_compare.svg` (grouped bars, msgs/s per store per scenario) under
//! `CARGO_TARGET_DIR` (default `target`). `FERROMQ_BENCH_DIR` names where the data
//! directories go (default: the system's temporary directory); `FERROMQ_COMPARE_STORES`
//! (e.g. `journal,jdbc/sqlite`) runs only the stores named, `FERROMQ_COMPARE_SCENARIOS` (e.g.
//! `S1,S3`) only the scenarios named.

use std::collections::HashMap;
use std::path::PathBuf;
use std::time::{Duration, Instant};

use anyhow::{bail, Context};
use benches::chart::{grouped_bars, Group};
use benches::perf_pair::{PairOutcome, PerfPair};
use benches::process::{BrokerStore, FerromqProcess, Launch};
use benches::s7::{fsync_rate, Protocol};
use benches::{forward, median, perf_pair, results_dir, write_result};
use store_jdbc::testing::{postgres_bin, PgCluster};

/// Message counts and repetitions of one mode.
struct Sizes {
    runs: usize,
    warmup: u64,
    /// Messages of S1..S5 (S6: per client), by scenario.
    s1: u64,
    s2: u64,
    s3: u64,
    s4: u64,
    s5: u64,
    s6_per_client: u64,
    s7: usize,
    s8: u64,
    probe: Duration,
}

impl Sizes {
    /// About 15 minutes on the project's 2-core machine with a fast disk phase; slower
    /// when the virtual disk is (a synchronous send costs one fdatasync).
    fn full() -> Sizes {
        Sizes {
            runs: 3,
            warmup: 2_000,
            // Past the destination memory limit (64 MiB at 1 KiB + 800 bytes a message):
            // producer flow control holds the producer there. (It used to close the gate too
            // late, and the sends that got past spilled and stalled the drain for 9-17 s.)
            s1: 100_000,
            s2: 5_000,
            s3: 25_000,
            s4: 100_000,
            s5: 5_000,
            s6_per_client: 400,
            s7: 1_000,
            s8: 5_000,
            probe: Duration::from_secs(1),
        }
    }

    fn quick() -> Sizes {
        Sizes {
            runs: 1,
            warmup: 100,
            s1: 2_000,
            s2: 100,
            s3: 500,
            s4: 2_000,
            s5: 100,
            s6_per_client: 8,
            s7: 50,
            s8: 100,
            probe: Duration::from_millis(200),
        }
    }
}

/// Clients on each side in S6, as in seed 000's property files (`sysTest.numClients=25`).
const S6_CLIENTS: usize = 25;

/// A store under comparison.
enum Subject<'a> {
    Journal,
    Sled,
    RocksDb,
    Sqlite,
    Postgres(&'a PgCluster),
}

impl Subject<'_> {
    fn name(&self) -> &'static str {
        match self {
            Subject::Journal => "journal",
            Subject::Sled => "lsm/sled",
            Subject::RocksDb => "lsm/rocksdb",
            Subject::Sqlite => "jdbc/sqlite",
            Subject::Postgres(_) => "jdbc/postgres",
        }
    }

    /// The store section of a fresh broker (PostgreSQL: a fresh database each time).
    fn store(&self) -> BrokerStore {
        match self {
            Subject::Journal => BrokerStore::Journal,
            Subject::Sled => BrokerStore::Lsm { engine: "sled" },
            Subject::RocksDb => BrokerStore::Lsm { engine: "rocksdb" },
            Subject::Sqlite => BrokerStore::Jdbc { url: "sqlite://ferromq.db".to_owned() },
            Subject::Postgres(cluster) => BrokerStore::Jdbc { url: cluster.create_database() },
        }
    }
}

/// What a row of the table measures.
#[derive(Clone, Copy, PartialEq, Eq)]
enum Unit {
    MsgsPerSec,
    MsPerCall,
}

/// A row of the table: a scenario (or one figure of S7).
struct Row {
    id: &'static str,
    what: String,
    unit: Unit,
}

/// A few words under a scenario's bars (the table has the whole description).
fn chart_caption(id: &str) -> &'static str {
    match id {
        "S1" => "non-persistent",
        "S2" => "sync send",
        "S3" => "async send",
        "S4" => "tx of 1000",
        "S5" => "tx of 2",
        "S6" => "25+25 clients",
        "S8" => "consume+forward",
        _ => "",
    }
}

/// A throughput scenario of `ferromq perf`.
struct Scenario {
    id: &'static str,
    what: String,
    pair: PerfPair,
}

fn keys(text: &str) -> Vec<String> {
    text.split_whitespace().map(str::to_owned).collect()
}

/// S1-S6 with the keys `scripts/compare-activemq` gives `ferromq perf`, fixed counts.
fn scenarios(sizes: &Sizes) -> Vec<Scenario> {
    let one = |id, what: &str, producer: String, consumer: String| Scenario {
        id,
        what: what.to_owned(),
        pair: PerfPair { clients: 1, producer: keys(&producer), consumer: keys(&consumer) },
    };
    let counted = |n: u64| {
        (
            format!("producer.sendType=count producer.sendCount={n}"),
            format!("consumer.recvType=count consumer.recvCount={n}"),
        )
    };
    let (p1, c1) = counted(sizes.s1);
    let (p2, c2) = counted(sizes.s2);
    let (p3, c3) = counted(sizes.s3);
    let (p4, c4) = counted(sizes.s4);
    let (p5, c5) = counted(sizes.s5);
    let (p6, c6) = counted(sizes.s6_per_client);
    vec![
        one(
            "S1",
            "non-persistent, 1+1, dups-ok",
            format!("producer.deliveryMode=nonpersistent {p1}"),
            format!("consumer.sessAckMode=dupsAck {c1}"),
        ),
        one(
            "S2",
            "persistent, sync send, 1+1",
            format!("producer.deliveryMode=persistent {p2}"),
            c2,
        ),
        one(
            "S3",
            "persistent, async send, 1+1",
            format!("producer.deliveryMode=persistent factory.useAsyncSend=true {p3}"),
            c3,
        ),
        one(
            "S4",
            "persistent, 1000 per transaction",
            format!(
                "producer.deliveryMode=persistent producer.sessTransacted=true \
                 producer.commitAfterXMsgs=1000 {p4}"
            ),
            format!("consumer.sessTransacted=true consumer.commitAfterXMsgs=1000 {c4}"),
        ),
        one(
            "S5",
            "persistent, 2 per transaction",
            format!(
                "producer.deliveryMode=persistent producer.sessTransacted=true \
                 producer.commitAfterXMsgs=2 {p5}"
            ),
            format!("consumer.sessTransacted=true consumer.commitAfterXMsgs=2 {c5}"),
        ),
        Scenario {
            id: "S6",
            what: format!("persistent, {S6_CLIENTS}+{S6_CLIENTS} clients"),
            pair: PerfPair {
                clients: S6_CLIENTS,
                producer: keys(&format!("producer.deliveryMode=persistent {p6}")),
                consumer: keys(&c6),
            },
        },
    ]
}

/// Every row of the table, in order.
fn rows(sizes: &Sizes) -> Vec<Row> {
    let mut rows: Vec<Row> = scenarios(sizes)
        .into_iter()
        .map(|s| Row { id: s.id, what: s.what, unit: Unit::MsgsPerSec })
        .collect();
    for (id, what) in [
        ("S7 OpenWire enqueue", "one thread, each persistent send confirmed"),
        ("S7 OpenWire dequeue", "receive + individual ack"),
        ("S7 AMQP enqueue", "unsettled durable transfer until accepted"),
        ("S7 AMQP dequeue", "receive (credit 1) + accept"),
    ] {
        rows.push(Row { id, what: what.to_owned(), unit: Unit::MsPerCall });
    }
    rows.push(Row {
        id: "S8",
        what: "consume from A and forward to B, one at a time".to_owned(),
        unit: Unit::MsgsPerSec,
    });
    rows
}

/// Every run's figures, by (row id, store).
#[derive(Default)]
struct Results {
    figures: HashMap<(&'static str, &'static str), Vec<f64>>,
    /// End-to-end latency p50 and p99 (ms) of the consumers, of the last run.
    latency: HashMap<(&'static str, &'static str), (f64, f64)>,
    /// fdatasyncs per second measured before each of a store's turns.
    fsync: HashMap<&'static str, Vec<f64>>,
    failures: Vec<String>,
}

impl Results {
    fn add(&mut self, row: &'static str, store: &'static str, value: f64) {
        self.figures.entry((row, store)).or_default().push(value);
    }

    fn median(&self, row: &'static str, store: &'static str) -> Option<f64> {
        self.figures.get(&(row, store)).map(|values| median(values.clone()))
    }

    fn fail(&mut self, what: String) {
        println!("FAILED: {what}");
        self.failures.push(what);
    }
}

fn ms(duration: Duration) -> f64 {
    duration.as_secs_f64() * 1000.0
}

/// One store's turn: a fresh broker on it, every scenario, the broker stopped.
fn run_store(
    subject: &Subject,
    sizes: &Sizes,
    run: usize,
    runtime: &tokio::runtime::Runtime,
    results: &mut Results,
) -> anyhow::Result<()> {
    let name = subject.name();
    let dir = tempfile::Builder::new().prefix("ferromq-compare-").tempdir_in(bench_dir())?;
    let fsync = fsync_rate(dir.path(), sizes.probe)?;
    println!("\n== run {}/{}: {name} (disk: {fsync:.0} fdatasyncs/s)", run + 1, sizes.runs);
    results.fsync.entry(name).or_default().push(fsync);
    let launch = Launch { store: Some(subject.store()), amqp: true, ..Launch::default() };
    let broker = FerromqProcess::launch(dir.path(), &launch)
        .with_context(|| format!("starting ferromq on {name}"))?;
    runtime.block_on(scenarios_against(name, &broker, sizes, run, results));
    drop(broker);
    Ok(())
}

async fn scenarios_against(
    name: &'static str,
    broker: &FerromqProcess,
    sizes: &Sizes,
    run: usize,
    results: &mut Results,
) {
    let url = format!("tcp://{}", broker.openwire);
    let warmup = PerfPair {
        clients: 1,
        producer: keys(&format!(
            "producer.deliveryMode=persistent factory.useAsyncSend=true producer.sendType=count \
             producer.sendCount={}",
            sizes.warmup
        )),
        consumer: keys(&format!("consumer.recvType=count consumer.recvCount={}", sizes.warmup)),
    };
    if let Err(error) = perf_pair::run(&warmup, &url, "compare.warmup").await {
        results.fail(format!("{name} warm-up: {error:#}"));
        return;
    }
    // FERROMQ_COMPARE_SCENARIOS=S1,S3 runs only those (S1-S8).
    let only = std::env::var("FERROMQ_COMPARE_SCENARIOS").ok();
    let wanted = |id: &str| only.as_deref().is_none_or(|o| o.split(',').any(|w| w.trim() == id));
    if wanted("S7") {
        s7_against(name, broker, sizes, run, results).await;
    }
    for scenario in scenarios(sizes).into_iter().filter(|s| wanted(s.id)) {
        let queue = format!("compare.{}.{run}", scenario.id);
        let started = Instant::now();
        match perf_pair::run(&scenario.pair, &url, &queue).await {
            Ok(outcome) => record_pair(name, scenario.id, &outcome, started.elapsed(), results),
            Err(error) => results.fail(format!("{name} {}: {error:#}", scenario.id)),
        }
    }
    if !wanted("S8") {
        return;
    }
    match s8_against(broker, &url, sizes.s8, run).await {
        Ok(elapsed) => {
            let rate = sizes.s8 as f64 / elapsed.as_secs_f64();
            println!("{name:<14} S8  {rate:>9.0} msgs/s forwarded ({} in {elapsed:.2?})", sizes.s8);
            results.add("S8", name, rate);
        }
        Err(error) => results.fail(format!("{name} S8: {error:#}")),
    }
}

fn record_pair(
    name: &'static str,
    id: &'static str,
    outcome: &PairOutcome,
    took: Duration,
    results: &mut Results,
) {
    let rate = outcome.received_rate();
    let latency = outcome.consumer.latency.map(|l| (ms(l.p50), ms(l.p99)));
    let latency_text = latency
        .map_or(String::new(), |(p50, p99)| format!(", e2e p50 {p50:.2} ms p99 {p99:.1} ms"));
    println!(
        "{name:<14} {id:<3} {rate:>9.0} msgs/s received ({} messages{latency_text}; {took:.1?} in all)",
        outcome.consumer.messages
    );
    results.add(id, name, rate);
    if let Some(latency) = latency {
        results.latency.insert((id, name), latency);
    }
}

async fn s7_against(
    name: &'static str,
    broker: &FerromqProcess,
    sizes: &Sizes,
    run: usize,
    results: &mut Results,
) {
    for protocol in Protocol::BOTH {
        let (addr, enqueue_row, dequeue_row) = match protocol {
            Protocol::OpenWire => {
                (Some(broker.openwire), "S7 OpenWire enqueue", "S7 OpenWire dequeue")
            }
            Protocol::Amqp => (broker.amqp, "S7 AMQP enqueue", "S7 AMQP dequeue"),
        };
        let Some(addr) = addr else {
            results.fail(format!("{name} S7: no {} connector", protocol.name()));
            continue;
        };
        let queue = format!("compare.s7.{}.{run}", protocol.name().replace(' ', "-"));
        match benches::s7::run(protocol, addr, &queue, sizes.s7).await {
            Ok(figures) => {
                println!(
                    "{name:<14} S7  {:<8} enqueue {:.3} ms/call, dequeue {:.3} ms/call",
                    protocol.name(),
                    figures.enqueue_ms,
                    figures.dequeue_ms
                );
                results.add(enqueue_row, name, figures.enqueue_ms);
                results.add(dequeue_row, name, figures.dequeue_ms);
            }
            Err(error) => results.fail(format!("{name} S7 {}: {error:#}", protocol.name())),
        }
    }
}

async fn s8_against(
    broker: &FerromqProcess,
    url: &str,
    messages: u64,
    run: usize,
) -> anyhow::Result<Duration> {
    let (from, to) = (format!("compare.s8.a.{run}"), format!("compare.s8.b.{run}"));
    let broker_url = url.parse().map_err(|e| anyhow::anyhow!("{url}: {e}"))?;
    forward::fill(&broker_url, &from, messages).await?;
    forward::forward(broker.openwire, &from, &to, messages).await
}

fn bench_dir() -> PathBuf {
    std::env::var_os("FERROMQ_BENCH_DIR").map(PathBuf::from).unwrap_or_else(std::env::temp_dir)
}

/// The PostgreSQL cluster for the jdbc/postgres column, `None` (with a line saying why) when
/// PostgreSQL is not installed and not required.
fn postgres() -> anyhow::Result<Option<PgCluster>> {
    let required =
        std::env::var_os("FERROMQ_REQUIRE_POSTGRES").is_some_and(|v| !v.is_empty() && v != "0");
    if postgres_bin().is_none() {
        if required {
            bail!(
                "FERROMQ_REQUIRE_POSTGRES is set, but PostgreSQL is not installed (no \
                 /usr/lib/postgresql/*/bin/initdb)"
            );
        }
        println!(
            "PostgreSQL is not installed (no /usr/lib/postgresql/*/bin/initdb): the jdbc/postgres \
             column is left out. Install Debian's `postgresql`, or set FERROMQ_REQUIRE_POSTGRES=1 \
             to make this an error."
        );
        return Ok(None);
    }
    // Panics with the reason if an installed PostgreSQL cannot start.
    Ok(PgCluster::start())
}

fn main() -> anyhow::Result<()> {
    let quick = std::env::args().any(|a| a == "--quick");
    let sizes = if quick { Sizes::quick() } else { Sizes::full() };
    let machine = Machine::read();
    let started = Instant::now();
    let cluster = postgres()?;
    let mut subjects = vec![Subject::Journal, Subject::Sled, Subject::RocksDb, Subject::Sqlite];
    subjects.extend(cluster.as_ref().map(Subject::Postgres));
    if let Ok(only) = std::env::var("FERROMQ_COMPARE_STORES") {
        subjects.retain(|s| only.split(',').any(|name| name.trim() == s.name()));
    }
    let runtime = tokio::runtime::Builder::new_multi_thread().enable_all().build()?;
    let mut results = Results::default();
    for run in 0..sizes.runs {
        for subject in &subjects {
            if let Err(error) = run_store(subject, &sizes, run, &runtime, &mut results) {
                results.fail(format!("{}: {error:#}", subject.name()));
            }
        }
    }
    let stores: Vec<&'static str> = subjects.iter().map(Subject::name).collect();
    let report = Report { sizes: &sizes, quick, machine, stores, results: &results };
    let table = report.markdown(started.elapsed());
    println!("\n{table}");
    let dir = results_dir();
    std::fs::create_dir_all(&dir).with_context(|| format!("creating {}", dir.display()))?;
    write_result(&dir.join("store_compare.md"), &table)?;
    write_result(&dir.join("store_compare.svg"), &report.chart())?;
    if !results.failures.is_empty() {
        bail!("{} scenario(s) failed:\n{}", results.failures.len(), results.failures.join("\n"));
    }
    Ok(())
}

/// What the figures were measured on.
struct Machine {
    cores: usize,
    cpu: String,
    kernel: String,
    memory_gib: f64,
    load_at_start: String,
    date: String,
}

impl Machine {
    fn read() -> Machine {
        let cpuinfo = std::fs::read_to_string("/proc/cpuinfo").unwrap_or_default();
        let cpu = cpuinfo
            .lines()
            .find(|line| line.starts_with("model name"))
            .and_then(|line| line.split_once(':'))
            .map_or("unknown CPU".to_owned(), |(_, model)| model.trim().to_owned());
        let meminfo = std::fs::read_to_string("/proc/meminfo").unwrap_or_default();
        let memory_kib: f64 = meminfo
            .lines()
            .find(|line| line.starts_with("MemTotal:"))
            .and_then(|line| line.split_whitespace().nth(1))
            .and_then(|kib| kib.parse().ok())
            .unwrap_or(0.0);
        Machine {
            cores: std::thread::available_parallelism().map_or(0, |n| n.get()),
            cpu,
            kernel: read_trimmed("/proc/sys/kernel/osrelease"),
            memory_gib: memory_kib / 1024.0 / 1024.0,
            load_at_start: load_average(),
            date: utc_now(),
        }
    }
}

fn read_trimmed(path: &str) -> String {
    std::fs::read_to_string(path).map_or_else(|_| "unknown".to_owned(), |s| s.trim().to_owned())
}

/// The 1-minute load average.
fn load_average() -> String {
    read_trimmed("/proc/loadavg").split_whitespace().next().unwrap_or("?").to_owned()
}

/// `2026-11-30 17:45 UTC`, from `date` (no date crate for one line).
fn utc_now() -> String {
    std::process::Command::new("date")
        .args(["-u", "+%Y-%m-%d %H:%M UTC"])
        .output()
        .ok()
        .filter(|out| out.status.success())
        .map_or_else(
            || "unknown date".to_owned(),
            |out| String::from_utf8_lossy(&out.stdout).trim().to_owned(),
        )
}

/// The table and the chart of a finished comparison.
struct Report<'a> {
    sizes: &'a Sizes,
    quick: bool,
    machine: Machine,
    stores: Vec<&'static str>,
    results: &'a Results,
}

impl Report<'_> {
    fn command(&self) -> &'static str {
        if self.quick {
            "cargo bench -p benches --bench store_compare -- --quick"
        } else {
            "cargo bench -p benches --bench store_compare"
        }
    }

    fn markdown(&self, took: Duration) -> String {
        let s = self.sizes;
        let m = &self.machine;
        let mut out = String::new();
        out.push_str(&format!(
            "Store comparison, {} mode: `{}`, run on {} UTC, {took:.0?} in all.\n\n\
             Machine: {} cores ({}), {:.0} GiB, Linux {}; load average {} at the start, {} at \
             the end (shared with other work: figures move by tens of percent between runs).\n\
             Broker: the `ferromq` release binary as its own process, `sync = \"always\"`, \
             client (`ferromq perf`'s load generator, `client::openwire`, `client::amqp`) in \
             the bench process, on loopback. S1-S6: msgs/s received from the producers' start \
             to the last message in (consumers subscribed first). Median of {} run(s), stores \
             alternated.\n\
             Counts: S1 {}, S2 {}, S3 {}, S4 {}, S5 {} messages; S6 {} per client ({} in all); \
             S7 {} calls each way; S8 {} messages forwarded. 1 KiB bytes messages.\n\n",
            if self.quick { "QUICK (smoke-test counts, not figures to quote)" } else { "full" },
            self.command(),
            m.date.trim_end_matches(" UTC"),
            m.cores,
            m.cpu,
            m.memory_gib,
            m.kernel,
            m.load_at_start,
            load_average(),
            s.runs,
            s.s1,
            s.s2,
            s.s3,
            s.s4,
            s.s5,
            s.s6_per_client,
            s.s6_per_client * S6_CLIENTS as u64,
            s.s7,
            s.s8,
        ));
        out.push_str(&self.figures_table());
        out.push('\n');
        out.push_str(&self.latency_table());
        if !self.results.failures.is_empty() {
            out.push_str("\nFailed (their cells are empty):\n\n");
            for failure in &self.results.failures {
                out.push_str(&format!("- {}\n", failure.replace('\n', " ")));
            }
        }
        out
    }

    fn header(&self, first: &str) -> String {
        let mut out = format!("| {first} |");
        for store in &self.stores {
            out.push_str(&format!(" {store} |"));
        }
        out.push_str("\n|---|");
        out.push_str(&"---:|".repeat(self.stores.len()));
        out.push('\n');
        out
    }

    fn figures_table(&self) -> String {
        let mut out = self.header("scenario");
        for row in rows(self.sizes) {
            let unit = match row.unit {
                Unit::MsgsPerSec => "msgs/s",
                Unit::MsPerCall => "ms/call",
            };
            out.push_str(&format!("| {} {} ({unit}) |", row.id, row.what));
            for store in &self.stores {
                let cell = match (self.results.median(row.id, store), row.unit) {
                    (None, _) => "-".to_owned(),
                    (Some(v), Unit::MsgsPerSec) => format!("{v:.0}"),
                    (Some(v), Unit::MsPerCall) => format!("{v:.3}"),
                };
                out.push_str(&format!(" {cell} |"));
            }
            out.push('\n');
        }
        out.push_str("| disk: fdatasyncs/s of 4 KiB before the store's turns (median) |");
        for store in &self.stores {
            let cell = self
                .results
                .fsync
                .get(store)
                .map_or("-".to_owned(), |rates| format!("{:.0}", median(rates.clone())));
            out.push_str(&format!(" {cell} |"));
        }
        out.push('\n');
        out
    }

    fn latency_table(&self) -> String {
        let mut out = String::from(
            "Consumers' end-to-end latency (send to receive), p50 / p99 ms, of the last run; \
             where the producer outruns the consumer (S1, S3, S4) it is mostly queueing time:\n\n",
        );
        out.push_str(&self.header("scenario"));
        for scenario in scenarios(self.sizes) {
            out.push_str(&format!("| {} {} |", scenario.id, scenario.what));
            for store in &self.stores {
                let cell = self
                    .results
                    .latency
                    .get(&(scenario.id, store))
                    .map_or("-".to_owned(), |(p50, p99)| format!("{p50:.2} / {p99:.1}"));
                out.push_str(&format!(" {cell} |"));
            }
            out.push('\n');
        }
        out
    }

    fn chart(&self) -> String {
        let groups: Vec<Group> = rows(self.sizes)
            .into_iter()
            .filter(|row| row.unit == Unit::MsgsPerSec)
            .map(|row| Group {
                label: row.id.to_owned(),
                caption: chart_caption(row.id).to_owned(),
                values: self
                    .stores
                    .iter()
                    .map(|store| self.results.median(row.id, store))
                    .collect(),
            })
            .collect();
        let series: Vec<String> = self.stores.iter().map(|s| (*s).to_owned()).collect();
        let title = format!(
            "ferromq stores through the broker, msgs/s ({} mode, {}, {} cores, median of {})",
            if self.quick { "quick" } else { "full" },
            self.machine.date,
            self.machine.cores,
            self.sizes.runs
        );
        grouped_bars(&title, "messages per second", &series, &groups)
    }
}
