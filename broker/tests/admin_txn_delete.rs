//! A queue deleted (by the admin endpoint) while a transaction that sent to it is open, then
//! the transaction committed, with the real `ferromq` binary and a SIGKILL and restart: the
//! committed message is in a live queue of that name at once (recreated as a send would
//! recreate it) and after the restart, exactly once; what the queue held before its deletion
//! stays deleted. Before, the commit stored the message under the removed queue while the
//! running broker showed no such queue, and the queue came back only after a restart.
//! ActiveMQ keeps such a message too: KahaDB's commit indexes an add under its destination,
//! creating the stored destination when it is gone (`MessageDatabase.updateIndex`).

mod common;

use std::io::{Read, Write};
use std::net::{SocketAddr, TcpStream};
use std::time::Duration;

use common::{temp_dir, Process, RawStomp};

/// `method path` against the admin endpoint, with the token when given: (status, body).
fn http(admin: SocketAddr, method: &str, path: &str, token: Option<&str>) -> (u16, String) {
    let mut stream = TcpStream::connect(admin).expect("connect to the admin endpoint");
    stream.set_read_timeout(Some(Duration::from_secs(60))).expect("a timeout");
    let token = token.map_or_else(String::new, |token| format!("X-Ferromq-Token: {token}\r\n"));
    let request = format!(
        "{method} {path} HTTP/1.1\r\nHost: {admin}\r\nConnection: close\r\n{token}\
         Content-Length: 0\r\n\r\n"
    );
    stream.write_all(request.as_bytes()).expect("send the request");
    let mut answer = String::new();
    stream.read_to_string(&mut answer).expect("read the answer");
    let status = answer.get(9..12).and_then(|s| s.parse().ok()).expect("a status line");
    let body = answer.split_once("\r\n\r\n").map(|(_, b)| b.to_owned()).unwrap_or_default();
    (status, body)
}

/// The queue's pending count, or `None` if the broker has no such queue.
fn pending(admin: SocketAddr, queue: &str) -> Option<u64> {
    let (status, body) = http(admin, "GET", &format!("/api/destinations/queue/{queue}"), None);
    if status != 200 {
        return None;
    }
    let at = body.find("\"pending\": ").unwrap_or_else(|| panic!("pending in {body}"));
    let digits: String = body[at + 11..].chars().take_while(char::is_ascii_digit).collect();
    Some(digits.parse().unwrap_or_else(|_| panic!("pending in {body}")))
}

/// The bodies `queue` holds, received (auto-acknowledged) until none comes for a second.
fn drain(stomp: &mut RawStomp, queue: &str) -> Vec<String> {
    let headers = [("destination", queue), ("id", "drain"), ("ack", "auto")];
    stomp.request("SUBSCRIBE", &headers, b"", "subscribed");
    stomp.set_read_timeout(Duration::from_secs(1));
    let mut bodies = Vec::new();
    while let Ok(frame) = stomp.read_frame() {
        assert_eq!(frame.command, "MESSAGE", "{}", frame.describe());
        bodies.push(String::from_utf8_lossy(&frame.body).into_owned());
    }
    bodies
}

fn a_commit_after_its_queue_was_deleted_lands_in_a_live_queue(store: &str) {
    let dir = temp_dir();
    let data = dir.path().join("data");
    let config = dir.path().join("ferromq.toml");
    std::fs::write(&config, store).expect("writing the configuration");
    let start = |name: &str| {
        let mut broker = Process::start_configured(dir.path(), name, &config, &data, 0);
        let ready = broker.wait_ready();
        let stomp = ready.addr("stomp");
        let admin = ready.admin.expect("the admin endpoint");
        (broker, stomp, admin)
    };
    let (mut broker, stomp_addr, admin) = start("first");
    let mut stomp = RawStomp::open(stomp_addr);
    let queue = "/queue/txn.deleted";
    let persistent = [("destination", queue), ("persistent", "true")];
    stomp.request("SEND", &persistent, b"before the deletion", "seed");
    stomp.request("BEGIN", &[("transaction", "t1")], b"", "begun");
    let in_transaction = [("destination", queue), ("persistent", "true"), ("transaction", "t1")];
    stomp.request("SEND", &in_transaction, b"committed after the deletion", "sent");
    let (status, body) = http(admin, "GET", "/api/token", None);
    assert_eq!(status, 200, "{body}");
    let token = body.split('"').nth(3).expect("a token").to_owned();
    let (status, body) = http(admin, "DELETE", "/api/destinations/queue/txn.deleted", Some(&token));
    assert_eq!(status, 200, "{body}");
    assert_eq!(pending(admin, "txn.deleted"), None, "the queue is deleted");
    stomp.request("COMMIT", &[("transaction", "t1")], b"", "committed");
    assert_eq!(
        pending(admin, "txn.deleted"),
        Some(1),
        "the committed message is in a live queue\n{}",
        broker.output()
    );
    // The commit answered, so it is durable: killed at once.
    broker.kill_9();

    let (mut broker, stomp_addr, admin) = start("second");
    assert_eq!(pending(admin, "txn.deleted"), Some(1), "{}", broker.output());
    let mut stomp = RawStomp::open(stomp_addr);
    assert_eq!(drain(&mut stomp, queue), ["committed after the deletion"]);
    broker.stop();
}

#[test]
fn a_commit_after_its_queue_was_deleted_lands_in_a_live_queue_on_the_journal() {
    a_commit_after_its_queue_was_deleted_lands_in_a_live_queue("");
}

#[test]
fn a_commit_after_its_queue_was_deleted_lands_in_a_live_queue_on_sqlite() {
    a_commit_after_its_queue_was_deleted_lands_in_a_live_queue(
        "[store]\nkind = \"jdbc\"\nurl = \"sqlite://store/ferromq.db\"\n",
    );
}
