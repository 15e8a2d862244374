//! ControllerModifyVolume: what a VolumeAttributesClass may change on an
//! existing volume (a filesystem's tags and squash policy, a directory's
//! `max-files`). The mutable parameters are parsed here; the change is the
//! volume kind's (`kind::modify`).

use crate::controller::kind::seam as kind;
use crate::controller::request::checks;
use crate::controller::request::params::Mutable;
use crate::controller::state::controller::Controller;
use crate::flow::{done, Step, Then};
use crate::limits;
use crate::proto::csi;
use crate::Error;
use std::sync::Arc;

/// ControllerModifyVolume. InvalidArgument for unknown or immutable keys,
/// NotFound for a volume that does not exist; a repeat changes nothing.
pub fn modify(
    c: &Arc<Controller>,
    req: csi::ControllerModifyVolumeRequest,
) -> Step<csi::ControllerModifyVolumeResponse> {
    checks::required(&req.volume_id, "volume ID is not set")?;
    limits::map("mutable parameters", &req.mutable_parameters)?;
    limits::map("secrets", &req.secrets)?;
    let mutable = Mutable::parse(&req.mutable_parameters)?;
    if mutable.is_empty() {
        return Err(Error::InvalidArgument(
            "mutable parameters are required".into(),
        ));
    }
    let handle = checks::volume(&req.volume_id)?;
    kind::modify(c, handle, mutable).then(|()| done(csi::ControllerModifyVolumeResponse::new()))
}
