//! Subscription recovery policies (`[[policies]] subscription_recovery`): what a retroactive
//! subscriber (STOMP `activemq.retroactive:true`, OpenWire's retroactive ConsumerInfo) gets
//! of a topic's past messages under each policy. The default (the last 64 KiB) is pinned in
//! `extensions.rs`.

use std::time::Duration;

use anyhow::Context as _;
use broker::BrokerHandle;
use client::openwire::{
    Destination, OpenWireClient, OpenWireOptions, SessionMode, SubscribeOptions,
};
use client::AckMode;
use tests::{assert_nothing_arrives, bodies, connect, recv_n, start_broker, ARRIVES};

const RETROACTIVE: (&str, &str) = ("activemq.retroactive", "true");

/// A broker whose topics under `retro.` follow `recovery` (TOML), with STOMP and OpenWire.
async fn start_with(recovery: &str) -> anyhow::Result<BrokerHandle> {
    let policies = conf::Config::parse(
        &format!("[[policies]]\ntopic = \"retro.>\"\nsubscription_recovery = {recovery}\n"),
        "test.toml",
    )?
    .policies;
    start_broker(|config| {
        config.policies = policies;
        config.transport.connectors = vec![
            "stomp://127.0.0.1:0".parse().expect("uri"),
            "tcp://127.0.0.1:0".parse().expect("uri"),
        ];
    })
    .await
}

/// Publishes `bodies` to `topic` in order, each confirmed by a receipt.
async fn publish(broker: &BrokerHandle, topic: &str, bodies: &[&str]) -> anyhow::Result<()> {
    let producer = connect(broker).await?;
    for body in bodies {
        producer.send_with_receipt(topic, body.to_string(), &[]).await?;
    }
    Ok(())
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn fixed_count_replays_the_last_n_messages() -> anyhow::Result<()> {
    let broker = start_with("{ kind = \"fixed_count\", maximum_size = 2 }").await?;
    publish(&broker, "/topic/retro.count", &["m1", "m2", "m3", "m4"]).await?;
    // Another topic's messages are counted in its own buffer.
    publish(&broker, "/topic/retro.other", &["o1"]).await?;

    let consumer = connect(&broker).await?;
    let mut retro = consumer.subscribe("/topic/retro.count", AckMode::Auto, &[RETROACTIVE]).await?;
    let mut plain = consumer.subscribe("/topic/retro.count", AckMode::Auto, &[]).await?;
    publish(&broker, "/topic/retro.count", &["live"]).await?;
    assert_eq!(bodies(&recv_n(&mut retro, 3).await?), ["m3", "m4", "live"]);
    assert_eq!(bodies(&recv_n(&mut plain, 1).await?), ["live"]);
    assert_nothing_arrives(&mut retro).await?;
    broker.shutdown().await;
    Ok(())
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn last_image_replays_only_the_last_message_over_stomp_and_openwire() -> anyhow::Result<()> {
    let broker = start_with("{ kind = \"last_image\" }").await?;
    publish(&broker, "/topic/retro.price", &["10.00", "10.50", "11.25"]).await?;

    let consumer = connect(&broker).await?;
    let mut retro = consumer.subscribe("/topic/retro.price", AckMode::Auto, &[RETROACTIVE]).await?;
    assert_eq!(bodies(&recv_n(&mut retro, 1).await?), ["11.25"]);
    assert_nothing_arrives(&mut retro).await?;

    // The JMS client's `topic?consumer.retroactive=true` sets ConsumerInfo.retroactive.
    let addr = broker.openwire_addr().context("an OpenWire connector")?;
    let client =
        OpenWireClient::connect(&addr.ip().to_string(), addr.port(), OpenWireOptions::default())
            .await?;
    let session = client.session(SessionMode::Auto).await?;
    let mut options = SubscribeOptions::new(Destination::topic("retro.price"));
    options.retroactive = true;
    let mut jms = session.consumer(options).await?;
    let message = jms.receive(ARRIVES).await?.context("the last image")?;
    // Sent over STOMP with a content-length: a bytes message.
    assert_eq!(&message.body_bytes()[..], b"11.25");
    assert!(jms.receive(Duration::from_millis(250)).await?.is_none(), "only the last one");
    broker.shutdown().await;
    Ok(())
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn timed_replays_only_messages_younger_than_the_duration() -> anyhow::Result<()> {
    let broker = start_with("{ kind = \"timed\", recover_duration_ms = 300 }").await?;
    publish(&broker, "/topic/retro.timed", &["old"]).await?;
    tokio::time::sleep(Duration::from_millis(500)).await;
    publish(&broker, "/topic/retro.timed", &["fresh"]).await?;

    let consumer = connect(&broker).await?;
    let mut retro = consumer.subscribe("/topic/retro.timed", AckMode::Auto, &[RETROACTIVE]).await?;
    assert_eq!(bodies(&recv_n(&mut retro, 1).await?), ["fresh"]);
    assert_nothing_arrives(&mut retro).await?;

    // Once "fresh" is older than the duration too, a new subscriber gets nothing.
    tokio::time::sleep(Duration::from_millis(500)).await;
    let mut late = consumer.subscribe("/topic/retro.timed", AckMode::Auto, &[RETROACTIVE]).await?;
    assert_nothing_arrives(&mut late).await?;
    broker.shutdown().await;
    Ok(())
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn no_recovery_replays_nothing() -> anyhow::Result<()> {
    let broker = start_with("{ kind = \"none\" }").await?;
    publish(&broker, "/topic/retro.none", &["gone"]).await?;
    // A topic no entry covers keeps the default (the last 64 KiB).
    publish(&broker, "/topic/elsewhere", &["kept"]).await?;

    let consumer = connect(&broker).await?;
    let mut retro = consumer.subscribe("/topic/retro.none", AckMode::Auto, &[RETROACTIVE]).await?;
    assert_nothing_arrives(&mut retro).await?;
    let mut other = consumer.subscribe("/topic/elsewhere", AckMode::Auto, &[RETROACTIVE]).await?;
    assert_eq!(bodies(&recv_n(&mut other, 1).await?), ["kept"]);
    broker.shutdown().await;
    Ok(())
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn expired_messages_are_not_replayed() -> anyhow::Result<()> {
    let broker = start_with("{ kind = \"fixed_count\", maximum_size = 10 }").await?;
    let producer = connect(&broker).await?;
    let soon = std::time::SystemTime::now()
        .duration_since(std::time::UNIX_EPOCH)
        .map_or(0, |d| d.as_millis() as i64)
        + 200;
    producer
        .send_with_receipt(
            "/topic/retro.expiring",
            "short-lived",
            &[("expires", &soon.to_string())],
        )
        .await?;
    producer.send_with_receipt("/topic/retro.expiring", "lasting", &[]).await?;
    tokio::time::sleep(Duration::from_millis(400)).await;

    let consumer = connect(&broker).await?;
    let mut retro =
        consumer.subscribe("/topic/retro.expiring", AckMode::Auto, &[RETROACTIVE]).await?;
    assert_eq!(bodies(&recv_n(&mut retro, 1).await?), ["lasting"]);
    assert_nothing_arrives(&mut retro).await?;
    broker.shutdown().await;
    Ok(())
}
