//! What an administrator does to destinations (the admin endpoint's operations and OpenWire's
//! `destroyDestination`): purge a queue, delete a queue or topic, look at a queue's messages,
//! remove one, move or copy them to another queue, and send dead letters back to where they
//! came from.
//!
//! The work on messages happens in the queue's task (`queue/operations.rs`); here the core
//! finds the queues under the routing lock (opening a target as a send would), hands the
//! task the request, and waits, without the lock, until what the task submitted is durable:
//! an operation answers only once a restart can no longer undo it.
//!
//! **Deleting** a destination is ActiveMQ's `removeDestination`: refused while consumers are
//! attached (a queue's consumers, wildcard ones included; a topic's subscribers, durable or
//! not, whose pattern matches it), unless forced, which has each consumer's connection close
//! it as a slow-consumer abort does. Under the routing lock the destination leaves the table
//! (a topic with its durable subscriptions and recovery buffer), its tasks stop, and one
//! `RemoveDestination` unit (which takes every queue under it, durable subscriptions included,
//! with their references) is submitted; since every send reaches a queue under that lock,
//! nothing reaches the removed one, and a later send creates it anew (its declaration is
//! submitted after the removal, so the store applies both in order). The caller waits for the
//! removal to be durable: a deleted queue does not come back after a crash.

use std::sync::Arc;

use store::{Completion, Destination, DestinationKind, StoreError};
use tokio::sync::oneshot;

use super::{advise, Core};
use crate::core::queue::{
    Disposal, Inspect, InspectedMessage, Inspection, Origins, QueueCommand, QueueHandle, Take,
    Taken, Which,
};
use crate::core::registry::Registry;
use crate::core::selector::Selector;
use crate::core::slow::ConsumerNotice;
use crate::core::types::{ConsumerId, CoreError};

/// The prefix of ActiveMQ's advisory topics, which are the broker's own.
const ADVISORY_PREFIX: &str = "ActiveMQ.Advisory.";

/// Why an operation was refused or failed.
#[derive(Debug, thiserror::Error)]
#[non_exhaustive]
pub enum OperationError {
    #[error("no such {kind}: {name}")]
    NoSuchDestination { kind: &'static str, name: String },
    /// ActiveMQ's words, which the JMS client shows for a refused `destroyDestination`
    /// (`subscription` names the first consumer, as ActiveMQ's names its subscription).
    #[error("Destination: {destination} still has an active subscription: {subscription}")]
    ConsumersAttached { destination: String, consumers: usize, subscription: String },
    #[error("{0} is an advisory topic, which the broker keeps: it cannot be deleted")]
    Advisory(String),
    #[error("invalid selector: {0}")]
    Selector(String),
    #[error("cannot move the messages of queue {0} to itself")]
    SameQueue(String),
    #[error("no message {id} in queue {queue}")]
    NoSuchMessage { queue: String, id: String },
    #[error(transparent)]
    Core(#[from] CoreError),
    #[error(transparent)]
    Store(#[from] StoreError),
    #[error("the broker is shutting down")]
    ShuttingDown,
}

/// What a retry did.
#[derive(Debug, Clone, Copy, PartialEq, Eq, Default)]
pub struct Retried {
    pub retried: u64,
    /// Messages that matched but stayed: without an original destination, or with a topic
    /// as theirs (not retried).
    pub skipped: u64,
}

/// Parses an optional selector as a consumer's would be.
fn selector(text: Option<&str>) -> Result<Which, OperationError> {
    match text.map(str::trim).filter(|text| !text.is_empty()) {
        None => Ok(Which::All),
        Some(text) => Selector::parse(text)
            .map(|selector| Which::Matching(Arc::new(selector)))
            .map_err(|error| OperationError::Selector(error.to_string())),
    }
}

fn no_such_queue(name: &str) -> OperationError {
    OperationError::NoSuchDestination { kind: "queue", name: name.to_owned() }
}

impl Core {
    /// The queue destination `name`, or why not.
    fn admin_queue(&self, name: &str) -> Result<QueueHandle, OperationError> {
        self.existing_queue(name).ok_or_else(|| no_such_queue(name))
    }

    /// Removes every ready message of queue `name` (in memory and in the store); answers how
    /// many, once their removal is durable. Messages in flight to consumers stay with them.
    pub async fn purge_queue(&self, name: &str) -> Result<u64, OperationError> {
        let queue = self.admin_queue(name)?;
        Ok(take(&queue, Which::All, Disposal::Remove, None).await?.count)
    }

    /// A page of queue `name`'s messages that `selector` matches, in delivery order.
    pub async fn inspect_queue(
        &self,
        name: &str,
        selector_text: Option<&str>,
        offset: u64,
        limit: usize,
    ) -> Result<Inspection, OperationError> {
        let queue = self.admin_queue(name)?;
        inspect(&queue, selector(selector_text)?, offset, limit).await
    }

    /// The message of queue `name` with protocol message id `id`.
    pub async fn find_message(
        &self,
        name: &str,
        id: &str,
    ) -> Result<InspectedMessage, OperationError> {
        let queue = self.admin_queue(name)?;
        let which = Which::MessageId(Arc::from(id));
        let found = inspect(&queue, which, 0, 1).await?;
        found.messages.into_iter().next().ok_or_else(|| OperationError::NoSuchMessage {
            queue: name.to_owned(),
            id: id.to_owned(),
        })
    }

    /// Removes the ready message of queue `name` with protocol message id `id`; answers 1,
    /// or [`OperationError::NoSuchMessage`].
    pub async fn remove_message(&self, name: &str, id: &str) -> Result<u64, OperationError> {
        let queue = self.admin_queue(name)?;
        let which = Which::MessageId(Arc::from(id));
        match take(&queue, which, Disposal::Remove, Some(1)).await?.count {
            0 => Err(OperationError::NoSuchMessage { queue: name.to_owned(), id: id.to_owned() }),
            count => Ok(count),
        }
    }

    /// Moves (or, with `copy`, copies) the ready messages of queue `from` that `selector`
    /// matches, at most `limit`, to queue `to` (created if needed); answers how many, once
    /// durable. Each is stored in `to` in the same unit that removes it from `from`.
    pub async fn move_messages(
        &self,
        from: &str,
        to: &str,
        selector_text: Option<&str>,
        copy: bool,
        limit: Option<u64>,
    ) -> Result<u64, OperationError> {
        if from == to {
            return Err(OperationError::SameQueue(from.to_owned()));
        }
        let which = selector(selector_text)?;
        let source = self.admin_queue(from)?;
        let target = {
            let mut registry = self.registry.lock();
            self.declare_queue(&mut registry, &Arc::from(to))?
        };
        let ids = self.next_message_id.clone();
        let disposal = Disposal::MoveTo { target, keep: copy, ids };
        Ok(take(&source, which, disposal, limit).await?.count)
    }

    /// Sends the dead letters of queue `name` that `selector` matches, at most `limit`, back
    /// to their original queues as fresh messages (delivery count 0), each in one unit with
    /// its removal here. Messages without an original destination, or whose original is a
    /// topic, stay (counted as skipped).
    pub async fn retry_messages(
        &self,
        name: &str,
        selector_text: Option<&str>,
        limit: Option<u64>,
    ) -> Result<Retried, OperationError> {
        let which = selector(selector_text)?;
        let source = self.admin_queue(name)?;
        let (reply, origins) = oneshot::channel();
        if !source.send(QueueCommand::Origins(Box::new(Origins { which: which.clone(), reply }))) {
            return Err(OperationError::ShuttingDown);
        }
        let origins = origins.await.map_err(|_| OperationError::ShuttingDown)?;
        let targets = {
            let mut registry = self.registry.lock();
            let mut targets = Vec::new();
            for origin in origins {
                if origin.kind == DestinationKind::Queue && *origin.name != *name {
                    let handle = self.declare_queue(&mut registry, &origin.name)?;
                    targets.push((origin, handle));
                }
            }
            targets
        };
        let disposal = Disposal::Retry { targets, ids: self.next_message_id.clone() };
        let taken = take(&source, which, disposal, limit).await?;
        Ok(Retried { retried: taken.count, skipped: taken.skipped })
    }

    /// Deletes queue or topic `destination` with its stored messages and (a topic) its
    /// durable subscriptions (see the module documentation); refused while consumers are
    /// attached unless `force`. Resolves once the removal is durable.
    pub async fn delete_destination(
        &self,
        destination: &Destination,
        force: bool,
    ) -> Result<(), OperationError> {
        self.start_deleting(destination, force)?.await?;
        Ok(())
    }

    /// [`Core::delete_destination`]'s decision and its removal from the routing table, now;
    /// the completion resolves once the removal is durable.
    pub fn start_deleting(
        &self,
        destination: &Destination,
        force: bool,
    ) -> Result<Completion, OperationError> {
        let mut registry = self.registry.lock();
        match destination.kind {
            DestinationKind::Queue => self.delete_queue(&mut registry, destination, force),
            DestinationKind::Topic => self.delete_topic(&mut registry, destination, force),
            DestinationKind::TempQueue | DestinationKind::TempTopic => {
                Err(CoreError::NotTemporary(destination.to_string()).into())
            }
        }
    }

    fn delete_queue(
        &self,
        registry: &mut Registry,
        destination: &Destination,
        force: bool,
    ) -> Result<Completion, OperationError> {
        let name = &*destination.name;
        let handle = registry.queues.get(name).cloned().ok_or_else(|| no_such_queue(name))?;
        let consumers: Vec<ConsumerId> = registry
            .consumers
            .iter()
            .filter(|(_, attachment)| attachment.queues.iter().any(|q| q.same_queue(&handle)))
            .map(|(id, _)| *id)
            .collect();
        self.refuse_or_close(registry, destination, &consumers, force)?;
        // Detached here at once: the consumers' connections close them later, and must not
        // find the removed queue among their queues meanwhile.
        for attachment in registry.consumers.values_mut() {
            attachment.queues.retain(|queue| !queue.same_queue(&handle));
        }
        if let Some(handle) = registry.remove_queue(name) {
            handle.send(QueueCommand::Stop);
        }
        Ok(self.remove_destination(registry, destination.clone(), "deleted"))
    }

    fn delete_topic(
        &self,
        registry: &mut Registry,
        destination: &Destination,
        force: bool,
    ) -> Result<Completion, OperationError> {
        let name = &*destination.name;
        if name.starts_with(ADVISORY_PREFIX) {
            return Err(OperationError::Advisory(destination.to_string()));
        }
        let durable: Vec<_> = registry
            .durable
            .iter()
            .filter(|(_, (queue, _))| queue.key().destination == *destination)
            .map(|(key, _)| key.clone())
            .collect();
        let exists = registry.topic_counters.published.contains_key(name)
            || registry.topic_subscriptions.subscribed_as(name, false)
            || !durable.is_empty();
        if !exists {
            return Err(OperationError::NoSuchDestination { kind: "topic", name: name.to_owned() });
        }
        let queues: Vec<QueueHandle> = registry
            .topic_subscriptions
            .matching(name, false)
            .into_iter()
            .map(|(_, subscription)| subscription.queue.clone())
            .collect();
        let consumers: Vec<ConsumerId> = registry
            .consumers
            .iter()
            .filter(|(_, attachment)| {
                let feeds = |queue: &QueueHandle| queues.iter().any(|q| q.same_queue(queue));
                attachment.private.as_ref().is_some_and(feeds)
                    || attachment
                        .queues
                        .iter()
                        .any(|queue| feeds(queue) && queue.key().destination == *destination)
            })
            .map(|(id, _)| *id)
            .collect();
        self.refuse_or_close(registry, destination, &consumers, force)?;
        for key in durable {
            if let Some((_, Some(consumer))) = registry.durable.get(&key) {
                // Its connection closes it (asked above); the subscription goes now.
                let consumer = *consumer;
                if let Some(attachment) = registry.consumers.get_mut(&consumer) {
                    attachment.durable = None;
                }
            }
            drop(self.drop_durable(registry, &key));
        }
        registry.topic_counters.forget(name);
        registry.recent.forget(destination);
        Ok(self.remove_destination(registry, destination.clone(), "deleted"))
    }

    /// Refuses while `consumers` are attached to `destination`, unless `force`: then each
    /// consumer's connection is asked to close it (as the slow consumer strategy's abort
    /// does), or, for a connection that cannot be asked, the consumer is detached here.
    fn refuse_or_close(
        &self,
        registry: &mut Registry,
        destination: &Destination,
        consumers: &[ConsumerId],
        force: bool,
    ) -> Result<(), OperationError> {
        if consumers.is_empty() {
            return Ok(());
        }
        if !force {
            let first = consumers[0];
            let subscription = match registry.advisories.consumer(first) {
                Some((_, connection)) => {
                    format!(
                        "consumer={}",
                        crate::core::advisory::consumer_subject(*connection, first)
                    )
                }
                None => format!("consumer={}", first.0),
            };
            return Err(OperationError::ConsumersAttached {
                destination: destination.to_string(),
                consumers: consumers.len(),
                subscription,
            });
        }
        for &consumer in consumers {
            let connection = registry.advisories.consumer(consumer).map(|(_, c)| *c);
            let notice = ConsumerNotice::Abort {
                consumer,
                destination: destination.clone(),
                close_connection: false,
                reason: format!("{destination} was deleted by an administrator"),
            };
            let asked = connection
                .and_then(|connection| registry.advisories.notices.get(&connection))
                .is_some_and(|notices| notices.send(notice).is_ok());
            if !asked {
                registry.detach(consumer);
                advise::consumer_stopped(registry, &self.next_message_id, consumer);
            }
        }
        tracing::info!(%destination, consumers = consumers.len(), "closing consumers of a destination being deleted");
        Ok(())
    }
}

/// Hands `queue` a [`Take`] and waits until what it submitted is durable.
async fn take(
    queue: &QueueHandle,
    which: Which,
    disposal: Disposal,
    limit: Option<u64>,
) -> Result<Taken, OperationError> {
    let (reply, taken) = oneshot::channel();
    if !queue.send(QueueCommand::Take(Box::new(Take { which, disposal, limit, reply }))) {
        return Err(OperationError::ShuttingDown);
    }
    let Taken { count, skipped, completions } =
        taken.await.map_err(|_| OperationError::ShuttingDown)?;
    for completion in completions {
        completion.await?;
    }
    Ok(Taken { count, skipped, completions: Vec::new() })
}

async fn inspect(
    queue: &QueueHandle,
    which: Which,
    offset: u64,
    limit: usize,
) -> Result<Inspection, OperationError> {
    let (reply, inspection) = oneshot::channel();
    if !queue.send(QueueCommand::Inspect(Box::new(Inspect { which, offset, limit, reply }))) {
        return Err(OperationError::ShuttingDown);
    }
    inspection.await.map_err(|_| OperationError::ShuttingDown)
}

/// A consumer, as the admin endpoint lists it.
#[derive(Debug, Clone)]
pub struct ConsumerListing {
    /// The connection's id as its advisories announce it (OpenWire's ConnectionId, or the
    /// broker's `ID:...` for the other protocols).
    pub connection: String,
    /// The consumer's id as its advisories name it.
    pub consumer: String,
    pub destination: Destination,
    pub selector: Option<String>,
    pub prefetch: u32,
    /// Messages delivered to it and not yet acknowledged, on every queue it consumes from.
    pub in_flight: u64,
    /// The durable subscription it is the active consumer of.
    pub durable: Option<store::SubscriptionKey>,
}

/// A durable subscription, as the admin endpoint lists it.
#[derive(Debug, Clone)]
pub struct DurableListing {
    pub key: store::SubscriptionKey,
    pub topic: Destination,
    pub selector: Option<String>,
    /// A consumer is attached.
    pub active: bool,
    /// Messages waiting for it (in flight ones not counted).
    pub pending: u64,
}

impl Core {
    /// Every consumer attached now, ordered by id (the order they subscribed in).
    pub async fn consumer_listing(&self) -> Vec<ConsumerListing> {
        let (mut listings, queues) = {
            let registry = self.registry.lock();
            let mut queues: Vec<QueueHandle> = Vec::new();
            let mut listings = Vec::new();
            for (&id, attachment) in registry.consumers.iter() {
                let attached = attachment.queues.iter().chain(attachment.private.iter());
                for queue in attached.clone() {
                    if !queues.iter().any(|known| known.same_queue(queue)) {
                        queues.push(queue.clone());
                    }
                }
                let (destination, connection) = match registry.advisories.consumer(id) {
                    Some((destination, connection)) => (destination.clone(), Some(*connection)),
                    None => match attached.clone().next() {
                        Some(queue) => (queue.key().destination.clone(), None),
                        None => continue,
                    },
                };
                let connection_name =
                    connection.map_or_else(String::new, |connection| {
                        registry.advisories.connections.get(&connection).cloned().unwrap_or_else(
                            || crate::core::advisory::connection_subject(connection),
                        )
                    });
                let consumer = match connection {
                    Some(connection) => crate::core::advisory::consumer_subject(connection, id),
                    None => id.0.to_string(),
                };
                listings.push((
                    id,
                    ConsumerListing {
                        connection: connection_name,
                        consumer,
                        destination,
                        selector: None,
                        prefetch: 0,
                        in_flight: 0,
                        durable: attachment.durable.clone(),
                    },
                ));
            }
            (listings, queues)
        };
        for queue in queues {
            let (reply, details) = oneshot::channel();
            if !queue.send(QueueCommand::Consumers(reply)) {
                continue;
            }
            let Ok(details) = details.await else { continue };
            for detail in details {
                if let Some((_, listing)) =
                    listings.iter_mut().find(|(id, _)| *id == detail.consumer)
                {
                    listing.prefetch = detail.prefetch;
                    listing.in_flight += detail.in_flight as u64;
                    if listing.selector.is_none() {
                        listing.selector = detail.selector;
                    }
                }
            }
        }
        listings.sort_by_key(|(id, _)| id.0);
        listings.into_iter().map(|(_, listing)| listing).collect()
    }

    /// Every durable subscription, active or not, ordered by client id and name.
    pub async fn durable_listing(&self) -> Vec<DurableListing> {
        let found: Vec<(DurableListing, QueueHandle)> = {
            let registry = self.registry.lock();
            registry
                .durable
                .iter()
                .map(|(key, (queue, active))| {
                    let selector = registry
                        .topic_subscriptions
                        .of_queue(queue)
                        .next()
                        .and_then(|subscription| subscription.selector.as_ref())
                        .map(|selector| crate::core::queue::shown_selector(selector.text()));
                    let listing = DurableListing {
                        key: key.clone(),
                        topic: queue.key().destination.clone(),
                        selector,
                        active: active.is_some(),
                        pending: 0,
                    };
                    (listing, queue.clone())
                })
                .collect()
        };
        let mut listings = Vec::with_capacity(found.len());
        for (mut listing, queue) in found {
            if let Some(stats) = queue.stats().await {
                listing.pending = stats.ready as u64;
            }
            listings.push(listing);
        }
        listings
            .sort_by(|a, b| (&a.key.client_id, &a.key.name).cmp(&(&b.key.client_id, &b.key.name)));
        listings
    }
}
