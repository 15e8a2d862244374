//! Per-key operation locks that never block: a second caller for a held key
//! gets `Aborted` and its sidecar or kubelet retries later. A guard may
//! travel with a parked flow (CreateVolume and ControllerModifyVolume keep
//! theirs until they answer), so a key can stay held while no thread works
//! on it. Callers choose the keys (`create/<label>`, `modify/<volume>`,
//! `snapshot/<source>` in the controller; volume ids and target paths on the
//! node). Locks live in one process only: across controller replicas the
//! sidecars' leader election keeps one at work.

use crate::mutex::lock;
use crate::Error;
use std::collections::HashSet;
use std::sync::{Arc, Mutex};

/// A set of keys currently being worked on.
#[derive(Clone, Default)]
pub struct OpLocks {
    held: Arc<Mutex<HashSet<String>>>,
}

/// Holds one key until dropped.
#[must_use = "the lock is released when the guard is dropped"]
pub struct OpGuard {
    held: Arc<Mutex<HashSet<String>>>,
    key: String,
}

impl OpLocks {
    pub fn new() -> OpLocks {
        OpLocks::default()
    }

    /// Takes `key`, or fails with `Aborted` when another operation holds it.
    pub fn try_lock(&self, key: &str) -> Result<OpGuard, Error> {
        let mut held = lock(&self.held);
        if !held.insert(key.to_string()) {
            return Err(Error::Aborted(format!(
                "An operation with the given volume key {key} already exists.\n --- Most likely a long process is still running to completion. Retrying."
            )));
        }
        Ok(OpGuard {
            held: self.held.clone(),
            key: key.to_string(),
        })
    }
}

impl Drop for OpGuard {
    fn drop(&mut self) {
        let mut held = lock(&self.held);
        held.remove(&self.key);
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn contention_is_aborted_and_release_frees_the_key() {
        let locks = OpLocks::new();
        let guard = locks.try_lock("1/2").unwrap();
        assert!(matches!(locks.try_lock("1/2"), Err(Error::Aborted(_))));
        assert!(locks.try_lock("1/3").is_ok());
        drop(guard);
        assert!(locks.try_lock("1/2").is_ok());
    }
}
