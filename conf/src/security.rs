//! `[authentication]` and `[[users]]`: who may connect, as ActiveMQ's
//! `simpleAuthenticationPlugin` (users with passwords and groups, and an anonymous-access
//! switch), except that passwords are stored as salted Argon2id hashes, never in clear:
//! `ferromq passwd` makes one.
//!
//! ```
//! let config = conf::Config::parse(r#"
//! [authentication]
//! enabled = true
//!
//! [[users]]
//! name = "orders-service"
//! password = "$argon2id$v=19$m=19456,t=2,p=1$c2FsdHNhbHRzYWx0$2kG7mD7H8yJcZq9l4nQ0YQyq9Bz8m3sYwH1o3n0XrWw"
//! groups = ["users", "orders"]
//! "#, "ferromq.toml")?;
//! assert!(config.authentication.enabled);
//! assert_eq!(config.users[0].groups, ["users", "orders"]);
//! # Ok::<(), conf::ConfigError>(())
//! ```

use std::time::Duration;

use serde::{Deserialize, Serialize};

use crate::number;
use crate::validate::Invalid;

/// `[authentication]`: whether clients must log in, and how failed logins are limited.
#[derive(Debug, Clone, PartialEq, Eq, Serialize, Deserialize)]
#[serde(default, deny_unknown_fields)]
pub struct AuthenticationConfig {
    /// Check every client's user name and password (OpenWire `ConnectionInfo`, STOMP
    /// `login`/`passcode`, AMQP SASL PLAIN) against `[[users]]`. Default false: every client
    /// gets in, as with ActiveMQ without an authentication plugin.
    pub enabled: bool,
    /// Let clients without credentials in, as [`anonymous_user`](Self::anonymous_user) in
    /// [`anonymous_groups`](Self::anonymous_groups) (ActiveMQ's `anonymousAccessAllowed`).
    /// Default false. Wrong credentials are refused either way.
    pub anonymous_access: bool,
    /// The user name anonymous clients get. Default `"anonymous"`, as ActiveMQ.
    pub anonymous_user: String,
    /// The groups anonymous clients are in. Default `["anonymous"]`, as ActiveMQ.
    pub anonymous_groups: Vec<String>,
    /// Failed logins of one user name from one address within
    /// [`failure_window`](Self::failure_window) after which that user is refused from that
    /// address at once, without its credentials being checked, until the window has passed.
    /// Other users from the same address (clients behind one NAT) are not affected. Default 5.
    #[serde(deserialize_with = "number::whole")]
    pub max_failures: usize,
    /// Failed logins from one address, whatever the user names, within the window after
    /// which every login from that address is refused at once: the ceiling for a client that
    /// tries many names. Default 50; at least `max_failures`.
    #[serde(deserialize_with = "number::whole")]
    pub max_failures_per_address: usize,
    /// Key `failure_window_ms`, default 60 000.
    #[serde(rename = "failure_window_ms", with = "number::millis")]
    pub failure_window: Duration,
}

impl Default for AuthenticationConfig {
    fn default() -> Self {
        AuthenticationConfig {
            enabled: false,
            anonymous_access: false,
            anonymous_user: "anonymous".to_owned(),
            anonymous_groups: vec!["anonymous".to_owned()],
            max_failures: 5,
            max_failures_per_address: 50,
            failure_window: Duration::from_millis(60_000),
        }
    }
}

/// One `[[users]]` entry.
#[derive(Debug, Clone, PartialEq, Eq, Serialize, Deserialize)]
#[serde(deny_unknown_fields)]
pub struct UserEntry {
    /// The user name clients give.
    pub name: String,
    /// The password as a PHC string of an Argon2 hash (`$argon2id$v=19$m=...,t=...,p=...$salt$hash`),
    /// made by `ferromq passwd`. Checked in full when the broker starts.
    pub password: String,
    /// The groups the user is in, which authorization entries name. Default none.
    #[serde(default)]
    pub groups: Vec<String>,
}

impl AuthenticationConfig {
    /// Checks the section together with the users; `section` is its key path.
    pub(crate) fn check(&self, section: &str, users: &[UserEntry]) -> Result<(), Invalid> {
        if self.enabled && users.is_empty() && !self.anonymous_access {
            return Err(Invalid::new(
                format!("{section}.enabled"),
                "authentication is on, but there are no [[users]] and anonymous_access is off: \
                 no client could connect",
            ));
        }
        if self.anonymous_user.trim().is_empty() {
            return Err(Invalid::new(format!("{section}.anonymous_user"), "must not be empty"));
        }
        if self.max_failures == 0 {
            return Err(Invalid::new(format!("{section}.max_failures"), "must be at least 1"));
        }
        if self.max_failures_per_address < self.max_failures {
            return Err(Invalid::new(
                format!("{section}.max_failures_per_address"),
                format!(
                    "must be at least max_failures ({}): an address may fail at least as often \
                     as one user of it",
                    self.max_failures
                ),
            ));
        }
        if self.failure_window.is_zero() {
            return Err(Invalid::new(
                format!("{section}.failure_window_ms"),
                "must be more than 0",
            ));
        }
        for (index, user) in users.iter().enumerate() {
            let entry = format!("users[{index}]");
            if user.name.trim().is_empty() {
                return Err(Invalid::new(format!("{entry}.name"), "must not be empty"));
            }
            if users[..index].iter().any(|earlier| earlier.name == user.name) {
                return Err(Invalid::new(
                    format!("{entry}.name"),
                    format!("user `{}` is defined twice", user.name),
                ));
            }
            if !user.password.starts_with("$argon2") {
                return Err(Invalid::new(
                    format!("{entry}.password"),
                    "expected an Argon2 hash ($argon2id$...), never a password in clear: make \
                     one with `ferromq passwd`",
                ));
            }
            if user.groups.iter().any(|group| group.trim().is_empty()) {
                return Err(Invalid::new(format!("{entry}.groups"), "a group name is empty"));
            }
        }
        Ok(())
    }
}

/// One `[[authorization]]` entry, as ActiveMQ's `<authorizationEntry>`: the groups that may
/// read (consume, browse), write (send) and administer (create) the destinations it names.
///
/// Once any entry exists, every operation is checked: a destination's rights are the union
/// of every entry that matches it, and a destination no entry matches may not be used at
/// all. The ActiveMQ JMS client subscribes to advisory topics, so configurations give
/// `topic = "ActiveMQ.Advisory.>"` to every group, as ActiveMQ's users do.
#[derive(Debug, Clone, Default, PartialEq, Eq, Serialize, Deserialize)]
#[serde(default, deny_unknown_fields)]
pub struct AuthorizationEntry {
    /// The queues this entry covers: a name or pattern (`">"` for all).
    #[serde(skip_serializing_if = "Option::is_none")]
    pub queue: Option<String>,
    /// The topics this entry covers: a name or pattern.
    #[serde(skip_serializing_if = "Option::is_none")]
    pub topic: Option<String>,
    /// Covers every temporary queue and topic (ActiveMQ's
    /// `<tempDestinationAuthorizationEntry>`): `admin` creates them.
    #[serde(skip_serializing_if = "std::ops::Not::not")]
    pub temp: bool,
    /// Groups that may consume from or browse the destinations.
    pub read: Vec<String>,
    /// Groups that may send to them.
    pub write: Vec<String>,
    /// Groups that may create them (a destination is created by its first use).
    pub admin: Vec<String>,
}

impl AuthorizationEntry {
    /// Checks one entry; `entry` is its key path.
    pub(crate) fn check(&self, entry: &str) -> Result<(), Invalid> {
        let named = [self.queue.is_some(), self.topic.is_some(), self.temp];
        if named.iter().filter(|named| **named).count() != 1 {
            return Err(Invalid::new(
                entry.to_owned(),
                "needs exactly one of `queue = \"PATTERN\"`, `topic = \"PATTERN\"` or \
                 `temp = true`",
            ));
        }
        for (key, pattern) in [("queue", &self.queue), ("topic", &self.topic)] {
            if let Some(pattern) = pattern {
                crate::validate::destination_pattern(pattern)
                    .map_err(|reason| Invalid::new(format!("{entry}.{key}"), reason))?;
            }
        }
        for (key, groups) in [("read", &self.read), ("write", &self.write), ("admin", &self.admin)]
        {
            if groups.iter().any(|group| group.trim().is_empty()) {
                return Err(Invalid::new(format!("{entry}.{key}"), "a group name is empty"));
            }
        }
        Ok(())
    }
}
