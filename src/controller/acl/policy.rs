//! Reads of filesystems' access policies: one policy from the backend
//! (landing in the ACL cache unless a write of it may still land), the
//! nodes volumes are published to (from the cache, reading what it does
//! not know), the policy a filesystem has when it is made (so a batch for
//! one just made need not read it), and the refusal a backend without
//! per-filesystem policies gets. Nothing here writes a policy: that is the
//! queue's (`acl`).

use crate::controller::state::acl::cache::{Acl, Plan, Ticket};
use crate::controller::state::controller::Controller;
use crate::controller::state::lock_keys::Doubt;
use crate::handles::VolumeId;
use crate::linode::{Cloud, Filesystem, FilesystemAccessPolicy, Status};
use crate::Error;

/// FailedPrecondition for a change to `what` that needs a filesystem's own
/// access policy, on a backend that has none.
pub fn no_filesystem_policy(what: impl std::fmt::Display) -> Error {
    Error::FailedPrecondition(format!(
        "the Linode backend has no per-filesystem access policy ({what}); use NFS_ACCESS_POLICY_MODE=space, where the Space's access policy admits the nodes, and leave out the linodenfs.csi.linode.com/filesystem-root-squash parameter"
    ))
}

/// The nodes each filesystem of `vols` is published to (node mode): the
/// Linodes its access policy allows, as the ACL cache knows them, reading those it
/// does not know and, as far as its refresh budget goes, those it knew too
/// long ago. A refresh that fails is reported from the last read; a
/// filesystem never read that cannot be read fails the call. A backend
/// without per-filesystem policies cannot say; the nodes are then reported
/// unknown (none) with a warning rather than failing the read.
pub fn published_nodes(c: &Controller, vols: &[VolumeId]) -> Result<Vec<Vec<String>>, Error> {
    let plans = c.acl_cache.plan(vols);
    let mut published = Vec::with_capacity(vols.len());
    for (&vol, plan) in vols.iter().zip(plans) {
        let nodes = match plan {
            Plan::Report(acl) => acl.published(),
            Plan::Read { ticket, last } => match read_policy(c, vol, ticket) {
                Ok(Some(policy)) => Acl::of(&policy).published(),
                Ok(None) => {
                    log::warn!(
                        "NFS filesystem {vol}: published nodes unknown, the backend has no per-filesystem access policy"
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
pub fn read_policy(
    c: &Controller,
    vol: VolumeId,
    ticket: Ticket,
) -> Result<Option<FilesystemAccessPolicy>, Error> {
    read_policy_through(c, c.cloud.as_ref(), vol, ticket)
}

/// `read_policy`, sent through `cloud`.
pub fn read_policy_through(
    c: &Controller,
    cloud: &dyn Cloud,
    vol: VolumeId,
    ticket: Ticket,
) -> Result<Option<FilesystemAccessPolicy>, Error> {
    let read = cloud.get_filesystem_access_policy(vol.space, vol.filesystem);
    let found = match &read {
        Ok(Some(policy)) => Some(Some(Acl::of(policy))),
        Ok(None) => Some(Some(Acl::NoPolicy)),
        Err(Error::NotFound(_)) => Some(None),
        Err(_) => None,
    };
    let settled = c.in_doubt.check(&Doubt::Policy(vol), "").is_ok();
    if let (Some(found), true) = (found, settled) {
        c.acl_cache.read(vol, ticket, found);
    }
    read
}

/// The access policy a filesystem has when it is made (linode-api.md
/// §3.5: disabled, an empty ACL; the squash policy is the backend's,
/// unknown here, so any squash asked for is written).
pub fn of_new(fs: &Filesystem) -> FilesystemAccessPolicy {
    FilesystemAccessPolicy {
        filesystem_id: fs.id,
        label: Some(fs.label.clone()),
        enabled: false,
        linode_acl: Vec::new(),
        squash_policy: None,
        protocols: Vec::new(),
        status: Status::Active,
        created: None,
        updated: None,
    }
}
