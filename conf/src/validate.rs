//! The rules a well-typed configuration must also follow: limits above zero, durations between
//! zero and a day, connectors that can all be bound, virtual topic patterns and prefixes that
//! name destinations.
//!
//! The rules run on the [`Config`] itself, not on the file, so they hold for configurations
//! changed on the command line too. Each broken rule names the key (as written in the file) that
//! should change; [`Config::parse`] turns that key into a line.

use std::time::Duration;

use crate::Config;

/// Durations above this are refused: no timeout or interval in ferromq is meant to be longer,
/// and a larger number is almost certainly a unit mistake (seconds written as milliseconds...).
pub const MAX_DURATION: Duration = Duration::from_secs(24 * 60 * 60);

/// Bounds of `transport.heart_beat_grace_multiplier`: below 1 a client sending exactly on time
/// would be disconnected; above 10 a dead client lingers for ten intervals.
pub const HEART_BEAT_GRACE_RANGE: std::ops::RangeInclusive<f64> = 1.0..=10.0;

/// A broken rule: the key to change, and why.
#[derive(Debug, Clone, PartialEq)]
pub(crate) struct Invalid {
    /// Path of the key to blame.
    pub key: String,
    /// Another key involved, blamed instead when `key` is not in the file (it took its default,
    /// so the operator can only have changed this one).
    pub or_else: Option<String>,
    pub reason: String,
}

impl Invalid {
    pub(crate) fn new(key: impl Into<String>, reason: impl Into<String>) -> Self {
        Invalid { key: key.into(), or_else: None, reason: reason.into() }
    }

    pub(crate) fn or_else(mut self, key: impl Into<String>) -> Self {
        self.or_else = Some(key.into());
        self
    }
}

fn at_least_one(key: &str, value: u64) -> Result<(), Invalid> {
    if value == 0 {
        return Err(Invalid::new(key, "must be at least 1"));
    }
    Ok(())
}

pub(crate) fn duration(key: &str, value: Duration, may_be_zero: bool) -> Result<(), Invalid> {
    if value.is_zero() && !may_be_zero {
        return Err(Invalid::new(key, "must be at least 1 millisecond"));
    }
    if value > MAX_DURATION {
        return Err(Invalid::new(
            key,
            format!(
                "{} ms is more than a day (at most {} ms)",
                value.as_millis(),
                MAX_DURATION.as_millis()
            ),
        ));
    }
    Ok(())
}

/// `usize` to `u64` for [`at_least_one`]; lossless on every platform Rust supports.
fn count(value: usize) -> u64 {
    u64::try_from(value).unwrap_or(u64::MAX)
}

/// A virtual topic's `name`: a destination name or pattern, `>` only as its whole last level.
fn topic_pattern(name: &str) -> Result<(), String> {
    if name.trim().is_empty() {
        return Err(
            "must not be empty (a topic name or pattern, e.g. \"VirtualTopic.>\")".to_owned()
        );
    }
    if name.split('.').any(str::is_empty) {
        return Err(format!(
            "`{name}` has an empty level: levels are separated by single dots, e.g. \"VirtualTopic.>\""
        ));
    }
    let levels: Vec<&str> = name.split('.').collect();
    let last = levels.len() - 1;
    let misplaced = levels
        .iter()
        .enumerate()
        .any(|(index, level)| level.contains('>') && (*level != ">" || index != last));
    if misplaced {
        return Err(format!(
            "`{name}`: `>` matches all the remaining levels, so it may only be the whole last level, \
             e.g. \"VirtualTopic.>\""
        ));
    }
    Ok(())
}

/// A policy's destination name or pattern: no empty level, `>` only as the whole last level.
pub(crate) fn destination_pattern(name: &str) -> Result<(), String> {
    if name.trim().is_empty() {
        return Err("must not be empty (a name or pattern, e.g. \"ORDERS.>\" or \">\")".to_owned());
    }
    let levels: Vec<&str> = name.split('.').collect();
    if levels.iter().any(|level| level.is_empty()) {
        return Err(format!("`{name}` has an empty level: levels are separated by single dots"));
    }
    let last = levels.len() - 1;
    let misplaced = levels
        .iter()
        .enumerate()
        .any(|(index, level)| level.contains('>') && (*level != ">" || index != last));
    if misplaced {
        return Err(format!(
            "`{name}`: `>` matches all the remaining levels, so it may only be the whole last level"
        ));
    }
    Ok(())
}

/// A virtual topic's `prefix`: levels ending with a dot, since the topic name follows it.
fn consumer_prefix(prefix: &str) -> Result<(), String> {
    if prefix.trim().is_empty() {
        return Err("must not be empty (ActiveMQ's default is \"Consumer.*.\")".to_owned());
    }
    if prefix.contains('>') {
        return Err(format!(
            "`{prefix}` must not contain `>`: the topic name follows the prefix, so no level of it \
             can match all the remaining ones"
        ));
    }
    let Some(levels) = prefix.strip_suffix('.') else {
        return Err(format!(
            "`{prefix}` must end with `.`, which separates it from the topic name, e.g. \"Consumer.*.\""
        ));
    };
    if levels.split('.').any(str::is_empty) {
        return Err(format!(
            "`{prefix}` has an empty level: levels are separated by single dots, e.g. \"Consumer.*.\""
        ));
    }
    Ok(())
}

/// A memory limit: at least 64 KiB, so that a queue keeps a useful window of messages.
pub(crate) fn memory_limit(key: &str, bytes: u64) -> Result<(), Invalid> {
    const MIN_MEMORY: u64 = 64 << 10;
    if bytes < MIN_MEMORY {
        return Err(Invalid::new(key, format!("{bytes} bytes is less than {MIN_MEMORY} (64 KiB)")));
    }
    Ok(())
}

impl Config {
    /// Checks every rule; the first broken one is returned.
    pub(crate) fn check(&self) -> Result<(), Invalid> {
        let broker = &self.broker;
        if broker.name.trim().is_empty() {
            return Err(Invalid::new("broker.name", "must not be empty"));
        }
        if broker.name.chars().any(char::is_control) {
            return Err(Invalid::new("broker.name", "must not contain control characters"));
        }
        if broker.data_dir.as_os_str().is_empty() {
            return Err(Invalid::new(
                "broker.data_dir",
                "must not be empty (use \".\" for the working directory)",
            ));
        }
        duration("broker.shutdown_timeout_ms", broker.shutdown_timeout, true)?;
        duration("broker.lock_retry_ms", broker.lock_retry, false)?;
        memory_limit("broker.memory_limit", broker.memory_limit)?;
        const MIN_TEMP: u64 = 16 << 20;
        if broker.temp_limit != 0 && broker.temp_limit < MIN_TEMP {
            return Err(Invalid::new(
                "broker.temp_limit",
                format!(
                    "{} bytes is less than {MIN_TEMP} (16 MiB, four temporary store data files); \
                     use 0 for no limit",
                    broker.temp_limit
                ),
            ));
        }

        self.check_transport()?;

        self.check_store()?;

        if self.destinations.max_destinations < -1 {
            return Err(Invalid::new(
                "destinations.max_destinations",
                "must be -1 (no limit) or more",
            ));
        }
        at_least_one("destinations.queue_prefetch", u64::from(self.destinations.queue_prefetch))?;
        duration(
            "destinations.expire_messages_period_ms",
            self.destinations.expire_messages_period,
            true,
        )?;
        memory_limit("destinations.memory_limit", self.destinations.memory_limit)?;
        self.dead_letter.check("dead_letter")?;
        self.admin.check("admin")?;
        self.tls.check("tls")?;
        if self.admin.enabled && self.admin.tls {
            self.tls.check_for_connector("admin (tls = true)", false)?;
        }
        self.authentication.check("authentication", &self.users)?;
        if self.admin.enabled && self.authentication.enabled && self.admin.groups.is_empty() {
            return Err(Invalid::new(
                "admin.groups",
                "is empty, so nobody could read the admin endpoint with [authentication] \
                 enabled: name a group of [[users]] (e.g. [\"admins\"]), or set [admin] \
                 enabled = false",
            ));
        }
        for (index, entry) in self.authorization.iter().enumerate() {
            let key = format!("authorization[{index}]");
            entry.check(&key).map_err(|invalid| invalid.or_else(&key))?;
        }

        self.check_virtual_topics()?;
        crate::composite::check(&self.composite_destinations, "composite_destinations")?;
        for (index, policy) in self.policies.iter().enumerate() {
            let entry = format!("policies[{index}]");
            policy.check(&entry).map_err(|invalid| invalid.or_else(&entry))?;
        }
        Ok(())
    }

    fn check_store(&self) -> Result<(), Invalid> {
        let store = &self.store;
        let schemes = ["sqlite://", "postgres://", "postgresql://"];
        if !schemes.iter().any(|scheme| store.url.starts_with(scheme)) {
            return Err(Invalid::new(
                "store.url",
                "expected sqlite://PATH or postgres://user:password@host:port/database".to_string(),
            ));
        }
        duration("store.sync_interval_ms", store.sync_interval, false)?;
        duration("store.lease_ms", store.lease, false)?;
        duration("store.lease_renew_ms", store.lease_renew, false)?;
        const MIN_LEASE: Duration = Duration::from_millis(300);
        if store.lease < MIN_LEASE {
            return Err(Invalid::new(
                "store.lease_ms",
                format!("{} ms is less than {} ms", store.lease.as_millis(), MIN_LEASE.as_millis()),
            ));
        }
        // Two renewals fit before the broker fences itself (at three quarters of a lease).
        if store.lease_renew * 3 > store.lease {
            return Err(Invalid::new(
                "store.lease_renew_ms",
                format!(
                    "{} ms is more than a third of store.lease_ms ({} ms): a failed renewal could \
                     not be retried before the broker must stop serving; renew more often or \
                     lengthen the lease",
                    store.lease_renew.as_millis(),
                    store.lease.as_millis()
                ),
            ));
        }
        const MIN_SEGMENT: u64 = 1 << 20;
        const MAX_SEGMENT: u64 = 1 << 30;
        if !(MIN_SEGMENT..=MAX_SEGMENT).contains(&store.segment_size) {
            return Err(Invalid::new(
                "store.segment_size",
                format!(
                    "{} bytes is outside {MIN_SEGMENT} (1 MiB) to {MAX_SEGMENT} (1 GiB)",
                    store.segment_size
                ),
            ));
        }
        at_least_one("store.checkpoint_bytes", store.checkpoint_bytes)?;
        duration("store.checkpoint_interval_ms", store.checkpoint_interval, false)?;
        if !(store.compaction_threshold > 0.0 && store.compaction_threshold < 1.0) {
            return Err(Invalid::new(
                "store.compaction_threshold",
                format!("{} is not between 0 and 1 (exclusive)", store.compaction_threshold),
            ));
        }
        if store.max_size != 0 && store.max_size < 4 * store.segment_size {
            return Err(Invalid::new(
                "store.max_size",
                format!(
                    "{} bytes is less than four data files ({} bytes); use 0 for no limit",
                    store.max_size,
                    4 * store.segment_size
                ),
            ));
        }
        Ok(())
    }

    fn check_virtual_topics(&self) -> Result<(), Invalid> {
        for (index, topic) in self.virtual_topics.iter().enumerate() {
            let entry = format!("virtual_topics[{index}]");
            topic_pattern(&topic.name)
                .map_err(|reason| Invalid::new(format!("{entry}.name"), reason).or_else(&entry))?;
            consumer_prefix(&topic.prefix).map_err(|reason| {
                Invalid::new(format!("{entry}.prefix"), reason).or_else(&entry)
            })?;
        }
        Ok(())
    }

    fn check_transport(&self) -> Result<(), Invalid> {
        let transport = &self.transport;
        at_least_one("transport.max_connections", count(transport.max_connections))?;
        duration("transport.connect_timeout_ms", transport.connect_timeout, false)?;
        at_least_one("transport.max_frame_size", count(transport.max_frame_size))?;
        at_least_one("transport.max_headers", count(transport.max_headers))?;
        at_least_one("transport.max_header_length", count(transport.max_header_length))?;
        if transport.max_header_length > transport.max_frame_size {
            return Err(Invalid::new(
                "transport.max_header_length",
                format!(
                    "max_header_length ({}) is larger than max_frame_size ({}); no frame could carry such a header",
                    transport.max_header_length, transport.max_frame_size
                ),
            )
            .or_else("transport.max_frame_size"));
        }
        let grace = transport.heart_beat_grace;
        if !HEART_BEAT_GRACE_RANGE.contains(&grace) {
            return Err(Invalid::new(
                "transport.heart_beat_grace_multiplier",
                format!(
                    "{grace} is outside {}..={}: the multiplier applies to the negotiated heart-beat interval",
                    HEART_BEAT_GRACE_RANGE.start(),
                    HEART_BEAT_GRACE_RANGE.end()
                ),
            ));
        }

        if transport.connectors.is_empty() {
            return Err(Invalid::new(
                "transport.connectors",
                "at least one connector is needed, or no client could connect (e.g. [\"stomp://127.0.0.1:61613\"])",
            ));
        }
        for (index, connector) in transport.connectors.iter().enumerate() {
            let key = format!("transport.connectors[{index}]");
            if connector.options.maximum_connections == Some(0) {
                return Err(Invalid::new(key, "maximumConnections must be at least 1"));
            }
            if let Some(size) = connector.options.max_frame_size {
                if size < transport.max_header_length {
                    return Err(Invalid::new(
                        key,
                        format!(
                            "wireFormat.maxFrameSize ({size}) is smaller than transport.max_header_length ({})",
                            transport.max_header_length
                        ),
                    ));
                }
            }
            if connector.scheme.uses_tls() {
                let options = &connector.options;
                let client_certificates = options.need_client_auth == Some(true)
                    || options.want_client_auth == Some(true);
                self.tls
                    .check_for_connector(&format!("{key} ({connector})"), client_certificates)?;
            }
            // Port 0 binds a fresh ephemeral port each time, so any number of those may coexist.
            let clash = transport.connectors[..index].iter().position(|earlier| {
                connector.port != 0
                    && earlier.port == connector.port
                    && earlier.host.eq_ignore_ascii_case(&connector.host)
            });
            if let Some(earlier) = clash {
                return Err(Invalid::new(
                    key,
                    format!(
                        "{} listens on the same address as transport.connectors[{earlier}]",
                        connector.address()
                    ),
                ));
            }
        }
        Ok(())
    }
}
