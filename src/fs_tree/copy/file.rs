//! The copy of one file (its data, holes left holes, then owner, mode and
//! times) or one symlink (its text, never followed), made in place
//! (`place`). Whether to copy is decided elsewhere.

use super::attrs::Attrs;
use super::node::{path, Job};
use super::{changed, failed, raced, source_error, Copy, Progress};
use crate::fs_tree::dir::{self, Seek};
use crate::Error;
use std::fs::{File, Permissions};
use std::io::{self, Read, Seek as _, SeekFrom};
use std::os::unix::fs::PermissionsExt;

/// How much of a file is copied between two updates of the byte count.
const CHUNK: u64 = 64 << 20;

impl Copy<'_> {
    pub(super) fn copy_file(
        &self,
        job: &Job,
        st: &libc::stat,
        attrs: &Attrs,
        stale: bool,
    ) -> Result<(), Error> {
        let at = || path(&job.folder.node, &job.name);
        let src = job
            .folder
            .src
            .open_file(&job.name)
            .map_err(|e| source_error("open", &at(), e, raced))?;
        let opened = src.metadata().map_err(|e| failed("inspect", &at(), e))?;
        {
            use std::os::unix::fs::MetadataExt;
            if !opened.is_file() || opened.dev() != st.st_dev || opened.ino() != st.st_ino {
                return Err(changed(&at(), "another file stands there now"));
            }
        }
        let dst = &job.folder.dst;
        self.make_in_place(
            job,
            stale,
            |dir, name| dir.create_file(name, 0o600),
            |out| {
                self.fill(&src, &out, st)?;
                // Before the mode: a change of owner clears the set-id bits.
                std::os::unix::fs::fchown(&out, Some(attrs.uid), Some(attrs.gid))?;
                out.set_permissions(Permissions::from_mode(attrs.permissions()))?;
                dir::close(out)?;
                // After the close: on NFS a write-back the close causes would
                // set the modification time again.
                dst.set_times_at(&job.name, &attrs.times())
            },
        )
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

    pub(super) fn copy_symlink(&self, job: &Job, attrs: &Attrs, stale: bool) -> Result<(), Error> {
        let at = || path(&job.folder.node, &job.name);
        let target = job.folder.src.read_link(&job.name).map_err(|e| {
            source_error("read", &at(), e, |e| {
                e.raw_os_error() == Some(libc::EINVAL) || raced(e)
            })
        })?;
        let dst = &job.folder.dst;
        self.make_in_place(
            job,
            stale,
            |dir, name| dir.symlink(&target, name),
            |()| {
                dst.set_owner_at(&job.name, attrs.uid, attrs.gid)?;
                dst.set_times_at(&job.name, &attrs.times())
            },
        )
        .map_err(|e| failed("copy", &at(), e))
    }
}
