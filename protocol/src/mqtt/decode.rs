//! Decoding a packet's body, once all of it has arrived, and the checks the spec makes a
//! MUST for the receiver (the encoder runs the same checks, so that what it writes the
//! decoder accepts).

use bytes::Bytes;

use super::error::{excerpt, WireError};
use super::packet::{
    Auth, Connack, Connect, Disconnect, Packet, PacketType, PubAck, Publish, RetainHandling,
    Suback, Subscribe, Subscription, SubscriptionOptions, Unsuback, Unsubscribe, Will,
};
use super::properties::{Place, Properties, PropertyId};
use super::reason::{ConnectReturnCode, ReasonCode};
use super::topic::{self, TopicError};
use super::version::{QoS, Version};
use super::wire::Reader;

/// The CONNECT flags (spec 3.1.2.3), bit by bit.
pub(crate) mod connect_flags {
    pub(crate) const RESERVED: u8 = 0x01;
    pub(crate) const CLEAN_START: u8 = 0x02;
    pub(crate) const WILL: u8 = 0x04;
    pub(crate) const WILL_QOS_SHIFT: u8 = 3;
    pub(crate) const WILL_RETAIN: u8 = 0x20;
    pub(crate) const PASSWORD: u8 = 0x40;
    pub(crate) const USERNAME: u8 = 0x80;
}

/// The PUBLISH fixed-header flags (spec 3.3.1).
pub(crate) mod publish_flags {
    pub(crate) const DUP: u8 = 0x08;
    pub(crate) const QOS_SHIFT: u8 = 1;
    pub(crate) const RETAIN: u8 = 0x01;
}

/// Checks the first byte of a fixed header, which is all a peer must send for the codec
/// to know the packet is wrong: a type the version has, with the flags the spec fixes.
/// Before the version is known only a CONNECT can be decoded.
pub(crate) fn check_first_byte(
    byte: u8,
    version: Option<Version>,
) -> Result<PacketType, WireError> {
    let nibble = byte >> 4;
    let flags = byte & 0x0f;
    let packet = PacketType::from_nibble(nibble).ok_or(WireError::ReservedPacketType(nibble))?;
    match version {
        None if packet != PacketType::Connect => return Err(WireError::VersionUnknown { packet }),
        Some(version) if packet == PacketType::Auth && !version.is_v5() => {
            return Err(WireError::ReservedPacketType(nibble))
        }
        _ => {}
    }
    if packet == PacketType::Publish {
        let qos = (flags >> publish_flags::QOS_SHIFT) & 0b11;
        if qos == 3 {
            return Err(WireError::InvalidQos { what: "the PUBLISH fixed header" });
        }
        if qos == 0 && flags & publish_flags::DUP != 0 {
            return Err(WireError::DupWithQos0);
        }
        return Ok(packet);
    }
    // MQTT 3.1 gave PUBREL, SUBSCRIBE and UNSUBSCRIBE a QoS of 1 and let a resend set
    // DUP: that bit is ignored there.
    let lenient_dup = version == Some(Version::V3_1) && packet.fixed_flags() != 0;
    let checked = if lenient_dup { flags & 0b0111 } else { flags };
    if checked != packet.fixed_flags() {
        return Err(WireError::InvalidFlags { packet, flags });
    }
    Ok(packet)
}

/// Decodes the body of a packet (everything after the fixed header), whose first byte
/// passed [`check_first_byte`]. Every byte must be used.
pub(crate) fn decode_body(
    packet: PacketType,
    flags: u8,
    body: Bytes,
    version: Option<Version>,
) -> Result<Packet, WireError> {
    let mut r = Reader::new(body, packet);
    let decoded = match (packet, version) {
        (PacketType::Connect, _) => Packet::Connect(connect(&mut r)?),
        (_, None) => return Err(WireError::VersionUnknown { packet }),
        (PacketType::Connack, Some(v)) => Packet::Connack(connack(&mut r, v)?),
        (PacketType::Publish, Some(v)) => Packet::Publish(publish(&mut r, flags, v)?),
        (PacketType::Puback, Some(v)) => Packet::Puback(pub_ack(&mut r, v, Place::Puback)?),
        (PacketType::Pubrec, Some(v)) => Packet::Pubrec(pub_ack(&mut r, v, Place::Pubrec)?),
        (PacketType::Pubrel, Some(v)) => Packet::Pubrel(pub_ack(&mut r, v, Place::Pubrel)?),
        (PacketType::Pubcomp, Some(v)) => Packet::Pubcomp(pub_ack(&mut r, v, Place::Pubcomp)?),
        (PacketType::Subscribe, Some(v)) => Packet::Subscribe(subscribe(&mut r, v)?),
        (PacketType::Suback, Some(v)) => Packet::Suback(suback(&mut r, v)?),
        (PacketType::Unsubscribe, Some(v)) => Packet::Unsubscribe(unsubscribe(&mut r, v)?),
        (PacketType::Unsuback, Some(v)) => Packet::Unsuback(unsuback(&mut r, v)?),
        (PacketType::Pingreq, Some(_)) => Packet::Pingreq,
        (PacketType::Pingresp, Some(_)) => Packet::Pingresp,
        (PacketType::Disconnect, Some(v)) => {
            let (reason, properties) = reason_and_properties(&mut r, v, Place::Disconnect)?;
            Packet::Disconnect(Disconnect { reason, properties })
        }
        (PacketType::Auth, Some(v)) => {
            let (reason, properties) = reason_and_properties(&mut r, v, Place::Auth)?;
            check_auth(reason, &properties)?;
            Packet::Auth(Auth { reason, properties })
        }
    };
    r.finish()?;
    Ok(decoded)
}

fn read_properties(
    r: &mut Reader,
    version: Version,
    place: Place,
) -> Result<Properties, WireError> {
    if version.is_v5() {
        Properties::read(r, place)
    } else {
        Ok(Properties::new())
    }
}

fn packet_id(r: &mut Reader) -> Result<u16, WireError> {
    let id = r.u16("the packet identifier")?;
    check_packet_id(id, r.packet())
}

/// Spec 2.2.1: packet identifiers are non-zero.
pub(crate) fn check_packet_id(id: u16, packet: PacketType) -> Result<u16, WireError> {
    if id == 0 {
        return Err(WireError::ZeroPacketId { packet });
    }
    Ok(id)
}

/// A reason code byte, checked against the packet's table in `version`.
fn reason_code(r: &mut Reader, version: Version) -> Result<ReasonCode, WireError> {
    let code = r.u8("the reason code")?;
    let packet = r.packet();
    ReasonCode::from_u8(code)
        .filter(|reason| reason_allowed(*reason, packet, version))
        .ok_or(WireError::InvalidReasonCode { packet, code, version })
}

/// Whether `packet` may carry `reason` in `version`. Before 5.0 only CONNACK (through
/// its return codes) and SUBACK have codes; every other packet "carries" success.
pub(crate) fn reason_allowed(reason: ReasonCode, packet: PacketType, version: Version) -> bool {
    match (version.is_v5(), packet) {
        (true, _) => reason.allowed_in(packet),
        (false, PacketType::Connack) => ConnectReturnCode::from_reason(reason).is_some(),
        (false, PacketType::Suback) => reason.allowed_in_v3_suback(),
        (false, _) => reason == ReasonCode::Success,
    }
}

fn connect(r: &mut Reader) -> Result<Connect, WireError> {
    use connect_flags::*;
    let name = r.binary("the protocol name")?;
    let level = r.u8("the protocol level")?;
    let version = Version::from_name_and_level(&name, level).ok_or_else(|| {
        WireError::UnsupportedProtocol { name: excerpt(&String::from_utf8_lossy(&name)), level }
    })?;
    let flags = r.u8("the connect flags")?;
    if flags & RESERVED != 0 {
        return Err(WireError::ReservedConnectFlag);
    }
    let has_will = flags & WILL != 0;
    let will_qos = (flags >> WILL_QOS_SHIFT) & 0b11;
    let will_retain = flags & WILL_RETAIN != 0;
    if !has_will && (will_qos != 0 || will_retain) {
        return Err(WireError::InvalidWillFlags { flags });
    }
    let will_qos =
        QoS::from_u8(will_qos).ok_or(WireError::InvalidQos { what: "the CONNECT's will flags" })?;
    let has_username = flags & USERNAME != 0;
    let has_password = flags & PASSWORD != 0;
    if has_password && !has_username && !version.is_v5() {
        return Err(WireError::PasswordWithoutUsername { version });
    }
    let keep_alive = r.u16("the keep alive")?;
    let properties = read_properties(r, version, Place::Connect)?;
    check_connect_properties(&properties)?;
    let client_id = r.string("the client identifier")?;
    let will = if has_will {
        let properties = read_properties(r, version, Place::Will)?;
        let topic = r.string("the will topic")?;
        check_topic_name(&topic)?;
        let payload = r.binary("the will payload")?;
        Some(Will { topic, payload, qos: will_qos, retain: will_retain, properties })
    } else {
        None
    };
    let username = has_username.then(|| r.string("the user name")).transpose()?;
    let password = has_password.then(|| r.binary("the password")).transpose()?;
    Ok(Connect {
        version,
        clean_start: flags & CLEAN_START != 0,
        keep_alive,
        client_id,
        will,
        username,
        password,
        properties,
    })
}

/// Spec 3.1.2.11.10: authentication data only with an authentication method.
pub(crate) fn check_connect_properties(properties: &Properties) -> Result<(), WireError> {
    if properties.get(PropertyId::AuthenticationData).is_some()
        && properties.get(PropertyId::AuthenticationMethod).is_none()
    {
        return Err(WireError::AuthenticationDataWithoutMethod);
    }
    Ok(())
}

/// Spec 3.15.2.2.2: omitting the authentication method is a Protocol Error; the empty
/// short form (success, no properties, 3.15.2.1) is the one AUTH without it.
pub(crate) fn check_auth(reason: ReasonCode, properties: &Properties) -> Result<(), WireError> {
    let short_form = reason == ReasonCode::Success && properties.is_empty();
    if !short_form && properties.get(PropertyId::AuthenticationMethod).is_none() {
        return Err(WireError::AuthenticationMethodMissing);
    }
    Ok(())
}

fn connack(r: &mut Reader, version: Version) -> Result<Connack, WireError> {
    let flags = r.u8("the acknowledge flags")?;
    // MQTT 3.1 reserved the byte; its servers send 0, so 3.1.1's rule reads it too.
    if flags & !0x01 != 0 {
        return Err(WireError::InvalidConnackFlags(flags));
    }
    let code = r.u8("the reason code")?;
    let invalid = WireError::InvalidReasonCode { packet: PacketType::Connack, code, version };
    let reason = if version.is_v5() {
        ReasonCode::from_u8(code).filter(|reason| reason.allowed_in(PacketType::Connack))
    } else {
        ConnectReturnCode::from_u8(code).map(ConnectReturnCode::reason)
    }
    .ok_or(invalid)?;
    let properties = read_properties(r, version, Place::Connack)?;
    Ok(Connack { session_present: flags & 0x01 != 0, reason, properties })
}

fn publish(r: &mut Reader, flags: u8, version: Version) -> Result<Publish, WireError> {
    let qos = QoS::from_u8((flags >> publish_flags::QOS_SHIFT) & 0b11)
        .ok_or(WireError::InvalidQos { what: "the PUBLISH fixed header" })?;
    let topic = r.string("the topic name")?;
    let packet_id = if qos == QoS::AtMostOnce { None } else { Some(packet_id(r)?) };
    let properties = read_properties(r, version, Place::Publish)?;
    check_publish_topic(&topic, &properties, version)?;
    Ok(Publish {
        dup: flags & publish_flags::DUP != 0,
        qos,
        retain: flags & publish_flags::RETAIN != 0,
        topic,
        packet_id,
        properties,
        payload: r.rest(),
    })
}

/// A topic name as a will or a PUBLISH carries it.
pub(crate) fn check_topic_name(topic: &str) -> Result<(), WireError> {
    topic::validate_topic_name(topic)
        .map_err(|error| WireError::InvalidTopicName { topic: excerpt(topic), error })
}

/// A PUBLISH's topic: a valid name, or in 5.0 the empty name with a topic alias.
pub(crate) fn check_publish_topic(
    topic: &str,
    properties: &Properties,
    version: Version,
) -> Result<(), WireError> {
    if topic.is_empty() && version.is_v5() {
        if properties.topic_alias().is_none() {
            return Err(WireError::EmptyTopicWithoutAlias);
        }
        return Ok(());
    }
    check_topic_name(topic)
}

/// A SUBSCRIBE's or UNSUBSCRIBE's filter: valid syntax. Returns whether it is a shared
/// subscription (5.0). A `$share/` filter's form (its share name, the filter after it) is the
/// server's to judge: it refuses a bad one with the SUBACK's Topic Filter invalid (0x8F), for
/// that one subscription, rather than closing the connection over a malformed packet.
pub(crate) fn check_filter(filter: &str, version: Version) -> Result<bool, WireError> {
    if filter.starts_with(topic::SHARE_PREFIX) {
        return Ok(version.is_v5());
    }
    let invalid =
        |error: TopicError| WireError::InvalidTopicFilter { filter: excerpt(filter), error };
    topic::validate_topic_filter(filter).map_err(invalid)?;
    Ok(false)
}

fn pub_ack(r: &mut Reader, version: Version, place: Place) -> Result<PubAck, WireError> {
    let packet_id = packet_id(r)?;
    let (reason, properties) = reason_and_properties(r, version, place)?;
    Ok(PubAck { packet_id, reason, properties })
}

/// The optional tail of 5.0's PUBACK, PUBREC, PUBREL, PUBCOMP, DISCONNECT and AUTH: no
/// more bytes means success without properties, a reason code alone means no properties
/// (spec 3.4.2.2.1, 3.14.2.2.1; AUTH has only the first, 3.15.2.1). Before 5.0 there
/// is nothing.
fn reason_and_properties(
    r: &mut Reader,
    version: Version,
    place: Place,
) -> Result<(ReasonCode, Properties), WireError> {
    if !version.is_v5() || r.is_empty() {
        return Ok((ReasonCode::Success, Properties::new()));
    }
    let reason = reason_code(r, version)?;
    // AUTH has only the empty short form: a reason code is followed by properties.
    let properties = if r.is_empty() && place != Place::Auth {
        Properties::new()
    } else {
        Properties::read(r, place)?
    };
    Ok((reason, properties))
}

fn subscribe(r: &mut Reader, version: Version) -> Result<Subscribe, WireError> {
    let packet_id = packet_id(r)?;
    let properties = read_properties(r, version, Place::Subscribe)?;
    let mut filters = Vec::new();
    while !r.is_empty() {
        let filter = r.string("a topic filter")?;
        let options = subscription_options(r.u8("the subscription options")?, version)?;
        check_subscription(&filter, &options, version)?;
        filters.push(Subscription { filter, options });
    }
    if filters.is_empty() {
        return Err(WireError::NoTopicFilters { packet: PacketType::Subscribe });
    }
    Ok(Subscribe { packet_id, filters, properties })
}

/// A subscription's filter, and its options against it: no No Local on a shared one.
pub(crate) fn check_subscription(
    filter: &str,
    options: &SubscriptionOptions,
    version: Version,
) -> Result<(), WireError> {
    let shared = check_filter(filter, version)?;
    if shared && options.no_local {
        return Err(WireError::NoLocalOnSharedSubscription { filter: excerpt(filter) });
    }
    Ok(())
}

/// The subscription options bits (spec 3.8.3.1).
pub(crate) mod options_bits {
    pub(crate) const QOS: u8 = 0b0000_0011;
    pub(crate) const NO_LOCAL: u8 = 0b0000_0100;
    pub(crate) const RETAIN_AS_PUBLISHED: u8 = 0b0000_1000;
    pub(crate) const RETAIN_HANDLING_SHIFT: u8 = 4;
    pub(crate) const RESERVED_V5: u8 = 0b1100_0000;
    pub(crate) const RESERVED_V3: u8 = 0b1111_1100;
}

fn subscription_options(byte: u8, version: Version) -> Result<SubscriptionOptions, WireError> {
    use options_bits::*;
    let reserved = if version.is_v5() { RESERVED_V5 } else { RESERVED_V3 };
    if byte & reserved != 0 {
        return Err(WireError::ReservedSubscriptionOptions(byte));
    }
    let qos = QoS::from_u8(byte & QOS)
        .ok_or(WireError::InvalidQos { what: "a subscription's options" })?;
    let retain_handling = match (byte >> RETAIN_HANDLING_SHIFT) & 0b11 {
        0 => RetainHandling::SendAtSubscribe,
        1 => RetainHandling::SendAtNewSubscribe,
        2 => RetainHandling::DoNotSend,
        _ => return Err(WireError::InvalidRetainHandling),
    };
    Ok(SubscriptionOptions {
        qos,
        no_local: byte & NO_LOCAL != 0,
        retain_as_published: byte & RETAIN_AS_PUBLISHED != 0,
        retain_handling,
    })
}

fn suback(r: &mut Reader, version: Version) -> Result<Suback, WireError> {
    let packet_id = packet_id(r)?;
    let properties = read_properties(r, version, Place::Suback)?;
    let mut reasons = Vec::with_capacity(r.remaining());
    while !r.is_empty() {
        reasons.push(reason_code(r, version)?);
    }
    Ok(Suback { packet_id, reasons, properties })
}

fn unsubscribe(r: &mut Reader, version: Version) -> Result<Unsubscribe, WireError> {
    let packet_id = packet_id(r)?;
    let properties = read_properties(r, version, Place::Unsubscribe)?;
    let mut filters = Vec::new();
    while !r.is_empty() {
        let filter = r.string("a topic filter")?;
        check_filter(&filter, version)?;
        filters.push(filter);
    }
    if filters.is_empty() {
        return Err(WireError::NoTopicFilters { packet: PacketType::Unsubscribe });
    }
    Ok(Unsubscribe { packet_id, filters, properties })
}

fn unsuback(r: &mut Reader, version: Version) -> Result<Unsuback, WireError> {
    let packet_id = packet_id(r)?;
    let properties = read_properties(r, version, Place::Unsuback)?;
    let mut reasons = Vec::new();
    if version.is_v5() {
        reasons.reserve(r.remaining());
        while !r.is_empty() {
            reasons.push(reason_code(r, version)?);
        }
    }
    Ok(Unsuback { packet_id, reasons, properties })
}
