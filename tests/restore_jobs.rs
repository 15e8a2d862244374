//! Restores that take long, against `linode-nfs-csi dev`: a temporary
//! clone that outlasts several waits is waited for again and POSTed once,
//! adopted by the next process when the controller is killed mid-clone,
//! and replaced (within its bound) when the API fails it; and a fill whose
//! claim is gone (deleted, or made again under its name) ends and leaves
//! nothing, while one whose claim is there, however late the API lists
//! it, is never ended. The claims live in dev mode's fake Kubernetes API,
//! made and deleted over HTTP as users do.

mod common;
mod e2e_support;

use common::requests::*;
use common::resizer::ApiServer;
use common::rpc::*;
use common::wait_for;
use e2e_support::restores::*;
use e2e_support::*;
use grpcio::RpcStatusCode as Code;
use linode_nfs_csi::proto::csi;
use serde_json::{json, Value};
use std::time::Duration;

/// [`created_retrying`] on dev mode's controller, each try bounded as a
/// sidecar's default call is.
fn created(dev: &Dev, req: &csi::CreateVolumeRequest) -> (csi::Volume, Vec<String>) {
    created_retrying(&dev.controller, req, call())
}

/// Temporary filesystems the fake was ever asked to make, by the driver's log.
fn clones_posted(dev: &Dev) -> usize {
    dev.driver
        .logs()
        .matches("into temporary filesystem")
        .count()
}

/// Asserts that `req` restores the tree `at_snapshot` in dev mode `dev`,
/// whose log shows `clones` temporary filesystems POSTed, and that none
/// is left afterwards.
fn restored_with_clones(
    state: &StateDir,
    dev: &Dev,
    req: &csi::CreateVolumeRequest,
    at_snapshot: &std::collections::BTreeMap<String, String>,
    clones: usize,
) {
    let (restored, _) = created(dev, req);
    assert_eq!(tree(&dir_of(state, &restored)), *at_snapshot);
    assert_eq!(clones_posted(dev), clones, "{}", dev.driver.logs());
    no_temporary_left(state);
}

/// The environment of a restore whose clone (about 6 s under
/// `slow-clones` for `bulky_snapshot`) takes three waits of 2 s.
const LONG_CLONE: [(&str, &str); 2] =
    [("DEV_QUIRKS", "slow-clones"), ("LINODE_WAIT_TIMEOUT", "2s")];

#[test]
fn a_clone_that_outlasts_three_waits_is_waited_for_again_and_posted_once() {
    let (state, dev, at_snapshot, snap) = bulky_snapshot("jobs-long-clone", &LONG_CLONE);
    let req = from_snapshot(subdir_req("pvc-restored", GIB), &snap.snapshot_id);
    let (restored, said) = created(&dev, &req);
    assert_eq!(tree(&dir_of(&state, &restored)), at_snapshot);
    let logs = dev.driver.logs();
    assert_eq!(clones_posted(&dev), 1, "one temporary filesystem:\n{logs}");
    assert!(
        logs.contains("is still being made; waiting for it again"),
        "the clone outlasted no wait:\n{logs}"
    );
    assert!(
        said.iter()
            .any(|m| m.contains("still being filled: cloning (temporary filesystem")),
        "no call was told the job is cloning: {said:?}"
    );
    no_temporary_left(&state);
}

#[test]
fn a_controller_killed_while_its_clone_is_creating_leaves_it_for_the_next_to_adopt() {
    let (state, mut first, at_snapshot, snap) = bulky_snapshot("jobs-kill-clone", &LONG_CLONE);
    let req = given_up_mid_clone(&first, &snap);
    first.driver.kill();
    let posted = temporaries(&state);
    assert!(
        matches!(posted.as_slice(), [(_, _, phase)] if phase == "Creating"),
        "{posted:?}"
    );
    let env: Vec<(&str, &str)> = LONG_CLONE
        .iter()
        .copied()
        .chain([("MAINTENANCE_INTERVAL", "1s")])
        .collect();
    let second = Dev::start(&state, &env);
    restored_with_clones(&state, &second, &req, &at_snapshot, 0);
}

#[test]
fn a_clone_the_api_fails_is_replaced_and_the_restore_finishes() {
    let (state, dev, at_snapshot, snap) =
        bulky_snapshot("jobs-failed-clone", &[("DEV_QUIRKS", "failing-clones=1")]);
    let req = from_snapshot(subdir_req("pvc-restored", GIB), &snap.snapshot_id);
    restored_with_clones(&state, &dev, &req, &at_snapshot, 2);
}

#[test]
fn clones_that_keep_failing_end_the_restore_after_three_replacements_leaving_nothing() {
    let (state, dev, _, snap) = bulky_snapshot(
        "jobs-failing-clones",
        &[("DEV_QUIRKS", "failing-clones=100")],
    );
    let req = from_snapshot(subdir_req("pvc-restored", GIB), &snap.snapshot_id);
    let answer = dev.controller.create_volume_opt(&req, call());
    assert_eq!(
        err_code(answer),
        Code::FAILED_PRECONDITION,
        "{}",
        dev.driver.logs()
    );
    assert_eq!(clones_posted(&dev), 4, "a clone and three replacements");
    nothing_left_of(&state, "pvc-restored");
    no_temporary_left(&state);
}

/// Dev mode with the fills' claims watched every half second and a claim
/// missing for a second taken as gone, plus `extra`.
fn watched(tag: &str, extra: &[(&str, &str)]) -> (StateDir, Dev, ApiServer) {
    let env: Vec<(&str, &str)> = [
        ("DEV_QUIRKS", "slow-clones"),
        ("FILL_PROGRESS_INTERVAL", "500ms"),
        ("FILL_CLAIM_GRACE", "1s"),
        ("MAINTENANCE_INTERVAL", "1s"),
    ]
    .into_iter()
    .chain(extra.iter().copied())
    .collect();
    let (state, dev) = start_dev(tag, &env);
    let api = ApiServer::from_kubeconfig(&state.path().join("kubeconfig"));
    (state, dev, api)
}

const CLAIMS: &str = "/api/v1/namespaces/team/persistentvolumeclaims";

/// Makes claim `team/<name>` as a user does: its UID.
fn make_claim(api: &ApiServer, name: &str) -> String {
    let claim = json!({
        "apiVersion": "v1", "kind": "PersistentVolumeClaim",
        "metadata": {"name": name, "namespace": "team"},
        "spec": {"accessModes": ["ReadWriteMany"],
                 "resources": {"requests": {"storage": "1Gi"}}}
    });
    let (code, made) = api.send("POST", CLAIMS, Some(&claim));
    assert_eq!(code, 201, "{made}");
    made["metadata"]["uid"].as_str().unwrap().to_string()
}

fn delete_claim(api: &ApiServer, name: &str) {
    let (code, answer) = api.send("DELETE", &format!("{CLAIMS}/{name}"), None);
    assert_eq!(code, 200, "{answer}");
}

/// The restore of `snap` the provisioner asks for claim `team/<claim>`
/// of UID `uid`: its volume is named after the PV, `pvc-<uid>`.
fn claimed_restore(snap: &csi::Snapshot, claim: &str, uid: &str) -> csi::CreateVolumeRequest {
    let pv = format!("pvc-{uid}");
    let mut req = from_snapshot(subdir_req(&pv, GIB), &snap.snapshot_id);
    for (k, v) in [
        ("csi.storage.k8s.io/pvc/name", claim),
        ("csi.storage.k8s.io/pvc/namespace", "team"),
        ("csi.storage.k8s.io/pv/name", pv.as_str()),
    ] {
        req.parameters.insert(k.into(), v.into());
    }
    req
}

/// Asserts that the restore into `name` left nothing on the backend: no
/// directory, marker or quota, no temporary filesystem, and no hold on
/// the parent snapshot (deleting the source's snapshot deletes it).
fn restore_left_nothing(state: &StateDir, dev: &Dev, name: &str, snap: &csi::Snapshot) {
    wait_for(
        "the volume's data, marker and quota to go",
        Duration::from_secs(30),
        || {
            let base = state.shared_base();
            !base.join(name).exists()
                && !base.join(".owners").join(name).exists()
                && state.quotas().iter().all(|q| !q.1.contains(name))
        },
    );
    nothing_left_of(state, name);
    no_temporary_left(state);
    dev.controller
        .delete_snapshot_opt(&delete_snapshot_req(&snap.snapshot_id), call())
        .unwrap();
    wait_for("the parent snapshot to go", Duration::from_secs(30), || {
        live_snapshots(state).is_empty()
    });
}

#[test]
fn a_restore_whose_claim_is_deleted_while_its_clone_is_made_ends_and_leaves_nothing() {
    let (state, dev, api) = watched("jobs-claim-gone-clone", &[]);
    let (_, snap) = bulky_source(&state, &dev);
    let uid = make_claim(&api, "data");
    let req = claimed_restore(&snap, "data", &uid);
    let name = format!("pvc-{uid}");
    given_up_once(&dev, &req, "into temporary filesystem");
    delete_claim(&api, "data");
    restore_left_nothing(&state, &dev, &name, &snap);
    let logs = dev.driver.logs();
    assert!(logs.contains("claim team/data was deleted"), "{logs}");
    assert_eq!(clones_posted(&dev), 1, "{logs}");
    // The provisioner's call still in flight for the deleted claim.
    let again = dev.controller.create_volume_opt(&req, call());
    let e = again.expect_err("a fill nobody wants was begun again");
    assert_eq!(code_of(&e), Code::FAILED_PRECONDITION, "{e:?}");
    assert!(
        message_of(&e).contains("claim team/data was deleted"),
        "{e:?}"
    );
}

#[test]
fn a_claim_made_again_under_its_name_ends_the_old_fill_and_gets_a_volume_of_its_own() {
    let (state, dev, api) = watched("jobs-claim-again", &[]);
    let (at_snapshot, snap) = bulky_source(&state, &dev);
    let old = make_claim(&api, "data");
    let req = claimed_restore(&snap, "data", &old);
    given_up_once(&dev, &req, "fill job started");
    delete_claim(&api, "data");
    let new = make_claim(&api, "data");
    assert_ne!(old, new);
    let (restored, _) = created(&dev, &claimed_restore(&snap, "data", &new));
    assert_eq!(
        restored.volume_id.rsplit('/').next(),
        Some(format!("pvc-{new}").as_str())
    );
    assert_eq!(tree(&dir_of(&state, &restored)), at_snapshot);
    let old_name = format!("pvc-{old}");
    wait_for("the old fill to end", Duration::from_secs(30), || {
        !state.shared_base().join(&old_name).exists()
    });
    nothing_left_of(&state, &old_name);
    let logs = dev.driver.logs();
    assert!(logs.contains("was deleted and made again"), "{logs}");
}

#[test]
fn a_restore_whose_claim_the_api_lists_late_is_never_ended() {
    // Each list of claims answers 3 s late, as of when it was asked; the
    // claim itself is made a moment after the fill began.
    let (state, dev, api) = watched("jobs-claim-late", &[("DEV_CLAIM_LIST_DELAY", "3s")]);
    let (at_snapshot, snap) = bulky_source(&state, &dev);
    let uid = "0f1e2d3c-4b5a-4968-8776-65544332211f";
    let req = claimed_restore(&snap, "data", uid);
    given_up_once(&dev, &req, "fill job started");
    let claim = json!({
        "apiVersion": "v1", "kind": "PersistentVolumeClaim",
        "metadata": {"name": "data", "namespace": "team"},
        "spec": {"volumeName": format!("pvc-{uid}"), "accessModes": ["ReadWriteMany"],
                 "resources": {"requests": {"storage": "1Gi"}}}
    });
    let (code, made): (u16, Value) = api.send("POST", CLAIMS, Some(&claim));
    assert_eq!(code, 201, "{made}");
    let (restored, _) = created(&dev, &req);
    assert_eq!(tree(&dir_of(&state, &restored)), at_snapshot);
    let logs = dev.driver.logs();
    assert!(!logs.contains("its claim is gone"), "{logs}");
}

/// `count` small files in directories of 200 under `dir`, written on the
/// export directly (not across the emulated network).
fn small_files(dir: &std::path::Path, count: usize) {
    for i in 0..count {
        let sub = dir.join(format!("many/{}", i / 200));
        if i % 200 == 0 {
            std::fs::create_dir_all(&sub).unwrap();
        }
        std::fs::write(sub.join(i.to_string()), format!("file {i}")).unwrap();
    }
}

/// A restore whose copy takes seconds: its source holds 1,200 small files
/// besides the usual tree, and every file operation of the copy costs a
/// round trip of 1 ms on the emulated network, two at a time.
fn slow_copy(tag: &str, extra: &[(&str, &str)]) -> (StateDir, Dev, ApiServer, csi::Snapshot) {
    let env: Vec<(&str, &str)> = [
        ("DEV_NFS_LATENCY", "1ms"),
        ("COPY_THREADS", "2"),
        ("METRICS_ADDRESS", "127.0.0.1:0"),
    ]
    .into_iter()
    .chain(extra.iter().copied())
    .collect();
    let (state, dev, api) = watched(tag, &env);
    let src = dev.create(&subdir_req("pvc-src", GIB));
    let src_dir = dir_of(&state, &src);
    fill_source(&src_dir);
    small_files(&src_dir, 1200);
    let snap = snapshot_until_ready(&dev, "snap-src", &src.volume_id);
    (state, dev, api, snap)
}

/// The reasons of the events on claim `team/<claim>`, read over HTTP, in
/// the order they were made.
fn reasons(api: &ApiServer, claim: &str) -> Vec<String> {
    let (code, list) = api.send("GET", "/api/v1/namespaces/team/events", None);
    assert_eq!(code, 200, "{list}");
    list["items"]
        .as_array()
        .unwrap()
        .iter()
        .filter(|e| e["involvedObject"]["name"] == claim)
        .map(|e| e["reason"].as_str().unwrap().to_string())
        .collect()
}

/// The driver's metrics endpoint, from its log.
fn metrics_address(dev: &Dev) -> String {
    let mut addr = None;
    wait_for("the metrics endpoint", Duration::from_secs(30), || {
        addr = dev.driver.logs().lines().find_map(|l| {
            Some(
                l.split("serving metrics on http://")
                    .nth(1)?
                    .strip_suffix("/metrics")?
                    .to_string(),
            )
        });
        addr.is_some()
    });
    addr.unwrap()
}

/// The value of the series `series` (name and labels, as exposed) in a
/// scrape of `addr`, if it is there.
fn scraped(addr: &str, series: &str) -> Option<f64> {
    use std::io::{Read, Write};
    let mut s = std::net::TcpStream::connect(addr).unwrap();
    s.write_all(b"GET /metrics HTTP/1.1\r\nHost: t\r\nConnection: close\r\n\r\n")
        .unwrap();
    let mut out = String::new();
    s.read_to_string(&mut out).unwrap();
    out.lines()
        .find_map(|l| l.strip_prefix(series)?.strip_prefix(' ')?.parse().ok())
}

#[test]
fn a_slow_restore_tells_its_claim_each_phase_in_order_and_shows_in_the_metrics() {
    let (state, dev, api, snap) = slow_copy("jobs-told", &[]);
    let at_snapshot = tree(&state.shared_base().join("pvc-src"));
    let addr = metrics_address(&dev);
    let uid = make_claim(&api, "data");
    let req = claimed_restore(&snap, "data", &uid);
    let call = {
        let controller = dev.another_controller();
        let req = req.clone();
        std::thread::spawn(move || created_retrying(&controller, &req, call()).0)
    };
    wait_for("the copy", Duration::from_secs(60), || {
        dev.driver.logs().contains("copy started")
    });
    // During the copy: the job is copying, the copy has done something,
    // and the emulated network has served the copy's operations.
    wait_for(
        "the copy's progress in the metrics",
        Duration::from_secs(30),
        || {
            scraped(&addr, "csi_directory_fills{phase=\"copying\"}") == Some(1.0)
                && scraped(&addr, "csi_restore_copying_entries").is_some_and(|n| n > 0.0)
        },
    );
    assert!(scraped(&addr, "csi_restore_copies_running") == Some(1.0));
    assert!(scraped(&addr, "dev_nfs_operations_total{op=\"create\"}").is_some_and(|n| n > 0.0));
    let restored = call.join().unwrap();
    assert_eq!(tree(&dir_of(&state, &restored)), at_snapshot);
    assert!(scraped(&addr, "csi_restore_clone_duration_seconds_count") >= Some(1.0));
    assert_eq!(
        scraped(&addr, "csi_directory_fills{phase=\"copying\"}"),
        Some(0.0)
    );
    wait_for("the last event", Duration::from_secs(30), || {
        reasons(&api, "data").iter().any(|r| r == "FillDone")
    });
    let told = reasons(&api, "data");
    let mut phases: Vec<&str> = told.iter().map(String::as_str).collect();
    phases.dedup();
    assert_eq!(
        phases,
        ["FillCloning", "FillCopying", "FillProgress", "FillDone"],
        "{told:?}"
    );
}

#[test]
fn a_restore_whose_claim_is_deleted_during_the_copy_ends_and_leaves_nothing() {
    let (state, dev, api, snap) = slow_copy("jobs-claim-gone-copy", &[]);
    let uid = make_claim(&api, "data");
    let req = claimed_restore(&snap, "data", &uid);
    let name = format!("pvc-{uid}");
    given_up_once(&dev, &req, "copy started");
    delete_claim(&api, "data");
    restore_left_nothing(&state, &dev, &name, &snap);
    let logs = dev.driver.logs();
    assert!(logs.contains("claim team/data was deleted"), "{logs}");
    assert!(!logs.contains(&format!("{}: filled", name)), "{logs}");
}
