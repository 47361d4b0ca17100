//! [`ReceivedMessage`]: a MESSAGE frame delivered to a subscription.

use bytes::Bytes;
use protocol::stomp::Frame;

/// A MESSAGE frame delivered to a [`crate::Subscription`].
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct ReceivedMessage {
    /// The MESSAGE frame as received.
    pub frame: Frame,
}

impl ReceivedMessage {
    /// The message body.
    pub fn body(&self) -> &Bytes {
        &self.frame.body
    }

    /// The first header called `name`.
    pub fn header(&self, name: &str) -> Option<&str> {
        self.frame.get(name)
    }

    /// The `message-id` header.
    pub fn message_id(&self) -> Option<&str> {
        self.frame.get("message-id")
    }

    /// The `destination` header.
    pub fn destination(&self) -> Option<&str> {
        self.frame.get("destination")
    }

    /// The `subscription` header: the id of the subscription it was delivered to.
    pub fn subscription(&self) -> Option<&str> {
        self.frame.get("subscription")
    }

    /// Whether the server says it delivered this message before (`redelivered:true`).
    pub fn redelivered(&self) -> bool {
        self.frame.get("redelivered") == Some("true")
    }
}
