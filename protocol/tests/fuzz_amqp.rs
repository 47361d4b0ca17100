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
//! checks that the process's peak resident memory stays within [`MAX_PEAK_GROWTH`] of where
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

use std::panic::AssertUnwindSafe;
use std::path::Path;
use std::sync::OnceLock;
use std::time::{Duration, Instant};

use bytes::{Bytes, BytesMut};
use protocol::amqp::{
    encode_value, Assembled, Codec, Decoded, Decoder, DeliveryAssembler, Frame, Limits, Message,
    Performative, Value,
};

/// The largest input a mutation may produce.
const MAX_INPUT: usize = 64 * 1024;
/// How much the peak resident set may grow over a whole run.
const MAX_PEAK_GROWTH: u64 = 256 << 20;
const DEPTH: usize = Limits::default_nesting_depth();

/// SplitMix64: tiny, good enough to drive mutations, and reproducible from one number.
struct Rng(u64);

impl Rng {
    fn next(&mut self) -> u64 {
        self.0 = self.0.wrapping_add(0x9E37_79B9_7F4A_7C15);
        let mut z = self.0;
        z = (z ^ (z >> 30)).wrapping_mul(0xBF58_476D_1CE4_E5B9);
        z = (z ^ (z >> 27)).wrapping_mul(0x94D0_49BB_1331_11EB);
        z ^ (z >> 31)
    }

    fn below(&mut self, n: usize) -> usize {
        if n == 0 {
            0
        } else {
            (self.next() % n as u64) as usize
        }
    }

    fn chance(&mut self, one_in: usize) -> bool {
        self.below(one_in) == 0
    }
}

fn seed() -> u64 {
    static SEED: OnceLock<u64> = OnceLock::new();
    *SEED.get_or_init(|| match std::env::var("FERROMQ_FUZZ_SEED") {
        Ok(text) => text.parse().expect("FERROMQ_FUZZ_SEED is a u64"),
        Err(_) => {
            let nanos = std::time::SystemTime::now()
                .duration_since(std::time::UNIX_EPOCH)
                .map_or(0, |d| d.as_nanos() as u64);
            nanos ^ u64::from(std::process::id()).rotate_left(32)
        }
    })
}

fn budget() -> Duration {
    let seconds = std::env::var("FERROMQ_FUZZ_SECONDS")
        .ok()
        .map(|s| s.parse::<f64>().expect("FERROMQ_FUZZ_SECONDS is a number"))
        .unwrap_or(10.0);
    Duration::from_secs_f64(seconds.max(0.0))
}

/// Peak resident set size (`VmHWM`), in bytes; 0 where `/proc` does not say.
fn peak_rss() -> u64 {
    let status = std::fs::read_to_string("/proc/self/status").unwrap_or_default();
    status
        .lines()
        .find_map(|line| line.strip_prefix("VmHWM:"))
        .and_then(|rest| rest.trim().trim_end_matches("kB").trim().parse::<u64>().ok())
        .map_or(0, |kb| kb * 1024)
}

fn baseline_rss() -> u64 {
    static BASELINE: OnceLock<u64> = OnceLock::new();
    *BASELINE.get_or_init(peak_rss)
}

/// The recorded connections (whole byte streams, each direction) and their frame bodies.
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

/// One input: a corpus entry mutated a few times, or (now and then) plain random bytes.
fn input(rng: &mut Rng) -> Vec<u8> {
    let corpus = corpus();
    if rng.chance(16) {
        let len = rng.below(512);
        return (0..len).map(|_| rng.next() as u8).collect();
    }
    let mut data = corpus[rng.below(corpus.len())].clone();
    for _ in 0..1 + rng.below(8) {
        mutate(rng, &mut data);
    }
    data.truncate(MAX_INPUT);
    data
}

fn mutate(rng: &mut Rng, data: &mut Vec<u8>) {
    let at = rng.below(data.len() + 1);
    match rng.below(9) {
        0 if !data.is_empty() => {
            let i = at.min(data.len() - 1);
            data[i] ^= 1 << rng.below(8);
        }
        1 if !data.is_empty() => {
            let i = at.min(data.len() - 1);
            data[i] = INTERESTING[rng.below(INTERESTING.len())];
        }
        2 if data.len() >= 4 => {
            // A length or count field claiming far more than is there.
            let i = at.min(data.len() - 4);
            let big = [0xffff_ffffu32, 0x7fff_ffff, 0x0100_0000, 0x0000_ffff][rng.below(4)];
            data[i..i + 4].copy_from_slice(&big.to_be_bytes());
        }
        3 => {
            let extra: Vec<u8> = (0..1 + rng.below(16)).map(|_| rng.next() as u8).collect();
            data.splice(at..at, extra);
        }
        4 if !data.is_empty() => {
            let end = (at + 1 + rng.below(32)).min(data.len());
            data.drain(at.min(end)..end);
        }
        5 if !data.is_empty() => {
            // Repeat a slice (nested lists and maps).
            let start = at.min(data.len() - 1);
            let end = (start + 1 + rng.below(64)).min(data.len());
            let copy = data[start..end].to_vec();
            let to = rng.below(data.len() + 1);
            data.splice(to..to, copy);
        }
        6 => {
            // Splice in part of another input.
            let corpus = corpus();
            let other = &corpus[rng.below(corpus.len())];
            let start = rng.below(other.len());
            let end = (start + rng.below(256)).min(other.len());
            data.splice(at..at, other[start..end].iter().copied());
        }
        7 => data.truncate(at),
        _ => {
            // Deep nesting: a run of list8 / described headers.
            let opener: &[u8] = [&[0xc0u8, 0xff, 0x01][..], &[0x00, 0x53, 0x70]][rng.below(2)];
            let times = 1 + rng.below(200);
            let run: Vec<u8> = opener.iter().copied().cycle().take(opener.len() * times).collect();
            data.splice(at..at, run);
        }
    }
}

/// Runs `target` on fresh inputs until the time share is used (or just the one iteration
/// `FERROMQ_FUZZ_ITERATION` names), reporting the seed, iteration and input of a panic.
fn fuzz(name: &str, salt: u64, target: impl Fn(&mut Rng, &[u8])) {
    let seed = seed();
    baseline_rss();
    let only = std::env::var("FERROMQ_FUZZ_ITERATION").ok().map(|n| n.parse::<u64>().expect("u64"));
    let deadline = Instant::now() + budget() / 3;
    let mut iteration = only.unwrap_or(0);
    let mut done = 0u64;
    loop {
        let mut rng = Rng(seed ^ salt ^ iteration.wrapping_mul(0xA076_1D64_78BD_642F));
        let data = input(&mut rng);
        let outcome = std::panic::catch_unwind(AssertUnwindSafe(|| target(&mut rng, &data)));
        if let Err(panic) = outcome {
            eprintln!(
                "fuzz target `{name}` panicked: replay with FERROMQ_FUZZ_SEED={seed} \
                 FERROMQ_FUZZ_ITERATION={iteration} cargo test -p protocol --test fuzz_amqp {name}\n\
                 input ({} bytes): {}",
                data.len(),
                data.iter().map(|b| format!("{b:02x}")).collect::<String>()
            );
            std::panic::resume_unwind(panic);
        }
        done += 1;
        let last = only.is_some() || Instant::now() >= deadline;
        // Reading /proc costs more than a small input: look every 64 inputs and at the end.
        let growth = if done.is_multiple_of(64) || last {
            peak_rss().saturating_sub(baseline_rss())
        } else {
            0
        };
        assert!(
            growth < MAX_PEAK_GROWTH,
            "`{name}`: peak memory grew by {growth} bytes by iteration {iteration} \
             (FERROMQ_FUZZ_SEED={seed} FERROMQ_FUZZ_ITERATION={iteration})"
        );
        if last {
            break;
        }
        iteration += 1;
    }
    println!("fuzz `{name}`: {done} inputs, seed {seed}");
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
