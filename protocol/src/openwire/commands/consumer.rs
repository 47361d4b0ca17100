//! Producers, consumers, acknowledgements, dispatch, destinations and transactions.

use super::{
    data_object, BrokerId, ConnectionId, ConsumerId, DataStructure, Destination, Message,
    MessageId, ProducerId, Throwable, TransactionId,
};
use crate::openwire::error::WireError;
use crate::openwire::marshal::{wire_struct, Decoder, Encoder, WireObject};

/// `MessageAck.ack_type` values.
pub mod ack_type {
    /// Delivered to the consumer, not yet consumed (extends the prefetch window).
    pub const DELIVERED: i8 = 0;
    /// Poison: the message failed too often; send it to the dead letter queue.
    pub const POISON: i8 = 1;
    /// Consumed.
    pub const STANDARD: i8 = 2;
    /// Redelivered (rolled back in the client).
    pub const REDELIVERED: i8 = 3;
    /// One message consumed, not a range.
    pub const INDIVIDUAL: i8 = 4;
    /// Did not match the consumer's selector (durable topic subscriptions).
    pub const UNMATCHED: i8 = 5;
    /// Expired in the client.
    pub const EXPIRED: i8 = 6;
}

/// `DestinationInfo.operation_type` values.
pub mod destination_operation {
    /// Create the destination.
    pub const ADD: i8 = 0;
    /// Delete the destination.
    pub const REMOVE: i8 = 1;
}

/// `TransactionInfo.transaction_type` values.
pub mod transaction_type {
    /// Begin.
    pub const BEGIN: i8 = 0;
    /// XA prepare.
    pub const PREPARE: i8 = 1;
    /// Commit without prepare.
    pub const COMMIT_ONE_PHASE: i8 = 2;
    /// XA commit after prepare.
    pub const COMMIT_TWO_PHASE: i8 = 3;
    /// Roll back.
    pub const ROLLBACK: i8 = 4;
    /// XA recover.
    pub const RECOVER: i8 = 5;
    /// XA forget.
    pub const FORGET: i8 = 6;
    /// XA end.
    pub const END: i8 = 7;
}

wire_struct! {
    /// A client creates a consumer (or a browser, or a durable subscriber).
    pub struct ConsumerInfo (command) {
        /// The consumer.
        consumer_id: Option<ConsumerId> = Cached,
        /// A queue browser.
        browser: bool = Bool,
        /// What it consumes.
        destination: Option<Destination> = Cached,
        /// How many unacknowledged messages it may be sent (0: it pulls).
        prefetch_size: i32 = Int,
        /// For slow topic consumers: how many messages to keep pending (-1: unlimited).
        maximum_pending_message_limit: i32 = Int,
        /// Whether the broker should dispatch asynchronously.
        dispatch_async: bool = Bool,
        /// The JMS selector.
        selector: Option<String> = Str,
        /// The client id (version 10 on).
        client_id: Option<String> = Str @ 10,
        /// The durable subscription's name.
        subscription_name: Option<String> = Str,
        /// Do not deliver messages published on this connection.
        no_local: bool = Bool,
        /// Exclusive consumer.
        exclusive: bool = Bool,
        /// Retroactive topic consumer.
        retroactive: bool = Bool,
        /// Consumer priority.
        priority: i8 = Byte,
        /// Brokers the subscription came through.
        broker_path: Option<Vec<BrokerId>> = Array,
        /// An extra filter (a NetworkBridgeFilter from network connectors).
        additional_predicate: Option<Box<DataStructure>> = Nested,
        /// A network subscription.
        network_subscription: bool = Bool,
        /// Optimized acknowledgements.
        optimized_acknowledge: bool = Bool,
        /// The consumer acknowledges one message at a time.
        no_range_acks: bool = Bool,
        /// Consumers of the network path (version 2 on).
        network_consumer_path: Option<Vec<ConsumerId>> = Array @ 2,
    }
}

wire_struct! {
    /// A client creates a producer.
    pub struct ProducerInfo (command) {
        /// The producer.
        producer_id: Option<ProducerId> = Cached,
        /// Its fixed destination, if any.
        destination: Option<Destination> = Cached,
        /// Brokers it came through.
        broker_path: Option<Vec<BrokerId>> = Array,
        /// Dispatch asynchronously (version 2 on).
        dispatch_async: bool = Bool @ 2,
        /// Producer flow-control window in bytes (0: none; then ProducerAcks).
        window_size: i32 = Int @ 2,
    }
}

wire_struct! {
    /// Broker to producer: `size` bytes of the window are free again.
    pub struct ProducerAck (command) {
        /// The producer.
        producer_id: Option<ProducerId> = Nested,
        /// Bytes acknowledged.
        size: i32 = Int,
    }
}

wire_struct! {
    /// Broker to client: start, stop, close or re-size a consumer.
    pub struct ConsumerControl (command) {
        /// The destination (version 2 on).
        destination: Option<Destination> = Nested @ 2,
        /// Close the consumer.
        close: bool = Bool,
        /// The consumer.
        consumer_id: Option<ConsumerId> = Nested,
        /// New prefetch size.
        prefetch: i32 = Int,
        /// Flush.
        flush: bool = Bool @ 2,
        /// Start.
        start: bool = Bool @ 2,
        /// Stop.
        stop: bool = Bool @ 2,
    }
}

wire_struct! {
    /// Closes a connection, session, consumer or producer (named by its id).
    pub struct RemoveInfo (command) {
        /// The id of what is removed.
        object_id: Option<Box<DataStructure>> = Cached,
        /// For consumers: the last message sequence the client delivered (version 2 on).
        last_delivered_sequence_id: i64 = Long @ 2,
    }
}

wire_struct! {
    /// Deletes a durable topic subscription.
    pub struct RemoveSubscriptionInfo (command) {
        /// The connection.
        connection_id: Option<ConnectionId> = Cached,
        /// The subscription name.
        subscription_name: Option<String> = Str,
        /// The client id.
        client_id: Option<String> = Str,
    }
}

wire_struct! {
    /// Creates or deletes a destination (temporary destinations, advisories).
    pub struct DestinationInfo (command) {
        /// The connection.
        connection_id: Option<ConnectionId> = Cached,
        /// The destination.
        destination: Option<Destination> = Cached,
        /// [`destination_operation`].
        operation_type: i8 = Byte,
        /// Timeout in milliseconds.
        timeout: i64 = Long,
        /// Brokers it came through.
        broker_path: Option<Vec<BrokerId>> = Array,
    }
}

wire_struct! {
    /// Begins, commits, rolls back (or XA-prepares...) a transaction.
    pub struct TransactionInfo (command) {
        /// The connection.
        connection_id: Option<ConnectionId> = Cached,
        /// The transaction.
        transaction_id: Option<TransactionId> = Cached,
        /// [`transaction_type`].
        transaction_type: i8 = Byte,
    }
}

wire_struct! {
    /// Acknowledges messages (a range from first to last, or one).
    pub struct MessageAck (command) {
        /// The destination.
        destination: Option<Destination> = Cached,
        /// The transaction, if transacted.
        transaction_id: Option<TransactionId> = Cached,
        /// The consumer.
        consumer_id: Option<ConsumerId> = Cached,
        /// [`ack_type`].
        ack_type: i8 = Byte,
        /// First message of the range.
        first_message_id: Option<MessageId> = Nested,
        /// Last message of the range.
        last_message_id: Option<MessageId> = Nested,
        /// Messages in the range.
        message_count: i32 = Int,
        /// Why a poison ack (version 2 on).
        poison_cause: Option<Throwable> = Throwable @ 2,
    }
}

wire_struct! {
    /// A consumer with prefetch 0 asks for a message.
    pub struct MessagePull (command) {
        /// The consumer.
        consumer_id: Option<ConsumerId> = Cached,
        /// The destination.
        destination: Option<Destination> = Cached,
        /// How long to wait (0: forever, -1: don't wait).
        timeout: i64 = Long,
        /// Correlates the pull with its dispatch.
        correlation_id: Option<String> = Str,
        /// A specific message.
        message_id: Option<MessageId> = Nested,
    }
}

wire_struct! {
    /// Broker to client: a message for a consumer (no message: the pull timed out).
    pub struct MessageDispatch (command) {
        /// The consumer.
        consumer_id: Option<ConsumerId> = Cached,
        /// The destination.
        destination: Option<Destination> = Cached,
        /// The message.
        message: Option<Box<Message>> = Nested,
        /// Times delivered before.
        redelivery_counter: i32 = Int,
    }
}

wire_struct! {
    /// Broker to broker: a message was dispatched (master/slave replication).
    pub struct MessageDispatchNotification (command) {
        /// The consumer.
        consumer_id: Option<ConsumerId> = Cached,
        /// The destination.
        destination: Option<Destination> = Cached,
        /// The delivery sequence.
        delivery_sequence_id: i64 = Long,
        /// The message.
        message_id: Option<MessageId> = Nested,
    }
}

wire_struct! {
    /// Broker to broker: durable subscriptions to sync (version 12).
    pub struct BrokerSubscriptionInfo (command) {
        /// The broker.
        broker_id: Option<BrokerId> = Nested,
        /// The broker's name.
        broker_name: Option<String> = Str,
        /// The subscriptions.
        subscription_infos: Option<Vec<ConsumerInfo>> = Array,
    }
}

wire_struct! {
    /// A durable subscription as stored (appears in DataResponses).
    pub struct SubscriptionInfo (plain) {
        /// The client id.
        client_id: Option<String> = Str,
        /// The destination.
        destination: Option<Destination> = Cached,
        /// The selector.
        selector: Option<String> = Str,
        /// The subscription name.
        subscription_name: Option<String> = Str,
        /// The destination subscribed to (version 2 on).
        subscribed_destination: Option<Destination> = Nested @ 2,
        /// No-local (version 11 on).
        no_local: bool = Bool @ 11,
    }
}
data_object!(SubscriptionInfo, DURABLE_SUBSCRIPTION_INFO, "subscription info");

wire_struct! {
    /// A broker found by discovery.
    pub struct DiscoveryEvent (plain) {
        /// The service name.
        service_name: Option<String> = Str,
        /// The broker name.
        broker_name: Option<String> = Str,
    }
}
data_object!(DiscoveryEvent, DISCOVERY_EVENT, "discovery event");

/// The filter network bridges put on their consumers (the only `additional_predicate`).
/// Its layout changed in version 10: before, a single network TTL came first.
#[derive(Debug, Clone, Default, PartialEq, Eq, Hash)]
pub struct NetworkBridgeFilter {
    /// The broker on the other side.
    pub network_broker_id: Option<BrokerId>,
    /// Hops a message may take (before version 10: the network TTL).
    pub message_ttl: i32,
    /// Hops a consumer advisory may take (version 10 on).
    pub consumer_ttl: i32,
}

impl NetworkBridgeFilter {
    pub(crate) fn read_fields(d: &mut Decoder) -> Result<Self, WireError> {
        if d.version >= 10 {
            Ok(NetworkBridgeFilter {
                network_broker_id: d.cached()?,
                message_ttl: d.int()?,
                consumer_ttl: d.int()?,
            })
        } else {
            let ttl = d.int()?;
            Ok(NetworkBridgeFilter {
                network_broker_id: d.cached()?,
                message_ttl: ttl,
                consumer_ttl: 0,
            })
        }
    }
}

impl WireObject for NetworkBridgeFilter {
    const EXPECTED: &'static str = "network bridge filter";
    fn data_type(&self) -> u8 {
        super::data_type::NETWORK_BRIDGE_FILTER
    }
    fn write_fields(&self, e: &mut Encoder) -> Result<(), WireError> {
        if e.version >= 10 {
            e.cached(self.network_broker_id.as_ref())?;
            e.int(self.message_ttl);
            e.int(self.consumer_ttl);
        } else {
            e.int(self.message_ttl);
            e.cached(self.network_broker_id.as_ref())?;
        }
        Ok(())
    }
    fn to_data(&self) -> DataStructure {
        DataStructure::NetworkBridgeFilter(self.clone())
    }
    fn from_data(data: DataStructure) -> Result<Self, WireError> {
        match data {
            DataStructure::NetworkBridgeFilter(v) => Ok(v),
            other => Err(WireError::UnexpectedType {
                expected: Self::EXPECTED,
                found: other.data_type(),
            }),
        }
    }
}
