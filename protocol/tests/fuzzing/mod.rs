//! The stable, time-bounded fuzzing harness the decoders' fuzz tests share
//! (`fuzz_amqp.rs`, `fuzz_mqtt.rs`): a reproducible generator, corpus-based inputs and
//! mutations, and the loop that runs a target for its share of `FERROMQ_FUZZ_SECONDS`,
//! replays one input (`FERROMQ_FUZZ_SEED`, `FERROMQ_FUZZ_ITERATION`) and watches the peak
//! resident memory. What is a protocol's own is its [`Dialect`].

use std::panic::AssertUnwindSafe;
use std::sync::OnceLock;
use std::time::{Duration, Instant};

/// The largest input a mutation may produce.
pub const MAX_INPUT: usize = 64 * 1024;
/// How much the peak resident set may grow over a whole run.
pub const MAX_PEAK_GROWTH: u64 = 256 << 20;

/// What a protocol's fuzz test gives the harness.
pub struct Dialect {
    /// The test target's name, for the replay command (`fuzz_amqp`).
    pub test: &'static str,
    /// The inputs mutations start from.
    pub corpus: fn() -> &'static [Vec<u8>],
    /// Bytes that matter to the decoders (type codes, lengths at their edges).
    pub interesting: &'static [u8],
    /// Length fields claiming far more than is there, each at most 4 bytes.
    pub big_lengths: &'static [&'static [u8]],
    /// A run of the protocol's own structure to splice in (deep nesting, a fixed header).
    pub structure: fn(&mut Rng) -> Vec<u8>,
}

/// SplitMix64: tiny, good enough to drive mutations, and reproducible from one number.
pub struct Rng(pub u64);

impl Rng {
    pub fn next(&mut self) -> u64 {
        self.0 = self.0.wrapping_add(0x9E37_79B9_7F4A_7C15);
        let mut z = self.0;
        z = (z ^ (z >> 30)).wrapping_mul(0xBF58_476D_1CE4_E5B9);
        z = (z ^ (z >> 27)).wrapping_mul(0x94D0_49BB_1331_11EB);
        z ^ (z >> 31)
    }

    pub fn below(&mut self, n: usize) -> usize {
        if n == 0 {
            0
        } else {
            (self.next() % n as u64) as usize
        }
    }

    pub fn chance(&mut self, one_in: usize) -> bool {
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

/// One input: a corpus entry mutated a few times, or (now and then) plain random bytes.
fn input(dialect: &Dialect, rng: &mut Rng) -> Vec<u8> {
    let corpus = (dialect.corpus)();
    if rng.chance(16) {
        let len = rng.below(512);
        return (0..len).map(|_| rng.next() as u8).collect();
    }
    let mut data = corpus[rng.below(corpus.len())].clone();
    for _ in 0..1 + rng.below(8) {
        mutate(dialect, rng, &mut data);
    }
    data.truncate(MAX_INPUT);
    data
}

fn mutate(dialect: &Dialect, rng: &mut Rng, data: &mut Vec<u8>) {
    let at = rng.below(data.len() + 1);
    match rng.below(9) {
        0 if !data.is_empty() => {
            let i = at.min(data.len() - 1);
            data[i] ^= 1 << rng.below(8);
        }
        1 if !data.is_empty() => {
            let i = at.min(data.len() - 1);
            data[i] = dialect.interesting[rng.below(dialect.interesting.len())];
        }
        2 if data.len() >= 4 => {
            // A length claiming far more than is there.
            let i = at.min(data.len() - 4);
            let big = dialect.big_lengths[rng.below(dialect.big_lengths.len())];
            data[i..i + big.len()].copy_from_slice(big);
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
            // Repeat a slice (nested values, properties, filters, whole packets).
            let start = at.min(data.len() - 1);
            let end = (start + 1 + rng.below(64)).min(data.len());
            let copy = data[start..end].to_vec();
            let to = rng.below(data.len() + 1);
            data.splice(to..to, copy);
        }
        6 => {
            // Splice in part of another input.
            let corpus = (dialect.corpus)();
            let other = &corpus[rng.below(corpus.len())];
            let start = rng.below(other.len());
            let end = (start + rng.below(256)).min(other.len());
            data.splice(at..at, other[start..end].iter().copied());
        }
        7 => data.truncate(at),
        _ => {
            let run = (dialect.structure)(rng);
            data.splice(at..at, run);
        }
    }
}

/// Runs `target` on fresh inputs until the time share is used (or just the one iteration
/// `FERROMQ_FUZZ_ITERATION` names), reporting the seed, iteration and input of a panic.
pub fn fuzz(dialect: &Dialect, name: &str, salt: u64, target: impl Fn(&mut Rng, &[u8])) {
    let seed = seed();
    baseline_rss();
    let only = std::env::var("FERROMQ_FUZZ_ITERATION").ok().map(|n| n.parse::<u64>().expect("u64"));
    let deadline = Instant::now() + budget() / 3;
    let mut iteration = only.unwrap_or(0);
    let mut done = 0u64;
    loop {
        let mut rng = Rng(seed ^ salt ^ iteration.wrapping_mul(0xA076_1D64_78BD_642F));
        let data = input(dialect, &mut rng);
        let outcome = std::panic::catch_unwind(AssertUnwindSafe(|| target(&mut rng, &data)));
        if let Err(panic) = outcome {
            eprintln!(
                "fuzz target `{name}` panicked: replay with FERROMQ_FUZZ_SEED={seed} \
                 FERROMQ_FUZZ_ITERATION={iteration} cargo test -p protocol --test {} {name}\n\
                 input ({} bytes): {}",
                dialect.test,
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
