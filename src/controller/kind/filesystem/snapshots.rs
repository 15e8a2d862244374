//! Snapshots of whole-filesystem volumes: create (idempotent by label, one
//! name per plugin), delete, get, and the snapshots a listing matches. Creation does not wait for `active`:
//! the snapshotter calls again until `ready_to_use`, so no worker is held.
//! A snapshot in `deleting` is already gone as far as CSI is concerned, and
//! the copies clones are made through (`clone`) are not VolumeSnapshots.
//! Only the driver's own snapshots are CSI snapshots: it takes them of its
//! volumes only, marks each (`tags::MANAGED`), and counts one taken before
//! it marked them as its own when its filesystem is one of its volumes.
//! Any other (one an admin took of a shared parent, say, which holds every
//! tenant's data) is never listed, returned or restored (NotFound) and
//! never deleted (FailedPrecondition).

use crate::controller::kind::snapshot_post::post_snapshot;
use crate::controller::state::controller::Controller;
use crate::controller::state::lock_keys::{Doubt, Lock};
use crate::controller::state::tags;
use crate::controller::state::tags::Maker;
use crate::handles::{label_for, SnapshotId, VolumeId};
use crate::linode::{Filesystem, Snapshot, Status};
use crate::proto::csi;
use crate::Error;
use protobuf::well_known_types::timestamp::Timestamp;

/// A VolumeSnapshot: not on its way out (DeleteSnapshot returns before the
/// backend lets go of a snapshot, and CSI expects it gone from lists and
/// free for reuse at once), and not a clone's copy.
fn is_live(s: &Snapshot) -> bool {
    s.status != Status::Deleting
        && !s.tags.iter().any(|t| t == tags::CLONE_SNAPSHOT)
        && !tags::is_directory_snapshots(s)
}

fn id_of(s: &Snapshot) -> SnapshotId {
    SnapshotId {
        space: s.space_id,
        filesystem: s.filesystem_id,
        snapshot: s.id,
    }
}

fn snapshot_of(s: &Snapshot, seconds: i64) -> csi::Snapshot {
    let id = id_of(s);
    let mut out = csi::Snapshot::new();
    out.snapshot_id = id.to_string();
    out.source_volume_id = id.volume().to_string();
    out.size_bytes = s.size_bytes.unwrap_or(0);
    out.creation_time = Some(Timestamp {
        seconds,
        ..Default::default()
    })
    .into();
    out.ready_to_use = s.status == Status::Active;
    out
}

/// Whether `s` is a snapshot the driver took of one of its volumes.
fn is_ours(c: &Controller, s: &Snapshot) -> Result<bool, Error> {
    if c.marks.maker(&s.tags) == Maker::Other {
        return Ok(false);
    }
    if c.marks.is_marked_snapshot(s) {
        return Ok(true);
    }
    match c.cloud.get_filesystem(s.space_id, s.filesystem_id) {
        Ok(fs) => Ok(c.marks.is_volume(&fs)),
        Err(Error::NotFound(_)) => Ok(false),
        Err(e) => Err(e),
    }
}

/// The live snapshot `id` of the driver's, NotFound for any other.
pub fn owned(c: &Controller, id: SnapshotId) -> Result<Snapshot, Error> {
    let missing = || Error::NotFound(format!("snapshot {id} not found"));
    let snap = c
        .cloud
        .get_snapshot(id.space, id.filesystem, id.snapshot)
        .map_err(|e| if e.is_not_found() { missing() } else { e })?;
    if is_live(&snap) && is_ours(c, &snap)? {
        Ok(snap)
    } else {
        Err(missing())
    }
}

/// NotFound or FailedPrecondition unless `source` is one of the driver's
/// volumes (and not on its way out).
fn require_volume(c: &Controller, source: VolumeId) -> Result<(), Error> {
    match c.cloud.get_filesystem(source.space, source.filesystem) {
        Ok(fs) if fs.status != Status::Deleting => c.marks.require_volume(&fs, "snapshotted"),
        Ok(_) | Err(Error::NotFound(_)) => {
            Err(Error::NotFound(format!("source volume {source} not found")))
        }
        Err(e) => Err(e),
    }
}

/// The driver's volumes in `space`, those being deleted aside.
fn volumes_in(c: &Controller, space: u64) -> Result<Vec<Filesystem>, Error> {
    Ok(c.cloud
        .find_filesystems_by_tag(space, tags::MANAGED)?
        .into_iter()
        .filter(|fs| fs.status != Status::Deleting && c.marks.is_volume(fs))
        .collect())
}

/// The snapshot named `label` anywhere in the space other than on `source`:
/// CSI names are unique per plugin, while the backend only keeps labels
/// unique per filesystem.
fn taken_elsewhere(
    c: &Controller,
    source: VolumeId,
    label: &str,
    volumes: &[Filesystem],
) -> Result<Option<Snapshot>, Error> {
    for fs in volumes.iter().filter(|fs| fs.id != source.filesystem) {
        match c.cloud.list_snapshots(source.space, fs.id) {
            Ok(snaps) => {
                if let Some(s) = snaps.into_iter().find(|s| s.label == label && is_live(s)) {
                    return Ok(Some(s));
                }
            }
            Err(Error::NotFound(_)) => {}
            Err(e) => return Err(e),
        }
    }
    Ok(None)
}

/// CreateSnapshot of volume `source`. AlreadyExists when the name belongs
/// to a snapshot of another volume; NotFound for an unknown source,
/// FailedPrecondition for a filesystem that is not one of the driver's
/// volumes; a repeat returns the same snapshot.
pub fn create(
    c: &Controller,
    source: VolumeId,
    req: &csi::CreateSnapshotRequest,
) -> Result<csi::Snapshot, Error> {
    let _guard = c.lock(Lock::Snapshot(source))?;
    let label = label_for(&req.name);
    let mine = |s: &Snapshot| s.label == label && is_live(s);
    let existing = c
        .cloud
        .list_snapshots(source.space, source.filesystem)?
        .into_iter()
        .find(mine);
    let doubt = Doubt::Snapshot {
        source,
        label: label.clone(),
    };
    let snapshot = match existing {
        // Taken by an earlier call: the driver marked it, or (taken before
        // it marked snapshots) its filesystem says whether it is ours.
        Some(s) => {
            if !c.marks.is_marked_snapshot(&s) {
                require_volume(c, source)?;
            }
            c.in_doubt.clear(&doubt);
            s
        }
        None => {
            // One list of the Space's volumes says whether the source is
            // one, and whether the name is taken on another.
            let volumes = volumes_in(c, source.space)?;
            if !volumes.iter().any(|fs| fs.id == source.filesystem) {
                require_volume(c, source)?;
            }
            if taken_elsewhere(c, source, &label, &volumes)?.is_some() {
                return Err(Error::AlreadyExists(format!(
                    "NFS snapshot \"{label}\" already exists with a different source volume"
                )));
            }
            post_snapshot(
                c,
                source,
                &label,
                &c.marks.with_cluster(&[tags::MANAGED]),
                || {
                    Ok(c.cloud
                        .list_snapshots(source.space, source.filesystem)?
                        .into_iter()
                        .find(mine))
                },
            )?
        }
    };
    if matches!(snapshot.status, Status::Error | Status::Failed) {
        return Err(Error::FailedPrecondition(format!(
            "NFS snapshot {} is in status {}",
            snapshot.id, snapshot.status
        )));
    }
    // CSI requires a creation time; the moment of this answer is the
    // closest to the truth a snapshot without timestamps allows.
    let seconds = snapshot.taken_at().unwrap_or_else(|| {
        log::warn!(
            "NFS snapshot {} has no usable created or updated time; reporting the current time",
            id_of(&snapshot)
        );
        Timestamp::now().seconds
    });
    Ok(snapshot_of(&snapshot, seconds))
}

/// GetSnapshot: NotFound for a snapshot that is gone or going, a clone's
/// copy, or one the driver did not take.
pub fn get(c: &Controller, id: SnapshotId) -> Result<csi::Snapshot, Error> {
    let snap = owned(c, id)?;
    let seconds = snap.taken_at().unwrap_or_else(|| Timestamp::now().seconds);
    Ok(snapshot_of(&snap, seconds))
}

/// DeleteSnapshot. A snapshot that is gone is OK; a locked snapshot, or
/// one the driver did not take, is FailedPrecondition.
pub fn delete(c: &Controller, id: SnapshotId) -> Result<(), Error> {
    let snap = match c.cloud.get_snapshot(id.space, id.filesystem, id.snapshot) {
        Ok(snap) => snap,
        Err(Error::NotFound(_)) => return Ok(()),
        Err(e) => return Err(e),
    };
    // Another cluster's snapshot does not exist here: deleting it is done.
    if c.marks.maker(&snap.tags) == Maker::Other {
        log::info!("DeleteSnapshot {id}: another cluster's snapshot; left untouched");
        return Ok(());
    }
    if !is_ours(c, &snap)? {
        return Err(Error::FailedPrecondition(format!(
            "NFS snapshot {id} was not taken by this driver of one of its volumes; it is left untouched"
        )));
    }
    match c
        .cloud
        .delete_snapshot(id.space, id.filesystem, id.snapshot)
    {
        Ok(()) | Err(Error::NotFound(_)) => Ok(()),
        Err(e) => Err(e),
    }
}

/// The driver's snapshots `req` asks for (by id, by source volume, or
/// all), in id order. Filters that name nothing give none; a snapshot
/// without any usable time is left out (CSI requires one) rather than
/// failing the whole list.
pub fn list(c: &Controller, req: &csi::ListSnapshotsRequest) -> Result<Vec<csi::Snapshot>, Error> {
    let mut found = matching(c, req)?;
    found.sort_by_key(|s| (s.space_id, s.filesystem_id, s.id));
    Ok(found
        .iter()
        .filter_map(|s| match s.taken_at() {
            Some(seconds) => Some(snapshot_of(s, seconds)),
            None => {
                log::warn!(
                    "ListSnapshots: leaving out NFS snapshot {}: it has no usable created or updated time",
                    id_of(s)
                );
                None
            }
        })
        .collect())
}

/// The live snapshots of a list; a filesystem that is gone has none.
fn live_or_none(r: Result<Vec<Snapshot>, Error>) -> Result<Vec<Snapshot>, Error> {
    match r {
        Ok(snaps) => Ok(snaps.into_iter().filter(is_live).collect()),
        Err(Error::NotFound(_)) => Ok(Vec::new()),
        Err(e) => Err(e),
    }
}

fn matching(c: &Controller, req: &csi::ListSnapshotsRequest) -> Result<Vec<Snapshot>, Error> {
    if !req.snapshot_id.is_empty() {
        let Ok(id) = SnapshotId::parse(&req.snapshot_id) else {
            return Ok(Vec::new());
        };
        if !req.source_volume_id.is_empty() && req.source_volume_id != id.volume().to_string() {
            return Ok(Vec::new());
        }
        return match owned(c, id) {
            Ok(snap) => Ok(vec![snap]),
            Err(Error::NotFound(_)) => Ok(Vec::new()),
            Err(e) => Err(e),
        };
    }
    if !req.source_volume_id.is_empty() {
        let Ok(vol) = VolumeId::parse(&req.source_volume_id) else {
            return Ok(Vec::new());
        };
        match c.cloud.get_filesystem(vol.space, vol.filesystem) {
            Ok(fs) if c.marks.is_volume(&fs) => {}
            Ok(_) | Err(Error::NotFound(_)) => return Ok(Vec::new()),
            Err(e) => return Err(e),
        }
        return live_or_none(c.cloud.list_snapshots(vol.space, vol.filesystem));
    }
    let mut all = Vec::new();
    for space in c.cloud.list_spaces()? {
        let volumes = match volumes_in(c, space.id) {
            Err(Error::NotFound(_)) => continue,
            other => other?,
        };
        for fs in volumes {
            all.extend(live_or_none(c.cloud.list_snapshots(space.id, fs.id))?);
        }
    }
    Ok(all)
}
