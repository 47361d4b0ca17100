//! Frame boundaries: partial input, heart-beats, line ends, bodies.

use super::*;
use crate::stomp::Command;

#[test]
fn partial_frame_returns_none_and_consumes_nothing() {
    let mut codec = codec(Version::V1_2);
    let mut buf = BytesMut::from(&b"SEND\ndestination:/q\n\nhel"[..]);
    assert_eq!(codec.decode(&mut buf), Ok(None));
    assert_eq!(&buf[..], b"SEND\ndestination:/q\n\nhel");
    buf.extend_from_slice(b"lo\0");
    let decoded = frame(codec.decode(&mut buf).unwrap().unwrap());
    assert_eq!(&decoded.body[..], b"hello");
    assert!(buf.is_empty());
}

#[test]
fn decode_consumes_exactly_one_frame_at_a_time() {
    let mut codec = codec(Version::V1_2);
    let mut buf = BytesMut::from(&b"SEND\n\na\0SEND\n\nb\0SEN"[..]);
    assert_eq!(&frame(codec.decode(&mut buf).unwrap().unwrap()).body[..], b"a");
    assert_eq!(&buf[..], b"SEND\n\nb\0SEN");
    assert_eq!(&frame(codec.decode(&mut buf).unwrap().unwrap()).body[..], b"b");
    assert_eq!(codec.decode(&mut buf), Ok(None));
    assert_eq!(&buf[..], b"SEN");
}

#[test]
fn body_split_byte_by_byte_decodes_like_the_whole() {
    for with_length in [true, false] {
        let mut codec = codec(Version::V1_2);
        let body = if with_length { &b"a\0b\nc"[..] } else { &b"a b\nc"[..] };
        let mut original = Frame::new(Command::Send).header("destination", "/q/x");
        original.body = bytes::Bytes::copy_from_slice(body);
        let mut wire = encode(&codec, &original);
        if !with_length {
            wire = BytesMut::from(&b"SEND\ndestination:/q/x\n\na b\nc\0"[..]);
        }
        let expected = decode_all(&mut codec, &wire);
        assert_eq!(decode_byte_by_byte(&mut codec, &wire), Ok(expected));
    }
}

#[test]
fn several_frames_and_heart_beats_byte_by_byte() {
    let mut codec = codec(Version::V1_1);
    let wire = b"\nSEND\nk:v\\c\n\nx\0\r\nMESSAGE\ncontent-length:2\n\n\0\0\0\n\n";
    let decoded = decode_byte_by_byte(&mut codec, wire).unwrap();
    assert_eq!(decoded.len(), 6, "{decoded:?}");
    assert_eq!(decoded[0], Decoded::HeartBeat);
    assert_eq!(frame(decoded[1].clone()).get("k"), Some("v:"));
    assert_eq!(decoded[2], Decoded::HeartBeat);
    assert_eq!(&frame(decoded[3].clone()).body[..], b"\0\0");
    assert_eq!(&decoded[4..], [Decoded::HeartBeat, Decoded::HeartBeat]);
}

#[test]
fn heart_beats_are_lone_line_ends_between_frames() {
    let mut codec = codec(Version::V1_2);
    let decoded = decode_all(&mut codec, b"\n\r\nSEND\n\n\0\n");
    assert_eq!(decoded.len(), 4);
    assert_eq!(decoded[0], Decoded::HeartBeat);
    assert_eq!(decoded[1], Decoded::HeartBeat);
    assert_eq!(frame(decoded[2].clone()).command, Command::Send);
    assert_eq!(decoded[3], Decoded::HeartBeat);
}

#[test]
fn a_lone_carriage_return_waits_for_its_line_feed() {
    let mut codec = codec(Version::V1_2);
    let mut buf = BytesMut::from(&b"\r"[..]);
    assert_eq!(codec.decode(&mut buf), Ok(None));
    buf.extend_from_slice(b"\n");
    assert_eq!(codec.decode(&mut buf), Ok(Some(Decoded::HeartBeat)));
}

#[test]
fn crlf_line_ends_are_accepted_everywhere() {
    let mut codec = codec(Version::V1_2);
    let decoded =
        frame(decode_all(&mut codec, b"SEND\r\ndestination:/q\r\nfoo:bar\r\n\r\nbody\0").remove(0));
    assert_eq!(decoded.command, Command::Send);
    assert_eq!(decoded.get("destination"), Some("/q"));
    assert_eq!(decoded.get("foo"), Some("bar"));
    assert_eq!(&decoded.body[..], b"body");
}

#[test]
fn body_without_content_length_ends_at_the_first_nul() {
    let mut codec = codec(Version::V1_2);
    let mut buf = BytesMut::from(&b"SEND\n\nab\0cd\0"[..]);
    assert_eq!(&frame(codec.decode(&mut buf).unwrap().unwrap()).body[..], b"ab");
    assert_eq!(&buf[..], b"cd\0");
}

#[test]
fn zero_content_length_means_an_empty_body() {
    let mut codec = codec(Version::V1_2);
    let decoded = frame(decode_all(&mut codec, b"SEND\ncontent-length:0\n\n\0").remove(0));
    assert!(decoded.body.is_empty());
}

#[test]
fn content_length_tolerates_surrounding_spaces() {
    let mut codec = codec(Version::V1_0);
    let decoded = frame(decode_all(&mut codec, b"SEND\ncontent-length: 2 \n\nab\0").remove(0));
    assert_eq!(&decoded.body[..], b"ab");
}

#[test]
fn large_body_arriving_in_small_chunks_decodes_once_complete() {
    let mut codec = codec(Version::V1_2);
    let body: Vec<u8> = (0..2 * 1024 * 1024).map(|i| (i % 251) as u8).collect();
    for with_length in [true, false] {
        let mut wire = BytesMut::new();
        if with_length {
            let frame = Frame::new(Command::Send).with_body(body.clone());
            codec.encode(&frame, &mut wire);
        } else {
            wire.extend_from_slice(b"SEND\n\n");
            wire.extend(body.iter().map(|&b| b.max(1)));
            wire.extend_from_slice(b"\0");
        }
        let mut buf = BytesMut::new();
        let mut decoded = None;
        for chunk in wire.chunks(4096) {
            assert!(decoded.is_none(), "frame decoded before its last byte");
            buf.extend_from_slice(chunk);
            decoded = codec.decode(&mut buf).unwrap();
        }
        let decoded = frame(decoded.expect("frame after the last chunk"));
        assert_eq!(decoded.body.len(), body.len());
        assert!(buf.is_empty());
    }
}

#[test]
fn decoded_body_does_not_share_the_read_buffer() {
    let mut codec = codec(Version::V1_2);
    let mut buf = BytesMut::with_capacity(4096);
    buf.extend_from_slice(b"SEND\ncontent-length:3\n\nabc\0");
    let range = buf.as_ptr() as usize..buf.as_ptr() as usize + buf.capacity();
    let decoded = frame(codec.decode(&mut buf).unwrap().unwrap());
    assert!(!range.contains(&(decoded.body.as_ptr() as usize)));
}

#[test]
fn discarding_the_buffer_mid_frame_starts_the_next_frame_afresh() {
    let mut codec = codec(Version::V1_2);
    let mut buf = BytesMut::from(&b"SEND\ndestination:/a\n\nabc"[..]);
    assert_eq!(codec.decode(&mut buf), Ok(None));
    buf.clear();
    buf.extend_from_slice(b"ACK\nid:1\n\n\0");
    let decoded = frame(codec.decode(&mut buf).unwrap().unwrap());
    assert_eq!(decoded.command, Command::Ack);
    assert_eq!(decoded.get("id"), Some("1"));
}

#[test]
fn codec_recovers_its_state_after_an_error() {
    let mut codec = codec(Version::V1_2);
    assert!(decode_once(&mut codec, b"SEND\nbad\n\n\0").is_err());
    let decoded = frame(decode_all(&mut codec, b"SEND\n\n\0").remove(0));
    assert_eq!(decoded.command, Command::Send);
}
