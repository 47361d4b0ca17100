//! The primitive map and list encoding of ActiveMQ's `MarshallingSupport`: message properties,
//! MapMessage bodies, WireFormatInfo options and StreamMessage elements are all typed values
//! in this format.
//!
//! A map is an int count (`-1` for null) and, per entry, a `writeUTF` key and a typed value: a
//! type byte (see [`primitive_type`]) and the value in Java `DataOutput` form. Strings shorter
//! than 8191 UTF-16 units are `STRING` (`writeUTF`), longer ones `BIG_STRING` (int length and
//! modified UTF-8). [`PrimitiveMap`] keeps entries in wire order, so a decoded map encodes back
//! to the same bytes.

use bytes::{BufMut, Bytes};

use super::error::WireError;
use super::primitives::{encode_modified_utf8, modified_utf8_len, Reader};

/// The type bytes of primitive values (`MarshallingSupport` constants).
pub mod primitive_type {
    /// `null`.
    pub const NULL: u8 = 0;
    /// `boolean`: one byte.
    pub const BOOLEAN: u8 = 1;
    /// `byte`.
    pub const BYTE: u8 = 2;
    /// `char`: a UTF-16 code unit, two bytes.
    pub const CHAR: u8 = 3;
    /// `short`.
    pub const SHORT: u8 = 4;
    /// `int`.
    pub const INTEGER: u8 = 5;
    /// `long`.
    pub const LONG: u8 = 6;
    /// `double`.
    pub const DOUBLE: u8 = 7;
    /// `float`.
    pub const FLOAT: u8 = 8;
    /// A string of fewer than 8191 UTF-16 units: `writeUTF`.
    pub const STRING: u8 = 9;
    /// `byte[]`: int length and bytes.
    pub const BYTE_ARRAY: u8 = 10;
    /// A nested map.
    pub const MAP: u8 = 11;
    /// A nested list: int count and typed values.
    pub const LIST: u8 = 12;
    /// A longer string: int length and modified UTF-8.
    pub const BIG_STRING: u8 = 13;
}

/// Strings with this many UTF-16 units or more are written as `BIG_STRING`.
const BIG_STRING_UNITS: usize = (i16::MAX / 4) as usize;

/// One typed value of a primitive map, list or stream message.
#[derive(Debug, Clone)]
pub enum PrimitiveValue {
    /// Java `null`.
    Null,
    /// `boolean`.
    Boolean(bool),
    /// `byte`.
    Byte(i8),
    /// `char` (a UTF-16 code unit, as Java has it).
    Char(u16),
    /// `short`.
    Short(i16),
    /// `int`.
    Int(i32),
    /// `long`.
    Long(i64),
    /// `float`.
    Float(f32),
    /// `double`.
    Double(f64),
    /// `String` (either string encoding).
    String(String),
    /// `byte[]`.
    Bytes(Bytes),
    /// A nested map.
    Map(PrimitiveMap),
    /// A nested list.
    List(Vec<PrimitiveValue>),
}

impl PartialEq for PrimitiveValue {
    /// Floats compare by bit pattern, so a value equals itself even when it is NaN.
    fn eq(&self, other: &Self) -> bool {
        use PrimitiveValue as V;
        match (self, other) {
            (V::Null, V::Null) => true,
            (V::Boolean(a), V::Boolean(b)) => a == b,
            (V::Byte(a), V::Byte(b)) => a == b,
            (V::Char(a), V::Char(b)) => a == b,
            (V::Short(a), V::Short(b)) => a == b,
            (V::Int(a), V::Int(b)) => a == b,
            (V::Long(a), V::Long(b)) => a == b,
            (V::Float(a), V::Float(b)) => a.to_bits() == b.to_bits(),
            (V::Double(a), V::Double(b)) => a.to_bits() == b.to_bits(),
            (V::String(a), V::String(b)) => a == b,
            (V::Bytes(a), V::Bytes(b)) => a == b,
            (V::Map(a), V::Map(b)) => a == b,
            (V::List(a), V::List(b)) => a == b,
            _ => false,
        }
    }
}

impl Eq for PrimitiveValue {}

impl std::hash::Hash for PrimitiveValue {
    fn hash<H: std::hash::Hasher>(&self, state: &mut H) {
        use PrimitiveValue as V;
        std::mem::discriminant(self).hash(state);
        match self {
            V::Null => {}
            V::Boolean(v) => v.hash(state),
            V::Byte(v) => v.hash(state),
            V::Char(v) => v.hash(state),
            V::Short(v) => v.hash(state),
            V::Int(v) => v.hash(state),
            V::Long(v) => v.hash(state),
            V::Float(v) => v.to_bits().hash(state),
            V::Double(v) => v.to_bits().hash(state),
            V::String(v) => v.hash(state),
            V::Bytes(v) => v.hash(state),
            V::Map(v) => v.hash(state),
            V::List(v) => v.hash(state),
        }
    }
}

impl From<bool> for PrimitiveValue {
    fn from(v: bool) -> Self {
        PrimitiveValue::Boolean(v)
    }
}
impl From<i32> for PrimitiveValue {
    fn from(v: i32) -> Self {
        PrimitiveValue::Int(v)
    }
}
impl From<i64> for PrimitiveValue {
    fn from(v: i64) -> Self {
        PrimitiveValue::Long(v)
    }
}
impl From<&str> for PrimitiveValue {
    fn from(v: &str) -> Self {
        PrimitiveValue::String(v.to_owned())
    }
}
impl From<String> for PrimitiveValue {
    fn from(v: String) -> Self {
        PrimitiveValue::String(v)
    }
}

impl PrimitiveValue {
    /// The string, if this is one.
    pub fn as_str(&self) -> Option<&str> {
        match self {
            PrimitiveValue::String(s) => Some(s),
            _ => None,
        }
    }

    /// The value as a Java `long` if it is an integral number.
    pub fn as_i64(&self) -> Option<i64> {
        match *self {
            PrimitiveValue::Byte(v) => Some(i64::from(v)),
            PrimitiveValue::Short(v) => Some(i64::from(v)),
            PrimitiveValue::Int(v) => Some(i64::from(v)),
            PrimitiveValue::Long(v) => Some(v),
            _ => None,
        }
    }

    /// The boolean, if this is one.
    pub fn as_bool(&self) -> Option<bool> {
        match *self {
            PrimitiveValue::Boolean(v) => Some(v),
            _ => None,
        }
    }

    /// Appends the type byte and the value.
    pub fn encode(&self, out: &mut impl BufMut) -> Result<(), WireError> {
        use primitive_type as t;
        match self {
            PrimitiveValue::Null => out.put_u8(t::NULL),
            PrimitiveValue::Boolean(v) => {
                out.put_u8(t::BOOLEAN);
                out.put_u8(u8::from(*v));
            }
            PrimitiveValue::Byte(v) => {
                out.put_u8(t::BYTE);
                out.put_i8(*v);
            }
            PrimitiveValue::Char(v) => {
                out.put_u8(t::CHAR);
                out.put_u16(*v);
            }
            PrimitiveValue::Short(v) => {
                out.put_u8(t::SHORT);
                out.put_i16(*v);
            }
            PrimitiveValue::Int(v) => {
                out.put_u8(t::INTEGER);
                out.put_i32(*v);
            }
            PrimitiveValue::Long(v) => {
                out.put_u8(t::LONG);
                out.put_i64(*v);
            }
            PrimitiveValue::Float(v) => {
                out.put_u8(t::FLOAT);
                out.put_f32(*v);
            }
            PrimitiveValue::Double(v) => {
                out.put_u8(t::DOUBLE);
                out.put_f64(*v);
            }
            PrimitiveValue::String(s) => {
                if s.encode_utf16().count() < BIG_STRING_UNITS {
                    out.put_u8(t::STRING);
                    put_utf(s, out)?;
                } else {
                    out.put_u8(t::BIG_STRING);
                    put_utf8_int(s, out)?;
                }
            }
            PrimitiveValue::Bytes(b) => {
                out.put_u8(t::BYTE_ARRAY);
                out.put_i32(int_len(b.len())?);
                out.put_slice(b);
            }
            PrimitiveValue::Map(m) => {
                out.put_u8(t::MAP);
                m.encode(out)?;
            }
            PrimitiveValue::List(l) => {
                out.put_u8(t::LIST);
                out.put_i32(int_len(l.len())?);
                for v in l {
                    v.encode(out)?;
                }
            }
        }
        Ok(())
    }

    /// Reads one typed value from the front of `input` (as a StreamMessage element, say);
    /// returns it and the bytes it took.
    pub fn decode(input: &[u8], limits: &MapLimits) -> Result<(PrimitiveValue, usize), WireError> {
        let mut r = Reader::new(input);
        let v = read_value(&mut r, limits, 0)?;
        Ok((v, r.position()))
    }
}

/// Java `writeUTF`: an unsigned short length and modified UTF-8.
pub(crate) fn put_utf(s: &str, out: &mut impl BufMut) -> Result<(), WireError> {
    let len = modified_utf8_len(s);
    if len > usize::from(u16::MAX) {
        return Err(WireError::StringTooLong { length: len, max: usize::from(u16::MAX) });
    }
    out.put_u16(len as u16);
    encode_modified_utf8(s, out);
    Ok(())
}

/// `MarshallingSupport.writeUTF8`: an int length and modified UTF-8.
pub(crate) fn put_utf8_int(s: &str, out: &mut impl BufMut) -> Result<(), WireError> {
    out.put_i32(int_len(modified_utf8_len(s))?);
    encode_modified_utf8(s, out);
    Ok(())
}

/// A length as a Java int.
pub(crate) fn int_len(n: usize) -> Result<i32, WireError> {
    i32::try_from(n).map_err(|_| WireError::Unencodable(format!("length {n} exceeds a Java int")))
}

/// Bounds on decoding a primitive map, as the Java broker applies them.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub struct MapLimits {
    /// Most entries in one map.
    pub max_entries: usize,
    /// Largest string or byte array value (and key), in bytes.
    pub max_value_bytes: usize,
    /// Deepest nesting of maps and lists (0: none).
    pub max_depth: usize,
}

impl MapLimits {
    /// Message properties and map bodies: no limits but the frame (and 127 levels of
    /// nesting, Java's default, which also bounds recursion).
    pub const MESSAGE: MapLimits =
        MapLimits { max_entries: usize::MAX, max_value_bytes: usize::MAX, max_depth: 127 };
    /// WireFormatInfo options: at most 64 entries, 512-byte values, no nesting.
    pub const WIRE_FORMAT_INFO: MapLimits =
        MapLimits { max_entries: 64, max_value_bytes: 512, max_depth: 0 };
}

/// A map of typed values that keeps its entries in insertion (wire) order.
#[derive(Debug, Clone, Default, PartialEq, Eq, Hash)]
pub struct PrimitiveMap {
    entries: Vec<(String, PrimitiveValue)>,
}

impl PrimitiveMap {
    /// An empty map.
    pub fn new() -> PrimitiveMap {
        PrimitiveMap::default()
    }

    /// The value of `key`.
    pub fn get(&self, key: &str) -> Option<&PrimitiveValue> {
        self.entries.iter().find(|(k, _)| k == key).map(|(_, v)| v)
    }

    /// Sets `key`, replacing its value in place or appending it.
    pub fn insert(&mut self, key: impl Into<String>, value: impl Into<PrimitiveValue>) {
        let key = key.into();
        let value = value.into();
        match self.entries.iter_mut().find(|(k, _)| *k == key) {
            Some(entry) => entry.1 = value,
            None => self.entries.push((key, value)),
        }
    }

    /// Removes `key`, returning its value.
    pub fn remove(&mut self, key: &str) -> Option<PrimitiveValue> {
        let i = self.entries.iter().position(|(k, _)| k == key)?;
        Some(self.entries.remove(i).1)
    }

    /// Entries in order.
    pub fn iter(&self) -> impl Iterator<Item = (&str, &PrimitiveValue)> {
        self.entries.iter().map(|(k, v)| (k.as_str(), v))
    }

    /// Number of entries.
    pub fn len(&self) -> usize {
        self.entries.len()
    }

    /// Whether the map has no entries.
    pub fn is_empty(&self) -> bool {
        self.entries.is_empty()
    }

    /// Appends the map: count, then key and typed value per entry.
    pub fn encode(&self, out: &mut impl BufMut) -> Result<(), WireError> {
        out.put_i32(int_len(self.entries.len())?);
        for (k, v) in &self.entries {
            put_utf(k, out)?;
            v.encode(out)?;
        }
        Ok(())
    }

    /// The encoding of a map with these entries (distinct keys), written as they come: what
    /// `to_bytes` writes for a map built from them, without building it.
    pub fn encode_entries<'a>(
        entries: impl IntoIterator<Item = (&'a str, PrimitiveValue)>,
    ) -> Result<Bytes, WireError> {
        let mut out = Vec::with_capacity(64);
        out.put_i32(0);
        let mut count = 0usize;
        for (key, value) in entries {
            put_utf(key, &mut out)?;
            value.encode(&mut out)?;
            count += 1;
        }
        out[..4].copy_from_slice(&int_len(count)?.to_be_bytes());
        Ok(out.into())
    }

    /// The encoded map as bytes.
    pub fn to_bytes(&self) -> Result<Bytes, WireError> {
        let mut out = Vec::new();
        self.encode(&mut out)?;
        Ok(out.into())
    }

    /// Decodes a whole buffer holding one map (a null map, count `-1`, decodes empty).
    pub fn decode(input: &[u8], limits: &MapLimits) -> Result<PrimitiveMap, WireError> {
        let mut r = Reader::new(input);
        Ok(read_map(&mut r, limits, 0)?.unwrap_or_default())
    }
}

impl FromIterator<(String, PrimitiveValue)> for PrimitiveMap {
    fn from_iter<I: IntoIterator<Item = (String, PrimitiveValue)>>(iter: I) -> Self {
        let mut map = PrimitiveMap::new();
        for (k, v) in iter {
            map.insert(k, v);
        }
        map
    }
}

fn limit(what: &str, value: usize, max: usize) -> Result<(), WireError> {
    if value > max {
        return Err(WireError::MapLimit(format!("{what} {value} exceeds the limit of {max}")));
    }
    Ok(())
}

fn read_map(
    r: &mut Reader<'_>,
    limits: &MapLimits,
    depth: usize,
) -> Result<Option<PrimitiveMap>, WireError> {
    limit("nesting depth", depth, limits.max_depth)?;
    let count = r.i32()?;
    if count < 0 {
        return Ok(None);
    }
    let count = count as usize;
    limit("entry count", count, limits.max_entries)?;
    if count > r.remaining() {
        return Err(WireError::Truncated);
    }
    let mut entries = Vec::with_capacity(count.min(128));
    for _ in 0..count {
        let len = usize::from(r.u16()?);
        limit("key length", len, limits.max_value_bytes)?;
        let key = super::primitives::decode_modified_utf8(r.take(len)?)?;
        let value = read_value(r, limits, depth)?;
        entries.push((key, value));
    }
    Ok(Some(PrimitiveMap { entries }))
}

fn read_value(
    r: &mut Reader<'_>,
    limits: &MapLimits,
    depth: usize,
) -> Result<PrimitiveValue, WireError> {
    use primitive_type as t;
    Ok(match r.u8()? {
        t::NULL => PrimitiveValue::Null,
        t::BOOLEAN => PrimitiveValue::Boolean(r.bool()?),
        t::BYTE => PrimitiveValue::Byte(r.u8()? as i8),
        t::CHAR => PrimitiveValue::Char(r.u16()?),
        t::SHORT => PrimitiveValue::Short(r.i16()?),
        t::INTEGER => PrimitiveValue::Int(r.i32()?),
        t::LONG => PrimitiveValue::Long(r.i64()?),
        t::FLOAT => PrimitiveValue::Float(f32::from_bits(r.i32()? as u32)),
        t::DOUBLE => PrimitiveValue::Double(f64::from_bits(r.i64()? as u64)),
        t::STRING => {
            let len = usize::from(r.u16()?);
            limit("string length", len, limits.max_value_bytes)?;
            PrimitiveValue::String(super::primitives::decode_modified_utf8(r.take(len)?)?)
        }
        t::BIG_STRING => {
            let len = r.length("string length")?;
            limit("string length", len, limits.max_value_bytes)?;
            PrimitiveValue::String(super::primitives::decode_modified_utf8(r.take(len)?)?)
        }
        t::BYTE_ARRAY => {
            let len = r.length("byte array length")?;
            limit("byte array length", len, limits.max_value_bytes)?;
            PrimitiveValue::Bytes(r.bytes(len)?)
        }
        t::MAP => match read_map(r, limits, depth + 1)? {
            Some(m) => PrimitiveValue::Map(m),
            None => PrimitiveValue::Null,
        },
        t::LIST => {
            limit("nesting depth", depth + 1, limits.max_depth)?;
            let count = r.length("list length")?;
            let mut list = Vec::with_capacity(count.min(128));
            for _ in 0..count {
                list.push(read_value(r, limits, depth + 1)?);
            }
            PrimitiveValue::List(list)
        }
        other => return Err(WireError::UnknownPrimitiveType(other)),
    })
}

#[cfg(test)]
mod tests {
    use super::*;

    fn sample() -> PrimitiveMap {
        let mut inner = PrimitiveMap::new();
        inner.insert("deep", PrimitiveValue::Char(0x20AC));
        let mut m = PrimitiveMap::new();
        m.insert("null", PrimitiveValue::Null);
        m.insert("bool", true);
        m.insert("byte", PrimitiveValue::Byte(-3));
        m.insert("char", PrimitiveValue::Char(u16::from(b'x')));
        m.insert("short", PrimitiveValue::Short(-300));
        m.insert("int", 42);
        m.insert("long", 1i64 << 40);
        m.insert("float", PrimitiveValue::Float(0.5));
        m.insert("double", PrimitiveValue::Double(1.5));
        m.insert("string", "h\u{e9}llo\0\u{1F600}");
        m.insert("big", "x".repeat(9000));
        m.insert("bytes", PrimitiveValue::Bytes(Bytes::from_static(&[1, 2, 255])));
        m.insert("map", PrimitiveValue::Map(inner));
        m.insert("list", PrimitiveValue::List(vec![1.into(), "two".into(), PrimitiveValue::Null]));
        m
    }

    #[test]
    fn entries_encode_as_the_map_built_from_them() {
        let entries = [
            ("n", PrimitiveValue::Int(5)),
            ("s", PrimitiveValue::String("héllo".into())),
            ("t", PrimitiveValue::Long(-1)),
        ];
        let map: PrimitiveMap = entries.iter().map(|(k, v)| (k.to_string(), v.clone())).collect();
        let encoded = PrimitiveMap::encode_entries(entries.iter().map(|(k, v)| (*k, v.clone())));
        assert_eq!(encoded, map.to_bytes());
        assert_eq!(PrimitiveMap::encode_entries([]), PrimitiveMap::new().to_bytes());
    }

    #[test]
    fn every_type_round_trips_in_order() {
        let m = sample();
        let bytes = m.to_bytes().unwrap();
        let back = PrimitiveMap::decode(&bytes, &MapLimits::MESSAGE).unwrap();
        assert_eq!(back, m);
        assert_eq!(back.to_bytes().unwrap(), bytes);
        let keys: Vec<&str> = back.iter().map(|(k, _)| k).collect();
        assert_eq!(keys[..3], ["null", "bool", "byte"]);
    }

    #[test]
    fn long_strings_use_big_string() {
        let mut out = Vec::new();
        PrimitiveValue::from("x".repeat(8191).as_str()).encode(&mut out).unwrap();
        assert_eq!(out[0], primitive_type::BIG_STRING);
        assert_eq!(&out[1..5], &8191i32.to_be_bytes());
        out.clear();
        PrimitiveValue::from("x".repeat(8190).as_str()).encode(&mut out).unwrap();
        assert_eq!(out[0], primitive_type::STRING);
    }

    #[test]
    fn known_java_bytes_decode() {
        // {"count": int 3} as the Java client writes it.
        let bytes = [0, 0, 0, 1, 0, 5, b'c', b'o', b'u', b'n', b't', 5, 0, 0, 0, 3];
        let m = PrimitiveMap::decode(&bytes, &MapLimits::MESSAGE).unwrap();
        assert_eq!(m.get("count"), Some(&PrimitiveValue::Int(3)));
    }

    #[test]
    fn wire_format_limits_reject_nesting_and_big_values() {
        let mut m = PrimitiveMap::new();
        m.insert("m", PrimitiveValue::Map(PrimitiveMap::new()));
        let bytes = m.to_bytes().unwrap();
        assert!(matches!(
            PrimitiveMap::decode(&bytes, &MapLimits::WIRE_FORMAT_INFO),
            Err(WireError::MapLimit(_))
        ));
        let mut m = PrimitiveMap::new();
        m.insert("s", "y".repeat(600));
        let bytes = m.to_bytes().unwrap();
        assert!(PrimitiveMap::decode(&bytes, &MapLimits::WIRE_FORMAT_INFO).is_err());
    }

    #[test]
    fn huge_counts_and_unknown_types_are_errors_not_allocations() {
        let bytes = [0x7f, 0xff, 0xff, 0xff];
        assert_eq!(PrimitiveMap::decode(&bytes, &MapLimits::MESSAGE), Err(WireError::Truncated));
        let bytes = [0, 0, 0, 1, 0, 1, b'k', 99];
        assert_eq!(
            PrimitiveMap::decode(&bytes, &MapLimits::MESSAGE),
            Err(WireError::UnknownPrimitiveType(99))
        );
    }
}
