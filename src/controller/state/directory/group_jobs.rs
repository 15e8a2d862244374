//! The group snapshots being taken in this process, by group entry. Taking
//! one is a job that outlives the calls waiting for it (its parent
//! snapshot's batch, then the wait for that snapshot to turn `active`), so
//! a repeated call for the group joins the job and gets its answer instead
//! of being refused while it runs, and a caller that leaves (its deadline)
//! leaves the job going for its retry to join. A call whose request the job
//! cannot answer (another name of the same entry, other members) is
//! AlreadyExists, as it would be against the group's record. State only:
//! what a job does is `kind::directory::snapshots::groups`'.

use crate::flow::{Flow, Handoff, Step};
use crate::handles::{DirName, VolumeId};
use crate::mutex::lock;
use crate::proto::csi;
use crate::Error;
use std::collections::HashMap;
use std::sync::{Arc, Mutex};

type Answer = Arc<Handoff<Result<csi::VolumeGroupSnapshot, Error>>>;

/// What a job takes: the group's CSI name, its parent and its members'
/// entries (sorted).
#[derive(Debug, Clone, PartialEq, Eq)]
pub(crate) struct Wanted {
    pub(crate) name: String,
    pub(crate) parent: VolumeId,
    pub(crate) members: Vec<DirName>,
}

struct Job {
    wanted: Wanted,
    /// The call that started it and those that joined.
    waiters: Vec<Answer>,
}

/// Where a call for a group stands.
pub(crate) enum Taking {
    /// No job ran for the group: this call registered one and must run it
    /// (then `finish` it); the step is its own wait for the answer.
    Started(Step<csi::VolumeGroupSnapshot>),
    /// It waits for the job under way.
    Joined(Step<csi::VolumeGroupSnapshot>),
}

/// The group snapshot jobs of one controller.
#[derive(Default)]
pub struct GroupJobs {
    running: Mutex<HashMap<DirName, Job>>,
}

impl GroupJobs {
    /// Joins the job taking group `entry`, or registers one for `wanted`
    /// when none runs.
    pub(crate) fn join_or_start(&self, entry: &DirName, wanted: Wanted) -> Result<Taking, Error> {
        let answer = Handoff::new();
        let mut running = lock(&self.running);
        if let Some(job) = running.get_mut(entry) {
            if job.wanted.name != wanted.name {
                return Err(Error::AlreadyExists(format!(
                    "group snapshot name {:?} maps to the same record as the group snapshot {:?} being taken",
                    wanted.name, job.wanted.name
                )));
            }
            if job.wanted != wanted {
                return Err(Error::AlreadyExists(format!(
                    "group snapshot {:?} is being taken of other source volumes",
                    wanted.name
                )));
            }
            job.waiters.push(answer.clone());
            return Ok(Taking::Joined(wait(answer)));
        }
        running.insert(
            entry.clone(),
            Job {
                wanted,
                waiters: vec![answer.clone()],
            },
        );
        Ok(Taking::Started(wait(answer)))
    }

    /// Ends the job taking group `entry`: every caller still waiting is
    /// answered `result`, and the next call starts afresh.
    pub(crate) fn finish(&self, entry: &DirName, result: Result<csi::VolumeGroupSnapshot, Error>) {
        let job = lock(&self.running).remove(entry);
        for answer in job.iter().flat_map(|j| &j.waiters) {
            // A caller that left (cancelled, deadline) is simply not told.
            answer.send(result.clone());
        }
    }
}

fn wait(answer: Answer) -> Step<csi::VolumeGroupSnapshot> {
    answer.receive(|r: Result<csi::VolumeGroupSnapshot, Error>| r.map(Flow::Ready))
}
