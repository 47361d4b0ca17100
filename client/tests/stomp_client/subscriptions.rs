//! Subscriptions: routing, acknowledgements per version, unsubscribing.

use std::time::Duration;

use anyhow::{ensure, Context, Result};
use client::{AckMode, ClientError, Command, Frame, Version};

use crate::fake_server::session;

/// A MESSAGE for subscription `subscription` as a 1.2 server writes it.
fn message(subscription: &str, id: &str, body: &str) -> Frame {
    Frame::new(Command::Message)
        .header("subscription", subscription)
        .header("message-id", id)
        .header("destination", "/queue/a")
        .header("ack", format!("ack-{id}"))
        .with_body(body.to_owned())
}

#[tokio::test]
async fn subscribe_is_confirmed_by_receipt_and_carries_mode_and_headers() -> Result<()> {
    let (client, server) = session(Version::V1_2, |mut peer| async move {
        let subscribe = peer.expect_and_receipt(Command::Subscribe).await?;
        ensure!(subscribe.get("destination") == Some("/queue/a"), "{subscribe:?}");
        ensure!(subscribe.get("ack") == Some("client-individual"), "{subscribe:?}");
        ensure!(subscribe.get("selector") == Some("color = 'red'"), "{subscribe:?}");
        ensure!(subscribe.get("id").is_some_and(|id| !id.is_empty()), "{subscribe:?}");
        Ok(())
    })
    .await?;
    let subscription = client
        .subscribe("/queue/a", AckMode::ClientIndividual, &[("selector", "color = 'red'")])
        .await?;
    assert!(!subscription.id().is_empty());
    server.finish().await
}

#[tokio::test]
async fn messages_are_routed_to_their_subscription_in_order() -> Result<()> {
    let (client, server) = session(Version::V1_2, |mut peer| async move {
        let first = peer.expect_and_receipt(Command::Subscribe).await?;
        let second = peer.expect_and_receipt(Command::Subscribe).await?;
        let (a, b) = (first.get("id").context("id")?, second.get("id").context("id")?);
        for (subscription, id) in [(a, "1"), (b, "2"), (a, "3"), (b, "4"), (a, "5")] {
            peer.write(&message(subscription, id, id)).await?;
        }
        Ok(())
    })
    .await?;
    let mut a = client.subscribe("/queue/a", AckMode::Auto, &[]).await?;
    let mut b = client.subscribe("/queue/b", AckMode::Auto, &[]).await?;
    assert_ne!(a.id(), b.id());
    let wait = Duration::from_secs(5);
    for expected in ["1", "3", "5"] {
        let received = a.recv_timeout(wait).await?;
        assert_eq!(received.message_id(), Some(expected));
        assert_eq!(received.subscription(), Some(a.id()));
    }
    for expected in ["2", "4"] {
        assert_eq!(b.recv_timeout(wait).await?.message_id(), Some(expected));
    }
    server.finish().await
}

#[tokio::test]
async fn received_message_exposes_its_headers_and_body() -> Result<()> {
    let (client, server) = session(Version::V1_2, |mut peer| async move {
        let subscribe = peer.expect_and_receipt(Command::Subscribe).await?;
        let id = subscribe.get("id").context("id")?;
        peer.write(&message(id, "m-1", "payload").header("redelivered", "true")).await?;
        peer.write(&message(id, "m-2", "")).await
    })
    .await?;
    let mut subscription = client.subscribe("/queue/a", AckMode::Client, &[]).await?;
    let first = subscription.recv().await.context("first message")?;
    assert_eq!(&first.body()[..], b"payload");
    assert_eq!(first.message_id(), Some("m-1"));
    assert_eq!(first.destination(), Some("/queue/a"));
    assert_eq!(first.header("ack"), Some("ack-m-1"));
    assert!(first.redelivered());
    let second = subscription.recv().await.context("second message")?;
    assert!(!second.redelivered());
    assert!(second.body().is_empty());
    server.finish().await
}

#[tokio::test]
async fn ack_and_nack_use_the_headers_of_each_version() -> Result<()> {
    for version in Version::ALL {
        let (client, server) = session(version, move |mut peer| async move {
            let subscribe = peer.expect_and_receipt(Command::Subscribe).await?;
            let id = subscribe.get("id").context("id")?.to_owned();
            peer.write(&message(&id, "m-1", "x")).await?;
            let ack = peer.expect_and_receipt(Command::Ack).await?;
            let mut expected: Vec<(&str, &str)> = match version {
                Version::V1_0 => vec![("message-id", "m-1")],
                Version::V1_1 => vec![("message-id", "m-1"), ("subscription", id.as_str())],
                Version::V1_2 => vec![("id", "ack-m-1")],
            };
            expected.push(("transaction", "tx"));
            let headers: Vec<(&str, &str)> = ack
                .headers
                .iter()
                .filter(|(name, _)| name != "receipt")
                .map(|(n, v)| (n.as_str(), v.as_str()))
                .collect();
            ensure!(headers == expected, "{version}: {ack:?}");
            if version > Version::V1_0 {
                let nack = peer.expect_and_receipt(Command::Nack).await?;
                ensure!(nack.get("message-id") == Some("m-1") || nack.get("id") == Some("ack-m-1"));
            }
            Ok(())
        })
        .await?;
        let mut subscription = client.subscribe("/queue/a", AckMode::Client, &[]).await?;
        let received = subscription.recv_timeout(Duration::from_secs(5)).await?;
        client.ack_with(&received, &[("transaction", "tx")]).await?;
        let nacked = client.nack(&received).await;
        if version == Version::V1_0 {
            assert!(matches!(nacked, Err(ClientError::Protocol { .. })), "{nacked:?}");
        } else {
            nacked?;
        }
        server.finish().await?;
    }
    Ok(())
}

#[tokio::test]
async fn ack_of_a_message_without_its_ack_header_is_refused_locally() -> Result<()> {
    let (client, server) = session(Version::V1_2, |mut peer| async move {
        let subscribe = peer.expect_and_receipt(Command::Subscribe).await?;
        let id = subscribe.get("id").context("id")?;
        let bare =
            Frame::new(Command::Message).header("subscription", id).header("message-id", "1");
        peer.write(&bare).await
    })
    .await?;
    let mut subscription = client.subscribe("/queue/a", AckMode::Auto, &[]).await?;
    let received = subscription.recv().await.context("message")?;
    let result = client.ack(&received).await;
    assert!(matches!(result, Err(ClientError::Protocol { .. })), "{result:?}");
    server.finish().await
}

#[tokio::test]
async fn recv_timeout_without_messages_is_a_timeout() -> Result<()> {
    let (client, server) = session(Version::V1_2, |mut peer| async move {
        peer.expect_and_receipt(Command::Subscribe).await?;
        peer.expect_close().await
    })
    .await?;
    let mut subscription = client.subscribe("/queue/empty", AckMode::Auto, &[]).await?;
    let result = subscription.recv_timeout(Duration::from_millis(100)).await;
    assert!(matches!(result, Err(ClientError::Timeout { .. })), "{result:?}");
    assert!(subscription.try_recv().is_none());
    // The subscription keeps the connection open too.
    drop(client);
    drop(subscription);
    server.finish().await
}

#[tokio::test]
async fn unsubscribe_sends_the_subscription_id_and_waits_for_the_receipt() -> Result<()> {
    let (client, server) = session(Version::V1_1, |mut peer| async move {
        let subscribe = peer.expect_and_receipt(Command::Subscribe).await?;
        let unsubscribe = peer.expect_and_receipt(Command::Unsubscribe).await?;
        ensure!(unsubscribe.get("id") == subscribe.get("id"), "{unsubscribe:?}");
        // A late message for the old subscription is dropped, not misrouted.
        peer.write(&message(subscribe.get("id").context("id")?, "late", "x")).await?;
        peer.expect_and_receipt(Command::Begin).await?;
        Ok(())
    })
    .await?;
    let subscription = client.subscribe("/queue/a", AckMode::Auto, &[]).await?;
    subscription.unsubscribe().await?;
    client.begin("tx").await?;
    server.finish().await
}

#[tokio::test]
async fn subscriptions_end_when_the_connection_closes() -> Result<()> {
    let (client, server) = session(Version::V1_2, |mut peer| async move {
        let subscribe = peer.expect_and_receipt(Command::Subscribe).await?;
        peer.write(&message(subscribe.get("id").context("id")?, "m-1", "last")).await
    })
    .await?;
    let mut subscription = client.subscribe("/queue/a", AckMode::Auto, &[]).await?;
    assert_eq!(subscription.recv().await.context("message")?.message_id(), Some("m-1"));
    assert_eq!(subscription.recv().await, None);
    let result = subscription.recv_timeout(Duration::from_secs(1)).await;
    assert!(matches!(result, Err(ClientError::Closed)), "{result:?}");
    server.finish().await
}

#[tokio::test]
async fn subscribe_refused_by_the_server_is_an_error() -> Result<()> {
    let (client, server) = session(Version::V1_2, |mut peer| async move {
        let subscribe = peer.expect(Command::Subscribe).await?;
        let receipt = subscribe.get("receipt").context("receipt")?;
        peer.write(&Frame::error("not authorized", "").header("receipt-id", receipt)).await
    })
    .await?;
    let result = client.subscribe("/queue/secret", AckMode::Auto, &[]).await;
    assert!(matches!(result, Err(ClientError::ServerError { .. })), "{result:?}");
    server.finish().await
}
