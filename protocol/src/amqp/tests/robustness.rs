//! Hostile input: truncations at every byte, declared sizes and counts the bytes cannot
//! back, deep nesting, oversize and malformed frames, and random bytes. Every case ends
//! in a clear error (or a wait for more bytes), never a panic or a large allocation.

use bytes::{Bytes, BytesMut};

use super::{decode, frame_bytes, MAX_DEPTH};
use crate::amqp::{
    AmqpFrame, Codec, Decoded, Decoder, Frame, Limits, Message, Open, ProtocolHeader, SaslFrame,
    SaslMechanisms, Transfer, Value, WireError,
};

/// The frame bodies of every fixture file, without their headers.
fn fixture_bodies() -> Vec<Bytes> {
    let dir = super::fixtures::fixtures_dir();
    let mut bodies = Vec::new();
    for scenario in ["send-receive", "release-then-accept"] {
        for file in ["conn-01.client-to-broker.bin", "conn-01.broker-to-client.bin"] {
            let wire = std::fs::read(dir.join(scenario).join(file)).expect("fixture");
            let mut rest = &wire[..];
            while !rest.is_empty() {
                if rest.starts_with(b"AMQP") {
                    rest = &rest[8..];
                    continue;
                }
                let size = u32::from_be_bytes([rest[0], rest[1], rest[2], rest[3]]) as usize;
                bodies.push(Bytes::copy_from_slice(&rest[8..size]));
                rest = &rest[size..];
            }
        }
    }
    bodies
}

#[test]
fn every_truncation_of_every_recorded_body_is_an_error() {
    for body in fixture_bodies() {
        let mut decoder = Decoder::new(&body, MAX_DEPTH);
        let Ok(whole) = decoder.read_value() else { continue };
        let value_len = decoder.position();
        for cut in 0..value_len {
            let prefix = body.slice(..cut);
            let result = Decoder::new(&prefix, MAX_DEPTH).read_value();
            assert!(result.is_err(), "a {cut}-byte prefix of {whole:?} decoded");
        }
    }
}

#[test]
fn a_frame_whose_size_cuts_its_performative_short_is_an_error() {
    let open = Open { container_id: "container".into(), ..Open::default() };
    let whole = frame_bytes(&Frame::Amqp(AmqpFrame::new(0, open)));
    for cut in 9..whole.len() {
        let mut frame = whole[..cut].to_vec();
        frame[..4].copy_from_slice(&(cut as u32).to_be_bytes());
        let mut wire = BytesMut::from(&ProtocolHeader::AMQP.to_bytes()[..]);
        wire.extend_from_slice(&frame);
        let mut codec = Codec::new(Limits::default());
        codec.decode(&mut wire).unwrap();
        let err = codec.decode(&mut wire).unwrap_err();
        assert!(
            matches!(err, WireError::Truncated { .. } | WireError::ImpossibleCount { .. }),
            "{cut}: {err:?}"
        );
    }
}

#[test]
fn a_partial_frame_waits_for_more_bytes() {
    let frame = frame_bytes(&Frame::Amqp(AmqpFrame::new(0, Open::default())));
    let mut codec = Codec::new(Limits::default());
    let mut wire = BytesMut::from(&ProtocolHeader::AMQP.to_bytes()[..]);
    codec.decode(&mut wire).unwrap();
    for cut in 0..frame.len() {
        let mut partial = BytesMut::from(&frame[..cut]);
        assert_eq!(codec.decode(&mut partial), Ok(None), "{cut}");
        assert_eq!(partial.len(), cut, "nothing is consumed");
    }
}

#[test]
fn declared_sizes_beyond_the_input_are_errors() {
    let cases: [&[u8]; 8] = [
        &[0xb1, 0xff, 0xff, 0xff, 0xff, b'a'],
        &[0xa1, 0x05, b'a'],
        &[0xb0, 0x7f, 0xff, 0xff, 0xff],
        &[0xb3, 0, 0, 1, 0],
        &[0xd0, 0xff, 0xff, 0xff, 0xff, 0, 0, 0, 1, 0x40],
        &[0xc1, 0x09, 0x02, 0x40, 0x40],
        &[0xf0, 0x10, 0, 0, 0, 0, 0, 0, 1, 0x40],
        &[0x98, 1, 2, 3],
    ];
    for bytes in cases {
        assert!(matches!(decode(bytes), Err(WireError::Truncated { .. })), "{bytes:02x?}");
    }
}

#[test]
fn counts_the_bytes_cannot_hold_are_refused_before_allocating() {
    // list8 of 255 elements in 0 bytes.
    let err = decode(&[0xc0, 0x01, 0xff]).unwrap_err();
    assert_eq!(err, WireError::ImpossibleCount { what: "list", count: 255, available: 0 });
    // list32 claiming 4 billion elements in 4 bytes.
    let err = decode(&[0xd0, 0, 0, 0, 8, 0xff, 0xff, 0xff, 0xff, 0x40, 0x40, 0x40, 0x40]);
    assert!(matches!(err, Err(WireError::ImpossibleCount { count: 4_294_967_295, .. })));
    // map32 likewise.
    let err = decode(&[0xd1, 0, 0, 0, 4, 0x7f, 0xff, 0xff, 0xff]);
    assert!(matches!(err, Err(WireError::ImpossibleCount { what: "map", .. })), "{err:?}");
    // An array of 4 billion uints in 0 bytes of elements.
    let err = decode(&[0xf0, 0, 0, 0, 5, 0xff, 0xff, 0xff, 0xff, 0x70]);
    assert!(matches!(err, Err(WireError::ImpossibleCount { what: "array", .. })), "{err:?}");
    // Elements without data (true, uint0, list0) are free on the wire: their count is
    // bounded by the input's length, for all arrays of the input together.
    for code in [0x40, 0x41, 0x43, 0x44, 0x45] {
        let err = decode(&[0xf0, 0, 0, 0, 5, 0xff, 0xff, 0xff, 0xff, code]);
        assert!(matches!(err, Err(WireError::ImpossibleCount { .. })), "{code:02x}: {err:?}");
    }
    assert_eq!(
        decode(&[0xe0, 0x02, 0x03, 0x41]),
        Ok(Value::Array(crate::amqp::Array::new(
            crate::amqp::Kind::Boolean,
            vec![Value::Boolean(true); 3]
        )))
    );
    // Three arrays of four trues fit a 15-byte input; once the first claims all 15, the
    // second is refused (a bound per array let each claim the whole input).
    let mut many = vec![0xc0, 0, 3];
    for _ in 0..3 {
        many.extend_from_slice(&[0xe0, 0x02, 0x04, 0x41]);
    }
    many[1] = (many.len() - 2) as u8;
    assert!(decode(&many).is_ok(), "12 trues in 15 bytes fit");
    many[5] = 0x0f;
    let err = decode(&many);
    assert!(matches!(err, Err(WireError::ImpossibleCount { what: "array", .. })), "{err:?}");
    // Nulls have no encoding with data: an array of them is empty or refused.
    assert_eq!(
        decode(&[0xe0, 0x02, 0x00, 0x40]),
        Ok(Value::Array(crate::amqp::Array::new(crate::amqp::Kind::Null, vec![])))
    );
    let err = decode(&[0xe0, 0x02, 0x03, 0x40]);
    assert!(matches!(err, Err(WireError::ImpossibleCount { count: 3, .. })), "{err:?}");
}

#[test]
fn sizes_that_disagree_with_the_elements_are_errors() {
    // A list8 declaring 4 bytes whose count and single element take 3.
    assert!(decode(&[0xc0, 0x03, 0x01, 0x52, 0x01]).is_ok());
    let err = decode(&[0xc0, 0x04, 0x01, 0x52, 0x01, 0x40]).unwrap_err();
    assert!(matches!(err, WireError::SizeMismatch { declared: 4, used: 3, .. }), "{err:?}");
    // An element running past the list's end.
    let err = decode(&[0xc0, 0x02, 0x01, 0x52, 0x01]).unwrap_err();
    assert!(matches!(err, WireError::SizeMismatch { .. }), "{err:?}");
    assert_eq!(decode(&[0xc1, 0x02, 0x01, 0x40]), Err(WireError::OddMapCount(1)));
}

#[test]
fn deep_nesting_is_refused_at_the_limit() {
    // Described values inside described values.
    let mut bytes = Vec::new();
    for _ in 0..10_000 {
        bytes.extend_from_slice(&[0x00, 0x53, 0x01]);
    }
    bytes.push(0x40);
    assert_eq!(decode(&bytes), Err(WireError::NestingTooDeep { max: MAX_DEPTH }));
    // Lists inside lists, with consistent sizes.
    let mut value = vec![0x45];
    for _ in 0..1000 {
        let mut outer = vec![0xd0];
        outer.extend_from_slice(&((value.len() + 4) as u32).to_be_bytes());
        outer.extend_from_slice(&1u32.to_be_bytes());
        outer.extend_from_slice(&value);
        value = outer;
    }
    assert_eq!(decode(&value), Err(WireError::NestingTooDeep { max: MAX_DEPTH }));
    // Arrays of arrays.
    let mut value = vec![0xa3, 0x00];
    for _ in 0..100 {
        let mut outer = vec![0xf0];
        outer.extend_from_slice(&((value.len() + 5) as u32).to_be_bytes());
        outer.extend_from_slice(&1u32.to_be_bytes());
        outer.push(0xf0);
        outer.extend_from_slice(&value[1..]);
        value = outer;
    }
    assert!(decode(&value).is_err());
    // Exactly at the limit is fine.
    let mut bytes = Vec::new();
    for _ in 0..MAX_DEPTH {
        bytes.extend_from_slice(&[0x00, 0x53, 0x01]);
    }
    bytes.push(0x40);
    assert!(decode(&bytes).is_ok());
}

#[test]
fn invalid_codes_text_and_booleans_are_errors() {
    for code in [0x01, 0x3f, 0x57, 0x99, 0xa2, 0xc2, 0xe1, 0xff] {
        assert_eq!(decode(&[code]), Err(WireError::InvalidFormatCode(code)));
    }
    assert_eq!(decode(&[0xa1, 0x02, 0xc3, 0x28]), Err(WireError::InvalidUtf8("string")));
    assert_eq!(decode(&[0xa3, 0x01, 0xff]), Err(WireError::InvalidUtf8("symbol")));
    assert_eq!(decode(&[0x73, 0, 0, 0xd8, 0]), Err(WireError::InvalidChar(0xd800)));
    assert_eq!(decode(&[0x73, 0, 0x11, 0, 0]), Err(WireError::InvalidChar(0x11_0000)));
    assert!(matches!(decode(&[0x56, 0x02]), Err(WireError::UnexpectedValue { .. })));
    assert!(matches!(
        decode(&[0x00, 0xa1, 0x01, b'x', 0x40]),
        Err(WireError::InvalidDescriptor(_))
    ));
    assert_eq!(decode(&[0x40, 0x40]), Err(WireError::TrailingBytes { what: "value", count: 1 }));
    // An invalid element code inside an array.
    assert_eq!(decode(&[0xe0, 0x02, 0x01, 0x3f]), Err(WireError::InvalidFormatCode(0x3f)));
}

fn amqp_codec() -> Codec {
    let mut codec = Codec::new(Limits { max_frame_size: 4096, ..Limits::default() });
    let mut wire = BytesMut::from(&ProtocolHeader::AMQP.to_bytes()[..]);
    codec.decode(&mut wire).unwrap();
    codec
}

#[test]
fn a_frame_above_the_maximum_size_fails_on_its_size_field_alone() {
    let mut codec = amqp_codec();
    let mut wire = BytesMut::from(&4097u32.to_be_bytes()[..]);
    assert_eq!(codec.decode(&mut wire), Err(WireError::FrameTooLarge { size: 4097, max: 4096 }));
    let mut wire = BytesMut::from(&u32::MAX.to_be_bytes()[..]);
    assert!(matches!(codec.decode(&mut wire), Err(WireError::FrameTooLarge { .. })));
    // Exactly the maximum waits for the rest.
    let mut wire = BytesMut::from(&[0, 0, 0x10, 0x00, 2, 0, 0, 0][..]);
    assert_eq!(codec.decode(&mut wire), Ok(None));
    // The limit follows what our open announced.
    codec.set_max_frame_size(512);
    let mut wire = BytesMut::from(&[0, 0, 0x02, 0x01][..]);
    assert!(matches!(codec.decode(&mut wire), Err(WireError::FrameTooLarge { size: 513, .. })));
}

#[test]
fn malformed_frame_headers_are_errors() {
    let cases: [(&[u8], WireError); 5] = [
        (&[0, 0, 0, 7, 2, 0, 0, 0], WireError::BadFrameHeader { size: 7, doff: 2 }),
        (&[0, 0, 0, 8, 1, 0, 0, 0], WireError::BadFrameHeader { size: 8, doff: 1 }),
        (&[0, 0, 0, 8, 3, 0, 0, 0], WireError::BadFrameHeader { size: 8, doff: 3 }),
        (&[0, 0, 0, 8, 2, 5, 0, 0], WireError::UnknownFrameType(5)),
        (
            &[0, 0, 0, 8, 2, 1, 0, 0],
            WireError::UnexpectedFrameType { found: "SASL", phase: "AMQP" },
        ),
    ];
    for (bytes, expected) in cases {
        let mut wire = BytesMut::from(bytes);
        assert_eq!(amqp_codec().decode(&mut wire), Err(expected.clone()), "{bytes:02x?}");
    }
    // An AMQP frame during the SASL exchange.
    let mut codec = Codec::new(Limits::default());
    let mut wire = BytesMut::from(&ProtocolHeader::SASL.to_bytes()[..]);
    wire.extend_from_slice(&[0, 0, 0, 8, 2, 0, 0, 0]);
    codec.decode(&mut wire).unwrap();
    assert_eq!(
        codec.decode(&mut wire),
        Err(WireError::UnexpectedFrameType { found: "AMQP", phase: "SASL" })
    );
}

#[test]
fn an_extended_header_is_skipped() {
    let frame = frame_bytes(&Frame::Amqp(AmqpFrame::new(3, Open::default())));
    let mut extended = frame[..8].to_vec();
    extended[4] = 4; // doff: 16 bytes of header
    extended.extend_from_slice(&[0xde, 0xad, 0xbe, 0xef, 0, 0, 0, 0]);
    extended.extend_from_slice(&frame[8..]);
    let size = extended.len() as u32;
    extended[..4].copy_from_slice(&size.to_be_bytes());
    let mut wire = BytesMut::from(&extended[..]);
    let decoded = amqp_codec().decode(&mut wire).unwrap();
    assert_eq!(decoded, Some(Decoded::Frame(Frame::Amqp(AmqpFrame::new(3, Open::default())))));
}

#[test]
fn an_empty_frame_is_a_heartbeat_whatever_its_channel() {
    let mut wire =
        BytesMut::from(&[0, 0, 0, 8, 2, 0, 0, 9, 0, 0, 0, 12, 3, 0, 0, 0, 1, 2, 3, 4][..]);
    let mut codec = amqp_codec();
    assert_eq!(codec.decode(&mut wire), Ok(Some(Decoded::Frame(Frame::Heartbeat))));
    assert_eq!(codec.decode(&mut wire), Ok(Some(Decoded::Frame(Frame::Heartbeat))));
    assert!(wire.is_empty());
}

#[test]
fn the_encoder_refuses_frames_above_the_peers_maximum_and_writes_nothing() {
    let mut codec = Codec::new(Limits::default());
    codec.set_peer_max_frame_size(512);
    let transfer = Transfer { handle: 0, ..Transfer::default() };
    let big = Frame::Amqp(AmqpFrame::transfer(0, transfer, Bytes::from(vec![0; 600])));
    let mut dst = BytesMut::from(&b"before"[..]);
    assert!(matches!(codec.encode(&big, &mut dst), Err(WireError::FrameTooLarge { max: 512, .. })));
    assert_eq!(&dst[..], b"before");
    let small =
        Frame::Sasl(SaslFrame::Mechanisms(SaslMechanisms { mechanisms: vec!["PLAIN".into()] }));
    codec.encode(&small, &mut dst).unwrap();
    assert!(dst.len() > 6);
}

#[test]
fn wrong_protocols_are_named_by_the_codec() {
    let mut wire = BytesMut::from(&b"GET / HTTP/1.1\r\nHost: x\r\n\r\n"[..]);
    let err = Codec::new(Limits::default()).decode(&mut wire).unwrap_err();
    assert!(err.to_string().contains("HTTP"), "{err}");
    assert_eq!(err.answer_header(), Some(ProtocolHeader::AMQP));
    let mut wire = BytesMut::from(&b"AMQP\x00\x00\x09\x01"[..]);
    let err = Codec::new(Limits::default()).decode(&mut wire).unwrap_err();
    assert!(matches!(err, WireError::UnsupportedHeader { .. }), "{err}");
}

/// A small deterministic generator (xorshift), so failures reproduce.
struct Random(u64);

impl Random {
    fn next(&mut self) -> u64 {
        self.0 ^= self.0 << 13;
        self.0 ^= self.0 >> 7;
        self.0 ^= self.0 << 17;
        self.0
    }
}

#[test]
fn random_and_mutated_bytes_never_panic() {
    let mut random = Random(0x9e37_79b9_7f4a_7c15);
    let bodies = fixture_bodies();
    for round in 0..20_000 {
        let bytes: Vec<u8> = if round % 2 == 0 {
            let len = (random.next() % 64) as usize;
            (0..len).map(|_| random.next() as u8).collect()
        } else {
            // A recorded body with a few bytes changed.
            let body = &bodies[(random.next() as usize) % bodies.len()];
            let mut bytes = body.to_vec();
            for _ in 0..1 + random.next() % 3 {
                if !bytes.is_empty() {
                    let at = (random.next() as usize) % bytes.len();
                    bytes[at] = random.next() as u8;
                }
            }
            bytes
        };
        let input = Bytes::from(bytes.clone());
        let _ = Decoder::new(&input, MAX_DEPTH).read_value();
        let _ = Message::decode(&input, MAX_DEPTH);
        let mut frame = ((bytes.len() + 8) as u32).to_be_bytes().to_vec();
        frame.extend_from_slice(&[2, 0, 0, 0]);
        frame.extend_from_slice(&bytes);
        let mut wire = BytesMut::from(&frame[..]);
        let _ = amqp_codec().decode(&mut wire);
    }
}
