//! Garbage collection of inactive destinations (ActiveMQ's `gcInactiveDestinations` with
//! `inactiveTimoutBeforeGC`): a queue or topic whose policy enables it and that has had no
//! messages, no consumers (for a topic: no subscriptions, durable ones included) and no
//! producers for the policy's timeout is removed as ActiveMQ's `removeDestination` does: its
//! queue task stops, it leaves the routing table and the store, the admin endpoint no longer
//! lists it, and an advisory with the remove operation goes out on `ActiveMQ.Advisory.Queue` /
//! `ActiveMQ.Advisory.Topic` (a DestinationInfo for the JMS client). Used again, it is simply
//! created again.
//!
//! One task serves the broker, and only when some policy enables collection; it wakes every
//! half of the shortest timeout. Nothing is tracked on the send path:
//!
//! - **Queues** know when they became idle (no message held, in memory or in the store, and no
//!   consumer): each gc-enabled queue is sent [`QueueCommand::Retire`] with its timeout, and a
//!   queue idle that long reports so (an `Idle` event, with how many commands it has taken).
//!   The observer, under the routing lock, checks that nothing was sent to the task since (no
//!   command it had not taken) and nothing announced is on its way (a committing
//!   transaction's, a scheduled fire's), and that no producer names the queue, then removes it
//!   and stops the task. Sends, subscriptions and dead letters reach a queue only under that
//!   lock, so once the queue has left the table nothing more can reach it: a later send
//!   creates a new queue.
//! - **Topics** hold nothing themselves (their subscriptions do): the sweep remembers each
//!   topic's publish count and since when it has seen it unchanged, without subscriptions
//!   and without producers; subscriptions that ended since the last sweep restart their
//!   topics' clocks. All of this is read and decided under the routing lock.
//!
//! A topic's recovery buffer (the recent messages for retroactive subscribers) goes with the
//! topic, as in ActiveMQ. A producer that came and went between two sweeps without sending is
//! not seen (ActiveMQ counts it as activity); a transaction left open longer than the timeout
//! with a send to an otherwise idle queue is not either.

use std::collections::HashMap;
use std::sync::{Arc, Weak};
use std::time::Duration;

use store::{Destination, DestinationKind, Operation, PropertyValue, QueueKey, UnitOfWork};
use tokio::time::Instant;

use super::Core;
use crate::core::advisory::{ADVISORY_KIND, ADVISORY_QUEUE};
use crate::core::policy::Policies;
use crate::core::queue::QueueCommand;
use crate::core::registry::Registry;
use crate::core::types::{composite_parts, ADVISORY_DESTINATION, ADVISORY_OPERATION};
use crate::core::wildcard::DestinationFilter;

/// The advisory topic of topic creation and removal.
const ADVISORY_TOPIC: &str = "ActiveMQ.Advisory.Topic";
/// The sweep never runs more often than this, however short a timeout.
const MIN_PERIOD: Duration = Duration::from_millis(10);

/// How often the sweep runs for `policies`: half the shortest timeout; `None` if no policy
/// collects garbage.
pub(super) fn sweep_period(policies: &Policies) -> Option<Duration> {
    policies
        .all()
        .filter_map(|policy| policy.gc_inactive_after)
        .min()
        .map(|timeout| (timeout / 2).max(MIN_PERIOD))
}

/// What the sweep remembers of a topic.
struct TopicActivity {
    /// Its publish count when last seen.
    published: u64,
    /// Since when it has been seen inactive.
    since: Instant,
}

impl Core {
    /// Starts the inactive-destination sweep if some policy enables it (once: call at start).
    pub fn start_inactive_sweep(self: &Arc<Self>) {
        let Some(period) = sweep_period(&self.settings.policies) else { return };
        tokio::spawn(sweep(Arc::downgrade(self), period));
    }

    /// One sweep: asks every gc-enabled queue to retire if it has been idle long enough, and
    /// removes the topics that have been inactive for their timeout.
    fn sweep_inactive(self: &Arc<Self>, topics: &mut HashMap<Arc<str>, TopicActivity>) {
        let now = Instant::now();
        let mut registry = self.registry.lock();
        for (name, queue) in &registry.queues {
            let destination = Destination::queue(name.clone());
            let Some(after) =
                self.settings.policies.for_destination(&destination).gc_inactive_after
            else {
                continue;
            };
            queue.send(QueueCommand::Retire { after });
        }

        // Subscriptions that ended since the last sweep: their topics were active until now.
        let ended: Vec<DestinationFilter> = std::mem::take(&mut registry.ended_subscriptions)
            .into_iter()
            .flat_map(|name| composite_parts(&Destination::topic(name)))
            .filter(|part| part.kind == DestinationKind::Topic)
            .map(|part| DestinationFilter::new(&part.name))
            .collect();
        let mut inactive = Vec::new();
        let published: Vec<(Arc<str>, u64)> =
            registry.topic_counters.topics().map(|(name, count)| (name.clone(), count)).collect();
        topics.retain(|name, _| published.iter().any(|(known, _)| known == name));
        for (name, count) in published {
            let destination = Destination::topic(name.clone());
            let Some(after) =
                self.settings.policies.for_destination(&destination).gc_inactive_after
            else {
                continue;
            };
            let active = registry.topic_subscriptions.any_match_of(&name, false)
                || self.producers.of(&destination) > 0
                || ended.iter().any(|filter| filter.matches(&name));
            let seen = topics
                .entry(name.clone())
                .or_insert(TopicActivity { published: count, since: now });
            if active || seen.published != count {
                *seen = TopicActivity { published: count, since: now };
            } else if now.duration_since(seen.since) >= after {
                inactive.push(destination);
            }
        }
        for topic in inactive {
            topics.remove(&topic.name);
            registry.topic_counters.forget(&topic.name);
            registry.recent.forget(&topic);
            drop(self.remove_destination(&mut registry, topic, "inactive"));
        }
    }

    /// An idle queue's report (see the module documentation): removes the queue, and stops
    /// its task, if under the routing lock it is still the registered one, no command was
    /// sent to it since it had taken `taken` (every send, subscription and dead letter
    /// reaches a queue under this lock), nothing announced is on its way to it, and no
    /// producer names it.
    pub(super) fn retire_idle(&self, queue: &Arc<QueueKey>, taken: u64) {
        let mut registry = self.registry.lock();
        let name = queue.destination.name.clone();
        let Some(handle) = registry.queues.get(&name).filter(|h| Arc::ptr_eq(&h.key, queue)) else {
            return;
        };
        if !handle.nothing_sent_since(taken)
            || !handle.is_quiet()
            || self.producers.of(&queue.destination) > 0
        {
            return;
        }
        if let Some(handle) = registry.remove_queue(&name) {
            handle.send(QueueCommand::Stop);
        }
        drop(self.remove_destination(&mut registry, Destination::queue(name), "inactive"));
    }

    /// Forgets a removed destination everywhere but the routing table (the caller's part),
    /// removes it from the store and announces the removal; `why` it goes, for the log. The
    /// completion resolves once the removal is durable. The sweep does not wait for it, like a
    /// declaration: a later declaration of the same name is submitted (under the same lock)
    /// after it, so the store applies both in order.
    pub(super) fn remove_destination(
        &self,
        registry: &mut Registry,
        destination: Destination,
        why: &'static str,
    ) -> store::Completion {
        tracing::info!(%destination, why, "removing destination");
        registry.audit.forget(&destination);
        let removed =
            self.store.submit(UnitOfWork::with(Operation::RemoveDestination(destination.clone())));
        let topic = if destination.kind.is_queue() { ADVISORY_QUEUE } else { ADVISORY_TOPIC };
        let properties = vec![
            (ADVISORY_KIND, PropertyValue::String("destination".into())),
            (ADVISORY_OPERATION, PropertyValue::String("remove".into())),
            (ADVISORY_DESTINATION, PropertyValue::String(destination.to_string().into())),
        ];
        self.publish_advisory(registry, topic, properties);
        removed
    }
}

/// The sweep task: runs until the broker is gone.
async fn sweep(core: Weak<Core>, period: Duration) {
    let mut ticks = tokio::time::interval_at(Instant::now() + period, period);
    ticks.set_missed_tick_behavior(tokio::time::MissedTickBehavior::Delay);
    let mut topics = HashMap::new();
    loop {
        ticks.tick().await;
        let Some(core) = core.upgrade() else { break };
        core.sweep_inactive(&mut topics);
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn the_sweep_runs_at_half_the_shortest_timeout_and_only_when_enabled() {
        let policies = |text: &str| {
            Policies::from_config(&conf::Config::parse(text, "test.toml").expect("valid"))
        };
        assert_eq!(sweep_period(&Policies::default()), None);
        let none = policies("[[policies]]\nqueue = \">\"\ninactive_timeout_before_gc_ms = 100\n");
        assert_eq!(sweep_period(&none), None, "a timeout alone does not enable collection");
        let two = policies(
            "[[policies]]\nqueue = \">\"\ngc_inactive_destinations = true\n\
             [[policies]]\ntopic = \">\"\ngc_inactive_destinations = true\n\
             inactive_timeout_before_gc_ms = 300\n",
        );
        assert_eq!(sweep_period(&two), Some(Duration::from_millis(150)));
        let default = policies("[[policies]]\nqueue = \">\"\ngc_inactive_destinations = true\n");
        assert_eq!(sweep_period(&default), Some(Duration::from_secs(30)));
    }
}
