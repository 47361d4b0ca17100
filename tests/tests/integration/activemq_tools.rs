//! Debian's `activemq producer` and `activemq consumer` commands (ActiveMQ 5.17's own
//! tools, on the stock JMS client) move their messages through ferromq over OpenWire.

use std::process::{Command, Stdio};
use std::time::{Duration, Instant};

use anyhow::{bail, ensure, Context as _};
use tests::start_broker;

/// The `activemq` launcher that Debian's `activemq` package installs (scripts/test does).
const ACTIVEMQ: &str = "/usr/bin/activemq";

fn tool(arguments: &[&str]) -> anyhow::Result<std::process::Child> {
    ensure!(
        std::path::Path::new(ACTIVEMQ).exists(),
        "{ACTIVEMQ} is missing: run scripts/test, which installs Debian's activemq package"
    );
    Command::new(ACTIVEMQ)
        .args(arguments)
        .stdin(Stdio::null())
        .stdout(Stdio::piped())
        .stderr(Stdio::piped())
        .spawn()
        .with_context(|| format!("starting {ACTIVEMQ} {}", arguments.join(" ")))
}

/// Waits for `child` at most `limit`; its output on failure.
fn finish(name: &str, mut child: std::process::Child, limit: Duration) -> anyhow::Result<()> {
    let deadline = Instant::now() + limit;
    loop {
        if let Some(status) = child.try_wait()? {
            let output = child.wait_with_output()?;
            ensure!(
                status.success(),
                "activemq {name} failed ({status})\n--- stdout\n{}--- stderr\n{}",
                String::from_utf8_lossy(&output.stdout),
                String::from_utf8_lossy(&output.stderr)
            );
            return Ok(());
        }
        if Instant::now() > deadline {
            let _ = child.kill();
            let output = child.wait_with_output()?;
            bail!(
                "activemq {name} did not finish within {limit:?}\n--- stdout\n{}--- stderr\n{}",
                String::from_utf8_lossy(&output.stdout),
                String::from_utf8_lossy(&output.stderr)
            );
        }
        std::thread::sleep(Duration::from_millis(50));
    }
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn activemq_producer_and_consumer_commands_move_their_messages() -> anyhow::Result<()> {
    let broker = start_broker(|config| {
        config.transport.connectors =
            vec!["tcp://127.0.0.1:0".parse().expect("a valid connector URI")];
    })
    .await?;
    let url = format!("tcp://{}", broker.openwire_addr().context("an OpenWire connector")?);
    let queue = "activemq.tools";
    let destination = format!("queue://{queue}");
    let count = "500";
    let consumer = tool(&[
        "consumer",
        "--brokerUrl",
        &url,
        "--destination",
        &destination,
        "--messageCount",
        count,
    ])?;
    // The consumer subscribes first; the queue keeps what arrives before it anyway.
    let producer = tool(&[
        "producer",
        "--brokerUrl",
        &url,
        "--destination",
        &destination,
        "--messageCount",
        count,
    ])?;
    tokio::task::block_in_place(|| -> anyhow::Result<()> {
        finish("producer", producer, Duration::from_secs(180))?;
        finish("consumer", consumer, Duration::from_secs(180))
    })?;
    let stats = broker.queue_stats(queue).await.context("the tools' queue exists")?;
    assert_eq!((stats.acked, stats.ready, stats.in_flight), (500, 0, 0), "{stats:?}");
    broker.shutdown().await;
    Ok(())
}
