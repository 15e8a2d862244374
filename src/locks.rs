//! Per-key operation locks that never block: a second caller for a held key
//! gets `Aborted` and its sidecar or kubelet retries later. A key is held
//! exclusively (one operation), or shared by operations that only need it
//! not to change under them (the node's publishes of one volume, which a
//! remount of its staging mount must not overlap). A guard may travel with
//! a parked flow (CreateVolume and ControllerModifyVolume keep theirs until
//! they answer), so a key can stay held while no thread works on it.
//! Callers choose the keys (`controller::lock_keys` in the controller;
//! volume ids and target paths on the node). Locks live in one process
//! only: across controller replicas the sidecars' leader election keeps one
//! at work.

use crate::mutex::lock;
use crate::Error;
use std::collections::HashMap;
use std::sync::{Arc, Mutex};

/// How a key is held: by one operation, or by this many sharing it.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
enum Hold {
    Exclusive,
    Shared(usize),
}

/// A set of keys currently being worked on.
#[derive(Clone, Default)]
pub struct OpLocks {
    held: Arc<Mutex<HashMap<String, Hold>>>,
}

/// Holds one key until dropped.
#[must_use = "the lock is released when the guard is dropped"]
pub struct OpGuard {
    held: Arc<Mutex<HashMap<String, Hold>>>,
    key: String,
}

fn contended(key: &str) -> Error {
    Error::Aborted(format!(
        "An operation with the given volume key {key} already exists.\n --- Most likely a long process is still running to completion. Retrying."
    ))
}

impl OpLocks {
    pub fn new() -> OpLocks {
        OpLocks::default()
    }

    /// Takes `key` alone, or fails with `Aborted` when another operation
    /// holds it in any way.
    pub fn try_lock(&self, key: &str) -> Result<OpGuard, Error> {
        let mut held = lock(&self.held);
        if held.contains_key(key) {
            return Err(contended(key));
        }
        held.insert(key.to_string(), Hold::Exclusive);
        Ok(self.guard(key))
    }

    /// Shares `key` with others that share it, or fails with `Aborted`
    /// while an operation holds it alone.
    pub fn try_share(&self, key: &str) -> Result<OpGuard, Error> {
        let mut held = lock(&self.held);
        let hold = held.entry(key.to_string()).or_insert(Hold::Shared(0));
        match hold {
            Hold::Exclusive => return Err(contended(key)),
            Hold::Shared(n) => *n += 1,
        }
        Ok(self.guard(key))
    }

    fn guard(&self, key: &str) -> OpGuard {
        OpGuard {
            held: self.held.clone(),
            key: key.to_string(),
        }
    }
}

impl Drop for OpGuard {
    fn drop(&mut self) {
        let mut held = lock(&self.held);
        match held.get_mut(&self.key) {
            Some(Hold::Shared(n)) if *n > 1 => *n -= 1,
            _ => {
                held.remove(&self.key);
            }
        }
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
        assert!(matches!(locks.try_share("1/2"), Err(Error::Aborted(_))));
        assert!(locks.try_lock("1/3").is_ok());
        drop(guard);
        assert!(locks.try_lock("1/2").is_ok());
    }

    #[test]
    fn shared_holds_exclude_only_an_exclusive_one() {
        let locks = OpLocks::new();
        let a = locks.try_share("1/2").unwrap();
        let b = locks.try_share("1/2").unwrap();
        assert!(matches!(locks.try_lock("1/2"), Err(Error::Aborted(_))));
        drop(a);
        assert!(matches!(locks.try_lock("1/2"), Err(Error::Aborted(_))));
        drop(b);
        let alone = locks.try_lock("1/2").unwrap();
        assert!(matches!(locks.try_share("1/2"), Err(Error::Aborted(_))));
        drop(alone);
        assert!(lock(&locks.held).is_empty());
    }
}
