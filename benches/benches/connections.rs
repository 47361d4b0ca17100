//! Connection scale (issue 7, seed 002's "thousands of concurrent connections"): the broker as
//! its own process, 10,000 concurrent connections on loopback, 100 of them active, and a probe
//! doing request/reply every 100 ms. Reports the broker's resident memory, the memory each idle
//! connection costs (STOMP and OpenWire), and the probe's latency.
//!
//! `cargo bench -p benches --bench connections` runs 10,000 connections for 30 s;
//! `-- --quick` runs 1,000 for 5 s (CI's smoke mode: it reports the aims but fails only on
//! errors, since CI machines are shared and noisy). `FERROMQ_BENCH_CONNECTIONS=N` and
//! `FERROMQ_BENCH_SECONDS=S` set other sizes.
//!
//! The scenario:
//! 1. the bench raises its own file-descriptor limit to the hard limit, builds (if needed) and
//!    starts the release `ferromq` binary with `transport.max_connections` above the count;
//! 2. idle connections, half STOMP (CONNECT and one SUBSCRIBE, as a real client) and half
//!    OpenWire (the handshake, ConnectionInfo, SessionInfo, ConsumerInfo); the broker's RSS is
//!    read before and after each half (`VmRSS` in `/proc/<pid>/status`): the difference over
//!    the count is the cost of one idle connection;
//! 3. 100 active STOMP connections, each subscribed to its own queue and sending a 1 KiB
//!    message to the next one's queue every [`ACTIVE_EVERY`];
//! 4. a probe: a requester sends to a queue every [`PROBE_EVERY`] with `reply-to` its temporary
//!    queue, a responder answers each request there; the round trip is the latency.
//!
//! At the end every message sent must have been received, every request answered and every
//! idle connection still open: anything else is an error, in any mode.
//!
//! `FERROMQ_BENCH_PEER_STOMP=host:port` (and optionally `FERROMQ_BENCH_PEER_OPENWIRE=host:port`
//! and `FERROMQ_BENCH_PEER_PID=pid` for its memory) runs the same scenario against a peer such
//! as Apache ActiveMQ (`../shared/peers/activemq/start.sh DIR OW STOMP MQTT`), after ferromq.

use std::net::SocketAddr;
use std::sync::atomic::{AtomicBool, AtomicU64, Ordering};
use std::sync::Arc;
use std::time::{Duration, Instant};

use anyhow::{bail, ensure, Context};
use benches::process::FerromqProcess;
use benches::Latencies;
use bytes::Bytes;
use client::openwire::{
    Consumer, Destination, OpenWireClient, OpenWireOptions, Session, SessionMode, SubscribeOptions,
};
use client::{AckMode, ConnectOptions, StompClient, Subscription};
use tokio::task::JoinSet;

const FULL_CONNECTIONS: usize = 10_000;
const QUICK_CONNECTIONS: usize = 1_000;
const FULL_SECONDS: u64 = 30;
const QUICK_SECONDS: u64 = 5;
/// Connections that send and receive all along.
const ACTIVE: usize = 100;
/// How often each active connection sends a message (100 connections: 500 messages a second).
const ACTIVE_EVERY: Duration = Duration::from_millis(200);
const BODY: usize = 1024;
/// How often the probe sends a request.
const PROBE_EVERY: Duration = Duration::from_millis(100);
/// A request without a reply within this long is lost.
const REPLY_LIMIT: Duration = Duration::from_secs(5);
/// Connections opened at once (the listener's accept backlog is bounded).
const OPENING_AT_ONCE: usize = 64;
/// Descriptors this process needs besides its connections' (the runtime, the bench's files).
const FILES_BESIDES_CONNECTIONS: u64 = 256;
/// The aims of issue 7.
const RSS_AIM_MIB: f64 = 300.0;
const P99_AIM: Duration = Duration::from_millis(50);

/// A broker under test.
struct Target {
    name: String,
    stomp: SocketAddr,
    openwire: Option<SocketAddr>,
    /// Its process, for its memory.
    pid: Option<u32>,
}

/// What one run measured.
struct Report {
    name: String,
    connections: usize,
    rss_start_kb: u64,
    rss_peak_kb: u64,
    threads: u64,
    stomp_idle: usize,
    stomp_per_connection: Option<f64>,
    openwire_idle: usize,
    openwire_per_connection: Option<f64>,
    messages: u64,
    latencies: Latencies,
    requests: usize,
}

fn main() -> anyhow::Result<()> {
    let quick = std::env::args().any(|a| a == "--quick");
    let mut connections = env_number(
        "FERROMQ_BENCH_CONNECTIONS",
        if quick { QUICK_CONNECTIONS } else { FULL_CONNECTIONS } as u64,
    )? as usize;
    let seconds =
        env_number("FERROMQ_BENCH_SECONDS", if quick { QUICK_SECONDS } else { FULL_SECONDS })?;
    ensure!(connections > ACTIVE + 2, "FERROMQ_BENCH_CONNECTIONS must exceed {}", ACTIVE + 2);

    // Every connection is a descriptor here too: raise the soft limit to the hard one.
    let limit = rlimit::increase_nofile_limit(u64::MAX).context("raise the open file limit")?;
    let needed = connections as u64 + FILES_BESIDES_CONNECTIONS;
    if limit < needed {
        let fits = limit.saturating_sub(FILES_BESIDES_CONNECTIONS) as usize;
        ensure!(
            quick && fits > ACTIVE + 2,
            "{connections} connections need about {needed} open files, and the hard limit is \
             {limit} (raise it with ulimit -Hn)"
        );
        // A smoke run on a machine with a low hard limit: fewer connections, same checks.
        println!("the hard open file limit {limit} allows {fits} connections, not {connections}");
        connections = fits;
    }
    println!("open file limit {limit}; {connections} connections for {seconds} s");

    let runtime = tokio::runtime::Builder::new_multi_thread().enable_all().build()?;
    let mut reports = Vec::new();
    {
        let dir = tempfile::tempdir()?;
        // Room for every connection of the bench on each connector.
        let config = format!("[transport]\nmax_connections = {}\n", connections + 100);
        let broker = FerromqProcess::start(dir.path(), &config)?;
        let target = Target {
            name: "ferromq".to_owned(),
            stomp: broker.stomp,
            openwire: Some(broker.openwire),
            pid: Some(broker.pid()),
        };
        reports.push(runtime.block_on(run(&target, connections, Duration::from_secs(seconds)))?);
    }
    if let Ok(stomp) = std::env::var("FERROMQ_BENCH_PEER_STOMP") {
        let target = Target {
            name: "peer".to_owned(),
            stomp: stomp.parse().with_context(|| format!("FERROMQ_BENCH_PEER_STOMP={stomp}"))?,
            openwire: match std::env::var("FERROMQ_BENCH_PEER_OPENWIRE") {
                Ok(text) => Some(
                    text.parse().with_context(|| format!("FERROMQ_BENCH_PEER_OPENWIRE={text}"))?,
                ),
                Err(_) => None,
            },
            pid: match std::env::var("FERROMQ_BENCH_PEER_PID") {
                Ok(text) => {
                    Some(text.parse().with_context(|| format!("FERROMQ_BENCH_PEER_PID={text}"))?)
                }
                Err(_) => None,
            },
        };
        reports.push(runtime.block_on(run(&target, connections, Duration::from_secs(seconds)))?);
    }

    println!(
        "{:<8} {:>7} {:>10} {:>10} {:>7} {:>14} {:>14} {:>8} {:>8} {:>8} {:>8} {:>8}",
        "broker",
        "conns",
        "RSS start",
        "RSS peak",
        "threads",
        "STOMP B/idle",
        "OW B/idle",
        "msgs",
        "probes",
        "p50 ms",
        "p99 ms",
        "max ms"
    );
    for report in &reports {
        let per = |bytes: Option<f64>, count: usize| match bytes {
            Some(bytes) if count > 0 => format!("{bytes:.0}"),
            _ => "-".to_owned(),
        };
        let mib = |kb: u64| {
            if report.rss_peak_kb == 0 {
                "-".to_owned()
            } else {
                format!("{:.1} MiB", kb as f64 / 1024.0)
            }
        };
        println!(
            "{:<8} {:>7} {:>10} {:>10} {:>7} {:>14} {:>14} {:>8} {:>8} {:>8.2} {:>8.2} {:>8.2}",
            report.name,
            report.connections,
            mib(report.rss_start_kb),
            mib(report.rss_peak_kb),
            if report.threads == 0 { "-".to_owned() } else { report.threads.to_string() },
            per(report.stomp_per_connection, report.stomp_idle),
            per(report.openwire_per_connection, report.openwire_idle),
            report.messages,
            report.requests,
            millis(report.latencies.percentile(50.0)),
            millis(report.latencies.percentile(99.0)),
            millis(report.latencies.percentile(100.0)),
        );
    }
    let ours = &reports[0];
    let rss_mib = ours.rss_peak_kb as f64 / 1024.0;
    let p99 = ours.latencies.percentile(99.0);
    let rss_ok = rss_mib < RSS_AIM_MIB;
    let p99_ok = p99 < P99_AIM;
    let verdict = if rss_ok && p99_ok { "PASS" } else { "FAIL" };
    println!(
        "{verdict}: ferromq with {} connections: peak RSS {rss_mib:.1} MiB (aim < {RSS_AIM_MIB} \
         MiB: {}), probe p99 {:.2} ms (aim < {} ms: {}){}",
        ours.connections,
        if rss_ok { "met" } else { "MISSED" },
        millis(p99),
        P99_AIM.as_millis(),
        if p99_ok { "met" } else { "MISSED" },
        if quick { "; quick mode reports the aims without failing on them" } else { "" }
    );
    let aims_met = rss_ok && p99_ok;
    if !quick && !aims_met {
        bail!("the aims were missed");
    }
    Ok(())
}

fn env_number(name: &str, default: u64) -> anyhow::Result<u64> {
    match std::env::var(name) {
        Ok(text) => text.parse().with_context(|| format!("{name}={text}")),
        Err(_) => Ok(default),
    }
}

fn millis(duration: Duration) -> f64 {
    duration.as_secs_f64() * 1000.0
}

/// Runs the scenario against `target`.
async fn run(target: &Target, connections: usize, duration: Duration) -> anyhow::Result<Report> {
    println!("--- {}: {connections} connections", target.name);
    let idle = connections - ACTIVE - 2;
    let (stomp_idle, openwire_idle) = match target.openwire {
        Some(_) => (idle / 2, idle - idle / 2),
        None => (idle, 0),
    };
    let rss_start_kb = settled_rss(target.pid).await;

    let started = Instant::now();
    let stomp_clients = open_stomp_idle(target.stomp, stomp_idle).await?;
    let after_stomp_kb = settled_rss(target.pid).await;
    println!(
        "{stomp_idle} idle STOMP connections in {:.1} s, RSS {:.1} MiB",
        started.elapsed().as_secs_f64(),
        after_stomp_kb as f64 / 1024.0
    );
    let started = Instant::now();
    let openwire_clients = match target.openwire {
        Some(addr) => open_openwire_idle(addr, openwire_idle).await?,
        None => Vec::new(),
    };
    let after_openwire_kb = settled_rss(target.pid).await;
    if openwire_idle > 0 {
        println!(
            "{openwire_idle} idle OpenWire connections in {:.1} s, RSS {:.1} MiB",
            started.elapsed().as_secs_f64(),
            after_openwire_kb as f64 / 1024.0
        );
    }
    let per_connection = |before: u64, after: u64, count: usize| {
        (target.pid.is_some() && count > 0)
            .then(|| (after.saturating_sub(before) * 1024) as f64 / count as f64)
    };

    // The working part: active connections and the probe, for `duration`.
    let stop = Arc::new(AtomicBool::new(false));
    let sent = Arc::new(AtomicU64::new(0));
    let received = Arc::new(AtomicU64::new(0));
    let mut active = JoinSet::new();
    let mut subscriptions = Vec::with_capacity(ACTIVE);
    let mut senders = Vec::with_capacity(ACTIVE);
    for index in 0..ACTIVE {
        let client = Arc::new(StompClient::connect(target.stomp, ConnectOptions::default()).await?);
        let queue = format!("/queue/conns.active.{index}");
        subscriptions.push(client.subscribe(&queue, AckMode::Auto, &[]).await?);
        senders.push(client);
    }
    for (index, (client, mut subscription)) in senders.iter().zip(subscriptions).enumerate() {
        let (client, stop, sent, received) =
            (client.clone(), stop.clone(), sent.clone(), received.clone());
        let next = format!("/queue/conns.active.{}", (index + 1) % ACTIVE);
        let offset = ACTIVE_EVERY.mul_f64(index as f64 / ACTIVE as f64);
        active.spawn(async move {
            let body = Bytes::from(vec![b'a'; BODY]);
            let start = tokio::time::Instant::now() + offset;
            let mut tick = tokio::time::interval_at(start, ACTIVE_EVERY);
            loop {
                tokio::select! {
                    _ = tick.tick(), if !stop.load(Ordering::Relaxed) => {
                        client.send(&next, body.clone(), &[]).await?;
                        sent.fetch_add(1, Ordering::Relaxed);
                    }
                    message = subscription.recv() => {
                        let Some(_) = message else { break };
                        received.fetch_add(1, Ordering::Relaxed);
                    }
                }
            }
            Err::<(), _>(anyhow::anyhow!("an active connection closed"))
        });
    }
    let probe = tokio::spawn(probe(target.stomp, duration, stop.clone()));

    let mut peak_kb = after_openwire_kb;
    let until = Instant::now() + duration;
    while Instant::now() < until {
        tokio::time::sleep(Duration::from_millis(250)).await;
        peak_kb = peak_kb.max(status_kb(target.pid, "VmRSS:"));
        if let Some(result) = active.try_join_next() {
            result??;
        }
    }
    stop.store(true, Ordering::Relaxed);
    let (latencies, requests) = probe.await??;
    // Whatever was sent must arrive.
    let deadline = Instant::now() + REPLY_LIMIT;
    while received.load(Ordering::Relaxed) < sent.load(Ordering::Relaxed) {
        if Instant::now() > deadline {
            bail!(
                "{}: {} of {} messages of the active connections were lost",
                target.name,
                sent.load(Ordering::Relaxed) - received.load(Ordering::Relaxed),
                sent.load(Ordering::Relaxed)
            );
        }
        if let Some(result) = active.try_join_next() {
            result??;
        }
        tokio::time::sleep(Duration::from_millis(50)).await;
    }
    active.abort_all();
    let threads = status_kb(target.pid, "Threads:");
    peak_kb = peak_kb.max(status_kb(target.pid, "VmHWM:"));

    let closed_stomp = stomp_clients.iter().filter(|(client, _)| client.is_closed()).count();
    let closed_openwire = openwire_clients.iter().filter(|idle| idle.client.is_closed()).count();
    ensure!(
        closed_stomp == 0 && closed_openwire == 0,
        "{}: {closed_stomp} idle STOMP and {closed_openwire} idle OpenWire connections were closed",
        target.name
    );
    // Close without the graceful goodbyes: dropping is how most idle clients leave anyway.
    drop(stomp_clients);
    drop(openwire_clients);
    drop(senders);
    Ok(Report {
        name: target.name.clone(),
        connections,
        rss_start_kb,
        rss_peak_kb: peak_kb,
        threads,
        stomp_idle,
        stomp_per_connection: per_connection(rss_start_kb, after_stomp_kb, stomp_idle),
        openwire_idle,
        openwire_per_connection: per_connection(after_stomp_kb, after_openwire_kb, openwire_idle),
        messages: received.load(Ordering::Relaxed),
        latencies,
        requests,
    })
}

/// Opens `count` STOMP connections, each subscribed to one of a hundred idle queues.
async fn open_stomp_idle(
    addr: SocketAddr,
    count: usize,
) -> anyhow::Result<Vec<(StompClient, Subscription)>> {
    let mut opened = Vec::with_capacity(count);
    let mut opening = JoinSet::new();
    for index in 0..count {
        if opening.len() >= OPENING_AT_ONCE {
            opened.push(opening.join_next().await.context("a connection task")???);
        }
        opening.spawn(async move {
            let client = StompClient::connect(addr, ConnectOptions::default())
                .await
                .with_context(|| format!("idle STOMP connection {index}"))?;
            let queue = format!("/queue/conns.idle.{}", index % 100);
            let subscription = client.subscribe(&queue, AckMode::Client, &[]).await?;
            anyhow::Ok((client, subscription))
        });
    }
    while let Some(result) = opening.join_next().await {
        opened.push(result??);
    }
    Ok(opened)
}

/// An idle OpenWire connection: its session and consumer live as long as it.
struct IdleOpenWire {
    client: OpenWireClient,
    _session: Session,
    _consumer: Consumer,
}

/// Opens `count` OpenWire connections, each with a session and a consumer on one of a hundred
/// idle queues.
async fn open_openwire_idle(addr: SocketAddr, count: usize) -> anyhow::Result<Vec<IdleOpenWire>> {
    let mut opened = Vec::with_capacity(count);
    let mut opening = JoinSet::new();
    let host = addr.ip().to_string();
    for index in 0..count {
        if opening.len() >= OPENING_AT_ONCE {
            opened.push(opening.join_next().await.context("a connection task")???);
        }
        let host = host.clone();
        opening.spawn(async move {
            let client = OpenWireClient::connect(&host, addr.port(), OpenWireOptions::default())
                .await
                .with_context(|| format!("idle OpenWire connection {index}"))?;
            let session = client.session(SessionMode::Client).await?;
            let queue = Destination::queue(format!("conns.idle.ow.{}", index % 100));
            let consumer = session.consumer(SubscribeOptions::new(queue)).await?;
            anyhow::Ok(IdleOpenWire { client, _session: session, _consumer: consumer })
        });
    }
    while let Some(result) = opening.join_next().await {
        opened.push(result??);
    }
    Ok(opened)
}

/// Request/reply every [`PROBE_EVERY`] until `stop`: the round trips, and how many there were.
async fn probe(
    addr: SocketAddr,
    duration: Duration,
    stop: Arc<AtomicBool>,
) -> anyhow::Result<(Latencies, usize)> {
    const REQUESTS: &str = "/queue/conns.probe";
    let responder = StompClient::connect(addr, ConnectOptions::default()).await?;
    let mut requests = responder.subscribe(REQUESTS, AckMode::Auto, &[]).await?;
    let responding = tokio::spawn(async move {
        while let Some(request) = requests.recv().await {
            let reply_to = request.header("reply-to").context("a request without reply-to")?;
            let correlation = request.header("correlation-id").unwrap_or("").to_owned();
            responder
                .send(reply_to, request.body().clone(), &[("correlation-id", &correlation)])
                .await?;
        }
        anyhow::Ok(())
    });
    let requester = StompClient::connect(addr, ConnectOptions::default()).await?;
    let mut replies = requester.subscribe("/temp-queue/probe", AckMode::Auto, &[]).await?;
    let mut samples = Vec::with_capacity((duration.as_millis() / PROBE_EVERY.as_millis()) as usize);
    let mut tick = tokio::time::interval(PROBE_EVERY);
    tick.set_missed_tick_behavior(tokio::time::MissedTickBehavior::Delay);
    let mut sequence = 0u64;
    while !stop.load(Ordering::Relaxed) {
        tick.tick().await;
        sequence += 1;
        let correlation = sequence.to_string();
        let sent = Instant::now();
        requester
            .send(
                REQUESTS,
                Bytes::from_static(b"ping"),
                &[("reply-to", "/temp-queue/probe"), ("correlation-id", &correlation)],
            )
            .await?;
        let reply = replies
            .recv_timeout(REPLY_LIMIT)
            .await
            .with_context(|| format!("request {sequence} got no reply within {REPLY_LIMIT:?}"))?;
        samples.push(sent.elapsed());
        ensure!(
            reply.header("correlation-id") == Some(correlation.as_str()),
            "request {sequence} got the reply to {:?}",
            reply.header("correlation-id")
        );
    }
    responding.abort();
    let count = samples.len();
    Ok((Latencies::new(samples), count))
}

/// A line of `/proc/<pid>/status` of the target (see [`benches::process::status_kb`]); 0
/// without a pid.
fn status_kb(pid: Option<u32>, field: &str) -> u64 {
    pid.map_or(0, |pid| benches::process::status_kb(pid, field))
}

/// The resident memory once the broker has handled what was just opened.
async fn settled_rss(pid: Option<u32>) -> u64 {
    tokio::time::sleep(Duration::from_secs(1)).await;
    status_kb(pid, "VmRSS:")
}
