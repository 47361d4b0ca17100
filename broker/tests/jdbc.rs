//! The SQL store under the real `ferromq` binary: `[store] kind = "jdbc"` keeps persistent
//! messages in SQLite across restarts (the database under `data_dir`), and an unreachable
//! PostgreSQL or a data directory that cannot be created refuse to start with a message
//! that says what to fix.

mod common;

use std::time::Duration;

use common::{free_port, loopback, path_str, refused_start, temp_dir, Process, RawStomp};

#[test]
fn jdbc_sqlite_keeps_persistent_messages_across_a_restart() {
    let dir = temp_dir();
    let data = dir.path().join("data");
    let config = dir.path().join("jdbc.toml");
    std::fs::write(&config, "[store]\nkind = \"jdbc\"\nurl = \"sqlite://store/ferromq.db\"\n")
        .expect("write the configuration");
    let queue = "/queue/jdbc.restart";
    let port = free_port();
    let mut broker = Process::start_configured(dir.path(), "first", &config, &data, port);
    broker.wait_accepting(loopback(port));
    let mut stomp = RawStomp::open(loopback(port));
    for n in 0..20 {
        let body = format!("persistent-{n}");
        let headers = [("destination", queue), ("persistent", "true")];
        stomp.request("SEND", &headers, body.as_bytes(), &format!("r{n}"));
    }
    drop(stomp);
    broker.stop();
    // The relative SQLite path is under data_dir.
    assert!(data.join("store/ferromq.db").exists(), "no database under the data directory");

    let port = free_port();
    let mut broker = Process::start_configured(dir.path(), "second", &config, &data, port);
    broker.wait_accepting(loopback(port));
    let mut stomp = RawStomp::open(loopback(port));
    stomp.request(
        "SUBSCRIBE",
        &[("destination", queue), ("id", "s"), ("ack", "client-individual")],
        b"",
        "subscribed",
    );
    let mut acks = Vec::new();
    for n in 0..20 {
        let frame = stomp.expect_frame("MESSAGE");
        assert_eq!(String::from_utf8_lossy(&frame.body), format!("persistent-{n}"));
        assert_eq!(frame.header("redelivered"), Some("false"), "{}", frame.describe());
        acks.push(frame.header("ack").expect("an ack header").to_owned());
    }
    for (n, id) in acks.iter().enumerate() {
        stomp.request("ACK", &[("id", id)], b"", &format!("ack-{n}"));
    }
    drop(stomp);
    broker.stop();
}

#[test]
fn jdbc_with_an_unreachable_postgres_refuses_to_start() {
    let dir = temp_dir();
    let data = dir.path().join("data");
    let config = dir.path().join("jdbc.toml");
    let dead = free_port();
    std::fs::write(
        &config,
        format!("[store]\nkind = \"jdbc\"\nurl = \"postgres://ferromq:secret@127.0.0.1:{dead}/ferromq\"\n"),
    )
    .expect("write the configuration");
    let port = free_port().to_string();
    let args =
        ["start", "--config", path_str(&config), "--data-dir", path_str(&data), "--connector"];
    let uri = format!("stomp://127.0.0.1:{port}");
    let mut all: Vec<&str> = args.to_vec();
    all.push(&uri);
    let output = refused_start(dir.path(), "unreachable", &all, Duration::from_secs(30));
    assert!(
        output
            .contains(&format!("cannot connect to PostgreSQL at ferromq@127.0.0.1:{dead}/ferromq")),
        "{output}"
    );
    assert!(!output.contains("secret"), "the password is not printed: {output}");
}

#[test]
fn jdbc_sqlite_under_an_unusable_data_directory_refuses_to_start() {
    let dir = temp_dir();
    // A regular file where the data directory should be: no directory can be made under it
    // (root ignores permission bits, so a read-only mode would not stop a test run as root).
    let blocker = dir.path().join("blocker");
    std::fs::write(&blocker, b"x").expect("write");
    let config = dir.path().join("jdbc.toml");
    std::fs::write(
        &config,
        format!(
            "[store]\nkind = \"jdbc\"\nurl = \"sqlite://{}/sub/ferromq.db\"\n",
            blocker.display()
        ),
    )
    .expect("write the configuration");
    let data = dir.path().join("data");
    let uri = format!("stomp://127.0.0.1:{}", free_port());
    let args = [
        "start",
        "--config",
        path_str(&config),
        "--data-dir",
        path_str(&data),
        "--connector",
        &uri,
    ];
    let output = refused_start(dir.path(), "unusable", &args, Duration::from_secs(30));
    assert!(output.contains("cannot open the SQLite database"), "{output}");
}
