//! Topic semantics over STOMP (non-durable subscribers): every subscriber gets every message
//! in order, a subscriber gets only what was published while it was subscribed, and a topic
//! nobody listens to drops what it gets.

use std::sync::Arc;

use anyhow::{ensure, Context as _};
use client::AckMode;
use store::{Destination, QueueKey};
use tests::{
    assert_nothing_arrives, bodies, connect, recv, recv_n, send_persistent, start_broker,
    start_broker_with_store, stored_count_of, RecordingStore, PERSISTENT,
};

fn numbered(prefix: &str, count: usize) -> Vec<String> {
    (0..count).map(|i| format!("{prefix}{i}")).collect()
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn every_subscriber_gets_every_message_in_order() -> anyhow::Result<()> {
    let broker = start_broker(|_| {}).await?;
    let (a, b, c) = (connect(&broker).await?, connect(&broker).await?, connect(&broker).await?);
    let mut auto = a.subscribe("/topic/fanout", AckMode::Auto, &[]).await?;
    let mut individual = b.subscribe("/topic/fanout", AckMode::ClientIndividual, &[]).await?;
    let mut cumulative = c.subscribe("/topic/fanout", AckMode::Client, &[]).await?;
    // A second subscription on a connection that already has one gets its own copy.
    let mut second_on_a = a.subscribe("/topic/fanout", AckMode::Auto, &[]).await?;

    let producer = connect(&broker).await?;
    let mut expected = Vec::new();
    for index in 0..20 {
        let body = format!("m{index}");
        // Persistent and non-persistent messages alike.
        let headers: &[(&str, &str)] = if index % 2 == 0 { &[PERSISTENT] } else { &[] };
        producer.send_with_receipt("/topic/fanout", body.clone(), headers).await?;
        expected.push(body);
    }
    for subscription in [&mut auto, &mut individual, &mut cumulative, &mut second_on_a] {
        let received = recv_n(subscription, expected.len()).await?;
        assert_eq!(bodies(&received), expected, "subscription {}", subscription.id());
        assert!(received.iter().all(|m| !m.redelivered()));
        assert!(received.iter().all(|m| m.destination() == Some("/topic/fanout")));
        assert_nothing_arrives(subscription).await?;
    }
    broker.shutdown().await;
    Ok(())
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn a_subscriber_gets_nothing_published_before_it_subscribed() -> anyhow::Result<()> {
    let broker = start_broker(|_| {}).await?;
    let producer = connect(&broker).await?;
    let early = connect(&broker).await?;
    let mut early_sub = early.subscribe("/topic/late", AckMode::Auto, &[]).await?;
    send_persistent(&producer, "/topic/late", "before", 3).await?;

    let late = connect(&broker).await?;
    let mut late_sub = late.subscribe("/topic/late", AckMode::Auto, &[]).await?;
    send_persistent(&producer, "/topic/late", "after", 2).await?;

    assert_eq!(bodies(&recv_n(&mut late_sub, 2).await?), numbered("after", 2));
    assert_nothing_arrives(&mut late_sub).await?;
    let mut everything = numbered("before", 3);
    everything.extend(numbered("after", 2));
    assert_eq!(bodies(&recv_n(&mut early_sub, 5).await?), everything);
    broker.shutdown().await;
    Ok(())
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn a_topic_without_subscribers_drops_messages() -> anyhow::Result<()> {
    let store = Arc::new(RecordingStore::new());
    let broker = start_broker_with_store(store.clone(), |_| {}).await?;
    let producer = connect(&broker).await?;
    send_persistent(&producer, "/topic/nobody", "dropped", 3).await?;
    producer.send_with_receipt("/topic/nobody", "dropped too", &[]).await?;
    // Nothing was stored anywhere, and no queue appeared for the topic.
    ensure!(store.adds().is_empty(), "a topic without subscribers stored {:?}", store.adds());
    assert!(broker.queue_stats("nobody").await.is_none());

    let consumer = connect(&broker).await?;
    let mut sub = consumer.subscribe("/topic/nobody", AckMode::Auto, &[]).await?;
    assert_nothing_arrives(&mut sub).await?;
    producer.send_with_receipt("/topic/nobody", "heard", &[]).await?;
    assert_eq!(&recv(&mut sub).await?.body()[..], b"heard");
    broker.shutdown().await;
    Ok(())
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn non_durable_subscribers_never_store_persistent_messages() -> anyhow::Result<()> {
    let store = Arc::new(RecordingStore::new());
    let broker = start_broker_with_store(store.clone(), |_| {}).await?;
    let consumer = connect(&broker).await?;
    let mut sub = consumer.subscribe("/topic/unstored", AckMode::ClientIndividual, &[]).await?;
    send_persistent(&consumer, "/topic/unstored", "m", 3).await?;
    let received = recv_n(&mut sub, 3).await?;
    assert!(received.iter().all(|m| m.header("persistent") == Some("true")), "{received:?}");
    ensure!(store.adds().is_empty(), "stored for a non-durable subscriber: {:?}", store.adds());
    assert_eq!(
        stored_count_of(&broker, &QueueKey::destination(Destination::topic("unstored")))?,
        0
    );
    for message in &received {
        consumer.ack(message).await?;
    }
    broker.shutdown().await;
    Ok(())
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn an_unsubscribed_subscriber_stops_receiving_and_others_carry_on() -> anyhow::Result<()> {
    let broker = start_broker(|_| {}).await?;
    let producer = connect(&broker).await?;
    let (a, b) = (connect(&broker).await?, connect(&broker).await?);
    let leaving = a.subscribe("/topic/leave", AckMode::ClientIndividual, &[]).await?;
    let mut staying = b.subscribe("/topic/leave", AckMode::Auto, &[]).await?;
    send_persistent(&producer, "/topic/leave", "first", 2).await?;
    // The leaving subscriber never acknowledges; its messages end with its subscription.
    leaving.unsubscribe().await?;
    send_persistent(&producer, "/topic/leave", "second", 2).await?;

    let mut everything = numbered("first", 2);
    everything.extend(numbered("second", 2));
    assert_eq!(bodies(&recv_n(&mut staying, 4).await?), everything);

    // Subscribing again starts afresh: no redelivery of what the old subscription held.
    let mut again = a.subscribe("/topic/leave", AckMode::ClientIndividual, &[]).await?;
    assert_nothing_arrives(&mut again).await?;
    producer.send_with_receipt("/topic/leave", "third", &[]).await?;
    let third = recv(&mut again).await?;
    assert_eq!(&third.body()[..], b"third");
    assert!(!third.redelivered());
    broker.shutdown().await;
    Ok(())
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn a_slow_subscriber_does_not_hold_back_the_others() -> anyhow::Result<()> {
    let broker = start_broker(|_| {}).await?;
    let (slow, fast) = (connect(&broker).await?, connect(&broker).await?);
    let mut slow_sub = slow
        .subscribe("/topic/speed", AckMode::ClientIndividual, &[("activemq.prefetchSize", "1")])
        .await?;
    let mut fast_sub = fast.subscribe("/topic/speed", AckMode::Auto, &[]).await?;
    let producer = connect(&broker).await?;
    send_persistent(&producer, "/topic/speed", "m", 10).await?;

    assert_eq!(bodies(&recv_n(&mut fast_sub, 10).await?), numbered("m", 10));
    // The slow one holds one unacknowledged message at a time, and still gets all ten.
    for index in 0..10 {
        let message = recv(&mut slow_sub).await?;
        assert_eq!(message.body(), format!("m{index}").as_bytes());
        assert_nothing_arrives(&mut slow_sub)
            .await
            .with_context(|| format!("prefetch 1, m{index}"))?;
        slow.ack(&message).await?;
    }
    broker.shutdown().await;
    Ok(())
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn a_nacked_topic_message_is_redelivered_to_the_same_subscriber() -> anyhow::Result<()> {
    let broker = start_broker(|_| {}).await?;
    let (a, b) = (connect(&broker).await?, connect(&broker).await?);
    let mut nacking = a.subscribe("/topic/nack", AckMode::ClientIndividual, &[]).await?;
    let mut other = b.subscribe("/topic/nack", AckMode::Auto, &[]).await?;
    a.send_with_receipt("/topic/nack", "once", &[]).await?;

    let first = recv(&mut nacking).await?;
    a.nack(&first).await?;
    let again = recv(&mut nacking).await?;
    assert_eq!(again.body(), first.body());
    assert!(again.redelivered());
    a.ack(&again).await?;
    assert_nothing_arrives(&mut nacking).await?;
    // The other subscriber got its own copy once.
    assert_eq!(&recv(&mut other).await?.body()[..], b"once");
    assert_nothing_arrives(&mut other).await?;
    broker.shutdown().await;
    Ok(())
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn a_topic_and_a_queue_of_the_same_name_are_separate() -> anyhow::Result<()> {
    let broker = start_broker(|_| {}).await?;
    let client = connect(&broker).await?;
    let mut topic = client.subscribe("/topic/same", AckMode::Auto, &[]).await?;
    let mut queue = client.subscribe("/queue/same", AckMode::Auto, &[]).await?;
    client.send_with_receipt("/topic/same", "to the topic", &[]).await?;
    client.send_with_receipt("/queue/same", "to the queue", &[]).await?;
    let from_topic = recv(&mut topic).await?;
    assert_eq!(&from_topic.body()[..], b"to the topic");
    assert_eq!(from_topic.destination(), Some("/topic/same"));
    let from_queue = recv(&mut queue).await?;
    assert_eq!(&from_queue.body()[..], b"to the queue");
    assert_eq!(from_queue.destination(), Some("/queue/same"));
    assert_nothing_arrives(&mut topic).await?;
    assert_nothing_arrives(&mut queue).await?;
    broker.shutdown().await;
    Ok(())
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn messages_of_concurrent_producers_keep_each_producers_order() -> anyhow::Result<()> {
    let broker = start_broker(|_| {}).await?;
    let consumer = connect(&broker).await?;
    let mut sub = consumer.subscribe("/topic/producers", AckMode::Auto, &[]).await?;
    let mut tasks = Vec::new();
    for producer in 0..3 {
        let client = connect(&broker).await?;
        tasks.push(tokio::spawn(async move {
            for index in 0..30 {
                client
                    .send("/topic/producers", format!("{producer}:{index}"), &[])
                    .await
                    .context("sending")?;
            }
            client.disconnect().await.context("disconnecting")
        }));
    }
    for task in tasks {
        task.await??;
    }
    let received = bodies(&recv_n(&mut sub, 90).await?);
    for producer in 0..3 {
        let own: Vec<String> =
            received.iter().filter(|b| b.starts_with(&format!("{producer}:"))).cloned().collect();
        let expected: Vec<String> = (0..30).map(|i| format!("{producer}:{i}")).collect();
        assert_eq!(own, expected, "producer {producer}'s messages");
    }
    assert_nothing_arrives(&mut sub).await?;
    broker.shutdown().await;
    Ok(())
}
