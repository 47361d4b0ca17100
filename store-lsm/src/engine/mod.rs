//! The engine abstraction: an ordered key-value store with atomic write batches, point
//! reads, forward range scans and an explicit sync, in the spirit of TiKV's engine traits
//! but with no more than [`LsmStore`](crate::LsmStore) needs.
//!
//! No snapshot type: the store reads through its own overlay of unwritten units under a
//! lock (see `view.rs`), and a range scan that sees a later batch than the overlay it was
//! merged with is still correct there, because the overlay only ever holds values at least
//! as new as the engine's. A write batch is atomic for readers and after a crash; it is not
//! durable until [`Engine::sync`] (the writer thread decides when, per the sync policy).

use std::path::Path;

use crate::error::LsmError;

mod sled_engine;
pub use sled_engine::SledEngine;

#[cfg(feature = "rocksdb")]
mod rocksdb_engine;
#[cfg(feature = "rocksdb")]
pub use rocksdb_engine::RocksDbEngine;

/// One key and its value, as a scan returns them.
pub type KeyValue = (Vec<u8>, Vec<u8>);

/// A forward scan over an engine.
pub type EngineIter<'a> = Box<dyn Iterator<Item = Result<KeyValue, LsmError>> + 'a>;

/// Puts and deletes applied together, atomically, in order.
#[derive(Debug, Default, Clone)]
pub struct WriteBatch {
    pub(crate) operations: Vec<(Vec<u8>, Option<Vec<u8>>)>,
}

impl WriteBatch {
    pub fn new() -> Self {
        WriteBatch::default()
    }

    pub fn put(&mut self, key: Vec<u8>, value: Vec<u8>) {
        self.operations.push((key, Some(value)));
    }

    pub fn delete(&mut self, key: Vec<u8>) {
        self.operations.push((key, None));
    }

    /// A put (`Some`) or a delete (`None`).
    pub fn push(&mut self, key: Vec<u8>, value: Option<Vec<u8>>) {
        self.operations.push((key, value));
    }

    pub fn len(&self) -> usize {
        self.operations.len()
    }

    pub fn is_empty(&self) -> bool {
        self.operations.is_empty()
    }
}

/// An ordered key-value engine.
pub trait Engine: Send + Sync + 'static {
    /// `"sled"` or `"rocksdb"`.
    fn name(&self) -> &'static str;
    /// The value at `key`.
    fn get(&self, key: &[u8]) -> Result<Option<Vec<u8>>, LsmError>;
    /// Every key in `start..end`, in byte order.
    fn range(&self, start: &[u8], end: &[u8]) -> EngineIter<'_>;
    /// Applies `batch` atomically; handed to the OS (or the engine's buffers) but not synced.
    fn write(&self, batch: WriteBatch) -> Result<(), LsmError>;
    /// Makes every write so far durable.
    fn sync(&self) -> Result<(), LsmError>;
}

/// Which engine an [`LsmStore`](crate::LsmStore) runs on.
#[derive(Debug, Clone, Copy, PartialEq, Eq, Default)]
pub enum EngineKind {
    /// sled 0.34, pure Rust (seed 001's LevelDB in Java).
    #[default]
    Sled,
    /// RocksDB through the `rocksdb` crate, linking the system's librocksdb (seed 001's
    /// LevelDB over JNI).
    RocksDb,
}

impl EngineKind {
    pub fn name(self) -> &'static str {
        match self {
            EngineKind::Sled => "sled",
            EngineKind::RocksDb => "rocksdb",
        }
    }

    /// Whether this build has the engine (RocksDB is behind the `rocksdb` cargo feature).
    pub fn is_available(self) -> bool {
        match self {
            EngineKind::Sled => true,
            EngineKind::RocksDb => cfg!(feature = "rocksdb"),
        }
    }

    /// Opens (creating when missing) the engine's files in `dir`.
    pub fn open(self, dir: &Path) -> Result<Box<dyn Engine>, LsmError> {
        match self {
            EngineKind::Sled => Ok(Box::new(SledEngine::open(dir)?)),
            #[cfg(feature = "rocksdb")]
            EngineKind::RocksDb => Ok(Box::new(RocksDbEngine::open(dir)?)),
            #[cfg(not(feature = "rocksdb"))]
            EngineKind::RocksDb => Err(LsmError::EngineMissing("rocksdb")),
        }
    }
}
