//! The admin endpoint's connections and producers (issue 22): `GET /api/connections` lists a
//! STOMP (stomp.py), an MQTT (paho-mqtt), an AMQP (Qpid Proton) and an OpenWire (the ActiveMQ
//! JMS client) connection, each with its protocol, address, client id, user, consumers and
//! producers; `GET /api/producers` lists their producers with a sent count that moves; `DELETE
//! /api/connections/{id}` closes one (its client sees the connection end) and it leaves the
//! list, 404 for an unknown id, refused without the token or from another origin.
//!
//! The clients are `tests/python/admin_connections.py` and `tests/java/AdminConnectionsJms.java`
//! (compiled by `scripts/test`), each driven one command a line.

use std::process::Stdio;
use std::time::Duration;

use anyhow::{bail, ensure, Context as _};
use broker::admin::{AdminClient, ConnectionView, ProducerView};
use std::io::{BufRead as _, BufReader, Write as _};
use std::process::{Child, ChildStdin, Command};

use crate::amqp::{python, repository_root};

const USER: &str = "root";
const PASSWORD: &str = "secret";
/// What the clients send before they say they are ready: 2 STOMP, 3 MQTT, 4 AMQP, 1 JMS.
const SENT_AT_START: u64 = 2 + 3 + 4 + 1;
/// How long a client may take to answer a command.
const ANSWER_TIMEOUT: Duration = Duration::from_secs(60);

/// A client process driven one command a line (`ready` first, then `ok ...` per command);
/// killed when dropped.
struct Driven {
    child: Child,
    stdin: ChildStdin,
    /// Its stdout's lines, read by a thread of their own.
    lines: tokio::sync::mpsc::UnboundedReceiver<String>,
    name: &'static str,
}

impl Driven {
    fn start(name: &'static str, mut command: Command) -> anyhow::Result<Driven> {
        command.stdin(Stdio::piped()).stdout(Stdio::piped()).stderr(Stdio::inherit());
        let mut child =
            command.spawn().with_context(|| format!("cannot start the {name} client"))?;
        let stdin = child.stdin.take().context("stdin")?;
        let stdout = child.stdout.take().context("stdout")?;
        let (sender, lines) = tokio::sync::mpsc::unbounded_channel();
        std::thread::spawn(move || {
            for line in BufReader::new(stdout).lines().map_while(Result::ok) {
                if sender.send(line).is_err() {
                    return;
                }
            }
        });
        Ok(Driven { child, stdin, lines, name })
    }

    /// The next line, which must start with `expected`.
    async fn expect(&mut self, expected: &str) -> anyhow::Result<String> {
        let name = self.name;
        let line = tokio::time::timeout(ANSWER_TIMEOUT, self.lines.recv())
            .await
            .with_context(|| format!("the {name} client did not answer within {ANSWER_TIMEOUT:?}"))?
            .with_context(|| format!("the {name} client ended"))?;
        ensure!(line.starts_with(expected), "the {name} client: expected {expected}, got {line}");
        Ok(line)
    }

    async fn ask(&mut self, command: &str) -> anyhow::Result<String> {
        self.stdin.write_all(format!("{command}\n").as_bytes())?;
        self.stdin.flush()?;
        self.expect(&format!("ok {command}")).await
    }
}

impl Drop for Driven {
    fn drop(&mut self) {
        let _ = self.child.kill();
        let _ = self.child.wait();
    }
}

fn user() -> anyhow::Result<conf::UserEntry> {
    Ok(conf::UserEntry {
        name: USER.to_owned(),
        password: broker::security::hash_password(PASSWORD).map_err(anyhow::Error::msg)?,
        groups: vec!["admins".to_owned()],
    })
}

/// `DELETE path` as root, with the token and the origin given; the status and body.
async fn act(
    addr: std::net::SocketAddr,
    path: &str,
    token: Option<&str>,
    origin: Option<&str>,
) -> anyhow::Result<(u16, String)> {
    use tokio::io::{AsyncReadExt as _, AsyncWriteExt as _};
    let method = "DELETE";
    let credentials = crate::admin_ops::basic(USER, PASSWORD);
    let mut request = format!(
        "{method} {path} HTTP/1.1\r\nHost: {addr}\r\nConnection: close\r\nContent-Length: 0\r\nAuthorization: Basic {credentials}\r\n"
    );
    if let Some(token) = token {
        request.push_str(&format!("X-Ferromq-Token: {token}\r\n"));
    }
    if let Some(origin) = origin {
        request.push_str(&format!("Origin: {origin}\r\n"));
    }
    request.push_str("\r\n");
    let mut stream = tokio::net::TcpStream::connect(addr).await?;
    stream.write_all(request.as_bytes()).await?;
    let mut raw = Vec::new();
    tokio::time::timeout(ANSWER_TIMEOUT, stream.read_to_end(&mut raw)).await??;
    let raw = String::from_utf8(raw)?;
    let (head, body) = raw.split_once("\r\n\r\n").context("an HTTP answer")?;
    Ok((head.get(9..12).context("a status line")?.parse()?, body.to_owned()))
}

fn by_client<'a>(connections: &'a [ConnectionView], client_id: &str) -> Option<&'a ConnectionView> {
    connections.iter().find(|c| c.client_id.as_deref() == Some(client_id))
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn connections_of_every_protocol_are_listed_and_closed() -> anyhow::Result<()> {
    let classpath = std::env::var("FERROMQ_JMS_CLASSPATH")
        .ok()
        .filter(|v| !v.is_empty())
        .context("FERROMQ_JMS_CLASSPATH is not set: run scripts/test")?;
    let users = vec![user()?];
    let broker = tests::start_broker(|config| {
        config.authentication.enabled = true;
        config.users = users;
        config.transport.connectors = ["stomp", "tcp", "amqp", "mqtt"]
            .iter()
            .map(|scheme| format!("{scheme}://127.0.0.1:0").parse().expect("a valid URI"))
            .collect();
    })
    .await?;
    let admin_addr = broker.admin_addr().context("the admin endpoint is on")?;
    let admin = AdminClient::new(&format!("http://{admin_addr}"))?
        .with_credentials(Some((USER.to_owned(), PASSWORD.to_owned())));
    let (stomp, openwire, amqp, mqtt) = (
        broker.stomp_addr().context("STOMP")?,
        broker.openwire_addr().context("OpenWire")?,
        broker.amqp_addr().context("AMQP")?,
        broker.mqtt_addr().context("MQTT")?,
    );

    let mut command = Command::new(python()?);
    command
        .arg(repository_root().join("tests/python/admin_connections.py"))
        .args(["--stomp-port", &stomp.port().to_string()])
        .args(["--mqtt-port", &mqtt.port().to_string()])
        .args(["--amqp-port", &amqp.port().to_string()])
        .args(["--user", USER, "--password", PASSWORD])
        .env("PYTHONUNBUFFERED", "1")
        .env("PYTHONDONTWRITEBYTECODE", "1");
    let mut python_clients = Driven::start("Python", command)?;
    let ready = python_clients.expect("ready").await?;
    let ports: Vec<u16> =
        ready.split_whitespace().skip(1).map(str::parse).collect::<Result<_, _>>()?;
    let [stomp_port, mqtt_port] = ports[..] else { bail!("{ready}") };
    let mut command = Command::new("java");
    command
        .args(["-cp", &classpath, "AdminConnectionsJms", "--url"])
        .arg(format!("tcp://{openwire}?jms.watchTopicAdvisories=false"));
    command.args(["--user", USER, "--password", PASSWORD]);
    let mut jms = Driven::start("JMS", command)?;
    jms.expect("ready").await?;

    // Every connection listed with what its client did; the sends counted as they arrive.
    let deadline = tokio::time::Instant::now() + ANSWER_TIMEOUT;
    let connections = loop {
        let listed: Vec<ConnectionView> = admin.get_json("/api/connections").await?;
        let producers: Vec<ProducerView> = admin.get_json("/api/producers").await?;
        let consuming = ["adm-stomp", "adm-mqtt", "adm-amqp", "adm-jms"]
            .iter()
            .all(|id| by_client(&listed, id).is_some_and(|c| c.consumers == 1));
        if consuming && producers.iter().map(|p| p.sent).sum::<u64>() >= SENT_AT_START {
            break listed;
        }
        if tokio::time::Instant::now() > deadline {
            let broker: broker::admin::BrokerStats = admin.get_json("/api/broker").await?;
            bail!("not every connection or send is listed: {listed:#?} {producers:#?} {broker:?}");
        }
        tokio::time::sleep(Duration::from_millis(20)).await;
    };
    ensure!(connections.len() == 4, "{connections:#?}");
    let expected = [
        ("adm-stomp", "stomp", 1, Some(stomp_port)),
        ("adm-mqtt", "mqtt", 1, Some(mqtt_port)),
        ("adm-amqp", "amqp", 1, None),
        ("adm-jms", "openwire", 2, None),
    ];
    let before_ms = u64::try_from(
        std::time::SystemTime::now().duration_since(std::time::UNIX_EPOCH)?.as_millis(),
    )?;
    for (client_id, protocol, producers, port) in expected {
        let listed = by_client(&connections, client_id).context(client_id)?;
        ensure!(listed.protocol == protocol, "{listed:?}");
        ensure!(listed.user.as_deref() == Some(USER), "{listed:?}");
        ensure!(listed.consumers == 1 && listed.producers == producers, "{listed:?}");
        ensure!(
            listed.connected_since_ms > 0 && listed.connected_since_ms <= before_ms,
            "{listed:?}"
        );
        let remote: std::net::SocketAddr =
            listed.remote.parse().with_context(|| format!("{listed:?}"))?;
        ensure!(remote.ip().is_loopback(), "{listed:?}");
        if let Some(port) = port {
            ensure!(remote.port() == port, "{listed:?}: the client's port is {port}");
        }
        ensure!(!listed.id.is_empty(), "{listed:?}");
    }
    // The consumers' list names the same connections.
    let consumers: Vec<broker::admin::ConsumerView> = admin.get_json("/api/consumers").await?;
    for listed in &connections {
        ensure!(
            consumers.iter().any(|c| c.connection_id == listed.id),
            "{listed:?} in {consumers:#?}"
        );
    }

    // The producers, with their destinations (none for the anonymous ones) and sends.
    let producers: Vec<ProducerView> = admin.get_json("/api/producers").await?;
    let of = |client_id: &str| -> Vec<&ProducerView> {
        let id = by_client(&connections, client_id).map(|c| c.id.clone()).unwrap_or_default();
        producers.iter().filter(|p| p.connection_id == id).collect()
    };
    let described = |p: &&ProducerView| {
        (p.destination.as_ref().map(|d| (d.kind.clone(), d.name.clone())), p.sent)
    };
    let stomp_producers: Vec<_> = of("adm-stomp").iter().map(described).collect();
    ensure!(stomp_producers == [(None, 2)], "{producers:#?}");
    let mqtt_producers: Vec<_> = of("adm-mqtt").iter().map(described).collect();
    ensure!(mqtt_producers == [(None, 3)], "{producers:#?}");
    let amqp_producers: Vec<_> = of("adm-amqp").iter().map(described).collect();
    ensure!(
        amqp_producers == [(Some(("queue".to_owned(), "adm.amqp.out".to_owned())), 4)],
        "{producers:#?}"
    );
    let jms_producers: Vec<_> = of("adm-jms").iter().map(described).collect();
    ensure!(
        jms_producers == [(Some(("queue".to_owned(), "adm.jms.out".to_owned())), 1), (None, 0)],
        "{producers:#?}"
    );
    // The JMS producer's count moves with its sends.
    jms.ask("send 5").await?;
    let jms_id = by_client(&connections, "adm-jms").context("JMS")?.id.clone();
    tests::wait_until("the JMS producer's six sends", || {
        let admin = admin.clone();
        let jms_id = jms_id.clone();
        async move {
            let producers: Vec<ProducerView> =
                admin.get_json("/api/producers").await.unwrap_or_default();
            producers
                .iter()
                .any(|p| p.connection_id == jms_id && p.destination.is_some() && p.sent == 6)
        }
    })
    .await?;

    // The lists take the admin users' credentials, as every route does.
    let anonymous = AdminClient::new(&format!("http://{admin_addr}"))?;
    for path in ["/api/connections", "/api/producers"] {
        match anonymous.get_json::<Vec<ConnectionView>>(path).await {
            Err(broker::admin::AdminClientError::Status { status: 401, .. }) => {}
            other => bail!("{path} without credentials: {other:?}"),
        }
    }

    // The refusals, as for every state-changing request.
    let token = admin.get_json::<broker::admin::AdminToken>("/api/token").await?.token;
    let stomp_id = by_client(&connections, "adm-stomp").context("STOMP")?.id.clone();
    let path = |id: &str| format!("/api/connections/{}", crate::admin_ops::encode(id));
    let origin = format!("http://{admin_addr}");
    ensure!(act(admin_addr, &path(&stomp_id), None, Some(&origin)).await?.0 == 403, "no token");
    let foreign =
        act(admin_addr, &path(&stomp_id), Some(&token), Some("http://evil.example")).await?;
    ensure!(foreign.0 == 403, "another origin: {foreign:?}");
    let unknown = act(admin_addr, &path("ID:nobody-1"), Some(&token), Some(&origin)).await?;
    ensure!(unknown.0 == 404, "{unknown:?}");
    python_clients.ask("open stomp").await?;

    // Each closed in turn: its client sees its connection end, and it leaves the list.
    for (client_id, protocol) in [
        ("adm-stomp", "stomp"),
        ("adm-mqtt", "mqtt"),
        ("adm-amqp", "amqp"),
        ("adm-jms", "openwire"),
    ] {
        let id = by_client(&connections, client_id).context(client_id)?.id.clone();
        let (status, body) = act(admin_addr, &path(&id), Some(&token), Some(&origin)).await?;
        ensure!(status == 200 && body.contains("\"closed\": true"), "{status} {body}");
        match protocol {
            "openwire" => {
                jms.ask("closed").await?;
            }
            other => {
                let answer = python_clients.ask(&format!("closed {other}")).await?;
                if other == "stomp" {
                    // STOMP's shutdown path writes what is pending and closes: no ERROR frame.
                    ensure!(answer.ends_with("error=none"), "{answer}");
                }
            }
        }
        let listed: Vec<ConnectionView> = admin.get_json("/api/connections").await?;
        ensure!(listed.iter().all(|c| c.id != id), "{client_id} is still listed: {listed:#?}");
        let producers: Vec<ProducerView> = admin.get_json("/api/producers").await?;
        ensure!(producers.iter().all(|p| p.connection_id != id), "{producers:#?}");
        let (status, _) = act(admin_addr, &path(&id), Some(&token), Some(&origin)).await?;
        ensure!(status == 404, "{client_id} closed twice: {status}");
    }
    python_clients.ask("quit").await?;
    drop((python_clients, jms));
    broker.shutdown().await;
    Ok(())
}

/// An administrator's close is not the client's DISCONNECT: an MQTT client's will is published
/// (MQTT-3.1.2-8), and a 5.0 client is told why (0x98, Administrative action). As a broker
/// shutdown (which publishes no will), the close dropped it.
#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn an_administrator_s_close_publishes_the_mqtt_client_s_will() -> anyhow::Result<()> {
    let broker = tests::start_broker(|config| {
        config.transport.connectors = vec!["mqtt://127.0.0.1:0".parse().expect("a valid URI")];
    })
    .await?;
    let (mqtt, admin_addr) =
        (broker.mqtt_addr().context("MQTT")?, broker.admin_addr().context("the admin endpoint")?);
    let admin = AdminClient::new(&format!("http://{admin_addr}"))?;
    let token = admin.get_json::<broker::admin::AdminToken>("/api/token").await?.token;
    let origin = format!("http://{admin_addr}");
    for (version, reason) in [("3", "none"), ("5", "152")] {
        let client_id = format!("adm-will-{version}");
        let mut command = Command::new(python()?);
        command
            .arg(repository_root().join("tests/python/mqtt_admin_close.py"))
            .args(["--port", &mqtt.port().to_string(), "--version", version])
            .args(["--client-id", &client_id]);
        let mut client = Driven::start("MQTT", command)?;
        client.expect("ready").await?;
        let deadline = tokio::time::Instant::now() + ANSWER_TIMEOUT;
        let id = loop {
            let listed: Vec<ConnectionView> = admin.get_json("/api/connections").await?;
            if let Some(entry) = by_client(&listed, &client_id) {
                break entry.id.clone();
            }
            ensure!(tokio::time::Instant::now() < deadline, "{client_id} not listed: {listed:#?}");
            tokio::time::sleep(Duration::from_millis(20)).await;
        };
        let path = format!("/api/connections/{}", crate::admin_ops::encode(&id));
        let (status, body) = act(admin_addr, &path, Some(&token), Some(&origin)).await?;
        ensure!(status == 200, "{status} {body}");
        let closed = client.expect("closed").await?;
        ensure!(closed == format!("closed reason={reason} will=gone"), "MQTT {version}: {closed}");
    }
    broker.shutdown().await;
    Ok(())
}
