//! Producer flow control: with a small memory limit and no consumer, a send that finds no room
//! waits (its RECEIPT comes once it is accepted) and resumes when a consumer drains; or, when
//! configured, is refused with an ERROR. The connection keeps reading meanwhile, so a
//! consumer on the producer's own connection drains the queue. Nothing is lost, nothing
//! reorders. (The JMS client's side is in `jms.rs`: `CONFIGURED_CHECKS`.)

use anyhow::{bail, ensure, Context as _};
use client::AckMode;
use protocol::stomp::{Command, Frame};
use tests::{bodies, connect, recv_n, start_broker, stomp_addr, RawConnection, ARRIVES, QUIET};

/// The smallest destination memory limit the configuration accepts: about 40 of the 1 KiB
/// messages below.
const LIMIT: u64 = 64 << 10;
const MESSAGES: usize = 200;

fn body(index: usize) -> String {
    format!("{index:04}{}", "x".repeat(1020))
}

fn send(destination: &str, index: usize) -> Frame {
    Frame::new(Command::Send)
        .header("destination", destination)
        .header("receipt", format!("r{index}"))
        .with_body(body(index))
}

/// Sends with a receipt each until one does not come within [`QUIET`]: the index of the
/// blocked send (its receipt still to come).
async fn send_until_blocked(
    producer: &mut RawConnection,
    destination: &str,
) -> anyhow::Result<usize> {
    for index in 0..MESSAGES {
        producer.write_frame(&send(destination, index)).await?;
        if producer.expect_no_frame(QUIET).await.is_ok() {
            return Ok(index);
        }
    }
    bail!("{MESSAGES} sends of 1 KiB went through a {LIMIT}-byte limit without blocking")
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn a_sync_send_over_the_limit_waits_and_resumes_when_a_consumer_drains() -> anyhow::Result<()>
{
    let broker = start_broker(|config| config.destinations.memory_limit = LIMIT).await?;
    let (mut producer, _) = RawConnection::connect(stomp_addr(&broker)?, &[]).await?;
    let blocked = send_until_blocked(&mut producer, "/queue/paced").await?;
    ensure!((20..100).contains(&blocked), "blocked after {blocked} messages");

    let consumer = connect(&broker).await?;
    let mut subscription = consumer.subscribe("/queue/paced", AckMode::Auto, &[]).await?;
    let frame = producer.read_frame().await?;
    ensure!(frame.get("receipt-id") == Some(&format!("r{blocked}")), "got {frame:?}");
    for index in blocked + 1..MESSAGES {
        producer.write_frame(&send("/queue/paced", index)).await?;
        let frame = producer.read_frame().await.with_context(|| format!("receipt {index}"))?;
        ensure!(frame.get("receipt-id") == Some(&format!("r{index}")), "got {frame:?}");
    }
    let received = recv_n(&mut subscription, MESSAGES).await?;
    ensure!(bodies(&received) == (0..MESSAGES).map(body).collect::<Vec<_>>(), "lost or reordered");
    broker.shutdown().await;
    Ok(())
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn a_consumer_on_the_blocked_producers_connection_drains_it() -> anyhow::Result<()> {
    let broker = start_broker(|config| config.destinations.memory_limit = LIMIT).await?;
    let (mut connection, _) = RawConnection::connect(stomp_addr(&broker)?, &[]).await?;
    let blocked = send_until_blocked(&mut connection, "/queue/shared").await?;
    // The same connection subscribes (client acks) while its send waits: the SUBSCRIBE and
    // every ACK are read and answered, the queue drains, the send goes through.
    connection
        .write_frame(
            &Frame::new(Command::Subscribe)
                .header("id", "s")
                .header("destination", "/queue/shared")
                .header("ack", "client-individual")
                .header("receipt", "subscribed"),
        )
        .await?;
    let mut received = Vec::new();
    let mut receipts = Vec::new();
    let deadline = tokio::time::Instant::now() + ARRIVES * 4;
    while received.len() < blocked + 1 || receipts.len() < 2 {
        ensure!(
            tokio::time::Instant::now() < deadline,
            "stuck: {} received, receipts {receipts:?}",
            received.len()
        );
        let frame = connection.read_frame().await?;
        match frame.command {
            Command::Message => {
                let ack = frame.get("ack").context("ack header")?.to_owned();
                received.push(String::from_utf8_lossy(&frame.body).into_owned());
                connection
                    .write_frame(
                        &Frame::new(Command::Ack).header("id", ack).header("receipt", "acked"),
                    )
                    .await?;
            }
            Command::Receipt => {
                let id = frame.get("receipt-id").unwrap_or_default();
                if id != "acked" {
                    receipts.push(id.to_owned());
                }
            }
            _ => bail!("unexpected {frame:?}"),
        }
    }
    ensure!(receipts == ["subscribed".to_owned(), format!("r{blocked}")], "receipts {receipts:?}");
    ensure!(received == (0..=blocked).map(body).collect::<Vec<_>>(), "lost or reordered");
    broker.shutdown().await;
    Ok(())
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn send_fail_if_no_space_refuses_with_a_resource_allocation_error() -> anyhow::Result<()> {
    let broker = start_broker(|config| {
        config.destinations.memory_limit = LIMIT;
        config.broker.send_fail_if_no_space = true;
    })
    .await?;
    let (mut producer, _) = RawConnection::connect(stomp_addr(&broker)?, &[]).await?;
    let mut accepted = 0;
    let refusal = loop {
        ensure!(accepted < MESSAGES, "never refused");
        producer.write_frame(&send("/queue/refusing", accepted)).await?;
        let frame = producer.read_frame().await?;
        if frame.command == Command::Error {
            break frame;
        }
        accepted += 1;
    };
    let message = refusal.get("message").unwrap_or_default();
    ensure!(
        message.contains("ResourceAllocationException") && message.contains("memory_limit"),
        "{refusal:?}"
    );
    ensure!(refusal.get("receipt-id") == Some(&format!("r{accepted}")), "{refusal:?}");
    // The connection stays usable: drained, the queue takes the refused message again.
    let consumer = connect(&broker).await?;
    let mut subscription = consumer.subscribe("/queue/refusing", AckMode::Auto, &[]).await?;
    let drained = recv_n(&mut subscription, accepted).await?;
    ensure!(bodies(&drained) == (0..accepted).map(body).collect::<Vec<_>>());
    // The consumer's acks reach the queue shortly after the messages reach it: until then
    // the queue may still be full and refuse again.
    let deadline = tokio::time::Instant::now() + ARRIVES;
    loop {
        producer.write_frame(&send("/queue/refusing", accepted)).await?;
        let answer = producer.read_frame().await?;
        if answer.command == Command::Receipt {
            break;
        }
        ensure!(tokio::time::Instant::now() < deadline, "still refused once drained: {answer:?}");
        tokio::time::sleep(std::time::Duration::from_millis(50)).await;
    }
    broker.shutdown().await;
    Ok(())
}

/// A journal of at most 4 MiB in 1 MiB data files (the smallest the configuration allows).
fn small_journal(config: &mut conf::Config, data: &std::path::Path) {
    config.store.kind = conf::StoreKind::Journal;
    config.broker.data_dir = data.to_path_buf();
    config.store.segment_size = 1 << 20;
    config.store.max_size = 4 << 20;
    // Acknowledged messages free their data files at the next idle checkpoint.
    config.store.checkpoint_interval = std::time::Duration::from_millis(100);
}

fn persistent_send(index: usize) -> Frame {
    Frame::new(Command::Send)
        .header("destination", "/queue/store.full")
        .header("persistent", "true")
        .header("receipt", format!("r{index}"))
        .with_body(format!("{index:05}{}", "s".repeat(8 * 1024)))
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn a_persistent_send_to_a_full_store_waits_until_acks_free_it() -> anyhow::Result<()> {
    let data = tempfile::tempdir()?;
    let broker = start_broker(|config| small_journal(config, data.path())).await?;
    let (mut producer, _) = RawConnection::connect(stomp_addr(&broker)?, &[]).await?;
    // About 450 messages of 8 KiB fit in 4 MiB less the headroom; the store would refuse the
    // rest, so the send must be held before.
    let blocked = producer.send_until_held(1000, persistent_send).await?;
    let blocked = blocked.context("1000 sends of 8 KiB went into a 4 MiB store")?;
    ensure!(blocked > 300, "held after only {blocked} messages");
    // A consumer drains and acknowledges: the journal frees its data files, the send goes on.
    let consumer = connect(&broker).await?;
    let mut subscription = consumer.subscribe("/queue/store.full", AckMode::Auto, &[]).await?;
    let drained = recv_n(&mut subscription, blocked).await?;
    ensure!(drained.len() == blocked);
    let frame = tokio::time::timeout(ARRIVES * 2, producer.read_frame())
        .await
        .context("the held send never went through")??;
    ensure!(frame.get("receipt-id") == Some(&format!("r{blocked}")), "got {frame:?}");
    let last = recv_n(&mut subscription, 1).await?;
    ensure!(last[0].body().starts_with(format!("{blocked:05}").as_bytes()), "lost the held send");
    broker.shutdown().await;
    Ok(())
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn a_full_store_refuses_sends_when_configured_to_fail() -> anyhow::Result<()> {
    let data = tempfile::tempdir()?;
    let broker = start_broker(|config| {
        small_journal(config, data.path());
        config.broker.send_fail_if_no_space = true;
    })
    .await?;
    let (mut producer, _) = RawConnection::connect(stomp_addr(&broker)?, &[]).await?;
    let refused = producer.send_until_refused(1000, persistent_send).await?;
    let (index, error) = refused.context("1000 sends of 8 KiB went into a 4 MiB store")?;
    ensure!(index > 300, "refused after only {index} messages");
    let message = error.get("message").unwrap_or_default();
    ensure!(message.contains("Store Limit reached"), "{error:?}");
    // What was accepted is all there.
    broker.shutdown().await;
    let broker = start_broker(|config| small_journal(config, data.path())).await?;
    let consumer = connect(&broker).await?;
    let mut subscription = consumer.subscribe("/queue/store.full", AckMode::Auto, &[]).await?;
    let all = recv_n(&mut subscription, index).await?;
    ensure!(all.len() == index);
    broker.shutdown().await;
    Ok(())
}
