//! Configured composite destinations, as ActiveMQ's `<compositeQueue>` and `<compositeTopic>`:
//! a message sent to a composite is forwarded to each target whose selector matches it (all of
//! them when they have none), and also goes to the composite itself unless it is forward-only.
//!
//! Routing only changes *where* a message goes: every queue it reaches holds the same
//! `Arc<Message>`, stored once, whose `destination` stays the one it was sent to. What the
//! consumer of a copy sees is decided at delivery ([`Core::shown_destination`]): the queue (or
//! topic) the copy was routed to, with the sent-to destination as the original destination, as
//! ActiveMQ's `copyMessage` / `setOriginalDestination` give.
//!
//! A target that is itself a composite is expanded too (as ActiveMQ does), each composite at
//! most once per message, so a cycle of composites ends.

use std::collections::HashMap;
use std::sync::Arc;

use store::{Destination, DestinationKind, Message, QueueKey};

use super::Core;
use crate::core::selector::Selector;
use crate::core::types::composite_parts;
use crate::core::wildcard::DestinationFilter;

/// What a configured composite does with a message sent to it.
#[derive(Debug, Clone)]
pub struct CompositeRule {
    /// The composite itself keeps nothing (ActiveMQ's `forwardOnly`, true by default there).
    pub forward_only: bool,
    pub targets: Vec<CompositeTarget>,
}

/// One destination a composite forwards to.
#[derive(Debug, Clone)]
pub struct CompositeTarget {
    pub destination: Destination,
    /// Only messages it matches are forwarded (ActiveMQ's `<filteredDestination>`).
    pub selector: Option<Arc<Selector>>,
}

/// The configured composites by name.
pub type Composites = HashMap<Destination, CompositeRule>;

impl Core {
    /// Every destination `message` goes to: each part of a client-side composite (`A,B`), a
    /// configured composite replaced by its matching targets (and kept unless forward-only).
    pub(crate) fn targets(&self, message: &Message) -> Vec<Destination> {
        let composites = &self.settings.composites;
        let parts = composite_parts(&message.destination);
        if composites.is_empty() {
            return parts;
        }
        let mut expanded = Vec::new();
        let mut seen = Vec::new();
        for part in parts {
            expand(composites, part, message, &mut seen, &mut expanded);
        }
        expanded
    }

    /// The destination a consumer should see for `message` delivered from the queue `key`,
    /// when it is not the one the message was sent to: a plain queue shows itself (a copy of a
    /// composite, `A,B` or virtual topic send); a topic subscriber shows the topic of the
    /// composite send it subscribed to. `None`: show the message's own destination.
    pub fn shown_destination(&self, key: &QueueKey, message: &Message) -> Option<Destination> {
        let sent_to = &message.destination;
        if key.subscription.is_none() {
            return (key.destination != *sent_to).then(|| key.destination.clone());
        }
        // A topic subscription gets a copy only through a topic; a message sent to a plain
        // destination reached it through that destination.
        if !sent_to.name.contains(',') && !self.settings.composites.contains_key(sent_to) {
            return None;
        }
        let subscribed: Vec<(DestinationKind, DestinationFilter)> =
            composite_parts(&key.destination)
                .into_iter()
                .filter(|part| !part.kind.is_queue())
                .map(|part| (part.kind, DestinationFilter::new(&part.name)))
                .collect();
        let matches = |destination: &Destination| {
            subscribed.iter().any(|(kind, filter)| {
                *kind == destination.kind && filter.matches(&destination.name)
            })
        };
        if matches(sent_to) {
            return None;
        }
        self.targets(message).into_iter().find(|target| matches(target))
    }
}

/// Appends the destinations `destination` stands for to `out`; `seen` holds the composites
/// already expanded for this message.
fn expand(
    composites: &Composites,
    destination: Destination,
    message: &Message,
    seen: &mut Vec<Destination>,
    out: &mut Vec<Destination>,
) {
    let Some(rule) = composites.get(&destination) else {
        if !out.contains(&destination) {
            out.push(destination);
        }
        return;
    };
    if seen.contains(&destination) {
        return;
    }
    seen.push(destination.clone());
    for target in &rule.targets {
        if target.selector.iter().all(|selector| selector.matches(message)) {
            expand(composites, target.destination.clone(), message, seen, out);
        }
    }
    if !rule.forward_only && !out.contains(&destination) {
        out.push(destination);
    }
}

#[cfg(test)]
mod tests {
    use super::*;
    use store::{MessageId, PropertyValue};

    fn rule(forward_only: bool, targets: &[(Destination, Option<&str>)]) -> CompositeRule {
        CompositeRule {
            forward_only,
            targets: targets
                .iter()
                .map(|(destination, selector)| CompositeTarget {
                    destination: destination.clone(),
                    selector: selector.map(|s| Arc::new(Selector::parse(s).expect("valid"))),
                })
                .collect(),
        }
    }

    fn message(destination: Destination, amount: i32) -> Message {
        let mut message = Message::new(MessageId(1), "ID:test:1:1:1", destination);
        message.properties.insert("amount".into(), PropertyValue::Int(amount));
        message
    }

    fn expanded(composites: &Composites, message: &Message) -> Vec<String> {
        let mut out = Vec::new();
        for part in composite_parts(&message.destination) {
            expand(composites, part, message, &mut Vec::new(), &mut out);
        }
        out.iter().map(ToString::to_string).collect()
    }

    #[test]
    fn a_composite_forwards_to_its_matching_targets() {
        let all = Destination::queue("ORDERS.ALL");
        let composites = Composites::from([(
            all.clone(),
            rule(
                true,
                &[
                    (Destination::queue("ORDERS.EU"), None),
                    (Destination::topic("AUDIT"), None),
                    (Destination::queue("BIG"), Some("amount > 100")),
                ],
            ),
        )]);
        assert_eq!(
            expanded(&composites, &message(all.clone(), 500)),
            ["queue://ORDERS.EU", "topic://AUDIT", "queue://BIG"]
        );
        assert_eq!(
            expanded(&composites, &message(all.clone(), 5)),
            ["queue://ORDERS.EU", "topic://AUDIT"]
        );
        // Not forward-only: the composite keeps it too. A plain destination is itself.
        let kept =
            Composites::from([(all.clone(), rule(false, &[(Destination::queue("A"), None)]))]);
        assert_eq!(expanded(&kept, &message(all, 5)), ["queue://A", "queue://ORDERS.ALL"]);
        assert_eq!(expanded(&kept, &message(Destination::topic("T"), 5)), ["topic://T"]);
    }

    #[test]
    fn composites_of_composites_expand_and_cycles_end() {
        let (a, b, c) = (Destination::queue("A"), Destination::queue("B"), Destination::topic("C"));
        let composites = Composites::from([
            (a.clone(), rule(true, &[(b.clone(), None), (c.clone(), None)])),
            (b.clone(), rule(false, &[(a.clone(), None), (Destination::queue("D"), None)])),
        ]);
        assert_eq!(expanded(&composites, &message(a, 1)), ["queue://D", "queue://B", "topic://C"]);
        // A client-side composite naming a configured one and one of its targets: once each.
        let client_side = Destination::queue("B,topic://C");
        assert_eq!(
            expanded(&composites, &message(client_side, 1)),
            ["topic://C", "queue://D", "queue://B"]
        );
    }
}
