//! `[[composite_destinations]]`: configured composite queues and topics, as ActiveMQ's
//! `<virtualDestinationInterceptor>` `<compositeQueue>` and `<compositeTopic>`: a message sent to
//! the composite is forwarded to each of its targets (those with a selector only when it
//! matches), and kept in the composite itself too unless `forward_only`.
//!
//! Destinations are written in ActiveMQ's qualified form, `queue://NAME` or `topic://NAME`; a
//! bare name is a queue. Selectors are only checked for being there: their syntax is the
//! broker's (this crate does not know it), which refuses to start with an invalid one.

use std::fmt;

use serde::de::{self, Deserializer, MapAccess, Visitor};
use serde::ser::{SerializeMap, Serializer};
use serde::{Deserialize, Serialize};

use crate::validate::Invalid;

/// One `[[composite_destinations]]` entry.
///
/// ```
/// # use conf::{Config, DestinationType};
/// let config = conf::Config::parse(r#"
/// [[composite_destinations]]
/// name = "ORDERS.ALL"
/// forward_to = ["queue://ORDERS.EU", { destination = "topic://BIG", selector = "amount > 100" }]
/// "#, "ferromq.toml")?;
/// let composite = &config.composite_destinations[0];
/// assert_eq!(composite.name.to_string(), "queue://ORDERS.ALL");
/// assert!(composite.forward_only);
/// assert_eq!(composite.forward_to[1].destination.kind, DestinationType::Topic);
/// assert_eq!(composite.forward_to[1].selector.as_deref(), Some("amount > 100"));
/// # Ok::<(), conf::ConfigError>(())
/// ```
#[derive(Debug, Clone, PartialEq, Serialize, Deserialize)]
#[serde(deny_unknown_fields)]
pub struct CompositeDestinationConfig {
    /// The composite queue or topic producers send to. Required; no wildcards.
    pub name: DestinationName,
    /// Forward only: the composite itself keeps nothing. `false` also delivers every message to
    /// the composite's own consumers (or subscribers). Default true, as ActiveMQ's
    /// `forwardOnly`.
    #[serde(default = "forward_only_default")]
    pub forward_only: bool,
    /// Where each message goes: at least one target. Required.
    pub forward_to: Vec<ForwardTarget>,
}

fn forward_only_default() -> bool {
    true
}

/// Queue or topic.
#[derive(Debug, Clone, Copy, PartialEq, Eq, Hash)]
pub enum DestinationType {
    Queue,
    Topic,
}

/// A queue or topic name as written in the file: `queue://NAME`, `topic://NAME`, or a bare
/// `NAME` (a queue).
#[derive(Debug, Clone, PartialEq, Eq, Hash)]
pub struct DestinationName {
    pub kind: DestinationType,
    pub name: String,
}

impl DestinationName {
    /// Parses the qualified form; temporary destinations and unknown prefixes are refused.
    pub fn parse(text: &str) -> Result<DestinationName, String> {
        let (kind, name) = if let Some(name) = text.strip_prefix("queue://") {
            (DestinationType::Queue, name)
        } else if let Some(name) = text.strip_prefix("topic://") {
            (DestinationType::Topic, name)
        } else if text.starts_with("temp-queue://") || text.starts_with("temp-topic://") {
            return Err(format!(
                "`{text}` is a temporary destination, which lives only as long as its connection: \
                 use a queue:// or topic://"
            ));
        } else if let Some((scheme, _)) = text.split_once("://") {
            return Err(format!(
                "`{text}`: unknown kind `{scheme}://` (write queue://NAME or topic://NAME; a bare \
                 name is a queue)"
            ));
        } else {
            (DestinationType::Queue, text)
        };
        Ok(DestinationName { kind, name: name.to_owned() })
    }

    /// Checks the name itself: not empty, no wildcards, no composite separator.
    fn check(&self) -> Result<(), String> {
        if self.name.trim().is_empty() {
            return Err(format!("`{self}` has an empty name"));
        }
        if let Some(bad) =
            self.name.chars().find(|c| matches!(c, '*' | '>' | ',') || c.is_control())
        {
            return Err(format!(
                "`{self}` contains `{}`: a composite and its targets need plain names, without \
                 wildcards or `,`",
                bad.escape_default()
            ));
        }
        Ok(())
    }
}

impl fmt::Display for DestinationName {
    /// The qualified form, `queue://NAME` or `topic://NAME`.
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        let prefix = match self.kind {
            DestinationType::Queue => "queue://",
            DestinationType::Topic => "topic://",
        };
        write!(f, "{prefix}{}", self.name)
    }
}

impl Serialize for DestinationName {
    fn serialize<S: Serializer>(&self, serializer: S) -> Result<S::Ok, S::Error> {
        serializer.collect_str(self)
    }
}

impl<'de> Deserialize<'de> for DestinationName {
    fn deserialize<D: Deserializer<'de>>(deserializer: D) -> Result<Self, D::Error> {
        struct NameVisitor;
        impl Visitor<'_> for NameVisitor {
            type Value = DestinationName;
            fn expecting(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
                f.write_str("a destination, e.g. \"queue://ORDERS\" or \"topic://AUDIT\"")
            }
            fn visit_str<E: de::Error>(self, text: &str) -> Result<DestinationName, E> {
                DestinationName::parse(text).map_err(E::custom)
            }
        }
        deserializer.deserialize_str(NameVisitor)
    }
}

/// One element of `forward_to`: a destination (`"queue://ORDERS.EU"`), or a destination with a
/// selector (`{ destination = "queue://BIG", selector = "amount > 100" }`, ActiveMQ's
/// `<filteredDestination>`), which gets only the messages the selector matches.
#[derive(Debug, Clone, PartialEq)]
pub struct ForwardTarget {
    pub destination: DestinationName,
    /// A JMS message selector (SQL-92 subset), checked by the broker when it starts.
    pub selector: Option<String>,
}

/// The table form of a [`ForwardTarget`].
#[derive(Deserialize)]
#[serde(deny_unknown_fields)]
struct FilteredTarget {
    destination: DestinationName,
    selector: Option<String>,
}

impl Serialize for ForwardTarget {
    fn serialize<S: Serializer>(&self, serializer: S) -> Result<S::Ok, S::Error> {
        let Some(selector) = &self.selector else {
            return self.destination.serialize(serializer);
        };
        let mut map = serializer.serialize_map(Some(2))?;
        map.serialize_entry("destination", &self.destination)?;
        map.serialize_entry("selector", selector)?;
        map.end()
    }
}

impl<'de> Deserialize<'de> for ForwardTarget {
    fn deserialize<D: Deserializer<'de>>(deserializer: D) -> Result<Self, D::Error> {
        struct TargetVisitor;
        impl<'de> Visitor<'de> for TargetVisitor {
            type Value = ForwardTarget;
            fn expecting(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
                f.write_str(
                    "a destination (\"queue://ORDERS.EU\") or a table \
                     ({ destination = \"queue://BIG\", selector = \"amount > 100\" })",
                )
            }
            fn visit_str<E: de::Error>(self, text: &str) -> Result<ForwardTarget, E> {
                let destination = DestinationName::parse(text).map_err(E::custom)?;
                Ok(ForwardTarget { destination, selector: None })
            }
            fn visit_map<M: MapAccess<'de>>(self, map: M) -> Result<ForwardTarget, M::Error> {
                let table =
                    FilteredTarget::deserialize(de::value::MapAccessDeserializer::new(map))?;
                Ok(ForwardTarget { destination: table.destination, selector: table.selector })
            }
        }
        deserializer.deserialize_any(TargetVisitor)
    }
}

/// Checks every entry: names and targets, at least one target, none the composite itself, no
/// two entries for one composite. `list` is the key path of the list.
pub(crate) fn check(composites: &[CompositeDestinationConfig], list: &str) -> Result<(), Invalid> {
    for (index, composite) in composites.iter().enumerate() {
        let entry = format!("{list}[{index}]");
        let invalid = |key: String, reason: String| Invalid::new(key, reason).or_else(&entry);
        composite.name.check().map_err(|reason| invalid(format!("{entry}.name"), reason))?;
        let earlier = composites[..index].iter().position(|other| other.name == composite.name);
        if let Some(earlier) = earlier {
            return Err(invalid(
                format!("{entry}.name"),
                format!("`{}` is already configured by {list}[{earlier}]", composite.name),
            ));
        }
        if composite.forward_to.is_empty() {
            return Err(invalid(
                format!("{entry}.forward_to"),
                "needs at least one target, e.g. [\"queue://ORDERS.EU\"]".to_owned(),
            ));
        }
        for (position, target) in composite.forward_to.iter().enumerate() {
            let key = format!("{entry}.forward_to[{position}]");
            target.destination.check().map_err(|reason| invalid(key.clone(), reason))?;
            if target.destination == composite.name {
                return Err(invalid(
                    key,
                    format!(
                        "`{}` forwards to itself; set forward_only = false instead",
                        composite.name
                    ),
                ));
            }
            if target.selector.as_deref().is_some_and(|selector| selector.trim().is_empty()) {
                return Err(invalid(
                    format!("{key}.selector"),
                    "must not be empty (leave `selector` out to forward every message)".to_owned(),
                ));
            }
        }
    }
    Ok(())
}
