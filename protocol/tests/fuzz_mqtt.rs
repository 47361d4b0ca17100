//! A time-bounded fuzzer of the MQTT codec that runs on stable Rust in every test run (no
//! cargo-fuzz, no nightly): random and mutated inputs, seeded from the recorded traffic in
//! `protocol/fixtures/mqtt` (when it is there) and from packets of every type encoded
//! here, go through
//!
//! - a server's [`Codec`], which learns the version from a CONNECT (most inputs start with
//!   one of each version), fed in random chunks as a socket would deliver them, with the
//!   default and tiny packet-size limits;
//! - a [`Codec`] with each version preset (a client's, or a server's after CONNECT);
//! - the topic helpers ([`protocol::mqtt::topic`]) on names and filters cut from the inputs.
//!
//! Whatever decodes must encode again, at most as long as it came (our encoding is the
//! shortest), and decode to the same packet. Every other outcome is fine except a panic
//! and an allocation out of proportion to the input: inputs are at most 64 KiB and the
//! test checks that the process's peak resident memory stays within `fuzzing::MAX_PEAK_GROWTH` of
//! where it started (the codec reserves nothing for a declared remaining length; a decoder
//! that trusted one would blow far past that).
//!
//! `FERROMQ_FUZZ_SECONDS` (default 10) bounds the time, shared by the three targets, which
//! run in parallel; `FERROMQ_FUZZ_SEED` fixes the seed (else one is drawn and printed). Each
//! input is a function of the seed and its iteration number, so a failure prints both and
//! the input, and `FERROMQ_FUZZ_SEED=S FERROMQ_FUZZ_ITERATION=N` replays just that input:
//!
//! ```text
//! FERROMQ_FUZZ_SECONDS=600 cargo test --release -p protocol --test fuzz_mqtt -- --nocapture
//! ```

mod fuzzing;

use std::path::Path;
use std::sync::OnceLock;

use bytes::{Bytes, BytesMut};
use fuzzing::{Dialect, Rng, MAX_INPUT};
use protocol::mqtt::topic::{
    matches, parse_shared_subscription, validate_topic_filter, validate_topic_name,
};
use protocol::mqtt::{
    Auth, Codec, Connack, Connect, Disconnect, Limits, Packet, Properties, Property, PubAck,
    Publish, QoS, ReasonCode, RetainHandling, Suback, Subscribe, Subscription, SubscriptionOptions,
    Unsuback, Unsubscribe, Version, Will,
};

/// Packets of every type, in every version that has them, with the fields that version
/// allows: the corpus's own seeds, which reach AUTH, will properties and the rest that the
/// recordings may lack.
fn own_packets(version: Version) -> Vec<Packet> {
    let v5 = version == Version::V5_0;
    let props = |list: Vec<Property>| if v5 { Properties::from(list) } else { Properties::new() };
    let user = || Property::UserProperty("k".into(), "v".into());
    let will = Will {
        topic: "will/topic".into(),
        payload: Bytes::from_static(b"gone"),
        qos: QoS::AtLeastOnce,
        retain: true,
        properties: props(vec![Property::WillDelayInterval(5), Property::ContentType("t".into())]),
    };
    let connect = Connect {
        keep_alive: 30,
        will: Some(will),
        username: Some("user".into()),
        password: Some(Bytes::from_static(b"pass")),
        properties: props(vec![
            Property::SessionExpiryInterval(60),
            Property::ReceiveMaximum(10),
            Property::AuthenticationMethod("PLAIN".into()),
            Property::AuthenticationData(Bytes::from_static(b"\0u\0p")),
            user(),
        ]),
        ..Connect::new(version, "fuzz-client")
    };
    let publish = Publish {
        qos: QoS::ExactlyOnce,
        packet_id: Some(7),
        retain: true,
        properties: props(vec![
            Property::MessageExpiryInterval(10),
            Property::TopicAlias(2),
            Property::SubscriptionIdentifier(300),
            Property::SubscriptionIdentifier(1),
            Property::CorrelationData(Bytes::from_static(b"c")),
            user(),
        ]),
        ..Publish::new("a/b/c", Bytes::from_static(b"payload"))
    };
    let options = SubscriptionOptions {
        qos: QoS::AtLeastOnce,
        no_local: v5,
        retain_as_published: v5,
        retain_handling: if v5 {
            RetainHandling::SendAtNewSubscribe
        } else {
            RetainHandling::SendAtSubscribe
        },
    };
    let ack = |reason| PubAck {
        reason: if v5 { reason } else { ReasonCode::Success },
        properties: props(vec![Property::ReasonString("r".into())]),
        ..PubAck::new(7)
    };
    let mut packets = vec![
        connect.into(),
        Connack {
            session_present: true,
            reason: ReasonCode::Success,
            properties: props(vec![Property::MaximumQos(1), Property::ServerKeepAlive(5)]),
        }
        .into(),
        publish.into(),
        Publish::new("t", Bytes::new()).into(),
        Packet::Puback(ack(ReasonCode::NoMatchingSubscribers)),
        Packet::Pubrec(ack(ReasonCode::Success)),
        Packet::Pubrel(ack(ReasonCode::PacketIdentifierNotFound)),
        Packet::Pubcomp(PubAck::new(7)),
        Subscribe {
            packet_id: 8,
            filters: vec![
                Subscription { filter: "a/+/c".into(), options },
                Subscription {
                    filter: "#".into(),
                    options: SubscriptionOptions::qos(QoS::ExactlyOnce),
                },
            ],
            properties: props(vec![Property::SubscriptionIdentifier(9)]),
        }
        .into(),
        Suback {
            packet_id: 8,
            reasons: vec![ReasonCode::GrantedQos1, ReasonCode::UnspecifiedError],
            properties: props(vec![user()]),
        }
        .into(),
        Unsubscribe {
            packet_id: 9,
            filters: vec!["a/+/c".into()],
            properties: props(vec![user()]),
        }
        .into(),
        Unsuback {
            packet_id: 9,
            reasons: if v5 { vec![ReasonCode::NoSubscriptionExisted] } else { vec![] },
            properties: props(vec![Property::ReasonString("r".into())]),
        }
        .into(),
        Packet::Pingreq,
        Packet::Pingresp,
        Disconnect {
            reason: if v5 { ReasonCode::DisconnectWithWillMessage } else { ReasonCode::Success },
            properties: props(vec![Property::SessionExpiryInterval(0)]),
        }
        .into(),
    ];
    if v5 {
        packets.push(
            Auth {
                reason: ReasonCode::ContinueAuthentication,
                properties: props(vec![Property::AuthenticationMethod("SCRAM".into())]),
            }
            .into(),
        );
    }
    packets
}

/// A CONNECT of `version`, the start of a server's stream.
fn connect_bytes(version: Version) -> Vec<u8> {
    let mut wire = BytesMut::new();
    Codec::new(Limits::default())
        .encode(&Connect::new(version, "fuzz").into(), &mut wire)
        .expect("a CONNECT encodes");
    wire.to_vec()
}

/// The inputs mutations start from: recorded streams and their packets, and our own.
fn corpus() -> &'static [Vec<u8>] {
    static CORPUS: OnceLock<Vec<Vec<u8>>> = OnceLock::new();
    CORPUS.get_or_init(|| {
        let mut corpus = Vec::new();
        for version in Version::ALL {
            let mut codec = Codec::new(Limits::default());
            codec.set_version(version);
            let mut stream = BytesMut::new();
            for packet in own_packets(version) {
                let mut wire = BytesMut::new();
                codec.encode(&packet, &mut wire).expect("our packets encode");
                corpus.push(wire.to_vec());
                stream.extend_from_slice(&wire);
            }
            corpus.push(stream.to_vec());
        }
        let dir = Path::new(env!("CARGO_MANIFEST_DIR")).join("fixtures/mqtt");
        let mut files = Vec::new();
        for scenario in std::fs::read_dir(&dir).into_iter().flatten().flatten() {
            for file in std::fs::read_dir(scenario.path()).into_iter().flatten().flatten() {
                if file.path().extension().is_some_and(|e| e == "bin") {
                    files.push(file.path());
                }
            }
        }
        files.sort();
        for path in files {
            let Ok(wire) = std::fs::read(&path) else { continue };
            // Each packet by its fixed header, then the whole stream cut to the bound.
            let mut rest = &wire[..];
            while let Some(size) = packet_size(rest) {
                if size <= MAX_INPUT {
                    corpus.push(rest[..size].to_vec());
                }
                rest = &rest[size..];
            }
            corpus.push(wire[..wire.len().min(MAX_INPUT)].to_vec());
        }
        assert!(corpus.len() > 40, "the corpus holds packets: {} inputs", corpus.len());
        corpus
    })
}

/// The size of the packet at the front of `wire` by its fixed header, if all of it is there.
fn packet_size(wire: &[u8]) -> Option<usize> {
    let mut remaining = 0usize;
    for i in 0..4 {
        let byte = *wire.get(1 + i)?;
        remaining |= usize::from(byte & 0x7f) << (7 * i);
        if byte & 0x80 == 0 {
            let size = 2 + i + remaining;
            return (size <= wire.len()).then_some(size);
        }
    }
    None
}

/// Bytes that matter to the decoder: first bytes of packets with right and wrong flags,
/// property identifiers, lengths at the edges of variable byte integers.
const INTERESTING: &[u8] = &[
    0x00, 0x01, 0x02, 0x03, 0x04, 0x05, 0x0B, 0x10, 0x11, 0x15, 0x16, 0x1F, 0x20, 0x23, 0x26, 0x30,
    0x32, 0x34, 0x36, 0x38, 0x3D, 0x40, 0x62, 0x80, 0x82, 0x90, 0xA2, 0xC0, 0xE0, 0xF0, 0x7F, 0xFF,
];

const DIALECT: Dialect = Dialect {
    test: "fuzz_mqtt",
    corpus,
    interesting: INTERESTING,
    // A variable byte integer at its maximum or past it, or a two-byte string length.
    big_lengths: &[
        &[0xff, 0xff, 0xff, 0x7f],
        &[0xff, 0xff, 0xff, 0xff],
        &[0xff, 0xff],
        &[0x80, 0x01],
    ],
    structure: fixed_header,
};

/// A fixed header of a random type and a small remaining length.
fn fixed_header(rng: &mut Rng) -> Vec<u8> {
    vec![(rng.below(16) as u8) << 4 | rng.below(16) as u8, rng.below(128) as u8]
}

/// Runs `target` through the shared harness with MQTT's corpus and mutations.
fn fuzz(name: &str, salt: u64, target: impl Fn(&mut Rng, &[u8])) {
    fuzzing::fuzz(&DIALECT, name, salt, target);
}

/// The packet-size limits a codec gets: the default, and tiny ones.
fn limits(rng: &mut Rng) -> Limits {
    let max_packet_size = [Limits::default().max_packet_size, 512, 64, 8][rng.below(4)];
    Limits { max_packet_size }
}

/// Feeds `wire` to `codec` in random chunks; checks every packet that decodes.
fn feed(rng: &mut Rng, codec: &mut Codec, wire: &[u8]) {
    let mut buffer = BytesMut::new();
    let mut fed = 0;
    while fed < wire.len() {
        let chunk = 1 + rng.below(wire.len() - fed);
        buffer.extend_from_slice(&wire[fed..fed + chunk]);
        fed += chunk;
        loop {
            let before = buffer.len();
            match codec.decode(&mut buffer) {
                Ok(Some(packet)) => {
                    let version = codec.version().expect("a decoded packet has a version");
                    round_trip(&packet, version, before - buffer.len());
                }
                Ok(None) => break,
                Err(_) => return,
            }
        }
    }
}

/// A decoded packet encodes, no longer than it came, and decodes to itself.
fn round_trip(packet: &Packet, version: Version, size: usize) {
    let mut codec = Codec::new(Limits::default());
    codec.set_version(version);
    let mut out = BytesMut::new();
    if let Err(e) = codec.encode(packet, &mut out) {
        panic!("decoded {packet:?} does not encode in {version}: {e}");
    }
    assert!(
        out.len() <= size,
        "{packet:?} re-encodes to {} bytes, longer than its {size}",
        out.len()
    );
    let mut again = Codec::new(Limits::default());
    again.set_version(version);
    let decoded = again.decode(&mut out);
    assert_eq!(decoded.as_ref().ok().and_then(Option::as_ref), Some(packet), "{decoded:?}");
    assert!(out.is_empty(), "{} bytes left after re-decoding {packet:?}", out.len());
}

#[test]
fn fuzz_server_codec() {
    fuzz("fuzz_server_codec", 0x7365_7276_6572, |rng, data| {
        let mut codec = Codec::new(limits(rng));
        // A client's stream starts with CONNECT: give most inputs one, so that the other
        // packets get decoded in each version.
        let mut wire = match rng.below(4) {
            3 => Vec::new(),
            i => connect_bytes(Version::ALL[i]),
        };
        wire.extend_from_slice(data);
        feed(rng, &mut codec, &wire);
    });
}

#[test]
fn fuzz_preset_codec() {
    fuzz("fuzz_preset_codec", 0x7072_6573_6574, |rng, data| {
        let mut codec = Codec::new(limits(rng));
        codec.set_version(Version::ALL[rng.below(3)]);
        if rng.chance(4) {
            codec.set_peer_max_packet_size(1 + rng.below(256) as u32);
        }
        feed(rng, &mut codec, data);
    });
}

#[test]
fn fuzz_topics() {
    fuzz("fuzz_topics", 0x746f_7069_6373, |rng, data| {
        // Names and filters from the input's bytes, wildcards and slashes mixed in.
        let text = |rng: &mut Rng| -> String {
            let start = rng.below(data.len());
            let end = (start + rng.below(32)).min(data.len());
            data[start..end]
                .iter()
                .map(|&b| match b % 8 {
                    0 => '/',
                    1 => '+',
                    2 => '#',
                    3 => '$',
                    _ => char::from(b'a' + b % 3),
                })
                .collect()
        };
        let (filter, name) = (text(rng), text(rng));
        let filter_ok = validate_topic_filter(&filter).is_ok();
        let name_ok = validate_topic_name(&name).is_ok();
        if let Ok(Some(shared)) = parse_shared_subscription(&filter) {
            assert!(filter_ok, "{filter:?} is shared but not a filter");
            assert!(validate_topic_filter(shared.filter).is_ok());
        }
        if filter_ok && name_ok {
            let matched = matches(&filter, &name);
            // A name matches itself as a filter, and `#` matches every non-$ name.
            assert!(matches(&name, &name), "{name:?}");
            assert_eq!(matches("#", &name), !name.starts_with('$'), "{name:?}");
            if filter == name {
                assert!(matched);
            }
        } else {
            // The helpers take invalid input without panicking.
            let _ = matches(&filter, &name);
        }
    });
}
