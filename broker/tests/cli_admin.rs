//! `ferromq browse`, `ferromq purge` and `ferromq query` against a running `ferromq start`
//! (OpenWire and STOMP on ports the kernel picks, the admin endpoint too, learnt from the
//! broker's readiness line), its queues filled by `ferromq producer` over OpenWire: what each
//! prints, and what it did to the queues (read back with `query`, `browse` and
//! `ferromq consumer`). Then the same commands on a broker that checks logins: refused
//! without credentials (401) and for a user outside `[admin] groups` (403).

mod common;

use std::net::SocketAddr;
use std::path::Path;
use std::time::Duration;

use common::{path_str, temp_dir, Process};

/// How long one command may take (debug builds on two shared cores).
const COMMAND_TIMEOUT: Duration = Duration::from_secs(60);

/// A `ferromq start` with OpenWire and STOMP connectors and its admin endpoint, all on ports
/// the kernel picked.
struct RunningBroker {
    process: Process,
    openwire: SocketAddr,
    admin: SocketAddr,
}

impl RunningBroker {
    fn start(dir: &Path, config: Option<&Path>) -> RunningBroker {
        let data = dir.join("data");
        let mut args = vec!["start"];
        if let Some(config) = config {
            args.extend(["--config", path_str(config)]);
        }
        args.extend([
            "--connector",
            "tcp://127.0.0.1:0",
            "--connector",
            "stomp://127.0.0.1:0",
            "--data-dir",
            path_str(&data),
            "--admin-bind",
            "127.0.0.1:0",
        ]);
        let mut process = Process::start(dir, "broker", &args);
        let ready = process.wait_ready();
        let admin = ready.admin.expect("the admin endpoint is on");
        RunningBroker { openwire: ready.addr("tcp"), admin, process }
    }

    fn url(&self) -> String {
        format!("http://{}", self.admin)
    }
}

/// Runs `ferromq ARGS` to success; its stdout.
fn ferromq(dir: &Path, name: &str, args: &[&str]) -> String {
    Process::start(dir, name, args).succeed(COMMAND_TIMEOUT)
}

/// Runs `ferromq ARGS` expecting a failure; its stderr.
fn ferromq_fails(dir: &Path, name: &str, args: &[&str]) -> String {
    common::refused_start(dir, name, args, COMMAND_TIMEOUT)
}

/// `ferromq producer`: `count` messages of `text` to `queue`, in group `group`.
fn produce(
    dir: &Path,
    broker: &RunningBroker,
    queue: &str,
    count: u64,
    text: &str,
    persistent: bool,
) {
    let url = format!("tcp://{}", broker.openwire);
    let destination = format!("queue://{queue}");
    let count = count.to_string();
    let persistent = persistent.to_string();
    let args = [
        "producer",
        "--brokerUrl",
        &url,
        "--destination",
        &destination,
        "--messageCount",
        &count,
        "--message",
        text,
        "--persistent",
        &persistent,
        "--msgGroupID",
        text,
    ];
    let name = format!("producer-{queue}-{text}");
    ferromq(dir, &name, &args);
}

/// `name = value` attribute lines of `query`'s output, per object (blank-line separated).
fn objects(output: &str) -> Vec<Vec<(String, String)>> {
    output
        .split("\n\n")
        .filter(|block| !block.trim().is_empty())
        .map(|block| {
            block
                .lines()
                .filter_map(|line| line.split_once(" = "))
                .map(|(name, value)| (name.to_owned(), value.to_owned()))
                .collect()
        })
        .collect()
}

fn attribute<'a>(object: &'a [(String, String)], name: &str) -> Option<&'a str> {
    object.iter().find(|(n, _)| n == name).map(|(_, v)| v.as_str())
}

/// The `QueueSize` `query` reports for `queue`.
fn queue_size(dir: &Path, broker: &RunningBroker, queue: &str) -> u64 {
    let url = broker.url();
    let filter = format!("-QQueue={queue}");
    let output =
        ferromq(dir, "query-size", &["query", "--url", &url, &filter, "--view", "QueueSize"]);
    let found = objects(&output);
    assert_eq!(found.len(), 1, "one queue {queue}:\n{output}");
    attribute(&found[0], "QueueSize")
        .and_then(|size| size.parse().ok())
        .unwrap_or_else(|| panic!("no QueueSize for {queue}:\n{output}"))
}

#[test]
fn browse_purge_and_query_work_on_a_running_broker() {
    let dir = temp_dir();
    let broker = RunningBroker::start(dir.path(), None);
    let url = broker.url();
    produce(dir.path(), &broker, "cli.orders", 3, "red", true);
    produce(dir.path(), &broker, "cli.orders", 2, "blue", false);
    produce(dir.path(), &broker, "cli.other", 4, "green", true);
    produce(dir.path(), &broker, "cli.keep", 1, "kept", true);

    // browse: every field of every message, in ActiveMQ's groups.
    let all = ferromq(dir.path(), "browse", &["browse", "--url", &url, "cli.orders"]);
    assert_eq!(all.matches("JMS_BODY_FIELD:JMSText = red\n").count(), 3, "{all}");
    assert_eq!(all.matches("JMS_BODY_FIELD:JMSText = blue\n").count(), 2, "{all}");
    assert_eq!(all.matches("JMS_HEADER_FIELD:JMSDestination = cli.orders\n").count(), 5, "{all}");
    assert_eq!(all.matches("JMS_HEADER_FIELD:JMSDeliveryMode = non-persistent\n").count(), 2);
    assert_eq!(all.matches("JMS_HEADER_FIELD:JMSXGroupID = red\n").count(), 3, "{all}");
    assert_eq!(all.matches("JMS_HEADER_FIELD:JMSMessageID = ID:").count(), 5, "{all}");
    // In delivery order: the red ones were sent first.
    let first_blue = all.find("JMSText = blue").expect("a blue message");
    assert!(all.rfind("JMSText = red").is_some_and(|last_red| last_red < first_blue), "{all}");

    // -Vbody: the bodies alone; --view: one header beside them.
    let bodies = ferromq(
        dir.path(),
        "browse-body",
        &["browse", "--url", &url, "-Vbody", "queue:cli.orders"],
    );
    let lines: Vec<&str> = bodies.lines().filter(|line| !line.is_empty()).collect();
    assert_eq!(lines.len(), 5, "{bodies}");
    assert!(lines.iter().all(|line| line.starts_with("JMS_BODY_FIELD:JMSText = ")), "{bodies}");
    let view = ["browse", "--url", &url, "-Vbody", "--view", "header:JMSPriority", "cli.orders"];
    let with_priority = ferromq(dir.path(), "browse-view", &view);
    assert_eq!(with_priority.matches("JMS_HEADER_FIELD:JMSPriority = 4\n").count(), 5);
    assert!(!with_priority.contains("JMSMessageID"), "{with_priority}");

    // --msgsel: ActiveMQ's condition lists, wildcards included.
    let selected = [
        "browse",
        "--url",
        &url,
        "--msgsel",
        "JMSDeliveryMode='PERSISTENT',JMSXGroupID='r*'",
        "cli.orders",
    ];
    let red = ferromq(dir.path(), "browse-msgsel", &selected);
    assert_eq!(red.matches("JMSText = red\n").count(), 3, "{red}");
    assert!(!red.contains("blue"), "{red}");

    // A queue that does not exist, or a bad selector: a clear failure.
    let missing =
        ferromq_fails(dir.path(), "browse-missing", &["browse", "--url", &url, "cli.none"]);
    assert!(missing.contains("cli.none") && missing.contains("404"), "{missing}");
    let bad = ["browse", "--url", &url, "--msgsel", "JMSPriority >", "cli.orders"];
    let refused = ferromq_fails(dir.path(), "browse-bad-selector", &bad);
    assert!(refused.contains("400"), "{refused}");

    // query: queues by name and wildcard, some left out, attributes chosen.
    let queues = ["query", "--url", &url, "-QQueue=cli.*", "-xQQueue=cli.keep"];
    let output = ferromq(dir.path(), "query-queues", &queues);
    let found = objects(&output);
    let names: Vec<&str> =
        found.iter().filter_map(|object| attribute(object, "destinationName")).collect();
    assert_eq!(names, ["cli.orders", "cli.other"], "{output}");
    assert_eq!(attribute(&found[0], "QueueSize"), Some("5"), "{output}");
    assert_eq!(attribute(&found[0], "EnqueueCount"), Some("5"), "{output}");
    assert_eq!(attribute(&found[0], "destinationType"), Some("Queue"), "{output}");
    let viewed =
        ["query", "--url", &url, "-QQueue=cli.other", "--view", "EnqueueCount,DequeueCount"];
    let output = ferromq(dir.path(), "query-view", &viewed);
    assert_eq!(output.trim(), "EnqueueCount = 4\nDequeueCount = 0", "{output}");
    let objname = [
        "query",
        "--url",
        &url,
        "--objname",
        "type=Broker,destinationType=Queue,destinationName=cli.k*",
        "--view",
        "destinationName",
    ];
    let output = ferromq(dir.path(), "query-objname", &objname);
    assert_eq!(output.trim(), "destinationName = cli.keep", "{output}");
    let output = ferromq(dir.path(), "query-broker", &["query", "--url", &url, "-QBroker=*"]);
    let found = objects(&output);
    assert_eq!(found.len(), 1, "{output}");
    assert!(attribute(&found[0], "BrokerName").is_some(), "{output}");
    assert_eq!(attribute(&found[0], "TotalMessageCount"), Some("10"), "{output}");
    let unknown =
        ferromq_fails(dir.path(), "query-unknown", &["query", "--url", &url, "-QTable=x"]);
    assert!(unknown.contains("unknown object type `Table`"), "{unknown}");

    // purge --msgsel: only the matching messages go.
    let purge =
        ["purge", "--url", &url, "--msgsel", "JMSDeliveryMode='NON_PERSISTENT'", "cli.orders"];
    let output = ferromq(dir.path(), "purge-msgsel", &purge);
    assert!(output.contains("Purged 2 messages"), "{output}");
    assert_eq!(queue_size(dir.path(), &broker, "cli.orders"), 3);
    let left =
        ferromq(dir.path(), "browse-left", &["browse", "--url", &url, "-Vbody", "cli.orders"]);
    assert_eq!(left.matches("JMSText = red\n").count(), 3, "{left}");
    assert!(!left.contains("blue"), "{left}");

    // purge with a wildcard: cli.orders and cli.other, not cli.keep.
    let output = ferromq(dir.path(), "purge-wildcard", &["purge", "--url", &url, "cli.o*"]);
    assert!(output.contains("Purged 3 messages from queue cli.orders"), "{output}");
    assert!(output.contains("Purged 4 messages from queue cli.other"), "{output}");
    assert_eq!(queue_size(dir.path(), &broker, "cli.orders"), 0);
    assert_eq!(queue_size(dir.path(), &broker, "cli.other"), 0);
    assert_eq!(queue_size(dir.path(), &broker, "cli.keep"), 1);
    let missing = ferromq_fails(dir.path(), "purge-missing", &["purge", "--url", &url, "cli.none"]);
    assert!(missing.contains("no such queue: cli.none"), "{missing}");

    // The kept message is still there for a consumer.
    let openwire = format!("tcp://{}", broker.openwire);
    let consume = [
        "consumer",
        "--brokerUrl",
        &openwire,
        "--destination",
        "queue://cli.keep",
        "--messageCount",
        "1",
        "--receiveTimeout",
        "30000",
    ];
    ferromq(dir.path(), "consumer", &consume);
    assert_eq!(queue_size(dir.path(), &broker, "cli.keep"), 0);

    let mut process = broker.process;
    process.stop();
}

#[test]
fn query_lists_connections_consumers_and_durable_subscriptions() {
    let dir = temp_dir();
    let broker = RunningBroker::start(dir.path(), None);
    let url = broker.url();
    let openwire = format!("tcp://{}", broker.openwire);
    // A durable subscriber that takes one message and leaves: its subscription stays, offline.
    let durable = [
        "consumer",
        "--brokerUrl",
        &openwire,
        "--destination",
        "topic://cli.news",
        "--durable",
        "true",
        "--clientId",
        "cli-client",
        "--subscriptionName",
        "news",
        "--messageCount",
        "1",
        "--receiveTimeout",
        "120000",
    ];
    let mut subscriber = Process::start(dir.path(), "durable", &durable);
    subscriber.wait_for_lines("subscribed", 1);
    let publish = [
        "producer",
        "--brokerUrl",
        &openwire,
        "--destination",
        "topic://cli.news",
        "--messageCount",
        "1",
    ];
    ferromq(dir.path(), "publisher", &publish);
    subscriber.succeed(COMMAND_TIMEOUT);
    // A queue consumer that stays connected while the queries run.
    let consume = [
        "consumer",
        "--brokerUrl",
        &openwire,
        "--destination",
        "queue://cli.watched",
        "--messageCount",
        "1",
        "--receiveTimeout",
        "120000",
    ];
    let mut consumer = Process::start(dir.path(), "consumer", &consume);
    consumer.wait_for_lines("subscribed", 1);

    let output = ferromq(dir.path(), "query-consumers", &["query", "--url", &url, "-QConsumer=*"]);
    let found = objects(&output);
    let watched = found
        .iter()
        .find(|object| attribute(object, "destinationName") == Some("cli.watched"))
        .unwrap_or_else(|| panic!("no consumer of cli.watched:\n{output}"));
    assert_eq!(attribute(watched, "destinationType"), Some("Queue"), "{output}");
    assert!(attribute(watched, "PrefetchSize").is_some_and(|p| p != "0"), "{output}");
    let query = ["query", "--url", &url, "-QSubscription=news"];
    let output = ferromq(dir.path(), "query-subscriptions", &query);
    let found = objects(&output);
    assert_eq!(found.len(), 1, "{output}");
    assert_eq!(attribute(&found[0], "ClientId"), Some("cli-client"), "{output}");
    assert_eq!(attribute(&found[0], "DestinationName"), Some("cli.news"), "{output}");
    assert_eq!(attribute(&found[0], "Active"), Some("false"), "{output}");
    assert_eq!(attribute(&found[0], "PendingQueueSize"), Some("0"), "{output}");
    let query = ["query", "--url", &url, "-QConnection=*", "--view", "Protocol,ConsumerCount"];
    let output = ferromq(dir.path(), "query-connections", &query);
    let found = objects(&output);
    assert!(
        found.iter().any(|object| attribute(object, "Protocol") == Some("openwire")
            && attribute(object, "ConsumerCount") == Some("1")),
        "the consumer's connection:\n{output}"
    );
    // Everything: the broker, the destinations, the subscription and the consumer.
    let everything = ferromq(dir.path(), "query-all", &["query", "--url", &url]);
    let found = objects(&everything);
    assert!(found.iter().any(|o| attribute(o, "BrokerName").is_some()), "{everything}");
    assert!(found.iter().any(|o| attribute(o, "SubscriptionName") == Some("news")));
    assert!(found.iter().any(|o| attribute(o, "ConsumerId").is_some()), "{everything}");

    produce(dir.path(), &broker, "cli.watched", 1, "done", true);
    consumer.succeed(COMMAND_TIMEOUT);
    let mut process = broker.process;
    process.stop();
}

/// With `[authentication]` on, the commands need a user of `[admin] groups`.
#[test]
fn the_commands_log_in_as_an_admin_user() {
    let dir = temp_dir();
    let root = run_ferromq_passwd(dir.path(), "secret");
    let app = run_ferromq_passwd(dir.path(), "app-secret");
    let config = dir.path().join("ferromq.toml");
    std::fs::write(
        &config,
        format!(
            "[authentication]\nenabled = true\n\n[[users]]\nname = \"root\"\npassword = \
             \"{root}\"\ngroups = [\"admins\"]\n\n[[users]]\nname = \"app\"\npassword = \
             \"{app}\"\ngroups = [\"users\"]\n"
        ),
    )
    .expect("write the configuration");
    let broker = RunningBroker::start(dir.path(), Some(&config));
    let url = broker.url();
    let anonymous = ferromq_fails(dir.path(), "anonymous", &["query", "--url", &url, "-QBroker=*"]);
    assert!(anonymous.contains("401") && anonymous.contains("credentials required"), "{anonymous}");
    let app_login = ["purge", "--url", &url, "--user", "app", "--password", "app-secret", "x"];
    let refused = ferromq_fails(dir.path(), "app", &app_login);
    assert!(refused.contains("403"), "{refused}");
    let login = ["query", "--url", &url, "--user", "root", "--password", "secret", "-QBroker=*"];
    let output = ferromq(dir.path(), "root", &login);
    assert!(output.contains("BrokerName = "), "{output}");
    // ActiveMQ's purge names its login --jmxuser/--jmxpassword: read as --user/--password.
    let jmx =
        ["purge", "--url", &url, "--jmxuser", "root", "--jmxpassword", "secret", "cli.nothing.*"];
    let output = ferromq(dir.path(), "jmx-login", &jmx);
    assert!(output.contains("No queue matches cli.nothing.*"), "{output}");
    let mut process = broker.process;
    process.stop();
}

/// `ferromq passwd`'s hash of `password` (read from stdin).
fn run_ferromq_passwd(dir: &Path, password: &str) -> String {
    use std::io::Write;
    let mut child = std::process::Command::new(env!("CARGO_BIN_EXE_ferromq"))
        .arg("passwd")
        .current_dir(dir)
        .stdin(std::process::Stdio::piped())
        .stdout(std::process::Stdio::piped())
        .stderr(std::process::Stdio::null())
        .spawn()
        .expect("spawn ferromq passwd");
    let mut stdin = child.stdin.take().expect("stdin");
    writeln!(stdin, "{password}").expect("write the password");
    drop(stdin);
    let output = child.wait_with_output().expect("ferromq passwd");
    assert!(output.status.success(), "ferromq passwd failed");
    String::from_utf8(output.stdout).expect("UTF-8").trim().to_owned()
}
