//! AMQP 1.0 messages to and from the broker's [`store::Message`], as ActiveMQ's AMQP-JMS
//! mapping (and Qpid JMS) do it:
//!
//! - header: `durable` is the delivery mode, `priority`, `ttl` an expiration, and on the way
//!   out `delivery-count` from the broker's redelivery count;
//! - properties: message-id and correlation-id (a non-string id kept in ActiveMQ's
//!   `ID:AMQP_ULONG:` / `ID:AMQP_UUID:` / `ID:AMQP_BINARY:` / `ID:AMQP_NO_PREFIX:` text form,
//!   so that it comes back with its type; an application's string correlation id as it
//!   is), reply-to, subject (JMSType), group-id and
//!   group-sequence (JMSXGroupID, JMSXGroupSeq), creation-time (JMSTimestamp),
//!   absolute-expiry-time (JMSExpiration); content-type, content-encoding and
//!   reply-to-group-id travel as `JMS_AMQP_*` properties;
//! - application properties are JMS properties, typed (unsigned types widen, as in
//!   ActiveMQ);
//! - message annotations: `x-opt-jms-msg-type` chooses the body kind, `x-opt-jms-dest` /
//!   `x-opt-jms-reply-to` the kinds of `to` / `reply-to`, `x-opt-delivery-delay` and
//!   `x-opt-delivery-time` schedule the message; others travel as `JMS_AMQP_MA_<name>`;
//! - body: `data` is a bytes message, an `amqp-value` string a text message, binary bytes,
//!   a map a map message, a list or `amqp-sequence` a stream message; maps, lists and other
//!   values are kept AMQP-encoded (`body_encoding = "amqp"`), and OpenWire's map and stream
//!   bodies are transcoded on the way out (`crate::transcode`); a data section with the
//!   content type `application/x-java-serialized-object` is an object message.

use std::sync::Arc;

use bytes::{Bytes, BytesMut};
use protocol::amqp::{
    encode_value, Annotations, ApplicationProperties, Body, Decoder, Header, Message as Amqp,
    MessageId as AmqpId, Properties, Symbol, Value,
};
use store::{
    BodyKind, DeliveryMode, Destination, DestinationKind, Message, MessageId, PropertyValue,
};

use crate::core::queue::now_millis;
use crate::core::scheduler::AMQ_SCHEDULED_DELAY;
use crate::transcode::{self, AMQP_ENCODING};

/// Qpid JMS's message-type annotation and its values.
const JMS_MSG_TYPE: &str = "x-opt-jms-msg-type";
const JMS_MESSAGE: i8 = 0;
const JMS_OBJECT: i8 = 1;
const JMS_MAP: i8 = 2;
const JMS_BYTES: i8 = 3;
const JMS_STREAM: i8 = 4;
const JMS_TEXT: i8 = 5;

/// The content type of a data section holding a serialized Java object (an ObjectMessage).
const SERIALIZED_OBJECT: &str = "application/x-java-serialized-object";

/// Destination-type annotations: 0 queue, 1 topic, 2 temporary queue, 3 temporary topic.
const JMS_DEST: &str = "x-opt-jms-dest";
const JMS_REPLY_TO: &str = "x-opt-jms-reply-to";
const DELIVERY_DELAY: &str = "x-opt-delivery-delay";
const DELIVERY_TIME: &str = "x-opt-delivery-time";

/// ActiveMQ's property names for AMQP fields that JMS has no header for.
const CONTENT_TYPE: &str = "JMS_AMQP_ContentType";
const CONTENT_ENCODING: &str = "JMS_AMQP_ContentEncoding";
const REPLY_TO_GROUP_ID: &str = "JMS_AMQP_ReplyToGroupID";
const ANNOTATION_PREFIX: &str = "JMS_AMQP_MA_";

/// Why a received message cannot be taken.
#[derive(Debug, thiserror::Error)]
pub(super) enum MappingError {
    #[error(
        "the message has no destination: the link has no target address and the message no `to`"
    )]
    NoDestination,
    #[error("invalid address `{0}`")]
    BadAddress(String),
    #[error("an amqp-value text body that is not UTF-8")]
    BadText,
    #[error("the body cannot be re-encoded: {0}")]
    Encoding(String),
}

/// Turns an address into a destination: `queue://X`, `topic://X`, `temp-queue://X`,
/// `temp-topic://X`, or a plain name whose kind the capabilities (`queue`, `topic`,
/// `temporary-queue`, `temporary-topic`, as Qpid JMS sends them) or a type annotation
/// give; a queue when nothing says.
pub(super) fn destination_of(
    address: &str,
    capabilities: Option<&[Symbol]>,
    type_hint: Option<i8>,
) -> Result<Destination, MappingError> {
    if address.contains("://") {
        return Destination::parse_qualified(address)
            .ok_or_else(|| MappingError::BadAddress(address.to_owned()));
    }
    if address.is_empty() {
        return Err(MappingError::BadAddress(address.to_owned()));
    }
    let has = |name: &str| capabilities.is_some_and(|c| c.iter().any(|s| s.as_str() == name));
    let kind = if has("topic") {
        DestinationKind::Topic
    } else if has("temporary-queue") {
        DestinationKind::TempQueue
    } else if has("temporary-topic") {
        DestinationKind::TempTopic
    } else if has("queue") {
        DestinationKind::Queue
    } else {
        match type_hint {
            Some(1) => DestinationKind::Topic,
            Some(2) => DestinationKind::TempQueue,
            Some(3) => DestinationKind::TempTopic,
            _ => DestinationKind::Queue,
        }
    };
    Ok(Destination { kind, name: address.into() })
}

fn type_code(kind: DestinationKind) -> i8 {
    match kind {
        DestinationKind::Queue => 0,
        DestinationKind::Topic => 1,
        DestinationKind::TempQueue => 2,
        DestinationKind::TempTopic => 3,
    }
}

fn annotation_byte(annotations: Option<&Annotations>, key: &str) -> Option<i8> {
    match annotations?.get(key)? {
        Value::Byte(b) => Some(*b),
        Value::Ubyte(b) => i8::try_from(*b).ok(),
        Value::Int(i) => i8::try_from(*i).ok(),
        Value::Long(i) => i8::try_from(*i).ok(),
        _ => None,
    }
}

fn annotation_millis(value: &Value) -> Option<i64> {
    match value {
        Value::Long(v) | Value::Timestamp(v) => Some(*v),
        Value::Int(v) => Some(i64::from(*v)),
        Value::Uint(v) => Some(i64::from(*v)),
        Value::Ulong(v) => i64::try_from(*v).ok(),
        _ => None,
    }
}

/// The JMS property for an AMQP value (unsigned types widen to the next signed one, as
/// ActiveMQ does); `None` for what JMS properties cannot hold (lists, maps).
fn property_of(value: &Value) -> Option<PropertyValue> {
    Some(match value {
        Value::Null => PropertyValue::Null,
        Value::Boolean(v) => PropertyValue::Bool(*v),
        Value::Byte(v) => PropertyValue::Byte(*v),
        Value::Short(v) => PropertyValue::Short(*v),
        Value::Int(v) => PropertyValue::Int(*v),
        Value::Long(v) => PropertyValue::Long(*v),
        Value::Ubyte(v) => PropertyValue::Short(i16::from(*v)),
        Value::Ushort(v) => PropertyValue::Int(i32::from(*v)),
        Value::Uint(v) => PropertyValue::Long(i64::from(*v)),
        Value::Ulong(v) => PropertyValue::Long(i64::try_from(*v).ok()?),
        Value::Float(v) => PropertyValue::Float(*v),
        Value::Double(v) => PropertyValue::Double(*v),
        Value::Char(v) => PropertyValue::Char(*v),
        Value::Timestamp(v) => PropertyValue::Long(*v),
        Value::String(v) => PropertyValue::String(v.as_str().into()),
        Value::Symbol(v) => PropertyValue::String(v.as_str().into()),
        Value::Binary(v) => PropertyValue::Bytes(v.clone()),
        Value::Uuid(v) => PropertyValue::String(uuid_text(v).into()),
        _ => return None,
    })
}

fn value_of(property: &PropertyValue) -> Value {
    match property {
        PropertyValue::Bool(v) => Value::Boolean(*v),
        PropertyValue::Byte(v) => Value::Byte(*v),
        PropertyValue::Short(v) => Value::Short(*v),
        PropertyValue::Int(v) => Value::Int(*v),
        PropertyValue::Long(v) => Value::Long(*v),
        PropertyValue::Float(v) => Value::Float(*v),
        PropertyValue::Double(v) => Value::Double(*v),
        PropertyValue::String(v) => Value::String(v.to_string()),
        PropertyValue::Bytes(v) => Value::Binary(v.clone()),
        PropertyValue::Char(v) => Value::Char(*v),
        PropertyValue::Null => Value::Null,
    }
}

fn uuid_text(bytes: &[u8; 16]) -> String {
    let hex: String = bytes.iter().map(|b| format!("{b:02x}")).collect();
    format!("{}-{}-{}-{}-{}", &hex[..8], &hex[8..12], &hex[12..16], &hex[16..20], &hex[20..])
}

fn parse_uuid(text: &str) -> Option<[u8; 16]> {
    let hex: String = text.chars().filter(|c| *c != '-').collect();
    parse_hex(&hex)?.try_into().ok()
}

fn parse_hex(hex: &str) -> Option<Vec<u8>> {
    if !hex.len().is_multiple_of(2) {
        return None;
    }
    (0..hex.len()).step_by(2).map(|i| u8::from_str_radix(hex.get(i..i + 2)?, 16).ok()).collect()
}

/// ActiveMQ's text form of an AMQP message id (`AMQPMessageIdHelper`): JMS ids are
/// strings starting with `ID:`, the other types are tagged so they can be restored.
fn id_text(id: &AmqpId) -> String {
    match id {
        AmqpId::String(s) if s.starts_with("ID:") => s.clone(),
        AmqpId::String(s) => format!("ID:AMQP_NO_PREFIX:{s}"),
        AmqpId::Ulong(n) => format!("ID:AMQP_ULONG:{n}"),
        AmqpId::Uuid(u) => format!("ID:AMQP_UUID:{}", uuid_text(u)),
        AmqpId::Binary(b) => {
            let hex: String = b.iter().map(|b| format!("{b:02X}")).collect();
            format!("ID:AMQP_BINARY:{hex}")
        }
    }
}

/// A correlation id's JMSCorrelationID: an application's own string (no `ID:`) is kept as
/// it is, as ActiveMQ and Qpid JMS keep it (`toCorrelationIdString`); message ids of other
/// types take [`id_text`]'s tagged form, which [`id_of`] turns back.
fn correlation_text(id: &AmqpId) -> String {
    match id {
        AmqpId::String(s) if !s.starts_with("ID:") => s.clone(),
        other => id_text(other),
    }
}

/// The inverse of [`id_text`]; other text stays a string id.
fn id_of(text: &str) -> AmqpId {
    let tagged = |prefix: &str| text.strip_prefix(prefix);
    if let Some(n) = tagged("ID:AMQP_ULONG:").and_then(|n| n.parse().ok()) {
        AmqpId::Ulong(n)
    } else if let Some(u) = tagged("ID:AMQP_UUID:").and_then(parse_uuid) {
        AmqpId::Uuid(u)
    } else if let Some(b) = tagged("ID:AMQP_BINARY:").and_then(parse_hex) {
        AmqpId::Binary(Bytes::from(b))
    } else if let Some(s) = tagged("ID:AMQP_NO_PREFIX:").or_else(|| tagged("ID:AMQP_STRING:")) {
        AmqpId::String(s.to_owned())
    } else {
        AmqpId::String(text.to_owned())
    }
}

fn encoded(value: &Value) -> Result<Bytes, MappingError> {
    let mut out = BytesMut::new();
    encode_value(value, &mut out).map_err(|e| MappingError::Encoding(e.to_string()))?;
    Ok(out.freeze())
}

/// Builds the broker's message from a received AMQP message. `target` is the link's
/// destination (`None` for an anonymous-relay link: the message's `to` names it).
pub(super) fn from_amqp(
    amqp: Amqp,
    id: MessageId,
    generated_id: String,
    target: Option<&Destination>,
) -> Result<Message, MappingError> {
    let annotations = amqp.message_annotations.as_ref();
    let properties = amqp.properties.clone().unwrap_or_default();
    let destination = match target {
        Some(destination) => destination.clone(),
        None => {
            let to = properties.to.as_deref().ok_or(MappingError::NoDestination)?;
            destination_of(to, None, annotation_byte(annotations, JMS_DEST))?
        }
    };
    let message_id = properties.message_id.as_ref().map_or(generated_id, id_text);
    let mut message = Message::new(id, message_id, destination);
    let now = now_millis();
    let header = amqp.header.clone().unwrap_or_default();
    let jms = &mut message.headers;
    jms.delivery_mode =
        if header.durable() { DeliveryMode::Persistent } else { DeliveryMode::NonPersistent };
    jms.priority = header.priority().min(9);
    jms.timestamp = properties.creation_time.unwrap_or(now);
    if let Some(ttl) = header.ttl.filter(|ttl| *ttl > 0) {
        jms.expiration = now + i64::from(ttl);
    }
    if let Some(expiry) = properties.absolute_expiry_time.filter(|t| *t > 0) {
        jms.expiration = expiry;
    }
    jms.correlation_id = properties.correlation_id.as_ref().map(|id| correlation_text(id).into());
    jms.message_type = properties.subject.as_deref().map(Arc::from);
    jms.group_id = properties.group_id.as_deref().map(Arc::from);
    jms.group_seq = properties.group_sequence.map_or(0, |s| i32::try_from(s).unwrap_or(i32::MAX));
    if let Some(reply_to) = &properties.reply_to {
        jms.reply_to =
            destination_of(reply_to, None, annotation_byte(annotations, JMS_REPLY_TO)).ok();
    }
    let props = &mut message.properties;
    if let Some(content_type) = &properties.content_type {
        props.insert(CONTENT_TYPE.into(), PropertyValue::String(content_type.as_str().into()));
    }
    if let Some(encoding) = &properties.content_encoding {
        props.insert(CONTENT_ENCODING.into(), PropertyValue::String(encoding.as_str().into()));
    }
    if let Some(group) = &properties.reply_to_group_id {
        props.insert(REPLY_TO_GROUP_ID.into(), PropertyValue::String(group.as_str().into()));
    }
    if let Some(application) = &amqp.application_properties {
        for (name, value) in &application.0 {
            if let Some(property) = property_of(value) {
                props.insert(name.as_str().into(), property);
            }
        }
    }
    if let Some(annotations) = annotations {
        for (key, value) in &annotations.0 {
            let Some(key) = key.as_str() else { continue };
            match key {
                JMS_MSG_TYPE | JMS_DEST | JMS_REPLY_TO => {}
                DELIVERY_DELAY | DELIVERY_TIME => {
                    let Some(millis) = annotation_millis(value) else { continue };
                    let delay = if key == DELIVERY_TIME { millis - now } else { millis };
                    if delay > 0 {
                        props.insert(AMQ_SCHEDULED_DELAY.into(), PropertyValue::Long(delay));
                    }
                }
                _ => {
                    if let Some(property) = property_of(value) {
                        props.insert(format!("{ANNOTATION_PREFIX}{key}").into(), property);
                    }
                }
            }
        }
    }
    let msg_type = annotation_byte(annotations, JMS_MSG_TYPE);
    let text_content =
        properties.content_type.as_ref().is_some_and(|t| t.as_str().starts_with("text/"));
    let serialized_object =
        properties.content_type.as_ref().is_some_and(|t| t.as_str() == SERIALIZED_OBJECT);
    let (kind, encoding, body) = match amqp.body {
        Body::Empty => match msg_type {
            Some(JMS_TEXT) => (BodyKind::Text, "", Bytes::new()),
            Some(JMS_BYTES) => (BodyKind::Bytes, "", Bytes::new()),
            _ => (BodyKind::None, "", Bytes::new()),
        },
        Body::Data(sections) => {
            let body = match sections.len() {
                1 => Bytes::copy_from_slice(&sections[0]),
                _ => Bytes::from(sections.concat()),
            };
            let kind = match msg_type {
                Some(JMS_TEXT) => BodyKind::Text,
                Some(JMS_OBJECT) => BodyKind::Object,
                None if serialized_object => BodyKind::Object,
                None if text_content && std::str::from_utf8(&body).is_ok() => BodyKind::Text,
                _ => BodyKind::Bytes,
            };
            (kind, "", body)
        }
        Body::Value(Value::String(text)) => (BodyKind::Text, "", Bytes::from(text.into_bytes())),
        Body::Value(Value::Null) if msg_type == Some(JMS_TEXT) => {
            (BodyKind::Text, "", Bytes::new())
        }
        Body::Value(Value::Binary(bytes)) => {
            let kind =
                if msg_type == Some(JMS_OBJECT) { BodyKind::Object } else { BodyKind::Bytes };
            (kind, "", Bytes::copy_from_slice(&bytes))
        }
        Body::Value(value @ Value::Map(_)) => (BodyKind::Map, AMQP_ENCODING, encoded(&value)?),
        Body::Value(value @ Value::List(_)) => (BodyKind::Stream, AMQP_ENCODING, encoded(&value)?),
        Body::Sequence(sequences) => {
            let all: Vec<Value> = sequences.into_iter().flatten().collect();
            (BodyKind::Stream, AMQP_ENCODING, encoded(&Value::List(all))?)
        }
        Body::Value(value) => (BodyKind::Object, AMQP_ENCODING, encoded(&value)?),
    };
    if kind == BodyKind::Text && std::str::from_utf8(&body).is_err() {
        return Err(MappingError::BadText);
    }
    message.body_kind = kind;
    message.body_encoding = Arc::from(encoding);
    message.body = body;
    Ok(message)
}

/// The AMQP message for a delivery of `message`, delivered `delivery_count` times before.
pub(super) fn to_amqp(message: &Message, delivery_count: u32, max_depth: usize) -> Amqp {
    let jms = &message.headers;
    let now = now_millis();
    let header = Header {
        durable: Some(message.is_persistent()),
        priority: (jms.priority != store::DEFAULT_PRIORITY).then_some(jms.priority),
        ttl: (jms.expiration > 0)
            .then(|| u32::try_from((jms.expiration - now).max(1)).unwrap_or(u32::MAX)),
        first_acquirer: None,
        delivery_count: (delivery_count > 0).then_some(delivery_count),
    };
    let text_property = |name: &str| match message.properties.get(name) {
        Some(PropertyValue::String(s)) => Some(s.to_string()),
        _ => None,
    };
    let mut annotations = Annotations::default();
    let mut properties = Properties {
        message_id: Some(id_of(&message.message_id)),
        to: Some(String::from(&*message.destination.name)),
        subject: jms.message_type.as_deref().map(str::to_owned),
        correlation_id: jms.correlation_id.as_deref().map(id_of),
        content_type: text_property(CONTENT_TYPE).map(Symbol::from),
        content_encoding: text_property(CONTENT_ENCODING).map(Symbol::from),
        absolute_expiry_time: (jms.expiration > 0).then_some(jms.expiration),
        creation_time: (jms.timestamp > 0).then_some(jms.timestamp),
        group_id: jms.group_id.as_deref().map(str::to_owned),
        group_sequence: (jms.group_seq > 0).then(|| jms.group_seq.unsigned_abs()),
        reply_to_group_id: text_property(REPLY_TO_GROUP_ID),
        ..Properties::default()
    };
    annotations.insert(JMS_DEST, Value::Byte(type_code(message.destination.kind)));
    if let Some(reply_to) = &jms.reply_to {
        properties.reply_to = Some(String::from(&*reply_to.name));
        annotations.insert(JMS_REPLY_TO, Value::Byte(type_code(reply_to.kind)));
    }
    let mut application = ApplicationProperties::default();
    for (name, value) in &message.properties {
        if let Some(annotation) = name.strip_prefix(ANNOTATION_PREFIX) {
            annotations.insert(annotation, value_of(value));
        } else if !name.starts_with("JMS_AMQP_") {
            application.insert(String::from(&**name), value_of(value));
        }
    }
    let decode = |bytes: &Bytes| {
        let mut decoder = Decoder::new(bytes, max_depth);
        decoder.read_value().ok()
    };
    let amqp_encoded = &*message.body_encoding == AMQP_ENCODING;
    let (msg_type, body) = match message.body_kind {
        BodyKind::None => (JMS_MESSAGE, Body::Empty),
        BodyKind::Text => {
            (JMS_TEXT, Body::Value(Value::String(String::from_utf8_lossy(&message.body).into())))
        }
        BodyKind::Bytes => (JMS_BYTES, Body::Data(vec![message.body.clone()])),
        BodyKind::Map if amqp_encoded => {
            (JMS_MAP, decode(&message.body).map_or(Body::Empty, Body::Value))
        }
        BodyKind::Stream if amqp_encoded => {
            (JMS_STREAM, decode(&message.body).map_or(Body::Empty, Body::Value))
        }
        BodyKind::Object if amqp_encoded => {
            (JMS_OBJECT, decode(&message.body).map_or(Body::Empty, Body::Value))
        }
        // A serialized Java object from OpenWire: a data section the JMS client deserializes.
        BodyKind::Object => (JMS_OBJECT, Body::Data(vec![message.body.clone()])),
        // OpenWire's marshalled map or stream, transcoded as ActiveMQ's outbound transformer
        // does (a map value; a stream as an amqp-sequence).
        BodyKind::Map => match transcode::openwire_map_to_amqp(&message.body) {
            Ok(map) => (JMS_MAP, Body::Value(map)),
            Err(error) => untranscoded(message, &error),
        },
        BodyKind::Stream => match transcode::openwire_stream_to_amqp(&message.body) {
            Ok(values) => (JMS_STREAM, Body::Sequence(vec![values])),
            Err(error) => untranscoded(message, &error),
        },
    };
    annotations.insert(JMS_MSG_TYPE, Value::Byte(msg_type));
    if msg_type == JMS_OBJECT && properties.content_type.is_none() && !amqp_encoded {
        properties.content_type = Some(Symbol::from(SERIALIZED_OBJECT));
    }
    Amqp {
        header: Some(header),
        delivery_annotations: None,
        message_annotations: Some(annotations),
        properties: Some(properties),
        application_properties: (!application.0.is_empty()).then_some(application),
        body,
        footer: None,
    }
}

/// A map or stream body that does not decode in its encoding: the consumer still gets the
/// message, with its body as bytes.
fn untranscoded(message: &Message, error: &transcode::TranscodeError) -> (i8, Body) {
    tracing::warn!(%error, message = %message.message_id, "body delivered as bytes");
    (JMS_BYTES, Body::Data(vec![message.body.clone()]))
}

#[cfg(test)]
mod tests {
    use super::*;

    fn round_trip(amqp: Amqp) -> Amqp {
        let message =
            from_amqp(amqp, MessageId(1), "ID:gen".into(), Some(&Destination::queue("q"))).unwrap();
        to_amqp(&message, 0, 32)
    }

    #[test]
    fn text_properties_and_ids_survive_a_round_trip() {
        let mut amqp = Amqp::with_value("hello");
        let mut application = ApplicationProperties::default();
        application.insert("count", Value::Int(7));
        application.insert("flag", Value::Boolean(true));
        application.insert("name", Value::from("x"));
        amqp.application_properties = Some(application.clone());
        amqp.properties = Some(Properties {
            message_id: Some(AmqpId::Ulong(42)),
            correlation_id: Some(AmqpId::String("corr".into())),
            subject: Some("type".into()),
            group_id: Some("g".into()),
            group_sequence: Some(3),
            ..Properties::default()
        });
        let back = round_trip(amqp);
        assert_eq!(back.body, Body::Value(Value::from("hello")));
        assert_eq!(back.application_properties, Some(application));
        let properties = back.properties.unwrap();
        assert_eq!(properties.message_id, Some(AmqpId::Ulong(42)));
        assert_eq!(properties.correlation_id, Some(AmqpId::String("corr".into())));
        assert_eq!(properties.subject.as_deref(), Some("type"));
        assert_eq!(properties.group_id.as_deref(), Some("g"));
        assert_eq!(properties.group_sequence, Some(3));
        let annotations = back.message_annotations.unwrap();
        assert_eq!(annotations.get(JMS_MSG_TYPE), Some(&Value::Byte(JMS_TEXT)));
    }

    #[test]
    fn bodies_map_to_jms_kinds() {
        let kind = |amqp: Amqp| {
            from_amqp(amqp, MessageId(1), "ID:x".into(), Some(&Destination::queue("q")))
                .unwrap()
                .body_kind
        };
        assert_eq!(kind(Amqp::with_data(Bytes::from_static(b"\x00\x01"))), BodyKind::Bytes);
        assert_eq!(kind(Amqp::with_value(Value::Binary(Bytes::new()))), BodyKind::Bytes);
        assert_eq!(kind(Amqp::with_value("t")), BodyKind::Text);
        let map = Value::Map(vec![(Value::from("k"), Value::Int(1))]);
        assert_eq!(kind(Amqp::with_value(map.clone())), BodyKind::Map);
        let back = round_trip(Amqp::with_value(map.clone()));
        assert_eq!(back.body, Body::Value(map));
        let data = round_trip(Amqp::with_data(Bytes::from_static(b"abc")));
        assert_eq!(data.body, Body::Data(vec![Bytes::from_static(b"abc")]));
    }

    #[test]
    fn durable_priority_and_ttl_map_to_jms_headers() {
        let mut amqp = Amqp::with_value("x");
        amqp.header = Some(Header {
            durable: Some(false),
            priority: Some(7),
            ttl: Some(60_000),
            ..Header::default()
        });
        let message =
            from_amqp(amqp, MessageId(1), "ID:x".into(), Some(&Destination::queue("q"))).unwrap();
        assert!(!message.is_persistent());
        assert_eq!(message.headers.priority, 7);
        assert!(message.headers.expiration > now_millis());
        let header = to_amqp(&message, 2, 32).header.unwrap();
        assert_eq!(header.durable, Some(false));
        assert_eq!(header.priority, Some(7));
        assert_eq!(header.delivery_count, Some(2));
        assert!(header.ttl.is_some_and(|ttl| ttl <= 60_000));
    }

    #[test]
    fn addresses_follow_activemq() {
        let topic = [Symbol::from("topic")];
        assert_eq!(destination_of("queue://a", None, None).unwrap(), Destination::queue("a"));
        assert_eq!(destination_of("topic://a", None, None).unwrap(), Destination::topic("a"));
        assert_eq!(destination_of("a", Some(&topic), None).unwrap(), Destination::topic("a"));
        assert_eq!(destination_of("a", None, None).unwrap(), Destination::queue("a"));
        assert!(destination_of("bogus://a", None, None).is_err());
    }
}
