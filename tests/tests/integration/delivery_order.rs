//! Which consumer gets which message, and in what order, over STOMP: message priority,
//! exclusive consumers, consumer priority, message groups and queue browsers.

use client::AckMode;
use tests::{bodies, recv, recv_n};

/// Messages of mixed priorities sent with no consumer come out highest first, in send order
/// within a priority.
#[tokio::test]
async fn messages_come_out_highest_priority_first() -> anyhow::Result<()> {
    let broker = tests::start_broker(|_| {}).await?;
    let client = tests::connect(&broker).await?;
    let priorities = [4u8, 0, 9, 5, 1, 9, 7, 4, 0, 3];
    for (n, priority) in priorities.iter().enumerate() {
        let priority = priority.to_string();
        client
            .send_with_receipt("/queue/prio", format!("p{n}"), &[("priority", &priority)])
            .await?;
    }
    let mut subscription = client.subscribe("/queue/prio", AckMode::Auto, &[]).await?;
    let received = recv_n(&mut subscription, priorities.len()).await?;
    assert_eq!(bodies(&received), ["p2", "p5", "p6", "p3", "p0", "p7", "p9", "p4", "p1", "p8"]);
    broker.shutdown().await;
    Ok(())
}

/// While an exclusive consumer is subscribed it gets everything; then another takes over.
#[tokio::test]
async fn an_exclusive_consumer_gets_everything_until_it_leaves() -> anyhow::Result<()> {
    let broker = tests::start_broker(|_| {}).await?;
    let client = tests::connect(&broker).await?;
    let exclusive = [("activemq.exclusive", "true")];
    let mut first = client.subscribe("/queue/excl", AckMode::Auto, &exclusive).await?;
    let mut other = client.subscribe("/queue/excl", AckMode::Auto, &[]).await?;
    for n in 0..6 {
        client.send_with_receipt("/queue/excl", format!("m{n}"), &[]).await?;
    }
    assert_eq!(bodies(&recv_n(&mut first, 6).await?), ["m0", "m1", "m2", "m3", "m4", "m5"]);
    tests::assert_nothing_arrives(&mut other).await?;
    first.unsubscribe().await?;
    client.send_with_receipt("/queue/excl", "after", &[]).await?;
    assert_eq!(bodies(&[recv(&mut other).await?]), ["after"]);
    broker.shutdown().await;
    Ok(())
}

/// The higher-priority consumer fills its prefetch first; the overflow goes to the lower one.
#[tokio::test]
async fn the_highest_priority_consumer_is_served_first() -> anyhow::Result<()> {
    let broker = tests::start_broker(|_| {}).await?;
    let client = tests::connect(&broker).await?;
    let low = [("activemq.priority", "1"), ("activemq.prefetchSize", "3")];
    let high = [("activemq.priority", "9"), ("activemq.prefetchSize", "3")];
    let mut low = client.subscribe("/queue/cprio", AckMode::ClientIndividual, &low).await?;
    let mut high = client.subscribe("/queue/cprio", AckMode::ClientIndividual, &high).await?;
    for n in 0..5 {
        client.send_with_receipt("/queue/cprio", format!("m{n}"), &[]).await?;
    }
    assert_eq!(bodies(&recv_n(&mut high, 3).await?), ["m0", "m1", "m2"]);
    assert_eq!(bodies(&recv_n(&mut low, 2).await?), ["m3", "m4"]);
    let refused = client
        .subscribe("/queue/cprio", AckMode::Auto, &[("activemq.priority", "high")])
        .await
        .expect_err("a non-numeric consumer priority is refused");
    assert!(refused.to_string().contains("activemq.priority"), "{refused}");
    broker.shutdown().await;
    Ok(())
}

/// Each JMSXGroupID sticks to one consumer, in order; when that consumer leaves, the group
/// moves to another.
#[tokio::test]
async fn a_message_group_sticks_to_one_consumer_until_it_leaves() -> anyhow::Result<()> {
    let broker = tests::start_broker(|_| {}).await?;
    let client = tests::connect(&broker).await?;
    let mut a = client.subscribe("/queue/groups", AckMode::ClientIndividual, &[]).await?;
    let mut b = client.subscribe("/queue/groups", AckMode::ClientIndividual, &[]).await?;
    // All of red first: without groups, round-robin would split it between the consumers.
    for group in ["red", "blue"] {
        for n in 0..4 {
            client
                .send_with_receipt(
                    "/queue/groups",
                    format!("{group}{n}"),
                    &[("JMSXGroupID", group)],
                )
                .await?;
        }
    }
    // Red goes to one consumer and blue to the other; each keeps its group.
    let received_a = recv_n(&mut a, 4).await?;
    let received_b = recv_n(&mut b, 4).await?;
    for message in received_a.iter().chain(&received_b) {
        client.ack(message).await?;
    }
    let (to_a, to_b) = (bodies(&received_a), bodies(&received_b));
    let (red, blue) = if to_a[0].starts_with("red") { (&to_a, &to_b) } else { (&to_b, &to_a) };
    assert_eq!(red, &["red0", "red1", "red2", "red3"]);
    assert_eq!(blue, &["blue0", "blue1", "blue2", "blue3"]);
    let red_on_a = to_a[0].starts_with("red");
    let (owner, mut survivor) = if red_on_a { (a, b) } else { (b, a) };
    owner.unsubscribe().await?;
    client.send_with_receipt("/queue/groups", "red4", &[("JMSXGroupID", "red")]).await?;
    assert_eq!(bodies(&[recv(&mut survivor).await?]), ["red4"]);
    broker.shutdown().await;
    Ok(())
}

/// A `browser:true` subscription gets the queue's messages, then a MESSAGE with `browser:end`,
/// and consumes nothing.
#[tokio::test]
async fn a_browser_sees_the_queue_and_consumes_nothing() -> anyhow::Result<()> {
    let broker = tests::start_broker(|_| {}).await?;
    let client = tests::connect(&broker).await?;
    for n in 0..5 {
        client
            .send_with_receipt("/queue/browse", format!("m{n}"), &[("n", &n.to_string())])
            .await?;
    }
    let mut browser =
        client.subscribe("/queue/browse", AckMode::Auto, &[("browser", "true")]).await?;
    let seen = recv_n(&mut browser, 6).await?;
    assert_eq!(bodies(&seen[..5]), ["m0", "m1", "m2", "m3", "m4"]);
    assert_eq!(seen[5].header("browser"), Some("end"));
    browser.unsubscribe().await?;
    let selective = [("browser", "true"), ("selector", "n >= 3")];
    let mut browser = client.subscribe("/queue/browse", AckMode::Auto, &selective).await?;
    let seen = recv_n(&mut browser, 3).await?;
    assert_eq!(bodies(&seen[..2]), ["m3", "m4"]);
    assert_eq!(seen[2].header("browser"), Some("end"));
    let mut consumer = client.subscribe("/queue/browse", AckMode::Auto, &[]).await?;
    assert_eq!(bodies(&recv_n(&mut consumer, 5).await?), ["m0", "m1", "m2", "m3", "m4"]);
    broker.shutdown().await;
    Ok(())
}
