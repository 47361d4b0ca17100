//! The OpenWire adapter: the protocol of the stock ActiveMQ 5.x JMS client (`tcp://`,
//! `nio://`). One [`Connection`] per socket owns the connection's state (its codec with
//! the negotiated wire format and marshalling caches, consumers, producers, transactions) and
//! runs in the transport's connection driver; a writer task owns the socket's writing half. Responses that wait for the store go through a
//! `FuturesOrdered`, so they are written in request order once durable.
//!
//! Handshake: the broker sends its WireFormatInfo at once (ActiveMQ's property set), reads the
//! client's, negotiates, then sends a BrokerInfo. The inactivity monitor has the writer send
//! a KeepAliveInfo once nothing was written for a third of the negotiated
//! `MaxInactivityDuration`, and closes a connection that sent nothing for that long (after the
//! initial delay).

mod consumer;
mod mapping;
mod producer;
mod transaction;

use std::future::Future;
use std::pin::Pin;
use std::sync::Arc;
use std::time::Duration;

use bytes::BytesMut;
use futures_util::stream::{FuturesOrdered, FuturesUnordered, StreamExt};
use protocol::openwire::{
    self as ow, Codec, Command, Throwable, WireError, WireFormat, WireFormatInfo,
};
use rustc_hash::FxHashMap;
use store::{DestinationKind, Message};
use tokio::io::{AsyncRead, AsyncWrite};
use tokio::time::Instant;

use crate::core::{
    ClientKeyed, ConsumerId, ConsumerNotice, CoreError, Delivery, HeldSends, OperationError,
    ProducerRegistration, QueueHandle,
};
use crate::security::{Action, AuthError, PendingLogin, Subject};
use crate::session::{Delivered, Session};
use crate::transport::driver::{self, Admitted, Parts, Protocol, Step};
use crate::transport::writer::{self, Output};
use crate::transport::ConnectionContext;

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
    connect_deadline: tokio::time::Instant,
) where
    S: AsyncRead + AsyncWrite + Send + Unpin + 'static,
{
    let (reader, write_half) = tokio::io::split(stream);
    let (output, writer) = writer::spawn(write_half, context.core.clone());
    let session = Session::new(context.clone());
    let mut connection = Connection {
        codec: Codec::new(context.limits.max_frame_size),
        context: context.clone(),
        session,
        peer: peer.clone(),
        broker_url,
        output,
        consumers: ClientKeyed::default(),
        by_core: FxHashMap::default(),
        producers: ClientKeyed::default(),
        producer_registrations: ClientKeyed::default(),
        transaction_acks: ClientKeyed::default(),
        pending: FuturesOrdered::new(),
        held: HeldSends::default(),
        pulls: FuturesUnordered::new(),
        browses: FuturesUnordered::new(),
        format: None,
        inactivity: None,
        authenticating: PendingLogin::default(),
    };
    // The broker speaks first: its WireFormatInfo.
    let local = connection.local_info();
    match connection.codec.encode_to_bytes(&local.into()) {
        Ok(bytes) => {
            connection.output.write(bytes);
            driver::run(&mut connection, reader, &context, &peer, connect_deadline).await;
        }
        Err(error) => tracing::error!(%error, "cannot encode the WireFormatInfo"),
    }
    connection.release();
    writer::finish(&mut connection.output, writer, &peer).await;
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
    output: Output,
    consumers: ClientKeyed<ow::ConsumerId, OwConsumer>,
    by_core: FxHashMap<ConsumerId, ow::ConsumerId>,
    /// Producers and their window size (ProducerAck after async sends when > 0).
    producers: ClientKeyed<ow::ProducerId, i32>,
    /// Producers created for a destination, counted on it (for the statistics) while their
    /// registration lives.
    producer_registrations: ClientKeyed<ow::ProducerId, ProducerRegistration>,
    /// What each open transaction acknowledged: on rollback these are again awaiting an ack
    /// (the client redelivers them itself).
    transaction_acks: ClientKeyed<ow::LocalTransactionId, TransactionAcks>,
    pending: FuturesOrdered<Pending>,
    /// Sends waiting for room (producer flow control), in order per producer.
    held: HeldSends<Option<ow::ProducerId>, HeldSend>,
    pulls: FuturesUnordered<PullEvent>,
    browses: FuturesUnordered<BrowseEvent>,
    format: Option<WireFormat>,
    inactivity: Option<Inactivity>,
    /// The ConnectionInfo whose login is being checked (with its command id and whether it
    /// wants a response), and the check.
    authenticating: PendingLogin<(Box<ow::ConnectionInfo>, i32, bool)>,
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

/// What an OpenWire connection waits for besides its socket and the core.
enum Work {
    /// A response that waited for the store (none: nothing to write).
    Replied(Option<Command>),
    /// A pull timer fired, or a pull ended.
    Pulled((ow::ConsumerId, u64, Option<bool>)),
    /// A queue browser's snapshot.
    Browsed((ow::ConsumerId, Vec<Arc<Message>>)),
}

/// The negotiated inactivity limit.
struct Inactivity {
    limit: Duration,
    /// The initial delay's end: the client need not send before.
    not_before: Instant,
}

impl Protocol for Connection {
    type Login = (Box<ow::ConnectionInfo>, i32, bool);
    type HeldKey = Option<ow::ProducerId>;
    type Held = HeldSend;
    type Work = Work;

    fn parts(
        &mut self,
    ) -> Parts<'_, Self::Login, Self::HeldKey, HeldSend, impl Future<Output = Work> + Send> {
        let (pending, pulls, browses) = (&mut self.pending, &mut self.pulls, &mut self.browses);
        let work = async move {
            tokio::select! {
                reply = driver::next(pending) => Work::Replied(reply),
                pull = driver::next(pulls) => Work::Pulled(pull),
                browse = driver::next(browses) => Work::Browsed(browse),
            }
        };
        Parts::of(&mut self.session, &self.output, &mut self.held, &mut self.authenticating, work)
    }

    /// A connection that holds all the sends it may and has no consumers stops reading, so
    /// that TCP paces its producers (ActiveMQ blocks the connection's transport thread the
    /// same way). Asynchronous sends without a producer window have no other brake: forcing
    /// them past the limit let a fast non-persistent producer grow its queue by hundreds of
    /// MB into the temporary store. A connection with consumers keeps reading, since their
    /// acks may be what drains the destination its sends wait for.
    fn reading_paused(&self) -> bool {
        self.held.is_full() && self.consumers.is_empty()
    }

    fn on_input(&mut self, buffer: &mut BytesMut) -> Step {
        let handled = self.handle_input(buffer);
        self.step(handled)
    }

    fn on_login(
        &mut self,
        (info, id, required): Self::Login,
        outcome: Result<Subject, AuthError>,
        buffer: &mut BytesMut,
    ) -> Step {
        match outcome {
            Ok(subject) => {
                self.session.logged_in(subject);
                self.connection_info(id, required, &info);
                // Then the commands the client sent behind its ConnectionInfo.
                let handled = self.handle_input(buffer);
                self.step(handled)
            }
            Err(error) => {
                let refusal = Refusal::new(SECURITY_EXCEPTION, error.to_string());
                self.answer(id, required, Err(refusal));
                Step::Finish
            }
        }
    }

    fn on_delivery(&mut self, delivery: Delivery) {
        self.deliver(delivery);
    }

    fn on_notice(&mut self, notice: ConsumerNotice) -> Step {
        match self.notice(notice) {
            Flow::Continue => Step::Continue,
            Flow::Close => Step::Finish,
        }
    }

    fn on_admitted(&mut self, (held, room): Admitted<HeldSend>) {
        self.admitted(held, room);
    }

    fn on_work(&mut self, work: Work) -> Step {
        match work {
            Work::Replied(reply) => {
                if let Some(command) = reply {
                    self.write(&command);
                }
            }
            Work::Pulled((consumer, generation, ended)) => {
                self.pull_event(consumer, generation, ended)
            }
            Work::Browsed((consumer, messages)) => self.browsed(consumer, messages),
        }
        Step::Continue
    }

    /// The connect timeout until the WireFormatInfo, then the negotiated
    /// `MaxInactivityDuration` (not before its initial delay is over).
    fn read_deadline(&self, now: Instant) -> Option<Instant> {
        self.format?;
        Some(match &self.inactivity {
            Some(inactivity) => (now + inactivity.limit).max(inactivity.not_before),
            None => driver::silence_deadline(now, None),
        })
    }

    fn on_silence(&mut self) {
        let reason = if self.format.is_some() {
            "nothing received within the negotiated MaxInactivityDuration"
        } else {
            "no WireFormatInfo within the connect timeout"
        };
        tracing::info!(peer = %self.peer, reason, "closing idle OpenWire connection");
    }

    async fn on_finish(&mut self) {
        // Sends still waiting for room were never accepted.
        self.held = HeldSends::default();
        while let Some(reply) = self.pending.next().await {
            if let Some(command) = reply {
                self.write(&command);
            }
        }
    }
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

    /// What follows the commands handled: the connection closes when asked to, or after a
    /// protocol error, which the client hears of first (behind the answers still pending).
    fn step(&mut self, handled: Result<Flow, WireError>) -> Step {
        match handled {
            Ok(Flow::Continue) => Step::Continue,
            Ok(Flow::Close) => Step::Finish,
            Err(error) => {
                tracing::error!(peer = %self.peer, %error, "closing OpenWire connection after a protocol error");
                if self.format.is_none() {
                    return Step::Stop;
                }
                // The client hands this to the connection's exception listener: the
                // application learns why, not just that the socket closed.
                let reason = format!("ferromq closed the connection: {error}");
                self.reply(Command::ConnectionError(Box::new(ow::ConnectionError {
                    exception: Some(Throwable::new("java.io.IOException", reason)),
                    ..Default::default()
                })));
                Step::Finish
            }
        }
    }

    /// The negotiated inactivity monitor: the client must send something at least every
    /// `MaxInactivityDuration` (after the initial delay), and we send a KeepAliveInfo when
    /// we have written nothing for a third of it.
    fn monitor_inactivity(&mut self, format: &WireFormat) {
        if format.max_inactivity_duration <= 0 {
            return;
        }
        let max = Duration::from_millis(format.max_inactivity_duration as u64);
        let initial =
            Duration::from_millis(format.max_inactivity_duration_initial_delay.max(0) as u64);
        self.inactivity =
            Some(Inactivity { limit: max, not_before: Instant::now() + initial + max });
        match self.codec.encode_to_bytes(&Command::KeepAliveInfo(ow::KeepAliveInfo::default())) {
            Ok(keep_alive) => {
                self.output.heart_beat((max / 3).max(Duration::from_millis(100)), keep_alive)
            }
            Err(error) => tracing::error!(%error, "cannot encode a KeepAliveInfo"),
        }
    }

    fn write(&mut self, command: &Command) {
        match self.codec.encode_to_bytes(command) {
            Ok(bytes) => self.output.write(bytes),
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

    fn handle_input(&mut self, buffer: &mut BytesMut) -> Result<Flow, WireError> {
        // While a login is checked, what follows the ConnectionInfo waits in the buffer; so
        // do the commands behind a send that filled the held sends (the driver hands them
        // over again once the pause lifts).
        while !self.authenticating.is_pending() && !self.reading_paused() {
            let Some(command) = self.codec.decode(buffer)? else { break };
            if self.format.is_none() {
                let Command::WireFormatInfo(remote) = command else {
                    return Err(WireError::NotNegotiated { data_type: command.data_type() });
                };
                let format = self.codec.negotiate(&self.local_info(), &remote)?;
                self.format = Some(format);
                self.monitor_inactivity(&format);
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
                self.authenticating.start((info, id, required), login);
            }
            Command::SessionInfo(_) => self.answer(id, required, Ok(())),
            Command::ProducerInfo(info) => {
                if let Some(producer) = info.producer_id.clone() {
                    let destination = info.destination.as_ref().map(mapping::destination_from);
                    if let Some(destination) = &destination {
                        if let Err(refusal) = self.authorize(Action::Write, destination) {
                            self.answer(id, required, Err(refusal));
                            return Flow::Continue;
                        }
                    }
                    // Anonymous producers too (no destination): the admin endpoint lists them.
                    let name = format!(
                        "{}:{}:{}",
                        producer.connection_id, producer.session_id, producer.value
                    );
                    let connection = self.session.connection();
                    let registration = self.context.core.register_producer(
                        connection,
                        destination.as_ref(),
                        &name,
                    );
                    self.producer_registrations.insert(producer.clone(), registration);
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
            Command::DestinationInfo(info) => match self.destination_info(&info) {
                Ok(Some(removed)) => self.answer_when_durable(id, required, removed),
                result => self.answer(id, required, result.map(|_| ())),
            },
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

    /// A DestinationInfo: creates or removes a temporary destination; creating an ordinary
    /// one is a no-op (they are created on first use); removing one (the JMS client's
    /// `ActiveMQConnection.destroyDestination`) is ActiveMQ's `removeDestination`: it takes
    /// the admin right, is refused while consumers are attached ("Destination still has an
    /// active subscription"), and answers once the removal is durable (`Some`). Removing a
    /// destination that does not exist succeeds, as in ActiveMQ.
    fn destination_info(
        &mut self,
        info: &ow::DestinationInfo,
    ) -> Result<Option<store::Completion>, Refusal> {
        let Some(destination) = info.destination.as_ref().map(mapping::destination_from) else {
            return Err(Refusal::new(INVALID_DESTINATION, "no destination"));
        };
        let adding = info.operation_type == ow::destination_operation::ADD;
        let core = &self.context.core;
        if !adding || !core.destination_exists(&destination) {
            self.session
                .authorize_creation(&destination)
                .map_err(|denied| Refusal::new(SECURITY_EXCEPTION, denied.to_string()))?;
        }
        if !matches!(destination.kind, DestinationKind::TempQueue | DestinationKind::TempTopic) {
            if adding {
                return Ok(None);
            }
            return match core.start_deleting(&destination, false) {
                Ok(removed) => Ok(Some(removed)),
                Err(OperationError::NoSuchDestination { .. }) => Ok(None),
                Err(OperationError::Core(error)) => Err(error.into()),
                Err(refused) => Err(Refusal::new(JMS_EXCEPTION, refused.to_string())),
            };
        }
        match info.operation_type {
            ow::destination_operation::ADD => {
                core.create_temporary(destination, self.session.connection())?
            }
            _ => core.delete_temporary(&destination, self.session.connection())?,
        }
        Ok(None)
    }

    /// Answers `id` once `done` is durable (behind the responses still waiting for the
    /// store), or with its failure.
    fn answer_when_durable(&mut self, id: i32, required: bool, done: store::Completion) {
        self.pending.push_back(Box::pin(async move {
            match done.await {
                Ok(()) => required.then(|| response(id)),
                Err(error) => required.then(|| {
                    exception_response(id, Refusal::new(JMS_EXCEPTION, error.to_string()))
                }),
            }
        }));
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
