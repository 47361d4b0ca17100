//! Destination policies (`[[policies]]`, ActiveMQ's `policyEntry`): seed 002's entry loads
//! and takes effect, and each destination runs with the entry that matches it: memory limit
//! and producer flow control, prefetch, strict-order and lazy dispatch, dead letters.

use anyhow::{ensure, Context as _};
use broker::admin::{AdminClient, DestinationStats, StatsKind};
use broker::BrokerHandle;
use client::AckMode;
use conf::{Config, PolicyEntry};
use tests::{
    assert_nothing_arrives, bodies, connect, recv, recv_n, start_broker, wait_until, RawConnection,
    PERSISTENT, QUIET,
};

/// Seed 002's `<policyEntry queue=">" ...>`, as written in ferromq's configuration.
const SEED_002: &str = include_str!("../../../conf/tests/seed-002-policy.toml");

/// The `[[policies]]` entries of `text`, parsed as a configuration file is.
fn policies(text: &str) -> anyhow::Result<Vec<PolicyEntry>> {
    Ok(Config::parse(text, "policies.toml")?.policies)
}

fn admin(broker: &BrokerHandle) -> anyhow::Result<AdminClient> {
    let addr = broker.admin_addr().context("the admin endpoint is on")?;
    Ok(AdminClient::new(&format!("http://{addr}"))?)
}

async fn stats_of(
    admin: &AdminClient,
    kind: StatsKind,
    name: &str,
) -> anyhow::Result<DestinationStats> {
    let kind = match kind {
        StatsKind::Queue => "queue",
        StatsKind::Topic => "topic",
    };
    Ok(admin.get_json(&format!("/api/destinations/{kind}/{name}")).await?)
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn seed_002_s_policy_loads_and_takes_effect() -> anyhow::Result<()> {
    let entries = policies(SEED_002)?;
    let broker = start_broker(|config| config.policies = entries).await?;
    let client = connect(&broker).await?;
    // Strict order: the first consumer's prefetch fills before the second gets anything
    // (round-robin would alternate).
    let prefetch = ("activemq.prefetchSize", "4");
    let mut first = client.subscribe("/queue/seed.orders", AckMode::Client, &[prefetch]).await?;
    let mut second = client.subscribe("/queue/seed.orders", AckMode::Client, &[prefetch]).await?;
    for index in 0..6 {
        client.send_with_receipt("/queue/seed.orders", format!("m{index}"), &[]).await?;
    }
    let to_first = recv_n(&mut first, 4).await?;
    ensure!(bodies(&to_first) == ["m0", "m1", "m2", "m3"], "first got {:?}", bodies(&to_first));
    let to_second = recv_n(&mut second, 2).await?;
    ensure!(bodies(&to_second) == ["m4", "m5"], "second got {:?}", bodies(&to_second));

    // Queues have the entry's 128 MB memory limit; topics (no entry) the default 64 MiB.
    client.send_with_receipt("/topic/seed.prices", "p", &[]).await?;
    let admin = admin(&broker)?;
    let queue = stats_of(&admin, StatsKind::Queue, "seed.orders").await?;
    ensure!(queue.memory_limit_bytes == 128 << 20, "queue: {queue:?}");
    let topic = stats_of(&admin, StatsKind::Topic, "seed.prices").await?;
    ensure!(topic.memory_limit_bytes == 64 << 20, "topic: {topic:?}");
    let metrics = admin.request("GET", "/metrics").await?.body;
    ensure!(
        metrics.contains(
            "ferromq_destination_memory_limit_bytes{destination=\"seed.orders\",kind=\"queue\"} \
             134217728\n"
        ),
        "{metrics}"
    );
    broker.shutdown().await;
    Ok(())
}

/// Sends 1 KiB non-persistent messages with a receipt each; the number that went through
/// before one was held (its receipt not back within [`QUIET`]), or `count` if none was.
async fn sends_before_held(
    producer: &mut RawConnection,
    destination: &str,
    count: usize,
) -> anyhow::Result<usize> {
    use protocol::stomp::{Command, Frame};
    for index in 0..count {
        let frame = Frame::new(Command::Send)
            .header("destination", destination)
            .header("receipt", format!("r{index}"))
            .with_body(format!("{index:04}{}", "x".repeat(1020)));
        producer.write_frame(&frame).await?;
        if producer.expect_no_frame(QUIET).await.is_ok() {
            return Ok(index);
        }
    }
    Ok(count)
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn memory_limit_and_flow_control_are_per_destination() -> anyhow::Result<()> {
    let entries = policies(
        r#"
        [[policies]]
        queue = "roomy"
        memory_limit = "512 kb"
        [[policies]]
        queue = "unpaced.>"
        producer_flow_control = false
        "#,
    )?;
    let broker = start_broker(|config| {
        config.destinations.memory_limit = 64 << 10;
        config.policies = entries;
    })
    .await?;
    let addr = tests::stomp_addr(&broker)?;
    // The default 64 KiB holds about 40 of these messages, the policy's 512 KiB about 300.
    let (mut producer, _) = RawConnection::connect(addr, &[]).await?;
    let small = sends_before_held(&mut producer, "/queue/tight", 600).await?;
    let (mut producer, _) = RawConnection::connect(addr, &[]).await?;
    let roomy = sends_before_held(&mut producer, "/queue/roomy", 600).await?;
    ensure!(small < 100 && roomy > 4 * small && roomy < 600, "held after {small} and {roomy}");
    // Without producer flow control the destination's limit holds nothing back.
    let (mut producer, _) = RawConnection::connect(addr, &[]).await?;
    let unpaced = sends_before_held(&mut producer, "/queue/unpaced.a", 400).await?;
    ensure!(unpaced == 400, "held after {unpaced}");
    let client = connect(&broker).await?;
    let mut all = client.subscribe("/queue/unpaced.a", AckMode::Auto, &[]).await?;
    let received = recv_n(&mut all, 400).await?;
    let expected: Vec<String> = (0..400).map(|i| format!("{i:04}{}", "x".repeat(1020))).collect();
    ensure!(bodies(&received) == expected, "lost or reordered");
    broker.shutdown().await;
    Ok(())
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn a_policy_prefetch_applies_to_consumers_that_ask_for_none() -> anyhow::Result<()> {
    let entries = policies("[[policies]]\nqueue = \"few.>\"\nqueue_prefetch = 3\n")?;
    let broker = start_broker(|config| config.policies = entries).await?;
    let client = connect(&broker).await?;
    let mut few = client.subscribe("/queue/few.a", AckMode::ClientIndividual, &[]).await?;
    let mut many = client.subscribe("/queue/many", AckMode::ClientIndividual, &[]).await?;
    for index in 0..10 {
        client.send_with_receipt("/queue/few.a", format!("m{index}"), &[]).await?;
        client.send_with_receipt("/queue/many", format!("m{index}"), &[]).await?;
    }
    let held = recv_n(&mut few, 3).await?;
    assert_nothing_arrives(&mut few).await?;
    // [destinations] queue_prefetch (1000) for the queue no entry covers.
    let all = recv_n(&mut many, 10).await?;
    ensure!(all.len() == 10);
    client.ack(&held[0]).await?;
    let next = recv(&mut few).await?;
    ensure!(next.body().as_ref() == b"m3", "got {next:?}");
    broker.shutdown().await;
    Ok(())
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn lazy_dispatch_keeps_only_what_consumers_can_take() -> anyhow::Result<()> {
    let entries = policies("[[policies]]\nqueue = \"lazy\"\nlazy_dispatch = true\n")?;
    let broker = start_broker(|config| config.policies = entries).await?;
    let client = connect(&broker).await?;
    let body = "y".repeat(1024);
    for queue in ["/queue/lazy", "/queue/eager"] {
        for index in 0..500 {
            client.send_with_receipt(queue, format!("{index:04}{body}"), &[PERSISTENT]).await?;
        }
    }
    let admin = admin(&broker)?;
    let eager = stats_of(&admin, StatsKind::Queue, "eager").await?;
    let lazy = stats_of(&admin, StatsKind::Queue, "lazy").await?;
    // Eager holds all 500 (about 0.5 MB); lazy keeps its minimum window of 64.
    ensure!(eager.memory_bytes > 500 * 1024, "eager: {eager:?}");
    ensure!(lazy.memory_bytes < 100 * 1024 && lazy.pending == 500, "lazy: {lazy:?}");
    let mut drain = client.subscribe("/queue/lazy", AckMode::Auto, &[]).await?;
    let received = recv_n(&mut drain, 500).await?;
    let expected: Vec<String> = (0..500).map(|index| format!("{index:04}{body}")).collect();
    ensure!(bodies(&received) == expected, "lost or reordered");
    broker.shutdown().await;
    Ok(())
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn each_destination_dead_letters_as_its_policy_says() -> anyhow::Result<()> {
    let entries = policies(
        r#"
        [[policies]]
        queue = "ORDERS.>"
        dead_letter = { strategy = "individual", max_redeliveries = 0 }
        "#,
    )?;
    let broker = start_broker(|config| {
        config.dead_letter.max_redeliveries = 0;
        config.policies = entries;
    })
    .await?;
    let client = connect(&broker).await?;
    for queue in ["/queue/ORDERS.EU", "/queue/OTHER"] {
        let mut sub = client.subscribe(queue, AckMode::ClientIndividual, &[]).await?;
        client.send_with_receipt(queue, "poison", &[PERSISTENT]).await?;
        let message = recv(&mut sub).await?;
        client.nack(&message).await?;
        sub.unsubscribe().await?;
    }
    let mut individual =
        client.subscribe("/queue/ActiveMQ.DLQ.Queue.ORDERS.EU", AckMode::Auto, &[]).await?;
    let letter = recv(&mut individual).await?;
    ensure!(letter.header("original-destination") == Some("/queue/ORDERS.EU"), "{letter:?}");
    let mut shared = client.subscribe("/queue/ActiveMQ.DLQ", AckMode::Auto, &[]).await?;
    let letter = recv(&mut shared).await?;
    ensure!(letter.header("original-destination") == Some("/queue/OTHER"), "{letter:?}");
    assert_nothing_arrives(&mut shared).await?;
    broker.shutdown().await;
    Ok(())
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn memory_use_is_reported_against_each_destination_s_own_limit() -> anyhow::Result<()> {
    let entries = policies("[[policies]]\nqueue = \"half\"\nmemory_limit = \"128 kb\"\n")?;
    let broker = start_broker(|config| config.policies = entries).await?;
    let client = connect(&broker).await?;
    // About 64 KiB held: half of the 128 KiB limit.
    for index in 0..60 {
        client
            .send_with_receipt("/queue/half", format!("{index:04}{}", "z".repeat(1020)), &[])
            .await?;
    }
    let admin = admin(&broker)?;
    wait_until("the queue holds its 60 messages", || async {
        stats_of(&admin, StatsKind::Queue, "half").await.is_ok_and(|d| d.pending == 60)
    })
    .await?;
    let stats = stats_of(&admin, StatsKind::Queue, "half").await?;
    let percent = stats.memory_bytes * 100 / stats.memory_limit_bytes;
    ensure!((40..70).contains(&percent), "{percent}% of {stats:?}");
    broker.shutdown().await;
    Ok(())
}
