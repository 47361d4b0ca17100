//! [`WireError`]: everything that can be wrong with OpenWire bytes, or with a command that
//! cannot be put into OpenWire bytes.

/// The bytes received are not acceptable OpenWire, or a value cannot be encoded.
///
/// A decode error is fatal for the connection: the stream position and the marshalling cache
/// are no longer trustworthy, so the transport should close (the Java broker does the same).
/// An enum rather than a boxed error because decoding is the hot path and callers match on it.
#[derive(Debug, thiserror::Error, Clone, PartialEq, Eq)]
#[non_exhaustive]
pub enum WireError {
    /// The frame (by its size prefix, or as far as it has arrived without one) is larger than
    /// the codec's maximum frame size, or an encoded command would be.
    #[error(
        "OpenWire frame of at least {size} bytes exceeds the maximum frame size of {max} bytes; \
         send smaller messages or raise the connector's maximum frame size"
    )]
    FrameTooLarge {
        /// Bytes of the frame known so far (a lower bound of its real size).
        size: u64,
        /// The limit in force.
        max: u64,
    },
    /// The size prefix of a frame is negative.
    #[error("OpenWire frame size prefix {0} is negative: the peer does not speak OpenWire or the stream is corrupt")]
    NegativeFrameSize(i32),
    /// The type byte names no OpenWire data structure.
    #[error("unknown OpenWire data structure type {data_type}: the peer speaks a newer or different protocol, or the stream is corrupt")]
    UnknownType {
        /// The type byte as received.
        data_type: u8,
    },
    /// The type exists in OpenWire, but not at the negotiated version.
    #[error(
        "OpenWire data structure type {data_type} does not exist in protocol version {version}"
    )]
    TypeNotInVersion {
        /// The type byte as received.
        data_type: u8,
        /// The negotiated version.
        version: u32,
    },
    /// A frame holds a data structure that is not a command (an id or a destination).
    #[error("OpenWire frame of type {data_type} is a data structure, not a command")]
    NotACommand {
        /// The type byte as received.
        data_type: u8,
    },
    /// A nested object has a type that its field cannot hold.
    #[error("OpenWire field expects a {expected}, got data structure type {found}")]
    UnexpectedType {
        /// What the field holds.
        expected: &'static str,
        /// The type byte found.
        found: u8,
    },
    /// Before the wire format is negotiated only WireFormatInfo may be exchanged.
    #[error(
        "OpenWire command of type {data_type} before the wire format was negotiated; \
         a client must send WireFormatInfo first"
    )]
    NotNegotiated {
        /// The type byte as received or asked to encode.
        data_type: u8,
    },
    /// The WireFormatInfo does not start with the magic bytes `ActiveMQ`.
    #[error("WireFormatInfo magic is {0:?}, not \"ActiveMQ\": the peer does not speak OpenWire")]
    BadMagic(Vec<u8>),
    /// The negotiated protocol version is one this codec does not implement.
    #[error("OpenWire version {0} is not supported; this broker speaks versions 1 and 9 to 12")]
    UnsupportedVersion(i64),
    /// The frame ends before the command it holds (with a size prefix: the prefix is wrong).
    #[error("OpenWire frame ends in the middle of a command: the size prefix or a length inside the frame is wrong")]
    Truncated,
    /// The command ended before the frame its size prefix announced.
    #[error("OpenWire frame of type {data_type} has {count} bytes left over after its command: the size prefix is wrong")]
    TrailingBytes {
        /// The type byte of the frame.
        data_type: u8,
        /// Bytes not consumed.
        count: usize,
    },
    /// A length, count or size field is negative or otherwise impossible.
    #[error("invalid {what} {value} in an OpenWire frame")]
    InvalidLength {
        /// What the length counts.
        what: &'static str,
        /// The value as received.
        value: i64,
    },
    /// A string is not valid (modified) UTF-8.
    #[error("a string in an OpenWire frame is not valid modified UTF-8")]
    InvalidUtf8,
    /// A string is too long for the field's length prefix.
    #[error("a string of {length} encoded bytes is too long for OpenWire (at most {max})")]
    StringTooLong {
        /// Encoded length in bytes.
        length: usize,
        /// The most the encoding allows.
        max: usize,
    },
    /// A marshalling-cache index outside the negotiated cache size.
    #[error("OpenWire marshalling cache index {index} is outside the negotiated cache of {size} entries")]
    CacheIndexOutOfRange {
        /// The index as received.
        index: i16,
        /// The negotiated cache size.
        size: usize,
    },
    /// A marshalling-cache reference to an entry the peer never sent.
    #[error("OpenWire marshalling cache index {0} refers to an entry that was never sent")]
    CacheMiss(i16),
    /// Nested objects (or exception causes) deeper than the codec allows.
    #[error("OpenWire objects nested deeper than {max} levels")]
    NestingTooDeep {
        /// The limit in force.
        max: usize,
    },
    /// A field that must hold a value is null.
    #[error("OpenWire field {0} is null but must hold a value")]
    NullField(&'static str),
    /// An unknown type byte in a primitive map, list or stream message body.
    #[error("unknown primitive type {0} in an OpenWire map, list or stream body")]
    UnknownPrimitiveType(u8),
    /// A primitive map exceeds a limit (entries, value size or nesting).
    #[error("OpenWire primitive map exceeds a limit: {0}")]
    MapLimit(String),
    /// A compressed body cannot be inflated, or a body cannot be deflated.
    #[error("compressed OpenWire message body: {0}")]
    Compression(String),
    /// A message body is not of the kind asked for, or is malformed.
    #[error("OpenWire message body: {0}")]
    InvalidBody(String),
    /// A command has too many boolean fields for one frame's boolean stream.
    #[error("OpenWire command needs {0} bytes of boolean flags, more than a frame can carry")]
    BooleanStreamTooLong(usize),
    /// The command cannot be expressed in OpenWire (e.g. an element of a list is missing).
    #[error("cannot encode OpenWire command: {0}")]
    Unencodable(String),
}
