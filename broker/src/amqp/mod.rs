//! The AMQP 1.0 protocol adapter: the connection, session and link state machines that
//! `protocol::amqp` leaves to its user, on top of the core.
//!
//! One task per connection owns all of its state ([`Connection`]) and its
//! [`Session`](crate::session::Session), and runs in the transport's connection driver; the
//! writer task (`transport::writer`) owns the socket's writing half and sends the empty
//! heartbeat frames.
//!
//! - `connection.rs`: protocol headers, SASL (ANONYMOUS and PLAIN, checked by the broker's
//!   `Authenticator`), open/close, idle timeouts, begin/end and session windows;
//! - `link.rs`: attach, detach and flow; `link/`: producers, consumers, the coordinator;
//! - `mapping.rs`: AMQP messages to and from the broker's message model.
//!
//! Every error closes what it must with the spec's condition: a frame that cannot be decoded
//! closes the connection with `amqp:decode-error`, a frame above our max-frame-size with
//! `amqp:connection:framing-error`, a transfer on a handle that is not attached with
//! `amqp:session:unattached-handle`; a link the broker refuses is attached and detached at
//! once with the reason, as the spec asks.

mod connection;
mod link;
mod mapping;

use std::collections::{BTreeMap, HashMap, HashSet};
use std::future::Future;
use std::pin::Pin;
use std::sync::Arc;
use std::time::Duration;

use bytes::{Bytes, BytesMut};
use futures_util::stream::FuturesUnordered;
use protocol::amqp::{condition, AmqpError, AmqpFrame, Codec, Frame, Limits};
use tokio::io::{AsyncRead, AsyncWrite};
use tokio::time::Instant;

use crate::core::{ConsumerId, ConsumerNotice, Delivery, HeldSends};
use crate::security::{AuthError, PendingLogin, Subject};
use crate::session::Session as ClientSession;
use crate::transport::driver::{self, Admitted, Parts, Protocol, Step};
use crate::transport::writer::{self, Output};
use crate::transport::ConnectionContext;

/// The largest frame we accept unless the connector's `wireFormat.maxFrameSize` is lower:
/// ActiveMQ's AMQP default. Messages may be larger (they span frames) up to the
/// connector's max frame size.
const DEFAULT_MAX_FRAME_SIZE: u32 = 1 << 20;
/// The idle timeout we announce: a client silent for this long is closed. ActiveMQ's
/// default (`transport.wireFormat.idleTimeout`).
const IDLE_TIMEOUT: Duration = Duration::from_secs(30);
/// The channels a client may use: ActiveMQ's `channelMax` default.
const CHANNEL_MAX: u16 = 32767;

/// Something the connection waits for (a store write, a commit); its result is handled on
/// the connection's task.
type Pending = Pin<Box<dyn Future<Output = Event> + Send>>;

/// The result of something the connection waited for.
enum Event {
    /// A producer's message is durable (or failed to be stored).
    Stored { channel: u16, handle: u32, delivery_id: Option<u32>, result: Result<(), String> },
    /// A coordinator's discharge finished.
    Discharged { channel: u16, delivery_id: Option<u32>, result: Result<(), String> },
    /// A drain's grace period passed: whatever credit is left is used up.
    DrainDue { channel: u16, handle: u32 },
}

/// Why the connection ends.
enum Fatal {
    /// Close with this error (the `close` frame is written, then the socket closed).
    Close(AmqpError),
    /// Close the socket at once: nothing (more) can be said in AMQP.
    Cut(String),
}

impl Fatal {
    fn close(condition: &str, description: impl Into<String>) -> Fatal {
        Fatal::Close(AmqpError::new(condition, description))
    }
}

/// The empty AMQP frame: size 8, doff 2, type 0, channel 0.
static HEARTBEAT: [u8; 8] = [0, 0, 0, 8, 2, 0, 0, 0];

/// Where the connection is.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
enum State {
    /// Waiting for the client's first protocol header.
    Start,
    /// SASL: waiting for `sasl-init`.
    Sasl,
    /// SASL done: waiting for the AMQP header.
    SaslDone,
    /// AMQP header exchanged: waiting for `open`.
    AwaitingOpen,
    Open,
}

/// One session (begun on the client's channel; we answer on the same channel number).
struct Session {
    /// The transfer id of the next frame the client sends.
    next_incoming_id: u32,
    /// The transfer id of our next transfer frame.
    next_outgoing_id: u32,
    /// How many more transfer frames the client lets us send.
    remote_incoming_window: u32,
    /// The delivery id of our next delivery.
    next_delivery_id: u32,
    /// Links by the client's handle (ours are the same numbers).
    links: HashMap<u32, link::Link>,
    /// Our unsettled deliveries by delivery id.
    unsettled: BTreeMap<u32, link::Unsettled>,
    /// Handles we detached first (a refused attach, an error): the client's detach that
    /// answers ours is expected, not a detach of an unattached handle.
    detached_by_us: HashSet<u32>,
}

/// The incoming window we announce (in frames): large, and restored by every flow we send.
const INCOMING_WINDOW: u32 = 1 << 20;

impl Session {
    fn new(begin: &protocol::amqp::Begin) -> Session {
        Session {
            next_incoming_id: begin.next_outgoing_id,
            next_outgoing_id: 1,
            remote_incoming_window: begin.incoming_window,
            next_delivery_id: 0,
            links: HashMap::new(),
            detached_by_us: HashSet::new(),
            unsettled: BTreeMap::new(),
        }
    }
}

/// Serves one AMQP connection until it closes.
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
    let client = ClientSession::new(context.clone());
    let max_message_size = context.limits.max_frame_size as u64;
    let frame_size = u32::try_from(context.limits.max_frame_size)
        .unwrap_or(u32::MAX)
        .clamp(protocol::amqp::MIN_MAX_FRAME_SIZE, DEFAULT_MAX_FRAME_SIZE);
    let limits = Limits { max_frame_size: frame_size, ..Limits::default() };
    let mut connection = Connection {
        codec: Codec::new(limits),
        context: context.clone(),
        client,
        peer: peer.clone(),
        output,
        state: State::Start,
        sessions: HashMap::new(),
        consumers: HashMap::new(),
        channel_max: CHANNEL_MAX,
        max_message_size,
        pending: FuturesUnordered::new(),
        held: HeldSends::default(),
        next_transaction: 1,
        authenticating: PendingLogin::default(),
    };
    driver::run(&mut connection, reader, &context, &peer, connect_deadline).await;
    connection.release();
    writer::finish(&mut connection.output, writer, &peer).await;
}

struct Connection {
    context: Arc<ConnectionContext>,
    codec: Codec,
    /// Who the client is (its container id is its JMS client id, for durable
    /// subscriptions), its consumers, transactions and temporary destinations.
    client: ClientSession<Bytes>,
    peer: String,
    output: Output,
    state: State,
    /// Sessions by channel.
    sessions: HashMap<u16, Session>,
    /// Which link each consumer feeds: (channel, handle).
    consumers: HashMap<ConsumerId, (u16, u32)>,
    /// The highest channel the client may use (negotiated in `open`).
    channel_max: u16,
    /// The largest message a client may send (across frames).
    max_message_size: u64,
    pending: FuturesUnordered<Pending>,
    /// Transfers held by producer flow control, per link.
    held: HeldSends<(u16, u32), link::HeldTransfer>,
    next_transaction: u64,
    /// The SASL login being checked; reading stops meanwhile.
    authenticating: PendingLogin<()>,
}

impl Protocol for Connection {
    type Login = ();
    type HeldKey = (u16, u32);
    type Held = link::HeldTransfer;
    type Work = Event;

    fn parts(
        &mut self,
    ) -> Parts<'_, (), (u16, u32), link::HeldTransfer, impl Future<Output = Event> + Send> {
        let work = driver::next(&mut self.pending);
        Parts::of(&mut self.client, &self.output, &mut self.held, &mut self.authenticating, work)
    }

    fn on_input(&mut self, buffer: &mut BytesMut) -> Step {
        let handled = self.handle_input(buffer);
        self.step(handled)
    }

    fn on_login(&mut self, _: (), outcome: Result<Subject, AuthError>, buf: &mut BytesMut) -> Step {
        // Then the frames the client sent behind its sasl-init.
        let handled = self.authenticated(outcome).and_then(|_| self.handle_input(buf));
        self.step(handled)
    }

    fn on_delivery(&mut self, delivery: Delivery) {
        self.deliver(delivery);
    }

    fn on_notice(&mut self, notice: ConsumerNotice) -> Step {
        let handled = self.aborted(notice);
        self.step(handled)
    }

    fn on_admitted(&mut self, (held, room): Admitted<link::HeldTransfer>) {
        self.admitted(held, room);
    }

    fn on_work(&mut self, event: Event) -> Step {
        let handled = self.event(event);
        self.step(handled)
    }

    /// The connect timeout until the connection is open, then our idle timeout.
    fn read_deadline(&self, now: Instant) -> Option<Instant> {
        (self.state == State::Open).then_some(now + IDLE_TIMEOUT)
    }

    fn on_silence(&mut self) {
        let reason = if self.state == State::Open {
            format!("nothing received within the idle timeout ({} ms)", IDLE_TIMEOUT.as_millis())
        } else {
            "the connection was not opened within the connect timeout".to_owned()
        };
        tracing::info!(peer = %self.peer, %reason, "closing idle AMQP connection");
        self.fail(Fatal::close(condition::RESOURCE_LIMIT_EXCEEDED, reason));
    }

    fn on_admin_close(&mut self) -> Step {
        self.fail(Fatal::close(condition::CONNECTION_FORCED, "closed by an administrator"));
        Step::Stop
    }

    fn on_shutdown(&mut self) -> Step {
        self.fail(Fatal::close(condition::CONNECTION_FORCED, "the broker is shutting down"));
        Step::Stop
    }

    /// Never asked for: an AMQP connection settles what it waits for itself before it closes.
    async fn on_finish(&mut self) {}
}

impl Connection {
    /// What follows something handled: the connection closes after the client's close, or
    /// after an error (said to the client when AMQP still can).
    fn step(&mut self, handled: Result<bool, Fatal>) -> Step {
        match handled {
            Ok(true) => Step::Continue,
            Ok(false) => Step::Stop,
            Err(fatal) => {
                self.fail(fatal);
                Step::Stop
            }
        }
    }

    /// Ends the connection after an error: says why when AMQP still can.
    fn fail(&mut self, fatal: Fatal) {
        match fatal {
            Fatal::Cut(reason) => {
                tracing::info!(peer = %self.peer, %reason, "AMQP connection cut");
            }
            Fatal::Close(error) => {
                tracing::info!(peer = %self.peer, condition = %error.condition,
                    description = error.description.as_deref().unwrap_or(""), "closing AMQP connection after an error");
                if matches!(self.state, State::Start | State::Sasl | State::SaslDone) {
                    // No AMQP layer yet: nowhere to put a close frame.
                    return;
                }
                if self.state == State::AwaitingOpen {
                    // The spec: an error before open is answered by an open, then the close.
                    // Like ActiveMQ, the open says that it failed and a close follows (the
                    // property Qpid JMS reads before it waits for the close's error).
                    let failed = protocol::amqp::Fields(vec![(
                        protocol::amqp::Symbol::from("amqp:connection-establishment-failed"),
                        protocol::amqp::Value::Boolean(true),
                    )]);
                    let open = protocol::amqp::Open {
                        container_id: self.context.id_prefix.clone(),
                        properties: Some(failed),
                        ..Default::default()
                    };
                    self.send_frame(AmqpFrame::new(0, open));
                }
                let close = protocol::amqp::Close { error: Some(error) };
                self.send_frame(AmqpFrame::new(0, close));
            }
        }
    }

    /// Writes an encoded frame.
    fn write(&self, frame: &Frame) {
        let mut bytes = BytesMut::new();
        match self.codec.encode(frame, &mut bytes) {
            Ok(()) => self.output.write(bytes.freeze()),
            Err(error) => {
                // Our own frames fit the peer's size (transfers are split): a bug, not the
                // client's doing; nothing is written for it.
                tracing::error!(peer = %self.peer, %error, "AMQP frame not encodable");
            }
        }
    }

    fn send_frame(&self, frame: AmqpFrame) {
        self.write(&Frame::Amqp(frame));
    }

    /// Decodes and handles every complete frame in `buffer`; `Ok(false)` after a close.
    fn handle_input(&mut self, buffer: &mut BytesMut) -> Result<bool, Fatal> {
        // While a login is checked, what follows the sasl-init waits in the buffer.
        while !self.authenticating.is_pending() {
            let decoded = match self.codec.decode(buffer) {
                Ok(Some(decoded)) => decoded,
                Ok(None) => return Ok(true),
                Err(error) => return Err(self.wire_error(error)),
            };
            if !self.handle(decoded)? {
                return Ok(false);
            }
        }
        Ok(true)
    }

    /// What a decoding error ends the connection with.
    fn wire_error(&mut self, error: protocol::amqp::WireError) -> Fatal {
        use protocol::amqp::WireError;
        if let Some(answer) = error.answer_header() {
            // Another protocol, or another AMQP version: answer with the header we speak
            // (the spec's version negotiation), then close.
            let mut bytes = BytesMut::new();
            Codec::encode_header(answer, &mut bytes);
            self.output.write(bytes.freeze());
            return Fatal::Cut(error.to_string());
        }
        match error {
            WireError::FrameTooLarge { .. }
            | WireError::BadFrameHeader { .. }
            | WireError::UnknownFrameType(_)
            | WireError::UnexpectedFrameType { .. } => {
                Fatal::close(condition::CONNECTION_FRAMING_ERROR, error.to_string())
            }
            _ => Fatal::close(condition::DECODE_ERROR, error.to_string()),
        }
    }

    /// Releases the session (see [`Session::release`](crate::session::Session::release));
    /// once: a client's close is answered only after it, and the connection's end calls it.
    fn release(&mut self) {
        self.consumers.clear();
        self.sessions.clear();
        self.client.release();
    }
}
