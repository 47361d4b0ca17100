//! [`Decoder`]: reads [`Value`]s from a frame body that has fully arrived.
//!
//! The input is always a whole frame (the codec buffers a frame before decoding it, and
//! refuses frames above the maximum frame size before buffering them), so a value that
//! ends early is an error, not a reason to wait. Hostile input is the normal case here:
//! every declared size is checked against the bytes that are really there, every count
//! against what those bytes could hold, before anything is allocated, and nesting is
//! bounded so that a tower of lists cannot exhaust the stack.

use bytes::Bytes;

use super::codes::*;
use super::{Array, Descriptor, Kind, Symbol, Value};
use crate::amqp::error::WireError;

/// Reads values from `input` one after another, each with its own format code.
#[derive(Debug)]
pub struct Decoder<'a> {
    input: &'a Bytes,
    pos: usize,
    depth: usize,
    max_depth: usize,
    /// Array elements without data (`true`, `uint0`, `list0`...) still allowed: they cost no
    /// bytes on the wire, so all arrays of one input together may hold at most as many as the
    /// input has bytes. A bound per array let each of many small arrays claim the whole
    /// input's length: quadratic in the input.
    zero_width_left: usize,
}

/// Decodes the single value that fills `input` (trailing bytes are an error).
pub fn decode_value(input: &Bytes, max_depth: usize) -> Result<Value, WireError> {
    let mut decoder = Decoder::new(input, max_depth);
    let value = decoder.read_value()?;
    decoder.expect_end("value")?;
    Ok(value)
}

/// How an array element's data is laid out, from its constructor's format code.
#[derive(Debug, Clone, Copy)]
struct ElementLayout {
    code: u8,
    kind: Kind,
    /// The fewest bytes one element takes (0 for the codes with no data).
    min_width: usize,
}

impl<'a> Decoder<'a> {
    /// A decoder at the start of `input`, allowing values nested `max_depth` levels deep.
    pub fn new(input: &'a Bytes, max_depth: usize) -> Decoder<'a> {
        Decoder { input, pos: 0, depth: 0, max_depth, zero_width_left: input.len() }
    }

    /// Bytes not yet read.
    pub fn remaining(&self) -> usize {
        self.input.len() - self.pos
    }

    /// Bytes read so far.
    pub fn position(&self) -> usize {
        self.pos
    }

    /// The unread rest of the input, without copying.
    pub fn rest(&self) -> Bytes {
        self.input.slice(self.pos..)
    }

    /// Fails unless every byte has been read.
    pub fn expect_end(&self, what: &'static str) -> Result<(), WireError> {
        match self.remaining() {
            0 => Ok(()),
            count => Err(WireError::TrailingBytes { what, count }),
        }
    }

    /// Reads the next value.
    pub fn read_value(&mut self) -> Result<Value, WireError> {
        let code = self.read_u8("a format code")?;
        if code == DESCRIBED {
            self.enter()?;
            let descriptor = self.read_descriptor()?;
            let value = self.read_value()?;
            self.leave();
            return Ok(Value::described(descriptor, value));
        }
        self.read_data(code)
    }

    /// Reads a descriptor: a ulong or a symbol in any of their encodings.
    fn read_descriptor(&mut self) -> Result<Descriptor, WireError> {
        match self.read_value()? {
            Value::Ulong(code) => Ok(Descriptor::Code(code)),
            Value::Symbol(symbol) => Ok(Descriptor::Symbol(symbol)),
            other => Err(WireError::InvalidDescriptor(other.type_name().to_owned())),
        }
    }

    fn enter(&mut self) -> Result<(), WireError> {
        self.depth += 1;
        if self.depth > self.max_depth {
            return Err(WireError::NestingTooDeep { max: self.max_depth });
        }
        Ok(())
    }

    fn leave(&mut self) {
        self.depth -= 1;
    }

    fn take(&mut self, n: usize, what: &'static str) -> Result<&'a [u8], WireError> {
        let input: &'a [u8] = self.input;
        let end = self.pos.checked_add(n).filter(|&end| end <= input.len());
        let Some(end) = end else { return Err(WireError::Truncated { what }) };
        let bytes = &input[self.pos..end];
        self.pos = end;
        Ok(bytes)
    }

    fn take_array<const N: usize>(&mut self, what: &'static str) -> Result<[u8; N], WireError> {
        let mut out = [0u8; N];
        out.copy_from_slice(self.take(N, what)?);
        Ok(out)
    }

    fn read_u8(&mut self, what: &'static str) -> Result<u8, WireError> {
        Ok(self.take_array::<1>(what)?[0])
    }

    fn read_u32(&mut self, what: &'static str) -> Result<u32, WireError> {
        Ok(u32::from_be_bytes(self.take_array(what)?))
    }

    /// Reads a size or count field of one byte (`wide == false`) or four.
    fn read_length(&mut self, wide: bool, what: &'static str) -> Result<usize, WireError> {
        let length = if wide { self.read_u32(what)? } else { u32::from(self.read_u8(what)?) };
        // On 32-bit targets a u32 always fits in usize; saturate rather than assume.
        Ok(usize::try_from(length).unwrap_or(usize::MAX))
    }

    /// Reads the data of a primitive value whose format code has been read.
    fn read_data(&mut self, code: u8) -> Result<Value, WireError> {
        Ok(match code {
            NULL => Value::Null,
            TRUE => Value::Boolean(true),
            FALSE => Value::Boolean(false),
            BOOLEAN => match self.read_u8("a boolean")? {
                0 => Value::Boolean(false),
                1 => Value::Boolean(true),
                other => {
                    return Err(WireError::UnexpectedValue {
                        expected: "boolean byte 0x00 or 0x01",
                        found: format!("0x{other:02x}"),
                    })
                }
            },
            UBYTE => Value::Ubyte(self.read_u8("a ubyte")?),
            USHORT => Value::Ushort(u16::from_be_bytes(self.take_array("a ushort")?)),
            UINT => Value::Uint(self.read_u32("a uint")?),
            SMALL_UINT => Value::Uint(u32::from(self.read_u8("a smalluint")?)),
            UINT0 => Value::Uint(0),
            ULONG => Value::Ulong(u64::from_be_bytes(self.take_array("a ulong")?)),
            SMALL_ULONG => Value::Ulong(u64::from(self.read_u8("a smallulong")?)),
            ULONG0 => Value::Ulong(0),
            BYTE => Value::Byte(i8::from_be_bytes(self.take_array("a byte")?)),
            SHORT => Value::Short(i16::from_be_bytes(self.take_array("a short")?)),
            INT => Value::Int(i32::from_be_bytes(self.take_array("an int")?)),
            SMALL_INT => Value::Int(i32::from(i8::from_be_bytes(self.take_array("a smallint")?))),
            LONG => Value::Long(i64::from_be_bytes(self.take_array("a long")?)),
            SMALL_LONG => {
                Value::Long(i64::from(i8::from_be_bytes(self.take_array("a smalllong")?)))
            }
            FLOAT => Value::Float(f32::from_be_bytes(self.take_array("a float")?)),
            DOUBLE => Value::Double(f64::from_be_bytes(self.take_array("a double")?)),
            DECIMAL32 => Value::Decimal32(self.take_array("a decimal32")?),
            DECIMAL64 => Value::Decimal64(self.take_array("a decimal64")?),
            DECIMAL128 => Value::Decimal128(self.take_array("a decimal128")?),
            CHAR => {
                let scalar = self.read_u32("a char")?;
                Value::Char(char::from_u32(scalar).ok_or(WireError::InvalidChar(scalar))?)
            }
            TIMESTAMP => Value::Timestamp(i64::from_be_bytes(self.take_array("a timestamp")?)),
            UUID => Value::Uuid(self.take_array("a uuid")?),
            VBIN8 | VBIN32 => {
                let len = self.read_length(code == VBIN32, "a binary size")?;
                let start = self.pos;
                self.take(len, "a binary")?;
                Value::Binary(self.input.slice(start..self.pos))
            }
            STR8 | STR32 => {
                let len = self.read_length(code == STR32, "a string size")?;
                let bytes = self.take(len, "a string")?;
                let text =
                    std::str::from_utf8(bytes).map_err(|_| WireError::InvalidUtf8("string"))?;
                Value::String(text.to_owned())
            }
            SYM8 | SYM32 => {
                let len = self.read_length(code == SYM32, "a symbol size")?;
                let bytes = self.take(len, "a symbol")?;
                let text =
                    std::str::from_utf8(bytes).map_err(|_| WireError::InvalidUtf8("symbol"))?;
                Value::Symbol(Symbol(text.to_owned()))
            }
            LIST0 => Value::List(Vec::new()),
            LIST8 | LIST32 => Value::List(self.read_compound(code == LIST32, "list")?),
            MAP8 | MAP32 => {
                let mut flat = self.read_compound(code == MAP32, "map")?.into_iter();
                let mut pairs = Vec::with_capacity(flat.len() / 2);
                while let (Some(key), Some(value)) = (flat.next(), flat.next()) {
                    pairs.push((key, value));
                }
                Value::Map(pairs)
            }
            ARRAY8 | ARRAY32 => Value::Array(self.read_array(code == ARRAY32)?),
            other => return Err(WireError::InvalidFormatCode(other)),
        })
    }

    /// Reads the size, count and elements of a list or map (a map's keys and values
    /// alternate, hence an even count).
    fn read_compound(&mut self, wide: bool, what: &'static str) -> Result<Vec<Value>, WireError> {
        let size = self.read_length(wide, "a compound size")?;
        if size > self.remaining() {
            return Err(WireError::Truncated { what });
        }
        let start = self.pos;
        let end = start + size;
        let count = self.read_length(wide, "a compound count")?;
        let available = end.checked_sub(self.pos).ok_or(WireError::Truncated { what })?;
        // Every element takes at least its one-byte format code.
        if count > available {
            return Err(WireError::ImpossibleCount {
                what,
                count: count as u64,
                available: available as u64,
            });
        }
        if what == "map" && count % 2 != 0 {
            return Err(WireError::OddMapCount(count as u64));
        }
        self.enter()?;
        let mut elements = Vec::with_capacity(count);
        for _ in 0..count {
            elements.push(self.read_value()?);
            if self.pos > end {
                return Err(WireError::SizeMismatch {
                    what,
                    declared: size as u64,
                    used: (self.pos - start) as u64,
                });
            }
        }
        self.leave();
        if self.pos != end {
            return Err(WireError::SizeMismatch {
                what,
                declared: size as u64,
                used: (self.pos - start) as u64,
            });
        }
        Ok(elements)
    }

    /// Reads the size, count, element constructor and elements of an array.
    fn read_array(&mut self, wide: bool) -> Result<Array, WireError> {
        let what = "array";
        let size = self.read_length(wide, "an array size")?;
        if size > self.remaining() {
            return Err(WireError::Truncated { what });
        }
        let start = self.pos;
        let end = start + size;
        let count = self.read_length(wide, "an array count")?;
        self.enter()?;
        let mut code = self.read_u8("an array constructor")?;
        let descriptor = if code == DESCRIBED {
            let descriptor = self.read_descriptor()?;
            code = self.read_u8("an array constructor")?;
            Some(descriptor)
        } else {
            None
        };
        let layout = element_layout(code)?;
        let available = end.checked_sub(self.pos).ok_or(WireError::Truncated { what })?;
        // Elements without data cost no bytes, so their count is bounded by what is left of
        // the input's budget for them instead: nothing allocated here outgrows the frame that
        // carried it. Nulls have no encoding with data either, so an array of them would
        // re-encode smaller than the budget it was decoded under: it carries nothing but its
        // count, and only an empty one is accepted.
        let fits = match layout.min_width {
            _ if layout.code == NULL => count == 0,
            0 => count <= self.zero_width_left,
            width => count.checked_mul(width).is_some_and(|bytes| bytes <= available),
        };
        if !fits {
            return Err(WireError::ImpossibleCount {
                what,
                count: count as u64,
                available: available as u64,
            });
        }
        if layout.min_width == 0 {
            self.zero_width_left -= count;
        }
        let mut elements = Vec::with_capacity(count);
        for _ in 0..count {
            elements.push(self.read_data(layout.code)?);
            if self.pos > end {
                return Err(WireError::SizeMismatch {
                    what,
                    declared: size as u64,
                    used: (self.pos - start) as u64,
                });
            }
        }
        self.leave();
        if self.pos != end {
            return Err(WireError::SizeMismatch {
                what,
                declared: size as u64,
                used: (self.pos - start) as u64,
            });
        }
        Ok(Array { descriptor, kind: layout.kind, elements })
    }
}

/// The layout of array elements written with format code `code`.
fn element_layout(code: u8) -> Result<ElementLayout, WireError> {
    let (kind, min_width) = match code {
        NULL => (Kind::Null, 0),
        TRUE | FALSE => (Kind::Boolean, 0),
        BOOLEAN => (Kind::Boolean, 1),
        UBYTE => (Kind::Ubyte, 1),
        USHORT => (Kind::Ushort, 2),
        UINT => (Kind::Uint, 4),
        SMALL_UINT => (Kind::Uint, 1),
        UINT0 => (Kind::Uint, 0),
        ULONG => (Kind::Ulong, 8),
        SMALL_ULONG => (Kind::Ulong, 1),
        ULONG0 => (Kind::Ulong, 0),
        BYTE => (Kind::Byte, 1),
        SHORT => (Kind::Short, 2),
        INT => (Kind::Int, 4),
        SMALL_INT => (Kind::Int, 1),
        LONG => (Kind::Long, 8),
        SMALL_LONG => (Kind::Long, 1),
        FLOAT => (Kind::Float, 4),
        DOUBLE => (Kind::Double, 8),
        DECIMAL32 => (Kind::Decimal32, 4),
        DECIMAL64 => (Kind::Decimal64, 8),
        DECIMAL128 => (Kind::Decimal128, 16),
        CHAR => (Kind::Char, 4),
        TIMESTAMP => (Kind::Timestamp, 8),
        UUID => (Kind::Uuid, 16),
        VBIN8 => (Kind::Binary, 1),
        VBIN32 => (Kind::Binary, 4),
        STR8 => (Kind::String, 1),
        STR32 => (Kind::String, 4),
        SYM8 => (Kind::Symbol, 1),
        SYM32 => (Kind::Symbol, 4),
        LIST0 => (Kind::List, 0),
        LIST8 => (Kind::List, 2),
        LIST32 => (Kind::List, 8),
        MAP8 => (Kind::Map, 2),
        MAP32 => (Kind::Map, 8),
        ARRAY8 => (Kind::Array, 3),
        ARRAY32 => (Kind::Array, 9),
        other => return Err(WireError::InvalidFormatCode(other)),
    };
    Ok(ElementLayout { code, kind, min_width })
}
