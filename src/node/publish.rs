//! NodePublishVolume and NodeUnpublishVolume: binding the staged NFS mount
//! into a pod's target path, read-only when asked, and taking it away again.
//! This path runs once per pod start, so it spawns no helper and reads the
//! mount table once (twice for read-only, to verify the result). It must
//! never unmount or remove the staging path: other pods share it.

use super::{
    absolute_path, cleanup_mount_point, create_dir, mount_capability, required, NodePlugin,
};
use crate::proto::csi;
use crate::proto::csi::volume_capability::access_mode::Mode;
use crate::{Error, Result};
use std::path::PathBuf;

/// A validated NodePublishVolume request.
#[derive(Debug)]
struct PublishRequest {
    staging: PathBuf,
    target: PathBuf,
    flags: Vec<String>,
    readonly: bool,
}

impl PublishRequest {
    fn parse(req: &csi::NodePublishVolumeRequest) -> Result<PublishRequest> {
        required(&req.volume_id, "volume ID is not set")?;
        let staging = absolute_path(&req.staging_target_path, "staging target path is not set")?;
        let target = absolute_path(&req.target_path, "target path is not set")?;
        let capability = req.volume_capability.as_ref();
        let mount = mount_capability(capability)?;
        // Cleanup after a failed publish unmounts the target; were it the
        // staging path, that would tear down every pod's view of the volume.
        if staging == target {
            return Err(Error::InvalidArgument(
                "target path must differ from the staging target path".into(),
            ));
        }
        let reader_only = capability
            .and_then(|c| c.access_mode.as_ref())
            .map(|m| m.mode.enum_value_or_default())
            .is_some_and(|mode| {
                matches!(
                    mode,
                    Mode::SINGLE_NODE_READER_ONLY | Mode::MULTI_NODE_READER_ONLY
                )
            });
        Ok(PublishRequest {
            staging,
            target,
            flags: mount.mount_flags.clone(),
            readonly: req.readonly || reader_only,
        })
    }
}

impl NodePlugin {
    pub(super) fn publish(
        &self,
        req: &csi::NodePublishVolumeRequest,
    ) -> Result<csi::NodePublishVolumeResponse> {
        let r = PublishRequest::parse(req)?;
        let _guard = self.targets.try_lock(&r.target.to_string_lossy())?;
        let table = self.mounter.mount_table()?;
        if table.find(&r.target).is_some() {
            return Ok(csi::NodePublishVolumeResponse::new());
        }
        // Binding an unstaged directory would hand the pod node-local disk
        // that silently looks like the volume.
        if table.find(&r.staging).is_none() {
            return Err(Error::FailedPrecondition(format!(
                "staging target path {} is not mounted: the volume is not staged",
                r.staging.display()
            )));
        }
        drop(table);
        create_dir(&r.target)?;
        if let Err(e) = self.bind_target(&r) {
            if let Err(cleanup) = cleanup_mount_point(self.mounter.as_ref(), &r.target) {
                log::error!(
                    "cleaning up {} after a failed publish: {cleanup}",
                    r.target.display()
                );
            }
            return Err(Error::Internal(format!(
                "NodePublishVolume could not mount {} at {}: {}",
                r.staging.display(),
                r.target.display(),
                e.message()
            )));
        }
        Ok(csi::NodePublishVolumeResponse::new())
    }

    fn bind_target(&self, r: &PublishRequest) -> Result<()> {
        self.mounter.bind(&r.staging, &r.target, &r.flags)?;
        if r.readonly {
            self.mounter.remount_readonly(&r.target)?;
            // A pod that asked for read-only must never get a writable view,
            // so the kernel's own account is checked rather than trusted.
            let table = self.mounter.mount_table()?;
            if !table.find(&r.target).is_some_and(|e| e.is_read_only()) {
                return Err(Error::Internal(
                    "the mount is not read-only after remount".into(),
                ));
            }
        }
        Ok(())
    }

    pub(super) fn unpublish(
        &self,
        req: &csi::NodeUnpublishVolumeRequest,
    ) -> Result<csi::NodeUnpublishVolumeResponse> {
        required(&req.volume_id, "volume ID is not set")?;
        let target = absolute_path(&req.target_path, "target path is not set")?;
        let _guard = self.targets.try_lock(&target.to_string_lossy())?;
        cleanup_mount_point(self.mounter.as_ref(), &target).map_err(|e| {
            Error::Internal(format!(
                "NodeUnpublishVolume could not unmount {}: {}",
                target.display(),
                e.message()
            ))
        })?;
        Ok(csi::NodeUnpublishVolumeResponse::new())
    }
}
