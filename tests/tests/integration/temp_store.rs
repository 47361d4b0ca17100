//! The temporary store (ActiveMQ's `tmp_storage` and systemUsage `tempUsage`): a broker that
//! holds a data directory spills the non-persistent messages of a queue beyond its memory
//! limit to `<data_dir>/tmp_storage` and pages them back in order, among its persistent
//! ones; `[broker] temp_limit` holds non-persistent producers (or refuses them) as
//! `[store] max_size` holds persistent ones; nothing in it survives a restart.

use std::path::Path;
use std::time::Duration;

use anyhow::{ensure, Context as _};
use broker::admin::{AdminClient, DestinationStats};
use broker::BrokerHandle;
use client::AckMode;
use protocol::stomp::{Command, Frame};
use tests::{
    bodies, connect, recv_n, start_broker, stomp_addr, wait_until, RawConnection, ARRIVES,
    PERSISTENT,
};

/// A queue destination memory limit that holds about 800 of the 1 KiB messages below.
const QUEUE_LIMIT: u64 = 1 << 20;

/// A broker with a journal under `data` (so it holds its data directory and has a temporary
/// store), `memory_limit` per destination, and producer flow control off for `unpaced.>`.
fn spilling_config(config: &mut conf::Config, data: &Path, memory_limit: u64) {
    config.store.kind = conf::StoreKind::Journal;
    config.broker.data_dir = data.to_path_buf();
    config.destinations.memory_limit = memory_limit;
    config.policies = conf::Config::parse(
        "[[policies]]\nqueue = \"unpaced.>\"\nproducer_flow_control = false\n",
        "policies.toml",
    )
    .expect("the policy parses")
    .policies;
}

fn admin(broker: &BrokerHandle) -> anyhow::Result<AdminClient> {
    let addr = broker.admin_addr().context("the admin endpoint is on")?;
    Ok(AdminClient::new(&format!("http://{addr}"))?)
}

/// The temporary store's bytes in use, as `/api/broker` shows them.
async fn temp_used(admin: &AdminClient) -> anyhow::Result<u64> {
    let broker = admin.broker().await?;
    Ok(broker.temp.context("the broker has a temporary store")?.used_bytes)
}

fn body(index: usize) -> String {
    format!("{index:06}{}", "x".repeat(1018))
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn non_persistent_messages_beyond_the_limit_spill_and_drain_in_order() -> anyhow::Result<()> {
    const COUNT: usize = 50_000;
    let data = tempfile::tempdir()?;
    let broker = start_broker(|config| spilling_config(config, data.path(), QUEUE_LIMIT)).await?;
    let admin = admin(&broker)?;
    ensure!(!data.path().join("tmp_storage").exists(), "an idle broker creates no temporary store");
    ensure!(temp_used(&admin).await? == 0);
    let producer = connect(&broker).await?;
    for index in 0..COUNT - 1 {
        producer.send("/queue/unpaced.spill", body(index), &[]).await?;
    }
    // SENDs are taken in order: its receipt says every one before it was accepted.
    producer.send_with_receipt("/queue/unpaced.spill", body(COUNT - 1), &[]).await?;
    let path = "/api/destinations/queue/unpaced.spill";
    wait_until("every message is counted", || async {
        admin.get_json::<DestinationStats>(path).await.is_ok_and(|d| d.pending == COUNT as u64)
    })
    .await?;
    let queue: DestinationStats = admin.get_json(path).await?;
    ensure!(
        queue.memory_bytes <= QUEUE_LIMIT,
        "the queue holds {} bytes in memory for a limit of {QUEUE_LIMIT}",
        queue.memory_bytes
    );
    let spilled = temp_used(&admin).await?;
    ensure!(spilled > 40 << 20, "only {spilled} bytes in the temporary store");
    ensure!(data.path().join("tmp_storage").is_dir());
    let metrics = admin.request("GET", "/metrics").await?;
    let metrics = metrics.body;
    ensure!(metrics.contains("\nferromq_temp_used_bytes "), "{metrics}");
    ensure!(metrics.contains(&format!("\nferromq_temp_limit_bytes {}\n", 50u64 << 30)));

    let consumer = connect(&broker).await?;
    let mut subscription = consumer.subscribe("/queue/unpaced.spill", AckMode::Auto, &[]).await?;
    let received = recv_n(&mut subscription, COUNT).await?;
    for (index, message) in bodies(&received).iter().enumerate() {
        ensure!(*message == body(index), "message {index} is {:?}", &message[..6]);
    }
    // Read back, the messages left the temporary store; its files go at the next
    // checkpoints, all but the one being written.
    let deadline = tokio::time::Instant::now() + ARRIVES * 2;
    loop {
        let used = temp_used(&admin).await?;
        if used < 8 << 20 {
            break;
        }
        ensure!(tokio::time::Instant::now() < deadline, "{used} bytes still in use after a drain");
        tokio::time::sleep(Duration::from_millis(100)).await;
    }
    broker.shutdown().await;
    ensure!(!data.path().join("tmp_storage").exists(), "the temporary store goes at shutdown");
    Ok(())
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn persistent_and_spilled_messages_drain_in_priority_then_arrival_order() -> anyhow::Result<()>
{
    const COUNT: usize = 3000;
    let data = tempfile::tempdir()?;
    let broker = start_broker(|config| spilling_config(config, data.path(), 64 << 10)).await?;
    let producer = connect(&broker).await?;
    let mut expected = Vec::with_capacity(COUNT);
    for index in 0..COUNT {
        let priority = (index * 7 % 10).to_string();
        let mut headers = vec![("priority", priority.as_str())];
        if index % 2 == 0 {
            headers.push(PERSISTENT);
        }
        let text = format!("{priority}-{}", body(index));
        if index + 1 == COUNT {
            producer.send_with_receipt("/queue/unpaced.mixed", text.clone(), &headers).await?;
        } else {
            producer.send("/queue/unpaced.mixed", text.clone(), &headers).await?;
        }
        expected.push((std::cmp::Reverse(index * 7 % 10), index, text));
    }
    let used = temp_used(&admin(&broker)?).await?;
    ensure!(used > 0, "nothing spilled to the temporary store");
    expected.sort();
    let consumer = connect(&broker).await?;
    let mut subscription = consumer.subscribe("/queue/unpaced.mixed", AckMode::Auto, &[]).await?;
    let received = bodies(&recv_n(&mut subscription, COUNT).await?);
    for (position, (message, (_, index, text))) in received.iter().zip(&expected).enumerate() {
        ensure!(
            message == text,
            "at {position} got {:?}, expected message {index} ({:?})",
            &message[..9],
            &text[..9]
        );
    }
    broker.shutdown().await;
    Ok(())
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn a_slow_topic_subscriber_spills_and_catches_up_in_order() -> anyhow::Result<()> {
    const COUNT: usize = 5000;
    let data = tempfile::tempdir()?;
    let broker = start_broker(|config| {
        spilling_config(config, data.path(), 64 << 10);
        config.policies.extend(
            conf::Config::parse(
                "[[policies]]\ntopic = \"unpaced.>\"\nproducer_flow_control = false\n",
                "topics.toml",
            )
            .expect("the policy parses")
            .policies,
        );
    })
    .await?;
    let admin = admin(&broker)?;
    let subscriber = connect(&broker).await?;
    let prefetch = [("activemq.prefetchSize", "10")];
    let mut slow =
        subscriber.subscribe("/topic/unpaced.prices", AckMode::ClientIndividual, &prefetch).await?;
    let producer = connect(&broker).await?;
    for index in 0..COUNT - 1 {
        producer.send("/topic/unpaced.prices", body(index), &[]).await?;
    }
    producer.send_with_receipt("/topic/unpaced.prices", body(COUNT - 1), &[]).await?;
    let topic: DestinationStats = admin.get_json("/api/destinations/topic/unpaced.prices").await?;
    ensure!(topic.pending + topic.in_flight == COUNT as u64, "{topic:?}");
    ensure!(topic.memory_bytes < 256 << 10, "the subscriber holds {} bytes", topic.memory_bytes);
    ensure!(temp_used(&admin).await? > 4 << 20, "the slow subscriber's messages did not spill");
    for index in 0..COUNT {
        let message = tests::recv(&mut slow).await?;
        ensure!(bodies(std::slice::from_ref(&message))[0] == body(index), "message {index}");
        subscriber.ack(&message).await?;
    }
    broker.shutdown().await;
    Ok(())
}

/// A temporary store of 16 MiB (the least the configuration allows) behind a 64 KiB queue.
fn small_temp(config: &mut conf::Config, data: &Path) {
    spilling_config(config, data, 64 << 10);
    config.broker.temp_limit = 16 << 20;
}

fn large_send(index: usize) -> Frame {
    Frame::new(Command::Send)
        .header("destination", "/queue/unpaced.temp.full")
        .header("receipt", format!("r{index}"))
        .with_body(format!("{index:05}{}", "t".repeat(8 * 1024)))
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn a_full_temporary_store_holds_non_persistent_sends_until_drained() -> anyhow::Result<()> {
    let data = tempfile::tempdir()?;
    let broker = start_broker(|config| small_temp(config, data.path())).await?;
    let (mut producer, _) = RawConnection::connect(stomp_addr(&broker)?, &[]).await?;
    // About 1700 messages of 8 KiB fit in 16 MiB less the headroom.
    let blocked = producer.send_until_held(4000, large_send).await?;
    let blocked = blocked.context("4000 sends of 8 KiB went into a 16 MiB temporary store")?;
    ensure!(blocked > 1000, "held after only {blocked} messages");
    let stats = admin(&broker)?.broker().await?;
    ensure!(stats.temp.is_some_and(|temp| temp.full), "{stats:?}");
    // A consumer drains: the temporary store frees its files, the held send goes on.
    let consumer = connect(&broker).await?;
    let mut subscription =
        consumer.subscribe("/queue/unpaced.temp.full", AckMode::Auto, &[]).await?;
    let drained = recv_n(&mut subscription, blocked).await?;
    for (index, message) in drained.iter().enumerate() {
        ensure!(message.body().starts_with(format!("{index:05}").as_bytes()), "reordered");
    }
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
async fn a_full_temporary_store_refuses_non_persistent_sends_when_configured_to_fail(
) -> anyhow::Result<()> {
    let data = tempfile::tempdir()?;
    let broker = start_broker(|config| {
        small_temp(config, data.path());
        config.broker.send_fail_if_no_space = true;
    })
    .await?;
    let (mut producer, _) = RawConnection::connect(stomp_addr(&broker)?, &[]).await?;
    let refused = producer.send_until_refused(4000, large_send).await?;
    let (index, error) = refused.context("4000 sends of 8 KiB went into a 16 MiB temp store")?;
    ensure!(index > 1000, "refused after only {index} messages");
    let message = error.get("message").unwrap_or_default();
    ensure!(
        message.contains("ResourceAllocationException") && message.contains("Temp Store"),
        "{error:?}"
    );
    // Persistent sends do not depend on the temporary store.
    let client = connect(&broker).await?;
    client.send_with_receipt("/queue/unpaced.other", "kept", &[PERSISTENT]).await?;
    // Everything accepted is there, in order.
    let mut subscription = client.subscribe("/queue/unpaced.temp.full", AckMode::Auto, &[]).await?;
    let all = recv_n(&mut subscription, index).await?;
    for (position, message) in all.iter().enumerate() {
        ensure!(message.body().starts_with(format!("{position:05}").as_bytes()), "reordered");
    }
    broker.shutdown().await;
    Ok(())
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn after_a_restart_spilled_messages_are_gone_and_persistent_ones_remain() -> anyhow::Result<()>
{
    const COUNT: usize = 1000;
    let data = tempfile::tempdir()?;
    let broker = start_broker(|config| spilling_config(config, data.path(), 64 << 10)).await?;
    let producer = connect(&broker).await?;
    for index in 0..COUNT {
        let persistent = index % 2 == 0;
        let headers: &[(&str, &str)] = if persistent { &[PERSISTENT] } else { &[] };
        let text = format!("{}-{}", if persistent { 'p' } else { 'n' }, body(index));
        producer.send_with_receipt("/queue/unpaced.restart", text, headers).await?;
    }
    ensure!(temp_used(&admin(&broker)?).await? > 0, "nothing spilled");
    broker.shutdown().await;
    // What a crash would leave behind: the next start must not deliver any of it.
    let leftover = data.path().join("tmp_storage");
    std::fs::create_dir_all(&leftover)?;
    std::fs::write(leftover.join("db-00000001.log"), b"left by a crashed run")?;
    let broker = start_broker(|config| spilling_config(config, data.path(), 64 << 10)).await?;
    ensure!(
        !data.path().join("tmp_storage").exists(),
        "the temporary store of the last run is wiped at start"
    );
    ensure!(temp_used(&admin(&broker)?).await? == 0);
    let consumer = connect(&broker).await?;
    let mut subscription = consumer.subscribe("/queue/unpaced.restart", AckMode::Auto, &[]).await?;
    let received = bodies(&recv_n(&mut subscription, COUNT / 2).await?);
    let expected: Vec<String> =
        (0..COUNT).step_by(2).map(|index| format!("p-{}", body(index))).collect();
    ensure!(received == expected, "only the persistent messages come back, in order");
    tests::assert_nothing_arrives(&mut subscription).await?;
    broker.shutdown().await;
    Ok(())
}

/// A fast asynchronous OpenWire producer (non-persistent sends, no producer window: nothing
/// answers them) is held at the queue's memory limit: its sends close the queue's gate as
/// soon as they take the queue past it. The gate used to close only once the queue's task had
/// taken the messages, and the sends that passed meanwhile spilled to the temporary store
/// (25 MB of these 60 MB). A connection without consumers that holds all the sends it may
/// also stops reading, so that TCP paces the producer, as ActiveMQ blocks its transport.
#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn an_asynchronous_openwire_producer_is_paced_instead_of_spilled() -> anyhow::Result<()> {
    use client::openwire::{
        Destination, OpenWireClient, OpenWireOptions, OutgoingMessage, SessionMode,
        SubscribeOptions,
    };
    // Far more than the queue's limit, the connection's held sends (16 MiB) and what the
    // loopback socket buffers take together.
    const COUNT: usize = 60_000;
    let data = tempfile::tempdir()?;
    let broker = start_broker(|config| {
        spilling_config(config, data.path(), QUEUE_LIMIT);
        config.transport.connectors = vec![
            "stomp://127.0.0.1:0".parse().expect("uri"),
            "tcp://127.0.0.1:0".parse().expect("uri"),
        ];
    })
    .await?;
    let admin = admin(&broker)?;
    let addr = broker.openwire_addr().context("an OpenWire connector")?;
    // Held up for as long as the consumer below needs to start draining.
    let options = OpenWireOptions { timeout: ARRIVES * 4, ..OpenWireOptions::default() };
    let producing = OpenWireClient::connect(&addr.ip().to_string(), addr.port(), options).await?;
    let queue = Destination::queue("paced.async");
    let producer = tokio::spawn(async move {
        let session = producing.session(SessionMode::Auto).await?;
        let producer = session.producer(Some(Destination::queue("paced.async"))).await?;
        for index in 0..COUNT {
            producer.send(&OutgoingMessage::text(body(index)).persistent(false)).await?;
        }
        anyhow::Ok(producing)
    });
    let path = "/api/destinations/queue/paced.async";
    // The limit counts each message's bookkeeping too (`memory_bytes` does not): half of
    // it in bodies and headers is close to where the queue's gate closes.
    wait_until("the queue comes near its memory limit", || async {
        admin
            .get_json::<DestinationStats>(path)
            .await
            .is_ok_and(|d| d.memory_bytes >= QUEUE_LIMIT / 2)
    })
    .await?;
    let consuming =
        OpenWireClient::connect(&addr.ip().to_string(), addr.port(), OpenWireOptions::default())
            .await?;
    let session = consuming.session(SessionMode::Auto).await?;
    let mut consumer = session.consumer(SubscribeOptions::new(queue)).await?;
    // What the queue spills at its limit (as ActiveMQ's cursor spills at its high-water
    // mark) stays a few MiB; unpaced, the producer's 60 MB went there.
    let mut most_spilled = 0;
    for index in 0..COUNT {
        if index % 1000 == 0 {
            most_spilled = most_spilled.max(temp_used(&admin).await.unwrap_or(0));
        }
        let message = consumer.receive(ARRIVES).await?.context("expected a message")?;
        let text = message.text().unwrap_or_default();
        ensure!(text == body(index), "message {index} is {:?}", &text[..text.len().min(6)]);
    }
    let producing = producer.await??;
    producing.close().await?;
    ensure!(
        most_spilled < 8 << 20,
        "the broker spilled {most_spilled} bytes of the producer's messages to the temporary store"
    );
    broker.shutdown().await;
    Ok(())
}
