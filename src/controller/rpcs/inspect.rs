//! ValidateVolumeCapabilities and ControllerGetVolume: the read-only views
//! of one volume. Each parses its request, asks the volume kinds' seam
//! (`kind`) and answers; the published nodes (node mode) come from the
//! ACL cache (`acl::policy`). Nothing here writes to the backend.

use crate::config::AccessPolicyMode;
use crate::controller::acl::policy::published_nodes;
use crate::controller::kind::seam as kind;
use crate::controller::request::checks;
use crate::controller::state::controller::Controller;
use crate::limits;
use crate::proto::csi;
use crate::Error;
use std::sync::Arc;

/// ValidateVolumeCapabilities. NotFound for volumes that do not exist
/// (malformed handles included). Only what holds for this volume is
/// confirmed; anything else (an unsupported capability, parameters, mutable
/// parameters or a context that do not describe it) is a message, not an
/// error.
pub fn validate_capabilities(
    c: &Arc<Controller>,
    req: csi::ValidateVolumeCapabilitiesRequest,
) -> Result<csi::ValidateVolumeCapabilitiesResponse, Error> {
    let handle = checks::volume(&req.volume_id)?;
    if req.volume_capabilities.is_empty() {
        return Err(Error::InvalidArgument(
            "volume capabilities are required".into(),
        ));
    }
    limits::map("volume context", &req.volume_context)?;
    limits::map("parameters", &req.parameters)?;
    limits::map("mutable parameters", &req.mutable_parameters)?;
    limits::map("secrets", &req.secrets)?;
    let mut resp = csi::ValidateVolumeCapabilitiesResponse::new();
    if let Some(problem) = kind::validate(c, &handle, &req)? {
        resp.message = problem;
        return Ok(resp);
    }
    let mut confirmed = csi::validate_volume_capabilities_response::Confirmed::new();
    confirmed.volume_context = req.volume_context;
    confirmed.volume_capabilities = req.volume_capabilities;
    confirmed.parameters = req.parameters;
    confirmed.mutable_parameters = req.mutable_parameters;
    resp.confirmed = Some(confirmed).into();
    Ok(resp)
}

/// ControllerGetVolume: the volume, the nodes it is published to (node
/// mode) and its condition.
pub fn get_volume(
    c: &Arc<Controller>,
    req: csi::ControllerGetVolumeRequest,
) -> Result<csi::ControllerGetVolumeResponse, Error> {
    let handle = checks::volume(&req.volume_id)?;
    let found = kind::describe(c, &handle)?;
    let mut status = csi::controller_get_volume_response::VolumeStatus::new();
    if c.mode == AccessPolicyMode::Node {
        status.published_node_ids = published_nodes(c, &[found.acl])?.remove(0);
    }
    status.volume_condition = Some(found.condition).into();
    let mut resp = csi::ControllerGetVolumeResponse::new();
    resp.volume = Some(found.volume).into();
    resp.status = Some(status).into();
    Ok(resp)
}
