//! Behaviour tests of the AMQP 1.0 codec through its public API.

use bytes::{Bytes, BytesMut};

use super::{encode_frame, Codec, Decoded, Frame, Limits, Value, WireError};

mod fixtures;
mod message;
mod performatives;
mod robustness;
mod types;

/// The nesting limit the tests decode with.
const MAX_DEPTH: usize = Limits::default_nesting_depth();

/// Decodes everything in `wire` at once, with the raw bytes of each header or frame;
/// fails the test on an error or leftover bytes.
fn decode_all(codec: &mut Codec, wire: &[u8]) -> Vec<(Decoded, Vec<u8>)> {
    let mut buf = BytesMut::from(wire);
    let mut out = Vec::new();
    loop {
        let offset = wire.len() - buf.len();
        match codec.decode(&mut buf) {
            Ok(Some(decoded)) => {
                let used = wire.len() - buf.len() - offset;
                out.push((decoded, wire[offset..offset + used].to_vec()));
            }
            Ok(None) => break,
            Err(e) => panic!("decode error at byte {offset}: {e}"),
        }
    }
    assert!(buf.is_empty(), "{} bytes left over", buf.len());
    out
}

/// Feeds `wire` one byte at a time, decoding after each byte.
fn decode_byte_by_byte(codec: &mut Codec, wire: &[u8]) -> Result<Vec<Decoded>, WireError> {
    let mut buf = BytesMut::new();
    let mut out = Vec::new();
    for &byte in wire {
        buf.extend_from_slice(&[byte]);
        while let Some(decoded) = codec.decode(&mut buf)? {
            out.push(decoded);
        }
    }
    assert!(buf.is_empty(), "{} bytes left over", buf.len());
    Ok(out)
}

/// The bytes of one frame.
fn frame_bytes(frame: &Frame) -> Vec<u8> {
    let mut dst = BytesMut::new();
    encode_frame(frame, &mut dst).expect("encodes");
    dst.to_vec()
}

/// Encodes `value`, decodes it back and checks it is the same; returns the bytes.
fn value_round_trip(value: &Value) -> Vec<u8> {
    let mut dst = BytesMut::new();
    super::encode_value(value, &mut dst).unwrap_or_else(|e| panic!("{value:?}: {e}"));
    let bytes = dst.freeze();
    let decoded = super::types::decode_value(&bytes, MAX_DEPTH)
        .unwrap_or_else(|e| panic!("{value:?} as {bytes:02x?}: {e}"));
    assert_eq!(&decoded, value, "{bytes:02x?}");
    bytes.to_vec()
}

/// Decodes `bytes` as one value.
fn decode(bytes: &[u8]) -> Result<Value, WireError> {
    super::types::decode_value(&Bytes::copy_from_slice(bytes), MAX_DEPTH)
}
