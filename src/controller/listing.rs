//! ListVolumes and GetCapacity. Only filesystems this driver made (tagged
//! `tags::MANAGED`) are volumes; they are listed across every Space the
//! token sees, one filtered list per Space (Linode's scarce paginated class,
//! so never one request per filesystem; a whole list where the API refuses
//! the filter, and never a filesystem without the tag, whatever the API did
//! with it). Pages are keyset-paged by volume id, and a walk's later pages
//! are cut from the listing its first page made (see `walks`), so a token
//! stays valid however the list changes between pages and a paged walk
//! costs about one full listing. In node mode the published nodes come
//! from the ACL cache (see `acl_cache`), not a policy GET per volume.

use super::inspect::{condition_of, published_nodes, volume_of};
use super::params::Params;
use super::volume_capability::capability_problem;
use super::{tags, Controller};
use crate::config::AccessPolicyMode;
use crate::handles::VolumeId;
use crate::limits;
use crate::linode::{Filesystem, Space, Status};
use crate::proto::csi;
use crate::Error;
use std::collections::HashSet;
use std::sync::Arc;

fn volume_id(fs: &Filesystem) -> VolumeId {
    VolumeId {
        space: fs.space_id,
        filesystem: fs.id,
    }
}

/// Every volume, in volume id order.
fn volumes(c: &Controller) -> Result<Vec<Filesystem>, Error> {
    let mut all = Vec::new();
    for space in c.cloud.list_spaces()? {
        match c.cloud.find_filesystems_by_tag(space.id, tags::MANAGED) {
            Ok(found) => all.extend(found.into_iter().filter(|f| f.status != Status::Deleting)),
            // A space deleted between the two lists has no volumes.
            Err(Error::NotFound(_)) => {}
            Err(e) => return Err(e),
        }
    }
    all.sort_by_key(volume_id);
    Ok(all)
}

/// ListVolumes. A `starting_token` this driver could not have issued is
/// Aborted; `next_token` names the first volume of the next page.
pub fn list_volumes(
    c: &Arc<Controller>,
    req: csi::ListVolumesRequest,
) -> Result<csi::ListVolumesResponse, Error> {
    if req.max_entries < 0 {
        return Err(Error::InvalidArgument(format!(
            "max entries must not be negative: {}",
            req.max_entries
        )));
    }
    let start = if req.starting_token.is_empty() {
        None
    } else {
        Some(VolumeId::parse(&req.starting_token).map_err(|_| {
            Error::Aborted(format!("invalid starting token \"{}\"", req.starting_token))
        })?)
    };
    let (walk, all) = match start.and_then(|s| c.walks.find(s)) {
        Some((walk, all)) => (Some(walk), all),
        None => {
            let all = Arc::new(volumes(c)?);
            // A complete listing: what is not in it is gone.
            c.acl_cache
                .retain(&all.iter().map(volume_id).collect::<HashSet<_>>());
            (None, all)
        }
    };
    let from = start.map_or(0, |s| all.partition_point(|f| volume_id(f) < s));
    let end = match req.max_entries {
        0 => all.len(),
        n => all.len().min(from + n as usize),
    };
    let page: Vec<&Filesystem> = all[from..end].iter().collect();
    let published = if c.mode == AccessPolicyMode::Node {
        published_nodes(c, &page)?
    } else {
        vec![Vec::new(); page.len()]
    };
    let mut resp = csi::ListVolumesResponse::new();
    for (fs, nodes) in page.into_iter().zip(published) {
        resp.entries.push(entry(c, fs, nodes)?);
    }
    if let Some(next) = all.get(end).map(volume_id) {
        c.walks.issue(walk, &all, next);
        resp.next_token = next.to_string();
    }
    Ok(resp)
}

fn entry(
    c: &Controller,
    fs: &Filesystem,
    published_node_ids: Vec<String>,
) -> Result<csi::list_volumes_response::Entry, Error> {
    let mtls = c.spaces.mtls_mode(fs.space_id)?;
    let mut status = csi::list_volumes_response::VolumeStatus::new();
    status.published_node_ids = published_node_ids;
    status.volume_condition = Some(condition_of(fs)).into();
    let mut entry = csi::list_volumes_response::Entry::new();
    entry.volume = Some(volume_of(fs, mtls.as_ref())).into();
    entry.status = Some(status).into();
    Ok(entry)
}

/// GetCapacity: what the Space a StorageClass names can still hold (its
/// maximum less what is used), or with no parameters every Space the token
/// sees. The API names no largest filesystem, so `maximum_volume_size` is
/// left unset. Capabilities the driver cannot serve have no capacity.
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
    let spaces: Vec<Space> = if req.parameters.is_empty() {
        c.cloud.list_spaces()?
    } else {
        let params = Params::parse(&req.parameters)?;
        // The figures change with every volume: read them, not the cache.
        let id = c.spaces.resolve(&params.space)?.id;
        vec![c.spaces.checked(id, c.cloud.get_space(id))?]
    };
    resp.available_capacity = spaces
        .iter()
        .map(|s| {
            let max = s.max_capacity_bytes.unwrap_or(0);
            (max - s.used_capacity_bytes.unwrap_or(0)).max(0)
        })
        .sum();
    Ok(resp)
}
