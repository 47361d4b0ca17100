//! Thousands of connections on the real `ferromq` binary (issue 7): 2,000 idle STOMP
//! connections (CONNECT and one SUBSCRIBE each, as real clients) cost little memory and no
//! thread each, request/reply works among them, and every one of them is still served at the
//! end. (The benchmark, `cargo bench -p benches --bench connections`, does 10,000 with active
//! traffic and reports the figures.)

mod common;

use std::time::Duration;

use common::{free_port, loopback, temp_dir, Process, RawStomp};

const IDLE: usize = 2_000;
/// Idle connections that also take part in request/reply (every `IDLE / REQUESTERS`-th).
const REQUESTERS: usize = 20;
const REQUESTS: &str = "/queue/conns.requests";
/// What the idle connections may add to the broker's resident memory, each: generous, since
/// allocators differ (measured about 11-12 KiB; fixed 8 KiB read and 16 KiB write buffers per
/// connection alone would exceed it).
const GROWTH_PER_CONNECTION_KB: u64 = 24;
/// The broker's threads must not grow with its connections.
const THREADS_LIMIT: u64 = 64;

/// A line of `/proc/<pid>/status` (`VmRSS:` in KiB, `Threads:`).
fn status(pid: u32, field: &str) -> u64 {
    let status = std::fs::read_to_string(format!("/proc/{pid}/status")).expect("read the status");
    status
        .lines()
        .find(|line| line.starts_with(field))
        .and_then(|line| line.split_whitespace().nth(1))
        .and_then(|value| value.parse().ok())
        .unwrap_or_else(|| panic!("no {field} in /proc/{pid}/status"))
}

#[test]
fn two_thousand_idle_connections_cost_little_and_are_all_served() {
    // This process holds a descriptor per connection too.
    let limit = rlimit::increase_nofile_limit(u64::MAX).expect("raise the open file limit");
    assert!(limit > IDLE as u64 + 100, "the hard open file limit {limit} is too low for this test");

    let dir = temp_dir();
    let config = dir.path().join("ferromq.toml");
    std::fs::write(&config, format!("[transport]\nmax_connections = {}\n", IDLE + 100)).unwrap();
    let port = free_port();
    let mut broker =
        Process::start_configured(dir.path(), "broker", &config, &dir.path().join("data"), port);
    broker.wait_accepting(loopback(port));
    let pid = broker.pid();
    // The start logs the raised limit.
    assert!(broker.stderr().contains("open file limit"), "{}", broker.output());

    // A first connection, so that what the runtime sets up once is in the baseline.
    let mut responder = RawStomp::open(loopback(port));
    responder.request("SUBSCRIBE", &[("id", "r"), ("destination", REQUESTS)], b"", "sub-r");
    std::thread::sleep(Duration::from_millis(300));
    let before_kb = status(pid, "VmRSS:");

    let mut idle: Vec<RawStomp> = (0..IDLE)
        .map(|n| {
            let mut client = RawStomp::connect(loopback(port))
                .unwrap_or_else(|e| panic!("idle connection {n}: {e}\n{}", broker.output()));
            let destination = format!("/queue/conns.idle.{}", n % 100);
            client.request(
                "SUBSCRIBE",
                &[("id", "idle"), ("destination", &destination), ("ack", "client")],
                b"",
                "sub",
            );
            client
        })
        .collect();
    std::thread::sleep(Duration::from_millis(300));
    let after_kb = status(pid, "VmRSS:");
    let threads = status(pid, "Threads:");
    let per_connection_kb = after_kb.saturating_sub(before_kb) as f64 / IDLE as f64;
    println!(
        "{IDLE} idle STOMP connections: RSS {before_kb} KiB -> {after_kb} KiB \
         ({per_connection_kb:.1} KiB each), {threads} threads"
    );
    assert!(
        per_connection_kb < GROWTH_PER_CONNECTION_KB as f64,
        "each idle connection costs {per_connection_kb:.1} KiB (limit {GROWTH_PER_CONNECTION_KB})"
    );
    assert!(threads < THREADS_LIMIT, "{threads} threads for {IDLE} connections");

    // Request/reply among them: some idle connections ask, the responder answers each on the
    // asker's temporary queue.
    for (n, asker) in idle.iter_mut().step_by(IDLE / REQUESTERS).enumerate() {
        let correlation = format!("request-{n}");
        asker.request(
            "SUBSCRIBE",
            &[("id", "replies"), ("destination", "/temp-queue/replies")],
            b"",
            "sub-replies",
        );
        asker.send(
            "SEND",
            &[
                ("destination", REQUESTS),
                ("reply-to", "/temp-queue/replies"),
                ("correlation-id", &correlation),
            ],
            b"ping",
        );
        let request = responder.expect_frame("MESSAGE");
        let reply_to = request.header("reply-to").expect("the request's reply-to").to_owned();
        assert!(reply_to.starts_with("/remote-temp-queue/"), "reply-to {reply_to}");
        responder.send(
            "SEND",
            &[("destination", &reply_to), ("correlation-id", &correlation)],
            b"pong",
        );
        let reply = asker.expect_frame("MESSAGE");
        assert_eq!(reply.header("correlation-id"), Some(correlation.as_str()));
        assert_eq!(reply.body, b"pong");
    }

    // Every connection is still served.
    for (n, client) in idle.iter_mut().enumerate() {
        client.request("UNSUBSCRIBE", &[("id", "idle")], b"", &format!("unsub-{n}"));
    }
    for client in &mut idle {
        client.request("DISCONNECT", &[], b"", "bye");
    }
    assert_eq!(broker.try_status(), None, "the broker exited\n{}", broker.output());
}
