//! End-to-end queue scenarios over STOMP on loopback, through the real broker.
//!
//! `cargo bench -p benches --bench stomp_queue` runs each scenario a few times and prints the
//! median; `-- --quick` runs each once with small counts (CI's smoke mode). With
//! `FERROMQ_BENCH_PEER=host:port` (a peer broker's STOMP connector, such as Apache ActiveMQ
//! started by `../shared/peers/activemq/start.sh`), every run alternates ferromq and the peer
//! (A B A B, never both at once) and the table reports the ratio.
//!
//! Method (BENCHMARKS.md): consumers start first, then producers; a warm-up is sent and
//! consumed first and discarded; the clock runs from the first timed send to the last
//! message consumed; message counts are fixed.

use std::net::SocketAddr;
use std::sync::Arc;
use std::time::{Duration, Instant};

use anyhow::{bail, Context};
use benches::{median, Latencies};
use bytes::Bytes;
use client::{AckMode, ConnectOptions, StompClient};

#[derive(Clone, Copy)]
struct Scenario {
    id: &'static str,
    what: &'static str,
    persistent: bool,
    /// Wait for each send's receipt before the next (a blocking producer).
    blocking: bool,
    producers: usize,
    consumers: usize,
    /// Messages per producer in a full run.
    messages: usize,
}

const SCENARIOS: &[Scenario] = &[
    Scenario {
        id: "S1",
        what: "non-persistent, 1 producer + 1 consumer",
        persistent: false,
        blocking: false,
        producers: 1,
        consumers: 1,
        messages: 50_000,
    },
    Scenario {
        id: "S2",
        what: "persistent, blocking send, 1 producer + 1 consumer",
        persistent: true,
        blocking: true,
        producers: 1,
        consumers: 1,
        messages: 5_000,
    },
    Scenario {
        id: "S3",
        what: "persistent, async send, 1 producer + 1 consumer",
        persistent: true,
        blocking: false,
        producers: 1,
        consumers: 1,
        messages: 20_000,
    },
    Scenario {
        id: "S6",
        what: "persistent, blocking send, 25 producers + 25 consumers",
        persistent: true,
        blocking: true,
        producers: 25,
        consumers: 25,
        messages: 400,
    },
];

const MESSAGE_SIZE: usize = 1024;
const WARM_UP: usize = 200;

struct RunResult {
    rate: f64,
    send_latency: Option<Latencies>,
}

fn main() -> anyhow::Result<()> {
    let quick = std::env::args().any(|a| a == "--quick");
    let runs = if quick { 1 } else { 3 };
    let scale = if quick { 0.02 } else { 1.0 };
    let peer: Option<SocketAddr> = match std::env::var("FERROMQ_BENCH_PEER") {
        Ok(text) => Some(text.parse().with_context(|| format!("FERROMQ_BENCH_PEER={text}"))?),
        Err(_) => None,
    };
    let runtime = tokio::runtime::Builder::new_multi_thread().enable_all().build()?;
    runtime.block_on(async move {
        println!(
            "{:<4} {:<8} {:<55} {:>12} {:>10} {:>10} {:>12} {:>7}",
            "id", "store", "scenario", "msgs/s", "p50 send", "p99 send", "peer msgs/s", "ratio"
        );
        for store in [conf::StoreKind::Journal, conf::StoreKind::Memory] {
            let data = tempfile::tempdir()?;
            let mut config = conf::Config::default();
            config.store.kind = store;
            config.broker.data_dir = data.path().to_path_buf();
            config.transport.connectors = vec!["stomp://127.0.0.1:0".parse()?];
            config.admin.enabled = false;
            let broker = broker::Broker::start(config).await?;
            let ours = broker.stomp_addr().context("no STOMP connector")?;
            for scenario in SCENARIOS {
                // Non-persistent traffic never reaches the store: measure it once.
                if !scenario.persistent && store != conf::StoreKind::Journal {
                    continue;
                }
                report(ours, peer, scenario, store, runs, scale).await?;
            }
            broker.shutdown().await;
        }
        anyhow::Ok(())
    })
}

/// Runs `scenario` `runs` times (alternating with the peer, if any) and prints its row.
async fn report(
    ours: SocketAddr,
    peer: Option<SocketAddr>,
    scenario: &Scenario,
    store: conf::StoreKind,
    runs: usize,
    scale: f64,
) -> anyhow::Result<()> {
    let messages = ((scenario.messages as f64 * scale) as usize).max(10);
    let mut our_rates = Vec::new();
    let mut peer_rates = Vec::new();
    let mut last = None;
    for run in 0..runs {
        let queue = format!("bench.{}.{run}.{}", scenario.id, std::process::id());
        let result = run_scenario(ours, scenario, messages, &queue).await?;
        our_rates.push(result.rate);
        last = result.send_latency;
        if let Some(peer) = peer {
            peer_rates.push(run_scenario(peer, scenario, messages, &queue).await?.rate);
        }
    }
    let ours = median(our_rates);
    let (p50, p99) = match &last {
        Some(l) => (
            format!("{:.3} ms", ms(l.percentile(50.0))),
            format!("{:.3} ms", ms(l.percentile(99.0))),
        ),
        None => ("-".to_owned(), "-".to_owned()),
    };
    let (peer_text, ratio) = if peer_rates.is_empty() {
        ("-".to_owned(), "-".to_owned())
    } else {
        let theirs = median(peer_rates);
        (format!("{theirs:.0}"), format!("{:.2}x", ours / theirs))
    };
    println!(
        "{:<4} {:<8} {:<55} {:>12.0} {:>10} {:>10} {:>12} {:>7}",
        scenario.id,
        store.as_str(),
        scenario.what,
        ours,
        p50,
        p99,
        peer_text,
        ratio
    );
    Ok(())
}

fn ms(d: Duration) -> f64 {
    d.as_secs_f64() * 1000.0
}

async fn run_scenario(
    addr: SocketAddr,
    scenario: &Scenario,
    messages: usize,
    queue: &str,
) -> anyhow::Result<RunResult> {
    let destination = format!("/queue/{queue}");
    let body = Bytes::from(vec![b'x'; MESSAGE_SIZE]);
    let total = messages * scenario.producers;
    let expected = WARM_UP + total;

    // Consumers first.
    let (done_tx, mut done_rx) = tokio::sync::mpsc::unbounded_channel::<Instant>();
    let received = Arc::new(std::sync::atomic::AtomicUsize::new(0));
    let mut consumer_tasks = Vec::new();
    for _ in 0..scenario.consumers {
        let client = StompClient::connect(addr, ConnectOptions::default()).await?;
        let mut subscription = client.subscribe(&destination, AckMode::Auto, &[]).await?;
        let received = received.clone();
        let done_tx = done_tx.clone();
        consumer_tasks.push(tokio::spawn(async move {
            while let Ok(_message) = subscription.recv_timeout(Duration::from_secs(30)).await {
                let count = received.fetch_add(1, std::sync::atomic::Ordering::Relaxed) + 1;
                if count == WARM_UP || count == expected {
                    let _ = done_tx.send(Instant::now());
                }
                if count >= expected {
                    break;
                }
            }
            drop(client);
        }));
    }
    let persistent = if scenario.persistent { "true" } else { "false" };
    let headers = [("persistent", persistent)];

    // Warm-up, discarded.
    let warm = StompClient::connect(addr, ConnectOptions::default()).await?;
    for _ in 1..WARM_UP {
        warm.send(&destination, body.clone(), &headers).await?;
    }
    warm.send_with_receipt(&destination, body.clone(), &headers).await?;
    let expected_warm = tokio::time::timeout(Duration::from_secs(30), done_rx.recv()).await;
    if !matches!(expected_warm, Ok(Some(_))) {
        bail!("{}: warm-up messages did not arrive", scenario.id);
    }
    drop(warm);

    let start = Instant::now();
    let mut producer_tasks = Vec::new();
    for _ in 0..scenario.producers {
        let client = StompClient::connect(addr, ConnectOptions::default()).await?;
        let destination = destination.clone();
        let body = body.clone();
        let blocking = scenario.blocking;
        producer_tasks.push(tokio::spawn(async move {
            let mut latencies = Vec::with_capacity(if blocking { messages } else { 0 });
            for _ in 0..messages {
                if blocking {
                    let sent = Instant::now();
                    client
                        .send_with_receipt(
                            &destination,
                            body.clone(),
                            &[("persistent", persistent)],
                        )
                        .await?;
                    latencies.push(sent.elapsed());
                } else {
                    client.send(&destination, body.clone(), &[("persistent", persistent)]).await?;
                }
            }
            anyhow::Ok(latencies)
        }));
    }
    let mut latencies = Vec::new();
    for task in producer_tasks {
        latencies.extend(task.await??);
    }
    let end = match tokio::time::timeout(Duration::from_secs(120), done_rx.recv()).await {
        Ok(Some(end)) => end,
        _ => bail!(
            "{}: only {} of {expected} messages arrived",
            scenario.id,
            received.load(std::sync::atomic::Ordering::Relaxed)
        ),
    };
    for task in consumer_tasks {
        task.abort();
    }
    let elapsed = end.duration_since(start).as_secs_f64();
    Ok(RunResult {
        rate: total as f64 / elapsed,
        send_latency: scenario.blocking.then(|| Latencies::new(latencies)),
    })
}
