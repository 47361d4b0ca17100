//! The sled engine: one default tree.

use std::fs::File;
use std::path::Path;
use std::time::{Duration, Instant};

use super::{Engine, EngineIter, WriteBatch};
use crate::error::LsmError;

/// How long an open waits for the lock of a sled instance that is shutting down.
const LOCK_WAIT: Duration = Duration::from_secs(10);

/// sled 0.34 over the store's directory.
#[derive(Debug)]
pub struct SledEngine {
    db: sled::Db,
    /// sled's data file, opened again only to `fdatasync` it (see [`Engine::sync`]).
    data_file: File,
}

impl SledEngine {
    pub fn open(dir: &Path) -> Result<Self, LsmError> {
        // sled's own background flush (every 500 ms) stays on: sled keeps writes in its own
        // buffers until a flush, so under the `never` and `periodic` policies it is what
        // bounds the loss window. Under `always` the writer flushes every batch itself.
        let config = sled::Config::new().path(dir).mode(sled::Mode::HighThroughput);
        // sled's background I/O threads may still hold the previous instance's file (and
        // its lock) for a moment after that instance was dropped, so a reopen in the same
        // process (a restart of the embedded store, the tests) retries for a while. Two
        // brokers never race here: the broker locks its data directory first.
        let deadline = Instant::now() + LOCK_WAIT;
        loop {
            match config.open() {
                Ok(db) => {
                    let path = dir.join("db");
                    let data_file = File::open(&path).map_err(|e| sync_error(&path, e))?;
                    // sled creates its files (`db`, `conf`) without ever syncing their
                    // directory, so after a power cut a new store's files could be gone
                    // although their data was synced (the power-cut test showed it): sync
                    // the directory once they exist.
                    File::open(dir).and_then(|d| d.sync_all()).map_err(|e| sync_error(dir, e))?;
                    return Ok(SledEngine { db, data_file });
                }
                Err(sled::Error::Io(e))
                    if e.to_string().contains("could not acquire lock")
                        && Instant::now() < deadline =>
                {
                    std::thread::sleep(Duration::from_millis(10));
                }
                Err(e) => return Err(e.into()),
            }
        }
    }
}

fn sync_error(path: &Path, e: std::io::Error) -> LsmError {
    LsmError::Sled(sled::Error::Io(std::io::Error::new(
        e.kind(),
        format!("opening {} to sync it: {e}", path.display()),
    )))
}

impl Engine for SledEngine {
    fn name(&self) -> &'static str {
        "sled"
    }

    fn get(&self, key: &[u8]) -> Result<Option<Vec<u8>>, LsmError> {
        Ok(self.db.get(key)?.map(|value| value.to_vec()))
    }

    fn range(&self, start: &[u8], end: &[u8]) -> EngineIter<'_> {
        Box::new(self.db.range(start.to_vec()..end.to_vec()).map(|entry| {
            let (key, value) = entry?;
            Ok((key.to_vec(), value.to_vec()))
        }))
    }

    fn write(&self, batch: WriteBatch) -> Result<(), LsmError> {
        let mut sled_batch = sled::Batch::default();
        for (key, value) in batch.operations {
            match value {
                Some(value) => sled_batch.insert(key, value),
                None => sled_batch.remove(key),
            }
        }
        self.db.apply_batch(sled_batch)?;
        Ok(())
    }

    fn sync(&self) -> Result<(), LsmError> {
        self.db.flush()?;
        // sled 0.34's flush ends in `sync_file_range` on Linux, which neither flushes the
        // drive's write cache nor the file's metadata: not durable across a power loss
        // (it measured 7,700 "syncs"/s on a disk that does 215 fdatasyncs/s). An
        // `fdatasync` of the same file through our own descriptor makes it durable.
        self.data_file.sync_data().map_err(sled::Error::Io)?;
        Ok(())
    }
}
