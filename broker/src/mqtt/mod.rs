//! The MQTT adapter (3.1, 3.1.1 and 5.0): turns MQTT packets into core commands and
//! deliveries into PUBLISH packets. One [`Connection`] per socket owns all of the
//! connection's state and runs in the transport's connection driver (`transport::driver`); a
//! writer task (`transport::writer`) owns the socket's writing half. The codec is
//! `protocol::mqtt`; the names and the message mapping are ActiveMQ's (`mapping.rs`).
//!
//! - `mod.rs`: the connection, CONNECT and CONNACK, keep alive, PINGREQ, DISCONNECT and the
//!   closes of bad input;
//! - `produce.rs`: PUBLISH from the client and its QoS 1 and 2 handshakes;
//! - `consume.rs`: SUBSCRIBE, UNSUBSCRIBE, deliveries and their acknowledgements;
//! - `mapping.rs`: topic names and messages.
//!
//! A will is published when the connection ends without a DISCONNECT (or with a 5.0
//! DISCONNECT that asks for it): the client went silent, broke the protocol or dropped its
//! socket; not when the broker shuts down.
//!
//! A CONNECT with the client id of a live MQTT connection takes the session over
//! (MQTT-3.1.4-3): once its login passes, the old connection is asked to close (through the
//! core's client id table, `Core::take_over_client_id`), writes its pending answers and (5.0)
//! DISCONNECT 0x8E, publishes its will and releases its session, its unacknowledged
//! deliveries going back to their queues; the new connection then claims the id and resumes
//! the durable subscriptions. A client id a connection of another protocol holds is still
//! refused, as ActiveMQ refuses it, and so is one whose holder does not close within
//! [`TAKE_OVER_WAIT`].
//!
//! 5.0 topic aliases from the client are resolved per connection (Topic Alias Maximum 64);
//! the broker sends none. A subscription's 5.0 Subscription Identifier goes on the PUBLISH
//! packets of its deliveries (one delivery per matching subscription, so one identifier).
//!
//! Retained messages: a PUBLISH (or a will) with the retain flag is routed as usual and
//! carries `ActiveMQ.Retain`, which the core retains (`core::retained`: one per topic, an empty
//! payload clears it, stored in a reserved store queue so that it survives a restart). A
//! SUBSCRIBE gets the retained messages its filter matches (not `$` topics for a filter
//! starting with a wildcard) with the retain flag, at the lower of their QoS and the
//! subscription's, after the SUBACK, unless 5.0's Retain Handling says otherwise (1: only for
//! a new subscription, 2: never). Those deliveries are copies sent by the adapter itself (QoS
//! 1 and 2 through the same packet ids and handshakes), whose acknowledgements go nowhere: the
//! retained message stays. Ordinary deliveries have the retain flag cleared, unless the 5.0
//! subscription asked for Retain As Published.
//!
//! Sessions (see `core::sessions`): a session that outlives its connection (3.x: clean
//! session 0, which never expires, as in ActiveMQ; 5.0: a Session Expiry Interval, which a
//! DISCONNECT may shorten, but not set after CONNECT's 0) keeps a record in the core: its
//! subscriptions with their options and identifiers, and when its connection ended. The
//! record is stored at CONNECT, at each SUBSCRIBE and UNSUBSCRIBE, and when the connection
//! ends; the core ends the session once the interval has passed (its durable subscriptions
//! and their messages removed), counting from the restart for a session that was connected
//! when the broker stopped. A resumed session gets its subscriptions back as they were made.
//! A session of interval 0 ends with its connection.
//!
//! Shared subscriptions (`$share/{ShareName}/{filter}`, accepted in 3.1.1 too, as mosquitto
//! does) join their group, one durable subscription of the core that every member consumes
//! from (`Core::subscribe_shared`): each message to one member, what a member leaves
//! unacknowledged to the others, messages kept while only persistent members are away. No
//! retained messages at a shared SUBSCRIBE (spec 4.8.2); a bad share name is refused with
//! SUBACK 0x8F.
//!
//! A 5.0 will with a Will Delay Interval is published by the core after the delay, or when
//! the session ends if sooner, unless a connection with the client id comes first.
//!
//! Receive Maximum: the client's bounds the QoS 1 and 2 deliveries in flight over the whole
//! connection (deliveries past it wait in the connection's backlog, in order); the broker's
//! ([`BROKER_RECEIVE_MAXIMUM`]) bounds the client's unacknowledged QoS 1 and 2 PUBLISHes, one
//! more being DISCONNECT 0x93. Enhanced authentication is not offered: a CONNECT naming an
//! Authentication Method gets CONNACK 0x8C, an AUTH packet is a Protocol Error.

mod consume;
mod mapping;
mod produce;

use std::collections::{HashMap, HashSet, VecDeque};
use std::future::Future;
use std::pin::Pin;
use std::sync::Arc;
use std::time::Duration;

use bytes::BytesMut;
use futures_util::stream::{FuturesOrdered, StreamExt};
use protocol::mqtt::{
    Codec, Connack, Connect, Disconnect, Limits, Packet, Properties, Property, PropertyId,
    ReasonCode, Version, Will, WireError,
};
use tokio::io::{AsyncRead, AsyncWrite};
use tokio::time::Instant;
use tokio_util::sync::CancellationToken;

use crate::core::sessions::NEVER_EXPIRES;
use crate::core::{ClientIdHeld, ConsumerId, ConsumerNotice, Delivery, HeldSends};
use crate::security::{AuthError, Authentication, PendingLogin, Subject};
use crate::session::Session;
use crate::transport::driver::{self, Admitted, Parts, Protocol, Step};
use crate::transport::writer::{self, Output};
use crate::transport::ConnectionContext;

/// A packet to write once the store has answered, and whether the connection closes after it.
type Pending = Pin<Box<dyn Future<Output = Outcome> + Send>>;

struct Outcome {
    packet: Option<Packet>,
    close: bool,
}

impl Outcome {
    fn packet(packet: Packet) -> Outcome {
        Outcome { packet: Some(packet), close: false }
    }
}

/// The connection's own work, done: an answer the store let go, or `None` when another
/// connection with the client id takes the session over (MQTT-3.1.4-3).
type Work = Option<Outcome>;

/// Why the connection closes: a 5.0 client first gets a DISCONNECT with this reason (a 3.x
/// client cannot be told, and is just closed).
#[derive(Debug)]
struct Fatal {
    reason: ReasonCode,
    why: String,
}

impl Fatal {
    fn new(reason: ReasonCode, why: impl Into<String>) -> Fatal {
        Fatal { reason, why: why.into() }
    }
}

impl From<WireError> for Fatal {
    fn from(error: WireError) -> Fatal {
        Fatal::new(error.disconnect_reason(), error.to_string())
    }
}

/// Receive Maximum when a client names none (5.0's default, and what 3.x clients get):
/// unacknowledged QoS 1 and 2 deliveries of one subscription are also bounded by its prefetch.
const DEFAULT_RECEIVE_MAXIMUM: u16 = u16::MAX;

/// The Receive Maximum a 5.0 client is told: the QoS 1 and 2 PUBLISHes it may have
/// unacknowledged at once (a PUBACK not yet received, a PUBREL not yet sent); one more is
/// DISCONNECT 0x93. Above any window a client of ours uses, low enough that one client cannot
/// hold an unbounded number of answers waiting for the store.
const BROKER_RECEIVE_MAXIMUM: u16 = 1024;

/// The Topic Alias Maximum a 5.0 client is told: the aliases it may set, 1 to this, each
/// holding one topic name for the rest of the connection.
const TOPIC_ALIAS_MAXIMUM: u16 = 64;

/// How long a CONNECT whose client id another connection holds waits for that connection to
/// close and release it: the old connection writes its pending answers and its last packets
/// (the writer's own drain limit is 5 s) first. Past it, the CONNECT is refused.
const TAKE_OVER_WAIT: Duration = Duration::from_secs(10);

/// Serves one MQTT connection until it closes.
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
    let max_packet_size = u32::try_from(context.limits.max_frame_size).unwrap_or(u32::MAX);
    let mut connection = Connection {
        codec: Codec::new(Limits { max_packet_size }),
        context: context.clone(),
        session: Session::new(context.clone()),
        peer: peer.clone(),
        output,
        version: None,
        connected: false,
        keep_alive: None,
        persistent: false,
        session_expiry: 0,
        receive_maximum: DEFAULT_RECEIVE_MAXIMUM,
        backlog: VecDeque::new(),
        unanswered_qos1: 0,
        pending: FuturesOrdered::new(),
        held: HeldSends::default(),
        received_qos2: HashSet::new(),
        released: HashMap::new(),
        subscriptions: HashMap::new(),
        by_consumer: HashMap::new(),
        in_flight: HashMap::new(),
        next_packet_id: 0,
        topic_aliases: HashMap::new(),
        resumed: Vec::new(),
        will: None,
        problem_information: true,
        authenticating: PendingLogin::default(),
        taken_over: CancellationToken::new(),
    };
    driver::run(&mut connection, reader, &context, &peer, connect_deadline).await;
    connection.publish_will();
    // The writer performs its auto-acks before the consumers are released.
    writer::finish(&mut connection.output, writer, &connection.peer).await;
    connection.release();
}

struct Connection {
    context: Arc<ConnectionContext>,
    codec: Codec,
    /// Who the client is, its client id and consumers.
    session: Session<()>,
    peer: String,
    output: Output,
    /// The version the CONNECT named (the codec's could change with a second CONNECT).
    version: Option<Version>,
    connected: bool,
    /// 1.5 times the client's keep alive; `None` for a keep alive of 0.
    keep_alive: Option<Duration>,
    /// The session outlives the connection (3.x: clean session 0; 5.0: a session expiry
    /// interval): QoS 1 and 2 subscriptions are durable subscriptions of the client id.
    persistent: bool,
    /// Seconds the session lives once the connection ends (5.0's Session Expiry Interval;
    /// 3.x: 0 for a clean session, else [`NEVER_EXPIRES`]); a DISCONNECT may change it.
    session_expiry: u32,
    /// The most unacknowledged QoS 1 and 2 deliveries the client takes at once, across all
    /// its subscriptions.
    receive_maximum: u16,
    /// Deliveries (and retained copies) that wait for the client's Receive Maximum to leave
    /// room, in arrival order.
    backlog: VecDeque<consume::Waiting>,
    /// QoS 1 PUBLISHes of the client not answered yet with a PUBACK: with the QoS 2 ones not
    /// yet released, what the broker's Receive Maximum bounds.
    unanswered_qos1: usize,
    /// Answers waiting for the store (PUBACK, PUBREC), written in the order the PUBLISHes came.
    pending: FuturesOrdered<Pending>,
    /// PUBLISHes waiting for room (producer flow control), answered through `pending` once
    /// they go ahead.
    held: HeldSends<(), produce::HeldPublish>,
    /// Packet ids of QoS 2 PUBLISHes taken and not yet released by a PUBREL: a resend of one
    /// is not published again.
    received_qos2: HashSet<u16>,
    /// Packet ids of QoS 2 deliveries of a persistent session that the client received
    /// (PUBREC) and the broker released (PUBREL), waiting for PUBCOMP; their marks are in the
    /// store (`core::exactly_once`), so a resumed session starts with them.
    released: HashMap<u16, consume::Release>,
    /// Subscriptions by their filter as the client wrote it.
    subscriptions: HashMap<String, consume::Subscription>,
    by_consumer: HashMap<ConsumerId, String>,
    /// QoS 1 and 2 deliveries the client has not acknowledged, by packet id.
    in_flight: HashMap<u16, consume::InFlight>,
    /// The last packet id given to a delivery.
    next_packet_id: u16,
    /// The client's topic aliases (5.0), by alias.
    topic_aliases: HashMap<u16, String>,
    /// The durable subscriptions a resumed session gets its consumers back for, between the
    /// CONNECT and its CONNACK.
    resumed: Vec<crate::core::sessions::StoredSubscription>,
    /// The will of the CONNECT, until a DISCONNECT discards it (or a shutdown).
    will: Option<Will>,
    /// 5.0's Request Problem Information: false, and reason strings go only in CONNACK and
    /// DISCONNECT (MQTT-3.1.2-29).
    problem_information: bool,
    /// The CONNECT whose login is being checked, and the check.
    authenticating: PendingLogin<Connect>,
    /// Cancelled when a new connection with the client id takes the session over: the
    /// connection then closes (5.0: DISCONNECT 0x8E) and releases the id.
    taken_over: CancellationToken,
}

impl Protocol for Connection {
    type Login = Connect;
    type HeldKey = ();
    type Held = produce::HeldPublish;
    type Work = Work;

    fn parts(
        &mut self,
    ) -> Parts<'_, Connect, (), produce::HeldPublish, impl Future<Output = Work> + Send> {
        let pending = &mut self.pending;
        let taken_over = &self.taken_over;
        let work = async move {
            tokio::select! {
                biased;
                () = taken_over.cancelled() => None,
                outcome = driver::next(pending) => Some(outcome),
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
        connect: Connect,
        outcome: Result<Subject, AuthError>,
        buffer: &mut BytesMut,
    ) -> Step {
        let handled = match outcome {
            Ok(subject) => {
                self.session.logged_in(subject);
                match self.connect(connect) {
                    Ok(true) => self.handle_input(buffer),
                    Ok(false) => return Step::Finish,
                    Err(fatal) => Err(fatal),
                }
            }
            Err(error) => {
                let version = connect.version;
                let reason = match error {
                    AuthError::Invalid { .. } => ReasonCode::BadUserNameOrPassword,
                    AuthError::AnonymousRefused => ReasonCode::NotAuthorized,
                    AuthError::TooManyFailures { .. } if version == Version::V5_0 => {
                        ReasonCode::ConnectionRateExceeded
                    }
                    AuthError::TooManyFailures { .. } => ReasonCode::NotAuthorized,
                };
                tracing::info!(peer = %self.peer, %error, "MQTT login refused");
                self.refuse_connect(version, reason, &error.to_string());
                return Step::Finish;
            }
        };
        self.step(handled)
    }

    fn on_delivery(&mut self, delivery: Delivery) {
        self.deliver(delivery);
    }

    fn on_notice(&mut self, notice: ConsumerNotice) -> Step {
        // MQTT cannot end one subscription from the server's side: the connection goes.
        let ConsumerNotice::Abort { reason, .. } = notice;
        tracing::info!(peer = %self.peer, %reason, "closing connection of an aborted slow consumer");
        self.disconnect(ReasonCode::ImplementationSpecificError, &reason);
        Step::Stop
    }

    fn on_admitted(&mut self, (held, room): Admitted<produce::HeldPublish>) {
        self.admitted(held, room);
    }

    fn on_work(&mut self, work: Work) -> Step {
        let outcome = match work {
            Some(outcome) => outcome,
            None => {
                // The answers still waiting for the store go out first, then the DISCONNECT
                // (`on_finish`); the will is published, the session released (`serve`).
                tracing::info!(peer = %self.peer, "MQTT session taken over by a new connection");
                return Step::Finish;
            }
        };
        if let Some(packet) = outcome.packet {
            self.write(&packet);
        }
        if outcome.close {
            Step::Stop
        } else {
            Step::Continue
        }
    }

    /// 1.5 times the keep alive once connected (MQTT-3.1.2-24), for ever with a keep alive
    /// of 0; the connect timeout before CONNECT.
    fn read_deadline(&self, now: Instant) -> Option<Instant> {
        self.connected.then(|| driver::silence_deadline(now, self.keep_alive))
    }

    fn on_silence(&mut self) {
        if self.connected {
            tracing::info!(peer = %self.peer, "closing MQTT connection: nothing within 1.5 times the keep alive");
            self.disconnect(
                ReasonCode::KeepAliveTimeout,
                "no packet within 1.5 times the keep alive",
            );
        } else {
            tracing::info!(peer = %self.peer, "closing MQTT connection: no CONNECT within the connect timeout");
        }
    }

    /// The client did not end its connection, so its will is published as for any end
    /// without a DISCONNECT (MQTT-3.1.2-8), and a 5.0 client is told why (0x98).
    fn on_admin_close(&mut self) -> Step {
        self.disconnect(ReasonCode::AdministrativeAction, "closed by an administrator");
        Step::Finish
    }

    fn on_shutdown(&mut self) -> Step {
        // The broker goes, not the client: no will.
        self.will = None;
        self.disconnect(ReasonCode::ServerShuttingDown, "the broker is shutting down");
        Step::Finish
    }

    async fn on_finish(&mut self) {
        // PUBLISHes still waiting for room were never accepted: they get no answer.
        self.held = HeldSends::default();
        while let Some(outcome) = self.pending.next().await {
            if let Some(packet) = outcome.packet {
                self.write(&packet);
            }
        }
        if self.taken_over.is_cancelled() {
            self.disconnect(
                ReasonCode::SessionTakenOver,
                "another connection with the client id took the session over",
            );
        }
    }
}

impl Connection {
    fn step(&mut self, handled: Result<bool, Fatal>) -> Step {
        match handled {
            Ok(true) => Step::Continue,
            Ok(false) => Step::Finish,
            Err(Fatal { reason, why }) => {
                tracing::info!(peer = %self.peer, error = %why, "closing MQTT connection after a protocol error");
                self.disconnect(reason, &why);
                Step::Stop
            }
        }
    }

    /// True while the connection stops reading: its login is being checked, or it holds as
    /// many PUBLISHes as it may and no subscription of it waits for an acknowledgement it
    /// would have to read (then TCP paces the client).
    fn reading_paused(&self) -> bool {
        self.authenticating.is_pending() || self.held.is_full() && self.in_flight.is_empty()
    }

    /// Encodes and queues `packet`. A packet the client's Maximum Packet Size refuses is
    /// dropped, as the 5.0 spec asks (3.1.2.11.4); false then.
    fn write(&mut self, packet: &Packet) -> bool {
        if let Packet::Puback(_) = packet {
            self.unanswered_qos1 = self.unanswered_qos1.saturating_sub(1);
        }
        let mut bytes = BytesMut::new();
        match self.codec.encode(packet, &mut bytes) {
            Ok(()) => {
                self.output.write(bytes.freeze());
                true
            }
            Err(error) => {
                tracing::info!(peer = %self.peer, %error, packet = %packet.packet_type(), "MQTT packet not sent");
                false
            }
        }
    }

    /// Tells a 5.0 client why the connection closes; a 3.x client gets no packet.
    fn disconnect(&mut self, reason: ReasonCode, why: &str) {
        let Some(Version::V5_0) = self.version else { return };
        if !self.connected {
            return;
        }
        // A second CONNECT may have changed the codec's version: speak the first one's.
        self.codec.set_version(Version::V5_0);
        let properties = Properties::new().with(Property::ReasonString(why.to_owned()));
        self.write(&Packet::Disconnect(Disconnect { reason, properties }));
    }

    /// Answers a CONNECT with the refusal `reason` (its 3.1.1 return code for a 3.x client).
    fn refuse_connect(&mut self, version: Version, reason: ReasonCode, why: &str) {
        self.codec.set_version(version);
        let properties = match version {
            Version::V5_0 => Properties::new().with(Property::ReasonString(why.to_owned())),
            _ => Properties::new(),
        };
        let connack = Connack { session_present: false, reason, properties };
        self.write(&Packet::Connack(connack));
    }

    /// Decodes and handles every complete packet in `buffer`. `Ok(false)` after DISCONNECT.
    fn handle_input(&mut self, buffer: &mut BytesMut) -> Result<bool, Fatal> {
        while !self.reading_paused() {
            let decoded = match self.codec.decode(buffer) {
                Ok(Some(packet)) => packet,
                Ok(None) => break,
                Err(error) => return Err(self.decode_error(error)),
            };
            if !self.handle_packet(decoded)? {
                return Ok(false);
            }
        }
        Ok(true)
    }

    /// What a decode error closes with: a CONNECT of a version we do not speak gets its
    /// CONNACK refusal first.
    fn decode_error(&mut self, error: WireError) -> Fatal {
        if let Some((version, connack)) = error.connack_refusal().filter(|_| !self.connected) {
            self.codec.set_version(version);
            self.write(&Packet::Connack(connack));
        }
        if let WireError::InvalidPropertyValue { property: PropertyId::TopicAlias, .. } = error {
            // The codec calls a topic alias of 0 a Protocol Error; the spec's reason for it is
            // Topic Alias invalid (3.3.2.3.4).
            return Fatal::new(ReasonCode::TopicAliasInvalid, error.to_string());
        }
        Fatal::from(error)
    }

    fn handle_packet(&mut self, packet: Packet) -> Result<bool, Fatal> {
        if !self.connected {
            let Packet::Connect(connect) = packet else {
                // The codec decodes nothing but a CONNECT before the version is known; a
                // packet that reaches here came behind a CONNECT whose login is pending.
                return Err(Fatal::new(
                    ReasonCode::ProtocolError,
                    "the first packet must be CONNECT",
                ));
            };
            if self.version.is_some() {
                return Err(Fatal::new(ReasonCode::ProtocolError, "CONNECT may be sent only once"));
            }
            return Ok(self.start_login(connect));
        }
        match packet {
            Packet::Publish(publish) => self.publish(publish)?,
            Packet::Puback(ack) => self.puback(ack.packet_id),
            Packet::Pubrec(ack) => self.pubrec(ack.packet_id, ack.reason),
            Packet::Pubrel(ack) => self.pubrel(ack.packet_id),
            Packet::Pubcomp(ack) => self.pubcomp(ack.packet_id),
            Packet::Subscribe(subscribe) => self.subscribe(subscribe)?,
            Packet::Unsubscribe(unsubscribe) => self.unsubscribe(unsubscribe),
            Packet::Pingreq => {
                self.write(&Packet::Pingresp);
            }
            Packet::Disconnect(disconnect) => {
                if let Some(expiry) = disconnect.properties.session_expiry_interval() {
                    if self.session_expiry == 0 && expiry != 0 {
                        // MQTT-3.14.2-2: a session that was to end with the connection
                        // cannot be made to outlive it now.
                        return Err(Fatal::new(
                            ReasonCode::ProtocolError,
                            "a DISCONNECT may not set a session expiry after CONNECT's 0",
                        ));
                    }
                    self.session_expiry = expiry;
                }
                // A normal close discards the will, unless a 5.0 client asks for it.
                if disconnect.reason != ReasonCode::DisconnectWithWillMessage {
                    self.will = None;
                }
                tracing::debug!(peer = %self.peer, "MQTT client disconnected");
                return Ok(false);
            }
            Packet::Connect(_) => {
                return Err(Fatal::new(ReasonCode::ProtocolError, "CONNECT may be sent only once"))
            }
            Packet::Auth(_) => {
                // The broker offers no authentication method, so no CONNECT started an
                // exchange an AUTH could belong to (spec 4.12).
                return Err(Fatal::new(
                    ReasonCode::ProtocolError,
                    "AUTH without an enhanced authentication exchange",
                ));
            }
            other => {
                return Err(Fatal::new(
                    ReasonCode::ProtocolError,
                    format!("{} packets are sent by servers, not clients", other.packet_type()),
                ))
            }
        }
        Ok(true)
    }

    /// Checks what can be refused before the login, then starts it. False if the CONNECT
    /// was refused (the connection then closes).
    fn start_login(&mut self, connect: Connect) -> bool {
        let version = connect.version;
        self.version = Some(version);
        if connect.client_id.is_empty() && !connect.clean_start {
            // MQTT-3.1.3-8: a client without an id must ask for a clean session.
            self.refuse_connect(
                version,
                ReasonCode::ClientIdentifierNotValid,
                "a client without a client id must set clean session",
            );
            return false;
        }
        if connect.properties.authentication_method().is_some() {
            self.refuse_connect(
                version,
                ReasonCode::BadAuthenticationMethod,
                "enhanced authentication is not supported",
            );
            return false;
        }
        let password = connect.password.as_ref().map(|p| String::from_utf8_lossy(p).into_owned());
        let login = self.context.security.authenticate(
            &self.peer,
            connect.username.as_deref(),
            password.as_deref(),
        );
        let login = match connect.client_id.is_empty() {
            true => login,
            false => self.taking_over(login, connect.client_id.clone()),
        };
        self.authenticating.start(connect, login);
        true
    }

    /// The login, then (if it passed) the take-over of `client_id` from the live connection
    /// that holds it, if any (MQTT-3.1.4-3): that connection is asked to close, and the login
    /// completes once it has released the id, or after [`TAKE_OVER_WAIT`] (then the claim in
    /// [`connect`](Self::connect) refuses the CONNECT). Nothing reads meanwhile, as during any
    /// login. A connection of another protocol that holds the id keeps it.
    fn taking_over(&self, login: Authentication, client_id: String) -> Authentication {
        let core = self.context.core.clone();
        let connection = self.session.connection();
        let peer = self.peer.clone();
        Box::pin(async move {
            let subject = login.await?;
            // The table's lock is let go before the wait (the no-deadlock rule).
            let held = core.take_over_client_id(&client_id, connection);
            if let Some(ClientIdHeld::Yielding(released)) = held {
                tracing::debug!(peer, client_id, "taking the MQTT session over");
                let wait = tokio::time::timeout(TAKE_OVER_WAIT, released.cancelled()).await;
                if wait.is_err() {
                    tracing::info!(
                        peer,
                        client_id,
                        "the connection holding the client id did not close in time"
                    );
                }
            }
            Ok(subject)
        })
    }

    /// The login went through: claims the client id and answers with the CONNACK. `Ok(false)`
    /// if the CONNECT is refused after all.
    fn connect(&mut self, connect: Connect) -> Result<bool, Fatal> {
        let version = connect.version;
        let assigned = connect.client_id.is_empty().then(|| self.session.connection_name());
        let client_id = assigned.clone().unwrap_or_else(|| connect.client_id.clone());
        // The login took the id over from an MQTT connection that held it; a connection of
        // another protocol that holds it, one that did not close in time, or a third that
        // claimed it first, gets the CONNECT refused.
        let claimed = self.session.claim_client_id_yielding(&client_id, self.taken_over.clone());
        if let Err(refused) = claimed {
            tracing::info!(peer = %self.peer, %refused, "MQTT CONNECT refused");
            self.refuse_connect(
                version,
                ReasonCode::ClientIdentifierNotValid,
                &refused.to_string(),
            );
            return Ok(false);
        }
        // A delayed will of the client id is not published: it is back (MQTT-3.1.3-9).
        self.context.core.cancel_delayed_will(&client_id);
        self.session_expiry = match version {
            Version::V5_0 => connect.properties.session_expiry_interval().unwrap_or(0),
            // A 3.x persistent session never expires, as in ActiveMQ.
            _ if connect.clean_start => 0,
            _ => NEVER_EXPIRES,
        };
        self.persistent = self.session_expiry > 0;
        self.problem_information = connect.properties.request_problem_information() != Some(0);
        if let Some(maximum) = connect.properties.receive_maximum() {
            self.receive_maximum = maximum;
        }
        if let Some(maximum) = connect.properties.maximum_packet_size() {
            self.codec.set_peer_max_packet_size(maximum);
        }
        self.keep_alive = (connect.keep_alive > 0)
            .then(|| Duration::from_secs(u64::from(connect.keep_alive)).mul_f64(1.5));
        let session_present = self.resume_session(connect.clean_start, &client_id);
        if !connect.clean_start {
            // QoS 2 PUBLISHes received before the session was away (or the broker
            // restarted) whose PUBREL has not come: a resend is answered, not published.
            let marks = self.context.core.exactly_once_marks(&client_id);
            self.received_qos2.extend(marks.received());
            self.released = marks
                .released
                .iter()
                .map(|(&id, released)| (id, consume::Release::resumed(released.message)))
                .collect();
        }
        let mut properties = Properties::new();
        if version == Version::V5_0 {
            if let Some(id) = assigned {
                properties.push(Property::AssignedClientIdentifier(id));
            }
            properties.push(Property::TopicAliasMaximum(TOPIC_ALIAS_MAXIMUM));
            properties.push(Property::RetainAvailable(1));
            properties.push(Property::SharedSubscriptionAvailable(1));
            properties.push(Property::ReceiveMaximum(BROKER_RECEIVE_MAXIMUM));
            properties.push(Property::SubscriptionIdentifierAvailable(1));
            properties.push(Property::MaximumPacketSize(self.codec.limits().max_packet_size));
        }
        self.codec.set_version(version);
        let connack = Connack { session_present, reason: ReasonCode::Success, properties };
        self.write(&Packet::Connack(connack));
        self.connected = true;
        self.will = connect.will;
        self.session.announce(None);
        let had_record = session_present && self.context.core.session_record(&client_id).is_some();
        self.resend_releases();
        self.restore_subscriptions();
        if had_record && !self.persistent {
            // Resumed for this connection only: stored as connected, so that the expiry
            // started when the last connection ended does not run; it ends at `release`.
            if let Some(record) = self.session_record() {
                self.context.core.save_session(record);
            }
        }
        self.save_session_record();
        tracing::debug!(peer = %self.peer, %version, client_id, "MQTT connected");
        Ok(true)
    }

    /// Releases the session (its client id and consumers: unacknowledged deliveries go back
    /// to their queues).
    fn release(&mut self) {
        let record = self.session_record().filter(|_| self.connected);
        // Consumers first: once the client id is free, a client that reconnects with it
        // finds its durable subscriptions free too (to resume them, or to remove them).
        let subscriptions: Vec<consume::Subscription> =
            self.subscriptions.drain().map(|(_, subscription)| subscription).collect();
        for subscription in &subscriptions {
            self.session.unsubscribe(subscription.consumer());
        }
        self.by_consumer.clear();
        self.in_flight.clear();
        self.backlog.clear();
        // Then the session: it outlives the connection until its expiry, or ends now with
        // its durable subscriptions and its places in shared groups. Before the client id is
        // let go, so that a client taking the session over finds it as it is.
        let core = self.context.core.clone();
        match record {
            Some(record) if self.persistent && self.session_expiry > 0 => core.end_session(record),
            Some(record) => {
                core.discard_session(&record.client_id);
                for subscription in &subscriptions {
                    if let Some(group) = subscription.shared() {
                        core.leave_shared(group);
                    } else if let Some(key) = subscription.durable() {
                        if let Ok(removed) = core.remove_durable(key) {
                            drop(removed);
                        }
                    }
                }
            }
            None => {
                for group in subscriptions.iter().filter_map(|s| s.shared()) {
                    core.leave_shared(group);
                }
            }
        }
        self.session.release();
    }
}
