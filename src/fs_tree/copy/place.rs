//! Where an entry is made in the destination: under its own name, at
//! once, never under a temporary one renamed over it. A rename costs a
//! second change of the directory per entry, and on NFS the client holds
//! the directory for each such change while its round trip lasts, so
//! changes of one directory go one at a time whoever makes them. An entry
//! cut short (a kill, a stop, a failure) is no risk: its modification time
//! is set last, so a later call finds it unequal to its source and makes
//! it again. A directory an earlier attempt made is cleared of the
//! temporary names earlier versions of this copy left there. Nothing here
//! decides what is copied.

use super::node::{path, Job, Node};
use super::{failed, is_enoent, Copy};
use crate::fs_tree::dir::{Dir, Kind};
use crate::Error;
use std::ffi::CStr;
use std::io;

/// What the temporary names of earlier versions of this copy begin with.
pub(super) const TEMP_PREFIX: &str = ".lnc-copy-";

impl Copy<'_> {
    /// Removes the temporary files an earlier attempt left in `dst`.
    pub(super) fn clean(&self, dst: &Dir, node: &Node) -> Result<(), Error> {
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

    /// Makes the job's entry under its name with `make`, first removing
    /// what an earlier attempt left there (`stale`), and completes it with
    /// `finish`; removes it again when either fails.
    pub(super) fn make_in_place<T>(
        &self,
        job: &Job,
        stale: bool,
        make: impl FnOnce(&Dir, &CStr) -> io::Result<T>,
        finish: impl FnOnce(T) -> io::Result<()>,
    ) -> io::Result<()> {
        let dst = &job.folder.dst;
        if stale {
            match dst.unlink(&job.name) {
                Ok(()) => {}
                Err(e) if is_enoent(&e) => {}
                Err(e) => return Err(e),
            }
        }
        let made = make(dst, &job.name)?;
        let done = finish(made);
        if done.is_err() {
            let _ = dst.unlink(&job.name);
        }
        done
    }
}
