//! Snapshots: create (idempotent by label, one name per plugin), delete,
//! and list with offset tokens. Creation does not wait for `active`: the
//! snapshotter calls again until `ready_to_use`, so no worker is held.

use super::Controller;
use crate::handles::{label_for, SnapshotId, VolumeId};
use crate::linode::{naive_to_unix, Snapshot, Status};
use crate::proto::csi;
use crate::Error;

fn snapshot_of(s: &Snapshot) -> Result<csi::Snapshot, Error> {
    let id = SnapshotId {
        space: s.space_id,
        filesystem: s.filesystem_id,
        snapshot: s.id,
    };
    let created = s.created.as_deref().ok_or_else(|| {
        Error::Internal(format!(
            "NFS snapshot {id} does not have a created timestamp"
        ))
    })?;
    let seconds = naive_to_unix(created).ok_or_else(|| {
        Error::Internal(format!(
            "failed to parse snapshot created time: {created:?}"
        ))
    })?;
    let mut out = csi::Snapshot::new();
    out.snapshot_id = id.to_string();
    out.source_volume_id = id.volume().to_string();
    out.size_bytes = s.size_bytes.unwrap_or(0);
    out.creation_time = Some(protobuf::well_known_types::timestamp::Timestamp {
        seconds,
        ..Default::default()
    })
    .into();
    out.ready_to_use = s.status == Status::Active;
    Ok(out)
}

/// The snapshot named `label` anywhere in the space other than on `source`:
/// CSI names are unique per plugin, while the backend only keeps labels
/// unique per filesystem.
fn taken_elsewhere(
    c: &Controller,
    source: VolumeId,
    label: &str,
) -> Result<Option<Snapshot>, Error> {
    let filesystems = c
        .cloud
        .list_filesystems(source.space)
        .map_err(|e| e.context("list NFS filesystems"))?;
    for fs in filesystems.iter().filter(|fs| fs.id != source.filesystem) {
        match c.cloud.list_snapshots(source.space, fs.id) {
            Ok(snaps) => {
                if let Some(s) = snaps.into_iter().find(|s| s.label == label) {
                    return Ok(Some(s));
                }
            }
            Err(Error::NotFound(_)) => {}
            Err(e) => return Err(e.context("list NFS snapshots")),
        }
    }
    Ok(None)
}

/// CreateSnapshot. AlreadyExists when the name belongs to a snapshot of
/// another volume; NotFound for an unknown source; a repeat returns the same snapshot.
pub fn create(
    c: &Controller,
    req: csi::CreateSnapshotRequest,
) -> Result<csi::CreateSnapshotResponse, Error> {
    if req.name.is_empty() {
        return Err(Error::InvalidArgument("snapshot name is required".into()));
    }
    if req.source_volume_id.is_empty() {
        return Err(Error::InvalidArgument("source volume ID is not set".into()));
    }
    let source = VolumeId::parse(&req.source_volume_id).map_err(|_| {
        Error::NotFound(format!(
            "source volume {:?} not found",
            req.source_volume_id
        ))
    })?;
    let _guard = c.locks.try_lock(&format!("snapshot/{source}"))?;
    let label = label_for(&req.name);
    let mine = |s: &Snapshot| s.label == label;
    let existing = c
        .cloud
        .list_snapshots(source.space, source.filesystem)
        .map_err(|e| e.context("list NFS snapshots"))?
        .into_iter()
        .find(mine);
    let snapshot = match existing {
        Some(s) => s,
        None => {
            if taken_elsewhere(c, source, &label)?.is_some() {
                return Err(Error::AlreadyExists(format!(
                    "NFS snapshot \"{label}\" already exists with a different source volume"
                )));
            }
            match c
                .cloud
                .create_snapshot(source.space, source.filesystem, &label)
            {
                Ok(s) => s,
                // A duplicate label (409) or a create whose reply was lost:
                // look again before giving up.
                Err(
                    e @ (Error::FailedPrecondition(_) | Error::Unavailable(_) | Error::Internal(_)),
                ) => c
                    .cloud
                    .list_snapshots(source.space, source.filesystem)
                    .map_err(|e| e.context("list NFS snapshots"))?
                    .into_iter()
                    .find(mine)
                    .ok_or_else(|| e.context("create NFS snapshot"))?,
                Err(e) => return Err(e.context("create NFS snapshot")),
            }
        }
    };
    if matches!(snapshot.status, Status::Error | Status::Failed) {
        return Err(Error::FailedPrecondition(format!(
            "NFS snapshot {} is in status {}",
            snapshot.id, snapshot.status
        )));
    }
    let mut resp = csi::CreateSnapshotResponse::new();
    resp.snapshot = Some(snapshot_of(&snapshot)?).into();
    Ok(resp)
}

/// DeleteSnapshot. Unknown or malformed ids are OK; a locked snapshot is FailedPrecondition.
pub fn delete(
    c: &Controller,
    req: csi::DeleteSnapshotRequest,
) -> Result<csi::DeleteSnapshotResponse, Error> {
    if req.snapshot_id.is_empty() {
        return Err(Error::InvalidArgument("snapshot id is required".into()));
    }
    let Ok(id) = SnapshotId::parse(&req.snapshot_id) else {
        return Ok(csi::DeleteSnapshotResponse::new());
    };
    match c
        .cloud
        .delete_snapshot(id.space, id.filesystem, id.snapshot)
    {
        Ok(()) | Err(Error::NotFound(_)) => Ok(csi::DeleteSnapshotResponse::new()),
        Err(e) => Err(e.context("delete NFS snapshot")),
    }
}

/// ListSnapshots. Filters that name nothing give an empty list; a bad
/// `starting_token` is Aborted.
pub fn list(
    c: &Controller,
    req: csi::ListSnapshotsRequest,
) -> Result<csi::ListSnapshotsResponse, Error> {
    if req.max_entries < 0 {
        return Err(Error::InvalidArgument(format!(
            "max entries must not be negative: {}",
            req.max_entries
        )));
    }
    let start = if req.starting_token.is_empty() {
        0
    } else {
        req.starting_token.parse::<usize>().map_err(|_| {
            Error::Aborted(format!("invalid starting token \"{}\"", req.starting_token))
        })?
    };
    let mut found = matching(c, &req)?;
    found.sort_by_key(|s| (s.space_id, s.filesystem_id, s.id));
    if start > found.len() {
        return Err(Error::Aborted(format!(
            "starting token \"{}\" is out of range",
            req.starting_token
        )));
    }
    let end = match req.max_entries {
        0 => found.len(),
        n => found.len().min(start + n as usize),
    };
    let mut resp = csi::ListSnapshotsResponse::new();
    for s in &found[start..end] {
        let mut entry = csi::list_snapshots_response::Entry::new();
        entry.snapshot = Some(snapshot_of(s)?).into();
        resp.entries.push(entry);
    }
    if end < found.len() {
        resp.next_token = end.to_string();
    }
    Ok(resp)
}

fn ignore_not_found(r: Result<Vec<Snapshot>, Error>) -> Result<Vec<Snapshot>, Error> {
    match r {
        Err(Error::NotFound(_)) => Ok(Vec::new()),
        other => other.map_err(|e| e.context("list NFS snapshots")),
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
        return match c.cloud.get_snapshot(id.space, id.filesystem, id.snapshot) {
            Ok(s) => Ok(vec![s]),
            Err(Error::NotFound(_)) => Ok(Vec::new()),
            Err(e) => Err(e.context("get NFS snapshot")),
        };
    }
    if !req.source_volume_id.is_empty() {
        let Ok(vol) = VolumeId::parse(&req.source_volume_id) else {
            return Ok(Vec::new());
        };
        return ignore_not_found(c.cloud.list_snapshots(vol.space, vol.filesystem));
    }
    let mut all = Vec::new();
    for space in c
        .cloud
        .list_spaces()
        .map_err(|e| e.context("list NFS spaces"))?
    {
        let filesystems = match c.cloud.list_filesystems(space.id) {
            Err(Error::NotFound(_)) => continue,
            other => other.map_err(|e| e.context("list NFS filesystems"))?,
        };
        for fs in filesystems {
            all.extend(ignore_not_found(c.cloud.list_snapshots(space.id, fs.id))?);
        }
    }
    Ok(all)
}
