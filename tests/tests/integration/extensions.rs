//! ActiveMQ's STOMP subscription extensions: `activemq.exclusive`, `activemq.retroactive`,
//! `activemq.noLocal`, `activemq.prefetchSize`; invalid values and the extensions ferromq does
//! not implement are refused with an ERROR.

use anyhow::{ensure, Context as _};
use client::AckMode;
use tests::{
    assert_nothing_arrives, bodies, connect, connect_as, recv, recv_n, send_persistent,
    server_error, start_broker, wait_durable_inactive, SUBSCRIPTION_NAME,
};

const EXCLUSIVE: (&str, &str) = ("activemq.exclusive", "true");
const RETROACTIVE: (&str, &str) = ("activemq.retroactive", "true");
const NO_LOCAL: (&str, &str) = ("activemq.noLocal", "true");

fn numbered(prefix: &str, count: usize) -> Vec<String> {
    (0..count).map(|i| format!("{prefix}{i}")).collect()
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn an_exclusive_consumer_gets_everything_while_it_is_subscribed() -> anyhow::Result<()> {
    let broker = start_broker(|_| {}).await?;
    let (shared, exclusive) = (connect(&broker).await?, connect(&broker).await?);
    // The non-exclusive consumer was there first.
    let mut shared_sub = shared.subscribe("/queue/excl", AckMode::ClientIndividual, &[]).await?;
    let mut exclusive_sub =
        exclusive.subscribe("/queue/excl", AckMode::ClientIndividual, &[EXCLUSIVE]).await?;
    let producer = connect(&broker).await?;
    send_persistent(&producer, "/queue/excl", "first", 5).await?;

    let to_exclusive = recv_n(&mut exclusive_sub, 5).await?;
    assert_eq!(bodies(&to_exclusive), numbered("first", 5));
    assert_nothing_arrives(&mut shared_sub).await?;
    // It acknowledges three and leaves: the other two, and what follows, go to the other one.
    for message in &to_exclusive[..3] {
        exclusive.ack(message).await?;
    }
    exclusive_sub.unsubscribe().await?;
    send_persistent(&producer, "/queue/excl", "second", 2).await?;
    let to_shared = recv_n(&mut shared_sub, 4).await?;
    assert_eq!(bodies(&to_shared), ["first3", "first4", "second0", "second1"]);
    assert!(to_shared[0].redelivered() && to_shared[1].redelivered());
    assert!(!to_shared[2].redelivered());
    broker.shutdown().await;
    Ok(())
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn an_exclusive_consumer_that_drops_hands_over_to_the_others() -> anyhow::Result<()> {
    let broker = start_broker(|_| {}).await?;
    let exclusive = connect(&broker).await?;
    let mut exclusive_sub =
        exclusive.subscribe("/queue/excl-drop", AckMode::Auto, &[EXCLUSIVE]).await?;
    let (a, b) = (connect(&broker).await?, connect(&broker).await?);
    let mut a_sub = a.subscribe("/queue/excl-drop", AckMode::Auto, &[]).await?;
    let mut b_sub = b.subscribe("/queue/excl-drop", AckMode::Auto, &[]).await?;
    let producer = connect(&broker).await?;
    send_persistent(&producer, "/queue/excl-drop", "m", 4).await?;
    assert_eq!(bodies(&recv_n(&mut exclusive_sub, 4).await?), numbered("m", 4));
    assert_nothing_arrives(&mut a_sub).await?;
    assert_nothing_arrives(&mut b_sub).await?;

    drop(exclusive_sub);
    drop(exclusive);
    tests::wait_until("the exclusive consumer is gone", || async {
        broker.queue_stats("excl-drop").await.is_some_and(|s| s.consumers == 2)
    })
    .await?;
    send_persistent(&producer, "/queue/excl-drop", "after", 4).await?;
    // The remaining (non-exclusive) consumers share as usual.
    let to_a = bodies(&recv_n(&mut a_sub, 2).await?);
    let to_b = bodies(&recv_n(&mut b_sub, 2).await?);
    let mut all = [to_a, to_b].concat();
    all.sort();
    assert_eq!(all, numbered("after", 4));
    broker.shutdown().await;
    Ok(())
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn a_retroactive_subscriber_gets_recent_messages() -> anyhow::Result<()> {
    let broker = start_broker(|_| {}).await?;
    let producer = connect(&broker).await?;
    // Published while nobody listened.
    producer.send_with_receipt("/topic/retro", "r0", &[]).await?;
    producer.send_with_receipt("/topic/retro", "r1", &[("persistent", "true")]).await?;
    producer.send_with_receipt("/topic/other", "elsewhere", &[]).await?;

    let consumer = connect(&broker).await?;
    let mut plain = consumer.subscribe("/topic/retro", AckMode::Auto, &[]).await?;
    let mut retro = consumer.subscribe("/topic/retro", AckMode::Auto, &[RETROACTIVE]).await?;
    producer.send_with_receipt("/topic/retro", "live", &[]).await?;
    assert_eq!(bodies(&recv_n(&mut retro, 3).await?), ["r0", "r1", "live"]);
    assert_eq!(bodies(&recv_n(&mut plain, 1).await?), ["live"]);
    assert_nothing_arrives(&mut retro).await?;
    assert_nothing_arrives(&mut plain).await?;

    // A retroactive wildcard subscription replays every matching topic's recent messages.
    let mut wildcard = consumer.subscribe("/topic/>", AckMode::Auto, &[RETROACTIVE]).await?;
    let mut replayed = bodies(&recv_n(&mut wildcard, 4).await?);
    replayed.sort();
    assert_eq!(replayed, ["elsewhere", "live", "r0", "r1"]);
    assert_nothing_arrives(&mut wildcard).await?;
    broker.shutdown().await;
    Ok(())
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn a_no_local_subscriber_skips_its_own_connections_messages() -> anyhow::Result<()> {
    let broker = start_broker(|_| {}).await?;
    let (me, other) = (connect(&broker).await?, connect(&broker).await?);
    let mut no_local = me.subscribe("/topic/chat", AckMode::Auto, &[NO_LOCAL]).await?;
    let mut everything = me.subscribe("/topic/chat", AckMode::Auto, &[]).await?;
    me.send_with_receipt("/topic/chat", "mine", &[]).await?;
    other.send_with_receipt("/topic/chat", "theirs", &[]).await?;
    me.send_with_receipt("/topic/chat", "mine again", &[]).await?;

    assert_eq!(bodies(&recv_n(&mut no_local, 1).await?), ["theirs"]);
    assert_nothing_arrives(&mut no_local).await?;
    assert_eq!(bodies(&recv_n(&mut everything, 3).await?), ["mine", "theirs", "mine again"]);
    // A transacted send is published at its commit, still as the sending connection's.
    me.begin("tx").await?;
    me.send_with_receipt("/topic/chat", "mine in a transaction", &[("transaction", "tx")]).await?;
    me.commit("tx").await?;
    assert_eq!(&recv(&mut everything).await?.body()[..], b"mine in a transaction");
    assert_nothing_arrives(&mut no_local).await?;
    // `false` means what it says.
    let mut explicit_false =
        other.subscribe("/topic/chat", AckMode::Auto, &[("activemq.noLocal", "false")]).await?;
    other.send_with_receipt("/topic/chat", "own", &[]).await?;
    assert_eq!(&recv(&mut explicit_false).await?.body()[..], b"own");
    broker.shutdown().await;
    Ok(())
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn a_no_local_durable_subscriber_skips_its_own_connections_messages() -> anyhow::Result<()> {
    let broker = start_broker(|_| {}).await?;
    let me = connect_as(&broker, "talker").await?;
    let mut sub = me
        .subscribe("/topic/chat-durable", AckMode::Auto, &[NO_LOCAL, (SUBSCRIPTION_NAME, "s")])
        .await?;
    let other = connect(&broker).await?;
    me.send_with_receipt("/topic/chat-durable", "mine", &[]).await?;
    other.send_with_receipt("/topic/chat-durable", "theirs", &[]).await?;
    assert_eq!(bodies(&recv_n(&mut sub, 1).await?), ["theirs"]);
    assert_nothing_arrives(&mut sub).await?;
    broker.shutdown().await;
    Ok(())
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn prefetch_size_bounds_unacknowledged_deliveries() -> anyhow::Result<()> {
    let broker = start_broker(|_| {}).await?;
    let producer = connect(&broker).await?;
    send_persistent(&producer, "/queue/prefetch-ext", "q", 5).await?;
    let consumer = connect(&broker).await?;
    let mut queue_sub = consumer
        .subscribe("/queue/prefetch-ext", AckMode::Client, &[("activemq.prefetchSize", "2")])
        .await?;
    let mut topic_sub = consumer
        .subscribe(
            "/topic/prefetch-ext",
            AckMode::ClientIndividual,
            &[("activemq.prefetchSize", "3")],
        )
        .await?;
    send_persistent(&producer, "/topic/prefetch-ext", "t", 5).await?;

    let first = recv_n(&mut queue_sub, 2).await?;
    assert_eq!(bodies(&first), ["q0", "q1"]);
    assert_nothing_arrives(&mut queue_sub).await?;
    let topic_first = recv_n(&mut topic_sub, 3).await?;
    assert_eq!(bodies(&topic_first), ["t0", "t1", "t2"]);
    assert_nothing_arrives(&mut topic_sub).await?;
    let stats = broker.queue_stats("prefetch-ext").await.context("queue exists")?;
    assert_eq!((stats.in_flight, stats.ready), (2, 3));

    // A cumulative ack of both frees two slots.
    consumer.ack(&first[1]).await?;
    assert_eq!(bodies(&recv_n(&mut queue_sub, 2).await?), ["q2", "q3"]);
    for message in &topic_first {
        consumer.ack(message).await?;
    }
    assert_eq!(bodies(&recv_n(&mut topic_sub, 2).await?), ["t3", "t4"]);
    broker.shutdown().await;
    Ok(())
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn dispatch_async_is_accepted_and_changes_nothing() -> anyhow::Result<()> {
    let broker = start_broker(|_| {}).await?;
    let client = connect(&broker).await?;
    let mut sub = client
        .subscribe("/queue/async", AckMode::Auto, &[("activemq.dispatchAsync", "true")])
        .await?;
    client.send_with_receipt("/queue/async", "m", &[]).await?;
    assert_eq!(&recv(&mut sub).await?.body()[..], b"m");
    broker.shutdown().await;
    Ok(())
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn invalid_extension_values_are_refused() -> anyhow::Result<()> {
    let broker = start_broker(|_| {}).await?;
    let cases: &[(&str, &str)] = &[
        ("activemq.exclusive", "maybe"),
        ("activemq.retroactive", "yes"),
        ("activemq.noLocal", "1"),
        ("activemq.prefetchSize", "0"),
        ("activemq.prefetchSize", "-1"),
        ("activemq.prefetchSize", "many"),
    ];
    for (header, value) in cases {
        let client = connect(&broker).await?;
        let message = server_error(
            client.subscribe("/queue/invalid-ext", AckMode::Auto, &[(*header, *value)]).await,
        )?;
        ensure!(
            message.contains(header),
            "{header}:{value}: the ERROR does not name the header: {message}"
        );
        ensure!(client.next_error().await.is_none(), "{header}:{value}: connection left open");
    }
    // No consumer was attached by any of them.
    if let Some(stats) = broker.queue_stats("invalid-ext").await {
        ensure!(stats.consumers == 0, "a refused consumer is attached: {stats:?}");
    }
    broker.shutdown().await;
    Ok(())
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn unsupported_subscription_headers_are_refused() -> anyhow::Result<()> {
    let broker = start_broker(|_| {}).await?;
    // Selectors and consumer priority are supported since; these are not.
    let cases: &[(&str, &str)] =
        &[("activemq.maximumPendingMessageLimit", "10"), ("activemq.unheardOfOption", "5")];
    for (header, value) in cases {
        let client = connect(&broker).await?;
        let message = server_error(
            client.subscribe("/topic/unsupported", AckMode::Auto, &[(*header, *value)]).await,
        )?;
        ensure!(
            message.contains(header) && message.contains("not supported"),
            "{header}: unexpected ERROR message: {message}"
        );
    }
    // The refusals touched nothing: a plain subscriber still works.
    let client = connect(&broker).await?;
    let mut sub = client.subscribe("/topic/unsupported", AckMode::Auto, &[]).await?;
    client.send_with_receipt("/topic/unsupported", "fine", &[]).await?;
    assert_eq!(&recv(&mut sub).await?.body()[..], b"fine");
    assert_nothing_arrives(&mut sub).await?;
    broker.shutdown().await;
    Ok(())
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn a_retroactive_durable_subscription_replays_only_when_created() -> anyhow::Result<()> {
    let broker = start_broker(|_| {}).await?;
    let producer = connect(&broker).await?;
    producer.send_with_receipt("/topic/retro-durable", "before", &[]).await?;
    let subscriber = connect_as(&broker, "retro").await?;
    let mut sub = subscriber
        .subscribe(
            "/topic/retro-durable",
            AckMode::ClientIndividual,
            &[RETROACTIVE, (SUBSCRIPTION_NAME, "s")],
        )
        .await?;
    let replayed = recv(&mut sub).await?;
    assert_eq!(&replayed.body()[..], b"before");
    subscriber.ack(&replayed).await?;
    drop(sub);
    drop(subscriber);
    wait_durable_inactive(&broker, "retro", "s").await?;
    producer.send_with_receipt("/topic/retro-durable", "offline", &[]).await?;

    // Reattaching does not replay the recent messages again.
    let subscriber = connect_as(&broker, "retro").await?;
    let mut sub = subscriber
        .subscribe(
            "/topic/retro-durable",
            AckMode::ClientIndividual,
            &[RETROACTIVE, (SUBSCRIPTION_NAME, "s")],
        )
        .await?;
    assert_eq!(bodies(&recv_n(&mut sub, 1).await?), ["offline"]);
    assert_nothing_arrives(&mut sub).await?;
    broker.shutdown().await;
    Ok(())
}
