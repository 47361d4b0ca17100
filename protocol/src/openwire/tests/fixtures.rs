//! The recordings of the real ActiveMQ 5.17.2 client and broker (`shared/fixtures/openwire`):
//! every frame decodes, and re-encodes to the very same bytes.

use std::path::PathBuf;

use super::{decode_byte_by_byte, decode_frames, MAX_FRAME};
use crate::openwire::{
    Body, Codec, Command, MessageType, PrimitiveValue, WireFormat, WireFormatInfo,
    DEFAULT_MAX_INFLATED_SIZE,
};

/// The fixture folder: `$FERROMQ_OPENWIRE_FIXTURES`, or the copy in `protocol/fixtures/`
/// (recorded from ActiveMQ 5.17.2's client and broker; see its README).
pub(super) fn fixtures_dir() -> PathBuf {
    let candidates = [
        std::env::var_os("FERROMQ_OPENWIRE_FIXTURES").map(PathBuf::from),
        Some(PathBuf::from(env!("CARGO_MANIFEST_DIR")).join("fixtures/openwire")),
    ];
    candidates.into_iter().flatten().find(|p| p.join("README.md").is_file()).expect(
        "OpenWire fixtures not found: set FERROMQ_OPENWIRE_FIXTURES to shared/fixtures/openwire",
    )
}

const SCENARIOS: [&str; 11] = [
    "connect-only",
    "text-roundtrip",
    "text-roundtrip-loose-nocache",
    "all-body-types",
    "all-body-types-loose-nocache",
    "topic-durable",
    "transacted",
    "client-ack-selector",
    "temp-queue-pull",
    "async-send-compressed",
    "browse",
];

/// One direction of a recorded connection, decoded.
struct Direction {
    wire: Vec<u8>,
    info: WireFormatInfo,
    /// Every frame after the WireFormatInfo, with its bytes.
    frames: Vec<(Command, Vec<u8>)>,
    /// The WireFormatInfo frame's bytes.
    info_bytes: Vec<u8>,
}

/// Both directions of `scenario`, decoded with the format negotiated from the two infos.
fn load(scenario: &str) -> (Direction, Direction, WireFormat) {
    let dir = fixtures_dir().join(scenario);
    let read = |name: &str| {
        std::fs::read(dir.join(name)).unwrap_or_else(|e| panic!("{scenario}/{name}: {e}"))
    };
    let c2b = read("conn-01.client-to-broker.bin");
    let b2c = read("conn-01.broker-to-client.bin");
    let first = |wire: &[u8]| {
        let mut codec = Codec::new(MAX_FRAME);
        let mut frames = decode_frames_until_info(&mut codec, wire);
        let (Command::WireFormatInfo(info), bytes) = frames.remove(0) else {
            panic!("{scenario}: the first frame is not a WireFormatInfo")
        };
        (codec, info, bytes)
    };
    let (mut client_side, client_info, client_info_bytes) = first(&c2b);
    let (mut broker_side, broker_info, broker_info_bytes) = first(&b2c);
    let format = client_side.negotiate(&broker_info, &client_info).expect("negotiates");
    assert_eq!(broker_side.negotiate(&client_info, &broker_info).expect("negotiates"), format);
    let rest = |codec: &mut Codec, wire: &[u8], skip: usize| decode_frames(codec, &wire[skip..]);
    let client_frames = rest(&mut client_side, &c2b, client_info_bytes.len());
    let broker_frames = rest(&mut broker_side, &b2c, broker_info_bytes.len());
    (
        Direction {
            wire: c2b,
            info: client_info,
            frames: client_frames,
            info_bytes: client_info_bytes,
        },
        Direction {
            wire: b2c,
            info: broker_info,
            frames: broker_frames,
            info_bytes: broker_info_bytes,
        },
        format,
    )
}

/// Decodes only the first frame (pre-negotiation the codec reads nothing else).
fn decode_frames_until_info(codec: &mut Codec, wire: &[u8]) -> Vec<(Command, Vec<u8>)> {
    let mut buf = bytes::BytesMut::from(wire);
    let command = codec.decode(&mut buf).expect("decodes").expect("a whole frame");
    let used = wire.len() - buf.len();
    vec![(command, wire[..used].to_vec())]
}

/// Re-encodes one direction with a fresh codec (same negotiation, hence same cache
/// decisions) and compares every frame with the recording.
fn assert_reencodes(scenario: &str, side: &str, d: &Direction, local: &WireFormatInfo) {
    let mut codec = Codec::new(MAX_FRAME);
    let bytes = codec.encode_to_bytes(&d.info.clone().into()).expect("encodes");
    assert_eq!(&bytes[..], &d.info_bytes[..], "{scenario} {side}: WireFormatInfo");
    codec.negotiate(local, &d.info).expect("negotiates");
    for (i, (command, original)) in d.frames.iter().enumerate() {
        let bytes = codec.encode_to_bytes(command).unwrap_or_else(|e| {
            panic!("{scenario} {side} frame {i}: cannot encode {command:?}: {e}")
        });
        assert_eq!(
            &bytes[..],
            &original[..],
            "{scenario} {side} frame {i} ({command:?}) re-encodes differently"
        );
    }
}

#[test]
fn every_fixture_frame_decodes_and_reencodes_byte_for_byte() {
    for scenario in SCENARIOS {
        let (client, broker, format) = load(scenario);
        assert!(!client.frames.is_empty() && !broker.frames.is_empty(), "{scenario}");
        assert_reencodes(scenario, "client-to-broker", &client, &broker.info);
        assert_reencodes(scenario, "broker-to-client", &broker, &client.info);
        let loose = scenario.ends_with("loose-nocache");
        assert_eq!(format.tight_encoding, !loose, "{scenario}");
        assert_eq!(format.cache_enabled, !loose, "{scenario}");
        assert_eq!(format.version, 12, "{scenario}");
    }
}

#[test]
fn the_client_and_broker_announce_what_the_readme_says() {
    let (client, broker, format) = load("connect-only");
    assert_eq!(client.info.version, 12);
    assert_eq!(client.info.provider_name(), Some("ActiveMQ"));
    assert_eq!(client.info.provider_version(), Some("5.17.2"));
    assert_eq!(client.info.host(), Some("127.0.0.1"));
    assert_eq!(client.info.cache_size(), 1024);
    assert_eq!(broker.info.max_inactivity_duration(), 30_000);
    assert_eq!(format.cache_size, 1024);
    assert!(format.stack_trace_enabled && !format.size_prefix_disabled);
    let first = &client.frames[0].0;
    let Command::ConnectionInfo(info) = first else { panic!("{first:?}") };
    assert!(info.response_required);
    assert!(info.connection_id.as_ref().is_some_and(|id| id.value.starts_with("ID:")));
    assert!(matches!(broker.frames[0].0, Command::BrokerInfo(_)));
    assert!(matches!(client.frames.last(), Some((Command::ShutdownInfo(_), _))));
}

#[test]
fn fixtures_decode_the_same_when_bytes_trickle_in() {
    for scenario in ["text-roundtrip", "text-roundtrip-loose-nocache", "async-send-compressed"] {
        let (client, _broker, format) = load(scenario);
        let mut codec = Codec::with_format(MAX_FRAME, format);
        let commands = decode_byte_by_byte(&mut codec, &client.wire[client.info_bytes.len()..])
            .unwrap_or_else(|e| panic!("{scenario}: {e}"));
        let expected: Vec<Command> = client.frames.into_iter().map(|(c, _)| c).collect();
        assert_eq!(commands, expected, "{scenario}");
    }
}

/// The messages a direction carries (sent, or dispatched).
fn messages(d: &Direction) -> Vec<crate::openwire::Message> {
    d.frames
        .iter()
        .filter_map(|(c, _)| match c {
            Command::Message(m) => Some((**m).clone()),
            Command::MessageDispatch(md) => md.message.as_deref().cloned(),
            _ => None,
        })
        .collect()
}

#[test]
fn the_text_message_reads_as_the_client_wrote_it() {
    for scenario in ["text-roundtrip", "text-roundtrip-loose-nocache"] {
        let (client, broker, _) = load(scenario);
        for m in messages(&client).into_iter().chain(messages(&broker)) {
            assert_eq!(m.body_type, MessageType::Text);
            assert_eq!(m.text().unwrap().as_deref(), Some("hello fixture"), "{scenario}");
            assert_eq!(m.correlation_id.as_deref(), Some("corr-1"));
            assert_eq!(m.jms_type.as_deref(), Some("greeting"));
            let props = m.properties().unwrap();
            assert_eq!(props.get("name"), Some(&PrimitiveValue::from("value")));
            assert_eq!(props.get("count"), Some(&PrimitiveValue::Int(3)));
            assert_eq!(
                m.destination.as_ref().map(|d| d.physical_name.as_str()),
                Some("FIXTURE.TEXT")
            );
        }
        assert_eq!(messages(&broker).len(), 1, "{scenario}: one dispatch");
    }
}

#[test]
fn every_body_type_reads_as_the_client_wrote_it() {
    for scenario in ["all-body-types", "all-body-types-loose-nocache"] {
        let (client, _, _) = load(scenario);
        let sent = messages(&client);
        let bodies: Vec<Body> =
            sent.iter().map(|m| m.body(DEFAULT_MAX_INFLATED_SIZE).unwrap()).collect();
        assert_eq!(bodies.len(), 5, "{scenario}");
        assert_eq!(bodies[0], Body::Bytes(bytes::Bytes::from_static(&[1, 2, 3, 0, 255])));
        let Body::Map(map) = &bodies[1] else { panic!("{:?}", bodies[1]) };
        assert_eq!(map.get("i"), Some(&PrimitiveValue::Int(42)));
        assert_eq!(map.get("s"), Some(&PrimitiveValue::from("x")));
        assert_eq!(map.get("t"), Some(&PrimitiveValue::Boolean(true)));
        assert_eq!(map.get("d"), Some(&PrimitiveValue::Double(1.5)));
        assert_eq!(map.get("l"), Some(&PrimitiveValue::Long(1 << 40)));
        assert_eq!(map.get("b"), Some(&PrimitiveValue::Bytes(bytes::Bytes::from_static(&[9]))));
        assert_eq!(bodies[2], Body::Stream(vec![PrimitiveValue::Int(7), "seven".into()]));
        assert!(matches!(&bodies[3], Body::Object(b) if b.starts_with(&[0xAC, 0xED])));
        assert_eq!(bodies[4], Body::Empty);
        let props = sent[4].properties().unwrap();
        assert_eq!(props.get("flag"), Some(&PrimitiveValue::Boolean(false)));
        assert_eq!(props.get("sh"), Some(&PrimitiveValue::Short(5)));
        assert_eq!(props.get("fl"), Some(&PrimitiveValue::Float(0.5)));
    }
}

#[test]
fn compressed_messages_inflate_to_the_original_text() {
    let (client, broker, _) = load("async-send-compressed");
    let expected = "compressible text ".repeat(200);
    let all: Vec<_> = messages(&client).into_iter().chain(messages(&broker)).collect();
    assert_eq!(all.len(), 10);
    for m in all {
        assert!(m.compressed);
        assert!(!m.persistent);
        assert!(m.content.as_ref().is_some_and(|c| c.len() < 200));
        assert_eq!(m.text().unwrap().as_deref(), Some(expected.as_str()));
    }
}
