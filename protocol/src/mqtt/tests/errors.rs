//! Every rule the spec makes a MUST for the receiver, one `WireError` variant at a time,
//! and what the encoder refuses.

use bytes::{Bytes, BytesMut};

use super::*;
use crate::mqtt::{
    Auth, Connack, Connect, Disconnect, PacketType, Properties, Property, PropertyId, PubAck,
    Publish, QoS, ReasonCode, RetainHandling, Suback, Subscribe, Subscription, SubscriptionOptions,
    TopicError, Unsuback, Unsubscribe,
};

/// The error decoding `wire` at `version` gives.
fn error(version: Version, wire: &[u8]) -> WireError {
    match decode_once(version, wire) {
        Err(e) => e,
        other => panic!("{wire:02x?} decoded: {other:?}"),
    }
}

/// The error a server codec (no version yet) gives for `wire`.
fn server_error(wire: &[u8]) -> WireError {
    match Codec::new(Limits::default()).decode(&mut BytesMut::from(wire)) {
        Err(e) => e,
        other => panic!("{wire:02x?} decoded: {other:?}"),
    }
}

/// The error encoding `packet` at `version` gives; nothing may be written.
fn encode_error(version: Version, packet: impl Into<Packet>) -> WireError {
    let mut out = BytesMut::new();
    let result = codec(version).encode(&packet.into(), &mut out);
    assert!(out.is_empty(), "wrote {out:02x?}");
    result.expect_err("refused")
}

/// A CONNECT with the given protocol name, level, flags and the rest of its body.
fn connect_bytes(name: &[u8], level: u8, flags: u8, rest: &[u8]) -> Vec<u8> {
    let mut body = vec![0, name.len() as u8];
    body.extend_from_slice(name);
    body.extend_from_slice(&[level, flags, 0, 60]);
    body.extend_from_slice(rest);
    let mut wire = vec![0x10, body.len() as u8];
    wire.extend_from_slice(&body);
    wire
}

#[test]
fn fixed_flags_are_checked_from_the_first_byte() {
    for (byte, packet) in [
        (0x60, PacketType::Pubrel),
        (0x80, PacketType::Subscribe),
        (0xA0, PacketType::Unsubscribe),
        (0x6A, PacketType::Pubrel),
        (0x42, PacketType::Puback),
        (0x21, PacketType::Connack),
        (0xC1, PacketType::Pingreq),
        (0xD8, PacketType::Pingresp),
        (0xE2, PacketType::Disconnect),
    ] {
        assert_eq!(
            error(Version::V3_1_1, &[byte]),
            WireError::InvalidFlags { packet, flags: byte & 0x0f },
            "{byte:02x}"
        );
    }
    assert_eq!(
        error(Version::V5_0, &[0xF1]),
        WireError::InvalidFlags { packet: PacketType::Auth, flags: 1 }
    );
    assert_eq!(
        server_error(&[0x12]),
        WireError::InvalidFlags { packet: PacketType::Connect, flags: 2 }
    );
    // MQTT 3.1 let a resent SUBSCRIBE carry DUP.
    assert!(decode_once(Version::V3_1, &[0x8A, 0x06, 0x00, 0x01, 0x00, 0x01, b'a', 0x00]).is_ok());
    assert!(decode_once(Version::V3_1_1, &[0x8A]).is_err());
}

#[test]
fn publish_qos_3_and_dup_on_qos_0_are_malformed() {
    assert_eq!(
        error(Version::V3_1_1, &[0x36]),
        WireError::InvalidQos { what: "the PUBLISH fixed header" }
    );
    assert_eq!(error(Version::V5_0, &[0x38]), WireError::DupWithQos0);
    assert_eq!(WireError::DupWithQos0.disconnect_reason(), ReasonCode::MalformedPacket);
}

#[test]
fn reserved_packet_types() {
    assert_eq!(error(Version::V3_1_1, &[0x00, 0x00]), WireError::ReservedPacketType(0));
    assert_eq!(error(Version::V3_1_1, &[0xF0, 0x00]), WireError::ReservedPacketType(15));
    assert_eq!(error(Version::V3_1, &[0xF0, 0x00]), WireError::ReservedPacketType(15));
    assert_eq!(decode_once(Version::V5_0, &[0xF0, 0x00]), Ok(Some(Auth::default().into())));
}

#[test]
fn a_client_must_start_with_connect() {
    for (byte, packet) in
        [(0x30, PacketType::Publish), (0xC0, PacketType::Pingreq), (0xF0, PacketType::Auth)]
    {
        assert_eq!(server_error(&[byte, 0x00]), WireError::VersionUnknown { packet });
    }
    assert_eq!(
        WireError::VersionUnknown { packet: PacketType::Publish }.disconnect_reason(),
        ReasonCode::ProtocolError
    );
}

#[test]
fn remaining_length_must_match_the_content() {
    let truncated = |packet, what| WireError::Truncated { packet, what };
    assert_eq!(
        error(Version::V3_1_1, &[0x40, 0x01, 0x00]),
        truncated(PacketType::Puback, "the packet identifier")
    );
    assert_eq!(
        error(Version::V3_1_1, &[0x30, 0x02, 0x00, 0x05]),
        truncated(PacketType::Publish, "the topic name")
    );
    assert_eq!(
        error(Version::V3_1_1, &[0x20, 0x01, 0x00]),
        truncated(PacketType::Connack, "the reason code")
    );
    // A property length beyond the packet.
    assert_eq!(
        error(Version::V5_0, &[0x40, 0x05, 0x00, 0x01, 0x10, 0x09, 0x1F]),
        truncated(PacketType::Puback, "the properties")
    );
    // A 5.0 AUTH with a reason code needs its property length.
    assert_eq!(
        error(Version::V5_0, &[0xF0, 0x01, 0x18]),
        truncated(PacketType::Auth, "the property length")
    );
    let trailing = |packet, count| WireError::TrailingBytes { packet, count };
    assert_eq!(error(Version::V3_1_1, &[0xC0, 0x01, 0x00]), trailing(PacketType::Pingreq, 1));
    assert_eq!(
        error(Version::V3_1_1, &[0x40, 0x03, 0x00, 0x01, 0x00]),
        trailing(PacketType::Puback, 1)
    );
    assert_eq!(error(Version::V3_1_1, &[0xE0, 0x01, 0x00]), trailing(PacketType::Disconnect, 1));
    assert_eq!(
        error(Version::V3_1_1, &[0xB0, 0x03, 0x00, 0x01, 0x00]),
        trailing(PacketType::Unsuback, 1)
    );
    assert_eq!(
        error(Version::V3_1_1, &[0x20, 0x03, 0x00, 0x00, 0x00]),
        trailing(PacketType::Connack, 1)
    );
    assert_eq!(
        WireError::Truncated { packet: PacketType::Puback, what: "x" }.disconnect_reason(),
        ReasonCode::MalformedPacket
    );
}

#[test]
fn packet_identifiers_are_not_zero() {
    for (version, wire, packet) in [
        (Version::V3_1_1, &[0x32, 0x05, 0x00, 0x01, b't', 0x00, 0x00][..], PacketType::Publish),
        (Version::V3_1_1, &[0x40, 0x02, 0x00, 0x00], PacketType::Puback),
        (Version::V5_0, &[0x50, 0x02, 0x00, 0x00], PacketType::Pubrec),
        (Version::V3_1_1, &[0x62, 0x02, 0x00, 0x00], PacketType::Pubrel),
        (Version::V3_1_1, &[0x70, 0x02, 0x00, 0x00], PacketType::Pubcomp),
        (Version::V3_1_1, &[0x82, 0x06, 0x00, 0x00, 0x00, 0x01, b'a', 0x00], PacketType::Subscribe),
        (Version::V3_1_1, &[0x90, 0x03, 0x00, 0x00, 0x00], PacketType::Suback),
        (Version::V3_1_1, &[0xA2, 0x05, 0x00, 0x00, 0x00, 0x01, b'a'], PacketType::Unsubscribe),
        (Version::V3_1_1, &[0xB0, 0x02, 0x00, 0x00], PacketType::Unsuback),
    ] {
        assert_eq!(error(version, wire), WireError::ZeroPacketId { packet }, "{packet}");
    }
    let publish = Publish { qos: QoS::AtLeastOnce, packet_id: Some(0), ..Publish::new("t", "") };
    assert_eq!(
        encode_error(Version::V3_1_1, publish),
        WireError::ZeroPacketId { packet: PacketType::Publish }
    );
    assert_eq!(
        encode_error(Version::V5_0, Packet::Puback(PubAck::new(0))),
        WireError::ZeroPacketId { packet: PacketType::Puback }
    );
}

#[test]
fn subscribe_and_unsubscribe_need_a_filter() {
    assert_eq!(
        error(Version::V3_1_1, &[0x82, 0x02, 0x00, 0x01]),
        WireError::NoTopicFilters { packet: PacketType::Subscribe }
    );
    assert_eq!(
        error(Version::V5_0, &[0xA2, 0x03, 0x00, 0x01, 0x00]),
        WireError::NoTopicFilters { packet: PacketType::Unsubscribe }
    );
    let empty = Subscribe { packet_id: 1, filters: vec![], properties: Properties::new() };
    assert_eq!(
        encode_error(Version::V3_1_1, empty),
        WireError::NoTopicFilters { packet: PacketType::Subscribe }
    );
    let empty = Unsubscribe { packet_id: 1, filters: vec![], properties: Properties::new() };
    assert_eq!(
        encode_error(Version::V5_0, empty),
        WireError::NoTopicFilters { packet: PacketType::Unsubscribe }
    );
}

#[test]
fn strings_must_be_well_formed_utf8_without_nul() {
    // Topic "\xc3\x28" (a broken two-byte sequence), then "a\0".
    assert_eq!(
        error(Version::V3_1_1, &[0x30, 0x04, 0x00, 0x02, 0xC3, 0x28]),
        WireError::InvalidUtf8 { what: "the topic name" }
    );
    assert_eq!(
        error(Version::V3_1_1, &[0x30, 0x04, 0x00, 0x02, b'a', 0x00]),
        WireError::NullCharacter { what: "the topic name" }
    );
    let client_id = connect_bytes(b"MQTT", 4, 0x02, &[0x00, 0x02, 0xFF, 0xFE]);
    assert_eq!(server_error(&client_id), WireError::InvalidUtf8 { what: "the client identifier" });
    // A user property value in 5.0.
    assert_eq!(
        error(Version::V5_0, &[0xE0, 0x09, 0x00, 0x07, 0x26, 0x00, 0x01, b'k', 0x00, 0x01, 0x00]),
        WireError::NullCharacter { what: "a property value" }
    );
    let publish = Publish::new("a\0", "");
    assert!(matches!(
        encode_error(Version::V3_1_1, publish),
        WireError::InvalidTopicName { error: TopicError::NullCharacter, .. }
    ));
    let connect = Connect::new(Version::V3_1_1, "nul\0");
    assert_eq!(
        encode_error(Version::V3_1_1, connect),
        WireError::NullCharacter { what: "the client identifier" }
    );
}

#[test]
fn topic_names_in_publish_have_no_wildcards() {
    for (topic, wire) in [
        ("a/+", &[0x30, 0x05, 0x00, 0x03, b'a', b'/', b'+'][..]),
        ("#", &[0x30, 0x03, 0x00, 0x01, b'#']),
    ] {
        let expected =
            WireError::InvalidTopicName { topic: topic.into(), error: TopicError::WildcardInName };
        assert_eq!(error(Version::V3_1_1, wire), expected);
        assert_eq!(encode_error(Version::V3_1_1, Publish::new(topic, "")), expected);
        assert_eq!(expected.disconnect_reason(), ReasonCode::TopicNameInvalid);
    }
    // Empty: invalid before 5.0; in 5.0 only with a topic alias.
    assert_eq!(
        error(Version::V3_1_1, &[0x30, 0x02, 0x00, 0x00]),
        WireError::InvalidTopicName { topic: String::new(), error: TopicError::Empty }
    );
    assert_eq!(
        error(Version::V5_0, &[0x30, 0x03, 0x00, 0x00, 0x00]),
        WireError::EmptyTopicWithoutAlias
    );
    assert!(decode_once(Version::V5_0, &[0x30, 0x06, 0x00, 0x00, 0x03, 0x23, 0x00, 0x01]).is_ok());
    // A will topic too.
    let will = connect_bytes(b"MQTT", 4, 0x06, &[0x00, 0x01, b'c', 0x00, 0x01, b'+', 0x00, 0x00]);
    assert_eq!(
        server_error(&will),
        WireError::InvalidTopicName { topic: "+".into(), error: TopicError::WildcardInName }
    );
}

#[test]
fn topic_filters_follow_the_wildcard_rules() {
    let subscribe = |filter: &[u8]| {
        let mut wire = vec![0x82, (filter.len() + 5) as u8, 0x00, 0x01, 0x00, filter.len() as u8];
        wire.extend_from_slice(filter);
        wire.push(0x00);
        wire
    };
    for (filter, problem) in [
        ("a/#/b", TopicError::MisplacedMultiLevelWildcard),
        ("a#", TopicError::MisplacedMultiLevelWildcard),
        ("a+", TopicError::MisplacedSingleLevelWildcard),
        ("", TopicError::Empty),
    ] {
        let expected = WireError::InvalidTopicFilter { filter: filter.into(), error: problem };
        assert_eq!(error(Version::V3_1_1, &subscribe(filter.as_bytes())), expected, "{filter}");
        assert_eq!(expected.disconnect_reason(), ReasonCode::TopicFilterInvalid);
    }
    // UNSUBSCRIBE filters too.
    assert_eq!(
        error(Version::V3_1_1, &[0xA2, 0x06, 0x00, 0x01, 0x00, 0x02, b'#', b'#']),
        WireError::InvalidTopicFilter {
            filter: "##".into(),
            error: TopicError::MisplacedMultiLevelWildcard
        }
    );
    // A shared subscription's form is the server's to judge (a SUBACK 0x8F for that one
    // subscription), not a malformed packet, in either version.
    let shared = subscribe(b"$share//a");
    let mut shared_v5 = shared.clone();
    shared_v5.insert(4, 0x00);
    shared_v5[1] += 1;
    assert!(decode_once(Version::V5_0, &shared_v5).is_ok());
    assert!(decode_once(Version::V3_1_1, &shared).is_ok());
}

#[test]
fn subscription_options_reserved_bits_and_retain_handling() {
    let with_options = |version: Version, options: u8| {
        let mut wire = vec![0x82, 0x06, 0x00, 0x01];
        if version == Version::V5_0 {
            wire.push(0x00);
            wire[1] += 1;
        }
        wire.extend_from_slice(&[0x00, 0x01, b'a', options]);
        wire
    };
    assert_eq!(
        error(Version::V3_1_1, &with_options(Version::V3_1_1, 0x04)),
        WireError::ReservedSubscriptionOptions(0x04)
    );
    assert_eq!(
        error(Version::V5_0, &with_options(Version::V5_0, 0x40)),
        WireError::ReservedSubscriptionOptions(0x40)
    );
    assert_eq!(
        error(Version::V3_1_1, &with_options(Version::V3_1_1, 0x03)),
        WireError::InvalidQos { what: "a subscription's options" }
    );
    assert_eq!(
        error(Version::V5_0, &with_options(Version::V5_0, 0x30)),
        WireError::InvalidRetainHandling
    );
    assert_eq!(WireError::InvalidRetainHandling.disconnect_reason(), ReasonCode::ProtocolError);
    // No Local on a shared subscription.
    let options = SubscriptionOptions { no_local: true, ..SubscriptionOptions::default() };
    let shared = Subscribe {
        packet_id: 1,
        filters: vec![Subscription { filter: "$share/g/a".into(), options }],
        properties: Properties::new(),
    };
    let expected = WireError::NoLocalOnSharedSubscription { filter: "$share/g/a".into() };
    assert_eq!(encode_error(Version::V5_0, shared.clone()), expected);
    let wire = [
        0x82, 0x0F, 0x00, 0x01, 0x00, 0x00, 0x0A, b'$', b's', b'h', b'a', b'r', b'e', b'/', b'g',
        b'/', b'a', 0x04,
    ];
    let mut wire = wire.to_vec();
    wire[1] = (wire.len() - 2) as u8;
    assert_eq!(error(Version::V5_0, &wire), expected);
    // The 5.0 options cannot be sent in 3.1.1.
    let options = SubscriptionOptions {
        retain_handling: RetainHandling::DoNotSend,
        ..SubscriptionOptions::default()
    };
    let subscribe = Subscribe {
        packet_id: 1,
        filters: vec![Subscription { filter: "a".into(), options }],
        properties: Properties::new(),
    };
    assert_eq!(
        encode_error(Version::V3_1_1, subscribe),
        WireError::NotInVersion {
            what: "subscription options besides QoS",
            version: Version::V3_1_1
        }
    );
}

#[test]
fn unknown_protocol_names_and_levels_carry_the_level() {
    for (name, level) in
        [(&b"MQTT"[..], 6u8), (b"MQTT", 3), (b"MQIsdp", 4), (b"HTTP", 4), (b"MQTT", 0)]
    {
        let err = server_error(&connect_bytes(name, level, 0x02, &[0x00, 0x00]));
        assert_eq!(
            err,
            WireError::UnsupportedProtocol { name: String::from_utf8_lossy(name).into(), level }
        );
        let (version, connack) = err.connack_refusal().expect("a CONNACK to refuse with");
        assert_eq!(connack.reason, ReasonCode::UnsupportedProtocolVersion);
        // The refusal encodes: 0x01 in 3.1.1, 0x84 in 5.0.
        let refusal = encode(version, &connack.into());
        if level >= 5 {
            assert_eq!(refusal, [0x20, 0x03, 0x00, 0x84, 0x00]);
        } else {
            assert_eq!(refusal, [0x20, 0x02, 0x00, 0x01]);
        }
    }
}

#[test]
fn connect_flags() {
    let body = [0x00, 0x01, b'c'];
    assert_eq!(
        server_error(&connect_bytes(b"MQTT", 4, 0x03, &body)),
        WireError::ReservedConnectFlag
    );
    assert_eq!(
        server_error(&connect_bytes(b"MQTT", 5, 0x01, &body)),
        WireError::ReservedConnectFlag
    );
    // Will QoS 1 or will retain without the will flag.
    assert_eq!(
        server_error(&connect_bytes(b"MQTT", 4, 0x0A, &body)),
        WireError::InvalidWillFlags { flags: 0x0A }
    );
    assert_eq!(
        server_error(&connect_bytes(b"MQTT", 5, 0x22, &body)),
        WireError::InvalidWillFlags { flags: 0x22 }
    );
    // Will QoS 3.
    assert_eq!(
        server_error(&connect_bytes(b"MQTT", 4, 0x1E, &body)),
        WireError::InvalidQos { what: "the CONNECT's will flags" }
    );
    // A password without a user name: an error in 3.1 and 3.1.1, fine in 5.0.
    let password = [0x00, 0x01, b'c', 0x00, 0x01, b'p'];
    for (name, level, version) in
        [(&b"MQTT"[..], 4, Version::V3_1_1), (b"MQIsdp", 3, Version::V3_1)]
    {
        assert_eq!(
            server_error(&connect_bytes(name, level, 0x42, &password)),
            WireError::PasswordWithoutUsername { version }
        );
    }
    let mut v5 = vec![0x00];
    v5.extend_from_slice(&password);
    let connect =
        decode_all(&mut Codec::new(Limits::default()), &connect_bytes(b"MQTT", 5, 0x42, &v5));
    let [Packet::Connect(connect)] = &connect[..] else { panic!("{connect:?}") };
    assert_eq!((connect.username.as_deref(), connect.password.as_deref()), (None, Some(&b"p"[..])));
    let bad =
        Connect { password: Some(Bytes::from_static(b"p")), ..Connect::new(Version::V3_1_1, "c") };
    assert_eq!(
        encode_error(Version::V3_1_1, bad),
        WireError::PasswordWithoutUsername { version: Version::V3_1_1 }
    );
}

#[test]
fn connack_flags_and_return_codes() {
    assert_eq!(
        error(Version::V3_1_1, &[0x20, 0x02, 0x02, 0x00]),
        WireError::InvalidConnackFlags(0x02)
    );
    assert_eq!(
        error(Version::V3_1_1, &[0x20, 0x02, 0x00, 0x06]),
        WireError::InvalidReasonCode {
            packet: PacketType::Connack,
            code: 6,
            version: Version::V3_1_1
        }
    );
    assert_eq!(
        error(Version::V5_0, &[0x20, 0x03, 0x00, 0x01, 0x00]),
        WireError::InvalidReasonCode {
            packet: PacketType::Connack,
            code: 1,
            version: Version::V5_0
        }
    );
    // A 5.0 reason code without a 3.1.1 return code cannot be sent to a 3.1.1 client.
    let banned = Connack { reason: ReasonCode::Banned, ..Connack::default() };
    assert_eq!(
        encode_error(Version::V3_1_1, banned),
        WireError::InvalidReasonCode {
            packet: PacketType::Connack,
            code: 0x8A,
            version: Version::V3_1_1
        }
    );
}

#[test]
fn reason_codes_must_belong_to_their_packet() {
    for (wire, packet, code) in [
        (&[0x40, 0x03, 0x00, 0x01, 0x92][..], PacketType::Puback, 0x92),
        (&[0x62, 0x03, 0x00, 0x01, 0x10], PacketType::Pubrel, 0x10),
        (&[0x90, 0x04, 0x00, 0x01, 0x00, 0x03], PacketType::Suback, 0x03),
        (&[0xB0, 0x04, 0x00, 0x01, 0x00, 0x04], PacketType::Unsuback, 0x04),
        (&[0xE0, 0x01, 0x18], PacketType::Disconnect, 0x18),
        (&[0xF0, 0x02, 0x04, 0x00], PacketType::Auth, 0x04),
        (&[0xE0, 0x01, 0x05], PacketType::Disconnect, 0x05),
    ] {
        assert_eq!(
            error(Version::V5_0, wire),
            WireError::InvalidReasonCode { packet, code, version: Version::V5_0 },
            "{wire:02x?}"
        );
    }
    // 3.1.1's SUBACK: 0x00, 0x01, 0x02 and 0x80 only.
    assert_eq!(
        error(Version::V3_1_1, &[0x90, 0x03, 0x00, 0x01, 0x87]),
        WireError::InvalidReasonCode {
            packet: PacketType::Suback,
            code: 0x87,
            version: Version::V3_1_1
        }
    );
    let suback = Suback {
        packet_id: 1,
        reasons: vec![ReasonCode::NotAuthorized],
        properties: Properties::new(),
    };
    assert!(matches!(encode_error(Version::V3_1_1, suback), WireError::InvalidReasonCode { .. }));
    let puback = PubAck { reason: ReasonCode::PacketIdentifierNotFound, ..PubAck::new(1) };
    assert!(matches!(
        encode_error(Version::V5_0, Packet::Puback(puback)),
        WireError::InvalidReasonCode { .. }
    ));
}

#[test]
fn properties_must_be_known_allowed_and_single() {
    // PUBACK (id 1, reason 0) with the given properties.
    let puback = |properties: &[u8]| {
        let mut wire =
            vec![0x40, (properties.len() + 4) as u8, 0x00, 0x01, 0x00, properties.len() as u8];
        wire.extend_from_slice(properties);
        wire
    };
    assert_eq!(
        error(Version::V5_0, &puback(&[0x04, 0x00])),
        WireError::UnknownProperty { id: 0x04, place: "PUBACK" }
    );
    let not_allowed = error(Version::V5_0, &puback(&[0x11, 0, 0, 0, 1]));
    assert_eq!(
        not_allowed,
        WireError::PropertyNotAllowed {
            property: PropertyId::SessionExpiryInterval,
            place: "PUBACK"
        }
    );
    assert_eq!(not_allowed.disconnect_reason(), ReasonCode::MalformedPacket);
    let twice = error(Version::V5_0, &puback(&[0x1F, 0, 1, b'a', 0x1F, 0, 1, b'b']));
    assert_eq!(
        twice,
        WireError::DuplicateProperty { property: PropertyId::ReasonString, place: "PUBACK" }
    );
    assert_eq!(twice.disconnect_reason(), ReasonCode::ProtocolError);
    // User properties repeat, in order.
    let users = decode_one(
        Version::V5_0,
        &puback(&[0x26, 0, 1, b'a', 0, 1, b'1', 0x26, 0, 1, b'a', 0, 1, b'2']),
    );
    let Packet::Puback(ack) = users else { panic!("{users:?}") };
    assert_eq!(ack.properties.user_properties().collect::<Vec<_>>(), [("a", "1"), ("a", "2")]);
    // A will delay interval outside the will, a topic alias in the will.
    let connect = Connect {
        properties: Properties::new().with(Property::WillDelayInterval(1)),
        ..Connect::new(Version::V5_0, "c")
    };
    assert_eq!(
        encode_error(Version::V5_0, connect),
        WireError::PropertyNotAllowed { property: PropertyId::WillDelayInterval, place: "CONNECT" }
    );
    // Subscription identifiers repeat in PUBLISH but not in SUBSCRIBE.
    let subscribe = Subscribe {
        packet_id: 1,
        filters: vec![Subscription { filter: "a".into(), options: SubscriptionOptions::default() }],
        properties: Properties::new()
            .with(Property::SubscriptionIdentifier(1))
            .with(Property::SubscriptionIdentifier(2)),
    };
    assert_eq!(
        encode_error(Version::V5_0, subscribe),
        WireError::DuplicateProperty {
            property: PropertyId::SubscriptionIdentifier,
            place: "SUBSCRIBE"
        }
    );
}

#[test]
fn property_values_the_spec_forbids() {
    let invalid = |property, value| WireError::InvalidPropertyValue { property, value };
    // CONNECT 5.0 with properties.
    let connect = |properties: &[u8]| {
        let mut rest = vec![properties.len() as u8];
        rest.extend_from_slice(properties);
        rest.extend_from_slice(&[0x00, 0x01, b'c']);
        connect_bytes(b"MQTT", 5, 0x02, &rest)
    };
    assert_eq!(server_error(&connect(&[0x21, 0x00, 0x00])), invalid(PropertyId::ReceiveMaximum, 0));
    assert_eq!(
        server_error(&connect(&[0x27, 0, 0, 0, 0])),
        invalid(PropertyId::MaximumPacketSize, 0)
    );
    assert_eq!(
        server_error(&connect(&[0x17, 0x02])),
        invalid(PropertyId::RequestProblemInformation, 2)
    );
    assert_eq!(
        server_error(&connect(&[0x16, 0x00, 0x01, b'x'])),
        WireError::AuthenticationDataWithoutMethod
    );
    // PUBLISH with a topic alias of 0, SUBSCRIBE with subscription identifier 0.
    assert_eq!(
        error(Version::V5_0, &[0x30, 0x07, 0x00, 0x01, b't', 0x03, 0x23, 0x00, 0x00]),
        invalid(PropertyId::TopicAlias, 0)
    );
    assert_eq!(
        error(Version::V5_0, &[0x82, 0x09, 0x00, 0x01, 0x02, 0x0B, 0x00, 0x00, 0x01, b'a', 0x00]),
        invalid(PropertyId::SubscriptionIdentifier, 0)
    );
    // CONNACK with maximum QoS 2 (absent means 2; present it is 0 or 1).
    assert_eq!(
        error(Version::V5_0, &[0x20, 0x05, 0x00, 0x00, 0x02, 0x24, 0x02]),
        invalid(PropertyId::MaximumQos, 2)
    );
}

#[test]
fn auth_names_its_method_unless_it_is_the_empty_success() {
    // Continue authentication with only a reason string.
    let wire = [0xF0, 0x06, 0x18, 0x04, 0x1F, 0x00, 0x01, b'r'];
    assert_eq!(error(Version::V5_0, &wire), WireError::AuthenticationMethodMissing);
    let auth = Auth { reason: ReasonCode::ReAuthenticate, properties: Properties::new() };
    assert_eq!(encode_error(Version::V5_0, auth), WireError::AuthenticationMethodMissing);
    // The long form of the empty success is the empty success.
    assert_eq!(
        decode_once(Version::V5_0, &[0xF0, 0x02, 0x00, 0x00]),
        Ok(Some(Auth::default().into()))
    );
    assert_eq!(
        WireError::AuthenticationMethodMissing.disconnect_reason(),
        ReasonCode::ProtocolError
    );
}

#[test]
fn fields_a_version_lacks_are_not_encoded() {
    let with_properties = Publish {
        properties: Properties::new().with(Property::MessageExpiryInterval(1)),
        ..Publish::new("t", "")
    };
    assert_eq!(
        encode_error(Version::V3_1_1, with_properties),
        WireError::NotInVersion { what: "properties", version: Version::V3_1_1 }
    );
    assert_eq!(
        encode_error(Version::V3_1_1, Auth::default()),
        WireError::NotInVersion { what: "AUTH", version: Version::V3_1_1 }
    );
    let reason = PubAck { reason: ReasonCode::NoMatchingSubscribers, ..PubAck::new(1) };
    assert_eq!(
        encode_error(Version::V3_1, Packet::Puback(reason)),
        WireError::NotInVersion { what: "a reason code", version: Version::V3_1 }
    );
    let disconnect = Disconnect { reason: ReasonCode::ServerBusy, ..Disconnect::default() };
    assert!(matches!(encode_error(Version::V3_1_1, disconnect), WireError::NotInVersion { .. }));
    let unsuback = Unsuback {
        packet_id: 1,
        reasons: vec![ReasonCode::Success],
        properties: Properties::new(),
    };
    assert!(matches!(encode_error(Version::V3_1_1, unsuback), WireError::NotInVersion { .. }));
}

#[test]
fn what_cannot_be_encoded() {
    let long = "a".repeat(65_536);
    assert_eq!(
        encode_error(Version::V3_1_1, Connect::new(Version::V3_1_1, long.clone())),
        WireError::StringTooLong { what: "the client identifier", len: 65_536 }
    );
    assert!(matches!(
        encode_error(Version::V3_1_1, Publish::new(long, "")),
        WireError::InvalidTopicName { error: TopicError::TooLong(65_536), .. }
    ));
    let qos0_with_id = Publish { packet_id: Some(1), ..Publish::new("t", "") };
    assert!(matches!(encode_error(Version::V3_1_1, qos0_with_id), WireError::Unencodable(_)));
    let qos1_without_id = Publish { qos: QoS::AtLeastOnce, ..Publish::new("t", "") };
    assert!(matches!(encode_error(Version::V3_1_1, qos1_without_id), WireError::Unencodable(_)));
    let dup = Publish { dup: true, ..Publish::new("t", "") };
    assert_eq!(encode_error(Version::V3_1_1, dup), WireError::DupWithQos0);
    let binary = Connect {
        username: Some("u".into()),
        password: Some(Bytes::from(vec![0u8; 70_000])),
        ..Connect::new(Version::V3_1_1, "c")
    };
    assert_eq!(
        encode_error(Version::V3_1_1, binary),
        WireError::StringTooLong { what: "the password", len: 70_000 }
    );
    assert_eq!(
        WireError::Unencodable(String::new()).disconnect_reason(),
        ReasonCode::ImplementationSpecificError
    );
}
