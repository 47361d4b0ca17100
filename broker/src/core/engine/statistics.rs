//! The statistics the core collects on demand (see [`statistics`](crate::core::statistics)),
//! and the producer registrations that count producers per destination and list each
//! producer (its connection, destination and sent messages) for the admin endpoint.

use std::collections::{BTreeMap, BTreeSet, HashMap};
use std::sync::atomic::{AtomicU64, Ordering};
use std::sync::Arc;

use parking_lot::Mutex;
use store::{Destination, DestinationKind};

use super::Core;
use crate::core::queue::{QueueHandle, QueueStats};
use crate::core::statistics::*;
use crate::core::types::{composite_parts, ConnectionId};
use crate::core::wildcard::DestinationFilter;

/// The producers of each destination, and every producer, shared by the core and every
/// registration.
#[derive(Debug, Default)]
pub(crate) struct ProducerCounts {
    counts: Mutex<HashMap<Destination, u64>>,
    /// Every registered producer, by the key of its registration.
    live: Mutex<HashMap<u64, Arc<ProducerEntry>>>,
    next_key: AtomicU64,
}

/// One registered producer, as the admin endpoint lists it.
#[derive(Debug)]
struct ProducerEntry {
    connection: ConnectionId,
    id: String,
    /// `None`: an anonymous producer (each send names its destination).
    destination: Option<Destination>,
    /// The queues and topics it is counted on (each part of a composite destination).
    counted_on: Vec<Destination>,
    /// Messages it sent (counted by its adapter as it hands them to the core).
    sent: AtomicU64,
}

/// A producer, as the admin endpoint lists it.
#[derive(Debug, Clone)]
pub struct ProducerListing {
    /// The core's id of its connection.
    pub connection: ConnectionId,
    /// Its connection's id as its advisories announce it (see [`Core::connection_name`]).
    pub connection_name: String,
    /// Its id as its protocol (or, without one, the broker) names it.
    pub producer: String,
    pub destination: Option<Destination>,
    pub sent: u64,
}

impl ProducerCounts {
    pub(super) fn of(&self, destination: &Destination) -> u64 {
        self.counts.lock().get(destination).copied().unwrap_or(0)
    }
}

/// A producer counted on its destination (each part of a composite one) while this lives:
/// adapters keep it beside their producer and drop it when the producer or its connection
/// goes, so no count can outlive its producer.
pub struct ProducerRegistration {
    counts: Arc<ProducerCounts>,
    /// Its key in [`ProducerCounts::live`], and its entry there.
    key: u64,
    entry: Arc<ProducerEntry>,
    /// The broker, to announce the producer's stop (an advisory) when it goes.
    core: std::sync::Weak<Core>,
}

impl std::fmt::Debug for ProducerRegistration {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        f.debug_struct("ProducerRegistration").field("entry", &self.entry).finish()
    }
}

impl ProducerRegistration {
    /// Counts one message sent by the producer: a relaxed increment, on every send's path.
    pub fn sent(&self) {
        self.entry.sent.fetch_add(1, Ordering::Relaxed);
    }
}

impl Drop for ProducerRegistration {
    fn drop(&mut self) {
        self.counts.live.lock().remove(&self.key);
        let mut counts = self.counts.counts.lock();
        for destination in &self.entry.counted_on {
            if let Some(count) = counts.get_mut(destination) {
                *count = count.saturating_sub(1);
                if *count == 0 {
                    counts.remove(destination);
                }
            }
        }
        drop(counts);
        if let Some(core) = self.core.upgrade() {
            for destination in &self.entry.counted_on {
                let count = self.counts.of(destination);
                core.advise_producer(destination, &self.entry.id, false, count);
            }
        }
    }
}

/// What a snapshot collects under the routing lock, to ask the queues about without it.
struct TopicSnapshot {
    name: String,
    published: u64,
    subscriptions: Vec<(QueueHandle, String, bool)>,
}

impl Core {
    /// Counts a producer of `connection` on `destination` (every part of a composite one;
    /// none for an anonymous producer) and lists it until the returned registration is
    /// dropped, and announces its start and stop on the producer advisory topics under `id`
    /// (the protocol's id for it).
    pub fn register_producer(
        self: &Arc<Self>,
        connection: ConnectionId,
        destination: Option<&Destination>,
        id: &str,
    ) -> ProducerRegistration {
        let destinations: Vec<Destination> = destination
            .map(composite_parts)
            .unwrap_or_default()
            .into_iter()
            .filter(|part| matches!(part.kind, DestinationKind::Queue | DestinationKind::Topic))
            .collect();
        let mut counts = self.producers.counts.lock();
        for destination in &destinations {
            *counts.entry(destination.clone()).or_insert(0) += 1;
        }
        drop(counts);
        for destination in &destinations {
            self.advise_producer(destination, id, true, self.producers.of(destination));
        }
        let entry = Arc::new(ProducerEntry {
            connection,
            id: id.to_owned(),
            destination: destination.cloned(),
            counted_on: destinations,
            sent: AtomicU64::new(0),
        });
        let key = self.producers.next_key.fetch_add(1, Ordering::Relaxed);
        self.producers.live.lock().insert(key, entry.clone());
        ProducerRegistration {
            counts: self.producers.clone(),
            key,
            entry,
            core: Arc::downgrade(self),
        }
    }

    /// Every producer registered now, in the order they registered.
    pub fn producer_listing(&self) -> Vec<ProducerListing> {
        let mut live: Vec<(u64, Arc<ProducerEntry>)> =
            self.producers.live.lock().iter().map(|(key, entry)| (*key, entry.clone())).collect();
        live.sort_by_key(|(key, _)| *key);
        live.into_iter()
            .map(|(_, entry)| ProducerListing {
                connection: entry.connection,
                connection_name: self.connection_name(entry.connection),
                producer: entry.id.clone(),
                destination: entry.destination.clone(),
                sent: entry.sent.load(Ordering::Relaxed),
            })
            .collect()
    }

    /// What `connection` is called in the advisories and the admin endpoint's lists: the
    /// protocol's id it was announced under (OpenWire's ConnectionId), or the broker's
    /// `ID:ferromq-connection-N`.
    pub fn connection_name(&self, connection: ConnectionId) -> String {
        let registry = self.registry.lock();
        registry
            .advisories
            .connections
            .get(&connection)
            .cloned()
            .unwrap_or_else(|| crate::core::advisory::connection_subject(connection))
    }

    /// Every queue and topic with its counters: queues (dead-letter and virtual topic
    /// consumer queues included, temporary ones not), then topics that were published to or
    /// subscribed to by name, each sorted by name.
    pub async fn destination_stats(&self) -> Vec<DestinationStats> {
        let (queues, topics) = self.snapshot(None);
        self.collect(queues, topics).await
    }

    /// One destination's counters, or `None` if it does not exist.
    pub async fn destination_stats_of(
        &self,
        kind: StatsKind,
        name: &str,
    ) -> Option<DestinationStats> {
        let (queues, topics) = self.snapshot(Some((kind, name)));
        self.collect(queues, topics).await.into_iter().next()
    }

    /// The queue handles and topic subscriptions to ask, optionally of one destination.
    fn snapshot(&self, only: Option<(StatsKind, &str)>) -> (Vec<QueueHandle>, Vec<TopicSnapshot>) {
        let wanted = |kind: StatsKind, name: &str| {
            only.is_none_or(|(only_kind, only_name)| only_kind == kind && only_name == name)
        };
        let registry = self.registry.lock();
        let mut queues: Vec<QueueHandle> = registry
            .queues
            .iter()
            .filter(|(name, _)| wanted(StatsKind::Queue, name))
            .map(|(_, handle)| handle.clone())
            .collect();
        queues.sort_by(|a, b| a.name().cmp(b.name()));

        // Topics exist once published to or subscribed to by a plain name.
        let mut names: BTreeSet<Arc<str>> =
            registry.topic_counters.published.keys().cloned().collect();
        for subscription in registry.topic_subscriptions.iter() {
            let destination = &subscription.queue.key().destination;
            if !subscription.temporary
                && destination.kind == DestinationKind::Topic
                && !destination.name.contains(',')
                && !DestinationFilter::is_pattern(&destination.name)
            {
                names.insert(destination.name.clone());
            }
        }
        let mut topics = Vec::new();
        for name in names.into_iter().filter(|name| wanted(StatsKind::Topic, name)) {
            let subscriptions = registry
                .topic_subscriptions
                .iter()
                .filter(|s| !s.temporary && s.filter.matches(&name))
                .map(|s| {
                    let key = s.queue.key();
                    let (label, durable) = match &key.subscription {
                        Some(sub) if registry.durable.contains_key(sub) => {
                            (format!("{}:{}", sub.client_id, sub.name), true)
                        }
                        Some(sub) => (format!("{}:{}", sub.client_id, sub.name), false),
                        None => (key.destination.to_string(), false),
                    };
                    (s.queue.clone(), label, durable)
                })
                .collect();
            let published = registry.topic_counters.published.get(&name).copied().unwrap_or(0);
            topics.push(TopicSnapshot { name: name.to_string(), published, subscriptions });
        }
        (queues, topics)
    }

    async fn collect(
        &self,
        queues: Vec<QueueHandle>,
        topics: Vec<TopicSnapshot>,
    ) -> Vec<DestinationStats> {
        let mut all = Vec::with_capacity(queues.len() + topics.len());
        for handle in queues {
            // A queue that stopped meanwhile (removed) is left out.
            let Some(stats) = handle.stats().await else { continue };
            let mut destination = DestinationStats::new(handle.name(), StatsKind::Queue);
            destination.add(&stats, true);
            let queue = Destination::queue(handle.name());
            destination.producers = self.producers.of(&queue);
            destination.memory_limit_bytes = self.memory_limit_of(&queue);
            all.push(destination);
        }
        // A subscription matching several topics (a wildcard) is asked once.
        let mut asked: BTreeMap<String, Option<QueueStats>> = BTreeMap::new();
        for topic in topics {
            let mut destination = DestinationStats::new(&topic.name, StatsKind::Topic);
            destination.enqueued = topic.published;
            let name = Destination::topic(topic.name.as_str());
            destination.producers = self.producers.of(&name);
            destination.memory_limit_bytes = self.memory_limit_of(&name);
            for (handle, label, durable) in topic.subscriptions {
                let stats = match asked.get(&label) {
                    Some(stats) => *stats,
                    None => {
                        let stats = handle.stats().await;
                        asked.insert(label.clone(), stats);
                        stats
                    }
                };
                let Some(stats) = stats else { continue };
                destination.add(&stats, false);
                destination.subscriptions.push(SubscriptionStats {
                    name: label,
                    durable,
                    pending: stats.ready as u64,
                    in_flight: stats.in_flight as u64,
                    enqueued: stats.enqueued,
                    dequeued: stats.acked,
                    consumers: stats.consumers as u64,
                    discarded: stats.discarded,
                    slow: stats.slow_consumers > 0,
                });
            }
            all.push(destination);
        }
        all
    }
}
