//! [`Consumer`]: receives messages (ConsumerInfo, MessageDispatch, MessagePull) and
//! acknowledges them (MessageAck) as its session's mode says.

use std::collections::VecDeque;
use std::sync::atomic::{AtomicBool, Ordering};
use std::sync::{Arc, Mutex};
use std::time::Duration;

use protocol::openwire::{self as ow, ack_type, Command, DataStructure};
use tokio::sync::mpsc;
use tokio::time::Instant;

use super::client::Inner;
use super::connection::{Dispatch, Route};
use super::session::SessionShared;
use super::{Destination, Message, SessionMode, SubscribeOptions};
use crate::ClientError;

/// Receives the messages the broker dispatches to one consumer, in order.
///
/// Messages the broker pushes ahead (up to the prefetch) wait here until received. With
/// prefetch 0 nothing is pushed: each receive sends a MessagePull and waits for the broker's
/// answer (a message, or none when the pull's time is up).
///
/// Acknowledgement follows the session's [`SessionMode`]: automatic (batched: a standard ack
/// for every half prefetch window of received messages, and for everything received as soon
/// as a receive would wait), [`Consumer::ack`] in client and individual modes (with a
/// delivered ack every half prefetch window, so that a consumer may hold more unacknowledged
/// messages than its prefetch, as with ActiveMQ), and the session's transaction in
/// transacted mode.
///
/// Dropping a consumer without [`Consumer::close`] leaves the broker's consumer in place
/// until the session or connection closes; messages dispatched meanwhile are discarded here
/// and redelivered by the broker afterwards.
#[derive(Debug)]
pub struct Consumer {
    shared: Arc<ConsumerShared>,
    session: Arc<SessionShared>,
    dispatches: mpsc::UnboundedReceiver<Dispatch>,
}

/// What the consumer shares with its session (for commit, rollback and close).
#[derive(Debug)]
pub(crate) struct ConsumerShared {
    id: ow::ConsumerId,
    destination: Destination,
    prefetch: i32,
    mode: SessionMode,
    state: Mutex<AckState>,
    closed: AtomicBool,
}

#[derive(Debug, Default)]
struct AckState {
    /// Client and individual modes: received, awaiting [`Consumer::ack`], in order.
    unacked: VecDeque<ow::MessageId>,
    /// Client and individual modes: received since the last delivered ack.
    unreported: Vec<ow::MessageId>,
    /// Auto and transacted modes: received, their standard ack not yet sent.
    pending: Vec<ow::MessageId>,
    /// Transacted mode: received in the open transaction, to hand out again on rollback.
    in_transaction: Vec<Message>,
    /// Messages to hand out again (after a rollback) before new dispatches.
    redeliver: VecDeque<Message>,
    /// The broker sequence id of the last message handed to the application (-1: none).
    last_delivered: i64,
    /// Prefetch 0: pulls sent whose answer has not arrived.
    outstanding_pulls: u32,
}

/// How long a receive waits.
#[derive(Debug, Clone, Copy)]
enum Wait {
    Forever,
    For(Duration),
    Now,
}

impl Consumer {
    pub(crate) async fn open(
        session: Arc<SessionShared>,
        value: i64,
        options: SubscribeOptions,
    ) -> Result<Consumer, ClientError> {
        let id = ow::ConsumerId {
            connection_id: session.id.connection_id.clone(),
            session_id: session.id.value,
            value,
        };
        let prefetch = options.effective_prefetch();
        let client = &session.client;
        let info = ow::ConsumerInfo {
            consumer_id: Some(id.clone()),
            destination: Some(options.destination.clone()),
            prefetch_size: prefetch,
            maximum_pending_message_limit: 0,
            dispatch_async: true,
            selector: options.selector.clone().filter(|s| !s.trim().is_empty()),
            client_id: client.client_id.clone(),
            subscription_name: options.durable_name.clone(),
            no_local: options.no_local,
            exclusive: options.exclusive,
            retroactive: options.retroactive,
            ..Default::default()
        };
        let (sink, dispatches) = mpsc::unbounded_channel();
        let route = Route::Consumer(id.clone(), sink);
        if let Err(error) = client.request(Command::ConsumerInfo(Box::new(info)), Some(route)).await
        {
            client.forget_consumer(id);
            return Err(error);
        }
        let shared = Arc::new(ConsumerShared {
            id,
            destination: options.destination,
            prefetch,
            mode: session.mode,
            state: Mutex::new(AckState { last_delivered: -1, ..AckState::default() }),
            closed: AtomicBool::new(false),
        });
        Ok(Consumer { shared, session, dispatches })
    }

    pub(crate) fn shared(&self) -> &Arc<ConsumerShared> {
        &self.shared
    }

    /// The destination consumed.
    pub fn destination(&self) -> &Destination {
        &self.shared.destination
    }

    /// The prefetch in force (0: the consumer pulls).
    pub fn prefetch(&self) -> i32 {
        self.shared.prefetch
    }

    /// The next message, waiting as long as it takes; the reason if the connection ended.
    pub async fn recv(&mut self) -> Result<Message, ClientError> {
        match self.next(Wait::Forever).await? {
            Some(message) => Ok(message),
            None => Err(self.session.client.closed_reason()),
        }
    }

    /// The next message, waiting at most `timeout`: `Ok(None)` if none came (JMS's
    /// `receive(timeout)`), `Err` if the connection ended.
    pub async fn receive(&mut self, timeout: Duration) -> Result<Option<Message>, ClientError> {
        self.next(Wait::For(timeout)).await
    }

    /// A message if one is ready now (JMS's `receiveNoWait`; with prefetch 0 it asks the
    /// broker, which answers at once).
    pub async fn receive_no_wait(&mut self) -> Result<Option<Message>, ClientError> {
        self.next(Wait::Now).await
    }

    /// Acknowledges `message` and waits for the broker: in client mode it and every message
    /// received before it from this consumer, in individual mode that message only. Does
    /// nothing in the auto and transacted modes (their acks are the session's business).
    pub async fn ack(&self, message: &Message) -> Result<(), ClientError> {
        let Some(id) = message.wire.message_id.clone() else {
            return Err(ClientError::protocol("cannot acknowledge a message without a message id"));
        };
        let ack = {
            let mut state = self.shared.lock();
            let Some(position) = state.unacked.iter().position(|m| *m == id) else {
                return Ok(()); // Acknowledged already (or never ours to acknowledge).
            };
            match self.shared.mode {
                SessionMode::Client => {
                    let acked: Vec<ow::MessageId> = state.unacked.drain(..=position).collect();
                    self.shared.ack_command(ack_type::STANDARD, &acked, None)
                }
                SessionMode::Individual => {
                    state.unacked.remove(position);
                    self.shared.ack_command(ack_type::INDIVIDUAL, &[id], None)
                }
                SessionMode::Auto | SessionMode::Transacted => return Ok(()),
            }
        };
        match ack {
            Some(ack) => self.session.client.request(ack, None).await,
            None => Ok(()),
        }
    }

    /// Closes the consumer: sends what acknowledgements are pending, then RemoveInfo with
    /// the last message handed out (the broker gives back the rest, those not handed out
    /// unmarked), waited for.
    pub async fn close(self) -> Result<(), ClientError> {
        let flushed = if self.shared.is_closed() { Ok(()) } else { self.flush_acks().await };
        flushed.and(self.shared.close(&self.session.client).await)
    }

    async fn next(&mut self, wait: Wait) -> Result<Option<Message>, ClientError> {
        let redelivery = self.shared.lock().redeliver.pop_front();
        if let Some(message) = redelivery {
            return self.hand_out(message).await.map(Some);
        }
        loop {
            match self.dispatches.try_recv() {
                Ok(dispatch) => {
                    if let Some(message) = self.shared.accept(dispatch) {
                        return self.hand_out(message).await.map(Some);
                    }
                }
                Err(mpsc::error::TryRecvError::Empty) => break,
                Err(mpsc::error::TryRecvError::Disconnected) => {
                    return Err(self.session.client.closed_reason())
                }
            }
        }
        // About to wait: acknowledge what was received, so that nothing idles unacknowledged.
        self.flush_acks().await?;
        let client = &self.session.client;
        let pulling = self.shared.prefetch == 0;
        if pulling {
            let send_pull = {
                let mut state = self.shared.lock();
                let idle = state.outstanding_pulls == 0;
                if idle {
                    state.outstanding_pulls = 1;
                }
                idle
            };
            if send_pull {
                let timeout = match wait {
                    Wait::Forever => 0,
                    Wait::For(limit) => i64::try_from(limit.as_millis()).unwrap_or(i64::MAX).max(1),
                    Wait::Now => -1,
                };
                let pull = ow::MessagePull {
                    consumer_id: Some(self.shared.id.clone()),
                    destination: Some(self.shared.destination.clone()),
                    timeout,
                    ..Default::default()
                };
                client.post(Command::MessagePull(Box::new(pull)), None).await?;
            }
        } else if let Wait::Now = wait {
            return Ok(None);
        }
        // A pull is answered by the broker when its time is up: allow for the round trip.
        let deadline = match wait {
            Wait::Forever => None,
            Wait::For(limit) if pulling => Some(Instant::now() + limit + client.timeout),
            Wait::For(limit) => Some(Instant::now() + limit),
            Wait::Now => Some(Instant::now() + client.timeout),
        };
        loop {
            let dispatch = match deadline {
                None => self.dispatches.recv().await,
                Some(deadline) => {
                    match tokio::time::timeout_at(deadline, self.dispatches.recv()).await {
                        Ok(dispatch) => dispatch,
                        Err(_) => return Ok(None),
                    }
                }
            };
            let Some(dispatch) = dispatch else {
                return Err(client.closed_reason());
            };
            if let Some(message) = self.shared.accept(dispatch) {
                return self.hand_out(message).await.map(Some);
            }
            if pulling && self.shared.lock().outstanding_pulls == 0 {
                return Ok(None); // Our pull found nothing in time.
            }
        }
    }

    /// Records `message` as handed to the application, as the mode says.
    async fn hand_out(&mut self, message: Message) -> Result<Message, ClientError> {
        let id = message.wire.message_id.clone().unwrap_or_default();
        let mut delivered = None;
        let flush = {
            let mut state = self.shared.lock();
            state.last_delivered = id.broker_sequence_id;
            match self.shared.mode {
                SessionMode::Client | SessionMode::Individual => {
                    state.unacked.push_back(id.clone());
                    state.unreported.push(id);
                    // Like ActiveMQ's consumers: a delivered ack every half prefetch window
                    // tells the broker these reached the application, which opens the window
                    // for more while the application has not acknowledged them yet.
                    if state.unreported.len() >= self.shared.ack_batch() {
                        let unreported = std::mem::take(&mut state.unreported);
                        delivered = self.shared.ack_command(ack_type::DELIVERED, &unreported, None);
                    }
                    false
                }
                SessionMode::Auto => {
                    state.pending.push(id);
                    state.pending.len() >= self.shared.ack_batch()
                }
                SessionMode::Transacted => {
                    state.pending.push(id);
                    state.in_transaction.push(message.clone());
                    state.pending.len() >= self.shared.ack_batch()
                }
            }
        };
        if self.shared.mode.is_transacted() {
            // The message belongs to the session's transaction from now on.
            self.session.transaction().await?;
        }
        if flush {
            self.flush_acks().await?;
        }
        if let Some(delivered) = delivered {
            self.session.client.post(delivered, None).await?;
        }
        Ok(message)
    }

    async fn flush_acks(&self) -> Result<(), ClientError> {
        if self.shared.lock().pending.is_empty() {
            return Ok(());
        }
        let transaction = self.session.transaction().await?;
        self.shared.flush_acks(&self.session.client, transaction).await
    }
}

impl Drop for Consumer {
    fn drop(&mut self) {
        if !self.shared.is_closed() {
            self.session.client.forget_consumer(self.shared.id.clone());
        }
    }
}

impl ConsumerShared {
    fn lock(&self) -> std::sync::MutexGuard<'_, AckState> {
        self.state.lock().unwrap_or_else(|e| e.into_inner())
    }

    pub(crate) fn is_closed(&self) -> bool {
        self.closed.load(Ordering::Acquire)
    }

    pub(crate) fn last_delivered(&self) -> i64 {
        self.lock().last_delivered
    }

    /// Received messages per standard ack: half the prefetch window, as ActiveMQ's
    /// consumers acknowledge.
    fn ack_batch(&self) -> usize {
        usize::try_from(self.prefetch / 2).unwrap_or(0).max(1)
    }

    /// The message a dispatch carries, if any (none: a pull that found nothing).
    fn accept(&self, dispatch: Dispatch) -> Option<Message> {
        if self.prefetch == 0 {
            let mut state = self.lock();
            state.outstanding_pulls = state.outstanding_pulls.saturating_sub(1);
        }
        let wire = *dispatch.message?;
        let redelivery_counter = dispatch.redelivery_counter.max(wire.redelivery_counter);
        Some(Message { wire, consumer_id: self.id.clone(), redelivery_counter })
    }

    /// A MessageAck of `kind` over `ids` (a range: first to last, with the count).
    fn ack_command(
        &self,
        kind: i8,
        ids: &[ow::MessageId],
        transaction: Option<ow::TransactionId>,
    ) -> Option<Command> {
        let (first, last) = (ids.first()?, ids.last()?);
        Some(Command::MessageAck(Box::new(ow::MessageAck {
            destination: Some(self.destination.clone()),
            transaction_id: transaction,
            consumer_id: Some(self.id.clone()),
            ack_type: kind,
            first_message_id: Some(first.clone()),
            last_message_id: Some(last.clone()),
            message_count: i32::try_from(ids.len()).unwrap_or(i32::MAX),
            ..Default::default()
        })))
    }

    /// Sends the standard ack of the received messages not yet acknowledged (auto and
    /// transacted modes), in `transaction` if any. Not waited for.
    pub(crate) async fn flush_acks(
        &self,
        client: &Inner,
        transaction: Option<ow::TransactionId>,
    ) -> Result<(), ClientError> {
        let ack = {
            let mut state = self.lock();
            let pending = std::mem::take(&mut state.pending);
            self.ack_command(ack_type::STANDARD, &pending, transaction)
        };
        match ack {
            Some(ack) => client.post(ack, None).await,
            None => Ok(()),
        }
    }

    /// The session's transaction ended: committed (forget its messages) or rolled back
    /// (hand them out again first, marked redelivered, in their order).
    pub(crate) fn end_transaction(&self, committed: bool) {
        let mut state = self.lock();
        state.pending.clear();
        let received = std::mem::take(&mut state.in_transaction);
        if committed {
            return;
        }
        for mut message in received.into_iter().rev() {
            message.redelivery_counter += 1;
            state.redeliver.push_front(message);
        }
    }

    pub(crate) async fn close(&self, client: &Inner) -> Result<(), ClientError> {
        if self.closed.swap(true, Ordering::AcqRel) {
            return Ok(());
        }
        let mut result = Ok(());
        if self.mode == SessionMode::Auto {
            result = self.flush_acks(client, None).await;
        }
        let remove = ow::RemoveInfo {
            object_id: Some(Box::new(DataStructure::ConsumerId(self.id.clone()))),
            last_delivered_sequence_id: self.last_delivered(),
            ..Default::default()
        };
        result = result.and(client.request(Command::RemoveInfo(Box::new(remove)), None).await);
        client.forget_consumer(self.id.clone());
        result
    }
}
