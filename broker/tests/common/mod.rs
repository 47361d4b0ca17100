//! What the process-level tests (`cli.rs`, `crash.rs`, `producer_consumer.rs`) share: the
//! real `ferromq` binary behind a kill-on-drop guard ([`Process`]), free ports, temporary
//! directories, and just enough STOMP over a blocking socket ([`RawStomp`]) to talk to the
//! binary without another crate's client.
//!
//! A test knows its broker serves from the broker's own `ferromq ready pid=...` line
//! ([`Process::wait_ready`], [`Ready`]), never from a connect to a port: other programs may
//! listen on any port, the default ones (61616, 61613, 8161...) included. Which process
//! listens where, and which holds a data directory's lock, come from `/proc`
//! ([`listening_addrs`], [`flock_holders`]).
//!
//! Every test file is a crate of its own and uses only part of this module.
#![allow(dead_code)]

use std::fs::File;
use std::io::{ErrorKind, Read, Write};
use std::net::{SocketAddr, TcpStream};
use std::path::{Path, PathBuf};
use std::process::{Child, Command, ExitStatus, Stdio};
use std::time::{Duration, Instant};

/// How long a broker may take to refuse a bad start, or to stop after a signal.
pub const EXIT_TIMEOUT: Duration = Duration::from_secs(10);
/// How long a broker may take to start accepting connections (recovery included), and a
/// process to print what it prints when ready.
pub const START_TIMEOUT: Duration = Duration::from_secs(20);
/// How long to wait for one STOMP frame.
pub const FRAME_TIMEOUT: Duration = Duration::from_secs(10);
/// How often the waits below look at the process again.
const POLL: Duration = Duration::from_millis(10);

// ----- the ferromq process -----

/// A running `ferromq` process, killed on drop unless it has exited. Its stdout and stderr go
/// to files in its directory, shown when a check fails.
pub struct Process {
    name: String,
    child: Child,
    stdout_path: PathBuf,
    stderr_path: PathBuf,
    exited: Option<ExitStatus>,
}

impl Process {
    /// Starts `ferromq ARGS...` in `dir`, with its output in `dir/<name>.stdout` and
    /// `dir/<name>.stderr`.
    pub fn start(dir: &Path, name: &str, args: &[&str]) -> Process {
        let stdout_path = dir.join(format!("{name}.stdout"));
        let stderr_path = dir.join(format!("{name}.stderr"));
        let stdout = File::create(&stdout_path).expect("create the stdout file");
        let stderr = File::create(&stderr_path).expect("create the stderr file");
        let child = Command::new(env!("CARGO_BIN_EXE_ferromq"))
            .args(args)
            .current_dir(dir)
            .env("RUST_LOG", "info")
            .stdin(Stdio::null())
            .stdout(stdout)
            .stderr(stderr)
            .spawn()
            .expect("spawn ferromq");
        Process { name: name.to_owned(), child, stdout_path, stderr_path, exited: None }
    }

    /// `ferromq start` with a STOMP connector on `port` (0: the kernel picks one, read it back
    /// with [`Process::wait_ready`]), on `data` (and the admin endpoint on a port the kernel
    /// picks, never 8161, which another program may hold).
    pub fn start_broker(dir: &Path, name: &str, data: &Path, port: u16) -> Process {
        let uri = format!("stomp://127.0.0.1:{port}");
        let admin = ["--admin-bind", "127.0.0.1:0"];
        let args = ["start", "--connector", &uri, "--data-dir", path_str(data), admin[0], admin[1]];
        Process::start(dir, name, &args)
    }

    /// [`Process::start_broker`] with the configuration file `config`.
    pub fn start_configured(
        dir: &Path,
        name: &str,
        config: &Path,
        data: &Path,
        port: u16,
    ) -> Process {
        let connector = format!("stomp://127.0.0.1:{port}");
        Process::start_listening(dir, name, config, data, &connector, "127.0.0.1:0")
    }

    /// `ferromq start` with the configuration file `config` on `data`, one `connector` URI and
    /// the admin endpoint on `admin` (`host:port`).
    pub fn start_listening(
        dir: &Path,
        name: &str,
        config: &Path,
        data: &Path,
        connector: &str,
        admin: &str,
    ) -> Process {
        let args = [
            "start",
            "--config",
            path_str(config),
            "--connector",
            connector,
            "--data-dir",
            path_str(data),
            "--admin-bind",
            admin,
        ];
        Process::start(dir, name, &args)
    }

    pub fn pid(&self) -> u32 {
        self.child.id()
    }

    pub fn stdout(&self) -> String {
        std::fs::read_to_string(&self.stdout_path).unwrap_or_default()
    }

    pub fn stderr(&self) -> String {
        std::fs::read_to_string(&self.stderr_path).unwrap_or_default()
    }

    /// Both outputs, for failure messages.
    pub fn output(&self) -> String {
        format!("--- {} stdout:\n{}--- stderr:\n{}", self.name, self.stdout(), self.stderr())
    }

    /// The exit status if the process has exited.
    pub fn try_status(&mut self) -> Option<ExitStatus> {
        if self.exited.is_none() {
            self.exited = self.child.try_wait().expect("query the child's status");
        }
        self.exited
    }

    /// Waits for the process to exit, at most `timeout`; fails the test otherwise.
    pub fn wait_exit(&mut self, timeout: Duration) -> ExitStatus {
        let deadline = Instant::now() + timeout;
        loop {
            if let Some(status) = self.try_status() {
                return status;
            }
            assert!(
                Instant::now() < deadline,
                "ferromq {} (pid {}) did not exit within {timeout:?}\n{}",
                self.name,
                self.pid(),
                self.output()
            );
            std::thread::sleep(POLL);
        }
    }

    /// Waits, at most `timeout`, for a successful exit and returns stdout.
    pub fn succeed(&mut self, timeout: Duration) -> String {
        let status = self.wait_exit(timeout);
        assert!(status.success(), "ferromq {} exited with {status}\n{}", self.name, self.output());
        self.stdout()
    }

    /// Waits until stdout has `count` lines containing `text`, failing early on an exit.
    pub fn wait_for_lines(&mut self, text: &str, count: usize) {
        let deadline = Instant::now() + START_TIMEOUT;
        while self.stdout().lines().filter(|line| line.contains(text)).count() < count {
            if let Some(status) = self.try_status() {
                panic!(
                    "ferromq {} exited ({status}) before printing {text:?}\n{}",
                    self.name,
                    self.output()
                );
            }
            assert!(
                Instant::now() < deadline,
                "ferromq {} did not print {count} x {text:?} within {START_TIMEOUT:?}\n{}",
                self.name,
                self.output()
            );
            std::thread::sleep(POLL);
        }
    }

    /// Waits for the `ferromq ready` line a broker prints on stdout once it serves, failing
    /// early if the process exits, and checks that the line carries this process's own pid.
    /// Tests learn the bound addresses from it instead of connecting to a port: a connect
    /// may reach another program that happens to listen there (another test's broker, a
    /// broker on the default ports) while this one is still starting, or failed to bind.
    pub fn wait_ready(&mut self) -> Ready {
        let deadline = Instant::now() + START_TIMEOUT;
        loop {
            if let Some(ready) = self.stdout().lines().find_map(Ready::parse) {
                assert_eq!(
                    ready.pid,
                    self.pid(),
                    "ferromq {} printed another process's readiness line\n{}",
                    self.name,
                    self.output()
                );
                return ready;
            }
            if let Some(status) = self.try_status() {
                panic!(
                    "ferromq {} exited ({status}) before it was ready\n{}",
                    self.name,
                    self.output()
                );
            }
            assert!(
                Instant::now() < deadline,
                "ferromq {} was not ready within {START_TIMEOUT:?}\n{}",
                self.name,
                self.output()
            );
            std::thread::sleep(POLL);
        }
    }

    /// Waits until this broker serves on `addr` (one of its connectors, or its admin
    /// endpoint): its own readiness line must name `addr`, so that a test never mistakes
    /// another process listening there for the broker it started.
    pub fn wait_accepting(&mut self, addr: SocketAddr) {
        let ready = self.wait_ready();
        assert!(
            ready.serves(addr),
            "ferromq {} is ready on {:?} (admin {:?}), not on {addr}\n{}",
            self.name,
            ready.connectors,
            ready.admin,
            self.output()
        );
    }

    /// The TCP addresses this process listens on (see [`listening_addrs`]).
    pub fn listening(&self) -> Vec<SocketAddr> {
        listening_addrs(self.pid())
    }

    /// Sends `signal` (KILL, TERM, INT...) with kill(1), unless the process has exited: once
    /// reaped, its pid may already be another process's (another test's broker).
    pub fn signal(&mut self, signal: &str) {
        if self.try_status().is_some() {
            return;
        }
        let status = Command::new("kill")
            .arg(format!("-{signal}"))
            .arg(self.pid().to_string())
            .status()
            .expect("run kill");
        assert!(status.success(), "kill -{signal} {} failed: {status}", self.pid());
    }

    /// SIGKILL, then reap the process (its data directory lock is released with it).
    pub fn kill_9(&mut self) {
        if self.try_status().is_none() {
            self.signal("KILL");
        }
        self.wait_exit(EXIT_TIMEOUT);
    }

    /// SIGTERM and expect a clean exit.
    pub fn stop(&mut self) {
        self.signal("TERM");
        let status = self.wait_exit(EXIT_TIMEOUT);
        assert!(
            status.success(),
            "ferromq {} exited with {status} after SIGTERM\n{}",
            self.name,
            self.output()
        );
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

/// What a broker's `ferromq ready pid=PID SCHEME=ADDRESS... [admin=ADDRESS]` line says.
#[derive(Debug, Clone)]
pub struct Ready {
    pub pid: u32,
    /// Every connector's scheme (`stomp`, `tcp`, `amqp`...) and bound address, in order.
    pub connectors: Vec<(String, SocketAddr)>,
    pub admin: Option<SocketAddr>,
}

impl Ready {
    pub fn parse(line: &str) -> Option<Ready> {
        let mut words = line.strip_prefix("ferromq ready ")?.split_whitespace();
        let pid = words.next()?.strip_prefix("pid=")?.parse().ok()?;
        let mut ready = Ready { pid, connectors: Vec::new(), admin: None };
        for word in words {
            let (key, address) = word.split_once('=')?;
            let address: SocketAddr = address.parse().ok()?;
            match key {
                "admin" => ready.admin = Some(address),
                scheme => ready.connectors.push((scheme.to_owned(), address)),
            }
        }
        Some(ready)
    }

    /// The address of the first connector with `scheme`, as the broker bound it.
    pub fn addr(&self, scheme: &str) -> SocketAddr {
        match self.connectors.iter().find(|(s, _)| s == scheme) {
            Some((_, address)) => *address,
            None => panic!("no {scheme} connector in {self:?}"),
        }
    }

    /// True if `addr` is one of the connectors or the admin endpoint. A connector bound on
    /// every interface (`0.0.0.0`) serves loopback too.
    pub fn serves(&self, addr: SocketAddr) -> bool {
        let same = |bound: &SocketAddr| {
            bound.port() == addr.port() && (bound.ip() == addr.ip() || bound.ip().is_unspecified())
        };
        self.connectors.iter().any(|(_, bound)| same(bound))
            || self.admin.as_ref().is_some_and(same)
    }
}

/// The TCP addresses process `pid` listens on, from `/proc` (empty once it has exited).
pub fn listening_addrs(pid: u32) -> Vec<SocketAddr> {
    store::kit::listening_addrs(pid)
}

/// The processes holding an flock on `path`, from `/proc/locks` (waiters left out).
pub fn flock_holders(path: &Path) -> Vec<u32> {
    use std::os::unix::fs::MetadataExt;
    let Ok(inode) = std::fs::metadata(path).map(|m| m.ino()) else {
        return Vec::new();
    };
    let locks = std::fs::read_to_string("/proc/locks").unwrap_or_default();
    locks
        .lines()
        .filter_map(|line| {
            // 1: FLOCK  ADVISORY  WRITE 4242 08:01:1234567 0 EOF; a waiter's line has "->".
            let fields: Vec<&str> = line.split_whitespace().collect();
            if fields.get(1) != Some(&"FLOCK") {
                return None;
            }
            let held_inode = fields.get(5)?.rsplit(':').next()?.parse::<u64>().ok()?;
            (held_inode == inode).then(|| fields.get(4)?.parse().ok()).flatten()
        })
        .collect()
}

/// Runs `ferromq ARGS...` expecting it to refuse: it must exit, unsuccessfully, within
/// `timeout`. Returns its stderr.
pub fn refused_start(dir: &Path, name: &str, args: &[&str], timeout: Duration) -> String {
    let mut process = Process::start(dir, name, args);
    let status = process.wait_exit(timeout);
    assert!(
        !status.success(),
        "ferromq {args:?} should have failed, but exited with {status}\n{}",
        process.output()
    );
    process.stderr()
}

/// A port that was free a moment ago, outside the ephemeral range (a broker restarted on it
/// must find it free again).
pub fn free_port() -> u16 {
    store::kit::loopback_port().expect("a free loopback port")
}

pub fn loopback(port: u16) -> SocketAddr {
    SocketAddr::from(([127, 0, 0, 1], port))
}

/// A temporary directory named after the test file: `ferromq-<file>-...`.
pub fn temp_dir() -> tempfile::TempDir {
    tempfile::Builder::new()
        .prefix(&format!("ferromq-{}-", env!("CARGO_CRATE_NAME")))
        .tempdir()
        .expect("create a temporary directory")
}

pub fn path_str(path: &Path) -> &str {
    path.to_str().expect("UTF-8 temporary path")
}

// ----- STOMP over a blocking socket -----

/// A frame read by [`RawStomp`], headers unescaped.
#[derive(Debug)]
pub struct RawFrame {
    pub command: String,
    pub headers: Vec<(String, String)>,
    pub body: Vec<u8>,
}

impl RawFrame {
    pub fn header(&self, name: &str) -> Option<&str> {
        self.headers.iter().find(|(n, _)| n == name).map(|(_, v)| v.as_str())
    }

    pub fn describe(&self) -> String {
        format!("{} {:?} {}", self.command, self.headers, String::from_utf8_lossy(&self.body))
    }
}

/// Just enough STOMP 1.2 over a blocking socket to talk to the real binary: header escaping,
/// bodies by content-length or up to the NUL. The operations that return an I/O error instead
/// of panicking are for connections under which the broker is killed on purpose.
pub struct RawStomp {
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
    /// Opens the TCP connection only: the caller sends CONNECT.
    pub fn tcp(addr: SocketAddr) -> std::io::Result<RawStomp> {
        let socket = TcpStream::connect_timeout(&addr, FRAME_TIMEOUT)?;
        socket.set_read_timeout(Some(FRAME_TIMEOUT))?;
        socket.set_nodelay(true)?;
        Ok(RawStomp { socket, buffer: Vec::new() })
    }

    /// Connects and exchanges CONNECT / CONNECTED (STOMP 1.2, no heart-beats).
    pub fn connect(addr: SocketAddr) -> std::io::Result<RawStomp> {
        let mut stomp = RawStomp::tcp(addr)?;
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
    pub fn open(addr: SocketAddr) -> RawStomp {
        RawStomp::connect(addr).unwrap_or_else(|e| panic!("connecting to {addr}: {e}"))
    }

    pub fn set_read_timeout(&self, timeout: Duration) {
        self.socket.set_read_timeout(Some(timeout)).expect("set the read timeout");
    }

    pub fn send_frame(
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

    /// [`RawStomp::send_frame`], panicking on failure.
    pub fn send(&mut self, command: &str, headers: &[(&str, &str)], body: &[u8]) {
        self.send_frame(command, headers, body)
            .unwrap_or_else(|e| panic!("sending {command}: {e}"));
    }

    /// Reads the next frame (skipping heart-beats). A read timeout comes back as an error
    /// of kind `WouldBlock` or `TimedOut`, with nothing lost: call again to go on waiting.
    pub fn read_frame(&mut self) -> std::io::Result<RawFrame> {
        loop {
            if let Some(frame) = self.parse()? {
                return Ok(frame);
            }
            let mut chunk = [0u8; 16384];
            let read = match self.socket.read(&mut chunk) {
                Ok(read) => read,
                // A signal to the test process interrupts a blocking read (seen once in CI as
                // EINTR mid-drain): nothing was read, so read again.
                Err(error) if error.kind() == ErrorKind::Interrupted => continue,
                Err(error) => return Err(error),
            };
            if read == 0 {
                return Err(std::io::Error::new(ErrorKind::UnexpectedEof, "connection closed"));
            }
            self.buffer.extend_from_slice(&chunk[..read]);
        }
    }

    /// Reads the next frame and checks its command, panicking otherwise.
    pub fn expect_frame(&mut self, command: &str) -> RawFrame {
        let frame = self.read_frame().unwrap_or_else(|e| panic!("reading a {command} frame: {e}"));
        assert_eq!(frame.command, command, "expected {command}, got {}", frame.describe());
        frame
    }

    /// Sends a frame with a `receipt` header and waits for that RECEIPT, panicking otherwise.
    pub fn request(&mut self, command: &str, headers: &[(&str, &str)], body: &[u8], receipt: &str) {
        let mut all = headers.to_vec();
        all.push(("receipt", receipt));
        self.send(command, &all, body);
        let frame = self.expect_frame("RECEIPT");
        assert_eq!(frame.header("receipt-id"), Some(receipt));
    }

    /// True once the broker has closed the connection (after any frames still in flight).
    pub fn at_eof(&mut self) -> bool {
        let mut chunk = [0u8; 8192];
        loop {
            match self.socket.read(&mut chunk) {
                Ok(0) => return true,
                Ok(_) => continue,
                Err(error) if error.kind() == ErrorKind::ConnectionReset => return true,
                Err(error) if error.kind() == ErrorKind::Interrupted => continue,
                Err(_) => return false,
            }
        }
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

/// True for the error a read timeout gives.
pub fn is_timeout(error: &std::io::Error) -> bool {
    matches!(error.kind(), ErrorKind::WouldBlock | ErrorKind::TimedOut)
}

// ----- confirmed sends and exact receives over RawStomp -----

/// Sends `count` persistent messages `<prefix>-<n>` to `queue`, each confirmed by a RECEIPT.
pub fn send_confirmed(
    stomp: &mut RawStomp,
    queue: &str,
    prefix: &str,
    count: usize,
) -> Vec<String> {
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
pub fn receive_exactly(
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

/// Sends `signal` (TERM, INT, KILL...) to `pid` with kill(1), for children the test spawned
/// itself rather than through [`Process`] (and has not reaped yet, so the pid is still theirs).
pub fn signal_pid(pid: u32, signal: &str) {
    let status = Command::new("kill")
        .arg(format!("-{signal}"))
        .arg(pid.to_string())
        .status()
        .expect("run kill");
    assert!(status.success(), "kill -{signal} {pid} failed: {status}");
}

// ----- seeded random choices, for crash tests that replay -----

/// A small deterministic random generator (splitmix64): a crash test draws its kill moments
/// from one, seeded by [`crash_seed`], so that a failing run can be replayed.
pub struct SeededRng(pub u64);

impl SeededRng {
    pub fn next(&mut self) -> u64 {
        self.0 = self.0.wrapping_add(0x9E37_79B9_7F4A_7C15);
        let mut z = self.0;
        z = (z ^ (z >> 30)).wrapping_mul(0xBF58_476D_1CE4_E5B9);
        z = (z ^ (z >> 27)).wrapping_mul(0x94D0_49BB_1331_11EB);
        z ^ (z >> 31)
    }

    /// Uniform in `low..high`.
    pub fn range(&mut self, low: u64, high: u64) -> u64 {
        low + self.next() % (high - low)
    }
}

/// `FERROMQ_CRASH_SEED` if set (a replay), else a fresh seed from the clock; the test prints
/// it.
pub fn crash_seed() -> u64 {
    match std::env::var("FERROMQ_CRASH_SEED") {
        Ok(text) => text.trim().parse().expect("FERROMQ_CRASH_SEED is a number"),
        Err(_) => std::time::SystemTime::now()
            .duration_since(std::time::UNIX_EPOCH)
            .map(|d| d.as_nanos() as u64)
            .unwrap_or(1),
    }
}
