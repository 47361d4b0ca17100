//! The one error type every store returns. Engine-specific failures are boxed as the source.

use std::sync::Arc;

/// A store failure. `Clone` because one failed group commit fails every unit in the batch.
#[derive(Debug, Clone, thiserror::Error)]
#[non_exhaustive]
pub enum StoreError {
    /// An I/O operation failed; `context` says which (file, operation).
    #[error("store I/O failed while {context}: {source}")]
    Io {
        context: String,
        #[source]
        source: Arc<std::io::Error>,
    },
    /// A sync failed earlier, so the store no longer knows what is durable; it refuses every
    /// write until it is reopened (recovery then finds what really reached the disk).
    #[error(
        "store is poisoned after an earlier failure ({reason}); restart the broker to recover"
    )]
    Poisoned { reason: String },
    /// The store (or the disk under it) is full: new messages are refused, acks still work.
    #[error("store is full: {reason}; consume messages or raise the store limit")]
    Full { reason: String },
    /// Data read back failed its checksum or could not be decoded.
    #[error("store data is corrupt at {location}: {reason}")]
    Corrupt { location: String, reason: String },
    /// A failpoint armed by a test fired.
    #[error("failpoint {name} fired")]
    Injected { name: &'static str },
    /// A unit referred to something the store does not have (an unknown transaction, say).
    #[error("invalid store operation: {reason}")]
    Invalid { reason: String },
    /// The store has been closed.
    #[error("store is closed")]
    Closed,
    /// A failure of the engine underneath (database driver, LSM engine).
    #[error("store engine failed: {0}")]
    Engine(Arc<dyn std::error::Error + Send + Sync>),
}

impl StoreError {
    pub fn io(context: impl Into<String>, source: std::io::Error) -> Self {
        StoreError::Io { context: context.into(), source: Arc::new(source) }
    }
}
