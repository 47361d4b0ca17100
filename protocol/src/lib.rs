//! # protocol: ferromq's wire codecs
//!
//! This crate owns the bytes on the wire and nothing else: it turns bytes into frames and
//! frames into bytes. It knows no broker type, no socket and no runtime (no tokio), so the
//! broker, the client and fuzzers can all drive it the same way: append what the network
//! delivered to a [`bytes::BytesMut`], ask the codec for the next frame, write what it
//! encodes.
//!
//! ## Layout
//!
//! - [`stomp`]: STOMP 1.0, 1.1 and 1.2 ([spec](https://stomp.github.io)):
//!   - `command.rs`: [`stomp::Command`], the frame commands;
//!   - `frame.rs`: [`stomp::Frame`] and [`stomp::Decoded`] (a frame or a heart-beat);
//!   - `codec.rs`: [`stomp::Codec`] and its [`stomp::Limits`];
//!   - `decode.rs`: the incremental decoder (limits enforced while bytes arrive);
//!   - `encode.rs`: the encoder;
//!   - `escape.rs`: header escaping per version;
//!   - `version.rs`, `heart_beat.rs`: version negotiation and heart-beat headers;
//!   - `error.rs`: [`stomp::WireError`], the one error type of the codec.
//! - [`openwire`]: OpenWire versions 1 and 9 to 12, ActiveMQ's native protocol (what the
//!   stock ActiveMQ 5.x JMS client speaks):
//!   - `codec.rs`: [`openwire::Codec`]: framing, limits, negotiation state, marshalling caches;
//!   - `format.rs`: [`openwire::WireFormatInfo`] and [`openwire::WireFormat`] (negotiation);
//!   - `marshal.rs`: tight and loose encoding of fields, and the table macro declaring types;
//!   - `commands/`: [`openwire::Command`] and every command and data structure;
//!   - `map.rs`, `body.rs`: [`openwire::PrimitiveMap`], message bodies and compression;
//!   - `error.rs`: [`openwire::WireError`].
//! - [`amqp`]: AMQP 1.0 (OASIS), what Qpid JMS, Qpid Proton and the other AMQP 1.0 clients
//!   speak:
//!   - `header.rs`: [`amqp::ProtocolHeader`] (AMQP and SASL; other protocols recognised);
//!   - `frame.rs`, `codec.rs`: [`amqp::Frame`], [`amqp::Codec`] and its [`amqp::Limits`]
//!     (frame header, heartbeats, max-frame-size enforced from the size field);
//!   - `types/`: [`amqp::Value`], the type system: format codes, the guarded decoder, the
//!     compact encoder, conversions to typed fields;
//!   - `composite.rs`: [`amqp::Composite`], described lists read and written by field;
//!   - `performatives.rs`: the nine performatives ([`amqp::Performative`]);
//!   - `definitions.rs`, `terminus.rs`, `delivery_state.rs`: roles and settle modes,
//!     [`amqp::AmqpError`], [`amqp::Source`] and [`amqp::Target`], [`amqp::DeliveryState`];
//!   - `transactions.rs`: the coordinator, declare, discharge, declared, transactional state;
//!   - `sasl.rs`: [`amqp::SaslFrame`] and the PLAIN and ANONYMOUS initial responses;
//!   - `message.rs`: [`amqp::Message`] and its sections;
//!   - `delivery.rs`: [`amqp::DeliveryAssembler`] and [`amqp::split_transfer`] for deliveries
//!     that span frames;
//!   - `error.rs`: [`amqp::WireError`].
//! - [`mqtt`]: MQTT 3.1, 3.1.1 and 5.0 (OASIS), what Mosquitto, Eclipse Paho and the other
//!   MQTT clients speak:
//!   - `codec.rs`: [`mqtt::Codec`] and its [`mqtt::Limits`] (fixed header, version learned
//!     from CONNECT, max packet size enforced from the remaining length);
//!   - `packet.rs`: [`mqtt::Packet`] and the fifteen packets;
//!   - `properties.rs`, `reason.rs`: 5.0's [`mqtt::Properties`] and [`mqtt::ReasonCode`];
//!   - `decode.rs`, `encode.rs`, `wire.rs`: packet bodies, the receiver's checks, the data
//!     representations;
//!   - `topic.rs`: topic names and filters, matching, shared subscriptions;
//!   - `error.rs`: [`mqtt::WireError`].
//!
//! ## Example
//!
//! ```
//! use bytes::BytesMut;
//! use protocol::stomp::{Codec, Command, Decoded, Frame, Limits};
//!
//! let mut codec = Codec::new(Limits::default());
//! let mut wire = BytesMut::new();
//! let frame = Frame::new(Command::Send).header("destination", "/queue/a").with_body("hi");
//! codec.encode(&frame, &mut wire);
//! assert_eq!(&wire[..], b"SEND\ndestination:/queue/a\ncontent-length:2\n\nhi\0");
//!
//! let Some(Decoded::Frame(decoded)) = codec.decode(&mut wire)? else { panic!("a frame") };
//! assert_eq!(decoded.get("destination"), Some("/queue/a"));
//! assert_eq!(decoded.get("content-length"), Some("2")); // added by the encoder
//! assert_eq!(&decoded.body[..], b"hi");
//! # Ok::<(), protocol::stomp::WireError>(())
//! ```
#![cfg_attr(not(test), deny(clippy::unwrap_used))]
#![warn(missing_docs)]

pub mod amqp;
pub mod mqtt;
pub mod openwire;
pub mod stomp;
