//! ferromq through stomp.py, a real third-party STOMP client: each test starts an embedded
//! broker on a free port and runs one check of `tests/python/stomp_py_checks.py` against it.
//!
//! The interpreter is `$FERROMQ_PYTHON` (set by `scripts/test`), else the repository's
//! `.venv/bin/python`. Without either the tests fail: stomp.py is part of the suite.

use std::io::Read;
use std::path::{Path, PathBuf};
use std::process::{Command, Stdio};
use std::time::{Duration, Instant};

use anyhow::{bail, Context};

/// The longest one check may run; the script itself gives up on any frame after 20 s.
const CHECK_TIMEOUT: Duration = Duration::from_secs(180);

pub(crate) fn repository_root() -> PathBuf {
    Path::new(env!("CARGO_MANIFEST_DIR")).join("..")
}

/// The Python interpreter that has stomp.py installed.
pub(crate) fn python() -> anyhow::Result<PathBuf> {
    if let Some(configured) = std::env::var_os("FERROMQ_PYTHON").filter(|value| !value.is_empty()) {
        let path = PathBuf::from(configured);
        if !path.exists() {
            bail!(
                "FERROMQ_PYTHON={} does not exist; stomp.py is not installed: run scripts/test, which creates .venv",
                path.display()
            );
        }
        return Ok(path);
    }
    let venv = repository_root().join(".venv/bin/python");
    if venv.exists() {
        return Ok(venv);
    }
    bail!("stomp.py is not installed: run scripts/test, which creates .venv")
}

pub(crate) struct CheckOutput {
    pub(crate) status: std::process::ExitStatus,
    pub(crate) stdout: String,
    pub(crate) stderr: String,
}

/// Runs `python script args...`, killing it after `timeout`.
pub(crate) fn run_with_timeout(
    python: &Path,
    args: &[String],
    timeout: Duration,
) -> anyhow::Result<CheckOutput> {
    let mut child = Command::new(python)
        .args(args)
        .env("PYTHONUNBUFFERED", "1")
        .env("PYTHONDONTWRITEBYTECODE", "1")
        .stdin(Stdio::null())
        .stdout(Stdio::piped())
        .stderr(Stdio::piped())
        .spawn()
        .with_context(|| format!("cannot run {}", python.display()))?;
    let stdout = drain(child.stdout.take());
    let stderr = drain(child.stderr.take());
    let deadline = Instant::now() + timeout;
    let status = loop {
        if let Some(status) = child.try_wait().context("waiting for the check")? {
            break Some(status);
        }
        if Instant::now() >= deadline {
            let _ = child.kill();
            let _ = child.wait();
            break None;
        }
        std::thread::sleep(Duration::from_millis(20));
    };
    let stdout = stdout.join().unwrap_or_default();
    let stderr = stderr.join().unwrap_or_default();
    match status {
        Some(status) => Ok(CheckOutput { status, stdout, stderr }),
        None => bail!(
            "the check did not finish within {timeout:?} and was killed\n--- stdout\n{stdout}\n--- stderr\n{stderr}"
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

/// Starts a broker on a free port and runs stomp.py check `check` against it.
async fn run_check(check: &str) -> anyhow::Result<()> {
    let mut config = conf::Config::default();
    config.store.kind = conf::StoreKind::Memory;
    config.transport.connectors = vec!["stomp://127.0.0.1:0".parse()?];
    config.admin.bind = "127.0.0.1:0".to_owned();
    let broker = broker::Broker::start(config).await?;
    let addr = broker.stomp_addr().context("the broker has no STOMP connector")?;
    let result = run_check_at(addr, check).await;
    broker.shutdown().await;
    result
}

/// Runs stomp.py check `check` against the STOMP server at `addr`.
async fn run_check_at(addr: std::net::SocketAddr, check: &str) -> anyhow::Result<()> {
    let python = python()?;
    let script = repository_root().join("tests/python/stomp_py_checks.py");
    let args = vec![
        script.display().to_string(),
        "--host".to_owned(),
        addr.ip().to_string(),
        "--port".to_owned(),
        addr.port().to_string(),
        "--check".to_owned(),
        check.to_owned(),
    ];
    let output =
        tokio::task::spawn_blocking(move || run_with_timeout(&python, &args, CHECK_TIMEOUT))
            .await
            .context("the check's runner panicked")??;
    if !output.status.success() {
        bail!(
            "stomp.py check `{check}` failed ({})\n--- stdout\n{}\n--- stderr\n{}",
            output.status,
            output.stdout,
            output.stderr
        );
    }
    if !output.stdout.contains(&format!("ok {check}")) {
        bail!(
            "stomp.py check `{check}` did not report success\n--- stdout\n{}\n--- stderr\n{}",
            output.stdout,
            output.stderr
        );
    }
    Ok(())
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn stomp_py_messages_arrive_in_order() -> anyhow::Result<()> {
    run_check("ordering").await
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn stomp_py_custom_headers_are_preserved() -> anyhow::Result<()> {
    run_check("custom_headers").await
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn stomp_py_client_individual_acks_redeliver_after_disconnect() -> anyhow::Result<()> {
    run_check("client_individual_acks").await
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn stomp_py_binary_bodies_keep_nul_bytes() -> anyhow::Result<()> {
    run_check("binary_bodies").await
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn stomp_py_escaped_headers_round_trip() -> anyhow::Result<()> {
    run_check("escaped_headers").await
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn stomp_py_two_mib_body_arrives_whole() -> anyhow::Result<()> {
    run_check("large_body").await
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn stomp_py_persistent_sends_get_receipts_in_order() -> anyhow::Result<()> {
    run_check("receipts").await
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn stomp_py_nack_redelivers() -> anyhow::Result<()> {
    run_check("nack").await
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn stomp_py_topic_subscribers_each_get_every_message() -> anyhow::Result<()> {
    run_check("topic_fanout").await
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn stomp_py_durable_subscriber_gets_what_was_published_while_offline() -> anyhow::Result<()> {
    run_check("durable_offline").await
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn stomp_py_wildcards_match_and_only_match() -> anyhow::Result<()> {
    run_check("wildcards").await
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn stomp_py_virtual_topic_groups_share_and_fan_out() -> anyhow::Result<()> {
    run_check("virtual_topic_groups").await
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn stomp_py_transactions_commit_and_abort_sends_and_acks() -> anyhow::Result<()> {
    run_check("transactions").await
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn stomp_py_a_client_id_is_held_by_one_connection_at_a_time() -> anyhow::Result<()> {
    run_check("client_id_claimed").await
}

/// The same check against Apache ActiveMQ, whose refusal ferromq's follows: an ERROR whose
/// `message` names the client id (ActiveMQ's InvalidClientIDException text, "Broker: <name> -
/// Client: <id> already connected from <address>"), then the close.
#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn stomp_py_a_client_id_is_held_by_one_connection_at_a_time_in_apache_activemq(
) -> anyhow::Result<()> {
    let Some(activemq) = tokio::task::spawn_blocking(tests::ActiveMq::start).await?? else {
        return Ok(());
    };
    let result = run_check_at(activemq.stomp_addr(), "client_id_claimed").await;
    if result.is_err() {
        eprintln!("--- Apache ActiveMQ's log\n{}", activemq.log());
    }
    result
}

/// Every check the script has is run by one of the tests above.
#[test]
fn stomp_py_every_check_has_a_test() -> anyhow::Result<()> {
    let covered = [
        "ordering",
        "custom_headers",
        "client_individual_acks",
        "binary_bodies",
        "escaped_headers",
        "large_body",
        "receipts",
        "nack",
        "topic_fanout",
        "durable_offline",
        "wildcards",
        "virtual_topic_groups",
        "transactions",
        "client_id_claimed",
    ];
    let script =
        std::fs::read_to_string(repository_root().join("tests/python/stomp_py_checks.py"))?;
    let table = script.split("CHECKS = {").nth(1).context("the script has no CHECKS table")?;
    let table = table.split('}').next().unwrap_or_default();
    let listed: Vec<&str> = table
        .lines()
        .filter_map(|line| line.trim().strip_prefix('"'))
        .filter_map(|line| line.split('"').next())
        .collect();
    assert_eq!(listed, covered, "add a test for each new check in tests/python/stomp_py_checks.py");
    Ok(())
}
