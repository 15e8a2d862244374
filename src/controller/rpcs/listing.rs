//! ListVolumes and GetCapacity. The volumes of both kinds come from the
//! volume kinds' seam (`kind::list`), sorted by handle; pages are
//! keyset-paged by volume id, and a walk's later pages are cut from the
//! listing its first page made (see `walks`), so a token stays valid
//! however the list changes between pages and a paged walk costs about
//! one full listing. In node mode the published nodes come from the ACL
//! cache (`acl::cache`), not a policy GET per volume.

use crate::config::AccessPolicyMode;
use crate::controller::acl::policy::published_nodes;
use crate::controller::kind::seam as kind;
use crate::controller::request::checks;
use crate::controller::request::checks::{page_end, page_size};
use crate::controller::request::params::Params;
use crate::controller::request::volume_capability::capability_problem;
use crate::controller::state::controller::Controller;
use crate::handles::{VolumeHandle, VolumeId};
use crate::limits;
use crate::proto::csi;
use crate::Error;
use std::collections::HashSet;
use std::sync::Arc;

/// ListVolumes. A `starting_token` this driver could not have issued is
/// Aborted; `next_token` names the first volume of the next page.
pub fn list_volumes(
    c: &Arc<Controller>,
    req: csi::ListVolumesRequest,
) -> Result<csi::ListVolumesResponse, Error> {
    let size = page_size(req.max_entries)?;
    let start = checks::starting_token(&req.starting_token, |t| VolumeHandle::parse(t).ok())?;
    let (walk, all) = match start.as_ref().and_then(|s| c.walks.find(s)) {
        Some((walk, all)) => (Some(walk), all),
        None => {
            let all = Arc::new(kind::list(c)?);
            // A complete listing: what is not in it is gone.
            c.acl_cache
                .retain(&all.iter().map(|v| v.acl).collect::<HashSet<_>>());
            (None, all)
        }
    };
    let from = start
        .as_ref()
        .map_or(0, |s| all.partition_point(|v| v.handle < *s));
    let end = page_end(all.len(), from, size);
    let page = &all[from..end];
    let published = if c.mode == AccessPolicyMode::Node {
        published_nodes(c, &page.iter().map(|v| v.acl).collect::<Vec<VolumeId>>())?
    } else {
        vec![Vec::new(); page.len()]
    };
    let mut resp = csi::ListVolumesResponse::new();
    for (listed, nodes) in page.iter().zip(published) {
        let mut status = csi::list_volumes_response::VolumeStatus::new();
        status.published_node_ids = nodes;
        status.volume_condition = Some(listed.condition.clone()).into();
        let mut entry = csi::list_volumes_response::Entry::new();
        entry.volume = Some(listed.volume.clone()).into();
        entry.status = Some(status).into();
        resp.entries.push(entry);
    }
    if let Some(next) = all.get(end).map(|v| v.handle.clone()) {
        resp.next_token = next.to_string();
        c.walks.issue(walk, &all, next);
    }
    Ok(resp)
}

/// GetCapacity: what a new volume of the StorageClass the parameters name
/// can still be given (see `kind::capacity`), or with no parameters what
/// every Space the token sees can hold. The API names no largest
/// filesystem, so `maximum_volume_size` is left unset. Capabilities the
/// driver cannot serve have no capacity.
pub fn get_capacity(
    c: &Arc<Controller>,
    req: csi::GetCapacityRequest,
) -> Result<csi::GetCapacityResponse, Error> {
    limits::map("parameters", &req.parameters)?;
    let mut resp = csi::GetCapacityResponse::new();
    if req
        .volume_capabilities
        .iter()
        .any(|cap| capability_problem(cap).is_some())
    {
        return Ok(resp);
    }
    let params = if req.parameters.is_empty() {
        None
    } else {
        Some(Params::parse(&req.parameters)?)
    };
    resp.available_capacity = kind::capacity(c, params.as_ref())?;
    Ok(resp)
}
