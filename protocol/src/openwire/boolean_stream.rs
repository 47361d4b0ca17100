//! The boolean stream of tight encoding: every boolean of a command (flags, "is null" markers,
//! the size classes of longs) packed into bits ahead of the command's body.
//!
//! On the wire: a length (one byte below 64; `0xC0` and one byte below 256; `0x80` and a
//! big-endian short otherwise), then that many bytes; bit 0 of the first byte is the first
//! boolean.

use bytes::BufMut;

use super::error::WireError;
use super::primitives::Reader;

/// The largest boolean stream a frame can carry (the Java length is a signed short).
const MAX_BYTES: usize = i16::MAX as usize;

/// Collects booleans while a command is encoded.
#[derive(Debug, Default)]
pub(crate) struct BitWriter {
    bytes: Vec<u8>,
    bit: u8,
}

impl BitWriter {
    /// Empties it, keeping its buffer for the next command.
    pub(crate) fn clear(&mut self) {
        self.bytes.clear();
        self.bit = 0;
    }

    /// Appends one boolean.
    pub(crate) fn push(&mut self, value: bool) {
        if self.bit == 0 {
            self.bytes.push(0);
        }
        if value {
            if let Some(last) = self.bytes.last_mut() {
                *last |= 1 << self.bit;
            }
        }
        self.bit = (self.bit + 1) % 8;
    }

    /// Bytes [`Self::write_to`] will write.
    pub(crate) fn encoded_len(&self) -> usize {
        let n = self.bytes.len();
        n + match n {
            0..=63 => 1,
            64..=255 => 2,
            _ => 3,
        }
    }

    /// Writes the length and the packed bits.
    pub(crate) fn write_to(&self, dst: &mut impl BufMut) -> Result<(), WireError> {
        let n = self.bytes.len();
        match n {
            0..=63 => dst.put_u8(n as u8),
            64..=255 => {
                dst.put_u8(0xC0);
                dst.put_u8(n as u8);
            }
            _ if n <= MAX_BYTES => {
                dst.put_u8(0x80);
                dst.put_u16(n as u16);
            }
            _ => return Err(WireError::BooleanStreamTooLong(n)),
        }
        dst.put_slice(&self.bytes);
        Ok(())
    }
}

/// Reads booleans back, in the order they were written.
#[derive(Debug, Default, Clone)]
pub(crate) struct BitReader {
    bytes: Vec<u8>,
    pos: usize,
}

impl BitReader {
    /// Reads the length and the packed bits from `input`.
    pub(crate) fn read_from(input: &mut Reader<'_>) -> Result<BitReader, WireError> {
        let first = input.u8()?;
        let len = match first {
            0xC0 => usize::from(input.u8()?),
            0x80 => {
                let n = input.i16()?;
                usize::try_from(n).map_err(|_| WireError::InvalidLength {
                    what: "boolean stream length",
                    value: i64::from(n),
                })?
            }
            n => usize::from(n),
        };
        Ok(BitReader { bytes: input.take(len)?.to_vec(), pos: 0 })
    }

    /// The next boolean. Past the end it reads `false`, as the Java reader does (its buffer
    /// is zero-filled); a command never reads further than its writer wrote.
    pub(crate) fn next(&mut self) -> bool {
        let byte = self.bytes.get(self.pos / 8).copied().unwrap_or(0);
        let bit = (byte >> (self.pos % 8)) & 1 == 1;
        self.pos = self.pos.saturating_add(1);
        bit
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    fn round_trip(bits: &[bool]) -> Vec<u8> {
        let mut w = BitWriter::default();
        for &b in bits {
            w.push(b);
        }
        let mut out = Vec::new();
        w.write_to(&mut out).unwrap();
        assert_eq!(out.len(), w.encoded_len());
        let mut input = Reader::new(&out);
        let mut r = BitReader::read_from(&mut input).unwrap();
        let back: Vec<bool> = bits.iter().map(|_| r.next()).collect();
        assert_eq!(back, bits);
        assert!(input.is_empty());
        out
    }

    #[test]
    fn bits_are_packed_from_the_low_bit() {
        assert_eq!(round_trip(&[true, false, true]), vec![1, 0b101]);
        assert_eq!(round_trip(&[]), vec![0]);
        assert_eq!(round_trip(&[false; 9]), vec![2, 0, 0]);
    }

    #[test]
    fn long_streams_use_the_two_and_three_byte_lengths() {
        assert_eq!(&round_trip(&[true; 64 * 8])[..2], &[0xC0, 64]);
        assert_eq!(&round_trip(&[true; 256 * 8])[..3], &[0x80, 1, 0]);
    }

    #[test]
    fn reading_past_the_end_gives_false() {
        let data = [1u8, 0xff];
        let mut r = BitReader::read_from(&mut Reader::new(&data)).unwrap();
        for _ in 0..8 {
            assert!(r.next());
        }
        assert!(!r.next());
    }

    #[test]
    fn a_negative_long_length_is_an_error() {
        let data = [0x80u8, 0xff, 0xff];
        assert!(BitReader::read_from(&mut Reader::new(&data)).is_err());
    }
}
