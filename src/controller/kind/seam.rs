//! The one seam between the RPC handlers and the kinds of volume. A kind is
//! decided here, once per request: from the handle for a volume that
//! exists, from the class's typed parameters for a new one. Each
//! operation is one exhaustive `match` that hands the typed id to the
//! kind's own function (`filesystem`: a whole Linode NFS filesystem per
//! volume; `directory`: a quota-capped directory of a shared filesystem),
//! so the handlers name no kind, a kind is one place, and a third kind is
//! a compile error at every operation it must answer until it does.
//!
//! Why functions over an enum and not a trait object: the set of kinds is
//! closed and small, each kind's id is a different type (`VolumeId`,
//! `SubdirId`) that a trait would have to erase again, and the dispatch
//! costs one `match` with no boxing. Nothing here talks to the backend.

use super::directory;
use super::filesystem;
use super::publishing::{Target, Unpublish};
use crate::controller::request::answer::Described;
use crate::controller::request::create::CreateRequest;
use crate::controller::request::params::{Mutable, Params};
use crate::controller::state::controller::Controller;
use crate::flow::{done, Step};
use crate::handles::{DirSnapshotId, GroupSnapshotId, Kind, SnapshotHandle, VolumeHandle};
use crate::proto::csi;
use crate::Error;
use std::sync::Arc;

/// CreateVolume, of the kind the class names.
pub fn create(c: &Arc<Controller>, want: Arc<CreateRequest>) -> Step<csi::CreateVolumeResponse> {
    match want.params.kind() {
        Kind::Filesystem => filesystem::create(c, want),
        Kind::Directory => directory::create(c, want),
    }
}

/// DeleteVolume: OK when there is nothing left to delete.
pub fn delete(c: &Arc<Controller>, handle: VolumeHandle) -> Result<(), Error> {
    match handle {
        VolumeHandle::Filesystem(id) => filesystem::delete(c, id),
        VolumeHandle::Subdirectory(id) => directory::delete(c, id),
    }
}

/// The volume as it is now (ControllerGetVolume): NotFound when it is not.
pub fn describe(c: &Controller, handle: &VolumeHandle) -> Result<Described, Error> {
    match handle {
        VolumeHandle::Filesystem(id) => filesystem::describe(c, *id),
        VolumeHandle::Subdirectory(id) => directory::describe(c, id),
    }
}

/// Why ValidateVolumeCapabilities cannot confirm `req` for the volume, or
/// `None` when it can; NotFound when there is no volume.
pub fn validate(
    c: &Controller,
    handle: &VolumeHandle,
    req: &csi::ValidateVolumeCapabilitiesRequest,
) -> Result<Option<String>, Error> {
    match handle {
        VolumeHandle::Filesystem(id) => filesystem::validate(c, *id, req),
        VolumeHandle::Subdirectory(id) => directory::validate(c, id, req),
    }
}

/// Every volume of both kinds, in handle order.
pub fn list(c: &Controller) -> Result<Vec<Described>, Error> {
    let mut all = filesystem::list(c)?;
    all.extend(directory::list(c)?);
    all.sort_by(|a, b| a.handle.cmp(&b.handle));
    Ok(all)
}

/// What a new volume of the class `params` (every Space the token sees,
/// without one) can still be given.
pub fn capacity(c: &Controller, params: Option<&Params>) -> Result<i64, Error> {
    match params.map(Params::kind) {
        None => filesystem::capacity(c, None),
        Some(Kind::Filesystem) => filesystem::capacity(c, params.map(|p| &p.space)),
        Some(Kind::Directory) => directory::capacity(c, params.expect("a class")),
    }
}

/// ControllerModifyVolume with parsed, non-empty mutable parameters.
pub fn modify(c: &Arc<Controller>, handle: VolumeHandle, mutable: Mutable) -> Step<()> {
    match handle {
        VolumeHandle::Filesystem(id) => filesystem::modify(c, id, mutable),
        VolumeHandle::Subdirectory(id) => directory::modify(c, id, mutable),
    }
}

/// ControllerExpandVolume to `want` bytes: the capacity now in force.
pub fn expand(c: &Arc<Controller>, handle: VolumeHandle, want: i64) -> Step<i64> {
    match handle {
        VolumeHandle::Filesystem(id) => filesystem::expand(id),
        VolumeHandle::Subdirectory(id) => directory::expand(c, id, want),
    }
}

/// CreateSnapshot of the volume `source`.
pub fn snapshot(
    c: &Arc<Controller>,
    source: VolumeHandle,
    req: &csi::CreateSnapshotRequest,
) -> Step<csi::Snapshot> {
    match source {
        VolumeHandle::Filesystem(id) => done(filesystem::snapshots::create(c, id, req)?),
        VolumeHandle::Subdirectory(id) => directory::snapshots::create(c, id, req),
    }
}

/// GetSnapshot.
pub fn get_snapshot(c: &Controller, id: &SnapshotHandle) -> Result<csi::Snapshot, Error> {
    match id {
        SnapshotHandle::Filesystem(id) => filesystem::snapshots::get(c, *id),
        SnapshotHandle::Directory(id) => directory::snapshots::get(c, id),
    }
}

/// DeleteSnapshot.
pub fn delete_snapshot(c: &Controller, id: &SnapshotHandle) -> Result<(), Error> {
    match id {
        SnapshotHandle::Filesystem(id) => filesystem::snapshots::delete(c, *id),
        SnapshotHandle::Directory(id) => directory::snapshots::delete(c, id),
    }
}

/// ListSnapshots' matches of both kinds: the whole filesystems' in id
/// order, then the directories'.
pub fn list_snapshots(
    c: &Controller,
    req: &csi::ListSnapshotsRequest,
) -> Result<Vec<csi::Snapshot>, Error> {
    let mut all = filesystem::snapshots::list(c, req)?;
    let mut dirs = directory::snapshots::list(c, req)?;
    dirs.sort_by_cached_key(|s| DirSnapshotId::parse(&s.snapshot_id).ok());
    all.extend(dirs);
    Ok(all)
}

/// CreateVolumeGroupSnapshot of `members` (distinct): only directory
/// volumes of one shared parent can be snapshotted at one instant.
pub fn group_snapshot(
    c: &Arc<Controller>,
    members: Vec<VolumeHandle>,
    name: &str,
) -> Step<csi::VolumeGroupSnapshot> {
    let mut dirs = Vec::with_capacity(members.len());
    for member in members {
        match member {
            VolumeHandle::Subdirectory(id) => dirs.push(id),
            VolumeHandle::Filesystem(id) => {
                return Err(Error::InvalidArgument(format!(
                    "volume {id} is a whole filesystem: Linode snapshots each filesystem on its own, never several at one instant, so a group of them would not be crash-consistent; only directory volumes of one shared filesystem form a group"
                )))
            }
        }
    }
    let parent = dirs[0].parent();
    if let Some(other) = dirs.iter().find(|d| d.parent() != parent) {
        return Err(Error::InvalidArgument(format!(
            "volumes {} and {other} are on different shared filesystems: Linode cannot snapshot two filesystems at one instant, so a group of them would not be crash-consistent",
            dirs[0]
        )));
    }
    directory::snapshots::groups::create(c, parent, dirs, name)
}

/// GetVolumeGroupSnapshot.
pub fn get_group(c: &Controller, id: &GroupSnapshotId) -> Result<csi::VolumeGroupSnapshot, Error> {
    directory::snapshots::groups::get(c, id)
}

/// DeleteVolumeGroupSnapshot.
pub fn delete_group(
    c: &Controller,
    id: &GroupSnapshotId,
    snapshot_ids: &[String],
) -> Result<(), Error> {
    directory::snapshots::groups::delete(c, id, snapshot_ids)
}

/// Whose ACL a ControllerPublishVolume of the volume changes; NotFound
/// (before any ACL is touched) when there is no such volume.
pub fn publish_target(c: &Controller, handle: &VolumeHandle) -> Result<Target, Error> {
    match handle {
        VolumeHandle::Filesystem(id) => filesystem::publish_target(c, *id),
        VolumeHandle::Subdirectory(id) => directory::publish_target(c, id),
    }
}

/// What a ControllerUnpublishVolume of the volume from `node` does.
pub fn unpublish(c: &Controller, handle: &VolumeHandle, node: u64) -> Result<Unpublish, Error> {
    match handle {
        VolumeHandle::Filesystem(id) => filesystem::unpublish(c, *id),
        VolumeHandle::Subdirectory(id) => directory::unpublish(c, id, node),
    }
}
