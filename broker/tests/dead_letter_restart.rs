//! Dead letters across a crash of the real `ferromq` binary on the journal store: messages
//! moved to `ActiveMQ.DLQ` (NACKed past the limit, or expired and swept) are there after a
//! SIGKILL and restart, each exactly once, and gone from the queues they came from.

mod common;

use std::time::{Duration, SystemTime, UNIX_EPOCH};

use common::{free_port, is_timeout, loopback, temp_dir, Process, RawFrame, RawStomp};

/// Every MESSAGE of `stomp` until none has come for `quiet`.
fn messages_until_quiet(stomp: &mut RawStomp, quiet: Duration) -> Vec<RawFrame> {
    stomp.set_read_timeout(quiet);
    let mut frames = Vec::new();
    loop {
        match stomp.read_frame() {
            Ok(frame) => {
                assert_eq!(frame.command, "MESSAGE", "unexpected {}", frame.describe());
                frames.push(frame);
            }
            Err(error) if is_timeout(&error) => return frames,
            Err(error) => panic!("reading messages: {error}"),
        }
    }
}

fn bodies(frames: &[RawFrame]) -> Vec<String> {
    let mut bodies: Vec<String> =
        frames.iter().map(|f| String::from_utf8_lossy(&f.body).into_owned()).collect();
    bodies.sort();
    bodies
}

#[test]
fn dead_letters_survive_sigkill_and_restart_exactly_once() {
    let dir = temp_dir();
    let data = dir.path().join("data");
    let config = dir.path().join("ferromq.toml");
    std::fs::write(
        &config,
        "[destinations]\nexpire_messages_period_ms = 100\n\n[dead_letter]\nmax_redeliveries = 0\n",
    )
    .expect("writing the configuration");
    let port = free_port();
    let mut broker = Process::start_configured(dir.path(), "first", &config, &data, port);
    broker.wait_accepting(loopback(port));
    let mut stomp = RawStomp::open(loopback(port));
    for index in 0..3 {
        let body = format!("poison-{index}");
        let headers = [("destination", "/queue/orders"), ("persistent", "true")];
        stomp.request("SEND", &headers, body.as_bytes(), &format!("sent-{index}"));
    }
    let now = SystemTime::now().duration_since(UNIX_EPOCH).expect("clock").as_millis();
    let expires = (now + 200).to_string();
    let headers =
        [("destination", "/queue/orders.late"), ("persistent", "true"), ("expires", &expires)];
    stomp.request("SEND", &headers, b"late", "sent-late");
    // Limit 0: each NACK dead-letters its message.
    let subscribe = [("destination", "/queue/orders"), ("id", "s"), ("ack", "client-individual")];
    // Frames of a subscription without a receipt: its messages may come before any receipt.
    stomp.send("SUBSCRIBE", &subscribe, b"");
    let messages: Vec<RawFrame> = (0..3).map(|_| stomp.expect_frame("MESSAGE")).collect();
    for message in messages {
        let ack = message.header("ack").expect("an ack header").to_owned();
        stomp.request("NACK", &[("id", &ack)], b"", "nacked");
    }
    // The dead-letter moves are made by the broker's own task: wait until all four (three
    // NACKed, one expired and swept) are in the dead-letter queue, then a little for the sync.
    let browse = [("destination", "/queue/ActiveMQ.DLQ"), ("id", "b"), ("browser", "true")];
    let mut seen = Vec::new();
    for attempt in 0..50 {
        stomp.send("SUBSCRIBE", &browse, b"");
        seen = messages_until_quiet(&mut stomp, Duration::from_millis(200));
        stomp.request("UNSUBSCRIBE", &[("id", "b")], b"", &format!("unbrowse-{attempt}"));
        seen.retain(|f| f.header("browser") != Some("end"));
        if seen.len() == 4 {
            break;
        }
    }
    assert_eq!(seen.len(), 4, "in the dead-letter queue before the kill: {:?}", broker.output());
    std::thread::sleep(Duration::from_millis(300));
    drop(stomp);
    broker.kill_9();

    let port = free_port();
    let mut broker = Process::start_configured(dir.path(), "second", &config, &data, port);
    broker.wait_accepting(loopback(port));
    let mut stomp = RawStomp::open(loopback(port));
    for (queue, id) in [("/queue/orders", "orders"), ("/queue/orders.late", "late")] {
        stomp.request("SUBSCRIBE", &[("destination", queue), ("id", id), ("ack", "auto")], b"", id);
    }
    let subscribe = [("destination", "/queue/ActiveMQ.DLQ"), ("id", "dlq"), ("ack", "client")];
    stomp.send("SUBSCRIBE", &subscribe, b"");
    let frames = messages_until_quiet(&mut stomp, Duration::from_millis(1000));
    assert!(
        frames.iter().all(|f| f.header("subscription") == Some("dlq")),
        "only the dead-letter queue has messages: {:?}",
        frames.iter().map(RawFrame::describe).collect::<Vec<_>>()
    );
    assert_eq!(bodies(&frames), ["late", "poison-0", "poison-1", "poison-2"]);
    for frame in &frames {
        let body = String::from_utf8_lossy(&frame.body);
        let from = if body == "late" { "/queue/orders.late" } else { "/queue/orders" };
        assert_eq!(frame.header("original-destination"), Some(from), "{}", frame.describe());
        assert!(frame.header("dlqDeliveryFailureCause").is_some(), "{}", frame.describe());
    }
    // Acknowledged now, they are gone for good.
    let last = frames.last().and_then(|f| f.header("ack")).expect("an ack header").to_owned();
    stomp.request("ACK", &[("id", &last)], b"", "acked");
    drop(stomp);
    broker.kill_9();

    let port = free_port();
    let mut broker = Process::start_configured(dir.path(), "third", &config, &data, port);
    broker.wait_accepting(loopback(port));
    let mut stomp = RawStomp::open(loopback(port));
    let subscribe = [("destination", "/queue/ActiveMQ.DLQ"), ("id", "dlq"), ("ack", "auto")];
    stomp.send("SUBSCRIBE", &subscribe, b"");
    let frames = messages_until_quiet(&mut stomp, Duration::from_millis(1000));
    assert!(frames.is_empty(), "acknowledged dead letters came back: {}", frames.len());
    broker.stop();
}
