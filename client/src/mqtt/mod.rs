//! An async MQTT 3.1.1 and 5.0 client on [`protocol::mqtt`]: enough for ferromq's tools and
//! tests to publish and subscribe at every QoS, against ferromq or any MQTT broker.
//!
//! ## Shape
//!
//! The same as the other clients': [`MqttClient::connect`] (or
//! [`MqttClient::connect_stream`] over TLS or a pipe) sends CONNECT and waits for the
//! CONNACK, then one task owns the socket, the [`protocol::mqtt::Codec`], the packet ids in
//! flight both ways and the keep alive (a PINGREQ when nothing was sent for the keep-alive
//! interval, and the connection given up when no PINGRESP comes within another one); the
//! [`MqttClient`] handle talks to it over a bounded channel.
//!
//! - `client.rs`: [`MqttOptions`], the handshake and the handle;
//! - `connection.rs`: the task: the QoS 1 and 2 flows both ways, SUBACK/UNSUBACK waiters,
//!   PINGREQ.
//!
//! **Publishing** is windowed: [`MqttClient::publish`] returns a [`Confirmation`] as soon as
//! the PUBLISH is queued, and waits only while [`MqttOptions::max_in_flight`]
//! QoS 1/2 publishes (or the 5.0 broker's Receive Maximum, if lower) are unacknowledged.
//! The confirmation resolves on the PUBACK (QoS 1) or PUBCOMP (QoS 2), or at once for QoS 0
//! (which the broker never answers: a QoS 0 publish is confirmed once written).
//!
//! **Receiving**: messages of every subscription come through [`MqttClient::recv`]; the task
//! acknowledges each when it arrives (PUBACK for QoS 1; PUBREC, then PUBCOMP on the PUBREL
//! for QoS 2, handing a QoS 2 message out once even if the broker sends it again before the
//! PUBREL).
//!
//! What it does not do: wills, retained-message options, 5.0 topic aliases, AUTH, session
//! resumption (a publish in flight when the connection ends fails with the reason).
//!
//! ## Example
//!
//! ```no_run
//! use std::time::Duration;
//! use client::mqtt::{MqttClient, MqttOptions, QoS};
//!
//! # async fn example() -> Result<(), client::ClientError> {
//! let client = MqttClient::connect("localhost", 1883, MqttOptions::default()).await?;
//! client.subscribe("sensors/+", QoS::AtLeastOnce).await?;
//! client.publish("sensors/1", "21.5", QoS::ExactlyOnce, false).await?.wait().await?;
//! let message = client.recv(Duration::from_secs(5)).await?.expect("a message");
//! assert_eq!(&message.payload[..], b"21.5");
//! client.disconnect().await?;
//! # Ok(())
//! # }
//! ```

mod client;
mod connection;

pub use client::{Confirmation, Message, MqttClient, MqttOptions};

/// The MQTT types the client's API uses, re-exported for convenience.
pub use protocol::mqtt::{QoS, ReasonCode, Version};
