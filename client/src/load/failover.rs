//! ActiveMQ's `failover:` transport for the load generator: the URL options
//! ([`FailoverOptions`]) and the reconnect schedule ([`Reconnect`]).
//!
//! ActiveMQ's failover transport sits under the JMS connection and replays its state on a
//! new socket by itself. ferromq's protocol clients stay one-socket clients; the load
//! generator's threads do the replay instead (they know what they had in flight, see
//! `producer.rs` and `consumer.rs`), and this module only says which broker to try next
//! and how long to wait: the same attempt counting and back-off as ActiveMQ, so that a URL
//! copied from an ActiveMQ setup behaves the same.

use std::future::Future;
use std::time::{Duration, Instant};

use super::target::Endpoint;
use super::{BrokerUrl, LoadError};
use crate::ClientError;

/// The options of a `failover:(...)?options` URL, with ActiveMQ's names and defaults.
#[derive(Debug, Clone, PartialEq)]
pub struct FailoverOptions {
    /// `randomize` (default true): try the brokers in a random order, so that clients
    /// spread over them.
    pub randomize: bool,
    /// `initialReconnectDelay` (default 10 ms): the wait after the first round of failed
    /// attempts.
    pub initial_reconnect_delay: Duration,
    /// `maxReconnectDelay` (default 30 s): the longest wait between rounds.
    pub max_reconnect_delay: Duration,
    /// `useExponentialBackOff` (default true): multiply the wait after each failed round.
    pub use_exponential_back_off: bool,
    /// `backOffMultiplier` (default 2.0).
    pub back_off_multiplier: f64,
    /// `maxReconnectAttempts` (default -1, `None`: forever): rounds over the broker list
    /// before giving up once connected. As in ActiveMQ, 0 makes one round.
    pub max_reconnect_attempts: Option<u32>,
    /// `startupMaxReconnectAttempts` (default -1, `None`: as `maxReconnectAttempts`): the
    /// same for the first connection.
    pub startup_max_reconnect_attempts: Option<u32>,
    /// `timeout` (default -1, `None`): how long a send (or acknowledgement) waits for the
    /// connection to come back before it fails; `None` waits as long as the attempts last.
    pub timeout: Option<Duration>,
}

impl Default for FailoverOptions {
    fn default() -> FailoverOptions {
        FailoverOptions {
            randomize: true,
            initial_reconnect_delay: Duration::from_millis(10),
            max_reconnect_delay: Duration::from_secs(30),
            use_exponential_back_off: true,
            back_off_multiplier: 2.0,
            max_reconnect_attempts: None,
            startup_max_reconnect_attempts: None,
            timeout: None,
        }
    }
}

/// The option names a failover URL may carry, as an unknown option's error lists them.
pub const FAILOVER_OPTION_NAMES: [&str; 8] = [
    "randomize",
    "initialReconnectDelay",
    "maxReconnectDelay",
    "useExponentialBackOff",
    "backOffMultiplier",
    "maxReconnectAttempts",
    "startupMaxReconnectAttempts",
    "timeout",
];

impl FailoverOptions {
    /// Parses `name=value&name=value` (the part after `?`); the reason when it cannot.
    /// Names are case-sensitive, as in ActiveMQ.
    pub(crate) fn parse(query: &str) -> Result<FailoverOptions, String> {
        let mut options = FailoverOptions::default();
        for pair in query.split('&').filter(|pair| !pair.is_empty()) {
            let Some((name, value)) = pair.split_once('=') else {
                return Err(format!("failover option `{pair}` has no value; expected NAME=VALUE"));
            };
            let value = value.trim();
            let invalid = |expected: &str| {
                format!("invalid value `{value}` for failover option {name}: expected {expected}")
            };
            let millis = |value: &str| -> Result<Duration, String> {
                value
                    .parse::<u64>()
                    .map(Duration::from_millis)
                    .map_err(|_| invalid("a number of milliseconds (0 or more)"))
            };
            // -1 is ActiveMQ's "no limit"; other negative numbers mean nothing.
            let attempts = |value: &str| -> Result<Option<u32>, String> {
                match value.parse::<i64>() {
                    Ok(-1) => Ok(None),
                    Ok(n) => u32::try_from(n)
                        .map(Some)
                        .map_err(|_| invalid("-1 (no limit) or a number of attempts")),
                    Err(_) => Err(invalid("-1 (no limit) or a number of attempts")),
                }
            };
            let boolean = |value: &str| match value.to_ascii_lowercase().as_str() {
                "true" => Ok(true),
                "false" => Ok(false),
                _ => Err(invalid("true or false")),
            };
            match name {
                "randomize" => options.randomize = boolean(value)?,
                "initialReconnectDelay" => options.initial_reconnect_delay = millis(value)?,
                "maxReconnectDelay" => options.max_reconnect_delay = millis(value)?,
                "useExponentialBackOff" => options.use_exponential_back_off = boolean(value)?,
                "backOffMultiplier" => {
                    options.back_off_multiplier = match value.parse::<f64>() {
                        Ok(m) if m.is_finite() && m >= 1.0 => m,
                        _ => return Err(invalid("a number of at least 1.0")),
                    }
                }
                "maxReconnectAttempts" => options.max_reconnect_attempts = attempts(value)?,
                "startupMaxReconnectAttempts" => {
                    options.startup_max_reconnect_attempts = attempts(value)?
                }
                "timeout" => {
                    options.timeout =
                        match value.parse::<i64>() {
                            Ok(-1) => None,
                            Ok(ms) if ms > 0 => Some(Duration::from_millis(ms.unsigned_abs())),
                            _ => return Err(invalid(
                                "-1 (wait as long as reconnecting lasts) or milliseconds above 0",
                            )),
                        }
                }
                other => {
                    return Err(format!(
                        "unknown failover option `{other}`; ferromq's client knows {}",
                        FAILOVER_OPTION_NAMES.join(", ")
                    ))
                }
            }
        }
        Ok(options)
    }

    /// The rounds over the broker list allowed: the first connection's limit when
    /// `startup`, then `maxReconnectAttempts`; `None` for no limit. ActiveMQ makes at least
    /// one round whatever the number.
    fn round_limit(&self, startup: bool) -> Option<u32> {
        let limit = match (startup, self.startup_max_reconnect_attempts) {
            (true, Some(startup_limit)) => Some(startup_limit),
            _ => self.max_reconnect_attempts,
        };
        limit.map(|rounds| rounds.max(1))
    }

    /// The wait after failed round `round` (from 1): the initial delay, multiplied by the
    /// back-off for each earlier round, capped at the maximum.
    fn delay_after(&self, round: u32) -> Duration {
        if !self.use_exponential_back_off || round <= 1 {
            return self.initial_reconnect_delay.min(self.max_reconnect_delay);
        }
        let exponent = i32::try_from(round - 1).unwrap_or(i32::MAX);
        let factor = self.back_off_multiplier.powi(exponent);
        let millis = self.initial_reconnect_delay.as_secs_f64() * factor;
        match Duration::try_from_secs_f64(millis) {
            Ok(delay) => delay.min(self.max_reconnect_delay),
            Err(_) => self.max_reconnect_delay,
        }
    }
}

/// One thread's way through the broker list of a URL: a single URL is one attempt at its
/// one broker; a failover URL is rounds over its brokers with back-off, as ActiveMQ's
/// failover transport makes them.
pub(crate) struct Reconnect {
    broker: BrokerUrl,
    thread: String,
    /// The broker connected last: tried last in the next round (it just failed), as
    /// ActiveMQ does, so that a client moves on to the standby at once.
    last: Option<usize>,
    /// A small generator for `randomize`; no cryptographic need, just spread.
    seed: u64,
}

impl Reconnect {
    pub(crate) fn new(broker: BrokerUrl, thread: String) -> Reconnect {
        let seed = std::time::SystemTime::now()
            .duration_since(std::time::UNIX_EPOCH)
            .map(|d| d.as_nanos() as u64)
            .unwrap_or(0x9e37_79b9_7f4a_7c15)
            ^ thread.bytes().fold(0u64, |h, b| h.rotate_left(5) ^ u64::from(b));
        Reconnect { broker, thread, last: None, seed: seed | 1 }
    }

    /// Whether the URL asks for reconnecting (a `failover:` URL).
    pub(crate) fn enabled(&self) -> bool {
        self.broker.failover().is_some()
    }

    /// Calls `attempt` on the brokers in turn until one succeeds: the first connection
    /// when `startup`, else a reconnect after `cause`. Fails with the last attempt's error
    /// once the rounds allowed are spent, or once the failover `timeout` has passed since
    /// the call (not at startup: ActiveMQ's timeout is for sends).
    pub(crate) async fn connect<T, F, Fut>(
        &mut self,
        startup: bool,
        mut attempt: F,
    ) -> Result<T, LoadError>
    where
        F: FnMut(Endpoint) -> Fut,
        Fut: Future<Output = Result<T, LoadError>>,
    {
        let endpoints = self.broker.endpoints().to_vec();
        let Some(options) = self.broker.failover().cloned() else {
            // A plain URL: one attempt, its error as it is.
            let Some(only) = endpoints.into_iter().next() else {
                return Err(LoadError::InvalidOptions("a broker URL without a broker".into()));
            };
            return attempt(only).await;
        };
        let started = Instant::now();
        let deadline = options.timeout.filter(|_| !startup).map(|timeout| started + timeout);
        let limit = options.round_limit(startup);
        let mut round = 0u32;
        loop {
            round += 1;
            let mut last_error = None;
            for index in self.order(options.randomize) {
                match attempt(endpoints[index].clone()).await {
                    Ok(connected) => {
                        if !startup || round > 1 {
                            tracing::warn!(thread = %self.thread, broker = %endpoints[index],
                                after = ?started.elapsed(), "reconnected");
                        }
                        self.last = Some(index);
                        return Ok(connected);
                    }
                    Err(error) if is_permanent(&error, startup) => return Err(error),
                    Err(error) => {
                        tracing::debug!(thread = %self.thread, broker = %endpoints[index],
                            %error, "connect attempt failed");
                        last_error = Some(error);
                    }
                }
            }
            let Some(error) = last_error else {
                return Err(LoadError::InvalidOptions("a failover URL without brokers".into()));
            };
            if limit.is_some_and(|limit| round >= limit) {
                tracing::warn!(thread = %self.thread, rounds = round, %error,
                    "giving up reconnecting: maxReconnectAttempts reached");
                return Err(error);
            }
            let delay = options.delay_after(round);
            if deadline.is_some_and(|deadline| Instant::now() + delay >= deadline) {
                tracing::warn!(thread = %self.thread, %error,
                    "giving up reconnecting: the failover timeout passed");
                return Err(error);
            }
            if round == 1 || round.is_power_of_two() {
                tracing::warn!(thread = %self.thread, round, retry_in = ?delay, %error,
                    "no broker of the failover URL answers");
            }
            tokio::time::sleep(delay).await;
        }
    }

    /// The order of this round: the list's order (shuffled if `randomize`), with the
    /// broker connected last moved to the end.
    fn order(&mut self, randomize: bool) -> Vec<usize> {
        let count = self.broker.endpoints().len();
        let mut order: Vec<usize> = (0..count).collect();
        if randomize {
            // Fisher-Yates over xorshift64.
            for i in (1..count).rev() {
                self.seed ^= self.seed << 13;
                self.seed ^= self.seed >> 7;
                self.seed ^= self.seed << 17;
                let j = (self.seed % (i as u64 + 1)) as usize;
                order.swap(i, j);
            }
        }
        if let Some(last) = self.last {
            order.retain(|&i| i != last);
            order.push(last);
        }
        order
    }
}

/// Whether trying again cannot help: a broker that refuses the credentials, the
/// certificate or the selector refuses them the next time too. At startup every refusal
/// is final (the broker is up and says no); later a refusal may be passing (the client id
/// or durable subscription still held by the connection that died), so only those three
/// stop the reconnecting.
fn is_permanent(error: &LoadError, startup: bool) -> bool {
    let (LoadError::Connect { source, .. } | LoadError::Subscribe { source, .. }) = error else {
        return true;
    };
    match source {
        ClientError::Tls { .. } => true,
        ClientError::Exception { class, .. } => {
            startup
                || class.ends_with("SecurityException")
                || class.ends_with("InvalidSelectorException")
        }
        ClientError::ServerError { .. } | ClientError::Refused { .. } => startup,
        _ => false,
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn defaults_are_activemqs() {
        let options = FailoverOptions::parse("").expect("empty");
        assert_eq!(options, FailoverOptions::default());
        assert!(options.randomize && options.use_exponential_back_off);
        assert_eq!(options.initial_reconnect_delay, Duration::from_millis(10));
        assert_eq!(options.max_reconnect_delay, Duration::from_secs(30));
        assert_eq!(options.back_off_multiplier, 2.0);
        assert_eq!((options.max_reconnect_attempts, options.timeout), (None, None));
    }

    #[test]
    fn every_option_parses() {
        let options = FailoverOptions::parse(
            "randomize=false&initialReconnectDelay=100&maxReconnectDelay=2000&\
             useExponentialBackOff=FALSE&backOffMultiplier=1.5&maxReconnectAttempts=20&\
             startupMaxReconnectAttempts=3&timeout=5000",
        )
        .expect("valid");
        assert_eq!(
            options,
            FailoverOptions {
                randomize: false,
                initial_reconnect_delay: Duration::from_millis(100),
                max_reconnect_delay: Duration::from_secs(2),
                use_exponential_back_off: false,
                back_off_multiplier: 1.5,
                max_reconnect_attempts: Some(20),
                startup_max_reconnect_attempts: Some(3),
                timeout: Some(Duration::from_secs(5)),
            }
        );
        let unlimited = FailoverOptions::parse("maxReconnectAttempts=-1&timeout=-1").expect("-1");
        assert_eq!((unlimited.max_reconnect_attempts, unlimited.timeout), (None, None));
    }

    #[test]
    fn bad_options_are_refused_with_the_known_names() {
        let error = FailoverOptions::parse("randomise=false").expect_err("typo");
        assert!(error.contains("unknown failover option `randomise`"), "{error}");
        for name in FAILOVER_OPTION_NAMES {
            assert!(error.contains(name), "{error} lacks {name}");
        }
        // Names are case-sensitive, as ActiveMQ's bean properties.
        assert!(FailoverOptions::parse("Randomize=true").is_err());
        for (query, expected) in [
            ("randomize=yes", "true or false"),
            ("initialReconnectDelay=-5", "milliseconds"),
            ("maxReconnectAttempts=-2", "-1 (no limit)"),
            ("backOffMultiplier=0.5", "at least 1.0"),
            ("timeout=0", "above 0"),
            ("timeout", "no value"),
        ] {
            let error = FailoverOptions::parse(query).expect_err(query);
            assert!(error.contains(expected), "{query}: {error}");
        }
    }

    #[test]
    fn back_off_grows_to_the_maximum_and_rounds_follow_activemq() {
        let options = FailoverOptions {
            initial_reconnect_delay: Duration::from_millis(100),
            max_reconnect_delay: Duration::from_millis(1000),
            ..FailoverOptions::default()
        };
        let delays: Vec<u128> =
            (1..=6).map(|round| options.delay_after(round).as_millis()).collect();
        assert_eq!(delays, [100, 200, 400, 800, 1000, 1000]);
        let flat = FailoverOptions { use_exponential_back_off: false, ..options.clone() };
        assert_eq!(flat.delay_after(5), Duration::from_millis(100));
        assert_eq!(options.round_limit(false), None);
        let limited = FailoverOptions {
            max_reconnect_attempts: Some(0),
            startup_max_reconnect_attempts: Some(4),
            ..options
        };
        // 0 still makes one round; the startup limit applies to the first connection only.
        assert_eq!((limited.round_limit(false), limited.round_limit(true)), (Some(1), Some(4)));
    }

    #[test]
    fn refusals_stop_reconnecting_where_trying_again_cannot_help() {
        let connect =
            |source| LoadError::Connect { thread: "t".into(), url: "tcp://a".into(), source };
        let exception = |class: &str| {
            connect(ClientError::Exception { class: class.into(), message: String::new() })
        };
        let in_use = || exception("javax.jms.InvalidClientIDException");
        assert!(is_permanent(&in_use(), true));
        assert!(!is_permanent(&in_use(), false), "a client id the dead connection held");
        assert!(is_permanent(&exception("java.lang.SecurityException"), false));
        let refused = std::io::Error::from(std::io::ErrorKind::ConnectionRefused);
        assert!(!is_permanent(&connect(refused.into()), true));
        assert!(!is_permanent(&connect(ClientError::Closed), false));
    }

    #[test]
    fn the_broker_that_failed_is_tried_last_and_randomize_shuffles() {
        let url: BrokerUrl =
            "failover:(tcp://a:1,tcp://b:2,tcp://c:3)?randomize=false".parse().expect("url");
        let mut reconnect = Reconnect::new(url, "t".into());
        assert_eq!(reconnect.order(false), [0, 1, 2]);
        reconnect.last = Some(0);
        assert_eq!(reconnect.order(false), [1, 2, 0]);
        let orders: std::collections::HashSet<Vec<usize>> =
            (0..64).map(|_| reconnect.order(true)).collect();
        assert!(orders.len() > 1, "randomize never changed the order");
        assert!(orders.iter().all(|order| order.last() == Some(&0)));
    }
}
