//! [`Codec`]: the per-connection STOMP codec, and the [`Limits`] it enforces.

use bytes::{BufMut, BytesMut};

use super::decode::DecodeState;
use super::Version;

/// Bounds on what a peer may send, enforced while a frame arrives (not after).
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub struct Limits {
    /// Largest frame in bytes, from the first byte of the command to the NUL.
    pub max_frame_size: usize,
    /// Most headers in one frame.
    pub max_headers: usize,
    /// Longest header line (`name:value`, escaped, without its line end) in bytes.
    pub max_header_length: usize,
}

impl Default for Limits {
    /// ActiveMQ's defaults: 100 MiB frames, 1000 headers, 10 KiB header lines.
    fn default() -> Limits {
        Limits {
            max_frame_size: 100 * 1024 * 1024,
            max_headers: 1000,
            max_header_length: 10 * 1024,
        }
    }
}

/// One connection's STOMP codec: decodes what the peer sends, encodes what we send.
///
/// It starts at [`Version::V1_0`] (CONNECT and CONNECTED are version-independent) and
/// is switched to the negotiated version with [`Codec::set_version`]; the version decides
/// header escaping in both directions. It keeps the parse state of a partly received frame,
/// so it belongs to one connection's read side.
#[derive(Debug)]
pub struct Codec {
    version: Version,
    limits: Limits,
    pub(super) state: DecodeState,
}

impl Codec {
    /// A codec at STOMP 1.0 enforcing `limits`.
    pub fn new(limits: Limits) -> Codec {
        Codec { version: Version::V1_0, limits, state: DecodeState::default() }
    }

    /// The version that decides header escaping.
    pub fn version(&self) -> Version {
        self.version
    }

    /// Switches to the negotiated version (after CONNECT/CONNECTED).
    pub fn set_version(&mut self, version: Version) {
        self.version = version;
    }

    /// The limits enforced on decoded frames.
    pub fn limits(&self) -> Limits {
        self.limits
    }

    /// Writes a heart-beat: a single `\n`.
    pub fn encode_heartbeat(dst: &mut BytesMut) {
        dst.put_u8(b'\n');
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn default_limits_are_activemqs() {
        let limits = Limits::default();
        assert_eq!(limits.max_frame_size, 104_857_600);
        assert_eq!(limits.max_headers, 1000);
        assert_eq!(limits.max_header_length, 10_240);
    }

    #[test]
    fn codec_starts_at_1_0_and_switches_version() {
        let mut codec = Codec::new(Limits::default());
        assert_eq!(codec.version(), Version::V1_0);
        codec.set_version(Version::V1_2);
        assert_eq!(codec.version(), Version::V1_2);
        assert_eq!(codec.limits(), Limits::default());
    }

    #[test]
    fn heart_beat_is_a_single_newline() {
        let mut dst = BytesMut::new();
        Codec::encode_heartbeat(&mut dst);
        assert_eq!(&dst[..], b"\n");
    }
}
