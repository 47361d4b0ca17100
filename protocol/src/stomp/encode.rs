//! Encoding frames: command, escaped headers, `content-length`, blank line, body, NUL.

use bytes::{BufMut, BytesMut};

use super::escape::{escape_into, Escaping};
use super::{Codec, Frame};

const CONTENT_LENGTH: &str = "content-length";

impl Codec {
    /// Appends `frame` to `dst` as the codec's version writes it.
    ///
    /// Headers are escaped per version (never for CONNECT, STOMP and CONNECTED). The encoder
    /// owns `content-length`: any such header in `frame` is replaced by the body's real
    /// length, and one is added whenever the body is not empty, so bodies containing NUL
    /// bytes survive. Lines end in `\n`; no `\r` is ever written outside the body.
    pub fn encode(&self, frame: &Frame, dst: &mut BytesMut) {
        let escaping = Escaping::for_frame(self.version(), frame.command);
        let headers_len: usize =
            frame.headers.iter().map(|(name, value)| name.len() + value.len() + 2).sum();
        // Command line, headers, content-length line, blank line, NUL.
        dst.reserve(frame.command.as_str().len() + headers_len + 40 + frame.body.len());

        dst.put_slice(frame.command.as_str().as_bytes());
        dst.put_u8(b'\n');
        let mut write_content_length = !frame.body.is_empty();
        for (name, value) in &frame.headers {
            if name == CONTENT_LENGTH {
                write_content_length = true;
                continue;
            }
            escape_into(name, escaping, dst);
            dst.put_u8(b':');
            escape_into(value, escaping, dst);
            dst.put_u8(b'\n');
        }
        if write_content_length {
            dst.put_slice(CONTENT_LENGTH.as_bytes());
            dst.put_u8(b':');
            dst.put_slice(frame.body.len().to_string().as_bytes());
            dst.put_u8(b'\n');
        }
        dst.put_u8(b'\n');
        dst.put_slice(&frame.body);
        dst.put_u8(0);
    }
}
