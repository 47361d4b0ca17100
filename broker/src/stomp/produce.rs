//! SEND and the transaction frames (BEGIN, COMMIT, ABORT).

use crate::security::Action;
use std::sync::Arc;

use protocol::stomp::{Command, Frame};

use store::Message;

use super::{mapping, Connection, Fatal, Outcome, Pending};
use crate::core::{held_sends_refusal, CoreError, SendAdmission};

/// A SEND held by producer flow control until its destination has room.
pub(super) struct HeldSend {
    receipt: Option<String>,
}

impl Connection {
    pub(super) fn send(&mut self, frame: Frame) -> Result<(), Fatal> {
        let receipt = frame.get("receipt").map(str::to_owned);
        let transaction = frame.get("transaction").map(str::to_owned);
        let error_frame = |error: &dyn std::fmt::Display| {
            let mut e = Frame::error(&error.to_string(), "the message was not accepted");
            if let Some(r) = &receipt {
                e.push_header("receipt-id", r.as_str());
            }
            e
        };
        if let Some(name) = &transaction {
            if !self.session.has_transaction(name) {
                return Err(Fatal(error_frame(&format!("transaction {name} has not begun"))));
            }
        }
        let core = self.context.core.clone();
        let id = core.next_message_id();
        let message_id = match frame.get(mapping::MESSAGE_ID_HEADER) {
            Some(id) if crate::core::is_producer_message_id(id) => id.to_owned(),
            Some(id) => {
                return Err(Fatal(error_frame(&format!(
                    "invalid {} header `{id}`: expected ActiveMQ's form \
                     ID:<connection>:<session>:<producer>:<sequence>",
                    mapping::MESSAGE_ID_HEADER
                ))))
            }
            None => self.session.next_message_id(),
        };
        let mut created = Vec::new();
        let mapped =
            mapping::message_from_send(frame, id, message_id, &mut self.temp_names, &mut created);
        let message = match mapped {
            Ok(message) => Arc::new(message),
            Err(error) => return Err(Fatal(error_frame(&error))),
        };
        // Every temporary destination the SEND names first is authorized before any is
        // created.
        for destination in &created {
            let allowed = self.session.authorize_creation(destination);
            allowed.map_err(|denied| Fatal(error_frame(&denied)))?;
        }
        for destination in created {
            if let Err(error) = core.create_temporary(destination, self.session.connection()) {
                return Err(Fatal(error_frame(&error)));
            }
        }
        self.session
            .authorize(Action::Write, &message.destination)
            .map_err(|denied| Fatal(error_frame(&denied)))?;
        let message = if transaction.is_none() {
            // Producer flow control: held sends of a STOMP connection form one FIFO.
            let core = self.context.core.clone();
            let connection = self.session.connection();
            let held = HeldSend { receipt: receipt.clone() };
            match self.held.admit(&core, connection, (), held, message) {
                SendAdmission::Now(_, message) => message,
                SendAdmission::Held { forced } => {
                    if let Some(oldest) = forced {
                        self.admitted(oldest, Ok(()));
                    }
                    return Ok(());
                }
                SendAdmission::Refused(_) => {
                    let why = held_sends_refusal();
                    let error = format!("javax.jms.ResourceAllocationException: {why}");
                    return Err(Fatal(error_frame(&error)));
                }
            }
        } else {
            message
        };
        match self.submit(message, receipt, transaction) {
            Ok(Some(outcome)) => self.pending.push_back(outcome),
            Ok(None) => {}
            Err(frame) => return Err(Fatal(frame)),
        }
        Ok(())
    }

    /// A held send's wait ended: it is sent now, or refused (no room, per the settings). Its
    /// answer goes behind the responses queued meanwhile: the receipts of other frames (an ACK
    /// that drains the destination) never wait for a held SEND, or a client that waits for its
    /// ACK's receipt before acknowledging more would wait for ever. SENDs stay in order among
    /// themselves (they are held in order).
    pub(super) fn admitted(
        &mut self,
        (held, message): (HeldSend, Arc<Message>),
        room: Result<(), CoreError>,
    ) {
        let HeldSend { receipt } = held;
        let outcome: Pending = match room {
            Ok(()) => match self.submit(message, receipt, None) {
                Ok(Some(outcome)) => outcome,
                Ok(None) => Box::pin(async { Outcome { frame: None, close: false } }),
                Err(frame) => Box::pin(async move { Outcome { frame: Some(frame), close: true } }),
            },
            Err(error) => {
                tracing::info!(%error, "send refused: no room");
                let mut frame = Frame::error(
                    &format!("javax.jms.ResourceAllocationException: {error}"),
                    "the message was not accepted",
                );
                if let Some(r) = receipt {
                    frame.push_header("receipt-id", r);
                }
                // Like ActiveMQ, the connection stays open: the client may send again later.
                Box::pin(async move { Outcome { frame: Some(frame), close: false } })
            }
        };
        self.pending.push_back(outcome);
    }

    /// Hands `message` to the core; the answer to wait for, if any (a store completion, a
    /// receipt). `Err`: the ERROR frame to close with.
    fn submit(
        &mut self,
        message: Arc<Message>,
        receipt: Option<String>,
        transaction: Option<String>,
    ) -> Result<Option<Pending>, Frame> {
        let error_frame = |error: &dyn std::fmt::Display| {
            let mut e = Frame::error(&error.to_string(), "the message was not accepted");
            if let Some(r) = &receipt {
                e.push_header("receipt-id", r.as_str());
            }
            e
        };
        let core = self.context.core.clone();
        let connection = self.session.connection();
        let open = transaction.as_ref().and_then(|name| self.session.transaction(name.as_str()));
        let completion = match core.send(message, connection, open) {
            Ok(completion) => completion,
            Err(CoreError::Store(error)) => {
                tracing::error!(%error, "store refused a message");
                return Err(error_frame(&format!("message not stored: {error}")));
            }
            Err(error) => return Err(error_frame(&error)),
        };
        self.session.sent();
        if transaction.is_some() {
            // A transactional send is confirmed by the commit; its receipt means "received".
            self.receipt_for(receipt);
            return Ok(None);
        }
        if receipt.is_none() && completion.is_ready() {
            // Core::send reports a store that refused at once as an error above.
            return Ok(None);
        }
        Ok(Some(Box::pin(async move {
            match completion.await {
                Ok(()) => Outcome {
                    frame: receipt.map(|r| Frame::new(Command::Receipt).header("receipt-id", r)),
                    close: false,
                },
                Err(error) => {
                    tracing::error!(%error, "store refused a message");
                    let mut frame = Frame::error(
                        &format!("message not stored: {error}"),
                        "the message was not accepted",
                    );
                    if let Some(r) = receipt {
                        frame.push_header("receipt-id", r);
                    }
                    Outcome { frame: Some(frame), close: true }
                }
            }
        })))
    }

    fn transaction_name(frame: &Frame) -> Result<&str, Fatal> {
        frame.get("transaction").filter(|t| !t.is_empty()).ok_or_else(|| {
            Fatal::new(
                Some(frame),
                &format!("{} frame has no transaction header", frame.command.as_str()),
                "",
            )
        })
    }

    pub(super) fn begin(&mut self, frame: &Frame) -> Result<(), Fatal> {
        let name = Self::transaction_name(frame)?;
        if self.session.begin(name.to_owned()).is_none() {
            return Err(Fatal::new(
                Some(frame),
                &format!("transaction {name} has already begun"),
                "",
            ));
        }
        self.receipt(frame);
        Ok(())
    }

    pub(super) fn commit(&mut self, frame: &Frame) -> Result<(), Fatal> {
        let name = Self::transaction_name(frame)?;
        let Some(transaction) = self.session.end_transaction(name) else {
            return Err(Fatal::new(Some(frame), &format!("transaction {name} has not begun"), ""));
        };
        let committed = self.context.core.commit(transaction);
        let receipt = frame.get("receipt").map(str::to_owned);
        let name = name.to_owned();
        self.pending.push_back(Box::pin(async move {
            match committed.await {
                Ok(()) => Outcome {
                    frame: receipt.map(|r| Frame::new(Command::Receipt).header("receipt-id", r)),
                    close: false,
                },
                Err(error) => {
                    tracing::error!(%error, transaction = %name, "commit failed");
                    let mut frame = Frame::error(
                        &format!("transaction {name} was not committed: {error}"),
                        "its sends were discarded and its acknowledged messages will be redelivered",
                    );
                    if let Some(r) = receipt {
                        frame.push_header("receipt-id", r);
                    }
                    Outcome { frame: Some(frame), close: true }
                }
            }
        }));
        Ok(())
    }

    pub(super) fn abort(&mut self, frame: &Frame) -> Result<(), Fatal> {
        let name = Self::transaction_name(frame)?;
        let Some(transaction) = self.session.end_transaction(name) else {
            return Err(Fatal::new(Some(frame), &format!("transaction {name} has not begun"), ""));
        };
        // The rollback record need not be durable before we answer: recovery rolls back a
        // transaction that has no commit record anyway.
        drop(self.context.core.rollback(transaction));
        self.receipt(frame);
        Ok(())
    }

    /// Releases the session (its client id, transactions, consumers and temporary
    /// destinations; see [`Session::release`](crate::session::Session::release)).
    pub(super) fn release(&mut self) {
        self.subscriptions.clear();
        self.by_consumer.clear();
        self.session.release();
    }
}
