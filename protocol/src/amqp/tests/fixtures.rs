//! The recordings of the Qpid Proton Python client and RabbitMQ 3.10
//! (`shared/fixtures/amqp`): every header and frame of both directions decodes, re-encodes
//! to a frame that decodes the same, and to the very same bytes wherever the peer wrote the
//! compact encoding our encoder picks.

use std::path::PathBuf;

use bytes::{Bytes, BytesMut};

use super::{decode_all, decode_byte_by_byte, frame_bytes, MAX_DEPTH};
use crate::amqp::sasl::{mechanism, parse_plain};
use crate::amqp::{
    encode_value, split_transfer, AmqpFrame, Assembled, AttachTarget, Body, Codec, Decoded,
    Decoder, DeliveryAssembler, DeliveryState, Frame, Limits, Message, MessageId, Performative,
    ProtocolHeader, Role, SaslCode, SaslFrame, Symbol, Transfer, Value,
};

/// The fixture folder: `$FERROMQ_AMQP_FIXTURES`, or the copy in `protocol/fixtures/`
/// (recorded from Qpid Proton 0.40 and RabbitMQ 3.10; see its README).
pub(super) fn fixtures_dir() -> PathBuf {
    let candidates = [
        std::env::var_os("FERROMQ_AMQP_FIXTURES").map(PathBuf::from),
        Some(PathBuf::from(env!("CARGO_MANIFEST_DIR")).join("fixtures/amqp")),
    ];
    candidates
        .into_iter()
        .flatten()
        .find(|p| p.join("README.md").is_file())
        .expect("AMQP fixtures not found: set FERROMQ_AMQP_FIXTURES to shared/fixtures/amqp")
}

const SCENARIOS: [&str; 3] = ["send-receive", "binary-multiframe", "release-then-accept"];

const CLIENT: &str = "conn-01.client-to-broker.bin";
const BROKER: &str = "conn-01.broker-to-client.bin";

/// One direction of a recorded connection: its raw bytes and what it decodes to.
struct Direction {
    wire: Vec<u8>,
    items: Vec<(Decoded, Vec<u8>)>,
}

impl Direction {
    fn load(scenario: &str, file: &str) -> Direction {
        let path = fixtures_dir().join(scenario).join(file);
        let wire = std::fs::read(&path).unwrap_or_else(|e| panic!("{}: {e}", path.display()));
        let items = decode_all(&mut Codec::new(Limits::default()), &wire);
        Direction { wire, items }
    }

    fn frames(&self) -> impl Iterator<Item = &Frame> {
        self.items.iter().filter_map(|(decoded, _)| match decoded {
            Decoded::Frame(frame) => Some(frame),
            Decoded::Header(_) => None,
        })
    }

    fn sasl(&self) -> Vec<&SaslFrame> {
        self.frames()
            .filter_map(|f| match f {
                Frame::Sasl(sasl) => Some(sasl),
                _ => None,
            })
            .collect()
    }

    fn amqp(&self) -> Vec<&AmqpFrame> {
        self.frames()
            .filter_map(|f| match f {
                Frame::Amqp(amqp) => Some(amqp),
                _ => None,
            })
            .collect()
    }

    fn headers(&self) -> Vec<ProtocolHeader> {
        self.items
            .iter()
            .filter_map(|(decoded, _)| match decoded {
                Decoded::Header(header) => Some(*header),
                Decoded::Frame(_) => None,
            })
            .collect()
    }

    /// The deliveries the transfers carry, joined.
    fn deliveries(&self) -> Vec<(Transfer, Bytes)> {
        let mut assembler = DeliveryAssembler::new(1 << 20);
        let mut out = Vec::new();
        for frame in self.amqp() {
            if let Performative::Transfer(transfer) = &frame.performative {
                match assembler.push(transfer.clone(), frame.payload.clone()).expect("joins") {
                    Assembled::Complete(delivery) => {
                        out.push((delivery.transfer, delivery.payload))
                    }
                    Assembled::Incomplete => {}
                    Assembled::Aborted(t) => panic!("aborted {t:?}"),
                }
            }
        }
        out
    }

    fn messages(&self) -> Vec<Message> {
        self.deliveries()
            .iter()
            .map(|(_, payload)| Message::decode(payload, MAX_DEPTH).expect("a message"))
            .collect()
    }

    fn dispositions(&self) -> Vec<&crate::amqp::Disposition> {
        self.amqp()
            .into_iter()
            .filter_map(|f| match &f.performative {
                Performative::Disposition(d) => Some(d),
                _ => None,
            })
            .collect()
    }
}

/// Why a re-encoded frame differs from the recording.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
enum Difference {
    /// The peer wrote trailing null fields, which our encoder leaves out; otherwise the
    /// encodings agree (RabbitMQ writes every field of a composite).
    TrailingNulls,
    /// The peer wrote an array of symbols with `sym32` elements where `sym8` suffices
    /// (RabbitMQ's sasl-mechanisms).
    WideArrayElements,
}

/// Re-encodes every frame of a direction: the result must decode to the same frame, and
/// be byte-exact unless the recording used a less compact encoding. Returns each frame
/// that differs, by index and performative, with the reason.
fn reencode(scenario: &str, side: &str, direction: &Direction) -> Vec<(usize, String, Difference)> {
    let mut differing = Vec::new();
    let mut codec = Codec::new(Limits::default());
    for (i, (decoded, original)) in direction.items.iter().enumerate() {
        let context = format!("{scenario} {side} item {i}");
        let bytes = match decoded {
            Decoded::Header(header) => header.to_bytes().to_vec(),
            Decoded::Frame(frame) => frame_bytes(frame),
        };
        let again = decode_all(&mut codec, &bytes);
        assert_eq!(again.len(), 1, "{context}");
        assert_eq!(&again[0].0, decoded, "{context} decodes differently after re-encoding");
        if &bytes == original {
            continue;
        }
        let Decoded::Frame(frame) = decoded else {
            panic!("{context}: a header re-encodes differently")
        };
        let name = match frame {
            Frame::Amqp(amqp) => amqp.performative.name().to_owned(),
            Frame::Sasl(sasl) => format!("{:?}", std::mem::discriminant(sasl)),
            Frame::Heartbeat => "heartbeat".to_owned(),
        };
        differing.push((i, name, explain_difference(&context, original, &bytes)));
    }
    differing
}

/// Finds why `ours` (a re-encoded frame) differs from `original`. Decoded, the two may
/// only differ by trailing null fields of composites (at any depth). Re-encoding the
/// recorded body as a plain value (all list elements kept) gives the recorded bytes, so
/// our encoder agrees with the peer's on every value, unless the body holds an array of
/// `sym32` symbols.
fn explain_difference(context: &str, original: &[u8], ours: &[u8]) -> Difference {
    let body_of = |frame: &[u8]| Bytes::copy_from_slice(&frame[8..]);
    let (original_body, our_body) = (body_of(original), body_of(ours));
    let mut decoder = Decoder::new(&original_body, MAX_DEPTH);
    let theirs = decoder.read_value().expect("decodes");
    let payload = decoder.rest();
    let ours = Decoder::new(&our_body, MAX_DEPTH).read_value().expect("decodes");
    assert_eq!(ours, without_trailing_nulls(&theirs), "{context}");
    let mut generic = BytesMut::new();
    encode_value(&theirs, &mut generic).expect("encodes");
    generic.extend_from_slice(&payload);
    if generic[..] == original_body[..] {
        assert_ne!(ours, theirs, "{context}: the difference is not in the fields");
        return Difference::TrailingNulls;
    }
    // An array (0xe0, size, count) of sym32 (0xb3) elements.
    let wide_symbols = original.windows(4).any(|w| w[0] == 0xe0 && w[3] == 0xb3);
    assert!(wide_symbols, "{context}: the recorded body re-encodes differently as a plain value");
    Difference::WideArrayElements
}

/// `value` with the trailing nulls of every described list (at any depth) left out.
fn without_trailing_nulls(value: &Value) -> Value {
    match value {
        Value::Described(described) => {
            let inner = match &described.value {
                Value::List(fields) => {
                    let mut fields: Vec<Value> =
                        fields.iter().map(without_trailing_nulls).collect();
                    while fields.last() == Some(&Value::Null) {
                        fields.pop();
                    }
                    Value::List(fields)
                }
                other => without_trailing_nulls(other),
            };
            Value::described(described.descriptor.clone(), inner)
        }
        Value::List(elements) => Value::List(elements.iter().map(without_trailing_nulls).collect()),
        other => other.clone(),
    }
}

#[test]
fn every_frame_decodes_and_reencodes_byte_for_byte_where_the_peer_is_compact() {
    for scenario in SCENARIOS {
        let client = Direction::load(scenario, CLIENT);
        let broker = Direction::load(scenario, BROKER);
        // Qpid Proton writes the compact encodings and leaves out trailing nulls, as we do.
        assert_eq!(reencode(scenario, CLIENT, &client), vec![], "{scenario}");
        // RabbitMQ writes every field, trailing nulls included, and sym32 in arrays.
        let differing = reencode(scenario, BROKER, &broker);
        // The arrays are its sasl-mechanisms (item 1) and the outcomes of the source in its
        // answer to the receiver's attach.
        let wide: Vec<_> = differing
            .iter()
            .filter(|d| d.2 == Difference::WideArrayElements)
            .map(|d| if d.0 == 1 { "sasl-mechanisms" } else { d.1.as_str() })
            .collect();
        assert_eq!(wide, ["sasl-mechanisms", "attach"], "{scenario}: {differing:?}");
        // Its transfers and its open end in non-null fields: those are byte-exact.
        let exact_transfers =
            broker.amqp().iter().filter(|f| f.performative.name() == "transfer").count();
        assert!(exact_transfers > 0);
        assert!(differing.iter().all(|d| d.1 != "transfer" && d.1 != "open"), "{differing:?}");
    }
}

#[test]
fn both_directions_start_with_sasl_then_amqp() {
    for scenario in SCENARIOS {
        for file in [CLIENT, BROKER] {
            let direction = Direction::load(scenario, file);
            assert_eq!(
                direction.headers(),
                vec![ProtocolHeader::SASL, ProtocolHeader::AMQP],
                "{scenario} {file}"
            );
            assert!(matches!(direction.items[1].0, Decoded::Frame(Frame::Sasl(_))));
            let names: Vec<_> = direction.amqp().iter().map(|f| f.performative.name()).collect();
            assert_eq!(names.first(), Some(&"open"), "{scenario} {file}");
            // RabbitMQ may still send a flow after its close; the client ends with close.
            assert!(names.contains(&"close"), "{scenario} {file}");
            if file == CLIENT {
                assert_eq!(names.last(), Some(&"close"), "{scenario}");
            }
        }
    }
}

#[test]
fn the_sasl_exchange_is_plain_as_guest() {
    for scenario in SCENARIOS {
        let client = Direction::load(scenario, CLIENT);
        let broker = Direction::load(scenario, BROKER);
        let SaslFrame::Mechanisms(offered) = broker.sasl()[0] else { panic!("{scenario}") };
        let names: Vec<&str> = offered.mechanisms.iter().map(|m| m.as_str()).collect();
        assert_eq!(names, ["ANONYMOUS", "PLAIN", "AMQPLAIN"]);
        let SaslFrame::Init(init) = client.sasl()[0] else { panic!("{scenario}") };
        assert_eq!(init.mechanism, mechanism::PLAIN);
        let credentials =
            parse_plain(init.initial_response.as_deref().unwrap_or_default()).unwrap();
        assert_eq!(
            (credentials.authcid.as_str(), credentials.password.as_str()),
            ("guest", "guest")
        );
        let SaslFrame::Outcome(outcome) = broker.sasl()[1] else { panic!("{scenario}") };
        assert_eq!(outcome.code, SaslCode::Ok);
        assert_eq!(client.sasl().len(), 1);
    }
}

#[test]
fn the_connection_and_links_read_as_negotiated() {
    let client = Direction::load("send-receive", CLIENT);
    let broker = Direction::load("send-receive", BROKER);
    let Performative::Open(open) = &client.amqp()[0].performative else { panic!() };
    assert_eq!(open.hostname.as_deref(), Some("127.0.0.1"));
    assert_eq!(open.max_frame_size(), 32_768);
    assert_eq!(open.channel_max(), 32_767);
    let Performative::Open(open) = &broker.amqp()[0].performative else { panic!() };
    assert_eq!(open.container_id, "rmqchk@vm");
    assert_eq!(
        open.properties.as_ref().and_then(|p| p.get("product")),
        Some(&Value::from("RabbitMQ"))
    );
    let attaches: Vec<_> = client
        .amqp()
        .into_iter()
        .filter_map(|f| match &f.performative {
            Performative::Attach(a) => Some(a.clone()),
            _ => None,
        })
        .collect();
    assert_eq!(attaches.len(), 2);
    assert_eq!(attaches[0].role, Role::Sender);
    let Some(AttachTarget::Node(target)) = &attaches[0].target else { panic!() };
    assert_eq!(target.address.as_deref(), Some("/queue/FIXTURE.AMQP"));
    assert_eq!(attaches[1].role, Role::Receiver);
    assert_eq!(
        attaches[1].source.as_ref().and_then(|s| s.address.as_deref()),
        Some("/queue/FIXTURE.AMQP")
    );
    // The broker's answer to the receiver's attach lists the outcomes it supports.
    let outcomes = broker
        .amqp()
        .into_iter()
        .filter_map(|f| match &f.performative {
            Performative::Attach(a) => a.source.as_ref().and_then(|s| s.outcomes.clone()),
            _ => None,
        })
        .next()
        .expect("outcomes");
    assert_eq!(
        outcomes,
        ["amqp:accepted:list", "amqp:rejected:list", "amqp:released:list"].map(Symbol::from)
    );
    let flows: Vec<_> = client
        .amqp()
        .into_iter()
        .filter_map(|f| match &f.performative {
            Performative::Flow(flow) => Some(flow.clone()),
            _ => None,
        })
        .collect();
    assert!(flows.iter().any(|f| f.link_credit == Some(5)), "{flows:?}");
}

#[test]
fn the_sent_message_reads_as_the_client_wrote_it_in_both_directions() {
    for file in [CLIENT, BROKER] {
        let direction = Direction::load("send-receive", file);
        let messages = direction.messages();
        assert_eq!(messages.len(), 1, "{file}");
        let message = &messages[0];
        let header = message.header.as_ref().expect("header");
        assert_eq!(header.priority(), 6);
        assert!(header.durable());
        let properties = message.properties.as_ref().expect("properties");
        assert_eq!(properties.correlation_id, Some(MessageId::from("corr-1")));
        assert_eq!(properties.subject.as_deref(), Some("greeting"));
        let application = message.application_properties.as_ref().expect("properties");
        assert_eq!(application.get("name"), Some(&Value::from("value")));
        assert_eq!(application.get("count"), Some(&Value::Long(3)));
        assert_eq!(application.get("ratio"), Some(&Value::Double(0.5)));
        assert_eq!(application.get("flag"), Some(&Value::Boolean(true)));
        assert_eq!(message.body, Body::Value(Value::from("hello fixture")));
        // The message re-encodes to a message that decodes the same.
        let again = Message::decode(&message.to_bytes().unwrap(), MAX_DEPTH).unwrap();
        assert_eq!(&again, message);
    }
    // The client accepts the delivery.
    let client = Direction::load("send-receive", CLIENT);
    let dispositions = client.dispositions();
    assert_eq!(dispositions.len(), 1);
    assert_eq!(dispositions[0].role, Role::Receiver);
    assert_eq!(dispositions[0].state, Some(DeliveryState::Accepted));
    assert!(dispositions[0].settled());
}

#[test]
fn proton_messages_reencode_byte_for_byte_except_its_map32_properties() {
    let client = Direction::load("send-receive", CLIENT);
    let (_, payload) = &client.deliveries()[0];
    let message = Message::decode(payload, MAX_DEPTH).unwrap();
    let ours = message.to_bytes().unwrap();
    // Proton writes application-properties as map32 although 49 bytes fit map8: ours is
    // 6 bytes shorter and otherwise the same.
    let at = payload.windows(3).position(|w| w == [0x53, 0x74, 0xd1]).expect("map32") + 2;
    assert_eq!(ours[..at], payload[..at]);
    assert_eq!(ours[at], 0xc1);
    assert_eq!(ours.len() + 6, payload.len());
    assert_eq!(ours[at + 3..], payload[at + 9..]);
    // The other messages have no map and re-encode exactly.
    for scenario in ["binary-multiframe", "release-then-accept"] {
        for (_, payload) in Direction::load(scenario, CLIENT).deliveries() {
            let message = Message::decode(&payload, MAX_DEPTH).unwrap();
            assert_eq!(message.to_bytes().unwrap(), payload, "{scenario}");
        }
    }
}

#[test]
fn the_256_kib_body_is_reassembled_from_its_transfers() {
    let expected: Vec<u8> = (0..=255u8).cycle().take(256 * 1024).collect();
    for file in [CLIENT, BROKER] {
        let direction = Direction::load("binary-multiframe", file);
        let transfers = direction
            .amqp()
            .iter()
            .filter(|f| matches!(f.performative, Performative::Transfer(_)))
            .count();
        assert!(transfers >= 8, "{file}: {transfers} transfers");
        let messages = direction.messages();
        assert_eq!(messages.len(), 1);
        // Python's bytes become an amqp-value holding a binary (not a data section).
        let Body::Value(Value::Binary(body)) = &messages[0].body else { panic!("{file}") };
        assert!(body[..] == expected[..], "{file}: the body differs");
        assert!(messages[0].header.as_ref().is_some_and(|h| h.durable()));
    }
}

#[test]
fn splitting_the_payload_again_gives_protons_frames() {
    let client = Direction::load("binary-multiframe", CLIENT);
    let recorded: Vec<&AmqpFrame> = client
        .amqp()
        .into_iter()
        .filter(|f| matches!(f.performative, Performative::Transfer(_)))
        .collect();
    let (transfer, payload) = client.deliveries().remove(0);
    let frames = split_transfer(recorded[0].channel, &transfer, payload, 32_768).unwrap();
    let sizes = |frames: &[AmqpFrame]| -> Vec<usize> {
        frames.iter().map(|f| frame_bytes(&Frame::Amqp(f.clone())).len()).collect()
    };
    let recorded_owned: Vec<AmqpFrame> = recorded.iter().map(|f| (*f).clone()).collect();
    assert_eq!(sizes(&frames), sizes(&recorded_owned));
    for (i, (ours, theirs)) in frames.iter().zip(&recorded).enumerate() {
        assert!(
            ours == *theirs,
            "transfer {i}: {:?} vs {:?}",
            ours.performative,
            theirs.performative
        );
    }
    // And the recorded frames are exactly what split_transfer produced.
    let wire: Vec<u8> = frames.iter().flat_map(|f| frame_bytes(&Frame::Amqp(f.clone()))).collect();
    let start = client.wire.windows(3).position(|w| w == [0x53, 0x14, 0xc0]).unwrap() - 9;
    assert!(client.wire[start..start + wire.len()] == wire[..], "the bytes differ");
}

#[test]
fn the_released_delivery_comes_back_and_is_accepted() {
    let client = Direction::load("release-then-accept", CLIENT);
    let broker = Direction::load("release-then-accept", BROKER);
    let states: Vec<_> = client.dispositions().iter().map(|d| d.state.clone()).collect();
    assert_eq!(states, [Some(DeliveryState::Released), Some(DeliveryState::Accepted)]);
    let ids: Vec<u32> = client.dispositions().iter().map(|d| d.first).collect();
    let delivered = broker.deliveries();
    assert_eq!(delivered.len(), 2);
    assert_eq!(ids, [delivered[0].0.delivery_id.unwrap(), delivered[1].0.delivery_id.unwrap()]);
    for message in broker.messages().iter().chain(&client.messages()) {
        assert_eq!(message.body, Body::Value(Value::from("released once")));
    }
    // The broker settles the first dispatch's disposition and the send's.
    assert!(broker.dispositions().iter().all(|d| d.role == Role::Receiver && d.settled()));
}

#[test]
fn fixtures_decode_the_same_when_bytes_trickle_in() {
    for scenario in ["send-receive", "release-then-accept"] {
        for file in [CLIENT, BROKER] {
            let direction = Direction::load(scenario, file);
            let trickled = decode_byte_by_byte(&mut Codec::new(Limits::default()), &direction.wire)
                .unwrap_or_else(|e| panic!("{scenario} {file}: {e}"));
            let at_once: Vec<Decoded> = direction.items.into_iter().map(|(d, _)| d).collect();
            assert_eq!(trickled, at_once, "{scenario} {file}");
        }
    }
}
