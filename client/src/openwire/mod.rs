//! An async OpenWire client: ActiveMQ's native protocol, as the ActiveMQ 5.x JMS client
//! speaks it, against ferromq or Apache ActiveMQ.
//!
//! ## Shape
//!
//! The same as the STOMP client's: one task per connection owns the socket and the
//! [`protocol::openwire::Codec`] (negotiated format, both marshalling caches); the handles
//! ([`OpenWireClient`], [`Session`], [`Producer`], [`Consumer`]) talk to it over a bounded
//! channel. Commands that ask for a response wait for the broker's Response at most
//! [`OpenWireOptions::timeout`]; an ExceptionResponse becomes [`crate::ClientError::Exception`]
//! with the Java exception class and message.
//!
//! - `client.rs`: [`OpenWireClient`], the WireFormatInfo handshake and ConnectionInfo;
//! - `connection.rs`: the task (routing of responses, dispatches, ProducerAcks, keep-alives);
//! - `session.rs`: [`Session`], acknowledgement modes and local transactions;
//! - `producer.rs`: [`Producer`]; `consumer.rs`: [`Consumer`] (prefetch, pulls, acks);
//! - `message.rs`: [`OutgoingMessage`] and [`Message`]; `options.rs`: the options.
//!
//! ## What the broker sees
//!
//! The commands and ids of ActiveMQ's client: ConnectionInfo (user, password, client id),
//! SessionInfo, ProducerInfo and ConsumerInfo (prefetch, durable subscription name), Message
//! with `ID:<connection>:<session>:<producer>:<n>` ids (synchronous, `responseRequired`, for
//! persistent sends outside transactions), MessageAck (standard ranges, individual acks,
//! in transactions), MessagePull for prefetch 0, TransactionInfo (BEGIN before the first
//! transacted command, COMMIT_ONE_PHASE, ROLLBACK), KeepAliveInfo (answered when asked for,
//! sent when nothing else was written for a third of the negotiated `MaxInactivityDuration`)
//! and on close RemoveInfo for each consumer (with the last message handed out), session
//! and the connection, then ShutdownInfo.
//!
//! ## Example
//!
//! ```no_run
//! use std::time::Duration;
//! use client::openwire::{
//!     Destination, OpenWireClient, OpenWireOptions, OutgoingMessage, SessionMode, SubscribeOptions,
//! };
//!
//! # async fn example() -> Result<(), client::ClientError> {
//! let client = OpenWireClient::connect("localhost", 61616, OpenWireOptions::default()).await?;
//! let session = client.session(SessionMode::Individual).await?;
//! let orders = Destination::queue("orders");
//! let mut consumer = session.consumer(SubscribeOptions::new(orders.clone())).await?;
//! let producer = session.producer(Some(orders)).await?;
//! producer.send(&OutgoingMessage::text("one pizza").property("quantity", 1)).await?;
//!
//! let message = consumer.receive(Duration::from_secs(5)).await?.expect("a message");
//! assert_eq!(message.text().as_deref(), Some("one pizza"));
//! consumer.ack(&message).await?;
//! client.close().await?;
//! # Ok(())
//! # }
//! ```

mod client;
mod connection;
mod consumer;
mod message;
mod options;
mod producer;
mod session;

pub(crate) use client::new_connection_id;
pub use client::OpenWireClient;
pub use consumer::Consumer;
pub use message::{Message, OutgoingMessage};
pub use options::{OpenWireOptions, SendMode, SessionMode, SubscribeOptions};
pub use producer::{Producer, ProducerSettings};
pub use session::Session;

/// The OpenWire types the client's API uses, re-exported for convenience.
pub use protocol::openwire::{
    Body, Destination, DestinationKind, PrimitiveMap, PrimitiveValue, WireFormat,
};
