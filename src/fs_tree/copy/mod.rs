//! Copying a directory tree a tenant wrote (a snapshot's, mounted on the
//! controller) into a volume directory: regular files, directories,
//! symlinks and hard links, with their modes (set-id and sticky bits too),
//! owners and access and modification times; devices, sockets and fifos
//! are skipped, one log line each. It must not follow, resolve or write
//! through anything the tenant made: every step is an `*at` call relative
//! to an open directory, with `O_NOFOLLOW`; a symlink is copied as its
//! text; nothing is written outside `to`, whose tree is this module's
//! alone while it runs (one copy into one `to` at a time). Nothing here
//! knows of volumes, snapshots or mounts.
//!
//! One walker (the calling thread) reads the directories and hands each
//! other entry to a fixed set of `threads` workers through a queue of at
//! most 64 entries a worker from at most `2 × threads` directories (a full
//! queue makes the walker wait), so per-file latency, which dominates on
//! NFS, is paid `threads` at a time, and the workers spread over the
//! directories queued (`queue`): a client changes one directory at a time.
//! The walk descends
//! into a subdirectory as soon as it reads one and keeps open only the
//! directory it is in; for each level above it remembers the two
//! directories' identities and the place among the entries it stopped at
//! (the filesystem's readdir cookie, checked on return, the entry then
//! looked for by name should the cookie lead elsewhere), and it climbs back
//! through `..`, checking it arrived where it came from. So the stack is
//! flat, the memory of the walk grows with the depth only (a name and a few
//! numbers per level), and descriptors are bounded by the queue: at most
//! `3 × threads + 1` directories are open on both sides (those with
//! entries queued, those workers are in, the walker's), plus, per worker,
//! the two files it copies or the two
//! directories it goes through to find a hard link's first copy, whatever
//! the depth or width; `threads` is capped at 64. Only the map of hard-linked inodes
//! grows with the tree: one entry per inode met whose other names are not
//! all met yet, each holding where its first copy is (found again by name
//! from `to`, which is this module's alone). A directory's owner, mode and
//! times are set by whoever finishes with it last, the walker or a worker,
//! after everything in it was made.
//!
//! Resume: a file, symlink or hard link is made under its own name and
//! given its owner, mode and times, the modification time last (`place`),
//! so an entry cut short differs from its source. A later call takes an
//! entry already there as copied when it is equal to its source:
//! the same kind, size, modification time, mode and owner (and for a
//! symlink the same text; for a hard link the same inode as the first
//! name's copy); anything else is made again (so a destination keeping
//! coarser times than the source has everything copied again). Entering a
//! directory an earlier attempt made, a call first removes the temporary
//! names (`.lnc-copy-*`) earlier versions of this copy left there (a source
//! entry named so is copied again each time). `stop` halts the walker and the workers between files; the
//! directories not finished keep the attributes of work in progress until
//! a later call finishes them.
//!
//! Here are the calls' options, counters and shared state; `walk` is the
//! walker, `worker` the workers' choice per entry, `file` the copy of a
//! file's data or a symlink, `place` where an entry is made, `queue` the
//! entries between the walker and the workers, `links` the map of
//! hard-linked inodes, `node` the directories of the copy and `attrs` what
//! is kept of an entry and compared on resume.

mod attrs;
mod file;
mod links;
mod node;
mod place;
mod queue;
#[cfg(test)]
mod tests;
mod walk;
mod worker;

use crate::fs_tree::dir::{Dir, Identity};
use crate::mutex::lock;
use crate::Error;
use attrs::{identity, Attrs};
use links::Links;
use node::{Folder, Node};
use queue::Queue;
use std::ffi::CString;
use std::io;
use std::sync::atomic::{AtomicBool, AtomicU64, AtomicUsize, Ordering};
use std::sync::{Arc, Mutex};
use std::time::Instant;

/// More workers than this gain nothing on one NFS server and would let the
/// queue's open directories near `RLIMIT_NOFILE`.
const MAX_THREADS: usize = 64;

/// Entries that may wait per worker: enough that the walker reads a few
/// directories ahead (the workers spread over them), little memory.
const QUEUED_PER_WORKER: usize = 64;

/// How often, at most, a progress line is logged.
const LOG_EVERY_MS: u64 = 10_000;

/// How a copy runs.
#[derive(Debug, Clone)]
pub struct CopyOptions {
    /// Files copied at once.
    pub threads: usize,
    /// Set to stop the copy at the next file boundary; it then returns
    /// `Unavailable`.
    pub stop: Arc<AtomicBool>,
    /// Counters updated as the copy goes.
    pub progress: Arc<Progress>,
}

impl Default for CopyOptions {
    fn default() -> CopyOptions {
        CopyOptions {
            threads: 8,
            stop: Arc::default(),
            progress: Arc::default(),
        }
    }
}

/// What a copy has done so far, readable while it runs.
#[derive(Debug, Default)]
pub struct Progress {
    /// Files, symlinks and hard links made.
    pub files: AtomicU64,
    /// Bytes of file data written.
    pub bytes: AtomicU64,
    /// Directories made, or found made by an earlier attempt.
    pub directories: AtomicU64,
    /// Devices, sockets and fifos left out.
    pub skipped: AtomicU64,
    /// Files, symlinks and hard links an earlier attempt made, found equal.
    pub reused: AtomicU64,
}

impl Progress {
    fn snapshot(&self) -> CopyStats {
        CopyStats {
            files: self.files.load(Ordering::Relaxed),
            bytes: self.bytes.load(Ordering::Relaxed),
            directories: self.directories.load(Ordering::Relaxed),
            skipped: self.skipped.load(Ordering::Relaxed),
            reused: self.reused.load(Ordering::Relaxed),
        }
    }

    fn add(counter: &AtomicU64, n: u64) {
        counter.fetch_add(n, Ordering::Relaxed);
    }
}

/// What one call did (the `Progress` counters it added to).
#[derive(Debug, Clone, Copy, Default, PartialEq, Eq)]
pub struct CopyStats {
    pub files: u64,
    pub bytes: u64,
    pub directories: u64,
    pub skipped: u64,
    pub reused: u64,
}

impl CopyStats {
    fn since(self, before: CopyStats) -> CopyStats {
        CopyStats {
            files: self.files.saturating_sub(before.files),
            bytes: self.bytes.saturating_sub(before.bytes),
            directories: self.directories.saturating_sub(before.directories),
            skipped: self.skipped.saturating_sub(before.skipped),
            reused: self.reused.saturating_sub(before.reused),
        }
    }
}

/// Copies everything below `from` into `to`, an existing directory, empty
/// or partly filled by an earlier attempt, and gives `to` the owner, mode
/// and times of `from`. Errors name the path below `from`: `Internal` for
/// a failed operation, `Unavailable` when stopped or when the source
/// changed under the copy (a later call resumes), `FailedPrecondition` for
/// another filesystem mounted inside the source or `to` inside `from`.
pub fn copy_tree(from: &Dir, to: &Dir, options: &CopyOptions) -> Result<CopyStats, Error> {
    let before = options.progress.snapshot();
    let top =
        |what: &'static str| move |e: io::Error| Error::Internal(format!("copy: {what}: {e}"));
    let from_st = from.stat().map_err(top("inspect the source"))?;
    let to_st = to.stat().map_err(top("inspect the destination"))?;
    let copy = Copy {
        to,
        device: from_st.st_dev,
        to_id: identity(&to_st),
        options,
        links: Links::default(),
        failure: Mutex::new(None),
        failed: AtomicBool::new(false),
        complete: AtomicBool::new(false),
        started: Instant::now(),
        logged_ms: AtomicU64::new(0),
    };
    let root = Arc::new(Folder::new(
        (
            from.reopen().map_err(top("open the source"))?,
            to.reopen().map_err(top("open the destination"))?,
        ),
        Arc::new(Node {
            parent: None,
            name: CString::default(),
            attrs: Attrs::of(&from_st),
            fresh: false,
            left: AtomicUsize::new(1),
        }),
        (identity(&from_st), identity(&to_st)),
    ));
    let threads = options.threads.clamp(1, MAX_THREADS);
    let queue = Queue::new(QUEUED_PER_WORKER * threads, 2 * threads, threads);
    std::thread::scope(|s| {
        for i in 0..threads {
            let (copy, queue) = (&copy, &queue);
            let spawned = std::thread::Builder::new()
                .name(format!("copy-{i}"))
                .spawn_scoped(s, move || copy.work(queue));
            if let Err(e) = spawned {
                queue.leave();
                copy.fail(Error::Internal(format!("copy: start a worker: {e}")));
            }
        }
        let walked = copy
            .clean(&root.dst, &root.node)
            .and_then(|()| copy.walk(root, &queue));
        queue.close();
        if let Err(e) = walked {
            copy.fail(e);
        }
    });
    if let Some(e) = copy.failure.into_inner().unwrap_or_else(|p| p.into_inner()) {
        return Err(e);
    }
    if !copy.complete.load(Ordering::Acquire) {
        return Err(stopped());
    }
    Ok(options.progress.snapshot().since(before))
}

/// One call's shared state.
struct Copy<'a> {
    to: &'a Dir,
    /// The source's filesystem: a directory on another is not entered.
    device: u64,
    to_id: Identity,
    options: &'a CopyOptions,
    links: Links,
    failure: Mutex<Option<Error>>,
    failed: AtomicBool,
    /// The top's attributes are set: everything was copied.
    complete: AtomicBool,
    started: Instant,
    logged_ms: AtomicU64,
}

fn failed(what: &str, path: &str, e: io::Error) -> Error {
    Error::Internal(format!("copy: {what} {path:?}: {e}"))
}

fn changed(path: &str, why: impl std::fmt::Display) -> Error {
    Error::Unavailable(format!(
        "copy: {path:?} changed while it was copied ({why}); retry"
    ))
}

/// The error of `what` (done to source entry `path`) that failed with
/// `e`: a change of the source, which a retry copies, when `gone` says
/// the entry is no longer what the listing said; else a failure.
fn source_error(what: &str, path: &str, e: io::Error, gone: fn(&io::Error) -> bool) -> Error {
    if gone(&e) {
        changed(path, e)
    } else {
        failed(what, path, e)
    }
}

fn stopped() -> Error {
    Error::Unavailable("copy stopped before it completed; a later copy resumes it".into())
}

/// Whether an error opening a source entry means it is no longer what the
/// directory listing said.
fn raced(e: &io::Error) -> bool {
    matches!(
        e.raw_os_error(),
        Some(libc::ENOENT | libc::ENOTDIR | libc::ELOOP | libc::EISDIR)
    )
}

fn is_enoent(e: &io::Error) -> bool {
    e.raw_os_error() == Some(libc::ENOENT)
}

impl Copy<'_> {
    /// Records the first error; the others follow from it.
    fn fail(&self, e: Error) {
        let mut failure = lock(&self.failure);
        if failure.is_none() {
            *failure = Some(e);
        }
        self.failed.store(true, Ordering::Release);
    }

    fn halted(&self) -> bool {
        self.options.stop.load(Ordering::Relaxed) || self.failed.load(Ordering::Acquire)
    }

    /// Logs the counters when the last line is old enough.
    fn tick(&self) {
        let now = self.started.elapsed().as_millis() as u64;
        let last = self.logged_ms.load(Ordering::Relaxed);
        if now.saturating_sub(last) < LOG_EVERY_MS
            || self
                .logged_ms
                .compare_exchange(last, now, Ordering::Relaxed, Ordering::Relaxed)
                .is_err()
        {
            return;
        }
        let p = self.options.progress.snapshot();
        log::info!(
            "copy: {} files ({} MiB) and {} directories copied, {} found copied, {} skipped, in {} s",
            p.files,
            p.bytes >> 20,
            p.directories,
            p.reused,
            p.skipped,
            now / 1000
        );
    }
}
