//! Autogrow: each upkeep round of the active controller, every directory
//! volume whose marker records an autogrow policy and its claim is
//! compared with its latest usage sample (`samples`). One at or past its
//! threshold gets a bigger claim: the controller patches the claim's
//! requested storage (capped by `autogrow-max`) and the resizer then calls
//! ControllerExpandVolume, so the claim, the PV and the quota agree.
//! Claims are read with one list a round, whatever the number of volumes.
//! It never grows a claim that is not bound to the volume's PV, that says
//! `autogrow: "off"`, whose resize is under way or was found infeasible
//! (until its request or the parent's room changes), twice for one sample
//! (in one process by what it asked; across a new leader, by never growing
//! on a sample counted before the quota's last resize),
//! past its maximum or past the parent's room, and it never shrinks one;
//! each of those it cannot do is told to the claim's owner by an event,
//! once until something changes. It must not grow a quota itself.

use super::files::{self, Marker};
use super::observed::Figures;
use super::parent::existing_parent;
use super::samples::{self, ParentSamples, Sample};
use super::{inspect, kept, quotas};
use crate::controller::params::Autogrow;
use crate::controller::{ClaimRef, Controller};
use crate::handles::{SubdirId, VolumeId};
use crate::kube::{EventType, PersistentVolumeClaim};
use crate::linode::{Filesystem, Quota};
use crate::metrics::{self, AutogrowOutcome};
use crate::mutex::lock;
use crate::Error;
use std::collections::{BTreeMap, BTreeSet, HashMap};
use std::sync::{Arc, Mutex};

/// The claim annotation that opts one claim out (`"off"`).
pub const ANNOTATION: &str = "linodenfs.csi.linode.com/autogrow";

/// What autogrow remembers of each volume between rounds (in memory: a new
/// leader starts afresh, and may tell an event once more).
#[derive(Default)]
pub struct Autogrowth(Mutex<HashMap<SubdirId, Tracked>>);

#[derive(Debug, Default)]
struct Tracked {
    /// Seen in an earlier round of this process.
    seen: bool,
    /// The growth asked last, until the claim and the quota have caught up
    /// with it and a newer sample has come.
    asked: Option<Asked>,
    /// The claim's request and the parent's room when the resizer was last
    /// seen to find its resize infeasible.
    infeasible: Option<(Option<i64>, Option<i64>)>,
    /// Per kind of event, what it was last told about.
    told: BTreeMap<&'static str, String>,
}

#[derive(Debug)]
struct Asked {
    target: i64,
    sample: (Option<String>, Option<i64>),
}

/// A parent as its round read it.
struct ParentRound {
    fs: Filesystem,
    quotas: Vec<Quota>,
    kept: i64,
}

/// A volume with a policy, a recorded claim and a counted usage.
struct Candidate {
    id: SubdirId,
    claim: ClaimRef,
    policy: Autogrow,
    sample: Sample,
    used: i64,
    parent: Arc<ParentRound>,
}

impl Candidate {
    /// The bytes the parent could give this volume in all: its capacity
    /// less what the other quotas promise and deleted volumes keep.
    fn room(&self) -> Option<i64> {
        let p = &self.parent;
        let others = quotas::committed(&p.quotas, &p.fs, &self.id.name);
        p.fs.capacity_bytes().map(|cap| cap - others - p.kept)
    }
}

/// One round: samples every parent (the usage metrics' figures too), then
/// grows what is due.
pub fn round(c: &Arc<Controller>) {
    let parents = match inspect::parents(c) {
        Ok(parents) => parents,
        Err(e) => {
            log::warn!("autogrow: the shared filesystems cannot be listed: {e}");
            return;
        }
    };
    let mut candidates = Vec::new();
    for &vol in &parents {
        match sample_parent(c, vol) {
            Ok(found) => candidates.extend(found),
            Err(Error::NotFound(_)) => c.observed.replace(vol, Vec::new()),
            // No quota API: no usage, nothing to grow.
            Err(Error::Unimplemented(_)) => c.observed.replace(vol, Vec::new()),
            Err(e) => log::warn!("autogrow: usage of the volumes of {vol}: {e}"),
        }
    }
    c.observed.retain(&parents);
    let mut tracked = std::mem::take(&mut *lock(&c.autogrowth.0));
    if candidates.is_empty() {
        return;
    }
    let (claims, expandable) = match c.cluster.claims().and_then(|claims| {
        c.cluster
            .expandable_classes()
            .map(|classes| (claims, classes))
    }) {
        Ok(read) => read,
        Err(e) => {
            log::warn!("autogrow: the claims or StorageClasses cannot be read: {e}");
            *lock(&c.autogrowth.0) = tracked;
            return;
        }
    };
    let by_name: HashMap<(&str, &str), &PersistentVolumeClaim> = claims
        .iter()
        .map(|k| ((k.namespace.as_str(), k.name.as_str()), k))
        .collect();
    let mut next = HashMap::new();
    for cand in candidates {
        // Only the Lease holder grows: a round that outlives its lease
        // leaves the rest to the new holder.
        if !c.lease.is_held() {
            break;
        }
        let mut t = tracked.remove(&cand.id).unwrap_or_default();
        match by_name.get(&(cand.claim.namespace.as_str(), cand.claim.name.as_str())) {
            Some(claim) => consider(c, &cand, claim, &expandable, &mut t),
            None => log::debug!(
                "autogrow: volume {}: its claim {} is not there",
                cand.id,
                cand.claim.claim()
            ),
        }
        next.insert(cand.id, t);
    }
    *lock(&c.autogrowth.0) = next;
}

/// The volumes of parent `vol` autogrow may grow, its figures recorded
/// for the metrics.
fn sample_parent(c: &Controller, vol: VolumeId) -> Result<Vec<Candidate>, Error> {
    let fs = existing_parent(c, vol)?;
    let mtls = c.spaces.mtls_mode(vol.space)?;
    let root = c.shares.root(&fs, mtls.as_ref())?;
    let marked: Vec<(SubdirId, Marker)> = files::marked(&root)?
        .into_iter()
        .map(|(name, marker)| {
            let id = SubdirId {
                space: vol.space,
                filesystem: vol.filesystem,
                name,
            };
            (id, marker)
        })
        // Another cluster's volumes on a shared parent are its own to grow.
        .filter(|(id, m)| !m.filling && m.volume_id == id.to_string() && m.is_of(c.marks.cluster()))
        .collect();
    if marked.is_empty() {
        c.observed.replace(vol, Vec::new());
        return Ok(Vec::new());
    }
    let ParentSamples { quotas, samples } = samples::of_parent(c, &fs)?;
    let parent = Arc::new(ParentRound {
        fs,
        quotas,
        kept: kept::total(&root)?,
    });
    let mut figures = Vec::new();
    let mut candidates = Vec::new();
    for (id, marker) in marked {
        let Some(sample) = samples.iter().find(|s| s.name == id.name).cloned() else {
            continue;
        };
        figures.push(Figures {
            volume: id.clone(),
            claim: marker
                .claim
                .as_ref()
                .map(ClaimRef::claim)
                .unwrap_or_default(),
            used: sample.used,
            capacity: sample.size,
        });
        if let (Some(policy), Some(claim), Some(used)) =
            (marker.autogrow, marker.claim, sample.used)
        {
            candidates.push(Candidate {
                id,
                claim,
                policy,
                used,
                sample,
                parent: parent.clone(),
            });
        }
    }
    c.observed.replace(vol, figures);
    Ok(candidates)
}

/// Grows `claim` of `cand` if it is due and may be, or says why not.
fn consider(
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

/// The kinds of event told once until what they are about changes.
#[derive(Debug, Clone, Copy)]
enum Told {
    Annotation,
    Infeasible,
    AtMax,
    NotExpandable,
    NoRoom,
}

impl Told {
    fn reason(self) -> &'static str {
        match self {
            Told::Annotation => "AutogrowBadAnnotation",
            Told::Infeasible => "AutogrowStopped",
            Told::AtMax => "AutogrowAtMax",
            Told::NotExpandable => "AutogrowNotExpandable",
            Told::NoRoom => "AutogrowNoRoom",
        }
    }
}

/// Sends the event of `kind` about `detail`, unless it was sent about
/// that already; whether it was sent now.
fn tell(
    c: &Controller,
    claim: &PersistentVolumeClaim,
    t: &mut Tracked,
    kind: Told,
    detail: &str,
    event: EventType,
    message: &str,
) -> bool {
    if t.told.get(kind.reason()).is_some_and(|d| d == detail) {
        return false;
    }
    match c.cluster.claim_event(claim, event, kind.reason(), message) {
        Ok(()) => {
            t.told.insert(kind.reason(), detail.to_string());
            true
        }
        Err(e) => {
            log::warn!(
                "autogrow: event {} on claim {}/{}: {e}",
                kind.reason(),
                claim.namespace,
                claim.name
            );
            false
        }
    }
}
