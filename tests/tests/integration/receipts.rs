//! Receipts mean durability: a RECEIPT for a persistent SEND or an ACK is written only once the
//! store has completed the unit, in request order, and a failed unit is reported as an ERROR
//! naming the receipt.

use std::sync::Arc;
use std::time::{Duration, Instant};

use anyhow::ensure;
use protocol::stomp::{Command, Frame};
use tests::{
    start_broker_with_store, stomp_addr, stored_count, ControlledStore, Policy, RawConnection,
    ARRIVES, QUIET,
};

fn send(destination: &str, body: &str, receipt: &str, persistent: bool) -> Frame {
    let mut frame =
        Frame::new(Command::Send).header("destination", destination).header("receipt", receipt);
    if persistent {
        frame.push_header("persistent", "true");
    }
    frame.with_body(body.to_owned())
}

fn assert_receipt(frame: &Frame, receipt: &str) -> anyhow::Result<()> {
    ensure!(
        frame.command == Command::Receipt && frame.get("receipt-id") == Some(receipt),
        "expected RECEIPT {receipt}, got {frame:?}"
    );
    Ok(())
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn persistent_send_receipt_waits_for_the_store() -> anyhow::Result<()> {
    let store = Arc::new(ControlledStore::new());
    let broker = start_broker_with_store(store.clone(), |_| {}).await?;
    let (mut producer, _) = RawConnection::connect(stomp_addr(&broker)?, &[]).await?;

    store.set_adds(Policy::Hold);
    producer.write_frame(&send("/queue/held", "m", "r1", true)).await?;
    store.wait_held(1, ARRIVES).await?;
    producer.expect_no_frame(QUIET).await?;

    store.release().await;
    assert_receipt(&producer.read_frame().await?, "r1")?;
    assert_eq!(stored_count(&broker, "held")?, 1);
    broker.shutdown().await;
    Ok(())
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn receipts_keep_request_order_behind_a_pending_store_write() -> anyhow::Result<()> {
    let store = Arc::new(ControlledStore::new());
    let broker = start_broker_with_store(store.clone(), |_| {}).await?;
    let (mut producer, _) = RawConnection::connect(stomp_addr(&broker)?, &[]).await?;

    store.set_adds(Policy::Hold);
    producer.write_frame(&send("/queue/ordered", "durable", "r1", true)).await?;
    store.wait_held(1, ARRIVES).await?;
    // A non-persistent send needs no store, but its receipt must not overtake the first.
    producer.write_frame(&send("/queue/ordered", "transient", "r2", false)).await?;
    producer.expect_no_frame(QUIET).await?;

    store.release().await;
    assert_receipt(&producer.read_frame().await?, "r1")?;
    assert_receipt(&producer.read_frame().await?, "r2")?;
    broker.shutdown().await;
    Ok(())
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn ack_receipt_waits_for_the_store() -> anyhow::Result<()> {
    let store = Arc::new(ControlledStore::new());
    let broker = start_broker_with_store(store.clone(), |_| {}).await?;
    let (mut consumer, _) = RawConnection::connect(stomp_addr(&broker)?, &[]).await?;
    consumer.write_frame(&send("/queue/acked", "m", "r1", true)).await?;
    assert_receipt(&consumer.read_frame().await?, "r1")?;
    let subscribe = Frame::new(Command::Subscribe)
        .header("id", "s")
        .header("destination", "/queue/acked")
        .header("ack", "client-individual");
    consumer.write_frame(&subscribe).await?;
    let message = consumer.read_frame().await?;
    ensure!(message.command == Command::Message, "expected MESSAGE, got {message:?}");
    let ack_id = message.get("ack").unwrap_or_default().to_owned();

    store.set_acks(Policy::Hold);
    consumer
        .write_frame(&Frame::new(Command::Ack).header("id", ack_id).header("receipt", "r2"))
        .await?;
    store.wait_held(1, ARRIVES).await?;
    consumer.expect_no_frame(QUIET).await?;

    store.release().await;
    assert_receipt(&consumer.read_frame().await?, "r2")?;
    assert_eq!(stored_count(&broker, "acked")?, 0);
    broker.shutdown().await;
    Ok(())
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn failed_store_write_is_reported_as_error_with_the_receipt_id() -> anyhow::Result<()> {
    let store = Arc::new(ControlledStore::new());
    let broker = start_broker_with_store(store.clone(), |_| {}).await?;
    let (mut producer, _) = RawConnection::connect(stomp_addr(&broker)?, &[]).await?;

    store.set_adds(Policy::Fail);
    producer.write_frame(&send("/queue/failing", "m", "r1", true)).await?;
    let error = producer.expect_error_then_close().await?;
    assert_eq!(error.get("receipt-id"), Some("r1"), "{error:?}");
    assert_eq!(stored_count(&broker, "failing")?, 0);

    // The broker itself is fine: another connection sends once the store works again.
    store.set_adds(Policy::Pass);
    let (mut other, _) = RawConnection::connect(stomp_addr(&broker)?, &[]).await?;
    other.write_frame(&send("/queue/failing", "m", "r2", true)).await?;
    assert_receipt(&other.read_frame().await?, "r2")?;
    broker.shutdown().await;
    Ok(())
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn failed_ack_write_is_reported_as_error_with_the_receipt_id() -> anyhow::Result<()> {
    let store = Arc::new(ControlledStore::new());
    let broker = start_broker_with_store(store.clone(), |_| {}).await?;
    let (mut consumer, _) = RawConnection::connect(stomp_addr(&broker)?, &[]).await?;
    consumer.write_frame(&send("/queue/failing-ack", "m", "r1", true)).await?;
    assert_receipt(&consumer.read_frame().await?, "r1")?;
    let subscribe = Frame::new(Command::Subscribe)
        .header("id", "s")
        .header("destination", "/queue/failing-ack")
        .header("ack", "client-individual");
    consumer.write_frame(&subscribe).await?;
    let message = consumer.read_frame().await?;
    let ack_id = message.get("ack").unwrap_or_default().to_owned();

    store.set_acks(Policy::Fail);
    consumer
        .write_frame(&Frame::new(Command::Ack).header("id", ack_id).header("receipt", "r2"))
        .await?;
    let error = consumer.expect_error_then_close().await?;
    assert_eq!(error.get("receipt-id"), Some("r2"), "{error:?}");
    assert_eq!(stored_count(&broker, "failing-ack")?, 1);
    broker.shutdown().await;
    Ok(())
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn failed_store_write_without_receipt_is_reported_as_error() -> anyhow::Result<()> {
    let store = Arc::new(ControlledStore::new());
    let broker = start_broker_with_store(store.clone(), |_| {}).await?;
    let (mut producer, _) = RawConnection::connect(stomp_addr(&broker)?, &[]).await?;

    store.set_adds(Policy::Fail);
    let unconfirmed = Frame::new(Command::Send)
        .header("destination", "/queue/failing-quietly")
        .header("persistent", "true")
        .with_body("m");
    producer.write_frame(&unconfirmed).await?;
    let error = producer.expect_error_then_close().await?;
    assert_eq!(error.get("receipt-id"), None, "{error:?}");
    assert_eq!(stored_count(&broker, "failing-quietly")?, 0);
    broker.shutdown().await;
    Ok(())
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn message_refused_by_the_store_is_not_delivered() -> anyhow::Result<()> {
    let store = Arc::new(ControlledStore::new());
    let broker = start_broker_with_store(store.clone(), |_| {}).await?;
    let (mut producer, _) = RawConnection::connect(stomp_addr(&broker)?, &[]).await?;
    store.set_adds(Policy::Fail);
    producer.write_frame(&send("/queue/refused", "refused", "r1", true)).await?;
    let error = producer.expect_error_then_close().await?;
    assert_eq!(error.get("receipt-id"), Some("r1"), "{error:?}");
    store.set_adds(Policy::Pass);

    // The producer was told the message failed (and may well send it again): no consumer may
    // get it.
    let client = tests::connect(&broker).await?;
    let mut sub =
        client.subscribe("/queue/refused", client::AckMode::ClientIndividual, &[]).await?;
    tests::assert_nothing_arrives(&mut sub).await?;
    broker.shutdown().await;
    Ok(())
}

/// Store reads block their thread (a disk read, a round trip to PostgreSQL, seconds while it
/// is unreachable). Two queues paging in from a slow store at once must not take both of the
/// runtime's workers away from every other connection: a send to a third queue gets its
/// receipt while both reads are still under way.
#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn slow_store_reads_do_not_stall_other_connections() -> anyhow::Result<()> {
    const READ_DELAY: Duration = Duration::from_secs(4);
    let store = Arc::new(ControlledStore::new());
    // 64 KiB (the smallest limit) keeps about 40 of the 300 messages below in memory: the
    // rest is paged in from the store as the consumers drain.
    let broker =
        start_broker_with_store(store.clone(), |c| c.destinations.memory_limit = 64 << 10).await?;
    let addr = stomp_addr(&broker)?;
    let (mut producer, _) = RawConnection::connect(addr, &[]).await?;
    let body = "x".repeat(1024);
    // "other" exists before reads slow down: a queue's first start reads the store too.
    producer.write_frame(&send("/queue/other", "m", "created", true)).await?;
    assert_receipt(&producer.read_frame().await?, "created")?;
    for queue in ["deep.1", "deep.2"] {
        for index in 0..300 {
            let receipt = format!("{queue}-{index}");
            producer.write_frame(&send(&format!("/queue/{queue}"), &body, &receipt, true)).await?;
            assert_receipt(&producer.read_frame().await?, &receipt)?;
        }
    }

    store.set_read_delay(READ_DELAY);
    let mut consumers = Vec::new();
    for queue in ["deep.1", "deep.2"] {
        let (mut consumer, _) = RawConnection::connect(addr, &[]).await?;
        let subscribe = Frame::new(Command::Subscribe)
            .header("id", "s")
            .header("destination", format!("/queue/{queue}"));
        consumer.write_frame(&subscribe).await?;
        consumers.push(consumer);
    }
    store.wait_reading(2, ARRIVES).await?;

    let started = Instant::now();
    producer.write_frame(&send("/queue/other", "m", "other", true)).await?;
    assert_receipt(&producer.read_frame().await?, "other")?;
    let waited = started.elapsed();
    ensure!(
        waited < READ_DELAY / 2,
        "the receipt took {waited:?}: the slow reads held the runtime's workers"
    );
    store.set_read_delay(Duration::ZERO);
    broker.shutdown().await;
    Ok(())
}

/// A queue created while the broker runs reads its first messages from the store in its own
/// task, not under the routing lock: the first send to a new queue on a store whose reads take
/// 2 s does not delay a send to another destination.
#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn creating_a_queue_on_a_slow_store_does_not_delay_other_sends() -> anyhow::Result<()> {
    const READ_DELAY: Duration = Duration::from_secs(2);
    let store = Arc::new(ControlledStore::new());
    let broker = start_broker_with_store(store.clone(), |_| {}).await?;
    let addr = stomp_addr(&broker)?;
    let (mut first, _) = RawConnection::connect(addr, &[]).await?;
    let (mut other, _) = RawConnection::connect(addr, &[]).await?;
    other.write_frame(&send("/queue/existing", "m", "created", true)).await?;
    assert_receipt(&other.read_frame().await?, "created")?;

    store.set_read_delay(READ_DELAY);
    first.write_frame(&send("/queue/brand.new", "m", "new", true)).await?;
    store.wait_reading(1, ARRIVES).await?;
    let started = Instant::now();
    other.write_frame(&send("/queue/existing", "m", "other", true)).await?;
    assert_receipt(&other.read_frame().await?, "other")?;
    let waited = started.elapsed();
    ensure!(
        waited < READ_DELAY / 2,
        "the receipt took {waited:?}: the new queue's store read held the routing lock"
    );
    assert_receipt(&first.read_frame().await?, "new")?;
    store.set_read_delay(Duration::ZERO);
    broker.shutdown().await;
    Ok(())
}

/// A COMMIT whose record is still being written when its connection goes away takes effect
/// all the same: once the record is durable, the transaction's messages are delivered (they
/// were stored, so leaving them out until the next start would be losing them).
#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn a_commit_takes_effect_when_its_connection_drops_before_it_is_durable() -> anyhow::Result<()>
{
    let store = Arc::new(ControlledStore::new());
    let broker = start_broker_with_store(store.clone(), |_| {}).await?;
    let client = tests::connect(&broker).await?;
    let mut connections =
        client.subscribe("/topic/ActiveMQ.Advisory.Connection", client::AckMode::Auto, &[]).await?;
    let (mut producer, _) = RawConnection::connect(stomp_addr(&broker)?, &[]).await?;
    let opened = tests::recv(&mut connections).await?;
    ensure!(opened.header("ferromq.advisory.operation") == Some("add"), "{opened:?}");
    let begin = Frame::new(Command::Begin).header("transaction", "t").header("receipt", "b");
    producer.write_frame(&begin).await?;
    assert_receipt(&producer.read_frame().await?, "b")?;
    let mut sent = send("/queue/committed.then.dropped", "committed", "s", true);
    sent.push_header("transaction", "t");
    producer.write_frame(&sent).await?;
    assert_receipt(&producer.read_frame().await?, "s")?;

    store.set_commits(Policy::Hold);
    let commit = Frame::new(Command::Commit).header("transaction", "t").header("receipt", "c");
    producer.write_frame(&commit).await?;
    store.wait_held(1, ARRIVES).await?;
    drop(producer);
    // Released (its waiting COMMIT given up with it) before the commit record is durable.
    let closed = tests::recv(&mut connections).await?;
    ensure!(closed.header("ferromq.advisory.operation") == Some("remove"), "{closed:?}");
    store.set_commits(Policy::Pass);
    store.release().await;

    let mut sub = client
        .subscribe("/queue/committed.then.dropped", client::AckMode::ClientIndividual, &[])
        .await?;
    let message = tests::recv(&mut sub).await?;
    ensure!(tests::bodies(&[message]) == ["committed"]);
    broker.shutdown().await;
    Ok(())
}
