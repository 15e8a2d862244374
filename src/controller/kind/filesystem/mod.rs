//! Whole-filesystem volumes: each volume is one Linode NFS filesystem the
//! driver made and marked (`tags::MANAGED`). Create, adopt, restore and
//! clone are `create` (with `clone` for PVC-from-PVC); the reads check a
//! filesystem's parameters and context in `validate`; snapshots are
//! `snapshots`. What destroys, copies or changes data acts only on a
//! filesystem carrying the mark; reads and node-mode publish of any
//! filesystem of the Space stay allowed, for the static PVs admins write.

mod clone;
mod create;
pub mod snapshots;
mod validate;

pub use create::create;

use super::publishing::Target;
use crate::controller::acl;
use crate::controller::lock_keys::Lock;
use crate::controller::params::{Mutable, SpaceRef};
use crate::controller::volume::{condition_of, id_of, volume_of, Described};
use crate::controller::{tags, Controller};
use crate::flow::{done, Step, Then};
use crate::handles::{VolumeHandle, VolumeId};
use crate::linode::{Filesystem, Space, Status};
use crate::proto::csi;
use crate::Error;
use std::collections::BTreeSet;
use std::sync::Arc;

/// DeleteVolume of a whole filesystem. Gone is OK; one that is not a volume
/// of the driver (a shared parent, an admin's own) is FailedPrecondition. A
/// clone's kept copy snapshot goes with it, and so does a duplicate that a
/// create whose reply was lost before a restart made.
pub fn delete(c: &Arc<Controller>, id: VolumeId) -> Result<(), Error> {
    // The filesystem's tags say whether it is a volume at all, and whether
    // a clone's copy snapshot goes with it.
    let fs = match c.cloud.get_filesystem(id.space, id.filesystem) {
        Ok(fs) => fs,
        Err(Error::NotFound(_)) => return Ok(()),
        Err(e) => return Err(e),
    };
    tags::require_volume(&fs, "deleted")?;
    match c.cloud.delete_filesystem(id.space, id.filesystem) {
        Ok(()) | Err(Error::NotFound(_)) => {}
        Err(e) => return Err(e),
    }
    clone::delete_kept_copy(c, &fs)?;
    let twins = c.cloud.find_filesystems(id.space, &fs.label, &fs.region)?;
    for twin in twins
        .iter()
        .filter(|t| t.id != fs.id && t.status != Status::Deleting)
        .filter(|t| tags::is_volume(t))
    {
        create::delete_duplicate(c, &fs, twin);
    }
    Ok(())
}

fn described(c: &Controller, fs: &Filesystem) -> Result<Described, Error> {
    let mtls = c.spaces.mtls_mode(fs.space_id)?;
    Ok(Described {
        handle: VolumeHandle::from(id_of(fs)),
        acl: id_of(fs),
        volume: volume_of(fs, mtls.as_ref()),
        condition: condition_of(fs),
    })
}

/// The filesystem `id` as it is now.
pub fn describe(c: &Controller, id: VolumeId) -> Result<Described, Error> {
    let fs = c.cloud.get_filesystem(id.space, id.filesystem)?;
    described(c, &fs)
}

/// Why `req` cannot be confirmed for filesystem `id` (see `validate`).
pub fn validate(
    c: &Controller,
    id: VolumeId,
    req: &csi::ValidateVolumeCapabilitiesRequest,
) -> Result<Option<String>, Error> {
    let fs = c.cloud.get_filesystem(id.space, id.filesystem)?;
    validate::unconfirmable(c, req, &fs)
}

/// The driver's filesystems across every Space the token sees: one
/// filtered list per Space (Linode's scarce paginated class, so never one
/// request per filesystem; a whole list where the API refuses the filter,
/// and never a filesystem without the mark, whatever the API did with it).
pub fn list(c: &Controller) -> Result<Vec<Described>, Error> {
    let mut all = Vec::new();
    for space in c.cloud.list_spaces()? {
        let found = match c.cloud.find_filesystems_by_tag(space.id, tags::MANAGED) {
            Ok(found) => found,
            // A space deleted between the two lists has no volumes.
            Err(Error::NotFound(_)) => continue,
            Err(e) => return Err(e),
        };
        for fs in found
            .iter()
            .filter(|f| f.status != Status::Deleting && tags::is_volume(f))
        {
            all.push(described(c, fs)?);
        }
    }
    Ok(all)
}

/// What the Space `space` names can still hold (its maximum less what is
/// used), or with none every Space the token sees.
pub fn capacity(c: &Controller, space: Option<&SpaceRef>) -> Result<i64, Error> {
    let spaces: Vec<Space> = match space {
        None => c.cloud.list_spaces()?,
        Some(space) => {
            // The figures change with every volume: read them, not the cache.
            let id = c.spaces.resolve(space)?.id;
            vec![c.spaces.checked(id, c.cloud.get_space(id))?]
        }
    };
    Ok(spaces
        .iter()
        .map(|s| {
            let max = s.max_capacity_bytes.unwrap_or(0);
            (max - s.used_capacity_bytes.unwrap_or(0)).max(0)
        })
        .sum())
}

/// ControllerModifyVolume of a filesystem: its tags are one PUT of the
/// filesystem (the driver's own tags kept); the squash policy goes through
/// the access-policy queue and waits for the policy to settle.
pub fn modify(c: &Arc<Controller>, vol: VolumeId, mutable: Mutable) -> Step<()> {
    mutable.check_filesystem()?;
    let guard = c.lock(Lock::Modify(vol))?;
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
        Some(squash) => acl::set_squash(c, vol, squash, false),
        None => done(()),
    };
    settled.then(move |()| {
        drop(guard);
        done(())
    })
}

/// A whole filesystem cannot grow: the API cannot change its capacity.
pub fn expand(vol: VolumeId) -> Step<i64> {
    Err(Error::FailedPrecondition(format!(
        "volume {vol} is a whole NFS filesystem, whose capacity the Linode API cannot change; only subdirectory volumes can be expanded"
    )))
}

/// A filesystem's own ACL admits the nodes of its publishes.
pub fn publish_target(vol: VolumeId) -> Target {
    Target {
        acl: vol,
        admitted_is_done: true,
    }
}
