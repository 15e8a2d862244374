//! Which restores of this process hold each snapshot's temporary clone, the
//! one lookup or POST of a clone at a time, which of a snapshot's clones
//! failed while held, and a job's hold itself: state only, kept by the
//! controller; `kind::directory::restore::temporary` makes, lends and
//! deletes the clones, and hands each hold what lets go of it.

use crate::handles::SnapshotId;
use std::collections::{BTreeSet, HashMap};
use std::sync::{Arc, Mutex};

/// The restores of this process that hold each snapshot's clone.
#[derive(Default)]
pub struct Temporaries {
    pub(crate) users: Mutex<HashMap<SnapshotId, usize>>,
    /// One lookup or POST of a snapshot's clone at a time.
    pub(crate) making: Mutex<HashMap<SnapshotId, Arc<Mutex<()>>>>,
    /// The clones of each held snapshot that failed or vanished (their
    /// filesystem ids), forgotten with the last hold.
    pub(crate) failed: Mutex<HashMap<SnapshotId, BTreeSet<u64>>>,
}

/// What lets go of a hold: told whether the clone may go with it.
type Release = Box<dyn FnOnce(bool) + Send>;

/// One job's hold on a snapshot's clone: the last one let go deletes it,
/// unless it was left for the next process (`leave`).
pub struct Hold {
    snapshot: SnapshotId,
    release: Option<Release>,
}

impl Hold {
    /// The hold on the clone of `snapshot` that `release` lets go of.
    pub(crate) fn new(snapshot: SnapshotId, release: Release) -> Hold {
        Hold {
            snapshot,
            release: Some(release),
        }
    }

    /// The snapshot whose clone it holds.
    pub fn snapshot(&self) -> SnapshotId {
        self.snapshot
    }

    /// Lets go of the clone without deleting it: the job ends unfinished
    /// (the process stopping, the lease lost) and the next process, or the
    /// new leader, adopts the clone where it is, `creating` or not.
    pub fn leave(mut self) {
        if let Some(release) = self.release.take() {
            release(false);
        }
    }
}

impl Drop for Hold {
    fn drop(&mut self) {
        if let Some(release) = self.release.take() {
            release(true);
        }
    }
}
