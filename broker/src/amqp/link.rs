//! Links: attach/detach, transfers from producers with the credit we grant them, deliveries
//! to consumers with the credit they grant us, dispositions, and the transaction
//! coordinator.
//!
//! A consumer's link credit becomes its prefetch in the core: the core may have as many of
//! its messages in flight as it has unsettled deliveries plus credit left. A delivery that
//! arrives when the credit is used up (a drain, a credit the client lowered) waits here
//! until the client grants more.

use crate::security::Action;
use crate::session::{Settle, Settled};
use std::collections::{BTreeMap, VecDeque};
use std::sync::Arc;
use std::time::Duration;

use bytes::Bytes;
use protocol::amqp::{
    condition, split_transfer, AmqpError, AmqpFrame, Assembled, Attach, AttachTarget, Body,
    Composite, DeliveryAssembler, DeliveryState, Detach, Disposition, ExpiryPolicy, Flow,
    Message as Amqp, Rejected, Role, SenderSettleMode, Source, TerminusDurability, Transfer, Value,
};
use protocol::amqp::{Declare, Declared, Discharge, ReceiverSettleMode};
use store::{Destination, DestinationKind, Message, SubscriptionKey};

use super::{mapping, Connection, Event, Fatal, Session, INCOMING_WINDOW};
use crate::core::selector::Selector;
use crate::core::{
    held_sends_refusal, AckMode, ConsumerId, ConsumerNotice, ConsumerSpec, CoreError, Delivery,
    QueueHandle, SendAdmission, SubscribeRequest,
};

/// The credit a producer's link gets, topped up as its messages are taken: ActiveMQ's
/// default AMQP producer credit.
const PRODUCER_CREDIT: u32 = 1000;
/// How long a drain waits for messages already on their way from the queues before it
/// gives back the rest of the credit.
const DRAIN_GRACE: Duration = Duration::from_millis(20);
/// The descriptor of the JMS selector filter (`apache.org:selector-filter:string`).
const SELECTOR_CODE: u64 = 0x0000_468C_0000_0004;
const SELECTOR_SYMBOL: &str = "apache.org:selector-filter:string";

/// A link of a session.
pub(super) enum Link {
    /// The client sends: a producer, or the transaction coordinator.
    Incoming(Incoming),
    /// The client receives: a consumer.
    Outgoing(Outgoing),
}

pub(super) struct Incoming {
    /// Where messages go; `None` for an anonymous relay (each message's `to`) and the
    /// coordinator.
    destination: Option<Destination>,
    coordinator: bool,
    assembler: DeliveryAssembler,
    /// Credit granted and not used.
    credit: u32,
    /// The client's delivery count as we know it.
    delivery_count: u32,
    /// Messages held by producer flow control: no credit is granted while there are any.
    held: u32,
    /// Unsettled messages waiting for the store.
    storing: u32,
}

pub(super) struct Outgoing {
    consumer: ConsumerId,
    /// Pre-settled deliveries (sender settle mode `settled`): acknowledged when sent.
    settled: bool,
    credit: u32,
    delivery_count: u32,
    drain: bool,
    drain_scheduled: bool,
    /// Deliveries from the core waiting for credit (or session window).
    buffered: VecDeque<Delivery>,
    /// Deliveries sent and not settled by the client.
    unsettled: u32,
    /// The prefetch the core has for the consumer.
    prefetch: u32,
    /// The durable subscription it consumes, removed when the link is closed.
    durable: Option<SubscriptionKey>,
}

/// A delivery of ours the client has not settled.
pub(super) struct Unsettled {
    handle: u32,
    queue: QueueHandle,
    message: Arc<Message>,
    consumer: ConsumerId,
}

/// A transfer held by producer flow control.
pub(super) struct HeldTransfer {
    channel: u16,
    handle: u32,
    /// The delivery to settle once sent; `None` when the client sent it settled.
    delivery_id: Option<u32>,
}

fn link_error(condition: &str, description: impl Into<String>) -> AmqpError {
    AmqpError::new(condition, description)
}

impl Connection {
    pub(super) fn attach(&mut self, channel: u16, attach: Attach) -> Result<(), Fatal> {
        let session = self.session(channel)?;
        if session.links.contains_key(&attach.handle) {
            return Err(Fatal::close(
                "amqp:session:handle-in-use",
                format!("handle {} is already attached", attach.handle),
            ));
        }
        let result = match attach.role {
            Role::Sender => self.attach_incoming(channel, &attach),
            Role::Receiver => self.attach_outgoing(channel, &attach),
        };
        if let Err(error) = result {
            // The spec's way to refuse a link: attach without the terminus, then detach.
            tracing::info!(peer = %self.peer, link = %attach.name, condition = %error.condition,
                description = error.description.as_deref().unwrap_or(""), "AMQP link refused");
            let role = if attach.role == Role::Sender { Role::Receiver } else { Role::Sender };
            let mut refused = Attach::new(attach.name.clone(), attach.handle, role);
            if role == Role::Sender {
                refused.initial_delivery_count = Some(0);
            }
            self.send_frame(AmqpFrame::new(channel, refused));
            if let Some(session) = self.sessions.get_mut(&channel) {
                session.detached_by_us.insert(attach.handle);
            }
            let detach = Detach { handle: attach.handle, closed: Some(true), error: Some(error) };
            self.send_frame(AmqpFrame::new(channel, detach));
        }
        Ok(())
    }

    /// Asks `[[authorization]]` whether this client may `action` `destination` (and create it,
    /// when it does not exist yet).
    fn authorize(&self, action: Action, destination: &Destination) -> Result<(), AmqpError> {
        self.client
            .authorize(action, destination)
            .map_err(|denied| link_error(condition::UNAUTHORIZED_ACCESS, denied.to_string()))
    }

    /// A temporary destination for a dynamic terminus, owned by this connection.
    fn dynamic(&mut self, topic: bool) -> Result<Destination, AmqpError> {
        let name = format!(
            "ID:{}-{}:{}",
            self.context.id_prefix,
            self.client.connection(),
            self.next_temporary
        );
        self.next_temporary += 1;
        let kind = if topic { DestinationKind::TempTopic } else { DestinationKind::TempQueue };
        let destination = Destination { kind, name: name.into() };
        self.client
            .authorize_creation(&destination)
            .map_err(|denied| link_error(condition::UNAUTHORIZED_ACCESS, denied.to_string()))?;
        self.context
            .core
            .create_temporary(destination.clone(), self.client.connection())
            .map_err(|e| link_error(condition::INTERNAL_ERROR, e.to_string()))?;
        Ok(destination)
    }

    /// The client's sender: a producer or the coordinator.
    fn attach_incoming(&mut self, channel: u16, attach: &Attach) -> Result<(), AmqpError> {
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
        let incoming = Incoming {
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

    /// The client's receiver: a consumer.
    fn attach_outgoing(&mut self, channel: u16, attach: &Attach) -> Result<(), AmqpError> {
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

    pub(super) fn detach(&mut self, channel: u16, detach: Detach) -> Result<(), Fatal> {
        let session = self.session(channel)?;
        if session.detached_by_us.remove(&detach.handle) {
            // The answer to our own detach: the handle is free again.
            return Ok(());
        }
        let Some(link) = session.links.remove(&detach.handle) else {
            return Err(Fatal::close(
                condition::SESSION_UNATTACHED_HANDLE,
                format!("detach of handle {}, which is not attached", detach.handle),
            ));
        };
        let mut unsettled = std::mem::take(&mut session.unsettled);
        let error = self.close_link(detach.handle, link, &mut unsettled, detach.closed());
        if let Some(session) = self.sessions.get_mut(&channel) {
            session.unsettled = unsettled;
        }
        let ours = Detach { handle: detach.handle, closed: detach.closed, error };
        self.send_frame(AmqpFrame::new(channel, ours));
        Ok(())
    }

    /// Ends a link: a consumer's unsettled messages go back (those never sent unmarked), and
    /// a closed durable subscription is removed. The error to detach with, if any.
    pub(super) fn close_link(
        &mut self,
        handle: u32,
        link: Link,
        unsettled: &mut BTreeMap<u32, Unsettled>,
        closed: bool,
    ) -> Option<AmqpError> {
        let Link::Outgoing(outgoing) = link else { return None };
        let core = self.context.core.clone();
        self.consumers.remove(&outgoing.consumer);
        let seen: Vec<_> =
            unsettled.values().filter(|u| u.handle == handle).map(|u| u.message.id).collect();
        unsettled.retain(|_, u| u.handle != handle);
        self.client.unsubscribe_seen_only(outgoing.consumer, seen);
        let key = outgoing.durable.filter(|_| closed)?;
        match core.remove_durable(&key) {
            Ok(completion) => {
                drop(completion);
                None
            }
            Err(error) => Some(link_error(condition::INTERNAL_ERROR, error.to_string())),
        }
    }

    pub(super) fn flow(&mut self, channel: u16, flow: Flow) -> Result<(), Fatal> {
        let core = self.context.core.clone();
        let session = self.session(channel)?;
        let next_incoming = flow.next_incoming_id.unwrap_or(1);
        session.remote_incoming_window =
            next_incoming.wrapping_add(flow.incoming_window).wrapping_sub(session.next_outgoing_id);
        let mut reply = None;
        if let Some(handle) = flow.handle {
            let Some(link) = session.links.get_mut(&handle) else {
                return Err(Fatal::close(
                    condition::SESSION_UNATTACHED_HANDLE,
                    format!("flow for handle {handle}, which is not attached"),
                ));
            };
            match link {
                Link::Outgoing(out) => {
                    let theirs = flow.delivery_count.unwrap_or(out.delivery_count);
                    let credit = flow.link_credit.unwrap_or(0);
                    out.credit = theirs.wrapping_add(credit).wrapping_sub(out.delivery_count);
                    out.drain = flow.drain();
                    update_prefetch(&core, out);
                    if flow.echo() {
                        reply = Some((handle, out.delivery_count, out.credit, out.drain));
                    }
                }
                Link::Incoming(incoming) => {
                    if flow.echo() {
                        reply = Some((handle, incoming.delivery_count, incoming.credit, false));
                    }
                }
            }
        }
        if let Some((handle, count, credit, drain)) = reply {
            let frame = link_flow(session, handle, count, credit, drain);
            self.send_frame(AmqpFrame::new(channel, frame));
        }
        self.pump(channel);
        Ok(())
    }

    /// A delivery from the core: queued on its link and sent when credit allows.
    pub(super) fn deliver(&mut self, delivery: Delivery) {
        let Some(&(channel, handle)) = self.consumers.get(&delivery.consumer) else { return };
        let Some(session) = self.sessions.get_mut(&channel) else { return };
        let Some(Link::Outgoing(out)) = session.links.get_mut(&handle) else { return };
        out.buffered.push_back(delivery);
        self.pump(channel);
    }

    /// Sends what the session's consumer links have credit (and the session window) for.
    fn pump(&mut self, channel: u16) {
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
    fn drained(&mut self, channel: u16, handle: u32) {
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
    pub(super) fn disposition(
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

    /// A transfer from the client: part of a message, or all of it.
    pub(super) fn transfer(
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

    /// The slow consumer strategy gave up on one of our consumers: its link is detached
    /// (closed) with the reason, or the whole connection closed when the policy says so. The
    /// condition is ActiveMQ's for a consumer the broker closes (its AmqpSender answers a
    /// ConsumerControl `close` with `amqp:internal-error`); the description says why. Its
    /// unsettled messages go back to their queues as with any detach, marked redelivered;
    /// a durable subscription stays (the client did not ask to end it).
    pub(super) fn aborted(&mut self, notice: ConsumerNotice) -> Result<bool, Fatal> {
        let ConsumerNotice::Abort { consumer, close_connection, reason, .. } = notice;
        let Some(&(channel, handle)) = self.consumers.get(&consumer) else {
            // Already detached by the client: nothing is left to abort.
            return Ok(true);
        };
        tracing::info!(peer = %self.peer, channel, handle, %reason, close_connection,
            "aborting slow AMQP consumer");
        if close_connection {
            return Err(Fatal::close(condition::INTERNAL_ERROR, reason));
        }
        let Some(session) = self.sessions.get_mut(&channel) else { return Ok(true) };
        let Some(link) = session.links.remove(&handle) else { return Ok(true) };
        // The client's detach that answers ours is expected.
        session.detached_by_us.insert(handle);
        let mut unsettled = std::mem::take(&mut session.unsettled);
        self.close_link(handle, link, &mut unsettled, false);
        if let Some(session) = self.sessions.get_mut(&channel) {
            session.unsettled = unsettled;
        }
        let error = link_error(condition::INTERNAL_ERROR, reason);
        let detach = Detach { handle, closed: Some(true), error: Some(error) };
        self.send_frame(AmqpFrame::new(channel, detach));
        Ok(true)
    }

    /// Detaches a link with an error (a link-level failure, not the connection's).
    fn detach_with(&mut self, channel: u16, handle: u32, error: AmqpError) -> Result<(), Fatal> {
        tracing::info!(peer = %self.peer, condition = %error.condition, "detaching AMQP link after an error");
        if let Some(session) = self.sessions.get_mut(&channel) {
            session.links.remove(&handle);
            session.detached_by_us.insert(handle);
        }
        let detach = Detach { handle, closed: Some(true), error: Some(error) };
        self.send_frame(AmqpFrame::new(channel, detach));
        Ok(())
    }

    fn receive(
        &mut self,
        channel: u16,
        handle: u32,
        delivery_id: Option<u32>,
        state: Option<DeliveryState>,
        amqp: Amqp,
        destination: Option<&Destination>,
    ) {
        let core = self.context.core.clone();
        let generated = format!(
            "ID:{}-{}:1:1:{}",
            self.context.id_prefix,
            self.client.connection(),
            self.next_message_seq
        );
        self.next_message_seq += 1;
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

    /// A held transfer's wait ended: sent now, or refused.
    pub(super) fn admitted(
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

    fn submit(
        &mut self,
        channel: u16,
        handle: u32,
        delivery_id: Option<u32>,
        message: Arc<Message>,
    ) {
        let core = self.context.core.clone();
        match core.send(message, self.client.connection(), None) {
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
    fn settle_incoming(
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
    fn top_up(&mut self, channel: u16, handle: u32) {
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

    /// Handles what the connection waited for.
    pub(super) fn event(&mut self, event: Event) -> Result<bool, Fatal> {
        match event {
            Event::Stored { channel, handle, delivery_id, result } => {
                if let Some(Some(Link::Incoming(incoming))) =
                    self.sessions.get_mut(&channel).map(|s| s.links.get_mut(&handle))
                {
                    incoming.storing = incoming.storing.saturating_sub(1);
                }
                let result = result.map_err(|e| {
                    tracing::error!(error = %e, "store refused a message");
                    link_error(condition::INTERNAL_ERROR, format!("message not stored: {e}"))
                });
                self.settle_incoming(channel, handle, delivery_id, result);
            }
            Event::Discharged { channel, delivery_id, result } => {
                if let Some(id) = delivery_id {
                    let state = match result {
                        Ok(()) => DeliveryState::Accepted,
                        Err(e) => DeliveryState::Rejected(Rejected {
                            error: Some(link_error(
                                protocol::amqp::transactions::condition::ROLLBACK,
                                e,
                            )),
                        }),
                    };
                    self.send_frame(AmqpFrame::new(channel, settled_disposition(id, state)));
                }
            }
            Event::DrainDue { channel, handle } => self.drained(channel, handle),
        }
        Ok(true)
    }

    /// A message to the transaction coordinator: declare or discharge.
    fn coordinate(
        &mut self,
        channel: u16,
        handle: u32,
        delivery_id: Option<u32>,
        amqp: Amqp,
    ) -> Result<(), Fatal> {
        let Body::Value(value) = amqp.body else {
            return Err(Fatal::close(
                condition::DECODE_ERROR,
                "a coordinator message without an amqp-value body",
            ));
        };
        let core = self.context.core.clone();
        if Declare::from_value(value.clone()).is_ok() {
            let id = Bytes::copy_from_slice(&self.next_transaction.to_be_bytes());
            self.next_transaction += 1;
            self.client.begin(id.clone());
            if let Some(delivery_id) = delivery_id {
                let state = DeliveryState::Declared(Declared { txn_id: id });
                self.send_frame(AmqpFrame::new(channel, settled_disposition(delivery_id, state)));
            }
        } else if let Ok(discharge) = Discharge::from_value(value) {
            match self.client.end_transaction(&discharge.txn_id) {
                None => {
                    let error = link_error(
                        protocol::amqp::transactions::condition::UNKNOWN_ID,
                        "no such transaction",
                    );
                    self.settle_incoming(channel, handle, delivery_id, Err(error));
                    return Ok(());
                }
                Some(transaction) if discharge.fail() => {
                    drop(core.rollback(transaction));
                    if let Some(id) = delivery_id {
                        self.send_frame(AmqpFrame::new(
                            channel,
                            settled_disposition(id, DeliveryState::Accepted),
                        ));
                    }
                }
                Some(transaction) => {
                    let committed = core.commit(transaction);
                    self.pending.push(Box::pin(async move {
                        let result = committed.await.map_err(|e| e.to_string());
                        Event::Discharged { channel, delivery_id, result }
                    }));
                }
            }
        } else {
            let error = link_error(condition::DECODE_ERROR, "expected declare or discharge");
            self.settle_incoming(channel, handle, delivery_id, Err(error));
            return Ok(());
        }
        self.top_up(channel, handle);
        Ok(())
    }
}

/// How a consumer's outcome settles its message: accepted → acknowledged; released (or
/// modified without delivery-failed) → back, not counted; modified with delivery-failed →
/// back, counted as a redelivery; undeliverable-here or rejected → dead-lettered. A
/// settlement without an outcome counts as accepted.
fn outcome_of(state: Option<&DeliveryState>) -> Settle {
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

/// The AMQP error for a send the core refused.
fn refusal(error: &CoreError) -> AmqpError {
    let condition = match error {
        CoreError::NoSpace(_) | CoreError::TooManyDestinations { .. } => {
            condition::RESOURCE_LIMIT_EXCEEDED
        }
        CoreError::NoSuchTemporary(_) => condition::NOT_FOUND,
        CoreError::WildcardSend(_) | CoreError::InvalidSchedule(_) => condition::NOT_ALLOWED,
        CoreError::Unsupported(_) => condition::NOT_IMPLEMENTED,
        _ => condition::INTERNAL_ERROR,
    };
    link_error(condition, error.to_string())
}

fn settled_disposition(delivery_id: u32, state: DeliveryState) -> Disposition {
    Disposition {
        role: Role::Receiver,
        first: delivery_id,
        last: None,
        settled: Some(true),
        state: Some(state),
        batchable: None,
    }
}

/// A link flow with the session's state.
fn link_flow(
    session: &Session,
    handle: u32,
    delivery_count: u32,
    credit: u32,
    drain: bool,
) -> Flow {
    Flow {
        next_incoming_id: Some(session.next_incoming_id),
        incoming_window: INCOMING_WINDOW,
        next_outgoing_id: session.next_outgoing_id,
        outgoing_window: u32::MAX,
        handle: Some(handle),
        delivery_count: Some(delivery_count),
        link_credit: Some(credit),
        available: None,
        drain: drain.then_some(true),
        echo: None,
        properties: None,
    }
}

/// Sets the consumer's prefetch to what the client can take: its unsettled deliveries and
/// the credit left. Called before the acknowledgement that frees the room, so that the
/// queue never sees a prefetch above the credit.
fn update_prefetch(core: &crate::core::Core, out: &mut Outgoing) {
    let want = out.unsettled.saturating_add(out.credit);
    if want != out.prefetch {
        out.prefetch = want;
        core.set_prefetch(out.consumer, want);
    }
}

fn has_capability(capabilities: Option<&[protocol::amqp::Symbol]>, name: &str) -> bool {
    capabilities.is_some_and(|c| c.iter().any(|s| s.as_str() == name))
}

/// The JMS selector of a source's filter set, if it has one.
fn selector_of(filter: Option<&Value>) -> Option<String> {
    let Some(Value::Map(entries)) = filter else { return None };
    entries.iter().find_map(|(_, value)| {
        let Value::Described(described) = value else { return None };
        let is_selector = match &described.descriptor {
            protocol::amqp::Descriptor::Code(code) => *code == SELECTOR_CODE,
            protocol::amqp::Descriptor::Symbol(symbol) => symbol.as_str() == SELECTOR_SYMBOL,
        };
        if !is_selector {
            return None;
        }
        described.value.as_str().map(str::to_owned)
    })
}
