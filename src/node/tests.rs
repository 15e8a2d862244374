//! Node domain logic against an in-memory `Mounter`: request validation with
//! the reference's messages, mTLS attempt order, the source fallback when a
//! name does not resolve, how statvfs failures become volume conditions, and
//! what a failed publish may touch. Real mounts are covered by
//! `tests/node_*.rs`.

use super::stats::tests::FIGURES;
use super::*;
use crate::mount::{FsStats, MountTable, NfsMount, NfsMountError, StatvfsError};
use crate::proto::csi::volume_capability::access_mode::Mode;
use std::collections::VecDeque;
use std::path::PathBuf;
use std::sync::Mutex;
use std::time::Duration;

#[derive(Default)]
struct FakeMounter {
    state: Mutex<FakeState>,
    /// While true, `statvfs` blocks like one on a dead hard NFS mount.
    stats_hang: Mutex<bool>,
    stats_released: std::sync::Condvar,
    stats_calls: std::sync::atomic::AtomicUsize,
    /// What `statvfs` of an existing path returns; figures when unset.
    stats_result: Mutex<Option<Result<FsStats, StatvfsError>>>,
}

#[derive(Default)]
struct FakeState {
    /// Mount point and whether it is read-only, in mount order.
    mounted: Vec<(PathBuf, bool)>,
    calls: Vec<String>,
    /// Outcomes of the next `mount_nfs4` calls; success when empty.
    nfs_results: VecDeque<Result<(), NfsMountError>>,
    fail_bind: bool,
    /// A remount that "succeeds" without making anything read-only.
    ignore_readonly: bool,
}

impl FakeMounter {
    fn state(&self) -> std::sync::MutexGuard<'_, FakeState> {
        self.state.lock().unwrap()
    }
    fn is_mounted(&self, path: &Path) -> bool {
        self.state().mounted.iter().any(|(p, _)| p == path)
    }
    fn calls(&self) -> Vec<String> {
        self.state().calls.clone()
    }
}

impl Mounter for FakeMounter {
    fn mount_nfs4(&self, mount: &NfsMount) -> Result<(), NfsMountError> {
        let (source, target, options) = (mount.source, mount.target, mount.options);
        let mut s = self.state();
        s.calls.push(format!(
            "nfs {source} {} [{}]",
            target.display(),
            options.join(",")
        ));
        let result = s.nfs_results.pop_front().unwrap_or(Ok(()));
        if result.is_ok() {
            s.mounted.push((target.to_path_buf(), false));
        }
        result
    }

    fn bind(&self, source: &Path, target: &Path, flags: &[String]) -> Result<()> {
        let mut s = self.state();
        s.calls.push(format!(
            "bind {} {} [{}]",
            source.display(),
            target.display(),
            flags.join(",")
        ));
        if s.fail_bind {
            return Err(Error::Internal("bind refused".into()));
        }
        s.mounted.push((target.to_path_buf(), false));
        Ok(())
    }

    fn remount_readonly(&self, target: &Path) -> Result<()> {
        let mut s = self.state();
        s.calls.push(format!("ro {}", target.display()));
        if !s.ignore_readonly {
            if let Some(m) = s.mounted.iter_mut().rev().find(|(p, _)| p == target) {
                m.1 = true;
            }
        }
        Ok(())
    }

    fn unmount(&self, target: &Path) -> Result<()> {
        let mut s = self.state();
        s.calls.push(format!("unmount {}", target.display()));
        if let Some(i) = s.mounted.iter().rposition(|(p, _)| p == target) {
            s.mounted.remove(i);
        }
        Ok(())
    }

    fn detach(&self, target: &Path) -> Result<()> {
        let mut s = self.state();
        s.calls.push(format!("detach {}", target.display()));
        if let Some(i) = s.mounted.iter().rposition(|(p, _)| p == target) {
            s.mounted.remove(i);
        }
        Ok(())
    }

    fn mount_table(&self) -> Result<MountTable> {
        let text: String = self
            .state()
            .mounted
            .iter()
            .enumerate()
            .map(|(i, (p, ro))| {
                let mode = if *ro { "ro" } else { "rw" };
                format!(
                    "{} 1 0:{i} / {} {mode} - fake fake rw\n",
                    i + 10,
                    p.display()
                )
            })
            .collect();
        MountTable::parse(text.as_bytes())
    }

    fn statvfs(&self, path: &Path) -> Result<FsStats, StatvfsError> {
        self.stats_calls
            .fetch_add(1, std::sync::atomic::Ordering::SeqCst);
        let mut hang = self.stats_hang.lock().unwrap();
        while *hang {
            hang = self.stats_released.wait(hang).unwrap();
        }
        drop(hang);
        if !path.exists() {
            return Err(StatvfsError::Missing(format!(
                "statvfs {}: gone",
                path.display()
            )));
        }
        self.stats_result
            .lock()
            .unwrap()
            .clone()
            .unwrap_or(Ok(FIGURES))
    }
}

struct Fixture {
    mounter: Arc<FakeMounter>,
    plugin: NodePlugin,
    dir: PathBuf,
}

impl Fixture {
    fn new(name: &str) -> Fixture {
        let dir = std::env::temp_dir().join(format!("node-unit-{name}-{}", std::process::id()));
        let _ = std::fs::remove_dir_all(&dir);
        std::fs::create_dir_all(&dir).unwrap();
        let mounter = Arc::new(FakeMounter::default());
        let plugin = NodePlugin::new(NodeDeps {
            mounter: mounter.clone(),
            node_name: "n".into(),
            metadata: crate::metadata::MetadataClient::new(
                "http://127.0.0.1:9",
                Duration::from_millis(200),
            ),
            kube: None,
        });
        Fixture {
            mounter,
            plugin,
            dir,
        }
    }

    fn path(&self, rel: &str) -> String {
        self.dir.join(rel).to_string_lossy().into_owned()
    }

    fn stage_request(&self, context: &[(&str, &str)]) -> csi::NodeStageVolumeRequest {
        let mut req = csi::NodeStageVolumeRequest::new();
        req.volume_id = "1/2".into();
        req.staging_target_path = self.path("staging");
        req.volume_capability = Some(capability(Mode::MULTI_NODE_MULTI_WRITER)).into();
        req.volume_context = context
            .iter()
            .map(|(k, v)| (k.to_string(), v.to_string()))
            .collect();
        req
    }

    fn publish_request(&self) -> csi::NodePublishVolumeRequest {
        let mut req = csi::NodePublishVolumeRequest::new();
        req.volume_id = "1/2".into();
        req.staging_target_path = self.path("staging");
        req.target_path = self.path("target");
        req.volume_capability = Some(capability(Mode::MULTI_NODE_MULTI_WRITER)).into();
        req
    }

    /// Probes bounded by `timeout` instead of the 10 s default.
    fn bound_statvfs(&mut self, timeout: Duration) {
        self.plugin.probes = Arc::new(crate::mount::probe::Probes::new(timeout));
    }

    fn staged(&self) {
        let req = self.stage_request(&[("mount-target", "fs:/e")]);
        self.plugin.stage(&req).unwrap();
    }
}

impl Drop for Fixture {
    fn drop(&mut self) {
        let _ = std::fs::remove_dir_all(&self.dir);
    }
}

fn capability(mode: Mode) -> csi::VolumeCapability {
    let mut cap = csi::VolumeCapability::new();
    cap.set_mount(csi::volume_capability::MountVolume::new());
    let mut access = csi::volume_capability::AccessMode::new();
    access.mode = mode.into();
    cap.access_mode = Some(access).into();
    cap
}

fn failure(e: Error) -> Result<(), NfsMountError> {
    Err(e.into())
}

/// What the mounter reports when mount.nfs cannot resolve `host`.
fn unresolved(host: &str) -> Result<(), NfsMountError> {
    Err(NfsMountError {
        error: Error::Internal(format!(
            "mount.nfs4: Failed to resolve server {host}: Name or service not known"
        )),
        unresolved_host: true,
    })
}

fn invalid(message: &str) -> Error {
    Error::InvalidArgument(message.to_string())
}

#[test]
fn stage_validation_uses_the_reference_messages() {
    let f = Fixture::new("stage-validation");
    let ok = f.stage_request(&[("mount-target", "fs:/e")]);

    let mut r = ok.clone();
    r.volume_id.clear();
    assert_eq!(
        f.plugin.stage(&r).unwrap_err(),
        invalid("volume ID is not set")
    );
    let mut r = ok.clone();
    r.staging_target_path.clear();
    assert_eq!(
        f.plugin.stage(&r).unwrap_err(),
        invalid("staging target path is not set")
    );
    let mut r = ok.clone();
    r.volume_capability.clear();
    assert_eq!(
        f.plugin.stage(&r).unwrap_err(),
        invalid("no volume capability set")
    );
    let mut r = ok.clone();
    r.volume_capability
        .as_mut()
        .unwrap()
        .set_block(Default::default());
    assert_eq!(
        f.plugin.stage(&r).unwrap_err(),
        invalid("no mount volume capability set")
    );
    let mut r = ok.clone();
    r.volume_context.clear();
    assert_eq!(
        f.plugin.stage(&r).unwrap_err(),
        invalid("mount-target is required in volume context")
    );
    let mut r = ok.clone();
    r.staging_target_path = "relative/staging".into();
    assert!(matches!(
        f.plugin.stage(&r).unwrap_err(),
        Error::InvalidArgument(_)
    ));
    assert!(
        f.mounter.calls().is_empty(),
        "nothing mounted for invalid requests"
    );
}

/// `call` refuses a request without a volume id, and one with an id but
/// without the path `set` fills in, naming what is missing.
fn requires_id_and_path<R: Default>(
    path: String,
    set: impl Fn(&mut R, String, String),
    call: impl Fn(&R) -> Result<(), Error>,
    path_name: &str,
) {
    let mut r = R::default();
    set(&mut r, String::new(), path);
    assert_eq!(call(&r).unwrap_err(), invalid("volume ID is not set"));
    let mut r = R::default();
    set(&mut r, "1/2".into(), String::new());
    assert_eq!(
        call(&r).unwrap_err(),
        invalid(&format!("{path_name} is not set"))
    );
}

#[test]
fn publish_unpublish_unstage_and_stats_validation() {
    let f = Fixture::new("other-validation");
    let ok = f.publish_request();
    type Breaker = fn(&mut csi::NodePublishVolumeRequest);
    let cases: [(Breaker, &str); 5] = [
        (|r| r.volume_id.clear(), "volume ID is not set"),
        (
            |r| r.staging_target_path.clear(),
            "staging target path is not set",
        ),
        (|r| r.target_path.clear(), "target path is not set"),
        (|r| r.volume_capability.clear(), "no volume capability set"),
        (
            |r| {
                r.volume_capability
                    .as_mut()
                    .unwrap()
                    .set_block(Default::default())
            },
            "no mount volume capability set",
        ),
    ];
    for (break_it, message) in cases {
        let mut r = ok.clone();
        break_it(&mut r);
        assert_eq!(f.plugin.publish(&r).unwrap_err(), invalid(message));
    }
    let mut same = ok.clone();
    same.target_path = same.staging_target_path.clone();
    assert!(matches!(
        f.plugin.publish(&same).unwrap_err(),
        Error::InvalidArgument(_)
    ));

    requires_id_and_path(
        f.path("target"),
        |r: &mut csi::NodeUnpublishVolumeRequest, id, path| {
            r.volume_id = id;
            r.target_path = path;
        },
        |r| f.plugin.unpublish(r).map(drop),
        "target path",
    );
    requires_id_and_path(
        f.path("staging"),
        |r: &mut csi::NodeUnstageVolumeRequest, id, path| {
            r.volume_id = id;
            r.staging_target_path = path;
        },
        |r| f.plugin.unstage(r).map(drop),
        "staging target path",
    );
    requires_id_and_path(
        f.path("target"),
        |r: &mut csi::NodeGetVolumeStatsRequest, id, path| {
            r.volume_id = id;
            r.volume_path = path;
        },
        |r| f.plugin.stats(r).map(drop),
        "volume path",
    );
    assert!(f.mounter.calls().is_empty());
}

fn stats_request(path: &str) -> csi::NodeGetVolumeStatsRequest {
    let mut r = csi::NodeGetVolumeStatsRequest::new();
    r.volume_id = "1/2".into();
    r.volume_path = path.into();
    r
}

fn condition(resp: &csi::NodeGetVolumeStatsResponse) -> (bool, String) {
    let c = resp.volume_condition.as_ref().expect("a volume condition");
    (c.abnormal, c.message.clone())
}

#[test]
fn stats_of_a_path_with_nothing_mounted_is_not_found() {
    let f = Fixture::new("stats-not-found");
    std::fs::create_dir_all(f.path("unmounted")).unwrap();
    for path in [f.path("missing"), f.path("unmounted"), "some/path".into()] {
        let err = f.plugin.stats(&stats_request(&path)).unwrap_err();
        assert!(
            matches!(&err, Error::NotFound(m) if m.starts_with("volume path not found: ")),
            "{path}: {err:?}"
        );
    }
    assert_eq!(
        f.mounter
            .stats_calls
            .load(std::sync::atomic::Ordering::SeqCst),
        0,
        "nothing mounted, nothing to ask"
    );
}

#[test]
fn a_healthy_mount_reports_its_usage_and_a_normal_condition() {
    let f = Fixture::new("stats-healthy");
    f.staged();
    let resp = f.plugin.stats(&stats_request(&f.path("staging"))).unwrap();
    assert_eq!(resp.usage, super::stats::usage(&FIGURES));
    assert!(!condition(&resp).0, "{resp:?}");
}

#[test]
fn stale_and_failing_mounts_are_abnormal_conditions_not_errors() {
    let f = Fixture::new("stats-abnormal");
    f.staged();
    for (result, cause) in [
        (
            StatvfsError::Stale("statvfs x: Stale file handle (os error 116)".into()),
            "stale NFS file handle",
        ),
        (
            StatvfsError::Io("statvfs x: Input/output error (os error 5)".into()),
            "I/O error",
        ),
    ] {
        *f.mounter.stats_result.lock().unwrap() = Some(Err(result.clone()));
        let resp = f.plugin.stats(&stats_request(&f.path("staging"))).unwrap();
        let (abnormal, message) = condition(&resp);
        assert!(abnormal, "{result:?}");
        assert!(message.starts_with(cause), "{message}");
        assert!(
            message.contains("os error"),
            "the kernel's reason: {message}"
        );
        // kubelet drops a response without usage, and the condition with it.
        assert_eq!(resp.usage.len(), 2, "{resp:?}");
        assert!(resp.usage.iter().all(|u| u.total == 0));
    }
    *f.mounter.stats_result.lock().unwrap() = Some(Err(StatvfsError::Other(
        "statvfs x: Permission denied".into(),
    )));
    let err = f
        .plugin
        .stats(&stats_request(&f.path("staging")))
        .unwrap_err();
    assert!(
        matches!(&err, Error::Internal(m) if m.starts_with("failed to get stats: ")),
        "{err:?}"
    );
}

#[test]
fn a_hung_statvfs_is_bounded_reported_abnormal_and_not_piled_up() {
    let mut f = Fixture::new("stats-hang");
    f.staged();
    f.bound_statvfs(Duration::from_millis(50));
    *f.mounter.stats_hang.lock().unwrap() = true;
    let r = stats_request(&f.path("staging"));
    let (abnormal, message) = condition(&f.plugin.stats(&r).unwrap());
    assert!(abnormal && message.contains("did not return"), "{message}");
    let stuck = |f: &Fixture| f.plugin.probes.stuck();
    assert_eq!(stuck(&f), 1, "counted as stuck past its bound");
    // The stuck call is not repeated while it is still stuck.
    let (abnormal, message) = condition(&f.plugin.stats(&r).unwrap());
    assert!(
        abnormal && message.contains("has not returned"),
        "{message}"
    );
    assert_eq!(
        f.mounter
            .stats_calls
            .load(std::sync::atomic::Ordering::SeqCst),
        1
    );
    // Once the server answers again, the path is asked normally.
    *f.mounter.stats_hang.lock().unwrap() = false;
    f.mounter.stats_released.notify_all();
    let deadline = std::time::Instant::now() + Duration::from_secs(10);
    while !f.plugin.probes.idle() {
        assert!(
            std::time::Instant::now() < deadline,
            "stuck statvfs never finished"
        );
        std::thread::sleep(Duration::from_millis(5));
    }
    assert_eq!(stuck(&f), 0);
    let resp = f.plugin.stats(&r).unwrap();
    assert!(!condition(&resp).0, "{resp:?}");
    assert_eq!(
        f.mounter
            .stats_calls
            .load(std::sync::atomic::Ordering::SeqCst),
        2
    );
}

#[test]
fn an_unresolvable_name_is_retried_on_the_ipv6_target_in_the_same_call() {
    let f = Fixture::new("dns");
    let req = f.stage_request(&[
        ("mount-target", "fs.example:/e"),
        ("mount-target-ips", "[::ffff:10.0.0.1]:/e,[2001:db8::5]:/e"),
        ("mtls-mode", "optional"),
    ]);
    f.mounter
        .state()
        .nfs_results
        .push_back(unresolved("fs.example"));
    f.plugin.stage(&req).unwrap();
    let staging = f.path("staging");
    // No plain retry of the name: no option makes it resolve.
    assert_eq!(
        f.mounter.calls(),
        [
            format!("nfs fs.example:/e {staging} [xprtsec=mtls]"),
            format!("nfs [2001:db8::5]:/e {staging} [xprtsec=mtls]"),
        ]
    );
    assert!(f.mounter.is_mounted(Path::new(&staging)));
    // A retried stage finds it staged, from a source of this volume.
    f.plugin.stage(&req).unwrap();
    assert_eq!(f.mounter.calls().len(), 2);
}

#[test]
fn other_failures_and_volumes_without_ipv6_targets_are_not_retried() {
    let f = Fixture::new("dns-other");
    let req = f.stage_request(&[
        ("mount-target", "fs.example:/e"),
        ("mount-target-ips", "[2001:db8::5]:/e"),
    ]);
    f.mounter
        .state()
        .nfs_results
        .push_back(failure(Error::Internal("access denied by server".into())));
    let err = f.plugin.stage(&req).unwrap_err();
    assert!(err.message().contains("access denied"), "{err}");
    assert_eq!(f.mounter.calls().len(), 1);

    let f = Fixture::new("dns-no-ip");
    let req = f.stage_request(&[("mount-target", "fs.example:/e")]);
    f.mounter
        .state()
        .nfs_results
        .push_back(unresolved("fs.example"));
    let err = f.plugin.stage(&req).unwrap_err();
    assert!(
        matches!(&err, Error::Internal(m) if m.contains("Failed to resolve server")),
        "{err:?}"
    );
    assert_eq!(f.mounter.calls().len(), 1);
}

#[test]
fn when_the_ipv6_target_fails_too_both_failures_are_reported() {
    let f = Fixture::new("dns-both");
    let req = f.stage_request(&[
        ("mount-target", "fs.example:/e"),
        ("mount-target-ips", "[2001:db8::5]:/e"),
    ]);
    f.mounter.state().nfs_results.extend([
        unresolved("fs.example"),
        failure(Error::DeadlineExceeded("killed".into())),
    ]);
    let err = f.plugin.stage(&req).unwrap_err();
    // The address attempt's code decides how kubelet treats the stage.
    assert!(matches!(err, Error::DeadlineExceeded(_)), "{err:?}");
    let message = err.message();
    assert!(
        message.contains("[2001:db8::5]:/e") && message.contains("Failed to resolve server"),
        "{message}"
    );
    assert!(!f.mounter.is_mounted(Path::new(&f.path("staging"))));
}

#[test]
fn optional_mtls_retries_plain_after_a_failure_or_a_timeout() {
    let f = Fixture::new("optional");
    let req = f.stage_request(&[("mount-target", "fs:/e"), ("mtls-mode", "optional")]);
    f.mounter
        .state()
        .nfs_results
        .push_back(failure(Error::Internal("tls failed".into())));
    f.plugin.stage(&req).unwrap();
    let staging = f.path("staging");
    assert_eq!(
        f.mounter.calls(),
        [
            format!("nfs fs:/e {staging} [xprtsec=mtls]"),
            format!("nfs fs:/e {staging} []")
        ]
    );

    let f = Fixture::new("optional-timeout");
    let req = f.stage_request(&[("mount-target", "fs:/e"), ("mtls-mode", "optional")]);
    f.mounter
        .state()
        .nfs_results
        .push_back(failure(Error::DeadlineExceeded("killed".into())));
    f.plugin.stage(&req).unwrap();
    assert_eq!(f.mounter.calls().len(), 2);

    // Both timing out: the last attempt's code is the RPC's, so kubelet
    // still treats the stage as uncertain.
    let f = Fixture::new("optional-timeouts");
    let req = f.stage_request(&[("mount-target", "fs:/e"), ("mtls-mode", "optional")]);
    f.mounter.state().nfs_results.extend([
        failure(Error::DeadlineExceeded("killed".into())),
        failure(Error::DeadlineExceeded("killed again".into())),
    ]);
    let err = f.plugin.stage(&req).unwrap_err();
    assert!(matches!(err, Error::DeadlineExceeded(_)), "{err:?}");
    assert_eq!(f.mounter.calls().len(), 2);
}

#[test]
fn when_both_optional_attempts_fail_both_errors_are_reported() {
    let f = Fixture::new("optional-both");
    let req = f.stage_request(&[("mount-target", "fs:/e"), ("mtls-mode", "optional")]);
    f.mounter.state().nfs_results.extend([
        failure(Error::Internal("tls failed".into())),
        failure(Error::Internal("access denied".into())),
    ]);
    let err = f.plugin.stage(&req).unwrap_err();
    let message = err.message();
    assert!(matches!(err, Error::Internal(_)));
    assert!(
        message.starts_with("NodeStageVolume failed to stage volume 1/2 at path "),
        "{message}"
    );
    assert!(
        message.contains("tls failed") && message.contains("access denied"),
        "{message}"
    );
}

#[test]
fn stage_of_a_staged_volume_mounts_nothing() {
    let f = Fixture::new("restage");
    f.staged();
    f.staged();
    assert_eq!(f.mounter.calls().len(), 1);
}

#[test]
fn a_failed_bind_cleans_the_target_and_never_the_staging_path() {
    let f = Fixture::new("bind-fails");
    f.staged();
    f.mounter.state().fail_bind = true;
    let err = f.plugin.publish(&f.publish_request()).unwrap_err();
    assert!(
        matches!(&err, Error::Internal(m) if m.starts_with("NodePublishVolume could not mount ")),
        "{err:?}"
    );
    let staging = f.path("staging");
    assert!(f.mounter.is_mounted(Path::new(&staging)));
    assert!(
        !f.mounter
            .calls()
            .iter()
            .any(|c| c == &format!("unmount {staging}")),
        "{:?}",
        f.mounter.calls()
    );
    assert!(!Path::new(&f.path("target")).exists());
}

#[test]
fn a_remount_that_stays_writable_is_refused_and_undone() {
    let f = Fixture::new("not-ro");
    f.staged();
    f.mounter.state().ignore_readonly = true;
    let mut req = f.publish_request();
    req.readonly = true;
    let err = f.plugin.publish(&req).unwrap_err();
    assert!(err.message().contains("not read-only"), "{err:?}");
    assert!(!f.mounter.is_mounted(Path::new(&f.path("target"))));
    assert!(f.mounter.is_mounted(Path::new(&f.path("staging"))));
}

#[test]
fn reader_only_modes_and_the_readonly_flag_make_the_bind_read_only() {
    for (mode, readonly, want_ro) in [
        (Mode::SINGLE_NODE_READER_ONLY, false, true),
        (Mode::MULTI_NODE_READER_ONLY, false, true),
        (Mode::MULTI_NODE_MULTI_WRITER, true, true),
        (Mode::SINGLE_NODE_WRITER, false, false),
        (Mode::MULTI_NODE_SINGLE_WRITER, false, false),
    ] {
        let f = Fixture::new("modes");
        f.staged();
        let mut req = f.publish_request();
        req.readonly = readonly;
        req.volume_capability = Some(capability(mode)).into();
        f.plugin.publish(&req).unwrap();
        let target = f.path("target");
        let remounted = f.mounter.calls().contains(&format!("ro {target}"));
        assert_eq!(remounted, want_ro, "{mode:?} readonly={readonly}");
    }
}

#[test]
fn a_held_target_or_volume_is_aborted() {
    let f = Fixture::new("locks");
    f.staged();
    let req = f.publish_request();
    let guard = f.plugin.targets.try_lock(&req.target_path).unwrap();
    assert!(matches!(f.plugin.publish(&req), Err(Error::Aborted(_))));
    let mut unpublish = csi::NodeUnpublishVolumeRequest::new();
    unpublish.volume_id = "1/2".into();
    unpublish.target_path = req.target_path.clone();
    assert!(matches!(
        f.plugin.unpublish(&unpublish),
        Err(Error::Aborted(_))
    ));
    drop(guard);
    f.plugin.publish(&req).unwrap();

    let _volume = f.plugin.volumes.try_lock("1/2").unwrap();
    let mut unstage = csi::NodeUnstageVolumeRequest::new();
    unstage.volume_id = "1/2".into();
    unstage.staging_target_path = f.path("staging");
    assert!(matches!(f.plugin.unstage(&unstage), Err(Error::Aborted(_))));
    // publish of another target is not held up by the volume lock
    let mut other = f.publish_request();
    other.target_path = f.path("target-2");
    f.plugin.publish(&other).unwrap();
}

/// The calls the mounter saw since `from`, kinds only (`nfs`, `detach`, …).
fn kinds_since(f: &Fixture, from: usize) -> Vec<String> {
    f.mounter.calls()[from..]
        .iter()
        .map(|c| c.split(' ').next().unwrap().to_string())
        .collect()
}

/// `csi_node_staging_remounts_total{reason}` as the process counts it.
fn remounts(reason: &str) -> f64 {
    let series = format!("csi_node_staging_remounts_total{{reason=\"{reason}\"}} ");
    crate::metrics::render()
        .lines()
        .find_map(|l| l.strip_prefix(&series)?.parse().ok())
        .unwrap_or(0.0)
}

fn healing_publish(f: &Fixture) -> csi::NodePublishVolumeRequest {
    let mut req = f.publish_request();
    req.volume_context = [("mount-target".to_string(), "fs:/e".to_string())].into();
    req
}

#[test]
fn a_stale_or_disconnected_staging_mount_is_mounted_again_before_the_bind() {
    for (sick, reason) in [
        (StatvfsError::Stale("ESTALE".into()), "stale"),
        (StatvfsError::Io("ENOTCONN".into()), "disconnected"),
        (StatvfsError::Io("EIO".into()), "disconnected"),
    ] {
        let f = Fixture::new(&format!("heal-{reason}"));
        f.staged();
        let from = f.mounter.calls().len();
        *f.mounter.stats_result.lock().unwrap() = Some(Err(sick.clone()));
        let before = remounts(reason);
        let mut req = healing_publish(&f);
        // After the remount, statvfs works again.
        let mounter = f.mounter.clone();
        let healed = std::thread::spawn(move || {
            while !mounter.calls().iter().any(|c| c.starts_with("detach")) {
                std::thread::yield_now();
            }
            *mounter.stats_result.lock().unwrap() = None;
        });
        f.plugin.publish(&req).unwrap();
        healed.join().unwrap();
        assert_eq!(
            kinds_since(&f, from),
            ["detach", "nfs", "bind"],
            "{sick:?}: detached, mounted again, then bound"
        );
        assert!(remounts(reason) > before, "a remount is counted");
        // A healthy staging mount is never mounted again.
        req.target_path = f.path("target-2");
        let from = f.mounter.calls().len();
        f.plugin.publish(&req).unwrap();
        assert_eq!(kinds_since(&f, from), ["bind"], "{reason}");
    }
}

#[test]
fn a_hung_staging_mount_is_unavailable_within_its_bound_and_never_mounted_over() {
    let mut f = Fixture::new("heal-hung");
    f.staged();
    f.bound_statvfs(Duration::from_millis(50));
    *f.mounter.stats_hang.lock().unwrap() = true;
    let from = f.mounter.calls().len();
    let started = std::time::Instant::now();
    let err = f.plugin.publish(&healing_publish(&f)).unwrap_err();
    assert!(matches!(err, Error::Unavailable(_)), "{err:?}");
    assert!(started.elapsed() < Duration::from_secs(5));
    // The stuck statvfs is not asked again, nor waited for.
    let err = f
        .plugin
        .stage(&f.stage_request(&[("mount-target", "fs:/e")]));
    assert!(matches!(err, Err(Error::Unavailable(_))), "{err:?}");
    assert!(kinds_since(&f, from).is_empty(), "nothing mounted over it");
    *f.mounter.stats_hang.lock().unwrap() = false;
    f.mounter.stats_released.notify_all();
}

#[test]
fn a_staging_mount_gone_while_staged_is_mounted_again_and_one_never_staged_is_refused() {
    let f = Fixture::new("heal-missing");
    let from = f.mounter.calls().len();
    let err = f.plugin.publish(&healing_publish(&f)).unwrap_err();
    assert!(matches!(err, Error::FailedPrecondition(_)), "{err:?}");
    assert!(
        kinds_since(&f, from).is_empty(),
        "never staged here: no mount"
    );

    f.staged();
    // The plugin's mount namespace died with the mount; kubelet still has
    // the volume staged and only publishes.
    f.mounter.state().mounted.clear();
    let from = f.mounter.calls().len();
    let before = remounts("missing");
    f.plugin.publish(&healing_publish(&f)).unwrap();
    assert!(remounts("missing") > before);
    assert_eq!(kinds_since(&f, from), ["detach", "nfs", "bind"]);
    // Unstaged, the mark goes with the mount: nothing is staged again.
    let mut unstage = csi::NodeUnstageVolumeRequest::new();
    unstage.volume_id = "1/2".into();
    unstage.staging_target_path = f.path("staging");
    let mut unpublish = csi::NodeUnpublishVolumeRequest::new();
    unpublish.volume_id = "1/2".into();
    unpublish.target_path = f.path("target");
    f.plugin.unpublish(&unpublish).unwrap();
    f.plugin.unstage(&unstage).unwrap();
    assert!(!f.dir.join("staging").exists());
    let err = f.plugin.publish(&healing_publish(&f)).unwrap_err();
    assert!(matches!(err, Error::FailedPrecondition(_)), "{err:?}");
}

#[test]
fn a_stage_of_a_stale_staging_mount_mounts_it_again() {
    let f = Fixture::new("stage-stale");
    f.staged();
    *f.mounter.stats_result.lock().unwrap() = Some(Err(StatvfsError::Stale("ESTALE".into())));
    let from = f.mounter.calls().len();
    f.staged();
    assert_eq!(kinds_since(&f, from), ["detach", "nfs"]);
    *f.mounter.stats_result.lock().unwrap() = None;
    let from = f.mounter.calls().len();
    f.staged();
    assert!(kinds_since(&f, from).is_empty(), "a working stage is kept");
}
