//! # store-journal: ferromq's journal store (KahaDB class, the default store)
//!
//! This crate owns [`JournalStore`], the [`store::MessageStore`] that keeps messages in an
//! append-only journal of segmented files with an in-memory index, like ActiveMQ's KahaDB:
//! group commit on a dedicated writer thread, a compact index checkpointed to a snapshot,
//! reclaiming and compaction of data files, and crash recovery that tells a torn tail from
//! corruption. It passes the `store` crate's conformance kit (`store::conformance_tests!`).
//!
//! ```no_run
//! use std::path::Path;
//! use store::{MessageStore, SyncPolicy};
//! use store_journal::{JournalOptions, JournalStore};
//!
//! let options = JournalOptions { sync: SyncPolicy::Always, ..JournalOptions::default() };
//! let store = JournalStore::open(Path::new("data/journal"), options)?;
//! let recovered = store.recover()?;
//! # let _ = recovered;
//! store.close()?;
//! # Ok::<(), store::StoreError>(())
//! ```
//!
//! ## Layout on disk
//!
//! ```text
//! db-00000001.log ...      data files (segments), preallocated to segment_size (32 MiB)
//! index-0000000007.snapshot   the newest checkpoint of the index (and the one before it)
//! clean-shutdown           present only after a clean close (removed at open)
//! reserve.space            one segment of preallocated space, released on a full disk
//! *.corrupt                data or snapshots set aside by recovery
//! ```
//!
//! Every open starts a new head segment, unless the newest one holds no record (a head the
//! last run never wrote to, or whose torn tail recovery cut to nothing): that one is
//! truncated, preallocated anew and reused, so that restarts without traffic leave no empty
//! 32 MiB files behind. The writer appends at the head and rolls to the next number when a
//! record does not fit (a record larger than a segment gets a file of its size).
//!
//! ## Records
//!
//! Each record is framed as `u32 length | u8 kind (+0x80 on a unit's last record) | u32
//! CRC32C | payload` (`frame.rs`); the payload is a prost command
//! (`record.rs`): add message (the body once, the queues referencing it, an
//! optional transaction), ack (queue, priority and id, optional transaction), add/remove
//! destination, add/remove durable subscription, prepare, commit, rollback, and two records
//! of the journal's own: relocate (a live message rewritten by compaction) and watermark
//! (the next message id, when adds were dropped before being written). A unit of work's
//! records are contiguous and end with the unit-end bit, so recovery applies a unit whole or
//! not at all.
//!
//! ## Index
//!
//! In memory (`index.rs`): per stored queue and priority, an ordered map of id
//! to packed location (file number, offset) and record size, 16 bytes a reference in chunks
//! of 512 keyed by their first id (`refs.rs`): 2,000,000 pending messages take about 32 MB.
//! Snapshots delta-encode the references (4 to 6 bytes each), so the encoding a checkpoint
//! holds from the capture to the write is about 8 MB for 2,000,000. Reference
//! counts are kept only for bodies referenced by more than one queue. Bodies are read from
//! the segments (`pread`), never cached. Live bytes per data file (live adds, and every
//! record of an open transaction) are computed at each checkpoint.
//!
//! ## Writing
//!
//! See `writer.rs`: one thread, one write and one `fdatasync` per batch of
//! whatever was queued; `submit` never waits for I/O, and applies the unit to the index at
//! once (reads see it). An add acked (finally) by every queue before its batch is written is
//! dropped together with those acks. A failed write or sync poisons the store
//! ([`StoreError::Poisoned`]); reads go on.
//!
//! ## Checkpoints and reclaiming
//!
//! Every `checkpoint_bytes` (8 MiB) and at close the journal is synced and the index written
//! to a snapshot (`checkpoint.rs`); recovery loads the newest valid one and replays only the
//! journal after it. A data file is deleted once neither of the last two checkpoints needs it
//! (wholly before the older one's position, no live bytes in either), so that a damaged
//! newest snapshot falls back to the one before without loss; a snapshot-less full replay is
//! exact only while no file has been deleted. A sparse file (live bytes below
//! `compaction_threshold` of its size, no open transaction's records) has its live messages
//! rewritten at the head and is deleted two checkpoints later (`compaction.rs`): one old
//! unacknowledged message moves forward instead of pinning every later file.
//!
//! **At open.** When recovery replayed anything (records after the snapshot's position,
//! which is what an unclean stop leaves, a cut tail, rolled-back transactions, or a full
//! replay without a snapshot), open writes a checkpoint at the new head before serving
//! (durable journal first, as always), then reclaims and compacts as any checkpoint does.
//! So short runs ended by crashes (never reaching `checkpoint_bytes`) no longer make every
//! recovery replay every segment since the last checkpoint, and their files become
//! reclaimable. The two-snapshot rule is unchanged: the snapshot recovery loaded becomes the
//! older of the two, so at open the files wholly before *it* with no live bytes in either
//! are deleted, while the files it replayed stay until the next checkpoint (it must still
//! find them). A run of crashes therefore keeps about the files of the last three runs plus
//! the head (a run's file is compacted at the open after its messages are acked, and
//! deleted two checkpoints later). Without a loaded snapshot (the first checkpoint, or all
//! of them damaged) open writes a second checkpoint at once when that lets files go: both
//! snapshots then cover the same position, so either finds every file it needs, and no
//! full-replay fallback is lost that deleting any file would not lose anyway. A failure of
//! the snapshot or of reclaiming at open is logged and reported by `close`; a failure to
//! make the journal durable fails the open.
//!
//! ## Recovery
//!
//! See `recovery.rs`: the journal after the snapshot's position is read forward in chunks,
//! stopping where the records give way to zeros (the next 64 KiB are checked to be zeros
//! too, a block at a time; the rest of a preallocated segment is not read), so an open
//! reads about what was written since the last checkpoint. A torn tail (short write, bad
//! checksum, preallocated zeros, an unfinished unit) is truncated with a warning naming
//! file, offset and bytes;
//! damage followed by valid records is corruption, reported with file and offset (opened up
//! to it by default, refused with `refuse_on_corruption`). Unprepared transactions are rolled
//! back, prepared ones reported. Without the `clean-shutdown` marker (a crash), every
//! recovered message is returned with `redelivered = true`.
//!
//! ## Space
//!
//! `max_size` (default 64 GiB, like the configuration's `store.max_size`; ActiveMQ's
//! `storeUsage` defaults to 100 GB) bounds the bytes of data
//! files (bytes of records in them and of units queued for the writer; the unused
//! preallocated end of the head is not counted): past it, units with adds are refused at submit with
//! [`StoreError::Full`] while acks, removals, commits and
//! rollbacks still work and compaction goes on, so consumers can drain. Segments are
//! preallocated, so the disk filling up shows when a segment is created: the store then
//! releases its reserve file (one segment) so that the segment can still be allocated,
//! refuses adds with `Full`, and accepts them again once reclaiming frees space. Where the
//! file system cannot preallocate, running out of space in a write poisons the store.
//!
//! ## Limits
//!
//! - Message ids are unique among live messages (the broker assigns them): adding an id
//!   that a queue already holds is ignored for that queue, like `MemoryStore`, but adding a
//!   live id to other queues stores a second body.
//! - At most 256 segment handles stay open; older ones are closed and reopened on use.
//! - A checkpoint encodes the whole index while holding the index lock for reading: submits
//!   wait for it (a few tens of milliseconds for millions of references), and it costs as
//!   much as the index is large, every `checkpoint_bytes` of journal.
//!
//! ## Failpoints and testing
//!
//! Every I/O checks a failpoint first ([`FAILPOINTS`]). All file I/O goes through
//! [`Disk`]; [`testing::SimulatedDisk`] keeps synced and unsynced bytes apart and can lose
//! power, and [`testing::JournalHarness`] runs the conformance kit. The crash tests
//! (`tests/crash.rs`) run the shared harness `store::kit::crash`: power lost in-process over
//! the simulated disk, a child process killed over a real directory, and the same as power
//! cuts under `store::powercut`.
#![cfg_attr(not(test), deny(clippy::unwrap_used))]

mod checkpoint;
mod compaction;
mod disk;
mod engine;
mod error;
mod frame;
mod index;
mod options;
mod record;
mod recovery;
mod refs;
mod segment;
pub mod testing;
mod writer;

#[cfg(test)]
mod tests;

pub use crate::disk::{Disk, DiskFile, RealDisk};
pub use crate::engine::{JournalStats, JournalStore};
pub use crate::error::Damage;
pub use crate::options::{
    JournalOptions, DEFAULT_CHECKPOINT_BYTES, DEFAULT_MAX_SIZE, DEFAULT_SEGMENT_SIZE,
};

use ::store::StoreError;

/// Checked before each write to a data file (and the clean-shutdown marker, the reserve).
pub const FP_WRITE: &str = "journal.write";
/// Checked before each `fdatasync`.
pub const FP_SYNC: &str = "journal.sync";
/// Checked before reading data files (recovery, reads of bodies, compaction) and snapshots.
pub const FP_READ: &str = "journal.read";
/// Checked before creating a data file.
pub const FP_CREATE_SEGMENT: &str = "journal.create_segment";
/// Checked before writing an index snapshot.
pub const FP_CHECKPOINT: &str = "journal.checkpoint";
/// Checked before deleting a file (data files, old snapshots, the shutdown marker).
pub const FP_DELETE: &str = "journal.delete";
/// Every failpoint the journal checks.
pub const FAILPOINTS: &[&str] =
    &[FP_WRITE, FP_SYNC, FP_READ, FP_CREATE_SEGMENT, FP_CHECKPOINT, FP_DELETE];

/// The marker a clean close leaves.
pub const CLEAN_SHUTDOWN_FILE: &str = "clean-shutdown";
/// One segment of reserved space.
pub const RESERVE_FILE: &str = "reserve.space";

/// An I/O error with what was being done; running out of space is [`StoreError::Full`].
pub(crate) fn io_error(context: impl Into<String>, error: std::io::Error) -> StoreError {
    let context = context.into();
    if disk::is_out_of_space(&error) {
        return StoreError::Full { reason: format!("out of disk space while {context}") };
    }
    StoreError::io(context, error)
}
