//! Scheduled delivery across a crash of the real `ferromq` binary on the journal store: a
//! persistent message scheduled a few seconds ahead survives a SIGKILL and is delivered after
//! the restart, exactly once; a repeating schedule resumes with the copies it had left.

mod common;

use std::time::{Duration, Instant};

use common::{free_port, is_timeout, loopback, temp_dir, Process, RawFrame, RawStomp};

/// How long without a message counts as "nothing more comes".
const QUIET: Duration = Duration::from_millis(1000);

/// Reads every MESSAGE that arrives until `deadline`, and then until none has come for
/// `quiet`; each with the time it arrived.
fn messages_until(
    stomp: &mut RawStomp,
    deadline: Instant,
    quiet: Duration,
) -> Vec<(Instant, RawFrame)> {
    stomp.set_read_timeout(quiet);
    let mut frames = Vec::new();
    loop {
        match stomp.read_frame() {
            Ok(frame) => {
                assert_eq!(frame.command, "MESSAGE", "unexpected {}", frame.describe());
                frames.push((Instant::now(), frame));
            }
            Err(error) if is_timeout(&error) && Instant::now() >= deadline => break,
            Err(error) if is_timeout(&error) => {}
            Err(error) => panic!("reading messages: {error}"),
        }
    }
    frames
}

#[test]
fn a_scheduled_persistent_message_survives_sigkill_and_is_delivered_once() {
    let dir = temp_dir();
    let data = dir.path().join("data");
    let port = free_port();
    let mut broker = Process::start_broker(dir.path(), "first", &data, port);
    broker.wait_accepting(loopback(port));
    let mut stomp = RawStomp::open(loopback(port));
    let sent = Instant::now();
    stomp.request(
        "SEND",
        &[
            ("destination", "/queue/scheduled.restart"),
            ("persistent", "true"),
            ("AMQ_SCHEDULED_DELAY", "3000"),
        ],
        b"later",
        "scheduled",
    );
    // Three copies 300 ms apart, starting in 3.5 s: all of them still to come after the kill.
    stomp.request(
        "SEND",
        &[
            ("destination", "/queue/scheduled.repeat"),
            ("persistent", "true"),
            ("AMQ_SCHEDULED_DELAY", "3500"),
            ("AMQ_SCHEDULED_PERIOD", "300"),
            ("AMQ_SCHEDULED_REPEAT", "2"),
        ],
        b"again",
        "repeating",
    );
    drop(stomp);
    broker.kill_9();

    let port = free_port();
    let mut broker = Process::start_broker(dir.path(), "second", &data, port);
    broker.wait_accepting(loopback(port));
    let mut stomp = RawStomp::open(loopback(port));
    stomp.request(
        "SUBSCRIBE",
        &[("destination", "/queue/scheduled.restart"), ("id", "once"), ("ack", "auto")],
        b"",
        "subscribed-once",
    );
    stomp.request(
        "SUBSCRIBE",
        &[("destination", "/queue/scheduled.repeat"), ("id", "repeat"), ("ack", "auto")],
        b"",
        "subscribed-repeat",
    );
    let restarted = sent.elapsed();
    assert!(
        restarted < Duration::from_millis(2500),
        "the restart took {restarted:?}: too slow for this test's 3 s delay"
    );
    // Wait past the whole schedule, then for quiet: everything due must have come, once.
    // The repeating job's last copy is due at 4.1 s.
    let frames = messages_until(&mut stomp, sent + Duration::from_millis(4500), QUIET);
    let of = |subscription: &str| -> Vec<(Duration, &RawFrame)> {
        frames
            .iter()
            .filter(|(_, f)| f.header("subscription") == Some(subscription))
            .map(|(at, f)| (at.duration_since(sent), f))
            .collect()
    };
    let once: Vec<&RawFrame> = of("once").into_iter().map(|(_, f)| f).collect();
    assert_eq!(once.len(), 1, "the delayed message once: {:?}", broker.output());
    assert_eq!(once[0].body, b"later");
    let arrived_after = of("once")[0].0;
    assert!(arrived_after >= Duration::from_millis(3000), "delivered after {arrived_after:?}");
    let repeat: Vec<&RawFrame> = of("repeat").into_iter().map(|(_, f)| f).collect();
    assert_eq!(once[0].header("AMQ_SCHEDULED_DELAY"), None, "{}", once[0].describe());
    assert_eq!(repeat.len(), 3, "the repeating message three times: {:?}", broker.output());
    let mut ids: Vec<&str> = repeat.iter().filter_map(|f| f.header("message-id")).collect();
    ids.dedup();
    assert_eq!(ids.len(), 3, "each copy is a message of its own: {ids:?}");
    drop(stomp);
    broker.kill_9();

    // Nothing is left to fire: a third start delivers nothing more.
    let port = free_port();
    let mut broker = Process::start_broker(dir.path(), "third", &data, port);
    broker.wait_accepting(loopback(port));
    let mut stomp = RawStomp::open(loopback(port));
    for (queue, id) in [("/queue/scheduled.restart", "once"), ("/queue/scheduled.repeat", "repeat")]
    {
        stomp.request("SUBSCRIBE", &[("destination", queue), ("id", id), ("ack", "auto")], b"", id);
    }
    let frames = messages_until(&mut stomp, Instant::now() + QUIET, QUIET);
    assert!(
        frames.is_empty(),
        "delivered again: {:?}",
        frames.iter().map(|(_, f)| f.describe()).collect::<Vec<_>>()
    );
    broker.stop();
}
