//! Power loss over the simulated disk: every unit whose completion fired is there after the
//! power comes back, no unit is half there, and no completion fired before a sync.

use std::collections::{BTreeMap, BTreeSet};
use std::path::Path;
use std::sync::atomic::{AtomicBool, Ordering};
use std::time::Duration;

use parking_lot::Mutex;
use rand::{Rng, SeedableRng};
use store::MessageStore;

use super::*;
use crate::testing::SimulatedDisk;

/// What one writer thread did.
#[derive(Default)]
struct Outcomes {
    /// Add units (two messages each, in Q.t and R.t) whose completion succeeded.
    added: BTreeSet<u64>,
    /// Add units submitted (completed or not).
    submitted: BTreeSet<u64>,
    /// Acks (of the message in Q.t) completed, and submitted.
    acked: BTreeSet<u64>,
    ack_submitted: BTreeSet<u64>,
}

fn run_until_power_loss(
    disk: &Arc<SimulatedDisk>,
    dir: &Path,
    options: &JournalOptions,
    seed: u64,
    base: u64,
) -> Vec<Outcomes> {
    let store = Arc::new(
        JournalStore::open_with_disk(disk.disk(), dir, options.clone())
            .unwrap_or_else(|e| panic!("open: {e}")),
    );
    let stop = Arc::new(AtomicBool::new(false));
    let outcomes: Vec<Arc<Mutex<Outcomes>>> =
        (0..8).map(|_| Arc::new(Mutex::new(Outcomes::default()))).collect();
    let mut rng = rand::rngs::StdRng::seed_from_u64(seed);
    std::thread::scope(|scope| {
        for (t, outcome) in outcomes.iter().enumerate() {
            let (store, stop, disk, outcome) =
                (Arc::clone(&store), Arc::clone(&stop), Arc::clone(disk), Arc::clone(outcome));
            scope.spawn(move || {
                let (q, r) = (queue(&format!("Q.{t}")), queue(&format!("R.{t}")));
                let mut i = 0u64;
                while !stop.load(Ordering::SeqCst) {
                    i += 1;
                    let id = base + t as u64 * 100_000 + i;
                    let syncs_before = disk.sync_count();
                    let unit = vec![
                        add(&message(id, &q, 4, 200), &[&q]),
                        add(&message(id + 50_000, &r, 4, 200), &[&r]),
                    ];
                    outcome.lock().submitted.insert(id);
                    match submit(store.as_ref(), unit) {
                        Ok(()) => {
                            assert!(
                                disk.sync_count() > syncs_before,
                                "a completion fired before any sync"
                            );
                            outcome.lock().added.insert(id);
                        }
                        Err(_) => break,
                    }
                    if i > 2 {
                        let victim = id - 2;
                        if outcome.lock().added.contains(&victim) {
                            outcome.lock().ack_submitted.insert(victim);
                            let syncs_before = disk.sync_count();
                            match submit(store.as_ref(), vec![ack(&q, &message(victim, &q, 4, 0))])
                            {
                                Ok(()) => {
                                    assert!(disk.sync_count() > syncs_before);
                                    outcome.lock().acked.insert(victim);
                                }
                                Err(_) => break,
                            }
                        }
                    }
                }
            });
        }
        std::thread::sleep(Duration::from_millis(rng.gen_range(5..60)));
        disk.lose_power();
        stop.store(true, Ordering::SeqCst);
    });
    let stats = store.stats();
    eprintln!("before the power loss: {stats:?}");
    drop(store);
    outcomes.into_iter().map(|o| std::mem::take(&mut *o.lock())).collect()
}

#[test]
fn power_loss_keeps_every_completed_unit() {
    let disk = SimulatedDisk::new();
    let dir = Path::new("/sim/power");
    let options = small_options(32 * 1024, 16 * 1024);
    // Per thread, every add unit ever confirmed: its message in R.t is never acked.
    let mut confirmed_ever: BTreeMap<usize, BTreeSet<u64>> = BTreeMap::new();
    for round in 0..6u64 {
        let outcomes = run_until_power_loss(&disk, dir, &options, round, round * 1_000_000);
        let store = JournalStore::open_with_disk(disk.disk(), dir, options.clone())
            .unwrap_or_else(|e| panic!("reopen: {e}"));
        let mut confirmed = 0;
        for (t, outcome) in outcomes.iter().enumerate() {
            let (q, r) = (queue(&format!("Q.{t}")), queue(&format!("R.{t}")));
            let in_q: BTreeSet<u64> = ids(&store, &q).into_iter().collect();
            let in_r: BTreeSet<u64> = ids(&store, &r).into_iter().map(|id| id - 50_000).collect();
            for id in &outcome.submitted {
                if outcome.added.contains(id) {
                    confirmed += 1;
                    assert!(in_r.contains(id), "round {round}: confirmed unit {id} lost (R)");
                    if !outcome.ack_submitted.contains(id) {
                        assert!(in_q.contains(id), "round {round}: confirmed unit {id} lost (Q)");
                    }
                    if outcome.acked.contains(id) {
                        assert!(!in_q.contains(id), "round {round}: confirmed ack of {id} lost");
                    }
                } else {
                    assert_eq!(
                        in_q.contains(id),
                        in_r.contains(id),
                        "round {round}: unit {id} half there"
                    );
                }
            }
            let ever = confirmed_ever.entry(t).or_default();
            ever.extend(outcome.added.iter().copied());
            let lost: Vec<&u64> = ever.difference(&in_r).collect();
            assert!(
                lost.is_empty(),
                "round {round}: confirmed in an earlier round, lost: {lost:?}"
            );
        }
        assert!(confirmed > 0, "round {round}: the workload confirmed nothing");
        eprintln!(
            "power loss round {round}: {confirmed} confirmed units present, {} syncs so far",
            disk.sync_count()
        );
        // A clean restart between rounds, sometimes.
        if round % 2 == 1 {
            store.close().unwrap_or_else(|e| panic!("close: {e}"));
        }
        drop(store);
    }
}
