//! The RocksDB engine: the default column family, the write-ahead log on.

use std::path::Path;

use rocksdb::{Direction, IteratorMode, Options, ReadOptions, WriteOptions, DB};

use super::{Engine, EngineIter, WriteBatch};
use crate::error::LsmError;

/// RocksDB (Debian's librocksdb 7.8.3, linked by the `rocksdb` crate) over the store's
/// directory.
pub struct RocksDbEngine {
    db: DB,
}

impl std::fmt::Debug for RocksDbEngine {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        f.debug_struct("RocksDbEngine").field("path", &self.db.path()).finish()
    }
}

impl RocksDbEngine {
    pub fn open(dir: &Path) -> Result<Self, LsmError> {
        let mut options = Options::default();
        options.create_if_missing(true);
        // Every write goes to the WAL file in the OS at once (manual_wal_flush stays off),
        // so the `never` policy means "handed to the OS", as the contract says; the writer
        // thread makes it durable with one WAL fsync per batch (`flush_wal(true)`).
        options.set_manual_wal_flush(false);
        // Keys are short and mostly sequential per queue; acked references become
        // tombstones that compaction drops, so keep compaction reasonably eager.
        options.set_level_compaction_dynamic_level_bytes(true);
        let db = DB::open(&options, dir)?;
        Ok(RocksDbEngine { db })
    }
}

impl Engine for RocksDbEngine {
    fn name(&self) -> &'static str {
        "rocksdb"
    }

    fn get(&self, key: &[u8]) -> Result<Option<Vec<u8>>, LsmError> {
        Ok(self.db.get_pinned(key)?.map(|value| value.to_vec()))
    }

    fn range(&self, start: &[u8], end: &[u8]) -> EngineIter<'_> {
        let mut read = ReadOptions::default();
        read.set_iterate_upper_bound(end.to_vec());
        Box::new(self.db.iterator_opt(IteratorMode::From(start, Direction::Forward), read).map(
            |entry| {
                let (key, value) = entry?;
                Ok((key.into_vec(), value.into_vec()))
            },
        ))
    }

    fn write(&self, batch: WriteBatch) -> Result<(), LsmError> {
        let mut rocks_batch = rocksdb::WriteBatch::default();
        for (key, value) in batch.operations {
            match value {
                Some(value) => rocks_batch.put(key, value),
                None => rocks_batch.delete(key),
            }
        }
        let mut write = WriteOptions::default();
        write.set_sync(false);
        self.db.write_opt(rocks_batch, &write)?;
        Ok(())
    }

    fn sync(&self) -> Result<(), LsmError> {
        self.db.flush_wal(true)?;
        Ok(())
    }
}
