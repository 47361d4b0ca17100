//! `ferromq purge`: ActiveMQ's `activemq purge`, removing the messages of queues through the
//! admin endpoint. Names may hold ActiveMQ's wildcards (`FOO.*`: `*` any run of characters,
//! `?` one), matched against the broker's queues; a name without one must be a queue. Without
//! `--msgsel` each queue is purged whole (`POST .../purge`); with it, the matching messages
//! are browsed and removed one by one (`DELETE .../messages/{id}`), so that the others stay.
//! A line per queue on stdout: `Purged 5 messages from queue orders`.

use broker::admin::{AdminClient, DestinationStats, StatsKind};
use serde::Deserialize;

use super::admin::{
    encode, has_wildcard, one_line, queue_name, queue_path, runtime, selector_of, wildcard_match,
    EndpointArgs, MessagePage,
};

/// The page of matching messages read before removing them.
const PAGE: u64 = 400;

#[derive(Debug, clap::Args)]
pub struct PurgeArgs {
    #[command(flatten)]
    endpoint: EndpointArgs,
    /// Remove only the messages that match: a JMS selector (SQL 92), or ActiveMQ's
    /// comma-separated conditions (see `ferromq browse --help`).
    #[arg(long, value_name = "SELECTOR")]
    msgsel: Vec<String>,
    /// The queues: NAME, queue:NAME, or a pattern with * and ? (FOO.*).
    #[arg(value_name = "QUEUE", required = true)]
    destinations: Vec<String>,
}

#[derive(Deserialize)]
struct Removed {
    removed: u64,
}

pub fn run(args: PurgeArgs) -> anyhow::Result<()> {
    let client = args.endpoint.client()?;
    let selector = selector_of(&args.msgsel);
    let runtime = runtime()?;
    let queues: Vec<String> = runtime
        .block_on(client.destinations())
        .map_err(one_line)?
        .into_iter()
        .filter(|d: &DestinationStats| d.kind == StatsKind::Queue)
        .map(|d| d.name)
        .collect();
    let mut failures = Vec::new();
    let mut purged = std::collections::BTreeSet::new();
    for argument in &args.destinations {
        let pattern = match queue_name(argument) {
            Ok(pattern) => pattern,
            Err(error) => {
                eprintln!("ferromq: {error:#}");
                failures.push(argument.as_str());
                continue;
            }
        };
        let matched: Vec<&String> = match has_wildcard(pattern) {
            true => queues.iter().filter(|queue| wildcard_match(pattern, queue)).collect(),
            false => queues.iter().filter(|queue| queue.as_str() == pattern).collect(),
        };
        if matched.is_empty() {
            if has_wildcard(pattern) {
                println!("No queue matches {pattern}");
            } else {
                eprintln!("ferromq: no such queue: {pattern}");
                failures.push(argument.as_str());
            }
            continue;
        }
        for queue in matched {
            // `FOO.*` and `FOO.BAR` together purge FOO.BAR once.
            if !purged.insert(queue.clone()) {
                continue;
            }
            let result = match &selector {
                None => runtime.block_on(purge(&client, queue)),
                Some(selector) => runtime.block_on(remove_matching(&client, queue, selector)),
            };
            match result {
                Ok(removed) => {
                    let what = match &selector {
                        None => String::new(),
                        Some(selector) => format!(" matching {selector}"),
                    };
                    println!("Purged {removed} messages{what} from queue {queue}");
                }
                Err(error) => {
                    eprintln!("ferromq: queue {queue}: {error:#}");
                    failures.push(argument.as_str());
                }
            }
        }
    }
    match failures.is_empty() {
        true => Ok(()),
        false => anyhow::bail!("could not purge {}", failures.join(", ")),
    }
}

async fn purge(client: &AdminClient, queue: &str) -> anyhow::Result<u64> {
    let path = format!("{}/purge", queue_path(queue));
    let removed: Removed =
        client.post_json(&path, &serde_json::json!({})).await.map_err(one_line)?;
    Ok(removed.removed)
}

/// Removes the messages of `queue` that match `selector`, a page at a time; a message that
/// cannot be removed (delivered to a consumer meanwhile) is stepped over.
async fn remove_matching(client: &AdminClient, queue: &str, selector: &str) -> anyhow::Result<u64> {
    let mut removed = 0u64;
    let mut offset = 0u64;
    loop {
        let path = format!(
            "{}/messages?offset={offset}&limit={PAGE}&selector={}",
            queue_path(queue),
            encode(selector)
        );
        let page: MessagePage = client.get_json(&path).await.map_err(one_line)?;
        if page.messages.is_empty() {
            return Ok(removed);
        }
        let mut kept = 0u64;
        for message in &page.messages {
            let path = format!("{}/messages/{}", queue_path(queue), encode(&message.id));
            match client.delete_json::<Removed>(&path).await {
                Ok(answer) if answer.removed > 0 => removed += answer.removed,
                Ok(_) | Err(broker::admin::AdminClientError::Status { status: 404, .. }) => {
                    kept += 1
                }
                Err(error) => return Err(one_line(error)),
            }
        }
        // What was removed no longer counts in the offsets; what stayed does.
        offset += kept;
    }
}
