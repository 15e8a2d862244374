//! What the poller holds under its one lock: every pending wait (a watch of
//! an object, a CreateVolume label lookup), the groups being refreshed, and
//! how a wait is answered. Answers are only queued here and fired once the
//! lock is released, so no waiter's work ever runs under it. Nothing here
//! sends a request or decides when to poll.

use super::learned::Learned;
use super::policy::WaitPolicy;
use crate::flow::{self, Slot};
use crate::linode::types::{Filesystem, FilesystemAccessPolicy, Quota, Snapshot};
use crate::linode::Cloud;
use crate::Error;
use std::collections::{BTreeMap, BTreeSet};
use std::panic::{catch_unwind, AssertUnwindSafe};
use std::sync::atomic::AtomicU64;
use std::sync::{Arc, Condvar, Mutex};
use std::time::{Duration, Instant};

pub(super) struct Shared {
    /// Tries each request once.
    pub(super) cloud: Arc<dyn Cloud>,
    pub(super) policy: WaitPolicy,
    pub(super) state: Mutex<State>,
    pub(super) changed: Condvar,
    pub(super) polls: AtomicU64,
    pub(super) failed_polls: AtomicU64,
}

#[derive(Default)]
pub(super) struct State {
    pub(super) filesystems: Vec<Watch<Filesystem>>,
    pub(super) snapshots: Vec<Watch<Snapshot>>,
    pub(super) quotas: Vec<Watch<Quota>>,
    pub(super) policies: Vec<Watch<FilesystemAccessPolicy>>,
    /// Groups whose refresh is under way.
    pub(super) polling: BTreeSet<Polling>,
    pub(super) lookups: Vec<Lookup>,
    /// When each Space's last list refresh was sent.
    pub(super) listed: BTreeMap<u64, Instant>,
    /// Groups of other kinds held back after a list, until when.
    pub(super) held: BTreeMap<Polling, Instant>,
    /// Numbers the lookups, so a refresh answers only those it was sent for.
    pub(super) next_lookup: u64,
    /// How long recent waits of each kind stayed pending.
    pub(super) learned: Learned,
}

/// `(space, filesystem, snapshot)`; unused parts are 0.
pub(super) type Key = (u64, u64, u64);

/// A group being refreshed: its kind and group key.
pub(super) type Polling = (&'static str, Key);

pub(super) struct Watch<T> {
    pub(super) key: Key,
    pub(super) what: String,
    pub(super) since: Instant,
    pub(super) delay: Duration,
    pub(super) due: Instant,
    /// How long after `since` a poll last found it pending.
    pub(super) pending_for: Duration,
    /// Whether its end teaches `learned`: not if it joined a wait of the
    /// same object, nor once a sibling's readiness sent it back to fast
    /// polls.
    pub(super) learns: bool,
    pub(super) slot: Arc<Slot<crate::Result<T>>>,
}

/// A CreateVolume's idempotency check: the filesystems of a Space that
/// carry a label in a region. It is answered by the first refresh of its
/// Space sent after it was asked.
pub(super) struct Lookup {
    pub(super) seq: u64,
    pub(super) space: u64,
    pub(super) label: String,
    pub(super) region: String,
    pub(super) since: Instant,
    pub(super) delay: Duration,
    pub(super) due: Instant,
    pub(super) failures: u32,
    pub(super) slot: Arc<Slot<crate::Result<Vec<Filesystem>>>>,
}

/// A wait of either sort, as far as ending it goes: watches and lookups
/// time out and fail alike.
pub(super) trait Wait {
    type Answer: Send + 'static;
    fn since(&self) -> Instant;
    fn slot(&self) -> &Arc<Slot<crate::Result<Self::Answer>>>;
    /// Its answer once it has waited `timeout`.
    fn late(&self, timeout: Duration) -> Error;
}

impl<T: Send + 'static> Wait for Watch<T> {
    type Answer = T;

    fn since(&self) -> Instant {
        self.since
    }

    fn slot(&self) -> &Arc<Slot<crate::Result<T>>> {
        &self.slot
    }

    fn late(&self, timeout: Duration) -> Error {
        Error::DeadlineExceeded(format!(
            "{} did not become active within {timeout:?}",
            self.what
        ))
    }
}

impl Wait for Lookup {
    type Answer = Vec<Filesystem>;

    fn since(&self) -> Instant {
        self.since
    }

    fn slot(&self) -> &Arc<Slot<crate::Result<Vec<Filesystem>>>> {
        &self.slot
    }

    fn late(&self, timeout: Duration) -> Error {
        Error::DeadlineExceeded(format!(
            "looking up NFS filesystem {:?} in space {} did not finish within {timeout:?}",
            self.label, self.space
        ))
    }
}

impl State {
    /// Forgets watches whose waiter left or was answered.
    pub(super) fn prune(&mut self) {
        self.filesystems.retain(|w| w.slot.is_waiting());
        self.snapshots.retain(|w| w.slot.is_waiting());
        self.quotas.retain(|w| w.slot.is_waiting());
        self.policies.retain(|w| w.slot.is_waiting());
        self.lookups.retain(|l| l.slot.is_waiting());
    }

    pub(super) fn is_empty(&self) -> bool {
        self.filesystems.is_empty()
            && self.snapshots.is_empty()
            && self.quotas.is_empty()
            && self.policies.is_empty()
            && self.lookups.is_empty()
    }
}

/// Watches answered under the lock, fired once it is released.
pub(super) type Fired = Vec<Box<dyn FnOnce() + Send>>;

pub(super) fn fire_all(fired: Fired) {
    for fire in fired {
        if let Err(panic) = catch_unwind(AssertUnwindSafe(fire)) {
            flow::panicked("answering a wait", &*panic);
        }
    }
}

pub(super) fn answer<V: Send + 'static>(
    fired: &mut Fired,
    slot: &Arc<Slot<crate::Result<V>>>,
    outcome: crate::Result<V>,
) {
    let slot = slot.clone();
    fired.push(Box::new(move || {
        slot.fire(outcome);
    }));
}

/// Answers and forgets each wait that `ends` gives an error.
pub(super) fn end<W: Wait>(
    waits: &mut Vec<W>,
    fired: &mut Fired,
    ends: impl Fn(&W) -> Option<Error>,
) {
    waits.retain(|w| match ends(w) {
        Some(e) => {
            answer(fired, w.slot(), Err(e));
            false
        }
        None => true,
    });
}

/// Ends the waits that have waited `timeout` by `now`.
pub(super) fn expire<W: Wait>(
    waits: &mut Vec<W>,
    now: Instant,
    timeout: Duration,
    fired: &mut Fired,
) {
    end(waits, fired, |w| {
        (now.duration_since(w.since()) >= timeout).then(|| w.late(timeout))
    });
}
