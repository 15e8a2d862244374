//! ControllerExpandVolume (served only with `VOLUME_EXPANSION=subdirectory`):
//! a `subdirectory` volume grows by a quota update, waited for on the
//! poller like every other wait; the node has nothing to do. The answer is
//! OK only once the quota is `active` at the size asked or more, so the
//! resizer is never told of a size that is not in force. A whole
//! filesystem cannot grow (the API cannot change its capacity), and a
//! volume without a quota has nothing to grow.

use super::room::Listed;
use super::subdirs::{find, lock_key};
use super::{kept, Controller};
use crate::flow::{done, Step, Then};
use crate::handles::{SubdirId, VolumeHandle};
use crate::limits;
use crate::linode::{Quota, QuotaUpdate, Status};
use crate::proto::csi;
use crate::Error;
use std::sync::Arc;

fn grown(capacity_bytes: i64) -> csi::ControllerExpandVolumeResponse {
    let mut resp = csi::ControllerExpandVolumeResponse::new();
    resp.capacity_bytes = capacity_bytes;
    resp.node_expansion_required = false;
    resp
}

/// ControllerExpandVolume. InvalidArgument without an id or a range,
/// NotFound for a volume that does not exist, FailedPrecondition for a
/// whole filesystem, a volume without a quota or a quota in `error`,
/// OutOfRange when the parent cannot hold the new size beside what else
/// it promises. A size at or below the current one answers the current
/// one, once the quota is `active` (an update still settling is waited for).
pub fn expand(
    c: &Arc<Controller>,
    req: csi::ControllerExpandVolumeRequest,
) -> Step<csi::ControllerExpandVolumeResponse> {
    if req.volume_id.is_empty() {
        return Err(Error::InvalidArgument("volume ID is not set".into()));
    }
    limits::map("secrets", &req.secrets)?;
    let Some(range) = req.capacity_range.as_ref() else {
        return Err(Error::InvalidArgument("capacity range is required".into()));
    };
    let (required, limit) = (range.required_bytes, range.limit_bytes);
    if required < 0 || limit < 0 || (required == 0 && limit == 0) {
        return Err(Error::InvalidArgument(
            "capacity_range needs a positive required_bytes or limit_bytes".into(),
        ));
    }
    if limit > 0 && required > limit {
        return Err(Error::InvalidArgument(format!(
            "required_bytes {required} exceeds limit_bytes {limit}"
        )));
    }
    let id = match VolumeHandle::parse(&req.volume_id) {
        Ok(VolumeHandle::Subdirectory(id)) => id,
        Ok(VolumeHandle::Filesystem(vol)) => {
            return Err(Error::FailedPrecondition(format!(
                "volume {vol} is a whole NFS filesystem, whose capacity the Linode API cannot change; only subdirectory volumes can be expanded"
            )))
        }
        Err(_) => {
            return Err(Error::NotFound(format!(
                "volume {:?} not found",
                req.volume_id
            )))
        }
    };
    let want = if required > 0 { required } else { limit };
    let guard = c.locks.try_lock(&lock_key(&id))?;
    let found = find(c, &id)?;
    let Some(quota) = found.quota.clone() else {
        return Err(Error::FailedPrecondition(format!(
            "volume {id} has no quota (its class is quota: best-effort or off), so it has no size to grow"
        )));
    };
    let current = quota.max_capacity_bytes.unwrap_or(0);
    if want <= current {
        return in_force(c, &id, quota, want).then(move |resp| {
            drop(guard);
            done(resp)
        });
    }
    let listed = Listed {
        quotas: &found.quotas,
        read_at: found.read_at,
        kept: kept::total(&found.root)?,
    };
    let claim = c
        .room
        .claim(&listed, &found.parent, &id.name, want)
        .map_err(|no| no.for_growth(current))?;
    let update = QuotaUpdate {
        max_capacity_bytes: Some(want),
        max_file_count: None,
    };
    let updated = c
        .cloud
        .update_quota(id.space, id.filesystem, quota.id, &update)
        .map_err(|e| e.error)?;
    c.poller.quota(id.space, updated, move |q| {
        drop((guard, claim));
        done(grown(q.max_capacity_bytes.unwrap_or(want)))
    })
}

/// The answer for a quota already at `want` or more: at once when it is
/// `active`, FailedPrecondition when it is in `error`, else (an update
/// under way, perhaps a lost call's) once the poller sees it settle.
fn in_force(
    c: &Controller,
    id: &SubdirId,
    quota: Quota,
    want: i64,
) -> Step<csi::ControllerExpandVolumeResponse> {
    match quota.status {
        Status::Active => done(grown(quota.max_capacity_bytes.unwrap_or(want))),
        Status::Error => Err(Error::FailedPrecondition(format!(
            "NFS quota {} ({}) of volume {id} is in status error; the backend did not apply its size",
            quota.id, quota.path
        ))),
        _ => {
            let id = id.clone();
            c.poller.quota(id.space, quota, move |q| {
                match q.max_capacity_bytes.unwrap_or(0) {
                    max if max >= want => done(grown(max)),
                    max => Err(Error::Aborted(format!(
                        "the quota of volume {id} settled at {max} bytes, below the {want} asked; retry"
                    ))),
                }
            })
        }
    }
}
