//! ferromq's own load generator on `failover:` URLs, against an active/standby pair of real
//! `ferromq start` processes on one journal directory, or on one PostgreSQL database with
//! the lease deciding (issue 12): the active broker is SIGKILLed in the middle of a run, the
//! standby takes over, and the run carries on.
//!
//! - [`openwire_load_threads_fail_over_to_the_standby_and_count_every_message_once`] and
//!   [`stomp_load_threads_fail_over_to_the_standby_and_count_every_message_once`]:
//!   `client::load` producers (persistent, synchronous sends) and a consumer (client or
//!   auto acknowledgement) finish their counts; nothing confirmed is left behind, nothing
//!   counted twice. [`a_stomp_send_named_twice_is_stored_once`] pins the broker's side of
//!   the STOMP resend.
//! - [`perf_keeps_running_through_a_takeover_and_its_samples_show_the_gap`]:
//!   `ferromq perf` with seed 000's property files over a failover URL.
//!
//! Every broker is a [`Process`] (from `common/`), killed when the test ends.

mod common;

use std::path::Path;
use std::time::{Duration, Instant};

use client::load::{
    run_consumer, run_producer, BrokerUrl, ConsumerAckMode, ConsumerOptions, DestinationName,
    LoadReport, Meter, ProducerOptions,
};
use common::{free_port, is_timeout, loopback, path_str, temp_dir, Process, RawStomp};

/// How long a load run may take around the takeover (debug builds on two shared cores).
const RUN_TIMEOUT: Duration = Duration::from_secs(40);

/// The failover options of every test: the list in order, a quick first retry, and a limit
/// so that a broken takeover fails the test instead of hanging it.
const FAILOVER_OPTIONS: &str =
    "randomize=false&initialReconnectDelay=100&maxReconnectDelay=1000&maxReconnectAttempts=60";

/// Where a [`Pair`] keeps its messages.
#[derive(Clone, Copy)]
enum SharedStore<'a> {
    /// One journal directory, the directory's lock deciding.
    Journal,
    /// One PostgreSQL database (this url); each broker has a data directory of its own and
    /// the lease decides, short so that the takeover is quick.
    Postgres(&'a str),
}

/// An active broker and its standby on one store, each with one connector of `scheme`
/// (`tcp` or `stomp`).
struct Pair {
    active: Process,
    standby: Process,
    active_port: u16,
    standby_port: u16,
    scheme: &'static str,
}

impl Pair {
    fn start(dir: &Path, scheme: &'static str) -> Pair {
        Pair::start_on(dir, scheme, SharedStore::Journal)
    }

    fn start_on(dir: &Path, scheme: &'static str, store: SharedStore) -> Pair {
        let config = dir.join("standby.toml");
        // Both are started as standbys: the first finds the lock free and serves at once.
        let mut text = "[broker]\nstandby = true\nlock_retry_ms = 50\n".to_owned();
        if let SharedStore::Postgres(url) = store {
            text.push_str(&format!(
                "[store]\nkind = \"jdbc\"\nurl = \"{url}\"\nlease_ms = 1500\nlease_renew_ms = 300\n"
            ));
        }
        std::fs::write(&config, text)
            .unwrap_or_else(|e| panic!("writing {}: {e}", config.display()));
        let start = |name: &str, port: u16| {
            let data = match store {
                SharedStore::Journal => dir.join("data"),
                SharedStore::Postgres(_) => dir.join(format!("data-{name}")),
            };
            let connector = format!("{scheme}://127.0.0.1:{port}");
            Process::start_listening(dir, name, &config, &data, &connector, "127.0.0.1:0")
        };
        let active_port = free_port();
        let mut active = start("active", active_port);
        active.wait_accepting(loopback(active_port));
        let standby_port = free_port();
        let mut standby = start("standby", standby_port);
        let deadline = Instant::now() + Duration::from_secs(20);
        while !standby.stderr().contains("waiting as its standby") {
            assert!(standby.try_status().is_none(), "the standby exited:\n{}", standby.output());
            assert!(Instant::now() < deadline, "the standby never waited:\n{}", standby.output());
            std::thread::sleep(Duration::from_millis(20));
        }
        Pair { active, standby, active_port, standby_port, scheme }
    }

    /// `failover:(A,B)?OPTIONS`.
    fn failover_url(&self, options: &str) -> String {
        let (scheme, a, b) = (self.scheme, self.active_port, self.standby_port);
        format!("failover:({scheme}://127.0.0.1:{a},{scheme}://127.0.0.1:{b})?{options}")
    }

    /// SIGKILLs the active broker and waits for the standby to serve.
    fn kill_active_and_wait_for_the_takeover(&mut self) {
        self.stop_active_and_wait_for_the_takeover(false);
    }

    /// Stops the active broker (SIGTERM if `gracefully`, else SIGKILL) and waits for the
    /// standby to serve.
    fn stop_active_and_wait_for_the_takeover(&mut self, gracefully: bool) {
        match gracefully {
            true => self.active.stop(),
            false => self.active.kill_9(),
        }
        self.standby.wait_accepting(loopback(self.standby_port));
        assert!(self.standby.stderr().contains("taking over"), "{}", self.standby.output());
    }
}

fn runtime() -> tokio::runtime::Runtime {
    // The load threads' warnings (connection lost, reconnected) in the test's output.
    let _ = tracing_subscriber::fmt()
        .with_env_filter(tracing_subscriber::EnvFilter::new("client=debug"))
        .with_test_writer()
        .try_init();
    tokio::runtime::Builder::new_multi_thread()
        .worker_threads(2)
        .enable_all()
        .build()
        .unwrap_or_else(|e| panic!("{e}"))
}

/// Waits until `meter` has counted `count` messages (the run is under way).
fn wait_for_count(meter: &Meter, count: u64, pair: &Pair) {
    let deadline = Instant::now() + RUN_TIMEOUT;
    while meter.grand_total() < count {
        assert!(
            Instant::now() < deadline,
            "the producers sent only {} messages\n{}",
            meter.grand_total(),
            pair.active.output()
        );
        std::thread::sleep(Duration::from_millis(5));
    }
}

/// What the producers and the consumer of [`run_through_a_takeover`] do.
struct Load<'a> {
    scheme: &'static str,
    store: SharedStore<'a>,
    ack_mode: ConsumerAckMode,
    /// Messages per transaction (0: none) on each side.
    transaction_batch: u64,
    /// SIGTERM instead of SIGKILL.
    graceful_stop: bool,
}

/// Producers and one consumer through the takeover; the queue's leftovers after it (read
/// from the standby alone): messages sent twice that the consumer's count did not need.
fn run_through_a_takeover(load: Load) -> (LoadReport, LoadReport, u64) {
    let Load { scheme, store, ack_mode, transaction_batch, graceful_stop } = load;
    let dir = temp_dir();
    let mut pair = Pair::start_on(dir.path(), scheme, store);
    let url: BrokerUrl =
        pair.failover_url(FAILOVER_OPTIONS).parse().unwrap_or_else(|e| panic!("{e}"));
    let queue = DestinationName::queue("failover.load");
    let (threads, per_thread) = (2, 400u64);
    let total = threads as u64 * per_thread;
    let runtime = runtime();
    let consumer = runtime.spawn(run_consumer(ConsumerOptions {
        broker: url.clone(),
        destination: queue.clone(),
        message_count: total,
        ack_mode,
        transaction_batch_size: transaction_batch,
        // A consumer that waits longer than the takeover takes for its next message.
        receive_timeout: Duration::from_secs(20),
        ..ConsumerOptions::default()
    }));
    // The consumer subscribes first; the queue keeps what comes before anyway.
    std::thread::sleep(Duration::from_millis(300));
    let meter = Meter::new(threads);
    let producer = runtime.spawn(run_producer(ProducerOptions {
        broker: url,
        destination: queue.clone(),
        message_count: per_thread,
        parallel_threads: threads,
        persistent: true,
        // Each send waits for the broker outside transactions (the JMS default for
        // persistent sends); in a transaction the commit waits.
        sync_send: Some(transaction_batch == 0),
        transaction_batch_size: transaction_batch,
        meter: Some(meter.clone()),
        ..ProducerOptions::default()
    }));
    wait_for_count(&meter, total / 4, &pair);
    pair.stop_active_and_wait_for_the_takeover(graceful_stop);
    let killed_at = meter.grand_total();
    assert!(killed_at < total, "the producers were done before the kill ({killed_at})");
    let finish = |handle: tokio::task::JoinHandle<Result<LoadReport, client::load::LoadError>>,
                  what: &str| {
        match runtime.block_on(async { tokio::time::timeout(RUN_TIMEOUT, handle).await }) {
            Ok(Ok(Ok(report))) => report,
            Ok(Ok(Err(e))) => panic!("the {what} failed: {e}\n{}", pair.standby.output()),
            Ok(Err(e)) => panic!("the {what} panicked: {e}"),
            Err(_) => panic!("the {what} did not finish\n{}", pair.standby.output()),
        }
    };
    let produced = finish(producer, "producer");
    let consumed = finish(consumer, "consumer");
    // What is left on the standby, read over the same protocol without failover.
    let standby: BrokerUrl = format!("{scheme}://127.0.0.1:{}", pair.standby_port)
        .parse()
        .unwrap_or_else(|e| panic!("{e}"));
    let leftovers = runtime
        .block_on(run_consumer(ConsumerOptions {
            broker: standby,
            destination: queue,
            message_count: total,
            receive_timeout: Duration::from_secs(1),
            ..ConsumerOptions::default()
        }))
        .unwrap_or_else(|e| panic!("draining the standby: {e}"));
    pair.standby.stop();
    (produced, consumed, leftovers.messages)
}

/// Runs `load` through a takeover ([`run_through_a_takeover`]): the producers sent all 800,
/// the consumer counted all 800, and nothing is left on the standby. Every confirmed message
/// was counted, none twice (a second count would have left another message uncounted).
fn every_message_arrives_once_through_a_takeover(load: Load) {
    let (produced, consumed, leftovers) = run_through_a_takeover(load);
    assert_eq!((produced.messages, produced.expected), (800, 800), "{produced}");
    assert_eq!(consumed.messages, 800, "{consumed}");
    assert_eq!(leftovers, 0, "messages left on the standby after the consumer's 800");
}

/// Over OpenWire resends keep their message ids and the broker's duplicate detection drops
/// those it had stored: exactly what was confirmed arrives, once.
#[test]
fn openwire_load_threads_fail_over_to_the_standby_and_count_every_message_once() {
    let load = Load {
        scheme: "tcp",
        store: SharedStore::Journal,
        ack_mode: ConsumerAckMode::Client,
        transaction_batch: 0,
        graceful_stop: false,
    };
    every_message_arrives_once_through_a_takeover(load);
}

/// The same on PostgreSQL: two brokers with data directories of their own share one
/// database, the lease makes the second wait and lets it take over once the first's lease
/// expired after the SIGKILL.
#[test]
fn openwire_load_threads_fail_over_on_postgres_and_count_every_message_once() {
    let Some(cluster) = store_jdbc::testing::PgCluster::shared() else { return };
    let url = cluster.create_database();
    let load = Load {
        scheme: "tcp",
        store: SharedStore::Postgres(&url),
        ack_mode: ConsumerAckMode::Client,
        transaction_batch: 0,
        graceful_stop: false,
    };
    every_message_arrives_once_through_a_takeover(load);
}

/// Transactions on both sides: the producers replay the transaction the takeover rolled
/// back, with its ids (a commit that was done is recognised, a rolled back one forgotten by
/// the broker's audit); the consumer acknowledges again what came back.
#[test]
fn openwire_transactions_are_replayed_whole_through_a_takeover() {
    let load = Load {
        scheme: "tcp",
        store: SharedStore::Journal,
        ack_mode: ConsumerAckMode::Auto,
        transaction_batch: 10,
        graceful_stop: false,
    };
    every_message_arrives_once_through_a_takeover(load);
}

/// Over STOMP the load generator names its sends (`ferromq-message-id`) and a resend
/// keeps the name, so the same holds as over OpenWire.
#[test]
fn stomp_load_threads_fail_over_to_the_standby_and_count_every_message_once() {
    let load = Load {
        scheme: "stomp",
        store: SharedStore::Journal,
        ack_mode: ConsumerAckMode::Auto,
        transaction_batch: 0,
        graceful_stop: false,
    };
    every_message_arrives_once_through_a_takeover(load);
}

/// A stopped broker (SIGTERM: it answers what it stored, then closes every connection) is
/// failed over like a dead one.
#[test]
fn a_graceful_stop_of_the_active_broker_is_failed_over_too() {
    let load = Load {
        scheme: "stomp",
        store: SharedStore::Journal,
        ack_mode: ConsumerAckMode::ClientIndividual,
        transaction_batch: 0,
        graceful_stop: true,
    };
    every_message_arrives_once_through_a_takeover(load);
}

/// The broker side of the STOMP resend: a SEND named with `ferromq-message-id` is stored
/// once however often it comes, and keeps its name as its message id; a name not in
/// ActiveMQ's form is refused.
#[test]
fn a_stomp_send_named_twice_is_stored_once() {
    let dir = temp_dir();
    let port = free_port();
    let mut broker = Process::start_broker(dir.path(), "broker", &dir.path().join("data"), port);
    broker.wait_accepting(loopback(port));
    let mut stomp = RawStomp::open(loopback(port));
    let queue = ("destination", "/queue/named");
    let id = "ID:load-host-1-2-3:1:1:1:1";
    for (n, body) in ["first", "resent", "resent again"].into_iter().enumerate() {
        let headers = [queue, ("persistent", "true"), ("ferromq-message-id", id)];
        stomp.request("SEND", &headers, body.as_bytes(), &format!("r{n}"));
    }
    let next = [queue, ("ferromq-message-id", "ID:load-host-1-2-3:1:1:1:2")];
    stomp.request("SEND", &next, b"second", "r3");
    stomp.request("SUBSCRIBE", &[queue, ("id", "s"), ("ack", "auto")], b"", "subscribed");
    let first = stomp.expect_frame("MESSAGE");
    assert_eq!((first.header("message-id"), &first.body[..]), (Some(id), &b"first"[..]));
    assert_eq!(first.header("ferromq-message-id"), None, "{}", first.describe());
    assert_eq!(stomp.expect_frame("MESSAGE").body, b"second");
    stomp.set_read_timeout(Duration::from_millis(300));
    match stomp.read_frame() {
        Err(e) if is_timeout(&e) => {}
        Ok(frame) => panic!("a resend was stored again: {}", frame.describe()),
        Err(e) => panic!("{e}"),
    }
    let mut stomp = RawStomp::open(loopback(port));
    stomp.send("SEND", &[queue, ("ferromq-message-id", "load-1")], b"x");
    let error = stomp.expect_frame("ERROR");
    assert!(error.describe().contains("invalid ferromq-message-id header"), "{}", error.describe());
    broker.stop();
}

/// Seed 000's `openwire-producer.properties` and `openwire-consumer.properties`.
const SEED_PRODUCER: &str =
    include_str!("../../client/src/load/perf/props/seed000/openwire-producer.properties");
const SEED_CONSUMER: &str =
    include_str!("../../client/src/load/perf/props/seed000/openwire-consumer.properties");
const SEED_URL: &str = "tcp://127.0.0.1:61616";

/// The `throughput` of every `<tpdata>` of an XML report, summed over the clients per
/// sample index.
fn samples_per_interval(path: &Path) -> Vec<u64> {
    let xml = std::fs::read_to_string(path)
        .unwrap_or_else(|e| panic!("cannot read the report {}: {e}", path.display()));
    let mut totals: Vec<u64> = Vec::new();
    for line in xml.lines().filter(|line| line.starts_with("<tpdata ")) {
        let attribute = |name: &str| -> u64 {
            let start = line.find(&format!("{name}='")).expect("attribute") + name.len() + 2;
            let end = line[start..].find('\'').expect("closing quote") + start;
            line[start..end].parse().expect("a number")
        };
        let index = usize::try_from(attribute("index")).expect("an index");
        if totals.len() <= index {
            totals.resize(index + 1, 0);
        }
        totals[index] += attribute("throughput");
    }
    totals
}

/// `ferromq perf` over `failover:`, the active broker SIGKILLed mid-run: both sides run to
/// the end, and the producer's samples show the gap (an interval far under the median) and
/// the recovery after it.
#[test]
fn perf_keeps_running_through_a_takeover_and_its_samples_show_the_gap() {
    let dir = temp_dir();
    let mut pair = Pair::start(dir.path(), "tcp");
    // A second between rounds: the standby takes over in a fraction of that, so the gap
    // spans several 250 ms samples whatever the machine's speed.
    let url = pair.failover_url(
        "randomize=false&initialReconnectDelay=1000&useExponentialBackOff=false&\
         maxReconnectAttempts=30",
    );
    let producer_file = dir.path().join("openwire-producer.properties");
    let consumer_file = dir.path().join("openwire-consumer.properties");
    std::fs::write(&producer_file, SEED_PRODUCER.replace(SEED_URL, &url)).expect("write");
    std::fs::write(&consumer_file, SEED_CONSUMER.replace(SEED_URL, &url)).expect("write");
    let common = ["--set", "sysTest.numClients=2", "--set", "sampler.interval=250"];
    let mut args =
        vec!["perf", "consumer", "--props", path_str(&consumer_file), "consumer.recvDuration=6000"];
    args.extend(common);
    let mut consumer = Process::start(dir.path(), "consumer", &args);
    std::thread::sleep(Duration::from_millis(500));
    let mut args =
        vec!["perf", "producer", "--props", path_str(&producer_file), "producer.sendDuration=6000"];
    args.extend(common);
    let mut producer = Process::start(dir.path(), "producer", &args);
    std::thread::sleep(Duration::from_millis(2500));
    assert!(producer.try_status().is_none(), "perf ended early:\n{}", producer.output());
    pair.kill_active_and_wait_for_the_takeover();
    let produced = producer.succeed(RUN_TIMEOUT);
    consumer.succeed(RUN_TIMEOUT);
    assert!(producer.stderr().contains("reconnected"), "{}", producer.output());
    let samples =
        samples_per_interval(&dir.path().join("reports/JmsProducer_numClients2_numDests1_all.xml"));
    let mut sorted = samples.clone();
    sorted.sort_unstable();
    let median = sorted[sorted.len() / 2];
    assert!(median > 0, "no throughput: {samples:?}\n{produced}");
    // The gap: an interval under a third of the median before the last one (a run's last
    // interval may be partial), followed by one back to half the median or more.
    let gap = samples[..samples.len() - 1].iter().position(|&n| n * 3 < median);
    let gap = gap.unwrap_or_else(|| panic!("no dip in {samples:?} (median {median})"));
    assert!(
        samples[gap + 1..].iter().any(|&n| n * 2 >= median),
        "no recovery after the dip at {gap}: {samples:?} (median {median})"
    );
    pair.standby.stop();
}
