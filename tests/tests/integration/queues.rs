//! Queue semantics over STOMP: dispatch among consumers, prefetch, the ack modes, redelivery,
//! priority, and what the store holds.

use std::sync::Arc;

use anyhow::{ensure, Context as _};
use client::AckMode;
use store::MemoryStore;
use tests::{
    assert_nothing_arrives, bodies, connect, recv, recv_n, send_persistent, start_broker,
    start_broker_with_store, stored_count, RawConnection, ARRIVES, PERSISTENT,
};

const PREFETCH_1: (&str, &str) = ("activemq.prefetchSize", "1");

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn messages_are_dispatched_round_robin_between_two_consumers() -> anyhow::Result<()> {
    let broker = start_broker(|_| {}).await?;
    let (first, second) = (connect(&broker).await?, connect(&broker).await?);
    let mut a = first.subscribe("/queue/rr", AckMode::ClientIndividual, &[]).await?;
    let mut b = second.subscribe("/queue/rr", AckMode::ClientIndividual, &[]).await?;
    let producer = connect(&broker).await?;
    send_persistent(&producer, "/queue/rr", "m", 10).await?;

    let to_a = bodies(&recv_n(&mut a, 5).await?);
    let to_b = bodies(&recv_n(&mut b, 5).await?);
    assert_nothing_arrives(&mut a).await?;
    assert_nothing_arrives(&mut b).await?;
    // Each gets every other message, in order.
    let even: Vec<String> = (0..10).step_by(2).map(|i| format!("m{i}")).collect();
    let odd: Vec<String> = (1..10).step_by(2).map(|i| format!("m{i}")).collect();
    ensure!(
        (to_a == even && to_b == odd) || (to_a == odd && to_b == even),
        "not round-robin: a got {to_a:?}, b got {to_b:?}"
    );
    broker.shutdown().await;
    Ok(())
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn prefetch_limits_unacknowledged_deliveries() -> anyhow::Result<()> {
    let broker = start_broker(|_| {}).await?;
    let client = connect(&broker).await?;
    let mut sub =
        client.subscribe("/queue/prefetch", AckMode::ClientIndividual, &[PREFETCH_1]).await?;
    send_persistent(&client, "/queue/prefetch", "m", 2).await?;

    let first = recv(&mut sub).await?;
    assert_eq!(&first.body()[..], b"m0");
    assert_nothing_arrives(&mut sub).await?;
    let stats = broker.queue_stats("prefetch").await.context("queue exists")?;
    assert_eq!((stats.in_flight, stats.ready, stats.consumers), (1, 1, 1));

    client.ack(&first).await?;
    let second = recv(&mut sub).await?;
    assert_eq!(&second.body()[..], b"m1");
    assert!(!second.redelivered());
    broker.shutdown().await;
    Ok(())
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn client_individual_ack_acknowledges_only_that_message() -> anyhow::Result<()> {
    let broker = start_broker(|_| {}).await?;
    let client = connect(&broker).await?;
    let mut sub = client.subscribe("/queue/individual", AckMode::ClientIndividual, &[]).await?;
    send_persistent(&client, "/queue/individual", "m", 3).await?;
    let received = recv_n(&mut sub, 3).await?;

    client.ack(&received[1]).await?;
    assert_eq!(stored_count(&broker, "individual")?, 2);
    sub.unsubscribe().await?;

    let mut again = client.subscribe("/queue/individual", AckMode::ClientIndividual, &[]).await?;
    let redelivered = recv_n(&mut again, 2).await?;
    assert_eq!(bodies(&redelivered), ["m0", "m2"]);
    assert!(redelivered.iter().all(|m| m.redelivered()), "{redelivered:?}");
    assert_nothing_arrives(&mut again).await?;
    let stats = broker.queue_stats("individual").await.context("queue exists")?;
    assert_eq!(stats.acked, 1);
    broker.shutdown().await;
    Ok(())
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn client_ack_acknowledges_every_earlier_message_too() -> anyhow::Result<()> {
    let broker = start_broker(|_| {}).await?;
    let client = connect(&broker).await?;
    let mut sub = client.subscribe("/queue/cumulative", AckMode::Client, &[]).await?;
    send_persistent(&client, "/queue/cumulative", "m", 3).await?;
    let received = recv_n(&mut sub, 3).await?;

    client.ack(&received[1]).await?;
    assert_eq!(stored_count(&broker, "cumulative")?, 1);
    sub.unsubscribe().await?;

    let mut again = client.subscribe("/queue/cumulative", AckMode::Client, &[]).await?;
    let rest = recv(&mut again).await?;
    assert_eq!(&rest.body()[..], b"m2");
    assert!(rest.redelivered());
    assert_nothing_arrives(&mut again).await?;
    let stats = broker.queue_stats("cumulative").await.context("queue exists")?;
    assert_eq!(stats.acked, 2);
    broker.shutdown().await;
    Ok(())
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn nack_redelivers_the_message_marked_redelivered() -> anyhow::Result<()> {
    let broker = start_broker(|_| {}).await?;
    let client = connect(&broker).await?;
    let mut sub = client.subscribe("/queue/nack", AckMode::ClientIndividual, &[]).await?;
    send_persistent(&client, "/queue/nack", "m", 1).await?;

    let first = recv(&mut sub).await?;
    assert!(!first.redelivered());
    client.nack(&first).await?;
    let again = recv(&mut sub).await?;
    assert_eq!(again.message_id(), first.message_id());
    assert_eq!(again.body(), first.body());
    assert!(again.redelivered(), "{again:?}");
    client.ack(&again).await?;
    assert_eq!(stored_count(&broker, "nack")?, 0);
    broker.shutdown().await;
    Ok(())
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn unacked_messages_return_in_order_when_consumer_unsubscribes() -> anyhow::Result<()> {
    let broker = start_broker(|_| {}).await?;
    let client = connect(&broker).await?;
    let mut sub = client.subscribe("/queue/unsub", AckMode::ClientIndividual, &[]).await?;
    send_persistent(&client, "/queue/unsub", "m", 5).await?;
    let first = recv_n(&mut sub, 5).await?;
    assert!(first.iter().all(|m| !m.redelivered()));
    sub.unsubscribe().await?;

    let mut again = client.subscribe("/queue/unsub", AckMode::ClientIndividual, &[]).await?;
    let returned = recv_n(&mut again, 5).await?;
    assert_eq!(bodies(&returned), ["m0", "m1", "m2", "m3", "m4"]);
    assert!(returned.iter().all(|m| m.redelivered()), "{returned:?}");
    broker.shutdown().await;
    Ok(())
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn unacked_messages_return_in_order_when_connection_drops() -> anyhow::Result<()> {
    let broker = start_broker(|_| {}).await?;
    let producer = connect(&broker).await?;
    send_persistent(&producer, "/queue/drop", "m", 5).await?;

    // A raw consumer that reads all five and then vanishes with a TCP reset.
    let (mut consumer, _) = RawConnection::connect(tests::stomp_addr(&broker)?, &[]).await?;
    consumer
        .write_frame(
            &protocol::stomp::Frame::new(protocol::stomp::Command::Subscribe)
                .header("id", "s")
                .header("destination", "/queue/drop")
                .header("ack", "client-individual"),
        )
        .await?;
    for index in 0..5 {
        let frame = consumer.read_frame().await?;
        assert_eq!(&frame.body[..], format!("m{index}").as_bytes());
    }
    consumer.reset()?;

    let client = connect(&broker).await?;
    let mut again = client.subscribe("/queue/drop", AckMode::ClientIndividual, &[]).await?;
    let returned = recv_n(&mut again, 5).await?;
    assert_eq!(bodies(&returned), ["m0", "m1", "m2", "m3", "m4"]);
    assert!(returned.iter().all(|m| m.redelivered()), "{returned:?}");
    assert_nothing_arrives(&mut again).await?;
    broker.shutdown().await;
    Ok(())
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn auto_acked_messages_are_not_redelivered_after_clean_disconnect() -> anyhow::Result<()> {
    let broker = start_broker(|_| {}).await?;
    let client = connect(&broker).await?;
    let mut sub = client.subscribe("/queue/auto", AckMode::Auto, &[]).await?;
    send_persistent(&client, "/queue/auto", "m", 3).await?;
    let received = recv_n(&mut sub, 3).await?;
    assert_eq!(bodies(&received), ["m0", "m1", "m2"]);
    client.disconnect().await?;

    let client = connect(&broker).await?;
    let mut again = client.subscribe("/queue/auto", AckMode::Auto, &[]).await?;
    assert_nothing_arrives(&mut again).await?;
    let stats = broker.queue_stats("auto").await.context("queue exists")?;
    assert_eq!((stats.acked, stats.ready, stats.in_flight), (3, 0, 0));
    assert_eq!(stored_count(&broker, "auto")?, 0);
    broker.shutdown().await;
    Ok(())
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn higher_priority_messages_are_delivered_first_fifo_within_a_priority() -> anyhow::Result<()>
{
    let broker = start_broker(|_| {}).await?;
    let client = connect(&broker).await?;
    let priorities = [4, 9, 0, 4, 7, 9, 0, 1, 4, 8, 2, 3, 5, 6, 7];
    for (index, priority) in priorities.iter().enumerate() {
        let priority = priority.to_string();
        client
            .send_with_receipt("/queue/prio", format!("{index}"), &[("priority", &priority)])
            .await?;
    }
    let mut sub = client.subscribe("/queue/prio", AckMode::Auto, &[]).await?;
    let received = recv_n(&mut sub, priorities.len()).await?;

    let mut expected: Vec<(u8, usize)> =
        priorities.iter().enumerate().map(|(index, priority)| (*priority, index)).collect();
    // Priority descending, then send order.
    expected.sort_by(|a, b| b.0.cmp(&a.0).then(a.1.cmp(&b.1)));
    let expected: Vec<String> = expected.iter().map(|(_, index)| index.to_string()).collect();
    assert_eq!(bodies(&received), expected);
    for message in &received {
        let index: usize = String::from_utf8_lossy(message.body()).parse()?;
        assert_eq!(message.header("priority"), Some(priorities[index].to_string().as_str()));
    }
    broker.shutdown().await;
    Ok(())
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn persistent_message_survives_broker_restart() -> anyhow::Result<()> {
    let store = Arc::new(MemoryStore::new());
    let broker = start_broker_with_store(store.clone(), |_| {}).await?;
    let client = connect(&broker).await?;
    client
        .send_with_receipt(
            "/queue/durable",
            "kept",
            &[PERSISTENT, ("colour", "blue"), ("priority", "6")],
        )
        .await?;
    client.send_with_receipt("/queue/durable", "lost", &[]).await?;
    drop(client);
    broker.shutdown().await;

    let broker = start_broker_with_store(Arc::new(store.reopen()), |_| {}).await?;
    assert_eq!(stored_count(&broker, "durable")?, 1);
    let client = connect(&broker).await?;
    let mut sub = client.subscribe("/queue/durable", AckMode::ClientIndividual, &[]).await?;
    let message = recv(&mut sub).await?;
    assert_eq!(&message.body()[..], b"kept");
    assert_eq!(message.header("persistent"), Some("true"));
    assert_eq!(message.header("colour"), Some("blue"));
    assert_eq!(message.header("priority"), Some("6"));
    assert_nothing_arrives(&mut sub).await?;
    client.ack(&message).await?;
    assert_eq!(stored_count(&broker, "durable")?, 0);

    // A message sent after the restart gets an id of its own.
    client.send_with_receipt("/queue/durable", "new", &[PERSISTENT]).await?;
    let new = recv(&mut sub).await?;
    assert_ne!(new.message_id(), message.message_id());
    broker.shutdown().await;
    Ok(())
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn non_persistent_messages_are_not_stored() -> anyhow::Result<()> {
    let broker = start_broker(|_| {}).await?;
    let client = connect(&broker).await?;
    client.send_with_receipt("/queue/transient", "default", &[]).await?;
    client.send_with_receipt("/queue/transient", "explicit", &[("persistent", "false")]).await?;
    assert_eq!(stored_count(&broker, "transient")?, 0);
    let stats = broker.queue_stats("transient").await.context("queue exists")?;
    assert_eq!(stats.ready, 2);

    let mut sub = client.subscribe("/queue/transient", AckMode::Auto, &[]).await?;
    let received = recv_n(&mut sub, 2).await?;
    assert_eq!(bodies(&received), ["default", "explicit"]);
    // ActiveMQ sends the header only for persistent messages.
    assert!(received.iter().all(|m| m.header("persistent").is_none()));
    broker.shutdown().await;
    Ok(())
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn acked_persistent_message_is_removed_from_the_store() -> anyhow::Result<()> {
    let broker = start_broker(|_| {}).await?;
    let client = connect(&broker).await?;
    send_persistent(&client, "/queue/removed", "m", 2).await?;
    assert_eq!(stored_count(&broker, "removed")?, 2);

    let mut sub = client.subscribe("/queue/removed", AckMode::ClientIndividual, &[]).await?;
    let received = recv_n(&mut sub, 2).await?;
    // Delivered but unacknowledged messages stay stored.
    assert_eq!(stored_count(&broker, "removed")?, 2);
    client.ack(&received[0]).await?;
    assert_eq!(stored_count(&broker, "removed")?, 1);
    client.ack(&received[1]).await?;
    assert_eq!(stored_count(&broker, "removed")?, 0);
    let stats = tokio::time::timeout(ARRIVES, broker.queue_stats("removed"))
        .await?
        .context("queue exists")?;
    assert_eq!((stats.ready, stats.in_flight, stats.acked), (0, 0, 2));
    broker.shutdown().await;
    Ok(())
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn expired_messages_are_dropped_instead_of_delivered() -> anyhow::Result<()> {
    let broker = start_broker(|_| {}).await?;
    let client = connect(&broker).await?;
    let now = std::time::SystemTime::now().duration_since(std::time::UNIX_EPOCH)?.as_millis();
    let past = (now - 60_000).to_string();
    let future = (now + 3_600_000).to_string();
    client.send_with_receipt("/queue/expiry", "expired", &[PERSISTENT, ("expires", &past)]).await?;
    client.send_with_receipt("/queue/expiry", "never", &[PERSISTENT, ("expires", "0")]).await?;
    client.send_with_receipt("/queue/expiry", "later", &[PERSISTENT, ("expires", &future)]).await?;

    let mut sub = client.subscribe("/queue/expiry", AckMode::ClientIndividual, &[]).await?;
    let received = recv_n(&mut sub, 2).await?;
    assert_eq!(bodies(&received), ["never", "later"]);
    assert_nothing_arrives(&mut sub).await?;
    // The expired message's stored copy is gone too.
    assert_eq!(stored_count(&broker, "expiry")?, 2);
    broker.shutdown().await;
    Ok(())
}
