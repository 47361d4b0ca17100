//! [`OpenWireClient`]: the connection handle, the WireFormatInfo handshake and
//! ConnectionInfo, and what sessions, producers and consumers share ([`Inner`]).

use std::collections::HashMap;
use std::sync::atomic::{AtomicI64, AtomicU64, Ordering};
use std::sync::{Arc, Mutex, OnceLock, Weak};
use std::time::Duration;

use bytes::BytesMut;
use protocol::openwire::{self as ow, Codec, Command, DataStructure, WireFormat, WireFormatInfo};
use tokio::io::{AsyncRead, AsyncReadExt, AsyncWrite, AsyncWriteExt, ReadHalf, WriteHalf};
use tokio::sync::{mpsc, oneshot, OnceCell};
use tokio::task::JoinHandle;

use super::connection::{Connection, Inactivity, Request, Route};
use super::session::{Session, SessionShared};
use super::{
    Consumer, Destination, OpenWireOptions, OutgoingMessage, SessionMode, SubscribeOptions,
};
use crate::client::within;
use crate::ClientError;

/// Requests queued for the connection task before callers wait (back-pressure).
const REQUEST_QUEUE: usize = 256;

/// Connections opened by this process, for unique connection ids.
static CONNECTIONS: AtomicU64 = AtomicU64::new(1);

/// An open OpenWire connection to an ActiveMQ-compatible broker (ferromq or Apache
/// ActiveMQ).
///
/// Work happens in [`Session`]s ([`OpenWireClient::session`]); [`OpenWireClient::send`] and
/// [`OpenWireClient::subscribe`] use an implicit auto-acknowledge session for the common
/// case. Every call takes `&self`, so a client can be shared by tasks (in an `Arc`).
///
/// Dropping the client (and everything made from it) closes the socket without telling the
/// broker; [`OpenWireClient::close`] closes cleanly (RemoveInfo for each consumer, session
/// and the connection, then ShutdownInfo).
#[derive(Debug)]
pub struct OpenWireClient {
    inner: Arc<Inner>,
    implicit: OnceCell<Session>,
    task: JoinHandle<()>,
}

/// What the client, its sessions, producers and consumers share.
#[derive(Debug)]
pub(crate) struct Inner {
    requests: mpsc::Sender<Request>,
    pub(crate) timeout: Duration,
    /// Set by the connection task when it ends: why the connection is gone.
    closed: Arc<OnceLock<ClientError>>,
    pub(crate) connection_id: ow::ConnectionId,
    pub(crate) client_id: Option<String>,
    pub(crate) format: WireFormat,
    broker_info: Arc<OnceLock<ow::BrokerInfo>>,
    next_session: AtomicI64,
    next_transaction: AtomicI64,
    /// Open sessions, closed in order by [`OpenWireClient::close`].
    sessions: Mutex<Vec<Weak<SessionShared>>>,
}

impl OpenWireClient {
    /// Connects over TCP to `host:port` (trying every address the name resolves to) and
    /// opens an OpenWire connection.
    pub async fn connect(
        host: &str,
        port: u16,
        options: OpenWireOptions,
    ) -> Result<OpenWireClient, ClientError> {
        let stream = crate::net::connect_tcp(host, port, options.timeout).await?;
        OpenWireClient::connect_stream(stream, options).await
    }

    /// Opens an OpenWire connection over an already connected stream: the WireFormatInfo
    /// exchange (version 12 offered, the server's lower version and options honoured), then
    /// ConnectionInfo with the credentials and client id, waiting for the broker's answer.
    ///
    /// A server that does not speak OpenWire (a STOMP port, say) or closes during the
    /// handshake gives [`ClientError::Protocol`] saying so; one that says nothing gives
    /// [`ClientError::Timeout`] after [`OpenWireOptions::timeout`].
    pub async fn connect_stream<S>(
        stream: S,
        options: OpenWireOptions,
    ) -> Result<OpenWireClient, ClientError>
    where
        S: AsyncRead + AsyncWrite + Send + Unpin + 'static,
    {
        let (mut reader, mut writer) = tokio::io::split(stream);
        let mut codec = Codec::new(options.max_frame_size);
        let mut read_buf = BytesMut::new();
        let format = within(
            options.timeout,
            "the server's WireFormatInfo",
            handshake(&options, &mut codec, &mut reader, &mut writer, &mut read_buf),
        )
        .await??;

        let (requests_tx, requests) = mpsc::channel(REQUEST_QUEUE);
        let closed = Arc::new(OnceLock::new());
        let broker_info = Arc::new(OnceLock::new());
        let connection = Connection {
            reader,
            writer,
            codec,
            read_buf,
            write_buf: BytesMut::new(),
            requests,
            closed: closed.clone(),
            broker_info: broker_info.clone(),
            inactivity: Inactivity::from_format(&format),
            next_command_id: 1,
            waiters: HashMap::new(),
            consumers: HashMap::new(),
            producers: HashMap::new(),
            shutting_down: false,
        };
        let task = tokio::spawn(connection.run());
        let connection_id = match options.connection_id.clone().filter(|id| !id.is_empty()) {
            Some(id) => id,
            None => new_connection_id(),
        };
        // Like ActiveMQ's client, one is generated when none is given: Apache ActiveMQ
        // refuses a connection without a client id.
        let client_id = match options.client_id.clone().filter(|id| !id.is_empty()) {
            Some(id) => id,
            None => format!("{}-client", connection_id.trim_end_matches(":1")),
        };
        let inner = Arc::new(Inner {
            requests: requests_tx,
            timeout: options.timeout,
            closed,
            connection_id: ow::ConnectionId { value: connection_id },
            client_id: Some(client_id),
            format,
            broker_info,
            next_session: AtomicI64::new(1),
            next_transaction: AtomicI64::new(1),
            sessions: Mutex::new(Vec::new()),
        });
        let info = ow::ConnectionInfo {
            connection_id: Some(inner.connection_id.clone()),
            client_id: inner.client_id.clone(),
            user_name: options.user.clone(),
            password: options.password.clone(),
            manageable: true,
            client_master: true,
            ..Default::default()
        };
        if let Err(error) = inner.request(Command::ConnectionInfo(Box::new(info)), None).await {
            task.abort();
            return Err(error);
        }
        Ok(OpenWireClient { inner, implicit: OnceCell::new(), task })
    }

    /// The JMS client id: the one asked for, else a generated unique one.
    pub fn client_id(&self) -> &str {
        self.inner.client_id.as_deref().unwrap_or_default()
    }

    /// The negotiated wire format (version, encoding, cache, inactivity duration).
    pub fn wire_format(&self) -> &WireFormat {
        &self.inner.format
    }

    /// The connection id this client chose (`ID:<host>-<pid>-<time>-<n>:1`).
    pub fn connection_id(&self) -> &str {
        &self.inner.connection_id.value
    }

    /// The broker's name from its BrokerInfo, once that has arrived.
    pub fn broker_name(&self) -> Option<&str> {
        self.inner.broker_info.get().and_then(|info| info.broker_name.as_deref())
    }

    /// Whether the connection has ended (closed by either side, or failed).
    pub fn is_closed(&self) -> bool {
        self.inner.closed.get().is_some()
    }

    /// Why the connection ended, if it has.
    pub fn closed_reason(&self) -> Option<ClientError> {
        self.inner.closed.get().cloned()
    }

    /// Opens a session with `mode` (SessionInfo).
    pub async fn session(&self, mode: SessionMode) -> Result<Session, ClientError> {
        Session::open(self.inner.clone(), mode).await
    }

    /// The implicit auto-acknowledge session, opened on first use.
    async fn implicit(&self) -> Result<&Session, ClientError> {
        self.implicit.get_or_try_init(|| self.session(SessionMode::Auto)).await
    }

    /// Sends `message` to `destination` from the implicit session's anonymous producer
    /// (synchronously for persistent messages, as JMS does). Returns the message id.
    pub async fn send(
        &self,
        destination: &Destination,
        message: &OutgoingMessage,
    ) -> Result<String, ClientError> {
        self.implicit().await?.anonymous_producer().await?.send_to(destination, message).await
    }

    /// A consumer on the implicit auto-acknowledge session.
    pub async fn subscribe(&self, options: SubscribeOptions) -> Result<Consumer, ClientError> {
        self.implicit().await?.consumer(options).await
    }

    /// Closes cleanly: each open consumer (RemoveInfo with the last message it delivered, so
    /// that only those are redelivered marked so), each session, then the connection
    /// (RemoveInfo, waited for), then ShutdownInfo and the socket.
    ///
    /// The connection is closed whatever the outcome; the error says whether the broker
    /// confirmed (an already closed connection gives its closing reason).
    pub async fn close(self) -> Result<(), ClientError> {
        let OpenWireClient { inner, implicit, task } = self;
        let sessions: Vec<Arc<SessionShared>> = {
            let sessions = inner.sessions.lock().unwrap_or_else(|e| e.into_inner());
            sessions.iter().filter_map(Weak::upgrade).collect()
        };
        let mut result = Ok(());
        for session in sessions {
            if let Err(error) = session.close().await {
                result = result.and(Err(error));
            }
        }
        drop(implicit);
        let remove = ow::RemoveInfo {
            object_id: Some(Box::new(DataStructure::ConnectionId(inner.connection_id.clone()))),
            last_delivered_sequence_id: -1,
            ..Default::default()
        };
        result = result.and(inner.request(Command::RemoveInfo(Box::new(remove)), None).await);
        let _ = inner.post(Command::ShutdownInfo(ow::ShutdownInfo::default()), None).await;
        let _ = within(inner.timeout, "", inner.requests.send(Request::Close)).await;
        let _ = within(inner.timeout, "", task).await;
        result
    }
}

impl Inner {
    /// Why the connection is unusable.
    pub(crate) fn closed_reason(&self) -> ClientError {
        self.closed.get().cloned().unwrap_or(ClientError::Closed)
    }

    pub(crate) fn is_closed(&self) -> bool {
        self.closed.get().is_some()
    }

    pub(crate) fn next_session_id(&self) -> ow::SessionId {
        ow::SessionId {
            connection_id: self.connection_id.value.clone(),
            value: self.next_session.fetch_add(1, Ordering::Relaxed),
        }
    }

    pub(crate) fn next_transaction_id(&self) -> ow::LocalTransactionId {
        ow::LocalTransactionId {
            value: self.next_transaction.fetch_add(1, Ordering::Relaxed),
            connection_id: Some(self.connection_id.clone()),
        }
    }

    pub(crate) fn register_session(&self, session: &Arc<SessionShared>) {
        let mut sessions = self.sessions.lock().unwrap_or_else(|e| e.into_inner());
        sessions.retain(|s| s.strong_count() > 0);
        sessions.push(Arc::downgrade(session));
    }

    pub(crate) fn forget_session(&self, session: &SessionShared) {
        let mut sessions = self.sessions.lock().unwrap_or_else(|e| e.into_inner());
        sessions.retain(|s| s.upgrade().is_some_and(|s| !std::ptr::eq(&*s, session)));
    }

    /// Hands a request to the connection task (waiting for room in its queue).
    async fn submit(&self, request: Request) -> Result<(), ClientError> {
        self.requests.send(request).await.map_err(|_| self.closed_reason())
    }

    /// Sends `command` with `response_required` and waits (queueing included) at most the
    /// configured timeout for the broker's Response.
    pub(crate) async fn request(
        &self,
        command: Command,
        route: Option<Route>,
    ) -> Result<(), ClientError> {
        let what = describe(&command);
        let (reply, answer) = oneshot::channel();
        let exchange = async {
            self.submit(Request::Command { command, reply: Some(reply), route }).await?;
            // A dropped reply means the task ended without answering.
            answer.await.unwrap_or_else(|_| Err(self.closed_reason()))
        };
        within(self.timeout, format!("the response to {what}"), exchange).await?
    }

    /// Queues `command` without asking for a response.
    pub(crate) async fn post(
        &self,
        command: Command,
        route: Option<Route>,
    ) -> Result<(), ClientError> {
        let what = format!("room to send {}", describe(&command));
        let request = Request::Command { command, reply: None, route };
        within(self.timeout, what, self.submit(request)).await?
    }

    /// Stops routing dispatches to consumer `id`, without waiting.
    pub(crate) fn forget_consumer(&self, id: ow::ConsumerId) {
        // If the queue is full or closed, the task drops the route itself when it finds
        // the consumer's receiver gone.
        let _ = self.requests.try_send(Request::ForgetConsumer(id));
    }

    /// Stops routing ProducerAcks to producer `id`, without waiting.
    pub(crate) fn forget_producer(&self, id: ow::ProducerId) {
        let _ = self.requests.try_send(Request::ForgetProducer(id));
    }
}

/// Writes our WireFormatInfo, reads the server's and switches the codec to the negotiated
/// format.
async fn handshake<S: AsyncRead + AsyncWrite>(
    options: &OpenWireOptions,
    codec: &mut Codec,
    reader: &mut ReadHalf<S>,
    writer: &mut WriteHalf<S>,
    read_buf: &mut BytesMut,
) -> Result<WireFormat, ClientError> {
    let wanted = WireFormat {
        tight_encoding: options.tight_encoding,
        cache_enabled: options.cache_enabled,
        max_frame_size: options.max_frame_size as u64,
        max_inactivity_duration: options.max_inactivity_ms.max(0),
        ..WireFormat::default()
    };
    let local =
        WireFormatInfo::announcing(&wanted, &options.provider_name, env!("CARGO_PKG_VERSION"));
    writer.write_all(&codec.encode_to_bytes(&local.clone().into())?).await?;
    writer.flush().await?;
    loop {
        match codec.decode(read_buf) {
            Ok(Some(Command::WireFormatInfo(remote))) => {
                return codec.negotiate(&local, &remote).map_err(|error| {
                    ClientError::protocol(format!("OpenWire negotiation failed: {error}"))
                });
            }
            Ok(Some(other)) => {
                return Err(ClientError::protocol(format!(
                    "the server did not start with a WireFormatInfo but with OpenWire command \
                     type {}",
                    other.data_type()
                )))
            }
            Ok(None) => {}
            Err(error) => return Err(not_openwire(&error.to_string(), read_buf)),
        }
        if reader.read_buf(read_buf).await? == 0 {
            return Err(if read_buf.is_empty() {
                ClientError::protocol(
                    "the server closed the connection during the OpenWire handshake, before \
                     sending its WireFormatInfo",
                )
            } else {
                not_openwire("it closed the connection in the middle of a frame", read_buf)
            });
        }
    }
}

/// The error for a server that answered the handshake with something else than OpenWire.
fn not_openwire(why: &str, received: &[u8]) -> ClientError {
    let shown = &received[..received.len().min(64)];
    ClientError::protocol(format!(
        "the server does not speak OpenWire ({why}); its first bytes were {:?}",
        String::from_utf8_lossy(shown)
    ))
}

/// `ID:<host>-<pid>-<milliseconds>-<n>:1`, unique like ActiveMQ's connection ids.
pub(crate) fn new_connection_id() -> String {
    let host = std::fs::read_to_string("/proc/sys/kernel/hostname")
        .ok()
        .map(|h| h.trim().to_owned())
        .filter(|h| !h.is_empty() && !h.contains(':'))
        .unwrap_or_else(|| "ferromq-client".to_owned());
    let millis = std::time::SystemTime::now()
        .duration_since(std::time::UNIX_EPOCH)
        .map(|d| d.as_millis())
        .unwrap_or(0);
    let n = CONNECTIONS.fetch_add(1, Ordering::Relaxed);
    format!("ID:{host}-{}-{millis}-{n}:1", std::process::id())
}

/// A short description of a command for timeout messages.
fn describe(command: &Command) -> String {
    let name = match command {
        Command::ConnectionInfo(_) => "ConnectionInfo",
        Command::SessionInfo(_) => "SessionInfo",
        Command::ConsumerInfo(_) => "ConsumerInfo",
        Command::ProducerInfo(_) => "ProducerInfo",
        Command::TransactionInfo(_) => "TransactionInfo",
        Command::RemoveInfo(_) => "RemoveInfo",
        Command::RemoveSubscriptionInfo(_) => "RemoveSubscriptionInfo",
        Command::MessageAck(_) => "MessageAck",
        Command::MessagePull(_) => "MessagePull",
        Command::ShutdownInfo(_) => "ShutdownInfo",
        Command::Message(m) => {
            return match &m.destination {
                Some(d) => format!("a message to {}", d.physical_name),
                None => "a message".to_owned(),
            }
        }
        _ => "a command",
    };
    name.to_owned()
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn connection_ids_are_unique_and_shaped_like_activemq() {
        let (a, b) = (new_connection_id(), new_connection_id());
        assert_ne!(a, b);
        assert!(a.starts_with("ID:") && a.ends_with(":1"), "{a}");
    }

    #[tokio::test]
    async fn a_stomp_server_is_reported_as_not_openwire() {
        let (client, mut server) = tokio::io::duplex(4096);
        let serve = tokio::spawn(async move {
            let mut scratch = [0u8; 1024];
            let _ = server.read(&mut scratch).await;
            let _ = server.write_all(b"ERROR\nmessage:not STOMP\n\n\0").await;
        });
        let error =
            OpenWireClient::connect_stream(client, OpenWireOptions::default()).await.expect_err("");
        let text = error.to_string();
        assert!(text.contains("does not speak OpenWire") && text.contains("ERROR"), "{text}");
        serve.await.expect("server");
    }

    #[tokio::test]
    async fn a_server_closing_mid_handshake_is_an_error() {
        let (client, mut server) = tokio::io::duplex(4096);
        tokio::spawn(async move {
            let mut scratch = [0u8; 1024];
            let _ = server.read(&mut scratch).await;
            // Half a WireFormatInfo frame, then gone.
            let _ = server.write_all(&[0, 0, 0, 40, 1, b'A', b'c']).await;
        });
        let error =
            OpenWireClient::connect_stream(client, OpenWireOptions::default()).await.expect_err("");
        assert!(error.to_string().contains("middle of a frame"), "{error}");

        let (client, mut server) = tokio::io::duplex(4096);
        tokio::spawn(async move {
            let mut scratch = [0u8; 1024];
            let _ = server.read(&mut scratch).await;
        });
        let error =
            OpenWireClient::connect_stream(client, OpenWireOptions::default()).await.expect_err("");
        assert!(error.to_string().contains("closed the connection during"), "{error}");
    }

    /// A scripted OpenWire server over a pipe: answers the handshake (announcing
    /// `max_inactivity_ms`) and ConnectionInfo, then hands its side over.
    async fn scripted_server(
        max_inactivity_ms: i64,
    ) -> (tokio::task::JoinHandle<Result<OpenWireClient, ClientError>>, Server) {
        let (client_side, socket) = tokio::io::duplex(1 << 16);
        let options = OpenWireOptions { timeout: Duration::from_secs(5), ..Default::default() };
        let connecting = tokio::spawn(OpenWireClient::connect_stream(client_side, options));
        let mut server = Server { codec: Codec::new(1 << 20), buffer: BytesMut::new(), socket };
        let Command::WireFormatInfo(remote) = server.read().await else {
            panic!("the client did not start with its WireFormatInfo")
        };
        let format = WireFormat {
            max_inactivity_duration: max_inactivity_ms,
            max_inactivity_duration_initial_delay: 0,
            ..WireFormat::default()
        };
        let local = WireFormatInfo::announcing(&format, "test", "0");
        server.write(&local.clone().into()).await;
        server.codec.negotiate(&local, &remote).expect("negotiates");
        let Command::ConnectionInfo(info) = server.read().await else {
            panic!("no ConnectionInfo")
        };
        assert!(info.response_required && info.client_id.is_some());
        server
            .write(&Command::Response(ow::Response {
                correlation_id: info.command_id,
                ..Default::default()
            }))
            .await;
        (connecting, server)
    }

    struct Server {
        codec: Codec,
        buffer: BytesMut,
        socket: tokio::io::DuplexStream,
    }

    impl Server {
        async fn read(&mut self) -> Command {
            loop {
                if let Some(command) = self.codec.decode(&mut self.buffer).expect("valid OpenWire")
                {
                    return command;
                }
                let read = tokio::time::timeout(
                    Duration::from_secs(5),
                    self.socket.read_buf(&mut self.buffer),
                )
                .await
                .expect("the client writes within 5 s")
                .expect("reads");
                assert!(read > 0, "the client closed the connection");
            }
        }

        async fn write(&mut self, command: &Command) {
            let bytes = self.codec.encode_to_bytes(command).expect("encodes");
            self.socket.write_all(&bytes).await.expect("writes");
        }
    }

    #[tokio::test]
    async fn keep_alives_that_ask_for_a_response_are_answered() {
        let (connecting, mut server) = scripted_server(30_000).await;
        let client = connecting.await.expect("joins").expect("connects");
        assert_eq!(client.wire_format().max_inactivity_duration, 30_000);
        let ping = ow::KeepAliveInfo { response_required: true, ..Default::default() };
        server.write(&Command::KeepAliveInfo(ping)).await;
        // The client's own keep-alives come every 10 s: this one is the answer.
        let Command::KeepAliveInfo(answer) = server.read().await else { panic!("no answer") };
        assert!(!answer.response_required);
        assert!(!client.is_closed());
    }

    #[tokio::test]
    async fn idle_connections_send_keep_alives_and_give_up_on_a_silent_broker() {
        let (connecting, mut server) = scripted_server(600).await;
        let client = connecting.await.expect("joins").expect("connects");
        // Nothing else to write: within a third of the inactivity duration, a keep-alive.
        let Command::KeepAliveInfo(own) = server.read().await else { panic!("no keep-alive") };
        assert!(!own.response_required);
        // The server stays silent: the client declares it dead after 600 ms.
        tokio::time::sleep(Duration::from_millis(1500)).await;
        assert!(
            matches!(client.closed_reason(), Some(ClientError::Timeout { .. })),
            "{:?}",
            client.closed_reason()
        );
        let error = client.session(SessionMode::Auto).await.expect_err("closed");
        assert!(matches!(error, ClientError::Timeout { .. }), "{error:?}");
    }

    #[tokio::test]
    async fn exception_responses_carry_the_java_exception() {
        let (connecting, mut server) = scripted_server(0).await;
        let client = connecting.await.expect("joins").expect("connects");
        let answering = tokio::spawn(async move {
            let Command::SessionInfo(info) = server.read().await else { panic!("no SessionInfo") };
            let refusal = ow::ExceptionResponse {
                correlation_id: info.command_id,
                exception: Some(ow::Throwable::new("javax.jms.JMSSecurityException", "not you")),
                ..Default::default()
            };
            server.write(&Command::ExceptionResponse(Box::new(refusal))).await;
            server
        });
        let error = client.session(SessionMode::Auto).await.expect_err("refused");
        match error {
            ClientError::Exception { class, message } => {
                assert_eq!(
                    (class.as_str(), message.as_str()),
                    ("javax.jms.JMSSecurityException", "not you")
                );
            }
            other => panic!("expected an exception, got {other:?}"),
        }
        let _server = answering.await.expect("server");
        assert!(!client.is_closed());
    }

    #[tokio::test]
    async fn a_silent_server_times_out() {
        let (client, _server) = tokio::io::duplex(4096);
        let options =
            OpenWireOptions { timeout: Duration::from_millis(100), ..OpenWireOptions::default() };
        let error = OpenWireClient::connect_stream(client, options).await.expect_err("");
        assert!(matches!(error, ClientError::Timeout { .. }), "{error:?}");
    }
}
