//! Issue 12 on PostgreSQL: two `ferromq` processes with data directories of their own share
//! one database, and its lease (`ferromq_lock`) decides which one serves.
//!
//! - [`a_postgres_standby_waits_for_the_lease_and_takes_over_when_the_active_broker_dies`]:
//!   the standby waits (admin status `waiting`, naming the holder), takes over once the
//!   SIGKILLed broker's lease expired, and delivers every message the first confirmed.
//! - [`without_standby_a_held_lease_refuses_to_start_and_a_restart_on_the_same_data_dir_takes_it_back_at_once`].
//! - [`a_broker_cut_off_from_postgres_stops_serving_before_its_standby_takes_over`], the
//!   active broker reaches the database through a TCP proxy the test cuts; it must stop
//!   serving (and exit with a failure) before its lease can expire, so that the two are
//!   never active at once.
//!
//! Leases are short here (3 s, renewed every 600 ms) so that takeovers take seconds; the
//! restart test has a long one, so that only the dead-predecessor rule can let it in.

mod common;

use std::io::{Read, Write};
use std::net::{Shutdown, SocketAddr, TcpListener, TcpStream};
use std::path::Path;
use std::sync::atomic::{AtomicBool, AtomicU64, Ordering};
use std::sync::{Arc, Mutex};
use std::time::{Duration, Instant, SystemTime, UNIX_EPOCH};

use broker::admin::{AdminClient, BrokerRole, BrokerStatus};
use common::{
    free_port, listening_addrs, loopback, receive_exactly, send_confirmed, temp_dir, Process,
    RawStomp, EXIT_TIMEOUT, START_TIMEOUT,
};

// Short enough for takeovers in seconds, long enough that an active broker on a loaded
// 2-core machine keeps renewing: it fences itself once three quarters of a lease passed
// without a successful renewal, and at 1500 ms (1125 ms of slack, statements timing out
// after 500 ms) a few slow renewals behind other tests' work could stop it mid-test.
const LEASE_MS: u64 = 3000;

/// The restart test's lease: longer than any start the test waits for.
const RESTART_LEASE_MS: u64 = 120_000;

/// A `[store]` on `url` with the short lease (renewed every 600 ms), and `[broker] standby`.
fn write_config(dir: &Path, name: &str, url: &str, standby: bool) -> std::path::PathBuf {
    write_config_leased(dir, name, url, standby, LEASE_MS)
}

/// [`write_config`] with a lease of `lease_ms` (renewed every fifth of it).
fn write_config_leased(
    dir: &Path,
    name: &str,
    url: &str,
    standby: bool,
    lease_ms: u64,
) -> std::path::PathBuf {
    let path = dir.join(format!("{name}.toml"));
    let renew_ms = lease_ms / 5;
    let text = format!(
        "[broker]\nstandby = {standby}\nlock_retry_ms = 100\n\n[store]\nkind = \"jdbc\"\n\
         url = \"{url}\"\nlease_ms = {lease_ms}\nlease_renew_ms = {renew_ms}\n"
    );
    std::fs::write(&path, text).expect("write the configuration");
    path
}

/// A broker on its own data directory `dir/<name>-data`, STOMP on `port`, admin on `admin`.
fn start(dir: &Path, name: &str, config: &Path, port: u16, admin: SocketAddr) -> Process {
    start_on(dir, name, &dir.join(format!("{name}-data")), config, port, admin)
}

/// [`start`] on the data directory `data` (a restart of another process's broker).
fn start_on(
    dir: &Path,
    name: &str,
    data: &Path,
    config: &Path,
    port: u16,
    admin: SocketAddr,
) -> Process {
    let stomp = format!("stomp://127.0.0.1:{port}");
    Process::start_listening(dir, name, config, data, &stomp, &admin.to_string())
}

fn unix_ms() -> u64 {
    SystemTime::now().duration_since(UNIX_EPOCH).map(|d| d.as_millis() as u64).unwrap_or(0)
}

/// Reads admin status endpoints from a thread of the test (its own small runtime).
struct StatusReader {
    runtime: tokio::runtime::Runtime,
}

impl StatusReader {
    fn new() -> StatusReader {
        let runtime =
            tokio::runtime::Builder::new_current_thread().enable_all().build().expect("a runtime");
        StatusReader { runtime }
    }

    /// The status, or `None` when the endpoint does not answer (not bound yet, or stopped).
    fn status(&self, admin: SocketAddr) -> Option<BrokerStatus> {
        let client = AdminClient::new(&format!("http://{admin}")).expect("admin url");
        let read = async { tokio::time::timeout(Duration::from_secs(2), client.status()).await };
        self.runtime.block_on(read).ok()?.ok()
    }

    /// Waits until `admin` reports `role`; fails early if `process` exits.
    fn wait_role(
        &self,
        process: &mut Process,
        admin: SocketAddr,
        role: BrokerRole,
    ) -> BrokerStatus {
        let deadline = Instant::now() + START_TIMEOUT;
        loop {
            if let Some(status) = self.status(admin).filter(|status| status.role == role) {
                // The endpoint that answered is this broker's own, not another program's.
                let pid = process.pid();
                assert!(process.listening().contains(&admin), "{admin} is not pid {pid}'s");
                return status;
            }
            assert!(process.try_status().is_none(), "the broker exited:\n{}", process.output());
            assert!(Instant::now() < deadline, "never {role:?}:\n{}", process.output());
            std::thread::sleep(Duration::from_millis(20));
        }
    }
}

#[test]
fn a_postgres_standby_waits_for_the_lease_and_takes_over_when_the_active_broker_dies() {
    let Some(cluster) = store_jdbc::testing::PgCluster::shared() else { return };
    let url = cluster.create_database();
    let dir = temp_dir();
    let config = write_config(dir.path(), "pair", &url, true);
    let queue = "/queue/lease.standby";
    let (port_a, admin_a) = (free_port(), loopback(free_port()));
    let mut a = start(dir.path(), "active", &config, port_a, admin_a);
    a.wait_accepting(loopback(port_a));
    let (port_b, admin_b) = (free_port(), loopback(free_port()));
    let mut b = start(dir.path(), "standby", &config, port_b, admin_b);
    let reader = StatusReader::new();
    // Waiting for the lease, naming A (its pid) as the holder: the data directories differ,
    // so only the lease can keep B out.
    let deadline = Instant::now() + START_TIMEOUT;
    let waiting = loop {
        let status = reader.status(admin_b);
        let held = status.as_ref().and_then(|s| s.waiting_for.as_deref()).unwrap_or_default();
        if held.contains("held by") {
            break status.expect("a status");
        }
        assert!(b.try_status().is_none(), "the standby exited:\n{}", b.output());
        assert!(Instant::now() < deadline, "the standby never waited:\n{}", b.output());
        std::thread::sleep(Duration::from_millis(20));
    };
    assert_eq!(waiting.role, BrokerRole::Waiting, "{waiting:?}");
    let what = waiting.waiting_for.clone().unwrap_or_default();
    assert!(what.contains("PostgreSQL lease"), "{what}");
    assert!(what.contains(&format!("pid {}", a.pid())), "the holder should be A: {what}");
    let url_b = format!("http://{admin_b}");
    let said =
        Process::start(dir.path(), "dstat", &["dstat", "--url", &url_b]).succeed(EXIT_TIMEOUT);
    assert!(said.contains("is a standby, waiting for the PostgreSQL lease (held by"), "{said}");
    // Its own sockets, not a connect to its port (which another program may have taken).
    assert_eq!(b.listening(), [admin_b], "a waiting standby serves its admin endpoint only");
    // Still waiting a few renewals later: A keeps its lease renewed.
    std::thread::sleep(Duration::from_millis(2 * LEASE_MS));
    assert_eq!(reader.status(admin_b).map(|s| s.role), Some(BrokerRole::Waiting));

    let mut stomp = RawStomp::open(loopback(port_a));
    let expected = send_confirmed(&mut stomp, queue, "confirmed", 50);
    drop(stomp);
    let killed = unix_ms();
    a.kill_9();
    b.wait_accepting(loopback(port_b));
    let active = reader.wait_role(&mut b, admin_b, BrokerRole::Active);
    // A's lease was renewed at most a renewal (and the fencing margin) before the kill; B
    // could not have taken it before it expired on the database.
    assert!(
        active.since_unix_ms >= killed + LEASE_MS / 4,
        "B active at {} only {} ms after A was killed at {killed}",
        active.since_unix_ms,
        active.since_unix_ms.saturating_sub(killed)
    );
    assert!(b.stderr().contains("taking over"), "{}", b.output());
    let mut stomp = RawStomp::open(loopback(port_b));
    receive_exactly(&mut stomp, queue, &expected, true);
    drop(stomp);
    b.stop();
    assert!(b.stderr().contains("PostgreSQL lease released"), "{}", b.output());
}

#[test]
fn without_standby_a_held_lease_refuses_to_start_and_a_restart_on_the_same_data_dir_takes_it_back_at_once(
) {
    let Some(cluster) = store_jdbc::testing::PgCluster::shared() else { return };
    let url = cluster.create_database();
    let dir = temp_dir();
    // A lease far longer than any restart: A's lease is surely still valid on the database
    // when its restart asks for it, so only the dead-predecessor rule can let the restart in
    // (without standby a held lease refuses the start, as B shows), however slow the machine.
    let config = write_config_leased(dir.path(), "single", &url, false, RESTART_LEASE_MS);
    let (port_a, admin_a) = (free_port(), loopback(free_port()));
    let mut a = start(dir.path(), "a", &config, port_a, admin_a);
    a.wait_accepting(loopback(port_a));
    let mut stomp = RawStomp::open(loopback(port_a));
    let expected = send_confirmed(&mut stomp, "/queue/lease.single", "m", 10);
    drop(stomp);

    // Another data directory, no standby: refused at once, naming the holder.
    let (port_b, admin_b) = (free_port(), loopback(free_port()));
    let mut b = start(dir.path(), "b", &config, port_b, admin_b);
    let status = b.wait_exit(EXIT_TIMEOUT);
    let stderr = b.stderr();
    assert!(!status.success(), "B started beside A:\n{stderr}");
    assert!(stderr.contains("in use by another broker"), "{stderr}");
    assert!(stderr.contains(&format!("pid {}", a.pid())), "the holder should be A:\n{stderr}");
    assert!(stderr.contains("standby = true"), "the remedy should be named:\n{stderr}");

    // A crashes and comes back on its own data directory: its old lease is its own dead
    // predecessor's, taken back at once instead of after the expiry.
    a.kill_9();
    let restarted = Instant::now();
    let mut a = start(dir.path(), "a", &config, port_a, admin_a);
    a.wait_accepting(loopback(port_a));
    assert!(
        restarted.elapsed() < Duration::from_millis(RESTART_LEASE_MS),
        "the restart took {:?}: A's lease may have expired first",
        restarted.elapsed()
    );
    let mut stomp = RawStomp::open(loopback(port_a));
    receive_exactly(&mut stomp, "/queue/lease.single", &expected, true);
    drop(stomp);
    a.stop();
}

// ----- a TCP proxy the test can cut -----

/// Forwards connections from a loopback port to `upstream` until cut: then every proxied
/// socket is shut down and new connections are closed as soon as they are accepted.
struct Proxy {
    port: u16,
    cut: Arc<AtomicBool>,
    sockets: Arc<Mutex<Vec<TcpStream>>>,
}

impl Proxy {
    fn start(upstream: SocketAddr) -> Proxy {
        let listener = TcpListener::bind("127.0.0.1:0").expect("bind the proxy");
        let port = listener.local_addr().expect("proxy address").port();
        let cut = Arc::new(AtomicBool::new(false));
        let sockets: Arc<Mutex<Vec<TcpStream>>> = Arc::default();
        let (cut_flag, all) = (cut.clone(), sockets.clone());
        std::thread::spawn(move || {
            for client in listener.incoming() {
                let Ok(client) = client else { continue };
                if cut_flag.load(Ordering::SeqCst) {
                    let _ = client.shutdown(Shutdown::Both);
                    continue;
                }
                let Ok(server) = TcpStream::connect(upstream) else { continue };
                let mut list = all.lock().expect("sockets");
                for socket in [&client, &server] {
                    if let Ok(clone) = socket.try_clone() {
                        list.push(clone);
                    }
                }
                drop(list);
                let (Ok(client_read), Ok(server_read)) = (client.try_clone(), server.try_clone())
                else {
                    continue;
                };
                std::thread::spawn(move || pump(client_read, server));
                std::thread::spawn(move || pump(server_read, client));
            }
        });
        Proxy { port, cut, sockets }
    }

    /// Closes every proxied connection and refuses new ones from now on.
    fn cut(&self) {
        self.cut.store(true, Ordering::SeqCst);
        for socket in self.sockets.lock().expect("sockets").drain(..) {
            let _ = socket.shutdown(Shutdown::Both);
        }
    }
}

fn pump(mut from: TcpStream, mut to: TcpStream) {
    let mut buffer = [0u8; 16384];
    loop {
        match from.read(&mut buffer) {
            Ok(0) | Err(_) => break,
            Ok(read) => {
                if to.write_all(&buffer[..read]).is_err() {
                    break;
                }
            }
        }
    }
    let _ = to.shutdown(Shutdown::Both);
    let _ = from.shutdown(Shutdown::Both);
}

#[test]
fn a_broker_cut_off_from_postgres_stops_serving_before_its_standby_takes_over() {
    let Some(cluster) = store_jdbc::testing::PgCluster::shared() else { return };
    let url = cluster.create_database();
    let proxy = Proxy::start(loopback(cluster.port()));
    let proxied = url.replace(&format!(":{}/", cluster.port()), &format!(":{}/", proxy.port));
    assert_ne!(proxied, url);
    let dir = temp_dir();
    let config_a = write_config(dir.path(), "a", &proxied, true);
    let config_b = write_config(dir.path(), "b", &url, true);
    let queue = "/queue/lease.cut";
    let (port_a, admin_a) = (free_port(), loopback(free_port()));
    let mut a = start(dir.path(), "a", &config_a, port_a, admin_a);
    a.wait_accepting(loopback(port_a));
    let (port_b, admin_b) = (free_port(), loopback(free_port()));
    let mut b = start(dir.path(), "b", &config_b, port_b, admin_b);
    let reader = StatusReader::new();
    let deadline = Instant::now() + START_TIMEOUT;
    while !reader
        .status(admin_b)
        .and_then(|s| s.waiting_for)
        .is_some_and(|what| what.contains("held by"))
    {
        assert!(b.try_status().is_none(), "the standby exited:\n{}", b.output());
        assert!(Instant::now() < deadline, "the standby never waited:\n{}", b.output());
        std::thread::sleep(Duration::from_millis(20));
    }
    let mut stomp = RawStomp::open(loopback(port_a));
    let expected = send_confirmed(&mut stomp, queue, "before-cut", 20);
    // A client of A that stays connected: A must close it.
    let mut idle = RawStomp::open(loopback(port_a));

    // Watch both brokers every 20 ms: never both active; and note when A stopped accepting.
    let stop = Arc::new(AtomicBool::new(false));
    let a_refused_at = Arc::new(AtomicU64::new(0));
    let both_active: Arc<Mutex<Vec<String>>> = Arc::default();
    let a_pid = a.pid();
    let watcher = {
        let (stop, a_refused_at, both_active) =
            (stop.clone(), a_refused_at.clone(), both_active.clone());
        std::thread::spawn(move || {
            let reader = StatusReader::new();
            while !stop.load(Ordering::SeqCst) {
                let status_a = reader.status(admin_a);
                let status_b = reader.status(admin_b);
                let active = |s: &Option<BrokerStatus>| {
                    s.as_ref().is_some_and(|s| s.role == BrokerRole::Active)
                };
                if active(&status_a) && active(&status_b) {
                    both_active.lock().expect("log").push(format!("{status_a:?} {status_b:?}"));
                }
                // A's own sockets, not a connect: another program may take the port once
                // A has let it go.
                if a_refused_at.load(Ordering::SeqCst) == 0
                    && !listening_addrs(a_pid).contains(&loopback(port_a))
                {
                    a_refused_at.store(unix_ms(), Ordering::SeqCst);
                }
                std::thread::sleep(Duration::from_millis(20));
            }
        })
    };

    let cut_at = Instant::now();
    proxy.cut();
    // A fences itself: it stops serving, closes its clients and exits with a failure.
    let status = a.wait_exit(Duration::from_millis(LEASE_MS) + EXIT_TIMEOUT);
    let a_exited = cut_at.elapsed();
    assert!(!status.success(), "A exited successfully after losing its lease:\n{}", a.output());
    let stderr = a.stderr();
    assert!(stderr.contains("lost the PostgreSQL lease"), "{stderr}");
    assert!(stderr.contains("restart this broker"), "the exit should say what to do:\n{stderr}");
    idle.set_read_timeout(Duration::from_secs(2));
    assert!(idle.at_eof(), "A's client was not disconnected");
    drop(stomp);

    b.wait_accepting(loopback(port_b));
    let active = reader.wait_role(&mut b, admin_b, BrokerRole::Active);
    std::thread::sleep(Duration::from_millis(100));
    stop.store(true, Ordering::SeqCst);
    watcher.join().expect("the watcher panicked");
    let overlaps = both_active.lock().expect("log").clone();
    assert!(overlaps.is_empty(), "both brokers were active at once: {overlaps:?}");
    let a_stopped = a_refused_at.load(Ordering::SeqCst);
    assert!(a_stopped != 0, "A's port never stopped accepting");
    assert!(
        a_stopped < active.since_unix_ms,
        "A still accepted at {a_stopped}, after B became active at {}\nA:\n{}\nB:\n{}",
        active.since_unix_ms,
        a.output(),
        b.output()
    );
    eprintln!(
        "A stopped accepting {} ms before B became active; A exited {a_exited:?} after the cut",
        active.since_unix_ms - a_stopped
    );
    // Everything A confirmed before the cut is B's to deliver.
    let mut stomp = RawStomp::open(loopback(port_b));
    receive_exactly(&mut stomp, queue, &expected, true);
    drop(stomp);

    // A's supervisor restarts it, the network healed: on its own data directory it finds
    // the lease held by B (not by a dead predecessor of its own) and comes back as B's
    // standby, serving nothing.
    let config_a = write_config(dir.path(), "a-again", &url, true);
    let mut again =
        start_on(dir.path(), "a-again", &dir.path().join("a-data"), &config_a, port_a, admin_a);
    let deadline = Instant::now() + START_TIMEOUT;
    loop {
        let waiting = reader.status(admin_a).and_then(|s| s.waiting_for);
        if waiting.as_deref().is_some_and(|what| what.contains(&format!("pid {}", b.pid()))) {
            break;
        }
        assert!(again.try_status().is_none(), "the restarted A exited:\n{}", again.output());
        assert!(Instant::now() < deadline, "the restarted A never waited:\n{}", again.output());
        std::thread::sleep(Duration::from_millis(20));
    }
    std::thread::sleep(Duration::from_millis(2 * LEASE_MS));
    assert_eq!(reader.status(admin_a).map(|s| s.role), Some(BrokerRole::Waiting));
    assert_eq!(again.listening(), [admin_a], "the restarted A serves while B holds the lease");
    // And takes over when B stops cleanly (releasing the lease).
    b.stop();
    again.wait_accepting(loopback(port_a));
    assert_eq!(reader.wait_role(&mut again, admin_a, BrokerRole::Active).role, BrokerRole::Active);
    again.stop();
}
