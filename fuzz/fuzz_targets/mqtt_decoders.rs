//! The MQTT codec under libFuzzer: the first byte picks the target (a server's codec that
//! learns the version from a CONNECT, or a codec preset to 3.1, 3.1.1 or 5.0, each fed in
//! two chunks; or the topic helpers), the rest is the input. Whatever decodes must encode
//! again and decode to the same packet. Seed the corpus with the recorded traffic:
//! `cp ../protocol/fixtures/mqtt/*/*.bin corpus/mqtt_decoders/`.
#![no_main]

use bytes::BytesMut;
use libfuzzer_sys::fuzz_target;
use protocol::mqtt::topic::{matches, validate_topic_filter, validate_topic_name};
use protocol::mqtt::{Codec, Limits, Version};

fuzz_target!(|input: &[u8]| {
    let Some((&selector, data)) = input.split_first() else { return };
    match selector % 5 {
        4 => {
            let text = String::from_utf8_lossy(data);
            let (filter, name) = text.split_once('\n').unwrap_or((&text, "a"));
            let _ = (validate_topic_filter(filter), validate_topic_name(name));
            let _ = matches(filter, name);
        }
        preset => {
            let mut codec = Codec::new(Limits { max_packet_size: 1 << 16 });
            if let Some(&version) = Version::ALL.get(usize::from(preset)) {
                codec.set_version(version);
            }
            let half = data.len() / 2;
            let mut buffer = BytesMut::from(&data[..half]);
            for more in [&data[half..], &[][..]] {
                while let Ok(Some(packet)) = codec.decode(&mut buffer) {
                    let version = codec.version().expect("a decoded packet has a version");
                    let mut encoder = Codec::new(Limits::default());
                    encoder.set_version(version);
                    let mut out = BytesMut::new();
                    encoder.encode(&packet, &mut out).expect("a decoded packet encodes");
                    let mut decoder = Codec::new(Limits::default());
                    decoder.set_version(version);
                    assert_eq!(decoder.decode(&mut out).ok().flatten().as_ref(), Some(&packet));
                }
                buffer.extend_from_slice(more);
            }
        }
    }
});
