//! The CSI spec rules the community conformance suite (csi-sanity,
//! kubernetes-csi/csi-test `pkg/sanity`) checks, one test each, against
//! `linode-nfs-csi dev` over gRPC. Where csi-sanity uses particular ids or
//! paths (`fake-vol-id-…`, `reallyfakesnapshotid`, `some/path`), so do these
//! tests, so a pass here predicts a pass there. Each test has its own dev
//! process and state dir; node-mode rules run with
//! `NFS_ACCESS_POLICY_MODE=node`, where ControllerPublish is advertised.

mod common;
mod e2e_support;

use common::requests::*;
use common::rpc::*;
use e2e_support::*;
use grpcio::RpcStatusCode;
use linode_nfs_csi::proto::csi;
use linode_nfs_csi::proto::csi::controller_service_capability::rpc::Type as ControllerRpc;
use linode_nfs_csi::proto::csi::node_service_capability::rpc::Type as NodeRpc;
use linode_nfs_csi::proto::csi::plugin_capability::service::Type as PluginService;
use linode_nfs_csi::proto::csi::volume_capability::access_mode::Mode;
use linode_nfs_csi::proto::csi_grpc::GroupControllerClient;
use std::collections::HashMap;
use std::path::PathBuf;

const INVALID: RpcStatusCode = RpcStatusCode::INVALID_ARGUMENT;
const NOT_FOUND: RpcStatusCode = RpcStatusCode::NOT_FOUND;

/// What csi-sanity's default id generator makes: well-formed for it,
/// malformed for this driver.
const SANITY_VOLUME_ID: &str = "fake-vol-id-0123456789";
const SANITY_NODE_ID: &str = "fake-node-id-0123456789";
/// Well-formed handles naming nothing.
const UNKNOWN_VOLUME_ID: &str = "1/999999";
const UNKNOWN_SNAPSHOT_ID: &str = "1/999999/888888";

fn space_mode(tag: &str) -> (StateDir, Dev) {
    start_dev(tag, &[])
}

fn node_mode(tag: &str) -> (StateDir, Dev) {
    start_dev(tag, &[("NFS_ACCESS_POLICY_MODE", "node")])
}

fn ok<T>(what: &str, r: grpcio::Result<T>) -> T {
    r.unwrap_or_else(|e| panic!("{what}: {e:?}"))
}

// ---- Identity ----

#[test]
fn probe_answers_ready() {
    let (_state, dev) = space_mode("conf-probe");
    let resp = ok("Probe", dev.identity.probe_opt(&Default::default(), call()));
    assert!(resp.ready.is_some() && resp.ready.value, "{resp:?}");
}

#[test]
fn plugin_info_has_a_reverse_domain_name_and_a_version() {
    let (_state, dev) = space_mode("conf-info");
    let info = ok(
        "GetPluginInfo",
        dev.identity
            .get_plugin_info_opt(&Default::default(), call()),
    );
    let name = &info.name;
    assert!(
        !name.is_empty() && name.len() <= 63,
        "name length: {name:?}"
    );
    assert!(
        name.bytes()
            .all(|b| b.is_ascii_lowercase() || b.is_ascii_digit() || b == b'.' || b == b'-'),
        "name must match ^[a-z0-9.-]+$: {name:?}"
    );
    let labels: Vec<&str> = name.split('.').collect();
    assert!(
        labels.len() >= 2 && labels.iter().all(|l| !l.is_empty()),
        "not a domain name: {name:?}"
    );
    assert!(
        name.starts_with(|c: char| c.is_ascii_alphanumeric())
            && name.ends_with(|c: char| c.is_ascii_alphanumeric()),
        "{name:?}"
    );
    assert_eq!(name, "linodenfs.csi.linode.com");
    assert!(!info.vendor_version.is_empty(), "vendor_version is empty");
}

#[test]
fn node_get_info_returns_the_node_id() {
    let (_state, dev) = space_mode("conf-nodeinfo");
    let info = ok(
        "NodeGetInfo",
        dev.node.node_get_info_opt(&Default::default(), call()),
    );
    assert_eq!(info.node_id, NODE_ID);
    assert!(info.max_volumes_per_node >= 0);
}

// ---- Capabilities ----

/// Every advertised capability is one csi-sanity knows (it fails on others)
/// and answers; every RPC whose capability is not advertised answers
/// Unimplemented (or, for a content source, InvalidArgument).
fn capabilities_are_consistent(node: bool) {
    let (state, dev) = if node {
        node_mode("conf-caps-node")
    } else {
        space_mode("conf-caps-space")
    };
    let (c, n) = (&dev.controller, &dev.node);
    let caps: Vec<ControllerRpc> = ok(
        "ControllerGetCapabilities",
        c.controller_get_capabilities_opt(&Default::default(), call()),
    )
    .capabilities
    .iter()
    .map(|cap| cap.rpc().type_.enum_value_or_default())
    .collect();
    let sanity_known = [
        ControllerRpc::CREATE_DELETE_VOLUME,
        ControllerRpc::PUBLISH_UNPUBLISH_VOLUME,
        ControllerRpc::LIST_VOLUMES,
        ControllerRpc::GET_CAPACITY,
        ControllerRpc::CREATE_DELETE_SNAPSHOT,
        ControllerRpc::LIST_SNAPSHOTS,
        ControllerRpc::PUBLISH_READONLY,
        ControllerRpc::CLONE_VOLUME,
        ControllerRpc::EXPAND_VOLUME,
        ControllerRpc::LIST_VOLUMES_PUBLISHED_NODES,
        ControllerRpc::GET_VOLUME,
        ControllerRpc::VOLUME_CONDITION,
        ControllerRpc::SINGLE_NODE_MULTI_WRITER,
        ControllerRpc::GET_SNAPSHOT,
        ControllerRpc::MODIFY_VOLUME,
    ];
    for cap in &caps {
        assert!(
            sanity_known.contains(cap),
            "csi-sanity fails on the capability {cap:?}"
        );
    }
    assert_eq!(
        caps.contains(&ControllerRpc::PUBLISH_UNPUBLISH_VOLUME),
        node
    );

    let volume = create_volume(&dev, "pvc-caps", GIB);
    for cap in &caps {
        match cap {
            // Exercised by the create above and the delete below.
            ControllerRpc::CREATE_DELETE_VOLUME => {}
            ControllerRpc::GET_VOLUME => {
                ok(
                    "ControllerGetVolume",
                    c.controller_get_volume_opt(&get_volume_req(&volume.volume_id), call()),
                );
            }
            ControllerRpc::VOLUME_CONDITION => {
                let got = ok(
                    "ControllerGetVolume",
                    c.controller_get_volume_opt(&get_volume_req(&volume.volume_id), call()),
                );
                let condition = got
                    .status
                    .volume_condition
                    .as_ref()
                    .expect("VOLUME_CONDITION advertised, none reported");
                assert!(!condition.abnormal, "{condition:?}");
            }
            ControllerRpc::CREATE_DELETE_SNAPSHOT => {
                let snap = ok(
                    "CreateSnapshot",
                    c.create_snapshot_opt(&snapshot_req("snap-caps", &volume.volume_id), call()),
                );
                ok(
                    "DeleteSnapshot",
                    c.delete_snapshot_opt(&delete_snapshot_req(&snap.snapshot.snapshot_id), call()),
                );
            }
            ControllerRpc::LIST_SNAPSHOTS => {
                ok(
                    "ListSnapshots",
                    c.list_snapshots_opt(&Default::default(), call()),
                );
            }
            ControllerRpc::PUBLISH_UNPUBLISH_VOLUME => {
                ok(
                    "ControllerPublishVolume",
                    c.controller_publish_volume_opt(&attach_req(&volume, NODE_ID), call()),
                );
                let req = controller_unpublish_req(&volume.volume_id, NODE_ID);
                ok(
                    "ControllerUnpublishVolume",
                    c.controller_unpublish_volume_opt(&req, call()),
                );
            }
            ControllerRpc::LIST_VOLUMES => {
                let listed = ok(
                    "ListVolumes",
                    c.list_volumes_opt(&Default::default(), call()),
                );
                assert!(
                    listed
                        .entries
                        .iter()
                        .any(|e| e.volume.volume_id == volume.volume_id),
                    "{listed:?}"
                );
            }
            ControllerRpc::LIST_VOLUMES_PUBLISHED_NODES => {
                ok(
                    "ControllerPublishVolume",
                    c.controller_publish_volume_opt(&attach_req(&volume, NODE_ID), call()),
                );
                let listed = ok(
                    "ListVolumes",
                    c.list_volumes_opt(&Default::default(), call()),
                );
                let entry = listed
                    .entries
                    .iter()
                    .find(|e| e.volume.volume_id == volume.volume_id)
                    .expect("the volume is listed");
                assert_eq!(entry.status.published_node_ids, [NODE_ID]);
                let req = controller_unpublish_req(&volume.volume_id, NODE_ID);
                ok(
                    "ControllerUnpublishVolume",
                    c.controller_unpublish_volume_opt(&req, call()),
                );
            }
            ControllerRpc::GET_CAPACITY => {
                let capacity = ok(
                    "GetCapacity",
                    c.get_capacity_opt(&Default::default(), call()),
                );
                assert!(capacity.available_capacity > 0, "{capacity:?}");
            }
            ControllerRpc::GET_SNAPSHOT => {
                let snap = ok(
                    "CreateSnapshot",
                    c.create_snapshot_opt(&snapshot_req("snap-get", &volume.volume_id), call()),
                )
                .snapshot
                .unwrap();
                let got = ok(
                    "GetSnapshot",
                    c.get_snapshot_opt(&get_snapshot_req(&snap.snapshot_id), call()),
                );
                assert_eq!(got.snapshot.source_volume_id, volume.volume_id);
                ok(
                    "DeleteSnapshot",
                    c.delete_snapshot_opt(&delete_snapshot_req(&snap.snapshot_id), call()),
                );
            }
            ControllerRpc::CLONE_VOLUME => {
                let req = from_volume(create_req("pvc-caps-clone", GIB), &volume.volume_id);
                let clone = ok(
                    "CreateVolume (clone)",
                    retry(&SIDECAR, || c.create_volume_opt(&req, call())),
                )
                .volume
                .unwrap();
                assert_eq!(
                    clone.content_source.volume().volume_id,
                    volume.volume_id,
                    "{clone:?}"
                );
                ok(
                    "DeleteVolume (clone)",
                    c.delete_volume_opt(&delete_req(&clone.volume_id), call()),
                );
            }
            // Volumes of both single-node modes can be made.
            ControllerRpc::SINGLE_NODE_MULTI_WRITER => {
                for (name, mode) in [
                    ("pvc-caps-snsw", Mode::SINGLE_NODE_SINGLE_WRITER),
                    ("pvc-caps-snmw", Mode::SINGLE_NODE_MULTI_WRITER),
                ] {
                    let mut req = create_req(name, GIB);
                    req.volume_capabilities = vec![mount_cap(mode)];
                    let made = ok("CreateVolume", c.create_volume_opt(&req, call()))
                        .volume
                        .unwrap();
                    ok(
                        "DeleteVolume",
                        c.delete_volume_opt(&delete_req(&made.volume_id), call()),
                    );
                }
            }
            ControllerRpc::MODIFY_VOLUME => {
                let req = modify_req(
                    &volume.volume_id,
                    &[(
                        "linodenfs.csi.linode.com/filesystem-root-squash",
                        "all_squash",
                    )],
                );
                ok(
                    "ControllerModifyVolume",
                    c.controller_modify_volume_opt(&req, call()),
                );
            }
            other => {
                panic!("{other:?} is advertised but this checklist has no check for it: add one")
            }
        }
    }

    let unimplemented = RpcStatusCode::UNIMPLEMENTED;
    if !caps.contains(&ControllerRpc::LIST_VOLUMES) {
        assert_code(
            c.list_volumes_opt(&Default::default(), call()),
            unimplemented,
            "ListVolumes",
        );
    }
    if !caps.contains(&ControllerRpc::GET_CAPACITY) {
        assert_code(
            c.get_capacity_opt(&Default::default(), call()),
            unimplemented,
            "GetCapacity",
        );
    }
    if !caps.contains(&ControllerRpc::EXPAND_VOLUME) {
        assert_code(
            c.controller_expand_volume_opt(&expand_req(&volume.volume_id, 2 * GIB), call()),
            unimplemented,
            "ControllerExpandVolume",
        );
    }
    if !caps.contains(&ControllerRpc::MODIFY_VOLUME) {
        assert_code(
            c.controller_modify_volume_opt(
                &modify_req(&volume.volume_id, &[("iops", "1")]),
                call(),
            ),
            unimplemented,
            "ControllerModifyVolume",
        );
    }
    if !caps.contains(&ControllerRpc::GET_SNAPSHOT) {
        assert_code(
            c.get_snapshot_opt(&get_snapshot_req(UNKNOWN_SNAPSHOT_ID), call()),
            unimplemented,
            "GetSnapshot",
        );
    }
    if !caps.contains(&ControllerRpc::PUBLISH_UNPUBLISH_VOLUME) {
        assert_code(
            c.controller_publish_volume_opt(&attach_req(&volume, NODE_ID), call()),
            unimplemented,
            "ControllerPublishVolume",
        );
        assert_code(
            c.controller_unpublish_volume_opt(
                &controller_unpublish_req(&volume.volume_id, NODE_ID),
                call(),
            ),
            unimplemented,
            "ControllerUnpublishVolume",
        );
    }
    if !caps.contains(&ControllerRpc::CLONE_VOLUME) {
        // Without CLONE_VOLUME a volume source is refused, never ignored
        // (which would hand out an empty volume as a "clone").
        let req = from_volume(create_req("pvc-caps-clone", GIB), &volume.volume_id);
        assert_code(
            c.create_volume_opt(&req, call()),
            INVALID,
            "CreateVolume from a volume",
        );
        assert_eq!(
            state.filesystems().len(),
            1,
            "a refused clone still created a filesystem"
        );
    }

    let node_caps: Vec<NodeRpc> = ok(
        "NodeGetCapabilities",
        n.node_get_capabilities_opt(&Default::default(), call()),
    )
    .capabilities
    .iter()
    .map(|cap| cap.rpc().type_.enum_value_or_default())
    .collect();
    let staging = state.staging(&volume.volume_id);
    for cap in &node_caps {
        match cap {
            NodeRpc::STAGE_UNSTAGE_VOLUME => {
                ok(
                    "NodeStageVolume",
                    n.node_stage_volume_opt(&stage_req(&volume, &HashMap::new(), &staging), call()),
                );
            }
            NodeRpc::GET_VOLUME_STATS => {}
            // A staged, healthy volume reports a normal condition.
            NodeRpc::VOLUME_CONDITION => {
                let stats = ok(
                    "NodeGetVolumeStats",
                    n.node_get_volume_stats_opt(
                        &node_stats_req(&volume.volume_id, &staging),
                        call(),
                    ),
                );
                let condition = stats
                    .volume_condition
                    .as_ref()
                    .expect("VOLUME_CONDITION advertised, none reported");
                assert!(!condition.abnormal, "{condition:?}");
            }
            // Staged above (STAGE_UNSTAGE_VOLUME comes first): a single
            // writer volume gets one target, a multi-writer one several.
            NodeRpc::SINGLE_NODE_MULTI_WRITER => {
                let (a, b) = (
                    state.target("snsw-a", &volume.volume_id),
                    state.target("snsw-b", &volume.volume_id),
                );
                let with_mode = |target: &PathBuf, mode: Mode| {
                    let mut req = publish_req(&volume, &staging, target, false);
                    req.volume_capability = Some(mount_cap(mode)).into();
                    req
                };
                ok(
                    "NodePublishVolume (single writer)",
                    n.node_publish_volume_opt(
                        &with_mode(&a, Mode::SINGLE_NODE_SINGLE_WRITER),
                        call(),
                    ),
                );
                assert_code(
                    n.node_publish_volume_opt(
                        &with_mode(&b, Mode::SINGLE_NODE_SINGLE_WRITER),
                        call(),
                    ),
                    RpcStatusCode::FAILED_PRECONDITION,
                    "a second target of a single writer volume",
                );
                assert!(!dev.exists(&b), "the refused target was created");
                ok(
                    "NodePublishVolume (multi writer)",
                    n.node_publish_volume_opt(
                        &with_mode(&b, Mode::SINGLE_NODE_MULTI_WRITER),
                        call(),
                    ),
                );
                for target in [&a, &b] {
                    ok(
                        "NodeUnpublishVolume",
                        n.node_unpublish_volume_opt(
                            &node_unpublish_req(&volume.volume_id, target),
                            call(),
                        ),
                    );
                }
            }
            other => panic!(
                "node capability {other:?} is advertised but this checklist has no check for it"
            ),
        }
    }
    if node_caps.contains(&NodeRpc::GET_VOLUME_STATS) {
        let path = if node_caps.contains(&NodeRpc::STAGE_UNSTAGE_VOLUME) {
            staging.clone()
        } else {
            state.path()
        };
        ok(
            "NodeGetVolumeStats",
            n.node_get_volume_stats_opt(&node_stats_req(&volume.volume_id, &path), call()),
        );
    }
    if node_caps.contains(&NodeRpc::STAGE_UNSTAGE_VOLUME) {
        ok(
            "NodeUnstageVolume",
            n.node_unstage_volume_opt(&node_unstage_req(&volume.volume_id, &staging), call()),
        );
    }
    if !node_caps.contains(&NodeRpc::EXPAND_VOLUME) {
        let mut req = csi::NodeExpandVolumeRequest::new();
        req.volume_id = volume.volume_id.clone();
        req.volume_path = staging.to_string_lossy().into_owned();
        assert_code(
            n.node_expand_volume_opt(&req, call()),
            unimplemented,
            "NodeExpandVolume",
        );
    }

    let plugin_caps: Vec<PluginService> = ok(
        "GetPluginCapabilities",
        dev.identity
            .get_plugin_capabilities_opt(&Default::default(), call()),
    )
    .capabilities
    .iter()
    .filter(|cap| cap.has_service())
    .map(|cap| cap.service().type_.enum_value_or_default())
    .collect();
    for cap in &plugin_caps {
        match cap {
            // Answered above: the controller service is there.
            PluginService::CONTROLLER_SERVICE => {}
            // The group controller answers what it offers, and each RPC.
            PluginService::GROUP_CONTROLLER_SERVICE => {
                let group = GroupControllerClient::new(dev.driver.channel());
                let caps = ok(
                    "GroupControllerGetCapabilities",
                    group.group_controller_get_capabilities_opt(&Default::default(), call()),
                );
                assert_eq!(caps.capabilities.len(), 1, "{caps:?}");
                let mut get = csi::GetVolumeGroupSnapshotRequest::new();
                get.group_snapshot_id = "1/2/3/not-a-group".into();
                assert_code(
                    group.get_volume_group_snapshot_opt(&get, call()),
                    grpcio::RpcStatusCode::NOT_FOUND,
                    "GetVolumeGroupSnapshot of a group that is not there",
                );
            }
            other => panic!(
                "plugin capability {other:?} is advertised but this checklist has no check for it"
            ),
        }
    }
    assert!(
        plugin_caps.contains(&PluginService::CONTROLLER_SERVICE),
        "dev mode serves the controller"
    );
    if !plugin_caps.contains(&PluginService::GROUP_CONTROLLER_SERVICE) {
        let group = GroupControllerClient::new(dev.driver.channel());
        assert_code(
            group.group_controller_get_capabilities_opt(&Default::default(), call()),
            unimplemented,
            "GroupControllerGetCapabilities",
        );
    }

    delete_volume(&dev, &volume.volume_id);
}

#[test]
fn capabilities_are_consistent_in_space_mode() {
    capabilities_are_consistent(false);
}

#[test]
fn capabilities_are_consistent_in_node_mode() {
    capabilities_are_consistent(true);
}

// ---- CreateVolume / DeleteVolume ----

#[test]
fn volume_names_of_128_characters_are_accepted() {
    let (state, dev) = space_mode("conf-maxlen");
    let name = format!(
        "sanity-controller-create-maxlen-{}",
        "0123456789ABCDEF".repeat(8)
    )[..128]
        .to_string();
    assert_eq!(name.len(), 128);
    let req = create_req(&name, GIB);
    let first = ok(
        "CreateVolume",
        dev.controller.create_volume_opt(&req, call()),
    )
    .volume
    .unwrap();
    assert!(first.capacity_bytes >= GIB, "{first:?}");
    let again = ok(
        "CreateVolume again",
        dev.controller.create_volume_opt(&req, call()),
    )
    .volume
    .unwrap();
    assert_eq!(again.volume_id, first.volume_id);
    assert_eq!(state.filesystems().len(), 1);
    delete_volume(&dev, &first.volume_id);
}

#[test]
fn same_name_and_parameters_returns_the_same_volume() {
    let (state, dev) = space_mode("conf-twice");
    let req = create_req("sanity-controller-create-twice", GIB);
    let first = ok(
        "CreateVolume",
        dev.controller.create_volume_opt(&req, call()),
    )
    .volume
    .unwrap();
    let second = ok(
        "CreateVolume again",
        dev.controller.create_volume_opt(&req, call()),
    )
    .volume
    .unwrap();
    assert_eq!(
        second, first,
        "a repeated CreateVolume must describe the same volume"
    );
    assert_eq!(state.filesystems().len(), 1);
}

#[test]
fn same_name_different_capacity_is_already_exists() {
    let (state, dev) = space_mode("conf-twice-diff");
    let sized = |bytes: i64| {
        let mut req = create_req("sanity-controller-create-twice-different", 0);
        let mut range = csi::CapacityRange::new();
        range.required_bytes = bytes;
        range.limit_bytes = bytes;
        req.capacity_range = Some(range).into();
        req
    };
    ok(
        "CreateVolume",
        dev.controller.create_volume_opt(&sized(GIB), call()),
    );
    assert_code(
        dev.controller.create_volume_opt(&sized(2 * GIB), call()),
        RpcStatusCode::ALREADY_EXISTS,
        "same name, twice the capacity",
    );
    // A limit below what exists is just as incompatible.
    let mut smaller = create_req("sanity-controller-create-twice-different", 0);
    let mut range = csi::CapacityRange::new();
    range.limit_bytes = GIB / 2;
    smaller.capacity_range = Some(range).into();
    assert_code(
        dev.controller.create_volume_opt(&smaller, call()),
        RpcStatusCode::ALREADY_EXISTS,
        "same name, limit below the existing size",
    );
    assert_eq!(
        state.filesystems().len(),
        1,
        "a refused create made a filesystem"
    );
}

#[test]
fn create_volume_validates_arguments() {
    let (state, dev) = space_mode("conf-create-args");
    let mut no_name = create_req("x", GIB);
    no_name.name.clear();
    assert_code(
        dev.controller.create_volume_opt(&no_name, call()),
        INVALID,
        "no name",
    );
    let mut no_caps = create_req("sanity-controller-create-no-volume-capabilities", GIB);
    no_caps.volume_capabilities.clear();
    assert_code(
        dev.controller.create_volume_opt(&no_caps, call()),
        INVALID,
        "no capabilities",
    );
    let mut block = create_req("sanity-block", GIB);
    let mut cap = rwx();
    cap.set_block(csi::volume_capability::BlockVolume::new());
    block.volume_capabilities = vec![cap];
    assert_code(
        dev.controller.create_volume_opt(&block, call()),
        INVALID,
        "block access",
    );
    assert!(state.filesystems().is_empty());
}

#[test]
fn create_volume_from_a_missing_snapshot_is_not_found() {
    let (state, dev) = space_mode("conf-missing-snap");
    for id in ["non-existing-snapshot-id", UNKNOWN_SNAPSHOT_ID] {
        assert_code(
            dev.controller
                .create_volume_opt(&restore_req("sanity-controller-vol-from-snap", id), call()),
            NOT_FOUND,
            id,
        );
    }
    assert!(
        state.filesystems().is_empty(),
        "a failed restore left a filesystem"
    );
}

#[test]
fn delete_volume_of_unknown_ids_is_ok() {
    let (state, dev) = space_mode("conf-del-unknown");
    for id in [
        UNKNOWN_VOLUME_ID,
        "7/101",
        SANITY_VOLUME_ID,
        "fake-vol-id",
        "1/2/3",
        "1/abc",
    ] {
        ok(
            id,
            dev.controller.delete_volume_opt(&delete_req(id), call()),
        );
    }
    assert_code(
        dev.controller.delete_volume_opt(&delete_req(""), call()),
        INVALID,
        "no volume id",
    );
    // Deleting twice is deleting an unknown id the second time.
    let volume = create_volume(&dev, "sanity-controller-create-appropriate", GIB);
    for _ in 0..2 {
        ok(
            "DeleteVolume",
            dev.controller
                .delete_volume_opt(&delete_req(&volume.volume_id), call()),
        );
    }
    delete_volume(&dev, &volume.volume_id);
    assert!(state.filesystems().is_empty());
}

// ---- ValidateVolumeCapabilities / ControllerGetVolume ----

#[test]
fn validate_volume_capabilities_of_a_missing_volume_is_not_found() {
    let (_state, dev) = space_mode("conf-validate");
    let validate = |id: &str, caps: Vec<csi::VolumeCapability>| {
        let mut req = csi::ValidateVolumeCapabilitiesRequest::new();
        req.volume_id = id.to_string();
        req.volume_capabilities = caps;
        dev.controller
            .validate_volume_capabilities_opt(&req, call())
    };
    for id in [UNKNOWN_VOLUME_ID, SANITY_VOLUME_ID] {
        assert_code(validate(id, vec![rwx()]), NOT_FOUND, id);
    }
    assert_code(validate("", vec![rwx()]), INVALID, "no volume id");
    let volume = create_volume(&dev, "sanity-controller-validate", GIB);
    assert_code(
        validate(&volume.volume_id, vec![]),
        INVALID,
        "no capabilities",
    );
    let resp = ok(
        "ValidateVolumeCapabilities",
        validate(&volume.volume_id, vec![rwx()]),
    );
    assert!(
        !resp.confirmed.volume_capabilities.is_empty(),
        "a confirmation must list the capabilities: {resp:?}"
    );
}

#[test]
fn controller_get_volume_of_a_missing_volume_is_not_found() {
    let (_state, dev) = space_mode("conf-getvol");
    for id in [UNKNOWN_VOLUME_ID, SANITY_VOLUME_ID] {
        assert_code(
            dev.controller
                .controller_get_volume_opt(&get_volume_req(id), call()),
            NOT_FOUND,
            id,
        );
    }
    assert_code(
        dev.controller
            .controller_get_volume_opt(&get_volume_req(""), call()),
        INVALID,
        "no volume id",
    );
}

// ---- ControllerPublish (node mode) ----

#[test]
fn controller_publish_of_a_missing_volume_or_node_is_not_found() {
    let (state, dev) = node_mode("conf-cpub");
    let c = &dev.controller;
    let mut missing = csi::Volume::new();
    for id in [SANITY_VOLUME_ID, UNKNOWN_VOLUME_ID] {
        missing.volume_id = id.to_string();
        for node in [SANITY_NODE_ID, NODE_ID] {
            assert_code(
                c.controller_publish_volume_opt(&attach_req(&missing, node), call()),
                NOT_FOUND,
                &format!("volume {id} on node {node}"),
            );
        }
    }
    let volume = create_volume(&dev, "sanity-controller-wrong-node", GIB);
    for node in [SANITY_NODE_ID, "99999999"] {
        assert_code(
            c.controller_publish_volume_opt(&attach_req(&volume, node), call()),
            NOT_FOUND,
            &format!("node {node}"),
        );
    }
    assert_eq!(
        state.acl(filesystem_of(&volume.volume_id)).1,
        Vec::<u64>::new(),
        "a refused publish touched the ACL"
    );

    let mut req = attach_req(&volume, NODE_ID);
    req.volume_id.clear();
    assert_code(
        c.controller_publish_volume_opt(&req, call()),
        INVALID,
        "no volume id",
    );
    let mut req = attach_req(&volume, NODE_ID);
    req.node_id.clear();
    assert_code(
        c.controller_publish_volume_opt(&req, call()),
        INVALID,
        "no node id",
    );
    let mut req = attach_req(&volume, NODE_ID);
    req.volume_capability = None.into();
    assert_code(
        c.controller_publish_volume_opt(&req, call()),
        INVALID,
        "no capability",
    );
    assert_code(
        c.controller_unpublish_volume_opt(&controller_unpublish_req("", NODE_ID), call()),
        INVALID,
        "unpublish without volume id",
    );
    // Unpublishing what was never published is done already.
    ok(
        "ControllerUnpublishVolume of a missing volume",
        c.controller_unpublish_volume_opt(
            &controller_unpublish_req(UNKNOWN_VOLUME_ID, NODE_ID),
            call(),
        ),
    );
}

// ---- Snapshots ----

#[test]
fn delete_snapshot_of_unknown_ids_is_ok() {
    let (_state, dev) = space_mode("conf-delsnap");
    let volume = create_volume(&dev, "delete-snapshot-volume", GIB);
    let on_real_volume = format!("{}/888888", volume.volume_id);
    for id in [
        "reallyfakesnapshotid",
        UNKNOWN_SNAPSHOT_ID,
        on_real_volume.as_str(),
        "1/2",
        "1/2/x",
    ] {
        ok(
            id,
            dev.controller
                .delete_snapshot_opt(&delete_snapshot_req(id), call()),
        );
    }
    assert_code(
        dev.controller
            .delete_snapshot_opt(&delete_snapshot_req(""), call()),
        INVALID,
        "no snapshot id",
    );
}

#[test]
fn list_snapshots_with_unknown_ids_is_empty() {
    let (_state, dev) = space_mode("conf-listsnap");
    let volume = create_volume(&dev, "list-snapshots-volume", GIB);
    ok(
        "CreateSnapshot",
        dev.controller
            .create_snapshot_opt(&snapshot_req("listed", &volume.volume_id), call()),
    );
    let on_real_volume = format!("{}/888888", volume.volume_id);
    for id in [
        "none-exist-id",
        UNKNOWN_SNAPSHOT_ID,
        on_real_volume.as_str(),
    ] {
        let resp = ok(
            id,
            dev.controller
                .list_snapshots_opt(&list_snapshots_req(id, ""), call()),
        );
        assert!(resp.entries.is_empty(), "{id}: {resp:?}");
    }
    for source in [SANITY_VOLUME_ID, UNKNOWN_VOLUME_ID] {
        let resp = ok(
            source,
            dev.controller
                .list_snapshots_opt(&list_snapshots_req("", source), call()),
        );
        assert!(resp.entries.is_empty(), "{source}: {resp:?}");
    }
    // The one snapshot there is, is listed; the filters above were not just broken.
    let all = ok(
        "ListSnapshots",
        dev.controller
            .list_snapshots_opt(&Default::default(), call()),
    );
    assert_eq!(all.entries.len(), 1, "{all:?}");
    let s = &all.entries[0].snapshot;
    assert!(
        !s.snapshot_id.is_empty()
            && s.source_volume_id == volume.volume_id
            && s.creation_time.is_some(),
        "{s:?}"
    );
}

#[test]
fn list_snapshots_with_a_bad_starting_token_is_aborted() {
    let (_state, dev) = space_mode("conf-token");
    for token in ["invalid-token", "-1", "99"] {
        let mut req = csi::ListSnapshotsRequest::new();
        req.starting_token = token.to_string();
        assert_code(
            dev.controller.list_snapshots_opt(&req, call()),
            RpcStatusCode::ABORTED,
            token,
        );
    }
}

#[test]
fn snapshot_name_on_a_different_source_is_already_exists() {
    let (state, dev) = space_mode("conf-snapname");
    let v2 = create_volume(&dev, "CreateSnapshot-volume-2", GIB);
    let v3 = create_volume(&dev, "CreateSnapshot-volume-3", GIB);
    let name = "CreateSnapshot-snapshot-2";
    let first = ok(
        "CreateSnapshot",
        dev.controller
            .create_snapshot_opt(&snapshot_req(name, &v2.volume_id), call()),
    );
    let again = ok(
        "CreateSnapshot again",
        dev.controller
            .create_snapshot_opt(&snapshot_req(name, &v2.volume_id), call()),
    );
    assert_eq!(again.snapshot.snapshot_id, first.snapshot.snapshot_id);
    assert_code(
        dev.controller
            .create_snapshot_opt(&snapshot_req(name, &v3.volume_id), call()),
        RpcStatusCode::ALREADY_EXISTS,
        "same snapshot name, other source",
    );
    assert_eq!(state.snapshots().len(), 1);
}

#[test]
fn snapshot_names_of_128_characters_are_accepted() {
    let (state, dev) = space_mode("conf-snapmax");
    let volume = create_volume(&dev, "CreateSnapshot-volume-maxlen-name", GIB);
    let name = format!(
        "CreateSnapshot-snapshot-maxlen-{}",
        "0123456789ABCDEF".repeat(8)
    )[..128]
        .to_string();
    let req = snapshot_req(&name, &volume.volume_id);
    let first = ok(
        "CreateSnapshot",
        dev.controller.create_snapshot_opt(&req, call()),
    );
    let again = ok(
        "CreateSnapshot again",
        dev.controller.create_snapshot_opt(&req, call()),
    );
    assert_eq!(again.snapshot.snapshot_id, first.snapshot.snapshot_id);
    assert_eq!(state.snapshots().len(), 1);
}

#[test]
fn create_snapshot_validates_arguments() {
    let (_state, dev) = space_mode("conf-snapargs");
    assert_code(
        dev.controller
            .create_snapshot_opt(&snapshot_req("", "testId"), call()),
        INVALID,
        "no name",
    );
    assert_code(
        dev.controller
            .create_snapshot_opt(&snapshot_req("name", ""), call()),
        INVALID,
        "no source",
    );
}

// ---- Node ----

/// A staged and published volume in space mode.
struct Published {
    state: StateDir,
    dev: Dev,
    volume: csi::Volume,
    staging: PathBuf,
    target: PathBuf,
}

fn published(tag: &str) -> Published {
    let (state, dev) = space_mode(tag);
    let volume = create_volume(&dev, "sanity-node", GIB);
    let (staging, target) = mount_in_pod(&dev, &state, &volume, "pod");
    Published {
        state,
        dev,
        volume,
        staging,
        target,
    }
}

#[test]
fn node_unpublish_removes_the_target_path() {
    let p = published("conf-unpub");
    assert!(
        p.dev.exists(&p.target),
        "NodePublishVolume must create the target path"
    );
    ok(
        "NodeUnpublishVolume",
        p.dev
            .node
            .node_unpublish_volume_opt(&node_unpublish_req(&p.volume.volume_id, &p.target), call()),
    );
    assert_eq!(p.dev.mount_count(&p.target), 0);
    assert!(!p.dev.exists(&p.target), "the target path must be removed");
    assert!(
        !p.target.exists(),
        "the target path must be removed on the host too"
    );
    assert_eq!(
        p.dev.mount_count(&p.staging),
        1,
        "unpublish must leave the staging mount alone"
    );
}

#[test]
fn node_unpublish_and_unstage_of_never_existing_paths_are_ok() {
    let (state, dev) = space_mode("conf-never");
    let never = state.path().join("kubelet/never/existed");
    ok(
        "NodeUnpublishVolume",
        dev.node
            .node_unpublish_volume_opt(&node_unpublish_req(UNKNOWN_VOLUME_ID, &never), call()),
    );
    ok(
        "NodeUnstageVolume",
        dev.node
            .node_unstage_volume_opt(&node_unstage_req(UNKNOWN_VOLUME_ID, &never), call()),
    );
    // A directory that exists but was never mounted is cleaned up the same way.
    let plain = state.path().join("kubelet/plain");
    std::fs::create_dir_all(&plain).unwrap();
    ok(
        "NodeUnpublishVolume",
        dev.node
            .node_unpublish_volume_opt(&node_unpublish_req(UNKNOWN_VOLUME_ID, &plain), call()),
    );
    assert!(!plain.exists());
}

#[test]
fn node_stage_validates_arguments() {
    let (state, dev) = space_mode("conf-stage-args");
    let volume = create_volume(&dev, "sanity-node-stage-nocaps", GIB);
    let staging = state.staging(&volume.volume_id);
    let base = || {
        stage_req(
            &volume,
            &HashMap::from([("device".to_string(), "/dev/mock".to_string())]),
            &staging,
        )
    };
    let mut req = base();
    req.volume_id.clear();
    assert_code(
        dev.node.node_stage_volume_opt(&req, call()),
        INVALID,
        "no volume id",
    );
    let mut req = base();
    req.staging_target_path.clear();
    assert_code(
        dev.node.node_stage_volume_opt(&req, call()),
        INVALID,
        "no staging path",
    );
    let mut req = base();
    req.volume_capability = None.into();
    assert_code(
        dev.node.node_stage_volume_opt(&req, call()),
        INVALID,
        "no capability",
    );
    assert!(
        dev.mounts_under_state().is_empty(),
        "a refused stage mounted something"
    );
}

#[test]
fn node_publish_validates_arguments() {
    let p = published("conf-pub-args");
    let other = p.state.target("pod-2", &p.volume.volume_id);
    let base = || publish_req(&p.volume, &p.staging, &other, false);
    let n = &p.dev.node;
    assert_code(
        n.node_publish_volume_opt(&csi::NodePublishVolumeRequest::new(), call()),
        INVALID,
        "empty request",
    );
    let mut req = base();
    req.volume_id.clear();
    assert_code(
        n.node_publish_volume_opt(&req, call()),
        INVALID,
        "no volume id",
    );
    let mut req = base();
    req.target_path.clear();
    assert_code(
        n.node_publish_volume_opt(&req, call()),
        INVALID,
        "no target path",
    );
    let mut req = base();
    req.volume_capability = None.into();
    assert_code(
        n.node_publish_volume_opt(&req, call()),
        INVALID,
        "no capability",
    );
    // csi-sanity's own shape: volume id and target only.
    let mut req = csi::NodePublishVolumeRequest::new();
    req.volume_id = SANITY_VOLUME_ID.to_string();
    req.target_path = other.to_string_lossy().into_owned();
    assert_code(
        n.node_publish_volume_opt(&req, call()),
        INVALID,
        "no capability (csi-sanity)",
    );
    assert!(
        !p.dev.exists(&other),
        "a refused publish left its target behind"
    );
}

#[test]
fn node_unpublish_and_unstage_validate_arguments() {
    let (state, dev) = space_mode("conf-unx-args");
    let path = state.path().join("kubelet/some");
    let n = &dev.node;
    assert_code(
        n.node_unpublish_volume_opt(&node_unpublish_req("", &path), call()),
        INVALID,
        "unpublish: no volume id",
    );
    let mut req = node_unpublish_req(SANITY_VOLUME_ID, &path);
    req.target_path.clear();
    assert_code(
        n.node_unpublish_volume_opt(&req, call()),
        INVALID,
        "unpublish: no target path",
    );
    assert_code(
        n.node_unstage_volume_opt(&node_unstage_req("", &path), call()),
        INVALID,
        "unstage: no volume id",
    );
    let mut req = node_unstage_req(SANITY_VOLUME_ID, &path);
    req.staging_target_path.clear();
    assert_code(
        n.node_unstage_volume_opt(&req, call()),
        INVALID,
        "unstage: no staging path",
    );
}

#[test]
fn node_get_volume_stats_validates_arguments() {
    let (state, dev) = space_mode("conf-stats-args");
    let n = &dev.node;
    assert_code(
        n.node_get_volume_stats_opt(&node_stats_req("", &PathBuf::from("some/path")), call()),
        INVALID,
        "no volume id",
    );
    assert_code(
        n.node_get_volume_stats_opt(&node_stats_req("", &state.path()), call()),
        INVALID,
        "no volume id, absolute path",
    );
    let mut req = node_stats_req(SANITY_VOLUME_ID, &state.path());
    req.volume_path.clear();
    assert_code(
        n.node_get_volume_stats_opt(&req, call()),
        INVALID,
        "no volume path",
    );
}

#[test]
fn node_get_volume_stats_on_a_missing_path_is_not_found() {
    let p = published("conf-stats-missing");
    let missing = p.state.path().join("kubelet/pods/gone/volumes/mount");
    for id in [p.volume.volume_id.as_str(), SANITY_VOLUME_ID] {
        assert_code(
            p.dev
                .node
                .node_get_volume_stats_opt(&node_stats_req(id, &missing), call()),
            NOT_FOUND,
            &format!("volume {id} at a missing absolute path"),
        );
    }
    ok(
        "NodeGetVolumeStats on the target",
        p.dev
            .node
            .node_get_volume_stats_opt(&node_stats_req(&p.volume.volume_id, &p.target), call()),
    );
}

/// csi-sanity's "should fail when volume is not found" and "should fail
/// when volume does not exist on the specified path" pass the relative
/// path `some/path` and expect NotFound.
#[test]
fn node_get_volume_stats_on_csi_sanitys_relative_missing_path_is_not_found() {
    let p = published("conf-stats-rel");
    for id in [SANITY_VOLUME_ID, p.volume.volume_id.as_str()] {
        assert_code(
            p.dev.node.node_get_volume_stats_opt(
                &node_stats_req(id, &PathBuf::from("some/path")),
                call(),
            ),
            NOT_FOUND,
            &format!("volume {id} at some/path"),
        );
    }
}
