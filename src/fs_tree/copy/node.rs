//! The directories of a copy: where each is below the top (for messages
//! and to find a hard link's first copy again), the two sides open while
//! work is queued in it, and the last share of that work setting its
//! attributes. It reads no listing and copies no entry.

use super::attrs::Attrs;
use super::{failed, Copy};
use crate::fs_tree::dir::{Dir, Identity};
use crate::Error;
use std::ffi::{CStr, CString};
use std::sync::atomic::{AtomicUsize, Ordering};
use std::sync::Arc;

/// A directory of the copy: where it is below the top (for messages and to
/// find a hard link's first copy) and what is still to do in it.
pub(super) struct Node {
    pub(super) parent: Option<Arc<Node>>,
    pub(super) name: CString,
    /// The source directory's.
    pub(super) attrs: Attrs,
    /// Made by this call, so nothing in it is an earlier attempt's.
    pub(super) fresh: bool,
    /// The walker, until it has read the whole directory, and the jobs in
    /// it not done yet: the one that takes it to zero sets the attributes.
    pub(super) left: AtomicUsize,
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
pub(super) struct Folder {
    pub(super) src: Dir,
    pub(super) dst: Dir,
    pub(super) node: Arc<Node>,
    pub(super) src_id: Identity,
    pub(super) dst_id: Identity,
    /// Its entries waiting in the queue, and those workers copy now.
    queued: AtomicUsize,
    working: AtomicUsize,
}

impl Folder {
    pub(super) fn new(
        (src, dst): (Dir, Dir),
        node: Arc<Node>,
        (src_id, dst_id): (Identity, Identity),
    ) -> Folder {
        Folder {
            src,
            dst,
            node,
            src_id,
            dst_id,
            queued: AtomicUsize::new(0),
            working: AtomicUsize::new(0),
        }
    }

    /// Counts `n` more (or fewer) of its entries queued: how many are now.
    pub(super) fn queue(&self, n: isize) -> usize {
        add(&self.queued, n)
    }

    pub(super) fn queued(&self) -> usize {
        self.queued.load(Ordering::Acquire)
    }

    /// Counts `n` more (or fewer) workers in it.
    pub(super) fn working(&self, n: isize) {
        add(&self.working, n);
    }

    /// Workers copying its entries now.
    pub(super) fn busy(&self) -> usize {
        self.working.load(Ordering::Acquire)
    }
}

/// Adds `n` (which may be negative) to `counter`: the new value.
fn add(counter: &AtomicUsize, n: isize) -> usize {
    let before = if n >= 0 {
        counter.fetch_add(n.unsigned_abs(), Ordering::AcqRel)
    } else {
        counter.fetch_sub(n.unsigned_abs(), Ordering::AcqRel)
    };
    before.wrapping_add_signed(n)
}

/// An entry other than a directory, for a worker to copy.
pub(super) struct Job {
    pub(super) folder: Arc<Folder>,
    pub(super) name: CString,
}

/// `name` in `node` (`node` itself when `name` is empty), from the top,
/// for messages: not UTF-8 shown as replacement characters, and quoted
/// with `{:?}` where used, so a newline in a name cannot forge a log line.
pub(super) fn path(node: &Node, name: &CStr) -> String {
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
    /// Counts one share of `folder`'s work done; the last sets its
    /// attributes.
    pub(super) fn done_with(&self, folder: &Folder) -> Result<(), Error> {
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

    /// Opens the destination directory of `node`, by name from the top
    /// (the destination is this module's alone).
    pub(super) fn open_place(&self, node: &Node) -> Result<Dir, Error> {
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
