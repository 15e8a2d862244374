//! `dev` mode's stand-in for NFS: every filesystem the fake Linode API makes
//! active gets a directory under the state dir, a snapshot copies it, a
//! clone copies the snapshot back, deleting the filesystem removes it; and
//! the node's "NFS mount" is a bind mount of that directory. Only the NFS
//! step is emulated: bind, remount, unmount and stats go to the real
//! `LinuxMounter`, as in production.

use crate::mount::{FsStats, LinuxMounter, MountTable, Mounter};
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

    fn snapshot_dir(&self, snapshot: u64) -> PathBuf {
        self.root.join("snapshots").join(snapshot.to_string())
    }

    pub fn create(&self, export: &str) -> Result<()> {
        std::fs::create_dir_all(self.export_dir(export)?)?;
        Ok(())
    }

    /// Copies the export's content as it is now.
    pub fn snapshot(&self, export: &str, snapshot: u64) -> Result<()> {
        let to = self.snapshot_dir(snapshot);
        let _ = std::fs::remove_dir_all(&to);
        copy_tree(&self.export_dir(export)?, &to)
    }

    /// A new export holding what the snapshot held.
    pub fn restore(&self, snapshot: u64, export: &str) -> Result<()> {
        let to = self.export_dir(export)?;
        let _ = std::fs::remove_dir_all(&to);
        let from = self.snapshot_dir(snapshot);
        if from.exists() {
            copy_tree(&from, &to)
        } else {
            std::fs::create_dir_all(&to).map_err(Error::from)
        }
    }

    pub fn remove(&self, export: &str) -> Result<()> {
        match std::fs::remove_dir_all(self.export_dir(export)?) {
            Err(e) if e.kind() != std::io::ErrorKind::NotFound => Err(e.into()),
            _ => Ok(()),
        }
    }

    pub fn remove_snapshot(&self, snapshot: u64) {
        let _ = std::fs::remove_dir_all(self.snapshot_dir(snapshot));
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
        let mut mounted = self.mounted.lock().unwrap_or_else(|p| p.into_inner());
        if !mounted.iter().any(|m| m == target) {
            mounted.push(target.to_path_buf());
        }
    }

    /// Unmounts everything this mounter mounted, newest first.
    pub fn unmount_all(&self) {
        let targets: Vec<PathBuf> =
            std::mem::take(&mut *self.mounted.lock().unwrap_or_else(|p| p.into_inner()));
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
    fn mount_nfs4(&self, source: &str, target: &Path, options: &[String]) -> Result<()> {
        let dir = self.exports.dir_of(source)?;
        if !dir.is_dir() {
            return Err(Error::Internal(format!(
                "mount.nfs4: mounting {source} failed, reason given by server: No such file or directory"
            )));
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

    fn statvfs(&self, path: &Path) -> Result<FsStats> {
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
        std::fs::remove_dir_all(root).unwrap();
    }
}
