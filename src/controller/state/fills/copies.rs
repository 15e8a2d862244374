//! The copies that fill directory volumes, one per volume at a time, each
//! on a thread of its own (a copy takes minutes to hours; no RPC worker
//! waits for it: the fill job parks until it ends). A second run for a
//! volume whose copy runs joins it; DeleteVolume of that volume stops it;
//! SIGTERM stops them all (`stop_all`), between files, so a later call
//! resumes where they were. Progress goes to the metrics while a copy
//! runs and to the log (by `fs_tree`'s copy, at a bounded rate). What is
//! copied, and from where, is the job's; nothing here knows a snapshot.

use crate::flow::{Flow, Handoff, Step};
use crate::fs_tree::{CopyOptions, CopyStats, Progress};
use crate::handles::SubdirId;
use crate::metrics::{self, CopyOutcome, RunningCopies};
use crate::mutex::lock;
use crate::Error;
use std::collections::HashMap;
use std::sync::atomic::{AtomicBool, Ordering};
use std::sync::{Arc, Mutex, Weak};

/// Set once the process is stopping: no copy starts, the running stop.
static STOPPING: AtomicBool = AtomicBool::new(false);

/// The copies running, by the volume they fill.
type Registry = Mutex<HashMap<SubdirId, Arc<Running>>>;

/// Every `Copies` of the process, for `stop_all`.
static ALL: Mutex<Vec<Weak<Registry>>> = Mutex::new(Vec::new());

type Answer = Arc<Handoff<Result<(), Error>>>;

struct Running {
    stop: Arc<AtomicBool>,
    progress: Arc<Progress>,
    /// Who waits for the end: the call that started it and those that joined.
    waiters: Mutex<Vec<Answer>>,
}

/// The copies of one controller.
pub struct Copies {
    running: Arc<Registry>,
    threads: usize,
}

/// Stops every copy of the process between two files, and keeps new ones
/// from starting (SIGTERM: the CreateVolume calls waiting for them are
/// answered Unavailable, and a later call resumes).
pub fn stop_all() {
    STOPPING.store(true, Ordering::SeqCst);
    for copies in lock(&ALL).iter().filter_map(Weak::upgrade) {
        for running in lock(&copies).values() {
            running.stop.store(true, Ordering::SeqCst);
        }
    }
}

/// Whether the process is stopping (no fill is tried again then).
pub fn is_stopping() -> bool {
    STOPPING.load(Ordering::SeqCst)
}

fn stopping() -> Error {
    Error::Unavailable("the controller is stopping; the copy resumes on the next call".into())
}

impl Copies {
    /// Copies with `threads` files at once each.
    pub fn new(threads: usize) -> Copies {
        let running = Arc::new(Mutex::new(HashMap::new()));
        lock(&ALL).push(Arc::downgrade(&running));
        let watched = Arc::downgrade(&running);
        metrics::watch_restore_copies(move || {
            let running = watched.upgrade()?;
            let all = lock(&running);
            let mut sum = RunningCopies {
                copies: all.len(),
                ..RunningCopies::default()
            };
            for r in all.values() {
                let p = &r.progress;
                sum.files += p.files.load(Ordering::Relaxed);
                sum.bytes += p.bytes.load(Ordering::Relaxed);
                sum.entries += p.files.load(Ordering::Relaxed)
                    + p.directories.load(Ordering::Relaxed)
                    + p.reused.load(Ordering::Relaxed);
            }
            Some(sum)
        });
        Copies { running, threads }
    }

    /// Stops the copy filling `id`, if one runs: whether one did.
    pub fn stop(&self, id: &SubdirId) -> bool {
        match lock(&self.running).get(id) {
            Some(running) => {
                running.stop.store(true, Ordering::SeqCst);
                true
            }
            None => false,
        }
    }

    /// What the copy filling `id` has done so far, while one runs.
    pub fn progress(&self, id: &SubdirId) -> Option<CopyStats> {
        let running = lock(&self.running).get(id).cloned()?;
        let p = &running.progress;
        Some(CopyStats {
            files: p.files.load(Ordering::Relaxed),
            bytes: p.bytes.load(Ordering::Relaxed),
            directories: p.directories.load(Ordering::Relaxed),
            skipped: p.skipped.load(Ordering::Relaxed),
            reused: p.reused.load(Ordering::Relaxed),
        })
    }

    /// Runs `job` for `id` on a thread of its own, parked until it ends;
    /// a copy already running for `id` is joined instead.
    pub fn run(
        &self,
        id: SubdirId,
        job: impl FnOnce(&CopyOptions) -> Result<CopyStats, Error> + Send + 'static,
    ) -> Step<()> {
        if STOPPING.load(Ordering::SeqCst) {
            return Err(stopping());
        }
        let answer = Handoff::new();
        let running = {
            let mut all = lock(&self.running);
            if let Some(running) = all.get(&id) {
                lock(&running.waiters).push(answer.clone());
                return wait(answer);
            }
            let running = Arc::new(Running {
                stop: Arc::default(),
                progress: Arc::default(),
                waiters: Mutex::new(vec![answer.clone()]),
            });
            all.insert(id.clone(), running.clone());
            running
        };
        let options = CopyOptions {
            threads: self.threads,
            stop: running.stop.clone(),
            progress: running.progress.clone(),
        };
        let registry = self.running.clone();
        let name = format!("copy {id}");
        let started = id.clone();
        let spawned = std::thread::Builder::new().name(name).spawn(move || {
            log::info!("filling volume {id}: copy started");
            let began = std::time::Instant::now();
            let result = job(&options);
            let stats = |s: &CopyStats| {
                format!(
                    "{} files ({} bytes), {} directories, {} reused from an earlier attempt, {} skipped",
                    s.files, s.bytes, s.directories, s.reused, s.skipped
                )
            };
            let done = CopyStats {
                files: options.progress.files.load(Ordering::Relaxed),
                bytes: options.progress.bytes.load(Ordering::Relaxed),
                ..CopyStats::default()
            };
            let outcome = match &result {
                Ok(s) => {
                    log::info!(
                        "filling volume {id}: copy done in {:.2} s: {}",
                        began.elapsed().as_secs_f64(),
                        stats(s)
                    );
                    CopyOutcome::Ok
                }
                Err(e) if options.stop.load(Ordering::SeqCst) => {
                    log::info!("filling volume {id}: copy stopped ({e}); a later call resumes it");
                    CopyOutcome::Stopped
                }
                Err(e) => {
                    log::warn!("filling volume {id}: copy failed: {e}");
                    CopyOutcome::Failed
                }
            };
            metrics::restore_copy_ended(outcome, done.files, done.bytes);
            let running = lock(&registry).remove(&id);
            let result = match (result, outcome) {
                (Ok(_), _) => Ok(()),
                (Err(_), CopyOutcome::Stopped) if STOPPING.load(Ordering::SeqCst) => Err(stopping()),
                (Err(e), CopyOutcome::Stopped) => Err(Error::Aborted(format!(
                    "the copy filling volume {id} was stopped: {e}"
                ))),
                (Err(e), _) => Err(e),
            };
            for waiter in running.iter().flat_map(|r| lock(&r.waiters).drain(..).collect::<Vec<_>>()) {
                waiter.send(result.clone());
            }
        });
        if let Err(e) = spawned {
            lock(&self.running).remove(&started);
            return Err(Error::Internal(format!("start a copy thread: {e}")));
        }
        wait(answer)
    }
}

fn wait(answer: Answer) -> Step<()> {
    answer.receive(|r: Result<(), Error>| r.map(Flow::Ready))
}
