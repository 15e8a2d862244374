//! One short volume lifecycle per backend variant (`DEV_QUIRKS`), against
//! `linode-nfs-csi dev` over gRPC only: create, list, get, a node-mode
//! publish where the variant touches access policies, a mount, delete. The
//! subset per quirk is what that quirk can break: the tag-filter quirks the
//! listing (with filesystems others made in the Space), a missing policy
//! endpoint node mode and squash, capacity in `stats` the sizes reported,
//! Go nulls the policy round trips of node mode, and 408s and nginx pages
//! among injected faults every call (run together with the other three, as
//! csi-sanity runs them). The quota variants are checked at the API level,
//! with the seeded shared parent and the usage sampled from its export.

mod common;
mod e2e_support;

use common::requests::*;
use common::rpc::*;
use e2e_support::*;
use grpcio::RpcStatusCode;
use linode_nfs_csi::dev::{DEV_LINODE_TOKEN, DEV_SHARED_LABEL, DEV_SPACE_ID};
use linode_nfs_csi::linode::{
    Cloud, LinodeCloud, LinodeSettings, NewQuota, Quota, Status, WriteError,
};
use linode_nfs_csi::proto::csi;
use linode_nfs_csi::Error;
use std::path::PathBuf;

const FOREIGN: [&str; 3] = ["foreign-a", "foreign-b", "foreign-c"];

fn list(dev: &Dev) -> Vec<csi::list_volumes_response::Entry> {
    retry(&SIDECAR, || {
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
    retry(&SIDECAR, || {
        dev.controller.controller_get_volume_opt(&req, call())
    })
    .expect("ControllerGetVolume")
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
    let (staging, pod) = mount_in_pod(dev, state, &volume, "pod-q");
    dev.write(&pod.join("note.txt"), name).unwrap();
    assert_eq!(dev.read(&staging.join("note.txt")).unwrap(), name);
    unmount(dev, &volume.volume_id, &staging, &[&pod]);
    delete_volume(dev, &volume.volume_id);
    assert!(listed_ids(dev).is_empty());
    volume
}

fn foreign_filesystems_stay_unlisted(quirk: &str) {
    let (state, dev) = start_dev("e2e-quirk-tags", &[("DEV_QUIRKS", quirk)]);
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
    let (state, dev) = start_dev(
        "e2e-quirk-nopol-space",
        &[("DEV_QUIRKS", "no-filesystem-policy")],
    );
    space_mode_lifecycle(&dev, &state, "pvc-quirk-nopol");

    let mut req = create_req("pvc-quirk-squash", GIB);
    req.parameters.insert(
        "linodenfs.csi.linode.com/filesystem-root-squash".to_string(),
        "none".to_string(),
    );
    let err = retry(&SIDECAR, || dev.controller.create_volume_opt(&req, call())).unwrap_err();
    assert_eq!(code_of(&err), RpcStatusCode::FAILED_PRECONDITION, "{err:?}");
    assert!(format!("{err:?}").contains("access policy"), "{err:?}");
}

#[test]
fn without_filesystem_policies_node_mode_publish_fails_clearly() {
    let (_state, dev) = start_dev(
        "e2e-quirk-nopol-node",
        &[
            ("DEV_QUIRKS", "no-filesystem-policy"),
            ("NFS_ACCESS_POLICY_MODE", "node"),
        ],
    );
    let volume = create_volume(&dev, "pvc-quirk-nopol-node", GIB);
    let req = attach_req(&volume, NODE_ID);
    let err = retry(&SIDECAR, || {
        dev.controller.controller_publish_volume_opt(&req, call())
    })
    .unwrap_err();
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
    let (state, dev) = start_dev("e2e-quirk-cap", &[("DEV_QUIRKS", "capacity-in-stats")]);
    let volume = create_volume(&dev, "pvc-quirk-cap", GIB);
    let backend = state.filesystem(filesystem_of(&volume.volume_id))["max_capacity_bytes"]
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
    let first = dev.create(&exact);
    assert_eq!(first.capacity_bytes, 0, "never a size above limit_bytes");
    assert_eq!(dev.create(&exact), first, "the same CreateVolume again");
    delete_volume(&dev, &first.volume_id);
}

/// Node mode through publish and unpublish, whose policy reads and full
/// replaces see Go nulls (`enabled`, `label`, `linode_acl`).
fn node_mode_lifecycle(dev: &Dev, state: &StateDir, name: &str) {
    let volume = create_volume(dev, name, GIB);
    let fs_id = filesystem_of(&volume.volume_id);
    assert_eq!(listed_ids(dev), vec![volume.volume_id.clone()]);
    let publish = attach_req(&volume, NODE_ID);
    let published = retry(&SIDECAR, || {
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
    retry(&SIDECAR, || dev.node.node_stage_volume_opt(&stage, call())).expect("NodeStageVolume");
    assert_eq!(dev.mount_count(&staging), 1);
    let unstage = node_unstage_req(&volume.volume_id, &staging);
    retry(&SIDECAR, || {
        dev.node.node_unstage_volume_opt(&unstage, call())
    })
    .expect("NodeUnstageVolume");
    let unpublish = controller_unpublish_req(&volume.volume_id, NODE_ID);
    retry(&SIDECAR, || {
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
    let (state, dev) = start_dev("e2e-quirk-nulls-space", &[("DEV_QUIRKS", "null-fields")]);
    space_mode_lifecycle(&dev, &state, "pvc-quirk-nulls-space");
}

/// A `null` policy label must not come back as `""` in the full-replace PUT
/// (the API refuses it: `[label] Length must be 1-63 characters`).
#[test]
fn go_nulls_survive_node_mode_publish_and_unpublish() {
    let (state, dev) = start_dev(
        "e2e-quirk-nulls",
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
    let (state, dev) = start_dev(
        &format!("e2e-quirk-all-{mode}"),
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
    first.driver.kill();
    drop(first);

    let second = Dev::start(&state, &[]);
    let persisted = state.linode();
    assert_eq!(persisted["tag_filter"], "Honoured");
    assert_eq!(persisted["dialect"]["null_fields"], false);
    assert_eq!(labels(&state).len(), 4, "the filesystems stay: {persisted}");
    assert_eq!(listed_ids(&second), vec![volume.volume_id.clone()]);
    delete_volume(&second, &volume.volume_id);
}

/// What dev mode says when it refuses to start with `quirks`: it fails,
/// naming DEV_QUIRKS.
fn refused_quirks(quirks: &str) -> String {
    let state = StateDir::new("e2e-quirk-bad");
    let out = std::process::Command::new(common::binary())
        .arg("dev")
        .env("DEV_STATE_DIR", state.path())
        .env("DEV_QUIRKS", quirks)
        .output()
        .unwrap();
    assert!(!out.status.success(), "{quirks}");
    let stderr = String::from_utf8_lossy(&out.stderr).into_owned();
    assert!(stderr.contains("DEV_QUIRKS"), "{quirks}: {stderr}");
    stderr
}

#[test]
fn dev_mode_refuses_contradicting_or_unknown_quirks() {
    for quirks in ["tag-filter-refused,tag-filter-ignored", "nulls"] {
        refused_quirks(quirks);
    }
}

// --- the quota variants, at the API level ----------------------------------
//
// Until the driver makes subdirectory volumes, what a user of each quota
// quirk sees is the fake's answers: the real client talks to the fake
// Linode API dev mode runs (its URL is in the log), and the checks read the
// quota table dev mode persists and the emulated export on disk.

/// Dev mode with `quirks`, the real client on its fake Linode API, the
/// shared parent's id and its export directory.
struct QuotaDev {
    state: StateDir,
    dev: Dev,
    cloud: LinodeCloud,
    fs: u64,
    export: String,
    export_dir: PathBuf,
}

impl QuotaDev {
    fn start(tag: &str, quirks: &str) -> QuotaDev {
        let (state, dev) = start_dev(tag, &[("DEV_QUIRKS", quirks)]);
        let cloud = linode_of(&dev);
        let (fs, export) = state.shared_parent();
        let export_dir = state.export_dir(DEV_SHARED_LABEL, fs);
        QuotaDev {
            state,
            dev,
            cloud,
            fs,
            export,
            export_dir,
        }
    }

    fn mkdir(&self, path: &str) -> PathBuf {
        let dir = self.export_dir.join(path.trim_start_matches('/'));
        std::fs::create_dir_all(&dir).unwrap();
        dir
    }

    fn create(&self, path: &str) -> Result<Quota, WriteError> {
        self.cloud.create_quota(
            DEV_SPACE_ID,
            self.fs,
            &NewQuota {
                path: path.to_string(),
                max_capacity_bytes: 1 << 20,
                max_file_count: Some(10),
            },
        )
    }

    fn get(&self, id: u64) -> Quota {
        self.cloud.get_quota(DEV_SPACE_ID, self.fs, id).unwrap()
    }

    /// `(path, phase)` of every quota in the persisted table.
    fn table(&self) -> Vec<(String, String)> {
        let mut rows: Vec<(String, String)> = self
            .state
            .quotas()
            .into_iter()
            .map(|(_, path, _, phase)| (path, phase))
            .collect();
        rows.sort();
        rows
    }
}

/// The real client on the fake Linode API of `dev`.
fn linode_of(dev: &Dev) -> LinodeCloud {
    let logs = dev.driver.logs();
    let url = logs
        .lines()
        .find_map(|l| l.split("dev: the fake Linode API serves ").nth(1))
        .unwrap_or_else(|| panic!("no fake Linode URL in the log:\n{logs}"))
        .trim()
        .to_string();
    LinodeCloud::new(LinodeSettings {
        base_url: url,
        ..LinodeSettings::new(DEV_LINODE_TOKEN)
    })
    .unwrap()
}

#[track_caller]
fn refused_path(r: Result<Quota, WriteError>) {
    match r {
        Err(e) => {
            assert!(matches!(e.error, Error::InvalidArgument(_)), "{e}");
            assert!(e.error.message().contains("[path]"), "{e}");
            assert!(!e.maybe_applied, "{e}");
        }
        Ok(q) => panic!("quota {q:?} made"),
    }
}

#[test]
fn dev_mode_seeds_an_unmarked_shared_parent_with_its_export() {
    let q = QuotaDev::start("e2e-quota-parent", "");
    let shared: Vec<_> = q
        .cloud
        .list_filesystems(DEV_SPACE_ID)
        .unwrap()
        .into_iter()
        .filter(|f| f.label == DEV_SHARED_LABEL)
        .collect();
    assert_eq!(shared.len(), 1, "{shared:?}");
    assert_eq!(shared[0].id, q.fs);
    assert_eq!(shared[0].status, Status::Active);
    assert_eq!(shared[0].capacity_bytes(), Some(10 << 30));
    assert!(shared[0].tags.is_empty(), "{:?}", shared[0].tags);
    assert!(q.export_dir.is_dir(), "{}", q.export_dir.display());
    assert!(list(&q.dev).is_empty(), "the parent is no volume");
    let quotas = q.cloud.list_quotas(DEV_SPACE_ID, q.fs).unwrap();
    assert!(quotas.iter().all(|q| q.is_root), "{quotas:?}");
    assert_eq!(
        quotas
            .iter()
            .map(|q| q.max_capacity_bytes)
            .collect::<Vec<_>>(),
        [Some(10 << 30)],
        "only its root quota, the whole capacity"
    );
}

#[test]
fn quota_usage_is_what_the_export_directory_holds() {
    let q = QuotaDev::start("e2e-quota-usage", "");
    let quota = q.create("/csi-volumes/u").unwrap();
    let unsampled = q.get(quota.id);
    assert_eq!(
        (unsampled.used_capacity_bytes, unsampled.collected_at),
        (None, None),
        "no directory yet"
    );
    let dir = q.mkdir("/csi-volumes/u");
    let sibling = q.mkdir("/csi-volumes/sibling");
    std::fs::write(sibling.join("big"), vec![0u8; 4 << 20]).unwrap();
    std::fs::write(dir.join("a"), vec![0u8; 1000]).unwrap();
    std::os::unix::fs::symlink("../sibling", dir.join("escape")).unwrap();
    std::os::unix::fs::symlink(&sibling, dir.join("absolute")).unwrap();
    let used = q.get(quota.id);
    // The directory, `a` and the two links: never what they point at.
    assert_eq!(used.used_capacity_bytes, Some(1000));
    assert_eq!(used.used_file_count, Some(4));
    assert!(used.collected_at.is_some());
    assert!(!used.quota_exceeded);

    std::fs::write(dir.join("b"), vec![0u8; 1 << 20]).unwrap();
    let over = q.get(quota.id);
    assert_eq!(over.used_capacity_bytes, Some(1000 + (1 << 20)));
    assert!(over.quota_exceeded, "{over:?}");
}

#[test]
fn no_quotas_answers_every_quota_call_as_a_backend_without_the_api() {
    let q = QuotaDev::start("e2e-quota-none", "no-quotas");
    assert!(matches!(
        q.cloud.list_quotas(DEV_SPACE_ID, q.fs),
        Err(Error::Unimplemented(_))
    ));
    let e = q.create("/csi-volumes/a").unwrap_err();
    assert!(matches!(e.error, Error::Unimplemented(_)), "{e}");
    assert!(q.table().is_empty());
    assert_eq!(q.state.linode()["quota_behaviour"]["missing"], true);
}

#[test]
fn quota_refused_refuses_every_post() {
    let q = QuotaDev::start("e2e-quota-refused", "quota-refused");
    q.mkdir("/csi-volumes/a");
    refused_path(q.create("/csi-volumes/a"));
    assert!(q.table().is_empty());
    let quotas = q.cloud.list_quotas(DEV_SPACE_ID, q.fs).unwrap();
    assert!(quotas.iter().all(|q| q.is_root), "{quotas:?}");
}

#[test]
fn quota_needs_directory_refuses_a_path_the_export_does_not_hold() {
    let q = QuotaDev::start("e2e-quota-dir", "quota-needs-directory");
    refused_path(q.create("/csi-volumes/a"));
    assert!(q.table().is_empty());
    let a = q.mkdir("/csi-volumes/a");
    // A link to a sibling, or out of the export, is no directory.
    std::os::unix::fs::symlink("a", a.with_file_name("to-a")).unwrap();
    std::os::unix::fs::symlink("/tmp", a.with_file_name("to-tmp")).unwrap();
    refused_path(q.create("/csi-volumes/to-a"));
    refused_path(q.create("/csi-volumes/to-tmp"));
    let quota = q.create("/csi-volumes/a").unwrap();
    assert_eq!(quota.path, "/csi-volumes/a");
    assert_eq!(
        q.table(),
        vec![("/csi-volumes/a".to_string(), "Creating".to_string())]
    );
}

#[test]
fn quota_path_with_export_wants_and_shows_the_export_in_front() {
    let q = QuotaDev::start("e2e-quota-export", "quota-path-with-export");
    refused_path(q.create("/csi-volumes/a"));
    let prefixed = format!("{}/csi-volumes/a", q.export);
    let quota = q.create(&prefixed).unwrap();
    assert_eq!(quota.path, prefixed);
    assert_eq!(q.get(quota.id).path, prefixed);
    let found = q
        .cloud
        .find_quotas_by_path(DEV_SPACE_ID, q.fs, &prefixed)
        .unwrap();
    assert_eq!(found.len(), 1);
    // Stored inside the filesystem, as the other variants store it.
    assert_eq!(q.table()[0].0, "/csi-volumes/a");
}

#[test]
fn quota_stuck_updating_never_turns_active() {
    let q = QuotaDev::start("e2e-quota-stuck", "quota-stuck-updating");
    let quota = q.create("/csi-volumes/a").unwrap();
    // No activation delay: any read after the POST would show it settled.
    for _ in 0..3 {
        assert_eq!(q.get(quota.id).status, Status::Updating);
    }
    assert_eq!(q.table()[0].1, "Creating");
}

#[test]
fn quota_error_turns_every_quota_error() {
    let q = QuotaDev::start("e2e-quota-error", "quota-error");
    let quota = q.create("/csi-volumes/a").unwrap();
    assert_eq!(q.get(quota.id).status, Status::Error);
    assert_eq!(q.table()[0].1, "Error");
}

#[test]
fn quota_limit_refuses_the_quota_past_it_and_a_restart_without_it_lifts_it() {
    let state_tag = "e2e-quota-limit";
    let mut q = QuotaDev::start(state_tag, "quota-limit=2");
    q.create("/csi-volumes/a").unwrap();
    q.create("/csi-volumes/b").unwrap();
    let e = q.create("/csi-volumes/c").unwrap_err();
    assert!(matches!(e.error, Error::InvalidArgument(_)), "{e}");
    assert_eq!(q.table().len(), 2);
    assert_eq!(q.state.linode()["quota_behaviour"]["limit"], 2);

    q.dev.driver.kill();
    q.dev = Dev::start(&q.state, &[]);
    q.cloud = linode_of(&q.dev);
    q.create("/csi-volumes/c").unwrap();
    assert_eq!(q.table().len(), 3, "the table survives, the limit does not");
}

#[test]
fn dev_mode_refuses_contradicting_quota_quirks() {
    for (quirks, names) in [
        (
            "no-quotas,quota-needs-directory",
            ["no-quotas", "quota-needs-directory"],
        ),
        (
            "quota-stuck-updating,quota-error",
            ["quota-stuck-updating", "quota-error"],
        ),
        ("quota-limit=two", ["quota-limit", "quota-limit=3"]),
    ] {
        let stderr = refused_quirks(quirks);
        assert!(
            names.iter().all(|n| stderr.contains(n)),
            "{quirks}: {stderr}"
        );
    }
}
