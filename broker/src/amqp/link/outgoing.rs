//! Consumer links (the client's receivers): attaching a consumer, pumping deliveries within
//! link credit and the session window, drains, and the client's dispositions.

use std::collections::VecDeque;
use std::sync::Arc;

use bytes::Bytes;
use protocol::amqp::ReceiverSettleMode;
use protocol::amqp::{
    condition, split_transfer, AmqpError, AmqpFrame, Attach, DeliveryState, Disposition,
    ExpiryPolicy, Role, SenderSettleMode, Source, TerminusDurability, Transfer,
};
use store::{DestinationKind, SubscriptionKey};

use crate::core::selector::Selector;
use crate::core::{AckMode, ConsumerSpec, CoreError, Delivery, SubscribeRequest};
use crate::security::Action;
use crate::session::{Settle, Settled};

use super::{
    has_capability, link_error, link_flow, mapping, selector_of, Connection, Event, Fatal, Link,
    Outgoing, Unsettled, DRAIN_GRACE,
};

impl Connection {
    /// The client's receiver: a consumer.
    pub(in crate::amqp) fn attach_outgoing(
        &mut self,
        channel: u16,
        attach: &Attach,
    ) -> Result<(), AmqpError> {
        let Some(source) = &attach.source else {
            return Err(link_error(condition::INVALID_FIELD, "the attach has no source"));
        };
        let mut source: Source = source.clone();
        let destination = if source.dynamic() {
            let topic = has_capability(source.capabilities.as_deref(), "temporary-topic");
            let destination = self.dynamic(topic)?;
            source.address = Some(destination.to_string());
            destination
        } else {
            let address = source
                .address
                .as_deref()
                .ok_or_else(|| link_error(condition::INVALID_FIELD, "the source has no address"))?;
            mapping::destination_of(address, source.capabilities.as_deref(), None)
                .map_err(|e| link_error(condition::INVALID_FIELD, e.to_string()))?
        };
        self.authorize(Action::Read, &destination)?;
        let selector = selector_of(source.filter.as_ref())
            .map(|text| {
                Selector::parse(&text).map(Arc::new).map_err(|e| {
                    link_error(condition::INVALID_FIELD, format!("selector `{text}`: {e}"))
                })
            })
            .transpose()?;
        let durable = if source.durable() != TerminusDurability::None
            && source.expiry_policy() == ExpiryPolicy::Never
        {
            if destination.kind != DestinationKind::Topic {
                return Err(link_error(
                    condition::NOT_ALLOWED,
                    "durable subscriptions are for topics (add the `topic` capability or a topic:// address)",
                ));
            }
            let Some(client_id) = self.client.client_id().cloned() else {
                return Err(link_error(
                    condition::INVALID_FIELD,
                    "a durable subscription needs the connection's container id",
                ));
            };
            Some(SubscriptionKey { client_id, name: attach.name.as_str().into() })
        } else {
            None
        };
        let core = self.context.core.clone();
        let consumer = core.next_consumer_id();
        let request = SubscribeRequest {
            destination,
            spec: ConsumerSpec {
                id: consumer,
                // Nothing until the client grants credit.
                prefetch: 0,
                ack_mode: AckMode::ClientIndividual,
                exclusive: false,
                priority: 0,
                sink: self.client.delivery_sink(),
                selector,
                // AMQP clients do not count redeliveries: the broker does.
                counts_redeliveries: true,
            },
            durable: durable.clone(),
            retroactive: false,
            no_local: false,
            connection: self.client.connection(),
        };
        self.client.subscribe(request).map_err(|e| {
            let condition = match e {
                CoreError::DurableInUse { .. } => condition::RESOURCE_LOCKED,
                CoreError::NoSuchTemporary(_) => condition::NOT_FOUND,
                CoreError::TooManyDestinations { .. } => condition::RESOURCE_LIMIT_EXCEEDED,
                _ => condition::INTERNAL_ERROR,
            };
            link_error(condition, e.to_string())
        })?;
        let settled = attach.snd_settle_mode() == SenderSettleMode::Settled;
        let mut ours = Attach::new(attach.name.clone(), attach.handle, Role::Sender);
        ours.source = Some(source);
        ours.target = attach.target.clone();
        ours.snd_settle_mode =
            Some(if settled { SenderSettleMode::Settled } else { SenderSettleMode::Unsettled });
        ours.rcv_settle_mode = Some(ReceiverSettleMode::First);
        ours.initial_delivery_count = Some(0);
        self.send_frame(AmqpFrame::new(channel, ours));
        let outgoing = Outgoing {
            consumer,
            settled,
            credit: 0,
            delivery_count: 0,
            drain: false,
            drain_scheduled: false,
            buffered: VecDeque::new(),
            unsettled: 0,
            prefetch: 0,
            durable,
        };
        self.consumers.insert(consumer, (channel, attach.handle));
        if let Some(session) = self.sessions.get_mut(&channel) {
            session.links.insert(attach.handle, Link::Outgoing(outgoing));
        }
        Ok(())
    }

    /// A delivery from the core: queued on its link and sent when credit allows.
    pub(in crate::amqp) fn deliver(&mut self, delivery: Delivery) {
        let Some(&(channel, handle)) = self.consumers.get(&delivery.consumer) else { return };
        let Some(session) = self.sessions.get_mut(&channel) else { return };
        let Some(Link::Outgoing(out)) = session.links.get_mut(&handle) else { return };
        out.buffered.push_back(delivery);
        self.pump(channel);
    }

    /// Sends what the session's consumer links have credit (and the session window) for.
    pub(in crate::amqp) fn pump(&mut self, channel: u16) {
        let core = self.context.core.clone();
        let max_frame = self.codec.peer_max_frame_size();
        let depth = self.codec.limits().max_nesting_depth;
        let Some(session) = self.sessions.get_mut(&channel) else { return };
        let mut frames = Vec::new();
        let mut drains = Vec::new();
        for (&handle, link) in session.links.iter_mut() {
            let Link::Outgoing(out) = link else { continue };
            // A delivery goes when the window has room for its first frame: a peer with a
            // window smaller than a large message could never receive it otherwise.
            while out.credit > 0 && session.remote_incoming_window > 0 {
                let Some(delivery) = out.buffered.pop_front() else { break };
                let amqp = mapping::to_amqp(
                    &delivery.message,
                    delivery.delivery_count.saturating_sub(1),
                    depth,
                );
                let payload = match amqp.to_bytes() {
                    Ok(payload) => payload,
                    Err(error) => {
                        tracing::error!(%error, id = %delivery.message.message_id, "message not encodable as AMQP; dead-lettered");
                        core.poison(
                            &delivery.queue,
                            out.consumer,
                            vec![delivery.message.id],
                            Some(error.to_string()),
                        );
                        continue;
                    }
                };
                let delivery_id = session.next_delivery_id;
                let transfer = Transfer {
                    handle,
                    delivery_id: Some(delivery_id),
                    delivery_tag: Some(Bytes::copy_from_slice(&delivery_id.to_be_bytes())),
                    message_format: Some(0),
                    settled: Some(out.settled),
                    ..Transfer::default()
                };
                let split = match split_transfer(channel, &transfer, payload, max_frame) {
                    Ok(split) => split,
                    Err(error) => {
                        tracing::error!(%error, "delivery cannot be framed");
                        core.release(&delivery.queue, out.consumer, vec![delivery.message.id]);
                        continue;
                    }
                };
                session.next_delivery_id = session.next_delivery_id.wrapping_add(1);
                let count = u32::try_from(split.len()).unwrap_or(u32::MAX);
                session.next_outgoing_id = session.next_outgoing_id.wrapping_add(count);
                session.remote_incoming_window =
                    session.remote_incoming_window.saturating_sub(count);
                frames.extend(split);
                out.credit -= 1;
                out.delivery_count = out.delivery_count.wrapping_add(1);
                if out.settled {
                    update_prefetch(&core, out);
                    core.ack_now(&delivery.queue, out.consumer, vec![delivery.message.id]);
                } else {
                    out.unsettled += 1;
                    session.unsettled.insert(
                        delivery_id,
                        Unsettled {
                            handle,
                            queue: delivery.queue,
                            message: delivery.message,
                            consumer: out.consumer,
                        },
                    );
                }
            }
            if out.drain && out.credit > 0 && out.buffered.is_empty() && !out.drain_scheduled {
                out.drain_scheduled = true;
                drains.push(handle);
            }
        }
        for frame in frames {
            self.send_frame(frame);
        }
        for handle in drains {
            self.pending.push(Box::pin(async move {
                tokio::time::sleep(DRAIN_GRACE).await;
                Event::DrainDue { channel, handle }
            }));
        }
    }

    /// A drain's grace period passed: the credit left is used up and the client told so.
    pub(in crate::amqp) fn drained(&mut self, channel: u16, handle: u32) {
        self.pump(channel);
        let core = self.context.core.clone();
        let Some(session) = self.sessions.get_mut(&channel) else { return };
        let Some(Link::Outgoing(out)) = session.links.get_mut(&handle) else { return };
        out.drain_scheduled = false;
        if !out.drain {
            return;
        }
        out.delivery_count = out.delivery_count.wrapping_add(out.credit);
        out.credit = 0;
        update_prefetch(&core, out);
        let count = out.delivery_count;
        let frame = link_flow(session, handle, count, 0, true);
        self.send_frame(AmqpFrame::new(channel, frame));
    }

    /// The client settles or gives an outcome for our deliveries.
    pub(in crate::amqp) fn disposition(
        &mut self,
        channel: u16,
        disposition: Disposition,
    ) -> Result<(), Fatal> {
        if disposition.role == Role::Sender {
            // The client settling its own transfers: we settled them already.
            return Ok(());
        }
        let core = self.context.core.clone();
        let session = self.session(channel)?;
        let (first, last) = (disposition.first, disposition.last());
        let ids: Vec<u32> =
            session.unsettled.range(first..=last.max(first)).map(|(id, _)| *id).collect();
        let mut done = Vec::with_capacity(ids.len());
        for id in ids {
            let Some(entry) = session.unsettled.remove(&id) else { continue };
            if let Some(Link::Outgoing(out)) = session.links.get_mut(&entry.handle) {
                out.unsettled = out.unsettled.saturating_sub(1);
                update_prefetch(&core, out);
            }
            done.push(entry);
        }
        let state = disposition.state.clone();
        for entry in done {
            let settled = Settled::of([(entry.queue, entry.message)]);
            match &state {
                Some(DeliveryState::Transactional(ts)) => {
                    if !self.client.has_transaction(&ts.txn_id) {
                        return Err(Fatal::close(
                            protocol::amqp::transactions::condition::UNKNOWN_ID,
                            "a disposition names a transaction that is not declared",
                        ));
                    }
                    match ts.outcome.as_deref() {
                        Some(DeliveryState::Accepted) | None => {
                            self.client
                                .ack_in_transaction(&ts.txn_id, entry.consumer, &settled)
                                .map_err(|e| {
                                    Fatal::close(condition::INTERNAL_ERROR, e.to_string())
                                })?;
                        }
                        Some(other) => {
                            self.client.settle(entry.consumer, settled, outcome_of(Some(other)))
                        }
                    }
                }
                other => self.client.settle(entry.consumer, settled, outcome_of(other.as_ref())),
            }
        }
        if !disposition.settled() {
            let reply = Disposition {
                role: Role::Sender,
                first,
                last: disposition.last,
                settled: Some(true),
                state: disposition.state,
                batchable: None,
            };
            self.send_frame(AmqpFrame::new(channel, reply));
        }
        self.pump(channel);
        Ok(())
    }
}

/// How a consumer's outcome settles its message: accepted → acknowledged; released (or
/// modified without delivery-failed) → back, not counted; modified with delivery-failed →
/// back, counted as a redelivery; undeliverable-here or rejected → dead-lettered. A
/// settlement without an outcome counts as accepted.
pub(super) fn outcome_of(state: Option<&DeliveryState>) -> Settle {
    match state {
        None | Some(DeliveryState::Accepted) => Settle::Ack,
        Some(DeliveryState::Released) => Settle::Release,
        Some(DeliveryState::Rejected(rejected)) => {
            let cause = rejected.error.as_ref().map(|e| {
                format!(
                    "{}: {}",
                    e.condition,
                    e.description.as_deref().unwrap_or("rejected by the AMQP consumer")
                )
            });
            Settle::Poison(cause.or_else(|| Some("rejected by the AMQP consumer".to_owned())))
        }
        Some(DeliveryState::Modified(modified)) if modified.undeliverable_here() => {
            Settle::Poison(Some("modified: undeliverable-here".to_owned()))
        }
        Some(DeliveryState::Modified(modified)) if modified.delivery_failed() => Settle::Nack,
        Some(DeliveryState::Modified(_)) => Settle::Release,
        // Received, declared, nested transactional: not outcomes for a consumer; leave the
        // message with the consumer, as ActiveMQ does with states it does not act on.
        Some(_) => Settle::Release,
    }
}

/// Sets the consumer's prefetch to what the client can take: its unsettled deliveries and
/// the credit left. Called before the acknowledgement that frees the room, so that the
/// queue never sees a prefetch above the credit.
pub(super) fn update_prefetch(core: &crate::core::Core, out: &mut Outgoing) {
    let want = out.unsettled.saturating_add(out.credit);
    if want != out.prefetch {
        out.prefetch = want;
        core.set_prefetch(out.consumer, want);
    }
}
