//! In a real browser: Debian's headless Chromium, driven by playwright-core from
//! `tests/browser/run.mjs`, loads a page (`tests/browser/index.html`, `page.js`) that connects
//! mqtt.js (MQTT 3.1.1 and 5.0, subprotocol `mqtt`) and stomp.js (STOMP 1.2, `v12.stomp`) to
//! the broker's `ws://` connector and exchanges messages with the real ActiveMQ JMS client
//! (OpenWire), the `browser` check of `tests/java/MqttJmsChecks.java`:
//!
//! - mqtt.js publishes to `browser/out` (binary payloads, QoS 1; a 5.0 user property): the
//!   JMS subscriber of topic `browser.out` gets the same bytes as BytesMessages, the user
//!   property as a string property;
//! - a JMS TextMessage (with a string property) and a BytesMessage to topic `browser.in`
//!   reach both mqtt.js subscribers of `browser/in`;
//! - stomp.js's SEND to `/queue/browser.stomp.out` reaches a JMS queue consumer, and a JMS
//!   TextMessage to topic `browser.stomp.in` reaches stomp.js's subscription.
//!
//! The Java check prints `ready` once its consumers exist (then the driver starts); the driver
//! prints `ready {json}` once every client in the page is connected and subscribed (then this
//! test tells the Java check, on its stdin, to send) and `result {json}` at the end; the Java
//! check checks what the page sent and prints `ok browser`. What the page received is asserted
//! here. `scripts/test` installs Debian's `chromium`, runs `npm ci` in `tests/browser` and
//! compiles `tests/java`; when node, Chromium or the npm packages are missing the test skips
//! with a printed reason, unless `FERROMQ_REQUIRE_BROWSER` is set (as `scripts/test` does),
//! and then it fails. Without `FERROMQ_JMS_CLASSPATH` it fails, as the `jms` tests do.
//!
//! ```text
//! cargo test -p tests --test integration browser:: -- --nocapture
//! ```

use std::collections::BTreeMap;
use std::io::{BufRead, BufReader, Read};
use std::path::{Path, PathBuf};
use std::process::{Child, Command, Stdio};
use std::time::{Duration, Instant};

use anyhow::{bail, ensure, Context};
use broker::BrokerHandle;

use crate::stomp_py::repository_root;

/// Set to make missing node, Chromium or npm packages a failure instead of a skip.
const REQUIRE_BROWSER: &str = "FERROMQ_REQUIRE_BROWSER";

/// The longest the driver may run (Chromium starts in about a second here).
const RUN_TIMEOUT: Duration = Duration::from_secs(120);
/// What the driver gives Playwright for each wait (launch, page load, the page's own waits).
const DRIVER_TIMEOUT_MS: &str = "60000";

/// The bytes mqtt.js sends before its text (page.js's `MQTT_PREFIX`): not UTF-8, so a body
/// that went through a text conversion would not compare equal.
const MQTT_PREFIX: [u8; 4] = [0x00, 0x01, 0xfe, 0xff];
const MQTT_V4_TEXT: &str = "mqtt.js 3.1.1 → ferromq ✓";
const MQTT_V5_TEXT: &str = "mqtt.js 5.0 → ferromq ✓";
/// What the Java check sends to the page (`MqttJmsChecks`'s `TO_*`).
const TO_MQTT_TEXT: &str = "JMS → mqtt.js ✓";
const TO_MQTT_BYTES: [u8; 6] = [0x00, 0xff, 0x80, 0x7f, 0x0d, 0x0a];
const TO_STOMP_TEXT: &str = "JMS → stomp.js ✓";
/// How long the Java check may take to start and report `ready`, and to finish after the page.
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

/// `Some(node)` when node, Chromium and the npm packages are there; `None` (after printing
/// why) when something is missing and [`REQUIRE_BROWSER`] is not set; an error when it is.
fn prerequisites() -> anyhow::Result<Option<PathBuf>> {
    let mut missing = Vec::new();
    let node = PathBuf::from("node");
    let node_runs = Command::new(&node)
        .arg("--version")
        .stdout(Stdio::null())
        .stderr(Stdio::null())
        .status()
        .is_ok_and(|status| status.success());
    if !node_runs {
        missing.push("node (Node.js 20 or later) on PATH".to_owned());
    }
    let chromium = chromium();
    if !chromium.exists() {
        missing.push(format!("{} (Debian's chromium package)", chromium.display()));
    }
    let dir = browser_dir();
    for file in [
        "node_modules/playwright-core/package.json",
        "node_modules/mqtt/dist/mqtt.min.js",
        "node_modules/@stomp/stompjs/bundles/stomp.umd.min.js",
    ] {
        if !dir.join(file).exists() {
            missing.push(format!("{} (npm ci in tests/browser)", dir.join(file).display()));
        }
    }
    if missing.is_empty() {
        return Ok(Some(node));
    }
    let missing = missing.join(", ");
    if std::env::var_os(REQUIRE_BROWSER).is_some() {
        bail!(
            "the browser test cannot run, missing: {missing}; {REQUIRE_BROWSER} is set: run \
             scripts/test, which installs Debian's chromium and runs npm ci in tests/browser"
        );
    }
    eprintln!(
        "skipping the browser test, missing: {missing} (scripts/test installs Debian's \
         chromium and runs npm ci in tests/browser; set {REQUIRE_BROWSER} to fail instead)"
    );
    Ok(None)
}

/// The driver's process, killed if the test ends before it does.
struct Driver {
    child: Child,
    lines: tokio::sync::mpsc::UnboundedReceiver<String>,
    stderr: Option<std::thread::JoinHandle<String>>,
    deadline: Instant,
}

impl Driver {
    fn spawn(node: &Path, ws: &str) -> anyhow::Result<Driver> {
        let dir = browser_dir();
        let mut child = Command::new(node)
            .arg(dir.join("run.mjs"))
            .args(["--ws", ws, "--timeout-ms", DRIVER_TIMEOUT_MS, "--chromium"])
            .arg(chromium())
            .current_dir(&dir)
            .stdin(Stdio::null())
            .stdout(Stdio::piped())
            .stderr(Stdio::piped())
            .spawn()
            .with_context(|| format!("cannot run {} {}/run.mjs", node.display(), dir.display()))?;
        let stdout = child.stdout.take().context("the driver's stdout")?;
        let (sender, lines) = tokio::sync::mpsc::unbounded_channel();
        std::thread::spawn(move || {
            for line in BufReader::new(stdout).lines() {
                let Ok(line) = line else { break };
                if sender.send(line).is_err() {
                    break;
                }
            }
        });
        let mut stderr = child.stderr.take().context("the driver's stderr")?;
        let stderr = std::thread::spawn(move || {
            let mut text = String::new();
            let _ = stderr.read_to_string(&mut text);
            text
        });
        Ok(Driver { child, lines, stderr: Some(stderr), deadline: Instant::now() + RUN_TIMEOUT })
    }

    /// The JSON after `kind ` on the driver's next line of that kind; `None` when the driver
    /// ended (or timed out) first, with every other line it printed.
    async fn next(&mut self, kind: &str) -> (Option<Json>, Vec<String>) {
        let mut other = Vec::new();
        let prefix = format!("{kind} ");
        loop {
            let left = self.deadline.saturating_duration_since(Instant::now());
            match tokio::time::timeout(left, self.lines.recv()).await {
                Ok(Some(line)) => match line.strip_prefix(&prefix) {
                    Some(json) => match Json::parse(json) {
                        Ok(value) => return (Some(value), other),
                        Err(error) => other.push(format!("{line}  <- not JSON: {error}")),
                    },
                    None => other.push(line),
                },
                Ok(None) => return (None, other),
                Err(_) => {
                    other.push(format!("(no `{kind}` line within {RUN_TIMEOUT:?}: killed)"));
                    let _ = self.child.kill();
                    return (None, other);
                }
            }
        }
    }

    /// Waits for the exit (killing the driver at the deadline); its status and stderr.
    async fn finish(mut self) -> anyhow::Result<(std::process::ExitStatus, String)> {
        let status = loop {
            if let Some(status) = self.child.try_wait()? {
                break status;
            }
            if Instant::now() >= self.deadline {
                let _ = self.child.kill();
                break self.child.wait()?;
            }
            tokio::time::sleep(Duration::from_millis(20)).await;
        };
        let stderr = self.stderr.take().map(|thread| thread.join().unwrap_or_default());
        Ok((status, stderr.unwrap_or_default()))
    }
}

impl Drop for Driver {
    fn drop(&mut self) {
        if self.child.try_wait().ok().flatten().is_none() {
            let _ = self.child.kill();
            let _ = self.child.wait();
        }
    }
}

/// A broker with `ws://`, `stomp://` and `tcp://` (OpenWire, for the JMS client) connectors on
/// ephemeral ports.
async fn start() -> anyhow::Result<BrokerHandle> {
    tests::start_broker(|config| {
        config.transport.connectors = vec![
            "ws://127.0.0.1:0".parse().expect("a valid connector URI"),
            "stomp://127.0.0.1:0".parse().expect("a valid connector URI"),
            "tcp://127.0.0.1:0".parse().expect("a valid connector URI"),
        ];
    })
    .await
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn mqtt_js_and_stomp_js_in_chromium_exchange_messages_with_the_jms_client(
) -> anyhow::Result<()> {
    let Some(node) = prerequisites()? else {
        return Ok(());
    };
    crate::jms::classpath()?;
    let broker = start().await?;
    let result = exchange(&broker, &node).await;
    broker.shutdown().await;
    result
}

async fn exchange(broker: &BrokerHandle, node: &Path) -> anyhow::Result<()> {
    let ws = broker
        .connectors()
        .iter()
        .find(|connector| connector.uri.scheme == conf::Scheme::Ws)
        .map(|connector| connector.local_addr)
        .context("the broker has no ws:// connector")?;
    let openwire = broker.openwire_addr().context("the broker has no tcp:// connector")?;
    // Subscribed before the page starts, so nothing it publishes can be missed.
    let mut jms = crate::mqtt_cross::spawn_jms(&format!("tcp://{openwire}"), "browser")?;
    let line = tokio::task::block_in_place(|| {
        jms.wait_line(JMS_TIMEOUT, |line| line == "ready" || line.starts_with("FAIL"))
    })?;
    if line != "ready" {
        let finished = tokio::task::block_in_place(|| jms.finish(JMS_TIMEOUT))?;
        bail!("the JMS check failed before it was ready: {}", finished.transcript());
    }

    let mut driver = Driver::spawn(node, &format!("ws://{ws}"))?;
    let (ready, other) = driver.next("ready").await;
    let Some(ready) = ready else {
        let (status, stderr) = driver.finish().await?;
        bail!(
            "the browser driver never reported `ready` ({status})\n--- stdout\n{}\n--- stderr\n{stderr}",
            other.join("\n")
        );
    };
    let transcript_ready = ready.to_string();
    // Each WebSocket the page opened, with the subprotocol the broker chose.
    let protocols: Vec<&str> = ready
        .at("sockets")
        .items()
        .iter()
        .map(|socket| socket.at("protocol").str().unwrap_or("(none)"))
        .collect();
    ensure!(
        protocols == ["mqtt", "mqtt", "v12.stomp"],
        "subprotocols chosen for mqtt.js 3.1.1, 5.0 and stomp.js: {protocols:?}\n{transcript_ready}"
    );
    for version in ["4", "5"] {
        let connack = ready.at("mqtt").at(version).at("connack");
        let code = if version == "4" { connack.at("returnCode") } else { connack.at("reasonCode") };
        ensure!(code.num() == Some(0.0), "mqtt.js {version}'s CONNACK: {connack}");
        let granted = ready.at("mqtt").at(version).at("granted");
        ensure!(granted.items().len() == 1 && granted.items()[0].num() == Some(1.0), "{granted}");
    }
    ensure!(
        ready.at("stomp").at("connected").at("version").str() == Some("1.2"),
        "stomp.js's CONNECTED: {}",
        ready.at("stomp")
    );

    // Every client in the page is subscribed: the JMS check sends to it, then checks what the
    // page publishes.
    jms.write_line("the page is subscribed")?;

    let (result, other) = driver.next("result").await;
    let (status, stderr) = driver.finish().await?;
    let transcript = format!("({status})\n--- stdout\n{}\n--- stderr\n{stderr}", other.join("\n"));
    let jms = tokio::task::block_in_place(|| jms.finish(JMS_TIMEOUT))?;
    let Some(result) = result else {
        bail!(
            "the browser driver printed no result {transcript}\nthe JMS check: {}",
            jms.transcript()
        );
    };
    ensure!(
        result.at("ok").bool() == Some(true) && status.success(),
        "the browser run failed: {result}\n{transcript}\nthe JMS check: {}",
        jms.transcript()
    );
    // mqtt.js -> JMS and stomp.js -> JMS: checked by the Java check (the same bytes, the 5.0
    // user property as a JMS string property, stomp.js's text on the queue).
    crate::mqtt_cross::reported_ok(&jms, "browser")?;
    eprintln!(
        "{} at {} over ws://{ws}: subprotocols {protocols:?}",
        result.at("browser").str().unwrap_or("Chromium"),
        result.at("origin").str().unwrap_or("?")
    );
    let state = result.at("state");
    ensure!(state.at("errors").items().is_empty(), "errors in the page: {state}");
    for (version, text) in [("4", MQTT_V4_TEXT), ("5", MQTT_V5_TEXT)] {
        let sent = state.at("sent").at(version).str();
        ensure!(sent == Some(hex(&with_prefix(text)).as_str()), "the page sent {sent:?}");
    }

    // JMS -> mqtt.js, both versions: the text as UTF-8 and the bytes as they are, on
    // browser/in; the JMS string property as a 5.0 user property.
    for version in ["4", "5"] {
        let received = state.at("mqtt").at(version).at("received").items();
        let seen: Vec<(Option<&str>, Option<&str>)> =
            received.iter().map(|m| (m.at("topic").str(), m.at("hex").str())).collect();
        let text = hex(TO_MQTT_TEXT.as_bytes());
        let bytes = hex(&TO_MQTT_BYTES);
        ensure!(
            seen == [
                (Some("browser/in"), Some(text.as_str())),
                (Some("browser/in"), Some(bytes.as_str()))
            ],
            "mqtt.js {version} received {seen:?}"
        );
        // The JMS client sends persistent messages by default: QoS 1 at a QoS 1 subscription.
        ensure!(received.iter().all(|m| m.at("qos").num() == Some(1.0)), "{}", state.at("mqtt"));
        if version == "5" {
            let user = received[0].at("userProperties").at("origin");
            ensure!(user.str() == Some("jms"), "mqtt.js 5.0's user properties: {}", received[0]);
        }
    }

    // JMS topic -> stomp.js.
    let received = state.at("stomp").at("received").items();
    ensure!(received.len() == 1, "stomp.js received {}", state.at("stomp"));
    ensure!(received[0].at("body").str() == Some(TO_STOMP_TEXT), "{}", received[0]);
    ensure!(
        received[0].at("destination").str() == Some("/topic/browser.stomp.in"),
        "{}",
        received[0]
    );
    Ok(())
}

fn with_prefix(text: &str) -> Vec<u8> {
    let mut bytes = MQTT_PREFIX.to_vec();
    bytes.extend_from_slice(text.as_bytes());
    bytes
}

fn hex(bytes: &[u8]) -> String {
    bytes.iter().map(|b| format!("{b:02x}")).collect()
}

// --- the driver's JSON -----------------------------------------------------------------------

/// Just enough JSON for the driver's lines (the tests crate has no JSON library).
#[derive(Debug, Clone, PartialEq)]
enum Json {
    Null,
    Bool(bool),
    Num(f64),
    Str(String),
    Arr(Vec<Json>),
    Obj(BTreeMap<String, Json>),
}

const NULL: Json = Json::Null;

impl Json {
    fn parse(text: &str) -> anyhow::Result<Json> {
        let mut parser = Parser { bytes: text.as_bytes(), at: 0 };
        let value = parser.value()?;
        parser.space();
        ensure!(parser.at == parser.bytes.len(), "trailing characters at {}", parser.at);
        Ok(value)
    }

    /// A member of an object (`Null` when absent or not an object).
    fn at(&self, key: &str) -> &Json {
        match self {
            Json::Obj(members) => members.get(key).unwrap_or(&NULL),
            _ => &NULL,
        }
    }

    fn items(&self) -> &[Json] {
        match self {
            Json::Arr(items) => items,
            _ => &[],
        }
    }

    fn str(&self) -> Option<&str> {
        match self {
            Json::Str(text) => Some(text),
            _ => None,
        }
    }

    fn num(&self) -> Option<f64> {
        match self {
            Json::Num(n) => Some(*n),
            _ => None,
        }
    }

    fn bool(&self) -> Option<bool> {
        match self {
            Json::Bool(b) => Some(*b),
            _ => None,
        }
    }
}

impl std::fmt::Display for Json {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        match self {
            Json::Null => f.write_str("null"),
            Json::Bool(b) => write!(f, "{b}"),
            Json::Num(n) => write!(f, "{n}"),
            Json::Str(s) => write!(f, "{s:?}"),
            Json::Arr(items) => {
                f.write_str("[")?;
                for (i, item) in items.iter().enumerate() {
                    if i > 0 {
                        f.write_str(",")?;
                    }
                    write!(f, "{item}")?;
                }
                f.write_str("]")
            }
            Json::Obj(members) => {
                f.write_str("{")?;
                for (i, (key, value)) in members.iter().enumerate() {
                    if i > 0 {
                        f.write_str(",")?;
                    }
                    write!(f, "{key:?}:{value}")?;
                }
                f.write_str("}")
            }
        }
    }
}

struct Parser<'a> {
    bytes: &'a [u8],
    at: usize,
}

impl Parser<'_> {
    fn space(&mut self) {
        while self.bytes.get(self.at).is_some_and(|b| b.is_ascii_whitespace()) {
            self.at += 1;
        }
    }

    fn peek(&mut self) -> anyhow::Result<u8> {
        self.space();
        self.bytes.get(self.at).copied().context("unexpected end of JSON")
    }

    fn expect(&mut self, byte: u8) -> anyhow::Result<()> {
        ensure!(self.peek()? == byte, "expected `{}` at {}", byte as char, self.at);
        self.at += 1;
        Ok(())
    }

    fn literal(&mut self, word: &str, value: Json) -> anyhow::Result<Json> {
        ensure!(self.bytes[self.at..].starts_with(word.as_bytes()), "bad literal at {}", self.at);
        self.at += word.len();
        Ok(value)
    }

    fn value(&mut self) -> anyhow::Result<Json> {
        match self.peek()? {
            b'{' => {
                self.at += 1;
                let mut members = BTreeMap::new();
                if self.peek()? == b'}' {
                    self.at += 1;
                    return Ok(Json::Obj(members));
                }
                loop {
                    let key = self.string()?;
                    self.expect(b':')?;
                    members.insert(key, self.value()?);
                    match self.peek()? {
                        b',' => self.at += 1,
                        b'}' => {
                            self.at += 1;
                            return Ok(Json::Obj(members));
                        }
                        other => bail!("unexpected `{}` at {}", other as char, self.at),
                    }
                }
            }
            b'[' => {
                self.at += 1;
                let mut items = Vec::new();
                if self.peek()? == b']' {
                    self.at += 1;
                    return Ok(Json::Arr(items));
                }
                loop {
                    items.push(self.value()?);
                    match self.peek()? {
                        b',' => self.at += 1,
                        b']' => {
                            self.at += 1;
                            return Ok(Json::Arr(items));
                        }
                        other => bail!("unexpected `{}` at {}", other as char, self.at),
                    }
                }
            }
            b'"' => Ok(Json::Str(self.string()?)),
            b't' => self.literal("true", Json::Bool(true)),
            b'f' => self.literal("false", Json::Bool(false)),
            b'n' => self.literal("null", Json::Null),
            _ => {
                let start = self.at;
                while self.bytes.get(self.at).is_some_and(|b| b"+-.eE0123456789".contains(b)) {
                    self.at += 1;
                }
                let number = std::str::from_utf8(&self.bytes[start..self.at])?;
                Ok(Json::Num(number.parse().with_context(|| format!("bad number at {start}"))?))
            }
        }
    }

    fn string(&mut self) -> anyhow::Result<String> {
        self.expect(b'"')?;
        let mut out = String::new();
        loop {
            let start = self.at;
            while self.bytes.get(self.at).is_some_and(|&b| b != b'"' && b != b'\\') {
                self.at += 1;
            }
            out.push_str(std::str::from_utf8(&self.bytes[start..self.at])?);
            match self.bytes.get(self.at).copied().context("unterminated string")? {
                b'"' => {
                    self.at += 1;
                    return Ok(out);
                }
                _ => {
                    let escape = *self.bytes.get(self.at + 1).context("unterminated escape")?;
                    self.at += 2;
                    match escape {
                        b'"' => out.push('"'),
                        b'\\' => out.push('\\'),
                        b'/' => out.push('/'),
                        b'b' => out.push('\u{8}'),
                        b'f' => out.push('\u{c}'),
                        b'n' => out.push('\n'),
                        b'r' => out.push('\r'),
                        b't' => out.push('\t'),
                        b'u' => {
                            let high = self.hex4()?;
                            let code = if (0xd800..0xdc00).contains(&high)
                                && self.bytes[self.at..].starts_with(b"\\u")
                            {
                                self.at += 2;
                                let low = self.hex4()?;
                                0x10000
                                    + ((high - 0xd800) << 10)
                                    + (low.wrapping_sub(0xdc00) & 0x3ff)
                            } else {
                                high
                            };
                            out.push(char::from_u32(code).unwrap_or('\u{fffd}'));
                        }
                        other => bail!("bad escape `\\{}`", other as char),
                    }
                }
            }
        }
    }

    fn hex4(&mut self) -> anyhow::Result<u32> {
        let digits = self.bytes.get(self.at..self.at + 4).context("short \\u escape")?;
        self.at += 4;
        Ok(u32::from_str_radix(std::str::from_utf8(digits)?, 16)?)
    }
}

#[test]
fn the_json_reader_reads_what_json_stringify_writes() -> anyhow::Result<()> {
    let value = Json::parse(
        r#" {"a":[1,-2.5e3,true,false,null],"s":"x\"\\\/\n\u00e9\ud83d\ude00→","o":{}} "#,
    )?;
    assert_eq!(value.at("a").items().len(), 5);
    assert_eq!(value.at("a").items()[1].num(), Some(-2500.0));
    assert_eq!(value.at("s").str(), Some("x\"\\/\né😀→"));
    assert_eq!(value.at("o"), &Json::Obj(BTreeMap::new()));
    assert_eq!(value.at("missing").at("deeper"), &Json::Null);
    assert!(Json::parse("{\"a\":1,}").is_err() && Json::parse("[1] x").is_err());
    Ok(())
}
