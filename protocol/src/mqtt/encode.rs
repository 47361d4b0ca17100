//! Encoding packets. Each packet is checked against the same rules the decoder applies
//! (and against the version: a field 3.1.1 does not have is an error, not dropped), so
//! what encodes decodes to the same packet. Optional 5.0 fields take their shortest form.

use bytes::{BufMut, BytesMut};

use super::decode::{
    check_auth, check_connect_properties, check_filter, check_packet_id, check_publish_topic,
    check_subscription, check_topic_name, connect_flags, options_bits, publish_flags,
    reason_allowed,
};
use super::error::WireError;
use super::packet::{
    Connack, Connect, Packet, PacketType, PubAck, Publish, RetainHandling, Suback, Subscribe,
    SubscriptionOptions, Unsuback, Unsubscribe,
};
use super::properties::{Place, Properties};
use super::reason::{ConnectReturnCode, ReasonCode};
use super::version::{QoS, Version};
use super::wire::{self, MAX_VARIABLE_INT};

/// Room left for the remaining length, which is known only once the body is written.
const LENGTH_ROOM: usize = 4;

/// Writes `packet` in `version` to the end of `dst`, refusing it if the whole packet would
/// be larger than `max_size`. On error `dst` may hold part of the packet: the caller
/// truncates it.
///
/// The variable header and payload are written after room for the longest remaining
/// length; once their size is known the remaining length is written and the body moved
/// up to meet it. A PUBLISH payload is appended only after that, so it is copied once.
pub(crate) fn encode_packet(
    packet: &Packet,
    version: Version,
    max_size: u32,
    dst: &mut BytesMut,
) -> Result<(), WireError> {
    let start = dst.len();
    dst.put_u8(first_byte(packet));
    dst.put_bytes(0, LENGTH_ROOM);
    let body_start = dst.len();
    let tail: &[u8] = match packet {
        Packet::Connect(connect) => {
            write_connect(connect, dst)?;
            &[]
        }
        Packet::Connack(connack) => {
            write_connack(connack, version, dst)?;
            &[]
        }
        Packet::Publish(publish) => {
            write_publish_header(publish, version, dst)?;
            &publish.payload
        }
        Packet::Puback(ack) | Packet::Pubrec(ack) | Packet::Pubrel(ack) | Packet::Pubcomp(ack) => {
            write_pub_ack(ack, version, packet.packet_type(), dst)?;
            &[]
        }
        Packet::Subscribe(subscribe) => {
            write_subscribe(subscribe, version, dst)?;
            &[]
        }
        Packet::Suback(suback) => {
            write_suback(suback, version, dst)?;
            &[]
        }
        Packet::Unsubscribe(unsubscribe) => {
            write_unsubscribe(unsubscribe, version, dst)?;
            &[]
        }
        Packet::Unsuback(unsuback) => {
            write_unsuback(unsuback, version, dst)?;
            &[]
        }
        Packet::Pingreq | Packet::Pingresp => &[],
        Packet::Disconnect(disconnect) => {
            let (reason, properties) = (disconnect.reason, &disconnect.properties);
            write_reason_and_properties(reason, properties, version, Place::Disconnect, dst)?;
            &[]
        }
        Packet::Auth(auth) => {
            if !version.is_v5() {
                return Err(WireError::NotInVersion { what: "AUTH", version });
            }
            check_auth(auth.reason, &auth.properties)?;
            write_reason_and_properties(auth.reason, &auth.properties, version, Place::Auth, dst)?;
            &[]
        }
    };
    let remaining = dst.len() - body_start + tail.len();
    let remaining = u32::try_from(remaining)
        .ok()
        .filter(|&remaining| remaining <= MAX_VARIABLE_INT)
        .ok_or(WireError::PacketTooLarge {
            size: (1 + LENGTH_ROOM + remaining) as u64,
            max: u64::from(MAX_VARIABLE_INT) + 1 + LENGTH_ROOM as u64,
        })?;
    let (length, length_len) = wire::variable_int_bytes(remaining);
    let size = 1 + length_len as u64 + u64::from(remaining);
    if size > u64::from(max_size) {
        return Err(WireError::PacketTooLarge { size, max: u64::from(max_size) });
    }
    let length_end = start + 1 + length_len;
    if length_len < LENGTH_ROOM {
        dst.copy_within(body_start.., length_end);
        dst.truncate(dst.len() - (LENGTH_ROOM - length_len));
    }
    dst[start + 1..length_end].copy_from_slice(&length[..length_len]);
    dst.put_slice(tail);
    Ok(())
}

fn first_byte(packet: &Packet) -> u8 {
    let packet_type = packet.packet_type();
    let flags = match packet {
        Packet::Publish(publish) => {
            (u8::from(publish.dup) * publish_flags::DUP)
                | (publish.qos.as_u8() << publish_flags::QOS_SHIFT)
                | (u8::from(publish.retain) * publish_flags::RETAIN)
        }
        _ => packet_type.fixed_flags(),
    };
    (packet_type as u8) << 4 | flags
}

/// Properties in 5.0; before it, an error unless there are none.
fn write_properties(
    properties: &Properties,
    version: Version,
    place: Place,
    dst: &mut BytesMut,
) -> Result<(), WireError> {
    if version.is_v5() {
        return properties.write(dst, place);
    }
    if !properties.is_empty() {
        return Err(WireError::NotInVersion { what: "properties", version });
    }
    Ok(())
}

fn check_reason(reason: ReasonCode, packet: PacketType, version: Version) -> Result<(), WireError> {
    if !reason_allowed(reason, packet, version) {
        return Err(WireError::InvalidReasonCode { packet, code: reason.as_u8(), version });
    }
    Ok(())
}

fn write_connect(connect: &Connect, dst: &mut BytesMut) -> Result<(), WireError> {
    use connect_flags::*;
    let version = connect.version;
    if connect.password.is_some() && connect.username.is_none() && !version.is_v5() {
        return Err(WireError::PasswordWithoutUsername { version });
    }
    check_connect_properties(&connect.properties)?;
    let mut flags = 0;
    if connect.clean_start {
        flags |= CLEAN_START;
    }
    if let Some(will) = &connect.will {
        flags |= WILL | (will.qos.as_u8() << WILL_QOS_SHIFT);
        if will.retain {
            flags |= WILL_RETAIN;
        }
    }
    if connect.username.is_some() {
        flags |= USERNAME;
    }
    if connect.password.is_some() {
        flags |= PASSWORD;
    }
    wire::put_string(dst, version.protocol_name(), "the protocol name")?;
    dst.put_u8(version.level());
    dst.put_u8(flags);
    dst.put_u16(connect.keep_alive);
    write_properties(&connect.properties, version, Place::Connect, dst)?;
    wire::put_string(dst, &connect.client_id, "the client identifier")?;
    if let Some(will) = &connect.will {
        write_properties(&will.properties, version, Place::Will, dst)?;
        check_topic_name(&will.topic)?;
        wire::put_string(dst, &will.topic, "the will topic")?;
        wire::put_binary(dst, &will.payload, "the will payload")?;
    }
    if let Some(username) = &connect.username {
        wire::put_string(dst, username, "the user name")?;
    }
    if let Some(password) = &connect.password {
        wire::put_binary(dst, password, "the password")?;
    }
    Ok(())
}

fn write_connack(connack: &Connack, version: Version, dst: &mut BytesMut) -> Result<(), WireError> {
    check_reason(connack.reason, PacketType::Connack, version)?;
    dst.put_u8(u8::from(connack.session_present));
    let code = if version.is_v5() {
        connack.reason.as_u8()
    } else {
        ConnectReturnCode::from_reason(connack.reason).map_or(0, ConnectReturnCode::as_u8)
    };
    dst.put_u8(code);
    write_properties(&connack.properties, version, Place::Connack, dst)
}

fn write_publish_header(
    publish: &Publish,
    version: Version,
    dst: &mut BytesMut,
) -> Result<(), WireError> {
    if publish.dup && publish.qos == QoS::AtMostOnce {
        return Err(WireError::DupWithQos0);
    }
    check_publish_topic(&publish.topic, &publish.properties, version)?;
    wire::put_string(dst, &publish.topic, "the topic name")?;
    match (publish.qos, publish.packet_id) {
        (QoS::AtMostOnce, None) => {}
        (QoS::AtMostOnce, Some(_)) => {
            return Err(WireError::Unencodable(
                "a QoS 0 PUBLISH carries no packet identifier".into(),
            ))
        }
        (_, Some(id)) => dst.put_u16(check_packet_id(id, PacketType::Publish)?),
        (_, None) => {
            return Err(WireError::Unencodable(
                "a QoS 1 or 2 PUBLISH needs a packet identifier".into(),
            ))
        }
    }
    write_properties(&publish.properties, version, Place::Publish, dst)
}

fn write_pub_ack(
    ack: &PubAck,
    version: Version,
    packet: PacketType,
    dst: &mut BytesMut,
) -> Result<(), WireError> {
    let place = match packet {
        PacketType::Puback => Place::Puback,
        PacketType::Pubrec => Place::Pubrec,
        PacketType::Pubrel => Place::Pubrel,
        _ => Place::Pubcomp,
    };
    dst.put_u16(check_packet_id(ack.packet_id, packet)?);
    write_reason_and_properties(ack.reason, &ack.properties, version, place, dst)
}

/// The optional tail of PUBACK, PUBREC, PUBREL, PUBCOMP, DISCONNECT and AUTH, in its
/// shortest form: nothing for success without properties, the code alone without
/// properties (but AUTH, whose short form the spec defines only as empty).
fn write_reason_and_properties(
    reason: ReasonCode,
    properties: &Properties,
    version: Version,
    place: Place,
    dst: &mut BytesMut,
) -> Result<(), WireError> {
    let packet = match place {
        Place::Puback => PacketType::Puback,
        Place::Pubrec => PacketType::Pubrec,
        Place::Pubrel => PacketType::Pubrel,
        Place::Pubcomp => PacketType::Pubcomp,
        Place::Auth => PacketType::Auth,
        _ => PacketType::Disconnect,
    };
    if !version.is_v5() {
        if reason != ReasonCode::Success {
            return Err(WireError::NotInVersion { what: "a reason code", version });
        }
        return write_properties(properties, version, place, dst);
    }
    check_reason(reason, packet, version)?;
    if reason == ReasonCode::Success && properties.is_empty() {
        return Ok(());
    }
    dst.put_u8(reason.as_u8());
    if properties.is_empty() && place != Place::Auth {
        return Ok(());
    }
    properties.write(dst, place)
}

fn write_subscribe(
    subscribe: &Subscribe,
    version: Version,
    dst: &mut BytesMut,
) -> Result<(), WireError> {
    dst.put_u16(check_packet_id(subscribe.packet_id, PacketType::Subscribe)?);
    write_properties(&subscribe.properties, version, Place::Subscribe, dst)?;
    if subscribe.filters.is_empty() {
        return Err(WireError::NoTopicFilters { packet: PacketType::Subscribe });
    }
    for subscription in &subscribe.filters {
        check_subscription(&subscription.filter, &subscription.options, version)?;
        wire::put_string(dst, &subscription.filter, "a topic filter")?;
        dst.put_u8(options_byte(&subscription.options, version)?);
    }
    Ok(())
}

fn options_byte(options: &SubscriptionOptions, version: Version) -> Result<u8, WireError> {
    use options_bits::*;
    let mut byte = options.qos.as_u8();
    let extended = options.no_local
        || options.retain_as_published
        || options.retain_handling != RetainHandling::SendAtSubscribe;
    if extended && !version.is_v5() {
        return Err(WireError::NotInVersion { what: "subscription options besides QoS", version });
    }
    if options.no_local {
        byte |= NO_LOCAL;
    }
    if options.retain_as_published {
        byte |= RETAIN_AS_PUBLISHED;
    }
    byte |= (options.retain_handling as u8) << RETAIN_HANDLING_SHIFT;
    Ok(byte)
}

fn write_suback(suback: &Suback, version: Version, dst: &mut BytesMut) -> Result<(), WireError> {
    dst.put_u16(check_packet_id(suback.packet_id, PacketType::Suback)?);
    write_properties(&suback.properties, version, Place::Suback, dst)?;
    for &reason in &suback.reasons {
        check_reason(reason, PacketType::Suback, version)?;
        dst.put_u8(reason.as_u8());
    }
    Ok(())
}

fn write_unsubscribe(
    unsubscribe: &Unsubscribe,
    version: Version,
    dst: &mut BytesMut,
) -> Result<(), WireError> {
    dst.put_u16(check_packet_id(unsubscribe.packet_id, PacketType::Unsubscribe)?);
    write_properties(&unsubscribe.properties, version, Place::Unsubscribe, dst)?;
    if unsubscribe.filters.is_empty() {
        return Err(WireError::NoTopicFilters { packet: PacketType::Unsubscribe });
    }
    for filter in &unsubscribe.filters {
        check_filter(filter, version)?;
        wire::put_string(dst, filter, "a topic filter")?;
    }
    Ok(())
}

fn write_unsuback(
    unsuback: &Unsuback,
    version: Version,
    dst: &mut BytesMut,
) -> Result<(), WireError> {
    dst.put_u16(check_packet_id(unsuback.packet_id, PacketType::Unsuback)?);
    write_properties(&unsuback.properties, version, Place::Unsuback, dst)?;
    if !version.is_v5() && !unsuback.reasons.is_empty() {
        return Err(WireError::NotInVersion { what: "UNSUBACK reason codes", version });
    }
    for &reason in &unsuback.reasons {
        check_reason(reason, PacketType::Unsuback, version)?;
        dst.put_u8(reason.as_u8());
    }
    Ok(())
}
