//! Test support, public so that other crates' tests and benches can use it: the conformance
//! kit's harnesses ([`SqliteHarness`], [`PostgresHarness`]) and [`PgCluster`], a throwaway
//! PostgreSQL server on loopback.
//!
//! [`PgCluster`] runs Debian's PostgreSQL binaries (`/usr/lib/postgresql/*/bin`): `initdb`
//! once per test process into a template directory, then per cluster a copy of it under a
//! temporary directory, started with `pg_ctl` on a free port of 127.0.0.1 with its socket in
//! that directory. As root the binaries run as the `postgres` user (`runuser`), since
//! PostgreSQL refuses to run as root. The cluster has a role `ferromq` (password
//! [`PgCluster::PASSWORD`], allowed to create databases) reached with a password over TCP.
//! A watchdog shell stops the server if the test process dies without dropping the cluster.
//!
//! When PostgreSQL is not installed, [`PgCluster::start`] returns `None` after printing a
//! loud message, unless `FERROMQ_REQUIRE_POSTGRES` is set (the test script sets it), in
//! which case it panics.

use std::path::{Path, PathBuf};
use std::process::{Command, Stdio};
use std::sync::atomic::{AtomicU64, Ordering};
use std::sync::{Arc, OnceLock};

use store::{Failpoints, MessageStore, StoreError, StoreHarness, SyncPolicy};

use crate::store::{SqlOptions, SqlStore, FAILPOINTS};

/// The conformance kit's harness over a SQLite database in a temporary directory.
pub struct SqliteHarness {
    dir: tempfile::TempDir,
    options: SqlOptions,
}

impl SqliteHarness {
    pub fn new() -> Self {
        let dir = tempfile::Builder::new()
            .prefix("ferromq-sqlite-")
            .tempdir()
            .unwrap_or_else(|e| panic!("creating a temporary directory failed: {e}"));
        SqliteHarness {
            dir,
            options: SqlOptions { sync: SyncPolicy::Always, ..SqlOptions::default() },
        }
    }

    pub fn url(&self) -> String {
        format!("sqlite://{}", self.dir.path().join("ferromq.db").display())
    }

    pub fn dir(&self) -> &Path {
        self.dir.path()
    }
}

impl Default for SqliteHarness {
    fn default() -> Self {
        SqliteHarness::new()
    }
}

impl StoreHarness for SqliteHarness {
    fn open(&mut self) -> Result<Arc<dyn MessageStore>, StoreError> {
        Ok(Arc::new(SqlStore::open(&self.url(), self.dir.path(), self.options.clone())?))
    }

    fn failpoints(&self) -> Failpoints {
        self.options.failpoints.clone()
    }

    fn failpoint_names(&self) -> &'static [&'static str] {
        FAILPOINTS
    }
}

/// The conformance kit's harness over a fresh database of the process's shared
/// [`PgCluster`]; `None` when PostgreSQL is not installed (see the module documentation).
pub struct PostgresHarness {
    url: String,
    options: SqlOptions,
}

impl PostgresHarness {
    pub fn new() -> Option<Self> {
        let cluster = PgCluster::shared()?;
        let url = cluster.create_database();
        Some(PostgresHarness { url, options: SqlOptions::default() })
    }

    pub fn url(&self) -> &str {
        &self.url
    }
}

impl StoreHarness for PostgresHarness {
    fn open(&mut self) -> Result<Arc<dyn MessageStore>, StoreError> {
        Ok(Arc::new(SqlStore::open(&self.url, Path::new("/"), self.options.clone())?))
    }

    fn failpoints(&self) -> Failpoints {
        self.options.failpoints.clone()
    }

    fn failpoint_names(&self) -> &'static [&'static str] {
        FAILPOINTS
    }
}

/// A throwaway PostgreSQL server; stopped (and its files removed) when dropped.
pub struct PgCluster {
    dir: tempfile::TempDir,
    bin: PathBuf,
    port: u16,
    as_postgres: bool,
    _watchdog: Option<std::process::Child>,
}

static TEMPLATE: OnceLock<Result<Template, String>> = OnceLock::new();
static SHARED: OnceLock<Option<PgCluster>> = OnceLock::new();
static DATABASES: AtomicU64 = AtomicU64::new(0);

/// An initialized data directory that clusters copy (initdb takes seconds, a copy does not).
struct Template {
    _dir: tempfile::TempDir,
    data: PathBuf,
    bin: PathBuf,
    as_postgres: bool,
}

/// The newest installed PostgreSQL's `bin` directory.
pub fn postgres_bin() -> Option<PathBuf> {
    let mut versions: Vec<(u32, PathBuf)> = std::fs::read_dir("/usr/lib/postgresql")
        .ok()?
        .filter_map(|entry| entry.ok())
        .filter_map(|entry| {
            let version = entry.file_name().to_string_lossy().parse::<u32>().ok()?;
            let bin = entry.path().join("bin");
            bin.join("initdb").exists().then_some((version, bin))
        })
        .collect();
    versions.sort();
    versions.pop().map(|(_, bin)| bin)
}

fn required() -> bool {
    std::env::var_os("FERROMQ_REQUIRE_POSTGRES").is_some_and(|v| !v.is_empty() && v != "0")
}

fn is_root() -> bool {
    Command::new("id")
        .arg("-u")
        .output()
        .map(|out| String::from_utf8_lossy(&out.stdout).trim() == "0")
        .unwrap_or(false)
}

fn run(command: &mut Command, what: &str) -> Result<(), String> {
    let output = command.stdin(Stdio::null()).output().map_err(|e| format!("{what}: {e}"))?;
    if output.status.success() {
        return Ok(());
    }
    Err(format!(
        "{what} failed ({}): {}{}",
        output.status,
        String::from_utf8_lossy(&output.stdout),
        String::from_utf8_lossy(&output.stderr)
    ))
}

/// `program` from `bin`, run as the `postgres` user when we are root.
fn pg_command(bin: &Path, program: &str, as_postgres: bool) -> Command {
    if as_postgres {
        let mut command = Command::new("runuser");
        command.args(["-u", "postgres", "--"]).arg(bin.join(program));
        command
    } else {
        Command::new(bin.join(program))
    }
}

fn give_to_postgres(path: &Path, as_postgres: bool) -> Result<(), String> {
    if as_postgres {
        run(Command::new("chown").arg("-R").arg("postgres:postgres").arg(path), "chown")?;
    }
    Ok(())
}

/// Runs `then` in a shell once this process is gone.
fn watchdog(then: &str) -> Option<std::process::Child> {
    let script =
        format!("while kill -0 {} 2>/dev/null; do sleep 1; done; {then}", std::process::id());
    Command::new("sh")
        .args(["-c", &script])
        .stdin(Stdio::null())
        .stdout(Stdio::null())
        .stderr(Stdio::null())
        .spawn()
        .ok()
}

fn template() -> Result<&'static Template, String> {
    TEMPLATE
        .get_or_init(|| {
            let bin = postgres_bin()
                .ok_or("PostgreSQL is not installed (no /usr/lib/postgresql/*/bin/initdb)")?;
            let as_postgres = is_root();
            let dir = tempfile::Builder::new()
                .prefix("ferromq-pg-template-")
                .tempdir()
                .map_err(|e| format!("temporary directory: {e}"))?;
            give_to_postgres(dir.path(), as_postgres)?;
            let data = dir.path().join("data");
            run(
                pg_command(&bin, "initdb", as_postgres)
                    .arg("-D")
                    .arg(&data)
                    .args(["-U", "postgres", "-E", "UTF8", "--no-sync"])
                    .args(["--auth-local=trust", "--auth-host=scram-sha-256"]),
                "initdb",
            )?;
            // Statics are never dropped: remove the template when the process is gone.
            let _ = watchdog(&format!("rm -rf {}", dir.path().display()));
            Ok(Template { _dir: dir, data, bin, as_postgres })
        })
        .as_ref()
        .map_err(|e| e.clone())
}

impl PgCluster {
    /// The password of the `ferromq` role.
    pub const PASSWORD: &'static str = "ferromq-test";

    /// Starts a cluster of its own (for tests that stop and start the server). `None` when
    /// PostgreSQL is not installed and not required.
    pub fn start() -> Option<PgCluster> {
        let template = match template() {
            Ok(template) => template,
            Err(reason) if !required() => {
                eprintln!(
                    "\n!!!!! SKIPPING a PostgreSQL test: {reason}. Install Debian's `postgresql` \
                     (scripts/test does) or set FERROMQ_REQUIRE_POSTGRES=1 to make this fail.\n"
                );
                return None;
            }
            Err(reason) => panic!("FERROMQ_REQUIRE_POSTGRES is set, but: {reason}"),
        };
        match PgCluster::from_template(template) {
            Ok(cluster) => Some(cluster),
            Err(reason) => panic!("starting a throwaway PostgreSQL failed: {reason}"),
        }
    }

    /// The process's shared cluster, started on first use; each user takes a database of its
    /// own ([`PgCluster::create_database`]).
    pub fn shared() -> Option<&'static PgCluster> {
        SHARED.get_or_init(PgCluster::start).as_ref()
    }

    fn from_template(template: &Template) -> Result<PgCluster, String> {
        let dir = tempfile::Builder::new()
            .prefix("ferromq-pg-")
            .tempdir()
            .map_err(|e| format!("temporary directory: {e}"))?;
        run(
            Command::new("cp").arg("-a").arg(&template.data).arg(dir.path()),
            "copying the template",
        )?;
        give_to_postgres(dir.path(), template.as_postgres)?;
        // Outside the ephemeral range: a test that stops the server and starts it again on
        // the same port must find it free.
        let port = store::kit::loopback_port().map_err(|e| format!("finding a free port: {e}"))?;
        let mut cluster = PgCluster {
            dir,
            bin: template.bin.clone(),
            port,
            as_postgres: template.as_postgres,
            _watchdog: None,
        };
        cluster.start_server()?;
        cluster._watchdog = cluster.watchdog();
        cluster.admin(&format!(
            "CREATE ROLE ferromq LOGIN CREATEDB PASSWORD '{}'",
            PgCluster::PASSWORD
        ))?;
        Ok(cluster)
    }

    /// Stops the server when this process is gone (SIGKILLed tests never drop the cluster).
    fn watchdog(&self) -> Option<std::process::Child> {
        let stop = format!(
            "{} {} -D {} -m immediate stop",
            if self.as_postgres { "runuser -u postgres --" } else { "" },
            self.bin.join("pg_ctl").display(),
            self.data().display()
        );
        watchdog(&format!("{stop} >/dev/null 2>&1; rm -rf {}", self.dir.path().display()))
    }

    fn data(&self) -> PathBuf {
        self.dir.path().join("data")
    }

    pub fn port(&self) -> u16 {
        self.port
    }

    /// Starts the server (again).
    pub fn start_server(&self) -> Result<(), String> {
        let options = format!(
            "-p {} -k {} -c listen_addresses=127.0.0.1 -c max_connections=200",
            self.port,
            self.dir.path().display()
        );
        run(
            pg_command(&self.bin, "pg_ctl", self.as_postgres)
                .arg("-D")
                .arg(self.data())
                .arg("-l")
                .arg(self.dir.path().join("server.log"))
                .args(["-w", "-t", "30", "-o", &options, "start"]),
            "pg_ctl start",
        )
    }

    /// Stops the server at once (`immediate`: like a crash, connections cut).
    pub fn stop_server(&self) -> Result<(), String> {
        run(
            pg_command(&self.bin, "pg_ctl", self.as_postgres).arg("-D").arg(self.data()).args([
                "-w",
                "-m",
                "immediate",
                "stop",
            ]),
            "pg_ctl stop",
        )
    }

    /// Runs `sql` as the superuser over the server's Unix socket.
    pub fn admin(&self, sql: &str) -> Result<(), String> {
        let mut config = postgres::Config::new();
        config.host_path(self.dir.path()).port(self.port).user("postgres").dbname("postgres");
        let mut client =
            config.connect(postgres::NoTls).map_err(|e| format!("connecting as postgres: {e}"))?;
        client
            .batch_execute(sql)
            .map_err(|e| format!("`{sql}`: {}", crate::db::postgres::describe(&e)))
    }

    /// The url of `database` as the `ferromq` role.
    pub fn url(&self, database: &str) -> String {
        format!("postgres://ferromq:{}@127.0.0.1:{}/{database}", PgCluster::PASSWORD, self.port)
    }

    /// Creates a fresh database owned by `ferromq`; returns its url.
    pub fn create_database(&self) -> String {
        let name =
            format!("ferromq_{}_{}", std::process::id(), DATABASES.fetch_add(1, Ordering::Relaxed));
        self.admin(&format!("CREATE DATABASE {name} OWNER ferromq"))
            .unwrap_or_else(|e| panic!("creating database {name}: {e}"));
        self.url(&name)
    }
}

impl Drop for PgCluster {
    fn drop(&mut self) {
        let _ = self.stop_server();
        if let Some(mut watchdog) = self._watchdog.take() {
            let _ = watchdog.kill();
            let _ = watchdog.wait();
        }
    }
}
