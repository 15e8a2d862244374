//! The CSI GroupController service: CreateVolumeGroupSnapshot,
//! GetVolumeGroupSnapshot and DeleteVolumeGroupSnapshot. Each checks its
//! request, parses the handles and hands them to the volume kinds' seam
//! (`kind`), which says which volumes can be snapshotted together.

use crate::controller::request::checks;

use crate::controller::kind::seam as kind;
use crate::controller::request::checks::required;
use crate::controller::request::params::refuse_unknown;
use crate::controller::state::controller::Controller;
use crate::flow::{done, Step, Then};
use crate::handles::GroupSnapshotId;
use crate::limits;
use crate::proto::csi;
use crate::Error;
use std::collections::BTreeSet;
use std::sync::Arc;

/// CreateVolumeGroupSnapshot, answered once every member is ready (parked
/// meanwhile). InvalidArgument without a name or sources, with a source
/// named twice, or with sources that cannot be snapshotted at one instant;
/// NotFound for a source that is no volume.
pub fn create(
    c: &Arc<Controller>,
    req: csi::CreateVolumeGroupSnapshotRequest,
) -> Step<csi::CreateVolumeGroupSnapshotResponse> {
    required(&req.name, "group snapshot name is required")?;
    limits::string("group snapshot name", &req.name)?;
    limits::map("parameters", &req.parameters)?;
    limits::map("secrets", &req.secrets)?;
    refuse_unknown(&req.parameters, &[], "VolumeGroupSnapshotClass")?;
    if req.source_volume_ids.is_empty() {
        return Err(Error::InvalidArgument(
            "source volume ids are required".into(),
        ));
    }
    let mut seen = BTreeSet::new();
    let mut members = Vec::with_capacity(req.source_volume_ids.len());
    for raw in &req.source_volume_ids {
        if !seen.insert(raw.as_str()) {
            return Err(Error::InvalidArgument(format!(
                "source volume {raw} is named twice"
            )));
        }
        members.push(checks::source_volume(raw)?);
    }
    kind::group_snapshot(c, members, &req.name).then(|group| {
        done(csi::CreateVolumeGroupSnapshotResponse {
            group_snapshot: Some(group).into(),
            ..Default::default()
        })
    })
}

/// GetVolumeGroupSnapshot: NotFound for an id the driver could not have
/// issued or a group that is gone.
pub fn get(
    c: &Arc<Controller>,
    req: csi::GetVolumeGroupSnapshotRequest,
) -> Result<csi::GetVolumeGroupSnapshotResponse, Error> {
    let id = checks::group_snapshot(&req.group_snapshot_id)?;
    Ok(csi::GetVolumeGroupSnapshotResponse {
        group_snapshot: Some(kind::get_group(c, &id)?).into(),
        ..Default::default()
    })
}

/// DeleteVolumeGroupSnapshot: OK for an id the driver could not have
/// issued or a group that is gone.
pub fn delete(
    c: &Arc<Controller>,
    req: csi::DeleteVolumeGroupSnapshotRequest,
) -> Result<csi::DeleteVolumeGroupSnapshotResponse, Error> {
    let id = checks::to_delete(
        &req.group_snapshot_id,
        "group snapshot id is required",
        GroupSnapshotId::parse,
    )?;
    if let Some(id) = id {
        kind::delete_group(c, &id, &req.snapshot_ids)?;
    }
    Ok(csi::DeleteVolumeGroupSnapshotResponse::new())
}
