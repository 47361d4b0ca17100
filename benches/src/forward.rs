//! Seed 004's flow (BENCHMARKS.md's S8): a consumer takes each message from one queue and
//! sends it on to another, one at a time, persistent. In the seed a ServiceMix route did
//! this (JMS consumer, EIP pipeline, JMS provider) and ActiveMQ's journal store moved 48.8
//! messages a second where its journaled JDBC store moved 7.3.
//!
//! Here the messages are put on the first queue beforehand (untimed), then one OpenWire
//! connection with an individual-acknowledge session forwards them: receive, a synchronous
//! persistent send of the same body to the second queue (waits for the store), then the ack
//! of the received message (waits for the broker). Nothing is lost if the forwarder dies
//! between the send and the ack; the message may be forwarded twice, as with the seed's
//! non-XA route. The figure is forwarded messages per second.

use std::net::SocketAddr;
use std::time::{Duration, Instant};

use anyhow::{ensure, Context};
use client::load::{run_producer, BrokerUrl, DestinationName, ProducerOptions};
use client::openwire::{
    Destination, OpenWireClient, OpenWireOptions, OutgoingMessage, SessionMode, SubscribeOptions,
};

const MESSAGE_SIZE: usize = 1024;
const RECEIVE_TIMEOUT: Duration = Duration::from_secs(60);

/// Puts `messages` persistent 1 KiB messages on `queue` through the load generator, sent
/// without waiting for each (the last one's confirmation confirms them all).
pub async fn fill(broker: &BrokerUrl, queue: &str, messages: u64) -> anyhow::Result<()> {
    let options = ProducerOptions {
        broker: broker.clone(),
        destination: DestinationName::queue(queue),
        message_count: messages,
        message_size: MESSAGE_SIZE,
        persistent: true,
        sync_send: Some(false),
        ..ProducerOptions::default()
    };
    let report = run_producer(options).await.context("filling the first queue")?;
    ensure!(report.is_complete(), "filling the first queue: {report}");
    Ok(())
}

/// Forwards `messages` from `from` to `to` over OpenWire at `addr`, one at a time; returns
/// the time it took, from the first receive to the last ack.
pub async fn forward(
    addr: SocketAddr,
    from: &str,
    to: &str,
    messages: u64,
) -> anyhow::Result<Duration> {
    let client =
        OpenWireClient::connect(&addr.ip().to_string(), addr.port(), OpenWireOptions::default())
            .await?;
    let session = client.session(SessionMode::Individual).await?;
    let mut consumer = session.consumer(SubscribeOptions::new(Destination::queue(from))).await?;
    let producer = session.producer(Some(Destination::queue(to))).await?;
    let start = Instant::now();
    for i in 0..messages {
        let received = consumer
            .receive(RECEIVE_TIMEOUT)
            .await?
            .with_context(|| format!("message {i} of {messages} did not come"))?;
        producer.send(&OutgoingMessage::bytes(received.body_bytes()).persistent(true)).await?;
        consumer.ack(&received).await?;
    }
    let elapsed = start.elapsed();
    client.close().await?;
    Ok(elapsed)
}
