//! Header escaping, which depends on the version and the command.
//!
//! STOMP 1.0 has no escaping. 1.1 escapes `\n` as `\\n`, `:` as `\\c` and `\\` as `\\\\`;
//! 1.2 adds `\r` as `\\r`. CONNECT, STOMP and CONNECTED are never escaped, whatever the
//! version, because they are exchanged before (or while) a version is agreed.

use bytes::{BufMut, BytesMut};

use super::{Command, Version, WireError};

/// The escaping that applies to one frame's headers.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub(crate) enum Escaping {
    /// STOMP 1.0 and the CONNECT/STOMP/CONNECTED frames: text is verbatim.
    Verbatim,
    /// STOMP 1.1: `\n`, `\c`, `\\`.
    V1_1,
    /// STOMP 1.2: `\n`, `\c`, `\\`, `\r`.
    V1_2,
}

impl Escaping {
    pub(crate) fn for_frame(version: Version, command: Command) -> Escaping {
        if !command.escapes_headers() {
            return Escaping::Verbatim;
        }
        match version {
            Version::V1_0 => Escaping::Verbatim,
            Version::V1_1 => Escaping::V1_1,
            Version::V1_2 => Escaping::V1_2,
        }
    }
}

/// Decodes a header name or value as it appeared on the wire into an owned string.
pub(crate) fn unescape(raw: &[u8], escaping: Escaping) -> Result<String, WireError> {
    let text = std::str::from_utf8(raw).map_err(|_| WireError::InvalidUtf8)?;
    if escaping == Escaping::Verbatim || !raw.contains(&b'\\') {
        return Ok(text.to_owned());
    }
    let mut out = String::with_capacity(text.len());
    let mut chars = text.chars();
    while let Some(c) = chars.next() {
        if c != '\\' {
            out.push(c);
            continue;
        }
        let decoded = match chars.next() {
            Some('n') => '\n',
            Some('c') => ':',
            Some('\\') => '\\',
            Some('r') if escaping == Escaping::V1_2 => '\r',
            Some(other) => return Err(WireError::InvalidEscape(format!("\\{other}"))),
            None => return Err(WireError::InvalidEscape("\\".to_owned())),
        };
        out.push(decoded);
    }
    Ok(out)
}

/// Writes a header name or value, escaped as `escaping` says.
///
/// A line break cannot be written verbatim without ending the header line, and 1.1 has no
/// escape for `\r`; where the wire cannot carry a `\r` or `\n`, it is written as a space, so
/// the frame stays well formed and no `\r` is ever emitted.
pub(crate) fn escape_into(text: &str, escaping: Escaping, dst: &mut BytesMut) {
    let special = |b: u8| match escaping {
        Escaping::Verbatim => matches!(b, b'\n' | b'\r'),
        Escaping::V1_1 | Escaping::V1_2 => matches!(b, b'\n' | b'\r' | b':' | b'\\'),
    };
    if !text.bytes().any(special) {
        dst.put_slice(text.as_bytes());
        return;
    }
    dst.reserve(text.len() + 8);
    for &b in text.as_bytes() {
        match (b, escaping) {
            (b'\n' | b'\r', Escaping::Verbatim) => dst.put_u8(b' '),
            (other, Escaping::Verbatim) => dst.put_u8(other),
            (b'\r', Escaping::V1_1) => dst.put_u8(b' '),
            (b'\r', Escaping::V1_2) => dst.put_slice(b"\\r"),
            (b'\n', _) => dst.put_slice(b"\\n"),
            (b':', _) => dst.put_slice(b"\\c"),
            (b'\\', _) => dst.put_slice(b"\\\\"),
            (other, _) => dst.put_u8(other),
        }
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    fn escaped(text: &str, escaping: Escaping) -> String {
        let mut dst = BytesMut::new();
        escape_into(text, escaping, &mut dst);
        String::from_utf8(dst.to_vec()).unwrap()
    }

    #[test]
    fn escaping_depends_on_version_and_exempts_connect_frames() {
        assert_eq!(Escaping::for_frame(Version::V1_0, Command::Send), Escaping::Verbatim);
        assert_eq!(Escaping::for_frame(Version::V1_1, Command::Send), Escaping::V1_1);
        assert_eq!(Escaping::for_frame(Version::V1_2, Command::Message), Escaping::V1_2);
        for command in [Command::Connect, Command::Stomp, Command::Connected] {
            assert_eq!(Escaping::for_frame(Version::V1_2, command), Escaping::Verbatim);
        }
    }

    #[test]
    fn v1_2_escapes_and_unescapes_all_four_specials() {
        let text = "a:b\nc\\d\re";
        let wire = escaped(text, Escaping::V1_2);
        assert_eq!(wire, "a\\cb\\nc\\\\d\\re");
        assert_eq!(unescape(wire.as_bytes(), Escaping::V1_2).unwrap(), text);
    }

    #[test]
    fn v1_1_has_no_carriage_return_escape() {
        assert_eq!(escaped("a\rb:c", Escaping::V1_1), "a b\\cc");
        assert_eq!(unescape(b"a\\rb", Escaping::V1_1), Err(WireError::InvalidEscape("\\r".into())));
    }

    #[test]
    fn verbatim_text_keeps_backslashes_and_colons_but_not_line_breaks() {
        assert_eq!(escaped("a:b\\c\nd\re", Escaping::Verbatim), "a:b\\c d e");
        assert_eq!(unescape(b"a\\tb:c", Escaping::Verbatim).unwrap(), "a\\tb:c");
    }

    #[test]
    fn undefined_and_dangling_escapes_are_rejected() {
        assert_eq!(unescape(b"a\\tb", Escaping::V1_2), Err(WireError::InvalidEscape("\\t".into())));
        assert_eq!(unescape(b"ab\\", Escaping::V1_1), Err(WireError::InvalidEscape("\\".into())));
    }

    #[test]
    fn invalid_utf8_is_rejected_in_every_mode() {
        for escaping in [Escaping::Verbatim, Escaping::V1_1, Escaping::V1_2] {
            assert_eq!(unescape(&[b'a', 0xff], escaping), Err(WireError::InvalidUtf8));
        }
    }
}
