//! The writer thread: group commit.
//!
//! `submit` builds a unit's puts and deletes on the caller's thread, puts them in the
//! overlay (reads see them) and queues them here. The writer takes everything queued, makes
//! it one engine write batch, syncs it per the policy (`always`: one sync per batch;
//! `periodic`: at most one per interval, and an idle store syncs what it wrote once the
//! interval is up; `never`: none), removes what it wrote from the overlay and resolves the
//! completions. No linger timer: a batch is whatever arrived during the previous write and
//! sync. A failed write or sync poisons the store: the batch fails, every later unit fails
//! with [`StoreError::Poisoned`], reads go on; a restart recovers what reached the disk.

use std::sync::atomic::Ordering;
use std::sync::Arc;
use std::time::Instant;

use store::{Completer, StoreError, SyncPolicy};

use crate::engine::WriteBatch;
use crate::view::UnitWrites;
use crate::{Inner, FAILPOINT_SYNC, FAILPOINT_WRITE};

/// One unit waiting for the writer.
#[derive(Debug)]
pub struct Queued {
    pub seq: u64,
    pub writes: UnitWrites,
    pub completer: Completer,
    pub bytes: u64,
}

#[derive(Debug, Default)]
pub struct WriterQueue {
    pub units: Vec<Queued>,
    pub closing: bool,
}

pub fn run(inner: Arc<Inner>) {
    let mut last_sync = Instant::now();
    // Written and not yet synced (periodic and never policies).
    let mut dirty = false;
    loop {
        let units = {
            let mut queue = inner.queue.lock();
            loop {
                if !queue.units.is_empty() || queue.closing {
                    break;
                }
                match inner.options.sync {
                    SyncPolicy::Periodic(interval) if dirty => {
                        let due = last_sync + interval;
                        if Instant::now() >= due {
                            break;
                        }
                        inner.wake.wait_until(&mut queue, due);
                    }
                    _ => inner.wake.wait(&mut queue),
                }
            }
            if queue.units.is_empty() && queue.closing {
                drop(queue);
                if dirty && inner.poisoned().is_none() {
                    // Close makes everything durable whatever the policy.
                    if let Err(e) = sync(&inner) {
                        inner.poison(format!("the final sync failed: {e}"));
                    }
                }
                return;
            }
            std::mem::take(&mut queue.units)
        };
        if units.is_empty() {
            // A periodic sync falls due on an idle store.
            if dirty && inner.poisoned().is_none() {
                match sync(&inner) {
                    Ok(()) => dirty = false,
                    Err(e) => inner.poison(format!("a periodic sync failed: {e}")),
                }
                last_sync = Instant::now();
            }
            continue;
        }
        let result = write_batch(&inner, &units, &mut last_sync, &mut dirty);
        finish(&inner, units, result);
    }
}

fn sync(inner: &Inner) -> Result<(), StoreError> {
    inner.options.failpoints.check(FAILPOINT_SYNC)?;
    inner.engine.sync()?;
    inner.stats.syncs.fetch_add(1, Ordering::Relaxed);
    Ok(())
}

fn write_batch(
    inner: &Inner,
    units: &[Queued],
    last_sync: &mut Instant,
    dirty: &mut bool,
) -> Result<(), StoreError> {
    if let Some(reason) = inner.poisoned() {
        return Err(StoreError::Poisoned { reason });
    }
    let mut batch = WriteBatch::new();
    for unit in units {
        for (key, value) in &unit.writes {
            batch.push(key.clone(), value.clone());
        }
    }
    let poison = |what: &str, e: &StoreError| inner.poison(format!("{what} failed: {e}"));
    if !batch.is_empty() {
        let written = inner
            .options
            .failpoints
            .check(FAILPOINT_WRITE)
            .and_then(|()| inner.engine.write(batch).map_err(StoreError::from));
        if let Err(e) = written {
            poison("a batch write", &e);
            return Err(e);
        }
        *dirty = true;
    }
    let sync_now = match inner.options.sync {
        SyncPolicy::Always => true,
        SyncPolicy::Periodic(interval) => last_sync.elapsed() >= interval,
        SyncPolicy::Never => false,
    };
    if sync_now && *dirty {
        if let Err(e) = sync(inner) {
            poison("a sync", &e);
            return Err(e);
        }
        *dirty = false;
        *last_sync = Instant::now();
    }
    inner.stats.batches.fetch_add(1, Ordering::Relaxed);
    inner.stats.units.fetch_add(units.len() as u64, Ordering::Relaxed);
    Ok(())
}

/// Removes what was written from the overlay and resolves the completions.
fn finish(inner: &Inner, units: Vec<Queued>, result: Result<(), StoreError>) {
    if result.is_ok() {
        let max_seq = units.iter().map(|u| u.seq).max().unwrap_or(0);
        let mut state = inner.state.write();
        for unit in &units {
            for key in unit.writes.keys() {
                // A later unit may have set the key again: its value is not written yet.
                if state.overlay.get(key).is_some_and(|pending| pending.seq <= max_seq) {
                    state.overlay.remove(key);
                }
            }
        }
    }
    for unit in units {
        inner.backlog.remove(unit.bytes);
        unit.completer.complete(result.clone());
    }
}
