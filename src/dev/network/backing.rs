//! The system calls on the backing directory, each wrapped once so the
//! operations stay free of `unsafe`: every path is a directory descriptor and
//! a single name in it, never a path string with slashes. Errors are plain
//! errno values, as they go back to the kernel. It keeps no state.

use std::ffi::{CStr, CString};
use std::os::fd::{AsRawFd, FromRawFd, OwnedFd};
use std::sync::Arc;

pub(super) type Errno = i32;
pub(super) type Result<T> = std::result::Result<T, Errno>;

pub(super) fn last_errno() -> Errno {
    std::io::Error::last_os_error()
        .raw_os_error()
        .unwrap_or(libc::EIO)
}

/// Turns a `-1` return into the errno it left.
fn check<T: PartialOrd + Default>(rc: T) -> Result<T> {
    if rc < T::default() {
        Err(last_errno())
    } else {
        Ok(rc)
    }
}

pub(super) fn stat_at(dir: &impl AsRawFd, name: &CStr) -> Result<libc::stat> {
    // SAFETY: an all-zero stat is a valid value for the kernel to fill.
    let mut st: libc::stat = unsafe { std::mem::zeroed() };
    // SAFETY: NUL-terminated name and a properly sized output buffer.
    check(unsafe {
        libc::fstatat(
            dir.as_raw_fd(),
            name.as_ptr(),
            &mut st,
            libc::AT_SYMLINK_NOFOLLOW,
        )
    })?;
    Ok(st)
}

pub(super) fn stat_fd(fd: &impl AsRawFd) -> Result<libc::stat> {
    // SAFETY: an all-zero stat is a valid value for the kernel to fill.
    let mut st: libc::stat = unsafe { std::mem::zeroed() };
    // SAFETY: a properly sized output buffer; `O_PATH` descriptors are fine.
    check(unsafe { libc::fstat(fd.as_raw_fd(), &mut st) })?;
    Ok(st)
}

pub(super) fn open_at(dir: &impl AsRawFd, name: &CStr, flags: i32, mode: u32) -> Result<OwnedFd> {
    let flags = flags | libc::O_CLOEXEC;
    // SAFETY: NUL-terminated name; the mode is read only with O_CREAT.
    let fd = check(unsafe { libc::openat(dir.as_raw_fd(), name.as_ptr(), flags, mode) })?;
    // SAFETY: `openat` just returned this descriptor, owned by no one else.
    Ok(unsafe { OwnedFd::from_raw_fd(fd) })
}

/// An `O_PATH` descriptor of the directory `name`, never following a link.
pub(super) fn open_dir_path(dir: &impl AsRawFd, name: &CStr) -> Result<OwnedFd> {
    open_at(
        dir,
        name,
        libc::O_PATH | libc::O_DIRECTORY | libc::O_NOFOLLOW,
        0,
    )
}

pub(super) fn mkdir_at(dir: &impl AsRawFd, name: &CStr, mode: u32) -> Result<()> {
    // SAFETY: NUL-terminated name.
    check(unsafe { libc::mkdirat(dir.as_raw_fd(), name.as_ptr(), mode) }).map(drop)
}

pub(super) fn mknod_at(dir: &impl AsRawFd, name: &CStr, mode: u32, rdev: u64) -> Result<()> {
    // SAFETY: NUL-terminated name.
    check(unsafe { libc::mknodat(dir.as_raw_fd(), name.as_ptr(), mode, rdev as libc::dev_t) })
        .map(drop)
}

pub(super) fn symlink_at(target: &CStr, dir: &impl AsRawFd, name: &CStr) -> Result<()> {
    // SAFETY: both strings are NUL-terminated.
    check(unsafe { libc::symlinkat(target.as_ptr(), dir.as_raw_fd(), name.as_ptr()) }).map(drop)
}

pub(super) fn link_at(
    from: (&impl AsRawFd, &CStr),
    to: (&impl AsRawFd, &CStr),
    flags: i32,
) -> Result<()> {
    // SAFETY: both names are NUL-terminated.
    let rc = unsafe {
        libc::linkat(
            from.0.as_raw_fd(),
            from.1.as_ptr(),
            to.0.as_raw_fd(),
            to.1.as_ptr(),
            flags,
        )
    };
    check(rc).map(drop)
}

pub(super) fn unlink_at(dir: &impl AsRawFd, name: &CStr, flags: i32) -> Result<()> {
    // SAFETY: NUL-terminated name.
    check(unsafe { libc::unlinkat(dir.as_raw_fd(), name.as_ptr(), flags) }).map(drop)
}

/// `renameat2(2)` by its system call number: musl has no wrapper for it.
pub(super) fn rename_at(
    from: (&impl AsRawFd, &CStr),
    to: (&impl AsRawFd, &CStr),
    flags: u32,
) -> Result<()> {
    // SAFETY: renameat2 takes two (dirfd, NUL-terminated name) pairs and
    // flags; nothing is written through the pointers.
    let rc = unsafe {
        libc::syscall(
            libc::SYS_renameat2,
            from.0.as_raw_fd(),
            from.1.as_ptr(),
            to.0.as_raw_fd(),
            to.1.as_ptr(),
            flags,
        )
    };
    check(rc).map(drop)
}

pub(super) fn readlink_at(dir: &impl AsRawFd, name: &CStr, buf: &mut [u8]) -> Result<usize> {
    // SAFETY: the buffer is valid for `buf.len()` bytes.
    let n = unsafe {
        libc::readlinkat(
            dir.as_raw_fd(),
            name.as_ptr(),
            buf.as_mut_ptr().cast(),
            buf.len(),
        )
    };
    Ok(check(n)? as usize)
}

pub(super) fn access_at(dir: &impl AsRawFd, name: &CStr, mask: i32) -> Result<()> {
    // SAFETY: NUL-terminated name.
    check(unsafe { libc::faccessat(dir.as_raw_fd(), name.as_ptr(), mask, 0) }).map(drop)
}

/// `fstatfs(2)`: the kernel's own figures, which FUSE's reply mirrors.
pub(super) fn statfs(fd: &impl AsRawFd) -> Result<libc::statfs> {
    // SAFETY: an all-zero statfs is a valid value for the kernel to fill.
    let mut st: libc::statfs = unsafe { std::mem::zeroed() };
    // SAFETY: a properly sized output buffer; `O_PATH` descriptors are fine.
    check(unsafe { libc::fstatfs(fd.as_raw_fd(), &mut st) })?;
    Ok(st)
}

pub(super) fn pread(fd: &impl AsRawFd, buf: &mut [u8], offset: u64) -> Result<usize> {
    let (at, ptr, len) = (offset as libc::off_t, buf.as_mut_ptr().cast(), buf.len());
    // SAFETY: the buffer is valid for `len` bytes.
    Ok(check(unsafe { libc::pread(fd.as_raw_fd(), ptr, len, at) })? as usize)
}

pub(super) fn pwrite(fd: &impl AsRawFd, buf: &[u8], offset: u64) -> Result<usize> {
    let (at, ptr, len) = (offset as libc::off_t, buf.as_ptr().cast(), buf.len());
    // SAFETY: the buffer is valid for `len` bytes.
    Ok(check(unsafe { libc::pwrite(fd.as_raw_fd(), ptr, len, at) })? as usize)
}

pub(super) fn seek(fd: &impl AsRawFd, offset: u64, whence: i32) -> Result<u64> {
    // SAFETY: lseek takes no pointers.
    let at = unsafe { libc::lseek(fd.as_raw_fd(), offset as libc::off_t, whence) };
    Ok(check(at)? as u64)
}

pub(super) fn sync(fd: &impl AsRawFd, data_only: bool) -> Result<()> {
    let fd = fd.as_raw_fd();
    // SAFETY: neither call takes pointers.
    let rc = unsafe {
        if data_only {
            libc::fdatasync(fd)
        } else {
            libc::fsync(fd)
        }
    };
    check(rc).map(drop)
}

pub(super) fn allocate(fd: &impl AsRawFd, mode: i32, offset: u64, len: u64) -> Result<()> {
    // SAFETY: fallocate takes no pointers.
    let rc = unsafe {
        libc::fallocate(
            fd.as_raw_fd(),
            mode,
            offset as libc::off_t,
            len as libc::off_t,
        )
    };
    check(rc).map(drop)
}

/// Reads raw `linux_dirent64` records from where the directory stands.
/// The system call directly: musl's `getdents` is not the 64-bit one on all
/// targets.
pub(super) fn getdents(fd: &impl AsRawFd, buf: &mut [u8]) -> Result<usize> {
    // SAFETY: the buffer is valid for `buf.len()` bytes.
    let n = unsafe {
        libc::syscall(
            libc::SYS_getdents64,
            fd.as_raw_fd(),
            buf.as_mut_ptr(),
            buf.len(),
        )
    };
    Ok(check(n)? as usize)
}

/// What an attribute change applies to: a name in a directory (".", in its
/// own descriptor, for a directory), or an open descriptor.
pub(super) enum Target {
    At(Arc<OwnedFd>, CString),
    Open(Arc<OwnedFd>),
}

impl Target {
    pub(super) fn stat(&self) -> Result<libc::stat> {
        match self {
            Target::At(dir, name) => stat_at(dir, name),
            Target::Open(fd) => stat_fd(fd),
        }
    }

    pub(super) fn chmod(&self, mode: u32) -> Result<()> {
        let rc = match self {
            // Flags 0: Linux cannot change a link's own mode, and the kernel
            // never asks to (chmod follows links before it reaches FUSE).
            // SAFETY: NUL-terminated name.
            Target::At(dir, name) => unsafe {
                libc::fchmodat(dir.as_raw_fd(), name.as_ptr(), mode, 0)
            },
            // SAFETY: fchmod takes no pointers.
            Target::Open(fd) => unsafe { libc::fchmod(fd.as_raw_fd(), mode) },
        };
        check(rc).map(drop)
    }

    pub(super) fn chown(&self, uid: u32, gid: u32) -> Result<()> {
        let rc = match self {
            // SAFETY: NUL-terminated name.
            Target::At(dir, name) => unsafe {
                let flags = libc::AT_SYMLINK_NOFOLLOW;
                libc::fchownat(dir.as_raw_fd(), name.as_ptr(), uid, gid, flags)
            },
            // SAFETY: fchown takes no pointers.
            Target::Open(fd) => unsafe { libc::fchown(fd.as_raw_fd(), uid, gid) },
        };
        check(rc).map(drop)
    }

    pub(super) fn utimens(&self, times: &[libc::timespec; 2]) -> Result<()> {
        let rc = match self {
            // SAFETY: NUL-terminated name and the two timespecs it reads.
            Target::At(dir, name) => unsafe {
                let flags = libc::AT_SYMLINK_NOFOLLOW;
                libc::utimensat(dir.as_raw_fd(), name.as_ptr(), times.as_ptr(), flags)
            },
            // SAFETY: the two timespecs futimens reads.
            Target::Open(fd) => unsafe { libc::futimens(fd.as_raw_fd(), times.as_ptr()) },
        };
        check(rc).map(drop)
    }

    pub(super) fn truncate(&self, size: u64) -> Result<()> {
        let opened;
        let fd = match self {
            Target::At(dir, name) => {
                opened = open_at(dir, name, libc::O_WRONLY | libc::O_NOFOLLOW, 0)?;
                opened.as_raw_fd()
            }
            Target::Open(fd) => fd.as_raw_fd(),
        };
        // SAFETY: ftruncate takes no pointers.
        check(unsafe { libc::ftruncate(fd, size as libc::off_t) }).map(drop)
    }
}
