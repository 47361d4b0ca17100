//! The protocol-neutral core: destinations, their owners, routing and message ids.
//!
//! Protocol adapters turn frames into calls on [`Core`] and receive [`Delivery`]s back on a
//! channel per connection; nothing in here knows about any wire protocol.

pub mod queue;

use std::collections::HashMap;
use std::sync::atomic::{AtomicU64, Ordering};
use std::sync::Arc;

use futures_util::FutureExt;
use parking_lot::Mutex;
use queue::QueueCommand;
pub use queue::{ConsumerSpec, QueueHandle, QueueStats};
use store::{
    Completion, Destination, Message, MessageId, MessageStore, Operation, QueueKey, StoreError,
    UnitOfWork,
};

/// Identifies a consumer across the broker.
#[derive(Debug, Clone, Copy, PartialEq, Eq, Hash, PartialOrd, Ord)]
pub struct ConsumerId(pub u64);

/// How a consumer acknowledges.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub enum AckMode {
    /// The broker counts a message as acknowledged once it has been written to the client.
    Auto,
    /// An ack covers this message and every earlier one delivered to the consumer.
    Client,
    /// An ack covers exactly one message.
    ClientIndividual,
}

/// A message handed to a consumer.
#[derive(Debug, Clone)]
pub struct Delivery {
    pub consumer: ConsumerId,
    pub message: Arc<Message>,
    /// True if the message was delivered before (to this or another consumer).
    pub redelivered: bool,
    /// 1 on first delivery.
    pub delivery_count: u32,
}

/// Failures the core reports to adapters.
#[derive(Debug, thiserror::Error)]
#[non_exhaustive]
pub enum CoreError {
    #[error(transparent)]
    Store(#[from] StoreError),
    #[error("{0} destinations are not supported yet; use a queue")]
    Unsupported(&'static str),
    #[error("the broker is shutting down")]
    ShuttingDown,
}

/// Settings the core takes from the configuration.
#[derive(Debug, Clone)]
pub struct CoreSettings {
    /// Prefetch for consumers that do not ask for one.
    pub default_prefetch: u32,
}

/// The broker's shared state: the store, the destinations and the id counters.
pub struct Core {
    store: Arc<dyn MessageStore>,
    settings: CoreSettings,
    /// Queue name to its owner task. Only the map is locked, never a queue's state.
    queues: Mutex<HashMap<Arc<str>, QueueHandle>>,
    next_message_id: AtomicU64,
    next_consumer_id: AtomicU64,
    next_connection_id: AtomicU64,
}

impl Core {
    /// Recovers the store's contents and starts a task per stored queue.
    pub fn recover(
        store: Arc<dyn MessageStore>,
        settings: CoreSettings,
    ) -> Result<Core, StoreError> {
        let recovered = store.recover()?;
        let core = Core {
            store,
            settings,
            queues: Mutex::new(HashMap::new()),
            next_message_id: AtomicU64::new(recovered.next_message_id.0.max(1)),
            next_consumer_id: AtomicU64::new(1),
            next_connection_id: AtomicU64::new(1),
        };
        for destination in recovered.destinations {
            if destination.kind.is_queue() {
                let handle =
                    queue::spawn(QueueKey::destination(destination.clone()), core.store.clone())?;
                core.queues.lock().insert(destination.name.clone(), handle);
            }
        }
        Ok(core)
    }

    pub fn store(&self) -> &Arc<dyn MessageStore> {
        &self.store
    }

    pub fn settings(&self) -> &CoreSettings {
        &self.settings
    }

    pub fn next_message_id(&self) -> MessageId {
        MessageId(self.next_message_id.fetch_add(1, Ordering::Relaxed))
    }

    pub fn next_consumer_id(&self) -> ConsumerId {
        ConsumerId(self.next_consumer_id.fetch_add(1, Ordering::Relaxed))
    }

    pub fn next_connection_id(&self) -> u64 {
        self.next_connection_id.fetch_add(1, Ordering::Relaxed)
    }

    /// The queue named `name`, created (and declared to the store) on first use.
    pub fn queue(&self, name: &Arc<str>) -> Result<QueueHandle, CoreError> {
        let mut queues = self.queues.lock();
        if let Some(handle) = queues.get(name) {
            return Ok(handle.clone());
        }
        let destination = Destination::queue(name.clone());
        // Declaring the queue is not awaited: a later unit (an add) is applied after it, and a
        // queue lost in a crash before any message reached it is harmless.
        drop(self.store.submit(UnitOfWork::with(Operation::AddDestination(destination.clone()))));
        let handle = queue::spawn(QueueKey::destination(destination), self.store.clone())?;
        queues.insert(name.clone(), handle.clone());
        Ok(handle)
    }

    /// The queue named `name` if it exists.
    pub fn existing_queue(&self, name: &str) -> Option<QueueHandle> {
        self.queues.lock().get(name).cloned()
    }

    /// Accepts a message: stores it if persistent, then hands it to its destination. The
    /// returned completion resolves when the message is durable (at once when it is not
    /// persistent); the message may be dispatched before that (concurrent store and dispatch).
    pub fn send(&self, message: Arc<Message>) -> Result<Completion, CoreError> {
        if !message.destination.kind.is_queue() {
            return Err(CoreError::Unsupported("topic"));
        }
        let queue = self.queue(&message.destination.name)?;
        let completion = if message.is_persistent() {
            let completion = self.store.submit(UnitOfWork::with(Operation::AddMessage {
                message: message.clone(),
                queues: vec![(*queue.key).clone()],
                txn: None,
            }));
            // A store that refuses at once (full, closed, poisoned) must not see the message
            // dispatched: the producer is told it failed and may send it again. A failure that
            // comes later (a failed sync) is reported to the producer after the message may
            // have been dispatched, as with ActiveMQ's concurrent store and dispatch.
            if completion.is_ready() {
                if let Some(Err(error)) = completion.now_or_never() {
                    return Err(error.into());
                }
                Completion::ready(Ok(()))
            } else {
                completion
            }
        } else {
            Completion::ready(Ok(()))
        };
        if !queue.send(QueueCommand::Enqueue(message)) {
            return Err(CoreError::ShuttingDown);
        }
        Ok(completion)
    }

    /// Registers a consumer on a queue.
    pub fn subscribe(&self, queue: &QueueHandle, spec: ConsumerSpec) -> Result<(), CoreError> {
        if queue.send(QueueCommand::Subscribe(spec)) {
            Ok(())
        } else {
            Err(CoreError::ShuttingDown)
        }
    }

    /// Removes a consumer; its unacknowledged messages return to the queue.
    pub fn unsubscribe(&self, queue: &QueueHandle, consumer: ConsumerId) {
        queue.send(QueueCommand::Unsubscribe(consumer));
    }

    /// Acknowledges messages; the completion resolves when the acks are durable.
    pub async fn ack(
        &self,
        queue: &QueueHandle,
        consumer: ConsumerId,
        ids: Vec<MessageId>,
    ) -> Result<(), CoreError> {
        let (tx, rx) = tokio::sync::oneshot::channel();
        if !queue.send(QueueCommand::Ack { consumer, ids, done: Some(tx) }) {
            return Err(CoreError::ShuttingDown);
        }
        let completion = rx.await.map_err(|_| CoreError::ShuttingDown)?;
        Ok(completion.await?)
    }

    /// Acknowledges without waiting for durability (auto-ack after a write).
    pub fn ack_now(&self, queue: &QueueHandle, consumer: ConsumerId, ids: Vec<MessageId>) {
        queue.send(QueueCommand::Ack { consumer, ids, done: None });
    }

    /// Gives messages back for redelivery.
    pub fn nack(&self, queue: &QueueHandle, consumer: ConsumerId, ids: Vec<MessageId>) {
        queue.send(QueueCommand::Nack { consumer, ids });
    }

    /// Every queue's name and counters.
    pub async fn queue_stats(&self) -> Vec<(Arc<str>, QueueStats)> {
        let handles: Vec<QueueHandle> = self.queues.lock().values().cloned().collect();
        let mut stats = Vec::with_capacity(handles.len());
        for handle in handles {
            if let Some(s) = handle.stats().await {
                stats.push((handle.key.destination.name.clone(), s));
            }
        }
        stats
    }

    /// Stops every queue task (at shutdown, after connections have closed).
    pub fn stop_queues(&self) {
        for handle in self.queues.lock().drain().map(|(_, h)| h) {
            handle.send(QueueCommand::Stop);
        }
    }
}
