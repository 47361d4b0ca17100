//! Behaviour tests of the STOMP codec through its public API.

use bytes::BytesMut;

use super::{Codec, Decoded, Frame, Limits, Version, WireError};

mod errors;
mod framing;
mod limits;
mod round_trip;

/// A codec at `version` with default limits.
fn codec(version: Version) -> Codec {
    let mut codec = Codec::new(Limits::default());
    codec.set_version(version);
    codec
}

/// Encodes `frame` with `codec` into fresh bytes.
fn encode(codec: &Codec, frame: &Frame) -> BytesMut {
    let mut wire = BytesMut::new();
    codec.encode(frame, &mut wire);
    wire
}

/// Decodes everything in `wire` at once; fails the test on an error or leftover bytes.
fn decode_all(codec: &mut Codec, wire: &[u8]) -> Vec<Decoded> {
    let mut buf = BytesMut::from(wire);
    let mut out = Vec::new();
    while let Some(decoded) = codec.decode(&mut buf).expect("decodes") {
        out.push(decoded);
    }
    assert!(buf.is_empty(), "left over: {buf:?}");
    out
}

/// Feeds `wire` to `codec` one byte at a time, decoding after each byte.
fn decode_byte_by_byte(codec: &mut Codec, wire: &[u8]) -> Result<Vec<Decoded>, WireError> {
    let mut buf = BytesMut::new();
    let mut out = Vec::new();
    for &byte in wire {
        buf.extend_from_slice(&[byte]);
        while let Some(decoded) = codec.decode(&mut buf)? {
            out.push(decoded);
        }
    }
    assert!(buf.is_empty(), "left over: {buf:?}");
    Ok(out)
}

/// The first result of decoding `wire` in one piece.
fn decode_once(codec: &mut Codec, wire: &[u8]) -> Result<Option<Decoded>, WireError> {
    codec.decode(&mut BytesMut::from(wire))
}

/// Unwraps a decoded frame.
fn frame(decoded: Decoded) -> Frame {
    match decoded {
        Decoded::Frame(frame) => frame,
        Decoded::HeartBeat => panic!("expected a frame, got a heart-beat"),
    }
}
