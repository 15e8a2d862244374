//! Pools of shared filesystems the driver runs for `subdirectory` classes
//! that name `shared-filesystem-pool`: it makes the pool's filesystems
//! itself (`grow`), tagged as the pool's and never as volumes, places each
//! new volume on the fullest one with room (`place`), and in the
//! background keeps the class's spares ready and deletes empty ones after
//! a grace period (`tend`). Whatever it decides is read back from Linode
//! (the pool's tags, an empty filesystem's `empty since` tag) and the
//! filesystems' own files, never from memory alone, so kill -9 and a new
//! leader lose nothing; memory only orders the search (`Pools`' hints) and
//! keeps one decision per pool at a time. The volumes themselves are made,
//! grown and deleted as any directory volume: a pool only chooses parents.

mod emptiness;
mod grow;
mod members;
mod place;
mod tend;

pub use place::{capacity, place, Placed, Seen};
pub use tend::{tend, TendPolicy};

use crate::handles::VolumeId;
use crate::linode::Filesystem;
use crate::mutex::lock;
use std::collections::{BTreeSet, HashMap};
use std::sync::{Arc, Mutex};
use std::time::Instant;

/// A pool, by its Space and name.
type PoolKey = (u64, String);

/// What the controller remembers of its pools between calls.
#[derive(Default)]
pub struct Pools {
    /// One growth or prune decision per pool at a time, and the claims
    /// that placements make against prunes.
    gates: Mutex<HashMap<PoolKey, Arc<Mutex<()>>>>,
    /// Each pool's filesystems as last listed, and when.
    members: Mutex<HashMap<PoolKey, (Vec<Filesystem>, Instant)>>,
    /// What each pool filesystem's last quota list promised (placement
    /// tries the fullest first, and skips those a volume would not fit).
    promised: Mutex<HashMap<VolumeId, i64>>,
    /// Pool filesystems being deleted: never placed on again.
    pruned: Mutex<BTreeSet<VolumeId>>,
    /// Pool filesystems this process has made ready (squash policy, and
    /// in node mode the controller's own access).
    ready: Mutex<BTreeSet<VolumeId>>,
    /// Pool filesystems this process made and has not yet made ready:
    /// their access policy is still the one they were made with.
    made: Mutex<BTreeSet<VolumeId>>,
    /// The Spaces of the pools used since the start, tended beside those
    /// the StorageClasses name.
    spaces: Mutex<BTreeSet<u64>>,
}

impl Pools {
    fn gate(&self, key: &PoolKey) -> Arc<Mutex<()>> {
        lock(&self.gates).entry(key.clone()).or_default().clone()
    }

    /// The Spaces pools were used in since the start.
    pub fn spaces(&self) -> BTreeSet<u64> {
        lock(&self.spaces).clone()
    }
}
