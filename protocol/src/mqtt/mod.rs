//! MQTT 3.1, 3.1.1 and 5.0: what Mosquitto's tools, Eclipse Paho, MQTT.js, HiveMQ's and
//! the other MQTT clients speak.
//!
//! A packet on the wire is a fixed header (a byte of packet type and flags, then the
//! remaining length as a variable byte integer of 1 to 4 bytes), a variable header and a
//! payload. The [`Codec`] reads the fixed header first: it rejects a bad first byte at once
//! and a packet above [`Limits::max_packet_size`] before buffering it, and decodes the
//! rest once it has all arrived. The layouts depend on the version, which the codec learns
//! from the CONNECT (server side) or is told (client side): 5.0 adds reason codes
//! ([`ReasonCode`]) and [`Properties`] to almost every packet.
//!
//! Decoding assumes a hostile peer: every length is checked against the bytes present,
//! every rule the spec makes a MUST for the receiver is a distinct [`WireError`] variant,
//! and [`WireError::disconnect_reason`] names the reason code to close with. Encoding
//! checks the same rules, so what encodes decodes to the same packet.
//!
//! What the codec does not do: it does not track sessions, packet identifiers in flight,
//! topic aliases or keep alive, nor check the order of packets beyond needing CONNECT
//! first; that is the protocol adapter's job.
//!
//! ## Layout
//!
//! - `version.rs`: [`Version`] and [`QoS`];
//! - `codec.rs`: [`Codec`] with its [`Limits`] (framing, version, packet-size limits);
//! - `packet.rs`: [`Packet`], [`PacketType`] and the packet structs: [`Connect`] with its
//!   [`Will`], [`Connack`], [`Publish`], [`PubAck`] (PUBACK, PUBREC, PUBREL, PUBCOMP),
//!   [`Subscribe`] with its [`Subscription`]s and [`SubscriptionOptions`], [`Suback`],
//!   [`Unsubscribe`], [`Unsuback`], [`Disconnect`], [`Auth`];
//! - `properties.rs`: [`Property`], [`PropertyId`], [`PropertyType`], [`Properties`], and
//!   which packet may carry which property;
//! - `reason.rs`: [`ReasonCode`] and [`ConnectReturnCode`];
//! - `topic.rs`: topic name and filter syntax, matching, shared subscriptions;
//! - `wire.rs`: the data representations (variable byte integers, strings, binary data);
//! - `decode.rs`, `encode.rs`: packet bodies and the receiver's checks;
//! - `error.rs`: [`WireError`].
//!
//! ## Example
//!
//! ```
//! use bytes::BytesMut;
//! use protocol::mqtt::{Codec, Connect, Limits, Packet, Publish, QoS, Version};
//!
//! let mut client = Codec::new(Limits::default());
//! let mut broker = Codec::new(Limits::default());
//! let mut wire = BytesMut::new();
//! client.encode(&Connect::new(Version::V3_1_1, "sensor-1").into(), &mut wire)?;
//! let publish =
//!     Publish { qos: QoS::AtLeastOnce, packet_id: Some(1), ..Publish::new("a/b", "hi") };
//! client.encode(&publish.clone().into(), &mut wire)?;
//!
//! let Some(Packet::Connect(connect)) = broker.decode(&mut wire)? else { panic!("CONNECT") };
//! assert_eq!(connect.client_id, "sensor-1");
//! assert_eq!(broker.version(), Some(Version::V3_1_1)); // learned from the CONNECT
//! assert_eq!(broker.decode(&mut wire)?, Some(Packet::Publish(publish)));
//! assert!(wire.is_empty());
//! # Ok::<(), protocol::mqtt::WireError>(())
//! ```

mod codec;
mod decode;
mod encode;
mod error;
mod packet;
mod properties;
mod reason;
pub mod topic;
mod version;
mod wire;

#[cfg(test)]
mod tests;

pub use codec::{Codec, Limits};
pub use error::WireError;
pub use packet::{
    Auth, Connack, Connect, Disconnect, Packet, PacketType, PubAck, Publish, RetainHandling,
    Suback, Subscribe, Subscription, SubscriptionOptions, Unsuback, Unsubscribe, Will,
};
pub use properties::{Properties, Property, PropertyId, PropertyType};
pub use reason::{ConnectReturnCode, ReasonCode};
pub use topic::{SharedSubscription, TopicError};
pub use version::{QoS, Version};
