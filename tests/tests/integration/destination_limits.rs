//! The destination limits (`[destinations] max_destinations`, a queue policy's
//! `max_destinations`, ActiveMQ's `maxDestinations`) through real clients: past the limit the
//! next queue is refused with a clear error over STOMP (stomp.py) and AMQP (Qpid Proton), by
//! `tests/python/limit_checks.py`, and nothing is created; the JMS client's refusal is
//! `jms::jms_destination_limit`. Also: the broker's memory figure counts what each queue costs
//! beside its messages.

use std::process::{Command, Stdio};

use anyhow::{bail, ensure, Context as _};
use broker::admin::{AdminClient, BrokerStats};
use client::AckMode;
use tests::{connect, start_broker, wait_until};

/// Runs `limit_checks.py --check check --queue queue` against `port`, expecting the broker to
/// refuse it for the destination limit when `refused`, else to accept it.
async fn limit_check(check: &str, port: u16, queue: &str, refused: bool) -> anyhow::Result<()> {
    let python = crate::amqp::python()?;
    let script = crate::amqp::repository_root().join("tests/python/limit_checks.py");
    let mut args = vec![
        script.display().to_string(),
        "--check".to_owned(),
        check.to_owned(),
        "--port".to_owned(),
        port.to_string(),
        "--queue".to_owned(),
        queue.to_owned(),
    ];
    if refused {
        args.push("--expect-refused".to_owned());
    }
    let what = format!("{check} {queue} (refused: {refused})");
    tokio::task::spawn_blocking(move || {
        let child = Command::new(&python)
            .args(&args)
            .env("PYTHONUNBUFFERED", "1")
            .env("PYTHONDONTWRITEBYTECODE", "1")
            .stdin(Stdio::null())
            .stdout(Stdio::piped())
            .stderr(Stdio::piped())
            .spawn()
            .with_context(|| format!("cannot run {}", python.display()))?;
        // The script's own client timeouts (20 s) end it; the test's timeout is the backstop.
        let output = child.wait_with_output()?;
        let stdout = String::from_utf8_lossy(&output.stdout);
        let expected = if refused { "refused " } else { "ok " };
        if !output.status.success() || !stdout.contains(expected) {
            bail!(
                "{what} failed\n--- stdout\n{stdout}\n--- stderr\n{}",
                String::from_utf8_lossy(&output.stderr)
            );
        }
        println!("{what}: {}", stdout.trim());
        Ok(())
    })
    .await?
}

/// With `[destinations] max_destinations = 3`, three queues are created over STOMP and AMQP;
/// the fourth is refused to every client that names a new queue (a STOMP SEND, a SUBSCRIBE, a
/// composite SEND with one new part, an AMQP sender link, a receiver link) with an error that
/// names the limit, nothing is created, and the existing queues go on working.
#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn past_max_destinations_the_next_queue_is_refused_over_stomp_and_amqp() -> anyhow::Result<()>
{
    let broker = start_broker(|config| {
        config.transport.connectors = vec![
            "stomp://127.0.0.1:0".parse().expect("uri"),
            "amqp://127.0.0.1:0".parse().expect("uri"),
        ];
        config.destinations.max_destinations = 3;
    })
    .await?;
    let stomp = broker.stomp_addr().context("a STOMP connector")?.port();
    let amqp = broker.amqp_addr().context("an AMQP connector")?.port();
    limit_check("stomp_send", stomp, "LIMIT.A", false).await?;
    limit_check("amqp_send", amqp, "LIMIT.B", false).await?;
    limit_check("stomp_subscribe", stomp, "LIMIT.C", false).await?;

    limit_check("stomp_send", stomp, "LIMIT.D", true).await?;
    limit_check("stomp_subscribe", stomp, "LIMIT.E", true).await?;
    limit_check("stomp_send", stomp, "LIMIT.A,LIMIT.F", true).await?;
    limit_check("amqp_send", amqp, "LIMIT.G", true).await?;
    limit_check("amqp_receive", amqp, "LIMIT.H", true).await?;
    for refused in ["LIMIT.D", "LIMIT.E", "LIMIT.F", "LIMIT.G", "LIMIT.H"] {
        ensure!(broker.queue_stats(refused).await.is_none(), "the refused {refused} exists");
    }
    ensure!(tests::stored_count(&broker, "LIMIT.A")? == 1, "the refused composite reached A");

    limit_check("stomp_send", stomp, "LIMIT.B", false).await?;
    limit_check("amqp_send", amqp, "LIMIT.A", false).await?;
    limit_check("amqp_receive", amqp, "LIMIT.C", false).await?;
    broker.shutdown().await;
    Ok(())
}

/// `/api/broker`'s memory figure counts each queue's own cost (its task, channel, routing
/// entry, the store's index: `QUEUE_OVERHEAD_BYTES`), not only the messages held: a broker
/// with many empty queues is not reported as using nothing.
#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn the_memory_figure_counts_each_queue_beside_its_messages() -> anyhow::Result<()> {
    let broker = start_broker(|_| {}).await?;
    let addr = broker.admin_addr().context("the admin endpoint is on")?;
    let admin = AdminClient::new(&format!("http://{addr}"))?;
    let stomp = connect(&broker).await?;
    const QUEUES: u64 = 20;
    for index in 0..QUEUES {
        let subscription =
            stomp.subscribe(&format!("/queue/empty.{index}"), AckMode::Auto, &[]).await?;
        drop(subscription);
    }
    wait_until("every queue exists", || async {
        admin.broker().await.is_ok_and(|stats: BrokerStats| stats.destinations.queues == QUEUES)
    })
    .await?;
    let stats = admin.broker().await?;
    let overhead = QUEUES * broker::core::statistics::QUEUE_OVERHEAD_BYTES;
    ensure!(stats.memory_bytes >= overhead, "{QUEUES} empty queues: {stats:?}");
    ensure!(stats.memory_bytes < overhead + (1 << 20), "no message is held: {stats:?}");
    broker.shutdown().await;
    Ok(())
}
