//! The fixed header and the stream: partial packets, several packets in one buffer, the
//! size limit enforced before the body arrives, the version learned from CONNECT.

use bytes::{Bytes, BytesMut};

use super::*;
use crate::mqtt::{Connack, Connect, Disconnect, Property, PubAck, Publish, QoS, ReasonCode};

/// A 5.0 client's first packets, as one stream.
fn session_v5() -> (Vec<Packet>, Vec<u8>) {
    let mut connect = Connect::new(Version::V5_0, "stream");
    connect.properties.push(Property::SessionExpiryInterval(60));
    let publish = Publish {
        qos: QoS::AtLeastOnce,
        packet_id: Some(1),
        ..Publish::new("a/b", vec![b'x'; 500])
    };
    let packets = vec![
        connect.into(),
        publish.into(),
        Packet::Pubrel(PubAck::new(1)),
        Packet::Pingreq,
        Disconnect::default().into(),
    ];
    let mut client = Codec::new(Limits::default());
    let mut wire = BytesMut::new();
    for packet in &packets {
        client.encode(packet, &mut wire).expect("encodes");
    }
    (packets, wire.to_vec())
}

#[test]
fn one_byte_at_a_time_decodes_as_whole() {
    let (packets, wire) = session_v5();
    let whole = decode_all(&mut Codec::new(Limits::default()), &wire);
    assert_eq!(whole, packets);
    let one_by_one = decode_byte_by_byte(&mut Codec::new(Limits::default()), &wire).expect("ok");
    assert_eq!(one_by_one, packets);
}

#[test]
fn two_packets_in_one_buffer_come_out_one_by_one() {
    let mut wire = BytesMut::from(&[0xC0, 0x00, 0x40, 0x02, 0x00, 0x05][..]);
    let mut codec = codec(Version::V3_1_1);
    assert_eq!(codec.decode(&mut wire), Ok(Some(Packet::Pingreq)));
    assert_eq!(&wire[..], [0x40, 0x02, 0x00, 0x05]);
    assert_eq!(codec.decode(&mut wire), Ok(Some(Packet::Puback(PubAck::new(5)))));
    assert_eq!(codec.decode(&mut wire), Ok(None));
}

#[test]
fn a_partial_packet_consumes_nothing() {
    let mut codec = codec(Version::V3_1_1);
    for partial in [&[][..], &[0x30], &[0x30, 0x85], &[0x30, 0x05, 0x00, 0x01, b't']] {
        let mut buf = BytesMut::from(partial);
        assert_eq!(codec.decode(&mut buf), Ok(None), "{partial:02x?}");
        assert_eq!(&buf[..], partial);
    }
}

#[test]
fn max_packet_size_is_enforced_from_the_fixed_header_alone() {
    let mut codec = Codec::new(Limits { max_packet_size: 100 });
    codec.set_version(Version::V3_1_1);
    // PUBLISH with a remaining length of 1000: 0xE8 0x07. Nothing of the body has come.
    let mut buf = BytesMut::from(&[0x30, 0xE8, 0x07][..]);
    assert_eq!(codec.decode(&mut buf), Err(WireError::PacketTooLarge { size: 1003, max: 100 }));
    // Exactly at the limit is fine: 1 + 1 + 98 bytes.
    let publish = Publish::new("t", vec![0u8; 95]);
    let wire = encode(Version::V3_1_1, &publish.clone().into());
    assert_eq!(wire.len(), 100);
    assert_eq!(codec.decode(&mut BytesMut::from(&wire[..])), Ok(Some(publish.into())));
    assert_eq!(
        WireError::PacketTooLarge { size: 1003, max: 100 }.disconnect_reason(),
        ReasonCode::PacketTooLarge
    );
}

#[test]
fn a_remaining_length_of_five_bytes_is_malformed_at_once() {
    let mut codec = codec(Version::V3_1_1);
    let mut buf = BytesMut::from(&[0x30, 0xFF, 0xFF, 0xFF, 0xFF][..]);
    assert_eq!(codec.decode(&mut buf), Err(WireError::VariableIntTooLong));
    // Three continuation bytes may still end in a fourth: wait.
    assert_eq!(codec.decode(&mut BytesMut::from(&[0x30, 0xFF, 0xFF, 0xFF][..])), Ok(None));
    assert_eq!(WireError::VariableIntTooLong.disconnect_reason(), ReasonCode::MalformedPacket);
}

#[test]
fn a_non_minimal_remaining_length_is_accepted() {
    // 0x82 0x00 is 2 in two bytes; the spec asks senders for the minimum, not receivers.
    let packet = decode_one(Version::V3_1_1, &[0x40, 0x82, 0x00, 0x00, 0x09]);
    assert_eq!(packet, Packet::Puback(PubAck::new(9)));
    assert_eq!(encode(Version::V3_1_1, &packet), [0x40, 0x02, 0x00, 0x09]);
}

#[test]
fn the_publish_payload_is_a_slice_of_the_read_buffer() {
    let wire = encode(Version::V3_1_1, &Publish::new("t", vec![1u8; 64]).into());
    let mut buf = BytesMut::from(&wire[..]);
    let start = buf.as_ptr() as usize;
    let Some(Packet::Publish(publish)) = codec(Version::V3_1_1).decode(&mut buf).expect("ok")
    else {
        panic!("a PUBLISH")
    };
    // Fixed header (2 bytes) and topic (3 bytes) precede the payload in the same memory.
    assert_eq!(publish.payload.as_ptr() as usize, start + 5);
    assert_eq!(publish.payload, Bytes::from(vec![1u8; 64]));
}

#[test]
fn a_server_learns_the_version_from_connect() {
    for version in Version::ALL {
        let mut server = Codec::new(Limits::default());
        assert_eq!(server.version(), None);
        let mut wire = BytesMut::new();
        Codec::new(Limits::default())
            .encode(&Connect::new(version, "v").into(), &mut wire)
            .expect("encodes");
        // After the CONNECT, packets are read in its version: a 5.0 DISCONNECT with a
        // reason code is trailing bytes before 5.0.
        wire.extend_from_slice(&[0xE0, 0x01, 0x04]);
        assert!(matches!(server.decode(&mut wire), Ok(Some(Packet::Connect(_)))));
        assert_eq!(server.version(), Some(version));
        let disconnect = server.decode(&mut wire);
        if version == Version::V5_0 {
            assert!(disconnect.is_ok(), "{disconnect:?}");
        } else {
            assert_eq!(
                disconnect,
                Err(WireError::TrailingBytes {
                    packet: crate::mqtt::PacketType::Disconnect,
                    count: 1
                })
            );
        }
    }
}

#[test]
fn a_client_learns_the_version_from_the_connect_it_encodes() {
    let mut client = Codec::new(Limits::default());
    let mut wire = BytesMut::new();
    client.encode(&Connect::new(Version::V5_0, "c").into(), &mut wire).expect("encodes");
    assert_eq!(client.version(), Some(Version::V5_0));
    let connack = Connack { reason: ReasonCode::Banned, ..Connack::default() };
    let mut reply = BytesMut::from(&encode(Version::V5_0, &connack.clone().into())[..]);
    assert_eq!(client.decode(&mut reply), Ok(Some(connack.into())));
}

#[test]
fn nothing_but_connect_before_the_version_is_known() {
    let mut server = Codec::new(Limits::default());
    // Judged from the first byte alone.
    let mut buf = BytesMut::from(&[0x30][..]);
    assert_eq!(
        server.decode(&mut buf),
        Err(WireError::VersionUnknown { packet: crate::mqtt::PacketType::Publish })
    );
    let mut out = BytesMut::new();
    assert_eq!(
        server.encode(&Packet::Pingresp, &mut out),
        Err(WireError::VersionUnknown { packet: crate::mqtt::PacketType::Pingresp })
    );
    assert!(out.is_empty());
}

#[test]
fn encoding_above_the_peer_s_maximum_packet_size_fails_and_writes_nothing() {
    let mut codec = codec(Version::V5_0);
    codec.set_peer_max_packet_size(20);
    let mut out = BytesMut::from(&b"before"[..]);
    let big = Publish::new("t", vec![0u8; 100]);
    assert_eq!(
        codec.encode(&big.into(), &mut out),
        Err(WireError::PacketTooLarge { size: 106, max: 20 })
    );
    assert_eq!(&out[..], b"before");
    codec.encode(&Publish::new("t", vec![0u8; 10]).into(), &mut out).expect("fits");
    assert_eq!(out.len(), 6 + 16);
}

#[test]
fn remaining_lengths_of_every_width_encode_minimally() {
    // Payload sizes that put the remaining length at 1, 2, 3 bytes.
    for (payload, header) in [(100usize, 2usize), (200, 3), (20_000, 4)] {
        let publish = Publish::new("t", vec![9u8; payload]);
        let wire = encode(Version::V3_1_1, &publish.clone().into());
        assert_eq!(wire.len(), header + 3 + payload, "{payload}");
        assert_eq!(decode_one(Version::V3_1_1, &wire), publish.into());
    }
}
