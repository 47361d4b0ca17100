//! The STOMP protocol adapter: turns STOMP frames into core commands and deliveries into
//! MESSAGE frames. One [`Connection`] task per socket owns all of the connection's state; a
//! separate writer task owns the socket's writing half.

mod mapping;
mod writer;

use std::collections::{HashMap, VecDeque};
use std::future::Future;
use std::pin::Pin;
use std::sync::Arc;
use std::time::Duration;

use bytes::BytesMut;
use futures_util::stream::{FuturesOrdered, StreamExt};
use protocol::stomp::{self, Codec, Command, Decoded, Frame, Version, WireError};
use store::MessageId;
use tokio::io::{AsyncRead, AsyncReadExt, AsyncWrite};
use tokio::sync::mpsc;
use tokio::time::Instant;

use crate::core::{AckMode, ConsumerId, ConsumerSpec, CoreError, Delivery, QueueHandle};
use crate::transport::ConnectionContext;
use writer::WriteItem;

pub use mapping::parse_destination;

/// How long a closing connection's last frames may take to be written.
const WRITER_DRAIN_LIMIT: Duration = Duration::from_secs(5);

/// A response that waits for the store: the frame to write once it resolves, and whether the
/// connection must close after writing it.
type Pending = Pin<Box<dyn Future<Output = Outcome> + Send>>;

struct Outcome {
    frame: Option<Frame>,
    close: bool,
}

/// An ERROR frame to send, after which the connection closes (STOMP requires the close).
struct Fatal(Frame);

impl Fatal {
    fn new(request: Option<&Frame>, message: &str, details: &str) -> Self {
        let mut frame = Frame::error(message, details);
        if let Some(receipt) = request.and_then(|f| f.get("receipt")) {
            frame.push_header("receipt-id", receipt);
        }
        Fatal(frame)
    }
}

impl From<WireError> for Fatal {
    fn from(error: WireError) -> Self {
        Fatal::new(None, &error.to_string(), "the connection is closed because of this frame")
    }
}

/// One subscription of this connection.
struct Subscription {
    consumer: ConsumerId,
    queue: QueueHandle,
    ack_mode: AckMode,
    /// Messages delivered and not yet acknowledged, in delivery order: (message-id, id).
    delivered: VecDeque<(Arc<str>, MessageId)>,
}

/// Serves one STOMP connection until it closes.
pub(crate) async fn serve<S>(stream: S, context: Arc<ConnectionContext>, peer: String)
where
    S: AsyncRead + AsyncWrite + Send + Unpin + 'static,
{
    let (reader, write_half) = tokio::io::split(stream);
    let (out, items) = mpsc::unbounded_channel();
    let writer = tokio::spawn(writer::run(write_half, items, context.core.clone()));
    let (deliveries_tx, deliveries) = mpsc::unbounded_channel();
    let connection_id = context.core.next_connection_id();
    let mut connection = Connection {
        codec: Codec::new(context.limits),
        context,
        connection_id,
        peer,
        out,
        deliveries_tx,
        deliveries,
        subscriptions: HashMap::new(),
        by_consumer: HashMap::new(),
        pending: FuturesOrdered::new(),
        connected: false,
        read_timeout: None,
        next_message_seq: 1,
    };
    connection.run(reader).await;
    // Let the writer finish first: the auto-acks it performs must reach the queues before
    // the consumers are released, or a message written to the client would be redelivered.
    drop(connection.out);
    // A client that stops reading cannot hold the connection (and a shutdown) for ever.
    let writer_abort = writer.abort_handle();
    if tokio::time::timeout(WRITER_DRAIN_LIMIT, writer).await.is_err() {
        tracing::info!(peer = %connection.peer, "client did not read its last frames; connection cut");
        writer_abort.abort();
    }
    let core = connection.context.core.clone();
    for (_, subscription) in connection.subscriptions.drain() {
        core.unsubscribe(&subscription.queue, subscription.consumer);
    }
}

struct Connection {
    context: Arc<ConnectionContext>,
    codec: Codec,
    connection_id: u64,
    peer: String,
    out: mpsc::UnboundedSender<WriteItem>,
    deliveries_tx: mpsc::UnboundedSender<Delivery>,
    deliveries: mpsc::UnboundedReceiver<Delivery>,
    /// Subscription id (as the client named it) to its state.
    subscriptions: HashMap<String, Subscription>,
    by_consumer: HashMap<ConsumerId, String>,
    /// Responses waiting for the store, written in the order the requests came.
    pending: FuturesOrdered<Pending>,
    connected: bool,
    /// The longest the client may stay silent, once heart-beats are negotiated.
    read_timeout: Option<Duration>,
    next_message_seq: u64,
}

impl Connection {
    async fn run<R: AsyncRead + Unpin>(&mut self, mut reader: R) {
        let mut buffer = BytesMut::with_capacity(8 * 1024);
        let deadline = tokio::time::sleep(self.context.connect_timeout);
        tokio::pin!(deadline);
        let shutdown = self.context.shutdown.clone();
        loop {
            tokio::select! {
                _ = shutdown.cancelled() => {
                    self.finish_pending().await;
                    break;
                }
                read = reader.read_buf(&mut buffer) => {
                    match read {
                        Ok(0) | Err(_) => {
                            // The client went away: its unacknowledged messages go back.
                            if !buffer.is_empty() {
                                tracing::debug!(peer = %self.peer, bytes = buffer.len(), "connection closed mid-frame");
                            }
                            break;
                        }
                        Ok(_) => {}
                    }
                    if let Some(timeout) = self.read_timeout {
                        deadline.as_mut().reset(Instant::now() + timeout);
                    }
                    match self.handle_input(&mut buffer) {
                        Ok(true) => {}
                        Ok(false) => {
                            // DISCONNECT: answer what is pending (its receipt last), then close.
                            self.finish_pending().await;
                            break;
                        }
                        Err(Fatal(frame)) => {
                            tracing::info!(peer = %self.peer, error = frame.get("message").unwrap_or(""), "closing connection after protocol error");
                            self.write_frame(&frame);
                            break;
                        }
                    }
                    if self.connected && self.read_timeout.is_none() {
                        // No heart-beats from the client: it may stay silent for ever.
                        deadline.as_mut().reset(Instant::now() + Duration::from_secs(60 * 60 * 24 * 365));
                    } else if let Some(timeout) = self.read_timeout {
                        deadline.as_mut().reset(Instant::now() + timeout);
                    }
                }
                Some(delivery) = self.deliveries.recv() => self.deliver(delivery),
                Some(outcome) = self.pending.next(), if !self.pending.is_empty() => {
                    if let Some(frame) = outcome.frame {
                        self.write_frame(&frame);
                    }
                    if outcome.close {
                        break;
                    }
                }
                _ = &mut deadline => {
                    let reason = if self.connected {
                        "no heart-beat from the client within the negotiated interval"
                    } else {
                        "no CONNECT frame within the connect timeout"
                    };
                    tracing::info!(peer = %self.peer, reason, "closing idle connection");
                    self.write_frame(&Frame::error("inactivity timeout", reason));
                    break;
                }
            }
        }
        let _ = self.out.send(WriteItem::Close);
    }

    /// Writes out every response still waiting for the store.
    async fn finish_pending(&mut self) {
        while let Some(outcome) = self.pending.next().await {
            if let Some(frame) = outcome.frame {
                self.write_frame(&frame);
            }
        }
    }

    fn write_frame(&self, frame: &Frame) {
        let mut bytes = BytesMut::new();
        self.codec.encode(frame, &mut bytes);
        let _ = self.out.send(WriteItem::Frame(bytes.freeze()));
    }

    /// Decodes and handles every complete frame in `buffer`. `Ok(false)` after DISCONNECT.
    fn handle_input(&mut self, buffer: &mut BytesMut) -> Result<bool, Fatal> {
        while let Some(decoded) = self.codec.decode(buffer)? {
            let Decoded::Frame(frame) = decoded else { continue };
            if !self.handle_frame(frame)? {
                return Ok(false);
            }
        }
        Ok(true)
    }

    fn handle_frame(&mut self, frame: Frame) -> Result<bool, Fatal> {
        if !self.connected {
            return match frame.command {
                Command::Connect | Command::Stomp => self.connect(&frame).map(|_| true),
                other => Err(Fatal::new(
                    Some(&frame),
                    "expected CONNECT",
                    &format!("the first frame must be CONNECT or STOMP, not {}", other.as_str()),
                )),
            };
        }
        match frame.command {
            Command::Send => self.send(frame)?,
            Command::Subscribe => self.subscribe(&frame)?,
            Command::Unsubscribe => self.unsubscribe(&frame)?,
            Command::Ack => self.ack(&frame, true)?,
            Command::Nack => self.ack(&frame, false)?,
            Command::Begin | Command::Commit | Command::Abort => return Err(Fatal::new(
                Some(&frame),
                "transactions are not supported yet",
                "this ferromq version does not implement STOMP transactions (BEGIN, COMMIT, ABORT)",
            )),
            Command::Disconnect => {
                if let Some(receipt) = frame.get("receipt") {
                    let receipt = Frame::new(Command::Receipt).header("receipt-id", receipt);
                    self.pending.push_back(Box::pin(async move {
                        Outcome { frame: Some(receipt), close: true }
                    }));
                }
                return Ok(false);
            }
            Command::Connect | Command::Stomp => {
                return Err(Fatal::new(
                    Some(&frame),
                    "already connected",
                    "CONNECT may be sent only once",
                ))
            }
            other => {
                return Err(Fatal::new(
                    Some(&frame),
                    "unexpected frame",
                    &format!("{} frames are sent by servers, not clients", other.as_str()),
                ))
            }
        }
        Ok(true)
    }

    fn connect(&mut self, frame: &Frame) -> Result<(), Fatal> {
        let version = stomp::negotiate_version(frame.get("accept-version")).map_err(|_| {
            Fatal::new(
                Some(frame),
                "unsupported STOMP version",
                &format!(
                    "supported versions are 1.0, 1.1 and 1.2; the client accepts {}",
                    frame.get("accept-version").unwrap_or("none")
                ),
            )
        })?;
        let mut connected = Frame::new(Command::Connected)
            .header("session", format!("{}:{}", self.context.id_prefix, self.connection_id))
            .header("server", format!("ferromq/{}", env!("CARGO_PKG_VERSION")));
        if version >= Version::V1_1 {
            connected.push_header("version", version.as_str());
            let (client_send, client_receive) = match frame.get("heart-beat") {
                Some(value) => stomp::parse_heart_beat(value).map_err(|e| {
                    Fatal::new(Some(frame), "invalid heart-beat header", &e.to_string())
                })?,
                None => (0, 0),
            };
            // We send as often as the client wants to hear from us, and expect the client at
            // the rate it offers, with the configured grace.
            connected.push_header("heart-beat", format!("{client_receive},{client_send}"));
            if client_receive > 0 {
                let _ = self.out.send(WriteItem::HeartBeat(Duration::from_millis(client_receive)));
            }
            if client_send > 0 {
                let grace = self.context.heart_beat_grace.max(1.0);
                self.read_timeout = Some(Duration::from_millis(client_send).mul_f64(grace));
            }
        }
        self.write_frame(&connected);
        self.codec.set_version(version);
        self.connected = true;
        tracing::debug!(peer = %self.peer, version = version.as_str(), "STOMP connected");
        Ok(())
    }

    fn send(&mut self, frame: Frame) -> Result<(), Fatal> {
        if frame.get("transaction").is_some() {
            return Err(Fatal::new(
                Some(&frame),
                "transactions are not supported yet",
                "this ferromq version does not implement STOMP transactions",
            ));
        }
        let receipt = frame.get("receipt").map(str::to_owned);
        let core = &self.context.core;
        let id = core.next_message_id();
        let message_id = format!(
            "ID:{}-{}:1:1:{}",
            self.context.id_prefix, self.connection_id, self.next_message_seq
        );
        self.next_message_seq += 1;
        let error_frame = |error: &dyn std::fmt::Display| {
            let mut e = Frame::error(&error.to_string(), "the message was not accepted");
            if let Some(r) = &receipt {
                e.push_header("receipt-id", r.as_str());
            }
            e
        };
        let message = match mapping::message_from_send(frame, id, message_id) {
            Ok(message) => Arc::new(message),
            Err(error) => return Err(Fatal(error_frame(&error))),
        };
        let completion = match core.send(message) {
            Ok(completion) => completion,
            Err(CoreError::Store(error)) => {
                tracing::error!(%error, "store refused a message");
                return Err(Fatal(error_frame(&format!("message not stored: {error}"))));
            }
            Err(error) => return Err(Fatal(error_frame(&error))),
        };
        if receipt.is_none() && completion.is_ready() {
            // Core::send reports a store that refused at once as an error above.
            return Ok(());
        }
        self.pending.push_back(Box::pin(async move {
            match completion.await {
                Ok(()) => Outcome {
                    frame: receipt.map(|r| Frame::new(Command::Receipt).header("receipt-id", r)),
                    close: false,
                },
                Err(error) => {
                    tracing::error!(%error, "store refused a message");
                    let mut frame = Frame::error(
                        &format!("message not stored: {error}"),
                        "the message was not accepted",
                    );
                    if let Some(r) = receipt {
                        frame.push_header("receipt-id", r);
                    }
                    Outcome { frame: Some(frame), close: true }
                }
            }
        }));
        Ok(())
    }

    fn subscribe(&mut self, frame: &Frame) -> Result<(), Fatal> {
        let destination = frame.get("destination").ok_or_else(|| {
            Fatal::new(Some(frame), "SUBSCRIBE frame has no destination header", "")
        })?;
        let destination = parse_destination(destination)
            .map_err(|e| Fatal::new(Some(frame), &e.to_string(), ""))?;
        let id = match (frame.get("id"), self.codec.version()) {
            (Some(id), _) => id.to_owned(),
            // STOMP 1.0 makes the id optional; ActiveMQ then names it after the destination.
            (None, Version::V1_0) => frame.get("destination").unwrap_or_default().to_owned(),
            (None, _) => {
                return Err(Fatal::new(
                    Some(frame),
                    "SUBSCRIBE frame has no id header",
                    "STOMP 1.1 and later require it",
                ))
            }
        };
        if self.subscriptions.contains_key(&id) {
            return Err(Fatal::new(
                Some(frame),
                "duplicate subscription id",
                &format!("subscription {id} already exists on this connection"),
            ));
        }
        let ack_mode = match frame.get("ack").unwrap_or("auto") {
            "auto" => AckMode::Auto,
            "client" => AckMode::Client,
            "client-individual" => AckMode::ClientIndividual,
            other => {
                return Err(Fatal::new(
                    Some(frame),
                    "invalid ack header",
                    &format!("`{other}`: expected auto, client or client-individual"),
                ))
            }
        };
        for (name, _) in &frame.headers {
            if name == "selector"
                || (name.starts_with("activemq.") && name != "activemq.prefetchSize")
            {
                return Err(Fatal::new(
                    Some(frame),
                    &format!("subscription header {name} is not supported yet"),
                    "this ferromq version does not implement it; remove the header",
                ));
            }
        }
        let prefetch = match frame.get("activemq.prefetchSize") {
            Some(value) => {
                value.trim().parse::<u32>().ok().filter(|p| *p > 0).ok_or_else(|| {
                    Fatal::new(
                        Some(frame),
                        "invalid activemq.prefetchSize header",
                        &format!("`{value}`: expected a positive integer"),
                    )
                })?
            }
            None => self.context.core.settings().default_prefetch,
        };
        if !destination.kind.is_queue() || destination.kind != store::DestinationKind::Queue {
            return Err(Fatal::new(
                Some(frame),
                "only queues are supported yet",
                "topics and temporary destinations come in a later ferromq version",
            ));
        }
        let core = self.context.core.clone();
        let queue = core
            .queue(&destination.name)
            .map_err(|e| Fatal::new(Some(frame), &e.to_string(), ""))?;
        let consumer = core.next_consumer_id();
        let spec =
            ConsumerSpec { id: consumer, prefetch, ack_mode, sink: self.deliveries_tx.clone() };
        core.subscribe(&queue, spec).map_err(|e| Fatal::new(Some(frame), &e.to_string(), ""))?;
        self.by_consumer.insert(consumer, id.clone());
        self.subscriptions
            .insert(id, Subscription { consumer, queue, ack_mode, delivered: VecDeque::new() });
        self.receipt(frame);
        Ok(())
    }

    fn unsubscribe(&mut self, frame: &Frame) -> Result<(), Fatal> {
        let id = match (frame.get("id"), frame.get("destination")) {
            (Some(id), _) => id.to_owned(),
            (None, Some(destination)) if self.codec.version() == Version::V1_0 => {
                destination.to_owned()
            }
            _ => return Err(Fatal::new(Some(frame), "UNSUBSCRIBE frame has no id header", "")),
        };
        let Some(subscription) = self.subscriptions.remove(&id) else {
            return Err(Fatal::new(
                Some(frame),
                "no such subscription",
                &format!("there is no subscription {id} on this connection"),
            ));
        };
        self.by_consumer.remove(&subscription.consumer);
        self.context.core.unsubscribe(&subscription.queue, subscription.consumer);
        self.receipt(frame);
        Ok(())
    }

    /// ACK (`positive`) or NACK.
    fn ack(&mut self, frame: &Frame, positive: bool) -> Result<(), Fatal> {
        let version = self.codec.version();
        if !positive && version == Version::V1_0 {
            return Err(Fatal::new(
                Some(frame),
                "NACK is not part of STOMP 1.0",
                "negotiate STOMP 1.1 or later",
            ));
        }
        if frame.get("transaction").is_some() {
            return Err(Fatal::new(Some(frame), "transactions are not supported yet", ""));
        }
        let message_id = match version {
            Version::V1_2 => frame.get("id"),
            _ => frame.get("message-id"),
        };
        let Some(message_id) = message_id else {
            let header = if version == Version::V1_2 { "id" } else { "message-id" };
            return Err(Fatal::new(
                Some(frame),
                &format!("{} frame has no {header} header", frame.command.as_str()),
                "",
            ));
        };
        let subscription_hint = frame.get("subscription");
        let found = self.subscriptions.iter_mut().find_map(|(id, subscription)| {
            if subscription_hint.is_some_and(|hint| hint != id) {
                return None;
            }
            let position = subscription.delivered.iter().position(|(m, _)| &**m == message_id)?;
            Some((subscription, position))
        });
        let Some((subscription, position)) = found else {
            return Err(Fatal::new(
                Some(frame),
                "unexpected acknowledgement",
                &format!(
                    "message {message_id} is not awaiting an acknowledgement on this connection"
                ),
            ));
        };
        let ids: Vec<MessageId> = match subscription.ack_mode {
            AckMode::Client => {
                subscription.delivered.drain(..=position).map(|(_, id)| id).collect()
            }
            _ => subscription.delivered.remove(position).map(|(_, id)| id).into_iter().collect(),
        };
        let core = self.context.core.clone();
        let queue = subscription.queue.clone();
        let consumer = subscription.consumer;
        if !positive {
            core.nack(&queue, consumer, ids);
            self.receipt(frame);
            return Ok(());
        }
        let receipt = frame.get("receipt").map(str::to_owned);
        if receipt.is_none() {
            core.ack_now(&queue, consumer, ids);
            return Ok(());
        }
        self.pending.push_back(Box::pin(async move {
            let result = core.ack(&queue, consumer, ids).await;
            let receipt = receipt.unwrap_or_default();
            match result {
                Ok(()) => Outcome {
                    frame: Some(Frame::new(Command::Receipt).header("receipt-id", receipt)),
                    close: false,
                },
                Err(error) => {
                    let mut frame =
                        Frame::error(&format!("acknowledgement not stored: {error}"), "");
                    frame.push_header("receipt-id", receipt);
                    Outcome { frame: Some(frame), close: true }
                }
            }
        }));
        Ok(())
    }

    /// Answers a frame's `receipt` header, in order behind anything still waiting for the store.
    fn receipt(&mut self, frame: &Frame) {
        let Some(receipt) = frame.get("receipt") else { return };
        let receipt = Frame::new(Command::Receipt).header("receipt-id", receipt);
        if self.pending.is_empty() {
            self.write_frame(&receipt);
        } else {
            self.pending
                .push_back(Box::pin(async move { Outcome { frame: Some(receipt), close: false } }));
        }
    }

    fn deliver(&mut self, delivery: Delivery) {
        let Some(subscription_id) = self.by_consumer.get(&delivery.consumer) else {
            // Unsubscribed meanwhile: the queue took the message back with the consumer.
            return;
        };
        let Some(subscription) = self.subscriptions.get_mut(subscription_id) else { return };
        let message = &delivery.message;
        let ack = match (subscription.ack_mode, self.codec.version()) {
            (AckMode::Auto, _) | (_, Version::V1_0 | Version::V1_1) => None,
            _ => Some(&*message.message_id),
        };
        let frame = mapping::message_frame(message, subscription_id, ack, delivery.redelivered);
        let mut bytes = BytesMut::new();
        self.codec.encode(&frame, &mut bytes);
        let item = if subscription.ack_mode == AckMode::Auto {
            WriteItem::AutoAck {
                bytes: bytes.freeze(),
                queue: subscription.queue.clone(),
                consumer: delivery.consumer,
                id: message.id,
            }
        } else {
            subscription.delivered.push_back((message.message_id.clone(), message.id));
            WriteItem::Frame(bytes.freeze())
        };
        let _ = self.out.send(item);
    }
}
