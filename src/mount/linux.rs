//! `LinuxMounter`: the only code in the driver that calls `mount(2)`,
//! `umount2(2)` and `statvfs(3)`, reads `/proc/self/mountinfo`, or spawns the
//! NFS mount helper; it records the helper's runs and the lazy detaches in
//! the metrics. It knows nothing about CSI requests.

use super::{FsStats, MountTable, Mounter, NfsMount, NfsMountError, StatvfsError};
use crate::bounded;
use crate::metrics::{self, Detached, MountOutcome};
use crate::{Error, Result};
use std::ffi::{CString, OsStr};
use std::io::{self, Read};
use std::os::unix::ffi::OsStrExt;
use std::os::unix::process::CommandExt;
use std::path::{Path, PathBuf};
use std::process::{Command, ExitStatus, Stdio};
use std::sync::mpsc;
use std::time::{Duration, Instant};

const MOUNTINFO: &str = "/proc/self/mountinfo";

/// Enough of the helper's stderr for any mount.nfs diagnostic; the rest is
/// drained and dropped so a chatty helper never blocks on a full pipe.
const STDERR_LIMIT: usize = 8 * 1024;

/// What nfs-utils' `mount.nfs` prints when `getaddrinfo` fails for the
/// server's name (`<prog>: Failed to resolve server <host>: <gai_strerror>`,
/// utils/mount/stropts.c); it then exits 32, the status of every mount
/// failure, so only the text tells this one apart. Newer nfs-utils retries a
/// temporary failure (`EAI_AGAIN`, a resolver that does not answer) silently
/// until its `retry=` deadline, which reaches the driver as a timeout instead.
const UNRESOLVED_HOST: &str = "Failed to resolve server";

/// How long a killed helper gets to be reaped and close its stderr.
const KILL_GRACE: Duration = Duration::from_secs(5);

/// How long one `umount2` may take. Unmounting the last user of a hard NFS
/// mount flushes its dirty pages, which never finishes while the server is
/// unreachable; past this the mount is detached lazily, which does not wait.
const UNMOUNT_PATIENCE: Duration = Duration::from_secs(30);

const ATIME_FLAGS: libc::c_ulong = libc::MS_NOATIME | libc::MS_RELATIME | libc::MS_STRICTATIME;

pub struct LinuxMounter {
    helper: PathBuf,
    timeout: Duration,
}

impl LinuxMounter {
    /// `helper` is the `mount` binary (or a stand-in with its command line);
    /// nfs-utils' `mount.nfs4` behind it resolves names and negotiates, which
    /// the kernel alone cannot. `timeout` bounds one helper run.
    pub fn new(helper: PathBuf, timeout: Duration) -> LinuxMounter {
        LinuxMounter { helper, timeout }
    }

    fn command_line(&self, args: &[&OsStr]) -> String {
        std::iter::once(self.helper.as_os_str())
            .chain(args.iter().copied())
            .map(|a| a.to_string_lossy())
            .collect::<Vec<_>>()
            .join(" ")
    }

    /// Bind remount adding `extra` while keeping the mount's other flags: a
    /// remount replaces them all, and dropping a locked flag (for example
    /// `nosuid` inherited in a user namespace) would be refused. The current
    /// flags come from the mount table, not `statvfs`: on a hard NFS mount
    /// whose server is gone, `statvfs` never returns.
    fn remount_bind(&self, target: &Path, extra: libc::c_ulong) -> Result<()> {
        let table = self.mount_table()?;
        let entry = table.find(target).ok_or_else(|| {
            Error::Internal(format!("bind remount {}: not mounted", target.display()))
        })?;
        let mut keep = per_mount_flags(&entry.mount_options);
        if extra & ATIME_FLAGS != 0 {
            keep &= !ATIME_FLAGS;
        }
        sys_mount(
            None,
            target,
            libc::MS_BIND | libc::MS_REMOUNT | keep | extra,
        )
        .map_err(|e| Error::Internal(format!("bind remount {}: {e}", target.display())))
    }
}

impl Mounter for LinuxMounter {
    fn mount_nfs4(&self, mount: &NfsMount) -> Result<(), NfsMountError> {
        let (source, target, options) = (mount.source, mount.target, mount.options);
        let joined = options.join(",");
        let mut args = vec![OsStr::new("-t"), OsStr::new("nfs4")];
        if !options.is_empty() {
            args.extend([OsStr::new("-o"), OsStr::new(&joined)]);
        }
        args.extend([OsStr::new(source), target.as_os_str()]);
        let shown = self.command_line(&args);

        let mut cmd = Command::new(&self.helper);
        cmd.args(&args)
            .stdin(Stdio::null())
            .stdout(Stdio::null())
            .stderr(Stdio::piped())
            // Its own group, so a timeout kills mount.nfs4 too, not just
            // the `mount` that forked it.
            .process_group(0);
        let started = Instant::now();
        let run = run_bounded(cmd, self.timeout);
        let outcome = match &run {
            Ok(Run::Exited(status, _)) if status.success() => MountOutcome::Ok,
            Ok(Run::Exited(_, stderr)) if unresolved(stderr) => MountOutcome::UnresolvedHost,
            Ok(Run::Exited(..)) => MountOutcome::Failed,
            Ok(Run::TimedOut(_)) => MountOutcome::TimedOut,
            Err(_) => MountOutcome::NotRun,
        };
        metrics::mount_helper(outcome, started.elapsed());
        match run.map_err(|e| Error::Internal(format!("{shown}: cannot run: {e}")))? {
            Run::Exited(status, _) if status.success() => Ok(()),
            Run::Exited(status, stderr) => Err(NfsMountError {
                error: Error::Internal(format!("{shown} failed ({status}){}", detail(&stderr))),
                unresolved_host: unresolved(&stderr),
            }),
            Run::TimedOut(stderr) => {
                // The mount syscall may have completed just before the kill;
                // leave nothing behind for the caller to trip over.
                let leftover = match self.is_mount_point(target) {
                    Ok(true) => self.unmount(target).err(),
                    Ok(false) => None,
                    Err(e) => Some(e),
                };
                let mut message = format!(
                    "{shown} did not finish within {:?} and was killed{}",
                    self.timeout,
                    detail(&stderr)
                );
                if let Some(e) = leftover {
                    message.push_str(&format!("; cleaning up {}: {e}", target.display()));
                }
                Err(Error::DeadlineExceeded(message).into())
            }
        }
    }

    fn bind(&self, source: &Path, target: &Path, flags: &[String]) -> Result<()> {
        sys_mount(Some(source), target, libc::MS_BIND).map_err(|e| {
            Error::Internal(format!(
                "bind mount {} at {}: {e}",
                source.display(),
                target.display()
            ))
        })?;
        let per_mount = per_mount_flags(flags);
        if per_mount != 0 {
            self.remount_bind(target, per_mount)?;
        }
        Ok(())
    }

    fn remount_readonly(&self, target: &Path) -> Result<()> {
        self.remount_bind(target, libc::MS_RDONLY)
    }

    fn unmount(&self, target: &Path) -> Result<()> {
        let detach = |reason: Detached, why: &str| {
            log::warn!("{}: {why}; detaching it lazily", target.display());
            metrics::unmount_detached(reason);
            match sys_umount(target, libc::MNT_DETACH) {
                Err(e) if !not_mounted(&e) => Err(Error::Internal(format!(
                    "lazy unmount {}: {e}",
                    target.display()
                ))),
                _ => Ok(()),
            }
        };
        let path = target.to_path_buf();
        match bounded::within("bounded-syscall", UNMOUNT_PATIENCE, move || {
            sys_umount(&path, 0)
        }) {
            Ok(Some(Ok(()))) => Ok(()),
            Ok(Some(Err(e))) if not_mounted(&e) => Ok(()),
            Ok(Some(Err(e))) if e.raw_os_error() == Some(libc::EBUSY) => {
                detach(Detached::Busy, "busy (stale NFS or a process still inside)")
            }
            Ok(None) => detach(
                Detached::Timeout,
                &format!(
                    "unmount did not return within {UNMOUNT_PATIENCE:?} (NFS server unreachable?)"
                ),
            ),
            Ok(Some(Err(e))) | Err(e) => Err(Error::Internal(format!(
                "unmount {}: {e}",
                target.display()
            ))),
        }
    }

    fn detach(&self, target: &Path) -> Result<()> {
        match sys_umount(target, libc::MNT_DETACH) {
            Err(e) if !not_mounted(&e) => Err(Error::Internal(format!(
                "lazy unmount {}: {e}",
                target.display()
            ))),
            _ => Ok(()),
        }
    }

    fn mount_table(&self) -> Result<MountTable> {
        let text = std::fs::read(MOUNTINFO)
            .map_err(|e| Error::Internal(format!("read {MOUNTINFO}: {e}")))?;
        MountTable::parse(&text)
    }

    fn statvfs(&self, path: &Path) -> Result<FsStats, StatvfsError> {
        let raw = statvfs_raw(path).map_err(|e| statvfs_error(path, &e))?;
        Ok(FsStats {
            fragment_size: raw.f_frsize,
            blocks: raw.f_blocks,
            blocks_free: raw.f_bfree,
            blocks_available: raw.f_bavail,
            files: raw.f_files,
            files_free: raw.f_ffree,
        })
    }
}

fn statvfs_error(path: &Path, e: &io::Error) -> StatvfsError {
    let message = format!("statvfs {}: {e}", path.display());
    match e.raw_os_error() {
        Some(libc::ENOENT | libc::ENOTDIR) => StatvfsError::Missing(message),
        Some(libc::ESTALE) => StatvfsError::Stale(message),
        Some(libc::EIO | libc::ENOTCONN) => StatvfsError::Io(message),
        _ => StatvfsError::Other(message),
    }
}

enum Run {
    Exited(ExitStatus, Vec<u8>),
    TimedOut(Vec<u8>),
}

/// Runs `cmd` (already in its own process group) for at most `timeout`, then
/// kills the whole group. One thread waits for the exit and one drains
/// stderr, so neither a full pipe nor a grandchild that keeps stderr open can
/// stall the caller past the bound.
fn run_bounded(mut cmd: Command, timeout: Duration) -> io::Result<Run> {
    let mut child = cmd.spawn()?;
    let group = libc::pid_t::try_from(child.id()).map_err(io::Error::other)?;
    let kill_group = move || {
        // SAFETY: plain syscall on a process group this function created.
        unsafe { libc::kill(-group, libc::SIGKILL) };
    };

    let (err_tx, err_rx) = mpsc::channel();
    if let Some(mut pipe) = child.stderr.take() {
        let spawned = std::thread::Builder::new()
            .name("mount-helper-stderr".into())
            .spawn(move || {
                let mut kept = Vec::new();
                let mut buf = [0u8; 4096];
                while let Ok(n) = pipe.read(&mut buf) {
                    if n == 0 {
                        break;
                    }
                    let room = STDERR_LIMIT.saturating_sub(kept.len());
                    kept.extend_from_slice(&buf[..n.min(room)]);
                }
                let _ = err_tx.send(kept);
            });
        if let Err(e) = spawned {
            kill_group();
            let _ = child.wait();
            return Err(e);
        }
    }

    let (exit_tx, exit_rx) = mpsc::channel();
    // `child` moves into the thread; on spawn failure the closure (and the
    // child handle) come back inside the error only as a drop, so kill first.
    let spawned = std::thread::Builder::new()
        .name("mount-helper-wait".into())
        .spawn(move || {
            let _ = exit_tx.send(child.wait());
        });
    if let Err(e) = spawned {
        kill_group();
        return Err(e);
    }

    match exit_rx.recv_timeout(timeout) {
        Ok(status) => {
            let stderr = err_rx.recv_timeout(KILL_GRACE).unwrap_or_default();
            Ok(Run::Exited(status?, stderr))
        }
        Err(mpsc::RecvTimeoutError::Timeout) => {
            kill_group();
            let _ = exit_rx.recv_timeout(KILL_GRACE);
            let stderr = err_rx.recv_timeout(KILL_GRACE).unwrap_or_default();
            Ok(Run::TimedOut(stderr))
        }
        Err(mpsc::RecvTimeoutError::Disconnected) => {
            Err(io::Error::other("mount helper wait thread died"))
        }
    }
}

fn unresolved(stderr: &[u8]) -> bool {
    String::from_utf8_lossy(stderr).contains(UNRESOLVED_HOST)
}

fn detail(stderr: &[u8]) -> String {
    let text = String::from_utf8_lossy(stderr);
    let text = text.trim();
    if text.is_empty() {
        String::new()
    } else {
        format!(": {text}")
    }
}

/// The `MS_*` bits of the per-mount flags among CSI mount flags.
fn per_mount_flags(flags: &[String]) -> libc::c_ulong {
    flags
        .iter()
        .flat_map(|f| f.split(','))
        .map(|f| match f.trim() {
            "ro" => libc::MS_RDONLY,
            "nosuid" => libc::MS_NOSUID,
            "nodev" => libc::MS_NODEV,
            "noexec" => libc::MS_NOEXEC,
            "noatime" => libc::MS_NOATIME,
            "nodiratime" => libc::MS_NODIRATIME,
            "relatime" => libc::MS_RELATIME,
            "strictatime" => libc::MS_STRICTATIME,
            "nosymfollow" => libc::MS_NOSYMFOLLOW,
            _ => 0,
        })
        .fold(0, |acc, bit| acc | bit)
}

fn not_mounted(e: &io::Error) -> bool {
    matches!(e.raw_os_error(), Some(libc::EINVAL) | Some(libc::ENOENT))
}

fn c_path(path: &Path) -> io::Result<CString> {
    CString::new(path.as_os_str().as_bytes())
        .map_err(|_| io::Error::new(io::ErrorKind::InvalidInput, "path contains a NUL byte"))
}

/// Mounts a FUSE filesystem at `target` whose server holds the
/// `/dev/fuse` descriptor named in `data` (dev mode's emulated NFS),
/// read-only when `read_only`.
pub fn mount_fuse(target: &Path, data: &str, read_only: bool) -> io::Result<()> {
    let target = c_path(target)?;
    let data = CString::new(data)
        .map_err(|_| io::Error::new(io::ErrorKind::InvalidInput, "options contain a NUL byte"))?;
    let mut flags = libc::MS_NOSUID | libc::MS_NODEV;
    if read_only {
        flags |= libc::MS_RDONLY;
    }
    // SAFETY: every string is NUL-terminated and outlives the call.
    let rc = unsafe {
        libc::mount(
            c"linode-nfs-dev".as_ptr(),
            target.as_ptr(),
            c"fuse".as_ptr(),
            flags,
            data.as_ptr().cast(),
        )
    };
    if rc == 0 {
        Ok(())
    } else {
        Err(io::Error::last_os_error())
    }
}

fn sys_mount(source: Option<&Path>, target: &Path, flags: libc::c_ulong) -> io::Result<()> {
    let source = source.map(c_path).transpose()?;
    let target = c_path(target)?;
    let source_ptr = source.as_ref().map_or(std::ptr::null(), |s| s.as_ptr());
    // SAFETY: both strings are NUL-terminated and outlive the call; a bind
    // needs neither a filesystem type nor data.
    let rc = unsafe {
        libc::mount(
            source_ptr,
            target.as_ptr(),
            std::ptr::null(),
            flags,
            std::ptr::null(),
        )
    };
    if rc == 0 {
        Ok(())
    } else {
        Err(io::Error::last_os_error())
    }
}

fn sys_umount(target: &Path, flags: libc::c_int) -> io::Result<()> {
    let target = c_path(target)?;
    // SAFETY: NUL-terminated path that outlives the call.
    if unsafe { libc::umount2(target.as_ptr(), flags) } == 0 {
        Ok(())
    } else {
        Err(io::Error::last_os_error())
    }
}

fn statvfs_raw(path: &Path) -> io::Result<libc::statvfs> {
    let path = c_path(path)?;
    // SAFETY: an all-zero statvfs is a valid value for the kernel to fill.
    let mut buf: libc::statvfs = unsafe { std::mem::zeroed() };
    // SAFETY: valid path pointer and a properly sized output buffer.
    if unsafe { libc::statvfs(path.as_ptr(), &mut buf) } == 0 {
        Ok(buf)
    } else {
        Err(io::Error::last_os_error())
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    fn flags(list: &[&str]) -> Vec<String> {
        list.iter().map(|s| s.to_string()).collect()
    }

    #[test]
    fn only_per_mount_flags_reach_the_bind_remount() {
        assert_eq!(
            per_mount_flags(&flags(&["vers=4.2", "nconnect=4", "hard"])),
            0
        );
        assert_eq!(
            per_mount_flags(&flags(&["ro", "noexec", "vers=4.1"])),
            libc::MS_RDONLY | libc::MS_NOEXEC
        );
    }

    #[test]
    fn mount_table_options_translate_to_the_flags_a_remount_keeps() {
        assert_eq!(
            per_mount_flags(&flags(&[
                "rw",
                "nosuid",
                "nodev",
                "relatime",
                "nosymfollow"
            ])),
            libc::MS_NOSUID | libc::MS_NODEV | libc::MS_RELATIME | libc::MS_NOSYMFOLLOW
        );
        assert_eq!(per_mount_flags(&flags(&["rw"])), 0);
        // A StorageClass may join several options in one entry.
        assert_eq!(
            per_mount_flags(&flags(&["vers=4.2, noexec", "ro"])),
            libc::MS_NOEXEC | libc::MS_RDONLY
        );
    }

    /// A scratch directory holding a stand-in helper script.
    struct Scratch(PathBuf);

    impl Scratch {
        fn new(name: &str, script: &str) -> Scratch {
            let dir =
                std::env::temp_dir().join(format!("linux-mounter-{name}-{}", std::process::id()));
            let _ = std::fs::remove_dir_all(&dir);
            std::fs::create_dir_all(&dir).unwrap();
            let helper = dir.join("helper");
            std::fs::write(&helper, format!("#!/bin/sh\n{script}\n")).unwrap();
            std::fs::set_permissions(&helper, std::os::unix::fs::PermissionsExt::from_mode(0o755))
                .unwrap();
            Scratch(dir)
        }
        fn mounter(&self, timeout: Duration) -> LinuxMounter {
            LinuxMounter::new(self.0.join("helper"), timeout)
        }
        /// How a mount of `source` that the helper fails is reported.
        fn failed_mount(&self, source: &str) -> NfsMountError {
            self.mounter(Duration::from_secs(10))
                .mount_nfs4(&NfsMount {
                    source,
                    target: Path::new("/nonexistent-target"),
                    options: &[],
                })
                .unwrap_err()
        }
    }

    impl Drop for Scratch {
        fn drop(&mut self) {
            let _ = std::fs::remove_dir_all(&self.0);
        }
    }

    #[test]
    fn the_helper_gets_the_documented_command_line() {
        let s = Scratch::new("argv", "printf '%s\\n' \"$@\" > \"$(dirname \"$0\")/argv\"");
        let m = s.mounter(Duration::from_secs(10));
        m.mount_nfs4(&NfsMount {
            source: "host:/export",
            target: Path::new("/stage dir"),
            options: &flags(&["vers=4.2", "xprtsec=mtls"]),
        })
        .unwrap();
        let argv = std::fs::read_to_string(s.0.join("argv")).unwrap();
        assert_eq!(
            argv,
            "-t\nnfs4\n-o\nvers=4.2,xprtsec=mtls\nhost:/export\n/stage dir\n"
        );
        m.mount_nfs4(&NfsMount {
            source: "[2001:db8::1]:/e",
            target: Path::new("/t"),
            options: &[],
        })
        .unwrap();
        let argv = std::fs::read_to_string(s.0.join("argv")).unwrap();
        assert_eq!(
            argv, "-t\nnfs4\n[2001:db8::1]:/e\n/t\n",
            "no -o without options"
        );
    }

    #[test]
    fn a_failing_helper_reports_its_stderr_as_internal() {
        let err = Scratch::new(
            "fail",
            "echo 'mount.nfs4: access denied by server' >&2; exit 32",
        )
        .failed_mount("host:/x");
        assert!(!err.unresolved_host, "{err:?}");
        let err = err.error;
        assert!(matches!(err, Error::Internal(_)), "{err:?}");
        assert!(err.message().contains("access denied by server"), "{err}");
        assert!(err.message().contains("exit status: 32"), "{err}");
    }

    #[test]
    fn a_name_that_does_not_resolve_is_told_apart() {
        // mount.nfs4's own words (nfs-utils utils/mount/stropts.c).
        let err = Scratch::new(
            "dns",
            "echo 'mount.nfs4: Failed to resolve server fs-1.example: Name or service not known' >&2; exit 32",
        )
        .failed_mount("fs-1.example:/x");
        assert!(err.unresolved_host, "{err:?}");
        assert!(matches!(err.error, Error::Internal(_)), "{err:?}");
        assert!(err.error.message().contains("Name or service not known"));
    }

    #[test]
    fn a_missing_helper_is_internal() {
        let err = LinuxMounter::new("/nonexistent/mount".into(), Duration::from_secs(1))
            .mount_nfs4(&NfsMount {
                source: "host:/x",
                target: Path::new("/t"),
                options: &[],
            })
            .unwrap_err();
        assert!(matches!(err.error, Error::Internal(_)), "{err:?}");
    }

    #[test]
    fn a_hanging_helper_and_its_children_are_killed_at_the_timeout() {
        let s = Scratch::new(
            "hang",
            "echo started >&2; sleep 1000 & echo $! > \"$(dirname \"$0\")/child\"; wait",
        );
        let started = Instant::now();
        let err = s
            .mounter(Duration::from_millis(500))
            .mount_nfs4(&NfsMount {
                source: "host:/x",
                target: Path::new("/nonexistent-target"),
                options: &[],
            })
            .unwrap_err()
            .error;
        assert!(
            started.elapsed() < Duration::from_secs(5),
            "{:?}",
            started.elapsed()
        );
        assert!(matches!(err, Error::DeadlineExceeded(_)), "{err:?}");
        assert!(err.message().contains("started"), "stderr kept: {err}");
        let child: i32 = std::fs::read_to_string(s.0.join("child"))
            .unwrap()
            .trim()
            .parse()
            .unwrap();
        let deadline = Instant::now() + Duration::from_secs(10);
        loop {
            let state = std::fs::read_to_string(format!("/proc/{child}/stat")).unwrap_or_default();
            // gone, or a zombie waiting for its (re)parent
            if state.is_empty() || state.split(' ').nth(2) == Some("Z") {
                break;
            }
            assert!(
                Instant::now() < deadline,
                "grandchild {child} survived: {state}"
            );
            std::thread::sleep(Duration::from_millis(20));
        }
    }

    #[test]
    fn statvfs_of_a_missing_path_is_not_found() {
        let m = LinuxMounter::new("mount".into(), Duration::from_secs(1));
        assert!(matches!(
            m.statvfs(Path::new("/nonexistent/path")),
            Err(StatvfsError::Missing(_))
        ));
        let root = m.statvfs(Path::new("/")).unwrap();
        assert!(root.blocks > 0 && root.fragment_size > 0);
    }

    #[test]
    fn statvfs_errnos_are_told_apart() {
        let path = Path::new("/mnt/x");
        let of = |errno| statvfs_error(path, &io::Error::from_raw_os_error(errno));
        assert!(matches!(of(libc::ENOTDIR), StatvfsError::Missing(_)));
        assert!(
            matches!(of(libc::ESTALE), StatvfsError::Stale(m) if m.starts_with("statvfs /mnt/x: "))
        );
        assert!(matches!(of(libc::EIO), StatvfsError::Io(_)));
        assert!(matches!(of(libc::ENOTCONN), StatvfsError::Io(_)));
        assert!(matches!(of(libc::EACCES), StatvfsError::Other(_)));
    }

    #[test]
    fn unmounting_something_not_mounted_or_missing_is_fine() {
        let m = LinuxMounter::new("mount".into(), Duration::from_secs(1));
        // A directory this test just made cannot be a mount point, so the
        // host's mount table is never at risk here.
        let s = Scratch::new("unmount", "exit 0");
        m.unmount(&s.0.join("never-existed")).unwrap();
        m.unmount(&s.0).unwrap();
    }
}
