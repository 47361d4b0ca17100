//! Record framing: every journal record is
//!
//! ```text
//! offset 0  u32 LE  payload length
//! offset 4  u8      kind (low 7 bits, see record::Kind) | 0x80 on the last record of a unit
//! offset 5  u32 LE  CRC32C of bytes 0..5 and of the payload
//! offset 9  payload (prost)
//! ```
//!
//! A header of nine zero bytes is the end of the data in a segment (preallocated space is
//! zeros, and kind 0 is never written). The unit-end bit makes a unit of work atomic on
//! recovery: records after the last unit-end bit of the log are an incomplete unit and are
//! dropped.

use crate::record::Kind;

/// Bytes of a record header.
pub const HEADER: usize = 9;
const UNIT_END: u8 = 0x80;

/// The size of a record with a payload of `payload` bytes.
pub fn frame_len(payload: usize) -> usize {
    HEADER + payload
}

fn checksum(header: &[u8], payload: &[u8]) -> u32 {
    crc32c::crc32c_append(crc32c::crc32c(header), payload)
}

/// Appends one framed record to `buf`.
pub fn append(buf: &mut Vec<u8>, kind: Kind, unit_end: bool, payload: &[u8]) {
    let len = u32::try_from(payload.len()).unwrap_or(u32::MAX);
    let mut header = [0u8; HEADER];
    header[..4].copy_from_slice(&len.to_le_bytes());
    header[4] = kind as u8 | if unit_end { UNIT_END } else { 0 };
    let crc = checksum(&header[..5], payload);
    header[5..].copy_from_slice(&crc.to_le_bytes());
    buf.extend_from_slice(&header);
    buf.extend_from_slice(payload);
}

/// What is found at one offset of a segment.
#[derive(Debug)]
pub enum Parsed<'a> {
    /// A valid record, `len` bytes long in all.
    Record { kind: Kind, unit_end: bool, payload: &'a [u8], len: usize },
    /// Nine zero bytes, or fewer than nine bytes left: no more data here.
    End,
    /// Something that is not a valid record.
    Bad(String),
}

/// Parses the record at `at` in `data` (a whole segment, or a record read back).
pub fn parse(data: &[u8], at: usize) -> Parsed<'_> {
    let Some(header) = data.get(at..at.saturating_add(HEADER)) else {
        return if data.get(at..).is_some_and(|rest| rest.iter().any(|b| *b != 0)) {
            Parsed::Bad("a partial record header".into())
        } else {
            Parsed::End
        };
    };
    if header.iter().all(|b| *b == 0) {
        return Parsed::End;
    }
    let len = u32::from_le_bytes([header[0], header[1], header[2], header[3]]) as usize;
    let kind_byte = header[4];
    let stored = u32::from_le_bytes([header[5], header[6], header[7], header[8]]);
    let Some(kind) = Kind::from_u8(kind_byte & !UNIT_END) else {
        return Parsed::Bad(format!("unknown record kind {kind_byte:#x}"));
    };
    let start = at + HEADER;
    let Some(payload) = data.get(start..start.saturating_add(len)) else {
        return Parsed::Bad(format!(
            "a {len}-byte record runs past the end of the data ({} bytes left)",
            data.len().saturating_sub(start)
        ));
    };
    if checksum(&header[..5], payload) != stored {
        return Parsed::Bad(format!("checksum mismatch in a {len}-byte {kind:?} record"));
    }
    Parsed::Record { kind, unit_end: kind_byte & UNIT_END != 0, payload, len: HEADER + len }
}

/// Looks for the first valid record strictly after `from`: first where the header at `from`
/// says the record ends (a damaged payload), then at every byte. Used to tell a torn tail
/// (nothing valid follows) from corruption in the middle (valid records follow).
pub fn find_valid_after(data: &[u8], from: usize) -> Option<usize> {
    if let Some(header) = data.get(from..from + HEADER) {
        let len = u32::from_le_bytes([header[0], header[1], header[2], header[3]]) as usize;
        let next = from.saturating_add(HEADER).saturating_add(len);
        if next < data.len() && matches!(parse(data, next), Parsed::Record { .. }) {
            return Some(next);
        }
    }
    // Every offset with a whole header after it; a record starts with a non-zero kind byte
    // (offset 4), so runs of zeros (preallocated space) are skipped a block at a time.
    let end = data.len().saturating_sub(HEADER - 1);
    let mut at = from + 1;
    while at < end {
        let block_end = (at + ZERO_BLOCK).min(end);
        if !all_zero(&data[at + 4..block_end + 4]) {
            let found = (at..block_end).find(|&at| {
                // Cheap filters before the checksum: a known kind and a length that fits.
                let kind = data[at + 4] & !UNIT_END;
                Kind::from_u8(kind).is_some() && matches!(parse(data, at), Parsed::Record { .. })
            });
            if found.is_some() {
                return found;
            }
        }
        at = block_end;
    }
    None
}

/// Zeros are compared a block at a time (a `memcmp`, fast in debug builds too).
const ZERO_BLOCK: usize = 4096;
static ZEROS: [u8; ZERO_BLOCK] = [0; ZERO_BLOCK];

/// True if every byte of `data` is zero.
pub fn all_zero(data: &[u8]) -> bool {
    data.chunks(ZERO_BLOCK).all(|chunk| chunk == &ZEROS[..chunk.len()])
}

/// The offset just past the last non-zero byte of `data` (0 if it is all zeros).
pub fn nonzero_len(data: &[u8]) -> usize {
    let mut end = data.len();
    while end > 0 {
        let start = end.saturating_sub(ZERO_BLOCK);
        let block = &data[start..end];
        if !all_zero(block) {
            return start + block.iter().rposition(|b| *b != 0).map_or(0, |at| at + 1);
        }
        end = start;
    }
    0
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn record_round_trips_and_damage_is_caught() {
        let mut buf = Vec::new();
        append(&mut buf, Kind::Commit, true, b"hello");
        append(&mut buf, Kind::Ack, false, b"");
        let Parsed::Record { kind, unit_end, payload, len } = parse(&buf, 0) else {
            panic!("first record")
        };
        assert_eq!((kind, unit_end, payload, len), (Kind::Commit, true, &b"hello"[..], 14));
        assert!(matches!(
            parse(&buf, len),
            Parsed::Record { kind: Kind::Ack, unit_end: false, .. }
        ));
        assert!(matches!(parse(&buf, buf.len()), Parsed::End));
        let mut zeros = buf.clone();
        zeros.extend_from_slice(&[0; 20]);
        assert!(matches!(parse(&zeros, buf.len()), Parsed::End));
        let mut flipped = buf.clone();
        flipped[10] ^= 1;
        assert!(matches!(parse(&flipped, 0), Parsed::Bad(_)));
        assert_eq!(find_valid_after(&flipped, 0), Some(14), "skips the damaged record");
        assert!(matches!(parse(&buf[..12], 0), Parsed::Bad(_)), "short write");
        assert!(matches!(parse(&buf[..4], 0), Parsed::Bad(_)), "partial header");
        assert_eq!(find_valid_after(&buf[..12], 0), None);
    }

    #[test]
    fn zero_helpers_and_a_record_after_a_long_run_of_zeros() {
        assert!(all_zero(&[]));
        assert!(all_zero(&[0; 10_000]));
        let mut data = vec![0u8; 3 * ZERO_BLOCK + 17];
        assert_eq!(nonzero_len(&data), 0);
        data[5] = 1;
        assert!(!all_zero(&data));
        assert_eq!(nonzero_len(&data), 6);
        data[5] = 0;
        // A damaged header, zeros for several blocks, then a valid record.
        data[0] = 0xee;
        let mut record = Vec::new();
        append(&mut record, Kind::Commit, true, b"after");
        let at = 2 * ZERO_BLOCK + 3;
        data[at..at + record.len()].copy_from_slice(&record);
        assert_eq!(find_valid_after(&data, 0), Some(at));
        assert_eq!(nonzero_len(&data), at + record.len());
        // A record whose kind byte is the first byte of a block.
        let mut data = vec![0u8; 2 * ZERO_BLOCK];
        let at = ZERO_BLOCK - 4;
        data[at..at + record.len()].copy_from_slice(&record);
        assert_eq!(find_valid_after(&data, 0), Some(at));
    }
}
