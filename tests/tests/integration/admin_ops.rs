//! The admin endpoint's operations (issue 22): browse, send, remove, purge, delete, move, copy
//! and retry through HTTP, with STOMP clients filling and draining the queues; every refusal
//! (401, 403 for a non-admin, a cross-origin request or a missing token, 404, 409, 400); what
//! purge, delete and move keep and remove, beyond the memory window, across a restart on the
//! journal and on SQLite; the OpenAPI description against the routes it names; and the JMS
//! client's `destroyDestination` against ferromq and Apache ActiveMQ
//! (`tests/java/DestroyDestinationChecks.java`).

use std::collections::BTreeSet;
use std::net::SocketAddr;

use anyhow::{bail, ensure, Context as _};
use broker::admin::{AdminClient, AdminToken, DestinationStats, MessagePage, MessageView};
use broker::BrokerHandle;
use client::{AckMode, ConnectOptions};
use tests::{
    assert_nothing_arrives, bodies, connect, connect_as, connect_with, durable_key, recv, recv_n,
    send_persistent, start_broker, stored_count, stored_count_of, wait_until, PERSISTENT,
    SUBSCRIPTION_NAME,
};

/// An answer: status and body.
#[derive(Debug)]
struct Answer {
    status: u16,
    body: String,
}

/// The endpoint as a client that sets its own headers (the shared `AdminClient` sends none
/// and no body).
struct Endpoint {
    addr: SocketAddr,
    credentials: Option<(String, String)>,
}

impl Endpoint {
    fn of(broker: &BrokerHandle, credentials: Option<(&str, &str)>) -> anyhow::Result<Endpoint> {
        let addr = broker.admin_addr().context("the admin endpoint is on")?;
        let credentials =
            credentials.map(|(user, password)| (user.to_owned(), password.to_owned()));
        Ok(Endpoint { addr, credentials })
    }

    fn reader(&self) -> anyhow::Result<AdminClient> {
        Ok(AdminClient::new(&format!("http://{}", self.addr))?
            .with_credentials(self.credentials.clone()))
    }

    async fn token(&self) -> anyhow::Result<String> {
        Ok(self.reader()?.get_json::<AdminToken>("/api/token").await?.token)
    }

    /// `method path` with `headers` and `body`, over a connection of its own.
    async fn call(
        &self,
        method: &str,
        path: &str,
        headers: &[(&str, &str)],
        body: &str,
    ) -> anyhow::Result<Answer> {
        use tokio::io::{AsyncReadExt as _, AsyncWriteExt as _};
        let mut request = format!(
            "{method} {path} HTTP/1.1\r\nHost: {}\r\nConnection: close\r\nContent-Length: {}\r\n",
            self.addr,
            body.len()
        );
        if let Some((user, password)) = &self.credentials {
            request.push_str(&format!("Authorization: Basic {}\r\n", basic(user, password)));
        }
        for (name, value) in headers {
            request.push_str(&format!("{name}: {value}\r\n"));
        }
        request.push_str("\r\n");
        request.push_str(body);
        let mut stream = tokio::net::TcpStream::connect(self.addr).await?;
        stream.write_all(request.as_bytes()).await?;
        let mut raw = Vec::new();
        tokio::time::timeout(std::time::Duration::from_secs(30), stream.read_to_end(&mut raw))
            .await
            .context("the endpoint did not answer within 30 s")??;
        let raw = String::from_utf8(raw)?;
        let (head, body) = raw.split_once("\r\n\r\n").context("an HTTP answer")?;
        let status = head.get(9..12).context("a status line")?.parse()?;
        Ok(Answer { status, body: body.to_owned() })
    }

    /// A state-changing request with the token, as the console sends it.
    async fn act(&self, method: &str, path: &str, body: &str) -> anyhow::Result<Answer> {
        let token = self.token().await?;
        let origin = format!("http://{}", self.addr);
        let headers = [
            ("X-Ferromq-Token", token.as_str()),
            ("Origin", origin.as_str()),
            ("Sec-Fetch-Site", "same-origin"),
            ("Content-Type", "application/json"),
        ];
        self.call(method, path, &headers, body).await
    }

    /// [`Endpoint::act`], which must answer 200; the body.
    async fn act_ok(&self, method: &str, path: &str, body: &str) -> anyhow::Result<String> {
        let answer = self.act(method, path, body).await?;
        ensure!(answer.status == 200, "{method} {path} {body}: {answer:?}");
        Ok(answer.body)
    }
}

pub(crate) fn basic(user: &str, password: &str) -> String {
    // A tiny base64 encoder: the test crate has no base64 of its own.
    const ALPHABET: &[u8] = b"ABCDEFGHIJKLMNOPQRSTUVWXYZabcdefghijklmnopqrstuvwxyz0123456789+/";
    let input = format!("{user}:{password}").into_bytes();
    let mut out = String::new();
    for chunk in input.chunks(3) {
        let b = [chunk[0], *chunk.get(1).unwrap_or(&0), *chunk.get(2).unwrap_or(&0)];
        let n = (u32::from(b[0]) << 16) | (u32::from(b[1]) << 8) | u32::from(b[2]);
        for i in 0..4 {
            if i <= chunk.len() {
                out.push(ALPHABET[((n >> (18 - 6 * i)) & 63) as usize] as char);
            } else {
                out.push('=');
            }
        }
    }
    out
}

/// `"name": value` as the endpoint writes its answers (pretty JSON).
fn field(name: &str, value: impl std::fmt::Display) -> String {
    format!("\"{name}\": {value}")
}

pub(crate) fn encode(text: &str) -> String {
    text.bytes()
        .map(|b| match b {
            b'A'..=b'Z' | b'a'..=b'z' | b'0'..=b'9' | b'.' | b'-' | b'_' => (b as char).to_string(),
            other => format!("%{other:02X}"),
        })
        .collect()
}

async fn stats(endpoint: &Endpoint, queue: &str) -> anyhow::Result<Option<DestinationStats>> {
    let answer = endpoint.call("GET", &format!("/api/destinations/queue/{queue}"), &[], "").await?;
    match answer.status {
        404 => Ok(None),
        200 => Ok(Some(
            endpoint.reader()?.get_json(&format!("/api/destinations/queue/{queue}")).await?,
        )),
        _ => bail!("{answer:?}"),
    }
}

fn user(name: &str, password: &str, group: &str) -> anyhow::Result<conf::UserEntry> {
    Ok(conf::UserEntry {
        name: name.to_owned(),
        password: broker::security::hash_password(password).map_err(anyhow::Error::msg)?,
        groups: vec![group.to_owned()],
    })
}

/// Every refusal: 401 without credentials, 403 for a user outside `[admin] groups`, for a
/// cross-origin or cross-site request and without (or with a wrong) token, 404 for what does
/// not exist, 409 for a queue with consumers (unless forced, which closes them), 400 for an
/// advisory topic, a bad selector, a move to itself.
#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn operations_refuse_what_they_must() -> anyhow::Result<()> {
    let users = vec![user("root", "secret", "admins")?, user("alice", "wonderland", "users")?];
    let broker = start_broker(|config| {
        config.authentication.enabled = true;
        config.users = users;
    })
    .await?;
    let root = Endpoint::of(&broker, Some(("root", "secret")))?;
    let alice = Endpoint::of(&broker, Some(("alice", "wonderland")))?;
    let nobody = Endpoint::of(&broker, None)?;
    let login = ConnectOptions {
        login: Some("root".to_owned()),
        passcode: Some("secret".to_owned()),
        ..ConnectOptions::default()
    };
    let stomp = connect_with(&broker, login.clone()).await?;
    send_persistent(&stomp, "/queue/ops.refused", "m", 3).await?;

    ensure!(nobody.call("GET", "/api/token", &[], "").await?.status == 401);
    ensure!(alice.call("GET", "/api/token", &[], "").await?.status == 403);
    let token = root.token().await?;
    ensure!(token.len() >= 24, "{token}");

    let purge = "/api/destinations/queue/ops.refused/purge";
    let origin = format!("http://{}", root.addr);
    for (headers, why) in [
        (vec![], "no token"),
        (vec![("X-Ferromq-Token", "guess")], "a wrong token"),
        (
            vec![("X-Ferromq-Token", token.as_str()), ("Origin", "http://evil.example")],
            "another origin",
        ),
        (
            vec![("X-Ferromq-Token", token.as_str()), ("Origin", "https://evil.example:8161")],
            "another origin over https",
        ),
        (vec![("X-Ferromq-Token", token.as_str()), ("Sec-Fetch-Site", "cross-site")], "cross-site"),
        (vec![("X-Ferromq-Token", token.as_str()), ("Sec-Fetch-Site", "same-site")], "same-site"),
    ] {
        let answer = root.call("POST", purge, &headers, "").await?;
        ensure!(answer.status == 403, "{why}: {answer:?}");
    }
    let alice_token = [("X-Ferromq-Token", token.as_str())];
    ensure!(alice.call("POST", purge, &alice_token, "").await?.status == 403, "a non-admin");
    ensure!(nobody.call("POST", purge, &alice_token, "").await?.status == 401, "no credentials");
    ensure!(stored_count(&broker, "ops.refused")? == 3, "nothing refused changed anything");
    let same_origin = [("X-Ferromq-Token", token.as_str()), ("Origin", origin.as_str())];
    let answer = root.call("POST", purge, &same_origin, "").await?;
    ensure!(answer.status == 200 && answer.body.contains(&field("removed", 3)), "{answer:?}");
    ensure!(stored_count(&broker, "ops.refused")? == 0);

    for (method, path, body, status) in [
        ("POST", "/api/destinations/queue/ops.never/purge", "", 404),
        ("DELETE", "/api/destinations/queue/ops.never", "", 404),
        ("DELETE", "/api/destinations/topic/ops.never", "", 404),
        ("POST", "/api/destinations/queue/ops.never/move", r#"{"to":"x"}"#, 404),
        ("POST", "/api/destinations/queue/ops.never/retry", "", 404),
        ("DELETE", "/api/destinations/queue/ops.refused/messages/ID%3Anone", "", 404),
        ("DELETE", "/api/destinations/topic/ActiveMQ.Advisory.Queue", "", 400),
        ("POST", "/api/destinations/queue/ops.refused/move", r#"{"to":"ops.refused"}"#, 400),
        ("POST", "/api/destinations/queue/ops.refused/move", r#"{"to":"x","selector":"a ="}"#, 400),
        ("POST", "/api/destinations/queue/ops.refused/move", "not json", 400),
        ("DELETE", "/api/destinations/queue/ops.refused?force=maybe", "", 400),
        (
            "POST",
            "/api/destinations/queue/ops.refused/messages",
            r#"{"body":"x","priority":12}"#,
            400,
        ),
        ("PUT", "/api/destinations/queue/ops.refused/purge", "", 405),
    ] {
        let answer = root.act(method, path, body).await?;
        ensure!(answer.status == status, "{method} {path} {body}: {answer:?}");
    }
    for (path, status) in [
        ("/api/destinations/queue/ops.never/messages", 404),
        ("/api/destinations/queue/ops.refused/messages?selector=a%20%3D", 400),
        ("/api/destinations/queue/ops.refused/messages?limit=401", 400),
        ("/api/destinations/queue/ops.refused/messages/ID%3Anone", 404),
    ] {
        let answer = root.call("GET", path, &[], "").await?;
        ensure!(answer.status == status, "GET {path}: {answer:?}");
    }

    // A queue with a consumer: 409, nothing deleted; forced: the consumer's connection gets
    // an ERROR and is closed, and the queue is gone with its messages.
    let consumer = connect_with(&broker, login.clone()).await?;
    let mut sub =
        consumer.subscribe("/queue/ops.busy", AckMode::Client, &[("selector", "x = 1")]).await?;
    send_persistent(&stomp, "/queue/ops.busy", "b", 2).await?;
    let busy = "/api/destinations/queue/ops.busy";
    let answer = root.act("DELETE", busy, "").await?;
    ensure!(answer.status == 409, "{answer:?}");
    ensure!(answer.body.contains("still has an active subscription"), "{answer:?}");
    ensure!(stored_count(&broker, "ops.busy")? == 2);
    let answer = root.act("DELETE", &format!("{busy}?force=true"), "").await?;
    ensure!(answer.status == 200 && answer.body.contains(&field("deleted", true)), "{answer:?}");
    let ended = tokio::time::timeout(tests::ARRIVES, sub.recv()).await;
    ensure!(matches!(ended, Ok(None)), "the forced-out consumer's subscription ends: {ended:?}");
    ensure!(stats(&root, "ops.busy").await?.is_none(), "the queue is gone");
    ensure!(stored_count(&broker, "ops.busy")? == 0, "its messages with it");
    broker.shutdown().await;
    Ok(())
}

/// Send, browse (pages, selector, one message), remove one, move and copy by selector, retry
/// dead letters to their original queue: what a STOMP consumer then receives is exactly
/// what should be where.
#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn browse_send_remove_move_copy_and_retry() -> anyhow::Result<()> {
    let broker = start_broker(|config| config.dead_letter.max_redeliveries = 0).await?;
    let admin = Endpoint::of(&broker, None)?;
    let reader = admin.reader()?;
    let messages = "/api/destinations/queue/ops.src/messages";
    let mut ids = Vec::new();
    for n in 0..5 {
        let body = format!(
            r#"{{"body":"text {n}","properties":{{"n":{n},"color":"{}","ok":true}},"priority":{},"correlation_id":"c{n}","type":"t","reply_to":"queue://replies"}}"#,
            if n % 2 == 0 { "red" } else { "blue" },
            4
        );
        let answer = admin.act_ok("POST", messages, &body).await?;
        let id = answer.split('"').nth(3).context("an id")?.to_owned();
        ensure!(id.starts_with("ID:"), "{answer}");
        ids.push(id);
    }
    admin
        .act_ok(
            "POST",
            messages,
            r#"{"body":"AAEC/w==","body_type":"bytes","persistent":false,"properties":{"n":9}}"#,
        )
        .await?;
    ensure!(stored_count(&broker, "ops.src")? == 5, "persistent sends are stored");

    let page: MessagePage = reader.get_json(&format!("{messages}?limit=2")).await?;
    ensure!(page.total == 6 && page.messages.len() == 2, "{page:?}");
    ensure!(
        page.messages[0].id == ids[0] && page.messages[1].id == ids[1],
        "delivery order: {page:?}"
    );
    let first: &MessageView = &page.messages[0];
    ensure!(
        first.body_type == "text" && first.body_preview.as_deref() == Some("text 0"),
        "{first:?}"
    );
    ensure!(first.properties.get("n").and_then(|n| n.as_i64()) == Some(0), "{first:?}");
    ensure!(first.properties.get("color").and_then(|c| c.as_str()) == Some("red"), "{first:?}");
    ensure!(
        first.correlation_id.as_deref() == Some("c0") && first.message_type.as_deref() == Some("t")
    );
    ensure!(first.reply_to.as_deref() == Some("queue://replies") && first.persistent, "{first:?}");
    ensure!(!first.redelivered && first.delivery_count == 0 && first.timestamp_ms.is_some());
    let last: MessagePage = reader.get_json(&format!("{messages}?offset=4&limit=10")).await?;
    ensure!(last.offset == 4 && last.messages.len() == 2, "{last:?}");
    let bytes = &last.messages[1];
    ensure!(
        bytes.body_type == "bytes"
            && bytes.body_preview.as_deref() == Some("AAEC/w==")
            && !bytes.persistent,
        "{bytes:?}"
    );
    let selected: MessagePage =
        reader.get_json(&format!("{messages}?selector={}", encode("n >= 3 AND n < 9"))).await?;
    let selected_ids: Vec<&str> = selected.messages.iter().map(|m| m.id.as_str()).collect();
    ensure!(
        selected.total == 2 && selected_ids == [ids[3].as_str(), ids[4].as_str()],
        "{selected:?}"
    );
    let one: MessageView = reader.get_json(&format!("{messages}/{}", encode(&ids[2]))).await?;
    ensure!(one.id == ids[2] && one.body_preview.as_deref() == Some("text 2"), "{one:?}");

    // Remove one; it is gone from the browse and the store.
    let removed = admin.act_ok("DELETE", &format!("{messages}/{}", encode(&ids[2])), "").await?;
    ensure!(removed.contains(&field("removed", 1)), "{removed}");
    ensure!(
        admin.act("DELETE", &format!("{messages}/{}", encode(&ids[2])), "").await?.status == 404
    );
    ensure!(stored_count(&broker, "ops.src")? == 4);

    // Move the red ones (0 and 4), copy n = 1: ops.dst gets 3, the source keeps 1, 3 and the
    // bytes message.
    let moved = admin
        .act_ok(
            "POST",
            "/api/destinations/queue/ops.src/move",
            r#"{"to":"ops.dst","selector":"color = 'red'"}"#,
        )
        .await?;
    ensure!(moved.contains(&field("moved", 2)), "{moved}");
    let copied = admin
        .act_ok(
            "POST",
            "/api/destinations/queue/ops.src/move",
            r#"{"to":"ops.dst","selector":"n = 1","copy":true}"#,
        )
        .await?;
    ensure!(copied.contains(&field("moved", 1)), "{copied}");
    ensure!(stored_count(&broker, "ops.src")? == 2 && stored_count(&broker, "ops.dst")? == 3);
    let stomp = connect(&broker).await?;
    let mut dst = stomp.subscribe("/queue/ops.dst", AckMode::Auto, &[]).await?;
    let mut received = Vec::new();
    for index in 0..3 {
        match recv(&mut dst).await {
            Ok(message) => received.push(message),
            Err(error) => {
                let page =
                    admin.call("GET", "/api/destinations/queue/ops.dst/messages", &[], "").await?;
                bail!(
                    "message {index}: {error:#}; got {:?}; the queue: {page:?}",
                    bodies(&received)
                );
            }
        }
    }
    let got: BTreeSet<String> = bodies(&received).into_iter().collect();
    ensure!(got == BTreeSet::from(["text 0".into(), "text 1".into(), "text 4".into()]), "{got:?}");
    let moved_ids: BTreeSet<&str> = received.iter().filter_map(|m| m.message_id()).collect();
    ensure!(
        moved_ids == BTreeSet::from([ids[0].as_str(), ids[1].as_str(), ids[4].as_str()]),
        "the JMS ids stay: {moved_ids:?}"
    );
    assert_nothing_arrives(&mut dst).await?;
    let page = admin.call("GET", "/api/destinations/queue/ops.src/messages", &[], "").await?;
    let mut src = stomp.subscribe("/queue/ops.src", AckMode::Auto, &[]).await?;
    let rest = recv_n(&mut src, 3).await.with_context(|| format!("the queue: {page:?}"))?;
    ensure!(bodies(&rest)[..2] == ["text 1", "text 3"], "{:?}", bodies(&rest));
    assert_nothing_arrives(&mut src).await?;

    // Dead letters back where they came from: two NACKed (limit 0) from ops.retry, one sent
    // to the dead-letter queue directly (no original destination: skipped).
    let mut retry = stomp.subscribe("/queue/ops.retry", AckMode::ClientIndividual, &[]).await?;
    send_persistent(&stomp, "/queue/ops.retry", "r", 2).await?;
    for message in recv_n(&mut retry, 2).await? {
        stomp.nack(&message).await?;
    }
    wait_until("both are dead letters", || async {
        stored_count(&broker, "ActiveMQ.DLQ").is_ok_and(|n| n == 2)
    })
    .await?;
    admin
        .act_ok("POST", "/api/destinations/queue/ActiveMQ.DLQ/messages", r#"{"body":"stray"}"#)
        .await?;
    let retried = admin.act_ok("POST", "/api/destinations/queue/ActiveMQ.DLQ/retry", "{}").await?;
    ensure!(
        retried.contains(&field("retried", 2)) && retried.contains(&field("skipped", 1)),
        "{retried}"
    );
    let back = recv_n(&mut retry, 2).await?;
    ensure!(bodies(&back) == ["r0", "r1"], "{:?}", bodies(&back));
    ensure!(back.iter().all(|m| !m.redelivered()), "retried messages start over: {back:?}");
    for message in &back {
        stomp.ack(message).await?;
    }
    ensure!(stored_count(&broker, "ActiveMQ.DLQ")? == 1, "the stray one stays");

    // Purge, and a topic send reaches its subscriber.
    let purged = admin.act_ok("POST", "/api/destinations/queue/ActiveMQ.DLQ/purge", "").await?;
    ensure!(purged.contains(&field("removed", 1)), "{purged}");
    let mut topic = stomp.subscribe("/topic/ops.news", AckMode::Auto, &[]).await?;
    admin
        .act_ok("POST", "/api/destinations/topic/ops.news/messages", r#"{"body":"extra"}"#)
        .await?;
    ensure!(recv(&mut topic).await?.body().as_ref() == b"extra");
    broker.shutdown().await;
    Ok(())
}

/// Purge, delete (a queue, and a topic with a durable subscription) and move keep what they
/// should and remove what they should, with most messages beyond the memory window, across a
/// restart: on the journal and on SQLite.
#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn purge_delete_and_move_hold_across_a_restart_on_the_journal() -> anyhow::Result<()> {
    operations_across_a_restart(conf::StoreKind::Journal, None).await
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn purge_delete_and_move_hold_across_a_restart_on_sqlite() -> anyhow::Result<()> {
    operations_across_a_restart(conf::StoreKind::Jdbc, Some("sqlite://ferromq.db")).await
}

async fn operations_across_a_restart(
    kind: conf::StoreKind,
    url: Option<&str>,
) -> anyhow::Result<()> {
    const MANY: usize = 300;
    let data = tempfile::tempdir()?;
    let configure = |config: &mut conf::Config| {
        config.store.kind = kind;
        if let Some(url) = url {
            config.store.url = url.to_owned();
        }
        config.broker.data_dir = data.path().to_path_buf();
        // A window of some 60 messages: most of each queue is in the store only.
        config.destinations.memory_limit = 100 << 10;
    };
    let broker = start_broker(configure).await?;
    let admin = Endpoint::of(&broker, None)?;
    let stomp = connect(&broker).await?;
    let padding = "x".repeat(512);
    for n in 0..MANY {
        let color = if n % 3 == 0 { "red" } else { "blue" };
        let body = format!("{n} {padding}");
        let headers = [PERSISTENT, ("color", color)];
        for queue in ["/queue/keep.purge", "/queue/keep.move", "/queue/keep.delete"] {
            stomp.send_with_receipt(queue, body.clone(), &headers).await?;
        }
    }
    send_persistent(&stomp, "/queue/keep.kept", "k", 10).await?;
    let durable = connect_as(&broker, "keeper").await?;
    let _sub = durable
        .subscribe("/topic/keep.topic", AckMode::Client, &[(SUBSCRIPTION_NAME, "s")])
        .await?;
    durable.disconnect().await?;
    tests::wait_durable_inactive(&broker, "keeper", "s").await?;
    send_persistent(&stomp, "/topic/keep.topic", "t", 5).await?;
    let subscription = durable_key("keep.topic", "keeper", "s");
    ensure!(stored_count_of(&broker, &subscription)? == 5);

    let purged = admin.act_ok("POST", "/api/destinations/queue/keep.purge/purge", "").await?;
    ensure!(purged.contains(&field("removed", MANY)), "{purged}");
    let moved = admin
        .act_ok(
            "POST",
            "/api/destinations/queue/keep.move/move",
            r#"{"to":"keep.moved","selector":"color = 'red'"}"#,
        )
        .await?;
    ensure!(moved.contains(&field("moved", MANY / 3)), "{moved}");
    admin.act_ok("DELETE", "/api/destinations/queue/keep.delete", "").await?;
    admin.act_ok("DELETE", "/api/destinations/topic/keep.topic", "").await?;
    ensure!(
        broker.durable_subscription_stats("keeper", "s").await.is_none(),
        "the durable subscription went with its topic"
    );
    broker.shutdown().await;

    let broker = start_broker(configure).await?;
    let admin = Endpoint::of(&broker, None)?;
    for (queue, expected) in [
        ("keep.purge", Some(0)),
        ("keep.move", Some(2 * MANY / 3)),
        ("keep.moved", Some(MANY / 3)),
        ("keep.kept", Some(10)),
        ("keep.delete", None),
    ] {
        let found = stats(&admin, queue).await?;
        ensure!(
            found.as_ref().map(|s| s.pending) == expected.map(|n| n as u64),
            "{queue} after the restart: {found:?}"
        );
        ensure!(
            stored_count(&broker, queue)? == expected.unwrap_or(0) as u64,
            "{queue} in the store"
        );
    }
    ensure!(stored_count_of(&broker, &subscription)? == 0, "the subscription's messages are gone");
    ensure!(broker.durable_subscription_stats("keeper", "s").await.is_none(), "and it stays gone");
    // Each moved message once, red, in order; each kept one once, blue.
    let stomp = connect(&broker).await?;
    for (queue, count, color) in [("keep.moved", MANY / 3, 0), ("keep.move", 2 * MANY / 3, 1)] {
        let mut sub = stomp.subscribe(&format!("/queue/{queue}"), AckMode::Auto, &[]).await?;
        let received = recv_n(&mut sub, count).await?;
        let numbers: Vec<usize> = bodies(&received)
            .iter()
            .map(|body| body.split(' ').next().unwrap_or_default().parse().unwrap_or(usize::MAX))
            .collect();
        let expected: Vec<usize> = (0..MANY).filter(|n| (n % 3 == 0) == (color == 0)).collect();
        ensure!(numbers == expected, "{queue}: {numbers:?}");
        assert_nothing_arrives(&mut sub).await?;
    }
    broker.shutdown().await;
    Ok(())
}

/// Consumers (with selector, prefetch, in-flight count and durable subscription) and durable
/// subscriptions (active and offline, with what waits for them) are listed; an offline
/// subscription is removed with its messages, an active one refused (409), an unknown one 404.
#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn consumers_and_durable_subscriptions_are_listed_and_offline_ones_removed(
) -> anyhow::Result<()> {
    let broker = start_broker(|_| {}).await?;
    let admin = Endpoint::of(&broker, None)?;
    let reader = admin.reader()?;
    let stomp = connect(&broker).await?;
    send_persistent(&stomp, "/queue/ls.q", "q", 3).await?;
    let mut queue = stomp
        .subscribe(
            "/queue/ls.q",
            AckMode::Client,
            &[("selector", "a IS NULL"), ("activemq.prefetchSize", "7")],
        )
        .await?;
    recv_n(&mut queue, 3).await?;
    let active = connect_as(&broker, "lister").await?;
    let _online =
        active.subscribe("/topic/ls.t", AckMode::Auto, &[(SUBSCRIPTION_NAME, "online")]).await?;
    let offline = connect_as(&broker, "lister2").await?;
    let _gone = offline
        .subscribe(
            "/topic/ls.t",
            AckMode::Auto,
            &[(SUBSCRIPTION_NAME, "offline"), ("selector", "x > 1")],
        )
        .await?;
    offline.disconnect().await?;
    tests::wait_durable_inactive(&broker, "lister2", "offline").await?;
    for x in 0..4 {
        stomp
            .send_with_receipt("/topic/ls.t", format!("t{x}"), &[PERSISTENT, ("x", &x.to_string())])
            .await?;
    }

    let consumers: Vec<broker::admin::ConsumerView> = reader.get_json("/api/consumers").await?;
    let on_queue = consumers
        .iter()
        .find(|c| c.destination.name == "ls.q")
        .with_context(|| format!("the queue consumer: {consumers:?}"))?;
    ensure!(
        on_queue.destination.kind == "queue" && on_queue.selector.as_deref() == Some("a IS NULL"),
        "{on_queue:?}"
    );
    ensure!(
        on_queue.prefetch == 7
            && on_queue.in_flight == 3
            && on_queue.durable_subscription.is_none(),
        "{on_queue:?}"
    );
    ensure!(!on_queue.connection_id.is_empty() && !on_queue.consumer_id.is_empty(), "{on_queue:?}");
    let durable = consumers
        .iter()
        .find(|c| c.durable_subscription.as_deref() == Some("lister:online"))
        .with_context(|| format!("the durable consumer: {consumers:?}"))?;
    ensure!(
        durable.destination.kind == "topic" && durable.destination.name == "ls.t",
        "{durable:?}"
    );
    ensure!(consumers.len() == 2, "{consumers:?}");

    let subscriptions: Vec<broker::admin::DurableSubscriptionView> =
        reader.get_json("/api/subscriptions").await?;
    let names: Vec<(&str, &str, bool, u64)> = subscriptions
        .iter()
        .map(|s| (s.client_id.as_str(), s.subscription_name.as_str(), s.active, s.pending))
        .collect();
    ensure!(
        names == [("lister", "online", true, 0), ("lister2", "offline", false, 2)],
        "{subscriptions:?}"
    );
    ensure!(
        subscriptions[1].selector.as_deref() == Some("x > 1") && subscriptions[1].topic == "ls.t"
    );

    let answer = admin.act("DELETE", "/api/subscriptions/lister/online", "").await?;
    ensure!(answer.status == 409, "{answer:?}");
    let removed = admin.act_ok("DELETE", "/api/subscriptions/lister2/offline", "").await?;
    ensure!(removed.contains(&field("removed", true)), "{removed}");
    ensure!(stored_count_of(&broker, &durable_key("ls.t", "lister2", "offline"))? == 0);
    ensure!(admin.act("DELETE", "/api/subscriptions/lister2/offline", "").await?.status == 404);
    ensure!(
        admin.call("DELETE", "/api/subscriptions/lister2/offline", &[], "").await?.status == 403,
        "guarded"
    );
    broker.shutdown().await;
    Ok(())
}

/// `/api/openapi.json` names every route, and every path it names answers its methods (GETs
/// with 200; POST and DELETE, sent without the token, with 403: known, and guarded).
#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn the_openapi_description_matches_the_routes() -> anyhow::Result<()> {
    let broker = start_broker(|_| {}).await?;
    let admin = Endpoint::of(&broker, None)?;
    let answer =
        admin.act_ok("POST", "/api/destinations/queue/api.q/messages", r#"{"body":"b"}"#).await?;
    let id = answer.split('"').nth(3).context("an id")?.to_owned();
    let document = admin.call("GET", "/api/openapi.json", &[], "").await?;
    ensure!(document.status == 200 && document.body.contains("\"openapi\": \"3.0"), "{document:?}");
    // The paths object's keys and their methods, read without a JSON parser: every key of
    // "paths" starts with "/" at the second level of indentation.
    let paths: Vec<(String, Vec<String>)> = paths_of(&document.body);
    ensure!(paths.len() >= 17, "{paths:?}");
    for (template, methods) in &paths {
        let path = template
            .replace("{kind}", "queue")
            .replace("{name}", "api.q")
            .replace("{id}", &encode(&id))
            .replace("{client_id}", "nobody")
            .replace("{subscription_name}", "none");
        for method in methods {
            let answer = admin.call(&method.to_uppercase(), &path, &[], "").await?;
            let expected = if method == "get" { 200 } else { 403 };
            ensure!(answer.status == expected, "{method} {path}: {answer:?}");
        }
    }
    broker.shutdown().await;
    Ok(())
}

/// The keys of the document's `paths` with their methods (the document is indented by one
/// space per level, as `broker/src/admin/openapi.json` is).
fn paths_of(document: &str) -> Vec<(String, Vec<String>)> {
    let mut paths: Vec<(String, Vec<String>)> = Vec::new();
    let mut inside = false;
    for line in document.lines() {
        if line == " \"paths\": {" {
            inside = true;
            continue;
        }
        if !inside {
            continue;
        }
        if line.starts_with(" }") {
            break;
        }
        if let Some(key) = line.strip_prefix("  \"").and_then(|rest| rest.split_once("\": {")) {
            paths.push((key.0.to_owned(), Vec::new()));
        } else if let Some(key) =
            line.strip_prefix("   \"").and_then(|rest| rest.split_once("\": {"))
        {
            if let Some((_, methods)) = paths.last_mut() {
                methods.push(key.0.to_owned());
            }
        }
    }
    paths
}

/// `ActiveMQConnection.destroyDestination` removes an idle queue with its messages and is
/// refused for a queue with a consumer, against ferromq and against Apache ActiveMQ.
#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn jms_destroy_destination_does_what_activemq_does() -> anyhow::Result<()> {
    let broker = start_broker(|config| {
        config.transport.connectors = vec!["tcp://127.0.0.1:0".parse().expect("uri")];
    })
    .await?;
    let addr = broker.openwire_addr().context("an OpenWire connector")?;
    let url = format!("tcp://{addr}");
    tokio::task::spawn_blocking(move || run_destroy_check(&url)).await??;
    broker.shutdown().await;

    let Some(activemq) = tokio::task::spawn_blocking(tests::ActiveMq::start).await?? else {
        return Ok(());
    };
    let url = activemq.url();
    tokio::task::spawn_blocking(move || run_destroy_check(&url)).await??;
    drop(activemq);
    Ok(())
}

fn run_destroy_check(url: &str) -> anyhow::Result<()> {
    let classpath = std::env::var("FERROMQ_JMS_CLASSPATH")
        .ok()
        .filter(|c| !c.is_empty())
        .context("FERROMQ_JMS_CLASSPATH is not set: run scripts/test")?;
    let output = std::process::Command::new("timeout")
        .args(["120", "java", "-cp", &classpath, "DestroyDestinationChecks", "--url", url])
        .output()
        .context("running java")?;
    let stdout = String::from_utf8_lossy(&output.stdout);
    let stderr = String::from_utf8_lossy(&output.stderr);
    ensure!(
        output.status.success() && stdout.lines().any(|l| l == "ok destroy_destination"),
        "DestroyDestinationChecks against {url}: {}\n--- stdout\n{stdout}--- stderr\n{stderr}",
        output.status
    );
    Ok(())
}

/// A purge takes the messages a consumer holds unacknowledged too, as ActiveMQ's purge does:
/// the queue is empty at once, and nothing comes back when that consumer goes.
#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn purge_takes_the_messages_a_consumer_holds_unacknowledged() -> anyhow::Result<()> {
    let broker = start_broker(|_| {}).await?;
    let admin = Endpoint::of(&broker, None)?;
    let producer = connect(&broker).await?;
    send_persistent(&producer, "/queue/purge.held", "m", 5).await?;
    let holder = connect(&broker).await?;
    let mut held = holder
        .subscribe("/queue/purge.held", AckMode::Client, &[("activemq.prefetchSize", "3")])
        .await?;
    recv_n(&mut held, 3).await?;
    let purged = admin.act_ok("POST", "/api/destinations/queue/purge.held/purge", "").await?;
    ensure!(purged.contains(&field("removed", 5)), "{purged}");
    let after = stats(&admin, "purge.held").await?.context("the queue")?;
    ensure!((after.pending, after.in_flight) == (0, 0), "{after:?}");
    ensure!(stored_count(&broker, "purge.held")? == 0, "the store still holds some");
    holder.disconnect().await?;
    // What the holder had is not redelivered: the next consumer's first message is one sent
    // after the purge.
    send_persistent(&producer, "/queue/purge.held", "after", 1).await?;
    let reader = connect(&broker).await?;
    let mut next = reader.subscribe("/queue/purge.held", AckMode::Auto, &[]).await?;
    let first = recv(&mut next).await?;
    ensure!(bodies(std::slice::from_ref(&first)) == ["after0"], "{first:?}");
    assert_nothing_arrives(&mut next).await?;
    Ok(())
}
