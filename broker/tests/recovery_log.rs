//! `ferromq start` over a journal holding many queues sums recovery up in one log line for the
//! store (queues, subscriptions, messages, prepared transactions) instead of a line per queue,
//! which buried the log of a broker with thousands of queues.
//!
//! Self-contained: the broker binds port 0 and the test reads the bound address from the
//! process's own `accepting connections` line, so it talks to the process it started.

use std::io::{BufRead, BufReader, Read, Write};
use std::net::TcpStream;
use std::path::Path;
use std::process::{Child, Command, Stdio};
use std::sync::mpsc;
use std::time::Duration;

/// How long a start may take on a loaded machine.
const START_LIMIT: Duration = Duration::from_secs(60);
const QUEUES: usize = 40;

/// A running `ferromq start` with the log lines it wrote up to its readiness line.
struct Started {
    child: Child,
    lines: Vec<String>,
    stomp: String,
}

impl Drop for Started {
    /// A failed assertion must not leave the broker running.
    fn drop(&mut self) {
        let _ = self.child.kill();
        let _ = self.child.wait();
    }
}

fn start(data: &Path) -> Started {
    let mut child = Command::new(env!("CARGO_BIN_EXE_ferromq"))
        .args(["start", "--connector", "stomp://127.0.0.1:0", "--admin-bind", "127.0.0.1:0"])
        .arg("--data-dir")
        .arg(data)
        .env("RUST_LOG", "info")
        .stdin(Stdio::null())
        .stdout(Stdio::null())
        .stderr(Stdio::piped())
        .spawn()
        .expect("ferromq starts");
    let stderr = child.stderr.take().expect("piped stderr");
    let (tx, rx) = mpsc::channel();
    std::thread::spawn(move || {
        // Read to the end even after the test stopped listening: a closed pipe would make the
        // broker's next log line fail (and its logger panic).
        for line in BufReader::new(stderr).lines().map_while(Result::ok) {
            let _ = tx.send(line);
        }
    });
    let mut lines = Vec::new();
    loop {
        let line = match rx.recv_timeout(START_LIMIT) {
            Ok(line) => line,
            Err(error) => {
                let _ = child.kill();
                panic!("no readiness line ({error}); the log so far:\n{}", lines.join("\n"));
            }
        };
        let ready = line.contains("accepting connections");
        lines.push(line);
        if ready {
            break;
        }
    }
    let ready = lines.last().expect("the readiness line");
    let stomp = ready
        .split_whitespace()
        .find_map(|field| field.strip_prefix("address="))
        .expect("the bound address in the readiness line")
        .to_owned();
    Started { child, lines, stomp }
}

/// Stops the broker with SIGKILL and waits for it: every message was receipted, so durable.
/// Not SIGTERM: `ferromq start` drops the SIGTERM handler it waits on during the start and
/// registers another only after its readiness line, so a SIGTERM sent right after that line can
/// be lost and the broker keeps running.
fn stop(mut started: Started) {
    started.child.kill().expect("kill the broker");
    started.child.wait().expect("the broker exits");
}

/// One persistent message to each of `QUEUES` queues over STOMP, the last with a receipt.
fn fill(started: &mut Started) {
    let stomp = started.stomp.as_str();
    let mut exited = || match started.child.try_wait() {
        Ok(Some(status)) => format!("the broker exited: {status}"),
        Ok(None) => "the broker still runs".to_owned(),
        Err(error) => format!("cannot tell whether the broker runs: {error}"),
    };
    let mut stream = TcpStream::connect(stomp).expect("connect to STOMP");
    stream.set_read_timeout(Some(START_LIMIT)).expect("a read timeout");
    let mut frames = String::from("CONNECT\naccept-version:1.2\nhost:localhost\n\n\0");
    for index in 0..QUEUES {
        frames.push_str(&format!("SEND\ndestination:/queue/recovered.{index}\npersistent:true\n"));
        if index == QUEUES - 1 {
            frames.push_str("receipt:last\n");
        }
        frames.push_str("\nhello\0");
    }
    stream.write_all(frames.as_bytes()).expect("send the frames");
    let mut answer = Vec::new();
    let mut chunk = [0u8; 4096];
    while !String::from_utf8_lossy(&answer).contains("receipt-id:last") {
        let read = match stream.read(&mut chunk) {
            Ok(read) => read,
            Err(error) => panic!(
                "reading from {stomp}: {error}; so far {:?}",
                String::from_utf8_lossy(&answer)
            ),
        };
        assert!(read > 0, "{stomp} closed ({}): {}", exited(), String::from_utf8_lossy(&answer));
        answer.extend_from_slice(&chunk[..read]);
    }
}

#[test]
fn a_restart_logs_one_recovery_line_for_the_store_not_one_per_queue() {
    let dir = tempfile::tempdir().expect("a temporary directory");
    let data = dir.path().join("data");
    let mut first = start(&data);
    fill(&mut first);
    stop(first);

    let again = start(&data);
    let recovered: Vec<&String> =
        again.lines.iter().filter(|line| line.contains("recovered")).collect();
    let log = again.lines.join("\n");
    assert_eq!(recovered.len(), 1, "one recovery line for {QUEUES} queues:\n{log}");
    let summary = recovered[0];
    assert!(summary.contains("recovered the store"), "{summary}");
    assert!(summary.contains("store=\"journal\""), "{summary}");
    assert!(summary.contains(&format!("queues={QUEUES}")), "{summary}");
    assert!(summary.contains(&format!("messages={QUEUES}")), "{summary}");
    stop(again);
}
