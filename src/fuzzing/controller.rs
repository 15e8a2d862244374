//! Controller requests: what each handler parses before its first Linode
//! call. CreateVolume has its own parser; the other handlers read their
//! fields with the shared ones (handles of either kind, capabilities,
//! parameters, node ids), run here on the decoded fields. Which of the
//! handles that parse name a volume the driver made is the controller's
//! to check against the backend (tests/subdirectory_edges.rs): the seeds
//! hold the forged shapes (a shared parent's id, a directory "of" a
//! whole-filesystem volume, a directory that does not exist).

use super::caller_mistake;
use super::handles::{any_snapshot_handle, any_volume_handle, label};
use super::node::decode;
use super::params::{mutable, params, tags};
use crate::controller::{capability_problem, check_capabilities, linode_id, parse_create};
use crate::proto::csi;
use csi::volume_capability::access_mode::Mode;

/// What the fuzzed CreateVolume falls back to without a capacity range.
const DEFAULT_CAPACITY: i64 = 10 << 30;

/// A selector byte, then one of the thirteen controller requests and
/// three group controller requests that carry input.
pub fn controller_requests(data: &[u8]) {
    let Some((&kind, bytes)) = data.split_first() else {
        return;
    };
    match kind % 16 {
        0 => with(bytes, create_volume),
        1 => with(bytes, |r: csi::DeleteVolumeRequest| {
            any_volume_handle(&r.volume_id);
        }),
        2 => with(bytes, |r: csi::ControllerPublishVolumeRequest| {
            if let Some(cap) = r.volume_capability.as_ref() {
                capabilities(std::slice::from_ref(cap));
            }
            any_volume_handle(&r.volume_id);
            node_id(&r.node_id);
        }),
        3 => with(bytes, |r: csi::ControllerUnpublishVolumeRequest| {
            any_volume_handle(&r.volume_id);
            node_id(&r.node_id);
        }),
        4 => with(bytes, |r: csi::ValidateVolumeCapabilitiesRequest| {
            capabilities(&r.volume_capabilities);
            any_volume_handle(&r.volume_id);
            params(&r.parameters);
            mutable(&r.mutable_parameters);
        }),
        5 => with(bytes, |r: csi::ListVolumesRequest| {
            any_volume_handle(&r.starting_token);
        }),
        6 => with(bytes, |r: csi::GetCapacityRequest| {
            capabilities(&r.volume_capabilities);
            params(&r.parameters);
        }),
        7 => with(bytes, |r: csi::CreateSnapshotRequest| {
            any_volume_handle(&r.source_volume_id);
            label(&r.name);
        }),
        8 => with(bytes, |r: csi::DeleteSnapshotRequest| {
            any_snapshot_handle(&r.snapshot_id);
        }),
        9 => with(bytes, |r: csi::ListSnapshotsRequest| {
            any_snapshot_handle(&r.snapshot_id);
            any_volume_handle(&r.source_volume_id);
        }),
        10 => with(bytes, |r: csi::GetSnapshotRequest| {
            any_snapshot_handle(&r.snapshot_id);
        }),
        11 => with(bytes, |r: csi::ControllerGetVolumeRequest| {
            any_volume_handle(&r.volume_id);
        }),
        13 => with(bytes, |r: csi::CreateVolumeGroupSnapshotRequest| {
            label(&r.name);
            for id in &r.source_volume_ids {
                any_volume_handle(id);
            }
        }),
        14 => with(bytes, |r: csi::GetVolumeGroupSnapshotRequest| {
            any_snapshot_handle(&r.group_snapshot_id);
        }),
        15 => with(bytes, |r: csi::DeleteVolumeGroupSnapshotRequest| {
            any_snapshot_handle(&r.group_snapshot_id);
            for id in &r.snapshot_ids {
                any_snapshot_handle(id);
            }
        }),
        _ => with(bytes, |r: csi::ControllerModifyVolumeRequest| {
            any_volume_handle(&r.volume_id);
            mutable(&r.mutable_parameters);
        }),
    }
}

fn with<M: protobuf::Message>(bytes: &[u8], check: impl FnOnce(M)) {
    if let Some(req) = decode::<M>(bytes) {
        check(req);
    }
}

/// A CreateVolume that parses asks for a positive capacity within its range
/// (else the default), under the label of its name, with well-formed tags
/// and the source it named; one that does not is InvalidArgument, or
/// NotFound for a source handle we could not have issued.
fn create_volume(req: csi::CreateVolumeRequest) {
    let want = match parse_create(&req, DEFAULT_CAPACITY) {
        Ok(want) => want,
        Err(e) => {
            let named_source = req.volume_content_source.is_some();
            return caller_mistake("CreateVolume", &e, named_source);
        }
    };
    assert!(!req.name.is_empty());
    assert_eq!(want.label, label(&req.name));
    assert!(want.required >= 0 && want.limit >= 0);
    assert!(want.limit == 0 || want.required <= want.limit);
    let expected = match (want.required, want.limit) {
        (r, _) if r > 0 => r,
        (_, l) if l > 0 => l,
        _ => DEFAULT_CAPACITY,
    };
    assert_eq!(want.capacity, expected);
    tags(&want.tags);
    let source = req.volume_content_source.as_ref();
    // One source, the class's kind's: never both.
    assert!(want.source.is_none() || want.dir_source.is_none());
    let echoed = want
        .source
        .as_ref()
        .map(|(_, raw)| raw)
        .or(want.dir_source.as_ref().map(|(_, raw)| raw));
    assert_eq!(echoed.is_some(), source.is_some());
    if let (Some(raw), Some(source)) = (echoed, source) {
        let named = if source.has_snapshot() {
            &source.snapshot().snapshot_id
        } else {
            &source.volume().volume_id
        };
        assert_eq!(raw, named, "the source is echoed as written");
    }
    capabilities(&req.volume_capabilities);
}

/// The capability checks agree with each other: a capability passes exactly
/// when it is a mount with a defined access mode; a list passes when it is
/// not empty and each one passes.
fn capabilities(caps: &[csi::VolumeCapability]) {
    for cap in caps {
        let servable = cap.has_mount()
            && !cap.has_block()
            && cap
                .access_mode
                .as_ref()
                .is_some_and(|m| matches!(m.mode.enum_value(), Ok(mode) if mode != Mode::UNKNOWN));
        assert_eq!(capability_problem(cap).is_none(), servable, "{cap:?}");
    }
    match check_capabilities(caps) {
        Ok(()) => assert!(!caps.is_empty() && caps.iter().all(|c| capability_problem(c).is_none())),
        Err(e) => {
            caller_mistake("capabilities", &e, false);
            assert!(caps.is_empty() || caps.iter().any(|c| capability_problem(c).is_some()));
        }
    }
}

/// A node id names a Linode by its canonical decimal id, or no node.
fn node_id(raw: &str) {
    match linode_id(raw) {
        Ok(id) => assert_eq!(id.to_string(), raw),
        Err(e) => assert!(matches!(e, crate::Error::NotFound(_)), "{e:?}"),
    }
}
