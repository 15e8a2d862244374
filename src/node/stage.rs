//! NodeStageVolume and NodeUnstageVolume: assembling mount options
//! (capability flags plus the volume's mTLS mode), choosing among the
//! volume's NFS sources (for a directory of a shared filesystem, the same
//! sources with the directory's path appended), and the staging mount's
//! life. Reading the volume context is `context`'s, the volume's kind
//! `volume`'s; mounting itself goes through `Mounter`; nothing here calls
//! the kernel. The node never creates a volume's directory on the share: a
//! missing one fails the mount.

use super::context::{MountSources, MtlsMode, StageContext};
use super::health::Health;
use super::input::{absolute_path, volume_id};
use super::volume::{directory, Named};
use super::{cleanup_mount_point, create_dir, mount_capability, mount_flags, NodePlugin};
use crate::metrics::{self, Remount};
use crate::mount::{NfsMount, NfsMountError};
use crate::proto::csi;
use crate::{Error, Result};
use std::path::{Path, PathBuf};

/// A validated NodeStageVolume request.
#[derive(Debug)]
pub(crate) struct StageRequest {
    volume_id: String,
    staging: PathBuf,
    sources: MountSources,
    mtls: MtlsMode,
    /// The option lists to mount with, in order (see `MtlsMode::attempts`).
    attempts: Vec<Vec<String>>,
}

impl StageRequest {
    pub(crate) fn parse(req: &csi::NodeStageVolumeRequest) -> Result<StageRequest> {
        let volume_id = volume_id(&req.volume_id)?;
        let staging = absolute_path(&req.staging_target_path, "staging target path")?;
        let mount = mount_capability(req.volume_capability.as_ref())?;
        let context = StageContext::parse(&req.volume_context)?;
        let named = Named {
            space: &context.space_id,
            filesystem: &context.filesystem_id,
        };
        let sources = match directory(&volume_id, context.volume_type, named)? {
            Some(dir) => context.sources.within(&dir)?,
            None => context.sources,
        };
        let attempts = context.mtls.attempts(&mount_flags(mount)?)?;
        Ok(StageRequest {
            volume_id,
            staging,
            sources,
            mtls: context.mtls,
            attempts,
        })
    }
}

impl StageRequest {
    /// Every source this stage may mount (for `crate::fuzzing`'s checks).
    pub(crate) fn sources(&self) -> impl Iterator<Item = &str> {
        self.sources.all()
    }
}

impl NodePlugin {
    /// A mount helper killed at `NFS_MOUNT_TIMEOUT` fails the RPC with
    /// DeadlineExceeded rather than Internal: kubelet then treats the stage
    /// as possibly in progress (uncertain), keeps retrying, and still calls
    /// NodeUnstageVolume on teardown, while the mounter has already undone
    /// any mount the killed helper managed to make.
    pub(super) fn stage(
        &self,
        req: &csi::NodeStageVolumeRequest,
    ) -> Result<csi::NodeStageVolumeResponse> {
        let r = StageRequest::parse(req)?;
        let _guard = self.volumes.try_lock(&r.volume_id)?;
        let failed = |e: Error| {
            e.context(format!(
                "NodeStageVolume failed to stage volume {} at path {}",
                r.volume_id,
                r.staging.display()
            ))
        };
        self.stage_locked(&r).map_err(failed)?;
        Ok(csi::NodeStageVolumeResponse::new())
    }

    /// Stages `r` with its volume's lock held. Already staged and working:
    /// kubelet retries after lost replies, and a second NFS mount on top
    /// would stack, so the existing mount is kept as it is (a source that is
    /// none of this volume's is worth a warning for whoever debugs it).
    /// Staged but stale or disconnected: mounted again. Hung: Unavailable,
    /// never mounted over.
    fn stage_locked(&self, r: &StageRequest) -> Result<()> {
        let table = self.mounter.mount_table()?;
        if let Some(existing) = table.find(&r.staging) {
            if !r.sources.all().any(|s| s == existing.source) {
                log::warn!(
                    "volume {}: {} is already mounted from {} ({}), not {}; keeping it",
                    r.volume_id,
                    r.staging.display(),
                    existing.source,
                    existing.fs_type,
                    r.sources.primary
                );
            }
            drop(table);
            return match self.probe(&r.staging)? {
                Health::Healthy(_) => Ok(()),
                Health::Unhealthy(sick) => match sick.remount() {
                    Some(why) => self.remount(r, why),
                    None => Err(Error::Unavailable(sick.message())),
                },
            };
        }
        drop(table);
        create_dir(&r.staging)?;
        // Under the mount, where only a staging path that lost its mount
        // shows it (see `recorded`).
        let mark = r.staging.join(STAGED_MARK);
        std::fs::write(&mark, &r.volume_id)
            .map_err(|e| Error::Internal(format!("write {}: {e}", mark.display())))?;
        match self.mount_some_source(r) {
            Ok(source) => {
                log::info!(
                    "staged volume {} from {source} at {}",
                    r.volume_id,
                    r.staging.display()
                );
                Ok(())
            }
            Err(e) => {
                let _ = std::fs::remove_file(&mark);
                Err(e)
            }
        }
    }

    /// Mends the staging mount a publish binds from, which `staging_fault`
    /// found stale, disconnected, or gone while kubelet still has the
    /// volume staged (`recorded`): mounted again through the same path as a
    /// fresh stage, from the publish request (which carries all a stage
    /// does), once, with the volume held alone: a publish meanwhile is
    /// Aborted and, retried, finds the mount mended.
    pub(super) fn heal_staging(&self, req: &csi::NodePublishVolumeRequest) -> Result<()> {
        let mut stage = csi::NodeStageVolumeRequest::new();
        stage.volume_id = req.volume_id.clone();
        stage.staging_target_path = req.staging_target_path.clone();
        stage.volume_capability = req.volume_capability.clone();
        stage.volume_context = req.volume_context.clone();
        stage.publish_context = req.publish_context.clone();
        let r = StageRequest::parse(&stage)?;
        let _volume = self.volumes.try_lock(&r.volume_id)?;
        // Mended by another call since the first look?
        match self.staging_fault(&r.volume_id, &r.staging)? {
            None => Ok(()),
            Some(why) => self.remount(&r, why),
        }
    }

    /// What is wrong with the staging mount at `staging`: `None` when it
    /// works, or when nothing was ever staged there (for the publish to
    /// refuse). A hung one is Unavailable: it is never mounted over.
    pub(super) fn staging_fault(&self, volume_id: &str, staging: &Path) -> Result<Option<Remount>> {
        if !self.mounter.is_mount_point(staging)? {
            return Ok(recorded(staging, volume_id).then_some(Remount::Missing));
        }
        match self.probe(staging)? {
            Health::Healthy(_) => Ok(None),
            Health::Unhealthy(sick) => match sick.remount() {
                Some(why) => Ok(Some(why)),
                None => Err(Error::Unavailable(sick.message())),
            },
        }
    }

    /// Replaces the broken staging mount of `r`: detached lazily (pods on
    /// it keep it, and keep reporting it abnormal, until they restart),
    /// then mounted again as a fresh stage mounts it.
    pub(super) fn remount(&self, r: &StageRequest, why: Remount) -> Result<()> {
        let _alone = self.staging_in_use.try_lock(&r.volume_id)?;
        self.mounter.detach(&r.staging)?;
        let source = self.mount_some_source(r)?;
        metrics::staging_remounted(why);
        log::warn!(
            "volume {}: the staging mount at {} was {}; mounted it again from {source}",
            r.volume_id,
            r.staging.display(),
            why.label()
        );
        Ok(())
    }

    /// Mounts the primary source; when the node cannot resolve its host name
    /// and the volume also has an IPv6 target, mounts that instead, in the
    /// same call: a node whose resolver is broken still gets the same
    /// export. Returns the source mounted.
    fn mount_some_source<'r>(&self, r: &'r StageRequest) -> Result<&'r str> {
        let unresolved = match self.mount_with_fallback(&r.sources.primary, r) {
            Ok(()) => return Ok(&r.sources.primary),
            Err(e) if e.unresolved_host => e.error,
            Err(e) => return Err(e.error),
        };
        let Some(fallback) = r.sources.fallback.as_deref() else {
            return Err(unresolved);
        };
        log::warn!(
            "volume {}: this node cannot resolve the host of {} ({unresolved}); mounting its IPv6 target {fallback} instead",
            r.volume_id,
            r.sources.primary
        );
        self.mount_with_fallback(fallback, r)
            .map(|()| fallback)
            .map_err(|e| {
                e.error.context(format!(
                    "IPv6 target {fallback}, tried because {} did not resolve ({unresolved})",
                    r.sources.primary
                ))
            })
    }

    /// Runs the attempts of the mTLS mode in order on `source`; `optional`
    /// falls back to a plain mount after any failure, a timed-out TLS
    /// handshake included, but not after a host name that does not resolve:
    /// no option changes that. The last attempt's error is the RPC's (its
    /// code decides how kubelet treats the stage), with the first one's kept
    /// in the message.
    fn mount_with_fallback(&self, source: &str, r: &StageRequest) -> Result<(), NfsMountError> {
        let mut first_error: Option<Error> = None;
        for options in &r.attempts {
            let mount = NfsMount {
                source,
                target: &r.staging,
                options,
            };
            let e = match self.mounter.mount_nfs4(&mount) {
                Ok(()) => return Ok(()),
                Err(e) if e.unresolved_host => return Err(e),
                Err(e) => e.error,
            };
            match first_error {
                None => {
                    if r.mtls == MtlsMode::Optional {
                        log::warn!(
                            "volume {}: optional mTLS mount failed, retrying without mTLS: {e}",
                            r.volume_id
                        );
                    }
                    first_error = Some(e);
                }
                Some(first) => {
                    return Err(e
                        .context(format!("without mTLS (with mTLS: {first})"))
                        .into())
                }
            }
        }
        Err(first_error
            .unwrap_or_else(|| Error::Internal("no mount attempted".into()))
            .into())
    }

    pub(super) fn unstage(
        &self,
        req: &csi::NodeUnstageVolumeRequest,
    ) -> Result<csi::NodeUnstageVolumeResponse> {
        let (volume_id, staging) = parse_unstage(req)?;
        let _guard = self.volumes.try_lock(&volume_id)?;
        cleanup_mount_point(self.mounter.as_ref(), &staging, Some(STAGED_MARK)).map_err(|e| {
            e.context(format!(
                "NodeUnstageVolume failed to unmount at path {}",
                staging.display()
            ))
        })?;
        Ok(csi::NodeUnstageVolumeResponse::new())
    }
}

/// What a stage leaves in the staging directory, under its mount: the
/// volume id. kubelet stages a volume once and then only publishes it, so a
/// staging path whose mount is gone (the plugin's mount namespace died with
/// it) but that holds this for the volume is one kubelet still has staged,
/// and a publish stages it again rather than fail every new pod. A path
/// without it was never staged here, and is not.
const STAGED_MARK: &str = ".linodenfs-csi-staged";

/// Whether `staging`, nothing mounted on it, holds the mark of a stage of
/// `volume_id`.
pub(super) fn recorded(staging: &Path, volume_id: &str) -> bool {
    std::fs::read_to_string(staging.join(STAGED_MARK)).is_ok_and(|v| v == volume_id)
}

/// A validated NodeUnstageVolume request: the volume id and staging path.
pub(crate) fn parse_unstage(req: &csi::NodeUnstageVolumeRequest) -> Result<(String, PathBuf)> {
    Ok((
        volume_id(&req.volume_id)?,
        absolute_path(&req.staging_target_path, "staging target path")?,
    ))
}
