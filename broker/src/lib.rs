//! # broker: the ferromq broker
//!
//! ferromq is a message broker that does what Apache ActiveMQ Classic does. This crate owns
//! the running broker:
//!
//! - [`core`]: destinations, their owner tasks, routing and dispatch, protocol-neutral;
//! - `transport`: the connectors (one accept loop per configured URI, a connection limit,
//!   shutdown) that hand each socket to a protocol adapter;
//! - `stomp`: the STOMP adapter, frames to core commands and deliveries to frames;
//! - `openwire`: the OpenWire adapter, for the ActiveMQ JMS client (`tcp://`, `nio://`);
//! - [`admin`]: the admin endpoint (HTTP: statistics as JSON and Prometheus metrics) and the
//!   client `ferromq dstat` reads it with;
//! - [`Broker`] / [`BrokerHandle`]: the embedded API; `src/main.rs` is the `ferromq` binary.
//!
//! ```no_run
//! # async fn example() -> anyhow::Result<()> {
//! let mut config = conf::Config::default();
//! config.transport.connectors = vec!["stomp://127.0.0.1:0".parse()?];
//! let broker = broker::Broker::start(config).await?;
//! let stream = broker.connect_in_process(); // a vm:// connection speaking STOMP
//! # drop(stream);
//! broker.shutdown().await;
//! # Ok(()) }
//! ```
#![cfg_attr(not(test), deny(clippy::unwrap_used))]

pub mod admin;
mod amqp;
pub mod core;
mod data_dir;
mod embedded;
mod error;
mod lease;
mod mqtt;
mod openwire;
pub mod security;
mod session;
mod stomp;
mod transcode;
mod transport;

pub use embedded::{Broker, BrokerBuilder, BrokerHandle};
pub use error::BrokerError;
pub use transport::BoundConnector;
