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
//! other entry to a fixed set of `threads` workers through a queue of
//! `threads` jobs (a full queue makes the walker wait), so per-file latency,
//! which dominates on NFS, is paid `threads` at a time. The walk descends
//! into a subdirectory as soon as it reads one and keeps open only the
//! directory it is in; for each level above it remembers the two
//! directories' identities and the place among the entries it stopped at
//! (the filesystem's readdir cookie, checked on return, the entry then
//! looked for by name should the cookie lead elsewhere), and it climbs back
//! through `..`, checking it arrived where it came from. So the stack is
//! flat, the memory of the walk grows with the depth only (a name and a few
//! numbers per level), and descriptors are bounded by the queue: at most
//! `2 × threads + 1` directories are open on both sides (each job keeps
//! its own open), plus, per worker, the two files it copies or the two
//! directories it goes through to find a hard link's first copy, whatever
//! the depth or width; `threads` is capped at 64. Only the map of hard-linked inodes
//! grows with the tree: one entry per inode met whose other names are not
//! all met yet, each holding where its first copy is (found again by name
//! from `to`, which is this module's alone). A directory's owner, mode and
//! times are set by whoever finishes with it last, the walker or a worker,
//! after everything in it was made.
//!
//! Resume: a file, symlink or hard link is made under a temporary name
//! (`.lnc-copy-*`) in its directory, given its owner, mode and times (the
//! modification time last), and only then renamed over its name, so an
//! entry bearing its name was complete when it was renamed. A later call
//! takes an entry already there as copied when it is equal to its source:
//! the same kind, size, modification time, mode and owner (and for a
//! symlink the same text; for a hard link the same inode as the first
//! name's copy); anything else is made again (so a destination keeping
//! coarser times than the source has everything copied again). Entering a
//! directory an earlier attempt made, a call first removes the temporary
//! names that attempt may have left there (a source entry named so is
//! copied again each time). `stop` halts the walker and the workers between files; the
//! directories not finished keep the attributes of work in progress until
//! a later call finishes them.

use super::dir::{self, Dir, Entries, Identity, Kind, Position, Seek};
use super::remove::remove_tree;
use crate::mutex::{lock, wait};
use crate::Error;
use std::collections::hash_map::{Entry, HashMap};
use std::ffi::{CStr, CString};
use std::fs::{File, Permissions};
use std::io::{self, Read, Seek as _, SeekFrom};
use std::os::unix::fs::PermissionsExt;
use std::sync::atomic::{AtomicBool, AtomicU64, AtomicUsize, Ordering};
use std::sync::mpsc::{sync_channel, Receiver, SyncSender};
use std::sync::{Arc, Condvar, Mutex};
use std::time::Instant;

/// What temporary names begin with.
const TEMP_PREFIX: &str = ".lnc-copy-";

/// More workers than this gain nothing on one NFS server and would let the
/// queue's open directories near `RLIMIT_NOFILE`.
const MAX_THREADS: usize = 64;

/// How much of a file is copied between two updates of the byte count.
const CHUNK: u64 = 64 << 20;

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
        pid: std::process::id(),
        temps: AtomicU64::new(0),
        started: Instant::now(),
        logged_ms: AtomicU64::new(0),
    };
    let root = Arc::new(Folder {
        src: from.reopen().map_err(top("open the source"))?,
        dst: to.reopen().map_err(top("open the destination"))?,
        node: Arc::new(Node {
            parent: None,
            name: CString::default(),
            attrs: Attrs::of(&from_st),
            fresh: false,
            left: AtomicUsize::new(1),
        }),
        src_id: identity(&from_st),
        dst_id: identity(&to_st),
    });
    let threads = options.threads.clamp(1, MAX_THREADS);
    let (queue, jobs) = sync_channel::<Job>(threads);
    // Only the workers hold the receiving end, so should they all be gone
    // the walker's next send fails instead of waiting for ever.
    let jobs = Arc::new(Mutex::new(jobs));
    std::thread::scope(|s| {
        let queue = queue;
        for i in 0..threads {
            let jobs = jobs.clone();
            let copy = &copy;
            let spawned = std::thread::Builder::new()
                .name(format!("copy-{i}"))
                .spawn_scoped(s, move || copy.work(&jobs));
            if let Err(e) = spawned {
                copy.fail(Error::Internal(format!("copy: start a worker: {e}")));
                return;
            }
        }
        drop(jobs);
        let walked = copy
            .clean(&root.dst, &root.node)
            .and_then(|()| copy.walk(root, &queue));
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

/// A directory of the copy: where it is below the top (for messages and to
/// find a hard link's first copy) and what is still to do in it.
struct Node {
    parent: Option<Arc<Node>>,
    name: CString,
    /// The source directory's.
    attrs: Attrs,
    /// Made by this call, so nothing in it is an earlier attempt's.
    fresh: bool,
    /// The walker, until it has read the whole directory, and the jobs in
    /// it not done yet: the one that takes it to zero sets the attributes.
    left: AtomicUsize,
}

impl Drop for Node {
    /// Lets go of the ancestors one at a time: dropping them recursively
    /// would take stack in proportion to the depth.
    fn drop(&mut self) {
        let mut next = self.parent.take();
        while let Some(node) = next {
            next = match Arc::try_unwrap(node) {
                Ok(mut node) => node.parent.take(),
                Err(_) => None,
            };
        }
    }
}

/// A directory open on both sides, shared by the jobs in it.
struct Folder {
    src: Dir,
    dst: Dir,
    node: Arc<Node>,
    src_id: Identity,
    dst_id: Identity,
}

/// An entry other than a directory, for a worker to copy.
struct Job {
    folder: Arc<Folder>,
    name: CString,
}

/// A directory the walker is below: what it needs to come back.
struct Level {
    src: Identity,
    dst: Identity,
    /// Where the subdirectory the walker went into was read.
    at: Position,
}

/// What is copied of an entry's status.
#[derive(Clone, Copy)]
struct Attrs {
    mode: u32,
    uid: u32,
    gid: u32,
    size: i64,
    atime: libc::timespec,
    mtime: libc::timespec,
}

impl Attrs {
    fn of(st: &libc::stat) -> Attrs {
        Attrs {
            mode: st.st_mode,
            uid: st.st_uid,
            gid: st.st_gid,
            size: st.st_size,
            atime: libc::timespec {
                tv_sec: st.st_atime,
                tv_nsec: st.st_atime_nsec,
            },
            mtime: libc::timespec {
                tv_sec: st.st_mtime,
                tv_nsec: st.st_mtime_nsec,
            },
        }
    }

    fn times(&self) -> [libc::timespec; 2] {
        [self.atime, self.mtime]
    }

    fn kind(&self) -> u32 {
        self.mode & libc::S_IFMT
    }

    fn permissions(&self) -> u32 {
        self.mode & 0o7777
    }

    /// Whether an entry with these attributes can stand for one with
    /// `other`'s (the access time is not compared: reading changes it).
    fn same(&self, other: &Attrs) -> bool {
        self.mode == other.mode
            && self.uid == other.uid
            && self.gid == other.gid
            && self.size == other.size
            && self.mtime.tv_sec == other.mtime.tv_sec
            && self.mtime.tv_nsec == other.mtime.tv_nsec
    }
}

fn identity(st: &libc::stat) -> Identity {
    Identity {
        dev: st.st_dev,
        ino: st.st_ino,
    }
}

/// The first name met of an inode with several, and how its copy went.
enum First {
    Copying,
    Done(Arc<Node>, CString),
    Failed,
}

struct Linked {
    first: First,
    /// Names of the inode not met yet.
    unseen: libc::nlink_t,
    /// Workers waiting for the first copy.
    waiting: usize,
}

/// The inodes with several names met so far, by source device and inode.
#[derive(Default)]
struct Links {
    map: Mutex<HashMap<(u64, u64), Linked>>,
    settled: Condvar,
}

enum Claim {
    /// This name is the first: copy it, then `settle`.
    First,
    /// Link to this copy.
    To(Arc<Node>, CString),
    /// The first copy failed.
    Failed,
}

impl Links {
    /// What to do with a name of `key`, which has `nlink` names; waits
    /// while another worker copies its first. That worker waits for
    /// nothing, so the wait ends.
    fn claim(&self, key: (u64, u64), nlink: libc::nlink_t) -> Claim {
        let mut map = lock(&self.map);
        match map.entry(key) {
            Entry::Vacant(v) => {
                v.insert(Linked {
                    first: First::Copying,
                    unseen: nlink.saturating_sub(1),
                    waiting: 0,
                });
                return Claim::First;
            }
            Entry::Occupied(mut o) => {
                let linked = o.get_mut();
                linked.unseen = linked.unseen.saturating_sub(1);
                linked.waiting += 1;
            }
        }
        loop {
            // Present: an entry is removed only when nobody waits on it.
            let Some(linked) = map.get_mut(&key) else {
                return Claim::Failed;
            };
            let claim = match &linked.first {
                First::Copying => {
                    map = wait(&self.settled, map);
                    continue;
                }
                First::Done(node, name) => Claim::To(node.clone(), name.clone()),
                First::Failed => Claim::Failed,
            };
            linked.waiting -= 1;
            // Every name met and served: the copy's place is needed no more.
            if linked.unseen == 0 && linked.waiting == 0 && matches!(claim, Claim::To(..)) {
                map.remove(&key);
            }
            return claim;
        }
    }

    /// Records how the copy of `key`'s first name went: `Some` its place.
    fn settle(&self, key: (u64, u64), first: Option<(Arc<Node>, CString)>) {
        if let Some(linked) = lock(&self.map).get_mut(&key) {
            linked.first = match first {
                Some((node, name)) => First::Done(node, name),
                None => First::Failed,
            };
        }
        self.settled.notify_all();
    }
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
    /// Temporary names are this process's id and a count.
    pid: u32,
    temps: AtomicU64,
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

/// `name` in `node` (`node` itself when `name` is empty), from the top,
/// for messages: not UTF-8 shown as replacement characters, and quoted
/// with `{:?}` where used, so a newline in a name cannot forge a log line.
fn path(node: &Node, name: &CStr) -> String {
    let mut parts = Vec::new();
    if !name.is_empty() {
        parts.push(name.to_string_lossy());
    }
    let mut at = node;
    while let Some(parent) = &at.parent {
        parts.push(at.name.to_string_lossy());
        at = parent;
    }
    if parts.is_empty() {
        return ".".into();
    }
    parts.reverse();
    parts.join("/")
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

    /// The walker: reads the source tree depth first, makes its
    /// directories and queues everything else.
    fn walk(&self, top: Arc<Folder>, queue: &SyncSender<Job>) -> Result<(), Error> {
        let mut here = top;
        let mut from: Option<(Position, CString)> = None;
        let mut levels: Vec<Level> = Vec::new();
        loop {
            if let Some((name, at)) = self.read(&here, from.take(), queue)? {
                let child = self.enter(&here, &name)?;
                levels.push(Level {
                    src: here.src_id,
                    dst: here.dst_id,
                    at,
                });
                here = child;
                continue;
            }
            let Some(level) = levels.pop() else {
                return self.done_with(&here);
            };
            let up = self.climb(&here, &level)?;
            self.done_with(&here)?;
            from = Some((level.at, here.node.name.clone()));
            here = up;
        }
    }

    /// Queues the entries of `here` from where `from` says (after that
    /// subdirectory) up to the next subdirectory, which it returns with
    /// its place; `None` at the end.
    fn read(
        &self,
        here: &Arc<Folder>,
        from: Option<(Position, CString)>,
        queue: &SyncSender<Job>,
    ) -> Result<Option<(CString, Position)>, Error> {
        let mut entries = self.entries(here, from)?;
        while let Some(entry) = entries.next() {
            if self.halted() {
                return Err(stopped());
            }
            let (name, kind) = entry.map_err(|e| failed("list", &path(&here.node, c""), e))?;
            match kind {
                Kind::Directory => return Ok(Some((name, entries.position()))),
                Kind::Other => {
                    here.node.left.fetch_add(1, Ordering::AcqRel);
                    let job = Job {
                        folder: here.clone(),
                        name,
                    };
                    queue
                        .send(job)
                        .map_err(|_| Error::Internal("copy: the workers are gone".into()))?;
                }
            }
        }
        Ok(None)
    }

    /// The entries of `here`, read on after the subdirectory `from` names.
    fn entries<'f>(
        &self,
        here: &'f Folder,
        from: Option<(Position, CString)>,
    ) -> Result<Entries<'f>, Error> {
        let list = |e| failed("list", &path(&here.node, c""), e);
        let Some((at, name)) = from else {
            return here.src.entries().map_err(list);
        };
        match entries_after(&here.src, at, &name).map_err(list)? {
            Some(entries) => Ok(entries),
            None => Err(changed(&path(&here.node, &name), "it is gone")),
        }
    }

    /// Opens the subdirectory `name` of `here` on both sides, making it in
    /// the destination (or finding it made by an earlier attempt, whose
    /// temporary files it removes).
    fn enter(&self, here: &Folder, name: &CStr) -> Result<Arc<Folder>, Error> {
        let at = || path(&here.node, name);
        let src = here.src.child(name).map_err(|e| {
            if raced(&e) {
                changed(&at(), e)
            } else {
                failed("open", &at(), e)
            }
        })?;
        let st = src.stat().map_err(|e| failed("inspect", &at(), e))?;
        if st.st_dev != self.device {
            return Err(Error::FailedPrecondition(format!(
                "copy: {:?} is another filesystem mounted inside the source; it is not copied",
                at()
            )));
        }
        if identity(&st) == self.to_id {
            return Err(Error::FailedPrecondition(format!(
                "copy: the destination is inside the source, at {:?}",
                at()
            )));
        }
        let fresh = make_dir(&here.dst, name).map_err(|e| failed("make", &at(), e))?;
        let dst = here.dst.child(name).map_err(|e| failed("open", &at(), e))?;
        let dst_st = dst.stat().map_err(|e| failed("inspect", &at(), e))?;
        let node = Arc::new(Node {
            parent: Some(here.node.clone()),
            name: name.to_owned(),
            attrs: Attrs::of(&st),
            fresh,
            left: AtomicUsize::new(1),
        });
        if !fresh {
            self.clean(&dst, &node)?;
        }
        Progress::add(&self.options.progress.directories, 1);
        Ok(Arc::new(Folder {
            src,
            dst,
            node,
            src_id: identity(&st),
            dst_id: identity(&dst_st),
        }))
    }

    /// Removes the temporary files an earlier attempt left in `dst`.
    fn clean(&self, dst: &Dir, node: &Node) -> Result<(), Error> {
        let list = |e| failed("list", &path(node, c""), e);
        for entry in dst.entries().map_err(list)? {
            let (name, kind) = entry.map_err(list)?;
            if kind == Kind::Other && name.to_bytes().starts_with(TEMP_PREFIX.as_bytes()) {
                match dst.unlink(&name) {
                    Ok(()) => {}
                    Err(e) if is_enoent(&e) => {}
                    Err(e) => return Err(failed("remove", &path(node, &name), e)),
                }
            }
        }
        Ok(())
    }

    /// Opens the parents of `here` on both sides, checking they are the
    /// directories the walk came down from.
    fn climb(&self, here: &Folder, level: &Level) -> Result<Arc<Folder>, Error> {
        let at = || path(&here.node, c"..");
        let Some(node) = here.node.parent.clone() else {
            return Err(Error::Internal("copy: climbed above the top".into()));
        };
        let src = here.src.parent().map_err(|e| failed("open", &at(), e))?;
        let dst = here.dst.parent().map_err(|e| failed("open", &at(), e))?;
        let src_id = src.identity().map_err(|e| failed("inspect", &at(), e))?;
        let dst_id = dst.identity().map_err(|e| failed("inspect", &at(), e))?;
        if src_id != level.src || dst_id != level.dst {
            return Err(changed(&path(&here.node, c""), "it moved"));
        }
        Ok(Arc::new(Folder {
            src,
            dst,
            node,
            src_id,
            dst_id,
        }))
    }

    /// Counts one share of `folder`'s work done; the last sets its
    /// attributes.
    fn done_with(&self, folder: &Folder) -> Result<(), Error> {
        if folder.node.left.fetch_sub(1, Ordering::AcqRel) != 1 {
            return Ok(());
        }
        let node = &folder.node;
        let attrs = &node.attrs;
        let set = |what, e| failed(what, &path(node, c""), e);
        folder
            .dst
            .set_owner(attrs.uid, attrs.gid)
            .map_err(|e| set("chown", e))?;
        folder
            .dst
            .set_mode(attrs.permissions())
            .map_err(|e| set("chmod", e))?;
        folder
            .dst
            .set_times(&attrs.times())
            .map_err(|e| set("set the times of", e))?;
        if node.parent.is_none() {
            self.complete.store(true, Ordering::Release);
        }
        Ok(())
    }

    /// A worker: copies queued entries until the queue closes; once the
    /// copy is halted it drains the queue without copying.
    fn work(&self, jobs: &Mutex<Receiver<Job>>) {
        loop {
            let Ok(job) = lock(jobs).recv() else {
                return;
            };
            if self.halted() {
                continue;
            }
            let done = self
                .copy_entry(&job)
                .and_then(|()| self.done_with(&job.folder));
            if let Err(e) = done {
                self.fail(e);
            }
            self.tick();
        }
    }

    fn copy_entry(&self, job: &Job) -> Result<(), Error> {
        let at = || path(&job.folder.node, &job.name);
        let st = job.folder.src.stat_at(&job.name).map_err(|e| {
            if is_enoent(&e) {
                changed(&at(), e)
            } else {
                failed("inspect", &at(), e)
            }
        })?;
        let attrs = Attrs::of(&st);
        let what = match attrs.kind() {
            libc::S_IFREG | libc::S_IFLNK if st.st_nlink > 1 => {
                return self.copy_linked(job, &st, &attrs)
            }
            libc::S_IFREG | libc::S_IFLNK => return self.copy_one(job, &st, &attrs),
            libc::S_IFDIR => return Err(changed(&at(), "it became a directory")),
            libc::S_IFIFO => "fifo",
            libc::S_IFSOCK => "socket",
            libc::S_IFCHR => "character device",
            libc::S_IFBLK => "block device",
            _ => "file of an unknown kind",
        };
        log::info!(
            "copy: {:?} is a {what}; skipped (only files, directories and symlinks are copied)",
            at()
        );
        Progress::add(&self.options.progress.skipped, 1);
        Ok(())
    }

    /// An entry with several names: the first met is copied, the others
    /// linked to its copy.
    fn copy_linked(&self, job: &Job, st: &libc::stat, attrs: &Attrs) -> Result<(), Error> {
        let key = (st.st_dev, st.st_ino);
        match self.links.claim(key, st.st_nlink) {
            Claim::First => {
                let copied = self.copy_one(job, st, attrs);
                let place = copied
                    .is_ok()
                    .then(|| (job.folder.node.clone(), job.name.clone()));
                self.links.settle(key, place);
                copied
            }
            Claim::To(node, first) => self.link(job, &node, &first),
            Claim::Failed => Err(Error::Internal(format!(
                "copy: {:?}: the copy of another name of this file failed",
                path(&job.folder.node, &job.name)
            ))),
        }
    }

    /// What stands at the job's name in the destination, if anything could
    /// (its directory is an earlier attempt's); a directory standing where
    /// the source has none is removed.
    fn existing(&self, job: &Job, kind: u32) -> Result<Option<libc::stat>, Error> {
        if job.folder.node.fresh {
            return Ok(None);
        }
        let at = || path(&job.folder.node, &job.name);
        match job.folder.dst.stat_at(&job.name) {
            Ok(there) if there.st_mode & libc::S_IFMT == libc::S_IFDIR && kind != libc::S_IFDIR => {
                remove_tree(&job.folder.dst, &job.name)?;
                Ok(None)
            }
            Ok(there) => Ok(Some(there)),
            Err(e) if is_enoent(&e) => Ok(None),
            Err(e) => Err(failed("inspect the copy of", &at(), e)),
        }
    }

    /// A file or symlink, unless an equal copy is there already.
    fn copy_one(&self, job: &Job, st: &libc::stat, attrs: &Attrs) -> Result<(), Error> {
        if let Some(there) = self.existing(job, attrs.kind())? {
            let equal = attrs.same(&Attrs::of(&there))
                && (attrs.kind() != libc::S_IFLNK || self.same_target(job)?);
            if equal {
                Progress::add(&self.options.progress.reused, 1);
                return Ok(());
            }
        }
        if attrs.kind() == libc::S_IFREG {
            self.copy_file(job, st, attrs)
        } else {
            self.copy_symlink(job, attrs)
        }?;
        Progress::add(&self.options.progress.files, 1);
        Ok(())
    }

    /// Whether the job's symlink and its copy hold the same text.
    fn same_target(&self, job: &Job) -> Result<bool, Error> {
        let at = || path(&job.folder.node, &job.name);
        let source = job
            .folder
            .src
            .read_link(&job.name)
            .map_err(|e| failed("read", &at(), e))?;
        let copy = job
            .folder
            .dst
            .read_link(&job.name)
            .map_err(|e| failed("read the copy of", &at(), e))?;
        Ok(source == copy)
    }

    /// Makes something under a fresh temporary name in `dir`.
    fn temp<T>(
        &self,
        dir: &Dir,
        make: impl Fn(&Dir, &CStr) -> io::Result<T>,
    ) -> io::Result<(CString, T)> {
        let mut tries = 0;
        loop {
            let n = self.temps.fetch_add(1, Ordering::Relaxed);
            let name =
                CString::new(format!("{TEMP_PREFIX}{}-{n}", self.pid)).expect("no NUL in a number");
            match make(dir, &name) {
                Ok(made) => return Ok((name, made)),
                // A source entry of that name, copied already.
                Err(e) if e.raw_os_error() == Some(libc::EEXIST) && tries < 100 => tries += 1,
                Err(e) => return Err(e),
            }
        }
    }

    /// Runs `finish` on the temporary entry `temp` of the job's destination
    /// directory and renames it over the job's name; removes it on failure.
    fn put(
        &self,
        job: &Job,
        temp: &CStr,
        finish: impl FnOnce() -> io::Result<()>,
    ) -> io::Result<()> {
        let dst = &job.folder.dst;
        let put = finish().and_then(|()| dst.rename(temp, dst, &job.name));
        if put.is_err() {
            let _ = dst.unlink(temp);
        }
        put
    }

    fn copy_file(&self, job: &Job, st: &libc::stat, attrs: &Attrs) -> Result<(), Error> {
        let at = || path(&job.folder.node, &job.name);
        let src = job.folder.src.open_file(&job.name).map_err(|e| {
            if raced(&e) {
                changed(&at(), e)
            } else {
                failed("open", &at(), e)
            }
        })?;
        let opened = src.metadata().map_err(|e| failed("inspect", &at(), e))?;
        {
            use std::os::unix::fs::MetadataExt;
            if !opened.is_file() || opened.dev() != st.st_dev || opened.ino() != st.st_ino {
                return Err(changed(&at(), "another file stands there now"));
            }
        }
        let dst = &job.folder.dst;
        let (temp, out) = self
            .temp(dst, |dir, name| dir.create_file(name, 0o600))
            .map_err(|e| failed("create the copy of", &at(), e))?;
        self.put(job, &temp, || {
            self.fill(&src, &out, st)?;
            // Before the mode: a change of owner clears the set-id bits.
            std::os::unix::fs::fchown(&out, Some(attrs.uid), Some(attrs.gid))?;
            out.set_permissions(Permissions::from_mode(attrs.permissions()))?;
            dir::close(out)?;
            // After the close: on NFS a write-back the close causes would
            // set the modification time again.
            dst.set_times_at(&temp, &attrs.times())
        })
        .map_err(|e| failed("copy", &at(), e))
    }

    /// Copies the data of `src` into `out`; a source with fewer blocks
    /// than its size has holes, which are left holes.
    fn fill(&self, src: &File, out: &File, st: &libc::stat) -> io::Result<()> {
        let size = st.st_size.max(0) as u64;
        if (st.st_blocks.max(0) as u64).saturating_mul(512) >= size {
            return self.pour(src, out, size);
        }
        let mut at = 0;
        while at < size {
            let Some(data) = dir::seek(src, at, Seek::Data)? else {
                break;
            };
            let hole = dir::seek(src, data, Seek::Hole)?.unwrap_or(size);
            (&*src).seek(SeekFrom::Start(data))?;
            (&*out).seek(SeekFrom::Start(data))?;
            self.pour(src, out, hole - data)?;
            at = hole;
        }
        out.set_len(size)
    }

    /// Copies up to `len` bytes from where `src` is to where `out` is (the
    /// kernel copies between the files where it can), counting them. The
    /// length is known, so the end of a small file costs no further call.
    fn pour(&self, src: &File, out: &File, len: u64) -> io::Result<()> {
        let mut left = len;
        while left > 0 {
            let n = io::copy(&mut src.take(left.min(CHUNK)), &mut &*out)?;
            if n == 0 {
                break;
            }
            left -= n;
            Progress::add(&self.options.progress.bytes, n);
            self.tick();
        }
        Ok(())
    }

    fn copy_symlink(&self, job: &Job, attrs: &Attrs) -> Result<(), Error> {
        let at = || path(&job.folder.node, &job.name);
        let target = job.folder.src.read_link(&job.name).map_err(|e| {
            if e.raw_os_error() == Some(libc::EINVAL) || raced(&e) {
                changed(&at(), e)
            } else {
                failed("read", &at(), e)
            }
        })?;
        let dst = &job.folder.dst;
        let (temp, ()) = self
            .temp(dst, |dir, name| dir.symlink(&target, name))
            .map_err(|e| failed("create the copy of", &at(), e))?;
        self.put(job, &temp, || {
            dst.set_owner_at(&temp, attrs.uid, attrs.gid)?;
            dst.set_times_at(&temp, &attrs.times())
        })
        .map_err(|e| failed("copy", &at(), e))
    }

    /// Makes the job's name another name of `first` in `node`, the copy of
    /// one of its other names, unless it is one already.
    fn link(&self, job: &Job, node: &Arc<Node>, first: &CStr) -> Result<(), Error> {
        let at = || path(&job.folder.node, &job.name);
        let dst = &job.folder.dst;
        let opened;
        let first_dir = if Arc::ptr_eq(node, &job.folder.node) {
            dst
        } else {
            opened = self.open_place(node)?;
            &opened
        };
        let first_st = first_dir
            .stat_at(first)
            .map_err(|e| failed("inspect", &path(node, first), e))?;
        if let Some(there) = self.existing(job, first_st.st_mode & libc::S_IFMT)? {
            if identity(&there) == identity(&first_st) {
                Progress::add(&self.options.progress.reused, 1);
                return Ok(());
            }
        }
        let (temp, ()) = self
            .temp(dst, |dir, name| first_dir.link(first, dir, name))
            .map_err(|e| failed("link", &at(), e))?;
        self.put(job, &temp, || Ok(()))
            .map_err(|e| failed("link", &at(), e))?;
        Progress::add(&self.options.progress.files, 1);
        Ok(())
    }

    /// Opens the destination directory of `node`, by name from the top
    /// (the destination is this module's alone).
    fn open_place(&self, node: &Node) -> Result<Dir, Error> {
        let mut names = Vec::new();
        let mut at = node;
        while let Some(parent) = &at.parent {
            names.push(&at.name);
            at = parent;
        }
        let open = |e| failed("open", &path(node, c""), e);
        let mut dir = self.to.reopen().map_err(open)?;
        for name in names.iter().rev() {
            dir = dir.child(name).map_err(open)?;
        }
        Ok(dir)
    }
}

/// The entries of `dir` after `name`, which was read at `at`; `None` when
/// `name` is gone.
fn entries_after<'d>(dir: &'d Dir, at: Position, name: &CStr) -> io::Result<Option<Entries<'d>>> {
    let mut entries = dir.entries_at(at)?;
    if matches!(entries.next(), Some(Ok((read, _))) if read.as_c_str() == name) {
        return Ok(Some(entries));
    }
    // The cookie no longer leads there: find the name from the start.
    let mut entries = dir.entries()?;
    loop {
        match entries.next() {
            Some(Ok((read, _))) if read.as_c_str() == name => return Ok(Some(entries)),
            Some(Ok(_)) => {}
            Some(Err(e)) => return Err(e),
            None => return Ok(None),
        }
    }
}

/// Makes the directory `name` in `dir`; false when an earlier attempt's is
/// there. Anything else standing there is removed first.
fn make_dir(dir: &Dir, name: &CStr) -> io::Result<bool> {
    match dir.make_dir(name, 0o700) {
        Ok(()) => return Ok(true),
        Err(e) if e.raw_os_error() == Some(libc::EEXIST) => {}
        Err(e) => return Err(e),
    }
    if dir.kind_of(name)? == Some(Kind::Directory) {
        return Ok(false);
    }
    match dir.unlink(name) {
        Ok(()) => {}
        Err(e) if is_enoent(&e) => {}
        Err(e) => return Err(e),
    }
    dir.make_dir(name, 0o700).map(|()| true)
}

#[cfg(test)]
mod tests {
    use super::*;
    use crate::test_support::Scratch;
    use std::collections::BTreeMap;
    use std::ffi::OsStr;
    use std::os::unix::ffi::OsStrExt;
    use std::os::unix::fs::{symlink, MetadataExt};
    use std::path::{Path, PathBuf};
    use std::time::Duration;

    /// What a copy must keep of an entry (the inode is compared apart).
    #[derive(Debug, PartialEq, Eq)]
    struct Meta {
        mode: u32,
        uid: u32,
        gid: u32,
        size: u64,
        mtime: (i64, i64),
        atime: (i64, i64),
        link: Option<PathBuf>,
    }

    /// Every entry below `root` (and `root` itself, as ""), by path;
    /// inspected only, so no access time moves.
    fn snapshot(root: &Path) -> BTreeMap<PathBuf, Meta> {
        let mut all = BTreeMap::new();
        let mut todo = vec![PathBuf::new()];
        while let Some(rel) = todo.pop() {
            let full = root.join(&rel);
            let m = std::fs::symlink_metadata(&full).unwrap();
            if m.is_dir() {
                for e in std::fs::read_dir(&full).unwrap() {
                    todo.push(rel.join(e.unwrap().file_name()));
                }
            }
            let link = m
                .file_type()
                .is_symlink()
                .then(|| std::fs::read_link(&full).unwrap());
            let size = if m.is_dir() { 0 } else { m.size() };
            all.insert(
                rel,
                Meta {
                    mode: m.mode(),
                    uid: m.uid(),
                    gid: m.gid(),
                    size,
                    mtime: (m.mtime(), m.mtime_nsec()),
                    atime: (m.atime(), m.atime_nsec()),
                    link,
                },
            );
        }
        all
    }

    /// The regular files of a snapshot, whose contents must match.
    fn same_contents(src: &Path, dst: &Path, files: &BTreeMap<PathBuf, Meta>) {
        for (rel, meta) in files {
            if meta.mode & libc::S_IFMT == libc::S_IFREG {
                assert!(
                    std::fs::read(src.join(rel)).unwrap() == std::fs::read(dst.join(rel)).unwrap(),
                    "contents of {rel:?}"
                );
            }
        }
    }

    fn ts(sec: i64, nsec: i64) -> libc::timespec {
        libc::timespec {
            tv_sec: sec,
            tv_nsec: nsec,
        }
    }

    /// Sets the times of `path` itself.
    fn set_times(path: &Path, atime: libc::timespec, mtime: libc::timespec) {
        let dir = Dir::open(path.parent().unwrap()).unwrap();
        let name = c_name(path.file_name().unwrap());
        dir.set_times_at(&name, &[atime, mtime]).unwrap();
    }

    fn c_name(name: &OsStr) -> CString {
        super::super::dir::c_name(name).unwrap()
    }

    /// Old times on everything below `root`, `root` too: files read in
    /// 2002 and written in 2001; directories and symlinks written in 2001
    /// and read an hour from now, so that listing or reading them leaves
    /// their access time alone (relatime moves an access time only when it
    /// is older than the change time, which setting it made now).
    fn age(root: &Path) {
        let hour_on = std::time::SystemTime::now()
            .duration_since(std::time::UNIX_EPOCH)
            .unwrap()
            .as_secs() as i64
            + 3600;
        let all: Vec<PathBuf> = snapshot(root).into_keys().collect();
        for rel in all.iter().rev() {
            let full = root.join(rel);
            if std::fs::symlink_metadata(&full).unwrap().is_file() {
                set_times(&full, ts(1_020_000_000, 987_654_321), ts(1_000_000_001, 42));
            } else {
                set_times(&full, ts(hour_on, 5), ts(1_000_000_000, 123_456_789));
            }
        }
    }

    /// A snapshot without the access times of files, which reading them
    /// (as a copy does) moves: for comparing trees after several copies.
    fn sans_atimes(mut all: BTreeMap<PathBuf, Meta>) -> BTreeMap<PathBuf, Meta> {
        for meta in all.values_mut() {
            meta.atime = (0, 0);
        }
        all
    }

    fn options(threads: usize) -> CopyOptions {
        CopyOptions {
            threads,
            ..CopyOptions::default()
        }
    }

    fn copy(from: &Path, to: &Path, options: &CopyOptions) -> Result<CopyStats, Error> {
        copy_tree(&Dir::open(from).unwrap(), &Dir::open(to).unwrap(), options)
    }

    /// Bytes that differ from file to file and are not all zero.
    fn bytes(len: usize, seed: u64) -> Vec<u8> {
        let mut x = seed.wrapping_mul(0x9e37_79b9_7f4a_7c15) | 1;
        (0..len)
            .map(|_| {
                x ^= x << 13;
                x ^= x >> 7;
                x ^= x << 17;
                x as u8
            })
            .collect()
    }

    fn chmod(path: &Path, mode: u32) {
        std::fs::set_permissions(path, std::fs::Permissions::from_mode(mode)).unwrap();
    }

    fn names(dir: &Path) -> Vec<std::ffi::OsString> {
        let mut names: Vec<_> = std::fs::read_dir(dir)
            .unwrap()
            .map(|e| e.unwrap().file_name())
            .collect();
        names.sort();
        names
    }

    #[test]
    fn everything_is_copied_with_its_attributes_and_nothing_is_followed() {
        let s = Scratch::new("copy-attrs");
        let (src, dst) = (s.join("src"), s.join("dst"));
        std::fs::create_dir_all(src.join("a/b/c")).unwrap();
        std::fs::create_dir(&dst).unwrap();
        for (name, len) in [
            ("empty", 0),
            ("small", 1),
            ("page", 4096),
            ("big", (1 << 20) + 7),
        ] {
            std::fs::write(src.join(name), bytes(len, len as u64)).unwrap();
        }
        std::fs::write(src.join("a/b/c/deep.txt"), "deep").unwrap();
        std::fs::write(src.join("suid"), "#!/bin/sh\n").unwrap();
        chmod(&src.join("suid"), 0o4755);
        chmod(&src.join("big"), 0o600);
        chmod(&src.join("a"), 0o1777);
        std::fs::write(src.join("new\nline"), "n").unwrap();
        std::fs::write(src.join(OsStr::from_bytes(b"caf\xe9")), "latin-1").unwrap();
        // Holes: 8 MiB of which one byte is written.
        let sparse = File::create(src.join("sparse")).unwrap();
        sparse.set_len(8 << 20).unwrap();
        std::os::unix::fs::FileExt::write_at(&sparse, b"x", 4 << 20).unwrap();
        drop(sparse);
        symlink("/etc/passwd", src.join("to-passwd")).unwrap();
        symlink("../../..", src.join("a/b/up")).unwrap();
        symlink("nowhere/at/all", src.join("dangling")).unwrap();
        std::fs::write(src.join("a/h1"), "linked").unwrap();
        std::fs::hard_link(src.join("a/h1"), src.join("a/b/h2")).unwrap();
        std::fs::hard_link(src.join("a/h1"), src.join("h3")).unwrap();
        std::fs::write(src.join("a/s1"), "same dir").unwrap();
        std::fs::hard_link(src.join("a/s1"), src.join("a/s2")).unwrap();
        std::fs::write(src.join("owned"), "o").unwrap();
        std::os::unix::fs::chown(src.join("owned"), Some(1234), Some(5678)).unwrap();
        std::os::unix::fs::chown(src.join("a/b"), Some(1234), Some(5678)).unwrap();
        symlink("owned", src.join("owned-link")).unwrap();
        std::os::unix::fs::lchown(src.join("owned-link"), Some(1234), Some(5678)).unwrap();
        let fifo = std::process::Command::new("mkfifo")
            .arg(src.join("a/fifo"))
            .status()
            .unwrap();
        assert!(fifo.success());
        let _socket = std::os::unix::net::UnixListener::bind(src.join("a/sock")).unwrap();
        age(&src);
        let passwd = std::fs::metadata("/etc/passwd").unwrap();

        let mut expected = snapshot(&src);
        expected.remove(Path::new("a/fifo")).unwrap();
        expected.remove(Path::new("a/sock")).unwrap();
        let stats = copy(&src, &dst, &options(4)).unwrap();

        assert_eq!(snapshot(&dst), expected);
        same_contents(&src, &dst, &expected);
        let ino = |p: &str| std::fs::symlink_metadata(dst.join(p)).unwrap().ino();
        assert_eq!(ino("a/h1"), ino("a/b/h2"));
        assert_eq!(ino("a/h1"), ino("h3"));
        assert_eq!(ino("a/s1"), ino("a/s2"));
        assert_ne!(ino("a/h1"), ino("a/s1"));
        assert_eq!(
            std::fs::symlink_metadata(dst.join("a/h1")).unwrap().nlink(),
            3
        );
        assert!(
            std::fs::symlink_metadata(dst.join("sparse"))
                .unwrap()
                .blocks()
                < 1024
        );
        // Nothing was written through the links, nor next to the trees.
        assert_eq!(names(s.path()), ["dst", "src"]);
        let passwd_now = std::fs::metadata("/etc/passwd").unwrap();
        assert_eq!(
            (passwd.mtime(), passwd.size(), passwd.mode()),
            (passwd_now.mtime(), passwd_now.size(), passwd_now.mode())
        );
        let non_dirs = expected
            .values()
            .filter(|m| m.mode & libc::S_IFMT != libc::S_IFDIR)
            .count() as u64;
        assert_eq!(
            stats,
            CopyStats {
                files: non_dirs,
                bytes: stats.bytes,
                directories: 3,
                skipped: 2,
                reused: 0,
            }
        );
        assert!(stats.bytes >= (1 << 20) + 4096);
        // No temporary file is left behind.
        assert!(!expected
            .keys()
            .chain(snapshot(&dst).keys())
            .any(|p| p.to_string_lossy().contains(TEMP_PREFIX)));
    }

    /// `dirs` directories of `files` files each, a hard link pair and a
    /// symlink, aged.
    fn tree(src: &Path, dirs: usize, files: usize) {
        for d in 0..dirs {
            let dir = src.join(format!("d{d}"));
            std::fs::create_dir_all(&dir).unwrap();
            for f in 0..files {
                let len = (d * files + f) * 37 % 5000;
                std::fs::write(
                    dir.join(format!("f{f}")),
                    bytes(len, (d * files + f) as u64),
                )
                .unwrap();
            }
        }
        std::fs::write(src.join("h1"), "linked").unwrap();
        std::fs::hard_link(src.join("h1"), src.join("d0/h2")).unwrap();
        symlink("d0/f0", src.join("link")).unwrap();
        age(src);
    }

    #[test]
    fn a_second_copy_copies_only_what_differs() {
        let s = Scratch::new("copy-resume");
        let (src, dst) = (s.join("src"), s.join("dst"));
        std::fs::create_dir(&dst).unwrap();
        tree(&src, 3, 10);
        let total = 3 * 10 + 3;
        let first = copy(&src, &dst, &options(4)).unwrap();
        assert_eq!((first.files, first.reused), (total, 0));

        std::fs::write(src.join("d1/f3"), "changed, and of another length").unwrap();
        std::fs::remove_file(dst.join("d2/f5")).unwrap();
        let second = copy(&src, &dst, &options(4)).unwrap();
        assert_eq!((second.files, second.reused), (2, total - 2));
        assert_eq!(sans_atimes(snapshot(&dst)), sans_atimes(snapshot(&src)));

        // A hard link lost: linked again (or its other name copied anew
        // and this one linked to it, as the workers meet the names).
        std::fs::remove_file(dst.join("d0/h2")).unwrap();
        let again = copy(&src, &dst, &options(4)).unwrap();
        assert!((1..=2).contains(&again.files), "{again:?}");
        assert_eq!(again.files + again.reused, total);
        let ino = |p: &str| std::fs::symlink_metadata(dst.join(p)).unwrap().ino();
        assert_eq!(ino("h1"), ino("d0/h2"));

        // Cut short as a killed write would leave it, and a killed run's
        // temporary file.
        File::options()
            .write(true)
            .open(dst.join("d2/f4"))
            .unwrap()
            .set_len(3)
            .unwrap();
        std::fs::write(dst.join("d2/.lnc-copy-1-1"), "half").unwrap();
        let third = copy(&src, &dst, &options(4)).unwrap();
        assert_eq!((third.files, third.reused), (1, total - 1));
        let expected = snapshot(&src);
        assert_eq!(sans_atimes(snapshot(&dst)), sans_atimes(snapshot(&src)));
        same_contents(&src, &dst, &expected);
    }

    #[test]
    fn a_destination_made_of_links_is_replaced_not_followed() {
        let s = Scratch::new("copy-hostile-dst");
        let (src, dst, outside) = (s.join("src"), s.join("dst"), s.join("outside"));
        std::fs::create_dir_all(src.join("a")).unwrap();
        std::fs::write(src.join("a/x"), "x").unwrap();
        std::fs::write(src.join("f"), "f").unwrap();
        std::fs::create_dir(src.join("d")).unwrap();
        std::fs::create_dir_all(&outside).unwrap();
        std::fs::write(outside.join("file"), "keep").unwrap();
        std::fs::create_dir(&dst).unwrap();
        symlink(&outside, dst.join("a")).unwrap();
        symlink(outside.join("file"), dst.join("f")).unwrap();
        std::fs::create_dir_all(dst.join("x/y")).unwrap();
        std::fs::write(src.join("x"), "a file where a directory was").unwrap();
        std::fs::write(dst.join("d"), "a file where a directory goes").unwrap();
        age(&src);
        let expected = snapshot(&src);
        copy(&src, &dst, &options(2)).unwrap();
        assert_eq!(names(&outside), ["file"]);
        assert_eq!(
            std::fs::read_to_string(outside.join("file")).unwrap(),
            "keep"
        );
        assert_eq!(snapshot(&dst), expected);
        same_contents(&src, &dst, &expected);
    }

    #[test]
    fn a_destination_inside_the_source_is_refused() {
        let s = Scratch::new("copy-inside");
        std::fs::create_dir_all(s.join("src/dst")).unwrap();
        let e = copy(&s.join("src"), &s.join("src/dst"), &options(1)).unwrap_err();
        assert!(matches!(e, Error::FailedPrecondition(_)), "{e:?}");
    }

    #[test]
    fn a_stopped_copy_stops_and_a_later_one_finishes_it() {
        let s = Scratch::new("copy-stop");
        let (src, dst) = (s.join("src"), s.join("dst"));
        std::fs::create_dir(&dst).unwrap();
        tree(&src, 40, 100);
        let total = 40 * 100 + 3;

        let stopped_before = options(4);
        stopped_before.stop.store(true, Ordering::Relaxed);
        let e = copy(&src, &dst, &stopped_before).unwrap_err();
        assert!(
            matches!(&e, Error::Unavailable(m) if m.contains("stopped")),
            "{e:?}"
        );
        assert_eq!(stopped_before.progress.files.load(Ordering::Relaxed), 0);

        let stopped_during = options(4);
        let watcher = {
            let (stop, progress) = (stopped_during.stop.clone(), stopped_during.progress.clone());
            std::thread::spawn(move || {
                while progress.files.load(Ordering::Relaxed) < 100 {
                    std::thread::sleep(Duration::from_micros(200));
                }
                stop.store(true, Ordering::Relaxed);
                Instant::now()
            })
        };
        let e = copy(&src, &dst, &stopped_during).unwrap_err();
        let returned = Instant::now();
        let stop_set = watcher.join().unwrap();
        assert!(
            matches!(&e, Error::Unavailable(m) if m.contains("stopped")),
            "{e:?}"
        );
        assert!(returned.duration_since(stop_set) < Duration::from_secs(5));
        let copied = stopped_during.progress.files.load(Ordering::Relaxed);
        assert!(copied < total, "{copied} of {total}");

        let last = copy(&src, &dst, &options(4)).unwrap();
        assert_eq!((last.files, last.reused), (total - copied, copied));
        let expected = snapshot(&src);
        assert_eq!(sans_atimes(snapshot(&dst)), sans_atimes(snapshot(&src)));
        same_contents(&src, &dst, &expected);
    }

    /// Opens `d` `depth` times below `top`, through descriptors (a path
    /// that deep is past PATH_MAX).
    fn bottom(top: &Path, depth: usize) -> Dir {
        let mut here = Dir::open(top).unwrap();
        for _ in 0..depth {
            here = here.child(c"d").unwrap();
        }
        here
    }

    fn open_fds() -> usize {
        std::fs::read_dir("/proc/self/fd").unwrap().count()
    }

    #[test]
    fn a_deep_tree_is_copied_in_a_small_stack_and_few_descriptors() {
        const DEPTH: usize = 5_000;
        let s = Scratch::new("copy-deep");
        let (src, dst) = (s.join("src"), s.join("dst"));
        std::fs::create_dir(&src).unwrap();
        std::fs::create_dir(&dst).unwrap();
        let mut here = Dir::open(&src).unwrap();
        for _ in 0..DEPTH {
            here.make_dir(c"d", 0o750).unwrap();
            let f = here.create_file(c"f", 0o640).unwrap();
            std::io::Write::write_all(&mut &f, b"level").unwrap();
            here = here.child(c"d").unwrap();
        }
        drop(here);
        let before = open_fds();
        let peak = Arc::new(AtomicUsize::new(before));
        let done = Arc::new(AtomicBool::new(false));
        let sampler = {
            let (peak, done) = (peak.clone(), done.clone());
            std::thread::spawn(move || {
                while !done.load(Ordering::Relaxed) {
                    peak.fetch_max(open_fds(), Ordering::Relaxed);
                    std::thread::sleep(Duration::from_millis(5));
                }
            })
        };
        let (from, to) = (src.clone(), dst.clone());
        let stats = std::thread::Builder::new()
            .stack_size(256 << 10)
            .spawn(move || copy(&from, &to, &options(4)))
            .unwrap()
            .join()
            .unwrap()
            .unwrap();
        done.store(true, Ordering::Relaxed);
        sampler.join().unwrap();
        assert_eq!(
            (stats.files, stats.directories),
            (DEPTH as u64, DEPTH as u64)
        );
        // A descriptor per level would be thousands; other tests share the
        // process, hence the margin.
        let grew = peak.load(Ordering::Relaxed).saturating_sub(before);
        assert!(grew < 500, "{grew} more descriptors");
        let last = bottom(&dst, DEPTH - 1);
        let st = last.stat_at(c"f").unwrap();
        assert_eq!((st.st_size, st.st_mode & 0o7777), (5, 0o640));
        assert_eq!(last.stat_at(c"d").unwrap().st_mode & 0o7777, 0o750);
        assert_eq!(
            last.kind_of(c"d").unwrap(),
            Some(Kind::Directory),
            "the deepest directory"
        );
        assert!(bottom(&dst, DEPTH).entries().unwrap().next().is_none());
    }

    /// The names `entries` gives, to the end.
    fn rest(entries: Entries<'_>) -> Vec<CString> {
        entries.map(|e| e.unwrap().0).collect()
    }

    #[test]
    fn the_walk_reads_on_after_a_subdirectory_even_when_the_cookie_misleads() {
        let s = Scratch::new("copy-cookie");
        std::fs::create_dir_all(s.join("other")).unwrap();
        for i in 0..100 {
            std::fs::write(s.join(format!("e{i}")), "").unwrap();
            std::fs::write(s.join(format!("other/o{i}")), "").unwrap();
        }
        let dir = Dir::open(s.path()).unwrap();
        let all = rest(dir.entries().unwrap());
        let mut entries = dir.entries().unwrap();
        let name = loop {
            let (name, _) = entries.next().unwrap().unwrap();
            if name.as_bytes() == b"e50" {
                break name;
            }
        };
        let at = entries.position();
        let after = all[all.iter().position(|n| *n == name).unwrap() + 1..].to_vec();
        assert_eq!(
            rest(entries_after(&dir, at, &name).unwrap().unwrap()),
            after
        );
        // A place among the entries of another directory leads elsewhere.
        let other = Dir::open(&s.join("other")).unwrap();
        let mut elsewhere = other.entries().unwrap();
        elsewhere.nth(70).unwrap().unwrap();
        let wrong = elsewhere.position();
        assert_eq!(
            rest(entries_after(&dir, wrong, &name).unwrap().unwrap()),
            after
        );
        assert!(entries_after(&dir, at, c"gone").unwrap().is_none());
    }

    #[test]
    fn a_wide_directory_is_copied_around_its_subdirectories() {
        let s = Scratch::new("copy-wide");
        let (src, dst) = (s.join("src"), s.join("dst"));
        std::fs::create_dir(&dst).unwrap();
        std::fs::create_dir(&src).unwrap();
        for i in 0..20_000 {
            std::fs::write(src.join(format!("file-{i}")), i.to_string()).unwrap();
            // Subdirectories scattered among the files: the walk leaves the
            // listing for each and comes back to its place.
            if i % 400 == 0 {
                std::fs::create_dir(src.join(format!("dir-{i}"))).unwrap();
                std::fs::write(src.join(format!("dir-{i}/inner")), "in").unwrap();
            }
        }
        let stats = copy(&src, &dst, &options(8)).unwrap();
        assert_eq!((stats.files, stats.directories), (20_050, 50));
        assert_eq!(names(&dst), names(&src));
        assert_eq!(
            std::fs::read_to_string(dst.join("file-12345")).unwrap(),
            "12345"
        );
        assert_eq!(
            std::fs::read_to_string(dst.join("dir-19600/inner")).unwrap(),
            "in"
        );
    }
}
