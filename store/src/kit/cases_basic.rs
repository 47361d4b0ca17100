//! Cases: adds, reads in page order, acks, shared bodies, destinations, subscriptions,
//! submission order and restarts.

use std::collections::BTreeSet;
use std::sync::Arc;

use bytes::Bytes;

use super::*;
use crate::contract::{SubscriptionInfo, SubscriptionKey};
use crate::message::{BodyKind, DeliveryMode, DestinationKind, JmsHeaders, PropertyValue};

/// A fresh store recovers nothing, reads nothing, and says so again after a restart.
pub fn empty_store_recovers_empty(h: &mut dyn StoreHarness) {
    let Opened { store, recovered } = open(h);
    let check = |recovered: &Recovered, store: &dyn MessageStore| {
        assert!(recovered.destinations.is_empty(), "destinations: {:?}", recovered.destinations);
        assert!(recovered.subscriptions.is_empty(), "subscriptions: {:?}", recovered.subscriptions);
        assert!(recovered.prepared.is_empty(), "prepared: {:?}", recovered.prepared);
        assert!(recovered.next_message_id.0 >= 1, "message ids start at 1");
        assert_queue(store, &queue("NOTHING"), &[]);
        let topic = QueueKey::durable(Destination::topic("T"), sub_key("c", "s"));
        assert_queue(store, &topic, &[]);
    };
    check(&recovered, store.as_ref());
    let Opened { store, recovered } = restart(h, store);
    check(&recovered, store.as_ref());
}

/// Higher priority first, then increasing id; priorities above 9 count as 9.
pub fn add_then_read_in_priority_then_id_order(h: &mut dyn StoreHarness) {
    let Opened { store, .. } = open(h);
    let q = queue("ORDERS");
    let priorities = [4u8, 9, 0, 4, 9, 7, 0, 4, 200, 1, 9, 5];
    let messages: Vec<_> = priorities
        .iter()
        .enumerate()
        .map(|(i, p)| message(i as u64 + 1, &q.destination, *p))
        .collect();
    // Some units with one add, one with several.
    for m in &messages[..4] {
        submit_ok(store.as_ref(), vec![add(m, &[&q])]);
    }
    submit_ok(store.as_ref(), messages[4..].iter().map(|m| add(m, &[&q])).collect());

    let mut expected: Vec<_> = messages.iter().map(|m| (PageKey::of(m), m.id.0)).collect();
    expected.sort();
    let expected: Vec<u64> = expected.into_iter().map(|(_, id)| id).collect();
    assert_eq!(expected[..4], [2, 5, 9, 11], "priority 9 (and 200, clamped) first, by id");
    assert_queue(store.as_ref(), &q, &expected);
    for read in read_all(store.as_ref(), &q) {
        assert_eq!(*read, *messages[read.id.0 as usize - 1], "messages read back intact");
    }

    let Opened { store, .. } = restart(h, store);
    assert_queue(store.as_ref(), &q, &expected);
    for read in read_all(store.as_ref(), &q) {
        assert_eq!(*read, *messages[read.id.0 as usize - 1], "messages intact after restart");
    }
}

/// `read_page` resumes strictly after `after` (present in the queue or not) and returns at
/// most `limit` messages.
pub fn read_page_pages_with_after_and_limit(h: &mut dyn StoreHarness) {
    let Opened { store, .. } = open(h);
    let q = queue("PAGED");
    let messages: Vec<_> =
        (1..=25u64).map(|id| message(id, &q.destination, [3u8, 8, 5][id as usize % 3])).collect();
    submit_ok(store.as_ref(), messages.iter().map(|m| add(m, &[&q])).collect());
    let mut keys: Vec<PageKey> = messages.iter().map(|m| PageKey::of(m)).collect();
    keys.sort();
    let expected: Vec<u64> = keys.iter().map(|k| k.id.0).collect();

    let page_ids = |after: Option<PageKey>, limit: usize| -> Vec<u64> {
        let page =
            store.read_page(&q, after, limit).unwrap_or_else(|e| panic!("read_page failed: {e}"));
        if let (Some(after), Some(first)) = (after, page.first()) {
            assert!(
                PageKey::of(&first.message) > after,
                "read_page resumed at or before {after:?}"
            );
        }
        page.iter().map(|s| s.message.id.0).collect()
    };
    for limit in [1usize, 4, 7, 25, 1000] {
        let mut seen = Vec::new();
        let mut after = None;
        loop {
            let page = page_ids(after, limit);
            assert!(page.len() <= limit, "page of {} exceeds limit {limit}", page.len());
            let Some(&last) = page.last() else { break };
            after = keys.iter().find(|k| k.id.0 == last).copied();
            seen.extend(page);
        }
        assert_eq!(seen, expected, "paging with limit {limit}");
    }
    assert!(page_ids(None, 0).is_empty(), "limit 0 reads nothing");
    assert!(page_ids(keys.last().copied(), 10).is_empty(), "nothing after the last key");
    // Resuming after a key that is not in the queue: between priorities and within one.
    for (priority, id) in [(6u8, 0u64), (5, 14), (9, 1000), (0, 0)] {
        let after = PageKey { priority, id: MessageId(id) };
        let expected_after: Vec<u64> =
            keys.iter().filter(|k| **k > after).map(|k| k.id.0).collect();
        assert_eq!(page_ids(Some(after), 100), expected_after, "after {after:?}");
    }
    // Resuming after an acked message.
    let gone = keys[10];
    submit_ok(store.as_ref(), vec![ack(&q, gone)]);
    assert_eq!(page_ids(Some(gone), 3), expected[11..14], "after an acked key");
}

/// An ack removes the reference, and the removal survives a restart.
pub fn ack_removes_reference(h: &mut dyn StoreHarness) {
    let Opened { store, .. } = open(h);
    let q = queue("Q");
    let ms: Vec<_> = (1..=4).map(|id| message_for(id, &q)).collect();
    submit_ok(store.as_ref(), ms.iter().map(|m| add(m, &[&q])).collect());
    submit_ok(store.as_ref(), vec![ack(&q, key(&ms[1]))]);
    assert_queue(store.as_ref(), &q, &[1, 3, 4]);
    submit_ok(store.as_ref(), vec![ack(&q, key(&ms[0])), ack(&q, key(&ms[3]))]);
    assert_queue(store.as_ref(), &q, &[3]);
    let Opened { store, .. } = restart(h, store);
    assert_queue(store.as_ref(), &q, &[3]);
    submit_ok(store.as_ref(), vec![ack(&q, key(&ms[2]))]);
    let Opened { store, .. } = restart(h, store);
    assert_queue(store.as_ref(), &q, &[]);
}

/// An ack names the key its reference is filed under ([`PageKey::of`] the message: its
/// priority, clamped to 9, and its id) and removes it at any priority, plainly or in a
/// transaction, from the queue it names only; the id under another priority is another key
/// and changes nothing.
pub fn ack_with_the_key_of_the_reference_removes_it_at_any_priority(h: &mut dyn StoreHarness) {
    let Opened { store, .. } = open(h);
    let (q, other) = (queue("PRIORITIES"), queue("PRIORITIES.OTHER"));
    let ms: Vec<_> = [0u8, 1, 2, 3, 4, 5, 6, 7, 8, 9, 200]
        .iter()
        .enumerate()
        .map(|(i, priority)| message(i as u64 + 1, &q.destination, *priority))
        .collect();
    submit_ok(store.as_ref(), ms.iter().map(|m| add(m, &[&q, &other])).collect());
    let in_order = |ms: &[&Arc<Message>]| -> Vec<u64> {
        let mut keys: Vec<PageKey> = ms.iter().map(|m| key(m)).collect();
        keys.sort();
        keys.iter().map(|k| k.id.0).collect()
    };
    let all = in_order(&ms.iter().collect::<Vec<_>>());
    assert_queue(store.as_ref(), &q, &all);

    // The right ids under the wrong priorities: nothing is removed.
    let wrong = |m: &Arc<Message>| PageKey { priority: (key(m).priority + 5) % 10, ..key(m) };
    submit_ok(store.as_ref(), ms.iter().map(|m| ack(&q, wrong(m))).collect());
    submit_ok(store.as_ref(), ms.iter().map(|m| ack_txn(&q, wrong(m), 1)).collect());
    submit_ok(store.as_ref(), vec![Operation::Commit(TxnId(1))]);
    assert_queue(store.as_ref(), &q, &all);

    // Every other message acked plainly, the rest in a transaction.
    let (plain, txn): (Vec<_>, Vec<_>) = ms.iter().partition(|m| m.id.0 % 2 == 1);
    submit_ok(store.as_ref(), plain.iter().map(|m| ack(&q, key(m))).collect());
    assert_queue(store.as_ref(), &q, &in_order(&txn));
    submit_ok(store.as_ref(), txn.iter().map(|m| ack_txn(&q, key(m), 2)).collect());
    assert_queue(store.as_ref(), &q, &in_order(&txn));
    submit_ok(store.as_ref(), vec![Operation::Commit(TxnId(2))]);
    assert_queue(store.as_ref(), &q, &[]);
    assert_queue(store.as_ref(), &other, &all);

    let Opened { store, .. } = restart(h, store);
    assert_queue(store.as_ref(), &q, &[]);
    assert_queue(store.as_ref(), &other, &all);
    submit_ok(store.as_ref(), ms.iter().rev().map(|m| ack(&other, key(m))).collect());
    assert_queue(store.as_ref(), &other, &[]);
    let Opened { store, .. } = restart(h, store);
    assert_queue(store.as_ref(), &other, &[]);
}

/// Acking a key the queue does not hold (never added, already acked, other queue, unknown
/// queue, the id under another priority) succeeds and changes nothing.
pub fn ack_of_unknown_reference_is_harmless(h: &mut dyn StoreHarness) {
    let Opened { store, .. } = open(h);
    let (q, other) = (queue("Q"), queue("OTHER"));
    let (m1, m2) = (message_for(1, &q), message_for(2, &other));
    submit_ok(store.as_ref(), vec![add(&m1, &[&q]), add(&m2, &[&other])]);
    submit_ok(store.as_ref(), vec![ack(&q, key_for(99))]);
    submit_ok(store.as_ref(), vec![ack(&q, key(&m2))]);
    submit_ok(store.as_ref(), vec![ack(&queue("NEVER.DECLARED"), key(&m1))]);
    submit_ok(store.as_ref(), vec![ack(&q, PageKey { priority: 9, ..key(&m1) })]);
    submit_ok(store.as_ref(), vec![ack(&other, key(&m2)), ack(&other, key(&m2))]);
    assert_queue(store.as_ref(), &q, &[1]);
    assert_queue(store.as_ref(), &other, &[]);
    let Opened { store, .. } = restart(h, store);
    submit_ok(store.as_ref(), vec![ack(&other, key(&m2))]);
    assert_queue(store.as_ref(), &q, &[1]);
    assert_eq!(*read_all(store.as_ref(), &q)[0], *m1);
}

pub(crate) fn sub_key(client_id: &str, name: &str) -> SubscriptionKey {
    SubscriptionKey { client_id: client_id.into(), name: name.into() }
}

pub(crate) fn sub_info(
    key: &SubscriptionKey,
    topic: &Destination,
    selector: Option<&str>,
) -> SubscriptionInfo {
    SubscriptionInfo {
        key: key.clone(),
        topic: topic.clone(),
        selector: selector.map(Into::into),
        no_local: false,
    }
}

/// One message referenced by several queues (two queues and a durable subscription) is read
/// intact from each until each has acked it, across restarts.
pub fn body_stored_once_freed_after_last_ack(h: &mut dyn StoreHarness) {
    let Opened { store, .. } = open(h);
    let topic = Destination::topic("VirtualTopic.ORDERS");
    let info = sub_info(&sub_key("client", "durable"), &topic, None);
    let (a, b, s) = (
        queue("Consumer.A.VirtualTopic.ORDERS"),
        queue("Consumer.B.VirtualTopic.ORDERS"),
        info.queue(),
    );
    let shared = message(1, &topic, 4);
    let other = message(2, &topic, 4);
    submit_ok(
        store.as_ref(),
        vec![
            Operation::AddSubscription(info.clone()),
            add(&shared, &[&a, &b, &s]),
            add(&other, &[&b]),
        ],
    );
    for q in [&a, &b, &s] {
        assert_eq!(*read_all(store.as_ref(), q)[0], *shared, "shared body read from {q:?}");
    }
    submit_ok(store.as_ref(), vec![ack(&a, key(&shared))]);
    assert_queue(store.as_ref(), &a, &[]);
    assert_queue(store.as_ref(), &b, &[1, 2]);
    assert_queue(store.as_ref(), &s, &[1]);

    let Opened { store, .. } = restart(h, store);
    assert_eq!(*read_all(store.as_ref(), &b)[0], *shared, "body kept while references remain");
    submit_ok(store.as_ref(), vec![ack(&b, key(&shared))]);
    assert_queue(store.as_ref(), &b, &[2]);

    let Opened { store, .. } = restart(h, store);
    assert_queue(store.as_ref(), &a, &[]);
    assert_eq!(*read_all(store.as_ref(), &s)[0], *shared, "last reference still reads the body");
    submit_ok(store.as_ref(), vec![ack(&s, key(&shared))]);
    for q in [&a, &s] {
        assert_queue(store.as_ref(), q, &[]);
    }
    // The id is gone for good: adding another reference to it later would need the body again.
    let Opened { store, .. } = restart(h, store);
    for q in [&a, &s] {
        assert_queue(store.as_ref(), q, &[]);
    }
    assert_queue(store.as_ref(), &b, &[2]);
    assert_eq!(*read_all(store.as_ref(), &b)[0], *other);
}

fn assert_recovered(
    recovered: &Recovered,
    destinations: &[&Destination],
    subscriptions: &[&SubscriptionInfo],
) {
    let got: BTreeSet<&Destination> = recovered.destinations.iter().collect();
    let want: BTreeSet<&Destination> = destinations.iter().copied().collect();
    assert_eq!(got, want, "recovered destinations");
    assert_eq!(recovered.destinations.len(), got.len(), "destinations reported once each");
    let mut got: Vec<&SubscriptionInfo> = recovered.subscriptions.iter().collect();
    got.sort_by(|x, y| x.key.cmp(&y.key));
    let mut want: Vec<&SubscriptionInfo> = subscriptions.to_vec();
    want.sort_by(|x, y| x.key.cmp(&y.key));
    assert_eq!(got, want, "recovered subscriptions");
}

/// Declared destinations (even empty ones), destinations that hold references and durable
/// subscriptions are reported by recovery; removed ones are not.
pub fn destinations_and_subscriptions_recovered(h: &mut dyn StoreHarness) {
    let Opened { store, .. } = open(h);
    let q1 = Destination::queue("DECLARED.QUEUE");
    let t1 = Destination::topic("DECLARED.TOPIC");
    let temp = Destination { kind: DestinationKind::TempQueue, name: "ID:temp:1".into() };
    let used = queue("UNDECLARED.BUT.USED");
    let s1 = SubscriptionInfo {
        selector: Some("color = 'red'".into()),
        ..sub_info(&sub_key("c1", "s1"), &t1, None)
    };
    let s2 = SubscriptionInfo {
        no_local: true,
        ..sub_info(&sub_key("c2", "s1"), &Destination::topic("WILD.>"), None)
    };
    submit_ok(
        store.as_ref(),
        vec![
            Operation::AddDestination(q1.clone()),
            Operation::AddDestination(t1.clone()),
            Operation::AddDestination(temp.clone()),
            Operation::AddDestination(q1.clone()),
        ],
    );
    submit_ok(
        store.as_ref(),
        vec![Operation::AddSubscription(s1.clone()), Operation::AddSubscription(s2.clone())],
    );
    let used_message = message_for(1, &used);
    submit_ok(store.as_ref(), vec![add(&used_message, &[&used])]);

    let Opened { store, recovered } = restart(h, store);
    assert_recovered(&recovered, &[&q1, &t1, &temp, &used.destination], &[&s1, &s2]);

    submit_ok(
        store.as_ref(),
        vec![
            Operation::RemoveSubscription(s1.key.clone()),
            Operation::RemoveDestination(q1.clone()),
            Operation::RemoveDestination(temp.clone()),
            Operation::RemoveDestination(Destination::queue("NEVER.DECLARED")),
            Operation::RemoveSubscription(sub_key("nobody", "nothing")),
        ],
    );
    let Opened { store, recovered } = restart(h, store);
    assert_recovered(&recovered, &[&t1, &used.destination], &[&s2]);

    submit_ok(
        store.as_ref(),
        vec![ack(&used, key(&used_message)), Operation::RemoveDestination(t1.clone())],
    );
    let Opened { recovered, .. } = restart(h, store);
    assert_recovered(&recovered, &[], &[&s2]);
}

/// Declaring a subscription that exists replaces its info and keeps its queue.
pub fn redeclared_subscription_keeps_its_queue(h: &mut dyn StoreHarness) {
    let Opened { store, .. } = open(h);
    let topic = Destination::topic("T");
    let info = sub_info(&sub_key("c", "s"), &topic, None);
    let s = info.queue();
    submit_ok(
        store.as_ref(),
        vec![Operation::AddSubscription(info.clone()), add(&message(1, &topic, 4), &[&s])],
    );
    let changed = SubscriptionInfo { selector: Some("x > 1".into()), ..info.clone() };
    submit_ok(store.as_ref(), vec![Operation::AddSubscription(changed.clone())]);
    assert_queue(store.as_ref(), &s, &[1]);
    let Opened { store, recovered } = restart(h, store);
    assert_eq!(recovered.subscriptions, vec![changed], "one subscription, the latest info");
    assert_queue(store.as_ref(), &s, &[1]);
}

/// Removing a destination drops its references (not other queues' references to the same
/// messages), its durable subscriptions and their queues; it can be used again afterwards.
pub fn remove_destination_drops_references(h: &mut dyn StoreHarness) {
    let Opened { store, .. } = open(h);
    let (q, q2) = (queue("DOOMED"), queue("SURVIVOR"));
    let topic = Destination::topic("DOOMED.TOPIC");
    let info = sub_info(&sub_key("c", "s"), &topic, None);
    let s = info.queue();
    let shared = message_for(3, &q);
    submit_ok(
        store.as_ref(),
        vec![
            Operation::AddDestination(q.destination.clone()),
            Operation::AddDestination(topic.clone()),
            Operation::AddSubscription(info.clone()),
            add(&message_for(1, &q), &[&q]),
            add(&message_for(2, &q), &[&q]),
            add(&shared, &[&q, &q2]),
            add(&message(4, &topic, 4), &[&s]),
        ],
    );
    submit_ok(store.as_ref(), vec![Operation::RemoveDestination(q.destination.clone())]);
    assert_queue(store.as_ref(), &q, &[]);
    assert_queue(store.as_ref(), &q2, &[3]);
    assert_eq!(*read_all(store.as_ref(), &q2)[0], *shared, "other queue keeps the body");
    assert_queue(store.as_ref(), &s, &[4]);
    submit_ok(store.as_ref(), vec![Operation::RemoveDestination(topic.clone())]);
    assert_queue(store.as_ref(), &s, &[]);

    let Opened { store, recovered } = restart(h, store);
    assert_recovered(&recovered, &[&q2.destination], &[]);
    assert_queue(store.as_ref(), &q, &[]);
    assert_queue(store.as_ref(), &s, &[]);
    assert_queue(store.as_ref(), &q2, &[3]);
    submit_ok(store.as_ref(), vec![add(&message_for(5, &q), &[&q])]);
    let Opened { store, .. } = restart(h, store);
    assert_queue(store.as_ref(), &q, &[5]);
}

/// Removing a subscription drops its queue, not its sibling's.
pub fn remove_subscription_drops_its_references(h: &mut dyn StoreHarness) {
    let Opened { store, .. } = open(h);
    let topic = Destination::topic("PRICES");
    let (i1, i2) = (
        sub_info(&sub_key("c", "one"), &topic, None),
        sub_info(&sub_key("c", "two"), &topic, None),
    );
    let (s1, s2) = (i1.queue(), i2.queue());
    let m = message(1, &topic, 4);
    submit_ok(
        store.as_ref(),
        vec![
            Operation::AddSubscription(i1.clone()),
            Operation::AddSubscription(i2.clone()),
            add(&m, &[&s1, &s2]),
        ],
    );
    submit_ok(store.as_ref(), vec![Operation::RemoveSubscription(i1.key.clone())]);
    assert_queue(store.as_ref(), &s1, &[]);
    assert_queue(store.as_ref(), &s2, &[1]);
    let Opened { store, recovered } = restart(h, store);
    assert_recovered(&recovered, &recovered.destinations.iter().collect::<Vec<_>>(), &[&i2]);
    assert_queue(store.as_ref(), &s1, &[]);
    assert_eq!(*read_all(store.as_ref(), &s2)[0], *m);
}

/// Units submitted back to back, without waiting for completions, apply in submission order:
/// an ack submitted after its add always finds the message.
pub fn units_apply_in_submission_order(h: &mut dyn StoreHarness) {
    let Opened { store, .. } = open(h);
    let q = queue("ORDERED");
    let mut completions = Vec::new();
    for id in 1..=100u64 {
        let m = message_for(id, &q);
        completions.push(store.submit(UnitOfWork::with(add(&m, &[&q]))));
        if id % 2 == 0 {
            completions.push(store.submit(UnitOfWork::with(ack(&q, key(&m)))));
        }
        if id % 20 == 10 {
            completions.push(
                store.submit(UnitOfWork::with(Operation::RemoveDestination(q.destination.clone()))),
            );
            completions.push(
                store.submit(UnitOfWork::with(Operation::AddDestination(q.destination.clone()))),
            );
        }
    }
    for completion in completions {
        block_on(completion).unwrap_or_else(|e| panic!("unit failed: {e}"));
    }
    let expected: Vec<u64> = (91..=100).filter(|id| id % 2 == 1).collect();
    assert_queue(store.as_ref(), &q, &expected);
    let Opened { store, .. } = restart(h, store);
    assert_queue(store.as_ref(), &q, &expected);
}

/// Reads see every unit whose `submit` call has returned, durable yet or not.
pub fn reads_see_units_before_they_complete(h: &mut dyn StoreHarness) {
    let Opened { store, .. } = open(h);
    let q = queue("VISIBLE");
    let mut completions = Vec::new();
    for id in 1..=20u64 {
        completions.push(store.submit(UnitOfWork::with(add(&message_for(id, &q), &[&q]))));
        assert_eq!(count(store.as_ref(), &q), id, "add {id} visible once submitted");
    }
    completions.push(store.submit(UnitOfWork::with(ack(&q, key_for(1)))));
    assert_eq!(ids(store.as_ref(), &q), (2..=20).collect::<Vec<_>>(), "ack visible once submitted");
    for completion in completions {
        block_on(completion).unwrap_or_else(|e| panic!("unit failed: {e}"));
    }
}

/// Lazy units ([`UnitOfWork::lazy`]: nobody waits for them to be durable) complete, apply in
/// submission order among durable ones, and are there after a reopen: the store may defer
/// their sync, never their writing.
pub fn lazy_units_apply_in_order_and_survive_reopen(h: &mut dyn StoreHarness) {
    let Opened { store, .. } = open(h);
    let q = queue("LAZY");
    submit_lazy_ok(store.as_ref(), (1..=3).map(|id| add(&message_for(id, &q), &[&q])).collect());
    submit_lazy_ok(store.as_ref(), vec![ack(&q, key_for(1))]);
    assert_queue(store.as_ref(), &q, &[2, 3]);
    // A durable unit after lazy ones: what it syncs covers them.
    submit_lazy_ok(store.as_ref(), vec![add(&message_for(4, &q), &[&q])]);
    submit_ok(store.as_ref(), vec![add(&message_for(5, &q), &[&q]), ack(&q, key_for(2))]);
    submit_lazy_ok(store.as_ref(), vec![ack(&q, key_for(3))]);
    assert_queue(store.as_ref(), &q, &[4, 5]);
    let Opened { store, .. } = reopen_after_drop(h, store);
    assert_queue(store.as_ref(), &q, &[4, 5]);
    // Lazy units alone, then a clean restart.
    submit_lazy_ok(store.as_ref(), vec![ack(&q, key_for(4))]);
    let Opened { store, .. } = restart(h, store);
    assert_queue(store.as_ref(), &q, &[5]);
}

/// Many units submitted at once all resolve successfully, and units whose completion was
/// dropped are applied all the same.
pub fn completions_all_resolve(h: &mut dyn StoreHarness) {
    let Opened { store, .. } = open(h);
    let (q, other) = (queue("MANY"), queue("MANY.OTHER"));
    let mut completions = Vec::new();
    for id in 1..=300u64 {
        let mut unit = UnitOfWork::with(add(&message_for(id, &q), &[&q, &other]));
        if id > 1 {
            unit.push(ack(&other, key_for(id - 1)));
        }
        let completion = store.submit(unit);
        if id % 3 == 0 {
            drop(completion);
        } else {
            completions.push(completion);
        }
    }
    for completion in completions {
        block_on(completion).unwrap_or_else(|e| panic!("unit failed: {e}"));
    }
    assert_eq!(count(store.as_ref(), &q), 300);
    assert_queue(store.as_ref(), &other, &[300]);
    let Opened { store, .. } = restart(h, store);
    assert_eq!(ids(store.as_ref(), &q), (1..=300).collect::<Vec<_>>());
}

/// A message with every header, every property type and a 2 MiB body round trips intact.
pub fn large_message_round_trips(h: &mut dyn StoreHarness) {
    let Opened { store, .. } = open(h);
    let q = queue("LARGE");
    let mut m = Message::new(MessageId(1), "ID:large:1:1:1", q.destination.clone());
    m.headers = JmsHeaders {
        correlation_id: Some("correlation".into()),
        reply_to: Some(Destination { kind: DestinationKind::TempTopic, name: "ID:reply:1".into() }),
        message_type: Some("big".into()),
        priority: 7,
        expiration: 4_102_444_800_000,
        timestamp: 1_700_000_000_000,
        delivery_mode: DeliveryMode::Persistent,
        group_id: Some("group".into()),
        group_seq: 12,
    };
    let properties = [
        ("bool", PropertyValue::Bool(false)),
        ("byte", PropertyValue::Byte(-7)),
        ("short", PropertyValue::Short(12_345)),
        ("int", PropertyValue::Int(-1_000_000)),
        ("long", PropertyValue::Long(i64::MAX)),
        ("float", PropertyValue::Float(1.5)),
        ("double", PropertyValue::Double(-2.25e100)),
        ("string", PropertyValue::String("ünïcödé ✓".into())),
        ("bytes", PropertyValue::Bytes(Bytes::from_static(&[0, 1, 2, 255]))),
        ("char", PropertyValue::Char('λ')),
        ("null", PropertyValue::Null),
    ];
    for (name, value) in properties {
        m.properties.insert(name.into(), value);
    }
    m.body_kind = BodyKind::Bytes;
    m.body_encoding = "".into();
    m.body = Bytes::from(
        (0..2 * 1024 * 1024u32)
            .map(|i| (i.wrapping_mul(2_654_435_761) >> 24) as u8)
            .collect::<Vec<u8>>(),
    );
    let m = Arc::new(m);
    let small = message_for(2, &q);
    submit_ok(store.as_ref(), vec![add(&m, &[&q]), add(&small, &[&q])]);
    let check = |store: &dyn MessageStore| {
        let read = read_all(store, &q);
        assert_eq!(read.len(), 2);
        assert!(*read[0] == *m, "large message read back intact");
        assert_eq!(*read[1], *small);
    };
    check(store.as_ref());
    let Opened { store, .. } = restart(h, store);
    check(store.as_ref());
}

/// After a restart, `next_message_id` exceeds every id ever added, even once all of them
/// were acked or their destination removed.
pub fn next_message_id_exceeds_every_id_ever_added(h: &mut dyn StoreHarness) {
    let Opened { store, .. } = open(h);
    let (q, gone) = (queue("IDS"), queue("IDS.GONE"));
    let (m5, m9, m17) =
        (message(5, &q.destination, 0), message(9, &q.destination, 9), message_for(17, &q));
    submit_ok(store.as_ref(), vec![add(&m5, &[&q]), add(&m17, &[&q])]);
    submit_ok(store.as_ref(), vec![add(&m9, &[&q]), add(&message_for(23, &gone), &[&gone])]);
    let Opened { store, recovered } = restart(h, store);
    assert!(recovered.next_message_id > MessageId(23), "next id {:?}", recovered.next_message_id);
    submit_ok(
        store.as_ref(),
        vec![
            ack(&q, key(&m5)),
            ack(&q, key(&m17)),
            ack(&q, key(&m9)),
            Operation::RemoveDestination(gone.destination.clone()),
        ],
    );
    assert_queue(store.as_ref(), &q, &[]);
    // Twice: a store may compact everything away on the first restart.
    let Opened { store, recovered } = restart(h, store);
    assert!(
        recovered.next_message_id > MessageId(23),
        "next id {:?} after acks",
        recovered.next_message_id
    );
    let Opened { recovered, .. } = restart(h, store);
    assert!(
        recovered.next_message_id > MessageId(23),
        "next id {:?} after two restarts",
        recovered.next_message_id
    );
}

/// Write, restart (cleanly or by dropping the store), check, many times over.
pub fn data_survives_repeated_reopen(h: &mut dyn StoreHarness) {
    let Opened { mut store, .. } = open(h);
    let (a, b) = (queue("REOPEN.A"), queue("REOPEN.B"));
    let mut model_a: Vec<u64> = Vec::new();
    let mut model_b: Vec<u64> = Vec::new();
    let mut next = 1u64;
    // Message `id` has priority `id % 10`.
    let key_at = |id: u64| PageKey { priority: (id % 10) as u8, id: MessageId(id) };
    for round in 0..8u64 {
        let mut operations = Vec::new();
        for _ in 0..5 {
            let m = message(next, &a.destination, (next % 10) as u8);
            operations.push(add(&m, &[&a, &b]));
            model_a.push(next);
            model_b.push(next);
            next += 1;
        }
        // Ack the oldest of A, and every other one of B.
        if let Some(first) = model_a.first().copied() {
            operations.push(ack(&a, key_at(first)));
            model_a.remove(0);
        }
        let acked_b: Vec<u64> = model_b.iter().copied().filter(|id| id % 2 == round % 2).collect();
        operations.extend(acked_b.iter().map(|id| ack(&b, key_at(*id))));
        model_b.retain(|id| !acked_b.contains(id));
        submit_ok(store.as_ref(), operations);

        store = if round % 2 == 0 {
            restart(h, store).store
        } else {
            reopen_after_drop(h, store).store
        };
        for (q, model) in [(&a, &model_a), (&b, &model_b)] {
            let mut expected: Vec<(PageKey, u64)> =
                model.iter().map(|id| (key_at(*id), *id)).collect();
            expected.sort();
            let expected: Vec<u64> = expected.into_iter().map(|(_, id)| id).collect();
            assert_queue(store.as_ref(), q, &expected);
        }
    }
}

/// A unit that fails (here: it commits an unknown transaction) applies nothing, not even the
/// operations before the failing one; the store keeps working.
pub fn failed_unit_applies_nothing(h: &mut dyn StoreHarness) {
    let Opened { store, .. } = open(h);
    let q = queue("ATOMIC");
    let declared = Destination::queue("ATOMIC.DECLARED");
    let kept = message_for(100, &q);
    submit_ok(store.as_ref(), vec![add(&kept, &[&q])]);
    submit_invalid(
        store.as_ref(),
        vec![
            Operation::AddDestination(declared.clone()),
            add(&message_for(1, &q), &[&q]),
            ack(&q, key(&kept)),
            add_txn(&message_for(2, &q), &[&q], 7),
            Operation::Commit(TxnId(7)),
            Operation::Commit(TxnId(8)),
        ],
        "commit of an unknown transaction",
    );
    assert_queue(store.as_ref(), &q, &[100]);
    submit_invalid(store.as_ref(), vec![Operation::Commit(TxnId(7))], "transaction 7 never began");
    submit_ok(store.as_ref(), vec![add(&message_for(3, &q), &[&q])]);
    let Opened { store, recovered } = restart(h, store);
    assert!(!recovered.destinations.contains(&declared), "destination of a failed unit");
    assert!(recovered.prepared.is_empty());
    assert_queue(store.as_ref(), &q, &[3, 100]);
}
