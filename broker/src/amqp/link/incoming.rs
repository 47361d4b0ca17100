//! Producer links (the client's senders): attaching a producer, transfers received (held by
//! producer flow control or handed to the core), their settlement and link credit.

use std::sync::Arc;

use bytes::Bytes;
use protocol::amqp::ReceiverSettleMode;
use protocol::amqp::{
    condition, AmqpError, AmqpFrame, Assembled, Attach, AttachTarget, DeliveryAssembler,
    DeliveryState, Message as Amqp, Rejected, Role, Transfer,
};
use store::{Destination, Message};

use crate::core::{held_sends_refusal, CoreError, SendAdmission};
use crate::security::Action;

use super::{
    has_capability, link_error, link_flow, mapping, refusal, settled_disposition, Connection,
    Event, Fatal, HeldTransfer, Incoming, Link, PRODUCER_CREDIT,
};

impl Connection {
    /// The client's sender: a producer or the coordinator.
    pub(in crate::amqp) fn attach_incoming(
        &mut self,
        channel: u16,
        attach: &Attach,
    ) -> Result<(), AmqpError> {
        let (destination, coordinator, target) = match &attach.target {
            None => return Err(link_error(condition::INVALID_FIELD, "the attach has no target")),
            Some(AttachTarget::Coordinator(c)) => {
                (None, true, AttachTarget::Coordinator(c.clone()))
            }
            Some(AttachTarget::Node(target)) => {
                let mut target = target.clone();
                let destination = if target.dynamic.unwrap_or(false) {
                    let topic = has_capability(target.capabilities.as_deref(), "temporary-topic");
                    let destination = self.dynamic(topic)?;
                    target.address = Some(destination.to_string());
                    Some(destination)
                } else {
                    match target.address.as_deref() {
                        None => None,
                        Some(address) => Some(
                            mapping::destination_of(address, target.capabilities.as_deref(), None)
                                .map_err(|e| link_error(condition::INVALID_FIELD, e.to_string()))?,
                        ),
                    }
                };
                if let Some(destination) = &destination {
                    self.authorize(Action::Write, destination)?;
                    // The queue is created by the first transfer; a link to one past the
                    // destination limits is refused now, while the client can still tell.
                    self.context.core.check_room_for(destination).map_err(|e| refusal(&e))?;
                }
                (destination, false, AttachTarget::Node(target))
            }
        };
        let mut ours = Attach::new(attach.name.clone(), attach.handle, Role::Receiver);
        ours.source = attach.source.clone();
        ours.target = Some(target);
        ours.snd_settle_mode = attach.snd_settle_mode;
        ours.rcv_settle_mode = Some(ReceiverSettleMode::First);
        ours.max_message_size = Some(self.max_message_size);
        self.send_frame(AmqpFrame::new(channel, ours));
        // A link to a node is a producer (an anonymous one without an address); the
        // coordinator's is not.
        let producer = (!coordinator).then(|| {
            let name = format!("{}:{channel}:{}", self.client.connection_name(), attach.handle);
            self.context.core.register_producer(
                self.client.connection(),
                destination.as_ref(),
                &name,
            )
        });
        let incoming = Incoming {
            producer,
            destination,
            coordinator,
            assembler: DeliveryAssembler::new(self.max_message_size),
            credit: PRODUCER_CREDIT,
            delivery_count: attach.initial_delivery_count.unwrap_or(0),
            held: 0,
            storing: 0,
        };
        let flow = {
            let Some(session) = self.sessions.get_mut(&channel) else { return Ok(()) };
            let flow =
                link_flow(session, attach.handle, incoming.delivery_count, PRODUCER_CREDIT, false);
            session.links.insert(attach.handle, Link::Incoming(incoming));
            flow
        };
        self.send_frame(AmqpFrame::new(channel, flow));
        Ok(())
    }

    /// A transfer from the client: part of a message, or all of it.
    pub(in crate::amqp) fn transfer(
        &mut self,
        channel: u16,
        transfer: Transfer,
        payload: Bytes,
    ) -> Result<(), Fatal> {
        let session = self.session(channel)?;
        session.next_incoming_id = session.next_incoming_id.wrapping_add(1);
        let handle = transfer.handle;
        let Some(link) = session.links.get_mut(&handle) else {
            return Err(Fatal::close(
                condition::SESSION_UNATTACHED_HANDLE,
                format!("transfer on handle {handle}, which is not attached"),
            ));
        };
        let Link::Incoming(incoming) = link else {
            return Err(Fatal::close(
                condition::NOT_ALLOWED,
                format!("transfer on handle {handle}, a link on which the client receives"),
            ));
        };
        if !incoming.assembler.is_in_progress() {
            if incoming.credit == 0 {
                return self.detach_with(
                    channel,
                    handle,
                    link_error(
                        condition::LINK_TRANSFER_LIMIT_EXCEEDED,
                        "a transfer without link credit",
                    ),
                );
            }
            incoming.credit -= 1;
            incoming.delivery_count = incoming.delivery_count.wrapping_add(1);
        }
        let delivery = match incoming.assembler.push(transfer, payload) {
            Ok(Assembled::Complete(delivery)) => delivery,
            Ok(Assembled::Incomplete | Assembled::Aborted(_)) => return Ok(()),
            Err(error @ protocol::amqp::WireError::MessageTooLarge { .. }) => {
                return self.detach_with(
                    channel,
                    handle,
                    link_error(condition::LINK_MESSAGE_SIZE_EXCEEDED, error.to_string()),
                );
            }
            Err(error) => return Err(Fatal::close(condition::DECODE_ERROR, error.to_string())),
        };
        let coordinator = incoming.coordinator;
        let destination = incoming.destination.clone();
        let delivery_id =
            (!delivery.transfer.settled()).then_some(delivery.transfer.delivery_id).flatten();
        let depth = self.codec.limits().max_nesting_depth;
        let amqp = match Amqp::decode(&delivery.payload, depth) {
            Ok(amqp) => amqp,
            Err(error) => {
                self.settle_incoming(
                    channel,
                    handle,
                    delivery_id,
                    Err(link_error(condition::DECODE_ERROR, error.to_string())),
                );
                return Ok(());
            }
        };
        if coordinator {
            return self.coordinate(channel, handle, delivery_id, amqp);
        }
        self.receive(
            channel,
            handle,
            delivery_id,
            delivery.transfer.state,
            amqp,
            destination.as_ref(),
        );
        Ok(())
    }

    pub(in crate::amqp) fn receive(
        &mut self,
        channel: u16,
        handle: u32,
        delivery_id: Option<u32>,
        state: Option<DeliveryState>,
        amqp: Amqp,
        destination: Option<&Destination>,
    ) {
        let core = self.context.core.clone();
        let generated = self.client.next_message_id();
        let message = match mapping::from_amqp(amqp, core.next_message_id(), generated, destination)
        {
            Ok(message) => Arc::new(message),
            Err(error) => {
                self.settle_incoming(
                    channel,
                    handle,
                    delivery_id,
                    Err(link_error(condition::INVALID_FIELD, error.to_string())),
                );
                return;
            }
        };
        // An anonymous relay names the destination per message.
        if let Err(error) = self.authorize(Action::Write, &message.destination) {
            self.settle_incoming(channel, handle, delivery_id, Err(error));
            return;
        }
        if let Some(DeliveryState::Transactional(ts)) = state {
            let connection = self.client.connection();
            let result = match self.client.transaction(&ts.txn_id) {
                None => Err(link_error(
                    protocol::amqp::transactions::condition::UNKNOWN_ID,
                    "the transaction is not declared",
                )),
                Some(transaction) => core
                    .send(message, connection, Some(transaction))
                    .map(drop)
                    .map_err(|e| refusal(&e)),
            };
            if result.is_ok() {
                self.count_sent(channel, handle);
            }
            let state = match result {
                Ok(()) => DeliveryState::Transactional(protocol::amqp::TransactionalState {
                    txn_id: ts.txn_id,
                    outcome: Some(Box::new(DeliveryState::Accepted)),
                }),
                Err(error) => DeliveryState::Rejected(Rejected { error: Some(error) }),
            };
            if let Some(id) = delivery_id {
                self.send_frame(AmqpFrame::new(channel, settled_disposition(id, state)));
            }
            self.top_up(channel, handle);
            return;
        }
        let key = (channel, handle);
        let held = HeldTransfer { channel, handle, delivery_id };
        match self.held.admit(&core, self.client.connection(), key, held, message) {
            SendAdmission::Now(_, message) => self.submit(channel, handle, delivery_id, message),
            SendAdmission::Held { forced } => {
                // While a link has held messages it gets no more credit: the producer stops.
                if let Some(Some(Link::Incoming(incoming))) =
                    self.sessions.get_mut(&channel).map(|s| s.links.get_mut(&handle))
                {
                    incoming.held += 1;
                }
                if let Some(oldest) = forced {
                    self.admitted(oldest, Ok(()));
                }
            }
            SendAdmission::Refused(_) => {
                let why = held_sends_refusal();
                let error = link_error(condition::RESOURCE_LIMIT_EXCEEDED, why);
                self.settle_incoming(channel, handle, delivery_id, Err(error));
            }
        }
    }

    /// Counts a message the link's producer sent.
    fn count_sent(&self, channel: u16, handle: u32) {
        if let Some(Some(Link::Incoming(incoming))) =
            self.sessions.get(&channel).map(|s| s.links.get(&handle))
        {
            if let Some(producer) = &incoming.producer {
                producer.sent();
            }
        }
    }

    /// A held transfer's wait ended: sent now, or refused.
    pub(in crate::amqp) fn admitted(
        &mut self,
        (held, message): (HeldTransfer, Arc<Message>),
        room: Result<(), CoreError>,
    ) {
        let HeldTransfer { channel, handle, delivery_id } = held;
        if let Some(Some(Link::Incoming(incoming))) =
            self.sessions.get_mut(&channel).map(|s| s.links.get_mut(&handle))
        {
            incoming.held = incoming.held.saturating_sub(1);
        }
        match room {
            Ok(()) => self.submit(channel, handle, delivery_id, message),
            Err(error) => self.settle_incoming(channel, handle, delivery_id, Err(refusal(&error))),
        }
    }

    pub(in crate::amqp) fn submit(
        &mut self,
        channel: u16,
        handle: u32,
        delivery_id: Option<u32>,
        message: Arc<Message>,
    ) {
        let core = self.context.core.clone();
        let sent = core.send(message, self.client.connection(), None);
        if sent.is_ok() {
            self.count_sent(channel, handle);
        }
        match sent {
            Err(error) => self.settle_incoming(channel, handle, delivery_id, Err(refusal(&error))),
            Ok(completion) if delivery_id.is_some() => {
                if let Some(Some(Link::Incoming(incoming))) =
                    self.sessions.get_mut(&channel).map(|s| s.links.get_mut(&handle))
                {
                    incoming.storing += 1;
                }
                self.pending.push(Box::pin(async move {
                    let result = completion.await.map_err(|e| e.to_string());
                    Event::Stored { channel, handle, delivery_id, result }
                }));
            }
            Ok(_) => self.top_up(channel, handle),
        }
    }

    /// Answers an unsettled transfer (accepted, or rejected with `error`) and grants credit.
    pub(in crate::amqp) fn settle_incoming(
        &mut self,
        channel: u16,
        handle: u32,
        delivery_id: Option<u32>,
        result: Result<(), AmqpError>,
    ) {
        if let Some(id) = delivery_id {
            let state = match result {
                Ok(()) => DeliveryState::Accepted,
                Err(error) => DeliveryState::Rejected(Rejected { error: Some(error) }),
            };
            self.send_frame(AmqpFrame::new(channel, settled_disposition(id, state)));
        } else if let Err(error) = result {
            tracing::info!(peer = %self.peer, condition = %error.condition,
                description = error.description.as_deref().unwrap_or(""), "settled AMQP message refused");
        }
        self.top_up(channel, handle);
    }

    /// Grants a producer's link its credit again once half is used, unless flow control
    /// holds its messages (then the producer waits for credit, and the reader goes on).
    pub(in crate::amqp) fn top_up(&mut self, channel: u16, handle: u32) {
        let Some(session) = self.sessions.get_mut(&channel) else { return };
        let Some(Link::Incoming(incoming)) = session.links.get_mut(&handle) else { return };
        if incoming.held > 0 || incoming.credit + incoming.storing > PRODUCER_CREDIT / 2 {
            return;
        }
        incoming.credit = PRODUCER_CREDIT - incoming.storing.min(PRODUCER_CREDIT);
        let (count, credit) = (incoming.delivery_count, incoming.credit);
        let frame = link_flow(session, handle, count, credit, false);
        self.send_frame(AmqpFrame::new(channel, frame));
    }
}
