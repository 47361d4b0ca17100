//! `ferromq dstat`: ActiveMQ's `activemq dstat`, a table of every destination's counters,
//! read from the admin endpoint of a running broker (`--url`, `http://127.0.0.1:8161` by
//! default).
//!
//! ```text
//! Name                                                Queue Size  Producer #  Consumer #   Enqueue #   Dequeue #   Forward #      Memory
//! orders                                                       6           0           1          10           4           0     6.0 KiB
//! ```
//!
//! The columns are ActiveMQ's: `Queue Size` counts the messages not acknowledged yet (waiting
//! or in flight), `Forward #` is always 0 (ferromq has no network of brokers). ActiveMQ's last
//! column is `Memory %`, a share of the destination's memory limit; ferromq has no memory
//! limits yet, so it shows the bytes held (`Memory`) until the broker reports a limit, and the
//! percentage from then on.

use anyhow::Context;
use broker::admin::BrokerRole;
use broker::admin::{AdminClient, DestinationStats, StatsKind};

/// Which destinations `ferromq dstat` lists, as `activemq dstat [all|queues|topics]`.
#[derive(Debug, Clone, Copy, PartialEq, Eq, clap::ValueEnum)]
pub enum Which {
    All,
    Queues,
    Topics,
}

#[derive(Debug, clap::Args)]
pub struct DstatArgs {
    /// Which destinations to list.
    #[arg(value_enum, default_value = "all")]
    which: Which,
    /// The running broker's admin endpoint (its `[admin] bind`).
    #[arg(long, value_name = "URL", default_value = "http://127.0.0.1:8161")]
    url: String,
    /// For an https:// URL (`[admin] tls`): a PEM file of the authorities the endpoint's
    /// certificate must chain to (default: the system's).
    #[arg(long = "trustStore", value_name = "PEM")]
    trust_store: Option<std::path::PathBuf>,
    /// A user of `[admin] groups`, when the broker has `[authentication]` enabled (HTTP
    /// Basic: use an https:// endpoint beyond this host).
    #[arg(long)]
    user: Option<String>,
    /// The user's password.
    #[arg(long)]
    password: Option<String>,
}

pub fn run(args: DstatArgs) -> anyhow::Result<()> {
    // An AdminClientError's message already ends with its cause: print it once, not once more
    // as the `{:#}` chain's next link.
    let one_line = |error: broker::admin::AdminClientError| anyhow::anyhow!("{error}");
    let client = AdminClient::new(&args.url)
        .map_err(one_line)?
        .with_trust_store(args.trust_store)
        .with_credentials(args.user.map(|user| (user, args.password.unwrap_or_default())));
    let runtime = tokio::runtime::Builder::new_current_thread()
        .enable_all()
        .build()
        .context("cannot start the async runtime")?;
    let status = runtime.block_on(client.status()).map_err(one_line)?;
    let since = since(status.since_unix_ms);
    if status.role != BrokerRole::Active {
        // A standby (or a broker still recovering) has no destinations to show yet.
        println!("broker {} {} since {since}", status.name, status.doing());
        return Ok(());
    }
    // On stderr: stdout keeps ActiveMQ's table alone.
    eprintln!("broker {} active since {since}", status.name);
    let (broker, destinations) = runtime
        .block_on(async {
            let broker = client.broker().await?;
            let destinations = client.destinations().await?;
            Ok::<_, broker::admin::AdminClientError>((broker, destinations))
        })
        .map_err(one_line)?;
    print!("{}", table(&destinations, args.which, broker.memory_limit_bytes));
    Ok(())
}

/// A Unix time in milliseconds as UTC `YYYY-MM-DD HH:MM:SS`, with how long ago.
fn since(unix_ms: u64) -> String {
    let seconds = unix_ms / 1000;
    let (days, rest) = (seconds / 86_400, seconds % 86_400);
    let (year, month, day) = broker::core::scheduler::cron::civil_from_days(days as i64);
    let now = std::time::SystemTime::now()
        .duration_since(std::time::UNIX_EPOCH)
        .map_or(0, |elapsed| elapsed.as_secs());
    format!(
        "{year:04}-{month:02}-{day:02} {:02}:{:02}:{:02} UTC ({} s ago)",
        rest / 3600,
        rest % 3600 / 60,
        rest % 60,
        now.saturating_sub(seconds)
    )
}

/// The table, a header line and a line per destination, in ActiveMQ's layout.
fn table(destinations: &[DestinationStats], which: Which, memory_limit: Option<u64>) -> String {
    let percent = memory_limit.is_some() || destinations.iter().any(|d| d.memory_limit_bytes > 0);
    let memory_header = if percent { "Memory %" } else { "Memory" };
    let mut out = row(&[
        "Name",
        "Queue Size",
        "Producer #",
        "Consumer #",
        "Enqueue #",
        "Dequeue #",
        "Forward #",
        memory_header,
    ]);
    let shown = destinations.iter().filter(|d| match which {
        Which::All => true,
        Which::Queues => d.kind == StatsKind::Queue,
        Which::Topics => d.kind == StatsKind::Topic,
    });
    for destination in shown {
        // A destination's share of its own limit, as ActiveMQ's MemoryPercentUsage.
        let limit =
            Some(destination.memory_limit_bytes).filter(|limit| *limit > 0).or(memory_limit);
        let memory = match limit {
            Some(limit) if limit > 0 => {
                format!("{}", destination.memory_bytes.saturating_mul(100) / limit)
            }
            _ => bytes(destination.memory_bytes),
        };
        out.push_str(&row(&[
            &destination.name,
            &(destination.pending + destination.in_flight).to_string(),
            &destination.producers.to_string(),
            &destination.consumers.to_string(),
            &destination.enqueued.to_string(),
            &destination.dequeued.to_string(),
            "0",
            &memory,
        ]));
    }
    out
}

/// ActiveMQ's `%-50s  %10s  %10s ...`.
fn row(cells: &[&str]) -> String {
    let mut line = format!("{:<50}", cells[0]);
    for cell in &cells[1..] {
        line.push_str(&format!("  {cell:>10}"));
    }
    line.push('\n');
    line
}

/// `512 B`, `6.0 KiB`, `1.2 MiB`.
fn bytes(count: u64) -> String {
    const UNITS: [&str; 4] = ["KiB", "MiB", "GiB", "TiB"];
    if count < 1024 {
        return format!("{count} B");
    }
    let mut value = count as f64 / 1024.0;
    let mut unit = 0;
    while value >= 1024.0 && unit < UNITS.len() - 1 {
        value /= 1024.0;
        unit += 1;
    }
    format!("{value:.1} {}", UNITS[unit])
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn unix_times_print_as_utc_dates() {
        assert!(since(0).starts_with("1970-01-01 00:00:00 UTC"));
        assert!(since(951_782_400_000 + 3_661_000).starts_with("2000-02-29 01:01:01 UTC"));
    }

    fn destination(name: &str, kind: StatsKind) -> DestinationStats {
        DestinationStats {
            name: name.to_owned(),
            kind,
            pending: 5,
            in_flight: 1,
            enqueued: 10,
            dequeued: 4,
            expired: 0,
            dead_lettered: 0,
            producers: 2,
            consumers: 1,
            memory_bytes: 6144,
            memory_limit_bytes: 0,
            discarded: 0,
            slow_consumers: 0,
            subscriptions: Vec::new(),
        }
    }

    #[test]
    fn table_has_activemq_columns_and_filters_by_kind() {
        let all =
            [destination("orders", StatsKind::Queue), destination("prices", StatsKind::Topic)];
        let text = table(&all, Which::Queues, None);
        let lines: Vec<&str> = text.lines().collect();
        assert_eq!(lines.len(), 2, "{text}");
        let words: Vec<&str> = lines[1].split_whitespace().collect();
        assert_eq!(words, ["orders", "6", "2", "1", "10", "4", "0", "6.0", "KiB"]);
        assert!(lines[0].starts_with("Name   "));
        assert!(lines[0].ends_with("Forward #      Memory"));
        let topics = table(&all, Which::Topics, Some(61440));
        assert!(topics.contains("Memory %"));
        assert!(topics
            .lines()
            .nth(1)
            .is_some_and(|line| line.starts_with("prices ") && line.ends_with(" 10")));
        // A destination's own limit (its policy's) comes before the broker's.
        let own = DestinationStats { memory_limit_bytes: 12288, ..all[0].clone() };
        let text = table(&[own], Which::All, Some(61440));
        assert!(text.lines().nth(1).is_some_and(|line| line.ends_with(" 50")), "{text}");
    }

    #[test]
    fn bytes_are_human() {
        assert_eq!(bytes(512), "512 B");
        assert_eq!(bytes(1536), "1.5 KiB");
        assert_eq!(bytes(3 << 20), "3.0 MiB");
    }
}
