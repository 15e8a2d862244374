//! End-to-end fixture: `linode-nfs-csi dev` as the sidecars and kubelet see
//! it, through gRPC only. Each `Dev` runs the real binary under
//! `unshare --mount --propagation private`, so every mount it makes lives in
//! its own namespace and vanishes with it; the test looks at that namespace
//! through `/proc/<pid>/mountinfo` and `/proc/<pid>/root/<path>`. The fake
//! Linode state is read from `<state>/linode.json`, the file dev mode
//! persists after every change, so a check never depends on the RPC it is
//! checking.
#![allow(dead_code)]

use crate::common::{code_of, mounts_of, Driver, TempDir};
use grpcio::{CallOption, RpcStatusCode};
use linode_nfs_csi::dev::DEV_SHARED_LABEL;
use linode_nfs_csi::proto::csi;
use linode_nfs_csi::proto::csi::volume_capability::access_mode::Mode;
use linode_nfs_csi::proto::csi_grpc::{ControllerClient, IdentityClient, NodeClient};
use serde_json::Value;
use std::collections::HashMap;
use std::path::{Path, PathBuf};
use std::time::{Duration, Instant};

pub const SPACE_LABEL_PARAM: &str = "linodenfs.csi.linode.com/space-label";
pub const SPACE_LABEL: &str = "dev-space";
/// The Linode id of the node dev mode seeds; NodeGetInfo answers it.
pub const NODE_ID: &str = "424242";
pub const GIB: i64 = 1 << 30;

/// Bounds every RPC so a hung driver fails the test instead of stalling it.
pub fn call() -> CallOption {
    CallOption::default().timeout(Duration::from_secs(60))
}

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
        let state = self.linode();
        let policy = &state["filesystems"][filesystem.to_string()]["policy"];
        assert!(
            policy.is_object(),
            "filesystem {filesystem} has no policy in {state}"
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

    /// Names in a subdirectory of the state dir (`exports`, `snapshots`),
    /// but the shared parent's export.
    pub fn entries(&self, sub: &str) -> Vec<String> {
        let shared = format!("{DEV_SHARED_LABEL}-");
        let mut names: Vec<String> = match std::fs::read_dir(self.path().join(sub)) {
            Ok(dir) => dir
                .map(|e| e.unwrap().file_name().to_string_lossy().into_owned())
                .filter(|name| !name.starts_with(&shared))
                .collect(),
            Err(_) => Vec::new(),
        };
        names.sort();
        names
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
            .env("RUST_LOG", "info");
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
}

impl Drop for Dev {
    fn drop(&mut self) {
        if std::thread::panicking() {
            let logs = self.driver.logs();
            let tail: Vec<&str> = logs.lines().rev().take(60).collect();
            eprintln!("--- driver log (last lines) ---");
            for line in tail.iter().rev() {
                eprintln!("{line}");
            }
        }
    }
}

pub fn mounts_under(pid: u32, dir: &Path) -> Vec<PathBuf> {
    mounts_of(pid)
        .into_iter()
        .map(|(p, _)| p)
        .filter(|p| p.starts_with(dir))
        .collect()
}

/// What sidecars and kubelet do with transient answers: call again, with a
/// short backoff, for a bounded time. Other outcomes are returned as they are.
pub fn retry<T>(mut f: impl FnMut() -> grpcio::Result<T>) -> grpcio::Result<T> {
    let deadline = Instant::now() + Duration::from_secs(90);
    let mut delay = Duration::from_millis(20);
    loop {
        match f() {
            Err(grpcio::Error::RpcFailure(s))
                if transient(s.code()) && Instant::now() + delay < deadline =>
            {
                std::thread::sleep(delay);
                delay = (delay * 2).min(Duration::from_millis(500));
            }
            other => return other,
        }
    }
}

pub fn transient(code: RpcStatusCode) -> bool {
    code == RpcStatusCode::UNAVAILABLE
        || code == RpcStatusCode::ABORTED
        || code == RpcStatusCode::DEADLINE_EXCEEDED
}

/// Asserts that a call failed with `want`.
#[track_caller]
pub fn assert_code<T: std::fmt::Debug>(r: grpcio::Result<T>, want: RpcStatusCode, what: &str) {
    match r {
        Ok(v) => panic!("{what}: expected {want:?}, got OK {v:?}"),
        Err(e) => assert_eq!(code_of(&e), want, "{what}: {e:?}"),
    }
}

pub fn capability(mode: Mode) -> csi::VolumeCapability {
    crate::common::mount_capability(mode, &[])
}

pub fn rwx() -> csi::VolumeCapability {
    capability(Mode::MULTI_NODE_MULTI_WRITER)
}

pub fn dev_params() -> HashMap<String, String> {
    HashMap::from([(SPACE_LABEL_PARAM.to_string(), SPACE_LABEL.to_string())])
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
    let mut req = create_req(name, GIB);
    let mut snap = csi::volume_content_source::SnapshotSource::new();
    snap.snapshot_id = snapshot_id.to_string();
    let mut source = csi::VolumeContentSource::new();
    source.set_snapshot(snap);
    req.volume_content_source = Some(source).into();
    req
}

pub fn delete_req(volume_id: &str) -> csi::DeleteVolumeRequest {
    let mut req = csi::DeleteVolumeRequest::new();
    req.volume_id = volume_id.to_string();
    req
}

pub fn get_volume_req(volume_id: &str) -> csi::ControllerGetVolumeRequest {
    let mut req = csi::ControllerGetVolumeRequest::new();
    req.volume_id = volume_id.to_string();
    req
}

pub fn controller_publish_req(
    volume: &csi::Volume,
    node_id: &str,
) -> csi::ControllerPublishVolumeRequest {
    let mut req = csi::ControllerPublishVolumeRequest::new();
    req.volume_id = volume.volume_id.clone();
    req.node_id = node_id.to_string();
    req.volume_capability = Some(rwx()).into();
    req.volume_context = volume.volume_context.clone();
    req
}

pub fn controller_unpublish_req(
    volume_id: &str,
    node_id: &str,
) -> csi::ControllerUnpublishVolumeRequest {
    let mut req = csi::ControllerUnpublishVolumeRequest::new();
    req.volume_id = volume_id.to_string();
    req.node_id = node_id.to_string();
    req
}

/// NodeStageVolume as kubelet sends it: the PV's volume context and the
/// publish context ControllerPublish returned (empty in space mode).
pub fn stage_req(
    volume: &csi::Volume,
    publish_context: &HashMap<String, String>,
    staging: &Path,
) -> csi::NodeStageVolumeRequest {
    let mut req = csi::NodeStageVolumeRequest::new();
    req.volume_id = volume.volume_id.clone();
    req.staging_target_path = staging.to_string_lossy().into_owned();
    req.volume_capability = Some(rwx()).into();
    req.volume_context = volume.volume_context.clone();
    req.publish_context = publish_context.clone();
    req
}

pub fn unstage_req(volume_id: &str, staging: &Path) -> csi::NodeUnstageVolumeRequest {
    let mut req = csi::NodeUnstageVolumeRequest::new();
    req.volume_id = volume_id.to_string();
    req.staging_target_path = staging.to_string_lossy().into_owned();
    req
}

pub fn publish_req(
    volume: &csi::Volume,
    staging: &Path,
    target: &Path,
    readonly: bool,
) -> csi::NodePublishVolumeRequest {
    let mut req = csi::NodePublishVolumeRequest::new();
    req.volume_id = volume.volume_id.clone();
    req.staging_target_path = staging.to_string_lossy().into_owned();
    req.target_path = target.to_string_lossy().into_owned();
    req.volume_capability = Some(rwx()).into();
    req.volume_context = volume.volume_context.clone();
    req.readonly = readonly;
    req
}

pub fn unpublish_req(volume_id: &str, target: &Path) -> csi::NodeUnpublishVolumeRequest {
    let mut req = csi::NodeUnpublishVolumeRequest::new();
    req.volume_id = volume_id.to_string();
    req.target_path = target.to_string_lossy().into_owned();
    req
}

pub fn stats_req(volume_id: &str, path: &Path) -> csi::NodeGetVolumeStatsRequest {
    let mut req = csi::NodeGetVolumeStatsRequest::new();
    req.volume_id = volume_id.to_string();
    req.volume_path = path.to_string_lossy().into_owned();
    req
}

pub fn snapshot_req(name: &str, source_volume_id: &str) -> csi::CreateSnapshotRequest {
    let mut req = csi::CreateSnapshotRequest::new();
    req.name = name.to_string();
    req.source_volume_id = source_volume_id.to_string();
    req
}

pub fn delete_snapshot_req(snapshot_id: &str) -> csi::DeleteSnapshotRequest {
    let mut req = csi::DeleteSnapshotRequest::new();
    req.snapshot_id = snapshot_id.to_string();
    req
}

pub fn list_snapshots_req(snapshot_id: &str, source_volume_id: &str) -> csi::ListSnapshotsRequest {
    let mut req = csi::ListSnapshotsRequest::new();
    req.snapshot_id = snapshot_id.to_string();
    req.source_volume_id = source_volume_id.to_string();
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
    let req = create_req(name, required);
    retry(|| dev.controller.create_volume_opt(&req, call()))
        .unwrap_or_else(|e| panic!("CreateVolume {name}: {e:?}"))
        .volume
        .unwrap()
}

/// Stages and publishes `volume` at `targets` (space mode: no controller
/// publish), retrying transient answers.
pub fn mount(dev: &Dev, volume: &csi::Volume, staging: &Path, targets: &[&Path]) {
    let stage = stage_req(volume, &HashMap::new(), staging);
    retry(|| dev.node.node_stage_volume_opt(&stage, call())).expect("NodeStageVolume");
    for target in targets {
        let publish = publish_req(volume, staging, target, false);
        retry(|| dev.node.node_publish_volume_opt(&publish, call())).expect("NodePublishVolume");
    }
}

/// The reverse of [`mount`].
pub fn unmount(dev: &Dev, volume_id: &str, staging: &Path, targets: &[&Path]) {
    for target in targets {
        let req = unpublish_req(volume_id, target);
        retry(|| dev.node.node_unpublish_volume_opt(&req, call())).expect("NodeUnpublishVolume");
    }
    let req = unstage_req(volume_id, staging);
    retry(|| dev.node.node_unstage_volume_opt(&req, call())).expect("NodeUnstageVolume");
}

/// Deletes a volume and checks the backend no longer has it.
pub fn delete_volume(dev: &Dev, volume_id: &str) {
    let req = delete_req(volume_id);
    retry(|| dev.controller.delete_volume_opt(&req, call())).expect("DeleteVolume");
    let get = get_volume_req(volume_id);
    assert_code(
        retry(|| dev.controller.controller_get_volume_opt(&get, call())),
        RpcStatusCode::NOT_FOUND,
        "ControllerGetVolume after DeleteVolume",
    );
}

/// Polls `cond` until it holds, for at most `limit`.
pub fn eventually(what: &str, limit: Duration, cond: impl FnMut() -> bool) {
    crate::common::wait_for(what, limit, cond)
}
