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

mod decide;
mod told;

use super::ledger::observed::Figures;
use super::ledger::quotas;
use super::parent::files;
use super::parent::kept;
use super::volume::inspect;
use super::volume::lookup::existing_parent;
use super::volume::samples;
use super::volume::samples::{ParentSamples, Sample};
use crate::controller::request::claim_ref::ClaimRef;
use crate::controller::request::params::Autogrow;
use crate::controller::state::controller::Controller;
use crate::handles::{SubdirId, VolumeId};
use crate::kube::PersistentVolumeClaim;
use crate::linode::{Filesystem, Quota};
use crate::mutex::lock;
use crate::Error;
use decide::consider;
use std::collections::HashMap;
use std::sync::Arc;

/// The claim annotation that opts one claim out (`"off"`).
pub const ANNOTATION: &str = "linodenfs.csi.linode.com/autogrow";

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
    // Another cluster's volumes on a shared parent are its own to grow.
    let marked = files::volumes(&root, vol, c.marks.cluster())?;
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
