//! Behaviour tests of the MQTT codec through its public API.

use bytes::BytesMut;

use super::{Codec, Limits, Packet, Version, WireError};

mod errors;
mod fixtures;
mod framing;
mod robustness;
mod round_trip;
mod topic;
mod vectors;

/// A codec at `version` with default limits.
fn codec(version: Version) -> Codec {
    let mut codec = Codec::new(Limits::default());
    codec.set_version(version);
    codec
}

/// The bytes of `packet` in `version`.
fn encode(version: Version, packet: &Packet) -> Vec<u8> {
    let mut wire = BytesMut::new();
    codec(version).encode(packet, &mut wire).unwrap_or_else(|e| panic!("{packet:?}: {e}"));
    wire.to_vec()
}

/// The first result of decoding `wire` in one piece with a codec at `version`.
fn decode_once(version: Version, wire: &[u8]) -> Result<Option<Packet>, WireError> {
    codec(version).decode(&mut BytesMut::from(wire))
}

/// Decodes `wire` as exactly one packet at `version`.
fn decode_one(version: Version, wire: &[u8]) -> Packet {
    let mut buf = BytesMut::from(wire);
    let packet = codec(version)
        .decode(&mut buf)
        .unwrap_or_else(|e| panic!("{wire:02x?}: {e}"))
        .expect("a whole packet");
    assert!(buf.is_empty(), "left over: {buf:02x?}");
    packet
}

/// Decodes everything in `wire` at once; fails the test on an error or leftover bytes.
fn decode_all(codec: &mut Codec, wire: &[u8]) -> Vec<Packet> {
    let mut buf = BytesMut::from(wire);
    let mut out = Vec::new();
    while let Some(packet) = codec.decode(&mut buf).unwrap_or_else(|e| panic!("{e}")) {
        out.push(packet);
    }
    assert!(buf.is_empty(), "left over: {buf:02x?}");
    out
}

/// Feeds `wire` to `codec` one byte at a time, decoding after each byte.
fn decode_byte_by_byte(codec: &mut Codec, wire: &[u8]) -> Result<Vec<Packet>, WireError> {
    let mut buf = BytesMut::new();
    let mut out = Vec::new();
    for &byte in wire {
        buf.extend_from_slice(&[byte]);
        while let Some(packet) = codec.decode(&mut buf)? {
            out.push(packet);
        }
    }
    assert!(buf.is_empty(), "left over: {buf:02x?}");
    Ok(out)
}
