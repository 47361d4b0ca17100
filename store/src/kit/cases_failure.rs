//! Cases: closing, and failures injected at every failpoint the engine names.

use std::collections::BTreeSet;

use super::*;
use crate::failpoint::FailAction;

/// After `close`, submits resolve to [`StoreError::Closed`] and reads fail with it; what was
/// written before is there after reopening.
pub fn close_then_submit_is_closed(h: &mut dyn StoreHarness) {
    let Opened { store, .. } = open(h);
    let q = queue("CLOSED");
    submit_ok(store.as_ref(), vec![add(&message_for(1, &q), &[&q])]);
    store.close().unwrap_or_else(|e| panic!("close failed: {e}"));
    match submit(store.as_ref(), vec![add(&message_for(2, &q), &[&q])]) {
        Err(StoreError::Closed) => {}
        other => panic!("submit after close: expected Closed, got {other:?}"),
    }
    assert!(
        matches!(store.read_page(&q, None, 10), Err(StoreError::Closed)),
        "read_page after close"
    );
    assert!(matches!(store.count(&q), Err(StoreError::Closed)), "count after close");
    drop(store);
    let Opened { store, .. } = open(h);
    assert_queue(store.as_ref(), &q, &[1]);
}

/// `close` finishes every unit submitted before it: their completions all resolve
/// successfully and the units are there after reopening.
pub fn close_finishes_submitted_units(h: &mut dyn StoreHarness) {
    let Opened { store, .. } = open(h);
    let q = queue("CLOSING");
    let completions: Vec<_> = (1..=50u64)
        .map(|id| store.submit(UnitOfWork::with(add(&message_for(id, &q), &[&q]))))
        .collect();
    store.close().unwrap_or_else(|e| panic!("close failed: {e}"));
    for completion in completions {
        block_on(completion).unwrap_or_else(|e| panic!("unit submitted before close failed: {e}"));
    }
    drop(store);
    let Opened { store, .. } = open(h);
    assert_eq!(ids(store.as_ref(), &q), (1..=50).collect::<Vec<_>>());
}

/// Arms each failpoint the engine names to fail once, runs a workload through it (open,
/// recover, units, reads, close) and checks the store fails cleanly; see
/// [`every_failpoint_fails_cleanly_always`].
pub fn every_failpoint_fails_cleanly_once(h: &mut dyn StoreHarness) {
    for name in names(h) {
        failpoint_workload(h, name, FailAction::Once);
    }
}

/// Arms each failpoint the engine names to fail every time, runs the workload, then disarms
/// it. For both actions the kit checks that the failpoint was reached and some operation
/// reported an error; that no unit was half applied (a failed unit is wholly absent, or
/// wholly present if it reached the disk before the failure); that every unit whose
/// completion succeeded is there after disarming and reopening; and that the store either
/// kept working or, once it reported [`StoreError::Poisoned`], refused every later unit
/// until reopened.
pub fn every_failpoint_fails_cleanly_always(h: &mut dyn StoreHarness) {
    for name in names(h) {
        failpoint_workload(h, name, FailAction::Always);
    }
}

fn names(h: &dyn StoreHarness) -> &'static [&'static str] {
    let names = h.failpoint_names();
    assert!(!names.is_empty(), "a store checks a failpoint before every I/O; it names none");
    names
}

/// One workload unit: adds `id` to queues A and B, declares `destination`, and (for some)
/// acks a baseline message from A; odd units do their adds and acks in a transaction that
/// the same unit commits.
struct UnitRecord {
    id: u64,
    destination: Destination,
    acked: Option<u64>,
    outcome: Option<Result<(), StoreError>>,
}

struct Workload {
    name: &'static str,
    a: QueueKey,
    b: QueueKey,
    baseline: Vec<u64>,
    units: Vec<UnitRecord>,
    errors: Vec<String>,
    poisoned: bool,
}

impl Workload {
    fn record_error(&mut self, what: &str, error: &StoreError) {
        if matches!(error, StoreError::Poisoned { .. }) {
            self.poisoned = true;
        }
        self.errors.push(format!("{what}: {error}"));
    }

    fn unit(
        &self,
        index: usize,
        base: u64,
        baseline_left: &mut Vec<u64>,
    ) -> (UnitRecord, UnitOfWork) {
        let id = base + index as u64;
        let destination = Destination::queue(format!("{}.d{index}", self.a.destination.name));
        let acked = if index % 3 != 2 { baseline_left.pop() } else { None };
        let m = message_for(id, &self.a);
        let mut unit = UnitOfWork::with(Operation::AddDestination(destination.clone()));
        if index % 2 == 1 {
            let txn = 1_000_000 + id;
            unit.push(add_txn(&m, &[&self.a, &self.b], txn));
            if let Some(acked) = acked {
                unit.push(ack_txn(&self.a, key_for(acked), txn));
            }
            unit.push(Operation::Commit(TxnId(txn)));
        } else {
            unit.push(add(&m, &[&self.a, &self.b]));
            if let Some(acked) = acked {
                unit.push(ack(&self.a, key_for(acked)));
            }
        }
        (UnitRecord { id, destination, acked, outcome: None }, unit)
    }

    /// Checks the poison rule for one outcome and records it.
    fn settle(&mut self, index: usize, outcome: Result<(), StoreError>) {
        if self.poisoned {
            assert!(
                matches!(outcome, Err(StoreError::Poisoned { .. })),
                "{}: after reporting Poisoned the store must refuse every unit; unit {index} got {outcome:?}",
                self.name
            );
        }
        if let Err(e) = &outcome {
            self.record_error(&format!("unit {index}"), e);
        }
        self.units[index].outcome = Some(outcome);
    }

    /// Reads A and B; where both reads succeed, checks that confirmed units are there and
    /// that no unit shows half applied.
    fn check_reads(&mut self, store: &dyn MessageStore) {
        let a = store.read_page(&self.a, None, 100_000);
        let b = store.read_page(&self.b, None, 100_000);
        let count = store.count(&self.a);
        let (a, b) = match (a, b, count) {
            (Ok(a), Ok(b), Ok(count)) => {
                assert_eq!(count, a.len() as u64, "{}: count and read_page disagree", self.name);
                (a, b)
            }
            (a, b, count) => {
                for e in [a.err(), b.err(), count.err()].into_iter().flatten() {
                    self.record_error("read", &e);
                }
                return;
            }
        };
        let a: BTreeSet<u64> = a.iter().map(|s| s.message.id.0).collect();
        let b: BTreeSet<u64> = b.iter().map(|s| s.message.id.0).collect();
        self.check_units(&a, &b, None, "live read");
    }

    /// Every confirmed unit wholly applied, every failed unit wholly applied or not at all,
    /// baseline messages present unless acked by an applied unit, nothing unexpected.
    fn check_units(
        &self,
        a: &BTreeSet<u64>,
        b: &BTreeSet<u64>,
        declared: Option<&BTreeSet<Destination>>,
        when: &str,
    ) {
        let name = self.name;
        let mut acked_by_applied = BTreeSet::new();
        for (index, unit) in self.units.iter().enumerate() {
            let Some(outcome) = &unit.outcome else {
                continue;
            };
            let mut facts = vec![("in A", a.contains(&unit.id)), ("in B", b.contains(&unit.id))];
            if let Some(acked) = unit.acked {
                facts.push(("its ack done", !a.contains(&acked)));
            }
            if let Some(declared) = declared {
                facts.push(("its destination declared", declared.contains(&unit.destination)));
            }
            let applied = facts.iter().all(|(_, fact)| *fact);
            let absent = facts.iter().all(|(_, fact)| !*fact);
            match outcome {
                Ok(()) => assert!(
                    applied,
                    "{name} ({when}): confirmed unit {index} is not wholly there: {facts:?}"
                ),
                Err(e) => assert!(
                    applied || absent,
                    "{name} ({when}): failed unit {index} ({e}) is half applied: {facts:?}"
                ),
            }
            if applied {
                acked_by_applied.extend(unit.acked);
            }
        }
        for id in &self.baseline {
            assert_eq!(
                a.contains(id),
                !acked_by_applied.contains(id),
                "{name} ({when}): baseline message {id} in A"
            );
        }
        let known: BTreeSet<u64> =
            self.baseline.iter().copied().chain(self.units.iter().map(|u| u.id)).collect();
        assert!(
            a.is_subset(&known),
            "{name} ({when}): unexpected messages in A: {:?}",
            a.difference(&known)
        );
        assert!(
            b.is_subset(&known),
            "{name} ({when}): unexpected messages in B: {:?}",
            b.difference(&known)
        );
    }
}

/// Opens and recovers with the failpoint armed; an open or recovery that fails is recorded
/// and retried (with the failpoint disarmed after a failure under `Always`, as an operator
/// would fix the disk before restarting).
fn open_under_failpoint(
    h: &mut dyn StoreHarness,
    work: &mut Workload,
    action: FailAction,
) -> Opened {
    let failpoints = h.failpoints();
    for attempt in 0..3 {
        let failure = match h.open() {
            Ok(store) => match store.recover() {
                Ok(recovered) => return Opened { store, recovered },
                Err(e) => e,
            },
            Err(e) => e,
        };
        work.record_error(&format!("open attempt {attempt}"), &failure);
        if action == FailAction::Always {
            failpoints.disarm(work.name);
        }
    }
    panic!(
        "{}: the store does not open, even with the failpoint disarmed: {:?}",
        work.name, work.errors
    );
}

fn failpoint_workload(h: &mut dyn StoreHarness, name: &'static str, action: FailAction) {
    let failpoints = h.failpoints();
    failpoints.disarm_all();
    let prefix =
        format!("FP.{}.{action:?}", name.replace(|c: char| !c.is_ascii_alphanumeric(), "_"));
    let mut work = Workload {
        name,
        a: queue(&format!("{prefix}.A")),
        b: queue(&format!("{prefix}.B")),
        baseline: Vec::new(),
        units: Vec::new(),
        errors: Vec::new(),
        poisoned: false,
    };

    // Baseline, written and confirmed before anything fails.
    let Opened { store, recovered } = open(h);
    let mut next = recovered.next_message_id.0.max(1);
    let baseline: Vec<Arc<Message>> = (0..8).map(|i| message_for(next + i, &work.a)).collect();
    next += 8;
    submit_ok(store.as_ref(), baseline.iter().map(|m| add(m, &[&work.a])).collect());
    work.baseline = baseline.iter().map(|m| m.id.0).collect();
    store.close().unwrap_or_else(|e| panic!("{name}: close before arming failed: {e}"));
    drop(store);

    // The workload, with the failpoint armed from the open on.
    let fired_before = failpoints.fired(name);
    failpoints.arm(name, action);
    let Opened { store, .. } = open_under_failpoint(h, &mut work, action);
    let mut baseline_left = work.baseline.clone();
    baseline_left.reverse();
    let mut index = 0;
    for _round in 0..6 {
        // Two units per round, submitted back to back so that they may share a batch.
        let mut pending = Vec::new();
        for _ in 0..2 {
            let (record, unit) = work.unit(index, next, &mut baseline_left);
            work.units.push(record);
            pending.push((index, store.submit(unit)));
            index += 1;
        }
        for (i, completion) in pending {
            let outcome = block_on(completion);
            work.settle(i, outcome);
        }
        work.check_reads(store.as_ref());
    }
    failpoints.disarm(name);
    // A probe after disarming: the store kept working, or it is poisoned until reopened.
    let (record, unit) = work.unit(index, next, &mut baseline_left);
    work.units.push(record);
    let outcome = block_on(store.submit(unit));
    match &outcome {
        Ok(()) | Err(StoreError::Poisoned { .. }) => {}
        Err(e) => panic!("{name} ({action:?}): after disarming, a unit failed with {e} (neither working nor poisoned)"),
    }
    work.settle(index, outcome);
    work.check_reads(store.as_ref());
    if let Err(e) = store.close() {
        work.record_error("close", &e);
    }
    drop(store);
    next += index as u64 + 1;

    assert!(
        failpoints.fired(name) > fired_before,
        "{name} ({action:?}): the kit's workload never reached this failpoint"
    );
    assert!(
        !work.errors.is_empty(),
        "{name} ({action:?}): the failpoint fired but no operation reported an error"
    );

    // Reopen with nothing armed: everything confirmed is there, nothing half applied.
    let Opened { store, recovered } = open(h);
    assert!(recovered.prepared.is_empty(), "{name}: prepared {:?}", recovered.prepared);
    let a: BTreeSet<u64> = ids(store.as_ref(), &work.a).into_iter().collect();
    let b: BTreeSet<u64> = ids(store.as_ref(), &work.b).into_iter().collect();
    assert_eq!(count(store.as_ref(), &work.a), a.len() as u64, "{name}: count of A after reopen");
    let declared: BTreeSet<Destination> = recovered.destinations.iter().cloned().collect();
    work.check_units(&a, &b, Some(&declared), "after reopen");
    let highest = work
        .units
        .iter()
        .filter(|u| a.contains(&u.id))
        .map(|u| u.id)
        .chain(work.baseline.iter().copied())
        .max();
    if let Some(highest) = highest {
        assert!(
            recovered.next_message_id.0 > highest,
            "{name}: next id {:?} <= {highest}",
            recovered.next_message_id
        );
    }
    // And the reopened store works.
    let probe = message_for(recovered.next_message_id.0.max(next), &work.a);
    submit_ok(store.as_ref(), vec![add(&probe, &[&work.a])]);
    assert!(ids(store.as_ref(), &work.a).contains(&probe.id.0), "{name}: reopened store works");
    store.close().unwrap_or_else(|e| panic!("{name}: close after reopen failed: {e}"));
}
