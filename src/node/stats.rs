//! NodeGetVolumeStats: the `statvfs` figures of the path kubelet names, as
//! CSI usage. Polled every minute per volume, so it takes no lock and does
//! nothing beyond the one `statvfs`. On a hard NFS mount whose server is
//! gone `statvfs` never returns, so it runs on a thread of its own with a
//! bound, and a path whose last `statvfs` is still stuck is not asked again:
//! a dead server costs one thread, never the worker pool.

use super::{absolute_path, required, NodePlugin};
use crate::mount::{FsStats, Mounter};
use crate::proto::csi;
use crate::proto::csi::volume_usage::Unit;
use crate::{Error, Result};

impl NodePlugin {
    pub(super) fn stats(
        &self,
        req: &csi::NodeGetVolumeStatsRequest,
    ) -> Result<csi::NodeGetVolumeStatsResponse> {
        required(&req.volume_id, "volume ID is not set")?;
        let raw = required(&req.volume_path, "volume path is not set")?;
        // kubelet only ever sends absolute paths; a relative one cannot name
        // a published volume, which CSI reports as NotFound.
        let path = absolute_path(&raw, "volume path is not set").map_err(|_| {
            Error::NotFound(format!("volume path not found: {raw:?} is not absolute"))
        })?;
        let stats = self.bounded_statvfs(&path).map_err(|e| match e {
            Error::NotFound(m) => Error::NotFound(format!("volume path not found: {m}")),
            other => Error::Internal(format!("failed to get stats: {}", other.message())),
        })?;
        let mut resp = csi::NodeGetVolumeStatsResponse::new();
        resp.usage = usage(&stats);
        Ok(resp)
    }
}

impl NodePlugin {
    fn bounded_statvfs(&self, path: &std::path::Path) -> Result<FsStats> {
        {
            let mut pending = self.stats_pending.lock().unwrap_or_else(|p| p.into_inner());
            if pending.contains(path) {
                return Err(Error::Internal(format!(
                    "an earlier statvfs of {} has not returned: is the NFS server reachable?",
                    path.display()
                )));
            }
            pending.insert(path.to_path_buf());
        }
        let (tx, rx) = std::sync::mpsc::channel();
        let (mounter, pending, owned) = (
            self.mounter.clone(),
            self.stats_pending.clone(),
            path.to_path_buf(),
        );
        std::thread::Builder::new()
            .name("statvfs".into())
            .spawn(move || {
                let result = Mounter::statvfs(mounter.as_ref(), &owned);
                pending
                    .lock()
                    .unwrap_or_else(|p| p.into_inner())
                    .remove(&owned);
                let _ = tx.send(result);
            })
            .map_err(|e| {
                // Nothing will ever clear the mark: clear it here, or the
                // path could never be asked about again.
                self.stats_pending
                    .lock()
                    .unwrap_or_else(|p| p.into_inner())
                    .remove(path);
                Error::Internal(format!("spawn statvfs thread: {e}"))
            })?;
        rx.recv_timeout(self.stats_timeout).unwrap_or_else(|_| {
            Err(Error::Internal(format!(
                "statvfs of {} did not return within {:?}",
                path.display(),
                self.stats_timeout
            )))
        })
    }
}

/// Bytes (available to unprivileged users, total, used) and inodes.
fn usage(s: &FsStats) -> Vec<csi::VolumeUsage> {
    let bytes = |blocks: u64| clamp(blocks.saturating_mul(s.fragment_size));
    let entry = |unit: Unit, available: i64, total: i64, used: i64| {
        let mut u = csi::VolumeUsage::new();
        u.unit = unit.into();
        u.available = available;
        u.total = total;
        u.used = used;
        u
    };
    vec![
        entry(
            Unit::BYTES,
            bytes(s.blocks_available),
            bytes(s.blocks),
            bytes(s.blocks.saturating_sub(s.blocks_free)),
        ),
        entry(
            Unit::INODES,
            clamp(s.files_free),
            clamp(s.files),
            clamp(s.files.saturating_sub(s.files_free)),
        ),
    ]
}

fn clamp(v: u64) -> i64 {
    i64::try_from(v).unwrap_or(i64::MAX)
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn usage_is_computed_in_fragment_units_and_saturates() {
        let s = FsStats {
            fragment_size: 4096,
            blocks: 100,
            blocks_free: 40,
            blocks_available: 30,
            files: 1000,
            files_free: 900,
        };
        let u = usage(&s);
        assert_eq!(u[0].unit.enum_value_or_default(), Unit::BYTES);
        assert_eq!(
            (u[0].available, u[0].total, u[0].used),
            (30 * 4096, 100 * 4096, 60 * 4096)
        );
        assert_eq!(u[1].unit.enum_value_or_default(), Unit::INODES);
        assert_eq!((u[1].available, u[1].total, u[1].used), (900, 1000, 100));

        let huge = FsStats {
            fragment_size: u64::MAX,
            blocks: u64::MAX,
            ..s
        };
        assert_eq!(usage(&huge)[0].total, i64::MAX);
    }
}
