//! Heart-beats, over an in-process pipe with paused time.

use std::time::Duration;

use anyhow::{ensure, Result};
use client::{ClientError, ConnectOptions, StompClient, Version};
use protocol::stomp::Decoded;
use tokio::time::Instant;

use crate::fake_server::{options, pipe};

#[tokio::test(start_paused = true)]
async fn client_sends_heart_beats_at_the_agreed_interval() -> Result<()> {
    let (stream, mut peer) = pipe();
    let server = tokio::spawn(async move {
        let connect = peer.accept_connect(Version::V1_2, &[("heart-beat", "0,300")]).await?;
        ensure!(connect.get("heart-beat") == Some("100,0"), "{connect:?}");
        let start = Instant::now();
        for _ in 0..3 {
            ensure!(peer.next().await? == Some(Decoded::HeartBeat));
        }
        // We want one every 300 ms (the larger of 100 and 300).
        let elapsed = start.elapsed();
        ensure!(elapsed >= Duration::from_millis(900), "{elapsed:?}");
        ensure!(elapsed < Duration::from_millis(1000), "{elapsed:?}");
        Ok(())
    });
    let options = ConnectOptions { heart_beat: (100, 0), ..options() };
    let _client = StompClient::connect_stream(stream, options).await?;
    server.await?
}

#[tokio::test(start_paused = true)]
async fn no_heart_beats_when_the_server_wants_none() -> Result<()> {
    let (stream, mut peer) = pipe();
    let server = tokio::spawn(async move {
        peer.accept_connect(Version::V1_2, &[("heart-beat", "0,0")]).await?;
        let next = tokio::time::timeout(Duration::from_secs(60), peer.next()).await;
        ensure!(next.is_err(), "expected silence, got {next:?}");
        Ok(())
    });
    let options = ConnectOptions { heart_beat: (100, 100), ..options() };
    let _client = StompClient::connect_stream(stream, options).await?;
    server.await?
}

#[tokio::test(start_paused = true)]
async fn silent_server_is_given_up_after_twice_the_agreed_interval() -> Result<()> {
    let (stream, mut peer) = pipe();
    let server = tokio::spawn(async move {
        peer.accept_connect(Version::V1_2, &[("heart-beat", "500,0")]).await?;
        // Say nothing; the client must hang up.
        let frames = peer.read_until_close().await?;
        ensure!(frames.len() == 1, "{frames:?}");
        Ok(())
    });
    let options =
        ConnectOptions { heart_beat: (0, 200), timeout: Duration::from_secs(60), ..options() };
    let client = StompClient::connect_stream(stream, options).await?;
    let start = Instant::now();
    let result = client.begin("tx").await;
    match result {
        Err(ClientError::Timeout { waiting_for, after }) => {
            assert_eq!(waiting_for, "the server's heart-beats");
            assert_eq!(after, Duration::from_secs(1));
        }
        other => panic!("expected a heart-beat timeout, got {other:?}"),
    }
    assert_eq!(start.elapsed(), Duration::from_secs(1));
    server.await?
}

#[tokio::test(start_paused = true)]
async fn server_heart_beats_keep_the_connection_alive() -> Result<()> {
    let (stream, mut peer) = pipe();
    let server = tokio::spawn(async move {
        peer.accept_connect(Version::V1_2, &[("heart-beat", "200,0")]).await?;
        for _ in 0..20 {
            tokio::time::sleep(Duration::from_millis(200)).await;
            peer.write_raw(b"\n").await?;
        }
        peer.expect_and_receipt(client::Command::Begin).await?;
        Ok(())
    });
    let options = ConnectOptions { heart_beat: (0, 200), ..options() };
    let client = StompClient::connect_stream(stream, options).await?;
    tokio::time::sleep(Duration::from_millis(4100)).await;
    assert!(!client.is_closed());
    client.begin("tx").await?;
    server.await?
}
