//! [`ConnectOptions`] and [`AckMode`].

use std::time::Duration;

use protocol::stomp::Limits;

/// How to open a STOMP session.
#[derive(Debug, Clone)]
pub struct ConnectOptions {
    /// The `login` header, if any.
    pub login: Option<String>,
    /// The `passcode` header, if any.
    pub passcode: Option<String>,
    /// The `host` header (a virtual host); omitted when `None`.
    pub host: Option<String>,
    /// The `accept-version` header; default `"1.0,1.1,1.2"`.
    pub accept_version: String,
    /// The `heart-beat` header `(cx, cy)` in milliseconds: we can send every `cx` ms, we
    /// want to hear from the server every `cy` ms; 0 for never. Default `(0, 0)`.
    pub heart_beat: (u64, u64),
    /// The `client-id` header (ActiveMQ's JMS client id, needed for durable subscriptions).
    pub client_id: Option<String>,
    /// Further CONNECT headers, sent after the others.
    pub headers: Vec<(String, String)>,
    /// Limits on the frames the server sends us.
    pub limits: Limits,
    /// How long to wait for the connection, CONNECTED and each receipt. Default 10 s.
    pub timeout: Duration,
}

impl Default for ConnectOptions {
    fn default() -> ConnectOptions {
        ConnectOptions {
            login: None,
            passcode: None,
            host: None,
            accept_version: "1.0,1.1,1.2".to_owned(),
            heart_beat: (0, 0),
            client_id: None,
            headers: Vec::new(),
            limits: Limits::default(),
            timeout: Duration::from_secs(10),
        }
    }
}

impl ConnectOptions {
    /// Default options with `login` and `passcode` set.
    pub fn with_credentials(login: &str, passcode: &str) -> ConnectOptions {
        ConnectOptions {
            login: Some(login.to_owned()),
            passcode: Some(passcode.to_owned()),
            ..ConnectOptions::default()
        }
    }
}

/// A subscription's acknowledgement mode (the SUBSCRIBE `ack` header).
#[derive(Debug, Clone, Copy, PartialEq, Eq, Hash)]
pub enum AckMode {
    /// The server considers a message consumed once sent.
    Auto,
    /// An ACK acknowledges the message and every earlier one of the subscription.
    Client,
    /// An ACK acknowledges that message only.
    ClientIndividual,
}

impl AckMode {
    /// The header value: `auto`, `client` or `client-individual`.
    pub fn as_str(self) -> &'static str {
        match self {
            AckMode::Auto => "auto",
            AckMode::Client => "client",
            AckMode::ClientIndividual => "client-individual",
        }
    }
}
