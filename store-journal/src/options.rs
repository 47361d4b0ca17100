//! [`JournalOptions`]: the journal store's settings, each with a default.

use store::{Failpoints, StoreError, SyncPolicy};

/// 32 MiB, KahaDB's default journal file size.
pub const DEFAULT_SEGMENT_SIZE: u64 = 32 * 1024 * 1024;
/// A checkpoint every 8 MiB written.
pub const DEFAULT_CHECKPOINT_BYTES: u64 = 8 * 1024 * 1024;
/// An idle journal checkpoints after 5 s, as KahaDB's `checkpointInterval`.
pub const DEFAULT_CHECKPOINT_INTERVAL: std::time::Duration = std::time::Duration::from_secs(5);
/// 64 GiB: the order of ActiveMQ's default `storeUsage` (100 GB), and the broker
/// configuration's default `store.max_size`.
pub const DEFAULT_MAX_SIZE: u64 = 64 * 1024 * 1024 * 1024;
/// Default [`JournalOptions::max_backlog`]: 32 MiB of unwritten records, a few batches of the
/// writer (enough to keep group commit busy).
pub const DEFAULT_MAX_BACKLOG: u64 = 32 * 1024 * 1024;

/// How a [`JournalStore`](crate::JournalStore) is configured.
#[derive(Debug, Clone)]
pub struct JournalOptions {
    /// The size each data file is preallocated to (a record larger than this gets a file of
    /// its own size). Between 4 KiB and 1 GiB.
    pub segment_size: u64,
    /// When a unit counts as durable (`Always`: after `fdatasync`).
    pub sync: SyncPolicy,
    /// A checkpoint (index snapshot) is written after this many bytes of journal, and at
    /// clean close.
    pub checkpoint_bytes: u64,
    /// A journal written to since its last checkpoint, or holding files the next checkpoint
    /// would delete, checkpoints after this long without a write, so that acknowledged
    /// messages free their data files even when nothing more is written (a store at its
    /// `max_size` whose producers wait for room, or a quiet broker after a drain).
    pub checkpoint_interval: std::time::Duration,
    /// A data file (not the head, holding no record of an open transaction) whose live bytes
    /// fall below this fraction of its size has its live messages rewritten to the head, so
    /// that it can be deleted.
    pub compaction_threshold: f64,
    /// The most bytes of data files: beyond it, units that add messages are refused with
    /// [`StoreError::Full`] while acks and removals still work (0 = no limit).
    pub max_size: u64,
    /// The most bytes of submitted units waiting for the writer (see [`store::Backlog`]):
    /// the broker's send path waits while they are over it, so that producers faster than
    /// the disk are paced instead of filling memory with unwritten records (0 = no limit).
    pub max_backlog: u64,
    /// Refuse to open (with [`StoreError::Corrupt`]) when a record in the middle of the
    /// journal is damaged, instead of opening with everything before it.
    pub refuse_on_corruption: bool,
    /// The failpoints checked before every I/O (see [`crate::FAILPOINTS`]).
    pub failpoints: Failpoints,
}

impl Default for JournalOptions {
    fn default() -> Self {
        JournalOptions {
            segment_size: DEFAULT_SEGMENT_SIZE,
            sync: SyncPolicy::Always,
            checkpoint_bytes: DEFAULT_CHECKPOINT_BYTES,
            checkpoint_interval: DEFAULT_CHECKPOINT_INTERVAL,
            compaction_threshold: 0.5,
            max_size: DEFAULT_MAX_SIZE,
            max_backlog: DEFAULT_MAX_BACKLOG,
            refuse_on_corruption: false,
            failpoints: Failpoints::new(),
        }
    }
}

impl JournalOptions {
    pub(crate) fn validate(&self) -> Result<(), StoreError> {
        let invalid = |reason: String| Err(StoreError::Invalid { reason });
        if !(4096..=1 << 30).contains(&self.segment_size) {
            return invalid(format!(
                "journal segment_size {} is outside 4 KiB..1 GiB",
                self.segment_size
            ));
        }
        if !(0.0..=1.0).contains(&self.compaction_threshold) {
            return invalid(format!(
                "journal compaction_threshold {} is outside 0..1",
                self.compaction_threshold
            ));
        }
        if let SyncPolicy::Periodic(interval) = self.sync {
            if interval.is_zero() {
                return invalid("journal periodic sync interval is zero".into());
            }
        }
        Ok(())
    }
}
