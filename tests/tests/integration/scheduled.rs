//! Scheduled delivery over STOMP: the `AMQ_SCHEDULED_*` headers (numeric strings, as
//! ActiveMQ accepts them) hold a message until it is due; invalid schedules are refused with an
//! ERROR; a scheduled send inside a transaction is scheduled only at the commit; persistent
//! schedules wait in the scheduler's store queue, not in their destination.

use std::time::{Duration, Instant};

use anyhow::ensure;
use client::AckMode;
use tests::{
    assert_nothing_arrives, bodies, connect, recv, server_error, start_broker, stored_count,
    stored_count_of, wait_until, PERSISTENT,
};

const DELAY: &str = "AMQ_SCHEDULED_DELAY";
const PERIOD: &str = "AMQ_SCHEDULED_PERIOD";
const REPEAT: &str = "AMQ_SCHEDULED_REPEAT";
const CRON: &str = "AMQ_SCHEDULED_CRON";

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn a_delayed_message_arrives_no_earlier_than_its_delay() -> anyhow::Result<()> {
    let broker = start_broker(|_| {}).await?;
    let client = connect(&broker).await?;
    let mut sub = client.subscribe("/queue/delayed", AckMode::Auto, &[]).await?;
    let sent = Instant::now();
    client.send_with_receipt("/queue/delayed", "later", &[(DELAY, "400"), PERSISTENT]).await?;
    client.send_with_receipt("/queue/delayed", "now", &[]).await?;
    let first = recv(&mut sub).await?;
    assert_eq!(bodies(&[first]), ["now"], "an unscheduled message is not held back");
    let delayed = recv(&mut sub).await?;
    let waited = sent.elapsed();
    ensure!(waited >= Duration::from_millis(400), "delivered after {waited:?}");
    assert_eq!(&delayed.body()[..], b"later");
    assert_eq!(delayed.header(DELAY), None, "the schedule is removed from the delivered copy");
    assert_eq!(
        delayed.header("scheduledJobId"),
        delayed.message_id(),
        "a one-shot delayed message keeps its message id, which is also the job id"
    );
    assert_nothing_arrives(&mut sub).await?;
    broker.shutdown().await;
    Ok(())
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn delay_period_and_repeat_deliver_repeat_plus_one_copies() -> anyhow::Result<()> {
    let broker = start_broker(|_| {}).await?;
    let client = connect(&broker).await?;
    let mut sub = client.subscribe("/queue/repeated", AckMode::Auto, &[]).await?;
    let sent = Instant::now();
    let schedule = [(DELAY, "200"), (PERIOD, "150"), (REPEAT, "2")];
    client.send_with_receipt("/queue/repeated", "tick", &schedule).await?;
    let mut times = Vec::new();
    let mut ids = Vec::new();
    for _ in 0..3 {
        let message = recv(&mut sub).await?;
        times.push(sent.elapsed());
        ids.push(message.message_id().unwrap_or_default().to_owned());
        assert_eq!(&message.body()[..], b"tick");
        assert_eq!(message.header(REPEAT), None);
    }
    ensure!(times[0] >= Duration::from_millis(200), "first copy after {:?}", times[0]);
    for pair in times.windows(2) {
        // The receive times jitter a little; the fires themselves are `period` apart.
        ensure!(pair[1] - pair[0] >= Duration::from_millis(100), "copies at {times:?}");
    }
    ids.sort();
    ids.dedup();
    assert_eq!(ids.len(), 3, "every copy has its own message id");
    assert_nothing_arrives(&mut sub).await?;
    broker.shutdown().await;
    Ok(())
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn invalid_schedules_are_refused() -> anyhow::Result<()> {
    let broker = start_broker(|_| {}).await?;
    let cases = [
        ((CRON, "61 * * * *"), "invalid cron entry `61 * * * *`: minute field `61`"),
        ((CRON, "* * *"), "expected 5 fields"),
        ((DELAY, "-5"), "AMQ_SCHEDULED_DELAY must not be negative"),
        ((DELAY, "soon"), "AMQ_SCHEDULED_DELAY must be a whole number"),
    ];
    let mut sub = connect(&broker).await?.subscribe("/queue/refused", AckMode::Auto, &[]).await?;
    for (header, expected) in cases {
        let client = connect(&broker).await?;
        let error = server_error(client.send_with_receipt("/queue/refused", "x", &[header]).await)?;
        ensure!(error.contains(expected), "{header:?}: {error}");
    }
    assert_nothing_arrives(&mut sub).await?;
    assert_eq!(stored_count(&broker, "refused")?, 0);
    broker.shutdown().await;
    Ok(())
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn a_scheduled_send_in_a_transaction_is_scheduled_at_commit() -> anyhow::Result<()> {
    let broker = start_broker(|_| {}).await?;
    let client = connect(&broker).await?;
    let mut sub = client.subscribe("/queue/tx-scheduled", AckMode::Auto, &[]).await?;
    let tx = ("transaction", "tx1");
    client.begin("tx1").await?;
    client
        .send_with_receipt("/queue/tx-scheduled", "kept", &[tx, (DELAY, "300"), PERSISTENT])
        .await?;
    // Past the delay, but not committed: nothing is scheduled yet.
    tokio::time::sleep(Duration::from_millis(400)).await;
    assert_nothing_arrives(&mut sub).await?;
    assert_eq!(stored_count_of(&broker, &broker::core::scheduler::store_queue())?, 0);
    let committed = Instant::now();
    client.commit("tx1").await?;
    let message = recv(&mut sub).await?;
    let waited = committed.elapsed();
    ensure!(waited >= Duration::from_millis(300), "delivered {waited:?} after the commit");
    assert_eq!(&message.body()[..], b"kept");

    client.begin("tx2").await?;
    let tx2 = ("transaction", "tx2");
    client.send_with_receipt("/queue/tx-scheduled", "aborted", &[tx2, (DELAY, "100")]).await?;
    client.abort("tx2").await?;
    tokio::time::sleep(Duration::from_millis(200)).await;
    assert_nothing_arrives(&mut sub).await?;
    broker.shutdown().await;
    Ok(())
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn a_persistent_schedule_waits_in_the_scheduler_store_queue() -> anyhow::Result<()> {
    let broker = start_broker(|_| {}).await?;
    let client = connect(&broker).await?;
    let scheduler = broker::core::scheduler::store_queue();
    client.send_with_receipt("/queue/parked", "parked", &[(DELAY, "300"), PERSISTENT]).await?;
    assert_eq!(stored_count_of(&broker, &scheduler)?, 1);
    assert_eq!(stored_count(&broker, "parked")?, 0);
    wait_until("the scheduled message moves to its queue", || async {
        stored_count(&broker, "parked").ok() == Some(1)
            && stored_count_of(&broker, &scheduler).ok() == Some(0)
    })
    .await?;
    let mut sub = client.subscribe("/queue/parked", AckMode::Auto, &[]).await?;
    assert_eq!(&recv(&mut sub).await?.body()[..], b"parked");
    broker.shutdown().await;
    Ok(())
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn with_the_scheduler_off_the_properties_are_ignored() -> anyhow::Result<()> {
    let broker = start_broker(|config| config.broker.scheduler = false).await?;
    let client = connect(&broker).await?;
    let mut sub = client.subscribe("/queue/unscheduled", AckMode::Auto, &[]).await?;
    let sent = Instant::now();
    client.send_with_receipt("/queue/unscheduled", "at once", &[(DELAY, "5000")]).await?;
    let message = recv(&mut sub).await?;
    ensure!(sent.elapsed() < Duration::from_secs(4), "held back for {:?}", sent.elapsed());
    assert_eq!(message.header(DELAY), Some("5000"), "the property travels unchanged");
    broker.shutdown().await;
    Ok(())
}
