//! `[admin]`: the admin endpoint, an HTTP server with the broker's statistics as JSON
//! (`/api/...`) and as Prometheus metrics (`/metrics`), which `ferromq dstat` reads. Like
//! ActiveMQ's web console it listens on port 8161 of this host only, by default.

use serde::{Deserialize, Serialize};

use crate::validate::Invalid;

/// `[admin]`: whether the admin endpoint runs and where it listens.
#[derive(Debug, Clone, PartialEq, Serialize, Deserialize)]
#[serde(default, deny_unknown_fields)]
pub struct AdminConfig {
    /// Serve the admin endpoint. Default true.
    pub enabled: bool,
    /// Where it listens, as `host:port` (`[::1]:8161` for IPv6); port 0 picks a free port.
    /// Default `"127.0.0.1:8161"`, ActiveMQ's web console port. Without `[authentication]`
    /// anyone who reaches it reads the statistics: keep it on a loopback address then.
    pub bind: String,
    /// Serve HTTPS with `[tls]`'s certificate and key instead of HTTP (`ferromq dstat --url
    /// https://...`). Default false.
    pub tls: bool,
    /// With `[authentication] enabled`, every request but `GET /api/status` (the role, for
    /// health checks and a standby's supervisor) needs HTTP Basic credentials of a
    /// `[[users]]` entry in one of these groups (ActiveMQ's web console admits its `admins`).
    /// Default `["admins"]`.
    pub groups: Vec<String>,
}

impl AdminConfig {
    /// ActiveMQ's web console address.
    pub const DEFAULT_BIND: &'static str = "127.0.0.1:8161";

    /// Checks the address; `section` is the key path of this table.
    pub(crate) fn check(&self, section: &str) -> Result<(), Invalid> {
        let invalid = |reason: String| Invalid::new(format!("{section}.bind"), reason);
        let Some((host, port)) = self.bind.rsplit_once(':') else {
            return Err(invalid(format!(
                "`{}` has no port: write host:port, e.g. \"{}\"",
                self.bind,
                Self::DEFAULT_BIND
            )));
        };
        if host.is_empty() {
            return Err(invalid(format!(
                "`{}` has no host: write host:port, e.g. \"{}\" (\"0.0.0.0:8161\" for every \
                 interface)",
                self.bind,
                Self::DEFAULT_BIND
            )));
        }
        if port.parse::<u16>().is_err() {
            return Err(invalid(format!("`{port}` in `{}` is not a port (0 to 65535)", self.bind)));
        }
        Ok(())
    }
}

impl Default for AdminConfig {
    fn default() -> Self {
        AdminConfig {
            enabled: true,
            bind: Self::DEFAULT_BIND.to_owned(),
            tls: false,
            groups: vec!["admins".to_owned()],
        }
    }
}
