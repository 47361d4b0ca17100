//! The admin endpoint's operations across a crash of the real `ferromq` binary (issue 22): once
//! a purge, a deletion or a move has answered, a SIGKILL and restart change nothing of it,
//! with most messages beyond the memory window: the purged queue stays empty, the deleted one
//! does not come back, and each moved message is in its target exactly once and no longer in
//! its source. On the journal and on SQLite.

mod common;

use std::io::{Read, Write};
use std::net::{SocketAddr, TcpStream};
use std::time::Duration;

use common::{temp_dir, Process, RawStomp};

const MANY: usize = 200;

/// `method path` (with the token when given; a move's body for `.../move`) against the admin
/// endpoint: (status, body).
fn http(admin: SocketAddr, method: &str, path: &str, token: Option<&str>) -> (u16, String) {
    let mut stream = TcpStream::connect(admin).expect("connect to the admin endpoint");
    stream.set_read_timeout(Some(Duration::from_secs(60))).expect("a timeout");
    let token = token.map_or_else(String::new, |token| format!("X-Ferromq-Token: {token}\r\n"));
    let body = match path.ends_with("/move") {
        true => r#"{"to":"crash.moved","selector":"color = 'red'"}"#,
        false => "",
    };
    let request = format!(
        "{method} {path} HTTP/1.1\r\nHost: {admin}\r\nConnection: close\r\n{token}\
         Content-Type: application/json\r\nContent-Length: {}\r\n\r\n{body}",
        body.len()
    );
    stream.write_all(request.as_bytes()).expect("send the request");
    let mut answer = String::new();
    stream.read_to_string(&mut answer).expect("read the answer");
    let status = answer.get(9..12).and_then(|s| s.parse().ok()).expect("a status line");
    let body = answer.split_once("\r\n\r\n").map(|(_, b)| b.to_owned()).unwrap_or_default();
    (status, body)
}

/// The number after `"name": ` in a JSON answer.
fn number(body: &str, name: &str) -> u64 {
    let at = body.find(&format!("\"{name}\": ")).unwrap_or_else(|| panic!("{name} in {body}"));
    let digits: String =
        body[at + name.len() + 4..].chars().take_while(char::is_ascii_digit).collect();
    digits.parse().unwrap_or_else(|_| panic!("{name} in {body}"))
}

fn token(admin: SocketAddr) -> String {
    let (status, body) = http(admin, "GET", "/api/token", None);
    assert_eq!(status, 200, "{body}");
    body.split('"').nth(3).expect("a token").to_owned()
}

/// Every message of `queue`, by number, received with client acks (and acknowledged) until
/// none comes for a second.
fn drain(stomp: &mut RawStomp, queue: &str, id: &str) -> Vec<usize> {
    stomp.request(
        "SUBSCRIBE",
        &[("destination", queue), ("id", id), ("ack", "auto")],
        b"",
        &format!("sub-{id}"),
    );
    stomp.set_read_timeout(Duration::from_secs(1));
    let mut numbers = Vec::new();
    while let Ok(frame) = stomp.read_frame() {
        assert_eq!(frame.command, "MESSAGE", "{}", frame.describe());
        let body = String::from_utf8_lossy(&frame.body).into_owned();
        numbers.push(body.split(' ').next().and_then(|n| n.parse().ok()).expect("a number"));
    }
    stomp.set_read_timeout(Duration::from_secs(10));
    numbers
}

fn operations_survive_a_kill(store: &str) {
    let dir = temp_dir();
    let data = dir.path().join("data");
    let config = dir.path().join("ferromq.toml");
    // A window of some 60 messages: most of each queue is in the store only.
    std::fs::write(&config, format!("{store}[destinations]\nmemory_limit = 102400\n"))
        .expect("writing the configuration");
    let start = |name: &str| {
        let mut broker = Process::start_configured(dir.path(), name, &config, &data, 0);
        let ready = broker.wait_ready();
        let stomp = ready.addr("stomp");
        let admin = ready.admin.expect("the admin endpoint");
        (broker, stomp, admin)
    };
    let (mut broker, stomp_addr, admin) = start("first");
    let mut stomp = RawStomp::open(stomp_addr);
    let padding = "x".repeat(512);
    for n in 0..MANY {
        let color = if n % 2 == 0 { "red" } else { "blue" };
        let body = format!("{n} {padding}");
        for queue in ["/queue/crash.purge", "/queue/crash.delete", "/queue/crash.move"] {
            let headers = [("destination", queue), ("persistent", "true"), ("color", color)];
            stomp.request("SEND", &headers, body.as_bytes(), &format!("{queue}-{n}"));
        }
    }
    for n in 0..5 {
        let headers = [("destination", "/queue/crash.keep"), ("persistent", "true")];
        stomp.request("SEND", &headers, format!("{n} kept").as_bytes(), &format!("keep-{n}"));
    }
    let token = token(admin);
    let (status, body) =
        http(admin, "POST", "/api/destinations/queue/crash.purge/purge", Some(&token));
    assert_eq!((status, number(&body, "removed")), (200, MANY as u64), "{body}");
    let (status, body) =
        http(admin, "POST", "/api/destinations/queue/crash.move/move", Some(&token));
    assert_eq!((status, number(&body, "moved")), (200, MANY as u64 / 2), "{body}");
    let (status, body) =
        http(admin, "DELETE", "/api/destinations/queue/crash.delete", Some(&token));
    assert_eq!(status, 200, "{body}");
    // Answered, so durable: killed at once, nothing is given a chance to be written later.
    broker.kill_9();

    let (mut broker, stomp_addr, admin) = start("second");
    let pending = |queue: &str| {
        let (status, body) = http(admin, "GET", &format!("/api/destinations/queue/{queue}"), None);
        (status == 200).then(|| number(&body, "pending"))
    };
    assert_eq!(pending("crash.purge"), Some(0), "{}", broker.output());
    assert_eq!(pending("crash.delete"), None, "the deleted queue came back\n{}", broker.output());
    assert_eq!(pending("crash.move"), Some(MANY as u64 / 2));
    assert_eq!(pending("crash.moved"), Some(MANY as u64 / 2));
    assert_eq!(pending("crash.keep"), Some(5));
    let mut stomp = RawStomp::open(stomp_addr);
    let red: Vec<usize> = (0..MANY).filter(|n| n % 2 == 0).collect();
    let blue: Vec<usize> = (0..MANY).filter(|n| n % 2 == 1).collect();
    assert_eq!(drain(&mut stomp, "/queue/crash.moved", "m"), red, "each moved message once");
    assert_eq!(drain(&mut stomp, "/queue/crash.move", "s"), blue, "the rest stayed");
    assert_eq!(drain(&mut stomp, "/queue/crash.keep", "k"), (0..5).collect::<Vec<_>>());
    assert_eq!(drain(&mut stomp, "/queue/crash.purge", "p"), Vec::<usize>::new());
    broker.stop();
}

#[test]
fn purge_delete_and_move_survive_sigkill_on_the_journal() {
    operations_survive_a_kill("");
}

#[test]
fn purge_delete_and_move_survive_sigkill_on_sqlite() {
    operations_survive_a_kill("[store]\nkind = \"jdbc\"\nurl = \"sqlite://store/ferromq.db\"\n\n");
}
