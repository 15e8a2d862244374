//! CreateVolume and DeleteVolume of `subdirectory` volumes: a directory of
//! an existing shared filesystem (the parent, which the driver never makes
//! or deletes) with its ownership marker and, unless the class says
//! otherwise, a backend quota that caps it. Retries and restarts are
//! idempotent: the directory name is deterministic, the marker says whose
//! it is, the quota is found by path. The parent is mounted through
//! `shares`, its files changed through `directories`, its quotas found
//! through `quotas`; waits park on the poller.

use super::directories::{self, Marker, Ownership, Removed};
use super::inspect::volume_of;
use super::params::{ParentRef, QuotaMode, SubdirParams};
use super::provision::{require_mount_target, CreateRequest};
use super::room::Listed;
use super::tags::is_volume;
use super::{kept, quotas, Controller};
use crate::flow::{done, Step, Then};
use crate::handles::{self, DirName, SubdirId, VolumeId};
use crate::linode::{Filesystem, MtlsMode, Quota, Status, WriteError};
use crate::proto::csi;
use crate::Error;
use std::path::PathBuf;
use std::sync::Arc;
use std::time::Instant;

/// The lock every RPC that changes directory volume `id` takes.
pub(super) fn lock_key(id: &SubdirId) -> String {
    format!("subdirectory/{id}")
}

/// What a create's quota POST is tracked under (see `in_doubt`).
fn quota_key(id: &SubdirId) -> String {
    format!("quota {id}")
}

/// The shared parent a class names, checked: active, not a volume of this
/// driver, in the cluster's region, with a mount target.
pub(super) fn parent_of(
    c: &Controller,
    space_id: u64,
    parent: &ParentRef,
    region: &str,
) -> Result<Filesystem, Error> {
    let fs = match parent {
        ParentRef::Id(id) => match c.cloud.get_filesystem(space_id, *id) {
            Ok(fs) => fs,
            Err(Error::NotFound(_)) => {
                return Err(Error::NotFound(format!(
                    "shared NFS filesystem {space_id}/{id} was not found"
                )))
            }
            Err(e) => return c.spaces.checked(space_id, Err(e)),
        },
        ParentRef::Label(label) => {
            let mut found: Vec<Filesystem> = c
                .spaces
                .checked(space_id, c.cloud.find_filesystems(space_id, label, region))?
                .into_iter()
                .filter(|fs| fs.status != Status::Deleting)
                .collect();
            match found.len() {
                0 => {
                    return Err(Error::NotFound(format!(
                        "shared NFS filesystem \"{label}\" was not found in space {space_id}, region {region}"
                    )))
                }
                1 => found.remove(0),
                _ => {
                    return Err(Error::FailedPrecondition(format!(
                        "multiple NFS filesystems match label \"{label}\" in space {space_id}"
                    )))
                }
            }
        }
    };
    if is_volume(&fs) {
        return Err(Error::FailedPrecondition(format!(
            "NFS filesystem {space_id}/{} is a volume of this driver, not a shared filesystem",
            fs.id
        )));
    }
    if fs.status != Status::Active {
        return Err(Error::FailedPrecondition(format!(
            "shared NFS filesystem {space_id}/{} is {}, not active",
            fs.id, fs.status
        )));
    }
    if fs.region != region {
        return Err(Error::FailedPrecondition(format!(
            "shared NFS filesystem {space_id}/{} is in region \"{}\", the cluster in \"{region}\"",
            fs.id, fs.region
        )));
    }
    require_mount_target(&fs)?;
    Ok(fs)
}

/// The CSI volume of directory `id` of `parent`.
pub(super) fn subdir_volume(
    parent: &Filesystem,
    mtls: Option<&MtlsMode>,
    id: &SubdirId,
    capacity: i64,
    capped: bool,
) -> csi::Volume {
    let mut v = volume_of(parent, mtls);
    v.volume_id = id.to_string();
    v.capacity_bytes = capacity;
    v.volume_context.insert(
        handles::CTX_VOLUME_TYPE.to_string(),
        "subdirectory".to_string(),
    );
    if !capped {
        v.volume_context
            .insert(handles::CTX_QUOTA.to_string(), "absent".to_string());
    }
    v
}

/// The quotas of `parent` a create sees: `Err` with the reason when the
/// backend has no quota API.
fn quotas_of(c: &Controller, id: &SubdirId) -> Result<Result<Vec<Quota>, String>, Error> {
    match c.cloud.list_quotas(id.space, id.filesystem) {
        Ok(quotas) => Ok(Ok(quotas)),
        Err(Error::Unimplemented(why)) => Ok(Err(why)),
        Err(e) => Err(e),
    }
}

/// Everything a create needs once the parent is known.
struct Making {
    c: Arc<Controller>,
    id: SubdirId,
    parent: Filesystem,
    mtls: Option<MtlsMode>,
    root: PathBuf,
    sub: SubdirParams,
    capacity: i64,
    max_files: Option<i64>,
}

impl Making {
    fn answer(&self, capped: bool) -> csi::CreateVolumeResponse {
        let mut resp = csi::CreateVolumeResponse::new();
        resp.volume = Some(subdir_volume(
            &self.parent,
            self.mtls.as_ref(),
            &self.id,
            self.capacity,
            capped,
        ))
        .into();
        resp
    }

    /// No quota to be had: `required` undoes the directory and fails,
    /// `best-effort` hands the volume out saying it is uncapped.
    fn without_quota(self, why: String) -> Step<csi::CreateVolumeResponse> {
        match self.sub.quota {
            QuotaMode::Required => {
                directories::roll_back(&self.root, &self.id.name, &self.id.to_string())?;
                Err(Error::FailedPrecondition(format!(
                    "quota: required, but no quota could be made for {}: {why}",
                    self.id
                )))
            }
            QuotaMode::BestEffort | QuotaMode::Off => {
                log::warn!("volume {} has no quota: {why}", self.id);
                done(self.answer(false))
            }
        }
    }

    /// Waits for `quota` to be active; one that ends in `error` is removed
    /// with the directory.
    fn wait(self, quota: Quota) -> Step<csi::CreateVolumeResponse> {
        let (c, quota_id) = (self.c.clone(), quota.id);
        c.poller
            .quota(self.id.space, quota, |_| done(()))
            .then_result(move |waited| match waited {
                Ok(()) => done(self.answer(true)),
                Err(Error::FailedPrecondition(why)) => {
                    match self
                        .c
                        .cloud
                        .delete_quota(self.id.space, self.id.filesystem, quota_id)
                    {
                        Ok(()) | Err(Error::NotFound(_)) => {}
                        Err(e) => return Err(e.context("remove the failed quota")),
                    }
                    directories::roll_back(&self.root, &self.id.name, &self.id.to_string())?;
                    Err(Error::FailedPrecondition(format!(
                        "the quota of volume {} failed and was removed with its directory: {why}",
                        self.id
                    )))
                }
                Err(e) => Err(e),
            })
    }
}

/// CreateVolume of a `subdirectory` class.
pub(super) fn create(
    c: &Arc<Controller>,
    want: Arc<CreateRequest>,
) -> Step<csi::CreateVolumeResponse> {
    let sub = want
        .params
        .subdirectory
        .clone()
        .ok_or_else(|| Error::Internal("not a subdirectory class".into()))?;
    let region = c.cluster.region()?;
    let space = c.spaces.resolve(&want.params.space)?;
    let parent = parent_of(c, space.id, &sub.parent, &region)?;
    let mtls = c.spaces.mtls_mode(space.id)?;
    let id = SubdirId {
        space: space.id,
        filesystem: parent.id,
        name: DirName::for_name(&want.name),
    };
    let guard = c.locks.try_lock(&lock_key(&id))?;
    let root = c.shares.root(&parent, mtls.as_ref())?;
    let marker = Marker {
        volume_id: id.to_string(),
        csi_name: want.name.clone(),
        on_delete: sub.on_delete,
        retained: false,
        archive_to: None,
    };
    // Another name's, another setting's or a foreign directory: refused
    // before anything is claimed or made.
    let repeat = directories::prior(&root, &id.name, &marker)?;
    let kept = kept::total(&root)?;
    let read_at = Instant::now();
    let quotas = match sub.quota {
        QuotaMode::Off => Err("the class asks for none (quota: off)".to_string()),
        QuotaMode::Required | QuotaMode::BestEffort => quotas_of(c, &id)?,
    };
    if let (QuotaMode::Required, Err(why)) = (sub.quota, &quotas) {
        return Err(Error::FailedPrecondition(format!(
            "quota: required, but the backend cannot cap volume {id}: {why}"
        )));
    }
    let existing = quotas
        .as_ref()
        .ok()
        .and_then(|all| quotas::of_volume(all, &parent, &id.name).cloned());
    let claim = match (&existing, &quotas) {
        // Only the driver's own attempt, whose marker comes first, can
        // have made a quota at the volume's path.
        (Some(q), _) if !repeat => {
            return Err(Error::FailedPrecondition(format!(
                "NFS quota {} on path {} of shared NFS filesystem {} was not made by the driver; it is left alone",
                q.id,
                q.path,
                id.parent()
            )))
        }
        (Some(q), _) if q.max_capacity_bytes != Some(want.capacity) => {
            return Err(Error::AlreadyExists(format!(
                "volume {id} already exists with incompatible capacity {}",
                q.max_capacity_bytes.unwrap_or(0)
            )))
        }
        (None, Ok(all)) => {
            let listed = Listed {
                quotas: all,
                read_at,
                kept,
            };
            Some(
                c.room
                    .claim(&listed, &parent, &id.name, want.capacity)
                    .map_err(|no| no.for_create())?,
            )
        }
        _ => None,
    };
    let owner = Ownership {
        mode: sub.mode,
        uid: sub.uid,
        gid: sub.gid,
    };
    directories::create(&root, &id.name, &marker, owner)?;
    let making = Making {
        c: c.clone(),
        id,
        parent,
        mtls,
        root,
        max_files: want.max_files.or(sub.max_files),
        sub,
        capacity: want.capacity,
    };
    let made = match (quotas, existing) {
        (Err(why), _) => making.without_quota(why),
        (Ok(_), Some(quota)) => {
            c.in_doubt.clear(&quota_key(&making.id));
            making.wait(quota)
        }
        (Ok(_), None) => post_quota(making),
    };
    made.then(move |resp| {
        drop((guard, claim));
        done(resp)
    })
}

/// POSTs the volume's quota and waits for it. A POST whose outcome is
/// unknown is looked up by path before anything else happens, as a
/// filesystem create is by label.
fn post_quota(m: Making) -> Step<csi::CreateVolumeResponse> {
    let key = quota_key(&m.id);
    m.c.in_doubt
        .check(&key, &format!("create the quota of volume {}", m.id))?;
    let posted = quotas::post(
        m.c.cloud.as_ref(),
        &m.parent,
        &m.id,
        m.capacity,
        m.max_files,
    );
    match posted {
        Ok(quota) => m.wait(quota),
        Err(WriteError {
            error:
                e @ (Error::InvalidArgument(_) | Error::PermissionDenied(_) | Error::Unimplemented(_)),
            ..
        }) => m.without_quota(e.to_string()),
        Err(WriteError {
            error: e @ (Error::Unavailable(_) | Error::Internal(_) | Error::DeadlineExceeded(_)),
            maybe_applied,
        }) => {
            let found =
                m.c.cloud
                    .list_quotas(m.id.space, m.id.filesystem)
                    .ok()
                    .and_then(|all| quotas::of_volume(&all, &m.parent, &m.id.name).cloned());
            match found {
                Some(quota) => {
                    log::warn!(
                        "quota create of volume {} reported {e}; adopting quota {}",
                        m.id,
                        quota.id
                    );
                    m.wait(quota)
                }
                None => {
                    if maybe_applied {
                        m.c.in_doubt.record(&key);
                    }
                    Err(e)
                }
            }
        }
        Err(WriteError { error, .. }) => Err(error),
    }
}

/// DeleteVolume of `{s}/{f}/{name}`. A parent that is gone took the
/// directory with it (OK), and so is one that is a whole-filesystem volume
/// (it holds no directory volumes: nothing of it is touched); one that
/// cannot be reached or mounted fails the call, to be retried. The
/// directory goes first (as its marker says), its quota next, so a delete
/// stopped halfway leaves the cap in place, and the marker last. Without
/// the marker there is no volume: a quota at its path is someone else's.
pub(super) fn delete(c: &Arc<Controller>, id: SubdirId) -> Result<(), Error> {
    let _guard = c.locks.try_lock(&lock_key(&id))?;
    let parent = match c.cloud.get_filesystem(id.space, id.filesystem) {
        Ok(fs) if is_volume(&fs) => {
            log::info!(
                "DeleteVolume {id}: NFS filesystem {} is a volume, not a shared filesystem; there is no such directory volume",
                id.parent()
            );
            return Ok(());
        }
        Ok(fs) => fs,
        Err(Error::NotFound(_)) => {
            log::info!(
                "DeleteVolume {id}: its shared filesystem is gone, and the directory with it"
            );
            return Ok(());
        }
        Err(e) => return Err(e),
    };
    let mtls = c.spaces.mtls_mode(id.space)?;
    let root = c.shares.root(&parent, mtls.as_ref())?;
    let quotas = match c.cloud.list_quotas(id.space, id.filesystem) {
        Ok(all) => all,
        Err(Error::Unimplemented(_) | Error::NotFound(_)) => Vec::new(),
        Err(e) => return Err(e),
    };
    let own: Vec<&Quota> = quotas
        .iter()
        .filter(|q| quotas::is_for(q, &parent, &id.name))
        .collect();
    // What an archived or retained directory keeps: what its quota saw.
    let kept_bytes = own
        .first()
        .and_then(|q| q.used_capacity_bytes.or(q.max_capacity_bytes))
        .unwrap_or(0);
    match directories::remove(&root, &id.name, &id.to_string(), kept_bytes)? {
        Removed::Gone => {
            c.in_doubt.clear(&quota_key(&id));
            return Ok(());
        }
        Removed::Archived(to) => log::info!("DeleteVolume {id}: archived to {}", to.display()),
        Removed::Retained => {
            log::info!("DeleteVolume {id}: directory retained (on-delete: retain)")
        }
        Removed::Deleted => {}
    }
    for q in own {
        match c.cloud.delete_quota(id.space, id.filesystem, q.id) {
            Ok(()) | Err(Error::NotFound(_)) => {}
            Err(e) => return Err(e),
        }
    }
    c.in_doubt.clear(&quota_key(&id));
    directories::forget(&root, &id.name)
}

/// The parent of an existing directory volume, NotFound when it is gone or
/// is no shared filesystem (a whole-filesystem volume of the driver).
pub(super) fn existing_parent(c: &Controller, parent: VolumeId) -> Result<Filesystem, Error> {
    match c.cloud.get_filesystem(parent.space, parent.filesystem) {
        Ok(fs) if fs.status != Status::Deleting && !is_volume(&fs) => Ok(fs),
        Ok(_) | Err(Error::NotFound(_)) => Err(Error::NotFound(format!(
            "shared NFS filesystem {parent} was not found"
        ))),
        Err(e) => Err(e),
    }
}

/// What is known of an existing directory volume.
pub(super) struct Found {
    pub parent: Filesystem,
    pub mtls: Option<MtlsMode>,
    /// Where the parent is mounted here.
    pub root: PathBuf,
    /// Its quota, if it has one...
    pub quota: Option<Quota>,
    /// ...among every quota of the parent (none without the quota API)...
    pub quotas: Vec<Quota>,
    /// ...listed from this moment on.
    pub read_at: Instant,
}

/// The current state of directory volume `id`: NotFound unless the
/// driver's marker says it exists (a quota at its path alone is not a
/// volume: an admin may have made it).
pub(super) fn find(c: &Controller, id: &SubdirId) -> Result<Found, Error> {
    let parent = existing_parent(c, id.parent())?;
    let mtls = c.spaces.mtls_mode(id.space)?;
    let root = c.shares.root(&parent, mtls.as_ref())?;
    match directories::read_marker(&root, &id.name)? {
        Some(m) if m.volume_id == id.to_string() && !m.retained => {}
        _ => return Err(Error::NotFound(format!("volume {id} not found"))),
    }
    let read_at = Instant::now();
    let quotas = match c.cloud.list_quotas(id.space, id.filesystem) {
        Ok(all) => all,
        Err(Error::Unimplemented(_)) => Vec::new(),
        Err(e) => return Err(e),
    };
    let quota = quotas::of_volume(&quotas, &parent, &id.name).cloned();
    Ok(Found {
        parent,
        mtls,
        root,
        quota,
        quotas,
        read_at,
    })
}
