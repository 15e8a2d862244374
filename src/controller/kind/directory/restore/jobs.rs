//! Fills of new directory volumes as jobs of the controller, owned by no
//! call: a job runs on the worker pool as a flow that answers nobody, from
//! the first call (or the upkeep, after a restart) until the volume is
//! filled or has failed finally. Calls only wait for it: each waits at
//! most `LINODE_WAIT_TIMEOUT` (DeadlineExceeded, the job goes on), and a
//! later call for the same volume joins it. What the job holds (the
//! temporary filesystem it copies from, the parent snapshot it reads) is
//! the job's until it ends. A failed attempt is tried again, backing off,
//! within `FILL_TIMEOUT`; a final failure (the source or the volume's
//! parent gone, a source that cannot fill it) removes what the job made:
//! the copied data, the quota, the marker. What is filled, and how, is
//! `restore`'s; this file only runs, joins and ends jobs.

use super::copies;
use super::Loan;
use crate::backoff::Backoff;
use crate::controller::Controller;
use crate::flow::{done, guarded, Flow, Handoff, Step, Then};
use crate::handles::SubdirId;
use crate::mutex::lock;
use crate::Error;
use std::collections::HashMap;
use std::sync::atomic::{AtomicBool, AtomicU32, Ordering};
use std::sync::{Arc, Mutex};
use std::time::{Duration, Instant};

type Answer = Arc<Handoff<Result<(), Error>>>;

/// The fill jobs running, by the volume they fill.
#[derive(Default)]
pub struct Fills {
    running: Mutex<HashMap<SubdirId, Arc<Job>>>,
}

/// One volume's fill.
pub(super) struct Job {
    /// The calls waiting for its end.
    waiters: Mutex<Vec<Answer>>,
    /// Set by DeleteVolume: the job ends at its next step and leaves the
    /// volume to the delete.
    cancelled: AtomicBool,
    /// The temporary filesystem it copies from, once it has one.
    temporary: Mutex<Option<Loan>>,
    /// Why its last attempt failed, for the calls that stop waiting.
    last_error: Mutex<Option<Error>>,
    attempts: AtomicU32,
    started: Instant,
}

impl Job {
    /// Keeps `loan` until the job ends (a retry's new loan replaces it).
    pub(super) fn keep(&self, loan: Loan) {
        *lock(&self.temporary) = Some(loan);
    }

    pub(super) fn is_cancelled(&self) -> bool {
        self.cancelled.load(Ordering::SeqCst)
    }

    /// Ends the job at its next step (its volume is gone or going).
    pub(super) fn cancel(&self) {
        self.cancelled.store(true, Ordering::SeqCst);
    }
}

/// A job's pauses between attempts.
const AGAIN: Backoff = Backoff::doubling(Duration::from_secs(1), Duration::from_secs(60));

/// Whether a fill that failed with `e` can never succeed as it is: its
/// volume is removed.
pub(super) fn is_final(e: &Error) -> bool {
    matches!(
        e,
        Error::NotFound(_)
            | Error::FailedPrecondition(_)
            | Error::OutOfRange(_)
            | Error::InvalidArgument(_)
            | Error::AlreadyExists(_)
    )
}

/// What a job does: one attempt at filling the volume, and the clean-up
/// of a final failure. `restore` provides both.
pub(super) trait Work: Send + Sync + 'static {
    fn attempt(&self, c: &Arc<Controller>, job: &Arc<Job>) -> Step<()>;
    /// Lets go of what the job held and, after a final failure
    /// (`failed`), removes what it made.
    fn end(&self, c: &Controller, failed: Option<&Error>);
    fn volume(&self) -> &SubdirId;
}

impl Fills {
    /// Whether a job fills `id`.
    pub fn is_running(&self, id: &SubdirId) -> bool {
        lock(&self.running).contains_key(id)
    }

    /// Ends the job filling `id` at its next step, stopping its copy:
    /// whether a copy was running (until it stops, the directory is still
    /// being written). A job still waiting for its temporary filesystem
    /// writes nothing more: it finds the volume gone.
    pub fn cancel(&self, c: &Controller, id: &SubdirId) -> bool {
        let Some(job) = lock(&self.running).get(id).cloned() else {
            return false;
        };
        job.cancel();
        c.copies.stop(id)
    }
}

/// Waits for the job filling `id`, if one runs.
pub(super) fn join(c: &Arc<Controller>, id: &SubdirId) -> Option<Step<()>> {
    let answer = Handoff::new();
    let job = {
        let running = lock(&c.fills.running);
        let job = running.get(id).cloned()?;
        // Under the registry's lock, so the job's end answers it.
        lock(&job.waiters).push(answer.clone());
        job
    };
    log::info!("volume {id}: joining the fill job under way");
    Some(wait(c, id.clone(), job, answer))
}

/// Joins the job filling `work`'s volume, or starts it (`waited`: a call
/// waits for it, parked, at most `LINODE_WAIT_TIMEOUT`).
pub(super) fn run(c: &Arc<Controller>, work: impl Work, waited: bool) -> Step<()> {
    let id = work.volume().clone();
    let answer = Handoff::new();
    let (job, start) = {
        let mut running = lock(&c.fills.running);
        let (job, start) = match running.get(&id) {
            Some(job) => (job.clone(), false),
            None => {
                let job = Arc::new(Job {
                    waiters: Mutex::default(),
                    cancelled: AtomicBool::new(false),
                    temporary: Mutex::default(),
                    last_error: Mutex::default(),
                    attempts: AtomicU32::new(0),
                    started: Instant::now(),
                });
                running.insert(id.clone(), job.clone());
                (job, true)
            }
        };
        if waited {
            lock(&job.waiters).push(answer.clone());
        }
        (job, start)
    };
    if start {
        log::info!("volume {id}: fill job started");
        c.rpc.detach(
            "directory volume fill",
            attempts(c.clone(), job.clone(), Arc::new(work)),
        );
    } else if waited {
        log::info!("volume {id}: joining the fill job under way");
    }
    if !waited {
        return done(());
    }
    wait(c, id, job, answer)
}

/// Parks until `job` (filling `id`) sends `answer`, at most
/// `LINODE_WAIT_TIMEOUT`: then DeadlineExceeded, and the job goes on.
fn wait(c: &Controller, id: SubdirId, job: Arc<Job>, answer: Answer) -> Step<()> {
    let late = answer.clone();
    c.timers.at(Instant::now() + c.call_wait, move || {
        let last = lock(&job.last_error)
            .as_ref()
            .map(|e| format!(" (its last attempt: {})", e.message()))
            .unwrap_or_default();
        late.send(Err(Error::DeadlineExceeded(format!(
            "volume {id} is still being filled{last}; the fill goes on, and a retry waits for it again"
        ))));
    });
    answer.receive(|r: Result<(), Error>| r.map(Flow::Ready))
}

/// One attempt, then the next after a pause while the failure is not
/// final and the job may go on; the job ends with the first that is.
fn attempts(c: Arc<Controller>, job: Arc<Job>, work: Arc<dyn Work>) -> Step<()> {
    let (c2, job2, work2) = (c.clone(), job.clone(), work.clone());
    guarded("directory volume fill", move || work.attempt(&c, &job)).then_result(move |r| {
        let (c, job, work) = (c2, job2, work2);
        let id = work.volume().clone();
        let e = match r {
            Ok(()) => return finish(&c, &job, &*work, Ok(())),
            Err(e) => e,
        };
        let ends = if is_final(&e) {
            Some("final")
        } else if job.is_cancelled() {
            Some("the volume is being deleted")
        } else if copies::is_stopping() {
            Some("the controller is stopping")
        } else if !c.lease.is_held() {
            Some("this controller no longer holds the lease; the holder resumes it")
        } else if job.started.elapsed() >= c.fill_timeout {
            Some("FILL_TIMEOUT has passed")
        } else {
            None
        };
        if let Some(why) = ends {
            log::warn!("volume {id}: the fill ends ({why}): {e}");
            return finish(&c, &job, &*work, Err(e));
        }
        let n = job.attempts.fetch_add(1, Ordering::SeqCst) + 1;
        let pause = AGAIN.nth(n);
        log::warn!("volume {id}: fill attempt {n} failed ({e}); trying again in {pause:?}");
        *lock(&job.last_error) = Some(e);
        let timers = c.timers.clone();
        timers.after(pause, move || attempts(c, job, work))
    })
}

/// Ends the job: the clean-up its outcome calls for, its holds let go,
/// every waiting call answered.
fn finish(c: &Controller, job: &Job, work: &dyn Work, outcome: Result<(), Error>) -> Step<()> {
    let id = work.volume();
    let final_failure = outcome.as_ref().err().filter(|e| is_final(e));
    // Cancelled or stopped: the volume stays as it is, for the delete or
    // the next process; only what the job holds goes.
    work.end(c, final_failure);
    let ended = lock(&c.fills.running).remove(id);
    drop(lock(&job.temporary).take());
    match &outcome {
        Ok(()) => log::info!("volume {id}: filled"),
        Err(e) => log::info!("volume {id}: fill job ended: {e}"),
    }
    for waiter in ended
        .iter()
        .flat_map(|job| lock(&job.waiters).drain(..).collect::<Vec<_>>())
    {
        waiter.send(outcome.clone());
    }
    done(())
}
