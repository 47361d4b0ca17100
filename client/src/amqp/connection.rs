//! The connection task: owns the socket, the codec, the session's windows and every link.

use std::collections::{HashMap, VecDeque};
use std::time::Duration;

use bytes::{Bytes, BytesMut};
use protocol::amqp::{
    split_transfer, AmqpError, AmqpFrame, Assembled, Attach, AttachTarget, Close, Codec, Decoded,
    DeliveryAssembler, DeliveryState, Detach, Disposition, Flow, Frame, Message, Performative,
    ReceiverSettleMode, Role, SenderSettleMode, Source, Target, Transfer,
};
use tokio::io::{AsyncRead, AsyncReadExt, AsyncWrite, AsyncWriteExt, ReadHalf, WriteHalf};
use tokio::sync::{mpsc, oneshot};

use super::client::Delivery;
use crate::ClientError;

/// The session incoming window we announce (transfer frames), restored by a flow once half
/// is used: large, so that the broker is paced by link credit, not by the session.
pub(crate) const INCOMING_WINDOW: u32 = 1 << 16;

/// The largest message we reassemble from several transfers.
const MAX_MESSAGE_SIZE: u64 = 256 << 20;

/// What the handshake learnt.
#[derive(Debug)]
pub(crate) struct Session {
    pub(crate) peer_max_frame_size: u32,
    /// The broker's idle timeout in milliseconds: we must send something at least this often.
    pub(crate) peer_idle_timeout: Option<u64>,
    pub(crate) remote_incoming_window: u32,
    pub(crate) next_incoming_id: u32,
}

type Reply<T> = oneshot::Sender<Result<T, ClientError>>;

/// A handle's request to the task.
#[derive(Debug)]
pub(crate) enum Request {
    AttachSender { address: String, reply: Reply<u32> },
    AttachReceiver { address: String, credit: u32, deliveries: Deliveries, reply: Reply<u32> },
    Send { handle: u32, payload: Bytes, reply: Reply<()> },
    Accept { handle: u32, delivery_id: u32 },
    Close { reply: Reply<()> },
}

type Deliveries = mpsc::UnboundedSender<Delivery>;

/// One link, by our handle.
#[derive(Debug)]
struct Link {
    /// Answered when the broker's attach arrives.
    attaching: Option<Reply<u32>>,
    /// Messages sent (sender) or received (receiver) so far: the link's delivery-count.
    delivery_count: u32,
    /// Credit left: what the broker granted us (sender) or what we granted it (receiver).
    credit: u32,
    kind: LinkKind,
}

#[derive(Debug)]
enum LinkKind {
    Sender { waiting: VecDeque<(Bytes, Reply<()>)> },
    Receiver { window: u32, deliveries: Deliveries, assembler: DeliveryAssembler },
}

struct Task<S> {
    codec: Codec,
    writer: WriteHalf<S>,
    out: BytesMut,
    session: Session,
    /// Transfer frames we sent: the session's next-outgoing-id.
    next_outgoing_id: u32,
    next_delivery_id: u32,
    /// Incoming window left before we restore it.
    incoming_window: u32,
    links: HashMap<u32, Link>,
    /// The broker's link handles to ours (links are matched by name on attach).
    remote_handles: HashMap<u32, u32>,
    names: HashMap<String, u32>,
    next_handle: u32,
    /// Sends waiting for their disposition, by delivery id.
    unsettled: HashMap<u32, Reply<()>>,
    closing: Option<Reply<()>>,
}

/// Runs the connection until it closes; every waiter then gets the reason.
pub(crate) async fn run<S>(
    codec: Codec,
    mut reader: ReadHalf<S>,
    writer: WriteHalf<S>,
    mut buffer: BytesMut,
    session: Session,
    mut inbox: mpsc::Receiver<Request>,
) where
    S: AsyncRead + AsyncWrite + Send + 'static,
{
    let heartbeat = session
        .peer_idle_timeout
        .map_or(Duration::from_secs(3600), |ms| Duration::from_millis((ms / 2).max(100)));
    let mut task = Task {
        codec,
        writer,
        out: BytesMut::new(),
        session,
        next_outgoing_id: 0,
        next_delivery_id: 0,
        incoming_window: INCOMING_WINDOW,
        links: HashMap::new(),
        remote_handles: HashMap::new(),
        names: HashMap::new(),
        next_handle: 0,
        unsettled: HashMap::new(),
        closing: None,
    };
    let mut ticker = tokio::time::interval(heartbeat);
    ticker.set_missed_tick_behavior(tokio::time::MissedTickBehavior::Delay);
    let mut wrote_since_tick = false;
    let end = loop {
        let step = tokio::select! {
            request = inbox.recv() => match request {
                Some(request) => task.request(request),
                // Every handle is gone: nothing more can be asked.
                None => Err(ClientError::Closed),
            },
            read = reader.read_buf(&mut buffer) => match read {
                Ok(0) => Err(ClientError::Closed),
                Ok(_) => task.incoming(&mut buffer),
                Err(error) => Err(error.into()),
            },
            _ = ticker.tick() => {
                if !wrote_since_tick {
                    task.encode(Frame::Heartbeat)
                } else {
                    wrote_since_tick = false;
                    Ok(())
                }
            }
        };
        let flushed = match step {
            Ok(()) => task.flush(&mut wrote_since_tick).await,
            Err(error) => {
                // Whatever was encoded (a close) still goes out before we stop.
                let _ = task.flush(&mut wrote_since_tick).await;
                Err(error)
            }
        };
        if let Err(error) = flushed {
            break error;
        }
    };
    task.fail_all(end);
}

impl<S: AsyncWrite> Task<S> {
    async fn flush(&mut self, wrote: &mut bool) -> Result<(), ClientError> {
        if !self.out.is_empty() {
            self.writer.write_all(&self.out).await?;
            self.out.clear();
            *wrote = true;
        }
        Ok(())
    }

    fn encode(&mut self, frame: Frame) -> Result<(), ClientError> {
        Ok(self.codec.encode(&frame, &mut self.out)?)
    }

    fn performative(&mut self, performative: impl Into<Performative>) -> Result<(), ClientError> {
        self.encode(AmqpFrame::new(0, performative).into())
    }

    fn request(&mut self, request: Request) -> Result<(), ClientError> {
        match request {
            Request::AttachSender { address, reply } => {
                let handle = self.new_link(reply, LinkKind::Sender { waiting: VecDeque::new() });
                let mut attach = Attach::new(format!("sender-{handle}"), handle, Role::Sender);
                attach.snd_settle_mode = Some(SenderSettleMode::Unsettled);
                attach.rcv_settle_mode = Some(ReceiverSettleMode::First);
                attach.source = Some(Source::default());
                attach.target = Some(AttachTarget::Node(Target::new(address)));
                attach.initial_delivery_count = Some(0);
                self.performative(attach)
            }
            Request::AttachReceiver { address, credit, deliveries, reply } => {
                let assembler = DeliveryAssembler::new(MAX_MESSAGE_SIZE);
                let kind = LinkKind::Receiver { window: credit, deliveries, assembler };
                let handle = self.new_link(reply, kind);
                let mut attach = Attach::new(format!("receiver-{handle}"), handle, Role::Receiver);
                attach.rcv_settle_mode = Some(ReceiverSettleMode::First);
                attach.source = Some(Source::new(address));
                attach.target = Some(AttachTarget::Node(Target::default()));
                self.performative(attach)?;
                // The credit goes with the attach, so the first message can come at once.
                if let Some(link) = self.links.get_mut(&handle) {
                    link.credit = credit;
                }
                self.link_flow(handle)
            }
            Request::Send { handle, payload, reply } => {
                let Some(link) = self.links.get_mut(&handle) else {
                    let _ = reply.send(Err(ClientError::protocol("the link is detached")));
                    return Ok(());
                };
                if let LinkKind::Sender { waiting } = &mut link.kind {
                    waiting.push_back((payload, reply));
                }
                self.send_waiting(handle)
            }
            Request::Accept { handle, delivery_id } => {
                self.performative(Disposition {
                    role: Role::Receiver,
                    first: delivery_id,
                    last: None,
                    settled: Some(true),
                    state: Some(DeliveryState::Accepted),
                    batchable: None,
                })?;
                self.top_up(handle)
            }
            Request::Close { reply } => {
                self.closing = Some(reply);
                self.performative(Close { error: None })
            }
        }
    }

    fn new_link(&mut self, reply: Reply<u32>, kind: LinkKind) -> u32 {
        let handle = self.next_handle;
        self.next_handle += 1;
        let name = match kind {
            LinkKind::Sender { .. } => format!("sender-{handle}"),
            LinkKind::Receiver { .. } => format!("receiver-{handle}"),
        };
        self.names.insert(name, handle);
        let link = Link { attaching: Some(reply), delivery_count: 0, credit: 0, kind };
        self.links.insert(handle, link);
        handle
    }

    /// Restores a receiver's credit to its window once half of it is used (with a window
    /// of 1: after every message).
    fn top_up(&mut self, handle: u32) -> Result<(), ClientError> {
        let Some(link) = self.links.get_mut(&handle) else { return Ok(()) };
        let LinkKind::Receiver { window, .. } = &link.kind else { return Ok(()) };
        if link.credit <= *window / 2 {
            link.credit = *window;
            return self.link_flow(handle);
        }
        Ok(())
    }

    fn session_flow(&self, handle: Option<u32>) -> Flow {
        Flow {
            next_incoming_id: Some(self.session.next_incoming_id),
            incoming_window: self.incoming_window,
            next_outgoing_id: self.next_outgoing_id,
            outgoing_window: u32::MAX,
            handle,
            delivery_count: None,
            link_credit: None,
            available: None,
            drain: None,
            echo: None,
            properties: None,
        }
    }

    fn link_flow(&mut self, handle: u32) -> Result<(), ClientError> {
        let Some(link) = self.links.get(&handle) else { return Ok(()) };
        let mut flow = self.session_flow(Some(handle));
        flow.delivery_count = Some(link.delivery_count);
        flow.link_credit = Some(link.credit);
        self.performative(flow)
    }

    /// Sends a sender link's waiting messages while it has credit and the session window
    /// has room.
    fn send_waiting(&mut self, handle: u32) -> Result<(), ClientError> {
        loop {
            let Some(link) = self.links.get_mut(&handle) else { return Ok(()) };
            let LinkKind::Sender { waiting } = &mut link.kind else { return Ok(()) };
            if link.attaching.is_some()
                || link.credit == 0
                || self.session.remote_incoming_window == 0
                || waiting.is_empty()
            {
                return Ok(());
            }
            let Some((payload, reply)) = waiting.pop_front() else { return Ok(()) };
            link.credit -= 1;
            link.delivery_count = link.delivery_count.wrapping_add(1);
            let delivery_id = self.next_delivery_id;
            self.next_delivery_id = self.next_delivery_id.wrapping_add(1);
            let transfer = Transfer {
                handle,
                delivery_id: Some(delivery_id),
                delivery_tag: Some(Bytes::copy_from_slice(&delivery_id.to_be_bytes())),
                message_format: Some(0),
                settled: Some(false),
                ..Transfer::default()
            };
            let frames = split_transfer(0, &transfer, payload, self.session.peer_max_frame_size)?;
            for frame in frames {
                self.encode(frame.into())?;
                self.next_outgoing_id = self.next_outgoing_id.wrapping_add(1);
                self.session.remote_incoming_window =
                    self.session.remote_incoming_window.saturating_sub(1);
            }
            self.unsettled.insert(delivery_id, reply);
        }
    }

    fn incoming(&mut self, buffer: &mut BytesMut) -> Result<(), ClientError> {
        while let Some(decoded) = self.codec.decode(buffer)? {
            match decoded {
                Decoded::Frame(Frame::Amqp(frame)) => self.frame(frame)?,
                Decoded::Frame(Frame::Heartbeat) => {}
                other => {
                    return Err(ClientError::protocol(format!("unexpected {other:?}")));
                }
            }
        }
        Ok(())
    }

    fn frame(&mut self, frame: AmqpFrame) -> Result<(), ClientError> {
        match frame.performative {
            Performative::Attach(attach) => {
                let Some(&handle) = self.names.get(&attach.name) else {
                    return Err(ClientError::protocol(format!(
                        "attach of unknown link {}",
                        attach.name
                    )));
                };
                self.remote_handles.insert(attach.handle, handle);
                // A refused link is answered with an attach without terminus, then a detach
                // with the error: the detach answers the waiter.
                let refused = match attach.role {
                    Role::Receiver => attach.target.is_none(),
                    Role::Sender => attach.source.is_none(),
                };
                if !refused {
                    if let Some(reply) =
                        self.links.get_mut(&handle).and_then(|link| link.attaching.take())
                    {
                        let _ = reply.send(Ok(handle));
                    }
                }
                self.send_waiting(handle)
            }
            Performative::Flow(flow) => {
                // The broker's view of our transfers: its window is what it can still take.
                let next_incoming = flow.next_incoming_id.unwrap_or(0);
                self.session.remote_incoming_window = next_incoming
                    .wrapping_add(flow.incoming_window)
                    .wrapping_sub(self.next_outgoing_id);
                let Some(handle) = flow.handle.and_then(|h| self.remote_handles.get(&h).copied())
                else {
                    return self.send_all_waiting();
                };
                if let Some(link) = self.links.get_mut(&handle) {
                    if let (LinkKind::Sender { .. }, Some(credit)) = (&link.kind, flow.link_credit)
                    {
                        let theirs = flow.delivery_count.unwrap_or(0);
                        link.credit = theirs.wrapping_add(credit).wrapping_sub(link.delivery_count);
                    }
                }
                if flow.echo == Some(true) {
                    self.link_flow(handle)?;
                }
                self.send_all_waiting()
            }
            Performative::Transfer(transfer) => self.transfer(transfer, frame.payload),
            Performative::Disposition(disposition) => {
                if disposition.role == Role::Receiver {
                    for id in disposition.first..=disposition.last() {
                        let Some(reply) = self.unsettled.remove(&id) else { continue };
                        let _ = reply.send(outcome(disposition.state.as_ref()));
                    }
                }
                Ok(())
            }
            Performative::Detach(detach) => self.detached(detach),
            Performative::End(end) => Err(end.error.as_ref().map_or(ClientError::Closed, refused)),
            Performative::Close(close) => {
                if let Some(reply) = self.closing.take() {
                    let _ = reply.send(Ok(()));
                }
                Err(close.error.as_ref().map_or(ClientError::Closed, refused))
            }
            Performative::Open(_) | Performative::Begin(_) => {
                Err(ClientError::protocol("a second open or begin"))
            }
        }
    }

    fn send_all_waiting(&mut self) -> Result<(), ClientError> {
        let handles: Vec<u32> = self.links.keys().copied().collect();
        for handle in handles {
            self.send_waiting(handle)?;
        }
        Ok(())
    }

    fn transfer(&mut self, transfer: Transfer, payload: Bytes) -> Result<(), ClientError> {
        self.session.next_incoming_id = self.session.next_incoming_id.wrapping_add(1);
        self.incoming_window = self.incoming_window.saturating_sub(1);
        if self.incoming_window < INCOMING_WINDOW / 2 {
            self.incoming_window = INCOMING_WINDOW;
            let flow = self.session_flow(None);
            self.performative(flow)?;
        }
        let Some(handle) = self.remote_handles.get(&transfer.handle).copied() else {
            return Err(ClientError::protocol("a transfer on an unattached link"));
        };
        let Some(link) = self.links.get_mut(&handle) else { return Ok(()) };
        let LinkKind::Receiver { deliveries, assembler, .. } = &mut link.kind else {
            return Err(ClientError::protocol("a transfer on a sender link"));
        };
        let delivery = match assembler.push(transfer, payload)? {
            Assembled::Complete(delivery) => delivery,
            Assembled::Incomplete | Assembled::Aborted(_) => return Ok(()),
        };
        link.delivery_count = link.delivery_count.wrapping_add(1);
        link.credit = link.credit.saturating_sub(1);
        let message = Message::decode(&delivery.payload, self.codec.limits().max_nesting_depth)?;
        let settled = delivery.transfer.settled.unwrap_or(false);
        let Some(delivery_id) = delivery.transfer.delivery_id else {
            return Err(ClientError::protocol("a delivery without a delivery id"));
        };
        // A receiver that went away just leaves its messages unaccepted.
        let _ = deliveries.send(Delivery { delivery_id, settled, message });
        if settled {
            return self.top_up(handle);
        }
        Ok(())
    }

    fn detached(&mut self, detach: Detach) -> Result<(), ClientError> {
        let Some(handle) = self.remote_handles.remove(&detach.handle) else { return Ok(()) };
        let error = detach.error.as_ref().map_or(ClientError::Closed, refused);
        if let Some(link) = self.links.remove(&handle) {
            if let Some(reply) = link.attaching {
                let _ = reply.send(Err(error.clone()));
            }
            if let LinkKind::Sender { waiting } = link.kind {
                for (_, reply) in waiting {
                    let _ = reply.send(Err(error.clone()));
                }
            }
        }
        // Our half of the detach, so the broker can forget the handle.
        self.performative(Detach { handle, closed: Some(true), error: None })
    }

    fn fail_all(self, error: ClientError) {
        for (_, reply) in self.unsettled {
            let _ = reply.send(Err(error.clone()));
        }
        for (_, link) in self.links {
            if let Some(reply) = link.attaching {
                let _ = reply.send(Err(error.clone()));
            }
            if let LinkKind::Sender { waiting } = link.kind {
                for (_, reply) in waiting {
                    let _ = reply.send(Err(error.clone()));
                }
            }
        }
        if let Some(reply) = self.closing {
            // A close we asked for ends the connection: that is success.
            let _ = reply.send(match error {
                ClientError::Closed => Ok(()),
                other => Err(other),
            });
        }
    }
}

/// A send's outcome as the handle sees it.
fn outcome(state: Option<&DeliveryState>) -> Result<(), ClientError> {
    match state {
        Some(DeliveryState::Accepted) | None => Ok(()),
        Some(DeliveryState::Rejected(rejected)) => Err(rejected.error.as_ref().map_or_else(
            || ClientError::Refused {
                condition: "amqp:rejected".to_owned(),
                description: String::new(),
            },
            refused,
        )),
        Some(other) => Err(ClientError::Refused {
            condition: "amqp:not-accepted".to_owned(),
            description: format!("the broker settled the send as {other:?}"),
        }),
    }
}

/// An AMQP error condition as a [`ClientError`].
pub(crate) fn refused(error: &AmqpError) -> ClientError {
    ClientError::Refused {
        condition: error.condition.to_string(),
        description: error.description.clone().unwrap_or_default(),
    }
}
