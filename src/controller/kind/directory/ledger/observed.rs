//! The last usage sample of every directory volume the active controller
//! sampled, by parent, which the usage metrics show at scrape time: a
//! parent's round replaces all of its volumes (a volume gone from its list
//! is gone from here) and a DeleteVolume forgets its volume at once, so a
//! deleted volume's series vanish. It stores; it never samples.

use crate::handles::{SubdirId, VolumeId};
use crate::mutex::lock;
use std::collections::BTreeMap;
use std::sync::Mutex;

/// One volume's figures as the metrics show them.
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct Figures {
    pub volume: SubdirId,
    /// `namespace/name`, empty when the marker records no claim.
    pub claim: String,
    pub used: Option<i64>,
    pub capacity: i64,
}

#[derive(Default)]
pub struct Observed(Mutex<BTreeMap<VolumeId, Vec<Figures>>>);

impl Observed {
    /// The volumes of `parent` as its latest round sampled them.
    pub fn replace(&self, parent: VolumeId, figures: Vec<Figures>) {
        lock(&self.0).insert(parent, figures);
    }

    /// Keeps only the parents a round read (or could not read: their last
    /// figures stand until it can).
    pub fn retain(&self, parents: &std::collections::BTreeSet<VolumeId>) {
        lock(&self.0).retain(|p, _| parents.contains(p));
    }

    pub fn forget(&self, volume: &SubdirId) {
        if let Some(figures) = lock(&self.0).get_mut(&volume.parent()) {
            figures.retain(|f| &f.volume != volume);
        }
    }

    pub fn all(&self) -> Vec<Figures> {
        lock(&self.0).values().flatten().cloned().collect()
    }
}
