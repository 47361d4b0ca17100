//! [`Packet`]: the fifteen MQTT control packets, each a struct with the fields of its
//! variable header and payload.
//!
//! One set of types serves every version: fields that exist only in 5.0 (reason codes
//! other than success, properties, the subscription options beyond QoS) are empty or
//! default in 3.1 and 3.1.1, and [`super::Codec::encode`] refuses a packet that sets one
//! in a version without it rather than dropping it silently.

use std::fmt;

use bytes::Bytes;

use super::properties::Properties;
use super::reason::ReasonCode;
use super::version::{QoS, Version};

/// The control packet type: the high four bits of the first byte.
#[derive(Debug, Clone, Copy, PartialEq, Eq, Hash)]
#[allow(missing_docs)] // The spec's names.
pub enum PacketType {
    Connect = 1,
    Connack = 2,
    Publish = 3,
    Puback = 4,
    Pubrec = 5,
    Pubrel = 6,
    Pubcomp = 7,
    Subscribe = 8,
    Suback = 9,
    Unsubscribe = 10,
    Unsuback = 11,
    Pingreq = 12,
    Pingresp = 13,
    Disconnect = 14,
    /// MQTT 5.0 only; 15 is reserved in 3.1 and 3.1.1.
    Auth = 15,
}

impl PacketType {
    /// The type of a first byte's high nibble; `None` for 0, reserved in every version.
    pub fn from_nibble(nibble: u8) -> Option<PacketType> {
        Some(match nibble {
            1 => PacketType::Connect,
            2 => PacketType::Connack,
            3 => PacketType::Publish,
            4 => PacketType::Puback,
            5 => PacketType::Pubrec,
            6 => PacketType::Pubrel,
            7 => PacketType::Pubcomp,
            8 => PacketType::Subscribe,
            9 => PacketType::Suback,
            10 => PacketType::Unsubscribe,
            11 => PacketType::Unsuback,
            12 => PacketType::Pingreq,
            13 => PacketType::Pingresp,
            14 => PacketType::Disconnect,
            15 => PacketType::Auth,
            _ => return None,
        })
    }

    /// The spec's name, in capitals.
    pub fn name(self) -> &'static str {
        match self {
            PacketType::Connect => "CONNECT",
            PacketType::Connack => "CONNACK",
            PacketType::Publish => "PUBLISH",
            PacketType::Puback => "PUBACK",
            PacketType::Pubrec => "PUBREC",
            PacketType::Pubrel => "PUBREL",
            PacketType::Pubcomp => "PUBCOMP",
            PacketType::Subscribe => "SUBSCRIBE",
            PacketType::Suback => "SUBACK",
            PacketType::Unsubscribe => "UNSUBSCRIBE",
            PacketType::Unsuback => "UNSUBACK",
            PacketType::Pingreq => "PINGREQ",
            PacketType::Pingresp => "PINGRESP",
            PacketType::Disconnect => "DISCONNECT",
            PacketType::Auth => "AUTH",
        }
    }

    /// The low four bits of the first byte that every packet but PUBLISH must carry:
    /// 0b0010 for PUBREL, SUBSCRIBE and UNSUBSCRIBE (3.1's QoS 1 of those packets), 0
    /// for the rest (spec 2.1.3).
    pub(crate) fn fixed_flags(self) -> u8 {
        match self {
            PacketType::Pubrel | PacketType::Subscribe | PacketType::Unsubscribe => 0b0010,
            _ => 0,
        }
    }
}

impl fmt::Display for PacketType {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        f.write_str(self.name())
    }
}

/// Any control packet.
#[derive(Debug, Clone, PartialEq, Eq)]
#[allow(missing_docs)] // Each variant holds the packet of its name.
pub enum Packet {
    Connect(Connect),
    Connack(Connack),
    Publish(Publish),
    Puback(PubAck),
    Pubrec(PubAck),
    Pubrel(PubAck),
    Pubcomp(PubAck),
    Subscribe(Subscribe),
    Suback(Suback),
    Unsubscribe(Unsubscribe),
    Unsuback(Unsuback),
    Pingreq,
    Pingresp,
    Disconnect(Disconnect),
    /// MQTT 5.0 only.
    Auth(Auth),
}

impl Packet {
    /// The packet's type.
    pub fn packet_type(&self) -> PacketType {
        match self {
            Packet::Connect(_) => PacketType::Connect,
            Packet::Connack(_) => PacketType::Connack,
            Packet::Publish(_) => PacketType::Publish,
            Packet::Puback(_) => PacketType::Puback,
            Packet::Pubrec(_) => PacketType::Pubrec,
            Packet::Pubrel(_) => PacketType::Pubrel,
            Packet::Pubcomp(_) => PacketType::Pubcomp,
            Packet::Subscribe(_) => PacketType::Subscribe,
            Packet::Suback(_) => PacketType::Suback,
            Packet::Unsubscribe(_) => PacketType::Unsubscribe,
            Packet::Unsuback(_) => PacketType::Unsuback,
            Packet::Pingreq => PacketType::Pingreq,
            Packet::Pingresp => PacketType::Pingresp,
            Packet::Disconnect(_) => PacketType::Disconnect,
            Packet::Auth(_) => PacketType::Auth,
        }
    }
}

/// CONNECT (spec 3.1): the first packet a client sends.
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct Connect {
    /// The protocol version the client speaks (its protocol name and level).
    pub version: Version,
    /// Clean Session (3.1, 3.1.1) or Clean Start (5.0): discard any existing session.
    pub clean_start: bool,
    /// The longest silence, in seconds, before the server may drop the client; 0: none.
    pub keep_alive: u16,
    /// The client identifier; may be empty (the server then assigns one, or refuses).
    pub client_id: String,
    /// The message the server publishes if the connection ends without a DISCONNECT.
    pub will: Option<Will>,
    /// The user name, if the client sent one.
    pub username: Option<String>,
    /// The password, if the client sent one: binary data (in 3.1.1 only with a user name).
    pub password: Option<Bytes>,
    /// 5.0 only: session expiry, receive maximum, maximum packet size, authentication, ...
    pub properties: Properties,
}

impl Connect {
    /// A CONNECT of `version` from `client_id` with a clean start, no keep alive, no will
    /// and no credentials.
    pub fn new(version: Version, client_id: impl Into<String>) -> Connect {
        Connect {
            version,
            clean_start: true,
            keep_alive: 0,
            client_id: client_id.into(),
            will: None,
            username: None,
            password: None,
            properties: Properties::new(),
        }
    }
}

/// The will of a CONNECT: the message published when the client goes without a word.
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct Will {
    /// The topic it is published to.
    pub topic: String,
    /// Its payload.
    pub payload: Bytes,
    /// Its QoS.
    pub qos: QoS,
    /// Whether it is retained.
    pub retain: bool,
    /// 5.0 only: will delay interval, message expiry, content type, response topic, ...
    pub properties: Properties,
}

/// CONNACK (spec 3.2): the server's answer to a CONNECT.
#[derive(Debug, Clone, PartialEq, Eq, Default)]
pub struct Connack {
    /// Whether the server resumes a session it kept for the client.
    pub session_present: bool,
    /// The outcome. In 3.1 and 3.1.1 only the six codes with a return code
    /// ([`super::ConnectReturnCode::from_reason`]) can be sent, and a received return code
    /// comes back as its reason code.
    pub reason: ReasonCode,
    /// 5.0 only: what the server allows (maximum QoS, receive maximum, ...).
    pub properties: Properties,
}

/// PUBLISH (spec 3.3): an application message.
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct Publish {
    /// Whether this is a redelivery of an earlier attempt (QoS 1 and 2 only).
    pub dup: bool,
    /// The QoS it is sent with.
    pub qos: QoS,
    /// Whether the server should keep it as the topic's retained message (or, from the
    /// server, whether it is one).
    pub retain: bool,
    /// The topic name: no wildcards; empty only in 5.0 with a topic alias.
    pub topic: String,
    /// The packet identifier: present exactly for QoS 1 and 2.
    pub packet_id: Option<u16>,
    /// 5.0 only: message expiry, topic alias, response topic, subscription ids, ...
    pub properties: Properties,
    /// The message itself. A decoded payload is a slice of the read buffer, not a copy.
    pub payload: Bytes,
}

impl Publish {
    /// A QoS 0 message to `topic`, not retained, without properties.
    pub fn new(topic: impl Into<String>, payload: impl Into<Bytes>) -> Publish {
        Publish {
            dup: false,
            qos: QoS::AtMostOnce,
            retain: false,
            topic: topic.into(),
            packet_id: None,
            properties: Properties::new(),
            payload: payload.into(),
        }
    }
}

/// PUBACK, PUBREC, PUBREL or PUBCOMP (spec 3.4 to 3.7): the steps of the QoS 1 and 2
/// handshakes, which share one layout ([`Packet`] says which step it is).
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct PubAck {
    /// The identifier of the PUBLISH it answers.
    pub packet_id: u16,
    /// 5.0 only: the outcome (success when absent from the wire).
    pub reason: ReasonCode,
    /// 5.0 only: a reason string, user properties.
    pub properties: Properties,
}

impl PubAck {
    /// A successful step for `packet_id`.
    pub fn new(packet_id: u16) -> PubAck {
        PubAck { packet_id, reason: ReasonCode::Success, properties: Properties::new() }
    }
}

/// SUBSCRIBE (spec 3.8): subscribe to one or more topic filters.
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct Subscribe {
    /// Its packet identifier, echoed by the SUBACK.
    pub packet_id: u16,
    /// The filters and their options, at least one.
    pub filters: Vec<Subscription>,
    /// 5.0 only: a subscription identifier, user properties.
    pub properties: Properties,
}

/// One topic filter of a SUBSCRIBE and its options.
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct Subscription {
    /// The topic filter (wildcards allowed; `$share/{group}/{filter}` in 5.0).
    pub filter: String,
    /// How messages for it are delivered.
    pub options: SubscriptionOptions,
}

/// The options byte of a subscription (spec 3.8.3.1). Only `qos` exists before 5.0.
#[derive(Debug, Clone, Copy, PartialEq, Eq, Default)]
pub struct SubscriptionOptions {
    /// The highest QoS the subscriber accepts.
    pub qos: QoS,
    /// 5.0: do not deliver messages this connection published itself.
    pub no_local: bool,
    /// 5.0: keep the retain flag of forwarded messages as published.
    pub retain_as_published: bool,
    /// 5.0: whether retained messages are sent when the subscription is made.
    pub retain_handling: RetainHandling,
}

impl SubscriptionOptions {
    /// Options with `qos` and the defaults of the rest (all a 3.1.1 subscription has).
    pub fn qos(qos: QoS) -> SubscriptionOptions {
        SubscriptionOptions { qos, ..SubscriptionOptions::default() }
    }
}

/// When retained messages are sent for a new subscription (5.0 only).
#[derive(Debug, Clone, Copy, PartialEq, Eq, Default)]
pub enum RetainHandling {
    /// 0: at every subscribe.
    #[default]
    SendAtSubscribe = 0,
    /// 1: only if the subscription did not exist.
    SendAtNewSubscribe = 1,
    /// 2: never.
    DoNotSend = 2,
}

/// SUBACK (spec 3.9): the outcome of each filter of a SUBSCRIBE, in order.
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct Suback {
    /// The SUBSCRIBE's packet identifier.
    pub packet_id: u16,
    /// One per filter: the granted QoS ([`ReasonCode::Success`], `GrantedQos1`,
    /// `GrantedQos2`) or a failure (only [`ReasonCode::UnspecifiedError`], 0x80, before 5.0).
    pub reasons: Vec<ReasonCode>,
    /// 5.0 only: a reason string, user properties.
    pub properties: Properties,
}

/// UNSUBSCRIBE (spec 3.10): remove subscriptions.
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct Unsubscribe {
    /// Its packet identifier, echoed by the UNSUBACK.
    pub packet_id: u16,
    /// The topic filters, exactly as subscribed, at least one.
    pub filters: Vec<String>,
    /// 5.0 only: user properties.
    pub properties: Properties,
}

/// UNSUBACK (spec 3.11).
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct Unsuback {
    /// The UNSUBSCRIBE's packet identifier.
    pub packet_id: u16,
    /// 5.0 only: one outcome per filter; empty before 5.0, where UNSUBACK has none.
    pub reasons: Vec<ReasonCode>,
    /// 5.0 only: a reason string, user properties.
    pub properties: Properties,
}

/// DISCONNECT (spec 3.14): the last packet of a connection; from the server in 5.0 too.
#[derive(Debug, Clone, PartialEq, Eq, Default)]
pub struct Disconnect {
    /// 5.0 only: why (normal disconnection, success, when absent from the wire).
    pub reason: ReasonCode,
    /// 5.0 only: session expiry, reason string, server reference, user properties.
    pub properties: Properties,
}

/// AUTH (spec 3.15, 5.0 only): a step of an enhanced authentication exchange.
#[derive(Debug, Clone, PartialEq, Eq, Default)]
pub struct Auth {
    /// Success, continue authentication or re-authenticate.
    pub reason: ReasonCode,
    /// Authentication method and data, reason string, user properties.
    pub properties: Properties,
}

macro_rules! into_packet {
    ($($ty:ident => $variant:ident),*) => {
        $(
            impl From<$ty> for Packet {
                fn from(packet: $ty) -> Packet {
                    Packet::$variant(packet)
                }
            }
        )*
    };
}

into_packet!(
    Connect => Connect,
    Connack => Connack,
    Publish => Publish,
    Subscribe => Subscribe,
    Suback => Suback,
    Unsubscribe => Unsubscribe,
    Unsuback => Unsuback,
    Disconnect => Disconnect,
    Auth => Auth
);
