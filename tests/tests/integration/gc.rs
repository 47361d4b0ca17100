//! Garbage collection of inactive destinations (`[[policies]] gc_inactive_destinations`): an
//! idle empty queue or topic leaves the admin endpoint's list, with a remove advisory, after
//! the policy's timeout; one that holds a message, has a consumer or a durable subscription
//! stays; one used again is created again.

use std::time::Duration;

use anyhow::{ensure, Context as _};
use broker::admin::{AdminClient, DestinationStats, StatsKind};
use broker::BrokerHandle;
use client::AckMode;
use store::Destination;
use tests::{bodies, connect, connect_as, recv, recv_n, start_broker, wait_until};

/// Short enough for a test, long enough that the sweep (every 150 ms) sees it several times.
const TIMEOUT_MS: u64 = 300;

/// A broker whose queues and topics under `gc.` are collected after [`TIMEOUT_MS`].
async fn start() -> anyhow::Result<BrokerHandle> {
    let policies = conf::Config::parse(
        &format!(
            "[[policies]]\nqueue = \"gc.>\"\ngc_inactive_destinations = true\n\
             inactive_timeout_before_gc_ms = {TIMEOUT_MS}\n\
             [[policies]]\ntopic = \"gc.>\"\ngc_inactive_destinations = true\n\
             inactive_timeout_before_gc_ms = {TIMEOUT_MS}\n"
        ),
        "test.toml",
    )?
    .policies;
    start_broker(|config| config.policies = policies).await
}

fn admin(broker: &BrokerHandle) -> anyhow::Result<AdminClient> {
    let addr = broker.admin_addr().context("the admin endpoint is on")?;
    Ok(AdminClient::new(&format!("http://{addr}"))?)
}

async fn listed(admin: &AdminClient) -> anyhow::Result<Vec<(StatsKind, String)>> {
    let all: Vec<DestinationStats> = admin.get_json("/api/destinations").await?;
    Ok(all.into_iter().map(|d| (d.kind, d.name)).collect())
}

async fn is_listed(admin: &AdminClient, kind: StatsKind, name: &str) -> bool {
    listed(admin).await.is_ok_and(|all| all.iter().any(|(k, n)| *k == kind && n == name))
}

/// Long enough for anything collectable to have been collected several times over.
async fn several_timeouts() {
    tokio::time::sleep(Duration::from_millis(TIMEOUT_MS * 4)).await;
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn an_idle_empty_queue_is_removed_and_busy_ones_are_not() -> anyhow::Result<()> {
    let broker = start().await?;
    let admin = admin(&broker)?;
    let monitor = connect(&broker).await?;
    let mut advisories =
        monitor.subscribe("/topic/ActiveMQ.Advisory.Queue", AckMode::Auto, &[]).await?;

    let client = connect(&broker).await?;
    // Drained: a persistent message sent, consumed and acknowledged.
    let mut drained = client.subscribe("/queue/gc.drained", AckMode::ClientIndividual, &[]).await?;
    client.send_with_receipt("/queue/gc.drained", "once", &[("persistent", "true")]).await?;
    let message = recv(&mut drained).await?;
    client.ack(&message).await?;
    drained.unsubscribe().await?;
    // Holding a message nobody consumes.
    client.send_with_receipt("/queue/gc.holding", "kept", &[("persistent", "true")]).await?;
    // With a consumer and no message.
    let _watched = client.subscribe("/queue/gc.watched", AckMode::Auto, &[]).await?;
    // Outside the policy.
    client.send_with_receipt("/queue/other.idle", "x", &[]).await?;
    let mut other = client.subscribe("/queue/other.idle", AckMode::Auto, &[]).await?;
    recv(&mut other).await?;
    other.unsubscribe().await?;
    assert!(is_listed(&admin, StatsKind::Queue, "gc.drained").await);

    wait_until("the drained queue is no longer listed", || async {
        !is_listed(&admin, StatsKind::Queue, "gc.drained").await
    })
    .await?;
    let mut removed = Vec::new();
    while removed.is_empty() {
        let advisory = recv(&mut advisories).await?;
        if advisory.header("ferromq.advisory.operation") == Some("remove") {
            removed.push(advisory.header("ferromq.advisory.destination").map(str::to_owned));
        }
    }
    assert_eq!(removed, [Some("queue://gc.drained".to_owned())]);
    // The store forgot it too (a restart would not bring it back).
    let stored = broker.store().recover()?.destinations;
    ensure!(!stored.contains(&Destination::queue("gc.drained")), "still stored: {stored:?}");
    ensure!(stored.contains(&Destination::queue("gc.holding")), "lost: {stored:?}");

    several_timeouts().await;
    let all = listed(&admin).await?;
    for name in ["gc.holding", "gc.watched", "other.idle"] {
        assert!(all.contains(&(StatsKind::Queue, name.to_owned())), "{name} is gone: {all:?}");
    }
    assert!(!all.contains(&(StatsKind::Queue, "gc.drained".to_owned())));

    // Used again, it is created again, with nothing of its past.
    client.send_with_receipt("/queue/gc.drained", "again", &[]).await?;
    let mut again = client.subscribe("/queue/gc.drained", AckMode::Auto, &[]).await?;
    assert_eq!(bodies(&recv_n(&mut again, 1).await?), ["again"]);
    // And the held message is still there.
    let mut holding = client.subscribe("/queue/gc.holding", AckMode::Auto, &[]).await?;
    assert_eq!(bodies(&recv_n(&mut holding, 1).await?), ["kept"]);
    broker.shutdown().await;
    Ok(())
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn an_inactive_topic_is_removed_unless_subscribed() -> anyhow::Result<()> {
    let broker = start().await?;
    let admin = admin(&broker)?;
    let monitor = connect(&broker).await?;
    let mut advisories =
        monitor.subscribe("/topic/ActiveMQ.Advisory.Topic", AckMode::Auto, &[]).await?;

    let client = connect_as(&broker, "gc-client").await?;
    client.send_with_receipt("/topic/gc.news", "nobody listens", &[]).await?;
    let _live = client.subscribe("/topic/gc.live", AckMode::Auto, &[]).await?;
    client.send_with_receipt("/topic/gc.live", "heard", &[]).await?;
    let durable = client
        .subscribe("/topic/gc.durable", AckMode::Auto, &[("activemq.subscriptionName", "d")])
        .await?;
    client.send_with_receipt("/topic/gc.durable", "kept", &[]).await?;
    durable.unsubscribe().await?;

    wait_until("the unsubscribed topic is no longer listed", || async {
        !is_listed(&admin, StatsKind::Topic, "gc.news").await
    })
    .await?;
    let advisory = recv(&mut advisories).await?;
    assert_eq!(advisory.header("ferromq.advisory.operation"), Some("remove"));
    assert_eq!(advisory.header("ferromq.advisory.destination"), Some("topic://gc.news"));

    several_timeouts().await;
    for name in ["gc.live", "gc.durable"] {
        assert!(is_listed(&admin, StatsKind::Topic, name).await, "{name} is gone");
    }
    broker.shutdown().await;
    Ok(())
}
