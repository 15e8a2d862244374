//! Every change to a filesystem's access policy: node-mode publish and
//! unpublish (the Linode ACL) and the squash policy, for the RPCs that make
//! them (`publish`, and the filesystem kind's create and modify). The API only offers a
//! full-replace PUT with no version check, so all changes to one filesystem
//! go through one queue: callers enqueue their change and park; a batch
//! applies everything pending with one GET, at most one PUT and one wait on
//! the poller, then hands each caller its result and takes the next batch.
//! Concurrent publishes from many nodes therefore never lose each other's
//! entries and share PUTs, and no caller holds a worker while it waits.
//!
//! A backend without per-filesystem access policies fails every change here
//! with FailedPrecondition naming what to use instead; a panic in a batch
//! answers that batch's callers Internal and the next batch runs.
//!
//! Every policy read and every PUT answer here lands in the ACL cache
//! (`cache`), which listings report published nodes from.
//!
//! A directory of a shared filesystem has no ACL of its own: its publish
//! and unpublish change the parent's, through the parent's queue (which
//! filesystem, and whether a publish must queue even for a node already
//! admitted, is the volume kind's to say).
//!
//! Two things could still undo a change the CO was told is done, and both
//! are guarded here: a publish the CO gave up on that is still making its
//! checks when the unpublish it sent next has been applied (calls for one
//! node are ordered by arrival, see `Arrivals`), and a PUT that timed out
//! but lands later (the policy is in doubt for a while, see `in_doubt`).

pub mod policy;

use super::state::lock_keys::Doubt;
use crate::controller::state::acl::cache::{Acl, Written};
use crate::controller::state::acl::queue::{Answer, Arrival, Change};
use crate::controller::state::controller::Controller;
use crate::flow::{done, guarded, Flow, Step, Then};
use crate::handles::VolumeId;
use crate::linode::{FilesystemAccessPolicy, FilesystemAccessPolicyUpdate, SquashPolicy};
use crate::Error;
use policy::{no_filesystem_policy, read_policy_through};
use std::collections::BTreeSet;
use std::sync::Arc;

/// A test fault: this many access-policy batches of the test process still
/// to panic (to show a panic is answered and cleared up).
#[cfg(test)]
static BATCH_PANICS: std::sync::atomic::AtomicU32 = std::sync::atomic::AtomicU32::new(0);

/// Makes the next `n` access-policy batches of the test process panic.
#[cfg(test)]
pub fn inject_batch_panics(n: u32) {
    BATCH_PANICS.store(n, std::sync::atomic::Ordering::SeqCst);
}

#[cfg(test)]
fn take_batch_panic() -> bool {
    use std::sync::atomic::Ordering;
    BATCH_PANICS
        .fetch_update(Ordering::SeqCst, Ordering::SeqCst, |n| n.checked_sub(1))
        .is_ok()
}

/// Sets `vol`'s squash policy, parked until a batch has applied it.
pub fn set_squash(
    c: &Arc<Controller>,
    vol: VolumeId,
    policy: SquashPolicy,
    adopting: bool,
) -> Step<()> {
    let queued = c.acl.enqueue(vol, Change::Squash { policy, adopting });
    start(c, vol, queued)
}

/// Allows (`allow`) or revokes `node` on `vol` for a call that arrived at
/// `arrival` (see `AclQueue::access`), parked until a batch has applied it.
pub fn access(
    c: &Arc<Controller>,
    vol: VolumeId,
    node: u64,
    allow: bool,
    arrival: Arrival,
) -> Step<()> {
    let queued = c.acl.access(vol, node, allow, arrival)?;
    start(c, vol, queued)
}

/// Admits every node of `ids` to `vol`, a filesystem the driver made for
/// its own use (a restore's temporary one), parked until applied.
pub fn admit_all(c: &Arc<Controller>, vol: VolumeId, ids: Vec<u64>) -> Step<()> {
    let mut all = done(());
    for id in ids {
        let queued = c.acl.enqueue(vol, Change::Allow(id));
        let c = c.clone();
        all = all.then(move |()| start(&c, vol, queued));
    }
    all
}

/// Makes `vol` ready for the controller's own use in one batch: squash
/// `squash` (if any) and every node of `admit` allowed; nothing to do
/// costs nothing. `made`: the policy a filesystem this process has just
/// made has (see `policy::of_new`), so the batch need not read it.
pub fn prepare(
    c: &Arc<Controller>,
    vol: VolumeId,
    squash: Option<SquashPolicy>,
    admit: Vec<u64>,
    made: Option<FilesystemAccessPolicy>,
) -> Step<()> {
    let mut changes: Vec<Change> = squash
        .map(|policy| Change::Squash {
            policy,
            adopting: false,
        })
        .into_iter()
        .chain(admit.into_iter().map(Change::Allow))
        .collect();
    if changes.is_empty() {
        return done(());
    }
    changes.extend(made.map(Change::Made));
    // All queued before the first batch can start, so they share it.
    let queued: Vec<(Answer, bool)> = changes
        .into_iter()
        .map(|change| c.acl.enqueue(vol, change))
        .collect();
    let mut all = done(());
    for (answer, first) in queued {
        let c = c.clone();
        all = all.then(move |()| start(&c, vol, (answer, first)));
    }
    all
}

/// Parks until the change queued is applied. The first change for an
/// idle filesystem starts the batches, on this worker.
fn start(c: &Arc<Controller>, vol: VolumeId, (result, first): (Answer, bool)) -> Step<()> {
    if first {
        c.rpc
            .detach("access policy batch", run_batches(c.clone(), vol));
    }
    result.receive(|r: Result<(), Error>| r.map(Flow::Ready))
}

/// Applies what is pending for `vol`, batch after batch, until nothing is.
fn run_batches(c: Arc<Controller>, vol: VolumeId) -> Step<()> {
    let Some(batch) = c.acl.next_batch(vol) else {
        return done(());
    };
    let changes: Vec<Change> = batch.iter().map(|(change, _)| change.clone()).collect();
    let applying = c.clone();
    // A panic here or in the batch's continuations ends only this batch:
    // its callers are answered (Internal) and the next batch still runs.
    guarded("access policy batch", move || {
        #[cfg(test)]
        if take_batch_panic() {
            panic!("injected fault: access policy batch of {vol}");
        }
        apply_batch(&applying, vol, &changes)
    })
    .then_result(move |results| {
        let results = match results {
            Ok(results) => results,
            Err(e) => batch.iter().map(|_| Err(e.clone())).collect(),
        };
        for ((_, to), result) in batch.iter().zip(results) {
            // A caller that left (cancelled, deadline) is simply not told.
            to.send(result);
        }
        run_batches(c, vol)
    })
}

/// One GET (none for a filesystem just made, see `Change::Made`), the
/// merged policy, a PUT only when something changes, one wait; a result
/// per change, in order. Failures of the batch as a whole
/// become every affected change's result, never the flow's.
fn apply_batch(
    c: &Arc<Controller>,
    vol: VolumeId,
    batch: &[Change],
) -> Step<Vec<Result<(), Error>>> {
    let what = format!("update the access policy of filesystem {vol}");
    if let Err(e) = c.in_doubt.check(&Doubt::Policy(vol), &what) {
        return done(batch.iter().map(|_| Err(e.clone())).collect());
    }
    // A squash policy finishes a create whose filesystem is made (or makes
    // a pool filesystem ready): it goes before new work at the pacer.
    let cloud = if batch.iter().any(|ch| matches!(ch, Change::Squash { .. })) {
        c.finishing.clone()
    } else {
        c.cloud.clone()
    };
    let made = batch.iter().find_map(|ch| match ch {
        Change::Made(policy) => Some(Ok(Some(policy.clone()))),
        _ => None,
    });
    let read = made
        .unwrap_or_else(|| read_policy_through(c, cloud.as_ref(), vol, c.acl_cache.ticket(vol)));
    let current = match read {
        Ok(Some(p)) => p,
        Ok(None) => {
            let e = no_filesystem_policy(format!("filesystem {vol}"));
            return done(batch.iter().map(|_| Err(e.clone())).collect());
        }
        Err(Error::NotFound(m)) => {
            // No filesystem: nothing to revoke, nothing to allow.
            return done(
                batch
                    .iter()
                    .map(|ch| match ch {
                        Change::Revoke(_) | Change::Made(_) => Ok(()),
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
            Change::Made(_) => Ok(()),
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
        if batch
            .iter()
            .all(|ch| matches!(ch, Change::Revoke(_) | Change::Made(_)))
        {
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
    let writing = c.acl_cache.write(vol);
    let written = cloud.put_filesystem_access_policy(vol.space, vol.filesystem, &update);
    let written: Step<()> = match written {
        Ok(policy) => {
            writing.finish(Written::Applied(Acl::of(&policy)));
            settled(c, vol, policy)
        }
        Err(e) => {
            if e.maybe_applied {
                c.in_doubt.record(&Doubt::Policy(vol));
                writing.finish(Written::InDoubt);
            } else {
                writing.finish(Written::NotApplied);
            }
            Err(e.error)
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
