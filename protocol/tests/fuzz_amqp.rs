//! A time-bounded fuzzer of the AMQP 1.0 decoders that runs on stable Rust in every test run
//! (no cargo-fuzz, no nightly): random and mutated inputs, seeded from the recorded traffic
//! in `protocol/fixtures/amqp`, go through
//!
//! - the [`Codec`] (protocol headers, SASL and AMQP frames, performatives), fed in random
//!   chunks as a socket would deliver them, with default and tiny frame-size limits;
//! - the value decoder ([`Decoder::read_value`]), and the encoder on whatever decodes;
//! - the message decoder ([`Message::decode`]) and the multi-frame [`DeliveryAssembler`].
//!
//! Every outcome is fine except a panic (or a stack overflow, which aborts the process) and
//! an allocation out of proportion to the input: inputs are at most 64 KiB and the test
//! checks that the process's peak resident memory stays within `fuzzing::MAX_PEAK_GROWTH` of where
//! it started (the decoders check declared sizes against the bytes present before they
//! allocate; a decoder that trusted a declared count would blow far past it).
//!
//! `FERROMQ_FUZZ_SECONDS` (default 10) bounds the time, shared by the three targets, which
//! run in parallel; `FERROMQ_FUZZ_SEED` fixes the seed (else one is drawn and printed). Each
//! input is a function of the seed and its iteration number, so a failure prints both and
//! the input, and `FERROMQ_FUZZ_SEED=S FERROMQ_FUZZ_ITERATION=N` replays just that input:
//!
//! ```text
//! FERROMQ_FUZZ_SECONDS=600 cargo test --release -p protocol --test fuzz_amqp -- --nocapture
//! ```

mod fuzzing;

use std::path::Path;
use std::sync::OnceLock;

use bytes::{Bytes, BytesMut};
use fuzzing::{Dialect, Rng, MAX_INPUT};
use protocol::amqp::{
    encode_value, Assembled, Codec, Decoded, Decoder, DeliveryAssembler, Frame, Limits, Message,
    Performative, Value,
};

const DEPTH: usize = Limits::default_nesting_depth();

fn corpus() -> &'static [Vec<u8>] {
    static CORPUS: OnceLock<Vec<Vec<u8>>> = OnceLock::new();
    CORPUS.get_or_init(|| {
        let dir = Path::new(env!("CARGO_MANIFEST_DIR")).join("fixtures/amqp");
        let mut corpus = Vec::new();
        for scenario in ["send-receive", "release-then-accept", "binary-multiframe"] {
            for file in ["conn-01.client-to-broker.bin", "conn-01.broker-to-client.bin"] {
                let wire = std::fs::read(dir.join(scenario).join(file)).expect("fixture");
                let mut rest = &wire[..];
                while rest.len() >= 8 {
                    if rest.starts_with(b"AMQP") {
                        rest = &rest[8..];
                        continue;
                    }
                    let size = u32::from_be_bytes([rest[0], rest[1], rest[2], rest[3]]) as usize;
                    let Some(frame) = rest.get(..size) else { break };
                    let doff = usize::from(frame[4]) * 4;
                    if let Some(body) = frame.get(doff..).filter(|b| b.len() <= MAX_INPUT) {
                        corpus.push(body.to_vec());
                    }
                    rest = &rest[size.max(8)..];
                }
                // Whole streams, cut to the input bound (the 256 KiB one keeps its start).
                corpus.push(wire[..wire.len().min(MAX_INPUT)].to_vec());
            }
        }
        assert!(corpus.len() > 20, "the fixtures hold frames: {} inputs", corpus.len());
        corpus
    })
}

/// Bytes that matter to the decoders: format codes, and lengths at their edges.
const INTERESTING: &[u8] = &[
    0x00, 0x40, 0x41, 0x42, 0x53, 0x70, 0x7f, 0x80, 0x98, 0xa0, 0xa1, 0xa3, 0xb0, 0xb1, 0xc0, 0xc1,
    0xd0, 0xd1, 0xe0, 0xf0, 0xff,
];

const DIALECT: Dialect = Dialect {
    test: "fuzz_amqp",
    corpus,
    interesting: INTERESTING,
    // Size and count fields of 4 bytes claiming far more than is there.
    big_lengths: &[
        &[0xff, 0xff, 0xff, 0xff],
        &[0x7f, 0xff, 0xff, 0xff],
        &[0x01, 0, 0, 0],
        &[0, 0, 0xff, 0xff],
    ],
    structure: deep_nesting,
};

/// Deep nesting: a run of list8 / described headers.
fn deep_nesting(rng: &mut Rng) -> Vec<u8> {
    let opener: &[u8] = [&[0xc0u8, 0xff, 0x01][..], &[0x00, 0x53, 0x70]][rng.below(2)];
    let times = 1 + rng.below(200);
    opener.iter().copied().cycle().take(opener.len() * times).collect()
}

/// Runs `target` through the shared harness with AMQP's corpus and mutations.
fn fuzz(name: &str, salt: u64, target: impl Fn(&mut Rng, &[u8])) {
    fuzzing::fuzz(&DIALECT, name, salt, target);
}

#[test]
fn fuzz_codec() {
    fuzz("fuzz_codec", 0x0063_6f64_6563, |rng, data| {
        let max_frame_size = [1 << 20, 512, 8][rng.below(3)];
        let mut codec = Codec::new(Limits { max_frame_size, ..Limits::default() });
        // A stream starts with a header: give most inputs one, so that frames get decoded.
        let mut wire = Vec::new();
        match rng.below(4) {
            0 => wire.extend_from_slice(b"AMQP\x00\x01\x00\x00"),
            1 => wire.extend_from_slice(b"AMQP\x03\x01\x00\x00"),
            _ => {}
        }
        wire.extend_from_slice(data);
        let mut buffer = BytesMut::new();
        let mut fed = 0;
        while fed < wire.len() {
            let chunk = 1 + rng.below(wire.len() - fed);
            buffer.extend_from_slice(&wire[fed..fed + chunk]);
            fed += chunk;
            loop {
                match codec.decode(&mut buffer) {
                    Ok(Some(Decoded::Frame(Frame::Amqp(frame)))) => {
                        // Whatever decodes must encode again.
                        let mut out = BytesMut::new();
                        let _ = codec.encode(&Frame::Amqp(frame.clone()), &mut out);
                        if let Performative::Transfer(_) = frame.performative {
                            let _ = Message::decode(&frame.payload, DEPTH);
                        }
                    }
                    Ok(Some(_)) => {}
                    Ok(None) => break,
                    Err(_) => return,
                }
            }
        }
    });
}

#[test]
fn fuzz_value_decoder() {
    fuzz("fuzz_value_decoder", 0x0076_616c_7565, |_, data| {
        let bytes = Bytes::copy_from_slice(data);
        let mut decoder = Decoder::new(&bytes, DEPTH);
        while decoder.remaining() > 0 {
            let Ok(value) = decoder.read_value() else { return };
            round_trip(&value);
        }
    });
}

#[test]
fn fuzz_message_decoder() {
    fuzz("fuzz_message_decoder", 0x006d_6573_7361, |rng, data| {
        let bytes = Bytes::copy_from_slice(data);
        if let Ok(message) = Message::decode(&bytes, DEPTH) {
            let encoded = message.to_bytes().expect("a decoded message encodes");
            let again = Message::decode(&encoded, DEPTH);
            assert!(again.is_ok(), "a re-encoded message does not decode: {again:?}");
        }
        // The same bytes as a delivery split over random transfers.
        let mut assembler = DeliveryAssembler::new(MAX_INPUT as u64 / 2);
        let mut rest = bytes;
        while !rest.is_empty() {
            let chunk = rest.split_to(1 + rng.below(rest.len()));
            let transfer = protocol::amqp::Transfer {
                handle: 0,
                delivery_id: (!rng.chance(8)).then_some(0),
                more: Some(!rest.is_empty() && !rng.chance(16)),
                aborted: rng.chance(32).then_some(true),
                ..protocol::amqp::Transfer::default()
            };
            match assembler.push(transfer, chunk) {
                Ok(Assembled::Complete(delivery)) => {
                    let _ = Message::decode(&delivery.payload, DEPTH);
                }
                Ok(_) => {}
                Err(_) => return,
            }
        }
    });
}

/// A decoded value encodes, and its encoding decodes.
fn round_trip(value: &Value) {
    let mut out = BytesMut::new();
    if encode_value(value, &mut out).is_ok() {
        let bytes = out.freeze();
        let again = Decoder::new(&bytes, DEPTH + 1).read_value();
        assert!(again.is_ok(), "the encoding of {value:?} does not decode: {again:?}");
    }
}
