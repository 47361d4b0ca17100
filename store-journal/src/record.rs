//! Journal commands: one prost struct per record kind (the kind itself is in the frame
//! header, see [`frame`](crate::frame)). Field tags are part of the on-disk format: never
//! renumber them, only add new ones.
//!
//! Messages, destinations, queue keys and subscriptions are embedded as the shared records
//! of [`store::record`], so every engine writes them the same way. [`Command`] is the decoded
//! form the index applies; it leaves the message body encoded (reads decode it on demand).

use bytes::Bytes;
use prost::Message as _;
use store::record::{DestinationRecord, QueueKeyRecord, SubscriptionRecord};
use store::{
    Destination, MessageId, PageKey, QueueKey, StoreError, SubscriptionInfo, SubscriptionKey, TxnId,
};

/// The record kinds (the low 7 bits of the frame's kind byte). 0 is never written, so that
/// the zeros of a preallocated segment never parse as a record.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
#[repr(u8)]
pub enum Kind {
    AddMessage = 1,
    Ack = 2,
    AddDestination = 3,
    RemoveDestination = 4,
    AddSubscription = 5,
    RemoveSubscription = 6,
    Prepare = 7,
    Commit = 8,
    Rollback = 9,
    /// A live message rewritten forward by compaction: its body and the queues that still
    /// reference it.
    Relocate = 10,
    /// The next message id, written when adds were dropped from a batch (so that their ids
    /// are never handed out again).
    Watermark = 11,
}

impl Kind {
    pub fn from_u8(value: u8) -> Option<Kind> {
        Some(match value {
            1 => Kind::AddMessage,
            2 => Kind::Ack,
            3 => Kind::AddDestination,
            4 => Kind::RemoveDestination,
            5 => Kind::AddSubscription,
            6 => Kind::RemoveSubscription,
            7 => Kind::Prepare,
            8 => Kind::Commit,
            9 => Kind::Rollback,
            10 => Kind::Relocate,
            11 => Kind::Watermark,
            _ => return None,
        })
    }
}

/// `AddMessage` and `Relocate`: the body once, the queues referencing it.
#[derive(Clone, PartialEq, prost::Message)]
pub struct AddMessageRecord {
    #[prost(uint64, tag = "1")]
    pub id: u64,
    /// The clamped priority (0-9) the references are filed under.
    #[prost(uint32, tag = "2")]
    pub priority: u32,
    /// A [`store::record::MessageRecord`], encoded.
    #[prost(bytes = "bytes", tag = "3")]
    pub message: Bytes,
    #[prost(message, repeated, tag = "4")]
    pub queues: Vec<QueueKeyRecord>,
    #[prost(uint64, optional, tag = "5")]
    pub txn: Option<u64>,
}

#[derive(Clone, PartialEq, prost::Message)]
pub struct AckRecord {
    #[prost(message, optional, tag = "1")]
    pub queue: Option<QueueKeyRecord>,
    #[prost(uint32, tag = "2")]
    pub priority: u32,
    #[prost(uint64, tag = "3")]
    pub id: u64,
    #[prost(uint64, optional, tag = "4")]
    pub txn: Option<u64>,
}

#[derive(Clone, PartialEq, prost::Message)]
pub struct SubscriptionKeyRecord {
    #[prost(string, tag = "1")]
    pub client_id: String,
    #[prost(string, tag = "2")]
    pub name: String,
}

#[derive(Clone, PartialEq, prost::Message)]
pub struct TxnRecord {
    #[prost(uint64, tag = "1")]
    pub txn: u64,
}

#[derive(Clone, PartialEq, prost::Message)]
pub struct WatermarkRecord {
    #[prost(uint64, tag = "1")]
    pub next_message_id: u64,
}

/// A decoded journal command, as the index applies it. The message body stays encoded.
#[derive(Debug, Clone)]
pub enum Command {
    AddMessage { id: MessageId, priority: u8, queues: Vec<QueueKey>, txn: Option<TxnId> },
    Ack { queue: QueueKey, key: PageKey, txn: Option<TxnId> },
    AddDestination(Destination),
    RemoveDestination(Destination),
    AddSubscription(SubscriptionInfo),
    RemoveSubscription(SubscriptionKey),
    Prepare(TxnId),
    Commit(TxnId),
    Rollback(TxnId),
    Relocate { id: MessageId, priority: u8, queues: Vec<QueueKey> },
    Watermark(MessageId),
}

fn corrupt(what: &str, reason: impl std::fmt::Display) -> StoreError {
    StoreError::Corrupt { location: format!("journal {what} record"), reason: reason.to_string() }
}

fn priority(value: u32, what: &str) -> Result<u8, StoreError> {
    match u8::try_from(value) {
        Ok(p) if p <= 9 => Ok(p),
        _ => Err(corrupt(what, format!("priority {value} out of range"))),
    }
}

fn queue_keys(records: Vec<QueueKeyRecord>) -> Result<Vec<QueueKey>, StoreError> {
    records.into_iter().map(QueueKey::try_from).collect()
}

/// Decodes the payload of a record of `kind`.
pub fn decode(kind: Kind, payload: &[u8]) -> Result<Command, StoreError> {
    let name = format!("{kind:?}");
    let bad = |e: prost::DecodeError| corrupt(&name, e);
    Ok(match kind {
        Kind::AddMessage | Kind::Relocate => {
            let record = AddMessageRecord::decode(payload).map_err(bad)?;
            let id = MessageId(record.id);
            let priority = priority(record.priority, &name)?;
            let queues = queue_keys(record.queues)?;
            if kind == Kind::AddMessage {
                Command::AddMessage { id, priority, queues, txn: record.txn.map(TxnId) }
            } else {
                Command::Relocate { id, priority, queues }
            }
        }
        Kind::Ack => {
            let record = AckRecord::decode(payload).map_err(bad)?;
            let queue = record.queue.ok_or_else(|| corrupt(&name, "missing queue"))?;
            Command::Ack {
                queue: QueueKey::try_from(queue)?,
                // An ack may name any priority (one above 9 matches nothing).
                key: PageKey {
                    priority: u8::try_from(record.priority)
                        .map_err(|_| corrupt(&name, "priority out of range"))?,
                    id: MessageId(record.id),
                },
                txn: record.txn.map(TxnId),
            }
        }
        Kind::AddDestination | Kind::RemoveDestination => {
            let destination =
                Destination::try_from(DestinationRecord::decode(payload).map_err(bad)?)?;
            if kind == Kind::AddDestination {
                Command::AddDestination(destination)
            } else {
                Command::RemoveDestination(destination)
            }
        }
        Kind::AddSubscription => Command::AddSubscription(SubscriptionInfo::try_from(
            SubscriptionRecord::decode(payload).map_err(bad)?,
        )?),
        Kind::RemoveSubscription => {
            let record = SubscriptionKeyRecord::decode(payload).map_err(bad)?;
            Command::RemoveSubscription(SubscriptionKey {
                client_id: record.client_id.into(),
                name: record.name.into(),
            })
        }
        Kind::Prepare | Kind::Commit | Kind::Rollback => {
            let txn = TxnId(TxnRecord::decode(payload).map_err(bad)?.txn);
            match kind {
                Kind::Prepare => Command::Prepare(txn),
                Kind::Commit => Command::Commit(txn),
                _ => Command::Rollback(txn),
            }
        }
        Kind::Watermark => Command::Watermark(MessageId(
            WatermarkRecord::decode(payload).map_err(bad)?.next_message_id,
        )),
    })
}

pub fn encode_add(
    id: MessageId,
    priority: u8,
    message: Bytes,
    queues: &[QueueKey],
    txn: Option<TxnId>,
) -> Vec<u8> {
    AddMessageRecord {
        id: id.0,
        priority: u32::from(priority),
        message,
        queues: queues.iter().map(QueueKeyRecord::from).collect(),
        txn: txn.map(|t| t.0),
    }
    .encode_to_vec()
}

/// [`encode_add`] of `message` as [`store::record::encode_message`] encodes it, in one pass:
/// the body is copied once, into the record (encoding the message on its own first and then
/// copying it into the record cost a copy and an allocation per message). The same bytes.
pub fn encode_add_message(
    message: &store::Message,
    priority: u8,
    queues: &[QueueKey],
    txn: Option<TxnId>,
) -> Vec<u8> {
    use prost::encoding::{
        encode_key, encode_varint, encoded_len_varint, uint32, uint64, WireType,
    };
    let inner = store::record::MessageRecord::from(message);
    let inner_len = inner.encoded_len();
    let queues: Vec<QueueKeyRecord> = queues.iter().map(QueueKeyRecord::from).collect();
    let queues_len: usize = queues.iter().map(|q| 2 + q.encoded_len() + 8).sum();
    let mut buf =
        Vec::with_capacity(inner_len + encoded_len_varint(inner_len as u64) + queues_len + 32);
    // Field by field in tag order, with proto3's defaults left out, as prost writes them.
    if message.id.0 != 0 {
        uint64::encode(1, &message.id.0, &mut buf);
    }
    if priority != 0 {
        uint32::encode(2, &u32::from(priority), &mut buf);
    }
    if inner_len != 0 {
        encode_key(3, WireType::LengthDelimited, &mut buf);
        encode_varint(inner_len as u64, &mut buf);
        inner.encode_raw(&mut buf);
    }
    for queue in &queues {
        prost::encoding::message::encode(4, queue, &mut buf);
    }
    if let Some(txn) = txn {
        uint64::encode(5, &txn.0, &mut buf);
    }
    buf
}

pub fn encode_ack(queue: &QueueKey, key: PageKey, txn: Option<TxnId>) -> Vec<u8> {
    AckRecord {
        queue: Some(QueueKeyRecord::from(queue)),
        priority: u32::from(key.priority),
        id: key.id.0,
        txn: txn.map(|t| t.0),
    }
    .encode_to_vec()
}

pub fn encode_destination(destination: &Destination) -> Vec<u8> {
    DestinationRecord::from(destination).encode_to_vec()
}

pub fn encode_subscription(info: &SubscriptionInfo) -> Vec<u8> {
    SubscriptionRecord::from(info).encode_to_vec()
}

pub fn encode_subscription_key(key: &SubscriptionKey) -> Vec<u8> {
    SubscriptionKeyRecord { client_id: key.client_id.to_string(), name: key.name.to_string() }
        .encode_to_vec()
}

pub fn encode_txn(txn: TxnId) -> Vec<u8> {
    TxnRecord { txn: txn.0 }.encode_to_vec()
}

pub fn encode_watermark(next: MessageId) -> Vec<u8> {
    WatermarkRecord { next_message_id: next.0 }.encode_to_vec()
}

#[cfg(test)]
mod tests {
    use std::sync::Arc;

    use store::{Destination, Message, PropertyValue};

    use super::*;

    /// The one-pass encoding writes what encoding the message on its own and then wrapping
    /// it wrote, so journals written before and after read alike.
    #[test]
    fn an_add_encoded_in_one_pass_is_the_add_of_the_encoded_message() {
        let queue = QueueKey::destination(Destination::queue("Q"));
        let other = QueueKey::destination(Destination::queue("R"));
        let mut message = Message::new(MessageId(42), "ID:p-1:1:1:7", Destination::queue("Q"));
        message.body = Bytes::from(vec![b'x'; 1500]);
        message.properties.insert(Arc::from("n"), PropertyValue::Int(5));
        for (message, priority, txn) in [
            (message.clone(), 4, None),
            (message.clone(), 0, Some(TxnId(9))),
            (Message::new(MessageId(0), "", Destination::queue("Q")), 0, None),
        ] {
            let queues = [queue.clone(), other.clone()];
            let two_passes = encode_add(
                message.id,
                priority,
                Bytes::from(store::record::encode_message(&message)),
                &queues,
                txn,
            );
            assert_eq!(encode_add_message(&message, priority, &queues, txn), two_passes);
        }
    }
}
