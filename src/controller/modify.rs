//! ControllerModifyVolume: what a VolumeAttributesClass may change on an
//! existing volume, its tags and its squash policy. Tags are one PUT of the
//! filesystem (the driver's own tags kept); the squash policy goes through
//! the access-policy queue and waits for the policy to settle like every
//! other policy write. A `subdirectory` volume's one mutable key is
//! `max-files`, a quota update waited for likewise.

use super::params::Mutable;
use super::subdirs::{find, lock_key};
use super::{tags, Controller};
use crate::flow::{done, Step, Then};
use crate::handles::{SubdirId, VolumeHandle};
use crate::limits;
use crate::linode::QuotaUpdate;
use crate::proto::csi;
use crate::Error;
use std::collections::BTreeSet;
use std::sync::Arc;

/// ControllerModifyVolume. InvalidArgument for unknown or immutable keys,
/// NotFound for a volume that does not exist; a repeat changes nothing.
pub fn modify(
    c: &Arc<Controller>,
    req: csi::ControllerModifyVolumeRequest,
) -> Step<csi::ControllerModifyVolumeResponse> {
    if req.volume_id.is_empty() {
        return Err(Error::InvalidArgument("volume ID is not set".into()));
    }
    limits::map("mutable parameters", &req.mutable_parameters)?;
    limits::map("secrets", &req.secrets)?;
    let mutable = Mutable::parse(&req.mutable_parameters)?;
    if mutable.is_empty() {
        return Err(Error::InvalidArgument(
            "mutable parameters are required".into(),
        ));
    }
    let vol = match VolumeHandle::parse(&req.volume_id) {
        Ok(VolumeHandle::Filesystem(vol)) => vol,
        Ok(VolumeHandle::Subdirectory(id)) => return modify_subdirectory(c, id, mutable),
        Err(_) => {
            return Err(Error::NotFound(format!(
                "volume {:?} not found",
                req.volume_id
            )))
        }
    };
    mutable.check_filesystem()?;
    let guard = c.locks.try_lock(&format!("modify/{vol}"))?;
    let fs = c.cloud.get_filesystem(vol.space, vol.filesystem)?;
    tags::require_volume(&fs, "modified")?;
    if let Some(asked) = &mutable.tags {
        let want: BTreeSet<&str> = asked.iter().map(String::as_str).collect();
        if tags::user_tags(&fs.tags) != want {
            let mut all = asked.clone();
            all.extend(tags::driver_tags(&fs.tags));
            c.cloud
                .update_filesystem_tags(vol.space, vol.filesystem, &all)?;
        }
    }
    let settled = match mutable.squash {
        Some(squash) => c.acl.set_squash(c, vol, squash, false),
        None => done(()),
    };
    settled.then(move |()| {
        drop(guard);
        done(csi::ControllerModifyVolumeResponse::new())
    })
}

/// `max-files` of a `subdirectory` volume: its quota's file-count limit.
fn modify_subdirectory(
    c: &Arc<Controller>,
    id: SubdirId,
    mutable: Mutable,
) -> Step<csi::ControllerModifyVolumeResponse> {
    mutable.check_subdirectory()?;
    let guard = c.locks.try_lock(&lock_key(&id))?;
    let Some(quota) = find(c, &id)?.quota else {
        return Err(Error::FailedPrecondition(format!(
            "volume {id} has no quota (its class is quota: best-effort or off), so it has no file-count limit to change"
        )));
    };
    if mutable.max_files.is_none() || quota.max_file_count == mutable.max_files {
        drop(guard);
        return done(csi::ControllerModifyVolumeResponse::new());
    }
    let update = QuotaUpdate {
        max_capacity_bytes: None,
        max_file_count: mutable.max_files,
    };
    let updated = c
        .cloud
        .update_quota(id.space, id.filesystem, quota.id, &update)
        .map_err(|e| e.error)?;
    c.poller.quota(id.space, updated, move |_| {
        drop(guard);
        done(csi::ControllerModifyVolumeResponse::new())
    })
}
