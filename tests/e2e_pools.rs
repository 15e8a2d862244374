//! A pool of shared filesystems end to end, against `linode-nfs-csi dev`
//! over gRPC only: a volume of a class naming an admin's parent moves to a
//! pool the way docs/shared-filesystems.md says (snapshot, restore with the
//! pool class), lands on a filesystem the driver made, is staged and
//! published by the node like any directory volume, and its pool
//! filesystem outlives it until the upkeep prunes it.

mod common;
mod e2e_support;

use common::requests::*;
use common::rpc::*;
use common::wait_for;
use e2e_support::*;
use linode_nfs_csi::proto::csi;
use std::collections::HashMap;
use std::time::Duration;

fn pool_params() -> HashMap<String, String> {
    let mut params = dev_params();
    for (k, v) in [
        ("volume-type", "subdirectory"),
        ("shared-filesystem-pool", "moved"),
        ("pool-filesystem-size", "4Gi"),
    ] {
        params.insert(format!("linodenfs.csi.linode.com/{k}"), v.to_string());
    }
    params
}

fn req(name: &str, params: HashMap<String, String>) -> csi::CreateVolumeRequest {
    let mut req = create_req(name, GIB);
    req.parameters = params;
    req
}

#[test]
fn a_volume_moves_from_a_named_parent_to_a_pool_by_snapshot_and_restore() {
    let (state, dev) = start_dev(
        "pool-move",
        &[
            ("MAINTENANCE_INTERVAL", "200ms"),
            ("POOL_EMPTY_GRACE", "1s"),
        ],
    );
    let old = dev.create(&req("pvc-old", subdirectory_params()));
    let old_dir = state
        .shared_base()
        .join(old.volume_id.rsplit('/').next().unwrap());
    std::fs::write(old_dir.join("data"), "carried over").unwrap();
    let snap = snapshot_until_ready(&dev, "snap-old", &old.volume_id);

    let moved = dev.create(&from_snapshot(
        req("pvc-new", pool_params()),
        &snap.snapshot_id,
    ));
    let pool_fs = filesystem_of(&moved.volume_id);
    let (shared, _) = state.shared_parent();
    assert_ne!(pool_fs, shared, "{}", moved.volume_id);
    let label = state
        .filesystems()
        .into_iter()
        .find(|f| f.0 == pool_fs)
        .map(|f| f.1)
        .unwrap();
    assert_eq!(label, format!("csi-pool-{}-moved-1", common::CLUSTER_ID));

    // The node mounts it like any directory volume.
    let staging = state.staging(&moved.volume_id);
    let pod = state.target("pod", &moved.volume_id);
    dev.node
        .node_stage_volume_opt(&stage_req(&moved, &HashMap::new(), &staging), call())
        .unwrap();
    dev.node
        .node_publish_volume_opt(&publish_req(&moved, &staging, &pod, false), call())
        .unwrap();
    assert_eq!(dev.read(&pod.join("data")).unwrap(), "carried over");
    dev.node
        .node_unpublish_volume_opt(&node_unpublish_req(&moved.volume_id, &pod), call())
        .unwrap();
    dev.node
        .node_unstage_volume_opt(&node_unstage_req(&moved.volume_id, &staging), call())
        .unwrap();

    // The old volume and its snapshot go; the pool filesystem stays while
    // it holds the new volume, and is pruned once it holds nothing.
    dev.controller
        .delete_snapshot_opt(&delete_snapshot_req(&snap.snapshot_id), call())
        .unwrap();
    delete_volume(&dev, &old.volume_id);
    let live = |id: u64| {
        state
            .filesystems()
            .into_iter()
            .any(|f| f.0 == id && f.2 != "Deleting")
    };
    assert!(live(pool_fs));
    delete_volume(&dev, &moved.volume_id);
    wait_for(
        "the empty pool filesystem's prune",
        Duration::from_secs(60),
        || !live(pool_fs),
    );
    let parent = state.filesystem(shared);
    assert_eq!(
        parent["phase"], "Active",
        "the admin's parent is never deleted"
    );
}

#[test]
fn in_node_mode_dev_mode_admits_its_controller_to_a_new_pool_filesystem() {
    let (state, dev) = start_dev("pool-node", &[("NFS_ACCESS_POLICY_MODE", "node")]);
    let volume = dev.create(&req("pvc-a", pool_params()));
    let fs = filesystem_of(&volume.volume_id);
    assert_eq!(
        state.acl(fs),
        (true, vec![NODE_ID.parse().unwrap()]),
        "dev mode's controller runs on its one Linode"
    );
}
