//! The activemq-perf plugin's properties: [`PerfSettings::parse`] reads a `.properties` file
//! (Java's format) plus command-line overrides into checked settings with the plugin's
//! defaults.
//!
//! Every key the plugin documents for its producer and consumer systems is known. A key
//! ferromq implements takes effect; a known key it does not implement (`producer.header`,
//! `producer.msgFileName`, ...) is an error naming it, never silently ignored; `factory.*`
//! keys other than the four below are ActiveMQ connection factory bean properties, accepted
//! with a warning naming them; any other key is an error naming it.

use std::fmt;
use std::path::PathBuf;
use std::time::Duration;

use super::super::{BrokerUrl, DestinationName, WireProtocol};

/// Why properties were refused.
#[derive(Debug, thiserror::Error)]
#[non_exhaustive]
pub enum PropsError {
    /// A key nobody knows.
    #[error("{origin}: unknown key `{key}`{hint}")]
    UnknownKey {
        /// Where it came from: the file (and line) or `--set`.
        origin: String,
        /// The key.
        key: String,
        /// A suggestion, starting with `; `, or empty.
        hint: String,
    },
    /// A known key whose feature ferromq does not implement.
    #[error("{origin}: `{key}` is not implemented by ferromq perf: {why}")]
    Unsupported {
        /// Where it came from.
        origin: String,
        /// The key.
        key: String,
        /// What to do instead.
        why: String,
    },
    /// A value that does not parse or is out of range.
    #[error("{origin}: invalid value `{value}` for `{key}`: {expected}")]
    InvalidValue {
        /// Where it came from.
        origin: String,
        /// The key.
        key: String,
        /// The value as given.
        value: String,
        /// What is expected.
        expected: String,
    },
    /// A required key is missing or empty.
    #[error("`{key}` is required: {why}")]
    Missing {
        /// The key.
        key: String,
        /// What to give.
        why: String,
    },
    /// A line that is not `key=value`, or an override that is not.
    #[error("{origin}: {why}")]
    Malformed {
        /// Where.
        origin: String,
        /// What is wrong.
        why: String,
    },
}

/// Which side a perf run plays.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub enum PerfRole {
    /// `ferromq perf producer` (the plugin's `activemq-perf:producer`).
    Producer,
    /// `ferromq perf consumer` (the plugin's `activemq-perf:consumer`).
    Consumer,
}

impl PerfRole {
    /// The plugin's default client prefix: `JmsProducer` or `JmsConsumer`.
    pub fn default_prefix(self) -> &'static str {
        match self {
            PerfRole::Producer => "JmsProducer",
            PerfRole::Consumer => "JmsConsumer",
        }
    }
}

/// `sysTest.destDistro`: how `totalDests` destinations are spread over `numClients`
/// clients (the plugin's `distributeDestinations`).
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub enum DestDistro {
    /// Every client uses every destination (the default).
    All,
    /// `totalDests / numClients` each; with more clients than destinations, client `i` uses
    /// destination `i % totalDests`.
    Equal,
    /// Like `equal`, but the remainder goes one each to the first clients.
    Divide,
}

impl DestDistro {
    /// The plugin's name: `all`, `equal`, `divide`.
    pub fn name(self) -> &'static str {
        match self {
            DestDistro::All => "all",
            DestDistro::Equal => "equal",
            DestDistro::Divide => "divide",
        }
    }

    /// The first destination index and the number of destinations of client `client`.
    pub fn range(self, client: usize, clients: usize, dests: usize) -> (usize, usize) {
        let clients = clients.max(1);
        let dests = dests.max(1);
        let per_client = dests / clients;
        match self {
            DestDistro::All => (0, dests),
            _ if per_client == 0 => (client % dests, 1),
            DestDistro::Equal => (per_client * client, per_client),
            DestDistro::Divide => {
                let remain = dests % clients;
                if client < remain {
                    ((per_client + 1) * client, per_client + 1)
                } else {
                    (per_client * client + remain, per_client)
                }
            }
        }
    }
}

/// `producer.sendType` / `consumer.recvType`: run for a time or for a count.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub enum RunBasis {
    /// For this long.
    Time(Duration),
    /// This many messages per client (and per destination, for a producer).
    Count(u64),
}

/// `consumer.sessAckMode` (and `sessTransacted`).
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub enum SessAckMode {
    /// `autoAck` (the default).
    Auto,
    /// `clientAck`.
    Client,
    /// `dupsAck`.
    DupsOk,
    /// `transacted`.
    Transacted,
}

/// The sampler: `tpSampler.*` in the plugin (also spelt `sampler.*`).
#[derive(Debug, Clone, PartialEq)]
pub struct SamplerSettings {
    /// `interval` (ms): one sample per interval; default 1000.
    pub interval: Duration,
    /// `duration` (ms): how long samples are taken in a timed run, ramps included; default
    /// the send or receive duration.
    pub duration: Option<Duration>,
    /// `rampUpTime` (ms): left out at the start; default `rampUpPercent` of the duration.
    pub ramp_up: Option<Duration>,
    /// `rampDownTime` (ms): left out at the end; default `rampDownPercent` of the duration.
    pub ramp_down: Option<Duration>,
    /// `rampUpPercent`; default 0.
    pub ramp_up_percent: u64,
    /// `rampDownPercent`; default 0.
    pub ramp_down_percent: u64,
}

/// Everything a perf run needs, checked, with the plugin's defaults.
#[derive(Debug, Clone)]
pub struct PerfSettings {
    /// Producer or consumer.
    pub role: PerfRole,
    /// `sysTest.reportDir`; default `./`.
    pub report_dir: PathBuf,
    /// `sysTest.reportName`; default `<clientPrefix>_numClients<N>_numDests<D>_<distro>`.
    pub report_name: Option<String>,
    /// `sysTest.samplers` includes `tp` (the throughput sampler; default `tp,cpu`).
    pub throughput_sampler: bool,
    /// `sysTest.samplers` includes `cpu`: the machine's CPU use per sample (the plugin's
    /// vmstat sampler; ferromq reads /proc, see [`super::cpu`]).
    pub cpu_sampler: bool,
    /// `sysTest.clientPrefix`; default `JmsProducer` / `JmsConsumer`.
    pub client_prefix: String,
    /// `sysTest.numClients`; default 1.
    pub num_clients: usize,
    /// `sysTest.totalDests`; default 1.
    pub total_dests: usize,
    /// `sysTest.destDistro`; default all.
    pub dest_distro: DestDistro,
    /// The sampler.
    pub sampler: SamplerSettings,
    /// `factory.brokerURL` (required).
    pub broker: BrokerUrl,
    /// `factory.userName`, if not empty.
    pub user: Option<String>,
    /// `factory.password`, if not empty.
    pub password: Option<String>,
    /// `factory.useAsyncSend`: send without waiting for the broker (also persistent
    /// messages); default false, ActiveMQ's.
    pub use_async_send: bool,
    /// `<role>.destName`: `queue://NAME` or `topic://NAME`; a bare name is a topic, as in the
    /// plugin. Default `topic://TEST.FOO`.
    pub dest_name: DestinationName,
    /// `<role>.sessTransacted`; default false.
    pub sess_transacted: bool,
    /// `<role>.commitAfterXMsgs`: messages per transaction (and per acknowledgement with
    /// `clientAck`); default 1.
    pub commit_after: u64,
    /// `producer.deliveryMode` is `persistent` (default `nonpersistent`).
    pub persistent: bool,
    /// `producer.messageSize` in bytes; default 1024.
    pub message_size: usize,
    /// `producer.sendType` with `sendDuration` / `sendCount`, or `consumer.recvType` with
    /// `recvDuration` / `recvCount`: default five minutes.
    pub basis: RunBasis,
    /// `producer.sendDelay` / `consumer.recvDelay` (ms): a pause after each message.
    pub delay: Duration,
    /// `consumer.durable`; default false.
    pub durable: bool,
    /// `consumer.unsubscribe`: remove a durable subscription at the end; default true.
    pub unsubscribe: bool,
    /// `consumer.sessAckMode`; default autoAck.
    pub ack_mode: SessAckMode,
    /// `consumer.messageSelector`, if any.
    pub selector: Option<String>,
    /// Warnings to show the user (ignored bean properties, inferred run types).
    pub warnings: Vec<String>,
    /// Every key given, with its final value, in the order first given (for the report).
    pub given: Vec<(String, String)>,
}

impl PerfSettings {
    /// Reads `file_text` (a Java `.properties` file named `origin` in messages) and then
    /// `overrides` (`key=value` from the command line, which win), for `role`.
    pub fn parse(
        role: PerfRole,
        file: Option<(&str, &str)>,
        overrides: &[String],
    ) -> Result<PerfSettings, PropsError> {
        let mut entries: Vec<Entry> = Vec::new();
        if let Some((origin, text)) = file {
            for (line, key, value) in parse_properties(text).map_err(|(line, why)| {
                PropsError::Malformed { origin: format!("{origin}:{line}"), why }
            })? {
                entries.push(Entry { origin: format!("{origin}:{line}"), key, value });
            }
        }
        for text in overrides {
            let Some((key, value)) = text.split_once('=') else {
                return Err(PropsError::Malformed {
                    origin: format!("--set {text}"),
                    why: "expected KEY=VALUE, e.g. --set sysTest.numClients=5".into(),
                });
            };
            entries.push(Entry {
                origin: format!("--set {text}"),
                key: key.trim().to_owned(),
                value: value.trim().to_owned(),
            });
        }
        Builder::new(role).build(entries)
    }

    /// The report's file name without `.xml`: `sysTest.reportName`, or the plugin's
    /// `<clientPrefix>_numClients<N>_numDests<D>_<destDistro>`.
    pub fn report_name(&self) -> String {
        match &self.report_name {
            Some(name) => name.trim_end_matches(".xml").to_owned(),
            None => format!(
                "{}_numClients{}_numDests{}_{}",
                self.client_prefix,
                self.num_clients,
                self.total_dests,
                self.dest_distro.name()
            ),
        }
    }

    /// The name of client `index` (`JmsProducer0`, ...).
    pub fn client_name(&self, index: usize) -> String {
        format!("{}{index}", self.client_prefix)
    }

    /// The destinations of client `index`: `destName` with `totalDests` 1, else
    /// `destName.<n>` for its share (see [`DestDistro::range`]).
    ///
    /// The plugin's own code numbers every client's destinations from 0 whatever its share
    /// (so `equal` and `divide` put every client on the same destinations); ferromq numbers
    /// them from the client's first index, as the plugin's documentation describes.
    pub fn client_destinations(&self, index: usize) -> Vec<DestinationName> {
        if self.total_dests <= 1 {
            return vec![self.dest_name.clone()];
        }
        let (first, count) = self.dest_distro.range(index, self.num_clients, self.total_dests);
        (first..first + count)
            .map(|n| {
                let name = format!("{}.{n}", self.dest_name.name());
                if self.dest_name.is_topic() {
                    DestinationName::topic(name)
                } else {
                    DestinationName::queue(name)
                }
            })
            .collect()
    }

    /// The sampler's ramp-up and ramp-down of a timed run of `duration`: the given times,
    /// else the percentages of the sampler duration.
    pub fn ramps(&self, duration: Duration) -> (Duration, Duration) {
        let sampled = self.sampler.duration.unwrap_or(duration);
        let percent = |p: u64| Duration::from_millis(millis(sampled) / 100 * p);
        (
            self.sampler.ramp_up.unwrap_or_else(|| percent(self.sampler.ramp_up_percent)),
            self.sampler.ramp_down.unwrap_or_else(|| percent(self.sampler.ramp_down_percent)),
        )
    }
}

fn millis(duration: Duration) -> u64 {
    u64::try_from(duration.as_millis()).unwrap_or(u64::MAX)
}

struct Entry {
    origin: String,
    key: String,
    value: String,
}

/// Collects the values, then checks them together.
struct Builder {
    role: PerfRole,
    settings: PerfSettings,
    broker_url: Option<(String, String)>,
    /// `factory.trustStore`: the PEM authorities of a TLS broker URL.
    trust_store: Option<std::path::PathBuf>,
    send_type: Option<String>,
    send_count: Option<u64>,
    send_duration: Option<u64>,
    recv_type: Option<String>,
    recv_count: Option<u64>,
    recv_duration: Option<u64>,
    warnings: Vec<String>,
    /// `factory.*` bean properties ferromq does not implement, named in one warning.
    ignored_factory: Vec<String>,
    /// Where each key was last given, to name it in errors found when checking together.
    origins: Vec<(String, String)>,
}

/// `sysTest` keys the plugin has that change nothing here (the SPI class picks the JMS
/// provider; the properties file is given with --props).
const OTHER_SYSTEM_KEYS: &[&str] = &["sysTest.propsConfigFile", "sysTest.spiClass"];

impl Builder {
    fn new(role: PerfRole) -> Builder {
        Builder {
            role,
            settings: PerfSettings {
                role,
                report_dir: PathBuf::from("./"),
                report_name: None,
                throughput_sampler: true,
                cpu_sampler: true,
                client_prefix: role.default_prefix().to_owned(),
                num_clients: 1,
                total_dests: 1,
                dest_distro: DestDistro::All,
                sampler: SamplerSettings {
                    interval: Duration::from_millis(1000),
                    duration: None,
                    ramp_up: None,
                    ramp_down: None,
                    ramp_up_percent: 0,
                    ramp_down_percent: 0,
                },
                broker: BrokerUrl::default(),
                user: None,
                password: None,
                use_async_send: false,
                dest_name: DestinationName::topic("TEST.FOO"),
                sess_transacted: false,
                commit_after: 1,
                persistent: false,
                message_size: 1024,
                basis: RunBasis::Time(Duration::from_secs(300)),
                delay: Duration::ZERO,
                durable: false,
                unsubscribe: true,
                ack_mode: SessAckMode::Auto,
                selector: None,
                warnings: Vec::new(),
                given: Vec::new(),
            },
            broker_url: None,
            trust_store: None,
            send_type: None,
            send_count: None,
            send_duration: None,
            recv_type: None,
            recv_count: None,
            recv_duration: None,
            warnings: Vec::new(),
            ignored_factory: Vec::new(),
            origins: Vec::new(),
        }
    }

    fn build(mut self, entries: Vec<Entry>) -> Result<PerfSettings, PropsError> {
        for entry in &entries {
            self.apply(entry)?;
            self.origins.retain(|(key, _)| *key != entry.key);
            self.origins.push((entry.key.clone(), entry.origin.clone()));
            match self.settings.given.iter_mut().find(|(key, _)| *key == entry.key) {
                Some((_, value)) => value.clone_from(&entry.value),
                None => self.settings.given.push((entry.key.clone(), entry.value.clone())),
            }
        }
        self.finish()
    }

    fn apply(&mut self, entry: &Entry) -> Result<(), PropsError> {
        let Entry { origin, key, value } = entry;
        let (prefix, name) = key.split_once('.').unwrap_or(("", key.as_str()));
        let s = &mut self.settings;
        let mine = match self.role {
            PerfRole::Producer => prefix == "producer",
            PerfRole::Consumer => prefix == "consumer",
        };
        match (prefix, name) {
            ("sysTest", "reportDir") => s.report_dir = PathBuf::from(value),
            ("sysTest", "reportName") => s.report_name = non_empty(value),
            ("sysTest", "reportType") => match value.to_ascii_lowercase().as_str() {
                "xml" => {}
                "verbose" => self.warnings.push(format!(
                    "{origin}: sysTest.reportType=verbose: ferromq perf prints the summary \
                     and writes the XML report in either case"
                )),
                _ => return Err(invalid(entry, "xml or verbose")),
            },
            ("sysTest", "samplers") => {
                s.throughput_sampler = false;
                s.cpu_sampler = false;
                for sampler in value.split(',').map(str::trim).filter(|v| !v.is_empty()) {
                    match sampler {
                        "tp" => s.throughput_sampler = true,
                        "cpu" => s.cpu_sampler = true,
                        _ => return Err(invalid(entry, "a comma-separated list of tp and cpu")),
                    }
                }
            }
            ("sysTest", "clientPrefix") => {
                s.client_prefix = non_empty(value).ok_or_else(|| invalid(entry, "a name"))?
            }
            ("sysTest", "numClients") => s.num_clients = positive(entry)?,
            ("sysTest", "totalDests") => s.total_dests = positive(entry)?,
            ("sysTest", "destDistro") => {
                s.dest_distro = match value.to_ascii_lowercase().as_str() {
                    "all" => DestDistro::All,
                    "equal" => DestDistro::Equal,
                    "divide" => DestDistro::Divide,
                    _ => return Err(invalid(entry, "all, equal or divide")),
                }
            }
            ("sysTest", _) if OTHER_SYSTEM_KEYS.contains(&key.as_str()) => {}
            ("tpSampler" | "sampler", "interval") => {
                s.sampler.interval = Duration::from_millis(positive(entry)? as u64)
            }
            ("tpSampler" | "sampler", "duration") => {
                s.sampler.duration = Some(Duration::from_millis(number(entry)?))
            }
            ("tpSampler" | "sampler", "rampUpTime") => {
                s.sampler.ramp_up = Some(Duration::from_millis(number(entry)?))
            }
            ("tpSampler" | "sampler", "rampDownTime") => {
                s.sampler.ramp_down = Some(Duration::from_millis(number(entry)?))
            }
            ("tpSampler" | "sampler", "rampUpPercent") => {
                s.sampler.ramp_up_percent = percent(entry, 100)?
            }
            ("tpSampler" | "sampler", "rampDownPercent") => {
                s.sampler.ramp_down_percent = percent(entry, 99)?
            }
            ("factory", "brokerURL") => self.broker_url = Some((origin.clone(), value.clone())),
            ("factory", "userName") => s.user = non_empty(value),
            ("factory", "password") => s.password = non_empty(value),
            ("factory", "useAsyncSend") => s.use_async_send = boolean(entry)?,
            ("factory", "trustStore") => self.trust_store = non_empty(value).map(Into::into),
            ("factory", _) => self.ignored_factory.push(key.clone()),
            ("producer" | "consumer", "destName") if mine => {
                s.dest_name = destination(entry)?;
            }
            ("producer" | "consumer", "sessTransacted") if mine => {
                s.sess_transacted = boolean(entry)?
            }
            ("producer" | "consumer", "commitAfterXMsgs") if mine => {
                s.commit_after = positive(entry)? as u64
            }
            ("producer" | "consumer", "sessAckMode") if mine => {
                s.ack_mode = match value.as_str() {
                    v if v.eq_ignore_ascii_case("autoAck") => SessAckMode::Auto,
                    v if v.eq_ignore_ascii_case("clientAck") => SessAckMode::Client,
                    v if v.eq_ignore_ascii_case("dupsAck") => SessAckMode::DupsOk,
                    v if v.eq_ignore_ascii_case("transacted") => SessAckMode::Transacted,
                    _ => return Err(invalid(entry, "autoAck, clientAck, dupsAck or transacted")),
                }
            }
            ("producer" | "consumer", "destComposite") if mine => {
                if boolean(entry)? {
                    return Err(unsupported(entry, "give the destinations one by one"));
                }
            }
            ("producer", "deliveryMode") if mine => {
                s.persistent = match value.to_ascii_lowercase().as_str() {
                    "persistent" => true,
                    "nonpersistent" | "non_persistent" | "non-persistent" => false,
                    _ => return Err(invalid(entry, "persistent or nonpersistent")),
                }
            }
            ("producer", "messageSize") if mine => s.message_size = number(entry)? as usize,
            ("producer", "sendType") if mine => self.send_type = Some(run_type(entry)?),
            ("producer", "sendCount") if mine => self.send_count = Some(number(entry)?),
            ("producer", "sendDuration") if mine => self.send_duration = Some(number(entry)?),
            ("producer", "sendDelay") if mine => s.delay = Duration::from_millis(number(entry)?),
            // ferromq builds each message anyway (it carries its send time).
            ("producer", "createNewMsg") if mine => drop(boolean(entry)?),
            ("producer", "msgFileName" | "header") if mine => {
                return Err(unsupported(entry, "ferromq perf sends messageSize-byte messages"))
            }
            ("consumer", "durable") if mine => s.durable = boolean(entry)?,
            ("consumer", "unsubscribe") if mine => s.unsubscribe = boolean(entry)?,
            // Both receive styles are one loop here.
            ("consumer", "asyncRecv") if mine => drop(boolean(entry)?),
            ("consumer", "recvType") if mine => self.recv_type = Some(run_type(entry)?),
            ("consumer", "recvCount") if mine => self.recv_count = Some(number(entry)?),
            ("consumer", "recvDuration") if mine => self.recv_duration = Some(number(entry)?),
            ("consumer", "recvDelay") if mine => s.delay = Duration::from_millis(number(entry)?),
            ("consumer", "messageSelector") if mine => s.selector = non_empty(value),
            // The other role's keys: a file may serve both; they are not used here.
            ("producer" | "consumer", _) if !mine && is_client_key(prefix, name) => {}
            _ => {
                return Err(PropsError::UnknownKey {
                    origin: origin.clone(),
                    key: key.clone(),
                    hint: hint(key),
                })
            }
        }
        Ok(())
    }

    fn finish(mut self) -> Result<PerfSettings, PropsError> {
        let s = &mut self.settings;
        let url_help = "set it to the broker's OpenWire URL, e.g. tcp://127.0.0.1:61616 \
                        (stomp://HOST:61613 for STOMP), in the file or with --broker-url";
        match &self.broker_url {
            Some((_, value)) if value.trim().is_empty() => {
                return Err(PropsError::Missing {
                    key: "factory.brokerURL".into(),
                    why: format!("it is empty; {url_help}"),
                })
            }
            Some((origin, value)) => {
                let broker: BrokerUrl =
                    value.parse().map_err(|error: super::super::LoadError| {
                        PropsError::InvalidValue {
                            origin: origin.clone(),
                            key: "factory.brokerURL".into(),
                            value: value.clone(),
                            expected: error.to_string(),
                        }
                    })?;
                s.broker = broker.with_trust_store(self.trust_store.take());
            }
            None => {
                return Err(PropsError::Missing {
                    key: "factory.brokerURL".into(),
                    why: format!("it is not given; {url_help}"),
                })
            }
        }
        let (kind, count, duration, what) = match self.role {
            PerfRole::Producer => {
                (&self.send_type, self.send_count, self.send_duration, ("send", "producer"))
            }
            PerfRole::Consumer => {
                (&self.recv_type, self.recv_count, self.recv_duration, ("recv", "consumer"))
            }
        };
        let (verb, role) = what;
        s.basis = match (kind.as_deref(), count, duration) {
            (Some("count"), count, _) => RunBasis::Count(count.unwrap_or(1_000_000)),
            (Some(_), _, duration) => {
                RunBasis::Time(Duration::from_millis(duration.unwrap_or(300_000)))
            }
            // The plugin runs for a time unless told `count`, even when only a count is
            // given; a count alone clearly means a count, so ferromq says what it does.
            (None, Some(count), None) => {
                self.warnings.push(format!(
                    "{role}.{verb}Count given without {role}.{verb}Type: counting \
                     {count} messages (the plugin would run for {role}.{verb}Duration)"
                ));
                RunBasis::Count(count)
            }
            (None, _, duration) => {
                RunBasis::Time(Duration::from_millis(duration.unwrap_or(300_000)))
            }
        };
        if let RunBasis::Time(duration) = s.basis {
            if duration.is_zero() {
                return Err(PropsError::InvalidValue {
                    origin: "properties".into(),
                    key: format!("{role}.{verb}Duration"),
                    value: "0".into(),
                    expected: "a duration of at least 1 ms".into(),
                });
            }
            let sampled = s.sampler.duration.unwrap_or(duration);
            let (up, down) = s.ramps(duration);
            if up + down > sampled {
                return Err(PropsError::Malformed {
                    origin: "sampler".into(),
                    why: format!(
                        "the ramp times (up {} ms, down {} ms) exceed the sampled duration \
                         ({} ms)",
                        millis(up),
                        millis(down),
                        millis(sampled)
                    ),
                });
            }
        }
        let limited = match s.broker.protocol() {
            WireProtocol::Amqp => Some("AMQP"),
            WireProtocol::Mqtt => Some("MQTT"),
            _ => None,
        };
        if let Some(protocol) = limited {
            // What ferromq's AMQP and MQTT clients cannot do, by the key that asks for it.
            let role = match self.role {
                PerfRole::Producer => "producer",
                PerfRole::Consumer => "consumer",
            };
            let refused = [
                (s.ack_mode == SessAckMode::Transacted, "sessAckMode", "transactions"),
                (s.sess_transacted, "sessTransacted", "transactions"),
                (s.durable, "durable", "durable subscriptions"),
                (s.selector.is_some(), "messageSelector", "selectors"),
            ];
            if let Some((_, name, what)) = refused.iter().find(|(asked, _, _)| *asked) {
                let key = format!("{role}.{name}");
                let origin = self
                    .origins
                    .iter()
                    .find(|(given, _)| *given == key)
                    .map_or_else(|| "properties".to_owned(), |(_, origin)| origin.clone());
                return Err(PropsError::Unsupported {
                    origin,
                    key,
                    why: format!(
                        "over {protocol} ({}): ferromq's {protocol} client has no {what}; \
                         remove the key or use OpenWire (tcp://) or STOMP (stomp://)",
                        s.broker
                    ),
                });
            }
        }
        if s.ack_mode == SessAckMode::Transacted {
            s.sess_transacted = true;
        }
        if s.durable && !s.dest_name.is_topic() {
            return Err(PropsError::InvalidValue {
                origin: "properties".into(),
                key: "consumer.durable".into(),
                value: "true".into(),
                expected: format!(
                    "a durable subscription needs a topic; consumer.destName is {}",
                    s.dest_name
                ),
            });
        }
        if !s.throughput_sampler {
            self.warnings.push(
                "sysTest.samplers has no tp: throughput is sampled anyway (the summary needs \
                 it)"
                .into(),
            );
            s.throughput_sampler = true;
        }
        if !self.ignored_factory.is_empty() {
            self.warnings.push(format!(
                "ignoring ActiveMQ connection factory properties ferromq perf does not \
                 implement: {}",
                self.ignored_factory.join(", ")
            ));
        }
        s.warnings = self.warnings;
        Ok(self.settings)
    }
}

/// Whether `prefix.name` is a key of the plugin's producer or consumer properties.
fn is_client_key(prefix: &str, name: &str) -> bool {
    const COMMON: &[&str] =
        &["destName", "destComposite", "sessAckMode", "sessTransacted", "commitAfterXMsgs"];
    const PRODUCER: &[&str] = &[
        "deliveryMode",
        "messageSize",
        "sendCount",
        "sendDuration",
        "sendType",
        "sendDelay",
        "msgFileName",
        "createNewMsg",
        "header",
    ];
    const CONSUMER: &[&str] = &[
        "durable",
        "unsubscribe",
        "asyncRecv",
        "recvCount",
        "recvDuration",
        "recvType",
        "recvDelay",
        "messageSelector",
    ];
    COMMON.contains(&name)
        || match prefix {
            "producer" => PRODUCER.contains(&name),
            "consumer" => CONSUMER.contains(&name),
            _ => false,
        }
}

/// A suggestion for an unknown key: the known key it most likely meant.
fn hint(key: &str) -> String {
    let (prefix, name) = key.split_once('.').unwrap_or(("", key));
    let lower = name.to_ascii_lowercase();
    let known: Vec<String> = ["producer", "consumer"]
        .iter()
        .filter(|p| is_client_key(p, name) || prefix.is_empty())
        .map(|p| format!("{p}.{name}"))
        .collect();
    if !prefix.is_empty() && !known.is_empty() && known.iter().all(|k| k != key) {
        return format!("; did you mean {}?", known.join(" or "));
    }
    let system = [
        "reportDir",
        "reportName",
        "reportType",
        "samplers",
        "spiClass",
        "clientPrefix",
        "numClients",
        "totalDests",
        "destDistro",
    ];
    if let Some(found) = system.iter().find(|k| k.to_ascii_lowercase() == lower) {
        return format!("; did you mean sysTest.{found}?");
    }
    String::new()
}

fn non_empty(value: &str) -> Option<String> {
    let value = value.trim();
    (!value.is_empty()).then(|| value.to_owned())
}

fn invalid(entry: &Entry, expected: &str) -> PropsError {
    PropsError::InvalidValue {
        origin: entry.origin.clone(),
        key: entry.key.clone(),
        value: entry.value.clone(),
        expected: expected.to_owned(),
    }
}

fn unsupported(entry: &Entry, why: &str) -> PropsError {
    PropsError::Unsupported {
        origin: entry.origin.clone(),
        key: entry.key.clone(),
        why: why.to_owned(),
    }
}

fn number(entry: &Entry) -> Result<u64, PropsError> {
    entry.value.trim().parse().map_err(|_| invalid(entry, "a whole number, 0 or more"))
}

fn positive(entry: &Entry) -> Result<usize, PropsError> {
    match entry.value.trim().parse::<usize>() {
        Ok(value) if value > 0 => Ok(value),
        _ => Err(invalid(entry, "a whole number, 1 or more")),
    }
}

fn percent(entry: &Entry, max: u64) -> Result<u64, PropsError> {
    match number(entry) {
        Ok(value) if value <= max => Ok(value),
        _ => Err(invalid(entry, &format!("a percentage from 0 to {max}"))),
    }
}

fn boolean(entry: &Entry) -> Result<bool, PropsError> {
    // Java's Boolean.valueOf: "true" in any case is true; ferromq refuses what is neither.
    match entry.value.trim().to_ascii_lowercase().as_str() {
        "true" => Ok(true),
        "false" => Ok(false),
        _ => Err(invalid(entry, "true or false")),
    }
}

fn run_type(entry: &Entry) -> Result<String, PropsError> {
    match entry.value.trim().to_ascii_lowercase().as_str() {
        "time" => Ok("time".into()),
        "count" => Ok("count".into()),
        _ => Err(invalid(entry, "time or count")),
    }
}

/// The plugin's destination names: `queue://NAME`, `topic://NAME`, and a bare name is a
/// topic.
fn destination(entry: &Entry) -> Result<DestinationName, PropsError> {
    let value = entry.value.trim();
    let lower = value.to_ascii_lowercase();
    if lower.starts_with("temp-queue://") || lower.starts_with("temp-topic://") {
        return Err(unsupported(entry, "use queue://NAME or topic://NAME"));
    }
    let text = if lower.starts_with("queue://") || lower.starts_with("topic://") {
        value.to_owned()
    } else {
        format!("topic://{value}")
    };
    text.parse().map_err(|error: super::super::LoadError| invalid(entry, &error.to_string()))
}

/// One `key=value` of a properties file: (line, key, value).
type Property = (usize, String, String);

/// Java's `Properties.load` format: `key=value`, `key: value` or `key value`; `#` and `!`
/// comments; a line ending in an odd number of backslashes continues on the next; the
/// escapes `\t \n \r \f \uXXXX` and `\X` for any other X. Returns (line, key, value).
pub(crate) fn parse_properties(text: &str) -> Result<Vec<Property>, (usize, String)> {
    let mut out = Vec::new();
    let mut lines = text.lines().enumerate().peekable();
    while let Some((index, raw)) = lines.next() {
        let number = index + 1;
        let first = raw.trim_start();
        if first.is_empty() || first.starts_with('#') || first.starts_with('!') {
            continue;
        }
        let mut logical = String::from(first);
        while ends_with_odd_backslashes(&logical) {
            logical.pop();
            match lines.next() {
                Some((_, next)) => logical.push_str(next.trim_start()),
                None => break,
            }
        }
        let (key, value) = split_key_value(&logical);
        let key = unescape(key).map_err(|why| (number, why))?;
        let value = unescape(value).map_err(|why| (number, why))?;
        out.push((number, key, value));
    }
    Ok(out)
}

fn ends_with_odd_backslashes(line: &str) -> bool {
    line.chars().rev().take_while(|c| *c == '\\').count() % 2 == 1
}

/// The key ends at the first unescaped `=`, `:` or white space; the separator is white
/// space, optionally around one `=` or `:`.
fn split_key_value(line: &str) -> (&str, &str) {
    let mut escaped = false;
    let mut end = line.len();
    for (at, c) in line.char_indices() {
        if escaped {
            escaped = false;
        } else if c == '\\' {
            escaped = true;
        } else if c == '=' || c == ':' || c.is_whitespace() {
            end = at;
            break;
        }
    }
    let key = &line[..end];
    let mut rest = line[end..].trim_start();
    if let Some(stripped) = rest.strip_prefix(['=', ':']) {
        rest = stripped.trim_start();
    }
    (key, rest)
}

fn unescape(text: &str) -> Result<String, String> {
    let mut out = String::with_capacity(text.len());
    let mut chars = text.chars();
    while let Some(c) = chars.next() {
        if c != '\\' {
            out.push(c);
            continue;
        }
        match chars.next() {
            Some('t') => out.push('\t'),
            Some('n') => out.push('\n'),
            Some('r') => out.push('\r'),
            Some('f') => out.push('\u{c}'),
            Some('u') => {
                let hex: String = chars.by_ref().take(4).collect();
                let code = u32::from_str_radix(&hex, 16)
                    .ok()
                    .filter(|_| hex.len() == 4)
                    .and_then(char::from_u32)
                    .ok_or_else(|| format!("malformed \\u escape `\\u{hex}`"))?;
                out.push(code);
            }
            Some(other) => out.push(other),
            None => {}
        }
    }
    Ok(out)
}

impl fmt::Display for RunBasis {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        match self {
            RunBasis::Time(duration) => write!(f, "for {} ms", millis(*duration)),
            RunBasis::Count(count) => write!(f, "{count} messages per client"),
        }
    }
}

impl PerfSettings {
    /// The protocol the broker URL names.
    pub fn protocol(&self) -> WireProtocol {
        self.broker.protocol()
    }
}

#[cfg(test)]
mod tests;
