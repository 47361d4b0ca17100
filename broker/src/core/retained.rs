//! Retained messages (MQTT's, and ActiveMQ's `ActiveMQ.Retain` property from any protocol):
//! at most one per topic, the last one published with the flag, handed to each new
//! subscription whose filter matches its topic.
//!
//! A message sent to a topic with `ActiveMQ.Retain` true is routed as usual and then
//! retained (see `Core::send`): a copy of it, under a new broker id, without
//! `ActiveMQ.Retain` and with `ActiveMQ.Retained` true (what ActiveMQ's
//! `RetainedMessageSubscriptionRecoveryPolicy` sets), replaces the topic's previous one. An
//! empty body clears the topic's retained message instead (it is still routed).
//!
//! Persistence: every retained message is stored, whatever its delivery mode (ActiveMQ keeps
//! them in memory only), in one reserved store queue, [`store_queue`], whose entries are the
//! copies themselves (each one's destination is its topic); recovery does not treat it as a
//! destination. A replacement is ONE unit of work, `AddMessage(new)` + `Ack(old)`, and a
//! clear is the `Ack` alone, so the store contract needed no change and a crash leaves the
//! topic with the old message or the new one, never both nor neither (a store applies a unit
//! whole or not at all). Should a store still hold two entries of one topic, [`recover`]
//! keeps the newest (the highest broker id) and acks the others.
//!
//! The table has its own lock, never the routing lock: it is held to swap an entry and submit
//! its unit (a submit returns at once; holding the lock keeps the store's order of units the
//! table's order of replacements) and to copy the matching entries out, never across an
//! `.await`.

use std::collections::HashMap;
use std::sync::Arc;

use futures_util::FutureExt;
use parking_lot::Mutex;
use store::{
    Completion, Destination, DestinationKind, Message, MessageId, MessageStore, Operation, PageKey,
    PropertyValue, QueueKey, StoreError, UnitOfWork,
};

use crate::core::queue::now_millis;
use crate::core::wildcard::DestinationFilter;

/// The property that asks for a message to be retained (ActiveMQ's
/// `RetainedMessageSubscriptionRecoveryPolicy.RETAIN_PROPERTY`); the MQTT adapter sets it on
/// a PUBLISH with the retain flag, a JMS or STOMP producer may set it itself.
pub const RETAIN_PROPERTY: &str = "ActiveMQ.Retain";

/// The property every retained copy carries (`RETAINED_PROPERTY`): a delivery of one is a
/// retained message, not a new publication.
pub const RETAINED_PROPERTY: &str = "ActiveMQ.Retained";

/// The reserved store queue holding the retained messages. Like the scheduler's, its
/// destination is a temporary queue, a kind the core never stores otherwise, so no client
/// destination collides with it; `Core::recover` skips it.
pub fn store_queue() -> QueueKey {
    QueueKey::destination(Destination {
        kind: DestinationKind::TempQueue,
        name: "ferromq.mqtt.retained".into(),
    })
}

/// True if `message` asks to be retained: `ActiveMQ.Retain` true (a boolean, or a string
/// saying `true`, as a STOMP header does) on a single topic.
pub fn asks_to_retain(message: &Message) -> bool {
    // Every send asks: the destination's kind first, so a queue's never looks further.
    if message.destination.kind != DestinationKind::Topic {
        return false;
    }
    let retain = match message.properties.get(RETAIN_PROPERTY) {
        Some(PropertyValue::Bool(retain)) => *retain,
        Some(PropertyValue::String(text)) => text.trim().eq_ignore_ascii_case("true"),
        _ => false,
    };
    retain
        && !message.destination.name.contains(',')
        && !DestinationFilter::is_pattern(&message.destination.name)
}

/// True if `message` is a retained copy (handed out at a subscribe).
pub fn is_retained_copy(message: &Message) -> bool {
    matches!(message.properties.get(RETAINED_PROPERTY), Some(PropertyValue::Bool(true)))
}

/// The retained copy of `message` under broker id `id`.
fn retained_copy(message: &Message, id: MessageId) -> Message {
    let mut copy = message.clone();
    copy.id = id;
    copy.properties.remove(RETAIN_PROPERTY);
    copy.properties.insert(RETAINED_PROPERTY.into(), PropertyValue::Bool(true));
    copy
}

/// The retained messages by topic name (ActiveMQ's spelling, `a.b.c`).
#[derive(Default)]
pub struct RetainedMessages {
    topics: Mutex<HashMap<Arc<str>, Arc<Message>>>,
}

impl RetainedMessages {
    /// The table of what `store` holds in [`store_queue`], read a page at a time.
    pub fn recover(store: &dyn MessageStore) -> Result<RetainedMessages, StoreError> {
        let key = store_queue();
        let mut topics: HashMap<Arc<str>, Arc<Message>> = HashMap::new();
        let mut stale = Vec::new();
        let mut after = None;
        loop {
            let page = store.read_page(&key, after, 1000)?;
            let Some(last) = page.last() else { break };
            after = Some(PageKey::of(&last.message));
            for stored in page {
                let message = stored.message;
                let topic = message.destination.name.clone();
                match topics.get(&topic) {
                    Some(kept) if kept.id > message.id => stale.push(PageKey::of(&message)),
                    _ => {
                        if let Some(old) = topics.insert(topic, message) {
                            stale.push(PageKey::of(&old));
                        }
                    }
                }
            }
        }
        if !stale.is_empty() {
            tracing::warn!(entries = stale.len(), "older retained messages of a topic dropped");
            let mut unit = UnitOfWork::new();
            for key in stale {
                unit.push(Operation::Ack { queue: store_queue(), key, txn: None });
            }
            drop(store.submit(unit));
        }
        if !topics.is_empty() {
            tracing::info!(topics = topics.len(), "recovered the retained messages");
        }
        Ok(RetainedMessages { topics: Mutex::new(topics) })
    }

    /// Retains `message` (which [`asks_to_retain`]) on its topic under broker id `id`,
    /// replacing the topic's previous one, or clears the topic when its body is empty. The
    /// completion resolves once the change is durable.
    pub fn retain(
        &self,
        store: &dyn MessageStore,
        message: &Message,
        id: MessageId,
    ) -> Result<Completion, StoreError> {
        let topic = message.destination.name.clone();
        let copy = (!message.body.is_empty()).then(|| Arc::new(retained_copy(message, id)));
        let mut topics = self.topics.lock();
        let old = topics.get(&topic).cloned();
        let mut unit = UnitOfWork::new();
        if let Some(copy) = &copy {
            unit.push(Operation::AddMessage {
                message: copy.clone(),
                queues: vec![store_queue()],
                txn: None,
            });
        }
        if let Some(old) = &old {
            unit.push(Operation::Ack { queue: store_queue(), key: PageKey::of(old), txn: None });
        }
        if unit.is_empty() {
            return Ok(Completion::ready(Ok(())));
        }
        // One unit: the store holds the old message or the new one, never both nor neither.
        // Submitted under the table's lock (a submit never waits), so that two replacements
        // of one topic reach the store in the order they were made here.
        let mut completion = store.submit(unit);
        if completion.is_ready() {
            // A store that refuses at once (full, closed, poisoned) changed nothing; a ready
            // completion gives its result at the first poll.
            if let Some(Err(error)) = completion.now_or_never() {
                return Err(error);
            }
            completion = Completion::ready(Ok(()));
        }
        Self::apply(&mut topics, topic, copy);
        Ok(completion)
    }

    fn apply(
        topics: &mut HashMap<Arc<str>, Arc<Message>>,
        topic: Arc<str>,
        copy: Option<Arc<Message>>,
    ) {
        match copy {
            Some(copy) => {
                tracing::debug!(%topic, "message retained");
                topics.insert(topic, copy);
            }
            None => {
                tracing::debug!(%topic, "retained message cleared");
                topics.remove(&topic);
            }
        }
    }

    /// The retained messages whose topic `filter` matches (not expired), oldest first. The
    /// lock is held only to copy the matching entries out.
    pub fn matching(&self, filter: &DestinationFilter) -> Vec<Arc<Message>> {
        let now = now_millis();
        let mut found: Vec<Arc<Message>> = {
            let topics = self.topics.lock();
            if filter.is_wildcard() {
                topics
                    .iter()
                    .filter(|(topic, _)| filter.matches(topic))
                    .map(|(_, message)| message.clone())
                    .collect()
            } else {
                topics.get(filter.as_str()).cloned().into_iter().collect()
            }
        };
        found.retain(|message| message.headers.expiration <= 0 || message.headers.expiration > now);
        found.sort_by_key(|message| message.id);
        found
    }

    /// How many topics have a retained message.
    pub fn len(&self) -> usize {
        self.topics.lock().len()
    }

    pub fn is_empty(&self) -> bool {
        self.len() == 0
    }
}

#[cfg(test)]
mod tests {
    use super::*;
    use store::MemoryStore;

    fn retained(topic: &str, body: &'static str) -> Message {
        let mut message = Message::new(MessageId(0), "ID:p:1:1:1", Destination::topic(topic));
        message.body = bytes::Bytes::from_static(body.as_bytes());
        message.properties.insert(RETAIN_PROPERTY.into(), PropertyValue::Bool(true));
        message
    }

    fn stored(store: &dyn MessageStore) -> Vec<Arc<Message>> {
        let page = store.read_page(&store_queue(), None, 100).expect("readable");
        page.into_iter().map(|stored| stored.message).collect()
    }

    #[tokio::test]
    async fn a_replacement_is_one_unit_and_leaves_one_entry_per_topic() {
        let store = MemoryStore::new();
        let table = RetainedMessages::recover(&store).expect("recovered");
        table
            .retain(&store, &retained("a.b", "one"), MessageId(1))
            .expect("ok")
            .await
            .expect("durable");
        table
            .retain(&store, &retained("a.b", "two"), MessageId(2))
            .expect("ok")
            .await
            .expect("durable");
        table
            .retain(&store, &retained("a.c", "three"), MessageId(3))
            .expect("ok")
            .await
            .expect("durable");
        let entries = stored(&store);
        let bodies: Vec<&[u8]> = entries.iter().map(|m| &m.body[..]).collect();
        assert_eq!(bodies, [&b"two"[..], &b"three"[..]]);
        assert!(entries
            .iter()
            .all(|m| is_retained_copy(m) && !m.properties.contains_key(RETAIN_PROPERTY)));
        // An empty body clears the topic (the ack alone).
        table
            .retain(&store, &retained("a.b", ""), MessageId(4))
            .expect("ok")
            .await
            .expect("durable");
        assert_eq!(stored(&store).len(), 1);
        let all = table.matching(&DestinationFilter::new("a.>"));
        assert_eq!(all.len(), 1);
        assert_eq!(&all[0].body[..], b"three");
        // What a restart reads back.
        let again = RetainedMessages::recover(&store).expect("recovered");
        assert_eq!(again.matching(&DestinationFilter::new("a.c")).len(), 1);
        assert!(again.matching(&DestinationFilter::new("a.b")).is_empty());
    }

    #[tokio::test]
    async fn recovery_keeps_the_newest_entry_of_a_topic() {
        let store = MemoryStore::new();
        for (id, body) in [(5, "newer"), (3, "older")] {
            let copy = Arc::new(retained_copy(&retained("t", body), MessageId(id)));
            let unit = UnitOfWork::with(Operation::AddMessage {
                message: copy,
                queues: vec![store_queue()],
                txn: None,
            });
            store.submit(unit).await.expect("durable");
        }
        let table = RetainedMessages::recover(&store).expect("recovered");
        let kept = table.matching(&DestinationFilter::new("t"));
        assert_eq!(kept.len(), 1);
        assert_eq!(&kept[0].body[..], b"newer");
    }

    #[test]
    fn only_single_topics_with_the_property_true_ask_to_retain() {
        assert!(asks_to_retain(&retained("a.b", "x")));
        let mut text = retained("a.b", "x");
        text.properties.insert(RETAIN_PROPERTY.into(), PropertyValue::String("true".into()));
        assert!(asks_to_retain(&text));
        let mut queue = retained("a", "x");
        queue.destination = Destination::queue("a");
        assert!(!asks_to_retain(&queue));
        let mut off = retained("a", "x");
        off.properties.insert(RETAIN_PROPERTY.into(), PropertyValue::Bool(false));
        assert!(!asks_to_retain(&off));
    }
}
