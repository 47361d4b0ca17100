//! "Store, then enqueue" as a type: a message on its way into a queue ([`Arrival`]), and
//! the one way to submit the unit of work that stores such messages ([`stage`]).
//!
//! # The invariant
//!
//! A persistent message of a stored queue becomes readable by the queue's page-in as soon as
//! the unit that stores it is submitted, but it reaches the queue's memory through its
//! `Enqueue`, which comes later (see `paging.rs`, "Messages still being written"). So it is
//! announced to the queue before the submit (paging skips announced messages), and the
//! announcement must end in exactly one of two ways: the `Enqueue` (the queue forgets the
//! announcement when it takes it), or a withdrawal (the unit was refused, or the message will
//! not be enqueued after all). An announcement left behind hides the message from paging for
//! good (until the next start); an `Enqueue` after a withdrawal, or without an announcement,
//! may add a message a page-in already read, a second time.
//!
//! The type keeps that: [`QueueHandle::announce`] is the only way to announce, and it gives
//! an [`Arrival`]; [`Arrival::enqueue_all`] (or [`Staged`], which calls it) consumes it and
//! sends the `Enqueue`; dropping it withdraws the announcement. So every path (an early
//! return, a `?`, a failed commit) ends each announcement once. [`stage`] takes the arrivals already made with the unit, so the
//! announcement comes before the submit by construction, and withdraws them when the store
//! refuses the unit at once. What it cannot check is a unit submitted by hand around it: a
//! unit that stores a message for a queue goes through `stage`.
//!
//! Staged arrivals must therefore not be dropped while their unit may still become durable:
//! a commit waits for its record in a task of its own (`Core::commit`), not in the future its
//! caller may drop when the connection goes.
//!
//! Messages that need no announcement (non-persistent ones, any message of a queue that is
//! not stored: nothing of them is in the broker's store for a page-in to read) still get an
//! `Arrival`, whose drop does nothing: callers treat every queue of a route alike.

use std::sync::Arc;

use futures_util::FutureExt;
use rustc_hash::FxHashMap;
use store::{Completion, Message, MessageStore, StoreError, UnitOfWork};

use super::paging::SharedBody;
use super::{QueueCommand, QueueHandle};

/// A message announced to a queue: it must be enqueued ([`Arrival::enqueue_all`]); dropped, it
/// is withdrawn. See the module documentation.
#[must_use = "an announced message must be enqueued; dropping it withdraws it"]
#[derive(Debug)]
pub(crate) struct Arrival {
    queue: QueueHandle,
    message: Arc<Message>,
    /// The message is on the queue's arriving list and neither enqueued nor withdrawn yet.
    announced: bool,
}

impl QueueHandle {
    /// Announces `message` as on its way to this queue: call before submitting the unit that
    /// stores it here (through [`stage`]), and enqueue the arrival after. Only persistent
    /// messages of stored queues are registered; the arrival of any other is a plain
    /// `Enqueue` to come.
    pub(crate) fn announce(&self, message: &Arc<Message>) -> Arrival {
        let announced = self.stored && message.is_persistent();
        if announced {
            self.arriving.insert(message.id);
        }
        Arrival { queue: self.clone(), message: message.clone(), announced }
    }
}

impl Arrival {
    /// Enqueues every arrival, one `Enqueue` per queue with its messages in the order given
    /// (a transaction's sends reach each queue as one batch, in the order they were sent).
    /// The queue takes each message off its arriving list when it takes the command.
    pub(crate) fn enqueue_all(arrivals: impl IntoIterator<Item = Arrival>) {
        let mut batches: Vec<(QueueHandle, Vec<Arc<Message>>)> = Vec::new();
        for mut arrival in arrivals {
            // Its `Enqueue` is sent below: the queue ends the announcement, not the drop.
            arrival.announced = false;
            match batches.iter_mut().find(|(queue, _)| queue.same_queue(&arrival.queue)) {
                Some((_, messages)) => messages.push(arrival.message.clone()),
                None => batches.push((arrival.queue.clone(), vec![arrival.message.clone()])),
            }
        }
        if batches.len() < 2 {
            for (queue, messages) in batches {
                queue.send(QueueCommand::Enqueue(messages));
            }
            return;
        }
        // A message routed to several queues is one `Arc` they all hold: its body counts once
        // in the broker's usage, for as long as any of them holds it (`SharedBody`).
        let mut holders: FxHashMap<*const Message, (usize, Option<Arc<SharedBody>>)> =
            FxHashMap::default();
        for (_, messages) in &batches {
            for message in messages {
                holders.entry(Arc::as_ptr(message)).or_default().0 += 1;
            }
        }
        for (queue, messages) in batches {
            let bodies: Box<[Option<Arc<SharedBody>>]> = messages
                .iter()
                .map(|message| match holders.get_mut(&Arc::as_ptr(message)) {
                    Some((count, body)) if *count > 1 => {
                        Some(body.get_or_insert_with(|| queue.memory.share(message)).clone())
                    }
                    _ => None,
                })
                .collect();
            match bodies.iter().any(Option::is_some) {
                true => queue.send(QueueCommand::EnqueueShared { messages, bodies }),
                false => queue.send(QueueCommand::Enqueue(messages)),
            };
        }
    }
}

impl Drop for Arrival {
    /// Not enqueued: the message will not come (its unit failed, its transaction did not
    /// commit), so paging must not skip it.
    fn drop(&mut self) {
        if self.announced {
            self.queue.arriving.remove(self.message.id);
        }
    }
}

/// A unit of work submitted with the arrivals of the messages it stores: enqueue them now
/// ([`Staged::enqueue`]: concurrent store and dispatch) or once the unit is durable
/// ([`Staged::enqueue_when_durable`]).
#[must_use = "its arrivals are withdrawn unless enqueued"]
#[derive(Debug)]
pub(crate) struct Staged {
    completion: Completion,
    arrivals: Vec<Arrival>,
}

impl Staged {
    /// True if the unit is durable already (or stored nothing): enqueueing now is enqueueing
    /// once durable.
    pub(crate) fn is_durable(&self) -> bool {
        self.completion.is_ready()
    }

    /// Enqueues the arrivals now, before the unit may be durable; the completion resolves
    /// when it is.
    pub(crate) fn enqueue(self) -> Completion {
        Arrival::enqueue_all(self.arrivals);
        self.completion
    }

    /// Enqueues the arrivals once the unit is durable, or withdraws them if it fails.
    pub(crate) async fn enqueue_when_durable(self) -> Result<(), StoreError> {
        let Staged { completion, arrivals } = self;
        // On failure the arrivals drop here: withdrawn.
        completion.await?;
        Arrival::enqueue_all(arrivals);
        Ok(())
    }
}

/// Submits `unit`, which stores the messages of `arrivals` (announced already, which taking
/// them here guarantees), unless it is empty. A store that refuses at once (full, closed,
/// poisoned) gives the error here, with the arrivals withdrawn, so that nothing it refused is
/// dispatched and the sender can be told; a failure that comes later (a failed sync) comes
/// through the completion, after the messages may have been dispatched, as with ActiveMQ's
/// concurrent store and dispatch.
pub(crate) fn stage(
    store: &dyn MessageStore,
    unit: UnitOfWork,
    arrivals: Vec<Arrival>,
) -> Result<Staged, StoreError> {
    if unit.is_empty() {
        return Ok(Staged { completion: Completion::ready(Ok(())), arrivals });
    }
    let completion = store.submit(unit);
    if !completion.is_ready() {
        return Ok(Staged { completion, arrivals });
    }
    // Resolved already: its result is taken here (a ready completion gives it at the first
    // poll), and the staged unit carries a plain success.
    match completion.now_or_never() {
        Some(Err(error)) => Err(error),
        _ => Ok(Staged { completion: Completion::ready(Ok(())), arrivals }),
    }
}
