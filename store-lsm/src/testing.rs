//! Test support, public so that other crates' tests can use it: [`LsmHarness`], the
//! conformance kit's harness.

use std::path::Path;
use std::sync::Arc;

use store::{Failpoints, MessageStore, StoreError, StoreHarness, SyncPolicy};

use crate::{EngineKind, LsmOptions, LsmStore, FAILPOINTS};

/// A store in a temporary directory on one engine, `SyncPolicy::Always`.
#[derive(Debug)]
pub struct LsmHarness {
    dir: tempfile::TempDir,
    options: LsmOptions,
}

impl LsmHarness {
    pub fn new(engine: EngineKind) -> Self {
        LsmHarness::with_options(LsmOptions {
            engine,
            sync: SyncPolicy::Always,
            ..LsmOptions::default()
        })
    }

    pub fn with_options(options: LsmOptions) -> Self {
        let dir = tempfile::Builder::new()
            .prefix("ferromq-lsm-")
            .tempdir()
            .unwrap_or_else(|e| panic!("creating a temporary directory failed: {e}"));
        LsmHarness { dir, options }
    }

    pub fn dir(&self) -> &Path {
        self.dir.path()
    }

    pub fn options(&self) -> &LsmOptions {
        &self.options
    }
}

impl StoreHarness for LsmHarness {
    fn open(&mut self) -> Result<Arc<dyn MessageStore>, StoreError> {
        Ok(Arc::new(LsmStore::open(self.dir.path(), self.options.clone())?))
    }

    fn failpoints(&self) -> Failpoints {
        self.options.failpoints.clone()
    }

    fn failpoint_names(&self) -> &'static [&'static str] {
        FAILPOINTS
    }
}
