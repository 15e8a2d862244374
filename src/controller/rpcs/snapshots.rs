//! The snapshot RPCs: CreateSnapshot, DeleteSnapshot, GetSnapshot and
//! ListSnapshots (with offset tokens). Each checks its request, parses the
//! handle and hands it to the volume kinds' seam (`kind`); creation does
//! not wait for `active` (the snapshotter calls again until
//! `ready_to_use`), only, parked, for a directory snapshot's batch POST.

use crate::controller::request::checks;

use crate::controller::kind::seam as kind;
use crate::controller::request::checks::{page_end, page_size, required};
use crate::controller::request::params::refuse_unknown;
use crate::controller::state::controller::Controller;
use crate::flow::{done, Step, Then};
use crate::handles::SnapshotHandle;
use crate::limits;
use crate::proto::csi;
use crate::Error;
use std::sync::Arc;

/// CreateSnapshot. AlreadyExists when the name belongs to a snapshot of
/// another volume; NotFound for an unknown source; a repeat returns the same snapshot.
pub fn create(
    c: &Arc<Controller>,
    req: csi::CreateSnapshotRequest,
) -> Step<csi::CreateSnapshotResponse> {
    required(&req.name, "snapshot name is required")?;
    required(&req.source_volume_id, "source volume ID is not set")?;
    limits::string("snapshot name", &req.name)?;
    limits::map("parameters", &req.parameters)?;
    limits::map("secrets", &req.secrets)?;
    refuse_unknown(&req.parameters, &[], "VolumeSnapshotClass")?;
    let source = checks::source_volume(&req.source_volume_id)?;
    kind::snapshot(c, source, &req).then(|snapshot| {
        done(csi::CreateSnapshotResponse {
            snapshot: Some(snapshot).into(),
            ..Default::default()
        })
    })
}

/// GetSnapshot: ListSnapshots' lookup by id. NotFound for an id we could
/// not have issued, a snapshot that is gone or going, a clone's copy, or
/// one the driver did not take.
pub fn get(
    c: &Arc<Controller>,
    req: csi::GetSnapshotRequest,
) -> Result<csi::GetSnapshotResponse, Error> {
    let id = checks::snapshot(&req.snapshot_id)?;
    Ok(csi::GetSnapshotResponse {
        snapshot: Some(kind::get_snapshot(c, &id)?).into(),
        ..Default::default()
    })
}

/// DeleteSnapshot. Unknown or malformed ids are OK; a locked snapshot, or
/// one the driver did not take, is FailedPrecondition.
pub fn delete(
    c: &Arc<Controller>,
    req: csi::DeleteSnapshotRequest,
) -> Result<csi::DeleteSnapshotResponse, Error> {
    let id = checks::to_delete(
        &req.snapshot_id,
        "snapshot id is required",
        SnapshotHandle::parse,
    )?;
    if let Some(id) = id {
        kind::delete_snapshot(c, &id)?;
    }
    Ok(csi::DeleteSnapshotResponse::new())
}

/// ListSnapshots. Filters that name nothing give an empty list; a bad
/// `starting_token` is Aborted.
pub fn list(
    c: &Arc<Controller>,
    req: csi::ListSnapshotsRequest,
) -> Result<csi::ListSnapshotsResponse, Error> {
    let size = page_size(req.max_entries)?;
    let start =
        checks::starting_token(&req.starting_token, |t| t.parse::<usize>().ok())?.unwrap_or(0);
    let found = kind::list_snapshots(c, &req)?;
    if start > found.len() {
        return Err(Error::Aborted(format!(
            "starting token \"{}\" is out of range",
            req.starting_token
        )));
    }
    let end = page_end(found.len(), start, size);
    let mut resp = csi::ListSnapshotsResponse::new();
    for s in &found[start..end] {
        let mut entry = csi::list_snapshots_response::Entry::new();
        entry.snapshot = Some(s.clone()).into();
        resp.entries.push(entry);
    }
    if end < found.len() {
        resp.next_token = end.to_string();
    }
    Ok(resp)
}
