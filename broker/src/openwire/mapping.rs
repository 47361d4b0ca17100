//! OpenWire messages, destinations and ids to the store's model and back.
//!
//! - Message ids: an OpenWire `MessageId { producerId, producerSequenceId }` is the store's
//!   `message_id` text `ID:<connection>:<session>:<producer>:<sequence>` (what ActiveMQ's
//!   `MessageId.toString` gives), so STOMP and OpenWire clients see the same JMSMessageID;
//!   the `brokerSequenceId` going out is the store's message id, by which acks find the
//!   message again.
//! - Bodies: text as UTF-8, bytes and object bodies as they are, map and stream bodies in
//!   their OpenWire encoding (`body_encoding = "openwire"`); an AMQP producer's map or list
//!   body is transcoded for the consumer (`crate::transcode`).
//! - Properties: a primitive map to typed store properties and back.

use std::sync::Arc;

use bytes::Bytes;
use protocol::openwire::{
    self as ow, PrimitiveMap, PrimitiveValue, WireError, DEFAULT_MAX_INFLATED_SIZE,
};
use store::{
    BodyKind, DeliveryMode, Destination, DestinationKind, Message, MessageId, PropertyValue,
};

use crate::core::{
    ADVISORY_CLIENT_ID, ADVISORY_DESTINATION, ADVISORY_KIND, ADVISORY_OPERATION, ADVISORY_SUBJECT,
};
use crate::transcode::{self, AMQP_ENCODING};

/// The `body_encoding` of map and stream bodies an OpenWire producer sent.
pub(crate) const OPENWIRE_ENCODING: &str = "openwire";
/// The `body_encoding` of a text message whose text is null (not empty), which JMS tells apart.
pub(crate) const NULL_TEXT: &str = "null";

pub(crate) fn destination_from(d: &ow::Destination) -> Destination {
    let kind = match d.kind {
        ow::DestinationKind::Queue => DestinationKind::Queue,
        ow::DestinationKind::Topic => DestinationKind::Topic,
        ow::DestinationKind::TempQueue => DestinationKind::TempQueue,
        ow::DestinationKind::TempTopic => DestinationKind::TempTopic,
    };
    // ActiveMQ destination options (`NAME?consumer.prefetchSize=1`) are not part of the name.
    let name = d.physical_name.split_once('?').map_or(d.physical_name.as_str(), |(n, _)| n);
    Destination { kind, name: name.into() }
}

pub(crate) fn destination_to(d: &Destination) -> ow::Destination {
    let kind = match d.kind {
        DestinationKind::Queue => ow::DestinationKind::Queue,
        DestinationKind::Topic => ow::DestinationKind::Topic,
        DestinationKind::TempQueue => ow::DestinationKind::TempQueue,
        DestinationKind::TempTopic => ow::DestinationKind::TempTopic,
    };
    ow::Destination { kind, physical_name: String::from(&*d.name) }
}

/// ActiveMQ's text form of a message id.
pub(crate) fn message_id_text(id: &ow::MessageId) -> Option<String> {
    if let Some(text) = &id.text_view {
        return Some(if text.starts_with("ID:") { text.clone() } else { format!("ID:{text}") });
    }
    let p = id.producer_id.as_ref()?;
    // Once per message sent: without `format!`'s machinery.
    let mut text = String::with_capacity(p.connection_id.len() + 3 * 21);
    let mut number = itoa::Buffer::new();
    text.push_str(&p.connection_id);
    for part in [p.session_id, p.value, id.producer_sequence_id] {
        text.push(':');
        text.push_str(number.format(part));
    }
    Some(text)
}

/// The OpenWire message id of a stored message: parsed back from its text when it has
/// ActiveMQ's form, else a synthetic producer with the broker's id as sequence (and the text
/// kept as the id's text view, which the client shows as JMSMessageID).
pub(crate) fn message_id_of(message: &Message) -> ow::MessageId {
    let text = &*message.message_id;
    let parsed = (|| {
        let (rest, seq) = text.rsplit_once(':')?;
        let (rest, producer) = rest.rsplit_once(':')?;
        let (connection, session) = rest.rsplit_once(':')?;
        Some(ow::ProducerId {
            connection_id: connection.to_owned(),
            value: producer.parse().ok()?,
            session_id: session.parse().ok()?,
        })
        .zip(seq.parse::<i64>().ok())
    })();
    match parsed {
        Some((producer_id, sequence)) if text.starts_with("ID:") => ow::MessageId {
            text_view: None,
            producer_id: Some(producer_id),
            producer_sequence_id: sequence,
            broker_sequence_id: message.id.0 as i64,
        },
        _ => ow::MessageId {
            text_view: Some(text.to_owned()),
            producer_id: Some(ow::ProducerId {
                connection_id: "ID:ferromq-foreign".to_owned(),
                value: 0,
                session_id: 0,
            }),
            producer_sequence_id: message.id.0 as i64,
            broker_sequence_id: message.id.0 as i64,
        },
    }
}

fn property_from(value: &PrimitiveValue) -> PropertyValue {
    match value {
        PrimitiveValue::Null => PropertyValue::Null,
        PrimitiveValue::Boolean(v) => PropertyValue::Bool(*v),
        PrimitiveValue::Byte(v) => PropertyValue::Byte(*v),
        PrimitiveValue::Char(v) => char::from_u32(u32::from(*v))
            .map_or(PropertyValue::Short(*v as i16), PropertyValue::Char),
        PrimitiveValue::Short(v) => PropertyValue::Short(*v),
        PrimitiveValue::Int(v) => PropertyValue::Int(*v),
        PrimitiveValue::Long(v) => PropertyValue::Long(*v),
        PrimitiveValue::Float(v) => PropertyValue::Float(*v),
        PrimitiveValue::Double(v) => PropertyValue::Double(*v),
        PrimitiveValue::String(v) => PropertyValue::String(v.as_str().into()),
        PrimitiveValue::Bytes(v) => PropertyValue::Bytes(v.clone()),
        // JMS properties cannot be maps or lists; keep something readable.
        other => PropertyValue::String(format!("{other:?}").into()),
    }
}

fn property_to(value: &PropertyValue) -> Option<PrimitiveValue> {
    Some(match value {
        PropertyValue::Bool(v) => PrimitiveValue::Boolean(*v),
        PropertyValue::Byte(v) => PrimitiveValue::Byte(*v),
        PropertyValue::Short(v) => PrimitiveValue::Short(*v),
        PropertyValue::Int(v) => PrimitiveValue::Int(*v),
        PropertyValue::Long(v) => PrimitiveValue::Long(*v),
        PropertyValue::Float(v) => PrimitiveValue::Float(*v),
        PropertyValue::Double(v) => PrimitiveValue::Double(*v),
        PropertyValue::String(v) => PrimitiveValue::String(v.to_string()),
        PropertyValue::Bytes(v) => PrimitiveValue::Bytes(v.clone()),
        PropertyValue::Char(c) => match u16::try_from(u32::from(*c)) {
            Ok(unit) => PrimitiveValue::Char(unit),
            Err(_) => PrimitiveValue::String(c.to_string()),
        },
        PropertyValue::Null => return None,
    })
}

/// A producer's message as the broker stores it.
pub(crate) fn message_from(m: &ow::Message, id: MessageId) -> Result<Message, WireError> {
    let destination =
        m.destination.as_ref().map(destination_from).ok_or(WireError::NullField("destination"))?;
    let message_id = m
        .message_id
        .as_ref()
        .and_then(message_id_text)
        .unwrap_or_else(|| format!("ID:ferromq-unnamed:0:0:{}", id.0));
    let mut out = Message::new(id, message_id, destination);
    let h = &mut out.headers;
    h.correlation_id = m.correlation_id.as_deref().map(Arc::from);
    h.reply_to = m.reply_to.as_ref().map(destination_from);
    h.message_type = m.jms_type.as_deref().map(Arc::from);
    h.priority = m.priority.clamp(0, 9) as u8;
    h.expiration = m.expiration;
    h.timestamp = m.timestamp;
    h.delivery_mode =
        if m.persistent { DeliveryMode::Persistent } else { DeliveryMode::NonPersistent };
    h.group_id = m.group_id.as_deref().map(Arc::from);
    h.group_seq = m.group_sequence;
    for (name, value) in m.properties()?.iter() {
        out.properties.insert(name.into(), property_from(value));
    }
    let content = m.uncompressed_content(DEFAULT_MAX_INFLATED_SIZE)?;
    // The content may be a slice of the frame the client sent, which would pin the whole
    // read buffer while the message is queued: kept as a copy of its own. A text is decoded
    // into a buffer of its own already.
    let content = || Bytes::copy_from_slice(&content.unwrap_or_default());
    let (kind, body, encoding) = match m.body_type {
        ow::MessageType::Text => match m.text()? {
            Some(text) => (BodyKind::Text, Bytes::from(text.into_bytes()), ""),
            None => (BodyKind::Text, Bytes::new(), NULL_TEXT),
        },
        ow::MessageType::Bytes => (BodyKind::Bytes, content(), ""),
        ow::MessageType::Object => (BodyKind::Object, content(), ""),
        ow::MessageType::Map => (BodyKind::Map, content(), OPENWIRE_ENCODING),
        ow::MessageType::Stream => (BodyKind::Stream, content(), OPENWIRE_ENCODING),
        ow::MessageType::Message | ow::MessageType::Blob => (BodyKind::None, Bytes::new(), ""),
    };
    out.body_kind = kind;
    out.body = body;
    if !encoding.is_empty() {
        out.body_encoding = Arc::from(encoding);
    }
    Ok(out)
}

/// A stored message as an OpenWire consumer receives it.
pub(crate) fn message_to(message: &Message, redelivery_counter: i32) -> ow::Message {
    let mut m = ow::Message::new(ow::MessageType::Message);
    let id = message_id_of(message);
    m.producer_id = id.producer_id.clone();
    m.message_id = Some(id);
    m.destination = Some(destination_to(&message.destination));
    m.original_destination = message.original_destination.as_ref().map(destination_to);
    let h = &message.headers;
    m.correlation_id = h.correlation_id.as_deref().map(str::to_owned);
    m.reply_to = h.reply_to.as_ref().map(destination_to);
    m.jms_type = h.message_type.as_deref().map(str::to_owned);
    m.priority = message.priority() as i8;
    m.expiration = h.expiration;
    m.timestamp = h.timestamp;
    m.persistent = message.is_persistent();
    m.group_id = h.group_id.as_deref().map(str::to_owned);
    m.group_sequence = h.group_seq;
    m.redelivery_counter = redelivery_counter;
    // Encoded straight from the message's properties (building a `PrimitiveMap` first cost a
    // key copy and a value per property, then its encoding).
    let properties =
        message.properties.iter().filter_map(|(name, value)| Some((&**name, property_to(value)?)));
    let mut properties = properties.peekable();
    if properties.peek().is_some() {
        match PrimitiveMap::encode_entries(properties) {
            Ok(encoded) => m.marshalled_properties = Some(encoded),
            Err(error) => {
                tracing::warn!(%error, message = %message.message_id, "properties not representable in OpenWire")
            }
        }
    }
    let body = message.body.clone();
    let result = match message.body_kind {
        BodyKind::None => Ok(()),
        BodyKind::Text if &*message.body_encoding == NULL_TEXT && body.is_empty() => {
            m.set_text(None, false)
        }
        BodyKind::Text => m.set_text(Some(&String::from_utf8_lossy(&body)), false),
        BodyKind::Bytes => m.set_bytes(body, false),
        BodyKind::Object => {
            m.body_type = ow::MessageType::Object;
            m.set_uncompressed_content(Some(body), false)
        }
        BodyKind::Map if &*message.body_encoding == OPENWIRE_ENCODING => {
            m.body_type = ow::MessageType::Map;
            m.set_uncompressed_content(Some(body), false)
        }
        BodyKind::Stream if &*message.body_encoding == OPENWIRE_ENCODING => {
            m.body_type = ow::MessageType::Stream;
            m.set_uncompressed_content(Some(body), false)
        }
        BodyKind::Map if &*message.body_encoding == AMQP_ENCODING => {
            match transcode::amqp_map_to_openwire(&body) {
                Ok(map) => m.set_map(&map, false),
                Err(error) => untranscoded(&mut m, message, body, &error),
            }
        }
        BodyKind::Stream if &*message.body_encoding == AMQP_ENCODING => {
            match transcode::amqp_stream_to_openwire(&body) {
                Ok(values) => m.set_stream(&values, false),
                Err(error) => untranscoded(&mut m, message, body, &error),
            }
        }
        // A map or stream in an encoding we cannot read: handed over as bytes.
        BodyKind::Map | BodyKind::Stream => m.set_bytes(body, false),
    };
    if let Err(error) = result {
        tracing::warn!(%error, message = %message.message_id, "body not representable in OpenWire");
    }
    if let Some(command) = advisory(message) {
        m.jms_type = Some("Advisory".to_owned());
        m.data_structure = Some(Box::new(ow::DataStructure::Command(command)));
    }
    m
}

/// A body that claims to be an AMQP map or list but does not decode as one (the AMQP adapter
/// checked it on the way in, so only a store written by another version could hold one):
/// the consumer still gets the message, its body as bytes.
fn untranscoded(
    m: &mut ow::Message,
    message: &Message,
    body: Bytes,
    error: &transcode::TranscodeError,
) -> Result<(), WireError> {
    tracing::warn!(%error, message = %message.message_id, "body delivered as bytes");
    m.set_bytes(body, false)
}

/// A string property of an advisory message.
fn advisory_property<'m>(message: &'m Message, name: &str) -> Option<&'m str> {
    match message.properties.get(name)? {
        PropertyValue::String(value) => Some(value),
        _ => None,
    }
}

/// The `<connection>:<session>:<value>` id of the consumer or producer an advisory is about.
fn advisory_id(message: &Message) -> Option<(String, i64, i64)> {
    let subject = advisory_property(message, ADVISORY_SUBJECT)?;
    let (rest, value) = subject.rsplit_once(':')?;
    let (connection, session) = rest.rsplit_once(':')?;
    Some((connection.to_owned(), session.parse().ok()?, value.parse().ok()?))
}

/// The command an advisory carries for the JMS client's `AdvisorySupport`: a ConsumerInfo or
/// ConnectionInfo for a start, a RemoveInfo with the same id for a stop, a DestinationInfo
/// for destinations.
fn advisory(message: &Message) -> Option<ow::Command> {
    if !message.destination.name.starts_with("ActiveMQ.Advisory.") {
        return None;
    }
    let removed = advisory_property(message, ADVISORY_OPERATION)? == "remove";
    let remove = |id: ow::DataStructure| {
        ow::Command::RemoveInfo(Box::new(ow::RemoveInfo {
            object_id: Some(Box::new(id)),
            ..Default::default()
        }))
    };
    match advisory_property(message, ADVISORY_KIND).unwrap_or("destination") {
        "consumer" => {
            let (connection_id, session_id, value) = advisory_id(message)?;
            let consumer_id = ow::ConsumerId { connection_id, session_id, value };
            if removed {
                return Some(remove(ow::DataStructure::ConsumerId(consumer_id)));
            }
            let destination = advisory_property(message, ADVISORY_DESTINATION)?;
            let destination = Destination::parse_qualified(destination)?;
            Some(ow::Command::ConsumerInfo(Box::new(ow::ConsumerInfo {
                consumer_id: Some(consumer_id),
                destination: Some(destination_to(&destination)),
                ..Default::default()
            })))
        }
        "producer" => {
            let (connection_id, session_id, value) = advisory_id(message)?;
            let producer_id = ow::ProducerId { connection_id, session_id, value };
            if removed {
                return Some(remove(ow::DataStructure::ProducerId(producer_id)));
            }
            let destination = advisory_property(message, ADVISORY_DESTINATION)?;
            let destination = Destination::parse_qualified(destination)?;
            Some(ow::Command::ProducerInfo(Box::new(ow::ProducerInfo {
                producer_id: Some(producer_id),
                destination: Some(destination_to(&destination)),
                ..Default::default()
            })))
        }
        "connection" => {
            let connection_id = ow::ConnectionId {
                value: advisory_property(message, ADVISORY_SUBJECT)?.to_owned(),
            };
            if removed {
                return Some(remove(ow::DataStructure::ConnectionId(connection_id)));
            }
            Some(ow::Command::ConnectionInfo(Box::new(ow::ConnectionInfo {
                connection_id: Some(connection_id),
                client_id: advisory_property(message, ADVISORY_CLIENT_ID).map(str::to_owned),
                ..Default::default()
            })))
        }
        _ => destination_advisory(message, removed)
            .map(|info| ow::Command::DestinationInfo(Box::new(info))),
    }
}

/// The DestinationInfo an advisory about a destination carries for the JMS client (which
/// watches `ActiveMQ.Advisory.TempQueue` / `TempTopic` before sending to a temporary one).
fn destination_advisory(message: &Message, removed: bool) -> Option<ow::DestinationInfo> {
    let target = Destination::parse_qualified(advisory_property(message, ADVISORY_DESTINATION)?)?;
    // The client names temporary destinations `<connection id>:<n>`.
    let connection = target.name.rsplit_once(':').map_or(&*target.name, |(c, _)| c);
    Some(ow::DestinationInfo {
        connection_id: Some(ow::ConnectionId { value: connection.to_owned() }),
        destination: Some(destination_to(&target)),
        operation_type: if removed {
            ow::destination_operation::REMOVE
        } else {
            ow::destination_operation::ADD
        },
        ..Default::default()
    })
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn message_ids_round_trip_through_their_text() {
        let id = ow::MessageId {
            text_view: None,
            producer_id: Some(ow::ProducerId {
                connection_id: "ID:host-1-2-3:1".into(),
                value: 4,
                session_id: 2,
            }),
            producer_sequence_id: 9,
            broker_sequence_id: 0,
        };
        let text = message_id_text(&id).unwrap();
        assert_eq!(text, "ID:host-1-2-3:1:2:4:9");
        let message = Message::new(MessageId(77), text, Destination::queue("Q"));
        let back = message_id_of(&message);
        assert_eq!(back.producer_id, id.producer_id);
        assert_eq!(back.producer_sequence_id, 9);
        assert_eq!(back.broker_sequence_id, 77);
    }

    #[test]
    fn typed_properties_and_text_survive() {
        let mut m = ow::Message::new(ow::MessageType::Text);
        m.destination = Some(ow::Destination::queue("Q"));
        m.set_text(Some("héllo"), false).unwrap();
        let mut p = PrimitiveMap::new();
        p.insert("n", 5i32);
        p.insert("s", "x");
        m.set_properties(&p).unwrap();
        m.priority = 7;
        m.persistent = false;
        let stored = message_from(&m, MessageId(1)).unwrap();
        assert_eq!(&stored.body[..], "héllo".as_bytes());
        assert_eq!(stored.properties.get("n"), Some(&PropertyValue::Int(5)));
        let out = message_to(&stored, 2);
        assert_eq!(out.text().unwrap().as_deref(), Some("héllo"));
        assert_eq!(out.properties().unwrap().get("n").and_then(PrimitiveValue::as_i64), Some(5));
        assert_eq!((out.priority, out.persistent, out.redelivery_counter), (7, false, 2));
    }
}
