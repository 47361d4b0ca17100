//! Types every part of the core shares: ids, acknowledgement modes, the errors it reports,
//! the names of composite parts and virtual topic rules. A leaf: it uses no other core module
//! but `wildcard`, so every module can use it.

use store::{Destination, StoreError};

use super::wildcard::DestinationFilter;

/// A map keyed by what clients choose (destination names, their producer, consumer and
/// transaction ids): `ahash`'s hasher, seeded per process, about as fast as FxHash on such
/// keys (SipHash was 4.5% of the broker's instructions in S1), and no client can pick keys
/// that collide. Maps keyed by the broker's own ids use FxHash.
pub(crate) type ClientKeyed<K, V> = std::collections::HashMap<K, V, ahash::RandomState>;

/// Identifies a consumer across the broker.
#[derive(Debug, Clone, Copy, PartialEq, Eq, Hash, PartialOrd, Ord)]
pub struct ConsumerId(pub u64);

/// Identifies a client connection across the broker (what it owns: temporary destinations,
/// a client id; whose messages a no-local subscriber skips).
#[derive(Debug, Clone, Copy, PartialEq, Eq, Hash, PartialOrd, Ord)]
pub struct ConnectionId(pub u64);

impl ConnectionId {
    /// What the broker itself sends as (scheduled fires, advisories): no client connection.
    pub const BROKER: ConnectionId = ConnectionId(0);
}

impl std::fmt::Display for ConnectionId {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        self.0.fmt(f)
    }
}

/// How a consumer acknowledges.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub enum AckMode {
    /// The broker counts a message as acknowledged once it has been written to the client.
    Auto,
    /// An ack covers this message and every earlier one delivered to the consumer.
    Client,
    /// An ack covers exactly one message.
    ClientIndividual,
}

/// Failures the core reports to adapters.
#[derive(Debug, thiserror::Error)]
#[non_exhaustive]
pub enum CoreError {
    #[error(transparent)]
    Store(#[from] StoreError),
    #[error("{0} destinations are not supported yet")]
    Unsupported(&'static str),
    #[error("cannot send to `{0}`: it is a wildcard pattern, not a destination")]
    WildcardSend(String),
    #[error(
        "durable subscription `{name}` of client `{client_id}` already has an active consumer"
    )]
    DurableInUse { client_id: String, name: String },
    #[error("durable subscription `{name}` of client `{client_id}` does not exist")]
    NoSuchDurable { client_id: String, name: String },
    #[error("temporary destination {0} does not exist (its connection may have closed)")]
    NoSuchTemporary(String),
    #[error("temporary destination {0} belongs to another connection")]
    NotOwner(String),
    #[error("{0} is not a temporary destination")]
    NotTemporary(String),
    #[error("the broker is shutting down")]
    ShuttingDown,
    #[error("invalid message schedule: {0}")]
    InvalidSchedule(String),
    /// A send found no room (a memory limit, the store's backlog) and the flow control
    /// settings say to refuse it (ActiveMQ's `ResourceAllocationException`).
    #[error("{0}")]
    NoSpace(String),
    /// Creating the queue would pass `[destinations] max_destinations` or its policy's
    /// `max_destinations` (ActiveMQ's `maxDestinations`); nothing was created.
    #[error(
        "cannot create {destination}: the maximum number of destinations allowed ({limit}) \
         {scope} has already been reached"
    )]
    TooManyDestinations { destination: String, limit: usize, scope: String },
}

/// The advisory topic announcing temporary queues.
pub const ADVISORY_TEMP_QUEUE: &str = "ActiveMQ.Advisory.TempQueue";
/// The advisory topic announcing temporary topics.
pub const ADVISORY_TEMP_TOPIC: &str = "ActiveMQ.Advisory.TempTopic";
/// Property of an advisory message: the qualified destination it is about.
pub const ADVISORY_DESTINATION: &str = "ferromq.advisory.destination";
/// Property of an advisory message: "add" or "remove".
pub const ADVISORY_OPERATION: &str = "ferromq.advisory.operation";

/// The destinations a possibly composite destination (`A,B`, ActiveMQ's syntax) names. A
/// part with a `queue://` or `topic://` prefix has that kind; others share the composite's.
pub fn composite_parts(destination: &Destination) -> Vec<Destination> {
    if !destination.name.contains(',') {
        return vec![destination.clone()];
    }
    destination
        .name
        .split(',')
        .map(str::trim)
        .filter(|part| !part.is_empty())
        .map(|part| {
            Destination::parse_qualified(part)
                .unwrap_or_else(|| Destination { kind: destination.kind, name: part.into() })
        })
        .collect()
}

/// A virtual topic: messages sent to a topic matching `name` also go to every queue named
/// `<prefix><topic>`, where a `*` in the prefix stands for the consumer group.
#[derive(Debug, Clone)]
pub struct VirtualTopicRule {
    pub name: DestinationFilter,
    pub prefix: String,
}

/// Milliseconds since the Unix epoch.
pub(crate) fn now_millis() -> i64 {
    std::time::SystemTime::now()
        .duration_since(std::time::UNIX_EPOCH)
        .map(|d| d.as_millis() as i64)
        .unwrap_or(0)
}

/// Runs work that blocks its thread for long (a store read that misses the page cache, a
/// round trip to PostgreSQL, a wait of seconds while the database is unreachable, a thousand
/// selectors of a topic send) without
/// taking a runtime worker out of service: the broker runs on two workers on a 2-core
/// machine, and a queue paging in must not stall every connection and timer (the lease
/// renewal of an active broker among them). `block_in_place` hands this worker's other tasks
/// to another thread for the duration; the queue's own task waits, as it must. On a
/// current-thread runtime (some embedding tests) the read runs in place.
pub(crate) fn off_the_runtime<T>(read: impl FnOnce() -> T) -> T {
    match tokio::runtime::Handle::try_current().map(|runtime| runtime.runtime_flavor()) {
        Ok(tokio::runtime::RuntimeFlavor::MultiThread) => tokio::task::block_in_place(read),
        _ => read(),
    }
}
