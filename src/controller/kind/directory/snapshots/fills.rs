//! What a job filling a directory volume from a directory snapshot holds
//! of it: a reference in the batch directory of the parent snapshot it
//! copies (`records::hold_fill`), taken before the job reads anything and
//! dropped when it ends, so a DeleteSnapshot meanwhile answers at once and
//! removes the record while the parent snapshot stays until the job is
//! done. On the parent's own files, so it survives a restart.

use super::{mounted, sweep};
use crate::controller::kind::directory::parent::records;
use crate::controller::state::controller::Controller;
use crate::handles::{SubdirId, VolumeId};
use crate::Error;

/// Holds batch `batch` of parent `vol` for the fill of `fill`.
pub fn hold(c: &Controller, vol: VolumeId, batch: &str, fill: &SubdirId) -> Result<(), Error> {
    let root = mounted(c, vol)?;
    records::hold_fill(&root, batch, fill)
}

/// Lets go of whatever the fill of `fill` holds on parent `vol`, and
/// deletes the parent snapshots nothing needs any more. A parent that is
/// gone took its snapshots with it.
pub fn release(c: &Controller, vol: VolumeId, fill: &SubdirId) -> Result<(), Error> {
    let root = match mounted(c, vol) {
        Ok(root) => root,
        Err(Error::NotFound(_)) => return Ok(()),
        Err(e) => return Err(e),
    };
    if !records::release_fill(&root, fill)?.is_empty() {
        sweep::orphans(c, vol, &root)?;
    }
    Ok(())
}
