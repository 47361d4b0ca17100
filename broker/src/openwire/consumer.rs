//! Consumers: ConsumerInfo and its removal, durable subscriptions' removal, acknowledgements,
//! pulls of prefetch-0 consumers, queue browsers, slow-consumer notices and deliveries.

use std::sync::Arc;
use std::time::Duration;

use protocol::openwire::{self as ow, ack_type, Command, DataStructure, Throwable};
use store::{DestinationKind, Message, SubscriptionKey};

use crate::core::selector::Selector;
use crate::core::{AckMode, ConsumerNotice, ConsumerSpec, Delivery, SubscribeRequest};
use crate::security::Action;
use crate::session::{Delivered, Settle};

use super::{
    exception_response, mapping, response, Connection, Flow, OwConsumer, Refusal,
    INVALID_CLIENT_ID, INVALID_DESTINATION, INVALID_SELECTOR, JMS_EXCEPTION,
};

impl Connection {
    pub(super) fn add_consumer(&mut self, info: &ow::ConsumerInfo) -> Result<(), Refusal> {
        let consumer_id = info
            .consumer_id
            .clone()
            .ok_or_else(|| Refusal::new(JMS_EXCEPTION, "no consumer id"))?;
        let selector = Selector::parse_optional(info.selector.as_deref())
            .map_err(|e| Refusal::new(INVALID_SELECTOR, e.to_string()))?
            .map(Arc::new);
        if self.consumers.contains_key(&consumer_id) {
            return Err(Refusal::new(JMS_EXCEPTION, "this consumer id is already in use"));
        }
        let destination =
            info.destination.as_ref().map(mapping::destination_from).ok_or_else(|| {
                Refusal::new(INVALID_DESTINATION, "the consumer has no destination")
            })?;
        self.authorize(Action::Read, &destination)?;
        if info.browser {
            if destination.kind != DestinationKind::Queue {
                return Err(Refusal::new(INVALID_DESTINATION, "only queues can be browsed"));
            }
            let snapshot = self.context.core.browse(&destination.name, selector);
            self.browses.push(Box::pin(async move { (consumer_id, snapshot.await) }));
            return Ok(());
        }
        let durable = match &info.subscription_name {
            Some(name) if !name.is_empty() => {
                if destination.kind != DestinationKind::Topic {
                    return Err(Refusal::new(
                        INVALID_DESTINATION,
                        "durable subscriptions are for topics",
                    ));
                }
                let client_id = self.session.client_id().cloned().ok_or_else(|| {
                    Refusal::new(INVALID_CLIENT_ID, "a durable subscription needs a client id")
                })?;
                Some(SubscriptionKey { client_id, name: name.as_str().into() })
            }
            _ => None,
        };
        let core = self.context.core.clone();
        let requested = u32::try_from(info.prefetch_size.max(0)).unwrap_or(0);
        let prefetch = core.prefetch_for(&destination, durable.is_some(), Some(requested));
        let prefetch = i32::try_from(prefetch).unwrap_or(i32::MAX);
        tracing::debug!(peer = %self.peer, prefetch, "consumer added");
        let consumer = core.next_consumer_id();
        self.session.subscribe(SubscribeRequest {
            destination,
            spec: ConsumerSpec {
                id: consumer,
                prefetch: prefetch as u32,
                ack_mode: AckMode::ClientIndividual,
                exclusive: info.exclusive,
                priority: info.priority,
                sink: self.session.delivery_sink(),
                selector,
                // The JMS client counts redeliveries itself and sends a poison ack.
                counts_redeliveries: false,
            },
            durable,
            retroactive: info.retroactive,
            no_local: info.no_local,
            connection: self.session.connection(),
        })?;
        self.by_core.insert(consumer, consumer_id.clone());
        self.consumers.insert(
            consumer_id,
            OwConsumer {
                core: consumer,
                prefetch,
                delivered: Delivered::default(),
                pull_generation: 0,
            },
        );
        Ok(())
    }

    /// Closes a consumer. `last_delivered` is the broker sequence id of the last message the
    /// client handed to the application (-1: none; -2: unknown): later ones were only
    /// prefetched and go back not marked redelivered, as with ActiveMQ.
    pub(super) fn remove_consumer(&mut self, id: &ow::ConsumerId, last_delivered: i64) {
        if let Some(consumer) = self.consumers.remove(id) {
            self.by_core.remove(&consumer.core);
            if last_delivered >= -1 {
                let seen = consumer
                    .delivered
                    .messages()
                    .map(|m| m.id)
                    .filter(|id| id.0 as i64 <= last_delivered)
                    .collect();
                self.session.unsubscribe_seen_only(consumer.core, seen);
            } else {
                self.session.unsubscribe(consumer.core);
            }
        }
    }

    pub(super) fn remove(&mut self, object: Option<&DataStructure>, last_delivered: i64) {
        match object {
            Some(DataStructure::ConsumerId(id)) => self.remove_consumer(id, last_delivered),
            Some(DataStructure::ProducerId(id)) => {
                self.producers.remove(id);
                self.producer_registrations.remove(id);
            }
            Some(DataStructure::SessionId(session)) => {
                let ids: Vec<ow::ConsumerId> = self
                    .consumers
                    .keys()
                    .filter(|c| {
                        c.connection_id == session.connection_id && c.session_id == session.value
                    })
                    .cloned()
                    .collect();
                for id in ids {
                    self.remove_consumer(&id, last_delivered);
                }
                self.producers.retain(|p, _| {
                    !(p.connection_id == session.connection_id && p.session_id == session.value)
                });
                self.producer_registrations.retain(|p, _| {
                    !(p.connection_id == session.connection_id && p.session_id == session.value)
                });
            }
            Some(DataStructure::ConnectionId(_)) => {
                let ids: Vec<ow::ConsumerId> = self.consumers.keys().cloned().collect();
                for id in ids {
                    self.remove_consumer(&id, last_delivered);
                }
                self.release();
            }
            _ => {}
        }
    }

    pub(super) fn remove_subscription(
        &mut self,
        id: i32,
        required: bool,
        info: &ow::RemoveSubscriptionInfo,
    ) {
        let client_id = info
            .client_id
            .as_deref()
            .filter(|c| !c.is_empty())
            .map(Arc::from)
            .or_else(|| self.session.client_id().cloned());
        let (Some(client_id), Some(name)) = (client_id, info.subscription_name.as_deref()) else {
            self.answer(
                id,
                required,
                Err(Refusal::new(INVALID_CLIENT_ID, "unsubscribing needs a client id and a name")),
            );
            return;
        };
        let key = SubscriptionKey { client_id, name: name.into() };
        match self.context.core.remove_durable(&key) {
            Ok(completion) => {
                self.pending.push_back(Box::pin(async move {
                    match completion.await {
                        Ok(()) => required.then(|| response(id)),
                        Err(error) => required.then(|| {
                            exception_response(
                                id,
                                Refusal::new(
                                    JMS_EXCEPTION,
                                    format!("subscription not removed: {error}"),
                                ),
                            )
                        }),
                    }
                }));
            }
            Err(error) => self.answer(id, required, Err(error.into())),
        }
    }

    pub(super) fn ack(&mut self, ack: &ow::MessageAck) -> Result<(), Refusal> {
        let Some(consumer_id) = &ack.consumer_id else {
            return Err(Refusal::new(JMS_EXCEPTION, "acknowledgement without a consumer id"));
        };
        let kind = ack.ack_type;
        if kind == ack_type::REDELIVERED {
            // About to be redelivered by the client itself: nothing to do here.
            return Ok(());
        }
        let Some(consumer) = self.consumers.get_mut(consumer_id) else {
            return Ok(()); // Closed meanwhile: its messages went back.
        };
        let Some(last) = ack.last_message_id.as_ref().or(ack.first_message_id.as_ref()) else {
            return Err(Refusal::new(JMS_EXCEPTION, "acknowledgement without a message id"));
        };
        let matches = |m: &Message| m.id.0 as i64 == last.broker_sequence_id;
        let Some(position) = consumer.delivered.position(matches) else {
            tracing::debug!(peer = %self.peer, ?last, "acknowledgement of a message not awaiting one");
            return Ok(());
        };
        if kind == ack_type::DELIVERED {
            // Handed to the application up to `last`; the standard ack comes later. The
            // client-acknowledge and transacted consumers of the ActiveMQ client send these to
            // open their prefetch window, and stall without.
            let consumed = consumer.delivered.up_to(position);
            self.session.settle(consumer.core, consumed, Settle::Consumed);
            return Ok(());
        }
        let settled = if kind == ack_type::INDIVIDUAL {
            consumer.delivered.take_only(position)
        } else {
            consumer.delivered.take_up_to(position)
        };
        let core_consumer = consumer.core;
        if kind == ack_type::POISON {
            // The client's redelivery policy gave up on them (it sends this outside any
            // transaction, after rolling back): to the dead-letter queue.
            let cause = ack.poison_cause.as_ref().map(|cause| match &cause.message {
                Some(message) => format!("{}: {message}", cause.class_name),
                None => cause.class_name.clone(),
            });
            tracing::debug!(peer = %self.peer, ?cause, "poison ack");
            self.session.settle(core_consumer, settled, Settle::Poison(cause));
            return Ok(());
        }
        // Begins the transaction if the client has not yet (it begins lazily), or refuses XA.
        if self.transaction_of(ack.transaction_id.as_ref())?.is_some() {
            if let Some(ow::TransactionId::Local(local)) = &ack.transaction_id {
                self.session.ack_in_transaction(local, core_consumer, &settled)?;
                let acks = self.transaction_acks.entry(local.clone()).or_default();
                for (queue, messages) in settled.into_groups() {
                    for message in messages {
                        acks.push((consumer_id.clone(), queue.clone(), message));
                    }
                }
            }
            return Ok(());
        }
        self.session.settle(core_consumer, settled, Settle::Ack);
        Ok(())
    }

    /// The broker aborts a slow consumer as ActiveMQ's `AbortSlowConsumerStrategy` does: a
    /// ConsumerControl with `close` asks the JMS client to close the consumer (it then sends
    /// the consumer's RemoveInfo, which releases it here); with `abort_connection`, a
    /// ConnectionError tells why and the connection closes.
    pub(super) fn notice(&mut self, notice: ConsumerNotice) -> Flow {
        let ConsumerNotice::Abort { consumer, destination, close_connection, reason } = notice;
        let Some(id) = self.by_core.get(&consumer).cloned() else { return Flow::Continue };
        tracing::info!(peer = %self.peer, consumer = %id.value, %reason, close_connection,
            "aborting slow consumer");
        if close_connection {
            let reason = format!("{reason}: {}:{}:{}", id.connection_id, id.session_id, id.value);
            self.write(&Command::ConnectionError(Box::new(ow::ConnectionError {
                exception: Some(Throwable::new(
                    "org.apache.activemq.transport.InactivityIOException",
                    reason,
                )),
                ..Default::default()
            })));
            return Flow::Close;
        }
        self.write(&Command::ConsumerControl(Box::new(ow::ConsumerControl {
            destination: Some(mapping::destination_to(&destination)),
            close: true,
            consumer_id: Some(id),
            ..Default::default()
        })));
        Flow::Continue
    }

    /// A client's ConsumerControl changes a consumer's prefetch. The failover transport
    /// relies on it: it restores consumers with prefetch 0 while the client still clears what
    /// the lost connection had dispatched, and then restores each prefetch this way, so that
    /// nothing is dispatched into a consumer that is about to discard it.
    pub(super) fn consumer_control(&mut self, control: &ow::ConsumerControl) {
        let Some(id) = &control.consumer_id else { return };
        let Some(consumer) = self.consumers.get_mut(id) else { return };
        if control.close || control.prefetch == consumer.prefetch || control.prefetch < 0 {
            return;
        }
        tracing::debug!(peer = %self.peer, prefetch = control.prefetch, "consumer prefetch changed");
        consumer.prefetch = control.prefetch;
        // A pull in progress ends with the change (as the client no longer waits for it).
        consumer.pull_generation += 1;
        self.context.core.set_prefetch(consumer.core, control.prefetch as u32);
    }

    pub(super) fn pull(&mut self, pull: &ow::MessagePull) {
        let Some(id) = &pull.consumer_id else { return };
        let Some(consumer) = self.consumers.get_mut(id) else { return };
        if consumer.prefetch != 0 {
            return;
        }
        consumer.pull_generation += 1;
        let generation = consumer.pull_generation;
        let core = self.context.core.clone();
        core.pull(consumer.core);
        let id = id.clone();
        match pull.timeout {
            0 => {} // Waits for a message as long as it takes.
            timeout if timeout < 0 => {
                let ended = core.end_pull(consumer.core);
                self.pulls.push(Box::pin(async move { (id, generation, Some(ended.await)) }));
            }
            timeout => {
                let wait = Duration::from_millis(timeout as u64);
                self.pulls.push(Box::pin(async move {
                    tokio::time::sleep(wait).await;
                    (id, generation, None)
                }));
            }
        }
    }

    pub(super) fn pull_event(&mut self, id: ow::ConsumerId, generation: u64, ended: Option<bool>) {
        let Some(consumer) = self.consumers.get(&id) else { return };
        if consumer.pull_generation != generation {
            return;
        }
        match ended {
            None => {
                let ended = self.context.core.end_pull(consumer.core);
                self.pulls.push(Box::pin(async move { (id, generation, Some(ended.await)) }));
            }
            Some(true) => {
                let none = Command::MessageDispatch(Box::new(ow::MessageDispatch {
                    consumer_id: Some(id),
                    ..Default::default()
                }));
                self.write(&none);
            }
            Some(false) => {}
        }
    }

    /// Sends a queue browser its snapshot, then the empty dispatch that ends the browse. The
    /// browser is not a consumer of the queue: its acknowledgements change nothing.
    pub(super) fn browsed(&mut self, consumer: ow::ConsumerId, messages: Vec<Arc<Message>>) {
        for message in messages {
            let message = mapping::message_to(&message, 0);
            self.write(&Command::MessageDispatch(Box::new(ow::MessageDispatch {
                consumer_id: Some(consumer.clone()),
                destination: message.destination.clone(),
                message: Some(Box::new(message)),
                ..Default::default()
            })));
        }
        self.write(&Command::MessageDispatch(Box::new(ow::MessageDispatch {
            consumer_id: Some(consumer),
            ..Default::default()
        })));
    }

    pub(super) fn deliver(&mut self, delivery: Delivery) {
        let Some(id) = self.by_core.get(&delivery.consumer) else { return };
        let Some(consumer) = self.consumers.get_mut(id) else { return };
        let mut message = mapping::message_to(
            &delivery.message,
            delivery.delivery_count.saturating_sub(1) as i32,
        );
        // A copy routed elsewhere than where it was sent (a composite's target, a part of
        // `A,B`, a virtual topic's consumer queue): the client sees where it was routed as
        // JMSDestination and the sent-to destination as the original one, as with ActiveMQ.
        let shown = self.context.core.shown_destination(delivery.queue.key(), &delivery.message);
        if let Some(shown) = shown {
            message.original_destination = message.destination.take();
            message.destination = Some(mapping::destination_to(&shown));
        }
        let dispatch = Command::MessageDispatch(Box::new(ow::MessageDispatch {
            consumer_id: Some(id.clone()),
            destination: message.destination.clone(),
            redelivery_counter: message.redelivery_counter,
            message: Some(Box::new(message)),
            ..Default::default()
        }));
        consumer.delivered.push(delivery.queue, delivery.message);
        self.write(&dispatch);
    }
}
