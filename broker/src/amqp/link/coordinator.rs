//! The transaction coordinator link: `declare` and `discharge`.

use bytes::Bytes;
use protocol::amqp::{condition, AmqpFrame, Body, Composite, DeliveryState, Message as Amqp};
use protocol::amqp::{Declare, Declared, Discharge};

use super::{link_error, settled_disposition, Connection, Event, Fatal};

impl Connection {
    /// A message to the transaction coordinator: declare or discharge.
    pub(in crate::amqp) fn coordinate(
        &mut self,
        channel: u16,
        handle: u32,
        delivery_id: Option<u32>,
        amqp: Amqp,
    ) -> Result<(), Fatal> {
        let Body::Value(value) = amqp.body else {
            return Err(Fatal::close(
                condition::DECODE_ERROR,
                "a coordinator message without an amqp-value body",
            ));
        };
        let core = self.context.core.clone();
        if Declare::from_value(value.clone()).is_ok() {
            let id = Bytes::copy_from_slice(&self.next_transaction.to_be_bytes());
            self.next_transaction += 1;
            self.client.begin(id.clone());
            if let Some(delivery_id) = delivery_id {
                let state = DeliveryState::Declared(Declared { txn_id: id });
                self.send_frame(AmqpFrame::new(channel, settled_disposition(delivery_id, state)));
            }
        } else if let Ok(discharge) = Discharge::from_value(value) {
            match self.client.end_transaction(&discharge.txn_id) {
                None => {
                    let error = link_error(
                        protocol::amqp::transactions::condition::UNKNOWN_ID,
                        "no such transaction",
                    );
                    self.settle_incoming(channel, handle, delivery_id, Err(error));
                    return Ok(());
                }
                Some(transaction) if discharge.fail() => {
                    drop(core.rollback(transaction));
                    if let Some(id) = delivery_id {
                        self.send_frame(AmqpFrame::new(
                            channel,
                            settled_disposition(id, DeliveryState::Accepted),
                        ));
                    }
                }
                Some(transaction) => {
                    let committed = core.commit(transaction);
                    self.pending.push(Box::pin(async move {
                        let result = committed.await.map_err(|e| e.to_string());
                        Event::Discharged { channel, delivery_id, result }
                    }));
                }
            }
        } else {
            let error = link_error(condition::DECODE_ERROR, "expected declare or discharge");
            self.settle_incoming(channel, handle, delivery_id, Err(error));
            return Ok(());
        }
        self.top_up(channel, handle);
        Ok(())
    }
}
