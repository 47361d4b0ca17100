//! [`FromValue`]: the Rust type of a typed field, read from a [`Value`]; and the `From`
//! conversions that write them back.

use bytes::Bytes;

use super::{Array, Kind, Symbol, Value};

/// A Rust type that a field of a composite can hold, read from the [`Value`] on the wire.
pub trait FromValue: Sized {
    /// The spec's name for the expected type, for error messages.
    const EXPECTED: &'static str;

    /// The field's value, or the value back when it has another type.
    fn from_value(value: Value) -> Result<Self, Value>;
}

/// Implements [`FromValue`] and `From<T> for Value` for a type with one variant.
macro_rules! primitive {
    ($ty:ty, $variant:ident, $name:literal) => {
        impl FromValue for $ty {
            const EXPECTED: &'static str = $name;
            fn from_value(value: Value) -> Result<Self, Value> {
                match value {
                    Value::$variant(v) => Ok(v),
                    other => Err(other),
                }
            }
        }

        impl From<$ty> for Value {
            fn from(v: $ty) -> Value {
                Value::$variant(v)
            }
        }
    };
}

primitive!(u8, Ubyte, "ubyte");
primitive!(u16, Ushort, "ushort");
primitive!(u32, Uint, "uint");
primitive!(u64, Ulong, "ulong");
primitive!(i8, Byte, "byte");
primitive!(i16, Short, "short");
primitive!(i32, Int, "int");
primitive!(i64, Long, "long");
primitive!(f32, Float, "float");
primitive!(f64, Double, "double");
primitive!(char, Char, "char");

impl FromValue for bool {
    const EXPECTED: &'static str = "boolean";
    fn from_value(value: Value) -> Result<Self, Value> {
        match value {
            Value::Boolean(v) => Ok(v),
            other => Err(other),
        }
    }
}

impl FromValue for String {
    const EXPECTED: &'static str = "string";
    fn from_value(value: Value) -> Result<Self, Value> {
        match value {
            Value::String(v) => Ok(v),
            other => Err(other),
        }
    }
}

impl FromValue for Symbol {
    const EXPECTED: &'static str = "symbol";
    fn from_value(value: Value) -> Result<Self, Value> {
        match value {
            Value::Symbol(v) => Ok(v),
            other => Err(other),
        }
    }
}

impl FromValue for Bytes {
    const EXPECTED: &'static str = "binary";
    fn from_value(value: Value) -> Result<Self, Value> {
        match value {
            Value::Binary(v) => Ok(v),
            other => Err(other),
        }
    }
}

impl FromValue for Value {
    const EXPECTED: &'static str = "any value";
    fn from_value(value: Value) -> Result<Self, Value> {
        Ok(value)
    }
}

/// A `multiple` field of symbols (capabilities, locales, mechanisms): the spec allows one
/// symbol on its own or an array of them.
impl FromValue for Vec<Symbol> {
    const EXPECTED: &'static str = "a symbol or an array of symbols";
    fn from_value(value: Value) -> Result<Self, Value> {
        match value {
            Value::Symbol(symbol) => Ok(vec![symbol]),
            Value::Array(array) if array.kind == Kind::Symbol && array.descriptor.is_none() => {
                let mut symbols = Vec::with_capacity(array.elements.len());
                for element in array.elements {
                    match element {
                        Value::Symbol(symbol) => symbols.push(symbol),
                        // Unreachable for decoded arrays, whose elements share the kind.
                        other => return Err(other),
                    }
                }
                Ok(symbols)
            }
            other => Err(other),
        }
    }
}

impl From<Vec<Symbol>> for Value {
    /// A `multiple` field, always written as an array (as Proton and Qpid JMS do).
    fn from(symbols: Vec<Symbol>) -> Value {
        Value::Array(Array::of_symbols(symbols))
    }
}

impl From<Vec<Value>> for Value {
    fn from(elements: Vec<Value>) -> Value {
        Value::List(elements)
    }
}
