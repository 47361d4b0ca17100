//! The journal's own error: damage found in a data file, reported as
//! [`StoreError::Corrupt`] with the file and offset as its location.

use store::StoreError;

use crate::segment::segment_name;

/// A record of a data file that is not what it should be.
#[derive(Debug, Clone, PartialEq, Eq, thiserror::Error)]
#[error("{} offset {offset}: {reason}", segment_name(*file))]
pub struct Damage {
    pub file: u32,
    pub offset: u64,
    pub reason: String,
}

impl Damage {
    pub fn new(file: u32, offset: u64, reason: impl Into<String>) -> Self {
        Damage { file, offset, reason: reason.into() }
    }

    /// Where it is, as `StoreError::Corrupt` names it: `db-00000003.log offset 4096`.
    pub fn location(&self) -> String {
        format!("{} offset {}", segment_name(self.file), self.offset)
    }
}

impl From<Damage> for StoreError {
    fn from(damage: Damage) -> Self {
        StoreError::Corrupt { location: damage.location(), reason: damage.reason }
    }
}
