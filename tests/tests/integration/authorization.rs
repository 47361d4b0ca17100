//! Per-destination rights (`[[authorization]]`, ActiveMQ's `authorizationMap`) with real
//! clients: stomp.py, Qpid Proton and the ActiveMQ JMS client are refused reads, writes and
//! creations their groups lack, with their protocol's security error, and nothing is stored
//! or delivered for them; what their groups may do works.
//!
//! Users: `writer` (group writers), `reader` (group readers), `boss` (group admins).
//! Rights: queues `AUTHZ.>`: read for everyone, write for writers, create for admins; advisory topics for everyone; temporary destinations: read and write for writers,
//! create for admins.

use anyhow::{bail, ensure, Context};
use broker::BrokerHandle;
use client::{AckMode, ConnectOptions, StompClient};
use protocol::stomp::{Command, Frame};
use tests::RawConnection;

use crate::tls::{python_check, PyClient};

const PASSWORD: &str = "password";

fn entry(
    covers: (&str, &str),
    read: &[&str],
    write: &[&str],
    admin: &[&str],
) -> conf::AuthorizationEntry {
    let groups = |names: &[&str]| names.iter().map(|name| name.to_string()).collect();
    let mut entry = conf::AuthorizationEntry {
        read: groups(read),
        write: groups(write),
        admin: groups(admin),
        ..Default::default()
    };
    match covers {
        ("queue", pattern) => entry.queue = Some(pattern.to_owned()),
        ("topic", pattern) => entry.topic = Some(pattern.to_owned()),
        _ => entry.temp = true,
    }
    entry
}

async fn start() -> anyhow::Result<BrokerHandle> {
    let hash = broker::security::hash_password(PASSWORD).map_err(anyhow::Error::msg)?;
    let everyone = ["writers", "readers", "admins"];
    tests::start_broker(|config| {
        config.transport.connectors =
            ["stomp://127.0.0.1:0", "tcp://127.0.0.1:0", "amqp://127.0.0.1:0"]
                .iter()
                .map(|uri| uri.parse().expect("a valid connector URI"))
                .collect();
        config.authentication.enabled = true;
        config.users = [("writer", "writers"), ("reader", "readers"), ("boss", "admins")]
            .iter()
            .map(|(name, group)| conf::UserEntry {
                name: name.to_string(),
                password: hash.clone(),
                groups: vec![group.to_string()],
            })
            .collect();
        config.authorization = vec![
            entry(("queue", "AUTHZ.>"), &everyone, &["writers"], &["admins"]),
            entry(("topic", "ActiveMQ.Advisory.>"), &everyone, &everyone, &everyone),
            entry(("temp", ""), &["writers"], &["writers"], &["admins"]),
        ];
    })
    .await
}

async fn stomp(broker: &BrokerHandle, user: &str) -> anyhow::Result<StompClient> {
    let options = ConnectOptions {
        login: Some(user.to_owned()),
        passcode: Some(PASSWORD.to_owned()),
        ..Default::default()
    };
    Ok(StompClient::connect(tests::stomp_addr(broker)?, options).await?)
}

/// A STOMP frame from `user` that must be refused with an ERROR naming `expected`.
async fn stomp_refused(
    broker: &BrokerHandle,
    user: &str,
    frame: Frame,
    expected: &str,
) -> anyhow::Result<()> {
    let (mut raw, _) = RawConnection::connect(
        tests::stomp_addr(broker)?,
        &[("login", user), ("passcode", PASSWORD)],
    )
    .await?;
    raw.write_frame(&frame).await?;
    let error = raw.expect_error_then_close().await?;
    let message = error.get("message").unwrap_or("");
    ensure!(message.contains(expected), "expected `{expected}`, got {error:?}");
    Ok(())
}

/// Creates queue `name` as the admin, empty.
async fn create_queue(broker: &BrokerHandle, name: &str) -> anyhow::Result<()> {
    let boss = stomp(broker, "boss").await?;
    let subscription = boss.subscribe(&format!("/queue/{name}"), AckMode::Auto, &[]).await?;
    drop(subscription);
    boss.disconnect().await?;
    ensure!(broker.queue_stats(name).await.is_some(), "the admin did not create {name}");
    Ok(())
}

fn send(destination: &str) -> Frame {
    let mut frame =
        Frame::new(Command::Send).header("destination", destination).header("receipt", "r");
    frame.body = bytes::Bytes::from_static(b"forged");
    frame
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn stomp_clients_get_only_the_rights_of_their_groups() -> anyhow::Result<()> {
    let broker = start().await?;
    // Creating takes the admin right.
    stomp_refused(
        &broker,
        "writer",
        send("/queue/AUTHZ.NEW"),
        "User writer is not authorized to create: queue://AUTHZ.NEW",
    )
    .await?;
    ensure!(broker.queue_stats("AUTHZ.NEW").await.is_none(), "the refused send created the queue");
    create_queue(&broker, "AUTHZ.ORDERS").await?;
    // Writing takes the write right...
    stomp_refused(
        &broker,
        "reader",
        send("/queue/AUTHZ.ORDERS"),
        "User reader is not authorized to write to: queue://AUTHZ.ORDERS",
    )
    .await?;
    // ...reading the read right, and nothing covers OTHER.Q.
    let subscribe =
        Frame::new(Command::Subscribe).header("destination", "/queue/OTHER.Q").header("id", "1");
    stomp_refused(
        &broker,
        "writer",
        subscribe,
        "User writer is not authorized to read from: queue://OTHER.Q",
    )
    .await?;
    // A temporary queue takes the temp admin right.
    let temporary = Frame::new(Command::Subscribe)
        .header("destination", "/temp-queue/replies")
        .header("id", "1");
    stomp_refused(&broker, "writer", temporary, "not authorized to create: temp-queue://").await?;
    // What the groups may do works, and only the genuine message is there.
    let reader = stomp(&broker, "reader").await?;
    let mut orders = reader.subscribe("/queue/AUTHZ.ORDERS", AckMode::Auto, &[]).await?;
    let writer = stomp(&broker, "writer").await?;
    writer.send_with_receipt("/queue/AUTHZ.ORDERS", "genuine", &[]).await?;
    let message = tests::recv(&mut orders).await?;
    ensure!(&message.body()[..] == b"genuine", "got {:?}", message.body());
    tests::assert_nothing_arrives(&mut orders).await?;
    broker.shutdown().await;
    Ok(())
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn stomp_py_and_qpid_proton_are_refused_what_their_groups_lack() -> anyhow::Result<()> {
    let broker = start().await?;
    create_queue(&broker, "AUTHZ.PY").await?;
    let stomp_port = tests::stomp_addr(&broker)?.port();
    let amqp_port = broker.amqp_addr().context("no AMQP connector")?.port();
    let client = |user: &'static str, queue: &'static str| PyClient {
        tls: false,
        identity: None,
        login: Some((user, PASSWORD)),
        queue: Some(queue),
    };
    python_check("stomp_send", stomp_port, client("reader", "AUTHZ.PY"), true).await?;
    python_check("stomp_subscribe", stomp_port, client("writer", "OTHER.PY"), true).await?;
    python_check("stomp_send", stomp_port, client("writer", "AUTHZ.FRESH"), true).await?;
    python_check("amqp_send", amqp_port, client("reader", "AUTHZ.PY"), true).await?;
    python_check("amqp_receive", amqp_port, client("writer", "OTHER.PY"), true).await?;
    python_check("amqp_send", amqp_port, client("writer", "AUTHZ.FRESH"), true).await?;
    ensure!(broker.queue_stats("AUTHZ.FRESH").await.is_none(), "a refused send created a queue");
    ensure!(tests::stored_count(&broker, "AUTHZ.PY")? == 0, "a refused send was stored");
    // Allowed: the writer sends over each protocol, the reader reads.
    python_check("stomp_send", stomp_port, client("writer", "AUTHZ.PY"), false).await?;
    python_check("amqp_send", amqp_port, client("writer", "AUTHZ.PY"), false).await?;
    python_check("amqp_receive", amqp_port, client("reader", "AUTHZ.PY"), false).await?;
    python_check("stomp_subscribe", stomp_port, client("reader", "AUTHZ.PY"), false).await?;
    broker.shutdown().await;
    Ok(())
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn activemq_jms_client_gets_security_exceptions_for_what_its_groups_lack(
) -> anyhow::Result<()> {
    let classpath = crate::jms::classpath()?;
    let broker = start().await?;
    create_queue(&broker, "AUTHZ.WRITE.DENIED").await?;
    let addr = broker.openwire_addr().context("no OpenWire connector")?;
    let url = format!("tcp://{addr}?jms.userName=reader&jms.password={PASSWORD}");
    tokio::task::block_in_place(|| {
        crate::jms::run_java_check_with(&classpath, &[], &url, "authorization_refused", &mut || {
            bail!("this check never restarts the broker")
        })
    })?;
    ensure!(tests::stored_count(&broker, "AUTHZ.WRITE.DENIED")? == 0, "a refused send was stored");
    ensure!(
        broker.queue_stats("AUTHZ.CREATE.DENIED").await.is_none(),
        "a refused consumer created a queue"
    );
    broker.shutdown().await;
    Ok(())
}
