//! The node's and the controller's mounter in `dev` mode: an NFS mount of
//! an export becomes a bind mount of its directory (`exports`) or, with
//! `DEV_NFS_LATENCY`, a FUSE mount of it served across an emulated
//! network (`network`), which answers within `NFS_MOUNT_TIMEOUT` or fails
//! as `mount.nfs4` does against a server that does not answer. Bind,
//! remount, unmount and stats go to the real `LinuxMounter`, as in
//! production; everything it mounted is unmounted when it is dropped. It
//! must not change what the driver asks of a mount, only what serves it.

use super::exports::Exports;
use super::network::{self, Network};
use crate::mount::linux::mount_fuse;
use crate::mount::{
    FsStats, LinuxMounter, MountTable, Mounter, NfsMount, NfsMountError, StatvfsError,
};
use crate::mutex::lock;
use crate::{Error, Result};
use std::path::{Path, PathBuf};
use std::sync::atomic::{AtomicBool, Ordering};
use std::sync::{mpsc, Arc, Mutex};
use std::time::Duration;

pub struct DevMounter {
    real: LinuxMounter,
    exports: Arc<Exports>,
    /// The emulated network NFS mounts are served across, if any, and how
    /// long a new one may take to answer (`NFS_MOUNT_TIMEOUT`).
    network: Option<(Network, Duration)>,
    mounted: Mutex<Vec<PathBuf>>,
    /// Set by `unmount_all`: nothing mounts any more (an upkeep round or a
    /// fill job still running would otherwise remount a parent while the
    /// state directory is being removed).
    closed: AtomicBool,
}

impl DevMounter {
    pub fn new(real: LinuxMounter, exports: Arc<Exports>) -> DevMounter {
        DevMounter {
            real,
            exports,
            network: None,
            mounted: Mutex::new(Vec::new()),
            closed: AtomicBool::new(false),
        }
    }

    /// This mounter, serving NFS mounts across `network`; a mount whose
    /// server does not answer within `timeout` fails.
    pub fn across(mut self, network: Network, timeout: Duration) -> DevMounter {
        self.network = Some((network, timeout));
        self
    }

    fn refuse_when_closed(&self) -> Result<()> {
        if self.closed.load(Ordering::SeqCst) {
            return Err(Error::Unavailable(
                "dev mode is stopping: nothing is mounted any more".into(),
            ));
        }
        Ok(())
    }

    fn record(&self, target: &Path) {
        let mut mounted = lock(&self.mounted);
        if !mounted.iter().any(|m| m == target) {
            mounted.push(target.to_path_buf());
        }
    }

    /// Unmounts everything this mounter mounted, newest first, and mounts
    /// nothing from then on.
    pub fn unmount_all(&self) {
        self.closed.store(true, Ordering::SeqCst);
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

    /// Serves `dir` at `target` across `network`, as `mount.nfs4` of
    /// `source` would mount it: it asks the server for the root before it
    /// returns, and a server that does not answer within `timeout` leaves
    /// nothing mounted.
    fn serve(
        &self,
        source: &str,
        dir: &Path,
        target: &Path,
        read_only: bool,
        (network, timeout): &(Network, Duration),
    ) -> Result<(), NfsMountError> {
        network::serve(dir, target, network, |at, data| {
            mount_fuse(at, data, read_only)
        })
        .map_err(|e| Error::Internal(format!("mount.nfs4: mounting {source} failed: {e}")))?;
        self.record(target);
        if answers_within(target, *timeout) {
            return Ok(());
        }
        if let Err(e) = self.real.detach(target) {
            log::warn!("dev: detach {}: {e}", target.display());
        }
        Err(Error::DeadlineExceeded(format!(
            "mount.nfs4: mounting {source}: the server did not answer within {timeout:?}"
        ))
        .into())
    }
}

/// Whether the root of the mount at `target` can be read within `timeout`.
/// A server that does not answer holds the thread that asked until it
/// does (or its mount is gone), as a hard NFS mount holds its caller.
fn answers_within(target: &Path, timeout: Duration) -> bool {
    let (done, answered) = mpsc::channel();
    let root = target.to_path_buf();
    let asked = std::thread::Builder::new()
        .name("nfs mount check".into())
        .spawn(move || {
            let _ = done.send(std::fs::metadata(&root).is_ok());
        });
    asked.is_ok() && answered.recv_timeout(timeout).unwrap_or(false)
}

impl Mounter for DevMounter {
    fn mount_nfs4(&self, mount: &NfsMount) -> Result<(), NfsMountError> {
        let (source, target, options) = (mount.source, mount.target, mount.options);
        self.refuse_when_closed()?;
        let dir = self.exports.mount_dir(source)?;
        let read_only = options.iter().any(|o| o == "ro");
        if let Some(network) = &self.network {
            log::debug!(
                "dev: NFS {source} (options {options:?}) served across the emulated network from {}",
                dir.display()
            );
            return self.serve(source, &dir, target, read_only, network);
        }
        log::debug!(
            "dev: NFS {source} (options {options:?}) emulated by binding {}",
            dir.display()
        );
        let flags: Vec<String> = options.iter().filter(|o| *o == "ro").cloned().collect();
        self.real.bind(&dir, target, &flags)?;
        self.record(target);
        Ok(())
    }

    fn bind(&self, source: &Path, target: &Path, flags: &[String]) -> Result<()> {
        self.refuse_when_closed()?;
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

    fn detach(&self, target: &Path) -> Result<()> {
        self.real.detach(target)
    }

    fn mount_table(&self) -> Result<MountTable> {
        self.real.mount_table()
    }

    /// A bind of an export directory that was removed (and perhaps made
    /// again) still answers `statvfs`; the kernel shows its root as
    /// `…//deleted`. That is what a restored or failed-over NFS export is
    /// to a real mount, ESTALE, and what dev mode reports. (An emulated
    /// server answers ESTALE itself.)
    fn statvfs(&self, path: &Path) -> Result<FsStats, StatvfsError> {
        let table = self
            .real
            .mount_table()
            .map_err(|e| StatvfsError::Other(e.to_string()))?;
        if let Some(entry) = table.find(path) {
            if entry.root.to_string_lossy().ends_with("//deleted") {
                return Err(StatvfsError::Stale(format!(
                    "statvfs {}: the emulated export {} was removed (ESTALE)",
                    path.display(),
                    entry.root.display()
                )));
            }
        }
        self.real.statvfs(path)
    }
}

impl Drop for DevMounter {
    fn drop(&mut self) {
        self.unmount_all();
    }
}
