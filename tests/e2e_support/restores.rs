//! What the restore tests share: the tree a restore must keep and how it
//! is compared, the source trees they snapshot, and readings of what a
//! restore leaves in dev mode's fake (temporary clones, snapshots, the
//! volume's directory, marker and quota).

use super::*;
use crate::common::rpc::{assert_code, code_of, message_of};
use crate::common::wait_for;
use grpcio::RpcStatusCode as Code;
use linode_nfs_csi::proto::csi;
use linode_nfs_csi::proto::csi_grpc::ControllerClient;
use std::collections::BTreeMap;
use std::os::unix::fs::{symlink, MetadataExt, PermissionsExt};
use std::path::{Path, PathBuf};

pub fn subdir_req(name: &str, size: i64) -> csi::CreateVolumeRequest {
    let mut req = create_req(name, size);
    req.parameters = subdirectory_params();
    req
}

pub fn dir_of(state: &StateDir, volume: &csi::Volume) -> PathBuf {
    let name = volume.volume_id.rsplit('/').next().unwrap();
    state.shared_base().join(name)
}

/// Everything about a tree a restore must keep, by path below its top.
pub fn tree(top: &Path) -> BTreeMap<String, String> {
    let mut out = BTreeMap::new();
    let mut inodes: BTreeMap<u64, String> = BTreeMap::new();
    let mut todo = vec![top.to_path_buf()];
    while let Some(dir) = todo.pop() {
        let mut entries: Vec<_> = std::fs::read_dir(&dir)
            .unwrap()
            .map(|e| e.unwrap().path())
            .collect();
        entries.sort();
        for path in entries {
            let rel = path.strip_prefix(top).unwrap().display().to_string();
            let m = std::fs::symlink_metadata(&path).unwrap();
            let kind = if m.file_type().is_symlink() {
                format!("link -> {}", std::fs::read_link(&path).unwrap().display())
            } else if m.is_dir() {
                todo.push(path.clone());
                "dir".to_string()
            } else {
                let first = inodes.entry(m.ino()).or_insert_with(|| rel.clone()).clone();
                let data = std::fs::read(&path).unwrap();
                format!(
                    "file {} bytes {:x} first-name {first}",
                    data.len(),
                    fnv(&data)
                )
            };
            let mtime = if m.file_type().is_symlink() {
                0
            } else {
                m.mtime()
            };
            out.insert(
                rel,
                format!(
                    "{kind} mode {:o} owner {}:{} mtime {mtime}",
                    m.mode() & 0o7777,
                    m.uid(),
                    m.gid()
                ),
            );
        }
    }
    out
}

pub fn fnv(data: &[u8]) -> u64 {
    data.iter().fold(0xcbf29ce484222325u64, |h, b| {
        (h ^ u64::from(*b)).wrapping_mul(0x100000001b3)
    })
}

/// A tree with a bit of everything a tenant makes.
pub fn fill_source(dir: &Path) {
    std::fs::create_dir_all(dir.join("a/b/c")).unwrap();
    std::fs::write(dir.join("hello.txt"), "hello").unwrap();
    std::fs::write(dir.join("a/b/c/deep.bin"), vec![7u8; 100_000]).unwrap();
    std::fs::write(dir.join("empty"), "").unwrap();
    std::fs::write(dir.join("a/secret"), "600").unwrap();
    std::fs::set_permissions(dir.join("a/secret"), std::fs::Permissions::from_mode(0o600)).unwrap();
    std::fs::set_permissions(dir.join("a/b"), std::fs::Permissions::from_mode(0o1777)).unwrap();
    std::os::unix::fs::chown(dir.join("hello.txt"), Some(1234), Some(5678)).unwrap();
    std::fs::hard_link(dir.join("hello.txt"), dir.join("a/hello-again")).unwrap();
    symlink("../hello.txt", dir.join("a/rel-link")).unwrap();
    symlink("/etc/passwd", dir.join("abs-link")).unwrap();
    symlink("nowhere", dir.join("dangling")).unwrap();
    let old = std::fs::File::options()
        .write(true)
        .open(dir.join("a/b/c/deep.bin"))
        .unwrap();
    old.set_modified(std::time::UNIX_EPOCH + std::time::Duration::from_secs(1_000_000_000))
        .unwrap();
}

/// `(id, label, phase)` of the temporary clones restores copy from that
/// are not being deleted.
pub fn temporaries(state: &StateDir) -> Vec<(u64, String, String)> {
    state
        .filesystems()
        .into_iter()
        .filter(|f| f.1.starts_with("csi-restore-") && f.2 != "Deleting")
        .collect()
}

/// The Linode snapshot behind a CSI snapshot id (`space/fs/snapshot/…`):
/// its id and label.
pub fn linode_snapshot(state: &StateDir, snapshot_id: &str) -> (u64, String) {
    let id: u64 = snapshot_id.split('/').nth(2).unwrap().parse().unwrap();
    let label = state
        .snapshots()
        .into_iter()
        .find(|s| s.0 == id)
        .unwrap_or_else(|| panic!("no snapshot {id} in the fake"))
        .2;
    (id, label)
}

/// The Linode snapshots not being deleted, by id.
pub fn live_snapshots(state: &StateDir) -> Vec<u64> {
    state
        .snapshots()
        .into_iter()
        .filter(|s| s.3 != "Deleting")
        .map(|s| s.0)
        .collect()
}

/// 8,000 more small files, so that a copy of one file at a time takes a
/// moment.
pub fn fill_many(dir: &Path) {
    for d in 0..40 {
        let dir = dir.join(format!("many/{d}"));
        std::fs::create_dir_all(&dir).unwrap();
        for f in 0..200 {
            std::fs::write(dir.join(f.to_string()), format!("{d}/{f}")).unwrap();
        }
    }
}

/// Asserts that nothing of volume `name` is left on the shared parent: no
/// directory, no marker, no quota.
pub fn nothing_left_of(state: &StateDir, name: &str) {
    let base = state.shared_base();
    assert!(!base.join(name).exists(), "its data is left");
    assert!(
        !base.join(".owners").join(name).exists(),
        "its marker is left"
    );
    let quotas: Vec<String> = state.quotas().into_iter().map(|q| q.1).collect();
    assert!(
        quotas.iter().all(|path| !path.contains(name)),
        "its quota is left: {quotas:?}"
    );
}

/// When the first line of `logs` holding `what` was logged, in
/// milliseconds of its day (the driver logs `[2026-12-05T16:19:42.123Z …`).
pub fn logged_at(logs: &str, what: &str) -> u64 {
    let line = logs
        .lines()
        .find(|l| l.contains(what))
        .unwrap_or_else(|| panic!("nothing logged {what:?}:\n{logs}"));
    let time = line.split('T').nth(1).and_then(|t| t.get(..12)).unwrap();
    let (hms, ms) = time.split_once('.').unwrap();
    let hms: Vec<u64> = hms.split(':').map(|p| p.parse().unwrap()).collect();
    ((hms[0] * 60 + hms[1]) * 60 + hms[2]) * 1000 + ms.parse::<u64>().unwrap()
}

/// A source `pvc-src` with 4 MiB beside the usual tree, snapshotted: under
/// `slow-clones` its temporary clone takes about 2 s + 4 s. The source's
/// tree and the snapshot.
pub fn bulky_source(state: &StateDir, dev: &Dev) -> (BTreeMap<String, String>, csi::Snapshot) {
    let src = dev.create(&subdir_req("pvc-src", GIB));
    let src_dir = dir_of(state, &src);
    fill_source(&src_dir);
    std::fs::write(src_dir.join("bulk"), vec![7u8; 4 << 20]).unwrap();
    let at_snapshot = tree(&src_dir);
    (
        at_snapshot,
        snapshot_until_ready(dev, "snap-src", &src.volume_id),
    )
}

/// Dev mode with `env`, and a [`bulky_source`] in it.
pub fn bulky_snapshot(
    tag: &str,
    env: &[(&str, &str)],
) -> (StateDir, Dev, BTreeMap<String, String>, csi::Snapshot) {
    let (state, dev) = start_dev(tag, env);
    let (at_snapshot, snap) = bulky_source(&state, &dev);
    (state, dev, at_snapshot, snap)
}

/// Creates `req` until it answers OK, each try bounded by `each`, the next
/// a second after a failure (as a provisioner with a fixed retry interval
/// sends them: harder than its backoff): the volume and the messages of
/// the tries that failed, each DeadlineExceeded, Unavailable or Aborted.
pub fn created_retrying(
    client: &ControllerClient,
    req: &csi::CreateVolumeRequest,
    each: grpcio::CallOption,
) -> (csi::Volume, Vec<String>) {
    let started = std::time::Instant::now();
    let mut said = Vec::new();
    loop {
        match client.create_volume_opt(req, each.clone()) {
            Ok(resp) => return (resp.volume.unwrap(), said),
            Err(e) => {
                assert!(
                    matches!(
                        code_of(&e),
                        Code::DEADLINE_EXCEEDED | Code::UNAVAILABLE | Code::ABORTED
                    ),
                    "{e:?}"
                );
                assert!(
                    started.elapsed() < std::time::Duration::from_secs(120),
                    "never finished: {e:?}"
                );
                said.push(message_of(&e));
                std::thread::sleep(std::time::Duration::from_secs(1));
            }
        }
    }
}

/// Waits until no temporary filesystem of a restore is left.
pub fn no_temporary_left(state: &StateDir) {
    wait_for(
        "no temporary clone to be left",
        std::time::Duration::from_secs(30),
        || temporaries(state).is_empty(),
    );
}

/// A restore of `snap` into `pvc-restored` whose caller gave up after 1 s,
/// once its temporary clone is POSTed (and, under `slow-clones`, still
/// being made): the request, for a retry.
pub fn given_up_mid_clone(dev: &Dev, snap: &csi::Snapshot) -> csi::CreateVolumeRequest {
    let req = from_snapshot(subdir_req("pvc-restored", GIB), &snap.snapshot_id);
    given_up_once(dev, &req, "into temporary filesystem");
    req
}

/// `req`, a restore, sent by a caller that gives up after 1 s, then
/// waited for until the driver logs `until`.
pub fn given_up_once(dev: &Dev, req: &csi::CreateVolumeRequest, until: &str) {
    assert_code(
        dev.controller.create_volume_opt(req, within(1)),
        Code::DEADLINE_EXCEEDED,
        "a restore slower than its caller",
    );
    wait_for(until, std::time::Duration::from_secs(60), || {
        dev.driver.logs().contains(until)
    });
}

/// A call bounded by `secs`, as a sidecar's `--timeout`.
pub fn within(secs: u64) -> grpcio::CallOption {
    grpcio::CallOption::default().timeout(std::time::Duration::from_secs(secs))
}
