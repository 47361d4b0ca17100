//! What an administrator does to a queue's messages, in the queue's own task: inspect them
//! (a page of them in delivery order, or one by its id), and take them out (purge, remove one,
//! move or copy them to another queue, send dead letters back where they came from).
//!
//! Both look at every message the queue holds, not only its window: the ready messages in
//! memory first, then the stored ones beyond the window, read a page at a time after the
//! boundary ([`Queue::read_beyond`], skipping what is held or announced, as paging does).
//! Taking a message out never brings the rest of the queue into memory: one beyond the
//! window is acknowledged in the store (or its temporary store) where it is.
//!
//! Messages delivered to a consumer and not yet acknowledged (and those acknowledged in an
//! open transaction) are not taken: the consumer's ack removes them, and if it gives them
//! back they are ready again (an inspection still shows them).
//!
//! **Crash safety.** A removal is an `Ack` of the stored reference; a move is one unit per
//! batch holding the copy's `AddMessage` in the target and the original's `Ack`, as a dead
//! letter's move is (the store applies a unit whole or not at all), so a crash leaves each
//! message in the source or in the target, never in neither and never in both. A copy stores
//! the `AddMessage` alone. The caller is given every unit's completion and answers only once
//! they are all durable, so nothing it reports removed comes back after a restart.

use std::sync::atomic::{AtomicU64, Ordering};
use std::sync::Arc;

use store::{Completion, Destination, Message, MessageId, Operation, PageKey, UnitOfWork};
use tokio::sync::oneshot;

use super::paging::{Source, PAGE};
use super::{stage, Arrival, Queue, QueueHandle, QueuedMessage, Selector};

/// Operations per unit of work a removal submits, so that a purge of millions of messages
/// is many bounded units rather than one huge one.
const OPERATIONS_PER_UNIT: usize = 4096;

/// Which messages an operation is about.
#[derive(Clone)]
pub(crate) enum Which {
    All,
    Matching(Arc<Selector>),
    /// The one with this protocol message id (JMSMessageID, STOMP `message-id`).
    MessageId(Arc<str>),
}

impl Which {
    fn matches(&self, message: &Message) -> bool {
        match self {
            Which::All => true,
            Which::Matching(selector) => selector.matches(message),
            Which::MessageId(id) => *message.message_id == **id,
        }
    }

    /// True if at most one message can match.
    fn is_single(&self) -> bool {
        matches!(self, Which::MessageId(_))
    }
}

/// What becomes of the messages taken.
pub(crate) enum Disposal {
    /// Gone (a purge, a removal).
    Remove,
    /// A copy (new broker id, same JMS id, headers, properties and body) goes to `target`;
    /// unless `keep`, the original leaves this queue in the same unit of work.
    MoveTo { target: QueueHandle, keep: bool, ids: Arc<AtomicU64> },
    /// Each message goes back to its original destination (a dead letter's
    /// `original_destination`), if that is among `targets`, as a fresh message (delivery
    /// count 0); others stay, counted as skipped.
    Retry { targets: Vec<(Destination, QueueHandle)>, ids: Arc<AtomicU64> },
}

/// A request to take messages out of a queue.
pub(crate) struct Take {
    pub which: Which,
    pub disposal: Disposal,
    /// At most this many, the first in delivery order.
    pub limit: Option<u64>,
    pub reply: oneshot::Sender<Taken>,
}

/// What a [`Take`] did.
pub(crate) struct Taken {
    /// Messages removed, moved or copied.
    pub count: u64,
    /// Messages that matched but were left (no original destination to retry them to).
    pub skipped: u64,
    /// One per unit submitted: the operation is durable once all resolve.
    pub completions: Vec<Completion>,
}

/// One message as an inspection shows it.
#[derive(Debug, Clone)]
pub struct InspectedMessage {
    pub message: Arc<Message>,
    /// Times it was handed to a consumer before (0: never; a message recovered after an
    /// unclean stop counts 1).
    pub delivery_count: u32,
    /// Delivered to a consumer now, not acknowledged yet.
    pub in_flight: bool,
}

/// A page of an inspection.
#[derive(Debug, Clone, Default)]
pub struct Inspection {
    /// Messages that matched, among those looked at (every one in memory, and the stored
    /// ones beyond the window up to [`INSPECT_PAGES`] pages).
    pub total: u64,
    /// The matching messages from `offset`, at most `limit`, in delivery order.
    pub messages: Vec<InspectedMessage>,
}

/// Pages of stored messages beyond the window an inspection reads at most (512 each).
pub(crate) const INSPECT_PAGES: usize = 128;

/// A request to look at messages without taking them.
pub(crate) struct Inspect {
    pub which: Which,
    pub offset: u64,
    pub limit: usize,
    pub reply: oneshot::Sender<Inspection>,
}

/// The original destinations of the matching messages (what a retry will need opened).
pub(crate) struct Origins {
    pub which: Which,
    pub reply: oneshot::Sender<Vec<Destination>>,
}

/// Collects the removals of one [`Take`] into units of bounded size.
struct Units {
    unit: UnitOfWork,
    arrivals: Vec<Arrival>,
    completions: Vec<Completion>,
}

impl Units {
    fn new() -> Self {
        Units { unit: UnitOfWork::new(), arrivals: Vec::new(), completions: Vec::new() }
    }

    /// Submits the current unit if it is full (or `now`).
    fn flush(&mut self, store: &dyn store::MessageStore, now: bool) {
        if self.unit.operations.len() < OPERATIONS_PER_UNIT && !now {
            return;
        }
        if self.unit.is_empty() && self.arrivals.is_empty() {
            return;
        }
        let unit = std::mem::take(&mut self.unit);
        let arrivals = std::mem::take(&mut self.arrivals);
        match stage(store, unit, arrivals) {
            Ok(staged) => self.completions.push(staged.enqueue()),
            Err(error) => self.completions.push(Completion::ready(Err(error))),
        }
    }
}

impl Queue {
    /// Takes the messages `take` names out of this queue (see the module documentation).
    pub(super) fn take_messages(&mut self, take: Take) {
        let Take { which, disposal, limit, reply } = take;
        let limit = limit.unwrap_or(u64::MAX);
        let mut units = Units::new();
        let (mut count, mut skipped) = (0u64, 0u64);

        // The ready messages in memory, in delivery order.
        let keys: Vec<PageKey> = self
            .ready
            .iter()
            .filter(|(_, queued)| which.matches(&queued.message))
            .map(|(key, _)| *key)
            .collect();
        for key in keys {
            if count >= limit {
                break;
            }
            let Some(queued) = self.ready.get(&key) else { continue };
            let Some(leaves) = self.dispose(&queued.message.clone(), &disposal, &mut units, true)
            else {
                skipped += 1;
                continue;
            };
            count += 1;
            if leaves {
                if let Some(queued) = self.ready.remove(&key) {
                    self.forget(&queued);
                }
            }
            units.flush(&*self.store, false);
        }

        // A purge or a removal takes the messages in flight too, as ActiveMQ's purge does (its
        // paged-in messages include the dispatched ones): the consumer's later ack of one
        // finds nothing and is ignored, and one that goes without acking gives nothing back.
        // Not those acked inside a transaction, which its commit settles.
        if matches!(disposal, Disposal::Remove) {
            for index in 0..self.consumers.len() {
                let ids: Vec<MessageId> = self.consumers[index]
                    .in_flight
                    .iter()
                    .filter(|(_, queued)| {
                        !queued.acked_in_transaction && which.matches(&queued.message)
                    })
                    .map(|(id, _)| *id)
                    .collect();
                for id in ids {
                    if count >= limit {
                        break;
                    }
                    let consumer = &mut self.consumers[index];
                    let Some(queued) = consumer.take(&id) else { continue };
                    if queued.releases_credit() {
                        consumer.released -= 1;
                    }
                    self.dispose(&queued.message, &disposal, &mut units, true);
                    self.forget(&queued);
                    count += 1;
                    units.flush(&*self.store, false);
                }
            }
        }

        // The stored messages beyond the window, where they are.
        let single_found = which.is_single() && count > 0;
        if let super::paging::Window::Partial(mut after) = self.paging.window {
            while count < limit && !single_found {
                let beyond = match self.read_beyond(after, PAGE) {
                    Ok(beyond) => beyond,
                    Err(error) => {
                        tracing::warn!(queue = ?self.handle.key, %error,
                            "cannot read stored messages beyond the window");
                        units.completions.push(Completion::ready(Err(error)));
                        break;
                    }
                };
                let full = beyond.end.is_some();
                let fresh: Vec<(Arc<Message>, Source)> = {
                    let arriving = self.handle.arriving.0.lock();
                    beyond
                        .messages
                        .into_iter()
                        .map(|(stored, source)| (stored.message, source))
                        .filter(|(message, _)| !self.is_held(message, &arriving))
                        .collect()
                };
                let mut unspooled = Vec::new();
                for (message, source) in fresh {
                    after = Some(PageKey::of(&message));
                    if count >= limit || !which.matches(&message) {
                        continue;
                    }
                    let in_store = source == Source::Store;
                    let Some(leaves) = self.dispose(&message, &disposal, &mut units, in_store)
                    else {
                        skipped += 1;
                        continue;
                    };
                    count += 1;
                    if leaves {
                        self.paging.returned.remove(&message.id);
                        if source == Source::Spool {
                            unspooled.push(message);
                        }
                    }
                    units.flush(&*self.store, false);
                }
                self.unspool(&unspooled);
                if !full || (which.is_single() && count > 0) {
                    break;
                }
            }
        }
        units.flush(&*self.store, true);
        if count > 0 {
            tracing::debug!(queue = ?self.handle.key, count, skipped, "messages taken by an administrator");
        }
        let _ = reply.send(Taken { count, skipped, completions: units.completions });
    }

    /// Adds what disposing of `message` takes to `units`: whether it leaves this queue (not
    /// for a copy); `None` if it is not taken (a retry without a target). `in_store`: its
    /// reference is in this queue's store (not its spool), if it is stored at all.
    fn dispose(
        &self,
        message: &Arc<Message>,
        disposal: &Disposal,
        units: &mut Units,
        in_store: bool,
    ) -> Option<bool> {
        let ack = || Operation::Ack {
            queue: (*self.handle.key).clone(),
            key: PageKey::of(message),
            txn: None,
        };
        let stored_here = in_store && self.in_store(message);
        let (target, keep, destination, ids, fresh) = match disposal {
            Disposal::Remove => {
                if stored_here {
                    units.unit.push(ack());
                }
                return Some(true);
            }
            Disposal::MoveTo { target, keep, ids } => {
                (target, *keep, target.key().destination.clone(), ids, false)
            }
            Disposal::Retry { targets, ids } => {
                let original = message.original_destination.as_ref()?;
                let (destination, target) = targets.iter().find(|(d, _)| d == original)?;
                (target, false, destination.clone(), ids, true)
            }
        };
        let mut copy = (**message).clone();
        copy.id = MessageId(ids.fetch_add(1, Ordering::Relaxed));
        copy.destination = destination;
        if fresh {
            copy.original_destination = None;
        }
        let copy = Arc::new(copy);
        if target.stored && copy.is_persistent() {
            units.unit.push(Operation::AddMessage {
                message: copy.clone(),
                queues: vec![target.key().clone()],
                txn: None,
            });
        }
        units.arrivals.push(target.announce(&copy));
        if !keep && stored_here {
            units.unit.push(ack());
        }
        Some(!keep)
    }

    /// A ready message leaves memory for good (taken by an operation): its bytes stop
    /// counting, as an ack's do.
    fn forget(&mut self, queued: &QueuedMessage) {
        self.count_memory(queued, false);
        self.paging.pin(self.handle.stored, queued, false);
        self.paging.returned.remove(&queued.message.id);
    }

    /// The messages `inspect` names, in delivery order (see [`Inspection`]).
    pub(super) fn inspect(&self, inspect: Inspect) {
        let Inspect { which, offset, limit, reply } = inspect;
        let mut found: Vec<(PageKey, InspectedMessage)> = Vec::new();
        self.visit(&which, |message, delivery_count, in_flight| {
            found.push((
                PageKey::of(message),
                InspectedMessage { message: message.clone(), delivery_count, in_flight },
            ));
            !(which.is_single())
        });
        found.sort_by_key(|(key, _)| *key);
        let total = found.len() as u64;
        let start = usize::try_from(offset).unwrap_or(usize::MAX);
        let messages = found.into_iter().skip(start).take(limit).map(|(_, m)| m).collect();
        let _ = reply.send(Inspection { total, messages });
    }

    /// The distinct original destinations of the messages `origins` names.
    pub(super) fn origins(&self, origins: Origins) {
        let mut destinations: Vec<Destination> = Vec::new();
        self.visit(&origins.which, |message, _, _| {
            if let Some(original) = &message.original_destination {
                if !destinations.contains(original) {
                    destinations.push(original.clone());
                }
            }
            true
        });
        let _ = origins.reply.send(destinations);
    }

    /// Calls `visit` with every message `which` names (with its delivery count, and whether
    /// it is in flight): in memory (ready and in flight), then stored beyond the window, up
    /// to [`INSPECT_PAGES`] pages; `visit` answers false to stop.
    fn visit(&self, which: &Which, mut visit: impl FnMut(&Arc<Message>, u32, bool) -> bool) {
        let in_memory = self
            .ready
            .values()
            .map(|queued| (queued, false))
            .chain(self.consumers.iter().flat_map(|c| c.in_flight.values()).map(|q| (q, true)));
        for (queued, in_flight) in in_memory {
            if which.matches(&queued.message)
                && !visit(&queued.message, queued.delivery_count, in_flight)
            {
                return;
            }
        }
        let super::paging::Window::Partial(mut after) = self.paging.window else { return };
        for _ in 0..INSPECT_PAGES {
            let beyond = match self.read_beyond(after, PAGE) {
                Ok(beyond) => beyond,
                Err(error) => {
                    tracing::warn!(queue = ?self.handle.key, %error,
                        "cannot read stored messages beyond the window");
                    return;
                }
            };
            let full = beyond.end.is_some();
            let arriving = self.handle.arriving.0.lock();
            for (stored, _) in beyond.messages {
                let message = stored.message;
                after = Some(PageKey::of(&message));
                if self.is_held(&message, &arriving) || !which.matches(&message) {
                    continue;
                }
                let delivery_count = self
                    .paging
                    .returned
                    .get(&message.id)
                    .copied()
                    .unwrap_or(u32::from(stored.redelivered));
                if !visit(&message, delivery_count, false) {
                    return;
                }
            }
            if !full {
                return;
            }
        }
    }
}

/// A consumer as the queue holding it sees it, for the admin endpoint's list.
#[derive(Debug, Clone)]
pub struct ConsumerDetail {
    pub consumer: crate::core::types::ConsumerId,
    pub prefetch: u32,
    /// Messages delivered to it and not yet acknowledged.
    pub in_flight: usize,
    pub selector: Option<String>,
}

impl Queue {
    /// The queue's consumers, in the order they subscribed.
    pub(super) fn consumer_details(&self, reply: oneshot::Sender<Vec<ConsumerDetail>>) {
        let details = self
            .consumers
            .iter()
            .map(|consumer| ConsumerDetail {
                consumer: consumer.spec.id,
                prefetch: consumer.spec.prefetch,
                in_flight: consumer.in_flight.len(),
                selector: consumer.spec.selector.as_ref().map(|s| shown_selector(s.text())),
            })
            .collect();
        let _ = reply.send(details);
    }
}

/// A selector as its consumer wrote it: without the prefix that marks STOMP's string
/// conversions (`Selector::text` keeps it, to parse the same selector again).
pub(crate) fn shown_selector(text: &str) -> String {
    text.strip_prefix(crate::core::selector::CONVERT_STRINGS_PREFIX).unwrap_or(text).to_owned()
}
