//! [`ActiveMq`]: Apache ActiveMQ 5.x (Debian's `activemq` package) started for a test, on a
//! free loopback port, in a temporary directory, and killed when dropped.
//!
//! The broker runs the repository's minimal configuration (`tests/activemq/activemq.xml`:
//! no JMX, no web console, one OpenWire and one STOMP connector, persistence off, or KahaDB with
//! [`ActiveMq::start_persistent`]) as
//!
//! ```text
//! java -Xmx256M -Dactivemq.home=/usr/share/activemq -Dactivemq.base=DIR -Dactivemq.conf=DIR/conf
//!      -Dactivemq.data=DIR/data -Dferromq.openwire.port=PORT -Dferromq.stomp.port=PORT
//!      -Dferromq.persistent=BOOL
//!      -jar /usr/share/activemq/bin/activemq.jar start xbean:file:DIR/conf/activemq.xml
//! ```
//!
//! in its own process group, so that dropping it kills everything it started.
//! [`ActiveMq::start_with_user`] adds ActiveMQ's `simpleAuthenticationPlugin` with one user
//! (no anonymous access), for the tests of wrong credentials. It starts in
//! about two seconds here; [`ActiveMq::restart`] stops it (SIGTERM, a clean shutdown) and
//! starts it again on the same port and data. When the package is missing, [`ActiveMq::start`] returns `None`
//! with a printed reason, unless `FERROMQ_REQUIRE_ACTIVEMQ` is set (as `scripts/test` does),
//! in which case it fails.

use std::net::SocketAddr;
use std::os::unix::process::CommandExt;
use std::path::Path;
use std::process::{Child, Command, Stdio};
use std::time::{Duration, Instant};

use anyhow::{bail, Context as _};

/// Debian's ActiveMQ installation.
pub const ACTIVEMQ_HOME: &str = "/usr/share/activemq";

/// How long ActiveMQ may take to open its port (it takes about 2 s on an idle machine).
const START_LIMIT: Duration = Duration::from_secs(90);

/// The files of `tests/activemq`, written to the broker's `conf` directory. Included by path
/// relative to this file, so that other crates' tests can include this module as it is.
const CONFIGURATION: [(&str, &str); 2] = [
    ("activemq.xml", include_str!("../activemq/activemq.xml")),
    ("log4j.properties", include_str!("../activemq/log4j.properties")),
];

/// What [`ActiveMq::start_with_user`] adds to `activemq.xml`: one user, anonymous access
/// refused, every authenticated user allowed everything (no authorization plugin). The user
/// and password come as system properties, so no value needs XML escaping; ActiveMQ's
/// schema takes the broker's child elements in any order.
const AUTHENTICATION: &str = r#"    <plugins>
      <simpleAuthenticationPlugin anonymousAccessAllowed="false">
        <users>
          <authenticationUser username="${ferromq.auth.user}"
                              password="${ferromq.auth.password}" groups="users"/>
        </users>
      </simpleAuthenticationPlugin>
    </plugins>
  </broker>"#;

/// Set to make a missing ActiveMQ a failure instead of a skip.
pub const REQUIRE_ACTIVEMQ: &str = "FERROMQ_REQUIRE_ACTIVEMQ";

/// A running Apache ActiveMQ broker; killed (with its process group) when dropped.
pub struct ActiveMq {
    child: Option<Child>,
    port: u16,
    /// The STOMP connector's port.
    stomp_port: u16,
    persistent: bool,
    /// The one user and password allowed, with the authentication plugin.
    user: Option<(String, String)>,
    dir: tempfile::TempDir,
    started_in: Duration,
}

impl ActiveMq {
    /// Starts ActiveMQ without persistence and waits until its OpenWire port accepts
    /// connections. `Ok(None)` (after printing why) when Debian's package is not installed
    /// and [`REQUIRE_ACTIVEMQ`] is not set.
    pub fn start() -> anyhow::Result<Option<ActiveMq>> {
        ActiveMq::start_with(false)
    }

    /// [`ActiveMq::start`] with KahaDB persistence in its data directory, so that persistent
    /// messages survive [`ActiveMq::restart`].
    pub fn start_persistent() -> anyhow::Result<Option<ActiveMq>> {
        ActiveMq::start_with(true)
    }

    /// [`ActiveMq::start`] with ActiveMQ's `simpleAuthenticationPlugin`: only `user` with
    /// `password` may connect (anything else gets a `java.lang.SecurityException`).
    pub fn start_with_user(user: &str, password: &str) -> anyhow::Result<Option<ActiveMq>> {
        ActiveMq::start_configured(false, Some((user.to_owned(), password.to_owned())))
    }

    fn start_with(persistent: bool) -> anyhow::Result<Option<ActiveMq>> {
        ActiveMq::start_configured(persistent, None)
    }

    fn start_configured(
        persistent: bool,
        user: Option<(String, String)>,
    ) -> anyhow::Result<Option<ActiveMq>> {
        if !jar().exists() {
            if std::env::var_os(REQUIRE_ACTIVEMQ).is_some() {
                bail!(
                    "{} is missing and {REQUIRE_ACTIVEMQ} is set: install Debian's activemq \
                     package (scripts/test does)",
                    jar().display()
                );
            }
            eprintln!(
                "skipping: Apache ActiveMQ is not installed ({} is missing; scripts/test \
                 installs Debian's activemq package)",
                jar().display()
            );
            return Ok(None);
        }
        let dir = tempfile::tempdir().context("a directory for ActiveMQ")?;
        let conf = dir.path().join("conf");
        std::fs::create_dir_all(&conf)?;
        std::fs::create_dir_all(dir.path().join("data"))?;
        for (file, contents) in CONFIGURATION {
            let contents = match (&user, file) {
                (Some(_), "activemq.xml") => contents.replacen("  </broker>", AUTHENTICATION, 1),
                _ => contents.to_owned(),
            };
            std::fs::write(conf.join(file), contents)
                .with_context(|| format!("writing {}", conf.join(file).display()))?;
        }
        let openwire_port = free_port()?;
        let mut broker = ActiveMq {
            child: None,
            port: openwire_port,
            stomp_port: loop {
                // Two free ports, not the same one twice.
                let port = free_port()?;
                if port != openwire_port {
                    break port;
                }
            },
            persistent,
            user,
            dir,
            started_in: Duration::ZERO,
        };
        broker.launch()?;
        eprintln!(
            "Apache ActiveMQ started on {} in {:.1} s",
            broker.addr(),
            broker.started_in.as_secs_f64()
        );
        Ok(Some(broker))
    }

    /// Starts the JVM and waits for the port.
    fn launch(&mut self) -> anyhow::Result<()> {
        let dir = self.dir.path();
        let conf = dir.join("conf");
        let log =
            std::fs::OpenOptions::new().create(true).append(true).open(dir.join("broker.log"))?;
        let started = Instant::now();
        let mut command = Command::new("java");
        if let Some((user, password)) = &self.user {
            command
                .arg(format!("-Dferromq.auth.user={user}"))
                .arg(format!("-Dferromq.auth.password={password}"));
        }
        let child = command
            .arg("-Xmx256M")
            .arg(format!("-Dactivemq.home={ACTIVEMQ_HOME}"))
            .arg(format!("-Dactivemq.base={}", dir.display()))
            .arg(format!("-Dactivemq.conf={}", conf.display()))
            .arg(format!("-Dactivemq.data={}", dir.join("data").display()))
            .arg(format!("-Dferromq.openwire.port={}", self.port))
            .arg(format!("-Dferromq.stomp.port={}", self.stomp_port))
            .arg(format!("-Dferromq.persistent={}", self.persistent))
            .arg("-jar")
            .arg(jar())
            .arg("start")
            .arg(format!("xbean:file:{}", conf.join("activemq.xml").display()))
            .current_dir(dir)
            .stdin(Stdio::null())
            .stdout(log.try_clone()?)
            .stderr(log)
            // Its own process group: dropping the broker kills whatever it started.
            .process_group(0)
            .spawn()
            .context("cannot run java (Debian's activemq package depends on a JRE)")?;
        self.child = Some(child);
        self.wait_accepting(started)?;
        self.started_in = started.elapsed();
        Ok(())
    }

    fn wait_accepting(&mut self, started: Instant) -> anyhow::Result<()> {
        let (addr, stomp) = (self.addr(), self.stomp_addr());
        loop {
            if let Some(status) = self.child.as_mut().map(Child::try_wait).transpose()?.flatten() {
                bail!("Apache ActiveMQ exited ({status}) before opening {addr}:\n{}", self.log());
            }
            // The JVM itself must listen there: a connect could reach another program on the
            // port while ActiveMQ, failing to bind it, stays up.
            let pid = self.child.as_ref().map(Child::id);
            let listening = pid.map(store::kit::listening_addrs).unwrap_or_default();
            if listening.contains(&addr) && listening.contains(&stomp) {
                return Ok(());
            }
            if started.elapsed() > START_LIMIT {
                bail!(
                    "Apache ActiveMQ did not open {addr} and {stomp} within {START_LIMIT:?}:\n{}",
                    self.log()
                );
            }
            std::thread::sleep(Duration::from_millis(50));
        }
    }

    /// Stops the broker cleanly (SIGTERM to its process group; SIGKILL after 60 s).
    pub fn stop(&mut self) -> anyhow::Result<()> {
        let Some(mut child) = self.child.take() else { return Ok(()) };
        signal_group(&child, "-TERM");
        let deadline = Instant::now() + Duration::from_secs(60);
        while child.try_wait()?.is_none() {
            if Instant::now() >= deadline {
                signal_group(&child, "-KILL");
                child.kill().ok();
                child.wait()?;
                break;
            }
            std::thread::sleep(Duration::from_millis(50));
        }
        // Whatever else the group still runs.
        signal_group(&child, "-KILL");
        Ok(())
    }

    /// Stops the broker and starts it again on the same port and data directory.
    pub fn restart(&mut self) -> anyhow::Result<()> {
        self.stop()?;
        self.launch()
    }

    /// The OpenWire address.
    /// The JVM's process id, while it runs (a benchmark reads its CPU time).
    pub fn pid(&self) -> Option<u32> {
        self.child.as_ref().map(Child::id)
    }

    pub fn addr(&self) -> SocketAddr {
        SocketAddr::from(([127, 0, 0, 1], self.port))
    }

    /// The STOMP address.
    pub fn stomp_addr(&self) -> SocketAddr {
        SocketAddr::from(([127, 0, 0, 1], self.stomp_port))
    }

    /// The OpenWire port.
    pub fn port(&self) -> u16 {
        self.port
    }

    /// The broker URL for `ferromq producer` / `consumer` and the JMS client:
    /// `tcp://127.0.0.1:PORT`.
    pub fn url(&self) -> String {
        format!("tcp://{}", self.addr())
    }

    /// How long its last start took, until the port accepted connections.
    pub fn started_in(&self) -> Duration {
        self.started_in
    }

    /// The broker's output so far (for failure messages).
    pub fn log(&self) -> String {
        std::fs::read_to_string(self.dir.path().join("broker.log")).unwrap_or_default()
    }
}

impl Drop for ActiveMq {
    fn drop(&mut self) {
        if let Some(mut child) = self.child.take() {
            signal_group(&child, "-KILL");
            let _ = child.kill();
            let _ = child.wait();
        }
    }
}

/// Sends `signal` to the process group `child` leads.
fn signal_group(child: &Child, signal: &str) {
    let group = format!("-{}", child.id());
    let _ = Command::new("kill")
        .args([signal, "--", &group])
        .stdout(Stdio::null())
        .stderr(Stdio::null())
        .status();
}

/// `activemq.jar` of Debian's package.
fn jar() -> std::path::PathBuf {
    Path::new(ACTIVEMQ_HOME).join("bin/activemq.jar")
}

/// A loopback port free right now.
fn free_port() -> anyhow::Result<u16> {
    Ok(store::kit::loopback_port()?)
}
