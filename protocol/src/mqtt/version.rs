//! [`Version`]: the three MQTT protocol versions, and [`QoS`], the delivery guarantees.

use std::fmt;

/// An MQTT protocol version, as a CONNECT names it (protocol name and level).
///
/// The version decides the layout of every other packet (5.0 adds reason codes and
/// properties almost everywhere), so a [`super::Codec`] must know it before it decodes
/// anything but a CONNECT. Ordered, oldest first.
#[derive(Debug, Clone, Copy, PartialEq, Eq, PartialOrd, Ord, Hash)]
pub enum Version {
    /// MQTT 3.1 (IBM, 2010): protocol name `MQIsdp`, level 3.
    V3_1,
    /// MQTT 3.1.1 (OASIS, 2014): protocol name `MQTT`, level 4.
    V3_1_1,
    /// MQTT 5.0 (OASIS, 2019): protocol name `MQTT`, level 5.
    V5_0,
}

impl Version {
    /// Every version, oldest first.
    pub const ALL: [Version; 3] = [Version::V3_1, Version::V3_1_1, Version::V5_0];

    /// The protocol name a CONNECT of this version carries.
    pub fn protocol_name(self) -> &'static str {
        match self {
            Version::V3_1 => "MQIsdp",
            Version::V3_1_1 | Version::V5_0 => "MQTT",
        }
    }

    /// The protocol level byte of a CONNECT of this version.
    pub fn level(self) -> u8 {
        match self {
            Version::V3_1 => 3,
            Version::V3_1_1 => 4,
            Version::V5_0 => 5,
        }
    }

    /// The version a CONNECT's protocol name and level name, if it is one we speak. The
    /// pair must match: `MQTT` at level 3 or `MQIsdp` at level 4 is no version at all.
    pub fn from_name_and_level(name: &[u8], level: u8) -> Option<Version> {
        Version::ALL
            .into_iter()
            .find(|version| version.protocol_name().as_bytes() == name && version.level() == level)
    }

    /// Whether packets of this version carry reason codes and properties (5.0 only).
    pub(crate) fn is_v5(self) -> bool {
        self == Version::V5_0
    }
}

impl fmt::Display for Version {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        f.write_str(match self {
            Version::V3_1 => "MQTT 3.1",
            Version::V3_1_1 => "MQTT 3.1.1",
            Version::V5_0 => "MQTT 5.0",
        })
    }
}

/// A quality of service: how hard the sender tries to deliver a message.
#[derive(Debug, Clone, Copy, PartialEq, Eq, PartialOrd, Ord, Hash, Default)]
pub enum QoS {
    /// 0: at most once, fire and forget.
    #[default]
    AtMostOnce = 0,
    /// 1: at least once, acknowledged by a PUBACK.
    AtLeastOnce = 1,
    /// 2: exactly once, the PUBREC, PUBREL, PUBCOMP handshake.
    ExactlyOnce = 2,
}

impl QoS {
    /// The QoS of a two-bit field's value; `None` for 3, which no version defines.
    pub fn from_u8(value: u8) -> Option<QoS> {
        match value {
            0 => Some(QoS::AtMostOnce),
            1 => Some(QoS::AtLeastOnce),
            2 => Some(QoS::ExactlyOnce),
            _ => None,
        }
    }

    /// The value on the wire.
    pub fn as_u8(self) -> u8 {
        self as u8
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn names_and_levels_pair_up() {
        assert_eq!(Version::from_name_and_level(b"MQIsdp", 3), Some(Version::V3_1));
        assert_eq!(Version::from_name_and_level(b"MQTT", 4), Some(Version::V3_1_1));
        assert_eq!(Version::from_name_and_level(b"MQTT", 5), Some(Version::V5_0));
        assert_eq!(Version::from_name_and_level(b"MQTT", 3), None);
        assert_eq!(Version::from_name_and_level(b"MQIsdp", 4), None);
        assert_eq!(Version::from_name_and_level(b"mqtt", 4), None);
    }

    #[test]
    fn qos_three_is_not_a_qos() {
        assert_eq!(QoS::from_u8(2), Some(QoS::ExactlyOnce));
        assert_eq!(QoS::from_u8(3), None);
        assert_eq!(QoS::AtLeastOnce.as_u8(), 1);
    }
}
