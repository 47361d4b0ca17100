//! The QoS 2 (exactly once) state of MQTT's persistent sessions, kept in the store, so that a
//! broker that restarts (or a client that reconnects) does not turn exactly once into at
//! least once (MQTT 4.3.3 and 4.4). Two kinds of marks, each in a reserved store queue whose
//! destination is a temporary queue (a kind the core never stores otherwise; `Core::recover`
//! skips it, as it skips the retained messages' queue):
//!
//! - **received** ([`received_queue`]): a QoS 2 PUBLISH from the client that the broker
//!   answered with PUBREC and whose PUBREL has not come. The mark is the message itself,
//!   carrying the client id and packet id ([`CLIENT_PROPERTY`], [`PACKET_PROPERTY`]), added to
//!   the reserved queue in the very `AddMessage` that stores it for its subscriptions: the
//!   store holds the message and its mark together or neither. A resend of the PUBLISH (DUP)
//!   after a crash finds the mark and is answered, not published again; PUBREL acks the mark,
//!   PUBCOMP follows once that is durable.
//! - **released** ([`released_queue`]): a delivery at QoS 2 that the client answered with
//!   PUBREC. The mark (a bodiless message naming the client id, the packet id and the broker
//!   id of the delivered message, [`MESSAGE_PROPERTY`]) is made durable before the delivered
//!   message is acknowledged and PUBREL is sent; a resumed session sends PUBREL again for each
//!   mark rather than the message, and acknowledges, unsent, a delivery of a message a mark
//!   names (the crash came between the mark and the ack). PUBCOMP acks the mark.
//!
//! The table has its own lock, taken for a lookup or a change and the submit of its unit
//! (which never waits), never across an `.await` and never with another lock held inside it.

use std::collections::HashMap;
use std::sync::Arc;

use crate::core::queue::Staged;
use parking_lot::Mutex;
use store::{
    Completer, Completion, Destination, DestinationKind, Message, MessageId, MessageStore,
    Operation, PageKey, PropertyValue, QueueKey, StoreError, UnitOfWork,
};

/// Enqueues staged messages once durable, in the order they were staged: one task, taking
/// them from a channel one after the other, so that two exactly-once sends to one topic reach
/// its subscribers in the order they were sent, whichever of their completions a worker
/// thread sees first. The store makes units durable in the order they were submitted, so
/// waiting for each in turn costs no more than waiting for the last.
pub(crate) struct DurableEnqueues {
    staged: tokio::sync::mpsc::UnboundedSender<(Staged, Completer)>,
}

impl DurableEnqueues {
    /// Starts the task (on the current tokio runtime).
    pub(crate) fn start() -> DurableEnqueues {
        let (staged, mut waiting) = tokio::sync::mpsc::unbounded_channel::<(Staged, Completer)>();
        tokio::spawn(async move {
            while let Some((staged, completer)) = waiting.recv().await {
                completer.complete(staged.enqueue_when_durable().await);
            }
        });
        DurableEnqueues { staged }
    }

    /// `staged`'s messages are enqueued once its unit is durable; the completion resolves then.
    pub(crate) fn enqueue_when_durable(&self, staged: Staged) -> Completion {
        if staged.is_durable() {
            return staged.enqueue();
        }
        let (completer, completion) = Completion::pending();
        if let Err(refused) = self.staged.send((staged, completer)) {
            // Only when the runtime is shutting down: enqueued here rather than lost.
            let (staged, completer) = refused.0;
            completer.complete(Ok(()));
            return staged.enqueue();
        }
        completion
    }
}

/// The property naming the client id of a mark.
pub const CLIENT_PROPERTY: &str = "ferromq.mqtt.ClientId";
/// The property holding a mark's packet id (an int).
pub const PACKET_PROPERTY: &str = "ferromq.mqtt.PacketId";
/// The property of a released mark holding the broker id of the delivered message (a long).
pub const MESSAGE_PROPERTY: &str = "ferromq.mqtt.MessageId";

/// The reserved store queue of received marks.
pub fn received_queue() -> QueueKey {
    reserved("ferromq.mqtt.qos2.received")
}

/// The reserved store queue of released marks.
pub fn released_queue() -> QueueKey {
    reserved("ferromq.mqtt.qos2.released")
}

fn reserved(name: &str) -> QueueKey {
    QueueKey::destination(Destination { kind: DestinationKind::TempQueue, name: name.into() })
}

/// A delivery at QoS 2 the client has received (PUBREC) and the broker released (PUBREL).
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub struct Released {
    /// The broker id of the delivered message.
    pub message: MessageId,
    mark: PageKey,
}

/// The marks of one client id.
#[derive(Debug, Clone, Default, PartialEq, Eq)]
pub struct SessionMarks {
    /// Packet ids of QoS 2 PUBLISHes received and not released yet, with their mark.
    received: HashMap<u16, PageKey>,
    /// Packet ids of QoS 2 deliveries released and not completed yet.
    pub released: HashMap<u16, Released>,
}

impl SessionMarks {
    /// The packet ids of QoS 2 PUBLISHes received and not released yet.
    pub fn received(&self) -> impl Iterator<Item = u16> + '_ {
        self.received.keys().copied()
    }

    fn is_empty(&self) -> bool {
        self.received.is_empty() && self.released.is_empty()
    }
}

/// Every client id's marks.
#[derive(Default)]
pub struct ExactlyOnceMarks {
    clients: Mutex<HashMap<Arc<str>, SessionMarks>>,
}

/// What a stored mark says, or why it is not one (an entry no version of ferromq wrote).
fn client_and_packet(message: &Message) -> Option<(Arc<str>, u16)> {
    let client = match message.properties.get(CLIENT_PROPERTY) {
        Some(PropertyValue::String(client)) => client.clone(),
        _ => return None,
    };
    let packet = match message.properties.get(PACKET_PROPERTY) {
        Some(PropertyValue::Int(packet)) => u16::try_from(*packet).ok()?,
        _ => return None,
    };
    Some((client, packet))
}

impl ExactlyOnceMarks {
    /// The marks `store` holds. Two marks of one client and packet id (which no crash leaves,
    /// since units apply in order) keep the newest; entries that are no marks are dropped.
    pub fn recover(store: &dyn MessageStore) -> Result<ExactlyOnceMarks, StoreError> {
        let mut clients: HashMap<Arc<str>, SessionMarks> = HashMap::new();
        let mut stale: Vec<(QueueKey, PageKey)> = Vec::new();
        for queue in [received_queue(), released_queue()] {
            let mut after = None;
            loop {
                let page = store.read_page(&queue, after, 1000)?;
                let Some(last) = page.last() else { break };
                after = Some(PageKey::of(&last.message));
                for stored in page {
                    let message = stored.message;
                    let key = PageKey::of(&message);
                    let Some((client, packet)) = client_and_packet(&message) else {
                        stale.push((queue.clone(), key));
                        continue;
                    };
                    let marks = clients.entry(client).or_default();
                    let older = if queue == received_queue() {
                        marks.received.insert(packet, key)
                    } else {
                        let delivered = match message.properties.get(MESSAGE_PROPERTY) {
                            Some(PropertyValue::Long(id)) => u64::try_from(*id).ok(),
                            _ => None,
                        };
                        let Some(delivered) = delivered else {
                            stale.push((queue.clone(), key));
                            continue;
                        };
                        let released = Released { message: MessageId(delivered), mark: key };
                        marks.released.insert(packet, released).map(|old| old.mark)
                    };
                    // Pages come in key order: the newer mark wins.
                    if let Some(older) = older {
                        stale.push((queue.clone(), older));
                    }
                }
            }
        }
        if !stale.is_empty() {
            tracing::warn!(entries = stale.len(), "stale QoS 2 marks dropped");
            let mut unit = UnitOfWork::new();
            for (queue, key) in stale {
                unit.push(Operation::Ack { queue, key, txn: None });
            }
            drop(store.submit(unit));
        }
        let sessions = clients.len();
        if sessions > 0 {
            tracing::info!(sessions, "recovered the QoS 2 state of MQTT sessions");
        }
        Ok(ExactlyOnceMarks { clients: Mutex::new(clients) })
    }

    /// What `client` has marked.
    pub fn of(&self, client: &str) -> SessionMarks {
        self.clients.lock().get(client).cloned().unwrap_or_default()
    }

    /// `message`, a QoS 2 PUBLISH of `client` with `packet`, with the properties that make it
    /// its own mark once [`received_queue`] is among the queues it is stored in.
    pub fn mark_received_message(message: &mut Message, client: &str, packet: u16) {
        message.properties.insert(CLIENT_PROPERTY.into(), PropertyValue::String(client.into()));
        message.properties.insert(PACKET_PROPERTY.into(), PropertyValue::Int(i32::from(packet)));
    }

    /// Notes that `message` (marked by [`Self::mark_received_message`]) was submitted with
    /// its mark.
    pub fn received(&self, message: &Message) {
        if let Some((client, packet)) = client_and_packet(message) {
            let key = PageKey::of(message);
            self.clients.lock().entry(client).or_default().received.insert(packet, key);
        }
    }

    /// PUBREL of `client`'s `packet`: its mark goes. Ready at once if there was none.
    pub fn release_received(
        &self,
        store: &dyn MessageStore,
        client: &str,
        packet: u16,
    ) -> Completion {
        let mut clients = self.clients.lock();
        let Some(marks) = clients.get_mut(client) else { return Completion::ready(Ok(())) };
        let Some(key) = marks.received.remove(&packet) else { return Completion::ready(Ok(())) };
        if marks.is_empty() {
            clients.remove(client);
        }
        let mut unit = UnitOfWork::new();
        unit.push(Operation::Ack { queue: received_queue(), key, txn: None });
        store.submit(unit)
    }

    /// PUBREC of `client`'s delivery `packet` of message `delivered`: the released mark, under
    /// broker id `id`, durable when the completion resolves.
    pub fn mark_released(
        &self,
        store: &dyn MessageStore,
        client: &str,
        packet: u16,
        delivered: MessageId,
        id: MessageId,
    ) -> Completion {
        let mut mark =
            Message::new(id, format!("ID:ferromq-qos2:{}", id.0), released_queue().destination);
        mark.properties.insert(CLIENT_PROPERTY.into(), PropertyValue::String(client.into()));
        mark.properties.insert(PACKET_PROPERTY.into(), PropertyValue::Int(i32::from(packet)));
        let delivered_id = i64::try_from(delivered.0).unwrap_or(i64::MAX);
        mark.properties.insert(MESSAGE_PROPERTY.into(), PropertyValue::Long(delivered_id));
        let key = PageKey::of(&mark);
        let mut clients = self.clients.lock();
        let marks = clients.entry(client.into()).or_default();
        let mut unit = UnitOfWork::new();
        unit.push(Operation::AddMessage {
            message: Arc::new(mark),
            queues: vec![released_queue()],
            txn: None,
        });
        if let Some(old) = marks.released.insert(packet, Released { message: delivered, mark: key })
        {
            unit.push(Operation::Ack { queue: released_queue(), key: old.mark, txn: None });
        }
        store.submit(unit)
    }

    /// PUBCOMP of `client`'s delivery `packet`: its mark goes. Ready at once if there was none.
    pub fn complete_released(
        &self,
        store: &dyn MessageStore,
        client: &str,
        packet: u16,
    ) -> Completion {
        let mut clients = self.clients.lock();
        let Some(marks) = clients.get_mut(client) else { return Completion::ready(Ok(())) };
        let Some(released) = marks.released.remove(&packet) else {
            return Completion::ready(Ok(()));
        };
        if marks.is_empty() {
            clients.remove(client);
        }
        let mut unit = UnitOfWork::new();
        unit.push(Operation::Ack { queue: released_queue(), key: released.mark, txn: None });
        store.submit(unit)
    }

    /// Every mark of `client` goes: its session ended (a clean start, an expiry).
    pub fn forget(&self, store: &dyn MessageStore, client: &str) -> Completion {
        let Some(marks) = self.clients.lock().remove(client) else {
            return Completion::ready(Ok(()));
        };
        let mut unit = UnitOfWork::new();
        for key in marks.received.into_values() {
            unit.push(Operation::Ack { queue: received_queue(), key, txn: None });
        }
        for released in marks.released.into_values() {
            unit.push(Operation::Ack { queue: released_queue(), key: released.mark, txn: None });
        }
        store.submit(unit)
    }
}

#[cfg(test)]
mod tests {
    use super::*;
    use store::MemoryStore;

    fn qos2_publish(id: u64, client: &str, packet: u16) -> Message {
        let mut message =
            Message::new(MessageId(id), format!("ID:p:{id}"), Destination::topic("t"));
        ExactlyOnceMarks::mark_received_message(&mut message, client, packet);
        message
    }

    fn store_received(store: &MemoryStore, marks: &ExactlyOnceMarks, message: Message) {
        let mut unit = UnitOfWork::new();
        marks.received(&message);
        unit.push(Operation::AddMessage {
            message: Arc::new(message),
            queues: vec![received_queue()],
            txn: None,
        });
        drop(store.submit(unit));
    }

    #[tokio::test]
    async fn marks_survive_a_recovery_and_go_when_released_completed_or_forgotten() {
        let store = MemoryStore::new();
        let marks = ExactlyOnceMarks::default();
        store_received(&store, &marks, qos2_publish(1, "a", 7));
        store_received(&store, &marks, qos2_publish(2, "a", 8));
        store_received(&store, &marks, qos2_publish(3, "b", 7));
        marks.mark_released(&store, "a", 40, MessageId(90), MessageId(4)).await.expect("stored");
        marks.release_received(&store, "a", 8).await.expect("stored");

        let again = ExactlyOnceMarks::recover(&store).expect("recovered");
        let a = again.of("a");
        assert_eq!(a.received().collect::<Vec<_>>(), [7]);
        assert_eq!(a.released.get(&40).map(|r| r.message), Some(MessageId(90)));
        assert_eq!(again.of("b").received().collect::<Vec<_>>(), [7]);

        again.complete_released(&store, "a", 40).await.expect("stored");
        again.forget(&store, "b").await.expect("stored");
        let last = ExactlyOnceMarks::recover(&store).expect("recovered");
        assert_eq!(last.of("a").received().collect::<Vec<_>>(), [7]);
        assert!(last.of("a").released.is_empty());
        assert_eq!(last.of("b"), SessionMarks::default());
    }

    #[tokio::test]
    async fn a_second_release_mark_of_one_packet_replaces_the_first() {
        let store = MemoryStore::new();
        let marks = ExactlyOnceMarks::default();
        marks.mark_released(&store, "a", 1, MessageId(10), MessageId(1)).await.expect("stored");
        marks.mark_released(&store, "a", 1, MessageId(11), MessageId(2)).await.expect("stored");
        let again = ExactlyOnceMarks::recover(&store).expect("recovered");
        assert_eq!(again.of("a").released.len(), 1);
        assert_eq!(again.of("a").released.get(&1).map(|r| r.message), Some(MessageId(11)));
    }
}
