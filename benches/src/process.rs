//! The `ferromq` binary as a process of its own, for benches that measure the broker alone
//! (its resident memory, without the load generator's: `connections` and `paging`) or that
//! compare its stores through the real broker (`store_compare`).

use std::net::SocketAddr;
use std::path::{Path, PathBuf};
use std::process::{Child, Command, Stdio};
use std::time::{Duration, Instant};

use anyhow::{bail, ensure, Context};

/// A running `ferromq start` with a STOMP and an OpenWire connector (and, when asked for, an
/// AMQP one) on loopback, killed on drop. Its data directory, configuration and stderr live
/// in the directory it was given.
pub struct FerromqProcess {
    child: Child,
    pub stomp: SocketAddr,
    pub openwire: SocketAddr,
    /// Set when [`Launch::amqp`] asked for an AMQP 1.0 connector.
    pub amqp: Option<SocketAddr>,
    /// Set when [`Launch::mqtt`] asked for an MQTT connector.
    pub mqtt: Option<SocketAddr>,
}

/// The store a broker process runs on: its `[store]` section.
#[derive(Debug, Clone, PartialEq, Eq)]
pub enum BrokerStore {
    /// `kind = "journal"`, the default.
    Journal,
    /// `kind = "lsm"` on `engine` (`"rocksdb"` or `"sled"`).
    Lsm { engine: &'static str },
    /// `kind = "jdbc"` on `url` (`sqlite://PATH`, relative to the data directory, or
    /// `postgres://...`).
    Jdbc { url: String },
}

impl BrokerStore {
    /// The `[store]` section of the configuration file; the other store keys keep their
    /// defaults (`sync = "always"`: every confirmed persistent send is on disk).
    pub fn section(&self) -> String {
        match self {
            BrokerStore::Journal => "[store]\nkind = \"journal\"\n".to_owned(),
            BrokerStore::Lsm { engine } => {
                format!("[store]\nkind = \"lsm\"\nengine = \"{engine}\"\n")
            }
            BrokerStore::Jdbc { url } => format!("[store]\nkind = \"jdbc\"\nurl = \"{url}\"\n"),
        }
    }
}

/// How to start a [`FerromqProcess`]: the configuration file's text, the store, and whether
/// to open an AMQP connector beside the STOMP and OpenWire ones.
#[derive(Debug, Clone, Default)]
pub struct Launch {
    /// TOML for the configuration file; with [`Launch::store`] set it must not have a
    /// `[store]` section of its own.
    pub config: String,
    /// The store's section, appended to the configuration; `None` keeps the configuration's
    /// (or the default journal).
    pub store: Option<BrokerStore>,
    /// Open an `amqp://` connector too.
    pub amqp: bool,
    /// Open an `mqtt://` connector too.
    pub mqtt: bool,
}

impl Launch {
    /// The configuration file's text: [`Launch::config`] then the store's section.
    fn config_text(&self) -> String {
        match &self.store {
            Some(store) => format!("{}\n{}", self.config, store.section()),
            None => self.config.clone(),
        }
    }
}

impl FerromqProcess {
    /// Builds the release binary if needed and starts it on `dir` (`dir/data` as the data
    /// directory) with `config` as its TOML configuration file; returns once both connectors
    /// accept connections.
    pub fn start(dir: &Path, config: &str) -> anyhow::Result<FerromqProcess> {
        FerromqProcess::launch(dir, &Launch { config: config.to_owned(), ..Launch::default() })
    }

    /// [`FerromqProcess::start`] as `launch` says: the store, and an AMQP connector.
    pub fn launch(dir: &Path, launch: &Launch) -> anyhow::Result<FerromqProcess> {
        let binary = ferromq_binary()?;
        let config_file = dir.join("ferromq.toml");
        std::fs::write(&config_file, launch.config_text())?;
        // Ports the kernel picks, read back from the broker's readiness line: a port chosen
        // here could be another program's by the time the broker binds it, and a connect
        // would then reach that program.
        let mut connectors = vec!["stomp://127.0.0.1:0", "tcp://127.0.0.1:0"];
        if launch.amqp {
            connectors.push("amqp://127.0.0.1:0");
        }
        if launch.mqtt {
            connectors.push("mqtt://127.0.0.1:0");
        }
        let stdout_path = dir.join("ferromq.stdout");
        let stdout = std::fs::File::create(&stdout_path)?;
        let stderr = std::fs::File::create(dir.join("ferromq.stderr"))?;
        let mut command = Command::new(&binary);
        command
            .arg("start")
            .arg("--config")
            .arg(&config_file)
            .arg("--data-dir")
            .arg(dir.join("data"));
        for connector in &connectors {
            command.args(["--connector", connector]);
        }
        let mut child = command
            .args(["--admin-bind", "127.0.0.1:0"])
            .env("RUST_LOG", "warn")
            .stdin(Stdio::null())
            .stdout(stdout)
            .stderr(stderr)
            .spawn()
            .with_context(|| format!("start {}", binary.display()))?;
        // A SQL store connects to its database and migrates the schema before the
        // connectors open.
        let deadline = Instant::now() + Duration::from_secs(30);
        let ready = loop {
            let printed = std::fs::read_to_string(&stdout_path).unwrap_or_default();
            if let Some(ready) = printed.lines().find_map(ReadyLine::parse) {
                break ready;
            }
            if let Some(status) = child.try_wait()? {
                let log = std::fs::read_to_string(dir.join("ferromq.stderr")).unwrap_or_default();
                bail!("ferromq exited with {status}:\n{log}");
            }
            if Instant::now() >= deadline {
                let _ = child.kill();
                let _ = child.wait();
                bail!("ferromq did not start accepting within 30 s");
            }
            std::thread::sleep(Duration::from_millis(20));
        };
        let mut process = FerromqProcess {
            child,
            stomp: SocketAddr::from(([127, 0, 0, 1], 0)),
            openwire: SocketAddr::from(([127, 0, 0, 1], 0)),
            amqp: None,
            mqtt: None,
        };
        ensure!(ready.pid == process.pid(), "the readiness line is another process's: {ready:?}");
        process.stomp = ready.addr("stomp").context("no STOMP connector is ready")?;
        process.openwire = ready.addr("tcp").context("no OpenWire connector is ready")?;
        if launch.amqp {
            process.amqp = Some(ready.addr("amqp").context("no AMQP connector is ready")?);
        }
        if launch.mqtt {
            process.mqtt = Some(ready.addr("mqtt").context("no MQTT connector is ready")?);
        }
        Ok(process)
    }

    pub fn pid(&self) -> u32 {
        self.child.id()
    }

    /// A line of the broker's `/proc/<pid>/status` (see [`status_kb`]).
    pub fn status_kb(&self, field: &str) -> u64 {
        status_kb(self.pid(), field)
    }

    /// Resets the broker's peak resident memory (`VmHWM`) to its current resident memory, so
    /// that the next reading is the peak of what follows (Linux 4.0 and later).
    pub fn reset_peak_rss(&self) -> anyhow::Result<()> {
        let path = format!("/proc/{}/clear_refs", self.pid());
        std::fs::write(&path, "5").with_context(|| format!("write 5 to {path}"))
    }
}

impl Drop for FerromqProcess {
    fn drop(&mut self) {
        let _ = self.child.kill();
        let _ = self.child.wait();
    }
}

/// A line of `/proc/<pid>/status`: `VmRSS:` and `VmHWM:` (the peak) in KiB, `Threads:`; 0 if
/// the process or the line is gone.
pub fn status_kb(pid: u32, field: &str) -> u64 {
    let status = std::fs::read_to_string(format!("/proc/{pid}/status")).unwrap_or_default();
    status
        .lines()
        .find(|line| line.starts_with(field))
        .and_then(|line| line.split_whitespace().nth(1))
        .and_then(|value| value.parse().ok())
        .unwrap_or(0)
}

/// What `ferromq start` prints once it serves: `ferromq ready pid=PID SCHEME=ADDRESS...`.
#[derive(Debug)]
struct ReadyLine {
    pid: u32,
    connectors: Vec<(String, SocketAddr)>,
}

impl ReadyLine {
    fn parse(line: &str) -> Option<ReadyLine> {
        let mut words = line.strip_prefix("ferromq ready ")?.split_whitespace();
        let pid = words.next()?.strip_prefix("pid=")?.parse().ok()?;
        let connectors = words
            .filter_map(|word| {
                let (scheme, address) = word.split_once('=')?;
                Some((scheme.to_owned(), address.parse().ok()?))
            })
            .collect();
        Some(ReadyLine { pid, connectors })
    }

    fn addr(&self, scheme: &str) -> Option<SocketAddr> {
        self.connectors.iter().find(|(s, _)| s == scheme).map(|(_, address)| *address)
    }
}

/// The release `ferromq` binary beside the running bench's executable, built first (a no-op
/// when it is up to date): `cargo bench` builds the broker's library, not its binary.
/// `FERROMQ_BIN` names another one.
fn ferromq_binary() -> anyhow::Result<PathBuf> {
    if let Ok(path) = std::env::var("FERROMQ_BIN") {
        return Ok(PathBuf::from(path));
    }
    // <target>/release/deps/<bench>-<hash>
    let exe = std::env::current_exe()?;
    let profile_dir =
        exe.parent().and_then(Path::parent).context("the bench's target directory")?;
    let target_dir = profile_dir.parent().context("the target directory")?;
    let cargo = std::env::var("CARGO").unwrap_or_else(|_| "cargo".to_owned());
    let manifest = Path::new(env!("CARGO_MANIFEST_DIR")).join("../Cargo.toml");
    let status = Command::new(cargo)
        .args(["build", "--release", "-p", "broker", "--bin", "ferromq", "--manifest-path"])
        .arg(&manifest)
        .arg("--target-dir")
        .arg(target_dir)
        .status()
        .context("run cargo build for the ferromq binary")?;
    ensure!(status.success(), "cargo build of the ferromq binary failed");
    Ok(profile_dir.join("ferromq"))
}
