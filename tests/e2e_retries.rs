//! Retry storms, as a real cluster produces them: every RPC repeated ten
//! times in a row, and identical calls racing on several connections, while
//! the fake Linode API answers a share of requests with 429 or 503 and some
//! callers give up on their reply (a short deadline: the driver finishes the
//! work but the answer is lost). Callers retry Unavailable, Aborted and
//! DeadlineExceeded like the sidecars and kubelet do. The end state must be
//! exact: the expected filesystems and snapshots and no more, ACLs holding
//! exactly the published node, no mount left over.

mod common;
mod e2e_support;

use common::requests::*;
use common::rpc::*;
use e2e_support::*;
use grpcio::CallOption;
use linode_nfs_csi::proto::csi;
use std::collections::HashMap;
use std::sync::Barrier;
use std::time::Duration;

/// About one Linode request in eight fails; 429s carry `Retry-After: 1`,
/// which the client honours, so they are kept rare to keep the suite quick.
const FAULTS: &str = "429:0.02,503:0.1";
const REPEATS: usize = 10;

fn start(tag: &str) -> (StateDir, Dev) {
    start_dev(
        tag,
        &[
            ("NFS_ACCESS_POLICY_MODE", "node"),
            ("DEV_FAULTS", FAULTS),
            ("DEV_ACTIVATION_DELAY", "300ms"),
        ],
    )
}

/// Calls `f` REPEATS times (each call retried while transient) and checks
/// every answer equals the first.
fn repeated<T: PartialEq + std::fmt::Debug>(
    what: &str,
    mut f: impl FnMut() -> grpcio::Result<T>,
) -> T {
    let first = retry(&SIDECAR, &mut f).unwrap_or_else(|e| panic!("{what}: {e:?}"));
    for n in 2..=REPEATS {
        let again = retry(&SIDECAR, &mut f).unwrap_or_else(|e| panic!("{what} (call {n}): {e:?}"));
        assert_eq!(again, first, "{what}: call {n} answered differently");
    }
    first
}

/// Runs `f(i)` on `n` threads released together; returns results in order.
fn storm<T: Send>(n: usize, f: impl Fn(usize) -> T + Sync) -> Vec<T> {
    let barrier = Barrier::new(n);
    std::thread::scope(|s| {
        let handles: Vec<_> = (0..n)
            .map(|i| {
                let (barrier, f) = (&barrier, &f);
                s.spawn(move || {
                    barrier.wait();
                    f(i)
                })
            })
            .collect();
        handles
            .into_iter()
            .map(|h| h.join().expect("storm thread panicked"))
            .collect()
    })
}

fn assert_faults_were_injected(dev: &Dev) {
    let logs = dev.driver.logs();
    assert!(
        logs.contains("answered 503"),
        "DEV_FAULTS injected nothing; the storm proved nothing"
    );
}

#[test]
fn every_rpc_repeated_ten_times_under_injected_faults() {
    let (state, dev) = start("e2e-repeat");
    let (c, n, i) = (&dev.controller, &dev.node, &dev.identity);
    repeated("Probe", || i.probe_opt(&Default::default(), call()));
    repeated("GetPluginInfo", || {
        i.get_plugin_info_opt(&Default::default(), call())
    });
    repeated("GetPluginCapabilities", || {
        i.get_plugin_capabilities_opt(&Default::default(), call())
    });
    repeated("ControllerGetCapabilities", || {
        c.controller_get_capabilities_opt(&Default::default(), call())
    });
    repeated("NodeGetCapabilities", || {
        n.node_get_capabilities_opt(&Default::default(), call())
    });

    let req = create_req("pvc-repeat", GIB);
    let volume = repeated("CreateVolume", || {
        c.create_volume_opt(&req, call()).map(|r| r.volume.unwrap())
    });
    let fs_id = filesystem_of(&volume.volume_id);
    assert_eq!(state.filesystems().len(), 1, "{:?}", state.filesystems());

    let mut validate = csi::ValidateVolumeCapabilitiesRequest::new();
    validate.volume_id = volume.volume_id.clone();
    validate.volume_capabilities = vec![rwx()];
    let confirmed = repeated("ValidateVolumeCapabilities", || {
        c.validate_volume_capabilities_opt(&validate, call())
    });
    assert!(confirmed.confirmed.is_some(), "{confirmed:?}");
    let get = get_volume_req(&volume.volume_id);
    repeated("ControllerGetVolume", || {
        c.controller_get_volume_opt(&get, call())
            .map(|r| r.volume.unwrap())
    });

    let node_id = repeated("NodeGetInfo", || {
        n.node_get_info_opt(&Default::default(), call())
    })
    .node_id;
    let publish = attach_req(&volume, &node_id);
    let publish_context = repeated("ControllerPublishVolume", || {
        c.controller_publish_volume_opt(&publish, call())
    })
    .publish_context;
    assert_eq!(
        state.acl(fs_id),
        (true, vec![424242]),
        "one node, published ten times"
    );

    let staging = state.staging(&volume.volume_id);
    let stage = stage_req(&volume, &publish_context, &staging);
    repeated("NodeStageVolume", || {
        n.node_stage_volume_opt(&stage, call())
    });
    assert_eq!(
        dev.mount_count(&staging),
        1,
        "repeated stages stacked mounts"
    );
    let (pod_a, pod_b) = (
        state.target("pod-a", &volume.volume_id),
        state.target("pod-b", &volume.volume_id),
    );
    for (target, readonly) in [(&pod_a, false), (&pod_b, true)] {
        let publish = publish_req(&volume, &staging, target, readonly);
        repeated("NodePublishVolume", || {
            n.node_publish_volume_opt(&publish, call())
        });
        assert_eq!(
            dev.mount_count(target),
            1,
            "repeated publishes stacked mounts"
        );
    }
    assert!(dev.read_only(&pod_b) && !dev.read_only(&pod_a));
    dev.write(&pod_a.join("f"), "storm").unwrap();
    assert_eq!(dev.read(&pod_b.join("f")).unwrap(), "storm");
    let stats = node_stats_req(&volume.volume_id, &pod_a);
    for _ in 0..REPEATS {
        retry(&SIDECAR, || n.node_get_volume_stats_opt(&stats, call())).unwrap();
    }

    // Asked again until ready, then as often again as every other call.
    let first = snapshot_until_ready(&dev, "snap-repeat", &volume.volume_id);
    let snap = snapshot_req("snap-repeat", &volume.volume_id);
    let again = repeated("CreateSnapshot (ready)", || {
        c.create_snapshot_opt(&snap, call())
            .map(|r| r.snapshot.unwrap().snapshot_id)
    });
    assert_eq!(again, first.snapshot_id, "a repeat made another snapshot");
    assert_eq!(state.snapshots().len(), 1, "{:?}", state.snapshots());
    let by_source = list_snapshots_req("", &volume.volume_id);
    let listed = repeated("ListSnapshots", || {
        c.list_snapshots_opt(&by_source, call()).map(|r| {
            r.entries
                .iter()
                .map(|e| e.snapshot.snapshot_id.clone())
                .collect::<Vec<_>>()
        })
    });
    assert_eq!(listed, vec![first.snapshot_id.clone()]);
    let delete_snap = delete_snapshot_req(&first.snapshot_id);
    repeated("DeleteSnapshot", || {
        c.delete_snapshot_opt(&delete_snap, call())
    });
    assert!(state.snapshots().is_empty());

    for target in [&pod_a, &pod_b] {
        let req = node_unpublish_req(&volume.volume_id, target);
        repeated("NodeUnpublishVolume", || {
            n.node_unpublish_volume_opt(&req, call())
        });
        assert!(!dev.exists(target));
    }
    let unstage = node_unstage_req(&volume.volume_id, &staging);
    repeated("NodeUnstageVolume", || {
        n.node_unstage_volume_opt(&unstage, call())
    });
    let unpublish = controller_unpublish_req(&volume.volume_id, &node_id);
    repeated("ControllerUnpublishVolume", || {
        c.controller_unpublish_volume_opt(&unpublish, call())
    });
    assert_eq!(
        state.acl(fs_id).1,
        Vec::<u64>::new(),
        "the node is still in the ACL"
    );
    let delete = delete_req(&volume.volume_id);
    repeated("DeleteVolume", || c.delete_volume_opt(&delete, call()));
    delete_volume(&dev, &volume.volume_id);

    assert_nothing_left(&state, &dev);
    assert_faults_were_injected(&dev);
}

/// Identical calls from `CALLERS` connections at once, for each of `NAMES`.
const CALLERS: usize = 4;
const NAMES: [&str; 3] = ["pvc-dup-a", "pvc-dup-b", "pvc-dup-c"];

/// A call whose caller stops waiting almost at once, as when a reply is
/// lost: the driver carries on, the caller only learns it by retrying.
fn impatient() -> CallOption {
    CallOption::default().timeout(Duration::from_millis(30))
}

#[test]
fn interleaved_duplicates_on_several_connections() {
    let (state, dev) = start("e2e-dup");

    // CreateVolume: every caller of one name must get the same volume, even
    // the ones whose first attempt lost its reply.
    let created = storm(NAMES.len() * CALLERS, |i| {
        let c = dev.another_controller();
        let req = create_req(NAMES[i % NAMES.len()], GIB);
        if i < NAMES.len() {
            let _ = c.create_volume_opt(&req, impatient());
        }
        retry(&SIDECAR, || c.create_volume_opt(&req, call()))
            .unwrap()
            .volume
            .unwrap()
    });
    let volumes: Vec<csi::Volume> = created[..NAMES.len()].to_vec();
    for (i, v) in created.iter().enumerate() {
        assert_eq!(
            v,
            &volumes[i % NAMES.len()],
            "callers of {} disagree",
            NAMES[i % NAMES.len()]
        );
    }
    let mut labels: Vec<String> = state.filesystems().into_iter().map(|(_, l, _)| l).collect();
    labels.sort();
    assert_eq!(labels, NAMES, "exactly one filesystem per name");

    let node_id = dev
        .node
        .node_get_info_opt(&Default::default(), call())
        .unwrap()
        .node_id;
    let each = |f: &(dyn Fn(&csi::Volume, usize) + Sync)| {
        storm(NAMES.len() * CALLERS, |i| f(&volumes[i % NAMES.len()], i));
    };
    each(&|v, i| {
        let c = dev.another_controller();
        let req = attach_req(v, &node_id);
        if i < NAMES.len() {
            let _ = c.controller_publish_volume_opt(&req, impatient());
        }
        retry(&SIDECAR, || c.controller_publish_volume_opt(&req, call())).unwrap();
    });
    for v in &volumes {
        assert_eq!(state.acl(filesystem_of(&v.volume_id)), (true, vec![424242]));
    }

    let staging = |v: &csi::Volume| state.staging(&v.volume_id);
    let target = |v: &csi::Volume| state.target("pod", &v.volume_id);
    each(&|v, _| {
        let n = dev.another_node();
        let req = stage_req(v, &HashMap::new(), &staging(v));
        retry(&SIDECAR, || n.node_stage_volume_opt(&req, call())).unwrap();
    });
    each(&|v, _| {
        let n = dev.another_node();
        let req = publish_req(v, &staging(v), &target(v), false);
        retry(&SIDECAR, || n.node_publish_volume_opt(&req, call())).unwrap();
    });
    for v in &volumes {
        assert_eq!(
            dev.mount_count(&staging(v)),
            1,
            "racing stages stacked mounts"
        );
        assert_eq!(
            dev.mount_count(&target(v)),
            1,
            "racing publishes stacked mounts"
        );
        dev.write(&target(v).join("name"), &v.volume_id).unwrap();
    }
    for v in &volumes {
        assert_eq!(
            dev.read(&target(v).join("name")).unwrap(),
            v.volume_id,
            "volumes got crossed"
        );
    }

    let snapshots = storm(NAMES.len() * CALLERS, |i| {
        let c = dev.another_controller();
        let v = &volumes[i % NAMES.len()];
        let req = snapshot_req(&format!("snap-{}", NAMES[i % NAMES.len()]), &v.volume_id);
        retry(&SIDECAR, || c.create_snapshot_opt(&req, call()))
            .unwrap()
            .snapshot
            .unwrap()
            .snapshot_id
    });
    for (i, id) in snapshots.iter().enumerate() {
        assert_eq!(id, &snapshots[i % NAMES.len()]);
    }
    assert_eq!(
        state.snapshots().len(),
        NAMES.len(),
        "{:?}",
        state.snapshots()
    );

    // Teardown, every step raced the same way.
    let snapshot_of =
        |v: &csi::Volume| snapshots[volumes.iter().position(|x| x == v).unwrap()].clone();
    each(&|v, _| {
        let c = dev.another_controller();
        let req = delete_snapshot_req(&snapshot_of(v));
        retry(&SIDECAR, || c.delete_snapshot_opt(&req, call())).unwrap();
    });
    each(&|v, _| {
        let n = dev.another_node();
        let req = node_unpublish_req(&v.volume_id, &target(v));
        retry(&SIDECAR, || n.node_unpublish_volume_opt(&req, call())).unwrap();
    });
    each(&|v, _| {
        let n = dev.another_node();
        let req = node_unstage_req(&v.volume_id, &staging(v));
        retry(&SIDECAR, || n.node_unstage_volume_opt(&req, call())).unwrap();
    });
    for v in &volumes {
        for p in [staging(v), target(v)] {
            assert!(!dev.exists(&p), "{} not removed", p.display());
        }
    }
    each(&|v, _| {
        let c = dev.another_controller();
        let req = controller_unpublish_req(&v.volume_id, &node_id);
        retry(&SIDECAR, || c.controller_unpublish_volume_opt(&req, call())).unwrap();
    });
    for v in &volumes {
        assert_eq!(state.acl(filesystem_of(&v.volume_id)).1, Vec::<u64>::new());
    }
    each(&|v, _| {
        let c = dev.another_controller();
        let req = delete_req(&v.volume_id);
        retry(&SIDECAR, || c.delete_volume_opt(&req, call())).unwrap();
    });
    for v in &volumes {
        delete_volume(&dev, &v.volume_id);
    }

    assert_nothing_left(&state, &dev);
    assert_faults_were_injected(&dev);
}
