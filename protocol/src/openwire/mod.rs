//! OpenWire, ActiveMQ's native protocol: the wire format the stock ActiveMQ 5.x JMS client
//! speaks, versions 1 and 9 to 12.
//!
//! A stream starts with each side's [`WireFormatInfo`] (magic `ActiveMQ`, version, options),
//! always loose-encoded; the lower version and the options both sides want are then in force
//! ([`WireFormat::negotiate`]). Every later frame is a 4-byte size (unless both disabled it),
//! a type byte and the command's fields, in *tight* encoding (booleans packed into a bit
//! stream, longs in 0/2/4/8 bytes) or *loose* encoding (plain `DataOutput`), with or without
//! the *marshalling cache* (ids and destinations sent once, then referred to by slot).
//!
//! The [`Codec`] does framing, negotiation state, both encodings and both caches; the
//! [`Command`] enum has one variant per command, each a struct with the Java fields
//! (`command_id`, `response_required`, ...). Message content and properties stay marshalled
//! in [`Message`]; [`Message::body`], [`Message::properties`] and the `set_*` methods read
//! and build them ([`PrimitiveMap`], text, deflate compression).
//!
//! ## Layout
//!
//! - `codec.rs`: [`Codec`] (framing, limits, caches) and [`decode_all_for_fuzzing`];
//! - `format.rs`: [`WireFormatInfo`], [`WireFormat`] and negotiation;
//! - `marshal.rs`: the encoder and decoder of fields (tight and loose) and the table macro
//!   that declares each type's fields in order, with the version that added them;
//! - `commands/`: every command and data structure ([`Command`], [`DataStructure`]);
//! - `boolean_stream.rs`, `primitives.rs` (Java `DataInput`, modified UTF-8), `cache.rs`;
//! - `map.rs`: [`PrimitiveMap`] and [`PrimitiveValue`] (`MarshallingSupport`);
//! - `body.rs`: message bodies, properties and compression;
//! - `error.rs`: [`WireError`].
//!
//! ## Example
//!
//! ```
//! use bytes::BytesMut;
//! use protocol::openwire::{Codec, Command, SessionId, SessionInfo, WireFormat, WireFormatInfo};
//!
//! // Both sides announce themselves; each codec negotiates from the two infos.
//! let broker_info = WireFormatInfo::announcing(&WireFormat::default(), "ferromq", "0.1");
//! let client_info = WireFormatInfo::announcing(&WireFormat::default(), "ActiveMQ", "5.17.2");
//! let mut client = Codec::new(1 << 20);
//! let mut broker = Codec::new(1 << 20);
//! let mut wire = BytesMut::new();
//! client.encode(&client_info.clone().into(), &mut wire)?;
//! let Some(Command::WireFormatInfo(seen)) = broker.decode(&mut wire)? else { panic!() };
//! broker.negotiate(&broker_info, &seen)?;
//! client.negotiate(&client_info, &broker_info)?;
//!
//! let open = SessionInfo {
//!     command_id: 4,
//!     response_required: true,
//!     session_id: Some(SessionId { connection_id: "ID:c-1".into(), value: 1 }),
//! };
//! client.encode(&open.clone().into(), &mut wire)?;
//! assert_eq!(broker.decode(&mut wire)?, Some(Command::SessionInfo(open)));
//! # Ok::<(), protocol::openwire::WireError>(())
//! ```

mod body;
mod boolean_stream;
mod cache;
mod codec;
mod commands;
mod error;
mod format;
mod map;
mod marshal;
mod primitives;

#[cfg(test)]
mod tests;

pub use body::{decode_stream, decode_text, deflate, inflate, Body, DEFAULT_MAX_INFLATED_SIZE};
pub use codec::{decode_all_for_fuzzing, Codec};
pub use commands::*;
pub use error::WireError;
pub use format::{is_supported_version, option, WireFormat, LATEST_VERSION, MAGIC};
pub use map::{primitive_type, MapLimits, PrimitiveMap, PrimitiveValue};
pub use primitives::decode_modified_utf8;
