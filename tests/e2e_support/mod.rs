//! End-to-end fixture: `linode-nfs-csi dev` as the sidecars and kubelet see
//! it, through gRPC only. Each `Dev` runs the real binary under
//! `unshare --mount --propagation private`, so every mount it makes lives in
//! its own namespace and vanishes with it; the test looks at that namespace
//! through `/proc/<pid>/mountinfo` and `/proc/<pid>/root/<path>`. The fake
//! Linode state is read from `<state>/linode.json`, the file dev mode
//! persists after every change, so a check never depends on the RPC it is
//! checking.
#![allow(dead_code)]

pub mod restores;

use crate::common::requests::{
    controller_publish_req, delete_req, from_snapshot, get_volume_req, node_publish_req,
    node_stage_req, node_unpublish_req, node_unstage_req, rwx, snapshot_req,
};
use crate::common::rpc::{assert_code, call, retry, Retry, SIDECAR};
use crate::common::{mounts_of, names_in, wait_for, Driver, TempDir};
use linode_nfs_csi::dev::DEV_SHARED_LABEL;
use linode_nfs_csi::proto::csi;
use linode_nfs_csi::proto::csi::controller_service_capability::rpc::Type as ControllerRpc;
use linode_nfs_csi::proto::csi_grpc::{ControllerClient, IdentityClient, NodeClient};
use serde_json::Value;
use std::collections::HashMap;
use std::path::{Path, PathBuf};
use std::time::Duration;

pub const SPACE_LABEL_PARAM: &str = "linodenfs.csi.linode.com/space-label";
pub const SPACE_LABEL: &str = "dev-space";
/// The Linode id of the node dev mode seeds; NodeGetInfo answers it.
pub const NODE_ID: &str = "424242";
pub const GIB: i64 = 1 << 30;

/// A dev-mode state directory owned by the test, so it can outlive one
/// driver process (restart tests) and is removed however the test ends.
pub struct StateDir {
    dir: TempDir,
}

impl StateDir {
    pub fn new(tag: &str) -> StateDir {
        StateDir {
            dir: TempDir::new(tag),
        }
    }

    /// `DEV_STATE_DIR`; a subdirectory, so the test can tell whether dev
    /// mode removed it.
    pub fn path(&self) -> PathBuf {
        self.dir.join("state")
    }

    /// A kubelet-style staging path inside the state dir (not created).
    pub fn staging(&self, volume: &str) -> PathBuf {
        self.path()
            .join("kubelet/plugins/kubernetes.io/csi/linodenfs.csi.linode.com")
            .join(volume.replace('/', "-"))
            .join("globalmount")
    }

    /// A kubelet-style pod target path inside the state dir (not created).
    pub fn target(&self, pod: &str, volume: &str) -> PathBuf {
        self.path()
            .join("kubelet/pods")
            .join(pod)
            .join("volumes/kubernetes.io~csi")
            .join(volume.replace('/', "-"))
            .join("mount")
    }

    /// The export directory of filesystem `id` labelled `label`, on the
    /// host (the fake's naming rule).
    pub fn export_dir(&self, label: &str, id: u64) -> PathBuf {
        self.path().join("exports").join(format!("{label}-{id:x}"))
    }

    /// The whole persisted fake Linode state.
    pub fn linode(&self) -> Value {
        let path = self.path().join("linode.json");
        let text = std::fs::read_to_string(&path)
            .unwrap_or_else(|e| panic!("read {}: {e}", path.display()));
        serde_json::from_str(&text).unwrap_or_else(|e| panic!("parse {}: {e}", path.display()))
    }

    /// `(id, label, phase)` of every filesystem the fake holds but the
    /// shared parent dev mode seeds (an admin's, which no test makes or
    /// removes: see [`StateDir::shared_parent`]).
    pub fn filesystems(&self) -> Vec<(u64, String, String)> {
        records(&self.linode()["filesystems"])
            .filter(|f| f["label"] != DEV_SHARED_LABEL)
            .map(|f| {
                (
                    f["id"].as_u64().unwrap(),
                    f["label"].as_str().unwrap().to_string(),
                    f["phase"].as_str().unwrap().to_string(),
                )
            })
            .collect()
    }

    /// Filesystem `id` as the fake persists it.
    pub fn filesystem(&self, id: u64) -> Value {
        let fs = self.linode()["filesystems"][id.to_string()].clone();
        assert!(fs.is_object(), "no filesystem {id} in the fake");
        fs
    }

    /// `(filesystem id, path, max bytes, phase)` of every quota the fake
    /// stores (a filesystem's root quota is derived, never stored), sorted.
    pub fn quotas(&self) -> Vec<(u64, String, i64, String)> {
        let mut rows: Vec<_> = records(&self.linode()["quotas"])
            .map(|q| {
                (
                    q["filesystem_id"].as_u64().unwrap(),
                    q["path"].as_str().unwrap().to_string(),
                    q["max_capacity_bytes"].as_i64().unwrap(),
                    q["phase"].as_str().unwrap().to_string(),
                )
            })
            .collect();
        rows.sort();
        rows
    }

    /// `(id, filesystem id, label, phase)` of every snapshot the fake holds.
    pub fn snapshots(&self) -> Vec<(u64, u64, String, String)> {
        records(&self.linode()["snapshots"])
            .map(|s| {
                (
                    s["id"].as_u64().unwrap(),
                    s["filesystem_id"].as_u64().unwrap(),
                    s["label"].as_str().unwrap().to_string(),
                    s["phase"].as_str().unwrap().to_string(),
                )
            })
            .collect()
    }

    /// `(enabled, linode ids)` of a filesystem's access policy.
    pub fn acl(&self, filesystem: u64) -> (bool, Vec<u64>) {
        let fs = self.filesystem(filesystem);
        let policy = &fs["policy"];
        assert!(
            policy.is_object(),
            "filesystem {filesystem} has no policy in {fs}"
        );
        let ids = policy["linode_ids"]
            .as_array()
            .unwrap()
            .iter()
            .map(|v| v.as_u64().unwrap())
            .collect();
        (policy["enabled"].as_bool().unwrap(), ids)
    }

    /// The id and export path of the shared parent dev mode seeds.
    pub fn shared_parent(&self) -> (u64, String) {
        let state = self.linode();
        let f = records(&state["filesystems"])
            .find(|f| f["label"] == DEV_SHARED_LABEL)
            .unwrap_or_else(|| panic!("no {DEV_SHARED_LABEL} filesystem in {state}"));
        let id = f["id"].as_u64().unwrap();
        (id, format!("/{DEV_SHARED_LABEL}-{id:x}"))
    }

    /// The shared parent's `csi-volumes` base, on the host.
    pub fn shared_base(&self) -> PathBuf {
        let (id, _) = self.shared_parent();
        self.export_dir(DEV_SHARED_LABEL, id).join("csi-volumes")
    }

    /// Names in a subdirectory of the state dir (`exports`, `snapshots`),
    /// but the shared parent's export.
    pub fn entries(&self, sub: &str) -> Vec<String> {
        let shared = format!("{DEV_SHARED_LABEL}-");
        names_in(&self.path().join(sub))
            .into_iter()
            .filter(|name| !name.starts_with(&shared))
            .collect()
    }
}

fn records(map: &Value) -> impl Iterator<Item = &Value> {
    map.as_object()
        .unwrap_or_else(|| panic!("not a map of records: {map}"))
        .values()
}

/// One `linode-nfs-csi dev` process.
pub struct Dev {
    pub driver: Driver,
    pub state: PathBuf,
    pub identity: IdentityClient,
    pub controller: ControllerClient,
    pub node: NodeClient,
}

impl Dev {
    /// Starts dev mode on `state` with extra environment (`DEV_*`,
    /// `NFS_ACCESS_POLICY_MODE`, …) and waits until Probe says ready.
    pub fn start(state: &StateDir, envs: &[(&str, &str)]) -> Dev {
        let mut b = Driver::builder()
            .arg("dev")
            .prefix(&["unshare", "--mount", "--propagation", "private"])
            .env("DEV_STATE_DIR", state.path().to_string_lossy())
            // Debug logs of every body make retry storms slow and huge.
            .env("RUST_LOG", "info")
            // No background requests in tests that count them (a test
            // that wants the upkeep sets its own interval).
            .env("MAINTENANCE_INTERVAL", "0s");
        for (k, v) in envs {
            b = b.env(k, *v);
        }
        let driver = b.start();
        Dev {
            identity: driver.identity(),
            controller: driver.controller(),
            node: driver.node(),
            state: state.path(),
            driver,
        }
    }

    pub fn pid(&self) -> u32 {
        self.driver.pid()
    }

    /// `path` as seen from inside the driver's mount namespace.
    pub fn inside(&self, path: &Path) -> PathBuf {
        PathBuf::from(format!("/proc/{}/root", self.pid())).join(path.strip_prefix("/").unwrap())
    }

    /// Mount points (with their per-mount options) in the driver's namespace.
    pub fn mounts(&self) -> Vec<(PathBuf, Vec<String>)> {
        mounts_of(self.pid())
    }

    /// Mount points at or below the state directory.
    pub fn mounts_under_state(&self) -> Vec<PathBuf> {
        mounts_under(self.pid(), &self.state)
    }

    /// Whether nothing is mounted at or below `dir` in the driver's namespace.
    pub fn nothing_mounted_under(&self, dir: &Path) -> bool {
        self.mounts_under_state()
            .iter()
            .all(|m| !m.starts_with(dir))
    }

    pub fn mount_count(&self, path: &Path) -> usize {
        self.mounts().iter().filter(|(p, _)| p == path).count()
    }

    /// Whether the topmost mount at `path` is read-only.
    pub fn read_only(&self, path: &Path) -> bool {
        self.mounts()
            .into_iter()
            .rev()
            .find(|(p, _)| p == path)
            .unwrap_or_else(|| panic!("{} is not mounted", path.display()))
            .1
            .iter()
            .any(|o| o == "ro")
    }

    pub fn write(&self, path: &Path, text: &str) -> std::io::Result<()> {
        std::fs::write(self.inside(path), text)
    }

    pub fn read(&self, path: &Path) -> std::io::Result<String> {
        std::fs::read_to_string(self.inside(path))
    }

    pub fn exists(&self, path: &Path) -> bool {
        self.inside(path).exists()
    }

    /// A fresh controller client on its own channel, like a second sidecar.
    pub fn another_controller(&self) -> ControllerClient {
        self.driver.controller()
    }

    pub fn another_node(&self) -> NodeClient {
        self.driver.node()
    }

    /// The volume `req` creates, retried as external-provisioner does.
    pub fn create(&self, req: &csi::CreateVolumeRequest) -> csi::Volume {
        retry(&SIDECAR, || self.controller.create_volume_opt(req, call()))
            .unwrap_or_else(|e| panic!("CreateVolume {}: {e:?}", req.name))
            .volume
            .unwrap()
    }

    /// Whether ControllerGetCapabilities offers `rpc`.
    pub fn advertises(&self, rpc: ControllerRpc) -> bool {
        self.controller
            .controller_get_capabilities_opt(&Default::default(), call())
            .unwrap()
            .capabilities
            .iter()
            .any(|c| c.rpc().type_.enum_value_or_default() == rpc)
    }

    /// The line of its last words that sums up what the session cost in
    /// Linode API calls.
    pub fn api_cost(&self) -> String {
        let logs = self.driver.logs();
        logs.lines()
            .find(|l| l.contains("dev: the fake Linode API served"))
            .unwrap_or_else(|| panic!("no API cost line:\n{logs}"))
            .to_string()
    }
}

/// A state dir tagged `tag` and dev mode on it with `envs`.
pub fn start_dev(tag: &str, envs: &[(&str, &str)]) -> (StateDir, Dev) {
    let state = StateDir::new(tag);
    let dev = Dev::start(&state, envs);
    (state, dev)
}

pub fn mounts_under(pid: u32, dir: &Path) -> Vec<PathBuf> {
    mounts_of(pid)
        .into_iter()
        .map(|(p, _)| p)
        .filter(|p| p.starts_with(dir))
        .collect()
}

pub fn dev_params() -> HashMap<String, String> {
    HashMap::from([(SPACE_LABEL_PARAM.to_string(), SPACE_LABEL.to_string())])
}

/// The class of `subdirectory` volumes in dev mode's shared filesystem.
pub fn subdirectory_params() -> HashMap<String, String> {
    let mut params = dev_params();
    for (k, v) in [
        ("volume-type", "subdirectory"),
        ("shared-filesystem-label", DEV_SHARED_LABEL),
    ] {
        params.insert(format!("linodenfs.csi.linode.com/{k}"), v.to_string());
    }
    params
}

/// A CreateVolume request as external-provisioner sends it for an RWX PVC.
pub fn create_req(name: &str, required: i64) -> csi::CreateVolumeRequest {
    let mut req = csi::CreateVolumeRequest::new();
    req.name = name.to_string();
    req.parameters = dev_params();
    req.volume_capabilities = vec![rwx()];
    if required > 0 {
        let mut range = csi::CapacityRange::new();
        range.required_bytes = required;
        req.capacity_range = Some(range).into();
    }
    req
}

pub fn restore_req(name: &str, snapshot_id: &str) -> csi::CreateVolumeRequest {
    from_snapshot(create_req(name, GIB), snapshot_id)
}

/// ControllerPublishVolume as external-attacher sends it: with the PV's
/// volume context.
pub fn attach_req(volume: &csi::Volume, node_id: &str) -> csi::ControllerPublishVolumeRequest {
    let mut req = controller_publish_req(&volume.volume_id, node_id);
    req.volume_context = volume.volume_context.clone();
    req
}

/// NodeStageVolume as kubelet sends it: the PV's volume context and the
/// publish context ControllerPublish returned (empty in space mode).
pub fn stage_req(
    volume: &csi::Volume,
    publish_context: &HashMap<String, String>,
    staging: &Path,
) -> csi::NodeStageVolumeRequest {
    let mut req = node_stage_req(&volume.volume_id, staging, rwx());
    req.volume_context = volume.volume_context.clone();
    req.publish_context = publish_context.clone();
    req
}

/// NodePublishVolume as kubelet sends it, with the PV's volume context.
pub fn publish_req(
    volume: &csi::Volume,
    staging: &Path,
    target: &Path,
    readonly: bool,
) -> csi::NodePublishVolumeRequest {
    let mut req = node_publish_req(&volume.volume_id, staging, target, rwx());
    req.volume_context = volume.volume_context.clone();
    req.readonly = readonly;
    req
}

/// The filesystem id in a `space/filesystem[/snapshot]` handle.
pub fn filesystem_of(handle: &str) -> u64 {
    let parts: Vec<&str> = handle.split('/').collect();
    assert!(
        parts.len() >= 2 && parts[0] == "1",
        "not a dev-space handle: {handle:?}"
    );
    parts[1]
        .parse()
        .unwrap_or_else(|_| panic!("bad handle {handle:?}"))
}

/// Creates a volume, retrying transient answers as external-provisioner does.
pub fn create_volume(dev: &Dev, name: &str, required: i64) -> csi::Volume {
    dev.create(&create_req(name, required))
}

/// Stages and publishes `volume` at `targets` (space mode: no controller
/// publish), retrying transient answers.
pub fn mount(dev: &Dev, volume: &csi::Volume, staging: &Path, targets: &[&Path]) {
    let stage = stage_req(volume, &HashMap::new(), staging);
    retry(&SIDECAR, || dev.node.node_stage_volume_opt(&stage, call())).expect("NodeStageVolume");
    for target in targets {
        let publish = publish_req(volume, staging, target, false);
        retry(&SIDECAR, || {
            dev.node.node_publish_volume_opt(&publish, call())
        })
        .expect("NodePublishVolume");
    }
}

/// [`mount`] at kubelet's paths for one pod named `pod`; returns the
/// staging and target paths.
pub fn mount_in_pod(
    dev: &Dev,
    state: &StateDir,
    volume: &csi::Volume,
    pod: &str,
) -> (PathBuf, PathBuf) {
    let staging = state.staging(&volume.volume_id);
    let target = state.target(pod, &volume.volume_id);
    mount(dev, volume, &staging, &[&target]);
    (staging, target)
}

/// The reverse of [`mount`].
pub fn unmount(dev: &Dev, volume_id: &str, staging: &Path, targets: &[&Path]) {
    for target in targets {
        let req = node_unpublish_req(volume_id, target);
        retry(&SIDECAR, || {
            dev.node.node_unpublish_volume_opt(&req, call())
        })
        .expect("NodeUnpublishVolume");
    }
    let req = node_unstage_req(volume_id, staging);
    retry(&SIDECAR, || dev.node.node_unstage_volume_opt(&req, call())).expect("NodeUnstageVolume");
}

/// Deletes a volume, retrying transient answers, and checks the driver no
/// longer finds it.
pub fn delete_volume(dev: &Dev, volume_id: &str) {
    delete_volume_as(dev, &SIDECAR, volume_id)
}

/// [`delete_volume`] by a caller that retries as `how` says.
pub fn delete_volume_as(dev: &Dev, how: &Retry, volume_id: &str) {
    let req = delete_req(volume_id);
    retry(how, || dev.controller.delete_volume_opt(&req, call())).expect("DeleteVolume");
    let get = get_volume_req(volume_id);
    assert_code(
        retry(how, || {
            dev.controller.controller_get_volume_opt(&get, call())
        }),
        grpcio::RpcStatusCode::NOT_FOUND,
        "ControllerGetVolume after DeleteVolume",
    );
}

/// CreateSnapshot repeated as external-snapshotter does until the snapshot
/// is ready; every answer names the same snapshot, made at the same time.
pub fn snapshot_until_ready(dev: &Dev, name: &str, source: &str) -> csi::Snapshot {
    let req = snapshot_req(name, source);
    let snapshot = || {
        retry(&SIDECAR, || {
            dev.controller.create_snapshot_opt(&req, call())
        })
        .unwrap_or_else(|e| panic!("CreateSnapshot {name}: {e:?}"))
        .snapshot
        .unwrap()
    };
    let first = snapshot();
    assert_eq!(first.source_volume_id, source);
    assert!(first.creation_time.is_some(), "{first:?}");
    let mut latest = first.clone();
    wait_for(
        &format!("snapshot {name} to be ready"),
        Duration::from_secs(30),
        || {
            if !latest.ready_to_use {
                latest = snapshot();
                assert_eq!(
                    latest.snapshot_id, first.snapshot_id,
                    "a repeated CreateSnapshot named another snapshot"
                );
                assert_eq!(latest.creation_time, first.creation_time);
            }
            latest.ready_to_use
        },
    );
    assert!(latest.size_bytes > 0, "{latest:?}");
    latest
}

/// Nothing is left of what the test made: no filesystem or snapshot in
/// the fake, no export or snapshot copy on disk, no mount.
pub fn assert_nothing_left(state: &StateDir, dev: &Dev) {
    assert_eq!(
        state.filesystems(),
        Vec::<(u64, String, String)>::new(),
        "leaked filesystems"
    );
    assert_eq!(
        state.snapshots(),
        Vec::<(u64, u64, String, String)>::new(),
        "leaked snapshots"
    );
    assert_eq!(
        state.entries("exports"),
        Vec::<String>::new(),
        "an export directory outlived its volume"
    );
    assert_eq!(
        state.entries("snapshots"),
        Vec::<String>::new(),
        "snapshot copies outlived their snapshots"
    );
    assert_eq!(
        dev.mounts_under_state(),
        Vec::<PathBuf>::new(),
        "mounts left behind"
    );
}
