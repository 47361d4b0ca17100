//! What a load run talks to: [`BrokerUrl`] (ActiveMQ's `--brokerUrl` syntax) and
//! [`DestinationName`] (ActiveMQ's `queue://NAME` / `topic://NAME` tool syntax).

use std::fmt;
use std::path::{Path, PathBuf};
use std::str::FromStr;

use super::failover::FailoverOptions;
use super::LoadError;

/// The STOMP port ActiveMQ and ferromq listen on by default, used when a `stomp://` URL has
/// none.
pub const DEFAULT_STOMP_PORT: u16 = 61613;

/// The OpenWire port ActiveMQ and ferromq listen on by default, used when a `tcp://` or
/// `nio://` URL has none.
pub const DEFAULT_OPENWIRE_PORT: u16 = 61616;

/// The AMQP port (IANA's, ActiveMQ's and ferromq's), used when an `amqp://` URL has none.
pub const DEFAULT_AMQP_PORT: u16 = 5672;

/// The MQTT port (IANA's, ActiveMQ's and ferromq's), used when an `mqtt://` URL has none.
pub const DEFAULT_MQTT_PORT: u16 = 1883;

/// The MQTT over TLS port (IANA's), used when an `mqtt+ssl://` URL has none.
pub const DEFAULT_MQTT_TLS_PORT: u16 = 8883;

/// The TLS ports ActiveMQ and ferromq use: OpenWire `ssl://`, STOMP `stomp+ssl://`, AMQP
/// `amqp+ssl://`.
pub const DEFAULT_TLS_PORTS: (u16, u16, u16) = (61617, 61612, 5671);

/// The advice every refused URL ends with.
const USE_INSTEAD: &str = "use tcp://host:61616 (OpenWire), stomp://host:61613 (STOMP) or \
                           amqp://host:5672 (AMQP), or over TLS ssl://host:61617, \
                           stomp+ssl://host:61612 or amqp+ssl://host:5671";

/// The wire protocol a [`BrokerUrl`] names.
#[derive(Debug, Clone, Copy, PartialEq, Eq, Hash)]
pub enum WireProtocol {
    /// ActiveMQ's native protocol (`tcp://`, `nio://`).
    OpenWire,
    /// STOMP (`stomp://`, `stomp+nio://`).
    Stomp,
    /// AMQP 1.0 (`amqp://`, `amqp+nio://`), through [`crate::amqp`]: no transactions, every
    /// send confirmed.
    Amqp,
    /// MQTT 3.1.1 (`mqtt://`, `mqtt+nio://`), through [`crate::mqtt`]: topics only, no
    /// transactions or durable subscriptions; persistent sends at QoS 1.
    Mqtt,
}

impl WireProtocol {
    /// The protocol's default port.
    pub fn default_port(self) -> u16 {
        match self {
            WireProtocol::OpenWire => DEFAULT_OPENWIRE_PORT,
            WireProtocol::Stomp => DEFAULT_STOMP_PORT,
            WireProtocol::Amqp => DEFAULT_AMQP_PORT,
            WireProtocol::Mqtt => DEFAULT_MQTT_PORT,
        }
    }

    /// The URL scheme ferromq writes for it.
    pub fn scheme(self) -> &'static str {
        match self {
            WireProtocol::OpenWire => "tcp",
            WireProtocol::Stomp => "stomp",
            WireProtocol::Amqp => "amqp",
            WireProtocol::Mqtt => "mqtt",
        }
    }
}

/// One broker address: protocol, host, port and whether over TLS, parsed from an
/// ActiveMQ-style URL such as `tcp://localhost:61616` or `stomp://127.0.0.1:61613`.
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct Endpoint {
    text: String,
    protocol: WireProtocol,
    host: String,
    port: u16,
    tls: bool,
}

impl Endpoint {
    /// The protocol the scheme names.
    pub fn protocol(&self) -> WireProtocol {
        self.protocol
    }

    /// The host (a name or an IP address, IPv6 without brackets).
    pub fn host(&self) -> &str {
        &self.host
    }

    /// The port.
    pub fn port(&self) -> u16 {
        self.port
    }

    /// Whether connections are TLS.
    pub fn uses_tls(&self) -> bool {
        self.tls
    }

    /// The URL as it was given.
    pub fn as_str(&self) -> &str {
        &self.text
    }
}

impl fmt::Display for Endpoint {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        f.write_str(&self.text)
    }
}

/// A broker to connect to: one [`Endpoint`] (`tcp://localhost:61616`), or several behind
/// ActiveMQ's failover syntax (`failover:(tcp://a:61616,tcp://b:61616)?randomize=false`,
/// or without parentheses and options `failover:tcp://a:61616,tcp://b:61616`), with its
/// [`FailoverOptions`].
///
/// `tcp://` and `nio://` are OpenWire, `stomp://` and `stomp+nio://` STOMP, `amqp://` and
/// `amqp+nio://` AMQP 1.0, `mqtt://` and `mqtt+nio://` MQTT 3.1.1 (port 1883; the `nio` forms are the same protocol on the wire; they name a
/// server-side transport). Over TLS: `ssl://` and `nio+ssl://` (OpenWire, port 61617),
/// `stomp+ssl://` (61612), `amqp+ssl://` and `amqps://` (5671), `mqtt+ssl://` and
/// `mqtts://` (8883); the broker's certificate is
/// checked against [`trust_store`](Self::trust_store) (for every endpoint), else the
/// system's authorities. The endpoints of a failover URL speak one protocol. Everything
/// else an ActiveMQ user may type is refused with the reason: `discovery:`, `fanout:`,
/// WebSockets, `vm://`. Options of a single URL (`?name=value`) are refused too, since the client
/// implements none of them; a failover URL's options are ActiveMQ's failover options.
#[derive(Debug, Clone, PartialEq)]
pub struct BrokerUrl {
    text: String,
    /// Never empty; one unless `failover` is set.
    endpoints: Vec<Endpoint>,
    failover: Option<FailoverOptions>,
    trust_store: Option<PathBuf>,
}

impl BrokerUrl {
    /// The protocol of every endpoint.
    pub fn protocol(&self) -> WireProtocol {
        self.first().protocol
    }

    /// The first endpoint's host (for a failover URL, the first of the list).
    pub fn host(&self) -> &str {
        &self.first().host
    }

    /// The first endpoint's port (for a failover URL, the first of the list).
    pub fn port(&self) -> u16 {
        self.first().port
    }

    /// The URL as it was given.
    pub fn as_str(&self) -> &str {
        &self.text
    }

    /// Whether connections are TLS (the first endpoint's; a failover URL may mix TLS and
    /// plain endpoints of one protocol, as ActiveMQ allows).
    pub fn uses_tls(&self) -> bool {
        self.first().tls
    }

    /// The brokers, in the URL's order: one, or those of a failover URL.
    pub fn endpoints(&self) -> &[Endpoint] {
        &self.endpoints
    }

    /// The failover options of a `failover:` URL; `None` for a single broker (no
    /// reconnecting: a lost connection fails the run).
    pub fn failover(&self) -> Option<&FailoverOptions> {
        self.failover.as_ref()
    }

    /// The PEM file of the authorities a TLS broker's certificate must chain to; `None`: the
    /// system's.
    pub fn trust_store(&self) -> Option<&Path> {
        self.trust_store.as_deref()
    }

    /// This URL with `trust_store` as its trust store, for every endpoint (the tools'
    /// `--trustStore`, perf's `factory.trustStore`).
    pub fn with_trust_store(mut self, trust_store: Option<PathBuf>) -> BrokerUrl {
        self.trust_store = trust_store;
        self
    }

    fn first(&self) -> &Endpoint {
        // `endpoints` is never empty: every constructor puts one in.
        &self.endpoints[0]
    }
}

impl Default for BrokerUrl {
    /// `tcp://localhost:61616`: OpenWire to a broker on this machine, ActiveMQ's default.
    fn default() -> BrokerUrl {
        let text = format!("tcp://localhost:{DEFAULT_OPENWIRE_PORT}");
        BrokerUrl {
            endpoints: vec![Endpoint {
                text: text.clone(),
                protocol: WireProtocol::OpenWire,
                host: "localhost".to_owned(),
                port: DEFAULT_OPENWIRE_PORT,
                tls: false,
            }],
            text,
            failover: None,
            trust_store: None,
        }
    }
}

impl fmt::Display for BrokerUrl {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        f.write_str(&self.text)
    }
}

impl FromStr for BrokerUrl {
    type Err = LoadError;

    fn from_str(text: &str) -> Result<BrokerUrl, LoadError> {
        let refuse = |reason: String| LoadError::InvalidUrl { url: text.to_owned(), reason };
        let trimmed = text.trim();
        if trimmed.is_empty() {
            return Err(refuse(format!("the URL is empty; {USE_INSTEAD}")));
        }
        let lower = trimmed.to_ascii_lowercase();
        if lower.starts_with("failover:") {
            let (endpoints, failover) =
                parse_failover(&trimmed["failover:".len()..]).map_err(refuse)?;
            return Ok(BrokerUrl {
                text: trimmed.to_owned(),
                endpoints,
                failover: Some(failover),
                trust_store: None,
            });
        }
        for composite in ["discovery:", "fanout:", "static:", "multicast:"] {
            if lower.starts_with(composite) {
                let scheme = composite.trim_end_matches(':');
                return Err(refuse(format!(
                    "{scheme}: URLs are not implemented in ferromq's client; give one broker \
                     URL such as tcp://host:61616, or several as failover:(tcp://a:61616,tcp://b:61616)"
                )));
            }
        }
        let endpoint = parse_endpoint(trimmed).map_err(refuse)?;
        Ok(BrokerUrl {
            text: trimmed.to_owned(),
            endpoints: vec![endpoint],
            failover: None,
            trust_store: None,
        })
    }
}

/// The endpoints and options of a failover URL after `failover:`: `(uri,uri)?options`,
/// `//(uri,uri)?options` or `uri,uri`.
fn parse_failover(rest: &str) -> Result<(Vec<Endpoint>, FailoverOptions), String> {
    let rest = rest.trim();
    let rest = rest.strip_prefix("//").unwrap_or(rest);
    if rest.to_ascii_lowercase().contains("failover:") {
        return Err("a failover URL cannot nest another".into());
    }
    let (list, query) = match rest.strip_prefix('(') {
        Some(inside) => {
            let Some((list, after)) = inside.split_once(')') else {
                return Err("unclosed `(`; expected failover:(URI,URI)?OPTIONS".into());
            };
            let query = match after {
                "" => "",
                _ => after.strip_prefix('?').ok_or_else(|| {
                    format!("unexpected `{after}` after `)`; expected ?NAME=VALUE&...")
                })?,
            };
            (list, query)
        }
        // As in ActiveMQ, without parentheses there is no place for failover options: a
        // `?` belongs to the last URI (and is refused there).
        None => (rest, ""),
    };
    let mut endpoints: Vec<Endpoint> = Vec::new();
    for uri in list.split(',').map(str::trim) {
        if uri.is_empty() {
            return Err("an empty broker URI in the list; expected failover:(URI,URI)".into());
        }
        let endpoint = parse_endpoint(uri).map_err(|reason| {
            let hint = if uri.contains('?') && !rest.starts_with('(') {
                " (failover options go after parentheses: failover:(URI,URI)?randomize=false)"
            } else {
                ""
            };
            format!("`{uri}`: {reason}{hint}")
        })?;
        if let Some(first) = endpoints.first() {
            if first.protocol != endpoint.protocol {
                return Err(format!(
                    "the brokers of a failover URL speak one protocol; `{first}` is {:?} and \
                     `{endpoint}` is {:?}",
                    first.protocol, endpoint.protocol
                ));
            }
        }
        endpoints.push(endpoint);
    }
    let failover = FailoverOptions::parse(query)?;
    Ok((endpoints, failover))
}

/// One broker URI: `SCHEME://HOST[:PORT][/]`.
fn parse_endpoint(trimmed: &str) -> Result<Endpoint, String> {
    let Some((scheme, rest)) = trimmed.split_once("://") else {
        return Err(format!(
            "expected SCHEME://HOST:PORT, for example tcp://127.0.0.1:{DEFAULT_OPENWIRE_PORT}"
        ));
    };
    let (protocol, tls) = check_scheme(&scheme.to_ascii_lowercase())?;
    let (authority, query) = match rest.split_once('?') {
        Some((authority, query)) => (authority, Some(query)),
        None => (rest, None),
    };
    if let Some(query) = query.filter(|q| !q.is_empty()) {
        return Err(format!(
            "URL options are not implemented in ferromq's client yet (got `?{query}`); \
             remove them"
        ));
    }
    let authority = authority.strip_suffix('/').unwrap_or(authority);
    if authority.contains('/') {
        return Err("a broker URL has no path; expected SCHEME://HOST:PORT".into());
    }
    if authority.contains('@') {
        return Err("credentials do not go in the URL; use --user and --password".into());
    }
    let default_port = match (tls, protocol) {
        (false, protocol) => protocol.default_port(),
        (true, WireProtocol::OpenWire) => DEFAULT_TLS_PORTS.0,
        (true, WireProtocol::Stomp) => DEFAULT_TLS_PORTS.1,
        (true, WireProtocol::Amqp) => DEFAULT_TLS_PORTS.2,
        (true, WireProtocol::Mqtt) => DEFAULT_MQTT_TLS_PORT,
    };
    let (host, port) = split_host_port(authority, default_port)?;
    Ok(Endpoint { text: trimmed.to_owned(), protocol, host, port, tls })
}

/// The protocol of an implemented scheme, and whether it is over TLS; explains every other
/// one.
fn check_scheme(scheme: &str) -> Result<(WireProtocol, bool), String> {
    match scheme {
        "tcp" | "nio" => Ok((WireProtocol::OpenWire, false)),
        "stomp" | "stomp+nio" => Ok((WireProtocol::Stomp, false)),
        "ssl" | "nio+ssl" => Ok((WireProtocol::OpenWire, true)),
        "auto" | "auto+nio" | "auto+ssl" | "auto+nio+ssl" => Err(format!(
            "{scheme}:// names a broker-side transport that detects the protocol; a client \
             connects with a protocol: {USE_INSTEAD}"
        )),
        "stomp+ssl" | "stomp+nio+ssl" => Ok((WireProtocol::Stomp, true)),
        "amqp" | "amqp+nio" => Ok((WireProtocol::Amqp, false)),
        "amqp+ssl" | "amqp+nio+ssl" | "amqps" => Ok((WireProtocol::Amqp, true)),
        "mqtt" | "mqtt+nio" => Ok((WireProtocol::Mqtt, false)),
        "mqtt+ssl" | "mqtt+nio+ssl" | "mqtts" => Ok((WireProtocol::Mqtt, true)),
        "ws" | "wss" => {
            Err(format!("WebSockets are not implemented in ferromq's client yet; {USE_INSTEAD}"))
        }
        "vm" => Err(format!(
            "vm:// names a broker inside the same process; this needs a network URL, {USE_INSTEAD}"
        )),
        other => Err(format!(
            "unknown scheme `{other}`; ferromq's client speaks OpenWire, STOMP and AMQP: \
             {USE_INSTEAD}"
        )),
    }
}

/// `host`, `host:port`, `[v6]` or `[v6]:port`; the port defaults to `default_port`.
fn split_host_port(authority: &str, default_port: u16) -> Result<(String, u16), String> {
    let (host, port) = if let Some(bracketed) = authority.strip_prefix('[') {
        let Some((host, after)) = bracketed.split_once(']') else {
            return Err("unclosed `[` in the host".into());
        };
        let port = match after {
            "" => None,
            _ => Some(after.strip_prefix(':').ok_or_else(|| {
                format!("unexpected `{after}` after the IPv6 address; expected :PORT")
            })?),
        };
        (host, port)
    } else {
        match authority.split_once(':') {
            Some((_, port)) if port.contains(':') => {
                return Err("an IPv6 address goes in brackets: tcp://[::1]:61616".into())
            }
            Some((host, port)) => (host, Some(port)),
            None => (authority, None),
        }
    };
    if host.is_empty() {
        return Err("the host is missing; expected SCHEME://HOST:PORT".into());
    }
    let port = match port {
        None => default_port,
        Some(port) => match port.parse::<u16>() {
            Ok(0) | Err(_) => return Err(format!("invalid port `{port}`: expected 1 to 65535")),
            Ok(port) => port,
        },
    };
    Ok((host.to_owned(), port))
}

/// Whether a destination is a queue or a topic.
#[derive(Debug, Clone, Copy, PartialEq, Eq, Hash)]
pub enum DestinationKind {
    /// Point to point: each message goes to one consumer.
    Queue,
    /// Publish and subscribe: each message goes to every subscriber.
    Topic,
}

/// A destination named as ActiveMQ's tools name it: `queue://NAME`, `topic://NAME`, or a
/// bare `NAME`, which means a queue (as in ActiveMQ). The STOMP forms `/queue/NAME` and
/// `/topic/NAME` are accepted too.
#[derive(Debug, Clone, PartialEq, Eq, Hash)]
pub struct DestinationName {
    kind: DestinationKind,
    name: String,
}

impl DestinationName {
    /// A queue called `name`.
    pub fn queue(name: impl Into<String>) -> DestinationName {
        DestinationName { kind: DestinationKind::Queue, name: name.into() }
    }

    /// A topic called `name`.
    pub fn topic(name: impl Into<String>) -> DestinationName {
        DestinationName { kind: DestinationKind::Topic, name: name.into() }
    }

    /// Queue or topic.
    pub fn kind(&self) -> DestinationKind {
        self.kind
    }

    /// The name without a prefix.
    pub fn name(&self) -> &str {
        &self.name
    }

    /// Whether it is a topic.
    pub fn is_topic(&self) -> bool {
        self.kind == DestinationKind::Topic
    }

    /// The OpenWire destination (an ActiveMQ queue or topic).
    pub fn openwire_destination(&self) -> protocol::openwire::Destination {
        match self.kind {
            DestinationKind::Queue => protocol::openwire::Destination::queue(self.name.as_str()),
            DestinationKind::Topic => protocol::openwire::Destination::topic(self.name.as_str()),
        }
    }

    /// The AMQP address: `queue://NAME` or `topic://NAME`, ActiveMQ's and ferromq's
    /// spelling of an address with its kind.
    pub fn amqp_address(&self) -> String {
        self.to_string()
    }

    /// The MQTT topic name of a topic (`a.b` is `a/b`, ActiveMQ's mapping; `*` and `>`
    /// become `+` and `#`); `None` for a queue, which MQTT cannot name.
    pub fn mqtt_topic(&self) -> Option<String> {
        if self.kind != DestinationKind::Topic {
            return None;
        }
        let levels: Vec<&str> = self
            .name
            .split('.')
            .map(|level| match level {
                "*" => "+",
                ">" => "#",
                level => level,
            })
            .collect();
        Some(levels.join("/"))
    }

    /// The STOMP `destination` header: `/queue/NAME` or `/topic/NAME`.
    pub fn stomp_destination(&self) -> String {
        match self.kind {
            DestinationKind::Queue => format!("/queue/{}", self.name),
            DestinationKind::Topic => format!("/topic/{}", self.name),
        }
    }
}

impl fmt::Display for DestinationName {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        match self.kind {
            DestinationKind::Queue => write!(f, "queue://{}", self.name),
            DestinationKind::Topic => write!(f, "topic://{}", self.name),
        }
    }
}

impl FromStr for DestinationName {
    type Err = LoadError;

    fn from_str(text: &str) -> Result<DestinationName, LoadError> {
        let refuse = |reason: &str| LoadError::InvalidDestination {
            destination: text.to_owned(),
            reason: reason.to_owned(),
        };
        let trimmed = text.trim();
        let lower = trimmed.to_ascii_lowercase();
        for temporary in ["temp-queue://", "temp-topic://", "/temp-queue/", "/temp-topic/"] {
            if lower.starts_with(temporary) {
                return Err(refuse(
                    "a temporary destination cannot be named on the command line; use \
                     queue://NAME or topic://NAME",
                ));
            }
        }
        let prefixes = [
            ("queue://", DestinationKind::Queue),
            ("topic://", DestinationKind::Topic),
            ("/queue/", DestinationKind::Queue),
            ("/topic/", DestinationKind::Topic),
        ];
        let (kind, name) = prefixes
            .iter()
            .find(|(prefix, _)| lower.starts_with(prefix))
            .map(|(prefix, kind)| (*kind, &trimmed[prefix.len()..]))
            .unwrap_or((DestinationKind::Queue, trimmed));
        if name.is_empty() {
            return Err(refuse("the name is empty; expected queue://NAME or topic://NAME"));
        }
        if name.contains("://") || name.starts_with('/') {
            return Err(refuse("expected queue://NAME, topic://NAME or a bare queue name"));
        }
        if name.chars().any(char::is_whitespace) {
            return Err(refuse("a destination name cannot contain white space"));
        }
        Ok(DestinationName { kind, name: name.to_owned() })
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    fn url(text: &str) -> BrokerUrl {
        text.parse().unwrap_or_else(|e| panic!("{text}: {e}"))
    }

    fn url_error(text: &str) -> String {
        match text.parse::<BrokerUrl>() {
            Ok(url) => panic!("{text} should be refused, parsed as {url:?}"),
            Err(error) => error.to_string(),
        }
    }

    #[test]
    fn stomp_urls_parse() {
        let parsed = url("stomp://127.0.0.1:61613");
        assert_eq!((parsed.host(), parsed.port()), ("127.0.0.1", 61613));
        assert_eq!(parsed.to_string(), "stomp://127.0.0.1:61613");
        let nio = url("stomp+nio://broker.example:1234");
        assert_eq!((nio.host(), nio.port()), ("broker.example", 1234));
        let upper = url("STOMP://localhost:5/");
        assert_eq!((upper.host(), upper.port()), ("localhost", 5));
        let no_port = url("stomp://localhost");
        assert_eq!(no_port.port(), DEFAULT_STOMP_PORT);
        let v6 = url("stomp://[::1]:61614");
        assert_eq!((v6.host(), v6.port()), ("::1", 61614));
        assert_eq!(url("stomp://[::1]").port(), DEFAULT_STOMP_PORT);
        assert_eq!(url("  stomp://h:1  ").as_str(), "stomp://h:1");
        assert_eq!(parsed.protocol(), WireProtocol::Stomp);
        assert_eq!(nio.protocol(), WireProtocol::Stomp);
    }

    #[test]
    fn openwire_urls_parse_and_are_the_default() {
        let tcp = url("tcp://localhost:61616");
        assert_eq!(
            (tcp.protocol(), tcp.host(), tcp.port()),
            (WireProtocol::OpenWire, "localhost", 61616)
        );
        let nio = url("NIO://10.0.0.1:7000");
        assert_eq!((nio.protocol(), nio.port()), (WireProtocol::OpenWire, 7000));
        assert_eq!(url("tcp://broker").port(), DEFAULT_OPENWIRE_PORT);
        assert_eq!(url("tcp://[::1]").port(), DEFAULT_OPENWIRE_PORT);
        assert_eq!(BrokerUrl::default(), url("tcp://localhost:61616"));
        assert_eq!(BrokerUrl::default().to_string(), "tcp://localhost:61616");
    }

    #[test]
    fn tls_urls_name_their_protocol_and_default_port() {
        for (text, protocol, port) in [
            ("ssl://h", WireProtocol::OpenWire, 61617),
            ("nio+ssl://h:1", WireProtocol::OpenWire, 1),
            ("stomp+ssl://h", WireProtocol::Stomp, 61612),
            ("amqps://h", WireProtocol::Amqp, 5671),
            ("amqp+ssl://h", WireProtocol::Amqp, 5671),
        ] {
            let parsed = url(text);
            assert!(parsed.uses_tls(), "{text}");
            assert_eq!((parsed.protocol(), parsed.port()), (protocol, port), "{text}");
        }
        assert!(!url("tcp://h").uses_tls());
        let trusted = url("ssl://h").with_trust_store(Some("ca.pem".into()));
        assert_eq!(trusted.trust_store(), Some(std::path::Path::new("ca.pem")));
        let error = url_error("auto+ssl://h:61616");
        assert!(error.contains("broker-side transport"), "{error}");
        assert!(error.contains("ssl://host:61617"), "{error}");
    }

    #[test]
    fn failover_urls_list_their_brokers_and_options() {
        let parsed = url("failover:(tcp://a:61616,tcp://b:61617)?randomize=false&timeout=3000");
        let brokers: Vec<(&str, u16)> =
            parsed.endpoints().iter().map(|e| (e.host(), e.port())).collect();
        assert_eq!(brokers, [("a", 61616), ("b", 61617)]);
        assert_eq!(
            (parsed.protocol(), parsed.host(), parsed.port()),
            (WireProtocol::OpenWire, "a", 61616)
        );
        let options = parsed.failover().expect("failover options");
        assert!(!options.randomize);
        assert_eq!(options.timeout, Some(std::time::Duration::from_secs(3)));
        assert_eq!(
            parsed.to_string(),
            "failover:(tcp://a:61616,tcp://b:61617)?randomize=false&timeout=3000"
        );
        // Without parentheses (ActiveMQ accepts both), with `//`, with spaces, one broker.
        let bare = url("failover:stomp://a:1, stomp://b");
        assert_eq!(bare.endpoints()[1].port(), DEFAULT_STOMP_PORT);
        assert_eq!(bare.failover(), Some(&FailoverOptions::default()));
        assert_eq!(url("FAILOVER://(tcp://a)").endpoints().len(), 1);
        assert_eq!(url("failover:(ssl://a,tcp://b)").endpoints().len(), 2);
        assert!(url("tcp://a").failover().is_none());
        // The trust store is the URL's, so it applies to every endpoint.
        let trusted = url("failover:(ssl://a,ssl://b)").with_trust_store(Some("ca.pem".into()));
        assert_eq!(trusted.trust_store(), Some(std::path::Path::new("ca.pem")));
    }

    #[test]
    fn bad_failover_urls_are_refused_with_the_reason() {
        let mixed = url_error("failover:(tcp://a:61616,stomp://b:61613)");
        assert!(
            mixed.contains("speak one protocol") && mixed.contains("stomp://b:61613"),
            "{mixed}"
        );
        let unknown = url_error("failover:(tcp://a,tcp://b)?randomise=false");
        assert!(unknown.contains("unknown failover option `randomise`"), "{unknown}");
        assert!(unknown.contains("initialReconnectDelay"), "{unknown}");
        let misplaced = url_error("failover:tcp://a,tcp://b?randomize=false");
        assert!(misplaced.contains("go after parentheses"), "{misplaced}");
        assert!(url_error("failover:(tcp://a,tcp://b").contains("unclosed `(`"));
        assert!(url_error("failover:(tcp://a,,tcp://b)").contains("empty broker URI"));
        assert!(url_error("failover:()").contains("empty broker URI"));
        assert!(url_error("failover:(tcp://a)x").contains("unexpected `x`"));
        assert!(url_error("failover:(failover:(tcp://a))").contains("nest"));
        assert!(url_error("failover:(tcp://a,ws://b)").contains("WebSockets"));
        assert!(url_error("failover:(tcp://a)?timeout=soon").contains("timeout"));
    }

    #[test]
    fn other_composites_and_protocols_are_refused() {
        let error = url_error("discovery:(multicast://default)");
        assert!(error.contains("discovery: URLs are not implemented"), "{error}");
        let amqp = url("amqp://127.0.0.1");
        assert_eq!((amqp.protocol(), amqp.port()), (WireProtocol::Amqp, DEFAULT_AMQP_PORT));
        assert_eq!(url("AMQP+NIO://h:1").protocol(), WireProtocol::Amqp);
        let mqtt = url("mqtt://h");
        assert_eq!((mqtt.protocol(), mqtt.port()), (WireProtocol::Mqtt, DEFAULT_MQTT_PORT));
        assert_eq!(url("mqtt+ssl://h").port(), DEFAULT_MQTT_TLS_PORT);
        let topic: DestinationName = "topic://a.b.>".parse().expect("a topic");
        assert_eq!(topic.mqtt_topic().as_deref(), Some("a/b/#"));
        let queue: DestinationName = "queue://a.b".parse().expect("a queue");
        assert_eq!(queue.mqtt_topic(), None);
        assert!(url_error("vm://localhost").contains("same process"));
        assert!(url_error("http://h:80").contains("unknown scheme `http`"));
    }

    #[test]
    fn malformed_urls_are_refused() {
        assert!(url_error("").contains("empty"));
        assert!(url_error("localhost:61613").contains("SCHEME://HOST:PORT"));
        assert!(url_error("stomp://:61613").contains("host is missing"));
        assert!(url_error("stomp://h:0").contains("invalid port `0`"));
        assert!(url_error("stomp://h:99999").contains("invalid port"));
        assert!(url_error("stomp://h:x").contains("invalid port `x`"));
        assert!(url_error("tcp://::1:61616").contains("brackets"));
        assert!(url_error("stomp://[::1").contains("unclosed"));
        assert!(url_error("stomp://h:1/path").contains("no path"));
        assert!(url_error("stomp://u:p@h:1").contains("--user"));
        assert!(url_error("stomp://h:1?trace=true").contains("`?trace=true`"));
    }

    fn destination(text: &str) -> DestinationName {
        text.parse().unwrap_or_else(|e| panic!("{text}: {e}"))
    }

    #[test]
    fn destinations_follow_activemq_tool_syntax() {
        let queue = destination("queue://load.test");
        assert_eq!(queue, DestinationName::queue("load.test"));
        assert_eq!(queue.stomp_destination(), "/queue/load.test");
        assert_eq!(queue.to_string(), "queue://load.test");
        let topic = destination("topic://prices.>");
        assert_eq!(topic, DestinationName::topic("prices.>"));
        assert_eq!(topic.stomp_destination(), "/topic/prices.>");
        assert!(topic.is_topic());
        // A bare name is a queue, as in ActiveMQ's tools.
        assert_eq!(destination("TEST"), DestinationName::queue("TEST"));
        assert_eq!(destination("QUEUE://A"), DestinationName::queue("A"));
        // The STOMP spelling is understood too.
        assert_eq!(destination("/topic/t"), DestinationName::topic("t"));
        assert_eq!(destination("/queue/q"), DestinationName::queue("q"));
    }

    #[test]
    fn bad_destinations_are_refused() {
        for text in ["queue://", "topic://", "", "temp-queue://x", "/temp-topic/y", "/other/z"] {
            let error = text.parse::<DestinationName>().expect_err(text).to_string();
            assert!(error.starts_with("invalid destination"), "{text}: {error}");
        }
        let error = "a b".parse::<DestinationName>().expect_err("space").to_string();
        assert!(error.contains("white space"), "{error}");
    }
}
