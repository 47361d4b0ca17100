//! Cases: streamed transactions, their prepare, commit and rollback, and their recovery.

use std::collections::BTreeSet;

use super::*;

/// Transactional adds are invisible (to reads and counts) until the commit, then visible.
pub fn txn_adds_invisible_until_commit(h: &mut dyn StoreHarness) {
    let Opened { store, .. } = open(h);
    let (q, other) = (queue("TXN.ADD"), queue("TXN.ADD.OTHER"));
    submit_ok(store.as_ref(), vec![add_txn(&message_for(1, &q), &[&q, &other], 1)]);
    submit_ok(store.as_ref(), vec![add_txn(&message_for(2, &q), &[&q], 1)]);
    submit_ok(store.as_ref(), vec![add(&message_for(3, &q), &[&q])]);
    assert_queue(store.as_ref(), &q, &[3]);
    assert_queue(store.as_ref(), &other, &[]);
    submit_ok(store.as_ref(), vec![Operation::Commit(TxnId(1))]);
    assert_queue(store.as_ref(), &q, &[1, 2, 3]);
    assert_queue(store.as_ref(), &other, &[1]);
    let Opened { store, recovered } = restart(h, store);
    assert!(recovered.prepared.is_empty());
    assert_queue(store.as_ref(), &q, &[1, 2, 3]);
    assert_queue(store.as_ref(), &other, &[1]);
}

/// Transactional acks leave the reference in place until the commit.
pub fn txn_acks_take_effect_at_commit(h: &mut dyn StoreHarness) {
    let Opened { store, .. } = open(h);
    let q = queue("TXN.ACK");
    submit_ok(store.as_ref(), (1..=3).map(|id| add(&message_for(id, &q), &[&q])).collect());
    submit_ok(store.as_ref(), vec![ack_txn(&q, key_for(1), 5)]);
    submit_ok(store.as_ref(), vec![ack_txn(&q, key_for(2), 5), ack_txn(&q, key_for(42), 5)]);
    assert_queue(store.as_ref(), &q, &[1, 2, 3]);
    submit_ok(store.as_ref(), vec![Operation::Commit(TxnId(5))]);
    assert_queue(store.as_ref(), &q, &[3]);
    let Opened { store, .. } = restart(h, store);
    assert_queue(store.as_ref(), &q, &[3]);
}

/// A rollback discards the transaction's adds and acks; the transaction is then unknown.
pub fn txn_rollback_discards_adds_and_acks(h: &mut dyn StoreHarness) {
    let Opened { store, .. } = open(h);
    let q = queue("TXN.ROLLBACK");
    submit_ok(store.as_ref(), vec![add(&message_for(1, &q), &[&q])]);
    submit_ok(
        store.as_ref(),
        vec![add_txn(&message_for(2, &q), &[&q], 9), ack_txn(&q, key_for(1), 9)],
    );
    submit_ok(store.as_ref(), vec![Operation::Rollback(TxnId(9))]);
    assert_queue(store.as_ref(), &q, &[1]);
    submit_invalid(store.as_ref(), vec![Operation::Commit(TxnId(9))], "commit after rollback");
    // A prepared transaction rolls back the same way.
    submit_ok(
        store.as_ref(),
        vec![add_txn(&message_for(3, &q), &[&q], 10), ack_txn(&q, key_for(1), 10)],
    );
    submit_ok(store.as_ref(), vec![Operation::Prepare(TxnId(10))]);
    submit_ok(store.as_ref(), vec![Operation::Rollback(TxnId(10))]);
    let Opened { store, recovered } = restart(h, store);
    assert!(recovered.prepared.is_empty(), "prepared: {:?}", recovered.prepared);
    assert_queue(store.as_ref(), &q, &[1]);
    // The id of a rolled-back message can be written again (the broker retries sends).
    submit_ok(store.as_ref(), vec![add(&message_for(2, &q), &[&q])]);
    assert_queue(store.as_ref(), &q, &[1, 2]);
}

/// Several transactions open at once, with non-transactional work between them, each
/// applied or discarded on its own; a transaction may span units and queues, and an add and
/// ack of the same message inside one transaction cancel out.
pub fn interleaved_transactions(h: &mut dyn StoreHarness) {
    let Opened { store, .. } = open(h);
    let (q, r) = (queue("TXN.MIX.Q"), queue("TXN.MIX.R"));
    submit_ok(store.as_ref(), vec![add_txn(&message_for(1, &q), &[&q], 1)]);
    submit_ok(store.as_ref(), vec![add_txn(&message_for(2, &q), &[&q, &r], 2)]);
    submit_ok(store.as_ref(), vec![add(&message_for(3, &q), &[&q, &r])]);
    submit_ok(
        store.as_ref(),
        vec![ack_txn(&q, key_for(3), 1), add_txn(&message_for(4, &r), &[&r], 2)],
    );
    submit_ok(
        store.as_ref(),
        vec![add_txn(&message_for(5, &q), &[&q], 2), ack_txn(&q, key_for(5), 2)],
    );
    submit_ok(store.as_ref(), vec![ack_txn(&r, key_for(3), 2)]);
    assert_queue(store.as_ref(), &q, &[3]);
    assert_queue(store.as_ref(), &r, &[3]);

    submit_ok(store.as_ref(), vec![Operation::Commit(TxnId(2))]);
    assert_queue(store.as_ref(), &q, &[2, 3]);
    assert_queue(store.as_ref(), &r, &[2, 4]);
    submit_ok(store.as_ref(), vec![Operation::Rollback(TxnId(1))]);
    assert_queue(store.as_ref(), &q, &[2, 3]);

    // Two transactions begun and committed in one unit, and an id reused after its end.
    submit_ok(
        store.as_ref(),
        vec![
            add_txn(&message_for(6, &q), &[&q], 3),
            add_txn(&message_for(7, &q), &[&q], 1),
            ack_txn(&q, key_for(2), 3),
            Operation::Commit(TxnId(1)),
            Operation::Commit(TxnId(3)),
        ],
    );
    assert_queue(store.as_ref(), &q, &[3, 6, 7]);
    let Opened { store, recovered } = restart(h, store);
    assert!(recovered.prepared.is_empty());
    assert_queue(store.as_ref(), &q, &[3, 6, 7]);
    assert_queue(store.as_ref(), &r, &[2, 4]);
}

/// Prepare, commit or rollback of a transaction the store does not have is
/// [`StoreError::Invalid`], and the store keeps working.
pub fn unknown_txn_is_invalid(h: &mut dyn StoreHarness) {
    let Opened { store, .. } = open(h);
    let q = queue("TXN.UNKNOWN");
    submit_invalid(store.as_ref(), vec![Operation::Commit(TxnId(99))], "commit of unknown txn");
    submit_invalid(store.as_ref(), vec![Operation::Rollback(TxnId(99))], "rollback of unknown txn");
    submit_invalid(store.as_ref(), vec![Operation::Prepare(TxnId(99))], "prepare of unknown txn");
    submit_ok(
        store.as_ref(),
        vec![add_txn(&message_for(1, &q), &[&q], 1), Operation::Commit(TxnId(1))],
    );
    submit_invalid(store.as_ref(), vec![Operation::Commit(TxnId(1))], "second commit");
    submit_invalid(store.as_ref(), vec![Operation::Rollback(TxnId(1))], "rollback after commit");
    submit_ok(store.as_ref(), vec![add(&message_for(2, &q), &[&q])]);
    assert_queue(store.as_ref(), &q, &[1, 2]);
}

/// Once prepared, a transaction takes no more operations and no second prepare; it can still
/// be committed.
pub fn txn_operations_after_prepare_are_invalid(h: &mut dyn StoreHarness) {
    let Opened { store, .. } = open(h);
    let q = queue("TXN.PREPARED");
    submit_ok(
        store.as_ref(),
        vec![add_txn(&message_for(1, &q), &[&q], 4), Operation::Prepare(TxnId(4))],
    );
    submit_invalid(
        store.as_ref(),
        vec![add_txn(&message_for(2, &q), &[&q], 4)],
        "add after prepare",
    );
    submit_invalid(store.as_ref(), vec![ack_txn(&q, key_for(1), 4)], "ack after prepare");
    submit_invalid(store.as_ref(), vec![Operation::Prepare(TxnId(4))], "second prepare");
    assert_queue(store.as_ref(), &q, &[]);
    submit_ok(store.as_ref(), vec![Operation::Commit(TxnId(4))]);
    assert_queue(store.as_ref(), &q, &[1]);
}

/// A transaction in flight without a prepare is rolled back by recovery: its adds never
/// appear, its acks never happen, and it is unknown afterwards.
pub fn open_txn_rolled_back_on_reopen(h: &mut dyn StoreHarness) {
    let Opened { store, .. } = open(h);
    let q = queue("TXN.INFLIGHT");
    submit_ok(store.as_ref(), vec![add(&message_for(10, &q), &[&q])]);
    submit_ok(
        store.as_ref(),
        vec![add_txn(&message_for(1, &q), &[&q], 1), ack_txn(&q, key_for(10), 1)],
    );
    submit_ok(store.as_ref(), vec![add_txn(&message_for(2, &q), &[&q], 1)]);
    let Opened { store, recovered } = restart(h, store);
    assert!(recovered.prepared.is_empty(), "prepared: {:?}", recovered.prepared);
    assert_queue(store.as_ref(), &q, &[10]);
    submit_invalid(
        store.as_ref(),
        vec![Operation::Commit(TxnId(1))],
        "commit of a rolled-back txn",
    );
    // Same after a restart without close.
    submit_ok(store.as_ref(), vec![add_txn(&message_for(3, &q), &[&q], 2)]);
    let Opened { store, recovered } = reopen_after_drop(h, store);
    assert!(recovered.prepared.is_empty(), "prepared: {:?}", recovered.prepared);
    assert_queue(store.as_ref(), &q, &[10]);
    assert!(recovered.next_message_id > MessageId(10));
}

/// A prepared transaction survives restarts (reported in `Recovered::prepared`, still
/// invisible), and can then be committed or rolled back.
pub fn prepared_txn_survives_reopen_and_commits(h: &mut dyn StoreHarness) {
    let Opened { store, .. } = open(h);
    let (q, r) = (queue("TXN.XA.Q"), queue("TXN.XA.R"));
    submit_ok(
        store.as_ref(),
        vec![add(&message_for(10, &q), &[&q]), add(&message_for(11, &q), &[&q])],
    );
    submit_ok(
        store.as_ref(),
        vec![add_txn(&message_for(1, &q), &[&q, &r], 1), ack_txn(&q, key_for(10), 1)],
    );
    submit_ok(store.as_ref(), vec![Operation::Prepare(TxnId(1))]);
    submit_ok(
        store.as_ref(),
        vec![
            add_txn(&message_for(2, &q), &[&q], 2),
            ack_txn(&q, key_for(11), 2),
            Operation::Prepare(TxnId(2)),
        ],
    );
    submit_ok(store.as_ref(), vec![add_txn(&message_for(3, &q), &[&q], 3)]);
    assert_queue(store.as_ref(), &q, &[10, 11]);

    let prepared =
        |recovered: &Recovered| recovered.prepared.iter().copied().collect::<BTreeSet<_>>();
    let Opened { store, recovered } = restart(h, store);
    assert_eq!(prepared(&recovered), BTreeSet::from([TxnId(1), TxnId(2)]));
    assert_queue(store.as_ref(), &q, &[10, 11]);
    assert_queue(store.as_ref(), &r, &[]);
    // Twice: recovery must keep prepared transactions it found (compaction included).
    let Opened { store, recovered } = reopen_after_drop(h, store);
    assert_eq!(prepared(&recovered), BTreeSet::from([TxnId(1), TxnId(2)]));
    assert!(recovered.next_message_id > MessageId(11));
    submit_invalid(
        store.as_ref(),
        vec![Operation::Commit(TxnId(3))],
        "unprepared txn was rolled back",
    );

    submit_ok(store.as_ref(), vec![Operation::Commit(TxnId(1))]);
    assert_queue(store.as_ref(), &q, &[1, 11]);
    assert_queue(store.as_ref(), &r, &[1]);
    let Opened { store, recovered } = restart(h, store);
    assert_eq!(prepared(&recovered), BTreeSet::from([TxnId(2)]));
    submit_ok(store.as_ref(), vec![Operation::Rollback(TxnId(2))]);
    let Opened { store, recovered } = restart(h, store);
    assert!(recovered.prepared.is_empty(), "prepared: {:?}", recovered.prepared);
    assert_queue(store.as_ref(), &q, &[1, 11]);
    assert_queue(store.as_ref(), &r, &[1]);
}
