//! The spec's data representations (section 1.5): integers, variable byte integers,
//! UTF-8 strings and binary data, read from a packet's body and written to a buffer.

use bytes::{Buf, BufMut, Bytes, BytesMut};

use super::error::WireError;
use super::packet::PacketType;

/// The largest value of a variable byte integer (four bytes of 7 bits).
pub(crate) const MAX_VARIABLE_INT: u32 = 268_435_455;

/// The longest string or binary value: its length is two bytes.
pub(crate) const MAX_STRING_LEN: usize = u16::MAX as usize;

/// What a variable byte integer at the front of some bytes is.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub(crate) enum VariableInt {
    /// Its value and how many bytes it took.
    Complete { value: u32, len: usize },
    /// The bytes end inside it.
    Incomplete,
}

/// Parses a variable byte integer from the front of `bytes`. A fifth byte is never read:
/// a fourth byte with its continuation bit set makes the integer malformed at once, so a
/// peer cannot make the decoder wait for a length that cannot exist.
pub(crate) fn parse_variable_int(bytes: &[u8]) -> Result<VariableInt, WireError> {
    let mut value = 0u32;
    for (i, &byte) in bytes.iter().take(4).enumerate() {
        value |= u32::from(byte & 0x7f) << (7 * i);
        if byte & 0x80 == 0 {
            return Ok(VariableInt::Complete { value, len: i + 1 });
        }
    }
    if bytes.len() >= 4 {
        return Err(WireError::VariableIntTooLong);
    }
    Ok(VariableInt::Incomplete)
}

/// The bytes `value` takes as a variable byte integer (minimal encoding).
pub(crate) fn variable_int_len(value: u32) -> usize {
    match value {
        0..=0x7f => 1,
        0x80..=0x3fff => 2,
        0x4000..=0x1f_ffff => 3,
        _ => 4,
    }
}

/// `value` (at most [`MAX_VARIABLE_INT`], checked by the caller) in the fewest bytes: the
/// bytes, of which the first `len` are used, and `len`.
pub(crate) fn variable_int_bytes(mut value: u32) -> ([u8; 4], usize) {
    debug_assert!(value <= MAX_VARIABLE_INT);
    let mut bytes = [0u8; 4];
    for (i, slot) in bytes.iter_mut().enumerate() {
        let byte = (value & 0x7f) as u8;
        value >>= 7;
        if value == 0 {
            *slot = byte;
            return (bytes, i + 1);
        }
        *slot = byte | 0x80;
    }
    (bytes, 4)
}

/// Writes `value` (at most [`MAX_VARIABLE_INT`], checked by the caller) in the fewest bytes.
pub(crate) fn put_variable_int(dst: &mut BytesMut, value: u32) {
    let (bytes, len) = variable_int_bytes(value);
    dst.put_slice(&bytes[..len]);
}

/// Checks that `s` may be written as an MQTT string: at most 65,535 bytes, no U+0000
/// (spec 1.5.4; Rust strings are well-formed UTF-8 already).
pub(crate) fn check_string(s: &str, what: &'static str) -> Result<(), WireError> {
    if s.len() > MAX_STRING_LEN {
        return Err(WireError::StringTooLong { what, len: s.len() });
    }
    if s.as_bytes().contains(&0) {
        return Err(WireError::NullCharacter { what });
    }
    Ok(())
}

/// Checks that `b` fits a two-byte length.
pub(crate) fn check_binary(b: &[u8], what: &'static str) -> Result<(), WireError> {
    if b.len() > MAX_STRING_LEN {
        return Err(WireError::StringTooLong { what, len: b.len() });
    }
    Ok(())
}

/// Writes a two-byte length and `bytes`, already checked to fit.
pub(crate) fn put_checked_bytes(dst: &mut BytesMut, bytes: &[u8]) {
    dst.put_u16(bytes.len() as u16);
    dst.put_slice(bytes);
}

/// Checks and writes a string.
pub(crate) fn put_string(dst: &mut BytesMut, s: &str, what: &'static str) -> Result<(), WireError> {
    check_string(s, what)?;
    put_checked_bytes(dst, s.as_bytes());
    Ok(())
}

/// Checks and writes binary data.
pub(crate) fn put_binary(
    dst: &mut BytesMut,
    b: &[u8],
    what: &'static str,
) -> Result<(), WireError> {
    check_binary(b, what)?;
    put_checked_bytes(dst, b);
    Ok(())
}

/// A cursor over the body of one packet (everything after the fixed header). Every read
/// checks the bytes are there, so a short packet is an error naming the missing field;
/// binary values and the payload are slices of the body, not copies.
pub(crate) struct Reader {
    bytes: Bytes,
    packet: PacketType,
}

impl Reader {
    /// A reader over `bytes`, the body of a `packet`.
    pub(crate) fn new(bytes: Bytes, packet: PacketType) -> Reader {
        Reader { bytes, packet }
    }

    /// The packet being read.
    pub(crate) fn packet(&self) -> PacketType {
        self.packet
    }

    /// Bytes not read yet.
    pub(crate) fn remaining(&self) -> usize {
        self.bytes.len()
    }

    /// Whether everything was read.
    pub(crate) fn is_empty(&self) -> bool {
        self.bytes.is_empty()
    }

    fn need(&self, n: usize, what: &'static str) -> Result<(), WireError> {
        if self.bytes.len() < n {
            return Err(WireError::Truncated { packet: self.packet, what });
        }
        Ok(())
    }

    pub(crate) fn u8(&mut self, what: &'static str) -> Result<u8, WireError> {
        self.need(1, what)?;
        Ok(self.bytes.get_u8())
    }

    pub(crate) fn u16(&mut self, what: &'static str) -> Result<u16, WireError> {
        self.need(2, what)?;
        Ok(self.bytes.get_u16())
    }

    pub(crate) fn u32(&mut self, what: &'static str) -> Result<u32, WireError> {
        self.need(4, what)?;
        Ok(self.bytes.get_u32())
    }

    pub(crate) fn variable_int(&mut self, what: &'static str) -> Result<u32, WireError> {
        match parse_variable_int(&self.bytes)? {
            VariableInt::Complete { value, len } => {
                self.bytes.advance(len);
                Ok(value)
            }
            VariableInt::Incomplete => Err(WireError::Truncated { packet: self.packet, what }),
        }
    }

    /// The next `n` bytes, as a slice of the body.
    pub(crate) fn take(&mut self, n: usize, what: &'static str) -> Result<Bytes, WireError> {
        self.need(n, what)?;
        Ok(self.bytes.split_to(n))
    }

    /// A reader over the next `n` bytes (a length-delimited section).
    pub(crate) fn sub(&mut self, n: usize, what: &'static str) -> Result<Reader, WireError> {
        Ok(Reader { bytes: self.take(n, what)?, packet: self.packet })
    }

    /// Binary data: a two-byte length and that many bytes.
    pub(crate) fn binary(&mut self, what: &'static str) -> Result<Bytes, WireError> {
        let len = self.u16(what)?;
        self.take(usize::from(len), what)
    }

    /// A UTF-8 string, checked as the spec asks: well formed (no surrogates, which Rust's
    /// check rejects too) and without U+0000 (spec 1.5.4, a Malformed Packet).
    pub(crate) fn string(&mut self, what: &'static str) -> Result<String, WireError> {
        let raw = self.binary(what)?;
        let text = std::str::from_utf8(&raw).map_err(|_| WireError::InvalidUtf8 { what })?;
        if raw.contains(&0) {
            return Err(WireError::NullCharacter { what });
        }
        Ok(text.to_owned())
    }

    /// The rest of the body.
    pub(crate) fn rest(&mut self) -> Bytes {
        std::mem::take(&mut self.bytes)
    }

    /// Fails if bytes are left: the remaining length said more than the packet holds.
    pub(crate) fn finish(self) -> Result<(), WireError> {
        if self.bytes.is_empty() {
            Ok(())
        } else {
            Err(WireError::TrailingBytes { packet: self.packet, count: self.bytes.len() })
        }
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn variable_ints_at_the_spec_s_boundaries() {
        // Table 1-1 of the spec: the smallest and largest value of each length.
        for (value, bytes) in [
            (0u32, &[0x00u8][..]),
            (127, &[0x7f]),
            (128, &[0x80, 0x01]),
            (16_383, &[0xff, 0x7f]),
            (16_384, &[0x80, 0x80, 0x01]),
            (2_097_151, &[0xff, 0xff, 0x7f]),
            (2_097_152, &[0x80, 0x80, 0x80, 0x01]),
            (268_435_455, &[0xff, 0xff, 0xff, 0x7f]),
        ] {
            let mut dst = BytesMut::new();
            put_variable_int(&mut dst, value);
            assert_eq!(&dst[..], bytes, "{value}");
            assert_eq!(variable_int_len(value), bytes.len());
            assert_eq!(
                parse_variable_int(bytes),
                Ok(VariableInt::Complete { value, len: bytes.len() })
            );
        }
    }

    #[test]
    fn a_fourth_continuation_bit_is_malformed_without_a_fifth_byte() {
        assert_eq!(parse_variable_int(&[0x80, 0x80, 0x80]), Ok(VariableInt::Incomplete));
        assert_eq!(
            parse_variable_int(&[0x80, 0x80, 0x80, 0x80]),
            Err(WireError::VariableIntTooLong)
        );
        assert_eq!(parse_variable_int(&[]), Ok(VariableInt::Incomplete));
    }

    #[test]
    fn strings_are_checked_for_utf8_and_nul() {
        let mut reader = Reader::new(Bytes::from_static(b"\x00\x02\xc3\x28"), PacketType::Publish);
        assert_eq!(reader.string("the topic"), Err(WireError::InvalidUtf8 { what: "the topic" }));
        let mut reader = Reader::new(Bytes::from_static(b"\x00\x02a\x00"), PacketType::Publish);
        assert_eq!(reader.string("the topic"), Err(WireError::NullCharacter { what: "the topic" }));
        // An encoded surrogate (U+D800) is not well-formed UTF-8.
        let mut reader =
            Reader::new(Bytes::from_static(b"\x00\x03\xed\xa0\x80"), PacketType::Publish);
        assert_eq!(reader.string("the topic"), Err(WireError::InvalidUtf8 { what: "the topic" }));
        let mut reader = Reader::new(Bytes::from_static(b"\x00\x05a"), PacketType::Publish);
        assert_eq!(
            reader.string("the topic"),
            Err(WireError::Truncated { packet: PacketType::Publish, what: "the topic" })
        );
    }
}
