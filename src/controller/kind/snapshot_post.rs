//! The one POST of a Linode snapshot, for both kinds (a volume's own, a
//! clone's copy, a shared parent's batch of directory snapshots): never
//! sent while an earlier POST of the label may still land, and a reply
//! that was lost or refused as a duplicate is looked up before it fails.

use crate::controller::state::controller::Controller;
use crate::controller::state::lock_keys::Doubt;
use crate::handles::VolumeId;
use crate::linode::{Snapshot, WriteError};
use crate::Error;

/// POSTs snapshot `label` of `source` with `tags`, unless an earlier POST
/// of it may still land (Unavailable, see `in_doubt`). A POST refused as a
/// duplicate (409) or whose reply was lost is looked up again with `find`
/// before it fails; one that may have been applied puts the label in doubt.
pub fn post_snapshot(
    c: &Controller,
    source: VolumeId,
    label: &str,
    tags: &[String],
    find: impl Fn() -> Result<Option<Snapshot>, Error>,
) -> Result<Snapshot, Error> {
    let doubt = Doubt::Snapshot {
        source,
        label: label.to_string(),
    };
    c.in_doubt
        .check(&doubt, &format!("create NFS snapshot \"{label}\""))?;
    match c
        .cloud
        .create_snapshot(source.space, source.filesystem, label, tags)
    {
        Ok(s) => Ok(s),
        Err(
            failed @ WriteError {
                error: Error::FailedPrecondition(_) | Error::Unavailable(_) | Error::Internal(_),
                ..
            },
        ) => c.in_doubt.found_or(&doubt, failed, find),
        Err(e) => Err(e.error),
    }
}
