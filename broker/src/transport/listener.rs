//! The accept loop of one connector.

use std::net::SocketAddr;
use std::sync::Arc;
use std::time::Duration;

use conf::{ConnectorUri, TlsConfig, WireProtocol};
use tokio::io::{AsyncRead, AsyncWrite};
use tokio::net::{TcpListener, TcpStream};
use tokio::sync::Semaphore;
use tokio::time::Instant;
use tokio_rustls::TlsAcceptor;
use tokio_util::task::TaskTracker;

use super::websocket;
use super::{ConnectionContext, Protocol};
use crate::error::BrokerError;
use crate::{amqp, mqtt, openwire, stomp};

/// A connector and the address it actually bound (the port is resolved when 0 was asked).
#[derive(Debug, Clone)]
pub struct BoundConnector {
    pub uri: ConnectorUri,
    pub local_addr: SocketAddr,
}

/// A bound, not yet accepting, connector.
pub struct Listener {
    pub bound: BoundConnector,
    listener: TcpListener,
    max_connections: usize,
    /// For TLS connectors: the handshake every connection starts with.
    tls: Option<TlsAcceptor>,
}

/// Binds `uri`, failing with an error that names the connector (a port already taken, a
/// certificate that cannot be read, say). `tls` is read only for TLS connectors.
pub async fn bind(
    uri: &ConnectorUri,
    max_connections: usize,
    tls: &TlsConfig,
) -> Result<Listener, BrokerError> {
    let tls = match uri.scheme.uses_tls() {
        true => Some(TlsAcceptor::from(
            super::tls::server_config(tls, Some(uri))
                .map_err(|source| BrokerError::Tls { uri: uri.to_string(), source })?,
        )),
        false => None,
    };
    let listener = TcpListener::bind(uri.address())
        .await
        .map_err(|source| BrokerError::Bind { uri: uri.to_string(), source })?;
    let local_addr = listener
        .local_addr()
        .map_err(|source| BrokerError::Bind { uri: uri.to_string(), source })?;
    Ok(Listener {
        bound: BoundConnector { uri: uri.clone(), local_addr },
        listener,
        max_connections,
        tls,
    })
}

impl Listener {
    /// Accepts connections until shutdown, one handler task per connection on `tracker`.
    /// `context` carries this connector's limits (its `wireFormat.maxFrameSize`, which also
    /// bounds a WebSocket connector's messages).
    pub async fn run(self, context: Arc<ConnectionContext>, tracker: TaskTracker) {
        // What a WebSocket connector's handshake checks (after TLS for `wss://`).
        let websocket = (self.bound.uri.scheme.protocol() == WireProtocol::WebSocket).then(|| {
            Arc::new(websocket::Settings::new(&self.bound.uri, context.limits.max_frame_size))
        });
        let limit = Arc::new(Semaphore::new(self.max_connections));
        let uri = self.bound.uri.to_string();
        tracing::info!(connector = %uri, address = %self.bound.local_addr, "listening");
        let mut backoff = Duration::from_millis(10);
        loop {
            let accepted = tokio::select! {
                _ = context.shutdown.cancelled() => break,
                accepted = self.listener.accept() => accepted,
            };
            let (socket, peer) = match accepted {
                Ok(pair) => {
                    backoff = Duration::from_millis(10);
                    pair
                }
                Err(error) => {
                    // Out of file descriptors, say: wait and retry rather than spin or give up.
                    tracing::warn!(connector = %uri, %error, ?backoff, "accept failed");
                    tokio::select! {
                        _ = context.shutdown.cancelled() => break,
                        _ = tokio::time::sleep(backoff) => {}
                    }
                    backoff = (backoff * 2).min(Duration::from_secs(5));
                    continue;
                }
            };
            let _ = socket.set_nodelay(true);
            let context = context.clone();
            let url = format!("{}://{}", self.bound.uri.scheme, self.bound.local_addr);
            let protocol = self.bound.uri.scheme.protocol();
            match limit.clone().try_acquire_owned() {
                Ok(permit) => {
                    let transport = Transport {
                        tls: self.tls.clone(),
                        websocket: websocket.clone(),
                        connector: uri.clone(),
                    };
                    tracker.spawn(async move {
                        transport.handle(socket, protocol, context, peer, url).await;
                        drop(permit);
                    });
                }
                Err(_) => {
                    tracing::warn!(connector = %uri, %peer, limit = self.max_connections, "connection refused: limit reached");
                    // Only plaintext clients can read why; a TLS one expects a handshake.
                    match (protocol, self.tls.is_none()) {
                        (WireProtocol::Stomp, true) => {
                            tracker.spawn(refuse(socket, self.max_connections));
                        }
                        (WireProtocol::WebSocket, true) => {
                            tracker.spawn(refuse_http(socket, self.max_connections));
                        }
                        // OpenWire has no way to say why before the handshake: just close.
                        // (AMQP could, after a whole header exchange; a plain close is as
                        // clear.)
                        _ => drop(socket),
                    }
                }
            }
        }
        tracing::info!(connector = %uri, "stopped accepting");
    }
}

/// What a connector does with a connection before its protocol sees it.
struct Transport {
    tls: Option<TlsAcceptor>,
    websocket: Option<Arc<websocket::Settings>>,
    /// The connector's URI, for the log.
    connector: String,
}

impl Transport {
    /// The TLS handshake, then the WebSocket one, as the connector has them, both within the
    /// connect timeout from accept (a client that never finishes one holds a permit: it gets
    /// as long as any client gets to log in); then the protocol.
    async fn handle(
        self,
        socket: TcpStream,
        protocol: WireProtocol,
        context: Arc<ConnectionContext>,
        peer: SocketAddr,
        url: String,
    ) {
        let deadline = Instant::now() + context.connect_timeout;
        let connector = &self.connector;
        match &self.tls {
            None => self.after_tls(socket, protocol, context, peer, url, deadline).await,
            Some(acceptor) => {
                match tokio::time::timeout_at(deadline, acceptor.accept(socket)).await {
                    Ok(Ok(stream)) => {
                        self.after_tls(stream, protocol, context, peer, url, deadline).await
                    }
                    Ok(Err(error)) => {
                        tracing::info!(connector = %connector, %peer, %error, "TLS handshake failed")
                    }
                    Err(_) => {
                        tracing::info!(connector = %connector, %peer, timeout = ?context.connect_timeout, "TLS handshake timed out")
                    }
                }
            }
        }
    }

    async fn after_tls<S>(
        &self,
        stream: S,
        protocol: WireProtocol,
        context: Arc<ConnectionContext>,
        peer: SocketAddr,
        url: String,
        deadline: Instant,
    ) where
        S: AsyncRead + AsyncWrite + Send + Unpin + 'static,
    {
        let connector = &self.connector;
        let Some(settings) = &self.websocket else {
            let protocol = match protocol {
                WireProtocol::Stomp => Protocol::Stomp,
                WireProtocol::OpenWire => Protocol::OpenWire,
                WireProtocol::Amqp => Protocol::Amqp,
                WireProtocol::Mqtt => Protocol::Mqtt,
                WireProtocol::WebSocket => {
                    // `bind` gives every WebSocket connector its settings.
                    tracing::error!(connector = %connector, "WebSocket connector without settings");
                    return;
                }
            };
            return serve(protocol, stream, context, peer, url, deadline).await;
        };
        match tokio::time::timeout_at(deadline, websocket::accept(stream, settings)).await {
            Ok(Ok((protocol, bytes))) => serve(protocol, bytes, context, peer, url, deadline).await,
            Ok(Err(error)) => {
                tracing::info!(connector = %connector, %peer, %error, "WebSocket handshake failed")
            }
            Err(_) => {
                tracing::info!(connector = %connector, %peer, timeout = ?context.connect_timeout, "WebSocket handshake timed out")
            }
        }
    }
}

/// Serves one connection (plaintext, TLS or WebSocket) in `protocol`, counted for as long as
/// it lasts.
async fn serve<S>(
    protocol: Protocol,
    stream: S,
    context: Arc<ConnectionContext>,
    peer: SocketAddr,
    url: String,
    connect_deadline: Instant,
) where
    S: AsyncRead + AsyncWrite + Send + Unpin + 'static,
{
    let peer = peer.to_string();
    let connections = context.connections.clone();
    let _counted = connections.opened(protocol);
    match protocol {
        Protocol::Stomp => stomp::serve(stream, context, peer, connect_deadline).await,
        Protocol::OpenWire => openwire::serve(stream, context, peer, url, connect_deadline).await,
        Protocol::Amqp => amqp::serve(stream, context, peer, connect_deadline).await,
        Protocol::Mqtt => mqtt::serve(stream, context, peer, connect_deadline).await,
    }
}

/// Tells a WebSocket client over the connection limit why it is refused (`503`, which a
/// browser reports as a failed handshake), then closes.
async fn refuse_http(mut socket: TcpStream, limit: usize) {
    use tokio::io::AsyncWriteExt;
    let body = format!("this connector accepts at most {limit} connections; try again later\n");
    let answer = format!(
        "HTTP/1.1 503 Service Unavailable\r\nContent-Type: text/plain; charset=utf-8\r\nContent-Length: {}\r\nRetry-After: 1\r\nConnection: close\r\n\r\n{body}",
        body.len()
    );
    let _ = tokio::time::timeout(Duration::from_secs(1), socket.write_all(answer.as_bytes())).await;
    websocket::close_gently(&mut socket).await;
}

/// Tells a client over the connection limit why it is refused, then closes.
async fn refuse(mut socket: TcpStream, limit: usize) {
    use tokio::io::AsyncWriteExt;
    let frame = protocol::stomp::Frame::error(
        "connection limit reached",
        &format!("this connector accepts at most {limit} connections; try again later"),
    );
    let mut out = bytes::BytesMut::new();
    protocol::stomp::Codec::new(Default::default()).encode(&frame, &mut out);
    let _ = tokio::time::timeout(Duration::from_secs(1), socket.write_all(&out)).await;
    let _ = socket.shutdown().await;
}
