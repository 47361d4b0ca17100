//! MQTT 5.0 properties (spec 2.2.2): [`Property`], [`PropertyId`] and [`Properties`], the
//! list a packet carries after its variable header.
//!
//! A packet's properties are kept as a list in wire order, not as a struct of fields: the
//! codec then re-encodes a packet to the bytes it came from, user properties keep their
//! order and repeat freely, and a PUBLISH may carry several subscription identifiers.
//! [`Properties`] has an accessor for each property for the adapter's convenience.
//!
//! Which packet may carry which property, and which may repeat, is the spec's table 2-4
//! (section 2.2.2.2), kept in [`PropertyId::places`]. The spec calls an identifier that is
//! not valid for its packet a Malformed Packet (2.2.2.2) and a property given twice where
//! only one is allowed a Protocol Error (each property's section); the [`super::WireError`]
//! variants follow it.

use std::fmt;

use bytes::{BufMut, Bytes, BytesMut};

use super::error::WireError;
use super::wire::{self, Reader};

/// The data type of a property's value (spec 1.5).
#[derive(Debug, Clone, Copy, PartialEq, Eq, Hash)]
pub enum PropertyType {
    /// One byte.
    Byte,
    /// A big-endian 16-bit integer.
    TwoByteInteger,
    /// A big-endian 32-bit integer.
    FourByteInteger,
    /// A variable byte integer: 1 to 4 bytes, 7 bits each, up to 268,435,455.
    VariableByteInteger,
    /// A UTF-8 string with a two-byte length.
    Utf8String,
    /// Binary data with a two-byte length.
    BinaryData,
    /// A name and a value, each a UTF-8 string.
    Utf8StringPair,
}

/// Where properties appear: each packet that has them, and the will of a CONNECT.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub(crate) enum Place {
    Connect,
    Will,
    Connack,
    Publish,
    Puback,
    Pubrec,
    Pubrel,
    Pubcomp,
    Subscribe,
    Suback,
    Unsubscribe,
    Unsuback,
    Disconnect,
    Auth,
}

impl Place {
    /// The name errors use.
    pub(crate) fn name(self) -> &'static str {
        match self {
            Place::Connect => "CONNECT",
            Place::Will => "will properties",
            Place::Connack => "CONNACK",
            Place::Publish => "PUBLISH",
            Place::Puback => "PUBACK",
            Place::Pubrec => "PUBREC",
            Place::Pubrel => "PUBREL",
            Place::Pubcomp => "PUBCOMP",
            Place::Subscribe => "SUBSCRIBE",
            Place::Suback => "SUBACK",
            Place::Unsubscribe => "UNSUBSCRIBE",
            Place::Unsuback => "UNSUBACK",
            Place::Disconnect => "DISCONNECT",
            Place::Auth => "AUTH",
        }
    }

    fn bit(self) -> u16 {
        1 << self as u16
    }
}

/// A property's value together with its identifier.
#[derive(Debug, Clone, PartialEq, Eq, Hash)]
#[allow(missing_docs)] // Each variant is the property of its name; see PropertyId.
pub enum Property {
    PayloadFormatIndicator(u8),
    MessageExpiryInterval(u32),
    ContentType(String),
    ResponseTopic(String),
    CorrelationData(Bytes),
    SubscriptionIdentifier(u32),
    SessionExpiryInterval(u32),
    AssignedClientIdentifier(String),
    ServerKeepAlive(u16),
    AuthenticationMethod(String),
    AuthenticationData(Bytes),
    RequestProblemInformation(u8),
    WillDelayInterval(u32),
    RequestResponseInformation(u8),
    ResponseInformation(String),
    ServerReference(String),
    ReasonString(String),
    ReceiveMaximum(u16),
    TopicAliasMaximum(u16),
    TopicAlias(u16),
    MaximumQos(u8),
    RetainAvailable(u8),
    /// A name and value pair: repeatable in every packet with properties, order kept.
    UserProperty(String, String),
    MaximumPacketSize(u32),
    WildcardSubscriptionAvailable(u8),
    SubscriptionIdentifierAvailable(u8),
    SharedSubscriptionAvailable(u8),
}

/// A property identifier, with the spec's value as its discriminant (table 2-4).
#[derive(Debug, Clone, Copy, PartialEq, Eq, Hash, PartialOrd, Ord)]
#[repr(u8)]
#[allow(missing_docs)] // The spec's names; `property_type` and `places` say the rest.
pub enum PropertyId {
    PayloadFormatIndicator = 0x01,
    MessageExpiryInterval = 0x02,
    ContentType = 0x03,
    ResponseTopic = 0x08,
    CorrelationData = 0x09,
    SubscriptionIdentifier = 0x0B,
    SessionExpiryInterval = 0x11,
    AssignedClientIdentifier = 0x12,
    ServerKeepAlive = 0x13,
    AuthenticationMethod = 0x15,
    AuthenticationData = 0x16,
    RequestProblemInformation = 0x17,
    WillDelayInterval = 0x18,
    RequestResponseInformation = 0x19,
    ResponseInformation = 0x1A,
    ServerReference = 0x1C,
    ReasonString = 0x1F,
    ReceiveMaximum = 0x21,
    TopicAliasMaximum = 0x22,
    TopicAlias = 0x23,
    MaximumQos = 0x24,
    RetainAvailable = 0x25,
    UserProperty = 0x26,
    MaximumPacketSize = 0x27,
    WildcardSubscriptionAvailable = 0x28,
    SubscriptionIdentifierAvailable = 0x29,
    SharedSubscriptionAvailable = 0x2A,
}

impl PropertyId {
    /// Every identifier, in the order of the spec's table.
    pub const ALL: [PropertyId; 27] = [
        PropertyId::PayloadFormatIndicator,
        PropertyId::MessageExpiryInterval,
        PropertyId::ContentType,
        PropertyId::ResponseTopic,
        PropertyId::CorrelationData,
        PropertyId::SubscriptionIdentifier,
        PropertyId::SessionExpiryInterval,
        PropertyId::AssignedClientIdentifier,
        PropertyId::ServerKeepAlive,
        PropertyId::AuthenticationMethod,
        PropertyId::AuthenticationData,
        PropertyId::RequestProblemInformation,
        PropertyId::WillDelayInterval,
        PropertyId::RequestResponseInformation,
        PropertyId::ResponseInformation,
        PropertyId::ServerReference,
        PropertyId::ReasonString,
        PropertyId::ReceiveMaximum,
        PropertyId::TopicAliasMaximum,
        PropertyId::TopicAlias,
        PropertyId::MaximumQos,
        PropertyId::RetainAvailable,
        PropertyId::UserProperty,
        PropertyId::MaximumPacketSize,
        PropertyId::WildcardSubscriptionAvailable,
        PropertyId::SubscriptionIdentifierAvailable,
        PropertyId::SharedSubscriptionAvailable,
    ];

    /// The identifier of a value, if the spec defines it.
    pub fn from_u32(value: u32) -> Option<PropertyId> {
        PropertyId::ALL.into_iter().find(|id| u32::from(id.as_u8()) == value)
    }

    /// The identifier on the wire.
    pub fn as_u8(self) -> u8 {
        self as u8
    }

    /// The type of the property's value.
    pub fn property_type(self) -> PropertyType {
        use PropertyId::*;
        match self {
            PayloadFormatIndicator
            | RequestProblemInformation
            | RequestResponseInformation
            | MaximumQos
            | RetainAvailable
            | WildcardSubscriptionAvailable
            | SubscriptionIdentifierAvailable
            | SharedSubscriptionAvailable => PropertyType::Byte,
            ServerKeepAlive | ReceiveMaximum | TopicAliasMaximum | TopicAlias => {
                PropertyType::TwoByteInteger
            }
            MessageExpiryInterval
            | SessionExpiryInterval
            | WillDelayInterval
            | MaximumPacketSize => PropertyType::FourByteInteger,
            SubscriptionIdentifier => PropertyType::VariableByteInteger,
            ContentType
            | ResponseTopic
            | AssignedClientIdentifier
            | AuthenticationMethod
            | ResponseInformation
            | ServerReference
            | ReasonString => PropertyType::Utf8String,
            CorrelationData | AuthenticationData => PropertyType::BinaryData,
            UserProperty => PropertyType::Utf8StringPair,
        }
    }

    /// The places (packets, and CONNECT's will) that may carry the property: the spec's
    /// table 2-4, as a set of [`Place`] bits.
    fn places(self) -> u16 {
        use Place::*;
        use PropertyId::*;
        let places: &[Place] = match self {
            PayloadFormatIndicator
            | MessageExpiryInterval
            | ContentType
            | ResponseTopic
            | CorrelationData => &[Publish, Will],
            SubscriptionIdentifier => &[Publish, Subscribe],
            SessionExpiryInterval => &[Connect, Connack, Disconnect],
            AssignedClientIdentifier
            | ServerKeepAlive
            | ResponseInformation
            | MaximumQos
            | RetainAvailable
            | WildcardSubscriptionAvailable
            | SubscriptionIdentifierAvailable
            | SharedSubscriptionAvailable => &[Connack],
            AuthenticationMethod | AuthenticationData => &[Connect, Connack, Auth],
            RequestProblemInformation | RequestResponseInformation => &[Connect],
            WillDelayInterval => &[Will],
            ServerReference => &[Connack, Disconnect],
            ReasonString => {
                &[Connack, Puback, Pubrec, Pubrel, Pubcomp, Suback, Unsuback, Disconnect, Auth]
            }
            ReceiveMaximum | TopicAliasMaximum | MaximumPacketSize => &[Connect, Connack],
            TopicAlias => &[Publish],
            UserProperty => &[
                Connect,
                Will,
                Connack,
                Publish,
                Puback,
                Pubrec,
                Pubrel,
                Pubcomp,
                Subscribe,
                Suback,
                Unsubscribe,
                Unsuback,
                Disconnect,
                Auth,
            ],
        };
        places.iter().fold(0, |bits, place| bits | place.bit())
    }

    /// Whether the property may appear in `place`.
    pub(crate) fn allowed_in(self, place: Place) -> bool {
        self.places() & place.bit() != 0
    }

    /// Whether the property may appear more than once in `place`: user properties
    /// anywhere, subscription identifiers in a PUBLISH (one per matching subscription).
    pub(crate) fn repeatable_in(self, place: Place) -> bool {
        self == PropertyId::UserProperty
            || (self == PropertyId::SubscriptionIdentifier && place == Place::Publish)
    }
}

impl fmt::Display for PropertyId {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        write!(f, "{:?} (0x{:02X})", self, self.as_u8())
    }
}

impl Property {
    /// The property's identifier.
    pub fn id(&self) -> PropertyId {
        match self {
            Property::PayloadFormatIndicator(_) => PropertyId::PayloadFormatIndicator,
            Property::MessageExpiryInterval(_) => PropertyId::MessageExpiryInterval,
            Property::ContentType(_) => PropertyId::ContentType,
            Property::ResponseTopic(_) => PropertyId::ResponseTopic,
            Property::CorrelationData(_) => PropertyId::CorrelationData,
            Property::SubscriptionIdentifier(_) => PropertyId::SubscriptionIdentifier,
            Property::SessionExpiryInterval(_) => PropertyId::SessionExpiryInterval,
            Property::AssignedClientIdentifier(_) => PropertyId::AssignedClientIdentifier,
            Property::ServerKeepAlive(_) => PropertyId::ServerKeepAlive,
            Property::AuthenticationMethod(_) => PropertyId::AuthenticationMethod,
            Property::AuthenticationData(_) => PropertyId::AuthenticationData,
            Property::RequestProblemInformation(_) => PropertyId::RequestProblemInformation,
            Property::WillDelayInterval(_) => PropertyId::WillDelayInterval,
            Property::RequestResponseInformation(_) => PropertyId::RequestResponseInformation,
            Property::ResponseInformation(_) => PropertyId::ResponseInformation,
            Property::ServerReference(_) => PropertyId::ServerReference,
            Property::ReasonString(_) => PropertyId::ReasonString,
            Property::ReceiveMaximum(_) => PropertyId::ReceiveMaximum,
            Property::TopicAliasMaximum(_) => PropertyId::TopicAliasMaximum,
            Property::TopicAlias(_) => PropertyId::TopicAlias,
            Property::MaximumQos(_) => PropertyId::MaximumQos,
            Property::RetainAvailable(_) => PropertyId::RetainAvailable,
            Property::UserProperty(..) => PropertyId::UserProperty,
            Property::MaximumPacketSize(_) => PropertyId::MaximumPacketSize,
            Property::WildcardSubscriptionAvailable(_) => PropertyId::WildcardSubscriptionAvailable,
            Property::SubscriptionIdentifierAvailable(_) => {
                PropertyId::SubscriptionIdentifierAvailable
            }
            Property::SharedSubscriptionAvailable(_) => PropertyId::SharedSubscriptionAvailable,
        }
    }

    /// Reads one property (identifier and value) from `reader`.
    fn read(reader: &mut Reader, place: Place) -> Result<Property, WireError> {
        let raw = reader.variable_int("a property identifier")?;
        let id = PropertyId::from_u32(raw)
            .ok_or(WireError::UnknownProperty { id: raw, place: place.name() })?;
        let what = "a property value";
        let byte = |r: &mut Reader| r.u8(what);
        let two = |r: &mut Reader| r.u16(what);
        let four = |r: &mut Reader| r.u32(what);
        let text = |r: &mut Reader| r.string(what);
        let binary = |r: &mut Reader| r.binary(what);
        Ok(match id {
            PropertyId::PayloadFormatIndicator => Property::PayloadFormatIndicator(byte(reader)?),
            PropertyId::MessageExpiryInterval => Property::MessageExpiryInterval(four(reader)?),
            PropertyId::ContentType => Property::ContentType(text(reader)?),
            PropertyId::ResponseTopic => Property::ResponseTopic(text(reader)?),
            PropertyId::CorrelationData => Property::CorrelationData(binary(reader)?),
            PropertyId::SubscriptionIdentifier => {
                Property::SubscriptionIdentifier(reader.variable_int(what)?)
            }
            PropertyId::SessionExpiryInterval => Property::SessionExpiryInterval(four(reader)?),
            PropertyId::AssignedClientIdentifier => {
                Property::AssignedClientIdentifier(text(reader)?)
            }
            PropertyId::ServerKeepAlive => Property::ServerKeepAlive(two(reader)?),
            PropertyId::AuthenticationMethod => Property::AuthenticationMethod(text(reader)?),
            PropertyId::AuthenticationData => Property::AuthenticationData(binary(reader)?),
            PropertyId::RequestProblemInformation => {
                Property::RequestProblemInformation(byte(reader)?)
            }
            PropertyId::WillDelayInterval => Property::WillDelayInterval(four(reader)?),
            PropertyId::RequestResponseInformation => {
                Property::RequestResponseInformation(byte(reader)?)
            }
            PropertyId::ResponseInformation => Property::ResponseInformation(text(reader)?),
            PropertyId::ServerReference => Property::ServerReference(text(reader)?),
            PropertyId::ReasonString => Property::ReasonString(text(reader)?),
            PropertyId::ReceiveMaximum => Property::ReceiveMaximum(two(reader)?),
            PropertyId::TopicAliasMaximum => Property::TopicAliasMaximum(two(reader)?),
            PropertyId::TopicAlias => Property::TopicAlias(two(reader)?),
            PropertyId::MaximumQos => Property::MaximumQos(byte(reader)?),
            PropertyId::RetainAvailable => Property::RetainAvailable(byte(reader)?),
            PropertyId::UserProperty => {
                let name = text(reader)?;
                Property::UserProperty(name, text(reader)?)
            }
            PropertyId::MaximumPacketSize => Property::MaximumPacketSize(four(reader)?),
            PropertyId::WildcardSubscriptionAvailable => {
                Property::WildcardSubscriptionAvailable(byte(reader)?)
            }
            PropertyId::SubscriptionIdentifierAvailable => {
                Property::SubscriptionIdentifierAvailable(byte(reader)?)
            }
            PropertyId::SharedSubscriptionAvailable => {
                Property::SharedSubscriptionAvailable(byte(reader)?)
            }
        })
    }

    /// The bytes [`Property::write`] writes.
    fn encoded_len(&self) -> usize {
        1 + match self {
            Property::PayloadFormatIndicator(_)
            | Property::RequestProblemInformation(_)
            | Property::RequestResponseInformation(_)
            | Property::MaximumQos(_)
            | Property::RetainAvailable(_)
            | Property::WildcardSubscriptionAvailable(_)
            | Property::SubscriptionIdentifierAvailable(_)
            | Property::SharedSubscriptionAvailable(_) => 1,
            Property::ServerKeepAlive(_)
            | Property::ReceiveMaximum(_)
            | Property::TopicAliasMaximum(_)
            | Property::TopicAlias(_) => 2,
            Property::MessageExpiryInterval(_)
            | Property::SessionExpiryInterval(_)
            | Property::WillDelayInterval(_)
            | Property::MaximumPacketSize(_) => 4,
            Property::SubscriptionIdentifier(value) => wire::variable_int_len(*value),
            Property::ContentType(s)
            | Property::ResponseTopic(s)
            | Property::AssignedClientIdentifier(s)
            | Property::AuthenticationMethod(s)
            | Property::ResponseInformation(s)
            | Property::ServerReference(s)
            | Property::ReasonString(s) => 2 + s.len(),
            Property::CorrelationData(b) | Property::AuthenticationData(b) => 2 + b.len(),
            Property::UserProperty(name, value) => 4 + name.len() + value.len(),
        }
    }

    /// Writes the property; its strings and numbers were checked by
    /// [`Properties::validate`] (and [`Property::check_encodable`]) first.
    fn write(&self, dst: &mut BytesMut) {
        dst.put_u8(self.id().as_u8());
        match self {
            Property::PayloadFormatIndicator(v)
            | Property::RequestProblemInformation(v)
            | Property::RequestResponseInformation(v)
            | Property::MaximumQos(v)
            | Property::RetainAvailable(v)
            | Property::WildcardSubscriptionAvailable(v)
            | Property::SubscriptionIdentifierAvailable(v)
            | Property::SharedSubscriptionAvailable(v) => dst.put_u8(*v),
            Property::ServerKeepAlive(v)
            | Property::ReceiveMaximum(v)
            | Property::TopicAliasMaximum(v)
            | Property::TopicAlias(v) => dst.put_u16(*v),
            Property::MessageExpiryInterval(v)
            | Property::SessionExpiryInterval(v)
            | Property::WillDelayInterval(v)
            | Property::MaximumPacketSize(v) => dst.put_u32(*v),
            Property::SubscriptionIdentifier(v) => wire::put_variable_int(dst, *v),
            Property::ContentType(s)
            | Property::ResponseTopic(s)
            | Property::AssignedClientIdentifier(s)
            | Property::AuthenticationMethod(s)
            | Property::ResponseInformation(s)
            | Property::ServerReference(s)
            | Property::ReasonString(s) => wire::put_checked_bytes(dst, s.as_bytes()),
            Property::CorrelationData(b) | Property::AuthenticationData(b) => {
                wire::put_checked_bytes(dst, b)
            }
            Property::UserProperty(name, value) => {
                wire::put_checked_bytes(dst, name.as_bytes());
                wire::put_checked_bytes(dst, value.as_bytes());
            }
        }
    }

    /// Checks what only the encoder can get wrong: strings and binary values that fit a
    /// two-byte length and strings without U+0000 (a decoded property always passes).
    fn check_encodable(&self) -> Result<(), WireError> {
        let what = "a property value";
        match self {
            Property::ContentType(s)
            | Property::ResponseTopic(s)
            | Property::AssignedClientIdentifier(s)
            | Property::AuthenticationMethod(s)
            | Property::ResponseInformation(s)
            | Property::ServerReference(s)
            | Property::ReasonString(s) => wire::check_string(s, what),
            Property::CorrelationData(b) | Property::AuthenticationData(b) => {
                wire::check_binary(b, what)
            }
            Property::UserProperty(name, value) => {
                wire::check_string(name, what)?;
                wire::check_string(value, what)
            }
            Property::SubscriptionIdentifier(v) if *v > wire::MAX_VARIABLE_INT => {
                Err(WireError::Unencodable(format!(
                    "subscription identifier {v} is above the largest variable byte integer, {}",
                    wire::MAX_VARIABLE_INT
                )))
            }
            _ => Ok(()),
        }
    }

    /// The spec's rules on the value: the booleans in a byte are 0 or 1, and receive
    /// maximum, maximum packet size, topic alias and subscription identifier are not 0
    /// (each a Protocol Error in its section of 3.1.2.11, 3.2.2.3 and 3.3.2.3).
    fn check_value(&self) -> Result<(), WireError> {
        let invalid = |value: u32| {
            Err(WireError::InvalidPropertyValue { property: self.id(), value: u64::from(value) })
        };
        match *self {
            Property::RequestProblemInformation(v)
            | Property::RequestResponseInformation(v)
            | Property::MaximumQos(v)
            | Property::RetainAvailable(v)
            | Property::WildcardSubscriptionAvailable(v)
            | Property::SubscriptionIdentifierAvailable(v)
            | Property::SharedSubscriptionAvailable(v)
                if v > 1 =>
            {
                invalid(u32::from(v))
            }
            Property::ReceiveMaximum(0) | Property::TopicAlias(0) => invalid(0),
            Property::MaximumPacketSize(0) | Property::SubscriptionIdentifier(0) => invalid(0),
            _ => Ok(()),
        }
    }
}

/// The properties of a packet (or of a CONNECT's will), in wire order.
///
/// Empty in 3.1 and 3.1.1, which have none; an empty list allocates nothing.
#[derive(Debug, Clone, PartialEq, Eq, Hash, Default)]
pub struct Properties {
    list: Vec<Property>,
}

macro_rules! accessors {
    ($( $(#[$doc:meta])* $method:ident: $variant:ident -> $ty:ty, $get:path; )*) => {
        $(
            $(#[$doc])*
            pub fn $method(&self) -> Option<$ty> {
                self.list.iter().find_map(|property| match property {
                    Property::$variant(value) => Some($get(value)),
                    _ => None,
                })
            }
        )*
    };
}

/// The accessors' reading of a number.
fn copied<T: Copy>(value: &T) -> T {
    *value
}

impl Properties {
    /// No properties.
    pub fn new() -> Properties {
        Properties::default()
    }

    /// These properties and `property` after them (builder style).
    pub fn with(mut self, property: Property) -> Properties {
        self.list.push(property);
        self
    }

    /// Appends `property`.
    pub fn push(&mut self, property: Property) {
        self.list.push(property);
    }

    /// Whether there are none.
    pub fn is_empty(&self) -> bool {
        self.list.is_empty()
    }

    /// How many there are (each user property and subscription identifier counts).
    pub fn len(&self) -> usize {
        self.list.len()
    }

    /// The properties in wire order.
    pub fn iter(&self) -> std::slice::Iter<'_, Property> {
        self.list.iter()
    }

    /// The first property with identifier `id`.
    pub fn get(&self, id: PropertyId) -> Option<&Property> {
        self.list.iter().find(|property| property.id() == id)
    }

    /// The user properties, in order, as `(name, value)`.
    pub fn user_properties(&self) -> impl Iterator<Item = (&str, &str)> {
        self.list.iter().filter_map(|property| match property {
            Property::UserProperty(name, value) => Some((name.as_str(), value.as_str())),
            _ => None,
        })
    }

    /// The subscription identifiers, in order (several in a PUBLISH to a client whose
    /// subscriptions overlap, at most one in a SUBSCRIBE).
    pub fn subscription_identifiers(&self) -> impl Iterator<Item = u32> + '_ {
        self.list.iter().filter_map(|property| match property {
            Property::SubscriptionIdentifier(id) => Some(*id),
            _ => None,
        })
    }

    accessors! {
        /// Payload Format Indicator (0x01): 1 when the payload is UTF-8 text.
        payload_format_indicator: PayloadFormatIndicator -> u8, copied;
        /// Message Expiry Interval (0x02), in seconds.
        message_expiry_interval: MessageExpiryInterval -> u32, copied;
        /// Content Type (0x03).
        content_type: ContentType -> &str, String::as_str;
        /// Response Topic (0x08).
        response_topic: ResponseTopic -> &str, String::as_str;
        /// Correlation Data (0x09).
        correlation_data: CorrelationData -> &Bytes, std::convert::identity;
        /// Session Expiry Interval (0x11), in seconds.
        session_expiry_interval: SessionExpiryInterval -> u32, copied;
        /// Assigned Client Identifier (0x12).
        assigned_client_identifier: AssignedClientIdentifier -> &str, String::as_str;
        /// Server Keep Alive (0x13), in seconds.
        server_keep_alive: ServerKeepAlive -> u16, copied;
        /// Authentication Method (0x15).
        authentication_method: AuthenticationMethod -> &str, String::as_str;
        /// Authentication Data (0x16).
        authentication_data: AuthenticationData -> &Bytes, std::convert::identity;
        /// Request Problem Information (0x17): 0 or 1.
        request_problem_information: RequestProblemInformation -> u8, copied;
        /// Will Delay Interval (0x18), in seconds (will properties only).
        will_delay_interval: WillDelayInterval -> u32, copied;
        /// Request Response Information (0x19): 0 or 1.
        request_response_information: RequestResponseInformation -> u8, copied;
        /// Response Information (0x1A).
        response_information: ResponseInformation -> &str, String::as_str;
        /// Server Reference (0x1C).
        server_reference: ServerReference -> &str, String::as_str;
        /// Reason String (0x1F).
        reason_string: ReasonString -> &str, String::as_str;
        /// Receive Maximum (0x21): QoS 1 and 2 publications in flight at once.
        receive_maximum: ReceiveMaximum -> u16, copied;
        /// Topic Alias Maximum (0x22).
        topic_alias_maximum: TopicAliasMaximum -> u16, copied;
        /// Topic Alias (0x23).
        topic_alias: TopicAlias -> u16, copied;
        /// Maximum QoS (0x24): 0 or 1 (absent means 2).
        maximum_qos: MaximumQos -> u8, copied;
        /// Retain Available (0x25): 0 or 1.
        retain_available: RetainAvailable -> u8, copied;
        /// Maximum Packet Size (0x27), in bytes.
        maximum_packet_size: MaximumPacketSize -> u32, copied;
        /// Wildcard Subscription Available (0x28): 0 or 1.
        wildcard_subscription_available: WildcardSubscriptionAvailable -> u8, copied;
        /// Subscription Identifier Available (0x29): 0 or 1.
        subscription_identifier_available: SubscriptionIdentifierAvailable -> u8, copied;
        /// Shared Subscription Available (0x2A): 0 or 1.
        shared_subscription_available: SharedSubscriptionAvailable -> u8, copied;
    }

    /// Reads a property length and the properties it covers, checked for `place`.
    pub(crate) fn read(reader: &mut Reader, place: Place) -> Result<Properties, WireError> {
        let length = reader.variable_int("the property length")?;
        let mut section = reader.sub(length as usize, "the properties")?;
        let mut list = Vec::new();
        while !section.is_empty() {
            list.push(Property::read(&mut section, place)?);
        }
        let properties = Properties { list };
        properties.validate(place)?;
        Ok(properties)
    }

    /// The spec's rules on a property list in `place`: each property allowed there, at
    /// most once unless repeatable, with a valid value.
    pub(crate) fn validate(&self, place: Place) -> Result<(), WireError> {
        // Identifiers are below 64: one bit each.
        let mut seen = 0u64;
        for property in &self.list {
            let id = property.id();
            if !id.allowed_in(place) {
                return Err(WireError::PropertyNotAllowed { property: id, place: place.name() });
            }
            let bit = 1u64 << id.as_u8();
            if seen & bit != 0 && !id.repeatable_in(place) {
                return Err(WireError::DuplicateProperty { property: id, place: place.name() });
            }
            seen |= bit;
            property.check_value()?;
        }
        Ok(())
    }

    /// The bytes of the properties, without their length.
    pub(crate) fn encoded_len(&self) -> usize {
        self.list.iter().map(Property::encoded_len).sum()
    }

    /// Validates the list for `place` and writes its length and the properties.
    pub(crate) fn write(&self, dst: &mut BytesMut, place: Place) -> Result<(), WireError> {
        self.validate(place)?;
        for property in &self.list {
            property.check_encodable()?;
        }
        let length = self.encoded_len();
        let length = u32::try_from(length)
            .ok()
            .filter(|&length| length <= wire::MAX_VARIABLE_INT)
            .ok_or_else(|| {
                WireError::Unencodable(format!(
                    "{length} bytes of properties, more than a variable byte integer can count"
                ))
            })?;
        wire::put_variable_int(dst, length);
        for property in &self.list {
            property.write(dst);
        }
        Ok(())
    }
}

impl From<Vec<Property>> for Properties {
    fn from(list: Vec<Property>) -> Properties {
        Properties { list }
    }
}

impl FromIterator<Property> for Properties {
    fn from_iter<I: IntoIterator<Item = Property>>(iter: I) -> Properties {
        Properties { list: iter.into_iter().collect() }
    }
}

impl<'a> IntoIterator for &'a Properties {
    type Item = &'a Property;
    type IntoIter = std::slice::Iter<'a, Property>;

    fn into_iter(self) -> Self::IntoIter {
        self.list.iter()
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn identifiers_round_trip_and_stay_below_64() {
        for id in PropertyId::ALL {
            assert_eq!(PropertyId::from_u32(u32::from(id.as_u8())), Some(id));
            assert!(id.as_u8() < 64, "the duplicate check keeps one bit per identifier");
        }
        assert_eq!(PropertyId::from_u32(0x04), None);
        assert_eq!(PropertyId::from_u32(0x2B), None);
    }

    #[test]
    fn table_2_4_places() {
        assert!(PropertyId::WillDelayInterval.allowed_in(Place::Will));
        assert!(!PropertyId::WillDelayInterval.allowed_in(Place::Connect));
        assert!(PropertyId::TopicAlias.allowed_in(Place::Publish));
        assert!(!PropertyId::TopicAlias.allowed_in(Place::Will));
        assert!(PropertyId::ReasonString.allowed_in(Place::Auth));
        assert!(!PropertyId::ReasonString.allowed_in(Place::Connect));
        assert!(PropertyId::SubscriptionIdentifier.repeatable_in(Place::Publish));
        assert!(!PropertyId::SubscriptionIdentifier.repeatable_in(Place::Subscribe));
        for place in [Place::Connect, Place::Will, Place::Auth, Place::Unsubscribe] {
            assert!(PropertyId::UserProperty.allowed_in(place));
            assert!(PropertyId::UserProperty.repeatable_in(place));
        }
    }

    #[test]
    fn accessors_find_the_first_of_each() {
        let properties = Properties::new()
            .with(Property::UserProperty("a".into(), "1".into()))
            .with(Property::MessageExpiryInterval(30))
            .with(Property::UserProperty("a".into(), "2".into()))
            .with(Property::SubscriptionIdentifier(7))
            .with(Property::SubscriptionIdentifier(9));
        assert_eq!(properties.message_expiry_interval(), Some(30));
        assert_eq!(properties.content_type(), None);
        assert_eq!(properties.user_properties().collect::<Vec<_>>(), [("a", "1"), ("a", "2")]);
        assert_eq!(properties.subscription_identifiers().collect::<Vec<_>>(), [7, 9]);
        assert_eq!(properties.len(), 5);
        assert!(properties.validate(Place::Publish).is_ok());
        assert_eq!(
            properties.validate(Place::Subscribe),
            Err(WireError::PropertyNotAllowed {
                property: PropertyId::MessageExpiryInterval,
                place: "SUBSCRIBE"
            })
        );
    }
}
