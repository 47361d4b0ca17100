//! MQTT to and from the message model, the way ActiveMQ maps them (its
//! `MQTTProtocolSupport` and `MQTTProtocolConverter`):
//!
//! - names: `/` and `.` are exchanged, and in filters `+` and `#` become `*` and `>` (and
//!   back), so that `sensors/+/temp` is the topic pattern `sensors.*.temp`;
//! - a PUBLISH goes to the topic of its name as a bytes message (what a JMS consumer gets as
//!   a `BytesMessage`), persistent for QoS 1 and 2, with its QoS in the `ActiveMQ.MQTT.QoS`
//!   int property, so that another MQTT subscriber gets it at that QoS at most;
//! - a delivery goes out with the body as it is (text as its UTF-8 bytes);
//! - MQTT 5.0 user properties are string properties and back, the response topic is the
//!   JMSReplyTo topic, UTF-8 correlation data the JMSCorrelationID, the message expiry
//!   interval the JMS expiration, the content type the `JMS_AMQP_ContentType` property
//!   (ActiveMQ's name for AMQP's content-type, so that it crosses to and from AMQP), and a
//!   payload that says it is UTF-8 (Payload Format Indicator 1) a text message, which goes
//!   out with the indicator again: both reach subscribers unaltered (MQTT-3.3.2-4, -20).

use std::sync::Arc;

use bytes::Bytes;
use protocol::mqtt::{Properties, Property, Publish, QoS, Version};
use store::{
    BodyKind, DeliveryMode, Destination, DestinationKind, Message, MessageId, PropertyValue,
};

use crate::core::queue::now_millis;
use crate::core::retained;

/// The int property that carries the QoS a message was published with (ActiveMQ's name).
pub const QOS_PROPERTY: &str = "ActiveMQ.MQTT.QoS";

/// The string property that carries a 5.0 Content Type: the one the AMQP adapter keeps
/// AMQP's content-type in (ActiveMQ's name), so that the two protocols exchange it.
pub const CONTENT_TYPE_PROPERTY: &str = "JMS_AMQP_ContentType";

/// The bytes property that keeps a 5.0 PUBLISH's user properties as they came, when the
/// message's property map cannot (it is sorted by name and holds one value per name): their
/// order and repeated names reach MQTT subscribers unaltered (MQTT-3.3.2-17, -18), while JMS,
/// STOMP and AMQP consumers get the first value of each name as a string property.
pub const USER_PROPERTIES_PROPERTY: &str = "ferromq.mqtt.UserProperties";

/// Properties of the model that go out as PUBLISH fields or flags, not as user properties.
const NOT_USER_PROPERTIES: [&str; 8] = [
    QOS_PROPERTY,
    CONTENT_TYPE_PROPERTY,
    USER_PROPERTIES_PROPERTY,
    retained::RETAIN_PROPERTY,
    retained::RETAINED_PROPERTY,
    crate::core::exactly_once::CLIENT_PROPERTY,
    crate::core::exactly_once::PACKET_PROPERTY,
    crate::core::exactly_once::MESSAGE_PROPERTY,
];

/// `pairs` as [`USER_PROPERTIES_PROPERTY`] holds them: each name and value as a u32 length
/// (big-endian) and its UTF-8 bytes.
fn encode_user_properties<'a>(pairs: impl Iterator<Item = (&'a str, &'a str)>) -> Bytes {
    let mut out = Vec::new();
    for (name, value) in pairs {
        for text in [name, value] {
            out.extend_from_slice(&u32::try_from(text.len()).unwrap_or(u32::MAX).to_be_bytes());
            out.extend_from_slice(text.as_bytes());
        }
    }
    Bytes::from(out)
}

/// The pairs of a [`USER_PROPERTIES_PROPERTY`]; `None` if it is not one this wrote (a client
/// of another protocol may set any property), so that it is then ignored.
fn decode_user_properties(bytes: &[u8]) -> Option<Vec<(String, String)>> {
    fn take(rest: &mut &[u8]) -> Option<String> {
        let (length, tail) = rest.split_first_chunk::<4>()?;
        let length = usize::try_from(u32::from_be_bytes(*length)).ok()?;
        if tail.len() < length {
            return None;
        }
        let (text, tail) = tail.split_at(length);
        *rest = tail;
        String::from_utf8(text.to_vec()).ok()
    }
    let mut pairs = Vec::new();
    let mut rest = bytes;
    while !rest.is_empty() {
        let name = take(&mut rest)?;
        let value = take(&mut rest)?;
        pairs.push((name, value));
    }
    Some(pairs)
}

/// An MQTT topic name or filter as an ActiveMQ destination name: `/` and `.`, `+` and `*`,
/// `#` and `>` exchanged (ActiveMQ's `convertMQTTToActiveMQ`, which swaps both ways so that a
/// name holding `.` comes back unchanged).
pub fn to_activemq(name: &str) -> String {
    name.chars()
        .map(|c| match c {
            '/' => '.',
            '.' => '/',
            '+' => '*',
            '*' => '+',
            '#' => '>',
            '>' => '#',
            other => other,
        })
        .collect()
}

/// A destination name as an MQTT topic name (the same exchange: it is its own inverse).
pub fn to_mqtt(name: &str) -> String {
    to_activemq(name)
}

/// The QoS a message is delivered at to a subscription of `granted` QoS: the lower of the
/// two, the message's being the QoS it was published with over MQTT (`ActiveMQ.MQTT.QoS`),
/// else 1 for a persistent message and 0 for a non-persistent one.
///
/// ActiveMQ takes the property too, but without it inverts the rule (persistent gives QoS 0,
/// non-persistent QoS 1: `message.isPersistent() ? AT_MOST_ONCE : AT_LEAST_ONCE` in its
/// `convertMessage`), which delivers a JMS producer's persistent messages at most once; that
/// is not copied here.
pub fn delivery_qos(message: &Message, granted: QoS) -> QoS {
    let published = match message.properties.get(QOS_PROPERTY) {
        Some(PropertyValue::Int(qos)) => u8::try_from(*qos).ok().and_then(QoS::from_u8),
        Some(PropertyValue::Byte(qos)) => u8::try_from(*qos).ok().and_then(QoS::from_u8),
        Some(PropertyValue::String(qos)) => qos.parse::<u8>().ok().and_then(QoS::from_u8),
        _ => None,
    };
    let published = published.unwrap_or(if message.is_persistent() {
        QoS::AtLeastOnce
    } else {
        QoS::AtMostOnce
    });
    published.min(granted)
}

/// The broker's message for a PUBLISH from a client of `version`.
pub fn message_from_publish(
    publish: &Publish,
    version: Version,
    id: MessageId,
    message_id: String,
) -> Message {
    let destination = Destination::topic(to_activemq(&publish.topic));
    let mut message = Message::new(id, message_id, destination);
    let now = now_millis();
    message.headers.timestamp = now;
    message.headers.delivery_mode = match publish.qos {
        QoS::AtMostOnce => DeliveryMode::NonPersistent,
        QoS::AtLeastOnce | QoS::ExactlyOnce => DeliveryMode::Persistent,
    };
    message
        .properties
        .insert(Arc::from(QOS_PROPERTY), PropertyValue::Int(i32::from(publish.qos.as_u8())));
    if publish.retain {
        // What ActiveMQ's MQTT adapter sets: the core retains it (see `core::retained`).
        message.properties.insert(Arc::from(retained::RETAIN_PROPERTY), PropertyValue::Bool(true));
    }
    if version == Version::V5_0 {
        let properties = &publish.properties;
        let mut names_in_order = true;
        let mut previous: Option<&str> = None;
        for (name, value) in properties.user_properties() {
            // Sorted and unique is what the map gives back; anything else is kept as it came.
            names_in_order &= previous.is_none_or(|previous| previous < name);
            previous = Some(name);
            // The first of a repeated name wins: JMS properties have one value each.
            message
                .properties
                .entry(Arc::from(name))
                .or_insert_with(|| PropertyValue::String(value.into()));
        }
        if !names_in_order {
            let kept = encode_user_properties(properties.user_properties());
            message
                .properties
                .insert(Arc::from(USER_PROPERTIES_PROPERTY), PropertyValue::Bytes(kept));
        }
        if let Some(topic) = properties.response_topic() {
            message.headers.reply_to = Some(Destination::topic(to_activemq(topic)));
        }
        if let Some(data) = properties.correlation_data() {
            if let Ok(text) = std::str::from_utf8(data) {
                message.headers.correlation_id = Some(text.into());
            }
        }
        if let Some(seconds) = properties.message_expiry_interval() {
            message.headers.expiration = now.saturating_add(i64::from(seconds) * 1000);
        }
        if let Some(content_type) = properties.content_type() {
            message.properties.insert(
                Arc::from(CONTENT_TYPE_PROPERTY),
                PropertyValue::String(content_type.into()),
            );
        }
    }
    // A payload its publisher says is UTF-8 is a text message (a JMS TextMessage), if it is:
    // one that is not stays bytes rather than be refused, as 3.1.1 would take it.
    let says_utf8 = version == Version::V5_0
        && publish.properties.payload_format_indicator() == Some(1)
        && std::str::from_utf8(&publish.payload).is_ok();
    message.body_kind = if says_utf8 { BodyKind::Text } else { BodyKind::Bytes };
    // The payload is a slice of the read buffer: a message keeps an allocation of its own.
    message.body = Bytes::copy_from_slice(&publish.payload);
    message
}

/// The PUBLISH that delivers `message` to a client of `version` at `qos` (its packet id and
/// retain flag are the caller's).
pub fn publish_for(message: &Message, qos: QoS, version: Version, dup: bool) -> Publish {
    let mut properties = Properties::new();
    if version == Version::V5_0 {
        let as_published = match message.properties.get(USER_PROPERTIES_PROPERTY) {
            Some(PropertyValue::Bytes(bytes)) => decode_user_properties(bytes),
            _ => None,
        };
        if let Some(pairs) = &as_published {
            for (name, value) in pairs {
                properties.push(Property::UserProperty(name.clone(), value.clone()));
            }
        }
        for (name, value) in &message.properties {
            if NOT_USER_PROPERTIES.contains(&&**name) {
                continue;
            }
            let published =
                as_published.as_ref().is_some_and(|pairs| pairs.iter().any(|(n, _)| n == &**name));
            if published {
                continue;
            }
            properties.push(Property::UserProperty(name.to_string(), value.to_header_text()));
        }
        if let Some(reply_to) = &message.headers.reply_to {
            if reply_to.kind == DestinationKind::Topic {
                properties.push(Property::ResponseTopic(to_mqtt(&reply_to.name)));
            }
        }
        if let Some(correlation) = &message.headers.correlation_id {
            properties.push(Property::CorrelationData(Bytes::from(correlation.to_string())));
        }
        if message.headers.expiration > 0 {
            let left = (message.headers.expiration - now_millis()).max(1000) / 1000;
            properties
                .push(Property::MessageExpiryInterval(u32::try_from(left).unwrap_or(u32::MAX)));
        }
        if message.body_kind == BodyKind::Text {
            properties.push(Property::PayloadFormatIndicator(1));
        }
        if let Some(PropertyValue::String(content_type)) =
            message.properties.get(CONTENT_TYPE_PROPERTY)
        {
            properties.push(Property::ContentType(content_type.to_string()));
        }
    }
    Publish {
        dup: dup && qos != QoS::AtMostOnce,
        qos,
        retain: false,
        topic: to_mqtt(&message.destination.name),
        packet_id: None,
        properties,
        // Text bodies are UTF-8 already; bytes go as they are.
        payload: message.body.clone(),
    }
}

/// True if `message` was published with the retain flag (or `ActiveMQ.Retain` from another
/// protocol): a 5.0 subscription with Retain As Published forwards it with the flag set.
pub fn published_retained(message: &Message) -> bool {
    retained::asks_to_retain(message)
}

/// The name ActiveMQ gives the durable subscription of a persistent session's subscription to
/// `filter` at `qos`: `AT_LEAST_ONCE:a/b/#` (the QoS enum's name, a colon, the filter as the
/// client wrote it).
pub fn durable_name(qos: QoS, filter: &str) -> String {
    let qos = match qos {
        QoS::AtMostOnce => "AT_MOST_ONCE",
        QoS::AtLeastOnce => "AT_LEAST_ONCE",
        QoS::ExactlyOnce => "EXACTLY_ONCE",
    };
    format!("{qos}:{filter}")
}

/// The QoS and filter of a durable subscription named by [`durable_name`]; `None` for any
/// other name (a JMS client's subscription of the same client id).
pub fn parse_durable_name(name: &str) -> Option<(QoS, &str)> {
    let (qos, filter) = name.split_once(':')?;
    let qos = match qos {
        "AT_MOST_ONCE" => QoS::AtMostOnce,
        "AT_LEAST_ONCE" => QoS::AtLeastOnce,
        "EXACTLY_ONCE" => QoS::ExactlyOnce,
        _ => return None,
    };
    Some((qos, filter))
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn names_and_wildcards_map_as_activemq_maps_them() {
        assert_eq!(to_activemq("sensors/+/temp"), "sensors.*.temp");
        assert_eq!(to_activemq("a/#"), "a.>");
        assert_eq!(to_activemq("v1.0/x"), "v1/0.x");
        assert_eq!(to_mqtt("orders.eu.paris"), "orders/eu/paris");
        assert_eq!(to_mqtt(&to_activemq("a.b/c")), "a.b/c");
    }

    #[test]
    fn a_publish_is_a_bytes_message_persistent_above_qos_0() {
        let publish =
            Publish { qos: QoS::AtLeastOnce, packet_id: Some(7), ..Publish::new("a/b", "hi") };
        let message = message_from_publish(&publish, Version::V3_1_1, MessageId(1), "ID:x".into());
        assert_eq!(message.destination, Destination::topic("a.b"));
        assert!(message.is_persistent());
        assert_eq!(message.body_kind, BodyKind::Bytes);
        assert_eq!(&message.body[..], b"hi");
        assert_eq!(delivery_qos(&message, QoS::ExactlyOnce), QoS::AtLeastOnce);
        assert_eq!(delivery_qos(&message, QoS::AtMostOnce), QoS::AtMostOnce);
        let qos0 = message_from_publish(
            &Publish::new("a", "x"),
            Version::V3_1_1,
            MessageId(2),
            "ID:y".into(),
        );
        assert!(!qos0.is_persistent());
    }

    #[test]
    fn messages_of_other_protocols_go_out_at_their_persistence_s_qos() {
        let mut message = Message::new(MessageId(1), "ID:z", Destination::topic("t"));
        assert_eq!(delivery_qos(&message, QoS::ExactlyOnce), QoS::AtLeastOnce);
        message.headers.delivery_mode = DeliveryMode::NonPersistent;
        assert_eq!(delivery_qos(&message, QoS::ExactlyOnce), QoS::AtMostOnce);
    }

    #[test]
    fn user_properties_become_string_properties_and_back() {
        let properties = Properties::new()
            .with(Property::UserProperty("colour".into(), "blue".into()))
            .with(Property::ResponseTopic("replies/1".into()))
            .with(Property::CorrelationData(Bytes::from_static(b"c-1")));
        let publish = Publish { properties, ..Publish::new("a", "x") };
        let message = message_from_publish(&publish, Version::V5_0, MessageId(1), "ID:x".into());
        assert_eq!(message.properties.get("colour"), Some(&PropertyValue::String("blue".into())));
        assert_eq!(message.headers.reply_to, Some(Destination::topic("replies.1")));
        assert_eq!(message.headers.correlation_id.as_deref(), Some("c-1"));
        let out = publish_for(&message, QoS::AtMostOnce, Version::V5_0, false);
        let user: Vec<_> = out.properties.user_properties().collect();
        assert_eq!(user, [("colour", "blue")]);
        assert_eq!(out.properties.response_topic(), Some("replies/1"));
        let old = publish_for(&message, QoS::AtMostOnce, Version::V3_1_1, false);
        assert!(old.properties.is_empty());
    }

    #[test]
    fn a_retained_publish_carries_activemq_retain_which_goes_out_as_no_user_property() {
        let publish = Publish { retain: true, ..Publish::new("a/b", "kept") };
        let message = message_from_publish(&publish, Version::V5_0, MessageId(1), "ID:r".into());
        assert_eq!(
            message.properties.get(retained::RETAIN_PROPERTY),
            Some(&PropertyValue::Bool(true))
        );
        assert!(published_retained(&message));
        let out = publish_for(&message, QoS::AtMostOnce, Version::V5_0, false);
        assert_eq!(out.properties.user_properties().count(), 0);
        assert!(!out.retain, "the caller decides the retain flag");
        let plain = message_from_publish(
            &Publish::new("a/b", "x"),
            Version::V5_0,
            MessageId(2),
            "ID:s".into(),
        );
        assert!(!published_retained(&plain));
    }

    #[test]
    fn content_type_and_a_utf8_payload_format_reach_subscribers_unaltered() {
        let properties = Properties::new()
            .with(Property::PayloadFormatIndicator(1))
            .with(Property::ContentType("application/json".into()));
        let publish = Publish { properties, ..Publish::new("a", r#"{"t":21.5}"#) };
        let message = message_from_publish(&publish, Version::V5_0, MessageId(1), "ID:x".into());
        assert_eq!(message.body_kind, BodyKind::Text, "a JMS consumer gets a TextMessage");
        assert_eq!(
            message.properties.get(CONTENT_TYPE_PROPERTY),
            Some(&PropertyValue::String("application/json".into()))
        );
        let out = publish_for(&message, QoS::AtMostOnce, Version::V5_0, false);
        assert_eq!(out.properties.payload_format_indicator(), Some(1));
        assert_eq!(out.properties.content_type(), Some("application/json"));
        assert_eq!(out.properties.user_properties().count(), 0);
        assert_eq!(&out.payload[..], br#"{"t":21.5}"#);

        // Unspecified bytes stay bytes and go out without an indicator; a payload that claims
        // UTF-8 and is not stays bytes too.
        let bytes = message_from_publish(
            &Publish::new("a", &b"\xff\x00"[..]),
            Version::V5_0,
            MessageId(2),
            "ID:y".into(),
        );
        assert_eq!(bytes.body_kind, BodyKind::Bytes);
        let out = publish_for(&bytes, QoS::AtMostOnce, Version::V5_0, false);
        assert_eq!(out.properties.payload_format_indicator(), None);
        let false_claim = Publish {
            properties: Properties::new().with(Property::PayloadFormatIndicator(1)),
            ..Publish::new("a", &b"\xff"[..])
        };
        let message =
            message_from_publish(&false_claim, Version::V5_0, MessageId(3), "ID:z".into());
        assert_eq!(message.body_kind, BodyKind::Bytes);
    }

    #[test]
    fn user_properties_keep_their_order_and_repeated_names_for_mqtt_subscribers() {
        let properties = Properties::new()
            .with(Property::UserProperty("z".into(), "1".into()))
            .with(Property::UserProperty("a".into(), "2".into()))
            .with(Property::UserProperty("z".into(), "3".into()));
        let publish = Publish { properties, ..Publish::new("a", "x") };
        let message = message_from_publish(&publish, Version::V5_0, MessageId(1), "ID:x".into());
        // JMS sees one value per name, the first.
        assert_eq!(message.properties.get("z"), Some(&PropertyValue::String("1".into())));
        assert_eq!(message.properties.get("a"), Some(&PropertyValue::String("2".into())));
        let out = publish_for(&message, QoS::AtMostOnce, Version::V5_0, false);
        let user: Vec<_> = out.properties.user_properties().collect();
        assert_eq!(user, [("z", "1"), ("a", "2"), ("z", "3")]);

        // Sorted and unique needs nothing kept beside the map.
        let sorted = Publish {
            properties: Properties::new()
                .with(Property::UserProperty("a".into(), "1".into()))
                .with(Property::UserProperty("b".into(), "2".into())),
            ..Publish::new("a", "x")
        };
        let message = message_from_publish(&sorted, Version::V5_0, MessageId(2), "ID:y".into());
        assert!(!message.properties.contains_key(USER_PROPERTIES_PROPERTY));
        assert_eq!(decode_user_properties(b"\x00\x00\x00\x09ab"), None);
    }

    #[test]
    fn durable_names_round_trip() {
        let name = durable_name(QoS::ExactlyOnce, "a/+/c");
        assert_eq!(name, "EXACTLY_ONCE:a/+/c");
        assert_eq!(parse_durable_name(&name), Some((QoS::ExactlyOnce, "a/+/c")));
        assert_eq!(parse_durable_name("jms-sub"), None);
    }
}
