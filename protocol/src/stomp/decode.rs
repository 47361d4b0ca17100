//! The incremental decoder.
//!
//! The decoder never consumes part of a frame: the caller's buffer keeps every byte of the
//! frame being received until the frame is complete, and [`DecodeState`] remembers how far
//! the parse got (command, headers parsed so far, where the body starts, how far the body
//! has been searched for its NUL). Each call resumes there, so a frame arriving in many
//! pieces is parsed in time linear in its size, and each call checks the limits against
//! what has arrived so far.

use bytes::{Buf, Bytes, BytesMut};

use super::error::excerpt;
use super::escape::{unescape, Escaping};
use super::{Codec, Command, Decoded, Frame, WireError};

/// How far the decoder got in the frame at the front of the buffer.
///
/// Offsets are from the start of the caller's buffer, which is also the start of the frame:
/// bytes are consumed only when a whole frame or heart-beat is returned.
#[derive(Debug, Default)]
pub(crate) struct DecodeState {
    /// The command, once its line is complete; `None` between frames.
    command: Option<Command>,
    /// Headers parsed so far, unescaped.
    headers: Vec<(String, String)>,
    /// Where the body starts and how long it says it is, once the blank line has been seen.
    body: Option<BodyStart>,
    /// Start of the header line being parsed.
    line_start: usize,
    /// Bytes before this offset have been searched for the current terminator (the `\n` of
    /// the current line, or the body's NUL) and do not contain it.
    scanned: usize,
}

#[derive(Debug, Clone, Copy)]
struct BodyStart {
    /// Offset of the first body byte.
    start: usize,
    /// The body length from `content-length`, if the frame has one.
    length: Option<usize>,
}

/// What the start of the buffer turned out to be, between frames.
enum Start {
    /// A complete, known command line; the frame continues.
    Command(Command),
    /// A heart-beat, or not enough bytes to know: return this.
    Done(Option<Decoded>),
}

impl Codec {
    /// Decodes the next frame or heart-beat from the front of `buf`.
    ///
    /// Returns `Ok(None)` when more bytes are needed; nothing is consumed then, and the
    /// caller must only append to `buf` before calling again (the codec remembers how far
    /// it parsed). Otherwise exactly the bytes of the returned frame or heart-beat are
    /// consumed; end-of-lines after a frame's NUL come back as heart-beats.
    ///
    /// An error means the peer broke the protocol or a limit; the connection cannot
    /// continue (the decoder resets, but the stream position is lost).
    pub fn decode(&mut self, buf: &mut BytesMut) -> Result<Option<Decoded>, WireError> {
        if buf.len() < self.state.scanned {
            // The caller dropped bytes we had already looked at: start this frame afresh.
            self.state = DecodeState::default();
        }
        let result = self.decode_step(buf);
        if result.is_err() {
            self.state = DecodeState::default();
        }
        result
    }

    fn decode_step(&mut self, buf: &mut BytesMut) -> Result<Option<Decoded>, WireError> {
        let command = match self.state.command {
            Some(command) => command,
            None => match self.decode_start(buf)? {
                Start::Command(command) => command,
                Start::Done(decoded) => return Ok(decoded),
            },
        };
        let body = match self.state.body {
            Some(body) => body,
            None => match self.decode_headers(command, buf)? {
                Some(body) => body,
                None => return Ok(None),
            },
        };
        self.decode_body(command, body, buf)
    }

    /// Between frames: a heart-beat, or the command line of the next frame.
    fn decode_start(&mut self, buf: &mut BytesMut) -> Result<Start, WireError> {
        let Some(&first) = buf.first() else {
            return Ok(Start::Done(None));
        };
        match first {
            b'\n' => {
                buf.advance(1);
                return Ok(Start::Done(Some(Decoded::HeartBeat)));
            }
            b'\r' => {
                return match buf.get(1) {
                    None => Ok(Start::Done(None)),
                    Some(b'\n') => {
                        buf.advance(2);
                        Ok(Start::Done(Some(Decoded::HeartBeat)))
                    }
                    Some(_) => Err(WireError::NotStomp),
                };
            }
            b'A'..=b'Z' => {}
            _ => return Err(WireError::NotStomp),
        }
        let Some(eol) = find(buf, self.state.scanned, b'\n') else {
            // Reject as soon as the bytes cannot grow into a command (an HTTP request, say),
            // rather than buffering a line that can never be valid.
            if !Command::is_prefix_of_any(buf) {
                return Err(WireError::UnknownCommand(excerpt(buf)));
            }
            self.state.scanned = buf.len();
            return Ok(Start::Done(None));
        };
        let line = strip_cr(&buf[..eol]);
        let command =
            Command::parse(line).ok_or_else(|| WireError::UnknownCommand(excerpt(line)))?;
        self.state.command = Some(command);
        self.state.line_start = eol + 1;
        self.state.scanned = eol + 1;
        Ok(Start::Command(command))
    }

    /// Parses header lines up to the blank line; `None` if it has not arrived yet.
    fn decode_headers(
        &mut self,
        command: Command,
        buf: &BytesMut,
    ) -> Result<Option<BodyStart>, WireError> {
        let limits = self.limits();
        let escaping = Escaping::for_frame(self.version(), command);
        loop {
            let state = &mut self.state;
            let Some(eol) = find(buf, state.scanned, b'\n') else {
                // Every buffered byte belongs to this frame, whose headers are unfinished.
                if strip_cr(&buf[state.line_start..]).len() > limits.max_header_length {
                    return Err(WireError::HeaderTooLong { max: limits.max_header_length });
                }
                if buf.len() > limits.max_frame_size {
                    return Err(WireError::FrameTooLarge {
                        size: buf.len(),
                        max: limits.max_frame_size,
                    });
                }
                state.scanned = buf.len();
                return Ok(None);
            };
            if eol + 1 > limits.max_frame_size {
                return Err(WireError::FrameTooLarge { size: eol + 1, max: limits.max_frame_size });
            }
            let line = strip_cr(&buf[state.line_start..eol]);
            state.line_start = eol + 1;
            state.scanned = eol + 1;

            if line.is_empty() {
                let body = BodyStart { start: eol + 1, length: content_length(&state.headers)? };
                if let Some(length) = body.length {
                    // Whole frame: what precedes the body, the body, the NUL.
                    let size = body.start.saturating_add(length).saturating_add(1);
                    if size > limits.max_frame_size {
                        return Err(WireError::FrameTooLarge { size, max: limits.max_frame_size });
                    }
                }
                state.body = Some(body);
                return Ok(Some(body));
            }
            if line.len() > limits.max_header_length {
                return Err(WireError::HeaderTooLong { max: limits.max_header_length });
            }
            if state.headers.len() >= limits.max_headers {
                return Err(WireError::TooManyHeaders { max: limits.max_headers });
            }
            let colon = match line.iter().position(|&b| b == b':') {
                Some(colon) if colon > 0 => colon,
                _ => return Err(WireError::MalformedHeader(excerpt(line))),
            };
            let name = unescape(&line[..colon], escaping)?;
            let value = unescape(&line[colon + 1..], escaping)?;
            state.headers.push((name, value));
        }
    }

    /// Reads the body and its NUL; `None` if they have not fully arrived.
    fn decode_body(
        &mut self,
        command: Command,
        body: BodyStart,
        buf: &mut BytesMut,
    ) -> Result<Option<Decoded>, WireError> {
        let max = self.limits().max_frame_size;
        let end = match body.length {
            Some(length) => {
                // The size was checked against the limit when the headers ended.
                let end = body.start + length;
                match buf.get(end) {
                    None => return Ok(None),
                    Some(0) => end,
                    Some(_) => return Err(WireError::MissingNul),
                }
            }
            None => {
                let from = self.state.scanned.max(body.start);
                match find(buf, from, 0) {
                    Some(nul) if nul + 1 > max => {
                        return Err(WireError::FrameTooLarge { size: nul + 1, max })
                    }
                    Some(nul) => nul,
                    None if buf.len() > max => {
                        return Err(WireError::FrameTooLarge { size: buf.len(), max })
                    }
                    None => {
                        self.state.scanned = buf.len();
                        return Ok(None);
                    }
                }
            }
        };
        // A copy, not a slice of `buf`: a body kept beyond the frame (queued for delivery,
        // say) must not pin the whole read buffer.
        let bytes = Bytes::copy_from_slice(&buf[body.start..end]);
        buf.advance(end + 1);
        let state = std::mem::take(&mut self.state);
        Ok(Some(Decoded::Frame(Frame { command, headers: state.headers, body: bytes })))
    }
}

/// The body length declared by the first `content-length` header, if any.
fn content_length(headers: &[(String, String)]) -> Result<Option<usize>, WireError> {
    let Some((_, value)) = headers.iter().find(|(name, _)| name == "content-length") else {
        return Ok(None);
    };
    let digits = value.trim();
    if digits.is_empty() || !digits.bytes().all(|b| b.is_ascii_digit()) {
        return Err(WireError::InvalidContentLength(value.clone()));
    }
    digits.parse().map(Some).map_err(|_| WireError::InvalidContentLength(value.clone()))
}

/// Position of the first `byte` in `buf` at or after `from`.
fn find(buf: &[u8], from: usize, byte: u8) -> Option<usize> {
    buf.get(from..)?.iter().position(|&b| b == byte).map(|i| i + from)
}

/// `line` without the `\r` of a CRLF line end.
fn strip_cr(line: &[u8]) -> &[u8] {
    line.strip_suffix(b"\r").unwrap_or(line)
}
