//! `client::openwire`, ferromq's OpenWire client, against an embedded ferromq: round trips,
//! topics, durable subscriptions, transactions, acknowledgement modes, pulls, a large
//! message, broker refusals and servers that do not speak OpenWire.

use std::time::Duration;

use anyhow::Context as _;
use broker::BrokerHandle;
use client::openwire::{
    Body, Consumer, Destination, Message, OpenWireClient, OpenWireOptions, OutgoingMessage,
    PrimitiveValue, SessionMode, SubscribeOptions,
};
use client::ClientError;
use tests::{ARRIVES, QUIET};

async fn start() -> anyhow::Result<BrokerHandle> {
    tests::start_broker(|config| {
        config.transport.connectors = vec![
            "stomp://127.0.0.1:0".parse().expect("uri"),
            "tcp://127.0.0.1:0".parse().expect("uri"),
        ];
    })
    .await
}

async fn connect_with(
    broker: &BrokerHandle,
    options: OpenWireOptions,
) -> anyhow::Result<OpenWireClient> {
    let addr = broker.openwire_addr().context("an OpenWire connector")?;
    OpenWireClient::connect(&addr.ip().to_string(), addr.port(), options)
        .await
        .with_context(|| format!("connecting to {addr}"))
}

async fn connect(broker: &BrokerHandle) -> anyhow::Result<OpenWireClient> {
    connect_with(broker, OpenWireOptions::default()).await
}

async fn connect_as(broker: &BrokerHandle, client_id: &str) -> anyhow::Result<OpenWireClient> {
    let options =
        OpenWireOptions { client_id: Some(client_id.to_owned()), ..OpenWireOptions::default() };
    connect_with(broker, options).await
}

/// The next message, which must come within [`ARRIVES`].
async fn next(consumer: &mut Consumer) -> anyhow::Result<Message> {
    consumer.receive(ARRIVES).await?.context("expected a message")
}

async fn nothing_more(consumer: &mut Consumer) -> anyhow::Result<()> {
    if let Some(message) = consumer.receive(QUIET).await? {
        anyhow::bail!("expected no message, got {:?}", message.text());
    }
    Ok(())
}

fn text(message: &Message) -> String {
    message.text().unwrap_or_default()
}

#[tokio::test]
async fn queue_round_trip_keeps_body_headers_and_properties() -> anyhow::Result<()> {
    let broker = start().await?;
    let client = connect(&broker).await?;
    assert_eq!(client.wire_format().version, 12);
    assert!(client.wire_format().tight_encoding && client.wire_format().cache_enabled);
    let queue = Destination::queue("ow.client.round-trip");
    let session = client.session(SessionMode::Auto).await?;
    let mut consumer = session.consumer(SubscribeOptions::new(queue.clone())).await?;
    let producer = session.producer(Some(queue.clone())).await?;
    let first = OutgoingMessage::text("héllo wörld")
        .property("s", "string")
        .property("i", 42)
        .property("l", 1i64 << 40)
        .property("b", true)
        .correlation_id("corr-1")
        .jms_type("greeting");
    let id = producer.send(&first).await?;
    assert!(id.starts_with(client.connection_id()) && id.ends_with(":1:1:1"), "{id}");
    producer.send(&OutgoingMessage::bytes(vec![0u8, 1, 2, 255]).persistent(false)).await?;

    let message = next(&mut consumer).await?;
    assert_eq!(message.text().as_deref(), Some("héllo wörld"));
    assert_eq!(message.destination(), Some(&queue));
    assert_eq!(message.message_id().as_deref(), Some(id.as_str()));
    assert_eq!(message.property("s"), Some(PrimitiveValue::String("string".into())));
    assert_eq!(message.property("i"), Some(PrimitiveValue::Int(42)));
    assert_eq!(message.property("l"), Some(PrimitiveValue::Long(1 << 40)));
    assert_eq!(message.property("b"), Some(PrimitiveValue::Boolean(true)));
    assert_eq!((message.correlation_id(), message.jms_type()), (Some("corr-1"), Some("greeting")));
    assert!(message.persistent() && !message.redelivered());
    let bytes = next(&mut consumer).await?;
    assert_eq!(bytes.body()?, Body::Bytes(vec![0u8, 1, 2, 255].into()));
    assert!(!bytes.persistent());
    nothing_more(&mut consumer).await?;

    // The implicit session sends and receives too.
    let mut implicit = client.subscribe(SubscribeOptions::new(Destination::queue("ow.i"))).await?;
    client.send(&Destination::queue("ow.i"), &OutgoingMessage::text("implicit")).await?;
    assert_eq!(text(&next(&mut implicit).await?), "implicit");

    consumer.close().await?;
    client.close().await?;
    // Every auto acknowledgement landed before the close completed.
    let stats = broker.queue_stats("ow.client.round-trip").await.context("the queue")?;
    assert_eq!((stats.acked, stats.ready, stats.in_flight), (2, 0, 0), "{stats:?}");
    broker.shutdown().await;
    Ok(())
}

#[tokio::test]
async fn every_topic_subscriber_gets_each_message() -> anyhow::Result<()> {
    let broker = start().await?;
    let topic = Destination::topic("ow.client.prices");
    let a = connect(&broker).await?;
    let b = connect(&broker).await?;
    let mut sub_a = a.subscribe(SubscribeOptions::new(topic.clone())).await?;
    let mut sub_b = b.subscribe(SubscribeOptions::new(topic.clone())).await?;
    let publisher = connect(&broker).await?;
    for n in 0..20 {
        let message = OutgoingMessage::text(format!("price {n}")).persistent(false);
        publisher.send(&topic, &message).await?;
    }
    for consumer in [&mut sub_a, &mut sub_b] {
        for n in 0..20 {
            let message = next(consumer).await?;
            assert_eq!(text(&message), format!("price {n}"));
            assert_eq!(message.destination(), Some(&topic));
        }
        nothing_more(consumer).await?;
    }
    for client in [a, b, publisher] {
        client.close().await?;
    }
    broker.shutdown().await;
    Ok(())
}

#[tokio::test]
async fn durable_subscriber_gets_what_was_published_while_offline() -> anyhow::Result<()> {
    let broker = start().await?;
    let topic = Destination::topic("ow.client.news");
    let durable = SubscribeOptions::new(topic.clone()).durable("reader");

    let subscriber = connect_as(&broker, "ow-durable").await?;
    let mut consumer = subscriber.subscribe(durable.clone()).await?;
    let publisher = connect(&broker).await?;
    publisher.send(&topic, &OutgoingMessage::text("online")).await?;
    assert_eq!(text(&next(&mut consumer).await?), "online");
    consumer.close().await?;
    subscriber.close().await?;

    for n in 0..3 {
        publisher.send(&topic, &OutgoingMessage::text(format!("offline {n}"))).await?;
    }
    let subscriber = connect_as(&broker, "ow-durable").await?;
    let session = subscriber.session(SessionMode::Auto).await?;
    let mut consumer = session.consumer(durable.clone()).await?;
    for n in 0..3 {
        assert_eq!(text(&next(&mut consumer).await?), format!("offline {n}"));
    }
    nothing_more(&mut consumer).await?;

    // Unsubscribing deletes the subscription: what is published next is kept for no one.
    consumer.close().await?;
    session.unsubscribe("reader").await?;
    publisher.send(&topic, &OutgoingMessage::text("after")).await?;
    let mut consumer = session.consumer(durable).await?;
    nothing_more(&mut consumer).await?;
    // A durable subscription is for topics: the broker refuses with the JMS exception.
    let anonymous = connect(&broker).await?;
    let refused = anonymous
        .subscribe(SubscribeOptions::new(Destination::queue("ow.q")).durable("on-a-queue"))
        .await
        .expect_err("a durable queue subscription");
    assert!(
        matches!(&refused, ClientError::Exception { class, .. } if class == "javax.jms.InvalidDestinationException"),
        "{refused:?}"
    );
    for client in [subscriber, publisher, anonymous] {
        client.close().await?;
    }
    broker.shutdown().await;
    Ok(())
}

#[tokio::test]
async fn transactions_commit_and_roll_back_sends_and_receives() -> anyhow::Result<()> {
    let broker = start().await?;
    let queue = Destination::queue("ow.client.tx");
    let client = connect(&broker).await?;
    let mut consumer = client.subscribe(SubscribeOptions::new(queue.clone())).await?;
    let transacted = client.session(SessionMode::Transacted).await?;
    let producer = transacted.producer(Some(queue.clone())).await?;

    producer.send(&OutgoingMessage::text("rolled back")).await?;
    transacted.rollback().await?;
    producer.send(&OutgoingMessage::text("committed 1")).await?;
    producer.send(&OutgoingMessage::text("committed 2")).await?;
    nothing_more(&mut consumer).await?;
    transacted.commit().await?;
    assert_eq!(text(&next(&mut consumer).await?), "committed 1");
    assert_eq!(text(&next(&mut consumer).await?), "committed 2");
    nothing_more(&mut consumer).await?;
    consumer.close().await?;

    // Receiving in a transaction: a rollback hands the messages out again, redelivered.
    let mut receiver = transacted.consumer(SubscribeOptions::new(queue.clone())).await?;
    for n in 0..3 {
        client.send(&queue, &OutgoingMessage::text(format!("m{n}"))).await?;
    }
    for n in 0..3 {
        let message = next(&mut receiver).await?;
        assert_eq!((text(&message), message.redelivered()), (format!("m{n}"), false));
    }
    transacted.rollback().await?;
    for n in 0..3 {
        let message = next(&mut receiver).await?;
        assert_eq!((text(&message), message.redelivered()), (format!("m{n}"), true));
    }
    transacted.commit().await?;
    nothing_more(&mut receiver).await?;
    receiver.close().await?;
    client.close().await?;
    let stats = broker.queue_stats("ow.client.tx").await.context("the queue")?;
    assert_eq!((stats.ready, stats.in_flight), (0, 0), "{stats:?}");
    broker.shutdown().await;
    Ok(())
}

#[tokio::test]
async fn client_acknowledge_redelivers_unacknowledged_messages_after_reconnect(
) -> anyhow::Result<()> {
    let broker = start().await?;
    let queue = Destination::queue("ow.client.ack");
    let producer = connect(&broker).await?;
    for n in 0..5 {
        producer.send(&queue, &OutgoingMessage::text(format!("m{n}"))).await?;
    }
    let client = connect(&broker).await?;
    let session = client.session(SessionMode::Client).await?;
    let mut consumer = session.consumer(SubscribeOptions::new(queue.clone())).await?;
    let mut received = Vec::new();
    for _ in 0..3 {
        received.push(next(&mut consumer).await?);
    }
    // Client mode: acknowledging m1 acknowledges m0 too; m2 stays unacknowledged.
    consumer.ack(&received[1]).await?;
    client.close().await?;

    let client = connect(&broker).await?;
    let session = client.session(SessionMode::Individual).await?;
    let mut consumer = session.consumer(SubscribeOptions::new(queue)).await?;
    let again = next(&mut consumer).await?;
    assert_eq!((text(&again), again.redelivered()), ("m2".to_owned(), true));
    // m3 and m4 were only prefetched by the first consumer, never handed out: not redelivered.
    let m3 = next(&mut consumer).await?;
    let m4 = next(&mut consumer).await?;
    assert_eq!((text(&m3), m3.redelivered(), text(&m4)), ("m3".into(), false, "m4".into()));
    // Individual mode: acknowledge m4 alone; m2 and m3 come back on the next connection.
    consumer.ack(&m4).await?;
    client.close().await?;
    let client = connect(&broker).await?;
    let mut consumer =
        client.subscribe(SubscribeOptions::new(Destination::queue("ow.client.ack"))).await?;
    assert_eq!(text(&next(&mut consumer).await?), "m2");
    assert_eq!(text(&next(&mut consumer).await?), "m3");
    nothing_more(&mut consumer).await?;
    client.close().await?;
    producer.close().await?;
    broker.shutdown().await;
    Ok(())
}

#[tokio::test]
async fn client_acknowledge_may_hold_more_than_the_prefetch() -> anyhow::Result<()> {
    let broker = start().await?;
    let queue = Destination::queue("ow.client.window");
    let client = connect(&broker).await?;
    for n in 0..50 {
        let message = OutgoingMessage::text(format!("w{n}")).persistent(false);
        client.send(&queue, &message).await?;
    }
    let session = client.session(SessionMode::Client).await?;
    let mut consumer = session.consumer(SubscribeOptions::new(queue).prefetch(10)).await?;
    // Delivered acks open the window: all 50 arrive with none acknowledged.
    let mut last = None;
    for n in 0..50 {
        let message = next(&mut consumer).await.with_context(|| format!("message {n}"))?;
        assert_eq!(text(&message), format!("w{n}"));
        last = Some(message);
    }
    consumer.ack(&last.context("a last message")?).await?;
    consumer.close().await?;
    client.close().await?;
    let stats = broker.queue_stats("ow.client.window").await.context("the queue")?;
    assert_eq!((stats.acked, stats.ready, stats.in_flight), (50, 0, 0), "{stats:?}");
    broker.shutdown().await;
    Ok(())
}

#[tokio::test]
async fn prefetch_zero_pulls_each_message() -> anyhow::Result<()> {
    let broker = start().await?;
    let queue = Destination::queue("ow.client.pull");
    let client = connect(&broker).await?;
    let mut puller = client.subscribe(SubscribeOptions::new(queue.clone()).prefetch(0)).await?;
    assert_eq!(puller.prefetch(), 0);
    // Nothing there: the pull ends empty, now or after its time.
    assert!(puller.receive_no_wait().await?.is_none());
    assert!(puller.receive(Duration::from_millis(200)).await?.is_none());
    for n in 0..3 {
        client.send(&queue, &OutgoingMessage::text(format!("p{n}"))).await?;
    }
    // A second consumer with a prefetch gets nothing the puller did not ask for... unless
    // the puller asks: each message goes to whoever asks.
    assert_eq!(text(&puller.receive_no_wait().await?.context("a message now")?), "p0");
    assert_eq!(text(&next(&mut puller).await?), "p1");
    assert_eq!(text(&puller.recv().await?), "p2");
    assert!(puller.receive(Duration::from_millis(100)).await?.is_none());
    // A message sent while a pull waits answers that pull.
    let waiting = tokio::spawn(async move {
        let message = puller.receive(ARRIVES).await;
        (puller, message)
    });
    tokio::time::sleep(QUIET).await;
    client.send(&queue, &OutgoingMessage::text("late")).await?;
    let (puller, message) = waiting.await?;
    assert_eq!(message?.map(|m| text(&m)).as_deref(), Some("late"));
    puller.close().await?;
    client.close().await?;
    let stats = broker.queue_stats("ow.client.pull").await.context("the queue")?;
    assert_eq!((stats.acked, stats.ready, stats.in_flight), (4, 0, 0), "{stats:?}");
    broker.shutdown().await;
    Ok(())
}

#[tokio::test]
async fn a_five_megabyte_message_goes_through() -> anyhow::Result<()> {
    let broker = start().await?;
    let queue = Destination::queue("ow.client.large");
    let client = connect(&broker).await?;
    let mut consumer = client.subscribe(SubscribeOptions::new(queue.clone())).await?;
    let body: Vec<u8> = (0..5 * 1024 * 1024).map(|i| (i % 251) as u8).collect();
    client.send(&queue, &OutgoingMessage::bytes(body.clone())).await?;
    let message = next(&mut consumer).await?;
    assert_eq!(message.body_bytes().len(), body.len());
    assert!(message.body_bytes() == body, "the body came back changed");
    client.close().await?;
    broker.shutdown().await;
    Ok(())
}

#[tokio::test]
async fn broker_refusals_name_the_java_exception() -> anyhow::Result<()> {
    let broker = start().await?;
    let first = connect_as(&broker, "ow-unique").await?;
    let second = connect_as(&broker, "ow-unique").await.expect_err("the client id is taken");
    let error = second.root_cause().downcast_ref::<ClientError>().context("a client error")?;
    match error {
        ClientError::Exception { class, message } => {
            assert_eq!(class, "javax.jms.InvalidClientIDException");
            assert!(message.contains("ow-unique"), "{message}");
        }
        other => anyhow::bail!("expected an exception, got {other:?}"),
    }
    // The first connection is unaffected; a refused command leaves it usable.
    let session = first.session(SessionMode::Client).await?;
    let error = session.commit().await.expect_err("not transacted");
    assert!(error.to_string().contains("not transacted"), "{error}");
    first.send(&Destination::queue("ow.refusals"), &OutgoingMessage::text("still fine")).await?;
    first.close().await?;
    broker.shutdown().await;
    Ok(())
}

#[tokio::test]
async fn a_stomp_port_is_reported_as_not_openwire() -> anyhow::Result<()> {
    let broker = start().await?;
    let stomp = tests::stomp_addr(&broker)?;
    let options = OpenWireOptions { timeout: ARRIVES, ..OpenWireOptions::default() };
    let error = OpenWireClient::connect("127.0.0.1", stomp.port(), options)
        .await
        .expect_err("STOMP is not OpenWire");
    assert!(matches!(error, ClientError::Protocol { .. }), "{error:?}");
    let text = error.to_string();
    assert!(text.contains("does not speak OpenWire") && text.contains("ERROR"), "{text}");
    broker.shutdown().await;
    Ok(())
}

#[tokio::test]
async fn a_server_that_closes_mid_handshake_is_reported() -> anyhow::Result<()> {
    let listener = tokio::net::TcpListener::bind("127.0.0.1:0").await?;
    let port = listener.local_addr()?.port();
    tokio::spawn(async move {
        if let Ok((socket, _)) = listener.accept().await {
            drop(socket);
        }
    });
    let error = OpenWireClient::connect("127.0.0.1", port, OpenWireOptions::default())
        .await
        .expect_err("closed");
    let text = error.to_string();
    assert!(
        text.contains("closed the connection during the OpenWire handshake")
            || matches!(error, ClientError::Io(_)),
        "{text}"
    );
    Ok(())
}

#[tokio::test]
async fn a_broker_that_goes_away_fails_waiting_calls() -> anyhow::Result<()> {
    let broker = start().await?;
    let client = connect(&broker).await?;
    let mut consumer =
        client.subscribe(SubscribeOptions::new(Destination::queue("ow.client.gone"))).await?;
    broker.shutdown().await;
    let error = consumer.recv().await.expect_err("the broker is gone");
    assert!(client.is_closed(), "{error}");
    let error = client
        .send(&Destination::queue("ow.client.gone"), &OutgoingMessage::text("x"))
        .await
        .expect_err("closed");
    assert!(!matches!(error, ClientError::Timeout { .. }), "{error:?}");
    Ok(())
}
