//! The queue of access-policy changes: what each filesystem's next batch
//! applies, and the order in which publish and unpublish calls arrived.
//! Data and its bookkeeping only; running the batches (and the backend
//! calls they make) is `controller::acl`'s.

use crate::flow::Handoff;
use crate::handles::VolumeId;
use crate::linode::{FilesystemAccessPolicy, SquashPolicy};
use crate::mutex::lock;
use crate::Error;
use std::collections::HashMap;
use std::sync::{Arc, Mutex};
use std::time::{Duration, Instant};

#[derive(Debug, Clone, PartialEq)]
pub enum Change {
    Allow(u64),
    Revoke(u64),
    /// `adopting`: the filesystem may predate this request, so a squash
    /// someone already chose is a conflict rather than something to overwrite.
    Squash {
        policy: SquashPolicy,
        adopting: bool,
    },
    /// Changes nothing: the filesystem was just made by this process and
    /// nobody else has written its policy, which is therefore this one (the
    /// backend's default), so the batch need not read it.
    Made(FilesystemAccessPolicy),
}

/// Where a queued change's result goes.
pub type Answer = Arc<Handoff<Result<(), Error>>>;

/// A queued change and where its result goes.
pub type Queued = (Change, Answer);

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

impl AclQueue {
    /// Numbers a publish or unpublish call as it arrives.
    pub fn arrive(&self) -> Arrival {
        let mut arrivals = lock(&self.arrivals);
        arrivals.next += 1;
        Arrival(arrivals.next)
    }

    /// Queues allowing (`allow`) or revoking `node` on `vol` for a call
    /// that arrived at `arrival`, unless a call of the other kind that
    /// arrived later has been queued already (Aborted: the CO has moved on).
    pub fn access(
        &self,
        vol: VolumeId,
        node: u64,
        allow: bool,
        arrival: Arrival,
    ) -> Result<(Answer, bool), Error> {
        let change = if allow {
            Change::Allow(node)
        } else {
            Change::Revoke(node)
        };
        // Held until the change is queued, so queue order follows arrival
        // order for each node.
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
        Ok(self.enqueue(vol, change))
    }

    /// Adds `change` to what `vol`'s next batch applies: where its result
    /// will arrive, and whether no batch is under way for `vol` yet.
    pub fn enqueue(&self, vol: VolumeId, change: Change) -> (Answer, bool) {
        let result = Handoff::new();
        let mut pending = lock(&self.pending);
        let first = !pending.contains_key(&vol);
        pending
            .entry(vol)
            .or_default()
            .push((change, result.clone()));
        (result, first)
    }

    /// Everything queued for `vol` since the last batch; `None` (and the
    /// filesystem idle again) when nothing is.
    pub fn next_batch(&self, vol: VolumeId) -> Option<Vec<Queued>> {
        let mut pending = lock(&self.pending);
        let queued = pending.get_mut(&vol)?;
        if queued.is_empty() {
            pending.remove(&vol);
            return None;
        }
        Some(std::mem::take(queued))
    }

    /// Whether a batch is under way for `vol`.
    #[cfg(test)]
    pub fn busy(&self, vol: VolumeId) -> bool {
        lock(&self.pending).contains_key(&vol)
    }
}
