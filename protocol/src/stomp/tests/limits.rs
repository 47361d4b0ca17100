//! Limits are enforced while a frame arrives, not after it is complete.

use super::*;
use crate::stomp::Command;

fn limited(max_frame_size: usize, max_headers: usize, max_header_length: usize) -> Codec {
    Codec::new(Limits { max_frame_size, max_headers, max_header_length })
}

#[test]
fn declared_content_length_over_the_limit_fails_before_the_body_arrives() {
    let mut codec = limited(1024 * 1024, 1000, 10_240);
    let mut buf = BytesMut::from(&b"SEND\ncontent-length:2097152\n\n"[..]);
    let header_bytes = buf.len();
    assert_eq!(
        codec.decode(&mut buf),
        Err(WireError::FrameTooLarge { size: header_bytes + 2_097_152 + 1, max: 1024 * 1024 })
    );
}

#[test]
fn body_without_content_length_fails_once_buffered_bytes_pass_the_limit() {
    let mut codec = limited(64, 1000, 10_240);
    let mut buf = BytesMut::from(&b"SEND\n\n"[..]);
    assert_eq!(codec.decode(&mut buf), Ok(None));
    buf.extend_from_slice(&[b'x'; 58]);
    assert_eq!(buf.len(), 64);
    assert_eq!(codec.decode(&mut buf), Ok(None), "64 bytes so far: still within the limit");
    buf.extend_from_slice(b"x");
    assert_eq!(codec.decode(&mut buf), Err(WireError::FrameTooLarge { size: 65, max: 64 }));
}

#[test]
fn frame_of_exactly_the_maximum_size_is_accepted() {
    let wire = b"SEND\n\nabc\0";
    let mut codec = limited(wire.len(), 1000, 10_240);
    assert_eq!(frame(decode_all(&mut codec, wire).remove(0)).command, Command::Send);
    let with_length = b"SEND\ncontent-length:3\n\nabc\0";
    let mut codec = limited(with_length.len(), 1000, 10_240);
    assert_eq!(frame(decode_all(&mut codec, with_length).remove(0)).command, Command::Send);
    let mut codec = limited(with_length.len() - 1, 1000, 10_240);
    assert!(matches!(decode_once(&mut codec, with_length), Err(WireError::FrameTooLarge { .. })));
}

#[test]
fn complete_frame_over_the_limit_is_rejected_even_in_one_piece() {
    let mut codec = limited(8, 1000, 10_240);
    assert_eq!(
        decode_once(&mut codec, b"SEND\n\nabcdef\0"),
        Err(WireError::FrameTooLarge { size: 13, max: 8 })
    );
}

#[test]
fn endless_headers_fail_on_frame_size_before_the_blank_line() {
    let mut codec = limited(100, 1000, 10_240);
    let mut buf = BytesMut::from(&b"SEND\n"[..]);
    let mut failed = None;
    for i in 0..100 {
        buf.extend_from_slice(format!("h{i}:v\n").as_bytes());
        if let Err(error) = codec.decode(&mut buf) {
            failed = Some(error);
            break;
        }
    }
    assert!(matches!(failed, Some(WireError::FrameTooLarge { max: 100, .. })), "{failed:?}");
}

#[test]
fn too_many_headers_fail_before_the_frame_is_complete() {
    let mut codec = limited(1024, 2, 10_240);
    let mut buf = BytesMut::from(&b"SEND\na:1\nb:2\n"[..]);
    assert_eq!(codec.decode(&mut buf), Ok(None));
    buf.extend_from_slice(b"c:3\n");
    assert_eq!(codec.decode(&mut buf), Err(WireError::TooManyHeaders { max: 2 }));
}

#[test]
fn exactly_the_maximum_number_of_headers_is_accepted() {
    let mut codec = limited(1024, 2, 10_240);
    assert_eq!(frame(decode_all(&mut codec, b"SEND\na:1\nb:2\n\n\0").remove(0)).headers.len(), 2);
}

#[test]
fn long_header_line_fails_before_its_line_end_arrives() {
    let mut codec = limited(1024 * 1024, 1000, 16);
    let mut buf = BytesMut::from(&b"SEND\nname:0123456789a"[..]);
    assert_eq!(buf.len() - 5, 16);
    assert_eq!(codec.decode(&mut buf), Ok(None), "16 bytes: at the limit");
    buf.extend_from_slice(b"\r");
    assert_eq!(codec.decode(&mut buf), Ok(None), "a CR may be the start of CRLF");
    buf.extend_from_slice(b"b");
    assert_eq!(codec.decode(&mut buf), Err(WireError::HeaderTooLong { max: 16 }));
}

#[test]
fn header_line_of_exactly_the_maximum_length_is_accepted() {
    let mut codec = limited(1024, 1000, 16);
    let decoded = frame(decode_all(&mut codec, b"SEND\nname:0123456789a\r\n\n\0").remove(0));
    assert_eq!(decoded.get("name"), Some("0123456789a"));
    let mut codec = limited(1024, 1000, 16);
    assert_eq!(
        decode_once(&mut codec, b"SEND\nname:0123456789ab\n\n\0"),
        Err(WireError::HeaderTooLong { max: 16 })
    );
}
