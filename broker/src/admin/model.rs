//! The JSON the admin endpoint answers with. Every type deserializes too: `ferromq dstat`
//! and the tests read it back with the same types.

use serde::{Deserialize, Serialize};

use crate::transport::ConnectionStats;

/// `GET /api/broker`: the broker as a whole.
#[derive(Debug, Clone, PartialEq, Eq, Serialize, Deserialize)]
pub struct BrokerStats {
    /// `broker.name`.
    pub name: String,
    /// ferromq's version.
    pub version: String,
    /// Seconds since the broker started.
    pub uptime_seconds: u64,
    /// Open connections per protocol, and every connection accepted.
    pub connections: ConnectionStats,
    /// How many queues and topics exist (temporary ones not counted).
    pub destinations: DestinationCounts,
    /// Bytes of messages held by every destination (see `DestinationStats::memory_bytes`),
    /// plus an estimate of what each queue costs beside its messages
    /// (`core::statistics::QUEUE_OVERHEAD_BYTES` per queue and per topic subscription).
    pub memory_bytes: u64,
    /// The broker's memory limit (`[broker] memory_limit`, ActiveMQ's systemUsage
    /// memoryUsage); optional so that older answers still read.
    pub memory_limit_bytes: Option<u64>,
    /// What the store says of its size.
    pub store: StoreStats,
    /// The temporary store's usage (ActiveMQ's systemUsage tempUsage), where queues spill
    /// non-persistent messages; `None` for a broker without one (no data directory held).
    #[serde(default)]
    pub temp: Option<TempStats>,
}

/// The temporary store's usage.
#[derive(Debug, Clone, Copy, PartialEq, Eq, Serialize, Deserialize)]
pub struct TempStats {
    /// Bytes of its data files (0 until a queue first spills: it is opened then).
    pub used_bytes: u64,
    /// `[broker] temp_limit`; 0 when there is no limit.
    pub limit_bytes: u64,
    /// Non-persistent sends wait (or are refused) because it is near its limit.
    pub full: bool,
}

/// How many destinations of each kind exist.
#[derive(Debug, Clone, Copy, PartialEq, Eq, Default, Serialize, Deserialize)]
pub struct DestinationCounts {
    pub queues: u64,
    pub topics: u64,
}

/// The store's name and usage ([`store::MessageStore::usage`]).
#[derive(Debug, Clone, PartialEq, Eq, Serialize, Deserialize)]
pub struct StoreStats {
    /// `"journal"` or `"memory"`.
    pub kind: String,
    pub used_bytes: u64,
    /// 0 when the store has no limit (`store.max_size = 0`, or the memory store).
    pub limit_bytes: u64,
}

/// The body of every error answer.
#[derive(Debug, Clone, PartialEq, Eq, Serialize, Deserialize)]
pub struct ErrorBody {
    /// The HTTP status again.
    pub status: u16,
    /// What went wrong, for a person.
    pub error: String,
}

/// `GET /api/status`: whether the broker serves, and since when (issue 12's active/standby).
#[derive(Debug, Clone, PartialEq, Eq, Serialize, Deserialize)]
pub struct BrokerStatus {
    /// `broker.name`.
    pub name: String,
    /// `waiting` (a standby waiting for the data directory's lock or the PostgreSQL lease,
    /// see `waiting_for`), `starting` (recovering
    /// the store) or `active`.
    pub role: BrokerRole,
    /// When it took that role, in milliseconds since the Unix epoch.
    pub since_unix_ms: u64,
    /// While `waiting`: what for, `the data directory's lock` or `the PostgreSQL lease (held
    /// by ...)`. Absent otherwise (and from brokers older than this field).
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub waiting_for: Option<String>,
}

impl BrokerStatus {
    /// What a broker that does not serve is doing, for a person: `is a standby, waiting for
    /// the data directory's lock`, or `is starting (recovering its store)`.
    pub fn doing(&self) -> String {
        match self.role {
            BrokerRole::Waiting => format!(
                "is a standby, waiting for {}",
                self.waiting_for.as_deref().unwrap_or(DATA_DIR_LOCK)
            ),
            BrokerRole::Starting => "is starting (recovering its store)".to_owned(),
            BrokerRole::Active => "is active".to_owned(),
        }
    }
}

/// What a standby on a shared data directory waits for.
pub const DATA_DIR_LOCK: &str = "the data directory's lock";

/// What a broker is doing; see [`BrokerStatus`].
#[derive(Debug, Clone, Copy, PartialEq, Eq, Serialize, Deserialize)]
#[serde(rename_all = "snake_case")]
pub enum BrokerRole {
    Waiting,
    Starting,
    Active,
}

// ---------------------------------------------------------------------------------------------
// Operations (see `operations.rs` and /api/openapi.json)

/// `GET /api/token`: what state-changing requests send as `X-Ferromq-Token`.
#[derive(Debug, Clone, PartialEq, Eq, Serialize, Deserialize)]
pub struct AdminToken {
    pub token: String,
}

/// A queue or topic, as operations name it.
#[derive(Debug, Clone, PartialEq, Eq, Serialize, Deserialize)]
pub struct DestinationRef {
    /// `queue` or `topic`.
    pub kind: String,
    pub name: String,
}

/// One message of a queue, as a browse shows it.
#[derive(Debug, Clone, PartialEq, Serialize, Deserialize)]
pub struct MessageView {
    /// The message id as its protocol shows it (JMSMessageID, STOMP `message-id`).
    pub id: String,
    pub destination: DestinationRef,
    pub timestamp_ms: Option<u64>,
    pub expiration_ms: Option<u64>,
    pub priority: u8,
    pub persistent: bool,
    /// Delivered to a consumer before.
    pub redelivered: bool,
    /// How many times it was delivered (0: never).
    pub delivery_count: u32,
    pub correlation_id: Option<String>,
    /// `queue://NAME` or `topic://NAME`.
    pub reply_to: Option<String>,
    /// JMSType.
    #[serde(rename = "type")]
    pub message_type: Option<String>,
    /// JMSXGroupID.
    pub group_id: Option<String>,
    /// Application properties: numbers, strings, booleans, null; byte arrays as base64.
    pub properties: serde_json::Map<String, serde_json::Value>,
    /// `text`, `bytes`, `map`, `object`, `stream` or `none`.
    pub body_type: String,
    pub body_size: u64,
    /// Text: the text, cut at the preview size; bytes, object and stream: base64 of the first
    /// bytes; map: the map as a JSON object (as text). `None` without a body.
    pub body_preview: Option<String>,
    /// The preview is not the whole body.
    pub body_truncated: bool,
}

/// `GET /api/destinations/queue/{name}/messages`: a page of a queue's messages.
#[derive(Debug, Clone, PartialEq, Serialize, Deserialize)]
pub struct MessagePage {
    /// Messages that match, among those looked at (all in memory, and the stored ones up to
    /// 65,536 beyond).
    pub total: u64,
    pub offset: u64,
    pub messages: Vec<MessageView>,
}

/// `POST /api/destinations/{kind}/{name}/messages`: a message to send.
#[derive(Debug, Clone, PartialEq, Serialize, Deserialize)]
pub struct SendRequest {
    pub body: String,
    /// `text` (the default) or `bytes` (`body` is base64).
    #[serde(default = "text_body")]
    pub body_type: String,
    #[serde(default = "yes")]
    pub persistent: bool,
    #[serde(default)]
    pub priority: Option<u8>,
    #[serde(default)]
    pub ttl_ms: Option<u64>,
    #[serde(default)]
    pub correlation_id: Option<String>,
    /// A queue or topic: `queue://NAME`, `topic://NAME`, or a plain name (a queue).
    #[serde(default)]
    pub reply_to: Option<String>,
    #[serde(default, rename = "type")]
    pub message_type: Option<String>,
    /// Strings, numbers (integers as longs, others as doubles) and booleans.
    #[serde(default)]
    pub properties: serde_json::Map<String, serde_json::Value>,
}

fn text_body() -> String {
    "text".to_owned()
}

fn yes() -> bool {
    true
}

/// `POST /api/destinations/queue/{name}/move`.
#[derive(Debug, Clone, PartialEq, Eq, Serialize, Deserialize)]
pub struct MoveRequest {
    /// The target queue's name.
    pub to: String,
    #[serde(default)]
    pub selector: Option<String>,
    /// Copy: the messages stay in the source too.
    #[serde(default)]
    pub copy: bool,
    #[serde(default)]
    pub limit: Option<u64>,
}

/// `POST /api/destinations/queue/{name}/retry`.
#[derive(Debug, Clone, PartialEq, Eq, Default, Serialize, Deserialize)]
pub struct RetryRequest {
    #[serde(default)]
    pub selector: Option<String>,
    #[serde(default)]
    pub limit: Option<u64>,
}

/// The answer of a send: the new message's id.
#[derive(Debug, Clone, PartialEq, Eq, Serialize, Deserialize)]
pub struct Sent {
    pub id: String,
}

/// The answer of a purge and of a message's removal.
#[derive(Debug, Clone, Copy, PartialEq, Eq, Serialize, Deserialize)]
pub struct Removed {
    pub removed: u64,
}

/// The answer of a destination's deletion.
#[derive(Debug, Clone, Copy, PartialEq, Eq, Serialize, Deserialize)]
pub struct Deleted {
    pub deleted: bool,
}

/// The answer of a move or copy.
#[derive(Debug, Clone, Copy, PartialEq, Eq, Serialize, Deserialize)]
pub struct Moved {
    pub moved: u64,
}

/// The answer of a retry.
#[derive(Debug, Clone, Copy, PartialEq, Eq, Serialize, Deserialize)]
pub struct RetryOutcome {
    pub retried: u64,
    /// Matching messages left: no original destination, or a topic as theirs.
    pub skipped: u64,
}

/// `GET /api/consumers`: one consumer.
#[derive(Debug, Clone, PartialEq, Eq, Serialize, Deserialize)]
pub struct ConsumerView {
    /// Its connection's id as its advisories announce it.
    pub connection_id: String,
    /// Its id as its advisories name it.
    pub consumer_id: String,
    pub destination: DestinationRef,
    pub selector: Option<String>,
    pub prefetch: u32,
    /// Delivered to it and not acknowledged yet.
    pub in_flight: u64,
    /// `CLIENT_ID:NAME` of the durable subscription it consumes, if any.
    pub durable_subscription: Option<String>,
}

/// `GET /api/subscriptions`: one durable subscription, active or offline.
#[derive(Debug, Clone, PartialEq, Eq, Serialize, Deserialize)]
pub struct DurableSubscriptionView {
    pub client_id: String,
    pub subscription_name: String,
    pub topic: String,
    pub selector: Option<String>,
    /// A consumer is attached.
    pub active: bool,
    /// Messages waiting for it.
    pub pending: u64,
}

/// The answer of a durable subscription's removal.
#[derive(Debug, Clone, Copy, PartialEq, Eq, Serialize, Deserialize)]
pub struct SubscriptionRemoved {
    pub removed: bool,
}

/// `GET /api/connections`: one open connection.
#[derive(Debug, Clone, PartialEq, Eq, Serialize, Deserialize)]
pub struct ConnectionView {
    /// Its id as its advisories announce it (OpenWire's ConnectionId, or the broker's
    /// `ID:ferromq-connection-N`): what [`ConsumerView::connection_id`] and
    /// [`ProducerView::connection_id`] name, and what `DELETE /api/connections/{id}` takes.
    pub id: String,
    /// `openwire`, `stomp`, `amqp` or `mqtt`.
    pub protocol: String,
    /// The client's address, `ip:port`.
    pub remote: String,
    pub client_id: Option<String>,
    /// The user it logged in as (none with authentication off).
    pub user: Option<String>,
    /// When its protocol started (after any TLS or WebSocket handshake), in milliseconds since
    /// the Unix epoch.
    pub connected_since_ms: u64,
    pub consumers: u64,
    pub producers: u64,
}

/// `GET /api/producers`: one producer.
#[derive(Debug, Clone, PartialEq, Eq, Serialize, Deserialize)]
pub struct ProducerView {
    /// Its connection's id, as [`ConnectionView::id`].
    pub connection_id: String,
    /// Its id as its protocol names it (OpenWire's ProducerId; the broker's for the others).
    pub producer_id: String,
    /// `None`: an anonymous producer (every message names its destination).
    pub destination: Option<DestinationRef>,
    /// Messages it sent since it was created.
    pub sent: u64,
}

/// The answer of a connection's close.
#[derive(Debug, Clone, Copy, PartialEq, Eq, Serialize, Deserialize)]
pub struct ConnectionClosed {
    pub closed: bool,
}
