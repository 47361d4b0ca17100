use std::time::Duration;

use store::{
    DeliveryMode, Destination, MemoryStore, MessageStore, Operation, PropertyValue, QueueKey,
    UnitOfWork,
};
use tokio::sync::{mpsc, oneshot};

use super::super::{
    spawn, Arrival, ConsumerSpec, Delivery, FirstWindow, QueueHandle, Surroundings,
};
use super::*;
use crate::core::dead_letter::DeadLetterSettings;
use crate::core::types::{AckMode, ConsumerId};

/// A destination limit that holds a few dozen 1 KiB messages.
const SMALL: u64 = 64 << 10;

fn key() -> QueueKey {
    QueueKey::destination(Destination::queue("PAGED"))
}

fn message(id: u64, priority: u8) -> Arc<Message> {
    let mut message = Message::new(MessageId(id), format!("ID:t-1:1:1:1:{id}"), key().destination);
    message.headers.delivery_mode = DeliveryMode::Persistent;
    message.headers.priority = priority;
    message.body = vec![b'x'; 1024].into();
    Arc::new(message)
}

fn store_all(store: &MemoryStore, messages: &[Arc<Message>]) {
    for message in messages {
        let unit = UnitOfWork::with(Operation::AddMessage {
            message: message.clone(),
            queues: vec![key()],
            txn: None,
        });
        assert!(store.submit(unit).is_ready());
    }
}

fn start(store: &Arc<MemoryStore>, limit: u64) -> QueueHandle {
    let dead_letters = Arc::new(DeadLetterSettings::default());
    let store: Arc<dyn MessageStore> = store.clone();
    let limits = MemoryLimits::new(limit, 1 << 30);
    let policy = Arc::default();
    let audit = &mut ProducerAudit::default();
    let events = Default::default();
    let surroundings =
        Surroundings { store, dead_letters, limits, policy, events, temp_store: None };
    spawn(key(), true, surroundings, FirstWindow::Now(audit)).expect("the queue starts")
}

/// A queue like [`start`]'s that spills non-persistent messages to `temp`.
fn start_spilling(
    store: &Arc<MemoryStore>,
    temp: Arc<dyn MessageStore>,
    limit: u64,
) -> QueueHandle {
    let dead_letters = Arc::new(DeadLetterSettings::default());
    let store: Arc<dyn MessageStore> = store.clone();
    let limits = MemoryLimits::new(limit, 1 << 30);
    let audit = &mut ProducerAudit::default();
    let temp = Arc::new(TempStore::new(0, Box::new(move || Ok(temp.clone()))));
    let events = Default::default();
    let policy = Arc::default();
    let temp_store = Some(temp);
    let surroundings = Surroundings { store, dead_letters, limits, policy, events, temp_store };
    spawn(key(), true, surroundings, FirstWindow::Now(audit)).expect("the queue starts")
}

fn non_persistent(id: u64, priority: u8) -> Arc<Message> {
    let mut message = (*message(id, priority)).clone();
    message.headers.delivery_mode = DeliveryMode::NonPersistent;
    Arc::new(message)
}

/// Bytes of the bodies the temporary store holds.
fn spooled(temp: &MemoryStore) -> u64 {
    temp.usage().used_bytes
}

/// In-flight bytes bound dispatch, but not those of messages acknowledged in an open
/// transaction: a transaction larger than the limit must be able to finish.
#[tokio::test]
async fn a_transaction_may_take_more_than_the_limit_before_it_commits() {
    let store = Arc::new(MemoryStore::new());
    let queue = start(&store, SMALL);
    for id in 1..=200 {
        send(&queue, &store, message(id, 4));
    }
    let mut deliveries = consumer(&queue, 1, None);
    for _ in 0..200 {
        let delivery = tokio::time::timeout(Duration::from_secs(5), deliveries.recv())
            .await
            .expect("a delivery while the transaction is open")
            .expect("the queue is running");
        let ids = vec![delivery.message.id];
        queue.send(QueueCommand::AckInTransaction { consumer: ConsumerId(1), ids });
    }
}

/// A consumer that acknowledges nothing holds at most its share of the destination limit
/// in flight (with two consumers, half), however large its prefetch; the other consumer
/// gets the rest.
#[tokio::test]
async fn a_consumer_that_acknowledges_nothing_holds_its_share_of_the_limit() {
    let store = Arc::new(MemoryStore::new());
    let queue = start(&store, SMALL);
    let subscribe = |id: u64| {
        let (sink, deliveries) = mpsc::unbounded_channel();
        queue.send(QueueCommand::Subscribe(ConsumerSpec {
            id: ConsumerId(id),
            prefetch: 1000,
            ack_mode: AckMode::ClientIndividual,
            exclusive: false,
            priority: 0,
            sink,
            selector: None,
            counts_redeliveries: false,
        }));
        deliveries
    };
    let mut stuck = subscribe(1);
    let mut other = subscribe(2);
    for id in 1..=200 {
        send(&queue, &store, message(id, 4));
    }
    let mut received = 0;
    while received < 150 {
        let delivery = tokio::time::timeout(Duration::from_secs(5), other.recv())
            .await
            .expect("the other consumer is served")
            .expect("the queue is running");
        received += 1;
        queue.send(QueueCommand::Ack {
            consumer: ConsumerId(2),
            ids: vec![delivery.message.id],
            done: None,
        });
    }
    let mut held = 0;
    while let Ok(delivery) = stuck.try_recv() {
        held += held_size(&delivery.message);
    }
    assert!(held > 0 && held <= SMALL as usize / 2, "the stuck consumer holds {held} bytes");
}

#[tokio::test]
async fn spilling_to_a_journal_drains_in_order() {
    let dir = tempfile::tempdir().expect("a temporary directory");
    let options = store_journal::JournalOptions {
        sync: store::SyncPolicy::Never,
        ..store_journal::JournalOptions::default()
    };
    let temp = store_journal::JournalStore::open(dir.path(), options).expect("opens");
    temp.recover().expect("recovers");
    let store = Arc::new(MemoryStore::new());
    let queue = start_spilling(&store, Arc::new(temp), SMALL);
    let messages: Vec<_> = (1..=3000).map(|id| non_persistent(id, (id % 3) as u8)).collect();
    for message in &messages {
        send(&queue, &store, message.clone());
    }
    assert_eq!(queue.stats().await.expect("stats").ready, 3000);
    let mut deliveries = consumer(&queue, 1, None);
    let received = drain(&queue, &mut deliveries).await;
    assert_eq!(keys(&received), in_page_order(&messages));
}

/// Sends `message` as `Core::send` does: a persistent one is stored first.
fn send(queue: &QueueHandle, store: &MemoryStore, message: Arc<Message>) {
    let arrival = queue.announce(&message);
    if message.is_persistent() {
        store_all(store, std::slice::from_ref(&message));
    }
    Arrival::enqueue_all([arrival]);
}

/// A producer paced by the gate sends until it closes, and the sends already on their way
/// arrive after it: they wait in memory, a little past the limit, instead of spilling. The
/// first of them used to spill, and with it the queue went into spill mode, every later
/// message through the temporary store and back while the producer kept up with the gate
/// (twice the broker's CPU per message in S1).
#[tokio::test]
async fn sends_that_arrive_after_the_gate_closed_wait_in_memory_instead_of_spilling() {
    let (store, temp) = (Arc::new(MemoryStore::new()), Arc::new(MemoryStore::new()));
    let queue = start_spilling(&store, temp.clone(), SMALL);
    let mut id = 0;
    while !queue.gate.is_blocked() {
        id += 1;
        send(&queue, &store, non_persistent(id, 4));
    }
    // Two on their way when it closed.
    for _ in 0..2 {
        id += 1;
        send(&queue, &store, non_persistent(id, 4));
    }
    let stats = queue.stats().await.expect("stats");
    assert_eq!(stats.ready as u64, id);
    assert_eq!(spooled(&temp), 0, "{} bytes spilled", spooled(&temp));
    // Drained and refilled by the paced producer, the queue never spills either.
    let mut deliveries = consumer(&queue, 1, None);
    for _ in 0..2000 {
        if !queue.gate.is_blocked() {
            id += 1;
            send(&queue, &store, non_persistent(id, 4));
        }
        let delivery = tokio::time::timeout(Duration::from_secs(5), deliveries.recv())
            .await
            .expect("a delivery")
            .expect("the queue is running");
        queue.send(QueueCommand::Ack {
            consumer: ConsumerId(1),
            ids: vec![delivery.message.id],
            done: None,
        });
        assert_eq!(spooled(&temp), 0, "spilled at message {}", delivery.message.id);
    }
}

#[tokio::test]
async fn non_persistent_messages_beyond_the_limit_spill_and_come_back_in_order() {
    let (store, temp) = (Arc::new(MemoryStore::new()), Arc::new(MemoryStore::new()));
    let queue = start_spilling(&store, temp.clone(), SMALL);
    let mut messages = Vec::new();
    for id in 1..=2000 {
        // Persistent and not, priorities mixed: one order over both stores.
        let priority = (id % 5) as u8 * 2;
        let message =
            if id % 3 == 0 { message(id, priority) } else { non_persistent(id, priority) };
        send(&queue, &store, message.clone());
        messages.push(message);
    }
    let stats = queue.stats().await.expect("stats");
    assert_eq!(stats.ready, 2000, "spilled messages count as ready");
    assert!(stats.memory_bytes < 2 * SMALL as usize, "{} bytes held", stats.memory_bytes);
    assert!(spooled(&temp) > 1000 * 1024, "only {} bytes spilled", spooled(&temp));
    let mut deliveries = consumer(&queue, 1, None);
    let received = drain(&queue, &mut deliveries).await;
    assert_eq!(keys(&received), in_page_order(&messages));
    assert_eq!(spooled(&temp), 0, "everything read back left the temporary store");
    assert_eq!(store.count(&key()).expect("count"), 0);
}

#[tokio::test]
async fn spilled_messages_that_expire_leave_the_temporary_store_undelivered() {
    let (store, temp) = (Arc::new(MemoryStore::new()), Arc::new(MemoryStore::new()));
    let queue = start_spilling(&store, temp.clone(), SMALL);
    let expiration = crate::core::queue::now_millis() + 200;
    for id in 1..=500 {
        let mut message = (*non_persistent(id, 4)).clone();
        message.headers.expiration = expiration;
        send(&queue, &store, Arc::new(message));
    }
    let kept = non_persistent(501, 4);
    send(&queue, &store, kept.clone());
    assert_eq!(queue.stats().await.expect("stats").ready, 501);
    assert!(spooled(&temp) > 0);
    tokio::time::sleep(Duration::from_millis(300)).await;
    let mut deliveries = consumer(&queue, 1, None);
    let received = drain(&queue, &mut deliveries).await;
    assert_eq!(keys(&received), vec![PageKey::of(&kept)], "expired ones are never delivered");
    let stats = queue.stats().await.expect("stats");
    assert_eq!((stats.ready, stats.expired), (0, 500));
    assert_eq!(spooled(&temp), 0, "nothing is left in the temporary store");
}

#[tokio::test]
async fn a_selector_finds_spilled_messages_and_a_stopped_queue_drops_its_spill() {
    let (store, temp) = (Arc::new(MemoryStore::new()), Arc::new(MemoryStore::new()));
    let queue = start_spilling(&store, temp.clone(), SMALL);
    for id in 1..=1000 {
        let mut message = (*non_persistent(id, 4)).clone();
        if id == 990 {
            message.properties.insert("color".into(), PropertyValue::String("red".into()));
        }
        send(&queue, &store, Arc::new(message));
    }
    let mut reds = consumer(&queue, 1, Some("color = 'red'"));
    let received = drain(&queue, &mut reds).await;
    assert_eq!(received.iter().map(|m| m.id.0).collect::<Vec<_>>(), vec![990]);
    let (reply, browsed) = oneshot::channel();
    queue.send(QueueCommand::Browse { selector: None, reply });
    assert_eq!(browsed.await.expect("browsed").len(), MAX_BROWSE);
    assert!(spooled(&temp) > 0);
    queue.send(QueueCommand::Stop);
    tokio::time::sleep(Duration::from_millis(100)).await;
    assert_eq!(spooled(&temp), 0, "a stopped queue leaves nothing in the temporary store");
}

fn consumer(
    queue: &QueueHandle,
    id: u64,
    selector: Option<&str>,
) -> mpsc::UnboundedReceiver<Delivery> {
    let (sink, deliveries) = mpsc::unbounded_channel();
    queue.send(QueueCommand::Subscribe(ConsumerSpec {
        id: ConsumerId(id),
        prefetch: 10,
        ack_mode: AckMode::ClientIndividual,
        exclusive: false,
        priority: 0,
        sink,
        selector: selector.map(|s| Arc::new(Selector::parse(s).expect("selector parses"))),
        counts_redeliveries: false,
    }));
    deliveries
}

/// Receives and acknowledges until nothing comes for a while.
async fn drain(
    queue: &QueueHandle,
    deliveries: &mut mpsc::UnboundedReceiver<Delivery>,
) -> Vec<Arc<Message>> {
    let mut received = Vec::new();
    while let Ok(Some(delivery)) =
        tokio::time::timeout(Duration::from_millis(300), deliveries.recv()).await
    {
        let (done, _) = oneshot::channel();
        queue.send(QueueCommand::Ack {
            consumer: delivery.consumer,
            ids: vec![delivery.message.id],
            done: Some(done),
        });
        received.push(delivery.message);
    }
    received
}

fn in_page_order(messages: &[Arc<Message>]) -> Vec<PageKey> {
    let mut keys: Vec<PageKey> = messages.iter().map(|m| PageKey::of(m)).collect();
    keys.sort();
    keys
}

fn keys(messages: &[Arc<Message>]) -> Vec<PageKey> {
    messages.iter().map(|m| PageKey::of(m)).collect()
}

#[test]
fn the_key_before_excludes_exactly_one_key() {
    let key = PageKey { priority: 4, id: MessageId(10) };
    assert_eq!(before(key), Some(PageKey { priority: 4, id: MessageId(9) }));
    let first = PageKey { priority: 4, id: MessageId(0) };
    let previous = before(first).expect("a higher priority exists");
    assert!(previous < first && PageKey { priority: 5, id: MessageId(7) } <= previous);
    let window = Window::Partial(before(key));
    assert!(window.beyond(key) && !window.beyond(PageKey { priority: 4, id: MessageId(9) }));
}

#[tokio::test]
async fn a_deep_queue_loads_only_its_first_window() {
    let store = Arc::new(MemoryStore::new());
    let messages: Vec<_> = (1..=2000).map(|id| message(id, 4)).collect();
    store_all(&store, &messages);
    let queue = start(&store, SMALL);
    let stats = queue.stats().await.expect("stats");
    assert_eq!(stats.ready, 2000, "the stored messages count as ready");
    assert!(
        stats.memory_bytes < 2 * SMALL as usize,
        "{} bytes held for a 64 KiB limit",
        stats.memory_bytes
    );
}

#[tokio::test]
async fn a_deep_queue_drains_completely_in_priority_order() {
    let store = Arc::new(MemoryStore::new());
    let mut messages: Vec<_> = (1..=1500).map(|id| message(id, (id % 3) as u8 * 3)).collect();
    store_all(&store, &messages);
    let queue = start(&store, SMALL);
    // While nobody consumes: high-priority messages fall inside the window (and evict its
    // tail), low-priority ones after it (they stay in the store only).
    for id in 1501..=1700 {
        let message = message(id, if id % 2 == 0 { 9 } else { 0 });
        let arrival = queue.announce(&message);
        store_all(&store, std::slice::from_ref(&message));
        Arrival::enqueue_all([arrival]);
        messages.push(message);
    }
    let stats = queue.stats().await.expect("stats");
    assert_eq!(stats.ready, 1700);
    assert!(stats.memory_bytes < 2 * SMALL as usize, "{} bytes held", stats.memory_bytes);
    let mut deliveries = consumer(&queue, 1, None);
    let received = drain(&queue, &mut deliveries).await;
    assert_eq!(keys(&received), in_page_order(&messages));
    assert_eq!(store.count(&key()).expect("count"), 0);
}

#[tokio::test]
async fn a_message_still_arriving_is_not_paged_in_twice() {
    let store = Arc::new(MemoryStore::new());
    let messages: Vec<_> = (1..=1000).map(|id| message(id, 4)).collect();
    store_all(&store, &messages);
    let queue = start(&store, SMALL);
    // Stored (and readable) but its Enqueue not sent yet, as between a send's submit and
    // its enqueue, or a transaction's commit and its completion.
    let late = message(1001, 4);
    let arrival = queue.announce(&late);
    store_all(&store, std::slice::from_ref(&late));
    let mut deliveries = consumer(&queue, 1, None);
    let received = drain(&queue, &mut deliveries).await;
    assert_eq!(keys(&received), in_page_order(&messages), "the arriving one is skipped");
    Arrival::enqueue_all([arrival]);
    let received = drain(&queue, &mut deliveries).await;
    assert_eq!(keys(&received), vec![PageKey::of(&late)], "delivered once, by its Enqueue");
    assert_eq!(queue.stats().await.expect("stats").ready, 0);
}

/// An arrival dropped without its `Enqueue` (its unit failed, or it will not be enqueued
/// after all) ends its announcement: paging no longer skips the message, and the queue is
/// quiet again for the inactive-destination sweep.
#[tokio::test]
async fn a_dropped_arrival_is_withdrawn() {
    let store = Arc::new(MemoryStore::new());
    let messages: Vec<_> = (1..=1000).map(|id| message(id, 4)).collect();
    store_all(&store, &messages);
    let queue = start(&store, SMALL);
    let late = message(1001, 4);
    let arrival = queue.announce(&late);
    assert!(!queue.is_quiet(), "a message is on its way");
    store_all(&store, std::slice::from_ref(&late));
    drop(arrival);
    assert!(queue.is_quiet(), "withdrawn");
    let mut deliveries = consumer(&queue, 1, None);
    let received = drain(&queue, &mut deliveries).await;
    let mut all = messages;
    all.push(late);
    assert_eq!(keys(&received), in_page_order(&all), "paged in like any stored message");
}

#[tokio::test]
async fn a_returned_message_beyond_the_window_keeps_its_delivery_count() {
    let store = Arc::new(MemoryStore::new());
    let messages: Vec<_> = (1..=1000).map(|id| message(id, 4)).collect();
    store_all(&store, &messages);
    let queue = start(&store, SMALL);
    let mut deliveries = consumer(&queue, 1, Some("JMSPriority = 4"));
    let first = deliveries.recv().await.expect("a delivery");
    // A burst of high-priority messages evicts the window's tail and more: the boundary
    // moves before the returned message.
    for id in 1001..=1200 {
        let message = message(id, 9);
        let arrival = queue.announce(&message);
        store_all(&store, std::slice::from_ref(&message));
        Arrival::enqueue_all([arrival]);
    }
    queue.send(QueueCommand::Unsubscribe(ConsumerId(1)));
    let mut deliveries = consumer(&queue, 2, Some("JMSPriority = 4"));
    let again = deliveries.recv().await.expect("delivered again");
    assert_eq!(again.message.id, first.message.id);
    assert!(again.redelivered && again.delivery_count == 2);
}

#[tokio::test]
async fn a_selector_finds_its_matches_beyond_the_window() {
    let store = Arc::new(MemoryStore::new());
    let mut messages: Vec<_> = (1..=3000).map(|id| message(id, 4)).collect();
    for id in [2990, 2995] {
        let mut red = (*message(id, 4)).clone();
        red.properties.insert("color".into(), PropertyValue::String("red".into()));
        messages[id as usize - 1] = Arc::new(red);
    }
    store_all(&store, &messages);
    let queue = start(&store, SMALL);
    let mut reds = consumer(&queue, 1, Some("color = 'red'"));
    let received = drain(&queue, &mut reds).await;
    assert_eq!(received.iter().map(|m| m.id.0).collect::<Vec<_>>(), vec![2990, 2995]);
    let (reply, browsed) = oneshot::channel();
    queue.send(QueueCommand::Browse { selector: None, reply });
    let browsed = browsed.await.expect("browsed");
    assert_eq!(browsed.len(), MAX_BROWSE, "a browse is bounded");
    assert!(browsed.windows(2).all(|pair| pair[0].id < pair[1].id));
    let mut rest = consumer(&queue, 2, None);
    assert_eq!(drain(&queue, &mut rest).await.len(), 2998);
}

/// Queues like non-durable topic subscriptions (not stored, spilling to `temp`), `count` of
/// them, sharing one broker limit.
fn subscriptions(count: usize, limits: &MemoryLimits, temp: &Arc<MemoryStore>) -> Vec<QueueHandle> {
    let temp: Arc<dyn MessageStore> = temp.clone();
    let temp = Arc::new(TempStore::new(0, Box::new(move || Ok(temp.clone()))));
    (0..count)
        .map(|index| {
            let surroundings = Surroundings {
                store: Arc::new(MemoryStore::new()),
                dead_letters: Arc::new(DeadLetterSettings::default()),
                limits: limits.clone(),
                policy: Arc::default(),
                events: Default::default(),
                temp_store: Some(temp.clone()),
            };
            let key = QueueKey::destination(Destination::queue(format!("FAN.{index}")));
            let audit = &mut ProducerAudit::default();
            spawn(key, false, surroundings, FirstWindow::Now(audit)).expect("the queue starts")
        })
        .collect()
}

/// Routes each message to every queue at once, as a topic send does.
fn fan_out(queues: &[QueueHandle], messages: &[Arc<Message>]) {
    for message in messages {
        Arrival::enqueue_all(queues.iter().map(|queue| queue.announce(message)));
    }
}

/// Takes `count` deliveries from `queue`, acknowledging each.
async fn take(
    queue: &QueueHandle,
    deliveries: &mut mpsc::UnboundedReceiver<Delivery>,
    count: usize,
) {
    for _ in 0..count {
        let delivery = tokio::time::timeout(Duration::from_secs(10), deliveries.recv())
            .await
            .expect("a delivery")
            .expect("the queue is running");
        queue.send(QueueCommand::Ack {
            consumer: delivery.consumer,
            ids: vec![delivery.message.id],
            done: None,
        });
    }
}

/// A message to 50 subscribers is one body in memory: it counts once against the broker's
/// limit, so their backlogs stay in memory while what they hold together is within it. With
/// its size counted in each subscription, 200 KiB of messages counted as 19 MiB and every
/// subscriber spilled its backlog to the temporary store.
#[tokio::test]
async fn a_fan_out_counts_each_body_once_and_does_not_spill() {
    const SUBSCRIBERS: usize = 50;
    const MESSAGES: u64 = 200;
    let temp = Arc::new(MemoryStore::new());
    let limits = MemoryLimits::new(64 << 20, 4 << 20);
    let queues = subscriptions(SUBSCRIBERS, &limits, &temp);
    let messages: Vec<_> = (1..=MESSAGES).map(|id| non_persistent(id, 4)).collect();
    fan_out(&queues, &messages);
    for queue in &queues {
        let stats = queue.stats().await.expect("stats");
        assert_eq!(stats.ready as u64, MESSAGES);
    }
    assert_eq!(spooled(&temp), 0, "{} bytes spilled", spooled(&temp));
    let bodies = limits.broker_shared();
    let one_body = messages[0].memory_size();
    assert!(
        (MESSAGES as usize * one_body..MESSAGES as usize * (one_body + ENTRY_OVERHEAD))
            .contains(&bodies),
        "{bodies} bytes of shared bodies"
    );
    assert!(limits.broker_used() < 4 << 20, "{} bytes used", limits.broker_used());
    // Every subscriber drains: the bodies leave the broker's usage with the last holder.
    for queue in &queues {
        let mut deliveries = consumer(queue, 1, None);
        take(queue, &mut deliveries, MESSAGES as usize).await;
    }
    for queue in &queues {
        let stats = queue.stats().await.expect("stats");
        assert_eq!((stats.ready, stats.in_flight), (0, 0));
    }
    assert_eq!(limits.broker_shared(), 0);
    assert_eq!(limits.broker_used(), 0);
    assert_eq!(limits.broker_pinned(), 0);
}

/// One subscriber that stops reading while the others drain still holds every body: they
/// count until it lets them go, so the broker's limit still bounds what it holds (a share
/// per subscriber would have counted a fiftieth of them).
#[tokio::test]
async fn a_stalled_subscriber_keeps_the_bodies_it_holds_counted() {
    let temp = Arc::new(MemoryStore::new());
    let limits = MemoryLimits::new(64 << 20, 1 << 30);
    let queues = subscriptions(10, &limits, &temp);
    let messages: Vec<_> = (1..=100).map(|id| non_persistent(id, 4)).collect();
    fan_out(&queues, &messages);
    let (stalled, draining) = queues.split_first().expect("queues");
    for queue in draining {
        let mut deliveries = consumer(queue, 1, None);
        take(queue, &mut deliveries, messages.len()).await;
        queue.stats().await.expect("stats");
    }
    let bodies: usize = messages.iter().map(|m| m.memory_size() + MESSAGE_OVERHEAD).sum();
    assert_eq!(limits.broker_shared(), bodies);
    let held = stalled.stats().await.expect("stats");
    assert_eq!(held.ready, messages.len());
    let mut deliveries = consumer(stalled, 1, None);
    take(stalled, &mut deliveries, messages.len()).await;
    stalled.stats().await.expect("stats");
    assert_eq!(limits.broker_shared(), 0);
    assert_eq!(limits.broker_used(), 0);
}
