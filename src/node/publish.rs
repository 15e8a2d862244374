//! NodePublishVolume and NodeUnpublishVolume: binding the staged NFS mount
//! into a pod's target path, read-only when asked, and taking it away again.
//! A staging mount that went stale, disconnected or missing is mended first
//! (`stage::heal_staging`), so a new pod never binds a dead mount; the
//! check and the bind share the volume's lock, which a remount takes alone.
//! This path runs once per pod start, so it spawns no helper and reads the
//! mount table once (more for read-only, to keep flags and verify the
//! result). A repeat is answered from the mount table, checking that the
//! target holds this staging mount with the asked-for writability. It must
//! never unmount or remove the staging path: other pods share it.

use super::input::{absolute_path, volume_id};
use super::{cleanup_mount_point, create_dir, mount_capability, mount_flags, NodePlugin};
use crate::proto::csi;
use crate::proto::csi::volume_capability::access_mode::Mode;
use crate::{Error, Result};
use std::path::PathBuf;

/// A validated NodePublishVolume request.
#[derive(Debug)]
pub(crate) struct PublishRequest {
    staging: PathBuf,
    target: PathBuf,
    flags: Vec<String>,
    readonly: bool,
    /// SINGLE_NODE_SINGLE_WRITER: one target on this node at most.
    single_writer: bool,
}

impl PublishRequest {
    pub(crate) fn parse(req: &csi::NodePublishVolumeRequest) -> Result<PublishRequest> {
        volume_id(&req.volume_id)?;
        let staging = absolute_path(&req.staging_target_path, "staging target path")?;
        let target = absolute_path(&req.target_path, "target path")?;
        let capability = req.volume_capability.as_ref();
        let mount = mount_capability(capability)?;
        // Cleanup after a failed publish unmounts the target; were it the
        // staging path, that would tear down every pod's view of the volume.
        if staging == target {
            return Err(Error::InvalidArgument(
                "target path must differ from the staging target path".into(),
            ));
        }
        let mode = capability
            .and_then(|c| c.access_mode.as_ref())
            .map(|m| m.mode.enum_value_or_default());
        let reader_only = matches!(
            mode,
            Some(Mode::SINGLE_NODE_READER_ONLY | Mode::MULTI_NODE_READER_ONLY)
        );
        Ok(PublishRequest {
            staging,
            target,
            flags: mount_flags(mount)?,
            readonly: req.readonly || reader_only,
            single_writer: mode == Some(Mode::SINGLE_NODE_SINGLE_WRITER),
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
        // Shared with the volume's other publishes, never with a remount of
        // its staging mount: the mount checked is the mount bound.
        let mut _staged = self.staging_in_use.try_share(&req.volume_id)?;
        if self.staging_fault(&req.volume_id, &r.staging)?.is_some() {
            drop(_staged);
            self.heal_staging(req)?;
            _staged = self.staging_in_use.try_share(&req.volume_id)?;
        }
        let table = self.mounter.mount_table()?;
        // Binding an unstaged directory would hand the pod node-local disk
        // that silently looks like the volume.
        let Some(staged) = table.find(&r.staging) else {
            return Err(Error::FailedPrecondition(format!(
                "staging target path {} is not mounted: the volume is not staged",
                r.staging.display()
            )));
        };
        if let Some(existing) = table.find(&r.target) {
            // A repeat: answer only if what is there is what was asked for.
            if existing.device != staged.device || existing.root != staged.root {
                return Err(Error::AlreadyExists(format!(
                    "target path {} is already mounted from {} ({}), not from the staging path {}",
                    r.target.display(),
                    existing.source,
                    existing.root.display(),
                    r.staging.display()
                )));
            }
            match (r.readonly, existing.is_read_only()) {
                (false, true) => {
                    return Err(Error::AlreadyExists(format!(
                        "target path {} is already published read-only; a writable publish was requested",
                        r.target.display()
                    )))
                }
                // An earlier attempt bound the target and died before the
                // read-only remount: finish it rather than hand out a
                // writable view.
                (true, false) => {
                    drop(table);
                    self.read_only_or_cleanup(&r)?;
                }
                _ => {}
            }
            return Ok(csi::NodePublishVolumeResponse::new());
        }
        if r.single_writer {
            // The CSI rule for this mode: refused before the target exists.
            if let Some(other) = table
                .same_as(staged)
                .find(|e| e.mount_point != r.staging && e.mount_point != r.target)
            {
                return Err(Error::FailedPrecondition(format!(
                    "volume {} is SINGLE_NODE_SINGLE_WRITER and already published at {}",
                    req.volume_id,
                    other.mount_point.display()
                )));
            }
        }
        drop(table);
        create_dir(&r.target)?;
        self.mounter
            .bind(&r.staging, &r.target, &r.flags)
            .map_err(|e| self.failed_publish(&r, e))?;
        if r.readonly {
            self.read_only_or_cleanup(&r)?;
        }
        Ok(csi::NodePublishVolumeResponse::new())
    }

    /// Remounts the target read-only and checks the kernel's own account of
    /// it: a pod that asked for read-only must never get a writable view,
    /// so on any failure the target is taken away again.
    fn read_only_or_cleanup(&self, r: &PublishRequest) -> Result<()> {
        let made = self.mounter.remount_readonly(&r.target).and_then(|()| {
            let table = self.mounter.mount_table()?;
            if table.find(&r.target).is_some_and(|e| e.is_read_only()) {
                Ok(())
            } else {
                Err(Error::Internal(
                    "the mount is not read-only after remount".into(),
                ))
            }
        });
        made.map_err(|e| self.failed_publish(r, e))
    }

    /// Cleans up the TARGET only (never the staging mount other pods share)
    /// and words the error.
    fn failed_publish(&self, r: &PublishRequest, e: Error) -> Error {
        if let Err(cleanup) = cleanup_mount_point(self.mounter.as_ref(), &r.target, None) {
            log::error!(
                "cleaning up {} after a failed publish: {cleanup}",
                r.target.display()
            );
        }
        Error::Internal(format!(
            "NodePublishVolume could not mount {} at {}: {}",
            r.staging.display(),
            r.target.display(),
            e.message()
        ))
    }

    pub(super) fn unpublish(
        &self,
        req: &csi::NodeUnpublishVolumeRequest,
    ) -> Result<csi::NodeUnpublishVolumeResponse> {
        let target = parse_unpublish(req)?;
        let _guard = self.targets.try_lock(&target.to_string_lossy())?;
        cleanup_mount_point(self.mounter.as_ref(), &target, None).map_err(|e| {
            Error::Internal(format!(
                "NodeUnpublishVolume could not unmount {}: {}",
                target.display(),
                e.message()
            ))
        })?;
        Ok(csi::NodeUnpublishVolumeResponse::new())
    }
}

/// A validated NodeUnpublishVolume request: its target path.
pub(crate) fn parse_unpublish(req: &csi::NodeUnpublishVolumeRequest) -> Result<PathBuf> {
    volume_id(&req.volume_id)?;
    absolute_path(&req.target_path, "target path")
}
