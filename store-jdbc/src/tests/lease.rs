//! [`Lease`] on a real PostgreSQL: one holder at a time while the lease is valid, a takeover
//! once it expired on the database's clock, a renewal that fails after a takeover, a release
//! that frees the row at once, and a dead predecessor replaced without waiting.

use std::time::Duration;

use crate::testing::PgCluster;
use crate::{Lease, LeaseError, LeaseOptions};

fn lease(url: &str, holder: &str, duration_ms: u64) -> Lease {
    let options = LeaseOptions {
        holder: holder.to_owned(),
        predecessor: None,
        duration: Duration::from_millis(duration_ms),
        io_timeout: Duration::from_secs(2),
    };
    Lease::new(url, options).expect("a PostgreSQL url")
}

/// Opens the lease's connection (creating the schema on a fresh database) by reading the row.
fn connect(lease: &mut Lease) {
    lease.current().expect("read the lease row");
}

/// Waits until the lease row's expiry has passed on the database's clock, the one that
/// decides a takeover.
fn wait_expired(lease: &mut Lease) {
    let deadline = std::time::Instant::now() + Duration::from_secs(30);
    while lease.current().expect("read the lease row").1 >= 0 {
        assert!(std::time::Instant::now() < deadline, "the lease never expired");
        std::thread::sleep(Duration::from_millis(20));
    }
}

fn held_by(result: Result<(), LeaseError>) -> String {
    match result {
        Err(LeaseError::Held { holder, .. }) => holder,
        other => panic!("expected Held, got {other:?}"),
    }
}

#[test]
fn a_second_holder_is_refused_while_the_lease_is_valid() {
    let Some(cluster) = PgCluster::shared() else { return };
    let url = cluster.create_database();
    let mut a = lease(&url, "broker-a", 30_000);
    let mut b = lease(&url, "broker-b", 30_000);
    a.try_acquire().expect("a free lease is taken");
    let error = b.try_acquire().expect_err("held by a");
    assert!(error.to_string().contains("broker-a"), "{error}");
    assert_eq!(held_by(Err(error)), "broker-a");
    // The holder takes it again (a retry after an unknown outcome), and renews it.
    a.try_acquire().expect("ours already");
    a.renew().expect("renew our own lease");
    let (holder, expires_in) = a.current().expect("read the row");
    assert_eq!(holder.as_deref(), Some("broker-a"));
    assert!(expires_in > 25_000 && expires_in <= 30_000, "{expires_in}");
    assert_eq!(held_by(b.try_acquire()), "broker-a");
}

#[test]
fn another_holder_takes_over_once_the_lease_expired_and_the_old_one_cannot_renew() {
    let Some(cluster) = PgCluster::shared() else { return };
    let url = cluster.create_database();
    let mut a = lease(&url, "broker-a", 400);
    let mut b = lease(&url, "broker-b", 400);
    // Both connected first (a connection and its schema check can take longer than the
    // lease on a loaded machine): between a's acquire and b's attempt is one statement.
    connect(&mut a);
    connect(&mut b);
    a.try_acquire().expect("a free lease is taken");
    assert_eq!(held_by(b.try_acquire()), "broker-a");
    wait_expired(&mut b);
    b.try_acquire().expect("an expired lease is taken over");
    match a.renew() {
        Err(LeaseError::Lost { holder, .. }) => assert_eq!(holder.as_deref(), Some("broker-b")),
        other => panic!("the old holder renewed after a takeover: {other:?}"),
    }
    // Nor can it take the lease back while b's is valid.
    assert_eq!(held_by(a.try_acquire()), "broker-b");
}

#[test]
fn a_released_lease_is_taken_at_once() {
    let Some(cluster) = PgCluster::shared() else { return };
    let url = cluster.create_database();
    let mut a = lease(&url, "broker-a", 30_000);
    let mut b = lease(&url, "broker-b", 30_000);
    a.try_acquire().expect("a free lease is taken");
    // Releasing someone else's lease does nothing.
    b.release().expect("release what we do not hold");
    assert_eq!(held_by(b.try_acquire()), "broker-a");
    a.release().expect("release");
    assert_eq!(a.current().expect("read the row").0, None);
    b.try_acquire().expect("a released lease is taken at once");
    assert!(matches!(a.renew(), Err(LeaseError::Lost { .. })));
}

#[test]
fn a_dead_predecessor_is_replaced_without_waiting_for_its_expiry() {
    let Some(cluster) = PgCluster::shared() else { return };
    let url = cluster.create_database();
    let mut old = lease(&url, "broker-a pid 1 [dir-1234]", 30_000);
    old.try_acquire().expect("a free lease is taken");
    let options = |holder: &str, predecessor: &str| LeaseOptions {
        holder: holder.to_owned(),
        predecessor: Some(predecessor.to_owned()),
        duration: Duration::from_secs(30),
        io_timeout: Duration::from_secs(2),
    };
    // Another data directory's broker waits...
    let mut other = Lease::new(&url, options("broker-b [dir-99]", "[dir-99]")).expect("url");
    assert_eq!(held_by(other.try_acquire()), "broker-a pid 1 [dir-1234]");
    // ...the same data directory's next broker takes over at once.
    let mut successor =
        Lease::new(&url, options("broker-a pid 2 [dir-1234]", "[dir-1234]")).expect("url");
    successor.try_acquire().expect("the predecessor's lease is replaced");
    assert!(matches!(old.renew(), Err(LeaseError::Lost { .. })));
}

#[test]
fn a_sqlite_url_has_no_lease() {
    let options = LeaseOptions {
        holder: "a".to_owned(),
        predecessor: None,
        duration: Duration::from_secs(1),
        io_timeout: Duration::from_secs(1),
    };
    let error = Lease::new("sqlite://x.db", options).expect_err("sqlite");
    assert!(matches!(error, LeaseError::NotPostgres { .. }), "{error}");
}

#[test]
fn an_unreachable_database_fails_within_the_io_timeout() {
    let port = std::net::TcpListener::bind("127.0.0.1:0")
        .and_then(|l| l.local_addr())
        .expect("free port")
        .port();
    let url = format!("postgres://ferromq:x@127.0.0.1:{port}/ferromq");
    let mut lease = lease(&url, "a", 1000);
    let started = std::time::Instant::now();
    let error = lease.try_acquire().expect_err("nothing listens");
    assert!(matches!(error, LeaseError::Database(_)), "{error}");
    assert!(started.elapsed() < Duration::from_secs(3), "{:?}", started.elapsed());
}

/// A store opened with `lease_holder` writes only while that lease is valid: once another
/// broker took it over, a write that reaches the database (sent before the old broker
/// fenced itself, say) is refused and nothing of it is stored.
#[test]
fn a_store_writes_only_while_its_broker_holds_the_lease() {
    use store::MessageStore;

    use super::{add, ids, message, queue, submit};
    use crate::{SqlOptions, SqlStore};

    let Some(cluster) = PgCluster::shared() else { return };
    let url = cluster.create_database();
    let mut a = lease(&url, "broker-a", 400);
    // The store opened and recovered (a connection, the schema, reads: on a loaded machine
    // longer than the lease) before the lease is taken, so that the one write meant to be
    // under the lease comes right after the acquire; the store checks the lease only when it
    // writes.
    connect(&mut a);
    let options = SqlOptions { lease_holder: Some("broker-a".to_owned()), ..SqlOptions::default() };
    let store = SqlStore::open(&url, std::path::Path::new("/"), options).expect("open");
    store.recover().expect("recover");
    let q = queue("FENCED");
    a.try_acquire().expect("a free lease is taken");
    submit(&store, vec![add(&message(1, &q, 4, 10), &[&q])]).expect("written under the lease");

    wait_expired(&mut a);
    let error = submit(&store, vec![add(&message(2, &q, 4, 10), &[&q])])
        .expect_err("written after the lease expired");
    assert!(error.to_string().contains("this broker, but its lease expired"), "{error}");

    let mut b = lease(&url, "broker-b", 30_000);
    b.try_acquire().expect("an expired lease is taken over");
    let error = submit(&store, vec![add(&message(3, &q, 4, 10), &[&q])])
        .expect_err("written under another broker's lease");
    assert!(error.to_string().contains("broker-b"), "{error}");
    assert!(error.to_string().contains("no longer holds the lease"), "{error}");
    drop(store);

    let reader =
        SqlStore::open(&url, std::path::Path::new("/"), SqlOptions::default()).expect("open again");
    reader.recover().expect("recover");
    assert_eq!(ids(&reader, &q), vec![1], "only the write under the lease is stored");
}
