//! [`WireError`]: everything that can be wrong with MQTT bytes, or with a packet that
//! cannot be put into MQTT bytes.

use super::packet::{Connack, PacketType};
use super::properties::{Properties, PropertyId};
use super::reason::ReasonCode;
use super::topic::TopicError;
use super::version::Version;

/// The bytes received are not an acceptable MQTT packet, or a packet cannot be encoded.
///
/// A decode error is fatal for the connection (the spec's answer to every malformed
/// packet and protocol error is to close it): a 5.0 server first sends a DISCONNECT with
/// [`WireError::disconnect_reason`] (a CONNACK with that reason if the CONNECT itself was
/// bad), and a CONNECT of a version we do not speak is answered with
/// [`WireError::connack_refusal`]. An enum rather than a boxed error because decoding is
/// the hot path and callers match on it.
#[derive(Debug, thiserror::Error, Clone, PartialEq, Eq)]
#[non_exhaustive]
pub enum WireError {
    /// A packet's size (fixed header included) is above the maximum packet size: ours
    /// when decoding (known from the fixed header, before the rest is buffered), the
    /// peer's when encoding, or the protocol's own when the remaining length would not fit
    /// a variable byte integer.
    #[error(
        "MQTT packet of {size} bytes exceeds the maximum packet size of {max} bytes; \
         send smaller packets or raise the connector's maximum packet size"
    )]
    PacketTooLarge {
        /// The packet's size in bytes.
        size: u64,
        /// The limit in force.
        max: u64,
    },
    /// A variable byte integer (the remaining length, a property length, ...) whose
    /// fourth byte has its continuation bit set: it would take five bytes.
    #[error("malformed variable byte integer: it continues past its maximum of 4 bytes")]
    VariableIntTooLong,
    /// The packet type 0 (reserved in every version), or 15 (AUTH) before MQTT 5.0.
    #[error("reserved MQTT packet type {0} (in the first byte's high four bits)")]
    ReservedPacketType(u8),
    /// A packet other than CONNECT before the codec knows the protocol version: a client
    /// that does not start with CONNECT, or a client-side codec not given a version.
    #[error(
        "{packet} before the protocol version is known: a connection starts with CONNECT \
         (a client's codec is told the version with Codec::set_version)"
    )]
    VersionUnknown {
        /// The packet that arrived or was to be encoded.
        packet: PacketType,
    },
    /// The low four bits of the first byte are not the fixed flags of the packet type
    /// (0b0010 for PUBREL, SUBSCRIBE and UNSUBSCRIBE, 0 for all but PUBLISH).
    #[error("invalid fixed-header flags 0b{flags:04b} for {packet}")]
    InvalidFlags {
        /// The packet type.
        packet: PacketType,
        /// The flags received.
        flags: u8,
    },
    /// A QoS field holds 3.
    #[error("QoS 3 in {what}; QoS is 0, 1 or 2")]
    InvalidQos {
        /// Where: the PUBLISH fixed header, the will flags, a subscription's options.
        what: &'static str,
    },
    /// A QoS 0 PUBLISH with its DUP flag set (spec 3.3.1.1).
    #[error("PUBLISH with QoS 0 has its DUP flag set; only QoS 1 and 2 messages are redelivered")]
    DupWithQos0,
    /// The packet ends before a field: the remaining length is too small for the content.
    #[error("{packet} ends in the middle of {what}: its remaining length is too small")]
    Truncated {
        /// The packet type.
        packet: PacketType,
        /// The field being read.
        what: &'static str,
    },
    /// Bytes are left after the last field: the remaining length is too large.
    #[error(
        "{count} bytes left over after the end of {packet}: its remaining length is too large"
    )]
    TrailingBytes {
        /// The packet type.
        packet: PacketType,
        /// Bytes not consumed.
        count: usize,
    },
    /// A UTF-8 string field that is not well-formed UTF-8.
    #[error("{what} is not well-formed UTF-8")]
    InvalidUtf8 {
        /// The field.
        what: &'static str,
    },
    /// A UTF-8 string field that contains U+0000 (spec 1.5.4).
    #[error("{what} contains the null character U+0000, which MQTT strings must not")]
    NullCharacter {
        /// The field.
        what: &'static str,
    },
    /// A CONNECT whose protocol name and level are not a version this codec speaks.
    /// The broker should answer with [`WireError::connack_refusal`] before closing.
    #[error(
        "unsupported MQTT protocol {name:?} at level {level}; this server speaks MQTT 3.1 \
         (\"MQIsdp\", level 3), 3.1.1 (\"MQTT\", level 4) and 5.0 (\"MQTT\", level 5)"
    )]
    UnsupportedProtocol {
        /// The protocol name, lossily decoded, at most 64 characters.
        name: String,
        /// The protocol level.
        level: u8,
    },
    /// The reserved bit 0 of the CONNECT flags is set (spec 3.1.2.3).
    #[error("the reserved bit of the CONNECT flags is set")]
    ReservedConnectFlag,
    /// Will QoS or will retain set in CONNECT flags without the will flag.
    #[error("CONNECT flags 0b{flags:08b} set the will QoS or will retain without the will flag")]
    InvalidWillFlags {
        /// The CONNECT flags byte.
        flags: u8,
    },
    /// The password flag without the user name flag, which 3.1 and 3.1.1 forbid.
    #[error("CONNECT has a password but no user name, which {version} does not allow")]
    PasswordWithoutUsername {
        /// The CONNECT's version.
        version: Version,
    },
    /// Reserved bits of the CONNACK acknowledge flags are set.
    #[error("reserved bits of the CONNACK flags 0b{0:08b} are set")]
    InvalidConnackFlags(u8),
    /// A reason code (or 3.1.1 return code) that this packet may not carry.
    #[error("0x{code:02X} is not a reason code {packet} may carry in {version}")]
    InvalidReasonCode {
        /// The packet type.
        packet: PacketType,
        /// The byte received.
        code: u8,
        /// The version in force.
        version: Version,
    },
    /// A packet identifier of 0, where a non-zero one is required (spec 2.2.1).
    #[error("{packet} has packet identifier 0; packet identifiers are 1 to 65535")]
    ZeroPacketId {
        /// The packet type.
        packet: PacketType,
    },
    /// A SUBSCRIBE or UNSUBSCRIBE without a topic filter.
    #[error("{packet} carries no topic filter; it must carry at least one")]
    NoTopicFilters {
        /// The packet type.
        packet: PacketType,
    },
    /// A subscription options byte with reserved bits set (bits 2-7 before 5.0, 6-7 in 5.0).
    #[error("reserved bits of the subscription options 0x{0:02X} are set")]
    ReservedSubscriptionOptions(u8),
    /// Retain handling 3 in a subscription's options (spec 3.8.3.1).
    #[error("retain handling 3 in subscription options; it is 0, 1 or 2")]
    InvalidRetainHandling,
    /// No Local on a shared subscription (spec 3.8.3.1).
    #[error("shared subscription {filter:?} sets No Local, which shared subscriptions must not")]
    NoLocalOnSharedSubscription {
        /// The subscription's filter.
        filter: String,
    },
    /// A topic name that breaks the rules of spec 4.7 (wildcards, empty).
    #[error("invalid topic name {topic:?}: {error}")]
    InvalidTopicName {
        /// The name, truncated to 64 characters.
        topic: String,
        /// What is wrong with it.
        error: TopicError,
    },
    /// A topic filter that breaks the rules of spec 4.7 and 4.8.2.
    #[error("invalid topic filter {filter:?}: {error}")]
    InvalidTopicFilter {
        /// The filter, truncated to 64 characters.
        filter: String,
        /// What is wrong with it.
        error: TopicError,
    },
    /// A 5.0 PUBLISH with an empty topic name and no topic alias.
    #[error("PUBLISH has an empty topic name and no topic alias to stand for it")]
    EmptyTopicWithoutAlias,
    /// A property identifier the spec does not define.
    #[error("unknown property identifier 0x{id:02X} in {place}")]
    UnknownProperty {
        /// The identifier received.
        id: u32,
        /// The packet (or `will properties`).
        place: &'static str,
    },
    /// A property the packet may not carry (spec 2.2.2.2: a Malformed Packet).
    #[error("property {property} is not allowed in {place}")]
    PropertyNotAllowed {
        /// The property.
        property: PropertyId,
        /// The packet (or `will properties`).
        place: &'static str,
    },
    /// A property given more than once where the spec allows one.
    #[error("property {property} appears more than once in {place}")]
    DuplicateProperty {
        /// The property.
        property: PropertyId,
        /// The packet (or `will properties`).
        place: &'static str,
    },
    /// A property value the spec forbids (0 where it must be positive, a flag above 1).
    #[error("property {property} has the invalid value {value}")]
    InvalidPropertyValue {
        /// The property.
        property: PropertyId,
        /// The value received.
        value: u64,
    },
    /// Authentication data in a CONNECT without an authentication method (3.1.2.11.10).
    #[error("CONNECT carries authentication data without an authentication method")]
    AuthenticationDataWithoutMethod,
    /// An AUTH other than the empty success without its authentication method (3.15.2.2.2).
    #[error("AUTH has no authentication method; every AUTH but an empty success names one")]
    AuthenticationMethodMissing,
    /// A field that the version being encoded does not have (properties before 5.0, say).
    #[error("cannot encode {what} in {version}, which does not have it")]
    NotInVersion {
        /// What was set.
        what: &'static str,
        /// The version in force.
        version: Version,
    },
    /// A string or binary value longer than its two-byte length can say.
    #[error("{what} is {len} bytes long; MQTT strings and binary data hold at most 65535")]
    StringTooLong {
        /// The field.
        what: &'static str,
        /// Its length in bytes.
        len: usize,
    },
    /// A packet that cannot be encoded for another reason (a packet identifier on a
    /// QoS 0 PUBLISH, say).
    #[error("cannot encode MQTT packet: {0}")]
    Unencodable(String),
}

impl WireError {
    /// The MQTT 5.0 reason code for the DISCONNECT (or CONNACK) a broker sends before it
    /// closes the connection over this error.
    ///
    /// The spec's two classes (section 4.13): a packet that cannot be parsed is a
    /// Malformed Packet (0x81), one that parses but breaks a rule is a Protocol Error
    /// (0x82); some errors have a code of their own. Errors of encoding are ours, not the
    /// peer's: 0x83, implementation specific.
    pub fn disconnect_reason(&self) -> ReasonCode {
        match self {
            WireError::PacketTooLarge { .. } => ReasonCode::PacketTooLarge,
            WireError::UnsupportedProtocol { .. } => ReasonCode::UnsupportedProtocolVersion,
            WireError::InvalidTopicName { .. } => ReasonCode::TopicNameInvalid,
            WireError::InvalidTopicFilter { .. } => ReasonCode::TopicFilterInvalid,
            // A Topic Alias of 0 (spec 3.3.2.3.4).
            WireError::InvalidPropertyValue { property: PropertyId::TopicAlias, .. } => {
                ReasonCode::TopicAliasInvalid
            }
            WireError::VariableIntTooLong
            | WireError::ReservedPacketType(_)
            | WireError::InvalidFlags { .. }
            | WireError::InvalidQos { .. }
            | WireError::DupWithQos0
            | WireError::Truncated { .. }
            | WireError::TrailingBytes { .. }
            | WireError::InvalidUtf8 { .. }
            | WireError::NullCharacter { .. }
            | WireError::ReservedConnectFlag
            | WireError::InvalidWillFlags { .. }
            | WireError::PasswordWithoutUsername { .. }
            | WireError::InvalidConnackFlags(_)
            | WireError::InvalidReasonCode { .. }
            | WireError::ReservedSubscriptionOptions(_)
            | WireError::UnknownProperty { .. }
            | WireError::PropertyNotAllowed { .. } => ReasonCode::MalformedPacket,
            WireError::VersionUnknown { .. }
            | WireError::ZeroPacketId { .. }
            | WireError::NoTopicFilters { .. }
            | WireError::InvalidRetainHandling
            | WireError::NoLocalOnSharedSubscription { .. }
            | WireError::EmptyTopicWithoutAlias
            | WireError::DuplicateProperty { .. }
            | WireError::InvalidPropertyValue { .. }
            | WireError::AuthenticationDataWithoutMethod
            | WireError::AuthenticationMethodMissing => ReasonCode::ProtocolError,
            WireError::NotInVersion { .. }
            | WireError::StringTooLong { .. }
            | WireError::Unencodable(_) => ReasonCode::ImplementationSpecificError,
        }
    }

    /// The CONNACK that refuses a CONNECT of a protocol we do not speak, and the version
    /// to encode it in; `None` for every other error.
    ///
    /// 3.1.1 asks for return code 0x01 (unacceptable protocol version), 5.0 for reason
    /// code 0x84; a client can only read the CONNACK of its own layout, so a level below
    /// 5 gets the 3.1.1 one (which is also 3.1's) and a level from 5 up the 5.0 one.
    pub fn connack_refusal(&self) -> Option<(Version, Connack)> {
        let WireError::UnsupportedProtocol { level, .. } = self else { return None };
        let version = if *level >= 5 { Version::V5_0 } else { Version::V3_1_1 };
        let connack = Connack {
            session_present: false,
            reason: ReasonCode::UnsupportedProtocolVersion,
            properties: Properties::new(),
        };
        Some((version, connack))
    }
}

/// Longest excerpt of peer input quoted in an error, in characters.
const EXCERPT_CHARS: usize = 64;

/// `text` truncated to [`EXCERPT_CHARS`] characters, for an error message.
pub(crate) fn excerpt(text: &str) -> String {
    text.chars().take(EXCERPT_CHARS).collect()
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn unsupported_levels_are_refused_in_the_layout_the_client_reads() {
        let old = WireError::UnsupportedProtocol { name: "MQTT".into(), level: 3 };
        let (version, connack) = old.connack_refusal().expect("a refusal");
        assert_eq!(version, Version::V3_1_1);
        assert_eq!(connack.reason, ReasonCode::UnsupportedProtocolVersion);
        let new = WireError::UnsupportedProtocol { name: "MQTT".into(), level: 6 };
        assert_eq!(new.connack_refusal().map(|(v, _)| v), Some(Version::V5_0));
        assert_eq!(new.disconnect_reason(), ReasonCode::UnsupportedProtocolVersion);
        assert_eq!(WireError::DupWithQos0.connack_refusal(), None);
    }

    #[test]
    fn errors_map_onto_the_spec_s_reason_codes() {
        assert_eq!(WireError::VariableIntTooLong.disconnect_reason(), ReasonCode::MalformedPacket);
        assert_eq!(
            WireError::ZeroPacketId { packet: PacketType::Subscribe }.disconnect_reason(),
            ReasonCode::ProtocolError
        );
        assert_eq!(
            WireError::PacketTooLarge { size: 10, max: 5 }.disconnect_reason(),
            ReasonCode::PacketTooLarge
        );
        let alias_zero =
            WireError::InvalidPropertyValue { property: PropertyId::TopicAlias, value: 0 };
        assert_eq!(alias_zero.disconnect_reason(), ReasonCode::TopicAliasInvalid);
        let receive_zero =
            WireError::InvalidPropertyValue { property: PropertyId::ReceiveMaximum, value: 0 };
        assert_eq!(receive_zero.disconnect_reason(), ReasonCode::ProtocolError);
    }

    #[test]
    fn messages_read_as_sentences() {
        let text = WireError::PacketTooLarge { size: 2_000_000, max: 1_048_576 }.to_string();
        assert!(text.starts_with("MQTT packet of 2000000 bytes exceeds the maximum packet size"));
        let text = WireError::InvalidFlags { packet: PacketType::Subscribe, flags: 0 }.to_string();
        assert_eq!(text, "invalid fixed-header flags 0b0000 for SUBSCRIBE");
    }
}
