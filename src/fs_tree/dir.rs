//! A directory held open by descriptor, and what the tree walks do through
//! it: open a child or the parent without following a symlink, read the
//! entries (and come back to a place among them), inspect, make, link,
//! unlink, rename and remove entries, change modes, owners and times. Every
//! call is relative to a descriptor, so no path is ever resolved again (a
//! tenant cannot swap a component for a symlink between two steps) and
//! depth never meets `PATH_MAX`. Thin `*at(2)` wrappers only: what to do
//! with a tree is `remove`'s and `copy`'s.

use std::ffi::{CStr, CString, OsStr};
use std::fs::File;
use std::io;
use std::os::fd::{AsRawFd, FromRawFd, IntoRawFd, OwnedFd, RawFd};
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

    /// Another descriptor of the same directory.
    pub fn reopen(&self) -> io::Result<Dir> {
        self.child(c".")
    }

    /// The directory's own status.
    pub fn stat(&self) -> io::Result<libc::stat> {
        // SAFETY: `st` is plain data the call fills in.
        let mut st: libc::stat = unsafe { std::mem::zeroed() };
        // SAFETY: a valid descriptor and a valid out pointer.
        check(unsafe { libc::fstat(self.fd.as_raw_fd(), &mut st) })?;
        Ok(st)
    }

    /// The status of the entry `name` itself (a symlink is not followed).
    pub fn stat_at(&self, name: &CStr) -> io::Result<libc::stat> {
        // SAFETY: `st` is plain data the call fills in.
        let mut st: libc::stat = unsafe { std::mem::zeroed() };
        // SAFETY: a valid descriptor, NUL-terminated name and out pointer.
        check(unsafe {
            libc::fstatat(
                self.fd.as_raw_fd(),
                name.as_ptr(),
                &mut st,
                libc::AT_SYMLINK_NOFOLLOW,
            )
        })?;
        Ok(st)
    }

    /// Opens the entry `name` for reading: `ELOOP` when it is a symlink.
    /// Non-blocking, so a fifo put there meanwhile does not hang the open
    /// (the caller checks what it opened); no controlling terminal either.
    pub fn open_file(&self, name: &CStr) -> io::Result<File> {
        self.open_at(
            name,
            libc::O_RDONLY | libc::O_NOFOLLOW | libc::O_NONBLOCK | libc::O_NOCTTY | libc::O_CLOEXEC,
        )
        .map(File::from)
    }

    /// Creates the file `name` with `mode` (less the umask) for writing;
    /// `EEXIST` when anything, even a dangling symlink, stands there.
    pub fn create_file(&self, name: &CStr, mode: u32) -> io::Result<File> {
        let flags =
            libc::O_WRONLY | libc::O_CREAT | libc::O_EXCL | libc::O_NOFOLLOW | libc::O_CLOEXEC;
        // SAFETY: a valid descriptor and NUL-terminated name; the mode is
        // passed as the variadic argument `O_CREAT` reads.
        let fd = check(unsafe {
            libc::openat(
                self.fd.as_raw_fd(),
                name.as_ptr(),
                flags,
                mode as libc::c_uint,
            )
        })?;
        // SAFETY: `fd` was just opened and is owned by nothing else.
        Ok(File::from(unsafe { OwnedFd::from_raw_fd(fd) }))
    }

    /// The text of the symlink `name`, as stored (never resolved).
    pub fn read_link(&self, name: &CStr) -> io::Result<CString> {
        let mut buf = vec![0u8; 256];
        loop {
            // SAFETY: a valid descriptor and NUL-terminated name; `buf` is
            // writable for its whole length.
            let n = unsafe {
                libc::readlinkat(
                    self.fd.as_raw_fd(),
                    name.as_ptr(),
                    buf.as_mut_ptr().cast(),
                    buf.len(),
                )
            };
            if n < 0 {
                return Err(io::Error::last_os_error());
            }
            let n = n as usize;
            // A full buffer may have cut the text short: read it again
            // into a larger one.
            if n < buf.len() {
                buf.truncate(n);
                return CString::new(buf).map_err(|_| {
                    io::Error::new(io::ErrorKind::InvalidData, "a symlink with a NUL byte")
                });
            }
            buf.resize(buf.len() * 2, 0);
        }
    }

    /// Creates the symlink `name` with the text `target`; `EEXIST` when
    /// anything stands there.
    pub fn symlink(&self, target: &CStr, name: &CStr) -> io::Result<()> {
        // SAFETY: a valid descriptor and NUL-terminated strings.
        check(unsafe { libc::symlinkat(target.as_ptr(), self.fd.as_raw_fd(), name.as_ptr()) })
            .map(drop)
    }

    /// Makes `to` in `into` another name of the entry `from` of this
    /// directory (a symlink itself, not what it points to); `EEXIST` when
    /// anything stands at `to`.
    pub fn link(&self, from: &CStr, into: &Dir, to: &CStr) -> io::Result<()> {
        // SAFETY: `between` passes valid descriptors and NUL-terminated
        // names; flags 0 links a symlink itself.
        self.between(from, into, to, |a, b, c, d| unsafe {
            libc::linkat(a, b, c, d, 0)
        })
    }

    /// A call naming the entry `from` of this directory and `to` in `into`,
    /// given valid descriptors and NUL-terminated names.
    fn between(
        &self,
        from: &CStr,
        into: &Dir,
        to: &CStr,
        call: impl FnOnce(RawFd, *const libc::c_char, RawFd, *const libc::c_char) -> libc::c_int,
    ) -> io::Result<()> {
        check(call(
            self.fd.as_raw_fd(),
            from.as_ptr(),
            into.fd.as_raw_fd(),
            to.as_ptr(),
        ))
        .map(drop)
    }

    /// Changes the owner of the entry `name` itself (a symlink is not
    /// followed).
    pub fn set_owner_at(&self, name: &CStr, uid: u32, gid: u32) -> io::Result<()> {
        // SAFETY: a valid descriptor and NUL-terminated name.
        check(unsafe {
            libc::fchownat(
                self.fd.as_raw_fd(),
                name.as_ptr(),
                uid,
                gid,
                libc::AT_SYMLINK_NOFOLLOW,
            )
        })
        .map(drop)
    }

    /// Sets the access and modification times (in that order) of the
    /// entry `name` itself (a symlink is not followed).
    pub fn set_times_at(&self, name: &CStr, times: &[libc::timespec; 2]) -> io::Result<()> {
        // SAFETY: a valid descriptor, NUL-terminated name and two times.
        check(unsafe {
            libc::utimensat(
                self.fd.as_raw_fd(),
                name.as_ptr(),
                times.as_ptr(),
                libc::AT_SYMLINK_NOFOLLOW,
            )
        })
        .map(drop)
    }

    /// Sets the directory's own access and modification times.
    pub fn set_times(&self, times: &[libc::timespec; 2]) -> io::Result<()> {
        // SAFETY: a valid descriptor and two times.
        check(unsafe { libc::futimens(self.fd.as_raw_fd(), times.as_ptr()) }).map(drop)
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
        // SAFETY: `between` passes valid descriptors and NUL-terminated names.
        self.between(from, into, to, |a, b, c, d| unsafe {
            libc::renameat(a, b, c, d)
        })
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
        Ok(Entries {
            dir: self,
            stream,
            last: Position(0),
        })
    }

    /// Reads the entries from `at`, a place an earlier stream of this
    /// directory gave. The filesystem's cookie, so the caller checks it
    /// still leads where it led.
    pub fn entries_at(&self, at: Position) -> io::Result<Entries<'_>> {
        let entries = self.entries()?;
        // SAFETY: the stream is open; `seekdir` takes any value `telldir`
        // gave for this directory.
        unsafe { libc::seekdir(entries.stream, at.0) };
        Ok(entries)
    }
}

/// A place among the entries of a directory, to read on from there later
/// through another stream (`Dir::entries_at`).
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub struct Position(libc::c_long);

/// The entries of a directory as they are read.
pub struct Entries<'a> {
    dir: &'a Dir,
    stream: *mut libc::DIR,
    /// Where the entry `next` returned last was read from.
    last: Position,
}

impl Entries<'_> {
    /// Where the entry returned last is: reading from there returns it
    /// again.
    pub fn position(&self) -> Position {
        self.last
    }
}

impl Iterator for Entries<'_> {
    type Item = io::Result<(CString, Kind)>;

    fn next(&mut self) -> Option<Self::Item> {
        loop {
            // SAFETY: `stream` is open until drop.
            let at = Position(unsafe { libc::telldir(self.stream) });
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
            self.last = at;
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

/// Closes `file`, reporting what the close reports: on NFS that is where
/// a failed write-back (`ENOSPC`, `EDQUOT`) shows, which dropping the
/// `File` would lose.
pub fn close(file: File) -> io::Result<()> {
    // SAFETY: the descriptor is taken out of `file`, so it is closed once.
    check(unsafe { libc::close(file.into_raw_fd()) }).map(drop)
}

/// Where `lseek(2)` looks from `offset` of `file`.
#[derive(Debug, Clone, Copy)]
pub enum Seek {
    /// The next byte that holds data.
    Data,
    /// The next hole (the end of the file counts as one).
    Hole,
}

/// Moves `file` to the next data or hole from `offset` and returns where
/// that is; `None` when no data follows (`ENXIO`).
pub fn seek(file: &File, offset: u64, to: Seek) -> io::Result<Option<u64>> {
    let whence = match to {
        Seek::Data => libc::SEEK_DATA,
        Seek::Hole => libc::SEEK_HOLE,
    };
    let offset = libc::off_t::try_from(offset)
        .map_err(|_| io::Error::new(io::ErrorKind::InvalidInput, "an offset past off_t"))?;
    // SAFETY: a valid descriptor; `lseek` only moves its offset.
    let at = unsafe { libc::lseek(file.as_raw_fd(), offset, whence) };
    if at < 0 {
        let e = io::Error::last_os_error();
        return match e.raw_os_error() {
            Some(libc::ENXIO) => Ok(None),
            _ => Err(e),
        };
    }
    Ok(Some(at as u64))
}

/// A name as the `*at` calls take it.
pub fn c_name(name: &OsStr) -> io::Result<CString> {
    CString::new(name.as_bytes())
        .map_err(|_| io::Error::new(io::ErrorKind::InvalidInput, "a name with a NUL byte"))
}
