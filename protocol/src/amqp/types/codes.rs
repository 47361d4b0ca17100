//! Format codes (the spec, part 1.6): the first byte of every encoded value.
//!
//! The high nibble gives the width class: 0x4 none, 0x5 one byte, 0x6 two, 0x7 four,
//! 0x8 eight, 0x9 sixteen, 0xa/0xb variable with a 1- or 4-byte size, 0xc/0xd compound with
//! a 1- or 4-byte size and count, 0xe/0xf array with a 1- or 4-byte size and count.

/// A described value follows: its descriptor, then the value.
pub const DESCRIBED: u8 = 0x00;
/// null.
pub const NULL: u8 = 0x40;
/// boolean with a byte: 0x00 false, 0x01 true.
pub const BOOLEAN: u8 = 0x56;
/// boolean true, no data.
pub const TRUE: u8 = 0x41;
/// boolean false, no data.
pub const FALSE: u8 = 0x42;
/// ubyte.
pub const UBYTE: u8 = 0x50;
/// ushort.
pub const USHORT: u8 = 0x60;
/// uint, four bytes.
pub const UINT: u8 = 0x70;
/// uint in one byte.
pub const SMALL_UINT: u8 = 0x52;
/// uint 0, no data.
pub const UINT0: u8 = 0x43;
/// ulong, eight bytes.
pub const ULONG: u8 = 0x80;
/// ulong in one byte.
pub const SMALL_ULONG: u8 = 0x53;
/// ulong 0, no data.
pub const ULONG0: u8 = 0x44;
/// byte.
pub const BYTE: u8 = 0x51;
/// short.
pub const SHORT: u8 = 0x61;
/// int, four bytes.
pub const INT: u8 = 0x71;
/// int in one signed byte.
pub const SMALL_INT: u8 = 0x54;
/// long, eight bytes.
pub const LONG: u8 = 0x81;
/// long in one signed byte.
pub const SMALL_LONG: u8 = 0x55;
/// float.
pub const FLOAT: u8 = 0x72;
/// double.
pub const DOUBLE: u8 = 0x82;
/// decimal32.
pub const DECIMAL32: u8 = 0x74;
/// decimal64.
pub const DECIMAL64: u8 = 0x84;
/// decimal128.
pub const DECIMAL128: u8 = 0x94;
/// char (UTF-32).
pub const CHAR: u8 = 0x73;
/// timestamp.
pub const TIMESTAMP: u8 = 0x83;
/// uuid.
pub const UUID: u8 = 0x98;
/// binary up to 255 bytes.
pub const VBIN8: u8 = 0xa0;
/// binary up to 2^32 - 1 bytes.
pub const VBIN32: u8 = 0xb0;
/// string up to 255 bytes.
pub const STR8: u8 = 0xa1;
/// string up to 2^32 - 1 bytes.
pub const STR32: u8 = 0xb1;
/// symbol up to 255 bytes.
pub const SYM8: u8 = 0xa3;
/// symbol up to 2^32 - 1 bytes.
pub const SYM32: u8 = 0xb3;
/// the empty list, no data.
pub const LIST0: u8 = 0x45;
/// list with a one-byte size and count.
pub const LIST8: u8 = 0xc0;
/// list with a four-byte size and count.
pub const LIST32: u8 = 0xd0;
/// map with a one-byte size and count.
pub const MAP8: u8 = 0xc1;
/// map with a four-byte size and count.
pub const MAP32: u8 = 0xd1;
/// array with a one-byte size and count.
pub const ARRAY8: u8 = 0xe0;
/// array with a four-byte size and count.
pub const ARRAY32: u8 = 0xf0;
