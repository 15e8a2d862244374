//! How the watches of any kind of object are refreshed: what a kind must
//! tell the poller (`Target`), which of its groups are due, the one
//! attempt at a group's refresh (off the lock, counted, a panic caught),
//! and settling each watch from what that refresh read. It knows no kind's
//! requests and runs no loop: the kinds say how they are read, the poller
//! thread says when.

use super::policy::WaitPolicy;
use super::waits::{answer, end, fire_all, Fired, Key, Polling, Shared, State, Watch};
use crate::flow;
use crate::linode::pacer::RequestClass;
use crate::linode::types::{HasStatus, Readiness};
use crate::linode::Cloud;
use crate::mutex::lock;
use crate::Error;
use std::collections::{BTreeMap, BTreeSet};
use std::panic::{catch_unwind, AssertUnwindSafe};
use std::sync::atomic::Ordering;
use std::sync::Arc;
use std::time::{Duration, Instant};

/// At most this many groups are being refreshed at once, each on its own
/// short-lived thread, so a group whose requests hang holds back no other.
pub(super) const MAX_POLLS_IN_FLIGHT: usize = 8;

/// One group's refresh, ready to run off the lock.
pub(super) type Job = Box<dyn FnOnce() + Send>;

/// What the poller can watch: how its watches are grouped, and how one
/// group is refreshed in as few requests as the API allows.
pub(super) trait Target: HasStatus + Clone + Send + 'static {
    /// The kind as the metrics name it.
    const KIND: &'static str;
    /// Keys sharing a group are refreshed together.
    fn group(key: Key) -> Key;
    fn watches(state: &mut State) -> &mut Vec<Watch<Self>>;
    /// The objects of `keys` (all in `group`) that exist.
    fn fetch(cloud: &dyn Cloud, group: Key, keys: &[Key]) -> crate::Result<BTreeMap<Key, Self>>;
    /// Whether refreshing `keys` of one group costs a list.
    fn lists(_keys: &[Key]) -> bool {
        false
    }
}

/// While the API reports a list budget, a group whose refresh costs a list
/// goes at most this often: 60 a minute per group at most, under the 200 a
/// minute Linode gives a token, however many waits there are (they share
/// it), and none of the bursts a fresh window would allow.
pub(super) const LIST_INTERVAL: Duration = Duration::from_secs(1);

/// A read of one object (or of a list under it): `None` when it is gone.
pub(super) fn absent_is_none<T>(read: crate::Result<T>) -> crate::Result<Option<T>> {
    match read {
        Ok(v) => Ok(Some(v)),
        Err(Error::NotFound(_)) => Ok(None),
        Err(e) => Err(e),
    }
}

/// Failures a later poll can get past: throttling, the backend's own
/// errors, timeouts and the network. Anything else (the token refused, a
/// request the API calls invalid) will not change by waiting.
pub(super) fn transient(e: &Error) -> bool {
    matches!(
        e,
        Error::Unavailable(_) | Error::Internal(_) | Error::DeadlineExceeded(_)
    )
}

pub(super) fn terminal(what: &str, status: &str) -> Error {
    Error::FailedPrecondition(format!(
        "{what} is in status {status:?} and will not become active"
    ))
}

/// Ends the watches of `group` with `e` (its refresh panicked).
pub(super) fn fail<V: Target>(
    watches: &mut Vec<Watch<V>>,
    group: Key,
    e: &Error,
    fired: &mut Fired,
) {
    end(watches, fired, |w| {
        (V::group(w.key) == group).then(|| e.clone())
    });
}

/// Each group with a due watch that is neither being refreshed already nor
/// held back after a list, with all of the group's keys.
fn due<V: Target>(
    watches: &[Watch<V>],
    now: Instant,
    polling: &BTreeSet<Polling>,
    held: &BTreeMap<Polling, Instant>,
) -> BTreeMap<Key, Vec<Key>> {
    let idle = |w: &&Watch<V>| {
        let group = (V::KIND, V::group(w.key));
        !polling.contains(&group) && held.get(&group).is_none_or(|until| *until <= now)
    };
    let groups: BTreeSet<Key> = watches
        .iter()
        .filter(idle)
        .filter(|w| w.due <= now)
        .map(|w| V::group(w.key))
        .collect();
    let mut out: BTreeMap<Key, Vec<Key>> = BTreeMap::new();
    for w in watches.iter().filter(|w| groups.contains(&V::group(w.key))) {
        let keys = out.entry(V::group(w.key)).or_default();
        if !keys.contains(&w.key) {
            keys.push(w.key);
        }
    }
    out
}

/// When the next watch is due or expires. A group being refreshed is
/// rescheduled when its refresh ends, and with every refresh slot taken
/// none can start before one ends (which wakes the poller): then only
/// expiries count.
pub(super) fn next_wake<V: Target>(
    watches: &[Watch<V>],
    timeout: Duration,
    polling: &BTreeSet<Polling>,
    held: &BTreeMap<Polling, Instant>,
) -> Option<Instant> {
    let full = polling.len() >= MAX_POLLS_IN_FLIGHT;
    watches
        .iter()
        .map(|w| {
            let expiry = w.since + timeout;
            let group = (V::KIND, V::group(w.key));
            if full || polling.contains(&group) {
                expiry
            } else {
                let due = held.get(&group).map_or(w.due, |until| w.due.max(*until));
                due.min(expiry)
            }
        })
        .min()
}

/// Takes the due groups of kind `V` (as many as there is room for),
/// marking each as being refreshed, as jobs for their own threads.
pub(super) fn take_due<V: Target>(
    shared: &Arc<Shared>,
    state: &mut State,
    now: Instant,
    jobs: &mut Vec<Job>,
) {
    let polling = std::mem::take(&mut state.polling);
    state.held.retain(|_, until| *until > now);
    let held = std::mem::take(&mut state.held);
    let groups = due(V::watches(state), now, &polling, &held);
    state.polling = polling;
    state.held = held;
    let paced = shared.cloud.rate_limit(RequestClass::List).limit.is_some();
    for (group, keys) in groups {
        if state.polling.len() >= MAX_POLLS_IN_FLIGHT {
            return;
        }
        if paced && V::lists(&keys) {
            state.held.insert((V::KIND, group), now + LIST_INTERVAL);
        }
        state.polling.insert((V::KIND, group));
        let shared = shared.clone();
        jobs.push(Box::new(move || poll::<V>(&shared, group, keys)));
    }
}

/// Hands each refreshed watch its object (read by a refresh `sent` at
/// that instant), or backs it off; returns, for each watch that ended
/// active and may teach `learned`, how long it was seen pending. Objects
/// made together become active together: once one of a group has, the
/// rest of the group go back to fast polls rather than overshoot by a long
/// backoff.
pub(super) fn settle<V: Target>(
    watches: &mut Vec<Watch<V>>,
    keys: &[Key],
    result: &crate::Result<BTreeMap<Key, V>>,
    sent: Instant,
    policy: &WaitPolicy,
    fired: &mut Fired,
) -> Vec<Duration> {
    let now = Instant::now();
    let backoff = policy.backoff();
    let mut progress = false;
    let mut learned = Vec::new();
    watches.retain_mut(|w| {
        if !keys.contains(&w.key) {
            return true;
        }
        let outcome = match result {
            Ok(found) => match found.get(&w.key) {
                None => Some(Err(Error::NotFound(format!("{} no longer exists", w.what)))),
                Some(v) => match v.status().readiness() {
                    Readiness::Ready => Some(Ok(v.clone())),
                    Readiness::Failed(status) => Some(Err(terminal(&w.what, &status))),
                    Readiness::Pending => {
                        w.pending_for = sent.saturating_duration_since(w.since);
                        None
                    }
                },
            },
            Err(e) if transient(e) => None,
            Err(e) => Some(Err(e.clone())),
        };
        match outcome {
            Some(outcome) => {
                if outcome.is_ok() {
                    progress = true;
                    crate::metrics::wait_ended_active(V::KIND, now.duration_since(w.since));
                    if w.learns {
                        learned.push(w.pending_for);
                    }
                }
                answer(fired, &w.slot, outcome);
                false
            }
            None => {
                w.delay = backoff.after(w.delay);
                w.due = now + w.delay;
                true
            }
        }
    });
    if progress {
        for w in watches.iter_mut().filter(|w| keys.contains(&w.key)) {
            w.delay = policy.initial_delay;
            w.due = now + w.delay;
            w.learns = false;
        }
    }
    learned
}

/// One refresh (no lock held), counted as a poll of `kind` and, when it
/// failed transiently, as a failed one whose waits go on; a panic in it is
/// caught for the caller to end the refreshed waits with.
pub(super) fn attempt<R>(
    shared: &Shared,
    kind: &'static str,
    fetch: impl FnOnce() -> crate::Result<R>,
) -> std::thread::Result<crate::Result<R>> {
    let fetched = catch_unwind(AssertUnwindSafe(fetch));
    shared.polls.fetch_add(1, Ordering::Relaxed);
    if let Ok(Err(e)) = &fetched {
        if transient(e) {
            shared.failed_polls.fetch_add(1, Ordering::Relaxed);
            crate::metrics::poll_failed(kind);
            log::info!("polling Linode for {kind}: {e}; the waits go on");
        }
    }
    fetched
}

/// Refreshes one group (no lock held) and answers what it says; a panic
/// in the refresh ends that group's waits with Internal.
fn poll<V: Target>(shared: &Shared, group: Key, keys: Vec<Key>) {
    let sent = Instant::now();
    let fetched = attempt(shared, V::KIND, || {
        V::fetch(shared.cloud.as_ref(), group, &keys)
    });
    let mut fired = Fired::new();
    {
        let mut state = lock(&shared.state);
        state.polling.remove(&(V::KIND, group));
        match &fetched {
            Ok(result) => {
                let learned = settle(
                    V::watches(&mut state),
                    &keys,
                    result,
                    sent,
                    &shared.policy,
                    &mut fired,
                );
                for pending_for in learned {
                    state.learned.settled(V::KIND, pending_for);
                }
            }
            Err(panic) => {
                let e = flow::panicked("a Linode poll", &**panic);
                fail(V::watches(&mut state), group, &e, &mut fired);
            }
        }
    }
    shared.changed.notify_all();
    fire_all(fired);
}
