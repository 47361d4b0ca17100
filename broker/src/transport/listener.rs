//! The accept loop of one connector.

use std::net::SocketAddr;
use std::sync::Arc;
use std::time::Duration;

use conf::{ConnectorUri, Scheme};
use tokio::net::{TcpListener, TcpStream};
use tokio::sync::Semaphore;
use tokio_util::task::TaskTracker;

use super::{ConnectionContext, Protocol};
use crate::error::BrokerError;
use crate::{amqp, openwire, stomp};

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
}

/// Binds `uri`, failing with an error that names the connector (a port already taken, say).
pub async fn bind(uri: &ConnectorUri, max_connections: usize) -> Result<Listener, BrokerError> {
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
            let scheme = self.bound.uri.scheme;
            let local = self.bound.local_addr;
            match limit.clone().try_acquire_owned() {
                Ok(permit) => {
                    tracker.spawn(async move {
                        let connections = context.connections.clone();
                        match scheme {
                            Scheme::Stomp | Scheme::StompNio => {
                                let _counted = connections.opened(Protocol::Stomp);
                                stomp::serve(socket, context, peer.to_string()).await
                            }
                            Scheme::OpenWire | Scheme::OpenWireNio => {
                                let _counted = connections.opened(Protocol::OpenWire);
                                let url = format!("{scheme}://{local}");
                                openwire::serve(socket, context, peer.to_string(), url).await
                            }
                            Scheme::Amqp | Scheme::AmqpNio => {
                                let _counted = connections.opened(Protocol::Amqp);
                                amqp::serve(socket, context, peer.to_string()).await
                            }
                        }
                        drop(permit);
                    });
                }
                Err(_) => {
                    tracing::warn!(connector = %uri, %peer, limit = self.max_connections, "connection refused: limit reached");
                    if matches!(self.bound.uri.scheme, Scheme::Stomp | Scheme::StompNio) {
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
