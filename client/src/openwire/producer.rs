//! [`Producer`]: sends messages (ProducerInfo, then Message commands).

use std::sync::atomic::{AtomicBool, AtomicI64, Ordering};
use std::sync::Arc;

use protocol::openwire::{self as ow, Command, DataStructure};

use super::connection::{ProducerWindow, Route};
use super::session::SessionShared;
use super::{Destination, OutgoingMessage, SendMode};
use crate::client::within;
use crate::ClientError;

/// How a producer is created.
#[derive(Debug, Clone, Default)]
pub struct ProducerSettings {
    /// Its fixed destination; `None` for an anonymous producer.
    pub destination: Option<Destination>,
    /// Whether sends wait for the broker; default as JMS.
    pub send_mode: SendMode,
    /// ActiveMQ's `producerWindowSize` in bytes: asynchronous sends stop while this much is
    /// not yet acknowledged by the broker (ProducerAck). 0 (the default): no window, TCP
    /// back-pressure only.
    pub window_size: usize,
    /// The producer sequence of the last message sent before (the first send gets the next
    /// one); default 0. A producer that replaces one on a lost connection (same connection
    /// id, session and producer number) resumes where that one's confirmed sends ended, so
    /// that a resend carries the message id of the original.
    pub last_sequence: i64,
}

/// Sends messages from one session. Every method takes `&self`.
#[derive(Debug)]
pub struct Producer {
    session: Arc<SessionShared>,
    id: ow::ProducerId,
    destination: Option<Destination>,
    send_mode: SendMode,
    /// The producer sequence id of the last message sent.
    sequence: AtomicI64,
    window: Option<Arc<ProducerWindow>>,
    closed: AtomicBool,
}

impl Producer {
    pub(crate) async fn open(
        session: Arc<SessionShared>,
        value: i64,
        settings: ProducerSettings,
    ) -> Result<Producer, ClientError> {
        let id = ow::ProducerId {
            connection_id: session.id.connection_id.clone(),
            value,
            session_id: session.id.value,
        };
        let window =
            (settings.window_size > 0).then(|| Arc::new(ProducerWindow::new(settings.window_size)));
        let info = ow::ProducerInfo {
            producer_id: Some(id.clone()),
            destination: settings.destination.clone(),
            window_size: i32::try_from(settings.window_size).unwrap_or(i32::MAX),
            ..Default::default()
        };
        let route = window.clone().map(|w| Route::Producer(id.clone(), w));
        session.client.request(Command::ProducerInfo(Box::new(info)), route).await?;
        Ok(Producer {
            session,
            id,
            destination: settings.destination,
            send_mode: settings.send_mode,
            sequence: AtomicI64::new(settings.last_sequence),
            window,
            closed: AtomicBool::new(false),
        })
    }

    /// The producer sequence of the last message sent (0 before the first): the number in
    /// the last message id.
    pub fn last_sequence(&self) -> i64 {
        self.sequence.load(Ordering::Relaxed)
    }

    /// The producer's fixed destination, if it has one.
    pub fn destination(&self) -> Option<&Destination> {
        self.destination.as_ref()
    }

    /// Sends `message` to the producer's destination; returns its message id.
    pub async fn send(&self, message: &OutgoingMessage) -> Result<String, ClientError> {
        let destination = self.destination.clone().ok_or_else(|| {
            ClientError::protocol("an anonymous producer needs a destination: use send_to")
        })?;
        self.send_to(&destination, message).await
    }

    /// Sends `message` to `destination`; returns its message id. Waits for the broker's
    /// response when the send mode says so (persistent outside transactions, by default),
    /// else only for room in the queue (and in the producer window, if any).
    pub async fn send_to(
        &self,
        destination: &Destination,
        message: &OutgoingMessage,
    ) -> Result<String, ClientError> {
        self.send_with(destination, message, self.send_mode).await
    }

    /// [`Producer::send_to`] with this send's own [`SendMode`] rather than the producer's.
    pub async fn send_with(
        &self,
        destination: &Destination,
        message: &OutgoingMessage,
        mode: SendMode,
    ) -> Result<String, ClientError> {
        let mut wire = message.to_wire(now_millis())?;
        let transaction = self.session.transaction().await?;
        let sync = match mode {
            SendMode::Sync => true,
            SendMode::Async => false,
            SendMode::Default => wire.persistent && transaction.is_none(),
        };
        let sequence = self.sequence.fetch_add(1, Ordering::Relaxed) + 1;
        wire.producer_id = Some(self.id.clone());
        wire.destination = Some(destination.clone());
        wire.transaction_id = transaction;
        wire.message_id = Some(ow::MessageId {
            producer_id: Some(self.id.clone()),
            producer_sequence_id: sequence,
            ..Default::default()
        });
        let text = format!(
            "{}:{}:{}:{sequence}",
            self.id.connection_id, self.id.session_id, self.id.value
        );
        let client = &self.session.client;
        let command = Command::Message(Box::new(wire));
        if sync {
            client.request(command, None).await?;
        } else {
            if let (Some(window), Command::Message(wire)) = (&self.window, &command) {
                let size = OutgoingMessage::window_size(wire);
                within(client.timeout, "room in the producer window", window.reserve(size)).await?;
                if client.is_closed() {
                    return Err(client.closed_reason());
                }
            }
            client.post(command, None).await?;
        }
        Ok(text)
    }

    /// Closes the producer (RemoveInfo, not waited for).
    pub async fn close(self) -> Result<(), ClientError> {
        if self.closed.swap(true, Ordering::AcqRel) {
            return Ok(());
        }
        let client = &self.session.client;
        if self.window.is_some() {
            client.forget_producer(self.id.clone());
        }
        let remove = ow::RemoveInfo {
            object_id: Some(Box::new(DataStructure::ProducerId(self.id.clone()))),
            ..Default::default()
        };
        client.post(Command::RemoveInfo(Box::new(remove)), None).await
    }

    /// Stops routing ProducerAcks here (the session is closing).
    pub(crate) fn forget(&self) {
        if self.window.is_some() {
            self.session.client.forget_producer(self.id.clone());
        }
    }
}

/// Milliseconds since the Unix epoch (`JMSTimestamp`).
pub(crate) fn now_millis() -> i64 {
    std::time::SystemTime::now()
        .duration_since(std::time::UNIX_EPOCH)
        .map(|d| i64::try_from(d.as_millis()).unwrap_or(i64::MAX))
        .unwrap_or(0)
}
