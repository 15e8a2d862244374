//! ControllerPublishVolume and ControllerUnpublishVolume of a directory
//! volume (node mode): a directory has no access policy of its own, so
//! its publish and unpublish act on its parent's, as `kind::publishing`
//! says.

use super::lookup::find;
use crate::controller::kind::publishing::{Target, Unpublish};
use crate::controller::state::controller::Controller;
use crate::controller::state::tags::{is_any_volume, is_pool};
use crate::handles::SubdirId;
use crate::Error;

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
