//! Links: attach/detach, transfers from producers with the credit we grant them, deliveries
//! to consumers with the credit they grant us, dispositions, and the transaction
//! coordinator.
//!
//! A consumer's link credit becomes its prefetch in the core: the core may have as many of
//! its messages in flight as it has unsettled deliveries plus credit left. A delivery that
//! arrives when the credit is used up (a drain, a credit the client lowered) waits here
//! until the client grants more.

use std::collections::{BTreeMap, VecDeque};
use std::sync::Arc;
use std::time::Duration;

use protocol::amqp::{
    condition, AmqpError, AmqpFrame, Attach, DeliveryAssembler, DeliveryState, Detach, Disposition,
    Flow, Rejected, Role, Value,
};
use store::{Destination, DestinationKind, Message, SubscriptionKey};

use super::{mapping, Connection, Event, Fatal, Session, INCOMING_WINDOW};
use crate::core::{ConsumerId, ConsumerNotice, CoreError, Delivery, QueueHandle};
use crate::security::Action;
use crate::session::SessionError;

mod coordinator;
mod incoming;
mod outgoing;

use outgoing::update_prefetch;

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
    /// The producer the link is, listed until the link goes (none for the coordinator).
    producer: Option<crate::core::ProducerRegistration>,
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
        let kind = if topic { DestinationKind::TempTopic } else { DestinationKind::TempQueue };
        let destination = Destination { kind, name: self.client.next_temporary_name() };
        self.client.create_temporary(destination.clone()).map_err(|error| {
            let condition = match error {
                SessionError::Denied(_) => condition::UNAUTHORIZED_ACCESS,
                _ => condition::INTERNAL_ERROR,
            };
            link_error(condition, error.to_string())
        })?;
        Ok(destination)
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
