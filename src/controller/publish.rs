//! Every change to a filesystem's access policy: node-mode publish and
//! unpublish (the Linode ACL) and the squash policy. The API only offers a
//! full-replace PUT with no version check, so all changes to one filesystem
//! go through one queue: callers enqueue their change and park; a batch
//! applies everything pending with one GET, at most one PUT and one wait on
//! the poller, then hands each caller its result and takes the next batch.
//! Concurrent publishes from many nodes therefore never lose each other's
//! entries and share PUTs, and no caller holds a worker while it waits.
//!
//! Two things could still undo a change the CO was told is done, and both
//! are guarded here: a publish the CO gave up on that is still making its
//! checks when the unpublish it sent next has been applied (calls for one
//! node are ordered by arrival, see `Arrivals`), and a PUT that timed out
//! but lands later (the policy is in doubt for a while, see `in_doubt`).

use super::volume_capability::check_capabilities;
use super::Controller;
use crate::flow::{done, Flow, Handoff, Step, Then};
use crate::handles::VolumeId;
use crate::limits;
use crate::linode::outcome_unknown;
use crate::linode::{FilesystemAccessPolicy, FilesystemAccessPolicyUpdate, SquashPolicy};
use crate::proto::csi;
use crate::Error;
use std::collections::{BTreeSet, HashMap};
use std::sync::{Arc, Mutex, MutexGuard};
use std::time::{Duration, Instant};

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

/// A queued change and where its result goes.
type Queued = (Change, Arc<Handoff<Result<(), Error>>>);

/// Changes waiting for the next batch, per filesystem with a batch under
/// way; a filesystem is absent when nothing is being applied to it.
#[derive(Default)]
pub struct AclQueue {
    pending: Mutex<HashMap<VolumeId, Vec<Queued>>>,
    arrivals: Mutex<Arrivals>,
}

/// The order in which publish and unpublish calls arrived, and the newest
/// one queued for each volume and node. A publish reads the policy and the
/// instance before it queues its change; if the CO gave up on it meanwhile
/// and sent the unpublish, that unpublish is queued first, and the stale
/// publish must not be applied after it: it is refused instead. Calls of
/// the same kind never refuse each other (a retry overtaking its original
/// wants the same thing).
#[derive(Default)]
struct Arrivals {
    next: u64,
    newest: HashMap<(VolumeId, u64), Arrived>,
}

struct Arrived {
    order: u64,
    allow: bool,
    at: Instant,
}

/// How long the newest call per volume and node is remembered: far longer
/// than a publish can spend on its reads (each bounded by the request
/// timeout and a few retries) before it queues.
const ARRIVALS_KEPT: Duration = Duration::from_secs(600);

/// Where a publish or unpublish call stands in the order of arrival.
#[derive(Debug, Clone, Copy)]
pub struct Arrival(u64);

fn lock<T>(m: &Mutex<T>) -> MutexGuard<'_, T> {
    m.lock().unwrap_or_else(|p| p.into_inner())
}

impl AclQueue {
    pub fn set_squash(
        &self,
        c: &Arc<Controller>,
        vol: VolumeId,
        policy: SquashPolicy,
        adopting: bool,
    ) -> Step<()> {
        self.apply(c, vol, Change::Squash { policy, adopting })
    }

    /// Numbers a publish or unpublish call as it arrives.
    pub fn arrive(&self) -> Arrival {
        let mut arrivals = lock(&self.arrivals);
        arrivals.next += 1;
        Arrival(arrivals.next)
    }

    /// Allows (`allow`) or revokes `node` on `vol` for a call that arrived
    /// at `arrival`, unless a call of the other kind that arrived later has
    /// been queued already (Aborted: the CO has moved on).
    fn access(
        &self,
        c: &Arc<Controller>,
        vol: VolumeId,
        node: u64,
        allow: bool,
        arrival: Arrival,
    ) -> Step<()> {
        let change = if allow {
            Change::Allow(node)
        } else {
            Change::Revoke(node)
        };
        let queued = {
            // Held until the change is queued, so queue order follows
            // arrival order for each node.
            let mut arrivals = lock(&self.arrivals);
            let now = Instant::now();
            arrivals
                .newest
                .retain(|_, a| now.duration_since(a.at) < ARRIVALS_KEPT);
            match arrivals.newest.get(&(vol, node)) {
                Some(newer) if newer.order > arrival.0 && newer.allow != allow => {
                    let (this, later) = if allow {
                        ("ControllerPublishVolume", "ControllerUnpublishVolume")
                    } else {
                        ("ControllerUnpublishVolume", "ControllerPublishVolume")
                    };
                    return Err(Error::Aborted(format!(
                        "{this} of volume {vol} for node {node} was overtaken by a later {later}; retry if it is still wanted"
                    )));
                }
                Some(newer) if newer.order > arrival.0 => {}
                _ => {
                    arrivals.newest.insert(
                        (vol, node),
                        Arrived {
                            order: arrival.0,
                            allow,
                            at: now,
                        },
                    );
                }
            }
            self.enqueue(vol, change)
        };
        self.start(c, vol, queued)
    }

    /// Queues `change` and parks until a batch has applied it.
    fn apply(&self, c: &Arc<Controller>, vol: VolumeId, change: Change) -> Step<()> {
        let queued = self.enqueue(vol, change);
        self.start(c, vol, queued)
    }

    /// Adds `change` to what `vol`'s next batch applies: where its result
    /// will arrive, and whether no batch is under way for `vol` yet.
    fn enqueue(&self, vol: VolumeId, change: Change) -> (Arc<Handoff<Result<(), Error>>>, bool) {
        let result = Handoff::new();
        let mut pending = lock(&self.pending);
        let first = !pending.contains_key(&vol);
        pending
            .entry(vol)
            .or_default()
            .push((change, result.clone()));
        (result, first)
    }

    /// Parks until the change queued is applied. The first change for an
    /// idle filesystem starts the batches, on this worker.
    fn start(
        &self,
        c: &Arc<Controller>,
        vol: VolumeId,
        (result, first): (Arc<Handoff<Result<(), Error>>>, bool),
    ) -> Step<()> {
        if first {
            c.rpc
                .detach("access policy batch", run_batches(c.clone(), vol));
        }
        result.receive(|r: Result<(), Error>| r.map(Flow::Ready))
    }
}

/// What an access-policy write is tracked under (see `in_doubt`).
fn policy_key(vol: VolumeId) -> String {
    format!("policy {vol}")
}

/// Applies what is pending for `vol`, batch after batch, until nothing is.
fn run_batches(c: Arc<Controller>, vol: VolumeId) -> Step<()> {
    let batch = {
        let mut pending = lock(&c.acl.pending);
        let Some(queued) = pending.get_mut(&vol) else {
            return done(());
        };
        if queued.is_empty() {
            pending.remove(&vol);
            return done(());
        }
        std::mem::take(queued)
    };
    let changes: Vec<Change> = batch.iter().map(|(change, _)| change.clone()).collect();
    apply_batch(&c, vol, &changes).then(move |results| {
        for ((_, to), result) in batch.iter().zip(results) {
            // A caller that left (cancelled, deadline) is simply not told.
            to.send(result);
        }
        run_batches(c, vol)
    })
}

/// One GET, the merged policy, a PUT only when something changes, one
/// wait; a result per change, in order. Failures of the batch as a whole
/// become every affected change's result, never the flow's.
fn apply_batch(
    c: &Arc<Controller>,
    vol: VolumeId,
    batch: &[Change],
) -> Step<Vec<Result<(), Error>>> {
    let what = format!("update the access policy of filesystem {vol}");
    if let Err(e) = c.in_doubt.check(&policy_key(vol), &what) {
        return done(batch.iter().map(|_| Err(e.clone())).collect());
    }
    let current = match c
        .cloud
        .get_filesystem_access_policy(vol.space, vol.filesystem)
    {
        Ok(p) => p,
        Err(Error::NotFound(m)) => {
            // No filesystem: nothing to revoke, nothing to allow.
            return done(
                batch
                    .iter()
                    .map(|ch| match ch {
                        Change::Revoke(_) => Ok(()),
                        _ => Err(Error::NotFound(m.clone())),
                    })
                    .collect(),
            );
        }
        Err(e) => return done(batch.iter().map(|_| Err(e.clone())).collect()),
    };
    let mut results: Vec<Result<(), Error>> = Vec::with_capacity(batch.len());
    let mut ids: BTreeSet<u64> = current.linode_ids().into_iter().collect();
    let mut enabled = current.enabled;
    let mut squash = current.squash_policy.clone();
    for change in batch {
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
        if batch.iter().all(|ch| matches!(ch, Change::Revoke(_))) {
            return done(results);
        }
        let asking: Vec<bool> = batch
            .iter()
            .map(|ch| matches!(ch, Change::Allow(_) | Change::Squash { .. }))
            .collect();
        return settled(c, vol, current).then_result(move |settled| {
            done(
                results
                    .into_iter()
                    .zip(asking)
                    .map(|(r, asks)| match (&settled, asks) {
                        (Err(e), true) => r.and_then(|_| Err(e.clone())),
                        _ => r,
                    })
                    .collect(),
            )
        });
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
        .put_filesystem_access_policy(vol.space, vol.filesystem, &update);
    let written: Step<()> = match written {
        Ok(policy) => settled(c, vol, policy),
        Err(e) => {
            if outcome_unknown(&e) {
                c.in_doubt.record(&policy_key(vol));
            }
            Err(e)
        }
    };
    written.then_result(move |written| {
        done(match written {
            Ok(()) => results,
            Err(e) => results
                .into_iter()
                .map(|r| r.and_then(|_| Err(e.clone())))
                .collect(),
        })
    })
}

/// Once the policy is `active` (parked on the poller until then).
fn settled(c: &Controller, vol: VolumeId, policy: FilesystemAccessPolicy) -> Step<()> {
    c.poller
        .filesystem_policy(vol.space, vol.filesystem, policy, |_| done(()))
}

/// The node id of a publish request: the node's Linode id. One that cannot
/// be a Linode id names no node, which CSI reports as NotFound.
pub(crate) fn linode_id(node_id: &str) -> Result<u64, Error> {
    node_id
        .parse::<u64>()
        .ok()
        .filter(|n| *n > 0 && !node_id.starts_with('0'))
        .ok_or_else(|| Error::NotFound(format!("node id \"{node_id}\" is not a Linode ID")))
}

/// ControllerPublishVolume (node mode): allow the node's Linode on the
/// filesystem. NotFound for unknown volumes or nodes; repeats are no-ops.
pub fn publish(
    c: &Arc<Controller>,
    req: csi::ControllerPublishVolumeRequest,
) -> Step<csi::ControllerPublishVolumeResponse> {
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
    limits::map("volume context", &req.volume_context)?;
    limits::map("secrets", &req.secrets)?;
    let vol = VolumeId::parse(&req.volume_id)
        .map_err(|_| Error::NotFound(format!("volume {:?} not found", req.volume_id)))?;
    let node = linode_id(&req.node_id)?;
    let arrival = c.acl.arrive();
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
        return c
            .acl
            .access(c, vol, node, true, arrival)
            .then(|()| done(csi::ControllerPublishVolumeResponse::new()));
    }
    done(csi::ControllerPublishVolumeResponse::new())
}

/// ControllerUnpublishVolume (node mode): revoke the node's Linode. An
/// empty node id, an unknown volume or a node not in the ACL is OK.
pub fn unpublish(
    c: &Arc<Controller>,
    req: csi::ControllerUnpublishVolumeRequest,
) -> Step<csi::ControllerUnpublishVolumeResponse> {
    if req.volume_id.is_empty() {
        return Err(Error::InvalidArgument("volume ID is not set".into()));
    }
    let answer = csi::ControllerUnpublishVolumeResponse::new;
    if req.node_id.is_empty() {
        return done(answer());
    }
    let (Ok(vol), Ok(node)) = (VolumeId::parse(&req.volume_id), linode_id(&req.node_id)) else {
        return done(answer());
    };
    c.acl
        .access(c, vol, node, false, c.acl.arrive())
        .then(move |()| done(answer()))
}
