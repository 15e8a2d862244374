//! The entries between the walker and the workers. At most `capacity`
//! wait, from at most `folders` directories (each keeps its two sides
//! open), and the walker waits for room. A worker takes the oldest entry
//! of the directory the fewest workers are in: an NFS client makes the
//! changes of one directory (a create, a link, a remove) one at a time,
//! each for a whole round trip, so workers spread over several
//! directories get through more than all of them in one. Nothing here
//! copies or reads a listing.

use super::node::{Folder, Job};
use crate::mutex::lock;
use std::collections::VecDeque;
use std::sync::{Arc, Condvar, Mutex};

pub(super) struct Queue {
    state: Mutex<State>,
    /// Signalled when an entry was taken or the last worker left.
    room: Condvar,
    /// Signalled when an entry was added or no more will be.
    work: Condvar,
    capacity: usize,
    folders: usize,
}

struct State {
    jobs: VecDeque<Job>,
    /// Directories with entries waiting.
    folders: usize,
    /// The walker adds no more.
    closed: bool,
    /// Workers still taking entries.
    workers: usize,
}

/// What a worker holds while it copies an entry: the entry, and its share
/// of the directory's workers, given back when it is dropped.
pub(super) struct Taken {
    pub(super) job: Job,
}

impl Drop for Taken {
    fn drop(&mut self) {
        self.job.folder.working(-1);
    }
}

impl Queue {
    pub(super) fn new(capacity: usize, folders: usize, workers: usize) -> Queue {
        Queue {
            state: Mutex::new(State {
                jobs: VecDeque::new(),
                folders: 0,
                closed: false,
                workers,
            }),
            room: Condvar::new(),
            work: Condvar::new(),
            capacity: capacity.max(1),
            folders: folders.max(1),
        }
    }

    /// Adds `job` once there is room; false when no worker is left to
    /// take it.
    pub(super) fn add(&self, job: Job) -> bool {
        let mut state = lock(&self.state);
        // Its entries may all be taken while the walker waits.
        let mut new_folder = job.folder.queued() == 0;
        while state.workers > 0
            && (state.jobs.len() >= self.capacity || (new_folder && state.folders >= self.folders))
        {
            state = self.room.wait(state).unwrap_or_else(|p| p.into_inner());
            new_folder = job.folder.queued() == 0;
        }
        if state.workers == 0 {
            return false;
        }
        if new_folder {
            state.folders += 1;
        }
        job.folder.queue(1);
        state.jobs.push_back(job);
        self.work.notify_one();
        true
    }

    /// The walker adds no more entries.
    pub(super) fn close(&self) {
        lock(&self.state).closed = true;
        self.work.notify_all();
    }

    /// The next entry for a worker, once there is one: the oldest of the
    /// directory the fewest workers are in. `None` once the queue is
    /// closed and empty.
    pub(super) fn take(&self) -> Option<Taken> {
        let mut state = lock(&self.state);
        loop {
            if let Some(at) = least_busy(&state.jobs) {
                let job = state.jobs.remove(at).expect("a queued entry");
                if job.folder.queue(-1) == 0 {
                    state.folders -= 1;
                }
                job.folder.working(1);
                self.room.notify_one();
                return Some(Taken { job });
            }
            if state.closed {
                return None;
            }
            state = self.work.wait(state).unwrap_or_else(|p| p.into_inner());
        }
    }

    /// A worker leaves; once the last has, the walker adds nothing more.
    pub(super) fn leave(&self) {
        lock(&self.state).workers -= 1;
        self.room.notify_all();
    }

    /// A worker's place, left when it is dropped, however the worker ends.
    pub(super) fn worker(&self) -> Worker<'_> {
        Worker(self)
    }
}

/// A worker's place in the queue.
pub(super) struct Worker<'q>(&'q Queue);

impl Drop for Worker<'_> {
    fn drop(&mut self) {
        self.0.leave();
    }
}

/// Where in `jobs` the oldest entry of the least busy directory is.
fn least_busy(jobs: &VecDeque<Job>) -> Option<usize> {
    let mut best: Option<(usize, usize)> = None;
    let mut last: Option<&Arc<Folder>> = None;
    for (i, job) in jobs.iter().enumerate() {
        // Entries of one directory stand together: only the first counts.
        if last.is_some_and(|f| Arc::ptr_eq(f, &job.folder)) {
            continue;
        }
        last = Some(&job.folder);
        let busy = job.folder.busy();
        if best.is_none_or(|(_, b)| busy < b) {
            best = Some((i, busy));
            if busy == 0 {
                break;
            }
        }
    }
    best.map(|(i, _)| i)
}
