//! The encoder: writes [`Value`]s in their most compact encoding.
//!
//! Compact means: `true`/`false`/`uint0`/`ulong0`/`list0` when the value allows it, the
//! one-byte forms (`smalluint`, `smallulong`, `smallint`, `smalllong`) when the value fits,
//! the 8-bit size forms (`vbin8`, `str8`, `sym8`, `list8`, `map8`, `array8`) when size and
//! count fit in a byte. These are the choices Qpid Proton makes too, so our frames match
//! what the peers we test against write, except where a peer does not compact (RabbitMQ
//! writes `sym32` in arrays, Proton writes application properties as `map32`).

use bytes::{BufMut, BytesMut};

use super::codes::*;
use super::{Array, Descriptor, Kind, Value};
use crate::amqp::error::WireError;

/// Appends the encoding of `value` to `dst`.
///
/// Fails only for values that AMQP cannot carry: a size or count beyond 2^32 - 1, or an
/// array element whose type is not the array's.
pub fn encode_value(value: &Value, dst: &mut BytesMut) -> Result<(), WireError> {
    match value {
        Value::Null => dst.put_u8(NULL),
        Value::Boolean(true) => dst.put_u8(TRUE),
        Value::Boolean(false) => dst.put_u8(FALSE),
        Value::Ubyte(v) => put_code_and(dst, UBYTE, &[*v]),
        Value::Ushort(v) => put_code_and(dst, USHORT, &v.to_be_bytes()),
        Value::Uint(0) => dst.put_u8(UINT0),
        Value::Uint(v @ 1..=255) => put_code_and(dst, SMALL_UINT, &[*v as u8]),
        Value::Uint(v) => put_code_and(dst, UINT, &v.to_be_bytes()),
        Value::Ulong(0) => dst.put_u8(ULONG0),
        Value::Ulong(v @ 1..=255) => put_code_and(dst, SMALL_ULONG, &[*v as u8]),
        Value::Ulong(v) => put_code_and(dst, ULONG, &v.to_be_bytes()),
        Value::Byte(v) => put_code_and(dst, BYTE, &v.to_be_bytes()),
        Value::Short(v) => put_code_and(dst, SHORT, &v.to_be_bytes()),
        Value::Int(v @ -128..=127) => put_code_and(dst, SMALL_INT, &(*v as i8).to_be_bytes()),
        Value::Int(v) => put_code_and(dst, INT, &v.to_be_bytes()),
        Value::Long(v @ -128..=127) => put_code_and(dst, SMALL_LONG, &(*v as i8).to_be_bytes()),
        Value::Long(v) => put_code_and(dst, LONG, &v.to_be_bytes()),
        Value::Float(v) => put_code_and(dst, FLOAT, &v.to_be_bytes()),
        Value::Double(v) => put_code_and(dst, DOUBLE, &v.to_be_bytes()),
        Value::Decimal32(raw) => put_code_and(dst, DECIMAL32, raw),
        Value::Decimal64(raw) => put_code_and(dst, DECIMAL64, raw),
        Value::Decimal128(raw) => put_code_and(dst, DECIMAL128, raw),
        Value::Char(c) => put_code_and(dst, CHAR, &u32::from(*c).to_be_bytes()),
        Value::Timestamp(v) => put_code_and(dst, TIMESTAMP, &v.to_be_bytes()),
        Value::Uuid(raw) => put_code_and(dst, UUID, raw),
        Value::Binary(bytes) => put_variable(dst, VBIN8, VBIN32, bytes)?,
        Value::String(text) => put_variable(dst, STR8, STR32, text.as_bytes())?,
        Value::Symbol(symbol) => put_variable(dst, SYM8, SYM32, symbol.0.as_bytes())?,
        Value::List(elements) if elements.is_empty() => dst.put_u8(LIST0),
        Value::List(elements) => {
            put_sized(dst, Some((LIST8, LIST32)), false, elements.len(), |dst| {
                elements.iter().try_for_each(|element| encode_value(element, dst))
            })?
        }
        Value::Map(pairs) => put_map(dst, Some((MAP8, MAP32)), false, pairs)?,
        Value::Array(array) => put_array(dst, Some((ARRAY8, ARRAY32)), false, array)?,
        Value::Described(described) => {
            dst.put_u8(DESCRIBED);
            put_descriptor(dst, &described.descriptor)?;
            encode_value(&described.value, dst)?;
        }
    }
    Ok(())
}

fn put_code_and(dst: &mut BytesMut, code: u8, data: &[u8]) {
    dst.put_u8(code);
    dst.put_slice(data);
}

fn put_descriptor(dst: &mut BytesMut, descriptor: &Descriptor) -> Result<(), WireError> {
    match descriptor {
        Descriptor::Code(code) => encode_value(&Value::Ulong(*code), dst),
        Descriptor::Symbol(symbol) => put_variable(dst, SYM8, SYM32, symbol.0.as_bytes()),
    }
}

/// A length as the 4-byte field of a `*32` encoding.
fn wide_length(length: usize, what: &str) -> Result<u32, WireError> {
    u32::try_from(length).map_err(|_| {
        WireError::Unencodable(format!("{what} of {length} bytes or elements exceeds 2^32 - 1"))
    })
}

/// Binary, string or symbol: the 8-bit size form when the bytes fit, else the 32-bit one.
fn put_variable(dst: &mut BytesMut, code8: u8, code32: u8, bytes: &[u8]) -> Result<(), WireError> {
    match u8::try_from(bytes.len()) {
        Ok(len) => {
            dst.put_u8(code8);
            dst.put_u8(len);
        }
        Err(_) => {
            dst.put_u8(code32);
            dst.put_u32(wide_length(bytes.len(), "a binary, string or symbol")?);
        }
    }
    dst.put_slice(bytes);
    Ok(())
}

/// Writes a compound: an optional format code (8-bit and 32-bit forms), the size, the
/// count and what `body` writes. The size is only known once the body is written, so the
/// body goes after room for the 32-bit header and moves back when the 8-bit one suffices.
fn put_sized(
    dst: &mut BytesMut,
    codes: Option<(u8, u8)>,
    wide_only: bool,
    count: usize,
    body: impl FnOnce(&mut BytesMut) -> Result<(), WireError>,
) -> Result<(), WireError> {
    let start = dst.len();
    let code_len = usize::from(codes.is_some());
    let header_len = code_len + 8;
    dst.put_bytes(0, header_len);
    body(dst)?;
    let content_len = dst.len() - start - header_len;
    let narrow = !wide_only && content_len < 255 && count <= 255;
    if narrow {
        let mut header = Vec::with_capacity(3);
        if let Some((code8, _)) = codes {
            header.push(code8);
        }
        // The size counts the count field and the content.
        header.extend_from_slice(&[(content_len + 1) as u8, count as u8]);
        dst[start..start + header.len()].copy_from_slice(&header);
        dst.copy_within(start + header_len.., start + header.len());
        dst.truncate(dst.len() - (header_len - header.len()));
    } else {
        let size = wide_length(content_len + 4, "a compound")?;
        let count = wide_length(count, "a compound")?;
        let mut at = start;
        if let Some((_, code32)) = codes {
            dst[at] = code32;
            at += 1;
        }
        dst[at..at + 4].copy_from_slice(&size.to_be_bytes());
        dst[at + 4..at + 8].copy_from_slice(&count.to_be_bytes());
    }
    Ok(())
}

fn put_map(
    dst: &mut BytesMut,
    codes: Option<(u8, u8)>,
    wide_only: bool,
    pairs: &[(Value, Value)],
) -> Result<(), WireError> {
    put_sized(dst, codes, wide_only, pairs.len() * 2, |dst| {
        pairs.iter().try_for_each(|(key, value)| {
            encode_value(key, dst)?;
            encode_value(value, dst)
        })
    })
}

fn put_array(
    dst: &mut BytesMut,
    codes: Option<(u8, u8)>,
    wide_only: bool,
    array: &Array,
) -> Result<(), WireError> {
    let element_code = element_code(array)?;
    put_sized(dst, codes, wide_only, array.elements.len(), |dst| {
        if let Some(descriptor) = &array.descriptor {
            dst.put_u8(DESCRIBED);
            put_descriptor(dst, descriptor)?;
        }
        dst.put_u8(element_code);
        array.elements.iter().try_for_each(|element| put_element(dst, element_code, element))
    })
}

/// The one constructor that can write every element of `array`: the fixed-width code of
/// its type, and the 8-bit size form for binaries, strings and symbols that all fit it.
/// Compound elements always take the 32-bit form, whose size needs no second pass.
fn element_code(array: &Array) -> Result<u8, WireError> {
    let all_short = || {
        array.elements.iter().all(|element| match element {
            Value::Binary(bytes) => bytes.len() <= 255,
            Value::String(text) => text.len() <= 255,
            Value::Symbol(symbol) => symbol.0.len() <= 255,
            _ => true,
        })
    };
    let short_or_long = |short, long| if all_short() { short } else { long };
    Ok(match array.kind {
        Kind::Null => NULL,
        Kind::Boolean => BOOLEAN,
        Kind::Ubyte => UBYTE,
        Kind::Ushort => USHORT,
        Kind::Uint => UINT,
        Kind::Ulong => ULONG,
        Kind::Byte => BYTE,
        Kind::Short => SHORT,
        Kind::Int => INT,
        Kind::Long => LONG,
        Kind::Float => FLOAT,
        Kind::Double => DOUBLE,
        Kind::Decimal32 => DECIMAL32,
        Kind::Decimal64 => DECIMAL64,
        Kind::Decimal128 => DECIMAL128,
        Kind::Char => CHAR,
        Kind::Timestamp => TIMESTAMP,
        Kind::Uuid => UUID,
        Kind::Binary => short_or_long(VBIN8, VBIN32),
        Kind::String => short_or_long(STR8, STR32),
        Kind::Symbol => short_or_long(SYM8, SYM32),
        Kind::List => LIST32,
        Kind::Map => MAP32,
        Kind::Array => ARRAY32,
    })
}

/// Writes the data of `element` (no format code) as `code` lays it out.
fn put_element(dst: &mut BytesMut, code: u8, element: &Value) -> Result<(), WireError> {
    match (code, element) {
        (NULL, Value::Null) => {}
        (BOOLEAN, Value::Boolean(v)) => dst.put_u8(u8::from(*v)),
        (UBYTE, Value::Ubyte(v)) => dst.put_u8(*v),
        (USHORT, Value::Ushort(v)) => dst.put_u16(*v),
        (UINT, Value::Uint(v)) => dst.put_u32(*v),
        (ULONG, Value::Ulong(v)) => dst.put_u64(*v),
        (BYTE, Value::Byte(v)) => dst.put_i8(*v),
        (SHORT, Value::Short(v)) => dst.put_i16(*v),
        (INT, Value::Int(v)) => dst.put_i32(*v),
        (LONG, Value::Long(v)) => dst.put_i64(*v),
        (FLOAT, Value::Float(v)) => dst.put_f32(*v),
        (DOUBLE, Value::Double(v)) => dst.put_f64(*v),
        (DECIMAL32, Value::Decimal32(raw)) => dst.put_slice(raw),
        (DECIMAL64, Value::Decimal64(raw)) => dst.put_slice(raw),
        (DECIMAL128, Value::Decimal128(raw)) => dst.put_slice(raw),
        (CHAR, Value::Char(c)) => dst.put_u32(u32::from(*c)),
        (TIMESTAMP, Value::Timestamp(v)) => dst.put_i64(*v),
        (UUID, Value::Uuid(raw)) => dst.put_slice(raw),
        (VBIN8 | VBIN32, Value::Binary(bytes)) => put_element_bytes(dst, code == VBIN8, bytes)?,
        (STR8 | STR32, Value::String(text)) => {
            put_element_bytes(dst, code == STR8, text.as_bytes())?
        }
        (SYM8 | SYM32, Value::Symbol(symbol)) => {
            put_element_bytes(dst, code == SYM8, symbol.0.as_bytes())?
        }
        (LIST32, Value::List(elements)) => put_sized(dst, None, true, elements.len(), |dst| {
            elements.iter().try_for_each(|element| encode_value(element, dst))
        })?,
        (MAP32, Value::Map(pairs)) => put_map(dst, None, true, pairs)?,
        (ARRAY32, Value::Array(array)) => put_array(dst, None, true, array)?,
        (_, other) => {
            return Err(WireError::Unencodable(format!(
                "an array element of type {} among elements written with format code 0x{code:02x}",
                other.type_name()
            )))
        }
    }
    Ok(())
}

fn put_element_bytes(dst: &mut BytesMut, narrow: bool, bytes: &[u8]) -> Result<(), WireError> {
    if narrow {
        // element_code chose the narrow form because every element fits it.
        let len = u8::try_from(bytes.len())
            .map_err(|_| WireError::Unencodable("array element too long".into()))?;
        dst.put_u8(len);
    } else {
        dst.put_u32(wide_length(bytes.len(), "an array element")?);
    }
    dst.put_slice(bytes);
    Ok(())
}

/// The encoding of `value` in a buffer of its own.
pub fn encode_to_vec(value: &Value) -> Result<BytesMut, WireError> {
    let mut dst = BytesMut::new();
    encode_value(value, &mut dst)?;
    Ok(dst)
}

/// The number of bytes `value` encodes to.
pub fn encoded_len(value: &Value) -> Result<usize, WireError> {
    Ok(encode_to_vec(value)?.len())
}
