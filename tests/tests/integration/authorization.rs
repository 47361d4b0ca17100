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

/// Users `guest` (group guests: queues and topics `PUBLIC.>`) and `boss` (group admins:
/// everything); advisory topics for everyone. Queue SECRET.PAYROLL holds three messages.
async fn start_with_secrets() -> anyhow::Result<BrokerHandle> {
    let hash = broker::security::hash_password(PASSWORD).map_err(anyhow::Error::msg)?;
    let all = ["guests", "admins"];
    let broker = tests::start_broker(|config| {
        config.transport.connectors =
            ["stomp://127.0.0.1:0", "tcp://127.0.0.1:0", "amqp://127.0.0.1:0"]
                .iter()
                .map(|uri| uri.parse().expect("a valid connector URI"))
                .collect();
        config.authentication.enabled = true;
        config.users = [("guest", "guests"), ("boss", "admins")]
            .iter()
            .map(|(name, group)| conf::UserEntry {
                name: name.to_string(),
                password: hash.clone(),
                groups: vec![group.to_string()],
            })
            .collect();
        let admins = ["admins"];
        let guests = ["guests"];
        config.authorization = vec![
            entry(("queue", ">"), &admins, &admins, &admins),
            entry(("topic", ">"), &admins, &admins, &admins),
            entry(("queue", "PUBLIC.>"), &guests, &guests, &guests),
            entry(("topic", "PUBLIC.>"), &guests, &guests, &guests),
            entry(("topic", "ActiveMQ.Advisory.>"), &all, &all, &all),
            entry(("temp", ""), &all, &all, &all),
        ];
    })
    .await?;
    let boss = stomp(&broker, "boss").await?;
    for index in 0..3 {
        let body = format!("salary {index}");
        boss.send_with_receipt("/queue/SECRET.PAYROLL", body, &[tests::PERSISTENT]).await?;
    }
    boss.disconnect().await?;
    Ok(broker)
}

/// What must still hold after every refused composite: the secret queue kept its three
/// messages, and no queue outside PUBLIC was created.
async fn secrets_untouched(broker: &BrokerHandle) -> anyhow::Result<()> {
    let payroll = broker.queue_stats("SECRET.PAYROLL").await.context("SECRET.PAYROLL is gone")?;
    let held = payroll.ready + payroll.in_flight;
    ensure!(held == 3 && payroll.acked == 0, "SECRET.PAYROLL holds {held} messages, not 3");
    ensure!(tests::stored_count(broker, "SECRET.PAYROLL")? == 3, "the stored secrets changed");
    for name in ["EVIL.NEW", "SECRET.Q"] {
        ensure!(broker.queue_stats(name).await.is_none(), "a refused composite created {name}");
    }
    Ok(())
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn stomp_composites_are_authorized_part_by_part() -> anyhow::Result<()> {
    let broker = start_with_secrets().await?;
    let subscribe = |destination: &str| {
        Frame::new(Command::Subscribe).header("destination", destination).header("id", "1")
    };
    let refusals = [
        ("/queue/PUBLIC.A,SECRET.PAYROLL", "queue://SECRET.PAYROLL"),
        ("/queue/SECRET.PAYROLL,PUBLIC.A", "queue://SECRET.PAYROLL"),
        ("/queue/PUBLIC.A,topic://SECRET.T", "topic://SECRET.T"),
        ("/topic/PUBLIC.X,SECRET.T", "topic://SECRET.T"),
        ("/topic/PUBLIC.X,queue://SECRET.Q", "queue://SECRET.Q"),
    ];
    for (destination, part) in refusals {
        let expected = format!("User guest is not authorized to read from: {part}");
        stomp_refused(&broker, "guest", subscribe(destination), &expected).await?;
        let expected = format!("User guest is not authorized to write to: {part}");
        stomp_refused(&broker, "guest", send(destination), &expected).await?;
    }
    // Creating through a composite takes the admin right of the new part.
    let expected = "User guest is not authorized to";
    stomp_refused(&broker, "guest", send("/queue/PUBLIC.A,EVIL.NEW"), expected).await?;
    stomp_refused(&broker, "guest", subscribe("/queue/PUBLIC.A,EVIL.NEW"), expected).await?;
    secrets_untouched(&broker).await?;
    // A composite whose every part is allowed works, for sending and for reading.
    let guest = stomp(&broker, "guest").await?;
    let mut both = guest.subscribe("/queue/PUBLIC.A,PUBLIC.B", AckMode::Auto, &[]).await?;
    guest.send_with_receipt("/queue/PUBLIC.A,PUBLIC.B", "public", &[]).await?;
    for _ in 0..2 {
        let message = tests::recv(&mut both).await?;
        ensure!(&message.body()[..] == b"public", "got {:?}", message.body());
    }
    broker.shutdown().await;
    Ok(())
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn stomp_py_and_qpid_proton_composites_are_authorized_part_by_part() -> anyhow::Result<()> {
    let broker = start_with_secrets().await?;
    let stomp_port = tests::stomp_addr(&broker)?.port();
    let amqp_port = broker.amqp_addr().context("no AMQP connector")?.port();
    let guest = |queue: &'static str| PyClient {
        tls: false,
        identity: None,
        login: Some(("guest", PASSWORD)),
        queue: Some(queue),
    };
    for composite in ["PUBLIC.A,SECRET.PAYROLL", "PUBLIC.A,topic://SECRET.T", "PUBLIC.A,EVIL.NEW"] {
        python_check("stomp_send", stomp_port, guest(composite), true).await?;
        python_check("stomp_subscribe", stomp_port, guest(composite), true).await?;
        python_check("amqp_send", amqp_port, guest(composite), true).await?;
        python_check("amqp_send_anonymous", amqp_port, guest(composite), true).await?;
        python_check("amqp_receive", amqp_port, guest(composite), true).await?;
    }
    // ActiveMQ's AMQP addresses name a composite's parts by their prefixes too.
    let qualified = "queue://PUBLIC.A,queue://SECRET.PAYROLL";
    python_check("amqp_receive", amqp_port, guest(qualified), true).await?;
    python_check("amqp_send_anonymous", amqp_port, guest(qualified), true).await?;
    secrets_untouched(&broker).await?;
    // Allowed when every part is.
    python_check("stomp_send", stomp_port, guest("PUBLIC.A,PUBLIC.B"), false).await?;
    python_check("amqp_send", amqp_port, guest("PUBLIC.A,PUBLIC.B"), false).await?;
    python_check("amqp_send_anonymous", amqp_port, guest("PUBLIC.A,PUBLIC.B"), false).await?;
    for name in ["PUBLIC.A", "PUBLIC.B"] {
        ensure!(tests::stored_count(&broker, name)? == 3, "{name} did not get the three sends");
    }
    python_check("amqp_receive", amqp_port, guest("PUBLIC.A,PUBLIC.B"), false).await?;
    python_check("stomp_subscribe", stomp_port, guest("PUBLIC.A,PUBLIC.B"), false).await?;
    broker.shutdown().await;
    Ok(())
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn activemq_jms_client_composites_are_authorized_part_by_part() -> anyhow::Result<()> {
    let classpath = crate::jms::classpath()?;
    let broker = start_with_secrets().await?;
    let addr = broker.openwire_addr().context("no OpenWire connector")?;
    let url = format!("tcp://{addr}?jms.userName=guest&jms.password={PASSWORD}");
    tokio::task::block_in_place(|| {
        crate::jms::run_java_check_with(
            &classpath,
            &[],
            &url,
            "composite_authorization",
            &mut || bail!("this check never restarts the broker"),
        )
    })?;
    secrets_untouched(&broker).await?;
    broker.shutdown().await;
    Ok(())
}
