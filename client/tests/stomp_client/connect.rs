//! The CONNECT handshake.

use std::time::Duration;

use anyhow::{ensure, Result};
use client::{ClientError, Command, ConnectOptions, Frame, StompClient, Version};

use crate::fake_server::{options, pipe, FakeServer};

#[tokio::test]
async fn connect_sends_the_options_as_headers() -> Result<()> {
    let server = FakeServer::start(|mut peer| async move {
        let connect = peer.accept_connect(Version::V1_2, &[]).await?;
        ensure!(connect.get("accept-version") == Some("1.0,1.1,1.2"), "{connect:?}");
        ensure!(connect.get("heart-beat") == Some("0,0"), "{connect:?}");
        ensure!(connect.get("host") == Some("vhost"), "{connect:?}");
        ensure!(connect.get("login") == Some("admin"), "{connect:?}");
        ensure!(connect.get("passcode") == Some("secret"), "{connect:?}");
        ensure!(connect.get("client-id") == Some("c1"), "{connect:?}");
        ensure!(connect.get("x-extra") == Some("yes"), "{connect:?}");
        Ok(())
    })
    .await?;
    let options = ConnectOptions {
        host: Some("vhost".into()),
        client_id: Some("c1".into()),
        headers: vec![("x-extra".into(), "yes".into())],
        ..ConnectOptions::with_credentials("admin", "secret")
    };
    let _client = StompClient::connect(server.addr, options).await?;
    server.finish().await
}

#[tokio::test]
async fn connect_adopts_the_version_and_headers_the_server_answers() -> Result<()> {
    let server = FakeServer::start(|mut peer| async move {
        peer.accept_connect(Version::V1_1, &[("server", "fake/1"), ("session", "s-1")]).await?;
        Ok(())
    })
    .await?;
    let client = StompClient::connect(server.addr, options()).await?;
    assert_eq!(client.version(), Version::V1_1);
    assert_eq!(client.server_header("server"), Some("fake/1"));
    assert!(client.server_headers().contains(&("session".to_owned(), "s-1".to_owned())));
    server.finish().await
}

#[tokio::test]
async fn connected_without_version_header_means_1_0() -> Result<()> {
    let server = FakeServer::start(|mut peer| async move {
        peer.expect(Command::Connect).await?;
        peer.write(&Frame::new(Command::Connected).header("session", "x")).await
    })
    .await?;
    let client = StompClient::connect(server.addr, options()).await?;
    assert_eq!(client.version(), Version::V1_0);
    server.finish().await
}

#[tokio::test]
async fn connect_fails_with_the_servers_error_frame() -> Result<()> {
    let server = FakeServer::start(|mut peer| async move {
        peer.expect(Command::Connect).await?;
        peer.write(&Frame::error("bad credentials", "user admin may not connect")).await
    })
    .await?;
    match StompClient::connect(server.addr, options()).await {
        Err(ClientError::ServerError { message, body }) => {
            assert_eq!(message, "bad credentials");
            assert_eq!(body, "user admin may not connect");
        }
        other => panic!("expected a server error, got {other:?}"),
    }
    server.finish().await
}

#[tokio::test]
async fn connect_times_out_when_the_server_never_answers() -> Result<()> {
    let server = FakeServer::start(|mut peer| async move {
        peer.expect(Command::Connect).await?;
        peer.expect_close().await
    })
    .await?;
    let options = ConnectOptions { timeout: Duration::from_millis(200), ..options() };
    match StompClient::connect(server.addr, options).await {
        Err(ClientError::Timeout { waiting_for, after }) => {
            assert_eq!(waiting_for, "CONNECTED");
            assert_eq!(after, Duration::from_millis(200));
        }
        other => panic!("expected a timeout, got {other:?}"),
    }
    server.finish().await
}

#[tokio::test]
async fn connect_refuses_a_version_it_did_not_offer() -> Result<()> {
    let server = FakeServer::start(|mut peer| async move {
        peer.accept_connect(Version::V1_2, &[]).await?;
        Ok(())
    })
    .await?;
    let options = ConnectOptions { accept_version: "1.0,1.1".into(), ..options() };
    match StompClient::connect(server.addr, options).await {
        Err(ClientError::Protocol { message }) => assert!(message.contains("1.2"), "{message}"),
        other => panic!("expected a protocol error, got {other:?}"),
    }
    server.finish().await
}

#[tokio::test]
async fn connect_fails_when_the_server_hangs_up() -> Result<()> {
    let server = FakeServer::start(|mut peer| async move {
        peer.expect(Command::Connect).await?;
        Ok(())
    })
    .await?;
    let result = StompClient::connect(server.addr, options()).await;
    assert!(matches!(result, Err(ClientError::Closed | ClientError::Io(_))), "{result:?}");
    server.finish().await
}

#[tokio::test]
async fn connect_reports_a_server_that_does_not_speak_stomp() -> Result<()> {
    let server = FakeServer::start(|mut peer| async move {
        peer.expect(Command::Connect).await?;
        peer.write_raw(b"HTTP/1.1 400 Bad Request\r\n\r\n").await
    })
    .await?;
    let result = StompClient::connect(server.addr, options()).await;
    assert!(matches!(result, Err(ClientError::Wire(_))), "{result:?}");
    server.finish().await
}

#[tokio::test]
async fn connect_stream_speaks_over_an_in_process_pipe() -> Result<()> {
    let (stream, mut peer) = pipe();
    let server = tokio::spawn(async move {
        peer.accept_connect(Version::V1_2, &[]).await?;
        let send = peer.expect_and_receipt(Command::Send).await?;
        ensure!(&send.body[..] == b"over the pipe", "{send:?}");
        peer.expect_and_receipt(Command::Disconnect).await?;
        peer.expect_close().await
    });
    let client = StompClient::connect_stream(stream, options()).await?;
    client.send_with_receipt("/queue/a", "over the pipe", &[]).await?;
    client.disconnect().await?;
    server.await?
}
