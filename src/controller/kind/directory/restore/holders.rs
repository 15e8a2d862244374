//! Which restores of this process hold each snapshot's temporary clone,
//! and the one lookup or POST of a clone at a time: state only, kept by
//! the controller; `temporary` makes, lends and deletes the clones.

use crate::handles::SnapshotId;
use std::collections::HashMap;
use std::sync::{Arc, Mutex};

/// The restores of this process that hold each snapshot's clone.
#[derive(Default)]
pub struct Temporaries {
    pub(super) users: Mutex<HashMap<SnapshotId, usize>>,
    /// One lookup or POST of a snapshot's clone at a time.
    pub(super) making: Mutex<HashMap<SnapshotId, Arc<Mutex<()>>>>,
}
