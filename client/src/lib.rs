//! # client: async STOMP, OpenWire, AMQP 1.0 and MQTT clients on tokio
//!
//! This crate owns a small STOMP 1.0–1.2 client, an OpenWire client ([`openwire`], the
//! protocol of ActiveMQ's JMS client, against ferromq or Apache ActiveMQ) and a minimal
//! AMQP 1.0 client ([`amqp`]: send with an accepted outcome, receive with credit), an MQTT
//! 3.1.1/5.0 client ([`mqtt`]: QoS 0, 1 and 2 both ways, windowed publishes) for ferromq's
//! integration tests and CLI tools. Both speak over any byte stream: TCP
//! ([`StompClient::connect`], [`openwire::OpenWireClient::connect`]) or an in-process pipe
//! ([`StompClient::connect_stream`], e.g. the broker's `vm://` connections). Framing is
//! `protocol`'s; this crate adds the sessions. This page describes the STOMP client; the
//! OpenWire client has the same shape (see [`openwire`]).
//!
//! ## Layout
//!
//! - `client.rs`: [`StompClient`], the CONNECT handshake and the request methods;
//! - `connection.rs`: the background task that owns the socket (below);
//! - `subscription.rs`: [`Subscription`], one SUBSCRIBE's stream of messages;
//! - `message.rs`: [`ReceivedMessage`];
//! - `options.rs`: [`ConnectOptions`] and [`AckMode`];
//! - `error.rs`: [`ClientError`], shared by every client;
//! - `net.rs`: [`connect_tcp`], which tries every address a host name resolves to;
//! - `tls.rs`: [`connect_tls`], the same over TLS, trusting a PEM file of authorities;
//! - `openwire/`: [`openwire`], the OpenWire client;
//! - `amqp/`: [`amqp`], the AMQP 1.0 client;
//! - `mqtt/`: [`mqtt`], the MQTT client;
//! - `load/`: [`load`], the load generator behind `ferromq producer`, `ferromq consumer`
//!   and the benches.
//!
//! ## Design
//!
//! One task per connection owns the stream (split into read and write halves) and runs a
//! `select!` loop over incoming bytes, queued outgoing bytes, requests from the handles and
//! heart-beat timers. Handles talk to it over a bounded channel (back-pressure when the
//! server reads slowly). The task routes MESSAGE frames to their subscription's channel by
//! the `subscription` header, and RECEIPT/ERROR frames to the request waiting for that
//! `receipt-id`. An ERROR frame without a `receipt-id` fails every waiting request and is
//! kept for [`StompClient::next_error`]. If heart-beats were agreed it sends them, and it
//! gives up on a server silent for twice the agreed interval. When the connection ends,
//! waiting requests fail with the reason and subscriptions end (`recv` returns `None`).
//!
//! Every request that waits (CONNECT, receipts) waits at most [`ConnectOptions::timeout`].
//!
//! ## Example
//!
//! ```no_run
//! use std::time::Duration;
//! use client::{AckMode, ConnectOptions, StompClient};
//!
//! # async fn example() -> Result<(), client::ClientError> {
//! let client = StompClient::connect("127.0.0.1:61613", ConnectOptions::default()).await?;
//! let mut orders = client.subscribe("/queue/orders", AckMode::ClientIndividual, &[]).await?;
//! client.send_with_receipt("/queue/orders", "one pizza", &[("persistent", "true")]).await?;
//!
//! let message = orders.recv_timeout(Duration::from_secs(5)).await?;
//! assert_eq!(&message.body()[..], b"one pizza");
//! client.ack(&message).await?;
//!
//! orders.unsubscribe().await?;
//! client.disconnect().await?;
//! # Ok(())
//! # }
//! ```
#![cfg_attr(not(test), deny(clippy::unwrap_used))]
#![warn(missing_docs)]

pub mod amqp;
mod client;
mod connection;
mod error;
pub mod load;
mod message;
pub mod mqtt;
mod net;
pub mod openwire;
mod options;
mod subscription;
mod tls;

pub use client::StompClient;
pub use error::ClientError;
pub use message::ReceivedMessage;
pub use net::connect_tcp;
pub use options::{AckMode, ConnectOptions};
pub use subscription::Subscription;
pub use tls::connect_tls;

/// The STOMP types the client's API uses, re-exported for convenience.
pub use protocol::stomp::{Command, Frame, Limits, Version, WireError};
