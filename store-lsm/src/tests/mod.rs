//! The LSM store's own tests: the conformance kit on both engines, recovery, group commit,
//! the size limit, and crash tests (a child process killed mid-write).

mod conformance_sled {
    use crate::testing::LsmHarness;
    use crate::EngineKind;

    store::conformance_tests!(LsmHarness::new(EngineKind::Sled));
}

#[cfg(feature = "rocksdb")]
mod conformance_rocksdb {
    use crate::testing::LsmHarness;
    use crate::EngineKind;

    store::conformance_tests!(LsmHarness::new(EngineKind::RocksDb));
}

mod crash;
mod store_tests;

use std::sync::Arc;

pub use store::kit::units::{ack_id, add, message, queue, read_flags as read_all, submit};

pub fn engines() -> Vec<crate::EngineKind> {
    let mut engines = vec![crate::EngineKind::Sled];
    if crate::EngineKind::RocksDb.is_available() {
        engines.push(crate::EngineKind::RocksDb);
    }
    engines
}
