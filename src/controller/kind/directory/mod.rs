//! Directory volumes: each volume is a directory `/csi-volumes/<name>` of
//! a shared filesystem (the parent: one an admin made, which the driver
//! never deletes, or one of a pool the driver runs, `pool`), carrying the
//! driver's ownership marker and capped by a quota. The parent is mounted on the controller (`shares`), its files
//! made and removed through descriptors (`files`), its quotas found by
//! path (`quotas`) and held in the active controller's account of the
//! parent (`account`), its room counted with what calls under way claim
//! (`room`) and what deleted volumes keep (`kept`); the parents a cluster
//! uses are the ones its StorageClasses name (`classes`). A directory
//! volume is its marker: without it nothing is listed, published, grown
//! or removed. Its snapshots are parts of snapshots of the parent
//! (`snapshots`). Its usage is read through `samples`, shown by the metrics
//! (`observed`) and grown into by `autogrow`.

mod account;
mod autogrow;
mod classes;
mod create;
mod delete;
pub(in crate::controller) mod files;
mod inspect;
mod kept;
mod observed;
mod own_files;
mod parent;
mod parent_cache;
mod pool;
mod quota_changes;
mod quota_lists;
mod quotas;
mod restore;
mod room;
mod samples;
mod shares;
pub mod snapshots;
mod upkeep;

pub use account::{Accounts, Reason};
pub use autogrow::{round as autogrow_round, Autogrowth};
pub use classes::ClassParents;
pub use create::create;
pub use delete::delete;
pub use inspect::{describe, list, validate};
pub use observed::Observed;
pub use parent_cache::ParentCache;
pub use pool::{Pools, TendPolicy};
pub use quota_changes::{expand, modify};
pub use quota_lists::QuotaLists;
pub use restore::{start_watch, stop_all as stop_copies, Copies, FillWatch, Fills, Temporaries};
pub use room::Room;
pub use shares::Shares;
pub use snapshots::{GroupJobs, SnapshotBatches};
pub use upkeep::upkeep;

use super::publishing::{Target, Unpublish};
use crate::controller::params::{KindParams, Params, ParentRef};
use crate::controller::tags::{is_any_volume, is_pool};
use crate::controller::Controller;
use crate::handles::SubdirId;
use crate::Error;
use parent::{find, parent_of, room_left};

/// What the parent a directory class names can still promise: its
/// capacity less the maxima of its quotas (its root quota aside) and what
/// deleted volumes keep on it, as the room check of a create counts them;
/// for a pool, that of all its filesystems and those it may still make.
pub fn capacity(c: &Controller, params: &Params) -> Result<i64, Error> {
    let KindParams::Directory(sub) = &params.kind else {
        return Err(Error::Internal("not a subdirectory class".into()));
    };
    let region = c.cluster.region()?;
    let space = c.spaces.resolve(&params.space)?;
    if let ParentRef::Pool(pool) = &sub.parent {
        return pool::capacity(c, space.id, pool, &region);
    }
    let fs = parent_of(c, space.id, &sub.parent, &region)?;
    let mtls = c.spaces.mtls_mode(space.id)?;
    room_left(c, &fs, mtls.as_ref(), 0)
}

/// A directory has no ACL of its own: its publish admits the node to the
/// parent's, once its directory and marker are found (NotFound before any
/// ACL is touched otherwise).
pub fn publish_target(c: &Controller, id: &SubdirId) -> Result<Target, Error> {
    find(c, id)?;
    Ok(Target {
        acl: id.parent(),
        admitted_is_done: false,
    })
}

/// Unpublishing a directory from a node revokes the node from the parent
/// only when no other volume of the parent is still attached there, as the
/// cluster's VolumeAttachments say (`cluster`; read fresh, a failed read
/// fails the call). A parent that is gone, or is a whole-filesystem volume
/// (which holds no directory volumes), keeps its ACL as it is, and a pool
/// filesystem keeps the controller's own Linode.
pub fn unpublish(c: &Controller, id: &SubdirId, node: u64) -> Result<Unpublish, Error> {
    match c.cloud.get_filesystem(id.space, id.filesystem) {
        Ok(fs) if is_any_volume(&fs) => {
            return Ok(Unpublish::Keep(format!(
                "NFS filesystem {} is a volume, not a shared filesystem",
                id.parent()
            )))
        }
        // The controller mounts a pool's filesystems through the ACL entry
        // of its own Linode, which a pod's volume on that node must not take
        // away with it.
        Ok(fs) if is_pool(&fs) && c.own_linode().ok() == Some(node) => {
            return Ok(Unpublish::Keep(format!(
                "node {node} is the controller's own Linode, which pool filesystem {} admits for the controller",
                id.parent()
            )))
        }
        Ok(_) => {}
        Err(Error::NotFound(_)) => {
            return Ok(Unpublish::Keep(format!(
                "its shared filesystem {} is gone",
                id.parent()
            )))
        }
        Err(e) => return Err(e),
    }
    let siblings = c.cluster.attached_siblings(id, node).map_err(|e| {
        e.context(format!(
            "ControllerUnpublishVolume of {id} from node {node}"
        ))
    })?;
    if siblings.is_empty() {
        return Ok(Unpublish::Revoke(id.parent()));
    }
    Ok(Unpublish::Keep(format!(
        "the node stays in the access policy of filesystem {}, which it still needs for {}",
        id.parent(),
        siblings.join(", ")
    )))
}
