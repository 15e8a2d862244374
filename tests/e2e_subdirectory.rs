//! End to end for shared-filesystem volumes, against `linode-nfs-csi dev`
//! over gRPC only: two PVCs of a `subdirectory` class in the seeded
//! `dev-shared` filesystem, each a directory with its own quota; stage,
//! publish into two pods, write, expand, and delete. After each step the
//! fake's quota table and the shared export's directory tree are what the
//! caller was told; afterwards no volume directory, marker or quota is
//! left, the shared filesystem itself is untouched, and no mount remains.

mod common;
mod e2e_support;

use common::code_of;
use e2e_support::*;
use grpcio::RpcStatusCode;
use linode_nfs_csi::proto::csi;
use linode_nfs_csi::proto::csi::controller_service_capability::rpc::Type as ControllerRpc;
use serde_json::Value;
use std::collections::HashMap;
use std::path::PathBuf;

const SHARED: &str = "dev-shared";

fn subdirectory_params() -> HashMap<String, String> {
    let mut params = dev_params();
    for (k, v) in [
        ("volume-type", "subdirectory"),
        ("shared-filesystem-label", SHARED),
    ] {
        params.insert(format!("linodenfs.csi.linode.com/{k}"), v.to_string());
    }
    params
}

fn subdirectory_req(name: &str, required: i64) -> csi::CreateVolumeRequest {
    let mut req = create_req(name, required);
    req.parameters = subdirectory_params();
    req
}

/// The seeded shared filesystem: its id and its export directory.
fn shared(state: &StateDir) -> (u64, PathBuf) {
    let linode = state.linode();
    let fs = linode["filesystems"]
        .as_object()
        .unwrap()
        .values()
        .find(|f| f["label"] == SHARED)
        .unwrap_or_else(|| panic!("dev mode seeds no {SHARED} filesystem: {linode}"));
    // The export name is the label and the hex id (the fake's rule).
    let export = format!("{SHARED}-{:x}", fs["id"].as_u64().unwrap());
    (
        fs["id"].as_u64().unwrap(),
        state.path().join("exports").join(export),
    )
}

/// `(path, max bytes, status)` of every quota the fake holds on `fs`.
fn quotas(state: &StateDir, fs: u64) -> Vec<(String, i64, String)> {
    let linode = state.linode();
    let Some(map) = linode.get("quotas").and_then(Value::as_object) else {
        return Vec::new();
    };
    let mut out: Vec<(String, i64, String)> = map
        .values()
        .filter(|q| q["filesystem_id"].as_u64() == Some(fs))
        .map(|q| {
            (
                q["path"].as_str().unwrap().to_string(),
                q["max_capacity_bytes"].as_i64().unwrap(),
                q["phase"].as_str().unwrap_or_default().to_lowercase(),
            )
        })
        .collect();
    out.sort();
    out
}

/// Names under the shared export's `csi-volumes` base.
fn volume_dirs(dir: &std::path::Path) -> Vec<String> {
    let mut names: Vec<String> = match std::fs::read_dir(dir.join("csi-volumes")) {
        Ok(d) => d
            .map(|e| e.unwrap().file_name().to_string_lossy().into_owned())
            .filter(|n| !n.starts_with('.'))
            .collect(),
        Err(_) => Vec::new(),
    };
    names.sort();
    names
}

fn advertises_expansion(dev: &Dev) -> bool {
    dev.controller
        .controller_get_capabilities_opt(&Default::default(), call())
        .unwrap()
        .capabilities
        .iter()
        .any(|c| c.rpc().type_.enum_value_or_default() == ControllerRpc::EXPAND_VOLUME)
}

fn expand_req(volume_id: &str, required: i64) -> csi::ControllerExpandVolumeRequest {
    let mut req = csi::ControllerExpandVolumeRequest::new();
    req.volume_id = volume_id.to_string();
    let mut range = csi::CapacityRange::new();
    range.required_bytes = required;
    req.capacity_range = Some(range).into();
    req.volume_capability = Some(rwx()).into();
    req
}

fn lifecycle(node_mode: bool) {
    let state = StateDir::new(if node_mode {
        "e2e-subdir-node"
    } else {
        "e2e-subdir-space"
    });
    let mut envs = vec![
        ("DEV_ACTIVATION_DELAY", "300ms"),
        ("VOLUME_EXPANSION", "subdirectory"),
    ];
    if node_mode {
        envs.push(("NFS_ACCESS_POLICY_MODE", "node"));
    }
    let dev = Dev::start(&state, &envs);
    assert!(advertises_expansion(&dev), "VOLUME_EXPANSION=subdirectory");
    let (shared_id, export) = shared(&state);
    let filesystems_before = state.filesystems();

    // The provisioner: two PVCs of the class, 1 GiB and 2 GiB.
    let mut volumes = Vec::new();
    for (name, size) in [("pvc-sub-a", GIB), ("pvc-sub-b", 2 * GIB)] {
        let created = retry(|| {
            dev.controller
                .create_volume_opt(&subdirectory_req(name, size), call())
        })
        .unwrap();
        let volume = created.volume.unwrap();
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
    let quota = |path: &str, bytes: i64| (path.to_string(), bytes, "active".to_string());
    assert_eq!(
        quotas(&state, shared_id),
        vec![
            quota("/csi-volumes/pvc-sub-a", GIB),
            quota("/csi-volumes/pvc-sub-b", 2 * GIB)
        ],
        "a volume is handed out once its quota is active"
    );
    assert_eq!(volume_dirs(&export), vec!["pvc-sub-a", "pvc-sub-b"]);
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
                .controller_publish_volume_opt(&controller_publish_req(volume, &node_id), call())
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
        std::fs::read_to_string(export.join("csi-volumes/pvc-sub-a/hello.txt")).unwrap(),
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
        .controller_expand_volume_opt(&expand_req(&a.volume_id, 3 * GIB), call())
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
            .node_unpublish_volume_opt(&unpublish_req(&a.volume_id, pod), call())
            .unwrap();
    }
    dev.node
        .node_unstage_volume_opt(&unstage_req(&a.volume_id, &staging), call())
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
        dev.controller
            .delete_volume_opt(&delete_req(&volume.volume_id), call())
            .unwrap();
        let gone = dev
            .controller
            .controller_get_volume_opt(&get_volume_req(&volume.volume_id), call());
        assert_eq!(code_of(&gone.unwrap_err()), RpcStatusCode::NOT_FOUND);
    }
    // A retried delete is OK and changes nothing.
    dev.controller
        .delete_volume_opt(&delete_req(&volumes[0].volume_id), call())
        .unwrap();
    assert_eq!(quotas(&state, shared_id), Vec::new());
    assert_eq!(volume_dirs(&export), Vec::<String>::new());
    let owners = export.join("csi-volumes/.owners");
    assert!(
        std::fs::read_dir(&owners).map_or(true, |mut d| d.next().is_none()),
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
    let state = StateDir::new("e2e-subdir-expand");
    let dev = Dev::start(&state, &[]);
    assert!(!advertises_expansion(&dev));
    drop(dev);
    let dev = Dev::start(&state, &[("VOLUME_EXPANSION", "subdirectory")]);
    let whole = create_volume(&dev, "pvc-whole", GIB);
    assert_code(
        dev.controller
            .controller_expand_volume_opt(&expand_req(&whole.volume_id, 2 * GIB), call()),
        RpcStatusCode::FAILED_PRECONDITION,
        "expanding a whole filesystem",
    );
}
