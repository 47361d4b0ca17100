//! The recordings of mosquitto 2.0.11 with mosquitto_pub/sub and paho-mqtt 2.2.0
//! (`protocol/fixtures/mqtt`, see its README): every packet of both directions of every
//! connection decodes, the whole stream leaves no byte over, and each packet re-encodes
//! to the very bytes it came from.
//!
//! Byte-exactness holds for every packet recorded: both peers use minimal remaining
//! lengths and the short forms of 5.0's acknowledgements, as our encoder does, and
//! properties keep their wire order. Should a re-recording bring a packet in a longer but
//! valid form (a non-minimal length, a long-form PUBACK), [`reencode`] accepts it when
//! it decodes to the same packet and is longer than ours, and the test lists it.

use std::path::PathBuf;

use bytes::BytesMut;

use super::*;
use crate::mqtt::{Packet, PacketType, Property, QoS, ReasonCode};

/// The fixture folder: `$FERROMQ_MQTT_FIXTURES`, or the copy in `protocol/fixtures/`.
fn fixtures_dir() -> PathBuf {
    let candidates = [
        std::env::var_os("FERROMQ_MQTT_FIXTURES").map(PathBuf::from),
        Some(PathBuf::from(env!("CARGO_MANIFEST_DIR")).join("fixtures/mqtt")),
    ];
    candidates
        .into_iter()
        .flatten()
        .find(|p| p.join("README.md").is_file())
        .expect("MQTT fixtures not found: set FERROMQ_MQTT_FIXTURES to protocol/fixtures/mqtt")
}

/// One recorded connection: both directions, raw.
struct Connection {
    name: String,
    client: Vec<u8>,
    broker: Vec<u8>,
}

/// Every connection of every scenario, in folder and connection order.
fn connections() -> Vec<Connection> {
    let dir = fixtures_dir();
    let mut scenarios: Vec<PathBuf> = std::fs::read_dir(&dir)
        .expect("fixture folder")
        .filter_map(|entry| entry.ok().map(|e| e.path()))
        .filter(|path| path.is_dir())
        .collect();
    scenarios.sort();
    let mut out = Vec::new();
    for scenario in scenarios {
        let mut clients: Vec<PathBuf> = std::fs::read_dir(&scenario)
            .expect("scenario folder")
            .filter_map(|entry| entry.ok().map(|e| e.path()))
            .filter(|p| p.to_string_lossy().ends_with(".client-to-broker.bin"))
            .collect();
        clients.sort();
        for client_path in clients {
            let client_name = client_path.to_string_lossy().into_owned();
            let broker_path = client_name.replace(".client-to-broker.bin", ".broker-to-client.bin");
            let read = |path: &str| std::fs::read(path).unwrap_or_else(|e| panic!("{path}: {e}"));
            let name = client_path
                .strip_prefix(&dir)
                .map_or(client_name.clone(), |p| p.to_string_lossy().into_owned())
                .replace(".client-to-broker.bin", "");
            out.push(Connection { name, client: read(&client_name), broker: read(&broker_path) });
        }
    }
    assert!(out.len() >= 10, "the fixtures hold connections: found {}", out.len());
    out
}

/// Decodes a whole direction with `codec`: each packet with its recorded bytes.
fn decode_direction(codec: &mut Codec, wire: &[u8], context: &str) -> Vec<(Packet, Vec<u8>)> {
    let mut buf = BytesMut::from(wire);
    let mut out = Vec::new();
    loop {
        let offset = wire.len() - buf.len();
        match codec.decode(&mut buf) {
            Ok(Some(packet)) => {
                let end = wire.len() - buf.len();
                out.push((packet, wire[offset..end].to_vec()));
            }
            Ok(None) => break,
            Err(e) => panic!("{context}: decode error at byte {offset}: {e}"),
        }
    }
    assert!(buf.is_empty(), "{context}: {} bytes left over", buf.len());
    out
}

/// Re-encodes each packet at `version`: byte-exact, or (returned, by index) a longer
/// recorded form that decodes to the same packet.
fn reencode(version: Version, packets: &[(Packet, Vec<u8>)], context: &str) -> Vec<usize> {
    let mut longer = Vec::new();
    for (i, (packet, original)) in packets.iter().enumerate() {
        let ours = encode(version, packet);
        if &ours == original {
            continue;
        }
        assert_eq!(&decode_one(version, &ours), packet, "{context} packet {i}");
        assert!(
            ours.len() < original.len(),
            "{context} packet {i} ({}) re-encodes differently:\n  \
             recorded {original:02x?}\n  ours     {ours:02x?}",
            packet.packet_type()
        );
        longer.push(i);
    }
    longer
}

#[test]
fn every_recorded_packet_decodes_and_re_encodes_byte_exact() {
    let mut packets_seen = 0;
    let mut longer_forms = Vec::new();
    for connection in connections() {
        let context = format!("{} client-to-broker", connection.name);
        let mut server = Codec::new(Limits::default());
        if let Some(level) = unsupported_level(&connection.client) {
            check_refusal(&connection, level);
            continue;
        }
        let from_client = decode_direction(&mut server, &connection.client, &context);
        let version = server.version().unwrap_or_else(|| panic!("{context}: no CONNECT"));
        assert!(matches!(from_client[0].0, Packet::Connect(_)), "{context} starts with CONNECT");
        let mut client = codec(version);
        let from_broker = decode_direction(
            &mut client,
            &connection.broker,
            &format!("{} broker-to-client", connection.name),
        );
        assert!(
            matches!(from_broker[0].0, Packet::Connack(_)),
            "{} answers with CONNACK",
            connection.name
        );
        for (side, packets) in
            [("client-to-broker", &from_client), ("broker-to-client", &from_broker)]
        {
            let context = format!("{} {side}", connection.name);
            for i in reencode(version, packets, &context) {
                longer_forms.push(format!("{context} packet {i}"));
            }
            packets_seen += packets.len();
        }
    }
    assert!(packets_seen > 100, "{packets_seen} packets");
    // Today's recordings are byte-exact throughout; see the module doc.
    assert_eq!(longer_forms, Vec::<String>::new());
}

/// The level of a CONNECT we do not speak at the start of `wire`, if that is what it is.
fn unsupported_level(wire: &[u8]) -> Option<u8> {
    match Codec::new(Limits::default()).decode(&mut BytesMut::from(wire)) {
        Err(WireError::UnsupportedProtocol { level, .. }) => Some(level),
        _ => None,
    }
}

/// A CONNECT at an unknown level: our error carries it, and the broker's answer is a
/// refusal. mosquitto answers in 3.1.1's layout (return code 1) whatever the level;
/// [`WireError::connack_refusal`] picks 5.0's layout from level 5 up.
fn check_refusal(connection: &Connection, level: u8) {
    assert_eq!(level, 6, "{}", connection.name);
    let packets =
        decode_direction(&mut codec(Version::V3_1_1), &connection.broker, &connection.name);
    let [(Packet::Connack(connack), original)] = &packets[..] else {
        panic!("{}: {packets:?}", connection.name)
    };
    assert_eq!(connack.reason, ReasonCode::UnsupportedProtocolVersion);
    assert_eq!(&encode(Version::V3_1_1, &Packet::Connack(connack.clone())), original);
}

#[test]
fn recorded_packets_decode_alike_one_byte_at_a_time() {
    for connection in connections() {
        if unsupported_level(&connection.client).is_some() {
            continue;
        }
        let mut whole = Codec::new(Limits::default());
        let expected = decode_all(&mut whole, &connection.client);
        let mut server = Codec::new(Limits::default());
        let one_by_one = decode_byte_by_byte(&mut server, &connection.client).expect("decodes");
        assert_eq!(one_by_one, expected, "{}", connection.name);
        let version = server.version().expect("a version");
        let expected = decode_all(&mut codec(version), &connection.broker);
        let one_by_one =
            decode_byte_by_byte(&mut codec(version), &connection.broker).expect("decodes");
        assert_eq!(one_by_one, expected, "{}", connection.name);
    }
}

#[test]
fn the_v5_recording_carries_what_its_readme_says() {
    let connection = connections()
        .into_iter()
        .find(|c| c.name.starts_with("v5-properties") && c.name.ends_with("conn-01"))
        .expect("v5-properties conn-01");
    let packets = decode_all(&mut Codec::new(Limits::default()), &connection.client);
    let Packet::Connect(connect) = &packets[0] else { panic!("{:?}", packets[0]) };
    assert_eq!(connect.version, Version::V5_0);
    assert_eq!(connect.properties.session_expiry_interval(), Some(300));
    assert_eq!(connect.properties.receive_maximum(), Some(10));
    assert_eq!(connect.properties.maximum_packet_size(), Some(65536));
    assert_eq!(connect.properties.topic_alias_maximum(), Some(5));
    assert_eq!(
        connect.properties.user_properties().collect::<Vec<_>>(),
        [("fixture", "v5-properties"), ("role", "subscriber")]
    );
    let Packet::Subscribe(subscribe) = &packets[1] else { panic!("{:?}", packets[1]) };
    assert_eq!(subscribe.properties.subscription_identifiers().collect::<Vec<_>>(), [7]);
    for subscription in &subscribe.filters {
        assert!(subscription.options.no_local && subscription.options.retain_as_published);
    }
    let Some(Packet::Disconnect(disconnect)) = packets.last() else { panic!("{packets:?}") };
    assert_eq!(disconnect.reason, ReasonCode::DisconnectWithWillMessage);
    assert_eq!(disconnect.properties.reason_string(), Some("fixture subscriber done"));

    let deliveries = decode_all(&mut codec(Version::V5_0), &connection.broker);
    let publishes: Vec<_> = deliveries
        .iter()
        .filter_map(|p| match p {
            Packet::Publish(publish) => Some(publish),
            _ => None,
        })
        .collect();
    assert_eq!(publishes.len(), 2);
    assert_eq!(publishes[0].qos, QoS::AtLeastOnce);
    assert!(publishes[0].retain);
    for publish in &publishes {
        assert_eq!(publish.topic, "fixture/v5/data");
        assert_eq!(publish.properties.subscription_identifiers().collect::<Vec<_>>(), [7]);
        assert_eq!(publish.properties.content_type(), Some("text/plain"));
        assert!(publish.properties.iter().any(|p| matches!(p, Property::CorrelationData(_))));
    }
    // The publisher's second PUBLISH carried only its topic alias.
    let publisher = connections()
        .into_iter()
        .find(|c| c.name.starts_with("v5-properties") && c.name.ends_with("conn-02"))
        .expect("v5-properties conn-02");
    let sent = decode_all(&mut Codec::new(Limits::default()), &publisher.client);
    let aliased = sent
        .iter()
        .filter_map(|p| match p {
            Packet::Publish(publish) if publish.topic.is_empty() => Some(publish),
            _ => None,
        })
        .next()
        .expect("a PUBLISH with an empty topic");
    assert_eq!(aliased.properties.topic_alias(), Some(1));
    assert_eq!(sent.iter().filter(|p| p.packet_type() == PacketType::Publish).count(), 2);
}

#[test]
fn the_large_payload_arrives_whole_and_zero_copy() {
    let connection = connections()
        .into_iter()
        .find(|c| c.name.starts_with("v311-large") && c.name.ends_with("conn-02"))
        .expect("v311-large conn-02");
    let mut buf = BytesMut::from(&connection.client[..]);
    let base = buf.as_ptr() as usize;
    let mut server = Codec::new(Limits::default());
    assert!(matches!(server.decode(&mut buf), Ok(Some(Packet::Connect(_)))));
    let offset = connection.client.len() - buf.len();
    let Ok(Some(Packet::Publish(publish))) = server.decode(&mut buf) else { panic!("a PUBLISH") };
    assert_eq!(publish.payload.len(), 300_000);
    assert!(publish.payload.iter().enumerate().all(|(i, &b)| b == i as u8));
    // Fixed header with a 3-byte remaining length, then the topic and packet identifier.
    let header = 1 + 3 + 2 + publish.topic.len() + 2;
    assert_eq!(publish.payload.as_ptr() as usize, base + offset + header);
}
