//! The journal against the reference semantics: a random workload (adds to one or several
//! queues, acks, transactions with prepare, commit and rollback, destinations and durable
//! subscriptions) fed to a `JournalStore` and a `MemoryStore`, with the journal closed or
//! dropped and reopened often (small segments and checkpoints, so files roll, checkpoints,
//! deletes and compactions happen), compared after every reopen.

use std::collections::BTreeSet;

use rand::rngs::StdRng;
use rand::{Rng, SeedableRng};
use store::{MemoryStore, MessageStore, SubscriptionInfo, SubscriptionKey, TxnId};

use super::*;

struct Model {
    rng: StdRng,
    queues: Vec<QueueKey>,
    subscriptions: Vec<SubscriptionInfo>,
    next_id: u64,
    next_txn: u64,
    /// Transactions the workload has open: (id, prepared).
    open_txns: Vec<(TxnId, bool)>,
}

impl Model {
    fn new(seed: u64) -> Self {
        let topic = Destination::topic("MODEL.TOPIC");
        let subscriptions: Vec<SubscriptionInfo> = (0..2)
            .map(|i| SubscriptionInfo {
                key: SubscriptionKey { client_id: "c".into(), name: format!("s{i}").into() },
                topic: topic.clone(),
                selector: None,
                no_local: false,
            })
            .collect();
        let mut queues: Vec<QueueKey> = (0..4).map(|i| queue(&format!("MODEL.{i}"))).collect();
        queues.extend(subscriptions.iter().map(SubscriptionInfo::queue));
        Model {
            rng: StdRng::seed_from_u64(seed),
            queues,
            subscriptions,
            next_id: 1,
            next_txn: 1,
            open_txns: Vec::new(),
        }
    }

    fn some_queues(&mut self) -> Vec<QueueKey> {
        let n = self.rng.gen_range(1..=3);
        (0..n).map(|_| self.queues[self.rng.gen_range(0..self.queues.len())].clone()).collect()
    }

    fn txn(&mut self) -> Option<TxnId> {
        let open: Vec<TxnId> = self.open_txns.iter().filter(|(_, p)| !p).map(|(t, _)| *t).collect();
        if !open.is_empty() && self.rng.gen_bool(0.6) {
            return Some(open[self.rng.gen_range(0..open.len())]);
        }
        let txn = TxnId(self.next_txn);
        self.next_txn += 1;
        self.open_txns.push((txn, false));
        Some(txn)
    }

    /// One random unit, using `reference` (the model store) to pick messages to ack.
    fn unit(&mut self, reference: &dyn MessageStore) -> Vec<Operation> {
        let mut operations = Vec::new();
        for _ in 0..self.rng.gen_range(1..=4) {
            let roll = self.rng.gen_range(0..100);
            let operation = match roll {
                0..=34 => {
                    let queues = self.some_queues();
                    let id = self.next_id;
                    self.next_id += 1;
                    let priority = self.rng.gen_range(0..12);
                    let size = self.rng.gen_range(10..1500);
                    let txn = if self.rng.gen_bool(0.2) { self.txn() } else { None };
                    Operation::AddMessage {
                        message: message(id, &queues[0], priority, size),
                        queues,
                        txn,
                    }
                }
                35..=69 => {
                    let q = self.queues[self.rng.gen_range(0..self.queues.len())].clone();
                    let page = reference.read_page(&q, None, 50).unwrap_or_default();
                    let key = match page.get(self.rng.gen_range(0..page.len().max(1))) {
                        Some(stored) => PageKey::of(&stored.message),
                        None => PageKey {
                            priority: 4,
                            id: MessageId(self.rng.gen_range(1..self.next_id.max(2))),
                        },
                    };
                    let txn = if self.rng.gen_bool(0.2) { self.txn() } else { None };
                    Operation::Ack { queue: q, key, txn }
                }
                70..=79 if !self.open_txns.is_empty() => {
                    let at = self.rng.gen_range(0..self.open_txns.len());
                    let (txn, prepared) = self.open_txns[at];
                    match self.rng.gen_range(0..3) {
                        0 if !prepared => {
                            self.open_txns[at].1 = true;
                            Operation::Prepare(txn)
                        }
                        1 => {
                            self.open_txns.remove(at);
                            Operation::Rollback(txn)
                        }
                        _ => {
                            self.open_txns.remove(at);
                            Operation::Commit(txn)
                        }
                    }
                }
                80..=84 => {
                    let i = self.rng.gen_range(0..self.subscriptions.len());
                    Operation::AddSubscription(self.subscriptions[i].clone())
                }
                85..=86 => {
                    let i = self.rng.gen_range(0..self.subscriptions.len());
                    Operation::RemoveSubscription(self.subscriptions[i].key.clone())
                }
                87..=93 => Operation::AddDestination(
                    self.queues[self.rng.gen_range(0..4)].destination.clone(),
                ),
                94..=95 => Operation::RemoveDestination(
                    self.queues[self.rng.gen_range(0..4)].destination.clone(),
                ),
                _ => Operation::Commit(TxnId(999_999)),
            };
            operations.push(operation);
        }
        operations
    }
}

fn compare(
    journal: &dyn MessageStore,
    reference: &dyn MessageStore,
    queues: &[QueueKey],
    when: &str,
) {
    for q in queues {
        let got = read_all(journal, q);
        let want = read_all(reference, q);
        let got_ids: Vec<u64> = got.iter().map(|s| s.message.id.0).collect();
        let want_ids: Vec<u64> = want.iter().map(|s| s.message.id.0).collect();
        assert_eq!(got_ids, want_ids, "{when}: {q:?}");
        for (g, w) in got.iter().zip(&want) {
            assert_eq!(*g.message, *w.message, "{when}: message {} in {q:?}", g.message.id);
        }
        assert_eq!(
            journal.count(q).unwrap_or(u64::MAX),
            want.len() as u64,
            "{when}: count of {q:?}"
        );
    }
}

fn compare_recovered(journal: &dyn MessageStore, reference: &dyn MessageStore, when: &str) {
    let (got, want) = match (journal.recover(), reference.recover()) {
        (Ok(got), Ok(want)) => (got, want),
        (got, want) => panic!("{when}: recover {got:?} / {want:?}"),
    };
    let set = |d: &[Destination]| d.iter().cloned().collect::<BTreeSet<_>>();
    assert_eq!(set(&got.destinations), set(&want.destinations), "{when}: destinations");
    let mut got_subscriptions = got.subscriptions.clone();
    got_subscriptions.sort_by(|a, b| a.key.cmp(&b.key));
    let mut want_subscriptions = want.subscriptions.clone();
    want_subscriptions.sort_by(|a, b| a.key.cmp(&b.key));
    assert_eq!(got_subscriptions, want_subscriptions, "{when}: subscriptions");
    assert_eq!(got.prepared, want.prepared, "{when}: prepared");
    assert_eq!(got.next_message_id, want.next_message_id, "{when}: next message id");
}

/// Journal completions not awaited yet: (completion, the model's outcome, step).
type InFlight = Vec<(store::Completion, bool, usize)>;

fn settle(in_flight: &mut InFlight, seed: u64) {
    for (completion, want_ok, step) in in_flight.drain(..) {
        let got = block_on(completion);
        assert_eq!(got.is_ok(), want_ok, "seed {seed} step {step}: journal {got:?}");
    }
}

/// With `pipelined`, units are submitted without waiting for their completions (16 at a
/// time), so the writer lags and adds acked before their batch are dropped.
fn run(seed: u64, steps: usize, pipelined: bool) -> crate::JournalStats {
    let dir = temp_dir();
    let options = JournalOptions {
        sync: if pipelined { store::SyncPolicy::Always } else { store::SyncPolicy::Never },
        ..small_options(8 * 1024, 4 * 1024)
    };
    let mut model = Model::new(seed);
    let mut reference = MemoryStore::new();
    let mut journal = open(dir.path(), &options);
    let queues = model.queues.clone();
    let mut in_flight: InFlight = Vec::new();
    let mut stats = crate::JournalStats::default();
    for step in 0..steps {
        let (open_before, next_txn_before) = (model.open_txns.clone(), model.next_txn);
        let operations = model.unit(&reference);
        let want = submit(&reference, operations.clone());
        if want.is_err() {
            // Nothing of a failed unit happened: nor did its transaction changes.
            model.open_txns = open_before;
            model.next_txn = next_txn_before;
        }
        in_flight.push((
            journal.submit(UnitOfWork { operations, lazy: false }),
            want.is_ok(),
            step,
        ));
        if !pipelined || in_flight.len() >= 16 {
            settle(&mut in_flight, seed);
        }
        if step % 50 == 49 {
            compare(&journal, &reference, &queues, &format!("seed {seed} step {step} (live)"));
        }
        if step % 97 == 96 {
            settle(&mut in_flight, seed);
            let clean = model.rng.gen_bool(0.5);
            if clean {
                journal.close().unwrap_or_else(|e| panic!("seed {seed} step {step}: close: {e}"));
            }
            let before = journal.stats();
            stats.dropped_adds += before.dropped_adds;
            stats.relocated_messages += before.relocated_messages;
            stats.deleted_files += before.deleted_files;
            stats.checkpoints += before.checkpoints;
            drop(journal);
            journal = open(dir.path(), &options);
            reference = reference.reopen();
            // Recovery rolled back what was not prepared.
            let prepared: BTreeSet<TxnId> =
                reference.recover().map(|r| r.prepared.into_iter().collect()).unwrap_or_default();
            model.open_txns.retain(|(txn, _)| prepared.contains(txn));
            let when = format!("seed {seed} step {step} (reopened, clean: {clean})");
            compare_recovered(&journal, &reference, &when);
            compare(&journal, &reference, &queues, &when);
            for q in &queues {
                assert!(
                    read_all(&journal, q).iter().all(|s| s.redelivered != clean),
                    "{when}: redelivered flags"
                );
            }
        }
    }
    settle(&mut in_flight, seed);
    // The run rolled, reclaimed and compacted files (the earliest files are gone).
    let files = journal.data_files();
    assert!(files.first().is_some_and(|first| *first > 3), "seed {seed}: data files {files:?}");
    stats
}

#[test]
fn random_workload_matches_the_memory_store_across_reopens() {
    for seed in 0..6 {
        let stats = run(seed, 700, false);
        assert!(stats.checkpoints > 0 && stats.deleted_files > 0, "seed {seed}: {stats:?}");
    }
}

#[test]
fn pipelined_random_workload_matches_the_memory_store() {
    let mut dropped = 0;
    for seed in 100..104 {
        let stats = run(seed, 700, true);
        eprintln!("pipelined model, seed {seed}: {stats:?}");
        dropped += stats.dropped_adds;
    }
    assert!(dropped > 0, "no add was ever dropped: the writer never lagged");
}
