//! The routing table: which queues exist, which subscriptions listen on which topics, which
//! consumers are attached where. One lock guards it; it is held only to read or change the
//! table and to push commands into unbounded queue channels, never across an `.await`, so
//! that a send's fan-out is atomic (every subscriber sees one topic's messages in one order).
//!
//! What is held under the lock is looked up through indexes, so that a send costs what it
//! reaches rather than what exists: topic subscriptions by pattern
//! ([`subscriptions`](super::subscriptions)), virtual topics' consumer queues by topic
//! ([`virtual_topics`](super::virtual_topics)). What every new queue starts with (the store,
//! policies, memory limits, where its events go) is the core's [`QueueFactory`], outside the
//! lock.

use std::sync::Arc;

use rustc_hash::FxHashMap;
use store::{Destination, Message, QueueKey, StoreError, SubscriptionKey};

use super::advisory::AdvisoryState;
use super::audit::ProducerAudit;
use super::queue::{self, ConsumerSpec, QueueCommand, QueueFactory, QueueHandle};
use super::recovery::RecentMessages;
use super::statistics::TopicCounters;
pub(crate) use super::subscriptions::{SelectorVerdicts, TopicSubscription, TopicSubscriptions};
use super::types::{ClientKeyed, ConnectionId, ConsumerId, VirtualTopicRule};
use super::virtual_topics::VirtualConsumers;
use super::wildcard::DestinationFilter;

/// Where a consumer is attached, so that closing it detaches it everywhere. A composite
/// consumer (`A,B`) may be attached to several queues and topics at once.
#[derive(Default)]
pub(crate) struct Attachment {
    /// Shared queues it consumes from: queue destinations (wildcard matches included),
    /// temporary queues, a durable subscription's queue.
    pub queues: Vec<QueueHandle>,
    /// Queue-name wildcards: queues created later that match get the consumer too.
    pub wildcards: Vec<(DestinationFilter, ConsumerSpec)>,
    /// Its own non-durable topic subscription queue, which ends with it.
    pub private: Option<QueueHandle>,
    /// The durable subscription it is the active consumer of.
    pub durable: Option<SubscriptionKey>,
}

/// A temporary destination: lives as long as the connection that created it.
pub(crate) struct Temporary {
    pub owner: ConnectionId,
    /// A temporary queue's queue (never stored); `None` for a temporary topic.
    pub queue: Option<QueueHandle>,
}

#[derive(Default)]
pub(crate) struct Registry {
    /// Read anywhere; changed only through [`Registry::queue`] and [`Registry::remove_queue`],
    /// which keep `virtual_consumers` in step.
    pub queues: ClientKeyed<Arc<str>, QueueHandle>,
    /// The queues of `queues` that virtual topics feed, by topic.
    pub virtual_consumers: VirtualConsumers,
    pub topic_subscriptions: TopicSubscriptions,
    /// Durable subscriptions by identity, with the consumer attached to each, if any.
    pub durable: ClientKeyed<SubscriptionKey, (QueueHandle, Option<ConsumerId>)>,
    pub consumers: FxHashMap<ConsumerId, Attachment>,
    /// Each topic's recent messages for retroactive subscribers (see
    /// [`recovery`](super::recovery)).
    pub recent: RecentMessages,
    /// Temporary queues and topics by destination.
    pub temporary: ClientKeyed<Destination, Temporary>,
    /// Duplicate detection for resent messages, per destination and producer.
    pub audit: ProducerAudit,
    /// What advisories about consumers and connections need to remember.
    pub advisories: AdvisoryState,
    /// Messages published per topic, for the statistics.
    pub topic_counters: TopicCounters,
    /// Some policy removes inactive destinations (see [`gc`](super::gc)).
    pub collects_garbage: bool,
    /// Queues created from now on read their first window in their own task, not under the
    /// routing lock (set once the store is recovered; see [`queue::FirstWindow`]).
    pub loads_in_task: bool,
    /// Topic subscriptions that ended since the last inactive-destination sweep, by the
    /// destination they subscribed to (only while `collects_garbage`): their topics were active
    /// until now.
    pub ended_subscriptions: Vec<Arc<str>>,
}

impl Registry {
    /// The queue destination `name`, created on first use. A new queue picks up every
    /// wildcard consumer whose pattern matches it. Returns whether it was created.
    pub fn queue(
        &mut self,
        name: &Arc<str>,
        factory: &QueueFactory,
    ) -> Result<(QueueHandle, bool), StoreError> {
        if let Some(handle) = self.queues.get(name) {
            return Ok((handle.clone(), false));
        }
        let key = QueueKey::destination(Destination::queue(name.clone()));
        let handle = self.spawn_queue(key, true, factory)?;
        for attachment in self.consumers.values_mut() {
            for (filter, spec) in &attachment.wildcards {
                if filter.matches(name) {
                    handle.send(QueueCommand::Subscribe(spec.clone()));
                    attachment.queues.push(handle.clone());
                }
            }
        }
        self.queues.insert(name.clone(), handle.clone());
        self.virtual_consumers.queue_added(name);
        Ok((handle, true))
    }

    /// Takes queue destination `name` out of the routing table.
    pub fn remove_queue(&mut self, name: &str) -> Option<QueueHandle> {
        let handle = self.queues.remove(name)?;
        self.virtual_consumers.queue_removed(name);
        Some(handle)
    }

    /// Takes every queue destination out of the routing table.
    pub fn drain_queues(&mut self) -> Vec<QueueHandle> {
        self.virtual_consumers.clear();
        self.queues.drain().map(|(_, handle)| handle).collect()
    }

    /// Starts the task of queue `key` (`stored`: it keeps persistent messages in the store).
    pub fn spawn_queue(
        &mut self,
        key: QueueKey,
        stored: bool,
        factory: &QueueFactory,
    ) -> Result<QueueHandle, StoreError> {
        let first_window = match self.loads_in_task {
            true => queue::FirstWindow::InTask,
            false => queue::FirstWindow::Now(&mut self.audit),
        };
        factory.spawn(key, stored, first_window)
    }

    /// Every queue `message`, sent to topic `topic`, lands in: matching subscriptions whose
    /// selector matches it (minus no-local ones of the sending connection) and virtual topic
    /// consumer queues. Selectors are taken from `verdicts` for the subscriptions judged
    /// there, else evaluated here. Visits only the subscriptions and queues that match.
    pub fn topic_route(
        &self,
        topic: &str,
        message: &Message,
        temporary: bool,
        connection: ConnectionId,
        virtual_topics: &[VirtualTopicRule],
        verdicts: Option<&SelectorVerdicts>,
    ) -> Vec<QueueHandle> {
        let mut route: Vec<QueueHandle> = self
            .topic_subscriptions
            .matching(topic, temporary)
            .into_iter()
            .filter(|(id, s)| {
                s.no_local_connection != Some(connection)
                    && match &s.selector {
                        None => true,
                        Some(selector) => verdicts
                            .and_then(|verdicts| verdicts.passes(*id))
                            .unwrap_or_else(|| selector.matches(message)),
                    }
            })
            .map(|(_, s)| s.queue.clone())
            .collect();
        if temporary {
            return route;
        }
        for rule in virtual_topics {
            if !rule.name.matches(topic) {
                continue;
            }
            match self.virtual_consumers.consumers(&rule.prefix, topic) {
                Some(names) => {
                    route.extend(names.iter().filter_map(|name| self.queues.get(name)).cloned())
                }
                None => {
                    // A consumer pattern with wildcards past the prefix (the index cannot
                    // tell): every queue is matched against it.
                    let consumer_queues =
                        DestinationFilter::new(&format!("{}{topic}", rule.prefix));
                    route.extend(
                        self.queues
                            .iter()
                            .filter(|(name, _)| consumer_queues.matches(name))
                            .map(|(_, handle)| handle.clone()),
                    );
                }
            }
        }
        route
    }

    /// Detaches a consumer from everything it is attached to.
    pub fn detach(&mut self, consumer: ConsumerId) {
        let Some(attachment) = self.consumers.remove(&consumer) else { return };
        for queue in attachment.queues {
            queue.send(QueueCommand::Unsubscribe(consumer));
        }
        if let Some(queue) = attachment.private {
            // A non-durable subscription ends with its subscriber.
            self.topic_subscriptions.remove_queue(&queue);
            queue.send(QueueCommand::Stop);
            if self.collects_garbage {
                self.ended_subscriptions.push(queue.key.destination.name.clone());
            }
        }
        if let Some(key) = attachment.durable {
            if let Some((_, active)) = self.durable.get_mut(&key) {
                if *active == Some(consumer) {
                    *active = None;
                }
            }
        }
    }
}

#[cfg(test)]
mod tests {
    use rand::rngs::StdRng;
    use rand::{Rng, SeedableRng};
    use store::{MemoryStore, MessageId, PropertyValue};

    use super::*;
    use crate::core::selector::Selector;

    /// The route as it was found before the indexes: every subscription and every queue
    /// looked at, selectors evaluated in place.
    fn route_by_scan(
        registry: &Registry,
        topic: &str,
        message: &Message,
        temporary: bool,
        connection: ConnectionId,
        virtual_topics: &[VirtualTopicRule],
    ) -> Vec<QueueHandle> {
        let mut route: Vec<QueueHandle> = registry
            .topic_subscriptions
            .iter()
            .filter(|s| {
                s.temporary == temporary
                    && s.filter.matches(topic)
                    && s.no_local_connection != Some(connection)
                    && s.selector.iter().all(|selector| selector.matches(message))
            })
            .map(|s| s.queue.clone())
            .collect();
        if temporary {
            return route;
        }
        for rule in virtual_topics.iter().filter(|rule| rule.name.matches(topic)) {
            let consumer_queues = DestinationFilter::new(&format!("{}{topic}", rule.prefix));
            let matching = registry.queues.iter().filter(|(name, _)| consumer_queues.matches(name));
            route.extend(matching.map(|(_, handle)| handle.clone()));
        }
        route
    }

    fn keys(route: &[QueueHandle]) -> Vec<usize> {
        let mut keys: Vec<usize> = route.iter().map(|q| Arc::as_ptr(&q.key) as usize).collect();
        keys.sort_unstable();
        keys
    }

    fn rules() -> Vec<VirtualTopicRule> {
        let rule = |name: &str, prefix: &str| VirtualTopicRule {
            name: DestinationFilter::new(name),
            prefix: prefix.to_owned(),
        };
        // The default rule and seed 002's.
        vec![rule("a.>", "Consumer.*."), rule("b", "VirtualQueueConsumer.*.")]
    }

    fn registry(rules: &[VirtualTopicRule]) -> (Registry, QueueFactory) {
        let registry =
            Registry { virtual_consumers: VirtualConsumers::new(rules), ..Default::default() };
        let factory = QueueFactory {
            store: Arc::new(MemoryStore::new()),
            dead_letters: Arc::default(),
            memory: Default::default(),
            policies: Arc::default(),
            events: Default::default(),
            temp_store: None,
        };
        (registry, factory)
    }

    fn subscriber(registry: &mut Registry, factory: &QueueFactory, n: u64) -> QueueHandle {
        let key = QueueKey {
            destination: Destination::topic("t"),
            subscription: Some(SubscriptionKey {
                client_id: "c".into(),
                name: format!("s{n}").into(),
            }),
        };
        registry.spawn_queue(key, false, factory).expect("the queue starts")
    }

    fn message(topic: &str, x: i32) -> Message {
        let mut message = Message::new(MessageId(1), "ID:p:1:1:1", Destination::topic(topic));
        message.properties.insert("x".into(), PropertyValue::Int(x));
        message
    }

    /// Random subscriptions (patterns, temporary or not, no-local, selectors), random queues
    /// (virtual topic consumers among them), subscriptions leaving: every publish reaches the
    /// queues the scan finds, with verdicts judged before some subscriptions changed too.
    #[tokio::test]
    async fn topic_routes_reach_what_the_scan_reaches() {
        const LEVELS: &[&str] = &["a", "b", "c", "*", ">"];
        let random_name = |rng: &mut StdRng, wildcards: bool| {
            let count = rng.gen_range(1..=4);
            let levels = if wildcards { LEVELS } else { &LEVELS[..3] };
            let parts: Vec<&str> =
                (0..count).map(|_| levels[rng.gen_range(0..levels.len())]).collect();
            parts.join(".")
        };
        let rules = rules();
        let (mut registry, factory) = registry(&rules);
        let mut rng = StdRng::seed_from_u64(19);
        let selectors = [None, Some("x = 1"), Some("x > 1")];
        let mut queues = Vec::new();
        // Subscriptions and virtual topic consumer queues reached, so that the comparison
        // is known to compare something.
        let (mut subscriptions, mut consumers) = (0, 0);
        for n in 0..400 {
            match rng.gen_range(0..10) {
                0..=5 => {
                    let queue = subscriber(&mut registry, &factory, n);
                    for _ in 0..rng.gen_range(1..=2) {
                        let selector = selectors[rng.gen_range(0..selectors.len())];
                        registry.topic_subscriptions.insert(TopicSubscription {
                            filter: DestinationFilter::new(&random_name(&mut rng, true)),
                            queue: queue.clone(),
                            no_local_connection: rng.gen_bool(0.2).then_some(ConnectionId(7)),
                            temporary: rng.gen_bool(0.2),
                            selector: selector.map(|s| Arc::new(Selector::parse(s).unwrap())),
                        });
                    }
                    queues.push(queue);
                }
                6 | 7 => {
                    let prefix = ["Consumer.", "VirtualQueueConsumer.", ""][rng.gen_range(0..3)];
                    let group = ["A", "B", "*"][rng.gen_range(0..3)];
                    let name = format!("{prefix}{group}.{}", random_name(&mut rng, false));
                    registry.queue(&name.into(), &factory).expect("the queue starts");
                }
                8 if !queues.is_empty() => {
                    let queue = queues.swap_remove(rng.gen_range(0..queues.len()));
                    registry.topic_subscriptions.remove_queue(&queue);
                }
                _ => {
                    // Sorted: the same seed removes the same queue every run.
                    let mut names: Vec<Arc<str>> = registry.queues.keys().cloned().collect();
                    names.sort_unstable();
                    if let Some(name) = names.get(rng.gen_range(0..names.len().max(1))) {
                        registry.remove_queue(name);
                    }
                }
            }
            for _ in 0..4 {
                let topic = random_name(&mut rng, false);
                let temporary = rng.gen_bool(0.2);
                let message = message(&topic, rng.gen_range(0..3));
                let connection = ConnectionId(rng.gen_range(6..8));
                let expected =
                    route_by_scan(&registry, &topic, &message, temporary, connection, &rules);
                let (plain, virtual_consumers): (Vec<_>, Vec<_>) =
                    expected.iter().partition(|q| q.key.subscription.is_some());
                subscriptions += plain.len();
                consumers += virtual_consumers.len();
                let judged = registry.topic_subscriptions.selectors_for(&[(&topic, temporary)]);
                let verdicts = SelectorVerdicts::judge(judged, &message);
                let routed = |registry: &Registry, verdicts| {
                    registry.topic_route(&topic, &message, temporary, connection, &rules, verdicts)
                };
                assert_eq!(keys(&routed(&registry, None)), keys(&expected), "{topic}");
                assert_eq!(keys(&routed(&registry, verdicts.as_ref())), keys(&expected));
                // Subscriptions come after the verdicts: theirs are evaluated in the route.
                let queue = subscriber(&mut registry, &factory, 1000 + n);
                registry.topic_subscriptions.insert(TopicSubscription {
                    filter: DestinationFilter::new(&topic),
                    queue: queue.clone(),
                    no_local_connection: None,
                    temporary,
                    selector: Some(Arc::new(Selector::parse("x = 1").unwrap())),
                });
                let expected =
                    route_by_scan(&registry, &topic, &message, temporary, connection, &rules);
                assert_eq!(keys(&routed(&registry, verdicts.as_ref())), keys(&expected));
                registry.topic_subscriptions.remove_queue(&queue);
            }
        }
        assert!(subscriptions > 1000 && consumers > 20, "{subscriptions} {consumers}");
    }

    /// A composite subscriber's subscriptions all feed its one queue: they leave together,
    /// a durable reattach's no-local reaches each, and the rest stay indexed.
    #[tokio::test]
    async fn subscriptions_are_kept_by_their_queue() {
        let (mut registry, factory) = registry(&[]);
        let (composite, other) =
            (subscriber(&mut registry, &factory, 1), subscriber(&mut registry, &factory, 2));
        let subscribe = |registry: &mut Registry, pattern: &str, queue: &QueueHandle| {
            registry.topic_subscriptions.insert(TopicSubscription {
                filter: DestinationFilter::new(pattern),
                queue: queue.clone(),
                no_local_connection: None,
                temporary: false,
                selector: None,
            })
        };
        let first = subscribe(&mut registry, "A", &composite);
        let second = subscribe(&mut registry, "B.>", &composite);
        let third = subscribe(&mut registry, "B.*", &other);
        assert!(first < second && second < third, "ids are given in order");
        registry.topic_subscriptions.set_no_local(&composite, Some(ConnectionId(7)));
        let of_composite: Vec<Option<ConnectionId>> = registry
            .topic_subscriptions
            .of_queue(&composite)
            .map(|s| s.no_local_connection)
            .collect();
        assert_eq!(of_composite, vec![Some(ConnectionId(7)), Some(ConnectionId(7))]);
        let message = message("B.C", 1);
        assert_eq!(
            registry.topic_route("B.C", &message, false, ConnectionId(7), &[], None).len(),
            1
        );
        assert_eq!(
            registry.topic_route("B.C", &message, false, ConnectionId(8), &[], None).len(),
            2
        );
        assert!(registry.topic_subscriptions.subscribed_as("B.>", false));
        assert!(!registry.topic_subscriptions.subscribed_as("B.>", true));
        assert!(registry.topic_subscriptions.subscribed_as("A", false));
        assert!(!registry.topic_subscriptions.subscribed_as("B", false));
        assert_eq!(registry.topic_subscriptions.remove_queue(&composite), 2);
        assert!(!registry.topic_subscriptions.any_match("A"));
        assert!(registry.topic_subscriptions.any_match_of("B.C", false));
        assert!(!registry.topic_subscriptions.any_match_of("B.C", true));
        assert_eq!(registry.topic_subscriptions.drain().len(), 1);
        assert!(!registry.topic_subscriptions.any_match("B.C"));
        assert!(subscribe(&mut registry, "B.*", &other) > third, "ids are never reused");
    }

    /// Not a test: `cargo test -p broker --lib -- --ignored --nocapture topic_route_timing`
    /// prints what a publish costs among 10,000 subscriptions, indexed and scanned.
    #[tokio::test]
    #[ignore]
    async fn topic_route_timing() {
        // The default rule.
        let rules = vec![VirtualTopicRule {
            name: DestinationFilter::new("VirtualTopic.>"),
            prefix: "Consumer.*.".to_owned(),
        }];
        let (mut registry, factory) = registry(&rules);
        for n in 0..10_000u64 {
            let queue = subscriber(&mut registry, &factory, n);
            let pattern = match n % 10 {
                0 => format!("PRICES.{}.>", n % 100),
                1 => format!("PRICES.*.STOCK{n}"),
                _ => format!("PRICES.{}.STOCK{n}", n % 100),
            };
            registry.topic_subscriptions.insert(TopicSubscription {
                filter: DestinationFilter::new(&pattern),
                queue,
                no_local_connection: None,
                temporary: false,
                selector: None,
            });
        }
        for n in 0..1_000 {
            let name: Arc<str> = format!("Consumer.{}.VirtualTopic.Q{}", n % 10, n / 10).into();
            registry.queue(&name, &factory).expect("the queue starts");
        }
        let message = message("PRICES.42.STOCK4242", 1);
        let time = |route: &dyn Fn(&str) -> Vec<QueueHandle>, topic: &str| {
            let started = std::time::Instant::now();
            let rounds = 1_000;
            let mut reached = 0;
            for _ in 0..rounds {
                reached = route(topic).len();
            }
            (started.elapsed() / rounds, reached)
        };
        for topic in ["PRICES.42.STOCK4242", "PRICES.40.STOCK4241", "VirtualTopic.Q7"] {
            let indexed = time(
                &|t| registry.topic_route(t, &message, false, ConnectionId(0), &rules, None),
                topic,
            );
            let scanned = time(
                &|t| route_by_scan(&registry, t, &message, false, ConnectionId(0), &rules),
                topic,
            );
            assert_eq!(indexed.1, scanned.1);
            println!(
                "{topic}: reaches {}; indexed {:?}, scanned {:?}",
                indexed.1, indexed.0, scanned.0
            );
        }
    }
}
