//! Eclipse Mosquitto (Debian's `mosquitto` 2.0, `/usr/sbin/mosquitto`) as a process of its
//! own, the MQTT peer of `benches/mqtt.rs`: started on a configuration file of ours in a
//! directory of ours, on a loopback port below the ephemeral range, and counted as started
//! only once that process itself listens on the port (a connect alone could reach another
//! program that holds it). Killed on drop.

use std::net::{Ipv4Addr, SocketAddr};
use std::path::{Path, PathBuf};
use std::process::{Child, Command, Stdio};
use std::time::{Duration, Instant};

use anyhow::{bail, Context};

/// Where Debian installs the broker.
pub const MOSQUITTO_BINARY: &str = "/usr/sbin/mosquitto";

/// How long mosquitto may take to listen.
const START_TIMEOUT: Duration = Duration::from_secs(10);

/// What a [`MosquittoProcess`]'s configuration sets.
#[derive(Debug, Clone, Copy)]
pub struct MosquittoSettings {
    /// `max_inflight_messages`: QoS 1 and 2 messages in flight to each client at once.
    pub max_inflight_messages: u32,
    /// `max_queued_messages`: messages held for each client beyond those in flight (0: no
    /// limit); past it mosquitto drops QoS 0 messages (and refuses to queue QoS 1 and 2 ones).
    pub max_queued_messages: u32,
    /// `set_tcp_nodelay`: Nagle's algorithm off on the clients' sockets (mosquitto's default
    /// leaves it on).
    pub tcp_nodelay: bool,
}

/// A running mosquitto.
pub struct MosquittoProcess {
    child: Child,
    pub addr: SocketAddr,
    dir: PathBuf,
}

impl MosquittoProcess {
    /// Whether Debian's mosquitto is installed.
    pub fn installed() -> bool {
        Path::new(MOSQUITTO_BINARY).is_file()
    }

    /// Starts mosquitto in `dir` (its configuration and log go there) on a free loopback
    /// port, with `settings`, without persistence (it never writes messages to disk) and with
    /// anonymous clients allowed; returns once it listens.
    pub fn start(dir: &Path, settings: MosquittoSettings) -> anyhow::Result<MosquittoProcess> {
        let port = store::kit::loopback_port().context("choosing a port for mosquitto")?;
        let log = dir.join("mosquitto.log");
        let config = format!(
            "listener {port} 127.0.0.1\n\
             allow_anonymous true\n\
             persistence false\n\
             max_inflight_messages {}\n\
             max_queued_messages {}\n\
             set_tcp_nodelay {}\n\
             log_dest file {}\n\
             log_type error\n\
             log_type warning\n\
             connection_messages false\n",
            settings.max_inflight_messages,
            settings.max_queued_messages,
            settings.tcp_nodelay,
            log.display()
        );
        let config_file = dir.join("mosquitto.conf");
        std::fs::write(&config_file, config)
            .with_context(|| format!("writing {}", config_file.display()))?;
        let stderr = std::fs::File::create(dir.join("mosquitto.stderr"))?;
        let child = Command::new(MOSQUITTO_BINARY)
            .arg("-c")
            .arg(&config_file)
            .stdin(Stdio::null())
            .stdout(Stdio::null())
            .stderr(stderr)
            .spawn()
            .with_context(|| format!("starting {MOSQUITTO_BINARY}"))?;
        let mut process = MosquittoProcess {
            child,
            addr: SocketAddr::from((Ipv4Addr::LOCALHOST, port)),
            dir: dir.to_owned(),
        };
        let deadline = Instant::now() + START_TIMEOUT;
        loop {
            if store::kit::listening_addrs(process.pid()).iter().any(|a| a.port() == port) {
                return Ok(process);
            }
            if let Some(status) = process.child.try_wait()? {
                bail!("mosquitto exited with {status}:\n{}", process.logs());
            }
            if Instant::now() >= deadline {
                bail!("mosquitto did not listen on {port} within {START_TIMEOUT:?}");
            }
            std::thread::sleep(Duration::from_millis(20));
        }
    }

    pub fn pid(&self) -> u32 {
        self.child.id()
    }

    /// Whether the process is still running.
    pub fn is_running(&mut self) -> bool {
        matches!(self.child.try_wait(), Ok(None))
    }

    /// Its stderr and log file, for an error message.
    pub fn logs(&self) -> String {
        let read = |name: &str| std::fs::read_to_string(self.dir.join(name)).unwrap_or_default();
        format!("{}{}", read("mosquitto.stderr"), read("mosquitto.log"))
    }
}

impl Drop for MosquittoProcess {
    fn drop(&mut self) {
        let _ = self.child.kill();
        let _ = self.child.wait();
    }
}
