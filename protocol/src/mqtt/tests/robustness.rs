//! Hostile input, deterministically: every bit flip and every truncation of packets of
//! each type (ours and the recorded ones) either fails cleanly or decodes to a packet that
//! re-encodes, no longer than it came, to bytes that decode to it again. The time-bounded
//! random search is `protocol/tests/fuzz_mqtt.rs`.

use bytes::{Bytes, BytesMut};

use super::*;
use crate::mqtt::{
    Auth, Connack, Connect, Disconnect, Properties, Property, PubAck, Publish, QoS, ReasonCode,
    Suback, Subscribe, Subscription, SubscriptionOptions, Unsuback, Unsubscribe, Will,
};

/// One packet of each type, with every kind of field the version has.
fn samples(version: Version) -> Vec<Packet> {
    let v5 = version == Version::V5_0;
    let props = |list: Vec<Property>| if v5 { Properties::from(list) } else { Properties::new() };
    let mut packets: Vec<Packet> = vec![
        Connect {
            will: Some(Will {
                topic: "w".into(),
                payload: Bytes::from_static(b"p"),
                qos: QoS::ExactlyOnce,
                retain: true,
                properties: props(vec![Property::WillDelayInterval(1)]),
            }),
            username: Some("u".into()),
            password: Some(Bytes::from_static(b"p")),
            properties: props(vec![
                Property::ReceiveMaximum(1),
                Property::AuthenticationMethod("m".into()),
            ]),
            ..Connect::new(version, "id")
        }
        .into(),
        Connack {
            session_present: true,
            properties: props(vec![Property::MaximumQos(0)]),
            ..Connack::default()
        }
        .into(),
        Publish {
            qos: QoS::AtLeastOnce,
            packet_id: Some(3),
            properties: props(vec![Property::TopicAlias(1), Property::SubscriptionIdentifier(130)]),
            ..Publish::new("a/b", "xy")
        }
        .into(),
        Packet::Puback(PubAck {
            reason: if v5 { ReasonCode::QuotaExceeded } else { ReasonCode::Success },
            properties: props(vec![Property::ReasonString("r".into())]),
            ..PubAck::new(1)
        }),
        Packet::Pubrel(PubAck::new(2)),
        Subscribe {
            packet_id: 4,
            filters: vec![Subscription {
                filter: "a/#".into(),
                options: SubscriptionOptions::qos(QoS::AtLeastOnce),
            }],
            properties: props(vec![Property::SubscriptionIdentifier(5)]),
        }
        .into(),
        Suback { packet_id: 4, reasons: vec![ReasonCode::GrantedQos2], properties: props(vec![]) }
            .into(),
        Unsubscribe { packet_id: 5, filters: vec!["+".into()], properties: props(vec![]) }.into(),
        Unsuback {
            packet_id: 5,
            reasons: if v5 { vec![ReasonCode::Success] } else { vec![] },
            properties: props(vec![]),
        }
        .into(),
        Packet::Pingreq,
        Disconnect {
            reason: if v5 { ReasonCode::ServerBusy } else { ReasonCode::Success },
            properties: props(vec![Property::ServerReference("s".into())]),
        }
        .into(),
    ];
    if v5 {
        let method = Properties::new().with(Property::AuthenticationMethod("m".into()));
        packets.push(Auth { reason: ReasonCode::ReAuthenticate, properties: method }.into());
    }
    packets
}

/// Decodes `wire` at `version` (or, for `None`, with a server's codec); whatever decodes
/// must survive a round trip.
fn check(version: Option<Version>, wire: &[u8]) {
    let mut codec = Codec::new(Limits::default());
    if let Some(version) = version {
        codec.set_version(version);
    }
    let mut buf = BytesMut::from(wire);
    while let Ok(Some(packet)) = codec.decode(&mut buf) {
        let used = wire.len() - buf.len();
        let version = codec.version().expect("a version once a packet decoded");
        let mut out = BytesMut::new();
        let mut encoder = Codec::new(Limits::default());
        encoder.set_version(version);
        encoder
            .encode(&packet, &mut out)
            .unwrap_or_else(|e| panic!("{packet:?} from {wire:02x?}: {e}"));
        assert!(out.len() <= used, "{packet:?} from {wire:02x?} grew to {out:02x?}");
        assert_eq!(decode_one(version, &out), packet, "{wire:02x?}");
    }
}

/// Every bit flip and every truncation of `wire`.
fn mutilate(version: Option<Version>, wire: &[u8]) {
    for cut in 0..wire.len() {
        let mut codec = Codec::new(Limits::default());
        if let Some(version) = version {
            codec.set_version(version);
        }
        // A prefix of a valid packet is a packet still arriving.
        let result = codec.decode(&mut BytesMut::from(&wire[..cut]));
        assert_eq!(result, Ok(None), "{wire:02x?} cut at {cut}");
    }
    let mut flipped = wire.to_vec();
    for i in 0..wire.len() {
        for bit in 0..8 {
            flipped[i] ^= 1 << bit;
            check(version, &flipped);
            flipped[i] ^= 1 << bit;
        }
    }
}

#[test]
fn bit_flips_and_truncations_of_each_packet_type() {
    for version in Version::ALL {
        for packet in samples(version) {
            let wire = encode(version, &packet);
            mutilate(Some(version), &wire);
            if let Packet::Connect(_) = packet {
                mutilate(None, &wire);
            }
        }
    }
}

#[test]
fn bit_flips_of_the_recorded_packets() {
    let dir = std::path::Path::new(env!("CARGO_MANIFEST_DIR")).join("fixtures/mqtt");
    let Ok(scenarios) = std::fs::read_dir(dir) else { return };
    for scenario in scenarios.flatten() {
        for file in std::fs::read_dir(scenario.path()).into_iter().flatten().flatten() {
            let Ok(wire) = std::fs::read(file.path()) else { continue };
            // Each packet alone, flipped one bit per byte, read in every version.
            let mut rest = &wire[..];
            while !rest.is_empty() {
                let Some(size) = packet_size(rest) else { break };
                let Some(packet) = rest.get(..size) else { break };
                if size <= 512 {
                    for version in Version::ALL {
                        let mut flipped = packet.to_vec();
                        for i in 0..flipped.len() {
                            flipped[i] ^= 0x01 << (i % 8);
                            check(Some(version), &flipped);
                            flipped[i] ^= 0x01 << (i % 8);
                        }
                    }
                }
                rest = &rest[size..];
            }
        }
    }
}

/// The size of the packet at the front of `wire` by its fixed header.
fn packet_size(wire: &[u8]) -> Option<usize> {
    let mut remaining = 0usize;
    for i in 0..4 {
        let byte = *wire.get(1 + i)?;
        remaining |= usize::from(byte & 0x7f) << (7 * i);
        if byte & 0x80 == 0 {
            return Some(2 + i + remaining);
        }
    }
    None
}
