//! Destination statistics: what `/api/destinations`, `/metrics` and `ferromq dstat` show.
//!
//! Nothing here runs on the hot path. Each queue task keeps its own counters as plain fields
//! (it alone touches them) and answers [`QueueCommand::Stats`](super::queue::QueueCommand);
//! the only counter kept outside a queue task is a topic's publish count, bumped under the
//! routing lock the send already holds. Producers are counted per destination by
//! [`ProducerRegistration`]s the adapters hold while a producer lives. A snapshot is taken
//! by collecting queue handles under the routing lock, then asking each queue without it.
//!
//! A topic's numbers are those of its subscriptions (each a queue, durable or not), except
//! `enqueued`, which counts the messages published to the topic: a message that reaches three
//! subscribers is enqueued once on the topic, and dequeued once by each of them (as in
//! ActiveMQ).

use std::collections::HashMap;
use std::sync::Arc;

use serde::{Deserialize, Serialize};

use super::queue::QueueStats;

/// What one queue task costs beside the messages it holds, for the broker's memory figure:
/// the task and its future, its command channel, its routing entry and counters, and the
/// store's index of it. Measured as the `ferromq` binary's resident memory grown by 20 000
/// queues made by STOMP SUBSCRIBE/UNSUBSCRIBE, holding no message: 8.5 to 8.8 KiB each over
/// the journal store (three runs; 9.3 KiB at 50 000 in the report that asked for this), 6.0
/// KiB over the memory store, which keeps no index of its own. The figure is an estimate: it is reported
/// (`/api/broker`, `/metrics`), not counted against `[broker] memory_limit`.
pub const QUEUE_OVERHEAD_BYTES: u64 = 9 << 10;

/// Whether a destination is a queue or a topic, as the admin API names it.
#[derive(Debug, Clone, Copy, PartialEq, Eq, PartialOrd, Ord, Hash, Serialize, Deserialize)]
#[serde(rename_all = "lowercase")]
pub enum StatsKind {
    Queue,
    Topic,
}

impl StatsKind {
    /// `"queue"` or `"topic"`: the path segment of `/api/destinations/{kind}/{name}` and the
    /// `kind` label of the metrics.
    pub fn as_str(self) -> &'static str {
        match self {
            StatsKind::Queue => "queue",
            StatsKind::Topic => "topic",
        }
    }

    /// Parses [`as_str`](Self::as_str)'s names.
    pub fn parse(text: &str) -> Option<StatsKind> {
        match text {
            "queue" => Some(StatsKind::Queue),
            "topic" => Some(StatsKind::Topic),
            _ => None,
        }
    }
}

/// One destination's counters. Counts "since" are since the broker started.
#[derive(Debug, Clone, PartialEq, Eq, Serialize, Deserialize)]
pub struct DestinationStats {
    pub name: String,
    pub kind: StatsKind,
    /// Messages waiting for a consumer (ActiveMQ's queue size, less what is in flight).
    pub pending: u64,
    /// Messages delivered to consumers and not acknowledged yet.
    pub in_flight: u64,
    /// Messages sent to the destination since start.
    pub enqueued: u64,
    /// Messages acknowledged by consumers since start.
    pub dequeued: u64,
    /// Messages that expired before delivery since start (dead-lettered or dropped).
    pub expired: u64,
    /// Messages moved to a dead-letter queue (or dropped) since start for another reason: a
    /// poison ack, too many redeliveries.
    pub dead_lettered: u64,
    /// Producers that named this destination when they were created (OpenWire). Anonymous
    /// producers and STOMP senders are not counted, as in ActiveMQ.
    pub producers: u64,
    /// Consumers attached (a topic: the consumers of its subscriptions).
    pub consumers: u64,
    /// Bytes of message bodies and headers held ([`store::Message::memory_size`]).
    pub memory_bytes: u64,
    /// The destination's memory limit, from its policy (a topic's applies to each of its
    /// subscriptions).
    #[serde(default)]
    pub memory_limit_bytes: u64,
    /// Messages discarded since start by the pending message limit of non-durable topic
    /// subscribers (see [`slow`](super::slow)).
    #[serde(default)]
    pub discarded: u64,
    /// Consumers that are slow now: prefetch full while messages wait for them.
    #[serde(default)]
    pub slow_consumers: u64,
    /// A topic's subscriptions, durable or not; empty for a queue.
    #[serde(default, skip_serializing_if = "Vec::is_empty")]
    pub subscriptions: Vec<SubscriptionStats>,
}

impl DestinationStats {
    pub(crate) fn new(name: &str, kind: StatsKind) -> DestinationStats {
        DestinationStats {
            name: name.to_owned(),
            kind,
            pending: 0,
            in_flight: 0,
            enqueued: 0,
            dequeued: 0,
            expired: 0,
            dead_lettered: 0,
            producers: 0,
            consumers: 0,
            memory_bytes: 0,
            memory_limit_bytes: 0,
            discarded: 0,
            slow_consumers: 0,
            subscriptions: Vec::new(),
        }
    }

    /// Adds a queue's counters (every one but `enqueued` for a topic, which counts publishes).
    pub(crate) fn add(&mut self, stats: &QueueStats, count_enqueued: bool) {
        self.pending += stats.ready as u64;
        self.in_flight += stats.in_flight as u64;
        if count_enqueued {
            self.enqueued += stats.enqueued;
        }
        self.dequeued += stats.acked;
        self.expired += stats.expired;
        self.dead_lettered += stats.dead_lettered;
        self.consumers += stats.consumers as u64;
        self.memory_bytes += stats.memory_bytes as u64;
        self.discarded += stats.discarded;
        self.slow_consumers += stats.slow_consumers as u64;
    }
}

/// One subscription of a topic.
#[derive(Debug, Clone, PartialEq, Eq, Serialize, Deserialize)]
pub struct SubscriptionStats {
    /// A durable subscription's `client id:subscription name`; for a non-durable one, the
    /// connection and consumer it belongs to.
    pub name: String,
    pub durable: bool,
    pub pending: u64,
    pub in_flight: u64,
    pub enqueued: u64,
    pub dequeued: u64,
    pub consumers: u64,
    /// Messages the pending message limit discarded.
    #[serde(default)]
    pub discarded: u64,
    /// Its consumer is slow now.
    #[serde(default)]
    pub slow: bool,
}

/// How many messages have been published to each topic; kept in the routing table.
#[derive(Debug, Default)]
pub(crate) struct TopicCounters {
    pub(crate) published: HashMap<Arc<str>, u64>,
}

impl TopicCounters {
    /// A message was published to `topic` (once, however many subscriptions it reaches).
    pub fn published(&mut self, topic: &Arc<str>) {
        match self.published.get_mut(topic) {
            Some(count) => *count += 1,
            None => {
                self.published.insert(topic.clone(), 1);
            }
        }
    }

    /// Every topic published to, with its count.
    pub fn topics(&self) -> impl Iterator<Item = (&Arc<str>, u64)> {
        self.published.iter().map(|(topic, count)| (topic, *count))
    }

    /// Forgets a removed topic.
    pub fn forget(&mut self, topic: &str) {
        self.published.remove(topic);
    }
}
