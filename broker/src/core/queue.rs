//! A queue: one task owns all of its state and is fed by an unbounded channel.
//!
//! Why a task and an unbounded channel: the queue must never wait on anyone while it owns its
//! state (DESIGN.md's no-deadlock rule). Commands come in without back-pressure (producers are
//! paused by flow control before they get here, never the queue), and deliveries go out to
//! connections without back-pressure too, bounded by each consumer's prefetch.
//!
//! Messages wait in `ready`, ordered by [`PageKey`] (priority, then id). A delivered message
//! moves to its consumer's in-flight set; an ack removes it (and, for a persistent message,
//! removes its stored reference); a nack, or the consumer going away, puts it back in `ready`
//! at its original position with the redelivered flag set and its delivery count raised.

use std::collections::{BTreeMap, HashMap};
use std::sync::Arc;

use store::{
    Completion, Message, MessageId, MessageStore, Operation, PageKey, QueueKey, StoreError,
    UnitOfWork,
};
use tokio::sync::{mpsc, oneshot};

use super::{AckMode, ConsumerId, Delivery};

/// Messages read from the store per page while a queue loads at start.
const RECOVERY_PAGE: usize = 1024;

/// A message waiting in a queue, with the queue's delivery state beside it.
#[derive(Debug, Clone)]
pub(crate) struct QueuedMessage {
    pub message: Arc<Message>,
    /// How many times it has been handed to a consumer before.
    pub delivery_count: u32,
}

impl QueuedMessage {
    fn new(message: Arc<Message>) -> Self {
        QueuedMessage { message, delivery_count: 0 }
    }
}

/// A consumer as a connection registers it with a queue.
pub struct ConsumerSpec {
    pub id: ConsumerId,
    /// The most unacknowledged messages it may hold; at least 1.
    pub prefetch: u32,
    pub ack_mode: AckMode,
    /// Where deliveries go: the owning connection's delivery channel.
    pub sink: mpsc::UnboundedSender<Delivery>,
}

/// What a connection (or the broker) asks a queue to do.
pub(crate) enum QueueCommand {
    /// A message accepted by the broker (already submitted to the store if persistent).
    Enqueue(Arc<Message>),
    Subscribe(ConsumerSpec),
    /// The consumer is gone: its unacknowledged messages go back, marked redelivered.
    Unsubscribe(ConsumerId),
    /// The consumer has finished with these messages. The completion (sent on `done` if
    /// given) resolves when the removal is durable.
    Ack {
        consumer: ConsumerId,
        ids: Vec<MessageId>,
        done: Option<oneshot::Sender<Completion>>,
    },
    /// The consumer gives these messages back for redelivery.
    Nack {
        consumer: ConsumerId,
        ids: Vec<MessageId>,
    },
    Stats(oneshot::Sender<QueueStats>),
    /// Stop the task (broker shutdown).
    Stop,
}

/// A snapshot of a queue's counters.
#[derive(Debug, Clone, Copy, PartialEq, Eq, Default)]
pub struct QueueStats {
    /// Messages waiting for a consumer.
    pub ready: usize,
    /// Messages delivered and not yet acknowledged.
    pub in_flight: usize,
    pub consumers: usize,
    /// Messages acknowledged since the queue started.
    pub acked: u64,
}

/// A cheap, cloneable handle to a queue's task.
#[derive(Clone, Debug)]
pub struct QueueHandle {
    pub(crate) key: Arc<QueueKey>,
    tx: mpsc::UnboundedSender<QueueCommand>,
}

impl QueueHandle {
    pub(crate) fn send(&self, command: QueueCommand) -> bool {
        self.tx.send(command).is_ok()
    }

    pub fn name(&self) -> &str {
        &self.key.destination.name
    }

    /// The queue's counters, or `None` if the queue has stopped.
    pub async fn stats(&self) -> Option<QueueStats> {
        let (tx, rx) = oneshot::channel();
        if !self.send(QueueCommand::Stats(tx)) {
            return None;
        }
        rx.await.ok()
    }
}

struct Consumer {
    id: ConsumerId,
    prefetch: usize,
    ack_mode: AckMode,
    sink: mpsc::UnboundedSender<Delivery>,
    in_flight: HashMap<MessageId, QueuedMessage>,
}

impl Consumer {
    fn has_credit(&self) -> bool {
        self.in_flight.len() < self.prefetch
    }
}

/// The state one queue task owns.
struct Queue {
    key: Arc<QueueKey>,
    store: Arc<dyn MessageStore>,
    ready: BTreeMap<PageKey, QueuedMessage>,
    consumers: Vec<Consumer>,
    /// Index into `consumers` of the next one to offer a message to (round-robin).
    next_consumer: usize,
    acked: u64,
}

/// Starts the task for `key`, first loading what the store holds for it.
pub(crate) fn spawn(
    key: QueueKey,
    store: Arc<dyn MessageStore>,
) -> Result<QueueHandle, StoreError> {
    let key = Arc::new(key);
    let mut queue = Queue {
        key: key.clone(),
        store,
        ready: BTreeMap::new(),
        consumers: Vec::new(),
        next_consumer: 0,
        acked: 0,
    };
    queue.load_stored()?;
    let (tx, rx) = mpsc::unbounded_channel();
    tokio::spawn(queue.run(rx));
    Ok(QueueHandle { key, tx })
}

impl Queue {
    /// Loads every stored reference. Paging with a bounded window replaces this when memory
    /// limits arrive (issue 7); the store already reads in page order.
    fn load_stored(&mut self) -> Result<(), StoreError> {
        let mut after = None;
        loop {
            let page = self.store.read_page(&self.key, after, RECOVERY_PAGE)?;
            let Some(last) = page.last() else { break };
            after = Some(PageKey::of(&last.message));
            let full = page.len() == RECOVERY_PAGE;
            for stored in page {
                self.ready.insert(PageKey::of(&stored.message), QueuedMessage::new(stored.message));
            }
            if !full {
                break;
            }
        }
        if !self.ready.is_empty() {
            tracing::info!(queue = %self.key.destination, messages = self.ready.len(), "recovered");
        }
        Ok(())
    }

    async fn run(mut self, mut rx: mpsc::UnboundedReceiver<QueueCommand>) {
        while let Some(command) = rx.recv().await {
            match command {
                QueueCommand::Enqueue(message) => {
                    self.ready.insert(PageKey::of(&message), QueuedMessage::new(message));
                }
                QueueCommand::Subscribe(spec) => {
                    self.consumers.push(Consumer {
                        id: spec.id,
                        prefetch: spec.prefetch.max(1) as usize,
                        ack_mode: spec.ack_mode,
                        sink: spec.sink,
                        in_flight: HashMap::new(),
                    });
                }
                QueueCommand::Unsubscribe(consumer) => self.remove_consumer(consumer),
                QueueCommand::Ack { consumer, ids, done } => {
                    let completion = self.ack(consumer, &ids);
                    if let Some(done) = done {
                        // The connection may be gone; the ack stands regardless.
                        let _ = done.send(completion);
                    }
                }
                QueueCommand::Nack { consumer, ids } => self.nack(consumer, &ids),
                QueueCommand::Stats(reply) => {
                    let _ = reply.send(self.stats());
                }
                QueueCommand::Stop => break,
            }
            self.dispatch();
        }
    }

    fn stats(&self) -> QueueStats {
        QueueStats {
            ready: self.ready.len(),
            in_flight: self.consumers.iter().map(|c| c.in_flight.len()).sum(),
            consumers: self.consumers.len(),
            acked: self.acked,
        }
    }

    /// Hands ready messages to consumers with credit, round-robin, highest priority first.
    fn dispatch(&mut self) {
        let now = now_millis();
        while !self.ready.is_empty() && !self.consumers.is_empty() {
            let Some(index) = self.next_consumer_with_credit() else { return };
            let Some((_, mut queued)) = self.ready.pop_first() else { return };
            if queued.message.is_expired(now) {
                // Expired messages are dropped (dead-lettering them is a later policy).
                self.forget(&queued.message);
                continue;
            }
            let consumer = &mut self.consumers[index];
            let delivery = Delivery {
                consumer: consumer.id,
                message: queued.message.clone(),
                redelivered: queued.delivery_count > 0,
                delivery_count: queued.delivery_count + 1,
            };
            queued.delivery_count += 1;
            if consumer.sink.send(delivery).is_err() {
                // The connection is gone without unsubscribing: put the message back untouched
                // and drop the consumer, returning what it held.
                queued.delivery_count -= 1;
                self.ready.insert(PageKey::of(&queued.message), queued);
                let id = consumer.id;
                self.remove_consumer(id);
                continue;
            }
            consumer.in_flight.insert(queued.message.id, queued);
            self.next_consumer = (index + 1) % self.consumers.len();
        }
    }

    fn next_consumer_with_credit(&self) -> Option<usize> {
        let count = self.consumers.len();
        (0..count)
            .map(|offset| (self.next_consumer + offset) % count)
            .find(|&index| self.consumers[index].has_credit())
    }

    fn remove_consumer(&mut self, id: ConsumerId) {
        let Some(position) = self.consumers.iter().position(|c| c.id == id) else { return };
        let consumer = self.consumers.remove(position);
        if self.next_consumer > position {
            self.next_consumer -= 1;
        }
        if self.next_consumer >= self.consumers.len() {
            self.next_consumer = 0;
        }
        let returned = consumer.in_flight.len();
        for (_, queued) in consumer.in_flight {
            // Auto-ack messages were counted in flight only until written; one that was not
            // written yet was never seen by the client, so it goes back unmarked.
            let queued = if consumer.ack_mode == AckMode::Auto {
                QueuedMessage { delivery_count: queued.delivery_count - 1, ..queued }
            } else {
                queued
            };
            self.ready.insert(PageKey::of(&queued.message), queued);
        }
        if returned > 0 {
            tracing::debug!(queue = %self.key.destination, returned, "consumer closed with unacknowledged messages");
        }
    }

    fn ack(&mut self, consumer: ConsumerId, ids: &[MessageId]) -> Completion {
        let Some(consumer) = self.consumers.iter_mut().find(|c| c.id == consumer) else {
            return Completion::ready(Ok(()));
        };
        let mut unit = UnitOfWork::new();
        for id in ids {
            if let Some(queued) = consumer.in_flight.remove(id) {
                self.acked += 1;
                if queued.message.is_persistent() {
                    unit.push(Operation::Ack {
                        queue: (*self.key).clone(),
                        key: PageKey::of(&queued.message),
                        txn: None,
                    });
                }
            }
        }
        if unit.is_empty() {
            Completion::ready(Ok(()))
        } else {
            self.store.submit(unit)
        }
    }

    fn nack(&mut self, consumer: ConsumerId, ids: &[MessageId]) {
        let Some(consumer) = self.consumers.iter_mut().find(|c| c.id == consumer) else {
            return;
        };
        for id in ids {
            if let Some(queued) = consumer.in_flight.remove(id) {
                self.ready.insert(PageKey::of(&queued.message), queued);
            }
        }
    }

    /// Drops a message from the queue for good (expired), removing its stored reference.
    fn forget(&mut self, message: &Message) {
        if message.is_persistent() {
            let unit = UnitOfWork::with(Operation::Ack {
                queue: (*self.key).clone(),
                key: PageKey::of(message),
                txn: None,
            });
            // Nobody waits for this removal; a failure is logged by the store's own poisoning.
            drop(self.store.submit(unit));
        }
    }
}

/// Milliseconds since the Unix epoch.
pub(crate) fn now_millis() -> i64 {
    std::time::SystemTime::now()
        .duration_since(std::time::UNIX_EPOCH)
        .map(|d| d.as_millis() as i64)
        .unwrap_or(0)
}
