//! WebSocket connectors (`ws://`, `wss://`, RFC 6455): the server handshake, which picks the
//! protocol of the connection from the subprotocols the client offers, and [`WebSocketBytes`],
//! the connection's messages as a byte stream, so that `stomp::serve`, `mqtt::serve` and
//! `amqp::serve` run on it unchanged.
//!
//! The handshake and the framing are tokio-tungstenite's; what is ours is the choice of
//! protocol, the origin check, the limits, and answering HTTP that is not a WebSocket
//! handshake with a status line instead of a silent close.
//!
//! Subprotocols, in the client's order of preference: `v12.stomp`, `v11.stomp`, `v10.stomp`
//! and `stomp` are STOMP (the version is still negotiated by CONNECT's `accept-version`);
//! `mqtt` and `mqttv3.1` are MQTT; `amqp` is AMQP 1.0. The one chosen is echoed in the
//! response. No subprotocol offered: STOMP, as ActiveMQ's ws connector does for clients such
//! as stomp.py that offer none. Only unknown ones offered: the handshake is refused with
//! `400 Bad Request` naming what is served, rather than accepted and closed at once (1002),
//! since a browser shows the client nothing of a close but its code.
//!
//! Framing of what the broker writes: MQTT and AMQP in binary messages, as their WebSocket
//! bindings require; STOMP in text messages while the client writes text and the bytes are
//! UTF-8 (stomp.js and stomp.py write text), binary otherwise. Each write of the connection's
//! writer is one message, and the writer writes whole frames, so no frame is split across
//! messages (older stomp.js parses each message on its own).

use std::future::Future;
use std::io;
use std::pin::Pin;
use std::task::{ready, Context, Poll};

use bytes::Bytes;
use futures_util::stream::{SplitSink, SplitStream};
use futures_util::{SinkExt, StreamExt};
use tokio::io::{AsyncRead, AsyncReadExt, AsyncWrite, AsyncWriteExt, ReadBuf};
use tokio::sync::mpsc;
use tokio::task::JoinHandle;
use tokio_tungstenite::tungstenite::handshake::server::{ErrorResponse, Request, Response};
use tokio_tungstenite::tungstenite::http::{header, HeaderValue, StatusCode};
use tokio_tungstenite::tungstenite::protocol::frame::coding::CloseCode;
use tokio_tungstenite::tungstenite::protocol::{CloseFrame, Role, WebSocketConfig};
use tokio_tungstenite::tungstenite::{Error as WsError, Message};
use tokio_tungstenite::WebSocketStream;
use tokio_util::sync::PollSender;

use super::Protocol;

/// The subprotocols served, each with the protocol it stands for, as the refusal lists them.
const SUBPROTOCOLS: &[(&str, Protocol)] = &[
    ("v12.stomp", Protocol::Stomp),
    ("v11.stomp", Protocol::Stomp),
    ("v10.stomp", Protocol::Stomp),
    ("stomp", Protocol::Stomp),
    ("mqtt", Protocol::Mqtt),
    ("mqttv3.1", Protocol::Mqtt),
    ("amqp", Protocol::Amqp),
];

/// Read chunk of a connection's WebSocket reader: small, so that idle connections cost
/// little (tungstenite's default is 128 KiB a connection); larger messages take more reads.
const READ_BUFFER: usize = 8 * 1024;

/// Messages a connection's writer may have queued for its sending task beyond the one being
/// sent: the writer's own batching does the rest, and its byte count bounds memory.
const QUEUED_MESSAGES: usize = 1;

/// What the handshake of a WebSocket connector checks, from its URI.
#[derive(Debug, Clone)]
pub(crate) struct Settings {
    /// `allowedOrigins`; `None`: every origin.
    allowed_origins: Option<Vec<String>>,
    /// The connector's largest frame (`wireFormat.maxFrameSize`), which bounds each
    /// WebSocket message and frame too.
    max_message_size: usize,
}

impl Settings {
    pub(crate) fn new(uri: &conf::ConnectorUri, max_frame_size: usize) -> Settings {
        Settings {
            allowed_origins: uri.options.allowed_origins.clone(),
            max_message_size: max_frame_size,
        }
    }

    fn config(&self) -> WebSocketConfig {
        WebSocketConfig::default()
            .read_buffer_size(READ_BUFFER)
            .max_message_size(Some(self.max_message_size))
            .max_frame_size(Some(self.max_message_size))
    }

    /// Whether a handshake from `origin` may go on. Without an `Origin` header (clients
    /// other than browsers) it always may: the check protects browsers' users from pages of
    /// other sites, and only browsers send the header.
    fn origin_allowed(&self, origin: Option<&HeaderValue>) -> bool {
        let (Some(allowed), Some(origin)) = (&self.allowed_origins, origin) else {
            return true;
        };
        let origin = origin.to_str().unwrap_or("");
        allowed.iter().any(|allowed| allowed == "*" || allowed.eq_ignore_ascii_case(origin))
    }
}

/// Why a connection ended before it had a protocol; the listener logs it.
#[derive(Debug, thiserror::Error)]
pub(crate) enum HandshakeError {
    /// Answered with an HTTP error status (a bad origin, no subprotocol we speak, not a
    /// WebSocket handshake, not HTTP at all).
    #[error("handshake refused with {status}: {reason}")]
    Refused { status: u16, reason: String },
    /// The socket failed, or the client went away.
    #[error("handshake failed: {0}")]
    Io(#[source] io::Error),
}

/// Runs the server handshake on `stream`: the protocol chosen, and the connection's messages
/// as bytes. A refusal has been answered when this returns.
// The callback's error is tungstenite's `ErrorResponse`, an HTTP response, by its `Callback`.
#[allow(clippy::result_large_err)]
pub(crate) async fn accept<S>(
    mut stream: S,
    settings: &Settings,
) -> Result<(Protocol, WebSocketBytes<S>), HandshakeError>
where
    S: AsyncRead + AsyncWrite + Send + Unpin + 'static,
{
    let mut chosen = None;
    let callback = |request: &Request, response: Response| {
        let (protocol, response) = choose(settings, request, response)?;
        chosen = Some(protocol);
        Ok(response)
    };
    // The handshake borrows the stream, so that a request tungstenite cannot take (not HTTP,
    // not an upgrade) can still be answered here.
    let handshake = tokio_tungstenite::accept_hdr_async_with_config(
        &mut stream,
        callback,
        Some(settings.config()),
    )
    .await;
    match handshake {
        Ok(_) => {}
        Err(WsError::Http(response)) => {
            // Answered by tungstenite with the callback's status and reason.
            let reason = response
                .body()
                .as_ref()
                .map(|body| String::from_utf8_lossy(body).into_owned())
                .unwrap_or_default();
            return Err(HandshakeError::Refused { status: response.status().as_u16(), reason });
        }
        Err(WsError::Io(error)) => return Err(HandshakeError::Io(error)),
        Err(error) => return Err(answer_bad_request(&mut stream, &error).await),
    }
    let Some(protocol) = chosen else {
        // The callback ran, or the handshake could not have succeeded.
        return Err(HandshakeError::Io(io::Error::other("handshake without a protocol")));
    };
    // Nothing follows the request in tungstenite's buffer (it refuses a request with bytes
    // after it), so the stream is taken up again from here.
    let socket =
        WebSocketStream::from_raw_socket(stream, Role::Server, Some(settings.config())).await;
    Ok((protocol, WebSocketBytes::new(socket, protocol)))
}

/// The callback's decision: origin first, then the subprotocol.
#[allow(clippy::result_large_err)] // tungstenite's `ErrorResponse`, as for `accept`.
fn choose(
    settings: &Settings,
    request: &Request,
    mut response: Response,
) -> Result<(Protocol, Response), ErrorResponse> {
    let origin = request.headers().get(header::ORIGIN);
    if !settings.origin_allowed(origin) {
        let origin = origin.and_then(|value| value.to_str().ok()).unwrap_or("?");
        return Err(refusal(
            StatusCode::FORBIDDEN,
            format!("origin {origin} is not allowed on this connector (allowedOrigins)"),
        ));
    }
    let offered: Vec<&str> = request
        .headers()
        .get_all(header::SEC_WEBSOCKET_PROTOCOL)
        .iter()
        .filter_map(|value| value.to_str().ok())
        .flat_map(|value| value.split(','))
        .map(str::trim)
        .filter(|name| !name.is_empty())
        .collect();
    if offered.is_empty() {
        return Ok((Protocol::Stomp, response));
    }
    let known = offered
        .iter()
        .find_map(|name| SUBPROTOCOLS.iter().find(|(known, _)| known.eq_ignore_ascii_case(name)));
    match known {
        Some((name, protocol)) => {
            response
                .headers_mut()
                .insert(header::SEC_WEBSOCKET_PROTOCOL, HeaderValue::from_static(name));
            Ok((*protocol, response))
        }
        None => {
            let served: Vec<&str> = SUBPROTOCOLS.iter().map(|(name, _)| *name).collect();
            Err(refusal(
                StatusCode::BAD_REQUEST,
                format!(
                    "none of the subprotocols offered ({}) is served here; offer one of {}",
                    offered.join(", "),
                    served.join(", ")
                ),
            ))
        }
    }
}

fn refusal(status: StatusCode, reason: String) -> ErrorResponse {
    let mut response = ErrorResponse::new(Some(format!("{reason}\n")));
    *response.status_mut() = status;
    response
        .headers_mut()
        .insert(header::CONTENT_TYPE, HeaderValue::from_static("text/plain; charset=utf-8"));
    response.headers_mut().insert(header::CONNECTION, HeaderValue::from_static("close"));
    response
}

/// Answers a request tungstenite could not take as a WebSocket handshake: `426 Upgrade
/// Required` for HTTP without the upgrade (a browser or curl on the port), `400 Bad Request`
/// for anything else (not HTTP at all, a malformed request), with the reason as the body.
async fn answer_bad_request<S: AsyncRead + AsyncWrite + Unpin>(
    stream: &mut S,
    error: &WsError,
) -> HandshakeError {
    use tokio_tungstenite::tungstenite::error::ProtocolError;
    let (status, extra) = match error {
        WsError::Protocol(
            ProtocolError::MissingConnectionUpgradeHeader
            | ProtocolError::MissingUpgradeWebSocketHeader
            | ProtocolError::MissingSecWebSocketVersionHeader,
        ) => (StatusCode::UPGRADE_REQUIRED, "Upgrade: websocket\r\nSec-WebSocket-Version: 13\r\n"),
        _ => (StatusCode::BAD_REQUEST, ""),
    };
    let reason = format!("this port serves WebSocket (STOMP, MQTT, AMQP): {error}\n");
    let answer = format!(
        "HTTP/1.1 {status}\r\n{extra}Content-Type: text/plain; charset=utf-8\r\nContent-Length: {}\r\nConnection: close\r\n\r\n{reason}",
        reason.len()
    );
    let _ = stream.write_all(answer.as_bytes()).await;
    close_gently(stream).await;
    HandshakeError::Refused { status: status.as_u16(), reason: error.to_string() }
}

/// Shuts the writing side down and reads what the client still sends for a moment, so that
/// the kernel does not answer it with a reset that could destroy the answer unread.
pub(crate) async fn close_gently<S: AsyncRead + AsyncWrite + Unpin>(stream: &mut S) {
    let _ = stream.shutdown().await;
    let mut sink = [0u8; 4096];
    let drain = async {
        let mut total = 0;
        while total < 64 * 1024 {
            match stream.read(&mut sink).await {
                Ok(0) | Err(_) => break,
                Ok(n) => total += n,
            }
        }
    };
    let _ = tokio::time::timeout(std::time::Duration::from_secs(1), drain).await;
}

/// How the broker's bytes go out.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
enum Framing {
    /// Binary messages (MQTT, AMQP); a text message from the client is refused (MQTT) or
    /// read as bytes (AMQP).
    Binary { refuse_text: bool },
    /// Text messages while the client writes text and the bytes are UTF-8 (STOMP).
    LikeTheClient,
}

/// One WebSocket connection as a byte stream: the payloads of binary and text messages in
/// order when read; each write one message. Pings are answered by tungstenite while reading;
/// a close message (or the socket's end) is the end of the stream; a read error (a message
/// over the connector's limit, a protocol violation) is an `io::Error`, and the close frame
/// sent when the connection ends gives its code (1009, 1002, 1007, 1003).
///
/// Writes go to a small task that owns the sink and flushes each message: the connection's
/// writer never flushes, and a message left in tungstenite's buffer would wait for the next.
pub(crate) struct WebSocketBytes<S> {
    incoming: SplitStream<WebSocketStream<S>>,
    /// What is left of the last message read.
    unread: Bytes,
    /// The close message or the socket's end was read.
    ended: bool,
    outgoing: PollSender<Message>,
    sender: Option<JoinHandle<()>>,
    framing: Framing,
    /// The client's last data message was text.
    client_writes_text: bool,
    /// Why the connection ends, when reading found out; sent as the close frame.
    close: Option<CloseFrame>,
    /// The close message has been handed to the sending task.
    close_sent: bool,
}

impl<S> WebSocketBytes<S>
where
    S: AsyncRead + AsyncWrite + Send + Unpin + 'static,
{
    fn new(socket: WebSocketStream<S>, protocol: Protocol) -> WebSocketBytes<S> {
        let (sink, incoming) = socket.split();
        let (messages, queued) = mpsc::channel(QUEUED_MESSAGES);
        let sender = tokio::spawn(send_messages(sink, queued));
        let framing = match protocol {
            Protocol::Stomp => Framing::LikeTheClient,
            Protocol::Mqtt => Framing::Binary { refuse_text: true },
            _ => Framing::Binary { refuse_text: false },
        };
        WebSocketBytes {
            incoming,
            unread: Bytes::new(),
            ended: false,
            outgoing: PollSender::new(messages),
            sender: Some(sender),
            framing,
            client_writes_text: false,
            close: None,
            close_sent: false,
        }
    }

    fn message(&self, bytes: Vec<u8>) -> Message {
        if self.framing == Framing::LikeTheClient && self.client_writes_text {
            match String::from_utf8(bytes) {
                Ok(text) => return Message::Text(text.into()),
                Err(binary) => return Message::Binary(binary.into_bytes().into()),
            }
        }
        Message::Binary(bytes.into())
    }

    fn fail(&mut self, code: CloseCode, reason: &str, kind: io::ErrorKind) -> io::Error {
        self.close = Some(CloseFrame { code, reason: reason.to_owned().into() });
        io::Error::new(kind, format!("WebSocket: {reason}"))
    }
}

/// Sends each message the connection writes, flushed, until the connection closes its end;
/// then the close handshake's first half.
async fn send_messages<S>(
    mut sink: SplitSink<WebSocketStream<S>, Message>,
    mut messages: mpsc::Receiver<Message>,
) where
    S: AsyncRead + AsyncWrite + Unpin,
{
    while let Some(message) = messages.recv().await {
        let closing = matches!(message, Message::Close(_));
        if sink.send(message).await.is_err() || closing {
            break;
        }
    }
    let _ = sink.close().await;
}

fn broken_pipe() -> io::Error {
    io::Error::new(io::ErrorKind::BrokenPipe, "WebSocket connection closed")
}

impl<S> AsyncRead for WebSocketBytes<S>
where
    S: AsyncRead + AsyncWrite + Send + Unpin + 'static,
{
    fn poll_read(
        mut self: Pin<&mut Self>,
        cx: &mut Context<'_>,
        buf: &mut ReadBuf<'_>,
    ) -> Poll<io::Result<()>> {
        let this = &mut *self;
        loop {
            if !this.unread.is_empty() {
                let n = this.unread.len().min(buf.remaining());
                buf.put_slice(&this.unread.split_to(n));
                return Poll::Ready(Ok(()));
            }
            if this.ended {
                return Poll::Ready(Ok(()));
            }
            match ready!(this.incoming.poll_next_unpin(cx)) {
                Some(Ok(Message::Binary(bytes))) => {
                    this.client_writes_text = false;
                    this.unread = bytes;
                }
                Some(Ok(Message::Text(text))) => {
                    if this.framing == (Framing::Binary { refuse_text: true }) {
                        let error = this.fail(
                            CloseCode::Unsupported,
                            "MQTT packets must be sent in binary messages",
                            io::ErrorKind::InvalidData,
                        );
                        return Poll::Ready(Err(error));
                    }
                    this.client_writes_text = true;
                    this.unread = Bytes::from(text);
                }
                Some(Ok(Message::Close(_))) | None => this.ended = true,
                // Answered (pings) or ignored (pongs) by tungstenite.
                Some(Ok(Message::Ping(_) | Message::Pong(_) | Message::Frame(_))) => {}
                Some(Err(error)) => {
                    let (code, reason, kind) = match &error {
                        WsError::Capacity(_) => (
                            CloseCode::Size,
                            "message larger than this connector's wireFormat.maxFrameSize",
                            io::ErrorKind::InvalidData,
                        ),
                        WsError::Utf8(_) => (
                            CloseCode::Invalid,
                            "text message that is not UTF-8",
                            io::ErrorKind::InvalidData,
                        ),
                        WsError::Protocol(_) => (
                            CloseCode::Protocol,
                            "WebSocket protocol violation",
                            io::ErrorKind::InvalidData,
                        ),
                        WsError::Io(error) => (CloseCode::Abnormal, "socket error", error.kind()),
                        _ => (CloseCode::Error, "WebSocket error", io::ErrorKind::Other),
                    };
                    tracing::debug!(%error, "WebSocket read failed");
                    return Poll::Ready(Err(this.fail(code, reason, kind)));
                }
            }
        }
    }
}

impl<S> AsyncWrite for WebSocketBytes<S>
where
    S: AsyncRead + AsyncWrite + Send + Unpin + 'static,
{
    fn poll_write(
        mut self: Pin<&mut Self>,
        cx: &mut Context<'_>,
        buf: &[u8],
    ) -> Poll<io::Result<usize>> {
        if self.close_sent {
            return Poll::Ready(Err(broken_pipe()));
        }
        ready!(self.outgoing.poll_reserve(cx)).map_err(|_| broken_pipe())?;
        let message = self.message(buf.to_vec());
        self.outgoing.send_item(message).map_err(|_| broken_pipe())?;
        Poll::Ready(Ok(buf.len()))
    }

    /// All the buffers as one message: the writer hands over whole frames this way.
    fn poll_write_vectored(
        mut self: Pin<&mut Self>,
        cx: &mut Context<'_>,
        bufs: &[io::IoSlice<'_>],
    ) -> Poll<io::Result<usize>> {
        if self.close_sent {
            return Poll::Ready(Err(broken_pipe()));
        }
        ready!(self.outgoing.poll_reserve(cx)).map_err(|_| broken_pipe())?;
        let bytes = bufs.iter().flat_map(|buf| buf.iter().copied()).collect::<Vec<u8>>();
        let written = bytes.len();
        let message = self.message(bytes);
        self.outgoing.send_item(message).map_err(|_| broken_pipe())?;
        Poll::Ready(Ok(written))
    }

    fn is_write_vectored(&self) -> bool {
        true
    }

    /// Every message is flushed by the sending task as soon as it takes it.
    fn poll_flush(self: Pin<&mut Self>, _cx: &mut Context<'_>) -> Poll<io::Result<()>> {
        Poll::Ready(Ok(()))
    }

    /// Sends the close frame (with the code of what ended the connection) after everything
    /// written, and waits for the sending task to have sent it.
    fn poll_shutdown(mut self: Pin<&mut Self>, cx: &mut Context<'_>) -> Poll<io::Result<()>> {
        if !self.close_sent {
            if ready!(self.outgoing.poll_reserve(cx)).is_ok() {
                let frame = self
                    .close
                    .take()
                    .unwrap_or(CloseFrame { code: CloseCode::Normal, reason: "".into() });
                let _ = self.outgoing.send_item(Message::Close(Some(frame)));
            }
            self.close_sent = true;
            self.outgoing.close();
        }
        if let Some(sender) = self.sender.as_mut() {
            let _ = ready!(Pin::new(sender).poll(cx));
            self.sender = None;
        }
        Poll::Ready(Ok(()))
    }
}

impl<S> Drop for WebSocketBytes<S> {
    /// A connection dropped without shutting down (its writer cut) takes its sender along.
    fn drop(&mut self) {
        if let Some(sender) = self.sender.take() {
            sender.abort();
        }
    }
}
