//! `ferromq perf producer` and `ferromq perf consumer` against a real `ferromq start`,
//! process to process over OpenWire, with seed 000's properties files (only the broker URL
//! and the run's length changed): what an ActiveMQ user running
//! `mvn activemq-perf:producer` / `activemq-perf:consumer` sees.
//!
//! The credentials test runs against Apache ActiveMQ with its authentication plugin
//! ([`activemq::ActiveMq`], the `tests` crate's launcher, included by path): ferromq has no
//! authentication yet. It is skipped when Debian's package is missing, unless
//! `FERROMQ_REQUIRE_ACTIVEMQ` is set.
//!
//! Every spawned process is wrapped in [`Process`] (from `common/`), killed when the test
//! ends; its output goes to files in the test's temporary directory.

#[allow(dead_code)]
#[path = "../../tests/src/activemq.rs"]
mod activemq;
mod common;

use std::path::Path;
use std::time::Duration;

use common::{free_port, loopback, path_str, refused_start, temp_dir, Process};

/// How long a perf run may take (debug builds on two shared cores).
const RUN_TIMEOUT: Duration = Duration::from_secs(180);
/// How long a command that should fail at once may take.
const REFUSE_TIMEOUT: Duration = Duration::from_secs(30);

/// The broker URL the seed files carry, replaced by the test broker's.
const SEED_URL: &str = "tcp://127.0.0.1:61616";

/// Seed 000's `openwire-producer.properties` (shared with the client's parsing tests).
const SEED_PRODUCER: &str =
    include_str!("../../client/src/load/perf/props/seed000/openwire-producer.properties");

/// Seed 000's `openwire-consumer.properties`.
const SEED_CONSUMER: &str =
    include_str!("../../client/src/load/perf/props/seed000/openwire-consumer.properties");

/// A `ferromq start` with an OpenWire connector on a free port; the URL to give the tools.
fn start_broker(dir: &Path) -> (Process, String) {
    let port = free_port();
    let url = format!("tcp://127.0.0.1:{port}");
    let data = dir.join("data");
    let args = [
        "start",
        "--connector",
        &url,
        "--data-dir",
        path_str(&data),
        "--admin-bind",
        "127.0.0.1:0",
    ];
    let mut process = Process::start(dir, "broker", &args);
    process.wait_accepting(loopback(port));
    (process, url)
}

/// Writes both seed files for `url` into `dir`; returns their paths.
fn seed_files(dir: &Path, url: &str) -> (String, String) {
    let producer = dir.join("openwire-producer.properties");
    let consumer = dir.join("openwire-consumer.properties");
    std::fs::write(&producer, SEED_PRODUCER.replace(SEED_URL, url)).expect("write producer file");
    std::fs::write(&consumer, SEED_CONSUMER.replace(SEED_URL, url)).expect("write consumer file");
    (path_str(&producer).to_owned(), path_str(&consumer).to_owned())
}

/// The value of the summary line `label: value`; fails unless there is exactly one.
fn summary_value(stdout: &str, label: &str) -> String {
    let prefix = format!("{label}: ");
    let values: Vec<&str> =
        stdout.lines().filter_map(|line| line.strip_prefix(prefix.as_str())).collect();
    assert_eq!(values.len(), 1, "expected one `{label}` line in:\n{stdout}");
    values[0].to_owned()
}

fn total(stdout: &str) -> u64 {
    let value = summary_value(stdout, "System Total Throughput");
    value.parse().unwrap_or_else(|_| panic!("not a number: {value}"))
}

/// The `throughput` attributes of every `<tpdata>` in an XML report, per client.
fn report_samples(path: &Path) -> Vec<(String, u64)> {
    let xml = std::fs::read_to_string(path)
        .unwrap_or_else(|e| panic!("cannot read the report {}: {e}", path.display()));
    xml.lines()
        .filter(|line| line.starts_with("<tpdata "))
        .map(|line| {
            let attribute = |name: &str| {
                let start = line.find(&format!("{name}='")).expect("attribute") + name.len() + 2;
                let end = line[start..].find('\'').expect("closing quote") + start;
                line[start..end].to_owned()
            };
            (attribute("clientName"), attribute("throughput").parse().expect("a number"))
        })
        .collect()
}

#[test]
fn counted_runs_on_a_queue_receive_exactly_what_was_sent() {
    let dir = temp_dir();
    let (_broker, url) = start_broker(dir.path());
    let (producer_file, consumer_file) = seed_files(dir.path(), &url);
    // Seed 000's files with 3 clients and counts instead of five minutes.
    let mut consumer = Process::start(
        dir.path(),
        "consumer",
        &[
            "perf",
            "consumer",
            "--props",
            &consumer_file,
            "--set",
            "sysTest.numClients=3",
            "consumer.recvType=count",
            "consumer.recvCount=400",
        ],
    );
    std::thread::sleep(Duration::from_millis(500));
    let mut producer = Process::start(
        dir.path(),
        "producer",
        &[
            "perf",
            "producer",
            "--props",
            &producer_file,
            "--set",
            "sysTest.numClients=3",
            "--set",
            "producer.sendType=count",
            "--set",
            "producer.sendCount=400",
            // The plugin's default samplers (seed 000's file has only tp).
            "--set",
            "sysTest.samplers=tp,cpu",
        ],
    );
    let produced = producer.succeed(RUN_TIMEOUT);
    let consumed = consumer.succeed(RUN_TIMEOUT);
    assert_eq!(total(&produced), 1200, "{produced}");
    assert_eq!(total(&consumed), total(&produced), "{consumed}");
    assert_eq!(summary_value(&produced, "System Total Clients"), "3");
    assert_eq!(
        summary_value(&produced, "Min Client Total Throughput"),
        "clientName=JmsProducer0, value=400"
    );
    assert!(produced.contains("Latency (1200 messages): send latency p50"), "{produced}");
    assert!(consumed.contains("end-to-end latency p50"), "{consumed}");
    // The cpu sampler's line, only where asked for.
    let cpu_line = produced.lines().find(|line| line.starts_with("CPU usage: ")).unwrap_or("");
    assert!(cpu_line.contains("avg ") && cpu_line.contains("max "), "{produced}");
    assert!(!consumed.contains("CPU usage:"), "{consumed}");

    // The reports are named like the plugin's and hold every sample of the summary.
    let reports = dir.path().join("reports");
    let xml = reports.join("JmsProducer_numClients3_numDests1_all.xml");
    let samples = report_samples(&xml);
    assert_eq!(samples.iter().map(|(_, n)| n).sum::<u64>(), 1200);
    // One <cpudata> per sample index, with vmstat's columns, and the CPU summary.
    let text = std::fs::read_to_string(&xml).expect("the report");
    let cpu_samples = text.lines().filter(|line| line.starts_with("<cpudata index=")).count();
    assert_eq!(cpu_samples, samples.len() / 3, "{text}");
    assert!(text.contains(" us='") && text.contains(" id='"), "{text}");
    assert!(text.contains("<property name='perfCpuSummary'>"), "{text}");
    let clients: std::collections::BTreeSet<&str> =
        samples.iter().map(|(name, _)| name.as_str()).collect();
    assert_eq!(
        clients.into_iter().collect::<Vec<_>>(),
        ["JmsProducer0", "JmsProducer1", "JmsProducer2"]
    );
    // System Average Throughput: the sum of each client's average per sample.
    let per_client = samples.len() as f64 / 3.0;
    let average: f64 = summary_value(&produced, "System Average Throughput").parse().expect("f64");
    assert!((average - 1200.0 / per_client).abs() < 1e-6, "{average} vs {per_client} samples");
    let consumer_xml = reports.join("JmsConsumer_numClients3_numDests1_equal.xml");
    assert_eq!(report_samples(&consumer_xml).iter().map(|(_, n)| n).sum::<u64>(), 1200);
    let svg = std::fs::read_to_string(reports.join("JmsProducer_numClients3_numDests1_all.svg"))
        .expect("the chart");
    assert!(svg.starts_with("<svg ") && svg.contains("<polyline"), "{svg}");
}

#[test]
fn timed_runs_agree_within_one_percent() {
    let dir = temp_dir();
    let (_broker, url) = start_broker(dir.path());
    let (producer_file, consumer_file) = seed_files(dir.path(), &url);
    // Two clients each way for four seconds, sampled every 500 ms. The consumer's clock
    // starts at its first message, so both sample the same stretch of the flow.
    let common = ["--set", "sysTest.numClients=2", "--set", "sampler.interval=500"];
    let mut args =
        vec!["perf", "consumer", "--props", &consumer_file, "consumer.recvDuration=4000"];
    args.extend(common);
    let mut consumer = Process::start(dir.path(), "consumer", &args);
    std::thread::sleep(Duration::from_millis(500));
    let mut args =
        vec!["perf", "producer", "--props", &producer_file, "producer.sendDuration=4000"];
    args.extend(common);
    let mut producer = Process::start(dir.path(), "producer", &args);
    let produced = producer.succeed(RUN_TIMEOUT);
    let consumed = consumer.succeed(RUN_TIMEOUT);
    let (sent, received) = (total(&produced), total(&consumed));
    assert!(sent > 100, "too few messages to compare:\n{produced}");
    let difference = sent.abs_diff(received) as f64 / sent as f64;
    assert!(
        difference <= 0.01,
        "sent {sent}, received {received}: {:.2}% apart\n{produced}\n{consumed}",
        difference * 100.0
    );
    // Eight samples of 500 ms per client.
    let xml = dir.path().join("reports/JmsProducer_numClients2_numDests1_all.xml");
    assert_eq!(report_samples(&xml).len(), 16);
}

#[test]
fn a_refused_connection_is_a_clear_error() {
    let dir = temp_dir();
    let url = format!("tcp://127.0.0.1:{}", free_port());
    let (producer_file, _) = seed_files(dir.path(), &url);
    let stderr = refused_start(
        dir.path(),
        "refused",
        &["perf", "producer", "--props", &producer_file, "sysTest.numClients=2"],
        REFUSE_TIMEOUT,
    );
    assert!(stderr.contains("cannot connect to"), "{stderr}");
    assert!(stderr.contains(&url), "the error should name the URL:\n{stderr}");
    assert!(stderr.contains("is a broker listening there?"), "{stderr}");
}

#[test]
fn bad_properties_are_refused_by_name() {
    let dir = temp_dir();
    let file = dir.path().join("bad.properties");
    std::fs::write(&file, "factory.brokerURL=tcp://127.0.0.1:1\nproducer.sendDurration=5\n")
        .expect("write");
    let stderr = refused_start(
        dir.path(),
        "unknown",
        &["perf", "producer", "--props", path_str(&file)],
        REFUSE_TIMEOUT,
    );
    assert!(stderr.contains("bad.properties:2: unknown key `producer.sendDurration`"), "{stderr}");
    // Seed 000's files as printed, with their empty broker URL.
    let (producer_file, _) = seed_files(dir.path(), "");
    let stderr = refused_start(
        dir.path(),
        "empty-url",
        &["perf", "producer", "--props", &producer_file],
        REFUSE_TIMEOUT,
    );
    assert!(stderr.contains("`factory.brokerURL` is required"), "{stderr}");
    // Transactions over AMQP are refused by key, before connecting.
    let stderr = refused_start(
        dir.path(),
        "amqp",
        &[
            "perf",
            "producer",
            "--broker-url",
            "tcp://127.0.0.1:1",
            "--protocol",
            "amqp",
            "producer.sessTransacted=true",
        ],
        REFUSE_TIMEOUT,
    );
    assert!(stderr.contains("`producer.sessTransacted` is not implemented"), "{stderr}");
    assert!(stderr.contains("over AMQP (amqp://127.0.0.1:1)"), "{stderr}");
}

#[test]
fn counted_amqp_runs_receive_exactly_what_was_sent() {
    let dir = temp_dir();
    let port = free_port();
    let url = format!("amqp://127.0.0.1:{port}");
    let data = dir.path().join("data");
    let args = [
        "start",
        "--connector",
        &url,
        "--data-dir",
        path_str(&data),
        "--admin-bind",
        "127.0.0.1:0",
    ];
    let mut broker = Process::start(dir.path(), "broker", &args);
    broker.wait_accepting(loopback(port));
    // Seed 000's files over AMQP: the URL's scheme is the only change, and the consumer
    // acknowledges with clientAck (an accept per message over AMQP).
    let (producer_file, consumer_file) = seed_files(dir.path(), &url);
    let mut consumer = Process::start(
        dir.path(),
        "consumer",
        &[
            "perf",
            "consumer",
            "--props",
            &consumer_file,
            "sysTest.numClients=2",
            "consumer.recvType=count",
            "consumer.recvCount=300",
            "consumer.sessAckMode=clientAck",
        ],
    );
    std::thread::sleep(Duration::from_millis(500));
    let mut producer = Process::start(
        dir.path(),
        "producer",
        &[
            "perf",
            "producer",
            "--props",
            &producer_file,
            "sysTest.numClients=3",
            "producer.sendType=count",
            "producer.sendCount=200",
        ],
    );
    let produced = producer.succeed(RUN_TIMEOUT);
    let consumed = consumer.succeed(RUN_TIMEOUT);
    assert!(produced.contains(&format!("against {url}")), "{produced}");
    assert_eq!(total(&produced), 600, "{produced}");
    assert_eq!(total(&consumed), 600, "{consumed}");
    // Every AMQP send waits for the broker's accepted.
    assert!(produced.contains("Latency (600 messages): send latency p50"), "{produced}");
    assert!(consumed.contains("end-to-end latency p50"), "{consumed}");
}

/// Wrong credentials against Apache ActiveMQ with its simpleAuthenticationPlugin: the
/// broker's SecurityException in a clear message and a non-zero exit; the right ones run.
#[test]
fn wrong_credentials_are_a_clear_error_against_apache_activemq() {
    let Some(activemq) =
        activemq::ActiveMq::start_with_user("perf", "s3cret").expect("starting Apache ActiveMQ")
    else {
        return;
    };
    let dir = temp_dir();
    let url = activemq.url();
    let (producer_file, _) = seed_files(dir.path(), &url);
    let run = |user: &str, password: &str| {
        vec![
            "perf".to_owned(),
            "producer".to_owned(),
            "--props".to_owned(),
            producer_file.clone(),
            "sysTest.numClients=2".to_owned(),
            "producer.sendType=count".to_owned(),
            "producer.sendCount=10".to_owned(),
            format!("factory.userName={user}"),
            format!("factory.password={password}"),
        ]
    };
    for (name, user, password) in [("wrong-password", "perf", "wrong"), ("no-user", "", "")] {
        let args = run(user, password);
        let args: Vec<&str> = args.iter().map(String::as_str).collect();
        let stderr = refused_start(dir.path(), name, &args, RUN_TIMEOUT);
        assert!(stderr.contains(&format!("cannot connect to {url}")), "{name}: {stderr}");
        // ActiveMQ 5.17's words: "User name [perf] or password is invalid."
        assert!(stderr.contains("SecurityException"), "{name}: {stderr}");
        assert!(stderr.contains("check the user name and password"), "{name}: {stderr}");
    }
    let args = run("perf", "s3cret");
    let args: Vec<&str> = args.iter().map(String::as_str).collect();
    let mut producer = Process::start(dir.path(), "right", &args);
    let produced = producer.succeed(RUN_TIMEOUT);
    assert_eq!(total(&produced), 20, "{produced}\n{}", activemq.log());
}

/// `ferromq perf producer` over MQTT: seed 000's file with an `mqtt://` URL (the scheme is
/// the only change, the `--protocol mqtt` override gives the same), a topic, counted sends:
/// the summary counts every message (persistent sends at QoS 1, windowed).
#[test]
fn counted_mqtt_producer_runs_count_what_was_sent() {
    let dir = temp_dir();
    let port = free_port();
    let url = format!("mqtt://127.0.0.1:{port}");
    let data = dir.path().join("data");
    let args = [
        "start",
        "--connector",
        &url,
        "--data-dir",
        path_str(&data),
        "--admin-bind",
        "127.0.0.1:0",
    ];
    let mut broker = Process::start(dir.path(), "broker", &args);
    broker.wait_accepting(loopback(port));
    // The seed file names OpenWire on MQTT's port: --protocol mqtt picks the scheme.
    let (producer_file, _) = seed_files(dir.path(), &format!("tcp://127.0.0.1:{port}"));
    let produced = Process::start(
        dir.path(),
        "producer",
        &[
            "perf",
            "producer",
            "--props",
            &producer_file,
            "--protocol",
            "mqtt",
            "sysTest.numClients=2",
            "producer.destName=topic://perf.mqtt",
            "producer.sendType=count",
            "producer.sendCount=300",
        ],
    )
    .succeed(RUN_TIMEOUT);
    assert!(produced.contains(&format!("against {url}")), "{produced}");
    assert_eq!(total(&produced), 600, "{produced}");

    // A queue, or a transaction, is refused with the reason.
    let (producer_file, _) = seed_files(dir.path(), &url);
    let stderr = refused_start(
        dir.path(),
        "transacted",
        &["perf", "producer", "--props", &producer_file, "producer.sessTransacted=true"],
        Duration::from_secs(20),
    );
    assert!(stderr.contains("over MQTT"), "{stderr}");
}
