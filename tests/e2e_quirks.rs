//! One short volume lifecycle per backend variant (`DEV_QUIRKS`), against
//! `linode-nfs-csi dev` over gRPC only: create, list, get, a node-mode
//! publish where the variant touches access policies, a mount, delete. The
//! subset per quirk is what that quirk can break: the tag-filter quirks the
//! listing (with filesystems others made in the Space), a missing policy
//! endpoint node mode and squash, capacity in `stats` the sizes reported,
//! Go nulls the policy round trips of node mode, and 408s and nginx pages
//! among injected faults every call (run together with the other three, as
//! csi-sanity runs them).

mod common;
mod e2e_support;

use common::code_of;
use e2e_support::*;
use grpcio::RpcStatusCode;
use linode_nfs_csi::proto::csi;

const FOREIGN: [&str; 3] = ["foreign-a", "foreign-b", "foreign-c"];

fn list(dev: &Dev) -> Vec<csi::list_volumes_response::Entry> {
    retry(|| {
        dev.controller
            .list_volumes_opt(&csi::ListVolumesRequest::new(), call())
    })
    .expect("ListVolumes")
    .entries
}

fn listed_ids(dev: &Dev) -> Vec<String> {
    list(dev)
        .into_iter()
        .map(|e| e.volume.unwrap().volume_id)
        .collect()
}

fn labels(state: &StateDir) -> Vec<String> {
    let mut labels: Vec<String> = state.filesystems().into_iter().map(|f| f.1).collect();
    labels.sort();
    labels
}

fn get(dev: &Dev, volume_id: &str) -> csi::ControllerGetVolumeResponse {
    let req = get_volume_req(volume_id);
    retry(|| dev.controller.controller_get_volume_opt(&req, call())).expect("ControllerGetVolume")
}

/// Create, list, get, mount in one pod, unmount, delete (space mode).
fn space_mode_lifecycle(dev: &Dev, state: &StateDir, name: &str) -> csi::Volume {
    let volume = create_volume(dev, name, GIB);
    assert!(volume.capacity_bytes >= GIB, "{volume:?}");
    assert_eq!(
        listed_ids(dev),
        vec![volume.volume_id.clone()],
        "only our volume"
    );
    assert_eq!(
        get(dev, &volume.volume_id).volume.unwrap().volume_id,
        volume.volume_id
    );
    let staging = state.staging(&volume.volume_id);
    let pod = state.target("pod-q", &volume.volume_id);
    mount(dev, &volume, &staging, &[&pod]);
    dev.write(&pod.join("note.txt"), name).unwrap();
    assert_eq!(dev.read(&staging.join("note.txt")).unwrap(), name);
    unmount(dev, &volume.volume_id, &staging, &[&pod]);
    delete_volume(dev, &volume.volume_id);
    assert!(listed_ids(dev).is_empty());
    volume
}

fn foreign_filesystems_stay_unlisted(quirk: &str) {
    let state = StateDir::new("e2e-quirk-tags");
    let dev = Dev::start(&state, &[("DEV_QUIRKS", quirk)]);
    assert_eq!(labels(&state), FOREIGN, "{quirk} seeds others' filesystems");
    assert!(listed_ids(&dev).is_empty(), "{quirk}: none of them is ours");
    space_mode_lifecycle(&dev, &state, "pvc-quirk-tags");
    assert_eq!(labels(&state), FOREIGN, "{quirk}: theirs are left alone");
}

#[test]
fn an_ignored_tag_filter_never_lists_filesystems_we_did_not_make() {
    foreign_filesystems_stay_unlisted("tag-filter-ignored");
}

#[test]
fn a_refused_tag_filter_falls_back_to_the_mark() {
    foreign_filesystems_stay_unlisted("tag-filter-refused");
}

#[test]
fn without_filesystem_policies_space_mode_works_and_squash_is_refused() {
    let state = StateDir::new("e2e-quirk-nopol-space");
    let dev = Dev::start(&state, &[("DEV_QUIRKS", "no-filesystem-policy")]);
    space_mode_lifecycle(&dev, &state, "pvc-quirk-nopol");

    let mut req = create_req("pvc-quirk-squash", GIB);
    req.parameters.insert(
        "linodenfs.csi.linode.com/filesystem-root-squash".to_string(),
        "none".to_string(),
    );
    let err = retry(|| dev.controller.create_volume_opt(&req, call())).unwrap_err();
    assert_eq!(code_of(&err), RpcStatusCode::FAILED_PRECONDITION, "{err:?}");
    assert!(format!("{err:?}").contains("access policy"), "{err:?}");
}

#[test]
fn without_filesystem_policies_node_mode_publish_fails_clearly() {
    let state = StateDir::new("e2e-quirk-nopol-node");
    let dev = Dev::start(
        &state,
        &[
            ("DEV_QUIRKS", "no-filesystem-policy"),
            ("NFS_ACCESS_POLICY_MODE", "node"),
        ],
    );
    let volume = create_volume(&dev, "pvc-quirk-nopol-node", GIB);
    let req = controller_publish_req(&volume, NODE_ID);
    let err = retry(|| dev.controller.controller_publish_volume_opt(&req, call())).unwrap_err();
    assert_eq!(code_of(&err), RpcStatusCode::FAILED_PRECONDITION, "{err:?}");
    assert!(format!("{err:?}").contains("access policy"), "{err:?}");
    // Reads degrade instead of failing: the published nodes are unknown.
    assert_eq!(listed_ids(&dev), vec![volume.volume_id.clone()]);
    let got = get(&dev, &volume.volume_id);
    assert!(got.status.published_node_ids.is_empty(), "{got:?}");
    delete_volume(&dev, &volume.volume_id);
}

#[test]
fn capacity_in_stats_is_reported() {
    let state = StateDir::new("e2e-quirk-cap");
    let dev = Dev::start(&state, &[("DEV_QUIRKS", "capacity-in-stats")]);
    let volume = create_volume(&dev, "pvc-quirk-cap", GIB);
    let backend = state.linode()["filesystems"][filesystem_of(&volume.volume_id).to_string()]
        ["max_capacity_bytes"]
        .as_i64()
        .unwrap();
    assert!(backend >= GIB, "the backend sized it: {backend}");
    let listed = list(&dev);
    assert_eq!(listed.len(), 1);
    let got = get(&dev, &volume.volume_id).volume.unwrap();
    assert_eq!(got.capacity_bytes, backend, "read from stats, not 0");
    assert_eq!(listed[0].volume.capacity_bytes, backend);
    delete_volume(&dev, &volume.volume_id);

    // A range the backend's own size breaks: not promised (0 is "unknown"
    // in CSI), and the same request again is the same volume.
    let mut exact = create_req("pvc-quirk-cap-exact", GIB);
    exact.capacity_range.as_mut().unwrap().limit_bytes = GIB;
    let first = retry(|| dev.controller.create_volume_opt(&exact, call()))
        .expect("CreateVolume with an exact range")
        .volume
        .unwrap();
    assert_eq!(first.capacity_bytes, 0, "never a size above limit_bytes");
    let again = retry(|| dev.controller.create_volume_opt(&exact, call()))
        .expect("the same CreateVolume again")
        .volume
        .unwrap();
    assert_eq!(again, first);
    delete_volume(&dev, &first.volume_id);
}

/// Node mode through publish and unpublish, whose policy reads and full
/// replaces see Go nulls (`enabled`, `label`, `linode_acl`).
fn node_mode_lifecycle(dev: &Dev, state: &StateDir, name: &str) {
    let volume = create_volume(dev, name, GIB);
    let fs_id = filesystem_of(&volume.volume_id);
    assert_eq!(listed_ids(dev), vec![volume.volume_id.clone()]);
    let publish = controller_publish_req(&volume, NODE_ID);
    let published = retry(|| {
        dev.controller
            .controller_publish_volume_opt(&publish, call())
    })
    .expect("ControllerPublishVolume");
    assert_eq!(state.acl(fs_id), (true, vec![424242]));
    assert_eq!(
        get(dev, &volume.volume_id).status.published_node_ids,
        [NODE_ID.to_string()]
    );
    let staging = state.staging(&volume.volume_id);
    let stage = stage_req(&volume, &published.publish_context, &staging);
    retry(|| dev.node.node_stage_volume_opt(&stage, call())).expect("NodeStageVolume");
    assert_eq!(dev.mount_count(&staging), 1);
    let unstage = unstage_req(&volume.volume_id, &staging);
    retry(|| dev.node.node_unstage_volume_opt(&unstage, call())).expect("NodeUnstageVolume");
    let unpublish = controller_unpublish_req(&volume.volume_id, NODE_ID);
    retry(|| {
        dev.controller
            .controller_unpublish_volume_opt(&unpublish, call())
    })
    .expect("ControllerUnpublishVolume");
    assert_eq!(state.acl(fs_id).1, Vec::<u64>::new());
    assert!(get(dev, &volume.volume_id)
        .status
        .published_node_ids
        .is_empty());
    delete_volume(dev, &volume.volume_id);
}

#[test]
fn go_nulls_survive_a_space_mode_lifecycle() {
    let state = StateDir::new("e2e-quirk-nulls-space");
    let dev = Dev::start(&state, &[("DEV_QUIRKS", "null-fields")]);
    space_mode_lifecycle(&dev, &state, "pvc-quirk-nulls-space");
}

/// A `null` policy label must not come back as `""` in the full-replace PUT
/// (the API refuses it: `[label] Length must be 1-63 characters`).
#[test]
fn go_nulls_survive_node_mode_publish_and_unpublish() {
    let state = StateDir::new("e2e-quirk-nulls");
    let dev = Dev::start(
        &state,
        &[
            ("DEV_QUIRKS", "null-fields"),
            ("NFS_ACCESS_POLICY_MODE", "node"),
        ],
    );
    node_mode_lifecycle(&dev, &state, "pvc-quirk-nulls");
}

/// csi-sanity's variant set: an ignored tag filter with others'
/// filesystems, Go nulls, capacity in stats, and injected refusals of which
/// a third are 408s and a third nginx pages; a fixed fault seed.
fn combined_variants(mode: &str) {
    let state = StateDir::new(&format!("e2e-quirk-all-{mode}"));
    let dev = Dev::start(
        &state,
        &[
            (
                "DEV_QUIRKS",
                "tag-filter-ignored,null-fields,capacity-in-stats,html-errors",
            ),
            ("DEV_FAULTS", "503:0.5"),
            ("DEV_FAULT_SEED", "19"),
            ("NFS_ACCESS_POLICY_MODE", mode),
        ],
    );
    for n in 0..2 {
        let name = format!("pvc-quirk-all-{mode}-{n}");
        if mode == "node" {
            node_mode_lifecycle(&dev, &state, &name);
        } else {
            space_mode_lifecycle(&dev, &state, &name);
        }
    }
    assert_eq!(labels(&state), FOREIGN);
    let logs = dev.driver.logs();
    for kind in ["injected 408", "injected html-400", "injected 503"] {
        assert!(logs.contains(kind), "{mode}: no {kind} in the run");
    }
}

#[test]
fn the_combined_variants_with_408s_and_nginx_pages_in_space_mode() {
    combined_variants("space");
}

#[test]
fn the_combined_variants_with_408s_and_nginx_pages_in_node_mode() {
    combined_variants("node");
}

/// A state dir left by a killed session keeps its filesystems, not its quirks.
#[test]
fn a_restart_with_other_quirks_does_not_inherit_the_old_ones() {
    let state = StateDir::new("e2e-quirk-restart");
    let mut first = Dev::start(&state, &[("DEV_QUIRKS", "tag-filter-refused,null-fields")]);
    let volume = create_volume(&first, "pvc-quirk-restart", GIB);
    assert_eq!(state.linode()["tag_filter"], "Refused");
    first.driver.signal(libc::SIGKILL);
    first.driver.wait_exit(std::time::Duration::from_secs(10));
    drop(first);

    let second = Dev::start(&state, &[]);
    let persisted = state.linode();
    assert_eq!(persisted["tag_filter"], "Honoured");
    assert_eq!(persisted["dialect"]["null_fields"], false);
    assert_eq!(labels(&state).len(), 4, "the filesystems stay: {persisted}");
    assert_eq!(listed_ids(&second), vec![volume.volume_id.clone()]);
    delete_volume(&second, &volume.volume_id);
}

#[test]
fn dev_mode_refuses_contradicting_or_unknown_quirks() {
    for quirks in ["tag-filter-refused,tag-filter-ignored", "nulls"] {
        let state = StateDir::new("e2e-quirk-bad");
        let out = std::process::Command::new(env!("CARGO_BIN_EXE_linode-nfs-csi"))
            .arg("dev")
            .env("DEV_STATE_DIR", state.path())
            .env("DEV_QUIRKS", quirks)
            .output()
            .unwrap();
        assert!(!out.status.success(), "{quirks}");
        let stderr = String::from_utf8_lossy(&out.stderr);
        assert!(stderr.contains("DEV_QUIRKS"), "{quirks}: {stderr}");
    }
}
