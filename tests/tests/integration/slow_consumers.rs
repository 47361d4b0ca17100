//! Slow consumers and the policy advisories over STOMP: a subscriber whose prefetch is full
//! while messages wait is announced on `ActiveMQ.Advisory.SlowConsumer.*` and, with a
//! `slow_consumer_strategy`, aborted (STOMP: an ERROR naming the subscription, then the
//! close; AMQP: the link closed with `amqp:internal-error`, through Qpid Proton) while the
//! other subscribers go on; the pending message limit bounds what a slow
//! non-durable subscriber holds (so its producers never wait for it); dead-lettered messages
//! are announced on `MessageDLQd`; the delivery, consumed, no-consumer, FULL and fast
//! producer advisories follow their policy flags.

use anyhow::{ensure, Context as _};
use client::AckMode;
use tests::{
    assert_nothing_arrives, connect, recv, recv_n, start_broker, wait_until, ARRIVES, PERSISTENT,
    QUIET,
};

/// The `[[policies]]` of `toml`.
fn policies(toml: &str) -> anyhow::Result<Vec<conf::PolicyEntry>> {
    Ok(conf::Config::parse(toml, "slow_consumers.toml")?.policies)
}

/// A subscriber that takes one message and never acknowledges it.
const PREFETCH_1: (&str, &str) = ("activemq.prefetchSize", "1");

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn a_subscriber_with_a_full_prefetch_and_waiting_messages_is_announced_slow(
) -> anyhow::Result<()> {
    let policies = policies(
        r#"
        [[policies]]
        topic = "slow.announced"
        advisory_for_slow_consumers = true
        "#,
    )?;
    let broker = start_broker(|config| config.policies = policies).await?;
    let monitor = connect(&broker).await?;
    let mut advisories = monitor
        .subscribe("/topic/ActiveMQ.Advisory.SlowConsumer.Topic.slow.announced", AckMode::Auto, &[])
        .await?;
    let mut quiet = monitor
        .subscribe("/topic/ActiveMQ.Advisory.SlowConsumer.Topic.slow.quiet", AckMode::Auto, &[])
        .await?;

    let slow = connect(&broker).await?;
    let mut announced =
        slow.subscribe("/topic/slow.announced", AckMode::Client, &[PREFETCH_1]).await?;
    let mut unannounced =
        slow.subscribe("/topic/slow.quiet", AckMode::Client, &[PREFETCH_1]).await?;
    let producer = connect(&broker).await?;
    for index in 0..3 {
        producer.send_with_receipt("/topic/slow.announced", format!("m{index}"), &[]).await?;
        producer.send_with_receipt("/topic/slow.quiet", format!("m{index}"), &[]).await?;
    }
    recv(&mut announced).await?;
    recv(&mut unannounced).await?;

    let advisory = recv(&mut advisories).await?;
    assert_eq!(advisory.header("ferromq.advisory.destination"), Some("topic://slow.announced"));
    assert_eq!(advisory.header("ferromq.advisory.kind"), Some("consumer"));
    let consumer = advisory.header("consumerId").context("ActiveMQ's consumerId")?;
    assert!(consumer.starts_with("ID:"), "{consumer}");
    // Announced once while it stays slow; the other topic's policy has no advisory.
    producer.send_with_receipt("/topic/slow.announced", "more", &[]).await?;
    assert_nothing_arrives(&mut advisories).await?;
    assert_nothing_arrives(&mut quiet).await?;

    let stats = broker.destination_stats().await;
    let topic = stats.iter().find(|d| d.name == "slow.announced").context("topic stats")?;
    assert_eq!(topic.slow_consumers, 1, "{topic:?}");
    assert!(topic.subscriptions.iter().all(|s| s.slow), "{topic:?}");
    broker.shutdown().await;
    Ok(())
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn an_aborted_slow_subscriber_gets_an_error_and_is_closed_while_a_fast_one_gets_everything(
) -> anyhow::Result<()> {
    let policies = policies(
        r#"
        [[policies]]
        topic = "slow.>"
        slow_consumer_strategy = { max_slow_duration_ms = 500, check_period_ms = 200 }
        "#,
    )?;
    let broker = start_broker(|config| config.policies = policies).await?;
    let slow = connect(&broker).await?;
    let slow_subscription =
        slow.subscribe("/topic/slow.aborted", AckMode::Client, &[PREFETCH_1]).await?;
    let fast = connect(&broker).await?;
    let mut everything = fast.subscribe("/topic/slow.aborted", AckMode::Auto, &[]).await?;
    let producer = connect(&broker).await?;
    for index in 0..10 {
        producer.send_with_receipt("/topic/slow.aborted", format!("m{index}"), &[]).await?;
    }

    let error = tokio::time::timeout(ARRIVES, slow.next_error())
        .await
        .context("no ERROR for the slow subscriber")?
        .context("the connection ended without an ERROR")?;
    assert_eq!(error.get("message"), Some("slow consumer aborted"), "{error:?}");
    assert_eq!(error.get("subscription"), Some(slow_subscription.id()), "{error:?}");
    assert_eq!(error.get("destination"), Some("/topic/slow.aborted"), "{error:?}");
    wait_until("the slow subscriber's connection is closed", || async { slow.is_closed() }).await?;

    for index in 10..20 {
        producer.send_with_receipt("/topic/slow.aborted", format!("m{index}"), &[]).await?;
    }
    let received = recv_n(&mut everything, 20).await?;
    let expected: Vec<String> = (0..20).map(|index| format!("m{index}")).collect();
    assert_eq!(tests::bodies(&received), expected);
    wait_until("the aborted subscription is gone", || async {
        let stats = broker.destination_stats().await;
        stats.iter().any(|d| d.name == "slow.aborted" && d.consumers == 1)
    })
    .await?;
    broker.shutdown().await;
    Ok(())
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn the_pending_message_limit_discards_the_oldest_waiting_messages_of_a_slow_subscriber(
) -> anyhow::Result<()> {
    // A 64 KiB memory limit that 200 messages of 1 KiB held for the slow subscriber would
    // exceed, blocking the producer, were they not discarded.
    let policies = policies(
        r#"
        [[policies]]
        topic = "limited.>"
        pending_message_limit = 10
        memory_limit = "64 kb"
        advisory_for_discarding_messages = true
        "#,
    )?;
    let broker = start_broker(|config| config.policies = policies).await?;
    let monitor = connect(&broker).await?;
    let mut discards = monitor
        .subscribe(
            "/topic/ActiveMQ.Advisory.MessageDiscarded.Topic.limited.prices",
            AckMode::Auto,
            &[],
        )
        .await?;
    let slow = connect(&broker).await?;
    let mut slow_subscription =
        slow.subscribe("/topic/limited.prices", AckMode::Client, &[PREFETCH_1]).await?;
    let fast = connect(&broker).await?;
    let mut everything = fast.subscribe("/topic/limited.prices", AckMode::Auto, &[]).await?;
    let producer = connect(&broker).await?;
    const MESSAGES: usize = 200;
    for index in 0..MESSAGES {
        let body = format!("{index:04}{}", "x".repeat(1020));
        tokio::time::timeout(
            ARRIVES,
            producer.send_with_receipt("/topic/limited.prices", body, &[]),
        )
        .await
        .with_context(|| format!("send {index} was held"))??;
    }
    let received = recv_n(&mut everything, MESSAGES).await?;
    ensure!(received.len() == MESSAGES);
    let first = recv(&mut slow_subscription).await?;
    assert!(first.body().starts_with(b"0000"));

    let advisory = recv(&mut discards).await?;
    assert_eq!(advisory.header("discardedCount"), Some("1"), "{advisory:?}");
    assert!(advisory.header("orignalMessageId").is_some(), "{advisory:?}");
    assert_eq!(advisory.header("orignalDestination"), Some("topic://limited.prices"));

    let stats = broker.destination_stats().await;
    let topic = stats.iter().find(|d| d.name == "limited.prices").context("topic stats")?;
    let held = topic.subscriptions.iter().find(|s| s.discarded > 0).context("slow subscription")?;
    assert_eq!(held.pending, 10, "{held:?}");
    assert_eq!(held.in_flight, 1, "{held:?}");
    assert_eq!(held.discarded, (MESSAGES - 11) as u64, "{held:?}");
    assert_eq!(topic.discarded, (MESSAGES - 11) as u64, "{topic:?}");
    // The newest ten are what waits for it.
    slow.ack(&first).await?;
    let kept = recv_n(&mut slow_subscription, 1).await?;
    assert!(kept[0].body().starts_with(format!("{:04}", MESSAGES - 10).as_bytes()));
    broker.shutdown().await;
    Ok(())
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn a_message_dead_lettered_after_a_stomp_nack_is_announced_on_message_dlqd(
) -> anyhow::Result<()> {
    let broker = start_broker(|config| config.dead_letter.max_redeliveries = 0).await?;
    let monitor = connect(&broker).await?;
    let mut dlqd = monitor
        .subscribe("/topic/ActiveMQ.Advisory.MessageDLQd.Queue.dlqd.orders", AckMode::Auto, &[])
        .await?;
    let client = connect(&broker).await?;
    let mut orders = client.subscribe("/queue/dlqd.orders", AckMode::ClientIndividual, &[]).await?;
    client.send_with_receipt("/queue/dlqd.orders", "poison", &[PERSISTENT]).await?;
    let message = recv(&mut orders).await?;
    client.nack(&message).await?;

    let advisory = recv(&mut dlqd).await?;
    assert_eq!(advisory.header("orignalMessageId"), message.message_id(), "{advisory:?}");
    assert_eq!(advisory.header("orignalDestination"), Some("queue://dlqd.orders"));
    assert_eq!(advisory.header("ferromq.advisory.deadLetterQueue"), Some("queue://ActiveMQ.DLQ"));
    assert!(
        advisory.header("dlqDeliveryFailureCause").is_some_and(|c| c.contains("redelivery")),
        "{advisory:?}"
    );
    let mut dlq = client.subscribe("/queue/ActiveMQ.DLQ", AckMode::Auto, &[]).await?;
    assert_eq!(&recv(&mut dlq).await?.body()[..], b"poison");
    broker.shutdown().await;
    Ok(())
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn delivered_consumed_and_no_consumer_advisories_follow_their_policy_flags(
) -> anyhow::Result<()> {
    let policies = policies(
        r#"
        [[policies]]
        queue = "adv.on"
        advisory_for_delivery = true
        advisory_for_consumed = true
        send_advisory_if_no_consumers = true
        [[policies]]
        topic = "adv.on"
        send_advisory_if_no_consumers = true
        "#,
    )?;
    let broker = start_broker(|config| config.policies = policies).await?;
    let monitor = connect(&broker).await?;
    let advisory = |kind: &str, name: &str| format!("/topic/ActiveMQ.Advisory.{kind}.{name}");
    let mut delivered = monitor
        .subscribe(&advisory("MessageDelivered", "Queue.adv.on"), AckMode::Auto, &[])
        .await?;
    let mut consumed =
        monitor.subscribe(&advisory("MessageConsumed", "Queue.adv.on"), AckMode::Auto, &[]).await?;
    let mut no_consumer =
        monitor.subscribe(&advisory("NoConsumer", "Queue.adv.on"), AckMode::Auto, &[]).await?;
    let mut no_subscriber =
        monitor.subscribe(&advisory("NoConsumer", "Topic.adv.on"), AckMode::Auto, &[]).await?;
    let mut off = Vec::new();
    for (kind, name) in [
        ("MessageDelivered", "Queue.adv.off"),
        ("MessageConsumed", "Queue.adv.off"),
        ("NoConsumer", "Queue.adv.off"),
        ("NoConsumer", "Topic.adv.off"),
    ] {
        off.push(monitor.subscribe(&advisory(kind, name), AckMode::Auto, &[]).await?);
    }

    let client = connect(&broker).await?;
    for name in ["adv.on", "adv.off"] {
        // Non-persistent (STOMP's default): ActiveMQ announces only those.
        client.send_with_receipt(&format!("/queue/{name}"), "to nobody", &[]).await?;
        client.send_with_receipt(&format!("/topic/{name}"), "to no one", &[]).await?;
    }
    let unconsumed = recv(&mut no_consumer).await?;
    assert_eq!(&unconsumed.body()[..], b"to nobody", "the message itself");
    assert_eq!(unconsumed.header("orignalDestination"), Some("queue://adv.on"));
    let unsubscribed = recv(&mut no_subscriber).await?;
    assert_eq!(&unsubscribed.body()[..], b"to no one");

    for name in ["adv.on", "adv.off"] {
        let mut queue =
            client.subscribe(&format!("/queue/{name}"), AckMode::ClientIndividual, &[]).await?;
        let message = recv(&mut queue).await?;
        client.ack(&message).await?;
        if name == "adv.on" {
            let advisory = recv(&mut delivered).await?;
            assert_eq!(advisory.header("orignalMessageId"), message.message_id());
            assert_eq!(advisory.header("ferromq.advisory.messageId"), message.message_id());
            assert!(advisory.header("consumerId").is_some(), "{advisory:?}");
            let advisory = recv(&mut consumed).await?;
            assert_eq!(advisory.header("orignalMessageId"), message.message_id());
        }
    }
    for subscription in &mut off {
        assert_nothing_arrives(subscription).await?;
    }
    // A persistent message nobody consumes is not announced (as in ActiveMQ).
    client.send_with_receipt("/topic/adv.on", "kept quiet", &[PERSISTENT]).await?;
    assert_nothing_arrives(&mut no_subscriber).await?;
    broker.shutdown().await;
    Ok(())
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn full_and_fast_producer_advisories_when_the_memory_gate_closes_if_switched_on(
) -> anyhow::Result<()> {
    let policies = policies(
        r#"
        [[policies]]
        queue = "gate.on"
        memory_limit = "64 kb"
        advisory_when_full = true
        advisory_for_fast_producers = true
        [[policies]]
        queue = "gate.off"
        memory_limit = "64 kb"
        "#,
    )?;
    let broker = start_broker(|config| config.policies = policies).await?;
    let monitor = connect(&broker).await?;
    let mut full = monitor
        .subscribe("/topic/ActiveMQ.Advisory.FULL.Queue.gate.on", AckMode::Auto, &[])
        .await?;
    let mut fast = monitor
        .subscribe("/topic/ActiveMQ.Advisory.FastProducer.Queue.gate.on", AckMode::Auto, &[])
        .await?;
    let mut off = vec![
        monitor
            .subscribe("/topic/ActiveMQ.Advisory.FULL.Queue.gate.off", AckMode::Auto, &[])
            .await?,
        monitor
            .subscribe("/topic/ActiveMQ.Advisory.FastProducer.Queue.gate.off", AckMode::Auto, &[])
            .await?,
    ];
    // Non-persistent messages cannot page out: about 40 of 1 KiB close a 64 KiB gate, and
    // the next send waits (its receipt does not come). One connection per queue, since a
    // connection's held sends wait in one line.
    let mut producers = Vec::new();
    for name in ["gate.on", "gate.off"] {
        let producer = connect(&broker).await?;
        let destination = format!("/queue/{name}");
        let mut blocked = None;
        for index in 0..200 {
            let body = format!("{index:04}{}", "x".repeat(1020));
            let send = producer.send_with_receipt(&destination, body, &[]);
            if tokio::time::timeout(QUIET, send).await.is_err() {
                blocked = Some(index);
                break;
            }
        }
        ensure!(blocked.is_some_and(|index| index < 100), "{name}: blocked at {blocked:?}");
        producers.push(producer);
    }
    let advisory = recv(&mut full).await?;
    assert_eq!(advisory.header("ferromq.advisory.destination"), Some("queue://gate.on"));
    assert!(advisory.header("usageName").is_some(), "{advisory:?}");
    let advisory = recv(&mut fast).await?;
    assert_eq!(advisory.header("ferromq.advisory.destination"), Some("queue://gate.on"));
    for subscription in &mut off {
        assert_nothing_arrives(subscription).await?;
    }
    broker.shutdown().await;
    Ok(())
}

/// A broker with an AMQP connector and `[[policies]]` `toml`.
async fn amqp_broker(toml: &str) -> anyhow::Result<broker::BrokerHandle> {
    let policies = policies(toml)?;
    start_broker(|config| {
        config.transport.connectors = vec!["amqp://127.0.0.1:0".parse().expect("a valid URI")];
        config.policies = policies;
    })
    .await
}

/// An AMQP receiver that never settles its one message is aborted as a slow consumer: its
/// link is closed (not just detached) with `amqp:internal-error` and the reason, and every
/// message, the unsettled one too, then goes to the next consumer (the Proton check waits for
/// the detach, then receives them all).
#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn an_aborted_slow_amqp_consumer_has_its_link_closed_and_its_messages_kept(
) -> anyhow::Result<()> {
    let broker = amqp_broker(
        r#"
        [[policies]]
        queue = "slow.amqp.>"
        slow_consumer_strategy = { max_slow_duration_ms = 500, check_period_ms = 200 }
        "#,
    )
    .await?;
    let addr = broker.amqp_addr().context("no AMQP connector")?;
    let args = ["--address", "queue://slow.amqp.link", "--count", "5"];
    let result = crate::amqp::proton(addr, "slow_abort_link", &args).await;
    broker.shutdown().await;
    result
}

/// With `abort_connection`, the slow AMQP consumer's whole connection is closed, with
/// `amqp:internal-error` and the reason; its messages are kept as well.
#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn an_aborted_slow_amqp_consumer_loses_its_connection_with_abort_connection(
) -> anyhow::Result<()> {
    let broker = amqp_broker(
        r#"
        [[policies]]
        queue = "slow.amqp.>"
        slow_consumer_strategy = { max_slow_duration_ms = 500, check_period_ms = 200, abort_connection = true }
        "#,
    )
    .await?;
    let addr = broker.amqp_addr().context("no AMQP connector")?;
    let args = ["--address", "queue://slow.amqp.connection", "--count", "5"];
    let result = crate::amqp::proton(addr, "slow_abort_connection", &args).await;
    broker.shutdown().await;
    result
}
