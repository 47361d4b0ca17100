//! Local transactions: begun lazily by the first transacted command or by TransactionInfo,
//! committed once durable, rolled back with the client's acknowledged messages given back to
//! it; XA is refused.

use protocol::openwire::{self as ow, transaction_type};

use crate::core::Transaction;

use super::{exception_response, response, xa_refusal, Connection, Refusal, JMS_EXCEPTION};

impl Connection {
    pub(super) fn transaction_of(
        &mut self,
        id: Option<&ow::TransactionId>,
    ) -> Result<Option<&mut Transaction>, Refusal> {
        match id {
            None => Ok(None),
            Some(ow::TransactionId::Xa(_)) => Err(xa_refusal()),
            Some(ow::TransactionId::Local(local)) => {
                // The client begins lazily; a send in an unknown transaction begins it.
                if let Some(transaction) = self.session.begin(local.clone()) {
                    transaction.keep_delivered_on_rollback();
                }
                Ok(self.session.transaction(local))
            }
        }
    }

    pub(super) fn transaction(&mut self, id: i32, required: bool, info: &ow::TransactionInfo) {
        let local = match &info.transaction_id {
            Some(ow::TransactionId::Local(local)) => local.clone(),
            Some(ow::TransactionId::Xa(_)) => return self.answer(id, required, Err(xa_refusal())),
            None => {
                return self.answer(
                    id,
                    required,
                    Err(Refusal::new(
                        JMS_EXCEPTION,
                        "transaction command without a transaction id",
                    )),
                )
            }
        };
        let core = self.context.core.clone();
        match info.transaction_type {
            transaction_type::BEGIN => {
                if let Some(transaction) = self.session.begin(local) {
                    transaction.keep_delivered_on_rollback();
                }
                self.answer(id, required, Ok(()));
            }
            transaction_type::COMMIT_ONE_PHASE => {
                self.transaction_acks.remove(&local);
                let Some(transaction) = self.session.end_transaction(&local) else {
                    // Nothing was sent or acknowledged in it.
                    return self.answer(id, required, Ok(()));
                };
                let committed = core.commit(transaction);
                self.pending.push_back(Box::pin(async move {
                    match committed.await {
                        Ok(()) => required.then(|| response(id)),
                        Err(error) => {
                            tracing::error!(%error, "commit failed");
                            Some(exception_response(
                                id,
                                Refusal::new(
                                    "javax.jms.TransactionRolledBackException",
                                    format!("the transaction was not committed: {error}"),
                                ),
                            ))
                        }
                    }
                }));
            }
            transaction_type::ROLLBACK => {
                if let Some(transaction) = self.session.end_transaction(&local) {
                    drop(core.rollback(transaction));
                }
                // In reverse, each to the front: the original order is restored.
                for (consumer, queue, message) in
                    self.transaction_acks.remove(&local).unwrap_or_default().into_iter().rev()
                {
                    if let Some(c) = self.consumers.get_mut(&consumer) {
                        c.delivered.push_front(queue, message);
                    }
                }
                self.answer(id, required, Ok(()));
            }
            _ => self.answer(id, required, Err(xa_refusal())),
        }
    }
}
