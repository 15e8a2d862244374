//! The operations on a node's attributes and contents-free metadata:
//! GETATTR, SETATTR, READLINK, ACCESS and STATFS, each on the backing file
//! `Export::locate` finds (or an open descriptor when the kernel names one).
//! Nothing here waits or counts, or keeps a descriptor past its request.

use super::abi::{self, Request};
use super::backing::{self, Result, Target};
use super::reply::Reply;
use super::tree::Export;

impl Export {
    pub(super) fn getattr(&self, req: &Request, out: &mut Reply) -> Result<()> {
        let arg = req.arg::<abi::GetattrIn>()?;
        let by_handle = (arg.getattr_flags & abi::GETATTR_FH != 0)
            .then(|| self.nodes.handle(arg.fh).ok())
            .flatten();
        let st = match by_handle {
            Some(fd) => backing::stat_fd(&fd)?,
            None => self.locate(req.header.nodeid)?.1,
        };
        out.push(&self.valid.attr(&st));
        Ok(())
    }

    pub(super) fn setattr(&self, req: &Request, out: &mut Reply) -> Result<()> {
        let arg = req.arg::<abi::SetattrIn>()?;
        let valid = arg.valid;
        let by_handle = (valid & abi::FATTR_FH != 0)
            .then(|| self.nodes.handle(arg.fh).ok())
            .flatten();
        let target = match by_handle {
            Some(fd) => Target::Open(fd),
            None => self.locate(req.header.nodeid)?.0,
        };
        if valid & abi::FATTR_SIZE != 0 {
            target.truncate(arg.size)?;
        }
        // Owner before mode: a chown clears set-user-ID, which a mode in
        // the same request may set again.
        if valid & (abi::FATTR_UID | abi::FATTR_GID) != 0 {
            let uid = if valid & abi::FATTR_UID != 0 {
                arg.uid
            } else {
                u32::MAX
            };
            let gid = if valid & abi::FATTR_GID != 0 {
                arg.gid
            } else {
                u32::MAX
            };
            target.chown(uid, gid)?;
        }
        if valid & abi::FATTR_MODE != 0 {
            target.chmod(arg.mode & 0o7777)?;
        }
        let atime = time(
            valid,
            abi::FATTR_ATIME,
            abi::FATTR_ATIME_NOW,
            arg.atime,
            arg.atimensec,
        );
        let mtime = time(
            valid,
            abi::FATTR_MTIME,
            abi::FATTR_MTIME_NOW,
            arg.mtime,
            arg.mtimensec,
        );
        if atime.tv_nsec != libc::UTIME_OMIT || mtime.tv_nsec != libc::UTIME_OMIT {
            target.utimens(&[atime, mtime])?;
        }
        out.push(&self.valid.attr(&target.stat()?));
        Ok(())
    }

    pub(super) fn readlink(&self, req: &Request, out: &mut Reply) -> Result<()> {
        let Target::At(dir, name) = self.locate(req.header.nodeid)?.0 else {
            return Err(libc::EINVAL);
        };
        out.fill(libc::PATH_MAX as usize, |buf| {
            backing::readlink_at(&dir, &name, buf)
        })?;
        Ok(())
    }

    /// Only asked without `default_permissions`, which this server always
    /// mounts with; answered all the same.
    pub(super) fn access(&self, req: &Request) -> Result<()> {
        let arg = req.arg::<abi::AccessIn>()?;
        match self.locate(req.header.nodeid)?.0 {
            Target::At(dir, name) => backing::access_at(&dir, &name, arg.mask as i32),
            Target::Open(_) => Ok(()),
        }
    }

    pub(super) fn statfs(&self, out: &mut Reply) -> Result<()> {
        let st = backing::statfs(&self.root)?;
        out.push(&abi::Kstatfs {
            blocks: st.f_blocks,
            bfree: st.f_bfree,
            bavail: st.f_bavail,
            files: st.f_files,
            ffree: st.f_ffree,
            bsize: st.f_bsize as u32,
            namelen: st.f_namelen as u32,
            frsize: st.f_frsize as u32,
            ..abi::Kstatfs::default()
        });
        Ok(())
    }
}

/// One of SETATTR's times as `utimensat` takes it: set, now, or untouched.
fn time(valid: u32, set: u32, now: u32, secs: u64, nanos: u32) -> libc::timespec {
    let (tv_sec, tv_nsec) = if valid & now != 0 {
        (0, libc::UTIME_NOW)
    } else if valid & set != 0 {
        (secs as _, nanos as _)
    } else {
        (0, libc::UTIME_OMIT)
    };
    libc::timespec { tv_sec, tv_nsec }
}
