//! Sends: a message from a producer, held by producer flow control or handed to the core, and
//! answered (Response or ProducerAck) once stored.

use std::sync::Arc;

use bytes::Bytes;
use protocol::openwire::{self as ow, Command, Throwable};
use store::Message;

use crate::core::{held_sends_refusal, CoreError, SendAdmission};
use crate::security::Action;

use super::{
    exception_response, mapping, response, Connection, HeldSend, Refusal, JMS_EXCEPTION,
    RESOURCE_ALLOCATION,
};

impl Connection {
    pub(super) fn send(&mut self, id: i32, required: bool, message: ow::Message) {
        let core = self.context.core.clone();
        let mapped = mapping::message_from(&message, core.next_message_id());
        let stored = match mapped {
            Ok(m) => Arc::new(m),
            Err(error) => return self.answer(id, required, Err(error.into())),
        };
        if let Err(refusal) = self.authorize(Action::Write, &stored.destination) {
            return self.answer(id, required, Err(refusal));
        }
        let size = 1024
            + message.content.as_ref().map_or(0, Bytes::len)
            + message.marshalled_properties.as_ref().map_or(0, Bytes::len);
        let send = HeldSend { id, required, producer: message.producer_id, size };
        if message.transaction_id.is_none() {
            // Producer flow control: a send that finds no room, or earlier sends of its
            // producer waiting, is held while the connection goes on reading; its Response (a
            // synchronous send) or ProducerAck (an asynchronous one with a window) goes out
            // once it is accepted, which is what paces the client.
            let key = send.producer.clone();
            let connection = self.session.connection();
            return match self.held.admit(&core, connection, key, send, stored) {
                SendAdmission::Now(send, stored) => self.submit(send, stored, None),
                SendAdmission::Held { forced } => {
                    if let Some(oldest) = forced {
                        self.admitted(oldest, Ok(()));
                    }
                }
                SendAdmission::Refused(send) => {
                    let refusal = Refusal::new(RESOURCE_ALLOCATION, held_sends_refusal());
                    self.refuse_send(&send, refusal)
                }
            };
        }
        self.submit(send, stored, message.transaction_id.as_ref());
    }

    /// A held send's wait ended: it is sent now, or refused (no room, per the settings).
    pub(super) fn admitted(
        &mut self,
        (send, message): (HeldSend, Arc<Message>),
        room: Result<(), CoreError>,
    ) {
        match room {
            Ok(()) => self.submit(send, message, None),
            Err(error) => {
                self.refuse_send(&send, Refusal::new(RESOURCE_ALLOCATION, error.to_string()))
            }
        }
    }

    /// Tells the client a send was refused: an ExceptionResponse for a synchronous send; for
    /// an asynchronous one, which has no response, a ConnectionError (the JMS client hands it
    /// to the connection's exception listener and stays connected).
    pub(super) fn refuse_send(&mut self, send: &HeldSend, refusal: Refusal) {
        tracing::info!(peer = %self.peer, message = %refusal.message, "send refused");
        if send.required {
            self.reply(exception_response(send.id, refusal));
        } else {
            let error = ow::ConnectionError {
                exception: Some(Throwable::new(refusal.class, refusal.message)),
                ..Default::default()
            };
            self.reply(Command::ConnectionError(Box::new(error)));
        }
    }

    /// Hands a message to the core and queues its answer: the Response of a synchronous send,
    /// the ProducerAck of an asynchronous one with a producer window, once stored.
    pub(super) fn submit(
        &mut self,
        send: HeldSend,
        stored: Arc<Message>,
        txn: Option<&ow::TransactionId>,
    ) {
        let HeldSend { id, required, producer, size } = send;
        let core = self.context.core.clone();
        let connection = self.session.connection();
        let transactional = txn.is_some();
        let completion = match self.transaction_of(txn) {
            Ok(transaction) => core.send(stored, connection, transaction),
            Err(refusal) => return self.answer(id, required, Err(refusal)),
        };
        let completion = match completion {
            Ok(c) => c,
            Err(error) => {
                if let CoreError::Store(e) = &error {
                    tracing::error!(error = %e, "store refused a message");
                }
                return self.answer(id, required, Err(error.into()));
            }
        };
        if let Some(registration) =
            producer.as_ref().and_then(|p| self.producer_registrations.get(p))
        {
            registration.sent();
        }
        let window = producer.as_ref().and_then(|p| self.producers.get(p)).copied();
        if required {
            if transactional {
                return self.reply(response(id));
            }
            self.pending.push_back(Box::pin(async move {
                Some(match completion.await {
                    Ok(()) => response(id),
                    Err(error) => {
                        tracing::error!(%error, "store refused a message");
                        exception_response(
                            id,
                            Refusal::new(JMS_EXCEPTION, format!("message not stored: {error}")),
                        )
                    }
                })
            }));
        } else if window.is_some_and(|w| w > 0) {
            let ack = Command::ProducerAck(Box::new(ow::ProducerAck {
                producer_id: producer,
                size: size as i32,
                ..Default::default()
            }));
            self.pending.push_back(Box::pin(async move {
                let _ = completion.await;
                Some(ack)
            }));
        }
    }
}
