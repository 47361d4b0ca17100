//! [`MqttClient`]: the CONNECT handshake and the handle.

use std::sync::atomic::{AtomicU64, Ordering};
use std::sync::Arc;
use std::time::Duration;

use bytes::{Bytes, BytesMut};
use protocol::mqtt::{Codec, Connect, Limits, Packet, Publish, QoS, Version};
use tokio::io::{AsyncRead, AsyncReadExt, AsyncWrite, AsyncWriteExt};
use tokio::sync::{mpsc, oneshot, Mutex, Semaphore};

use super::connection::{self, Request};
use crate::ClientError;

/// How to connect.
#[derive(Debug, Clone)]
pub struct MqttOptions {
    /// 3.1.1 (the default) or 5.0.
    pub version: Version,
    /// The client identifier; empty: one is generated (`ferromq-…`).
    pub client_id: String,
    /// Start a new session (3.1.1's clean session, 5.0's clean start).
    pub clean_session: bool,
    /// The keep-alive interval announced in CONNECT; zero turns keep alive off.
    pub keep_alive: Duration,
    /// The user name, if any.
    pub username: Option<String>,
    /// The password, if any.
    pub password: Option<String>,
    /// How long the CONNACK, a SUBACK or UNSUBACK, or a confirmation may take.
    pub timeout: Duration,
    /// How many QoS 1/2 publishes may be unacknowledged at once (at least 1).
    pub max_in_flight: usize,
}

impl Default for MqttOptions {
    fn default() -> MqttOptions {
        MqttOptions {
            version: Version::V3_1_1,
            client_id: String::new(),
            clean_session: true,
            keep_alive: Duration::from_secs(30),
            username: None,
            password: None,
            timeout: Duration::from_secs(15),
            max_in_flight: 64,
        }
    }
}

/// A received PUBLISH.
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct Message {
    /// The topic name it was published to.
    pub topic: String,
    /// The payload.
    pub payload: Bytes,
    /// The QoS it was delivered at.
    pub qos: QoS,
    /// A retained message.
    pub retain: bool,
    /// The broker marked it as a possible redelivery.
    pub dup: bool,
}

/// The outcome of one [`MqttClient::publish`], to wait for when it matters.
#[derive(Debug)]
#[must_use = "a publish is confirmed only when its confirmation is waited for"]
pub struct Confirmation {
    done: oneshot::Receiver<Result<(), ClientError>>,
    timeout: Duration,
    what: String,
}

impl Confirmation {
    /// The outcome if it is already known, without waiting (`None`: still in flight).
    pub fn try_outcome(&mut self) -> Option<Result<(), ClientError>> {
        match self.done.try_recv() {
            Ok(outcome) => Some(outcome),
            Err(oneshot::error::TryRecvError::Empty) => None,
            Err(oneshot::error::TryRecvError::Closed) => Some(Err(ClientError::Closed)),
        }
    }

    /// Waits for the PUBACK (QoS 1), the PUBCOMP (QoS 2), or the write (QoS 0).
    pub async fn wait(self) -> Result<(), ClientError> {
        match tokio::time::timeout(self.timeout, self.done).await {
            Ok(Ok(outcome)) => outcome,
            Ok(Err(_)) => Err(ClientError::Closed),
            Err(_) => Err(ClientError::Timeout { waiting_for: self.what, after: self.timeout }),
        }
    }
}

/// A connection to an MQTT broker (see the [module](super) documentation).
#[derive(Debug)]
pub struct MqttClient {
    requests: mpsc::Sender<Request>,
    window: Arc<Semaphore>,
    messages: Mutex<mpsc::Receiver<Message>>,
    timeout: Duration,
    client_id: String,
    version: Version,
}

/// Numbers generated client ids within the process.
static NEXT_CLIENT: AtomicU64 = AtomicU64::new(1);

impl MqttClient {
    /// Connects over TCP to `host:port`, trying every address the host resolves to.
    pub async fn connect(
        host: &str,
        port: u16,
        options: MqttOptions,
    ) -> Result<MqttClient, ClientError> {
        let stream = crate::connect_tcp(host, port, options.timeout).await?;
        MqttClient::connect_stream(stream, options).await
    }

    /// Connects over an open byte stream (TLS, an in-process pipe).
    pub async fn connect_stream<S>(
        mut stream: S,
        options: MqttOptions,
    ) -> Result<MqttClient, ClientError>
    where
        S: AsyncRead + AsyncWrite + Unpin + Send + 'static,
    {
        let mut client_id = options.client_id.clone();
        if client_id.is_empty() {
            let n = NEXT_CLIENT.fetch_add(1, Ordering::Relaxed);
            client_id = format!("ferromq-{:x}-{n}", std::process::id());
        }
        let mut connect = Connect::new(options.version, client_id.clone());
        connect.clean_start = options.clean_session;
        connect.keep_alive = u16::try_from(options.keep_alive.as_secs()).unwrap_or(u16::MAX);
        connect.username = options.username.clone();
        connect.password = options.password.clone().map(Bytes::from);
        let mut codec = Codec::new(Limits::default());
        let mut out = BytesMut::new();
        codec.encode(&connect.into(), &mut out)?;
        stream.write_all(&out).await?;
        stream.flush().await?;

        let mut buffer = BytesMut::with_capacity(8 * 1024);
        let read_connack = async {
            loop {
                if let Some(packet) = codec.decode(&mut buffer)? {
                    return Ok::<Packet, ClientError>(packet);
                }
                if stream.read_buf(&mut buffer).await? == 0 {
                    return Err(ClientError::Closed);
                }
            }
        };
        let packet =
            tokio::time::timeout(options.timeout, read_connack).await.map_err(|_| {
                ClientError::Timeout { waiting_for: "the CONNACK".into(), after: options.timeout }
            })??;
        let connack = match packet {
            Packet::Connack(connack) => connack,
            other => {
                return Err(ClientError::protocol(format!(
                    "the broker answered the CONNECT with {} instead of CONNACK",
                    other.packet_type()
                )))
            }
        };
        if connack.reason.is_error() {
            return Err(ClientError::MqttRefused {
                request: "CONNECT".into(),
                reason: connack.reason,
            });
        }
        if let Some(assigned) = connack.properties.assigned_client_identifier() {
            client_id = assigned.to_string();
        }
        if let Some(max) = connack.properties.maximum_packet_size() {
            codec.set_peer_max_packet_size(max);
        }
        let keep_alive = match connack.properties.server_keep_alive() {
            Some(seconds) => Duration::from_secs(u64::from(seconds)),
            None => options.keep_alive,
        };
        let receive_maximum = connack.properties.receive_maximum().map_or(usize::MAX, usize::from);
        let window = Arc::new(Semaphore::new(options.max_in_flight.clamp(1, receive_maximum)));

        let (requests, requests_rx) = mpsc::channel(256);
        let (messages_tx, messages) = mpsc::channel(1024);
        tokio::spawn(connection::run(stream, codec, buffer, requests_rx, messages_tx, keep_alive));
        Ok(MqttClient {
            requests,
            window,
            messages: Mutex::new(messages),
            timeout: options.timeout,
            client_id,
            version: options.version,
        })
    }

    /// The client identifier in use (the broker's, if it assigned one).
    pub fn client_id(&self) -> &str {
        &self.client_id
    }

    /// The protocol version.
    pub fn version(&self) -> Version {
        self.version
    }

    /// Whether the connection has ended (the broker closed it, or it failed).
    pub fn is_closed(&self) -> bool {
        self.requests.is_closed()
    }

    /// Publishes `payload` to `topic`; waits only for room in the window of QoS 1/2
    /// publishes in flight. Wait for the returned [`Confirmation`] for the broker's answer.
    pub async fn publish(
        &self,
        topic: &str,
        payload: impl Into<Bytes>,
        qos: QoS,
        retain: bool,
    ) -> Result<Confirmation, ClientError> {
        self.publish_packet(Publish { qos, retain, ..Publish::new(topic, payload) }).await
    }

    /// Publishes a PUBLISH as given (5.0 properties, ...); its packet id is the client's.
    pub async fn publish_packet(&self, publish: Publish) -> Result<Confirmation, ClientError> {
        let permit = match publish.qos {
            QoS::AtMostOnce => None,
            _ => Some(
                Arc::clone(&self.window).acquire_owned().await.map_err(|_| ClientError::Closed)?,
            ),
        };
        let what = format!("the broker's acknowledgement of a PUBLISH to {}", publish.topic);
        let (done, done_rx) = oneshot::channel();
        self.request(Request::Publish { publish, permit, done }).await?;
        Ok(Confirmation { done: done_rx, timeout: self.timeout, what })
    }

    /// Subscribes to `filter`, returning the QoS the broker granted.
    pub async fn subscribe(&self, filter: &str, qos: QoS) -> Result<QoS, ClientError> {
        let (done, done_rx) = oneshot::channel();
        self.request(Request::Subscribe { filter: filter.to_string(), qos, done }).await?;
        self.answer(done_rx, format!("the SUBACK for {filter}")).await?
    }

    /// Unsubscribes from `filter`.
    pub async fn unsubscribe(&self, filter: &str) -> Result<(), ClientError> {
        let (done, done_rx) = oneshot::channel();
        self.request(Request::Unsubscribe { filter: filter.to_string(), done }).await?;
        self.answer(done_rx, format!("the UNSUBACK for {filter}")).await?
    }

    /// The next message of any subscription, or `None` if none came within `timeout`.
    /// Fails with [`ClientError::Closed`] once the connection is gone.
    pub async fn recv(&self, timeout: Duration) -> Result<Option<Message>, ClientError> {
        let mut messages = self.messages.lock().await;
        match tokio::time::timeout(timeout, messages.recv()).await {
            Ok(Some(message)) => Ok(Some(message)),
            Ok(None) => Err(ClientError::Closed),
            Err(_) => Ok(None),
        }
    }

    /// Sends DISCONNECT (after everything queued before it) and closes the connection.
    pub async fn disconnect(self) -> Result<(), ClientError> {
        let (done, done_rx) = oneshot::channel();
        self.request(Request::Disconnect { done }).await?;
        self.answer(done_rx, "the DISCONNECT to be written".into()).await?
    }

    async fn request(&self, request: Request) -> Result<(), ClientError> {
        self.requests.send(request).await.map_err(|_| ClientError::Closed)
    }

    async fn answer<T>(
        &self,
        done: oneshot::Receiver<T>,
        waiting_for: String,
    ) -> Result<T, ClientError> {
        match tokio::time::timeout(self.timeout, done).await {
            Ok(Ok(answer)) => Ok(answer),
            Ok(Err(_)) => Err(ClientError::Closed),
            Err(_) => Err(ClientError::Timeout { waiting_for, after: self.timeout }),
        }
    }
}
