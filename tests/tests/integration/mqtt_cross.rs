//! MQTT across protocols with real third-party clients on both sides: paho-mqtt (MQTT 3.1.1
//! and 5.0) against the ActiveMQ JMS client (OpenWire), Qpid Proton (AMQP 1.0) and stomp.py
//! (STOMP), both ways, with topics, wildcards, properties and binary payloads, on one broker
//! with MQTT, OpenWire, AMQP and STOMP connectors on ephemeral ports.
//!
//! The Python halves are checks of `tests/python/mqtt_cross_checks.py`, the JMS halves checks
//! of `tests/java/MqttJmsChecks.java` (run with `$FERROMQ_JMS_CLASSPATH`, as in `jms`). The
//! receiving half starts first and prints `ready` once subscribed; the sending half runs
//! then; each prints `ok CHECK` when its part held.

use std::net::SocketAddr;
use std::path::PathBuf;
use std::time::Duration;

use anyhow::{bail, ensure, Context};
use broker::BrokerHandle;

use crate::mosquitto::{Finished, Process};
use crate::stomp_py::{python, repository_root};

/// The longest one half may run; each waits at most 15 s for any one message.
const CHECK_TIMEOUT: Duration = Duration::from_secs(180);

/// One half of an exchange.
#[derive(Clone, Copy)]
enum Half {
    /// A check of `mqtt_cross_checks.py`.
    Python(&'static str),
    /// A check of `MqttJmsChecks.java`.
    Jms(&'static str),
}

struct Addresses {
    mqtt: SocketAddr,
    openwire: SocketAddr,
    amqp: SocketAddr,
    stomp: SocketAddr,
}

impl Half {
    fn name(self) -> &'static str {
        match self {
            Half::Python(name) | Half::Jms(name) => name,
        }
    }

    fn spawn(self, at: &Addresses) -> anyhow::Result<Process> {
        match self {
            Half::Python(check) => {
                let args = [
                    repository_root()
                        .join("tests/python/mqtt_cross_checks.py")
                        .display()
                        .to_string(),
                    "--host".to_owned(),
                    at.mqtt.ip().to_string(),
                    "--port".to_owned(),
                    at.mqtt.port().to_string(),
                    "--amqp-port".to_owned(),
                    at.amqp.port().to_string(),
                    "--stomp-port".to_owned(),
                    at.stomp.port().to_string(),
                    "--check".to_owned(),
                    check.to_owned(),
                ];
                Process::spawn(&python()?, &args)
            }
            Half::Jms(check) => spawn_jms(&format!("tcp://{}", at.openwire), check),
        }
    }
}

/// Starts check `check` of `MqttJmsChecks.java` against the OpenWire connector at `url`.
pub(crate) fn spawn_jms(url: &str, check: &str) -> anyhow::Result<Process> {
    let classpath = crate::jms::classpath()?;
    let args = [
        "-cp".to_owned(),
        classpath,
        "MqttJmsChecks".to_owned(),
        "--url".to_owned(),
        url.to_owned(),
        "--check".to_owned(),
        check.to_owned(),
    ];
    Process::spawn(&PathBuf::from("java"), &args)
}

/// Fails with the transcript unless `finished` exited 0 and reported `ok CHECK`.
pub(crate) fn reported_ok(finished: &Finished, check: &str) -> anyhow::Result<()> {
    let ok = format!("ok {check}");
    ensure!(
        finished.status.success()
            && finished
                .stdout
                .iter()
                .any(|line| line == &ok || line.starts_with(&format!("{ok} "))),
        "check `{check}` failed: {}",
        finished.transcript()
    );
    Ok(())
}

/// Runs `half` to its end.
fn run(half: Half, at: &Addresses) -> anyhow::Result<()> {
    let finished = half.spawn(at)?.finish(CHECK_TIMEOUT)?;
    reported_ok(&finished, half.name())
}

/// Starts `receiver`, waits for its `ready`, runs `sender`, then waits for the receiver.
fn exchange(receiver: Half, sender: Half, at: &Addresses) -> anyhow::Result<()> {
    let mut receiving = receiver.spawn(at)?;
    let line =
        receiving.wait_line(CHECK_TIMEOUT, |line| line == "ready" || line.starts_with("FAIL"))?;
    if line != "ready" {
        let finished = receiving.finish(CHECK_TIMEOUT)?;
        bail!("the receiver failed before it was ready: {}", finished.transcript());
    }
    let sent = run(sender, at);
    let received = receiving.finish(CHECK_TIMEOUT)?;
    sent.with_context(|| format!("the sender; the receiver: {}", received.transcript()))?;
    reported_ok(&received, receiver.name())
}

/// Runs `test` against a broker with MQTT, OpenWire, AMQP and STOMP connectors.
async fn with_broker(test: impl FnOnce(&Addresses) -> anyhow::Result<()>) -> anyhow::Result<()> {
    // Fails early, before a broker starts, when the JMS client is not set up.
    crate::jms::classpath()?;
    let broker = tests::start_broker(|config| {
        config.transport.connectors = ["mqtt", "tcp", "amqp", "stomp"]
            .iter()
            .map(|scheme| format!("{scheme}://127.0.0.1:0").parse().expect("a valid connector URI"))
            .collect();
    })
    .await?;
    let result = addresses(&broker).and_then(|at| tokio::task::block_in_place(|| test(&at)));
    broker.shutdown().await;
    result
}

fn addresses(broker: &BrokerHandle) -> anyhow::Result<Addresses> {
    Ok(Addresses {
        mqtt: broker.mqtt_addr().context("no MQTT connector")?,
        openwire: broker.openwire_addr().context("no OpenWire connector")?,
        amqp: broker.amqp_addr().context("no AMQP connector")?,
        stomp: broker.stomp_addr().context("no STOMP connector")?,
    })
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn mqtt_publishes_reach_jms_subscribers_of_the_topic_and_its_wildcard() -> anyhow::Result<()>
{
    with_broker(|at| exchange(Half::Jms("mqtt_to_jms"), Half::Python("publish_for_jms"), at)).await
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn jms_text_and_bytes_messages_reach_mqtt_subscribers_with_their_properties(
) -> anyhow::Result<()> {
    with_broker(|at| exchange(Half::Python("receive_from_jms"), Half::Jms("jms_to_mqtt"), at)).await
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn jms_durable_subscriber_and_mqtt_persistent_sessions_get_what_was_published_while_away(
) -> anyhow::Result<()> {
    with_broker(|at| {
        run(Half::Jms("durable_subscribe"), at)?;
        run(Half::Python("session_subscribe"), at)?;
        run(Half::Python("publish_while_away"), at)?;
        run(Half::Jms("durable_resume_and_send"), at)?;
        run(Half::Python("session_resume"), at)
    })
    .await
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn mqtt_and_amqp_exchange_binary_payloads_and_properties() -> anyhow::Result<()> {
    with_broker(|at| {
        exchange(Half::Python("amqp_receive_from_mqtt"), Half::Python("publish_for_amqp"), at)
            .context("MQTT to AMQP")?;
        exchange(Half::Python("receive_from_amqp"), Half::Python("amqp_send_to_mqtt"), at)
            .context("AMQP to MQTT")
    })
    .await
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn mqtt_and_stomp_exchange_binary_bodies_and_properties() -> anyhow::Result<()> {
    with_broker(|at| {
        exchange(Half::Python("stomp_receive_from_mqtt"), Half::Python("publish_for_stomp"), at)
            .context("MQTT to STOMP")?;
        exchange(Half::Python("receive_from_stomp"), Half::Python("stomp_send_to_mqtt"), at)
            .context("STOMP to MQTT")
    })
    .await
}
