//! Advisory messages over STOMP: consumers, connections and new queues announced on
//! `ActiveMQ.Advisory.*` topics, with the facts as headers.

use client::AckMode;
use tests::recv;

#[tokio::test]
async fn consumer_connection_and_queue_advisories() -> anyhow::Result<()> {
    let broker = tests::start_broker(|_| {}).await?;
    let monitor = tests::connect(&broker).await?;
    let mut consumers = monitor
        .subscribe("/topic/ActiveMQ.Advisory.Consumer.Queue.adv", AckMode::Auto, &[])
        .await?;
    let mut connections =
        monitor.subscribe("/topic/ActiveMQ.Advisory.Connection", AckMode::Auto, &[]).await?;
    let mut queues =
        monitor.subscribe("/topic/ActiveMQ.Advisory.Queue", AckMode::Auto, &[]).await?;

    let other = tests::connect(&broker).await?;
    let opened = recv(&mut connections).await?;
    assert_eq!(opened.header("ferromq.advisory.operation"), Some("add"));
    let connection = opened.header("ferromq.advisory.subject").map(str::to_owned);
    assert!(connection.as_deref().is_some_and(|c| c.starts_with("ID:")), "{connection:?}");

    let subscription = other.subscribe("/queue/adv", AckMode::Auto, &[]).await?;
    let created = recv(&mut queues).await?;
    assert_eq!(created.header("ferromq.advisory.destination"), Some("queue://adv"));
    let started = recv(&mut consumers).await?;
    assert_eq!(started.header("ferromq.advisory.operation"), Some("add"));
    assert_eq!(started.header("ferromq.advisory.destination"), Some("queue://adv"));
    assert_eq!(started.header("consumerCount"), Some("1"));
    let consumer = started.header("ferromq.advisory.subject").map(str::to_owned);

    subscription.unsubscribe().await?;
    let stopped = recv(&mut consumers).await?;
    assert_eq!(stopped.header("ferromq.advisory.operation"), Some("remove"));
    assert_eq!(stopped.header("ferromq.advisory.subject").map(str::to_owned), consumer);
    assert_eq!(stopped.header("consumerCount"), Some("0"));

    other.disconnect().await?;
    let closed = recv(&mut connections).await?;
    assert_eq!(closed.header("ferromq.advisory.operation"), Some("remove"));
    assert_eq!(closed.header("ferromq.advisory.subject").map(str::to_owned), connection);
    broker.shutdown().await;
    Ok(())
}

/// An MQTT subscription is a topic consumer like any other: announced on the topic's
/// consumer advisory (add, then remove when the MQTT connection goes), and counted in the
/// topic's statistics on the admin endpoint.
#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn mqtt_subscriptions_are_advised_and_counted_like_other_consumers() -> anyhow::Result<()> {
    let broker = tests::start_broker(|config| {
        config.transport.connectors = vec![
            "stomp://127.0.0.1:0".parse().expect("a valid connector URI"),
            "mqtt://127.0.0.1:0".parse().expect("a valid connector URI"),
        ];
    })
    .await?;
    let monitor = tests::connect(&broker).await?;
    let mut consumers = monitor
        .subscribe("/topic/ActiveMQ.Advisory.Consumer.Topic.sensors.hall", AckMode::Auto, &[])
        .await?;
    let mqtt = broker.mqtt_addr().ok_or_else(|| anyhow::anyhow!("no MQTT connector"))?;
    let options =
        client::mqtt::MqttOptions { client_id: "observed-device".to_owned(), ..Default::default() };
    let device =
        client::mqtt::MqttClient::connect(&mqtt.ip().to_string(), mqtt.port(), options).await?;
    device.subscribe("sensors/hall", client::mqtt::QoS::AtLeastOnce).await?;

    let started = recv(&mut consumers).await?;
    assert_eq!(started.header("ferromq.advisory.operation"), Some("add"));
    assert_eq!(started.header("ferromq.advisory.destination"), Some("topic://sensors.hall"));
    assert_eq!(started.header("consumerCount"), Some("1"));

    let admin_addr = broker.admin_addr().ok_or_else(|| anyhow::anyhow!("no admin endpoint"))?;
    let admin = broker::admin::AdminClient::new(&format!("http://{admin_addr}"))?;
    let topic = admin
        .destinations()
        .await?
        .into_iter()
        .find(|destination| destination.name == "sensors.hall")
        .ok_or_else(|| anyhow::anyhow!("the admin endpoint does not list topic sensors.hall"))?;
    assert_eq!(topic.consumers, 1, "{topic:?}");

    device.disconnect().await?;
    let stopped = recv(&mut consumers).await?;
    assert_eq!(stopped.header("ferromq.advisory.operation"), Some("remove"));
    assert_eq!(stopped.header("consumerCount"), Some("0"));
    broker.shutdown().await;
    Ok(())
}
