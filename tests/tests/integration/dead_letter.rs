//! Dead letters and expiry over STOMP: the broker's redelivery limit for NACKed messages, the
//! shared and individual dead-letter queues, non-persistent messages, messages failing in a
//! dead-letter queue, expired messages never delivered and swept.

use std::time::{Duration, SystemTime, UNIX_EPOCH};

use client::AckMode;
use conf::DeadLetterStrategy;
use tests::{
    assert_nothing_arrives, connect, recv, start_broker, stored_count, wait_until, PERSISTENT,
};

const DLQ: &str = "/queue/ActiveMQ.DLQ";

fn millis_from_now(offset: i64) -> String {
    let now = SystemTime::now().duration_since(UNIX_EPOCH).map_or(0, |d| d.as_millis() as i64);
    (now + offset).to_string()
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn a_message_nacked_seven_times_moves_to_the_dead_letter_queue() -> anyhow::Result<()> {
    let broker = start_broker(|_| {}).await?;
    let client = connect(&broker).await?;
    let mut sub = client.subscribe("/queue/dlq.orders", AckMode::ClientIndividual, &[]).await?;
    client
        .send_with_receipt("/queue/dlq.orders", "poison", &[PERSISTENT, ("color", "red")])
        .await?;
    // The first delivery and six redeliveries (the default limit) all arrive.
    let mut id = None;
    for delivery in 1..=7 {
        let message = recv(&mut sub).await?;
        assert_eq!(message.redelivered(), delivery > 1, "delivery {delivery}: {message:?}");
        id = message.message_id().map(str::to_owned);
        client.nack(&message).await?;
    }
    assert_nothing_arrives(&mut sub).await?;
    wait_until("the original is no longer stored", || async {
        stored_count(&broker, "dlq.orders").is_ok_and(|n| n == 0)
    })
    .await?;
    assert_eq!(stored_count(&broker, "ActiveMQ.DLQ")?, 1);

    let mut dead = client.subscribe(DLQ, AckMode::ClientIndividual, &[]).await?;
    let letter = recv(&mut dead).await?;
    assert_eq!(letter.body().as_ref(), b"poison");
    assert_eq!(letter.message_id(), id.as_deref());
    assert_eq!(letter.destination(), Some(DLQ));
    assert_eq!(letter.header("original-destination"), Some("/queue/dlq.orders"));
    assert_eq!(letter.header("color"), Some("red"));
    assert_eq!(letter.header("persistent"), Some("true"));
    let cause = letter.header("dlqDeliveryFailureCause").unwrap_or_default();
    assert!(cause.contains("Delivery[7] exceeds redelivery policy limit"), "{cause}");
    client.ack(&letter).await?;
    wait_until("the dead letter is acknowledged", || async {
        stored_count(&broker, "ActiveMQ.DLQ").is_ok_and(|n| n == 0)
    })
    .await?;
    broker.shutdown().await;
    Ok(())
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn the_individual_strategy_uses_a_dead_letter_queue_per_destination() -> anyhow::Result<()> {
    let broker = start_broker(|config| {
        config.dead_letter.strategy = DeadLetterStrategy::Individual;
        config.dead_letter.max_redeliveries = 0;
    })
    .await?;
    let client = connect(&broker).await?;
    let mut sub = client.subscribe("/queue/dlq.each", AckMode::ClientIndividual, &[]).await?;
    client.send_with_receipt("/queue/dlq.each", "once", &[PERSISTENT]).await?;
    // Limit 0: the first NACK dead-letters, as Apache ActiveMQ does for STOMP.
    client.nack(&recv(&mut sub).await?).await?;
    assert_nothing_arrives(&mut sub).await?;
    let mut dead = client
        .subscribe("/queue/ActiveMQ.DLQ.Queue.dlq.each", AckMode::ClientIndividual, &[])
        .await?;
    let letter = recv(&mut dead).await?;
    assert_eq!(letter.body().as_ref(), b"once");
    assert_eq!(letter.header("original-destination"), Some("/queue/dlq.each"));
    assert_eq!(stored_count(&broker, "ActiveMQ.DLQ")?, 0);
    broker.shutdown().await;
    Ok(())
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn non_persistent_messages_past_the_limit_are_dropped() -> anyhow::Result<()> {
    let broker = start_broker(|config| config.dead_letter.max_redeliveries = 0).await?;
    let client = connect(&broker).await?;
    let mut sub = client.subscribe("/queue/dlq.fleeting", AckMode::ClientIndividual, &[]).await?;
    let mut dead = client.subscribe(DLQ, AckMode::ClientIndividual, &[]).await?;
    client.send_with_receipt("/queue/dlq.fleeting", "gone", &[]).await?;
    client.nack(&recv(&mut sub).await?).await?;
    assert_nothing_arrives(&mut sub).await?;
    assert_nothing_arrives(&mut dead).await?;
    broker.shutdown().await;
    Ok(())
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn non_persistent_messages_are_dead_lettered_as_persistent_when_asked() -> anyhow::Result<()>
{
    let broker = start_broker(|config| {
        config.dead_letter.max_redeliveries = 0;
        config.dead_letter.process_non_persistent = true;
    })
    .await?;
    let client = connect(&broker).await?;
    let mut sub = client.subscribe("/queue/dlq.kept", AckMode::ClientIndividual, &[]).await?;
    client.send_with_receipt("/queue/dlq.kept", "kept", &[]).await?;
    client.nack(&recv(&mut sub).await?).await?;
    let mut dead = client.subscribe(DLQ, AckMode::ClientIndividual, &[]).await?;
    let letter = recv(&mut dead).await?;
    assert_eq!(letter.body().as_ref(), b"kept");
    assert_eq!(letter.header("persistent"), Some("true"));
    assert_eq!(letter.header("originalDeliveryMode"), Some("NON_PERSISTENT"));
    assert_eq!(stored_count(&broker, "ActiveMQ.DLQ")?, 1);
    broker.shutdown().await;
    Ok(())
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn a_message_failing_in_the_dead_letter_queue_is_dropped() -> anyhow::Result<()> {
    let broker = start_broker(|config| config.dead_letter.max_redeliveries = 0).await?;
    let client = connect(&broker).await?;
    let mut sub = client.subscribe("/queue/dlq.twice", AckMode::ClientIndividual, &[]).await?;
    client.send_with_receipt("/queue/dlq.twice", "twice", &[PERSISTENT]).await?;
    client.nack(&recv(&mut sub).await?).await?;
    let mut dead = client.subscribe(DLQ, AckMode::ClientIndividual, &[]).await?;
    let letter = recv(&mut dead).await?;
    client.nack(&letter).await?;
    assert_nothing_arrives(&mut dead).await?;
    wait_until("the dead letter is dropped", || async {
        stored_count(&broker, "ActiveMQ.DLQ").is_ok_and(|n| n == 0)
    })
    .await?;
    assert_nothing_arrives(&mut sub).await?;
    broker.shutdown().await;
    Ok(())
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn unacknowledged_messages_of_closed_consumers_count_as_redeliveries() -> anyhow::Result<()> {
    let broker = start_broker(|config| config.dead_letter.max_redeliveries = 1).await?;
    let producer = connect(&broker).await?;
    producer.send_with_receipt("/queue/dlq.crash", "crashes", &[PERSISTENT]).await?;
    // Two consumers in a row take it and go without acknowledging it.
    for _ in 0..2 {
        let consumer = connect(&broker).await?;
        let mut sub = consumer.subscribe("/queue/dlq.crash", AckMode::Client, &[]).await?;
        recv(&mut sub).await?;
        consumer.disconnect().await?;
    }
    let mut dead = producer.subscribe(DLQ, AckMode::Auto, &[]).await?;
    let letter = recv(&mut dead).await?;
    assert_eq!(letter.body().as_ref(), b"crashes");
    assert_eq!(stored_count(&broker, "dlq.crash")?, 0);
    broker.shutdown().await;
    Ok(())
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn without_a_limit_nacked_messages_come_back_forever() -> anyhow::Result<()> {
    let broker = start_broker(|config| config.dead_letter.max_redeliveries = -1).await?;
    let client = connect(&broker).await?;
    let mut sub = client.subscribe("/queue/dlq.forever", AckMode::ClientIndividual, &[]).await?;
    client.send_with_receipt("/queue/dlq.forever", "again", &[PERSISTENT]).await?;
    for _ in 0..10 {
        client.nack(&recv(&mut sub).await?).await?;
    }
    client.ack(&recv(&mut sub).await?).await?;
    broker.shutdown().await;
    Ok(())
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn an_expired_message_is_never_delivered() -> anyhow::Result<()> {
    // No sweep: the dispatch path alone must hold it back.
    let broker = start_broker(|config| {
        config.destinations.expire_messages_period = Duration::ZERO;
    })
    .await?;
    let client = connect(&broker).await?;
    let past = millis_from_now(-1000);
    client.send_with_receipt("/queue/dlq.late", "late", &[PERSISTENT, ("expires", &past)]).await?;
    client.send_with_receipt("/queue/dlq.late", "fresh", &[PERSISTENT]).await?;
    let mut sub = client.subscribe("/queue/dlq.late", AckMode::ClientIndividual, &[]).await?;
    let first = recv(&mut sub).await?;
    assert_eq!(first.body().as_ref(), b"fresh");
    client.ack(&first).await?;
    assert_nothing_arrives(&mut sub).await?;
    // Persistent and expired: dead-lettered (processExpired), with the cause.
    let mut dead = client.subscribe(DLQ, AckMode::ClientIndividual, &[]).await?;
    let letter = recv(&mut dead).await?;
    assert_eq!(letter.body().as_ref(), b"late");
    assert_eq!(letter.header("expires"), Some("0"));
    assert_eq!(letter.header("originalExpiration"), Some(past.as_str()));
    let cause = letter.header("dlqDeliveryFailureCause").unwrap_or_default();
    assert!(cause.contains("Message Expired"), "{cause}");
    broker.shutdown().await;
    Ok(())
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn expired_messages_are_swept_to_the_dead_letter_queue() -> anyhow::Result<()> {
    let broker = start_broker(|config| {
        config.destinations.expire_messages_period = Duration::from_millis(100);
    })
    .await?;
    let client = connect(&broker).await?;
    let soon = millis_from_now(200);
    for index in 0..3 {
        client
            .send_with_receipt(
                "/queue/dlq.swept",
                format!("m{index}"),
                &[PERSISTENT, ("expires", &soon)],
            )
            .await?;
    }
    client.send_with_receipt("/queue/dlq.swept", "stays", &[PERSISTENT]).await?;
    assert_eq!(stored_count(&broker, "dlq.swept")?, 4);
    // No consumer ever attaches to the queue: only the sweep moves them.
    wait_until("the sweep moved the expired messages", || async {
        stored_count(&broker, "dlq.swept").is_ok_and(|n| n == 1)
            && stored_count(&broker, "ActiveMQ.DLQ").is_ok_and(|n| n == 3)
    })
    .await?;
    let mut sub = client.subscribe("/queue/dlq.swept", AckMode::Auto, &[]).await?;
    assert_eq!(recv(&mut sub).await?.body().as_ref(), b"stays");
    assert_nothing_arrives(&mut sub).await?;
    broker.shutdown().await;
    Ok(())
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn expired_messages_are_dropped_when_not_processed() -> anyhow::Result<()> {
    let broker = start_broker(|config| {
        config.destinations.expire_messages_period = Duration::from_millis(100);
        config.dead_letter.process_expired = false;
    })
    .await?;
    let client = connect(&broker).await?;
    let soon = millis_from_now(100);
    client.send_with_receipt("/queue/dlq.dropped", "x", &[PERSISTENT, ("expires", &soon)]).await?;
    client.send_with_receipt("/queue/dlq.dropped", "y", &[("expires", &soon)]).await?;
    wait_until("the sweep dropped the expired message", || async {
        stored_count(&broker, "dlq.dropped").is_ok_and(|n| n == 0)
    })
    .await?;
    tokio::time::sleep(Duration::from_millis(300)).await;
    let mut sub = client.subscribe("/queue/dlq.dropped", AckMode::Auto, &[]).await?;
    let mut dead = client.subscribe(DLQ, AckMode::Auto, &[]).await?;
    assert_nothing_arrives(&mut sub).await?;
    assert_nothing_arrives(&mut dead).await?;
    broker.shutdown().await;
    Ok(())
}
