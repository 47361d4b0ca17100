//! [`Subscription`]: the receiving end of one SUBSCRIBE.

use std::sync::Arc;
use std::time::Duration;

use protocol::stomp::{Command, Frame};
use tokio::sync::mpsc;

use crate::client::{within, Inner};
use crate::{ClientError, ReceivedMessage};

/// The messages the server delivers to one subscription, in order.
///
/// Messages are buffered without bound until received (the server's prefetch bounds them).
/// A subscription keeps the connection open even if its [`crate::StompClient`] is dropped.
/// Dropping it without [`Subscription::unsubscribe`] leaves the server's consumer in place;
/// its further messages are discarded.
#[derive(Debug)]
pub struct Subscription {
    id: String,
    messages: mpsc::UnboundedReceiver<ReceivedMessage>,
    inner: Arc<Inner>,
}

impl Subscription {
    pub(crate) fn new(
        id: String,
        messages: mpsc::UnboundedReceiver<ReceivedMessage>,
        inner: Arc<Inner>,
    ) -> Subscription {
        Subscription { id, messages, inner }
    }

    /// The subscription id sent in SUBSCRIBE (and echoed in each MESSAGE).
    pub fn id(&self) -> &str {
        &self.id
    }

    /// The next message; `None` once the connection has ended and every message
    /// delivered before has been received.
    pub async fn recv(&mut self) -> Option<ReceivedMessage> {
        self.messages.recv().await
    }

    /// The next message, waiting at most `limit`: `Err(Timeout)` if none came, or the
    /// reason the connection ended.
    pub async fn recv_timeout(&mut self, limit: Duration) -> Result<ReceivedMessage, ClientError> {
        let waiting_for = format!("a message on subscription {}", self.id);
        match within(limit, waiting_for, self.messages.recv()).await? {
            Some(message) => Ok(message),
            None => Err(self.inner.closed_reason()),
        }
    }

    /// A message already delivered, without waiting.
    pub fn try_recv(&mut self) -> Option<ReceivedMessage> {
        self.messages.try_recv().ok()
    }

    /// Sends UNSUBSCRIBE, waits for its receipt and stops routing messages here.
    pub async fn unsubscribe(self) -> Result<(), ClientError> {
        let frame = Frame::new(Command::Unsubscribe).header("id", self.id.as_str());
        let result = self.inner.request_receipt(frame).await;
        self.inner.forget(self.id);
        result
    }
}
