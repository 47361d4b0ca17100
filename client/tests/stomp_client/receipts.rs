//! Sending, receipts, server errors, transactions and closing.

use std::sync::Arc;
use std::time::Duration;

use anyhow::{ensure, Result};
use client::{ClientError, Command, ConnectOptions, Frame, StompClient, Version};

use crate::fake_server::{options, session, FakeServer};

#[tokio::test]
async fn send_queues_frames_in_order_without_waiting() -> Result<()> {
    let (client, server) = session(Version::V1_2, |mut peer| async move {
        for expected in ["one", "two", "three"] {
            let send = peer.expect(Command::Send).await?;
            ensure!(send.get("destination") == Some("/queue/a"), "{send:?}");
            ensure!(send.get("persistent") == Some("true"), "{send:?}");
            ensure!(&send.body[..] == expected.as_bytes(), "{send:?}");
            ensure!(send.get("receipt").is_none(), "{send:?}");
        }
        Ok(())
    })
    .await?;
    for body in ["one", "two", "three"] {
        client.send("/queue/a", body, &[("persistent", "true")]).await?;
    }
    server.finish().await
}

#[tokio::test]
async fn send_with_receipt_returns_once_the_receipt_arrives() -> Result<()> {
    let (client, server) = session(Version::V1_2, |mut peer| async move {
        let send = peer.expect(Command::Send).await?;
        tokio::time::sleep(Duration::from_millis(50)).await;
        peer.receipt(&send).await
    })
    .await?;
    client.send_with_receipt("/queue/a", "hello", &[]).await?;
    server.finish().await
}

#[tokio::test]
async fn body_with_nul_bytes_is_sent_with_its_content_length() -> Result<()> {
    let body: &'static [u8] = b"\0binary\0\xff\0";
    let (client, server) = session(Version::V1_2, move |mut peer| async move {
        let send = peer.expect_and_receipt(Command::Send).await?;
        ensure!(&send.body[..] == body, "{send:?}");
        ensure!(send.get("content-length") == Some("10"), "{send:?}");
        Ok(())
    })
    .await?;
    client.send_with_receipt("/queue/a", body, &[]).await?;
    server.finish().await
}

#[tokio::test]
async fn request_receipt_keeps_a_receipt_id_the_caller_chose() -> Result<()> {
    let (client, server) = session(Version::V1_2, |mut peer| async move {
        let frame = peer.expect_and_receipt(Command::Send).await?;
        ensure!(frame.get("receipt") == Some("mine"), "{frame:?}");
        Ok(())
    })
    .await?;
    let frame = Frame::new(Command::Send).header("destination", "/q").header("receipt", "mine");
    client.request_receipt(frame).await?;
    server.finish().await
}

#[tokio::test]
async fn error_with_receipt_id_fails_only_that_request() -> Result<()> {
    let (client, server) = session(Version::V1_2, |mut peer| async move {
        let first = peer.expect(Command::Send).await?;
        let second = peer.expect(Command::Send).await?;
        peer.receipt(&second).await?;
        let receipt = first.get("receipt").unwrap_or_default();
        let error =
            Frame::error("destination refused", "no such queue").header("receipt-id", receipt);
        peer.write(&error).await?;
        // The connection stays usable.
        peer.expect_and_receipt(Command::Begin).await?;
        Ok(())
    })
    .await?;
    let client = Arc::new(client);
    let first = tokio::spawn({
        let client = client.clone();
        async move { client.send_with_receipt("/queue/refused", "1", &[]).await }
    });
    // Make sure the first SEND is queued before the second.
    tokio::time::sleep(Duration::from_millis(50)).await;
    client.send_with_receipt("/queue/ok", "2", &[]).await?;
    match first.await? {
        Err(ClientError::ServerError { message, body }) => {
            assert_eq!(message, "destination refused");
            assert_eq!(body, "no such queue");
        }
        other => panic!("expected a server error, got {other:?}"),
    }
    client.begin("tx").await?;
    server.finish().await
}

#[tokio::test]
async fn error_without_receipt_id_fails_every_waiter_and_reaches_next_error() -> Result<()> {
    let (client, server) = session(Version::V1_2, |mut peer| async move {
        peer.expect(Command::Send).await?;
        peer.expect(Command::Send).await?;
        peer.write(&Frame::error("broker shutting down", "bye")).await
        // Dropping the peer closes the connection, as servers do after ERROR.
    })
    .await?;
    let client = Arc::new(client);
    let waiters: Vec<_> = (0..2)
        .map(|i| {
            let client = client.clone();
            tokio::spawn(
                async move { client.send_with_receipt("/queue/a", format!("{i}"), &[]).await },
            )
        })
        .collect();
    for waiter in waiters {
        let result = waiter.await?;
        assert!(
            matches!(&result, Err(ClientError::ServerError { message, .. }) if message == "broker shutting down"),
            "{result:?}"
        );
    }
    let error = client.next_error().await.expect("the ERROR frame");
    assert_eq!(error.get("message"), Some("broker shutting down"));
    assert_eq!(client.next_error().await, None, "connection ended, no more errors");
    assert!(client.is_closed());
    // Later calls say why the connection is gone.
    let later = client.send("/queue/a", "late", &[]).await;
    assert!(matches!(later, Err(ClientError::ServerError { .. })), "{later:?}");
    server.finish().await
}

#[tokio::test]
async fn receipt_that_never_comes_times_out() -> Result<()> {
    let server = FakeServer::start(|mut peer| async move {
        peer.accept_connect(Version::V1_2, &[]).await?;
        peer.expect(Command::Send).await?;
        peer.expect_close().await
    })
    .await?;
    let options = ConnectOptions { timeout: Duration::from_millis(200), ..options() };
    let client = StompClient::connect(server.addr, options).await?;
    match client.send_with_receipt("/queue/slow", "x", &[]).await {
        Err(ClientError::Timeout { waiting_for, .. }) => {
            assert_eq!(waiting_for, "the RECEIPT for SEND to /queue/slow");
        }
        other => panic!("expected a timeout, got {other:?}"),
    }
    drop(client);
    server.finish().await
}

#[tokio::test]
async fn transactions_begin_commit_and_abort_with_receipts() -> Result<()> {
    let (client, server) = session(Version::V1_2, |mut peer| async move {
        let begin = peer.expect_and_receipt(Command::Begin).await?;
        ensure!(begin.get("transaction") == Some("tx1"), "{begin:?}");
        let send = peer.expect(Command::Send).await?;
        ensure!(send.get("transaction") == Some("tx1"), "{send:?}");
        let commit = peer.expect_and_receipt(Command::Commit).await?;
        ensure!(commit.get("transaction") == Some("tx1"), "{commit:?}");
        peer.expect_and_receipt(Command::Begin).await?;
        let abort = peer.expect_and_receipt(Command::Abort).await?;
        ensure!(abort.get("transaction") == Some("tx2"), "{abort:?}");
        Ok(())
    })
    .await?;
    client.begin("tx1").await?;
    client.send("/queue/a", "in tx", &[("transaction", "tx1")]).await?;
    client.commit("tx1").await?;
    client.begin("tx2").await?;
    client.abort("tx2").await?;
    server.finish().await
}

#[tokio::test]
async fn disconnect_waits_for_its_receipt_then_closes() -> Result<()> {
    let (client, server) = session(Version::V1_2, |mut peer| async move {
        peer.expect(Command::Send).await?;
        peer.expect_and_receipt(Command::Disconnect).await?;
        peer.expect_close().await
    })
    .await?;
    client.send("/queue/a", "last words", &[]).await?;
    client.disconnect().await?;
    server.finish().await
}

#[tokio::test]
async fn disconnect_succeeds_when_the_server_closes_right_after_the_receipt() -> Result<()> {
    let (client, server) = session(Version::V1_0, |mut peer| async move {
        peer.expect_and_receipt(Command::Disconnect).await?;
        Ok(())
    })
    .await?;
    client.disconnect().await?;
    server.finish().await
}

#[tokio::test]
async fn dropping_the_client_writes_queued_frames_then_closes() -> Result<()> {
    let (client, server) = session(Version::V1_2, |mut peer| async move {
        for _ in 0..10 {
            peer.expect(Command::Send).await?;
        }
        peer.expect_close().await
    })
    .await?;
    for i in 0..10 {
        client.send("/queue/a", format!("{i}"), &[]).await?;
    }
    drop(client);
    server.finish().await
}

#[tokio::test]
async fn server_hanging_up_fails_pending_requests_and_later_calls() -> Result<()> {
    let (client, server) = session(Version::V1_2, |mut peer| async move {
        peer.expect(Command::Send).await?;
        Ok(())
    })
    .await?;
    let result = client.send_with_receipt("/queue/a", "x", &[]).await;
    assert!(matches!(result, Err(ClientError::Closed | ClientError::Io(_))), "{result:?}");
    let later = client.begin("tx").await;
    assert!(matches!(later, Err(ClientError::Closed | ClientError::Io(_))), "{later:?}");
    server.finish().await
}

#[tokio::test]
async fn invalid_bytes_from_the_server_end_the_connection_with_a_wire_error() -> Result<()> {
    let (client, server) = session(Version::V1_2, |mut peer| async move {
        peer.expect(Command::Send).await?;
        peer.write_raw(b"BOGUS\n\n\0").await?;
        peer.expect_close().await
    })
    .await?;
    let result = client.send_with_receipt("/queue/a", "x", &[]).await;
    assert!(matches!(result, Err(ClientError::Wire(_))), "{result:?}");
    drop(client);
    server.finish().await
}
