//! [`ProtocolHeader`]: the 8 bytes that open each layer of an AMQP 1.0 connection.
//!
//! A connection starts with `AMQP`, a protocol id, and the version 1.0.0. Id 3 opens the
//! SASL layer; after the SASL outcome both peers send id 0, the AMQP layer itself (the spec,
//! part 2.2 and 5.3). A peer that sends a header the server does not speak is answered with
//! one it does, then the socket closes.

use std::fmt;

use super::error::WireError;

/// The protocol id byte of a header: which layer the header opens.
#[derive(Debug, Clone, Copy, PartialEq, Eq, Hash)]
pub enum ProtocolId {
    /// 0: AMQP frames follow.
    Amqp,
    /// 3: SASL frames follow.
    Sasl,
}

impl ProtocolId {
    /// The byte on the wire.
    pub fn code(self) -> u8 {
        match self {
            ProtocolId::Amqp => 0,
            ProtocolId::Sasl => 3,
        }
    }
}

/// A protocol header this codec speaks: `AMQP`, an id, version 1.0.0.
#[derive(Debug, Clone, Copy, PartialEq, Eq, Hash)]
pub struct ProtocolHeader {
    /// The layer it opens.
    pub id: ProtocolId,
}

impl ProtocolHeader {
    /// `AMQP\x00\x01\x00\x00`: AMQP frames follow.
    pub const AMQP: ProtocolHeader = ProtocolHeader { id: ProtocolId::Amqp };
    /// `AMQP\x03\x01\x00\x00`: SASL frames follow.
    pub const SASL: ProtocolHeader = ProtocolHeader { id: ProtocolId::Sasl };
    /// Bytes in a header.
    pub const LEN: usize = 8;

    /// The 8 bytes on the wire.
    pub fn to_bytes(self) -> [u8; 8] {
        [b'A', b'M', b'Q', b'P', self.id.code(), 1, 0, 0]
    }

    /// Reads a header from the start of `input`: `Ok(None)` while fewer than 8 bytes have
    /// arrived and they could still become a header.
    ///
    /// Anything else is reported as soon as the first byte that cannot belong to `AMQP`
    /// arrives, so an HTTP or STOMP client learns at once that it knocked on the wrong door.
    pub fn parse(input: &[u8]) -> Result<Option<ProtocolHeader>, WireError> {
        let prefix_len = input.len().min(4);
        if input[..prefix_len] != b"AMQP"[..prefix_len] {
            return Err(WireError::NotAmqp {
                received: excerpt(input),
                looks_like: guess_protocol(input),
            });
        }
        let Some(bytes) = input.get(..Self::LEN) else { return Ok(None) };
        let mut received = [0u8; 8];
        received.copy_from_slice(bytes);
        let version_is_1_0_0 = received[5..] == [1, 0, 0];
        match received[4] {
            0 if version_is_1_0_0 => Ok(Some(ProtocolHeader::AMQP)),
            3 if version_is_1_0_0 => Ok(Some(ProtocolHeader::SASL)),
            3 => Err(WireError::UnsupportedHeader { received, answer: ProtocolHeader::SASL }),
            // AMQP 0-x, TLS (id 2) or anything newer: we speak plain AMQP 1.0.
            _ => Err(WireError::UnsupportedHeader { received, answer: ProtocolHeader::AMQP }),
        }
    }
}

impl fmt::Display for ProtocolHeader {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        write!(f, "AMQP {} 1.0.0", self.id.code())
    }
}

/// Longest excerpt of peer input quoted in an error, in characters.
const EXCERPT_CHARS: usize = 64;

/// Lossily decodes `bytes` for an error message, truncated to [`EXCERPT_CHARS`] characters.
fn excerpt(bytes: &[u8]) -> String {
    let head = &bytes[..bytes.len().min(EXCERPT_CHARS * 4)];
    String::from_utf8_lossy(head).chars().take(EXCERPT_CHARS).collect()
}

/// A guess at what a non-AMQP peer speaks, from its first bytes, for the error message.
fn guess_protocol(input: &[u8]) -> &'static str {
    const STOMP_COMMANDS: [&[u8]; 4] = [b"CONNECT\n", b"CONNECT\r\n", b"STOMP\n", b"STOMP\r\n"];
    // HTTP's CONNECT is followed by a space, STOMP's by a line end.
    const HTTP_METHODS: [&[u8]; 9] = [
        b"GET ",
        b"POST ",
        b"PUT ",
        b"HEAD ",
        b"DELETE ",
        b"OPTIONS ",
        b"PATCH ",
        b"CONNECT ",
        b"PRI ",
    ];
    if STOMP_COMMANDS.iter().any(|command| input.starts_with(command)) {
        "STOMP"
    } else if HTTP_METHODS.iter().any(|method| input.starts_with(method)) {
        "an HTTP request"
    } else if input.first() == Some(&0x16) {
        "a TLS handshake (is the client using amqps:// on a plain port?)"
    } else if input.get(5..13) == Some(&b"ActiveMQ"[..]) {
        "OpenWire (an ActiveMQ JMS client)"
    } else {
        "an unknown protocol"
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn amqp_and_sasl_headers_parse_and_print() {
        assert_eq!(ProtocolHeader::parse(b"AMQP\x00\x01\x00\x00"), Ok(Some(ProtocolHeader::AMQP)));
        assert_eq!(ProtocolHeader::parse(b"AMQP\x03\x01\x00\x00"), Ok(Some(ProtocolHeader::SASL)));
        assert_eq!(&ProtocolHeader::SASL.to_bytes(), b"AMQP\x03\x01\x00\x00");
        assert_eq!(ProtocolHeader::AMQP.to_string(), "AMQP 0 1.0.0");
    }

    #[test]
    fn a_partial_header_waits_for_more() {
        for n in 0..8 {
            assert_eq!(ProtocolHeader::parse(&b"AMQP\x03\x01\x00\x00"[..n]), Ok(None), "{n}");
        }
    }

    #[test]
    fn an_http_client_is_recognised_at_once() {
        let err = ProtocolHeader::parse(b"GET / HTTP/1.1\r\n").unwrap_err();
        assert!(matches!(&err, WireError::NotAmqp { looks_like: "an HTTP request", .. }));
        assert!(err.to_string().contains("GET / HTTP/1.1"), "{err}");
        assert_eq!(err.answer_header(), Some(ProtocolHeader::AMQP));
        // One byte is enough to know it is not AMQP.
        assert!(ProtocolHeader::parse(b"G").is_err());
    }

    #[test]
    fn a_stomp_client_is_named() {
        let err = ProtocolHeader::parse(b"CONNECT\naccept-version:1.2\n\n\0").unwrap_err();
        assert!(matches!(err, WireError::NotAmqp { looks_like: "STOMP", .. }), "{err}");
        let err = ProtocolHeader::parse(b"STOMP\nhost:x\n\n\0").unwrap_err();
        assert!(matches!(err, WireError::NotAmqp { looks_like: "STOMP", .. }), "{err}");
    }

    #[test]
    fn a_tls_client_hello_is_named() {
        let err = ProtocolHeader::parse(&[0x16, 0x03, 0x01, 0x02, 0x00]).unwrap_err();
        assert!(err.to_string().contains("TLS handshake"), "{err}");
    }

    #[test]
    fn other_amqp_versions_are_answered_with_ours() {
        let err = ProtocolHeader::parse(b"AMQP\x00\x00\x09\x01").unwrap_err();
        assert_eq!(err.answer_header(), Some(ProtocolHeader::AMQP));
        let err = ProtocolHeader::parse(b"AMQP\x03\x01\x00\x01").unwrap_err();
        assert_eq!(err.answer_header(), Some(ProtocolHeader::SASL));
        let err = ProtocolHeader::parse(b"AMQP\x02\x01\x00\x00").unwrap_err();
        assert!(matches!(err, WireError::UnsupportedHeader { received, .. } if received[4] == 2));
    }
}
