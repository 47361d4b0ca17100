//! Crash tests of the real `ferromq` binary on the journal store (the default store).
//!
//! - [`kill_9_rounds_lose_no_confirmed_message_and_resurrect_no_acked_one`]: many rounds on
//!   one data directory of: start the broker, run producers and consumers over STOMP at once,
//!   SIGKILL the broker at a random moment. The test keeps a ledger of what the broker
//!   confirmed (a RECEIPT for a SEND: the message is durable; a RECEIPT for an ACK: the ack is
//!   durable) and checks every delivery against it, then drains the queues at the end:
//!   every confirmed message that was never acked comes back, no message whose ack was
//!   confirmed ever comes back, nothing that was never sent appears, and a message delivered
//!   twice is marked `redelivered:true` the second time. Unconfirmed sends may or may not
//!   survive, and so may messages whose ack was not confirmed.
//! - [`second_broker_on_the_same_data_dir_refuses_and_the_first_is_unharmed`].
//! - [`journal_is_the_default_and_survives_a_clean_restart`].
//!
//! The random choices (kill delays, message sizes, which deliveries are left unacked) come
//! from a seed printed at the start; `FERROMQ_CRASH_SEED=<seed>` replays them (the timing of
//! the processes still varies). Every spawned broker is wrapped in [`Process`], which kills it
//! when the test ends, passes or fails; its stderr goes to a file in the test's temporary
//! directory, and is printed when a check fails.

use std::collections::{BTreeMap, BTreeSet};
use std::fs::File;
use std::io::{ErrorKind, Read, Write};
use std::net::{SocketAddr, TcpListener, TcpStream};
use std::path::{Path, PathBuf};
use std::process::{Child, Command, ExitStatus, Stdio};
use std::sync::atomic::{AtomicU64, Ordering};
use std::sync::{Arc, Mutex};
use std::time::{Duration, Instant};

/// How long a broker may take to refuse a bad start, or to stop after a signal.
const EXIT_TIMEOUT: Duration = Duration::from_secs(10);
/// How long a broker may take to start accepting connections (recovery included).
const START_TIMEOUT: Duration = Duration::from_secs(20);
/// How long to wait for one STOMP frame.
const FRAME_TIMEOUT: Duration = Duration::from_secs(10);

/// Rounds of the crash test; every [`EARLY_KILL_EVERY`]th one kills the broker while it
/// starts (recovering) instead of under traffic.
const ROUNDS: u64 = 30;
const EARLY_KILL_EVERY: u64 = 6;
/// Concurrent producers and consumers of each traffic round.
const PRODUCERS: u64 = 3;
const CONSUMERS: u64 = 2;
/// The queues the producers spread their messages over (every consumer subscribes to all).
const QUEUES: [&str; 2] = ["/queue/crash.a", "/queue/crash.b"];
/// The header carrying the test's id of a message.
const ID_HEADER: &str = "x-crash-id";
/// The share (in percent) of deliveries a consumer leaves unacknowledged.
const UNACKED_PERCENT: u64 = 15;
/// Consumers start up to this long after the producers, so that a backlog builds up.
const CONSUMER_DELAY_MS: u64 = 250;
/// The crash test's configuration: still the journal, with small data files and frequent
/// checkpoints, so that twenty short rounds roll segments, write checkpoints and reclaim
/// files (all of which a kill can interrupt). With the defaults (32 MiB segments, a
/// checkpoint every 8 MiB) rounds this short never checkpoint, and every restart adds a
/// preallocated head segment that the next recovery reads whole.
const CRASH_CONFIG: &str = "[store]\nkind = \"journal\"\nsegment_size = 1_048_576\n\
                            checkpoint_bytes = 262_144\n";

// ----- the broker process -----

/// A running `ferromq` process, killed on drop unless it has exited.
struct Process {
    child: Child,
    stderr_path: PathBuf,
    exited: Option<ExitStatus>,
}

impl Process {
    /// Starts `ferromq ARGS...` with its stderr in `dir/<name>.stderr`.
    fn start(dir: &Path, name: &str, args: &[&str]) -> Process {
        let stderr_path = dir.join(format!("{name}.stderr"));
        let stderr = File::create(&stderr_path).expect("create the stderr file");
        let child = Command::new(env!("CARGO_BIN_EXE_ferromq"))
            .args(args)
            .current_dir(dir)
            .env("RUST_LOG", "info")
            .stdin(Stdio::null())
            .stdout(Stdio::null())
            .stderr(stderr)
            .spawn()
            .expect("spawn ferromq");
        Process { child, stderr_path, exited: None }
    }

    /// `ferromq start` with a STOMP connector on `port`, on `data`.
    fn start_broker(dir: &Path, name: &str, data: &Path, port: u16) -> Process {
        let uri = format!("stomp://127.0.0.1:{port}");
        Process::start(dir, name, &["start", "--connector", &uri, "--data-dir", path_str(data)])
    }

    /// [`Process::start_broker`] with the configuration file `config`.
    fn start_configured(dir: &Path, name: &str, config: &Path, data: &Path, port: u16) -> Process {
        let uri = format!("stomp://127.0.0.1:{port}");
        let args = [
            "start",
            "--config",
            path_str(config),
            "--connector",
            &uri,
            "--data-dir",
            path_str(data),
        ];
        Process::start(dir, name, &args)
    }

    fn pid(&self) -> u32 {
        self.child.id()
    }

    fn stderr(&self) -> String {
        std::fs::read_to_string(&self.stderr_path).unwrap_or_default()
    }

    /// The exit status if the process has exited.
    fn try_status(&mut self) -> Option<ExitStatus> {
        if self.exited.is_none() {
            self.exited = self.child.try_wait().expect("query the child's status");
        }
        self.exited
    }

    /// Waits for the process to exit, at most `timeout`; fails the test otherwise.
    fn wait_exit(&mut self, timeout: Duration) -> ExitStatus {
        let deadline = Instant::now() + timeout;
        loop {
            if let Some(status) = self.try_status() {
                return status;
            }
            assert!(
                Instant::now() < deadline,
                "ferromq (pid {}) did not exit within {timeout:?}; stderr so far:\n{}",
                self.pid(),
                self.stderr()
            );
            std::thread::sleep(Duration::from_millis(10));
        }
    }

    /// Waits until `addr` accepts connections, failing early if the broker exits.
    fn wait_accepting(&mut self, addr: SocketAddr) {
        let deadline = Instant::now() + START_TIMEOUT;
        loop {
            if let Some(status) = self.try_status() {
                panic!(
                    "ferromq exited ({status}) instead of accepting on {addr}; stderr:\n{}",
                    self.stderr()
                );
            }
            if TcpStream::connect_timeout(&addr, Duration::from_millis(200)).is_ok() {
                return;
            }
            assert!(
                Instant::now() < deadline,
                "ferromq did not accept on {addr} within {START_TIMEOUT:?}; stderr:\n{}",
                self.stderr()
            );
            std::thread::sleep(Duration::from_millis(10));
        }
    }

    /// Sends `signal` (KILL, TERM...) with kill(1).
    fn signal(&self, signal: &str) {
        let status = Command::new("kill")
            .arg(format!("-{signal}"))
            .arg(self.pid().to_string())
            .status()
            .expect("run kill");
        assert!(status.success(), "kill -{signal} {} failed: {status}", self.pid());
    }

    /// SIGKILL, then reap the process (its data directory lock is released with it).
    fn kill_9(&mut self) {
        if self.try_status().is_none() {
            self.signal("KILL");
        }
        self.wait_exit(EXIT_TIMEOUT);
    }

    /// SIGTERM and expect a clean exit.
    fn stop(&mut self) {
        self.signal("TERM");
        let status = self.wait_exit(EXIT_TIMEOUT);
        assert!(status.success(), "ferromq exited with {status} after SIGTERM:\n{}", self.stderr());
    }
}

impl Drop for Process {
    fn drop(&mut self) {
        if self.try_status().is_none() {
            let _ = self.child.kill();
            let _ = self.child.wait();
        }
    }
}

/// A port that was free a moment ago.
fn free_port() -> u16 {
    let listener = TcpListener::bind("127.0.0.1:0").expect("bind an ephemeral port");
    listener.local_addr().expect("local address").port()
}

fn loopback(port: u16) -> SocketAddr {
    SocketAddr::from(([127, 0, 0, 1], port))
}

fn temp_dir() -> tempfile::TempDir {
    tempfile::Builder::new()
        .prefix("ferromq-crash-")
        .tempdir()
        .expect("create a temporary directory")
}

fn path_str(path: &Path) -> &str {
    path.to_str().expect("UTF-8 temporary path")
}

// ----- a small deterministic random generator (splitmix64) -----

struct Rng(u64);

impl Rng {
    fn next(&mut self) -> u64 {
        self.0 = self.0.wrapping_add(0x9E37_79B9_7F4A_7C15);
        let mut z = self.0;
        z = (z ^ (z >> 30)).wrapping_mul(0xBF58_476D_1CE4_E5B9);
        z = (z ^ (z >> 27)).wrapping_mul(0x94D0_49BB_1331_11EB);
        z ^ (z >> 31)
    }

    /// Uniform in `low..high`.
    fn range(&mut self, low: u64, high: u64) -> u64 {
        low + self.next() % (high - low)
    }

    fn percent(&mut self, percent: u64) -> bool {
        self.next() % 100 < percent
    }

    fn fork(&mut self) -> Rng {
        Rng(self.next())
    }
}

fn seed() -> u64 {
    match std::env::var("FERROMQ_CRASH_SEED") {
        Ok(text) => text.trim().parse().expect("FERROMQ_CRASH_SEED is a number"),
        Err(_) => std::time::SystemTime::now()
            .duration_since(std::time::UNIX_EPOCH)
            .map(|d| d.as_nanos() as u64)
            .unwrap_or(1),
    }
}

// ----- STOMP over a blocking socket -----

/// A frame read by [`RawStomp`], headers unescaped.
#[derive(Debug)]
struct RawFrame {
    command: String,
    headers: Vec<(String, String)>,
    body: Vec<u8>,
}

impl RawFrame {
    fn header(&self, name: &str) -> Option<&str> {
        self.headers.iter().find(|(n, _)| n == name).map(|(_, v)| v.as_str())
    }

    fn describe(&self) -> String {
        format!("{} {:?} {}", self.command, self.headers, String::from_utf8_lossy(&self.body))
    }
}

/// Just enough STOMP 1.2 over a blocking socket to talk to the real binary: header escaping,
/// bodies by content-length or up to the NUL. Every operation returns the I/O error instead
/// of panicking: the broker is killed under these connections on purpose.
struct RawStomp {
    socket: TcpStream,
    buffer: Vec<u8>,
}

fn escape(text: &str) -> String {
    let mut out = String::with_capacity(text.len());
    for c in text.chars() {
        match c {
            '\\' => out.push_str("\\\\"),
            ':' => out.push_str("\\c"),
            '\n' => out.push_str("\\n"),
            '\r' => out.push_str("\\r"),
            c => out.push(c),
        }
    }
    out
}

fn unescape(text: &str) -> String {
    let mut out = String::with_capacity(text.len());
    let mut chars = text.chars();
    while let Some(c) = chars.next() {
        if c != '\\' {
            out.push(c);
            continue;
        }
        match chars.next() {
            Some('c') => out.push(':'),
            Some('n') => out.push('\n'),
            Some('r') => out.push('\r'),
            Some('\\') => out.push('\\'),
            other => panic!("invalid escape \\{other:?} in header {text:?}"),
        }
    }
    out
}

impl RawStomp {
    /// Connects and exchanges CONNECT / CONNECTED (STOMP 1.2, no heart-beats).
    fn connect(addr: SocketAddr) -> std::io::Result<RawStomp> {
        let socket = TcpStream::connect_timeout(&addr, FRAME_TIMEOUT)?;
        socket.set_read_timeout(Some(FRAME_TIMEOUT))?;
        socket.set_nodelay(true)?;
        let mut stomp = RawStomp { socket, buffer: Vec::new() };
        stomp.send_frame("CONNECT", &[("accept-version", "1.2"), ("host", "localhost")], b"")?;
        let connected = stomp.read_frame()?;
        if connected.command != "CONNECTED" {
            return Err(std::io::Error::other(format!(
                "expected CONNECTED, got {}",
                connected.describe()
            )));
        }
        Ok(stomp)
    }

    /// Connects, panicking on failure (for the tests that expect a healthy broker).
    fn open(addr: SocketAddr) -> RawStomp {
        RawStomp::connect(addr).unwrap_or_else(|e| panic!("connecting to {addr}: {e}"))
    }

    fn set_read_timeout(&self, timeout: Duration) {
        self.socket.set_read_timeout(Some(timeout)).expect("set the read timeout");
    }

    fn send_frame(
        &mut self,
        command: &str,
        headers: &[(&str, &str)],
        body: &[u8],
    ) -> std::io::Result<()> {
        let escaped = command != "CONNECT";
        let mut frame = format!("{command}\n").into_bytes();
        for (name, value) in headers {
            let line = if escaped {
                format!("{}:{}\n", escape(name), escape(value))
            } else {
                format!("{name}:{value}\n")
            };
            frame.extend_from_slice(line.as_bytes());
        }
        if !body.is_empty() {
            frame.extend_from_slice(format!("content-length:{}\n", body.len()).as_bytes());
        }
        frame.push(b'\n');
        frame.extend_from_slice(body);
        frame.push(0);
        self.socket.write_all(&frame)
    }

    /// Reads the next frame (skipping heart-beats). A read timeout comes back as an error
    /// of kind `WouldBlock` or `TimedOut`, with nothing lost: call again to go on waiting.
    fn read_frame(&mut self) -> std::io::Result<RawFrame> {
        loop {
            if let Some(frame) = self.parse()? {
                return Ok(frame);
            }
            let mut chunk = [0u8; 16384];
            let read = self.socket.read(&mut chunk)?;
            if read == 0 {
                return Err(std::io::Error::new(ErrorKind::UnexpectedEof, "connection closed"));
            }
            self.buffer.extend_from_slice(&chunk[..read]);
        }
    }

    /// Reads the next frame and checks its command, panicking otherwise.
    fn expect_frame(&mut self, command: &str) -> RawFrame {
        let frame = self.read_frame().unwrap_or_else(|e| panic!("reading a {command} frame: {e}"));
        assert_eq!(frame.command, command, "expected {command}, got {}", frame.describe());
        frame
    }

    /// Sends a frame with a `receipt` header and waits for that RECEIPT, panicking otherwise.
    fn request(&mut self, command: &str, headers: &[(&str, &str)], body: &[u8], receipt: &str) {
        let mut all = headers.to_vec();
        all.push(("receipt", receipt));
        self.send_frame(command, &all, body).unwrap_or_else(|e| panic!("sending {command}: {e}"));
        let frame = self.expect_frame("RECEIPT");
        assert_eq!(frame.header("receipt-id"), Some(receipt));
    }

    fn parse(&mut self) -> std::io::Result<Option<RawFrame>> {
        let bad = |what: String| std::io::Error::new(ErrorKind::InvalidData, what);
        // Heart-beats (EOLs) between frames.
        let Some(start) = self.buffer.iter().position(|b| *b != b'\n' && *b != b'\r') else {
            self.buffer.clear();
            return Ok(None);
        };
        self.buffer.drain(..start);
        let Some(head_end) = self.buffer.windows(2).position(|w| w == b"\n\n") else {
            return Ok(None);
        };
        let head = String::from_utf8(self.buffer[..head_end].to_vec())
            .map_err(|_| bad("frame head is not UTF-8".into()))?;
        let mut lines = head.lines();
        let command = lines.next().unwrap_or_default().to_owned();
        let escaped = command != "CONNECTED";
        let headers: Vec<(String, String)> =
            lines
                .filter_map(|line| line.split_once(':'))
                .map(|(n, v)| {
                    if escaped {
                        (unescape(n), unescape(v))
                    } else {
                        (n.to_owned(), v.to_owned())
                    }
                })
                .collect();
        let body_start = head_end + 2;
        let length = match headers.iter().find(|(n, _)| n == "content-length") {
            Some((_, v)) => Some(v.parse::<usize>().map_err(|_| bad(format!("length {v}")))?),
            None => None,
        };
        let body_end = match length {
            Some(length) => {
                if self.buffer.len() < body_start + length + 1 {
                    return Ok(None);
                }
                body_start + length
            }
            None => match self.buffer[body_start..].iter().position(|b| *b == 0) {
                Some(at) => body_start + at,
                None => return Ok(None),
            },
        };
        if self.buffer[body_end] != 0 {
            return Err(bad(format!("{command} frame does not end with NUL")));
        }
        let body = self.buffer[body_start..body_end].to_vec();
        self.buffer.drain(..=body_end);
        Ok(Some(RawFrame { command, headers, body }))
    }
}

fn is_timeout(error: &std::io::Error) -> bool {
    matches!(error.kind(), ErrorKind::WouldBlock | ErrorKind::TimedOut)
}

// ----- the crash test's ledger -----

/// What the test sent and what the broker confirmed, over every round.
#[derive(Default)]
struct Ledger {
    /// Every message sent (its SEND written or being written): id -> (round, queue, body).
    sent: BTreeMap<u64, (u64, usize, Vec<u8>)>,
    /// Sends the broker confirmed with a RECEIPT: durable.
    confirmed: BTreeSet<u64>,
    /// How often each message was delivered.
    delivered: BTreeMap<u64, u32>,
    /// Messages an ACK was sent for.
    ack_sent: BTreeSet<u64>,
    /// Acks the broker confirmed with a RECEIPT: the message must never come back.
    ack_confirmed: BTreeSet<u64>,
    /// What went wrong, checked after each round.
    violations: Vec<String>,
}

impl Ledger {
    /// Checks one delivery against what was sent and acked, and records it.
    fn delivery(&mut self, round: u64, frame: &RawFrame) -> Option<u64> {
        let Some(id) = frame.header(ID_HEADER).and_then(|v| v.parse::<u64>().ok()) else {
            self.violations.push(format!("round {round}: a message without an id: {frame:?}"));
            return None;
        };
        let redelivered = frame.header("redelivered") == Some("true");
        let destination = frame.header("destination").unwrap_or_default();
        match self.sent.get(&id) {
            None => self.violations.push(format!(
                "round {round}: message {id} was delivered but never sent ({})",
                frame.describe()
            )),
            Some((sent_round, queue, body)) => {
                if *body != frame.body {
                    self.violations.push(format!(
                        "round {round}: message {id} (sent in round {sent_round}) came back \
                         with a different body ({} bytes instead of {})",
                        frame.body.len(),
                        body.len()
                    ));
                }
                if destination != QUEUES[*queue] {
                    self.violations.push(format!(
                        "round {round}: message {id} was sent to {} but delivered from \
                         {destination}",
                        QUEUES[*queue]
                    ));
                }
            }
        }
        if self.ack_confirmed.contains(&id) {
            self.violations.push(format!(
                "round {round}: message {id} came back although its ack was confirmed \
                 (redelivered:{redelivered})"
            ));
        }
        let times = self.delivered.entry(id).or_insert(0);
        if *times > 0 && !redelivered {
            self.violations.push(format!(
                "round {round}: message {id} was delivered again ({} times before) without \
                 redelivered:true",
                *times
            ));
        }
        *times += 1;
        Some(id)
    }
}

struct Counters {
    next_id: AtomicU64,
}

/// One producer connection: sends persistent messages one at a time, each waiting for its
/// RECEIPT, until the connection breaks (the broker was killed).
fn produce(
    addr: SocketAddr,
    round: u64,
    ledger: Arc<Mutex<Ledger>>,
    counters: Arc<Counters>,
    mut rng: Rng,
) {
    let Ok(mut stomp) = RawStomp::connect(addr) else { return };
    loop {
        let id = counters.next_id.fetch_add(1, Ordering::Relaxed);
        let queue = rng.range(0, QUEUES.len() as u64) as usize;
        // Mostly small bodies, some of a few KiB, a few larger than a page.
        let size = match rng.range(0, 100) {
            0..=79 => rng.range(16, 512),
            80..=97 => rng.range(512, 4096),
            _ => rng.range(16 * 1024, 64 * 1024),
        } as usize;
        let mut body = format!("message {id} of round {round}:").into_bytes();
        let filler = b'a' + (id % 26) as u8;
        body.resize(size.max(body.len()), filler);
        ledger.lock().expect("ledger").sent.insert(id, (round, queue, body.clone()));
        let id_text = id.to_string();
        let receipt = format!("send-{id}");
        let headers = [
            ("destination", QUEUES[queue]),
            ("persistent", "true"),
            (ID_HEADER, id_text.as_str()),
            ("receipt", receipt.as_str()),
        ];
        if stomp.send_frame("SEND", &headers, &body).is_err() {
            return;
        }
        match stomp.read_frame() {
            Ok(frame) if frame.command == "RECEIPT" => {
                let mut ledger = ledger.lock().expect("ledger");
                if frame.header("receipt-id") == Some(receipt.as_str()) {
                    ledger.confirmed.insert(id);
                } else {
                    ledger.violations.push(format!(
                        "round {round}: waiting for {receipt}, got {}",
                        frame.describe()
                    ));
                    return;
                }
            }
            Ok(frame) => {
                ledger.lock().expect("ledger").violations.push(format!(
                    "round {round}: a producer waiting for {receipt} got {}",
                    frame.describe()
                ));
                return;
            }
            Err(_) => return,
        }
    }
}

/// One consumer connection subscribed to every queue with client-individual acks: checks
/// each delivery against the ledger and acks it with a receipt (pipelined, without waiting),
/// except a random few left unacknowledged. Runs until the connection breaks.
fn consume(addr: SocketAddr, round: u64, ledger: Arc<Mutex<Ledger>>, mut rng: Rng) {
    std::thread::sleep(Duration::from_millis(rng.range(0, CONSUMER_DELAY_MS)));
    let Ok(mut stomp) = RawStomp::connect(addr) else { return };
    for (i, queue) in QUEUES.iter().enumerate() {
        let id = format!("sub-{i}");
        let headers = [("destination", *queue), ("id", id.as_str()), ("ack", "client-individual")];
        if stomp.send_frame("SUBSCRIBE", &headers, b"").is_err() {
            return;
        }
    }
    loop {
        let frame = match stomp.read_frame() {
            Ok(frame) => frame,
            Err(_) => return,
        };
        match frame.command.as_str() {
            "MESSAGE" => {
                let Some(id) = ledger.lock().expect("ledger").delivery(round, &frame) else {
                    return;
                };
                if rng.percent(UNACKED_PERCENT) {
                    continue;
                }
                let Some(ack) = frame.header("ack") else {
                    let mut ledger = ledger.lock().expect("ledger");
                    ledger.violations.push(format!("round {round}: no ack header: {frame:?}"));
                    return;
                };
                let receipt = format!("ack-{id}");
                ledger.lock().expect("ledger").ack_sent.insert(id);
                if stomp.send_frame("ACK", &[("id", ack), ("receipt", &receipt)], b"").is_err() {
                    return;
                }
            }
            "RECEIPT" => {
                let receipt = frame.header("receipt-id").unwrap_or_default();
                let mut ledger = ledger.lock().expect("ledger");
                match receipt.strip_prefix("ack-").and_then(|id| id.parse::<u64>().ok()) {
                    Some(id) => {
                        ledger.ack_confirmed.insert(id);
                    }
                    None => ledger.violations.push(format!(
                        "round {round}: a consumer got an unexpected {}",
                        frame.describe()
                    )),
                }
            }
            _ => {
                ledger
                    .lock()
                    .expect("ledger")
                    .violations
                    .push(format!("round {round}: a consumer got {}", frame.describe()));
                return;
            }
        }
    }
}

/// Fails the test with every violation recorded so far, the seed and the broker's stderr.
fn assert_no_violations(ledger: &Mutex<Ledger>, seed: u64, round: u64, stderr: &str) {
    let ledger = ledger.lock().expect("ledger");
    if ledger.violations.is_empty() {
        return;
    }
    let shown: Vec<&String> = ledger.violations.iter().take(20).collect();
    panic!(
        "seed {seed} (FERROMQ_CRASH_SEED={seed}), round {round}: {} violation(s):\n{}\n\
         broker stderr of the round:\n{stderr}",
        ledger.violations.len(),
        shown.iter().map(|s| format!("  {s}")).collect::<Vec<_>>().join("\n")
    );
}

#[test]
fn kill_9_rounds_lose_no_confirmed_message_and_resurrect_no_acked_one() {
    let seed = seed();
    eprintln!("crash test seed {seed} (replay with FERROMQ_CRASH_SEED={seed})");
    let mut rng = Rng(seed);
    let dir = temp_dir();
    let data = dir.path().join("data");
    let config = dir.path().join("crash.toml");
    std::fs::write(&config, CRASH_CONFIG).expect("write the configuration");
    let ledger = Arc::new(Mutex::new(Ledger::default()));
    let counters = Arc::new(Counters { next_id: AtomicU64::new(1) });
    let started = Instant::now();
    let mut traffic_rounds = 0;
    let mut slowest_start = Duration::ZERO;
    let mut most_pending = 0;

    for round in 0..ROUNDS {
        let port = free_port();
        let addr = loopback(port);
        let mut broker =
            Process::start_configured(dir.path(), &format!("round-{round}"), &config, &data, port);
        if round % EARLY_KILL_EVERY == EARLY_KILL_EVERY - 1 {
            // Killed while it opens and recovers the journal (or just after).
            std::thread::sleep(Duration::from_millis(rng.range(5, 80)));
            broker.kill_9();
            continue;
        }
        let start = Instant::now();
        broker.wait_accepting(addr);
        slowest_start = slowest_start.max(start.elapsed());
        traffic_rounds += 1;
        let mut threads = Vec::new();
        for _ in 0..CONSUMERS {
            let (ledger, rng) = (ledger.clone(), rng.fork());
            threads.push(std::thread::spawn(move || consume(addr, round, ledger, rng)));
        }
        for _ in 0..PRODUCERS {
            let (ledger, counters, rng) = (ledger.clone(), counters.clone(), rng.fork());
            threads.push(std::thread::spawn(move || produce(addr, round, ledger, counters, rng)));
        }
        std::thread::sleep(Duration::from_millis(rng.range(50, 400)));
        broker.kill_9();
        for thread in threads {
            thread.join().expect("a client thread panicked");
        }
        assert_no_violations(&ledger, seed, round, &broker.stderr());
        let ledger = ledger.lock().expect("ledger");
        let pending = ledger.confirmed.iter().filter(|id| !ledger.ack_sent.contains(id)).count();
        most_pending = most_pending.max(pending);
    }

    // Drain everything on a last broker, acking each message with a receipt.
    let port = free_port();
    let addr = loopback(port);
    let mut broker = Process::start_configured(dir.path(), "drain", &config, &data, port);
    broker.wait_accepting(addr);
    let mut stomp = RawStomp::open(addr);
    for (i, queue) in QUEUES.iter().enumerate() {
        // No receipt: the first subscription's messages may come before it.
        let id = format!("drain-{i}");
        let headers = [("destination", *queue), ("id", id.as_str()), ("ack", "client-individual")];
        stomp.send_frame("SUBSCRIBE", &headers, b"").expect("subscribe");
    }
    stomp.set_read_timeout(Duration::from_millis(100));
    let mut drained = BTreeSet::new();
    let mut acks_waiting = BTreeSet::new();
    let mut idle_since = Instant::now();
    // Done once every ack is confirmed and nothing arrived for a while.
    while !(acks_waiting.is_empty() && idle_since.elapsed() > Duration::from_millis(1500)) {
        assert!(
            idle_since.elapsed() < FRAME_TIMEOUT,
            "seed {seed}: the drain got no frame for {FRAME_TIMEOUT:?} with {} acks unconfirmed",
            acks_waiting.len()
        );
        let frame = match stomp.read_frame() {
            Ok(frame) => frame,
            Err(e) if is_timeout(&e) => continue,
            Err(e) => panic!("seed {seed}: draining: {e}; stderr:\n{}", broker.stderr()),
        };
        idle_since = Instant::now();
        match frame.command.as_str() {
            "MESSAGE" => {
                let id = ledger.lock().expect("ledger").delivery(ROUNDS, &frame);
                let Some(id) = id else { continue };
                assert!(
                    drained.insert(id),
                    "seed {seed}: message {id} delivered twice in the drain"
                );
                let ack = frame.header("ack").expect("an ack header").to_owned();
                let receipt = format!("drain-ack-{id}");
                stomp.send_frame("ACK", &[("id", &ack), ("receipt", &receipt)], b"").expect("ack");
                acks_waiting.insert(receipt);
            }
            "RECEIPT" => {
                let receipt = frame.header("receipt-id").unwrap_or_default();
                assert!(acks_waiting.remove(receipt), "unexpected {}", frame.describe());
            }
            _ => panic!("seed {seed}: the drain got {}", frame.describe()),
        }
    }
    assert_no_violations(&ledger, seed, ROUNDS, &broker.stderr());

    let ledger = ledger.lock().expect("ledger");
    let lost: Vec<u64> = ledger
        .confirmed
        .iter()
        .filter(|id| !ledger.ack_sent.contains(id) && !drained.contains(id))
        .copied()
        .collect();
    let describe = |id: &u64| {
        let (round, queue, body) = &ledger.sent[id];
        format!(
            "{id} (round {round}, {}, {} bytes, delivered {} times before the drain)",
            QUEUES[*queue],
            body.len(),
            ledger.delivered.get(id).copied().unwrap_or(0) - u32::from(drained.contains(id))
        )
    };
    assert!(
        lost.is_empty(),
        "seed {seed}: {} confirmed and never acked message(s) were lost: {}\nstderr of the \
         drain:\n{}",
        lost.len(),
        lost.iter().take(20).map(describe).collect::<Vec<_>>().join(", "),
        broker.stderr()
    );
    let unconfirmed_survivors = drained.iter().filter(|id| !ledger.confirmed.contains(id)).count();
    let acked_unconfirmed: BTreeSet<u64> =
        ledger.ack_sent.difference(&ledger.ack_confirmed).copied().collect();
    eprintln!(
        "crash test seed {seed}: {ROUNDS} rounds ({traffic_rounds} under traffic) in {:.1?}, \
         slowest start {slowest_start:.1?}, at most {most_pending} confirmed messages pending; \
         sent {}, confirmed {}, delivered {}, acks sent {}, acks confirmed {}; drained {} \
         ({} of them unconfirmed sends, {} with an unconfirmed ack)",
        started.elapsed(),
        ledger.sent.len(),
        ledger.confirmed.len(),
        ledger.delivered.len(),
        ledger.ack_sent.len(),
        ledger.ack_confirmed.len(),
        drained.len(),
        unconfirmed_survivors,
        drained.intersection(&acked_unconfirmed).count(),
    );
    assert!(
        ledger.confirmed.len() >= 100 && ledger.ack_confirmed.len() >= 20,
        "seed {seed}: too little traffic to mean anything ({} confirmed sends, {} confirmed acks)",
        ledger.confirmed.len(),
        ledger.ack_confirmed.len()
    );

    // The drain's acks are durable through a clean stop: nothing is left.
    drop(stomp);
    broker.stop();
    let port = free_port();
    let mut broker = Process::start_configured(dir.path(), "empty", &config, &data, port);
    broker.wait_accepting(loopback(port));
    let mut stomp = RawStomp::open(loopback(port));
    for (i, queue) in QUEUES.iter().enumerate() {
        let id = format!("empty-{i}");
        let headers = [("destination", *queue), ("id", id.as_str()), ("ack", "client-individual")];
        stomp.send_frame("SUBSCRIBE", &headers, b"").expect("subscribe");
    }
    stomp.set_read_timeout(Duration::from_millis(700));
    match stomp.read_frame() {
        Err(e) if is_timeout(&e) => {}
        Ok(frame) => panic!("seed {seed}: after the drain, still {}", frame.describe()),
        Err(e) => panic!("seed {seed}: {e}"),
    }
    drop(stomp);
    broker.stop();
}

// ----- data directory lock and clean restart -----

/// Sends `count` persistent messages `<prefix>-<n>` to `queue`, each confirmed by a RECEIPT.
fn send_confirmed(stomp: &mut RawStomp, queue: &str, prefix: &str, count: usize) -> Vec<String> {
    (0..count)
        .map(|n| {
            let body = format!("{prefix}-{n}");
            let headers = [("destination", queue), ("persistent", "true")];
            stomp.request("SEND", &headers, body.as_bytes(), &format!("{prefix}-r{n}"));
            body
        })
        .collect()
}

/// Subscribes to `queue` (client-individual) and receives exactly `expected` (in order),
/// then checks nothing more arrives. Acks them (with receipts) when `ack`; returns the
/// frames.
fn receive_exactly(
    stomp: &mut RawStomp,
    queue: &str,
    expected: &[String],
    ack: bool,
) -> Vec<RawFrame> {
    stomp.request(
        "SUBSCRIBE",
        &[("destination", queue), ("id", "s"), ("ack", "client-individual")],
        b"",
        "subscribed",
    );
    let mut frames = Vec::new();
    for body in expected {
        let frame = stomp.expect_frame("MESSAGE");
        assert_eq!(String::from_utf8_lossy(&frame.body), *body, "{}", frame.describe());
        frames.push(frame);
    }
    stomp.set_read_timeout(Duration::from_millis(500));
    match stomp.read_frame() {
        Err(e) if is_timeout(&e) => {}
        Ok(frame) => panic!("unexpected extra frame {}", frame.describe()),
        Err(e) => panic!("{e}"),
    }
    stomp.set_read_timeout(FRAME_TIMEOUT);
    if ack {
        for (n, frame) in frames.iter().enumerate() {
            let id = frame.header("ack").expect("an ack header").to_owned();
            stomp.request("ACK", &[("id", &id)], b"", &format!("ack-{n}"));
        }
    }
    frames
}

#[test]
fn second_broker_on_the_same_data_dir_refuses_and_the_first_is_unharmed() {
    let dir = temp_dir();
    let data = dir.path().join("data");
    let queue = "/queue/lock.test";
    let port_a = free_port();
    let mut a = Process::start_broker(dir.path(), "a", &data, port_a);
    a.wait_accepting(loopback(port_a));
    let mut stomp = RawStomp::open(loopback(port_a));
    let mut expected = send_confirmed(&mut stomp, queue, "before", 20);

    // B refuses at once, naming the lock and A's pid.
    let port_b = free_port();
    let mut b = Process::start_broker(dir.path(), "b-refused", &data, port_b);
    let status = b.wait_exit(EXIT_TIMEOUT);
    let stderr = b.stderr();
    assert!(!status.success(), "a second broker on the data dir exited {status}:\n{stderr}");
    assert!(stderr.contains("lock"), "stderr should say the data directory is locked:\n{stderr}");
    assert!(stderr.contains(path_str(&data)), "stderr should name the data directory:\n{stderr}");
    assert!(
        stderr.contains(&a.pid().to_string()),
        "stderr should name the process holding the lock ({}):\n{stderr}",
        a.pid()
    );
    assert!(
        TcpStream::connect_timeout(&loopback(port_b), Duration::from_millis(200)).is_err(),
        "the refused broker must not have served"
    );

    // A is unharmed: still running, its lock intact, its messages there, still accepting.
    assert!(a.try_status().is_none(), "broker A stopped:\n{}", a.stderr());
    let lock = std::fs::read_to_string(data.join("lock")).unwrap_or_default();
    assert_eq!(lock.trim(), a.pid().to_string(), "the lock file should still hold A's pid");
    expected.extend(send_confirmed(&mut stomp, queue, "after", 5));
    let mut reader = RawStomp::open(loopback(port_a));
    // Received without acks: they go back to the queue when the reader disconnects.
    receive_exactly(&mut reader, queue, &expected, false);
    reader.request("DISCONNECT", &[], b"", "bye");
    drop(reader);
    drop(stomp);
    a.stop();

    // Once A stopped cleanly, B starts on the same directory and delivers them all.
    let port_b = free_port();
    let mut b = Process::start_broker(dir.path(), "b", &data, port_b);
    b.wait_accepting(loopback(port_b));
    let mut stomp = RawStomp::open(loopback(port_b));
    receive_exactly(&mut stomp, queue, &expected, true);
    drop(stomp);
    b.stop();
}

#[test]
fn journal_is_the_default_and_survives_a_clean_restart() {
    let dir = temp_dir();
    let data = dir.path().join("data");
    let queue = "/queue/restart.test";
    let port = free_port();
    let mut broker = Process::start_broker(dir.path(), "first", &data, port);
    broker.wait_accepting(loopback(port));
    let mut stomp = RawStomp::open(loopback(port));
    let mut expected = send_confirmed(&mut stomp, queue, "persistent", 30);
    // A body larger than a page, and a non-persistent message that must not survive.
    let large = format!("large-{}", "x".repeat(200 * 1024));
    stomp.request(
        "SEND",
        &[("destination", queue), ("persistent", "true")],
        large.as_bytes(),
        "large",
    );
    expected.push(large);
    stomp.request(
        "SEND",
        &[("destination", queue), ("persistent", "false")],
        b"transient",
        "transient",
    );
    drop(stomp);
    // No store was configured: the messages are in the journal under <data>/journal.
    let journal = data.join("journal");
    let files = std::fs::read_dir(&journal)
        .unwrap_or_else(|e| panic!("no journal directory {}: {e}", journal.display()))
        .count();
    assert!(files > 0, "the journal directory {} is empty", journal.display());

    broker.stop();
    assert!(
        journal.join(store_journal::CLEAN_SHUTDOWN_FILE).exists(),
        "a clean stop should leave the journal's clean-shutdown marker"
    );

    let port = free_port();
    let mut broker = Process::start_broker(dir.path(), "second", &data, port);
    broker.wait_accepting(loopback(port));
    let mut stomp = RawStomp::open(loopback(port));
    let frames = receive_exactly(&mut stomp, queue, &expected, true);
    for frame in &frames {
        assert_eq!(frame.header("persistent"), Some("true"), "{}", frame.describe());
        assert_eq!(
            frame.header("redelivered"),
            Some("false"),
            "after a clean stop nothing was delivered before: {:?}",
            frame.headers
        );
    }
    drop(stomp);
    broker.stop();

    // The acks survived the second clean stop too.
    let port = free_port();
    let mut broker = Process::start_broker(dir.path(), "third", &data, port);
    broker.wait_accepting(loopback(port));
    let mut stomp = RawStomp::open(loopback(port));
    receive_exactly(&mut stomp, queue, &[], false);
    drop(stomp);
    broker.stop();
}
