//! The workers: each takes queued entries one at a time and decides what
//! becomes of it: skipped (devices, sockets, fifos), found equal to an
//! earlier attempt's copy, copied, or, for a further name of a hard-linked
//! inode, linked to the first name's copy. They never read a listing.

use super::attrs::{identity, Attrs};
use super::links::Claim;
use super::node::{path, Job, Node};
use super::queue::Queue;
use super::{changed, failed, is_enoent, source_error, Copy, Progress};
use crate::fs_tree::remove_tree;
use crate::Error;
use std::ffi::CStr;
use std::sync::Arc;

impl Copy<'_> {
    /// A worker: copies queued entries until the queue closes; once the
    /// copy is halted it drains the queue without copying.
    pub(super) fn work(&self, queue: &Queue) {
        let _leaving = queue.worker();
        while let Some(taken) = queue.take() {
            if self.halted() {
                continue;
            }
            let job = &taken.job;
            let done = self
                .copy_entry(job)
                .and_then(|()| self.done_with(&job.folder));
            if let Err(e) = done {
                self.fail(e);
            }
            self.tick();
        }
    }

    fn copy_entry(&self, job: &Job) -> Result<(), Error> {
        let at = || path(&job.folder.node, &job.name);
        let st = job
            .folder
            .src
            .stat_at(&job.name)
            .map_err(|e| source_error("inspect", &at(), e, is_enoent))?;
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
        let there = self.existing(job, attrs.kind())?;
        if let Some(there) = &there {
            let equal = attrs.same(&Attrs::of(there))
                && (attrs.kind() != libc::S_IFLNK || self.same_target(job)?);
            if equal {
                Progress::add(&self.options.progress.reused, 1);
                return Ok(());
            }
        }
        let stale = there.is_some();
        if attrs.kind() == libc::S_IFREG {
            self.copy_file(job, st, attrs, stale)
        } else {
            self.copy_symlink(job, attrs, stale)
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
        let there = self.existing(job, first_st.st_mode & libc::S_IFMT)?;
        if let Some(there) = &there {
            if identity(there) == identity(&first_st) {
                Progress::add(&self.options.progress.reused, 1);
                return Ok(());
            }
        }
        self.make_in_place(
            job,
            there.is_some(),
            |dir, name| first_dir.link(first, dir, name),
            |()| Ok(()),
        )
        .map_err(|e| failed("link", &at(), e))?;
        Progress::add(&self.options.progress.files, 1);
        Ok(())
    }
}
