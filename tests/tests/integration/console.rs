//! The web console in a real browser: Debian's headless Chromium, driven by playwright-core
//! from `tests/browser/console.mjs`, logs in to the admin endpoint of a broker that checks
//! logins (HTTP Basic, an admin user) and works the console while the real ActiveMQ JMS client
//! (`tests/java/ConsoleJms.java`) fills and drains queues:
//!
//! - the page answers with its Content-Security-Policy, nosniff and no-referrer headers, and
//!   the dashboard names the broker;
//! - the queues table shows `console.orders` (12 messages sent by JMS) with its depth,
//!   filtered and sorted; a queue named like markup shows as text, on its page too;
//! - the queue's page browses its messages, and one message's page shows its body and
//!   properties; 60 messages page by 50, and a selector picks some;
//! - the three messages a transacted JMS consumer rolled back into `ActiveMQ.DLQ` are retried
//!   from the DLQ's page back to `console.work`, where the JMS client consumes them and the
//!   table shows them dequeued;
//! - a purge from the queue's page takes `console.orders` to 0;
//! - a message sent from the console (a body that looks like markup, typed properties, a
//!   priority) is shown as text and runs nothing, is moved by a selector to `console.inbox`
//!   and reaches the JMS client there, and `console.inbox` is then deleted from its page;
//! - an offline durable subscription the JMS client made is listed and removed;
//! - the JMS client's connections are listed (protocol, client id, user), and one is closed
//!   from the console: the client sees it closed;
//! - the dashboard's rate chart rises with a burst of 300 JMS messages;
//! - cross-site attempts to purge `console.keep` (a page of another origin: a no-cors fetch,
//!   a CORS fetch with a guessed token, a form; and requests with a foreign `Origin`, with
//!   `Sec-Fetch-Site: cross-site`, without the token) are all refused and it keeps its 2.
//!
//! The driver asks for each JMS step with a `jms COMMAND` line, which this test passes to the
//! Java client, answering the driver with the client's `ok` line. Screenshots of the
//! dashboard, a queue page and a message page go to `$CARGO_TARGET_DIR/console-screenshots`
//! (or `target/console-screenshots`); their paths are printed. Missing node, Chromium or
//! playwright-core skips the test with a printed reason unless `FERROMQ_REQUIRE_BROWSER` is
//! set, as in `browser.rs`; a missing `FERROMQ_JMS_CLASSPATH` fails it.
//!
//! ```text
//! cargo test -p tests --test integration console:: -- --nocapture
//! ```

use std::io::{BufRead, BufReader, Read, Write};
use std::path::PathBuf;
use std::process::{Child, ChildStdin, Command, Stdio};
use std::sync::mpsc::{self, Receiver};
use std::time::{Duration, Instant};

use anyhow::{bail, ensure, Context};
use broker::admin::{AdminClient, DestinationStats};
use broker::BrokerHandle;

use crate::stomp_py::repository_root;

const REQUIRE_BROWSER: &str = "FERROMQ_REQUIRE_BROWSER";
const USER: &str = "admin";
const PASSWORD: &str = "console-secret";
/// The longest the whole browser session may take.
const RUN_TIMEOUT: Duration = Duration::from_secs(300);
/// What the driver gives Playwright for each wait.
const DRIVER_TIMEOUT_MS: &str = "60000";
/// How long one JMS command may take.
const JMS_TIMEOUT: Duration = Duration::from_secs(120);

fn browser_dir() -> PathBuf {
    match std::env::var_os("FERROMQ_BROWSER_DIR").filter(|dir| !dir.is_empty()) {
        Some(dir) => PathBuf::from(dir),
        None => repository_root().join("tests/browser"),
    }
}

fn chromium() -> PathBuf {
    match std::env::var_os("FERROMQ_CHROMIUM").filter(|path| !path.is_empty()) {
        Some(path) => PathBuf::from(path),
        None => PathBuf::from("/usr/bin/chromium"),
    }
}

/// Where the screenshots go: under the build's target directory, kept after the test.
fn screenshot_dir() -> PathBuf {
    let target = match std::env::var_os("CARGO_TARGET_DIR").filter(|dir| !dir.is_empty()) {
        Some(dir) => PathBuf::from(dir),
        None => repository_root().join("target"),
    };
    target.join("console-screenshots")
}

/// True when node, Chromium and playwright-core are there; false (after printing why) when
/// something is missing and [`REQUIRE_BROWSER`] is not set; an error when it is.
fn browser_available() -> anyhow::Result<bool> {
    let mut missing = Vec::new();
    let node_runs = Command::new("node")
        .arg("--version")
        .stdout(Stdio::null())
        .stderr(Stdio::null())
        .status()
        .is_ok_and(|status| status.success());
    if !node_runs {
        missing.push("node (Node.js 20 or later) on PATH".to_owned());
    }
    if !chromium().exists() {
        missing.push(format!("{} (Debian's chromium package)", chromium().display()));
    }
    let playwright = browser_dir().join("node_modules/playwright-core/package.json");
    if !playwright.exists() {
        missing.push(format!("{} (npm ci in tests/browser)", playwright.display()));
    }
    if missing.is_empty() {
        return Ok(true);
    }
    let missing = missing.join(", ");
    if std::env::var_os(REQUIRE_BROWSER).is_some() {
        bail!(
            "the console's browser test cannot run, missing: {missing}; {REQUIRE_BROWSER} is set"
        );
    }
    eprintln!("skipping the console's browser test, missing: {missing} (set {REQUIRE_BROWSER} to fail instead)");
    Ok(false)
}

/// A child process whose stdout lines arrive on a channel, killed on drop.
struct LineProcess {
    name: &'static str,
    child: Child,
    stdin: Option<ChildStdin>,
    lines: Receiver<String>,
    stderr: Option<std::thread::JoinHandle<String>>,
}

impl LineProcess {
    fn spawn(name: &'static str, mut command: Command) -> anyhow::Result<LineProcess> {
        let mut child = command
            .stdin(Stdio::piped())
            .stdout(Stdio::piped())
            .stderr(Stdio::piped())
            .spawn()
            .with_context(|| format!("cannot start {name} ({command:?})"))?;
        let stdout = child.stdout.take().context("stdout")?;
        let (sender, lines) = mpsc::channel();
        std::thread::spawn(move || {
            for line in BufReader::new(stdout).lines() {
                let Ok(line) = line else { break };
                if sender.send(line).is_err() {
                    break;
                }
            }
        });
        let mut stderr = child.stderr.take().context("stderr")?;
        let stderr = std::thread::spawn(move || {
            let mut text = String::new();
            let _ = stderr.read_to_string(&mut text);
            text
        });
        let stdin = child.stdin.take();
        Ok(LineProcess { name, child, stdin, lines, stderr: Some(stderr) })
    }

    fn write_line(&mut self, line: &str) -> anyhow::Result<()> {
        let stdin = self.stdin.as_mut().context("stdin closed")?;
        writeln!(stdin, "{line}")
            .and_then(|()| stdin.flush())
            .with_context(|| format!("cannot write to {}", self.name))
    }

    /// The next stdout line, waiting until `deadline`; `None` when the process ended first.
    fn next_line(&self, deadline: Instant) -> anyhow::Result<Option<String>> {
        let left = deadline.saturating_duration_since(Instant::now());
        match self.lines.recv_timeout(left) {
            Ok(line) => Ok(Some(line)),
            Err(mpsc::RecvTimeoutError::Disconnected) => Ok(None),
            Err(mpsc::RecvTimeoutError::Timeout) => {
                bail!("{} printed nothing within its time", self.name)
            }
        }
    }

    /// Kills the process if it still runs; its stderr.
    fn finish(&mut self) -> String {
        drop(self.stdin.take());
        let deadline = Instant::now() + Duration::from_secs(10);
        while self.child.try_wait().ok().flatten().is_none() && Instant::now() < deadline {
            std::thread::sleep(Duration::from_millis(20));
        }
        if self.child.try_wait().ok().flatten().is_none() {
            let _ = self.child.kill();
            let _ = self.child.wait();
        }
        self.stderr.take().map(|thread| thread.join().unwrap_or_default()).unwrap_or_default()
    }
}

impl Drop for LineProcess {
    fn drop(&mut self) {
        if self.child.try_wait().ok().flatten().is_none() {
            let _ = self.child.kill();
            let _ = self.child.wait();
        }
    }
}

/// The JMS client: runs `command` and returns its `ok ...` line.
fn jms(java: &mut LineProcess, command: &str) -> anyhow::Result<String> {
    java.write_line(command)?;
    let deadline = Instant::now() + JMS_TIMEOUT;
    loop {
        match java.next_line(deadline)? {
            Some(line) if line.starts_with("ok ") => return Ok(line),
            Some(line) if line.starts_with("FAIL") => bail!("the JMS client: {line}"),
            Some(line) => eprintln!("[jms] {line}"),
            None => bail!("the JMS client ended during `{command}`:\n{}", java.finish()),
        }
    }
}

async fn start() -> anyhow::Result<BrokerHandle> {
    let hash = broker::security::hash_password(PASSWORD).map_err(anyhow::Error::msg)?;
    tests::start_broker(|config| {
        config.transport.connectors =
            vec!["tcp://127.0.0.1:0".parse().expect("a valid connector URI")];
        config.authentication.enabled = true;
        config.users = vec![conf::UserEntry {
            name: USER.to_owned(),
            password: hash,
            groups: vec!["admins".to_owned()],
        }];
    })
    .await
}

async fn queue(admin: &AdminClient, name: &str) -> anyhow::Result<DestinationStats> {
    Ok(admin.get_json(&format!("/api/destinations/queue/{name}")).await?)
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn the_console_in_chromium_browses_retries_purges_and_refuses_cross_site_requests(
) -> anyhow::Result<()> {
    let classpath = crate::jms::classpath()?;
    if !browser_available()? {
        return Ok(());
    }
    let broker = start().await?;
    let openwire = broker.openwire_addr().context("the broker has no tcp:// connector")?;
    let admin_addr = broker.admin_addr().context("the admin endpoint is on")?;
    let url = format!("http://{admin_addr}");
    let admin =
        AdminClient::new(&url)?.with_credentials(Some((USER.to_owned(), PASSWORD.to_owned())));

    let mut java_command = Command::new("java");
    java_command.args(["-cp", &classpath, "ConsoleJms", "--url"]).arg(format!("tcp://{openwire}"));
    java_command.args(["--user", USER, "--password", PASSWORD]);
    let mut java = LineProcess::spawn("the JMS client", java_command)?;
    let started = Instant::now() + JMS_TIMEOUT;
    match java.next_line(started)? {
        Some(line) if line == "ready" => {}
        other => bail!("the JMS client did not start: {other:?}\n{}", java.finish()),
    }
    jms(&mut java, "fill console.orders 12")?;
    jms(&mut java, "fill console.keep 2")?;
    jms(&mut java, "fill console.paged 60")?;
    // A name that looks like markup: the console must show it as text.
    jms(&mut java, "fill console.<b>bold</b><img%20src=x> 1")?;
    jms(&mut java, "deadletter console.work 3")?;
    tests::wait_until("3 dead letters in ActiveMQ.DLQ", || async {
        queue(&admin, "ActiveMQ.DLQ").await.is_ok_and(|dlq| dlq.pending == 3)
    })
    .await?;

    let screenshots = screenshot_dir();
    let mut driver_command = Command::new("node");
    driver_command
        .arg(browser_dir().join("console.mjs"))
        .args(["--url", &url, "--user", USER, "--password", PASSWORD])
        .args(["--timeout-ms", DRIVER_TIMEOUT_MS, "--chromium"])
        .arg(chromium())
        .arg("--screenshots")
        .arg(&screenshots)
        .current_dir(browser_dir());
    let mut driver = LineProcess::spawn("the browser driver", driver_command)?;
    let deadline = Instant::now() + RUN_TIMEOUT;
    let mut seen = Vec::new();
    let mut relay = || -> anyhow::Result<String> {
        loop {
            let Some(line) = driver.next_line(deadline)? else {
                bail!("the driver ended without a result");
            };
            if let Some(command) = line.strip_prefix("jms ") {
                let answer = jms(&mut java, command)?;
                driver.write_line(&answer)?;
            } else if let Some(path) = line.strip_prefix("screenshot ") {
                println!("console screenshot: {path}");
            } else if let Some(result) = line.strip_prefix("result ") {
                return Ok(result.to_owned());
            }
            seen.push(line);
        }
    };
    let relayed = relay();
    let stderr = driver.finish();
    let result = relayed.with_context(|| {
        format!("--- driver stdout:\n{}\n--- driver stderr:\n{stderr}", seen.join("\n"))
    })?;
    ensure!(
        result.starts_with("{\"ok\":true"),
        "the browser steps failed: {result}\n--- steps:\n{}\n--- driver stderr:\n{stderr}",
        seen.join("\n")
    );
    for line in seen.iter().filter(|line| line.starts_with("step ")) {
        println!("console {line}");
    }
    // When each step ended, from the driver's log.
    for line in stderr.lines().filter(|line| line.ends_with(" done")) {
        println!("console {line}");
    }
    let steps = [
        "login",
        "queues",
        "markup_queue",
        "browse",
        "paging",
        "retry",
        "purge",
        "send",
        "move",
        "delete",
        "subscriptions",
        "connections",
        "chart",
        "cross_origin",
    ];
    for step in steps {
        let prefix = format!("step {{\"name\":\"{step}\"");
        ensure!(seen.iter().any(|line| line.starts_with(&prefix)), "no step {step}: {result}");
    }
    for name in ["dashboard", "queue-page", "message-detail"] {
        let path = screenshots.join(format!("{name}.png"));
        let size = std::fs::metadata(&path).map(|m| m.len()).unwrap_or(0);
        ensure!(size > 1000, "screenshot {} is missing or empty", path.display());
    }

    // What the browser did, read back from the endpoint.
    let orders = queue(&admin, "console.orders").await?;
    ensure!(orders.pending + orders.in_flight == 0, "console.orders after the purge: {orders:?}");
    let keep = queue(&admin, "console.keep").await?;
    ensure!(keep.pending == 2, "the cross-site attempts purged console.keep: {keep:?}");
    let dlq = queue(&admin, "ActiveMQ.DLQ").await?;
    ensure!(dlq.pending + dlq.in_flight == 0, "ActiveMQ.DLQ after the retry: {dlq:?}");
    let inbox = admin.request("GET", "/api/destinations/queue/console.inbox").await?;
    ensure!(inbox.status == 404, "console.inbox was deleted: {inbox:?}");
    let work = queue(&admin, "console.work").await?;
    ensure!(work.pending + work.in_flight == 0 && work.dequeued >= 3, "console.work: {work:?}");

    let _ = java.write_line("quit");
    java.finish();
    broker.shutdown().await;
    Ok(())
}

/// The console's files come from the binary, to admin users only, each with the security
/// headers; `/admin` (ActiveMQ's console address) is the same page.
#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn the_console_is_served_to_admin_users_with_its_security_headers() -> anyhow::Result<()> {
    let broker = start().await?;
    let url = format!("http://{}", broker.admin_addr().context("the admin endpoint is on")?);
    let anonymous = AdminClient::new(&url)?;
    let refused = anonymous.request("GET", "/").await?;
    ensure!(refused.status == 401, "{refused:?}");
    ensure!(refused.header("www-authenticate").is_some_and(|v| v.starts_with("Basic")));
    let admin = anonymous.with_credentials(Some((USER.to_owned(), PASSWORD.to_owned())));
    let page = admin.request("GET", "/").await?;
    ensure!(page.status == 200, "{page:?}");
    ensure!(page.header("content-type") == Some("text/html; charset=utf-8"), "{page:?}");
    ensure!(page.body.contains("<script type=\"module\" src=\"/console/app.js\">"), "{page:?}");
    ensure!(admin.request("GET", "/admin").await?.body == page.body, "/admin is the console");
    for (path, kind) in [
        ("/", "text/html"),
        ("/console/app.js", "text/javascript"),
        ("/console/api.js", "text/javascript"),
        ("/console/dom.js", "text/javascript"),
        ("/console/chart.js", "text/javascript"),
        ("/console/console.css", "text/css"),
    ] {
        let answer = admin.request("GET", path).await?;
        ensure!(answer.status == 200, "{path}: {}", answer.status);
        ensure!(answer.header("content-type").is_some_and(|t| t.starts_with(kind)), "{path}");
        let policy = answer.header("content-security-policy").unwrap_or_default();
        ensure!(
            policy.contains("default-src 'self'")
                && policy.contains("script-src 'self'")
                && policy.contains("frame-ancestors 'none'")
                && !policy.contains("unsafe"),
            "{path}: {policy}"
        );
        ensure!(answer.header("x-content-type-options") == Some("nosniff"), "{path}");
        ensure!(answer.header("referrer-policy") == Some("no-referrer"), "{path}");
    }
    let missing = admin.request("GET", "/console/nothing.js").await?;
    ensure!(missing.status == 404, "{missing:?}");
    let post = admin.request("POST", "/").await?;
    ensure!(post.status == 405, "{post:?}");
    broker.shutdown().await;
    Ok(())
}
