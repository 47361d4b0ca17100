//! [`Frame`]: what travels after a protocol header (the spec, part 2.3).
//!
//! Every frame starts with an 8-byte header: the frame's size (4 bytes, header included),
//! the data offset `doff` (the header's length in 4-byte words, at least 2; the words
//! between byte 8 and `doff * 4` are an extended header that no one defines, skipped), the
//! type (0x00 AMQP, 0x01 SASL) and, for AMQP frames, the channel. An AMQP frame with no
//! body is a heartbeat. Otherwise the body is a performative, and for a transfer the
//! message bytes that follow it.

use bytes::Bytes;

use super::performatives::{Performative, Transfer};
use super::sasl::SaslFrame;

/// Bytes in a frame header without an extended header.
pub const FRAME_HEADER_LEN: usize = 8;

/// The type byte of an AMQP frame.
pub const FRAME_TYPE_AMQP: u8 = 0x00;
/// The type byte of a SASL frame.
pub const FRAME_TYPE_SASL: u8 = 0x01;

/// The smallest max-frame-size a peer may announce (the spec's `MIN-MAX-FRAME-SIZE`).
pub const MIN_MAX_FRAME_SIZE: u32 = 512;

/// A decoded frame.
#[derive(Debug, Clone, PartialEq)]
pub enum Frame {
    /// An AMQP frame without a body: a heartbeat that keeps an idle connection alive.
    Heartbeat,
    /// An AMQP frame: a performative on a channel, and the payload of a transfer.
    Amqp(AmqpFrame),
    /// A SASL frame (channel ignored).
    Sasl(SaslFrame),
}

impl From<AmqpFrame> for Frame {
    fn from(frame: AmqpFrame) -> Frame {
        Frame::Amqp(frame)
    }
}

impl From<SaslFrame> for Frame {
    fn from(frame: SaslFrame) -> Frame {
        Frame::Sasl(frame)
    }
}

/// An AMQP frame with a body.
#[derive(Debug, Clone, PartialEq)]
pub struct AmqpFrame {
    /// The session's channel.
    pub channel: u16,
    /// The performative.
    pub performative: Performative,
    /// The bytes after the performative: (part of) a message for a transfer, empty for
    /// every other performative. A slice of the frame as received, not a copy.
    pub payload: Bytes,
}

impl AmqpFrame {
    /// A frame without payload.
    pub fn new(channel: u16, performative: impl Into<Performative>) -> AmqpFrame {
        AmqpFrame { channel, performative: performative.into(), payload: Bytes::new() }
    }

    /// A transfer frame carrying `payload`.
    pub fn transfer(channel: u16, transfer: Transfer, payload: Bytes) -> AmqpFrame {
        AmqpFrame { channel, performative: Performative::Transfer(transfer), payload }
    }
}
