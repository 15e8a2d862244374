//! The read-only views of a volume: the CSI volume and context built from
//! a filesystem (shared with CreateVolume and ListVolumes), its condition,
//! ValidateVolumeCapabilities and ControllerGetVolume, and the published
//! nodes (from the ACL cache, and the policy reads that fill it). Nothing
//! here writes to the backend.

use super::acl_cache::{Acl, Plan, Ticket};
use super::params::{Mutable, Params, ParentRef, SpaceRef};
use super::publish::policy_key;
use super::subdirs::{find, subdir_volume, Found};
use super::volume_capability::capability_problem;
use super::{tags, Controller};
use crate::handles::{self, SubdirId, VolumeHandle, VolumeId};
use crate::limits;
use crate::linode::{Filesystem, FilesystemAccessPolicy, MtlsMode, Quota, Status};
use crate::proto::csi;
use crate::Error;
use std::collections::{BTreeMap, BTreeSet, HashMap};
use std::sync::Arc;

/// The CSI volume for a backend filesystem, with the context the node reads.
pub fn volume_of(fs: &Filesystem, mtls: Option<&MtlsMode>) -> csi::Volume {
    let mut ctx = HashMap::new();
    ctx.insert(handles::CTX_SPACE_ID.to_string(), fs.space_id.to_string());
    ctx.insert(handles::CTX_FILESYSTEM_ID.to_string(), fs.id.to_string());
    ctx.insert(
        handles::CTX_MOUNT_TARGET.to_string(),
        fs.mount_target_fqdn.clone().unwrap_or_default(),
    );
    ctx.insert(
        handles::CTX_MOUNT_TARGET_IPS.to_string(),
        fs.mount_target_ips.join(","),
    );
    ctx.insert(handles::CTX_REGION.to_string(), fs.region.clone());
    if let Some(mode) = mtls.filter(|m| !m.as_str().is_empty()) {
        ctx.insert(
            handles::CTX_MTLS_MODE.to_string(),
            mode.as_str().to_string(),
        );
    }
    let mut v = csi::Volume::new();
    v.volume_id = VolumeId {
        space: fs.space_id,
        filesystem: fs.id,
    }
    .to_string();
    v.capacity_bytes = fs.capacity_bytes().unwrap_or(0);
    v.volume_context = ctx;
    v
}

/// Abnormal only in a status the filesystem does not come back from by
/// itself; `creating`, `updating` and statuses new to us pass.
pub(super) fn condition_of(fs: &Filesystem) -> csi::VolumeCondition {
    let mut condition = csi::VolumeCondition::new();
    condition.abnormal = matches!(fs.status, Status::Error | Status::Failed | Status::Deleting);
    condition.message = format!("NFS filesystem {} is {}", fs.id, fs.status);
    condition
}

/// ValidateVolumeCapabilities. NotFound for volumes that do not exist
/// (malformed handles included). Only what holds for this volume is
/// confirmed; anything else (an unsupported capability, parameters, mutable
/// parameters or a context that do not describe it) is a message, not an
/// error.
pub fn validate_capabilities(
    c: &Arc<Controller>,
    req: csi::ValidateVolumeCapabilitiesRequest,
) -> Result<csi::ValidateVolumeCapabilitiesResponse, Error> {
    if req.volume_id.is_empty() {
        return Err(Error::InvalidArgument("volume ID is not set".into()));
    }
    if req.volume_capabilities.is_empty() {
        return Err(Error::InvalidArgument(
            "volume capabilities are required".into(),
        ));
    }
    limits::map("volume context", &req.volume_context)?;
    limits::map("parameters", &req.parameters)?;
    limits::map("mutable parameters", &req.mutable_parameters)?;
    limits::map("secrets", &req.secrets)?;
    let handle = VolumeHandle::parse(&req.volume_id)
        .map_err(|_| Error::NotFound("volume not found".into()))?;
    let problem = match handle {
        VolumeHandle::Filesystem(id) => {
            let fs = c.cloud.get_filesystem(id.space, id.filesystem)?;
            unconfirmable(c, &req, &fs)?
        }
        VolumeHandle::Subdirectory(id) => {
            let found = find(c, &id)?;
            let volume = subdir_volume(
                &found.parent,
                found.mtls.as_ref(),
                &id,
                0,
                found.quota.is_some(),
            );
            subdirectory_problem(c, &req, &id, &found.parent, &volume)?
        }
    };
    let mut resp = csi::ValidateVolumeCapabilitiesResponse::new();
    if let Some(problem) = problem {
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

/// Why `req` cannot be confirmed for `fs`, or `None` when it can.
fn unconfirmable(
    c: &Controller,
    req: &csi::ValidateVolumeCapabilitiesRequest,
    fs: &Filesystem,
) -> Result<Option<String>, Error> {
    if let Some(problem) = req.volume_capabilities.iter().find_map(capability_problem) {
        return Ok(Some(problem));
    }
    if let Some(problem) = parameters_problem(c, &req.parameters, &req.mutable_parameters, fs)? {
        return Ok(Some(problem));
    }
    context_problem(c, &req.volume_context, fs)
}

/// Why `req` cannot be confirmed for directory volume `id`: a capability
/// the driver cannot serve, parameters that are not a `subdirectory` class
/// of its Space (and parent, when named by id), or a context key the
/// driver derives with another value.
fn subdirectory_problem(
    c: &Controller,
    req: &csi::ValidateVolumeCapabilitiesRequest,
    id: &SubdirId,
    parent: &Filesystem,
    volume: &csi::Volume,
) -> Result<Option<String>, Error> {
    if let Some(problem) = req.volume_capabilities.iter().find_map(capability_problem) {
        return Ok(Some(problem));
    }
    if let Err(e) = Mutable::parse(&req.mutable_parameters).and_then(|m| m.check_subdirectory()) {
        return Ok(Some(e.to_string()));
    }
    if !req.parameters.is_empty() {
        let params = match Params::parse(&req.parameters) {
            Ok(params) => params,
            Err(e) => return Ok(Some(e.to_string())),
        };
        let Some(sub) = &params.subdirectory else {
            return Ok(Some(format!(
                "the parameters describe a whole filesystem, but volume {id} is a subdirectory volume"
            )));
        };
        let space = match c.spaces.resolve(&params.space) {
            Ok(space) => space.id,
            Err(Error::NotFound(m) | Error::FailedPrecondition(m)) => return Ok(Some(m)),
            Err(e) => return Err(e),
        };
        let other_parent = match &sub.parent {
            ParentRef::Id(fs) => *fs != parent.id,
            ParentRef::Label(label) => *label != parent.label,
        };
        if space != id.space || other_parent {
            return Ok(Some(format!(
                "the parameters name another shared filesystem than volume {id}'s"
            )));
        }
    }
    let sorted: BTreeMap<&String, &String> = req.volume_context.iter().collect();
    Ok(sorted
        .into_iter()
        .find_map(|(key, value)| match volume.volume_context.get(key) {
            Some(want) if want != value => Some(format!(
                "volume context {key} is {value:?}, but the volume has {want:?}"
            )),
            None if key == handles::CTX_QUOTA => Some(format!(
                "volume context {key} is {value:?}, but the volume has a quota"
            )),
            _ => None,
        }))
}

/// Abnormal when the backend says the quota is exceeded or failed.
pub(super) fn quota_condition(id: &SubdirId, quota: Option<&Quota>) -> csi::VolumeCondition {
    let mut condition = csi::VolumeCondition::new();
    match quota {
        Some(q) => {
            condition.abnormal = q.quota_exceeded || q.status == Status::Error;
            condition.message = if q.quota_exceeded {
                format!("volume {id} has exceeded its quota ({})", q.status)
            } else {
                format!("the quota of volume {id} is {}", q.status)
            };
        }
        None => condition.message = format!("volume {id} has no quota"),
    }
    condition
}

/// Parameters hold for `fs` when CreateVolume, given them, would have
/// adopted it: they parse, name its space and carry its tags and, if they
/// ask for one, its squash policy; mutable parameters override the tags and
/// the squash policy as they do in CreateVolume. None at all is nothing to
/// check.
fn parameters_problem(
    c: &Controller,
    raw: &HashMap<String, String>,
    mutable_raw: &HashMap<String, String>,
    fs: &Filesystem,
) -> Result<Option<String>, Error> {
    let mutable = match Mutable::parse(mutable_raw).and_then(|m| m.check_filesystem().map(|()| m)) {
        Ok(mutable) => mutable,
        Err(e) => return Ok(Some(e.to_string())),
    };
    let (tags_asked, squash) = if raw.is_empty() {
        (mutable.tags, mutable.squash)
    } else {
        let params = match Params::parse(raw) {
            Ok(params) => params,
            Err(e) => return Ok(Some(e.to_string())),
        };
        if params.subdirectory.is_some() {
            return Ok(Some(format!(
                "the parameters describe a subdirectory volume, but NFS filesystem {} is a whole-filesystem volume",
                fs.id
            )));
        }
        let space = match &params.space {
            SpaceRef::Id(id) => *id,
            SpaceRef::Label(_) => match c.spaces.resolve(&params.space) {
                Ok(space) => space.id,
                Err(Error::NotFound(m) | Error::FailedPrecondition(m)) => return Ok(Some(m)),
                Err(e) => return Err(e),
            },
        };
        if space != fs.space_id {
            return Ok(Some(format!(
                "the parameters name NFS space {space}, but the volume is in NFS space {}",
                fs.space_id
            )));
        }
        (
            Some(mutable.tags.unwrap_or(params.tags)),
            mutable.squash.or(params.squash),
        )
    };
    if let Some(asked) = tags_asked {
        let want: BTreeSet<&str> = asked.iter().map(String::as_str).collect();
        let have = tags::user_tags(&fs.tags);
        if have != want {
            return Ok(Some(format!(
                "the parameters' tags {asked:?} are not NFS filesystem {}'s tags {have:?}",
                fs.id
            )));
        }
    }
    if let Some(squash) = &squash {
        let Some(policy) = c.cloud.get_filesystem_access_policy(fs.space_id, fs.id)? else {
            return Ok(Some(format!(
                "the parameters ask for squash policy {squash}, but the backend has no per-filesystem access policy for NFS filesystem {}",
                fs.id
            )));
        };
        if policy.squash_policy.as_ref() != Some(squash) {
            let have = policy.squash_policy.map_or_else(
                || "no squash policy".to_string(),
                |p| format!("squash policy {p}"),
            );
            return Ok(Some(format!(
                "the parameters ask for squash policy {squash}, but NFS filesystem {} has {have}",
                fs.id
            )));
        }
    }
    Ok(None)
}

/// The nodes each of `fss` is published to (node mode): the Linodes its
/// access policy allows, as the ACL cache knows them, reading those it
/// does not know and, as far as its refresh budget goes, those it knew too
/// long ago. A refresh that fails is reported from the last read; a
/// filesystem never read that cannot be read fails the call. A backend
/// without per-filesystem policies cannot say; the nodes are then reported
/// unknown (none) with a warning rather than failing the read.
pub(super) fn published_nodes(
    c: &Controller,
    fss: &[&Filesystem],
) -> Result<Vec<Vec<String>>, Error> {
    let vols: Vec<VolumeId> = fss
        .iter()
        .map(|fs| VolumeId {
            space: fs.space_id,
            filesystem: fs.id,
        })
        .collect();
    let plans = c.acl_cache.plan(&vols);
    let mut published = Vec::with_capacity(fss.len());
    for ((fs, vol), plan) in fss.iter().zip(vols).zip(plans) {
        let nodes = match plan {
            Plan::Report(acl) => acl.published(),
            Plan::Read { ticket, last } => match read_policy(c, vol, ticket) {
                Ok(Some(policy)) => Acl::of(&policy).published(),
                Ok(None) => {
                    log::warn!(
                        "NFS filesystem {}/{}: published nodes unknown, the backend has no per-filesystem access policy",
                        fs.space_id,
                        fs.id
                    );
                    Vec::new()
                }
                // Gone since it was listed: published nowhere.
                Err(Error::NotFound(_)) => Vec::new(),
                Err(e) => match last {
                    Some(acl) => {
                        log::warn!(
                            "NFS filesystem {vol}: published nodes as last read, its access policy could not be read again: {e}"
                        );
                        acl.published()
                    }
                    None => return Err(e),
                },
            },
        };
        published.push(nodes);
    }
    Ok(published)
}

/// The filesystem's access policy from the backend, kept in the ACL cache
/// (under `ticket`, taken before the read) unless a write of it may still
/// land. `Ok(None)` when the backend has no per-filesystem policy.
pub(super) fn read_policy(
    c: &Controller,
    vol: VolumeId,
    ticket: Ticket,
) -> Result<Option<FilesystemAccessPolicy>, Error> {
    let read = c
        .cloud
        .get_filesystem_access_policy(vol.space, vol.filesystem);
    let found = match &read {
        Ok(Some(policy)) => Some(Some(Acl::of(policy))),
        Ok(None) => Some(Some(Acl::NoPolicy)),
        Err(Error::NotFound(_)) => Some(None),
        Err(_) => None,
    };
    let settled = c.in_doubt.check(&policy_key(vol), "").is_ok();
    if let (Some(found), true) = (found, settled) {
        c.acl_cache.read(vol, ticket, found);
    }
    read
}

/// A context holds for `fs` when every key of it that the driver derives
/// for `fs` has the derived value; other keys are the caller's own.
fn context_problem(
    c: &Controller,
    ctx: &HashMap<String, String>,
    fs: &Filesystem,
) -> Result<Option<String>, Error> {
    // The space policy is read only when there is a mode to compare.
    let mtls = if ctx.contains_key(handles::CTX_MTLS_MODE) {
        c.spaces.mtls_mode(fs.space_id)?
    } else {
        None
    };
    let derived = volume_of(fs, mtls.as_ref()).volume_context;
    let sorted: BTreeMap<&String, &String> = ctx.iter().collect();
    Ok(sorted
        .into_iter()
        .find_map(|(key, value)| match derived.get(key) {
            Some(want) if want != value => Some(format!(
                "volume context {key} is {value:?}, but the volume has {want:?}"
            )),
            _ => None,
        }))
}

/// ControllerGetVolume: the volume, the nodes it is published to (node
/// mode) and its condition.
pub fn get_volume(
    c: &Arc<Controller>,
    req: csi::ControllerGetVolumeRequest,
) -> Result<csi::ControllerGetVolumeResponse, Error> {
    if req.volume_id.is_empty() {
        return Err(Error::InvalidArgument("volume ID is not set".into()));
    }
    let id = match VolumeHandle::parse(&req.volume_id) {
        Ok(VolumeHandle::Filesystem(id)) => id,
        Ok(VolumeHandle::Subdirectory(id)) => return get_subdirectory(c, &id),
        Err(_) => return Err(Error::NotFound("volume not found".into())),
    };
    let fs = c.cloud.get_filesystem(id.space, id.filesystem)?;
    let mut status = csi::controller_get_volume_response::VolumeStatus::new();
    if c.mode == crate::config::AccessPolicyMode::Node {
        status.published_node_ids = published_nodes(c, &[&fs])?.remove(0);
    }
    status.volume_condition = Some(condition_of(&fs)).into();
    let mut resp = csi::ControllerGetVolumeResponse::new();
    let mtls = c.spaces.mtls_mode(id.space)?;
    resp.volume = Some(volume_of(&fs, mtls.as_ref())).into();
    resp.status = Some(status).into();
    Ok(resp)
}

/// ControllerGetVolume of a directory volume: its size is its quota's, its
/// published nodes its parent's (the ACL belongs to the parent).
fn get_subdirectory(
    c: &Controller,
    id: &SubdirId,
) -> Result<csi::ControllerGetVolumeResponse, Error> {
    let Found {
        parent,
        mtls,
        quota,
        ..
    } = find(c, id)?;
    let mut status = csi::controller_get_volume_response::VolumeStatus::new();
    if c.mode == crate::config::AccessPolicyMode::Node {
        status.published_node_ids = published_nodes(c, &[&parent])?.remove(0);
    }
    status.volume_condition = Some(quota_condition(id, quota.as_ref())).into();
    let capacity = quota
        .as_ref()
        .and_then(|q| q.max_capacity_bytes)
        .unwrap_or(0);
    let mut resp = csi::ControllerGetVolumeResponse::new();
    resp.volume = Some(subdir_volume(
        &parent,
        mtls.as_ref(),
        id,
        capacity,
        quota.is_some(),
    ))
    .into();
    resp.status = Some(status).into();
    Ok(resp)
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn only_statuses_that_do_not_pass_are_abnormal() {
        let fs = |status: &str| -> Filesystem {
            serde_json::from_value(serde_json::json!({
                "id": 101, "space_id": 7, "label": "v", "region": "us-ord", "status": status
            }))
            .unwrap()
        };
        for (status, abnormal) in [
            ("active", false),
            ("creating", false),
            ("updating", false),
            ("pending", false),
            ("resizing", false),
            ("error", true),
            ("failed", true),
            ("deleting", true),
        ] {
            let c = condition_of(&fs(status));
            assert_eq!(c.abnormal, abnormal, "{status}");
            assert_eq!(c.message, format!("NFS filesystem 101 is {status}"));
        }
    }
}
