//! Sessions that outlive their connection (MQTT's persistent sessions): what the session of a
//! client id holds besides its durable subscriptions' messages, so that it can be resumed
//! with its subscriptions' options and identifiers, and ended when its expiry interval has
//! passed, including across a restart of the broker.
//!
//! A record per client id: the session expiry interval, when its last connection ended
//! (`None` while a connection holds it), and its subscriptions (the filter as the client
//! wrote it, QoS, No Local, Retain As Published, the subscription identifier, and the durable
//! subscription that keeps its messages: its own, or its shared group's). The protocol
//! adapter decides what a record says; the core keeps it, stores it and ends it.
//!
//! Persistence: as for retained messages (`retained.rs`), one reserved store queue,
//! [`store_queue`], whose entries are the records themselves, encoded as the properties of
//! a message without a body; a change is ONE unit of work, `AddMessage(new)` + `Ack(old)`,
//! so a crash leaves the old record or the new one. A record that still says "connected"
//! after a restart is taken as ended at the restart: its expiry runs from then, never for
//! ever. Should a store hold two records of one client id, [`SessionTable::recover`] keeps the
//! newest (the highest broker id).
//!
//! Each change bumps the entry's generation: an expiry timer started when the connection
//! ended carries the generation it saw, and ends the session only if nothing changed since
//! (a client that reconnected meanwhile resumed it).
//!
//! The table has its own lock, never taken with the routing lock held, held to swap an
//! entry and submit its unit (a submit never waits), never across an `.await`.

use std::collections::HashMap;
use std::sync::Arc;

use parking_lot::Mutex;
use store::{
    Destination, DestinationKind, Message, MessageId, MessageStore, Operation, PageKey,
    PropertyValue, QueueKey, StoreError, SubscriptionKey, UnitOfWork,
};
use tokio_util::sync::CancellationToken;

/// The session expiry interval of a session that never expires (MQTT 5.0's 0xFFFFFFFF, and
/// what a 3.1.1 persistent session gets, as in ActiveMQ).
pub const NEVER_EXPIRES: u32 = u32::MAX;

/// The client id of every shared subscription group's durable subscription: a group
/// `$share/{ShareName}/{filter}` is the durable subscription (`$share`, `{ShareName}/{filter}`).
/// A share name holds no `/`, so the first `/` of the name splits it.
pub const SHARED_GROUP_CLIENT_ID: &str = "$share";

/// The reserved store queue holding the session records (a temporary queue's kind, which the
/// core never stores otherwise, as for the retained messages; `Core::recover` skips it).
pub fn store_queue() -> QueueKey {
    QueueKey::destination(Destination {
        kind: DestinationKind::TempQueue,
        name: "ferromq.mqtt.sessions".into(),
    })
}

/// What a session holds besides its messages.
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct SessionRecord {
    pub client_id: Arc<str>,
    /// Seconds the session lives once its connection ended; [`NEVER_EXPIRES`] for ever.
    pub expiry_interval: u32,
    /// When its last connection ended (milliseconds since the epoch); `None` while connected.
    pub ended_at: Option<i64>,
    pub subscriptions: Vec<StoredSubscription>,
}

impl SessionRecord {
    /// When the session expires, if its connection has ended and it expires at all.
    pub fn deadline(&self) -> Option<i64> {
        let ended = self.ended_at?;
        (self.expiry_interval != NEVER_EXPIRES)
            .then(|| ended.saturating_add(i64::from(self.expiry_interval) * 1000))
    }
}

/// One subscription of a session.
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct StoredSubscription {
    /// The filter as the client wrote it (a shared one with its `$share/{ShareName}/`).
    pub filter: Arc<str>,
    pub qos: u8,
    pub no_local: bool,
    pub retain_as_published: bool,
    pub identifier: Option<u32>,
    /// The durable subscription holding its messages; `None` for one that keeps none (QoS 0).
    pub durable: Option<SubscriptionKey>,
    /// `durable` is a shared group's, which other sessions may belong to.
    pub shared: bool,
}

struct Entry {
    record: SessionRecord,
    /// The stored copy, acknowledged when the record changes.
    stored: Option<PageKey>,
    generation: u64,
}

/// The session records by client id.
#[derive(Default)]
pub struct SessionTable {
    entries: Mutex<HashMap<Arc<str>, Entry>>,
    /// Wills waiting for their delay (MQTT 5.0's Will Delay Interval), by client id: the
    /// token is cancelled when a connection with the client id comes first (MQTT-3.1.3-9).
    /// Kept in memory only: a broker that stops drops them.
    delayed_wills: Mutex<HashMap<Arc<str>, (u64, CancellationToken)>>,
    next_generation: std::sync::atomic::AtomicU64,
}

const CLIENT_ID: &str = "clientId";
const EXPIRY: &str = "expiryInterval";
const ENDED_AT: &str = "endedAt";
const COUNT: &str = "subscriptions";

fn sub_key(index: usize, field: &str) -> Arc<str> {
    format!("sub.{index}.{field}").into()
}

/// The record as a message under broker id `id`.
fn encode(record: &SessionRecord, id: MessageId) -> Message {
    let mut message = Message::new(
        id,
        format!("ferromq-session:{}", record.client_id),
        store_queue().destination,
    );
    let properties = &mut message.properties;
    properties.insert(CLIENT_ID.into(), PropertyValue::String(record.client_id.clone()));
    properties.insert(EXPIRY.into(), PropertyValue::Long(i64::from(record.expiry_interval)));
    if let Some(ended) = record.ended_at {
        properties.insert(ENDED_AT.into(), PropertyValue::Long(ended));
    }
    let count = i32::try_from(record.subscriptions.len()).unwrap_or(i32::MAX);
    properties.insert(COUNT.into(), PropertyValue::Int(count));
    for (index, subscription) in record.subscriptions.iter().enumerate() {
        let mut put = |field: &str, value: PropertyValue| {
            properties.insert(sub_key(index, field), value);
        };
        put("filter", PropertyValue::String(subscription.filter.clone()));
        put("qos", PropertyValue::Int(i32::from(subscription.qos)));
        put("noLocal", PropertyValue::Bool(subscription.no_local));
        put("retainAsPublished", PropertyValue::Bool(subscription.retain_as_published));
        put("shared", PropertyValue::Bool(subscription.shared));
        if let Some(identifier) = subscription.identifier {
            put("identifier", PropertyValue::Long(i64::from(identifier)));
        }
        if let Some(key) = &subscription.durable {
            put("durableClientId", PropertyValue::String(key.client_id.clone()));
            put("durableName", PropertyValue::String(key.name.clone()));
        }
    }
    message
}

/// The record a stored message holds; `None` for one that is not a record (never written
/// by [`encode`]).
fn decode(message: &Message) -> Option<SessionRecord> {
    let properties = &message.properties;
    let string = |name: &str| match properties.get(name) {
        Some(PropertyValue::String(text)) => Some(text.clone()),
        _ => None,
    };
    let long = |name: &str| match properties.get(name) {
        Some(PropertyValue::Long(value)) => Some(*value),
        Some(PropertyValue::Int(value)) => Some(i64::from(*value)),
        _ => None,
    };
    let flag = |name: &str| matches!(properties.get(name), Some(PropertyValue::Bool(true)));
    let client_id = string(CLIENT_ID)?;
    let expiry_interval = u32::try_from(long(EXPIRY)?).ok()?;
    let count = usize::try_from(long(COUNT)?).ok()?;
    let mut subscriptions = Vec::with_capacity(count.min(1024));
    for index in 0..count {
        let field = |name: &str| sub_key(index, name);
        let durable = match (string(&field("durableClientId")), string(&field("durableName"))) {
            (Some(client_id), Some(name)) => Some(SubscriptionKey { client_id, name }),
            _ => None,
        };
        subscriptions.push(StoredSubscription {
            filter: string(&field("filter"))?,
            qos: u8::try_from(long(&field("qos"))?).ok()?,
            no_local: flag(&field("noLocal")),
            retain_as_published: flag(&field("retainAsPublished")),
            identifier: long(&field("identifier")).and_then(|id| u32::try_from(id).ok()),
            durable,
            shared: flag(&field("shared")),
        });
    }
    Some(SessionRecord { client_id, expiry_interval, ended_at: long(ENDED_AT), subscriptions })
}

impl SessionTable {
    /// The table of what `store` holds in [`store_queue`], read a page at a time.
    pub fn recover(store: &dyn MessageStore) -> Result<SessionTable, StoreError> {
        let key = store_queue();
        let mut found: HashMap<Arc<str>, (SessionRecord, Message)> = HashMap::new();
        let mut stale = Vec::new();
        let mut after = None;
        loop {
            let page = store.read_page(&key, after, 1000)?;
            let Some(last) = page.last() else { break };
            after = Some(PageKey::of(&last.message));
            for stored in page {
                let message = (*stored.message).clone();
                let Some(record) = decode(&message) else {
                    tracing::warn!(id = %message.id, "a stored session record does not decode; dropped");
                    stale.push(PageKey::of(&message));
                    continue;
                };
                match found.get(&record.client_id) {
                    Some((_, kept)) if kept.id > message.id => stale.push(PageKey::of(&message)),
                    _ => {
                        if let Some((_, old)) =
                            found.insert(record.client_id.clone(), (record, message))
                        {
                            stale.push(PageKey::of(&old));
                        }
                    }
                }
            }
        }
        if !stale.is_empty() {
            let mut unit = UnitOfWork::new();
            for key in stale {
                unit.push(Operation::Ack { queue: store_queue(), key, txn: None });
            }
            drop(store.submit(unit));
        }
        if !found.is_empty() {
            tracing::info!(sessions = found.len(), "recovered the persistent sessions");
        }
        let table = SessionTable::default();
        {
            let mut entries = table.entries.lock();
            for (client_id, (record, message)) in found {
                let entry = Entry { record, stored: Some(PageKey::of(&message)), generation: 0 };
                entries.insert(client_id, entry);
            }
        }
        Ok(table)
    }

    fn generation(&self) -> u64 {
        self.next_generation.fetch_add(1, std::sync::atomic::Ordering::Relaxed) + 1
    }

    /// The record of `client_id`, if its session exists.
    pub fn get(&self, client_id: &str) -> Option<SessionRecord> {
        self.entries.lock().get(client_id).map(|entry| entry.record.clone())
    }

    /// The record of `client_id`, taken by a connection that resumes the session: from now
    /// on its expiry timer, if one runs, finds it changed and leaves it. `None` if there is
    /// no session (never made, ended or expired).
    pub fn resume(&self, client_id: &str) -> Option<SessionRecord> {
        let generation = self.generation();
        let mut entries = self.entries.lock();
        let entry = entries.get_mut(client_id)?;
        entry.generation = generation;
        entry.record.ended_at = None;
        Some(entry.record.clone())
    }

    /// Every record, with its generation.
    pub fn all(&self) -> Vec<(SessionRecord, u64)> {
        self.entries.lock().values().map(|entry| (entry.record.clone(), entry.generation)).collect()
    }

    /// Stores `record` under broker id `id`, replacing the client id's previous one; the new
    /// generation. The unit is submitted, not awaited: a store that fails is logged.
    pub fn save(&self, store: &dyn MessageStore, record: SessionRecord, id: MessageId) -> u64 {
        let generation = self.generation();
        let message = Arc::new(encode(&record, id));
        let mut entries = self.entries.lock();
        let old = entries.get(&record.client_id).and_then(|entry| entry.stored);
        let mut unit = UnitOfWork::new();
        unit.push(Operation::AddMessage {
            message: message.clone(),
            queues: vec![store_queue()],
            txn: None,
        });
        if let Some(old) = old {
            unit.push(Operation::Ack { queue: store_queue(), key: old, txn: None });
        }
        // Under the table's lock, so that the store's order of units is the table's.
        drop(store.submit(unit));
        let client_id = record.client_id.clone();
        entries
            .insert(client_id, Entry { record, stored: Some(PageKey::of(&message)), generation });
        generation
    }

    /// Removes the record of `client_id`; the record, if there was one.
    pub fn remove(&self, store: &dyn MessageStore, client_id: &str) -> Option<SessionRecord> {
        let entry = self.entries.lock().remove(client_id)?;
        if let Some(old) = entry.stored {
            drop(store.submit(UnitOfWork::with(Operation::Ack {
                queue: store_queue(),
                key: old,
                txn: None,
            })));
        }
        Some(entry.record)
    }

    /// Removes the record of `client_id` if it is still at `generation` (nothing changed
    /// since its connection ended); the record then.
    pub fn remove_if_unchanged(
        &self,
        store: &dyn MessageStore,
        client_id: &str,
        generation: u64,
    ) -> Option<SessionRecord> {
        let mut entries = self.entries.lock();
        let entry = entries.get(client_id)?;
        if entry.generation != generation || entry.record.ended_at.is_none() {
            return None;
        }
        let entry = entries.remove(client_id)?;
        if let Some(old) = entry.stored {
            drop(store.submit(UnitOfWork::with(Operation::Ack {
                queue: store_queue(),
                key: old,
                txn: None,
            })));
        }
        Some(entry.record)
    }

    /// A will of `client_id` to publish after its delay: its number and the token a new
    /// connection with the client id cancels. A will already waiting for the client id is
    /// cancelled (its session was resumed and ended again).
    pub fn delay_will(&self, client_id: &Arc<str>) -> (u64, CancellationToken) {
        let token = CancellationToken::new();
        let number = self.generation();
        let old = self.delayed_wills.lock().insert(client_id.clone(), (number, token.clone()));
        if let Some((_, old)) = old {
            old.cancel();
        }
        (number, token)
    }

    /// A connection with `client_id` started: a will waiting for the client id is dropped.
    pub fn cancel_delayed_will(&self, client_id: &str) {
        if let Some((_, token)) = self.delayed_wills.lock().remove(client_id) {
            token.cancel();
        }
    }

    /// The delayed will `number` of `client_id` was published or dropped: forgotten.
    pub fn delayed_will_done(&self, client_id: &str, number: u64) {
        let mut wills = self.delayed_wills.lock();
        if wills.get(client_id).is_some_and(|(kept, _)| *kept == number) {
            wills.remove(client_id);
        }
    }

    /// True if some session belongs to the shared group of durable subscription `key`.
    pub fn references(&self, key: &SubscriptionKey) -> bool {
        self.entries.lock().values().any(|entry| {
            entry.record.subscriptions.iter().any(|s| s.shared && s.durable.as_ref() == Some(key))
        })
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn records_round_trip_through_their_message() {
        let record = SessionRecord {
            client_id: "device-1".into(),
            expiry_interval: 30,
            ended_at: Some(1_700_000_000_000),
            subscriptions: vec![
                StoredSubscription {
                    filter: "a/+/c".into(),
                    qos: 1,
                    no_local: true,
                    retain_as_published: true,
                    identifier: Some(7),
                    durable: Some(SubscriptionKey {
                        client_id: "device-1".into(),
                        name: "AT_LEAST_ONCE:a/+/c".into(),
                    }),
                    shared: false,
                },
                StoredSubscription {
                    filter: "$share/g/x".into(),
                    qos: 0,
                    no_local: false,
                    retain_as_published: false,
                    identifier: None,
                    durable: Some(SubscriptionKey {
                        client_id: SHARED_GROUP_CLIENT_ID.into(),
                        name: "g/x".into(),
                    }),
                    shared: true,
                },
            ],
        };
        assert_eq!(decode(&encode(&record, MessageId(5))), Some(record.clone()));
        assert_eq!(record.deadline(), Some(1_700_000_030_000));
        let never = SessionRecord { expiry_interval: NEVER_EXPIRES, ..record };
        assert_eq!(never.deadline(), None);
    }
}
