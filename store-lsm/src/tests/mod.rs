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
