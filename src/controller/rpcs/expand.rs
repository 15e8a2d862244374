//! ControllerExpandVolume (served only with `VOLUME_EXPANSION=subdirectory`):
//! the range is parsed here, the growth is the volume kind's
//! (`kind::expand`: a directory's quota grows, a whole filesystem cannot);
//! the node has nothing to do.

use crate::controller::kind::seam as kind;
use crate::controller::request::checks;
use crate::controller::state::controller::Controller;
use crate::flow::{done, Step, Then};
use crate::limits;
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
    checks::required(&req.volume_id, "volume ID is not set")?;
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
    let handle = checks::volume(&req.volume_id)?;
    let want = if required > 0 { required } else { limit };
    kind::expand(c, handle, want).then(|size| done(grown(size)))
}
