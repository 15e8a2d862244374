//! What autogrow does with one volume in a round, given its sample and its
//! claim as this round's list read it: grow the claim, wait, or say why
//! not (`told`). It sends at most one patch; it never touches the quota.

use super::told::{tell, Told};
use super::{Candidate, ANNOTATION};
use crate::controller::kind::directory::ledger::quotas;
use crate::controller::state::controller::Controller;
use crate::controller::state::directory::autogrowth::{Asked, Tracked};
use crate::kube::{EventType, PersistentVolumeClaim};
use crate::metrics::{self, AutogrowOutcome};
use std::collections::BTreeSet;

/// Grows `claim` of `cand` if it is due and may be, or says why not.
pub(super) fn consider(
    c: &Controller,
    cand: &Candidate,
    claim: &PersistentVolumeClaim,
    expandable: &BTreeSet<String>,
    t: &mut Tracked,
) {
    // A claim of that name bound elsewhere (deleted and made again) is
    // not this volume's.
    if claim.volume_name.as_deref() != Some(cand.claim.pv.as_str()) {
        log::debug!(
            "autogrow: claim {} is not bound to {}, the PV of volume {}",
            cand.claim.claim(),
            cand.claim.pv,
            cand.id
        );
        return;
    }
    match claim.annotations.get(ANNOTATION).map(String::as_str) {
        None => {}
        Some("off") => return,
        Some(other) => {
            let message = format!(
                "annotation {ANNOTATION}: {other:?} is not understood: only \"off\" is (it opts the claim out of autogrow); the claim is not grown until the annotation is \"off\" or removed"
            );
            tell(
                c,
                claim,
                t,
                Told::Annotation,
                other,
                EventType::Warning,
                &message,
            );
            return;
        }
    }
    let size = cand.sample.size;
    let requested = claim.requested.unwrap_or(0);
    let capacity = claim.capacity.unwrap_or(0);
    if claim
        .resize_status
        .as_deref()
        .is_some_and(|s| s.ends_with("ResizeInfeasible"))
    {
        let mark = (claim.requested, cand.room());
        match t.infeasible {
            Some(seen) if seen == mark => return,
            Some(_) => {
                // The request or the room changed: try again, afresh.
                t.infeasible = Some(mark);
                t.asked = None;
            }
            None => {
                t.infeasible = Some(mark);
                let message = format!(
                    "the resizer found the resize to {requested} bytes infeasible; autogrow stops until the claim's request or the room on its shared filesystem changes"
                );
                let detail = requested.to_string();
                tell(
                    c,
                    claim,
                    t,
                    Told::Infeasible,
                    &detail,
                    EventType::Warning,
                    &message,
                );
                return;
            }
        }
    } else {
        t.infeasible = None;
    }
    // A process new to the volume (a new leader, a restart) does not know
    // what was asked before it: a sample no newer than the quota's last
    // resize may be the one that asked for it, so it waits for a newer one.
    if !std::mem::replace(&mut t.seen, true) && cand.sample.predates_resize() {
        t.asked = Some(Asked {
            target: size,
            sample: cand.sample.key(),
        });
    }
    if let Some(asked) = &t.asked {
        if requested < asked.target {
            // Someone lowered the request since: ours no longer stands.
            t.asked = None;
        } else if capacity < asked.target
            || size < asked.target
            || cand.sample.key() == asked.sample
        {
            return;
        } else {
            t.asked = None;
        }
    }
    // A resize someone else asked for is still under way.
    if requested > capacity && t.infeasible.is_none() {
        return;
    }
    if !cand.policy.due(cand.used, size) {
        return;
    }
    let target = cand.policy.next_size(size);
    if target <= size {
        let message = format!(
            "{} of {size} bytes used: the volume is at its autogrow-max and is not grown further",
            cand.used
        );
        if tell(
            c,
            claim,
            t,
            Told::AtMax,
            &size.to_string(),
            EventType::Normal,
            &message,
        ) {
            metrics::autogrow(AutogrowOutcome::AtMax);
        }
        return;
    }
    if requested >= target {
        return;
    }
    let class = claim.storage_class.clone().unwrap_or_default();
    if !expandable.contains(&class) {
        let message = format!(
            "{} of {size} bytes used, past the autogrow threshold of {}%, but StorageClass {class:?} does not set allowVolumeExpansion: true, so the claim cannot be grown",
            cand.used, cand.policy.threshold
        );
        if tell(
            c,
            claim,
            t,
            Told::NotExpandable,
            &class,
            EventType::Warning,
            &message,
        ) {
            metrics::autogrow(AutogrowOutcome::Refused);
        }
        return;
    }
    let p = &cand.parent;
    if let Err(no) = quotas::check_room(&p.quotas, &p.fs, &cand.id.name, target, p.kept, 0) {
        let message = format!(
            "{} of {size} bytes used, past the autogrow threshold of {}%, but growing to {target} bytes does not fit: {}",
            cand.used,
            cand.policy.threshold,
            no.for_growth(size).message()
        );
        let detail = format!("{target}:{}", no.left());
        if tell(
            c,
            claim,
            t,
            Told::NoRoom,
            &detail,
            EventType::Warning,
            &message,
        ) {
            metrics::autogrow(AutogrowOutcome::NoRoom);
        }
        return;
    }
    match c.cluster.request_storage(claim, target) {
        Ok(()) => {
            log::info!(
                "autogrow: volume {}: {} of {size} bytes used (threshold {}%): claim {} asks for {target} bytes",
                cand.id,
                cand.used,
                cand.policy.threshold,
                cand.claim.claim()
            );
            metrics::autogrow(AutogrowOutcome::Grown);
            t.asked = Some(Asked {
                target,
                sample: cand.sample.key(),
            });
            let message = format!(
                "{} of {size} bytes used, past the autogrow threshold of {}%: the claim now asks for {target} bytes",
                cand.used, cand.policy.threshold
            );
            if let Err(e) =
                c.cluster
                    .claim_event(claim, EventType::Normal, "AutogrowGrowing", &message)
            {
                log::warn!("autogrow: event on claim {}: {e}", cand.claim.claim());
            }
        }
        Err(e) => log::warn!(
            "autogrow: claim {} of volume {} cannot be grown to {target} bytes: {e}",
            cand.claim.claim(),
            cand.id
        ),
    }
}
