//! Transport connector URIs, in ActiveMQ's syntax: `scheme://host:port?option=value&...`.
//!
//! Parsing refuses what ferromq cannot honour rather than ignoring it: schemes of protocols not
//! implemented yet, unknown options, repeated options. ActiveMQ tuning options that have no
//! meaning here are accepted, so an `activemq.xml` connector can be pasted unchanged, and
//! recorded in [`ConnectorUri::warnings`] for the broker to log.

use std::fmt;
use std::net::{Ipv4Addr, Ipv6Addr};
use std::str::FromStr;

use serde::{Deserialize, Deserializer, Serialize, Serializer};

use crate::tls::TlsVersion;

/// Where and how a connector listens, e.g. `stomp://127.0.0.1:61613?maximumConnections=100`.
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct ConnectorUri {
    /// The protocol.
    pub scheme: Scheme,
    /// Host name or IP address to bind; IPv6 addresses are held without brackets (`::1`), so
    /// `(host.as_str(), port)` can be handed to `bind`. `0.0.0.0` or `::` listen everywhere.
    pub host: String,
    /// TCP port; `0` asks the system for a free one (tests).
    pub port: u16,
    /// The URI's query options.
    pub options: ConnectorOptions,
    /// One sentence per accepted option that has no effect in ferromq, for the broker to log.
    pub warnings: Vec<String>,
}

/// The protocol a connector speaks.
#[derive(Debug, Clone, Copy, PartialEq, Eq, Hash)]
pub enum Scheme {
    /// `stomp://`: STOMP 1.0-1.2 over TCP.
    Stomp,
    /// `stomp+nio://`: accepted for ActiveMQ compatibility and identical to `stomp://`, since
    /// every ferromq connector is asynchronous.
    StompNio,
    /// `tcp://`: OpenWire, the protocol of the ActiveMQ JMS client.
    OpenWire,
    /// `nio://`: accepted for ActiveMQ compatibility and identical to `tcp://`.
    OpenWireNio,
    /// `amqp://`: AMQP 1.0 (Qpid JMS, Qpid Proton and the other AMQP 1.0 clients).
    Amqp,
    /// `amqp+nio://`: accepted for ActiveMQ compatibility and identical to `amqp://`.
    AmqpNio,
    /// `ssl://`: OpenWire over TLS (the JMS client's `ssl://host:61617`).
    OpenWireSsl,
    /// `nio+ssl://`: accepted for ActiveMQ compatibility and identical to `ssl://`.
    OpenWireNioSsl,
    /// `stomp+ssl://`: STOMP over TLS.
    StompSsl,
    /// `stomp+nio+ssl://`: accepted for ActiveMQ compatibility and identical to
    /// `stomp+ssl://`.
    StompNioSsl,
    /// `amqp+ssl://`: AMQP 1.0 over TLS (what AMQP clients call `amqps://`).
    AmqpSsl,
    /// `mqtt://`: MQTT 3.1, 3.1.1 and 5.0 over TCP.
    Mqtt,
    /// `mqtt+nio://`: accepted for ActiveMQ compatibility and identical to `mqtt://`.
    MqttNio,
    /// `mqtt+ssl://`: MQTT over TLS.
    MqttSsl,
    /// `mqtt+nio+ssl://`: accepted for ActiveMQ compatibility and identical to
    /// `mqtt+ssl://`.
    MqttNioSsl,
    /// `ws://`: WebSocket (RFC 6455); each connection speaks STOMP, MQTT or AMQP by the
    /// subprotocol its handshake negotiates.
    Ws,
    /// `wss://`: WebSocket over TLS.
    Wss,
}

/// The protocol spoken on a connector, whatever its transport.
#[derive(Debug, Clone, Copy, PartialEq, Eq, Hash)]
pub enum WireProtocol {
    /// STOMP 1.0-1.2.
    Stomp,
    /// OpenWire, the ActiveMQ JMS client's protocol.
    OpenWire,
    /// AMQP 1.0.
    Amqp,
    /// MQTT 3.1, 3.1.1 and 5.0.
    Mqtt,
    /// WebSocket: STOMP, MQTT or AMQP, chosen per connection by the negotiated subprotocol.
    WebSocket,
}

impl Scheme {
    /// The scheme as written before `://`.
    pub fn as_str(self) -> &'static str {
        match self {
            Scheme::Stomp => "stomp",
            Scheme::StompNio => "stomp+nio",
            Scheme::OpenWire => "tcp",
            Scheme::OpenWireNio => "nio",
            Scheme::Amqp => "amqp",
            Scheme::AmqpNio => "amqp+nio",
            Scheme::OpenWireSsl => "ssl",
            Scheme::OpenWireNioSsl => "nio+ssl",
            Scheme::StompSsl => "stomp+ssl",
            Scheme::StompNioSsl => "stomp+nio+ssl",
            Scheme::AmqpSsl => "amqp+ssl",
            Scheme::Mqtt => "mqtt",
            Scheme::MqttNio => "mqtt+nio",
            Scheme::MqttSsl => "mqtt+ssl",
            Scheme::MqttNioSsl => "mqtt+nio+ssl",
            Scheme::Ws => "ws",
            Scheme::Wss => "wss",
        }
    }

    /// The protocol this connector speaks.
    pub fn protocol(self) -> WireProtocol {
        match self {
            Scheme::Stomp | Scheme::StompNio | Scheme::StompSsl | Scheme::StompNioSsl => {
                WireProtocol::Stomp
            }
            Scheme::OpenWire
            | Scheme::OpenWireNio
            | Scheme::OpenWireSsl
            | Scheme::OpenWireNioSsl => WireProtocol::OpenWire,
            Scheme::Amqp | Scheme::AmqpNio | Scheme::AmqpSsl => WireProtocol::Amqp,
            Scheme::Mqtt | Scheme::MqttNio | Scheme::MqttSsl | Scheme::MqttNioSsl => {
                WireProtocol::Mqtt
            }
            Scheme::Ws | Scheme::Wss => WireProtocol::WebSocket,
        }
    }

    /// Whether connections are TLS from their first byte.
    pub fn uses_tls(self) -> bool {
        matches!(
            self,
            Scheme::OpenWireSsl
                | Scheme::OpenWireNioSsl
                | Scheme::StompSsl
                | Scheme::StompNioSsl
                | Scheme::AmqpSsl
                | Scheme::MqttSsl
                | Scheme::MqttNioSsl
                | Scheme::Wss
        )
    }

    /// The protocol's registered port, what ActiveMQ's sample configuration uses: 61613 for
    /// STOMP, 61616 for OpenWire, 5672 for AMQP, 1883 for MQTT, 61614 for WebSocket; over TLS
    /// 61612, 61617, 5671, 8883, and 61614 again for WebSocket (ActiveMQ's `wss://` examples
    /// keep the port of `ws://`).
    pub fn default_port(self) -> u16 {
        match (self.protocol(), self.uses_tls()) {
            (WireProtocol::Stomp, false) => 61613,
            (WireProtocol::OpenWire, false) => 61616,
            (WireProtocol::Amqp, false) => 5672,
            (WireProtocol::Stomp, true) => 61612,
            (WireProtocol::OpenWire, true) => 61617,
            (WireProtocol::Amqp, true) => 5671,
            (WireProtocol::Mqtt, false) => 1883,
            (WireProtocol::Mqtt, true) => 8883,
            (WireProtocol::WebSocket, _) => 61614,
        }
    }
}

impl fmt::Display for Scheme {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        f.write_str(self.as_str())
    }
}

/// The options of a connector URI that ferromq implements; `None` means "not given", and the
/// `[transport]` default applies.
#[derive(Debug, Clone, Default, PartialEq, Eq)]
pub struct ConnectorOptions {
    /// `maximumConnections`: most simultaneous connections on this connector.
    pub maximum_connections: Option<usize>,
    /// `wireFormat.maxFrameSize`: largest frame accepted on this connector, in bytes.
    pub max_frame_size: Option<usize>,
    /// `needClientAuth`: TLS connectors only; a client without a certificate from
    /// `[tls] client_ca` is refused during the handshake.
    pub need_client_auth: Option<bool>,
    /// `wantClientAuth`: TLS connectors only; a client certificate is asked for and checked
    /// when given, but a client without one is let in.
    pub want_client_auth: Option<bool>,
    /// `transport.enabledProtocols`: TLS connectors only; the versions offered, instead of
    /// `[tls] protocols`.
    pub enabled_protocols: Option<Vec<TlsVersion>>,
    /// `transport.enabledCipherSuites`: TLS connectors only; the suites offered, instead of
    /// `[tls] cipher_suites` (checked when the broker starts).
    pub enabled_cipher_suites: Option<Vec<String>>,
    /// `allowedOrigins`: WebSocket connectors only; the `Origin` header values a handshake may
    /// carry (compared without regard to ASCII case), or `*` for any; a handshake from
    /// another origin is refused with 403. Not given: every origin, and handshakes without
    /// an `Origin` (non-browser clients), are let in. Given: a handshake without `Origin` is
    /// let in too, since only browsers send one and only browsers need the check.
    pub allowed_origins: Option<Vec<String>>,
    /// Options accepted for ActiveMQ compatibility that change nothing, as `(name, value)` in
    /// the order given; kept so that [`Display`](fmt::Display) writes the URI back whole.
    pub ignored: Vec<(String, String)>,
}

/// Why a connector URI was refused.
#[derive(Debug, Clone, PartialEq, Eq, thiserror::Error)]
#[non_exhaustive]
pub enum UriError {
    /// Not of the form `scheme://...`.
    #[error("expected scheme://host:port, e.g. stomp://127.0.0.1:61613")]
    MissingScheme,
    /// A scheme of a protocol ferromq will support but does not yet.
    #[error(
        "`{scheme}://` ({protocol}) connectors are not implemented yet; available: stomp://, stomp+nio://, tcp://, nio://, amqp://, amqp+nio://, ssl://, nio+ssl://, stomp+ssl://, stomp+nio+ssl://, amqp+ssl://, mqtt://, mqtt+nio://, mqtt+ssl://, mqtt+nio+ssl://, ws://, wss://"
    )]
    SchemeNotImplemented {
        /// The scheme as written.
        scheme: String,
        /// The protocol it stands for, e.g. "OpenWire".
        protocol: &'static str,
    },
    /// A scheme nobody knows.
    #[error("unknown scheme `{scheme}://`; available: stomp://, stomp+nio://, tcp://, nio://, amqp://, amqp+nio://, ssl://, nio+ssl://, stomp+ssl://, stomp+nio+ssl://, amqp+ssl://, mqtt://, mqtt+nio://, mqtt+ssl://, mqtt+nio+ssl://, ws://, wss://")]
    UnknownScheme {
        /// The scheme as written.
        scheme: String,
    },
    /// Spaces or other whitespace anywhere in the URI.
    #[error("connector URIs cannot contain whitespace")]
    Whitespace,
    /// `user@host`.
    #[error("user information (`...@`) is not supported in connector URIs")]
    UserInfo,
    /// Nothing between `://` and `:port`.
    #[error(
        "the host is empty; use 127.0.0.1 for this machine only or 0.0.0.0 for every interface"
    )]
    EmptyHost,
    /// A host that is neither an IP address nor a host name.
    #[error("invalid host `{host}`: {reason}")]
    InvalidHost {
        /// The host as written.
        host: String,
        /// What is wrong with it.
        reason: &'static str,
    },
    /// No `:port` after the host.
    #[error("the port is missing (write host:port, or port 0 for any free port)")]
    MissingPort,
    /// A port that is not a number.
    #[error("invalid port `{port}`: not a number")]
    InvalidPort {
        /// The port as written.
        port: String,
    },
    /// A port above 65535.
    #[error("port {port} is out of range (0-65535)")]
    PortOutOfRange {
        /// The port as written.
        port: String,
    },
    /// Something after `host:port` other than `?options`.
    #[error("unexpected `{rest}` after host:port (connector URIs have no path)")]
    UnexpectedPath {
        /// What follows the port.
        rest: String,
    },
    /// `&&`, a trailing `&`, or `=value` with no name.
    #[error("empty option name in `{option}`")]
    EmptyOption {
        /// The offending piece of the query.
        option: String,
    },
    /// `name` without `=value`.
    #[error("option {name} has no value (write {name}=value)")]
    OptionWithoutValue {
        /// The option's name.
        name: String,
    },
    /// The same option twice.
    #[error("option {name} is given more than once")]
    DuplicateOption {
        /// The option's name.
        name: String,
    },
    /// An option ferromq does not know or does not implement.
    #[error("unknown option {name}{}; available: maximumConnections, wireFormat.maxFrameSize, on WebSocket connectors allowedOrigins, and on TLS connectors needClientAuth, wantClientAuth, transport.enabledProtocols, transport.enabledCipherSuites", suggestion(.did_you_mean))]
    UnknownOption {
        /// The option's name.
        name: String,
        /// The known option it differs from only by case, if any.
        did_you_mean: Option<&'static str>,
    },
    /// A TLS option on a connector without TLS.
    #[error("option {name} is for TLS connectors; `{scheme}://` is plaintext (use ssl://, stomp+ssl://, amqp+ssl://, mqtt+ssl:// or wss://)")]
    TlsOptionWithoutTls {
        /// The option's name.
        name: String,
        /// The connector's scheme.
        scheme: Scheme,
    },
    /// A WebSocket option on a connector of another transport.
    #[error(
        "option {name} is for WebSocket connectors; `{scheme}://` is not one (use ws:// or wss://)"
    )]
    WebSocketOptionWithoutWebSocket {
        /// The option's name.
        name: String,
        /// The connector's scheme.
        scheme: Scheme,
    },
    /// A TLS version ferromq does not offer.
    #[error("invalid value `{value}` for option transport.enabledProtocols: {reason}")]
    InvalidTlsProtocol {
        /// The version as written.
        value: String,
        /// Why it is refused.
        reason: String,
    },
    /// A known option with a value it cannot take.
    #[error("invalid value `{value}` for option {name}: expected {expected}")]
    InvalidOptionValue {
        /// The option's name.
        name: &'static str,
        /// The value as written.
        value: String,
        /// What it should be.
        expected: &'static str,
    },
}

fn suggestion(did_you_mean: &Option<&'static str>) -> String {
    did_you_mean.map(|name| format!(" (did you mean {name}?)")).unwrap_or_default()
}

/// Schemes ActiveMQ has and ferromq will have, with the protocol each stands for.
const PLANNED_SCHEMES: &[(&str, &str)] = &[("vm", "in-process")];

const MAXIMUM_CONNECTIONS: &str = "maximumConnections";
const MAX_FRAME_SIZE: &str = "wireFormat.maxFrameSize";
const NEED_CLIENT_AUTH: &str = "needClientAuth";
const WANT_CLIENT_AUTH: &str = "wantClientAuth";
const ENABLED_PROTOCOLS: &str = "transport.enabledProtocols";
const ENABLED_CIPHER_SUITES: &str = "transport.enabledCipherSuites";
const ALLOWED_ORIGINS: &str = "allowedOrigins";
/// The options only a TLS connector takes.
const TLS_OPTIONS: [&str; 4] =
    [NEED_CLIENT_AUTH, WANT_CLIENT_AUTH, ENABLED_PROTOCOLS, ENABLED_CIPHER_SUITES];

/// ActiveMQ options accepted without effect, and why they have none.
const IGNORED_OPTIONS: &[(&str, &str)] = &[
    ("useQueueForAccept", "connections are accepted asynchronously, without a hand-off queue"),
    ("transport.useKeepAlive", "dead peers are detected with STOMP heart-beats"),
    (
        "transport.soTimeout",
        "sockets never block a thread; idle peers are detected with heart-beats",
    ),
    ("transport.tcpNoDelay", "socket options are chosen by ferromq"),
    ("transport.trace", "frame tracing is set with the log filter, not per connector"),
    ("transport.closeAsync", "connections are always closed asynchronously"),
    ("transport.threadName", "connections run as async tasks, not named threads"),
    ("transport.transportListener", "transport listeners are a Java extension point"),
];

impl FromStr for ConnectorUri {
    type Err = UriError;

    fn from_str(text: &str) -> Result<Self, UriError> {
        if text.chars().any(char::is_whitespace) {
            return Err(UriError::Whitespace);
        }
        let (scheme, rest) = text.split_once("://").ok_or(UriError::MissingScheme)?;
        let scheme = parse_scheme(scheme)?;
        let (authority, query) = match rest.split_once('?') {
            Some((authority, query)) => (authority, Some(query)),
            None => (rest, None),
        };
        let (host, port) = parse_authority(authority)?;
        let (options, warnings) = parse_options(query.unwrap_or(""), scheme)?;
        Ok(ConnectorUri { scheme, host, port, options, warnings })
    }
}

fn parse_scheme(scheme: &str) -> Result<Scheme, UriError> {
    let lower = scheme.to_ascii_lowercase();
    match lower.as_str() {
        "" => Err(UriError::MissingScheme),
        "stomp" => Ok(Scheme::Stomp),
        "stomp+nio" => Ok(Scheme::StompNio),
        "tcp" => Ok(Scheme::OpenWire),
        "nio" => Ok(Scheme::OpenWireNio),
        "amqp" => Ok(Scheme::Amqp),
        "amqp+nio" => Ok(Scheme::AmqpNio),
        "ssl" => Ok(Scheme::OpenWireSsl),
        "nio+ssl" => Ok(Scheme::OpenWireNioSsl),
        "stomp+ssl" => Ok(Scheme::StompSsl),
        "stomp+nio+ssl" => Ok(Scheme::StompNioSsl),
        "amqp+ssl" => Ok(Scheme::AmqpSsl),
        "mqtt" => Ok(Scheme::Mqtt),
        "mqtt+nio" => Ok(Scheme::MqttNio),
        "mqtt+ssl" => Ok(Scheme::MqttSsl),
        "mqtt+nio+ssl" => Ok(Scheme::MqttNioSsl),
        "ws" => Ok(Scheme::Ws),
        "wss" => Ok(Scheme::Wss),
        _ => match PLANNED_SCHEMES.iter().find(|(name, _)| *name == lower) {
            Some((_, protocol)) => Err(UriError::SchemeNotImplemented { scheme: lower, protocol }),
            None => Err(UriError::UnknownScheme { scheme: scheme.to_owned() }),
        },
    }
}

/// `host:port` or `[v6]:port`, optionally followed by a lone `/`.
fn parse_authority(authority: &str) -> Result<(String, u16), UriError> {
    // ActiveMQ tolerates a trailing slash (`tcp://host:61616/`); nothing else may follow.
    let authority = authority.strip_suffix('/').unwrap_or(authority);
    if authority.contains('@') {
        return Err(UriError::UserInfo);
    }
    let (host, port) = if let Some(bracketed) = authority.strip_prefix('[') {
        let (address, after) = bracketed.split_once(']').ok_or(UriError::InvalidHost {
            host: authority.to_owned(),
            reason: "missing `]` after an IPv6 address",
        })?;
        if address.parse::<Ipv6Addr>().is_err() {
            return Err(UriError::InvalidHost {
                host: address.to_owned(),
                reason: "not an IPv6 address",
            });
        }
        let port = match after.strip_prefix(':') {
            Some(port) => port,
            None if after.is_empty() => return Err(UriError::MissingPort),
            None => return Err(UriError::UnexpectedPath { rest: after.to_owned() }),
        };
        (address, port)
    } else {
        let (host, port) = match authority.split_once(':') {
            Some(split) => split,
            None if authority.is_empty() => return Err(UriError::EmptyHost),
            None => return Err(UriError::MissingPort),
        };
        if port.contains(':') {
            return Err(UriError::InvalidHost {
                host: authority.to_owned(),
                reason: "IPv6 addresses must be in brackets, e.g. [::1]:61613",
            });
        }
        check_host_name(host)?;
        (host, port)
    };
    Ok((host.to_owned(), parse_port(port)?))
}

fn check_host_name(host: &str) -> Result<(), UriError> {
    if host.is_empty() {
        return Err(UriError::EmptyHost);
    }
    let invalid = |reason| UriError::InvalidHost { host: host.to_owned(), reason };
    if !host.chars().all(|c| c.is_ascii_alphanumeric() || matches!(c, '-' | '.' | '_')) {
        return Err(invalid("only letters, digits, `-`, `_` and `.` may appear in a host name"));
    }
    // A name made only of digits and dots would be taken for an IPv4 address by the resolver.
    if host.chars().all(|c| c.is_ascii_digit() || c == '.') && host.parse::<Ipv4Addr>().is_err() {
        return Err(invalid("not an IPv4 address"));
    }
    Ok(())
}

fn parse_port(port: &str) -> Result<u16, UriError> {
    if port.is_empty() {
        return Err(UriError::MissingPort);
    }
    if let Some(slash) = port.find('/') {
        let (number, rest) = port.split_at(slash);
        if number.chars().all(|c| c.is_ascii_digit()) && !number.is_empty() {
            return Err(UriError::UnexpectedPath { rest: rest.to_owned() });
        }
    }
    if !port.chars().all(|c| c.is_ascii_digit()) {
        return Err(UriError::InvalidPort { port: port.to_owned() });
    }
    port.parse().map_err(|_| UriError::PortOutOfRange { port: port.to_owned() })
}

fn parse_options(query: &str, scheme: Scheme) -> Result<(ConnectorOptions, Vec<String>), UriError> {
    let mut options = ConnectorOptions::default();
    let mut warnings = Vec::new();
    if query.is_empty() {
        return Ok((options, warnings));
    }
    let mut seen: Vec<&str> = Vec::new();
    for option in query.split('&') {
        let (name, value) = match option.split_once('=') {
            Some((name, value)) => (name, value),
            None if option.is_empty() => {
                return Err(UriError::EmptyOption { option: option.to_owned() })
            }
            None => return Err(UriError::OptionWithoutValue { name: option.to_owned() }),
        };
        if name.is_empty() {
            return Err(UriError::EmptyOption { option: option.to_owned() });
        }
        if seen.contains(&name) {
            return Err(UriError::DuplicateOption { name: name.to_owned() });
        }
        seen.push(name);
        if TLS_OPTIONS.contains(&name) && !scheme.uses_tls() {
            return Err(UriError::TlsOptionWithoutTls { name: name.to_owned(), scheme });
        }
        if name == ALLOWED_ORIGINS && scheme.protocol() != WireProtocol::WebSocket {
            return Err(UriError::WebSocketOptionWithoutWebSocket {
                name: name.to_owned(),
                scheme,
            });
        }
        match name {
            MAXIMUM_CONNECTIONS => {
                options.maximum_connections = Some(positive(MAXIMUM_CONNECTIONS, value)?)
            }
            MAX_FRAME_SIZE => options.max_frame_size = Some(positive(MAX_FRAME_SIZE, value)?),
            NEED_CLIENT_AUTH => options.need_client_auth = Some(boolean(NEED_CLIENT_AUTH, value)?),
            WANT_CLIENT_AUTH => options.want_client_auth = Some(boolean(WANT_CLIENT_AUTH, value)?),
            ENABLED_PROTOCOLS => {
                let versions = list(ENABLED_PROTOCOLS, value)?
                    .into_iter()
                    .map(|version| {
                        version.parse::<TlsVersion>().map_err(|reason| {
                            UriError::InvalidTlsProtocol { value: version.to_owned(), reason }
                        })
                    })
                    .collect::<Result<Vec<_>, _>>()?;
                options.enabled_protocols = Some(versions);
            }
            ENABLED_CIPHER_SUITES => {
                let suites = list(ENABLED_CIPHER_SUITES, value)?;
                options.enabled_cipher_suites =
                    Some(suites.into_iter().map(str::to_owned).collect());
            }
            ALLOWED_ORIGINS => {
                let origins = list(ALLOWED_ORIGINS, value)?;
                options.allowed_origins = Some(origins.into_iter().map(str::to_owned).collect());
            }
            _ => {
                let Some((_, why)) = IGNORED_OPTIONS.iter().find(|(ignored, _)| *ignored == name)
                else {
                    return Err(UriError::UnknownOption {
                        name: name.to_owned(),
                        did_you_mean: similar_option(name),
                    });
                };
                options.ignored.push((name.to_owned(), value.to_owned()));
                warnings.push(no_effect_warning(name, why));
            }
        }
    }
    Ok((options, warnings))
}

fn boolean(name: &'static str, value: &str) -> Result<bool, UriError> {
    match value {
        "true" => Ok(true),
        "false" => Ok(false),
        _ => Err(UriError::InvalidOptionValue {
            name,
            value: value.to_owned(),
            expected: "true or false",
        }),
    }
}

/// A comma-separated list of at least one non-empty item.
fn list<'v>(name: &'static str, value: &'v str) -> Result<Vec<&'v str>, UriError> {
    let items: Vec<&str> = value.split(',').map(str::trim).collect();
    if items.iter().any(|item| item.is_empty()) {
        return Err(UriError::InvalidOptionValue {
            name,
            value: value.to_owned(),
            expected: "a comma-separated list without empty items",
        });
    }
    Ok(items)
}

fn no_effect_warning(name: &str, why: &str) -> String {
    format!("option {name} has no effect in ferromq: {why}")
}

fn positive(name: &'static str, value: &str) -> Result<usize, UriError> {
    match value.parse::<usize>() {
        Ok(number) if number > 0 && value.chars().all(|c| c.is_ascii_digit()) => Ok(number),
        _ => Err(UriError::InvalidOptionValue {
            name,
            value: value.to_owned(),
            expected: "a whole number greater than zero",
        }),
    }
}

/// The known option `name` differs from only by case: ActiveMQ option names are
/// case-sensitive, and so are ours.
fn similar_option(name: &str) -> Option<&'static str> {
    [MAXIMUM_CONNECTIONS, MAX_FRAME_SIZE, ALLOWED_ORIGINS]
        .into_iter()
        .chain(TLS_OPTIONS)
        .chain(IGNORED_OPTIONS.iter().map(|(known, _)| *known))
        .find(|known| known.eq_ignore_ascii_case(name))
}

impl ConnectorUri {
    /// `host:port`, with an IPv6 host in brackets: `127.0.0.1:61613`, `[::1]:0`.
    pub fn address(&self) -> String {
        if self.host.contains(':') {
            format!("[{}]:{}", self.host, self.port)
        } else {
            format!("{}:{}", self.host, self.port)
        }
    }
}

/// The canonical text: scheme, `address()`, then the options (implemented ones first).
impl fmt::Display for ConnectorUri {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        write!(f, "{}://{}", self.scheme, self.address())?;
        let mut separator = '?';
        let mut option = |f: &mut fmt::Formatter<'_>, name: &str, value: &dyn fmt::Display| {
            let result = write!(f, "{separator}{name}={value}");
            separator = '&';
            result
        };
        if let Some(maximum) = self.options.maximum_connections {
            option(f, MAXIMUM_CONNECTIONS, &maximum)?;
        }
        if let Some(size) = self.options.max_frame_size {
            option(f, MAX_FRAME_SIZE, &size)?;
        }
        if let Some(need) = self.options.need_client_auth {
            option(f, NEED_CLIENT_AUTH, &need)?;
        }
        if let Some(want) = self.options.want_client_auth {
            option(f, WANT_CLIENT_AUTH, &want)?;
        }
        if let Some(versions) = &self.options.enabled_protocols {
            let names: Vec<&str> = versions.iter().map(|version| version.as_str()).collect();
            option(f, ENABLED_PROTOCOLS, &names.join(","))?;
        }
        if let Some(suites) = &self.options.enabled_cipher_suites {
            option(f, ENABLED_CIPHER_SUITES, &suites.join(","))?;
        }
        if let Some(origins) = &self.options.allowed_origins {
            option(f, ALLOWED_ORIGINS, &origins.join(","))?;
        }
        for (name, value) in &self.options.ignored {
            option(f, name, value)?;
        }
        Ok(())
    }
}

impl Serialize for ConnectorUri {
    fn serialize<S: Serializer>(&self, serializer: S) -> Result<S::Ok, S::Error> {
        serializer.collect_str(self)
    }
}

impl<'de> Deserialize<'de> for ConnectorUri {
    fn deserialize<D: Deserializer<'de>>(deserializer: D) -> Result<Self, D::Error> {
        let text = String::deserialize(deserializer)?;
        text.parse().map_err(serde::de::Error::custom)
    }
}
