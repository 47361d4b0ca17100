//! [`LsmError`]: what can go wrong inside the LSM store, mapped to [`StoreError`] at the
//! contract's boundary (engine failures boxed as the source, as TiKV's engine traits do).

use std::sync::Arc;

use store::StoreError;

/// A failure of the LSM store or of the engine under it.
#[derive(Debug, thiserror::Error)]
#[non_exhaustive]
pub enum LsmError {
    /// sled failed (its I/O errors are reported as [`StoreError::Io`]).
    #[error("sled: {0}")]
    Sled(#[from] sled::Error),
    /// RocksDB failed.
    #[cfg(feature = "rocksdb")]
    #[error("rocksdb: {0}")]
    RocksDb(#[from] rocksdb::Error),
    /// A key or value read back is not what this store writes.
    #[error("key {key}: {reason}")]
    Corrupt { key: String, reason: String },
    /// The data was written by a newer ferromq, whose layout this one does not know.
    #[error(
        "the LSM store's schema version is {found}, newer than this ferromq supports \
         ({supported}); run the ferromq that wrote it, or start on an empty data directory"
    )]
    SchemaTooNew { found: u32, supported: u32 },
    /// The engine was asked for by configuration but is not compiled in.
    #[error("the {0} engine is not compiled into this ferromq (cargo feature \"{0}\")")]
    EngineMissing(&'static str),
}

impl LsmError {
    /// Damage found at `key` (printed in hex: keys are binary).
    pub fn corrupt(key: &[u8], reason: impl Into<String>) -> Self {
        LsmError::Corrupt { key: hex(key), reason: reason.into() }
    }
}

/// A key as lowercase hex, for error messages.
pub fn hex(key: &[u8]) -> String {
    key.iter().map(|b| format!("{b:02x}")).collect()
}

impl From<LsmError> for StoreError {
    fn from(error: LsmError) -> Self {
        match error {
            LsmError::Sled(sled::Error::Io(io)) => StoreError::io("writing the sled engine", io),
            LsmError::Corrupt { key, reason } => {
                StoreError::Corrupt { location: format!("LSM key {key}"), reason }
            }
            LsmError::SchemaTooNew { .. } | LsmError::EngineMissing(_) => {
                StoreError::Invalid { reason: error.to_string() }
            }
            other => StoreError::Engine(Arc::new(other)),
        }
    }
}
