//! CreateVolume and DeleteVolume: each parses its request and hands it to
//! the volume kinds' seam (`kind`), which says what the volume is.

use crate::controller::kind::seam as kind;
use crate::controller::request::checks::required;
use crate::controller::request::create::parse_create;
use crate::controller::state::controller::Controller;
use crate::flow::Step;
use crate::handles::VolumeHandle;
use crate::proto::csi;
use crate::Error;
use std::sync::Arc;

/// CreateVolume. InvalidArgument for bad input, NotFound for a source that
/// does not exist; the rest is the kind's (see `kind::create`).
pub fn create_volume(
    c: &Arc<Controller>,
    req: csi::CreateVolumeRequest,
) -> Step<csi::CreateVolumeResponse> {
    let want = Arc::new(parse_create(&req, c.default_capacity_bytes)?);
    kind::create(c, want)
}

/// DeleteVolume. Unknown, malformed or already-deleted volumes are OK (CSI
/// requires it); what the driver did not make is FailedPrecondition.
pub fn delete_volume(
    c: &Arc<Controller>,
    req: csi::DeleteVolumeRequest,
) -> Result<csi::DeleteVolumeResponse, Error> {
    required(&req.volume_id, "volume ID is not set")?;
    match VolumeHandle::parse(&req.volume_id) {
        Ok(handle) => kind::delete(c, handle)?,
        Err(_) => log::info!(
            "DeleteVolume: {:?} is not one of our handles; nothing to delete",
            req.volume_id
        ),
    }
    Ok(csi::DeleteVolumeResponse::new())
}
