//! Snapshots of directory volumes. The backend snapshots whole
//! filesystems only, so a directory snapshot is a part of a Linode
//! snapshot of its shared parent (a "parent snapshot", marked
//! `tags::DIRECTORY_SNAPSHOTS`: never a whole-filesystem snapshot to
//! anyone) plus the driver's record of which directory it is for
//! (`records`); its handle names the parent, the parent snapshot and the
//! record's entry (`DirSnapshotId`). Requests for one parent share parent
//! snapshots (`batches`); a parent snapshot is deleted when the last
//! record that needs it is (`sweep` deletes those a crash left without
//! one). A record is the snapshot: a handle whose record is missing or
//! names another parent snapshot is NotFound, whatever the ids say.
//!
//! `size_bytes` is the source directory's quota (its capacity) when the
//! snapshot was asked for: the directory could not hold more, so a volume
//! of that size can always take a restore of it; 0 (unknown) for a
//! directory without a quota.

mod batches;
mod clones;
pub mod fills;
pub mod groups;
pub(super) mod sweep;

pub use clones::{for_clone, forget_clone};

use super::volume::inspect;
use super::volume::lookup::{existing_parent, find};
use crate::controller::kind::directory::parent::records::{self, Record, Shelf};
use crate::controller::kind::restorable::Restorable;
use crate::controller::state::controller::Controller;
use crate::controller::state::directory::batches::Member;
use crate::controller::state::lock_keys::{Doubt, Lock};
use crate::controller::state::tags;
use crate::controller::state::tags::Maker;
use crate::flow::{done, Step, Then};
use crate::handles::{DirName, DirSnapshotId, SubdirId, VolumeId};
use crate::linode::{Filesystem, Snapshot, Status};
use crate::proto::csi;
use crate::Error;
use protobuf::well_known_types::timestamp::Timestamp;
use protobuf::MessageField;
use std::path::PathBuf;
use std::sync::Arc;

/// The parent `vol` and where it is mounted here; NotFound when it is
/// gone, is no shared filesystem, or is none of this cluster's: a
/// snapshot id is the caller's to write, so the filesystem it names is
/// vouched for before anything mounts it.
pub(in crate::controller::kind::directory) fn mounted(
    c: &Controller,
    vol: VolumeId,
) -> Result<PathBuf, Error> {
    let fs = existing_parent(c, vol)?;
    vouch(c, &fs)?;
    let mtls = c.spaces.mtls_mode(vol.space)?;
    c.shares.root(&fs, mtls.as_ref())
}

/// Ok when parent `fs` is this cluster's to mount: mounted here before
/// (it held this cluster's volumes), a pool filesystem of this cluster (or
/// one made before clusters had identities), or named by a StorageClass.
/// NotFound for anything else, another cluster's pool filesystem and a
/// forged id's foreign filesystem alike.
fn vouch(c: &Controller, fs: &Filesystem) -> Result<(), Error> {
    let vol = VolumeId {
        space: fs.space_id,
        filesystem: fs.id,
    };
    let pool = tags::is_pool(fs);
    if pool && c.marks.maker(&fs.tags) == Maker::Other {
        return Err(not_ours(vol));
    }
    if pool || c.shares.known().contains(&vol) || inspect::parents(c)?.contains(&vol) {
        return Ok(());
    }
    Err(not_ours(vol))
}

fn not_ours(vol: VolumeId) -> Error {
    Error::NotFound(format!(
        "shared NFS filesystem {vol} is none of this cluster's: no StorageClass names it, it is no pool filesystem of this cluster and none of its volumes was mounted here"
    ))
}

/// The CSI view of the record of `id`, taken of `source`, with its parent
/// snapshot `parent`.
fn described(id: &DirSnapshotId, r: &Record, parent: &Snapshot) -> csi::Snapshot {
    let mut out = csi::Snapshot::new();
    out.snapshot_id = id.to_string();
    if let Some(source) = &r.source {
        out.source_volume_id = SubdirId {
            space: id.space,
            filesystem: id.filesystem,
            name: source.clone(),
        }
        .to_string();
    }
    out.size_bytes = r.size_bytes;
    out.creation_time = creation_time(parent);
    out.ready_to_use = parent.status == Status::Active;
    if let Some(group) = &r.group {
        out.group_snapshot_id = DirSnapshotId {
            entry: group.clone(),
            ..id.clone()
        }
        .to_string();
    }
    out
}

/// When parent snapshot `parent` was taken, for CSI's creation time of
/// its parts (which CSI requires): without one on the parent snapshot,
/// the moment of this answer is the closest to the truth.
fn creation_time(parent: &Snapshot) -> MessageField<Timestamp> {
    Some(Timestamp {
        seconds: parent
            .taken_at()
            .unwrap_or_else(|| Timestamp::now().seconds),
        ..Default::default()
    })
    .into()
}

/// Whether `s` is the parent snapshot a record of batch `batch` needs.
fn is_batch(c: &Controller, s: &Snapshot, batch: &str) -> bool {
    c.marks.is_directory_snapshots(s) && s.label == batch && s.status != Status::Deleting
}

/// The parent snapshot `snapshot` of `vol` if it is batch `batch`'s.
fn parent_snapshot(
    c: &Controller,
    vol: VolumeId,
    snapshot: u64,
    batch: &str,
) -> Result<Option<Snapshot>, Error> {
    match c.cloud.get_snapshot(vol.space, vol.filesystem, snapshot) {
        Ok(s) if is_batch(c, &s, batch) => Ok(Some(s)),
        Ok(_) | Err(Error::NotFound(_)) => Ok(None),
        Err(e) => Err(e),
    }
}

/// What a retry finds of a record whose batch it does not know the
/// outcome of: the batch's parent snapshot, if its POST landed.
fn landed(c: &Controller, vol: VolumeId, batch: &str) -> Result<Option<Snapshot>, Error> {
    Ok(c.cloud
        .list_snapshots(vol.space, vol.filesystem)?
        .into_iter()
        .find(|s| is_batch(c, s, batch)))
}

/// Where an earlier attempt of the record `found` (of `entry` on
/// `shelf`) left it: its parent snapshot once the POST landed (the record
/// then names it), the answer of its batch while that is under way here,
/// or `None` when it never will land: its reference is dropped, and a
/// new batch takes it again.
pub(super) fn resume(
    c: &Arc<Controller>,
    vol: VolumeId,
    root: &std::path::Path,
    shelf: Shelf,
    entry: &DirName,
    found: &Record,
) -> Result<Option<Step<Snapshot>>, Error> {
    if let Some(id) = found.snapshot {
        if let Some(s) = parent_snapshot(c, vol, id, &found.batch)? {
            return Ok(Some(done(s)));
        }
    } else if let Some(answer) = c.dir_snapshots.join(vol, &found.batch, shelf, entry) {
        return Ok(Some(batches::wait(answer)));
    } else if let Some(s) = landed(c, vol, &found.batch)? {
        records::write(
            root,
            shelf,
            entry,
            &Record {
                snapshot: Some(s.id),
                ..found.clone()
            },
        )?;
        c.in_doubt.clear(&doubt(vol, &found.batch));
        return Ok(Some(done(s)));
    } else {
        c.in_doubt.check(
            &doubt(vol, &found.batch),
            &format!("create NFS snapshot \"{}\"", found.batch),
        )?;
    }
    // Its parent snapshot is gone, or never was.
    records::release(root, &found.batch, shelf, entry)?;
    if records::close_batch(root, &found.batch)? {
        sweep::orphans(c, vol, root)?;
    }
    Ok(None)
}

/// The record a request for `entry` on `shelf` goes with, and where an
/// earlier attempt of the record `found` left it (see `resume`): `found`
/// while that attempt's parent snapshot stands or is coming, else a new
/// record from `fresh` (given what was found).
fn resumed(
    c: &Arc<Controller>,
    vol: VolumeId,
    root: &std::path::Path,
    shelf: Shelf,
    entry: &DirName,
    found: Option<Record>,
    fresh: impl FnOnce(Option<Record>) -> Result<Record, Error>,
) -> Result<(Record, Option<Step<Snapshot>>), Error> {
    let earlier = match &found {
        Some(found) => resume(c, vol, root, shelf, entry, found)?,
        None => None,
    };
    match (found, earlier) {
        (Some(found), Some(step)) => Ok((found, Some(step))),
        (found, _) => Ok((fresh(found)?, None)),
    }
}

/// `e`, with NotFound saying that `source` (a volume a snapshot is asked
/// of) is not found.
fn source_missing(source: &SubdirId) -> impl Fn(Error) -> Error + '_ {
    move |e| match e {
        Error::NotFound(_) => Error::NotFound(format!("source volume {source} not found")),
        e => e,
    }
}

/// What a snapshot of directory volume `source` records as its size: its
/// quota (see the header). NotFound when `source` is no volume of the
/// driver's.
fn capacity(c: &Controller, source: &SubdirId) -> Result<i64, Error> {
    let volume = find(c, source).map_err(source_missing(source))?;
    Ok(volume.quota.and_then(|q| q.max_capacity_bytes).unwrap_or(0))
}

/// The parent snapshot of a part of a parent snapshot of directory volume
/// `source`, recorded as `entry` on `shelf` under `csi_name`: the one an
/// earlier attempt took (once `check` accepts its record), or the next
/// batch's. With the record it is taken under.
fn take_part(
    c: &Arc<Controller>,
    source: &SubdirId,
    shelf: Shelf,
    entry: &DirName,
    csi_name: &str,
    check: impl FnOnce(&Record) -> Result<(), Error>,
) -> Result<(Record, Step<Snapshot>), Error> {
    let vol = source.parent();
    // From here on the next batch of the parent waits for this request.
    let arrival = batches::arrive(c, vol);
    let root = mounted(c, vol).map_err(source_missing(source))?;
    let found = records::read(&root, shelf, entry)?;
    if let Some(found) = &found {
        if !found.is_of(c.marks.cluster()) {
            return Err(Error::AlreadyExists(format!(
                "snapshot name {csi_name:?} maps to the record {entry} of another cluster's snapshot {:?}",
                found.csi_name
            )));
        }
        check(found)?;
    }
    let (record, earlier) = resumed(c, vol, &root, shelf, entry, found, |_| {
        // A new snapshot: only of a volume of the driver's.
        let size_bytes = capacity(c, source)?;
        Ok(Record::of_directory(
            csi_name.to_string(),
            source.name.clone(),
            size_bytes,
            None,
        ))
    })?;
    let parent = match earlier {
        Some(step) => step,
        None => arrival.request(
            root,
            vec![Member {
                shelf,
                entry: entry.clone(),
                record: record.clone(),
            }],
        ),
    };
    Ok((record, parent))
}

fn doubt(vol: VolumeId, batch: &str) -> Doubt {
    Doubt::Snapshot {
        source: vol,
        label: batch.to_string(),
    }
}

/// FailedPrecondition when parent snapshot `s` failed.
fn require_usable(s: &Snapshot) -> Result<(), Error> {
    if matches!(s.status, Status::Error | Status::Failed) {
        return Err(Error::FailedPrecondition(format!(
            "NFS snapshot {}/{}/{} of the shared filesystem is in status {}",
            s.space_id, s.filesystem_id, s.id, s.status
        )));
    }
    Ok(())
}

/// CreateSnapshot of directory volume `source`: a part of the next parent
/// snapshot, or what an earlier call of the same name made. AlreadyExists
/// when the name (or another that maps to the same entry) belongs to a
/// snapshot of another volume; NotFound when `source` is no volume.
pub fn create(
    c: &Arc<Controller>,
    source: SubdirId,
    req: &csi::CreateSnapshotRequest,
) -> Step<csi::Snapshot> {
    let vol = source.parent();
    let entry = DirName::for_name(&req.name);
    let guard = c.lock(Lock::DirSnapshot(vol, entry.clone()))?;
    let (record, parent) = take_part(c, &source, Shelf::Snapshots, &entry, &req.name, |found| {
        if found.csi_name != req.name {
            return Err(Error::AlreadyExists(format!(
                "snapshot name {:?} maps to the same record as the existing snapshot {:?}",
                req.name, found.csi_name
            )));
        }
        if found.source.as_ref() != Some(&source.name) {
            return Err(Error::AlreadyExists(format!(
                "snapshot {:?} already exists with a different source volume",
                req.name
            )));
        }
        Ok(())
    })?;
    parent.then(move |s| {
        drop(guard);
        require_usable(&s)?;
        let id = DirSnapshotId {
            space: vol.space,
            filesystem: vol.filesystem,
            snapshot: s.id,
            entry,
        };
        done(described(&id, &record, &s))
    })
}

/// The record of `id` on `shelf` and its parent snapshot: NotFound unless
/// both exist and the record names that parent snapshot.
pub(super) fn recorded(
    c: &Controller,
    id: &DirSnapshotId,
    shelf: Shelf,
) -> Result<(PathBuf, Record, Snapshot), Error> {
    let missing = || Error::NotFound(format!("snapshot {id} not found"));
    let root = mounted(c, id.parent()).map_err(|e| if e.is_not_found() { missing() } else { e })?;
    let record = records::read(&root, shelf, &id.entry)?
        .filter(|r| r.snapshot == Some(id.snapshot) && r.is_of(c.marks.cluster()))
        .ok_or_else(missing)?;
    let parent =
        parent_snapshot(c, id.parent(), id.snapshot, &record.batch)?.ok_or_else(missing)?;
    Ok((root, record, parent))
}

/// What a restore of directory snapshot `id` copies.
pub fn restorable(c: &Controller, id: &DirSnapshotId) -> Result<Restorable, Error> {
    let (_, record, snapshot) = recorded(c, id, Shelf::Snapshots)?;
    let Some(dir) = record.source else {
        return Err(Error::NotFound(format!("snapshot {id} not found")));
    };
    Ok(Restorable {
        snapshot,
        dir: Some(dir),
        size_bytes: record.size_bytes,
    })
}

/// GetSnapshot of a directory snapshot.
pub fn get(c: &Controller, id: &DirSnapshotId) -> Result<csi::Snapshot, Error> {
    let (_, record, parent) = recorded(c, id, Shelf::Snapshots)?;
    Ok(described(id, &record, &parent))
}

/// Drops the record of `entry` on `shelf` (of batch `batch`), and the
/// parent snapshot with it when nothing else needs that any more.
pub(super) fn forget(
    c: &Controller,
    vol: VolumeId,
    root: &std::path::Path,
    shelf: Shelf,
    entry: &DirName,
    batch: &str,
) -> Result<(), Error> {
    // The reference first: a record left without one (a crash between the
    // two) is found again by a retry, which finishes the job.
    records::release(root, batch, shelf, entry)?;
    records::remove(root, shelf, entry)?;
    if records::close_batch(root, batch)? {
        sweep::orphans(c, vol, root)?;
    }
    Ok(())
}

/// A delete that finds its record gone: an earlier attempt removed it and
/// may have failed to delete the parent snapshot after it, so whatever no
/// record needs any more is swept now.
pub(super) fn already_gone(
    c: &Controller,
    vol: VolumeId,
    root: &std::path::Path,
) -> Result<(), Error> {
    sweep::orphans(c, vol, root)
}

/// DeleteSnapshot of a directory snapshot: OK when nothing of it is left
/// (its parent is gone, its record is, or names another parent snapshot);
/// FailedPrecondition for a group's member, which goes with its group.
pub fn delete(c: &Controller, id: &DirSnapshotId) -> Result<(), Error> {
    let vol = id.parent();
    let _guard = c.lock(Lock::DirSnapshot(vol, id.entry.clone()))?;
    let root = match mounted(c, vol) {
        Ok(root) => root,
        Err(Error::NotFound(_)) => return Ok(()),
        Err(e) => return Err(e),
    };
    let Some(record) =
        records::read(&root, Shelf::Snapshots, &id.entry)?.filter(|r| r.is_of(c.marks.cluster()))
    else {
        return already_gone(c, vol, &root);
    };
    if record.snapshot != Some(id.snapshot) {
        return already_gone(c, vol, &root);
    }
    if let Some(group) = &record.group {
        return Err(Error::FailedPrecondition(format!(
            "snapshot {id} is a member of group snapshot {}; it is deleted with its group (DeleteVolumeGroupSnapshot)",
            DirSnapshotId {
                entry: group.clone(),
                ..id.clone()
            }
        )));
    }
    forget(c, vol, &root, Shelf::Snapshots, &id.entry, &record.batch)
}

/// The directory snapshots of parent `vol` that `keep` selects, described.
/// A parent that is gone or cannot be mounted has none (the latter with a
/// warning, as ListVolumes does).
pub fn of_parent(
    c: &Controller,
    vol: VolumeId,
    keep: impl Fn(&DirName, &Record) -> bool,
) -> Result<Vec<csi::Snapshot>, Error> {
    let root = match mounted(c, vol) {
        Ok(root) => root,
        Err(Error::NotFound(_)) => return Ok(Vec::new()),
        Err(e) => {
            log::warn!("ListSnapshots: the directory snapshots of {vol} are not listed: {e}");
            return Ok(Vec::new());
        }
    };
    let chosen: Vec<(DirName, Record)> = records::all(&root, Shelf::Snapshots)?
        .into_iter()
        .filter(|(entry, r)| r.snapshot.is_some() && r.is_of(c.marks.cluster()) && keep(entry, r))
        .collect();
    if chosen.is_empty() {
        return Ok(Vec::new());
    }
    let parents = match c.cloud.list_snapshots(vol.space, vol.filesystem) {
        Ok(all) => all,
        Err(Error::NotFound(_)) => return Ok(Vec::new()),
        Err(e) => return Err(e),
    };
    Ok(chosen
        .into_iter()
        .filter_map(|(entry, r)| {
            let id = r.snapshot?;
            let parent = parents
                .iter()
                .find(|s| s.id == id && is_batch(c, s, &r.batch))?;
            let handle = DirSnapshotId {
                space: vol.space,
                filesystem: vol.filesystem,
                snapshot: id,
                entry,
            };
            Some(described(&handle, &r, parent))
        })
        .collect())
}

/// ListSnapshots' directory snapshots: by id, by source volume, or every
/// one on the parents the controller knows (see `inspect::parents`).
/// Filters that name no directory snapshot give none.
pub fn list(c: &Controller, req: &csi::ListSnapshotsRequest) -> Result<Vec<csi::Snapshot>, Error> {
    if !req.snapshot_id.is_empty() {
        let Ok(id) = DirSnapshotId::parse(&req.snapshot_id) else {
            return Ok(Vec::new());
        };
        return match get(c, &id) {
            Ok(s)
                if req.source_volume_id.is_empty()
                    || s.source_volume_id == req.source_volume_id =>
            {
                Ok(vec![s])
            }
            Ok(_) | Err(Error::NotFound(_)) => Ok(Vec::new()),
            Err(e) => Err(e),
        };
    }
    if !req.source_volume_id.is_empty() {
        let Ok(source) = SubdirId::parse(&req.source_volume_id) else {
            return Ok(Vec::new());
        };
        return of_parent(c, source.parent(), |_, r| {
            r.source.as_ref() == Some(&source.name)
        });
    }
    let mut all = Vec::new();
    for vol in super::volume::inspect::parents(c)? {
        all.extend(of_parent(c, vol, |_, _| true)?);
    }
    Ok(all)
}
