//! A minimal async AMQP 1.0 client on [`protocol::amqp`]: enough to send and receive
//! messages the way seed 001's Qpid client does (a persistent send that waits for the
//! broker's `accepted`, a receive with link credit and an accept), against ferromq or any
//! AMQP 1.0 broker.
//!
//! ## Shape
//!
//! The same as the other clients': [`AmqpClient::connect`] does the SASL exchange
//! (ANONYMOUS, or PLAIN when a user is given), `open` and one `begin`, then one task owns
//! the socket, the [`protocol::amqp::Codec`] and every link's state, and the handles
//! ([`AmqpClient`], [`Sender`], [`Receiver`]) talk to it over a bounded channel.
//!
//! - `client.rs`: the handshake and the handles;
//! - `connection.rs`: the task: session windows, link credit, deliveries, dispositions,
//!   heartbeats (an empty frame at half the broker's idle timeout).
//!
//! What it does not do: more than one session, pre-settled or transactional sends,
//! outcomes other than accepted on the receiving side, link recovery.
//!
//! ## Example
//!
//! ```no_run
//! use std::time::Duration;
//! use client::amqp::{AmqpClient, AmqpOptions, Message};
//!
//! # async fn example() -> Result<(), client::ClientError> {
//! let client = AmqpClient::connect("localhost", 5672, AmqpOptions::default()).await?;
//! let sender = client.sender("queue://orders").await?;
//! let mut message = Message::with_data(&b"one pizza"[..]);
//! message.header = Some(client::amqp::Header { durable: Some(true), ..Default::default() });
//! sender.send(&message).await?; // returns once the broker accepted it
//!
//! let mut receiver = client.receiver("queue://orders", 1).await?;
//! let delivery = receiver.receive(Duration::from_secs(5)).await?.expect("a message");
//! receiver.accept(&delivery).await?;
//! client.close().await?;
//! # Ok(())
//! # }
//! ```

mod client;
mod connection;

pub use client::{AmqpClient, AmqpOptions, Delivery, Receiver, Sender};

/// The AMQP types the client's API uses, re-exported for convenience.
pub use protocol::amqp::{ApplicationProperties, Body, Header, Message, Properties, Value};
