//! Process-level tests of the `ferromq` binary: what an operator sees when starting it wrong,
//! and a real start, a STOMP exchange over TCP and a clean stop on SIGTERM and SIGINT.
//!
//! Every spawned broker is wrapped in [`Process`], which kills it when the test ends, passes
//! or fails. Its stderr goes to a file in the test's temporary directory.

use std::fs::File;
use std::io::{Read, Write};
use std::net::{SocketAddr, TcpListener, TcpStream};
use std::path::{Path, PathBuf};
use std::process::{Child, Command, ExitStatus, Stdio};
use std::time::{Duration, Instant};

/// How long a broker may take to refuse a bad start, or to stop after a signal.
const EXIT_TIMEOUT: Duration = Duration::from_secs(10);
/// How long a broker may take to start accepting connections.
const START_TIMEOUT: Duration = Duration::from_secs(20);
/// How long to wait for one STOMP frame.
const FRAME_TIMEOUT: Duration = Duration::from_secs(10);

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
            std::thread::sleep(Duration::from_millis(20));
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
            std::thread::sleep(Duration::from_millis(50));
        }
    }

    /// Sends `signal` (TERM, INT...) with kill(1).
    fn signal(&self, signal: &str) {
        let status = Command::new("kill")
            .arg(format!("-{signal}"))
            .arg(self.pid().to_string())
            .status()
            .expect("run kill");
        assert!(status.success(), "kill -{signal} {} failed: {status}", self.pid());
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

/// Runs `ferromq ARGS...` expecting it to refuse to start: it must exit, unsuccessfully,
/// within [`EXIT_TIMEOUT`]. Returns its stderr.
fn refused_start(dir: &Path, name: &str, args: &[&str]) -> String {
    let mut process = Process::start(dir, name, args);
    let status = process.wait_exit(EXIT_TIMEOUT);
    let stderr = process.stderr();
    assert!(
        !status.success(),
        "ferromq {args:?} should have failed, but exited with {status}; stderr:\n{stderr}"
    );
    stderr
}

/// A port that was free a moment ago.
fn free_port() -> u16 {
    let listener = TcpListener::bind("127.0.0.1:0").expect("bind an ephemeral port");
    listener.local_addr().expect("local address").port()
}

fn temp_dir() -> tempfile::TempDir {
    tempfile::Builder::new().prefix("ferromq-cli-").tempdir().expect("create a temporary directory")
}

fn path_str(path: &Path) -> &str {
    path.to_str().expect("UTF-8 temporary path")
}

#[test]
fn start_refuses_a_taken_port() {
    let dir = temp_dir();
    let taken = TcpListener::bind("127.0.0.1:0").expect("bind");
    let uri = format!("stomp://127.0.0.1:{}", taken.local_addr().expect("address").port());
    let data = dir.path().join("data");
    let stderr = refused_start(
        dir.path(),
        "taken",
        &["start", "--connector", &uri, "--data-dir", path_str(&data)],
    );
    assert!(stderr.contains(&uri), "stderr should name the connector {uri}:\n{stderr}");
    assert!(stderr.contains("in use"), "stderr should say the address is in use:\n{stderr}");
    assert_eq!(stderr.matches("in use").count(), 1, "the cause should be printed once:\n{stderr}");
    drop(taken);
}

#[test]
fn start_refuses_invalid_configuration_naming_file_line_and_key() {
    let dir = temp_dir();
    let config = dir.path().join("broken-ferromq.toml");
    std::fs::write(&config, "[broker]\nname = \"cli-test\"\nshutdown_timeout_msec = 5\n")
        .expect("write config");
    let data = dir.path().join("data");
    let stderr = refused_start(
        dir.path(),
        "config",
        &[
            "start",
            "--config",
            path_str(&config),
            "--data-dir",
            path_str(&data),
            "--connector",
            "stomp://127.0.0.1:0",
        ],
    );
    assert!(stderr.contains("broken-ferromq.toml"), "stderr should name the file:\n{stderr}");
    assert!(stderr.contains(":3:"), "stderr should name line 3:\n{stderr}");
    assert!(stderr.contains("shutdown_timeout_msec"), "stderr should name the key:\n{stderr}");
    assert!(!data.exists(), "a refused configuration must not create the data directory");
}

#[test]
fn start_refuses_unknown_connector_option() {
    let dir = temp_dir();
    let data = dir.path().join("data");
    // On the command line.
    let stderr = refused_start(
        dir.path(),
        "flag",
        &[
            "start",
            "--connector",
            "stomp://127.0.0.1:0?noSuchOption=1",
            "--data-dir",
            path_str(&data),
        ],
    );
    assert!(stderr.contains("noSuchOption"), "stderr should name the option:\n{stderr}");
    assert!(stderr.contains("--connector"), "stderr should say where the URI came from:\n{stderr}");
    // In a configuration file.
    let config = dir.path().join("connector.toml");
    std::fs::write(&config, "[transport]\nconnectors = [\"stomp://127.0.0.1:0?noSuchOption=1\"]\n")
        .expect("write config");
    let stderr = refused_start(
        dir.path(),
        "file",
        &["start", "--config", path_str(&config), "--data-dir", path_str(&data)],
    );
    assert!(stderr.contains("noSuchOption"), "stderr should name the option:\n{stderr}");
    assert!(stderr.contains("connector.toml"), "stderr should name the file:\n{stderr}");
    assert!(stderr.contains(":2"), "stderr should name line 2:\n{stderr}");
}

#[test]
fn start_refuses_a_locked_data_dir() {
    let dir = temp_dir();
    let data = dir.path().join("data");
    let port = free_port();
    let uri = format!("stomp://127.0.0.1:{port}");
    let mut first = Process::start(
        dir.path(),
        "first",
        &["start", "--connector", &uri, "--data-dir", path_str(&data)],
    );
    first.wait_accepting(SocketAddr::from(([127, 0, 0, 1], port)));

    let stderr = refused_start(
        dir.path(),
        "second",
        &["start", "--connector", "stomp://127.0.0.1:0", "--data-dir", path_str(&data)],
    );
    assert!(stderr.contains("locked"), "stderr should say the data directory is locked:\n{stderr}");
    assert!(stderr.contains(path_str(&data)), "stderr should name the data directory:\n{stderr}");
    assert!(
        stderr.contains(&first.pid().to_string()),
        "stderr should name the process holding the lock ({}):\n{stderr}",
        first.pid()
    );
    assert!(
        first.try_status().is_none(),
        "the first broker must keep running; stderr:\n{}",
        first.stderr()
    );

    // Once the first broker stops, the directory is free again.
    first.signal("TERM");
    let status = first.wait_exit(EXIT_TIMEOUT);
    assert!(status.success(), "the first broker exited with {status}; stderr:\n{}", first.stderr());
    let port = free_port();
    let uri = format!("stomp://127.0.0.1:{port}");
    let mut third = Process::start(
        dir.path(),
        "third",
        &["start", "--connector", &uri, "--data-dir", path_str(&data)],
    );
    third.wait_accepting(SocketAddr::from(([127, 0, 0, 1], port)));
    third.signal("TERM");
    let status = third.wait_exit(EXIT_TIMEOUT);
    assert!(status.success(), "the third broker exited with {status}; stderr:\n{}", third.stderr());
}

#[test]
fn start_serves_stomp_and_stops_cleanly_on_sigterm() {
    serve_stomp_then_stop_on("TERM");
}

#[test]
fn start_serves_stomp_and_stops_cleanly_on_sigint() {
    serve_stomp_then_stop_on("INT");
}

fn serve_stomp_then_stop_on(signal: &str) {
    let dir = temp_dir();
    let data = dir.path().join("data");
    let port = free_port();
    let addr = SocketAddr::from(([127, 0, 0, 1], port));
    let uri = format!("stomp://127.0.0.1:{port}");
    let mut broker = Process::start(
        dir.path(),
        "broker",
        &["start", "--connector", &uri, "--data-dir", path_str(&data)],
    );
    broker.wait_accepting(addr);
    let lock = std::fs::read_to_string(data.join("lock")).unwrap_or_default();
    assert_eq!(lock.trim(), broker.pid().to_string(), "the lock file should hold the broker's pid");

    let mut stomp = RawStomp::connect(addr);
    stomp.send_frame("CONNECT", &[("accept-version", "1.2"), ("host", "localhost")], b"");
    let connected = stomp.expect_frame("CONNECTED");
    assert_eq!(connected.header("version"), Some("1.2"));

    stomp.send_frame(
        "SEND",
        &[("destination", "/queue/cli.test"), ("persistent", "true"), ("receipt", "send-1")],
        b"hello from the cli test",
    );
    let receipt = stomp.expect_frame("RECEIPT");
    assert_eq!(receipt.header("receipt-id"), Some("send-1"));

    stomp.send_frame(
        "SUBSCRIBE",
        &[
            ("destination", "/queue/cli.test"),
            ("id", "sub-1"),
            ("ack", "client-individual"),
            ("receipt", "sub-r"),
        ],
        b"",
    );
    let receipt = stomp.expect_frame("RECEIPT");
    assert_eq!(receipt.header("receipt-id"), Some("sub-r"));
    let message = stomp.expect_frame("MESSAGE");
    assert_eq!(message.body, b"hello from the cli test");
    assert_eq!(message.header("subscription"), Some("sub-1"));
    assert_eq!(message.header("persistent"), Some("true"));
    let ack = message.header("ack").expect("MESSAGE has an ack header").to_owned();
    stomp.send_frame("ACK", &[("id", &ack), ("receipt", "ack-r")], b"");
    let receipt = stomp.expect_frame("RECEIPT");
    assert_eq!(receipt.header("receipt-id"), Some("ack-r"));

    // Stop with the client still connected: the broker closes the connection and exits 0.
    broker.signal(signal);
    let status = broker.wait_exit(EXIT_TIMEOUT);
    let stderr = broker.stderr();
    assert!(status.success(), "ferromq exited with {status} after SIG{signal}; stderr:\n{stderr}");
    assert!(stderr.contains("broker stopped"), "stderr should log the stop:\n{stderr}");
    assert!(stomp.at_eof(), "the broker should have closed the client's connection");
    assert!(
        TcpStream::connect_timeout(&addr, Duration::from_millis(500)).is_err(),
        "{addr} still accepts after the stop"
    );
}

/// A frame read by [`RawStomp`].
struct RawFrame {
    command: String,
    headers: Vec<(String, String)>,
    body: Vec<u8>,
}

impl RawFrame {
    fn header(&self, name: &str) -> Option<&str> {
        self.headers.iter().find(|(n, _)| n == name).map(|(_, v)| v.as_str())
    }
}

/// Just enough STOMP over a blocking socket to talk to the real binary without another
/// crate's client: frames without escaping, bodies by content-length or up to the NUL.
struct RawStomp {
    socket: TcpStream,
    buffer: Vec<u8>,
}

impl RawStomp {
    fn connect(addr: SocketAddr) -> RawStomp {
        let socket =
            TcpStream::connect_timeout(&addr, FRAME_TIMEOUT).expect("connect to the broker");
        socket.set_read_timeout(Some(FRAME_TIMEOUT)).expect("set the read timeout");
        RawStomp { socket, buffer: Vec::new() }
    }

    fn send_frame(&mut self, command: &str, headers: &[(&str, &str)], body: &[u8]) {
        let mut frame = format!("{command}\n").into_bytes();
        for (name, value) in headers {
            frame.extend_from_slice(format!("{name}:{value}\n").as_bytes());
        }
        if !body.is_empty() {
            frame.extend_from_slice(format!("content-length:{}\n", body.len()).as_bytes());
        }
        frame.push(b'\n');
        frame.extend_from_slice(body);
        frame.push(0);
        self.socket.write_all(&frame).expect("write a frame");
    }

    /// Reads the next frame (skipping heart-beats) and checks its command.
    fn expect_frame(&mut self, command: &str) -> RawFrame {
        let frame = self.read_frame();
        assert_eq!(
            frame.command,
            command,
            "expected {command}, got {} {:?} {}",
            frame.command,
            frame.headers,
            String::from_utf8_lossy(&frame.body)
        );
        frame
    }

    fn read_frame(&mut self) -> RawFrame {
        let deadline = Instant::now() + FRAME_TIMEOUT;
        loop {
            if let Some(frame) = self.parse() {
                return frame;
            }
            assert!(Instant::now() < deadline, "no complete frame within {FRAME_TIMEOUT:?}");
            let mut chunk = [0u8; 8192];
            let read = self.socket.read(&mut chunk).expect("read from the broker");
            assert!(
                read > 0,
                "the broker closed the connection; unparsed: {:?}",
                String::from_utf8_lossy(&self.buffer)
            );
            self.buffer.extend_from_slice(&chunk[..read]);
        }
    }

    fn parse(&mut self) -> Option<RawFrame> {
        // Heart-beats (EOLs) between frames.
        let start = self.buffer.iter().position(|b| *b != b'\n' && *b != b'\r')?;
        self.buffer.drain(..start);
        let head_end = self.buffer.windows(2).position(|w| w == b"\n\n")?;
        let head = String::from_utf8(self.buffer[..head_end].to_vec()).expect("UTF-8 frame head");
        let mut lines = head.lines();
        let command = lines.next().unwrap_or_default().to_owned();
        let headers: Vec<(String, String)> = lines
            .filter_map(|line| line.split_once(':'))
            .map(|(n, v)| (n.to_owned(), v.to_owned()))
            .collect();
        let body_start = head_end + 2;
        let length = headers
            .iter()
            .find(|(n, _)| n == "content-length")
            .map(|(_, v)| v.parse::<usize>().expect("content-length"));
        let body_end = match length {
            Some(length) => {
                if self.buffer.len() < body_start + length + 1 {
                    return None;
                }
                body_start + length
            }
            None => body_start + self.buffer[body_start..].iter().position(|b| *b == 0)?,
        };
        assert_eq!(self.buffer[body_end], 0, "frame does not end with NUL");
        let body = self.buffer[body_start..body_end].to_vec();
        self.buffer.drain(..=body_end);
        Some(RawFrame { command, headers, body })
    }

    /// True once the broker has closed the connection (after any frames still in flight).
    fn at_eof(&mut self) -> bool {
        let mut chunk = [0u8; 8192];
        loop {
            match self.socket.read(&mut chunk) {
                Ok(0) => return true,
                Ok(_) => continue,
                Err(error) if error.kind() == std::io::ErrorKind::ConnectionReset => return true,
                Err(_) => return false,
            }
        }
    }
}
