//! Java `DataInput`/`DataOutput` primitives: a bounds-checked [`Reader`] over a frame, and
//! Java's *modified UTF-8* (`writeUTF`/`readUTF`) both ways.
//!
//! Modified UTF-8 encodes each UTF-16 code unit on its own: U+0000 as the two bytes `C0 80`,
//! U+0001..U+007F as one byte, up to U+07FF as two, everything else (including each half of
//! a surrogate pair) as three bytes. A character outside the Basic Multilingual Plane is thus
//! six bytes, not the four of standard UTF-8.

use bytes::Bytes;

use super::error::WireError;

/// A cursor over the bytes of one frame. Every read is bounds-checked and reports
/// [`WireError::Truncated`] rather than panicking.
#[derive(Debug)]
pub(crate) struct Reader<'a> {
    data: &'a [u8],
    pos: usize,
    /// When the data is a [`Bytes`], byte fields are sliced from it instead of copied.
    backing: Option<&'a Bytes>,
}

impl<'a> Reader<'a> {
    /// A reader over `data`; byte fields are copied out.
    pub(crate) fn new(data: &'a [u8]) -> Reader<'a> {
        Reader { data, pos: 0, backing: None }
    }

    /// A reader over `bytes`; byte fields share its memory.
    pub(crate) fn over(bytes: &'a Bytes) -> Reader<'a> {
        Reader { data: bytes, pos: 0, backing: Some(bytes) }
    }

    /// Bytes consumed so far.
    pub(crate) fn position(&self) -> usize {
        self.pos
    }

    /// Bytes not yet consumed.
    pub(crate) fn remaining(&self) -> usize {
        self.data.len() - self.pos
    }

    /// Whether everything has been consumed.
    #[cfg(test)]
    pub(crate) fn is_empty(&self) -> bool {
        self.remaining() == 0
    }

    /// The next `n` bytes.
    pub(crate) fn take(&mut self, n: usize) -> Result<&'a [u8], WireError> {
        if n > self.remaining() {
            return Err(WireError::Truncated);
        }
        let slice = &self.data[self.pos..self.pos + n];
        self.pos += n;
        Ok(slice)
    }

    /// The next `n` bytes as [`Bytes`] (shared when the reader is over a `Bytes`).
    pub(crate) fn bytes(&mut self, n: usize) -> Result<Bytes, WireError> {
        let start = self.pos;
        let slice = self.take(n)?;
        Ok(match self.backing {
            Some(backing) => backing.slice(start..start + n),
            None => Bytes::copy_from_slice(slice),
        })
    }

    fn array<const N: usize>(&mut self) -> Result<[u8; N], WireError> {
        let mut out = [0u8; N];
        out.copy_from_slice(self.take(N)?);
        Ok(out)
    }

    /// One unsigned byte.
    pub(crate) fn u8(&mut self) -> Result<u8, WireError> {
        Ok(self.array::<1>()?[0])
    }

    /// Java `readBoolean`: any non-zero byte is true.
    pub(crate) fn bool(&mut self) -> Result<bool, WireError> {
        Ok(self.u8()? != 0)
    }

    /// Big-endian signed short.
    pub(crate) fn i16(&mut self) -> Result<i16, WireError> {
        Ok(i16::from_be_bytes(self.array()?))
    }

    /// Big-endian unsigned short.
    pub(crate) fn u16(&mut self) -> Result<u16, WireError> {
        Ok(u16::from_be_bytes(self.array()?))
    }

    /// Big-endian int.
    pub(crate) fn i32(&mut self) -> Result<i32, WireError> {
        Ok(i32::from_be_bytes(self.array()?))
    }

    /// Big-endian long.
    pub(crate) fn i64(&mut self) -> Result<i64, WireError> {
        Ok(i64::from_be_bytes(self.array()?))
    }

    /// An int length that must be non-negative and fit in what is left.
    pub(crate) fn length(&mut self, what: &'static str) -> Result<usize, WireError> {
        let n = self.i32()?;
        let n = usize::try_from(n)
            .map_err(|_| WireError::InvalidLength { what, value: i64::from(n) })?;
        if n > self.remaining() {
            return Err(WireError::Truncated);
        }
        Ok(n)
    }

    /// Java `readUTF`: an unsigned short length, then modified UTF-8.
    pub(crate) fn utf(&mut self) -> Result<String, WireError> {
        let len = usize::from(self.u16()?);
        decode_modified_utf8(self.take(len)?)
    }
}

/// Bytes `s` takes in modified UTF-8.
pub(crate) fn modified_utf8_len(s: &str) -> usize {
    if is_plain_utf8(s) {
        return s.len();
    }
    s.encode_utf16()
        .map(|unit| match unit {
            0x0001..=0x007F => 1,
            0x0000 | 0x0080..=0x07FF => 2,
            _ => 3,
        })
        .sum()
}

/// True if `s` reads the same in modified UTF-8 as in UTF-8: it has no U+0000 (`C0 80` in
/// modified UTF-8) and nothing beyond U+FFFF (a surrogate pair of two 3-byte sequences), so
/// its bytes can be copied as they are. Nearly every text is (a 1 KiB body encoded one
/// UTF-16 unit at a time was a visible share of a dispatch).
fn is_plain_utf8(s: &str) -> bool {
    !s.bytes().any(|b| b == 0 || b >= 0xF0)
}

/// Appends `s` in modified UTF-8 (no length prefix).
pub(crate) fn encode_modified_utf8(s: &str, out: &mut impl bytes::BufMut) {
    if is_plain_utf8(s) {
        out.put_slice(s.as_bytes());
        return;
    }
    for unit in s.encode_utf16() {
        match unit {
            0x0001..=0x007F => out.put_u8(unit as u8),
            0x0000 | 0x0080..=0x07FF => {
                out.put_u8(0xC0 | (unit >> 6) as u8);
                out.put_u8(0x80 | (unit & 0x3F) as u8);
            }
            _ => {
                out.put_u8(0xE0 | (unit >> 12) as u8);
                out.put_u8(0x80 | ((unit >> 6) & 0x3F) as u8);
                out.put_u8(0x80 | (unit & 0x3F) as u8);
            }
        }
    }
}

/// Decodes modified UTF-8 (as Java's `readUTF`), leniently: `C0 80` and raw `00` are U+0000,
/// surrogate pairs written as two 3-byte sequences are joined, standard 4-byte sequences (as
/// a non-Java client may write) are accepted, and a lone surrogate becomes U+FFFD since a
/// Rust string cannot hold it. Malformed sequences are [`WireError::InvalidUtf8`].
pub fn decode_modified_utf8(bytes: &[u8]) -> Result<String, WireError> {
    // Fast path: bytes that are valid UTF-8 decode to themselves, since the sequences where
    // modified UTF-8 differs (`C0 80`, surrogates as 3-byte sequences) are invalid UTF-8; a
    // raw `00` and 4-byte sequences are taken as they are below too.
    if let Ok(text) = std::str::from_utf8(bytes) {
        return Ok(text.to_owned());
    }
    let mut units: Vec<u16> = Vec::with_capacity(bytes.len());
    let cont = |i: usize| -> Result<u16, WireError> {
        match bytes.get(i) {
            Some(&b) if b & 0xC0 == 0x80 => Ok(u16::from(b & 0x3F)),
            _ => Err(WireError::InvalidUtf8),
        }
    };
    let mut i = 0;
    while let Some(&b) = bytes.get(i) {
        match b {
            0x00..=0x7F => {
                units.push(u16::from(b));
                i += 1;
            }
            0xC0..=0xDF => {
                units.push((u16::from(b & 0x1F) << 6) | cont(i + 1)?);
                i += 2;
            }
            0xE0..=0xEF => {
                units.push((u16::from(b & 0x0F) << 12) | (cont(i + 1)? << 6) | cont(i + 2)?);
                i += 3;
            }
            0xF0..=0xF4 => {
                let cp = (u32::from(b & 0x07) << 18)
                    | (u32::from(cont(i + 1)?) << 12)
                    | (u32::from(cont(i + 2)?) << 6)
                    | u32::from(cont(i + 3)?);
                let c = char::from_u32(cp).ok_or(WireError::InvalidUtf8)?;
                let mut pair = [0u16; 2];
                units.extend_from_slice(c.encode_utf16(&mut pair));
                i += 4;
            }
            _ => return Err(WireError::InvalidUtf8),
        }
    }
    Ok(String::from_utf16_lossy(&units))
}

#[cfg(test)]
mod tests {
    use super::*;

    fn encode(s: &str) -> Vec<u8> {
        let mut out = Vec::new();
        encode_modified_utf8(s, &mut out);
        assert_eq!(out.len(), modified_utf8_len(s));
        out
    }

    #[test]
    fn nul_is_two_bytes() {
        assert_eq!(encode("a\0b"), vec![b'a', 0xC0, 0x80, b'b']);
        assert_eq!(decode_modified_utf8(&[b'a', 0xC0, 0x80, b'b']).unwrap(), "a\0b");
        assert_eq!(decode_modified_utf8(&[0]).unwrap(), "\0");
    }

    #[test]
    fn supplementary_characters_are_two_three_byte_surrogates() {
        let bytes = encode("\u{1F600}");
        assert_eq!(bytes, vec![0xED, 0xA0, 0xBD, 0xED, 0xB8, 0x80]);
        assert_eq!(decode_modified_utf8(&bytes).unwrap(), "\u{1F600}");
    }

    #[test]
    fn standard_four_byte_utf8_is_accepted() {
        assert_eq!(decode_modified_utf8("\u{1F600}".as_bytes()).unwrap(), "\u{1F600}");
    }

    #[test]
    fn two_and_three_byte_characters_match_utf8() {
        for s in ["é", "€", "日本語", "ÿ\u{7FF}\u{800}\u{FFFF}"] {
            assert_eq!(encode(s), s.as_bytes());
            assert_eq!(decode_modified_utf8(s.as_bytes()).unwrap(), s);
        }
    }

    #[test]
    fn lone_surrogates_become_replacement_characters() {
        assert_eq!(decode_modified_utf8(&[0xED, 0xA0, 0xBD]).unwrap(), "\u{FFFD}");
    }

    #[test]
    fn malformed_sequences_are_errors() {
        for bad in [&[0x80][..], &[0xC3], &[0xE2, 0x82], &[0xE2, 0x28, 0xA1], &[0xF8, 0x80]] {
            assert_eq!(decode_modified_utf8(bad), Err(WireError::InvalidUtf8), "{bad:?}");
        }
    }

    #[test]
    fn reader_reports_truncation_not_panics() {
        let mut r = Reader::new(&[0, 5, b'a']);
        assert_eq!(r.utf(), Err(WireError::Truncated));
        let mut r = Reader::new(&[0xff, 0xff, 0xff, 0xff]);
        assert!(matches!(r.length("x"), Err(WireError::InvalidLength { .. })));
    }
}
