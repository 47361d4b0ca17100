//! A tiny failpoint registry: every store names each of its I/O points and asks the registry
//! before performing it, so that the conformance kit can make any one of them fail.
//!
//! A registry is owned by one store instance (not global), so tests run in parallel.

use std::collections::HashMap;
use std::sync::Arc;

use parking_lot::Mutex;

use crate::error::StoreError;

/// What an armed failpoint does when reached.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub enum FailAction {
    /// Fail every time it is reached.
    Always,
    /// Let `n` passes through, then fail every time.
    AfterPasses(u32),
    /// Fail once, then disarm.
    Once,
}

/// A shared, cloneable set of armed failpoints.
#[derive(Debug, Clone, Default)]
pub struct Failpoints {
    armed: Arc<Mutex<HashMap<&'static str, FailAction>>>,
}

impl Failpoints {
    pub fn new() -> Self {
        Failpoints::default()
    }

    pub fn arm(&self, name: &'static str, action: FailAction) {
        self.armed.lock().insert(name, action);
    }

    pub fn disarm(&self, name: &'static str) {
        self.armed.lock().remove(name);
    }

    pub fn disarm_all(&self) {
        self.armed.lock().clear();
    }

    /// Called by a store before the I/O named `name`: `Err` if the failpoint fires.
    pub fn check(&self, name: &'static str) -> Result<(), StoreError> {
        let mut armed = self.armed.lock();
        let Some(action) = armed.get_mut(name) else { return Ok(()) };
        match action {
            FailAction::Always => Err(StoreError::Injected { name }),
            FailAction::Once => {
                armed.remove(name);
                Err(StoreError::Injected { name })
            }
            FailAction::AfterPasses(0) => Err(StoreError::Injected { name }),
            FailAction::AfterPasses(n) => {
                *n -= 1;
                Ok(())
            }
        }
    }
}
