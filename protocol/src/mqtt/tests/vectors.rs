//! Byte-exact packets derived by hand from the specification's field descriptions: each
//! decodes to the packet written beside it and that packet encodes to the same bytes.

use bytes::Bytes;

use super::*;
use crate::mqtt::{
    Auth, Connack, Connect, Disconnect, Properties, Property, PubAck, Publish, QoS, ReasonCode,
    RetainHandling, Suback, Subscribe, Subscription, SubscriptionOptions, Unsuback, Will,
};

/// Checks both directions: `wire` decodes to `packet`, `packet` encodes to `wire`.
fn exact(version: Version, wire: &[u8], packet: Packet) {
    assert_eq!(decode_one(version, wire), packet, "decoding {wire:02x?}");
    assert_eq!(encode(version, &packet), wire, "encoding {packet:?}");
}

#[test]
fn connect_3_1_1_with_credentials() {
    let wire = [
        0x10, 0x17, // CONNECT, remaining length 23
        0x00, 0x04, b'M', b'Q', b'T', b'T', // protocol name
        0x04, // level 4
        0xC2, // user name, password, clean session
        0x00, 0x3C, // keep alive 60 s
        0x00, 0x05, b'f', b'e', b'r', b'r', b'o', // client identifier
        0x00, 0x01, b'u', // user name
        0x00, 0x01, b'p', // password
    ];
    let connect = Connect {
        keep_alive: 60,
        username: Some("u".into()),
        password: Some(Bytes::from_static(b"p")),
        ..Connect::new(Version::V3_1_1, "ferro")
    };
    let mut server = Codec::new(Limits::default());
    assert_eq!(decode_all(&mut server, &wire), [Packet::Connect(connect.clone())]);
    assert_eq!(server.version(), Some(Version::V3_1_1));
    assert_eq!(encode(Version::V3_1_1, &connect.into()), wire);
}

#[test]
fn connect_3_1_with_a_retained_will() {
    let wire = [
        0x10, 0x17, // CONNECT, remaining length 23
        0x00, 0x06, b'M', b'Q', b'I', b's', b'd', b'p', // IBM's protocol name
        0x03, // level 3
        0x2E, // will retain, will QoS 1, will flag, clean session
        0x00, 0x0A, // keep alive 10 s
        0x00, 0x01, b'c', // client identifier
        0x00, 0x01, b'w', // will topic
        0x00, 0x03, b'b', b'y', b'e', // will message
    ];
    let will = Will {
        topic: "w".into(),
        payload: Bytes::from_static(b"bye"),
        qos: QoS::AtLeastOnce,
        retain: true,
        properties: Properties::new(),
    };
    let connect = Connect { keep_alive: 10, will: Some(will), ..Connect::new(Version::V3_1, "c") };
    let mut server = Codec::new(Limits::default());
    assert_eq!(decode_all(&mut server, &wire), [Packet::Connect(connect.clone())]);
    assert_eq!(server.version(), Some(Version::V3_1));
    assert_eq!(encode(Version::V3_1, &connect.into()), wire);
}

#[test]
fn connect_5_0_with_properties_and_will_properties() {
    let wire = [
        0x10, 0x2A, // CONNECT, remaining length 42
        0x00, 0x04, b'M', b'Q', b'T', b'T', 0x05, // "MQTT", level 5
        0x06, // will flag, clean start
        0x00, 0x1E, // keep alive 30 s
        0x0F, // properties: 15 bytes
        0x11, 0x00, 0x00, 0x0E, 0x10, // session expiry interval 3600
        0x21, 0x00, 0x14, // receive maximum 20
        0x26, 0x00, 0x01, b'k', 0x00, 0x01, b'v', // user property k=v
        0x00, 0x02, b'c', b'5', // client identifier
        0x05, 0x18, 0x00, 0x00, 0x00, 0x05, // will properties: will delay interval 5
        0x00, 0x01, b't', // will topic
        0x00, 0x01, b'x', // will payload
    ];
    let connect = Connect {
        keep_alive: 30,
        will: Some(Will {
            topic: "t".into(),
            payload: Bytes::from_static(b"x"),
            qos: QoS::AtMostOnce,
            retain: false,
            properties: Properties::new().with(Property::WillDelayInterval(5)),
        }),
        properties: Properties::new()
            .with(Property::SessionExpiryInterval(3600))
            .with(Property::ReceiveMaximum(20))
            .with(Property::UserProperty("k".into(), "v".into())),
        ..Connect::new(Version::V5_0, "c5")
    };
    let mut server = Codec::new(Limits::default());
    let decoded = decode_all(&mut server, &wire);
    assert_eq!(decoded, [Packet::Connect(connect.clone())]);
    assert_eq!(server.version(), Some(Version::V5_0));
    let Packet::Connect(decoded) = &decoded[0] else { unreachable!() };
    assert_eq!(decoded.properties.session_expiry_interval(), Some(3600));
    let will = decoded.will.as_ref().expect("a will");
    assert_eq!(will.properties.will_delay_interval(), Some(5));
    assert_eq!(encode(Version::V5_0, &connect.into()), wire);
}

#[test]
fn connack_in_each_layout() {
    let accepted = Connack { session_present: true, ..Connack::default() };
    exact(Version::V3_1_1, &[0x20, 0x02, 0x01, 0x00], accepted.clone().into());
    exact(Version::V3_1, &[0x20, 0x02, 0x01, 0x00], accepted.into());
    // 3.1.1 return code 5 is 5.0's 0x87, not authorized.
    let refused = Connack { reason: ReasonCode::NotAuthorized, ..Connack::default() };
    exact(Version::V3_1_1, &[0x20, 0x02, 0x00, 0x05], refused.clone().into());
    exact(Version::V5_0, &[0x20, 0x03, 0x00, 0x87, 0x00], refused.into());
    let with_properties = Connack {
        properties: Properties::new()
            .with(Property::MaximumQos(1))
            .with(Property::AssignedClientIdentifier("id".into())),
        ..Connack::default()
    };
    exact(
        Version::V5_0,
        &[0x20, 0x0A, 0x00, 0x00, 0x07, 0x24, 0x01, 0x12, 0x00, 0x02, b'i', b'd'],
        with_properties.into(),
    );
}

#[test]
fn publish_qos_1_in_3_1_1_and_5_0() {
    let publish = Publish {
        qos: QoS::AtLeastOnce,
        packet_id: Some(10),
        ..Publish::new("a/b", Bytes::from_static(b"hello"))
    };
    exact(
        Version::V3_1_1,
        &[0x32, 0x0C, 0x00, 0x03, b'a', b'/', b'b', 0x00, 0x0A, b'h', b'e', b'l', b'l', b'o'],
        publish.clone().into(),
    );
    // 5.0 adds a property length, here 0.
    exact(
        Version::V5_0,
        &[0x32, 0x0D, 0x00, 0x03, b'a', b'/', b'b', 0x00, 0x0A, 0x00, b'h', b'e', b'l', b'l', b'o'],
        publish.into(),
    );
}

#[test]
fn publish_flags_and_properties() {
    let publish = Publish {
        dup: true,
        qos: QoS::ExactlyOnce,
        retain: true,
        packet_id: Some(0x0102),
        properties: Properties::new()
            .with(Property::MessageExpiryInterval(60))
            .with(Property::SubscriptionIdentifier(200))
            .with(Property::SubscriptionIdentifier(1)),
        ..Publish::new("t", Bytes::new())
    };
    exact(
        Version::V5_0,
        &[
            0x3D, 0x10, // PUBLISH, DUP, QoS 2, RETAIN; remaining length 16
            0x00, 0x01, b't', 0x01, 0x02, // topic, packet identifier 258
            0x0A, // properties: 10 bytes
            0x02, 0x00, 0x00, 0x00, 0x3C, // message expiry interval 60
            0x0B, 0xC8, 0x01, // subscription identifier 200 (two-byte varint)
            0x0B, 0x01, // subscription identifier 1
        ],
        publish.into(),
    );
    exact(Version::V3_1_1, &[0x30, 0x03, 0x00, 0x01, b't'], Publish::new("t", "").into());
}

#[test]
fn acks_short_and_long_forms_in_5_0() {
    // Remaining length 2: success, no properties.
    exact(Version::V5_0, &[0x40, 0x02, 0x00, 0x0A], Packet::Puback(PubAck::new(10)));
    // Remaining length 3: a reason code, no properties.
    let no_subscribers = PubAck { reason: ReasonCode::NoMatchingSubscribers, ..PubAck::new(10) };
    exact(Version::V5_0, &[0x40, 0x03, 0x00, 0x0A, 0x10], Packet::Puback(no_subscribers.clone()));
    exact(Version::V5_0, &[0x50, 0x03, 0x00, 0x0A, 0x10], Packet::Pubrec(no_subscribers));
    let with_reason = PubAck {
        reason: ReasonCode::PacketIdentifierNotFound,
        properties: Properties::new().with(Property::ReasonString("r".into())),
        ..PubAck::new(10)
    };
    exact(
        Version::V5_0,
        &[0x62, 0x08, 0x00, 0x0A, 0x92, 0x04, 0x1F, 0x00, 0x01, b'r'],
        Packet::Pubrel(with_reason),
    );
    exact(Version::V5_0, &[0x70, 0x02, 0x00, 0x0A], Packet::Pubcomp(PubAck::new(10)));
    // The long forms of success decode to the same packet (and encode short).
    assert_eq!(
        decode_one(Version::V5_0, &[0x40, 0x03, 0x00, 0x0A, 0x00]),
        Packet::Puback(PubAck::new(10))
    );
    assert_eq!(
        decode_one(Version::V5_0, &[0x40, 0x04, 0x00, 0x0A, 0x00, 0x00]),
        Packet::Puback(PubAck::new(10))
    );
}

#[test]
fn acks_in_3_1_1_are_a_packet_identifier() {
    exact(Version::V3_1_1, &[0x40, 0x02, 0x00, 0x01], Packet::Puback(PubAck::new(1)));
    exact(Version::V3_1_1, &[0x50, 0x02, 0x00, 0x02], Packet::Pubrec(PubAck::new(2)));
    exact(Version::V3_1_1, &[0x62, 0x02, 0x00, 0x07], Packet::Pubrel(PubAck::new(7)));
    exact(Version::V3_1_1, &[0x70, 0x02, 0xFF, 0xFF], Packet::Pubcomp(PubAck::new(65535)));
}

#[test]
fn disconnect_short_and_long_forms() {
    exact(Version::V3_1_1, &[0xE0, 0x00], Disconnect::default().into());
    exact(Version::V5_0, &[0xE0, 0x00], Disconnect::default().into());
    let with_will =
        Disconnect { reason: ReasonCode::DisconnectWithWillMessage, ..Disconnect::default() };
    exact(Version::V5_0, &[0xE0, 0x01, 0x04], with_will.into());
    assert_eq!(decode_one(Version::V5_0, &[0xE0, 0x02, 0x00, 0x00]), Disconnect::default().into());
    let expiry = Disconnect {
        reason: ReasonCode::Success,
        properties: Properties::new().with(Property::SessionExpiryInterval(0)),
    };
    exact(Version::V5_0, &[0xE0, 0x07, 0x00, 0x05, 0x11, 0, 0, 0, 0], expiry.into());
}

#[test]
fn subscribe_and_suback() {
    let subscribe = Subscribe {
        packet_id: 1,
        filters: vec![Subscription {
            filter: "a/+".into(),
            options: SubscriptionOptions::qos(QoS::AtLeastOnce),
        }],
        properties: Properties::new(),
    };
    exact(
        Version::V3_1_1,
        &[0x82, 0x08, 0x00, 0x01, 0x00, 0x03, b'a', b'/', b'+', 0x01],
        subscribe.clone().into(),
    );
    let options = SubscriptionOptions {
        qos: QoS::ExactlyOnce,
        no_local: true,
        retain_as_published: true,
        retain_handling: RetainHandling::DoNotSend,
    };
    let subscribe = Subscribe {
        filters: vec![Subscription { filter: "a/+".into(), options }],
        properties: Properties::new().with(Property::SubscriptionIdentifier(5)),
        ..subscribe
    };
    exact(
        Version::V5_0,
        &[0x82, 0x0B, 0x00, 0x01, 0x02, 0x0B, 0x05, 0x00, 0x03, b'a', b'/', b'+', 0x2E],
        subscribe.into(),
    );
    let suback = Suback {
        packet_id: 1,
        reasons: vec![ReasonCode::GrantedQos1, ReasonCode::UnspecifiedError],
        properties: Properties::new(),
    };
    exact(Version::V3_1_1, &[0x90, 0x04, 0x00, 0x01, 0x01, 0x80], suback.clone().into());
    exact(Version::V5_0, &[0x90, 0x05, 0x00, 0x01, 0x00, 0x01, 0x80], suback.into());
}

#[test]
fn unsubscribe_unsuback_and_pings() {
    let unsubscribe = crate::mqtt::Unsubscribe {
        packet_id: 3,
        filters: vec!["x".into()],
        properties: Properties::new(),
    };
    exact(Version::V3_1_1, &[0xA2, 0x05, 0x00, 0x03, 0x00, 0x01, b'x'], unsubscribe.clone().into());
    exact(Version::V5_0, &[0xA2, 0x06, 0x00, 0x03, 0x00, 0x00, 0x01, b'x'], unsubscribe.into());
    let unsuback = Unsuback { packet_id: 3, reasons: vec![], properties: Properties::new() };
    exact(Version::V3_1_1, &[0xB0, 0x02, 0x00, 0x03], unsuback.into());
    let unsuback = Unsuback {
        packet_id: 3,
        reasons: vec![ReasonCode::NoSubscriptionExisted],
        properties: Properties::new(),
    };
    exact(Version::V5_0, &[0xB0, 0x04, 0x00, 0x03, 0x00, 0x11], unsuback.into());
    for version in Version::ALL {
        exact(version, &[0xC0, 0x00], Packet::Pingreq);
        exact(version, &[0xD0, 0x00], Packet::Pingresp);
    }
}

#[test]
fn auth_short_form_and_with_a_method() {
    exact(Version::V5_0, &[0xF0, 0x00], Auth::default().into());
    let auth = Auth {
        reason: ReasonCode::ContinueAuthentication,
        properties: Properties::new().with(Property::AuthenticationMethod("SCRAM".into())),
    };
    exact(
        Version::V5_0,
        &[0xF0, 0x0A, 0x18, 0x08, 0x15, 0x00, 0x05, b'S', b'C', b'R', b'A', b'M'],
        auth.into(),
    );
}
