//! The admin endpoint: after a known workload over STOMP and OpenWire, `/api/destinations`,
//! `/api/broker` and `/metrics` show exactly its counts; bad requests get 404 and 405; a taken
//! admin port stops the broker from starting.

use anyhow::{ensure, Context as _};
use broker::admin::{AdminClient, BrokerStats, DestinationStats, StatsKind};
use broker::BrokerHandle;
use client::openwire::{
    Destination, OpenWireClient, OpenWireOptions, OutgoingMessage, SessionMode,
};
use client::AckMode;
use tests::{connect, recv, recv_n, send_persistent, start_broker, wait_until};

const QUEUE: &str = "admin.orders";
const TOPIC: &str = "admin.prices";

async fn start() -> anyhow::Result<BrokerHandle> {
    start_broker(|config| {
        config.transport.connectors = vec![
            "stomp://127.0.0.1:0".parse().expect("uri"),
            "tcp://127.0.0.1:0".parse().expect("uri"),
        ];
    })
    .await
}

fn admin(broker: &BrokerHandle) -> anyhow::Result<AdminClient> {
    let addr = broker.admin_addr().context("the admin endpoint is on")?;
    Ok(AdminClient::new(&format!("http://{addr}"))?)
}

fn find<'a>(
    all: &'a [DestinationStats],
    kind: StatsKind,
    name: &str,
) -> Option<&'a DestinationStats> {
    all.iter().find(|d| d.kind == kind && d.name == name)
}

/// The queue's counters as the endpoint reports them, once `settled` says they are final.
async fn wait_for_queue(
    admin: &AdminClient,
    what: &str,
    settled: impl Fn(&DestinationStats) -> bool,
) -> anyhow::Result<DestinationStats> {
    wait_until(what, || async {
        let path = format!("/api/destinations/queue/{QUEUE}");
        admin.get_json::<DestinationStats>(&path).await.is_ok_and(|d| settled(&d))
    })
    .await?;
    Ok(admin.get_json(&format!("/api/destinations/queue/{QUEUE}")).await?)
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn destinations_and_metrics_show_the_counts_of_a_known_workload() -> anyhow::Result<()> {
    let broker = start().await?;
    let admin = admin(&broker)?;

    // A queue: 7 messages over STOMP and 3 over OpenWire from a producer created for it;
    // one STOMP consumer with prefetch 2 takes 4 and acknowledges them.
    let stomp = connect(&broker).await?;
    let prefetch = [("activemq.prefetchSize", "2")];
    let mut consumer =
        stomp.subscribe(&format!("/queue/{QUEUE}"), AckMode::ClientIndividual, &prefetch).await?;
    send_persistent(&stomp, &format!("/queue/{QUEUE}"), "s", 7).await?;
    let addr = broker.openwire_addr().context("an OpenWire connector")?;
    let openwire =
        OpenWireClient::connect(&addr.ip().to_string(), addr.port(), OpenWireOptions::default())
            .await?;
    let session = openwire.session(SessionMode::Auto).await?;
    let producer = session.producer(Some(Destination::queue(QUEUE))).await?;
    for index in 0..3 {
        producer.send(&OutgoingMessage::text(format!("o{index}"))).await?;
    }
    for _ in 0..4 {
        let message = recv(&mut consumer).await?;
        stomp.ack(&message).await?;
    }
    // A topic: one auto-acknowledging subscriber gets 5 messages.
    let mut subscriber = stomp.subscribe(&format!("/topic/{TOPIC}"), AckMode::Auto, &[]).await?;
    for index in 0..5 {
        stomp.send_with_receipt(&format!("/topic/{TOPIC}"), format!("p{index}"), &[]).await?;
    }
    recv_n(&mut subscriber, 5).await?;

    let queue =
        wait_for_queue(&admin, "4 acks and 2 in flight", |d| d.dequeued == 4 && d.in_flight == 2)
            .await?;
    let expected = (4, 2, 10, 4, 1, 1, 0, 0);
    let got = (
        queue.pending,
        queue.in_flight,
        queue.enqueued,
        queue.dequeued,
        queue.consumers,
        queue.producers,
        queue.expired,
        queue.dead_lettered,
    );
    ensure!(got == expected, "queue counts {got:?}, expected {expected:?}: {queue:?}");
    ensure!(queue.memory_bytes > 6 * 2, "6 messages held: {queue:?}");

    wait_until("the topic's 5 deliveries are acknowledged", || async {
        let all = admin.destinations().await.unwrap_or_default();
        find(&all, StatsKind::Topic, TOPIC).is_some_and(|t| t.dequeued == 5)
    })
    .await?;
    let all = admin.destinations().await?;
    ensure!(find(&all, StatsKind::Queue, QUEUE) == Some(&queue), "the list agrees: {all:?}");
    let topic = find(&all, StatsKind::Topic, TOPIC).context("the topic is listed")?;
    let got = (topic.enqueued, topic.dequeued, topic.pending, topic.consumers, topic.producers);
    ensure!(got == (5, 5, 0, 1, 0), "topic counts {got:?}: {topic:?}");
    ensure!(topic.subscriptions.len() == 1 && !topic.subscriptions[0].durable, "{topic:?}");

    let stats: BrokerStats = admin.broker().await?;
    ensure!(
        (stats.connections.stomp, stats.connections.openwire) == (1, 1),
        "one connection of each protocol: {stats:?}"
    );
    ensure!(stats.destinations.queues == 1 && stats.destinations.topics == 1, "{stats:?}");
    ensure!(stats.memory_bytes >= queue.memory_bytes, "{stats:?}");
    ensure!(stats.store.kind == "memory" && stats.store.used_bytes > 0, "{stats:?}");
    ensure!(stats.version == env!("CARGO_PKG_VERSION"), "{stats:?}");

    let metrics = admin.request("GET", "/metrics").await?;
    ensure!(metrics.status == 200, "{metrics:?}");
    ensure!(
        metrics.header("content-type").is_some_and(|t| t.starts_with("text/plain; version=0.0.4")),
        "{metrics:?}"
    );
    let labels = format!("{{destination=\"{QUEUE}\",kind=\"queue\"}}");
    let topic_labels = format!("{{destination=\"{TOPIC}\",kind=\"topic\"}}");
    for line in [
        "# HELP ferromq_destination_pending Messages waiting for a consumer.".to_owned(),
        "# TYPE ferromq_destination_pending gauge".to_owned(),
        "# TYPE ferromq_destination_enqueued_total counter".to_owned(),
        format!("ferromq_destination_pending{labels} 4"),
        format!("ferromq_destination_in_flight{labels} 2"),
        format!("ferromq_destination_enqueued_total{labels} 10"),
        format!("ferromq_destination_dequeued_total{labels} 4"),
        format!("ferromq_destination_consumers{labels} 1"),
        format!("ferromq_destination_producers{labels} 1"),
        format!("ferromq_destination_enqueued_total{topic_labels} 5"),
        "ferromq_connections{protocol=\"stomp\"} 1".to_owned(),
        "ferromq_connections{protocol=\"openwire\"} 1".to_owned(),
        "ferromq_destinations{kind=\"queue\"} 1".to_owned(),
    ] {
        ensure!(
            metrics.body.lines().any(|l| l == line),
            "/metrics lacks `{line}`:\n{}",
            metrics.body
        );
    }

    // The producer's count ends with it, and the connection's with the connection.
    producer.close().await?;
    wait_for_queue(&admin, "the producer is gone", |d| d.producers == 0).await?;
    openwire.close().await?;
    wait_until("the OpenWire connection is gone", || async {
        admin.broker().await.is_ok_and(|b| b.connections.openwire == 0)
    })
    .await?;
    broker.shutdown().await;
    Ok(())
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn unknown_paths_are_404_and_other_methods_405() -> anyhow::Result<()> {
    let broker = start().await?;
    let admin = admin(&broker)?;

    let unknown = admin.request("GET", "/api/nothing").await?;
    ensure!(unknown.status == 404, "{unknown:?}");
    ensure!(unknown.header("content-type") == Some("application/json"), "{unknown:?}");
    ensure!(
        unknown.body.contains("\"status\":404") && unknown.body.contains("/api/nothing"),
        "{unknown:?}"
    );

    let missing = admin.request("GET", "/api/destinations/queue/never.used").await?;
    ensure!(missing.status == 404 && missing.body.contains("never.used"), "{missing:?}");

    let post = admin.request("POST", "/api/destinations").await?;
    ensure!(post.status == 405, "{post:?}");
    ensure!(post.header("allow") == Some("GET, HEAD"), "{post:?}");
    let put = admin.request("PUT", "/api/destinations/queue/x").await?;
    ensure!(put.status == 405, "{put:?}");
    ensure!(put.header("allow") == Some("GET, HEAD, DELETE"), "{put:?}");
    // A deletion is an operation: refused without the token (`admin_ops.rs` has the rest).
    let delete = admin.request("DELETE", "/api/destinations/queue/x").await?;
    ensure!(delete.status == 403, "{delete:?}");
    broker.shutdown().await;
    Ok(())
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn a_taken_admin_port_fails_startup_naming_the_address_and_key() -> anyhow::Result<()> {
    let taken = std::net::TcpListener::bind("127.0.0.1:0")?;
    let address = taken.local_addr()?.to_string();
    let result = start_broker(|config| config.admin.bind = address.clone()).await;
    let error = match result {
        Ok(_) => anyhow::bail!("the broker started although {address} is taken"),
        Err(error) => format!("{error:#}"),
    };
    ensure!(error.contains(&address) && error.contains("admin.bind"), "{error}");

    // Off, it binds nothing.
    let broker = start_broker(|config| {
        config.admin.bind = address.clone();
        config.admin.enabled = false;
    })
    .await?;
    ensure!(broker.admin_addr().is_none());
    broker.shutdown().await;
    Ok(())
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn expired_dead_lettered_and_durable_subscriptions_are_counted() -> anyhow::Result<()> {
    let broker = start_broker(|config| config.dead_letter.max_redeliveries = 0).await?;
    let admin = admin(&broker)?;
    let client = tests::connect_as(&broker, "admin-test").await?;
    let queue = "/queue/admin.failing";

    // One message expired before anyone consumes it, one NACKed past the limit (0: at once).
    let past = std::time::SystemTime::now()
        .duration_since(std::time::UNIX_EPOCH)?
        .as_millis()
        .saturating_sub(60_000)
        .to_string();
    client.send_with_receipt(queue, "stale", &[tests::PERSISTENT, ("expires", &past)]).await?;
    client.send_with_receipt(queue, "poison", &[tests::PERSISTENT]).await?;
    let mut consumer = client.subscribe(queue, AckMode::ClientIndividual, &[]).await?;
    let poison = recv(&mut consumer).await?;
    client.nack(&poison).await?;

    // A durable subscription, offline while 3 messages are published.
    let durable = [(tests::SUBSCRIPTION_NAME, "prices-sub")];
    let subscriber = client.subscribe(&format!("/topic/{TOPIC}"), AckMode::Auto, &durable).await?;
    subscriber.unsubscribe().await?;
    for index in 0..3 {
        client
            .send_with_receipt(
                &format!("/topic/{TOPIC}"),
                format!("p{index}"),
                &[tests::PERSISTENT],
            )
            .await?;
    }

    wait_until("the queue's two messages are gone", || async {
        let path = "/api/destinations/queue/admin.failing";
        admin
            .get_json::<DestinationStats>(path)
            .await
            .is_ok_and(|d| d.expired + d.dead_lettered == 2)
    })
    .await?;
    let all = admin.destinations().await?;
    let failing = find(&all, StatsKind::Queue, "admin.failing").context("the queue is listed")?;
    let got = (
        failing.enqueued,
        failing.expired,
        failing.dead_lettered,
        failing.pending,
        failing.memory_bytes,
    );
    ensure!(got == (2, 1, 1, 0, 0), "enqueued, expired, dead-lettered, pending, memory {got:?}");
    let dlq = find(&all, StatsKind::Queue, "ActiveMQ.DLQ").context("the DLQ is listed")?;
    ensure!((dlq.enqueued, dlq.pending) == (2, 2), "both reach the DLQ: {dlq:?}");
    let topic = find(&all, StatsKind::Topic, TOPIC).context("the topic is listed")?;
    ensure!((topic.enqueued, topic.pending, topic.consumers) == (3, 3, 0), "{topic:?}");
    let [subscription] = topic.subscriptions.as_slice() else {
        anyhow::bail!("one subscription expected: {topic:?}");
    };
    ensure!(
        subscription.durable && subscription.name == "admin-test:prices-sub",
        "{subscription:?}"
    );
    ensure!(subscription.pending == 3 && subscription.consumers == 0, "{subscription:?}");
    broker.shutdown().await;
    Ok(())
}

/// With `[authentication]` enabled the endpoint asks for HTTP Basic credentials of a user in
/// `[admin] groups`: none or wrong ones get 401 with the challenge, a user outside the groups
/// 403, an admin the statistics; `/api/status` stays open for health checks.
#[tokio::test]
async fn with_authentication_only_admins_read_the_statistics() -> anyhow::Result<()> {
    let hash =
        |password: &str| broker::security::hash_password(password).map_err(anyhow::Error::msg);
    let user = |name: &str, password: &str, group: &str| -> anyhow::Result<conf::UserEntry> {
        Ok(conf::UserEntry {
            name: name.to_owned(),
            password: hash(password)?,
            groups: vec![group.to_owned()],
        })
    };
    let users = vec![user("root", "secret", "admins")?, user("alice", "wonderland", "users")?];
    let broker = start_broker(|config| {
        config.admin.enabled = true;
        config.admin.bind = "127.0.0.1:0".to_owned();
        config.authentication.enabled = true;
        config.users = users;
    })
    .await?;
    let anonymous = admin(&broker)?;
    let as_user = |name: &str, password: &str| -> anyhow::Result<AdminClient> {
        Ok(admin(&broker)?.with_credentials(Some((name.to_owned(), password.to_owned()))))
    };

    for path in ["/api/broker", "/api/destinations", "/metrics", "/api/destinations/queue/q"] {
        let answer = anonymous.request("GET", path).await?;
        ensure!(answer.status == 401, "{path} without credentials: {answer:?}");
        ensure!(answer.header("www-authenticate") == Some("Basic realm=\"ferromq\""), "{answer:?}");
    }
    let wrong = as_user("root", "guess")?.request("GET", "/api/broker").await?;
    ensure!(wrong.status == 401, "a wrong password: {wrong:?}");
    ensure!(!wrong.body.contains("guess"), "the password is not echoed: {wrong:?}");
    let unknown = as_user("mallory", "secret")?.request("GET", "/api/broker").await?;
    ensure!(unknown.status == 401, "an unknown user: {unknown:?}");
    let outsider = as_user("alice", "wonderland")?.request("GET", "/metrics").await?;
    ensure!(outsider.status == 403, "a user outside [admin] groups: {outsider:?}");

    let root = as_user("root", "secret")?;
    let stats: BrokerStats = root.broker().await?;
    ensure!(root.request("GET", "/metrics").await?.status == 200);
    let status = anonymous.status().await?;
    ensure!(status.name == stats.name, "{status:?}");
    broker.shutdown().await;
    Ok(())
}

/// `GET path` over a fresh connection from `source` (a loopback address of its own, so that
/// the broker sees another client than the tests' usual 127.0.0.1), with `headers`; the
/// whole answer, empty when the broker closed the connection without one.
async fn raw_get(
    admin: std::net::SocketAddr,
    source: std::net::Ipv4Addr,
    path: &str,
    headers: &str,
) -> anyhow::Result<String> {
    use tokio::io::{AsyncReadExt as _, AsyncWriteExt as _};
    let socket = tokio::net::TcpSocket::new_v4()?;
    socket.bind((source, 0).into()).with_context(|| format!("binding {source}"))?;
    let mut stream = socket.connect(admin).await?;
    let request =
        format!("GET {path} HTTP/1.1\r\nHost: ferromq\r\n{headers}Connection: close\r\n\r\n");
    stream.write_all(request.as_bytes()).await?;
    let mut answer = Vec::new();
    // A broker that refuses the connection closes it: EOF, or a reset while we still wrote.
    let read = tokio::time::timeout(tests::ARRIVES, stream.read_to_end(&mut answer)).await;
    read.context("the admin endpoint answers in time")?.ok();
    Ok(String::from_utf8_lossy(&answer).into_owned())
}

/// One address holding 64 connections with half-sent requests (the whole pool, before each
/// address got at most 16 places) leaves `/api/status` answering every probe from another
/// address, and the broker cuts the dawdlers off after a few seconds instead of hyper's 30.
#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn slow_connections_from_one_address_leave_the_status_answering_for_another(
) -> anyhow::Result<()> {
    use tokio::io::{AsyncReadExt as _, AsyncWriteExt as _};
    let broker = start_broker(|_| {}).await?;
    let addr = broker.admin_addr().context("the admin endpoint is on")?;
    let mut slow = Vec::new();
    for _ in 0..64 {
        let mut stream = tokio::net::TcpStream::connect(addr).await?;
        stream.write_all(b"GET /api/status HTTP/1.1\r\nHost: ferromq\r\n").await?;
        slow.push(stream);
    }
    // The broker accepts in arrival order, so every probe comes after the 64.
    let other = std::net::Ipv4Addr::new(127, 0, 0, 2);
    for probe in 0..5 {
        let answer = raw_get(addr, other, "/api/status", "").await?;
        ensure!(answer.starts_with("HTTP/1.1 200"), "probe {probe} from {other}: {answer:?}");
        ensure!(answer.contains("\"role\""), "probe {probe}: {answer:?}");
    }
    // Every slow connection ends (refused at once, or its headers timed out) well before 30 s.
    let started = std::time::Instant::now();
    let limit = std::time::Duration::from_secs(15);
    for (index, stream) in slow.iter_mut().enumerate() {
        let mut rest = Vec::new();
        let left = limit.saturating_sub(started.elapsed());
        let ended = tokio::time::timeout(left, stream.read_to_end(&mut rest)).await;
        ensure!(ended.is_ok(), "slow connection {index} still open after {limit:?}");
    }
    broker.shutdown().await;
    Ok(())
}

/// HTTP Basic's scheme name is case-insensitive (RFC 7235): `basic` and `BASIC` log in as
/// `Basic` does.
#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn the_basic_scheme_is_accepted_in_any_case() -> anyhow::Result<()> {
    let password = broker::security::hash_password("secret").map_err(anyhow::Error::msg)?;
    let broker = start_broker(|config| {
        config.authentication.enabled = true;
        config.users = vec![conf::UserEntry {
            name: "root".to_owned(),
            password,
            groups: vec!["admins".to_owned()],
        }];
    })
    .await?;
    let addr = broker.admin_addr().context("the admin endpoint is on")?;
    let credentials = "cm9vdDpzZWNyZXQ="; // base64 of "root:secret"
    let localhost = std::net::Ipv4Addr::LOCALHOST;
    for scheme in ["Basic", "basic", "BASIC"] {
        let header = format!("Authorization: {scheme} {credentials}\r\n");
        let answer = raw_get(addr, localhost, "/api/broker", &header).await?;
        ensure!(answer.starts_with("HTTP/1.1 200"), "scheme {scheme}: {answer:?}");
    }
    let answer = raw_get(addr, localhost, "/api/broker", "Authorization: Bearer x\r\n").await?;
    ensure!(answer.starts_with("HTTP/1.1 401"), "another scheme: {answer:?}");
    broker.shutdown().await;
    Ok(())
}
