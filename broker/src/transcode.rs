//! Map and stream bodies between OpenWire's and AMQP's encodings.
//!
//! A message keeps the body its producer sent, in that protocol's encoding
//! ([`store::Message::body_encoding`]: `"openwire"` or `"amqp"`), so that a consumer of the
//! same protocol gets the bytes untouched and nothing is decoded on the common path. Only a
//! consumer of the other protocol pays for a decode and an encode here, as ActiveMQ's
//! AMQP-JMS transformers do:
//!
//! - a JMS MapMessage is an `amqp-value` map with string keys, and back;
//! - a JMS StreamMessage is an `amqp-sequence` (ActiveMQ's outbound form; Qpid JMS sends an
//!   `amqp-value` list, which the AMQP adapter stores as a list, and both read as a stream);
//! - values convert as JMS allows them: AMQP's unsigned integers widen to the next signed
//!   type (a `ulong` past `i64::MAX` becomes its decimal text), symbols, UUIDs and decimals
//!   become strings, timestamps longs, arrays lists; a JMS `char` outside the Basic
//!   Multilingual Plane cannot exist, one from AMQP becomes a string.

use bytes::Bytes;
use protocol::amqp::{Decoder, Value};
use protocol::openwire::{decode_stream, MapLimits, PrimitiveMap, PrimitiveValue};

/// `body_encoding` of map, stream and object bodies that hold an encoded AMQP value.
pub(crate) const AMQP_ENCODING: &str = "amqp";

/// Why a body could not be transcoded (it is then delivered as bytes, with a warning).
#[derive(Debug, thiserror::Error)]
pub(crate) enum TranscodeError {
    #[error("the AMQP body does not decode: {0}")]
    Amqp(#[from] protocol::amqp::WireError),
    #[error("the OpenWire body does not decode: {0}")]
    OpenWire(#[from] protocol::openwire::WireError),
    #[error("an AMQP {0} body is not a JMS {1} body")]
    Shape(&'static str, &'static str),
}

/// Nesting that an AMQP body may have when it is decoded for transcoding: the OpenWire
/// decoder's bound (Java's default), so that both directions refuse the same bodies.
const MAX_DEPTH: usize = 127;

fn decode_amqp(body: &Bytes) -> Result<Value, TranscodeError> {
    Ok(Decoder::new(body, MAX_DEPTH).read_value()?)
}

/// An AMQP-encoded map body (an encoded `map`) as an OpenWire map.
pub(crate) fn amqp_map_to_openwire(body: &Bytes) -> Result<PrimitiveMap, TranscodeError> {
    match decode_amqp(body)? {
        Value::Map(pairs) => Ok(primitive_map(pairs)),
        other => Err(TranscodeError::Shape(other.type_name(), "map")),
    }
}

/// An AMQP-encoded stream body (an encoded `list`) as OpenWire stream values.
pub(crate) fn amqp_stream_to_openwire(body: &Bytes) -> Result<Vec<PrimitiveValue>, TranscodeError> {
    match decode_amqp(body)? {
        Value::List(values) => Ok(values.into_iter().map(primitive).collect()),
        Value::Array(array) => Ok(array.elements.into_iter().map(primitive).collect()),
        other => Err(TranscodeError::Shape(other.type_name(), "stream")),
    }
}

/// An OpenWire map body as an AMQP map value (string keys).
pub(crate) fn openwire_map_to_amqp(body: &Bytes) -> Result<Value, TranscodeError> {
    Ok(amqp_map(&PrimitiveMap::decode(body, &MapLimits::MESSAGE)?))
}

/// An OpenWire stream body as the values of an AMQP sequence.
pub(crate) fn openwire_stream_to_amqp(body: &Bytes) -> Result<Vec<Value>, TranscodeError> {
    Ok(decode_stream(body)?.iter().map(amqp_value).collect())
}

/// An AMQP value encoded, as the AMQP adapter stores a map or list body.
#[cfg(test)]
pub(crate) fn encode_amqp(value: &Value) -> Bytes {
    let mut out = bytes::BytesMut::new();
    let _ = protocol::amqp::encode_value(value, &mut out);
    out.freeze()
}

fn primitive_map(pairs: Vec<(Value, Value)>) -> PrimitiveMap {
    let mut map = PrimitiveMap::new();
    for (key, value) in pairs {
        // JMS map names are strings; another key type keeps its text.
        let key = match key {
            Value::String(s) => s,
            Value::Symbol(s) => s.0,
            other => match primitive(other) {
                PrimitiveValue::String(s) => s,
                other => format!("{other:?}"),
            },
        };
        map.insert(key, primitive(value));
    }
    map
}

fn primitive(value: Value) -> PrimitiveValue {
    match value {
        Value::Null => PrimitiveValue::Null,
        Value::Boolean(v) => PrimitiveValue::Boolean(v),
        Value::Byte(v) => PrimitiveValue::Byte(v),
        Value::Short(v) => PrimitiveValue::Short(v),
        Value::Int(v) => PrimitiveValue::Int(v),
        Value::Long(v) | Value::Timestamp(v) => PrimitiveValue::Long(v),
        Value::Ubyte(v) => PrimitiveValue::Short(i16::from(v)),
        Value::Ushort(v) => PrimitiveValue::Int(i32::from(v)),
        Value::Uint(v) => PrimitiveValue::Long(i64::from(v)),
        Value::Ulong(v) => match i64::try_from(v) {
            Ok(v) => PrimitiveValue::Long(v),
            Err(_) => PrimitiveValue::String(v.to_string()),
        },
        Value::Float(v) => PrimitiveValue::Float(v),
        Value::Double(v) => PrimitiveValue::Double(v),
        Value::Char(c) => match u16::try_from(u32::from(c)) {
            Ok(unit) => PrimitiveValue::Char(unit),
            Err(_) => PrimitiveValue::String(c.to_string()),
        },
        Value::Binary(b) => PrimitiveValue::Bytes(b),
        Value::String(s) => PrimitiveValue::String(s),
        Value::Symbol(s) => PrimitiveValue::String(s.0),
        Value::Uuid(u) => PrimitiveValue::String(uuid_text(&u)),
        Value::List(values) => PrimitiveValue::List(values.into_iter().map(primitive).collect()),
        Value::Array(array) => {
            PrimitiveValue::List(array.elements.into_iter().map(primitive).collect())
        }
        Value::Map(pairs) => PrimitiveValue::Map(primitive_map(pairs)),
        // An application's described type has no JMS form: its underlying value is the
        // closest thing a JMS consumer can read.
        Value::Described(described) => primitive(described.value),
        decimal @ (Value::Decimal32(_) | Value::Decimal64(_) | Value::Decimal128(_)) => {
            PrimitiveValue::String(format!("{decimal:?}"))
        }
    }
}

fn amqp_map(map: &PrimitiveMap) -> Value {
    Value::Map(map.iter().map(|(k, v)| (Value::String(k.to_owned()), amqp_value(v))).collect())
}

fn amqp_value(value: &PrimitiveValue) -> Value {
    match value {
        PrimitiveValue::Null => Value::Null,
        PrimitiveValue::Boolean(v) => Value::Boolean(*v),
        PrimitiveValue::Byte(v) => Value::Byte(*v),
        // A lone surrogate is no Unicode scalar value: AMQP's char cannot carry it.
        PrimitiveValue::Char(unit) => {
            char::from_u32(u32::from(*unit)).map_or(Value::Ushort(*unit), Value::Char)
        }
        PrimitiveValue::Short(v) => Value::Short(*v),
        PrimitiveValue::Int(v) => Value::Int(*v),
        PrimitiveValue::Long(v) => Value::Long(*v),
        PrimitiveValue::Float(v) => Value::Float(*v),
        PrimitiveValue::Double(v) => Value::Double(*v),
        PrimitiveValue::String(s) => Value::String(s.clone()),
        PrimitiveValue::Bytes(b) => Value::Binary(b.clone()),
        PrimitiveValue::Map(map) => amqp_map(map),
        PrimitiveValue::List(values) => Value::List(values.iter().map(amqp_value).collect()),
    }
}

fn uuid_text(bytes: &[u8; 16]) -> String {
    let hex: String = bytes.iter().map(|b| format!("{b:02x}")).collect();
    format!("{}-{}-{}-{}-{}", &hex[..8], &hex[8..12], &hex[12..16], &hex[16..20], &hex[20..])
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn maps_cross_both_ways_with_their_types() {
        let amqp = Value::Map(vec![
            (Value::from("s"), Value::from("text")),
            (Value::from("i"), Value::Int(7)),
            (Value::from("l"), Value::Long(1 << 40)),
            (Value::from("b"), Value::Boolean(true)),
            (Value::from("d"), Value::Double(2.5)),
            (Value::from("bin"), Value::Binary(Bytes::from_static(b"\x00\x01"))),
            (Value::from("u"), Value::Ubyte(200)),
        ]);
        let map = amqp_map_to_openwire(&encode_amqp(&amqp)).unwrap();
        assert_eq!(map.get("i").and_then(PrimitiveValue::as_i64), Some(7));
        assert_eq!(map.get("u").and_then(PrimitiveValue::as_i64), Some(200));
        assert!(matches!(map.get("u"), Some(PrimitiveValue::Short(200))), "ubyte widens");
        let back = openwire_map_to_amqp(&map.to_bytes().unwrap()).unwrap();
        let Value::Map(pairs) = back else { panic!("not a map") };
        assert_eq!(pairs.len(), 7);
        assert_eq!(pairs[0], (Value::from("s"), Value::from("text")));
        assert_eq!(pairs[6], (Value::from("u"), Value::Short(200)));
    }

    #[test]
    fn streams_cross_both_ways_in_order() {
        let amqp = Value::List(vec![Value::Int(1), Value::from("two"), Value::Char('3')]);
        let values = amqp_stream_to_openwire(&encode_amqp(&amqp)).unwrap();
        assert_eq!(values.len(), 3);
        let mut encoded = Vec::new();
        for value in &values {
            value.encode(&mut encoded).unwrap();
        }
        let back = openwire_stream_to_amqp(&Bytes::from(encoded)).unwrap();
        assert_eq!(back, vec![Value::Int(1), Value::from("two"), Value::Char('3')]);
    }

    #[test]
    fn a_body_of_another_shape_is_refused() {
        assert!(amqp_map_to_openwire(&encode_amqp(&Value::Int(1))).is_err());
        assert!(amqp_stream_to_openwire(&Bytes::from_static(b"\xff")).is_err());
    }
}
