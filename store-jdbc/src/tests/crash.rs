//! Crash tests, run by the shared harness `store::kit::crash`: a child process (this test
//! binary, running [`crash_child`]) writes through the store with several threads and
//! prints its ledger; the parent SIGKILLs it mid-write, reopens the store and checks the
//! ledger against it, over several rounds on one database.
//!
//! [`sqlite_power_loss_keeps_every_completed_unit`] runs the SQLite rounds under
//! `store::powercut`: each kill is a power cut (the database directory is replaced by its
//! durable image before the reopen). PostgreSQL has no such test: it is a server with its
//! own durability, which a power cut of our process's machine does not reach.

use std::path::Path;
use std::sync::Arc;

use store::kit::crash::{self, Child};
use store::powercut::PowerCut;
use store::MessageStore;

use crate::testing::{PgCluster, SqliteHarness};
use crate::{SqlOptions, SqlStore};

const URL_ENV: &str = "FERROMQ_JDBC_CRASH_URL";
const CHILD: &str = "tests::crash::crash_child";

fn open(url: &str) -> Arc<dyn MessageStore> {
    Arc::new(
        SqlStore::open(url, Path::new("/"), SqlOptions::default())
            .unwrap_or_else(|e| panic!("open {url}: {e}")),
    )
}

#[test]
#[ignore = "the crash tests' child process; runs only when started by them"]
fn crash_child() {
    let Ok(url) = std::env::var(URL_ENV) else { return };
    crash::child(open(&url));
}

#[test]
fn sqlite_child_killed_mid_write_loses_no_confirmed_unit() {
    let harness = SqliteHarness::new();
    let url = harness.url();
    Child::new(CHILD).env(URL_ENV, &url).rounds("sqlite", || open(&url));
}

#[test]
fn sqlite_power_loss_keeps_every_completed_unit() {
    let dir = tempfile::Builder::new().prefix("ferromq-sqlite-power-").tempdir().expect("dir");
    let data = dir.path().join("data");
    let cut = PowerCut::new(&data);
    let url = format!("sqlite://{}", data.join("ferromq.db").display());
    Child::new(CHILD).env(URL_ENV, &url).power_cut(&cut).rounds("sqlite", || open(&url));
}

#[test]
fn postgres_child_killed_mid_write_loses_no_confirmed_unit() {
    let Some(cluster) = PgCluster::shared() else { return };
    let url = cluster.create_database();
    Child::new(CHILD).env(URL_ENV, &url).rounds("postgres", || open(&url));
}
