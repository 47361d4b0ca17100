//! [`WireFormatInfo`], the first frame each side sends, and [`WireFormat`], the options in
//! force once both have been seen.
//!
//! WireFormatInfo has no command id: it is the magic `ActiveMQ`, the sender's highest
//! protocol version and a primitive map of its preferences. It is always sent before
//! negotiation, hence loose-encoded with a size prefix and no cache. Negotiation takes the
//! lower version, and each option only if both sides want it (Java's
//! `OpenWireFormat.renegotiateWireFormat`).

use super::error::WireError;
use super::map::{MapLimits, PrimitiveMap, PrimitiveValue};
use super::marshal::{Decoder, Encoder};

/// The magic bytes that open every OpenWire stream.
pub const MAGIC: &[u8; 8] = b"ActiveMQ";

/// The newest protocol version this codec speaks (that of the ActiveMQ 5.x client).
pub const LATEST_VERSION: u32 = 12;

/// Whether this codec implements protocol `version` (1, and 9 to 12).
pub fn is_supported_version(version: u32) -> bool {
    version == 1 || (9..=LATEST_VERSION).contains(&version)
}

/// The option names of a WireFormatInfo's property map.
pub mod option {
    #![allow(missing_docs)]
    pub const STACK_TRACE_ENABLED: &str = "StackTraceEnabled";
    pub const CACHE_ENABLED: &str = "CacheEnabled";
    pub const CACHE_SIZE: &str = "CacheSize";
    pub const TCP_NO_DELAY_ENABLED: &str = "TcpNoDelayEnabled";
    pub const SIZE_PREFIX_DISABLED: &str = "SizePrefixDisabled";
    pub const TIGHT_ENCODING_ENABLED: &str = "TightEncodingEnabled";
    pub const MAX_FRAME_SIZE: &str = "MaxFrameSize";
    pub const MAX_FRAME_SIZE_ENABLED: &str = "MaxFrameSizeEnabled";
    pub const MAX_INACTIVITY_DURATION: &str = "MaxInactivityDuration";
    /// Sic: Java spells it so.
    pub const MAX_INACTIVITY_DURATION_INITIAL_DELAY: &str = "MaxInactivityDurationInitalDelay";
    pub const HOST: &str = "Host";
    pub const PROVIDER_NAME: &str = "ProviderName";
    pub const PROVIDER_VERSION: &str = "ProviderVersion";
    pub const PLATFORM_DETAILS: &str = "PlatformDetails";
}

/// The first frame of each side: magic, version and preferences.
#[derive(Debug, Clone, Default, PartialEq, Eq, Hash)]
pub struct WireFormatInfo {
    /// The highest protocol version the sender speaks.
    pub version: i32,
    /// The sender's options ([`option`] names). An empty map is sent as null.
    pub properties: PrimitiveMap,
}

impl WireFormatInfo {
    /// The info that announces `format` (as the Java client's `OpenWireFormatFactory`
    /// builds it), naming the provider `provider_name`/`provider_version`.
    pub fn announcing(
        format: &WireFormat,
        provider_name: &str,
        provider_version: &str,
    ) -> WireFormatInfo {
        let mut p = PrimitiveMap::new();
        p.insert(option::STACK_TRACE_ENABLED, format.stack_trace_enabled);
        p.insert(option::PLATFORM_DETAILS, "Rust");
        p.insert(option::CACHE_ENABLED, format.cache_enabled);
        p.insert(option::TCP_NO_DELAY_ENABLED, format.tcp_no_delay);
        p.insert(option::SIZE_PREFIX_DISABLED, format.size_prefix_disabled);
        p.insert(option::CACHE_SIZE, i32::try_from(format.cache_size).unwrap_or(i32::MAX));
        p.insert(option::PROVIDER_NAME, provider_name);
        p.insert(option::TIGHT_ENCODING_ENABLED, format.tight_encoding);
        p.insert(option::MAX_FRAME_SIZE, i64::try_from(format.max_frame_size).unwrap_or(i64::MAX));
        p.insert(option::MAX_INACTIVITY_DURATION, format.max_inactivity_duration);
        p.insert(
            option::MAX_INACTIVITY_DURATION_INITIAL_DELAY,
            format.max_inactivity_duration_initial_delay,
        );
        p.insert(option::MAX_FRAME_SIZE_ENABLED, true);
        p.insert(option::PROVIDER_VERSION, provider_version);
        WireFormatInfo { version: format.version as i32, properties: p }
    }

    fn flag(&self, name: &str) -> bool {
        self.properties.get(name).and_then(PrimitiveValue::as_bool) == Some(true)
    }

    fn number(&self, name: &str) -> i64 {
        self.properties.get(name).and_then(PrimitiveValue::as_i64).unwrap_or(0)
    }

    fn text(&self, name: &str) -> Option<&str> {
        self.properties.get(name).and_then(PrimitiveValue::as_str)
    }

    /// `StackTraceEnabled`: exceptions carry stack traces.
    pub fn stack_trace_enabled(&self) -> bool {
        self.flag(option::STACK_TRACE_ENABLED)
    }
    /// `CacheEnabled`: the marshalling cache.
    pub fn cache_enabled(&self) -> bool {
        self.flag(option::CACHE_ENABLED)
    }
    /// `TcpNoDelayEnabled`.
    pub fn tcp_no_delay_enabled(&self) -> bool {
        self.flag(option::TCP_NO_DELAY_ENABLED)
    }
    /// `SizePrefixDisabled`: frames have no 4-byte size prefix.
    pub fn size_prefix_disabled(&self) -> bool {
        self.flag(option::SIZE_PREFIX_DISABLED)
    }
    /// `TightEncodingEnabled`.
    pub fn tight_encoding_enabled(&self) -> bool {
        self.flag(option::TIGHT_ENCODING_ENABLED)
    }
    /// `CacheSize` (0 when absent).
    pub fn cache_size(&self) -> i64 {
        self.number(option::CACHE_SIZE)
    }
    /// `MaxFrameSize` (0 when absent).
    pub fn max_frame_size(&self) -> i64 {
        self.number(option::MAX_FRAME_SIZE)
    }
    /// `MaxInactivityDuration` in milliseconds (0 when absent: no inactivity check).
    pub fn max_inactivity_duration(&self) -> i64 {
        self.number(option::MAX_INACTIVITY_DURATION)
    }
    /// `MaxInactivityDurationInitalDelay` in milliseconds.
    pub fn max_inactivity_duration_initial_delay(&self) -> i64 {
        self.number(option::MAX_INACTIVITY_DURATION_INITIAL_DELAY)
    }
    /// `Host`: the host name the client connected to.
    pub fn host(&self) -> Option<&str> {
        self.text(option::HOST)
    }
    /// `ProviderName` (`ActiveMQ` for the Java client).
    pub fn provider_name(&self) -> Option<&str> {
        self.text(option::PROVIDER_NAME)
    }
    /// `ProviderVersion` (`5.17.2`, say).
    pub fn provider_version(&self) -> Option<&str> {
        self.text(option::PROVIDER_VERSION)
    }
    /// `PlatformDetails` (`Java`, or JVM details).
    pub fn platform_details(&self) -> Option<&str> {
        self.text(option::PLATFORM_DETAILS)
    }

    pub(crate) fn write_declared(&self, e: &mut Encoder) -> Result<(), WireError> {
        e.raw(MAGIC);
        e.int(self.version);
        if self.properties.is_empty() {
            e.bytes(None)
        } else {
            let bytes = self.properties.to_bytes()?;
            e.bytes(Some(&bytes))
        }
    }

    pub(crate) fn read_declared(d: &mut Decoder) -> Result<WireFormatInfo, WireError> {
        let magic = d.raw(MAGIC.len())?;
        if magic != MAGIC {
            return Err(WireError::BadMagic(magic.to_vec()));
        }
        let version = d.int()?;
        let properties = match d.bytes()? {
            Some(bytes) => PrimitiveMap::decode(&bytes, &MapLimits::WIRE_FORMAT_INFO)?,
            None => PrimitiveMap::new(),
        };
        Ok(WireFormatInfo { version, properties })
    }
}

/// The options in force on a connection.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub struct WireFormat {
    /// The protocol version (see [`is_supported_version`]).
    pub version: u32,
    /// Tight encoding (bit-packed booleans, variable-size longs) rather than loose.
    pub tight_encoding: bool,
    /// The marshalling cache.
    pub cache_enabled: bool,
    /// Slots of the marshalling cache (each direction has its own).
    pub cache_size: usize,
    /// Frames have no size prefix.
    pub size_prefix_disabled: bool,
    /// Exceptions carry stack traces and causes.
    pub stack_trace_enabled: bool,
    /// TCP_NODELAY on the socket (for the transport; no effect on the codec).
    pub tcp_no_delay: bool,
    /// The largest frame either side accepts.
    pub max_frame_size: u64,
    /// Milliseconds without a read after which the connection is dead (0: never); the
    /// transport's business, negotiated here as Java's inactivity monitor does (the lower).
    pub max_inactivity_duration: i64,
    /// Milliseconds before the inactivity check starts.
    pub max_inactivity_duration_initial_delay: i64,
}

impl Default for WireFormat {
    /// The ActiveMQ 5.x client's defaults: version 12, tight encoding, a cache of 1024
    /// entries, size prefix, stack traces, 30 s inactivity after a 10 s delay.
    fn default() -> WireFormat {
        WireFormat {
            version: LATEST_VERSION,
            tight_encoding: true,
            cache_enabled: true,
            cache_size: 1024,
            size_prefix_disabled: false,
            stack_trace_enabled: true,
            tcp_no_delay: true,
            max_frame_size: i64::MAX as u64,
            max_inactivity_duration: 30_000,
            max_inactivity_duration_initial_delay: 10_000,
        }
    }
}

/// Java's `OpenWireFormat.min`: the lower of two values, ignoring one that is not positive.
fn java_min(a: i64, b: i64) -> i64 {
    if (a < b && a > 0) || b <= 0 {
        a
    } else {
        b
    }
}

impl WireFormat {
    /// Loose encoding, no cache: what the two WireFormatInfos are exchanged in.
    pub fn loose() -> WireFormat {
        WireFormat { tight_encoding: false, cache_enabled: false, ..WireFormat::default() }
    }

    /// The options both sides agree on: the lower version and frame size, each flag only if
    /// both want it (size prefix: disabled only if both disable it), the smaller cache
    /// (0 means Java's default of 16383) and the lower inactivity timeouts.
    pub fn negotiate(
        local: &WireFormatInfo,
        remote: &WireFormatInfo,
    ) -> Result<WireFormat, WireError> {
        let version = java_min(i64::from(local.version), i64::from(remote.version));
        let version = u32::try_from(version)
            .ok()
            .filter(|v| is_supported_version(*v))
            .ok_or(WireError::UnsupportedVersion(version))?;
        let max_frame_size = java_min(local.max_frame_size(), remote.max_frame_size());
        let max_frame_size = u64::try_from(max_frame_size).ok().filter(|&m| m > 0);
        let cache_enabled = local.cache_enabled() && remote.cache_enabled();
        let cache_size = local.cache_size().min(remote.cache_size());
        let cache_size = match usize::try_from(cache_size) {
            Ok(n) if n > 0 => n.min(i16::MAX as usize),
            _ => super::cache::DEFAULT_WHEN_ZERO,
        };
        Ok(WireFormat {
            version,
            tight_encoding: local.tight_encoding_enabled() && remote.tight_encoding_enabled(),
            cache_enabled,
            cache_size,
            size_prefix_disabled: local.size_prefix_disabled() && remote.size_prefix_disabled(),
            stack_trace_enabled: local.stack_trace_enabled() && remote.stack_trace_enabled(),
            tcp_no_delay: local.tcp_no_delay_enabled() && remote.tcp_no_delay_enabled(),
            max_frame_size: max_frame_size.unwrap_or(i64::MAX as u64),
            max_inactivity_duration: local
                .max_inactivity_duration()
                .min(remote.max_inactivity_duration()),
            max_inactivity_duration_initial_delay: local
                .max_inactivity_duration_initial_delay()
                .min(remote.max_inactivity_duration_initial_delay()),
        })
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    fn info(version: i32, f: impl FnOnce(&mut PrimitiveMap)) -> WireFormatInfo {
        let mut i = WireFormatInfo::announcing(&WireFormat::default(), "test", "0");
        i.version = version;
        f(&mut i.properties);
        i
    }

    #[test]
    fn negotiation_takes_the_lower_version_and_the_common_options() {
        let broker = info(12, |_| {});
        let client = info(10, |p| {
            p.insert(option::TIGHT_ENCODING_ENABLED, false);
            p.insert(option::CACHE_SIZE, 512);
            p.insert(option::MAX_INACTIVITY_DURATION, 0i64);
        });
        let f = WireFormat::negotiate(&broker, &client).unwrap();
        assert_eq!(f.version, 10);
        assert!(!f.tight_encoding);
        assert!(f.cache_enabled);
        assert_eq!(f.cache_size, 512);
        assert!(!f.size_prefix_disabled);
        assert_eq!(f.max_inactivity_duration, 0);
        assert_eq!(f, WireFormat::negotiate(&client, &broker).unwrap());
    }

    #[test]
    fn size_prefix_is_dropped_only_if_both_disable_it() {
        let on = info(12, |_| {});
        let off = info(12, |p| p.insert(option::SIZE_PREFIX_DISABLED, true));
        assert!(!WireFormat::negotiate(&on, &off).unwrap().size_prefix_disabled);
        assert!(WireFormat::negotiate(&off, &off).unwrap().size_prefix_disabled);
    }

    #[test]
    fn missing_options_mean_off_and_java_defaults() {
        let bare = WireFormatInfo { version: 12, properties: PrimitiveMap::new() };
        let f = WireFormat::negotiate(&info(12, |_| {}), &bare).unwrap();
        assert!(!f.tight_encoding && !f.cache_enabled && !f.stack_trace_enabled);
        assert_eq!(f.max_frame_size, i64::MAX as u64);
        assert_eq!(f.cache_size, 16383);
    }

    #[test]
    fn unsupported_versions_are_refused() {
        for v in [0, 5, 8] {
            assert_eq!(
                WireFormat::negotiate(&info(12, |_| {}), &info(v, |_| {})).map(|f| f.version),
                if v == 0 { Ok(12) } else { Err(WireError::UnsupportedVersion(i64::from(v))) }
            );
        }
        assert_eq!(WireFormat::negotiate(&info(12, |_| {}), &info(1, |_| {})).unwrap().version, 1);
        assert_eq!(
            WireFormat::negotiate(&info(12, |_| {}), &info(99, |_| {})).unwrap().version,
            12
        );
    }
}
