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

use super::publishing::{Target, Unpublish};
use crate::controller::acl;
use crate::controller::request::answer::{condition_of, id_of, volume_of, Described};
use crate::controller::request::params::{Mutable, SpaceRef};
use crate::controller::state::controller::Controller;
use crate::controller::state::lock_keys::Lock;
use crate::controller::state::tags;
use crate::controller::state::tags::Maker;
use crate::flow::{done, Step, Then};
use crate::handles::{VolumeHandle, VolumeId};
use crate::linode::{Filesystem, Space, Status};
use crate::proto::csi;
use crate::Error;
use std::collections::BTreeSet;
use std::sync::Arc;

/// DeleteVolume of a whole filesystem. Gone is OK, and so is another
/// cluster's (untouched); one that is not a volume of the driver (a shared
/// parent, an admin's own) is FailedPrecondition. A
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
    // Another cluster's volume does not exist here: deleting it is done.
    if c.marks.maker(&fs.tags) == Maker::Other {
        log::info!("DeleteVolume {id}: NFS filesystem {id} is another cluster's; left untouched");
        return Ok(());
    }
    c.marks.require_volume(&fs, "deleted")?;
    match c.cloud.delete_filesystem(id.space, id.filesystem) {
        Ok(()) | Err(Error::NotFound(_)) => {}
        Err(e) => return Err(e),
    }
    clone::delete_kept_copy(c, &fs)?;
    let twins = c.cloud.find_filesystems(id.space, &fs.label, &fs.region)?;
    for twin in twins
        .iter()
        .filter(|t| t.id != fs.id && t.status != Status::Deleting)
        .filter(|t| c.marks.is_volume(t))
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

/// Filesystem `id`, NotFound when it is another cluster's: its handle
/// means nothing here.
fn this_clusters(c: &Controller, id: VolumeId) -> Result<Filesystem, Error> {
    let fs = c.cloud.get_filesystem(id.space, id.filesystem)?;
    if c.marks.maker(&fs.tags) == Maker::Other {
        return Err(Error::NotFound(format!(
            "volume {id} not found (NFS filesystem {id} is another cluster's)"
        )));
    }
    Ok(fs)
}

/// The filesystem `id` as it is now.
pub fn describe(c: &Controller, id: VolumeId) -> Result<Described, Error> {
    described(c, &this_clusters(c, id)?)
}

/// Why `req` cannot be confirmed for filesystem `id` (see `validate`).
pub fn validate(
    c: &Controller,
    id: VolumeId,
    req: &csi::ValidateVolumeCapabilitiesRequest,
) -> Result<Option<String>, Error> {
    validate::unconfirmable(c, req, &this_clusters(c, id)?)
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
            .filter(|f| f.status != Status::Deleting && c.marks.is_volume(f))
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
    c.marks.require_volume(&fs, "modified")?;
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

/// A volume's own ACL admits the nodes of its publishes: NotFound for a
/// filesystem that is gone or another cluster's, FailedPrecondition for
/// one that is no volume, before any ACL is touched.
pub fn publish_target(c: &Controller, vol: VolumeId) -> Result<Target, Error> {
    // A read the backend fails now (a 500, a dropped connection) is one
    // the attacher's retry gets past: never Internal for a check alone.
    let fs = this_clusters(c, vol).map_err(|e| match e {
        Error::Internal(why) | Error::DeadlineExceeded(why) => {
            Error::Unavailable(format!("volume {vol} cannot be checked now ({why}); retry"))
        }
        e => e,
    })?;
    c.marks.require_volume(&fs, "published")?;
    Ok(Target {
        acl: vol,
        admitted_is_done: true,
    })
}

/// What unpublishing volume `vol` does: revokes the node from its ACL,
/// unless the filesystem is another cluster's (whose ACL is its own).
pub fn unpublish(c: &Controller, vol: VolumeId) -> Result<Unpublish, Error> {
    match c.cloud.get_filesystem(vol.space, vol.filesystem) {
        Ok(fs) if c.marks.maker(&fs.tags) == Maker::Other => Ok(Unpublish::Keep(format!(
            "NFS filesystem {vol} is another cluster's volume"
        ))),
        Ok(_) | Err(Error::NotFound(_)) => Ok(Unpublish::Revoke(vol)),
        Err(e) => Err(e),
    }
}
