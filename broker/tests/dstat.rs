//! `ferromq dstat` against a running `ferromq start`: the table after a known workload, the
//! filter by kind, and clear failures when no broker answers or the admin port is taken.

mod common;

use std::net::TcpListener;

use common::{free_port, loopback, path_str, refused_start, temp_dir, Process, RawStomp};

/// How long a `ferromq dstat` may take.
const DSTAT_TIMEOUT: std::time::Duration = std::time::Duration::from_secs(20);

/// The cells of the table line of destination `name`.
fn row_of<'a>(table: &'a str, name: &str) -> Option<Vec<&'a str>> {
    table
        .lines()
        .map(|line| line.split_whitespace().collect::<Vec<_>>())
        .find(|cells| cells.first() == Some(&name))
}

#[test]
fn dstat_prints_the_counts_of_a_running_broker() {
    let dir = temp_dir();
    let (stomp, admin) = (free_port(), free_port());
    let data = dir.path().join("data");
    let connector = format!("stomp://127.0.0.1:{stomp}");
    let admin_bind = format!("127.0.0.1:{admin}");
    let args = [
        "start",
        "--connector",
        &connector,
        "--data-dir",
        path_str(&data),
        "--admin-bind",
        &admin_bind,
    ];
    let mut broker = Process::start(dir.path(), "broker", &args);
    broker.wait_accepting(loopback(stomp));
    broker.wait_accepting(loopback(admin));

    // 5 sent to a queue, 2 of them consumed and acknowledged by a consumer that stays (and
    // has the rest in flight); 3 published to a topic nobody listens to.
    let mut client = RawStomp::open(loopback(stomp));
    for index in 0..5 {
        let receipt = format!("q{index}");
        let headers = [("destination", "/queue/dstat.orders"), ("persistent", "true")];
        client.request("SEND", &headers, b"order", &receipt);
    }
    for index in 0..3 {
        let receipt = format!("t{index}");
        client.request("SEND", &[("destination", "/topic/dstat.prices")], b"price", &receipt);
    }
    let subscribe = [
        ("destination", "/queue/dstat.orders"),
        ("id", "1"),
        ("ack", "client-individual"),
        ("activemq.prefetchSize", "2"),
    ];
    client.send("SUBSCRIBE", &subscribe, b"");
    // Acknowledge the first two deliveries; MESSAGE frames and the receipt interleave.
    let mut acked = 0;
    loop {
        let frame = client.read_frame().expect("a frame");
        match frame.command.as_str() {
            "MESSAGE" if acked < 2 => {
                acked += 1;
                let ack = frame.header("ack").expect("an ack header").to_owned();
                let receipt: &[(&str, &str)] =
                    if acked == 2 { &[("receipt", "acked")] } else { &[] };
                client.send("ACK", &[&[("id", ack.as_str())], receipt].concat(), b"");
            }
            "MESSAGE" => {}
            "RECEIPT" => break,
            _ => panic!("unexpected {}", frame.describe()),
        }
    }

    let url = format!("http://{admin_bind}");
    let mut dstat = Process::start(dir.path(), "dstat", &["dstat", "--url", &url]);
    let table = dstat.succeed(DSTAT_TIMEOUT);
    let header: Vec<&str> = table
        .lines()
        .next()
        .unwrap_or_default()
        .split("  ")
        .map(str::trim)
        .filter(|c| !c.is_empty())
        .collect();
    assert_eq!(
        header,
        [
            "Name",
            "Queue Size",
            "Producer #",
            "Consumer #",
            "Enqueue #",
            "Dequeue #",
            "Forward #",
            // ActiveMQ's: each destination's share of its memory limit.
            "Memory %"
        ],
        "{table}"
    );
    // Queue Size counts what is not acknowledged: 3 (one waiting, two in flight).
    let queue = row_of(&table, "dstat.orders").unwrap_or_else(|| panic!("no queue row:\n{table}"));
    assert_eq!(queue[..7], ["dstat.orders", "3", "0", "1", "5", "2", "0"], "{table}");
    let topic = row_of(&table, "dstat.prices").unwrap_or_else(|| panic!("no topic row:\n{table}"));
    assert_eq!(topic[..7], ["dstat.prices", "0", "0", "0", "3", "0", "0"], "{table}");

    let mut queues = Process::start(dir.path(), "queues", &["dstat", "queues", "--url", &url]);
    let only_queues = queues.succeed(DSTAT_TIMEOUT);
    assert!(row_of(&only_queues, "dstat.orders").is_some(), "{only_queues}");
    assert!(row_of(&only_queues, "dstat.prices").is_none(), "{only_queues}");
    let mut topics = Process::start(dir.path(), "topics", &["dstat", "topics", "--url", &url]);
    let only_topics = topics.succeed(DSTAT_TIMEOUT);
    assert!(row_of(&only_topics, "dstat.orders").is_none(), "{only_topics}");
    assert!(row_of(&only_topics, "dstat.prices").is_some(), "{only_topics}");

    broker.stop();
}

#[test]
fn dstat_without_a_broker_fails_saying_nobody_answers() {
    let dir = temp_dir();
    let url = format!("http://127.0.0.1:{}", free_port());
    let stderr = refused_start(dir.path(), "dstat", &["dstat", "--url", &url], DSTAT_TIMEOUT);
    assert!(stderr.contains(&format!("no broker answers at {url}")), "{stderr}");
    assert!(stderr.contains("admin endpoint"), "{stderr}");
    assert_eq!(stderr.lines().count(), 1, "one line, no backtrace:\n{stderr}");
}

#[test]
fn start_refuses_a_taken_admin_port_naming_it_and_the_key() {
    let dir = temp_dir();
    let taken = TcpListener::bind("127.0.0.1:0").expect("bind");
    let address = taken.local_addr().expect("address").to_string();
    let connector = format!("stomp://127.0.0.1:{}", free_port());
    let data = dir.path().join("data");
    let args = [
        "start",
        "--connector",
        &connector,
        "--data-dir",
        path_str(&data),
        "--admin-bind",
        &address,
    ];
    let stderr = refused_start(dir.path(), "taken", &args, common::EXIT_TIMEOUT);
    assert!(stderr.contains(&address) && stderr.contains("admin.bind"), "{stderr}");
    assert_eq!(stderr.matches("in use").count(), 1, "the cause once:\n{stderr}");
    drop(taken);
}

/// With `[authentication]` enabled, dstat needs `--user`/`--password` of a user in `[admin]
/// groups`: without them it fails with the endpoint's 401, with them it prints the table.
#[test]
fn dstat_logs_in_when_the_broker_checks_logins() {
    let dir = temp_dir();
    let hash = run_ferromq_passwd(dir.path(), "secret");
    let config = dir.path().join("ferromq.toml");
    std::fs::write(
        &config,
        format!(
            "[authentication]\nenabled = true\n\n[[users]]\nname = \"root\"\npassword = \
             \"{hash}\"\ngroups = [\"admins\"]\n"
        ),
    )
    .expect("write the configuration");
    let (stomp, admin) = (free_port(), free_port());
    let connector = format!("stomp://127.0.0.1:{stomp}");
    let admin_bind = format!("127.0.0.1:{admin}");
    let data = dir.path().join("data");
    let mut broker =
        Process::start_listening(dir.path(), "broker", &config, &data, &connector, &admin_bind);
    broker.wait_accepting(loopback(admin));
    let url = format!("http://{admin_bind}");
    let stderr = refused_start(dir.path(), "anonymous", &["dstat", "--url", &url], DSTAT_TIMEOUT);
    assert!(stderr.contains("401") && stderr.contains("credentials required"), "{stderr}");
    let login = ["dstat", "--url", &url, "--user", "root", "--password", "secret"];
    let mut dstat = Process::start(dir.path(), "dstat", &login);
    let table = dstat.succeed(DSTAT_TIMEOUT);
    assert!(table.contains("Name"), "{table}");
    broker.stop();
}

/// `ferromq passwd`'s hash of `password` (read from stdin).
fn run_ferromq_passwd(dir: &std::path::Path, password: &str) -> String {
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
    let text = String::from_utf8_lossy(&output.stdout);
    text.lines().find(|line| line.starts_with("$argon2")).expect("a PHC hash").trim().to_owned()
}
