//! Ids and destinations: the small values that commands refer to (and that the marshalling
//! cache exists for).

use super::{data_object, data_type, DataStructure};
use crate::openwire::error::WireError;
use crate::openwire::marshal::{wire_struct, Decoder, Encoder, WireObject};

wire_struct! {
    /// A connection, as the client names it (`ID:host-port-time-n:k`).
    pub struct ConnectionId (plain) {
        /// The id text.
        value: String = Str,
    }
}
data_object!(ConnectionId, CONNECTION_ID, "connection id");

wire_struct! {
    /// A session of a connection.
    pub struct SessionId (plain) {
        /// The connection's id text.
        connection_id: String = Str,
        /// The session number within the connection.
        value: i64 = Long,
    }
}
data_object!(SessionId, SESSION_ID, "session id");

wire_struct! {
    /// A consumer of a session.
    pub struct ConsumerId (plain) {
        /// The connection's id text.
        connection_id: String = Str,
        /// The session number.
        session_id: i64 = Long,
        /// The consumer number within the session.
        value: i64 = Long,
    }
}
data_object!(ConsumerId, CONSUMER_ID, "consumer id");

wire_struct! {
    /// A producer of a session. (On the wire the producer number comes before the session's.)
    pub struct ProducerId (plain) {
        /// The connection's id text.
        connection_id: String = Str,
        /// The producer number within the session.
        value: i64 = Long,
        /// The session number.
        session_id: i64 = Long,
    }
}
data_object!(ProducerId, PRODUCER_ID, "producer id");

wire_struct! {
    /// A broker.
    pub struct BrokerId (plain) {
        /// The id text.
        value: String = Str,
    }
}
data_object!(BrokerId, BROKER_ID, "broker id");

wire_struct! {
    /// A message: its producer and the producer's sequence number.
    pub struct MessageId (plain) {
        /// The id as text, when the producer set one (version 10 on).
        text_view: Option<String> = Str @ 10,
        /// The producer.
        producer_id: Option<ProducerId> = Cached,
        /// The producer's sequence number.
        producer_sequence_id: i64 = Long,
        /// The broker's sequence number (0 from clients).
        broker_sequence_id: i64 = Long,
    }
}
data_object!(MessageId, MESSAGE_ID, "message id");

wire_struct! {
    /// A local (non-XA) transaction of a connection.
    pub struct LocalTransactionId (plain) {
        /// The transaction number within the connection.
        value: i64 = Long,
        /// The connection.
        connection_id: Option<ConnectionId> = Cached,
    }
}
data_object!(LocalTransactionId, ACTIVEMQ_LOCAL_TRANSACTION_ID, "local transaction id");

wire_struct! {
    /// An XA transaction branch (`javax.transaction.xa.Xid`).
    pub struct XaTransactionId (plain) {
        /// The format id.
        format_id: i32 = Int,
        /// The global transaction id.
        global_transaction_id: Option<bytes::Bytes> = Bytes,
        /// The branch qualifier.
        branch_qualifier: Option<bytes::Bytes> = Bytes,
    }
}
data_object!(XaTransactionId, ACTIVEMQ_XA_TRANSACTION_ID, "XA transaction id");

/// A transaction: local or XA.
#[derive(Debug, Clone, PartialEq, Eq, Hash)]
pub enum TransactionId {
    /// A local transaction.
    Local(LocalTransactionId),
    /// An XA transaction.
    Xa(XaTransactionId),
}

impl WireObject for TransactionId {
    const EXPECTED: &'static str = "transaction id";
    fn data_type(&self) -> u8 {
        match self {
            TransactionId::Local(t) => t.data_type(),
            TransactionId::Xa(t) => t.data_type(),
        }
    }
    fn write_fields(&self, e: &mut Encoder) -> Result<(), WireError> {
        match self {
            TransactionId::Local(t) => t.write_declared(e),
            TransactionId::Xa(t) => t.write_declared(e),
        }
    }
    fn to_data(&self) -> DataStructure {
        match self {
            TransactionId::Local(t) => t.to_data(),
            TransactionId::Xa(t) => t.to_data(),
        }
    }
    fn from_data(data: DataStructure) -> Result<Self, WireError> {
        match data {
            DataStructure::LocalTransactionId(t) => Ok(TransactionId::Local(t)),
            DataStructure::XaTransactionId(t) => Ok(TransactionId::Xa(t)),
            other => Err(WireError::UnexpectedType {
                expected: Self::EXPECTED,
                found: other.data_type(),
            }),
        }
    }
    fn is_data(&self, data: &DataStructure) -> bool {
        match (self, data) {
            (TransactionId::Local(t), DataStructure::LocalTransactionId(d)) => t == d,
            (TransactionId::Xa(t), DataStructure::XaTransactionId(d)) => t == d,
            _ => false,
        }
    }
    fn hash_fields(&self, state: &mut rustc_hash::FxHasher) {
        match self {
            TransactionId::Local(t) => std::hash::Hash::hash(t, state),
            TransactionId::Xa(t) => std::hash::Hash::hash(t, state),
        }
    }
}

/// The four kinds of destination.
#[derive(Debug, Clone, Copy, PartialEq, Eq, Hash)]
pub enum DestinationKind {
    /// A queue (type 100).
    Queue,
    /// A topic (type 101).
    Topic,
    /// A temporary queue (type 102).
    TempQueue,
    /// A temporary topic (type 103).
    TempTopic,
}

impl DestinationKind {
    /// The type byte.
    pub fn data_type(self) -> u8 {
        match self {
            DestinationKind::Queue => data_type::ACTIVEMQ_QUEUE,
            DestinationKind::Topic => data_type::ACTIVEMQ_TOPIC,
            DestinationKind::TempQueue => data_type::ACTIVEMQ_TEMP_QUEUE,
            DestinationKind::TempTopic => data_type::ACTIVEMQ_TEMP_TOPIC,
        }
    }

    /// The kind of type byte `t`.
    pub fn from_data_type(t: u8) -> Option<DestinationKind> {
        Some(match t {
            data_type::ACTIVEMQ_QUEUE => DestinationKind::Queue,
            data_type::ACTIVEMQ_TOPIC => DestinationKind::Topic,
            data_type::ACTIVEMQ_TEMP_QUEUE => DestinationKind::TempQueue,
            data_type::ACTIVEMQ_TEMP_TOPIC => DestinationKind::TempTopic,
            _ => return None,
        })
    }
}

/// A queue or topic. The physical name may list several destinations separated by commas
/// (a composite destination) and may carry `?option=value` settings, as in ActiveMQ.
#[derive(Debug, Clone, PartialEq, Eq, Hash)]
pub struct Destination {
    /// Queue, topic or a temporary one.
    pub kind: DestinationKind,
    /// The name, as the client wrote it.
    pub physical_name: String,
}

impl Destination {
    /// A queue named `name`.
    pub fn queue(name: impl Into<String>) -> Destination {
        Destination { kind: DestinationKind::Queue, physical_name: name.into() }
    }

    /// A topic named `name`.
    pub fn topic(name: impl Into<String>) -> Destination {
        Destination { kind: DestinationKind::Topic, physical_name: name.into() }
    }

    pub(crate) fn read_fields(t: u8, d: &mut Decoder) -> Result<Destination, WireError> {
        let kind =
            DestinationKind::from_data_type(t).ok_or(WireError::UnknownType { data_type: t })?;
        let physical_name = d.string()?.ok_or(WireError::NullField("physical_name"))?;
        Ok(Destination { kind, physical_name })
    }
}

impl WireObject for Destination {
    const EXPECTED: &'static str = "destination";
    fn data_type(&self) -> u8 {
        self.kind.data_type()
    }
    fn write_fields(&self, e: &mut Encoder) -> Result<(), WireError> {
        e.string(Some(&self.physical_name))
    }
    fn to_data(&self) -> DataStructure {
        DataStructure::Destination(self.clone())
    }
    fn from_data(data: DataStructure) -> Result<Self, WireError> {
        match data {
            DataStructure::Destination(d) => Ok(d),
            other => Err(WireError::UnexpectedType {
                expected: Self::EXPECTED,
                found: other.data_type(),
            }),
        }
    }
    fn is_data(&self, data: &DataStructure) -> bool {
        matches!(data, DataStructure::Destination(d) if d == self)
    }
    fn hash_fields(&self, state: &mut rustc_hash::FxHasher) {
        std::hash::Hash::hash(self, state)
    }
}
