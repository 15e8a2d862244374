//! End to end, as a PVC lives through it: the provisioner's CreateVolume,
//! the attacher's ControllerPublish (node access-policy mode only), kubelet's
//! stage, two pod publishes (one read-only), stats, the teardown in reverse,
//! and DeleteVolume, against `linode-nfs-csi dev` over gRPC only. Afterwards
//! the fake backend holds no filesystem, the export directory is gone and
//! the driver's mount namespace holds no mount under the state dir.

mod common;
mod e2e_support;

use common::requests::*;
use common::rpc::*;
use e2e_support::*;
use linode_nfs_csi::proto::csi;
use linode_nfs_csi::proto::csi::controller_service_capability::rpc::Type as ControllerRpc;
use linode_nfs_csi::proto::csi::volume_usage::Unit;
use std::collections::HashMap;
use std::path::Path;

fn assert_usage(dev: &Dev, volume_id: &str, path: &Path) {
    let stats = dev
        .node
        .node_get_volume_stats_opt(&node_stats_req(volume_id, path), call())
        .unwrap();
    let unit = |u: Unit| {
        stats
            .usage
            .iter()
            .find(|x| x.unit.enum_value_or_default() == u)
            .unwrap_or_else(|| panic!("no {u:?} usage in {stats:?}"))
    };
    for u in [unit(Unit::BYTES), unit(Unit::INODES)] {
        assert!(u.total > 0, "{u:?}");
        assert!(u.used >= 0 && u.used <= u.total, "{u:?}");
        assert!(u.available >= 0 && u.available <= u.total, "{u:?}");
    }
}

fn lifecycle(node_mode: bool) {
    let mode = if node_mode { "node" } else { "space" };
    let (state, dev) = start_dev(
        &format!("e2e-life-{mode}"),
        &[
            ("DEV_ACTIVATION_DELAY", "300ms"),
            ("NFS_ACCESS_POLICY_MODE", mode),
        ],
    );
    assert_eq!(
        dev.advertises(ControllerRpc::PUBLISH_UNPUBLISH_VOLUME),
        node_mode,
        "PUBLISH_UNPUBLISH_VOLUME is advertised only in node mode"
    );

    // The provisioner.
    let name = &format!("pvc-4b1d-{mode}");
    let created = dev
        .controller
        .create_volume_opt(&create_req(name, GIB), call())
        .unwrap();
    let volume = created.volume.unwrap();
    let fs_id = filesystem_of(&volume.volume_id);
    assert_eq!(volume.volume_id, format!("1/{fs_id}"));
    assert_eq!(volume.capacity_bytes, GIB);
    assert!(
        !volume.volume_context["mount-target"].is_empty(),
        "{volume:?}"
    );
    assert_eq!(volume.volume_context["space-id"], "1");
    assert_eq!(volume.volume_context["filesystem-id"], fs_id.to_string());
    assert_eq!(
        state.filesystems(),
        vec![(fs_id, name.to_string(), "Active".to_string())]
    );
    assert_eq!(
        state.entries("exports").len(),
        1,
        "one export directory per filesystem"
    );

    // The attacher, in node mode: the node id kubelet registered.
    let node_id = dev
        .node
        .node_get_info_opt(&Default::default(), call())
        .unwrap()
        .node_id;
    assert_eq!(node_id, NODE_ID);
    let mut publish_context = HashMap::new();
    if node_mode {
        let published = dev
            .controller
            .controller_publish_volume_opt(&attach_req(&volume, &node_id), call())
            .unwrap();
        publish_context = published.publish_context;
        assert_eq!(state.acl(fs_id), (true, vec![424242]));
        let got = dev
            .controller
            .controller_get_volume_opt(&get_volume_req(&volume.volume_id), call())
            .unwrap();
        assert_eq!(got.status.published_node_ids, vec![NODE_ID.to_string()]);
    } else {
        assert_eq!(
            state.acl(fs_id).1,
            Vec::<u64>::new(),
            "space mode never touches the ACL"
        );
    }

    // kubelet: stage once, publish into two pods, one of them read-only.
    let staging = state.staging(&volume.volume_id);
    let pod_a = state.target("pod-a", &volume.volume_id);
    let pod_b = state.target("pod-b", &volume.volume_id);
    dev.node
        .node_stage_volume_opt(&stage_req(&volume, &publish_context, &staging), call())
        .unwrap();
    assert_eq!(dev.mount_count(&staging), 1);
    dev.node
        .node_publish_volume_opt(&publish_req(&volume, &staging, &pod_a, false), call())
        .unwrap();
    dev.node
        .node_publish_volume_opt(&publish_req(&volume, &staging, &pod_b, true), call())
        .unwrap();
    assert_eq!((dev.mount_count(&pod_a), dev.mount_count(&pod_b)), (1, 1));
    assert!(!dev.read_only(&pod_a), "pod-a asked for a writable volume");
    assert!(dev.read_only(&pod_b), "pod-b asked for a read-only volume");

    // Data written through one pod is what the other reads, and it lives in
    // the volume, not in the pod's directory.
    dev.write(&pod_a.join("greeting.txt"), "hello from pod-a")
        .unwrap();
    assert_eq!(
        dev.read(&pod_b.join("greeting.txt")).unwrap(),
        "hello from pod-a"
    );
    assert!(
        !pod_a.join("greeting.txt").exists(),
        "the host sees the file under the target: not a mount"
    );
    let err = dev.write(&pod_b.join("intruder.txt"), "no").unwrap_err();
    assert_eq!(err.raw_os_error(), Some(libc::EROFS), "{err}");
    assert!(!dev.exists(&pod_a.join("intruder.txt")));

    assert_usage(&dev, &volume.volume_id, &pod_a);
    assert_usage(&dev, &volume.volume_id, &staging);

    // Teardown in kubelet's order. The staging mount keeps the data for the
    // next pod until it is unstaged.
    for target in [&pod_a, &pod_b] {
        dev.node
            .node_unpublish_volume_opt(&node_unpublish_req(&volume.volume_id, target), call())
            .unwrap();
        assert_eq!(
            dev.mount_count(target),
            0,
            "{} still mounted",
            target.display()
        );
        assert!(!dev.exists(target), "{} not removed", target.display());
    }
    assert_eq!(
        dev.read(&staging.join("greeting.txt")).unwrap(),
        "hello from pod-a"
    );
    dev.node
        .node_unstage_volume_opt(&node_unstage_req(&volume.volume_id, &staging), call())
        .unwrap();
    assert_eq!(dev.mount_count(&staging), 0);
    assert!(!dev.exists(&staging), "staging path not removed");

    if node_mode {
        dev.controller
            .controller_unpublish_volume_opt(
                &controller_unpublish_req(&volume.volume_id, &node_id),
                call(),
            )
            .unwrap();
        assert_eq!(
            state.acl(fs_id).1,
            Vec::<u64>::new(),
            "the node is still in the ACL"
        );
        let got = dev
            .controller
            .controller_get_volume_opt(&get_volume_req(&volume.volume_id), call())
            .unwrap();
        assert!(got.status.published_node_ids.is_empty(), "{got:?}");
    }

    delete_volume_as(&dev, &NO_RETRY, &volume.volume_id);
    assert_nothing_left(&state, &dev);
    let listed = dev
        .controller
        .list_snapshots_opt(&csi::ListSnapshotsRequest::new(), call())
        .unwrap();
    assert!(listed.entries.is_empty(), "{listed:?}");
}

#[test]
fn pvc_lifecycle_in_space_mode() {
    lifecycle(false);
}

#[test]
fn pvc_lifecycle_in_node_mode() {
    lifecycle(true);
}

/// The context table of behaviour.md is "written by CreateVolume (and
/// returned by ControllerGetVolume)": whoever rebuilds a volume's context
/// from ControllerGetVolume (the `client stage` command does) must get what
/// the node needs to mount it, `mtls-mode` included.
#[test]
fn controller_get_volume_returns_the_create_volume_context() {
    let (_state, dev) = start_dev("e2e-getvol-ctx", &[]);
    let created = create_volume(&dev, "pvc-context", GIB);
    assert!(
        created.volume_context.contains_key("mtls-mode"),
        "{created:?}"
    );
    let got = dev
        .controller
        .controller_get_volume_opt(&get_volume_req(&created.volume_id), call())
        .unwrap()
        .volume
        .unwrap();
    assert_eq!(got.volume_id, created.volume_id);
    assert_eq!(got.capacity_bytes, created.capacity_bytes);
    let sorted = |m: &HashMap<String, String>| {
        let mut v: Vec<_> = m.iter().map(|(k, v)| format!("{k}={v}")).collect();
        v.sort();
        v
    };
    assert_eq!(sorted(&got.volume_context), sorted(&created.volume_context));
}
