//! Record types: how stores encode messages, destinations, queue keys and subscriptions.
//!
//! The records are protobuf messages written by hand with `prost`'s derives (no `.proto` file,
//! no build script), so that every engine (journal, LSM, SQL) writes the same bytes and can
//! embed these records in records of its own. Decoding validates everything a [`Message`]
//! requires: a missing or unknown enum value, an out-of-range integer or a property without a
//! value is [`StoreError::Corrupt`], never a panic.
//!
//! Field tags are part of the on-disk format: never renumber them, only add new ones.
//! Enumerations start at 1, so that a field the writer never set (0) is caught as corrupt.
//!
//! ```
//! use store::record::{decode_message, encode_message};
//! use store::{Destination, Message, MessageId};
//!
//! let message = Message::new(MessageId(1), "ID:producer:1:1:1", Destination::queue("ORDERS"));
//! let bytes = encode_message(&message);
//! assert_eq!(decode_message(&bytes).expect("round trip"), message);
//! ```

use std::collections::BTreeMap;
use std::sync::Arc;

use bytes::Bytes;
use prost::Message as _;

use crate::contract::{QueueKey, SubscriptionInfo, SubscriptionKey};
use crate::error::StoreError;
use crate::message::{
    BodyKind, DeliveryMode, Destination, DestinationKind, JmsHeaders, Message, MessageId,
    PropertyValue,
};

/// A [`Message`] as stored.
#[derive(Clone, PartialEq, prost::Message)]
pub struct MessageRecord {
    #[prost(uint64, tag = "1")]
    pub id: u64,
    #[prost(string, tag = "2")]
    pub message_id: String,
    #[prost(message, optional, tag = "3")]
    pub destination: Option<DestinationRecord>,
    #[prost(message, optional, tag = "4")]
    pub headers: Option<HeadersRecord>,
    /// In name order, each name once.
    #[prost(message, repeated, tag = "5")]
    pub properties: Vec<PropertyRecord>,
    #[prost(enumeration = "BodyKindRecord", tag = "6")]
    pub body_kind: i32,
    #[prost(string, tag = "7")]
    pub body_encoding: String,
    #[prost(bytes = "bytes", tag = "8")]
    pub body: Bytes,
    /// Where a moved copy (a dead letter) came from; absent in records written before it
    /// existed, which read back as `None`.
    #[prost(message, optional, tag = "9")]
    pub original_destination: Option<DestinationRecord>,
}

/// A [`Destination`] as stored.
#[derive(Clone, PartialEq, prost::Message)]
pub struct DestinationRecord {
    #[prost(enumeration = "DestinationKindRecord", tag = "1")]
    pub kind: i32,
    #[prost(string, tag = "2")]
    pub name: String,
}

/// The [`JmsHeaders`] as stored.
#[derive(Clone, PartialEq, prost::Message)]
pub struct HeadersRecord {
    #[prost(string, optional, tag = "1")]
    pub correlation_id: Option<String>,
    #[prost(message, optional, tag = "2")]
    pub reply_to: Option<DestinationRecord>,
    #[prost(string, optional, tag = "3")]
    pub message_type: Option<String>,
    /// The raw priority (a `u8`; not clamped to 0-9, so that it round-trips exactly).
    #[prost(uint32, tag = "4")]
    pub priority: u32,
    #[prost(int64, tag = "5")]
    pub expiration: i64,
    #[prost(int64, tag = "6")]
    pub timestamp: i64,
    #[prost(enumeration = "DeliveryModeRecord", tag = "7")]
    pub delivery_mode: i32,
    #[prost(string, optional, tag = "8")]
    pub group_id: Option<String>,
    #[prost(int32, tag = "9")]
    pub group_seq: i32,
}

/// One typed property.
#[derive(Clone, PartialEq, prost::Message)]
pub struct PropertyRecord {
    #[prost(string, tag = "1")]
    pub name: String,
    #[prost(oneof = "PropertyValueRecord", tags = "2, 3, 4, 5, 6, 7, 8, 9, 10, 11, 12")]
    pub value: Option<PropertyValueRecord>,
}

/// A [`PropertyValue`] as stored; the narrow integer types are range-checked on decode.
#[derive(Clone, PartialEq, prost::Oneof)]
pub enum PropertyValueRecord {
    #[prost(bool, tag = "2")]
    Bool(bool),
    #[prost(sint32, tag = "3")]
    Byte(i32),
    #[prost(sint32, tag = "4")]
    Short(i32),
    #[prost(sint32, tag = "5")]
    Int(i32),
    #[prost(sint64, tag = "6")]
    Long(i64),
    #[prost(float, tag = "7")]
    Float(f32),
    #[prost(double, tag = "8")]
    Double(f64),
    #[prost(string, tag = "9")]
    String(String),
    #[prost(bytes = "bytes", tag = "10")]
    Bytes(Bytes),
    /// A Unicode scalar value.
    #[prost(uint32, tag = "11")]
    Char(u32),
    #[prost(message, tag = "12")]
    Null(NullRecord),
}

/// The value of a null property: nothing.
#[derive(Clone, Copy, PartialEq, prost::Message)]
pub struct NullRecord {}

/// A [`QueueKey`] as stored: a destination, plus a subscription for a durable subscription's
/// queue (client id and name both present, or both absent).
#[derive(Clone, PartialEq, prost::Message)]
pub struct QueueKeyRecord {
    #[prost(message, optional, tag = "1")]
    pub destination: Option<DestinationRecord>,
    #[prost(string, optional, tag = "2")]
    pub client_id: Option<String>,
    #[prost(string, optional, tag = "3")]
    pub subscription_name: Option<String>,
}

/// A [`SubscriptionInfo`] as stored.
#[derive(Clone, PartialEq, prost::Message)]
pub struct SubscriptionRecord {
    #[prost(string, tag = "1")]
    pub client_id: String,
    #[prost(string, tag = "2")]
    pub name: String,
    #[prost(message, optional, tag = "3")]
    pub topic: Option<DestinationRecord>,
    #[prost(string, optional, tag = "4")]
    pub selector: Option<String>,
    #[prost(bool, tag = "5")]
    pub no_local: bool,
}

#[derive(Clone, Copy, Debug, PartialEq, Eq, Hash, PartialOrd, Ord, prost::Enumeration)]
#[repr(i32)]
pub enum DestinationKindRecord {
    Unspecified = 0,
    Queue = 1,
    Topic = 2,
    TempQueue = 3,
    TempTopic = 4,
}

#[derive(Clone, Copy, Debug, PartialEq, Eq, Hash, PartialOrd, Ord, prost::Enumeration)]
#[repr(i32)]
pub enum DeliveryModeRecord {
    Unspecified = 0,
    NonPersistent = 1,
    Persistent = 2,
}

#[derive(Clone, Copy, Debug, PartialEq, Eq, Hash, PartialOrd, Ord, prost::Enumeration)]
#[repr(i32)]
pub enum BodyKindRecord {
    Unspecified = 0,
    None = 1,
    Text = 2,
    Bytes = 3,
    Map = 4,
    Stream = 5,
    Object = 6,
}

/// Encodes `message` as a [`MessageRecord`].
pub fn encode_message(message: &Message) -> Vec<u8> {
    MessageRecord::from(message).encode_to_vec()
}

/// Decodes a [`MessageRecord`]; anything malformed is [`StoreError::Corrupt`].
pub fn decode_message(bytes: &[u8]) -> Result<Message, StoreError> {
    let record = MessageRecord::decode(bytes).map_err(|e| corrupt("message record", e))?;
    Message::try_from(record)
}

/// Encodes `destination` as a [`DestinationRecord`].
pub fn encode_destination(destination: &Destination) -> Vec<u8> {
    DestinationRecord::from(destination).encode_to_vec()
}

/// Decodes a [`DestinationRecord`].
pub fn decode_destination(bytes: &[u8]) -> Result<Destination, StoreError> {
    let record = DestinationRecord::decode(bytes).map_err(|e| corrupt("destination record", e))?;
    Destination::try_from(record)
}

/// Encodes `queue` as a [`QueueKeyRecord`].
pub fn encode_queue_key(queue: &QueueKey) -> Vec<u8> {
    QueueKeyRecord::from(queue).encode_to_vec()
}

/// Decodes a [`QueueKeyRecord`].
pub fn decode_queue_key(bytes: &[u8]) -> Result<QueueKey, StoreError> {
    let record = QueueKeyRecord::decode(bytes).map_err(|e| corrupt("queue key record", e))?;
    QueueKey::try_from(record)
}

/// Encodes `subscription` as a [`SubscriptionRecord`].
pub fn encode_subscription(subscription: &SubscriptionInfo) -> Vec<u8> {
    SubscriptionRecord::from(subscription).encode_to_vec()
}

/// Decodes a [`SubscriptionRecord`].
pub fn decode_subscription(bytes: &[u8]) -> Result<SubscriptionInfo, StoreError> {
    let record =
        SubscriptionRecord::decode(bytes).map_err(|e| corrupt("subscription record", e))?;
    SubscriptionInfo::try_from(record)
}

fn corrupt(location: &str, reason: impl std::fmt::Display) -> StoreError {
    StoreError::Corrupt { location: location.to_owned(), reason: reason.to_string() }
}

fn required<T>(value: Option<T>, location: &str, field: &str) -> Result<T, StoreError> {
    value.ok_or_else(|| corrupt(location, format!("missing {field}")))
}

impl From<&Destination> for DestinationRecord {
    fn from(destination: &Destination) -> Self {
        let kind = match destination.kind {
            DestinationKind::Queue => DestinationKindRecord::Queue,
            DestinationKind::Topic => DestinationKindRecord::Topic,
            DestinationKind::TempQueue => DestinationKindRecord::TempQueue,
            DestinationKind::TempTopic => DestinationKindRecord::TempTopic,
        };
        DestinationRecord { kind: kind as i32, name: String::from(&*destination.name) }
    }
}

impl TryFrom<DestinationRecord> for Destination {
    type Error = StoreError;

    fn try_from(record: DestinationRecord) -> Result<Self, StoreError> {
        let kind = match DestinationKindRecord::try_from(record.kind) {
            Ok(DestinationKindRecord::Queue) => DestinationKind::Queue,
            Ok(DestinationKindRecord::Topic) => DestinationKind::Topic,
            Ok(DestinationKindRecord::TempQueue) => DestinationKind::TempQueue,
            Ok(DestinationKindRecord::TempTopic) => DestinationKind::TempTopic,
            Ok(DestinationKindRecord::Unspecified) | Err(_) => {
                return Err(corrupt(
                    "destination record",
                    format!("unknown destination kind {}", record.kind),
                ))
            }
        };
        Ok(Destination { kind, name: record.name.into() })
    }
}

impl From<&JmsHeaders> for HeadersRecord {
    fn from(headers: &JmsHeaders) -> Self {
        let delivery_mode = match headers.delivery_mode {
            DeliveryMode::NonPersistent => DeliveryModeRecord::NonPersistent,
            DeliveryMode::Persistent => DeliveryModeRecord::Persistent,
        };
        HeadersRecord {
            correlation_id: headers.correlation_id.as_deref().map(str::to_owned),
            reply_to: headers.reply_to.as_ref().map(DestinationRecord::from),
            message_type: headers.message_type.as_deref().map(str::to_owned),
            priority: u32::from(headers.priority),
            expiration: headers.expiration,
            timestamp: headers.timestamp,
            delivery_mode: delivery_mode as i32,
            group_id: headers.group_id.as_deref().map(str::to_owned),
            group_seq: headers.group_seq,
        }
    }
}

impl TryFrom<HeadersRecord> for JmsHeaders {
    type Error = StoreError;

    fn try_from(record: HeadersRecord) -> Result<Self, StoreError> {
        const LOCATION: &str = "message headers record";
        let delivery_mode = match DeliveryModeRecord::try_from(record.delivery_mode) {
            Ok(DeliveryModeRecord::NonPersistent) => DeliveryMode::NonPersistent,
            Ok(DeliveryModeRecord::Persistent) => DeliveryMode::Persistent,
            Ok(DeliveryModeRecord::Unspecified) | Err(_) => {
                return Err(corrupt(
                    LOCATION,
                    format!("unknown delivery mode {}", record.delivery_mode),
                ))
            }
        };
        let priority = u8::try_from(record.priority)
            .map_err(|_| corrupt(LOCATION, format!("priority {} out of range", record.priority)))?;
        Ok(JmsHeaders {
            correlation_id: record.correlation_id.map(Arc::from),
            reply_to: record.reply_to.map(Destination::try_from).transpose()?,
            message_type: record.message_type.map(Arc::from),
            priority,
            expiration: record.expiration,
            timestamp: record.timestamp,
            delivery_mode,
            group_id: record.group_id.map(Arc::from),
            group_seq: record.group_seq,
        })
    }
}

impl From<&PropertyValue> for PropertyValueRecord {
    fn from(value: &PropertyValue) -> Self {
        match value {
            PropertyValue::Bool(v) => PropertyValueRecord::Bool(*v),
            PropertyValue::Byte(v) => PropertyValueRecord::Byte(i32::from(*v)),
            PropertyValue::Short(v) => PropertyValueRecord::Short(i32::from(*v)),
            PropertyValue::Int(v) => PropertyValueRecord::Int(*v),
            PropertyValue::Long(v) => PropertyValueRecord::Long(*v),
            PropertyValue::Float(v) => PropertyValueRecord::Float(*v),
            PropertyValue::Double(v) => PropertyValueRecord::Double(*v),
            PropertyValue::String(v) => PropertyValueRecord::String(String::from(&**v)),
            PropertyValue::Bytes(v) => PropertyValueRecord::Bytes(v.clone()),
            PropertyValue::Char(v) => PropertyValueRecord::Char(u32::from(*v)),
            PropertyValue::Null => PropertyValueRecord::Null(NullRecord {}),
        }
    }
}

impl TryFrom<PropertyValueRecord> for PropertyValue {
    type Error = StoreError;

    fn try_from(record: PropertyValueRecord) -> Result<Self, StoreError> {
        const LOCATION: &str = "message property record";
        let out_of_range =
            |kind: &str, value: i32| corrupt(LOCATION, format!("{kind} {value} out of range"));
        Ok(match record {
            PropertyValueRecord::Bool(v) => PropertyValue::Bool(v),
            PropertyValueRecord::Byte(v) => {
                PropertyValue::Byte(i8::try_from(v).map_err(|_| out_of_range("byte", v))?)
            }
            PropertyValueRecord::Short(v) => {
                PropertyValue::Short(i16::try_from(v).map_err(|_| out_of_range("short", v))?)
            }
            PropertyValueRecord::Int(v) => PropertyValue::Int(v),
            PropertyValueRecord::Long(v) => PropertyValue::Long(v),
            PropertyValueRecord::Float(v) => PropertyValue::Float(v),
            PropertyValueRecord::Double(v) => PropertyValue::Double(v),
            PropertyValueRecord::String(v) => PropertyValue::String(v.into()),
            PropertyValueRecord::Bytes(v) => PropertyValue::Bytes(v),
            PropertyValueRecord::Char(v) => {
                PropertyValue::Char(char::from_u32(v).ok_or_else(|| {
                    corrupt(LOCATION, format!("{v:#x} is not a Unicode scalar value"))
                })?)
            }
            PropertyValueRecord::Null(NullRecord {}) => PropertyValue::Null,
        })
    }
}

impl From<&Message> for MessageRecord {
    fn from(message: &Message) -> Self {
        let body_kind = match message.body_kind {
            BodyKind::None => BodyKindRecord::None,
            BodyKind::Text => BodyKindRecord::Text,
            BodyKind::Bytes => BodyKindRecord::Bytes,
            BodyKind::Map => BodyKindRecord::Map,
            BodyKind::Stream => BodyKindRecord::Stream,
            BodyKind::Object => BodyKindRecord::Object,
        };
        MessageRecord {
            id: message.id.0,
            message_id: String::from(&*message.message_id),
            destination: Some(DestinationRecord::from(&message.destination)),
            headers: Some(HeadersRecord::from(&message.headers)),
            properties: message
                .properties
                .iter()
                .map(|(name, value)| PropertyRecord {
                    name: String::from(&**name),
                    value: Some(PropertyValueRecord::from(value)),
                })
                .collect(),
            body_kind: body_kind as i32,
            body_encoding: String::from(&*message.body_encoding),
            body: message.body.clone(),
            original_destination: message
                .original_destination
                .as_ref()
                .map(DestinationRecord::from),
        }
    }
}

impl TryFrom<MessageRecord> for Message {
    type Error = StoreError;

    fn try_from(record: MessageRecord) -> Result<Self, StoreError> {
        const LOCATION: &str = "message record";
        let body_kind = match BodyKindRecord::try_from(record.body_kind) {
            Ok(BodyKindRecord::None) => BodyKind::None,
            Ok(BodyKindRecord::Text) => BodyKind::Text,
            Ok(BodyKindRecord::Bytes) => BodyKind::Bytes,
            Ok(BodyKindRecord::Map) => BodyKind::Map,
            Ok(BodyKindRecord::Stream) => BodyKind::Stream,
            Ok(BodyKindRecord::Object) => BodyKind::Object,
            Ok(BodyKindRecord::Unspecified) | Err(_) => {
                return Err(corrupt(LOCATION, format!("unknown body kind {}", record.body_kind)))
            }
        };
        let mut properties = BTreeMap::new();
        for property in record.properties {
            let value = required(property.value, LOCATION, "property value")?;
            let name: Arc<str> = property.name.into();
            if properties.insert(Arc::clone(&name), PropertyValue::try_from(value)?).is_some() {
                return Err(corrupt(LOCATION, format!("property {name} appears twice")));
            }
        }
        Ok(Message {
            id: MessageId(record.id),
            message_id: record.message_id.into(),
            destination: Destination::try_from(required(
                record.destination,
                LOCATION,
                "destination",
            )?)?,
            original_destination: record
                .original_destination
                .map(Destination::try_from)
                .transpose()?,
            headers: JmsHeaders::try_from(required(record.headers, LOCATION, "headers")?)?,
            properties,
            body_kind,
            body_encoding: record.body_encoding.into(),
            body: record.body,
        })
    }
}

impl From<&QueueKey> for QueueKeyRecord {
    fn from(queue: &QueueKey) -> Self {
        QueueKeyRecord {
            destination: Some(DestinationRecord::from(&queue.destination)),
            client_id: queue.subscription.as_ref().map(|s| String::from(&*s.client_id)),
            subscription_name: queue.subscription.as_ref().map(|s| String::from(&*s.name)),
        }
    }
}

impl TryFrom<QueueKeyRecord> for QueueKey {
    type Error = StoreError;

    fn try_from(record: QueueKeyRecord) -> Result<Self, StoreError> {
        const LOCATION: &str = "queue key record";
        let destination =
            Destination::try_from(required(record.destination, LOCATION, "destination")?)?;
        let subscription = match (record.client_id, record.subscription_name) {
            (Some(client_id), Some(name)) => {
                Some(SubscriptionKey { client_id: client_id.into(), name: name.into() })
            }
            (None, None) => None,
            _ => {
                return Err(corrupt(
                    LOCATION,
                    "subscription client id without name, or name without client id",
                ))
            }
        };
        Ok(QueueKey { destination, subscription })
    }
}

impl From<&SubscriptionInfo> for SubscriptionRecord {
    fn from(info: &SubscriptionInfo) -> Self {
        SubscriptionRecord {
            client_id: String::from(&*info.key.client_id),
            name: String::from(&*info.key.name),
            topic: Some(DestinationRecord::from(&info.topic)),
            selector: info.selector.as_deref().map(str::to_owned),
            no_local: info.no_local,
        }
    }
}

impl TryFrom<SubscriptionRecord> for SubscriptionInfo {
    type Error = StoreError;

    fn try_from(record: SubscriptionRecord) -> Result<Self, StoreError> {
        let topic = required(record.topic, "subscription record", "topic")?;
        Ok(SubscriptionInfo {
            key: SubscriptionKey { client_id: record.client_id.into(), name: record.name.into() },
            topic: Destination::try_from(topic)?,
            selector: record.selector.map(Arc::from),
            no_local: record.no_local,
        })
    }
}

#[cfg(test)]
#[path = "record_tests.rs"]
mod tests;
