//! Stale staging mounts healed for new pods, through `linode-nfs-csi dev`
//! with real mounts in its own namespace. Dev mode's NFS is a bind of an
//! export directory; an export removed and made again (as a restore or a
//! server failover makes it, to a real NFS mount) leaves every bind of the
//! old one on a deleted directory, which the driver reports as ESTALE.

mod common;
mod e2e_support;

use common::requests::*;
use common::rpc::*;
use e2e_support::*;
use linode_nfs_csi::proto::csi;
use std::path::{Path, PathBuf};

const GIB: i64 = 1 << 30;

/// The export directory behind `volume` in dev mode.
fn export_of(state: &StateDir, volume: &csi::Volume) -> PathBuf {
    let target = &volume.volume_context["mount-target"];
    let (_, export) = target.rsplit_once(":/").expect("host:/export");
    state.path().join("exports").join(export)
}

/// Makes the export of `volume` anew, holding only `new.txt`.
fn recreate_export(state: &StateDir, volume: &csi::Volume) {
    let export = export_of(state, volume);
    std::fs::remove_dir_all(&export).unwrap();
    std::fs::create_dir(&export).unwrap();
    std::fs::write(export.join("new.txt"), "after").unwrap();
}

fn condition(dev: &Dev, volume_id: &str, path: &Path) -> csi::VolumeCondition {
    dev.node
        .node_get_volume_stats_opt(&node_stats_req(volume_id, path), call())
        .unwrap()
        .volume_condition
        .unwrap()
}

fn remounts(dev: &Dev) -> usize {
    dev.driver
        .logs()
        .lines()
        .filter(|l| l.contains("mounted it again"))
        .count()
}

#[test]
fn a_stale_staging_mount_is_healed_for_the_next_pod_while_the_first_still_reports_it() {
    let state = StateDir::new("stale-heal");
    let dev = Dev::start(&state, &[]);
    let v = create_volume(&dev, "pvc-stale", GIB);
    let staging = state.staging("v");
    let (pod_a, pod_b) = (state.target("a", "v"), state.target("b", "v"));
    mount(&dev, &v, &staging, &[&pod_a]);
    dev.write(&pod_a.join("old.txt"), "before").unwrap();
    assert!(!condition(&dev, &v.volume_id, &pod_a).abnormal);

    recreate_export(&state, &v);
    let sick = condition(&dev, &v.volume_id, &pod_a);
    assert!(sick.abnormal && sick.message.contains("stale"), "{sick:?}");

    let publish = publish_req(&v, &staging, &pod_b, false);
    retry(&SIDECAR, || {
        dev.node.node_publish_volume_opt(&publish, call())
    })
    .unwrap();
    assert_eq!(dev.read(&pod_b.join("new.txt")).unwrap(), "after");
    assert!(
        !dev.exists(&pod_b.join("old.txt")),
        "the new pod sees the export as it is now"
    );
    assert!(!condition(&dev, &v.volume_id, &pod_b).abnormal);
    let still = condition(&dev, &v.volume_id, &pod_a);
    assert!(
        still.abnormal,
        "the first pod keeps reporting its dead mount: {still:?}"
    );
    assert_eq!(remounts(&dev), 1);
    // A healthy staging mount is not mounted again.
    let pod_c = state.target("c", "v");
    let publish = publish_req(&v, &staging, &pod_c, false);
    retry(&SIDECAR, || {
        dev.node.node_publish_volume_opt(&publish, call())
    })
    .unwrap();
    assert_eq!(remounts(&dev), 1);
    unmount(&dev, &v.volume_id, &staging, &[&pod_a, &pod_b, &pod_c]);
    assert!(dev.nothing_mounted_under(&staging));
}

#[test]
fn twenty_publishes_to_a_stale_staging_mount_remount_it_once() {
    let state = StateDir::new("stale-twenty");
    let dev = Dev::start(&state, &[]);
    let v = create_volume(&dev, "pvc-twenty", GIB);
    let staging = state.staging("v");
    mount(&dev, &v, &staging, &[]);
    recreate_export(&state, &v);
    let answers: Vec<grpcio::Result<csi::NodePublishVolumeResponse>> = std::thread::scope(|s| {
        let calls: Vec<_> = (0..20)
            .map(|i| {
                let node = dev.another_node();
                let publish =
                    publish_req(&v, &staging, &state.target(&format!("p{i}"), "v"), false);
                // kubelet retries Aborted (another call holds the volume).
                s.spawn(move || retry(&SIDECAR, || node.node_publish_volume_opt(&publish, call())))
            })
            .collect();
        calls.into_iter().map(|c| c.join().unwrap()).collect()
    });
    for (i, answer) in answers.iter().enumerate() {
        if let Err(e) = answer {
            panic!("publish {i}: {:?}", code_of(e));
        }
        assert_eq!(
            dev.read(&state.target(&format!("p{i}"), "v").join("new.txt"))
                .unwrap(),
            "after"
        );
    }
    assert_eq!(remounts(&dev), 1, "one remount for twenty publishes");
}

/// Runs `f` and how long it took.
fn timed<T>(f: impl FnOnce() -> T) -> (T, std::time::Duration) {
    let started = std::time::Instant::now();
    let out = f();
    (out, started.elapsed())
}

#[test]
fn a_hung_server_leaves_stats_abnormal_new_stages_failed_in_time_and_the_node_responsive() {
    use grpcio::RpcStatusCode as Code;
    use std::time::Duration;
    let state = StateDir::new("stale-hung");
    // The emulated network without latency; a mount that gets no answer
    // fails after 3 s.
    let dev = Dev::start(
        &state,
        &[("DEV_NFS_LATENCY", "0s"), ("NFS_MOUNT_TIMEOUT", "3s")],
    );
    let v = create_volume(&dev, "pvc-hung", GIB);
    let w = create_volume(&dev, "pvc-later", GIB);
    let staging = state.staging("v");
    let pod = state.target("a", "v");
    mount(&dev, &v, &staging, &[&pod]);
    dev.write(&pod.join("before.txt"), "served").unwrap();
    assert!(!condition(&dev, &v.volume_id, &pod).abnormal);

    std::fs::write(state.path().join("nfs-hung"), "").unwrap();
    wait_for_log(&dev, "the emulated NFS servers stop answering");
    // Stats: answered within their bound (10 s), abnormal, naming why;
    // the next at once, while the first statvfs still waits.
    let (first, took) = timed(|| condition(&dev, &v.volume_id, &pod));
    assert!(first.abnormal, "{first:?}");
    assert!(took < Duration::from_secs(15), "{took:?}");
    let (again, took) = timed(|| condition(&dev, &v.volume_id, &pod));
    assert!(
        again.abnormal && took < Duration::from_secs(2),
        "{again:?} {took:?}"
    );
    // A new stage: failed within the mount timeout, nothing left mounted.
    let later = state.staging("w");
    let stage = stage_req(&w, &std::collections::HashMap::new(), &later);
    let (staged, took) = timed(|| dev.node.node_stage_volume_opt(&stage, call()));
    let e = staged.expect_err("a stage against a hung server");
    assert_eq!(code_of(&e), Code::DEADLINE_EXCEEDED, "{e:?}");
    assert!(took < Duration::from_secs(8), "{took:?}");
    assert_eq!(dev.mount_count(&later), 0);
    // Every other node RPC answers at once, several at a time.
    std::thread::scope(|s| {
        for _ in 0..10 {
            let node = dev.another_node();
            s.spawn(move || {
                let (info, took) =
                    timed(|| node.node_get_info_opt(&csi::NodeGetInfoRequest::new(), call()));
                info.unwrap();
                assert!(took < Duration::from_secs(2), "{took:?}");
            });
        }
    });
    let (caps, took) = timed(|| {
        dev.node
            .node_get_capabilities_opt(&csi::NodeGetCapabilitiesRequest::new(), call())
    });
    caps.unwrap();
    assert!(took < Duration::from_secs(2), "{took:?}");

    // The server answers again: so do the mount and the stage.
    std::fs::remove_file(state.path().join("nfs-hung")).unwrap();
    wait_for_log(&dev, "the emulated NFS servers answer again");
    common::wait_for(
        "the stats to be normal again",
        Duration::from_secs(30),
        || !condition(&dev, &v.volume_id, &pod).abnormal,
    );
    assert_eq!(dev.read(&pod.join("before.txt")).unwrap(), "served");
    retry(&SIDECAR, || dev.node.node_stage_volume_opt(&stage, call())).unwrap();
    unmount(&dev, &w.volume_id, &later, &[]);
    unmount(&dev, &v.volume_id, &staging, &[&pod]);
}

fn wait_for_log(dev: &Dev, what: &str) {
    common::wait_for(what, std::time::Duration::from_secs(10), || {
        dev.driver.logs().contains(what)
    });
}
