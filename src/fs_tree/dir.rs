//! A directory held open by descriptor, and what the tree walks do through
//! it: open a child or the parent without following a symlink, read the
//! entries, unlink, remove a subdirectory, change the mode. Every call is
//! relative to a descriptor, so no path is ever resolved again (a tenant
//! cannot swap a component for a symlink between two steps) and depth
//! never meets `PATH_MAX`. Thin `*at(2)` wrappers only: what to do with a
//! tree is `remove`'s.

use std::ffi::{CStr, CString, OsStr};
use std::io;
use std::os::fd::{AsRawFd, FromRawFd, OwnedFd};
use std::os::unix::ffi::OsStrExt;
use std::path::Path;

const OPEN_DIR: libc::c_int =
    libc::O_RDONLY | libc::O_DIRECTORY | libc::O_NOFOLLOW | libc::O_CLOEXEC;

/// Which device and inode a directory is: what a walk compares to know it
/// climbed back to the directory it came down from.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub struct Identity {
    pub dev: u64,
    pub ino: u64,
}

/// What an entry is, without following it.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub enum Kind {
    Directory,
    /// Anything else: a file, a symlink, a device, a socket, a fifo.
    Other,
}

/// An open directory.
#[derive(Debug)]
pub struct Dir {
    fd: OwnedFd,
}

fn check(ret: libc::c_int) -> io::Result<libc::c_int> {
    if ret < 0 {
        Err(io::Error::last_os_error())
    } else {
        Ok(ret)
    }
}

fn c_path(path: &Path) -> io::Result<CString> {
    CString::new(path.as_os_str().as_bytes())
        .map_err(|_| io::Error::new(io::ErrorKind::InvalidInput, "a path with a NUL byte"))
}

impl Dir {
    /// Opens the directory at `path`; a symlink at its last component is
    /// refused (`ELOOP`).
    pub fn open(path: &Path) -> io::Result<Dir> {
        let path = c_path(path)?;
        // SAFETY: a valid NUL-terminated path; the descriptor returned is ours.
        let fd = check(unsafe { libc::open(path.as_ptr(), OPEN_DIR) })?;
        // SAFETY: `fd` was just opened and is owned by nothing else.
        Ok(Dir {
            fd: unsafe { OwnedFd::from_raw_fd(fd) },
        })
    }

    fn open_at(&self, name: &CStr, flags: libc::c_int) -> io::Result<OwnedFd> {
        // SAFETY: a valid descriptor and NUL-terminated name.
        let fd = check(unsafe { libc::openat(self.fd.as_raw_fd(), name.as_ptr(), flags) })?;
        // SAFETY: `fd` was just opened and is owned by nothing else.
        Ok(unsafe { OwnedFd::from_raw_fd(fd) })
    }

    /// The subdirectory `name`: `ELOOP` or `ENOTDIR` when it is a symlink
    /// or not a directory (never followed).
    pub fn child(&self, name: &CStr) -> io::Result<Dir> {
        self.open_at(name, OPEN_DIR).map(|fd| Dir { fd })
    }

    /// The directory `..` names now (which may not be where the walk came
    /// from, if the tree was moved meanwhile: compare `identity`).
    pub fn parent(&self) -> io::Result<Dir> {
        self.child(c"..")
    }

    /// A new directory `name` with `mode` (less the umask); `EEXIST` when
    /// anything stands there.
    pub fn make_dir(&self, name: &CStr, mode: u32) -> io::Result<()> {
        // SAFETY: a valid descriptor and NUL-terminated name.
        check(unsafe { libc::mkdirat(self.fd.as_raw_fd(), name.as_ptr(), mode as libc::mode_t) })
            .map(drop)
    }

    fn stat(&self) -> io::Result<libc::stat> {
        // SAFETY: `st` is plain data the call fills in.
        let mut st: libc::stat = unsafe { std::mem::zeroed() };
        // SAFETY: a valid descriptor and a valid out pointer.
        check(unsafe { libc::fstat(self.fd.as_raw_fd(), &mut st) })?;
        Ok(st)
    }

    pub fn identity(&self) -> io::Result<Identity> {
        let st = self.stat()?;
        Ok(Identity {
            dev: st.st_dev,
            ino: st.st_ino,
        })
    }

    /// Its permission bits (and set-id and sticky bits).
    pub fn mode(&self) -> io::Result<u32> {
        Ok(self.stat()?.st_mode & 0o7777)
    }

    pub fn set_mode(&self, mode: u32) -> io::Result<()> {
        // SAFETY: a valid descriptor.
        check(unsafe { libc::fchmod(self.fd.as_raw_fd(), mode as libc::mode_t) }).map(drop)
    }

    pub fn set_owner(&self, uid: u32, gid: u32) -> io::Result<()> {
        // SAFETY: a valid descriptor.
        check(unsafe { libc::fchown(self.fd.as_raw_fd(), uid, gid) }).map(drop)
    }

    /// Gives the owner read, write and search permission on the
    /// subdirectory `name` that cannot be opened as it is (mode `000`, say,
    /// on a server where root does not override modes). Opened `O_PATH`,
    /// which needs no permission and follows no symlink, and changed
    /// through `/proc/self/fd`, since `fchmod` refuses an `O_PATH`
    /// descriptor.
    pub fn open_up_child(&self, name: &CStr) -> io::Result<()> {
        let fd = self.open_at(
            name,
            libc::O_PATH | libc::O_DIRECTORY | libc::O_NOFOLLOW | libc::O_CLOEXEC,
        )?;
        let through =
            CString::new(format!("/proc/self/fd/{}", fd.as_raw_fd())).expect("no NUL in a number");
        // SAFETY: `st` is plain data the call fills in.
        let mut st: libc::stat = unsafe { std::mem::zeroed() };
        // SAFETY: a valid descriptor and a valid out pointer.
        check(unsafe { libc::fstat(fd.as_raw_fd(), &mut st) })?;
        let mode = (st.st_mode & 0o7777) | 0o700;
        // SAFETY: a valid NUL-terminated path to the magic link of `fd`.
        check(unsafe { libc::chmod(through.as_ptr(), mode as libc::mode_t) }).map(drop)
    }

    /// Removes the entry `name` that is not a directory.
    pub fn unlink(&self, name: &CStr) -> io::Result<()> {
        // SAFETY: a valid descriptor and NUL-terminated name.
        check(unsafe { libc::unlinkat(self.fd.as_raw_fd(), name.as_ptr(), 0) }).map(drop)
    }

    /// Removes the empty subdirectory `name`.
    pub fn remove_dir(&self, name: &CStr) -> io::Result<()> {
        // SAFETY: a valid descriptor and NUL-terminated name.
        check(unsafe { libc::unlinkat(self.fd.as_raw_fd(), name.as_ptr(), libc::AT_REMOVEDIR) })
            .map(drop)
    }

    /// Renames the entry `from` of this directory to `to` in `into`.
    pub fn rename(&self, from: &CStr, into: &Dir, to: &CStr) -> io::Result<()> {
        // SAFETY: valid descriptors and NUL-terminated names.
        check(unsafe {
            libc::renameat(
                self.fd.as_raw_fd(),
                from.as_ptr(),
                into.fd.as_raw_fd(),
                to.as_ptr(),
            )
        })
        .map(drop)
    }

    /// What `name` is, without following it; `None` when nothing is there.
    pub fn kind_of(&self, name: &CStr) -> io::Result<Option<Kind>> {
        // SAFETY: `st` is plain data the call fills in.
        let mut st: libc::stat = unsafe { std::mem::zeroed() };
        // SAFETY: a valid descriptor, NUL-terminated name and out pointer.
        let ret = unsafe {
            libc::fstatat(
                self.fd.as_raw_fd(),
                name.as_ptr(),
                &mut st,
                libc::AT_SYMLINK_NOFOLLOW,
            )
        };
        match check(ret) {
            Ok(_) if st.st_mode & libc::S_IFMT == libc::S_IFDIR => Ok(Some(Kind::Directory)),
            Ok(_) => Ok(Some(Kind::Other)),
            Err(e) if e.raw_os_error() == Some(libc::ENOENT) => Ok(None),
            Err(e) => Err(e),
        }
    }

    /// Reads the entries from the start, `.` and `..` left out, through a
    /// stream of its own (one more descriptor while it lives).
    pub fn entries(&self) -> io::Result<Entries<'_>> {
        let own = self.open_at(c".", OPEN_DIR)?;
        let raw = own.as_raw_fd();
        // SAFETY: `raw` is a directory descriptor; on success the stream
        // owns it, so it is released from `own` only then.
        let stream = unsafe { libc::fdopendir(raw) };
        if stream.is_null() {
            return Err(io::Error::last_os_error());
        }
        std::mem::forget(own);
        Ok(Entries { dir: self, stream })
    }
}

/// The entries of a directory as they are read.
pub struct Entries<'a> {
    dir: &'a Dir,
    stream: *mut libc::DIR,
}

impl Iterator for Entries<'_> {
    type Item = io::Result<(CString, Kind)>;

    fn next(&mut self) -> Option<Self::Item> {
        loop {
            // `readdir` tells the end from an error only through errno.
            // SAFETY: errno is thread-local.
            unsafe { *libc::__errno_location() = 0 };
            // SAFETY: `stream` is open until drop.
            let entry = unsafe { libc::readdir(self.stream) };
            if entry.is_null() {
                let e = io::Error::last_os_error();
                return (e.raw_os_error() != Some(0)).then_some(Err(e));
            }
            // SAFETY: a non-null entry is valid until the next readdir.
            let (name, d_type) = unsafe {
                (
                    CStr::from_ptr((*entry).d_name.as_ptr()).to_owned(),
                    (*entry).d_type,
                )
            };
            if matches!(name.to_bytes(), b"." | b"..") {
                continue;
            }
            let kind = match d_type {
                libc::DT_DIR => Kind::Directory,
                libc::DT_UNKNOWN => match self.dir.kind_of(&name) {
                    Ok(Some(kind)) => kind,
                    // Gone since it was read.
                    Ok(None) => continue,
                    Err(e) => return Some(Err(e)),
                },
                _ => Kind::Other,
            };
            return Some(Ok((name, kind)));
        }
    }
}

impl Drop for Entries<'_> {
    fn drop(&mut self) {
        // SAFETY: `stream` is open and closed only here.
        unsafe { libc::closedir(self.stream) };
    }
}

/// A name as the `*at` calls take it.
pub fn c_name(name: &OsStr) -> io::Result<CString> {
    CString::new(name.as_bytes())
        .map_err(|_| io::Error::new(io::ErrorKind::InvalidInput, "a name with a NUL byte"))
}
