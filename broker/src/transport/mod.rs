//! Transport connectors: one listener per configured URI, an accept loop with back-off and a
//! connection limit, and one handler task per connection, all stopped by one shutdown token.
//! Every connection runs in one driver (`driver.rs`: its read loop, deadlines and shutdown)
//! and writes through one writer task (`writer.rs`), whatever its protocol.
//! TLS connectors (`tls.rs`) run the handshake in the connection's task, within the connect
//! timeout, before the protocol handler sees the stream.
//! WebSocket connectors (`websocket.rs`) run the WebSocket handshake next, within the same
//! timeout, and serve the protocol its subprotocol names over the messages as a byte stream.

mod connections;
pub(crate) mod driver;
mod listener;
mod outbound;
mod read_buffer;
mod tls;
mod websocket;
pub(crate) mod writer;

use std::sync::Arc;
use std::time::Duration;

pub(crate) use connections::{current as current_connection, ConnectionEntry};
pub use connections::{ConnectionCounts, ConnectionStats, Protocol};
pub use listener::{bind, BoundConnector};
use outbound::Outbound;
use protocol::stomp::Limits;
pub(crate) use read_buffer::ReadBuffer;
pub(crate) use tls::server_config as tls_server_config;
pub use tls::TlsSetupError;

use crate::core::Core;

/// The most write buffer a connection's writer keeps once it has written everything queued;
/// a larger one (grown by a burst) is given back, so that idle connections cost little.
pub(crate) const IDLE_WRITE_BUFFER: usize = 4 * 1024;

/// What every connection handler needs, shared by all connections of a broker.
#[derive(Clone)]
pub struct ConnectionContext {
    pub core: Arc<Core>,
    /// Prefix of the protocol message ids this broker assigns; unique per broker start.
    pub id_prefix: String,
    pub limits: Limits,
    /// A connection that has not completed its handshake by then is closed.
    pub connect_timeout: Duration,
    /// How much later than negotiated a client's heart-beat may arrive.
    pub heart_beat_grace: f64,
    /// Cancelled when the broker shuts down.
    pub shutdown: tokio_util::sync::CancellationToken,
    /// Open connections per protocol, shared by every connector.
    pub connections: Arc<ConnectionCounts>,
    /// Checks the credentials each protocol's handshake carries.
    pub security: Arc<crate::security::Authenticator>,
    /// Checks reads, writes and creations of destinations.
    pub authorizer: Arc<crate::security::Authorizer>,
}

#[cfg(test)]
impl ConnectionContext {
    /// A context over a fresh memory store and the default configuration, for the
    /// transport's unit tests.
    pub(crate) fn for_tests(connect_timeout: Duration) -> Arc<ConnectionContext> {
        let config = conf::Config::default();
        let store: Arc<dyn store::MessageStore> = Arc::new(store::MemoryStore::new());
        let core = crate::core::Core::recover(store, crate::core::CoreSettings::default())
            .expect("a memory store recovers");
        Arc::new(ConnectionContext {
            core,
            id_prefix: "test".to_owned(),
            limits: Limits::default(),
            connect_timeout,
            heart_beat_grace: 1.0,
            shutdown: tokio_util::sync::CancellationToken::new(),
            connections: Arc::default(),
            security: Arc::new(
                crate::security::Authenticator::new(&config).expect("the default config is valid"),
            ),
            authorizer: Arc::new(crate::security::Authorizer::new(&config)),
        })
    }
}
