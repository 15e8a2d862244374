//! End to end for shared-filesystem volumes, against `linode-nfs-csi dev`
//! over gRPC only: two PVCs of a `subdirectory` class in the seeded
//! `dev-shared` filesystem, each a directory with its own quota; stage,
//! publish into two pods, write, expand, and delete. After each step the
//! fake's quota table and the shared export's directory tree are what the
//! caller was told; afterwards no volume directory, marker or quota is
//! left, the shared filesystem itself is untouched, and no mount remains.

mod common;
mod e2e_support;

use common::requests::*;
use common::rpc::*;
use common::volume_names;
use e2e_support::*;
use grpcio::RpcStatusCode;
use linode_nfs_csi::proto::csi;
use linode_nfs_csi::proto::csi::controller_service_capability::rpc::Type as ControllerRpc;
use std::collections::HashMap;

fn subdirectory_req(name: &str, required: i64) -> csi::CreateVolumeRequest {
    let mut req = create_req(name, required);
    req.parameters = subdirectory_params();
    req
}

/// `(path, max bytes, phase)` of every quota the fake holds on `fs`.
fn quotas(state: &StateDir, fs: u64) -> Vec<(String, i64, String)> {
    state
        .quotas()
        .into_iter()
        .filter(|q| q.0 == fs)
        .map(|(_, path, max, phase)| (path, max, phase))
        .collect()
}

/// ControllerExpandVolume as external-resizer sends it.
fn resize_req(volume_id: &str, required: i64) -> csi::ControllerExpandVolumeRequest {
    let mut req = expand_req(volume_id, required);
    req.volume_capability = Some(rwx()).into();
    req
}

fn lifecycle(node_mode: bool) {
    let mode = if node_mode { "node" } else { "space" };
    let (state, dev) = start_dev(
        &format!("e2e-subdir-{mode}"),
        &[
            ("DEV_ACTIVATION_DELAY", "300ms"),
            ("VOLUME_EXPANSION", "subdirectory"),
            ("NFS_ACCESS_POLICY_MODE", mode),
        ],
    );
    assert!(
        dev.advertises(ControllerRpc::EXPAND_VOLUME),
        "VOLUME_EXPANSION=subdirectory"
    );
    let (shared_id, _) = state.shared_parent();
    let base = state.shared_base();
    let filesystems_before = state.filesystems();

    // The provisioner: two PVCs of the class, 1 GiB and 2 GiB.
    let mut volumes = Vec::new();
    for (name, size) in [("pvc-sub-a", GIB), ("pvc-sub-b", 2 * GIB)] {
        let volume = dev.create(&subdirectory_req(name, size));
        assert_eq!(volume.volume_id, format!("1/{shared_id}/{name}"));
        assert_eq!(volume.capacity_bytes, size);
        assert_eq!(volume.volume_context["volume-type"], "subdirectory");
        assert_eq!(
            volume.volume_context["filesystem-id"],
            shared_id.to_string()
        );
        assert!(!volume.volume_context.contains_key("quota"), "{volume:?}");
        volumes.push(volume);
    }
    let quota = |path: &str, bytes: i64| (path.to_string(), bytes, "Active".to_string());
    assert_eq!(
        quotas(&state, shared_id),
        vec![
            quota("/csi-volumes/pvc-sub-a", GIB),
            quota("/csi-volumes/pvc-sub-b", 2 * GIB)
        ],
        "a volume is handed out once its quota is active"
    );
    assert_eq!(volume_names(&base), vec!["pvc-sub-a", "pvc-sub-b"]);
    assert_eq!(
        state.filesystems(),
        filesystems_before,
        "a subdirectory volume makes no filesystem"
    );

    // A retried create is the same volume; another size is AlreadyExists.
    let again = dev
        .controller
        .create_volume_opt(&subdirectory_req("pvc-sub-a", GIB), call())
        .unwrap();
    assert_eq!(again.volume.unwrap().volume_id, volumes[0].volume_id);
    assert_code(
        dev.controller
            .create_volume_opt(&subdirectory_req("pvc-sub-a", 3 * GIB), call()),
        RpcStatusCode::ALREADY_EXISTS,
        "a retried create of another size",
    );
    assert_eq!(quotas(&state, shared_id).len(), 2);

    let node_id = dev
        .node
        .node_get_info_opt(&Default::default(), call())
        .unwrap()
        .node_id;
    let mut contexts = Vec::new();
    for volume in &volumes {
        let mut publish_context = HashMap::new();
        if node_mode {
            publish_context = dev
                .controller
                .controller_publish_volume_opt(&attach_req(volume, &node_id), call())
                .unwrap()
                .publish_context;
            assert_eq!(
                state.acl(shared_id),
                (true, vec![NODE_ID.parse().unwrap()]),
                "the parent's ACL admits the node"
            );
        }
        contexts.push(publish_context);
    }

    // kubelet: volume A staged and published into two pods.
    let a = &volumes[0];
    let staging = state.staging(&a.volume_id);
    let pod_a = state.target("pod-a", &a.volume_id);
    let pod_b = state.target("pod-b", &a.volume_id);
    dev.node
        .node_stage_volume_opt(&stage_req(a, &contexts[0], &staging), call())
        .unwrap();
    for (pod, readonly) in [(&pod_a, false), (&pod_b, true)] {
        dev.node
            .node_publish_volume_opt(&publish_req(a, &staging, pod, readonly), call())
            .unwrap();
    }
    dev.write(&pod_a.join("hello.txt"), "from pod-a").unwrap();
    assert_eq!(dev.read(&pod_b.join("hello.txt")).unwrap(), "from pod-a");
    assert_eq!(
        std::fs::read_to_string(base.join("pvc-sub-a/hello.txt")).unwrap(),
        "from pod-a",
        "the pod writes into its own directory of the shared filesystem"
    );
    assert!(
        !dev.exists(&pod_a.join("pvc-sub-b")) && !dev.exists(&pod_a.join("csi-volumes")),
        "a pod sees its directory only, not the share"
    );

    // Expansion is a quota update; the node has nothing to do.
    let expanded = dev
        .controller
        .controller_expand_volume_opt(&resize_req(&a.volume_id, 3 * GIB), call())
        .unwrap();
    assert_eq!(expanded.capacity_bytes, 3 * GIB);
    assert!(!expanded.node_expansion_required);
    assert_eq!(
        quotas(&state, shared_id)[0],
        quota("/csi-volumes/pvc-sub-a", 3 * GIB)
    );
    let got = dev
        .controller
        .controller_get_volume_opt(&get_volume_req(&a.volume_id), call())
        .unwrap();
    assert_eq!(got.volume.unwrap().capacity_bytes, 3 * GIB);

    // Teardown in kubelet's order.
    for pod in [&pod_a, &pod_b] {
        dev.node
            .node_unpublish_volume_opt(&node_unpublish_req(&a.volume_id, pod), call())
            .unwrap();
    }
    dev.node
        .node_unstage_volume_opt(&node_unstage_req(&a.volume_id, &staging), call())
        .unwrap();
    if node_mode {
        for volume in &volumes {
            dev.controller
                .controller_unpublish_volume_opt(
                    &controller_unpublish_req(&volume.volume_id, &node_id),
                    call(),
                )
                .unwrap();
        }
        assert_eq!(state.acl(shared_id).1, Vec::<u64>::new());
    }

    for volume in &volumes {
        delete_volume_as(&dev, &NO_RETRY, &volume.volume_id);
    }
    // A retried delete is OK and changes nothing.
    dev.controller
        .delete_volume_opt(&delete_req(&volumes[0].volume_id), call())
        .unwrap();
    assert_eq!(quotas(&state, shared_id), Vec::new());
    assert_eq!(volume_names(&base), Vec::<String>::new());
    assert!(
        common::names_in(&base.join(".owners")).is_empty(),
        "a marker outlived its volume"
    );
    assert_eq!(state.filesystems(), filesystems_before, "the parent stays");
    // The controller keeps its parent mounted; kubelet's paths are clean.
    let kubelet = state.path().join("kubelet");
    assert!(
        dev.mounts_under_state()
            .iter()
            .all(|m| !m.starts_with(&kubelet)),
        "{:?}",
        dev.mounts_under_state()
    );
}

#[test]
fn subdirectory_lifecycle_in_space_mode() {
    lifecycle(false);
}

#[test]
fn subdirectory_lifecycle_in_node_mode() {
    lifecycle(true);
}

/// Without VOLUME_EXPANSION the plugin advertises no expansion, and a
/// whole-filesystem volume can never be expanded.
#[test]
fn expansion_is_advertised_only_when_asked_and_never_for_a_whole_filesystem() {
    let (state, dev) = start_dev("e2e-subdir-expand", &[]);
    assert!(!dev.advertises(ControllerRpc::EXPAND_VOLUME));
    drop(dev);
    let dev = Dev::start(&state, &[("VOLUME_EXPANSION", "subdirectory")]);
    let whole = create_volume(&dev, "pvc-whole", GIB);
    assert_code(
        dev.controller
            .controller_expand_volume_opt(&resize_req(&whole.volume_id, 2 * GIB), call()),
        RpcStatusCode::FAILED_PRECONDITION,
        "expanding a whole filesystem",
    );
}
