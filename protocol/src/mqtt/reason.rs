//! [`ReasonCode`]: MQTT 5.0's one-byte outcomes (spec 2.4), and [`ConnectReturnCode`], the
//! CONNACK return codes of 3.1 and 3.1.1.
//!
//! A packet carries the codes of its own table only: [`ReasonCode::allowed_in`] holds the
//! tables of the spec's sections 3.2.2.2 (CONNACK), 3.4.2.1 (PUBACK), 3.5.2.1 (PUBREC),
//! 3.6.2.1 (PUBREL), 3.7.2.1 (PUBCOMP), 3.9.3 (SUBACK), 3.11.3 (UNSUBACK), 3.14.2.1
//! (DISCONNECT) and 3.15.2.1 (AUTH).

use std::fmt;

use super::packet::PacketType;

macro_rules! reason_codes {
    ($( $(#[$doc:meta])* $name:ident = $value:literal, $text:literal; )*) => {
        /// An MQTT 5.0 reason code, with the spec's numeric value as its discriminant.
        ///
        /// Values below 0x80 report success, values from 0x80 up failure. 0x00 has three
        /// names in the spec (Success, Normal disconnection, Granted QoS 0): here it is
        /// [`ReasonCode::Success`].
        #[derive(Debug, Clone, Copy, PartialEq, Eq, Hash, Default)]
        #[repr(u8)]
        pub enum ReasonCode {
            $( $(#[$doc])* $name = $value, )*
        }

        impl ReasonCode {
            /// The reason code of a byte, if the spec defines one with that value.
            pub fn from_u8(value: u8) -> Option<ReasonCode> {
                match value {
                    $( $value => Some(ReasonCode::$name), )*
                    _ => None,
                }
            }

            /// The spec's name for the code.
            pub fn description(self) -> &'static str {
                match self {
                    $( ReasonCode::$name => $text, )*
                }
            }
        }
    };
}

reason_codes! {
    /// 0x00: success; normal disconnection; granted QoS 0.
    #[default]
    Success = 0x00, "Success";
    /// 0x01: granted QoS 1 (SUBACK).
    GrantedQos1 = 0x01, "Granted QoS 1";
    /// 0x02: granted QoS 2 (SUBACK).
    GrantedQos2 = 0x02, "Granted QoS 2";
    /// 0x04: disconnect and publish the will message (DISCONNECT from a client).
    DisconnectWithWillMessage = 0x04, "Disconnect with Will Message";
    /// 0x10: accepted, but nobody subscribes to the topic (PUBACK, PUBREC).
    NoMatchingSubscribers = 0x10, "No matching subscribers";
    /// 0x11: there was no such subscription (UNSUBACK).
    NoSubscriptionExisted = 0x11, "No subscription existed";
    /// 0x18: continue the authentication exchange (AUTH).
    ContinueAuthentication = 0x18, "Continue authentication";
    /// 0x19: start re-authentication (AUTH from a client).
    ReAuthenticate = 0x19, "Re-authenticate";
    /// 0x80: an error the sender does not want to name.
    UnspecifiedError = 0x80, "Unspecified error";
    /// 0x81: the packet could not be parsed.
    MalformedPacket = 0x81, "Malformed Packet";
    /// 0x82: the packet parsed but breaks the protocol.
    ProtocolError = 0x82, "Protocol Error";
    /// 0x83: valid, but refused by this implementation.
    ImplementationSpecificError = 0x83, "Implementation specific error";
    /// 0x84: the server does not speak the CONNECT's protocol version.
    UnsupportedProtocolVersion = 0x84, "Unsupported Protocol Version";
    /// 0x85: the client identifier is not allowed.
    ClientIdentifierNotValid = 0x85, "Client Identifier not valid";
    /// 0x86: the user name or password is wrong.
    BadUserNameOrPassword = 0x86, "Bad User Name or Password";
    /// 0x87: not authorized.
    NotAuthorized = 0x87, "Not authorized";
    /// 0x88: the server is not available.
    ServerUnavailable = 0x88, "Server unavailable";
    /// 0x89: the server is busy; try later.
    ServerBusy = 0x89, "Server busy";
    /// 0x8A: this client is banned.
    Banned = 0x8A, "Banned";
    /// 0x8B: the server is shutting down.
    ServerShuttingDown = 0x8B, "Server shutting down";
    /// 0x8C: the authentication method is not supported or does not match.
    BadAuthenticationMethod = 0x8C, "Bad authentication method";
    /// 0x8D: nothing arrived within 1.5 times the keep alive.
    KeepAliveTimeout = 0x8D, "Keep Alive timeout";
    /// 0x8E: another connection with the same client identifier took the session over.
    SessionTakenOver = 0x8E, "Session taken over";
    /// 0x8F: the topic filter is well formed but not accepted.
    TopicFilterInvalid = 0x8F, "Topic Filter invalid";
    /// 0x90: the topic name is well formed but not accepted.
    TopicNameInvalid = 0x90, "Topic Name invalid";
    /// 0x91: the packet identifier is already in use.
    PacketIdentifierInUse = 0x91, "Packet Identifier in use";
    /// 0x92: the packet identifier is not known.
    PacketIdentifierNotFound = 0x92, "Packet Identifier not found";
    /// 0x93: more QoS 1 and 2 publications in flight than the receive maximum.
    ReceiveMaximumExceeded = 0x93, "Receive Maximum exceeded";
    /// 0x94: the topic alias is out of range or unknown.
    TopicAliasInvalid = 0x94, "Topic Alias invalid";
    /// 0x95: the packet exceeds the maximum packet size.
    PacketTooLarge = 0x95, "Packet too large";
    /// 0x96: messages arrive faster than allowed.
    MessageRateTooHigh = 0x96, "Message rate too high";
    /// 0x97: a quota is exceeded.
    QuotaExceeded = 0x97, "Quota exceeded";
    /// 0x98: closed by an administrator.
    AdministrativeAction = 0x98, "Administrative action";
    /// 0x99: the payload does not match its payload format indicator.
    PayloadFormatInvalid = 0x99, "Payload format invalid";
    /// 0x9A: retained messages are not supported.
    RetainNotSupported = 0x9A, "Retain not supported";
    /// 0x9B: the QoS is above the server's maximum.
    QosNotSupported = 0x9B, "QoS not supported";
    /// 0x9C: use another server for now (Server Reference names it).
    UseAnotherServer = 0x9C, "Use another server";
    /// 0x9D: use another server from now on (Server Reference names it).
    ServerMoved = 0x9D, "Server moved";
    /// 0x9E: shared subscriptions are not supported.
    SharedSubscriptionsNotSupported = 0x9E, "Shared Subscriptions not supported";
    /// 0x9F: connections arrive faster than allowed.
    ConnectionRateExceeded = 0x9F, "Connection rate exceeded";
    /// 0xA0: the connection lasted its maximum time.
    MaximumConnectTime = 0xA0, "Maximum connect time";
    /// 0xA1: subscription identifiers are not supported.
    SubscriptionIdentifiersNotSupported = 0xA1, "Subscription Identifiers not supported";
    /// 0xA2: wildcard subscriptions are not supported.
    WildcardSubscriptionsNotSupported = 0xA2, "Wildcard Subscriptions not supported";
}

impl ReasonCode {
    /// The value on the wire.
    pub fn as_u8(self) -> u8 {
        self as u8
    }

    /// Whether the code reports a failure (0x80 and above).
    pub fn is_error(self) -> bool {
        self.as_u8() >= 0x80
    }

    /// Whether a packet of type `packet` may carry this code (in MQTT 5.0); false for the
    /// packets without reason codes.
    pub fn allowed_in(self, packet: PacketType) -> bool {
        use ReasonCode::*;
        match packet {
            PacketType::Connack => matches!(
                self,
                Success
                    | UnspecifiedError
                    | MalformedPacket
                    | ProtocolError
                    | ImplementationSpecificError
                    | UnsupportedProtocolVersion
                    | ClientIdentifierNotValid
                    | BadUserNameOrPassword
                    | NotAuthorized
                    | ServerUnavailable
                    | ServerBusy
                    | Banned
                    | BadAuthenticationMethod
                    | TopicNameInvalid
                    | PacketTooLarge
                    | QuotaExceeded
                    | PayloadFormatInvalid
                    | RetainNotSupported
                    | QosNotSupported
                    | UseAnotherServer
                    | ServerMoved
                    | ConnectionRateExceeded
            ),
            PacketType::Puback | PacketType::Pubrec => matches!(
                self,
                Success
                    | NoMatchingSubscribers
                    | UnspecifiedError
                    | ImplementationSpecificError
                    | NotAuthorized
                    | TopicNameInvalid
                    | PacketIdentifierInUse
                    | QuotaExceeded
                    | PayloadFormatInvalid
            ),
            PacketType::Pubrel | PacketType::Pubcomp => {
                matches!(self, Success | PacketIdentifierNotFound)
            }
            PacketType::Suback => matches!(
                self,
                Success
                    | GrantedQos1
                    | GrantedQos2
                    | UnspecifiedError
                    | ImplementationSpecificError
                    | NotAuthorized
                    | TopicFilterInvalid
                    | PacketIdentifierInUse
                    | QuotaExceeded
                    | SharedSubscriptionsNotSupported
                    | SubscriptionIdentifiersNotSupported
                    | WildcardSubscriptionsNotSupported
            ),
            PacketType::Unsuback => matches!(
                self,
                Success
                    | NoSubscriptionExisted
                    | UnspecifiedError
                    | ImplementationSpecificError
                    | NotAuthorized
                    | TopicFilterInvalid
                    | PacketIdentifierInUse
            ),
            PacketType::Disconnect => matches!(
                self,
                Success
                    | DisconnectWithWillMessage
                    | UnspecifiedError
                    | MalformedPacket
                    | ProtocolError
                    | ImplementationSpecificError
                    | NotAuthorized
                    | ServerBusy
                    | ServerShuttingDown
                    | KeepAliveTimeout
                    | SessionTakenOver
                    | TopicFilterInvalid
                    | TopicNameInvalid
                    | ReceiveMaximumExceeded
                    | TopicAliasInvalid
                    | PacketTooLarge
                    | MessageRateTooHigh
                    | QuotaExceeded
                    | AdministrativeAction
                    | PayloadFormatInvalid
                    | RetainNotSupported
                    | QosNotSupported
                    | UseAnotherServer
                    | ServerMoved
                    | SharedSubscriptionsNotSupported
                    | ConnectionRateExceeded
                    | MaximumConnectTime
                    | SubscriptionIdentifiersNotSupported
                    | WildcardSubscriptionsNotSupported
            ),
            PacketType::Auth => matches!(self, Success | ContinueAuthentication | ReAuthenticate),
            _ => false,
        }
    }

    /// Whether a 3.1 or 3.1.1 SUBACK may carry this code: the granted QoS 0, 1, 2 or
    /// 0x80, failure (3.1.1 section 3.9.3), which keep their values in 5.0.
    pub(crate) fn allowed_in_v3_suback(self) -> bool {
        matches!(
            self,
            ReasonCode::Success
                | ReasonCode::GrantedQos1
                | ReasonCode::GrantedQos2
                | ReasonCode::UnspecifiedError
        )
    }
}

impl fmt::Display for ReasonCode {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        write!(f, "0x{:02X} ({})", self.as_u8(), self.description())
    }
}

/// The CONNACK return code of MQTT 3.1 and 3.1.1 (3.1.1 section 3.2.2.3).
///
/// [`super::Connack`] carries a [`ReasonCode`] in every version, so that an adapter
/// refuses a client the same way whatever it speaks; each return code has the 5.0 reason
/// code of the same meaning, and the codec converts between them on the wire.
#[derive(Debug, Clone, Copy, PartialEq, Eq, Hash)]
pub enum ConnectReturnCode {
    /// 0: connection accepted.
    Accepted = 0,
    /// 1: the server does not speak the requested protocol level.
    UnacceptableProtocolVersion = 1,
    /// 2: the client identifier is well formed but not allowed.
    IdentifierRejected = 2,
    /// 3: the MQTT service is unavailable.
    ServerUnavailable = 3,
    /// 4: the user name or password is malformed or wrong.
    BadUserNameOrPassword = 4,
    /// 5: the client is not authorized to connect.
    NotAuthorized = 5,
}

impl ConnectReturnCode {
    /// The return code of a byte; 6 to 255 are reserved.
    pub fn from_u8(value: u8) -> Option<ConnectReturnCode> {
        Some(match value {
            0 => ConnectReturnCode::Accepted,
            1 => ConnectReturnCode::UnacceptableProtocolVersion,
            2 => ConnectReturnCode::IdentifierRejected,
            3 => ConnectReturnCode::ServerUnavailable,
            4 => ConnectReturnCode::BadUserNameOrPassword,
            5 => ConnectReturnCode::NotAuthorized,
            _ => return None,
        })
    }

    /// The value on the wire.
    pub fn as_u8(self) -> u8 {
        self as u8
    }

    /// The return code with the meaning of `reason`, if 3.1.1 has one.
    pub fn from_reason(reason: ReasonCode) -> Option<ConnectReturnCode> {
        Some(match reason {
            ReasonCode::Success => ConnectReturnCode::Accepted,
            ReasonCode::UnsupportedProtocolVersion => {
                ConnectReturnCode::UnacceptableProtocolVersion
            }
            ReasonCode::ClientIdentifierNotValid => ConnectReturnCode::IdentifierRejected,
            ReasonCode::ServerUnavailable => ConnectReturnCode::ServerUnavailable,
            ReasonCode::BadUserNameOrPassword => ConnectReturnCode::BadUserNameOrPassword,
            ReasonCode::NotAuthorized => ConnectReturnCode::NotAuthorized,
            _ => return None,
        })
    }

    /// The 5.0 reason code of the same meaning.
    pub fn reason(self) -> ReasonCode {
        match self {
            ConnectReturnCode::Accepted => ReasonCode::Success,
            ConnectReturnCode::UnacceptableProtocolVersion => {
                ReasonCode::UnsupportedProtocolVersion
            }
            ConnectReturnCode::IdentifierRejected => ReasonCode::ClientIdentifierNotValid,
            ConnectReturnCode::ServerUnavailable => ReasonCode::ServerUnavailable,
            ConnectReturnCode::BadUserNameOrPassword => ReasonCode::BadUserNameOrPassword,
            ConnectReturnCode::NotAuthorized => ReasonCode::NotAuthorized,
        }
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn every_byte_round_trips_through_its_reason_code() {
        let mut defined = 0;
        for byte in 0..=255u8 {
            if let Some(code) = ReasonCode::from_u8(byte) {
                assert_eq!(code.as_u8(), byte);
                defined += 1;
            }
        }
        assert_eq!(defined, 43, "the spec's table 2-6 has 43 distinct values");
    }

    #[test]
    fn return_codes_map_onto_reason_codes_and_back() {
        for byte in 0..=5 {
            let code = ConnectReturnCode::from_u8(byte).expect("defined");
            assert_eq!(ConnectReturnCode::from_reason(code.reason()), Some(code));
        }
        assert_eq!(ConnectReturnCode::from_u8(6), None);
        assert_eq!(ConnectReturnCode::from_reason(ReasonCode::Banned), None);
    }

    #[test]
    fn tables_follow_the_spec() {
        assert!(ReasonCode::PacketIdentifierNotFound.allowed_in(PacketType::Pubrel));
        assert!(!ReasonCode::NoMatchingSubscribers.allowed_in(PacketType::Pubcomp));
        assert!(ReasonCode::GrantedQos2.allowed_in(PacketType::Suback));
        assert!(!ReasonCode::GrantedQos2.allowed_in(PacketType::Connack));
        assert!(ReasonCode::DisconnectWithWillMessage.allowed_in(PacketType::Disconnect));
        assert!(!ReasonCode::Success.allowed_in(PacketType::Publish));
        assert_eq!(ReasonCode::PacketTooLarge.to_string(), "0x95 (Packet too large)");
    }
}
