//! The reads of directory volumes: one volume as it is now (its parent's
//! context, its quota's size and condition), what ValidateVolumeCapabilities
//! can confirm for it, and every volume of the parents the controller
//! knows (those the StorageClasses name, see `classes`, and those mounted
//! here): each parent's ownership markers are its volumes, each with its
//! quota if it has one (a quota without a marker is an admin's, never a
//! volume). Reads only.

use super::lookup::{find, find_for, quota_list, Found};
use crate::controller::kind::directory::ledger::account::Purpose;
use crate::controller::kind::directory::ledger::quotas;
use crate::controller::kind::directory::parent::classes::Resolved;
use crate::controller::kind::directory::parent::files;
use crate::controller::request::answer::{directory_volume, quota_condition, Described};
use crate::controller::request::params::{KindParams, Mutable, Params, ParentRef, SpaceRef};
use crate::controller::request::volume_capability::capability_problem;
use crate::controller::state::controller::Controller;
use crate::controller::state::tags;
use crate::controller::state::tags::is_any_volume;
use crate::handles::{self, DirName, SubdirId, VolumeHandle, VolumeId};
use crate::linode::{Filesystem, Quota, Status};
use crate::proto::csi;
use crate::Error;
use std::collections::{BTreeMap, BTreeSet};

/// Directory volume `id` as CSI reports it, with its quota (if any).
fn described(
    parent: &Filesystem,
    mtls: Option<&crate::linode::MtlsMode>,
    id: &SubdirId,
    quota: Option<&Quota>,
) -> Described {
    let capacity = quota.and_then(|q| q.max_capacity_bytes).unwrap_or(0);
    Described {
        handle: VolumeHandle::from(id.clone()),
        acl: id.parent(),
        volume: directory_volume(parent, mtls, id, capacity, quota.is_some()),
        condition: quota_condition(id, quota),
    }
}

/// Directory volume `id` as it is now (its quota freshly listed, for its
/// condition); its published nodes are its parent's (the ACL belongs to
/// the parent).
pub fn describe(c: &Controller, id: &SubdirId) -> Result<Described, Error> {
    let Found {
        parent,
        mtls,
        quota,
        ..
    } = find_for(c, id, Purpose::Fresh)?;
    Ok(described(&parent, mtls.as_ref(), id, quota.as_ref()))
}

/// Why `req` cannot be confirmed for directory volume `id`, or `None`.
pub fn validate(
    c: &Controller,
    id: &SubdirId,
    req: &csi::ValidateVolumeCapabilitiesRequest,
) -> Result<Option<String>, Error> {
    let found = find(c, id)?;
    let volume = directory_volume(
        &found.parent,
        found.mtls.as_ref(),
        id,
        0,
        found.quota.is_some(),
    );
    subdirectory_problem(c, req, id, &found.parent, &volume)
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
        let KindParams::Directory(sub) = &params.kind else {
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
            ParentRef::Pool(pool) => !c.marks.holds_pool_volumes(parent, &pool.name),
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

/// Every directory volume of the parents the controller knows.
pub fn list(c: &Controller) -> Result<Vec<Described>, Error> {
    let mut all = Vec::new();
    for parent in parents(c)? {
        all.extend(directories_of(c, parent)?);
    }
    Ok(all)
}

/// The shared parents the controller knows: those the StorageClasses
/// name, and those it has mounted before.
pub fn parents(c: &Controller) -> Result<BTreeSet<VolumeId>, Error> {
    let mut parents = c.shares.known();
    if let Some(classes) = c.shares.classes() {
        parents.extend(classes.parents(|space, parent| resolve(c, space, parent))?);
    }
    Ok(parents)
}

/// The directory volumes of shared parent `vol`: those its markers
/// record, each with its quota if it has one. A parent that is gone, or
/// is a whole-filesystem volume, has none; one that cannot be mounted is
/// left out, with a warning.
fn directories_of(c: &Controller, vol: VolumeId) -> Result<Vec<Described>, Error> {
    let parent = match c.cloud.get_filesystem(vol.space, vol.filesystem) {
        Ok(fs) if fs.status != Status::Deleting && !is_any_volume(&fs) => fs,
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
    let marked: Vec<SubdirId> = files::volumes(&root, vol, c.marks.cluster())?
        .into_iter()
        .map(|(id, _)| id)
        .collect();
    if marked.is_empty() {
        return Ok(Vec::new());
    }
    let quotas = match quota_list(c, &parent, Purpose::Read).1 {
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
            described(&parent, mtls.as_ref(), &id, quota.as_ref())
        })
        .collect())
}

/// The filesystem `parent` of `space` names.
fn resolve(c: &Controller, space: &SpaceRef, parent: &ParentRef) -> Result<Resolved, Error> {
    let gone = |e: &Error| {
        matches!(
            e,
            Error::NotFound(_) | Error::FailedPrecondition(_) | Error::InvalidArgument(_)
        )
    };
    let space = match space {
        SpaceRef::Id(id) => *id,
        SpaceRef::Label(_) => match c.spaces.resolve(space) {
            Ok(s) => s.id,
            Err(e) if gone(&e) => return Ok(Resolved::Known(Vec::new())),
            Err(e) => return Err(e),
        },
    };
    let vol = |fs: &Filesystem| VolumeId {
        space,
        filesystem: fs.id,
    };
    let label = match parent {
        ParentRef::Id(id) => {
            return Ok(Resolved::Known(vec![VolumeId {
                space,
                filesystem: *id,
            }]))
        }
        ParentRef::Pool(pool) => {
            return match c
                .cloud
                .find_filesystems_by_tag(space, &tags::pool(&pool.name))
            {
                Ok(found) => Ok(Resolved::Known(
                    found
                        .iter()
                        // A filesystem the pool had before clusters had
                        // identities still holds this cluster's volumes.
                        .filter(|fs| {
                            c.marks.holds_pool_volumes(fs, &pool.name)
                                && fs.status != Status::Deleting
                        })
                        .map(vol)
                        .collect(),
                )),
                Err(e) if gone(&e) => Ok(Resolved::Known(Vec::new())),
                Err(e) => Err(e),
            };
        }
        ParentRef::Label(label) => label,
    };
    let region = match c.cluster.region() {
        Ok(r) => r,
        Err(e) => return Ok(Resolved::NotNow(e)),
    };
    let found = match c.cloud.find_filesystems(space, label, &region) {
        Ok(found) => found,
        Err(e) if gone(&e) => return Ok(Resolved::Known(Vec::new())),
        Err(e) => return Err(e),
    };
    let shared: Vec<&Filesystem> = found
        .iter()
        .filter(|fs| fs.status != Status::Deleting && !is_any_volume(fs))
        .collect();
    Ok(Resolved::Known(match shared.as_slice() {
        [fs] => vec![vol(fs)],
        _ => Vec::new(),
    }))
}
