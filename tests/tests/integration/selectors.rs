//! JMS message selectors over STOMP (the `selector` SUBSCRIBE header, as in ActiveMQ): queue
//! consumers get only what they match and leave the rest for others, topic and durable
//! subscriptions only receive (and store) matching messages, header fields are selectable,
//! a consumer finds matches deep in a queue, and an invalid selector is an ERROR saying why.

use anyhow::{ensure, Context as _};
use client::AckMode;
use tests::{
    assert_nothing_arrives, bodies, connect, connect_as, durable_key, recv, recv_n, server_error,
    start_broker, stored_count_of, wait_durable_inactive, wait_until, PERSISTENT,
    SUBSCRIPTION_NAME,
};

fn selector(text: &str) -> [(&str, &str); 1] {
    [("selector", text)]
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn queue_consumers_get_only_what_they_match_and_the_rest_waits() -> anyhow::Result<()> {
    let broker = start_broker(|_| {}).await?;
    let client = connect(&broker).await?;
    let mut red =
        client.subscribe("/queue/paint", AckMode::Auto, &selector("color = 'red'")).await?;
    let mut blue =
        client.subscribe("/queue/paint", AckMode::Auto, &selector("color = 'blue'")).await?;
    for (body, color) in [("r1", "red"), ("g1", "green"), ("b1", "blue"), ("r2", "red")] {
        client.send_with_receipt("/queue/paint", body, &[("color", color)]).await?;
    }
    client.send_with_receipt("/queue/paint", "plain", &[]).await?;
    assert_eq!(bodies(&recv_n(&mut red, 2).await?), ["r1", "r2"]);
    assert_eq!(bodies(&recv_n(&mut blue, 1).await?), ["b1"]);
    assert_nothing_arrives(&mut red).await?;
    assert_nothing_arrives(&mut blue).await?;

    // What nobody matched waited, in order, for a consumer that does.
    let stats = broker.queue_stats("paint").await.context("the queue exists")?;
    assert_eq!(stats.ready, 2);
    let mut everything = client.subscribe("/queue/paint", AckMode::Auto, &[]).await?;
    assert_eq!(bodies(&recv_n(&mut everything, 2).await?), ["g1", "plain"]);
    broker.shutdown().await;
    Ok(())
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn a_returned_message_reaches_a_consumer_whose_scan_had_passed_it() -> anyhow::Result<()> {
    let broker = start_broker(|_| {}).await?;
    let client = connect(&broker).await?;
    let one_at_a_time = [("activemq.prefetchSize", "1")];
    let mut first =
        client.subscribe("/queue/jobs", AckMode::ClientIndividual, &one_at_a_time).await?;
    client.send_with_receipt("/queue/jobs", "urgent", &[("level", "9")]).await?;
    assert_eq!(bodies(&[recv(&mut first).await?]), ["urgent"]);
    // The selective consumer looks at `routine` (the first consumer has no credit left) and
    // passes it; `urgent` comes back before it, and must still be found.
    let mut urgent =
        client.subscribe("/queue/jobs", AckMode::ClientIndividual, &selector("level >= 9")).await?;
    client.send_with_receipt("/queue/jobs", "routine", &[("level", "1")]).await?;
    assert_nothing_arrives(&mut urgent).await?;
    first.unsubscribe().await?;
    let again = recv(&mut urgent).await?;
    assert_eq!(bodies(std::slice::from_ref(&again)), ["urgent"]);
    ensure!(again.redelivered(), "the returned message is marked redelivered");
    let stats = broker.queue_stats("jobs").await.context("the queue exists")?;
    assert_eq!(stats.ready, 1, "routine still waits");
    broker.shutdown().await;
    Ok(())
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn a_selector_finds_matches_behind_ten_thousand_that_do_not_match() -> anyhow::Result<()> {
    let broker = start_broker(|_| {}).await?;
    let producer = connect(&broker).await?;
    let consumer = connect(&broker).await?;
    // A consumer that matches nothing is attached while the queue fills: each send tests only
    // the new message, so 10,000 sends stay linear.
    let mut none =
        consumer.subscribe("/queue/deep", AckMode::Auto, &selector("kind = 'never'")).await?;
    for index in 0..10_000 {
        producer.send("/queue/deep", format!("filler-{index}"), &[("kind", "filler")]).await?;
    }
    for index in 0..3 {
        producer.send("/queue/deep", format!("wanted-{index}"), &[("kind", "wanted")]).await?;
    }
    producer.send_with_receipt("/queue/deep", "last filler", &[("kind", "filler")]).await?;
    let mut wanted = consumer
        .subscribe(
            "/queue/deep",
            AckMode::ClientIndividual,
            &[("selector", "kind = 'wanted'"), ("activemq.prefetchSize", "1")],
        )
        .await?;
    for index in 0..3 {
        let message = recv(&mut wanted).await?;
        assert_eq!(bodies(std::slice::from_ref(&message)), [format!("wanted-{index}")]);
        consumer.ack(&message).await?;
    }
    assert_nothing_arrives(&mut wanted).await?;
    assert_nothing_arrives(&mut none).await?;
    let stats = broker.queue_stats("deep").await.context("the queue exists")?;
    assert_eq!(stats.ready, 10_001);
    broker.shutdown().await;
    Ok(())
}

/// The same far back, with a memory limit that keeps only a couple of hundred messages in
/// memory: the matches are in the store only, beyond the queue's window, and the selective
/// consumer's scan pages through the stored part to find them. The rest then drains in order.
#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn a_selector_finds_matches_in_the_store_beyond_the_memory_window() -> anyhow::Result<()> {
    let broker = start_broker(|config| config.destinations.memory_limit = 256 << 10).await?;
    let producer = connect(&broker).await?;
    let consumer = connect(&broker).await?;
    let body = "f".repeat(1024);
    for index in 0..10_000 {
        let headers = [PERSISTENT, ("kind", "filler"), ("index", &index.to_string())];
        producer.send("/queue/paged", body.clone(), &headers).await?;
    }
    for index in 0..3 {
        producer
            .send("/queue/paged", format!("wanted-{index}"), &[PERSISTENT, ("kind", "wanted")])
            .await?;
    }
    producer
        .send_with_receipt("/queue/paged", "last filler", &[PERSISTENT, ("kind", "filler")])
        .await?;
    let stats = broker.queue_stats("paged").await.context("the queue exists")?;
    assert_eq!(stats.ready, 10_004);
    ensure!(stats.memory_bytes < 1 << 20, "{} bytes in memory", stats.memory_bytes);
    let mut wanted = consumer
        .subscribe(
            "/queue/paged",
            AckMode::ClientIndividual,
            &[("selector", "kind = 'wanted'"), ("activemq.prefetchSize", "1")],
        )
        .await?;
    for index in 0..3 {
        let message = recv(&mut wanted).await?;
        assert_eq!(bodies(std::slice::from_ref(&message)), [format!("wanted-{index}")]);
        consumer.ack(&message).await?;
    }
    assert_nothing_arrives(&mut wanted).await?;
    let mut rest = consumer.subscribe("/queue/paged", AckMode::Auto, &[]).await?;
    let fillers = recv_n(&mut rest, 10_001).await?;
    for (index, message) in fillers.iter().take(10_000).enumerate() {
        assert_eq!(message.header("index"), Some(index.to_string().as_str()), "in order");
    }
    assert_eq!(bodies(&fillers[10_000..]), ["last filler"]);
    broker.shutdown().await;
    Ok(())
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn topic_subscribers_receive_only_matching_messages() -> anyhow::Result<()> {
    let broker = start_broker(|_| {}).await?;
    let client = connect(&broker).await?;
    let mut cheap =
        client.subscribe("/topic/prices", AckMode::Auto, &selector("price < 10")).await?;
    let mut dear =
        client.subscribe("/topic/prices", AckMode::Auto, &selector("price >= 10")).await?;
    let mut wildcard =
        client.subscribe("/topic/prices.>", AckMode::Auto, &selector("price = 5")).await?;
    let mut all = client.subscribe("/topic/prices", AckMode::Auto, &[]).await?;
    for price in ["5", "50", "7.5"] {
        client.send_with_receipt("/topic/prices", format!("p{price}"), &[("price", price)]).await?;
    }
    client.send_with_receipt("/topic/prices.eu", "eu5", &[("price", "5")]).await?;
    client.send_with_receipt("/topic/prices.eu", "eu6", &[("price", "6")]).await?;
    assert_eq!(bodies(&recv_n(&mut cheap, 2).await?), ["p5", "p7.5"]);
    assert_eq!(bodies(&recv_n(&mut dear, 1).await?), ["p50"]);
    // `prices.>` covers `prices` itself too, as in ActiveMQ.
    assert_eq!(bodies(&recv_n(&mut wildcard, 2).await?), ["p5", "eu5"]);
    assert_eq!(bodies(&recv_n(&mut all, 3).await?), ["p5", "p50", "p7.5"]);
    for subscription in [&mut cheap, &mut dear, &mut wildcard, &mut all] {
        assert_nothing_arrives(subscription).await?;
    }
    broker.shutdown().await;
    Ok(())
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn a_durable_subscription_stores_only_what_its_selector_matches() -> anyhow::Result<()> {
    let broker = start_broker(|_| {}).await?;
    let subscriber = connect_as(&broker, "auditor").await?;
    let headers = [(SUBSCRIPTION_NAME, "big"), ("selector", "amount > 100")];
    subscriber.subscribe("/topic/payments", AckMode::Auto, &headers).await?;
    subscriber.disconnect().await?;
    wait_durable_inactive(&broker, "auditor", "big").await?;

    let producer = connect(&broker).await?;
    for amount in ["50", "150", "99", "1000"] {
        producer
            .send_with_receipt(
                "/topic/payments",
                format!("pay-{amount}"),
                &[PERSISTENT, ("amount", amount)],
            )
            .await?;
    }
    let key = durable_key("payments", "auditor", "big");
    assert_eq!(stored_count_of(&broker, &key)?, 2, "only the matching messages are stored");

    let subscriber = connect_as(&broker, "auditor").await?;
    let mut sub = subscriber.subscribe("/topic/payments", AckMode::Auto, &headers).await?;
    assert_eq!(bodies(&recv_n(&mut sub, 2).await?), ["pay-150", "pay-1000"]);
    assert_nothing_arrives(&mut sub).await?;
    sub.unsubscribe().await?;
    producer
        .send_with_receipt("/topic/payments", "pay-500", &[PERSISTENT, ("amount", "500")])
        .await?;
    wait_until("the durable subscription holds pay-500", || async {
        broker.durable_subscription_stats("auditor", "big").await.is_some_and(|s| s.ready == 1)
    })
    .await?;

    // Another selector under the same name replaces the subscription, as in ActiveMQ: what
    // the old one held is gone.
    let changed = [(SUBSCRIPTION_NAME, "big"), ("selector", "amount > 1000")];
    let mut sub = subscriber.subscribe("/topic/payments", AckMode::Auto, &changed).await?;
    assert_nothing_arrives(&mut sub).await?;
    producer
        .send_with_receipt("/topic/payments", "pay-5000", &[PERSISTENT, ("amount", "5000")])
        .await?;
    assert_eq!(bodies(&[recv(&mut sub).await?]), ["pay-5000"]);
    broker.shutdown().await;
    Ok(())
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn virtual_topic_consumer_queues_apply_their_consumers_selectors() -> anyhow::Result<()> {
    let broker = start_broker(|_| {}).await?;
    let client = connect(&broker).await?;
    let queue = "/queue/Consumer.A.VirtualTopic.Events";
    let mut errors = client.subscribe(queue, AckMode::Auto, &selector("level = 'error'")).await?;
    for level in ["info", "error", "debug", "error"] {
        client.send_with_receipt("/topic/VirtualTopic.Events", level, &[("level", level)]).await?;
    }
    assert_eq!(bodies(&recv_n(&mut errors, 2).await?), ["error", "error"]);
    assert_nothing_arrives(&mut errors).await?;
    let mut rest = client.subscribe(queue, AckMode::Auto, &[]).await?;
    assert_eq!(bodies(&recv_n(&mut rest, 2).await?), ["info", "debug"]);
    broker.shutdown().await;
    Ok(())
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn selectors_see_the_jms_headers() -> anyhow::Result<()> {
    let broker = start_broker(|_| {}).await?;
    let client = connect(&broker).await?;
    let mut urgent =
        client.subscribe("/queue/h1", AckMode::Auto, &selector("JMSPriority > 6")).await?;
    let mut cars =
        client.subscribe("/queue/h2", AckMode::Auto, &selector("JMSType = 'car'")).await?;
    let mut replies = client
        .subscribe("/queue/h3", AckMode::Auto, &selector("JMSCorrelationID LIKE 'req-%'"))
        .await?;
    let mut persistent = client
        .subscribe("/queue/h4", AckMode::Auto, &selector("JMSDeliveryMode = 'PERSISTENT'"))
        .await?;
    client.send_with_receipt("/queue/h1", "low", &[("priority", "2")]).await?;
    client.send_with_receipt("/queue/h1", "high", &[("priority", "8")]).await?;
    client.send_with_receipt("/queue/h2", "bike", &[("type", "bike")]).await?;
    client.send_with_receipt("/queue/h2", "car", &[("type", "car")]).await?;
    client.send_with_receipt("/queue/h3", "other", &[("correlation-id", "x-1")]).await?;
    client.send_with_receipt("/queue/h3", "reply", &[("correlation-id", "req-7")]).await?;
    client.send_with_receipt("/queue/h4", "transient", &[]).await?;
    client.send_with_receipt("/queue/h4", "kept", &[PERSISTENT]).await?;
    assert_eq!(bodies(&[recv(&mut urgent).await?]), ["high"]);
    assert_eq!(bodies(&[recv(&mut cars).await?]), ["car"]);
    assert_eq!(bodies(&[recv(&mut replies).await?]), ["reply"]);
    assert_eq!(bodies(&[recv(&mut persistent).await?]), ["kept"]);
    for subscription in [&mut urgent, &mut cars, &mut replies, &mut persistent] {
        assert_nothing_arrives(subscription).await?;
    }
    broker.shutdown().await;
    Ok(())
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn stomp_selectors_compare_text_properties_with_numbers_as_activemq_does(
) -> anyhow::Result<()> {
    // STOMP headers are strings; ActiveMQ's STOMP adapter converts them when a selector
    // compares them with a number, and so does ferromq.
    let broker = start_broker(|_| {}).await?;
    let client = connect(&broker).await?;
    let mut adults = client
        .subscribe("/queue/people", AckMode::Auto, &selector("age >= 18 AND age + 0 < 65.5"))
        .await?;
    for age in ["7", "18", "abc", "64", "70"] {
        client.send_with_receipt("/queue/people", format!("age-{age}"), &[("age", age)]).await?;
    }
    assert_eq!(bodies(&recv_n(&mut adults, 2).await?), ["age-18", "age-64"]);
    assert_nothing_arrives(&mut adults).await?;
    broker.shutdown().await;
    Ok(())
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn an_invalid_selector_is_refused_with_an_error_saying_why() -> anyhow::Result<()> {
    let broker = start_broker(|_| {}).await?;
    let client = connect(&broker).await?;
    let message =
        server_error(client.subscribe("/queue/q", AckMode::Auto, &selector("color = ")).await)?;
    ensure!(
        message.contains("invalid selector at column 9")
            && message.contains("expected an identifier, a literal or `(`"),
        "unexpected ERROR message: {message}"
    );
    let client = connect(&broker).await?;
    let message = server_error(
        client.subscribe("/topic/t", AckMode::Auto, &selector("name LIKE 'a' ESCAPE 'xy'")).await,
    )?;
    ensure!(message.contains("exactly one character"), "unexpected ERROR message: {message}");
    // A blank selector is no selector.
    let client = connect(&broker).await?;
    let mut sub = client.subscribe("/queue/q", AckMode::Auto, &selector("  ")).await?;
    client.send_with_receipt("/queue/q", "hello", &[]).await?;
    assert_eq!(bodies(&[recv(&mut sub).await?]), ["hello"]);
    broker.shutdown().await;
    Ok(())
}

/// The selectors of a topic's subscriptions are evaluated without the routing lock: while a
/// send to a topic with 1,000 selector subscriptions is routed (each selector slow, a LIKE
/// that scans a long property), sends to another destination get their receipts at once.
/// The same for a transacted send, whose topic subscribers are routed again at its commit.
#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn slow_topic_selectors_do_not_hold_up_sends_elsewhere() -> anyhow::Result<()> {
    use std::time::{Duration, Instant};

    use protocol::stomp::{Command, Frame};
    use tests::{stomp_addr, RawConnection, RawEvent};

    let broker = start_broker(|_| {}).await?;
    let subscriber = connect(&broker).await?;
    // Never matches (no `b` in the text), after comparing about 150 characters at each of the
    // text's 1,000 positions.
    let slow = format!("text LIKE '%{}b%'", "a".repeat(300));
    let mut subscriptions = Vec::new();
    for _ in 0..999 {
        subscriptions
            .push(subscriber.subscribe("/topic/selective", AckMode::Auto, &selector(&slow)).await?);
    }
    let mut matching = subscriber
        .subscribe("/topic/selective", AckMode::Auto, &selector("text LIKE 'a%'"))
        .await?;

    let addr = stomp_addr(&broker)?;
    let (mut topic_producer, _) = RawConnection::connect(addr, &[]).await?;
    let (mut other, _) = RawConnection::connect(addr, &[]).await?;
    let send_elsewhere = |receipt: &str| {
        Frame::new(Command::Send)
            .header("destination", "/queue/elsewhere")
            .header("receipt", receipt)
            .with_body("m")
    };
    let is_receipt = |frame: &Frame, receipt: &str| {
        frame.command == Command::Receipt && frame.get("receipt-id") == Some(receipt)
    };
    other.write_frame(&send_elsewhere("created")).await?;
    ensure!(is_receipt(&other.read_frame().await?, "created"));

    for transacted in [false, true] {
        let topic_send = Frame::new(Command::Send)
            .header("destination", "/topic/selective")
            .header("text", "a".repeat(1000))
            .with_body("selected");
        let started = if transacted {
            topic_producer
                .write_frame(&Frame::new(Command::Begin).header("transaction", "t"))
                .await?;
            topic_producer.write_frame(&topic_send.header("transaction", "t")).await?;
            // The SEND's own routing is over once a frame behind it is answered.
            let probe = Frame::new(Command::Send)
                .header("destination", "/queue/probe")
                .header("transaction", "t")
                .header("receipt", "sent")
                .with_body("p");
            topic_producer.write_frame(&probe).await?;
            let event = topic_producer.next_event(Duration::from_secs(60)).await?;
            ensure!(
                matches!(&event, RawEvent::Frame(frame) if is_receipt(frame, "sent")),
                "expected the transacted send's receipt, got {event:?}"
            );
            let started = Instant::now();
            let commit = Frame::new(Command::Commit).header("transaction", "t");
            topic_producer.write_frame(&commit.header("receipt", "topic")).await?;
            started
        } else {
            let started = Instant::now();
            topic_producer.write_frame(&topic_send.header("receipt", "topic")).await?;
            started
        };
        let topic_confirmed = async {
            // Slow on purpose: as long as the selectors take on a busy machine.
            let event = topic_producer.next_event(Duration::from_secs(60)).await?;
            ensure!(
                matches!(&event, RawEvent::Frame(frame) if is_receipt(frame, "topic")),
                "expected the topic send's receipt, got {event:?}"
            );
            anyhow::Ok(started.elapsed())
        };
        // Sends elsewhere, one after another, for as long as the topic send is being routed.
        // What counts is the longest wait for the next receipt, whatever held it up: the
        // broker, or this test's own task (its runtime is the broker's).
        let (mut slowest, mut sent, mut last) = (Duration::ZERO, 0, started);
        let sends_elsewhere = async {
            loop {
                let receipt = format!("elsewhere-{transacted}-{sent}");
                other.write_frame(&send_elsewhere(&receipt)).await?;
                let mut frame = other.read_frame().await?;
                // The first phase's last send may be answered only now.
                let stale = |frame: &Frame| {
                    frame.get("receipt-id").is_some_and(|id| id.starts_with("elsewhere-false-"))
                };
                while transacted && stale(&frame) {
                    frame = other.read_frame().await?;
                }
                ensure!(is_receipt(&frame, &receipt), "expected {receipt}, got {frame:?}");
                slowest = slowest.max(last.elapsed());
                last = Instant::now();
                sent += 1;
            }
        };
        let topic_took = tokio::select! {
            took = topic_confirmed => took?,
            failed = sends_elsewhere => return failed,
        };
        let slowest = slowest.max(last.elapsed());
        ensure!(
            topic_took >= Duration::from_millis(400) && sent >= 2,
            "the selectors took {topic_took:?} ({sent} sends elsewhere meanwhile): too fast for \
             this check to mean anything"
        );
        ensure!(
            slowest < topic_took / 4,
            "sends elsewhere stalled for {slowest:?} while the topic send took {topic_took:?} \
             (transacted: {transacted}): the selectors ran under the routing lock"
        );
        let message = recv(&mut matching).await?;
        ensure!(bodies(&[message]) == ["selected"]);
        assert_nothing_arrives(&mut subscriptions[0]).await?;
    }
    broker.shutdown().await;
    Ok(())
}
