//! The CSI capabilities and requests that more than one harness sends, each
//! built in one place, so the controller, node and end-to-end tests send
//! the same shapes. Harnesses add what only their callers set (a volume's
//! context, a StorageClass's parameters).

use linode_nfs_csi::proto::csi;
use std::collections::HashMap;
use std::path::Path;

pub use csi::volume_capability::access_mode::Mode;

/// A mount capability with `mode` and mount `flags`.
pub fn mount_capability(mode: Mode, flags: &[&str]) -> csi::VolumeCapability {
    let mut mount = csi::volume_capability::MountVolume::new();
    mount.mount_flags = flags.iter().map(|f| f.to_string()).collect();
    let mut access = csi::volume_capability::AccessMode::new();
    access.mode = mode.into();
    let mut cap = csi::VolumeCapability::new();
    cap.set_mount(mount);
    cap.access_mode = Some(access).into();
    cap
}

pub fn mount_cap(mode: Mode) -> csi::VolumeCapability {
    mount_capability(mode, &[])
}

/// What an RWX PVC asks for.
pub fn rwx() -> csi::VolumeCapability {
    mount_cap(Mode::MULTI_NODE_MULTI_WRITER)
}

pub fn block_cap() -> csi::VolumeCapability {
    let mut cap = rwx();
    cap.set_block(csi::volume_capability::BlockVolume::new());
    cap
}

/// `(key, value)` pairs as a protobuf map.
pub fn pairs(list: &[(&str, &str)]) -> HashMap<String, String> {
    list.iter()
        .map(|(k, v)| (k.to_string(), v.to_string()))
        .collect()
}

/// `req` restoring `snapshot_id`.
pub fn from_snapshot(
    mut req: csi::CreateVolumeRequest,
    snapshot_id: &str,
) -> csi::CreateVolumeRequest {
    let mut source = csi::VolumeContentSource::new();
    source.mut_snapshot().snapshot_id = snapshot_id.to_string();
    req.volume_content_source = Some(source).into();
    req
}

/// `req` cloning `volume_id`.
pub fn from_volume(mut req: csi::CreateVolumeRequest, volume_id: &str) -> csi::CreateVolumeRequest {
    let mut source = csi::VolumeContentSource::new();
    source.mut_volume().volume_id = volume_id.to_string();
    req.volume_content_source = Some(source).into();
    req
}

pub fn delete_req(volume_id: &str) -> csi::DeleteVolumeRequest {
    csi::DeleteVolumeRequest {
        volume_id: volume_id.into(),
        ..Default::default()
    }
}

pub fn get_volume_req(volume_id: &str) -> csi::ControllerGetVolumeRequest {
    csi::ControllerGetVolumeRequest {
        volume_id: volume_id.into(),
        ..Default::default()
    }
}

pub fn expand_req(volume_id: &str, required: i64) -> csi::ControllerExpandVolumeRequest {
    let mut range = csi::CapacityRange::new();
    range.required_bytes = required;
    csi::ControllerExpandVolumeRequest {
        volume_id: volume_id.into(),
        capacity_range: Some(range).into(),
        ..Default::default()
    }
}

pub fn modify_req(volume_id: &str, mutable: &[(&str, &str)]) -> csi::ControllerModifyVolumeRequest {
    csi::ControllerModifyVolumeRequest {
        volume_id: volume_id.into(),
        mutable_parameters: pairs(mutable),
        ..Default::default()
    }
}

/// A ControllerPublishVolume of an RWX volume.
pub fn controller_publish_req(
    volume_id: &str,
    node_id: &str,
) -> csi::ControllerPublishVolumeRequest {
    csi::ControllerPublishVolumeRequest {
        volume_id: volume_id.into(),
        node_id: node_id.into(),
        volume_capability: Some(rwx()).into(),
        ..Default::default()
    }
}

pub fn controller_unpublish_req(
    volume_id: &str,
    node_id: &str,
) -> csi::ControllerUnpublishVolumeRequest {
    csi::ControllerUnpublishVolumeRequest {
        volume_id: volume_id.into(),
        node_id: node_id.into(),
        ..Default::default()
    }
}

pub fn snapshot_req(name: &str, source_volume_id: &str) -> csi::CreateSnapshotRequest {
    csi::CreateSnapshotRequest {
        name: name.into(),
        source_volume_id: source_volume_id.into(),
        ..Default::default()
    }
}

pub fn delete_snapshot_req(snapshot_id: &str) -> csi::DeleteSnapshotRequest {
    csi::DeleteSnapshotRequest {
        snapshot_id: snapshot_id.into(),
        ..Default::default()
    }
}

pub fn get_snapshot_req(snapshot_id: &str) -> csi::GetSnapshotRequest {
    csi::GetSnapshotRequest {
        snapshot_id: snapshot_id.into(),
        ..Default::default()
    }
}

/// ListSnapshots filtered by id and source (either may be empty).
pub fn list_snapshots_req(snapshot_id: &str, source_volume_id: &str) -> csi::ListSnapshotsRequest {
    csi::ListSnapshotsRequest {
        snapshot_id: snapshot_id.into(),
        source_volume_id: source_volume_id.into(),
        ..Default::default()
    }
}

fn path(p: &Path) -> String {
    p.to_string_lossy().into_owned()
}

pub fn node_stage_req(
    volume_id: &str,
    staging: &Path,
    capability: csi::VolumeCapability,
) -> csi::NodeStageVolumeRequest {
    csi::NodeStageVolumeRequest {
        volume_id: volume_id.into(),
        staging_target_path: path(staging),
        volume_capability: Some(capability).into(),
        ..Default::default()
    }
}

pub fn node_unstage_req(volume_id: &str, staging: &Path) -> csi::NodeUnstageVolumeRequest {
    csi::NodeUnstageVolumeRequest {
        volume_id: volume_id.into(),
        staging_target_path: path(staging),
        ..Default::default()
    }
}

pub fn node_publish_req(
    volume_id: &str,
    staging: &Path,
    target: &Path,
    capability: csi::VolumeCapability,
) -> csi::NodePublishVolumeRequest {
    csi::NodePublishVolumeRequest {
        volume_id: volume_id.into(),
        staging_target_path: path(staging),
        target_path: path(target),
        volume_capability: Some(capability).into(),
        ..Default::default()
    }
}

pub fn node_unpublish_req(volume_id: &str, target: &Path) -> csi::NodeUnpublishVolumeRequest {
    csi::NodeUnpublishVolumeRequest {
        volume_id: volume_id.into(),
        target_path: path(target),
        ..Default::default()
    }
}

pub fn node_stats_req(volume_id: &str, volume_path: &Path) -> csi::NodeGetVolumeStatsRequest {
    csi::NodeGetVolumeStatsRequest {
        volume_id: volume_id.into(),
        volume_path: path(volume_path),
        ..Default::default()
    }
}
