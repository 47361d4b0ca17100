//! The STOMP protocol adapter: turns STOMP frames into core commands and deliveries into
//! MESSAGE frames. One [`Connection`] per socket owns all of the connection's state and runs
//! in the transport's connection driver (`transport::driver`); a writer task
//! (`transport::writer`) owns the socket's writing half.

mod consume;
mod mapping;
mod produce;

use std::collections::HashMap;
use std::future::Future;
use std::pin::Pin;
use std::sync::Arc;
use std::time::Duration;

use bytes::{Bytes, BytesMut};
use futures_util::stream::{FuturesOrdered, FuturesUnordered, StreamExt};
use protocol::stomp::{self, Codec, Command, Decoded, Frame, Version, WireError};
use store::{Destination, Message};
use tokio::io::{AsyncRead, AsyncWrite};
use tokio::time::Instant;

use crate::core::{AckMode, ConsumerId, ConsumerNotice, Delivery, HeldSends};
use crate::security::{AuthError, PendingLogin, Subject};
use crate::session::{Delivered, Session};
use crate::transport::driver::{self, Admitted, Parts, Protocol, Step};
use crate::transport::writer::{self, Output, WRITER_DRAIN_LIMIT};
use crate::transport::ConnectionContext;

/// A response that waits for the store: the frame to write once it resolves, and whether the
/// connection must close after writing it.
type Pending = Pin<Box<dyn Future<Output = Outcome> + Send>>;

/// A queue browser's snapshot: the subscription id, its destination header, the messages.
type Browse = Pin<Box<dyn Future<Output = (String, String, Vec<Arc<Message>>)> + Send>>;

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
    ack_mode: AckMode,
    /// Messages delivered and not yet acknowledged.
    delivered: Delivered,
}

/// Serves one STOMP connection until it closes.
pub(crate) async fn serve<S>(
    stream: S,
    context: Arc<ConnectionContext>,
    peer: String,
    connect_deadline: tokio::time::Instant,
) where
    S: AsyncRead + AsyncWrite + Send + Unpin + 'static,
{
    let (reader, write_half) = tokio::io::split(stream);
    let (output, writer) = writer::spawn(write_half, context.core.clone());
    let session = Session::new(context.clone());
    let temp_names = mapping::TempNames::new(session.connection_name());
    let mut connection = Connection {
        codec: Codec::new(context.limits),
        context: context.clone(),
        session,
        peer: peer.clone(),
        output,
        subscriptions: HashMap::new(),
        by_consumer: HashMap::new(),
        pending: FuturesOrdered::new(),
        held: HeldSends::default(),
        browsers: std::collections::HashSet::new(),
        browses: FuturesUnordered::new(),
        connected: false,
        read_timeout: None,
        disconnect_receipt: None,
        temp_names,
        authenticating: PendingLogin::default(),
    };
    driver::run(&mut connection, reader, &context, &peer, connect_deadline).await;
    if let Some(receipt) = connection.disconnect_receipt.take() {
        // ActiveMQ answers DISCONNECT only once the connection is gone from
        // the broker: its consumers closed (unacknowledged messages back in their queues,
        // durable subscriptions free for the next connection) and its transactions rolled
        // back. Writing the receipt first let a client that reconnected at once find its
        // durable subscription still in use, and let messages published after the receipt go
        // to the closed consumer. So: the writer first writes (and auto-acks) everything that
        // came before, then the connection is released, then the receipt goes out.
        let flushed = connection.output.barrier();
        if matches!(tokio::time::timeout(WRITER_DRAIN_LIMIT, flushed).await, Ok(Ok(()))) {
            connection.release();
            connection.write_frame(&receipt);
        } else {
            // The client stopped reading: cut it without the receipt, as below.
            tracing::info!(peer = %connection.peer, "client did not read its last frames; connection cut");
            writer.abort();
        }
    }
    // Let the writer finish first: the auto-acks it performs must reach the queues before
    // the consumers are released, or a message written to the client would be redelivered.
    writer::finish(&mut connection.output, writer, &connection.peer).await;
    connection.release();
}

struct Connection {
    context: Arc<ConnectionContext>,
    codec: Codec,
    /// Who the client is, its client id, consumers, transactions and temporary destinations.
    session: Session<String>,
    peer: String,
    output: Output,
    /// Subscription id (as the client named it) to its state.
    subscriptions: HashMap<String, Subscription>,
    by_consumer: HashMap<ConsumerId, String>,
    /// Responses waiting for the store, written in the order the requests came.
    pending: FuturesOrdered<Pending>,
    /// SENDs waiting for room (producer flow control), in order; answered through `pending`
    /// once they go ahead.
    held: HeldSends<(), produce::HeldSend>,
    /// Browsing subscriptions (`browser:true`): they consume nothing and end after one
    /// snapshot of the queue.
    browsers: std::collections::HashSet<String>,
    browses: FuturesUnordered<Browse>,
    connected: bool,
    /// The longest the client may stay silent, once heart-beats are negotiated.
    read_timeout: Option<Duration>,
    /// The RECEIPT a DISCONNECT asked for, written once the connection is released.
    disconnect_receipt: Option<Frame>,
    /// The connection's `/temp-queue/` and `/temp-topic/` names.
    temp_names: mapping::TempNames,
    /// The CONNECT frame whose login is being checked, and the check.
    authenticating: PendingLogin<Frame>,
}

/// What a STOMP connection waits for besides its socket and the core.
enum Work {
    /// A response that waited for the store.
    Answered(Outcome),
    /// A queue browser's snapshot.
    Browsed((String, String, Vec<Arc<Message>>)),
}

impl Protocol for Connection {
    type Login = Frame;
    type HeldKey = ();
    type Held = produce::HeldSend;
    type Work = Work;

    fn parts(
        &mut self,
    ) -> Parts<'_, Frame, (), produce::HeldSend, impl Future<Output = Work> + Send> {
        let (pending, browses) = (&mut self.pending, &mut self.browses);
        let work = async move {
            tokio::select! {
                outcome = driver::next(pending) => Work::Answered(outcome),
                browse = driver::next(browses) => Work::Browsed(browse),
            }
        };
        Parts::of(&mut self.session, &self.output, &mut self.held, &mut self.authenticating, work)
    }

    fn reading_paused(&self) -> bool {
        self.reading_paused()
    }

    fn on_input(&mut self, buffer: &mut BytesMut) -> Step {
        let handled = self.handle_input(buffer);
        self.step(handled)
    }

    fn on_login(
        &mut self,
        frame: Frame,
        outcome: Result<Subject, AuthError>,
        buffer: &mut BytesMut,
    ) -> Step {
        let handled = match outcome {
            Ok(subject) => {
                self.session.logged_in(subject);
                // Then the frames the client sent behind its CONNECT.
                self.connect(&frame).and_then(|()| self.handle_input(buffer))
            }
            Err(error) => Err(Fatal::new(Some(&frame), &error.to_string(), "")),
        };
        self.step(handled)
    }

    fn on_delivery(&mut self, delivery: Delivery) {
        self.deliver(delivery);
    }

    fn on_notice(&mut self, notice: ConsumerNotice) -> Step {
        // STOMP cannot close one subscription: the connection goes.
        let frame = self.aborted(notice);
        tracing::info!(peer = %self.peer, error = frame.get("message").unwrap_or(""), "closing connection of an aborted slow consumer");
        self.write_frame(&frame);
        Step::Stop
    }

    fn on_admitted(&mut self, (held, room): Admitted<produce::HeldSend>) {
        self.admitted(held, room);
    }

    fn on_work(&mut self, work: Work) -> Step {
        match work {
            Work::Answered(outcome) => {
                if let Some(frame) = outcome.frame {
                    self.write_frame(&frame);
                }
                if outcome.close {
                    return Step::Stop;
                }
            }
            Work::Browsed((id, destination, messages)) => self.browsed(&id, &destination, messages),
        }
        Step::Continue
    }

    /// The client's heart-beat interval with the grace, for ever once connected without
    /// heart-beats, and the connect timeout before CONNECT.
    fn read_deadline(&self, now: Instant) -> Option<Instant> {
        // Heart-beats are negotiated by CONNECT: no read timeout before it.
        self.connected.then(|| driver::silence_deadline(now, self.read_timeout))
    }

    fn on_silence(&mut self) {
        let reason = if self.connected {
            "no heart-beat from the client within the negotiated interval"
        } else {
            "no CONNECT frame within the connect timeout"
        };
        tracing::info!(peer = %self.peer, reason, "closing idle connection");
        self.write_frame(&Frame::error("inactivity timeout", reason));
    }

    async fn on_finish(&mut self) {
        // Sends still waiting for room were never accepted: they get no receipt.
        self.held = HeldSends::default();
        while let Some(outcome) = self.pending.next().await {
            if let Some(frame) = outcome.frame {
                self.write_frame(&frame);
            }
        }
    }
}

impl Connection {
    /// What follows the frames handled: the connection closes after a DISCONNECT (what is
    /// pending answered first, its receipt last) or a fatal error (its ERROR frame written).
    fn step(&mut self, handled: Result<bool, Fatal>) -> Step {
        match handled {
            Ok(true) => Step::Continue,
            Ok(false) => Step::Finish,
            Err(Fatal(frame)) => {
                tracing::info!(peer = %self.peer, error = frame.get("message").unwrap_or(""), "closing connection after protocol error");
                self.write_frame(&frame);
                Step::Stop
            }
        }
    }

    /// True while the connection stops reading: its login is being checked (nothing the
    /// client sent behind CONNECT may act before), or it holds as many sends as it may (producer
    /// flow control) and no subscription of it waits for an ACK it would have to read. A
    /// producer that sends without receipts is paced by TCP then, as ActiveMQ paces it, and
    /// its sends neither pile up here nor go through over the limit. A connection with a
    /// client-acknowledge subscription keeps reading, so that its ACKs (which may be what
    /// frees the room) always get through.
    fn reading_paused(&self) -> bool {
        self.authenticating.is_pending()
            || self.held.is_full()
                && self.subscriptions.values().all(|s| s.ack_mode == AckMode::Auto)
    }

    /// The ERROR frame telling the client that the broker aborted one of its subscriptions as
    /// a slow consumer: it names the subscription (`subscription`) and its destination.
    fn aborted(&self, notice: ConsumerNotice) -> Frame {
        let ConsumerNotice::Abort { consumer, destination, reason, .. } = notice;
        let mut frame = Frame::error("slow consumer aborted", &reason);
        if let Some(id) = self.by_consumer.get(&consumer) {
            frame.push_header("subscription", id);
        }
        frame.push_header("destination", self.temp_names.format(&destination));
        frame
    }

    fn write_frame(&self, frame: &Frame) {
        let mut bytes = BytesMut::new();
        self.codec.encode(frame, &mut bytes);
        self.output.write(bytes.freeze());
    }

    /// Decodes and handles every complete frame in `buffer`. `Ok(false)` after DISCONNECT.
    fn handle_input(&mut self, buffer: &mut BytesMut) -> Result<bool, Fatal> {
        // While a login is checked, what follows CONNECT waits in the buffer; so do the
        // frames behind a SEND that filled the held sends (the driver hands them over again
        // once the pause lifts).
        while !self.reading_paused() {
            let Some(decoded) = self.codec.decode(buffer)? else { break };
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
                Command::Connect | Command::Stomp => {
                    let security = &self.context.security;
                    let login = security.authenticate(
                        &self.peer,
                        frame.get("login"),
                        frame.get("passcode"),
                    );
                    self.authenticating.start(frame, login);
                    Ok(true)
                }
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
            Command::Begin => self.begin(&frame)?,
            Command::Commit => self.commit(&frame)?,
            Command::Abort => self.abort(&frame)?,
            Command::Disconnect => {
                // Answered by `serve` after the connection is released.
                self.disconnect_receipt = frame
                    .get("receipt")
                    .map(|receipt| Frame::new(Command::Receipt).header("receipt-id", receipt));
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
        // ActiveMQ refuses a second live connection with one client id whatever the protocol
        // (its ProtocolConverter answers with an ERROR whose `message` is the
        // InvalidClientIDException's, then closes).
        self.session.claim_client_id(frame.get("client-id")).map_err(|refused| {
            Fatal::new(
                Some(frame),
                &refused.to_string(),
                "a client id can be used by one connection at a time",
            )
        })?;
        let mut connected = Frame::new(Command::Connected)
            .header("session", format!("{}:{}", self.context.id_prefix, self.session.connection()))
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
                let every = Duration::from_millis(client_receive);
                self.output.heart_beat(every, Bytes::from_static(b"\n"));
            }
            if client_send > 0 {
                let grace = self.context.heart_beat_grace.max(1.0);
                self.read_timeout = Some(Duration::from_millis(client_send).mul_f64(grace));
            }
        }
        self.write_frame(&connected);
        self.codec.set_version(version);
        self.connected = true;
        self.session.announce(None);
        tracing::debug!(peer = %self.peer, version = version.as_str(), "STOMP connected");
        Ok(())
    }

    /// The destination a SUBSCRIBE names, creating a temporary one on its first mention.
    fn resolve_destination(&mut self, frame: &Frame, text: &str) -> Result<Destination, Fatal> {
        let (destination, created) = self
            .temp_names
            .resolve(text)
            .map_err(|e| Fatal::new(Some(frame), &e.to_string(), ""))?;
        if created {
            self.session
                .create_temporary(destination.clone())
                .map_err(|e| Fatal::new(Some(frame), &e.to_string(), ""))?;
        }
        Ok(destination)
    }

    /// Answers a frame's `receipt` header, in order behind anything still waiting for the store.
    fn receipt(&mut self, frame: &Frame) {
        self.receipt_for(frame.get("receipt").map(str::to_owned));
    }

    fn receipt_for(&mut self, receipt: Option<String>) {
        let Some(receipt) = receipt else { return };
        let receipt = Frame::new(Command::Receipt).header("receipt-id", receipt);
        if self.pending.is_empty() {
            self.write_frame(&receipt);
        } else {
            self.pending
                .push_back(Box::pin(async move { Outcome { frame: Some(receipt), close: false } }));
        }
    }
}
