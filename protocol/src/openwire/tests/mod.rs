//! Behaviour tests of the OpenWire codec through its public API.

use bytes::BytesMut;

use super::{Codec, Command, WireError};

mod fixtures;
mod robustness;
mod round_trip;

/// Frames larger than this are refused in tests.
const MAX_FRAME: usize = 64 << 20;

/// Decodes every command in `wire` at once, with the raw bytes of each frame; fails the
/// test on an error or leftover bytes.
fn decode_frames(codec: &mut Codec, wire: &[u8]) -> Vec<(Command, Vec<u8>)> {
    let mut buf = BytesMut::from(wire);
    let mut out = Vec::new();
    loop {
        let before = buf.len();
        let offset = wire.len() - before;
        match codec.decode(&mut buf) {
            Ok(Some(command)) => {
                let used = before - buf.len();
                out.push((command, wire[offset..offset + used].to_vec()));
            }
            Ok(None) => break,
            Err(e) => panic!("decode error at byte {offset}: {e}"),
        }
    }
    assert!(buf.is_empty(), "{} bytes left over", buf.len());
    out
}

/// Feeds `wire` one byte at a time, decoding after each byte.
fn decode_byte_by_byte(codec: &mut Codec, wire: &[u8]) -> Result<Vec<Command>, WireError> {
    let mut buf = BytesMut::new();
    let mut out = Vec::new();
    for &byte in wire {
        buf.extend_from_slice(&[byte]);
        while let Some(command) = codec.decode(&mut buf)? {
            out.push(command);
        }
    }
    assert!(buf.is_empty(), "{} bytes left over", buf.len());
    Ok(out)
}
