//! NodeGetVolumeStats: the `statvfs` figures of the volume mounted at the
//! path kubelet names, as CSI usage, and the volume's condition
//! (VOLUME_CONDITION). Polled every minute per volume, so it takes no lock
//! and does nothing beyond one mount-table read and one bounded `statvfs`
//! (`health`). A mount that is stale, failing or hung is an abnormal
//! condition, not an error: kubelet turns the condition into a pod event,
//! while an error only reaches its log.

use super::health::Health;
use super::input::{absolute_path, required, shown, volume_id, well_formed_path};
use super::NodePlugin;
use crate::mount::FsStats;
use crate::proto::csi;
use crate::proto::csi::volume_usage::Unit;
use crate::{Error, Result};
use std::path::PathBuf;

impl NodePlugin {
    pub(super) fn stats(
        &self,
        req: &csi::NodeGetVolumeStatsRequest,
    ) -> Result<csi::NodeGetVolumeStatsResponse> {
        let path = parse_stats(req)?;
        // statvfs of a directory nothing is mounted on would report the
        // node's own disk as the volume.
        let mounted = self
            .mounter
            .mount_table()
            .map_err(|e| e.context("failed to get stats"))?
            .find(&path)
            .is_some();
        if !mounted {
            return Err(Error::NotFound(format!(
                "volume path not found: nothing is mounted at {}",
                path.display()
            )));
        }
        let mut resp = csi::NodeGetVolumeStatsResponse::new();
        let mut condition = csi::VolumeCondition::new();
        match self.probe(&path)? {
            Health::Healthy(stats) => {
                resp.usage = usage(&stats);
                condition.message = "mounted and responding".into();
            }
            Health::Unhealthy(sick) => {
                let message = sick.message();
                log::warn!(
                    "volume {} at {}: abnormal: {message}",
                    req.volume_id,
                    path.display()
                );
                // kubelet drops a response without usage, and the condition
                // with it; zeros say "unknown" without tripping fill alerts
                // (available / capacity is 0 / 0).
                resp.usage = usage(&FsStats::default());
                condition.abnormal = true;
                condition.message = message;
            }
        }
        resp.volume_condition = Some(condition).into();
        Ok(resp)
    }
}

/// A validated NodeGetVolumeStats request: the volume path.
pub(crate) fn parse_stats(req: &csi::NodeGetVolumeStatsRequest) -> Result<PathBuf> {
    volume_id(&req.volume_id)?;
    let raw = required(&req.volume_path, "volume path is not set")?;
    let path = well_formed_path(raw, "volume path")?;
    // kubelet only ever sends absolute paths; a relative one cannot name
    // a published volume, which CSI reports as NotFound (csi-sanity
    // checks exactly that with `some/path`).
    if !path.is_absolute() {
        return Err(Error::NotFound(format!(
            "volume path not found: {} is not absolute",
            shown(raw)
        )));
    }
    if !req.staging_target_path.is_empty() {
        absolute_path(&req.staging_target_path, "staging target path")?;
    }
    Ok(path)
}

/// Bytes (available to unprivileged users, total, used) and inodes.
pub(super) fn usage(s: &FsStats) -> Vec<csi::VolumeUsage> {
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
pub(super) mod tests {
    use super::*;

    /// A filesystem of 4 KiB fragments, partly used; the node's tests
    /// answer statvfs with it too.
    pub(in crate::node) const FIGURES: FsStats = FsStats {
        fragment_size: 4096,
        blocks: 100,
        blocks_free: 40,
        blocks_available: 30,
        files: 1000,
        files_free: 900,
    };

    #[test]
    fn usage_is_computed_in_fragment_units_and_saturates() {
        let s = FIGURES;
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
