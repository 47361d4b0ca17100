//! Virtual topics as ActiveMQ defines them: a message sent to a virtual topic (by default any
//! topic matching `VirtualTopic.>`) also goes to every consumer queue `<prefix><topic>` that
//! exists (default prefix `Consumer.*.`, the `*` naming the consumer group). The members of
//! one group share their queue; each group, and each plain topic subscriber, gets every
//! message; a persistent message is stored once, referenced by each consumer queue.

use std::sync::Arc;

use anyhow::{ensure, Context as _};
use client::AckMode;
use conf::{Config, VirtualTopicConfig};
use tests::{
    assert_nothing_arrives, bodies, connect, queue_key, recv, recv_n, send_persistent,
    start_broker, start_broker_with_store, stored_count, RecordingStore, PERSISTENT,
};

const ORDERS: &str = "/topic/VirtualTopic.Orders";
const GROUP_A: &str = "/queue/Consumer.A.VirtualTopic.Orders";
const GROUP_B: &str = "/queue/Consumer.B.VirtualTopic.Orders";

fn numbered(prefix: &str, count: usize) -> Vec<String> {
    (0..count).map(|i| format!("{prefix}{i}")).collect()
}

/// Seed 002's configuration: one virtual topic `MyTopic` with consumer queues
/// `VirtualQueueConsumer.<group>.MyTopic`, replacing the default rule.
fn my_topic_config(config: &mut Config) {
    config.virtual_topics = vec![VirtualTopicConfig {
        name: "MyTopic".into(),
        prefix: "VirtualQueueConsumer.*.".into(),
    }];
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn group_members_share_and_every_group_and_subscriber_gets_everything() -> anyhow::Result<()>
{
    let broker = start_broker(|_| {}).await?;
    let (a1, a2, b, t) = (
        connect(&broker).await?,
        connect(&broker).await?,
        connect(&broker).await?,
        connect(&broker).await?,
    );
    let mut a1_sub = a1.subscribe(GROUP_A, AckMode::ClientIndividual, &[]).await?;
    let mut a2_sub = a2.subscribe(GROUP_A, AckMode::ClientIndividual, &[]).await?;
    let mut b_sub = b.subscribe(GROUP_B, AckMode::ClientIndividual, &[]).await?;
    let mut t_sub = t.subscribe(ORDERS, AckMode::Auto, &[]).await?;

    let producer = connect(&broker).await?;
    send_persistent(&producer, ORDERS, "order", 10).await?;

    let expected = numbered("order", 10);
    assert_eq!(bodies(&recv_n(&mut b_sub, 10).await?), expected);
    assert_eq!(bodies(&recv_n(&mut t_sub, 10).await?), expected);
    // Group A's two members share: each message once within the group, load-balanced.
    let to_a1 = recv_n(&mut a1_sub, 5).await?;
    let to_a2 = recv_n(&mut a2_sub, 5).await?;
    for sub in [&mut a1_sub, &mut a2_sub, &mut b_sub, &mut t_sub] {
        assert_nothing_arrives(sub).await?;
    }
    let mut group_a = bodies(&to_a1);
    group_a.extend(bodies(&to_a2));
    group_a.sort_by_key(|body| body["order".len()..].parse::<u32>().unwrap_or(u32::MAX));
    assert_eq!(group_a, expected);
    // Each member sees its share in send order.
    for share in [bodies(&to_a1), bodies(&to_a2)] {
        let mut sorted = share.clone();
        sorted.sort_by_key(|body| body["order".len()..].parse::<u32>().unwrap_or(u32::MAX));
        assert_eq!(share, sorted);
    }
    // As in ActiveMQ (setOriginalDestination), the copy in a consumer queue names the queue
    // as its destination and the virtual topic as its original destination.
    assert_eq!(to_a1[0].destination(), Some("/queue/Consumer.A.VirtualTopic.Orders"));
    assert_eq!(to_a1[0].header("original-destination"), Some(ORDERS));
    for message in &to_a1 {
        a1.ack(message).await?;
    }
    for message in &to_a2 {
        a2.ack(message).await?;
    }
    assert_eq!(stored_count(&broker, "Consumer.A.VirtualTopic.Orders")?, 0);
    assert_eq!(stored_count(&broker, "Consumer.B.VirtualTopic.Orders")?, 10);
    broker.shutdown().await;
    Ok(())
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn a_persistent_message_is_stored_once_for_every_consumer_queue() -> anyhow::Result<()> {
    let store = Arc::new(RecordingStore::new());
    let broker = start_broker_with_store(store.clone(), |_| {}).await?;
    let consumers = connect(&broker).await?;
    // Both consumer queues exist; their consumers leave so the messages wait there.
    consumers.subscribe(GROUP_A, AckMode::Auto, &[]).await?.unsubscribe().await?;
    consumers.subscribe(GROUP_B, AckMode::Auto, &[]).await?.unsubscribe().await?;
    let mut topic_sub = consumers.subscribe(ORDERS, AckMode::Auto, &[]).await?;

    consumers.send_with_receipt(ORDERS, "stored once", &[PERSISTENT]).await?;
    let adds = store.adds();
    ensure!(adds.len() == 1, "expected one AddMessage, got {adds:?}");
    let mut queues = adds[0].queues.clone();
    queues.sort();
    assert_eq!(
        queues,
        [queue_key("Consumer.A.VirtualTopic.Orders"), queue_key("Consumer.B.VirtualTopic.Orders")]
    );
    assert_eq!(adds[0].body, "stored once");
    assert_eq!(adds[0].txn, None);
    assert_eq!(&recv(&mut topic_sub).await?.body()[..], b"stored once");

    // Each consumer queue holds its own reference: consuming from one leaves the other.
    let mut a_sub = consumers.subscribe(GROUP_A, AckMode::ClientIndividual, &[]).await?;
    let from_a = recv(&mut a_sub).await?;
    consumers.ack(&from_a).await?;
    assert_eq!(stored_count(&broker, "Consumer.A.VirtualTopic.Orders")?, 0);
    assert_eq!(stored_count(&broker, "Consumer.B.VirtualTopic.Orders")?, 1);
    let mut b_sub = consumers.subscribe(GROUP_B, AckMode::ClientIndividual, &[]).await?;
    let from_b = recv(&mut b_sub).await?;
    assert_eq!(&from_b.body()[..], b"stored once");
    consumers.ack(&from_b).await?;
    assert_eq!(stored_count(&broker, "Consumer.B.VirtualTopic.Orders")?, 0);
    broker.shutdown().await;
    Ok(())
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn a_consumer_queue_collects_once_it_exists_even_without_consumers() -> anyhow::Result<()> {
    let broker = start_broker(|_| {}).await?;
    let producer = connect(&broker).await?;
    // No consumer queue yet: the message reaches nobody (the topic has no subscribers).
    send_persistent(&producer, ORDERS, "early", 1).await?;
    let consumer = connect(&broker).await?;
    let sub = consumer.subscribe(GROUP_A, AckMode::ClientIndividual, &[]).await?;
    // The queue now exists; it keeps what is published while its consumers are away.
    sub.unsubscribe().await?;
    send_persistent(&producer, ORDERS, "queued", 2).await?;
    assert_eq!(stored_count(&broker, "Consumer.A.VirtualTopic.Orders")?, 2);

    let mut sub = consumer.subscribe(GROUP_A, AckMode::ClientIndividual, &[]).await?;
    assert_eq!(bodies(&recv_n(&mut sub, 2).await?), ["queued0", "queued1"]);
    assert_nothing_arrives(&mut sub).await?;
    broker.shutdown().await;
    Ok(())
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn topics_outside_the_virtual_pattern_do_not_feed_consumer_queues() -> anyhow::Result<()> {
    let broker = start_broker(|_| {}).await?;
    let consumer = connect(&broker).await?;
    let mut plain = consumer.subscribe("/queue/Consumer.A.Orders", AckMode::Auto, &[]).await?;
    let mut other_prefix =
        consumer.subscribe("/queue/Reader.A.VirtualTopic.Orders", AckMode::Auto, &[]).await?;
    let mut too_deep =
        consumer.subscribe("/queue/Consumer.A.B.VirtualTopic.Orders", AckMode::Auto, &[]).await?;
    let mut group = consumer.subscribe(GROUP_A, AckMode::Auto, &[]).await?;
    consumer.send_with_receipt("/topic/Orders", "not virtual", &[]).await?;
    consumer.send_with_receipt(ORDERS, "virtual", &[]).await?;
    assert_eq!(&recv(&mut group).await?.body()[..], b"virtual");
    for sub in [&mut plain, &mut other_prefix, &mut too_deep, &mut group] {
        assert_nothing_arrives(sub).await?;
    }
    broker.shutdown().await;
    Ok(())
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn a_configured_virtual_topic_feeds_its_consumer_queues() -> anyhow::Result<()> {
    let broker = start_broker(my_topic_config).await?;
    let (b, c, t) = (connect(&broker).await?, connect(&broker).await?, connect(&broker).await?);
    let mut b_sub = b
        .subscribe("/queue/VirtualQueueConsumer.B.MyTopic", AckMode::ClientIndividual, &[])
        .await?;
    let mut c_sub = c
        .subscribe("/queue/VirtualQueueConsumer.C.MyTopic", AckMode::ClientIndividual, &[])
        .await?;
    let mut t_sub = t.subscribe("/topic/MyTopic", AckMode::Auto, &[]).await?;
    let producer = connect(&broker).await?;
    producer.send_with_receipt("/topic/MyTopic", "p", &[PERSISTENT]).await?;
    producer.send_with_receipt("/topic/MyTopic", "n", &[]).await?;

    for sub in [&mut b_sub, &mut c_sub, &mut t_sub] {
        assert_eq!(bodies(&recv_n(sub, 2).await?), ["p", "n"], "subscription {}", sub.id());
        assert_nothing_arrives(sub).await?;
    }
    assert_eq!(stored_count(&broker, "VirtualQueueConsumer.B.MyTopic")?, 1);
    assert_eq!(stored_count(&broker, "VirtualQueueConsumer.C.MyTopic")?, 1);
    // `MyTopic` is the whole name: a topic below it is not virtual.
    producer.send_with_receipt("/topic/MyTopic.Sub", "below", &[]).await?;
    assert_nothing_arrives(&mut b_sub).await?;
    broker.shutdown().await;
    Ok(())
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn with_a_configured_rule_the_default_virtual_topics_are_plain_topics() -> anyhow::Result<()>
{
    let broker = start_broker(my_topic_config).await?;
    let consumer = connect(&broker).await?;
    let mut group = consumer.subscribe(GROUP_A, AckMode::Auto, &[]).await?;
    let mut topic_sub = consumer.subscribe(ORDERS, AckMode::Auto, &[]).await?;
    consumer.send_with_receipt(ORDERS, "plain topic", &[PERSISTENT]).await?;
    assert_eq!(&recv(&mut topic_sub).await?.body()[..], b"plain topic");
    assert_nothing_arrives(&mut group).await?;
    let stats =
        broker.queue_stats("Consumer.A.VirtualTopic.Orders").await.context("queue exists")?;
    assert_eq!((stats.ready, stats.in_flight, stats.acked), (0, 0, 0));
    broker.shutdown().await;
    Ok(())
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn a_wildcard_consumer_on_the_virtual_topic_sees_each_message_once() -> anyhow::Result<()> {
    let broker = start_broker(|_| {}).await?;
    let consumer = connect(&broker).await?;
    let mut a_sub = consumer.subscribe(GROUP_A, AckMode::Auto, &[]).await?;
    let mut wildcard = consumer.subscribe("/topic/VirtualTopic.>", AckMode::Auto, &[]).await?;
    consumer.send_with_receipt(ORDERS, "orders", &[]).await?;
    consumer.send_with_receipt("/topic/VirtualTopic.Invoices", "invoices", &[]).await?;
    assert_eq!(bodies(&recv_n(&mut wildcard, 2).await?), ["orders", "invoices"]);
    assert_eq!(bodies(&recv_n(&mut a_sub, 1).await?), ["orders"]);
    assert_nothing_arrives(&mut wildcard).await?;
    assert_nothing_arrives(&mut a_sub).await?;
    broker.shutdown().await;
    Ok(())
}

/// Virtual topics are reachable from MQTT: a QoS 1 publish to `VirtualTopic/Orders` (the
/// topic `VirtualTopic.Orders` in ActiveMQ's mapping) reaches every consumer group's queue,
/// persistent, as a JMS or STOMP publish does.
#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn mqtt_publishes_to_a_virtual_topic_reach_every_consumer_group() -> anyhow::Result<()> {
    let broker = start_broker(|config| {
        config.transport.connectors = vec![
            "stomp://127.0.0.1:0".parse().expect("a valid connector URI"),
            "mqtt://127.0.0.1:0".parse().expect("a valid connector URI"),
        ];
    })
    .await?;
    let (a, b) = (connect(&broker).await?, connect(&broker).await?);
    let mut group_a = a.subscribe(GROUP_A, AckMode::Auto, &[]).await?;
    let mut group_b = b.subscribe(GROUP_B, AckMode::Auto, &[]).await?;
    let mqtt = broker.mqtt_addr().context("no MQTT connector")?;
    let device = client::mqtt::MqttClient::connect(
        &mqtt.ip().to_string(),
        mqtt.port(),
        client::mqtt::MqttOptions::default(),
    )
    .await?;
    let sent = numbered("mqtt-order-", 3);
    for body in &sent {
        let confirmation = device
            .publish("VirtualTopic/Orders", body.clone(), client::mqtt::QoS::AtLeastOnce, false)
            .await?;
        confirmation.wait().await?;
    }
    for group in [&mut group_a, &mut group_b] {
        let received = recv_n(group, sent.len()).await?;
        ensure!(bodies(&received) == sent, "{:?}", bodies(&received));
        ensure!(
            received.iter().all(|message| message.header("persistent") == Some("true")),
            "QoS 1 publishes must arrive persistent"
        );
    }
    device.disconnect().await?;
    broker.shutdown().await;
    Ok(())
}
