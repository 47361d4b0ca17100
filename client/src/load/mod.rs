//! The load generator: producers and consumers that send or receive a number of messages
//! over several connections and report throughput and latency.
//!
//! It is the one load generator of ferromq: `ferromq producer` and `ferromq consumer` (the
//! equivalents of ActiveMQ's `activemq producer` and `activemq consumer`), and
//! `ferromq perf` ([`perf`]) and the end-to-end benches, all call [`run_producer`] and
//! [`run_consumer`]. The options are ActiveMQ's tool options and their meaning; the
//! interface names no protocol: the [`BrokerUrl`]'s scheme chooses OpenWire (`tcp://`,
//! `nio://`, the default, as with ActiveMQ's tools), STOMP (`stomp://`), AMQP 1.0
//! (`amqp://`) or MQTT 3.1.1 (`mqtt://`), and refuses the others with the reason.
//!
//! **Failover.** A `failover:(tcp://a,tcp://b)?options` URL ([`FailoverOptions`], ActiveMQ's
//! names and defaults) gives each thread a list to reconnect through when its connection is
//! lost (`failover.rs`); producers resend what was not confirmed with the same message ids,
//! which the broker's duplicate detection recognises, and consumers subscribe again and do
//! not count a redelivered message twice (see `produce` and `consume`). OpenWire and STOMP
//! only.
//!
//! **AMQP** goes through [`crate::amqp`], which has neither transactions nor pre-settled
//! sends: a transaction batch size, a durable subscription or a selector over AMQP is refused
//! before connecting ([`LoadError::InvalidOptions`]); every send waits for the broker's
//! `accepted` (so a producer's latency is the send latency whatever the delivery mode); every
//! acknowledgement mode accepts each message as it is counted (AMQP has no cumulative
//! acknowledgement, and an accept is not answered).
//!
//! **MQTT** goes through [`crate::mqtt`] (3.1.1): topics only, `topic://a.b` being the MQTT
//! topic `a/b` (`*` and `>` as `+` and `#`), as ActiveMQ maps them; a queue, a transaction
//! batch size, a durable subscription, a selector or a failover URL is refused before
//! connecting. Persistent messages go at QoS 1, non-persistent at QoS 0; sends are windowed
//! (up to 256 unacknowledged QoS 1 publishes per thread) and only the last of each thread is
//! waited for (the PUBACKs confirm in order), unless [`ProducerOptions::sync_send`] asks for
//! each. Consumers subscribe at QoS 1 and the client acknowledges each message as it
//! arrives, whatever the acknowledgement mode. 3.1.1 has no message properties: no
//! end-to-end latency, no message groups, no time to live over MQTT.
//!
//! ## What a run does
//!
//! Every "thread" is a tokio task with its own connection, named like ActiveMQ's threads
//! (`producer-1`, `consumer-2`, ...). Message counts are per thread, as in ActiveMQ: three
//! producer threads with `message_count` 1000 send 3000 messages.
//!
//! **Producer.** All threads connect first; the clock starts when the last one is ready.
//! The body is ActiveMQ's: with `message_size` 0 a text message `test message: N`, else a
//! bytes message of `message_size` dots. Sends are synchronous (each waits for the broker's
//! receipt or OpenWire response, which ferromq writes once a persistent message is stored)
//! when [`ProducerOptions::sync_send`] says so, by default for persistent sends outside
//! transactions, like ActiveMQ's JMS client. Otherwise sends are not waited for, except the
//! last of each thread, whose confirmation confirms all of them (they come in order).
//! With a transaction batch size N, each thread sends N messages in a transaction, commits
//! (waiting for the broker), and again; a final partial batch is committed.
//!
//! **Consumer.** Each thread subscribes, then receives until it has its count, or until no
//! message came for [`ConsumerOptions::receive_timeout`] (zero, the default, waits forever
//! like ActiveMQ's tool). The clock starts at the first message of any thread. A thread
//! acknowledges only the messages it counts, so when a queue consumer stops, the messages
//! the broker had already pushed to it go to the other consumers. Acknowledgement follows
//! the JMS mode (see [`ConsumerAckMode`]); with a transaction batch size N, acks are sent in
//! a transaction committed every N messages (a final partial batch is committed too). Over
//! OpenWire a thread's consumer has ActiveMQ's default prefetch and its session the JMS
//! acknowledgement mode ([`crate::openwire::SessionMode`]).
//!
//! ## Reports
//!
//! [`LoadReport`] has the totals, the per-thread counts and, when the run waited for
//! something, percentiles of that wait: send latency (synchronous sends), commit latency
//! (transactions), ack latency (client acknowledgement), or for an auto-acknowledging
//! consumer the gap between messages. Its `Display` is the summary line the CLI prints.
//! An [`Observer`] sees each thread become ready and finish.

mod consumer;
mod failover;
mod meter;
pub mod perf;
mod producer;
mod report;
mod target;

use std::sync::Arc;
use std::time::Duration;

pub use consumer::{run_consumer, run_consumer_observed, ConsumerAckMode, ConsumerOptions};
pub use failover::{FailoverOptions, FAILOVER_OPTION_NAMES};
pub use meter::Meter;
pub use producer::{run_producer, run_producer_observed, ProducerOptions, STOMP_MESSAGE_ID_HEADER};
pub use report::{Latencies, LoadReport, Role};
pub use target::{
    BrokerUrl, DestinationKind, DestinationName, Endpoint, WireProtocol, DEFAULT_AMQP_PORT,
    DEFAULT_MQTT_PORT, DEFAULT_OPENWIRE_PORT, DEFAULT_STOMP_PORT,
};

use crate::amqp::{AmqpClient, AmqpOptions};
use crate::mqtt::{MqttClient, MqttOptions};
use crate::openwire::{OpenWireClient, OpenWireOptions};
use crate::{ClientError, ConnectOptions, StompClient};

/// Why a load run failed.
#[derive(Debug, thiserror::Error)]
#[non_exhaustive]
pub enum LoadError {
    /// The broker URL cannot be used.
    #[error("invalid broker URL `{url}`: {reason}")]
    InvalidUrl {
        /// The URL as given.
        url: String,
        /// What is wrong, and what to use instead.
        reason: String,
    },
    /// The destination cannot be used.
    #[error("invalid destination `{destination}`: {reason}")]
    InvalidDestination {
        /// The destination as given.
        destination: String,
        /// What is wrong.
        reason: String,
    },
    /// The options contradict each other or are out of range.
    #[error("{0}")]
    InvalidOptions(String),
    /// A thread could not connect (the broker is not there, or refused the CONNECT).
    #[error("{thread} cannot connect to {url}: {}", explain(source))]
    Connect {
        /// The thread, e.g. `producer-1`.
        thread: String,
        /// The broker URL.
        url: String,
        /// Why.
        source: ClientError,
    },
    /// A consumer thread could not subscribe.
    #[error("{thread} cannot subscribe to {destination}: {}", explain(source))]
    Subscribe {
        /// The thread, e.g. `consumer-1`.
        thread: String,
        /// The destination, e.g. `topic://prices`.
        destination: String,
        /// Why.
        source: ClientError,
    },
    /// A thread failed while running.
    #[error("{thread} failed after {after} messages: {}", explain(source))]
    Failed {
        /// The thread, e.g. `producer-1`.
        thread: String,
        /// How many messages it had sent or received before.
        after: u64,
        /// Why.
        source: ClientError,
    },
    /// A thread ended abnormally (a bug in the load generator).
    #[error("a load thread ended abnormally: {0}")]
    Aborted(String),
}

/// A client error, with the body of a server's ERROR frame (often the details) added.
fn explain(error: &ClientError) -> String {
    match error {
        ClientError::ServerError { body, .. } if !body.trim().is_empty() => {
            format!("{error} ({})", body.trim())
        }
        ClientError::Io(io) if io.kind() == std::io::ErrorKind::ConnectionRefused => {
            format!("{error} (is a broker listening there?)")
        }
        // ActiveMQ's authentication plugins answer a bad login with java.lang or
        // javax.jms SecurityException; say what to check, whatever the broker's wording.
        ClientError::Exception { class, .. } if class.ends_with("SecurityException") => {
            format!("{error} (check the user name and password)")
        }
        _ => error.to_string(),
    }
}

/// What a load run reports while it runs, to an [`Observer`].
#[derive(Debug, Clone, PartialEq, Eq)]
#[non_exhaustive]
pub enum LoadEvent {
    /// A thread is connected (producer) or subscribed (consumer): messages sent from now
    /// on reach a consumer.
    Ready {
        /// The thread, e.g. `consumer-1`.
        thread: String,
    },
    /// A thread is done.
    Finished {
        /// The thread, e.g. `producer-1`.
        thread: String,
        /// The messages it sent or received.
        messages: u64,
        /// The messages it was asked for.
        expected: u64,
        /// From its start (producer) or first message (consumer) to its last.
        elapsed: Duration,
        /// Set when a consumer stopped because nothing came for this long.
        idle_timeout: Option<Duration>,
    },
}

/// Called from the run's tasks for each [`LoadEvent`].
pub type Observer = Arc<dyn Fn(&LoadEvent) + Send + Sync>;

/// An observer that ignores everything.
fn no_observer() -> Observer {
    Arc::new(|_| {})
}

/// `producer-1`, `consumer-2`: ActiveMQ's thread names (numbered from 1); with a prefix,
/// the perf plugin's client names `JmsProducer0`, `JmsConsumer1` (numbered from 0).
fn thread_label(prefix: Option<&str>, role: &str, index: usize) -> String {
    match prefix {
        Some(prefix) => format!("{prefix}{index}"),
        None => format!("{role}-{}", index + 1),
    }
}

/// The message property (STOMP header) in which a producer with
/// [`ProducerOptions::stamp_send_time`] puts the send time, in microseconds since the Unix
/// epoch, and from which a consumer measures end-to-end latency. A valid JMS property name,
/// so it crosses between OpenWire and STOMP.
pub const SENT_AT_PROPERTY: &str = "ferromqPerfSentAtMicros";

/// One thread's connection, over the protocol of the broker URL.
enum Connection {
    Stomp(StompClient),
    OpenWire(OpenWireClient),
    Amqp(AmqpClient),
    Mqtt(MqttClient),
}

impl Connection {
    /// Closes gracefully (DISCONNECT, or OpenWire's RemoveInfo and ShutdownInfo); the
    /// outcome adds nothing once the messages are confirmed.
    async fn close(self) {
        let _ = match self {
            Connection::Stomp(client) => client.disconnect().await,
            Connection::OpenWire(client) => client.close().await,
            Connection::Amqp(client) => client.close().await,
            Connection::Mqtt(client) => client.disconnect().await,
        };
    }
}

/// What the AMQP client cannot do, as the option that asks for it: `None` when the run can
/// go over AMQP. `what` names each option as the caller's user knows it.
pub(crate) fn amqp_refusal(broker: &BrokerUrl, asked: &[(bool, &str)]) -> Option<LoadError> {
    if broker.protocol() != WireProtocol::Amqp {
        return None;
    }
    let (_, option) = asked.iter().find(|(asked, _)| *asked)?;
    Some(LoadError::InvalidOptions(format!(
        "{option} is not supported over AMQP ({broker}): ferromq's AMQP client has no \
         transactions, durable subscriptions or selectors; remove it, or use OpenWire \
         (tcp://) or STOMP (stomp://)"
    )))
}

/// What MQTT cannot do, as the option or destination that asks for it: `None` when the
/// run can go over MQTT (or is not over MQTT). MQTT names topics only, and ferromq's MQTT
/// client has no transactions; a durable subscription would be a persistent session, which
/// the load generator does not keep.
pub(crate) fn mqtt_refusal(
    broker: &BrokerUrl,
    destinations: &[&DestinationName],
    asked: &[(bool, &str)],
) -> Option<LoadError> {
    if broker.protocol() != WireProtocol::Mqtt {
        return None;
    }
    if let Some(queue) = destinations.iter().find(|destination| !destination.is_topic()) {
        return Some(LoadError::InvalidDestination {
            destination: queue.to_string(),
            reason: format!(
                "MQTT ({broker}) has topics only; use a topic (topic://NAME, the MQTT topic \
                 NAME with `.` as `/`), or OpenWire (tcp://), STOMP (stomp://) or AMQP \
                 (amqp://) for a queue"
            ),
        });
    }
    if broker.failover().is_some() {
        return Some(LoadError::InvalidUrl {
            url: broker.to_string(),
            reason: "failover: over MQTT is not implemented in ferromq's load generator; use \
                     one mqtt:// URL, or failover: over OpenWire (tcp://) or STOMP (stomp://)"
                .into(),
        });
    }
    let (_, option) = asked.iter().find(|(asked, _)| *asked)?;
    Some(LoadError::InvalidOptions(format!(
        "{option} is not supported over MQTT ({broker}): MQTT 3.1.1 and ferromq's MQTT \
         client have no transactions, durable subscriptions, selectors, time to live or \
         message groups; remove it, or use OpenWire (tcp://) or STOMP (stomp://)"
    )))
}

/// How many QoS 1 publishes a load thread keeps unacknowledged over MQTT.
const MQTT_IN_FLIGHT: usize = 256;

/// How long connecting and each confirmation may take.
const TIMEOUT: Duration = Duration::from_secs(15);

/// Whether `error` means the connection is gone or unusable (rather than the broker
/// refusing what was asked): the cases a `failover:` URL reconnects on, as ActiveMQ's
/// failover transport does on any transport failure. A timeout counts: the broker did not
/// answer in 15 s, and a resend is harmless where duplicate detection absorbs it; so do
/// bytes that break the protocol, and OpenWire's ConnectionControl asking the client to go.
pub(crate) fn connection_lost(error: &ClientError) -> bool {
    matches!(
        error,
        ClientError::Io(_)
            | ClientError::Closed
            | ClientError::Timeout { .. }
            | ClientError::Wire(_)
            | ClientError::OpenWire(_)
            | ClientError::Amqp(_)
            | ClientError::Mqtt(_)
            | ClientError::Protocol { .. }
    )
}

/// What one thread needs to open (and reopen) its connection.
pub(crate) struct Dialer {
    pub(crate) broker: BrokerUrl,
    pub(crate) user: Option<String>,
    pub(crate) password: Option<String>,
    pub(crate) client_id: Option<String>,
    /// The OpenWire connection id every connection of the thread announces (a producer's:
    /// its message ids then stay those of one producer across reconnects); `None`: a new
    /// one each time.
    pub(crate) connection_id: Option<String>,
    pub(crate) thread: String,
}

impl Dialer {
    /// Opens a connection to `endpoint`, trying every address its host resolves to.
    async fn connect(&self, endpoint: &Endpoint) -> Result<Connection, LoadError> {
        let failed = |source| LoadError::Connect {
            thread: self.thread.clone(),
            url: endpoint.to_string(),
            source,
        };
        let (user, password, client_id) =
            (self.user.clone(), self.password.clone(), self.client_id.clone());
        match endpoint.protocol() {
            WireProtocol::Stomp => {
                let options = ConnectOptions {
                    login: user,
                    passcode: password,
                    client_id,
                    timeout: TIMEOUT,
                    ..ConnectOptions::default()
                };
                let client = match endpoint.uses_tls() {
                    true => {
                        let stream = self.tls_stream(endpoint).await.map_err(failed)?;
                        StompClient::connect_stream(stream, options).await
                    }
                    false => {
                        let stream = crate::connect_tcp(endpoint.host(), endpoint.port(), TIMEOUT)
                            .await
                            .map_err(failed)?;
                        StompClient::connect_stream(stream, options).await
                    }
                };
                Ok(Connection::Stomp(client.map_err(failed)?))
            }
            WireProtocol::OpenWire => {
                let options = OpenWireOptions {
                    user,
                    password,
                    client_id,
                    timeout: TIMEOUT,
                    connection_id: self.connection_id.clone(),
                    ..OpenWireOptions::default()
                };
                let client = match endpoint.uses_tls() {
                    true => {
                        let stream = self.tls_stream(endpoint).await.map_err(failed)?;
                        OpenWireClient::connect_stream(stream, options).await
                    }
                    false => {
                        OpenWireClient::connect(endpoint.host(), endpoint.port(), options).await
                    }
                };
                Ok(Connection::OpenWire(client.map_err(failed)?))
            }
            WireProtocol::Amqp => {
                // The AMQP container id plays the client id's part (durable subscriptions are
                // keyed by it).
                let options = AmqpOptions {
                    container_id: client_id,
                    user,
                    password,
                    timeout: TIMEOUT,
                    ..AmqpOptions::default()
                };
                let client = match endpoint.uses_tls() {
                    true => {
                        let stream = self.tls_stream(endpoint).await.map_err(failed)?;
                        AmqpClient::connect_stream(stream, options).await
                    }
                    false => AmqpClient::connect(endpoint.host(), endpoint.port(), options).await,
                };
                Ok(Connection::Amqp(client.map_err(failed)?))
            }
            WireProtocol::Mqtt => {
                let options = MqttOptions {
                    client_id: client_id.unwrap_or_default(),
                    username: user,
                    password,
                    timeout: TIMEOUT,
                    max_in_flight: MQTT_IN_FLIGHT,
                    ..MqttOptions::default()
                };
                let client = match endpoint.uses_tls() {
                    true => {
                        let stream = self.tls_stream(endpoint).await.map_err(failed)?;
                        MqttClient::connect_stream(stream, options).await
                    }
                    false => MqttClient::connect(endpoint.host(), endpoint.port(), options).await,
                };
                Ok(Connection::Mqtt(client.map_err(failed)?))
            }
        }
    }

    /// A TLS connection to `endpoint`, trusting the URL's trust store.
    async fn tls_stream(
        &self,
        endpoint: &Endpoint,
    ) -> Result<tokio_rustls::client::TlsStream<tokio::net::TcpStream>, crate::ClientError> {
        crate::connect_tls(endpoint.host(), endpoint.port(), self.broker.trust_store(), TIMEOUT)
            .await
    }
}

/// Refuses a failover URL over AMQP: the AMQP client has no way to resend with the same
/// identity or to resume a subscription, so reconnecting would lose or duplicate silently.
pub(crate) fn amqp_failover_refusal(broker: &BrokerUrl) -> Option<LoadError> {
    (broker.protocol() == WireProtocol::Amqp && broker.failover().is_some()).then(|| {
        LoadError::InvalidUrl {
            url: broker.to_string(),
            reason: "failover: over AMQP is not implemented in ferromq's load generator \
                     (no reconnecting with AMQP's link recovery yet); use one amqp:// URL, or \
                     failover: over OpenWire (tcp://) or STOMP (stomp://)"
                .into(),
        }
    })
}

/// Microseconds since the Unix epoch (for [`SENT_AT_PROPERTY`]).
fn now_micros() -> i64 {
    std::time::SystemTime::now()
        .duration_since(std::time::UNIX_EPOCH)
        .map(|d| i64::try_from(d.as_micros()).unwrap_or(i64::MAX))
        .unwrap_or(0)
}

/// Milliseconds since the Unix epoch (for `expires`).
fn now_millis() -> u64 {
    std::time::SystemTime::now()
        .duration_since(std::time::UNIX_EPOCH)
        .map(|d| u64::try_from(d.as_millis()).unwrap_or(u64::MAX))
        .unwrap_or(0)
}
