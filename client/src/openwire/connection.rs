//! The background task that owns an OpenWire socket.
//!
//! One task per connection runs a `select!` loop over: bytes from the broker, room to write
//! queued bytes, requests from the handles ([`super::OpenWireClient`], sessions, producers,
//! consumers) and the inactivity timers. It numbers every command it writes (`command_id`),
//! registers a waiter for each that asks for a response, and completes it from the broker's
//! Response (`Ok`) or ExceptionResponse ([`ClientError::Exception`]).
//!
//! Routing: a MessageDispatch goes to its consumer's channel by consumer id (a dispatch
//! without a message, the end of an unanswered pull, too); a ProducerAck gives its bytes back
//! to its producer's window; a KeepAliveInfo that asks for a response is answered with one; a
//! ConnectionError ends the connection with the broker's exception. When the connection
//! ends, every waiter fails with the reason, consumers see the end of their stream, and the
//! reason is kept for later calls.

use std::collections::HashMap;
use std::sync::{Arc, OnceLock};
use std::time::Duration;

use bytes::BytesMut;
use protocol::openwire::{self as ow, Codec, Command, Throwable};
use tokio::io::{AsyncRead, AsyncReadExt, AsyncWrite, AsyncWriteExt, ReadHalf, WriteHalf};
use tokio::sync::{mpsc, oneshot, watch};
use tokio::time::{sleep_until, Instant};

use crate::ClientError;

/// Where a request's outcome goes: `Ok` on Response, `Err` on ExceptionResponse or a lost
/// connection.
pub(crate) type Reply = oneshot::Sender<Result<(), ClientError>>;

/// Stop taking requests while this many bytes wait to be written (back-pressure: the
/// request channel is bounded, so senders then wait).
const WRITE_HIGH_WATER: usize = 256 * 1024;

/// Read at least this much at a time.
const READ_CHUNK: usize = 64 * 1024;

/// One MessageDispatch for a consumer: a message, or none (a pull that found nothing).
#[derive(Debug)]
pub(crate) struct Dispatch {
    pub(crate) message: Option<Box<ow::Message>>,
    pub(crate) redelivery_counter: i32,
}

/// A route the task keeps for a consumer or a producer.
pub(crate) enum Route {
    /// Dispatches for this consumer go to the channel.
    Consumer(ow::ConsumerId, mpsc::UnboundedSender<Dispatch>),
    /// ProducerAcks for this producer give bytes back to the window.
    Producer(ow::ProducerId, Arc<ProducerWindow>),
}

/// What the handles ask the task to do.
pub(crate) enum Request {
    /// Write `command` (numbered by the task). With `reply`, it asks for a response and the
    /// waiter is registered first; with `route`, the route is added before it is written.
    Command { command: Command, reply: Option<Reply>, route: Option<Route> },
    /// Stop routing dispatches to this consumer.
    ForgetConsumer(ow::ConsumerId),
    /// Stop routing ProducerAcks to this producer.
    ForgetProducer(ow::ProducerId),
    /// Write what is queued, then close the connection.
    Close,
}

/// A producer's flow-control window (ActiveMQ's `producerWindowSize`): asynchronous sends
/// add their size to the usage, the broker's ProducerAcks take it off, and a send waits
/// while the usage is at the limit.
#[derive(Debug)]
pub(crate) struct ProducerWindow {
    pub(crate) limit: usize,
    pub(crate) usage: watch::Sender<usize>,
}

impl ProducerWindow {
    pub(crate) fn new(limit: usize) -> ProducerWindow {
        ProducerWindow { limit, usage: watch::Sender::new(0) }
    }

    /// Waits until the usage is under the limit, then adds `size`.
    pub(crate) async fn reserve(&self, size: usize) {
        let mut usage = self.usage.subscribe();
        // The sender lives in `self`, so waiting cannot fail.
        let _ = usage.wait_for(|used| *used < self.limit).await;
        self.usage.send_modify(|used| *used = used.saturating_add(size));
    }

    fn release(&self, size: usize) {
        self.usage.send_modify(|used| *used = used.saturating_sub(size));
    }
}

/// The inactivity monitor's settings, from the negotiated `MaxInactivityDuration`.
#[derive(Debug, Clone, Copy, Default)]
pub(crate) struct Inactivity {
    /// Send a KeepAliveInfo when nothing was written for this long.
    pub(crate) send_every: Option<Duration>,
    /// Give up if nothing arrives for this long.
    pub(crate) silence_limit: Option<Duration>,
    /// Before the first read check.
    pub(crate) initial_delay: Duration,
}

impl Inactivity {
    /// ActiveMQ's inactivity monitor: nothing read for `max` ms means the peer is gone; a
    /// keep-alive is written when nothing was written for a third of it. 0 disables both.
    pub(crate) fn from_format(format: &ow::WireFormat) -> Inactivity {
        let max = u64::try_from(format.max_inactivity_duration).unwrap_or(0);
        if max == 0 {
            return Inactivity::default();
        }
        let max = Duration::from_millis(max);
        let initial = Duration::from_millis(
            u64::try_from(format.max_inactivity_duration_initial_delay).unwrap_or(0),
        );
        Inactivity {
            send_every: Some((max / 3).max(Duration::from_millis(10))),
            silence_limit: Some(max),
            initial_delay: initial,
        }
    }
}

/// The task's state. The socket halves, buffers and routing tables belong to it alone.
pub(crate) struct Connection<S> {
    pub(crate) reader: ReadHalf<S>,
    pub(crate) writer: WriteHalf<S>,
    pub(crate) codec: Codec,
    /// Bytes read and not yet decoded.
    pub(crate) read_buf: BytesMut,
    /// Encoded bytes not yet written.
    pub(crate) write_buf: BytesMut,
    pub(crate) requests: mpsc::Receiver<Request>,
    pub(crate) closed: Arc<OnceLock<ClientError>>,
    pub(crate) broker_info: Arc<OnceLock<ow::BrokerInfo>>,
    pub(crate) inactivity: Inactivity,
    /// The `command_id` of the next command written.
    pub(crate) next_command_id: i32,
    /// Waiters by command id.
    pub(crate) waiters: HashMap<i32, Reply>,
    pub(crate) consumers: HashMap<ow::ConsumerId, mpsc::UnboundedSender<Dispatch>>,
    pub(crate) producers: HashMap<ow::ProducerId, Arc<ProducerWindow>>,
    /// A ShutdownInfo was queued: the broker closing the socket is expected.
    pub(crate) shutting_down: bool,
}

/// The exception a Throwable names, as a client error.
pub(crate) fn exception(throwable: Option<&Throwable>) -> ClientError {
    match throwable {
        Some(t) => ClientError::Exception {
            class: t.class_name.clone(),
            message: t.message.clone().unwrap_or_default(),
        },
        None => ClientError::Exception {
            class: "javax.jms.JMSException".to_owned(),
            message: "the broker gave no exception".to_owned(),
        },
    }
}

impl<S: AsyncRead + AsyncWrite + Send + 'static> Connection<S> {
    /// Runs until the connection ends, then fails whatever still waits.
    pub(crate) async fn run(mut self) {
        let reason = match self.serve().await {
            Ok(()) => ClientError::Closed,
            Err(error) => {
                tracing::debug!(%error, "OpenWire client connection ended");
                error
            }
        };
        // Record the reason before anything can observe the task's end.
        let _ = self.closed.set(reason.clone());
        for (_, reply) in self.waiters.drain() {
            let _ = reply.send(Err(reason.clone()));
        }
        self.requests.close();
        while let Ok(request) = self.requests.try_recv() {
            if let Request::Command { reply: Some(reply), .. } = request {
                let _ = reply.send(Err(reason.clone()));
            }
        }
        // Emptying the producers' windows wakes senders waiting for room (their sends then
        // fail on the closed connection).
        for (_, window) in self.producers.drain() {
            window.release(usize::MAX);
        }
        // Dropping the consumer senders ends every consumer's stream.
    }

    /// The select loop. `Ok` when we closed the connection on purpose.
    async fn serve(&mut self) -> Result<(), ClientError> {
        let mut taking_requests = true;
        let mut needs_flush = false;
        let now = Instant::now();
        let mut last_read = now + self.inactivity.initial_delay;
        let mut last_write = now;
        let far_future = now + Duration::from_secs(86_400 * 365);

        // What the handshake left over may hold whole commands already.
        self.route_commands()?;
        loop {
            if !taking_requests && self.write_buf.is_empty() {
                // Closing on purpose: a peer that is already gone is no failure.
                let _ = self.writer.flush().await;
                let _ = self.writer.shutdown().await;
                return Ok(());
            }
            let send_deadline =
                self.inactivity.send_every.map_or(far_future, |every| last_write + every);
            let silence_deadline =
                self.inactivity.silence_limit.map_or(far_future, |limit| last_read + limit);
            self.read_buf.reserve(READ_CHUNK);

            tokio::select! {
                read = self.reader.read_buf(&mut self.read_buf) => {
                    let read = match read {
                        Ok(read) => read,
                        Err(_) if self.shutting_down => return Ok(()),
                        Err(error) => return Err(error.into()),
                    };
                    if read == 0 {
                        return if self.shutting_down { Ok(()) } else { Err(ClientError::Closed) };
                    }
                    last_read = last_read.max(Instant::now());
                    self.route_commands()?;
                }
                progress = write_some(&mut self.writer, &mut self.write_buf),
                    if needs_flush || !self.write_buf.is_empty() =>
                {
                    match progress {
                        Ok(true) => {
                            last_write = Instant::now();
                            needs_flush = true;
                        }
                        Ok(false) => needs_flush = false,
                        Err(_) if self.shutting_down => return Ok(()),
                        Err(error) => return Err(error.into()),
                    }
                }
                request = self.requests.recv(),
                    if taking_requests && self.write_buf.len() < WRITE_HIGH_WATER =>
                {
                    match request {
                        Some(Request::Close) | None => taking_requests = false,
                        Some(request) => self.accept(request),
                    }
                }
                () = sleep_until(send_deadline),
                    if self.inactivity.send_every.is_some() && self.write_buf.is_empty() =>
                {
                    self.write(Command::KeepAliveInfo(ow::KeepAliveInfo::default()), None);
                    // Counted as written once it leaves; do not queue another meanwhile.
                    last_write = Instant::now();
                }
                () = sleep_until(silence_deadline), if self.inactivity.silence_limit.is_some() => {
                    return Err(ClientError::Timeout {
                        waiting_for: "anything from the broker (its keep-alives)".to_owned(),
                        after: self.inactivity.silence_limit.unwrap_or_default(),
                    });
                }
            }
        }
    }

    /// Registers what `request` needs and queues its command.
    fn accept(&mut self, request: Request) {
        match request {
            Request::Command { command, reply, route } => {
                match route {
                    Some(Route::Consumer(id, sink)) => {
                        self.consumers.insert(id, sink);
                    }
                    Some(Route::Producer(id, window)) => {
                        self.producers.insert(id, window);
                    }
                    None => {}
                }
                if matches!(command, Command::ShutdownInfo(_)) {
                    self.shutting_down = true;
                }
                self.write(command, reply);
            }
            Request::ForgetConsumer(id) => {
                self.consumers.remove(&id);
            }
            Request::ForgetProducer(id) => {
                if let Some(window) = self.producers.remove(&id) {
                    window.release(usize::MAX);
                }
            }
            Request::Close => {}
        }
    }

    /// Numbers `command` and encodes it; with `reply`, it asks for a response.
    fn write(&mut self, mut command: Command, reply: Option<Reply>) {
        let id = self.next_command_id;
        self.next_command_id = self.next_command_id.wrapping_add(1).max(1);
        command.set_command_id(id);
        set_response_required(&mut command, reply.is_some());
        match self.codec.encode(&command, &mut self.write_buf) {
            Ok(()) => {
                if let Some(reply) = reply {
                    self.waiters.insert(id, reply);
                }
            }
            Err(error) => {
                tracing::debug!(%error, "cannot encode an OpenWire command");
                if let Some(reply) = reply {
                    let _ = reply.send(Err(error.into()));
                }
            }
        }
    }

    /// Decodes every complete command read so far and routes it.
    fn route_commands(&mut self) -> Result<(), ClientError> {
        while let Some(command) = self.codec.decode(&mut self.read_buf)? {
            match command {
                Command::Response(response) => self.complete(response.correlation_id, Ok(())),
                Command::ExceptionResponse(response) => {
                    let error = exception(response.exception.as_ref());
                    self.complete(response.correlation_id, Err(error));
                }
                // Other responses carry data this client never asks for: success.
                Command::DataResponse(r) => self.complete(r.correlation_id, Ok(())),
                Command::DataArrayResponse(r) => self.complete(r.correlation_id, Ok(())),
                Command::IntegerResponse(r) => self.complete(r.correlation_id, Ok(())),
                Command::MessageDispatch(dispatch) => self.dispatch(*dispatch),
                Command::ProducerAck(ack) => {
                    let window = ack.producer_id.as_ref().and_then(|id| self.producers.get(id));
                    if let (Some(window), Ok(size)) = (window, usize::try_from(ack.size)) {
                        window.release(size);
                    }
                }
                Command::KeepAliveInfo(info) => {
                    if info.response_required {
                        self.write(Command::KeepAliveInfo(ow::KeepAliveInfo::default()), None);
                    }
                }
                Command::BrokerInfo(info) => {
                    let _ = self.broker_info.set(*info);
                }
                Command::ConnectionError(error) => {
                    return Err(exception(error.exception.as_ref()));
                }
                Command::ShutdownInfo(_) => {
                    tracing::debug!("the broker is shutting the connection down");
                    self.shutting_down = true;
                }
                Command::ConnectionControl(control) if control.close => {
                    return Err(ClientError::protocol(
                        "the broker asked the client to close the connection (ConnectionControl)",
                    ));
                }
                other => {
                    tracing::debug!(data_type = other.data_type(), "ignoring an OpenWire command")
                }
            }
        }
        Ok(())
    }

    fn complete(&mut self, correlation_id: i32, outcome: Result<(), ClientError>) {
        match self.waiters.remove(&correlation_id) {
            Some(reply) => {
                let _ = reply.send(outcome);
            }
            None => tracing::debug!(correlation_id, "response to no waiting request"),
        }
    }

    fn dispatch(&mut self, dispatch: ow::MessageDispatch) {
        let Some(id) = dispatch.consumer_id else {
            tracing::debug!("dropping a MessageDispatch without a consumer id");
            return;
        };
        let Some(sink) = self.consumers.get(&id) else {
            tracing::debug!(?id, "dropping a MessageDispatch for an unknown consumer");
            return;
        };
        let event =
            Dispatch { message: dispatch.message, redelivery_counter: dispatch.redelivery_counter };
        if sink.send(event).is_err() {
            // The consumer was dropped without closing.
            self.consumers.remove(&id);
        }
    }
}

/// Sets `response_required` on the commands a handle may send.
fn set_response_required(command: &mut Command, required: bool) {
    match command {
        Command::ConnectionInfo(c) => c.response_required = required,
        Command::SessionInfo(c) => c.response_required = required,
        Command::ConsumerInfo(c) => c.response_required = required,
        Command::ProducerInfo(c) => c.response_required = required,
        Command::TransactionInfo(c) => c.response_required = required,
        Command::RemoveSubscriptionInfo(c) => c.response_required = required,
        Command::RemoveInfo(c) => c.response_required = required,
        Command::MessageAck(c) => c.response_required = required,
        Command::MessagePull(c) => c.response_required = required,
        Command::Message(c) => c.response_required = required,
        Command::DestinationInfo(c) => c.response_required = required,
        Command::KeepAliveInfo(c) => c.response_required = required,
        Command::ShutdownInfo(c) => c.response_required = required,
        _ => {}
    }
}

/// Writes some of `queued`, or flushes once nothing is queued; `true` if it wrote. A single
/// cancel-safe step: if the select loop drops it, nothing was written.
async fn write_some<W: AsyncWrite>(
    writer: &mut WriteHalf<W>,
    queued: &mut BytesMut,
) -> std::io::Result<bool> {
    if queued.is_empty() {
        writer.flush().await?;
        return Ok(false);
    }
    if writer.write_buf(queued).await? == 0 {
        return Err(std::io::ErrorKind::WriteZero.into());
    }
    Ok(true)
}
