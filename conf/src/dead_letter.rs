//! `[dead_letter]`: where messages go that cannot be delivered, as ActiveMQ's dead-letter
//! strategies (`<sharedDeadLetterStrategy>`, `<individualDeadLetterStrategy>`,
//! `<discardingDeadLetterStrategy>`) and the broker-side redelivery limit for STOMP.
//!
//! The section is one self-contained struct so that per-destination policies (ActiveMQ's
//! `policyEntry`) can later hold one each, with this section as the default.

use std::fmt;

use serde::de::{self, Deserializer, Unexpected, Visitor};
use serde::{Deserialize, Serialize};

use crate::validate::Invalid;

/// `[dead_letter]`: the dead-letter strategy and when it applies.
#[derive(Debug, Clone, PartialEq, Serialize, Deserialize)]
#[serde(default, deny_unknown_fields)]
pub struct DeadLetterConfig {
    /// Which dead-letter queue a message goes to. Default [`DeadLetterStrategy::Shared`].
    pub strategy: DeadLetterStrategy,
    /// The one dead-letter queue of the shared strategy. Default `"ActiveMQ.DLQ"`.
    pub queue: String,
    /// Individual strategy: the dead-letter queue of queue `Q` is `<queue_prefix>Q`.
    /// Default `"ActiveMQ.DLQ.Queue."`.
    pub queue_prefix: String,
    /// Individual strategy: the dead-letter queue of topic `T` (a durable subscription's
    /// messages) is `<topic_prefix>T`. Default `"ActiveMQ.DLQ.Topic."`.
    pub topic_prefix: String,
    /// How many times the broker redelivers a message a STOMP consumer gives back (NACK, or
    /// a `client` acknowledged message still unacknowledged when its consumer goes) before it
    /// dead-letters it: 0 dead-letters at the first NACK (Apache ActiveMQ's STOMP behaviour),
    /// -1 never. OpenWire clients count for themselves (their RedeliveryPolicy). Default 6,
    /// as the ActiveMQ client's `maximumRedeliveries`.
    #[serde(deserialize_with = "redeliveries")]
    pub max_redeliveries: i32,
    /// Dead-letter non-persistent messages too (made persistent, with property
    /// `originalDeliveryMode`); otherwise they are dropped. Default false, as ActiveMQ's
    /// `processNonPersistent`.
    pub process_non_persistent: bool,
    /// Dead-letter expired messages; otherwise they are dropped. Default true, as ActiveMQ's
    /// `processExpired`.
    pub process_expired: bool,
}

impl DeadLetterConfig {
    /// ActiveMQ's shared dead-letter queue.
    pub const DEFAULT_QUEUE: &'static str = "ActiveMQ.DLQ";
    /// ActiveMQ's individual strategy prefix for queues.
    pub const DEFAULT_QUEUE_PREFIX: &'static str = "ActiveMQ.DLQ.Queue.";
    /// ActiveMQ's individual strategy prefix for topics.
    pub const DEFAULT_TOPIC_PREFIX: &'static str = "ActiveMQ.DLQ.Topic.";

    /// The redelivery limit: `None` for no limit (`max_redeliveries = -1`).
    pub fn redelivery_limit(&self) -> Option<u32> {
        u32::try_from(self.max_redeliveries).ok()
    }

    /// Checks the names and the limit; `section` is the key path of this table.
    pub(crate) fn check(&self, section: &str) -> Result<(), Invalid> {
        destination_name(&self.queue, false)
            .map_err(|reason| Invalid::new(format!("{section}.queue"), reason))?;
        destination_name(&self.queue_prefix, true)
            .map_err(|reason| Invalid::new(format!("{section}.queue_prefix"), reason))?;
        destination_name(&self.topic_prefix, true)
            .map_err(|reason| Invalid::new(format!("{section}.topic_prefix"), reason))?;
        if self.max_redeliveries < -1 {
            return Err(Invalid::new(
                format!("{section}.max_redeliveries"),
                format!("{} is below -1 (-1 means no maximum)", self.max_redeliveries),
            ));
        }
        Ok(())
    }
}

impl Default for DeadLetterConfig {
    fn default() -> Self {
        DeadLetterConfig {
            strategy: DeadLetterStrategy::Shared,
            queue: Self::DEFAULT_QUEUE.to_owned(),
            queue_prefix: Self::DEFAULT_QUEUE_PREFIX.to_owned(),
            topic_prefix: Self::DEFAULT_TOPIC_PREFIX.to_owned(),
            max_redeliveries: 6,
            process_non_persistent: false,
            process_expired: true,
        }
    }
}

/// Which dead-letter queue a message goes to; TOML `"shared"`, `"individual"` or
/// `"discarding"`.
#[derive(Debug, Clone, Copy, PartialEq, Eq, Default, Serialize, Deserialize)]
#[serde(rename_all = "lowercase")]
pub enum DeadLetterStrategy {
    /// Every dead letter goes to one queue, [`DeadLetterConfig::queue`] (ActiveMQ's default).
    #[default]
    Shared,
    /// One dead-letter queue per destination, named with [`DeadLetterConfig::queue_prefix`]
    /// or [`DeadLetterConfig::topic_prefix`].
    Individual,
    /// Dead letters are dropped (logged).
    Discarding,
}

/// A dead-letter queue name, or a prefix of one: no wildcards, no composite separator, no
/// empty level (a prefix may end with the dot before the name).
fn destination_name(name: &str, prefix: bool) -> Result<(), String> {
    if name.trim().is_empty() {
        return Err("must not be empty".to_owned());
    }
    if let Some(bad) = name.chars().find(|c| matches!(c, '*' | '>' | ',') || c.is_control()) {
        return Err(format!(
            "`{name}` contains `{}`: a dead-letter queue needs a plain name, without wildcards \
             or `,`",
            bad.escape_default()
        ));
    }
    let levels = if prefix { name.strip_suffix('.').unwrap_or(name) } else { name };
    if levels.split('.').any(str::is_empty) {
        return Err(format!(
            "`{name}` has an empty level: levels are separated by single dots, e.g. \"ActiveMQ.DLQ\""
        ));
    }
    Ok(())
}

/// `max_redeliveries`: a whole number, or -1.
fn redeliveries<'de, D: Deserializer<'de>>(deserializer: D) -> Result<i32, D::Error> {
    deserializer.deserialize_i64(Redeliveries)
}

struct Redeliveries;

impl Visitor<'_> for Redeliveries {
    type Value = i32;

    fn expecting(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        f.write_str("a whole number, or -1 for no maximum")
    }

    fn visit_i64<E: de::Error>(self, value: i64) -> Result<i32, E> {
        i32::try_from(value).map_err(|_| E::invalid_value(Unexpected::Signed(value), &self))
    }

    fn visit_u64<E: de::Error>(self, value: u64) -> Result<i32, E> {
        i32::try_from(value).map_err(|_| E::invalid_value(Unexpected::Unsigned(value), &self))
    }
}
