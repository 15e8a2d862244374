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
//!
//! `subdirectory` volumes are listed from the shared parents the
//! StorageClasses of this driver name (see `classes`; when the Kubernetes
//! API cannot be read, from those alone that this controller has mounted,
//! under `SHARE_MOUNT_DIR`, with a warning) and those mounted here: each
//! parent's ownership markers are its volumes, each with its quota under
//! `/csi-volumes/` if it has one (a quota without a marker is an admin's,
//! never a volume). A parent that cannot be mounted is left out of the
//! listing with a warning. A cluster without `subdirectory` classes or
//! mounted parents pays no extra Linode request.
//! They sort after the whole filesystems (by handle), and a token naming
//! one round-trips like any other.

use super::classes::named_parents;
use super::inspect::{condition_of, published_nodes, quota_condition, volume_of};
use super::params::Params;
use super::subdirs::{parent_of, subdir_volume};
use super::tags::is_volume;
use super::volume_capability::capability_problem;
use super::{directories, kept, quotas, tags, Controller};
use crate::config::AccessPolicyMode;
use crate::handles::{DirName, SubdirId, VolumeHandle, VolumeId};
use crate::limits;
use crate::linode::{Filesystem, Quota, Space, Status};
use crate::proto::csi;
use crate::Error;
use std::collections::{BTreeMap, HashSet};
use std::sync::Arc;

fn volume_id(fs: &Filesystem) -> VolumeId {
    VolumeId {
        space: fs.space_id,
        filesystem: fs.id,
    }
}

/// A directory volume as listed: its parent and its quota, if it has one.
#[derive(Debug, Clone)]
pub struct ListedDir {
    pub id: SubdirId,
    pub parent: Filesystem,
    pub quota: Option<Quota>,
}

/// One volume of a listing.
#[derive(Debug, Clone)]
pub enum Listed {
    Filesystem(Box<Filesystem>),
    Subdirectory(Box<ListedDir>),
}

impl Listed {
    pub fn handle(&self) -> VolumeHandle {
        match self {
            Listed::Filesystem(fs) => VolumeHandle::Filesystem(volume_id(fs)),
            Listed::Subdirectory(d) => VolumeHandle::Subdirectory(d.id.clone()),
        }
    }

    /// The filesystem whose ACL says where the volume is published.
    fn filesystem(&self) -> &Filesystem {
        match self {
            Listed::Filesystem(fs) => fs,
            Listed::Subdirectory(d) => &d.parent,
        }
    }
}

/// Every volume, in handle order.
fn volumes(c: &Controller) -> Result<Vec<Listed>, Error> {
    let mut all = Vec::new();
    for space in c.cloud.list_spaces()? {
        match c.cloud.find_filesystems_by_tag(space.id, tags::MANAGED) {
            Ok(found) => all.extend(
                found
                    .into_iter()
                    .filter(|f| f.status != Status::Deleting)
                    .map(|fs| Listed::Filesystem(Box::new(fs))),
            ),
            // A space deleted between the two lists has no volumes.
            Err(Error::NotFound(_)) => {}
            Err(e) => return Err(e),
        }
    }
    let mut parents = c.shares.known();
    parents.extend(named_parents(c)?);
    for parent in parents {
        all.extend(directories_of(c, parent)?);
    }
    all.sort_by_key(Listed::handle);
    Ok(all)
}

/// The directory volumes of shared parent `vol`: those its markers
/// record, each with its quota if it has one. A parent that is gone, or
/// is a whole-filesystem volume, has none; one that cannot be mounted is
/// left out, with a warning.
fn directories_of(c: &Controller, vol: VolumeId) -> Result<Vec<Listed>, Error> {
    let parent = match c.cloud.get_filesystem(vol.space, vol.filesystem) {
        Ok(fs) if fs.status != Status::Deleting && !is_volume(&fs) => fs,
        Ok(_) | Err(Error::NotFound(_)) => return Ok(Vec::new()),
        Err(e) => return Err(e),
    };
    let mtls = c.spaces.mtls_mode(vol.space)?;
    let root = match c.shares.root(&parent, mtls.as_ref()) {
        Ok(root) => root,
        Err(e) => {
            log::warn!("ListVolumes: the directory volumes of {vol} are not listed: {e}");
            return Ok(Vec::new());
        }
    };
    let marked: Vec<SubdirId> = directories::marked(&root)?
        .into_iter()
        .map(|(name, marker)| {
            let id = SubdirId {
                space: vol.space,
                filesystem: vol.filesystem,
                name,
            };
            (id, marker)
        })
        .filter(|(id, marker)| marker.volume_id == id.to_string())
        .map(|(id, _)| id)
        .collect();
    if marked.is_empty() {
        return Ok(Vec::new());
    }
    let quotas = match c.cloud.list_quotas(vol.space, vol.filesystem) {
        Ok(quotas) => quotas,
        Err(Error::Unimplemented(_) | Error::NotFound(_)) => Vec::new(),
        Err(e) => return Err(e),
    };
    let mut by_name: BTreeMap<DirName, Quota> = quotas
        .into_iter()
        .filter_map(|q| Some((quotas::volume_name(&q, &parent)?, q)))
        .collect();
    Ok(marked
        .into_iter()
        .map(|id| {
            let quota = by_name.remove(&id.name);
            Listed::Subdirectory(Box::new(ListedDir {
                id,
                parent: parent.clone(),
                quota,
            }))
        })
        .collect())
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
        Some(VolumeHandle::parse(&req.starting_token).map_err(|_| {
            Error::Aborted(format!("invalid starting token \"{}\"", req.starting_token))
        })?)
    };
    let (walk, all) = match start.as_ref().and_then(|s| c.walks.find(s)) {
        Some((walk, all)) => (Some(walk), all),
        None => {
            let all = Arc::new(volumes(c)?);
            // A complete listing: what is not in it is gone.
            c.acl_cache.retain(
                &all.iter()
                    .map(|v| volume_id(v.filesystem()))
                    .collect::<HashSet<_>>(),
            );
            (None, all)
        }
    };
    let from = start
        .as_ref()
        .map_or(0, |s| all.partition_point(|v| v.handle() < *s));
    let end = match req.max_entries {
        0 => all.len(),
        n => all.len().min(from + n as usize),
    };
    let page: Vec<&Filesystem> = all[from..end].iter().map(Listed::filesystem).collect();
    let published = if c.mode == AccessPolicyMode::Node {
        published_nodes(c, &page)?
    } else {
        vec![Vec::new(); page.len()]
    };
    let mut resp = csi::ListVolumesResponse::new();
    for (listed, nodes) in all[from..end].iter().zip(published) {
        resp.entries.push(entry(c, listed, nodes)?);
    }
    if let Some(next) = all.get(end).map(Listed::handle) {
        resp.next_token = next.to_string();
        c.walks.issue(walk, &all, next);
    }
    Ok(resp)
}

fn entry(
    c: &Controller,
    listed: &Listed,
    published_node_ids: Vec<String>,
) -> Result<csi::list_volumes_response::Entry, Error> {
    let fs = listed.filesystem();
    let mtls = c.spaces.mtls_mode(fs.space_id)?;
    let mut status = csi::list_volumes_response::VolumeStatus::new();
    status.published_node_ids = published_node_ids;
    let volume = match listed {
        Listed::Filesystem(fs) => {
            status.volume_condition = Some(condition_of(fs)).into();
            volume_of(fs, mtls.as_ref())
        }
        Listed::Subdirectory(d) => {
            status.volume_condition = Some(quota_condition(&d.id, d.quota.as_ref())).into();
            let capacity = d
                .quota
                .as_ref()
                .and_then(|q| q.max_capacity_bytes)
                .unwrap_or(0);
            subdir_volume(&d.parent, mtls.as_ref(), &d.id, capacity, d.quota.is_some())
        }
    };
    let mut entry = csi::list_volumes_response::Entry::new();
    entry.volume = Some(volume).into();
    entry.status = Some(status).into();
    Ok(entry)
}

/// GetCapacity: what the Space a StorageClass names can still hold (its
/// maximum less what is used), or with no parameters every Space the token
/// sees; for a `subdirectory` class what its parent's quotas leave. The API names no largest filesystem, so `maximum_volume_size` is
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
        if let Some(sub) = &params.subdirectory {
            resp.available_capacity = room_in_parent(c, &params, &sub.parent)?;
            return Ok(resp);
        }
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

/// What a shared parent can still promise: its capacity less the maxima
/// of its quotas (its root quota aside) and what deleted volumes keep on
/// it, as the room check of a create counts them.
fn room_in_parent(
    c: &Controller,
    params: &Params,
    parent: &super::params::ParentRef,
) -> Result<i64, Error> {
    let region = c.cluster.region()?;
    let space = c.spaces.resolve(&params.space)?;
    let fs = parent_of(c, space.id, parent, &region)?;
    let mtls = c.spaces.mtls_mode(space.id)?;
    let kept = kept::total(&c.shares.root(&fs, mtls.as_ref())?)?;
    let promised = match c.cloud.list_quotas(space.id, fs.id) {
        Ok(all) => quotas::promised(&all),
        Err(Error::Unimplemented(_)) => 0,
        Err(e) => return Err(e),
    };
    Ok((fs.capacity_bytes().unwrap_or(0) - promised - kept).max(0))
}
