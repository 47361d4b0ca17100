//! Configured composite destinations (`[[composite_destinations]]`, ActiveMQ's
//! `<compositeQueue>` / `<compositeTopic>`): a message sent to a composite goes to each target
//! whose selector matches it, and to the composite itself unless it is forward-only; each copy
//! shows its target as destination and the composite as original destination. Also the
//! destination a consumer sees for a part of a client-side composite (`A,B`).

use std::sync::Arc;

use anyhow::{ensure, Context as _};
use client::AckMode;
use conf::{CompositeDestinationConfig, Config, DestinationName, DestinationType, ForwardTarget};
use tests::{
    assert_nothing_arrives, bodies, connect, queue_key, recv, recv_n, start_broker,
    start_broker_with_store, stored_count, RecordingStore, PERSISTENT,
};

fn queue(name: &str) -> DestinationName {
    DestinationName { kind: DestinationType::Queue, name: name.to_owned() }
}

fn topic(name: &str) -> DestinationName {
    DestinationName { kind: DestinationType::Topic, name: name.to_owned() }
}

fn target(destination: DestinationName, selector: Option<&str>) -> ForwardTarget {
    ForwardTarget { destination, selector: selector.map(str::to_owned) }
}

/// `ORDERS.ALL` forwards to queue `ORDERS.EU`, topic `AUDIT`, and to queue `ORDERS.BIG` the
/// messages whose `size` is `'big'` (STOMP headers are string properties).
fn orders(forward_only: bool) -> impl FnOnce(&mut Config) {
    move |config| {
        config.composite_destinations = vec![CompositeDestinationConfig {
            name: queue("ORDERS.ALL"),
            forward_only,
            forward_to: vec![
                target(queue("ORDERS.EU"), None),
                target(topic("AUDIT"), None),
                target(queue("ORDERS.BIG"), Some("size = 'big'")),
            ],
        }];
    }
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn a_forward_only_composite_queue_reaches_its_targets_and_keeps_nothing() -> anyhow::Result<()>
{
    let broker = start_broker(orders(true)).await?;
    let client = connect(&broker).await?;
    let mut eu = client.subscribe("/queue/ORDERS.EU", AckMode::Auto, &[]).await?;
    let mut audit = client.subscribe("/topic/AUDIT", AckMode::Auto, &[]).await?;
    let mut all = client.subscribe("/queue/ORDERS.ALL", AckMode::Auto, &[]).await?;

    let producer = connect(&broker).await?;
    producer.send_with_receipt("/queue/ORDERS.ALL", "order-1", &[PERSISTENT]).await?;

    let from_eu = recv(&mut eu).await?;
    assert_eq!(from_eu.body().as_ref(), b"order-1");
    // As ActiveMQ's copyMessage: the target is the destination, the composite the original.
    assert_eq!(from_eu.destination(), Some("/queue/ORDERS.EU"));
    assert_eq!(from_eu.header("original-destination"), Some("/queue/ORDERS.ALL"));
    let from_audit = recv(&mut audit).await?;
    assert_eq!(from_audit.body().as_ref(), b"order-1");
    assert_eq!(from_audit.destination(), Some("/topic/AUDIT"));
    assert_eq!(from_audit.header("original-destination"), Some("/queue/ORDERS.ALL"));
    assert_nothing_arrives(&mut all).await?;
    assert_eq!(stored_count(&broker, "ORDERS.ALL")?, 0);
    Ok(())
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn a_composite_that_is_not_forward_only_keeps_every_message_too() -> anyhow::Result<()> {
    let broker = start_broker(orders(false)).await?;
    let client = connect(&broker).await?;
    let mut eu = client.subscribe("/queue/ORDERS.EU", AckMode::Auto, &[]).await?;
    let mut all = client.subscribe("/queue/ORDERS.ALL", AckMode::Auto, &[]).await?;

    let producer = connect(&broker).await?;
    producer.send_with_receipt("/queue/ORDERS.ALL", "order-1", &[]).await?;

    assert_eq!(recv(&mut eu).await?.body().as_ref(), b"order-1");
    let own = recv(&mut all).await?;
    assert_eq!(own.body().as_ref(), b"order-1");
    // The composite's own copy is the message as sent.
    assert_eq!(own.destination(), Some("/queue/ORDERS.ALL"));
    assert_eq!(own.header("original-destination"), None);
    assert_nothing_arrives(&mut all).await?;
    Ok(())
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn a_filtered_target_gets_only_what_its_selector_matches() -> anyhow::Result<()> {
    let broker = start_broker(orders(true)).await?;
    let client = connect(&broker).await?;
    let mut eu = client.subscribe("/queue/ORDERS.EU", AckMode::Auto, &[]).await?;
    let mut big = client.subscribe("/queue/ORDERS.BIG", AckMode::Auto, &[]).await?;

    let producer = connect(&broker).await?;
    for (body, size) in [("a", "small"), ("b", "big"), ("c", "small"), ("d", "big")] {
        producer.send_with_receipt("/queue/ORDERS.ALL", body, &[("size", size)]).await?;
    }
    producer.send_with_receipt("/queue/ORDERS.ALL", "e", &[]).await?;

    assert_eq!(bodies(&recv_n(&mut eu, 5).await?), ["a", "b", "c", "d", "e"]);
    let matched = recv_n(&mut big, 2).await?;
    assert_eq!(bodies(&matched), ["b", "d"]);
    assert_eq!(matched[0].destination(), Some("/queue/ORDERS.BIG"));
    assert_eq!(matched[0].header("original-destination"), Some("/queue/ORDERS.ALL"));
    assert_nothing_arrives(&mut big).await?;
    Ok(())
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn a_composite_topic_feeds_its_subscribers_and_a_queue() -> anyhow::Result<()> {
    let broker = start_broker(|config| {
        config.composite_destinations = vec![CompositeDestinationConfig {
            name: topic("PRICES"),
            forward_only: false,
            forward_to: vec![
                target(queue("PRICES.LOG"), None),
                target(topic("MIRROR.PRICES"), None),
            ],
        }];
    })
    .await?;
    let client = connect(&broker).await?;
    let mut prices = client.subscribe("/topic/PRICES", AckMode::Auto, &[]).await?;
    let mut mirror = client.subscribe("/topic/MIRROR.>", AckMode::Auto, &[]).await?;
    let mut log = client.subscribe("/queue/PRICES.LOG", AckMode::Auto, &[]).await?;

    let producer = connect(&broker).await?;
    producer.send_with_receipt("/topic/PRICES", "42", &[]).await?;

    let own = recv(&mut prices).await?;
    assert_eq!(own.destination(), Some("/topic/PRICES"));
    assert_eq!(own.header("original-destination"), None);
    // A wildcard subscriber sees the topic of the composite it matched.
    let mirrored = recv(&mut mirror).await?;
    assert_eq!(mirrored.destination(), Some("/topic/MIRROR.PRICES"));
    assert_eq!(mirrored.header("original-destination"), Some("/topic/PRICES"));
    let logged = recv(&mut log).await?;
    assert_eq!(logged.destination(), Some("/queue/PRICES.LOG"));
    assert_eq!(logged.header("original-destination"), Some("/topic/PRICES"));
    for subscription in [&mut prices, &mut mirror, &mut log] {
        assert_nothing_arrives(subscription).await?;
    }
    Ok(())
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn a_persistent_message_to_a_composite_is_stored_once() -> anyhow::Result<()> {
    let store = Arc::new(RecordingStore::new());
    let broker = start_broker_with_store(store.clone(), orders(true)).await?;
    let producer = connect(&broker).await?;
    producer
        .send_with_receipt("/queue/ORDERS.ALL", "stored once", &[PERSISTENT, ("size", "big")])
        .await?;

    let adds = store.adds();
    ensure!(adds.len() == 1, "one AddMessage for the send: {adds:?}");
    let mut queues = adds[0].queues.clone();
    queues.sort();
    assert_eq!(queues, [queue_key("ORDERS.BIG"), queue_key("ORDERS.EU")]);
    assert_eq!(stored_count(&broker, "ORDERS.EU")?, 1);
    assert_eq!(stored_count(&broker, "ORDERS.BIG")?, 1);
    broker.shutdown().await;
    Ok(())
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn a_transacted_send_to_a_composite_reaches_its_topic_target_at_the_commit(
) -> anyhow::Result<()> {
    let broker = start_broker(orders(true)).await?;
    let client = connect(&broker).await?;
    let producer = connect(&broker).await?;
    producer.begin("tx1").await?;
    producer.send_with_receipt("/queue/ORDERS.ALL", "in tx", &[("transaction", "tx1")]).await?;
    // Subscribed after the send, before the commit: a transacted topic message is published
    // at the commit.
    let mut audit = client.subscribe("/topic/AUDIT", AckMode::Auto, &[]).await?;
    let mut eu = client.subscribe("/queue/ORDERS.EU", AckMode::Auto, &[]).await?;
    assert_nothing_arrives(&mut eu).await?;
    producer.commit("tx1").await?;
    assert_eq!(recv(&mut audit).await?.body().as_ref(), b"in tx");
    assert_eq!(recv(&mut eu).await?.body().as_ref(), b"in tx");
    Ok(())
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn the_broker_refuses_to_start_with_an_invalid_target_selector() -> anyhow::Result<()> {
    let started = start_broker(|config| {
        config.composite_destinations = vec![CompositeDestinationConfig {
            name: queue("A"),
            forward_only: true,
            forward_to: vec![target(queue("B"), None), target(queue("C"), Some("amount >"))],
        }];
    })
    .await;
    let error = format!("{:#}", started.err().context("an invalid selector must be refused")?);
    ensure!(
        error.contains(
            "`composite_destinations[0].forward_to[1].selector`: invalid selector at column"
        ),
        "{error}"
    );
    Ok(())
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn a_part_of_a_client_side_composite_shows_itself_and_the_composite() -> anyhow::Result<()> {
    let broker = start_broker(|_| {}).await?;
    let client = connect(&broker).await?;
    let mut a = client.subscribe("/queue/parts.A", AckMode::Auto, &[]).await?;
    let mut t = client.subscribe("/topic/parts.T", AckMode::Auto, &[]).await?;
    let producer = connect(&broker).await?;
    producer.send_with_receipt("/queue/parts.A,topic://parts.T", "both", &[]).await?;

    let from_a = recv(&mut a).await?;
    assert_eq!(from_a.destination(), Some("/queue/parts.A"));
    assert_eq!(from_a.header("original-destination"), Some("/queue/parts.A,topic://parts.T"));
    let from_t = recv(&mut t).await?;
    assert_eq!(from_t.destination(), Some("/topic/parts.T"));
    assert_eq!(from_t.header("original-destination"), Some("/queue/parts.A,topic://parts.T"));
    Ok(())
}
