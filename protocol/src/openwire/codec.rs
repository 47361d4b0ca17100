//! [`Codec`]: one connection's OpenWire codec, from the first WireFormatInfo on.

use bytes::{Buf, BufMut, Bytes, BytesMut};

use super::cache::{DecodeCache, EncodeCache};
use super::commands::{data_type, Command, DataStructure, WireFormatInfo};
use super::error::WireError;
use super::format::WireFormat;
use super::marshal::{Decoder, EncodeBuffers, Encoder};
use super::primitives::Reader;
use crate::openwire::boolean_stream::BitReader;

/// Most bytes reserved ahead for a frame whose size prefix has arrived.
const RESERVE_AHEAD: usize = 64 * 1024;

/// One connection's OpenWire codec: decodes what the peer sends, encodes what we send.
///
/// It starts *pre-negotiation*: only [`WireFormatInfo`] can be read or written (loose
/// encoding, size prefix, no cache, as Java sends it). Once both sides' infos are known,
/// [`Codec::negotiate`] (or [`Codec::set_format`]) switches it to the agreed [`WireFormat`]
/// and starts empty marshalling caches, one per direction. The codec keeps the decoder's
/// cache, so it belongs to one connection (both directions of it).
///
/// Framing: with a size prefix, a frame is a big-endian int size, the type byte and the
/// command; the size is checked against the maximum frame size before the frame is
/// buffered. Without one, the command is decoded as far as the bytes go and the buffered
/// bytes are checked against the maximum instead.
#[derive(Debug)]
pub struct Codec {
    max_frame_size: usize,
    format: Option<WireFormat>,
    encode_cache: Option<EncodeCache>,
    decode_cache: Option<DecodeCache>,
    /// The encoder's scratch space, reused from one command to the next.
    encode_buffers: EncodeBuffers,
}

/// The settings a frame is read or written with.
#[derive(Clone, Copy)]
struct Settings {
    version: u32,
    tight: bool,
    stack_trace: bool,
    size_prefix: bool,
    negotiated: bool,
}

impl Codec {
    /// A pre-negotiation codec that refuses frames larger than `max_frame_size` bytes.
    pub fn new(max_frame_size: usize) -> Codec {
        Codec {
            max_frame_size,
            format: None,
            encode_cache: None,
            decode_cache: None,
            encode_buffers: EncodeBuffers::default(),
        }
    }

    /// A codec already switched to `format` (for tests and tools that skip negotiation).
    pub fn with_format(max_frame_size: usize, format: WireFormat) -> Codec {
        let mut codec = Codec::new(max_frame_size);
        codec.set_format(format);
        codec
    }

    /// The negotiated format, or `None` before negotiation.
    pub fn format(&self) -> Option<&WireFormat> {
        self.format.as_ref()
    }

    /// The configured maximum frame size in bytes.
    pub fn max_frame_size(&self) -> usize {
        self.max_frame_size
    }

    /// Negotiates from our WireFormatInfo and the peer's, switches to the result and returns
    /// it. Fails if the common version is not one this codec speaks.
    pub fn negotiate(
        &mut self,
        local: &WireFormatInfo,
        remote: &WireFormatInfo,
    ) -> Result<WireFormat, WireError> {
        let format = WireFormat::negotiate(local, remote)?;
        self.set_format(format);
        Ok(format)
    }

    /// Switches to `format`, with empty marshalling caches.
    pub fn set_format(&mut self, format: WireFormat) {
        let caches = format.cache_enabled.then_some(format.cache_size);
        self.encode_cache = caches.map(EncodeCache::new);
        self.decode_cache = caches.map(DecodeCache::new);
        self.format = Some(format);
    }

    fn settings(&self) -> Settings {
        match &self.format {
            Some(f) => Settings {
                version: f.version,
                tight: f.tight_encoding,
                stack_trace: f.stack_trace_enabled,
                size_prefix: !f.size_prefix_disabled,
                negotiated: true,
            },
            None => Settings {
                version: super::format::LATEST_VERSION,
                tight: false,
                stack_trace: false,
                size_prefix: true,
                negotiated: false,
            },
        }
    }

    /// The frame size limit in force: ours, or the negotiated one if lower.
    fn limit(&self) -> u64 {
        let ours = self.max_frame_size as u64;
        self.format.map_or(ours, |f| ours.min(f.max_frame_size))
    }

    /// Decodes the next command from `src`, removing its bytes. `Ok(None)`: more bytes are
    /// needed (nothing is consumed). A frame of the null type (which Java writes for a null
    /// command) is skipped.
    pub fn decode(&mut self, src: &mut BytesMut) -> Result<Option<Command>, WireError> {
        let s = self.settings();
        let limit = self.limit();
        loop {
            if s.size_prefix {
                let Some(prefix) = src.get(..4) else { return Ok(None) };
                let size = i32::from_be_bytes([prefix[0], prefix[1], prefix[2], prefix[3]]);
                let size = usize::try_from(size).map_err(|_| WireError::NegativeFrameSize(size))?;
                if size as u64 > limit {
                    return Err(WireError::FrameTooLarge { size: size as u64, max: limit });
                }
                if src.len() < 4 + size {
                    // Reserve for what is coming, but not all of a large frame up front:
                    // a peer announcing a big frame must send it to make us hold it.
                    src.reserve((4 + size - src.len()).min(RESERVE_AHEAD));
                    return Ok(None);
                }
                src.advance(4);
                let frame = src.split_to(size).freeze();
                let mut input = Reader::over(&frame);
                let data_type = input.u8()?;
                if data_type == data_type::NULL {
                    continue;
                }
                let command = self.decode_command(s, data_type, input, true)?;
                return Ok(Some(command.0));
            }
            let Some(&data_type) = src.first() else { return Ok(None) };
            if data_type == data_type::NULL {
                src.advance(1);
                continue;
            }
            let mut input = Reader::new(src);
            input.u8()?;
            return match self.decode_command(s, data_type, input, false) {
                Ok((command, consumed)) => {
                    src.advance(consumed);
                    Ok(Some(command))
                }
                Err(WireError::Truncated) if src.len() as u64 > limit => {
                    Err(WireError::FrameTooLarge { size: src.len() as u64, max: limit })
                }
                Err(WireError::Truncated) => Ok(None),
                Err(e) => Err(e),
            };
        }
    }

    /// Decodes the command of type `data_type` from `input` (just after the type byte);
    /// returns it and the bytes consumed including the type byte. `whole_frame`: `input`
    /// ends where the frame does, and must be consumed exactly.
    fn decode_command(
        &mut self,
        s: Settings,
        data_type: u8,
        mut input: Reader<'_>,
        whole_frame: bool,
    ) -> Result<(Command, usize), WireError> {
        if !s.negotiated && data_type != data_type::WIREFORMAT_INFO {
            return Err(WireError::NotNegotiated { data_type });
        }
        let bits = if s.tight { BitReader::read_from(&mut input)? } else { BitReader::default() };
        let cache = if s.negotiated { self.decode_cache.as_ref() } else { None };
        let mut d = Decoder::new(s.version, s.tight, s.stack_trace, input, cache);
        d.bits = bits;
        let data = DataStructure::read_fields(data_type, &mut d)?;
        let DataStructure::Command(command) = data else {
            return Err(WireError::NotACommand { data_type });
        };
        let consumed = d.input.position();
        let remaining = d.input.remaining();
        let pending = std::mem::take(&mut d.pending);
        drop(d);
        if whole_frame && remaining > 0 {
            return Err(WireError::TrailingBytes { data_type, count: remaining });
        }
        if let Some(cache) = self.decode_cache.as_mut() {
            for (slot, value) in pending {
                cache.set(slot, value);
            }
        }
        Ok((command, consumed))
    }

    /// Appends `command` as one frame to `dst`. On error nothing is appended and the
    /// marshalling cache is as before, so the connection can go on.
    pub fn encode(&mut self, command: &Command, dst: &mut BytesMut) -> Result<(), WireError> {
        let s = self.settings();
        let limit = self.limit();
        let data_type = command.data_type();
        if !s.negotiated && data_type != data_type::WIREFORMAT_INFO {
            return Err(WireError::NotNegotiated { data_type });
        }
        if s.version < data_type::since_version(data_type) {
            return Err(WireError::TypeNotInVersion { data_type, version: s.version });
        }
        let mut cache = if s.negotiated { self.encode_cache.as_mut() } else { None };
        if let Some(cache) = cache.as_deref_mut() {
            cache.sweep();
            cache.begin();
        }
        let buffers = std::mem::take(&mut self.encode_buffers);
        let start = dst.len();
        let mut e = Encoder::reusing(s.version, s.tight, s.stack_trace, cache, buffers);
        let result = command.write_fields(&mut e).and_then(|()| {
            let bits = if s.tight { e.bits.encoded_len() } else { 0 };
            let size = 1 + bits + e.body.len();
            if size as u64 > limit {
                return Err(WireError::FrameTooLarge { size: size as u64, max: limit });
            }
            let size = i32::try_from(size)
                .map_err(|_| WireError::FrameTooLarge { size: size as u64, max: limit })?;
            // Straight into `dst`, which is sized once: the frame is known in full here.
            dst.reserve(5 + bits + e.body.len());
            if s.size_prefix {
                dst.put_i32(size);
            }
            dst.put_u8(data_type);
            if s.tight {
                e.bits.write_to(dst)?;
            }
            dst.put_slice(&e.body);
            Ok(())
        });
        self.encode_buffers = e.into_buffers();
        if result.is_err() {
            dst.truncate(start);
            if let Some(cache) = self.encode_cache.as_mut().filter(|_| s.negotiated) {
                cache.rollback();
            }
        }
        result
    }

    /// Encodes `command` into a new buffer.
    pub fn encode_to_bytes(&mut self, command: &Command) -> Result<Bytes, WireError> {
        let mut dst = BytesMut::new();
        self.encode(command, &mut dst)?;
        Ok(dst.freeze())
    }
}

/// Decodes a client's stream the way the broker would: the first frame pre-negotiation,
/// negotiation against the default broker options, then every frame to the end; message
/// properties and bodies are decoded too. Returns the number of commands. Never panics;
/// a fuzz target can call it with arbitrary bytes.
pub fn decode_all_for_fuzzing(data: &[u8]) -> Result<usize, WireError> {
    const MAX_FRAME: usize = 1 << 20;
    let mut codec = Codec::new(MAX_FRAME);
    let mut src = BytesMut::from(data);
    let Some(Command::WireFormatInfo(remote)) = codec.decode(&mut src)? else {
        return Ok(0);
    };
    let local = WireFormatInfo::announcing(&WireFormat::default(), "ActiveMQ", "fuzz");
    codec.negotiate(&local, &remote)?;
    let mut count = 1;
    while let Some(command) = codec.decode(&mut src)? {
        if let Command::Message(m) = &command {
            // Bodies are decoded lazily by the broker; exercise them here. Their errors are
            // the body's problem, not the frame's.
            let _ = m.properties();
            let _ = m.decoded_content(MAX_FRAME);
        }
        count += 1;
    }
    Ok(count)
}
