//! Who a connection is and what it may do: authentication against `[[users]]` (ActiveMQ's
//! `simpleAuthenticationPlugin`, with Argon2 password hashes) and authorization against
//! `[[authorization]]` (ActiveMQ's `authorizationMap`), shared by every protocol adapter,
//! which hands over the credentials its protocol carries and asks before each read, write and
//! creation, answering refusals with its protocol's own error.
//!
//! Checking an Argon2 hash costs tens of milliseconds of CPU by design, so it runs on the
//! blocking pool, never on a connection's task; a password once checked for a user is
//! remembered as an HMAC under a key made at start, so that a reconnect storm of the same
//! service accounts costs microseconds each. Login attempts are counted per user name and
//! source address, and per address, before the hash is checked (so that logins sent all at
//! once cannot outrun the count): past `max_failures` failures of a user from an address
//! within the window, or `max_failures_per_address` from the address, further attempts are
//! refused at once, without the cost of a hash.

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

mod authorization;

pub use authorization::{Action, Authorizer, Denied};

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
    /// This user failed too often lately from this address, or the address did.
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

/// A connection's login being checked, with the request it answers (`T`: the protocol's
/// CONNECT frame, ConnectionInfo, or nothing for SASL). While one is pending the connection
/// stops reading and decoding, so that nothing pipelined behind a login acts before it is
/// known to be good.
pub(crate) struct PendingLogin<T>(Option<(T, Authentication)>);

impl<T> Default for PendingLogin<T> {
    fn default() -> Self {
        PendingLogin(None)
    }
}

impl<T> PendingLogin<T> {
    pub fn start(&mut self, request: T, check: Authentication) {
        self.0 = Some((request, check));
    }

    pub fn is_pending(&self) -> bool {
        self.0.is_some()
    }

    /// The outcome of the login with its request, once the check is done; never ready
    /// while none is pending.
    pub async fn outcome(&mut self) -> (T, Result<Subject, AuthError>) {
        let Some((_, check)) = self.0.as_mut() else { return std::future::pending().await };
        let outcome = check.await;
        match self.0.take() {
            Some((request, _)) => (request, outcome),
            None => std::future::pending().await,
        }
    }
}

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
                settings.max_failures_per_address,
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
        // Admitted before the expensive check, settled after it (see FailureCounts).
        let admission = match address {
            Some(address) => {
                let admitted =
                    self.failures.lock().admit(address, user.unwrap_or(""), Instant::now());
                match admitted {
                    Ok(admission) => Some(admission),
                    Err(wait) => {
                        let retry_after_secs = wait.as_secs().max(1);
                        return Err(AuthError::TooManyFailures { retry_after_secs });
                    }
                }
            }
            None => None,
        };
        // Settles the admission even if this future is dropped during the check (the client
        // went away): otherwise its attempt would stay pending and refuse the user for good.
        let mut settlement = Settlement { failures: &self.failures, admission, succeeded: false };
        let result = match user {
            None => match (&self.anonymous, password.is_empty()) {
                (Some(anonymous), true) => Ok(anonymous.clone()),
                _ => Err(AuthError::AnonymousRefused),
            },
            Some(user) => self.check_password(user, password).await,
        };
        settlement.succeeded = result.is_ok();
        drop(settlement);
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

/// Settles an admitted login attempt when dropped.
struct Settlement<'a> {
    failures: &'a Mutex<FailureCounts>,
    admission: Option<Admission>,
    succeeded: bool,
}

impl Drop for Settlement<'_> {
    fn drop(&mut self) {
        if let Some(admission) = self.admission.take() {
            self.failures.lock().settle(admission, self.succeeded, Instant::now());
        }
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

/// Login attempts within a window from its first failure: those that failed, and those whose
/// password is being checked right now.
#[derive(Debug, Clone, Copy)]
struct Attempts {
    failed: usize,
    pending: usize,
    since: Instant,
}

impl Attempts {
    fn new(now: Instant) -> Attempts {
        Attempts { failed: 0, pending: 0, since: now }
    }

    /// Forgets the failures of a window that has passed; attempts under way stay counted.
    fn roll(&mut self, window: Duration, now: Instant) {
        if now.saturating_duration_since(self.since) >= window {
            self.failed = 0;
            self.since = now;
        }
    }

    /// How long to refuse a new attempt, when failed and pending ones reach `limit`.
    fn refusal(&self, limit: usize, window: Duration, now: Instant) -> Option<Duration> {
        (self.failed + self.pending >= limit).then(|| {
            // Refused only for attempts still under way: they settle within a second or so.
            let left = window.saturating_sub(now.saturating_duration_since(self.since));
            if self.failed >= limit {
                left
            } else {
                left.min(Duration::from_secs(1))
            }
        })
    }

    fn idle(&self, window: Duration, now: Instant) -> bool {
        self.pending == 0
            && (self.failed == 0 || now.saturating_duration_since(self.since) >= window)
    }
}

/// Failed logins per user name and source address, and per source address, within a window.
///
/// An attempt is admitted (counted as pending) before its password is checked and settled
/// after, so that logins sent all at once cannot all pass the limit while their checks run:
/// at most `max_failures` checks of one user from one address fail in a window, however many
/// arrive together. Counting per user as well as per address keeps one client's mistakes
/// from locking out the other users behind the same NAT; the per-address ceiling stops one
/// address from trying many names.
struct FailureCounts {
    max_per_user: usize,
    max_per_address: usize,
    window: Duration,
    by_user: HashMap<(IpAddr, String), Attempts>,
    by_address: HashMap<IpAddr, Attempts>,
}

/// Beyond this many entries, forgotten ones are swept out before another is added.
const MAX_TRACKED_ADDRESSES: usize = 10_000;

/// An admitted login attempt, to be settled once its password was checked.
#[derive(Debug)]
struct Admission {
    address: IpAddr,
    user: String,
}

impl FailureCounts {
    fn new(max_per_user: usize, max_per_address: usize, window: Duration) -> FailureCounts {
        FailureCounts {
            max_per_user,
            max_per_address,
            window,
            by_user: HashMap::new(),
            by_address: HashMap::new(),
        }
    }

    /// Admits an attempt of `user` (empty: none given) from `address`, or says how long
    /// that user from that address, or the whole address, stays refused.
    fn admit(&mut self, address: IpAddr, user: &str, now: Instant) -> Result<Admission, Duration> {
        let window = self.window;
        if self.by_user.len() >= MAX_TRACKED_ADDRESSES {
            self.by_user.retain(|_, attempts| !attempts.idle(window, now));
        }
        if self.by_address.len() >= MAX_TRACKED_ADDRESSES {
            self.by_address.retain(|_, attempts| !attempts.idle(window, now));
        }
        let key = (address, user.to_owned());
        let mut of_user = self.by_user.get(&key).copied().unwrap_or_else(|| Attempts::new(now));
        let mut of_address =
            self.by_address.get(&address).copied().unwrap_or_else(|| Attempts::new(now));
        of_user.roll(window, now);
        of_address.roll(window, now);
        if let Some(wait) = of_address.refusal(self.max_per_address, window, now) {
            return Err(wait);
        }
        if let Some(wait) = of_user.refusal(self.max_per_user, window, now) {
            return Err(wait);
        }
        of_user.pending += 1;
        of_address.pending += 1;
        self.by_user.insert(key.clone(), of_user);
        self.by_address.insert(address, of_address);
        Ok(Admission { address, user: key.1 })
    }

    /// Settles an admitted attempt: a failure counts against its user and address; a
    /// success clears its user's failures from that address.
    fn settle(&mut self, admission: Admission, succeeded: bool, now: Instant) {
        let window = self.window;
        let settle = |attempts: &mut Attempts, clear: bool| {
            attempts.pending = attempts.pending.saturating_sub(1);
            attempts.roll(window, now);
            if clear {
                attempts.failed = 0;
            } else if !succeeded {
                if attempts.failed == 0 {
                    attempts.since = now;
                }
                attempts.failed += 1;
            }
        };
        if let Some(attempts) = self.by_address.get_mut(&admission.address) {
            settle(attempts, false);
        }
        let key = (admission.address, admission.user);
        if let Some(attempts) = self.by_user.get_mut(&key) {
            settle(attempts, succeeded);
        }
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    const WINDOW: Duration = Duration::from_secs(60);

    fn fail(counts: &mut FailureCounts, address: IpAddr, user: &str, now: Instant) {
        let admission = counts.admit(address, user, now).expect("admitted");
        counts.settle(admission, false, now);
    }

    #[test]
    fn a_user_is_refused_from_an_address_after_max_failures_until_the_window_passes() {
        let mut counts = FailureCounts::new(3, 10, WINDOW);
        let address: IpAddr = [10, 0, 0, 1].into();
        let start = Instant::now();
        for _ in 0..3 {
            fail(&mut counts, address, "alice", start);
        }
        let later = start + Duration::from_secs(10);
        assert_eq!(counts.admit(address, "alice", later).err(), Some(Duration::from_secs(50)));
        // Another user of the address, and the same user from another address, get in.
        assert!(counts.admit(address, "bob", later).is_ok());
        assert!(counts.admit([10, 0, 0, 2].into(), "alice", later).is_ok());
        assert!(counts.admit(address, "alice", start + WINDOW).is_ok());
    }

    #[test]
    fn attempts_under_way_count_before_their_check_ends() {
        let mut counts = FailureCounts::new(5, 50, WINDOW);
        let address: IpAddr = [10, 0, 0, 1].into();
        let now = Instant::now();
        let admitted: Vec<_> =
            (0..200).filter_map(|_| counts.admit(address, "alice", now).ok()).collect();
        assert_eq!(admitted.len(), 5, "only max_failures checks may run at once");
        for admission in admitted {
            counts.settle(admission, false, now);
        }
        assert!(counts.admit(address, "alice", now).is_err(), "the right password must wait");
        assert!(counts.admit(address, "bob", now).is_ok());
    }

    #[test]
    fn a_success_clears_its_users_failures_but_not_the_addresss() {
        let mut counts = FailureCounts::new(3, 4, WINDOW);
        let address: IpAddr = [10, 0, 0, 1].into();
        let now = Instant::now();
        for _ in 0..2 {
            fail(&mut counts, address, "alice", now);
        }
        let admission = counts.admit(address, "alice", now).expect("admitted");
        counts.settle(admission, true, now);
        fail(&mut counts, address, "alice", now);
        fail(&mut counts, address, "alice", now);
        // Four failures from the address: its ceiling, whoever logs in next.
        assert!(counts.admit(address, "carol", now).is_err());
        assert!(counts.admit([10, 0, 0, 2].into(), "carol", now).is_ok());
    }
}
