//! The SQL store under the real `ferromq` binary: `[store] kind = "jdbc"` keeps persistent
//! messages in SQLite across restarts (the database under `data_dir`), an unreachable
//! PostgreSQL or a data directory that cannot be created refuse to start with a message
//! that says what to fix, and a PostgreSQL server that goes away under load fails sends
//! clearly, loses nothing confirmed, and is used again once it is back.

mod common;

use std::collections::BTreeSet;
use std::sync::atomic::{AtomicBool, AtomicU64, AtomicU8, Ordering};
use std::sync::Mutex;
use std::time::{Duration, Instant};

use common::{
    free_port, is_timeout, loopback, path_str, refused_start, temp_dir, Process, RawStomp,
    FRAME_TIMEOUT,
};

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
    // The admin endpoint on a port of its own: another program may hold the default 8161.
    let args = [
        "start",
        "--config",
        path_str(&config),
        "--data-dir",
        path_str(&data),
        "--admin-bind",
        "127.0.0.1:0",
        "--connector",
    ];
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
        // Not the default 8161, which another program may hold: the broker binds its admin
        // endpoint before it opens the store, and would report the taken port instead.
        "--admin-bind",
        "127.0.0.1:0",
    ];
    let output = refused_start(dir.path(), "unusable", &args, Duration::from_secs(30));
    assert!(output.contains("cannot open the SQLite database"), "{output}");
}

// ----- PostgreSQL going away under load -----

/// The outage's phases, as the producers see them.
const UP: u8 = 0;
/// `pg_ctl stop -m immediate` has returned: nothing can be committed.
const DOWN: u8 = 1;
/// `pg_ctl start` was called (it may or may not be serving yet).
const RESTARTING: u8 = 2;
/// `pg_ctl start` has returned.
const BACK: u8 = 3;

/// What the producers of [`jdbc_postgres_going_away_under_load_fails_sends_and_carries_on`] saw.
#[derive(Default)]
struct Outage {
    confirmed: BTreeSet<u64>,
    /// Sends the broker answered with an ERROR (the message was not stored, or may not be).
    refused: BTreeSet<u64>,
    /// Of those, the sends begun well after the database went down (when the store knew):
    /// refused before dispatch, they must never be delivered.
    refused_late: BTreeSet<u64>,
    /// Sends begun and confirmed while the database was down: a silent success.
    confirmed_while_down: Vec<u64>,
    /// The ERROR frames' messages, in order.
    errors: Vec<String>,
    /// Sends that got no answer within the frame timeout.
    hung: Vec<String>,
    confirmed_after_return: usize,
}

const OUTAGE_QUEUE: &str = "/queue/jdbc.outage";
const OUTAGE_ID: &str = "x-outage-id";
/// How long after the database went down its store surely knows (its first reconnect
/// failed), so that sends are refused before the message is dispatched.
const KNOWN_DOWN_AFTER: Duration = Duration::from_millis(500);
/// The outage test's broker's `[store] lease_ms`: above the longest outage the test causes
/// (1.5 s down, at most [`FIRST_REFUSAL_TIMEOUT`] more until a send failed, then at most
/// `pg_ctl start`'s 30 s: 41.5 s) plus the fencing margin of a quarter lease (15 s).
const OUTAGE_LEASE_MS: u64 = 60_000;
/// How long the outage test waits, once the database has been down 1.5 s, for a send to fail.
const FIRST_REFUSAL_TIMEOUT: Duration = Duration::from_secs(10);
/// How long a producer waits for the answer to one send before calling it a hang.
const ANSWER_TIMEOUT: Duration = Duration::from_secs(30);

/// One producer: persistent sends with receipts, one at a time, reconnecting after an ERROR
/// (the broker closes the connection with it), until `stop`.
fn outage_producer(
    addr: std::net::SocketAddr,
    outage: &Mutex<Outage>,
    phase: &AtomicU8,
    down_since: &Mutex<Option<Instant>>,
    next_id: &AtomicU64,
    stop: &AtomicBool,
) {
    while !stop.load(Ordering::SeqCst) {
        let Ok(mut stomp) = RawStomp::connect(addr) else {
            std::thread::sleep(Duration::from_millis(50));
            continue;
        };
        stomp.set_read_timeout(ANSWER_TIMEOUT);
        while !stop.load(Ordering::SeqCst) {
            let id = next_id.fetch_add(1, Ordering::SeqCst);
            let id_text = id.to_string();
            let receipt = format!("send-{id}");
            let body = format!("outage message {id}");
            let headers = [
                ("destination", OUTAGE_QUEUE),
                ("persistent", "true"),
                (OUTAGE_ID, id_text.as_str()),
                ("receipt", receipt.as_str()),
            ];
            let phase_before = phase.load(Ordering::SeqCst);
            let late = phase_before == DOWN
                && down_since
                    .lock()
                    .expect("down since")
                    .is_some_and(|since| since.elapsed() > KNOWN_DOWN_AFTER);
            if stomp.send_frame("SEND", &headers, body.as_bytes()).is_err() {
                break;
            }
            let answer = stomp.read_frame();
            let mut outage = outage.lock().expect("ledger");
            match answer {
                Ok(frame) if frame.command == "RECEIPT" => {
                    outage.confirmed.insert(id);
                    if phase_before == DOWN && phase.load(Ordering::SeqCst) == DOWN {
                        outage.confirmed_while_down.push(id);
                    }
                    if phase_before == BACK {
                        outage.confirmed_after_return += 1;
                    }
                }
                Ok(frame) if frame.command == "ERROR" => {
                    outage.refused.insert(id);
                    if late {
                        outage.refused_late.insert(id);
                    }
                    let message = frame.header("message").unwrap_or_default().to_owned();
                    outage.errors.push(message);
                    break;
                }
                Ok(frame) => {
                    outage.errors.push(format!("unexpected {}", frame.describe()));
                    break;
                }
                Err(e) if is_timeout(&e) => {
                    outage.hung.push(format!("send {id}: no answer in {ANSWER_TIMEOUT:?}"));
                    break;
                }
                // The connection closed without an answer: the send may or may not be stored.
                Err(_) => break,
            }
        }
        std::thread::sleep(Duration::from_millis(20));
    }
}

/// Subscribes to the outage queue and receives until nothing comes for a while; acks each
/// message (with a receipt) when `ack`. Returns the ids delivered.
fn drain_outage_queue(addr: std::net::SocketAddr, ack: bool) -> BTreeSet<u64> {
    let mut stomp = RawStomp::open(addr);
    // A prefetch above every message sent: the drain that acks nothing must get them all.
    let headers = [
        ("destination", OUTAGE_QUEUE),
        ("id", "drain"),
        ("ack", "client-individual"),
        ("activemq.prefetchSize", "1000000"),
    ];
    stomp.send("SUBSCRIBE", &headers, b"");
    stomp.set_read_timeout(Duration::from_millis(200));
    let mut delivered = BTreeSet::new();
    let mut acks_waiting = 0usize;
    let mut idle_since = Instant::now();
    while acks_waiting > 0 || idle_since.elapsed() < Duration::from_millis(2000) {
        assert!(idle_since.elapsed() < FRAME_TIMEOUT, "the drain stalled with acks unconfirmed");
        let frame = match stomp.read_frame() {
            Ok(frame) => frame,
            Err(e) if is_timeout(&e) => continue,
            Err(e) => panic!("draining: {e}"),
        };
        idle_since = Instant::now();
        match frame.command.as_str() {
            "MESSAGE" => {
                let id = frame.header(OUTAGE_ID).and_then(|id| id.parse::<u64>().ok());
                let id = id.unwrap_or_else(|| panic!("a message without an id: {frame:?}"));
                assert!(delivered.insert(id), "message {id} delivered twice in one drain");
                if ack {
                    let ack_id = frame.header("ack").expect("an ack header").to_owned();
                    stomp.send("ACK", &[("id", &ack_id), ("receipt", "acked")], b"");
                    acks_waiting += 1;
                }
            }
            "RECEIPT" => acks_waiting -= 1,
            _ => panic!("the drain got {}", frame.describe()),
        }
    }
    let _ = stomp.send_frame("DISCONNECT", &[], b"");
    delivered
}

/// A PostgreSQL server stopped (`pg_ctl stop -m immediate`) under persistent sends: sends
/// fail with an ERROR that names the problem (no hang, no silent success), and once the
/// server is back the same broker, never restarted, confirms sends again; every confirmed
/// message is delivered, by that broker and again after a restart.
#[test]
fn jdbc_postgres_going_away_under_load_fails_sends_and_carries_on() {
    let Some(cluster) = store_jdbc::testing::PgCluster::start() else { return };
    let url = cluster.create_database();
    let dir = temp_dir();
    let data = dir.path().join("data");
    let config = dir.path().join("jdbc.toml");
    // A broker that cannot renew its PostgreSQL lease stops serving a quarter of a lease
    // before it could expire (README, "Active/standby on PostgreSQL"); this test is about an
    // outage shorter than the lease, which the broker must live through. The outage is the
    // time until a send failed (1.5 s at least) plus PostgreSQL's crash recovery after the
    // immediate stop, which took more than 5 s on a loaded 2-core machine, and `pg_ctl start`
    // gives it up to 30 s: with the default 10 s lease the broker fenced itself and exited. A
    // 60 s lease fences only after 45 s, longer than the longest outage this test can cause,
    // so what is still asserted is the broker's behaviour in an outage, not how fast the
    // machine restarts PostgreSQL.
    std::fs::write(
        &config,
        format!("[store]\nkind = \"jdbc\"\nurl = \"{url}\"\nlease_ms = {OUTAGE_LEASE_MS}\n"),
    )
    .expect("write the configuration");
    let port = free_port();
    let addr = loopback(port);
    let mut broker = Process::start_configured(dir.path(), "outage", &config, &data, port);
    broker.wait_accepting(addr);

    let outage = Mutex::new(Outage::default());
    let phase = AtomicU8::new(UP);
    let down_since = Mutex::new(None);
    let next_id = AtomicU64::new(1);
    let stop = AtomicBool::new(false);
    std::thread::scope(|scope| {
        // Stops the producers on every way out, a failed assertion included.
        let _stop = SetOnDrop(&stop);
        for _ in 0..3 {
            scope.spawn(|| outage_producer(addr, &outage, &phase, &down_since, &next_id, &stop));
        }
        std::thread::sleep(Duration::from_millis(700));
        let before = outage.lock().expect("ledger").confirmed.len();
        assert!(before > 0, "nothing confirmed before the database went away");
        cluster.stop_server().expect("stop PostgreSQL");
        *down_since.lock().expect("down since") = Some(Instant::now());
        phase.store(DOWN, Ordering::SeqCst);
        // Down for 1.5 s at least (sends begun after KNOWN_DOWN_AFTER are refused before
        // dispatch), and until some send has failed: the producers' sends and the store's
        // first failed write may be slow to come round on a loaded machine.
        std::thread::sleep(Duration::from_millis(1500));
        let deadline = Instant::now() + FIRST_REFUSAL_TIMEOUT;
        while outage.lock().expect("ledger").errors.is_empty() {
            assert!(
                Instant::now() < deadline,
                "no send failed while the database was down:\n{}",
                broker.stderr()
            );
            std::thread::sleep(Duration::from_millis(20));
        }
        phase.store(RESTARTING, Ordering::SeqCst);
        cluster.start_server().expect("start PostgreSQL again");
        phase.store(BACK, Ordering::SeqCst);
        // The store's reconnect backoff tops out at 5 s; CI machines are busy.
        let deadline = Instant::now() + Duration::from_secs(60);
        while outage.lock().expect("ledger").confirmed_after_return < 50 {
            // Said at once: a broker that exited (its lease lost) would never confirm again.
            assert!(
                broker.try_status().is_none(),
                "the broker exited during the outage:\n{}",
                broker.stderr()
            );
            assert!(
                Instant::now() < deadline,
                "the broker did not confirm sends again once the database was back:\n{}",
                broker.stderr()
            );
            std::thread::sleep(Duration::from_millis(20));
        }
        stop.store(true, Ordering::SeqCst);
    });
    let outage = outage.into_inner().expect("ledger");
    assert!(outage.hung.is_empty(), "sends hung: {:?}", outage.hung);
    assert!(
        outage.confirmed_while_down.is_empty(),
        "sends confirmed while the database was down: {:?}",
        outage.confirmed_while_down
    );
    let first = &outage.errors[0];
    assert!(
        first.contains("not stored") && first.contains("PostgreSQL"),
        "the ERROR says what went wrong: {first}"
    );

    // Every confirmed message, from the broker that lived through the outage...
    let delivered = drain_outage_queue(addr, false);
    let lost: Vec<&u64> = outage.confirmed.difference(&delivered).collect();
    assert!(
        lost.is_empty(),
        "{} confirmed, {} delivered; confirmed and not delivered: {lost:?}",
        outage.confirmed.len(),
        delivered.len()
    );
    let refused_delivered = outage.refused.intersection(&delivered).count();
    // A send whose unit was already queued when the connection died fails after the
    // message was dispatched (concurrent store and dispatch); later ones must not be.
    let late_delivered: Vec<&u64> = outage.refused_late.intersection(&delivered).collect();
    assert!(
        late_delivered.is_empty(),
        "sends refused while the database was known down were delivered anyway: \
         {late_delivered:?}"
    );
    broker.stop();
    // ...and after a restart.
    let port = free_port();
    let addr = loopback(port);
    let mut broker = Process::start_configured(dir.path(), "restarted", &config, &data, port);
    broker.wait_accepting(addr);
    let after_restart = drain_outage_queue(addr, true);
    let lost: Vec<&u64> = outage.confirmed.difference(&after_restart).collect();
    assert!(lost.is_empty(), "confirmed and lost across a restart: {lost:?}");
    let unknown: Vec<&u64> = after_restart.difference(&delivered).collect();
    assert!(unknown.is_empty(), "came back after the restart, never delivered before: {unknown:?}");
    eprintln!(
        "outage: {} sends confirmed ({} after the database came back), {} refused with an \
         ERROR ({} while the store knew, {} delivered: in flight when the connection died), \
         first: {first}",
        outage.confirmed.len(),
        outage.confirmed_after_return,
        outage.refused.len(),
        outage.refused_late.len(),
        refused_delivered
    );
    broker.stop();
}

/// Sets its flag when dropped, also while a panic unwinds.
struct SetOnDrop<'a>(&'a AtomicBool);

impl Drop for SetOnDrop<'_> {
    fn drop(&mut self) {
        self.0.store(true, Ordering::SeqCst);
    }
}
