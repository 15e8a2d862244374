//! Whether a mount works: one bounded `statvfs` of it (`mount::probe`: a
//! dead server costs one thread per path, never the worker pool; the stuck
//! ones are the `csi_node_statvfs_stuck` gauge). NodeGetVolumeStats
//! reports what this finds as a condition; stage and publish heal a staging
//! mount it finds stale or disconnected. It never mounts or unmounts.

use super::NodePlugin;
use crate::metrics::Remount;
use crate::mount::probe::Probed;
use crate::mount::{FsStats, StatvfsError};
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
        let result = match self.probes.probe(&self.mounter, path) {
            Ok(Probed::Answered(result)) => result,
            Ok(Probed::Hung { earlier: true }) => {
                return Ok(Health::Unhealthy(Sick::Hung(format!(
                    "an earlier statvfs of {} has not returned: {not_answering}",
                    path.display()
                ))))
            }
            Ok(Probed::Hung { earlier: false }) => {
                return Ok(Health::Unhealthy(Sick::Hung(format!(
                    "statvfs of {} did not return within {:?}: {not_answering}",
                    path.display(),
                    self.probes.timeout()
                ))))
            }
            Err(e) => return Err(e.context("failed to get stats")),
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
