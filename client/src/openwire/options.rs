//! [`OpenWireOptions`], [`SessionMode`], [`SubscribeOptions`] and [`SendMode`].

use std::time::Duration;

use protocol::openwire::Destination;

/// How to open an OpenWire connection.
#[derive(Debug, Clone)]
pub struct OpenWireOptions {
    /// The user name in ConnectionInfo, if any.
    pub user: Option<String>,
    /// The password in ConnectionInfo, if any.
    pub password: Option<String>,
    /// The JMS client id (durable subscriptions belong to it); by default a unique one is
    /// generated, as ActiveMQ's client does.
    pub client_id: Option<String>,
    /// How long to wait for the TCP connection, the handshake and each response; default
    /// 15 s (ActiveMQ's close timeout).
    pub timeout: Duration,
    /// The largest frame we accept, and the `MaxFrameSize` we announce; default 100 MiB
    /// (ActiveMQ's broker default `maxFrameSize` is 100 MiB too).
    pub max_frame_size: usize,
    /// The `MaxInactivityDuration` we announce in milliseconds (the lower of both sides
    /// wins); 0 disables the inactivity check. Default 30 000, as ActiveMQ.
    pub max_inactivity_ms: i64,
    /// Ask for tight encoding (the server decides too); default true, as ActiveMQ.
    pub tight_encoding: bool,
    /// Ask for the marshalling cache; default true, as ActiveMQ.
    pub cache_enabled: bool,
    /// The `ProviderName` we announce; default `ferromq`.
    pub provider_name: String,
    /// The connection id (`ID:<host>-<pid>-<millis>-<n>:1`) to announce instead of a new
    /// one: a connection that replaces a lost one (failover) reuses its id, so that its
    /// producers keep their producer ids and a resent message keeps the message id the
    /// broker's duplicate detection knows. Default `None`: a new unique id.
    pub connection_id: Option<String>,
}

impl Default for OpenWireOptions {
    fn default() -> OpenWireOptions {
        OpenWireOptions {
            user: None,
            password: None,
            client_id: None,
            timeout: Duration::from_secs(15),
            max_frame_size: 100 * 1024 * 1024,
            max_inactivity_ms: 30_000,
            tight_encoding: true,
            cache_enabled: true,
            provider_name: "ferromq".to_owned(),
            connection_id: None,
        }
    }
}

impl OpenWireOptions {
    /// Default options with a user name and password.
    pub fn with_credentials(user: &str, password: &str) -> OpenWireOptions {
        OpenWireOptions {
            user: Some(user.to_owned()),
            password: Some(password.to_owned()),
            ..OpenWireOptions::default()
        }
    }
}

/// A session's acknowledgement mode, the JMS session modes.
#[derive(Debug, Clone, Copy, PartialEq, Eq, Hash, Default)]
pub enum SessionMode {
    /// `AUTO_ACKNOWLEDGE`: a message is acknowledged once received. Acks are batched (a
    /// standard ack per half prefetch window, or as soon as the consumer would wait), so a
    /// consumer that stops may see its last few messages again, marked redelivered, as with
    /// `DUPS_OK_ACKNOWLEDGE`.
    #[default]
    Auto,
    /// `CLIENT_ACKNOWLEDGE`: [`crate::openwire::Consumer::ack`] acknowledges that message and
    /// every earlier one of its consumer.
    Client,
    /// `INDIVIDUAL_ACKNOWLEDGE`: [`crate::openwire::Consumer::ack`] acknowledges that message
    /// only.
    Individual,
    /// `SESSION_TRANSACTED`: sends and acks belong to the session's local transaction until
    /// [`crate::openwire::Session::commit`] or [`crate::openwire::Session::rollback`].
    Transacted,
}

impl SessionMode {
    /// Whether this is a transacted session.
    pub fn is_transacted(self) -> bool {
        self == SessionMode::Transacted
    }
}

/// Whether a send waits for the broker's response.
#[derive(Debug, Clone, Copy, PartialEq, Eq, Hash, Default)]
pub enum SendMode {
    /// As the JMS client does: synchronous for persistent messages outside transactions,
    /// asynchronous otherwise.
    #[default]
    Default,
    /// Always wait for the broker's response (errors come back to the caller).
    Sync,
    /// Never wait (ActiveMQ's `useAsyncSend`); a refused message is only logged by the
    /// broker.
    Async,
}

/// What a consumer receives and how.
#[derive(Debug, Clone)]
pub struct SubscribeOptions {
    /// The queue or topic.
    pub destination: Destination,
    /// Messages the broker may push ahead of acknowledgements; 0 means the consumer pulls
    /// each message (MessagePull). `None`: ActiveMQ's defaults (queue 1000, topic 32766,
    /// durable subscription 100).
    pub prefetch: Option<i32>,
    /// A durable topic subscription of this name (the connection needs a client id).
    pub durable_name: Option<String>,
    /// A JMS selector.
    pub selector: Option<String>,
    /// Do not receive messages published by this connection (topics).
    pub no_local: bool,
    /// An exclusive queue consumer.
    pub exclusive: bool,
    /// A retroactive topic consumer.
    pub retroactive: bool,
}

impl SubscribeOptions {
    /// A consumer of `destination` with ActiveMQ's defaults.
    pub fn new(destination: Destination) -> SubscribeOptions {
        SubscribeOptions {
            destination,
            prefetch: None,
            durable_name: None,
            selector: None,
            no_local: false,
            exclusive: false,
            retroactive: false,
        }
    }

    /// The same with a prefetch size.
    pub fn prefetch(mut self, prefetch: i32) -> SubscribeOptions {
        self.prefetch = Some(prefetch);
        self
    }

    /// The same as a durable subscription called `name`.
    pub fn durable(mut self, name: impl Into<String>) -> SubscribeOptions {
        self.durable_name = Some(name.into());
        self
    }

    /// The prefetch in force: the one asked for, else ActiveMQ's default for the kind.
    pub(crate) fn effective_prefetch(&self) -> i32 {
        use protocol::openwire::DestinationKind;
        match self.prefetch {
            Some(prefetch) => prefetch.max(0),
            None if self.durable_name.is_some() => 100,
            None => match self.destination.kind {
                DestinationKind::Queue | DestinationKind::TempQueue => 1000,
                DestinationKind::Topic | DestinationKind::TempTopic => 32_766,
            },
        }
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn default_prefetch_follows_activemq() {
        let queue = SubscribeOptions::new(Destination::queue("q"));
        assert_eq!(queue.effective_prefetch(), 1000);
        let topic = SubscribeOptions::new(Destination::topic("t"));
        assert_eq!(topic.effective_prefetch(), 32_766);
        assert_eq!(topic.clone().durable("d").effective_prefetch(), 100);
        assert_eq!(topic.prefetch(0).effective_prefetch(), 0);
        assert_eq!(queue.prefetch(-3).effective_prefetch(), 0);
    }
}
