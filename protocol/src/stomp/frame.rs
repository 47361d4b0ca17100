//! [`Frame`]: one STOMP frame as values, and [`Decoded`]: what the decoder yields.

use bytes::Bytes;

use super::Command;

/// One STOMP frame: a command, headers in wire order, and a body.
///
/// Headers are a list, not a map: STOMP allows a name to repeat, and the first occurrence
/// wins ([`Frame::get`]). Values are unescaped owned strings; escaping happens in the codec.
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct Frame {
    /// The frame's command.
    pub command: Command,
    /// Headers in the order they appear on the wire, unescaped.
    pub headers: Vec<(String, String)>,
    /// The body; empty for most commands.
    pub body: Bytes,
}

impl Frame {
    /// A frame with no headers and an empty body.
    pub fn new(command: Command) -> Frame {
        Frame { command, headers: Vec::new(), body: Bytes::new() }
    }

    /// Appends a header (builder style).
    pub fn header(mut self, name: impl Into<String>, value: impl Into<String>) -> Frame {
        self.push_header(name, value);
        self
    }

    /// Appends a header.
    pub fn push_header(&mut self, name: impl Into<String>, value: impl Into<String>) {
        self.headers.push((name.into(), value.into()));
    }

    /// The value of the first header called `name` (the STOMP 1.2 rule for repeated headers).
    pub fn get(&self, name: &str) -> Option<&str> {
        self.headers.iter().find(|(n, _)| n == name).map(|(_, v)| v.as_str())
    }

    /// Sets the body (builder style). The encoder adds `content-length`.
    pub fn with_body(mut self, body: impl Into<Bytes>) -> Frame {
        self.body = body.into();
        self
    }

    /// An ERROR frame: `message` as the short `message` header, `details` as a
    /// `text/plain` body.
    pub fn error(message: &str, details: &str) -> Frame {
        Frame::new(Command::Error)
            .header("message", message)
            .header("content-type", "text/plain")
            .with_body(Bytes::copy_from_slice(details.as_bytes()))
    }
}

/// What [`super::Codec::decode`] yields.
#[derive(Debug, Clone, PartialEq, Eq)]
pub enum Decoded {
    /// A complete frame.
    Frame(Frame),
    /// A lone end-of-line (`\n` or `\r\n`) between frames: the peer is alive.
    HeartBeat,
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn get_returns_the_first_of_repeated_headers() {
        let frame = Frame::new(Command::Message).header("foo", "first").header("foo", "second");
        assert_eq!(frame.get("foo"), Some("first"));
        assert_eq!(frame.get("bar"), None);
    }

    #[test]
    fn builder_appends_headers_in_order() {
        let mut frame = Frame::new(Command::Send).header("a", "1");
        frame.push_header("b", "2");
        assert_eq!(frame.headers, [("a".into(), "1".into()), ("b".into(), "2".into())]);
    }

    #[test]
    fn error_frame_has_message_header_and_text_body() {
        let frame = Frame::error("bad frame", "line 1\nline 2");
        assert_eq!(frame.command, Command::Error);
        assert_eq!(frame.get("message"), Some("bad frame"));
        assert_eq!(frame.get("content-type"), Some("text/plain"));
        assert_eq!(&frame.body[..], b"line 1\nline 2");
    }
}
