//! `ferromq perf`: the ActiveMQ performance plugin's producer and consumer systems
//! (`mvn activemq-perf:producer` / `activemq-perf:consumer`), driven by the same
//! `.properties` files, printing the same SYSTEM THROUGHPUT SUMMARY.
//!
//! ## Layout
//!
//! - `props.rs`: [`PerfSettings`], the plugin's keys with its defaults, checked;
//! - `summary.rs`: [`ThroughputSummary`], the summary block and its arithmetic;
//! - `report.rs`: the XML report and the SVG chart written to `sysTest.reportDir`;
//! - this file: [`run_perf`], which runs [`run_producer`](super::run_producer) or
//!   [`run_consumer`](super::run_consumer) (the one load generator) with a [`Meter`] and
//!   samples it.
//!
//! ## What a run does
//!
//! `numClients` clients, each a load thread with its own connection, named
//! `<clientPrefix><n>` from 0. A producer client sends to its share of `totalDests`
//! destinations (`destDistro`), a consumer client receives from the first of its share.
//! Every message carries its send time, so the consumer reports end-to-end latency.
//!
//! The sampler counts each client's messages per `interval`. A timed run (`sendDuration`,
//! `recvDuration`) leaves out `rampUpTime` at the start and `rampDownTime` at the end and
//! takes `(duration - rampUp - rampDown) / interval` whole samples; latencies are recorded
//! only in that window too. A counted run (`sendCount`, `recvCount`) samples from start to
//! end, its last sample being the partial interval at the end, so its System Total
//! Throughput is exactly the messages sent or received. A producer's clock starts once
//! every client is connected; a consumer's at its first message (the plugin's starts at
//! connection, which counts the wait for the producers as empty samples).
//!
//! With `cpu` in `sysTest.samplers` (the plugin's default), the same ticks also sample the
//! machine's CPU use ([`cpu`]).

pub mod cpu;
pub mod props;
pub mod report;
pub mod summary;

use std::time::Duration;

use tokio::sync::oneshot;
use tokio::time::Instant;

pub use cpu::{CpuRecord, CpuSample, CpuSummary};
pub use props::{DestDistro, PerfRole, PerfSettings, PropsError, RunBasis, SessAckMode};
pub use report::{write_reports, ReportError};
pub use summary::{java_double, ClientSamples, Named, ThroughputSummary};

use super::{
    run_consumer_observed, run_producer_observed, ConsumerAckMode, ConsumerOptions, Latencies,
    LoadError, LoadReport, Meter, Observer, ProducerOptions,
};

/// What a perf run measured.
#[derive(Debug, Clone)]
pub struct PerfOutcome {
    /// Each client's samples, in client order.
    pub clients: Vec<ClientSamples>,
    /// The summary of the samples (`None` without clients).
    pub summary: Option<ThroughputSummary>,
    /// Latency percentiles over the sampled window: a consumer's end-to-end latency, a
    /// producer's send (or commit) latency when it waited for the broker.
    pub latency: Option<Latencies>,
    /// The sampler interval.
    pub interval: Duration,
    /// The ramp-up left out (timed runs).
    pub ramp_up: Duration,
    /// The ramp-down left out (timed runs).
    pub ramp_down: Duration,
    /// The sampler's duration (timed runs).
    pub sampled_duration: Option<Duration>,
    /// The whole run, ramps included: messages per client, elapsed time.
    pub load: LoadReport,
    /// The CPU samples, taken at the throughput sampler's ticks (`None` without the `cpu`
    /// sampler).
    pub cpu: Option<CpuRecord>,
}

/// How the sampler runs.
#[derive(Debug, Clone, Copy)]
enum Sampling {
    /// Skip `ramp_up`, then take `samples` whole samples.
    Timed { ramp_up: Duration, samples: u64 },
    /// Sample until the run ends, then take the partial last interval.
    Counted,
}

/// The producer options of `settings` (exposed for tests and benches).
pub fn producer_options(settings: &PerfSettings, meter: &Meter) -> ProducerOptions {
    let (message_count, duration) = match settings.basis {
        RunBasis::Count(count) => (count, None),
        RunBasis::Time(duration) => (0, Some(duration)),
    };
    let destinations: Vec<_> =
        (0..settings.num_clients).map(|i| settings.client_destinations(i)).collect();
    ProducerOptions {
        broker: settings.broker.clone(),
        destination: settings.dest_name.clone(),
        message_count,
        message_size: settings.message_size,
        persistent: settings.persistent,
        parallel_threads: settings.num_clients,
        transaction_batch_size: if settings.sess_transacted { settings.commit_after } else { 0 },
        sleep: settings.delay,
        // ActiveMQ's client: synchronous for persistent sends outside transactions, unless
        // useAsyncSend.
        sync_send: settings.use_async_send.then_some(false),
        user: settings.user.clone(),
        password: settings.password.clone(),
        duration,
        thread_destinations: Some(destinations),
        thread_prefix: Some(settings.client_prefix.clone()),
        meter: Some(meter.clone()),
        stamp_send_time: true,
        ..ProducerOptions::default()
    }
}

/// The consumer options of `settings` (exposed for tests and benches).
pub fn consumer_options(settings: &PerfSettings, meter: &Meter) -> ConsumerOptions {
    let (message_count, duration) = match settings.basis {
        RunBasis::Count(count) => (count, None),
        RunBasis::Time(duration) => (u64::MAX, Some(duration)),
    };
    // A consumer receives from the first destination of its share, as the plugin's does.
    let destinations: Vec<_> =
        (0..settings.num_clients).map(|i| settings.client_destinations(i).swap_remove(0)).collect();
    let transacted = settings.sess_transacted || settings.ack_mode == SessAckMode::Transacted;
    ConsumerOptions {
        broker: settings.broker.clone(),
        destination: settings.dest_name.clone(),
        message_count,
        parallel_threads: settings.num_clients,
        transaction_batch_size: if transacted { settings.commit_after } else { 0 },
        // The plugin's clientAck never acknowledges (the broker redelivers everything
        // later); ferromq acknowledges every commitAfterXMsgs messages.
        ack_mode: match settings.ack_mode {
            SessAckMode::Client => ConsumerAckMode::Client,
            _ => ConsumerAckMode::Auto,
        },
        ack_batch_size: settings.commit_after,
        durable: settings.durable,
        sleep: settings.delay,
        user: settings.user.clone(),
        password: settings.password.clone(),
        duration,
        thread_destinations: Some(destinations),
        thread_prefix: Some(settings.client_prefix.clone()),
        meter: Some(meter.clone()),
        end_to_end_latency: true,
        selector: settings.selector.clone(),
        unsubscribe: settings.durable && settings.unsubscribe,
        ..ConsumerOptions::default()
    }
}

/// Runs the producer or consumer system `settings` describes, counting into `meter`
/// (made with `settings.num_clients` threads; a progress display may read it meanwhile),
/// telling `observer` when each client is ready and done.
pub async fn run_perf(
    settings: &PerfSettings,
    meter: &Meter,
    observer: Observer,
) -> Result<PerfOutcome, LoadError> {
    let interval = settings.sampler.interval;
    let (sampling, ramp_up, ramp_down, sampled_duration) = match settings.basis {
        RunBasis::Time(duration) => {
            let sampled = settings.sampler.duration.unwrap_or(duration);
            let (up, down) = settings.ramps(duration);
            let window = sampled.saturating_sub(up + down);
            let samples = (window.as_nanos() / interval.as_nanos().max(1)).max(1) as u64;
            (Sampling::Timed { ramp_up: up, samples }, up, down, Some(sampled))
        }
        RunBasis::Count(_) => (Sampling::Counted, Duration::ZERO, Duration::ZERO, None),
    };
    // Latencies count from the start of sampling.
    meter.set_measuring(ramp_up.is_zero());

    let (done_tx, done_rx) = oneshot::channel::<()>();
    let sampler =
        tokio::spawn(sample(meter.clone(), sampling, interval, settings.cpu_sampler, done_rx));
    let load = match settings.role {
        PerfRole::Producer => {
            run_producer_observed(producer_options(settings, meter), observer).await
        }
        PerfRole::Consumer => {
            run_consumer_observed(consumer_options(settings, meter), observer).await
        }
    };
    let load = match load {
        Ok(load) => load,
        Err(error) => {
            sampler.abort();
            return Err(error);
        }
    };
    let _ = done_tx.send(());
    let Sampled { ticks, cpu } =
        sampler.await.map_err(|error| LoadError::Aborted(error.to_string()))?;
    meter.set_measuring(false);

    let clients: Vec<ClientSamples> = (0..settings.num_clients)
        .map(|client| ClientSamples {
            name: settings.client_name(client),
            samples: ticks.iter().map(|tick| tick.get(client).copied().unwrap_or(0)).collect(),
        })
        .collect();
    Ok(PerfOutcome {
        summary: ThroughputSummary::compute(&clients),
        clients,
        latency: load.latency,
        interval,
        ramp_up,
        ramp_down,
        sampled_duration,
        load,
        cpu,
    })
}

/// What the sampler took.
struct Sampled {
    /// Every client's count per tick.
    ticks: Vec<Vec<u64>>,
    /// The CPU samples at the same ticks, when asked for.
    cpu: Option<CpuRecord>,
}

/// Takes a CPU sample at each tick: the counters' change since the previous tick.
struct CpuProbe {
    last: Option<(cpu::CpuSnapshot, Instant)>,
    samples: Vec<CpuSample>,
    error: Option<String>,
}

impl CpuProbe {
    /// Starts counting from now.
    fn start() -> CpuProbe {
        let mut probe = CpuProbe { last: None, samples: Vec::new(), error: None };
        probe.mark();
        probe
    }

    /// Reads the counters; after a first reading, records the sample since the previous.
    /// A failed read ends the sampling (the counters are the same files every time).
    fn mark(&mut self) {
        if self.error.is_some() {
            return;
        }
        match cpu::CpuSnapshot::read() {
            Ok(now) => {
                let at = Instant::now();
                if let Some((before, then)) = &self.last {
                    let index = self.samples.len();
                    self.samples.push(CpuSample::between(index, before, &now, at - *then));
                }
                self.last = Some((now, at));
            }
            Err(error) => self.error = Some(error.to_string()),
        }
    }

    fn finish(self) -> CpuRecord {
        match self.error {
            Some(error) => CpuRecord::Unavailable(error),
            None => CpuRecord::Samples(self.samples),
        }
    }
}

/// The sampler: every client's count per interval, as [`Sampling`] says, and with `cpu`
/// the CPU use over the same intervals. `done` fires when the load run has ended.
async fn sample(
    meter: Meter,
    sampling: Sampling,
    interval: Duration,
    cpu: bool,
    mut done: oneshot::Receiver<()>,
) -> Sampled {
    let mut ticks = Vec::new();
    let start = tokio::select! {
        start = meter.wait_start() => Instant::from_std(start),
        // The run ended without starting (nothing to send or receive).
        _ = &mut done => {
            let cpu = cpu.then(|| CpuRecord::Samples(Vec::new()));
            return Sampled { ticks: vec![meter.take_all()], cpu };
        }
    };
    let mut probe: Option<CpuProbe>;
    match sampling {
        Sampling::Timed { ramp_up, samples } => {
            let first = start + ramp_up;
            if !ramp_up.is_zero() {
                tokio::time::sleep_until(first).await;
                // What came during the ramp-up is left out.
                meter.take_all();
                meter.set_measuring(true);
            }
            // The CPU is sampled in the same window as the throughput, as the plugin's
            // CpuSamplerTask runs vmstat from ramp-up end to ramp-down start.
            probe = cpu.then(CpuProbe::start);
            // Whole samples only, each ending at a fixed tick (no drift); the run's own
            // clock outlasts them by the ramp-down.
            for k in 1..=samples {
                tokio::time::sleep_until(first + interval * k as u32).await;
                ticks.push(meter.take_all());
                if let Some(probe) = &mut probe {
                    probe.mark();
                }
            }
            meter.set_measuring(false);
        }
        Sampling::Counted => {
            probe = cpu.then(CpuProbe::start);
            let mut k = 1u32;
            loop {
                tokio::select! {
                    _ = tokio::time::sleep_until(start + interval * k) => {
                        ticks.push(meter.take_all());
                        k += 1;
                    }
                    _ = &mut done => {
                        // The partial last interval, so that the total is every message.
                        ticks.push(meter.take_all());
                        if let Some(probe) = &mut probe {
                            probe.mark();
                        }
                        break;
                    }
                }
                if let Some(probe) = &mut probe {
                    probe.mark();
                }
            }
        }
    }
    Sampled { ticks, cpu: probe.map(CpuProbe::finish) }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[tokio::test(start_paused = true)]
    async fn a_counted_run_samples_every_message() {
        let meter = Meter::new(2);
        let (done_tx, done_rx) = oneshot::channel();
        let sampler = tokio::spawn(sample(
            meter.clone(),
            Sampling::Counted,
            Duration::from_secs(1),
            true,
            done_rx,
        ));
        tokio::task::yield_now().await;
        meter.mark_start();
        meter.count(0);
        tokio::time::sleep(Duration::from_millis(1500)).await;
        meter.count(1);
        meter.count(1);
        tokio::time::sleep(Duration::from_millis(200)).await;
        done_tx.send(()).expect("sampler listening");
        let Sampled { ticks, cpu } = sampler.await.expect("sampler");
        assert_eq!(ticks, vec![vec![1, 0], vec![0, 2]]);
        // One CPU sample per throughput sample, where /proc can be read.
        match cpu {
            Some(CpuRecord::Samples(samples)) => assert_eq!(samples.len(), 2),
            Some(CpuRecord::Unavailable(why)) => assert!(why.contains("/proc"), "{why}"),
            None => panic!("the cpu sampler was asked for"),
        }
    }

    #[tokio::test(start_paused = true)]
    async fn a_timed_run_leaves_out_the_ramp_up() {
        let meter = Meter::new(1);
        meter.set_measuring(false);
        let (_done_tx, done_rx) = oneshot::channel();
        let sampling = Sampling::Timed { ramp_up: Duration::from_secs(1), samples: 2 };
        let sampler =
            tokio::spawn(sample(meter.clone(), sampling, Duration::from_secs(1), false, done_rx));
        tokio::task::yield_now().await;
        meter.mark_start();
        meter.count(0); // in the ramp-up: left out
        tokio::time::sleep(Duration::from_millis(1500)).await;
        assert!(meter.is_measuring());
        meter.count(0);
        tokio::time::sleep(Duration::from_millis(1000)).await;
        meter.count(0);
        meter.count(0);
        let Sampled { ticks, cpu } = sampler.await.expect("sampler");
        assert_eq!(ticks, vec![vec![1], vec![2]]);
        assert!(cpu.is_none());
        assert!(!meter.is_measuring());
    }
}
