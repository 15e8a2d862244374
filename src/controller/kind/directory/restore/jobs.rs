//! Fills of new directory volumes as jobs of the controller, owned by no
//! call: a job runs on the worker pool as a flow that answers nobody, from
//! the first call (or the upkeep, after a restart) until the volume is
//! filled or has failed finally. Calls only wait for it: each waits at
//! most `LINODE_WAIT_TIMEOUT` (DeadlineExceeded naming the job's phase and
//! progress; the job goes on), and a later call for the same volume joins
//! it. What the job holds (the temporary filesystem it copies from, the
//! parent snapshot it reads) is the job's from the moment it asks for it
//! until it ends, whatever it waits for meanwhile. A failed attempt is
//! tried again, backing off (1 s doubling to a minute). The job fails
//! finally, removing what it made (the copied data, the quota, the
//! marker), on a final failure (the source or the volume's parent gone, a
//! source that cannot fill it, a temporary clone that failed past its
//! replacements), once `FILL_TIMEOUT` has passed since it started, or when
//! the claim it was for is gone (`watch` ends it). A job whose volume is
//! being deleted leaves it to the delete; one whose process is stopping or
//! lost the lease leaves the volume and its temporary clone for the next
//! process. What is filled, and how, is `restore`'s; this file only runs,
//! joins and ends jobs.

use crate::backoff::Backoff;
use crate::controller::state::controller::Controller;
use crate::controller::state::fills::copies;
use crate::controller::state::fills::progress::Report;
use crate::controller::state::fills::running::{Answer, Job};
use crate::flow::{done, guarded, Flow, Handoff, Step, Then};
use crate::handles::SubdirId;
use crate::mutex::lock;
use crate::Error;
use std::sync::atomic::{AtomicBool, AtomicU32, Ordering};
use std::sync::{Arc, Mutex};
use std::time::{Duration, Instant};

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

/// How a job ended, for what it leaves and tells.
#[derive(Debug, Clone, Copy)]
pub(super) enum Ending<'a> {
    Filled,
    /// Failed finally: what it made goes.
    Failed(&'a Error),
    /// Ended unfinished: the volume is left as it is, to its delete or to
    /// the next process.
    Unfinished,
}

/// What a job does: one attempt at filling the volume, and the clean-up
/// of its end. `restore` provides both.
pub(super) trait Work: Send + Sync + 'static {
    fn attempt(&self, c: &Arc<Controller>, job: &Arc<Job>) -> Step<()>;
    /// Lets go of what the job held and, after a final failure, removes
    /// what it made.
    fn end(&self, c: &Controller, job: &Job, ending: Ending<'_>);
    fn volume(&self) -> &SubdirId;
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
                    abandoned: Mutex::default(),
                    stop: Arc::default(),
                    clone: Mutex::default(),
                    last_error: Mutex::default(),
                    attempts: AtomicU32::new(0),
                    started: Instant::now(),
                    report: Report::default(),
                    made_for: Mutex::default(),
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
/// `LINODE_WAIT_TIMEOUT`: then DeadlineExceeded naming where the job is,
/// and the job goes on.
fn wait(c: &Arc<Controller>, id: SubdirId, job: Arc<Job>, answer: Answer) -> Step<()> {
    let late = answer.clone();
    let c2 = c.clone();
    c.timers.at(Instant::now() + c.call_wait, move || {
        let copied = c2.copies.progress(&id);
        let phase = job.report.describe(copied);
        let last = lock(&job.last_error)
            .as_ref()
            .map(|e| format!("; its last attempt failed: {}", e.message()))
            .unwrap_or_default();
        late.send(Err(Error::DeadlineExceeded(format!(
            "volume {id} is still being filled: {phase}{last}; the fill goes on, and a retry waits for it again"
        ))));
    });
    answer.receive(|r: Result<(), Error>| r.map(Flow::Ready))
}

/// How a job that did not finish leaves what it holds.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
enum Leaving {
    /// Filled, or failed finally: what it made goes after a failure; its
    /// temporary clone goes with the last hold.
    Done,
    /// Its volume is being deleted: the delete takes the volume; the
    /// temporary clone goes with the last hold.
    ToTheDelete,
    /// The process stops or lost the lease: the volume and the temporary
    /// clone stay for the next process to resume and adopt.
    ToTheNextProcess,
}

/// One attempt, then the next after a pause while the failure is not
/// final and the job may go on; the job ends with the first that is.
fn attempts(c: Arc<Controller>, job: Arc<Job>, work: Arc<dyn Work>) -> Step<()> {
    let (c2, job2, work2) = (c.clone(), job.clone(), work.clone());
    guarded("directory volume fill", move || work.attempt(&c, &job)).then_result(move |r| {
        let (c, job, work) = (c2, job2, work2);
        let id = work.volume().clone();
        let e = match r {
            Ok(()) => return finish(&c, &job, &*work, Ok(()), Leaving::Done),
            Err(e) => e,
        };
        let abandoned = lock(&job.abandoned).clone();
        let (why, e, leaving) = if let Some(why) = abandoned {
            ("its claim is gone", why, Leaving::Done)
        } else if is_final(&e) {
            ("final", e, Leaving::Done)
        } else if job.is_cancelled() {
            ("the volume is being deleted", e, Leaving::ToTheDelete)
        } else if copies::is_stopping() {
            ("the controller is stopping", e, Leaving::ToTheNextProcess)
        } else if !c.lease.is_held() {
            (
                "this controller no longer holds the lease; the holder resumes it",
                e,
                Leaving::ToTheNextProcess,
            )
        } else if job.started.elapsed() >= c.fill_timeout {
            let timeout = Error::DeadlineExceeded(format!(
                "the fill of volume {id} did not finish within FILL_TIMEOUT ({:?}; its last attempt: {}); what it made is removed, and a retry starts anew",
                c.fill_timeout,
                e.message()
            ));
            ("FILL_TIMEOUT has passed", timeout, Leaving::Done)
        } else {
            let n = job.attempts.fetch_add(1, Ordering::SeqCst) + 1;
            let pause = AGAIN.nth(n);
            log::warn!("volume {id}: fill attempt {n} failed ({e}); trying again in {pause:?}");
            *lock(&job.last_error) = Some(e);
            let timers = c.timers.clone();
            return timers.after(pause, move || attempts(c, job, work));
        };
        log::warn!("volume {id}: the fill ends ({why}): {e}");
        finish(&c, &job, &*work, Err(e), leaving)
    })
}

/// Ends the job: the clean-up its outcome calls for, its holds let go,
/// every waiting call answered.
fn finish(
    c: &Controller,
    job: &Job,
    work: &dyn Work,
    outcome: Result<(), Error>,
    leaving: Leaving,
) -> Step<()> {
    let id = work.volume();
    let ending = match (&outcome, leaving) {
        (Ok(()), _) => Ending::Filled,
        (Err(e), Leaving::Done) => Ending::Failed(e),
        (Err(_), Leaving::ToTheDelete | Leaving::ToTheNextProcess) => Ending::Unfinished,
    };
    work.end(c, job, ending);
    let ended = lock(&c.fills.running).remove(id);
    if let Some(hold) = lock(&job.clone).take() {
        match leaving {
            Leaving::ToTheNextProcess => hold.leave(),
            Leaving::Done | Leaving::ToTheDelete => drop(hold),
        }
    }
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
