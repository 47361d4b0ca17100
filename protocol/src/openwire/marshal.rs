//! The marshalling engine: an [`Encoder`] and a [`Decoder`] that know tight and loose
//! encoding, the marshalling cache and the negotiated version, and the [`wire_struct!`]
//! macro that turns a field table into a struct with its read and write code.
//!
//! Each OpenWire type is described once, as an ordered list of fields with a *kind* (how the
//! field is marshalled) and optionally the version that introduced it. The same table drives
//! both encodings:
//!
//! | kind | tight | loose |
//! |---|---|---|
//! | `Bool` | one bit | one byte |
//! | `Byte`, `Int` | the bytes | the bytes |
//! | `Long` | two bits for its size class (0, 2, 4 or 8 bytes), then those bytes | 8 bytes |
//! | `Str` | bit "present", bit "ASCII"; short length and bytes, or `writeUTF` | bool, `writeUTF` |
//! | `Bytes` | bit "present"; int length and bytes | bool, int length, bytes |
//! | `Nested` | bit "present" (+ a bit for marshal-aware types); type byte and fields | bool, type byte, fields |
//! | `Cached` | with the cache: bit "new", short slot, nested if new; else `Nested` | the same with a bool |
//! | `Array` | bit "present"; short count; nested elements | bool, short count, elements |
//! | `Throwable` | bit "present"; class, message; with stack traces: elements and cause | the same with bools |
//!
//! Tight encoding in Java takes two passes (sizes and booleans, then the body); since both
//! passes walk the fields in the same order, the encoder here does it in one, collecting the
//! booleans and the body separately and joining them at the end.

use bytes::{BufMut, Bytes};
use rustc_hash::FxHasher;

use super::boolean_stream::{BitReader, BitWriter};
use super::cache::{fingerprint, CacheValue, DecodeCache, EncodeCache, Found};
use super::commands::{DataStructure, StackTraceElement, Throwable};
use super::error::WireError;
use super::map::put_utf;
use super::primitives::{modified_utf8_len, Reader};

/// How deep objects (and exception causes) may nest inside one frame.
pub(crate) const MAX_NESTING: usize = 32;

/// Whether nested objects of this type carry Java's extra "marshal aware" bit in tight
/// encoding (messages and WireFormatInfo).
fn is_marshal_aware(data_type: u8) -> bool {
    data_type == super::data_type::WIREFORMAT_INFO
        || (super::data_type::ACTIVEMQ_MESSAGE..=super::data_type::ACTIVEMQ_BLOB_MESSAGE)
            .contains(&data_type)
}

/// A type that can be marshalled as a nested (or cached) object.
pub(crate) trait WireObject: Sized {
    /// What a field of this type holds, for error messages.
    const EXPECTED: &'static str;
    /// The type byte.
    fn data_type(&self) -> u8;
    /// Writes the fields (not the type byte).
    fn write_fields(&self, e: &mut Encoder) -> Result<(), WireError>;
    /// A copy as a generic data structure (the marshalling cache's key).
    fn to_data(&self) -> DataStructure;
    /// Narrows a generic data structure to this type.
    fn from_data(data: DataStructure) -> Result<Self, WireError>;
    /// True if `data` is this value (the marshalling cache's check, without a copy).
    fn is_data(&self, data: &DataStructure) -> bool {
        self.to_data() == *data
    }
    /// Hashes the value as its own type does, whatever type holds it (a consumer id in a
    /// `ConsumerId` field and in a `DataStructure` one hash alike): the marshalling cache's
    /// fingerprint.
    fn hash_fields(&self, state: &mut FxHasher) {
        self.to_data().hash_fields(state)
    }
}

impl<T: WireObject> WireObject for Box<T> {
    const EXPECTED: &'static str = T::EXPECTED;
    fn data_type(&self) -> u8 {
        (**self).data_type()
    }
    fn write_fields(&self, e: &mut Encoder) -> Result<(), WireError> {
        (**self).write_fields(e)
    }
    fn to_data(&self) -> DataStructure {
        (**self).to_data()
    }
    fn from_data(data: DataStructure) -> Result<Self, WireError> {
        T::from_data(data).map(Box::new)
    }
    fn is_data(&self, data: &DataStructure) -> bool {
        (**self).is_data(data)
    }
    fn hash_fields(&self, state: &mut FxHasher) {
        (**self).hash_fields(state)
    }
}

/// The largest encoding buffer a codec keeps between commands.
const KEPT_BODY_CAPACITY: usize = 64 << 10;

/// The scratch space of an [`Encoder`], kept by the codec between commands.
#[derive(Debug, Default)]
pub(crate) struct EncodeBuffers {
    bits: BitWriter,
    body: Vec<u8>,
}

/// Encodes the fields of one frame.
pub(crate) struct Encoder<'a> {
    /// The negotiated protocol version.
    pub(crate) version: u32,
    tight: bool,
    stack_trace: bool,
    cache: Option<&'a mut EncodeCache>,
    pub(crate) bits: BitWriter,
    pub(crate) body: Vec<u8>,
    depth: usize,
}

impl<'a> Encoder<'a> {
    /// An encoder writing into `buffers` (emptied first), so that a codec encoding one
    /// command after another allocates its scratch space once, not on every command.
    pub(crate) fn reusing(
        version: u32,
        tight: bool,
        stack_trace: bool,
        cache: Option<&'a mut EncodeCache>,
        mut buffers: EncodeBuffers,
    ) -> Encoder<'a> {
        buffers.bits.clear();
        buffers.body.clear();
        Encoder {
            version,
            tight,
            stack_trace,
            cache,
            bits: buffers.bits,
            body: buffers.body,
            depth: 0,
        }
    }

    /// The buffers back, for the next command; a body grown past [`KEPT_BODY_CAPACITY`] by
    /// one large message is let go rather than held by the connection for good.
    pub(crate) fn into_buffers(self) -> EncodeBuffers {
        let body = if self.body.capacity() > KEPT_BODY_CAPACITY { Vec::new() } else { self.body };
        EncodeBuffers { bits: self.bits, body }
    }

    pub(crate) fn bool(&mut self, v: bool) {
        if self.tight {
            self.bits.push(v);
        } else {
            self.body.put_u8(u8::from(v));
        }
    }

    pub(crate) fn byte(&mut self, v: i8) {
        self.body.put_i8(v);
    }

    pub(crate) fn short(&mut self, v: i16) {
        self.body.put_i16(v);
    }

    pub(crate) fn int(&mut self, v: i32) {
        self.body.put_i32(v);
    }

    pub(crate) fn long(&mut self, v: i64) {
        if !self.tight {
            self.body.put_i64(v);
        } else if v == 0 {
            self.bits.push(false);
            self.bits.push(false);
        } else if (v as u64) & 0xFFFF_FFFF_FFFF_0000 == 0 {
            self.bits.push(false);
            self.bits.push(true);
            self.body.put_u16(v as u16);
        } else if (v as u64) & 0xFFFF_FFFF_0000_0000 == 0 {
            self.bits.push(true);
            self.bits.push(false);
            self.body.put_u32(v as u32);
        } else {
            self.bits.push(true);
            self.bits.push(true);
            self.body.put_i64(v);
        }
    }

    /// Raw bytes with no length (WireFormatInfo's magic).
    pub(crate) fn raw(&mut self, v: &[u8]) {
        self.body.put_slice(v);
    }

    pub(crate) fn string(&mut self, v: Option<&str>) -> Result<(), WireError> {
        self.bool(v.is_some());
        let Some(s) = v else { return Ok(()) };
        if !self.tight {
            return put_utf(s, &mut self.body);
        }
        let len = modified_utf8_len(s);
        if len >= i16::MAX as usize {
            return Err(WireError::StringTooLong { length: len, max: i16::MAX as usize - 1 });
        }
        // Java's test: every UTF-16 unit in 1..=0x7F. Then length in units equals bytes.
        let ascii = s.bytes().all(|b| (1..=0x7F).contains(&b));
        self.bits.push(ascii);
        if ascii {
            self.body.put_u16(s.len() as u16);
            self.body.put_slice(s.as_bytes());
            Ok(())
        } else {
            put_utf(s, &mut self.body)
        }
    }

    pub(crate) fn bytes(&mut self, v: Option<&[u8]>) -> Result<(), WireError> {
        self.bool(v.is_some());
        if let Some(b) = v {
            self.int(super::map::int_len(b.len())?);
            self.body.put_slice(b);
        }
        Ok(())
    }

    fn enter(&mut self) -> Result<(), WireError> {
        self.depth += 1;
        if self.depth > MAX_NESTING {
            return Err(WireError::NestingTooDeep { max: MAX_NESTING });
        }
        Ok(())
    }

    pub(crate) fn nested<T: WireObject>(&mut self, v: Option<&T>) -> Result<(), WireError> {
        self.bool(v.is_some());
        let Some(v) = v else { return Ok(()) };
        let data_type = v.data_type();
        if self.tight && is_marshal_aware(data_type) {
            // "A cached marshalled form follows": never, as in Java.
            self.bits.push(false);
        }
        self.body.put_u8(data_type);
        self.enter()?;
        v.write_fields(self)?;
        self.depth -= 1;
        Ok(())
    }

    pub(crate) fn cached<T: WireObject>(&mut self, v: Option<&T>) -> Result<(), WireError> {
        let Some(cache) = self.cache.as_deref() else { return self.nested(v) };
        // Looked up by a fingerprint and compared in place: the value is copied only when it
        // enters the cache (a copy per cached field of every message cost more than the
        // rest of the message's encoding).
        let fingerprint = fingerprint(v);
        let found = cache.find(fingerprint, |cached| match (cached, v) {
            (Some(cached), Some(v)) => v.is_data(cached),
            (None, None) => true,
            _ => false,
        });
        let add = match found {
            Found::Slot(index) => {
                self.bool(false);
                self.short(index);
                return Ok(());
            }
            Found::Nothing => true,
            // Another value with the same fingerprint holds it: this one goes uncached.
            Found::Other => false,
        };
        let add = |e: &mut Self| match (add, e.cache.as_deref_mut()) {
            (true, Some(c)) => c.add(fingerprint, v.map(T::to_data)),
            _ => -1,
        };
        self.bool(true);
        if self.tight {
            // Java's first pass caches the value after its nested fields (which may hold
            // cached values of their own), so the slot is known only then.
            let at = self.body.len();
            self.short(0);
            self.nested(v)?;
            let index = add(self);
            self.body[at..at + 2].copy_from_slice(&index.to_be_bytes());
        } else {
            let index = add(self);
            self.short(index);
            self.nested(v)?;
        }
        Ok(())
    }

    pub(crate) fn array<T: WireObject>(&mut self, v: Option<&[T]>) -> Result<(), WireError> {
        self.bool(v.is_some());
        let Some(items) = v else { return Ok(()) };
        let count = i16::try_from(items.len()).map_err(|_| {
            WireError::Unencodable(format!("{} elements in one OpenWire array", items.len()))
        })?;
        self.short(count);
        for item in items {
            self.nested(Some(item))?;
        }
        Ok(())
    }

    pub(crate) fn throwable(&mut self, v: Option<&Throwable>) -> Result<(), WireError> {
        self.bool(v.is_some());
        let Some(t) = v else { return Ok(()) };
        self.string(Some(&t.class_name))?;
        self.string(t.message.as_deref())?;
        if self.stack_trace {
            let count = i16::try_from(t.stack_trace.len()).map_err(|_| {
                WireError::Unencodable(format!("stack trace of {} frames", t.stack_trace.len()))
            })?;
            self.short(count);
            for el in &t.stack_trace {
                self.string(el.class_name.as_deref())?;
                self.string(el.method_name.as_deref())?;
                self.string(el.file_name.as_deref())?;
                self.int(el.line_number);
            }
            self.enter()?;
            self.throwable(t.cause.as_deref())?;
            self.depth -= 1;
        }
        Ok(())
    }
}

/// Decodes the fields of one frame.
pub(crate) struct Decoder<'a> {
    /// The negotiated protocol version.
    pub(crate) version: u32,
    tight: bool,
    stack_trace: bool,
    pub(crate) input: Reader<'a>,
    pub(crate) bits: BitReader,
    cache: Option<&'a DecodeCache>,
    /// Cache entries set by this frame, applied when the whole frame has decoded.
    pub(crate) pending: Vec<(usize, CacheValue)>,
    depth: usize,
}

impl<'a> Decoder<'a> {
    pub(crate) fn new(
        version: u32,
        tight: bool,
        stack_trace: bool,
        input: Reader<'a>,
        cache: Option<&'a DecodeCache>,
    ) -> Decoder<'a> {
        Decoder {
            version,
            tight,
            stack_trace,
            input,
            bits: BitReader::default(),
            cache,
            pending: Vec::new(),
            depth: 0,
        }
    }

    pub(crate) fn bool(&mut self) -> Result<bool, WireError> {
        if self.tight {
            Ok(self.bits.next())
        } else {
            self.input.bool()
        }
    }

    pub(crate) fn byte(&mut self) -> Result<i8, WireError> {
        Ok(self.input.u8()? as i8)
    }

    pub(crate) fn int(&mut self) -> Result<i32, WireError> {
        self.input.i32()
    }

    pub(crate) fn long(&mut self) -> Result<i64, WireError> {
        if !self.tight {
            return self.input.i64();
        }
        Ok(match (self.bits.next(), self.bits.next()) {
            (true, true) => self.input.i64()?,
            (true, false) => i64::from(self.input.i32()? as u32),
            (false, true) => i64::from(self.input.u16()?),
            (false, false) => 0,
        })
    }

    pub(crate) fn raw(&mut self, n: usize) -> Result<&'a [u8], WireError> {
        self.input.take(n)
    }

    pub(crate) fn string(&mut self) -> Result<Option<String>, WireError> {
        if !self.bool()? {
            return Ok(None);
        }
        if self.tight && self.bits.next() {
            // The "ASCII" form: a signed short length, one byte per char (Latin-1 in Java).
            let n = self.input.i16()?;
            let n = usize::try_from(n)
                .map_err(|_| WireError::InvalidLength { what: "string length", value: n.into() })?;
            let raw = self.input.take(n)?;
            return Ok(Some(raw.iter().map(|&b| char::from(b)).collect()));
        }
        self.input.utf().map(Some)
    }

    pub(crate) fn bytes(&mut self) -> Result<Option<Bytes>, WireError> {
        if !self.bool()? {
            return Ok(None);
        }
        let n = self.input.length("byte array length")?;
        self.input.bytes(n).map(Some)
    }

    fn enter(&mut self) -> Result<(), WireError> {
        self.depth += 1;
        if self.depth > MAX_NESTING {
            return Err(WireError::NestingTooDeep { max: MAX_NESTING });
        }
        Ok(())
    }

    /// A nested object of any type.
    pub(crate) fn nested_data(&mut self) -> Result<Option<DataStructure>, WireError> {
        if !self.bool()? {
            return Ok(None);
        }
        let data_type = self.input.u8()?;
        self.enter()?;
        let data = if self.tight && is_marshal_aware(data_type) && self.bits.next() {
            // A pre-marshalled form: size and type, then the object with its own booleans.
            self.input.i32()?;
            self.input.u8()?;
            let inner = BitReader::read_from(&mut self.input)?;
            let outer = std::mem::replace(&mut self.bits, inner);
            let data = DataStructure::read_fields(data_type, self);
            self.bits = outer;
            data?
        } else {
            DataStructure::read_fields(data_type, self)?
        };
        self.depth -= 1;
        Ok(Some(data))
    }

    pub(crate) fn nested<T: WireObject>(&mut self) -> Result<Option<T>, WireError> {
        self.nested_data()?.map(T::from_data).transpose()
    }

    pub(crate) fn cached<T: WireObject>(&mut self) -> Result<Option<T>, WireError> {
        let Some(cache) = self.cache else { return self.nested() };
        let is_new = self.bool()?;
        let index = self.input.i16()?;
        let value = if is_new {
            let slot = cache.check(index)?;
            let value = self.nested_data()?;
            if let Some(slot) = slot {
                self.pending.push((slot, value.clone()));
            }
            value
        } else {
            let slot = cache.check(index)?.ok_or(WireError::CacheMiss(index))?;
            match self.pending.iter().rev().find(|(s, _)| *s == slot) {
                Some((_, value)) => value.clone(),
                None => cache.get(index)?.clone(),
            }
        };
        value.map(T::from_data).transpose()
    }

    pub(crate) fn array<T: WireObject>(&mut self) -> Result<Option<Vec<T>>, WireError> {
        if !self.bool()? {
            return Ok(None);
        }
        let n = self.input.i16()?;
        let n = usize::try_from(n)
            .map_err(|_| WireError::InvalidLength { what: "array length", value: n.into() })?;
        let mut items = Vec::with_capacity(n.min(self.input.remaining()));
        for _ in 0..n {
            match self.nested()? {
                Some(item) => items.push(item),
                None => return Err(WireError::NullField("array element")),
            }
        }
        Ok(Some(items))
    }

    pub(crate) fn throwable(&mut self) -> Result<Option<Throwable>, WireError> {
        if !self.bool()? {
            return Ok(None);
        }
        let class_name = self.string()?.unwrap_or_default();
        let message = self.string()?;
        let mut t = Throwable { class_name, message, stack_trace: Vec::new(), cause: None };
        if self.stack_trace {
            let n = self.input.i16()?;
            let n = usize::try_from(n).map_err(|_| WireError::InvalidLength {
                what: "stack trace length",
                value: n.into(),
            })?;
            t.stack_trace.reserve(n.min(self.input.remaining()));
            for _ in 0..n {
                t.stack_trace.push(StackTraceElement {
                    class_name: self.string()?,
                    method_name: self.string()?,
                    file_name: self.string()?,
                    line_number: self.int()?,
                });
            }
            self.enter()?;
            t.cause = self.throwable()?.map(Box::new);
            self.depth -= 1;
        }
        Ok(Some(t))
    }
}

/// How one field kind is marshalled for a field type.
pub(crate) trait FieldCodec<T> {
    fn write(e: &mut Encoder, v: &T) -> Result<(), WireError>;
    fn read(d: &mut Decoder, field: &'static str) -> Result<T, WireError>;
}

/// The field kinds of [`wire_struct!`] tables (see the module documentation).
pub(crate) mod kind {
    use super::*;

    pub(crate) struct Bool;
    pub(crate) struct Byte;
    pub(crate) struct Int;
    pub(crate) struct Long;
    pub(crate) struct Str;
    pub(crate) struct Bytes;
    pub(crate) struct Nested;
    pub(crate) struct Cached;
    pub(crate) struct Array;
    pub(crate) struct Throwable;
    /// Not on the wire (a field the type's own code handles).
    pub(crate) struct Skip;

    impl FieldCodec<bool> for Bool {
        fn write(e: &mut Encoder, v: &bool) -> Result<(), WireError> {
            e.bool(*v);
            Ok(())
        }
        fn read(d: &mut Decoder, _: &'static str) -> Result<bool, WireError> {
            d.bool()
        }
    }
    impl FieldCodec<i8> for Byte {
        fn write(e: &mut Encoder, v: &i8) -> Result<(), WireError> {
            e.byte(*v);
            Ok(())
        }
        fn read(d: &mut Decoder, _: &'static str) -> Result<i8, WireError> {
            d.byte()
        }
    }
    impl FieldCodec<i32> for Int {
        fn write(e: &mut Encoder, v: &i32) -> Result<(), WireError> {
            e.int(*v);
            Ok(())
        }
        fn read(d: &mut Decoder, _: &'static str) -> Result<i32, WireError> {
            d.int()
        }
    }
    impl FieldCodec<i64> for Long {
        fn write(e: &mut Encoder, v: &i64) -> Result<(), WireError> {
            e.long(*v);
            Ok(())
        }
        fn read(d: &mut Decoder, _: &'static str) -> Result<i64, WireError> {
            d.long()
        }
    }
    impl FieldCodec<Option<String>> for Str {
        fn write(e: &mut Encoder, v: &Option<String>) -> Result<(), WireError> {
            e.string(v.as_deref())
        }
        fn read(d: &mut Decoder, _: &'static str) -> Result<Option<String>, WireError> {
            d.string()
        }
    }
    /// A string that Java never leaves null here (an id's value): null is an error.
    impl FieldCodec<String> for Str {
        fn write(e: &mut Encoder, v: &String) -> Result<(), WireError> {
            e.string(Some(v))
        }
        fn read(d: &mut Decoder, field: &'static str) -> Result<String, WireError> {
            d.string()?.ok_or(WireError::NullField(field))
        }
    }
    impl FieldCodec<Option<bytes::Bytes>> for Bytes {
        fn write(e: &mut Encoder, v: &Option<bytes::Bytes>) -> Result<(), WireError> {
            e.bytes(v.as_deref())
        }
        fn read(d: &mut Decoder, _: &'static str) -> Result<Option<bytes::Bytes>, WireError> {
            d.bytes()
        }
    }
    impl<T: WireObject> FieldCodec<Option<T>> for Nested {
        fn write(e: &mut Encoder, v: &Option<T>) -> Result<(), WireError> {
            e.nested(v.as_ref())
        }
        fn read(d: &mut Decoder, _: &'static str) -> Result<Option<T>, WireError> {
            d.nested()
        }
    }
    impl<T: WireObject> FieldCodec<Option<T>> for Cached {
        fn write(e: &mut Encoder, v: &Option<T>) -> Result<(), WireError> {
            e.cached(v.as_ref())
        }
        fn read(d: &mut Decoder, _: &'static str) -> Result<Option<T>, WireError> {
            d.cached()
        }
    }
    impl<T: WireObject> FieldCodec<Option<Vec<T>>> for Array {
        fn write(e: &mut Encoder, v: &Option<Vec<T>>) -> Result<(), WireError> {
            e.array(v.as_deref())
        }
        fn read(d: &mut Decoder, _: &'static str) -> Result<Option<Vec<T>>, WireError> {
            d.array()
        }
    }
    impl FieldCodec<Option<super::Throwable>> for Throwable {
        fn write(e: &mut Encoder, v: &Option<super::Throwable>) -> Result<(), WireError> {
            e.throwable(v.as_ref())
        }
        fn read(d: &mut Decoder, _: &'static str) -> Result<Option<super::Throwable>, WireError> {
            d.throwable()
        }
    }
    impl<T: Default> FieldCodec<T> for Skip {
        fn write(_: &mut Encoder, _: &T) -> Result<(), WireError> {
            Ok(())
        }
        fn read(_: &mut Decoder, _: &'static str) -> Result<T, WireError> {
            Ok(T::default())
        }
    }
}

/// Declares an OpenWire struct from its field table and generates `write_declared` and
/// `read_declared`, which marshal the fields in table order.
///
/// `command` types start with BaseCommand's `command_id` (int) and `response_required`
/// (bool); `plain` types (ids, destinations, WireFormatInfo) have no base fields. `@ N` after
/// a kind: the field exists from protocol version N on (absent at older versions).
macro_rules! wire_struct {
    (
        $(#[$meta:meta])*
        pub struct $name:ident (command) {
            $( $(#[$fmeta:meta])* $field:ident : $ty:ty = $kind:ident $(@ $since:literal)?, )*
        }
    ) => {
        $(#[$meta])*
        #[derive(Debug, Clone, Default, PartialEq, Eq, Hash)]
        pub struct $name {
            /// The sender's sequence number of this command (responses correlate with it).
            pub command_id: i32,
            /// Whether the sender waits for a [`Response`](super::Response).
            pub response_required: bool,
            $( $(#[$fmeta])* pub $field: $ty, )*
        }

        impl $name {
            #[allow(unused_variables)]
            pub(crate) fn write_declared(
                &self,
                e: &mut $crate::openwire::marshal::Encoder,
            ) -> Result<(), $crate::openwire::WireError> {
                e.int(self.command_id);
                e.bool(self.response_required);
                $(
                    if $crate::openwire::marshal::since!(e.version $(, $since)?) {
                        <$crate::openwire::marshal::kind::$kind as
                            $crate::openwire::marshal::FieldCodec<$ty>>::write(e, &self.$field)?;
                    }
                )*
                Ok(())
            }

            #[allow(unused_variables, unused_mut)]
            pub(crate) fn read_declared(
                d: &mut $crate::openwire::marshal::Decoder,
            ) -> Result<Self, $crate::openwire::WireError> {
                let mut v = Self::default();
                v.command_id = d.int()?;
                v.response_required = d.bool()?;
                $(
                    if $crate::openwire::marshal::since!(d.version $(, $since)?) {
                        v.$field = <$crate::openwire::marshal::kind::$kind as
                            $crate::openwire::marshal::FieldCodec<$ty>>::read(
                                d, stringify!($field))?;
                    }
                )*
                Ok(v)
            }
        }
    };
    (
        $(#[$meta:meta])*
        pub struct $name:ident (plain) {
            $( $(#[$fmeta:meta])* $field:ident : $ty:ty = $kind:ident $(@ $since:literal)?, )*
        }
    ) => {
        $(#[$meta])*
        #[derive(Debug, Clone, Default, PartialEq, Eq, Hash)]
        pub struct $name {
            $( $(#[$fmeta])* pub $field: $ty, )*
        }

        impl $name {
            #[allow(unused_variables)]
            pub(crate) fn write_declared(
                &self,
                e: &mut $crate::openwire::marshal::Encoder,
            ) -> Result<(), $crate::openwire::WireError> {
                $(
                    if $crate::openwire::marshal::since!(e.version $(, $since)?) {
                        <$crate::openwire::marshal::kind::$kind as
                            $crate::openwire::marshal::FieldCodec<$ty>>::write(e, &self.$field)?;
                    }
                )*
                Ok(())
            }

            #[allow(unused_variables, unused_mut)]
            pub(crate) fn read_declared(
                d: &mut $crate::openwire::marshal::Decoder,
            ) -> Result<Self, $crate::openwire::WireError> {
                let mut v = Self::default();
                $(
                    if $crate::openwire::marshal::since!(d.version $(, $since)?) {
                        v.$field = <$crate::openwire::marshal::kind::$kind as
                            $crate::openwire::marshal::FieldCodec<$ty>>::read(
                                d, stringify!($field))?;
                    }
                )*
                Ok(v)
            }
        }
    };
}

/// `true`, or whether `version` has reached `since`.
macro_rules! since {
    ($version:expr) => {
        true
    };
    ($version:expr, $since:literal) => {
        $version >= $since
    };
}

pub(crate) use since;
pub(crate) use wire_struct;
