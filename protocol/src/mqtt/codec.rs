//! [`Codec`]: one connection's MQTT framing and version, with the [`Limits`] it enforces.

use bytes::{Buf, BytesMut};

use super::decode::{check_first_byte, decode_body};
use super::encode::encode_packet;
use super::error::WireError;
use super::packet::Packet;
use super::version::Version;
use super::wire::{parse_variable_int, VariableInt};

/// Bounds on what a peer may send, enforced while decoding.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub struct Limits {
    /// The largest packet accepted, fixed header included (what a 5.0 server announces
    /// as its Maximum Packet Size). A packet whose remaining length says it is larger
    /// fails as soon as its fixed header has arrived, before the rest is buffered.
    pub max_packet_size: u32,
}

impl Default for Limits {
    /// 256 MiB: ActiveMQ's MQTT default (`wireFormat.maxFrameSize`), about the protocol's
    /// own limit of a 268,435,455-byte remaining length.
    fn default() -> Limits {
        Limits { max_packet_size: 256 << 20 }
    }
}

/// One connection's MQTT codec: decodes what the peer sends, encodes what we send.
///
/// The layout of every packet but CONNECT depends on the protocol version, so the codec
/// holds it: a server's codec starts without one and learns it from the CONNECT it
/// decodes; a client's codec learns it from the CONNECT it encodes, or is told it with
/// [`Codec::set_version`]. Until then only a CONNECT decodes or encodes.
///
/// Decoding keeps no state between calls: a packet is parsed once all of it has arrived,
/// and until then each call reads only its fixed header (at most five bytes) again and
/// allocates nothing. The
/// codec does not check the order of packets (CONNECT once, first) beyond needing the
/// version, nor packet identifiers in flight, topic aliases or keep alive: that is the
/// protocol adapter's job.
#[derive(Debug, Clone)]
pub struct Codec {
    limits: Limits,
    version: Option<Version>,
    /// The largest packet the peer accepts (5.0's Maximum Packet Size), if it said.
    peer_max_packet_size: Option<u32>,
}

impl Codec {
    /// A codec at the start of a connection: no version yet, `limits` in force.
    pub fn new(limits: Limits) -> Codec {
        Codec { limits, version: None, peer_max_packet_size: None }
    }

    /// The protocol version, once a CONNECT was decoded or encoded or it was set.
    pub fn version(&self) -> Option<Version> {
        self.version
    }

    /// Sets the protocol version (a client's codec, before it decodes the CONNACK).
    pub fn set_version(&mut self, version: Version) {
        self.version = Some(version);
    }

    /// The limits in force.
    pub fn limits(&self) -> Limits {
        self.limits
    }

    /// Changes the largest packet accepted.
    pub fn set_max_packet_size(&mut self, max_packet_size: u32) {
        self.limits.max_packet_size = max_packet_size;
    }

    /// The largest packet [`Codec::encode`] writes, if the peer set one.
    pub fn peer_max_packet_size(&self) -> Option<u32> {
        self.peer_max_packet_size
    }

    /// Records the peer's Maximum Packet Size (from its CONNECT or CONNACK): a larger
    /// packet then fails to encode, and the spec asks the sender to drop it.
    pub fn set_peer_max_packet_size(&mut self, max_packet_size: u32) {
        self.peer_max_packet_size = Some(max_packet_size);
    }

    /// Decodes the next packet from the front of `src`: `Ok(None)` when it has not fully
    /// arrived (nothing is consumed then). A decoded CONNECT sets the codec's version.
    ///
    /// The first byte is checked as soon as it arrives (a type of this version with the
    /// flags the spec fixes), the size as soon as the remaining length is complete. A
    /// PUBLISH payload (and every binary field) is a slice of `src`'s memory, not a copy.
    /// An error is fatal for the connection: the stream position is lost.
    pub fn decode(&mut self, src: &mut BytesMut) -> Result<Option<Packet>, WireError> {
        let Some(&first) = src.first() else { return Ok(None) };
        let packet_type = check_first_byte(first, self.version)?;
        let (remaining, length_len) = match parse_variable_int(&src[1..])? {
            VariableInt::Complete { value, len } => (value, len),
            VariableInt::Incomplete => return Ok(None),
        };
        let size = 1 + length_len + remaining as usize;
        if size as u64 > u64::from(self.limits.max_packet_size) {
            return Err(WireError::PacketTooLarge {
                size: size as u64,
                max: u64::from(self.limits.max_packet_size),
            });
        }
        if src.len() < size {
            // Nothing is reserved for the rest: growing the buffer is the reader's call, and
            // a peer that declares a large packet and sends nothing then costs nothing.
            return Ok(None);
        }
        let mut body = src.split_to(size).freeze();
        body.advance(1 + length_len);
        let packet = decode_body(packet_type, first & 0x0f, body, self.version)?;
        // The first CONNECT sets the version for the rest of the connection; a second one
        // (a protocol error the adapter answers) must not change how what follows is read.
        if let (Packet::Connect(connect), None) = (&packet, self.version) {
            self.version = Some(connect.version);
        }
        Ok(Some(packet))
    }

    /// Writes `packet` to the end of `dst` in the codec's version (a CONNECT in its own,
    /// which becomes the codec's). Fails, writing nothing, for a packet that the version
    /// cannot carry, that breaks a rule the receiver checks, or that is larger than the
    /// peer's maximum packet size.
    pub fn encode(&mut self, packet: &Packet, dst: &mut BytesMut) -> Result<(), WireError> {
        let version = match (packet, self.version) {
            (Packet::Connect(connect), _) => connect.version,
            (_, Some(version)) => version,
            (_, None) => return Err(WireError::VersionUnknown { packet: packet.packet_type() }),
        };
        let start = dst.len();
        let max_size = self.peer_max_packet_size.unwrap_or(u32::MAX);
        if let Err(e) = encode_packet(packet, version, max_size, dst) {
            // Leave no half-written packet behind.
            dst.truncate(start);
            return Err(e);
        }
        if let Packet::Connect(_) = packet {
            self.version = Some(version);
        }
        Ok(())
    }
}

#[cfg(test)]
mod tests {
    use super::*;
    use crate::mqtt::Connect;

    #[test]
    fn default_limit_is_activemqs_256_mib() {
        assert_eq!(Limits::default().max_packet_size, 268_435_456);
    }

    #[test]
    fn a_second_connect_does_not_change_the_version() {
        let mut client = Codec::new(Limits::default());
        let mut wire = BytesMut::new();
        for version in [Version::V3_1_1, Version::V5_0] {
            client.encode(&Connect::new(version, "twice").into(), &mut wire).expect("encodes");
        }
        let mut server = Codec::new(Limits::default());
        for _ in 0..2 {
            assert!(matches!(server.decode(&mut wire), Ok(Some(Packet::Connect(_)))));
            assert_eq!(server.version(), Some(Version::V3_1_1));
        }
    }

    #[test]
    fn codec_starts_without_a_version() {
        let mut codec = Codec::new(Limits::default());
        assert_eq!(codec.version(), None);
        codec.set_version(Version::V5_0);
        assert_eq!(codec.version(), Some(Version::V5_0));
        assert_eq!(codec.peer_max_packet_size(), None);
        codec.set_peer_max_packet_size(1024);
        assert_eq!(codec.peer_max_packet_size(), Some(1024));
    }
}
