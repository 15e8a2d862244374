//! PVC-from-PVC clones. The API clones only from snapshots, so a clone is
//! copied through a snapshot of its source taken for the purpose (the
//! "copy"): labelled after the new volume, so a retry finds it, and tagged
//! so that it is never mistaken for a VolumeSnapshot. Once the clone is
//! active the copy is deleted; a backend that refuses while the clone
//! exists keeps it, and the clone's tags say so, so that deleting the
//! clone's volume deletes the copy too. Nothing here decides codes.

use crate::controller::kind::snapshot_post::post_snapshot;
use crate::controller::state::controller::Controller;
use crate::controller::state::lock_keys::Doubt;
use crate::controller::state::tags;
use crate::flow::{done, Step};
use crate::handles::{label_for, SnapshotId, VolumeId};
use crate::linode::{Filesystem, Snapshot, Status};
use crate::Error;
use std::sync::Arc;

/// The copy's label on the source filesystem.
fn copy_label(clone_label: &str) -> String {
    label_for(&format!("csi-clone-{clone_label}"))
}

fn is_copy(s: &Snapshot, label: &str) -> bool {
    s.label == label
        && s.status != Status::Deleting
        && s.tags.iter().any(|t| t == tags::CLONE_SNAPSHOT)
}

fn snapshot_id(s: &Snapshot) -> SnapshotId {
    SnapshotId {
        space: s.space_id,
        filesystem: s.filesystem_id,
        snapshot: s.id,
    }
}

/// The source volume of a clone, NotFound when it does not exist,
/// FailedPrecondition when it is not a volume of this driver.
pub(super) fn source_volume(c: &Controller, source: VolumeId) -> Result<Filesystem, Error> {
    let missing = || Error::NotFound(format!("source volume {source} was not found"));
    match c.cloud.get_filesystem(source.space, source.filesystem) {
        Ok(fs) if fs.status == Status::Deleting => Err(missing()),
        Ok(fs) => c.marks.require_volume(&fs, "cloned").map(|()| fs),
        Err(Error::NotFound(_)) => Err(missing()),
        Err(e) => Err(e),
    }
}

/// The copy of `fs` for the clone labelled `clone_label`, once active:
/// taken now, or found from an earlier attempt.
pub(super) fn copy_of(c: &Arc<Controller>, fs: &Filesystem, clone_label: &str) -> Step<SnapshotId> {
    let source = VolumeId {
        space: fs.space_id,
        filesystem: fs.id,
    };
    let label = copy_label(clone_label);
    let find = || -> Result<Option<Snapshot>, Error> {
        let snaps = c.cloud.list_snapshots(fs.space_id, fs.id)?;
        if let Some(other) = snaps
            .iter()
            .find(|s| s.label == label && s.status != Status::Deleting && !is_copy(s, &label))
        {
            return Err(Error::AlreadyExists(format!(
                "NFS snapshot {} of source volume {source} already carries the label \"{label}\" a clone needs",
                other.id
            )));
        }
        Ok(snaps.into_iter().find(|s| is_copy(s, &label)))
    };
    let doubt = Doubt::Snapshot {
        source,
        label: label.clone(),
    };
    let copy = match find()? {
        Some(copy) => {
            c.in_doubt.clear(&doubt);
            copy
        }
        None => post_snapshot(
            c,
            source,
            &label,
            &c.marks.with_cluster(&[tags::CLONE_SNAPSHOT]),
            find,
        )?,
    };
    c.poller.snapshot(copy, |copy| done(snapshot_id(&copy)))
}

/// Deletes the copy `clone` was made through, now that the clone is
/// active; when the backend keeps it while the clone exists, records it on
/// the clone instead. Runs on every CreateVolume of a clone, first or
/// retried, so a copy left by an attempt that died is released too.
pub(super) fn release_copy(
    c: &Arc<Controller>,
    source: VolumeId,
    clone_label: &str,
    clone: Filesystem,
) -> Step<Filesystem> {
    let label = copy_label(clone_label);
    let copy = match c.cloud.list_snapshots(source.space, source.filesystem) {
        Ok(snaps) => snaps.into_iter().find(|s| is_copy(s, &label)),
        Err(Error::NotFound(_)) => None,
        Err(e) => return Err(e),
    };
    let Some(copy) = copy else {
        return done(clone);
    };
    let id = snapshot_id(&copy);
    match c
        .cloud
        .delete_snapshot(id.space, id.filesystem, id.snapshot)
    {
        Ok(()) | Err(Error::NotFound(_)) => done(clone),
        Err(Error::FailedPrecondition(why)) => {
            let kept = tags::kept_snapshot(&id);
            if clone.tags.contains(&kept) {
                return done(clone);
            }
            log::info!(
                "keeping NFS snapshot {id} until clone {} is deleted: {why}",
                clone.id
            );
            let mut all = clone.tags.clone();
            all.push(kept);
            let clone = c
                .cloud
                .update_filesystem_tags(clone.space_id, clone.id, &all)?;
            done(clone)
        }
        Err(e) => Err(e),
    }
}

/// Deletes the copy of a clone that could not be made.
pub(super) fn forget_copy(
    c: &Controller,
    source: VolumeId,
    clone_label: &str,
) -> Result<(), Error> {
    let label = copy_label(clone_label);
    let snaps = match c.cloud.list_snapshots(source.space, source.filesystem) {
        Ok(snaps) => snaps,
        Err(Error::NotFound(_)) => return Ok(()),
        Err(e) => return Err(e),
    };
    for copy in snaps.iter().filter(|s| is_copy(s, &label)) {
        match c
            .cloud
            .delete_snapshot(copy.space_id, copy.filesystem_id, copy.id)
        {
            Ok(()) | Err(Error::NotFound(_)) => {}
            Err(e) => return Err(e),
        }
    }
    Ok(())
}

/// After the clone `fs` is deleted: its kept copy goes too.
pub(super) fn delete_kept_copy(c: &Controller, fs: &Filesystem) -> Result<(), Error> {
    let Some(copy) = tags::kept_snapshot_of(&fs.tags) else {
        return Ok(());
    };
    match c
        .cloud
        .delete_snapshot(copy.space, copy.filesystem, copy.snapshot)
    {
        Ok(()) | Err(Error::NotFound(_)) => Ok(()),
        // The backend still counts the deleting clone; the sidecar retries
        // DeleteVolume, which finds the deleting clone and tries again.
        Err(Error::FailedPrecondition(why)) => Err(Error::Unavailable(format!(
            "NFS snapshot {copy}, which clone {} was copied through, cannot be deleted yet: {why}",
            fs.id
        ))),
        Err(e) => Err(e),
    }
}
