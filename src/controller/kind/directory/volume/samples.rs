//! The seam every reader of directory volumes' usage goes through (autogrow,
//! the usage metrics): per parent, one fresh list of its account a round
//! (`account`; shared with the calls that list at the same time), read as
//! one sample of each volume it caps: the bytes used as the backend last
//! counted them, when it counted, and the quota's size. That list also
//! refreshes the account, each round. Its readers only see `Sample`s. Nothing here
//! decides what a sample means.

use super::lookup::quota_list;
use crate::controller::kind::directory::ledger::account::Purpose;
use crate::controller::kind::directory::ledger::quotas;
use crate::controller::state::controller::Controller;
use crate::handles::DirName;
use crate::linode::{naive_to_unix, Filesystem, Quota};
use crate::Error;

/// One volume's usage as one list showed it.
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct Sample {
    pub name: DirName,
    /// `None` until the backend has counted it.
    pub used: Option<i64>,
    /// The quota's maximum: the volume's size in force.
    pub size: i64,
    /// When the backend counted `used`, as it says.
    pub collected_at: Option<String>,
    /// When the quota last changed (`updated`): its last resize.
    pub resized_at: Option<String>,
}

impl Sample {
    /// What tells one count of the backend from the next: a newer count
    /// says a newer time, or (a backend that says none) other bytes.
    pub fn key(&self) -> (Option<String>, Option<i64>) {
        (self.collected_at.clone(), self.used)
    }

    /// Whether it was counted no later than the quota's last resize, so it
    /// may be the very count that asked for that size (both times in whole
    /// seconds: the same second counts as before).
    pub fn predates_resize(&self) -> bool {
        let secs = |t: &Option<String>| t.as_deref().and_then(naive_to_unix);
        matches!((secs(&self.collected_at), secs(&self.resized_at)), (Some(c), Some(r)) if c <= r)
    }
}

/// A parent's quotas as listed this round, and the samples they give.
pub struct ParentSamples {
    pub quotas: Vec<Quota>,
    pub samples: Vec<Sample>,
}

/// The samples of the directory volumes of `fs`, from one list.
pub fn of_parent(c: &Controller, fs: &Filesystem) -> Result<ParentSamples, Error> {
    let quotas = quota_list(c, fs, Purpose::Fresh).1?;
    let samples = quotas
        .iter()
        .filter_map(|q| {
            Some(Sample {
                name: quotas::volume_name(q, fs)?,
                used: q.used_capacity_bytes,
                size: q.max_capacity_bytes?,
                collected_at: q.collected_at.clone(),
                resized_at: q.updated.clone(),
            })
        })
        .collect();
    Ok(ParentSamples { quotas, samples })
}
