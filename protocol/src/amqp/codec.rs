//! [`Codec`]: one connection's AMQP 1.0 framing, with the [`Limits`] it enforces.

use bytes::{Buf, BufMut, Bytes, BytesMut};

use super::error::WireError;
use super::frame::{AmqpFrame, Frame, FRAME_HEADER_LEN, FRAME_TYPE_AMQP, FRAME_TYPE_SASL};
use super::header::{ProtocolHeader, ProtocolId};
use super::performatives::Performative;
use super::sasl::SaslFrame;
use super::types::{encode_value, Decoder};

/// Bounds on what a peer may send, enforced while decoding.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub struct Limits {
    /// The largest frame accepted, header included: what we announce as `max-frame-size`
    /// in our `open`. A frame whose size field is larger fails before any of it is
    /// buffered.
    pub max_frame_size: u32,
    /// How deeply values (lists, maps, arrays, described values) may nest.
    pub max_nesting_depth: usize,
}

impl Limits {
    /// The default nesting limit: 32 levels, far more than any performative or message
    /// section needs.
    pub const fn default_nesting_depth() -> usize {
        32
    }
}

impl Default for Limits {
    /// 1 MiB frames (ActiveMQ's AMQP default) and [`Limits::default_nesting_depth`].
    fn default() -> Limits {
        Limits { max_frame_size: 1 << 20, max_nesting_depth: Limits::default_nesting_depth() }
    }
}

/// What [`Codec::decode`] produced.
// A header arrives once or twice per connection and frames all the time: boxing the frame
// to shrink the enum would cost an allocation per frame to save bytes on two values.
#[allow(clippy::large_enum_variant)]
#[derive(Debug, Clone, PartialEq)]
pub enum Decoded {
    /// A protocol header: the SASL or AMQP layer starts.
    Header(ProtocolHeader),
    /// A frame.
    Frame(Frame),
}

/// Where the connection is, for the decoder: which frame type is allowed next.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
enum Phase {
    /// Nothing yet: a protocol header must come first.
    AwaitingHeader,
    /// After the SASL header: SASL frames, then the AMQP header.
    Sasl,
    /// After the AMQP header: AMQP frames.
    Amqp,
}

/// One connection's AMQP codec: decodes what the peer sends, encodes what we send.
///
/// Decoding starts by expecting a protocol header. After a SASL header it reads SASL
/// frames until the AMQP header (bytes starting with `A` at a frame boundary: a SASL frame
/// that large is impossible, its size field would read above 1 GiB), after an AMQP header
/// AMQP frames. Frames are only decoded once they have fully arrived; a frame's size is
/// checked against [`Limits::max_frame_size`] as soon as its first 4 bytes are there.
#[derive(Debug, Clone)]
pub struct Codec {
    limits: Limits,
    phase: Phase,
    /// The peer's max-frame-size (from its `open`): the largest frame we may send.
    peer_max_frame_size: u32,
}

impl Codec {
    /// A codec at the start of a connection.
    pub fn new(limits: Limits) -> Codec {
        Codec { limits, phase: Phase::AwaitingHeader, peer_max_frame_size: u32::MAX }
    }

    /// The limits in force.
    pub fn limits(&self) -> Limits {
        self.limits
    }

    /// Changes the largest frame accepted (to what our `open` announced).
    pub fn set_max_frame_size(&mut self, max_frame_size: u32) {
        self.limits.max_frame_size = max_frame_size;
    }

    /// The largest frame [`Codec::encode`] writes: the peer's max-frame-size.
    pub fn peer_max_frame_size(&self) -> u32 {
        self.peer_max_frame_size
    }

    /// Records the max-frame-size of the peer's `open`.
    pub fn set_peer_max_frame_size(&mut self, max_frame_size: u32) {
        self.peer_max_frame_size = max_frame_size;
    }

    /// Decodes the next header or frame from the front of `src`: `Ok(None)` when it has
    /// not fully arrived (nothing is consumed then). An error is fatal for the connection.
    pub fn decode(&mut self, src: &mut BytesMut) -> Result<Option<Decoded>, WireError> {
        let header_may_follow = match self.phase {
            Phase::AwaitingHeader => true,
            Phase::Sasl => src.first() == Some(&b'A'),
            Phase::Amqp => false,
        };
        if header_may_follow {
            return self.decode_header(src);
        }
        let Some(size_bytes) = src.get(..4) else { return Ok(None) };
        let size = u32::from_be_bytes([size_bytes[0], size_bytes[1], size_bytes[2], size_bytes[3]]);
        if size > self.limits.max_frame_size {
            return Err(WireError::FrameTooLarge {
                size: u64::from(size),
                max: u64::from(self.limits.max_frame_size),
            });
        }
        let Some(header) = src.get(..FRAME_HEADER_LEN) else { return Ok(None) };
        let (doff, frame_type) = (header[4], header[5]);
        let channel = u16::from_be_bytes([header[6], header[7]]);
        let body_offset = usize::from(doff) * 4;
        let frame_len = usize::try_from(size).unwrap_or(usize::MAX);
        if frame_len < FRAME_HEADER_LEN || body_offset < FRAME_HEADER_LEN || body_offset > frame_len
        {
            return Err(WireError::BadFrameHeader { size, doff });
        }
        let expected_type =
            if self.phase == Phase::Sasl { FRAME_TYPE_SASL } else { FRAME_TYPE_AMQP };
        if frame_type != expected_type {
            return Err(match frame_type {
                FRAME_TYPE_AMQP => WireError::UnexpectedFrameType { found: "AMQP", phase: "SASL" },
                FRAME_TYPE_SASL => WireError::UnexpectedFrameType { found: "SASL", phase: "AMQP" },
                other => WireError::UnknownFrameType(other),
            });
        }
        if src.len() < frame_len {
            // Reserve once for the rest of the frame, now that its size is known and allowed.
            src.reserve(frame_len - src.len());
            return Ok(None);
        }
        let frame = src.split_to(frame_len).freeze();
        let body = frame.slice(body_offset..);
        let decoded = if self.phase == Phase::Sasl {
            Frame::Sasl(self.decode_sasl_body(&body)?)
        } else if body.is_empty() {
            Frame::Heartbeat
        } else {
            Frame::Amqp(self.decode_amqp_body(channel, &body)?)
        };
        Ok(Some(Decoded::Frame(decoded)))
    }

    fn decode_header(&mut self, src: &mut BytesMut) -> Result<Option<Decoded>, WireError> {
        let Some(header) = ProtocolHeader::parse(src)? else { return Ok(None) };
        src.advance(ProtocolHeader::LEN);
        self.phase = match header.id {
            ProtocolId::Sasl => Phase::Sasl,
            ProtocolId::Amqp => Phase::Amqp,
        };
        Ok(Some(Decoded::Header(header)))
    }

    fn decode_sasl_body(&self, body: &Bytes) -> Result<SaslFrame, WireError> {
        let mut decoder = Decoder::new(body, self.limits.max_nesting_depth);
        let frame = SaslFrame::from_value(decoder.read_value()?)?;
        decoder.expect_end("SASL frame")?;
        Ok(frame)
    }

    fn decode_amqp_body(&self, channel: u16, body: &Bytes) -> Result<AmqpFrame, WireError> {
        let mut decoder = Decoder::new(body, self.limits.max_nesting_depth);
        let performative = Performative::from_value(decoder.read_value()?)?;
        let payload = decoder.rest();
        if !payload.is_empty() && !matches!(performative, Performative::Transfer(_)) {
            return Err(WireError::TrailingBytes {
                what: performative.name(),
                count: payload.len(),
            });
        }
        Ok(AmqpFrame { channel, performative, payload })
    }

    /// Writes a protocol header.
    pub fn encode_header(header: ProtocolHeader, dst: &mut BytesMut) {
        dst.put_slice(&header.to_bytes());
    }

    /// Writes `frame`, failing if it would exceed the peer's max-frame-size (a transfer
    /// too large for one frame is split with [`super::split_transfer`] first).
    pub fn encode(&self, frame: &Frame, dst: &mut BytesMut) -> Result<(), WireError> {
        let start = dst.len();
        let result = encode_frame(frame, dst).and_then(|()| {
            let size = dst.len() - start;
            if size as u64 > u64::from(self.peer_max_frame_size) {
                return Err(WireError::FrameTooLarge {
                    size: size as u64,
                    max: u64::from(self.peer_max_frame_size),
                });
            }
            Ok(())
        });
        if result.is_err() {
            // Leave no half-written frame behind.
            dst.truncate(start);
        }
        result
    }
}

/// Writes `frame` (header, performative, payload) with no size limit but the format's.
pub fn encode_frame(frame: &Frame, dst: &mut BytesMut) -> Result<(), WireError> {
    let start = dst.len();
    let (frame_type, channel) = match frame {
        Frame::Heartbeat => (FRAME_TYPE_AMQP, 0),
        Frame::Amqp(amqp) => (FRAME_TYPE_AMQP, amqp.channel),
        Frame::Sasl(_) => (FRAME_TYPE_SASL, 0),
    };
    dst.put_u32(0); // the size, written once known
    dst.put_u8((FRAME_HEADER_LEN / 4) as u8);
    dst.put_u8(frame_type);
    dst.put_u16(channel);
    match frame {
        Frame::Heartbeat => {}
        Frame::Amqp(amqp) => {
            encode_value(&amqp.performative.to_value(), dst)?;
            dst.put_slice(&amqp.payload);
        }
        Frame::Sasl(sasl) => encode_value(&sasl.to_value(), dst)?,
    }
    let size = u32::try_from(dst.len() - start).map_err(|_| {
        WireError::Unencodable(format!("a frame of {} bytes (at most 2^32 - 1)", dst.len() - start))
    })?;
    dst[start..start + 4].copy_from_slice(&size.to_be_bytes());
    Ok(())
}
