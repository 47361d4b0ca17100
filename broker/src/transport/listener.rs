//! The accept loop of one connector.

use std::net::SocketAddr;
use std::sync::Arc;
use std::time::Duration;

use conf::{ConnectorUri, TlsConfig, WireProtocol};
use tokio::io::{AsyncRead, AsyncWrite};
use tokio::net::{TcpListener, TcpStream};
use tokio::sync::Semaphore;
use tokio_rustls::TlsAcceptor;
use tokio_util::task::TaskTracker;

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
    pub async fn run(self, context: Arc<ConnectionContext>, tracker: TaskTracker) {
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
                    let tls = self.tls.clone();
                    let connector = uri.clone();
                    tracker.spawn(async move {
                        match tls {
                            None => serve(protocol, socket, context, peer, url).await,
                            Some(acceptor) => {
                                let handshake = acceptor.accept(socket);
                                // A client that never finishes the handshake holds a permit:
                                // it gets as long as any client gets to log in.
                                match tokio::time::timeout(context.connect_timeout, handshake).await
                                {
                                    Ok(Ok(stream)) => {
                                        serve(protocol, stream, context, peer, url).await
                                    }
                                    Ok(Err(error)) => tracing::info!(connector = %connector, %peer, %error, "TLS handshake failed"),
                                    Err(_) => tracing::info!(connector = %connector, %peer, timeout = ?context.connect_timeout, "TLS handshake timed out"),
                                }
                            }
                        }
                        drop(permit);
                    });
                }
                Err(_) => {
                    tracing::warn!(connector = %uri, %peer, limit = self.max_connections, "connection refused: limit reached");
                    // Only a plaintext STOMP client can read why; a TLS one expects a handshake.
                    if protocol == WireProtocol::Stomp && self.tls.is_none() {
                        tracker.spawn(refuse(socket, self.max_connections));
                    } else {
                        // OpenWire has no way to say why before the handshake: just close. (AMQP
                        // could, after a whole header exchange; a plain close is as clear.)
                        drop(socket);
                    }
                }
            }
        }
        tracing::info!(connector = %uri, "stopped accepting");
    }
}

/// Serves one connection, plaintext or TLS, counted for as long as it lasts.
async fn serve<S>(
    protocol: WireProtocol,
    stream: S,
    context: Arc<ConnectionContext>,
    peer: SocketAddr,
    url: String,
) where
    S: AsyncRead + AsyncWrite + Send + Unpin + 'static,
{
    let connections = context.connections.clone();
    match protocol {
        WireProtocol::Stomp => {
            let _counted = connections.opened(Protocol::Stomp);
            stomp::serve(stream, context, peer.to_string()).await
        }
        WireProtocol::OpenWire => {
            let _counted = connections.opened(Protocol::OpenWire);
            openwire::serve(stream, context, peer.to_string(), url).await
        }
        WireProtocol::Amqp => {
            let _counted = connections.opened(Protocol::Amqp);
            amqp::serve(stream, context, peer.to_string()).await
        }
        WireProtocol::Mqtt => {
            let _counted = connections.opened(Protocol::Mqtt);
            mqtt::serve(stream, context, peer.to_string()).await
        }
    }
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
