//! The CSI view of a volume, whatever its kind: the `Volume` answer and the
//! context the node reads, built from the filesystem it lives on; its
//! condition (a filesystem's status, a directory's quota); the mount-target
//! check every answer needs; and `Described`, what reads and listings hand
//! the handlers. Pure construction: nothing here calls the backend.

use crate::handles::{self, SubdirId, VolumeHandle, VolumeId};
use crate::linode::{Filesystem, MtlsMode, Quota, Status};
use crate::proto::csi;
use crate::Error;
use std::collections::HashMap;

/// A volume as reads and listings report it.
#[derive(Debug, Clone)]
pub struct Described {
    pub handle: VolumeHandle,
    /// The filesystem whose access policy says where it is published (a
    /// directory's parent).
    pub acl: VolumeId,
    pub volume: csi::Volume,
    pub condition: csi::VolumeCondition,
}

/// The id of `fs` as a volume.
pub fn id_of(fs: &Filesystem) -> VolumeId {
    VolumeId {
        space: fs.space_id,
        filesystem: fs.id,
    }
}

/// The CSI volume for a backend filesystem, with the context the node reads.
pub fn volume_of(fs: &Filesystem, mtls: Option<&MtlsMode>) -> csi::Volume {
    let mut ctx = HashMap::new();
    ctx.insert(handles::CTX_SPACE_ID.to_string(), fs.space_id.to_string());
    ctx.insert(handles::CTX_FILESYSTEM_ID.to_string(), fs.id.to_string());
    ctx.insert(
        handles::CTX_MOUNT_TARGET.to_string(),
        fs.mount_target_fqdn.clone().unwrap_or_default(),
    );
    ctx.insert(
        handles::CTX_MOUNT_TARGET_IPS.to_string(),
        fs.mount_target_ips.join(","),
    );
    ctx.insert(handles::CTX_REGION.to_string(), fs.region.clone());
    if let Some(mode) = mtls.filter(|m| !m.as_str().is_empty()) {
        ctx.insert(
            handles::CTX_MTLS_MODE.to_string(),
            mode.as_str().to_string(),
        );
    }
    let mut v = csi::Volume::new();
    v.volume_id = id_of(fs).to_string();
    v.capacity_bytes = fs.capacity_bytes().unwrap_or(0);
    v.volume_context = ctx;
    v
}

/// The CSI volume of directory `id` of `parent`: the parent's context
/// (the node mounts its export), the directory's handle and size.
pub fn directory_volume(
    parent: &Filesystem,
    mtls: Option<&MtlsMode>,
    id: &SubdirId,
    capacity: i64,
    capped: bool,
) -> csi::Volume {
    let mut v = volume_of(parent, mtls);
    v.volume_id = id.to_string();
    v.capacity_bytes = capacity;
    v.volume_context.insert(
        handles::CTX_VOLUME_TYPE.to_string(),
        handles::Kind::Directory.as_str().to_string(),
    );
    if !capped {
        v.volume_context
            .insert(handles::CTX_QUOTA.to_string(), "absent".to_string());
    }
    v
}

/// The content source an answer names: a snapshot, or else a volume, by
/// the id the request gave.
pub fn content_source(from_snapshot: bool, raw: &str) -> csi::VolumeContentSource {
    let mut content = csi::VolumeContentSource::new();
    if from_snapshot {
        let mut snap = csi::volume_content_source::SnapshotSource::new();
        snap.snapshot_id = raw.to_string();
        content.set_snapshot(snap);
    } else {
        let mut vol = csi::volume_content_source::VolumeSource::new();
        vol.volume_id = raw.to_string();
        content.set_volume(vol);
    }
    content
}

/// Abnormal only in a status the filesystem does not come back from by
/// itself; `creating`, `updating` and statuses new to us pass.
pub fn condition_of(fs: &Filesystem) -> csi::VolumeCondition {
    let mut condition = csi::VolumeCondition::new();
    condition.abnormal = matches!(fs.status, Status::Error | Status::Failed | Status::Deleting);
    condition.message = format!("NFS filesystem {} is {}", fs.id, fs.status);
    condition
}

/// Abnormal when the backend says the quota is exceeded or failed.
pub fn quota_condition(id: &SubdirId, quota: Option<&Quota>) -> csi::VolumeCondition {
    let mut condition = csi::VolumeCondition::new();
    match quota {
        Some(q) => {
            condition.abnormal = q.quota_exceeded || q.status == Status::Error;
            condition.message = if q.quota_exceeded {
                format!("volume {id} has exceeded its quota ({})", q.status)
            } else {
                format!("the quota of volume {id} is {}", q.status)
            };
        }
        None => condition.message = format!("volume {id} has no quota"),
    }
    condition
}

/// FailedPrecondition for a filesystem the node could not mount.
pub fn require_mount_target(fs: &Filesystem) -> Result<(), Error> {
    let has_fqdn = fs
        .mount_target_fqdn
        .as_deref()
        .is_some_and(|s| !s.is_empty());
    if has_fqdn || !fs.mount_target_ips.is_empty() {
        Ok(())
    } else {
        Err(Error::FailedPrecondition(format!(
            "NFS filesystem {} does not have a mount target",
            fs.id
        )))
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn only_statuses_that_do_not_pass_are_abnormal() {
        let fs = |status: &str| -> Filesystem {
            serde_json::from_value(serde_json::json!({
                "id": 101, "space_id": 7, "label": "v", "region": "us-ord", "status": status
            }))
            .unwrap()
        };
        for (status, abnormal) in [
            ("active", false),
            ("creating", false),
            ("updating", false),
            ("pending", false),
            ("resizing", false),
            ("error", true),
            ("failed", true),
            ("deleting", true),
        ] {
            let c = condition_of(&fs(status));
            assert_eq!(c.abnormal, abnormal, "{status}");
            assert_eq!(c.message, format!("NFS filesystem 101 is {status}"));
        }
    }
}
