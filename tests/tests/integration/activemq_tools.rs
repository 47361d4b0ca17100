//! Debian's `activemq producer` and `activemq consumer` commands (ActiveMQ 5.17's own
//! tools, on the stock JMS client) move their messages through ferromq over OpenWire; and
//! the other way round, ferromq's OpenWire client against a real Apache ActiveMQ 5.17
//! ([`tests::ActiveMq`]). The `ferromq producer` / `ferromq consumer` commands against
//! Apache ActiveMQ are process tests of the broker crate (`broker/tests/producer_consumer.rs`).

use std::process::{Command, Stdio};
use std::time::{Duration, Instant};

use anyhow::{bail, ensure, Context as _};
use client::openwire::{
    Consumer, Destination, Message, OpenWireClient, OpenWireOptions, OutgoingMessage,
    PrimitiveValue, SessionMode, SubscribeOptions,
};
use tests::{start_broker, ActiveMq, ARRIVES, QUIET};

/// The `activemq` launcher that Debian's `activemq` package installs (scripts/test does).
const ACTIVEMQ: &str = "/usr/bin/activemq";

fn tool(arguments: &[&str]) -> anyhow::Result<std::process::Child> {
    ensure!(
        std::path::Path::new(ACTIVEMQ).exists(),
        "{ACTIVEMQ} is missing: run scripts/test, which installs Debian's activemq package"
    );
    Command::new(ACTIVEMQ)
        .args(arguments)
        .stdin(Stdio::null())
        .stdout(Stdio::piped())
        .stderr(Stdio::piped())
        .spawn()
        .with_context(|| format!("starting {ACTIVEMQ} {}", arguments.join(" ")))
}

/// Waits for `child` at most `limit`; its output on failure.
fn finish(name: &str, mut child: std::process::Child, limit: Duration) -> anyhow::Result<()> {
    let deadline = Instant::now() + limit;
    loop {
        if let Some(status) = child.try_wait()? {
            let output = child.wait_with_output()?;
            ensure!(
                status.success(),
                "activemq {name} failed ({status})\n--- stdout\n{}--- stderr\n{}",
                String::from_utf8_lossy(&output.stdout),
                String::from_utf8_lossy(&output.stderr)
            );
            return Ok(());
        }
        if Instant::now() > deadline {
            let _ = child.kill();
            let output = child.wait_with_output()?;
            bail!(
                "activemq {name} did not finish within {limit:?}\n--- stdout\n{}--- stderr\n{}",
                String::from_utf8_lossy(&output.stdout),
                String::from_utf8_lossy(&output.stderr)
            );
        }
        std::thread::sleep(Duration::from_millis(50));
    }
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn activemq_producer_and_consumer_commands_move_their_messages() -> anyhow::Result<()> {
    let broker = start_broker(|config| {
        config.transport.connectors =
            vec!["tcp://127.0.0.1:0".parse().expect("a valid connector URI")];
    })
    .await?;
    let url = format!("tcp://{}", broker.openwire_addr().context("an OpenWire connector")?);
    let queue = "activemq.tools";
    let destination = format!("queue://{queue}");
    let count = "500";
    let consumer = tool(&[
        "consumer",
        "--brokerUrl",
        &url,
        "--destination",
        &destination,
        "--messageCount",
        count,
    ])?;
    // The consumer subscribes first; the queue keeps what arrives before it anyway.
    let producer = tool(&[
        "producer",
        "--brokerUrl",
        &url,
        "--destination",
        &destination,
        "--messageCount",
        count,
    ])?;
    tokio::task::block_in_place(|| -> anyhow::Result<()> {
        finish("producer", producer, Duration::from_secs(180))?;
        finish("consumer", consumer, Duration::from_secs(180))
    })?;
    let stats = broker.queue_stats(queue).await.context("the tools' queue exists")?;
    assert_eq!((stats.acked, stats.ready, stats.in_flight), (500, 0, 0), "{stats:?}");
    broker.shutdown().await;
    Ok(())
}

async fn next(consumer: &mut Consumer) -> anyhow::Result<Message> {
    consumer.receive(ARRIVES).await?.context("expected a message from Apache ActiveMQ")
}

fn text(message: &Message) -> String {
    message.text().unwrap_or_default()
}

/// ferromq's OpenWire client against Apache ActiveMQ: a queue round trip with properties and
/// headers, topic fan-out, a durable subscriber offline, a transaction rolled back and
/// redelivered, client acknowledgement, and a prefetch-0 consumer.
#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn openwire_client_works_against_apache_activemq() -> anyhow::Result<()> {
    let Some(activemq) = tokio::task::spawn_blocking(ActiveMq::start).await?? else {
        return Ok(());
    };
    let connect = |client_id: Option<&str>| {
        let options = OpenWireOptions {
            client_id: client_id.map(str::to_owned),
            ..OpenWireOptions::default()
        };
        OpenWireClient::connect("127.0.0.1", activemq.port(), options)
    };
    let result = async {
        let client = connect(None).await.context("connecting to Apache ActiveMQ")?;
        assert_eq!(client.wire_format().version, 12);

        // Queue round trip.
        let queue = Destination::queue("ferromq.client.queue");
        let mut consumer = client.subscribe(SubscribeOptions::new(queue.clone())).await?;
        let sent = OutgoingMessage::text("hello ActiveMQ")
            .property("n", 7)
            .property("big", 1i64 << 40)
            .property("who", "ferromq")
            .correlation_id("c-1")
            .jms_type("greeting");
        let id = client.send(&queue, &sent).await?;
        client.send(&queue, &OutgoingMessage::bytes(vec![1u8, 2, 3]).persistent(false)).await?;
        let message = next(&mut consumer).await?;
        assert_eq!(text(&message), "hello ActiveMQ");
        assert_eq!(message.message_id().as_deref(), Some(id.as_str()));
        assert_eq!(message.destination(), Some(&queue));
        assert_eq!(message.property("n"), Some(PrimitiveValue::Int(7)));
        assert_eq!(message.property("big"), Some(PrimitiveValue::Long(1 << 40)));
        assert_eq!(message.property("who"), Some(PrimitiveValue::String("ferromq".into())));
        assert_eq!((message.correlation_id(), message.jms_type()), (Some("c-1"), Some("greeting")));
        assert_eq!(&next(&mut consumer).await?.body_bytes()[..], &[1, 2, 3]);
        consumer.close().await?;

        // Topic fan-out.
        let topic = Destination::topic("ferromq.client.topic");
        let other = connect(None).await?;
        let mut first = client.subscribe(SubscribeOptions::new(topic.clone())).await?;
        let mut second = other.subscribe(SubscribeOptions::new(topic.clone())).await?;
        for n in 0..5 {
            other.send(&topic, &OutgoingMessage::text(format!("t{n}")).persistent(false)).await?;
        }
        for subscriber in [&mut first, &mut second] {
            for n in 0..5 {
                assert_eq!(text(&next(subscriber).await?), format!("t{n}"));
            }
        }

        // A durable subscriber gets what was published while it was away.
        let durable = SubscribeOptions::new(topic.clone()).durable("ferromq-durable");
        let subscriber = connect(Some("ferromq-durable-client")).await?;
        subscriber.subscribe(durable.clone()).await?.close().await?;
        subscriber.close().await?;
        other.send(&topic, &OutgoingMessage::text("while away")).await?;
        let subscriber = connect(Some("ferromq-durable-client")).await?;
        let session = subscriber.session(SessionMode::Auto).await?;
        let mut back = session.consumer(durable).await?;
        assert_eq!(text(&next(&mut back).await?), "while away");
        back.close().await?;
        session.unsubscribe("ferromq-durable").await?;
        subscriber.close().await?;

        // A transaction rolled back: its messages come again, marked redelivered.
        let tx_queue = Destination::queue("ferromq.client.tx");
        let transacted = client.session(SessionMode::Transacted).await?;
        let producer = transacted.producer(Some(tx_queue.clone())).await?;
        producer.send(&OutgoingMessage::text("dropped")).await?;
        transacted.rollback().await?;
        producer.send(&OutgoingMessage::text("kept")).await?;
        transacted.commit().await?;
        let mut receiver = transacted.consumer(SubscribeOptions::new(tx_queue.clone())).await?;
        let message = next(&mut receiver).await?;
        assert_eq!((text(&message), message.redelivered()), ("kept".to_owned(), false));
        transacted.rollback().await?;
        let message = next(&mut receiver).await?;
        assert_eq!((text(&message), message.redelivered()), ("kept".to_owned(), true));
        transacted.commit().await?;
        assert!(receiver.receive(QUIET).await?.is_none());
        receiver.close().await?;

        // Client acknowledgement: what was not acknowledged comes back after a reconnect.
        let ack_queue = Destination::queue("ferromq.client.ack");
        for n in 0..3 {
            other.send(&ack_queue, &OutgoingMessage::text(format!("a{n}"))).await?;
        }
        let acker = connect(None).await?;
        let session = acker.session(SessionMode::Client).await?;
        let mut consumer = session.consumer(SubscribeOptions::new(ack_queue.clone())).await?;
        let a0 = next(&mut consumer).await?;
        let _a1 = next(&mut consumer).await?;
        consumer.ack(&a0).await?;
        acker.close().await?;
        // Delivered acks let a client-acknowledge consumer hold more than its prefetch.
        let window = Destination::queue("ferromq.client.window");
        for n in 0..12 {
            other.send(&window, &OutgoingMessage::text(format!("w{n}")).persistent(false)).await?;
        }
        let holder = connect(None).await?;
        let session = holder.session(SessionMode::Client).await?;
        let mut consumer = session.consumer(SubscribeOptions::new(window).prefetch(4)).await?;
        let mut last = None;
        for n in 0..12 {
            let message = next(&mut consumer).await?;
            assert_eq!(text(&message), format!("w{n}"));
            last = Some(message);
        }
        consumer.ack(&last.context("a last message")?).await?;
        holder.close().await?;
        // Prefetch 0: each message pulled.
        let puller = connect(None).await?;
        let mut pull = puller.subscribe(SubscribeOptions::new(ack_queue).prefetch(0)).await?;
        let again = pull.receive(ARRIVES).await?.context("a1 again")?;
        assert_eq!((text(&again), again.redelivered()), ("a1".to_owned(), true));
        assert_eq!(text(&pull.receive(ARRIVES).await?.context("a2")?), "a2");
        assert!(pull.receive_no_wait().await?.is_none());
        pull.close().await?;

        for client in [puller, other, client] {
            client.close().await?;
        }
        anyhow::Ok(())
    }
    .await;
    result.with_context(|| format!("Apache ActiveMQ's log:\n{}", activemq.log()))
}
