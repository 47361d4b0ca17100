//! ferromq through the real Apache ActiveMQ 5.x JMS client (OpenWire): each test starts an
//! embedded broker with a `tcp://` connector on a free port and runs one check of
//! `tests/java/JmsChecks.java` against it, with `java -cp $FERROMQ_JMS_CLASSPATH JmsChecks`.
//!
//! `scripts/test` installs the client (Debian's `libactivemq-java`), compiles the checks and
//! sets `FERROMQ_JMS_CLASSPATH`; without it the tests fail. The checks themselves are validated
//! against Apache ActiveMQ by [`jms_checks_pass_against_apache_activemq`], which starts Debian's
//! `activemq` package with [`tests::ActiveMq`], in every run of the suite (about 100 s, beside
//! the other tests):
//!
//! ```text
//! cargo test -p tests --test integration jms_checks_pass_against_apache_activemq -- --nocapture
//! ```
//!
//! The `failover` check needs its broker restarted in the middle: the Java program prints
//! [`RESTART_MARKER`] once its first half is done and waits for a line on stdin, which
//! [`run_java_check`] writes once the broker is back on the same port.

use std::io::{BufRead, BufReader, Read, Write};
use std::net::SocketAddr;
use std::path::Path;
use std::process::{Command, ExitStatus, Stdio};
use std::sync::mpsc;
use std::time::{Duration, Instant};

use anyhow::{bail, ensure, Context};
use broker::BrokerHandle;

/// The longest one check may run; the checks wait at most 10 s for any one message.
const CHECK_TIMEOUT: Duration = Duration::from_secs(180);

/// The line the `failover` check prints when the broker should be restarted.
const RESTART_MARKER: &str = "READY-FOR-RESTART";

/// Every check of `JmsChecks.java`, in its order (`JmsChecks --list`).
const CHECKS: &[&str] = &[
    "queue_send_receive",
    "competing_consumers",
    "topic_fanout",
    "durable_offline",
    "transactions",
    "client_ack_redelivery",
    "acks_beyond_prefetch",
    "all_message_types",
    "request_reply_temp_queue",
    "virtual_topic",
    "wildcard_topic",
    "prefetch_zero",
    "large_message",
    "failover",
    "message_priority",
    "exclusive_consumer",
    "consumer_priority",
    "message_groups",
    "queue_browser",
    "queue_selector",
    "advisories",
    "scheduled_delay",
    "scheduled_repeat",
    "dead_letter_queue",
    "expired_to_dead_letter_queue",
];

/// The class path with the compiled checks and the ActiveMQ client's jars.
pub(crate) fn classpath() -> anyhow::Result<String> {
    match std::env::var("FERROMQ_JMS_CLASSPATH") {
        Ok(classpath) if !classpath.is_empty() => Ok(classpath),
        _ => bail!(
            "FERROMQ_JMS_CLASSPATH is not set: run scripts/test, which installs libactivemq-java and compiles tests/java"
        ),
    }
}

/// What a check printed and how it ended.
struct CheckOutput {
    status: ExitStatus,
    stdout: String,
    stderr: String,
    restarts: usize,
}

/// Runs `JmsChecks --url url --check check`, calling `restart` each time the program asks for a
/// broker restart and telling it when that is done; kills it after [`CHECK_TIMEOUT`]. Fails
/// unless the check exits 0 and reports `ok CHECK`, with everything it printed.
fn run_java_check(
    classpath: &str,
    url: &str,
    check: &str,
    restart: &mut dyn FnMut() -> anyhow::Result<()>,
) -> anyhow::Result<()> {
    run_java_check_with(classpath, &[], url, check, restart)
}

/// [`run_java_check`] with options for the JVM (`-Dname=value`), e.g. a TLS trust store.
pub(crate) fn run_java_check_with(
    classpath: &str,
    jvm_options: &[String],
    url: &str,
    check: &str,
    restart: &mut dyn FnMut() -> anyhow::Result<()>,
) -> anyhow::Result<()> {
    let output = run_java(classpath, jvm_options, url, check, restart)?;
    let transcript = format!("--- stdout\n{}--- stderr\n{}", output.stdout, output.stderr);
    if !output.status.success() {
        bail!("JMS check `{check}` against {url} failed ({})\n{transcript}", output.status);
    }
    if !output.stdout.lines().any(|line| line == format!("ok {check}")) {
        bail!("JMS check `{check}` against {url} did not report success\n{transcript}");
    }
    if check == "failover" && output.restarts == 0 {
        bail!("JMS check `failover` never asked for the broker restart ({RESTART_MARKER})\n{transcript}");
    }
    Ok(())
}

fn run_java(
    classpath: &str,
    jvm_options: &[String],
    url: &str,
    check: &str,
    restart: &mut dyn FnMut() -> anyhow::Result<()>,
) -> anyhow::Result<CheckOutput> {
    let mut child = Command::new("java")
        .args(jvm_options)
        .args(["-cp", classpath, "JmsChecks", "--url", url, "--check", check])
        .stdin(Stdio::piped())
        .stdout(Stdio::piped())
        .stderr(Stdio::piped())
        .spawn()
        .context("cannot run java (scripts/test installs a JDK with libactivemq-java)")?;
    let mut stdin = child.stdin.take();
    let (lines_tx, lines) = mpsc::channel::<String>();
    let stdout = child.stdout.take().context("the check's stdout")?;
    let stdout = std::thread::spawn(move || {
        let mut transcript = String::new();
        for line in BufReader::new(stdout).lines() {
            let Ok(line) = line else { break };
            transcript.push_str(&line);
            transcript.push('\n');
            let _ = lines_tx.send(line);
        }
        transcript
    });
    let stderr = drain(child.stderr.take());
    let deadline = Instant::now() + CHECK_TIMEOUT;
    let mut restarts = 0;
    let mut failure = None;
    let status = loop {
        match lines.recv_timeout(Duration::from_millis(50)) {
            Ok(line) if line.trim() == RESTART_MARKER => {
                restarts += 1;
                let done =
                    restart().context("restarting the broker for the check").and_then(|()| {
                        let stdin = stdin.as_mut().context("the check's stdin is closed")?;
                        writeln!(stdin, "restarted").and_then(|()| stdin.flush()).context(
                            "telling the check that the broker was restarted (did it exit early?)",
                        )
                    });
                if let Err(error) = done {
                    failure = Some(error);
                    let _ = child.kill();
                }
            }
            Ok(_) | Err(mpsc::RecvTimeoutError::Timeout) => {}
            Err(mpsc::RecvTimeoutError::Disconnected) => {
                std::thread::sleep(Duration::from_millis(20))
            }
        }
        if let Some(status) = child.try_wait().context("waiting for the check")? {
            break Some(status);
        }
        if Instant::now() >= deadline {
            let _ = child.kill();
            let _ = child.wait();
            break None;
        }
    };
    drop(stdin);
    let stdout = stdout.join().unwrap_or_default();
    let stderr = stderr.join().unwrap_or_default();
    if let Some(error) = failure {
        bail!("{error:#}\n--- stdout\n{stdout}--- stderr\n{stderr}");
    }
    match status {
        Some(status) => Ok(CheckOutput { status, stdout, stderr, restarts }),
        None => bail!(
            "JMS check `{check}` did not finish within {CHECK_TIMEOUT:?} and was killed\n--- stdout\n{stdout}--- stderr\n{stderr}"
        ),
    }
}

/// Reads a child's pipe to the end on a thread of its own (so that neither pipe can fill up).
fn drain<R: Read + Send + 'static>(pipe: Option<R>) -> std::thread::JoinHandle<String> {
    std::thread::spawn(move || {
        let mut text = Vec::new();
        if let Some(mut pipe) = pipe {
            let _ = pipe.read_to_end(&mut text);
        }
        String::from_utf8_lossy(&text).into_owned()
    })
}

// ---------------------------------------------------------------------------------------------
// Against ferromq

/// A broker with one OpenWire connector on `127.0.0.1:port`; with a journal under `data_dir`
/// if given (so that it keeps persistent messages across a restart), else in memory.
fn openwire_config(data_dir: Option<&Path>, port: u16) -> anyhow::Result<conf::Config> {
    let mut config = conf::Config::default();
    config.admin.bind = "127.0.0.1:0".to_owned();
    match data_dir {
        Some(dir) => {
            config.store.kind = conf::StoreKind::Journal;
            config.broker.data_dir = dir.to_path_buf();
        }
        None => config.store.kind = conf::StoreKind::Memory,
    }
    // Expired messages are swept every 500 ms (ActiveMQ: 30 s), so that the expiry check is quick.
    config.destinations.expire_messages_period = Duration::from_millis(500);
    let connector = format!("tcp://127.0.0.1:{port}");
    config.transport.connectors =
        vec![connector.parse().with_context(|| format!("connector {connector}"))?];
    Ok(config)
}

/// The address of the broker's OpenWire connector.
fn openwire_addr(broker: &BrokerHandle) -> anyhow::Result<SocketAddr> {
    broker
        .connectors()
        .iter()
        .find(|connector| matches!(connector.uri.scheme.as_str(), "tcp" | "nio"))
        .map(|connector| connector.local_addr)
        .context("the broker has no OpenWire (tcp://) connector")
}

/// Starts ferromq on a free port and runs JMS check `check` against it; the `failover` check
/// gets its broker shut down and started again on the same port and journal.
async fn run_against_ferromq(check: &str) -> anyhow::Result<()> {
    let classpath = classpath()?;
    let data = tempfile::tempdir()?;
    let data_dir = (check == "failover").then(|| data.path().to_path_buf());
    let broker = broker::Broker::start(openwire_config(data_dir.as_deref(), 0)?)
        .await
        .context("starting the broker")?;
    let addr = openwire_addr(&broker)?;
    let url = format!("tcp://{addr}");
    let runtime = tokio::runtime::Handle::current();
    let mut broker = Some(broker);
    let result = tokio::task::block_in_place(|| {
        run_java_check(&classpath, &url, check, &mut || {
            runtime.block_on(async {
                if let Some(running) = broker.take() {
                    running.shutdown().await;
                }
                // Back within ~10 ms in-process: the client reconnects while it is still
                // clearing what the lost connection dispatched, restores its consumers with
                // prefetch 0 and their prefetch later with a ConsumerControl.
                let config = openwire_config(data_dir.as_deref(), addr.port())?;
                let restarted = broker::Broker::start(config)
                    .await
                    .with_context(|| format!("starting the broker again on {addr}"))?;
                broker = Some(restarted);
                Ok(())
            })
        })
    });
    if let Some(broker) = broker {
        broker.shutdown().await;
    }
    result
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn jms_queue_send_receive() -> anyhow::Result<()> {
    run_against_ferromq("queue_send_receive").await
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn jms_competing_consumers() -> anyhow::Result<()> {
    run_against_ferromq("competing_consumers").await
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn jms_topic_fanout() -> anyhow::Result<()> {
    run_against_ferromq("topic_fanout").await
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn jms_durable_offline() -> anyhow::Result<()> {
    run_against_ferromq("durable_offline").await
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn jms_transactions() -> anyhow::Result<()> {
    run_against_ferromq("transactions").await
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn jms_client_ack_redelivery() -> anyhow::Result<()> {
    run_against_ferromq("client_ack_redelivery").await
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn jms_acks_beyond_prefetch() -> anyhow::Result<()> {
    run_against_ferromq("acks_beyond_prefetch").await
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn jms_all_message_types() -> anyhow::Result<()> {
    run_against_ferromq("all_message_types").await
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn jms_request_reply_temp_queue() -> anyhow::Result<()> {
    run_against_ferromq("request_reply_temp_queue").await
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn jms_virtual_topic() -> anyhow::Result<()> {
    run_against_ferromq("virtual_topic").await
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn jms_wildcard_topic() -> anyhow::Result<()> {
    run_against_ferromq("wildcard_topic").await
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn jms_prefetch_zero() -> anyhow::Result<()> {
    run_against_ferromq("prefetch_zero").await
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn jms_large_message() -> anyhow::Result<()> {
    run_against_ferromq("large_message").await
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn jms_failover() -> anyhow::Result<()> {
    run_against_ferromq("failover").await
}

/// Issue 12: the stock JMS client with `failover:(tcp://active,tcp://standby)` across a
/// takeover: two brokers with `standby = true` on one journal directory; when the client asks
/// for the restart, the active one stops and the standby, which waited for the lock, takes
/// over on its own port. The check loses no confirmed message and delivers none twice.
#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn jms_failover_from_the_active_broker_to_its_standby() -> anyhow::Result<()> {
    let classpath = classpath()?;
    let data = tempfile::tempdir()?;
    let standby_config = |port: u16| -> anyhow::Result<conf::Config> {
        let mut config = openwire_config(Some(data.path()), port)?;
        config.broker.standby = true;
        config.broker.lock_retry = Duration::from_millis(50);
        Ok(config)
    };
    let active = broker::Broker::builder(standby_config(0)?)
        .lock_data_dir(true)
        .start()
        .await
        .context("starting the active broker")?;
    let active_addr = openwire_addr(&active)?;
    // A port for the standby, known before it can bind it (it binds only once it is active):
    // outside the ephemeral range, where the JMS client's own sockets could take it meanwhile.
    let standby_port = store::kit::loopback_port()?;
    let builder = broker::Broker::builder(standby_config(standby_port)?).lock_data_dir(true);
    let standby = tokio::spawn(builder.start());
    let url = format!("tcp://{active_addr},tcp://127.0.0.1:{standby_port}");
    let runtime = tokio::runtime::Handle::current();
    let mut active = Some(active);
    let mut standby = Some(standby);
    let mut took_over = None;
    let result = tokio::task::block_in_place(|| {
        run_java_check(&classpath, &url, "failover", &mut || {
            runtime.block_on(async {
                ensure!(
                    standby.as_ref().is_some_and(|waiting| !waiting.is_finished()),
                    "the standby did not wait for the lock"
                );
                if let Some(running) = active.take() {
                    running.shutdown().await;
                }
                let waiting = standby.take().context("the standby took over already")?;
                let started = tokio::time::timeout(Duration::from_secs(30), waiting)
                    .await
                    .context("the standby did not take over within 30 s")??
                    .context("the standby failed to start")?;
                took_over = Some(started);
                Ok(())
            })
        })
    });
    if let Some(broker) = took_over {
        broker.shutdown().await;
    }
    if let Some(broker) = active {
        broker.shutdown().await;
    }
    result
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn jms_message_priority() -> anyhow::Result<()> {
    run_against_ferromq("message_priority").await
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn jms_exclusive_consumer() -> anyhow::Result<()> {
    run_against_ferromq("exclusive_consumer").await
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn jms_consumer_priority() -> anyhow::Result<()> {
    run_against_ferromq("consumer_priority").await
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn jms_message_groups() -> anyhow::Result<()> {
    run_against_ferromq("message_groups").await
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn jms_queue_browser() -> anyhow::Result<()> {
    run_against_ferromq("queue_browser").await
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn jms_queue_selector() -> anyhow::Result<()> {
    run_against_ferromq("queue_selector").await
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn jms_scheduled_delay() -> anyhow::Result<()> {
    run_against_ferromq("scheduled_delay").await
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn jms_scheduled_repeat() -> anyhow::Result<()> {
    run_against_ferromq("scheduled_repeat").await
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn jms_dead_letter_queue() -> anyhow::Result<()> {
    run_against_ferromq("dead_letter_queue").await
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn jms_expired_to_dead_letter_queue() -> anyhow::Result<()> {
    run_against_ferromq("expired_to_dead_letter_queue").await
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn jms_advisories() -> anyhow::Result<()> {
    run_against_ferromq("advisories").await
}

/// Cross-protocol delivery: STOMP to the JMS client and back, headers and properties mapped as
/// ActiveMQ maps them. The STOMP half runs here, around the Java check `stomp_interop`.
#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn jms_and_stomp_exchange_messages() -> anyhow::Result<()> {
    let classpath = classpath()?;
    let broker = tests::start_broker(|config| {
        config.transport.connectors = vec![
            "tcp://127.0.0.1:0".parse().expect("uri"),
            "stomp://127.0.0.1:0".parse().expect("uri"),
        ];
    })
    .await?;
    let stomp = tests::connect(&broker).await?;
    let expires = (std::time::SystemTime::now().duration_since(std::time::UNIX_EPOCH)?
        + Duration::from_secs(600))
    .as_millis()
    .to_string();
    let text_headers = [
        ("amq-msg-type", "text"),
        ("persistent", "true"),
        ("priority", "7"),
        ("correlation-id", "corr-1"),
        ("type", "order"),
        ("reply-to", "/queue/interop.replies"),
        ("expires", expires.as_str()),
        ("color", "red"),
        ("count", "42"),
    ];
    stomp
        .send_with_receipt(
            "/queue/interop.from-stomp",
            "h\u{e9}llo from stomp \u{2713}",
            &text_headers,
        )
        .await?;
    let binary: Vec<u8> = (0..=255u8).collect();
    stomp.send_with_receipt("/queue/interop.from-stomp", binary.clone(), &[]).await?;
    let mut to_stomp =
        stomp.subscribe("/queue/interop.to-stomp", client::AckMode::Auto, &[]).await?;

    let url = format!("tcp://{}", openwire_addr(&broker)?);
    tokio::task::block_in_place(|| {
        run_java_check(&classpath, &url, "stomp_interop", &mut || {
            bail!("the stomp_interop check asked for a restart")
        })
    })?;

    let reply = tests::recv(&mut to_stomp).await?;
    assert_eq!(std::str::from_utf8(reply.body())?, "\u{fc}n\u{ef}code reply");
    let header = |name: &str| reply.header(name).map(str::to_owned);
    assert_eq!(header("destination").as_deref(), Some("/queue/interop.to-stomp"));
    assert_eq!(header("correlation-id").as_deref(), Some("corr-2"));
    assert_eq!(header("type").as_deref(), Some("reply"));
    assert_eq!(header("reply-to").as_deref(), Some("/queue/interop.replies"));
    assert_eq!(header("priority").as_deref(), Some("8"));
    assert_eq!(header("persistent").as_deref(), Some("true"));
    let expires: i64 = header("expires").context("expires")?.parse()?;
    let timestamp: i64 = header("timestamp").context("timestamp")?.parse()?;
    assert_eq!(expires - timestamp, 600_000, "expires is the JMS expiration");
    assert!(header("message-id").is_some_and(|id| id.starts_with("ID:")));
    for (name, value) in
        [("s", "x"), ("i", "7"), ("l", "1099511627776"), ("b", "true"), ("d", "2.5")]
    {
        assert_eq!(header(name).as_deref(), Some(value), "property {name}");
    }
    let bytes = tests::recv(&mut to_stomp).await?;
    assert_eq!(&bytes.body()[..], &binary[..], "bytes with NULs intact");
    assert_eq!(bytes.header("content-length"), Some("256"));
    assert_eq!(bytes.header("persistent"), None, "non-persistent has no persistent header");
    broker.shutdown().await;
    Ok(())
}

/// Cross-protocol delivery between AMQP 1.0 (Qpid Proton) and the JMS client, both ways:
/// headers, typed properties and text, bytes, map, stream and object bodies as ActiveMQ's
/// AMQP-JMS mapping gives them. Proton sends first (`jms_interop_send`), the Java check
/// `amqp_interop` checks what arrived and answers, Proton checks the answers
/// (`jms_interop_receive`).
#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn jms_and_amqp_exchange_messages() -> anyhow::Result<()> {
    let classpath = classpath()?;
    let broker = tests::start_broker(|config| {
        config.transport.connectors = vec![
            "tcp://127.0.0.1:0".parse().expect("uri"),
            "amqp://127.0.0.1:0".parse().expect("uri"),
        ];
    })
    .await?;
    let amqp = broker.amqp_addr().context("no AMQP connector")?;
    super::amqp::proton(amqp, "jms_interop_send", &[]).await?;
    let url = format!("tcp://{}", openwire_addr(&broker)?);
    tokio::task::block_in_place(|| {
        run_java_check(&classpath, &url, "amqp_interop", &mut || {
            bail!("the amqp_interop check asked for a restart")
        })
    })?;
    let result = super::amqp::proton(amqp, "jms_interop_receive", &[]).await;
    broker.shutdown().await;
    result
}

/// Runs a check of `CONFIGURED_CHECKS` against ferromq started with `configure`d settings.
async fn run_configured(
    check: &str,
    configure: impl FnOnce(&mut conf::Config),
) -> anyhow::Result<()> {
    let classpath = classpath()?;
    let mut config = openwire_config(None, 0)?;
    configure(&mut config);
    let broker = broker::Broker::start(config).await.context("starting the broker")?;
    let url = format!("tcp://{}", openwire_addr(&broker)?);
    let result = tokio::task::block_in_place(|| {
        run_java_check(&classpath, &url, check, &mut || {
            bail!("the {check} check asked for a restart")
        })
    });
    broker.shutdown().await;
    result
}

/// The destination limit through the JMS client: past a policy's `max_destinations` a send
/// and a consumer that would create a queue fail with ResourceAllocationException naming the
/// limit, and neither queue is created.
#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn jms_destination_limit() -> anyhow::Result<()> {
    let classpath = classpath()?;
    let mut config = openwire_config(None, 0)?;
    config.policies = conf::Config::parse(
        "[[policies]]\nqueue = \"LIMITED.>\"\nmax_destinations = 2\n",
        "p.toml",
    )?
    .policies;
    let broker = broker::Broker::start(config).await.context("starting the broker")?;
    let url = format!("tcp://{}", openwire_addr(&broker)?);
    let result = tokio::task::block_in_place(|| {
        run_java_check(&classpath, &url, "destination_limit", &mut || {
            bail!("the destination_limit check asked for a restart")
        })
    });
    for refused in ["LIMITED.C", "LIMITED.D"] {
        ensure!(broker.queue_stats(refused).await.is_none(), "the refused {refused} exists");
    }
    broker.shutdown().await;
    result
}

/// Producer flow control through the JMS client: a synchronous sender and one paced by its
/// producer window block at a queue's memory limit and resume as a consumer drains.
#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn jms_flow_control() -> anyhow::Result<()> {
    run_configured("flow_control", |config| config.destinations.memory_limit = 64 * 1024).await
}

/// The temporary store through the JMS client: on a broker with a journal (so with a
/// temporary store of 16 MiB), non-persistent messages beyond a 64 KiB queue without producer
/// flow control spill; a synchronous send to a full temporary store fails with
/// ResourceAllocationException naming it, and every accepted message drains in order.
#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn jms_temp_store() -> anyhow::Result<()> {
    let classpath = classpath()?;
    let data = tempfile::tempdir()?;
    let mut config = openwire_config(Some(data.path()), 0)?;
    config.destinations.memory_limit = 64 << 10;
    config.broker.temp_limit = 16 << 20;
    config.broker.send_fail_if_no_space = true;
    config.policies = conf::Config::parse(
        "[[policies]]\nqueue = \">\"\nproducer_flow_control = false\n",
        "policies.toml",
    )?
    .policies;
    let broker = broker::Broker::start(config).await.context("starting the broker")?;
    let url = format!("tcp://{}", openwire_addr(&broker)?);
    let result = tokio::task::block_in_place(|| {
        run_java_check(&classpath, &url, "temp_store", &mut || {
            bail!("the temp_store check asked for a restart")
        })
    });
    broker.shutdown().await;
    result
}

/// With `send_fail_if_no_space`, a send over the limit fails with ResourceAllocationException.
#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn jms_flow_control_fail() -> anyhow::Result<()> {
    run_configured("flow_control_fail", |config| {
        config.destinations.memory_limit = 64 * 1024;
        config.broker.send_fail_if_no_space = true;
    })
    .await
}

/// Inactive destinations through the JMS client: a queue left unused is removed after its
/// policy's timeout, and AdvisorySupport's destination advisory topic announces it as a
/// DestinationInfo remove.
#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn jms_gc_inactive_destinations() -> anyhow::Result<()> {
    let policies = conf::Config::parse(
        "[[policies]]\nqueue = \">\"\ngc_inactive_destinations = true\n\
         inactive_timeout_before_gc_ms = 300\n",
        "policies.toml",
    )?
    .policies;
    run_configured("gc_inactive_destinations", |config| config.policies = policies).await
}

/// A slow consumer aborted through the JMS client: the broker's ConsumerControl with `close`
/// makes the client close the consumer, as with ActiveMQ's AbortSlowConsumerStrategy.
#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn jms_slow_consumer_abort() -> anyhow::Result<()> {
    let policies = conf::Config::parse(
        r#"
        [[policies]]
        topic = ">"
        advisory_for_slow_consumers = true
        slow_consumer_strategy = { max_slow_duration_ms = 500, check_period_ms = 200 }
        "#,
        "jms_slow_consumer_abort.toml",
    )?
    .policies;
    run_configured("slow_consumer_abort", |config| config.policies = policies).await
}

/// Configured composite destinations through the JMS client: the Java check
/// `configured_composite` against a broker configured with the composites it expects (written
/// as an operator would, in TOML). Apache ActiveMQ's peer (`tests/activemq/activemq.xml`) has
/// the same `<compositeQueue>` / `<compositeTopic forwardOnly="false">`, and the check runs
/// against it in [`jms_checks_pass_against_apache_activemq`].
#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn jms_configured_composite() -> anyhow::Result<()> {
    let classpath = classpath()?;
    let composites = conf::Config::parse(
        r#"
[[composite_destinations]]
name = "queue://composite.ORDERS"
forward_to = [
    "queue://composite.EU",
    "topic://composite.AUDIT",
    { destination = "queue://composite.BIG", selector = "amount > 100" },
]

[[composite_destinations]]
name = "topic://composite.PRICES"
forward_only = false
forward_to = ["queue://composite.PRICES.LOG"]
"#,
        "composites.toml",
    )?;
    let mut config = openwire_config(None, 0)?;
    config.composite_destinations = composites.composite_destinations;
    let broker = broker::Broker::start(config).await.context("starting the broker")?;
    let url = format!("tcp://{}", openwire_addr(&broker)?);
    let result = tokio::task::block_in_place(|| {
        run_java_check(&classpath, &url, "configured_composite", &mut || {
            bail!("the configured_composite check asked for a restart")
        })
    });
    broker.shutdown().await;
    result
}

/// `configured_policies` against a broker with the destination policies it expects; Apache
/// ActiveMQ's peer has the same `<policyEntry>`s.
#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn jms_configured_policies() -> anyhow::Result<()> {
    let policies = conf::Config::parse(
        r#"
[[policies]]
queue = "policy.strict.>"
strict_order_dispatch = true

[[policies]]
queue = "policy.prefetch.>"
queue_prefetch = 2
"#,
        "policies.toml",
    )?
    .policies;
    run_configured("configured_policies", |config| config.policies = policies).await
}

// ---------------------------------------------------------------------------------------------
// Against Apache ActiveMQ, to validate the checks

/// Every check passes against the real Apache ActiveMQ, which proves the checks right. The
/// `failover` check restarts the peer.
///
/// About 100 s (every check in one Java run per check against one peer); it runs beside the
/// other tests, so it lengthens the suite by much less.
#[test]
fn jms_checks_pass_against_apache_activemq() -> anyhow::Result<()> {
    let classpath = classpath()?;
    let listed = Command::new("java")
        .args(["-cp", &classpath, "JmsChecks", "--list"])
        .output()
        .context("cannot run java")?;
    let listed = String::from_utf8_lossy(&listed.stdout);
    assert_eq!(listed.lines().collect::<Vec<_>>(), CHECKS, "JmsChecks --list and CHECKS differ");

    // Persistent, so that the failover check's messages survive the restart.
    let Some(mut peer) = tests::ActiveMq::start_persistent().context("starting Apache ActiveMQ")?
    else {
        return Ok(());
    };
    let url = peer.url();
    let mut failures = Vec::new();
    // The peer is configured with the composites and policies these checks expect.
    for check in CHECKS.iter().chain(&["configured_composite", "configured_policies"]) {
        let started = Instant::now();
        match run_java_check(&classpath, &url, check, &mut || peer.restart()) {
            Ok(()) => eprintln!("ok   {check} ({:.1} s)", started.elapsed().as_secs_f64()),
            Err(error) => {
                eprintln!("FAIL {check} ({:.1} s)", started.elapsed().as_secs_f64());
                failures.push(format!("{error:#}"));
            }
        }
    }
    peer.stop()?;
    if !failures.is_empty() {
        bail!(
            "{} of {} checks failed against Apache ActiveMQ:\n\n{}",
            failures.len(),
            CHECKS.len(),
            failures.join("\n\n")
        );
    }
    Ok(())
}
