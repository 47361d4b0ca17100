//! Who a connection is and what it may do: authentication against `[[users]]` (ActiveMQ's
//! `simpleAuthenticationPlugin`, with Argon2 password hashes) and authorization against
//! `[[authorization]]` (ActiveMQ's `authorizationMap`), shared by every protocol adapter,
//! which hands over the credentials its protocol carries and asks before each read, write and
//! creation, answering refusals with its protocol's own error.
//!
//! Checking an Argon2 hash costs tens of milliseconds of CPU by design, so it runs on the
//! blocking pool, never on a connection's task; a password once checked for a user is
//! remembered as an HMAC under a key made at start, so that a reconnect storm of the same
//! service accounts costs microseconds each. Failed logins are counted per source address:
//! past `max_failures` within the window, the address is refused at once, without the cost
//! of a hash.

use std::collections::HashMap;
use std::future::Future;
use std::net::{IpAddr, SocketAddr};
use std::pin::Pin;
use std::sync::Arc;
use std::time::{Duration, Instant};

use argon2::password_hash::{PasswordHash, PasswordHashString, PasswordVerifier};
use argon2::Argon2;
use hmac::{Hmac, KeyInit, Mac};
use parking_lot::Mutex;
use sha2::Sha256;
use store::{Destination, DestinationKind};

use crate::core::composite_parts;
use crate::core::wildcard::DestinationFilter;

/// An authenticated identity: the user name and the groups authorization works with.
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct Subject {
    pub user: Arc<str>,
    pub groups: Arc<[Arc<str>]>,
}

/// Why a login was refused. The messages are what clients see: they never say whether the
/// user exists.
#[derive(Debug, Clone, thiserror::Error)]
#[non_exhaustive]
pub enum AuthError {
    /// Unknown user or wrong password (ActiveMQ's words).
    #[error("User name [{user}] or password is invalid.")]
    Invalid { user: String },
    /// No credentials, and anonymous access is off.
    #[error("anonymous access is not allowed: give a user name and password")]
    AnonymousRefused,
    /// This address failed too often lately.
    #[error("too many failed logins from this address; try again in {retry_after_secs} s")]
    TooManyFailures { retry_after_secs: u64 },
}

/// A `[[users]]` entry the broker cannot use.
#[derive(Debug, thiserror::Error)]
#[error("`users[{index}].password` of user `{user}` is not a valid Argon2 hash ({reason}); make one with `ferromq passwd`")]
pub struct SecuritySetupError {
    index: usize,
    user: String,
    reason: String,
}

/// A login being checked, as the adapters hold it while they stop reading.
pub type Authentication = Pin<Box<dyn Future<Output = Result<Subject, AuthError>> + Send>>;

struct User {
    hash: PasswordHashString,
    groups: Arc<[Arc<str>]>,
}

/// Checks credentials; one per broker, shared by every connection.
pub struct Authenticator {
    enabled: bool,
    /// Who clients without credentials are, when they may connect.
    anonymous: Option<Subject>,
    users: HashMap<String, User>,
    /// Checked for unknown users, so that refusing them takes as long as a wrong password;
    /// made on first need (a hash costs as much as a check).
    decoy: std::sync::OnceLock<PasswordHashString>,
    /// Key of the remembered passwords' HMACs; made at start, never stored.
    cache_key: [u8; 32],
    /// Per user, the HMAC of the last password that checked out.
    verified: Mutex<HashMap<String, Vec<u8>>>,
    failures: Mutex<FailureCounts>,
}

impl Authenticator {
    /// The authenticator `[authentication]` and `[[users]]` describe.
    pub fn new(config: &conf::Config) -> Result<Authenticator, SecuritySetupError> {
        let settings = &config.authentication;
        let mut users = HashMap::new();
        for (index, entry) in config.users.iter().enumerate() {
            let invalid =
                |reason: String| SecuritySetupError { index, user: entry.name.clone(), reason };
            let hash = PasswordHashString::new(&entry.password)
                .map_err(|error| invalid(error.to_string()))?;
            let parsed = hash.password_hash();
            if parsed.salt.is_none() || parsed.hash.is_none() {
                return Err(invalid("it has no salt or no hash".to_owned()));
            }
            argon2::Algorithm::try_from(parsed.algorithm)
                .and_then(|_| argon2::Params::try_from(&parsed))
                .map_err(|error| invalid(error.to_string()))?;
            let groups = entry.groups.iter().map(|group| Arc::from(group.as_str())).collect();
            users.insert(entry.name.clone(), User { hash, groups });
        }
        let anonymous = settings.anonymous_access.then(|| Subject {
            user: Arc::from(settings.anonymous_user.as_str()),
            groups: settings.anonymous_groups.iter().map(|g| Arc::from(g.as_str())).collect(),
        });
        Ok(Authenticator {
            enabled: settings.enabled,
            anonymous,
            users,
            decoy: std::sync::OnceLock::new(),
            cache_key: rand::random(),
            verified: Mutex::new(HashMap::new()),
            failures: Mutex::new(FailureCounts::new(
                settings.max_failures,
                settings.failure_window,
            )),
        })
    }

    /// Whether credentials are checked at all.
    pub fn enabled(&self) -> bool {
        self.enabled
    }

    /// Whether a client without credentials gets in.
    pub fn admits_anonymous(&self) -> bool {
        !self.enabled || self.anonymous.is_some()
    }

    /// Checks `user` and `password` from `peer` (`ip:port`, or a name for in-process
    /// connections, which are not rate-limited). Logs refusals, never the password.
    pub fn authenticate(
        self: &Arc<Self>,
        peer: &str,
        user: Option<&str>,
        password: Option<&str>,
    ) -> Authentication {
        let this = Arc::clone(self);
        let peer_text = peer.to_owned();
        let address = peer.parse::<SocketAddr>().ok().map(|address| address.ip());
        let user = user.filter(|user| !user.is_empty()).map(str::to_owned);
        let password = password.unwrap_or("").to_owned();
        Box::pin(async move {
            let result = this.check(address, user.as_deref(), password).await;
            match &result {
                Ok(subject) => {
                    tracing::debug!(peer = %peer_text, user = %subject.user, "authenticated")
                }
                Err(error) => {
                    tracing::warn!(peer = %peer_text, user = user.as_deref().unwrap_or(""), %error, "login refused")
                }
            }
            result
        })
    }

    async fn check(
        &self,
        address: Option<IpAddr>,
        user: Option<&str>,
        password: String,
    ) -> Result<Subject, AuthError> {
        if !self.enabled {
            return Ok(Subject {
                user: Arc::from(user.unwrap_or("anonymous")),
                groups: Arc::from([]),
            });
        }
        if let Some(address) = address {
            if let Some(wait) = self.failures.lock().blocked(address, Instant::now()) {
                return Err(AuthError::TooManyFailures { retry_after_secs: wait.as_secs().max(1) });
            }
        }
        let result = match user {
            None => match (&self.anonymous, password.is_empty()) {
                (Some(anonymous), true) => Ok(anonymous.clone()),
                _ => Err(AuthError::AnonymousRefused),
            },
            Some(user) => self.check_password(user, password).await,
        };
        if let (Err(_), Some(address)) = (&result, address) {
            self.failures.lock().failed(address, Instant::now());
        }
        result
    }

    async fn check_password(&self, user: &str, password: String) -> Result<Subject, AuthError> {
        let invalid = || AuthError::Invalid { user: user.to_owned() };
        let known = self.users.get(user);
        let fingerprint = self.fingerprint(&password);
        if let Some(entry) = known {
            let remembered = self.verified.lock().get(user).cloned();
            if remembered.is_some_and(|remembered| remembered == fingerprint) {
                return Ok(Subject { user: Arc::from(user), groups: entry.groups.clone() });
            }
        }
        let hash = match known {
            Some(entry) => entry.hash.clone(),
            None => self.decoy.get_or_init(decoy_hash).clone(),
        };
        let matches = tokio::task::spawn_blocking(move || {
            let hash: PasswordHash<'_> = hash.password_hash();
            Argon2::default().verify_password(password.as_bytes(), &hash).is_ok()
        })
        .await
        .unwrap_or(false);
        match (known, matches) {
            (Some(entry), true) => {
                self.verified.lock().insert(user.to_owned(), fingerprint);
                Ok(Subject { user: Arc::from(user), groups: entry.groups.clone() })
            }
            _ => Err(invalid()),
        }
    }

    fn fingerprint(&self, password: &str) -> Vec<u8> {
        let mut mac = <Hmac<Sha256> as KeyInit>::new_from_slice(&self.cache_key)
            .unwrap_or_else(|_| unreachable!("HMAC takes keys of any length"));
        mac.update(password.as_bytes());
        mac.finalize().into_bytes().to_vec()
    }
}

/// Hashes `password` for a `[[users]]` entry with Argon2id's recommended parameters
/// (19 MiB, 2 passes) and a random salt (`ferromq passwd`).
pub fn hash_password(password: &str) -> Result<String, String> {
    use argon2::password_hash::{rand_core::OsRng, PasswordHasher, SaltString};
    let salt = SaltString::generate(&mut OsRng);
    Argon2::default()
        .hash_password(password.as_bytes(), &salt)
        .map(|hash| hash.to_string())
        .map_err(|error| error.to_string())
}

/// A hash of nothing anyone knows, with the default parameters, to check unknown users
/// against.
fn decoy_hash() -> PasswordHashString {
    let decoy: [u8; 16] = rand::random();
    hash_password(&format!("{decoy:?}"))
        .ok()
        .and_then(|hash| PasswordHashString::new(&hash).ok())
        .unwrap_or_else(|| unreachable!("hashing a fixed-size random text cannot fail"))
}

/// Failed logins per source address within a sliding window.
struct FailureCounts {
    max_failures: usize,
    window: Duration,
    by_address: HashMap<IpAddr, (usize, Instant)>,
}

/// Beyond this many addresses, forgotten ones are swept out before another is added.
const MAX_TRACKED_ADDRESSES: usize = 10_000;

impl FailureCounts {
    fn new(max_failures: usize, window: Duration) -> FailureCounts {
        FailureCounts { max_failures, window, by_address: HashMap::new() }
    }

    /// How long `address` stays refused, if it is.
    fn blocked(&self, address: IpAddr, now: Instant) -> Option<Duration> {
        let (count, since) = self.by_address.get(&address)?;
        let elapsed = now.saturating_duration_since(*since);
        (*count >= self.max_failures && elapsed < self.window).then(|| self.window - elapsed)
    }

    fn failed(&mut self, address: IpAddr, now: Instant) {
        if self.by_address.len() >= MAX_TRACKED_ADDRESSES {
            let window = self.window;
            self.by_address.retain(|_, (_, since)| now.saturating_duration_since(*since) < window);
        }
        let entry = self.by_address.entry(address).or_insert((0, now));
        if now.saturating_duration_since(entry.1) >= self.window {
            *entry = (0, now);
        }
        entry.0 += 1;
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn an_address_is_refused_after_max_failures_until_the_window_passes() {
        let mut counts = FailureCounts::new(3, Duration::from_secs(60));
        let address: IpAddr = [10, 0, 0, 1].into();
        let start = Instant::now();
        for _ in 0..2 {
            counts.failed(address, start);
        }
        assert_eq!(counts.blocked(address, start), None);
        counts.failed(address, start);
        assert_eq!(
            counts.blocked(address, start + Duration::from_secs(10)),
            Some(Duration::from_secs(50))
        );
        assert_eq!(counts.blocked([10, 0, 0, 2].into(), start), None);
        assert_eq!(counts.blocked(address, start + Duration::from_secs(60)), None);
        counts.failed(address, start + Duration::from_secs(61));
        assert_eq!(counts.blocked(address, start + Duration::from_secs(61)), None);
    }
}

/// What a client wants to do with a destination.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub enum Action {
    /// Consume or browse.
    Read,
    /// Send.
    Write,
    /// Create (a destination is created by its first use).
    Admin,
}

/// An operation `[[authorization]]` does not allow, in ActiveMQ's words.
#[derive(Debug, Clone, thiserror::Error)]
#[error("User {user} is not authorized to {verb} {destination}")]
pub struct Denied {
    user: String,
    verb: &'static str,
    destination: String,
}

/// Which destinations an authorization entry covers.
enum Covers {
    Queues(DestinationFilter),
    Topics(DestinationFilter),
    Temporary,
}

struct Rights {
    covers: Covers,
    read: Vec<Arc<str>>,
    write: Vec<Arc<str>>,
    admin: Vec<Arc<str>>,
}

/// Checks operations against `[[authorization]]`; one per broker. Without entries it allows
/// everything and costs nothing.
pub struct Authorizer {
    entries: Vec<Rights>,
}

impl Authorizer {
    /// The authorizer `[[authorization]]` describes.
    pub fn new(config: &conf::Config) -> Authorizer {
        let groups = |names: &[String]| names.iter().map(|name| Arc::from(name.as_str())).collect();
        let entries = config
            .authorization
            .iter()
            .map(|entry| Rights {
                covers: match (&entry.queue, &entry.topic) {
                    (Some(queue), _) => Covers::Queues(DestinationFilter::new(queue)),
                    (None, Some(topic)) => Covers::Topics(DestinationFilter::new(topic)),
                    (None, None) => Covers::Temporary,
                },
                read: groups(&entry.read),
                write: groups(&entry.write),
                admin: groups(&entry.admin),
            })
            .collect();
        Authorizer { entries }
    }

    /// Whether any operation is checked.
    pub fn enabled(&self) -> bool {
        !self.entries.is_empty()
    }

    /// Allows `action` on `destination` to `subject` when a group of it has the right in an
    /// entry that covers the destination. A composite destination (`A,B`, parts possibly
    /// `queue://`/`topic://`) is allowed only when every part is: matched whole, `PUBLIC.>`
    /// would match `PUBLIC.A,SECRET.B` and open every destination to whoever may use one. A
    /// configured composite (`[[composite_destinations]]`) has a plain name and is checked by
    /// it, as ActiveMQ checks a virtual destination.
    pub fn check(
        &self,
        subject: Option<&Subject>,
        action: Action,
        destination: &Destination,
    ) -> Result<(), Denied> {
        if self.entries.is_empty() {
            return Ok(());
        }
        for part in parts_of(destination) {
            self.check_one(subject, action, &part)?;
        }
        Ok(())
    }

    /// [`check`](Self::check) of one destination that is not a composite.
    fn check_one(
        &self,
        subject: Option<&Subject>,
        action: Action,
        destination: &Destination,
    ) -> Result<(), Denied> {
        let allowed = subject.is_some_and(|subject| {
            self.entries.iter().filter(|entry| entry.covers(destination)).any(|entry| {
                let groups = match action {
                    Action::Read => &entry.read,
                    Action::Write => &entry.write,
                    Action::Admin => &entry.admin,
                };
                groups.iter().any(|group| subject.groups.contains(group))
            })
        });
        if allowed {
            return Ok(());
        }
        let denied = Denied {
            user: subject.map_or_else(|| "(not logged in)".to_owned(), |s| s.user.to_string()),
            verb: match action {
                Action::Read => "read from:",
                Action::Write => "write to:",
                Action::Admin => "create:",
            },
            destination: destination.to_string(),
        };
        tracing::warn!(%denied, "operation refused");
        Err(denied)
    }

    /// [`check`](Self::check) for using `destination` with `action`, and for creating it too
    /// when `exists` says it does not exist yet; each part of a composite on its own (one
    /// part may exist and another be created by this use).
    pub fn check_use(
        &self,
        subject: Option<&Subject>,
        action: Action,
        destination: &Destination,
        exists: impl Fn(&Destination) -> bool,
    ) -> Result<(), Denied> {
        if self.entries.is_empty() {
            return Ok(());
        }
        let parts = parts_of(destination);
        for part in &parts {
            self.check_one(subject, action, part)?;
        }
        for part in &parts {
            // A wildcard subscription creates nothing.
            let pattern = DestinationFilter::is_pattern(&part.name);
            if !pattern && !exists(part) {
                self.check_one(subject, Action::Admin, part)?;
            }
        }
        Ok(())
    }
}

/// The destinations to authorize for `destination`: its composite parts, or itself when it
/// names none (`,` alone must not pass as a composite of nothing).
fn parts_of(destination: &Destination) -> Vec<Destination> {
    let parts = composite_parts(destination);
    if parts.is_empty() {
        vec![destination.clone()]
    } else {
        parts
    }
}

impl Rights {
    fn covers(&self, destination: &Destination) -> bool {
        match (&self.covers, destination.kind) {
            (Covers::Queues(filter), DestinationKind::Queue) => filter.matches(&destination.name),
            (Covers::Topics(filter), DestinationKind::Topic) => filter.matches(&destination.name),
            (Covers::Temporary, DestinationKind::TempQueue | DestinationKind::TempTopic) => true,
            _ => false,
        }
    }
}

#[cfg(test)]
mod authorization_tests {
    use super::*;

    fn subject(group: &str) -> Subject {
        Subject { user: Arc::from(group), groups: Arc::from([Arc::from(group)]) }
    }

    /// Admins everything, guests read, write and create `PUBLIC.>` queues and topics.
    fn authorizer() -> Authorizer {
        let mut config = conf::Config::default();
        let entry = |queue: Option<&str>, topic: Option<&str>, groups: &[&str]| {
            let groups: Vec<String> = groups.iter().map(|g| g.to_string()).collect();
            conf::AuthorizationEntry {
                queue: queue.map(str::to_owned),
                topic: topic.map(str::to_owned),
                read: groups.clone(),
                write: groups.clone(),
                admin: groups,
                ..Default::default()
            }
        };
        config.authorization = vec![
            entry(Some(">"), None, &["admins"]),
            entry(None, Some(">"), &["admins"]),
            entry(Some("PUBLIC.>"), None, &["guests"]),
            entry(None, Some("PUBLIC.>"), &["guests"]),
        ];
        Authorizer::new(&config)
    }

    #[test]
    fn every_part_of_a_composite_is_authorized_on_its_own() {
        let authorizer = authorizer();
        let guest = subject("guests");
        let admin = subject("admins");
        let refused = [
            Destination::queue("PUBLIC.A,SECRET.PAYROLL"),
            Destination::queue("SECRET.PAYROLL,PUBLIC.A"),
            Destination::topic("PUBLIC.X,SECRET.T"),
            Destination::queue("PUBLIC.A,topic://SECRET.T"),
            Destination::topic("PUBLIC.X,queue://SECRET.Q"),
            Destination::queue("PUBLIC.A, SECRET.PAYROLL"),
        ];
        for destination in &refused {
            for action in [Action::Read, Action::Write, Action::Admin] {
                let result = authorizer.check(Some(&guest), action, destination);
                assert!(result.is_err(), "{action:?} {destination} allowed to a guest");
                let result = authorizer.check_use(Some(&guest), action, destination, |_| true);
                assert!(result.is_err(), "{action:?} use of {destination} allowed to a guest");
                assert!(authorizer.check(Some(&admin), action, destination).is_ok());
            }
        }
        let allowed = [
            Destination::queue("PUBLIC.A,PUBLIC.B"),
            Destination::queue("PUBLIC.A,topic://PUBLIC.T"),
            Destination::topic("PUBLIC.X,PUBLIC.Y"),
        ];
        for destination in &allowed {
            for action in [Action::Read, Action::Write, Action::Admin] {
                assert!(authorizer.check(Some(&guest), action, destination).is_ok());
            }
        }
        assert!(authorizer.check(Some(&guest), Action::Read, &Destination::queue(",")).is_err());
    }

    #[test]
    fn using_a_composite_creates_only_the_parts_that_do_not_exist() {
        let mut config = conf::Config::default();
        config.authorization = vec![conf::AuthorizationEntry {
            queue: Some(">".to_owned()),
            read: vec!["users".to_owned()],
            write: vec!["users".to_owned()],
            ..Default::default()
        }];
        let authorizer = Authorizer::new(&config);
        let user = subject("users");
        let composite = Destination::queue("OLD,NEW");
        let exists = |d: &Destination| &*d.name == "OLD";
        let denied = authorizer.check_use(Some(&user), Action::Write, &composite, exists);
        let message = denied.err().map(|denied| denied.to_string()).unwrap_or_default();
        assert!(message.contains("create: queue://NEW"), "{message}");
        let both = |d: &Destination| matches!(&*d.name, "OLD" | "NEW");
        assert!(authorizer.check_use(Some(&user), Action::Write, &composite, both).is_ok());
    }
}
