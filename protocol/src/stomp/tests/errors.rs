//! Every way the peer's bytes can be wrong, one `WireError` variant at a time.

use super::*;

const TLS_CLIENT_HELLO: [u8; 11] =
    [0x16, 0x03, 0x01, 0x02, 0x00, 0x01, 0x00, 0x01, 0xfc, 0x03, 0x03];

#[test]
fn tls_client_hello_is_not_stomp_from_its_first_byte() {
    let mut codec = codec(Version::V1_0);
    assert_eq!(decode_once(&mut codec, &TLS_CLIENT_HELLO), Err(WireError::NotStomp));
    assert_eq!(decode_once(&mut codec, &TLS_CLIENT_HELLO[..1]), Err(WireError::NotStomp));
}

#[test]
fn frames_must_start_with_an_uppercase_letter() {
    for wire in [&b"send\n\n\0"[..], b" SEND\n\n\0", b"\0", b"\r\r\n", b"1"] {
        let mut codec = codec(Version::V1_2);
        assert_eq!(decode_once(&mut codec, wire), Err(WireError::NotStomp), "{wire:?}");
    }
}

#[test]
fn http_request_is_an_unknown_command() {
    let mut codec = codec(Version::V1_0);
    assert_eq!(
        decode_once(&mut codec, b"GET / HTTP/1.1\r\nHost: x\r\n\r\n"),
        Err(WireError::UnknownCommand("GET / HTTP/1.1".into()))
    );
}

#[test]
fn complete_unknown_command_line_is_rejected() {
    let mut codec = codec(Version::V1_2);
    assert_eq!(decode_once(&mut codec, b"FOO\n\n\0"), Err(WireError::UnknownCommand("FOO".into())));
    assert_eq!(decode_once(&mut codec, b"SEN\r\n"), Err(WireError::UnknownCommand("SEN".into())));
}

#[test]
fn command_line_is_rejected_as_soon_as_it_cannot_be_a_command() {
    let mut codec = codec(Version::V1_2);
    let mut buf = BytesMut::from(&b"CONNEC"[..]);
    assert_eq!(codec.decode(&mut buf), Ok(None));
    buf.extend_from_slice(b"TX");
    assert_eq!(codec.decode(&mut buf), Err(WireError::UnknownCommand("CONNECTX".into())));
}

#[test]
fn long_command_line_without_newline_is_rejected_at_once() {
    let mut codec = codec(Version::V1_2);
    let long = [b'A'; 40];
    assert!(matches!(decode_once(&mut codec, &long), Err(WireError::UnknownCommand(_))));
    let huge = [b'Z'; 200];
    match decode_once(&mut codec, &huge) {
        Err(WireError::UnknownCommand(name)) => assert_eq!(name.len(), 64),
        other => panic!("{other:?}"),
    }
}

#[test]
fn header_line_without_colon_is_malformed() {
    let mut codec = codec(Version::V1_2);
    assert_eq!(
        decode_once(&mut codec, b"SEND\nnocolon\n\n\0"),
        Err(WireError::MalformedHeader("nocolon".into()))
    );
}

#[test]
fn header_with_empty_name_is_malformed() {
    let mut codec = codec(Version::V1_2);
    assert_eq!(
        decode_once(&mut codec, b"SEND\n:value\n\n\0"),
        Err(WireError::MalformedHeader(":value".into()))
    );
}

#[test]
fn undefined_escape_is_rejected_in_1_1_and_1_2() {
    let mut codec = codec(Version::V1_2);
    assert_eq!(
        decode_once(&mut codec, b"SEND\nfoo:a\\tb\n\n\0"),
        Err(WireError::InvalidEscape("\\t".into()))
    );
    let mut codec = super::codec(Version::V1_1);
    assert_eq!(
        decode_once(&mut codec, b"SEND\nfoo:a\\rb\n\n\0"),
        Err(WireError::InvalidEscape("\\r".into()))
    );
}

#[test]
fn invalid_utf8_in_a_header_is_rejected() {
    let mut codec = codec(Version::V1_2);
    assert_eq!(decode_once(&mut codec, b"SEND\nfoo:\xff\n\n\0"), Err(WireError::InvalidUtf8));
    assert_eq!(decode_once(&mut codec, b"SEND\n\xc3:x\n\n\0"), Err(WireError::InvalidUtf8));
}

#[test]
fn invalid_content_length_is_rejected() {
    for value in ["abc", "-1", "", "+3", "1.5", "99999999999999999999999"] {
        let mut codec = codec(Version::V1_2);
        let wire = format!("SEND\ncontent-length:{value}\n\nabc\0");
        assert_eq!(
            decode_once(&mut codec, wire.as_bytes()),
            Err(WireError::InvalidContentLength(value.into())),
            "{value:?}"
        );
    }
}

#[test]
fn body_longer_than_its_content_length_misses_its_nul() {
    let mut codec = codec(Version::V1_2);
    assert_eq!(
        decode_once(&mut codec, b"SEND\ncontent-length:3\n\nabcd\0"),
        Err(WireError::MissingNul)
    );
}

#[test]
fn first_content_length_header_decides() {
    let mut codec = codec(Version::V1_2);
    let decoded =
        frame(decode_all(&mut codec, b"SEND\ncontent-length:1\ncontent-length:9\n\na\0").remove(0));
    assert_eq!(&decoded.body[..], b"a");
}

#[test]
fn error_messages_are_sentences_for_people() {
    let errors = [
        WireError::FrameTooLarge { size: 2, max: 1 },
        WireError::TooManyHeaders { max: 1 },
        WireError::HeaderTooLong { max: 1 },
        WireError::UnknownCommand("FOO".into()),
        WireError::NotStomp,
        WireError::MalformedHeader("x".into()),
        WireError::InvalidEscape("\\t".into()),
        WireError::InvalidUtf8,
        WireError::InvalidContentLength("x".into()),
        WireError::MissingNul,
        WireError::UnsupportedVersion("2.0".into()),
        WireError::InvalidHeartBeat("x".into()),
    ];
    for error in errors {
        let text = error.to_string();
        assert!(text.len() > 30, "{text}");
        assert!(text.starts_with(|c: char| c.is_lowercase()), "{text}");
        assert!(!text.contains('{'), "{text}");
    }
}
