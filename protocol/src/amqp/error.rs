//! [`WireError`]: everything that can be wrong with AMQP 1.0 bytes, or with a value that
//! cannot be put into AMQP bytes.

use super::header::ProtocolHeader;

/// The bytes received are not acceptable AMQP 1.0, or a value cannot be encoded.
///
/// A decode error is fatal for the connection: the stream position is no longer trustworthy.
/// The adapter answers with a `close` carrying an error (`amqp:decode-error`,
/// `amqp:frame-size-too-small`, ...) where the connection is open, or with
/// [`WireError::answer_header`] before that, then closes the socket. An enum rather than a
/// boxed error because decoding is the hot path and callers match on it.
#[derive(Debug, thiserror::Error, Clone, PartialEq, Eq)]
#[non_exhaustive]
pub enum WireError {
    /// The stream does not start with `AMQP`: the peer speaks another protocol.
    #[error(
        "the peer does not speak AMQP (received {received:?}, which looks like {looks_like}); \
         is the client pointed at the AMQP port?"
    )]
    NotAmqp {
        /// The bytes received, lossily decoded, at most 64 characters.
        received: String,
        /// A guess at the protocol that arrived (`an HTTP request`, `STOMP`, ...).
        looks_like: &'static str,
    },
    /// An `AMQP` header with a protocol id or version this codec does not speak
    /// (AMQP 0-9-1, say).
    #[error(
        "unsupported AMQP protocol header {received:02x?}; this server speaks AMQP 1.0.0 \
         (answering with {answer})"
    )]
    UnsupportedHeader {
        /// The 8 header bytes as received.
        received: [u8; 8],
        /// The header the spec says to answer with before closing.
        answer: ProtocolHeader,
    },
    /// A frame (by its size field) is larger than the maximum frame size in force, or an
    /// encoded frame would be larger than the peer accepts.
    #[error(
        "AMQP frame of {size} bytes exceeds the maximum frame size of {max} bytes; \
         send smaller frames or raise the connector's max-frame-size"
    )]
    FrameTooLarge {
        /// The frame's size in bytes.
        size: u64,
        /// The limit in force.
        max: u64,
    },
    /// The size field is smaller than the 8-byte frame header, or the data offset points
    /// before the end of the header or beyond the frame.
    #[error("malformed AMQP frame header: size {size}, data offset {doff} (in 4-byte words)")]
    BadFrameHeader {
        /// The size field.
        size: u32,
        /// The data offset field.
        doff: u8,
    },
    /// The frame type is neither AMQP (0x00) nor SASL (0x01).
    #[error("unknown AMQP frame type 0x{0:02x}; expected 0x00 (AMQP) or 0x01 (SASL)")]
    UnknownFrameType(u8),
    /// A frame of the other layer's type: SASL during the AMQP phase, or the reverse.
    #[error("{found} frame received during the {phase} phase")]
    UnexpectedFrameType {
        /// The type of frame received.
        found: &'static str,
        /// The phase the connection is in.
        phase: &'static str,
    },
    /// A value, or a frame body, ends before its declared or fixed size.
    #[error("AMQP data ends in the middle of {what}: a size inside the frame is wrong")]
    Truncated {
        /// What was being decoded.
        what: &'static str,
    },
    /// A format code that AMQP 1.0 does not define.
    #[error("invalid AMQP format code 0x{0:02x}")]
    InvalidFormatCode(u8),
    /// A compound or array declares more elements than its bytes can hold.
    #[error("AMQP {what} declares {count} elements, more than its {available} bytes can hold")]
    ImpossibleCount {
        /// The kind of value (`list`, `map`, `array`).
        what: &'static str,
        /// The count as received.
        count: u64,
        /// The bytes that would have to hold them.
        available: u64,
    },
    /// A map with an odd number of elements (keys and values alternate).
    #[error("AMQP map holds an odd number of elements ({0}); keys and values must pair up")]
    OddMapCount(u64),
    /// The declared size of a compound disagrees with the elements it holds.
    #[error("AMQP {what} declares {declared} bytes but its elements take {used}")]
    SizeMismatch {
        /// The kind of value.
        what: &'static str,
        /// Bytes declared.
        declared: u64,
        /// Bytes its elements occupy.
        used: u64,
    },
    /// Values nested deeper than the codec's limit.
    #[error("AMQP values nested deeper than {max} levels")]
    NestingTooDeep {
        /// The limit in force.
        max: usize,
    },
    /// A string or symbol that is not valid UTF-8.
    #[error("an AMQP {0} is not valid UTF-8")]
    InvalidUtf8(&'static str),
    /// A char that is not a Unicode scalar value.
    #[error("AMQP char 0x{0:08x} is not a Unicode scalar value")]
    InvalidChar(u32),
    /// A descriptor that is neither a ulong nor a symbol.
    #[error("AMQP descriptor must be a ulong or a symbol, found {0}")]
    InvalidDescriptor(String),
    /// A frame body or section holds bytes after the value it should hold.
    #[error("{count} bytes left over after the {what}")]
    TrailingBytes {
        /// What was decoded.
        what: &'static str,
        /// Bytes not consumed.
        count: usize,
    },
    /// A described value that is not the composite type expected here.
    #[error("expected {expected}, found {found}")]
    UnexpectedValue {
        /// What the position holds by the spec.
        expected: &'static str,
        /// A short rendering of what arrived.
        found: String,
    },
    /// A mandatory field of a composite is missing or null.
    #[error("mandatory field {field} of AMQP {composite} is missing or null")]
    MissingField {
        /// The composite type (`attach`, `sasl-init`, ...).
        composite: &'static str,
        /// The field's name in the spec.
        field: &'static str,
    },
    /// A field of a composite holds a value of the wrong type or out of range.
    #[error("field {field} of AMQP {composite} must be {expected}, found {found}")]
    InvalidField {
        /// The composite type.
        composite: &'static str,
        /// The field's name in the spec.
        field: &'static str,
        /// The spec's type for the field.
        expected: &'static str,
        /// A short rendering of what arrived.
        found: String,
    },
    /// A SASL PLAIN initial response that is not `authzid\0authcid\0passwd`.
    #[error("malformed SASL PLAIN response: {0}")]
    InvalidSaslPlain(&'static str),
    /// A delivery assembled from transfers is larger than allowed.
    #[error(
        "AMQP message of at least {size} bytes exceeds the maximum message size of {max} bytes"
    )]
    MessageTooLarge {
        /// Bytes received so far.
        size: u64,
        /// The limit in force.
        max: u64,
    },
    /// A continuation transfer that does not belong to the delivery being assembled.
    #[error("transfer continues {found} while delivery {expected} is incomplete")]
    InterleavedTransfer {
        /// The delivery in progress (handle and delivery id).
        expected: String,
        /// The transfer received.
        found: String,
    },
    /// A value cannot be encoded (too large for its size field, say).
    #[error("cannot encode AMQP value: {0}")]
    Unencodable(String),
}

impl WireError {
    /// The protocol header to send before closing after this error, where the spec asks
    /// for one: a peer that sent a header we do not speak is told the one we do.
    pub fn answer_header(&self) -> Option<ProtocolHeader> {
        match self {
            WireError::NotAmqp { .. } => Some(ProtocolHeader::AMQP),
            WireError::UnsupportedHeader { answer, .. } => Some(*answer),
            _ => None,
        }
    }

    /// Shorthand for a field of the wrong type.
    pub(crate) fn invalid_field(
        composite: &'static str,
        field: &'static str,
        expected: &'static str,
        found: &impl std::fmt::Debug,
    ) -> WireError {
        WireError::InvalidField { composite, field, expected, found: short_debug(found) }
    }
}

/// Longest rendering of a peer's value quoted in an error, in characters.
const RENDER_CHARS: usize = 64;

/// `{:?}` of `value`, truncated to [`RENDER_CHARS`] characters.
pub(crate) fn short_debug(value: &impl std::fmt::Debug) -> String {
    let text = format!("{value:?}");
    if text.chars().count() <= RENDER_CHARS {
        return text;
    }
    let mut cut: String = text.chars().take(RENDER_CHARS).collect();
    cut.push('…');
    cut
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn missing_field_names_the_composite_and_the_field() {
        let text = WireError::MissingField { composite: "attach", field: "role" }.to_string();
        assert_eq!(text, "mandatory field role of AMQP attach is missing or null");
    }

    #[test]
    fn long_renderings_are_cut() {
        let rendered = short_debug(&"x".repeat(500));
        assert_eq!(rendered.chars().count(), RENDER_CHARS + 1);
        assert!(rendered.ends_with('…'));
    }

    #[test]
    fn header_errors_carry_the_header_to_answer_with() {
        let err = WireError::NotAmqp { received: "GET /".into(), looks_like: "an HTTP request" };
        assert_eq!(err.answer_header(), Some(ProtocolHeader::AMQP));
        assert_eq!(WireError::UnknownFrameType(9).answer_header(), None);
    }
}
