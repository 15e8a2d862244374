//! Whether a mount works: one `statvfs` of it, bounded. On a hard NFS mount
//! whose server is gone `statvfs` never returns, so it runs on a thread of
//! its own with a bound, and a path whose last `statvfs` is still stuck is
//! not asked again: a dead server costs one thread, never the worker pool
//! (the stuck ones are the `csi_node_statvfs_stuck` gauge). NodeGetVolumeStats
//! reports what this finds as a condition; stage and publish heal a staging
//! mount it finds stale or disconnected. It never mounts or unmounts.

use super::NodePlugin;
use crate::bounded;
use crate::metrics::Remount;
use crate::mount::{FsStats, Mounter, StatvfsError};
use crate::mutex::lock;
use crate::{Error, Result};
use std::path::Path;

/// What a bounded `statvfs` of a mount found.
pub(super) enum Health {
    Healthy(FsStats),
    Unhealthy(Sick),
}

/// How a mount that is there does not work; each names the cause.
pub(super) enum Sick {
    /// ESTALE: the server no longer knows the mount's file handle.
    Stale(String),
    /// EIO or ENOTCONN: the server or the way to it fails.
    Disconnected(String),
    /// `statvfs` did not return within the bound, or an earlier one still
    /// has not: the server does not answer. Nothing can be done to such a
    /// mount from here without hanging too.
    Hung(String),
}

impl Sick {
    pub(super) fn message(self) -> String {
        match self {
            Sick::Stale(m) => format!(
                "stale NFS file handle: the server no longer recognises this mount (was the filesystem recreated or restored?); it must be unmounted and mounted again: {m}"
            ),
            Sick::Disconnected(m) => {
                format!("I/O error: the NFS server or the network to it is failing: {m}")
            }
            Sick::Hung(m) => m,
        }
    }

    /// Why a mount this sick is replaced, or `None` when it cannot be.
    pub(super) fn remount(&self) -> Option<Remount> {
        match self {
            Sick::Stale(_) => Some(Remount::Stale),
            Sick::Disconnected(_) => Some(Remount::Disconnected),
            Sick::Hung(_) => None,
        }
    }
}

impl NodePlugin {
    /// The health of the mount at `path`. NotFound when nothing is there
    /// any more; Internal for a failure that says nothing of the mount.
    pub(super) fn probe(&self, path: &Path) -> Result<Health> {
        let not_answering = "the NFS server is not answering";
        {
            let mut pending = lock(&self.stats_pending);
            if pending.contains_key(path) {
                return Ok(Health::Unhealthy(Sick::Hung(format!(
                    "an earlier statvfs of {} has not returned: {not_answering}",
                    path.display()
                ))));
            }
            pending.insert(path.to_path_buf(), false);
        }
        let (mounter, pending, owned) = (
            self.mounter.clone(),
            self.stats_pending.clone(),
            path.to_path_buf(),
        );
        let answered = bounded::within("statvfs", self.stats_timeout, move || {
            let result = Mounter::statvfs(mounter.as_ref(), &owned);
            lock(&pending).remove(&owned);
            result
        })
        .map_err(|e| {
            // Nothing will ever clear the mark: clear it here, or the
            // path could never be asked about again.
            lock(&self.stats_pending).remove(path);
            Error::Internal(format!("failed to get stats: spawn statvfs thread: {e}"))
        })?;
        let Some(result) = answered else {
            // Still running (unless it ended just now, which removed it).
            if let Some(stuck) = lock(&self.stats_pending).get_mut(path) {
                *stuck = true;
            }
            return Ok(Health::Unhealthy(Sick::Hung(format!(
                "statvfs of {} did not return within {:?}: {not_answering}",
                path.display(),
                self.stats_timeout
            ))));
        };
        match result {
            Ok(stats) => Ok(Health::Healthy(stats)),
            Err(StatvfsError::Stale(m)) => Ok(Health::Unhealthy(Sick::Stale(m))),
            Err(StatvfsError::Io(m)) => Ok(Health::Unhealthy(Sick::Disconnected(m))),
            // Unmounted and removed since the mount table was read.
            Err(StatvfsError::Missing(m)) => {
                Err(Error::NotFound(format!("volume path not found: {m}")))
            }
            Err(StatvfsError::Other(m)) => {
                Err(Error::Internal(format!("failed to get stats: {m}")))
            }
        }
    }
}
