//! `client::amqp`, ferromq's minimal AMQP 1.0 client, against an embedded ferromq: durable
//! sends confirmed by `accepted`, receives with credit 1 and accepts, the credit window, a
//! large message across frames, SASL PLAIN, a refused address and cross-protocol delivery
//! to STOMP.

use std::time::Duration;

use anyhow::Context as _;
use broker::BrokerHandle;
use bytes::Bytes;
use client::amqp::{AmqpClient, AmqpOptions, ApplicationProperties, Body, Header, Message, Value};
use client::{AckMode, ClientError};
use tests::{ARRIVES, QUIET};

async fn start() -> anyhow::Result<BrokerHandle> {
    tests::start_broker(|config| {
        config.transport.connectors = vec![
            "amqp://127.0.0.1:0".parse().expect("uri"),
            "stomp://127.0.0.1:0".parse().expect("uri"),
        ];
    })
    .await
}

async fn connect_with(broker: &BrokerHandle, options: AmqpOptions) -> anyhow::Result<AmqpClient> {
    let addr = broker.amqp_addr().context("an AMQP connector")?;
    AmqpClient::connect(&addr.ip().to_string(), addr.port(), options)
        .await
        .with_context(|| format!("connecting to {addr}"))
}

fn durable(body: &str) -> Message {
    let mut message = Message::with_data(Bytes::copy_from_slice(body.as_bytes()));
    message.header = Some(Header { durable: Some(true), ..Header::default() });
    message
}

fn data(message: &Message) -> Vec<u8> {
    match &message.body {
        Body::Data(sections) => sections.concat(),
        other => panic!("not a data body: {other:?}"),
    }
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn amqp_client_sends_confirmed_and_receives_with_credit_one() -> anyhow::Result<()> {
    let broker = start().await?;
    let client = connect_with(&broker, AmqpOptions::default()).await?;
    let sender = client.sender("queue://client.q").await?;
    for i in 0..20 {
        sender.send(&durable(&format!("m{i}"))).await?;
    }
    let mut receiver = client.receiver("queue://client.q", 1).await?;
    for i in 0..20 {
        let delivery = receiver.receive(ARRIVES).await?.context("a message")?;
        assert!(!delivery.settled, "an unsettled delivery to accept");
        assert_eq!(data(&delivery.message), format!("m{i}").as_bytes());
        assert_eq!(delivery.message.header.as_ref().and_then(|h| h.durable), Some(true));
        receiver.accept(&delivery).await?;
    }
    assert!(receiver.receive(QUIET).await?.is_none(), "the queue is drained");
    client.close().await?;
    broker.shutdown().await;
    Ok(())
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn amqp_client_credit_bounds_what_arrives() -> anyhow::Result<()> {
    let broker = start().await?;
    let client = connect_with(&broker, AmqpOptions::default()).await?;
    let sender = client.sender("client.credit").await?;
    for i in 0..10 {
        sender.send(&durable(&format!("c{i}"))).await?;
    }
    let mut receiver = client.receiver("client.credit", 4).await?;
    let mut held = Vec::new();
    for _ in 0..4 {
        held.push(receiver.receive(ARRIVES).await?.context("within the credit")?);
    }
    assert!(receiver.receive(QUIET).await?.is_none(), "a fifth message without credit");
    for delivery in &held {
        receiver.accept(delivery).await?;
    }
    for i in 4..10 {
        let delivery = receiver.receive(ARRIVES).await?.context("after the top-up")?;
        assert_eq!(data(&delivery.message), format!("c{i}").as_bytes());
        receiver.accept(&delivery).await?;
    }
    client.close().await?;
    broker.shutdown().await;
    Ok(())
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn amqp_client_large_message_spans_frames_with_sasl_plain() -> anyhow::Result<()> {
    let broker = start().await?;
    let options = AmqpOptions {
        user: Some("user".to_owned()),
        password: Some("secret".to_owned()),
        // Small frames both ways: the 3 MiB message crosses as many transfers.
        max_frame_size: 64 * 1024,
        ..AmqpOptions::default()
    };
    let client = connect_with(&broker, options).await?;
    let body: Vec<u8> = (0..3 * 1024 * 1024).map(|i: u32| (i * 31) as u8).collect();
    let mut message = Message::with_data(Bytes::from(body.clone()));
    let mut properties = ApplicationProperties::default();
    properties.insert("size", Value::Int(body.len() as i32));
    message.application_properties = Some(properties.clone());
    client.sender("queue://client.large").await?.send(&message).await?;
    let mut receiver = client.receiver("queue://client.large", 1).await?;
    let delivery = receiver.receive(Duration::from_secs(30)).await?.context("the message")?;
    assert!(data(&delivery.message) == body, "the body intact");
    assert_eq!(delivery.message.application_properties, Some(properties));
    receiver.accept(&delivery).await?;
    client.close().await?;
    broker.shutdown().await;
    Ok(())
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn amqp_client_reports_a_refused_address() -> anyhow::Result<()> {
    let broker = start().await?;
    let client = connect_with(&broker, AmqpOptions::default()).await?;
    let error = client.sender("bogus://nowhere").await.expect_err("an invalid address");
    assert!(matches!(error, ClientError::Refused { .. }), "{error:?}");
    // The connection is still usable.
    client.sender("queue://client.after").await?.send(&durable("fine")).await?;
    client.close().await?;
    broker.shutdown().await;
    Ok(())
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn amqp_client_messages_reach_stomp() -> anyhow::Result<()> {
    let broker = start().await?;
    let stomp = tests::connect(&broker).await?;
    let mut subscription = stomp.subscribe("/queue/client.cross", AckMode::Auto, &[]).await?;
    let client = connect_with(&broker, AmqpOptions::default()).await?;
    client.sender("queue://client.cross").await?.send(&durable("to stomp")).await?;
    let message = tests::recv(&mut subscription).await?;
    assert_eq!(&message.body()[..], b"to stomp");
    assert_eq!(message.header("persistent"), Some("true"));
    client.close().await?;
    broker.shutdown().await;
    Ok(())
}
