//! Upgrading from a driver without cluster identities (issue 35): dev
//! mode started on `tests/fixtures/dev-state-b24a45b`, the state dev mode
//! of main b24a45b left after it made a whole-filesystem volume, a
//! directory volume on the named parent `dev-shared`, one in the pool
//! `old`, data in each, and a snapshot of the first two (then was killed).
//! None of it carries an identity. After the upgrade each volume is listed,
//! staged and published with its data, expanded where it can grow,
//! snapshotted, restored from its old snapshot, and deleted; nothing is
//! re-marked, and the old pool filesystem is left for the admin.

mod common;
mod e2e_support;

use common::requests::*;
use common::rpc::*;
use e2e_support::*;
use linode_nfs_csi::proto::csi;
use std::collections::{BTreeSet, HashMap};
use std::path::Path;

const WHOLE: &str = "1/101";
const ON_PARENT: &str = "1/100/pvc-dir";
const POOLED: &str = "1/102/pvc-pooled";
const OLD_SNAPSHOTS: [&str; 2] = ["1/101/9001", "1/100/9002/snap-dir"];
const GIB: i64 = 1 << 30;

fn copy_tree(from: &Path, to: &Path) {
    std::fs::create_dir_all(to).unwrap();
    for entry in std::fs::read_dir(from).unwrap() {
        let entry = entry.unwrap();
        let target = to.join(entry.file_name());
        if entry.file_type().unwrap().is_dir() {
            copy_tree(&entry.path(), &target);
        } else {
            std::fs::copy(entry.path(), &target).unwrap();
        }
    }
}

fn listed(dev: &Dev) -> BTreeSet<String> {
    dev.controller
        .list_volumes_opt(&csi::ListVolumesRequest::new(), call())
        .unwrap()
        .entries
        .into_iter()
        .map(|e| e.volume.unwrap().volume_id)
        .collect()
}

fn volume(dev: &Dev, id: &str) -> csi::Volume {
    dev.controller
        .controller_get_volume_opt(&get_volume_req(id), call())
        .unwrap_or_else(|e| panic!("ControllerGetVolume {id}: {e:?}"))
        .volume
        .unwrap()
}

/// Stages and publishes `volume` as kubelet would, reads `data` from the
/// pod's view, and takes it down again.
fn reads(dev: &Dev, state: &StateDir, volume: &csi::Volume, data: &str) {
    let id = &volume.volume_id;
    let (staging, pod) = (state.staging(id), state.target("pod", id));
    dev.node
        .node_stage_volume_opt(&stage_req(volume, &HashMap::new(), &staging), call())
        .unwrap_or_else(|e| panic!("NodeStageVolume {id}: {e:?}"));
    dev.node
        .node_publish_volume_opt(&publish_req(volume, &staging, &pod, false), call())
        .unwrap_or_else(|e| panic!("NodePublishVolume {id}: {e:?}"));
    assert_eq!(dev.read(&pod.join("data")).unwrap(), data, "{id}");
    dev.node
        .node_unpublish_volume_opt(&node_unpublish_req(id, &pod), call())
        .unwrap();
    dev.node
        .node_unstage_volume_opt(&node_unstage_req(id, &staging), call())
        .unwrap();
}

#[test]
fn volumes_and_snapshots_made_by_b24a45b_keep_working_after_the_upgrade() {
    let state = StateDir::new("upgrade-b24a45b");
    let fixture = Path::new(env!("CARGO_MANIFEST_DIR")).join("tests/fixtures/dev-state-b24a45b");
    copy_tree(&fixture, &state.path());
    // The parents' mount points the old process left (empty directories,
    // which git does not keep): what says which parents it used.
    for parent in ["1-100", "1-102"] {
        std::fs::create_dir_all(state.path().join("shares").join(parent)).unwrap();
    }
    let dev = Dev::start(&state, &[("VOLUME_EXPANSION", "subdirectory")]);
    let old: BTreeSet<String> = [WHOLE, ON_PARENT, POOLED].map(String::from).into();
    assert_eq!(listed(&dev), old);
    let snapshots: BTreeSet<String> = dev
        .controller
        .list_snapshots_opt(&list_snapshots_req("", ""), call())
        .unwrap()
        .entries
        .into_iter()
        .map(|e| e.snapshot.unwrap().snapshot_id)
        .collect();
    assert_eq!(snapshots, OLD_SNAPSHOTS.map(String::from).into());

    for (id, data) in [
        (WHOLE, "whole data\n"),
        (ON_PARENT, "dir data\n"),
        (POOLED, "pool data\n"),
    ] {
        reads(&dev, &state, &volume(&dev, id), data);
    }
    for id in [ON_PARENT, POOLED] {
        let grown = dev
            .controller
            .controller_expand_volume_opt(&expand_req(id, 2 * GIB), call())
            .unwrap_or_else(|e| panic!("ControllerExpandVolume {id}: {e:?}"));
        assert_eq!(grown.capacity_bytes, 2 * GIB);
    }

    // Restores of the old snapshots, and a new snapshot of an old volume.
    let restore = |name: &str, snapshot: &str, params: &[(&str, &str)]| {
        let mut req = from_snapshot(volume_req_in(name, params), snapshot);
        req.capacity_range.as_mut().unwrap().required_bytes = GIB;
        retry(&SIDECAR, || dev.controller.create_volume_opt(&req, call()))
            .unwrap_or_else(|e| panic!("restore {name} from {snapshot}: {e:?}"))
            .volume
            .unwrap()
    };
    let whole_again = restore("pvc-whole-again", OLD_SNAPSHOTS[0], &[]);
    reads(&dev, &state, &whole_again, "whole data\n");
    let dir_again = restore(
        "pvc-dir-again",
        OLD_SNAPSHOTS[1],
        &[
            ("linodenfs.csi.linode.com/volume-type", "subdirectory"),
            (
                "linodenfs.csi.linode.com/shared-filesystem-label",
                "dev-shared",
            ),
        ],
    );
    reads(&dev, &state, &dir_again, "dir data\n");
    let fresh = retry(&SIDECAR, || {
        dev.controller
            .create_snapshot_opt(&snapshot_req("snap-new", ON_PARENT), call())
    })
    .unwrap()
    .snapshot
    .unwrap();

    // Nothing re-marked what the old version made.
    let export = state.path().join("exports/dev-shared-64/csi-volumes");
    let marker = std::fs::read_to_string(export.join(".owners/pvc-dir")).unwrap();
    assert!(!marker.contains("cluster:"), "{marker}");

    // Everything goes, old and new.
    for id in OLD_SNAPSHOTS
        .iter()
        .copied()
        .chain([fresh.snapshot_id.as_str()])
    {
        retry(&SIDECAR, || {
            dev.controller
                .delete_snapshot_opt(&delete_snapshot_req(id), call())
        })
        .unwrap_or_else(|e| panic!("DeleteSnapshot {id}: {e:?}"));
    }
    for id in old
        .iter()
        .map(String::as_str)
        .chain([whole_again.volume_id.as_str(), dir_again.volume_id.as_str()])
    {
        retry(&SIDECAR, || {
            dev.controller.delete_volume_opt(&delete_req(id), call())
        })
        .unwrap_or_else(|e| panic!("DeleteVolume {id}: {e:?}"));
    }
    assert_eq!(listed(&dev), BTreeSet::new());
    assert!(!export.join("pvc-dir").exists());
    // The old pool filesystem is no member of this cluster's pool: the
    // driver never prunes it (docs/upgrade-uninstall.md).
    assert!(state.path().join("exports/csi-pool-old-1-66").is_dir());
}

/// `name` with the dev Space and `params` on top.
fn volume_req_in(name: &str, params: &[(&str, &str)]) -> csi::CreateVolumeRequest {
    let mut req = common::controller::volume_req(
        name,
        &[(
            "linodenfs.csi.linode.com/space-label",
            "dev-space".to_string(),
        )],
    );
    for (k, v) in params {
        req.parameters.insert(k.to_string(), v.to_string());
    }
    let mut range = csi::CapacityRange::new();
    range.required_bytes = GIB;
    req.capacity_range = Some(range).into();
    req
}
