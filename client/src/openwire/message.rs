//! [`OutgoingMessage`], what a producer sends, and [`Message`], what a consumer receives.

use bytes::Bytes;
use protocol::openwire::{
    self as ow, Body, Destination, PrimitiveMap, PrimitiveValue, DEFAULT_MAX_INFLATED_SIZE,
};

use crate::ClientError;

/// JMS's default priority.
const DEFAULT_PRIORITY: i8 = 4;

/// A message to send: a text or bytes body, properties and JMS headers.
///
/// ```
/// use client::openwire::OutgoingMessage;
/// let order = OutgoingMessage::text("one pizza")
///     .property("quantity", 1)
///     .property("customer", "ada")
///     .persistent(false)
///     .correlation_id("req-7");
/// assert!(!order.is_persistent());
/// ```
#[derive(Debug, Clone, PartialEq)]
pub struct OutgoingMessage {
    pub(crate) body: OutgoingBody,
    pub(crate) properties: PrimitiveMap,
    pub(crate) persistent: bool,
    pub(crate) priority: i8,
    pub(crate) time_to_live_ms: i64,
    pub(crate) correlation_id: Option<String>,
    pub(crate) jms_type: Option<String>,
    pub(crate) reply_to: Option<Destination>,
    pub(crate) group_id: Option<String>,
}

#[derive(Debug, Clone, PartialEq)]
pub(crate) enum OutgoingBody {
    Text(String),
    Bytes(Bytes),
    Empty,
}

impl OutgoingMessage {
    fn with_body(body: OutgoingBody) -> OutgoingMessage {
        OutgoingMessage {
            body,
            properties: PrimitiveMap::new(),
            persistent: true,
            priority: DEFAULT_PRIORITY,
            time_to_live_ms: 0,
            correlation_id: None,
            jms_type: None,
            reply_to: None,
            group_id: None,
        }
    }

    /// A TextMessage; persistent, priority 4, no expiry (JMS's defaults).
    pub fn text(text: impl Into<String>) -> OutgoingMessage {
        OutgoingMessage::with_body(OutgoingBody::Text(text.into()))
    }

    /// A BytesMessage.
    pub fn bytes(bytes: impl Into<Bytes>) -> OutgoingMessage {
        OutgoingMessage::with_body(OutgoingBody::Bytes(bytes.into()))
    }

    /// A message without a body (`javax.jms.Message`).
    pub fn empty() -> OutgoingMessage {
        OutgoingMessage::with_body(OutgoingBody::Empty)
    }

    /// Adds a property: a string, `i32`, `i64` or `bool` (any [`PrimitiveValue`]).
    pub fn property(mut self, name: impl Into<String>, value: impl Into<PrimitiveValue>) -> Self {
        self.properties.insert(name, value);
        self
    }

    /// `JMSDeliveryMode`: persistent (the default) or not.
    pub fn persistent(mut self, persistent: bool) -> Self {
        self.persistent = persistent;
        self
    }

    /// Whether the message is persistent.
    pub fn is_persistent(&self) -> bool {
        self.persistent
    }

    /// `JMSPriority`, 0 to 9 (clamped).
    pub fn priority(mut self, priority: u8) -> Self {
        self.priority = priority.min(9) as i8;
        self
    }

    /// Expire this long after sending (0: never).
    pub fn time_to_live(mut self, ttl: std::time::Duration) -> Self {
        self.time_to_live_ms = i64::try_from(ttl.as_millis()).unwrap_or(i64::MAX);
        self
    }

    /// `JMSCorrelationID`.
    pub fn correlation_id(mut self, id: impl Into<String>) -> Self {
        self.correlation_id = Some(id.into());
        self
    }

    /// `JMSType`.
    pub fn jms_type(mut self, jms_type: impl Into<String>) -> Self {
        self.jms_type = Some(jms_type.into());
        self
    }

    /// `JMSReplyTo`.
    pub fn reply_to(mut self, destination: Destination) -> Self {
        self.reply_to = Some(destination);
        self
    }

    /// `JMSXGroupID`.
    pub fn group_id(mut self, group: impl Into<String>) -> Self {
        self.group_id = Some(group.into());
        self
    }

    /// The size ActiveMQ counts against a producer window (`Message.getSize()`): 1 KiB of
    /// headers plus the content and the properties.
    pub(crate) fn window_size(message: &ow::Message) -> usize {
        1024 + message.content.as_ref().map_or(0, Bytes::len)
            + message.marshalled_properties.as_ref().map_or(0, Bytes::len)
    }

    /// The wire message, without ids (the producer adds them).
    pub(crate) fn to_wire(&self, now_ms: i64) -> Result<ow::Message, ClientError> {
        let mut m = match &self.body {
            OutgoingBody::Text(text) => {
                let mut m = ow::Message::new(ow::MessageType::Text);
                m.set_text(Some(text), false)?;
                m
            }
            OutgoingBody::Bytes(bytes) => {
                let mut m = ow::Message::new(ow::MessageType::Bytes);
                m.set_bytes(bytes.clone(), false)?;
                m
            }
            OutgoingBody::Empty => ow::Message::new(ow::MessageType::Message),
        };
        m.set_properties(&self.properties)?;
        m.persistent = self.persistent;
        m.priority = self.priority;
        m.timestamp = now_ms;
        m.expiration =
            if self.time_to_live_ms > 0 { now_ms.saturating_add(self.time_to_live_ms) } else { 0 };
        m.correlation_id.clone_from(&self.correlation_id);
        m.jms_type.clone_from(&self.jms_type);
        m.reply_to.clone_from(&self.reply_to);
        m.group_id.clone_from(&self.group_id);
        Ok(m)
    }
}

/// A message delivered to a [`crate::openwire::Consumer`].
#[derive(Debug, Clone, PartialEq)]
pub struct Message {
    pub(crate) wire: ow::Message,
    pub(crate) consumer_id: ow::ConsumerId,
    /// Times delivered before, as the dispatch said (raised locally after a rollback).
    pub(crate) redelivery_counter: i32,
}

impl Message {
    /// `JMSDestination`: where the message was sent.
    pub fn destination(&self) -> Option<&Destination> {
        self.wire.destination.as_ref()
    }

    /// `JMSMessageID` in ActiveMQ's text form (`ID:<connection>:<session>:<producer>:<n>`).
    pub fn message_id(&self) -> Option<String> {
        let id = self.wire.message_id.as_ref()?;
        if let Some(text) = &id.text_view {
            return Some(text.clone());
        }
        let p = id.producer_id.as_ref()?;
        Some(format!(
            "{}:{}:{}:{}",
            p.connection_id, p.session_id, p.value, id.producer_sequence_id
        ))
    }

    /// The decoded body (text, bytes, map, stream, object, or empty).
    pub fn body(&self) -> Result<Body, ClientError> {
        Ok(self.wire.body(DEFAULT_MAX_INFLATED_SIZE)?)
    }

    /// A TextMessage's text; `None` for other types or a null text.
    pub fn text(&self) -> Option<String> {
        match self.body() {
            Ok(Body::Text(text)) => text,
            _ => None,
        }
    }

    /// The body's bytes: a BytesMessage's bytes, a TextMessage's text as UTF-8, empty
    /// otherwise.
    pub fn body_bytes(&self) -> Bytes {
        match self.body() {
            Ok(Body::Bytes(bytes) | Body::Object(bytes)) => bytes,
            Ok(Body::Text(Some(text))) => Bytes::from(text.into_bytes()),
            _ => Bytes::new(),
        }
    }

    /// The properties (empty when there are none or they cannot be decoded).
    pub fn properties(&self) -> PrimitiveMap {
        self.wire.properties().unwrap_or_default()
    }

    /// One property.
    pub fn property(&self, name: &str) -> Option<PrimitiveValue> {
        self.properties().get(name).cloned()
    }

    /// `JMSRedelivered`: the broker (or a rollback) delivered it before.
    pub fn redelivered(&self) -> bool {
        self.redelivery_counter > 0
    }

    /// How many times it was delivered before.
    pub fn redelivery_counter(&self) -> i32 {
        self.redelivery_counter
    }

    /// `JMSCorrelationID`.
    pub fn correlation_id(&self) -> Option<&str> {
        self.wire.correlation_id.as_deref()
    }

    /// `JMSType`.
    pub fn jms_type(&self) -> Option<&str> {
        self.wire.jms_type.as_deref()
    }

    /// `JMSReplyTo`.
    pub fn reply_to(&self) -> Option<&Destination> {
        self.wire.reply_to.as_ref()
    }

    /// `JMSDeliveryMode` is persistent.
    pub fn persistent(&self) -> bool {
        self.wire.persistent
    }

    /// `JMSPriority`.
    pub fn priority(&self) -> i8 {
        self.wire.priority
    }

    /// `JMSTimestamp`, milliseconds since the epoch.
    pub fn timestamp(&self) -> i64 {
        self.wire.timestamp
    }

    /// The message as it came over the wire.
    pub fn wire(&self) -> &ow::Message {
        &self.wire
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn outgoing_text_carries_headers_and_properties() {
        let message = OutgoingMessage::text("héllo")
            .property("i", 7)
            .property("l", 8i64)
            .property("s", "x")
            .priority(12)
            .correlation_id("c")
            .jms_type("t")
            .time_to_live(std::time::Duration::from_millis(500));
        let wire = message.to_wire(1000).expect("encodes");
        assert_eq!(wire.body_type, ow::MessageType::Text);
        assert_eq!(wire.text().expect("text").as_deref(), Some("héllo"));
        assert_eq!((wire.priority, wire.expiration, wire.timestamp), (9, 1500, 1000));
        let properties = wire.properties().expect("properties");
        assert_eq!(properties.get("i"), Some(&PrimitiveValue::Int(7)));
        assert_eq!(properties.get("l"), Some(&PrimitiveValue::Long(8)));
        assert_eq!(properties.get("s").and_then(PrimitiveValue::as_str), Some("x"));
        assert!(OutgoingMessage::window_size(&wire) > 1024);

        let received =
            Message { wire, consumer_id: ow::ConsumerId::default(), redelivery_counter: 0 };
        assert_eq!(received.text().as_deref(), Some("héllo"));
        assert_eq!(&received.body_bytes()[..], "héllo".as_bytes());
        assert_eq!((received.correlation_id(), received.jms_type()), (Some("c"), Some("t")));
        assert!(!received.redelivered());
    }

    #[test]
    fn message_ids_read_like_activemq() {
        let mut wire = ow::Message::new(ow::MessageType::Bytes);
        wire.message_id = Some(ow::MessageId {
            producer_id: Some(ow::ProducerId {
                connection_id: "ID:h-1-2-3:1".into(),
                value: 4,
                session_id: 2,
            }),
            producer_sequence_id: 9,
            ..Default::default()
        });
        let received =
            Message { wire, consumer_id: ow::ConsumerId::default(), redelivery_counter: 1 };
        assert_eq!(received.message_id().as_deref(), Some("ID:h-1-2-3:1:2:4:9"));
        assert!(received.redelivered());
        assert!(received.body_bytes().is_empty());
    }
}
