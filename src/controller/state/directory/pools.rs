//! What the controller remembers of the pools of shared filesystems it
//! runs between calls: hints that order the search and one decision per
//! pool at a time, never the truth (that is read back from Linode and the
//! filesystems' own files). Deciding is `kind::directory::pool`'s.

use crate::handles::VolumeId;
use crate::linode::Filesystem;
use crate::mutex::lock;
use std::collections::{BTreeSet, HashMap};
use std::sync::{Arc, Mutex};
use std::time::Instant;

/// A pool, by its Space and name.
pub(crate) type PoolKey = (u64, String);

/// What the controller remembers of its pools between calls.
#[derive(Default)]
pub struct Pools {
    /// One growth or prune decision per pool at a time, and the claims
    /// that placements make against prunes.
    pub(crate) gates: Mutex<HashMap<PoolKey, Arc<Mutex<()>>>>,
    /// Each pool's filesystems as last listed, and when.
    pub(crate) members: Mutex<HashMap<PoolKey, (Vec<Filesystem>, Instant)>>,
    /// What each pool filesystem's last quota list promised (placement
    /// tries the fullest first, and skips those a volume would not fit).
    pub(crate) promised: Mutex<HashMap<VolumeId, i64>>,
    /// Pool filesystems being deleted: never placed on again.
    pub(crate) pruned: Mutex<BTreeSet<VolumeId>>,
    /// Pool filesystems this process has made ready (squash policy, and
    /// in node mode the controller's own access).
    pub(crate) ready: Mutex<BTreeSet<VolumeId>>,
    /// Pool filesystems this process made and has not yet made ready:
    /// their access policy is still the one they were made with.
    pub(crate) made: Mutex<BTreeSet<VolumeId>>,
    /// The Spaces of the pools used since the start, tended beside those
    /// the StorageClasses name.
    pub(crate) spaces: Mutex<BTreeSet<u64>>,
}

impl Pools {
    pub(crate) fn gate(&self, key: &PoolKey) -> Arc<Mutex<()>> {
        lock(&self.gates).entry(key.clone()).or_default().clone()
    }

    /// The Spaces pools were used in since the start.
    pub fn spaces(&self) -> BTreeSet<u64> {
        lock(&self.spaces).clone()
    }
}
