//! Logins (`[authentication]`, `[[users]]` with Argon2 hashes) with real clients: stomp.py
//! (`login`/`passcode`), Qpid Proton (SASL PLAIN and ANONYMOUS) and the ActiveMQ JMS client
//! (`jms.userName`/`jms.password`, refused with `JMSSecurityException`): right credentials
//! get in; a wrong password, an unknown user and an anonymous client where anonymous access
//! is off are refused, and nothing they sent is stored or delivered; a user that fails too
//! often from an address is refused at once for a while, however many logins it sends at
//! once, while other users of the address get in.

use std::time::Duration;

use anyhow::{bail, ensure, Context};
use broker::BrokerHandle;
use client::{AckMode, ConnectOptions, StompClient};
use protocol::stomp::{Command, Frame};
use tests::{RawConnection, ARRIVES};

use crate::tls::{python_check, PyClient};

const USER: &str = "alice";
const PASSWORD: &str = "wonderland";

/// A broker checking logins, with user alice (password wonderland) in group users, and
/// connectors for `connectors`.
async fn start(
    connectors: &[&str],
    configure: impl FnOnce(&mut conf::Config),
) -> anyhow::Result<BrokerHandle> {
    let hash = broker::security::hash_password(PASSWORD).map_err(anyhow::Error::msg)?;
    tests::start_broker(|config| {
        config.transport.connectors =
            connectors.iter().map(|uri| uri.parse().expect("a valid connector URI")).collect();
        config.authentication.enabled = true;
        config.users = vec![conf::UserEntry {
            name: USER.to_owned(),
            password: hash,
            groups: vec!["users".to_owned()],
        }];
        configure(config);
    })
    .await
}

fn plain(login: Option<(&'static str, &'static str)>) -> PyClient<'static> {
    PyClient { tls: false, identity: None, login, queue: None }
}

fn login(user: &str, password: &str) -> ConnectOptions {
    ConnectOptions {
        login: Some(user.to_owned()),
        passcode: Some(password.to_owned()),
        ..Default::default()
    }
}

/// Retries alice's right password until the failed-login window has passed, at most `wait`.
async fn logs_in_once_the_window_passes(
    addr: std::net::SocketAddr,
    wait: Duration,
) -> anyhow::Result<()> {
    let deadline = tokio::time::Instant::now() + wait;
    loop {
        match StompClient::connect(addr, login(USER, PASSWORD)).await {
            Ok(client) => {
                client.disconnect().await?;
                break;
            }
            Err(_) if tokio::time::Instant::now() < deadline => {
                tokio::time::sleep(Duration::from_millis(250)).await
            }
            Err(error) => bail!("still refused after the window: {error}"),
        }
    }
    Ok(())
}

/// What a refused STOMP CONNECT gets: an ERROR frame, then the close.
async fn stomp_refusal(broker: &BrokerHandle, headers: &[(&str, &str)]) -> anyhow::Result<Frame> {
    let mut connection = RawConnection::open(tests::stomp_addr(broker)?).await?;
    let mut connect = Frame::new(Command::Connect).header("accept-version", "1.2");
    for (name, value) in headers {
        connect.push_header(*name, *value);
    }
    connection.write_frame(&connect).await?;
    connection.expect_error_then_close().await
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn stomp_py_gets_in_with_the_right_password_only() -> anyhow::Result<()> {
    let broker = start(&["stomp://127.0.0.1:0"], |_| {}).await?;
    let port = tests::stomp_addr(&broker)?.port();
    python_check("stomp", port, plain(Some((USER, PASSWORD))), false).await?;
    python_check("stomp", port, plain(Some((USER, "guess"))), true).await?;
    python_check("stomp", port, plain(Some(("mallory", PASSWORD))), true).await?;
    python_check("stomp", port, plain(None), true).await?;
    let refused = stomp_refusal(&broker, &[("login", USER), ("passcode", "guess")]).await?;
    ensure!(
        refused.get("message") == Some("User name [alice] or password is invalid."),
        "{refused:?}"
    );
    let anonymous = stomp_refusal(&broker, &[]).await?;
    ensure!(anonymous
        .get("message")
        .is_some_and(|m| m.contains("anonymous access is not allowed")));
    broker.shutdown().await;
    Ok(())
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn qpid_proton_gets_in_with_sasl_plain_and_the_right_password_only() -> anyhow::Result<()> {
    let broker = start(&["amqp://127.0.0.1:0"], |_| {}).await?;
    let port = broker.amqp_addr().context("no AMQP connector")?.port();
    python_check("amqp", port, plain(Some((USER, PASSWORD))), false).await?;
    python_check("amqp", port, plain(Some((USER, "guess"))), true).await?;
    python_check("amqp", port, plain(Some(("mallory", PASSWORD))), true).await?;
    // Without credentials Proton chooses SASL ANONYMOUS.
    python_check("amqp", port, plain(None), true).await?;
    broker.shutdown().await;
    Ok(())
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn activemq_jms_client_gets_in_with_the_right_password_only() -> anyhow::Result<()> {
    let classpath = crate::jms::classpath()?;
    let broker = start(&["tcp://127.0.0.1:0"], |_| {}).await?;
    let addr = broker.openwire_addr().context("no OpenWire connector")?;
    let never = &mut || bail!("this check never restarts the broker");
    let right = format!("tcp://{addr}?jms.userName={USER}&jms.password={PASSWORD}");
    let wrong = format!("tcp://{addr}?jms.userName={USER}&jms.password=guess");
    let unknown = format!("tcp://{addr}?jms.userName=mallory&jms.password={PASSWORD}");
    let anonymous = format!("tcp://{addr}");
    tokio::task::block_in_place(|| -> anyhow::Result<()> {
        crate::jms::run_java_check_with(&classpath, &[], &right, "queue_send_receive", never)?;
        for url in [&wrong, &unknown, &anonymous] {
            crate::jms::run_java_check_with(&classpath, &[], url, "login_refused", never)
                .with_context(|| format!("with {url}"))?;
        }
        Ok(())
    })?;
    broker.shutdown().await;
    Ok(())
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn anonymous_access_admits_clients_without_credentials_but_not_wrong_ones(
) -> anyhow::Result<()> {
    let broker = start(&["stomp://127.0.0.1:0", "amqp://127.0.0.1:0"], |config| {
        config.authentication.anonymous_access = true;
    })
    .await?;
    let stomp = tests::stomp_addr(&broker)?.port();
    let amqp = broker.amqp_addr().context("no AMQP connector")?.port();
    python_check("stomp", stomp, plain(None), false).await?;
    python_check("stomp", stomp, plain(Some((USER, "guess"))), true).await?;
    python_check("amqp", amqp, plain(None), false).await?;
    python_check("amqp", amqp, plain(Some((USER, PASSWORD))), false).await?;
    broker.shutdown().await;
    Ok(())
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn frames_sent_behind_a_refused_connect_change_nothing() -> anyhow::Result<()> {
    let broker = start(&["stomp://127.0.0.1:0"], |_| {}).await?;
    let addr = tests::stomp_addr(&broker)?;
    // CONNECT with a wrong password and a SEND in the same write: the SEND must never act.
    let mut intruder = RawConnection::open(addr).await?;
    let mut bytes = Vec::new();
    bytes.extend_from_slice(b"CONNECT\naccept-version:1.2\nlogin:alice\npasscode:guess\n\n\0");
    bytes.extend_from_slice(b"SEND\ndestination:/queue/guarded\n\nforged\0");
    intruder.write_bytes(&bytes).await?;
    intruder.expect_error_then_close().await?;
    // The same with the right password: the SEND behind the CONNECT goes through.
    let mut friend = RawConnection::open(addr).await?;
    let mut bytes = Vec::new();
    bytes.extend_from_slice(b"CONNECT\naccept-version:1.2\nlogin:alice\npasscode:wonderland\n\n\0");
    bytes.extend_from_slice(b"SEND\ndestination:/queue/guarded\n\ngenuine\0");
    friend.write_bytes(&bytes).await?;
    let connected = friend.read_frame().await?;
    ensure!(connected.command == Command::Connected, "{connected:?}");
    let reader = StompClient::connect(addr, login(USER, PASSWORD)).await?;
    let mut guarded = reader.subscribe("/queue/guarded", AckMode::Auto, &[]).await?;
    let message = tests::recv(&mut guarded).await?;
    ensure!(&message.body()[..] == b"genuine", "got {:?}", message.body());
    tests::assert_nothing_arrives(&mut guarded).await?;
    broker.shutdown().await;
    Ok(())
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn an_address_that_fails_too_often_is_refused_for_a_while() -> anyhow::Result<()> {
    let broker = start(&["stomp://127.0.0.1:0"], |config| {
        config.authentication.max_failures = 2;
        config.authentication.failure_window = Duration::from_secs(2);
    })
    .await?;
    let addr = tests::stomp_addr(&broker)?;
    for _ in 0..2 {
        stomp_refusal(&broker, &[("login", USER), ("passcode", "guess")]).await?;
    }
    // Now even the right password is refused, without being checked...
    let blocked = stomp_refusal(&broker, &[("login", USER), ("passcode", PASSWORD)]).await?;
    ensure!(
        blocked.get("message").is_some_and(|m| m.contains("too many failed logins")),
        "{blocked:?}"
    );
    // ...until the window has passed.
    logs_in_once_the_window_passes(addr, ARRIVES * 2).await?;
    broker.shutdown().await;
    Ok(())
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn a_user_whose_hash_is_not_argon2_stops_the_start() -> anyhow::Result<()> {
    let mut config = tests::test_config();
    config.authentication.enabled = true;
    config.users = vec![conf::UserEntry {
        name: "bob".to_owned(),
        password: "$argon2id$not-a-hash".to_owned(),
        groups: Vec::new(),
    }];
    match broker::Broker::start(config).await {
        Ok(broker) => {
            broker.shutdown().await;
            bail!("the broker started")
        }
        Err(error) => {
            let message = error.to_string();
            ensure!(
                message.contains("`users[0].password` of user `bob` is not a valid Argon2 hash"),
                "{message}"
            );
        }
    }
    Ok(())
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn concurrent_wrong_logins_get_at_most_max_failures_checks_and_spare_other_users(
) -> anyhow::Result<()> {
    const MAX_FAILURES: usize = 5;
    let hash = broker::security::hash_password("bobs-password").map_err(anyhow::Error::msg)?;
    let broker = start(&["stomp://127.0.0.1:0"], |config| {
        config.authentication.max_failures = MAX_FAILURES;
        config.authentication.failure_window = Duration::from_secs(5);
        config.users.push(conf::UserEntry {
            name: "bob".to_owned(),
            password: hash,
            groups: vec!["users".to_owned()],
        });
    })
    .await?;
    let addr = tests::stomp_addr(&broker)?;
    // 200 CONNECTs with a wrong password, all written before any answer is read.
    let mut connections = Vec::new();
    for _ in 0..200 {
        connections.push(RawConnection::open(addr).await?);
    }
    let connect = Frame::new(Command::Connect)
        .header("accept-version", "1.2")
        .header("login", USER)
        .header("passcode", "guess");
    for connection in &mut connections {
        connection.write_frame(&connect).await?;
    }
    let mut answers = tokio::task::JoinSet::new();
    for mut connection in connections {
        answers.spawn(async move {
            let error = connection.expect_error_then_close().await?;
            anyhow::Ok(error.get("message").unwrap_or_default().to_owned())
        });
    }
    let mut messages = Vec::new();
    while let Some(answer) = answers.join_next().await {
        messages.push(answer??);
    }
    // Only refusals after a real check say the password is invalid; the rest were refused
    // before it.
    let checked = messages.iter().filter(|m| m.contains("or password is invalid")).count();
    let limited = messages.iter().filter(|m| m.contains("too many failed logins")).count();
    ensure!(
        (1..=MAX_FAILURES).contains(&checked) && checked + limited == messages.len(),
        "{checked} password checks, {limited} refused by the limit, of {}: {:?}",
        messages.len(),
        messages.iter().find(|m| !m.contains("or password is invalid") && !m.contains("too many"))
    );
    // The right password is refused now, without a check...
    let blocked = stomp_refusal(&broker, &[("login", USER), ("passcode", PASSWORD)]).await?;
    ensure!(
        blocked.get("message").is_some_and(|m| m.contains("too many failed logins")),
        "{blocked:?}"
    );
    // ...while another user from the same address logs in.
    let bob = StompClient::connect(addr, login("bob", "bobs-password")).await?;
    bob.disconnect().await?;
    // Once the window has passed, the right password works again.
    logs_in_once_the_window_passes(addr, ARRIVES * 3).await?;
    broker.shutdown().await;
    Ok(())
}
