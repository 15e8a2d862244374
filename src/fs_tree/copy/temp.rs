//! Temporary names, on which the copy resumes: an entry is made under one
//! and renamed over its name only once complete, and a directory an
//! earlier attempt made is cleared of the ones it left. Nothing here
//! decides what is copied.

use super::node::{path, Job, Node};
use super::{failed, is_enoent, Copy};
use crate::fs_tree::dir::{Dir, Kind};
use crate::Error;
use std::ffi::{CStr, CString};
use std::io;
use std::sync::atomic::Ordering;

/// What temporary names begin with.
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

    /// Makes something under a fresh temporary name in `dir`.
    pub(super) fn temp<T>(
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
    pub(super) fn put(
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
}
