//! Temporary destinations (ActiveMQ's `/temp-queue/NAME` for STOMP), their advisories, and
//! composite destinations (`A,B`).

use anyhow::{ensure, Context as _};
use client::AckMode;
use tests::{assert_nothing_arrives, bodies, connect, recv, recv_n, start_broker};

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn request_reply_over_a_temporary_queue() -> anyhow::Result<()> {
    let broker = start_broker(|_| {}).await?;
    let requester = connect(&broker).await?;
    let responder = connect(&broker).await?;
    let mut replies = requester.subscribe("/temp-queue/replies", AckMode::Auto, &[]).await?;
    let mut requests = responder.subscribe("/queue/requests", AckMode::Auto, &[]).await?;

    requester
        .send_with_receipt(
            "/queue/requests",
            "what time is it?",
            &[("reply-to", "/temp-queue/replies"), ("correlation-id", "c-1")],
        )
        .await?;
    let request = recv(&mut requests).await?;
    let reply_to = request.header("reply-to").context("the request has a reply-to")?.to_owned();
    ensure!(reply_to.starts_with("/remote-temp-queue/"), "reply-to seen by others: {reply_to}");
    responder.send_with_receipt(&reply_to, "noon", &[("correlation-id", "c-1")]).await?;

    let reply = recv(&mut replies).await?;
    assert_eq!(reply.body().as_ref(), b"noon");
    assert_eq!(reply.header("correlation-id"), Some("c-1"));
    // Its owner sees the temporary queue under the name it gave it.
    assert_eq!(reply.destination(), Some("/temp-queue/replies"));
    Ok(())
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn a_temporary_queue_goes_with_its_connection() -> anyhow::Result<()> {
    let broker = start_broker(|_| {}).await?;
    let owner = connect(&broker).await?;
    let other = connect(&broker).await?;
    let mut watch = other.subscribe("/queue/where", AckMode::Auto, &[]).await?;
    let _own = owner.subscribe("/temp-queue/mine", AckMode::Auto, &[]).await?;
    owner.send_with_receipt("/queue/where", "here", &[("reply-to", "/temp-queue/mine")]).await?;
    let remote = recv(&mut watch).await?.header("reply-to").context("reply-to")?.to_owned();

    // Another connection may send to it but not consume from it.
    other.send_with_receipt(&remote, "hello", &[]).await?;
    let thief = connect(&broker).await?;
    let refused = thief.subscribe(&remote, AckMode::Auto, &[]).await;
    ensure!(refused.is_err(), "another connection subscribed to a temporary queue");

    owner.disconnect().await?;
    let refused = other.send_with_receipt(&remote, "too late", &[]).await;
    let error = format!("{:?}", refused.err().context("sending to a deleted temporary queue")?);
    ensure!(error.contains("does not exist"), "unexpected error: {error}");
    Ok(())
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn temporary_destinations_are_announced_on_the_advisory_topics() -> anyhow::Result<()> {
    let broker = start_broker(|_| {}).await?;
    let watcher = connect(&broker).await?;
    // What the ActiveMQ JMS client subscribes to: a composite of both advisory topics.
    let mut advisories = watcher
        .subscribe(
            "/topic/ActiveMQ.Advisory.TempQueue,ActiveMQ.Advisory.TempTopic",
            AckMode::Auto,
            &[],
        )
        .await?;
    let owner = connect(&broker).await?;
    let _queue = owner.subscribe("/temp-queue/q", AckMode::Auto, &[]).await?;
    let _topic = owner.subscribe("/temp-topic/t", AckMode::Auto, &[]).await?;
    let added = recv_n(&mut advisories, 2).await?;
    let operations: Vec<_> =
        added.iter().map(|m| m.header("ferromq.advisory.operation").map(str::to_owned)).collect();
    assert_eq!(operations, [Some("add".to_owned()), Some("add".to_owned())]);
    let announced: Vec<_> = added
        .iter()
        .filter_map(|m| m.header("ferromq.advisory.destination").map(str::to_owned))
        .collect();
    ensure!(announced[0].starts_with("temp-queue://"), "{announced:?}");
    ensure!(announced[1].starts_with("temp-topic://"), "{announced:?}");

    owner.disconnect().await?;
    let removed = recv_n(&mut advisories, 2).await?;
    for message in &removed {
        assert_eq!(message.header("ferromq.advisory.operation"), Some("remove"));
    }
    Ok(())
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn a_send_to_a_composite_destination_reaches_every_part() -> anyhow::Result<()> {
    let broker = start_broker(|_| {}).await?;
    let client = connect(&broker).await?;
    let mut a = client.subscribe("/queue/composite.A", AckMode::Auto, &[]).await?;
    let mut b = client.subscribe("/queue/composite.B", AckMode::Auto, &[]).await?;
    let mut t = client.subscribe("/topic/composite.T", AckMode::Auto, &[]).await?;
    let producer = connect(&broker).await?;
    producer
        .send_with_receipt("/queue/composite.A,composite.B,topic://composite.T", "all", &[])
        .await?;
    for subscription in [&mut a, &mut b, &mut t] {
        assert_eq!(recv(subscription).await?.body().as_ref(), b"all");
        assert_nothing_arrives(subscription).await?;
    }
    Ok(())
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn a_composite_consumer_receives_from_every_part() -> anyhow::Result<()> {
    let broker = start_broker(|_| {}).await?;
    let consumer = connect(&broker).await?;
    let mut both =
        consumer.subscribe("/queue/parts.1,parts.2", AckMode::ClientIndividual, &[]).await?;
    let producer = connect(&broker).await?;
    producer.send_with_receipt("/queue/parts.1", "one", &[]).await?;
    producer.send_with_receipt("/queue/parts.2", "two", &[]).await?;
    let received = recv_n(&mut both, 2).await?;
    let mut got = bodies(&received);
    got.sort();
    assert_eq!(got, ["one", "two"]);
    for message in &received {
        consumer.ack(message).await?;
    }
    assert_eq!(broker.queue_stats("parts.1").await.map(|s| s.acked), Some(1));
    assert_eq!(broker.queue_stats("parts.2").await.map(|s| s.acked), Some(1));
    Ok(())
}
