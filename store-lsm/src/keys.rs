//! The key layout. Every key starts with one byte naming its keyspace; integers are
//! big-endian so that byte order is numeric order.
//!
//! ```text
//! 00 'v'                        -> schema version (u32)
//! 00 'n'                        -> next message id (u64): above every id ever added
//! 00 'c'                        -> present only after a clean close
//! 'k' qid(u32)                  -> QueueKey (prost): the interned name of a stored queue
//! 'd' Destination (prost)       -> (empty): a declared destination
//! 's' len(u32) client_id name   -> SubscriptionInfo (prost)
//! 'm' id(u64)                   -> body: priority(u8) Message (prost), stored once
//! 'q' qid(u32) 255-prio id(u64) -> reference: body length (u32)
//! 't' txn(u64) seq(u32)         -> a transactional add or ack, in order
//! 'x' txn(u64)                  -> (empty): the transaction is prepared
//! ```
//!
//! A queue's references sort by (255 - priority, id): higher priority first, then id, which
//! is [`PageKey`] order, so `read_page` is one range scan from just after the given key.
//! The reference's value carries the body's length so that an ack, which reads the
//! reference anyway to know that it exists, can account for the freed bytes without
//! reading the body.

use store::{MessageId, PageKey, SubscriptionKey, TxnId};

use crate::error::LsmError;

/// The layout version this build writes and reads.
pub const SCHEMA_VERSION: u32 = 1;

pub const SCHEMA: &[u8] = &[0, b'v'];
pub const NEXT_ID: &[u8] = &[0, b'n'];
pub const CLEAN: &[u8] = &[0, b'c'];

pub const QUEUE_NAME: u8 = b'k';
pub const DESTINATION: u8 = b'd';
pub const SUBSCRIPTION: u8 = b's';
pub const BODY: u8 = b'm';
pub const REFERENCE: u8 = b'q';
pub const TXN_OP: u8 = b't';
pub const TXN_PREPARED: u8 = b'x';

/// Every key of one keyspace.
pub fn keyspace(prefix: u8) -> (Vec<u8>, Vec<u8>) {
    (vec![prefix], vec![prefix + 1])
}

pub fn queue_name(qid: u32) -> Vec<u8> {
    let mut key = vec![QUEUE_NAME];
    key.extend_from_slice(&qid.to_be_bytes());
    key
}

pub fn destination(encoded: &[u8]) -> Vec<u8> {
    let mut key = Vec::with_capacity(1 + encoded.len());
    key.push(DESTINATION);
    key.extend_from_slice(encoded);
    key
}

pub fn subscription(sub: &SubscriptionKey) -> Vec<u8> {
    let mut key = vec![SUBSCRIPTION];
    key.extend_from_slice(&(sub.client_id.len() as u32).to_be_bytes());
    key.extend_from_slice(sub.client_id.as_bytes());
    key.extend_from_slice(sub.name.as_bytes());
    key
}

pub fn body(id: MessageId) -> Vec<u8> {
    let mut key = vec![BODY];
    key.extend_from_slice(&id.0.to_be_bytes());
    key
}

pub fn reference(qid: u32, page: PageKey) -> Vec<u8> {
    let mut key = Vec::with_capacity(14);
    key.push(REFERENCE);
    key.extend_from_slice(&qid.to_be_bytes());
    key.push(255 - page.priority);
    key.extend_from_slice(&page.id.0.to_be_bytes());
    key
}

/// The keys of queue `qid`'s references strictly after `after` (all of them for `None`).
pub fn references(qid: u32, after: Option<PageKey>) -> (Vec<u8>, Vec<u8>) {
    let start = match after {
        // The smallest key greater than `after`'s: every reference key has the same length.
        Some(after) => {
            let mut key = reference(qid, after);
            key.push(0);
            key
        }
        None => queue_prefix(REFERENCE, qid),
    };
    let mut end = vec![REFERENCE];
    match qid.checked_add(1) {
        Some(next) => end.extend_from_slice(&next.to_be_bytes()),
        None => end = vec![REFERENCE + 1],
    }
    (start, end)
}

fn queue_prefix(prefix: u8, qid: u32) -> Vec<u8> {
    let mut key = vec![prefix];
    key.extend_from_slice(&qid.to_be_bytes());
    key
}

/// The queue and page key a reference key names.
pub fn parse_reference(key: &[u8]) -> Result<(u32, PageKey), LsmError> {
    match key {
        [REFERENCE, q0, q1, q2, q3, inverted, id @ ..] if id.len() == 8 => {
            let mut id_bytes = [0u8; 8];
            id_bytes.copy_from_slice(id);
            Ok((
                u32::from_be_bytes([*q0, *q1, *q2, *q3]),
                PageKey { priority: 255 - inverted, id: MessageId(u64::from_be_bytes(id_bytes)) },
            ))
        }
        _ => Err(LsmError::corrupt(key, "not a reference key")),
    }
}

pub fn parse_queue_name(key: &[u8]) -> Result<u32, LsmError> {
    match key {
        [QUEUE_NAME, q0, q1, q2, q3] => Ok(u32::from_be_bytes([*q0, *q1, *q2, *q3])),
        _ => Err(LsmError::corrupt(key, "not a queue name key")),
    }
}

pub fn txn_op(txn: TxnId, seq: u32) -> Vec<u8> {
    let mut key = vec![TXN_OP];
    key.extend_from_slice(&txn.0.to_be_bytes());
    key.extend_from_slice(&seq.to_be_bytes());
    key
}

/// Every operation key of `txn`.
pub fn txn_ops(txn: TxnId) -> (Vec<u8>, Vec<u8>) {
    let mut start = vec![TXN_OP];
    start.extend_from_slice(&txn.0.to_be_bytes());
    let mut end = start.clone();
    end.extend_from_slice(&[0xff; 5]);
    (start, end)
}

pub fn parse_txn_op(key: &[u8]) -> Result<(TxnId, u32), LsmError> {
    if key.len() != 13 || key[0] != TXN_OP {
        return Err(LsmError::corrupt(key, "not a transaction operation key"));
    }
    Ok((TxnId(be_u64(&key[1..9])), u32::from_be_bytes([key[9], key[10], key[11], key[12]])))
}

pub fn txn_prepared(txn: TxnId) -> Vec<u8> {
    let mut key = vec![TXN_PREPARED];
    key.extend_from_slice(&txn.0.to_be_bytes());
    key
}

pub fn parse_txn_prepared(key: &[u8]) -> Result<TxnId, LsmError> {
    if key.len() != 9 || key[0] != TXN_PREPARED {
        return Err(LsmError::corrupt(key, "not a prepared-transaction key"));
    }
    Ok(TxnId(be_u64(&key[1..9])))
}

/// `bytes` (exactly 8) as a big-endian u64.
pub fn be_u64(bytes: &[u8]) -> u64 {
    let mut buf = [0u8; 8];
    buf.copy_from_slice(&bytes[..8]);
    u64::from_be_bytes(buf)
}

/// A u32 or u64 value, checked.
pub fn value_u32(key: &[u8], value: &[u8]) -> Result<u32, LsmError> {
    let bytes: [u8; 4] =
        value.try_into().map_err(|_| LsmError::corrupt(key, "expected a 4-byte value"))?;
    Ok(u32::from_be_bytes(bytes))
}

pub fn value_u64(key: &[u8], value: &[u8]) -> Result<u64, LsmError> {
    let bytes: [u8; 8] =
        value.try_into().map_err(|_| LsmError::corrupt(key, "expected an 8-byte value"))?;
    Ok(u64::from_be_bytes(bytes))
}

/// A transactional operation as stored under its `t` key.
#[derive(Debug, Clone, PartialEq, Eq)]
pub enum TxnRecord {
    /// `'A' priority(u8) id(u64) n(u32) qid(u32)*n body(priority + Message)`: the body is
    /// kept in the value so that a commit writes it without decoding the message.
    Add { page: PageKey, qids: Vec<u32>, body: Vec<u8> },
    /// `'K' qid(u32) priority(u8) id(u64)`.
    Ack { qid: u32, page: PageKey },
}

impl TxnRecord {
    pub fn encode(&self) -> Vec<u8> {
        match self {
            TxnRecord::Add { page, qids, body } => {
                let mut value = Vec::with_capacity(14 + 4 * qids.len() + body.len());
                value.push(b'A');
                value.push(page.priority);
                value.extend_from_slice(&page.id.0.to_be_bytes());
                value.extend_from_slice(&(qids.len() as u32).to_be_bytes());
                for qid in qids {
                    value.extend_from_slice(&qid.to_be_bytes());
                }
                value.extend_from_slice(body);
                value
            }
            TxnRecord::Ack { qid, page } => {
                let mut value = Vec::with_capacity(14);
                value.push(b'K');
                value.extend_from_slice(&qid.to_be_bytes());
                value.push(page.priority);
                value.extend_from_slice(&page.id.0.to_be_bytes());
                value
            }
        }
    }

    pub fn decode(key: &[u8], value: &[u8]) -> Result<TxnRecord, LsmError> {
        let short = || LsmError::corrupt(key, "transaction record too short");
        match value.first() {
            Some(b'A') => {
                let header = value.get(1..14).ok_or_else(short)?;
                let page = PageKey { priority: header[0], id: MessageId(be_u64(&header[1..9])) };
                let n = u32::from_be_bytes([header[9], header[10], header[11], header[12]]);
                let qids_end = 14usize.checked_add(4 * n as usize).ok_or_else(short)?;
                let qid_bytes = value.get(14..qids_end).ok_or_else(short)?;
                let qids = qid_bytes
                    .chunks_exact(4)
                    .map(|c| u32::from_be_bytes([c[0], c[1], c[2], c[3]]))
                    .collect();
                Ok(TxnRecord::Add { page, qids, body: value[qids_end..].to_vec() })
            }
            Some(b'K') => {
                let v = value.get(1..14).ok_or_else(short)?;
                Ok(TxnRecord::Ack {
                    qid: u32::from_be_bytes([v[0], v[1], v[2], v[3]]),
                    page: PageKey { priority: v[4], id: MessageId(be_u64(&v[5..13])) },
                })
            }
            _ => Err(LsmError::corrupt(key, "unknown transaction record kind")),
        }
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn reference_keys_sort_in_page_key_order() {
        let pages = [
            PageKey { priority: 9, id: MessageId(7) },
            PageKey { priority: 9, id: MessageId(300) },
            PageKey { priority: 4, id: MessageId(1) },
            PageKey { priority: 0, id: MessageId(2) },
        ];
        let keys: Vec<Vec<u8>> = pages.iter().map(|p| reference(3, *p)).collect();
        let mut sorted = keys.clone();
        sorted.sort();
        assert_eq!(keys, sorted);
        for (key, page) in keys.iter().zip(pages) {
            assert_eq!(parse_reference(key).expect("parses"), (3, page));
        }
        let (start, end) = references(3, Some(pages[1]));
        assert!(keys[1] < start && start < keys[2] && keys[3] < end);
        assert!(reference(4, pages[0]) >= end);
    }

    #[test]
    fn txn_records_round_trip() {
        let add = TxnRecord::Add {
            page: PageKey { priority: 7, id: MessageId(42) },
            qids: vec![1, 9],
            body: vec![7, 1, 2, 3],
        };
        let ack = TxnRecord::Ack { qid: 5, page: PageKey { priority: 4, id: MessageId(8) } };
        for record in [add, ack] {
            assert_eq!(TxnRecord::decode(b"t", &record.encode()).expect("decodes"), record);
        }
        assert!(TxnRecord::decode(b"t", b"A\x01").is_err());
    }
}
