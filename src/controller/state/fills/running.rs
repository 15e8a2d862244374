//! The fill jobs of a controller, as state: which run, for which volume,
//! and what each holds, waits for and was made for. Running and ending them
//! is `kind::directory::restore::jobs`'s; nothing here starts, waits or
//! copies.

use super::copies::Copies;
use super::holders::Hold;
use super::progress::Report;
use super::stops::Stop;
use crate::controller::request::claim_ref::ClaimRef;
use crate::flow::Handoff;
use crate::handles::{SnapshotId, SubdirId};
use crate::mutex::lock;
use crate::Error;
use std::collections::HashMap;
use std::sync::atomic::{AtomicBool, AtomicU32, Ordering};
use std::sync::{Arc, Mutex};
use std::time::Instant;

pub(crate) type Answer = Arc<Handoff<Result<(), Error>>>;

/// The fill jobs running, by the volume they fill.
#[derive(Default)]
pub struct Fills {
    pub(crate) running: Mutex<HashMap<SubdirId, Arc<Job>>>,
}

/// One volume's fill.
pub(crate) struct Job {
    /// The calls waiting for its end.
    pub(crate) waiters: Mutex<Vec<Answer>>,
    /// Set by DeleteVolume: the job ends at its next step and leaves the
    /// volume to the delete.
    pub(crate) cancelled: AtomicBool,
    /// Set when the claim it fills the volume for is gone: the job ends
    /// at once, as a final failure, for this reason.
    pub(crate) abandoned: Mutex<Option<Error>>,
    /// Ends the wait the job is in when it is cancelled or abandoned.
    pub(crate) stop: Arc<Stop>,
    /// Its hold on the temporary clone it copies from, from the moment it
    /// asks for one until it ends.
    pub(crate) clone: Mutex<Option<Hold>>,
    /// Why its last attempt failed, for the calls that stop waiting.
    pub(crate) last_error: Mutex<Option<Error>>,
    pub(crate) attempts: AtomicU32,
    pub(crate) started: Instant,
    /// Where it is, for the calls that stop waiting and the claim's events.
    pub(crate) report: Report,
    /// The claim and CSI name its volume's marker records, once read.
    pub(crate) made_for: Mutex<Option<MadeFor>>,
}

/// What a volume's marker says it was made for.
#[derive(Debug, Clone)]
pub(crate) struct MadeFor {
    pub csi_name: String,
    pub claim: Option<ClaimRef>,
}

impl Job {
    /// Keeps `hold` on a temporary clone until the job ends, unless it
    /// holds that snapshot's clone already (a later attempt).
    pub(crate) fn keep(&self, snapshot: SnapshotId, hold: impl FnOnce() -> Hold) {
        let mut held = lock(&self.clone);
        if held.as_ref().map(Hold::snapshot) != Some(snapshot) {
            *held = Some(hold());
        }
    }

    pub(crate) fn is_cancelled(&self) -> bool {
        self.cancelled.load(Ordering::SeqCst)
    }

    /// Why the job must stop now, if it must: its volume is being deleted,
    /// or its claim is gone.
    pub(crate) fn stopped(&self) -> Option<Error> {
        self.stop.why()
    }

    /// Ends the job at its next step (its volume is gone or going).
    pub(crate) fn cancel(&self, id: &SubdirId) {
        self.cancelled.store(true, Ordering::SeqCst);
        self.stop.stop(Error::Aborted(format!(
            "volume {id} is being deleted: its fill stops"
        )));
    }

    /// The claim its volume is for, once the marker was read.
    pub(crate) fn claim(&self) -> Option<ClaimRef> {
        lock(&self.made_for).as_ref().and_then(|m| m.claim.clone())
    }
}

impl Fills {
    /// Whether a job fills `id`.
    pub fn is_running(&self, id: &SubdirId) -> bool {
        lock(&self.running).contains_key(id)
    }

    /// Ends the job filling `id` at its next step, stopping its copy:
    /// whether a copy was running (until it stops, the directory is still
    /// being written). A job still waiting for its temporary filesystem
    /// stops waiting and writes nothing more.
    pub fn cancel(&self, copies: &Copies, id: &SubdirId) -> bool {
        let Some(job) = lock(&self.running).get(id).cloned() else {
            return false;
        };
        job.cancel(id);
        copies.stop(id)
    }

    /// Ends the job filling `id` now, as a final failure for `why` (the
    /// claim it filled the volume for is gone): what it made is removed.
    pub(crate) fn abandon(&self, copies: &Copies, id: &SubdirId, why: Error) {
        let Some(job) = lock(&self.running).get(id).cloned() else {
            return;
        };
        *lock(&job.abandoned) = Some(why.clone());
        job.stop.stop(why);
        copies.stop(id);
    }

    /// The jobs running now.
    pub(crate) fn running(&self) -> Vec<(SubdirId, Arc<Job>)> {
        lock(&self.running)
            .iter()
            .map(|(id, job)| (id.clone(), job.clone()))
            .collect()
    }
}
