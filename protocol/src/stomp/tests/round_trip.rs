//! Frames survive encode then decode, and escaping follows the version.

use super::*;
use crate::stomp::Command;

#[test]
fn every_command_round_trips_in_every_version() {
    for version in Version::ALL {
        for command in Command::ALL {
            let mut codec = codec(version);
            let original = Frame::new(command)
                .header("destination", "/queue/orders")
                .header("receipt", "r-1")
                .with_body("hello");
            let wire = encode(&codec, &original);
            let decoded = frame(decode_all(&mut codec, &wire).remove(0));
            assert_eq!(decoded.command, command, "{version} {command}");
            assert_eq!(decoded.get("destination"), Some("/queue/orders"));
            assert_eq!(decoded.get("content-length"), Some("5"));
            assert_eq!(&decoded.body[..], b"hello");
        }
    }
}

#[test]
fn frame_without_body_round_trips_exactly() {
    let mut codec = codec(Version::V1_2);
    let original = Frame::new(Command::Subscribe).header("id", "0").header("destination", "/q");
    let wire = encode(&codec, &original);
    assert_eq!(&wire[..], b"SUBSCRIBE\nid:0\ndestination:/q\n\n\0");
    assert_eq!(decode_all(&mut codec, &wire), [Decoded::Frame(original)]);
}

#[test]
fn special_characters_in_headers_round_trip_in_1_2() {
    let mut codec = codec(Version::V1_2);
    let original = Frame::new(Command::Message).header("we:ird\n", "a:b\nc\\d\re");
    let wire = encode(&codec, &original);
    assert!(wire.starts_with(b"MESSAGE\nwe\\cird\\n:a\\cb\\nc\\\\d\\re\n"), "{wire:?}");
    assert_eq!(decode_all(&mut codec, &wire), [Decoded::Frame(original)]);
}

#[test]
fn special_characters_in_headers_round_trip_in_1_1_except_carriage_return() {
    let mut codec = codec(Version::V1_1);
    let original = Frame::new(Command::Send).header("k", "a:b\nc\\d");
    let wire = encode(&codec, &original);
    assert_eq!(decode_all(&mut codec, &wire), [Decoded::Frame(original)]);

    let with_cr = Frame::new(Command::Send).header("k", "a\rb");
    let wire = encode(&codec, &with_cr);
    assert_eq!(frame(decode_all(&mut codec, &wire).remove(0)).get("k"), Some("a b"));
}

#[test]
fn v1_0_headers_are_not_unescaped() {
    let mut codec = codec(Version::V1_0);
    let decoded = frame(decode_all(&mut codec, b"SEND\nfoo:a\\nb\\c:c\n\n\0").remove(0));
    assert_eq!(decoded.get("foo"), Some("a\\nb\\c:c"));
}

#[test]
fn v1_0_keeps_values_verbatim_apart_from_the_line_end() {
    let mut codec = codec(Version::V1_0);
    let decoded = frame(decode_all(&mut codec, b"SEND\n foo : bar \r\n\n\0").remove(0));
    assert_eq!(decoded.headers, [(" foo ".to_owned(), " bar ".to_owned())]);
}

#[test]
fn v1_1_decodes_newline_colon_and_backslash_escapes() {
    let mut codec = codec(Version::V1_1);
    let decoded = frame(decode_all(&mut codec, b"SEND\nfoo:a\\nb\\cc\\\\d\n\n\0").remove(0));
    assert_eq!(decoded.get("foo"), Some("a\nb:c\\d"));
}

#[test]
fn v1_2_decodes_the_carriage_return_escape() {
    let mut codec = codec(Version::V1_2);
    let decoded = frame(decode_all(&mut codec, b"SEND\nfoo:a\\rb\n\n\0").remove(0));
    assert_eq!(decoded.get("foo"), Some("a\rb"));
}

#[test]
fn connect_stomp_and_connected_are_never_escaped() {
    for command in [Command::Connect, Command::Stomp, Command::Connected] {
        let mut codec = codec(Version::V1_2);
        let original = Frame::new(command).header("passcode", "p\\a:ss");
        let wire = encode(&codec, &original);
        let expected = format!("{command}\npasscode:p\\a:ss\n\n\0");
        assert_eq!(&wire[..], expected.as_bytes());
        assert_eq!(decode_all(&mut codec, &wire), [Decoded::Frame(original)]);
    }
}

#[test]
fn body_with_nul_bytes_round_trips_under_content_length() {
    let mut codec = codec(Version::V1_2);
    let body: Vec<u8> = vec![0, 1, 0, 0, b'\n', 0xff, 0];
    let original = Frame::new(Command::Send).header("destination", "/q").with_body(body.clone());
    let wire = encode(&codec, &original);
    let decoded = frame(decode_all(&mut codec, &wire).remove(0));
    assert_eq!(&decoded.body[..], &body[..]);
    assert_eq!(decoded.get("content-length"), Some("7"));
}

#[test]
fn encoder_adds_content_length_only_for_non_empty_bodies() {
    let codec = codec(Version::V1_2);
    let empty = encode(&codec, &Frame::new(Command::Send).header("destination", "/q"));
    assert_eq!(&empty[..], b"SEND\ndestination:/q\n\n\0");
    let full = encode(&codec, &Frame::new(Command::Send).with_body("abc"));
    assert_eq!(&full[..], b"SEND\ncontent-length:3\n\nabc\0");
}

#[test]
fn encoder_replaces_a_wrong_content_length_with_the_real_one() {
    let codec = codec(Version::V1_2);
    let frame = Frame::new(Command::Send).header("content-length", "99").with_body("abc");
    assert_eq!(&encode(&codec, &frame)[..], b"SEND\ncontent-length:3\n\nabc\0");
    let empty = Frame::new(Command::Send).header("content-length", "5");
    assert_eq!(&encode(&codec, &empty)[..], b"SEND\ncontent-length:0\n\n\0");
}

#[test]
fn encoder_never_writes_carriage_returns_outside_the_body() {
    for version in Version::ALL {
        for command in [Command::Connect, Command::Send] {
            let codec = codec(version);
            let wire = encode(&codec, &Frame::new(command).header("a\r", "b\r\nc"));
            assert!(!wire.contains(&b'\r'), "{version} {command}: {wire:?}");
        }
    }
}

#[test]
fn repeated_headers_keep_their_order_and_the_first_wins() {
    let mut codec = codec(Version::V1_2);
    let original = Frame::new(Command::Message).header("foo", "1").header("foo", "2");
    let wire = encode(&codec, &original);
    let decoded = frame(decode_all(&mut codec, &wire).remove(0));
    assert_eq!(decoded.get("foo"), Some("1"));
    assert_eq!(decoded.headers.len(), 2);
}

#[test]
fn header_values_may_be_empty_and_contain_colons() {
    let mut codec = codec(Version::V1_2);
    let decoded = frame(decode_all(&mut codec, b"SEND\nempty:\nurl:tcp://h:1\n\n\0").remove(0));
    assert_eq!(decoded.get("empty"), Some(""));
    assert_eq!(decoded.get("url"), Some("tcp://h:1"));
}

#[test]
fn error_frame_round_trips_with_its_text_body() {
    let mut codec = codec(Version::V1_2);
    let original = Frame::error("bad frame", "details\nmore");
    let wire = encode(&codec, &original);
    let decoded = frame(decode_all(&mut codec, &wire).remove(0));
    assert_eq!(decoded.get("message"), Some("bad frame"));
    assert_eq!(decoded.get("content-type"), Some("text/plain"));
    assert_eq!(&decoded.body[..], b"details\nmore");
}
