//! Connector URIs: what parses, what it parses to, and why the rest is refused.

use conf::{ConnectorOptions, ConnectorUri, Scheme, TlsVersion, UriError, WireProtocol};

fn parse(text: &str) -> ConnectorUri {
    text.parse().unwrap_or_else(|error| panic!("{text} should parse: {error}"))
}

fn refusal(text: &str) -> String {
    match text.parse::<ConnectorUri>() {
        Ok(uri) => panic!("{text} should be refused, parsed {uri:?}"),
        Err(error) => error.to_string(),
    }
}

#[test]
fn valid_uris_parse_to_scheme_host_and_port() {
    for (text, scheme, host, port) in [
        ("stomp://127.0.0.1:61613", Scheme::Stomp, "127.0.0.1", 61613),
        ("stomp+nio://0.0.0.0:61613", Scheme::StompNio, "0.0.0.0", 61613),
        ("tcp://127.0.0.1:61616", Scheme::OpenWire, "127.0.0.1", 61616),
        ("nio://0.0.0.0:61616", Scheme::OpenWireNio, "0.0.0.0", 61616),
        ("stomp://localhost:0", Scheme::Stomp, "localhost", 0),
        ("stomp://broker-1.example.com:65535", Scheme::Stomp, "broker-1.example.com", 65535),
        ("stomp://[::1]:61613", Scheme::Stomp, "::1", 61613),
        ("stomp://[::]:1", Scheme::Stomp, "::", 1),
        ("STOMP://localhost:1", Scheme::Stomp, "localhost", 1),
        ("stomp://localhost:61613/", Scheme::Stomp, "localhost", 61613),
    ] {
        let uri = parse(text);
        assert_eq!((uri.scheme, uri.host.as_str(), uri.port), (scheme, host, port), "{text}");
        assert_eq!(uri.options, ConnectorOptions::default(), "{text}");
        assert!(uri.warnings.is_empty(), "{text}");
    }
}

#[test]
fn display_gives_the_canonical_text_back() {
    for (text, canonical) in [
        ("stomp://127.0.0.1:61613", "stomp://127.0.0.1:61613"),
        ("stomp+nio://[::1]:0", "stomp+nio://[::1]:0"),
        ("Stomp://localhost:61613/", "stomp://localhost:61613"),
        ("stomp://h:1?", "stomp://h:1"),
        (
            "stomp://h:1?transport.trace=true&wireFormat.maxFrameSize=64&maximumConnections=2",
            "stomp://h:1?maximumConnections=2&wireFormat.maxFrameSize=64&transport.trace=true",
        ),
    ] {
        let uri = parse(text);
        assert_eq!(uri.to_string(), canonical);
        assert_eq!(parse(canonical), uri, "{canonical} reads back equal");
    }
    assert_eq!(parse("stomp://[::1]:5").address(), "[::1]:5");
    assert_eq!(parse("stomp://localhost:5").address(), "localhost:5");
}

#[test]
fn implemented_options_are_parsed() {
    let uri =
        parse("stomp://0.0.0.0:61613?maximumConnections=1000&wireFormat.maxFrameSize=104857600");
    assert_eq!(uri.options.maximum_connections, Some(1000));
    assert_eq!(uri.options.max_frame_size, Some(104_857_600));
    assert!(uri.warnings.is_empty());
}

#[test]
fn activemq_only_options_are_accepted_with_a_warning() {
    let uri = parse(
        "stomp://0.0.0.0:61613?useQueueForAccept=false&transport.useKeepAlive=true&transport.soTimeout=0\
         &transport.tcpNoDelay=true&transport.trace=false&transport.closeAsync=false\
         &transport.threadName=x&transport.transportListener=x",
    );
    assert_eq!(uri.options.maximum_connections, None);
    assert_eq!(uri.options.ignored.len(), 8);
    assert_eq!(
        uri.warnings,
        [
            "option useQueueForAccept has no effect in ferromq: connections are accepted asynchronously, \
             without a hand-off queue",
            "option transport.useKeepAlive has no effect in ferromq: dead peers are detected with STOMP \
             heart-beats",
            "option transport.soTimeout has no effect in ferromq: sockets never block a thread; idle peers \
             are detected with heart-beats",
            "option transport.tcpNoDelay has no effect in ferromq: socket options are chosen by ferromq",
            "option transport.trace has no effect in ferromq: frame tracing is set with the log filter, not \
             per connector",
            "option transport.closeAsync has no effect in ferromq: connections are always closed \
             asynchronously",
            "option transport.threadName has no effect in ferromq: connections run as async tasks, not \
             named threads",
            "option transport.transportListener has no effect in ferromq: transport listeners are a Java \
             extension point",
        ]
    );
}

#[test]
fn schemes_of_future_protocols_are_refused_as_not_implemented() {
    assert_eq!(
        refusal("vm://0.0.0.0:1"),
        "`vm://` (in-process) connectors are not implemented yet; available: stomp://, stomp+nio://, tcp://, nio://, amqp://, amqp+nio://, ssl://, nio+ssl://, stomp+ssl://, stomp+nio+ssl://, amqp+ssl://, mqtt://, mqtt+nio://, mqtt+ssl://, mqtt+nio+ssl://, ws://, wss://"
    );
    let error = "vm://0.0.0.0:61614".parse::<ConnectorUri>().err();
    assert_eq!(
        error,
        Some(UriError::SchemeNotImplemented { scheme: "vm".into(), protocol: "in-process" })
    );
}

#[test]
fn websocket_schemes_parse_with_their_protocol_and_default_port() {
    for (text, scheme, tls) in [
        ("ws://0.0.0.0:61614", Scheme::Ws, false),
        ("WS://127.0.0.1:0?maximumConnections=10", Scheme::Ws, false),
        ("wss://[::1]:61614?needClientAuth=true", Scheme::Wss, true),
        ("wss://h:61614?transport.enabledProtocols=TLSv1.3", Scheme::Wss, true),
    ] {
        let uri: ConnectorUri = text.parse().unwrap_or_else(|e| panic!("{text}: {e}"));
        assert_eq!(uri.scheme, scheme, "{text}");
        assert_eq!(scheme.protocol(), WireProtocol::WebSocket, "{text}");
        assert_eq!(scheme.uses_tls(), tls, "{text}");
        assert_eq!(scheme.default_port(), 61614, "{text}");
        let written = uri.to_string();
        assert_eq!(written.parse::<ConnectorUri>().as_ref(), Ok(&uri), "{text}");
    }
    assert_eq!(
        refusal("ws://h:61614?wantClientAuth=true"),
        "option wantClientAuth is for TLS connectors; `ws://` is plaintext (use ssl://, stomp+ssl://, amqp+ssl://, mqtt+ssl:// or wss://)"
    );
}

#[test]
fn allowed_origins_is_a_list_for_websocket_connectors_only() {
    let text = "ws://0.0.0.0:61614?allowedOrigins=https://a.example,https://b.example:8443";
    let uri: ConnectorUri = text.parse().unwrap_or_else(|e| panic!("{e}"));
    assert_eq!(
        uri.options.allowed_origins,
        Some(vec!["https://a.example".to_owned(), "https://b.example:8443".to_owned()])
    );
    assert_eq!(uri.to_string(), text);
    let any: ConnectorUri = "wss://h:1?allowedOrigins=*".parse().unwrap_or_else(|e| panic!("{e}"));
    assert_eq!(any.options.allowed_origins, Some(vec!["*".to_owned()]));
    assert_eq!(
        refusal("stomp://h:1?allowedOrigins=https://a.example"),
        "option allowedOrigins is for WebSocket connectors; `stomp://` is not one (use ws:// or wss://)"
    );
    assert_eq!(
        refusal("ws://h:1?allowedOrigins=https://a.example,"),
        "invalid value `https://a.example,` for option allowedOrigins: expected a comma-separated list without empty items"
    );
    assert_eq!(
        refusal("ws://h:1?allowedorigins=*"),
        "unknown option allowedorigins (did you mean allowedOrigins?); available: maximumConnections, wireFormat.maxFrameSize, on WebSocket connectors allowedOrigins, and on TLS connectors needClientAuth, wantClientAuth, transport.enabledProtocols, transport.enabledCipherSuites"
    );
}

#[test]
fn mqtt_schemes_parse_with_their_protocol_and_default_ports() {
    for (text, scheme, tls, default_port) in [
        ("mqtt://0.0.0.0:1883", Scheme::Mqtt, false, 1883),
        ("MQTT+NIO://127.0.0.1:0", Scheme::MqttNio, false, 1883),
        ("mqtt+ssl://[::1]:8883", Scheme::MqttSsl, true, 8883),
        ("mqtt+nio+ssl://h:8883?needClientAuth=true", Scheme::MqttNioSsl, true, 8883),
    ] {
        let uri: ConnectorUri = text.parse().unwrap_or_else(|e| panic!("{text}: {e}"));
        assert_eq!(uri.scheme, scheme, "{text}");
        assert_eq!(scheme.protocol(), WireProtocol::Mqtt, "{text}");
        assert_eq!(scheme.uses_tls(), tls, "{text}");
        assert_eq!(scheme.default_port(), default_port, "{text}");
        let written = uri.to_string();
        assert_eq!(written.parse::<ConnectorUri>().as_ref(), Ok(&uri), "{text}");
    }
    assert_eq!(
        refusal("mqtt://h:1883?needClientAuth=true"),
        "option needClientAuth is for TLS connectors; `mqtt://` is plaintext (use ssl://, stomp+ssl://, amqp+ssl://, mqtt+ssl:// or wss://)"
    );
}

#[test]
fn tls_schemes_parse_with_their_protocol_and_default_ports() {
    for (text, scheme, protocol, default_port) in [
        ("ssl://0.0.0.0:61617", Scheme::OpenWireSsl, WireProtocol::OpenWire, 61617),
        ("nio+ssl://0.0.0.0:61617", Scheme::OpenWireNioSsl, WireProtocol::OpenWire, 61617),
        ("stomp+ssl://[::1]:61612", Scheme::StompSsl, WireProtocol::Stomp, 61612),
        ("stomp+nio+ssl://h:61612", Scheme::StompNioSsl, WireProtocol::Stomp, 61612),
        ("AMQP+SSL://h:5671", Scheme::AmqpSsl, WireProtocol::Amqp, 5671),
    ] {
        let uri: ConnectorUri = text.parse().unwrap_or_else(|e| panic!("{text}: {e}"));
        assert_eq!(uri.scheme, scheme, "{text}");
        assert_eq!(scheme.protocol(), protocol, "{text}");
        assert!(scheme.uses_tls(), "{text}");
        assert_eq!(scheme.default_port(), default_port, "{text}");
    }
    for plain in [Scheme::Stomp, Scheme::OpenWire, Scheme::Amqp, Scheme::AmqpNio] {
        assert!(!plain.uses_tls(), "{plain}");
    }
}

#[test]
fn tls_options_parse_and_write_back() {
    let text = "ssl://0.0.0.0:61617?needClientAuth=true&transport.enabledProtocols=TLSv1.3&\
                transport.enabledCipherSuites=TLS_AES_256_GCM_SHA384,TLS_AES_128_GCM_SHA256";
    let uri: ConnectorUri = text.parse().unwrap_or_else(|e| panic!("{e}"));
    assert_eq!(uri.options.need_client_auth, Some(true));
    assert_eq!(uri.options.want_client_auth, None);
    assert_eq!(uri.options.enabled_protocols, Some(vec![TlsVersion::Tls13]));
    assert_eq!(
        uri.options.enabled_cipher_suites,
        Some(vec!["TLS_AES_256_GCM_SHA384".to_owned(), "TLS_AES_128_GCM_SHA256".to_owned()])
    );
    assert!(uri.warnings.is_empty());
    let again: ConnectorUri = uri.to_string().parse().unwrap_or_else(|e| panic!("{e}"));
    assert_eq!(again, uri);
}

#[test]
fn tls_options_are_refused_on_plaintext_connectors_and_with_bad_values() {
    for (text, reason) in [
        (
            "tcp://h:1?needClientAuth=true",
            "option needClientAuth is for TLS connectors; `tcp://` is plaintext (use ssl://, stomp+ssl://, amqp+ssl://, mqtt+ssl:// or wss://)",
        ),
        (
            "ssl://h:1?wantClientAuth=yes",
            "invalid value `yes` for option wantClientAuth: expected true or false",
        ),
        (
            "ssl://h:1?transport.enabledProtocols=TLSv1.1",
            "invalid value `TLSv1.1` for option transport.enabledProtocols: `TLSv1.1` is not offered: it is broken or deprecated (RFC 8996); use TLSv1.2 or TLSv1.3",
        ),
        (
            "ssl://h:1?transport.enabledCipherSuites=A,,B",
            "invalid value `A,,B` for option transport.enabledCipherSuites: expected a comma-separated list without empty items",
        ),
    ] {
        assert_eq!(refusal(text), reason, "{text}");
    }
}

#[test]
fn unknown_schemes_and_malformed_uris_are_refused() {
    for (text, reason) in [
        (
            "gopher://h:1",
            "unknown scheme `gopher://`; available: stomp://, stomp+nio://, tcp://, nio://, amqp://, amqp+nio://, ssl://, nio+ssl://, stomp+ssl://, stomp+nio+ssl://, amqp+ssl://, mqtt://, mqtt+nio://, mqtt+ssl://, mqtt+nio+ssl://, ws://, wss://",
        ),
        ("127.0.0.1:61613", "expected scheme://host:port, e.g. stomp://127.0.0.1:61613"),
        ("://h:1", "expected scheme://host:port, e.g. stomp://127.0.0.1:61613"),
        ("stomp:// h:1", "connector URIs cannot contain whitespace"),
        ("stomp://user@h:1", "user information (`...@`) is not supported in connector URIs"),
        ("stomp://h:1/queue", "unexpected `/queue` after host:port (connector URIs have no path)"),
        ("stomp://[::1]x", "unexpected `x` after host:port (connector URIs have no path)"),
    ] {
        assert_eq!(refusal(text), reason, "{text}");
    }
}

#[test]
fn hosts_must_be_present_and_well_formed() {
    let empty =
        "the host is empty; use 127.0.0.1 for this machine only or 0.0.0.0 for every interface";
    for (text, reason) in [
        ("stomp://:61613", empty),
        ("stomp://", empty),
        ("stomp://::1:61613", "invalid host `::1:61613`: IPv6 addresses must be in brackets, e.g. [::1]:61613"),
        ("stomp://[::g]:1", "invalid host `::g`: not an IPv6 address"),
        ("stomp://[::1:1", "invalid host `[::1:1`: missing `]` after an IPv6 address"),
        ("stomp://999.0.0.1:1", "invalid host `999.0.0.1`: not an IPv4 address"),
        ("stomp://bad_host!:1", "invalid host `bad_host!`: only letters, digits, `-`, `_` and `.` may appear in a host name"),
    ] {
        assert_eq!(refusal(text), reason, "{text}");
    }
}

#[test]
fn ports_must_be_present_numeric_and_in_range() {
    let missing = "the port is missing (write host:port, or port 0 for any free port)";
    for (text, reason) in [
        ("stomp://localhost", missing),
        ("stomp://localhost:", missing),
        ("stomp://[::1]", missing),
        ("stomp://[::1]:", missing),
        ("stomp://localhost:http", "invalid port `http`: not a number"),
        ("stomp://localhost:-1", "invalid port `-1`: not a number"),
        ("stomp://localhost:65536", "port 65536 is out of range (0-65535)"),
        (
            "stomp://localhost:99999999999999999999999",
            "port 99999999999999999999999 is out of range (0-65535)",
        ),
    ] {
        assert_eq!(refusal(text), reason, "{text}");
    }
}

#[test]
fn options_must_be_known_single_and_valid() {
    for (text, reason) in [
        (
            "stomp://h:1?maximumconnections=5",
            "unknown option maximumconnections (did you mean maximumConnections?); available: \
             maximumConnections, wireFormat.maxFrameSize, on WebSocket connectors allowedOrigins, \
             and on TLS connectors needClientAuth, wantClientAuth, transport.enabledProtocols, \
             transport.enabledCipherSuites",
        ),
        (
            "stomp://h:1?wireFormat.maxInactivityDuration=0",
            "unknown option wireFormat.maxInactivityDuration; available: maximumConnections, \
             wireFormat.maxFrameSize, on WebSocket connectors allowedOrigins, and on TLS connectors \
             needClientAuth, wantClientAuth, transport.enabledProtocols, \
             transport.enabledCipherSuites",
        ),
        ("stomp://h:1?maximumConnections=1&maximumConnections=2", "option maximumConnections is given more than once"),
        ("stomp://h:1?useQueueForAccept=a&useQueueForAccept=b", "option useQueueForAccept is given more than once"),
        (
            "stomp://h:1?maximumConnections=0",
            "invalid value `0` for option maximumConnections: expected a whole number greater than zero",
        ),
        (
            "stomp://h:1?wireFormat.maxFrameSize=10MB",
            "invalid value `10MB` for option wireFormat.maxFrameSize: expected a whole number greater than zero",
        ),
        (
            "stomp://h:1?maximumConnections=+5",
            "invalid value `+5` for option maximumConnections: expected a whole number greater than zero",
        ),
        ("stomp://h:1?maximumConnections=5&", "empty option name in ``"),
        ("stomp://h:1?=5", "empty option name in `=5`"),
        ("stomp://h:1?maximumConnections", "option maximumConnections has no value (write maximumConnections=value)"),
    ] {
        assert_eq!(refusal(text), reason, "{text}");
    }
}
