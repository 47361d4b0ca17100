//! The data directory's lock: an flock on `<data_dir>/lock` that keeps a second broker (a
//! standby, or one started by mistake) off a directory whose store this broker may still
//! write, and [`LockedStore`], which ties the lock to the store's life.
//!
//! The lock must outlive every writer of the store, not just the `BrokerHandle`: dropping a
//! handle without `shutdown()` (an embedding application's, or `ferromq start`'s on an error
//! path) only cancels the broker's tasks and stops its queues. They end later, each holding
//! the store, and the store's writer thread finishes what they submitted when the last of
//! them lets it go (every engine joins its writer when dropped). Held by the handle alone,
//! the lock was gone at once, and a standby could open the store while this broker still
//! wrote it. So the store the broker runs on is a [`LockedStore`]: the lock goes only after
//! the store (and its writer) is gone, or when a clean stop closed it
//! ([`DataDirLock::release`]).

use std::fs::File;
use std::path::{Path, PathBuf};
use std::sync::Arc;
use std::time::Duration;

use parking_lot::Mutex;
use store::{
    Backlog, Completion, MessageStore, PageKey, QueueKey, Recovered, StoreError, StoreUsage,
    StoredMessage, UnitOfWork,
};

use crate::error::BrokerError;

/// An exclusive lock on a data directory, held for as long as this broker may write under it.
pub(crate) struct DataDirLock {
    /// The locked file; taken out (closing it, which drops the flock) by [`DataDirLock::release`].
    file: Mutex<Option<File>>,
}

impl DataDirLock {
    /// Takes the lock, waiting (as a standby) while another broker holds it.
    pub(crate) async fn wait(dir: &Path, retry: Duration) -> Result<DataDirLock, BrokerError> {
        let mut waiting_since: Option<std::time::Instant> = None;
        loop {
            match DataDirLock::acquire(dir) {
                Ok(lock) => {
                    if let Some(since) = waiting_since {
                        let waited = since.elapsed();
                        tracing::info!(dir = %dir.display(), ?waited, "data directory lock acquired: taking over as the active broker");
                    }
                    return Ok(lock);
                }
                Err(BrokerError::DataDirLocked { holder, .. }) => {
                    if waiting_since.is_none() {
                        tracing::info!(dir = %dir.display(), "data directory locked by another broker{holder}: waiting as its standby");
                        waiting_since = Some(std::time::Instant::now());
                    }
                    tokio::time::sleep(retry).await;
                }
                Err(error) => return Err(error),
            }
        }
    }

    /// Takes the lock now or reports the holder. The lock is an flock on `<dir>/lock`, held
    /// by the returned `File` (opened close-on-exec, so no child process shares it): the
    /// kernel releases it when the `File` is dropped or the process dies, however it dies.
    pub(crate) fn acquire(dir: &Path) -> Result<DataDirLock, BrokerError> {
        let io = |source| BrokerError::DataDir { path: dir.to_path_buf(), source };
        std::fs::create_dir_all(dir).map_err(io)?;
        let path: PathBuf = dir.join("lock");
        loop {
            let file = std::fs::OpenOptions::new()
                .create(true)
                .truncate(false)
                .read(true)
                .write(true)
                .open(&path)
                .map_err(io)?;
            match file.try_lock() {
                Ok(()) => {}
                Err(std::fs::TryLockError::WouldBlock) => {
                    let holder = match DataDirLock::holder(&path) {
                        Some(pid) => format!(" (process {pid})"),
                        None => String::new(),
                    };
                    return Err(BrokerError::DataDirLocked { path: dir.to_path_buf(), holder });
                }
                Err(std::fs::TryLockError::Error(source)) => return Err(io(source)),
            }
            // An flock belongs to the file, not to the name: had the lock file been removed
            // (or replaced) between our open and our lock, we would hold a lock nobody else
            // can see. Lock the file the name leads to, or try again.
            use std::os::unix::fs::MetadataExt;
            let (held, named) = (file.metadata().map_err(io)?, std::fs::metadata(&path));
            if named.is_ok_and(|named| (named.dev(), named.ino()) == (held.dev(), held.ino())) {
                DataDirLock::record_holder(&file).map_err(io)?;
                return Ok(DataDirLock { file: Mutex::new(Some(file)) });
            }
        }
    }

    /// Writes our pid into the lock file as one fixed-width write at its start: the file is
    /// never truncated to nothing first, so a broker refused at this moment reads a whole pid
    /// (ours, or the previous holder's while the write is under way), never an empty file.
    fn record_holder(file: &File) -> std::io::Result<()> {
        use std::os::unix::fs::FileExt;
        let record = format!("{:<width$}\n", std::process::id(), width = PID_RECORD - 1);
        file.write_all_at(record.as_bytes(), 0)?;
        // What an older, longer record left after ours.
        file.set_len(PID_RECORD as u64)
    }

    /// The pid the holder wrote. A holder writes it just after it locks (a fresh lock file
    /// is empty until then), so an empty file is read again a few times first.
    fn holder(path: &Path) -> Option<String> {
        for _ in 0..HOLDER_READS {
            let text = std::fs::read_to_string(path).ok()?;
            let pid = text.trim();
            if !pid.is_empty() {
                return Some(pid.to_owned());
            }
            std::thread::sleep(Duration::from_millis(5));
        }
        None
    }

    /// Gives the lock up now, for a broker whose store is closed (nothing more can be written
    /// to it) while something may still hold the store or this lock: a stop must let a
    /// standby or a restart in at once. Without it the lock goes with its last holder.
    pub(crate) fn release(&self) {
        drop(self.file.lock().take());
    }
}

/// The lock file's length: a pid left-aligned, padded with spaces, and a newline.
const PID_RECORD: usize = 21;
/// How many times a refused broker reads an empty lock file before it reports no holder.
const HOLDER_READS: usize = 20;

/// A store that keeps its broker's data-directory lock for as long as the store lives (see
/// the module documentation); it only passes every call on.
pub(crate) struct LockedStore {
    // Fields drop in declaration order: the store, and with the last holder its writer
    // thread, before the lock.
    store: Arc<dyn MessageStore>,
    _lock: Arc<DataDirLock>,
}

impl LockedStore {
    pub(crate) fn new(store: Arc<dyn MessageStore>, lock: Arc<DataDirLock>) -> Self {
        LockedStore { store, _lock: lock }
    }
}

impl MessageStore for LockedStore {
    fn name(&self) -> &'static str {
        self.store.name()
    }

    fn recover(&self) -> Result<Recovered, StoreError> {
        self.store.recover()
    }

    fn submit(&self, unit: UnitOfWork) -> Completion {
        self.store.submit(unit)
    }

    fn read_page(
        &self,
        queue: &QueueKey,
        after: Option<PageKey>,
        limit: usize,
    ) -> Result<Vec<StoredMessage>, StoreError> {
        self.store.read_page(queue, after, limit)
    }

    fn count(&self, queue: &QueueKey) -> Result<u64, StoreError> {
        self.store.count(queue)
    }

    fn usage(&self) -> StoreUsage {
        self.store.usage()
    }

    fn backlog(&self) -> Option<&Backlog> {
        self.store.backlog()
    }

    fn close(&self) -> Result<(), StoreError> {
        self.store.close()
    }
}
