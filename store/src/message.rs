//! The protocol-neutral message model shared by the broker, every protocol adapter and every
//! store.
//!
//! A [`Message`] is immutable once the broker has accepted it and is shared as an
//! `Arc<Message>` by every destination and subscription that holds it; per-destination
//! delivery state (sequence, delivery count, redelivered flag, group owner) lives beside it in
//! the broker, never in it. The fields cover the JMS 1.1 headers, typed properties and every
//! JMS body kind so that STOMP, OpenWire and AMQP all map onto the same value without loss.

use std::collections::BTreeMap;
use std::fmt;
use std::sync::Arc;

use bytes::Bytes;

/// The broker-assigned identifier of a message: unique and increasing within a broker's store,
/// the key every store files the message under, and the sequence that orders a destination.
#[derive(Debug, Clone, Copy, PartialEq, Eq, PartialOrd, Ord, Hash, Default)]
pub struct MessageId(pub u64);

impl fmt::Display for MessageId {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        self.0.fmt(f)
    }
}

/// Whether a destination is a queue (competing consumers) or a topic (fan-out).
#[derive(Debug, Clone, Copy, PartialEq, Eq, PartialOrd, Ord, Hash)]
pub enum DestinationKind {
    Queue,
    Topic,
    TempQueue,
    TempTopic,
}

impl DestinationKind {
    /// True for queues and temporary queues.
    pub fn is_queue(self) -> bool {
        matches!(self, DestinationKind::Queue | DestinationKind::TempQueue)
    }
}

/// A destination name as ActiveMQ spells it (`ORDERS.EU`, levels separated by `.`), with its
/// kind. Cheap to clone: the name is shared.
#[derive(Debug, Clone, PartialEq, Eq, PartialOrd, Ord, Hash)]
pub struct Destination {
    pub kind: DestinationKind,
    pub name: Arc<str>,
}

impl Destination {
    pub fn queue(name: impl Into<Arc<str>>) -> Self {
        Destination { kind: DestinationKind::Queue, name: name.into() }
    }

    pub fn topic(name: impl Into<Arc<str>>) -> Self {
        Destination { kind: DestinationKind::Topic, name: name.into() }
    }

    /// Parses ActiveMQ's URL-like form: `queue://X`, `topic://X`, `temp-queue://X`,
    /// `temp-topic://X`. Returns `None` without a known prefix.
    pub fn parse_qualified(text: &str) -> Option<Self> {
        let (kind, name) = if let Some(name) = text.strip_prefix("queue://") {
            (DestinationKind::Queue, name)
        } else if let Some(name) = text.strip_prefix("topic://") {
            (DestinationKind::Topic, name)
        } else if let Some(name) = text.strip_prefix("temp-queue://") {
            (DestinationKind::TempQueue, name)
        } else if let Some(name) = text.strip_prefix("temp-topic://") {
            (DestinationKind::TempTopic, name)
        } else {
            return None;
        };
        if name.is_empty() {
            return None;
        }
        Some(Destination { kind, name: name.into() })
    }
}

impl fmt::Display for Destination {
    /// ActiveMQ's qualified form, the inverse of [`Destination::parse_qualified`].
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        let prefix = match self.kind {
            DestinationKind::Queue => "queue://",
            DestinationKind::Topic => "topic://",
            DestinationKind::TempQueue => "temp-queue://",
            DestinationKind::TempTopic => "temp-topic://",
        };
        write!(f, "{prefix}{}", self.name)
    }
}

/// JMS delivery mode.
#[derive(Debug, Clone, Copy, PartialEq, Eq, Hash, Default)]
pub enum DeliveryMode {
    NonPersistent,
    #[default]
    Persistent,
}

/// A typed property value, as JMS (and OpenWire's primitive map, and AMQP's application
/// properties) allow.
#[derive(Debug, Clone, PartialEq)]
pub enum PropertyValue {
    Bool(bool),
    Byte(i8),
    Short(i16),
    Int(i32),
    Long(i64),
    Float(f32),
    Double(f64),
    String(Arc<str>),
    Bytes(Bytes),
    /// JMS has no char property, but OpenWire maps and AMQP carry one.
    Char(char),
    Null,
}

impl PropertyValue {
    /// The textual form STOMP uses when a typed property goes out as a header.
    pub fn to_header_text(&self) -> String {
        match self {
            PropertyValue::Bool(v) => v.to_string(),
            PropertyValue::Byte(v) => v.to_string(),
            PropertyValue::Short(v) => v.to_string(),
            PropertyValue::Int(v) => v.to_string(),
            PropertyValue::Long(v) => v.to_string(),
            PropertyValue::Float(v) => v.to_string(),
            PropertyValue::Double(v) => v.to_string(),
            PropertyValue::String(v) => v.to_string(),
            PropertyValue::Bytes(v) => String::from_utf8_lossy(v).into_owned(),
            PropertyValue::Char(v) => v.to_string(),
            PropertyValue::Null => String::new(),
        }
    }
}

/// The kind of a message body, as JMS names the message classes.
#[derive(Debug, Clone, Copy, PartialEq, Eq, Hash, Default)]
pub enum BodyKind {
    /// `javax.jms.Message`: headers and properties only.
    #[default]
    None,
    /// `TextMessage`: the body is UTF-8 text.
    Text,
    /// `BytesMessage`: opaque bytes.
    Bytes,
    /// `MapMessage`: the body is a map, kept in its encoded form (the encoding is the
    /// producing protocol's; see [`Message::body_encoding`]).
    Map,
    /// `StreamMessage`: a sequence of typed values, kept encoded.
    Stream,
    /// `ObjectMessage`: a serialized Java object, opaque to the broker.
    Object,
}

/// The JMS headers that are not routing information.
#[derive(Debug, Clone, PartialEq, Default)]
pub struct JmsHeaders {
    pub correlation_id: Option<Arc<str>>,
    pub reply_to: Option<Destination>,
    /// JMSType.
    pub message_type: Option<Arc<str>>,
    /// 0 (lowest) to 9 (highest); 4 is the JMS default.
    pub priority: u8,
    /// Milliseconds since the Unix epoch after which the message expires; 0 means never.
    pub expiration: i64,
    /// Milliseconds since the Unix epoch at which the producer sent the message.
    pub timestamp: i64,
    pub delivery_mode: DeliveryMode,
    /// JMSXGroupID.
    pub group_id: Option<Arc<str>>,
    /// JMSXGroupSeq; 0 when absent.
    pub group_seq: i32,
}

/// The JMS default priority.
pub const DEFAULT_PRIORITY: u8 = 4;

/// One message as the broker holds it. Build it once when a producer's send is accepted, wrap
/// it in an `Arc`, and never mutate it again.
#[derive(Debug, Clone, PartialEq)]
pub struct Message {
    /// Broker-assigned; the store's key and the destination's sequence.
    pub id: MessageId,
    /// The protocol-level message id (`ID:<connection>:<session>:<producer>:<seq>` as ActiveMQ
    /// forms it), which clients see as JMSMessageID / STOMP `message-id`.
    pub message_id: Arc<str>,
    /// The destination the producer sent to; for a copy the broker moved elsewhere (a
    /// dead-letter queue), where the copy now is.
    pub destination: Destination,
    /// Where a moved copy came from (ActiveMQ's `originalDestination`, set when a message goes
    /// to a dead-letter queue); `None` for a message as its producer sent it.
    pub original_destination: Option<Destination>,
    pub headers: JmsHeaders,
    /// Application properties, ordered by name so that encodings are deterministic.
    pub properties: BTreeMap<Arc<str>, PropertyValue>,
    pub body_kind: BodyKind,
    /// For map and stream bodies: which protocol's encoding `body` holds (for example
    /// `"openwire"`), so that another protocol can transcode it. Empty for other kinds.
    pub body_encoding: Arc<str>,
    /// The body, in an allocation of its own size (never a slice pinning a read buffer).
    pub body: Bytes,
}

impl Message {
    /// A new message with default headers (persistent, priority 4, no expiry) and no body.
    pub fn new(id: MessageId, message_id: impl Into<Arc<str>>, destination: Destination) -> Self {
        Message {
            id,
            message_id: message_id.into(),
            destination,
            original_destination: None,
            headers: JmsHeaders { priority: DEFAULT_PRIORITY, ..JmsHeaders::default() },
            properties: BTreeMap::new(),
            body_kind: BodyKind::None,
            body_encoding: Arc::from(""),
            body: Bytes::new(),
        }
    }

    pub fn is_persistent(&self) -> bool {
        self.headers.delivery_mode == DeliveryMode::Persistent
    }

    /// The priority clamped to JMS's 0-9 range.
    pub fn priority(&self) -> u8 {
        self.headers.priority.min(9)
    }

    /// True when the message has an expiration and `now_millis` is past it.
    pub fn is_expired(&self, now_millis: i64) -> bool {
        self.headers.expiration > 0 && now_millis >= self.headers.expiration
    }

    /// The bytes this message holds on the heap, for memory accounting: the body plus an
    /// estimate of the headers and properties.
    pub fn memory_size(&self) -> usize {
        let properties: usize = self
            .properties
            .iter()
            .map(|(name, value)| {
                name.len()
                    + match value {
                        PropertyValue::String(s) => s.len(),
                        PropertyValue::Bytes(b) => b.len(),
                        _ => 8,
                    }
                    + 32
            })
            .sum();
        std::mem::size_of::<Message>() + self.message_id.len() + self.body.len() + properties
    }
}
