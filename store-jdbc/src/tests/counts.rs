//! `count` is kept in memory by the writer (per queue, published after each COMMIT): it must
//! equal what the database holds through every operation that adds or removes references,
//! a failed batch and a reopen. The reference is `read_page`, which queries the rows.

use std::path::Path;

use store::{FailAction, MessageStore, Operation, QueueKey, StoreError, TxnId};

use super::*;
use crate::store::FAILPOINT_COMMIT;
use crate::testing::{PgCluster, SqliteHarness};
use crate::{SqlOptions, SqlStore};

#[track_caller]
fn assert_counts(store: &SqlStore, queues: &[&QueueKey], step: &str) {
    for queue in queues {
        let rows = ids(store, queue).len() as u64;
        let counted = store.count(queue).unwrap_or_else(|e| panic!("{step}: count: {e}"));
        assert_eq!(counted, rows, "{step}: count of {:?}", queue.destination);
    }
}

fn txn_add(id: u64, queue: &QueueKey, txn: u64) -> Operation {
    Operation::AddMessage {
        message: message(id, queue, 4, 10),
        queues: vec![queue.clone()],
        txn: Some(TxnId(txn)),
    }
}

fn txn_ack(queue: &QueueKey, id: u64, txn: u64) -> Operation {
    match ack(queue, id) {
        Operation::Ack { queue, key, .. } => Operation::Ack { queue, key, txn: Some(TxnId(txn)) },
        other => other,
    }
}

fn counts_follow_the_references(url: &str) {
    let options = SqlOptions::default();
    let store = SqlStore::open(url, Path::new("/"), options.clone()).expect("open");
    let (q, r, s) = (queue("COUNT.Q"), queue("COUNT.R"), queue("COUNT.S"));
    let all = [&q, &r, &s];
    assert_counts(&store, &all, "empty");
    for id in 1..=10 {
        let queues: Vec<&QueueKey> = if id % 2 == 0 { vec![&q, &r] } else { vec![&q] };
        submit_ok(&store, vec![add(&message(id, &q, 4, 10), &queues)]);
    }
    // The same reference again changes nothing.
    submit_ok(&store, vec![add(&message(3, &q, 4, 10), &[&q])]);
    assert_counts(&store, &all, "adds");
    submit_ok(&store, vec![ack(&q, 1), ack(&r, 2), ack(&q, 99)]);
    assert_counts(&store, &all, "acks");
    // A transaction's adds and acks count at its commit, not before; a rollback's never.
    submit_ok(&store, vec![txn_add(11, &q, 1), txn_add(12, &s, 1), txn_ack(&q, 2, 1)]);
    assert_counts(&store, &all, "open transaction");
    submit_ok(&store, vec![Operation::Commit(TxnId(1))]);
    assert_counts(&store, &all, "committed");
    submit_ok(&store, vec![txn_add(13, &q, 2), txn_ack(&q, 3, 2)]);
    submit_ok(&store, vec![Operation::Rollback(TxnId(2))]);
    assert_counts(&store, &all, "rolled back");
    // A failed COMMIT applies nothing and reloads the counts.
    options.failpoints.arm(FAILPOINT_COMMIT, FailAction::Once);
    let failed = submit(&store, vec![add(&message(14, &q, 4, 10), &[&q]), ack(&q, 4)]);
    assert!(matches!(failed, Err(StoreError::Injected { .. })), "{failed:?}");
    assert_counts(&store, &all, "failed commit");
    submit_ok(&store, vec![add(&message(15, &q, 4, 10), &[&q])]);
    assert_counts(&store, &all, "after the failure");
    submit_ok(&store, vec![Operation::RemoveDestination(r.destination.clone())]);
    assert_counts(&store, &all, "removed destination");
    submit_ok(&store, vec![add(&message(16, &r, 4, 10), &[&r])]);
    assert_counts(&store, &all, "re-created queue");
    store.close().expect("close");
    drop(store);
    let store = SqlStore::open(url, Path::new("/"), SqlOptions::default()).expect("reopen");
    assert_counts(&store, &all, "reopened");
    store.close().expect("close");
}

#[test]
fn sqlite_count_follows_the_references() {
    let harness = SqliteHarness::new();
    counts_follow_the_references(&harness.url());
}

#[test]
fn postgres_count_follows_the_references() {
    let Some(cluster) = PgCluster::shared() else { return };
    counts_follow_the_references(&cluster.create_database());
}
