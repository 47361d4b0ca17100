//! Message bodies and properties: reading and building [`Message::content`] and
//! [`Message::marshalled_properties`] as the Java client lays them out.
//!
//! | type | content |
//! |---|---|
//! | Text | int length (`-1`: null) and modified UTF-8 (`MarshallingSupport.writeUTF8`) |
//! | Map | a primitive map |
//! | Stream | typed values one after another, as in a primitive list without the count |
//! | Bytes | the bytes |
//! | Object | Java serialization of the object (opaque here) |
//!
//! With `compressed` set the content is deflated (java.util.zip, zlib format) as a whole,
//! except BytesMessage, whose compressed form is the 4-byte uncompressed length followed by
//! the zlib stream.

use std::io::{Read, Write};

use bytes::{BufMut, Bytes};
use flate2::read::ZlibDecoder;
use flate2::write::ZlibEncoder;
use flate2::Compression;

use super::commands::{Message, MessageType};
use super::error::WireError;
use super::map::{put_utf8_int, MapLimits, PrimitiveMap, PrimitiveValue};
use super::primitives::{decode_modified_utf8, Reader};

/// ActiveMQ's default bound on an inflated body (`maxInflatedDataSize`): 100 MiB.
pub const DEFAULT_MAX_INFLATED_SIZE: usize = 100 * 1024 * 1024;

/// A message body, decoded.
#[derive(Debug, Clone, PartialEq, Eq)]
pub enum Body {
    /// No content.
    Empty,
    /// A TextMessage's text (`None`: `setText(null)`).
    Text(Option<String>),
    /// A MapMessage's map.
    Map(PrimitiveMap),
    /// A StreamMessage's values.
    Stream(Vec<PrimitiveValue>),
    /// A BytesMessage's bytes.
    Bytes(Bytes),
    /// An ObjectMessage's serialized Java object.
    Object(Bytes),
}

/// Inflates a zlib stream, refusing to produce more than `max` bytes.
pub fn inflate(data: &[u8], max: usize) -> Result<Vec<u8>, WireError> {
    let mut out = Vec::new();
    let limit = u64::try_from(max).unwrap_or(u64::MAX).saturating_add(1);
    ZlibDecoder::new(data)
        .take(limit)
        .read_to_end(&mut out)
        .map_err(|e| WireError::Compression(e.to_string()))?;
    if out.len() > max {
        return Err(WireError::Compression(format!(
            "the body inflates to more than the limit of {max} bytes"
        )));
    }
    Ok(out)
}

/// Deflates `data` into a zlib stream (java.util.zip's default level).
pub fn deflate(data: &[u8]) -> Vec<u8> {
    let mut enc = ZlibEncoder::new(Vec::new(), Compression::default());
    // Writing to a Vec cannot fail.
    let _ = enc.write_all(data);
    enc.finish().unwrap_or_default()
}

impl Message {
    /// The properties (an empty map when there are none).
    pub fn properties(&self) -> Result<PrimitiveMap, WireError> {
        match &self.marshalled_properties {
            Some(bytes) => PrimitiveMap::decode(bytes, &MapLimits::MESSAGE),
            None => Ok(PrimitiveMap::new()),
        }
    }

    /// Replaces the properties (none when `properties` is empty).
    pub fn set_properties(&mut self, properties: &PrimitiveMap) -> Result<(), WireError> {
        self.marshalled_properties =
            if properties.is_empty() { None } else { Some(properties.to_bytes()?) };
        Ok(())
    }

    /// The content, inflated if compressed (inflating at most `max_inflated` bytes).
    pub fn uncompressed_content(&self, max_inflated: usize) -> Result<Option<Bytes>, WireError> {
        let Some(content) = &self.content else { return Ok(None) };
        if !self.compressed {
            return Ok(Some(content.clone()));
        }
        if self.body_type == MessageType::Bytes {
            let mut r = Reader::new(content);
            let len = r.i32()?;
            let len = usize::try_from(len).map_err(|_| {
                WireError::InvalidBody(format!("compressed BytesMessage length {len}"))
            })?;
            if len > max_inflated {
                return Err(WireError::Compression(format!(
                    "the body inflates to {len} bytes, more than the limit of {max_inflated}"
                )));
            }
            let out = inflate(&content[4..], len)?;
            if out.len() != len {
                return Err(WireError::Compression(format!(
                    "the body inflates to {} bytes, not the {len} announced",
                    out.len()
                )));
            }
            return Ok(Some(out.into()));
        }
        Ok(Some(inflate(content, max_inflated)?.into()))
    }

    /// Sets the content from its uncompressed form, deflating it if `compress`.
    pub fn set_uncompressed_content(
        &mut self,
        content: Option<Bytes>,
        compress: bool,
    ) -> Result<(), WireError> {
        self.compressed = compress && content.is_some();
        self.content = match content {
            Some(raw) if compress => {
                let deflated = deflate(&raw);
                if self.body_type == MessageType::Bytes {
                    let mut out = Vec::with_capacity(4 + deflated.len());
                    out.put_i32(super::map::int_len(raw.len())?);
                    out.extend_from_slice(&deflated);
                    Some(out.into())
                } else {
                    Some(deflated.into())
                }
            }
            other => other,
        };
        Ok(())
    }

    /// The decoded body, by [`Message::body_type`].
    pub fn body(&self, max_inflated: usize) -> Result<Body, WireError> {
        let Some(content) = self.uncompressed_content(max_inflated)? else {
            return Ok(match self.body_type {
                MessageType::Text => Body::Text(None),
                _ => Body::Empty,
            });
        };
        Ok(match self.body_type {
            MessageType::Text => Body::Text(decode_text(&content)?),
            MessageType::Map => Body::Map(PrimitiveMap::decode(&content, &MapLimits::MESSAGE)?),
            MessageType::Stream => Body::Stream(decode_stream(&content)?),
            MessageType::Bytes => Body::Bytes(content),
            MessageType::Object => Body::Object(content),
            MessageType::Message | MessageType::Blob => Body::Empty,
        })
    }

    /// Alias of [`Message::body`] kept for fuzzing: decodes whatever the content holds.
    pub fn decoded_content(&self, max_inflated: usize) -> Result<Body, WireError> {
        self.body(max_inflated)
    }

    /// A TextMessage's text.
    pub fn text(&self) -> Result<Option<String>, WireError> {
        match self.body(DEFAULT_MAX_INFLATED_SIZE)? {
            Body::Text(t) => Ok(t),
            _ => Err(WireError::InvalidBody(format!("a {:?} message has no text", self.body_type))),
        }
    }

    /// Makes this a TextMessage holding `text`, deflated if `compress`.
    pub fn set_text(&mut self, text: Option<&str>, compress: bool) -> Result<(), WireError> {
        self.body_type = MessageType::Text;
        let content = match text {
            Some(t) => {
                let mut out = Vec::new();
                put_utf8_int(t, &mut out)?;
                Some(Bytes::from(out))
            }
            None => None,
        };
        self.set_uncompressed_content(content, compress)
    }

    /// Makes this a MapMessage holding `map`, deflated if `compress`.
    pub fn set_map(&mut self, map: &PrimitiveMap, compress: bool) -> Result<(), WireError> {
        self.body_type = MessageType::Map;
        self.set_uncompressed_content(Some(map.to_bytes()?), compress)
    }

    /// Makes this a StreamMessage holding `values`, deflated if `compress`.
    pub fn set_stream(
        &mut self,
        values: &[PrimitiveValue],
        compress: bool,
    ) -> Result<(), WireError> {
        self.body_type = MessageType::Stream;
        let mut out = Vec::new();
        for v in values {
            v.encode(&mut out)?;
        }
        self.set_uncompressed_content(Some(out.into()), compress)
    }

    /// Makes this a BytesMessage holding `bytes`, deflated if `compress`.
    pub fn set_bytes(&mut self, bytes: Bytes, compress: bool) -> Result<(), WireError> {
        self.body_type = MessageType::Bytes;
        self.set_uncompressed_content(Some(bytes), compress)
    }
}

/// A TextMessage's content: int length (`-1`: null) and modified UTF-8.
pub fn decode_text(content: &[u8]) -> Result<Option<String>, WireError> {
    let mut r = Reader::new(content);
    let len = r.i32()?;
    if len == -1 {
        return Ok(None);
    }
    let len = usize::try_from(len)
        .map_err(|_| WireError::InvalidBody(format!("text length {len} is negative")))?;
    decode_modified_utf8(r.take(len)?).map(Some)
}

/// A StreamMessage's content: typed values to the end.
pub fn decode_stream(content: &[u8]) -> Result<Vec<PrimitiveValue>, WireError> {
    let mut values = Vec::new();
    let mut rest = content;
    while !rest.is_empty() {
        let (value, used) = PrimitiveValue::decode(rest, &MapLimits::MESSAGE)?;
        values.push(value);
        rest = &rest[used..];
    }
    Ok(values)
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn text_round_trips_plain_and_compressed() {
        for compress in [false, true] {
            let mut m = Message::default();
            let text = "compressible text ".repeat(200) + "\0\u{1F600}";
            m.set_text(Some(&text), compress).unwrap();
            assert_eq!(m.compressed, compress);
            assert_eq!(m.text().unwrap().as_deref(), Some(text.as_str()));
        }
    }

    #[test]
    fn compressed_bytes_carry_their_length() {
        let mut m = Message::new(MessageType::Bytes);
        m.set_bytes(Bytes::from(vec![7u8; 1000]), true).unwrap();
        let content = m.content.clone().unwrap();
        assert_eq!(&content[..4], &1000i32.to_be_bytes());
        assert!(content.len() < 100);
        assert_eq!(m.body(1 << 20).unwrap(), Body::Bytes(Bytes::from(vec![7u8; 1000])));
        assert!(m.body(999).is_err());
    }

    #[test]
    fn inflating_past_the_limit_is_refused() {
        let bomb = deflate(&vec![0u8; 1 << 20]);
        assert!(inflate(&bomb, 1 << 10).is_err());
        assert_eq!(inflate(&bomb, 1 << 20).unwrap().len(), 1 << 20);
        assert!(inflate(b"not zlib", 100).is_err());
    }

    #[test]
    fn stream_and_map_bodies_round_trip() {
        let mut m = Message::default();
        let values = vec![PrimitiveValue::Int(7), "seven".into(), PrimitiveValue::Null];
        m.set_stream(&values, false).unwrap();
        assert_eq!(m.body(1 << 20).unwrap(), Body::Stream(values));
        let mut map = PrimitiveMap::new();
        map.insert("i", 42);
        m.set_map(&map, true).unwrap();
        assert_eq!(m.body(1 << 20).unwrap(), Body::Map(map));
    }

    #[test]
    fn null_text_is_minus_one() {
        assert_eq!(decode_text(&(-1i32).to_be_bytes()).unwrap(), None);
        assert!(decode_text(&(-2i32).to_be_bytes()).is_err());
        assert_eq!(decode_text(&[0, 0, 0, 9, b'a']), Err(WireError::Truncated));
    }
}
