//! Destination wildcards as ActiveMQ defines them: `.` separates levels, `*` matches exactly
//! one level, `>` one or more remaining levels. Topic subscriptions and queue consumers may use
//! them; a SEND may not.

use anyhow::{ensure, Context as _};
use client::AckMode;
use tests::{
    assert_nothing_arrives, bodies, connect, connect_as, recv, recv_n, send_persistent,
    server_error, start_broker, stored_count, wait_durable_inactive, PERSISTENT, SUBSCRIPTION_NAME,
};

/// Sends one message to each topic in `topics`, its body the topic name.
async fn publish_to_each(client: &client::StompClient, topics: &[&str]) -> anyhow::Result<()> {
    for topic in topics {
        client.send_with_receipt(&format!("/topic/{topic}"), topic.to_string(), &[]).await?;
    }
    Ok(())
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn star_matches_exactly_one_level() -> anyhow::Result<()> {
    let broker = start_broker(|_| {}).await?;
    let client = connect(&broker).await?;
    let mut sub = client.subscribe("/topic/PRICE.*.IBM", AckMode::Auto, &[]).await?;
    publish_to_each(
        &client,
        &[
            "PRICE.STOCK.IBM",
            "PRICE.IBM",
            "PRICE.STOCK.NYSE.IBM",
            "PRICE.STOCK.MSFT",
            "PRICE.STOCK.IBM.X",
            "PRICES.STOCK.IBM",
            "PRICE.BOND.IBM",
        ],
    )
    .await?;
    let received = recv_n(&mut sub, 2).await?;
    assert_eq!(bodies(&received), ["PRICE.STOCK.IBM", "PRICE.BOND.IBM"]);
    // Each MESSAGE names the topic it was sent to, not the pattern.
    assert_eq!(received[0].destination(), Some("/topic/PRICE.STOCK.IBM"));
    assert_nothing_arrives(&mut sub).await?;
    broker.shutdown().await;
    Ok(())
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn greater_than_matches_every_remaining_level_and_the_prefix_itself() -> anyhow::Result<()> {
    let broker = start_broker(|_| {}).await?;
    let client = connect(&broker).await?;
    let mut sub = client.subscribe("/topic/PRICE.>", AckMode::Auto, &[]).await?;
    publish_to_each(
        &client,
        &["PRICE", "PRICE.IBM", "PRICES.IBM", "PRICE.STOCK.NYSE.IBM", "OTHER.PRICE.IBM"],
    )
    .await?;
    // As ActiveMQ 5.17 does: `PRICE.>` covers `PRICE` too.
    assert_eq!(bodies(&recv_n(&mut sub, 3).await?), ["PRICE", "PRICE.IBM", "PRICE.STOCK.NYSE.IBM"]);
    assert_nothing_arrives(&mut sub).await?;
    broker.shutdown().await;
    Ok(())
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn wildcard_and_exact_subscribers_each_get_their_copy() -> anyhow::Result<()> {
    let broker = start_broker(|_| {}).await?;
    let client = connect(&broker).await?;
    let mut exact = client.subscribe("/topic/PRICE.STOCK.IBM", AckMode::Auto, &[]).await?;
    let mut star = client.subscribe("/topic/PRICE.*.IBM", AckMode::Auto, &[]).await?;
    let mut rest = client.subscribe("/topic/PRICE.>", AckMode::Auto, &[]).await?;
    let mut everything = client.subscribe("/topic/>", AckMode::Auto, &[]).await?;
    publish_to_each(&client, &["PRICE.STOCK.IBM", "PRICE.STOCK.MSFT", "NEWS"]).await?;

    assert_eq!(bodies(&recv_n(&mut exact, 1).await?), ["PRICE.STOCK.IBM"]);
    assert_eq!(bodies(&recv_n(&mut star, 1).await?), ["PRICE.STOCK.IBM"]);
    assert_eq!(bodies(&recv_n(&mut rest, 2).await?), ["PRICE.STOCK.IBM", "PRICE.STOCK.MSFT"]);
    assert_eq!(
        bodies(&recv_n(&mut everything, 3).await?),
        ["PRICE.STOCK.IBM", "PRICE.STOCK.MSFT", "NEWS"]
    );
    for sub in [&mut exact, &mut star, &mut rest, &mut everything] {
        assert_nothing_arrives(sub).await?;
    }
    broker.shutdown().await;
    Ok(())
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn a_wildcard_durable_subscription_collects_from_every_matching_topic() -> anyhow::Result<()>
{
    let broker = start_broker(|_| {}).await?;
    let subscriber = connect_as(&broker, "watcher").await?;
    subscriber
        .subscribe("/topic/PRICE.>", AckMode::ClientIndividual, &[(SUBSCRIPTION_NAME, "prices")])
        .await?;
    drop(subscriber);
    wait_durable_inactive(&broker, "watcher", "prices").await?;
    let producer = connect(&broker).await?;
    for topic in ["PRICE.IBM", "PRICE", "PRICE.STOCK.MSFT", "NEWS.IBM"] {
        producer.send_with_receipt(&format!("/topic/{topic}"), topic, &[PERSISTENT]).await?;
    }

    let subscriber = connect_as(&broker, "watcher").await?;
    let mut sub = subscriber
        .subscribe("/topic/PRICE.>", AckMode::ClientIndividual, &[(SUBSCRIPTION_NAME, "prices")])
        .await?;
    let received = recv_n(&mut sub, 3).await?;
    assert_eq!(bodies(&received), ["PRICE.IBM", "PRICE", "PRICE.STOCK.MSFT"]);
    assert_nothing_arrives(&mut sub).await?;
    broker.shutdown().await;
    Ok(())
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn a_wildcard_queue_consumer_receives_from_every_matching_queue() -> anyhow::Result<()> {
    let broker = start_broker(|_| {}).await?;
    let producer = connect(&broker).await?;
    // A queue that exists (with a message waiting) before the consumer subscribes.
    send_persistent(&producer, "/queue/ORDERS.EU", "eu", 1).await?;

    let consumer = connect(&broker).await?;
    let mut sub = consumer.subscribe("/queue/ORDERS.>", AckMode::ClientIndividual, &[]).await?;
    let first = recv(&mut sub).await?;
    assert_eq!(&first.body()[..], b"eu0");
    assert_eq!(first.destination(), Some("/queue/ORDERS.EU"));

    // A queue created after the subscription is picked up too; non-matching ones are not.
    send_persistent(&producer, "/queue/ORDERS.US", "us", 1).await?;
    send_persistent(&producer, "/queue/ORDERS", "plain", 1).await?;
    send_persistent(&producer, "/queue/ORDERSX.EU", "other", 1).await?;
    send_persistent(&producer, "/queue/ORDERS.EU.DE", "deep", 1).await?;
    // `ORDERS.>` covers `ORDERS` itself too, as in ActiveMQ.
    let more = recv_n(&mut sub, 3).await?;
    let mut more_bodies = bodies(&more);
    more_bodies.sort();
    assert_eq!(more_bodies, ["deep0", "plain0", "us0"]);
    assert_nothing_arrives(&mut sub).await?;

    // Acks reach the queue each message came from.
    for message in std::iter::once(&first).chain(&more) {
        consumer.ack(message).await?;
    }
    for queue in ["ORDERS.EU", "ORDERS.US", "ORDERS", "ORDERS.EU.DE"] {
        assert_eq!(stored_count(&broker, queue)?, 0, "queue {queue}");
        let stats = broker.queue_stats(queue).await.context("queue exists")?;
        assert_eq!((stats.ready, stats.in_flight, stats.acked), (0, 0, 1), "queue {queue}");
    }
    assert_eq!(stored_count(&broker, "ORDERSX.EU")?, 1);
    broker.shutdown().await;
    Ok(())
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn a_star_queue_consumer_skips_deeper_and_shallower_queues() -> anyhow::Result<()> {
    let broker = start_broker(|_| {}).await?;
    let consumer = connect(&broker).await?;
    let mut sub = consumer.subscribe("/queue/ORDERS.*", AckMode::Auto, &[]).await?;
    for queue in ["ORDERS", "ORDERS.EU", "ORDERS.EU.DE", "ORDERS.US"] {
        consumer.send_with_receipt(&format!("/queue/{queue}"), queue, &[]).await?;
    }
    let mut received = bodies(&recv_n(&mut sub, 2).await?);
    received.sort();
    assert_eq!(received, ["ORDERS.EU", "ORDERS.US"]);
    assert_nothing_arrives(&mut sub).await?;
    broker.shutdown().await;
    Ok(())
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn an_auto_ack_wildcard_consumer_drains_several_queues() -> anyhow::Result<()> {
    // With a small prefetch, every queue needs its own acks back to keep delivering.
    let broker = start_broker(|_| {}).await?;
    let producer = connect(&broker).await?;
    let consumer = connect(&broker).await?;
    let mut sub = consumer
        .subscribe("/queue/AUTO.>", AckMode::Auto, &[("activemq.prefetchSize", "2")])
        .await?;
    for index in 0..20 {
        for queue in ["AUTO.A", "AUTO.B", "AUTO.C"] {
            producer.send(&format!("/queue/{queue}"), format!("{queue}:{index}"), &[]).await?;
        }
    }
    producer.send_with_receipt("/queue/AUTO.A", "AUTO.A:last", &[]).await?;
    let received = bodies(&recv_n(&mut sub, 61).await.context("every message of every queue")?);
    for queue in ["AUTO.A", "AUTO.B", "AUTO.C"] {
        let own: Vec<&String> = received.iter().filter(|b| b.starts_with(queue)).collect();
        let expected: Vec<String> = (0..20).map(|i| format!("{queue}:{i}")).collect();
        assert_eq!(own[..20].iter().map(|s| s.as_str()).collect::<Vec<_>>(), expected);
    }
    assert_nothing_arrives(&mut sub).await?;
    for queue in ["AUTO.A", "AUTO.B", "AUTO.C"] {
        let stats = broker.queue_stats(queue).await.context("queue exists")?;
        assert_eq!((stats.ready, stats.in_flight), (0, 0), "queue {queue}: {stats:?}");
    }
    broker.shutdown().await;
    Ok(())
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn a_cumulative_ack_covers_messages_from_several_queues() -> anyhow::Result<()> {
    let broker = start_broker(|_| {}).await?;
    let producer = connect(&broker).await?;
    let consumer = connect(&broker).await?;
    let mut sub = consumer.subscribe("/queue/CUM.>", AckMode::Client, &[]).await?;
    send_persistent(&producer, "/queue/CUM.A", "a", 2).await?;
    send_persistent(&producer, "/queue/CUM.B", "b", 2).await?;
    let received = recv_n(&mut sub, 4).await?;
    consumer.ack(&received[3]).await?;
    assert_eq!(stored_count(&broker, "CUM.A")?, 0);
    assert_eq!(stored_count(&broker, "CUM.B")?, 0);
    broker.shutdown().await;
    Ok(())
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn unacked_messages_of_a_wildcard_consumer_return_to_their_own_queues() -> anyhow::Result<()>
{
    let broker = start_broker(|_| {}).await?;
    let producer = connect(&broker).await?;
    send_persistent(&producer, "/queue/RET.A", "a", 2).await?;
    send_persistent(&producer, "/queue/RET.B", "b", 1).await?;
    let consumer = connect(&broker).await?;
    let mut sub = consumer.subscribe("/queue/RET.*", AckMode::ClientIndividual, &[]).await?;
    recv_n(&mut sub, 3).await?;
    sub.unsubscribe().await?;

    let mut only_a = consumer.subscribe("/queue/RET.A", AckMode::ClientIndividual, &[]).await?;
    let returned = recv_n(&mut only_a, 2).await?;
    assert_eq!(bodies(&returned), ["a0", "a1"]);
    assert!(returned.iter().all(|m| m.redelivered()));
    assert_nothing_arrives(&mut only_a).await?;
    let stats = broker.queue_stats("RET.B").await.context("queue exists")?;
    assert_eq!((stats.ready, stats.in_flight, stats.consumers), (1, 0, 0));
    broker.shutdown().await;
    Ok(())
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn sending_to_a_wildcard_name_is_refused() -> anyhow::Result<()> {
    let broker = start_broker(|_| {}).await?;
    for destination in ["/queue/ORDERS.*", "/queue/ORDERS.>", "/topic/PRICE.>", "/topic/*.IBM"] {
        let client = connect(&broker).await?;
        let message = server_error(client.send_with_receipt(destination, "no", &[]).await)?;
        ensure!(
            message.contains("wildcard"),
            "unexpected ERROR message for {destination}: {message}"
        );
    }
    // Nothing reached a queue named like the pattern.
    assert!(broker.queue_stats("ORDERS.*").await.is_none());
    assert!(broker.queue_stats("ORDERS.>").await.is_none());
    broker.shutdown().await;
    Ok(())
}
