//! # tests: ferromq's workspace integration tests
//!
//! This crate owns the tests that need the whole broker: an embedded broker on port 0 driven
//! over real sockets (or the in-process `vm://` pipe) by the `client` crate, by raw bytes, and
//! by a randomized model. The library part holds what the test modules share.
//!
//! ## Layout
//!
//! - `src/lib.rs`: starting a broker ([`start_broker`], [`start_broker_with_store`]),
//!   connecting clients ([`connect`]), waiting for messages with the suite's timeouts
//!   ([`recv`], [`assert_nothing_arrives`]) and reading the store ([`stored_count`]);
//! - `src/activemq.rs`: [`ActiveMq`], Apache ActiveMQ (Debian's package) started on a free
//!   port with `tests/activemq/activemq.xml`, for interoperability tests;
//! - `src/pki.rs`: [`TestPki`], a throwaway certificate authority, broker and client
//!   certificates (made by `scripts/test-pki`) and TLS clients that trust it;
//! - `src/raw.rs`: [`RawConnection`], a TCP connection that writes exact bytes and decodes
//!   what comes back, for protocol and bad-input tests;
//! - `src/controlled_store.rs`: [`ControlledStore`], a [`store::MemoryStore`] wrapper that
//!   holds back or fails the completions of message and ack units on demand;
//! - `src/recording_store.rs`: [`RecordingStore`], a [`store::MemoryStore`] wrapper that
//!   records every operation the broker submits, for assertions on what was stored and how;
//! - `tests/integration/`: one test binary, one module per area (`queues`, `receipts`,
//!   `stomp_protocol`, `bad_input`, `connectors`, `model`, `topics`, `durable`, `wildcards`,
//!   `virtual_topics`, `transactions`, `extensions`, `temporary`, `stomp_py`, `jms`,
//!   `openwire`, `openwire_client`, `activemq_tools`, `retroactive`, `gc`);
//! - `activemq/`: the minimal Apache ActiveMQ configuration [`ActiveMq`] runs;
//! - `python/`: checks with a real third-party client (stomp.py), driven by `stomp_py`;
//! - `java/`: checks with the stock ActiveMQ JMS client (`JmsChecks.java`, compiled by
//!   `scripts/test`, which exports `FERROMQ_JMS_CLASSPATH`), driven by `jms`.
//!
//! ## Timing
//!
//! The suite runs on loaded machines. Anything that should happen gets [`ARRIVES`] (5 s);
//! only checks that something does *not* happen wait briefly ([`QUIET`]). Receipts, not
//! sleeps, say when the broker has processed a frame.
//!
//! ```no_run
//! # async fn example() -> anyhow::Result<()> {
//! let broker = tests::start_broker(|config| config.destinations.queue_prefetch = 10).await?;
//! let client = tests::connect(&broker).await?;
//! let mut orders = client.subscribe("/queue/orders", client::AckMode::Auto, &[]).await?;
//! client.send_with_receipt("/queue/orders", "one pizza", &[]).await?;
//! assert_eq!(&tests::recv(&mut orders).await?.body()[..], b"one pizza");
//! broker.shutdown().await;
//! # Ok(()) }
//! ```

mod activemq;
mod controlled_store;
mod pki;
mod raw;
mod recording_store;

use std::sync::Arc;
use std::time::Duration;

use anyhow::Context as _;
use broker::BrokerHandle;
use client::{ConnectOptions, ReceivedMessage, StompClient, Subscription};
use conf::Config;
use store::{Destination, MessageStore, QueueKey, SubscriptionKey};

pub use activemq::{ActiveMq, ACTIVEMQ_HOME, REQUIRE_ACTIVEMQ};
pub use controlled_store::{ControlledStore, Policy};
pub use pki::TestPki;
pub use raw::{RawConnection, RawEvent};
pub use recording_store::{RecordedAdd, RecordingStore};

/// How long the suite waits for something that should happen.
pub const ARRIVES: Duration = Duration::from_secs(5);

/// How long the suite waits to be confident that something does not happen.
pub const QUIET: Duration = Duration::from_millis(250);

/// The configuration every test starts from: the defaults, with one STOMP connector and the
/// admin endpoint on ephemeral loopback ports and the in-memory store (tests of the journal say
/// so themselves).
pub fn test_config() -> Config {
    let mut config = Config::default();
    config.store.kind = conf::StoreKind::Memory;
    config.transport.connectors =
        vec!["stomp://127.0.0.1:0".parse().expect("a valid connector URI")];
    config.admin.bind = "127.0.0.1:0".to_owned();
    config
}

/// Starts a broker on [`test_config`] changed by `configure`, with an in-memory store.
pub async fn start_broker(configure: impl FnOnce(&mut Config)) -> anyhow::Result<BrokerHandle> {
    let mut config = test_config();
    configure(&mut config);
    broker::Broker::start(config).await.context("starting the broker")
}

/// Starts a broker on [`test_config`] changed by `configure`, over `store`.
pub async fn start_broker_with_store(
    store: Arc<dyn MessageStore>,
    configure: impl FnOnce(&mut Config),
) -> anyhow::Result<BrokerHandle> {
    let mut config = test_config();
    configure(&mut config);
    broker::Broker::builder(config).store(store).start().await.context("starting the broker")
}

/// The broker's STOMP address.
pub fn stomp_addr(broker: &BrokerHandle) -> anyhow::Result<std::net::SocketAddr> {
    broker.stomp_addr().context("the broker has no STOMP connector")
}

/// Connects a client to the broker's STOMP connector with default options (STOMP 1.2).
pub async fn connect(broker: &BrokerHandle) -> anyhow::Result<StompClient> {
    connect_with(broker, ConnectOptions::default()).await
}

/// Connects a client to the broker's STOMP connector with `options`.
pub async fn connect_with(
    broker: &BrokerHandle,
    options: ConnectOptions,
) -> anyhow::Result<StompClient> {
    let addr = stomp_addr(broker)?;
    StompClient::connect(addr, options).await.with_context(|| format!("connecting to {addr}"))
}

/// The next message of `subscription`, waiting at most [`ARRIVES`].
pub async fn recv(subscription: &mut Subscription) -> anyhow::Result<ReceivedMessage> {
    let id = subscription.id().to_owned();
    subscription
        .recv_timeout(ARRIVES)
        .await
        .with_context(|| format!("expected a message on subscription {id}"))
}

/// The next `count` messages of `subscription`.
pub async fn recv_n(
    subscription: &mut Subscription,
    count: usize,
) -> anyhow::Result<Vec<ReceivedMessage>> {
    let mut messages = Vec::with_capacity(count);
    for index in 0..count {
        let message =
            recv(subscription).await.with_context(|| format!("message {index} of {count}"))?;
        messages.push(message);
    }
    Ok(messages)
}

/// Fails if a message arrives on `subscription` within [`QUIET`].
pub async fn assert_nothing_arrives(subscription: &mut Subscription) -> anyhow::Result<()> {
    match tokio::time::timeout(QUIET, subscription.recv()).await {
        Err(_) => Ok(()),
        Ok(None) => anyhow::bail!("subscription {} ended unexpectedly", subscription.id()),
        Ok(Some(message)) => anyhow::bail!(
            "expected no message on subscription {}, got {:?} (body {:?})",
            subscription.id(),
            message.message_id(),
            String::from_utf8_lossy(message.body())
        ),
    }
}

/// The bodies of `messages` as strings, for comparisons.
pub fn bodies(messages: &[ReceivedMessage]) -> Vec<String> {
    messages.iter().map(|m| String::from_utf8_lossy(m.body()).into_owned()).collect()
}

/// The stored queue named `name` (a queue destination).
pub fn queue_key(name: &str) -> QueueKey {
    QueueKey::destination(Destination::queue(name))
}

/// How many message references the broker's store holds for queue `name`.
pub fn stored_count(broker: &BrokerHandle, name: &str) -> anyhow::Result<u64> {
    broker.store().count(&queue_key(name)).with_context(|| format!("counting stored queue {name}"))
}

/// Headers that make a SEND persistent.
pub const PERSISTENT: (&str, &str) = ("persistent", "true");

/// Sends `count` persistent messages `"{prefix}{i}"` to `destination`, each confirmed by a
/// receipt.
pub async fn send_persistent(
    client: &StompClient,
    destination: &str,
    prefix: &str,
    count: usize,
) -> anyhow::Result<()> {
    for index in 0..count {
        client
            .send_with_receipt(destination, format!("{prefix}{index}"), &[PERSISTENT])
            .await
            .with_context(|| format!("sending {prefix}{index} to {destination}"))?;
    }
    Ok(())
}

/// Connects a client with JMS client id `client_id` (ActiveMQ's `client-id` CONNECT header),
/// as durable subscribers do.
pub async fn connect_as(broker: &BrokerHandle, client_id: &str) -> anyhow::Result<StompClient> {
    connect_with(
        broker,
        ConnectOptions { client_id: Some(client_id.to_owned()), ..ConnectOptions::default() },
    )
    .await
}

/// The header that makes a topic subscription durable under a name.
pub const SUBSCRIPTION_NAME: &str = "activemq.subscriptionName";

/// The stored queue of durable subscription `name` of client `client_id` on topic `topic`.
pub fn durable_key(topic: &str, client_id: &str, name: &str) -> QueueKey {
    QueueKey::durable(
        Destination::topic(topic),
        SubscriptionKey { client_id: client_id.into(), name: name.into() },
    )
}

/// How many message references the broker's store holds for `key`.
pub fn stored_count_of(broker: &BrokerHandle, key: &QueueKey) -> anyhow::Result<u64> {
    broker.store().count(key).with_context(|| format!("counting stored queue {key:?}"))
}

/// Waits (at most [`ARRIVES`]) until `condition` holds, checking every few milliseconds;
/// fails naming `what` otherwise.
pub async fn wait_until<F, Fut>(what: &str, mut condition: F) -> anyhow::Result<()>
where
    F: FnMut() -> Fut,
    Fut: std::future::Future<Output = bool>,
{
    let deadline = tokio::time::Instant::now() + ARRIVES;
    loop {
        if condition().await {
            return Ok(());
        }
        if tokio::time::Instant::now() >= deadline {
            anyhow::bail!("timed out after {ARRIVES:?} waiting until {what}");
        }
        tokio::time::sleep(Duration::from_millis(5)).await;
    }
}

/// Waits until durable subscription `name` of `client_id` has no consumer attached (after a
/// connection that held it dropped without DISCONNECT, the broker notices in its own time).
pub async fn wait_durable_inactive(
    broker: &BrokerHandle,
    client_id: &str,
    name: &str,
) -> anyhow::Result<()> {
    wait_until(&format!("durable subscription {client_id}/{name} has no consumer"), || async {
        broker.durable_subscription_stats(client_id, name).await.is_some_and(|s| s.consumers == 0)
    })
    .await
}

/// The `message` header of the ERROR a failed request got, or a failure if it did not fail
/// with an ERROR from the server.
pub fn server_error<T: std::fmt::Debug>(
    result: Result<T, client::ClientError>,
) -> anyhow::Result<String> {
    match result {
        Err(client::ClientError::ServerError { message, .. }) => Ok(message),
        other => anyhow::bail!("expected an ERROR frame from the broker, got {other:?}"),
    }
}
