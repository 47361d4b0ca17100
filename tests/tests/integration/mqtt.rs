//! ferromq over MQTT 3.1, 3.1.1 and 5.0: paho-mqtt (Python), a real third-party client, runs
//! the checks of `tests/python/mqtt_checks.py` against an embedded broker with an
//! `mqtt://127.0.0.1:0` connector (and a STOMP one for the cross-protocol check); the
//! script's raw sockets send what no client would (a silent client, malformed packets, a
//! second CONNECT, a QoS 2 resend).
//!
//! The interpreter is `$FERROMQ_PYTHON` (set by `scripts/test`), else the repository's
//! `.venv/bin/python`, as for the stomp.py checks.

use std::sync::Arc;
use std::time::Duration;

use anyhow::{bail, Context};
use broker::BrokerHandle;

use crate::stomp_py::{python, repository_root, run_with_timeout};

/// The longest one check may run; the script gives up on anything it waits for after 15 s.
const CHECK_TIMEOUT: Duration = Duration::from_secs(180);

const USER: &str = "device";
const PASSWORD: &str = "secret";

/// A broker with an MQTT and a STOMP connector, on ephemeral ports.
async fn start() -> anyhow::Result<BrokerHandle> {
    tests::start_broker(|config| {
        config.transport.connectors = vec![
            "mqtt://127.0.0.1:0".parse().expect("a valid connector URI"),
            "stomp://127.0.0.1:0".parse().expect("a valid connector URI"),
        ];
    })
    .await
}

/// A broker where `device` (group `devices`) may read, write and create topics under
/// `mqtt.open.>`, and only admins may read `mqtt.secret.>`.
async fn start_secured() -> anyhow::Result<BrokerHandle> {
    let hash = broker::security::hash_password(PASSWORD).map_err(anyhow::Error::msg)?;
    tests::start_broker(|config| {
        config.transport.connectors = vec!["mqtt://127.0.0.1:0".parse().expect("a valid URI")];
        config.authentication.enabled = true;
        config.users = vec![conf::UserEntry {
            name: USER.to_owned(),
            password: hash,
            groups: vec!["devices".to_owned()],
        }];
        let topic = |pattern: &str, read: &[&str], write: &[&str], admin: &[&str]| {
            let groups = |names: &[&str]| names.iter().map(|name| name.to_string()).collect();
            conf::AuthorizationEntry {
                topic: Some(pattern.to_owned()),
                read: groups(read),
                write: groups(write),
                admin: groups(admin),
                ..Default::default()
            }
        };
        config.authorization = vec![
            topic("mqtt.open.>", &["devices"], &["devices"], &["devices"]),
            topic("mqtt.secret.>", &["admins"], &["admins"], &["admins"]),
            topic("ActiveMQ.Advisory.>", &["devices"], &["devices"], &["devices"]),
        ];
    })
    .await
}

/// Runs check `check` of `mqtt_checks.py` against `broker`'s MQTT connector.
async fn run_check(broker: &BrokerHandle, check: &str, login: bool) -> anyhow::Result<()> {
    let mqtt = broker.mqtt_addr().context("the broker has no MQTT connector")?;
    run_check_at(broker, mqtt, check, login, &[]).await
}

/// Runs check `check` of `mqtt_checks.py` against the MQTT connector at `mqtt`.
async fn run_check_at(
    broker: &BrokerHandle,
    mqtt: std::net::SocketAddr,
    check: &str,
    login: bool,
    extra: &[String],
) -> anyhow::Result<()> {
    let python = python()?;
    let mut args = vec![
        repository_root().join("tests/python/mqtt_checks.py").display().to_string(),
        "--host".to_owned(),
        mqtt.ip().to_string(),
        "--port".to_owned(),
        mqtt.port().to_string(),
        "--check".to_owned(),
        check.to_owned(),
    ];
    if let Some(stomp) = broker.stomp_addr() {
        args.extend(["--stomp-port".to_owned(), stomp.port().to_string()]);
    }
    args.extend(extra.iter().cloned());
    if login {
        args.extend([
            "--user".to_owned(),
            USER.to_owned(),
            "--password".to_owned(),
            PASSWORD.to_owned(),
        ]);
    }
    let output =
        tokio::task::spawn_blocking(move || run_with_timeout(&python, &args, CHECK_TIMEOUT))
            .await
            .context("the check's runner panicked")??;
    if !output.status.success() || !output.stdout.contains(&format!("ok {check}")) {
        bail!(
            "paho-mqtt check `{check}` failed ({})\n--- stdout\n{}\n--- stderr\n{}",
            output.status,
            output.stdout,
            output.stderr
        );
    }
    Ok(())
}

async fn check(name: &str) -> anyhow::Result<()> {
    let broker = start().await?;
    let result = run_check(&broker, name, false).await;
    broker.shutdown().await;
    result
}

async fn secured_check(name: &str) -> anyhow::Result<()> {
    let broker = start_secured().await?;
    let result = run_check(&broker, name, true).await;
    broker.shutdown().await;
    result
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn mqtt_connack_answers_each_version_and_refuses_unknown_levels() -> anyhow::Result<()> {
    check("connect_versions").await
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn mqtt_wrong_password_is_refused_with_the_version_s_code() -> anyhow::Result<()> {
    secured_check("bad_password").await
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn mqtt_qos_0_1_2_flow_through_wildcard_subscriptions() -> anyhow::Result<()> {
    check("pubsub_qos").await
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn mqtt_and_stomp_exchange_messages_with_the_name_mapping() -> anyhow::Result<()> {
    check("stomp_interop").await
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn mqtt_silent_client_is_closed_after_one_and_a_half_keep_alives() -> anyhow::Result<()> {
    check("keep_alive").await
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn mqtt_malformed_packet_closes_only_its_connection() -> anyhow::Result<()> {
    check("malformed").await
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn mqtt_refused_subscription_gets_its_failure_code_and_the_connection_stays(
) -> anyhow::Result<()> {
    secured_check("authorization").await
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn mqtt_qos_2_resend_before_pubrel_is_published_once() -> anyhow::Result<()> {
    check("qos2_exactly_once").await
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn mqtt_persistent_session_keeps_subscriptions_and_messages() -> anyhow::Result<()> {
    check("persistent_session").await
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn mqtt_5_properties_cross_and_retained_publishes_reach_established_subscribers(
) -> anyhow::Result<()> {
    check("properties_and_retain").await
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn mqtt_retained_messages_are_delivered_on_subscribe_replaced_and_cleared(
) -> anyhow::Result<()> {
    check("retained").await
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn mqtt_5_retain_handling_and_retain_as_published() -> anyhow::Result<()> {
    check("retain_options").await
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn mqtt_retained_messages_survive_a_restart_on_the_journal() -> anyhow::Result<()> {
    let data = tempfile::tempdir()?;
    let journal = |config: &mut conf::Config| {
        config.transport.connectors = vec!["mqtt://127.0.0.1:0".parse().expect("a valid URI")];
        config.store.kind = conf::StoreKind::Journal;
        config.broker.data_dir = data.path().to_path_buf();
    };
    let broker = tests::start_broker(journal).await?;
    let published = run_check(&broker, "retained_publish", false).await;
    broker.shutdown().await;
    published?;
    let broker = tests::start_broker(journal).await?;
    let result = run_check(&broker, "retained_after_restart", false).await;
    broker.shutdown().await;
    result
}

/// The bodies of the retained messages the store holds, in store order.
fn stored_retained(store: &dyn store::MessageStore) -> anyhow::Result<Vec<String>> {
    let page = store.read_page(&broker::core::retained::store_queue(), None, 100)?;
    Ok(page
        .iter()
        .map(|stored| String::from_utf8_lossy(&stored.message.body).into_owned())
        .collect())
}

/// A replacement is one unit of work, `AddMessage(new)` + `Ack(old)`: a store that refuses
/// the unit (here: every unit holding an ack fails, applying nothing) leaves the old message
/// alone, never both. Two units would have left the new message added and the old one not
/// removed: a crash between them, two retained messages. Also: a STOMP SEND with
/// `ActiveMQ.Retain: true` retains as an MQTT PUBLISH does.
#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn mqtt_retained_replacement_is_one_unit_of_work() -> anyhow::Result<()> {
    let store = Arc::new(tests::ControlledStore::new());
    let broker = tests::start_broker_with_store(store.clone(), |_| {}).await?;
    let retain = [("ActiveMQ.Retain", "true")];
    let stomp = tests::connect(&broker).await?;
    stomp.send_with_receipt("/topic/retained.unit", "first", &retain).await?;
    anyhow::ensure!(stored_retained(&*store)? == ["first"], "{:?}", stored_retained(&*store)?);
    store.set_acks(tests::Policy::Fail);
    let refused = stomp.send_with_receipt("/topic/retained.unit", "second", &retain).await;
    anyhow::ensure!(refused.is_err(), "a retain the store refused was confirmed");
    anyhow::ensure!(stored_retained(&*store)? == ["first"], "{:?}", stored_retained(&*store)?);
    store.set_acks(tests::Policy::Pass);
    let stomp = tests::connect(&broker).await?;
    stomp.send_with_receipt("/topic/retained.unit", "third", &retain).await?;
    anyhow::ensure!(stored_retained(&*store)? == ["third"], "{:?}", stored_retained(&*store)?);
    broker.shutdown().await;
    Ok(())
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn mqtt_5_topic_aliases_resolve_and_bad_ones_disconnect_with_0x94() -> anyhow::Result<()> {
    check("topic_aliases").await
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn mqtt_5_deliveries_carry_the_identifier_of_the_subscription_they_matched(
) -> anyhow::Result<()> {
    check("subscription_identifiers").await
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn mqtt_connect_with_a_live_client_id_takes_the_session_over() -> anyhow::Result<()> {
    check("take_over").await
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn mqtt_will_is_published_when_the_connection_ends_without_disconnect() -> anyhow::Result<()>
{
    check("will").await
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn mqtt_over_tls_serves_both_versions() -> anyhow::Result<()> {
    let pki = tests::TestPki::get()?;
    let broker = tests::start_broker(|config| {
        config.transport.connectors =
            vec!["mqtt+ssl://127.0.0.1:0".parse().expect("a valid connector URI")];
        pki.configure(config);
    })
    .await?;
    let addr = broker.tls_addr(conf::WireProtocol::Mqtt).context("no mqtt+ssl connector")?;
    let ca = vec!["--ca".to_owned(), pki.path("ca.pem").display().to_string()];
    let result = run_check_at(&broker, addr, "tls", false, &ca).await;
    broker.shutdown().await;
    result
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn mqtt_connections_are_counted_by_protocol() -> anyhow::Result<()> {
    let broker = start().await?;
    let addr = broker.mqtt_addr().context("no MQTT connector")?;
    let mut socket = tokio::net::TcpStream::connect(addr).await?;
    use tokio::io::{AsyncReadExt, AsyncWriteExt};
    // CONNECT, MQTT 3.1.1, clean session, keep alive 60, client id "counted".
    socket.write_all(b"\x10\x13\x00\x04MQTT\x04\x02\x00\x3c\x00\x07counted").await?;
    let mut connack = [0u8; 4];
    tokio::time::timeout(Duration::from_secs(10), socket.read_exact(&mut connack)).await??;
    assert_eq!(connack, [0x20, 0x02, 0x00, 0x00]);
    let admin_addr = broker.admin_addr().context("the admin endpoint is on")?;
    let admin = broker::admin::AdminClient::new(&format!("http://{admin_addr}"))?;
    let stats: broker::admin::BrokerStats = admin.broker().await?;
    assert_eq!(stats.connections.mqtt, 1, "{:?}", stats.connections);
    let metrics = admin.request("GET", "/metrics").await?;
    let text = metrics.body;
    assert!(text.contains("ferromq_connections{protocol=\"mqtt\"} 1"), "{text}");
    drop(socket);
    broker.shutdown().await;
    Ok(())
}

/// A raw MQTT client over `protocol::mqtt`'s codec.
struct RawMqtt {
    socket: tokio::net::TcpStream,
    codec: protocol::mqtt::Codec,
    buffer: bytes::BytesMut,
}

impl RawMqtt {
    /// Connects as `client_id` (3.1.1) and reads the CONNACK.
    async fn connect(
        addr: std::net::SocketAddr,
        client_id: &str,
        clean: bool,
    ) -> anyhow::Result<RawMqtt> {
        let socket = tokio::net::TcpStream::connect(addr).await?;
        let codec = protocol::mqtt::Codec::new(protocol::mqtt::Limits::default());
        let mut client = RawMqtt { socket, codec, buffer: bytes::BytesMut::new() };
        let connect = protocol::mqtt::Connect {
            clean_start: clean,
            keep_alive: 60,
            ..protocol::mqtt::Connect::new(protocol::mqtt::Version::V3_1_1, client_id)
        };
        client.send(connect.into()).await?;
        match client.read().await? {
            protocol::mqtt::Packet::Connack(connack) if !connack.reason.is_error() => Ok(client),
            other => bail!("expected a CONNACK accepting {client_id}, got {other:?}"),
        }
    }

    async fn send(&mut self, packet: protocol::mqtt::Packet) -> anyhow::Result<()> {
        use tokio::io::AsyncWriteExt;
        let mut bytes = bytes::BytesMut::new();
        self.codec.encode(&packet, &mut bytes)?;
        self.socket.write_all(&bytes).await?;
        Ok(())
    }

    /// The next packet, within [`tests::ARRIVES`].
    async fn read(&mut self) -> anyhow::Result<protocol::mqtt::Packet> {
        tokio::time::timeout(tests::ARRIVES, self.next())
            .await
            .context("no packet from the broker in time")?
    }

    async fn next(&mut self) -> anyhow::Result<protocol::mqtt::Packet> {
        use tokio::io::AsyncReadExt;
        loop {
            if let Some(packet) = self.codec.decode(&mut self.buffer)? {
                return Ok(packet);
            }
            if self.socket.read_buf(&mut self.buffer).await? == 0 {
                bail!("the broker closed the connection");
            }
        }
    }

    /// Fails if a packet arrives within [`tests::QUIET`].
    async fn expect_nothing(&mut self) -> anyhow::Result<()> {
        match tokio::time::timeout(tests::QUIET, self.next()).await {
            Err(_) => Ok(()),
            Ok(packet) => bail!("expected nothing yet, got {packet:?}"),
        }
    }
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn mqtt_puback_and_pubrec_wait_until_the_store_made_the_message_durable() -> anyhow::Result<()>
{
    use protocol::mqtt::{
        Packet, PubAck, Publish, QoS, Subscribe, Subscription, SubscriptionOptions,
    };
    let store = Arc::new(tests::ControlledStore::new());
    let broker = tests::start_broker_with_store(store.clone(), |config| {
        config.transport.connectors = vec!["mqtt://127.0.0.1:0".parse().expect("a valid URI")];
    })
    .await?;
    let addr = broker.mqtt_addr().context("no MQTT connector")?;
    // A persistent session's QoS 1 subscription is a durable subscription: what it is sent
    // is stored.
    let mut subscriber = RawMqtt::connect(addr, "durable-subscriber", false).await?;
    let filter = Subscription {
        filter: "held/#".into(),
        options: SubscriptionOptions::qos(QoS::AtLeastOnce),
    };
    subscriber
        .send(
            Subscribe { packet_id: 1, filters: vec![filter], properties: Default::default() }
                .into(),
        )
        .await?;
    let suback = subscriber.read().await?;
    assert!(matches!(suback, Packet::Suback(_)), "{suback:?}");

    let mut publisher = RawMqtt::connect(addr, "publisher", true).await?;
    for (qos, packet_id) in [(QoS::AtLeastOnce, 10), (QoS::ExactlyOnce, 11)] {
        store.set_adds(tests::Policy::Hold);
        let publish = Publish { qos, packet_id: Some(packet_id), ..Publish::new("held/a", "kept") };
        publisher.send(publish.into()).await?;
        store.wait_held(1, tests::ARRIVES).await?;
        publisher.expect_nothing().await?;
        store.release().await;
        let expected = match qos {
            QoS::ExactlyOnce => Packet::Pubrec(PubAck::new(packet_id)),
            _ => Packet::Puback(PubAck::new(packet_id)),
        };
        assert_eq!(publisher.read().await?, expected);
        store.set_adds(tests::Policy::Pass);
    }
    publisher.send(Packet::Pubrel(PubAck::new(11))).await?;
    assert_eq!(publisher.read().await?, Packet::Pubcomp(PubAck::new(11)));
    for _ in 0..2 {
        let delivery = subscriber.read().await?;
        assert!(
            matches!(&delivery, Packet::Publish(p) if p.qos == QoS::AtLeastOnce && &p.payload[..] == b"kept"),
            "{delivery:?}"
        );
    }
    broker.shutdown().await;
    Ok(())
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn mqtt_unacknowledged_delivery_comes_back_with_dup_to_the_resumed_session(
) -> anyhow::Result<()> {
    use protocol::mqtt::{
        Packet, PubAck, Publish, QoS, Subscribe, Subscription, SubscriptionOptions, Unsubscribe,
    };
    let broker = start().await?;
    let addr = broker.mqtt_addr().context("no MQTT connector")?;
    let subscribe = |filter: &str, qos| {
        let filter = Subscription { filter: filter.into(), options: SubscriptionOptions::qos(qos) };
        Packet::Subscribe(Subscribe {
            packet_id: 1,
            filters: vec![filter],
            properties: Default::default(),
        })
    };
    let mut first = RawMqtt::connect(addr, "resumed", false).await?;
    first.send(subscribe("dup/#", QoS::ExactlyOnce)).await?;
    assert!(matches!(first.read().await?, Packet::Suback(_)));
    let mut publisher = RawMqtt::connect(addr, "dup-publisher", true).await?;
    let publish =
        Publish { qos: QoS::AtLeastOnce, packet_id: Some(1), ..Publish::new("dup/a", "again") };
    publisher.send(publish.into()).await?;
    assert_eq!(publisher.read().await?, Packet::Puback(PubAck::new(1)));
    let Packet::Publish(delivered) = first.read().await? else { bail!("expected a PUBLISH") };
    assert_eq!(
        (delivered.qos, delivered.dup, &delivered.payload[..]),
        (QoS::AtLeastOnce, false, &b"again"[..])
    );
    // Gone without a PUBACK (and without DISCONNECT): the message waits in the session.
    drop(first);
    // The broker lets the client id go once it has seen the socket close; until then the
    // CONNECT is refused (the session is not taken over from a live connection).
    let resume = async {
        loop {
            if let Ok(client) = RawMqtt::connect(addr, "resumed", false).await {
                return client;
            }
            tokio::task::yield_now().await;
        }
    };
    let mut again =
        tokio::time::timeout(tests::ARRIVES, resume).await.context("the session did not resume")?;
    let Packet::Publish(redelivered) = again.read().await? else { bail!("expected a PUBLISH") };
    assert_eq!(
        (redelivered.qos, redelivered.dup, &redelivered.payload[..]),
        (QoS::AtLeastOnce, true, &b"again"[..])
    );
    let packet_id = redelivered.packet_id.context("a QoS 1 PUBLISH has a packet id")?;
    again.send(Packet::Puback(PubAck::new(packet_id))).await?;
    // UNSUBSCRIBE ends the durable subscription: nothing more is kept or delivered for it.
    again
        .send(Packet::Unsubscribe(Unsubscribe {
            packet_id: 2,
            filters: vec!["dup/#".into()],
            properties: Default::default(),
        }))
        .await?;
    assert!(matches!(again.read().await?, Packet::Unsuback(u) if u.packet_id == 2));
    let publish =
        Publish { qos: QoS::AtLeastOnce, packet_id: Some(2), ..Publish::new("dup/b", "unwanted") };
    publisher.send(publish.into()).await?;
    assert_eq!(publisher.read().await?, Packet::Puback(PubAck::new(2)));
    again.expect_nothing().await?;
    broker.shutdown().await;
    Ok(())
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn mqtt_shared_subscriptions_give_each_message_to_one_member_of_the_group(
) -> anyhow::Result<()> {
    check("shared_subscriptions").await
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn mqtt_shared_subscription_member_leaving_hands_its_unacknowledged_messages_on(
) -> anyhow::Result<()> {
    check("shared_redelivery").await
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn mqtt_shared_subscription_keeps_messages_for_a_persistent_member_away() -> anyhow::Result<()>
{
    check("shared_persistent_member").await
}

/// The client ids of the session records `broker`'s store holds.
fn stored_sessions(broker: &BrokerHandle) -> anyhow::Result<Vec<String>> {
    let page = broker.store().read_page(&broker::core::sessions::store_queue(), None, 1000)?;
    Ok(page
        .iter()
        .filter_map(|stored| match stored.message.properties.get("clientId") {
            Some(store::PropertyValue::String(id)) => Some(id.to_string()),
            _ => None,
        })
        .collect())
}

/// Waits until the session of `client_id` is gone from the store and from the core (its
/// durable subscriptions removed); fails if that happened before `at_least` had passed.
async fn wait_session_expired(
    broker: &BrokerHandle,
    client_id: &str,
    filter: &str,
    since: std::time::Instant,
    at_least: Duration,
) -> anyhow::Result<()> {
    let name = format!("AT_LEAST_ONCE:{filter}");
    let deadline = std::time::Instant::now() + Duration::from_secs(15);
    loop {
        let stored = stored_sessions(broker)?.iter().any(|id| id == client_id);
        let durable = broker.durable_subscription_stats(client_id, &name).await.is_some();
        if !stored && !durable {
            break;
        }
        if std::time::Instant::now() > deadline {
            bail!("the session of {client_id} did not expire (record {stored}, durable {durable})");
        }
        tokio::time::sleep(Duration::from_millis(50)).await;
    }
    anyhow::ensure!(since.elapsed() >= at_least, "the session expired before its interval");
    Ok(())
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn mqtt_5_session_ends_once_its_expiry_interval_has_passed() -> anyhow::Result<()> {
    let broker = start().await?;
    let mqtt = broker.mqtt_addr().context("no MQTT connector")?;
    let client_id = format!("expiring-{}", std::process::id());
    let extra = ["--client-id".to_owned(), client_id.clone()];
    let result = async {
        run_check_at(&broker, mqtt, "session_expiry_start", false, &extra).await?;
        let ended = std::time::Instant::now();
        let filter = format!("ferromq/expiry/{client_id}");
        // 2 s from the last disconnect, less what the check took after it.
        wait_session_expired(&broker, &client_id, &filter, ended, Duration::from_millis(500))
            .await?;
        run_check_at(&broker, mqtt, "session_expiry_gone", false, &extra).await
    }
    .await;
    broker.shutdown().await;
    result
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn mqtt_5_session_expiry_of_0_and_disconnect_s_interval() -> anyhow::Result<()> {
    check("session_expiry_disconnect").await
}

/// Across a restart on the journal: a 2 s session expires although the broker was down when
/// it should have (its record says when its connection ended); a 3600 s one is resumed with
/// its subscription's identifier, No Local and Retain As Published.
#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn mqtt_5_session_expiry_and_options_survive_a_restart_on_the_journal() -> anyhow::Result<()>
{
    let data = tempfile::tempdir()?;
    let journal = |config: &mut conf::Config| {
        config.transport.connectors = vec!["mqtt://127.0.0.1:0".parse().expect("a valid URI")];
        config.store.kind = conf::StoreKind::Journal;
        config.broker.data_dir = data.path().to_path_buf();
    };
    let client_id = format!("restarted-{}", std::process::id());
    let extra = ["--client-id".to_owned(), client_id.clone()];
    let broker = tests::start_broker(journal).await?;
    let mqtt = broker.mqtt_addr().context("no MQTT connector")?;
    let before = run_check_at(&broker, mqtt, "session_restart_before", false, &extra).await;
    let ended = std::time::Instant::now();
    broker.shutdown().await;
    before?;
    let broker = tests::start_broker(journal).await?;
    let mqtt = broker.mqtt_addr().context("no MQTT connector")?;
    let result = async {
        let short = format!("{client_id}-short");
        let filter = format!("ferromq/restart/{client_id}");
        wait_session_expired(&broker, &short, &filter, ended, Duration::from_millis(1000)).await?;
        anyhow::ensure!(
            stored_sessions(&broker)?.contains(&client_id),
            "the long session's record is gone"
        );
        run_check_at(&broker, mqtt, "session_restart_short_gone", false, &extra).await?;
        run_check_at(&broker, mqtt, "resumed_options", false, &extra).await
    }
    .await;
    broker.shutdown().await;
    result
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn mqtt_5_resumed_session_keeps_subscription_identifiers_and_options() -> anyhow::Result<()> {
    check("resumed_options").await
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn mqtt_5_will_delay_interval_holds_the_will_until_delay_or_session_end() -> anyhow::Result<()>
{
    check("will_delay").await
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn mqtt_5_enhanced_authentication_is_refused() -> anyhow::Result<()> {
    check("enhanced_auth").await
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn mqtt_5_receive_maximum_bounds_the_connection_both_ways() -> anyhow::Result<()> {
    check("receive_maximum").await
}
