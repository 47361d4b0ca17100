//! TLS connectors (`stomp+ssl://`, `ssl://`, `amqp+ssl://`) with real clients: stomp.py, the
//! ActiveMQ JMS client and Qpid Proton verify the broker's certificate (made by
//! `scripts/test-pki`, see [`tests::TestPki`]) and exchange messages; client certificates are
//! required or optional per connector; plaintext clients on TLS ports and TLS clients on
//! plaintext ports fail cleanly without disturbing other connections; a broker whose TLS
//! setup is wrong refuses to start with a message that names the problem.

use std::net::SocketAddr;
use std::time::Duration;

use anyhow::{bail, ensure, Context};
use broker::BrokerHandle;
use client::{AckMode, ConnectOptions, StompClient};
use conf::WireProtocol;
use tests::{TestPki, ARRIVES};
use tokio::io::{AsyncReadExt, AsyncWriteExt};
use tokio::net::TcpStream;
use tokio_rustls::rustls::version::{TLS12, TLS13};

use crate::stomp_py::{python, repository_root, run_with_timeout};

const CHECK_TIMEOUT: Duration = Duration::from_secs(120);

/// Starts a broker with `connectors` and the test PKI in `[tls]`.
async fn start(
    connectors: &[&str],
    configure: impl FnOnce(&mut conf::Config),
) -> anyhow::Result<BrokerHandle> {
    let pki = TestPki::get()?;
    tests::start_broker(|config| {
        config.transport.connectors =
            connectors.iter().map(|uri| uri.parse().expect("a valid connector URI")).collect();
        pki.configure(config);
        configure(config);
    })
    .await
}

fn tls_addr(broker: &BrokerHandle, protocol: WireProtocol) -> anyhow::Result<SocketAddr> {
    broker
        .tls_addr(protocol)
        .with_context(|| format!("the broker has no {protocol:?} TLS connector"))
}

/// How a `security_checks.py` client connects.
#[derive(Debug, Clone, Copy)]
pub(crate) struct PyClient<'a> {
    /// Over TLS, trusting the test CA; else plaintext.
    pub tls: bool,
    /// The client certificate to present (`"client"`, `"rogue"`).
    pub identity: Option<&'a str>,
    /// A user name and password to log in with; else anonymous.
    pub login: Option<(&'a str, &'a str)>,
    /// The queue of the single-operation checks (`stomp_send`, `amqp_receive`, ...).
    pub queue: Option<&'a str>,
}

/// A TLS client presenting `identity`, without a login.
fn tls(identity: Option<&str>) -> PyClient<'_> {
    PyClient { tls: true, identity, login: None, queue: None }
}

/// Runs `security_checks.py --check check` against `port` as `client`; `refused` says
/// whether the broker must refuse the client.
pub(crate) async fn python_check(
    check: &str,
    port: u16,
    client: PyClient<'_>,
    refused: bool,
) -> anyhow::Result<()> {
    let python = python()?;
    let script = repository_root().join("tests/python/security_checks.py");
    let mut args = vec![
        script.display().to_string(),
        "--check".to_owned(),
        check.to_owned(),
        "--port".to_owned(),
        port.to_string(),
    ];
    if client.tls {
        args.extend(["--ca".to_owned(), TestPki::get()?.path("ca.pem").display().to_string()]);
    } else {
        args.push("--plain".to_owned());
    }
    if let Some((user, password)) = client.login {
        args.extend([
            "--user".to_owned(),
            user.to_owned(),
            "--password".to_owned(),
            password.to_owned(),
        ]);
    }
    if let Some(queue) = client.queue {
        args.extend(["--queue".to_owned(), queue.to_owned()]);
    }
    let pki = TestPki::get()?;
    if let Some(name) = client.identity {
        args.extend([
            "--cert".to_owned(),
            pki.path(&format!("{name}.pem")).display().to_string(),
            "--key".to_owned(),
            pki.path(&format!("{name}-key.pem")).display().to_string(),
        ]);
    }
    if refused {
        args.push("--expect-refused".to_owned());
    }
    let output =
        tokio::task::spawn_blocking(move || run_with_timeout(&python, &args, CHECK_TIMEOUT))
            .await
            .context("the check's runner panicked")??;
    let expected = if refused { format!("refused {check}") } else { format!("ok {check}") };
    if !output.status.success() || !output.stdout.contains(&expected) {
        bail!(
            "security_checks.py {check} ({client:?}, refusal expected: {refused}) \
             failed ({})\n--- stdout\n{}\n--- stderr\n{}",
            output.status,
            output.stdout,
            output.stderr
        );
    }
    Ok(())
}

/// A STOMP session over TLS with ferromq's own client, as the rustls client `identity`.
async fn stomp_over_tls(addr: SocketAddr, identity: Option<&str>) -> anyhow::Result<StompClient> {
    let stream = TestPki::get()?
        .connect_with(addr, tokio_rustls::rustls::DEFAULT_VERSIONS, identity)
        .await?;
    Ok(StompClient::connect_stream(stream, ConnectOptions::default()).await?)
}

/// Sends one message through `client` to a queue and receives it back.
async fn round_trip(client: &StompClient, queue: &str) -> anyhow::Result<()> {
    let mut subscription = client.subscribe(queue, AckMode::Auto, &[]).await?;
    client.send_with_receipt(queue, "over TLS", &[]).await?;
    let message = tests::recv(&mut subscription).await?;
    ensure!(&message.body()[..] == b"over TLS", "got {:?}", message.body());
    Ok(())
}

/// Reads what `socket` gets until the peer closes it; fails if it stays open past [`ARRIVES`].
async fn read_until_closed(mut socket: TcpStream) -> anyhow::Result<Vec<u8>> {
    let mut received = Vec::new();
    let mut buffer = [0u8; 4096];
    let deadline = tokio::time::Instant::now() + ARRIVES;
    loop {
        match tokio::time::timeout_at(deadline, socket.read(&mut buffer)).await {
            Err(_) => bail!(
                "the connection is still open after {ARRIVES:?} ({} bytes came)",
                received.len()
            ),
            Ok(Ok(0)) | Ok(Err(_)) => return Ok(received),
            Ok(Ok(read)) => received.extend_from_slice(&buffer[..read]),
        }
    }
}

/// The user the real clients log in as over TLS.
const TLS_USER: (&str, &str) = ("tls-user", "tls-secret");

/// Turns authentication on, with [`TLS_USER`].
fn with_tls_user(config: &mut conf::Config) {
    let hash = broker::security::hash_password(TLS_USER.1).expect("hashing a password");
    config.authentication.enabled = true;
    config.users =
        vec![conf::UserEntry { name: TLS_USER.0.to_owned(), password: hash, groups: Vec::new() }];
}

/// A TLS client logging in as [`TLS_USER`].
fn tls_login() -> PyClient<'static> {
    PyClient { tls: true, identity: None, login: Some(TLS_USER), queue: None }
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn stomp_py_over_stomp_ssl_verifies_the_broker_and_exchanges_messages() -> anyhow::Result<()>
{
    let broker = start(&["stomp+ssl://127.0.0.1:0"], with_tls_user).await?;
    let addr = tls_addr(&broker, WireProtocol::Stomp)?;
    python_check("stomp", addr.port(), tls_login(), false).await?;
    python_check("stomp", addr.port(), tls(None), true).await?;
    broker.shutdown().await;
    Ok(())
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn qpid_proton_over_amqps_exchanges_messages() -> anyhow::Result<()> {
    let broker = start(&["amqp+ssl://127.0.0.1:0"], with_tls_user).await?;
    let addr = tls_addr(&broker, WireProtocol::Amqp)?;
    python_check("amqp", addr.port(), tls_login(), false).await?;
    python_check("amqp", addr.port(), tls(None), true).await?;
    broker.shutdown().await;
    Ok(())
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn activemq_jms_client_over_ssl_exchanges_messages() -> anyhow::Result<()> {
    let classpath = crate::jms::classpath()?;
    let broker = start(&["ssl://127.0.0.1:0"], with_tls_user).await?;
    let addr = tls_addr(&broker, WireProtocol::OpenWire)?;
    // 127.0.0.1, where the broker listens (`localhost` may resolve to ::1 first, where another
    // program may listen); the certificate carries that address too (scripts/test-pki), so the
    // client's host name check still passes only for the broker's certificate.
    let (user, password) = TLS_USER;
    let url =
        format!("ssl://127.0.0.1:{}?jms.userName={user}&jms.password={password}", addr.port());
    let jvm_options = TestPki::get()?.jvm_options(false);
    tokio::task::block_in_place(|| {
        crate::jms::run_java_check_with(
            &classpath,
            &jvm_options,
            &url,
            "queue_send_receive",
            &mut || bail!("this check never restarts the broker"),
        )
    })?;
    broker.shutdown().await;
    Ok(())
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn need_client_auth_admits_only_clients_with_a_trusted_certificate() -> anyhow::Result<()> {
    let broker = start(
        &[
            "stomp+ssl://127.0.0.1:0?needClientAuth=true",
            "amqp+ssl://127.0.0.1:0?needClientAuth=true",
        ],
        |_| {},
    )
    .await?;
    let stomp = tls_addr(&broker, WireProtocol::Stomp)?;
    let amqp = tls_addr(&broker, WireProtocol::Amqp)?;
    python_check("stomp", stomp.port(), tls(None), true).await?;
    python_check("stomp", stomp.port(), tls(Some("rogue")), true).await?;
    python_check("stomp", stomp.port(), tls(Some("client")), false).await?;
    python_check("amqp", amqp.port(), tls(None), true).await?;
    python_check("amqp", amqp.port(), tls(Some("client")), false).await?;
    // ferromq's own client, through rustls.
    ensure!(stomp_over_tls(stomp, None).await.is_err(), "a client without a certificate got in");
    let client = stomp_over_tls(stomp, Some("client")).await?;
    round_trip(&client, "/queue/need-client-auth").await?;
    broker.shutdown().await;
    Ok(())
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn want_client_auth_admits_clients_without_a_certificate_but_not_with_an_untrusted_one(
) -> anyhow::Result<()> {
    let broker = start(&["stomp+ssl://127.0.0.1:0?wantClientAuth=true"], |_| {}).await?;
    let stomp = tls_addr(&broker, WireProtocol::Stomp)?;
    python_check("stomp", stomp.port(), tls(None), false).await?;
    python_check("stomp", stomp.port(), tls(Some("client")), false).await?;
    python_check("stomp", stomp.port(), tls(Some("rogue")), true).await?;
    broker.shutdown().await;
    Ok(())
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn plaintext_clients_on_tls_ports_are_closed_and_other_connections_carry_on(
) -> anyhow::Result<()> {
    let broker =
        start(&["stomp+ssl://127.0.0.1:0", "ssl://127.0.0.1:0", "amqp+ssl://127.0.0.1:0"], |_| {})
            .await?;
    let stomp = tls_addr(&broker, WireProtocol::Stomp)?;
    let established = stomp_over_tls(stomp, None).await?;
    let mut subscription = established.subscribe("/queue/carry-on", AckMode::Auto, &[]).await?;
    let openwire_header = b"\x00\x00\x00\x10\x01ActiveMQ\x00\x00\x00\x0c".to_vec();
    for (protocol, hello) in [
        (WireProtocol::Stomp, b"CONNECT\naccept-version:1.2\n\n\x00".to_vec()),
        (WireProtocol::OpenWire, openwire_header),
        (WireProtocol::Amqp, b"AMQP\x00\x01\x00\x00".to_vec()),
    ] {
        let mut socket = TcpStream::connect(tls_addr(&broker, protocol)?).await?;
        socket.write_all(&hello).await?;
        let received = read_until_closed(socket).await.with_context(|| format!("{protocol:?}"))?;
        // At most a TLS alert record (content type 21), never a protocol answer.
        ensure!(
            received.is_empty() || received[0] == 21,
            "{protocol:?}: a plaintext client got {received:?}"
        );
    }
    established.send_with_receipt("/queue/carry-on", "still here", &[]).await?;
    let message = tests::recv(&mut subscription).await?;
    ensure!(&message.body()[..] == b"still here");
    broker.shutdown().await;
    Ok(())
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn tls_clients_on_plaintext_ports_fail_cleanly_and_plaintext_clients_carry_on(
) -> anyhow::Result<()> {
    let broker =
        start(&["stomp://127.0.0.1:0", "tcp://127.0.0.1:0", "amqp://127.0.0.1:0"], |_| {}).await?;
    let plain = tests::connect(&broker).await?;
    let mut subscription = plain.subscribe("/queue/plain", AckMode::Auto, &[]).await?;
    let pki = TestPki::get()?;
    let addresses = [
        broker.stomp_addr().context("STOMP")?,
        broker.openwire_addr().context("OpenWire")?,
        broker.amqp_addr().context("AMQP")?,
    ];
    for addr in addresses {
        let attempt = tokio::time::timeout(ARRIVES * 2, pki.connect(addr)).await;
        match attempt {
            Err(_) => bail!("a TLS handshake with plaintext port {addr} hung"),
            Ok(Ok(_)) => bail!("a TLS handshake with plaintext port {addr} succeeded"),
            Ok(Err(_)) => {}
        }
    }
    plain.send_with_receipt("/queue/plain", "unaffected", &[]).await?;
    ensure!(&tests::recv(&mut subscription).await?.body()[..] == b"unaffected");
    broker.shutdown().await;
    Ok(())
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn a_client_that_never_completes_the_handshake_is_closed_after_the_connect_timeout(
) -> anyhow::Result<()> {
    let broker = start(&["stomp+ssl://127.0.0.1:0"], |config| {
        config.transport.connect_timeout = Duration::from_millis(300);
    })
    .await?;
    let socket = TcpStream::connect(tls_addr(&broker, WireProtocol::Stomp)?).await?;
    read_until_closed(socket).await?;
    broker.shutdown().await;
    Ok(())
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn a_connector_offers_only_its_enabled_protocols_and_cipher_suites() -> anyhow::Result<()> {
    let broker = start(
        &["stomp+ssl://127.0.0.1:0?transport.enabledProtocols=TLSv1.3&transport.enabledCipherSuites=TLS_CHACHA20_POLY1305_SHA256"],
        |_| {},
    )
    .await?;
    let addr = tls_addr(&broker, WireProtocol::Stomp)?;
    let pki = TestPki::get()?;
    ensure!(pki.connect_with(addr, &[&TLS12], None).await.is_err(), "a TLS 1.2 client got in");
    let stream = pki.connect_with(addr, &[&TLS13, &TLS12], None).await?;
    let session = stream.get_ref().1;
    ensure!(session.protocol_version() == Some(tokio_rustls::rustls::ProtocolVersion::TLSv1_3));
    let suite = session.negotiated_cipher_suite().context("no cipher suite")?;
    ensure!(
        suite.suite() == tokio_rustls::rustls::CipherSuite::TLS13_CHACHA20_POLY1305_SHA256,
        "negotiated {suite:?}"
    );
    let client = StompClient::connect_stream(stream, ConnectOptions::default()).await?;
    round_trip(&client, "/queue/tls13").await?;
    broker.shutdown().await;
    Ok(())
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn a_broker_with_a_broken_tls_setup_refuses_to_start_and_says_why() -> anyhow::Result<()> {
    let pki = TestPki::get()?;
    let missing = pki.path("no-such-file.pem");
    /// A connector, a change to the configuration, and what the error must say.
    type Case<'a> = (&'a str, Box<dyn Fn(&mut conf::Config) + 'a>, String);
    let cases: Vec<Case> = vec![
        (
            "stomp+ssl://127.0.0.1:0",
            Box::new(|config: &mut conf::Config| config.tls.certificate = missing.clone()),
            format!("cannot read the certificate chain from {} ([tls] certificate)", missing.display()),
        ),
        (
            "stomp+ssl://127.0.0.1:0",
            Box::new(|config: &mut conf::Config| config.tls.private_key = pki.path("client-key.pem")),
            "do not go together".to_owned(),
        ),
        (
            "stomp+ssl://127.0.0.1:0",
            Box::new(|config: &mut conf::Config| config.tls.private_key = pki.path("server.pem")),
            "holds no private key".to_owned(),
        ),
        (
            "ssl://127.0.0.1:0?transport.enabledCipherSuites=TLS_RSA_WITH_RC4_128_MD5",
            Box::new(|_: &mut conf::Config| {}),
            "unknown cipher suite `TLS_RSA_WITH_RC4_128_MD5`".to_owned(),
        ),
        (
            "amqp+ssl://127.0.0.1:0?transport.enabledProtocols=TLSv1.2&transport.enabledCipherSuites=TLS_AES_128_GCM_SHA256",
            Box::new(|_: &mut conf::Config| {}),
            "nothing in common".to_owned(),
        ),
    ];
    for (connector, configure, expected) in cases {
        let mut config = tests::test_config();
        config.transport.connectors = vec![connector.parse()?];
        pki.configure(&mut config);
        configure(&mut config);
        match broker::Broker::start(config).await {
            Ok(broker) => {
                broker.shutdown().await;
                bail!("{connector}: the broker started");
            }
            Err(error) => {
                let message = format!("{error:#}");
                ensure!(
                    message.contains(&expected),
                    "{connector}: expected `{expected}` in `{message}`"
                );
                ensure!(message.contains("cannot set up TLS for"), "{message}");
            }
        }
    }
    Ok(())
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn load_tools_run_over_tls_with_credentials_on_every_protocol() -> anyhow::Result<()> {
    use client::load::{run_consumer, run_producer, ConsumerOptions, ProducerOptions};
    let pki = TestPki::get()?;
    let hash = broker::security::hash_password("tools-secret").map_err(anyhow::Error::msg)?;
    let broker = start(
        &["ssl://127.0.0.1:0", "stomp+ssl://127.0.0.1:0", "amqp+ssl://127.0.0.1:0"],
        |config| {
            config.authentication.enabled = true;
            config.users = vec![conf::UserEntry {
                name: "tools".to_owned(),
                password: hash,
                groups: Vec::new(),
            }];
        },
    )
    .await?;
    for (scheme, protocol) in [
        ("ssl", WireProtocol::OpenWire),
        ("stomp+ssl", WireProtocol::Stomp),
        ("amqps", WireProtocol::Amqp),
    ] {
        // 127.0.0.1, not `localhost` (which may resolve to ::1 first, where another program
        // may listen): the broker's certificate carries that address too, and the tools check
        // the name they connect to.
        let port = tls_addr(&broker, protocol)?.port();
        let url: client::load::BrokerUrl = format!("{scheme}://127.0.0.1:{port}").parse()?;
        let url = url.with_trust_store(Some(pki.path("ca.pem")));
        let destination: client::load::DestinationName = format!("queue://TOOLS.{port}").parse()?;
        let produced = run_producer(ProducerOptions {
            broker: url.clone(),
            destination: destination.clone(),
            message_count: 50,
            user: Some("tools".to_owned()),
            password: Some("tools-secret".to_owned()),
            ..ProducerOptions::default()
        })
        .await
        .with_context(|| format!("producing over {scheme}"))?;
        ensure!(produced.messages == 50, "{scheme}: {produced}");
        let consumed = run_consumer(ConsumerOptions {
            broker: url.clone(),
            destination: destination.clone(),
            message_count: 50,
            user: Some("tools".to_owned()),
            password: Some("tools-secret".to_owned()),
            ..ConsumerOptions::default()
        })
        .await
        .with_context(|| format!("consuming over {scheme}"))?;
        ensure!(consumed.messages == 50, "{scheme}: {consumed}");
        // The wrong password is refused; so is a trust store that does not vouch for the
        // broker.
        let wrong = run_producer(ProducerOptions {
            broker: url.clone(),
            destination: destination.clone(),
            message_count: 1,
            user: Some("tools".to_owned()),
            password: Some("guess".to_owned()),
            ..ProducerOptions::default()
        })
        .await;
        ensure!(wrong.is_err(), "{scheme}: a wrong password was let in");
        let untrusted = run_producer(ProducerOptions {
            broker: url.clone().with_trust_store(Some(pki.path("rogue-ca.pem"))),
            destination: destination.clone(),
            message_count: 1,
            user: Some("tools".to_owned()),
            password: Some("tools-secret".to_owned()),
            ..ProducerOptions::default()
        })
        .await;
        let error = format!("{:#}", untrusted.err().context("an untrusted broker was accepted")?);
        ensure!(error.contains("TLS"), "{scheme}: {error}");
    }
    broker.shutdown().await;
    Ok(())
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn the_admin_endpoint_serves_https_when_asked() -> anyhow::Result<()> {
    let pki = TestPki::get()?;
    let broker = start(&["stomp://127.0.0.1:0"], |config| config.admin.tls = true).await?;
    let port = broker.admin_addr().context("no admin endpoint")?.port();
    // 127.0.0.1 as the other TLS tests above: the certificate's name checked is that address.
    let https = broker::admin::AdminClient::new(&format!("https://127.0.0.1:{port}"))?
        .with_trust_store(Some(pki.path("ca.pem")));
    let stats = https.broker().await?;
    ensure!(stats.connections.accepted == 0, "{stats:?}");
    // Plain HTTP gets no answer from it, and a client that does not trust its certificate
    // refuses it.
    let http = broker::admin::AdminClient::new(&format!("http://127.0.0.1:{port}"))?;
    ensure!(http.broker().await.is_err(), "plain HTTP was answered");
    let untrusting = broker::admin::AdminClient::new(&format!("https://127.0.0.1:{port}"))?
        .with_trust_store(Some(pki.path("rogue-ca.pem")));
    ensure!(untrusting.broker().await.is_err(), "an untrusted certificate was accepted");
    broker.shutdown().await;
    Ok(())
}
