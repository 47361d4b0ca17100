//! Every packet type, in every version that has it, encodes and decodes to itself: whole,
//! and fed one byte at a time.

use bytes::Bytes;

use super::*;
use crate::mqtt::{
    Auth, Connack, Connect, Disconnect, Properties, Property, PubAck, Publish, QoS, ReasonCode,
    RetainHandling, Suback, Subscribe, Subscription, SubscriptionOptions, Unsuback, Unsubscribe,
    Will,
};

/// Encodes `packet` at `version`, then decodes it whole and byte by byte.
fn round_trip(version: Version, packet: Packet) {
    let wire = encode(version, &packet);
    assert_eq!(decode_one(version, &wire), packet, "{version} {wire:02x?}");
    let one_by_one = decode_byte_by_byte(&mut codec(version), &wire).expect("decodes");
    assert_eq!(one_by_one, [packet]);
}

fn user(name: &str, value: &str) -> Property {
    Property::UserProperty(name.into(), value.into())
}

/// A property list only 5.0 can carry; empty before it.
fn v5(version: Version, properties: Properties) -> Properties {
    if version == Version::V5_0 {
        properties
    } else {
        Properties::new()
    }
}

#[test]
fn connect_in_every_version() {
    for version in Version::ALL {
        let will = Will {
            topic: "clients/gone".into(),
            payload: Bytes::from_static(b"\x00\xffbinary"),
            qos: QoS::ExactlyOnce,
            retain: false,
            properties: v5(
                version,
                Properties::new()
                    .with(Property::WillDelayInterval(30))
                    .with(Property::PayloadFormatIndicator(0))
                    .with(Property::MessageExpiryInterval(9))
                    .with(Property::ContentType("application/octet-stream".into()))
                    .with(Property::ResponseTopic("replies".into()))
                    .with(Property::CorrelationData(Bytes::from_static(b"\x01\x02")))
                    .with(user("w", "1")),
            ),
        };
        let connect = Connect {
            clean_start: false,
            keep_alive: 65535,
            will: Some(will),
            username: Some("üser".into()),
            password: Some(Bytes::from_static(b"\x00secret\xff")),
            properties: v5(
                version,
                Properties::new()
                    .with(Property::SessionExpiryInterval(u32::MAX))
                    .with(Property::ReceiveMaximum(10))
                    .with(Property::MaximumPacketSize(1 << 20))
                    .with(Property::TopicAliasMaximum(5))
                    .with(Property::RequestResponseInformation(1))
                    .with(Property::RequestProblemInformation(0))
                    .with(user("a", "1"))
                    .with(user("a", "2"))
                    .with(Property::AuthenticationMethod("PLAIN".into()))
                    .with(Property::AuthenticationData(Bytes::from_static(b"\x00u\x00p"))),
            ),
            ..Connect::new(version, "client-ä")
        };
        round_trip(version, connect.into());
        round_trip(version, Connect::new(version, "").into());
    }
}

#[test]
fn password_without_user_name_round_trips_in_5_0() {
    let connect = Connect {
        password: Some(Bytes::from_static(b"token")),
        ..Connect::new(Version::V5_0, "c")
    };
    round_trip(Version::V5_0, connect.into());
}

#[test]
fn connack_in_every_version() {
    for version in Version::ALL {
        for reason in [ReasonCode::Success, ReasonCode::BadUserNameOrPassword] {
            round_trip(
                version,
                Connack { session_present: false, reason, ..Connack::default() }.into(),
            );
        }
        round_trip(version, Connack { session_present: true, ..Connack::default() }.into());
    }
    let everything = Properties::new()
        .with(Property::SessionExpiryInterval(10))
        .with(Property::ReceiveMaximum(100))
        .with(Property::MaximumQos(1))
        .with(Property::RetainAvailable(0))
        .with(Property::MaximumPacketSize(4096))
        .with(Property::AssignedClientIdentifier("auto-1".into()))
        .with(Property::TopicAliasMaximum(10))
        .with(Property::ReasonString("welcome".into()))
        .with(user("x", "y"))
        .with(Property::WildcardSubscriptionAvailable(1))
        .with(Property::SubscriptionIdentifierAvailable(1))
        .with(Property::SharedSubscriptionAvailable(0))
        .with(Property::ServerKeepAlive(60))
        .with(Property::ResponseInformation("resp/".into()))
        .with(Property::ServerReference("other:1883".into()))
        .with(Property::AuthenticationMethod("SCRAM-SHA-1".into()))
        .with(Property::AuthenticationData(Bytes::from_static(b"data")));
    let connack =
        Connack { reason: ReasonCode::ServerMoved, properties: everything, ..Connack::default() };
    round_trip(Version::V5_0, connack.into());
}

#[test]
fn publish_in_every_version_and_qos() {
    for version in Version::ALL {
        for (qos, packet_id) in
            [(QoS::AtMostOnce, None), (QoS::AtLeastOnce, Some(1)), (QoS::ExactlyOnce, Some(65535))]
        {
            let publish = Publish {
                dup: packet_id.is_some(),
                qos,
                retain: true,
                packet_id,
                properties: v5(
                    version,
                    Properties::new()
                        .with(Property::PayloadFormatIndicator(1))
                        .with(Property::MessageExpiryInterval(3600))
                        .with(Property::TopicAlias(3))
                        .with(Property::ResponseTopic("r".into()))
                        .with(Property::CorrelationData(Bytes::from_static(b"c")))
                        .with(user("k", "v"))
                        .with(Property::SubscriptionIdentifier(268_435_455))
                        .with(Property::SubscriptionIdentifier(1))
                        .with(Property::ContentType("text/plain".into())),
                ),
                ..Publish::new("sport/tennis/player1", vec![7u8; 300])
            };
            round_trip(version, publish.into());
        }
    }
    // An empty topic with a topic alias (5.0 only), and an empty payload.
    let aliased = Publish {
        properties: Properties::new().with(Property::TopicAlias(1)),
        ..Publish::new("", Bytes::new())
    };
    round_trip(Version::V5_0, aliased.into());
}

#[test]
fn publish_acknowledgements_in_every_version() {
    for version in Version::ALL {
        for packet_id in [1, 0x1234, 65535] {
            round_trip(version, Packet::Puback(PubAck::new(packet_id)));
            round_trip(version, Packet::Pubrec(PubAck::new(packet_id)));
            round_trip(version, Packet::Pubrel(PubAck::new(packet_id)));
            round_trip(version, Packet::Pubcomp(PubAck::new(packet_id)));
        }
    }
    let reasoned = |reason| PubAck {
        reason,
        properties: Properties::new()
            .with(Property::ReasonString("why".into()))
            .with(user("a", "b")),
        ..PubAck::new(9)
    };
    round_trip(Version::V5_0, Packet::Puback(reasoned(ReasonCode::QuotaExceeded)));
    round_trip(Version::V5_0, Packet::Pubrec(reasoned(ReasonCode::PayloadFormatInvalid)));
    round_trip(Version::V5_0, Packet::Pubrel(reasoned(ReasonCode::PacketIdentifierNotFound)));
    round_trip(Version::V5_0, Packet::Pubcomp(reasoned(ReasonCode::Success)));
    let bare = PubAck { reason: ReasonCode::NotAuthorized, ..PubAck::new(9) };
    round_trip(Version::V5_0, Packet::Puback(bare));
}

#[test]
fn subscribe_and_unsubscribe_in_every_version() {
    for version in Version::ALL {
        let options = |qos| SubscriptionOptions::qos(qos);
        let subscribe = Subscribe {
            packet_id: 42,
            filters: vec![
                Subscription { filter: "sport/#".into(), options: options(QoS::AtMostOnce) },
                Subscription { filter: "+/+".into(), options: options(QoS::AtLeastOnce) },
                Subscription { filter: "/finance".into(), options: options(QoS::ExactlyOnce) },
                Subscription { filter: "#".into(), options: options(QoS::AtMostOnce) },
            ],
            properties: v5(
                version,
                Properties::new().with(Property::SubscriptionIdentifier(77)).with(user("s", "1")),
            ),
        };
        round_trip(version, subscribe.into());
        let suback = Suback {
            packet_id: 42,
            reasons: vec![
                ReasonCode::Success,
                ReasonCode::GrantedQos1,
                ReasonCode::GrantedQos2,
                ReasonCode::UnspecifiedError,
            ],
            properties: v5(version, Properties::new().with(Property::ReasonString("ok".into()))),
        };
        round_trip(version, suback.into());
        let unsubscribe = Unsubscribe {
            packet_id: 43,
            filters: vec!["sport/#".into(), "a/b".into()],
            properties: v5(version, Properties::new().with(user("u", "1"))),
        };
        round_trip(version, unsubscribe.into());
        let reasons = if version == Version::V5_0 {
            vec![ReasonCode::Success, ReasonCode::NoSubscriptionExisted]
        } else {
            Vec::new()
        };
        let unsuback = Unsuback {
            packet_id: 43,
            reasons,
            properties: v5(version, Properties::new().with(Property::ReasonString("bye".into()))),
        };
        round_trip(version, unsuback.into());
    }
}

#[test]
fn subscription_options_of_5_0() {
    for retain_handling in [
        RetainHandling::SendAtSubscribe,
        RetainHandling::SendAtNewSubscribe,
        RetainHandling::DoNotSend,
    ] {
        for (no_local, retain_as_published) in [(false, true), (true, false), (true, true)] {
            let options = SubscriptionOptions {
                qos: QoS::AtLeastOnce,
                no_local,
                retain_as_published,
                retain_handling,
            };
            let subscribe = Subscribe {
                packet_id: 1,
                filters: vec![Subscription { filter: "a/b".into(), options }],
                properties: Properties::new(),
            };
            round_trip(Version::V5_0, subscribe.into());
        }
    }
    // A shared subscription without No Local.
    let shared = Subscribe {
        packet_id: 1,
        filters: vec![Subscription {
            filter: "$share/group/sensors/+".into(),
            options: SubscriptionOptions::qos(QoS::AtLeastOnce),
        }],
        properties: Properties::new(),
    };
    round_trip(Version::V5_0, shared.into());
}

#[test]
fn pings_disconnect_and_auth() {
    for version in Version::ALL {
        round_trip(version, Packet::Pingreq);
        round_trip(version, Packet::Pingresp);
        round_trip(version, Disconnect::default().into());
    }
    let disconnect = Disconnect {
        reason: ReasonCode::ServerShuttingDown,
        properties: Properties::new()
            .with(Property::SessionExpiryInterval(0))
            .with(Property::ReasonString("maintenance".into()))
            .with(Property::ServerReference("b2".into()))
            .with(user("k", "v")),
    };
    round_trip(Version::V5_0, disconnect.into());
    for reason in
        [ReasonCode::Success, ReasonCode::ContinueAuthentication, ReasonCode::ReAuthenticate]
    {
        let auth = Auth {
            reason,
            properties: Properties::new()
                .with(Property::AuthenticationMethod("SCRAM-SHA-256".into()))
                .with(Property::AuthenticationData(Bytes::from_static(b"n,,n=user,r=abc")))
                .with(Property::ReasonString("step".into()))
                .with(user("k", "v")),
        };
        round_trip(Version::V5_0, auth.into());
    }
    round_trip(Version::V5_0, Auth::default().into());
}
