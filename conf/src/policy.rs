//! `[[policies]]`: per-destination policies, as ActiveMQ's `<destinationPolicy>` `<policyEntry>`.
//!
//! Each entry names the destinations it covers with `queue = "PATTERN"` or `topic = "PATTERN"`
//! (ActiveMQ wildcards: `.` separates levels, `*` matches one level, `>` the rest), or
//! `temp_queue = true` / `temp_topic = true` for every temporary destination of that kind. A
//! destination takes the entry that matches it most specifically (a name without wildcards
//! before any pattern, then the pattern with more literal levels, then the later entry); keys
//! that entry leaves out take the defaults of `[destinations]`, `[dead_letter]` and `[broker]`.
//! Topic entries also cover the topic's subscriptions (durable or not), whose queues hold its
//! messages.
//!
//! Seed 002's entry reads:
//!
//! ```
//! let config = conf::Config::parse(r#"
//! [[policies]]
//! queue = ">"
//! optimized_dispatch = true
//! lazy_dispatch = false
//! producer_flow_control = false
//! memory_limit = "128 mb"
//! strict_order_dispatch = true
//! dispatch_policy = "strict_order"
//! message_group_map = { kind = "simple" }
//! subscription_recovery = { kind = "timed", recover_duration_ms = 360000 }
//! "#, "ferromq.toml")?;
//! let policy = &config.policies[0];
//! assert_eq!(policy.memory_limit, Some(128 << 20));
//! assert_eq!(policy.producer_flow_control, Some(false));
//! # Ok::<(), conf::ConfigError>(())
//! ```

use std::time::Duration;

use serde::{Deserialize, Serialize};

use crate::dead_letter::DeadLetterConfig;
use crate::number;
use crate::validate::Invalid;

/// One `[[policies]]` entry. Every key but the one naming the destinations is optional.
#[derive(Debug, Clone, Default, PartialEq, Serialize, Deserialize)]
#[serde(default, deny_unknown_fields)]
pub struct PolicyEntry {
    /// The queues this entry covers: a name or pattern (`">"` for all).
    #[serde(skip_serializing_if = "Option::is_none")]
    pub queue: Option<String>,
    /// The topics this entry covers (and their subscriptions): a name or pattern.
    #[serde(skip_serializing_if = "Option::is_none")]
    pub topic: Option<String>,
    /// Covers every temporary queue (ActiveMQ's `tempQueue="true"`).
    #[serde(skip_serializing_if = "std::ops::Not::not")]
    pub temp_queue: bool,
    /// Covers every temporary topic (ActiveMQ's `tempTopic="true"`).
    #[serde(skip_serializing_if = "std::ops::Not::not")]
    pub temp_topic: bool,

    /// Bytes of messages each destination keeps in memory (bytes, or a text such as
    /// `"128 mb"` as in ActiveMQ's `memoryLimit`). Default `[destinations] memory_limit`.
    #[serde(deserialize_with = "number::optional_bytes", skip_serializing_if = "Option::is_none")]
    pub memory_limit: Option<u64>,
    /// Producer flow control: `true` (the default) makes a send that finds the destination's
    /// memory full of messages that cannot page out wait (or fail, per `[broker]
    /// send_fail_if_no_space`); `false` never holds a send for this destination's own limit:
    /// persistent messages page out to the store and non-persistent ones spill to the temporary
    /// store (ActiveMQ's `producerFlowControl`).
    #[serde(skip_serializing_if = "Option::is_none")]
    pub producer_flow_control: Option<bool>,
    /// Prefetch of queue consumers that ask for none, or for the client's default (1000).
    /// Default `[destinations] queue_prefetch`.
    #[serde(deserialize_with = "number::optional_whole", skip_serializing_if = "Option::is_none")]
    pub queue_prefetch: Option<u32>,
    /// Prefetch of queue browsers that ask for none or the client's default (500).
    #[serde(deserialize_with = "number::optional_whole", skip_serializing_if = "Option::is_none")]
    pub queue_browser_prefetch: Option<u32>,
    /// Prefetch of non-durable topic subscribers that ask for none or the client's default
    /// (32766).
    #[serde(deserialize_with = "number::optional_whole", skip_serializing_if = "Option::is_none")]
    pub topic_prefetch: Option<u32>,
    /// Prefetch of durable topic subscribers that ask for none or the client's default (100).
    #[serde(deserialize_with = "number::optional_whole", skip_serializing_if = "Option::is_none")]
    pub durable_topic_prefetch: Option<u32>,
    /// ActiveMQ's `optimizedDispatch` (dispatch on the producer's thread instead of a separate
    /// dispatch thread). Accepted for compatibility: ferromq always dispatches from the
    /// destination's own task as messages arrive, which is what the option asks for.
    #[serde(skip_serializing_if = "Option::is_none")]
    pub optimized_dispatch: Option<bool>,
    /// Lazy dispatch: a queue keeps in memory only the messages its consumers have room for
    /// (their free prefetch) and leaves the rest in the store, instead of paging in up to its
    /// memory limit (ActiveMQ's `lazyDispatch`). Default false.
    #[serde(skip_serializing_if = "Option::is_none")]
    pub lazy_dispatch: Option<bool>,
    /// Queues: fill one consumer's prefetch before the next, in the order consumers arrived,
    /// instead of round-robin, so that messages reach consumers in queue order (ActiveMQ's
    /// `strictOrderDispatch`). Default false.
    #[serde(skip_serializing_if = "Option::is_none")]
    pub strict_order_dispatch: Option<bool>,
    /// Topics: the dispatch policy. Every policy delivers a topic's messages to every
    /// subscriber in one order (ferromq fans out under one lock), which is what
    /// `strictOrderDispatchPolicy` guarantees; the others are accepted for compatibility.
    #[serde(skip_serializing_if = "Option::is_none")]
    pub dispatch_policy: Option<DispatchPolicy>,
    /// How a queue remembers which consumer owns each message group (JMSXGroupID).
    #[serde(skip_serializing_if = "Option::is_none")]
    pub message_group_map: Option<MessageGroupMap>,
    /// Topics: which recent messages a retroactive subscriber receives when it subscribes.
    #[serde(skip_serializing_if = "Option::is_none")]
    pub subscription_recovery: Option<SubscriptionRecovery>,
    /// Where this destination's undeliverable messages go; default the `[dead_letter]` section.
    #[serde(skip_serializing_if = "Option::is_none")]
    pub dead_letter: Option<DeadLetterConfig>,
    /// How often the destination is swept for expired messages; `0` never. Default
    /// `[destinations] expire_messages_period_ms`.
    #[serde(
        rename = "expire_messages_period_ms",
        with = "number::optional_millis",
        skip_serializing_if = "Option::is_none"
    )]
    pub expire_messages_period: Option<Duration>,
    /// Removes destinations that have had no messages, consumers or producers for
    /// `inactive_timeout_before_gc_ms` (ActiveMQ's `gcInactiveDestinations`). Default false.
    #[serde(skip_serializing_if = "Option::is_none")]
    pub gc_inactive_destinations: Option<bool>,
    /// How long a destination must be inactive before it is removed. Default 60 000.
    #[serde(
        rename = "inactive_timeout_before_gc_ms",
        with = "number::optional_millis",
        skip_serializing_if = "Option::is_none"
    )]
    pub inactive_timeout_before_gc: Option<Duration>,
    /// What to do about slow consumers (ActiveMQ's `slowConsumerStrategy`). Default: nothing
    /// but detection (and the advisory, when `advisory_for_slow_consumers`).
    #[serde(skip_serializing_if = "Option::is_none")]
    pub slow_consumer_strategy: Option<SlowConsumerStrategy>,
    /// Non-durable topic subscribers: how many messages beyond its prefetch a subscriber may
    /// have waiting before the oldest are discarded (ActiveMQ's
    /// `constantPendingMessageLimitStrategy`); `-1` (the default) for no limit.
    #[serde(skip_serializing_if = "Option::is_none")]
    pub pending_message_limit: Option<i64>,
    /// Advisory on `ActiveMQ.Advisory.SlowConsumer.<Queue|Topic>.<name>` when a consumer
    /// becomes slow. Default false.
    #[serde(skip_serializing_if = "Option::is_none")]
    pub advisory_for_slow_consumers: Option<bool>,
    /// Advisory on `ActiveMQ.Advisory.FastProducer.<Queue|Topic>.<name>` when a producer is
    /// held by flow control. Default false.
    #[serde(skip_serializing_if = "Option::is_none")]
    pub advisory_for_fast_producers: Option<bool>,
    /// Advisory on `ActiveMQ.Advisory.FULL.<Queue|Topic>.<name>` when the destination's
    /// memory limit is reached. Default false.
    #[serde(skip_serializing_if = "Option::is_none")]
    pub advisory_when_full: Option<bool>,
    /// Advisory on `ActiveMQ.Advisory.MessageDiscarded.<Queue|Topic>.<name>` when a message
    /// is discarded (pending message limit). Default false.
    #[serde(skip_serializing_if = "Option::is_none")]
    pub advisory_for_discarding_messages: Option<bool>,
    /// Advisory on `ActiveMQ.Advisory.MessageDelivered.<Queue|Topic>.<name>` for each message
    /// delivered to a consumer. Default false.
    #[serde(skip_serializing_if = "Option::is_none")]
    pub advisory_for_delivery: Option<bool>,
    /// Advisory on `ActiveMQ.Advisory.MessageConsumed.<Queue|Topic>.<name>` for each message
    /// acknowledged. Default false.
    #[serde(skip_serializing_if = "Option::is_none")]
    pub advisory_for_consumed: Option<bool>,
    /// Advisory on `ActiveMQ.Advisory.NoConsumer.<Queue|Topic>.<name>` carrying a message sent
    /// to a topic without subscribers (or a queue without consumers). Default false.
    #[serde(skip_serializing_if = "Option::is_none")]
    pub send_advisory_if_no_consumers: Option<bool>,
    /// Queue entries: how many queues matching this entry's pattern may exist (ActiveMQ's
    /// `maxDestinations`); a client that uses one more new queue taking this entry's policy
    /// is refused and nothing is created. Queues that exist already (recovered at start,
    /// dead-letter queues) count but are never refused. `-1` (the default) for no limit.
    #[serde(skip_serializing_if = "Option::is_none")]
    pub max_destinations: Option<i64>,
}

/// A topic's dispatch policy; TOML `"strict_order"`, `"round_robin"` or `"simple"`.
#[derive(Debug, Clone, Copy, PartialEq, Eq, Serialize, Deserialize)]
#[serde(rename_all = "snake_case")]
pub enum DispatchPolicy {
    StrictOrder,
    RoundRobin,
    Simple,
}

/// How a queue maps message groups to consumers (ActiveMQ's `messageGroupMapFactory`).
#[derive(Debug, Clone, Copy, PartialEq, Eq, Serialize, Deserialize)]
#[serde(tag = "kind", rename_all = "snake_case", deny_unknown_fields)]
pub enum MessageGroupMap {
    /// Every group is remembered until its consumer goes or the group is closed
    /// (`simpleMessageGroupMapFactory`).
    Simple,
    /// The `cache_size` most recently used groups are remembered; older ones are forgotten
    /// and go to whichever consumer gets their next message (`cachedMessageGroupMapFactory`,
    /// ActiveMQ's default, 1024 groups).
    Cached {
        #[serde(default = "default_group_cache")]
        cache_size: usize,
    },
    /// Groups hash to `buckets` buckets and each bucket has one owner: bounded memory however
    /// many groups there are (`messageGroupHashBucketFactory`, 1024 buckets).
    HashBucket {
        #[serde(default = "default_group_cache")]
        buckets: usize,
    },
}

fn default_group_cache() -> usize {
    1024
}

impl Default for MessageGroupMap {
    /// ActiveMQ's default: a cache of 1024 groups.
    fn default() -> Self {
        MessageGroupMap::Cached { cache_size: default_group_cache() }
    }
}

/// Which recent messages of a topic a retroactive subscriber receives (ActiveMQ's
/// `subscriptionRecoveryPolicy`).
#[derive(Debug, Clone, Copy, PartialEq, Eq, Serialize, Deserialize)]
#[serde(tag = "kind", rename_all = "snake_case", deny_unknown_fields)]
pub enum SubscriptionRecovery {
    /// None (`noSubscriptionRecoveryPolicy`).
    None,
    /// The last `maximum_size` messages (`fixedCountSubscriptionRecoveryPolicy`, 100).
    FixedCount {
        #[serde(default = "default_recovery_count")]
        maximum_size: usize,
    },
    /// The most recent messages up to `maximum_size` bytes
    /// (`fixedSizedSubscriptionRecoveryPolicy`, ActiveMQ's default, 64 KiB).
    FixedSize {
        #[serde(default = "default_recovery_bytes", deserialize_with = "number::bytes")]
        maximum_size: u64,
    },
    /// The last message only (`lastImageSubscriptionRecoveryPolicy`).
    LastImage,
    /// The messages of the last `recover_duration_ms` (`timedSubscriptionRecoveryPolicy`,
    /// 60 000).
    Timed {
        #[serde(default = "default_recover_duration", with = "number::millis")]
        recover_duration_ms: Duration,
    },
}

fn default_recovery_count() -> usize {
    100
}

fn default_recovery_bytes() -> u64 {
    64 << 10
}

fn default_recover_duration() -> Duration {
    Duration::from_secs(60)
}

impl Default for SubscriptionRecovery {
    /// ActiveMQ's default: the last 64 KiB.
    fn default() -> Self {
        SubscriptionRecovery::FixedSize { maximum_size: default_recovery_bytes() }
    }
}

/// What to do about a slow consumer (ActiveMQ's `abortSlowConsumerStrategy`).
#[derive(Debug, Clone, Copy, PartialEq, Eq, Serialize, Deserialize)]
#[serde(default, deny_unknown_fields)]
pub struct SlowConsumerStrategy {
    /// Abort a consumer that has been slow at this many consecutive checks; `-1` (the
    /// default) for no count limit.
    pub max_slow_count: i64,
    /// Abort a consumer that has been slow this long. Default 30 000.
    #[serde(rename = "max_slow_duration_ms", with = "number::millis")]
    pub max_slow_duration: Duration,
    /// How often consumers are checked. Default 30 000.
    #[serde(rename = "check_period_ms", with = "number::millis")]
    pub check_period: Duration,
    /// Close the consumer's whole connection instead of just the consumer. Default false.
    pub abort_connection: bool,
}

impl Default for SlowConsumerStrategy {
    fn default() -> Self {
        SlowConsumerStrategy {
            max_slow_count: -1,
            max_slow_duration: Duration::from_secs(30),
            check_period: Duration::from_secs(30),
            abort_connection: false,
        }
    }
}

/// Which destinations an entry covers.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub enum PolicyTarget<'a> {
    Queue(&'a str),
    Topic(&'a str),
    TempQueue,
    TempTopic,
}

impl PolicyEntry {
    /// The destinations this entry covers; [`check`](Self::check) makes sure there is exactly
    /// one answer.
    pub fn target(&self) -> Option<PolicyTarget<'_>> {
        match (&self.queue, &self.topic, self.temp_queue, self.temp_topic) {
            (Some(queue), None, false, false) => Some(PolicyTarget::Queue(queue)),
            (None, Some(topic), false, false) => Some(PolicyTarget::Topic(topic)),
            (None, None, true, false) => Some(PolicyTarget::TempQueue),
            (None, None, false, true) => Some(PolicyTarget::TempTopic),
            _ => None,
        }
    }

    /// Checks one entry; `entry` is its key path (`policies[0]`).
    pub(crate) fn check(&self, entry: &str) -> Result<(), Invalid> {
        let target = self.target().ok_or_else(|| {
            Invalid::new(
                entry,
                "needs exactly one of `queue = \"PATTERN\"`, `topic = \"PATTERN\"`, \
                 `temp_queue = true` or `temp_topic = true`",
            )
        })?;
        match target {
            PolicyTarget::Queue(pattern) => crate::validate::destination_pattern(pattern)
                .map_err(|reason| Invalid::new(format!("{entry}.queue"), reason))?,
            PolicyTarget::Topic(pattern) => crate::validate::destination_pattern(pattern)
                .map_err(|reason| Invalid::new(format!("{entry}.topic"), reason))?,
            PolicyTarget::TempQueue | PolicyTarget::TempTopic => {}
        }
        if let Some(bytes) = self.memory_limit {
            crate::validate::memory_limit(&format!("{entry}.memory_limit"), bytes)?;
        }
        let prefetches = [
            ("queue_prefetch", self.queue_prefetch),
            ("queue_browser_prefetch", self.queue_browser_prefetch),
            ("topic_prefetch", self.topic_prefetch),
            ("durable_topic_prefetch", self.durable_topic_prefetch),
        ];
        for (key, prefetch) in prefetches {
            if prefetch == Some(0) {
                return Err(Invalid::new(format!("{entry}.{key}"), "must be at least 1"));
            }
        }
        if let Some(period) = self.expire_messages_period {
            crate::validate::duration(&format!("{entry}.expire_messages_period_ms"), period, true)?;
        }
        if let Some(timeout) = self.inactive_timeout_before_gc {
            crate::validate::duration(
                &format!("{entry}.inactive_timeout_before_gc_ms"),
                timeout,
                false,
            )?;
        }
        if let Some(dead_letter) = &self.dead_letter {
            dead_letter.check(&format!("{entry}.dead_letter"))?;
        }
        if let Some(map) = self.message_group_map {
            let (key, size) = match map {
                MessageGroupMap::Simple => ("", 1),
                MessageGroupMap::Cached { cache_size } => ("cache_size", cache_size),
                MessageGroupMap::HashBucket { buckets } => ("buckets", buckets),
            };
            if size == 0 {
                return Err(Invalid::new(
                    format!("{entry}.message_group_map.{key}"),
                    "must be at least 1",
                ));
            }
        }
        if let Some(recovery) = self.subscription_recovery {
            let key = format!("{entry}.subscription_recovery");
            match recovery {
                SubscriptionRecovery::FixedCount { maximum_size: 0 }
                | SubscriptionRecovery::FixedSize { maximum_size: 0 } => {
                    return Err(Invalid::new(
                        format!("{key}.maximum_size"),
                        "must be at least 1 (use kind = \"none\" for no recovery)",
                    ))
                }
                SubscriptionRecovery::Timed { recover_duration_ms } => crate::validate::duration(
                    &format!("{key}.recover_duration_ms"),
                    recover_duration_ms,
                    false,
                )?,
                _ => {}
            }
        }
        if let Some(strategy) = self.slow_consumer_strategy {
            let key = format!("{entry}.slow_consumer_strategy");
            if strategy.max_slow_count < -1 {
                return Err(Invalid::new(
                    format!("{key}.max_slow_count"),
                    "must be -1 (no count limit) or more",
                ));
            }
            crate::validate::duration(
                &format!("{key}.max_slow_duration_ms"),
                strategy.max_slow_duration,
                true,
            )?;
            crate::validate::duration(
                &format!("{key}.check_period_ms"),
                strategy.check_period,
                false,
            )?;
        }
        if let Some(limit) = self.max_destinations {
            let key = format!("{entry}.max_destinations");
            if limit < -1 {
                return Err(Invalid::new(key, "must be -1 (no limit) or more"));
            }
            if !matches!(target, PolicyTarget::Queue(_)) {
                return Err(Invalid::new(
                    key,
                    "limits queues only (a `queue = \"PATTERN\"` entry): a topic holds no task \
                     or stored record of its own, and temporary destinations end with their \
                     connection",
                ));
            }
        }
        if self.pending_message_limit.is_some_and(|limit| limit < -1) {
            return Err(Invalid::new(
                format!("{entry}.pending_message_limit"),
                "must be -1 (no limit) or more",
            ));
        }
        Ok(())
    }
}
