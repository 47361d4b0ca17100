//! Connection-level commands.

use super::{BrokerId, ConnectionId, SessionId, Throwable};
use crate::openwire::marshal::wire_struct;

wire_struct! {
    /// The broker introduces itself (after WireFormatInfo), and tells of its peers.
    pub struct BrokerInfo (command) {
        /// The broker's id.
        broker_id: Option<BrokerId> = Cached,
        /// The URL of the connector the client reached.
        broker_url: Option<String> = Str,
        /// Other brokers of the network.
        peer_broker_infos: Option<Vec<BrokerInfo>> = Array,
        /// The broker's name.
        broker_name: Option<String> = Str,
        /// Whether the broker is a slave.
        slave_broker: bool = Bool,
        /// Whether the broker is a master.
        master_broker: bool = Bool,
        /// Whether the broker runs a fault-tolerant configuration.
        fault_tolerant_configuration: bool = Bool,
        /// Whether this is a duplex network connection (version 2 on).
        duplex_connection: bool = Bool @ 2,
        /// Whether this is a network connection.
        network_connection: bool = Bool @ 2,
        /// The connection number.
        connection_id: i64 = Long @ 2,
        /// Where blob messages are uploaded.
        broker_upload_url: Option<String> = Str @ 2,
        /// Network connector properties.
        network_properties: Option<String> = Str @ 2,
    }
}

wire_struct! {
    /// A client opens a connection.
    pub struct ConnectionInfo (command) {
        /// The connection.
        connection_id: Option<ConnectionId> = Cached,
        /// The JMS client id.
        client_id: Option<String> = Str,
        /// The password.
        password: Option<String> = Str,
        /// The user name.
        user_name: Option<String> = Str,
        /// Brokers this connection came through (network connections).
        broker_path: Option<Vec<BrokerId>> = Array,
        /// Whether this is a broker's master connector.
        broker_master_connector: bool = Bool,
        /// Whether the connection is manageable (advisories of it).
        manageable: bool = Bool,
        /// Whether the client is the master of a master/slave pair (version 2 on).
        client_master: bool = Bool @ 2,
        /// Whether the client uses the failover transport.
        fault_tolerant: bool = Bool @ 2,
        /// Whether this connection is a failover reconnect.
        failover_reconnect: bool = Bool @ 2,
        /// The client's address, as the broker saw it.
        client_ip: Option<String> = Str @ 2,
    }
}

wire_struct! {
    /// A client opens a session.
    pub struct SessionInfo (command) {
        /// The session.
        session_id: Option<SessionId> = Cached,
    }
}

wire_struct! {
    /// Broker to client: connection-level orders (close, reconnect elsewhere, rebalance...).
    pub struct ConnectionControl (command) {
        /// Close the connection.
        close: bool = Bool,
        /// Exit.
        exit: bool = Bool,
        /// The broker is fault tolerant.
        fault_tolerant: bool = Bool,
        /// Resume sending.
        resume: bool = Bool,
        /// Suspend sending.
        suspend: bool = Bool,
        /// Brokers of the cluster (version 2 on).
        connected_brokers: Option<String> = Str @ 2,
        /// Reconnect to this URI.
        reconnect_to: Option<String> = Str @ 2,
        /// Rebalance the connection.
        rebalance_connection: bool = Bool @ 2,
        /// An opaque token.
        token: Option<bytes::Bytes> = Bytes @ 2,
    }
}

wire_struct! {
    /// Broker to client: the connection failed asynchronously.
    pub struct ConnectionError (command) {
        /// The error.
        exception: Option<Throwable> = Throwable,
        /// The connection.
        connection_id: Option<ConnectionId> = Nested,
    }
}

wire_struct! {
    /// A free-form control command.
    pub struct ControlCommand (command) {
        /// The command text.
        command: Option<String> = Str,
    }
}

wire_struct! {
    /// Keeps an idle connection alive (answered when `response_required`).
    pub struct KeepAliveInfo (command) {}
}

wire_struct! {
    /// The client is closing the connection cleanly.
    pub struct ShutdownInfo (command) {}
}

wire_struct! {
    /// Flush pending sends.
    pub struct FlushCommand (command) {}
}

wire_struct! {
    /// Asks for commands to be replayed (reliable transports).
    pub struct ReplayCommand (command) {
        /// First missed command.
        first_nak_number: i32 = Int,
        /// Last missed command.
        last_nak_number: i32 = Int,
    }
}
