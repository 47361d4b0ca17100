//! STOMP frames to and from the message model, the way ActiveMQ maps them: `persistent`,
//! `priority`, `expires`, `correlation-id`, `reply-to`, `type`, `JMSXGroupID`, `JMSXGroupSeq`
//! are JMS headers; every other header a producer sets becomes a string property; a SEND with
//! `content-length` is a bytes message, without it a text message (ActiveMQ's rule, which its
//! `amq-msg-type` header overrides).

use std::collections::{HashMap, HashSet};
use std::sync::Arc;

use bytes::Bytes;
use protocol::stomp::{Command, Frame};
use store::{
    BodyKind, DeliveryMode, Destination, DestinationKind, Message, MessageId, PropertyValue,
};

use crate::core::queue::now_millis;

/// A ferromq extension: the message id a STOMP producer gives its SEND, in ActiveMQ's form
/// `ID:<connection>:<session>:<producer>:<sequence>`, used instead of one the broker makes.
/// A producer that resends after losing its connection (ferromq's load generator on a
/// `failover:` URL) sends the same id again, and the producer audit drops the copy the
/// broker had already stored, as it does for OpenWire's resends. ActiveMQ ignores SEND's
/// `message-id`, and clients that forward a received MESSAGE copy it, so this is a header
/// of its own.
pub const MESSAGE_ID_HEADER: &str = "ferromq-message-id";

/// Headers of a SEND frame that are consumed by the mapping and never become properties.
const SEND_CONTROL_HEADERS: &[&str] = &[
    MESSAGE_ID_HEADER,
    "destination",
    "persistent",
    "priority",
    "expires",
    "correlation-id",
    "reply-to",
    "type",
    "JMSXGroupID",
    "JMSXGroupSeq",
    "content-length",
    "transaction",
    "receipt",
    "amq-msg-type",
    "message-id",
    "timestamp",
    "redelivered",
    "subscription",
    "ack",
];

/// A SEND frame the broker cannot accept, with the reason to put in the ERROR frame.
#[derive(Debug, thiserror::Error)]
pub enum MappingError {
    #[error("SEND frame has no destination header")]
    MissingDestination,
    #[error("illegal destination `{0}`: use /queue/NAME or /topic/NAME")]
    IllegalDestination(String),
    #[error("invalid {header} header `{value}`: {reason}")]
    InvalidHeader { header: &'static str, value: String, reason: &'static str },
}

/// Parses STOMP's destination form for queues and topics (`/queue/A.B`, `/topic/A.B`) and
/// the names of other connections' temporary destinations (`/remote-temp-queue/ID`,
/// `/remote-temp-topic/ID`). A connection's own `/temp-queue/NAME` goes through
/// [`TempNames`].
pub fn parse_destination(text: &str) -> Result<Destination, MappingError> {
    let (kind, name) = if let Some(name) = text.strip_prefix("/queue/") {
        (DestinationKind::Queue, name)
    } else if let Some(name) = text.strip_prefix("/topic/") {
        (DestinationKind::Topic, name)
    } else if let Some(name) = text.strip_prefix("/remote-temp-queue/") {
        (DestinationKind::TempQueue, name)
    } else if let Some(name) = text.strip_prefix("/remote-temp-topic/") {
        (DestinationKind::TempTopic, name)
    } else {
        return Err(MappingError::IllegalDestination(text.to_owned()));
    };
    if name.is_empty() {
        return Err(MappingError::IllegalDestination(text.to_owned()));
    }
    Ok(Destination { kind, name: name.into() })
}

/// A connection's temporary destinations, as ActiveMQ maps them for STOMP: the client names
/// one `/temp-queue/NAME` (or `/temp-topic/NAME`), the broker gives it a unique name on first
/// use, shows it to its owner under the client's name and to everyone else as
/// `/remote-temp-queue/<unique name>`, which others can send to (a reply-to, say).
#[derive(Debug, Default)]
pub struct TempNames {
    prefix: String,
    by_client: HashMap<(DestinationKind, String), Arc<str>>,
    by_broker: HashMap<Arc<str>, String>,
}

impl TempNames {
    /// `prefix` makes the broker's names unique (the connection's id).
    pub fn new(prefix: String) -> Self {
        TempNames { prefix, ..TempNames::default() }
    }

    /// The destination STOMP text names; the flag says it is a temporary destination this
    /// connection names for the first time (the broker must create it).
    pub fn resolve(&mut self, text: &str) -> Result<(Destination, bool), MappingError> {
        let (kind, name) = if let Some(name) = text.strip_prefix("/temp-queue/") {
            (DestinationKind::TempQueue, name)
        } else if let Some(name) = text.strip_prefix("/temp-topic/") {
            (DestinationKind::TempTopic, name)
        } else {
            return parse_destination(text).map(|destination| (destination, false));
        };
        if name.is_empty() {
            return Err(MappingError::IllegalDestination(text.to_owned()));
        }
        if let Some(unique) = self.by_client.get(&(kind, name.to_owned())) {
            return Ok((Destination { kind, name: unique.clone() }, false));
        }
        let unique: Arc<str> = format!("{}:{}", self.prefix, self.by_client.len() + 1).into();
        self.by_client.insert((kind, name.to_owned()), unique.clone());
        self.by_broker.insert(unique.clone(), name.to_owned());
        Ok((Destination { kind, name: unique }, true))
    }

    /// STOMP's form of a destination for this connection.
    pub fn format(&self, destination: &Destination) -> String {
        let own = self.by_broker.get(&destination.name);
        match (destination.kind, own) {
            (DestinationKind::TempQueue, Some(name)) => format!("/temp-queue/{name}"),
            (DestinationKind::TempTopic, Some(name)) => format!("/temp-topic/{name}"),
            (DestinationKind::TempQueue, None) => {
                format!("/remote-temp-queue/{}", destination.name)
            }
            (DestinationKind::TempTopic, None) => {
                format!("/remote-temp-topic/{}", destination.name)
            }
            (DestinationKind::Queue, _) => format!("/queue/{}", destination.name),
            (DestinationKind::Topic, _) => format!("/topic/{}", destination.name),
        }
    }
}

fn parse_number<T: std::str::FromStr>(
    header: &'static str,
    value: &str,
    reason: &'static str,
) -> Result<T, MappingError> {
    value.trim().parse().map_err(|_| MappingError::InvalidHeader {
        header,
        value: value.to_owned(),
        reason,
    })
}

/// Builds the broker's message from a SEND frame. Temporary destinations the frame names
/// for the first time (its destination or reply-to) are pushed onto `created`.
pub fn message_from_send(
    frame: Frame,
    id: MessageId,
    message_id: String,
    names: &mut TempNames,
    created: &mut Vec<Destination>,
) -> Result<Message, MappingError> {
    let mut resolve = |text: &str| -> Result<Destination, MappingError> {
        let (destination, new) = names.resolve(text)?;
        if new {
            created.push(destination.clone());
        }
        Ok(destination)
    };
    let destination = frame.get("destination").ok_or(MappingError::MissingDestination)?;
    let destination = resolve(destination)?;
    let mut message = Message::new(id, message_id, destination);
    message.headers.timestamp = now_millis();
    // ActiveMQ's STOMP default is non-persistent unless the producer says otherwise.
    message.headers.delivery_mode = DeliveryMode::NonPersistent;
    let mut kind =
        if frame.get("content-length").is_some() { BodyKind::Bytes } else { BodyKind::Text };
    let mut seen = HashSet::new();
    for (name, value) in &frame.headers {
        // STOMP 1.2: the first occurrence of a repeated header wins.
        if !seen.insert(name.as_str()) {
            continue;
        }
        match name.as_str() {
            "persistent" => {
                message.headers.delivery_mode = if value.eq_ignore_ascii_case("true") {
                    DeliveryMode::Persistent
                } else {
                    DeliveryMode::NonPersistent
                }
            }
            "priority" => {
                let priority: u8 = parse_number("priority", value, "expected 0 to 9")?;
                if priority > 9 {
                    return Err(MappingError::InvalidHeader {
                        header: "priority",
                        value: value.clone(),
                        reason: "expected 0 to 9",
                    });
                }
                message.headers.priority = priority;
            }
            "expires" => {
                message.headers.expiration =
                    parse_number("expires", value, "expected milliseconds since the epoch")?
            }
            "correlation-id" => message.headers.correlation_id = Some(value.as_str().into()),
            "reply-to" => message.headers.reply_to = Some(resolve(value)?),
            "type" => message.headers.message_type = Some(value.as_str().into()),
            "JMSXGroupID" => message.headers.group_id = Some(value.as_str().into()),
            "JMSXGroupSeq" => {
                message.headers.group_seq =
                    parse_number("JMSXGroupSeq", value, "expected an integer")?
            }
            "amq-msg-type" => match value.as_str() {
                "text" => kind = BodyKind::Text,
                "bytes" => kind = BodyKind::Bytes,
                _ => {
                    return Err(MappingError::InvalidHeader {
                        header: "amq-msg-type",
                        value: value.clone(),
                        reason: "expected text or bytes",
                    })
                }
            },
            other if SEND_CONTROL_HEADERS.contains(&other) => {}
            other => {
                message
                    .properties
                    .insert(Arc::from(other), PropertyValue::String(value.as_str().into()));
            }
        }
    }
    if kind == BodyKind::Text && std::str::from_utf8(&frame.body).is_err() {
        // Not valid text: keep every byte by treating it as a bytes message.
        kind = BodyKind::Bytes;
    }
    message.body_kind = kind;
    message.body = frame.body;
    Ok(message)
}

/// Builds the MESSAGE frame for a delivery.
pub fn message_frame(
    message: &Message,
    names: &TempNames,
    subscription: &str,
    ack: Option<&str>,
    redelivered: bool,
) -> Frame {
    let headers = &message.headers;
    let mut frame = Frame::new(Command::Message)
        .header("subscription", subscription)
        .header("message-id", &*message.message_id)
        .header("destination", names.format(&message.destination));
    // A dead letter names where it came from, as ActiveMQ's STOMP frames do.
    if let Some(original) = &message.original_destination {
        frame.push_header("original-destination", names.format(original));
    }
    if let Some(ack) = ack {
        frame.push_header("ack", ack);
    }
    // Absent for a non-persistent message, as ActiveMQ sends it.
    if message.is_persistent() {
        frame.push_header("persistent", "true");
    }
    frame.push_header("priority", headers.priority.to_string());
    frame.push_header("expires", headers.expiration.to_string());
    frame.push_header("timestamp", headers.timestamp.to_string());
    frame.push_header("redelivered", if redelivered { "true" } else { "false" });
    if let Some(value) = &headers.correlation_id {
        frame.push_header("correlation-id", &**value);
    }
    if let Some(value) = &headers.reply_to {
        frame.push_header("reply-to", names.format(value));
    }
    if let Some(value) = &headers.message_type {
        frame.push_header("type", &**value);
    }
    if let Some(value) = &headers.group_id {
        frame.push_header("JMSXGroupID", &**value);
        frame.push_header("JMSXGroupSeq", headers.group_seq.to_string());
    }
    for (name, value) in &message.properties {
        frame.push_header(&**name, value.to_header_text());
    }
    // Bytes messages carry content-length so that NUL bytes survive; text messages do too
    // whenever they have a body (the codec adds it), which every STOMP client accepts.
    if message.body_kind == BodyKind::Bytes {
        frame.push_header("content-length", message.body.len().to_string());
    }
    frame.body = body_for_stomp(message);
    frame
}

fn body_for_stomp(message: &Message) -> Bytes {
    // Map, stream and object bodies have no STOMP form; their encoded bytes go out as they are.
    message.body.clone()
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn send_headers_map_to_jms_headers_and_properties() {
        let frame = Frame::new(Command::Send)
            .header("destination", "/queue/A.B")
            .header("persistent", "true")
            .header("priority", "7")
            .header("correlation-id", "c1")
            .header("reply-to", "/queue/R")
            .header("colour", "blue")
            .header("colour", "red")
            .with_body("hi");
        let message = message_from_send(
            frame,
            MessageId(1),
            "ID:x".into(),
            &mut TempNames::default(),
            &mut Vec::new(),
        )
        .expect("maps");
        assert_eq!(message.destination, Destination::queue("A.B"));
        assert!(message.is_persistent());
        assert_eq!(message.headers.priority, 7);
        assert_eq!(message.headers.reply_to, Some(Destination::queue("R")));
        assert_eq!(message.body_kind, BodyKind::Text);
        assert_eq!(message.properties.get("colour"), Some(&PropertyValue::String("blue".into())));
    }

    #[test]
    fn bad_priority_and_destination_are_refused() {
        let frame =
            Frame::new(Command::Send).header("destination", "/queue/A").header("priority", "x");
        assert!(message_from_send(
            frame,
            MessageId(1),
            "ID:x".into(),
            &mut TempNames::default(),
            &mut Vec::new()
        )
        .is_err());
        let frame = Frame::new(Command::Send).header("destination", "A");
        assert!(matches!(
            message_from_send(
                frame,
                MessageId(1),
                "ID:x".into(),
                &mut TempNames::default(),
                &mut Vec::new()
            ),
            Err(MappingError::IllegalDestination(_))
        ));
    }

    #[test]
    fn temporary_destinations_are_named_per_connection() {
        let mut names = TempNames::new("c1".into());
        let (first, created) = names.resolve("/temp-queue/replies").expect("resolves");
        assert!(created);
        assert_eq!(first.kind, DestinationKind::TempQueue);
        let (again, created) = names.resolve("/temp-queue/replies").expect("resolves");
        assert!(!created);
        assert_eq!(again, first);
        assert_eq!(names.format(&first), "/temp-queue/replies");
        let other = TempNames::new("c2".into());
        let remote = other.format(&first);
        assert_eq!(remote, format!("/remote-temp-queue/{}", first.name));
        assert_eq!(parse_destination(&remote).expect("parses"), first);
    }

    #[test]
    fn content_length_makes_a_bytes_message() {
        let frame = Frame::new(Command::Send)
            .header("destination", "/queue/A")
            .header("content-length", "3")
            .with_body(&b"a\0b"[..]);
        let message = message_from_send(
            frame,
            MessageId(1),
            "ID:x".into(),
            &mut TempNames::default(),
            &mut Vec::new(),
        )
        .expect("maps");
        assert_eq!(message.body_kind, BodyKind::Bytes);
        let out = message_frame(&message, &TempNames::default(), "s", None, false);
        assert_eq!(out.get("content-length"), Some("3"));
    }
}
