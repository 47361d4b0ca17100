//! `ferromq producer` and `ferromq consumer` against a real `ferromq start`, process to
//! process over TCP, over OpenWire (the default) and STOMP: what an ActiveMQ user running
//! `activemq producer` / `activemq consumer` sees; the same commands against a real Apache
//! ActiveMQ 5.17 ([`activemq::ActiveMq`], the `tests` crate's launcher, included by path).
//! Plus the load generator's API (`client::load`) against an embedded broker.
//!
//! Every spawned process is wrapped in [`Process`] (from `common/`, shared with `cli.rs`),
//! killed when the test ends, passes or fails; its stdout and stderr go to files in the
//! test's temporary directory.

#[allow(dead_code)]
#[path = "../../tests/src/activemq.rs"]
mod activemq;
mod common;

use std::path::Path;
use std::time::Duration;

use client::load::{
    run_consumer, run_producer, ConsumerAckMode, ConsumerOptions, DestinationName, ProducerOptions,
};
use common::{free_port, loopback, refused_start, temp_dir, Process};

/// How long a producer or consumer run may take (debug builds on two shared cores).
const RUN_TIMEOUT: Duration = Duration::from_secs(180);
/// How long a command that should fail at once may take.
const REFUSE_TIMEOUT: Duration = Duration::from_secs(20);
/// The consumers' --receiveTimeout: a lost message fails the test instead of hanging it.
const RECEIVE_TIMEOUT_MS: &str = "60000";

/// A `ferromq start` with a STOMP and an OpenWire connector on free ports, with the URLs to
/// give the tools.
struct RunningBroker {
    /// `stomp://127.0.0.1:PORT`.
    url: String,
    /// `tcp://127.0.0.1:PORT`.
    openwire: String,
    _process: Process,
}

fn start_broker(dir: &Path) -> RunningBroker {
    let (stomp, openwire) = (free_port(), free_port());
    let stomp_uri = format!("stomp://127.0.0.1:{stomp}");
    let openwire_uri = format!("tcp://127.0.0.1:{openwire}");
    let data = dir.join("data");
    let args = [
        "start",
        "--connector",
        &stomp_uri,
        "--connector",
        &openwire_uri,
        "--data-dir",
        common::path_str(&data),
        "--admin-bind",
        "127.0.0.1:0",
    ];
    let mut process = Process::start(dir, "broker", &args);
    process.wait_accepting(loopback(stomp));
    process.wait_accepting(loopback(openwire));
    RunningBroker { url: stomp_uri, openwire: openwire_uri, _process: process }
}

/// The protocol a scenario runs over.
#[derive(Clone, Copy)]
enum Wire {
    Stomp,
    OpenWire,
}

impl Wire {
    fn url(self, broker: &RunningBroker) -> &str {
        match self {
            Wire::Stomp => &broker.url,
            Wire::OpenWire => &broker.openwire,
        }
    }
}

/// The number in the summary line `<verb> N messages in ...`; fails unless there is
/// exactly one such line.
fn summary_count(stdout: &str, verb: &str) -> u64 {
    let summaries: Vec<&str> =
        stdout.lines().filter(|line| line.starts_with(&format!("{verb} "))).collect();
    assert_eq!(summaries.len(), 1, "expected one `{verb} N messages` line in:\n{stdout}");
    let line = summaries[0];
    let words: Vec<&str> = line.split_whitespace().collect();
    assert_eq!(words.get(2), Some(&"messages"), "a complete run's summary: {line}");
    words[1].parse().unwrap_or_else(|_| panic!("a count in {line:?}"))
}

/// Starts a consumer of the broker at `url` with `args` and waits until its `threads`
/// threads have subscribed.
fn start_consumer(dir: &Path, url: &str, threads: usize, args: &[&str]) -> Process {
    let mut all = vec!["consumer", "--brokerUrl", url, "--receiveTimeout", RECEIVE_TIMEOUT_MS];
    all.extend_from_slice(args);
    let mut consumer = Process::start(dir, "consumer", &all);
    consumer.wait_for_lines(": subscribed to ", threads);
    consumer
}

fn run_producer_process(dir: &Path, url: &str, args: &[&str]) -> String {
    let mut all = vec!["producer", "--brokerUrl", url];
    all.extend_from_slice(args);
    Process::start(dir, "producer", &all).succeed(RUN_TIMEOUT)
}

#[test]
fn producer_and_consumer_exchange_10000_messages_over_a_queue_over_stomp() {
    producer_and_consumer_exchange_10000_messages_over_a_queue(Wire::Stomp);
}

#[test]
fn producer_and_consumer_exchange_10000_messages_over_a_queue_over_openwire() {
    producer_and_consumer_exchange_10000_messages_over_a_queue(Wire::OpenWire);
}

fn producer_and_consumer_exchange_10000_messages_over_a_queue(wire: Wire) {
    let dir = temp_dir();
    let broker = start_broker(dir.path());
    let url = wire.url(&broker);
    let common = ["--messageCount", "10000", "--destination", "queue://load.test"];
    let mut consumer = start_consumer(dir.path(), url, 1, &common);
    let produced =
        run_producer_process(dir.path(), url, &[&common[..], &["--messageSize", "100"]].concat());
    assert_eq!(summary_count(&produced, "Produced"), 10_000, "{produced}");
    assert!(produced.contains("producer-1: produced 10000 messages"), "{produced}");
    // Persistent sends are synchronous by default: the summary has their latency.
    assert!(produced.contains("send latency p50"), "{produced}");
    let consumed = consumer.succeed(RUN_TIMEOUT);
    assert_eq!(summary_count(&consumed, "Consumed"), 10_000, "{consumed}");
    assert!(consumed.contains("consumer-1: consumed 10000 messages"), "{consumed}");
}

#[test]
fn parallel_threads_share_the_work_on_both_sides_over_stomp() {
    parallel_threads_share_the_work_on_both_sides(Wire::Stomp);
}

#[test]
fn parallel_threads_share_the_work_on_both_sides_over_openwire() {
    parallel_threads_share_the_work_on_both_sides(Wire::OpenWire);
}

fn parallel_threads_share_the_work_on_both_sides(wire: Wire) {
    let dir = temp_dir();
    let broker = start_broker(dir.path());
    let url = wire.url(&broker);
    let common = [
        "--messageCount",
        "5000",
        "--parallelThreads",
        "2",
        "--destination",
        "queue://load.parallel",
    ];
    let mut consumer = start_consumer(dir.path(), url, 2, &common);
    let produced = run_producer_process(dir.path(), url, &common);
    assert_eq!(summary_count(&produced, "Produced"), 10_000, "{produced}");
    let consumed = consumer.succeed(RUN_TIMEOUT);
    assert_eq!(summary_count(&consumed, "Consumed"), 10_000, "{consumed}");
    for thread in ["consumer-1", "consumer-2"] {
        assert!(consumed.contains(&format!("{thread}: consumed 5000 messages")), "{consumed}");
    }
    for thread in ["producer-1", "producer-2"] {
        assert!(produced.contains(&format!("{thread}: produced 5000 messages")), "{produced}");
    }
}

#[test]
fn transacted_producer_and_consumer_commit_in_batches_over_stomp() {
    transacted_producer_and_consumer_commit_in_batches(Wire::Stomp);
}

#[test]
fn transacted_producer_and_consumer_commit_in_batches_over_openwire() {
    transacted_producer_and_consumer_commit_in_batches(Wire::OpenWire);
}

fn transacted_producer_and_consumer_commit_in_batches(wire: Wire) {
    let dir = temp_dir();
    let broker = start_broker(dir.path());
    let url = wire.url(&broker);
    // 10050: the last batch of each side is a partial one, committed too.
    let common = [
        "--messageCount",
        "10050",
        "--transactionBatchSize",
        "100",
        "--destination",
        "queue://load.transacted",
    ];
    let mut consumer = start_consumer(dir.path(), url, 1, &common);
    let produced = run_producer_process(dir.path(), url, &common);
    assert_eq!(summary_count(&produced, "Produced"), 10_050, "{produced}");
    assert!(produced.contains("commit latency p50"), "{produced}");
    let consumed = consumer.succeed(RUN_TIMEOUT);
    assert_eq!(summary_count(&consumed, "Consumed"), 10_050, "{consumed}");
    assert!(consumed.contains("commit latency p50"), "{consumed}");
}

#[test]
fn durable_topic_subscriber_gets_what_was_sent_while_it_was_away_over_stomp() {
    durable_topic_subscriber_gets_what_was_sent_while_it_was_away(Wire::Stomp);
}

#[test]
fn durable_topic_subscriber_gets_what_was_sent_while_it_was_away_over_openwire() {
    durable_topic_subscriber_gets_what_was_sent_while_it_was_away(Wire::OpenWire);
}

fn durable_topic_subscriber_gets_what_was_sent_while_it_was_away(wire: Wire) {
    let dir = temp_dir();
    let broker = start_broker(dir.path());
    let url = wire.url(&broker);
    let durable = ["--durable", "true", "--clientId", "c1", "--destination", "topic://load.topic"];
    // Online: the subscriber gets every message.
    let mut consumer =
        start_consumer(dir.path(), url, 1, &[&durable[..], &["--messageCount", "10000"]].concat());
    let produced = run_producer_process(
        dir.path(),
        url,
        &["--messageCount", "10000", "--destination", "topic://load.topic"],
    );
    assert_eq!(summary_count(&produced, "Produced"), 10_000, "{produced}");
    let consumed = consumer.succeed(RUN_TIMEOUT);
    assert_eq!(summary_count(&consumed, "Consumed"), 10_000, "{consumed}");
    assert!(consumed.contains("durable subscription ferromq-consumer"), "{consumed}");

    // Offline: the subscription keeps what is published meanwhile.
    let produced = run_producer_process(
        dir.path(),
        url,
        &["--messageCount", "500", "--destination", "topic://load.topic"],
    );
    assert_eq!(summary_count(&produced, "Produced"), 500, "{produced}");
    let mut args = vec!["consumer", "--brokerUrl", url, "--receiveTimeout", "10000"];
    args.extend_from_slice(&[&durable[..], &["--messageCount", "500"]].concat());
    let consumed = Process::start(dir.path(), "returning", &args).succeed(RUN_TIMEOUT);
    assert_eq!(summary_count(&consumed, "Consumed"), 500, "{consumed}");
}

/// Runs `ferromq ARGS...` expecting a quick failure; returns its stderr.
fn refused(dir: &Path, name: &str, args: &[&str]) -> String {
    refused_start(dir, name, args, REFUSE_TIMEOUT)
}

#[test]
fn bad_broker_urls_and_options_give_clear_errors() {
    let dir = temp_dir();
    let dir = dir.path();
    let mut stomp_only_broker: Option<(u16, Process)> = None;
    for command in ["producer", "consumer"] {
        let args =
            [command, "--brokerUrl", "ssl://localhost:61617", "--trustStore", "/no/such/ca.pem"];
        let stderr = refused(dir, "tls", &args);
        assert!(stderr.contains("cannot read the trust store /no/such/ca.pem"), "{stderr}");
        assert!(stderr.contains("ssl://localhost:61617"), "the error names the URL: {stderr}");

        let stderr = refused(dir, "auto", &[command, "--brokerUrl", "auto+ssl://localhost:5671"]);
        assert!(
            stderr.contains(
                "names a broker-side transport that detects the protocol; a client connects \
                 with a protocol: use tcp://host:61616 (OpenWire), stomp://host:61613 (STOMP) \
                 or amqp://host:5672 (AMQP), or over TLS ssl://host:61617, \
                 stomp+ssl://host:61612 or amqp+ssl://host:5671"
            ),
            "{stderr}"
        );
        // AMQP works, but without transactions: refused before connecting.
        let args = [command, "--brokerUrl", "amqp://127.0.0.1:1", "--transactionBatchSize", "5"];
        let stderr = refused(dir, "amqp-tx", &args);
        assert!(stderr.contains("a transaction batch size is not supported over AMQP"), "{stderr}");

        let mixed = "failover:(tcp://a:61616,stomp://b:61613)";
        let stderr = refused(dir, "failover-mixed", &[command, "--brokerUrl", mixed]);
        assert!(stderr.contains("the brokers of a failover URL speak one protocol"), "{stderr}");
        let amqp = "failover:(amqp://a:5672,amqp://b:5672)";
        let stderr = refused(dir, "failover-amqp", &[command, "--brokerUrl", amqp]);
        assert!(stderr.contains("failover: over AMQP is not implemented"), "{stderr}");
        // Nobody at either broker: the attempts allowed, then the last broker's error.
        let (a, b) = (free_port(), free_port());
        let nobody = format!(
            "failover:(tcp://127.0.0.1:{a},tcp://127.0.0.1:{b})?randomize=false&\
             initialReconnectDelay=10&maxReconnectAttempts=2"
        );
        let stderr = refused(dir, "failover-nobody", &[command, "--brokerUrl", &nobody]);
        assert!(stderr.contains(&format!("cannot connect to tcp://127.0.0.1:{b}")), "{stderr}");

        // Nothing listens there: the error names the URL and the reason, over either
        // protocol.
        for scheme in ["stomp", "tcp", "nio"] {
            let nobody = format!("{scheme}://127.0.0.1:{}", free_port());
            let stderr = refused(dir, "refused", &[command, "--brokerUrl", &nobody]);
            assert!(stderr.contains(&format!("cannot connect to {nobody}")), "{stderr}");
            assert!(stderr.to_lowercase().contains("refused"), "{stderr}");
        }

        // A STOMP port is not OpenWire: said at once, not a hang.
        let broker = stomp_only_broker.get_or_insert_with(|| {
            let port = free_port();
            let mut process = Process::start_broker(dir, "stomp-only", &dir.join("data"), port);
            process.wait_accepting(loopback(port));
            (port, process)
        });
        let wrong = format!("tcp://127.0.0.1:{}", broker.0);
        let stderr = refused(dir, "not-openwire", &[command, "--brokerUrl", &wrong]);
        assert!(stderr.contains("does not speak OpenWire"), "{stderr}");

        let stderr = refused(dir, "destination", &[command, "--destination", "queue://"]);
        assert!(stderr.contains("invalid destination `queue://`"), "{stderr}");
    }
    let stderr = refused(dir, "durable", &["consumer", "--durable", "true", "--clientId", "c"]);
    assert!(stderr.contains("needs a topic"), "{stderr}");
    let stderr = refused(dir, "ack", &["consumer", "--ackMode", "SOMETIMES"]);
    assert!(stderr.contains("AUTO_ACKNOWLEDGE"), "the error lists the modes: {stderr}");
}

#[test]
fn consumer_stops_on_receive_timeout_and_fails_over_stomp() {
    consumer_stops_on_receive_timeout_and_fails(Wire::Stomp);
}

#[test]
fn consumer_stops_on_receive_timeout_and_fails_over_openwire() {
    consumer_stops_on_receive_timeout_and_fails(Wire::OpenWire);
}

fn consumer_stops_on_receive_timeout_and_fails(wire: Wire) {
    let dir = temp_dir();
    let broker = start_broker(dir.path());
    let url = wire.url(&broker);
    run_producer_process(
        dir.path(),
        url,
        &["--messageCount", "3", "--destination", "queue://load.short"],
    );
    let mut consumer = Process::start(
        dir.path(),
        "consumer",
        &[
            "consumer",
            "--brokerUrl",
            url,
            "--destination",
            "queue://load.short",
            "--messageCount",
            "5",
            "--receiveTimeout",
            "300",
        ],
    );
    let status = consumer.wait_exit(RUN_TIMEOUT);
    assert!(!status.success(), "3 of 5 messages is a failure\n{}", consumer.output());
    let stdout = consumer.stdout();
    assert!(stdout.contains("Consumed 3 of 5 messages"), "{stdout}");
    assert!(consumer.stderr().contains("--receiveTimeout 300 ms"), "{}", consumer.output());
}

/// The library behind the commands, against an embedded broker: every acknowledgement mode
/// consumes exactly what was produced, and the reports say what they measured.
#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn load_api_runs_every_ack_mode() -> anyhow::Result<()> {
    let mut config = conf::Config::default();
    config.store.kind = conf::StoreKind::Memory;
    config.transport.connectors =
        vec!["stomp://127.0.0.1:0".parse()?, "tcp://127.0.0.1:0".parse()?];
    config.admin.bind = "127.0.0.1:0".to_owned();
    let broker = broker::Broker::start(config).await?;
    let stomp = broker.stomp_addr().expect("a STOMP connector");
    let openwire = broker.openwire_addr().expect("an OpenWire connector");
    for url in [format!("stomp://{stomp}"), format!("tcp://{openwire}")] {
        let url: client::load::BrokerUrl = url.parse()?;
        every_ack_mode_consumes_what_was_produced(&url).await?;
    }
    broker.shutdown().await;
    Ok(())
}

async fn every_ack_mode_consumes_what_was_produced(
    url: &client::load::BrokerUrl,
) -> anyhow::Result<()> {
    let modes = [
        (ConsumerAckMode::Auto, "gap between messages"),
        (ConsumerAckMode::Client, "ack latency"),
        (ConsumerAckMode::ClientIndividual, "ack latency"),
    ];
    for (mode, measured) in modes {
        let name = format!("load.api.{:?}.{}", url.protocol(), mode.activemq_name());
        let destination = DestinationName::queue(name.as_str());
        let produced = run_producer(ProducerOptions {
            broker: url.clone(),
            destination: destination.clone(),
            message_count: 250,
            parallel_threads: 2,
            persistent: false,
            ..ProducerOptions::default()
        })
        .await?;
        assert_eq!((produced.messages, produced.per_thread.clone()), (500, vec![250, 250]));
        // Non-persistent sends are not waited for: nothing to measure.
        assert_eq!(produced.latency, None, "{produced}");
        let consumed = run_consumer(ConsumerOptions {
            broker: url.clone(),
            destination,
            message_count: 125,
            parallel_threads: 4,
            ack_mode: mode,
            ack_batch_size: 7,
            receive_timeout: Duration::from_secs(30),
            ..ConsumerOptions::default()
        })
        .await?;
        assert_eq!(consumed.messages, 500, "{mode:?}: {consumed}");
        assert_eq!(consumed.per_thread, vec![125; 4], "{mode:?}: {consumed}");
        assert!(consumed.is_complete());
        assert_eq!(consumed.latency.map(|l| l.what), Some(measured), "{consumed}");
        // Nothing is left behind: every counted message was acknowledged, every extra one
        // returned to the queue and taken by another thread.
        let rest = run_consumer(ConsumerOptions {
            broker: url.clone(),
            destination: DestinationName::queue(name.as_str()),
            message_count: 1,
            receive_timeout: Duration::from_millis(200),
            ..ConsumerOptions::default()
        })
        .await?;
        assert_eq!(rest.messages, 0, "{mode:?}: left over: {rest}");
    }
    Ok(())
}

/// `ferromq producer` and `ferromq consumer` over OpenWire against a real Apache ActiveMQ
/// 5.17 (Debian's package, started by the `tests` crate's launcher): a queue, transactions
/// on both sides, client acknowledgement, and a durable topic subscriber that comes back.
#[test]
fn producer_and_consumer_work_against_apache_activemq() {
    let Some(activemq) = activemq::ActiveMq::start().expect("starting Apache ActiveMQ") else {
        return;
    };
    let dir = temp_dir();
    let url = activemq.url();
    let scenarios: [&[&str]; 2] = [
        &["--messageCount", "2000", "--destination", "queue://ferromq.cli.queue"],
        &[
            "--messageCount",
            "1050",
            "--transactionBatchSize",
            "100",
            "--destination",
            "queue://ferromq.cli.transacted",
        ],
    ];
    for common in scenarios {
        let mut consumer = start_consumer(dir.path(), &url, 1, common);
        let produced = run_producer_process(dir.path(), &url, common);
        let consumed = consumer.succeed(RUN_TIMEOUT);
        let expected = common[1].parse::<u64>().expect("a count");
        assert_eq!(summary_count(&produced, "Produced"), expected, "{produced}");
        assert_eq!(
            summary_count(&consumed, "Consumed"),
            expected,
            "{consumed}\n{}",
            activemq.log()
        );
    }
    // Client acknowledgement in batches of 7, then nothing is left on the queue.
    let client_ack = ["--messageCount", "100", "--destination", "queue://ferromq.cli.client"];
    run_producer_process(dir.path(), &url, &client_ack);
    let mut consumer = start_consumer(
        dir.path(),
        &url,
        1,
        &[&client_ack[..], &["--ackMode", "CLIENT_ACKNOWLEDGE", "--batchSize", "7"]].concat(),
    );
    assert_eq!(summary_count(&consumer.succeed(RUN_TIMEOUT), "Consumed"), 100);
    let mut args = vec!["consumer", "--brokerUrl", &url, "--receiveTimeout", "500"];
    args.extend_from_slice(&["--destination", "queue://ferromq.cli.client", "--messageCount", "1"]);
    let mut rest = Process::start(dir.path(), "rest", &args);
    assert!(!rest.wait_exit(RUN_TIMEOUT).success(), "nothing should be left");
    assert!(rest.stdout().contains("Consumed 0 of 1 messages"), "{}", rest.output());

    // A durable subscriber online, then offline while messages are published.
    let durable = [
        "--durable",
        "true",
        "--clientId",
        "ferromq-cli",
        "--destination",
        "topic://ferromq.cli.topic",
    ];
    let mut consumer =
        start_consumer(dir.path(), &url, 1, &[&durable[..], &["--messageCount", "500"]].concat());
    let topic = ["--messageCount", "500", "--destination", "topic://ferromq.cli.topic"];
    run_producer_process(dir.path(), &url, &topic);
    assert_eq!(summary_count(&consumer.succeed(RUN_TIMEOUT), "Consumed"), 500);
    let offline = ["--messageCount", "50", "--destination", "topic://ferromq.cli.topic"];
    run_producer_process(dir.path(), &url, &offline);
    let mut consumer =
        start_consumer(dir.path(), &url, 1, &[&durable[..], &["--messageCount", "50"]].concat());
    assert_eq!(summary_count(&consumer.succeed(RUN_TIMEOUT), "Consumed"), 50);
}

/// `ferromq producer` and `ferromq consumer` over `mqtt://`: a topic (`topic://load.mqtt`,
/// the MQTT topic `load/mqtt`) between two MQTT tools, then from the MQTT producer to a
/// STOMP consumer; queues and transactions are refused with the reason.
#[test]
fn producer_and_consumer_exchange_messages_over_mqtt_and_with_stomp() {
    let dir = temp_dir();
    let (mqtt, stomp) = (free_port(), free_port());
    let mqtt_url = format!("mqtt://127.0.0.1:{mqtt}");
    let stomp_url = format!("stomp://127.0.0.1:{stomp}");
    let data = dir.path().join("data");
    let args = [
        "start",
        "--connector",
        &mqtt_url,
        "--connector",
        &stomp_url,
        "--data-dir",
        common::path_str(&data),
        "--admin-bind",
        "127.0.0.1:0",
    ];
    let mut broker = Process::start(dir.path(), "broker", &args);
    broker.wait_accepting(loopback(mqtt));
    broker.wait_accepting(loopback(stomp));

    let common = ["--messageCount", "2000", "--destination", "topic://load.mqtt"];
    for consumer_url in [&mqtt_url, &stomp_url] {
        let mut consumer = start_consumer(dir.path(), consumer_url, 1, &common);
        let produced = run_producer_process(dir.path(), &mqtt_url, &common);
        assert_eq!(summary_count(&produced, "Produced"), 2000, "{produced}");
        assert!(produced.contains("producer-1: produced 2000 messages"), "{produced}");
        let consumed = consumer.succeed(RUN_TIMEOUT);
        assert_eq!(summary_count(&consumed, "Consumed"), 2000, "{consumed}");
    }

    for command in ["producer", "consumer"] {
        let stderr = refused(
            dir.path(),
            "queue",
            &[command, "--brokerUrl", &mqtt_url, "--destination", "queue://q"],
        );
        assert!(stderr.contains("MQTT") && stderr.contains("topics only"), "{stderr}");
        let stderr = refused(
            dir.path(),
            "transacted",
            &[
                command,
                "--brokerUrl",
                &mqtt_url,
                "--destination",
                "topic://t",
                "--transactionBatchSize",
                "10",
            ],
        );
        assert!(stderr.contains("not supported over MQTT"), "{stderr}");
    }
}
