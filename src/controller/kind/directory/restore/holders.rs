//! Which restores of this process hold each snapshot's temporary clone,
//! the one lookup or POST of a clone at a time, and which of a snapshot's
//! clones failed while held: state only, kept by
//! the controller; `temporary` makes, lends and deletes the clones.

use crate::handles::SnapshotId;
use std::collections::{BTreeSet, HashMap};
use std::sync::{Arc, Mutex};

/// The restores of this process that hold each snapshot's clone.
#[derive(Default)]
pub struct Temporaries {
    pub(super) users: Mutex<HashMap<SnapshotId, usize>>,
    /// One lookup or POST of a snapshot's clone at a time.
    pub(super) making: Mutex<HashMap<SnapshotId, Arc<Mutex<()>>>>,
    /// The clones of each held snapshot that failed or vanished (their
    /// filesystem ids), forgotten with the last hold.
    pub(super) failed: Mutex<HashMap<SnapshotId, BTreeSet<u64>>>,
}
