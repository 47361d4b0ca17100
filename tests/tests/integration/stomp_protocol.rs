//! The STOMP protocol as the broker speaks it: version negotiation, heart-beats, the connect
//! timeout, header escaping, bodies, header mapping and DISCONNECT.

use std::time::{Duration, Instant};

use anyhow::{ensure, Context as _};
use bytes::Bytes;
use client::{AckMode, ConnectOptions, Version};
use protocol::stomp::{Command, Frame};
use tests::{
    connect, connect_with, recv, start_broker, stomp_addr, RawConnection, RawEvent, PERSISTENT,
};

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn connect_without_accept_version_speaks_stomp_1_0() -> anyhow::Result<()> {
    let broker = start_broker(|_| {}).await?;
    let mut raw = RawConnection::open(stomp_addr(&broker)?).await?;
    raw.write_frame(&Frame::new(Command::Connect)).await?;
    let connected = raw.read_frame().await?;
    assert_eq!(connected.command, Command::Connected, "{connected:?}");
    ensure!(
        matches!(connected.get("version"), None | Some("1.0")),
        "expected STOMP 1.0, got {connected:?}"
    );
    // STOMP 1.0 allows a SUBSCRIBE without an id.
    let subscribe =
        Frame::new(Command::Subscribe).header("destination", "/queue/v10").header("receipt", "r1");
    raw.write_frame(&subscribe).await?;
    let receipt = raw.read_frame().await?;
    assert_eq!((receipt.command, receipt.get("receipt-id")), (Command::Receipt, Some("r1")));
    broker.shutdown().await;
    Ok(())
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn version_negotiation_picks_the_highest_version_both_accept() -> anyhow::Result<()> {
    let broker = start_broker(|_| {}).await?;
    let cases = [
        ("1.0", Version::V1_0),
        ("1.1", Version::V1_1),
        ("1.2", Version::V1_2),
        ("1.0,1.1", Version::V1_1),
        ("1.0,1.1,1.2", Version::V1_2),
        ("1.1,2.0", Version::V1_1),
    ];
    for (accept, expected) in cases {
        let options =
            ConnectOptions { accept_version: accept.to_owned(), ..ConnectOptions::default() };
        let client = connect_with(&broker, options)
            .await
            .with_context(|| format!("accept-version {accept}"))?;
        assert_eq!(client.version(), expected, "accept-version {accept}");
        // The session works at that version: a round trip with an ack.
        let mut sub = client.subscribe("/queue/versions", AckMode::Client, &[]).await?;
        client.send_with_receipt("/queue/versions", accept, &[]).await?;
        let message = recv(&mut sub).await?;
        assert_eq!(&message.body()[..], accept.as_bytes());
        client.ack(&message).await?;
        sub.unsubscribe().await?;
        client.disconnect().await?;
    }
    broker.shutdown().await;
    Ok(())
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn unsupported_version_gets_error_and_close() -> anyhow::Result<()> {
    let broker = start_broker(|_| {}).await?;
    let mut raw = RawConnection::open(stomp_addr(&broker)?).await?;
    raw.write_frame(&Frame::new(Command::Connect).header("accept-version", "3.0")).await?;
    let error = raw.expect_error_then_close().await?;
    let message = error.get("message").unwrap_or_default();
    ensure!(message.contains("version"), "ERROR does not say why: {error:?}");
    broker.shutdown().await;
    Ok(())
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn broker_sends_heart_beats_as_often_as_the_client_asks() -> anyhow::Result<()> {
    let broker = start_broker(|_| {}).await?;
    let (mut raw, connected) =
        RawConnection::connect(stomp_addr(&broker)?, &[("heart-beat", "0,100")]).await?;
    assert_eq!(connected.get("heart-beat"), Some("100,0"), "{connected:?}");

    let started = Instant::now();
    let mut beats = 0;
    while started.elapsed() < Duration::from_secs(1) {
        match raw.next_event(Duration::from_millis(50)).await? {
            RawEvent::HeartBeat => beats += 1,
            RawEvent::Silent => {}
            other => anyhow::bail!("expected heart-beats only, got {other:?}"),
        }
    }
    // Nominally ten; a loaded machine may delay some, but not most.
    ensure!((4..=20).contains(&beats), "{beats} heart-beats in one second at a 100 ms interval");
    broker.shutdown().await;
    Ok(())
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn client_silent_beyond_its_heart_beat_interval_is_disconnected() -> anyhow::Result<()> {
    let broker = start_broker(|_| {}).await?;
    let started = Instant::now();
    let (mut raw, connected) =
        RawConnection::connect(stomp_addr(&broker)?, &[("heart-beat", "100,0")]).await?;
    assert_eq!(connected.get("heart-beat"), Some("0,100"), "{connected:?}");

    let error = raw.expect_error_then_close().await?;
    let elapsed = started.elapsed();
    assert_eq!(error.get("message"), Some("inactivity timeout"), "{error:?}");
    // 100 ms with the default grace of 1.5: closed after about 150 ms.
    ensure!(elapsed >= Duration::from_millis(140), "closed too early, after {elapsed:?}");
    ensure!(elapsed < Duration::from_secs(2), "closed too late, after {elapsed:?}");
    broker.shutdown().await;
    Ok(())
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn client_sending_heart_beats_stays_connected() -> anyhow::Result<()> {
    let broker = start_broker(|_| {}).await?;
    let (mut raw, _) =
        RawConnection::connect(stomp_addr(&broker)?, &[("heart-beat", "100,0")]).await?;
    for _ in 0..12 {
        raw.write_bytes(b"\n").await?;
        raw.expect_no_frame(Duration::from_millis(50)).await?;
    }
    raw.write_frame(&Frame::new(Command::Disconnect).header("receipt", "bye")).await?;
    let receipt = raw.read_frame().await?;
    assert_eq!(receipt.get("receipt-id"), Some("bye"), "{receipt:?}");
    broker.shutdown().await;
    Ok(())
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn connection_without_connect_is_closed_after_the_connect_timeout() -> anyhow::Result<()> {
    let broker =
        start_broker(|config| config.transport.connect_timeout = Duration::from_millis(200))
            .await?;
    let started = Instant::now();
    let mut raw = RawConnection::open(stomp_addr(&broker)?).await?;
    let error = raw.expect_error_then_close().await?;
    let elapsed = started.elapsed();
    assert_eq!(error.get("message"), Some("inactivity timeout"), "{error:?}");
    ensure!(elapsed >= Duration::from_millis(180), "closed too early, after {elapsed:?}");
    ensure!(elapsed < Duration::from_secs(3), "closed too late, after {elapsed:?}");

    // A client that does connect in time is not affected afterwards.
    let client = connect(&broker).await?;
    tokio::time::sleep(Duration::from_millis(400)).await;
    client.send_with_receipt("/queue/after-timeout", "still here", &[]).await?;
    broker.shutdown().await;
    Ok(())
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn header_escaping_round_trips_in_stomp_1_2() -> anyhow::Result<()> {
    let broker = start_broker(|_| {}).await?;
    let client = connect(&broker).await?;
    assert_eq!(client.version(), Version::V1_2);
    let mut sub = client.subscribe("/queue/escaping", AckMode::Auto, &[]).await?;
    let awkward = "colon:newline\nbackslash\\carriage\rend";
    client
        .send_with_receipt(
            "/queue/escaping",
            "x",
            &[("awkward", awkward), ("name:with:colons", "v\\\n")],
        )
        .await?;
    let message = recv(&mut sub).await?;
    assert_eq!(message.header("awkward"), Some(awkward), "{message:?}");
    assert_eq!(message.header("name:with:colons"), Some("v\\\n"), "{message:?}");
    broker.shutdown().await;
    Ok(())
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn binary_body_with_nul_bytes_round_trips() -> anyhow::Result<()> {
    let broker = start_broker(|_| {}).await?;
    let client = connect(&broker).await?;
    let mut sub = client.subscribe("/queue/binary", AckMode::Auto, &[]).await?;
    let body: Vec<u8> = (0..=255u8).chain([0, 0, b'\n', 0xff, 0]).collect();
    client.send_with_receipt("/queue/binary", body.clone(), &[PERSISTENT]).await?;
    let message = recv(&mut sub).await?;
    assert_eq!(&message.body()[..], &body[..]);
    assert_eq!(message.header("content-length"), Some(body.len().to_string().as_str()));
    broker.shutdown().await;
    Ok(())
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn two_mebibyte_body_round_trips() -> anyhow::Result<()> {
    let broker = start_broker(|_| {}).await?;
    let client = connect(&broker).await?;
    let mut sub = client.subscribe("/queue/large", AckMode::ClientIndividual, &[]).await?;
    let body: Bytes =
        (0..2 * 1024 * 1024).map(|i: u32| (i % 251) as u8).collect::<Vec<u8>>().into();
    client.send_with_receipt("/queue/large", body.clone(), &[PERSISTENT]).await?;
    let message = recv(&mut sub).await?;
    assert_eq!(message.body().len(), body.len());
    assert!(message.body() == &body, "the 2 MiB body changed on the way");
    client.ack(&message).await?;
    broker.shutdown().await;
    Ok(())
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn custom_headers_are_preserved() -> anyhow::Result<()> {
    let broker = start_broker(|_| {}).await?;
    let client = connect(&broker).await?;
    let mut sub = client.subscribe("/queue/custom", AckMode::Auto, &[]).await?;
    let custom =
        [("colour", "blue"), ("order-id", "12345"), ("unicode", "zürich ✓"), ("empty", "")];
    client.send_with_receipt("/queue/custom", "x", &custom).await?;
    let message = recv(&mut sub).await?;
    for (name, value) in custom {
        assert_eq!(message.header(name), Some(value), "header {name} in {message:?}");
    }
    broker.shutdown().await;
    Ok(())
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn jms_headers_round_trip() -> anyhow::Result<()> {
    let broker = start_broker(|_| {}).await?;
    let client = connect(&broker).await?;
    let mut sub = client.subscribe("/queue/jms", AckMode::ClientIndividual, &[]).await?;
    let expires = (std::time::SystemTime::now().duration_since(std::time::UNIX_EPOCH)?.as_millis()
        + 3_600_000)
        .to_string();
    let headers = [
        ("persistent", "true"),
        ("correlation-id", "corr-1"),
        ("reply-to", "/queue/replies"),
        ("type", "OrderPlaced"),
        ("priority", "7"),
        ("expires", expires.as_str()),
        ("JMSXGroupID", "group-a"),
    ];
    client.send_with_receipt("/queue/jms", "x", &headers).await?;
    let message = recv(&mut sub).await?;
    for (name, value) in headers {
        assert_eq!(message.header(name), Some(value), "header {name} in {message:?}");
    }
    // The broker's own headers.
    assert_eq!(message.destination(), Some("/queue/jms"));
    assert_eq!(message.subscription(), Some(sub.id()));
    assert!(message.message_id().is_some_and(|id| !id.is_empty()), "{message:?}");
    assert!(message.header("ack").is_some(), "STOMP 1.2 MESSAGE without ack: {message:?}");
    assert_eq!(message.header("redelivered"), Some("false"));
    let timestamp: i64 = message.header("timestamp").context("timestamp header")?.parse()?;
    assert!(timestamp > 0);
    client.ack(&message).await?;
    broker.shutdown().await;
    Ok(())
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn disconnect_with_receipt_gets_the_receipt_then_close() -> anyhow::Result<()> {
    let broker = start_broker(|_| {}).await?;
    let (mut raw, _) = RawConnection::connect(stomp_addr(&broker)?, &[]).await?;
    raw.write_frame(&Frame::new(Command::Disconnect).header("receipt", "bye")).await?;
    let receipt = raw.read_frame().await?;
    assert_eq!((receipt.command, receipt.get("receipt-id")), (Command::Receipt, Some("bye")));
    raw.expect_closed().await?;

    // The client's graceful disconnect relies on the same receipt.
    connect(&broker).await?.disconnect().await?;
    broker.shutdown().await;
    Ok(())
}
