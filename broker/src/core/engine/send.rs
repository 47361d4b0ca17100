//! Accepting a message: judging its subscribers' selectors, routing it (creating the queues
//! it names, within the destination limits), storing it once for every stored queue of its
//! route, and handing it to each queue, or to its transaction.

use std::sync::Arc;

use store::{Completion, Destination, DestinationKind, Message, Operation, QueueKey, UnitOfWork};

use crate::core::queue::QueueHandle;
use crate::core::registry::{Registry, SelectorVerdicts, Temporary};
use crate::core::retained;
use crate::core::types::{composite_parts, ConnectionId, CoreError};
use crate::core::wildcard::DestinationFilter;

use super::{Core, Transaction};

/// A completion that resolves once `first` and `second` have, with the first failure.
fn both(first: Completion, second: Completion) -> Completion {
    if first.is_ready() {
        return second;
    }
    if second.is_ready() {
        return first;
    }
    let (completer, completion) = Completion::pending();
    tokio::spawn(async move {
        let first = first.await;
        let second = second.await;
        completer.complete(first.and(second));
    });
    completion
}

impl Core {
    /// Accepts a message from `connection`: routes it, stores it where it is stored (once,
    /// referenced by each stored queue), and hands it to its queues, or, inside a
    /// transaction, keeps it for the commit. The completion resolves when the message is
    /// durable (at once when nothing was stored); the message may be dispatched before that
    /// (concurrent store and dispatch).
    ///
    /// A message with `AMQ_SCHEDULED_*` properties goes to the scheduler instead (see
    /// [`scheduler`]); an invalid schedule is refused with [`CoreError::InvalidSchedule`].
    pub fn send(
        &self,
        message: Arc<Message>,
        connection: ConnectionId,
        transaction: Option<&mut Transaction>,
    ) -> Result<Completion, CoreError> {
        self.send_storing(message, connection, transaction, None)
    }

    /// [`Core::send`] of a message whose store entry also goes into `also_stored`, a reserved
    /// store queue, in the same `AddMessage`: the store has the message and that entry
    /// together or neither (the received marks of QoS 2, [`crate::core::exactly_once`]).
    /// Such a message is dispatched only once durable: dispatched before, and lost with a
    /// crash, it would reach its consumers twice when its sender, never told it was stored,
    /// sends it again.
    pub(super) fn send_storing(
        &self,
        message: Arc<Message>,
        connection: ConnectionId,
        transaction: Option<&mut Transaction>,
        also_stored: Option<QueueKey>,
    ) -> Result<Completion, CoreError> {
        // Checked first: a refused schedule must not count as seen by the audit.
        let schedule = self.schedule_of(&message)?;
        let verdicts = match schedule {
            None => self.judge_selectors(&message),
            Some(_) => None,
        };
        let mut registry = self.registry.lock();
        // Under the registry lock, so that an original and its resend (on another connection)
        // are judged in the order they are routed.
        if registry.audit.is_duplicate(&message) {
            tracing::debug!(id = %message.message_id, destination = %message.destination,
                "duplicate send ignored (a resend after failover)");
            return Ok(Completion::ready(Ok(())));
        }
        if let Some(schedule) = schedule {
            drop(registry);
            return self.schedule(message, schedule, transaction);
        }
        // A transacted topic message is published (and becomes recent for retroactive
        // subscribers) at the commit: an aborted one must never be replayed.
        let publish = transaction.is_none();
        // Retained (`ActiveMQ.Retain`) once routed; a transacted send is not retained.
        let retain = publish && retained::asks_to_retain(&message);
        let route = self.route(&mut registry, &message, connection, publish, verdicts.as_ref())?;
        let mut stored: Vec<QueueKey> = if message.is_persistent() {
            route.iter().filter(|q| q.stored).map(|q| (*q.key).clone()).collect()
        } else {
            Vec::new()
        };
        let also_stored_given = also_stored.is_some();
        stored.extend(also_stored);
        let txn = transaction.as_ref().map(|t| t.id);
        let stores_something = !stored.is_empty();
        // Announced before the submit makes it readable, so that paging leaves it to the
        // `Enqueue`; a transaction's sends are announced (and enqueued) at its commit.
        let arrivals = match transaction.is_some() {
            true => Vec::new(),
            false => route.iter().map(|queue| queue.announce(&message)).collect(),
        };
        let mut unit = UnitOfWork::new();
        if stores_something {
            unit.push(Operation::AddMessage { message: message.clone(), queues: stored, txn });
        }
        // A store that refuses at once must not see the message dispatched: the producer is
        // told it failed and may send it again (see `stage`).
        let staged = crate::core::queue::stage(&*self.store, unit, arrivals)?;
        if let Some(transaction) = transaction {
            transaction.has_store_records |= stores_something;
            transaction.sends.push((route, message, connection));
            return Ok(staged.enqueue());
        }
        let routed = match also_stored_given {
            true => self.durable_enqueues.enqueue_when_durable(staged),
            false => staged.enqueue(),
        };
        if !retain {
            return Ok(routed);
        }
        // After routing, as its own unit (the retained copy has its own broker id): the
        // subscribers have it even if the store refuses to retain it. Still under the routing
        // lock (the table's own lock is taken inside it, never the other way round), so that
        // the last message routed to a topic is the one it retains. The send completes once
        // both are durable.
        let kept = self.retained.retain(&*self.store, &message, self.next_message_id())?;
        drop(registry);
        Ok(both(routed, kept))
    }

    /// The retained messages whose topic `filter` (a topic, its name may hold wildcards)
    /// matches, oldest first: what a new subscription to it is handed (see [`retained`]).
    pub fn retained_messages(&self, filter: &Destination) -> Vec<Arc<Message>> {
        if filter.kind != DestinationKind::Topic {
            return Vec::new();
        }
        self.retained.matching(&DestinationFilter::new(&filter.name))
    }

    /// The selectors of the subscriptions `message` may reach through its topics, evaluated
    /// on copies of them without the routing lock, so that a topic with many selector
    /// subscribers does not hold every other send up (see [`SelectorVerdicts`]).
    pub(super) fn judge_selectors(&self, message: &Message) -> Option<SelectorVerdicts> {
        let targets = self.targets(message);
        let topics: Vec<(&str, bool)> = targets
            .iter()
            .filter(|part| !part.kind.is_queue())
            .map(|part| (&*part.name, part.kind == DestinationKind::TempTopic))
            .collect();
        if topics.is_empty() {
            return None;
        }
        let judged = self.registry.lock().topic_subscriptions.selectors_for(&topics);
        SelectorVerdicts::judge(judged, message)
    }

    /// Every queue a message sent by `connection` lands in, for a plain, composite (`A,B`) or
    /// configured composite destination ([`Core::targets`]). `publish` also keeps topic
    /// messages for retroactive subscribers. Topic subscriptions' selectors come from
    /// `verdicts` when they still apply, else they are evaluated here, under the lock.
    pub(super) fn route(
        &self,
        registry: &mut Registry,
        message: &Arc<Message>,
        connection: ConnectionId,
        publish: bool,
        verdicts: Option<&SelectorVerdicts>,
    ) -> Result<Vec<QueueHandle>, CoreError> {
        let mut route: Vec<QueueHandle> = Vec::new();
        let targets = self.targets(message);
        // Every new queue part is checked before any is created: a refused composite send
        // creates nothing.
        for part in targets.iter().filter(|part| part.kind == DestinationKind::Queue) {
            if !DestinationFilter::is_pattern(&part.name) {
                self.room_for_queue(registry, &part.name)?;
            }
        }
        for part in targets {
            if DestinationFilter::is_pattern(&part.name) {
                return Err(CoreError::WildcardSend(part.to_string()));
            }
            let reached = match part.kind {
                DestinationKind::Queue => vec![self.declare_queue(registry, &part.name)?],
                DestinationKind::TempQueue => match registry.temporary.get(&part) {
                    Some(Temporary { queue: Some(queue), .. }) => vec![queue.clone()],
                    _ => return Err(CoreError::NoSuchTemporary(part.to_string())),
                },
                DestinationKind::Topic | DestinationKind::TempTopic => {
                    let temporary = part.kind == DestinationKind::TempTopic;
                    if temporary && !registry.temporary.contains_key(&part) {
                        return Err(CoreError::NoSuchTemporary(part.to_string()));
                    }
                    if publish {
                        registry.recent.remember(&part, message);
                        if !temporary {
                            registry.topic_counters.published(&part.name);
                        }
                    }
                    let reached = registry.topic_route(
                        &part.name,
                        message,
                        temporary,
                        connection,
                        &self.settings.virtual_topics,
                        verdicts,
                    );
                    if reached.is_empty() && publish {
                        self.advise_no_consumers(registry, &part, message);
                    }
                    reached
                }
            };
            for queue in reached {
                if !route.iter().any(|q| q.same_queue(&queue)) {
                    route.push(queue);
                }
            }
        }
        Ok(route)
    }

    /// Whether the queues `destination` names (each queue part of a composite) exist or may
    /// be created within the destination limits; asked where a client names a destination
    /// before it uses it (an AMQP producer link), so that the refusal comes at once.
    pub fn check_room_for(&self, destination: &Destination) -> Result<(), CoreError> {
        let registry = self.registry.lock();
        composite_parts(destination)
            .iter()
            .filter(|part| part.kind == DestinationKind::Queue)
            .filter(|part| !DestinationFilter::is_pattern(&part.name))
            .try_for_each(|part| self.room_for_queue(&registry, &part.name))
    }

    /// Refuses a queue that does not exist yet when one more would pass `[destinations]
    /// max_destinations` or the `max_destinations` of its policy. Only queues a client asks
    /// for go through here: recovered and dead-letter queues are never refused, but count.
    pub(super) fn room_for_queue(&self, registry: &Registry, name: &str) -> Result<(), CoreError> {
        if registry.queues.contains_key(name) {
            return Ok(());
        }
        let refused = |limit, scope| CoreError::TooManyDestinations {
            destination: format!("queue://{name}"),
            limit,
            scope,
        };
        if let Some(limit) = self.settings.max_destinations {
            if registry.queues.len() >= limit {
                return Err(refused(limit, "by [destinations] max_destinations".to_owned()));
            }
        }
        let policy = self.settings.policies.for_destination(&Destination::queue(name));
        if let Some(cap) = &policy.max_destinations {
            // A scan, as ActiveMQ's: it runs only when a new queue is created under a policy
            // with a limit, which is rare next to sends.
            let matching = registry.queues.keys().filter(|queue| cap.pattern.matches(queue));
            if matching.count() >= cap.max {
                let scope = format!("for the policy queue = \"{}\"", cap.pattern.as_str());
                return Err(refused(cap.max, scope));
            }
        }
        Ok(())
    }

    /// Declares a queue destination to the store when it is first used (within the
    /// destination limits, see [`Core::check_room_for`]).
    pub(super) fn declare_queue(
        &self,
        registry: &mut Registry,
        name: &Arc<str>,
    ) -> Result<QueueHandle, CoreError> {
        self.room_for_queue(registry, name)?;
        let (handle, created) = registry.queue(name, &self.factory)?;
        if created {
            self.advise_queue_created(registry, name);
            // Not awaited: a later unit (an add) is applied after it, and a queue lost in a
            // crash before any message reached it is harmless.
            drop(self.store.submit(UnitOfWork::with(Operation::AddDestination(
                Destination::queue(name.clone()),
            ))));
        }
        Ok(handle)
    }
}
