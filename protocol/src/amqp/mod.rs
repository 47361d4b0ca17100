//! AMQP 1.0 (the OASIS standard of October 2012): what Qpid JMS, Qpid Proton, the .NET
//! and Go AMQP clients and Azure SDKs speak.
//!
//! A connection opens with a protocol header per layer: usually `AMQP 3 1.0.0` and the
//! SASL exchange ([`SaslFrame`]), then `AMQP 0 1.0.0` and AMQP frames, each carrying a
//! [`Performative`] on a channel (one channel per session). Messages travel in
//! [`Transfer`]s as the payload after the performative, split over several transfers when
//! larger than a frame ([`DeliveryAssembler`], [`split_transfer`]); the payload is a
//! [`Message`]: a sequence of described sections.
//!
//! Everything is built on one type system ([`Value`], `types/`): performatives, SASL
//! frames, termini, delivery states and message sections are composites, described lists
//! read and written field by field ([`Composite`]). Decoding assumes a hostile peer: the
//! [`Codec`] refuses a frame above the maximum frame size before buffering it, and the
//! value decoder checks every size and count against the bytes that are really there and
//! bounds nesting.
//!
//! What the codec does not do: it does not track sessions, links, credit or delivery ids,
//! nor check the order of performatives (open first); that is the protocol adapter's job.
//!
//! ## Layout
//!
//! - `header.rs`: [`ProtocolHeader`] (AMQP and SASL, recognising other protocols);
//! - `frame.rs`: [`Frame`], [`AmqpFrame`] and the frame header constants;
//! - `codec.rs`: [`Codec`] with its [`Limits`] (framing, phases, frame-size limits);
//! - `types/`: [`Value`] and the type system: `codes.rs` (format codes), `decode.rs`
//!   ([`Decoder`]), `encode.rs` ([`encode_value`], compact encodings), `convert.rs`
//!   ([`FromValue`]);
//! - `composite.rs`: [`Composite`], [`FieldReader`], [`FieldWriter`], [`Fields`],
//!   [`Annotations`];
//! - `performatives.rs`: [`Open`], [`Begin`], [`Attach`], [`Flow`], [`Transfer`],
//!   [`Disposition`], [`Detach`], [`End`], [`Close`];
//! - `definitions.rs`: [`Role`], settle modes, [`AmqpError`] and the error [`condition`]s;
//! - `terminus.rs`: [`Source`], [`Target`], [`AttachTarget`];
//! - `delivery_state.rs`: [`DeliveryState`] and the outcomes;
//! - `transactions.rs`: [`Coordinator`], [`Declare`], [`Discharge`], [`Declared`],
//!   [`TransactionalState`];
//! - `sasl.rs`: the SASL frames and the PLAIN and ANONYMOUS initial responses;
//! - `message.rs`: [`Message`] and its sections;
//! - `delivery.rs`: multi-frame deliveries;
//! - `error.rs`: [`WireError`].
//!
//! ## Example
//!
//! ```
//! use bytes::BytesMut;
//! use protocol::amqp::{
//!     AmqpFrame, Codec, Decoded, Frame, Limits, Message, Open, ProtocolHeader, Transfer,
//! };
//!
//! let mut client = Codec::new(Limits::default());
//! let mut broker = Codec::new(Limits::default());
//! let mut wire = BytesMut::new();
//! Codec::encode_header(ProtocolHeader::AMQP, &mut wire);
//! let open = Open { container_id: "client-1".into(), ..Open::default() };
//! client.encode(&AmqpFrame::new(0, open.clone()).into(), &mut wire)?;
//! let body = Message::with_value("hello").to_bytes()?;
//! let transfer = Transfer { handle: 0, delivery_id: Some(0), ..Transfer::default() };
//! client.encode(&AmqpFrame::transfer(1, transfer, body).into(), &mut wire)?;
//!
//! assert_eq!(broker.decode(&mut wire)?, Some(Decoded::Header(ProtocolHeader::AMQP)));
//! let Some(Decoded::Frame(Frame::Amqp(frame))) = broker.decode(&mut wire)? else { panic!() };
//! assert_eq!(frame.performative, open.into());
//! let Some(Decoded::Frame(Frame::Amqp(frame))) = broker.decode(&mut wire)? else { panic!() };
//! let message = Message::decode(&frame.payload, broker.limits().max_nesting_depth)?;
//! assert_eq!(message, Message::with_value("hello"));
//! # Ok::<(), protocol::amqp::WireError>(())
//! ```

mod codec;
mod composite;
mod definitions;
mod delivery;
mod delivery_state;
mod error;
mod frame;
mod header;
mod message;
mod performatives;
pub mod sasl;
mod terminus;
pub mod transactions;
pub mod types;

#[cfg(test)]
mod tests;

pub use codec::{encode_frame, Codec, Decoded, Limits};
pub use composite::{Annotations, Composite, FieldReader, FieldWriter, Fields};
pub use definitions::{condition, AmqpError, ReceiverSettleMode, Role, SenderSettleMode};
pub use delivery::{split_transfer, Assembled, Delivery, DeliveryAssembler};
pub use delivery_state::{DeliveryState, Modified, Received, Rejected};
pub use error::WireError;
pub use frame::{
    AmqpFrame, Frame, FRAME_HEADER_LEN, FRAME_TYPE_AMQP, FRAME_TYPE_SASL, MIN_MAX_FRAME_SIZE,
};
pub use header::{ProtocolHeader, ProtocolId};
pub use message::{ApplicationProperties, Body, Header, Message, MessageId, Properties};
pub use performatives::{
    Attach, Begin, Close, Detach, Disposition, End, Flow, Open, Performative, Transfer,
};
pub use sasl::{
    SaslChallenge, SaslCode, SaslFrame, SaslInit, SaslMechanisms, SaslOutcome, SaslResponse,
};
pub use terminus::{AttachTarget, ExpiryPolicy, Source, Target, TerminusDurability};
pub use transactions::{Coordinator, Declare, Declared, Discharge, TransactionalState};
pub use types::{
    encode_value, Array, Decoder, Described, Descriptor, FromValue, Kind, Symbol, Value,
};
