//! Durable topic subscriptions as ActiveMQ's STOMP defines them: CONNECT with `client-id`,
//! SUBSCRIBE to a topic with `activemq.subscriptionName`; while the subscriber is away the
//! broker keeps what is published (persistent messages across restarts); UNSUBSCRIBE with
//! `activemq.subscriptionName` ends the subscription for good.

use std::sync::Arc;

use anyhow::{ensure, Context as _};
use client::AckMode;
use protocol::stomp::{Command, Frame};
use store::{MemoryStore, Operation};
use tests::{
    assert_nothing_arrives, bodies, connect, connect_as, durable_key, recv, recv_n,
    send_persistent, server_error, start_broker, start_broker_with_store, stored_count_of,
    wait_durable_inactive, RecordingStore, PERSISTENT, SUBSCRIPTION_NAME,
};

const NEWS: &str = "/topic/news";

fn durable(name: &str) -> [(&str, &str); 1] {
    [(SUBSCRIPTION_NAME, name)]
}

/// UNSUBSCRIBE that removes durable subscription `name` (ActiveMQ's way), with a receipt.
fn remove_durable(name: &str, id: Option<&str>) -> Frame {
    let mut frame = Frame::new(Command::Unsubscribe);
    if let Some(id) = id {
        frame.push_header("id", id);
    }
    frame.push_header(SUBSCRIPTION_NAME, name);
    frame
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn a_durable_subscription_needs_a_client_id() -> anyhow::Result<()> {
    let broker = start_broker(|_| {}).await?;
    let anonymous = connect(&broker).await?;
    let message = server_error(anonymous.subscribe(NEWS, AckMode::Auto, &durable("no-id")).await)?;
    ensure!(message.contains("client id"), "unexpected ERROR message: {message}");
    assert!(broker.durable_subscription_stats("", "no-id").await.is_none());

    // On a queue the header makes no sense either.
    let named = connect_as(&broker, "c1").await?;
    let message = server_error(named.subscribe("/queue/q", AckMode::Auto, &durable("s")).await)?;
    ensure!(message.contains("topic"), "unexpected ERROR message: {message}");
    broker.shutdown().await;
    Ok(())
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn an_offline_durable_subscriber_gets_what_was_published_meanwhile() -> anyhow::Result<()> {
    let broker = start_broker(|_| {}).await?;
    let subscriber = connect_as(&broker, "reader").await?;
    let mut sub = subscriber.subscribe(NEWS, AckMode::ClientIndividual, &durable("daily")).await?;
    let producer = connect(&broker).await?;
    producer.send_with_receipt(NEWS, "online", &[PERSISTENT]).await?;
    let online = recv(&mut sub).await?;
    subscriber.ack(&online).await?;
    subscriber.disconnect().await?;

    // Persistent and non-persistent messages, interleaved, while nobody is connected.
    let expected = ["p0", "n0", "p1", "n1", "p2"];
    for body in expected {
        let headers: &[(&str, &str)] = if body.starts_with('p') { &[PERSISTENT] } else { &[] };
        producer.send_with_receipt(NEWS, body, headers).await?;
    }
    let stats = broker.durable_subscription_stats("reader", "daily").await.context("exists")?;
    assert_eq!((stats.ready, stats.in_flight, stats.consumers), (5, 0, 0));
    assert_eq!(stored_count_of(&broker, &durable_key("news", "reader", "daily"))?, 3);

    let subscriber = connect_as(&broker, "reader").await?;
    let mut sub = subscriber.subscribe(NEWS, AckMode::ClientIndividual, &durable("daily")).await?;
    let received = recv_n(&mut sub, 5).await?;
    assert_eq!(bodies(&received), expected);
    assert!(received.iter().all(|m| !m.redelivered()), "{received:?}");
    assert_nothing_arrives(&mut sub).await?;
    for message in &received {
        subscriber.ack(message).await?;
    }
    assert_eq!(stored_count_of(&broker, &durable_key("news", "reader", "daily"))?, 0);
    broker.shutdown().await;
    Ok(())
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn reconnecting_right_after_disconnect_finds_the_subscription_free() -> anyhow::Result<()> {
    // The DISCONNECT receipt tells the client that the broker is done with the connection,
    // as in ActiveMQ: once it arrives, the durable subscription is free, and a message
    // published from then on was never delivered to the closed consumer.
    let broker = start_broker(|_| {}).await?;
    let producer = connect(&broker).await?;
    for round in 0..30 {
        let subscriber = connect_as(&broker, "quick").await?;
        let mut sub = subscriber
            .subscribe(NEWS, AckMode::ClientIndividual, &durable("again"))
            .await
            .with_context(|| format!("round {round}: subscribing right after DISCONNECT"))?;
        if round > 0 {
            let offline = recv(&mut sub).await?;
            assert_eq!(offline.body(), format!("offline{}", round - 1).as_bytes());
            ensure!(!offline.redelivered(), "round {round}: published after the DISCONNECT receipt, yet redelivered: {offline:?}");
            subscriber.ack(&offline).await?;
        }
        producer.send_with_receipt(NEWS, format!("online{round}"), &[]).await?;
        let message = recv(&mut sub).await?;
        assert_eq!(message.body(), format!("online{round}").as_bytes());
        subscriber.ack(&message).await?;
        subscriber.disconnect().await?;
        producer.send_with_receipt(NEWS, format!("offline{round}"), &[]).await?;
    }
    broker.shutdown().await;
    Ok(())
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn unacknowledged_durable_messages_come_back_after_reconnecting() -> anyhow::Result<()> {
    let broker = start_broker(|_| {}).await?;
    let subscriber = connect_as(&broker, "c").await?;
    let mut sub = subscriber.subscribe(NEWS, AckMode::ClientIndividual, &durable("s")).await?;
    let producer = connect(&broker).await?;
    send_persistent(&producer, NEWS, "m", 4).await?;
    let received = recv_n(&mut sub, 4).await?;
    subscriber.ack(&received[1]).await?;
    // Gone without DISCONNECT.
    drop(sub);
    drop(subscriber);
    wait_durable_inactive(&broker, "c", "s").await?;
    send_persistent(&producer, NEWS, "later", 1).await?;

    let subscriber = connect_as(&broker, "c").await?;
    let mut sub = subscriber.subscribe(NEWS, AckMode::ClientIndividual, &durable("s")).await?;
    let again = recv_n(&mut sub, 4).await?;
    assert_eq!(bodies(&again), ["m0", "m2", "m3", "later0"]);
    assert!(again[..3].iter().all(|m| m.redelivered()), "{again:?}");
    assert!(!again[3].redelivered());
    assert_nothing_arrives(&mut sub).await?;
    broker.shutdown().await;
    Ok(())
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn persistent_messages_of_an_offline_subscription_survive_a_restart() -> anyhow::Result<()> {
    let store = Arc::new(MemoryStore::new());
    let broker = start_broker_with_store(store.clone(), |_| {}).await?;
    let subscriber = connect_as(&broker, "keeper").await?;
    subscriber.subscribe(NEWS, AckMode::ClientIndividual, &durable("kept")).await?;
    subscriber.disconnect().await?;
    let producer = connect(&broker).await?;
    producer.send_with_receipt(NEWS, "p0", &[PERSISTENT, ("colour", "red")]).await?;
    producer.send_with_receipt(NEWS, "n0", &[]).await?;
    producer.send_with_receipt(NEWS, "p1", &[PERSISTENT]).await?;
    drop(producer);
    broker.shutdown().await;

    let broker = start_broker_with_store(Arc::new(store.reopen()), |_| {}).await?;
    // The subscription itself is recovered: it exists and collects before anyone connects.
    let stats = broker.durable_subscription_stats("keeper", "kept").await.context("recovered")?;
    assert_eq!((stats.ready, stats.consumers), (2, 0));
    let producer = connect(&broker).await?;
    producer.send_with_receipt(NEWS, "p2", &[PERSISTENT]).await?;
    producer.send_with_receipt(NEWS, "n1", &[]).await?;

    let subscriber = connect_as(&broker, "keeper").await?;
    let mut sub = subscriber.subscribe(NEWS, AckMode::ClientIndividual, &durable("kept")).await?;
    let received = recv_n(&mut sub, 4).await?;
    assert_eq!(bodies(&received), ["p0", "p1", "p2", "n1"]);
    assert_eq!(received[0].header("colour"), Some("red"));
    assert_eq!(received[0].header("persistent"), Some("true"));
    assert_nothing_arrives(&mut sub).await?;
    let key = durable_key("news", "keeper", "kept");
    assert_eq!(stored_count_of(&broker, &key)?, 3);
    for message in &received {
        subscriber.ack(message).await?;
    }
    assert_eq!(stored_count_of(&broker, &key)?, 0);
    broker.shutdown().await;
    Ok(())
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn a_second_consumer_on_an_active_durable_subscription_is_refused() -> anyhow::Result<()> {
    let broker = start_broker(|_| {}).await?;
    let first = connect_as(&broker, "shared-id").await?;
    let mut first_sub = first.subscribe(NEWS, AckMode::Auto, &durable("only-one")).await?;

    // Another connection cannot even connect with the client id (as in ActiveMQ, the id is
    // held by one connection at a time), in the words of the OpenWire adapter's refusal.
    let refused = connect_as(&broker, "shared-id").await.err().context("the client id is taken")?;
    let message = format!("{refused:#}");
    ensure!(
        message.contains("client id shared-id is already in use by another connection"),
        "unexpected refusal: {message}"
    );

    // The refusal closed that connection only; the first subscription is untouched.
    let producer = connect(&broker).await?;
    producer.send_with_receipt(NEWS, "still mine", &[]).await?;
    assert_eq!(&recv(&mut first_sub).await?.body()[..], b"still mine");
    assert_nothing_arrives(&mut first_sub).await?;
    // The same connection cannot attach a second consumer either.
    let message = server_error(first.subscribe(NEWS, AckMode::Auto, &durable("only-one")).await)?;
    ensure!(message.contains("active consumer"), "unexpected ERROR message: {message}");
    broker.shutdown().await;
    Ok(())
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn unsubscribe_with_the_subscription_name_removes_it_and_its_messages() -> anyhow::Result<()>
{
    let store = Arc::new(RecordingStore::new());
    let broker = start_broker_with_store(store.clone(), |_| {}).await?;
    let subscriber = connect_as(&broker, "leaver").await?;
    subscriber.subscribe(NEWS, AckMode::ClientIndividual, &durable("gone")).await?;
    subscriber.disconnect().await?;
    let producer = connect(&broker).await?;
    send_persistent(&producer, NEWS, "old", 3).await?;
    producer.send_with_receipt(NEWS, "old non-persistent", &[]).await?;
    let key = durable_key("news", "leaver", "gone");
    assert_eq!(stored_count_of(&broker, &key)?, 3);

    // From a new connection with the same client id, without subscribing first.
    let subscriber = connect_as(&broker, "leaver").await?;
    subscriber.request_receipt(remove_durable("gone", None)).await?;
    assert_eq!(stored_count_of(&broker, &key)?, 0);
    assert!(broker.durable_subscription_stats("leaver", "gone").await.is_none());
    ensure!(
        store.operations().iter().any(|op| matches!(op, Operation::RemoveSubscription(k)
            if &*k.client_id == "leaver" && &*k.name == "gone")),
        "no RemoveSubscription reached the store"
    );
    // Publishing now reaches nobody: the subscription no longer collects.
    send_persistent(&producer, NEWS, "unheard", 1).await?;
    assert_eq!(stored_count_of(&broker, &key)?, 0);

    // Subscribing under the name again starts a new, empty subscription.
    let mut sub = subscriber.subscribe(NEWS, AckMode::ClientIndividual, &durable("gone")).await?;
    assert_nothing_arrives(&mut sub).await?;
    producer.send_with_receipt(NEWS, "new", &[PERSISTENT]).await?;
    assert_eq!(&recv(&mut sub).await?.body()[..], b"new");
    broker.shutdown().await;
    Ok(())
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn unsubscribe_by_id_and_name_ends_an_active_durable_subscription() -> anyhow::Result<()> {
    let broker = start_broker(|_| {}).await?;
    let subscriber = connect_as(&broker, "active").await?;
    let mut sub = subscriber.subscribe(NEWS, AckMode::ClientIndividual, &durable("now")).await?;
    let producer = connect(&broker).await?;
    send_persistent(&producer, NEWS, "m", 2).await?;
    let held = recv_n(&mut sub, 2).await?;
    assert_eq!(bodies(&held), ["m0", "m1"]);

    let id = sub.id().to_owned();
    subscriber.request_receipt(remove_durable("now", Some(&id))).await?;
    assert!(broker.durable_subscription_stats("active", "now").await.is_none());
    assert_eq!(stored_count_of(&broker, &durable_key("news", "active", "now"))?, 0);
    drop(sub);
    subscriber.disconnect().await?;

    let subscriber = connect_as(&broker, "active").await?;
    let mut sub = subscriber.subscribe(NEWS, AckMode::ClientIndividual, &durable("now")).await?;
    assert_nothing_arrives(&mut sub).await?;
    broker.shutdown().await;
    Ok(())
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn unsubscribe_by_id_alone_keeps_the_durable_subscription() -> anyhow::Result<()> {
    let broker = start_broker(|_| {}).await?;
    let subscriber = connect_as(&broker, "pauser").await?;
    let sub = subscriber.subscribe(NEWS, AckMode::ClientIndividual, &durable("paused")).await?;
    sub.unsubscribe().await?;
    let producer = connect(&broker).await?;
    send_persistent(&producer, NEWS, "kept", 2).await?;

    let mut sub = subscriber.subscribe(NEWS, AckMode::ClientIndividual, &durable("paused")).await?;
    assert_eq!(bodies(&recv_n(&mut sub, 2).await?), ["kept0", "kept1"]);
    broker.shutdown().await;
    Ok(())
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn removing_a_subscription_in_use_elsewhere_is_refused() -> anyhow::Result<()> {
    let broker = start_broker(|_| {}).await?;
    let holder = connect_as(&broker, "busy").await?;
    let mut sub = holder.subscribe(NEWS, AckMode::Auto, &durable("held")).await?;
    // No other connection can hold the client id meanwhile, so none can name the
    // subscription; the holder itself cannot remove it while it consumes.
    let refused = connect_as(&broker, "busy").await.err().context("the client id is taken")?;
    ensure!(format!("{refused:#}").contains("already in use"), "unexpected refusal: {refused:#}");
    // Removing a subscription that does not exist is refused as well.
    let third = connect_as(&broker, "busy-too").await?;
    let message = server_error(third.request_receipt(remove_durable("never", None)).await)?;
    ensure!(message.contains("does not exist"), "unexpected ERROR message: {message}");

    let producer = connect(&broker).await?;
    producer.send_with_receipt(NEWS, "still there", &[]).await?;
    assert_eq!(&recv(&mut sub).await?.body()[..], b"still there");
    let message = server_error(holder.request_receipt(remove_durable("held", None)).await)?;
    ensure!(message.contains("active consumer"), "unexpected ERROR message: {message}");
    assert!(broker.durable_subscription_stats("busy", "held").await.is_some());
    broker.shutdown().await;
    Ok(())
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn two_subscriptions_share_one_stored_body_and_are_acked_separately() -> anyhow::Result<()> {
    let store = Arc::new(RecordingStore::new());
    let broker = start_broker_with_store(store.clone(), |_| {}).await?;
    let subscriber = connect_as(&broker, "twin").await?;
    let mut left = subscriber.subscribe(NEWS, AckMode::ClientIndividual, &durable("left")).await?;
    let mut right =
        subscriber.subscribe(NEWS, AckMode::ClientIndividual, &durable("right")).await?;
    subscriber.send_with_receipt(NEWS, "shared", &[PERSISTENT]).await?;

    let adds = store.adds();
    assert_eq!(adds.len(), 1, "{adds:?}");
    let mut queues = adds[0].queues.clone();
    queues.sort();
    let mut expected =
        vec![durable_key("news", "twin", "left"), durable_key("news", "twin", "right")];
    expected.sort();
    assert_eq!(queues, expected);

    let from_left = recv(&mut left).await?;
    let from_right = recv(&mut right).await?;
    assert_eq!(from_left.body(), from_right.body());
    subscriber.ack(&from_left).await?;
    assert_eq!(stored_count_of(&broker, &durable_key("news", "twin", "left"))?, 0);
    assert_eq!(stored_count_of(&broker, &durable_key("news", "twin", "right"))?, 1);
    subscriber.ack(&from_right).await?;
    assert_eq!(stored_count_of(&broker, &durable_key("news", "twin", "right"))?, 0);
    broker.shutdown().await;
    Ok(())
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn the_same_name_under_another_client_id_is_another_subscription() -> anyhow::Result<()> {
    let broker = start_broker(|_| {}).await?;
    let alice = connect_as(&broker, "alice").await?;
    let bob = connect_as(&broker, "bob").await?;
    let mut alice_sub = alice.subscribe(NEWS, AckMode::Auto, &durable("inbox")).await?;
    let mut bob_sub = bob.subscribe(NEWS, AckMode::Auto, &durable("inbox")).await?;
    alice.send_with_receipt(NEWS, "for both", &[PERSISTENT]).await?;
    assert_eq!(&recv(&mut alice_sub).await?.body()[..], b"for both");
    assert_eq!(&recv(&mut bob_sub).await?.body()[..], b"for both");
    broker.shutdown().await;
    Ok(())
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn subscribing_under_the_same_name_to_another_topic_replaces_the_subscription(
) -> anyhow::Result<()> {
    let broker = start_broker(|_| {}).await?;
    let subscriber = connect_as(&broker, "mover").await?;
    subscriber.subscribe(NEWS, AckMode::ClientIndividual, &durable("moving")).await?;
    subscriber.disconnect().await?;
    let producer = connect(&broker).await?;
    send_persistent(&producer, NEWS, "old", 2).await?;

    let subscriber = connect_as(&broker, "mover").await?;
    let mut sub = subscriber
        .subscribe("/topic/sports", AckMode::ClientIndividual, &durable("moving"))
        .await?;
    // As in JMS: the old subscription and what it held are gone.
    assert_nothing_arrives(&mut sub).await?;
    assert_eq!(stored_count_of(&broker, &durable_key("news", "mover", "moving"))?, 0);
    send_persistent(&producer, NEWS, "news", 1).await?;
    send_persistent(&producer, "/topic/sports", "sports", 1).await?;
    assert_eq!(&recv(&mut sub).await?.body()[..], b"sports0");
    assert_nothing_arrives(&mut sub).await?;
    broker.shutdown().await;
    Ok(())
}
