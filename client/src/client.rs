//! [`StompClient`]: the handle applications use, and the CONNECT handshake.

use std::collections::HashMap;
use std::future::Future;
use std::sync::atomic::{AtomicU64, Ordering};
use std::sync::{Arc, OnceLock};
use std::time::Duration;

use bytes::{Bytes, BytesMut};
use protocol::stomp::{
    heart_beat_intervals, parse_heart_beat, Codec, Command, Decoded, Frame, Version,
};
use tokio::io::{AsyncRead, AsyncReadExt, AsyncWrite, AsyncWriteExt, ReadHalf, WriteHalf};
use tokio::net::{TcpStream, ToSocketAddrs};
use tokio::sync::{mpsc, oneshot, Mutex};
use tokio::task::JoinHandle;

use crate::connection::{Connection, HeartBeats, Request};
use crate::{AckMode, ClientError, ConnectOptions, ReceivedMessage, Subscription};

/// Requests queued for the connection task before callers wait (back-pressure).
const REQUEST_QUEUE: usize = 64;

/// A server is declared dead after this many agreed heart-beat intervals of silence.
const SILENCE_FACTOR: u32 = 2;

/// A connected STOMP session.
///
/// Cheap calls queue a frame for the connection task; calls that name a receipt wait for
/// the server's RECEIPT (or ERROR) for at most [`ConnectOptions::timeout`]. Every method
/// takes `&self`, so one client can be shared (in an `Arc`) by several tasks.
///
/// Dropping the client (and every [`Subscription`] made from it) closes the connection
/// after the frames already queued are written, without a DISCONNECT; use
/// [`StompClient::disconnect`] to close gracefully.
#[derive(Debug)]
pub struct StompClient {
    inner: Arc<Inner>,
    server_headers: Vec<(String, String)>,
    errors: Mutex<mpsc::UnboundedReceiver<Frame>>,
    task: JoinHandle<()>,
}

/// What the client and its subscriptions share.
#[derive(Debug)]
pub(crate) struct Inner {
    requests: mpsc::Sender<Request>,
    version: Version,
    timeout: Duration,
    next_id: AtomicU64,
    /// Set by the connection task when it ends: why the connection is gone.
    closed: Arc<OnceLock<ClientError>>,
}

impl StompClient {
    /// Connects over TCP to `addr` and opens a STOMP session.
    pub async fn connect(
        addr: impl ToSocketAddrs,
        options: ConnectOptions,
    ) -> Result<StompClient, ClientError> {
        let timeout = options.timeout;
        let stream = within(timeout, "the TCP connection", TcpStream::connect(addr)).await??;
        stream.set_nodelay(true)?;
        StompClient::connect_stream(stream, options).await
    }

    /// Opens a STOMP session over an already connected stream, for example an in-process
    /// [`tokio::io::DuplexStream`] or a TLS stream.
    pub async fn connect_stream<S>(
        stream: S,
        options: ConnectOptions,
    ) -> Result<StompClient, ClientError>
    where
        S: AsyncRead + AsyncWrite + Send + Unpin + 'static,
    {
        let (mut reader, mut writer) = tokio::io::split(stream);
        let mut codec = Codec::new(options.limits);
        let mut read_buf = BytesMut::new();
        let connected = within(
            options.timeout,
            "CONNECTED",
            handshake(&options, &mut codec, &mut reader, &mut writer, &mut read_buf),
        )
        .await??;

        let version = agreed_version(&options, &connected)?;
        codec.set_version(version);
        let server_heart_beat = match connected.get("heart-beat") {
            Some(value) => parse_heart_beat(value)?,
            None => (0, 0),
        };
        let (send_ms, expect_ms) = heart_beat_intervals(options.heart_beat, server_heart_beat);
        let heart_beats = HeartBeats {
            send_every: (send_ms > 0).then(|| Duration::from_millis(send_ms)),
            silence_limit: (expect_ms > 0)
                .then(|| Duration::from_millis(expect_ms).saturating_mul(SILENCE_FACTOR)),
        };

        let (requests_tx, requests) = mpsc::channel(REQUEST_QUEUE);
        let (errors_tx, errors) = mpsc::unbounded_channel();
        let closed = Arc::new(OnceLock::new());
        let connection = Connection {
            reader,
            writer,
            codec,
            read_buf,
            write_buf: BytesMut::new(),
            requests,
            errors: errors_tx,
            closed: closed.clone(),
            heart_beats,
            receipts: HashMap::new(),
            subscriptions: HashMap::new(),
            server_error: None,
        };
        let task = tokio::spawn(connection.run());
        Ok(StompClient {
            inner: Arc::new(Inner {
                requests: requests_tx,
                version,
                timeout: options.timeout,
                next_id: AtomicU64::new(1),
                closed,
            }),
            server_headers: connected.headers,
            errors: Mutex::new(errors),
            task,
        })
    }

    /// The negotiated protocol version.
    pub fn version(&self) -> Version {
        self.inner.version
    }

    /// The headers of the server's CONNECTED frame (`version`, `session`, `server`, ...).
    pub fn server_headers(&self) -> &[(String, String)] {
        &self.server_headers
    }

    /// The first CONNECTED header called `name`.
    pub fn server_header(&self, name: &str) -> Option<&str> {
        self.server_headers.iter().find(|(n, _)| n == name).map(|(_, v)| v.as_str())
    }

    /// Whether the connection has ended (closed by either side, or failed).
    pub fn is_closed(&self) -> bool {
        self.inner.closed.get().is_some()
    }

    /// Sends a message without waiting for the server: returns once the SEND is queued.
    /// `headers` come after `destination`.
    pub async fn send(
        &self,
        destination: &str,
        body: impl Into<Bytes>,
        headers: &[(&str, &str)],
    ) -> Result<(), ClientError> {
        self.send_frame(send_frame(destination, body.into(), headers)).await
    }

    /// Sends a message and waits for the server's RECEIPT; an ERROR for it is
    /// [`ClientError::ServerError`].
    pub async fn send_with_receipt(
        &self,
        destination: &str,
        body: impl Into<Bytes>,
        headers: &[(&str, &str)],
    ) -> Result<(), ClientError> {
        self.request_receipt(send_frame(destination, body.into(), headers)).await
    }

    /// Sends any frame as is, without waiting for the server (for tests of odd frames).
    pub async fn send_frame(&self, frame: Frame) -> Result<(), ClientError> {
        let what = format!("room to send {}", describe(&frame));
        let request = Request::Frame { frame, receipt: None };
        within(self.inner.timeout, what, self.inner.submit(request)).await?
    }

    /// Sends `frame` with a `receipt` header (its own, or a generated one) and waits for
    /// the RECEIPT.
    pub async fn request_receipt(&self, frame: Frame) -> Result<(), ClientError> {
        self.inner.request_receipt(frame).await
    }

    /// Subscribes to `destination` and waits until the server confirms with a RECEIPT, so
    /// messages sent afterwards reach the subscription. The id is generated; `headers`
    /// (a `selector`, `activemq.prefetchSize`, ...) follow `id`, `destination` and `ack`.
    pub async fn subscribe(
        &self,
        destination: &str,
        ack: AckMode,
        headers: &[(&str, &str)],
    ) -> Result<Subscription, ClientError> {
        let id = self.inner.next_id("sub-");
        let mut frame = Frame::new(Command::Subscribe)
            .header("id", id.as_str())
            .header("destination", destination)
            .header("ack", ack.as_str());
        for (name, value) in headers {
            frame.push_header(*name, *value);
        }
        let (messages_tx, messages) = mpsc::unbounded_channel();
        let what = describe(&frame);
        let subscription_id = id.clone();
        let result = self
            .inner
            .round_trip(frame, what, move |frame, receipt| Request::Subscribe {
                id: subscription_id,
                messages: messages_tx,
                frame,
                receipt,
            })
            .await;
        match result {
            Ok(()) => Ok(Subscription::new(id, messages, self.inner.clone())),
            Err(error) => {
                self.inner.forget(id);
                Err(error)
            }
        }
    }

    /// Acknowledges `message` and waits for the receipt. The headers follow the negotiated
    /// version: 1.2 sends `id` (the MESSAGE's `ack` header), 1.1 `message-id` and
    /// `subscription`, 1.0 `message-id`.
    pub async fn ack(&self, message: &ReceivedMessage) -> Result<(), ClientError> {
        self.ack_with(message, &[]).await
    }

    /// [`StompClient::ack`] with extra headers, e.g. `("transaction", "tx1")`.
    pub async fn ack_with(
        &self,
        message: &ReceivedMessage,
        headers: &[(&str, &str)],
    ) -> Result<(), ClientError> {
        let frame = acknowledgement(Command::Ack, self.version(), message, headers)?;
        self.request_receipt(frame).await
    }

    /// Rejects `message` (STOMP 1.1 and later) and waits for the receipt.
    pub async fn nack(&self, message: &ReceivedMessage) -> Result<(), ClientError> {
        self.nack_with(message, &[]).await
    }

    /// [`StompClient::nack`] with extra headers, e.g. `("transaction", "tx1")`.
    pub async fn nack_with(
        &self,
        message: &ReceivedMessage,
        headers: &[(&str, &str)],
    ) -> Result<(), ClientError> {
        let frame = acknowledgement(Command::Nack, self.version(), message, headers)?;
        self.request_receipt(frame).await
    }

    /// Starts transaction `tx` and waits for the receipt.
    pub async fn begin(&self, tx: &str) -> Result<(), ClientError> {
        self.request_receipt(Frame::new(Command::Begin).header("transaction", tx)).await
    }

    /// Commits transaction `tx` and waits for the receipt.
    pub async fn commit(&self, tx: &str) -> Result<(), ClientError> {
        self.request_receipt(Frame::new(Command::Commit).header("transaction", tx)).await
    }

    /// Rolls transaction `tx` back and waits for the receipt.
    pub async fn abort(&self, tx: &str) -> Result<(), ClientError> {
        self.request_receipt(Frame::new(Command::Abort).header("transaction", tx)).await
    }

    /// Waits for the next ERROR frame that answered no request of ours (typically the
    /// reason the server is about to close). `None` once the connection has ended and
    /// every such ERROR has been returned.
    pub async fn next_error(&self) -> Option<Frame> {
        self.errors.lock().await.recv().await
    }

    /// Sends DISCONNECT, waits for its receipt, then closes the connection.
    ///
    /// The connection is closed whatever the outcome; the error says whether the server
    /// confirmed (an already closed connection gives its closing reason).
    pub async fn disconnect(self) -> Result<(), ClientError> {
        let StompClient { inner, task, .. } = self;
        let result = inner.request_receipt(Frame::new(Command::Disconnect)).await;
        // The task may be gone already (servers close after the RECEIPT): then sending
        // fails, which is fine. Otherwise it writes what is queued and closes.
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

    /// A fresh id such as `sub-3` (ids are unique per client).
    pub(crate) fn next_id(&self, prefix: &str) -> String {
        format!("{prefix}{}", self.next_id.fetch_add(1, Ordering::Relaxed))
    }

    /// Hands a request to the connection task (waiting for room in its queue).
    pub(crate) async fn submit(&self, request: Request) -> Result<(), ClientError> {
        self.requests.send(request).await.map_err(|_| self.closed_reason())
    }

    /// Stops routing messages of subscription `id`, without waiting.
    pub(crate) fn forget(&self, id: String) {
        // If the queue is full or closed, the task drops the route itself when it finds
        // the subscription's receiver gone.
        let _ = self.requests.try_send(Request::Forget { id });
    }

    /// Sends `frame` with a receipt and waits for the answer.
    pub(crate) async fn request_receipt(&self, frame: Frame) -> Result<(), ClientError> {
        let what = describe(&frame);
        self.round_trip(frame, what, |frame, receipt| Request::Frame {
            frame,
            receipt: Some(receipt),
        })
        .await
    }

    /// Gives `frame` a receipt id, queues the request `make` builds from it and the waiter,
    /// and waits (queueing included) at most the configured timeout for the answer.
    async fn round_trip(
        &self,
        mut frame: Frame,
        what: String,
        make: impl FnOnce(Frame, (String, crate::connection::Reply)) -> Request,
    ) -> Result<(), ClientError> {
        let receipt_id = match frame.get("receipt") {
            Some(id) => id.to_owned(),
            None => {
                let id = self.next_id("rcpt-");
                frame.push_header("receipt", id.as_str());
                id
            }
        };
        let (reply, answer) = oneshot::channel();
        let exchange = async {
            self.submit(make(frame, (receipt_id, reply))).await?;
            // A dropped reply means the task ended without answering.
            answer.await.unwrap_or_else(|_| Err(self.closed_reason()))
        };
        within(self.timeout, format!("the RECEIPT for {what}"), exchange).await?
    }
}

/// Runs `future` for at most `limit`; `Err(Timeout)` naming `what` otherwise.
pub(crate) async fn within<T>(
    limit: Duration,
    what: impl Into<String>,
    future: impl Future<Output = T>,
) -> Result<T, ClientError> {
    let what = what.into();
    tokio::time::timeout(limit, future)
        .await
        .map_err(|_| ClientError::Timeout { waiting_for: what, after: limit })
}

/// Writes CONNECT and reads up to the server's first frame.
async fn handshake<S: AsyncRead + AsyncWrite>(
    options: &ConnectOptions,
    codec: &mut Codec,
    reader: &mut ReadHalf<S>,
    writer: &mut WriteHalf<S>,
    read_buf: &mut BytesMut,
) -> Result<Frame, ClientError> {
    let mut out = BytesMut::new();
    codec.encode(&connect_frame(options), &mut out);
    writer.write_all(&out).await?;
    writer.flush().await?;
    loop {
        match codec.decode(read_buf)? {
            Some(Decoded::Frame(frame)) => return Ok(frame),
            Some(Decoded::HeartBeat) => continue,
            None => {}
        }
        if reader.read_buf(read_buf).await? == 0 {
            return Err(ClientError::Closed);
        }
    }
}

fn connect_frame(options: &ConnectOptions) -> Frame {
    let mut frame = Frame::new(Command::Connect)
        .header("accept-version", options.accept_version.as_str())
        .header("heart-beat", format!("{},{}", options.heart_beat.0, options.heart_beat.1));
    let optional = [
        ("host", &options.host),
        ("login", &options.login),
        ("passcode", &options.passcode),
        ("client-id", &options.client_id),
    ];
    for (name, value) in optional {
        if let Some(value) = value {
            frame.push_header(name, value.as_str());
        }
    }
    for (name, value) in &options.headers {
        frame.push_header(name.as_str(), value.as_str());
    }
    frame
}

/// Checks the server's first frame and returns the version it chose.
fn agreed_version(options: &ConnectOptions, connected: &Frame) -> Result<Version, ClientError> {
    match connected.command {
        Command::Connected => {}
        Command::Error => {
            return Err(ClientError::ServerError {
                message: connected.get("message").unwrap_or_default().to_owned(),
                body: String::from_utf8_lossy(&connected.body).into_owned(),
            })
        }
        other => {
            return Err(ClientError::protocol(format!(
                "expected CONNECTED in answer to CONNECT, got {other}"
            )))
        }
    }
    let version = match connected.get("version") {
        None => Version::V1_0,
        Some(value) => Version::parse(value).ok_or_else(|| {
            ClientError::protocol(format!("server chose unknown STOMP version {value:?}"))
        })?,
    };
    let offered = options.accept_version.split(',').filter_map(Version::parse);
    if !offered.clone().any(|v| v == version) {
        return Err(ClientError::protocol(format!(
            "server chose STOMP {version}, which we did not offer (accept-version {:?})",
            options.accept_version
        )));
    }
    Ok(version)
}

fn send_frame(destination: &str, body: Bytes, headers: &[(&str, &str)]) -> Frame {
    let mut frame = Frame::new(Command::Send).header("destination", destination);
    for (name, value) in headers {
        frame.push_header(*name, *value);
    }
    frame.with_body(body)
}

/// The ACK or NACK frame for `message` in `version`.
fn acknowledgement(
    command: Command,
    version: Version,
    message: &ReceivedMessage,
    headers: &[(&str, &str)],
) -> Result<Frame, ClientError> {
    let required = |name: &str| {
        message.header(name).ok_or_else(|| {
            ClientError::protocol(format!(
                "cannot {command} a MESSAGE without a {name} header in STOMP {version}"
            ))
        })
    };
    let mut frame = Frame::new(command);
    match version {
        Version::V1_0 if command == Command::Nack => {
            return Err(ClientError::protocol(
                "NACK needs STOMP 1.1 or later; this connection speaks 1.0",
            ))
        }
        Version::V1_0 => frame.push_header("message-id", required("message-id")?),
        Version::V1_1 => {
            frame.push_header("message-id", required("message-id")?);
            frame.push_header("subscription", required("subscription")?);
        }
        Version::V1_2 => frame.push_header("id", required("ack")?),
    }
    for (name, value) in headers {
        frame.push_header(*name, *value);
    }
    Ok(frame)
}

/// A short description of a request for timeout messages, e.g. `SEND to /queue/a`.
fn describe(frame: &Frame) -> String {
    match frame.get("destination") {
        Some(destination) => format!("{} to {destination}", frame.command),
        None => frame.command.to_string(),
    }
}
