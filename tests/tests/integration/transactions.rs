//! STOMP local transactions: BEGIN, then SEND and ACK frames with a `transaction` header,
//! then COMMIT or ABORT. Sends become visible at the commit and vanish at an abort; acks become
//! final at the commit, and at an abort (or when the connection ends with the transaction
//! open) the acknowledged messages are delivered again, marked redelivered. Persistent
//! transactional work reaches the store tagged with the transaction, then a commit record.

use std::sync::Arc;

use anyhow::{ensure, Context as _};
use client::AckMode;
use protocol::stomp::{Command, Frame};
use store::{MemoryStore, Operation};
use tests::{
    assert_nothing_arrives, bodies, connect, connect_as, durable_key, recv, recv_n,
    send_persistent, server_error, start_broker, start_broker_with_store, stomp_addr, stored_count,
    stored_count_of, RawConnection, RecordingStore, ARRIVES, PERSISTENT, SUBSCRIPTION_NAME,
};

const TX1: (&str, &str) = ("transaction", "tx1");

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn transacted_sends_are_invisible_until_commit() -> anyhow::Result<()> {
    let broker = start_broker(|_| {}).await?;
    let consumer = connect(&broker).await?;
    let mut queue_sub = consumer.subscribe("/queue/tx", AckMode::Auto, &[]).await?;
    let mut topic_sub = consumer.subscribe("/topic/tx", AckMode::Auto, &[]).await?;
    let producer = connect(&broker).await?;
    producer.begin("tx1").await?;
    for index in 0..3 {
        producer.send_with_receipt("/queue/tx", format!("q{index}"), &[TX1, PERSISTENT]).await?;
        producer.send_with_receipt("/topic/tx", format!("t{index}"), &[TX1]).await?;
    }
    assert_nothing_arrives(&mut queue_sub).await?;
    assert_nothing_arrives(&mut topic_sub).await?;
    assert_eq!(stored_count(&broker, "tx")?, 0);

    producer.commit("tx1").await?;
    assert_eq!(bodies(&recv_n(&mut queue_sub, 3).await?), ["q0", "q1", "q2"]);
    assert_eq!(bodies(&recv_n(&mut topic_sub, 3).await?), ["t0", "t1", "t2"]);
    assert_nothing_arrives(&mut queue_sub).await?;
    broker.shutdown().await;
    Ok(())
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn aborted_sends_are_discarded() -> anyhow::Result<()> {
    let broker = start_broker(|_| {}).await?;
    let consumer = connect(&broker).await?;
    let mut queue_sub = consumer.subscribe("/queue/abort", AckMode::Auto, &[]).await?;
    let mut topic_sub = consumer.subscribe("/topic/abort", AckMode::Auto, &[]).await?;
    let producer = connect(&broker).await?;
    producer.begin("tx1").await?;
    producer.send_with_receipt("/queue/abort", "discarded", &[TX1, PERSISTENT]).await?;
    producer.send_with_receipt("/topic/abort", "discarded", &[TX1, PERSISTENT]).await?;
    producer.abort("tx1").await?;
    producer.send_with_receipt("/queue/abort", "plain", &[]).await?;
    producer.send_with_receipt("/topic/abort", "plain", &[]).await?;

    assert_eq!(&recv(&mut queue_sub).await?.body()[..], b"plain");
    assert_eq!(&recv(&mut topic_sub).await?.body()[..], b"plain");
    assert_nothing_arrives(&mut queue_sub).await?;
    assert_nothing_arrives(&mut topic_sub).await?;
    assert_eq!(stored_count(&broker, "abort")?, 0);
    // The name is free again after the abort.
    producer.begin("tx1").await?;
    producer.commit("tx1").await?;
    broker.shutdown().await;
    Ok(())
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn aborted_topic_sends_are_not_replayed_to_retroactive_subscribers() -> anyhow::Result<()> {
    let broker = start_broker(|_| {}).await?;
    let producer = connect(&broker).await?;
    producer.begin("tx1").await?;
    producer.send_with_receipt("/topic/retro-tx", "aborted", &[TX1]).await?;
    producer.abort("tx1").await?;
    producer.begin("tx2").await?;
    producer.send_with_receipt("/topic/retro-tx", "uncommitted", &[("transaction", "tx2")]).await?;
    producer.send_with_receipt("/topic/retro-tx", "published", &[]).await?;

    let consumer = connect(&broker).await?;
    let mut sub = consumer
        .subscribe("/topic/retro-tx", AckMode::Auto, &[("activemq.retroactive", "true")])
        .await?;
    // Only what was actually published is recent; an open transaction's sends are not yet.
    assert_eq!(&recv(&mut sub).await?.body()[..], b"published");
    assert_nothing_arrives(&mut sub).await?;
    producer.commit("tx2").await?;
    assert_eq!(&recv(&mut sub).await?.body()[..], b"uncommitted");
    broker.shutdown().await;
    Ok(())
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn a_subscriber_present_at_commit_gets_the_transacted_topic_messages() -> anyhow::Result<()> {
    // A transacted topic message is published when the transaction commits: a non-durable
    // subscriber that arrived after the SEND but before the COMMIT gets it, as in ActiveMQ.
    let broker = start_broker(|_| {}).await?;
    let producer = connect(&broker).await?;
    producer.begin("tx1").await?;
    producer.send_with_receipt("/topic/at-commit", "m", &[TX1]).await?;
    let consumer = connect(&broker).await?;
    let mut sub = consumer.subscribe("/topic/at-commit", AckMode::Auto, &[]).await?;
    assert_nothing_arrives(&mut sub).await?;
    producer.commit("tx1").await?;
    assert_eq!(&recv(&mut sub).await?.body()[..], b"m");
    broker.shutdown().await;
    Ok(())
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn acks_in_an_aborted_transaction_are_redelivered() -> anyhow::Result<()> {
    let broker = start_broker(|_| {}).await?;
    let client = connect(&broker).await?;
    send_persistent(&client, "/queue/ack-abort", "m", 3).await?;
    let mut sub = client.subscribe("/queue/ack-abort", AckMode::ClientIndividual, &[]).await?;
    let received = recv_n(&mut sub, 3).await?;
    client.begin("tx1").await?;
    for message in &received {
        client.ack_with(message, &[TX1]).await?;
    }
    assert_nothing_arrives(&mut sub).await?;
    // Still stored until the transaction ends.
    assert_eq!(stored_count(&broker, "ack-abort")?, 3);

    client.abort("tx1").await?;
    let again = recv_n(&mut sub, 3).await?;
    assert_eq!(bodies(&again), ["m0", "m1", "m2"]);
    assert!(again.iter().all(|m| m.redelivered()), "{again:?}");
    for message in &again {
        client.ack(message).await?;
    }
    assert_eq!(stored_count(&broker, "ack-abort")?, 0);
    broker.shutdown().await;
    Ok(())
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn acks_in_a_committed_transaction_are_final() -> anyhow::Result<()> {
    let broker = start_broker(|_| {}).await?;
    let client = connect(&broker).await?;
    send_persistent(&client, "/queue/ack-commit", "m", 4).await?;
    let mut sub = client.subscribe("/queue/ack-commit", AckMode::ClientIndividual, &[]).await?;
    let received = recv_n(&mut sub, 4).await?;
    client.begin("tx1").await?;
    client.ack_with(&received[0], &[TX1]).await?;
    client.ack_with(&received[2], &[TX1]).await?;
    assert_eq!(stored_count(&broker, "ack-commit")?, 4);
    client.commit("tx1").await?;
    assert_eq!(stored_count(&broker, "ack-commit")?, 2);
    client.disconnect().await?;

    // The two not acknowledged come back.
    let client = connect(&broker).await?;
    let mut sub = client.subscribe("/queue/ack-commit", AckMode::ClientIndividual, &[]).await?;
    let rest = recv_n(&mut sub, 2).await?;
    assert_eq!(bodies(&rest), ["m1", "m3"]);
    assert_nothing_arrives(&mut sub).await?;
    let stats = broker.queue_stats("ack-commit").await.context("queue exists")?;
    assert_eq!(stats.acked, 2);
    broker.shutdown().await;
    Ok(())
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn a_cumulative_ack_in_an_aborted_transaction_redelivers_all_it_covered() -> anyhow::Result<()>
{
    let broker = start_broker(|_| {}).await?;
    let client = connect(&broker).await?;
    send_persistent(&client, "/queue/cum-abort", "m", 3).await?;
    let mut sub = client.subscribe("/queue/cum-abort", AckMode::Client, &[]).await?;
    let received = recv_n(&mut sub, 3).await?;
    client.begin("tx1").await?;
    client.ack_with(&received[1], &[TX1]).await?;
    client.abort("tx1").await?;
    let again = recv_n(&mut sub, 2).await?;
    assert_eq!(bodies(&again), ["m0", "m1"]);
    assert!(again.iter().all(|m| m.redelivered()));
    // m2 was never acknowledged and is still held: a cumulative ack of the last delivery
    // (the redelivered m1) covers it and the two redelivered ones.
    client.ack(&again[1]).await?;
    assert_eq!(stored_count(&broker, "cum-abort")?, 0);
    broker.shutdown().await;
    Ok(())
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn transacted_persistent_sends_reach_the_store_tagged_then_committed() -> anyhow::Result<()> {
    let store = Arc::new(RecordingStore::new());
    let broker = start_broker_with_store(store.clone(), |_| {}).await?;
    let producer = connect(&broker).await?;
    producer.begin("tx1").await?;
    for index in 0..2 {
        producer
            .send_with_receipt("/queue/tagged", format!("m{index}"), &[TX1, PERSISTENT])
            .await?;
    }
    let adds = store.adds();
    assert_eq!(adds.len(), 2, "{adds:?}");
    let txn = adds[0].txn.context("a transactional AddMessage without its transaction")?;
    ensure!(adds.iter().all(|add| add.txn == Some(txn)), "{adds:?}");
    ensure!(store.commits().is_empty(), "committed before COMMIT");
    assert_eq!(stored_count(&broker, "tagged")?, 0);

    producer.commit("tx1").await?;
    assert_eq!(store.commits(), [txn]);
    assert_eq!(stored_count(&broker, "tagged")?, 2);

    // An aborted one is rolled back in the store.
    producer.begin("tx2").await?;
    producer
        .send_with_receipt("/queue/tagged", "gone", &[("transaction", "tx2"), PERSISTENT])
        .await?;
    producer.abort("tx2").await?;
    let rolled_back = store.adds().last().and_then(|add| add.txn).context("tagged add")?;
    tests::wait_until("the rollback reaches the store", || {
        let rollbacks = store.rollbacks();
        async move { rollbacks.contains(&rolled_back) }
    })
    .await?;
    assert_eq!(stored_count(&broker, "tagged")?, 2);
    broker.shutdown().await;
    Ok(())
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn committed_sends_survive_a_restart_and_uncommitted_ones_do_not() -> anyhow::Result<()> {
    let store = Arc::new(MemoryStore::new());
    let broker = start_broker_with_store(store.clone(), |_| {}).await?;
    let producer = connect(&broker).await?;
    producer.begin("committed").await?;
    producer
        .send_with_receipt("/queue/restart", "kept", &[("transaction", "committed"), PERSISTENT])
        .await?;
    producer.commit("committed").await?;
    producer.begin("open").await?;
    producer
        .send_with_receipt("/queue/restart", "lost", &[("transaction", "open"), PERSISTENT])
        .await?;
    // A crash: the store is reopened while the transaction is open, nothing shuts down.
    let reopened = Arc::new(store.reopen());
    drop(producer);
    drop(broker);

    let broker = start_broker_with_store(reopened, |_| {}).await?;
    assert_eq!(stored_count(&broker, "restart")?, 1);
    let client = connect(&broker).await?;
    let mut sub = client.subscribe("/queue/restart", AckMode::ClientIndividual, &[]).await?;
    assert_eq!(&recv(&mut sub).await?.body()[..], b"kept");
    assert_nothing_arrives(&mut sub).await?;
    broker.shutdown().await;
    Ok(())
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn committed_acks_survive_a_restart() -> anyhow::Result<()> {
    let store = Arc::new(MemoryStore::new());
    let broker = start_broker_with_store(store.clone(), |_| {}).await?;
    let client = connect(&broker).await?;
    send_persistent(&client, "/queue/acks-restart", "m", 3).await?;
    let mut sub = client.subscribe("/queue/acks-restart", AckMode::ClientIndividual, &[]).await?;
    let received = recv_n(&mut sub, 3).await?;
    client.begin("committed").await?;
    client.ack_with(&received[0], &[("transaction", "committed")]).await?;
    client.commit("committed").await?;
    client.begin("open").await?;
    client.ack_with(&received[1], &[("transaction", "open")]).await?;
    let reopened = Arc::new(store.reopen());
    drop(sub);
    drop(client);
    drop(broker);

    let broker = start_broker_with_store(reopened, |_| {}).await?;
    assert_eq!(stored_count(&broker, "acks-restart")?, 2);
    let client = connect(&broker).await?;
    let mut sub = client.subscribe("/queue/acks-restart", AckMode::ClientIndividual, &[]).await?;
    assert_eq!(bodies(&recv_n(&mut sub, 2).await?), ["m1", "m2"]);
    broker.shutdown().await;
    Ok(())
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn a_dropped_connection_rolls_back_its_open_transaction() -> anyhow::Result<()> {
    let broker = start_broker(|_| {}).await?;
    let producer = connect(&broker).await?;
    send_persistent(&producer, "/queue/drop-tx", "m", 3).await?;
    let observer = connect(&broker).await?;
    let mut out_sub = observer.subscribe("/queue/drop-tx-out", AckMode::Auto, &[]).await?;

    let (mut raw, _) = RawConnection::connect(stomp_addr(&broker)?, &[]).await?;
    raw.write_frame(
        &Frame::new(Command::Subscribe)
            .header("id", "s")
            .header("destination", "/queue/drop-tx")
            .header("ack", "client-individual"),
    )
    .await?;
    let mut ack_ids = Vec::new();
    for index in 0..3 {
        let frame = raw.read_frame().await?;
        assert_eq!(&frame.body[..], format!("m{index}").as_bytes());
        ack_ids.push(frame.get("ack").context("MESSAGE without ack")?.to_owned());
    }
    raw.write_frame(&Frame::new(Command::Begin).header("transaction", "t")).await?;
    for ack in &ack_ids {
        raw.write_frame(
            &Frame::new(Command::Ack).header("id", ack.as_str()).header("transaction", "t"),
        )
        .await?;
    }
    raw.write_frame(
        &Frame::new(Command::Send)
            .header("destination", "/queue/drop-tx-out")
            .header("transaction", "t")
            .header("receipt", "last")
            .with_body("never"),
    )
    .await?;
    let receipt = raw.read_frame().await?;
    assert_eq!(receipt.get("receipt-id"), Some("last"));
    raw.reset()?;

    let client = connect(&broker).await?;
    let mut again = client.subscribe("/queue/drop-tx", AckMode::ClientIndividual, &[]).await?;
    let returned = recv_n(&mut again, 3).await?;
    assert_eq!(bodies(&returned), ["m0", "m1", "m2"]);
    assert!(returned.iter().all(|m| m.redelivered()), "{returned:?}");
    assert_nothing_arrives(&mut out_sub).await?;
    assert_eq!(stored_count(&broker, "drop-tx")?, 3);
    broker.shutdown().await;
    Ok(())
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn a_disconnect_rolls_back_an_open_transaction_before_its_receipt() -> anyhow::Result<()> {
    let broker = start_broker(|_| {}).await?;
    let client = connect(&broker).await?;
    send_persistent(&client, "/queue/disconnect-tx", "m", 2).await?;
    let mut sub = client.subscribe("/queue/disconnect-tx", AckMode::ClientIndividual, &[]).await?;
    let received = recv_n(&mut sub, 2).await?;
    client.begin("tx1").await?;
    client.ack_with(&received[0], &[TX1]).await?;
    client.ack_with(&received[1], &[TX1]).await?;
    client.disconnect().await?;
    // Once DISCONNECT is answered, the messages are back in the queue.
    let stats = broker.queue_stats("disconnect-tx").await.context("queue exists")?;
    assert_eq!((stats.ready, stats.in_flight, stats.consumers, stats.acked), (2, 0, 0, 0));
    broker.shutdown().await;
    Ok(())
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn unknown_or_repeated_transactions_are_errors() -> anyhow::Result<()> {
    let broker = start_broker(|_| {}).await?;
    let client = connect(&broker).await?;
    let message = server_error(client.commit("never-begun").await)?;
    ensure!(message.contains("has not begun"), "COMMIT: {message}");

    let client = connect(&broker).await?;
    let message = server_error(client.abort("never-begun").await)?;
    ensure!(message.contains("has not begun"), "ABORT: {message}");

    let client = connect(&broker).await?;
    let message = server_error(
        client.send_with_receipt("/queue/unknown-tx", "x", &[("transaction", "nope")]).await,
    )?;
    ensure!(message.contains("has not begun"), "SEND: {message}");

    let client = connect(&broker).await?;
    client.begin("twice").await?;
    let message = server_error(client.begin("twice").await)?;
    ensure!(message.contains("already begun"), "BEGIN: {message}");

    let client = connect(&broker).await?;
    client.begin("done").await?;
    client.commit("done").await?;
    let message = server_error(client.commit("done").await)?;
    ensure!(message.contains("has not begun"), "second COMMIT: {message}");

    let client = connect(&broker).await?;
    let message = server_error(client.request_receipt(Frame::new(Command::Begin)).await)?;
    ensure!(message.contains("no transaction header"), "BEGIN without a name: {message}");
    // Nothing was sent to the queue.
    assert!(broker.queue_stats("unknown-tx").await.is_none());
    broker.shutdown().await;
    Ok(())
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn an_ack_in_an_unknown_transaction_is_an_error_and_acks_nothing() -> anyhow::Result<()> {
    let broker = start_broker(|_| {}).await?;
    let producer = connect(&broker).await?;
    send_persistent(&producer, "/queue/ack-unknown", "m", 1).await?;
    let client = connect(&broker).await?;
    let mut sub = client.subscribe("/queue/ack-unknown", AckMode::ClientIndividual, &[]).await?;
    let message = recv(&mut sub).await?;
    let error = server_error(client.ack_with(&message, &[("transaction", "nope")]).await)?;
    ensure!(error.contains("has not begun"), "{error}");
    assert_eq!(stored_count(&broker, "ack-unknown")?, 1);
    broker.shutdown().await;
    Ok(())
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn prefetch_one_with_transacted_acks_does_not_stall() -> anyhow::Result<()> {
    let broker = start_broker(|_| {}).await?;
    let client = connect(&broker).await?;
    send_persistent(&client, "/queue/tx-prefetch", "m", 10).await?;
    let mut sub = client
        .subscribe(
            "/queue/tx-prefetch",
            AckMode::ClientIndividual,
            &[("activemq.prefetchSize", "1")],
        )
        .await?;
    client.begin("tx1").await?;
    for index in 0..10 {
        let message = recv(&mut sub).await.with_context(|| format!("message {index}"))?;
        assert_eq!(message.body(), format!("m{index}").as_bytes());
        assert!(!message.redelivered());
        client.ack_with(&message, &[TX1]).await?;
    }
    assert_nothing_arrives(&mut sub).await?;
    assert_eq!(stored_count(&broker, "tx-prefetch")?, 10);
    client.commit("tx1").await?;
    assert_eq!(stored_count(&broker, "tx-prefetch")?, 0);
    client.disconnect().await?;

    let client = connect(&broker).await?;
    let mut sub = client.subscribe("/queue/tx-prefetch", AckMode::ClientIndividual, &[]).await?;
    assert_nothing_arrives(&mut sub).await?;
    broker.shutdown().await;
    Ok(())
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn a_transaction_moves_a_message_from_one_queue_to_another_atomically() -> anyhow::Result<()>
{
    let broker = start_broker(|_| {}).await?;
    let client = connect(&broker).await?;
    send_persistent(&client, "/queue/move-in", "job", 1).await?;
    let observer = connect(&broker).await?;
    let mut out = observer.subscribe("/queue/move-out", AckMode::Auto, &[]).await?;
    let mut input = client.subscribe("/queue/move-in", AckMode::ClientIndividual, &[]).await?;

    // First attempt: aborted, so the input comes back and nothing is output.
    let job = recv(&mut input).await?;
    client.begin("attempt1").await?;
    client.ack_with(&job, &[("transaction", "attempt1")]).await?;
    client
        .send_with_receipt("/queue/move-out", "result", &[("transaction", "attempt1"), PERSISTENT])
        .await?;
    client.abort("attempt1").await?;
    assert_nothing_arrives(&mut out).await?;

    // Second attempt on the redelivered job: committed, both take effect.
    let job = recv(&mut input).await?;
    assert!(job.redelivered());
    client.begin("attempt2").await?;
    client.ack_with(&job, &[("transaction", "attempt2")]).await?;
    client
        .send_with_receipt("/queue/move-out", "result", &[("transaction", "attempt2"), PERSISTENT])
        .await?;
    client.commit("attempt2").await?;
    assert_eq!(&recv(&mut out).await?.body()[..], b"result");
    assert_eq!(stored_count(&broker, "move-in")?, 0);
    assert_nothing_arrives(&mut input).await?;
    broker.shutdown().await;
    Ok(())
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn two_transactions_on_one_connection_are_independent() -> anyhow::Result<()> {
    let broker = start_broker(|_| {}).await?;
    let client = connect(&broker).await?;
    let mut sub = client.subscribe("/queue/two-tx", AckMode::Auto, &[]).await?;
    client.begin("a").await?;
    client.begin("b").await?;
    client.send_with_receipt("/queue/two-tx", "from a", &[("transaction", "a")]).await?;
    client.send_with_receipt("/queue/two-tx", "from b", &[("transaction", "b")]).await?;
    client.send_with_receipt("/queue/two-tx", "no tx", &[]).await?;
    assert_eq!(&recv(&mut sub).await?.body()[..], b"no tx");
    client.abort("a").await?;
    client.commit("b").await?;
    assert_eq!(&recv(&mut sub).await?.body()[..], b"from b");
    assert_nothing_arrives(&mut sub).await?;
    broker.shutdown().await;
    Ok(())
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn transactions_work_on_durable_subscriptions() -> anyhow::Result<()> {
    let store = Arc::new(RecordingStore::new());
    let broker = start_broker_with_store(store.clone(), |_| {}).await?;
    let subscriber = connect_as(&broker, "txd").await?;
    subscriber
        .subscribe("/topic/tx-durable", AckMode::ClientIndividual, &[(SUBSCRIPTION_NAME, "s")])
        .await?;
    subscriber.disconnect().await?;
    let key = durable_key("tx-durable", "txd", "s");

    // A transacted publish reaches the offline subscription only at the commit.
    let producer = connect(&broker).await?;
    producer.begin("tx1").await?;
    for index in 0..3 {
        producer
            .send_with_receipt("/topic/tx-durable", format!("m{index}"), &[TX1, PERSISTENT])
            .await?;
    }
    assert_eq!(stored_count_of(&broker, &key)?, 0);
    let stats = broker.durable_subscription_stats("txd", "s").await.context("exists")?;
    assert_eq!(stats.ready, 0);
    producer.commit("tx1").await?;
    assert_eq!(stored_count_of(&broker, &key)?, 3);
    ensure!(
        store.operations().iter().any(|op| matches!(op, Operation::AddMessage { queues, txn: Some(_), .. } if queues.contains(&key))),
        "no transactional AddMessage for the subscription"
    );

    let subscriber = connect_as(&broker, "txd").await?;
    let mut sub = subscriber
        .subscribe("/topic/tx-durable", AckMode::ClientIndividual, &[(SUBSCRIPTION_NAME, "s")])
        .await?;
    let received = recv_n(&mut sub, 3).await?;
    subscriber.begin("acks").await?;
    for message in &received {
        subscriber.ack_with(message, &[("transaction", "acks")]).await?;
    }
    subscriber.abort("acks").await?;
    let again = recv_n(&mut sub, 3).await?;
    assert!(again.iter().all(|m| m.redelivered()));
    subscriber.begin("acks").await?;
    for message in &again {
        subscriber.ack_with(message, &[("transaction", "acks")]).await?;
    }
    assert_eq!(stored_count_of(&broker, &key)?, 3);
    subscriber.commit("acks").await?;
    assert_eq!(stored_count_of(&broker, &key)?, 0);
    subscriber.disconnect().await?;

    let subscriber = connect_as(&broker, "txd").await?;
    let mut sub = subscriber
        .subscribe("/topic/tx-durable", AckMode::ClientIndividual, &[(SUBSCRIPTION_NAME, "s")])
        .await?;
    assert_nothing_arrives(&mut sub).await?;
    broker.shutdown().await;
    Ok(())
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn a_commit_receipt_means_the_messages_are_deliverable() -> anyhow::Result<()> {
    // Many small transactions back to back: after each COMMIT receipt the consumer gets the
    // transaction's messages, in order, and never anything of an aborted one.
    let broker = start_broker(|_| {}).await?;
    let producer = connect(&broker).await?;
    let consumer = connect(&broker).await?;
    let mut sub = consumer.subscribe("/queue/many-tx", AckMode::Auto, &[]).await?;
    for round in 0..20 {
        let name = format!("tx{round}");
        producer.begin(&name).await?;
        for index in 0..3 {
            producer
                .send("/queue/many-tx", format!("{round}.{index}"), &[("transaction", &name)])
                .await?;
        }
        if round % 3 == 2 {
            producer.abort(&name).await?;
            continue;
        }
        producer.commit(&name).await?;
        let got = tokio::time::timeout(ARRIVES, recv_n(&mut sub, 3)).await??;
        assert_eq!(bodies(&got), [0, 1, 2].map(|i| format!("{round}.{i}")));
    }
    assert_nothing_arrives(&mut sub).await?;
    broker.shutdown().await;
    Ok(())
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn transacted_acks_outlive_the_consumer_that_made_them() -> anyhow::Result<()> {
    // The consumer unsubscribes while its transaction is open: the transaction still decides.
    let broker = start_broker(|_| {}).await?;
    let client = connect(&broker).await?;
    send_persistent(&client, "/queue/tx-leave", "m", 2).await?;
    let other = connect(&broker).await?;
    let mut sub = client.subscribe("/queue/tx-leave", AckMode::ClientIndividual, &[]).await?;
    let received = recv_n(&mut sub, 2).await?;
    client.begin("commits").await?;
    client.ack_with(&received[0], &[("transaction", "commits")]).await?;
    client.begin("aborts").await?;
    client.ack_with(&received[1], &[("transaction", "aborts")]).await?;
    sub.unsubscribe().await?;

    let mut other_sub = other.subscribe("/queue/tx-leave", AckMode::ClientIndividual, &[]).await?;
    // Both are held by their transactions, not handed to the new consumer.
    assert_nothing_arrives(&mut other_sub).await?;
    client.commit("commits").await?;
    client.abort("aborts").await?;
    let again = recv(&mut other_sub).await?;
    assert_eq!(&again.body()[..], b"m1");
    assert!(again.redelivered());
    assert_nothing_arrives(&mut other_sub).await?;
    other.ack(&again).await?;
    assert_eq!(stored_count(&broker, "tx-leave")?, 0);
    broker.shutdown().await;
    Ok(())
}
