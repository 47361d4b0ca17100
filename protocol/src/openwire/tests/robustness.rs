//! Hostile and broken input: limits, malformed frames, and a bounded-time seeded fuzz over
//! random and mutated fixture bytes (the CI fuzz run).

use bytes::{BufMut, BytesMut};

use super::MAX_FRAME;
use crate::openwire::*;

/// Rounds of the fuzz tests: `FERROMQ_FUZZ_ROUNDS`, or `default` (bounded CI time).
fn rounds(default: usize) -> usize {
    std::env::var("FERROMQ_FUZZ_ROUNDS").ok().and_then(|v| v.parse().ok()).unwrap_or(default)
}

/// A small deterministic PRNG (xorshift64*), so failures reproduce from the seed.
struct Rng(u64);

impl Rng {
    fn next(&mut self) -> u64 {
        self.0 ^= self.0 >> 12;
        self.0 ^= self.0 << 25;
        self.0 ^= self.0 >> 27;
        self.0.wrapping_mul(0x2545_F491_4F6C_DD1D)
    }

    fn below(&mut self, n: usize) -> usize {
        (self.next() % n.max(1) as u64) as usize
    }
}

fn formats() -> [WireFormat; 4] {
    [
        WireFormat::default(),
        WireFormat::loose(),
        WireFormat { cache_enabled: false, ..WireFormat::default() },
        WireFormat { size_prefix_disabled: true, version: 1, ..WireFormat::loose() },
    ]
}

/// Decodes everything `codec` accepts from `data`; returns when it errors or needs more.
fn drain(codec: &mut Codec, data: &[u8]) {
    let mut buf = BytesMut::from(data);
    while let Ok(Some(command)) = codec.decode(&mut buf) {
        if let Command::Message(m) = command {
            let _ = m.body(1 << 16);
            let _ = m.properties();
        }
    }
}

fn fixture_streams() -> Vec<Vec<u8>> {
    let dir = super::fixtures::fixtures_dir();
    let mut out = Vec::new();
    for entry in std::fs::read_dir(dir).expect("fixture dir").flatten() {
        for file in ["conn-01.client-to-broker.bin", "conn-01.broker-to-client.bin"] {
            if let Ok(bytes) = std::fs::read(entry.path().join(file)) {
                out.push(bytes);
            }
        }
    }
    assert!(out.len() >= 20);
    out
}

#[test]
fn random_bytes_never_panic() {
    let mut rng = Rng(0x5EED_0001);
    for _ in 0..rounds(20_000) {
        let len = rng.below(300);
        let data: Vec<u8> = (0..len).map(|_| rng.next() as u8).collect();
        for format in formats() {
            drain(&mut Codec::with_format(MAX_FRAME, format), &data);
        }
        drain(&mut Codec::new(MAX_FRAME), &data);
        let _ = decode_all_for_fuzzing(&data);
        let _ = PrimitiveMap::decode(&data, &MapLimits::MESSAGE);
        let _ = decode_stream(&data);
        let _ = decode_modified_utf8(&data);
    }
}

#[test]
fn mutated_fixture_streams_never_panic() {
    let streams = fixture_streams();
    let mut rng = Rng(0x5EED_0002);
    for round in 0..rounds(4_000) {
        let mut data = streams[round % streams.len()].clone();
        for _ in 0..=rng.below(4) {
            if data.is_empty() {
                break;
            }
            let at = rng.below(data.len());
            match rng.below(5) {
                0 => data[at] = rng.next() as u8,
                1 => data[at] ^= 1 << rng.below(8),
                2 => data.insert(at, rng.next() as u8),
                3 => {
                    data.remove(at);
                }
                _ => data.truncate(at),
            }
        }
        let _ = decode_all_for_fuzzing(&data);
        // The same bytes after the WireFormatInfo, read with each negotiated format.
        let Some(&[a, b, c, d]) = data.get(..4) else { continue };
        let skip = 4 + u32::from_be_bytes([a, b, c, d]) as usize;
        if let Some(rest) = data.get(skip.min(data.len())..) {
            for format in formats() {
                drain(&mut Codec::with_format(MAX_FRAME, format), rest);
            }
        }
    }
}

#[test]
fn a_size_prefix_over_the_limit_fails_before_the_frame_arrives() {
    let mut codec = Codec::with_format(1024, WireFormat::default());
    let mut wire = BytesMut::from(&[0u8, 0, 4, 1][..]);
    assert_eq!(codec.decode(&mut wire), Err(WireError::FrameTooLarge { size: 1025, max: 1024 }));
    let mut wire = BytesMut::from(&[0x80u8, 0, 0, 0, 1][..]);
    assert_eq!(codec.decode(&mut wire), Err(WireError::NegativeFrameSize(i32::MIN)));
}

#[test]
fn the_negotiated_frame_size_limit_applies_too() {
    let format = WireFormat { max_frame_size: 100, ..WireFormat::default() };
    let mut codec = Codec::with_format(MAX_FRAME, format);
    let mut wire = BytesMut::from(&[0u8, 0, 0, 101][..]);
    assert!(matches!(codec.decode(&mut wire), Err(WireError::FrameTooLarge { max: 100, .. })));
    let big: Command =
        ControlCommand { command: Some("x".repeat(200)), ..ControlCommand::default() }.into();
    assert!(matches!(
        codec.encode(&big, &mut BytesMut::new()),
        Err(WireError::FrameTooLarge { max: 100, .. })
    ));
}

#[test]
fn without_size_prefix_the_buffered_bytes_are_limited() {
    let format = WireFormat { size_prefix_disabled: true, ..WireFormat::loose() };
    let mut codec = Codec::with_format(64, format);
    // A ControlCommand whose string claims 1000 bytes: incomplete, then too large.
    let mut wire = BytesMut::new();
    wire.put_u8(14);
    wire.put_i32(1);
    wire.put_u8(0);
    wire.put_u8(1);
    wire.put_u16(1000);
    assert_eq!(codec.decode(&mut wire), Ok(None));
    assert_eq!(wire.len(), 9, "nothing consumed while incomplete");
    wire.put_slice(&[b'a'; 60]);
    assert!(matches!(codec.decode(&mut wire), Err(WireError::FrameTooLarge { max: 64, .. })));
}

#[test]
fn truncated_frames_wait_for_more_bytes() {
    let mut sender = Codec::with_format(MAX_FRAME, WireFormat::default());
    let command: Command =
        ConnectionInfo { client_id: Some("c".into()), ..ConnectionInfo::default() }.into();
    let bytes = sender.encode_to_bytes(&command).unwrap();
    for cut in 0..bytes.len() {
        let mut codec = Codec::with_format(MAX_FRAME, WireFormat::default());
        let mut wire = BytesMut::from(&bytes[..cut]);
        assert_eq!(codec.decode(&mut wire), Ok(None), "cut at {cut}");
        assert_eq!(wire.len(), cut);
        wire.put_slice(&bytes[cut..]);
        assert_eq!(codec.decode(&mut wire), Ok(Some(command.clone())));
    }
}

#[test]
fn a_wrong_magic_is_bad_magic() {
    let info = WireFormatInfo::announcing(&WireFormat::default(), "x", "y");
    let mut bytes =
        BytesMut::from(&Codec::new(MAX_FRAME).encode_to_bytes(&info.into()).unwrap()[..]);
    bytes[5..13].copy_from_slice(b"ActiveMX");
    assert_eq!(
        Codec::new(MAX_FRAME).decode(&mut bytes),
        Err(WireError::BadMagic(b"ActiveMX".to_vec()))
    );
    // An HTTP client on the OpenWire port.
    let mut http = BytesMut::from(&b"GET / HTTP/1.1\r\nHost: x\r\n\r\n"[..]);
    assert!(Codec::new(MAX_FRAME).decode(&mut http).is_err());
}

#[test]
fn an_unknown_type_names_its_byte() {
    let mut codec = Codec::with_format(MAX_FRAME, WireFormat::default());
    let mut wire = BytesMut::from(&[0u8, 0, 0, 2, 200, 0][..]);
    let err = codec.decode(&mut wire).unwrap_err();
    assert_eq!(err, WireError::UnknownType { data_type: 200 });
    assert!(err.to_string().contains("type 200"), "{err}");
}

#[test]
fn a_bare_data_structure_is_not_a_command() {
    let mut codec = Codec::with_format(MAX_FRAME, WireFormat::loose());
    // A ConnectionId frame: type 120, string present, "x".
    let mut wire = BytesMut::from(&[0u8, 0, 0, 5, 120, 1, 0, 1, b'x'][..]);
    assert_eq!(codec.decode(&mut wire), Err(WireError::NotACommand { data_type: 120 }));
}

#[test]
fn bytes_after_the_command_are_an_error() {
    let mut codec = Codec::with_format(MAX_FRAME, WireFormat::loose());
    // KeepAliveInfo (command id, response required) plus one stray byte.
    let mut wire = BytesMut::from(&[0u8, 0, 0, 7, 10, 0, 0, 0, 1, 0, 9][..]);
    assert_eq!(codec.decode(&mut wire), Err(WireError::TrailingBytes { data_type: 10, count: 1 }));
}

#[test]
fn a_reference_to_a_cache_slot_never_sent_is_an_error() {
    let format = WireFormat { tight_encoding: false, ..WireFormat::default() };
    let mut codec = Codec::with_format(MAX_FRAME, format);
    // SessionInfo: command id, response required, "not new", slot 5.
    let mut wire = BytesMut::from(&[0u8, 0, 0, 9, 4, 0, 0, 0, 1, 0, 0, 0, 5][..]);
    assert_eq!(codec.decode(&mut wire), Err(WireError::CacheMiss(5)));
    let mut wire = BytesMut::from(&[0u8, 0, 0, 9, 4, 0, 0, 0, 1, 0, 0, 0x7f, 0][..]);
    assert!(matches!(codec.decode(&mut wire), Err(WireError::CacheIndexOutOfRange { .. })));
}

#[test]
fn a_field_of_the_wrong_type_is_an_error() {
    let mut codec = Codec::with_format(MAX_FRAME, WireFormat::loose());
    // SessionInfo whose session id is a ConnectionId.
    let mut wire = BytesMut::from(&[0u8, 0, 0, 12, 4, 0, 0, 0, 1, 0, 1, 120, 1, 0, 1, b'x'][..]);
    assert_eq!(
        codec.decode(&mut wire),
        Err(WireError::UnexpectedType { expected: "session id", found: 120 })
    );
}

#[test]
fn deep_nesting_is_refused_not_a_stack_overflow() {
    // DataResponse { data: DataResponse { data: ... } } 1000 levels deep, loose, no cache.
    let mut body = Vec::new();
    for _ in 0..1000 {
        body.extend_from_slice(&[0, 0, 0, 1, 0, 0, 0, 0, 7, 1, 32]);
    }
    body.truncate(body.len() - 2);
    body.push(0);
    let mut wire = BytesMut::new();
    wire.put_i32(body.len() as i32 + 1);
    wire.put_u8(32);
    wire.put_slice(&body);
    let mut codec = Codec::with_format(MAX_FRAME, WireFormat::loose());
    assert!(matches!(codec.decode(&mut wire), Err(WireError::NestingTooDeep { .. })));
}

#[test]
fn null_frames_are_skipped() {
    let mut codec = Codec::with_format(MAX_FRAME, WireFormat::loose());
    let mut wire = BytesMut::from(&[0u8, 0, 0, 1, 0][..]);
    wire.put_slice(&[0, 0, 0, 6, 10, 0, 0, 0, 1, 0]);
    assert_eq!(
        codec.decode(&mut wire),
        Ok(Some(KeepAliveInfo { command_id: 1, response_required: false }.into()))
    );
}

#[test]
fn the_deepest_nesting_allowed_decodes_on_a_small_stack() {
    // Messages about messages, as deep as the codec allows (each level is a message and its
    // data structure), decoded on a thread with half the default stack (debug builds need
    // about 30 KiB per level, release builds a tenth of that).
    let mut inner = Message::default();
    for _ in 0..15 {
        inner = Message {
            data_structure: Some(Box::new(Command::Message(Box::new(inner)).into())),
            ..Message::default()
        };
    }
    let command: Command =
        MessageDispatch { message: Some(Box::new(inner)), ..MessageDispatch::default() }.into();
    let bytes = Codec::with_format(MAX_FRAME, WireFormat::default())
        .encode_to_bytes(&command)
        .expect("within the nesting limit");
    let decoded = std::thread::Builder::new()
        .stack_size(1024 * 1024)
        .spawn(move || {
            let mut wire = BytesMut::from(&bytes[..]);
            Codec::with_format(MAX_FRAME, WireFormat::default()).decode(&mut wire)
        })
        .unwrap()
        .join()
        .unwrap();
    assert_eq!(decoded, Ok(Some(command)));
}
