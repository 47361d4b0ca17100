//! [`Message`]: the seven JMS message types share one layout; the type byte says how the
//! content is to be read ([`MessageType`]).

use super::{
    data_type, BrokerId, ConsumerId, DataStructure, Destination, MessageId, ProducerId,
    TransactionId,
};
use crate::openwire::error::WireError;
use crate::openwire::marshal::{wire_struct, Decoder, Encoder, WireObject};

/// The JMS message type, which decides how [`Message::content`] is laid out.
#[derive(Debug, Clone, Copy, Default, PartialEq, Eq, Hash)]
pub enum MessageType {
    /// `javax.jms.Message`: no body.
    #[default]
    Message,
    /// `BytesMessage`: raw bytes (compressed: a 4-byte length, then zlib).
    Bytes,
    /// `MapMessage`: a primitive map.
    Map,
    /// `ObjectMessage`: a serialized Java object.
    Object,
    /// `StreamMessage`: a sequence of typed values.
    Stream,
    /// `TextMessage`: an int length and modified UTF-8.
    Text,
    /// `BlobMessage`: a reference to out-of-band content ([`BlobInfo`]).
    Blob,
}

impl MessageType {
    /// The type byte.
    pub fn data_type(self) -> u8 {
        match self {
            MessageType::Message => data_type::ACTIVEMQ_MESSAGE,
            MessageType::Bytes => data_type::ACTIVEMQ_BYTES_MESSAGE,
            MessageType::Map => data_type::ACTIVEMQ_MAP_MESSAGE,
            MessageType::Object => data_type::ACTIVEMQ_OBJECT_MESSAGE,
            MessageType::Stream => data_type::ACTIVEMQ_STREAM_MESSAGE,
            MessageType::Text => data_type::ACTIVEMQ_TEXT_MESSAGE,
            MessageType::Blob => data_type::ACTIVEMQ_BLOB_MESSAGE,
        }
    }

    /// The message type of type byte `t`.
    pub fn from_data_type(t: u8) -> Option<MessageType> {
        Some(match t {
            data_type::ACTIVEMQ_MESSAGE => MessageType::Message,
            data_type::ACTIVEMQ_BYTES_MESSAGE => MessageType::Bytes,
            data_type::ACTIVEMQ_MAP_MESSAGE => MessageType::Map,
            data_type::ACTIVEMQ_OBJECT_MESSAGE => MessageType::Object,
            data_type::ACTIVEMQ_STREAM_MESSAGE => MessageType::Stream,
            data_type::ACTIVEMQ_TEXT_MESSAGE => MessageType::Text,
            data_type::ACTIVEMQ_BLOB_MESSAGE => MessageType::Blob,
            _ => return None,
        })
    }
}

/// The extra fields of a BlobMessage.
#[derive(Debug, Clone, Default, PartialEq, Eq, Hash)]
pub struct BlobInfo {
    /// Where the content is.
    pub remote_blob_url: Option<String>,
    /// Its MIME type.
    pub mime_type: Option<String>,
    /// Whether the broker deleted it.
    pub deleted_by_broker: bool,
}

wire_struct! {
    /// A JMS message. The content and the properties stay in their marshalled form, so the
    /// broker forwards them untouched; see `body.rs` for reading and building them
    /// ([`Message::text`], [`Message::properties`], ...).
    pub struct Message (command) {
        /// The JMS message type (from the type byte; not a field on the wire).
        body_type: MessageType = Skip,
        /// The producer.
        producer_id: Option<ProducerId> = Cached,
        /// Where it is sent.
        destination: Option<Destination> = Cached,
        /// The transaction it is sent in.
        transaction_id: Option<TransactionId> = Cached,
        /// The destination before a redirect (dead letter queue, virtual topic...).
        original_destination: Option<Destination> = Cached,
        /// The message id.
        message_id: Option<MessageId> = Nested,
        /// The transaction before a redirect.
        original_transaction_id: Option<TransactionId> = Cached,
        /// `JMSXGroupID`.
        group_id: Option<String> = Str,
        /// `JMSXGroupSeq`.
        group_sequence: i32 = Int,
        /// `JMSCorrelationID`.
        correlation_id: Option<String> = Str,
        /// `JMSDeliveryMode` is PERSISTENT.
        persistent: bool = Bool,
        /// `JMSExpiration` in milliseconds since the epoch (0: never).
        expiration: i64 = Long,
        /// `JMSPriority` (0-9).
        priority: i8 = Byte,
        /// `JMSReplyTo`.
        reply_to: Option<Destination> = Nested,
        /// `JMSTimestamp` in milliseconds since the epoch.
        timestamp: i64 = Long,
        /// `JMSType`.
        jms_type: Option<String> = Str,
        /// The body, marshalled as the message type says (deflated when `compressed`).
        content: Option<bytes::Bytes> = Bytes,
        /// The properties as a marshalled primitive map.
        marshalled_properties: Option<bytes::Bytes> = Bytes,
        /// A data structure the message is about (advisory messages).
        data_structure: Option<Box<DataStructure>> = Nested,
        /// The consumer the message is for (set by the broker).
        target_consumer_id: Option<ConsumerId> = Cached,
        /// The content is deflated.
        compressed: bool = Bool,
        /// Times redelivered.
        redelivery_counter: i32 = Int,
        /// Brokers it came through.
        broker_path: Option<Vec<BrokerId>> = Array,
        /// When it arrived at the broker.
        arrival: i64 = Long,
        /// `JMSXUserID`.
        user_id: Option<String> = Str,
        /// Received over a demand-forwarding bridge.
        received_by_df_bridge: bool = Bool,
        /// May be dropped under load (version 2 on).
        droppable: bool = Bool @ 2,
        /// Brokers of the cluster.
        cluster: Option<Vec<BrokerId>> = Array @ 2,
        /// When the broker received it.
        broker_in_time: i64 = Long @ 2,
        /// When the broker dispatched it.
        broker_out_time: i64 = Long @ 2,
        /// `JMSXGroupFirstForConsumer` (version 10 on).
        jmsx_group_first_for_consumer: bool = Bool @ 10,
        /// BlobMessage fields (only for [`MessageType::Blob`]).
        blob: Option<BlobInfo> = Skip,
    }
}

impl Message {
    /// An empty message of `body_type`.
    pub fn new(body_type: MessageType) -> Message {
        Message { body_type, ..Message::default() }
    }

    pub(crate) fn write_fields(&self, e: &mut Encoder) -> Result<(), WireError> {
        self.write_declared(e)?;
        if self.body_type == MessageType::Blob {
            let blob = self.blob.clone().unwrap_or_default();
            e.string(blob.remote_blob_url.as_deref())?;
            e.string(blob.mime_type.as_deref())?;
            e.bool(blob.deleted_by_broker);
        }
        Ok(())
    }

    pub(crate) fn read_fields(
        body_type: MessageType,
        d: &mut Decoder,
    ) -> Result<Message, WireError> {
        let mut m = Message::read_declared(d)?;
        m.body_type = body_type;
        if body_type == MessageType::Blob {
            m.blob = Some(BlobInfo {
                remote_blob_url: d.string()?,
                mime_type: d.string()?,
                deleted_by_broker: d.bool()?,
            });
        }
        Ok(m)
    }
}

impl WireObject for Message {
    const EXPECTED: &'static str = "message";
    fn data_type(&self) -> u8 {
        self.body_type.data_type()
    }
    fn write_fields(&self, e: &mut Encoder) -> Result<(), WireError> {
        Message::write_fields(self, e)
    }
    fn to_data(&self) -> DataStructure {
        DataStructure::Command(super::Command::Message(Box::new(self.clone())))
    }
    fn from_data(data: DataStructure) -> Result<Self, WireError> {
        match data {
            DataStructure::Command(super::Command::Message(m)) => Ok(*m),
            other => Err(WireError::UnexpectedType {
                expected: Self::EXPECTED,
                found: other.data_type(),
            }),
        }
    }
}
