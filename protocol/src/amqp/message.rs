//! [`Message`]: the bare message and its annotations (the spec, part 3.2), as carried in
//! the payload of a delivery's transfers.
//!
//! A message is a sequence of described sections in a fixed order: header,
//! delivery-annotations, message-annotations, properties, application-properties, the body
//! (one or more data sections, one or more amqp-sequence sections, or one amqp-value), and
//! a footer. Each is optional. Annotations keep every key the peer sent, known or not, so
//! that a message passes through the broker unchanged.

use bytes::{Bytes, BytesMut};

use super::composite::{describe_descriptor, Annotations, Composite, FieldReader, FieldWriter};
use super::error::{short_debug, WireError};
use super::types::{encode_value, Decoder, Descriptor, FromValue, Symbol, Value};

/// A message: its sections, each as the peer sent it.
#[derive(Debug, Clone, PartialEq, Default)]
pub struct Message {
    /// Delivery details: durability, priority, time to live.
    pub header: Option<Header>,
    /// Annotations for the next hop only.
    pub delivery_annotations: Option<Annotations>,
    /// Annotations that travel with the message (`x-opt-jms-msg-type`, ...).
    pub message_annotations: Option<Annotations>,
    /// The standard properties: ids, addresses, subject, content type, times, group.
    pub properties: Option<Properties>,
    /// The application's own properties (what JMS calls message properties).
    pub application_properties: Option<ApplicationProperties>,
    /// The body.
    pub body: Body,
    /// Annotations after the body (checksums, signatures).
    pub footer: Option<Annotations>,
}

/// The body of a message.
#[derive(Debug, Clone, PartialEq, Default)]
pub enum Body {
    /// No body section.
    #[default]
    Empty,
    /// One or more `data` sections: opaque bytes.
    Data(Vec<Bytes>),
    /// One or more `amqp-sequence` sections: lists of values.
    Sequence(Vec<Vec<Value>>),
    /// One `amqp-value` section: a single value (a string for a JMS text message).
    Value(Value),
}

/// The section descriptors (domain 0, the spec's own) and their places in a message.
mod section {
    pub const HEADER: u64 = 0x70;
    pub const DELIVERY_ANNOTATIONS: u64 = 0x71;
    pub const MESSAGE_ANNOTATIONS: u64 = 0x72;
    pub const PROPERTIES: u64 = 0x73;
    pub const APPLICATION_PROPERTIES: u64 = 0x74;
    pub const DATA: u64 = 0x75;
    pub const AMQP_SEQUENCE: u64 = 0x76;
    pub const AMQP_VALUE: u64 = 0x77;
    pub const FOOTER: u64 = 0x78;

    /// The symbolic descriptors, by code.
    pub const SYMBOLS: [(&str, u64); 9] = [
        ("amqp:header:list", HEADER),
        ("amqp:delivery-annotations:map", DELIVERY_ANNOTATIONS),
        ("amqp:message-annotations:map", MESSAGE_ANNOTATIONS),
        ("amqp:properties:list", PROPERTIES),
        ("amqp:application-properties:map", APPLICATION_PROPERTIES),
        ("amqp:data:binary", DATA),
        ("amqp:amqp-sequence:list", AMQP_SEQUENCE),
        ("amqp:amqp-value:*", AMQP_VALUE),
        ("amqp:footer:map", FOOTER),
    ];
}

impl Message {
    /// A message whose body is one `data` section.
    pub fn with_data(data: impl Into<Bytes>) -> Message {
        Message { body: Body::Data(vec![data.into()]), ..Message::default() }
    }

    /// A message whose body is one `amqp-value` section.
    pub fn with_value(value: impl Into<Value>) -> Message {
        Message { body: Body::Value(value.into()), ..Message::default() }
    }

    /// Decodes a message from a delivery's whole payload (all its transfers' payloads
    /// concatenated), allowing values nested `max_depth` levels deep.
    pub fn decode(payload: &Bytes, max_depth: usize) -> Result<Message, WireError> {
        let mut decoder = Decoder::new(payload, max_depth);
        let mut message = Message::default();
        let mut last_section = 0;
        while decoder.remaining() > 0 {
            let Value::Described(described) = decoder.read_value()? else {
                return Err(WireError::UnexpectedValue {
                    expected: "a message section",
                    found: "a value without a descriptor".into(),
                });
            };
            let code =
                section_code(&described.descriptor).ok_or_else(|| WireError::UnexpectedValue {
                    expected: "a message section",
                    found: describe_descriptor(&described.descriptor),
                })?;
            let repeatable = matches!(code, section::DATA | section::AMQP_SEQUENCE);
            if code < last_section || (code == last_section && !repeatable) {
                return Err(WireError::UnexpectedValue {
                    expected: "message sections in the spec's order, each once",
                    found: describe_descriptor(&described.descriptor),
                });
            }
            last_section = code;
            message.read_section(code, described.value)?;
        }
        Ok(message)
    }

    fn read_section(&mut self, code: u64, value: Value) -> Result<(), WireError> {
        let annotations = |value: Value, name: &'static str| {
            Annotations::from_value(value).map_err(|found| WireError::UnexpectedValue {
                expected: name,
                found: short_debug(&found),
            })
        };
        match code {
            section::HEADER => self.header = Some(Header::from_described_list(value)?),
            section::DELIVERY_ANNOTATIONS => {
                self.delivery_annotations = Some(annotations(value, "delivery-annotations map")?)
            }
            section::MESSAGE_ANNOTATIONS => {
                self.message_annotations = Some(annotations(value, "message-annotations map")?)
            }
            section::PROPERTIES => self.properties = Some(Properties::from_described_list(value)?),
            section::APPLICATION_PROPERTIES => {
                let properties = ApplicationProperties::from_value(value).map_err(|found| {
                    WireError::UnexpectedValue {
                        expected: "application-properties map with string keys",
                        found: short_debug(&found),
                    }
                })?;
                self.application_properties = Some(properties);
            }
            section::DATA => {
                let Value::Binary(bytes) = value else {
                    return Err(section_type_error("data section holding a binary", &value));
                };
                match &mut self.body {
                    Body::Empty => self.body = Body::Data(vec![bytes]),
                    Body::Data(sections) => sections.push(bytes),
                    _ => return Err(mixed_body()),
                }
            }
            section::AMQP_SEQUENCE => {
                let Value::List(list) = value else {
                    return Err(section_type_error("amqp-sequence section holding a list", &value));
                };
                match &mut self.body {
                    Body::Empty => self.body = Body::Sequence(vec![list]),
                    Body::Sequence(sections) => sections.push(list),
                    _ => return Err(mixed_body()),
                }
            }
            section::AMQP_VALUE => match self.body {
                Body::Empty => self.body = Body::Value(value),
                _ => return Err(mixed_body()),
            },
            _ => {
                let footer = annotations(value, "footer map")?;
                self.footer = Some(footer);
            }
        }
        Ok(())
    }

    /// Appends the message's sections to `dst` (the payload of its transfers).
    pub fn encode(&self, dst: &mut BytesMut) -> Result<(), WireError> {
        let described = |code: u64, value: Value| Value::described(Descriptor::Code(code), value);
        let mut sections = Vec::new();
        if let Some(header) = &self.header {
            sections.push(header.to_value());
        }
        if let Some(annotations) = &self.delivery_annotations {
            sections.push(described(section::DELIVERY_ANNOTATIONS, annotations.clone().into()));
        }
        if let Some(annotations) = &self.message_annotations {
            sections.push(described(section::MESSAGE_ANNOTATIONS, annotations.clone().into()));
        }
        if let Some(properties) = &self.properties {
            sections.push(properties.to_value());
        }
        if let Some(properties) = &self.application_properties {
            sections.push(described(section::APPLICATION_PROPERTIES, properties.clone().into()));
        }
        match &self.body {
            Body::Empty => {}
            Body::Data(data) => sections.extend(
                data.iter().map(|bytes| described(section::DATA, Value::Binary(bytes.clone()))),
            ),
            Body::Sequence(lists) => sections.extend(
                lists
                    .iter()
                    .map(|list| described(section::AMQP_SEQUENCE, Value::List(list.clone()))),
            ),
            Body::Value(value) => sections.push(described(section::AMQP_VALUE, value.clone())),
        }
        if let Some(footer) = &self.footer {
            sections.push(described(section::FOOTER, footer.clone().into()));
        }
        sections.iter().try_for_each(|section| encode_value(section, dst))
    }

    /// The encoded message in a buffer of its own.
    pub fn to_bytes(&self) -> Result<Bytes, WireError> {
        let mut dst = BytesMut::new();
        self.encode(&mut dst)?;
        Ok(dst.freeze())
    }
}

fn section_code(descriptor: &Descriptor) -> Option<u64> {
    match descriptor {
        Descriptor::Code(code @ section::HEADER..=section::FOOTER) => Some(*code),
        Descriptor::Code(_) => None,
        Descriptor::Symbol(symbol) => {
            section::SYMBOLS.iter().find(|(name, _)| symbol.as_str() == *name).map(|(_, c)| *c)
        }
    }
}

fn section_type_error(expected: &'static str, found: &Value) -> WireError {
    WireError::UnexpectedValue { expected, found: found.type_name().to_owned() }
}

fn mixed_body() -> WireError {
    WireError::UnexpectedValue {
        expected: "one kind of body section (data, amqp-sequence or amqp-value)",
        found: "a mix of body kinds".into(),
    }
}

/// The `header` section: how the broker should treat the message.
#[derive(Debug, Clone, PartialEq, Default)]
pub struct Header {
    /// Persistent (default false).
    pub durable: Option<bool>,
    /// 0 (lowest) to 9 and beyond (default 4).
    pub priority: Option<u8>,
    /// Time to live in milliseconds.
    pub ttl: Option<u32>,
    /// No earlier acquirer has seen it (default false).
    pub first_acquirer: Option<bool>,
    /// Failed delivery attempts so far (default 0).
    pub delivery_count: Option<u32>,
}

impl Header {
    /// `durable` with its default.
    pub fn durable(&self) -> bool {
        self.durable.unwrap_or(false)
    }

    /// `priority` with its default.
    pub fn priority(&self) -> u8 {
        self.priority.unwrap_or(4)
    }

    /// `delivery-count` with its default.
    pub fn delivery_count(&self) -> u32 {
        self.delivery_count.unwrap_or(0)
    }
}

impl Composite for Header {
    const NAME: &'static str = "header";
    const CODE: u64 = section::HEADER;
    const SYMBOL: &'static str = "amqp:header:list";

    fn read_fields(f: &mut FieldReader) -> Result<Self, WireError> {
        Ok(Header {
            durable: f.optional("durable")?,
            priority: f.optional("priority")?,
            ttl: f.optional("ttl")?,
            first_acquirer: f.optional("first-acquirer")?,
            delivery_count: f.optional("delivery-count")?,
        })
    }

    fn write_fields(&self, f: &mut FieldWriter) {
        f.optional(&self.durable)
            .optional(&self.priority)
            .optional(&self.ttl)
            .optional(&self.first_acquirer)
            .optional(&self.delivery_count);
    }
}

/// A message id or correlation id: the spec allows four types.
#[derive(Debug, Clone, PartialEq, Eq, Hash)]
pub enum MessageId {
    /// `message-id-ulong`.
    Ulong(u64),
    /// `message-id-uuid`.
    Uuid([u8; 16]),
    /// `message-id-binary`.
    Binary(Bytes),
    /// `message-id-string`.
    String(String),
}

impl FromValue for MessageId {
    const EXPECTED: &'static str = "a ulong, uuid, binary or string";
    fn from_value(value: Value) -> Result<Self, Value> {
        match value {
            Value::Ulong(id) => Ok(MessageId::Ulong(id)),
            Value::Uuid(id) => Ok(MessageId::Uuid(id)),
            Value::Binary(id) => Ok(MessageId::Binary(id)),
            Value::String(id) => Ok(MessageId::String(id)),
            other => Err(other),
        }
    }
}

impl From<MessageId> for Value {
    fn from(id: MessageId) -> Value {
        match id {
            MessageId::Ulong(id) => Value::Ulong(id),
            MessageId::Uuid(id) => Value::Uuid(id),
            MessageId::Binary(id) => Value::Binary(id),
            MessageId::String(id) => Value::String(id),
        }
    }
}

impl From<&str> for MessageId {
    fn from(id: &str) -> MessageId {
        MessageId::String(id.to_owned())
    }
}

/// The `properties` section: the immutable, standard properties of the bare message.
#[derive(Debug, Clone, PartialEq, Default)]
pub struct Properties {
    /// The application's id for the message.
    pub message_id: Option<MessageId>,
    /// The authenticated creator.
    pub user_id: Option<Bytes>,
    /// The destination address.
    pub to: Option<String>,
    /// A summary (JMS type).
    pub subject: Option<String>,
    /// Where replies go.
    pub reply_to: Option<String>,
    /// The id of the message this one answers.
    pub correlation_id: Option<MessageId>,
    /// MIME type of a data body.
    pub content_type: Option<Symbol>,
    /// Content encoding of a data body (`gzip`).
    pub content_encoding: Option<Symbol>,
    /// When the message expires (milliseconds since the epoch).
    pub absolute_expiry_time: Option<i64>,
    /// When the message was created (milliseconds since the epoch).
    pub creation_time: Option<i64>,
    /// The group it belongs to.
    pub group_id: Option<String>,
    /// Its place in the group.
    pub group_sequence: Option<u32>,
    /// The group replies belong to.
    pub reply_to_group_id: Option<String>,
}

/// A timestamp field (a distinct type on the wire, an `i64` here).
fn read_timestamp(value: Value) -> Result<i64, WireError> {
    match value {
        Value::Timestamp(millis) => Ok(millis),
        other => {
            Err(WireError::UnexpectedValue { expected: "timestamp", found: short_debug(&other) })
        }
    }
}

impl Composite for Properties {
    const NAME: &'static str = "properties";
    const CODE: u64 = section::PROPERTIES;
    const SYMBOL: &'static str = "amqp:properties:list";

    fn read_fields(f: &mut FieldReader) -> Result<Self, WireError> {
        Ok(Properties {
            message_id: f.optional("message-id")?,
            user_id: f.optional("user-id")?,
            to: f.optional("to")?,
            subject: f.optional("subject")?,
            reply_to: f.optional("reply-to")?,
            correlation_id: f.optional("correlation-id")?,
            content_type: f.optional("content-type")?,
            content_encoding: f.optional("content-encoding")?,
            absolute_expiry_time: f.optional_with("absolute-expiry-time", read_timestamp)?,
            creation_time: f.optional_with("creation-time", read_timestamp)?,
            group_id: f.optional("group-id")?,
            group_sequence: f.optional("group-sequence")?,
            reply_to_group_id: f.optional("reply-to-group-id")?,
        })
    }

    fn write_fields(&self, f: &mut FieldWriter) {
        f.optional(&self.message_id)
            .optional(&self.user_id)
            .optional(&self.to)
            .optional(&self.subject)
            .optional(&self.reply_to)
            .optional(&self.correlation_id)
            .optional(&self.content_type)
            .optional(&self.content_encoding)
            .field(self.absolute_expiry_time.map_or(Value::Null, Value::Timestamp))
            .field(self.creation_time.map_or(Value::Null, Value::Timestamp))
            .optional(&self.group_id)
            .optional(&self.group_sequence)
            .optional(&self.reply_to_group_id);
    }
}

/// The `application-properties` section: string keys, simple values, in wire order.
#[derive(Debug, Clone, PartialEq, Default)]
pub struct ApplicationProperties(pub Vec<(String, Value)>);

impl ApplicationProperties {
    /// The value under `key`.
    pub fn get(&self, key: &str) -> Option<&Value> {
        self.0.iter().find(|(k, _)| k == key).map(|(_, v)| v)
    }

    /// Adds a property (keeping wire order).
    pub fn insert(&mut self, key: impl Into<String>, value: impl Into<Value>) {
        self.0.push((key.into(), value.into()));
    }
}

impl FromValue for ApplicationProperties {
    const EXPECTED: &'static str = "a map with string keys";
    fn from_value(value: Value) -> Result<Self, Value> {
        let Value::Map(pairs) = value else { return Err(value) };
        if !pairs.iter().all(|(key, _)| matches!(key, Value::String(_))) {
            return Err(Value::Map(pairs));
        }
        let properties = pairs
            .into_iter()
            .filter_map(|(key, value)| match key {
                Value::String(key) => Some((key, value)),
                _ => None,
            })
            .collect();
        Ok(ApplicationProperties(properties))
    }
}

impl From<ApplicationProperties> for Value {
    fn from(properties: ApplicationProperties) -> Value {
        Value::Map(properties.0.into_iter().map(|(k, v)| (Value::String(k), v)).collect())
    }
}
