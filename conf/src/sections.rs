//! The four sections of the configuration file, each a serde struct with a default for every
//! key, and the entries of the `[[virtual_topics]]` list.
//!
//! Every section struct is `#[serde(default, deny_unknown_fields)]`: a missing key takes its
//! default and an unknown key is an error. A list entry is `deny_unknown_fields` too, but has
//! required keys: only the list as a whole has a default. Durations are written in the file as whole milliseconds under a
//! key ending in `_ms`, and held here as [`Duration`].

use std::fmt;
use std::path::PathBuf;
use std::time::Duration;

use serde::de::{self, Deserializer, Visitor};
use serde::{Deserialize, Serialize, Serializer};

use crate::number;
use crate::uri::{ConnectorOptions, ConnectorUri, Scheme};

/// `[broker]`: who the broker is and where it keeps its data.
#[derive(Debug, Clone, PartialEq, Serialize, Deserialize)]
#[serde(default, deny_unknown_fields)]
pub struct BrokerConfig {
    /// The broker's name, as ActiveMQ's `brokerName`: shown in logs and sent to clients.
    /// Default `"localhost"`, as in ActiveMQ.
    pub name: String,
    /// Directory for the broker's data (the store, when a persistent one exists). Relative paths
    /// are relative to the working directory. Default `data`.
    pub data_dir: PathBuf,
    /// How long a graceful shutdown waits for connections to finish before closing them.
    /// `0` closes them at once. Key `shutdown_timeout_ms`, default 10 000.
    #[serde(rename = "shutdown_timeout_ms", with = "number::millis")]
    pub shutdown_timeout: Duration,
    /// Scheduled delivery: messages with the `AMQ_SCHEDULED_DELAY`, `_PERIOD`, `_REPEAT` and
    /// `_CRON` properties are held until due. Default true (ActiveMQ's `schedulerSupport`
    /// defaults to false); when false those properties are ignored.
    pub scheduler: bool,
    /// Bytes of messages all destinations together keep in memory (ActiveMQ's systemUsage
    /// `memoryUsage`); each destination also has its own limit,
    /// [`DestinationDefaults::memory_limit`]. Past it, queues keep persistent messages in the
    /// store only and page them in as consumers drain. Default 1 GiB, as ActiveMQ's
    /// `BrokerService`.
    #[serde(deserialize_with = "number::bytes")]
    pub memory_limit: u64,
    /// Bytes the temporary store may use (ActiveMQ's systemUsage `tempUsage`): where queues
    /// spill non-persistent messages beyond their memory limit, under `<data_dir>/tmp_storage`
    /// (wiped at every start; nothing in it survives a restart). Past it, non-persistent sends
    /// wait (or are refused, per `send_fail_if_no_space`) as persistent ones do for
    /// `[store] max_size`. 0 means no limit; otherwise at least 16 MiB (four of its 4 MiB data
    /// files). Default 50 GiB, as ActiveMQ's `BrokerService`. Only a broker that holds its data
    /// directory has a temporary store (the `ferromq` binary always does; an embedded broker
    /// on the memory store does not, and keeps non-persistent messages in memory).
    #[serde(deserialize_with = "number::bytes")]
    pub temp_limit: u64,
    /// What a send does when it finds no room (a destination or the broker over its memory
    /// limit with messages that cannot page out, or the store's write backlog full): `false`
    /// (the default, as ActiveMQ's systemUsage `sendFailIfNoSpace`) makes it wait until
    /// there is room; `true` refuses it (the JMS client throws
    /// `javax.jms.ResourceAllocationException`, a STOMP client gets an ERROR).
    pub send_fail_if_no_space: bool,
    /// When not 0, a send waits this long for room, then is refused as with
    /// `send_fail_if_no_space` (ActiveMQ's `sendFailIfNoSpaceAfterTimeout`). Key
    /// `send_fail_if_no_space_after_timeout_ms`, default 0 (no timeout).
    #[serde(rename = "send_fail_if_no_space_after_timeout_ms", with = "number::millis")]
    pub send_fail_if_no_space_after_timeout: Duration,
    /// When another broker holds the data directory's lock, wait for it and take over once
    /// it is released (its process stopped or died): the standby of an active/standby pair on
    /// a shared store, as ActiveMQ's shared file locker. Default false: refuse to start.
    pub standby: bool,
    /// How often a standby tries the lock (ActiveMQ's `lockAcquireSleepInterval`). Key
    /// `lock_retry_ms`, default 1000.
    #[serde(rename = "lock_retry_ms", with = "number::millis")]
    pub lock_retry: Duration,
}

impl Default for BrokerConfig {
    fn default() -> Self {
        BrokerConfig {
            name: "localhost".to_owned(),
            data_dir: PathBuf::from("data"),
            shutdown_timeout: Duration::from_millis(10_000),
            scheduler: true,
            memory_limit: 1 << 30,
            temp_limit: 50 << 30,
            send_fail_if_no_space: false,
            send_fail_if_no_space_after_timeout: Duration::ZERO,
            standby: false,
            lock_retry: Duration::from_millis(1000),
        }
    }
}

/// `[transport]`: the connectors the broker listens on and the limits it holds clients to.
#[derive(Debug, Clone, PartialEq, Serialize, Deserialize)]
#[serde(default, deny_unknown_fields)]
pub struct TransportConfig {
    /// Where to listen, as ActiveMQ transport connector URIs (see [`ConnectorUri`]).
    /// Default `["tcp://127.0.0.1:61616", "stomp://127.0.0.1:61613"]`: OpenWire and STOMP on
    /// ActiveMQ's ports, reachable from this host only.
    pub connectors: Vec<ConnectorUri>,
    /// Most simultaneous connections per connector; a connector's `maximumConnections` URI
    /// option overrides it. Default 1000, as ActiveMQ's sample `activemq.xml`.
    #[serde(deserialize_with = "number::whole")]
    pub max_connections: usize,
    /// A connection that has not completed its protocol handshake (STOMP `CONNECT`) this long
    /// after it was accepted is closed. Key `connect_timeout_ms`, default 30 000.
    #[serde(rename = "connect_timeout_ms", with = "number::millis")]
    pub connect_timeout: Duration,
    /// Largest frame accepted, in bytes; a connector's `wireFormat.maxFrameSize` URI option
    /// overrides it. Default 104 857 600 (100 MiB), as ActiveMQ.
    #[serde(deserialize_with = "number::bytes")]
    pub max_frame_size: usize,
    /// Most headers in one frame. Default 1000, as ActiveMQ's STOMP transport.
    #[serde(deserialize_with = "number::whole")]
    pub max_headers: usize,
    /// Longest header line (name, colon and value), in bytes. Default 10 240, as ActiveMQ's
    /// STOMP transport.
    #[serde(deserialize_with = "number::whole")]
    pub max_header_length: usize,
    /// How much later than the negotiated interval a client's heart-beat may arrive before the
    /// connection is considered dead: 1.5 allows half an interval of slack. Key
    /// `heart_beat_grace_multiplier`, default 1.5 (ActiveMQ: `transport.hbGracePeriodMultiplier`).
    #[serde(rename = "heart_beat_grace_multiplier", deserialize_with = "number::real")]
    pub heart_beat_grace: f64,
}

impl Default for TransportConfig {
    fn default() -> Self {
        TransportConfig {
            connectors: [(Scheme::OpenWire, 61616), (Scheme::Stomp, 61613)]
                .into_iter()
                .map(|(scheme, port)| ConnectorUri {
                    scheme,
                    host: "127.0.0.1".to_owned(),
                    port,
                    options: ConnectorOptions::default(),
                    warnings: Vec::new(),
                })
                .collect(),
            max_connections: 1000,
            connect_timeout: Duration::from_millis(30_000),
            max_frame_size: 104_857_600,
            max_headers: 1000,
            max_header_length: 10_240,
            heart_beat_grace: 1.5,
        }
    }
}

impl TransportConfig {
    /// The connection limit of `connector`: its `maximumConnections` option, else
    /// [`max_connections`](Self::max_connections).
    pub fn max_connections_for(&self, connector: &ConnectorUri) -> usize {
        connector.options.maximum_connections.unwrap_or(self.max_connections)
    }

    /// The frame size limit of `connector`: its `wireFormat.maxFrameSize` option, else
    /// [`max_frame_size`](Self::max_frame_size).
    pub fn max_frame_size_for(&self, connector: &ConnectorUri) -> usize {
        connector.options.max_frame_size.unwrap_or(self.max_frame_size)
    }
}

/// `[store]`: where messages are kept and how hard the broker tries to keep them.
#[derive(Debug, Clone, PartialEq, Serialize, Deserialize)]
#[serde(default, deny_unknown_fields)]
pub struct StoreConfig {
    /// Which store. Default [`StoreKind::Journal`].
    pub kind: StoreKind,
    /// When writes reach the disk. Default [`SyncMode::Always`].
    pub sync: SyncMode,
    /// How often [`SyncMode::Periodic`] syncs; accepted (and checked) with the other modes.
    /// Key `sync_interval_ms`, default 1000.
    #[serde(rename = "sync_interval_ms", with = "number::millis")]
    pub sync_interval: Duration,
    /// The most bytes the store may use (ActiveMQ's storeUsage); past it new persistent
    /// messages are refused while acks still work. 0 means no limit. Default 64 GiB.
    #[serde(deserialize_with = "number::bytes")]
    pub max_size: u64,
    /// Journal: the size of each data file, in bytes. Default 32 MiB.
    #[serde(deserialize_with = "number::bytes")]
    pub segment_size: u64,
    /// Journal: bytes written between index checkpoints. Default 8 MiB.
    #[serde(deserialize_with = "number::bytes")]
    pub checkpoint_bytes: u64,
    /// Journal: an idle journal checkpoints after this long without a write, so that
    /// acknowledged messages free their data files (and a full store frees room) even when
    /// nothing more is written. Key `checkpoint_interval_ms`, default 5000, as KahaDB's
    /// `checkpointInterval`.
    #[serde(rename = "checkpoint_interval_ms", with = "number::millis")]
    pub checkpoint_interval: Duration,
    /// Journal: a data file whose live fraction falls below this is compacted. Default 0.5.
    pub compaction_threshold: f64,
    /// Journal: refuse to start when a record in the middle of a data file is corrupt,
    /// instead of starting with everything before it. Default false.
    pub refuse_on_corruption: bool,
    /// LSM: the engine under `<data_dir>/lsm`. Default [`LsmEngine::Rocksdb`].
    pub engine: LsmEngine,
    /// Jdbc: the database, `sqlite://PATH` (a relative path is under `data_dir`) or
    /// `postgres://user:password@host:port/database`. Default `sqlite://ferromq.db`.
    pub url: String,
    /// Jdbc on PostgreSQL: how long the lease on the database (the row `ferromq_lock`) lasts
    /// on the database's clock. A broker takes it before opening the store and renews it while
    /// active; a standby takes over when it expires, so this bounds the failover time after a
    /// crash. An active broker that cannot renew stops serving a quarter of a lease before
    /// it could expire. Not used on SQLite (a local file: the data directory's lock covers
    /// it). Key `lease_ms`, default 10 000 (at least 300).
    #[serde(rename = "lease_ms", with = "number::millis")]
    pub lease: Duration,
    /// Jdbc on PostgreSQL: how often the active broker renews its lease. At most a third of
    /// `lease_ms`, so that a failed renewal is retried before the broker must stop serving.
    /// Key `lease_renew_ms`, default 2000.
    #[serde(rename = "lease_renew_ms", with = "number::millis")]
    pub lease_renew: Duration,
}

impl Default for StoreConfig {
    fn default() -> Self {
        StoreConfig {
            kind: StoreKind::Journal,
            sync: SyncMode::Always,
            sync_interval: Duration::from_millis(1000),
            max_size: 64 << 30,
            segment_size: 32 << 20,
            checkpoint_bytes: 8 << 20,
            checkpoint_interval: Duration::from_millis(5000),
            compaction_threshold: 0.5,
            refuse_on_corruption: false,
            engine: LsmEngine::Rocksdb,
            url: "sqlite://ferromq.db".to_string(),
            lease: Duration::from_millis(10_000),
            lease_renew: Duration::from_millis(2000),
        }
    }
}

/// The LSM store's engine; TOML `engine = "rocksdb"` or `"sled"`.
#[derive(Debug, Clone, Copy, PartialEq, Eq, Default, Serialize, Deserialize)]
#[serde(rename_all = "lowercase")]
pub enum LsmEngine {
    /// RocksDB (the system's librocksdb), as LevelDB over JNI in ActiveMQ.
    #[default]
    Rocksdb,
    /// sled, pure Rust, as LevelDB in Java.
    Sled,
}

/// The store implementation; TOML `kind = "journal"`, `"memory"`, `"lsm"` or `"jdbc"`.
#[derive(Debug, Clone, Copy, PartialEq, Eq, Default)]
pub enum StoreKind {
    /// The journal store under `<data_dir>/journal`: append-only data files, group commit.
    #[default]
    Journal,
    /// Messages live in memory and are lost when the broker stops.
    Memory,
    /// The LSM store under `<data_dir>/lsm`, on [`StoreConfig::engine`].
    Lsm,
    /// The SQL store: SQLite or PostgreSQL, per [`StoreConfig::url`].
    Jdbc,
}

impl StoreKind {
    /// Stores that exist today, by their TOML name.
    const AVAILABLE: &'static [(&'static str, StoreKind)] = &[
        ("journal", StoreKind::Journal),
        ("memory", StoreKind::Memory),
        ("lsm", StoreKind::Lsm),
        ("jdbc", StoreKind::Jdbc),
    ];
    /// Stores ferromq plans (see DESIGN.md); refused with a reason that says so, not as unknown.
    const PLANNED: &'static [&'static str] = &[];

    /// The name used in the configuration file.
    pub fn as_str(self) -> &'static str {
        match self {
            StoreKind::Journal => "journal",
            StoreKind::Memory => "memory",
            StoreKind::Lsm => "lsm",
            StoreKind::Jdbc => "jdbc",
        }
    }

    fn available_names() -> String {
        let names: Vec<&str> = Self::AVAILABLE.iter().map(|(name, _)| *name).collect();
        names.join(", ")
    }
}

impl fmt::Display for StoreKind {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        f.write_str(self.as_str())
    }
}

impl Serialize for StoreKind {
    fn serialize<S: Serializer>(&self, serializer: S) -> Result<S::Ok, S::Error> {
        serializer.serialize_str(self.as_str())
    }
}

impl<'de> Deserialize<'de> for StoreKind {
    fn deserialize<D: Deserializer<'de>>(deserializer: D) -> Result<Self, D::Error> {
        struct KindVisitor;
        impl Visitor<'_> for KindVisitor {
            type Value = StoreKind;
            fn expecting(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
                write!(f, "a store kind ({})", StoreKind::available_names())
            }
            fn visit_str<E: de::Error>(self, name: &str) -> Result<StoreKind, E> {
                if let Some((_, kind)) = StoreKind::AVAILABLE.iter().find(|(n, _)| *n == name) {
                    return Ok(*kind);
                }
                let available = StoreKind::available_names();
                if StoreKind::PLANNED.contains(&name) {
                    return Err(E::custom(format_args!(
                        "store kind `{name}` is not implemented yet (available: {available})"
                    )));
                }
                Err(E::custom(format_args!("unknown store kind `{name}` (available: {available})")))
            }
        }
        deserializer.deserialize_str(KindVisitor)
    }
}

/// When the store forces writes to disk; TOML `"always"`, `"periodic"` or `"never"`.
#[derive(Debug, Clone, Copy, PartialEq, Eq, Default, Serialize, Deserialize)]
#[serde(rename_all = "lowercase")]
pub enum SyncMode {
    /// Before a persistent send is acknowledged (ActiveMQ's default).
    #[default]
    Always,
    /// Every [`StoreConfig::sync_interval`]; a crash loses at most that much.
    Periodic,
    /// Left to the operating system.
    Never,
}

/// `[destinations]`: defaults applied to every destination.
#[derive(Debug, Clone, PartialEq, Serialize, Deserialize)]
#[serde(default, deny_unknown_fields)]
pub struct DestinationDefaults {
    /// How many queues may exist in all; a client that uses one more new queue is refused
    /// (STOMP ERROR, JMS `ResourceAllocationException`, AMQP `amqp:resource-limit-exceeded`)
    /// and nothing is created. Each queue costs about 10 KiB beside its messages (a task, its
    /// channel, the routing entry, the store's index). Queues recovered at start and
    /// dead-letter queues count but are never refused. `-1` (the default) for no limit, as
    /// ActiveMQ's `maxDestinations`: creating a queue takes the admin right when
    /// authorization is on, so only trusted users can create them.
    pub max_destinations: i64,
    /// How many unacknowledged messages a queue consumer may hold when it asks for no prefetch
    /// of its own. Default 1000, as ActiveMQ's queue prefetch.
    #[serde(deserialize_with = "number::whole")]
    pub queue_prefetch: u32,
    /// How often every queue is swept for expired messages, which are dead-lettered or
    /// dropped (see [`DeadLetterConfig`](crate::DeadLetterConfig)); expired messages are never
    /// delivered, swept or not. `0` turns the sweep off. Key `expire_messages_period_ms`,
    /// default 30 000, as ActiveMQ's `expireMessagesPeriod`.
    #[serde(rename = "expire_messages_period_ms", with = "number::millis")]
    pub expire_messages_period: Duration,
    /// Bytes of messages one destination (a queue, a durable subscription, a topic
    /// subscriber's queue) keeps in memory, ready or in flight, as ActiveMQ's policy
    /// `memoryLimit`. Past it a queue keeps only its first messages (in delivery order) in
    /// memory and pages the rest in from the store (non-persistent messages: from the
    /// temporary store, see [`BrokerConfig::temp_limit`]) as consumers drain. Default 64 MiB.
    #[serde(deserialize_with = "number::bytes")]
    pub memory_limit: u64,
}

impl Default for DestinationDefaults {
    fn default() -> Self {
        DestinationDefaults {
            max_destinations: -1,
            queue_prefetch: 1000,
            expire_messages_period: Duration::from_millis(30_000),
            memory_limit: 64 << 20,
        }
    }
}

/// One `[[virtual_topics]]` entry, as ActiveMQ's
/// `<virtualDestinationInterceptor><virtualTopic name=".." prefix=".."/>`: messages sent to a
/// topic matching [`name`](Self::name) also go to each consumer queue named
/// `<prefix><topic name>`, one queue per consumer group.
///
/// In the file `name` is required and `prefix` defaults to [`DEFAULT_PREFIX`](Self::DEFAULT_PREFIX).
/// `VirtualTopicConfig::default()` is ActiveMQ's default entry, the one
/// [`Config::virtual_topics`](crate::Config::virtual_topics) holds when the file has none:
/// `{ name = "VirtualTopic.>", prefix = "Consumer.*." }`.
#[derive(Debug, Clone, PartialEq, Serialize, Deserialize)]
#[serde(deny_unknown_fields)]
pub struct VirtualTopicConfig {
    /// Topic name pattern (ActiveMQ wildcards: `.` levels, `*` one level, `>` the rest) of the
    /// topics that are virtual.
    pub name: String,
    /// Prefix of the consumer queues that receive each message: `<prefix><topic name>`, where
    /// `*` in the prefix matches one level (the consumer group). ActiveMQ's default is
    /// `"Consumer.*."`.
    #[serde(default = "VirtualTopicConfig::default_prefix")]
    pub prefix: String,
}

impl VirtualTopicConfig {
    /// The name of ActiveMQ's default virtual topic entry: every topic under `VirtualTopic.`.
    pub const DEFAULT_NAME: &'static str = "VirtualTopic.>";
    /// The prefix an entry gets when it has none, as ActiveMQ's `virtualTopic`.
    pub const DEFAULT_PREFIX: &'static str = "Consumer.*.";

    fn default_prefix() -> String {
        Self::DEFAULT_PREFIX.to_owned()
    }
}

impl Default for VirtualTopicConfig {
    fn default() -> Self {
        VirtualTopicConfig { name: Self::DEFAULT_NAME.to_owned(), prefix: Self::default_prefix() }
    }
}
