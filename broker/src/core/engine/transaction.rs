//! A local transaction: the sends and acks of one JMS/STOMP transaction, streamed to the
//! store as they happen (operations tagged with the transaction id) and applied in memory only
//! when the commit is durable.

use std::future::Future;
use std::sync::Arc;

use store::{
    Completion, DestinationKind, Message, MessageId, Operation, PageKey, QueueKey, TxnId,
    UnitOfWork,
};

use super::scheduler::Schedule;
use super::Core;
use crate::core::queue::{stage, Arrival, QueueCommand, QueueHandle};
use crate::core::types::{ConnectionId, ConsumerId, CoreError};

/// An open local transaction, owned by the connection that began it.
#[derive(Debug)]
pub struct Transaction {
    pub(crate) id: TxnId,
    /// Whether any record of it reached the store (an empty one needs no commit record).
    pub(crate) has_store_records: bool,
    /// Messages sent, with the queues each goes to at commit and the sending connection.
    pub(crate) sends: Vec<(Vec<QueueHandle>, Arc<Message>, ConnectionId)>,
    /// Messages acknowledged, per queue.
    pub(crate) acks: Vec<(QueueHandle, Vec<MessageId>)>,
    /// Messages sent with a schedule: handed to the scheduler (and stored) at the commit.
    pub(crate) scheduled: Vec<(Arc<Message>, Schedule)>,
    /// On rollback, acknowledged messages stay with the consumers they were delivered to
    /// (still unacknowledged) instead of going back to their queues: the ActiveMQ JMS client
    /// redelivers them itself.
    pub(crate) keep_delivered_on_rollback: bool,
}

impl Transaction {
    pub(crate) fn new(id: TxnId) -> Self {
        Transaction {
            id,
            has_store_records: false,
            sends: Vec::new(),
            acks: Vec::new(),
            scheduled: Vec::new(),
            keep_delivered_on_rollback: false,
        }
    }

    /// See `keep_delivered_on_rollback`: for clients that redeliver rolled back messages
    /// themselves (OpenWire).
    pub fn keep_delivered_on_rollback(&mut self) {
        self.keep_delivered_on_rollback = true;
    }

    pub fn id(&self) -> TxnId {
        self.id
    }

    /// Makes the acks final (the sends were enqueued as the commit became durable).
    fn apply(self) {
        for (queue, ids) in self.acks {
            queue.send(QueueCommand::TransactionCommitted { ids });
        }
    }

    /// Drops the sends (what a commit that failed announced of them was withdrawn with its
    /// arrivals) and makes the acknowledged messages deliverable again.
    fn discard(self) {
        let keep = self.keep_delivered_on_rollback;
        for (queue, ids) in self.acks {
            queue.send(QueueCommand::TransactionRolledBack { ids, keep_delivered: keep });
        }
    }
}

impl Core {
    /// Acknowledges `messages` (delivered to `consumer` from `queue`) inside `transaction`:
    /// the store records the acks now, tagged with the transaction; the queue frees the
    /// consumer's credit and keeps the messages until the transaction ends.
    pub fn ack_in_transaction(
        &self,
        transaction: &mut Transaction,
        queue: &QueueHandle,
        consumer: ConsumerId,
        messages: &[Arc<Message>],
    ) -> Result<(), CoreError> {
        if queue.stored {
            let mut unit = UnitOfWork::new();
            for message in messages.iter().filter(|m| m.is_persistent()) {
                unit.push(Operation::Ack {
                    queue: (*queue.key).clone(),
                    key: PageKey::of(message),
                    txn: Some(transaction.id),
                });
            }
            if !unit.is_empty() {
                transaction.has_store_records = true;
                // Failures surface at the commit: a store that failed is poisoned.
                drop(self.store().submit(unit));
            }
        }
        let ids: Vec<MessageId> = messages.iter().map(|m| m.id).collect();
        queue.send(QueueCommand::AckInTransaction { consumer, ids: ids.clone() });
        match transaction.acks.iter_mut().find(|(q, _)| q.same_queue(queue)) {
            Some((_, acked)) => acked.extend(ids),
            None => transaction.acks.push((queue.clone(), ids)),
        }
        Ok(())
    }

    /// Commits: writes the commit record, and once it is durable makes the sends visible and
    /// the acks final. If the store fails, the acknowledged messages are delivered again.
    pub fn commit(
        &self,
        mut transaction: Transaction,
    ) -> impl Future<Output = Result<(), CoreError>> + Send + 'static {
        let revived = self.revive_deleted_queues(&mut transaction);
        self.route_at_commit(&mut transaction);
        // Scheduled only at the commit, as in ActiveMQ: timed from now, stored in this
        // transaction so that the commit record makes the jobs durable with everything else.
        let scheduled = self.schedule_at_commit(&mut transaction);
        let scheduler = self.scheduler_handle();
        // The commit makes the stored sends readable: announced first (see `queue/arrival.rs`).
        let arrivals: Vec<Arrival> = transaction
            .sends
            .iter()
            .flat_map(|(route, message, _)| route.iter().map(|queue| queue.announce(message)))
            .collect();
        let mut unit = UnitOfWork::new();
        for (message, queue) in revived {
            let queues = vec![queue];
            unit.push(Operation::AddMessage { message, queues, txn: Some(transaction.id) });
        }
        if transaction.has_store_records {
            unit.push(Operation::Commit(transaction.id));
        }
        let staged = stage(&**self.store(), unit, arrivals);
        // The sends are enqueued once the commit is durable; if it fails, they are withdrawn
        // and the acknowledged messages delivered again. In a task of its own: a committed
        // transaction must take effect even if nobody waits for it any more (its connection
        // went away meanwhile), or its sends would stay stored but never enqueued.
        let (done, outcome) = tokio::sync::oneshot::channel();
        tokio::spawn(async move {
            let durable = match staged {
                Ok(staged) => staged.enqueue_when_durable().await,
                Err(error) => Err(error),
            };
            let result = match durable {
                Ok(()) => {
                    transaction.apply();
                    if let Some(scheduler) = scheduler {
                        scheduler.add(scheduled);
                    }
                    Ok(())
                }
                Err(error) => {
                    transaction.discard();
                    Err(error.into())
                }
            };
            let _ = done.send(result);
        });
        async move { outcome.await.unwrap_or(Err(CoreError::ShuttingDown)) }
    }

    /// A queue a send of the transaction went to, deleted since (by an administrator, or a
    /// JMS `destroyDestination`), is recreated as a send would recreate it, and the send goes
    /// there, as ActiveMQ keeps such a message (KahaDB's commit indexes the add under its
    /// destination, creating the stored destination if it is gone). Routed to the removed
    /// queue's task, the message was in no live queue, while the stores disagreed on its
    /// record (written at the SEND under the queue's key): the journal's survived the
    /// removal, and the queue came back at the next start; SQLite's went with the queue.
    /// So the persistent ones are stored again in the commit (the same message under the
    /// same key: a store that kept the first record files it once): the messages and the
    /// queues to add them to.
    fn revive_deleted_queues(
        &self,
        transaction: &mut Transaction,
    ) -> Vec<(Arc<Message>, QueueKey)> {
        let mut revived = Vec::new();
        let deleted = |queue: &QueueHandle, registry: &crate::core::registry::Registry| {
            let key = queue.key();
            key.subscription.is_none()
                && key.destination.kind == DestinationKind::Queue
                && !registry
                    .queues
                    .get(&key.destination.name)
                    .is_some_and(|live| live.same_queue(queue))
        };
        let mut registry = self.registry.lock();
        for (route, message, _) in &mut transaction.sends {
            for queue in route.iter_mut() {
                if !deleted(queue, &registry) {
                    continue;
                }
                let name = queue.key().destination.name.clone();
                match self.declare_queue(&mut registry, &name) {
                    Ok(live) => {
                        if live.stored && message.is_persistent() {
                            revived.push((message.clone(), (*live.key).clone()));
                        }
                        *queue = live;
                    }
                    // Past the destination limits: the message stays stored, as before, and
                    // its queue comes back at the next start.
                    Err(error) => {
                        tracing::warn!(queue = %name, %error, "a transaction's queue was deleted and cannot be recreated")
                    }
                }
            }
        }
        revived
    }

    /// A transacted topic message is published when its transaction commits,
    /// as in ActiveMQ, so the non-durable subscribers it reaches are those subscribed at the
    /// commit (routing at the SEND missed one that subscribed in between), and it becomes
    /// recent for retroactive subscribers only then (an aborted one used to be replayed).
    /// Stored routes (durable subscriptions, virtual topic consumer queues) stay those of the
    /// SEND, which its store record already names.
    fn route_at_commit(&self, transaction: &mut Transaction) {
        // Selectors are judged before the routing lock is taken, as for a send.
        let judged: Vec<_> = transaction
            .sends
            .iter_mut()
            .filter(|(_, message, _)| !self.targets(message).iter().all(|d| d.kind.is_queue()))
            .map(|send| {
                let verdicts = self.judge_selectors(&send.1);
                (send, verdicts)
            })
            .collect();
        if judged.is_empty() {
            return;
        }
        let mut registry = self.registry.lock();
        for ((route, message, connection), verdicts) in judged {
            // The stored route stays the one the store record names; a destination that went
            // meanwhile (a temporary one) leaves only that.
            let routed = self.route(&mut registry, message, *connection, true, verdicts.as_ref());
            let Ok(now) = routed else { continue };
            route.retain(|queue| queue.stored);
            route.extend(now.into_iter().filter(|queue| !queue.stored));
        }
    }

    /// Rolls back: nothing sent becomes visible; acknowledged messages are delivered again,
    /// marked redelivered.
    pub fn rollback(&self, transaction: Transaction) -> Completion {
        // Its sends may come again with the same ids (a client replaying the transaction
        // after a failover): they are not duplicates of anything stored.
        let sent = transaction.sends.iter().map(|(_, message, _)| &**message);
        let scheduled = transaction.scheduled.iter().map(|(message, _)| &**message);
        self.registry.lock().audit.roll_back(sent.chain(scheduled));
        let completion = if transaction.has_store_records {
            self.store().submit(UnitOfWork::with(Operation::Rollback(transaction.id)))
        } else {
            Completion::ready(Ok(()))
        };
        transaction.discard();
        completion
    }
}
