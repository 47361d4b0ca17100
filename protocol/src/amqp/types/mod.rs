//! The AMQP 1.0 type system (the spec, part 1): [`Value`], any value on the wire, with
//! described types ([`Described`], [`Descriptor`]) and arrays ([`Array`]).
//!
//! Every value starts with a one-byte format code that fixes its type and width
//! (`codes.rs`). The decoder (`decode.rs`) accepts every encoding the spec defines and
//! checks each declared size and count against the bytes that are really there before it
//! allocates; the encoder (`encode.rs`) picks the most compact encoding of each value.
//! `convert.rs` turns values into the Rust types of typed fields and back.

pub(crate) mod codes;
mod convert;
mod decode;
mod encode;

use bytes::Bytes;

pub use convert::FromValue;
pub use decode::{decode_value, Decoder};
pub use encode::{encode_to_vec, encode_value, encoded_len};

/// A symbolic name: an ASCII string the spec uses for constants (`amqp:not-found`,
/// capabilities, annotation keys). Kept apart from [`Value::String`] because the two encode
/// differently and peers match on the difference.
#[derive(Debug, Clone, PartialEq, Eq, Hash, PartialOrd, Ord, Default)]
pub struct Symbol(pub String);

impl Symbol {
    /// The symbol's text.
    pub fn as_str(&self) -> &str {
        &self.0
    }
}

impl From<&str> for Symbol {
    fn from(text: &str) -> Symbol {
        Symbol(text.to_owned())
    }
}

impl From<String> for Symbol {
    fn from(text: String) -> Symbol {
        Symbol(text)
    }
}

impl PartialEq<str> for Symbol {
    fn eq(&self, other: &str) -> bool {
        self.0 == other
    }
}

impl PartialEq<&str> for Symbol {
    fn eq(&self, other: &&str) -> bool {
        self.0 == *other
    }
}

impl std::fmt::Display for Symbol {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        f.write_str(&self.0)
    }
}

/// What identifies a described type: a numeric code (`domain << 32 | id`, the form the
/// spec's own types use on the wire) or a symbolic name.
#[derive(Debug, Clone, PartialEq, Eq, Hash)]
pub enum Descriptor {
    /// A ulong code such as `0x0000_0000_0000_0010` (open).
    Code(u64),
    /// A symbolic name such as `amqp:open:list`.
    Symbol(Symbol),
}

/// A value with a descriptor that says how to read it (a performative, a message section,
/// an application's own type).
#[derive(Debug, Clone, PartialEq)]
pub struct Described {
    /// What the value is.
    pub descriptor: Descriptor,
    /// The underlying value (a list, for every composite type of the spec).
    pub value: Value,
}

/// Any AMQP 1.0 value.
///
/// Maps keep their pairs in wire order (a `Vec`, not a hash map), so a map decodes and
/// re-encodes to the same bytes and keys of any type (including floats) are allowed.
/// Decimals are kept as their raw IEEE 754 bytes: nothing in the broker computes with them.
#[derive(Debug, Clone, PartialEq, Default)]
pub enum Value {
    /// The absence of a value.
    #[default]
    Null,
    /// true or false.
    Boolean(bool),
    /// Unsigned 8-bit integer.
    Ubyte(u8),
    /// Unsigned 16-bit integer.
    Ushort(u16),
    /// Unsigned 32-bit integer.
    Uint(u32),
    /// Unsigned 64-bit integer.
    Ulong(u64),
    /// Signed 8-bit integer.
    Byte(i8),
    /// Signed 16-bit integer.
    Short(i16),
    /// Signed 32-bit integer.
    Int(i32),
    /// Signed 64-bit integer.
    Long(i64),
    /// IEEE 754 binary32.
    Float(f32),
    /// IEEE 754 binary64.
    Double(f64),
    /// IEEE 754 decimal32, raw big-endian bytes.
    Decimal32([u8; 4]),
    /// IEEE 754 decimal64, raw big-endian bytes.
    Decimal64([u8; 8]),
    /// IEEE 754 decimal128, raw big-endian bytes.
    Decimal128([u8; 16]),
    /// A Unicode scalar value (UTF-32 on the wire).
    Char(char),
    /// Milliseconds since the Unix epoch.
    Timestamp(i64),
    /// A UUID (RFC 4122), 16 bytes in network order.
    Uuid([u8; 16]),
    /// Opaque bytes.
    Binary(Bytes),
    /// UTF-8 text.
    String(String),
    /// An ASCII symbolic name.
    Symbol(Symbol),
    /// A sequence of values of any types.
    List(Vec<Value>),
    /// Key-value pairs, in wire order.
    Map(Vec<(Value, Value)>),
    /// A sequence of values of one type.
    Array(Array),
    /// A value with a descriptor.
    Described(Box<Described>),
}

impl Value {
    /// A described value.
    pub fn described(descriptor: Descriptor, value: Value) -> Value {
        Value::Described(Box::new(Described { descriptor, value }))
    }

    /// The primitive type of this value (`None` for a described value).
    pub fn kind(&self) -> Option<Kind> {
        Some(match self {
            Value::Null => Kind::Null,
            Value::Boolean(_) => Kind::Boolean,
            Value::Ubyte(_) => Kind::Ubyte,
            Value::Ushort(_) => Kind::Ushort,
            Value::Uint(_) => Kind::Uint,
            Value::Ulong(_) => Kind::Ulong,
            Value::Byte(_) => Kind::Byte,
            Value::Short(_) => Kind::Short,
            Value::Int(_) => Kind::Int,
            Value::Long(_) => Kind::Long,
            Value::Float(_) => Kind::Float,
            Value::Double(_) => Kind::Double,
            Value::Decimal32(_) => Kind::Decimal32,
            Value::Decimal64(_) => Kind::Decimal64,
            Value::Decimal128(_) => Kind::Decimal128,
            Value::Char(_) => Kind::Char,
            Value::Timestamp(_) => Kind::Timestamp,
            Value::Uuid(_) => Kind::Uuid,
            Value::Binary(_) => Kind::Binary,
            Value::String(_) => Kind::String,
            Value::Symbol(_) => Kind::Symbol,
            Value::List(_) => Kind::List,
            Value::Map(_) => Kind::Map,
            Value::Array(_) => Kind::Array,
            Value::Described(_) => return None,
        })
    }

    /// The type's name in the spec, for error messages (`ulong`, `described`, ...).
    pub fn type_name(&self) -> &'static str {
        match self.kind() {
            Some(kind) => kind.name(),
            None => "described",
        }
    }

    /// The text of a string or symbol.
    pub fn as_str(&self) -> Option<&str> {
        match self {
            Value::String(text) => Some(text),
            Value::Symbol(symbol) => Some(symbol.as_str()),
            _ => None,
        }
    }
}

impl From<&str> for Value {
    fn from(text: &str) -> Value {
        Value::String(text.to_owned())
    }
}

impl From<String> for Value {
    fn from(text: String) -> Value {
        Value::String(text)
    }
}

impl From<Symbol> for Value {
    fn from(symbol: Symbol) -> Value {
        Value::Symbol(symbol)
    }
}

impl From<Bytes> for Value {
    fn from(bytes: Bytes) -> Value {
        Value::Binary(bytes)
    }
}

impl From<bool> for Value {
    fn from(value: bool) -> Value {
        Value::Boolean(value)
    }
}

/// The primitive types of AMQP 1.0, without their values: the element type of an
/// [`Array`].
#[derive(Debug, Clone, Copy, PartialEq, Eq, Hash)]
#[allow(missing_docs)] // The names are the spec's.
pub enum Kind {
    Null,
    Boolean,
    Ubyte,
    Ushort,
    Uint,
    Ulong,
    Byte,
    Short,
    Int,
    Long,
    Float,
    Double,
    Decimal32,
    Decimal64,
    Decimal128,
    Char,
    Timestamp,
    Uuid,
    Binary,
    String,
    Symbol,
    List,
    Map,
    Array,
}

impl Kind {
    /// The type's name in the spec.
    pub fn name(self) -> &'static str {
        match self {
            Kind::Null => "null",
            Kind::Boolean => "boolean",
            Kind::Ubyte => "ubyte",
            Kind::Ushort => "ushort",
            Kind::Uint => "uint",
            Kind::Ulong => "ulong",
            Kind::Byte => "byte",
            Kind::Short => "short",
            Kind::Int => "int",
            Kind::Long => "long",
            Kind::Float => "float",
            Kind::Double => "double",
            Kind::Decimal32 => "decimal32",
            Kind::Decimal64 => "decimal64",
            Kind::Decimal128 => "decimal128",
            Kind::Char => "char",
            Kind::Timestamp => "timestamp",
            Kind::Uuid => "uuid",
            Kind::Binary => "binary",
            Kind::String => "string",
            Kind::Symbol => "symbol",
            Kind::List => "list",
            Kind::Map => "map",
            Kind::Array => "array",
        }
    }
}

/// A sequence of values that share one type (and, for an array of described values, one
/// descriptor): the wire form names the type once, whatever the number of elements.
///
/// For an array of described values the elements are the underlying values and the
/// descriptor is kept here, once. The element type is kept even when the array is empty,
/// because an empty array still names a type on the wire.
#[derive(Debug, Clone, PartialEq)]
pub struct Array {
    /// The descriptor every element carries, for an array of described values.
    pub descriptor: Option<Descriptor>,
    /// The type of every element (of the underlying values, when described).
    pub kind: Kind,
    /// The elements.
    pub elements: Vec<Value>,
}

impl Array {
    /// An array of `kind` holding `elements` (which the encoder checks are all `kind`).
    pub fn new(kind: Kind, elements: Vec<Value>) -> Array {
        Array { descriptor: None, kind, elements }
    }

    /// An array of symbols, the form of every capability and mechanism list in the spec.
    pub fn of_symbols<I, S>(symbols: I) -> Array
    where
        I: IntoIterator<Item = S>,
        S: Into<Symbol>,
    {
        let elements = symbols.into_iter().map(|s| Value::Symbol(s.into())).collect();
        Array::new(Kind::Symbol, elements)
    }
}
