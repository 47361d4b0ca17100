//! One scenario of `ferromq perf` run from a bench: a consumer system and a producer system
//! (the perf plugin's keys, e.g. `producer.deliveryMode=persistent`), consumers subscribed
//! first, then the producers, on one queue. The figure is seed 003's: messages received over
//! the time from the producers' start (every producer connected, the first send) to the last
//! message received. (`scripts/compare-activemq` divides by the consumers' own clock, first
//! message to last, which flatters a run whose producer finishes before the consumer's
//! first message: with small counts and asynchronous sends the consumer then only drains
//! its prefetch.)
//!
//! The keys go through the same parsing and the same mapping onto the load generator
//! (`client::load::perf::{producer_options, consumer_options}`) as `ferromq perf`; only the
//! sampler is left out (nothing here reads per-second samples), and consumers give up after
//! [`IDLE_TIMEOUT`] without a message instead of waiting forever, so a lost message fails
//! the bench instead of hanging it.

use std::sync::Arc;
use std::time::Duration;

use anyhow::{ensure, Context};
use client::load::perf::{consumer_options, producer_options, PerfRole, PerfSettings};
use client::load::{run_consumer_observed, run_producer, LoadEvent, LoadReport, Meter, Observer};

/// A consumer that receives nothing for this long stops, and the scenario fails.
pub const IDLE_TIMEOUT: Duration = Duration::from_secs(60);

/// A scenario: how many clients on each side, and each side's perf keys (`KEY=VALUE`)
/// besides the broker URL, the client count and the destination, which [`run`] sets.
#[derive(Debug, Clone)]
pub struct PerfPair {
    pub clients: usize,
    pub producer: Vec<String>,
    pub consumer: Vec<String>,
}

/// What both sides reported.
#[derive(Debug, Clone)]
pub struct PairOutcome {
    pub producer: LoadReport,
    pub consumer: LoadReport,
    /// From the producers' start to the last message received.
    pub span: Duration,
}

impl PairOutcome {
    /// Messages per second received over [`PairOutcome::span`].
    pub fn received_rate(&self) -> f64 {
        let seconds = self.span.as_secs_f64();
        if seconds > 0.0 {
            self.consumer.messages as f64 / seconds
        } else {
            0.0
        }
    }
}

/// The perf settings of one side: `keys` after the common ones, so that they win.
fn settings(
    role: PerfRole,
    broker_url: &str,
    queue: &str,
    clients: usize,
    keys: &[String],
) -> anyhow::Result<PerfSettings> {
    let side = match role {
        PerfRole::Producer => "producer",
        PerfRole::Consumer => "consumer",
    };
    let mut overrides = vec![
        format!("factory.brokerURL={broker_url}"),
        format!("sysTest.numClients={clients}"),
        "sysTest.samplers=tp".to_owned(),
        format!("{side}.destName=queue://{queue}"),
    ];
    overrides.extend(keys.iter().cloned());
    PerfSettings::parse(role, None, &overrides)
        .with_context(|| format!("{side} keys {}", overrides.join(" ")))
}

/// Runs `pair` against `broker_url` on `queue`: the consumers subscribe, then the producers
/// send; returns once both sides are done, failing if a side falls short of its count.
pub async fn run(pair: &PerfPair, broker_url: &str, queue: &str) -> anyhow::Result<PairOutcome> {
    let producing = settings(PerfRole::Producer, broker_url, queue, pair.clients, &pair.producer)?;
    let consuming = settings(PerfRole::Consumer, broker_url, queue, pair.clients, &pair.consumer)?;
    // The meters keep each side's clock start: the producers' start, the first message in.
    let (producer_meter, consumer_meter) = (Meter::new(pair.clients), Meter::new(pair.clients));
    let mut consumer = consumer_options(&consuming, &consumer_meter);
    consumer.receive_timeout = IDLE_TIMEOUT;
    let producer = producer_options(&producing, &producer_meter);

    // Every consumer says when it has subscribed; the producers start after the last.
    let (ready_tx, mut ready_rx) = tokio::sync::mpsc::unbounded_channel::<()>();
    let observer: Observer = Arc::new(move |event: &LoadEvent| {
        if let LoadEvent::Ready { .. } = event {
            let _ = ready_tx.send(());
        }
    });
    let consumers = tokio::spawn(run_consumer_observed(consumer, observer));
    for _ in 0..pair.clients {
        if ready_rx.recv().await.is_none() {
            // The consumer run ended (and dropped the observer) before subscribing them all.
            break;
        }
    }
    if consumers.is_finished() {
        let outcome = consumers.await.context("the consumer task")?;
        anyhow::bail!("the consumers ended before the producers started: {outcome:?}");
    }
    let producer = match run_producer(producer).await {
        Ok(report) => report,
        Err(error) => {
            // The consumers would wait for messages that never come.
            consumers.abort();
            return Err(error).context("producers");
        }
    };
    let consumer = consumers.await.context("the consumer task")?.context("consumers")?;
    ensure!(producer.is_complete(), "the producers sent {producer}");
    ensure!(consumer.is_complete(), "the consumers received {consumer}");
    let (Some(sent), Some(received)) = (producer_meter.started(), consumer_meter.started()) else {
        anyhow::bail!("a side never started its clock");
    };
    let span = (received + consumer.elapsed).saturating_duration_since(sent);
    Ok(PairOutcome { producer, consumer, span })
}
