//! ferromq's configuration: the model, its defaults, loading from TOML and validation.
//!
//! This crate owns what an operator can configure and what happens when they get it wrong. Every
//! key has a default, so an empty file (or none) runs a useful broker; every mistake is refused
//! with the file, line, key and reason ([`ConfigError`]), including keys ferromq does not
//! implement yet, which are never silently ignored. It knows nothing of the broker or the stores:
//! they read a [`Config`].
//!
//! # Layout
//!
//! - `lib.rs`: [`Config`], and the pipeline `load` → `parse` → `validate`.
//! - `sections.rs`: the four sections, [`BrokerConfig`], [`TransportConfig`], [`StoreConfig`],
//!   [`DestinationDefaults`], with their defaults, and the `[[virtual_topics]]` entries,
//!   [`VirtualTopicConfig`].
//! - `composite.rs`: the `[[composite_destinations]]` entries, [`CompositeDestinationConfig`]:
//!   configured composite queues and topics.
//! - `dead_letter.rs`: `[dead_letter]`, [`DeadLetterConfig`]: the dead-letter strategy and
//!   the STOMP redelivery limit.
//! - `admin.rs`: `[admin]`, [`AdminConfig`]: the admin endpoint's address.
//! - `security.rs`: `[authentication]`, `[[users]]` and `[[authorization]]`,
//!   [`AuthenticationConfig`], [`UserEntry`] and [`AuthorizationEntry`]: who may connect, and
//!   what each group may do.
//! - `tls.rs`: `[tls]`, [`TlsConfig`]: certificate, key and trust of the TLS connectors.
//! - `uri.rs`: [`ConnectorUri`], ActiveMQ's `scheme://host:port?options` connector syntax.
//! - `validate.rs`: rules beyond types (limits above zero, distinct connector addresses, well-formed
//!   virtual topic patterns...).
//! - `document.rs`: positions in the file, so every error can name a line and a key.
//! - `number.rs`: number and millisecond deserializers with operator-friendly messages.
//! - `error.rs`: [`ConfigError`].
//!
//! # The file
//!
//! TOML, every section and key optional. Durations are whole milliseconds under keys ending in
//! `_ms`. `ferromq.example.toml`, beside this crate's `Cargo.toml`, lists every key with its
//! default. A typical file:
//!
//! ```
//! # use conf::{Config, SyncMode};
//! let text = r#"
//! [broker]
//! name = "orders-1"
//! data_dir = "/var/lib/ferromq"
//!
//! [transport]
//! connectors = [
//!     "stomp://0.0.0.0:61613?maximumConnections=5000",
//!     "stomp+nio://[::1]:61614",
//! ]
//! connect_timeout_ms = 10_000
//!
//! [store]
//! kind = "memory"
//! sync = "periodic"
//! sync_interval_ms = 500
//!
//! [[virtual_topics]]
//! name = "Orders.>"
//! "#;
//! let config = Config::parse(text, "ferromq.toml")?;
//! assert_eq!(config.broker.name, "orders-1");
//! assert_eq!(config.transport.max_connections_for(&config.transport.connectors[0]), 5000);
//! assert_eq!(config.store.sync, SyncMode::Periodic);
//! assert_eq!(config.virtual_topics[0].prefix, "Consumer.*.");
//!
//! let error = Config::parse("[transport]\nmax_connections = 0\n", "ferromq.toml").unwrap_err();
//! assert_eq!(error.to_string(), "ferromq.toml:2: `transport.max_connections`: must be at least 1");
//! # Ok::<(), conf::ConfigError>(())
//! ```
#![cfg_attr(not(test), deny(clippy::unwrap_used))]

mod admin;
mod composite;
mod dead_letter;
mod document;
mod error;
mod number;
mod policy;
mod sections;
mod security;
mod tls;
mod uri;
mod validate;

use std::path::Path;

use serde::{Deserialize, Serialize};

pub use crate::admin::AdminConfig;
pub use crate::composite::{
    CompositeDestinationConfig, DestinationName, DestinationType, ForwardTarget,
};
pub use crate::dead_letter::{DeadLetterConfig, DeadLetterStrategy};
use crate::document::Document;
pub use crate::error::{ConfigError, UNKNOWN_ORIGIN};
pub use crate::policy::{
    DispatchPolicy, MessageGroupMap, PolicyEntry, PolicyTarget, SlowConsumerStrategy,
    SubscriptionRecovery,
};
pub use crate::sections::{
    BrokerConfig, DestinationDefaults, LsmEngine, StoreConfig, StoreKind, SyncMode,
    TransportConfig, VirtualTopicConfig,
};
pub use crate::security::{AuthenticationConfig, AuthorizationEntry, UserEntry};
pub use crate::tls::{TlsConfig, TlsVersion};
pub use crate::uri::{ConnectorOptions, ConnectorUri, Scheme, UriError, WireProtocol};
pub use crate::validate::{HEART_BEAT_GRACE_RANGE, MAX_DURATION};

/// The whole configuration; `Config::default()` is what an empty file gives.
///
/// Serializing it (with `toml::to_string`) writes a file that parses back to the same value.
#[derive(Debug, Clone, PartialEq, Serialize, Deserialize)]
#[serde(default, deny_unknown_fields)]
pub struct Config {
    /// `[broker]`
    pub broker: BrokerConfig,
    /// `[transport]`
    pub transport: TransportConfig,
    /// `[store]`
    pub store: StoreConfig,
    /// `[destinations]`
    pub destinations: DestinationDefaults,
    /// `[dead_letter]`
    pub dead_letter: DeadLetterConfig,
    /// `[admin]`
    pub admin: AdminConfig,
    /// `[tls]`
    pub tls: TlsConfig,
    /// `[authentication]`
    pub authentication: AuthenticationConfig,
    /// `[[users]]`: who may log in when `[authentication] enabled` (see [`UserEntry`]).
    /// Default none.
    pub users: Vec<UserEntry>,
    /// `[[authorization]]`: who may read, write and create which destinations (see
    /// [`AuthorizationEntry`]). Default none: every client that got in may do everything.
    pub authorization: Vec<AuthorizationEntry>,
    /// `[[virtual_topics]]`: which topics are virtual and how their consumer queues are named.
    /// Default: ActiveMQ's one entry, [`VirtualTopicConfig::default()`]
    /// (`name = "VirtualTopic.>"`, `prefix = "Consumer.*."`). Entries in the file replace it;
    /// `virtual_topics = []` turns virtual topics off.
    pub virtual_topics: Vec<VirtualTopicConfig>,
    /// `[[composite_destinations]]`: configured composite queues and topics. Default none.
    pub composite_destinations: Vec<CompositeDestinationConfig>,
    /// `[[policies]]`: per-destination policies (see [`PolicyEntry`]). Default none: every
    /// destination takes the `[destinations]` and `[dead_letter]` defaults.
    pub policies: Vec<PolicyEntry>,
}

impl Default for Config {
    fn default() -> Self {
        Config {
            broker: BrokerConfig::default(),
            transport: TransportConfig::default(),
            store: StoreConfig::default(),
            destinations: DestinationDefaults::default(),
            dead_letter: DeadLetterConfig::default(),
            admin: AdminConfig::default(),
            tls: TlsConfig::default(),
            authentication: AuthenticationConfig::default(),
            users: Vec::new(),
            authorization: Vec::new(),
            virtual_topics: vec![VirtualTopicConfig::default()],
            composite_destinations: Vec::new(),
            policies: Vec::new(),
        }
    }
}

impl Config {
    /// Reads, parses and validates the file at `path`; errors name it as given.
    pub fn load(path: &Path) -> Result<Config, ConfigError> {
        let text =
            std::fs::read_to_string(path).map_err(|error| ConfigError::unreadable(path, error))?;
        Config::parse(&text, &path.display().to_string())
    }

    /// Parses and validates TOML `text`; `origin` is the file name errors carry.
    pub fn parse(text: &str, origin: &str) -> Result<Config, ConfigError> {
        let document = Document::parse(text, origin)?;
        document.check_shape()?;
        let config: Config = toml::from_str(text).map_err(|error| document.serde_error(&error))?;
        config.check().map_err(|invalid| document.invalid(invalid))?;
        Ok(config)
    }

    /// Checks the rules that types alone cannot (see `validate.rs`), e.g. again after
    /// command-line overrides. Errors carry [`UNKNOWN_ORIGIN`] and no line, since the values may
    /// not come from a file; use [`ConfigError::with_origin`] to say where they came from.
    pub fn validate(&self) -> Result<(), ConfigError> {
        self.check()
            .map_err(|invalid| ConfigError::new(UNKNOWN_ORIGIN, None, invalid.key, invalid.reason))
    }

    /// Every warning to log at start: the connector options accepted without effect, each
    /// prefixed with its connector, and connectors reachable from other machines while
    /// anyone may log in.
    pub fn warnings(&self) -> Vec<String> {
        let connectors = self.transport.connectors.iter();
        let mut warnings: Vec<String> = connectors
            .flat_map(|connector| {
                connector
                    .warnings
                    .iter()
                    .map(move |warning| format!("connector {connector}: {warning}"))
            })
            .collect();
        if !self.authentication.enabled {
            for connector in &self.transport.connectors {
                if !is_loopback(&connector.host) {
                    warnings.push(format!(
                        "connector {connector} is reachable from other machines and \
                         [authentication] is off: whoever reaches it can read and write every \
                         destination; set [authentication] enabled = true with [[users]] (see \
                         the README's minimal secure configuration)"
                    ));
                }
            }
        }
        warnings
    }
}

/// Whether `host` only reaches this machine.
fn is_loopback(host: &str) -> bool {
    host.eq_ignore_ascii_case("localhost")
        || host.parse::<std::net::IpAddr>().is_ok_and(|address| address.is_loopback())
}
