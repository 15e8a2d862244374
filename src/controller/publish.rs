//! Every change to a filesystem's access policy: node-mode publish and
//! unpublish (the Linode ACL) and the squash policy. The API only offers a
//! full-replace PUT with no version check, so all changes to one filesystem
//! go through one queue: callers enqueue their change, one of them applies
//! the whole pending batch with one GET, at most one PUT and one wait, and
//! everyone in the batch gets its result. Concurrent publishes from many
//! nodes therefore never lose each other's entries and share PUTs.

use super::provision::check_capabilities;
use super::Controller;
use crate::handles::VolumeId;
use crate::linode::{FilesystemAccessPolicy, FilesystemAccessPolicyUpdate, SquashPolicy};
use crate::proto::csi;
use crate::Error;
use std::collections::{BTreeSet, HashMap};
use std::sync::{Arc, Condvar, Mutex, MutexGuard};

#[derive(Debug, Clone, PartialEq, Eq)]
enum Change {
    Allow(u64),
    Revoke(u64),
    /// `adopting`: the filesystem may predate this request, so a squash
    /// someone already chose is a conflict rather than something to overwrite.
    Squash {
        policy: SquashPolicy,
        adopting: bool,
    },
}

#[derive(Default)]
pub struct AclQueue {
    filesystems: Mutex<HashMap<VolumeId, Arc<FsQueue>>>,
}

#[derive(Default)]
struct FsQueue {
    state: Mutex<QueueState>,
    done: Condvar,
}

#[derive(Default)]
struct QueueState {
    next_ticket: u64,
    pending: Vec<(u64, Change)>,
    results: HashMap<u64, Result<(), Error>>,
    applying: bool,
}

fn lock<T>(m: &Mutex<T>) -> MutexGuard<'_, T> {
    m.lock().unwrap_or_else(|p| p.into_inner())
}

impl AclQueue {
    pub fn set_squash(
        &self,
        c: &Controller,
        vol: VolumeId,
        policy: SquashPolicy,
        adopting: bool,
    ) -> Result<(), Error> {
        self.apply(c, vol, Change::Squash { policy, adopting })
    }

    fn apply(&self, c: &Controller, vol: VolumeId, change: Change) -> Result<(), Error> {
        let queue = lock(&self.filesystems).entry(vol).or_default().clone();
        let result = queue.run(c, vol, change);
        let mut all = lock(&self.filesystems);
        // Only the map and this call hold it: nobody is queued, drop it.
        if Arc::strong_count(&queue) == 2 {
            all.remove(&vol);
        }
        result
    }
}

impl FsQueue {
    fn run(&self, c: &Controller, vol: VolumeId, change: Change) -> Result<(), Error> {
        let mut state = lock(&self.state);
        let ticket = state.next_ticket;
        state.next_ticket += 1;
        state.pending.push((ticket, change));
        loop {
            if let Some(result) = state.results.remove(&ticket) {
                return result;
            }
            if !state.applying {
                state.applying = true;
                let batch = std::mem::take(&mut state.pending);
                drop(state);
                let results = apply_batch(c, vol, &batch);
                state = lock(&self.state);
                for ((t, _), r) in batch.iter().zip(results) {
                    state.results.insert(*t, r);
                }
                state.applying = false;
                self.done.notify_all();
                continue;
            }
            state = self.done.wait(state).unwrap_or_else(|p| p.into_inner());
        }
    }
}

/// One GET, the merged policy, a PUT only when something changes, one wait.
fn apply_batch(c: &Controller, vol: VolumeId, batch: &[(u64, Change)]) -> Vec<Result<(), Error>> {
    let current = match c
        .cloud
        .get_filesystem_access_policy(vol.space, vol.filesystem)
    {
        Ok(p) => p,
        Err(Error::NotFound(m)) => {
            // No filesystem: nothing to revoke, nothing to allow.
            return batch
                .iter()
                .map(|(_, ch)| match ch {
                    Change::Revoke(_) => Ok(()),
                    _ => Err(Error::NotFound(m.clone())),
                })
                .collect();
        }
        Err(e) => return batch.iter().map(|_| Err(e.clone())).collect(),
    };
    let mut results: Vec<Result<(), Error>> = Vec::with_capacity(batch.len());
    let mut ids: BTreeSet<u64> = current.linode_ids().into_iter().collect();
    let mut enabled = current.enabled;
    let mut squash = current.squash_policy.clone();
    for (_, change) in batch {
        results.push(match change {
            Change::Allow(id) => {
                ids.insert(*id);
                enabled = true;
                Ok(())
            }
            Change::Revoke(id) => {
                ids.remove(id);
                Ok(())
            }
            Change::Squash { policy, adopting } => {
                let chosen_before = current.updated.is_some();
                if *adopting && chosen_before && current.squash_policy.as_ref() != Some(policy) {
                    Err(Error::AlreadyExists(format!(
                        "NFS filesystem \"{}\" already exists with incompatible root squash policy",
                        current.label.clone().unwrap_or_default()
                    )))
                } else {
                    squash = Some(policy.clone());
                    Ok(())
                }
            }
        });
    }
    let before: BTreeSet<u64> = current.linode_ids().into_iter().collect();
    if ids == before && enabled == current.enabled && squash == current.squash_policy {
        // Nothing to write, but an earlier attempt's PUT may still be
        // settling: an allow or a squash asks for the policy in force, not
        // queued. Revoking a node that is not there asks for nothing, and
        // must not wait on (or fail with) a policy stuck in `updating` or
        // `error`, or the detach would never finish.
        let only_revokes = batch.iter().all(|(_, ch)| matches!(ch, Change::Revoke(_)));
        let settled = if only_revokes {
            Ok(())
        } else {
            wait_policy_active(c, vol, current)
        };
        return results
            .into_iter()
            .zip(batch)
            .map(|(r, (_, ch))| match (&settled, ch) {
                (Err(e), Change::Allow(_) | Change::Squash { .. }) => {
                    r.and_then(|_| Err(e.clone()))
                }
                _ => r,
            })
            .collect();
    }
    let update = FilesystemAccessPolicyUpdate {
        label: current.label.clone().unwrap_or_default(),
        enabled,
        linode_ids: ids.into_iter().collect(),
        squash_policy: squash.unwrap_or(SquashPolicy::RootSquash),
        protocols: if current.protocols.is_empty() {
            vec!["nfsv4".to_string()]
        } else {
            current.protocols.clone()
        },
    };
    let written = c
        .cloud
        .put_filesystem_access_policy(vol.space, vol.filesystem, &update)
        .and_then(|p| wait_policy_active(c, vol, p));
    match written {
        Ok(()) => results,
        Err(e) => results
            .into_iter()
            .map(|r| r.and_then(|_| Err(e.clone())))
            .collect(),
    }
}

fn wait_policy_active(
    c: &Controller,
    vol: VolumeId,
    policy: FilesystemAccessPolicy,
) -> Result<(), Error> {
    if policy.status == crate::linode::Status::Active {
        return Ok(());
    }
    crate::linode::wait_until_active(
        &format!("NFS filesystem {} access policy", vol.filesystem),
        &c.wait,
        || {
            c.cloud
                .get_filesystem_access_policy(vol.space, vol.filesystem)
        },
    )
    .map(|_| ())
}

/// The node id of a publish request: the node's Linode id. One that cannot
/// be a Linode id names no node, which CSI reports as NotFound.
fn linode_id(node_id: &str) -> Result<u64, Error> {
    node_id
        .parse::<u64>()
        .ok()
        .filter(|n| *n > 0 && !node_id.starts_with('0'))
        .ok_or_else(|| Error::NotFound(format!("node id \"{node_id}\" is not a Linode ID")))
}

/// ControllerPublishVolume (node mode): allow the node's Linode on the
/// filesystem. NotFound for unknown volumes or nodes; repeats are no-ops.
pub fn publish(
    c: &Controller,
    req: csi::ControllerPublishVolumeRequest,
) -> Result<csi::ControllerPublishVolumeResponse, Error> {
    if req.volume_id.is_empty() {
        return Err(Error::InvalidArgument("volume ID is not set".into()));
    }
    if req.node_id.is_empty() {
        return Err(Error::InvalidArgument("node id is required".into()));
    }
    let Some(cap) = req.volume_capability.as_ref() else {
        return Err(Error::InvalidArgument(
            "volume capability is required".into(),
        ));
    };
    check_capabilities(std::slice::from_ref(cap))?;
    let vol = VolumeId::parse(&req.volume_id)
        .map_err(|_| Error::NotFound(format!("volume {:?} not found", req.volume_id)))?;
    let node = linode_id(&req.node_id)?;
    let policy = c
        .cloud
        .get_filesystem_access_policy(vol.space, vol.filesystem)?;
    if !(policy.enabled && policy.linode_ids().contains(&node)) {
        // CSI wants NotFound for a node that does not exist; a token without
        // read access to instances must not block attaching, though: the
        // policy PUT rejects unknown ids anyway.
        match c.cloud.get_instance(node) {
            Err(e @ Error::NotFound(_)) => return Err(e),
            Err(e) => log::warn!("ControllerPublishVolume: cannot check Linode {node}: {e}"),
            Ok(_) => {}
        }
        c.acl.apply(c, vol, Change::Allow(node))?;
    }
    Ok(csi::ControllerPublishVolumeResponse::new())
}

/// ControllerUnpublishVolume (node mode): revoke the node's Linode. An
/// empty node id, an unknown volume or a node not in the ACL is OK.
pub fn unpublish(
    c: &Controller,
    req: csi::ControllerUnpublishVolumeRequest,
) -> Result<csi::ControllerUnpublishVolumeResponse, Error> {
    if req.volume_id.is_empty() {
        return Err(Error::InvalidArgument("volume ID is not set".into()));
    }
    let done = csi::ControllerUnpublishVolumeResponse::new();
    if req.node_id.is_empty() {
        return Ok(done);
    }
    let (Ok(vol), Ok(node)) = (VolumeId::parse(&req.volume_id), linode_id(&req.node_id)) else {
        return Ok(done);
    };
    c.acl.apply(c, vol, Change::Revoke(node))?;
    Ok(done)
}
