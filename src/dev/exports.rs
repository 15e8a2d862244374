//! `dev` mode's stand-in for NFS: every filesystem the fake Linode API makes
//! active gets a directory under the state dir, a snapshot copies it, a
//! clone copies the snapshot back, deleting the filesystem removes it and
//! its snapshots (the backend keeps snapshots under their filesystem); and
//! the node's "NFS mount" is a bind mount of that directory. Only the NFS
//! step is emulated: bind, remount, unmount and stats go to the real
//! `LinuxMounter`, as in production.

use crate::mount::{FsStats, LinuxMounter, MountTable, Mounter, NfsMountError, StatvfsError};
use crate::mutex::lock;
use crate::{Error, Result};
use std::path::{Path, PathBuf};
use std::sync::Mutex;

/// The directories behind the emulated exports.
pub struct Exports {
    root: PathBuf,
}

impl Exports {
    pub fn new(root: &Path) -> Result<Exports> {
        for sub in ["exports", "snapshots"] {
            std::fs::create_dir_all(root.join(sub))?;
        }
        Ok(Exports {
            root: root.to_path_buf(),
        })
    }

    /// The directory serving an NFS source `host:/export` (or `[ip]:/export`).
    /// The host is dropped so the FQDN and IP forms of one filesystem agree.
    pub fn dir_of(&self, source: &str) -> Result<PathBuf> {
        let (_, export) = source.rsplit_once(':').ok_or_else(|| {
            Error::InvalidArgument(format!("not an NFS export source: {source:?}"))
        })?;
        self.export_dir(export)
    }

    /// The directory of an export path such as `/pvc-1-12d`.
    fn export_dir(&self, export: &str) -> Result<PathBuf> {
        let name = export.strip_prefix('/').unwrap_or(export);
        if name.is_empty() || name.contains('/') || name == "." || name == ".." {
            return Err(Error::InvalidArgument(format!(
                "not an NFS export path: {export:?}"
            )));
        }
        Ok(self.root.join("exports").join(name))
    }

    /// Snapshot copies live under their filesystem's export name, so
    /// removing the filesystem can take them along.
    fn snapshots_of(&self, export: &str) -> Result<PathBuf> {
        let dir = self.export_dir(export)?;
        let name = dir.file_name().expect("export_dir ends in a name");
        Ok(self.root.join("snapshots").join(name))
    }

    /// The copy of `snapshot`, whichever filesystem it was taken of.
    fn find_snapshot(&self, snapshot: u64) -> Option<PathBuf> {
        std::fs::read_dir(self.root.join("snapshots"))
            .ok()?
            .flatten()
            .map(|e| e.path().join(snapshot.to_string()))
            .find(|p| p.is_dir())
    }

    pub fn create(&self, export: &str) -> Result<()> {
        std::fs::create_dir_all(self.export_dir(export)?)?;
        Ok(())
    }

    /// Copies the export's content as it is now.
    pub fn snapshot(&self, export: &str, snapshot: u64) -> Result<()> {
        let to = self.snapshots_of(export)?.join(snapshot.to_string());
        let _ = std::fs::remove_dir_all(&to);
        copy_tree(&self.export_dir(export)?, &to)
    }

    /// A new export holding what the snapshot held.
    pub fn restore(&self, snapshot: u64, export: &str) -> Result<()> {
        let to = self.export_dir(export)?;
        let _ = std::fs::remove_dir_all(&to);
        match self.find_snapshot(snapshot) {
            Some(from) => copy_tree(&from, &to),
            None => std::fs::create_dir_all(&to).map_err(Error::from),
        }
    }

    /// Removes the export and every snapshot copy taken of it.
    pub fn remove(&self, export: &str) -> Result<()> {
        for dir in [self.export_dir(export)?, self.snapshots_of(export)?] {
            match std::fs::remove_dir_all(dir) {
                Err(e) if e.kind() != std::io::ErrorKind::NotFound => return Err(e.into()),
                _ => {}
            }
        }
        Ok(())
    }

    pub fn remove_snapshot(&self, snapshot: u64) {
        if let Some(dir) = self.find_snapshot(snapshot) {
            let _ = std::fs::remove_dir_all(&dir);
            // The filesystem's directory goes with its last snapshot.
            if let Some(parent) = dir.parent() {
                let _ = std::fs::remove_dir(parent);
            }
        }
    }
}

fn copy_tree(from: &Path, to: &Path) -> Result<()> {
    std::fs::create_dir_all(to)?;
    for entry in std::fs::read_dir(from)? {
        let entry = entry?;
        let kind = entry.file_type()?;
        let dest = to.join(entry.file_name());
        if kind.is_dir() {
            copy_tree(&entry.path(), &dest)?;
        } else if kind.is_symlink() {
            std::os::unix::fs::symlink(std::fs::read_link(entry.path())?, &dest)?;
        } else {
            std::fs::copy(entry.path(), &dest)?;
        }
    }
    Ok(())
}

/// The node's mounter in `dev` mode: NFS mounts become bind mounts of the
/// export directories; everything it mounted is unmounted when it is dropped.
pub struct DevMounter {
    real: LinuxMounter,
    exports: std::sync::Arc<Exports>,
    mounted: Mutex<Vec<PathBuf>>,
}

impl DevMounter {
    pub fn new(real: LinuxMounter, exports: std::sync::Arc<Exports>) -> DevMounter {
        DevMounter {
            real,
            exports,
            mounted: Mutex::new(Vec::new()),
        }
    }

    fn record(&self, target: &Path) {
        let mut mounted = lock(&self.mounted);
        if !mounted.iter().any(|m| m == target) {
            mounted.push(target.to_path_buf());
        }
    }

    /// Unmounts everything this mounter mounted, newest first.
    pub fn unmount_all(&self) {
        let targets: Vec<PathBuf> = std::mem::take(&mut *lock(&self.mounted));
        for target in targets.iter().rev() {
            // Stacked mounts come off one layer per unmount; the bound keeps
            // a confused mount table from spinning forever.
            for _ in 0..8 {
                if !self.real.is_mount_point(target).unwrap_or(false) {
                    break;
                }
                if let Err(e) = self.real.unmount(target) {
                    log::warn!("dev: unmount {}: {e}", target.display());
                    break;
                }
            }
        }
    }
}

impl Mounter for DevMounter {
    fn mount_nfs4(
        &self,
        source: &str,
        target: &Path,
        options: &[String],
    ) -> Result<(), NfsMountError> {
        let dir = self.exports.dir_of(source)?;
        if !dir.is_dir() {
            return Err(Error::Internal(format!(
                "mount.nfs4: mounting {source} failed, reason given by server: No such file or directory"
            ))
            .into());
        }
        log::debug!(
            "dev: NFS {source} (options {options:?}) emulated by binding {}",
            dir.display()
        );
        let flags: Vec<String> = options
            .iter()
            .filter(|o| o.as_str() == "ro")
            .cloned()
            .collect();
        self.real.bind(&dir, target, &flags)?;
        self.record(target);
        Ok(())
    }

    fn bind(&self, source: &Path, target: &Path, flags: &[String]) -> Result<()> {
        self.real.bind(source, target, flags)?;
        self.record(target);
        Ok(())
    }

    fn remount_readonly(&self, target: &Path) -> Result<()> {
        self.real.remount_readonly(target)
    }

    fn unmount(&self, target: &Path) -> Result<()> {
        self.real.unmount(target)
    }

    fn mount_table(&self) -> Result<MountTable> {
        self.real.mount_table()
    }

    fn statvfs(&self, path: &Path) -> Result<FsStats, StatvfsError> {
        self.real.statvfs(path)
    }
}

impl Drop for DevMounter {
    fn drop(&mut self) {
        self.unmount_all();
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn export_dirs_follow_the_export_path_not_the_host() {
        let e = Exports {
            root: PathBuf::from("/state"),
        };
        assert_eq!(
            e.dir_of("space.nfs.us-dev.example:/pvc-1").unwrap(),
            PathBuf::from("/state/exports/pvc-1")
        );
        assert_eq!(
            e.dir_of("[2001:db8::1]:/pvc-1").unwrap(),
            PathBuf::from("/state/exports/pvc-1")
        );
        for bad in ["nohost", "h:/", "h:/a/b", "h:/..", "h:", ""] {
            assert!(e.dir_of(bad).is_err(), "{bad:?}");
        }
    }

    #[test]
    fn snapshot_and_restore_copy_content_at_snapshot_time() {
        let root = std::env::temp_dir().join(format!("exports-test-{}", std::process::id()));
        let e = Exports::new(&root).unwrap();
        e.create("/a").unwrap();
        std::fs::write(e.dir_of("h:/a").unwrap().join("f"), "one").unwrap();
        e.snapshot("/a", 9).unwrap();
        std::fs::write(e.dir_of("h:/a").unwrap().join("f"), "two").unwrap();
        e.restore(9, "/b").unwrap();
        assert_eq!(
            std::fs::read_to_string(e.dir_of("h:/b").unwrap().join("f")).unwrap(),
            "one"
        );
        e.remove("/a").unwrap();
        e.remove("/a").unwrap();
        assert!(!e.dir_of("h:/a").unwrap().exists());
        assert!(
            e.find_snapshot(9).is_none(),
            "a snapshot outlived its filesystem"
        );
        std::fs::remove_dir_all(root).unwrap();
    }

    #[test]
    fn deleting_a_snapshot_keeps_the_others() {
        let root = std::env::temp_dir().join(format!("exports-snap-test-{}", std::process::id()));
        let e = Exports::new(&root).unwrap();
        e.create("/a").unwrap();
        e.snapshot("/a", 1).unwrap();
        e.snapshot("/a", 2).unwrap();
        e.remove_snapshot(1);
        e.remove_snapshot(1);
        assert!(e.find_snapshot(1).is_none());
        assert!(e.find_snapshot(2).is_some());
        e.remove_snapshot(2);
        assert_eq!(
            std::fs::read_dir(root.join("snapshots")).unwrap().count(),
            0
        );
        std::fs::remove_dir_all(root).unwrap();
    }
}
