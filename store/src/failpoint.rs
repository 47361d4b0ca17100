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

/// A shared, cloneable set of armed failpoints. Clones share the same registry.
#[derive(Debug, Clone, Default)]
pub struct Failpoints {
    armed: Arc<Mutex<HashMap<&'static str, FailAction>>>,
    /// How many times each failpoint has fired (counts survive disarming), so that a test can
    /// check that its workload really reached the point it armed.
    fired: Arc<Mutex<HashMap<&'static str, u64>>>,
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

    /// True if `name` is armed (a `Once` that fired is no longer armed).
    pub fn is_armed(&self, name: &str) -> bool {
        self.armed.lock().contains_key(name)
    }

    /// How many times the failpoint `name` has fired so far.
    pub fn fired(&self, name: &str) -> u64 {
        self.fired.lock().get(name).copied().unwrap_or(0)
    }

    /// Called by a store before the I/O named `name`: `Err` if the failpoint fires.
    pub fn check(&self, name: &'static str) -> Result<(), StoreError> {
        let mut armed = self.armed.lock();
        let Some(action) = armed.get_mut(name) else {
            return Ok(());
        };
        let fire = match action {
            FailAction::Always | FailAction::AfterPasses(0) => true,
            FailAction::Once => {
                armed.remove(name);
                true
            }
            FailAction::AfterPasses(n) => {
                *n -= 1;
                false
            }
        };
        drop(armed);
        if !fire {
            return Ok(());
        }
        *self.fired.lock().entry(name).or_insert(0) += 1;
        Err(StoreError::Injected { name })
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    fn fires(failpoints: &Failpoints, name: &'static str) -> bool {
        match failpoints.check(name) {
            Ok(()) => false,
            Err(StoreError::Injected { name: fired }) => {
                assert_eq!(fired, name);
                true
            }
            Err(other) => panic!("unexpected error {other}"),
        }
    }

    #[test]
    fn unarmed_failpoint_passes() {
        let failpoints = Failpoints::new();
        assert!(!fires(&failpoints, "io.write"));
        assert_eq!(failpoints.fired("io.write"), 0);
        assert!(!failpoints.is_armed("io.write"));
    }

    #[test]
    fn always_fires_every_time_until_disarmed() {
        let failpoints = Failpoints::new();
        failpoints.arm("io.write", FailAction::Always);
        assert!(failpoints.is_armed("io.write"));
        for _ in 0..3 {
            assert!(fires(&failpoints, "io.write"));
        }
        assert!(!fires(&failpoints, "io.sync"), "other failpoints stay quiet");
        failpoints.disarm("io.write");
        assert!(!fires(&failpoints, "io.write"));
        assert_eq!(failpoints.fired("io.write"), 3);
    }

    #[test]
    fn once_fires_once_then_disarms_itself() {
        let failpoints = Failpoints::new();
        failpoints.arm("io.sync", FailAction::Once);
        assert!(fires(&failpoints, "io.sync"));
        assert!(!failpoints.is_armed("io.sync"));
        assert!(!fires(&failpoints, "io.sync"));
        assert_eq!(failpoints.fired("io.sync"), 1);
    }

    #[test]
    fn after_passes_lets_n_through_then_fires_every_time() {
        let failpoints = Failpoints::new();
        failpoints.arm("io.read", FailAction::AfterPasses(2));
        assert!(!fires(&failpoints, "io.read"));
        assert!(!fires(&failpoints, "io.read"));
        assert!(fires(&failpoints, "io.read"));
        assert!(fires(&failpoints, "io.read"));
        assert_eq!(failpoints.fired("io.read"), 2);
    }

    #[test]
    fn after_zero_passes_fires_at_once() {
        let failpoints = Failpoints::new();
        failpoints.arm("io.read", FailAction::AfterPasses(0));
        assert!(fires(&failpoints, "io.read"));
    }

    #[test]
    fn rearming_replaces_the_action() {
        let failpoints = Failpoints::new();
        failpoints.arm("io.write", FailAction::Always);
        failpoints.arm("io.write", FailAction::Once);
        assert!(fires(&failpoints, "io.write"));
        assert!(!fires(&failpoints, "io.write"));
    }

    #[test]
    fn disarm_all_clears_every_failpoint() {
        let failpoints = Failpoints::new();
        failpoints.arm("a", FailAction::Always);
        failpoints.arm("b", FailAction::Once);
        failpoints.disarm_all();
        assert!(!fires(&failpoints, "a"));
        assert!(!fires(&failpoints, "b"));
    }

    #[test]
    fn clones_share_one_registry_and_registries_are_independent() {
        let failpoints = Failpoints::new();
        let clone = failpoints.clone();
        let other = Failpoints::new();
        failpoints.arm("io.write", FailAction::Always);
        assert!(fires(&clone, "io.write"));
        assert!(!fires(&other, "io.write"));
        assert_eq!(failpoints.fired("io.write"), 1);
        clone.disarm("io.write");
        assert!(!fires(&failpoints, "io.write"));
    }
}
