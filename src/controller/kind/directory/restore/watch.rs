//! The claims of the fills running, watched by the active controller. One
//! list of every claim a tick (each `FILL_PROGRESS_INTERVAL`, sooner when
//! a job has news, never twice within `LIST_SPACING`) serves three ends:
//! - a job whose volume's marker records a claim ends, removing what it
//!   made, once that claim is gone or replaced by another of its name (a
//!   different UID, or bound to another PersistentVolume): missing from a
//!   list begun after the job started and again from one begun at least
//!   `FILL_CLAIM_GRACE` later, with no list between them showing it. A
//!   claim exists before its CreateVolume is called, so a list that misses
//!   one it should show can only be stale, and the grace outlasts that. A
//!   failed or slow list proves nothing and ends nothing. A job with no
//!   claim recorded (no `--extra-create-metadata`, csi-sanity, `client`)
//!   is never ended here. A CreateVolume of the ended volume's name for
//!   the same claim is refused for an hour after (`abandoned`).
//! - the events jobs queued (`tell`) are posted on their claim, which the
//!   list gives (an event needs the claim's UID); one whose claim stays
//!   unseen is dropped after `OUTBOX_AGE`.
//! - each copying job's progress is posted on its claim once an interval.
//!
//! It runs on a thread of its own (the list and the events are blocking
//! HTTP to Kubernetes), only while this process holds the lease, holds the
//! controller weakly and ends with it.

use crate::controller::request::claim_ref::{pv_names_uid, ClaimRef};
use crate::controller::state::controller::Controller;
use crate::controller::state::fills::claims::{Told, Track, OUTBOX_AGE};
use crate::controller::state::fills::progress;
use crate::controller::state::fills::progress::Phase;
use crate::controller::state::fills::running::Job;
use crate::handles::SubdirId;
use crate::kube::{EventType, PersistentVolumeClaim};
use crate::metrics::{self, FillAbandoned};
use crate::mutex::lock;
use crate::Error;
use std::collections::HashMap;
use std::sync::mpsc::{channel, Receiver, RecvTimeoutError};
use std::sync::{Arc, Weak};
use std::time::{Duration, Instant};

/// The least time between two lists of claims.
const LIST_SPACING: Duration = Duration::from_secs(10);
/// Starts the watch of `c` on a thread of its own.
pub fn start(c: &Arc<Controller>) {
    let (kick, kicked) = channel();
    *lock(&c.fill_watch.kick) = Some(kick);
    let weak = Arc::downgrade(c);
    let watched = weak.clone();
    metrics::watch_fills(move || {
        let c = watched.upgrade()?;
        let running = c.fills.running();
        Some(
            running
                .iter()
                .map(|(_, job)| job.report.phase().name())
                .collect(),
        )
    });
    let interval = c.fill_watch.interval;
    if let Err(e) = std::thread::Builder::new()
        .name("fill watch".into())
        .spawn(move || run(weak, kicked, interval))
    {
        log::warn!("no watch of the claims of fills: {e}");
    }
}

fn run(weak: Weak<Controller>, kicked: Receiver<()>, interval: Duration) {
    loop {
        match kicked.recv_timeout(interval) {
            Ok(()) | Err(RecvTimeoutError::Timeout) => {}
            Err(RecvTimeoutError::Disconnected) => return,
        }
        let Some(c) = weak.upgrade() else {
            return;
        };
        let last = lock(&c.fill_watch.state).last_list;
        let spacing = LIST_SPACING.min(interval);
        if let Some(wait) = last.and_then(|at| spacing.checked_sub(at.elapsed())) {
            drop(c);
            std::thread::sleep(wait);
            let Some(again) = weak.upgrade() else {
                return;
            };
            tick_if_leading(&again);
        } else {
            tick_if_leading(&c);
        }
        while kicked.try_recv().is_ok() {}
    }
}

fn tick_if_leading(c: &Arc<Controller>) {
    if c.lease.is_held() {
        tick(c);
    }
}

/// One tick: one list of claims, then each job's claim judged, the queued
/// events and the progress due posted.
fn tick(c: &Arc<Controller>) {
    let w = &c.fill_watch;
    let jobs: Vec<(SubdirId, Arc<Job>, ClaimRef)> = c
        .fills
        .running()
        .into_iter()
        .filter_map(|(id, job)| job.claim().map(|claim| (id, job, claim)))
        .collect();
    {
        let mut state = lock(&w.state);
        state
            .tracks
            .retain(|id, _| jobs.iter().any(|(j, _, _)| j == id));
        if jobs.is_empty() && state.outbox.is_empty() {
            return;
        }
    }
    let asked = Instant::now();
    lock(&w.state).last_list = Some(asked);
    let listed: HashMap<(String, String), PersistentVolumeClaim> = match c.cluster.claims() {
        Ok(all) => all
            .into_iter()
            .map(|pvc| ((pvc.namespace.clone(), pvc.name.clone()), pvc))
            .collect(),
        Err(e) => {
            log::warn!("the claims of the fills running cannot be listed: {e}; nothing is ended or told this time");
            return;
        }
    };
    let mut posts: Vec<(PersistentVolumeClaim, EventType, &'static str, String)> = Vec::new();
    for (id, job, claim) in &jobs {
        match seen(&listed, claim) {
            Ok(pvc) => {
                let mut state = lock(&w.state);
                let track = state.tracks.entry(id.clone()).or_default();
                track.missing = None;
                if let Some(message) = progress_due(c, id, job, track, w.interval) {
                    posts.push((pvc.clone(), EventType::Normal, "FillProgress", message));
                }
            }
            Err((why, reason)) => {
                if asked < job.started {
                    continue;
                }
                let since = {
                    let mut state = lock(&w.state);
                    let track = state.tracks.entry(id.clone()).or_default();
                    track.missing.get_or_insert((asked, reason)).0
                };
                if asked > since && asked.duration_since(since) >= w.grace {
                    abandon(c, id, job, claim, why, reason);
                }
            }
        }
    }
    let due = {
        let mut state = lock(&w.state);
        let (ready, waiting): (Vec<Told>, Vec<Told>) = std::mem::take(&mut state.outbox)
            .into_iter()
            .partition(|t| seen(&listed, &t.claim).is_ok());
        let (stale, kept): (Vec<Told>, Vec<Told>) = waiting
            .into_iter()
            .partition(|t| t.queued.elapsed() >= OUTBOX_AGE);
        for t in stale {
            log::info!(
                "event {} for claim {} dropped: the claim was not listed within {OUTBOX_AGE:?}",
                t.reason,
                t.claim.claim()
            );
        }
        state.outbox = kept;
        ready
    };
    for t in due {
        if let Ok(pvc) = seen(&listed, &t.claim) {
            posts.push((pvc.clone(), t.kind, t.reason, t.message));
        }
    }
    for (pvc, kind, reason, message) in posts {
        if let Err(e) = c.cluster.claim_event(&pvc, kind, reason, &message) {
            log::warn!(
                "event {reason} on claim {}/{}: {e}",
                pvc.namespace,
                pvc.name
            );
        }
    }
}

/// The claim `claim` as listed, if it is still the one the volume was
/// made for; else why not.
fn seen<'a>(
    listed: &'a HashMap<(String, String), PersistentVolumeClaim>,
    claim: &ClaimRef,
) -> Result<&'a PersistentVolumeClaim, (String, FillAbandoned)> {
    let Some(pvc) = listed.get(&(claim.namespace.clone(), claim.name.clone())) else {
        return Err((
            format!("claim {} was deleted", claim.claim()),
            FillAbandoned::ClaimDeleted,
        ));
    };
    let same = match &pvc.volume_name {
        Some(bound) => *bound == claim.pv,
        None => pv_names_uid(&claim.pv, &pvc.uid) != Some(false),
    };
    if same {
        Ok(pvc)
    } else {
        Err((
            format!(
                "claim {} was deleted and made again (now UID {}), and the new one is not for volume {}",
                claim.claim(),
                pvc.uid,
                claim.pv
            ),
            FillAbandoned::ClaimReplaced,
        ))
    }
}

/// The progress event of `job` (filling `id`), when it is copying and
/// its last one was at least `interval` ago.
fn progress_due(
    c: &Controller,
    id: &SubdirId,
    job: &Job,
    track: &mut Track,
    interval: Duration,
) -> Option<String> {
    let Phase::Copying { since, total } = job.report.phase() else {
        return None;
    };
    let copied = c.copies.progress(id)?;
    let last = track.last_progress.unwrap_or(since);
    if last.elapsed() < interval {
        return None;
    }
    track.last_progress = Some(Instant::now());
    Some(format!(
        "copying for {}: {}",
        progress::duration(since.elapsed()),
        progress::progress(&copied, total, since.elapsed())
    ))
}

/// Ends the fill of `id`, whose claim is gone (`why`).
fn abandon(
    c: &Controller,
    id: &SubdirId,
    job: &Job,
    claim: &ClaimRef,
    why: String,
    reason: FillAbandoned,
) {
    let message = format!(
        "the fill of volume {id} ended: {why}; what it made is removed (its data, quota, marker and holds)"
    );
    log::warn!("{message}");
    metrics::fill_abandoned(reason);
    if let Some(made) = lock(&job.made_for).as_ref() {
        lock(&c.fill_watch.state).abandoned.insert(
            made.csi_name.clone(),
            (claim.clone(), Instant::now(), message.clone()),
        );
    }
    c.fills
        .abandon(&c.copies, id, Error::FailedPrecondition(message));
}
