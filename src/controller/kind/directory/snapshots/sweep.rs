//! Parent snapshots nothing needs any more: the batch directory that
//! counts a parent snapshot's records is made before its POST and removed
//! with its last record, so a marked parent snapshot without one is
//! garbage (its last record was deleted, or a crash, a lost reply or a new
//! leader left it behind). Swept whenever a batch directory closes, so
//! the last DeleteSnapshot also deletes what earlier failures left.

use crate::controller::kind::directory::parent::records;
use crate::controller::state::controller::Controller;
use crate::handles::VolumeId;
use crate::linode::Status;
use crate::Error;
use std::path::Path;

/// Deletes the parent snapshots of `vol` (mounted at `root`) that no
/// batch directory holds. One the backend keeps (a clone of it still
/// exists) is left for a later sweep.
pub fn orphans(c: &Controller, vol: VolumeId, root: &Path) -> Result<(), Error> {
    let snapshots = match c.cloud.list_snapshots(vol.space, vol.filesystem) {
        Ok(all) => all,
        Err(Error::NotFound(_)) => return Ok(()),
        Err(e) => return Err(e),
    };
    for s in snapshots {
        if !c.marks.is_directory_snapshots(&s)
            || s.status == Status::Deleting
            || !records::is_batch_label(&s.label)
            || records::batch_exists(root, &s.label)?
        {
            continue;
        }
        match c.cloud.delete_snapshot(vol.space, vol.filesystem, s.id) {
            Ok(()) | Err(Error::NotFound(_)) => log::info!(
                "deleted NFS snapshot {vol}/{} (\"{}\"): no directory snapshot needs it",
                s.id,
                s.label
            ),
            Err(Error::FailedPrecondition(why)) => log::info!(
                "NFS snapshot {vol}/{} (\"{}\") is no longer needed but cannot be deleted yet: {why}",
                s.id,
                s.label
            ),
            Err(e) => return Err(e),
        }
    }
    Ok(())
}
