//! Every OpenWire type this codec speaks: the [`Command`]s that travel as frames and the
//! [`DataStructure`]s (ids, destinations) nested inside them, with their type bytes
//! ([`data_type`]) and the dispatch from a type byte to a type's fields.
//!
//! - `ids.rs`: connection, session, consumer, producer, broker, message and transaction ids,
//!   and destinations;
//! - `connection.rs`: connection-level commands (BrokerInfo, ConnectionInfo, SessionInfo,
//!   ConnectionControl, ConnectionError, keep-alive, shutdown, control, flush, replay);
//! - `consumer.rs`: producers, consumers, acks, pulls, dispatch, destinations and
//!   transactions;
//! - `response.rs`: responses and the [`Throwable`] carried by error responses;
//! - `message.rs`: [`Message`], one struct for the seven message types.
//!
//! ## Versions
//!
//! Java has one set of marshallers per protocol version; here each field table marks the
//! fields a version added (`@ N`: present from version N on). This codec speaks versions 1
//! and 9 to 12, so the fields Java added somewhere in versions 2 to 8 are marked `@ 2`:
//! absent in version 1, present from 9 on. Types that version 1 lacks (ProducerAck,
//! MessagePull, BlobMessage) and BrokerSubscriptionInfo (version 12) are refused at the
//! versions that lack them.

use super::error::WireError;
use super::marshal::{Decoder, Encoder, WireObject};

mod connection;
mod consumer;
mod ids;
mod message;
mod response;

pub use self::connection::{
    BrokerInfo, ConnectionControl, ConnectionError, ConnectionInfo, ControlCommand, FlushCommand,
    KeepAliveInfo, ReplayCommand, SessionInfo, ShutdownInfo,
};
pub use self::consumer::{
    ack_type, destination_operation, transaction_type, BrokerSubscriptionInfo, ConsumerControl,
    ConsumerInfo, DestinationInfo, DiscoveryEvent, MessageAck, MessageDispatch,
    MessageDispatchNotification, MessagePull, NetworkBridgeFilter, ProducerAck, ProducerInfo,
    RemoveInfo, RemoveSubscriptionInfo, SubscriptionInfo, TransactionInfo,
};
pub use self::ids::{
    BrokerId, ConnectionId, ConsumerId, Destination, DestinationKind, LocalTransactionId,
    MessageId, ProducerId, SessionId, TransactionId, XaTransactionId,
};
pub use self::message::{BlobInfo, Message, MessageType};
pub use self::response::{
    DataArrayResponse, DataResponse, ExceptionResponse, IntegerResponse, Response,
    StackTraceElement, Throwable,
};
pub use super::format::WireFormatInfo;

/// The type bytes of OpenWire data structures (Java's `CommandTypes`).
pub mod data_type {
    #![allow(missing_docs)]
    pub const NULL: u8 = 0;
    pub const WIREFORMAT_INFO: u8 = 1;
    pub const BROKER_INFO: u8 = 2;
    pub const CONNECTION_INFO: u8 = 3;
    pub const SESSION_INFO: u8 = 4;
    pub const CONSUMER_INFO: u8 = 5;
    pub const PRODUCER_INFO: u8 = 6;
    pub const TRANSACTION_INFO: u8 = 7;
    pub const DESTINATION_INFO: u8 = 8;
    pub const REMOVE_SUBSCRIPTION_INFO: u8 = 9;
    pub const KEEP_ALIVE_INFO: u8 = 10;
    pub const SHUTDOWN_INFO: u8 = 11;
    pub const REMOVE_INFO: u8 = 12;
    pub const CONTROL_COMMAND: u8 = 14;
    pub const FLUSH_COMMAND: u8 = 15;
    pub const CONNECTION_ERROR: u8 = 16;
    pub const CONSUMER_CONTROL: u8 = 17;
    pub const CONNECTION_CONTROL: u8 = 18;
    pub const PRODUCER_ACK: u8 = 19;
    pub const MESSAGE_PULL: u8 = 20;
    pub const MESSAGE_DISPATCH: u8 = 21;
    pub const MESSAGE_ACK: u8 = 22;
    pub const ACTIVEMQ_MESSAGE: u8 = 23;
    pub const ACTIVEMQ_BYTES_MESSAGE: u8 = 24;
    pub const ACTIVEMQ_MAP_MESSAGE: u8 = 25;
    pub const ACTIVEMQ_OBJECT_MESSAGE: u8 = 26;
    pub const ACTIVEMQ_STREAM_MESSAGE: u8 = 27;
    pub const ACTIVEMQ_TEXT_MESSAGE: u8 = 28;
    pub const ACTIVEMQ_BLOB_MESSAGE: u8 = 29;
    pub const RESPONSE: u8 = 30;
    pub const EXCEPTION_RESPONSE: u8 = 31;
    pub const DATA_RESPONSE: u8 = 32;
    pub const DATA_ARRAY_RESPONSE: u8 = 33;
    pub const INTEGER_RESPONSE: u8 = 34;
    pub const DISCOVERY_EVENT: u8 = 40;
    pub const DURABLE_SUBSCRIPTION_INFO: u8 = 55;
    pub const REPLAY: u8 = 65;
    pub const MESSAGE_DISPATCH_NOTIFICATION: u8 = 90;
    pub const NETWORK_BRIDGE_FILTER: u8 = 91;
    pub const BROKER_SUBSCRIPTION_INFO: u8 = 92;
    pub const ACTIVEMQ_QUEUE: u8 = 100;
    pub const ACTIVEMQ_TOPIC: u8 = 101;
    pub const ACTIVEMQ_TEMP_QUEUE: u8 = 102;
    pub const ACTIVEMQ_TEMP_TOPIC: u8 = 103;
    pub const MESSAGE_ID: u8 = 110;
    pub const ACTIVEMQ_LOCAL_TRANSACTION_ID: u8 = 111;
    pub const ACTIVEMQ_XA_TRANSACTION_ID: u8 = 112;
    pub const CONNECTION_ID: u8 = 120;
    pub const SESSION_ID: u8 = 121;
    pub const CONSUMER_ID: u8 = 122;
    pub const PRODUCER_ID: u8 = 123;
    pub const BROKER_ID: u8 = 124;

    /// The first protocol version that has `data_type` (1 for the original types; 2 for
    /// types added between versions 2 and 8, which this codec does not speak).
    pub(crate) fn since_version(data_type: u8) -> u32 {
        match data_type {
            PRODUCER_ACK | MESSAGE_PULL | ACTIVEMQ_BLOB_MESSAGE => 2,
            BROKER_SUBSCRIPTION_INFO => 12,
            _ => 1,
        }
    }
}

/// Moves a value out of its (possibly boxed) enum payload.
trait Unbox<T> {
    fn unbox(self) -> T;
}
impl<T> Unbox<T> for T {
    fn unbox(self) -> T {
        self
    }
}
impl<T> Unbox<T> for Box<T> {
    fn unbox(self) -> T {
        *self
    }
}

/// Declares [`Command`] over the command structs (each variant is named like its struct) and
/// generates the dispatch by type byte. Messages (seven type bytes) are added by hand.
macro_rules! commands {
    ($( $var:ident($ty:ty) = $code:ident ),* $(,)?) => {
        /// One OpenWire frame: every command the 5.x client sends or expects.
        ///
        /// Large commands are boxed to keep the enum small.
        #[derive(Debug, Clone, PartialEq, Eq, Hash)]
        #[allow(missing_docs)]
        pub enum Command {
            WireFormatInfo(WireFormatInfo),
            $( $var($ty), )*
            /// A message of any body type (the type byte follows [`Message::body_type`]).
            Message(Box<Message>),
        }

        impl Command {
            /// The type byte of this command.
            pub fn data_type(&self) -> u8 {
                match self {
                    Command::WireFormatInfo(_) => data_type::WIREFORMAT_INFO,
                    $( Command::$var(_) => data_type::$code, )*
                    Command::Message(m) => m.body_type.data_type(),
                }
            }

            /// The sender's sequence number (0 for WireFormatInfo, which has none).
            pub fn command_id(&self) -> i32 {
                match self {
                    Command::WireFormatInfo(_) => 0,
                    $( Command::$var(c) => c.command_id, )*
                    Command::Message(m) => m.command_id,
                }
            }

            /// Sets the sender's sequence number (ignored for WireFormatInfo).
            pub fn set_command_id(&mut self, id: i32) {
                match self {
                    Command::WireFormatInfo(_) => {}
                    $( Command::$var(c) => c.command_id = id, )*
                    Command::Message(m) => m.command_id = id,
                }
            }

            /// Whether the sender waits for a response.
            pub fn response_required(&self) -> bool {
                match self {
                    Command::WireFormatInfo(_) => false,
                    $( Command::$var(c) => c.response_required, )*
                    Command::Message(m) => m.response_required,
                }
            }

            pub(crate) fn write_fields(&self, e: &mut Encoder) -> Result<(), WireError> {
                match self {
                    Command::WireFormatInfo(c) => c.write_declared(e),
                    $( Command::$var(c) => c.write_declared(e), )*
                    Command::Message(m) => m.write_fields(e),
                }
            }

            /// The command of type `t`, or `None` if `t` is not a command type.
            pub(crate) fn read_fields(t: u8, d: &mut Decoder) -> Result<Option<Command>, WireError> {
                Ok(Some(match t {
                    data_type::WIREFORMAT_INFO => {
                        Command::WireFormatInfo(WireFormatInfo::read_declared(d)?)
                    }
                    $( data_type::$code => Command::$var($var::read_declared(d)?.into()), )*
                    t => match MessageType::from_data_type(t) {
                        Some(body_type) => Command::Message(Box::new(Message::read_fields(body_type, d)?)),
                        None => return Ok(None),
                    },
                }))
            }
        }

        impl From<WireFormatInfo> for Command {
            fn from(v: WireFormatInfo) -> Command {
                Command::WireFormatInfo(v)
            }
        }

        $(
            impl From<$var> for Command {
                fn from(v: $var) -> Command {
                    Command::$var(v.into())
                }
            }

            impl WireObject for $var {
                const EXPECTED: &'static str = stringify!($var);
                fn data_type(&self) -> u8 {
                    data_type::$code
                }
                fn write_fields(&self, e: &mut Encoder) -> Result<(), WireError> {
                    self.write_declared(e)
                }
                fn to_data(&self) -> DataStructure {
                    DataStructure::Command(self.clone().into())
                }
                fn from_data(data: DataStructure) -> Result<Self, WireError> {
                    match data {
                        DataStructure::Command(Command::$var(v)) => Ok(v.unbox()),
                        other => Err(WireError::UnexpectedType {
                            expected: Self::EXPECTED,
                            found: other.data_type(),
                        }),
                    }
                }
            }
        )*
    };
}

commands! {
    BrokerInfo(Box<BrokerInfo>) = BROKER_INFO,
    ConnectionInfo(Box<ConnectionInfo>) = CONNECTION_INFO,
    SessionInfo(SessionInfo) = SESSION_INFO,
    ConsumerInfo(Box<ConsumerInfo>) = CONSUMER_INFO,
    ProducerInfo(Box<ProducerInfo>) = PRODUCER_INFO,
    TransactionInfo(Box<TransactionInfo>) = TRANSACTION_INFO,
    DestinationInfo(Box<DestinationInfo>) = DESTINATION_INFO,
    RemoveSubscriptionInfo(Box<RemoveSubscriptionInfo>) = REMOVE_SUBSCRIPTION_INFO,
    KeepAliveInfo(KeepAliveInfo) = KEEP_ALIVE_INFO,
    ShutdownInfo(ShutdownInfo) = SHUTDOWN_INFO,
    RemoveInfo(Box<RemoveInfo>) = REMOVE_INFO,
    ControlCommand(ControlCommand) = CONTROL_COMMAND,
    FlushCommand(FlushCommand) = FLUSH_COMMAND,
    ConnectionError(Box<ConnectionError>) = CONNECTION_ERROR,
    ConsumerControl(Box<ConsumerControl>) = CONSUMER_CONTROL,
    ConnectionControl(Box<ConnectionControl>) = CONNECTION_CONTROL,
    ProducerAck(Box<ProducerAck>) = PRODUCER_ACK,
    MessagePull(Box<MessagePull>) = MESSAGE_PULL,
    MessageDispatch(Box<MessageDispatch>) = MESSAGE_DISPATCH,
    MessageAck(Box<MessageAck>) = MESSAGE_ACK,
    Response(Response) = RESPONSE,
    ExceptionResponse(Box<ExceptionResponse>) = EXCEPTION_RESPONSE,
    DataResponse(Box<DataResponse>) = DATA_RESPONSE,
    DataArrayResponse(DataArrayResponse) = DATA_ARRAY_RESPONSE,
    IntegerResponse(IntegerResponse) = INTEGER_RESPONSE,
    MessageDispatchNotification(Box<MessageDispatchNotification>) = MESSAGE_DISPATCH_NOTIFICATION,
    BrokerSubscriptionInfo(Box<BrokerSubscriptionInfo>) = BROKER_SUBSCRIPTION_INFO,
    ReplayCommand(ReplayCommand) = REPLAY,
}

/// Any OpenWire data structure: a command, or a value nested in one.
#[derive(Debug, Clone, PartialEq, Eq, Hash)]
#[allow(missing_docs)]
pub enum DataStructure {
    Command(Command),
    ConnectionId(ConnectionId),
    SessionId(SessionId),
    ConsumerId(ConsumerId),
    ProducerId(ProducerId),
    BrokerId(BrokerId),
    MessageId(MessageId),
    LocalTransactionId(LocalTransactionId),
    XaTransactionId(XaTransactionId),
    Destination(Destination),
    NetworkBridgeFilter(NetworkBridgeFilter),
    SubscriptionInfo(SubscriptionInfo),
    DiscoveryEvent(DiscoveryEvent),
}

impl DataStructure {
    /// The type byte.
    pub fn data_type(&self) -> u8 {
        match self {
            DataStructure::Command(c) => c.data_type(),
            DataStructure::ConnectionId(v) => v.data_type(),
            DataStructure::SessionId(v) => v.data_type(),
            DataStructure::ConsumerId(v) => v.data_type(),
            DataStructure::ProducerId(v) => v.data_type(),
            DataStructure::BrokerId(v) => v.data_type(),
            DataStructure::MessageId(v) => v.data_type(),
            DataStructure::LocalTransactionId(v) => v.data_type(),
            DataStructure::XaTransactionId(v) => v.data_type(),
            DataStructure::Destination(v) => v.data_type(),
            DataStructure::NetworkBridgeFilter(v) => v.data_type(),
            DataStructure::SubscriptionInfo(v) => v.data_type(),
            DataStructure::DiscoveryEvent(v) => v.data_type(),
        }
    }

    pub(crate) fn write_fields(&self, e: &mut Encoder) -> Result<(), WireError> {
        match self {
            DataStructure::Command(c) => c.write_fields(e),
            DataStructure::ConnectionId(v) => v.write_fields(e),
            DataStructure::SessionId(v) => v.write_fields(e),
            DataStructure::ConsumerId(v) => v.write_fields(e),
            DataStructure::ProducerId(v) => v.write_fields(e),
            DataStructure::BrokerId(v) => v.write_fields(e),
            DataStructure::MessageId(v) => v.write_fields(e),
            DataStructure::LocalTransactionId(v) => v.write_fields(e),
            DataStructure::XaTransactionId(v) => v.write_fields(e),
            DataStructure::Destination(v) => v.write_fields(e),
            DataStructure::NetworkBridgeFilter(v) => v.write_fields(e),
            DataStructure::SubscriptionInfo(v) => v.write_fields(e),
            DataStructure::DiscoveryEvent(v) => v.write_fields(e),
        }
    }

    /// Reads the fields of a data structure of type `t` (the type byte already read).
    pub(crate) fn read_fields(t: u8, d: &mut Decoder) -> Result<DataStructure, WireError> {
        use data_type as dt;
        if d.version < data_type::since_version(t) {
            return Err(WireError::TypeNotInVersion { data_type: t, version: d.version });
        }
        if let Some(command) = Command::read_fields(t, d)? {
            return Ok(DataStructure::Command(command));
        }
        Ok(match t {
            dt::CONNECTION_ID => DataStructure::ConnectionId(ConnectionId::read_declared(d)?),
            dt::SESSION_ID => DataStructure::SessionId(SessionId::read_declared(d)?),
            dt::CONSUMER_ID => DataStructure::ConsumerId(ConsumerId::read_declared(d)?),
            dt::PRODUCER_ID => DataStructure::ProducerId(ProducerId::read_declared(d)?),
            dt::BROKER_ID => DataStructure::BrokerId(BrokerId::read_declared(d)?),
            dt::MESSAGE_ID => DataStructure::MessageId(MessageId::read_declared(d)?),
            dt::ACTIVEMQ_LOCAL_TRANSACTION_ID => {
                DataStructure::LocalTransactionId(LocalTransactionId::read_declared(d)?)
            }
            dt::ACTIVEMQ_XA_TRANSACTION_ID => {
                DataStructure::XaTransactionId(XaTransactionId::read_declared(d)?)
            }
            dt::ACTIVEMQ_QUEUE..=dt::ACTIVEMQ_TEMP_TOPIC => {
                DataStructure::Destination(Destination::read_fields(t, d)?)
            }
            dt::NETWORK_BRIDGE_FILTER => {
                DataStructure::NetworkBridgeFilter(NetworkBridgeFilter::read_fields(d)?)
            }
            dt::DURABLE_SUBSCRIPTION_INFO => {
                DataStructure::SubscriptionInfo(SubscriptionInfo::read_declared(d)?)
            }
            dt::DISCOVERY_EVENT => DataStructure::DiscoveryEvent(DiscoveryEvent::read_declared(d)?),
            data_type => return Err(WireError::UnknownType { data_type }),
        })
    }
}

impl From<Command> for DataStructure {
    fn from(c: Command) -> DataStructure {
        DataStructure::Command(c)
    }
}

impl WireObject for DataStructure {
    const EXPECTED: &'static str = "data structure";
    fn data_type(&self) -> u8 {
        DataStructure::data_type(self)
    }
    fn write_fields(&self, e: &mut Encoder) -> Result<(), WireError> {
        DataStructure::write_fields(self, e)
    }
    fn to_data(&self) -> DataStructure {
        self.clone()
    }
    fn from_data(data: DataStructure) -> Result<Self, WireError> {
        Ok(data)
    }
    fn is_data(&self, data: &DataStructure) -> bool {
        self == data
    }
    fn hash_fields(&self, state: &mut rustc_hash::FxHasher) {
        use std::hash::Hash;
        match self {
            DataStructure::Command(v) => v.hash(state),
            DataStructure::ConnectionId(v) => v.hash(state),
            DataStructure::SessionId(v) => v.hash(state),
            DataStructure::ConsumerId(v) => v.hash(state),
            DataStructure::ProducerId(v) => v.hash(state),
            DataStructure::BrokerId(v) => v.hash(state),
            DataStructure::MessageId(v) => v.hash(state),
            DataStructure::LocalTransactionId(v) => v.hash(state),
            DataStructure::XaTransactionId(v) => v.hash(state),
            DataStructure::Destination(v) => v.hash(state),
            DataStructure::NetworkBridgeFilter(v) => v.hash(state),
            DataStructure::SubscriptionInfo(v) => v.hash(state),
            DataStructure::DiscoveryEvent(v) => v.hash(state),
        }
    }
}

/// Implements [`WireObject`] for a non-command data structure with a `DataStructure` variant
/// of the same name and a single type byte.
macro_rules! data_object {
    ($ty:ident, $code:ident, $expected:literal) => {
        impl $crate::openwire::marshal::WireObject for $ty {
            const EXPECTED: &'static str = $expected;
            fn data_type(&self) -> u8 {
                $crate::openwire::commands::data_type::$code
            }
            fn write_fields(
                &self,
                e: &mut $crate::openwire::marshal::Encoder,
            ) -> Result<(), $crate::openwire::WireError> {
                self.write_declared(e)
            }
            fn to_data(&self) -> $crate::openwire::commands::DataStructure {
                $crate::openwire::commands::DataStructure::$ty(self.clone())
            }
            fn from_data(
                data: $crate::openwire::commands::DataStructure,
            ) -> Result<Self, $crate::openwire::WireError> {
                match data {
                    $crate::openwire::commands::DataStructure::$ty(v) => Ok(v),
                    other => Err($crate::openwire::WireError::UnexpectedType {
                        expected: $expected,
                        found: other.data_type(),
                    }),
                }
            }
            fn is_data(&self, data: &$crate::openwire::commands::DataStructure) -> bool {
                matches!(data, $crate::openwire::commands::DataStructure::$ty(v) if v == self)
            }
            fn hash_fields(&self, state: &mut rustc_hash::FxHasher) {
                std::hash::Hash::hash(self, state)
            }
        }
    };
}
use data_object;
