//! The poller's one thread: it sleeps until a wait is due or expires, ends
//! expired waits, takes the due groups of every kind and hands each
//! refresh to a short-lived thread of its own, so a group whose requests
//! hang holds back no other. It sends no request itself, and fires what
//! it ended only once the lock is released.

use super::refresh::{next_wake, take_due, Job};
use super::spaces::{next_expiry, take_spaces};
use super::waits::{expire, fire_all, Fired, Shared};
use crate::linode::types::{FilesystemAccessPolicy, Quota, Snapshot};
use crate::mutex::{lock, wait_timeout};
use std::sync::{Arc, Mutex, Weak};
use std::time::{Duration, Instant};

/// Blocks until some group is due and a refresh may start (firing expired
/// watches as it goes); `None` once the poller was dropped and has
/// nothing left to watch or refresh.
fn next_jobs(shared: &Arc<Shared>) -> Option<Vec<Job>> {
    let timeout = shared.policy.timeout;
    loop {
        let mut state = lock(&shared.state);
        state.prune();
        let now = Instant::now();
        let mut expired = Fired::new();
        expire(&mut state.filesystems, now, timeout, &mut expired);
        expire(&mut state.snapshots, now, timeout, &mut expired);
        expire(&mut state.quotas, now, timeout, &mut expired);
        expire(&mut state.policies, now, timeout, &mut expired);
        expire(&mut state.lookups, now, timeout, &mut expired);
        if !expired.is_empty() {
            drop(state);
            fire_all(expired);
            continue;
        }
        let mut jobs = Vec::new();
        let held = take_spaces(shared, &mut state, now, &mut jobs);
        take_due::<Snapshot>(shared, &mut state, now, &mut jobs);
        take_due::<Quota>(shared, &mut state, now, &mut jobs);
        take_due::<FilesystemAccessPolicy>(shared, &mut state, now, &mut jobs);
        if !jobs.is_empty() {
            return Some(jobs);
        }
        let next = [
            held,
            next_expiry(&state, timeout),
            next_wake(&state.snapshots, timeout, &state.polling, &state.held),
            next_wake(&state.quotas, timeout, &state.polling, &state.held),
            next_wake(&state.policies, timeout, &state.polling, &state.held),
        ]
        .into_iter()
        .flatten()
        .min();
        // Idle, it still wakes now and then to notice it was dropped; a
        // refresh that ends wakes it too.
        let wait = next.map_or(Duration::from_secs(1), |at| {
            at.saturating_duration_since(now)
        });
        let (state, _) = wait_timeout(&shared.changed, state, wait);
        if state.is_empty() && state.polling.is_empty() && Arc::strong_count(shared) == 1 {
            return None;
        }
    }
}

/// The thread's body; it holds the poller only weakly between rounds, so
/// dropping the last `Poller` lets it end.
pub(super) fn run(weak: Weak<Shared>) {
    loop {
        let Some(shared) = weak.upgrade() else {
            return;
        };
        let Some(jobs) = next_jobs(&shared) else {
            return;
        };
        drop(shared);
        for job in jobs {
            let job = Arc::new(Mutex::new(Some(job)));
            let handed = job.clone();
            let spawned = std::thread::Builder::new()
                .name("linode-poll".into())
                .spawn(move || {
                    if let Some(job) = lock(&handed).take() {
                        job();
                    }
                });
            if spawned.is_err() {
                // Without a thread to spare, the refresh runs here.
                log::warn!("Linode poller: no thread for a poll; polling inline");
                if let Some(job) = lock(&job).take() {
                    job();
                }
            }
        }
    }
}
