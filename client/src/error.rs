//! [`ClientError`]: the one error type of the client.

use std::sync::Arc;
use std::time::Duration;

use protocol::amqp::WireError as AmqpWireError;
use protocol::mqtt::{ReasonCode as MqttReasonCode, WireError as MqttWireError};
use protocol::openwire::WireError as OpenWireError;
use protocol::stomp::WireError;

/// Why a client operation failed, over either protocol.
///
/// `Clone` because one event (the server's ERROR frame or ConnectionError, a broken socket)
/// fails every request waiting on the connection at once.
#[derive(Debug, Clone, thiserror::Error)]
#[non_exhaustive]
pub enum ClientError {
    /// TLS could not be set up: an unreadable trust store, a failed handshake (a certificate
    /// the trust store does not vouch for, a plaintext server).
    #[error("TLS: {message}")]
    Tls {
        /// What went wrong.
        message: String,
    },
    /// Reading from or writing to the connection failed.
    #[error("I/O error on the connection to the server: {0}")]
    Io(#[source] Arc<std::io::Error>),
    /// The server sent bytes that are not valid STOMP.
    #[error("the STOMP server sent an invalid frame: {0}")]
    Wire(#[from] WireError),
    /// The server sent bytes that are not valid OpenWire, or a command cannot be encoded.
    #[error("OpenWire error: {0}")]
    OpenWire(#[from] OpenWireError),
    /// The server sent bytes that are not valid AMQP 1.0, or a message cannot be encoded.
    #[error("AMQP error: {0}")]
    Amqp(#[from] AmqpWireError),
    /// The server sent bytes that are not valid MQTT, or a packet cannot be encoded.
    #[error("MQTT error: {0}")]
    Mqtt(#[from] MqttWireError),
    /// The MQTT broker refused a request: a CONNACK, PUBACK, PUBREC, SUBACK or UNSUBACK
    /// with a failure reason code, or a DISCONNECT from the broker (5.0).
    #[error("the MQTT broker refused the {request}: {reason}")]
    MqttRefused {
        /// What was refused, e.g. `CONNECT`, `PUBLISH to a/b`, `SUBSCRIBE to a/#`.
        request: String,
        /// The reason code (a 3.1.1 return code comes as the reason code of its meaning).
        reason: MqttReasonCode,
    },
    /// The AMQP peer refused: a `rejected` outcome, or a close, end or detach with an error
    /// condition (`amqp:not-found`, ...).
    #[error("the AMQP peer refused: {condition}: {description}")]
    Refused {
        /// The error condition, e.g. `amqp:resource-limit-exceeded`.
        condition: String,
        /// The peer's description (empty when it gave none).
        description: String,
    },
    /// The server's frames do not follow the protocol (or a request cannot be expressed in
    /// the negotiated version, like NACK in STOMP 1.0), or the server does not speak the
    /// protocol at all.
    #[error("protocol error: {message}")]
    Protocol {
        /// What was wrong.
        message: String,
    },
    /// The server answered with an ERROR frame.
    #[error("the STOMP server reported an error: {message}")]
    ServerError {
        /// The ERROR frame's `message` header.
        message: String,
        /// The ERROR frame's body (lossily decoded), often the details.
        body: String,
    },
    /// The OpenWire broker refused a command (an ExceptionResponse) or failed the
    /// connection (a ConnectionError), naming the Java exception the JMS client would throw.
    #[error("the broker refused: {class}: {message}")]
    Exception {
        /// The fully qualified Java exception class, e.g.
        /// `javax.jms.InvalidClientIDException`.
        class: String,
        /// The exception's message.
        message: String,
    },
    /// Nothing arrived in time: a CONNECTED frame, a receipt, a message, or the server's
    /// heart-beats.
    #[error("timed out after {after:?} waiting for {waiting_for}")]
    Timeout {
        /// What the client was waiting for.
        waiting_for: String,
        /// How long it waited.
        after: Duration,
    },
    /// The connection is closed (by the server, or by an earlier disconnect).
    #[error("the connection to the server is closed")]
    Closed,
}

impl From<std::io::Error> for ClientError {
    fn from(error: std::io::Error) -> ClientError {
        ClientError::Io(Arc::new(error))
    }
}

impl ClientError {
    pub(crate) fn protocol(message: impl Into<String>) -> ClientError {
        ClientError::Protocol { message: message.into() }
    }
}
