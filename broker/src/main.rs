//! The `ferromq` command.

mod cli;

/// mimalloc instead of the system allocator: the broker frees on one thread what it allocated
/// on another (a connection builds a message, a queue task drops it), which glibc's per-thread
/// arenas turn into memory that is never given back to the system.
///
/// Its v2 line (the `v2` feature), not v3: v3 keeps freed pages resident for a second before
/// giving them back (`purge_delay` 1000 ms), v2 for 10 ms. A deep queue frees as much as it
/// allocates all the time (every message after the window is built, written and dropped), so
/// with v3 the 2,000,000-message paging benchmark held 50-70 MiB of freed memory on top of
/// the live heap (peak RSS 195 MiB), with v2 about 20 MiB (155 MiB). The option cannot be
/// set from here without `unsafe` (it is read from the environment when the process starts).
///
/// Built with `no_thp`: mimalloc no longer asks for transparent huge pages on its arenas. A
/// huge page is zeroed in full (2 MiB) the first time it is touched, and memory given back
/// after 10 ms and touched again was zeroed again and again: `clear_page_erms` under
/// `do_huge_pmd_anonymous_page` took 15-36% of the broker's CPU in S1 (non-persistent 1+1).
#[global_allocator]
static ALLOCATOR: mimalloc::MiMalloc = mimalloc::MiMalloc;

use std::io::Write;
use std::path::PathBuf;
use std::process::ExitCode;

use anyhow::Context;
use clap::{Parser, Subcommand};

#[derive(Parser)]
#[command(
    name = "ferromq",
    version,
    about = "A message broker that does what Apache ActiveMQ Classic does"
)]
struct Cli {
    #[command(subcommand)]
    command: Command,
}

#[derive(Subcommand)]
enum Command {
    /// Starts a broker and runs it until SIGINT or SIGTERM.
    Start {
        /// The TOML configuration file (every key has a default; see conf/ferromq.example.toml).
        #[arg(long, value_name = "FILE")]
        config: Option<PathBuf>,
        /// The data directory (overrides broker.data_dir).
        #[arg(long, value_name = "DIR")]
        data_dir: Option<PathBuf>,
        /// A connector URI such as stomp://127.0.0.1:61613; repeat it for several. Replaces the
        /// configured connectors.
        #[arg(long = "connector", value_name = "URI")]
        connectors: Vec<String>,
        /// The admin endpoint's address, HOST:PORT (overrides admin.bind; port 0 picks one).
        #[arg(long, value_name = "HOST:PORT")]
        admin_bind: Option<String>,
    },
    /// Sends messages to a broker and reports the throughput (ActiveMQ's `producer`).
    Producer(cli::producer::ProducerArgs),
    /// Receives messages from a broker and reports the throughput (ActiveMQ's `consumer`).
    Consumer(cli::consumer::ConsumerArgs),
    /// The ActiveMQ performance plugin's producer and consumer (`activemq-perf`), driven by
    /// its properties files, printing its SYSTEM THROUGHPUT SUMMARY.
    Perf(cli::perf::PerfArgs),
    /// Prints every destination's statistics from a running broker's admin endpoint
    /// (ActiveMQ's `dstat`).
    Dstat(cli::dstat::DstatArgs),
    /// Prints the messages of queues without consuming them, from a running broker's admin
    /// endpoint (ActiveMQ's `browse`).
    Browse(cli::browse::BrowseArgs),
    /// Removes the messages of queues, all of them or those matching a selector, through a
    /// running broker's admin endpoint (ActiveMQ's `purge`).
    Purge(cli::purge::PurgeArgs),
    /// Prints the attributes of a running broker's objects: the broker, queues, topics,
    /// connections, durable subscriptions, consumers, producers (ActiveMQ's `query`).
    Query(cli::query::QueryArgs),
    /// Prints the Argon2 hash of a password for a [[users]] entry's `password`; reads the
    /// password from the first line of standard input, so that it stays out of the shell's
    /// history and the process list.
    Passwd,
}

fn main() -> ExitCode {
    tracing_subscriber::fmt()
        .with_env_filter(
            tracing_subscriber::EnvFilter::try_from_default_env()
                .unwrap_or_else(|_| tracing_subscriber::EnvFilter::new("info")),
        )
        .with_writer(std::io::stderr)
        // A supervisor may close the log pipe: then an event cannot be written, and reporting
        // that with eprintln! (the default) would panic whatever task logged, connection
        // tasks included. Lost log lines must not take the broker down.
        .log_internal_errors(false)
        .with_ansi(std::io::IsTerminal::is_terminal(&std::io::stderr()))
        .init();
    let cli = Cli::parse();
    let result = match cli.command {
        Command::Start { config, data_dir, connectors, admin_bind } => {
            start(config, data_dir, connectors, admin_bind)
        }
        Command::Producer(args) => cli::producer::run(args),
        Command::Consumer(args) => cli::consumer::run(args),
        Command::Dstat(args) => cli::dstat::run(args),
        Command::Browse(args) => cli::browse::run(args),
        Command::Purge(args) => cli::purge::run(args),
        Command::Query(args) => cli::query::run(args),
        Command::Perf(args) => cli::perf::run(args),
        Command::Passwd => passwd(),
    };
    match result {
        Ok(()) => ExitCode::SUCCESS,
        Err(error) => {
            eprintln!("ferromq: {error:#}");
            ExitCode::FAILURE
        }
    }
}

fn passwd() -> anyhow::Result<()> {
    let mut line = String::new();
    std::io::stdin().read_line(&mut line)?;
    let password = line.strip_suffix('\n').unwrap_or(&line);
    let password = password.strip_suffix('\r').unwrap_or(password);
    anyhow::ensure!(!password.is_empty(), "no password on standard input");
    let hash = broker::security::hash_password(password).map_err(anyhow::Error::msg)?;
    println!("{hash}");
    Ok(())
}

fn start(
    config_path: Option<PathBuf>,
    data_dir: Option<PathBuf>,
    connectors: Vec<String>,
    admin_bind: Option<String>,
) -> anyhow::Result<()> {
    let mut config = match &config_path {
        Some(path) => conf::Config::load(path)?,
        None => conf::Config::default(),
    };
    if let Some(dir) = data_dir {
        config.broker.data_dir = dir;
    }
    if !connectors.is_empty() {
        config.transport.connectors = connectors
            .iter()
            .map(|text| {
                text.parse::<conf::ConnectorUri>()
                    .map_err(|error| anyhow::anyhow!("--connector {text}: {error}"))
            })
            .collect::<anyhow::Result<_>>()?;
    }
    if let Some(bind) = admin_bind {
        config.admin.bind = bind;
    }
    config.validate()?;
    raise_file_limit(&config);
    let runtime = tokio::runtime::Builder::new_multi_thread()
        .enable_all()
        .thread_name("ferromq")
        .build()
        .context("cannot start the async runtime")?;
    let result = runtime.block_on(async move {
        // A BrokerError's message already ends with its cause: print it once, not once more
        // as the `{:#}` chain's next link.
        // A standby waits in `start` for the data directory's lock (or the PostgreSQL
        // lease): a signal ends the wait too.
        // One set of signal streams for the whole run: a stream only sees signals that arrive
        // after it exists, so streams made anew after the start lost a SIGTERM sent between
        // the two (the broker then kept running).
        let mut signals = Signals::new()?;
        let starting = broker::Broker::builder(config).lock_data_dir(true).start();
        let broker = tokio::select! {
            started = starting => started.map_err(|error| anyhow::anyhow!("{error}"))?,
            () = signals.next() => {
                tracing::info!("stopped before starting");
                return Ok(());
            }
        };
        for connector in broker.connectors() {
            tracing::info!(connector = %connector.uri, address = %connector.local_addr, "accepting connections");
        }
        if let Some(address) = broker.admin_addr() {
            tracing::info!(%address, "admin endpoint: http://{address}/api/broker, /metrics");
        }
        // Not println!, which panics when stdout is closed: nobody reading it is no reason
        // to stop.
        let ready = ready_line(std::process::id(), broker.connectors(), broker.admin_addr());
        let _ = writeln!(std::io::stdout(), "{ready}");
        let lost = tokio::select! {
            () = signals.next() => None,
            error = broker.lease_lost() => Some(error),
        };
        match lost {
            None => {
                tracing::info!("shutting down");
                broker.shutdown().await;
                Ok(())
            }
            Some(error) => {
                // The broker stopped serving already (fenced): let the connections close,
                // briefly, and exit with a failure so that a supervisor restarts it (as a
                // standby: another broker holds the lease by then).
                let _ = tokio::time::timeout(LEASE_LOST_GRACE, broker.shutdown()).await;
                Err(anyhow::anyhow!("{error}"))
            }
        }
    });
    // Tasks still running (a connection stuck on a dead store after a lost lease) must not
    // keep the process alive.
    runtime.shutdown_timeout(LEASE_LOST_GRACE);
    result
}

/// The line `ferromq start` prints on stdout once it holds its data directory, has bound every
/// connector and accepts: `ferromq ready pid=PID SCHEME=ADDRESS... [admin=ADDRESS]`, the
/// connectors in their configured order. Whoever started the process learns from it that this
/// process (not another one on the same port) serves, and on which ports it bound port 0.
fn ready_line(
    pid: u32,
    connectors: &[broker::BoundConnector],
    admin: Option<std::net::SocketAddr>,
) -> String {
    let mut line = format!("ferromq ready pid={pid}");
    for connector in connectors {
        line.push_str(&format!(" {}={}", connector.uri.scheme, connector.local_addr));
    }
    if let Some(admin) = admin {
        line.push_str(&format!(" admin={admin}"));
    }
    line
}

/// How long a broker that lost its lease lets its connections close before it exits.
const LEASE_LOST_GRACE: std::time::Duration = std::time::Duration::from_secs(2);

/// File descriptors the broker needs besides its connections: listeners, the admin endpoint,
/// the store's files, the runtime's own.
const FILES_BESIDES_CONNECTIONS: u64 = 256;

/// Raises the soft limit on open files to the hard limit, since every connection holds one (the
/// usual soft limit, 1024, is far below the thousands of connections seed 002 tunes ActiveMQ
/// for), and warns when the configured connection limits exceed what is left.
fn raise_file_limit(config: &conf::Config) {
    let limit = match rlimit::increase_nofile_limit(u64::MAX) {
        Ok(limit) => limit,
        Err(error) => {
            tracing::warn!(%error, "cannot raise the open file limit");
            return;
        }
    };
    let connections: u64 = config
        .transport
        .connectors
        .iter()
        .map(|connector| config.transport.max_connections_for(connector) as u64)
        .sum();
    tracing::info!(limit, connections, "open file limit (soft, raised to the hard limit)");
    if connections + FILES_BESIDES_CONNECTIONS > limit {
        tracing::warn!(
            limit,
            connections,
            "the connectors accept up to {connections} connections but the process may open only \
             {limit} files: connections beyond about {} will fail to be accepted; raise the hard \
             limit (ulimit -Hn, LimitNOFILE=) or lower transport.max_connections",
            limit.saturating_sub(FILES_BESIDES_CONNECTIONS)
        );
    }
}

/// SIGINT and SIGTERM, both of which stop the broker.
struct Signals {
    interrupt: tokio::signal::unix::Signal,
    terminate: tokio::signal::unix::Signal,
}

impl Signals {
    fn new() -> anyhow::Result<Signals> {
        use tokio::signal::unix::{signal, SignalKind};
        Ok(Signals {
            interrupt: signal(SignalKind::interrupt()).context("cannot handle SIGINT")?,
            terminate: signal(SignalKind::terminate()).context("cannot handle SIGTERM")?,
        })
    }

    /// Resolves at the next SIGINT or SIGTERM, or at once for one that came since the last.
    async fn next(&mut self) {
        tokio::select! {
            _ = self.interrupt.recv() => {}
            _ = self.terminate.recv() => {}
        }
    }
}
