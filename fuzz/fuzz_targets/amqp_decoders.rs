//! The AMQP 1.0 decoders under libFuzzer: the first byte picks the target (the codec fed
//! in two chunks, the value decoder, the message decoder), the rest is the input. Seed the
//! corpus with the recorded traffic: `cp ../protocol/fixtures/amqp/*/*.bin corpus/amqp_decoders/`.
#![no_main]

use bytes::{Bytes, BytesMut};
use libfuzzer_sys::fuzz_target;
use protocol::amqp::{Codec, Decoder, Limits, Message};

fuzz_target!(|input: &[u8]| {
    let Some((&selector, data)) = input.split_first() else { return };
    let depth = Limits::default_nesting_depth();
    match selector % 3 {
        0 => {
            let mut codec = Codec::new(Limits::default());
            let half = data.len() / 2;
            let mut buffer = BytesMut::from(&data[..half]);
            for more in [&data[half..], &[][..]] {
                while let Ok(Some(_)) = codec.decode(&mut buffer) {}
                buffer.extend_from_slice(more);
            }
        }
        1 => {
            let bytes = Bytes::copy_from_slice(data);
            let mut decoder = Decoder::new(&bytes, depth);
            while decoder.remaining() > 0 && decoder.read_value().is_ok() {}
        }
        _ => {
            let _ = Message::decode(&Bytes::copy_from_slice(data), depth);
        }
    }
});
