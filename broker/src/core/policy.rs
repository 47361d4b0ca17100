//! Destination policies (ActiveMQ's `policyEntry`): the settings each destination runs with,
//! resolved once when its queue task starts.
//!
//! The configuration's `[[policies]]` entries each cover queues, topics, temporary queues or
//! temporary topics by name pattern. A destination takes the entry that matches it most
//! specifically (see [`Specificity`]); the keys that entry leaves out, and every key of a
//! destination no entry matches, take the section defaults (`[destinations]`, `[dead_letter]`,
//! `[broker]`). A topic's subscriptions (durable or not) run with the topic's policy.
//!
//! Temporary destinations match only `temp_queue`/`temp_topic` entries, as in ActiveMQ, whose
//! policy map keeps them apart from ordinary names.

use std::sync::Arc;
use std::time::Duration;

use conf::{
    MessageGroupMap, PolicyEntry, PolicyTarget, SlowConsumerStrategy, SubscriptionRecovery,
};
use store::{Destination, DestinationKind};

use super::dead_letter::{DeadLetterSettings, DeadLetterStrategy};
use super::trie::PatternIndex;
use super::wildcard::DestinationFilter;

/// The settings of one destination.
#[derive(Debug, Clone)]
pub struct Policy {
    /// Bytes of messages the destination keeps in memory; `None`: the broker's default
    /// ([`MemoryLimits`](super::queue::MemoryLimits)).
    pub memory_limit: Option<u64>,
    /// False: a send is never held for this destination's own memory limit.
    pub producer_flow_control: bool,
    /// Prefetches for consumers that ask for none or for their client's default; `None`: as
    /// asked, or the broker's default ([`CoreSettings::default_prefetch`](super::CoreSettings))
    /// when they ask for none.
    pub queue_prefetch: Option<u32>,
    pub queue_browser_prefetch: Option<u32>,
    pub topic_prefetch: Option<u32>,
    pub durable_topic_prefetch: Option<u32>,
    /// Keep in memory only what consumers have room for.
    pub lazy_dispatch: bool,
    /// Queues: fill consumers in the order they came instead of round-robin.
    pub strict_order_dispatch: bool,
    pub message_group_map: MessageGroupMap,
    /// Topics: what a retroactive subscriber receives.
    pub subscription_recovery: SubscriptionRecovery,
    /// Dead letters, the STOMP redelivery limit and the expiry sweep; `None`: the broker's
    /// ([`CoreSettings::dead_letters`](super::CoreSettings)).
    pub dead_letters: Option<Arc<DeadLetterSettings>>,
    /// Remove the destination after this long without messages, consumers or producers.
    pub gc_inactive_after: Option<Duration>,
    /// Abort slow consumers, when set.
    pub slow_consumer_strategy: Option<SlowConsumerStrategy>,
    /// Non-durable topic subscribers: messages waiting beyond the prefetch before the oldest
    /// are discarded.
    pub pending_message_limit: Option<usize>,
    pub advisories: PolicyAdvisories,
    /// Queue entries: how many queues matching the entry may exist (ActiveMQ's
    /// `maxDestinations`).
    pub max_destinations: Option<DestinationCap>,
}

/// A queue entry's `max_destinations`: at most `max` queues matching `pattern`.
#[derive(Debug, Clone)]
pub struct DestinationCap {
    pub pattern: DestinationFilter,
    pub max: usize,
}

/// The advisories a policy switches on (each off by default, as in ActiveMQ).
#[derive(Debug, Clone, Copy, Default, PartialEq, Eq)]
pub struct PolicyAdvisories {
    pub slow_consumers: bool,
    pub fast_producers: bool,
    pub when_full: bool,
    pub discarding_messages: bool,
    pub delivery: bool,
    pub consumed: bool,
    pub no_consumers: bool,
}

impl Default for Policy {
    /// The policy of a destination no entry matches: the broker's defaults.
    fn default() -> Self {
        Policy {
            memory_limit: None,
            producer_flow_control: true,
            queue_prefetch: None,
            queue_browser_prefetch: None,
            topic_prefetch: None,
            durable_topic_prefetch: None,
            lazy_dispatch: false,
            strict_order_dispatch: false,
            message_group_map: MessageGroupMap::default(),
            subscription_recovery: SubscriptionRecovery::default(),
            dead_letters: None,
            gc_inactive_after: None,
            slow_consumer_strategy: None,
            pending_message_limit: None,
            advisories: PolicyAdvisories::default(),
            max_destinations: None,
        }
    }
}

impl Policy {
    /// `entry` over the section defaults.
    fn from_entry(config: &conf::Config, entry: &PolicyEntry) -> Policy {
        let dead_letters = match (&entry.dead_letter, entry.expire_messages_period) {
            (None, None) => None,
            (section, period) => Some(Arc::new(dead_letter_settings(
                section.as_ref().unwrap_or(&config.dead_letter),
                period.unwrap_or(config.destinations.expire_messages_period),
            ))),
        };
        let gc = entry.gc_inactive_destinations.unwrap_or(false);
        Policy {
            memory_limit: entry.memory_limit,
            producer_flow_control: entry.producer_flow_control.unwrap_or(true),
            queue_prefetch: entry.queue_prefetch,
            queue_browser_prefetch: entry.queue_browser_prefetch,
            topic_prefetch: entry.topic_prefetch,
            durable_topic_prefetch: entry.durable_topic_prefetch,
            lazy_dispatch: entry.lazy_dispatch.unwrap_or(false),
            strict_order_dispatch: entry.strict_order_dispatch.unwrap_or(false),
            message_group_map: entry.message_group_map.unwrap_or_default(),
            subscription_recovery: entry.subscription_recovery.unwrap_or_default(),
            dead_letters,
            gc_inactive_after: gc
                .then(|| entry.inactive_timeout_before_gc.unwrap_or(Duration::from_secs(60))),
            slow_consumer_strategy: entry.slow_consumer_strategy,
            pending_message_limit: entry
                .pending_message_limit
                .and_then(|limit| usize::try_from(limit).ok()),
            advisories: PolicyAdvisories {
                slow_consumers: entry.advisory_for_slow_consumers.unwrap_or(false),
                fast_producers: entry.advisory_for_fast_producers.unwrap_or(false),
                when_full: entry.advisory_when_full.unwrap_or(false),
                discarding_messages: entry.advisory_for_discarding_messages.unwrap_or(false),
                delivery: entry.advisory_for_delivery.unwrap_or(false),
                consumed: entry.advisory_for_consumed.unwrap_or(false),
                no_consumers: entry.send_advisory_if_no_consumers.unwrap_or(false),
            },
            // Set by `Policies::from_config`, which knows the entry's pattern.
            max_destinations: None,
        }
    }

    /// The prefetch for a consumer that asked for `requested` (`None`: nothing, or the
    /// client's own default for its kind, which the policy replaces as ActiveMQ's
    /// `PolicyEntry.configurePrefetch` does).
    /// `default_prefetch` is the broker's queue prefetch, for a policy without its own.
    pub fn prefetch_for(
        &self,
        kind: ConsumerKind,
        requested: Option<u32>,
        default_prefetch: u32,
    ) -> u32 {
        let (policy, client_default) = match kind {
            ConsumerKind::Queue => (self.queue_prefetch, 1000),
            ConsumerKind::Browser => (self.queue_browser_prefetch, 500),
            ConsumerKind::Topic => (self.topic_prefetch, 32766),
            ConsumerKind::DurableTopic => (self.durable_topic_prefetch, 100),
        };
        match (requested, policy) {
            (Some(requested), Some(policy)) if requested == client_default => policy,
            (Some(requested), _) => requested,
            (None, policy) => policy.unwrap_or(default_prefetch),
        }
    }
}

/// What a consumer consumes, for its default prefetch.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub enum ConsumerKind {
    Queue,
    Browser,
    Topic,
    DurableTopic,
}

/// The configuration's dead-letter section as the core's settings.
pub fn dead_letter_settings(
    section: &conf::DeadLetterConfig,
    expire_messages_period: Duration,
) -> DeadLetterSettings {
    let strategy = match section.strategy {
        conf::DeadLetterStrategy::Shared => {
            DeadLetterStrategy::Shared { queue: section.queue.as_str().into() }
        }
        conf::DeadLetterStrategy::Individual => DeadLetterStrategy::Individual {
            queue_prefix: section.queue_prefix.as_str().into(),
            topic_prefix: section.topic_prefix.as_str().into(),
        },
        conf::DeadLetterStrategy::Discarding => DeadLetterStrategy::Discarding,
    };
    DeadLetterSettings {
        strategy,
        max_redeliveries: section.redelivery_limit(),
        process_non_persistent: section.process_non_persistent,
        process_expired: section.process_expired,
        expire_messages_period: (!expire_messages_period.is_zero())
            .then_some(expire_messages_period),
    }
}

/// How an entry names its destinations.
#[derive(Debug, Clone)]
enum Target {
    Queue(DestinationFilter),
    Topic(DestinationFilter),
    TempQueue,
    TempTopic,
}

/// How closely an entry matches: a name without wildcards beats any pattern; among patterns,
/// more literal levels win; among equals, the later entry.
type Specificity = (bool, usize, usize);

#[derive(Debug, Clone)]
struct Rule {
    target: Target,
    specificity: Specificity,
    policy: Arc<Policy>,
}

/// Every destination's policy.
#[derive(Debug, Clone)]
pub struct Policies {
    rules: Vec<Rule>,
    default: Arc<Policy>,
    index: RuleIndex,
}

/// The rules by what they cover, so that a lookup (per queue created, per topic's first
/// publish, per advisory check) visits only the rules that match, not every rule.
#[derive(Debug, Clone, Default)]
struct RuleIndex {
    /// Positions in `rules` by pattern.
    queues: PatternIndex<usize>,
    topics: PatternIndex<usize>,
    /// The most specific (the last) `temp_queue` / `temp_topic` entry.
    temp_queue: Option<usize>,
    temp_topic: Option<usize>,
}

impl RuleIndex {
    fn new(rules: &[Rule]) -> RuleIndex {
        let mut index = RuleIndex::default();
        for (position, rule) in rules.iter().enumerate() {
            match &rule.target {
                Target::Queue(filter) => index.queues.insert(filter, position),
                Target::Topic(filter) => index.topics.insert(filter, position),
                Target::TempQueue => index.temp_queue = Some(position),
                Target::TempTopic => index.temp_topic = Some(position),
            }
        }
        index
    }
}

impl Default for Policies {
    fn default() -> Self {
        Policies::from_rules(Vec::new())
    }
}

impl Policies {
    /// The policies of `config` (already validated: every entry has one target).
    pub fn from_config(config: &conf::Config) -> Policies {
        let rules = config
            .policies
            .iter()
            .enumerate()
            .filter_map(|(index, entry)| {
                let (target, specificity) = match entry.target()? {
                    PolicyTarget::Queue(pattern) => {
                        let filter = DestinationFilter::new(pattern);
                        let specificity = specificity_of(&filter, pattern, index);
                        (Target::Queue(filter), specificity)
                    }
                    PolicyTarget::Topic(pattern) => {
                        let filter = DestinationFilter::new(pattern);
                        let specificity = specificity_of(&filter, pattern, index);
                        (Target::Topic(filter), specificity)
                    }
                    PolicyTarget::TempQueue => (Target::TempQueue, (false, 0, index)),
                    PolicyTarget::TempTopic => (Target::TempTopic, (false, 0, index)),
                };
                let mut policy = Policy::from_entry(config, entry);
                if let (Target::Queue(pattern), Some(max)) = (&target, entry.max_destinations) {
                    // -1: no limit (validated: nothing below).
                    policy.max_destinations = usize::try_from(max)
                        .ok()
                        .map(|max| DestinationCap { pattern: pattern.clone(), max });
                }
                Some(Rule { target, specificity, policy: Arc::new(policy) })
            })
            .collect();
        Policies::from_rules(rules)
    }

    fn from_rules(rules: Vec<Rule>) -> Policies {
        let index = RuleIndex::new(&rules);
        Policies { rules, default: Arc::new(Policy::default()), index }
    }

    /// The policy of `destination` (for a topic subscription, pass the topic): its most
    /// specific matching rule's, found in the index.
    pub fn for_destination(&self, destination: &Destination) -> Arc<Policy> {
        let patterns = match destination.kind {
            DestinationKind::Queue => &self.index.queues,
            DestinationKind::Topic => &self.index.topics,
            DestinationKind::TempQueue => return self.policy_at(self.index.temp_queue),
            DestinationKind::TempTopic => return self.policy_at(self.index.temp_topic),
        };
        let mut best: Option<usize> = None;
        patterns.for_each_match(&destination.name, |&position| {
            let specificity = |position: usize| self.rules[position].specificity;
            if best.is_none_or(|best| specificity(position) > specificity(best)) {
                best = Some(position);
            }
        });
        self.policy_at(best)
    }

    fn policy_at(&self, position: Option<usize>) -> Arc<Policy> {
        position
            .map_or_else(|| self.default.clone(), |position| self.rules[position].policy.clone())
    }

    /// The policy of `destination` by scanning every rule: what the index must answer.
    #[cfg(test)]
    fn for_destination_by_scan(&self, destination: &Destination) -> Arc<Policy> {
        let name = &*destination.name;
        self.rules
            .iter()
            .filter(|rule| match (&rule.target, destination.kind) {
                (Target::Queue(filter), DestinationKind::Queue)
                | (Target::Topic(filter), DestinationKind::Topic) => filter.matches(name),
                (Target::TempQueue, DestinationKind::TempQueue)
                | (Target::TempTopic, DestinationKind::TempTopic) => true,
                _ => false,
            })
            .max_by_key(|rule| rule.specificity)
            .map_or_else(|| self.default.clone(), |rule| rule.policy.clone())
    }

    /// Every distinct policy, the defaults included (for tasks that serve all destinations
    /// of a policy, such as the inactive-destination sweep).
    pub fn all(&self) -> impl Iterator<Item = &Arc<Policy>> {
        std::iter::once(&self.default).chain(self.rules.iter().map(|rule| &rule.policy))
    }
}

fn specificity_of(filter: &DestinationFilter, pattern: &str, index: usize) -> Specificity {
    let literal = pattern.split('.').filter(|level| *level != "*" && *level != ">").count();
    (!filter.is_wildcard(), literal, index)
}

#[cfg(test)]
mod tests {
    use super::*;

    fn config(text: &str) -> conf::Config {
        conf::Config::parse(text, "test.toml").expect("valid configuration")
    }

    #[test]
    fn the_most_specific_entry_wins_and_the_rest_take_the_defaults() {
        let policies = Policies::from_config(&config(
            r#"
            [destinations]
            queue_prefetch = 7
            [[policies]]
            queue = "ORDERS.SPECIAL"
            memory_limit = "1 mb"
            [[policies]]
            queue = ">"
            memory_limit = "2 mb"
            strict_order_dispatch = true
            [[policies]]
            queue = "ORDERS.>"
            memory_limit = "3 mb"
            [[policies]]
            topic = ">"
            producer_flow_control = false
            [[policies]]
            temp_queue = true
            memory_limit = "4 mb"
            "#,
        ));
        let limit = |kind, name: &str| {
            let policy = policies.for_destination(&Destination { kind, name: name.into() });
            policy.memory_limit.map(|bytes| bytes >> 20)
        };
        assert_eq!(limit(DestinationKind::Queue, "ORDERS.SPECIAL"), Some(1));
        assert_eq!(limit(DestinationKind::Queue, "ORDERS.EU"), Some(3));
        assert_eq!(limit(DestinationKind::Queue, "OTHER"), Some(2));
        assert_eq!(limit(DestinationKind::TempQueue, "ID:x:1:1"), Some(4));
        // Topics take the topic entry, which leaves the memory limit to [destinations].
        assert_eq!(limit(DestinationKind::Topic, "ORDERS.EU"), None);
        assert_eq!(limit(DestinationKind::TempTopic, "ID:x:1:2"), None);
        let queue = policies.for_destination(&Destination::queue("ORDERS.EU"));
        assert!(!queue.strict_order_dispatch, "the more specific entry does not inherit");
        assert_eq!(queue.queue_prefetch, None, "[destinations] queue_prefetch applies");
        let topic = policies.for_destination(&Destination::topic("T"));
        assert!(!topic.producer_flow_control);
    }

    #[test]
    fn a_client_default_prefetch_takes_the_policy_s() {
        let policy =
            Policy { queue_prefetch: Some(5), topic_prefetch: Some(6), ..Policy::default() };
        assert_eq!(policy.prefetch_for(ConsumerKind::Queue, None, 1000), 5);
        assert_eq!(policy.prefetch_for(ConsumerKind::Queue, Some(1000), 1000), 5);
        assert_eq!(policy.prefetch_for(ConsumerKind::Queue, Some(10), 1000), 10);
        assert_eq!(policy.prefetch_for(ConsumerKind::Topic, Some(32766), 1000), 6);
        assert_eq!(policy.prefetch_for(ConsumerKind::DurableTopic, None, 1000), 1000);
        assert_eq!(policy.prefetch_for(ConsumerKind::DurableTopic, Some(100), 1000), 100);
        assert_eq!(Policy::default().prefetch_for(ConsumerKind::Queue, None, 7), 7);
        assert_eq!(Policy::default().prefetch_for(ConsumerKind::Queue, Some(1000), 7), 1000);
    }

    #[test]
    fn dead_letter_settings_and_the_sweep_come_from_the_entry() {
        let policies = Policies::from_config(&config(
            r#"
            [[policies]]
            queue = "A"
            dead_letter = { strategy = "individual", queue_prefix = "DLQ." }
            expire_messages_period_ms = 0
            "#,
        ));
        let a = policies.for_destination(&Destination::queue("A"));
        let a = a.dead_letters.as_ref().expect("its own settings");
        assert_eq!(
            a.strategy,
            DeadLetterStrategy::Individual {
                queue_prefix: "DLQ.".into(),
                topic_prefix: "ActiveMQ.DLQ.Topic.".into()
            }
        );
        assert_eq!(a.expire_messages_period, None);
        let b = policies.for_destination(&Destination::queue("B"));
        assert!(b.dead_letters.is_none(), "the broker's settings apply");
    }

    /// Many entries of every kind, looked up for many names: the index answers as the scan
    /// (the same entry, so the same policy), including the order of equally specific ones.
    #[test]
    fn the_index_finds_the_entry_the_scan_finds() {
        let patterns = [
            "A", "A.B", "A.B.C", "A.*", "A.*.C", "*.B", "*", ">", "A.>", "A.B.>", "*.>", "B.*",
            "B.>", "*.*.C", "B.*.*",
        ];
        let mut text = String::new();
        for (index, pattern) in patterns.iter().enumerate() {
            let kind = if index % 3 == 2 { "topic" } else { "queue" };
            text +=
                &format!("[[policies]]\n{kind} = \"{pattern}\"\nqueue_prefetch = {}\n", index + 1);
            // Each pattern again, for the other kind and the tie between equal entries.
            let other = if kind == "topic" { "queue" } else { "topic" };
            text +=
                &format!("[[policies]]\n{other} = \"{pattern}\"\nqueue_prefetch = {}\n", index + 1);
        }
        text += "[[policies]]\ntemp_queue = true\n[[policies]]\ntemp_topic = true\n";
        text += "[[policies]]\ntemp_queue = true\n";
        // Equally specific: the later entry wins.
        text += "[[policies]]\nqueue = \"A.*\"\nqueue_prefetch = 99\n";
        let policies = Policies::from_config(&config(&text));
        let names = [
            "A", "A.B", "A.B.C", "A.C", "A.X.C", "B", "B.B", "B.B.C", "A.>.C", "A..B", "", "C.D",
            "A.B.C.D", "X.Y.C", "ID:x:1:1",
        ];
        let kinds = [
            DestinationKind::Queue,
            DestinationKind::Topic,
            DestinationKind::TempQueue,
            DestinationKind::TempTopic,
        ];
        for kind in kinds {
            for name in names {
                let destination = Destination { kind, name: name.into() };
                let (indexed, scanned) = (
                    policies.for_destination(&destination),
                    policies.for_destination_by_scan(&destination),
                );
                assert!(Arc::ptr_eq(&indexed, &scanned), "{kind:?} {name:?}");
            }
        }
        let none = Policies::default();
        assert!(Arc::ptr_eq(&none.for_destination(&Destination::queue("A")), &none.default));
        let tie = policies.for_destination(&Destination::queue("A.X"));
        assert_eq!(tie.queue_prefetch, Some(99));
    }
}
