//! `client::mqtt` and `client::load` over MQTT against an embedded ferromq broker with an
//! `mqtt://127.0.0.1:0` connector (and a STOMP one for the cross-protocol runs): the QoS 0,
//! 1 and 2 flows of both versions, the load generator's producers and consumers over
//! `mqtt://`, and what it refuses over MQTT.

use std::sync::Arc;
use std::time::Duration;

use client::load::{
    run_consumer_observed, run_producer, ConsumerOptions, DestinationName, LoadError, LoadEvent,
    ProducerOptions,
};
use client::mqtt::{MqttClient, MqttOptions, QoS, Version};

const WAIT: Duration = Duration::from_secs(30);

async fn start() -> anyhow::Result<broker::BrokerHandle> {
    let mut config = conf::Config::default();
    config.store.kind = conf::StoreKind::Memory;
    config.transport.connectors =
        vec!["mqtt://127.0.0.1:0".parse()?, "stomp://127.0.0.1:0".parse()?];
    config.admin.bind = "127.0.0.1:0".to_owned();
    Ok(broker::Broker::start(config).await?)
}

fn options(version: Version) -> MqttOptions {
    MqttOptions { version, max_in_flight: 8, ..MqttOptions::default() }
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn every_qos_round_trips_in_both_versions() -> anyhow::Result<()> {
    let broker = start().await?;
    let addr = broker.mqtt_addr().expect("an MQTT connector");
    for version in [Version::V3_1_1, Version::V5_0] {
        let subscriber = MqttClient::connect("127.0.0.1", addr.port(), options(version)).await?;
        let publisher = MqttClient::connect("127.0.0.1", addr.port(), options(version)).await?;
        let filter = format!("round/{version:?}/#");
        assert_eq!(subscriber.subscribe(&filter, QoS::ExactlyOnce).await?, QoS::ExactlyOnce);
        for qos in [QoS::AtMostOnce, QoS::AtLeastOnce, QoS::ExactlyOnce] {
            let topic = format!("round/{version:?}/{}", qos.as_u8());
            // More publishes than the window: the window refills as acks come.
            let mut confirmations = Vec::new();
            for n in 0..20 {
                let payload = format!("{qos:?} {n}");
                confirmations.push(publisher.publish(&topic, payload, qos, false).await?);
            }
            for confirmation in confirmations {
                confirmation.wait().await?;
            }
            for n in 0..20 {
                let message = subscriber.recv(WAIT).await?.expect("a message in time");
                assert_eq!(message.topic, topic);
                assert_eq!(message.payload, format!("{qos:?} {n}").into_bytes());
                assert_eq!(message.qos, qos);
            }
        }
        subscriber.unsubscribe(&filter).await?;
        publisher
            .publish(&format!("round/{version:?}/1"), "late", QoS::AtLeastOnce, false)
            .await?
            .wait()
            .await?;
        assert_eq!(subscriber.recv(Duration::from_millis(300)).await?, None);
        publisher.disconnect().await?;
        subscriber.disconnect().await?;
    }
    broker.shutdown().await;
    Ok(())
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn a_wrong_password_is_refused_in_the_connack() -> anyhow::Result<()> {
    let mut config = conf::Config::default();
    config.store.kind = conf::StoreKind::Memory;
    config.transport.connectors = vec!["mqtt://127.0.0.1:0".parse()?];
    config.admin.bind = "127.0.0.1:0".to_owned();
    config.authentication.enabled = true;
    let password = broker::security::hash_password("secret").map_err(anyhow::Error::msg)?;
    config.users =
        vec![conf::UserEntry { name: "device".into(), password, groups: vec!["devices".into()] }];
    let broker = broker::Broker::start(config).await?;
    let port = broker.mqtt_addr().expect("an MQTT connector").port();
    for version in [Version::V3_1_1, Version::V5_0] {
        let login = |password: &str| MqttOptions {
            username: Some("device".into()),
            password: Some(password.into()),
            ..options(version)
        };
        let error = MqttClient::connect("127.0.0.1", port, login("wrong"))
            .await
            .expect_err("a wrong password");
        assert!(
            matches!(&error, client::ClientError::MqttRefused { request, .. } if request == "CONNECT"),
            "{error}"
        );
        MqttClient::connect("127.0.0.1", port, login("secret")).await?.disconnect().await?;
    }
    broker.shutdown().await;
    Ok(())
}

/// Runs a consumer of `count` messages on `destination` over `consumer_url`, starting the
/// producer over `producer_url` once it is subscribed.
async fn exchange(
    producer_url: &str,
    consumer_url: &str,
    destination: &str,
    count: u64,
    persistent: bool,
) -> anyhow::Result<(u64, u64)> {
    let destination: DestinationName = destination.parse()?;
    let (ready_tx, ready_rx) = tokio::sync::oneshot::channel();
    let ready_tx = std::sync::Mutex::new(Some(ready_tx));
    let observer: client::load::Observer = Arc::new(move |event: &LoadEvent| {
        if let LoadEvent::Ready { .. } = event {
            if let Some(tx) = ready_tx.lock().expect("not poisoned").take() {
                let _ = tx.send(());
            }
        }
    });
    let consumer = tokio::spawn(run_consumer_observed(
        ConsumerOptions {
            broker: consumer_url.parse()?,
            destination: destination.clone(),
            message_count: count,
            receive_timeout: WAIT,
            ..ConsumerOptions::default()
        },
        observer,
    ));
    ready_rx.await?;
    let produced = run_producer(ProducerOptions {
        broker: producer_url.parse()?,
        destination,
        message_count: count,
        persistent,
        ..ProducerOptions::default()
    })
    .await?;
    let consumed = consumer.await??;
    Ok((produced.messages, consumed.messages))
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn load_runs_over_mqtt_and_across_to_stomp() -> anyhow::Result<()> {
    let broker = start().await?;
    let mqtt = format!("mqtt://{}", broker.mqtt_addr().expect("an MQTT connector"));
    let stomp = format!("stomp://{}", broker.stomp_addr().expect("a STOMP connector"));
    assert_eq!(exchange(&mqtt, &mqtt, "topic://load.mqtt", 500, true).await?, (500, 500));
    assert_eq!(exchange(&mqtt, &mqtt, "topic://load.qos0", 200, false).await?, (200, 200));
    // topic://a.b is the MQTT topic a/b both ways.
    assert_eq!(exchange(&mqtt, &stomp, "topic://load.cross", 300, true).await?, (300, 300));
    assert_eq!(exchange(&stomp, &mqtt, "topic://load.back", 300, true).await?, (300, 300));
    broker.shutdown().await;
    Ok(())
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn queues_transactions_and_durable_subscriptions_are_refused_over_mqtt() -> anyhow::Result<()>
{
    let broker: client::load::BrokerUrl = "mqtt://127.0.0.1:1".parse()?;
    let queue = run_producer(ProducerOptions {
        broker: broker.clone(),
        destination: DestinationName::queue("orders"),
        ..ProducerOptions::default()
    })
    .await
    .expect_err("a queue over MQTT");
    assert!(matches!(queue, LoadError::InvalidDestination { .. }), "{queue}");
    assert!(queue.to_string().contains("MQTT"), "{queue}");
    let transacted = run_producer(ProducerOptions {
        broker: broker.clone(),
        destination: DestinationName::topic("a.b"),
        transaction_batch_size: 10,
        ..ProducerOptions::default()
    })
    .await
    .expect_err("a transaction over MQTT");
    assert!(transacted.to_string().contains("a transaction batch size is not supported over MQTT"));
    let durable = client::load::run_consumer(ConsumerOptions {
        broker,
        destination: DestinationName::topic("a.b"),
        durable: true,
        client_id: Some("me".into()),
        ..ConsumerOptions::default()
    })
    .await
    .expect_err("a durable subscription over MQTT");
    assert!(durable.to_string().contains("a durable subscription is not supported over MQTT"));
    Ok(())
}
