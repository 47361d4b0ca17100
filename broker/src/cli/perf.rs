//! `ferromq perf producer|consumer --props FILE`: the ActiveMQ performance plugin's
//! producer and consumer systems (`mvn activemq-perf:producer -DsysTest.propsConfigFile=...`)
//! on top of `client::load::perf`, with the same properties files and the same SYSTEM
//! THROUGHPUT SUMMARY, against ferromq or Apache ActiveMQ.
//!
//! Warnings (ignored factory properties, ...) go to stderr, and so does a progress line
//! while the run goes on when stderr is a terminal. The summary, the latency percentiles and
//! the report paths go to stdout.

use std::io::{IsTerminal, Write};
use std::path::PathBuf;
use std::sync::Arc;
use std::time::{Duration, Instant};

use anyhow::Context;
use clap::{Args, Subcommand, ValueEnum};
use client::load::perf::{
    run_perf, write_reports, CpuRecord, CpuSummary, PerfOutcome, PerfRole, PerfSettings, RunBasis,
};
use client::load::{BrokerUrl, Endpoint, LoadEvent, Meter, Observer, WireProtocol};

use super::{load_error, runtime};

/// `ferromq perf`: its two systems.
#[derive(Debug, Args)]
pub struct PerfArgs {
    #[command(subcommand)]
    system: PerfSystem,
}

#[derive(Debug, Subcommand)]
enum PerfSystem {
    /// Runs sysTest.numClients producers as the performance plugin's
    /// `activemq-perf:producer` does and prints its SYSTEM THROUGHPUT SUMMARY.
    Producer(PerfRunArgs),
    /// Runs sysTest.numClients consumers as the performance plugin's
    /// `activemq-perf:consumer` does and prints its SYSTEM THROUGHPUT SUMMARY.
    Consumer(PerfRunArgs),
}

/// The options of both systems.
#[derive(Debug, Args)]
struct PerfRunArgs {
    /// The plugin's properties file (sysTest.*, producer.* or consumer.*, tpSampler.*,
    /// factory.*). Without one, the plugin's defaults apply.
    #[arg(long, value_name = "FILE")]
    props: Option<PathBuf>,
    /// KEY=VALUE, overriding the file (repeatable), e.g. --set sysTest.numClients=5.
    #[arg(long = "set", value_name = "KEY=VALUE")]
    set: Vec<String>,
    /// The broker, overriding factory.brokerURL: tcp://HOST:PORT or nio://HOST:PORT
    /// (OpenWire), stomp://HOST:PORT (STOMP), amqp://HOST:PORT (AMQP 1.0), mqtt://HOST:PORT
    /// (MQTT 3.1.1, topics only), or several
    /// OpenWire or STOMP brokers as failover:(URL,URL)?OPTIONS (ActiveMQ's failover
    /// options; a lost connection is replaced and the clients carry on).
    #[arg(long = "broker-url", value_name = "URL")]
    broker_url: Option<String>,
    /// The protocol, overriding the URL's scheme (a port that is the other protocol's
    /// default becomes this one's).
    #[arg(long, value_enum, value_name = "PROTOCOL")]
    protocol: Option<ProtocolArg>,
    /// The report directory, overriding sysTest.reportDir.
    #[arg(long = "report-dir", value_name = "DIR")]
    report_dir: Option<PathBuf>,
    /// More KEY=VALUE overrides, as the plugin takes them after -D.
    #[arg(value_name = "KEY=VALUE")]
    overrides: Vec<String>,
}

#[derive(Debug, Clone, Copy, PartialEq, Eq, ValueEnum)]
enum ProtocolArg {
    Openwire,
    Stomp,
    Amqp,
    Mqtt,
}

/// Runs `ferromq perf`.
pub fn run(args: PerfArgs) -> anyhow::Result<()> {
    let (role, args) = match args.system {
        PerfSystem::Producer(args) => (PerfRole::Producer, args),
        PerfSystem::Consumer(args) => (PerfRole::Consumer, args),
    };
    let settings = settings(role, &args)?;
    for warning in &settings.warnings {
        eprintln!("ferromq perf: warning: {warning}");
    }
    println!("{}", describe(&settings));

    let meter = Meter::new(settings.num_clients);
    let runtime = runtime()?;
    let outcome = runtime.block_on(async {
        let progress =
            std::io::stderr().is_terminal().then(|| tokio::spawn(show_progress(meter.clone())));
        let outcome = run_perf(&settings, &meter, quiet()).await;
        if let Some(progress) = progress {
            progress.abort();
            eprintln!();
        }
        outcome
    });
    let outcome = outcome.map_err(load_error)?;
    print_results(&settings, &outcome);
    let (xml, svg) = write_reports(&settings, &outcome)?;
    println!("Created performance report: {}", absolute(xml).display());
    println!("Created throughput chart: {}", absolute(svg).display());
    Ok(())
}

/// The settings from the file and the command line (which wins).
fn settings(role: PerfRole, args: &PerfRunArgs) -> anyhow::Result<PerfSettings> {
    let text = match &args.props {
        Some(path) => Some(
            std::fs::read_to_string(path)
                .with_context(|| format!("cannot read the properties file {}", path.display()))?,
        ),
        None => None,
    };
    let origin = args.props.as_ref().map(|path| path.display().to_string()).unwrap_or_default();
    let mut overrides: Vec<String> = args.set.clone();
    overrides.extend(args.overrides.iter().map(|o| o.strip_prefix("-D").unwrap_or(o).to_owned()));
    if let Some(url) = &args.broker_url {
        overrides.push(format!("factory.brokerURL={url}"));
    }
    if let Some(dir) = &args.report_dir {
        overrides.push(format!("sysTest.reportDir={}", dir.display()));
    }
    if let Some(protocol) = args.protocol {
        // Rewrite the URL's scheme before parsing, so the result is checked like any URL.
        let file = text.as_deref().map(|text| (origin.as_str(), text));
        let base = PerfSettings::parse(role, file, &overrides)?;
        overrides.push(format!("factory.brokerURL={}", with_protocol(&base, protocol)?));
    }
    let file = text.as_deref().map(|text| (origin.as_str(), text));
    Ok(PerfSettings::parse(role, file, &overrides)?)
}

/// The broker URL of `settings` over `protocol`: each broker's scheme replaced (and its
/// port, where it was the old protocol's default); a failover URL keeps its list and
/// options.
fn with_protocol(settings: &PerfSettings, protocol: ProtocolArg) -> anyhow::Result<String> {
    let wanted = match protocol {
        ProtocolArg::Openwire => WireProtocol::OpenWire,
        ProtocolArg::Stomp => WireProtocol::Stomp,
        ProtocolArg::Amqp => WireProtocol::Amqp,
        ProtocolArg::Mqtt => WireProtocol::Mqtt,
    };
    Ok(rewrite_protocol(&settings.broker, wanted))
}

fn rewrite_protocol(broker: &BrokerUrl, wanted: WireProtocol) -> String {
    let rewrite = |endpoint: &Endpoint| {
        let mut port = endpoint.port();
        if port == endpoint.protocol().default_port() {
            port = wanted.default_port();
        }
        let scheme = wanted.scheme();
        let host = endpoint.host();
        match host.contains(':') {
            true => format!("{scheme}://[{host}]:{port}"),
            false => format!("{scheme}://{host}:{port}"),
        }
    };
    let brokers: Vec<String> = broker.endpoints().iter().map(rewrite).collect();
    if broker.failover().is_none() {
        return brokers.join(",");
    }
    // The options as written, so that the rewritten URL reads like the given one.
    let options = broker
        .as_str()
        .rsplit_once(')')
        .and_then(|(_, after)| after.strip_prefix('?'))
        .map(|query| format!("?{query}"))
        .unwrap_or_default();
    format!("failover:({}){options}", brokers.join(","))
}

/// `Running 25 producer clients (JmsProducer0..24) against tcp://... : ...`
fn describe(settings: &PerfSettings) -> String {
    let role = match settings.role {
        PerfRole::Producer => "producer",
        PerfRole::Consumer => "consumer",
    };
    let what = match settings.role {
        PerfRole::Producer => format!(
            "{} {}-byte messages to {}",
            if settings.persistent { "persistent" } else { "non-persistent" },
            settings.message_size,
            settings.dest_name
        ),
        PerfRole::Consumer => format!("from {}", settings.dest_name),
    };
    let sampling = match settings.basis {
        RunBasis::Time(duration) => {
            let (up, down) = settings.ramps(duration);
            format!(
                "for {} ms, sampling every {} ms (ramp up {} ms, ramp down {} ms)",
                duration.as_millis(),
                settings.sampler.interval.as_millis(),
                up.as_millis(),
                down.as_millis()
            )
        }
        RunBasis::Count(count) => format!(
            "{count} messages per client, sampling every {} ms",
            settings.sampler.interval.as_millis()
        ),
    };
    format!(
        "Running {} {role} clients ({}0..{}) against {}: {what}, {sampling}",
        settings.num_clients,
        settings.client_prefix,
        settings.num_clients - 1,
        settings.broker
    )
}

/// Per-client events are not printed: 25 clients' lines would drown the summary.
fn quiet() -> Observer {
    Arc::new(|_: &LoadEvent| {})
}

/// `12.0 s  123456 messages  10234 msgs/s` on stderr, rewritten every half second.
async fn show_progress(meter: Meter) {
    let every = Duration::from_millis(500);
    let mut last = (Instant::now(), 0u64);
    loop {
        tokio::time::sleep(every).await;
        let now = Instant::now();
        let total = meter.grand_total();
        let rate = (total - last.1) as f64 / (now - last.0).as_secs_f64();
        let elapsed = meter.started().map_or(0.0, |start| (now - start).as_secs_f64());
        let mut err = std::io::stderr().lock();
        let _ = write!(err, "\r{elapsed:7.1} s  {total:>10} messages  {rate:>9.0} msgs/s ");
        let _ = err.flush();
        last = (now, total);
    }
}

/// The summary block, then the latencies and the whole run's count.
fn print_results(settings: &PerfSettings, outcome: &PerfOutcome) {
    match &outcome.summary {
        Some(summary) => print!("{summary}"),
        None => println!("No client was sampled."),
    }
    match &outcome.latency {
        Some(latency) => println!("Latency ({} messages): {latency}", latency.count),
        None => println!("Latency: not measured (asynchronous sends wait for nothing)"),
    }
    match &outcome.cpu {
        Some(CpuRecord::Samples(samples)) => match CpuSummary::compute(samples) {
            Some(cpu) => println!("{cpu}"),
            None => println!("CPU usage: no sample (the run ended within one interval)"),
        },
        Some(CpuRecord::Unavailable(why)) => println!("CPU usage: not sampled ({why})"),
        None => {}
    }
    let load = &outcome.load;
    let verb = match settings.role {
        PerfRole::Producer => "sent",
        PerfRole::Consumer => "received",
    };
    println!(
        "Messages {verb} in the whole run (ramps included): {} in {:.2} s",
        load.messages,
        load.elapsed.as_secs_f64()
    );
}

fn absolute(path: PathBuf) -> PathBuf {
    std::path::absolute(&path).unwrap_or(path)
}

#[cfg(test)]
mod tests {
    use super::*;

    fn rewritten(url: &str, wanted: WireProtocol) -> String {
        rewrite_protocol(&url.parse().unwrap_or_else(|e| panic!("{e}")), wanted)
    }

    #[test]
    fn protocol_rewrites_every_broker_of_a_failover_url() {
        assert_eq!(rewritten("tcp://h", WireProtocol::Stomp), "stomp://h:61613");
        assert_eq!(rewritten("tcp://[::1]:7000", WireProtocol::Amqp), "amqp://[::1]:7000");
        assert_eq!(
            rewritten("failover:(tcp://a:61616,tcp://b:9)?randomize=false", WireProtocol::Stomp),
            "failover:(stomp://a:61613,stomp://b:9)?randomize=false"
        );
        assert_eq!(
            rewritten("failover:tcp://a,tcp://b", WireProtocol::Stomp),
            "failover:(stomp://a:61613,stomp://b:61613)"
        );
    }
}
