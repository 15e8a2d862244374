//! The node's host boundary: the `Mounter` trait every node RPC goes through,
//! and the parsed mount table used to answer "is this path mounted?". Domain
//! code in `node` must not call `mount(2)`, `umount2(2)`, `statvfs(3)` or
//! spawn the mount helper itself; only `linux::LinuxMounter` does.

pub mod linux;
pub mod mountinfo;
pub mod probe;

pub use linux::LinuxMounter;
pub use mountinfo::MountEntry;

use crate::{Error, Result};
use std::path::{Path, PathBuf};

/// Mount operations on the node. Errors carry their CSI outcome: mount and
/// unmount failures are `Internal`, a killed NFS helper is `DeadlineExceeded`;
/// `statvfs` reports what the kernel said, for the node to word.
pub trait Mounter: Send + Sync {
    /// `<helper> -t nfs4 [-o <options joined by ,>] <source> <target>`, bounded
    /// by the helper timeout. Past it the helper is killed, any mount it left
    /// behind is undone, and the error is `DeadlineExceeded`.
    fn mount_nfs4(&self, mount: &NfsMount) -> Result<(), NfsMountError>;

    /// Bind-mounts `source` on `target`. Of `flags` (CSI mount flags), the
    /// per-mount ones (`ro`, `nosuid`, `nodev`, `noexec`, `noatime`,
    /// `nodiratime`, `relatime`, `strictatime`) are applied by a bind
    /// remount; filesystem options such as `vers=4.2` mean nothing to a bind
    /// and are ignored.
    fn bind(&self, source: &Path, target: &Path, flags: &[String]) -> Result<()>;

    /// Makes the mount at `target` read-only, keeping its other per-mount
    /// flags.
    fn remount_readonly(&self, target: &Path) -> Result<()>;

    /// Unmounts `target`. Not mounted or missing → `Ok`. Busy → lazy detach,
    /// the last resort for a stale NFS mount that can never be released.
    fn unmount(&self, target: &Path) -> Result<()>;

    /// Detaches the mount at `target` lazily (`MNT_DETACH`): it leaves the
    /// mount table at once, without waiting on a server that may never
    /// answer, and goes when nothing uses it any more; what was bound from
    /// it keeps working as it did. Not mounted or missing → `Ok`.
    fn detach(&self, target: &Path) -> Result<()>;

    /// The mount table of this process's namespace, read once.
    fn mount_table(&self) -> Result<MountTable>;

    fn is_mount_point(&self, path: &Path) -> Result<bool> {
        Ok(self.mount_table()?.find(path).is_some())
    }

    fn statvfs(&self, path: &Path) -> Result<FsStats, StatvfsError>;
}

/// One NFS mount asked for: `<source>` (`host:/export`) on `<target>` with
/// `options` (`-o`, joined by `,`).
#[derive(Debug, Clone, Copy)]
pub struct NfsMount<'a> {
    pub source: &'a str,
    pub target: &'a Path,
    pub options: &'a [String],
}

/// A failed `mount_nfs4`: its CSI outcome, and whether the helper said the
/// server's host name does not resolve on this node, the one failure that
/// another source of the same export (its IPv6 address) gets around.
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct NfsMountError {
    pub error: Error,
    pub unresolved_host: bool,
}

impl From<Error> for NfsMountError {
    fn from(error: Error) -> NfsMountError {
        NfsMountError {
            error,
            unresolved_host: false,
        }
    }
}

/// Why `statvfs` failed, by the errno the node reports differently. Each
/// message names the path and the kernel's reason.
#[derive(Debug, Clone, PartialEq, Eq)]
pub enum StatvfsError {
    /// Nothing at the path (`ENOENT`, `ENOTDIR`).
    Missing(String),
    /// `ESTALE`: the NFS server no longer knows the mount's file handle
    /// (the export was recreated, or the server lost its handles).
    Stale(String),
    /// `EIO` or `ENOTCONN`: the server, or the way to it, fails the
    /// request (disconnected).
    Io(String),
    Other(String),
}

/// The `statvfs` figures the node reports, in the kernel's units.
#[derive(Debug, Clone, Copy, PartialEq, Eq, Default)]
pub struct FsStats {
    /// `f_frsize`: the unit of the block counts.
    pub fragment_size: u64,
    pub blocks: u64,
    pub blocks_free: u64,
    /// Free blocks an unprivileged user may use (`f_bavail`).
    pub blocks_available: u64,
    pub files: u64,
    pub files_free: u64,
}

/// A snapshot of the mount table.
#[derive(Debug, Clone)]
pub struct MountTable {
    entries: Vec<MountEntry>,
}

impl MountTable {
    pub fn parse(mountinfo: &[u8]) -> Result<MountTable> {
        Ok(MountTable {
            entries: mountinfo::parse(mountinfo)?,
        })
    }

    /// The topmost mount at `path`, if any. The path is compared lexically
    /// first (no syscall, so a stale NFS mount cannot hang the lookup); only
    /// when that misses is the parent directory resolved, for callers that
    /// reach a mount through a symlinked directory. The path itself is never
    /// stat'ed.
    pub fn find(&self, path: &Path) -> Option<&MountEntry> {
        let lexical: PathBuf = path.components().collect();
        if let Some(found) = self.find_exact(&lexical) {
            return Some(found);
        }
        let resolved = lexical
            .parent()
            .and_then(|parent| std::fs::canonicalize(parent).ok())
            .zip(lexical.file_name())
            .map(|(parent, name)| parent.join(name))?;
        if resolved == lexical {
            return None;
        }
        self.find_exact(&resolved)
    }

    /// Every mount of the same filesystem directory as `of` (itself
    /// included): a staging mount and the targets it is bound to.
    pub fn same_as<'a>(&'a self, of: &'a MountEntry) -> impl Iterator<Item = &'a MountEntry> {
        self.entries
            .iter()
            .filter(move |e| e.device == of.device && e.root == of.root)
    }

    fn find_exact(&self, path: &Path) -> Option<&MountEntry> {
        // Later lines are mounted on top of earlier ones at the same point.
        self.entries.iter().rev().find(|e| e.mount_point == path)
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    const TABLE: &[u8] = b"\
27 1 254:0 / / rw,relatime - ext4 /dev/vda rw
80 27 0:53 / /stage rw,relatime - nfs4 host:/export rw
81 27 0:53 / /pod/target rw,relatime - nfs4 host:/export rw
82 81 0:53 / /pod/target ro,relatime - nfs4 host:/export rw
";

    #[test]
    fn binds_of_one_directory_are_found_together() {
        let t = MountTable::parse(TABLE).unwrap();
        let stage = t.find(Path::new("/stage")).unwrap();
        let points: Vec<&Path> = t.same_as(stage).map(|e| e.mount_point.as_path()).collect();
        assert_eq!(
            points,
            [
                Path::new("/stage"),
                Path::new("/pod/target"),
                Path::new("/pod/target")
            ]
        );
        let root = t.find(Path::new("/")).unwrap();
        assert_eq!(t.same_as(root).count(), 1);
    }

    #[test]
    fn lookup_is_lexical_and_ignores_trailing_slashes_and_dots() {
        let t = MountTable::parse(TABLE).unwrap();
        assert!(t.find(Path::new("/stage")).is_some());
        assert!(t.find(Path::new("/stage/")).is_some());
        assert!(t.find(Path::new("/./stage")).is_some());
        assert!(t.find(Path::new("/stage/sub")).is_none());
        assert!(t.find(Path::new("/stag")).is_none());
    }

    #[test]
    fn the_topmost_of_stacked_mounts_wins() {
        let t = MountTable::parse(TABLE).unwrap();
        assert!(t.find(Path::new("/pod/target")).unwrap().is_read_only());
    }

    #[test]
    fn a_mount_reached_through_a_symlinked_parent_is_found() {
        let dir = std::env::temp_dir().join(format!("mounttable-{}", std::process::id()));
        std::fs::create_dir_all(dir.join("real")).unwrap();
        let link = dir.join("link");
        let _ = std::fs::remove_file(&link);
        std::os::unix::fs::symlink(dir.join("real"), &link).unwrap();
        let real = std::fs::canonicalize(dir.join("real")).unwrap().join("m");
        let text = format!("1 0 0:1 / {} rw - tmpfs none rw\n", real.display());
        let t = MountTable::parse(text.as_bytes()).unwrap();
        assert!(t.find(&link.join("m")).is_some());
        assert!(t.find(&link.join("other")).is_none());
        std::fs::remove_dir_all(&dir).unwrap();
    }
}
