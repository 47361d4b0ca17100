//! [`ActiveMq`]: Apache ActiveMQ 5.x (Debian's `activemq` package) started for a test, on a
//! free loopback port, in a temporary directory, and killed when dropped.
//!
//! The broker runs the repository's minimal configuration (`tests/activemq/activemq.xml`:
//! no persistence, no JMX, no web console, one OpenWire connector) as
//!
//! ```text
//! java -Xmx256M -Dactivemq.home=/usr/share/activemq -Dactivemq.base=DIR -Dactivemq.conf=DIR/conf
//!      -Dactivemq.data=DIR/data -Dferromq.openwire.port=PORT
//!      -jar /usr/share/activemq/bin/activemq.jar start xbean:file:DIR/conf/activemq.xml
//! ```
//!
//! in its own process group, so that dropping it kills everything it started. It starts in
//! about two seconds here. When the package is missing, [`ActiveMq::start`] returns `None`
//! with a printed reason, unless `FERROMQ_REQUIRE_ACTIVEMQ` is set (as `scripts/test` does),
//! in which case it fails.

use std::net::{SocketAddr, TcpListener, TcpStream};
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

/// Set to make a missing ActiveMQ a failure instead of a skip.
pub const REQUIRE_ACTIVEMQ: &str = "FERROMQ_REQUIRE_ACTIVEMQ";

/// A running Apache ActiveMQ broker; killed (with its process group) when dropped.
pub struct ActiveMq {
    child: Child,
    port: u16,
    dir: tempfile::TempDir,
    started_in: Duration,
}

impl ActiveMq {
    /// Starts ActiveMQ and waits until its OpenWire port accepts connections. `Ok(None)`
    /// (after printing why) when Debian's package is not installed and
    /// [`REQUIRE_ACTIVEMQ`] is not set.
    pub fn start() -> anyhow::Result<Option<ActiveMq>> {
        let jar = Path::new(ACTIVEMQ_HOME).join("bin/activemq.jar");
        if !jar.exists() {
            if std::env::var_os(REQUIRE_ACTIVEMQ).is_some() {
                bail!(
                    "{} is missing and {REQUIRE_ACTIVEMQ} is set: install Debian's activemq \
                     package (scripts/test does)",
                    jar.display()
                );
            }
            eprintln!(
                "skipping: Apache ActiveMQ is not installed ({} is missing; scripts/test \
                 installs Debian's activemq package)",
                jar.display()
            );
            return Ok(None);
        }
        let dir = tempfile::tempdir().context("a directory for ActiveMQ")?;
        let conf = dir.path().join("conf");
        let data = dir.path().join("data");
        std::fs::create_dir_all(&conf)?;
        std::fs::create_dir_all(&data)?;
        for (file, contents) in CONFIGURATION {
            std::fs::write(conf.join(file), contents)
                .with_context(|| format!("writing {}", conf.join(file).display()))?;
        }
        let port = free_port()?;
        let log = std::fs::File::create(dir.path().join("broker.log"))?;
        let started = Instant::now();
        let child = Command::new("java")
            .arg("-Xmx256M")
            .arg(format!("-Dactivemq.home={ACTIVEMQ_HOME}"))
            .arg(format!("-Dactivemq.base={}", dir.path().display()))
            .arg(format!("-Dactivemq.conf={}", conf.display()))
            .arg(format!("-Dactivemq.data={}", data.display()))
            .arg(format!("-Dferromq.openwire.port={port}"))
            .arg("-jar")
            .arg(&jar)
            .arg("start")
            .arg(format!("xbean:file:{}", conf.join("activemq.xml").display()))
            .current_dir(dir.path())
            .stdin(Stdio::null())
            .stdout(log.try_clone()?)
            .stderr(log)
            // Its own process group: dropping the broker kills whatever it started.
            .process_group(0)
            .spawn()
            .context("cannot run java (Debian's activemq package depends on a JRE)")?;
        let mut broker = ActiveMq { child, port, dir, started_in: Duration::ZERO };
        broker.wait_accepting(started)?;
        broker.started_in = started.elapsed();
        eprintln!(
            "Apache ActiveMQ started on {} in {:.1} s",
            broker.addr(),
            broker.started_in.as_secs_f64()
        );
        Ok(Some(broker))
    }

    fn wait_accepting(&mut self, started: Instant) -> anyhow::Result<()> {
        let addr = self.addr();
        loop {
            if let Some(status) = self.child.try_wait()? {
                bail!("Apache ActiveMQ exited ({status}) before opening {addr}:\n{}", self.log());
            }
            if TcpStream::connect_timeout(&addr, Duration::from_millis(200)).is_ok() {
                return Ok(());
            }
            if started.elapsed() > START_LIMIT {
                bail!(
                    "Apache ActiveMQ did not open {addr} within {START_LIMIT:?}:\n{}",
                    self.log()
                );
            }
            std::thread::sleep(Duration::from_millis(50));
        }
    }

    /// The OpenWire address.
    pub fn addr(&self) -> SocketAddr {
        SocketAddr::from(([127, 0, 0, 1], self.port))
    }

    /// The OpenWire port.
    pub fn port(&self) -> u16 {
        self.port
    }

    /// The broker URL for `ferromq producer` / `consumer`: `tcp://127.0.0.1:PORT`.
    pub fn url(&self) -> String {
        format!("tcp://{}", self.addr())
    }

    /// How long it took to open its port.
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
        // The whole process group, then the JVM itself for certain.
        let group = format!("-{}", self.child.id());
        let _ = Command::new("kill")
            .args(["-KILL", "--", &group])
            .stdout(Stdio::null())
            .stderr(Stdio::null())
            .status();
        let _ = self.child.kill();
        let _ = self.child.wait();
    }
}

/// A loopback port free right now.
fn free_port() -> anyhow::Result<u16> {
    let listener = TcpListener::bind("127.0.0.1:0")?;
    Ok(listener.local_addr()?.port())
}
