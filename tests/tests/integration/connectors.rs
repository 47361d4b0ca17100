//! Connectors and the broker's lifecycle: the connection limit, graceful shutdown, the default
//! bind address, in-process (`vm://`) connections, and dropping the handle.

use std::net::SocketAddr;
use std::sync::Arc;
use std::time::{Duration, Instant};

use anyhow::{bail, ensure, Context as _};
use client::{AckMode, ClientError, ConnectOptions, StompClient};
use protocol::stomp::{Command, Frame};
use tests::{
    connect, recv, start_broker, start_broker_with_store, stomp_addr, stored_count,
    ControlledStore, Policy, RawConnection, RawEvent, ARRIVES,
};

/// Waits until the broker (in this process) no longer listens on `addr`. Asked of `/proc`, not
/// by connecting: once the port is free a connect may reach another program that took it, or
/// (an ephemeral port) the connecting socket itself.
async fn wait_until_not_accepting(addr: SocketAddr) -> anyhow::Result<()> {
    let deadline = Instant::now() + ARRIVES;
    loop {
        if !store::kit::listening_addrs(std::process::id()).contains(&addr) {
            return Ok(());
        }
        ensure!(Instant::now() < deadline, "{addr} still accepts connections after {ARRIVES:?}");
        tokio::time::sleep(Duration::from_millis(10)).await;
    }
}

/// Reads until the broker closes the connection, allowing an ERROR frame on the way.
async fn wait_for_close(raw: &mut RawConnection) -> anyhow::Result<()> {
    loop {
        match raw.next_event(ARRIVES).await? {
            RawEvent::Closed => return Ok(()),
            RawEvent::HeartBeat => {}
            RawEvent::Frame(frame) if frame.command == Command::Error => {}
            RawEvent::Frame(frame) => bail!("expected the connection to close, got {frame:?}"),
            RawEvent::Silent => bail!("the connection is still open after {ARRIVES:?}"),
        }
    }
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn connection_over_the_limit_gets_error_and_close() -> anyhow::Result<()> {
    let broker = start_broker(|config| config.transport.max_connections = 2).await?;
    let first = connect(&broker).await?;
    let second = connect(&broker).await?;

    let mut third = RawConnection::open(stomp_addr(&broker)?).await?;
    let error = third.expect_error_then_close().await?;
    assert_eq!(error.get("message"), Some("connection limit reached"), "{error:?}");

    // Closing one makes room; the slot frees once the broker has finished with it.
    first.disconnect().await?;
    let deadline = Instant::now() + ARRIVES;
    let replacement = loop {
        match StompClient::connect(stomp_addr(&broker)?, ConnectOptions::default()).await {
            Ok(client) => break client,
            Err(ClientError::ServerError { message, .. })
                if message == "connection limit reached" =>
            {
                ensure!(Instant::now() < deadline, "no connection slot freed within {ARRIVES:?}");
                tokio::time::sleep(Duration::from_millis(20)).await;
            }
            Err(error) => return Err(error).context("connecting after a slot freed"),
        }
    };
    replacement.send_with_receipt("/queue/limit", "fits", &[]).await?;
    second.send_with_receipt("/queue/limit", "still fine", &[]).await?;
    broker.shutdown().await;
    Ok(())
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn shutdown_closes_connected_clients_and_returns_promptly() -> anyhow::Result<()> {
    let broker =
        start_broker(|config| config.broker.shutdown_timeout = Duration::from_secs(10)).await?;
    let client = connect(&broker).await?;
    let mut sub = client.subscribe("/queue/shutdown", AckMode::ClientIndividual, &[]).await?;
    let (mut raw, _) = RawConnection::connect(stomp_addr(&broker)?, &[]).await?;
    let mut idle = RawConnection::open(stomp_addr(&broker)?).await?;

    let started = Instant::now();
    broker.shutdown().await;
    let elapsed = started.elapsed();
    ensure!(elapsed < Duration::from_secs(3), "shutdown took {elapsed:?}");

    wait_for_close(&mut raw).await.context("a connected raw client")?;
    wait_for_close(&mut idle).await.context("a connection that never sent CONNECT")?;
    match tokio::time::timeout(ARRIVES, sub.recv()).await {
        Ok(None) => {}
        Ok(Some(message)) => bail!("unexpected message at shutdown: {message:?}"),
        Err(_) => bail!("the client's subscription did not end within {ARRIVES:?}"),
    }
    ensure!(client.is_closed());
    Ok(())
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn persistent_send_in_flight_at_shutdown_still_gets_its_receipt() -> anyhow::Result<()> {
    let store = Arc::new(ControlledStore::new());
    let broker = start_broker_with_store(store.clone(), |config| {
        config.broker.shutdown_timeout = Duration::from_secs(10);
    })
    .await?;
    let addr = stomp_addr(&broker)?;
    let (mut producer, _) = RawConnection::connect(addr, &[]).await?;

    store.set_adds(Policy::Hold);
    let send = Frame::new(Command::Send)
        .header("destination", "/queue/in-flight")
        .header("persistent", "true")
        .header("receipt", "r1")
        .with_body("m");
    producer.write_frame(&send).await?;
    store.wait_held(1, ARRIVES).await?;
    let count_before_shutdown = stored_count(&broker, "in-flight")?;

    let shutdown = tokio::spawn(broker.shutdown());
    wait_until_not_accepting(addr).await?;
    ensure!(!shutdown.is_finished(), "shutdown did not wait for the pending receipt");

    store.release().await;
    let receipt = producer.read_frame().await?;
    assert_eq!((receipt.command, receipt.get("receipt-id")), (Command::Receipt, Some("r1")));
    wait_for_close(&mut producer).await?;
    tokio::time::timeout(ARRIVES, shutdown).await.context("shutdown did not finish")??;
    assert_eq!(count_before_shutdown, 1);
    assert_eq!(store.held(), 0);
    Ok(())
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn default_connectors_listen_on_loopback_only() -> anyhow::Result<()> {
    let config = conf::Config::default();
    let [openwire, stomp] = config.transport.connectors.as_slice() else {
        bail!("expected two default connectors, got {:?}", config.transport.connectors);
    };
    assert_eq!((openwire.scheme, openwire.port), (conf::Scheme::OpenWire, 61616));
    assert_eq!((stomp.scheme, stomp.port), (conf::Scheme::Stomp, 61613));
    assert_eq!(openwire.host, "127.0.0.1");
    assert_eq!(stomp.host, "127.0.0.1");

    let broker = start_broker(|_| {}).await?;
    let [bound] = broker.connectors() else { bail!("expected one bound connector") };
    ensure!(bound.local_addr.ip().is_loopback(), "bound {}", bound.local_addr);
    ensure!(bound.local_addr.port() != 0);
    broker.shutdown().await;
    Ok(())
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn in_process_connection_sends_and_receives() -> anyhow::Result<()> {
    let broker = start_broker(|_| {}).await?;
    let vm =
        StompClient::connect_stream(broker.connect_in_process(), ConnectOptions::default()).await?;
    let mut sub = vm.subscribe("/queue/vm", AckMode::ClientIndividual, &[]).await?;
    vm.send_with_receipt("/queue/vm", "from vm", &[("persistent", "true")]).await?;
    let message = recv(&mut sub).await?;
    assert_eq!(&message.body()[..], b"from vm");
    vm.ack(&message).await?;

    // In-process and TCP clients share the queues.
    let tcp = connect(&broker).await?;
    tcp.send_with_receipt("/queue/vm", "from tcp", &[]).await?;
    let message = recv(&mut sub).await?;
    assert_eq!(&message.body()[..], b"from tcp");
    vm.ack(&message).await?;
    vm.disconnect().await?;
    broker.shutdown().await;
    Ok(())
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn dropping_the_broker_handle_stops_accepting() -> anyhow::Result<()> {
    let broker = start_broker(|_| {}).await?;
    let addr = stomp_addr(&broker)?;
    let (mut connected, _) = RawConnection::connect(addr, &[]).await?;
    drop(broker);

    wait_until_not_accepting(addr).await?;
    wait_for_close(&mut connected).await.context("a connection open when the handle dropped")?;
    Ok(())
}

/// A handle dropped without `shutdown()` leaves its tasks to end on their own, and one of them
/// may still have a write under way: the data directory stays locked until the store is gone,
/// so no standby takes over while the old broker may still write (the lock was held by the
/// handle alone and went with it).
#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn a_dropped_broker_keeps_its_data_directory_locked_while_its_store_writes(
) -> anyhow::Result<()> {
    let data = tempfile::tempdir()?;
    let config = |standby: bool| {
        let mut config = tests::test_config();
        config.broker.data_dir = data.path().to_path_buf();
        config.broker.standby = standby;
        config.broker.lock_retry = Duration::from_millis(20);
        config
    };
    let store = Arc::new(ControlledStore::new());
    let broker =
        broker::Broker::builder(config(false)).store(store.clone()).lock_data_dir(true).start();
    let broker = broker.await.context("starting the first broker")?;
    let (mut producer, _) = RawConnection::connect(stomp_addr(&broker)?, &[]).await?;
    store.set_adds(Policy::Hold);
    let send = Frame::new(Command::Send)
        .header("destination", "/queue/locked")
        .header("persistent", "true")
        .header("receipt", "r1")
        .with_body("m");
    producer.write_frame(&send).await?;
    store.wait_held(1, ARRIVES).await?;
    drop(broker);

    // The send's connection still waits for its unit to be durable.
    let second = broker::Broker::builder(config(false)).lock_data_dir(true).start().await;
    match second {
        Err(broker::BrokerError::DataDirLocked { .. }) => {}
        Err(error) => bail!("the second broker failed otherwise: {error}"),
        Ok(second) => {
            second.shutdown().await;
            bail!("a second broker took the data directory while the first one's write was held");
        }
    }
    // The write done, the dropped broker's connection answers and ends, its store goes, and
    // with it the lock: a standby takes over.
    store.release().await;
    let receipt = producer.read_frame().await?;
    assert_eq!((receipt.command, receipt.get("receipt-id")), (Command::Receipt, Some("r1")));
    wait_for_close(&mut producer).await?;
    drop(store);
    let standby = broker::Broker::builder(config(true)).lock_data_dir(true).start();
    let standby = tokio::time::timeout(ARRIVES, standby)
        .await
        .context("the lock was not released once the dropped broker's store was gone")?
        .context("starting the standby")?;
    standby.shutdown().await;
    Ok(())
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn shutdown_is_bounded_by_the_timeout_when_a_client_stops_reading() -> anyhow::Result<()> {
    let timeout = Duration::from_millis(500);
    let broker = start_broker(|config| config.broker.shutdown_timeout = timeout).await?;
    // A consumer that never reads: the broker's writes to it stall once the socket is full.
    let (mut stalled, _) = RawConnection::connect(stomp_addr(&broker)?, &[]).await?;
    let subscribe = Frame::new(Command::Subscribe)
        .header("id", "s")
        .header("destination", "/queue/stalled")
        .header("receipt", "subscribed");
    stalled.write_frame(&subscribe).await?;
    let receipt = stalled.read_frame().await?;
    assert_eq!(receipt.get("receipt-id"), Some("subscribed"), "{receipt:?}");
    let producer = connect(&broker).await?;
    let body = bytes::Bytes::from(vec![b'x'; 1024 * 1024]);
    for _ in 0..32 {
        producer.send_with_receipt("/queue/stalled", body.clone(), &[]).await?;
    }

    let started = Instant::now();
    tokio::time::timeout(ARRIVES, broker.shutdown()).await.context("shutdown hung")?;
    let elapsed = started.elapsed();
    ensure!(elapsed < timeout + Duration::from_secs(2), "shutdown took {elapsed:?}");
    Ok(())
}
