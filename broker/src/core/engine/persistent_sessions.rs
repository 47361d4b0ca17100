//! Persistent sessions (see [`sessions`](crate::core::sessions)): their records, their expiry
//! and shared subscription groups.
//!
//! A shared subscription group (MQTT's `$share/{ShareName}/{filter}`) is one durable
//! subscription, (`$share`, `{ShareName}/{filter}`), on the filter's topic, whose queue
//! every member consumes from as from a queue: each message goes to one member (the queue's
//! round-robin dispatch), and what a member had not acknowledged when it left goes back to
//! the queue for the others. The group lives while a member is attached or a persistent
//! session that is away belongs to it (its record lists it); then its messages wait. When
//! neither is left, it is removed with its messages; after a restart, a group no session
//! record names is removed as the broker starts.

use std::sync::{Arc, Weak};
use std::time::Duration;

use store::SubscriptionKey;

use crate::core::queue::QueueCommand;
use crate::core::registry::Attachment;
use crate::core::sessions::{SessionRecord, SessionTable, SHARED_GROUP_CLIENT_ID};
use crate::core::types::{now_millis, CoreError};

use super::{Core, SubscribeRequest};

impl Core {
    /// The session record of `client_id`, if its session exists.
    pub fn session_record(&self, client_id: &str) -> Option<SessionRecord> {
        self.sessions.get(client_id)
    }

    /// The record of `client_id` for a connection that resumes its session, which stops the
    /// session's expiry at once (not only once the resumed record is saved).
    pub fn resume_session_record(&self, client_id: &str) -> Option<SessionRecord> {
        self.sessions.resume(client_id)
    }

    /// Stores `record` (a connected session's: `ended_at` is `None`), replacing the client
    /// id's previous one. Whatever expiry was running for the client id stops.
    pub fn save_session(&self, record: SessionRecord) {
        let id = self.next_message_id();
        self.sessions.save(&*self.store, record, id);
    }

    /// The connection of `record`'s session ended: it is stored as ended now, and ends
    /// itself once its expiry interval has passed, unless a connection resumes it first.
    pub fn end_session(self: &Arc<Self>, mut record: SessionRecord) {
        record.ended_at = Some(now_millis());
        let id = self.next_message_id();
        let client_id = record.client_id.clone();
        let deadline = record.deadline();
        let generation = self.sessions.save(&*self.store, record, id);
        if let Some(deadline) = deadline {
            self.expire_at(client_id, deadline, generation);
        }
    }

    fn expire_at(self: &Arc<Self>, client_id: Arc<str>, deadline: i64, generation: u64) {
        let wait = Duration::from_millis(u64::try_from(deadline - now_millis()).unwrap_or(0));
        let core: Weak<Core> = Arc::downgrade(self);
        tokio::spawn(async move {
            tokio::time::sleep(wait).await;
            let Some(core) = core.upgrade() else { return };
            if let Some(record) =
                core.sessions.remove_if_unchanged(&*core.store, &client_id, generation)
            {
                tracing::info!(%client_id, "MQTT session expired");
                core.discard_session_state(&record);
            }
        });
    }

    /// Ends the session of `client_id` now (a clean start, or a session expiry interval of
    /// 0 when its connection ends): its record goes, its durable subscriptions and their
    /// messages, and its places in shared groups (a group no one else is in goes too).
    pub fn discard_session(&self, client_id: &str) {
        match self.sessions.remove(&*self.store, client_id) {
            Some(record) => self.discard_session_state(&record),
            // Sessions from before records were kept may still have QoS 2 state.
            None => drop(self.forget_exactly_once(client_id)),
        }
    }

    fn discard_session_state(&self, record: &SessionRecord) {
        drop(self.forget_exactly_once(&record.client_id));
        for subscription in &record.subscriptions {
            let Some(key) = &subscription.durable else { continue };
            if subscription.shared {
                self.leave_shared(key);
            } else if let Ok(removed) = self.remove_durable(key) {
                drop(removed);
            }
        }
    }

    /// The durable subscription of the shared group `share_name` on `filter` (as the client
    /// wrote it, past `$share/{ShareName}/`).
    pub fn shared_group_key(share_name: &str, filter: &str) -> SubscriptionKey {
        SubscriptionKey {
            client_id: SHARED_GROUP_CLIENT_ID.into(),
            name: format!("{share_name}/{filter}").into(),
        }
    }

    /// Attaches a member to the shared group `request.durable` names, creating the group's
    /// durable subscription on `request.destination` if it is new.
    pub fn subscribe_shared(&self, request: SubscribeRequest) -> Result<(), CoreError> {
        let SubscribeRequest { destination, spec, durable, connection, .. } = request;
        let Some(key) = durable else {
            return Err(CoreError::Unsupported("a shared subscription without its group"));
        };
        let consumer = spec.id;
        let mut registry = self.registry.lock();
        let existing = registry.durable.get(&key).map(|(queue, _)| queue.clone());
        let queue = match existing {
            Some(queue) if queue.key.destination == destination => queue,
            _ => {
                let (queue, _) = self.durable_queue(
                    &mut registry,
                    key.clone(),
                    &destination,
                    consumer,
                    None,
                    None,
                )?;
                // A group has no one active consumer: every member is attached as to a queue,
                // and the group is removed only when none is left (`leave_shared`).
                if let Some(entry) = registry.durable.get_mut(&key) {
                    entry.1 = None;
                }
                queue
            }
        };
        registry
            .consumers
            .insert(consumer, Attachment { queues: vec![queue.clone()], ..Default::default() });
        queue.send(QueueCommand::Subscribe(spec));
        self.advise_consumer(&mut registry, consumer, Some((&destination, connection)));
        Ok(())
    }

    /// A member left the shared group of `key` (its consumer is already detached): the group
    /// is removed with its messages if no member is attached and no persistent session
    /// belongs to it.
    pub fn leave_shared(&self, key: &SubscriptionKey) {
        if self.sessions.references(key) {
            return;
        }
        let mut registry = self.registry.lock();
        let Some((queue, _)) = registry.durable.get(key) else { return };
        let queue_key = queue.key.clone();
        let attached = registry
            .consumers
            .values()
            .any(|attachment| attachment.queues.iter().any(|q| q.key == queue_key));
        if !attached {
            tracing::debug!(group = %key.name, "shared subscription group removed: no member left");
            drop(self.drop_durable(&mut registry, key));
        }
    }

    /// At recovery: sessions whose connection was live when the broker stopped are taken as
    /// ended now; expired ones end, the others get their expiry timer; shared groups that no
    /// session belongs to go.
    pub(super) fn resume_session_expiry(self: &Arc<Self>) {
        let now = now_millis();
        for (record, generation) in self.sessions.all() {
            if record.ended_at.is_none() {
                self.end_session(record);
                continue;
            }
            match record.deadline() {
                Some(deadline) if deadline <= now => {
                    if let Some(record) = self.sessions.remove_if_unchanged(
                        &*self.store,
                        &record.client_id,
                        generation,
                    ) {
                        tracing::info!(client_id = %record.client_id, "MQTT session expired while the broker was down");
                        self.discard_session_state(&record);
                    }
                }
                Some(deadline) => self.expire_at(record.client_id.clone(), deadline, generation),
                None => {}
            }
        }
        let groups: Vec<SubscriptionKey> = self
            .durable_subscriptions_of(SHARED_GROUP_CLIENT_ID)
            .into_iter()
            .map(|(key, _)| key)
            .collect();
        for key in groups {
            self.leave_shared(&key);
        }
    }

    /// Publishes `will` (already authorized, from `connection`, which has ended) for
    /// `client_id` after `delay`, unless a connection with the client id comes first
    /// (MQTT-3.1.3-9). Kept in memory only.
    pub fn publish_will_after(
        self: &Arc<Self>,
        client_id: Arc<str>,
        delay: Duration,
        will: Arc<store::Message>,
        connection: crate::core::types::ConnectionId,
    ) {
        let (number, reconnected) = self.sessions.delay_will(&client_id);
        let core: Weak<Core> = Arc::downgrade(self);
        tokio::spawn(async move {
            tokio::select! {
                () = reconnected.cancelled() => {
                    tracing::debug!(%client_id, "delayed will dropped: the client connected again");
                }
                () = tokio::time::sleep(delay) => {
                    let Some(core) = core.upgrade() else { return };
                    core.sessions.delayed_will_done(&client_id, number);
                    tracing::debug!(%client_id, "publishing the delayed MQTT will");
                    if let Err(error) = core.send(will, connection, None) {
                        tracing::warn!(%client_id, %error, "delayed MQTT will not published");
                    }
                }
            }
        });
    }

    /// A connection with `client_id` started: its delayed will, if any, is not published.
    pub fn cancel_delayed_will(&self, client_id: &str) {
        self.sessions.cancel_delayed_will(client_id);
    }

    /// The table, for recovery.
    pub(super) fn recover_sessions(
        store: &dyn store::MessageStore,
    ) -> Result<SessionTable, store::StoreError> {
        SessionTable::recover(store)
    }
}

#[cfg(test)]
mod tests {
    use std::sync::Arc;
    use std::time::Duration;

    use store::{MemoryStore, MessageStore};

    use crate::core::sessions::SessionRecord;
    use crate::core::types::now_millis;
    use crate::core::{Core, CoreSettings};

    fn record(client_id: &str, expiry_interval: u32, ended_at: Option<i64>) -> SessionRecord {
        SessionRecord {
            client_id: client_id.into(),
            expiry_interval,
            ended_at,
            subscriptions: vec![],
        }
    }

    /// A broker that stops without the connection ending (a crash) leaves the record saying
    /// "connected": after the restart the session expires its interval after the restart,
    /// and one whose expiry passed while the broker was down is gone as it starts.
    #[tokio::test(start_paused = true)]
    async fn sessions_expire_after_a_restart_whatever_their_record_says() {
        let store: Arc<dyn MessageStore> = Arc::new(MemoryStore::new());
        let core = Core::recover(store.clone(), CoreSettings::default()).expect("recovered");
        core.save_session(record("connected", 5, None));
        core.save_session(record("expired", 1, Some(now_millis() - 10_000)));
        core.save_session(record("never", crate::core::sessions::NEVER_EXPIRES, Some(0)));
        drop(core);
        let core = Core::recover(store.clone(), CoreSettings::default()).expect("recovered");
        assert!(core.session_record("expired").is_none(), "an expired session was resumed");
        let connected = core.session_record("connected").expect("the connected session");
        assert!(connected.ended_at.is_some(), "a restart left the session connected");
        tokio::time::sleep(Duration::from_secs(4)).await;
        assert!(core.session_record("connected").is_some(), "expired before its interval");
        tokio::time::sleep(Duration::from_secs(2)).await;
        assert!(core.session_record("connected").is_none(), "not expired after its interval");
        assert!(core.session_record("never").is_some(), "a session that never expires ended");
        drop(core);
        let core = Core::recover(store, CoreSettings::default()).expect("recovered");
        assert_eq!(core.session_record("connected"), None, "the expiry was not stored");
    }
}
