//! The queue task's timers under paused time: the expiry sweep, the slow consumer check and
//! the idle period the inactive-destination sweep asks about. Time moves only by
//! `tokio::time::advance`, so each test says exactly when something must happen and that it
//! does not happen a moment before, without real sleeps.
//!
//! Expiration itself is wall-clock time (a message's `expiration` is stored and outlives a
//! restart), so an expired message is made expired already; what paused time drives is when
//! the sweep looks.

use std::sync::Arc;
use std::time::Duration;

use conf::SlowConsumerStrategy;
use store::{
    DeliveryMode, Destination, MemoryStore, Message, MessageId, MessageStore, Operation, QueueKey,
    UnitOfWork,
};
use tokio::sync::mpsc;
use tokio::time::advance;

use super::{
    now_millis, spawn, stage, ConsumerSpec, Delivery, FirstWindow, MemoryLimits, QueueCommand,
    QueueHandle, Surroundings,
};
use crate::core::audit::ProducerAudit;
use crate::core::dead_letter::{Cause, DeadLetterSettings};
use crate::core::events::{EventSink, QueueEvent};
use crate::core::policy::Policy;
use crate::core::types::{AckMode, ConsumerId};

fn key() -> QueueKey {
    QueueKey::destination(Destination::queue("TIMED"))
}

/// A persistent message; `expiration` in wall-clock milliseconds, 0 for none.
fn message(id: u64, expiration: i64) -> Arc<Message> {
    let mut message = Message::new(MessageId(id), format!("ID:t-1:1:1:1:{id}"), key().destination);
    message.headers.delivery_mode = DeliveryMode::Persistent;
    message.headers.expiration = expiration;
    Arc::new(message)
}

/// A stored queue over a memory store, reporting to the receiver returned with it.
struct Started {
    queue: QueueHandle,
    store: Arc<dyn MessageStore>,
}

fn start(
    dead_letters: DeadLetterSettings,
    policy: Policy,
) -> (Started, mpsc::UnboundedReceiver<QueueEvent>) {
    let (events, received) = EventSink::new();
    let store: Arc<dyn MessageStore> = Arc::new(MemoryStore::new());
    let surroundings = Surroundings {
        store: store.clone(),
        dead_letters: Arc::new(dead_letters),
        limits: MemoryLimits::default(),
        policy: Arc::new(policy),
        events,
        temp_store: None,
    };
    let queue = spawn(key(), true, surroundings, FirstWindow::Now(&mut ProducerAudit::default()))
        .expect("the queue starts");
    (Started { queue, store }, received)
}

/// Stores `message` for the queue and enqueues it, as `Core::send` does.
fn send(started: &Started, message: Arc<Message>) {
    let unit = UnitOfWork::with(Operation::AddMessage {
        message: message.clone(),
        queues: vec![key()],
        txn: None,
    });
    let arrival = started.queue.announce(&message);
    let staged = stage(&*started.store, unit, vec![arrival]).expect("the store takes it");
    assert!(staged.is_durable(), "the memory store is durable at once");
    drop(staged.enqueue());
}

fn consumer(queue: &QueueHandle, id: u64, prefetch: u32) -> mpsc::UnboundedReceiver<Delivery> {
    let (sink, deliveries) = mpsc::unbounded_channel();
    queue.send(QueueCommand::Subscribe(ConsumerSpec {
        id: ConsumerId(id),
        prefetch,
        ack_mode: AckMode::ClientIndividual,
        exclusive: false,
        priority: 0,
        sink,
        selector: None,
        counts_redeliveries: false,
    }));
    deliveries
}

/// Waits until the task has taken every command sent so far and every timer tick already
/// due: a stats round trip runs the task until it waits again, and a second one covers a
/// tick its `select!` left for the next turn.
async fn settled(queue: &QueueHandle) {
    queue.stats().await.expect("the queue runs");
    queue.stats().await.expect("the queue runs");
}

/// The events reported so far, by kind, leaving out the policy's advisories that a test does
/// not ask for.
fn reported(events: &mut mpsc::UnboundedReceiver<QueueEvent>) -> Vec<QueueEvent> {
    std::iter::from_fn(|| events.try_recv().ok()).collect()
}

#[tokio::test(start_paused = true)]
async fn the_expiry_sweep_dead_letters_an_expired_message_at_its_period() {
    let period = Duration::from_secs(30);
    let settings = DeadLetterSettings {
        expire_messages_period: Some(period),
        ..DeadLetterSettings::default()
    };
    let (started, mut events) = start(settings, Policy::default());
    let queue = &started.queue;
    // Expired already by the wall clock; nobody consumes, so only the sweep looks at it.
    send(&started, message(1, now_millis() - 1));
    send(&started, message(2, 0));
    settled(queue).await;
    advance(period - Duration::from_millis(1)).await;
    settled(queue).await;
    assert!(reported(&mut events).is_empty(), "nothing swept before the period");
    assert_eq!(queue.stats().await.expect("stats").ready, 2);

    advance(Duration::from_millis(1)).await;
    settled(queue).await;
    let events = reported(&mut events);
    let [QueueEvent::DeadLettered(letter)] = &events[..] else {
        panic!("one dead letter expected, got {events:?}");
    };
    assert_eq!(letter.message.id, MessageId(1));
    assert_eq!(letter.cause, Cause::Expired);
    assert!(letter.stored, "its stored reference is for the observer to remove");
    let stats = queue.stats().await.expect("stats");
    assert_eq!((stats.ready, stats.expired), (1, 1), "the unexpired one stays");
}

#[tokio::test(start_paused = true)]
async fn a_consumer_with_full_prefetch_is_slow_and_aborted_after_the_check_period() {
    let strategy = SlowConsumerStrategy {
        max_slow_count: -1,
        max_slow_duration: Duration::from_millis(500),
        check_period: Duration::from_millis(200),
        abort_connection: false,
    };
    let mut policy = Policy { slow_consumer_strategy: Some(strategy), ..Policy::default() };
    policy.advisories.slow_consumers = true;
    let (started, mut events) = start(DeadLetterSettings::default(), policy);
    let queue = &started.queue;
    let mut deliveries = consumer(queue, 1, 1);
    send(&started, message(1, 0));
    settled(queue).await;
    assert!(reported(&mut events).is_empty(), "room for the one message: not slow");
    let delivered = deliveries.try_recv().expect("delivered");
    assert_eq!(delivered.message.id, MessageId(1));

    // Its prefetch is full and a message waits that it could take: slow, reported once.
    send(&started, message(2, 0));
    send(&started, message(3, 0));
    settled(queue).await;
    let events_now = reported(&mut events);
    assert!(
        matches!(&events_now[..], [QueueEvent::Slow { consumer: ConsumerId(1), .. }]),
        "{events_now:?}"
    );
    assert_eq!(queue.stats().await.expect("stats").slow_consumers, 1);

    // Checks at 200 and 400 ms find it slow for less than 500 ms; the one at 600 ms aborts.
    // (Time moves a tick at a time: a tick found late is delayed, not caught up.)
    for _ in 0..2 {
        advance(Duration::from_millis(200)).await;
        settled(queue).await;
        assert!(reported(&mut events).is_empty(), "not slow long enough yet");
    }
    advance(Duration::from_millis(199)).await;
    settled(queue).await;
    assert!(reported(&mut events).is_empty(), "not slow long enough yet");
    advance(Duration::from_millis(1)).await;
    settled(queue).await;
    let events_now = reported(&mut events);
    let [QueueEvent::Abort(notice)] = &events_now[..] else {
        panic!("one abort expected, got {events_now:?}");
    };
    let crate::core::slow::ConsumerNotice::Abort { consumer, close_connection, .. } = notice;
    assert_eq!((*consumer, *close_connection), (ConsumerId(1), false));
    // Sent once: the connection closes the consumer, the queue does not drop it itself.
    advance(Duration::from_secs(2)).await;
    settled(queue).await;
    assert!(reported(&mut events).is_empty(), "aborted once");
    assert_eq!(queue.stats().await.expect("stats").consumers, 1);
}

#[tokio::test(start_paused = true)]
async fn a_consumer_that_acknowledges_in_time_is_not_aborted() {
    let strategy = SlowConsumerStrategy {
        max_slow_count: 2,
        max_slow_duration: Duration::ZERO,
        check_period: Duration::from_millis(100),
        abort_connection: true,
    };
    let policy = Policy { slow_consumer_strategy: Some(strategy), ..Policy::default() };
    let (started, mut events) = start(DeadLetterSettings::default(), policy);
    let queue = &started.queue;
    let mut deliveries = consumer(queue, 1, 1);
    send(&started, message(1, 0));
    send(&started, message(2, 0));
    // The check at 100 ms finds it slow; it acknowledges before the next and takes the
    // last message waiting: not slow any more, so the check at 200 ms starts no count.
    advance(Duration::from_millis(100)).await;
    settled(queue).await;
    let first = deliveries.try_recv().expect("delivered");
    let ack =
        QueueCommand::Ack { consumer: ConsumerId(1), ids: vec![first.message.id], done: None };
    queue.send(ack);
    settled(queue).await;
    assert_eq!(queue.stats().await.expect("stats").slow_consumers, 0);
    advance(Duration::from_millis(100)).await;
    settled(queue).await;
    assert!(reported(&mut events).is_empty(), "consecutive checks only: not aborted");
    // Then a message waits while it holds one: checks at 300 and 400 ms find it slow, and
    // the second aborts it, closing its connection.
    send(&started, message(3, 0));
    advance(Duration::from_millis(100)).await;
    settled(queue).await;
    assert!(reported(&mut events).is_empty(), "one check so far");
    advance(Duration::from_millis(100)).await;
    settled(queue).await;
    let events_now = reported(&mut events);
    assert!(
        matches!(
            &events_now[..],
            [QueueEvent::Abort(crate::core::slow::ConsumerNotice::Abort {
                consumer: ConsumerId(1),
                close_connection: true,
                ..
            })]
        ),
        "{events_now:?}"
    );
}

#[tokio::test(start_paused = true)]
async fn an_idle_queue_retires_only_once_idle_that_long() {
    let after = Duration::from_secs(60);
    let (started, mut events) = start(DeadLetterSettings::default(), Policy::default());
    let queue = &started.queue;
    settled(queue).await;
    advance(after - Duration::from_millis(1)).await;
    queue.send(QueueCommand::Retire { after });
    settled(queue).await;
    assert!(reported(&mut events).is_empty(), "not idle long enough");

    advance(Duration::from_millis(1)).await;
    queue.send(QueueCommand::Retire { after });
    // A bound in paused time: a queue that does not report fails the test instead of
    // hanging it (auto-advance would run its sweep timer forever).
    let reply = tokio::time::timeout(Duration::from_secs(1), events.recv()).await;
    let Ok(Some(QueueEvent::Idle { queue: retired, taken })) = reply else {
        panic!("an idle queue reports it, got {reply:?}");
    };
    assert_eq!(*retired, key());
    // Taken: the two stats of each `settled` and the two Retires, and nothing after.
    assert_eq!(taken, 6);
    assert!(queue.nothing_sent_since(taken), "nothing reached it since it said so");
    send(&started, message(1, 0));
    assert!(!queue.nothing_sent_since(taken), "a send after its report keeps it");

    // Holding a message, it is not idle however long it waits; once the message is gone,
    // the idle period starts again from then.
    advance(after * 2).await;
    queue.send(QueueCommand::Retire { after });
    settled(queue).await;
    assert!(reported(&mut events).is_empty(), "a queue holding a message is not idle");
    let mut deliveries = consumer(queue, 1, 10);
    settled(queue).await;
    let delivery = deliveries.try_recv().expect("delivered");
    let ack =
        QueueCommand::Ack { consumer: ConsumerId(1), ids: vec![delivery.message.id], done: None };
    queue.send(ack);
    queue.send(QueueCommand::Unsubscribe(ConsumerId(1)));
    settled(queue).await;
    advance(after - Duration::from_millis(1)).await;
    queue.send(QueueCommand::Retire { after });
    settled(queue).await;
    assert!(reported(&mut events).is_empty(), "idle again, but not for that long yet");
    advance(Duration::from_millis(1)).await;
    queue.send(QueueCommand::Retire { after });
    settled(queue).await;
    assert!(matches!(&reported(&mut events)[..], [QueueEvent::Idle { .. }]));
}

/// Every connection's deliveries channel allocates room for 32 deliveries at a time, idle or
/// not: a delivery must stay a few words (a queue handle is one pointer).
#[test]
fn a_delivery_stays_small() {
    assert_eq!(std::mem::size_of::<QueueHandle>(), std::mem::size_of::<usize>());
    let size = std::mem::size_of::<Delivery>();
    assert!(size <= 40, "a Delivery is {size} bytes");
}
