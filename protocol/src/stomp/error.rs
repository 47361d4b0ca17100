//! [`WireError`]: everything that can be wrong with the bytes a peer sent.

/// The bytes received are not an acceptable STOMP frame.
///
/// Every variant is fatal for the connection: after a wire error the stream position is
/// unknown, so the adapter should answer with an ERROR frame (see [`super::Frame::error`],
/// the `Display` text is written for the person reading it) and close. An enum rather
/// than a boxed error because decode is the hot path and callers match on it.
#[derive(Debug, thiserror::Error, Clone, PartialEq, Eq)]
#[non_exhaustive]
pub enum WireError {
    /// The frame (as far as it has arrived, or as its content-length declares) is larger
    /// than [`super::Limits::max_frame_size`].
    #[error(
        "frame of at least {size} bytes exceeds the maximum frame size of {max} bytes; \
         send smaller frames or raise the connector's maximum frame size"
    )]
    FrameTooLarge {
        /// Bytes of the frame known so far (a lower bound of its real size).
        size: usize,
        /// The limit in force.
        max: usize,
    },
    /// The frame has more headers than [`super::Limits::max_headers`].
    #[error("frame has more than the maximum of {max} headers")]
    TooManyHeaders {
        /// The limit in force.
        max: usize,
    },
    /// A header line is longer than [`super::Limits::max_header_length`].
    #[error("a header line is longer than the maximum header length of {max} bytes")]
    HeaderTooLong {
        /// The limit in force.
        max: usize,
    },
    /// The command line names no STOMP command (lossily decoded, at most 64 characters).
    #[error(
        "unknown STOMP command {0:?}; expected one of CONNECT, STOMP, SEND, SUBSCRIBE, \
         UNSUBSCRIBE, ACK, NACK, BEGIN, COMMIT, ABORT, DISCONNECT"
    )]
    UnknownCommand(String),
    /// The first byte cannot start a STOMP frame: this peer speaks something else.
    #[error(
        "the peer does not speak STOMP (a frame must start with a command such as CONNECT); \
         is a TLS or HTTP client connected to a plain STOMP port?"
    )]
    NotStomp,
    /// A header line without a `:` or with an empty name (lossily decoded, truncated).
    #[error("malformed header line {0:?}: expected name:value")]
    MalformedHeader(String),
    /// A backslash sequence that the negotiated version does not define.
    #[error(
        "invalid escape sequence {0:?} in a header; STOMP 1.1 defines only \\n, \\c and \\\\, \
         STOMP 1.2 adds \\r"
    )]
    InvalidEscape(String),
    /// A header name or value is not valid UTF-8.
    #[error("a header name or value is not valid UTF-8")]
    InvalidUtf8,
    /// The content-length header is not a non-negative decimal number.
    #[error(
        "invalid content-length header {0:?}: expected a non-negative decimal number of bytes"
    )]
    InvalidContentLength(String),
    /// The byte after the content-length bytes of the body is not NUL.
    #[error(
        "frame body is not followed by a NUL byte where its content-length says the body ends; \
         the content-length header is wrong"
    )]
    MissingNul,
    /// None of the versions in `accept-version` is one we speak (the header as received).
    #[error("none of the STOMP versions the client accepts ({0:?}) is supported; this server speaks 1.0, 1.1 and 1.2")]
    UnsupportedVersion(String),
    /// A heart-beat header that is not two comma-separated millisecond counts.
    #[error("invalid heart-beat header {0:?}: expected two comma-separated millisecond counts such as \"10000,10000\"")]
    InvalidHeartBeat(String),
}

/// Longest excerpt of peer input quoted in an error, in characters.
const EXCERPT_CHARS: usize = 64;

/// Lossily decodes `bytes` for an error message, truncated to [`EXCERPT_CHARS`] characters.
pub(crate) fn excerpt(bytes: &[u8]) -> String {
    let head = &bytes[..bytes.len().min(EXCERPT_CHARS * 4)];
    String::from_utf8_lossy(head).chars().take(EXCERPT_CHARS).collect()
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn frame_too_large_reads_as_a_sentence_with_both_numbers() {
        let text = WireError::FrameTooLarge { size: 2_097_153, max: 1_048_576 }.to_string();
        assert!(
            text.starts_with(
                "frame of at least 2097153 bytes exceeds the maximum frame size of 1048576 bytes"
            ),
            "{text}"
        );
    }

    #[test]
    fn excerpts_are_truncated_to_64_characters() {
        assert_eq!(excerpt(&[b'A'; 200]).len(), 64);
        assert_eq!(excerpt(b"GET /"), "GET /");
        assert_eq!(excerpt(&[0xff, b'A']), "\u{fffd}A");
    }
}
