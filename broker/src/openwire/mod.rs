//! The OpenWire adapter: the protocol of the stock ActiveMQ 5.x JMS client (`tcp://`,
//! `nio://`). One [`Connection`] task per socket owns the connection's state (its codec with
//! the negotiated wire format and marshalling caches, consumers, producers, transactions); a
//! writer task owns the socket's writing half. Responses that wait for the store go through a
//! `FuturesOrdered`, so they are written in request order once durable.
//!
//! Handshake: the broker sends its WireFormatInfo at once (ActiveMQ's property set), reads the
//! client's, negotiates, then sends a BrokerInfo. The inactivity monitor sends a KeepAliveInfo
//! every third of the negotiated `MaxInactivityDuration` and closes a connection that sent
//! nothing for that long (after the initial delay).

mod mapping;

use std::collections::HashMap;
use std::future::Future;
use std::pin::Pin;
use std::sync::Arc;
use std::time::Duration;

use bytes::{Bytes, BytesMut};
use futures_util::stream::{FuturesOrdered, FuturesUnordered, StreamExt};
use protocol::openwire::{
    self as ow, ack_type, transaction_type, Codec, Command, DataStructure, Throwable, WireError,
    WireFormat, WireFormatInfo,
};
use store::{DestinationKind, Message, SubscriptionKey};
use tokio::io::{AsyncRead, AsyncWrite};
use tokio::sync::mpsc;
use tokio::time::Instant;

use crate::core::selector::Selector;
use crate::core::{
    held_sends_refusal, AckMode, ConsumerId, ConsumerNotice, ConsumerSpec, CoreError, Delivery,
    HeldSends, ProducerRegistration, QueueHandle, SendAdmission, SubscribeRequest, Transaction,
};
use crate::security::{Action, AuthError, Authentication, Subject};
use crate::session::{Delivered, Session, Settle};
use crate::transport::writer::{self, WriteItem};
use crate::transport::{ConnectionContext, ReadBuffer};

/// The JMS exception classes the client turns ExceptionResponses into.
const JMS_EXCEPTION: &str = "javax.jms.JMSException";
const INVALID_DESTINATION: &str = "javax.jms.InvalidDestinationException";
/// What ActiveMQ throws when a send finds no room and must not wait (`sendFailIfNoSpace`).
const RESOURCE_ALLOCATION: &str = "javax.jms.ResourceAllocationException";
const INVALID_SELECTOR: &str = "javax.jms.InvalidSelectorException";
const INVALID_CLIENT_ID: &str = "javax.jms.InvalidClientIDException";
/// What ActiveMQ answers a refused login with; the client throws `JMSSecurityException`.
const SECURITY_EXCEPTION: &str = "java.lang.SecurityException";

type TransactionAcks = Vec<(ow::ConsumerId, QueueHandle, Arc<Message>)>;

type Pending = Pin<Box<dyn Future<Output = Option<Command>> + Send>>;

/// A pull timer fired, or a pull ended (`Some(unused)`).
type PullEvent = Pin<Box<dyn Future<Output = (ow::ConsumerId, u64, Option<bool>)> + Send>>;

/// A queue browser's snapshot, ready to be dispatched.
type BrowseEvent = Pin<Box<dyn Future<Output = (ow::ConsumerId, Vec<Arc<Message>>)> + Send>>;

struct OwConsumer {
    core: ConsumerId,
    prefetch: i32,
    /// Delivered and not yet acknowledged.
    delivered: Delivered,
    /// Bumped by every MessagePull; a timer of an older pull is stale.
    pull_generation: u64,
}

/// Serves one OpenWire connection until it closes.
pub(crate) async fn serve<S>(
    stream: S,
    context: Arc<ConnectionContext>,
    peer: String,
    broker_url: String,
) where
    S: AsyncRead + AsyncWrite + Send + Unpin + 'static,
{
    let (reader, write_half) = tokio::io::split(stream);
    let outbound = crate::transport::Outbound::default();
    // OpenWire's keep-alive is a command the connection sends itself.
    let (out, writer) = writer::spawn(write_half, context.core.clone(), outbound.clone(), b"");
    let session = Session::new(context.clone());
    let mut connection = Connection {
        codec: Codec::new(context.limits.max_frame_size),
        context,
        session,
        peer,
        broker_url,
        out,
        outbound,
        consumers: HashMap::new(),
        by_core: HashMap::new(),
        producers: HashMap::new(),
        producer_registrations: HashMap::new(),
        transaction_acks: HashMap::new(),
        pending: FuturesOrdered::new(),
        held: HeldSends::default(),
        pulls: FuturesUnordered::new(),
        browses: FuturesUnordered::new(),
        format: None,
        authenticating: None,
    };
    connection.run(reader).await;
    connection.release();
    writer::finish(&mut connection.out, writer, &connection.peer).await;
}

/// An error answer for a command, as the client's exception class and message.
struct Refusal {
    class: &'static str,
    message: String,
}

impl Refusal {
    fn new(class: &'static str, message: impl Into<String>) -> Refusal {
        Refusal { class, message: message.into() }
    }
}

impl From<CoreError> for Refusal {
    fn from(error: CoreError) -> Refusal {
        let class = match &error {
            CoreError::NoSuchTemporary(_) => "org.apache.activemq.DestinationDoesNotExistException",
            CoreError::NotOwner(_) | CoreError::NotTemporary(_) | CoreError::WildcardSend(_) => {
                INVALID_DESTINATION
            }
            // What ActiveMQ's cron parser throws for a malformed entry.
            CoreError::InvalidSchedule(_) => "javax.jms.MessageFormatException",
            CoreError::NoSpace(_)
            | CoreError::Store(store::StoreError::Full { .. })
            | CoreError::TooManyDestinations { .. } => RESOURCE_ALLOCATION,
            _ => JMS_EXCEPTION,
        };
        Refusal::new(class, error.to_string())
    }
}

impl From<WireError> for Refusal {
    fn from(error: WireError) -> Refusal {
        Refusal::new(JMS_EXCEPTION, error.to_string())
    }
}

fn xa_refusal() -> Refusal {
    Refusal::new(JMS_EXCEPTION, "XA transactions are not supported by ferromq")
}

fn response(correlation_id: i32) -> Command {
    Command::Response(ow::Response { correlation_id, ..Default::default() })
}

fn exception_response(correlation_id: i32, refusal: Refusal) -> Command {
    Command::ExceptionResponse(Box::new(ow::ExceptionResponse {
        correlation_id,
        exception: Some(Throwable::new(refusal.class, refusal.message)),
        ..Default::default()
    }))
}

struct Connection {
    context: Arc<ConnectionContext>,
    codec: Codec,
    /// Who the client is, its client id, consumers, transactions and temporary destinations.
    session: Session<ow::LocalTransactionId>,
    peer: String,
    broker_url: String,
    out: mpsc::UnboundedSender<WriteItem>,
    /// What waits in `out` unwritten: deliveries are taken only while it has room.
    outbound: crate::transport::Outbound,
    consumers: HashMap<ow::ConsumerId, OwConsumer>,
    by_core: HashMap<ConsumerId, ow::ConsumerId>,
    /// Producers and their window size (ProducerAck after async sends when > 0).
    producers: HashMap<ow::ProducerId, i32>,
    /// Producers created for a destination, counted on it (for the statistics) while their
    /// registration lives.
    producer_registrations: HashMap<ow::ProducerId, ProducerRegistration>,
    /// What each open transaction acknowledged: on rollback these are again awaiting an ack
    /// (the client redelivers them itself).
    transaction_acks: HashMap<ow::LocalTransactionId, TransactionAcks>,
    pending: FuturesOrdered<Pending>,
    /// Sends waiting for room (producer flow control), in order per producer.
    held: HeldSends<Option<ow::ProducerId>, HeldSend>,
    pulls: FuturesUnordered<PullEvent>,
    browses: FuturesUnordered<BrowseEvent>,
    format: Option<WireFormat>,
    /// The ConnectionInfo whose login is being checked (with its command id and whether it
    /// wants a response), and the check.
    authenticating: Option<(Box<ow::ConnectionInfo>, i32, bool, Authentication)>,
}

/// The outcome of the login being checked, with its ConnectionInfo; never ready without one.
async fn authentication(
    pending: &mut Option<(Box<ow::ConnectionInfo>, i32, bool, Authentication)>,
) -> (Box<ow::ConnectionInfo>, i32, bool, Result<Subject, AuthError>) {
    let Some((_, _, _, check)) = pending.as_mut() else { return std::future::pending().await };
    let outcome = check.await;
    match pending.take() {
        Some((info, id, required, _)) => (info, id, required, outcome),
        None => std::future::pending().await,
    }
}

/// A send held by producer flow control, with what its answer needs.
struct HeldSend {
    /// Its command id, for the Response.
    id: i32,
    required: bool,
    producer: Option<ow::ProducerId>,
    /// What its ProducerAck reports.
    size: usize,
}

/// Why the loop ends.
enum Flow {
    Continue,
    Close,
}

impl Connection {
    fn local_info(&self) -> WireFormatInfo {
        let format = WireFormat {
            max_frame_size: self.context.limits.max_frame_size as u64,
            ..WireFormat::default()
        };
        let mut info = WireFormatInfo::announcing(&format, "ActiveMQ", "5.17.2");
        info.properties.insert(ow::option::PLATFORM_DETAILS, "ferromq (Rust)");
        info
    }

    async fn run<R: AsyncRead + Unpin>(&mut self, mut reader: R) {
        let local = self.local_info();
        match self.codec.encode_to_bytes(&local.clone().into()) {
            Ok(bytes) => {
                self.outbound.queued(bytes.len());
                let _ = self.out.send(WriteItem::Bytes(bytes));
            }
            Err(error) => {
                tracing::error!(%error, "cannot encode the WireFormatInfo");
                return;
            }
        }
        // Sized by what the client sends: an idle connection holds half a KiB.
        let mut buffer = ReadBuffer::default();
        let read_deadline = tokio::time::sleep(self.context.connect_timeout);
        tokio::pin!(read_deadline);
        let mut read_timeout: Option<Duration> = None;
        // Keep-alives start once negotiated.
        let mut keep_alive = tokio::time::interval(Duration::from_secs(3600 * 24 * 365));
        keep_alive.reset();
        let shutdown = self.context.shutdown.clone();
        let connection = self.session.connection();
        loop {
            tokio::select! {
                _ = shutdown.cancelled() => {
                    self.finish_pending().await;
                    break;
                }
                read = buffer.read_from(&mut reader), if self.authenticating.is_none() => {
                    match read {
                        Ok(0) | Err(_) => {
                            if !buffer.is_empty() {
                                tracing::debug!(peer = %self.peer, bytes = buffer.len(), "connection closed mid-frame");
                            }
                            break;
                        }
                        Ok(_) => {}
                    }
                    let was_negotiated = self.format.is_some();
                    let handled = self.handle_input(buffer.bytes(), &local);
                    buffer.decoded();
                    if !self.settle(handled).await {
                        break;
                    }
                    if let (false, Some(format)) = (was_negotiated, self.format) {
                        if format.max_inactivity_duration > 0 {
                            let max = Duration::from_millis(format.max_inactivity_duration as u64);
                            let initial = Duration::from_millis(
                                format.max_inactivity_duration_initial_delay.max(0) as u64,
                            );
                            read_timeout = Some(max);
                            read_deadline.as_mut().reset(Instant::now() + initial + max);
                            let period = (max / 3).max(Duration::from_millis(100));
                            keep_alive = tokio::time::interval_at(Instant::now() + period, period);
                        } else {
                            read_deadline.as_mut().reset(Instant::now() + Duration::from_secs(3600 * 24 * 365));
                        }
                    } else if let Some(timeout) = read_timeout {
                        let at = (Instant::now() + timeout).max(read_deadline.deadline());
                        read_deadline.as_mut().reset(at);
                    }
                }
                (info, id, required, outcome) = authentication(&mut self.authenticating), if self.authenticating.is_some() => {
                    match outcome {
                        Ok(subject) => {
                            self.session.logged_in(subject);
                            self.connection_info(id, required, &info);
                            // Then the commands the client sent behind its ConnectionInfo.
                            let handled = self.handle_input(buffer.bytes(), &local);
                            buffer.decoded();
                            if !self.settle(handled).await {
                                break;
                            }
                        }
                        Err(error) => {
                            let refusal = Refusal::new(SECURITY_EXCEPTION, error.to_string());
                            self.answer(id, required, Err(refusal));
                            self.finish_pending().await;
                            break;
                        }
                    }
                }
                // A client that does not read leaves its deliveries in the channel, where the
                // queues count them in flight, instead of encoded in the writer's.
                Some(delivery) = self.session.deliveries.recv(), if self.outbound.has_room() => self.deliver(delivery),
                () = self.outbound.room(), if !self.outbound.has_room() => {}
                Some(notice) = self.session.notices.recv() => {
                    if let Flow::Close = self.notice(notice) {
                        self.finish_pending().await;
                        break;
                    }
                }
                (held, room) = self.held.next(&self.context.core, connection), if !self.held.is_empty() => {
                    self.admitted(held, room);
                }
                Some(reply) = self.pending.next(), if !self.pending.is_empty() => {
                    if let Some(command) = reply {
                        self.write(&command);
                    }
                }
                Some((consumer, generation, ended)) = self.pulls.next(), if !self.pulls.is_empty() => {
                    self.pull_event(consumer, generation, ended);
                }
                Some((consumer, messages)) = self.browses.next(), if !self.browses.is_empty() => {
                    self.browsed(consumer, messages);
                }
                _ = keep_alive.tick() => {
                    if self.format.is_some() {
                        self.write(&Command::KeepAliveInfo(ow::KeepAliveInfo::default()));
                    }
                }
                _ = &mut read_deadline => {
                    let reason = if self.format.is_some() {
                        "nothing received within the negotiated MaxInactivityDuration"
                    } else {
                        "no WireFormatInfo within the connect timeout"
                    };
                    tracing::info!(peer = %self.peer, reason, "closing idle OpenWire connection");
                    break;
                }
            }
        }
    }

    /// What follows the commands handled: `false` when the connection is to close (asked
    /// for, or after a protocol error, which the client hears of first).
    async fn settle(&mut self, handled: Result<Flow, WireError>) -> bool {
        match handled {
            Ok(Flow::Continue) => true,
            Ok(Flow::Close) => {
                self.finish_pending().await;
                false
            }
            Err(error) => {
                tracing::error!(peer = %self.peer, %error, "closing OpenWire connection after a protocol error");
                if self.format.is_some() {
                    // The client hands this to the connection's exception listener: the
                    // application learns why, not just that the socket closed.
                    self.finish_pending().await;
                    let reason = format!("ferromq closed the connection: {error}");
                    self.write(&Command::ConnectionError(Box::new(ow::ConnectionError {
                        exception: Some(Throwable::new("java.io.IOException", reason)),
                        ..Default::default()
                    })));
                }
                false
            }
        }
    }

    async fn finish_pending(&mut self) {
        // Sends still waiting for room were never accepted.
        self.held = HeldSends::default();
        while let Some(reply) = self.pending.next().await {
            if let Some(command) = reply {
                self.write(&command);
            }
        }
    }

    fn write(&mut self, command: &Command) {
        match self.codec.encode_to_bytes(command) {
            Ok(bytes) => {
                self.outbound.queued(bytes.len());
                let _ = self.out.send(WriteItem::Bytes(bytes));
            }
            Err(error) => {
                tracing::error!(peer = %self.peer, %error, "cannot encode an OpenWire command")
            }
        }
    }

    /// Writes `command` now, or behind the responses still waiting for the store.
    fn reply(&mut self, command: Command) {
        if self.pending.is_empty() {
            self.write(&command);
        } else {
            self.pending.push_back(Box::pin(async move { Some(command) }));
        }
    }

    fn answer(&mut self, command_id: i32, required: bool, result: Result<(), Refusal>) {
        match result {
            Ok(()) if required => self.reply(response(command_id)),
            Ok(()) => {}
            Err(refusal) => {
                tracing::debug!(peer = %self.peer, class = refusal.class, message = %refusal.message, "command refused");
                if required {
                    self.reply(exception_response(command_id, refusal));
                } else {
                    tracing::warn!(peer = %self.peer, message = %refusal.message, "asynchronous command failed");
                }
            }
        }
    }

    fn handle_input(
        &mut self,
        buffer: &mut BytesMut,
        local: &WireFormatInfo,
    ) -> Result<Flow, WireError> {
        // While a login is checked, what follows the ConnectionInfo waits in the buffer.
        while self.authenticating.is_none() {
            let Some(command) = self.codec.decode(buffer)? else { break };
            if self.format.is_none() {
                let Command::WireFormatInfo(remote) = command else {
                    return Err(WireError::NotNegotiated { data_type: command.data_type() });
                };
                let format = self.codec.negotiate(local, &remote)?;
                self.format = Some(format);
                tracing::debug!(peer = %self.peer, version = format.version, "OpenWire negotiated");
                let name = self
                    .context
                    .id_prefix
                    .rsplit_once('-')
                    .map_or(self.context.id_prefix.as_str(), |(n, _)| n)
                    .to_owned();
                let info = ow::BrokerInfo {
                    broker_id: Some(ow::BrokerId {
                        value: format!("ID:{}", self.context.id_prefix),
                    }),
                    broker_url: Some(self.broker_url.clone()),
                    broker_name: Some(name),
                    ..Default::default()
                };
                self.write(&Command::BrokerInfo(Box::new(info)));
                continue;
            }
            if let Flow::Close = self.handle(command) {
                return Ok(Flow::Close);
            }
        }
        Ok(Flow::Continue)
    }

    /// Asks `[[authorization]]` whether this client may `action` `destination` (and create it,
    /// when it does not exist yet).
    fn authorize(&self, action: Action, destination: &store::Destination) -> Result<(), Refusal> {
        self.session
            .authorize(action, destination)
            .map_err(|denied| Refusal::new(SECURITY_EXCEPTION, denied.to_string()))
    }

    /// Completes a ConnectionInfo whose login checked out: claims its client id.
    fn connection_info(&mut self, id: i32, required: bool, info: &ow::ConnectionInfo) {
        let connection = info.connection_id.as_ref().map(|id| id.value.as_str());
        let result = self
            .session
            .open(info.client_id.as_deref(), connection)
            .map_err(|refused| Refusal::new(INVALID_CLIENT_ID, refused.to_string()));
        self.answer(id, required, result);
    }

    fn handle(&mut self, command: Command) -> Flow {
        let id = command.command_id();
        let required = command.response_required();
        let logged_in = self.session.subject().is_some() || !self.context.security.enabled();
        let before_login = matches!(
            command,
            Command::ConnectionInfo(_)
                | Command::KeepAliveInfo(_)
                | Command::ShutdownInfo(_)
                | Command::WireFormatInfo(_)
        );
        if !logged_in && !before_login {
            let refusal = Refusal::new(
                SECURITY_EXCEPTION,
                "not logged in: send a ConnectionInfo with a user name and password first",
            );
            self.answer(id, required, Err(refusal));
            return Flow::Close;
        }
        match command {
            Command::ConnectionInfo(info) => {
                let security = &self.context.security;
                let login = security.authenticate(
                    &self.peer,
                    info.user_name.as_deref(),
                    info.password.as_deref(),
                );
                self.authenticating = Some((info, id, required, login));
            }
            Command::SessionInfo(_) => self.answer(id, required, Ok(())),
            Command::ProducerInfo(info) => {
                if let Some(producer) = info.producer_id.clone() {
                    if let Some(destination) = &info.destination {
                        let destination = mapping::destination_from(destination);
                        if let Err(refusal) = self.authorize(Action::Write, &destination) {
                            self.answer(id, required, Err(refusal));
                            return Flow::Continue;
                        }
                        let id = format!(
                            "{}:{}:{}",
                            producer.connection_id, producer.session_id, producer.value
                        );
                        let registration = self.context.core.register_producer(&destination, &id);
                        self.producer_registrations.insert(producer.clone(), registration);
                    }
                    self.producers.insert(producer, info.window_size);
                }
                self.answer(id, required, Ok(()));
            }
            Command::ConsumerInfo(info) => {
                let result = self.add_consumer(&info);
                self.answer(id, required, result);
            }
            Command::RemoveInfo(info) => {
                self.remove(info.object_id.as_deref(), info.last_delivered_sequence_id);
                self.answer(id, required, Ok(()));
            }
            Command::RemoveSubscriptionInfo(info) => self.remove_subscription(id, required, &info),
            Command::Message(message) => self.send(id, required, *message),
            Command::MessageAck(ack) => {
                let result = self.ack(&ack);
                self.answer(id, required, result);
            }
            Command::MessagePull(pull) => {
                self.pull(&pull);
                self.answer(id, required, Ok(()));
            }
            Command::TransactionInfo(info) => self.transaction(id, required, &info),
            Command::ConsumerControl(control) => {
                self.consumer_control(&control);
                self.answer(id, required, Ok(()));
            }
            Command::DestinationInfo(info) => {
                let result = self.destination_info(&info);
                self.answer(id, required, result);
            }
            Command::KeepAliveInfo(_) => {
                if required {
                    self.write(&Command::KeepAliveInfo(ow::KeepAliveInfo::default()));
                }
            }
            Command::ShutdownInfo(_) => return Flow::Close,
            Command::WireFormatInfo(_) => {
                tracing::debug!(peer = %self.peer, "second WireFormatInfo ignored");
            }
            other => {
                tracing::debug!(peer = %self.peer, data_type = other.data_type(), "command ignored");
                self.answer(id, required, Ok(()));
            }
        }
        Flow::Continue
    }

    fn add_consumer(&mut self, info: &ow::ConsumerInfo) -> Result<(), Refusal> {
        let consumer_id = info
            .consumer_id
            .clone()
            .ok_or_else(|| Refusal::new(JMS_EXCEPTION, "no consumer id"))?;
        let selector = Selector::parse_optional(info.selector.as_deref())
            .map_err(|e| Refusal::new(INVALID_SELECTOR, e.to_string()))?
            .map(Arc::new);
        if self.consumers.contains_key(&consumer_id) {
            return Err(Refusal::new(JMS_EXCEPTION, "this consumer id is already in use"));
        }
        let destination =
            info.destination.as_ref().map(mapping::destination_from).ok_or_else(|| {
                Refusal::new(INVALID_DESTINATION, "the consumer has no destination")
            })?;
        self.authorize(Action::Read, &destination)?;
        if info.browser {
            if destination.kind != DestinationKind::Queue {
                return Err(Refusal::new(INVALID_DESTINATION, "only queues can be browsed"));
            }
            let snapshot = self.context.core.browse(&destination.name, selector);
            self.browses.push(Box::pin(async move { (consumer_id, snapshot.await) }));
            return Ok(());
        }
        let durable = match &info.subscription_name {
            Some(name) if !name.is_empty() => {
                if destination.kind != DestinationKind::Topic {
                    return Err(Refusal::new(
                        INVALID_DESTINATION,
                        "durable subscriptions are for topics",
                    ));
                }
                let client_id = self.session.client_id().cloned().ok_or_else(|| {
                    Refusal::new(INVALID_CLIENT_ID, "a durable subscription needs a client id")
                })?;
                Some(SubscriptionKey { client_id, name: name.as_str().into() })
            }
            _ => None,
        };
        let core = self.context.core.clone();
        let requested = u32::try_from(info.prefetch_size.max(0)).unwrap_or(0);
        let prefetch = core.prefetch_for(&destination, durable.is_some(), Some(requested));
        let prefetch = i32::try_from(prefetch).unwrap_or(i32::MAX);
        tracing::debug!(peer = %self.peer, prefetch, "consumer added");
        let consumer = core.next_consumer_id();
        self.session.subscribe(SubscribeRequest {
            destination,
            spec: ConsumerSpec {
                id: consumer,
                prefetch: prefetch as u32,
                ack_mode: AckMode::ClientIndividual,
                exclusive: info.exclusive,
                priority: info.priority,
                sink: self.session.delivery_sink(),
                selector,
                // The JMS client counts redeliveries itself and sends a poison ack.
                counts_redeliveries: false,
            },
            durable,
            retroactive: info.retroactive,
            no_local: info.no_local,
            connection: self.session.connection(),
        })?;
        self.by_core.insert(consumer, consumer_id.clone());
        self.consumers.insert(
            consumer_id,
            OwConsumer {
                core: consumer,
                prefetch,
                delivered: Delivered::default(),
                pull_generation: 0,
            },
        );
        Ok(())
    }

    /// Closes a consumer. `last_delivered` is the broker sequence id of the last message the
    /// client handed to the application (-1: none; -2: unknown): later ones were only
    /// prefetched and go back not marked redelivered, as with ActiveMQ.
    fn remove_consumer(&mut self, id: &ow::ConsumerId, last_delivered: i64) {
        if let Some(consumer) = self.consumers.remove(id) {
            self.by_core.remove(&consumer.core);
            if last_delivered >= -1 {
                let seen = consumer
                    .delivered
                    .messages()
                    .map(|m| m.id)
                    .filter(|id| id.0 as i64 <= last_delivered)
                    .collect();
                self.session.unsubscribe_seen_only(consumer.core, seen);
            } else {
                self.session.unsubscribe(consumer.core);
            }
        }
    }

    fn remove(&mut self, object: Option<&DataStructure>, last_delivered: i64) {
        match object {
            Some(DataStructure::ConsumerId(id)) => self.remove_consumer(id, last_delivered),
            Some(DataStructure::ProducerId(id)) => {
                self.producers.remove(id);
                self.producer_registrations.remove(id);
            }
            Some(DataStructure::SessionId(session)) => {
                let ids: Vec<ow::ConsumerId> = self
                    .consumers
                    .keys()
                    .filter(|c| {
                        c.connection_id == session.connection_id && c.session_id == session.value
                    })
                    .cloned()
                    .collect();
                for id in ids {
                    self.remove_consumer(&id, last_delivered);
                }
                self.producers.retain(|p, _| {
                    !(p.connection_id == session.connection_id && p.session_id == session.value)
                });
                self.producer_registrations.retain(|p, _| {
                    !(p.connection_id == session.connection_id && p.session_id == session.value)
                });
            }
            Some(DataStructure::ConnectionId(_)) => {
                let ids: Vec<ow::ConsumerId> = self.consumers.keys().cloned().collect();
                for id in ids {
                    self.remove_consumer(&id, last_delivered);
                }
                self.release();
            }
            _ => {}
        }
    }

    fn remove_subscription(&mut self, id: i32, required: bool, info: &ow::RemoveSubscriptionInfo) {
        let client_id = info
            .client_id
            .as_deref()
            .filter(|c| !c.is_empty())
            .map(Arc::from)
            .or_else(|| self.session.client_id().cloned());
        let (Some(client_id), Some(name)) = (client_id, info.subscription_name.as_deref()) else {
            self.answer(
                id,
                required,
                Err(Refusal::new(INVALID_CLIENT_ID, "unsubscribing needs a client id and a name")),
            );
            return;
        };
        let key = SubscriptionKey { client_id, name: name.into() };
        match self.context.core.remove_durable(&key) {
            Ok(completion) => {
                self.pending.push_back(Box::pin(async move {
                    match completion.await {
                        Ok(()) => required.then(|| response(id)),
                        Err(error) => required.then(|| {
                            exception_response(
                                id,
                                Refusal::new(
                                    JMS_EXCEPTION,
                                    format!("subscription not removed: {error}"),
                                ),
                            )
                        }),
                    }
                }));
            }
            Err(error) => self.answer(id, required, Err(error.into())),
        }
    }

    fn transaction_of(
        &mut self,
        id: Option<&ow::TransactionId>,
    ) -> Result<Option<&mut Transaction>, Refusal> {
        match id {
            None => Ok(None),
            Some(ow::TransactionId::Xa(_)) => Err(xa_refusal()),
            Some(ow::TransactionId::Local(local)) => {
                // The client begins lazily; a send in an unknown transaction begins it.
                if let Some(transaction) = self.session.begin(local.clone()) {
                    transaction.keep_delivered_on_rollback();
                }
                Ok(self.session.transaction(local))
            }
        }
    }

    fn send(&mut self, id: i32, required: bool, message: ow::Message) {
        let core = self.context.core.clone();
        let mapped = mapping::message_from(&message, core.next_message_id());
        let stored = match mapped {
            Ok(m) => Arc::new(m),
            Err(error) => return self.answer(id, required, Err(error.into())),
        };
        if let Err(refusal) = self.authorize(Action::Write, &stored.destination) {
            return self.answer(id, required, Err(refusal));
        }
        let size = 1024
            + message.content.as_ref().map_or(0, Bytes::len)
            + message.marshalled_properties.as_ref().map_or(0, Bytes::len);
        let send = HeldSend { id, required, producer: message.producer_id, size };
        if message.transaction_id.is_none() {
            // Producer flow control: a send that finds no room, or earlier sends of its
            // producer waiting, is held while the connection goes on reading; its Response (a
            // synchronous send) or ProducerAck (an asynchronous one with a window) goes out
            // once it is accepted, which is what paces the client.
            let key = send.producer.clone();
            let connection = self.session.connection();
            return match self.held.admit(&core, connection, key, send, stored) {
                SendAdmission::Now(send, stored) => self.submit(send, stored, None),
                SendAdmission::Held { forced } => {
                    if let Some(oldest) = forced {
                        self.admitted(oldest, Ok(()));
                    }
                }
                SendAdmission::Refused(send) => {
                    let refusal = Refusal::new(RESOURCE_ALLOCATION, held_sends_refusal());
                    self.refuse_send(&send, refusal)
                }
            };
        }
        self.submit(send, stored, message.transaction_id.as_ref());
    }

    /// A held send's wait ended: it is sent now, or refused (no room, per the settings).
    fn admitted(&mut self, (send, message): (HeldSend, Arc<Message>), room: Result<(), CoreError>) {
        match room {
            Ok(()) => self.submit(send, message, None),
            Err(error) => {
                self.refuse_send(&send, Refusal::new(RESOURCE_ALLOCATION, error.to_string()))
            }
        }
    }

    /// Tells the client a send was refused: an ExceptionResponse for a synchronous send; for
    /// an asynchronous one, which has no response, a ConnectionError (the JMS client hands it
    /// to the connection's exception listener and stays connected).
    fn refuse_send(&mut self, send: &HeldSend, refusal: Refusal) {
        tracing::info!(peer = %self.peer, message = %refusal.message, "send refused");
        if send.required {
            self.reply(exception_response(send.id, refusal));
        } else {
            let error = ow::ConnectionError {
                exception: Some(Throwable::new(refusal.class, refusal.message)),
                ..Default::default()
            };
            self.reply(Command::ConnectionError(Box::new(error)));
        }
    }

    /// Hands a message to the core and queues its answer: the Response of a synchronous send,
    /// the ProducerAck of an asynchronous one with a producer window, once stored.
    fn submit(&mut self, send: HeldSend, stored: Arc<Message>, txn: Option<&ow::TransactionId>) {
        let HeldSend { id, required, producer, size } = send;
        let core = self.context.core.clone();
        let connection = self.session.connection();
        let transactional = txn.is_some();
        let completion = match self.transaction_of(txn) {
            Ok(transaction) => core.send(stored, connection, transaction),
            Err(refusal) => return self.answer(id, required, Err(refusal)),
        };
        let completion = match completion {
            Ok(c) => c,
            Err(error) => {
                if let CoreError::Store(e) = &error {
                    tracing::error!(error = %e, "store refused a message");
                }
                return self.answer(id, required, Err(error.into()));
            }
        };
        let window = producer.as_ref().and_then(|p| self.producers.get(p)).copied();
        if required {
            if transactional {
                return self.reply(response(id));
            }
            self.pending.push_back(Box::pin(async move {
                Some(match completion.await {
                    Ok(()) => response(id),
                    Err(error) => {
                        tracing::error!(%error, "store refused a message");
                        exception_response(
                            id,
                            Refusal::new(JMS_EXCEPTION, format!("message not stored: {error}")),
                        )
                    }
                })
            }));
        } else if window.is_some_and(|w| w > 0) {
            let ack = Command::ProducerAck(Box::new(ow::ProducerAck {
                producer_id: producer,
                size: size as i32,
                ..Default::default()
            }));
            self.pending.push_back(Box::pin(async move {
                let _ = completion.await;
                Some(ack)
            }));
        }
    }

    fn ack(&mut self, ack: &ow::MessageAck) -> Result<(), Refusal> {
        let Some(consumer_id) = &ack.consumer_id else {
            return Err(Refusal::new(JMS_EXCEPTION, "acknowledgement without a consumer id"));
        };
        let kind = ack.ack_type;
        if kind == ack_type::REDELIVERED {
            // About to be redelivered by the client itself: nothing to do here.
            return Ok(());
        }
        let Some(consumer) = self.consumers.get_mut(consumer_id) else {
            return Ok(()); // Closed meanwhile: its messages went back.
        };
        let Some(last) = ack.last_message_id.as_ref().or(ack.first_message_id.as_ref()) else {
            return Err(Refusal::new(JMS_EXCEPTION, "acknowledgement without a message id"));
        };
        let matches = |m: &Message| m.id.0 as i64 == last.broker_sequence_id;
        let Some(position) = consumer.delivered.position(matches) else {
            tracing::debug!(peer = %self.peer, ?last, "acknowledgement of a message not awaiting one");
            return Ok(());
        };
        if kind == ack_type::DELIVERED {
            // Handed to the application up to `last`; the standard ack comes later. The
            // client-acknowledge and transacted consumers of the ActiveMQ client send these to
            // open their prefetch window, and stall without.
            let consumed = consumer.delivered.up_to(position);
            self.session.settle(consumer.core, consumed, Settle::Consumed);
            return Ok(());
        }
        let settled = if kind == ack_type::INDIVIDUAL {
            consumer.delivered.take_only(position)
        } else {
            consumer.delivered.take_up_to(position)
        };
        let core_consumer = consumer.core;
        if kind == ack_type::POISON {
            // The client's redelivery policy gave up on them (it sends this outside any
            // transaction, after rolling back): to the dead-letter queue.
            let cause = ack.poison_cause.as_ref().map(|cause| match &cause.message {
                Some(message) => format!("{}: {message}", cause.class_name),
                None => cause.class_name.clone(),
            });
            tracing::debug!(peer = %self.peer, ?cause, "poison ack");
            self.session.settle(core_consumer, settled, Settle::Poison(cause));
            return Ok(());
        }
        // Begins the transaction if the client has not yet (it begins lazily), or refuses XA.
        if self.transaction_of(ack.transaction_id.as_ref())?.is_some() {
            if let Some(ow::TransactionId::Local(local)) = &ack.transaction_id {
                self.session.ack_in_transaction(local, core_consumer, &settled)?;
                let acks = self.transaction_acks.entry(local.clone()).or_default();
                for (queue, messages) in settled.into_groups() {
                    for message in messages {
                        acks.push((consumer_id.clone(), queue.clone(), message));
                    }
                }
            }
            return Ok(());
        }
        self.session.settle(core_consumer, settled, Settle::Ack);
        Ok(())
    }

    /// The broker aborts a slow consumer as ActiveMQ's `AbortSlowConsumerStrategy` does: a
    /// ConsumerControl with `close` asks the JMS client to close the consumer (it then sends
    /// the consumer's RemoveInfo, which releases it here); with `abort_connection`, a
    /// ConnectionError tells why and the connection closes.
    fn notice(&mut self, notice: ConsumerNotice) -> Flow {
        let ConsumerNotice::Abort { consumer, destination, close_connection, reason } = notice;
        let Some(id) = self.by_core.get(&consumer).cloned() else { return Flow::Continue };
        tracing::info!(peer = %self.peer, consumer = %id.value, %reason, close_connection,
            "aborting slow consumer");
        if close_connection {
            let reason = format!("{reason}: {}:{}:{}", id.connection_id, id.session_id, id.value);
            self.write(&Command::ConnectionError(Box::new(ow::ConnectionError {
                exception: Some(Throwable::new(
                    "org.apache.activemq.transport.InactivityIOException",
                    reason,
                )),
                ..Default::default()
            })));
            return Flow::Close;
        }
        self.write(&Command::ConsumerControl(Box::new(ow::ConsumerControl {
            destination: Some(mapping::destination_to(&destination)),
            close: true,
            consumer_id: Some(id),
            ..Default::default()
        })));
        Flow::Continue
    }

    /// A client's ConsumerControl changes a consumer's prefetch. The failover transport
    /// relies on it: it restores consumers with prefetch 0 while the client still clears what
    /// the lost connection had dispatched, and then restores each prefetch this way, so that
    /// nothing is dispatched into a consumer that is about to discard it.
    fn consumer_control(&mut self, control: &ow::ConsumerControl) {
        let Some(id) = &control.consumer_id else { return };
        let Some(consumer) = self.consumers.get_mut(id) else { return };
        if control.close || control.prefetch == consumer.prefetch || control.prefetch < 0 {
            return;
        }
        tracing::debug!(peer = %self.peer, prefetch = control.prefetch, "consumer prefetch changed");
        consumer.prefetch = control.prefetch;
        // A pull in progress ends with the change (as the client no longer waits for it).
        consumer.pull_generation += 1;
        self.context.core.set_prefetch(consumer.core, control.prefetch as u32);
    }

    fn pull(&mut self, pull: &ow::MessagePull) {
        let Some(id) = &pull.consumer_id else { return };
        let Some(consumer) = self.consumers.get_mut(id) else { return };
        if consumer.prefetch != 0 {
            return;
        }
        consumer.pull_generation += 1;
        let generation = consumer.pull_generation;
        let core = self.context.core.clone();
        core.pull(consumer.core);
        let id = id.clone();
        match pull.timeout {
            0 => {} // Waits for a message as long as it takes.
            timeout if timeout < 0 => {
                let ended = core.end_pull(consumer.core);
                self.pulls.push(Box::pin(async move { (id, generation, Some(ended.await)) }));
            }
            timeout => {
                let wait = Duration::from_millis(timeout as u64);
                self.pulls.push(Box::pin(async move {
                    tokio::time::sleep(wait).await;
                    (id, generation, None)
                }));
            }
        }
    }

    fn pull_event(&mut self, id: ow::ConsumerId, generation: u64, ended: Option<bool>) {
        let Some(consumer) = self.consumers.get(&id) else { return };
        if consumer.pull_generation != generation {
            return;
        }
        match ended {
            None => {
                let ended = self.context.core.end_pull(consumer.core);
                self.pulls.push(Box::pin(async move { (id, generation, Some(ended.await)) }));
            }
            Some(true) => {
                let none = Command::MessageDispatch(Box::new(ow::MessageDispatch {
                    consumer_id: Some(id),
                    ..Default::default()
                }));
                self.write(&none);
            }
            Some(false) => {}
        }
    }

    fn transaction(&mut self, id: i32, required: bool, info: &ow::TransactionInfo) {
        let local = match &info.transaction_id {
            Some(ow::TransactionId::Local(local)) => local.clone(),
            Some(ow::TransactionId::Xa(_)) => return self.answer(id, required, Err(xa_refusal())),
            None => {
                return self.answer(
                    id,
                    required,
                    Err(Refusal::new(
                        JMS_EXCEPTION,
                        "transaction command without a transaction id",
                    )),
                )
            }
        };
        let core = self.context.core.clone();
        match info.transaction_type {
            transaction_type::BEGIN => {
                if let Some(transaction) = self.session.begin(local) {
                    transaction.keep_delivered_on_rollback();
                }
                self.answer(id, required, Ok(()));
            }
            transaction_type::COMMIT_ONE_PHASE => {
                self.transaction_acks.remove(&local);
                let Some(transaction) = self.session.end_transaction(&local) else {
                    // Nothing was sent or acknowledged in it.
                    return self.answer(id, required, Ok(()));
                };
                let committed = core.commit(transaction);
                self.pending.push_back(Box::pin(async move {
                    match committed.await {
                        Ok(()) => required.then(|| response(id)),
                        Err(error) => {
                            tracing::error!(%error, "commit failed");
                            Some(exception_response(
                                id,
                                Refusal::new(
                                    "javax.jms.TransactionRolledBackException",
                                    format!("the transaction was not committed: {error}"),
                                ),
                            ))
                        }
                    }
                }));
            }
            transaction_type::ROLLBACK => {
                if let Some(transaction) = self.session.end_transaction(&local) {
                    drop(core.rollback(transaction));
                }
                // In reverse, each to the front: the original order is restored.
                for (consumer, queue, message) in
                    self.transaction_acks.remove(&local).unwrap_or_default().into_iter().rev()
                {
                    if let Some(c) = self.consumers.get_mut(&consumer) {
                        c.delivered.push_front(queue, message);
                    }
                }
                self.answer(id, required, Ok(()));
            }
            _ => self.answer(id, required, Err(xa_refusal())),
        }
    }

    fn destination_info(&mut self, info: &ow::DestinationInfo) -> Result<(), Refusal> {
        let Some(destination) = info.destination.as_ref().map(mapping::destination_from) else {
            return Err(Refusal::new(INVALID_DESTINATION, "no destination"));
        };
        let adding = info.operation_type == ow::destination_operation::ADD;
        if adding && !self.context.core.destination_exists(&destination) {
            self.session
                .authorize_creation(&destination)
                .map_err(|denied| Refusal::new(SECURITY_EXCEPTION, denied.to_string()))?;
        }
        if !matches!(destination.kind, DestinationKind::TempQueue | DestinationKind::TempTopic) {
            // Creating or removing ordinary destinations is administration: accepted as a
            // no-op (they are created on first use).
            return Ok(());
        }
        let core = &self.context.core;
        match info.operation_type {
            ow::destination_operation::ADD => {
                core.create_temporary(destination, self.session.connection())?
            }
            _ => core.delete_temporary(&destination, self.session.connection())?,
        }
        Ok(())
    }

    /// Sends a queue browser its snapshot, then the empty dispatch that ends the browse. The
    /// browser is not a consumer of the queue: its acknowledgements change nothing.
    fn browsed(&mut self, consumer: ow::ConsumerId, messages: Vec<Arc<Message>>) {
        for message in messages {
            let message = mapping::message_to(&message, 0);
            self.write(&Command::MessageDispatch(Box::new(ow::MessageDispatch {
                consumer_id: Some(consumer.clone()),
                destination: message.destination.clone(),
                message: Some(Box::new(message)),
                ..Default::default()
            })));
        }
        self.write(&Command::MessageDispatch(Box::new(ow::MessageDispatch {
            consumer_id: Some(consumer),
            ..Default::default()
        })));
    }

    fn deliver(&mut self, delivery: Delivery) {
        let Some(id) = self.by_core.get(&delivery.consumer) else { return };
        let Some(consumer) = self.consumers.get_mut(id) else { return };
        let mut message = mapping::message_to(
            &delivery.message,
            delivery.delivery_count.saturating_sub(1) as i32,
        );
        // A copy routed elsewhere than where it was sent (a composite's target, a part of
        // `A,B`, a virtual topic's consumer queue): the client sees where it was routed as
        // JMSDestination and the sent-to destination as the original one, as with ActiveMQ.
        let shown = self.context.core.shown_destination(delivery.queue.key(), &delivery.message);
        if let Some(shown) = shown {
            message.original_destination = message.destination.take();
            message.destination = Some(mapping::destination_to(&shown));
        }
        let dispatch = Command::MessageDispatch(Box::new(ow::MessageDispatch {
            consumer_id: Some(id.clone()),
            destination: message.destination.clone(),
            redelivery_counter: message.redelivery_counter,
            message: Some(Box::new(message)),
            ..Default::default()
        }));
        consumer.delivered.push(delivery.queue, delivery.message);
        self.write(&dispatch);
    }

    /// Rolls back open transactions, releases consumers (their unacknowledged messages go
    /// back) and the connection's temporary destinations.
    fn release(&mut self) {
        self.consumers.clear();
        self.by_core.clear();
        self.producer_registrations.clear();
        self.session.release();
    }
}
