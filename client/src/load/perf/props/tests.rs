//! The properties parsing: seed 000's files, defaults, unknown and missing keys, overrides.

use super::*;

/// Seed 000's `openwire-producer.properties`, verbatim but for the broker URL.
const SEED_PRODUCER: &str = include_str!("seed000/openwire-producer.properties");

/// Seed 000's `openwire-consumer.properties`, verbatim but for the broker URL.
const SEED_CONSUMER: &str = include_str!("seed000/openwire-consumer.properties");

fn parse(role: PerfRole, text: &str, overrides: &[&str]) -> Result<PerfSettings, PropsError> {
    let overrides: Vec<String> = overrides.iter().map(|s| (*s).to_owned()).collect();
    PerfSettings::parse(role, Some(("test.properties", text)), &overrides)
}

fn error(role: PerfRole, text: &str, overrides: &[&str]) -> String {
    match parse(role, text, overrides) {
        Ok(settings) => panic!("should be refused, parsed as {settings:?}"),
        Err(error) => error.to_string(),
    }
}

#[test]
fn seed_producer_file_parses_with_the_plugin_defaults() {
    let s = parse(PerfRole::Producer, SEED_PRODUCER, &[]).expect("seed producer");
    assert_eq!(s.report_dir, PathBuf::from("./reports/"));
    assert_eq!(s.client_prefix, "JmsProducer");
    assert_eq!(s.num_clients, 25);
    assert_eq!(s.total_dests, 1);
    assert_eq!(s.dest_distro, DestDistro::All);
    assert_eq!(s.dest_name, DestinationName::queue("PERF.TEST"));
    assert!(s.persistent);
    assert_eq!(s.message_size, 1024);
    assert_eq!(s.basis, RunBasis::Time(Duration::from_secs(300)));
    assert_eq!((s.user.as_deref(), s.password.as_deref()), (None, None));
    assert_eq!(s.broker.to_string(), "tcp://127.0.0.1:61616");
    assert_eq!(s.protocol(), WireProtocol::OpenWire);
    assert_eq!(s.sampler.interval, Duration::from_millis(1000));
    assert_eq!(s.ramps(Duration::from_secs(300)), (Duration::ZERO, Duration::ZERO));
    assert!(!s.use_async_send && !s.sess_transacted);
    assert_eq!(s.commit_after, 1);
    assert_eq!(s.report_name(), "JmsProducer_numClients25_numDests1_all");
    assert_eq!(s.client_name(13), "JmsProducer13");
    assert!(s.warnings.is_empty(), "{:?}", s.warnings);
}

#[test]
fn seed_consumer_file_parses_with_the_plugin_defaults() {
    let s = parse(PerfRole::Consumer, SEED_CONSUMER, &[]).expect("seed consumer");
    assert_eq!(s.client_prefix, "JmsConsumer");
    assert_eq!(s.num_clients, 25);
    assert_eq!(s.dest_distro, DestDistro::Equal);
    assert_eq!(s.dest_name, DestinationName::queue("PERF.TEST"));
    assert_eq!(s.basis, RunBasis::Time(Duration::from_secs(300)));
    assert_eq!(s.ack_mode, SessAckMode::Auto);
    assert!(!s.durable && s.unsubscribe);
    assert_eq!(s.report_name(), "JmsConsumer_numClients25_numDests1_equal");
    // One destination: every client uses it, whatever the distribution.
    assert_eq!(s.client_destinations(24), vec![DestinationName::queue("PERF.TEST")]);
}

#[test]
fn defaults_without_a_file_are_the_plugins() {
    let s = PerfSettings::parse(PerfRole::Producer, None, &["factory.brokerURL=tcp://h".into()])
        .expect("defaults");
    assert_eq!(s.client_prefix, "JmsProducer");
    assert_eq!(s.num_clients, 1);
    // A bare destination name is a topic in the plugin; its default is TEST.FOO.
    assert_eq!(s.dest_name, DestinationName::topic("TEST.FOO"));
    assert!(!s.persistent, "the plugin's default delivery mode is nonpersistent");
    assert_eq!(s.message_size, 1024);
    assert_eq!(s.basis, RunBasis::Time(Duration::from_secs(300)));
    assert_eq!(s.report_dir, PathBuf::from("./"));
    assert!(s.cpu_sampler && s.throughput_sampler, "the plugin's default samplers are tp,cpu");
    assert!(s.warnings.is_empty(), "{:?}", s.warnings);
}

#[test]
fn java_properties_syntax_is_understood() {
    let text = "# comment\n! also a comment\n  sysTest.numClients : 3\n\
                sysTest.clientPrefix Perf\\u0041\nproducer.destName=queue://A\\\n    .B\n\
                factory.brokerURL=tcp://h:1\n\n";
    let s = parse(PerfRole::Producer, text, &[]).expect("parses");
    assert_eq!(s.num_clients, 3);
    assert_eq!(s.client_prefix, "PerfA");
    assert_eq!(s.dest_name, DestinationName::queue("A.B"));
}

#[test]
fn unknown_keys_are_errors_naming_the_key_and_line() {
    let text = format!("{SEED_PRODUCER}producer.sendDurration=5\n");
    let message = error(PerfRole::Producer, &text, &[]);
    assert!(message.contains("producer.sendDurration"), "{message}");
    assert!(message.contains("test.properties:13"), "{message}");
    let message = error(PerfRole::Producer, "sysTest.numclients=2\n", &[]);
    assert!(message.contains("did you mean sysTest.numClients"), "{message}");
    let message = error(PerfRole::Producer, "producer.durable=true\n", &[]);
    assert!(
        message.contains("producer.durable") && message.contains("consumer.durable"),
        "{message}"
    );
    let message = error(PerfRole::Producer, "colour=blue\n", &[]);
    assert!(message.contains("unknown key `colour`"), "{message}");
}

#[test]
fn factory_bean_properties_are_accepted_with_a_warning_naming_them() {
    let text =
        format!("{SEED_PRODUCER}factory.optimizeAcknowledge=true\nfactory.dispatchAsync=false\n");
    let s = parse(PerfRole::Producer, &text, &[]).expect("accepted");
    let warning = s.warnings.iter().find(|w| w.contains("factory.optimizeAcknowledge"));
    let warning = warning.unwrap_or_else(|| panic!("no warning: {:?}", s.warnings));
    assert!(warning.contains("factory.dispatchAsync"), "{warning}");
}

#[test]
fn implemented_elsewhere_keys_are_refused_by_name() {
    let message =
        error(PerfRole::Producer, &format!("{SEED_PRODUCER}producer.header=JMSType=car\n"), &[]);
    assert!(message.contains("`producer.header` is not implemented"), "{message}");
}

#[test]
fn missing_and_empty_broker_urls_are_named() {
    let message = error(PerfRole::Producer, "sysTest.numClients=2\n", &[]);
    assert!(
        message.contains("`factory.brokerURL` is required") && message.contains("not given"),
        "{message}"
    );
    let seed_as_printed = SEED_PRODUCER.replace("tcp://127.0.0.1:61616", "");
    let message = error(PerfRole::Producer, &seed_as_printed, &[]);
    assert!(message.contains("factory.brokerURL") && message.contains("empty"), "{message}");
    // The command line can supply it.
    let s = parse(PerfRole::Producer, &seed_as_printed, &["factory.brokerURL=stomp://h:1"])
        .expect("overridden");
    assert_eq!(s.protocol(), WireProtocol::Stomp);
}

#[test]
fn bad_values_name_key_and_value() {
    let message =
        error(PerfRole::Producer, &format!("{SEED_PRODUCER}sysTest.numClients=many\n"), &[]);
    assert!(message.contains("`many`") && message.contains("sysTest.numClients"), "{message}");
    let message = error(
        PerfRole::Producer,
        &format!("{SEED_PRODUCER}producer.deliveryMode=sometimes\n"),
        &[],
    );
    assert!(message.contains("persistent or nonpersistent"), "{message}");
    let message =
        error(PerfRole::Consumer, &format!("{SEED_CONSUMER}sysTest.destDistro=random\n"), &[]);
    assert!(message.contains("all, equal or divide"), "{message}");
    let message = error(
        PerfRole::Producer,
        "factory.brokerURL=failover:(ssl://a:61617,stomp://b:61613)\n",
        &[],
    );
    assert!(message.contains("speak one protocol"), "{message}");
    let message = error(
        PerfRole::Producer,
        "factory.brokerURL=failover:(ssl://a:61617,ssl://b:61617)?randomise=false\n",
        &[],
    );
    assert!(message.contains("unknown failover option `randomise`"), "{message}");
    let message = error(
        PerfRole::Producer,
        "factory.brokerURL=mqtt://h:1883\nproducer.sessTransacted=true\n",
        &[],
    );
    assert!(message.contains("over MQTT"), "{message}");
    let message = error(
        PerfRole::Producer,
        &format!("{SEED_PRODUCER}sampler.rampUpTime=200000\nsampler.rampDownTime=200000\n"),
        &[],
    );
    assert!(message.contains("ramp times"), "{message}");
}

#[test]
fn command_line_overrides_win() {
    let s = parse(
        PerfRole::Producer,
        SEED_PRODUCER,
        &["sysTest.numClients=2", "producer.sendType=count", "producer.sendCount=500"],
    )
    .expect("overrides");
    assert_eq!(s.num_clients, 2);
    assert_eq!(s.basis, RunBasis::Count(500));
    assert!(s.given.contains(&("sysTest.numClients".into(), "2".into())));
    let message = error(PerfRole::Producer, SEED_PRODUCER, &["numClients"]);
    assert!(message.contains("expected KEY=VALUE"), "{message}");
    let message = error(PerfRole::Producer, SEED_PRODUCER, &["sysTest.bogus=1"]);
    assert!(
        message.contains("--set sysTest.bogus=1") && message.contains("sysTest.bogus"),
        "{message}"
    );
}

#[test]
fn a_count_alone_means_a_count_with_a_warning() {
    let s = parse(PerfRole::Consumer, &format!("{SEED_CONSUMER}consumer.recvCount=10\n"), &[])
        .expect("count");
    assert_eq!(s.basis, RunBasis::Count(10));
    assert!(s.warnings.iter().any(|w| w.contains("consumer.recvType")), "{:?}", s.warnings);
    let timed = parse(
        PerfRole::Consumer,
        &format!("{SEED_CONSUMER}consumer.recvCount=10\nconsumer.recvType=time\n"),
        &[],
    )
    .expect("time");
    assert_eq!(timed.basis, RunBasis::Time(Duration::from_secs(300)));
}

#[test]
fn ramps_default_to_percentages_of_the_duration() {
    let s = parse(
        PerfRole::Producer,
        SEED_PRODUCER,
        &["tpSampler.rampUpPercent=10", "sampler.rampDownTime=5000"],
    )
    .expect("ramps");
    assert_eq!(
        s.ramps(Duration::from_secs(300)),
        (Duration::from_secs(30), Duration::from_secs(5))
    );
}

#[test]
fn destinations_are_distributed_as_the_plugin_does() {
    // 2 clients, 5 destinations.
    assert_eq!(DestDistro::All.range(1, 2, 5), (0, 5));
    assert_eq!(DestDistro::Equal.range(0, 2, 5), (0, 2));
    assert_eq!(DestDistro::Equal.range(1, 2, 5), (2, 2));
    assert_eq!(DestDistro::Divide.range(0, 2, 5), (0, 3));
    assert_eq!(DestDistro::Divide.range(1, 2, 5), (3, 2));
    // More clients than destinations: one each, shared round-robin.
    assert_eq!(DestDistro::Equal.range(4, 5, 2), (0, 1));
    assert_eq!(DestDistro::Divide.range(3, 5, 2), (1, 1));
    let s = parse(
        PerfRole::Producer,
        SEED_PRODUCER,
        &["sysTest.totalDests=4", "sysTest.destDistro=equal", "sysTest.numClients=2"],
    )
    .expect("dests");
    assert_eq!(
        s.client_destinations(1),
        vec![DestinationName::queue("PERF.TEST.2"), DestinationName::queue("PERF.TEST.3")]
    );
}

#[test]
fn durable_consumers_need_a_topic() {
    let message =
        error(PerfRole::Consumer, &format!("{SEED_CONSUMER}consumer.durable=true\n"), &[]);
    assert!(message.contains("needs a topic"), "{message}");
    let s = parse(
        PerfRole::Consumer,
        &format!("{SEED_CONSUMER}consumer.durable=true\nconsumer.destName=PRICES\n"),
        &[],
    )
    .expect("durable topic");
    assert_eq!(s.dest_name, DestinationName::topic("PRICES"));
}

#[test]
fn amqp_runs_refuse_what_the_amqp_client_lacks_by_key() {
    let url = "factory.brokerURL=amqp://127.0.0.1:5672".to_owned();
    let producer =
        PerfSettings::parse(PerfRole::Producer, None, std::slice::from_ref(&url)).expect("amqp");
    assert_eq!(producer.protocol(), WireProtocol::Amqp);
    let file = "factory.brokerURL=amqp://h\nproducer.sessTransacted=true\n";
    let error = PerfSettings::parse(PerfRole::Producer, Some(("p.properties", file)), &[])
        .expect_err("transacted over AMQP")
        .to_string();
    assert!(error.starts_with("p.properties:2: `producer.sessTransacted`"), "{error}");
    assert!(error.contains("no transactions"), "{error}");
    let error = PerfSettings::parse(
        PerfRole::Consumer,
        None,
        &[url.clone(), "consumer.sessAckMode=transacted".into()],
    )
    .expect_err("transacted ack mode over AMQP")
    .to_string();
    assert!(error.contains("`consumer.sessAckMode`"), "{error}");
    // clientAck maps onto accept: allowed.
    PerfSettings::parse(PerfRole::Consumer, None, &[url, "consumer.sessAckMode=clientAck".into()])
        .expect("clientAck over AMQP");
}

#[test]
fn seed_000s_ssl_url_takes_the_trust_store_of_factory_trust_store() -> Result<(), PropsError> {
    let settings = parse(
        PerfRole::Producer,
        "factory.brokerURL=ssl://broker-1:61617\nfactory.trustStore=/etc/ferromq/ca.pem\n",
        &[],
    )?;
    assert!(settings.broker.uses_tls());
    assert_eq!(settings.broker.port(), 61617);
    assert_eq!(settings.broker.trust_store(), Some(std::path::Path::new("/etc/ferromq/ca.pem")));
    Ok(())
}

#[test]
fn a_failover_broker_url_keeps_its_brokers_options_and_trust_store() -> Result<(), PropsError> {
    let settings = parse(
        PerfRole::Consumer,
        &format!(
            "{SEED_CONSUMER}factory.brokerURL=failover:(ssl://broker-1:61617,ssl://broker-2:61617)\
             ?randomize=false&maxReconnectAttempts=5\nfactory.trustStore=/etc/ferromq/ca.pem\n"
        ),
        &[],
    )?;
    let hosts: Vec<&str> = settings.broker.endpoints().iter().map(|e| e.host()).collect();
    assert_eq!(hosts, ["broker-1", "broker-2"]);
    let failover = settings.broker.failover().expect("failover options");
    assert!(!failover.randomize);
    assert_eq!(failover.max_reconnect_attempts, Some(5));
    assert_eq!(settings.broker.trust_store(), Some(std::path::Path::new("/etc/ferromq/ca.pem")));
    Ok(())
}
