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
        // Each path in an allocation of its own: a connection's task is then as large as what
        // its connector does. Inline, every idle connection paid for the sum of every
        // variant's state (TLS, WebSocket, each protocol): 10 KiB of its 22.
        match self.tls.is_some() {
            false => Box::pin(self.after_tls(socket, protocol, context, peer, url, deadline)).await,
            true => Box::pin(self.over_tls(socket, protocol, context, peer, url, deadline)).await,
        }
    }

    /// The TLS handshake (on a connector with TLS), then the rest.
    async fn over_tls(
        &self,
        socket: TcpStream,
        protocol: WireProtocol,
        context: Arc<ConnectionContext>,
        peer: SocketAddr,
        url: String,
        deadline: Instant,
    ) {
        let connector = &self.connector;
        let Some(acceptor) = &self.tls else { return };
        match tokio::time::timeout_at(deadline, acceptor.accept(socket)).await {
            Ok(Ok(stream)) => self.after_tls(stream, protocol, context, peer, url, deadline).await,
            Ok(Err(error)) => {
                tracing::info!(connector = %connector, %peer, %error, "TLS handshake failed")
            }
            Err(_) => {
                tracing::info!(connector = %connector, %peer, timeout = ?context.connect_timeout, "TLS handshake timed out")
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
        Box::pin(self.over_websocket(settings, stream, context, peer, url, deadline)).await
    }

    async fn over_websocket<S>(
        &self,
        settings: &websocket::Settings,
        stream: S,
        context: Arc<ConnectionContext>,
        peer: SocketAddr,
        url: String,
        deadline: Instant,
    ) where
        S: AsyncRead + AsyncWrite + Send + Unpin + 'static,
    {
        let connector = &self.connector;
        // Boxed: the handshake's state is freed once it is done.
        let handshake = Box::pin(websocket::accept(stream, settings));
        match tokio::time::timeout_at(deadline, handshake).await {
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
    let connections = context.connections.clone();
    // Listed for the admin endpoint, which may close it: its session and its driver find the
    // entry in the task (`connections::serving`).
    let (counted, entry) = connections.opened_from(protocol, peer);
    let peer = peer.to_string();
    // Each protocol's connection in an allocation of its own size: inline, every connection's
    // task was as large as the largest protocol's (and the TLS and WebSocket variants').
    let connection: std::pin::Pin<Box<dyn std::future::Future<Output = ()> + Send>> = match protocol
    {
        Protocol::Stomp => Box::pin(stomp::serve(stream, context, peer, connect_deadline)),
        Protocol::OpenWire => {
            Box::pin(openwire::serve(stream, context, peer, url, connect_deadline))
        }
        Protocol::Amqp => Box::pin(amqp::serve(stream, context, peer, connect_deadline)),
        Protocol::Mqtt => Box::pin(mqtt::serve(stream, context, peer, connect_deadline)),
    };
    super::connections::serving(entry, connection).await;
    drop(counted);
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

#[cfg(test)]
mod task_sizes {
    //! An idle connection's memory is mostly the state of its tasks, allocated whole when the
    //! task is spawned: a future holds every variant it might run inline. The accept task's
    //! grew unnoticed to 10 KiB (the TLS, WebSocket and four protocols' states side by side)
    //! of the 22 KiB an idle STOMP connection took; these bounds keep each path in its own
    //! allocation of its own size.

    use super::*;

    #[tokio::test]
    async fn a_connection_task_holds_only_the_path_it_takes() {
        let context = ConnectionContext::for_tests(Duration::from_secs(5));
        let listener = TcpListener::bind("127.0.0.1:0").await.expect("bind a loopback port");
        let address = listener.local_addr().expect("a bound address");
        let socket = TcpStream::connect(address).await.expect("connect to it");
        let transport = Transport { tls: None, websocket: None, connector: String::new() };
        let accepted =
            transport.handle(socket, WireProtocol::Stomp, context.clone(), address, String::new());
        let accept_task = std::mem::size_of_val(&accepted);
        assert!(accept_task <= 512, "the accept task's future is {accept_task} bytes");
        drop(accepted);

        // Each future's size, unpolled (dropped at once).
        fn size<F>(future: F) -> usize {
            std::mem::size_of_val(&future)
        }
        let (deadline, none) = (Instant::now(), String::new);
        let (one, other) = tokio::io::duplex(64);
        let (three, four) = tokio::io::duplex(64);
        let sizes = [
            ("STOMP", size(stomp::serve(one, context.clone(), none(), deadline))),
            ("MQTT", size(mqtt::serve(other, context.clone(), none(), deadline))),
            ("AMQP", size(amqp::serve(three, context.clone(), none(), deadline))),
            ("OpenWire", size(openwire::serve(four, context.clone(), none(), none(), deadline))),
        ];
        // Each queue's command channel holds 32 of them from the start (80 bytes made 2.5 KiB
        // of every idle subscriber's queue).
        let command = std::mem::size_of::<crate::core::queue::QueueCommand>();
        assert!(command <= 48, "a queue command is {command} bytes");
        for (protocol, size) in sizes {
            // Each about 3 KiB today: the connection's state and the driver's loop.
            assert!(size <= 4096, "a {protocol} connection's future is {size} bytes");
        }
    }
}
