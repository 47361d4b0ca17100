//! The core's side of MQTT's QoS 2 state ([`crate::core::exactly_once`]): the adapter asks
//! through these, the table and the store stay the core's.

use std::sync::Arc;

use store::{Completion, Message, MessageId};

use super::Core;
use crate::core::exactly_once::{received_queue, ExactlyOnceMarks, SessionMarks};
use crate::core::types::{ConnectionId, CoreError};

impl Core {
    /// The QoS 2 state `client`'s persistent session left (empty for a new session).
    pub fn exactly_once_marks(&self, client: &str) -> SessionMarks {
        self.exactly_once.of(client)
    }

    /// Sends a QoS 2 PUBLISH of `client` with `packet` (as [`Core::send`]) together with its
    /// received mark: the completion resolves when both are durable, and a resend of the
    /// PUBLISH is known by [`Core::exactly_once_marks`] from then on, across restarts.
    pub fn send_exactly_once(
        &self,
        message: Message,
        connection: ConnectionId,
        client: &str,
        packet: u16,
    ) -> Result<Completion, CoreError> {
        let mut message = message;
        ExactlyOnceMarks::mark_received_message(&mut message, client, packet);
        let message = Arc::new(message);
        let completion =
            self.send_storing(message.clone(), connection, None, Some(received_queue()))?;
        self.exactly_once.received(&message);
        Ok(completion)
    }

    /// PUBREL of `client`'s `packet`: the received mark goes; PUBCOMP waits for the completion.
    pub fn release_exactly_once(&self, client: &str, packet: u16) -> Completion {
        self.exactly_once.release_received(&*self.store, client, packet)
    }

    /// PUBREC of `client`'s QoS 2 delivery `packet` of `delivered`: the released mark, durable
    /// when the completion resolves (then the delivery may be acknowledged and PUBREL sent).
    pub fn mark_exactly_once_released(
        &self,
        client: &str,
        packet: u16,
        delivered: MessageId,
    ) -> Completion {
        let id = self.next_message_id();
        self.exactly_once.mark_released(&*self.store, client, packet, delivered, id)
    }

    /// PUBCOMP of `client`'s delivery `packet`: the released mark goes.
    pub fn complete_exactly_once(&self, client: &str, packet: u16) -> Completion {
        self.exactly_once.complete_released(&*self.store, client, packet)
    }

    /// `client`'s session ended (clean start, expiry): its QoS 2 state goes.
    pub fn forget_exactly_once(&self, client: &str) -> Completion {
        self.exactly_once.forget(&*self.store, client)
    }
}
