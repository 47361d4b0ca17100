//! Composite types (the spec, part 1.4): a described list whose elements are the type's
//! fields in order. [`Composite`] is implemented by every performative, SASL frame,
//! terminus, delivery state and message section; [`FieldReader`] and [`FieldWriter`] do
//! what all of them share.
//!
//! The spec's rules, applied here once: a field that is absent (the list is shorter) and
//! a field that is null mean the same, the field's default; a mandatory field may be
//! neither; a list longer than the fields we know is a newer peer's, and the extra fields
//! are ignored. Encoding leaves out trailing null fields, as the spec allows.

use super::error::{short_debug, WireError};
use super::types::{Descriptor, FromValue, Symbol, Value};

/// A composite type of the spec, encoded as a described list.
pub trait Composite: Sized {
    /// The type's name in the spec (`open`, `sasl-init`, `source`).
    const NAME: &'static str;
    /// The numeric descriptor (domain 0x0000_0000, the spec's own).
    const CODE: u64;
    /// The symbolic descriptor (`amqp:open:list`).
    const SYMBOL: &'static str;

    /// Reads the fields in order.
    fn read_fields(fields: &mut FieldReader) -> Result<Self, WireError>;

    /// Writes the fields in order.
    fn write_fields(&self, fields: &mut FieldWriter);

    /// Whether `descriptor` names this type.
    fn is_described_by(descriptor: &Descriptor) -> bool {
        match descriptor {
            Descriptor::Code(code) => *code == Self::CODE,
            Descriptor::Symbol(symbol) => symbol.as_str() == Self::SYMBOL,
        }
    }

    /// Reads the type from a described value.
    fn from_value(value: Value) -> Result<Self, WireError> {
        let Value::Described(described) = value else {
            return Err(WireError::UnexpectedValue {
                expected: Self::NAME,
                found: value.type_name().to_owned(),
            });
        };
        if !Self::is_described_by(&described.descriptor) {
            return Err(WireError::UnexpectedValue {
                expected: Self::NAME,
                found: describe_descriptor(&described.descriptor),
            });
        }
        Self::from_described_list(described.value)
    }

    /// Reads the type from the list under its descriptor.
    fn from_described_list(list: Value) -> Result<Self, WireError> {
        match list {
            Value::List(fields) => Self::read_fields(&mut FieldReader::new(Self::NAME, fields)),
            other => Err(WireError::UnexpectedValue {
                expected: "a list of fields",
                found: format!("{} under the {} descriptor", other.type_name(), Self::NAME),
            }),
        }
    }

    /// The described list for this value.
    fn to_value(&self) -> Value {
        let mut fields = FieldWriter::default();
        self.write_fields(&mut fields);
        Value::described(Descriptor::Code(Self::CODE), Value::List(fields.finish()))
    }
}

/// Renders a descriptor for an error message: a code in the spec's `0x00000000:0x00000010`
/// notation, or the symbol.
pub fn describe_descriptor(descriptor: &Descriptor) -> String {
    match descriptor {
        Descriptor::Code(code) => {
            format!("descriptor 0x{:08x}:0x{:08x}", code >> 32, code & 0xffff_ffff)
        }
        Descriptor::Symbol(symbol) => format!("descriptor {symbol}"),
    }
}

/// Reads the fields of one composite in order, knowing their names for error messages.
#[derive(Debug)]
pub struct FieldReader {
    composite: &'static str,
    fields: std::vec::IntoIter<Value>,
}

impl FieldReader {
    /// A reader over the list of `composite`'s fields.
    pub fn new(composite: &'static str, fields: Vec<Value>) -> FieldReader {
        FieldReader { composite, fields: fields.into_iter() }
    }

    /// The next field as it is on the wire (null when the list has ended).
    pub fn next_value(&mut self) -> Value {
        self.fields.next().unwrap_or(Value::Null)
    }

    /// The next field; `None` when absent or null.
    pub fn optional<T: FromValue>(&mut self, field: &'static str) -> Result<Option<T>, WireError> {
        match self.next_value() {
            Value::Null => Ok(None),
            value => T::from_value(value).map(Some).map_err(|found| {
                WireError::invalid_field(self.composite, field, T::EXPECTED, &found)
            }),
        }
    }

    /// The next field, which the spec makes mandatory.
    pub fn required<T: FromValue>(&mut self, field: &'static str) -> Result<T, WireError> {
        self.optional(field)?.ok_or(WireError::MissingField { composite: self.composite, field })
    }

    /// The next field, read by `convert` (for fields of a composite or restricted type);
    /// `None` when absent or null.
    pub fn optional_with<T>(
        &mut self,
        field: &'static str,
        convert: impl FnOnce(Value) -> Result<T, WireError>,
    ) -> Result<Option<T>, WireError> {
        match self.next_value() {
            Value::Null => Ok(None),
            value => convert(value).map(Some).map_err(|error| self.in_field(field, error)),
        }
    }

    /// Like [`FieldReader::optional_with`], for a mandatory field.
    pub fn required_with<T>(
        &mut self,
        field: &'static str,
        convert: impl FnOnce(Value) -> Result<T, WireError>,
    ) -> Result<T, WireError> {
        self.optional_with(field, convert)?
            .ok_or(WireError::MissingField { composite: self.composite, field })
    }

    /// Names this field in an error from a nested value, unless it already names one.
    fn in_field(&self, field: &'static str, error: WireError) -> WireError {
        match error {
            WireError::UnexpectedValue { expected, found } => {
                WireError::InvalidField { composite: self.composite, field, expected, found }
            }
            other => other,
        }
    }
}

/// Collects the fields of one composite in order.
#[derive(Debug, Default)]
pub struct FieldWriter {
    fields: Vec<Value>,
}

impl FieldWriter {
    /// Appends a field.
    pub fn field(&mut self, value: impl Into<Value>) -> &mut FieldWriter {
        self.fields.push(value.into());
        self
    }

    /// Appends an optional field (null when `None`).
    pub fn optional<T: Into<Value> + Clone>(&mut self, value: &Option<T>) -> &mut FieldWriter {
        self.fields.push(value.clone().map_or(Value::Null, Into::into));
        self
    }

    /// Appends an optional composite field.
    pub fn composite<T: Composite>(&mut self, value: &Option<T>) -> &mut FieldWriter {
        self.fields.push(value.as_ref().map_or(Value::Null, Composite::to_value));
        self
    }

    /// The fields without the trailing nulls, which the spec lets an encoder leave out.
    pub fn finish(mut self) -> Vec<Value> {
        while self.fields.last() == Some(&Value::Null) {
            self.fields.pop();
        }
        self.fields
    }
}

/// A map with symbol keys (the spec's `fields` type: properties of open, begin, attach
/// and flow, error info, dynamic node properties).
#[derive(Debug, Clone, PartialEq, Default)]
pub struct Fields(pub Vec<(Symbol, Value)>);

impl Fields {
    /// The value under `key`.
    pub fn get(&self, key: &str) -> Option<&Value> {
        self.0.iter().find(|(k, _)| k.as_str() == key).map(|(_, v)| v)
    }

    /// Adds a pair (keeping wire order).
    pub fn insert(&mut self, key: impl Into<Symbol>, value: impl Into<Value>) {
        self.0.push((key.into(), value.into()));
    }
}

impl FromValue for Fields {
    const EXPECTED: &'static str = "a map with symbol keys";
    fn from_value(value: Value) -> Result<Self, Value> {
        let Value::Map(pairs) = value else { return Err(value) };
        if !pairs.iter().all(|(key, _)| matches!(key, Value::Symbol(_))) {
            return Err(Value::Map(pairs));
        }
        let fields = pairs
            .into_iter()
            .filter_map(|(key, value)| match key {
                Value::Symbol(symbol) => Some((symbol, value)),
                _ => None,
            })
            .collect();
        Ok(Fields(fields))
    }
}

impl From<Fields> for Value {
    fn from(fields: Fields) -> Value {
        Value::Map(fields.0.into_iter().map(|(k, v)| (Value::Symbol(k), v)).collect())
    }
}

/// Annotations (delivery and message annotations, footer): a map whose keys are symbols
/// or ulongs. Kept as the peer sent them, keys we do not know included, so that they pass
/// through the broker unchanged.
#[derive(Debug, Clone, PartialEq, Default)]
pub struct Annotations(pub Vec<(Value, Value)>);

impl Annotations {
    /// The value under the symbol `key`.
    pub fn get(&self, key: &str) -> Option<&Value> {
        self.0
            .iter()
            .find(|(k, _)| matches!(k, Value::Symbol(symbol) if symbol.as_str() == key))
            .map(|(_, v)| v)
    }

    /// Adds an annotation under a symbol key (keeping wire order).
    pub fn insert(&mut self, key: impl Into<Symbol>, value: impl Into<Value>) {
        self.0.push((Value::Symbol(key.into()), value.into()));
    }
}

impl FromValue for Annotations {
    const EXPECTED: &'static str = "a map with symbol or ulong keys";
    fn from_value(value: Value) -> Result<Self, Value> {
        match value {
            Value::Map(pairs)
                if pairs.iter().all(|(k, _)| matches!(k, Value::Symbol(_) | Value::Ulong(_))) =>
            {
                Ok(Annotations(pairs))
            }
            other => Err(other),
        }
    }
}

impl From<Annotations> for Value {
    fn from(annotations: Annotations) -> Value {
        Value::Map(annotations.0)
    }
}

/// Reads a field whose value is a symbol from a fixed set, as an enum.
pub(crate) fn symbol_enum<T>(
    value: Value,
    expected: &'static str,
    parse: impl FnOnce(&str) -> Option<T>,
) -> Result<T, WireError> {
    match &value {
        Value::Symbol(symbol) => parse(symbol.as_str()),
        _ => None,
    }
    .ok_or_else(|| WireError::UnexpectedValue { expected, found: short_debug(&value) })
}

/// Reads a field whose value is an unsigned number from a fixed set, as an enum.
pub(crate) fn number_enum<N: FromValue, T>(
    value: Value,
    expected: &'static str,
    parse: impl FnOnce(N) -> Option<T>,
) -> Result<T, WireError> {
    let rendered = short_debug(&value);
    N::from_value(value)
        .ok()
        .and_then(parse)
        .ok_or(WireError::UnexpectedValue { expected, found: rendered })
}
