//! The node service with real mounts, in a private mount namespace: the
//! stage → publish → stats → unpublish → unstage lifecycle, idempotency,
//! cleanup, mTLS, NFS source choice (and its fallback when the name does not
//! resolve), the mount-helper timeout, and that no secret reaches a log line
//! or an error. See `node_support` for the fixture and its stand-in mount
//! helper.

mod common;
mod node_support;

use common::requests::*;
use common::rpc::*;
use common::wait_for;
use grpcio::RpcStatusCode;
use linode_nfs_csi::proto::csi;
use linode_nfs_csi::proto::csi::volume_usage::Unit;
use node_support::{NfsNode, VOLUME};
use std::path::Path;
use std::process::Command;
use std::time::{Duration, Instant};

const FQDN: &str = "fs-1.nfs.us-east.linode.com:/pvc-1";

fn fqdn_context() -> Vec<(&'static str, &'static str)> {
    vec![
        ("mount-target", FQDN),
        ("mount-target-ips", "[2001:db8::1]:/pvc-1"),
    ]
}

fn assert_gone(node: &NfsNode, path: &Path) {
    assert_eq!(
        node.mount_count(path),
        0,
        "{} still mounted",
        path.display()
    );
    assert!(!path.exists(), "{} not removed", path.display());
}

/// statvfs through the coreutils `stat`, independent of the driver's code:
/// fragment size, blocks, free, available, inodes, free inodes.
fn stat_f(path: &Path) -> [i64; 6] {
    let out = Command::new("stat")
        .args(["-f", "-c", "%S %b %f %a %c %d"])
        .arg(path)
        .output()
        .unwrap();
    assert!(
        out.status.success(),
        "{}",
        String::from_utf8_lossy(&out.stderr)
    );
    let v: Vec<i64> = String::from_utf8(out.stdout)
        .unwrap()
        .split_whitespace()
        .map(|n| n.parse().unwrap())
        .collect();
    [v[0], v[1], v[2], v[3], v[4], v[5]]
}

#[test]
fn stage_publish_stats_unpublish_unstage_with_every_step_twice() {
    let node = NfsNode::start();
    let export = node.export(FQDN);
    let staging = node.kubelet_path("plugins/linodenfs.csi.linode.com/vol/globalmount");
    let rw = node.kubelet_path("pods/a/volumes/pvc-1/mount");
    let ro = node.kubelet_path("pods/b/volumes/pvc-1/mount");
    let ro_by_mode = node.kubelet_path("pods/c/volumes/pvc-1/mount");

    for _ in 0..2 {
        node.stage(VOLUME, &staging, &fqdn_context()).unwrap();
    }
    assert_eq!(
        node.mount_count(&staging),
        1,
        "a repeated stage must not stack mounts"
    );
    assert_eq!(node.helper_runs().len(), 1, "{:?}", node.helper_runs());

    for _ in 0..2 {
        node.publish(&staging, &rw, false, Mode::MULTI_NODE_MULTI_WRITER, &[])
            .unwrap();
        node.publish(&staging, &ro, true, Mode::MULTI_NODE_MULTI_WRITER, &[])
            .unwrap();
        node.publish(
            &staging,
            &ro_by_mode,
            false,
            Mode::MULTI_NODE_READER_ONLY,
            &[],
        )
        .unwrap();
    }
    for target in [&rw, &ro, &ro_by_mode] {
        assert_eq!(node.mount_count(target), 1, "{}", target.display());
    }
    assert!(node.mount_options(&rw).unwrap().contains(&"rw".to_string()));
    assert!(node.mount_options(&ro).unwrap().contains(&"ro".to_string()));
    assert!(node
        .mount_options(&ro_by_mode)
        .unwrap()
        .contains(&"ro".to_string()));
    assert!(
        node.mount_options(&staging)
            .unwrap()
            .contains(&"rw".to_string()),
        "staging stays writable"
    );

    // The pod's rw view writes into the export; the ro views see it and
    // really refuse writes.
    std::fs::write(node.inside(&rw).join("hello"), "from pod a").unwrap();
    assert_eq!(
        std::fs::read_to_string(node.inside(&export).join("hello")).unwrap(),
        "from pod a"
    );
    for target in [&ro, &ro_by_mode] {
        assert_eq!(
            std::fs::read_to_string(node.inside(target).join("hello")).unwrap(),
            "from pod a"
        );
        let err = std::fs::write(node.inside(target).join("nope"), "x").unwrap_err();
        assert_eq!(
            err.raw_os_error(),
            Some(libc::EROFS),
            "{}: {err}",
            target.display()
        );
    }

    let want = stat_f(&node.inside(&export));
    let stats = node.stats(&rw).unwrap();
    let bytes = stats
        .usage
        .iter()
        .find(|u| u.unit.enum_value_or_default() == Unit::BYTES)
        .unwrap();
    let inodes = stats
        .usage
        .iter()
        .find(|u| u.unit.enum_value_or_default() == Unit::INODES)
        .unwrap();
    let [frsize, blocks, free, avail, files, ffree] = want;
    assert_eq!(
        (bytes.total, bytes.available, bytes.used),
        (blocks * frsize, avail * frsize, (blocks - free) * frsize)
    );
    assert_eq!(
        (inodes.total, inodes.available, inodes.used),
        (files, ffree, files - ffree)
    );
    assert!(
        bytes.used > 0 && inodes.used > 0,
        "the file written above counts"
    );
    let condition = stats.volume_condition.as_ref().expect("VOLUME_CONDITION");
    assert!(
        !condition.abnormal && !condition.message.is_empty(),
        "{condition:?}"
    );

    for _ in 0..2 {
        for target in [&rw, &ro, &ro_by_mode] {
            node.unpublish(target).unwrap();
        }
    }
    for target in [&rw, &ro, &ro_by_mode] {
        assert_gone(&node, target);
    }
    assert_eq!(
        node.mount_count(&staging),
        1,
        "unpublish never touches staging"
    );

    for _ in 0..2 {
        node.unstage(VOLUME, &staging).unwrap();
    }
    assert_gone(&node, &staging);
    assert!(
        node.kubelet_mounts().is_empty(),
        "{:?}",
        node.kubelet_mounts()
    );
    // The data went to the export, not to a node-local directory.
    assert_eq!(
        std::fs::read_to_string(node.inside(&export).join("hello")).unwrap(),
        "from pod a"
    );
}

/// A repeated publish answers from what is at the target: a writable bind
/// left by an attempt that died before its read-only remount is finished
/// read-only; a read-only one asked to be writable, or a mount of another
/// volume, is AlreadyExists and left untouched.
#[test]
fn a_repeated_publish_checks_the_mount_already_at_the_target() {
    const OTHER: &str = "fs-9.nfs.us-east.linode.com:/pvc-9";
    let node = NfsNode::start();
    node.export(FQDN);
    node.export(OTHER);
    let staging = node.kubelet_path("staging");
    let other_staging = node.kubelet_path("staging-other");
    let target = node.kubelet_path("pods/a/mount");
    node.stage(VOLUME, &staging, &fqdn_context()).unwrap();
    node.stage("1/9", &other_staging, &[("mount-target", OTHER)])
        .unwrap();

    node.publish(&staging, &target, false, Mode::MULTI_NODE_MULTI_WRITER, &[])
        .unwrap();
    node.publish(&staging, &target, true, Mode::MULTI_NODE_MULTI_WRITER, &[])
        .unwrap();
    assert_eq!(node.mount_count(&target), 1);
    assert!(node
        .mount_options(&target)
        .unwrap()
        .contains(&"ro".to_string()));
    assert!(std::fs::write(node.inside(&target).join("x"), "x").is_err());

    let err = node
        .publish(&staging, &target, false, Mode::MULTI_NODE_MULTI_WRITER, &[])
        .unwrap_err();
    assert_eq!(code_of(&err), RpcStatusCode::ALREADY_EXISTS, "{err:?}");
    let err = node
        .publish(
            &other_staging,
            &target,
            true,
            Mode::MULTI_NODE_MULTI_WRITER,
            &[],
        )
        .unwrap_err();
    assert_eq!(code_of(&err), RpcStatusCode::ALREADY_EXISTS, "{err:?}");
    assert_eq!(node.mount_count(&target), 1);
    assert!(node
        .mount_options(&target)
        .unwrap()
        .contains(&"ro".to_string()));
    for path in [&staging, &other_staging] {
        assert_eq!(node.mount_count(path), 1, "{}", path.display());
    }
}

#[test]
fn two_targets_share_one_staging_mount_and_leave_independently() {
    let node = NfsNode::start();
    node.export(FQDN);
    let staging = node.kubelet_path("staging");
    let a = node.kubelet_path("pods/a/mount");
    let b = node.kubelet_path("pods/b/mount");
    node.stage(VOLUME, &staging, &fqdn_context()).unwrap();
    node.publish(&staging, &a, false, Mode::MULTI_NODE_MULTI_WRITER, &[])
        .unwrap();
    node.publish(&staging, &b, false, Mode::MULTI_NODE_MULTI_WRITER, &[])
        .unwrap();

    std::fs::write(node.inside(&a).join("shared"), "a").unwrap();
    assert_eq!(
        std::fs::read_to_string(node.inside(&b).join("shared")).unwrap(),
        "a"
    );

    node.unpublish(&a).unwrap();
    assert_gone(&node, &a);
    assert_eq!(node.mount_count(&b), 1);
    std::fs::write(node.inside(&b).join("shared"), "b").unwrap();
    assert_eq!(
        std::fs::read_to_string(node.inside(&staging).join("shared")).unwrap(),
        "b"
    );

    node.unpublish(&b).unwrap();
    node.unstage(VOLUME, &staging).unwrap();
    assert!(
        node.kubelet_mounts().is_empty(),
        "{:?}",
        node.kubelet_mounts()
    );
}

#[test]
fn per_mount_flags_reach_the_bind_and_nfs_flags_reach_the_helper() {
    let node = NfsNode::start();
    node.export(FQDN);
    let staging = node.kubelet_path("staging");
    let target = node.kubelet_path("pods/a/mount");
    node.stage_with(
        VOLUME,
        &staging,
        &fqdn_context(),
        &["vers=4.2", "nconnect=4"],
    )
    .unwrap();
    assert_eq!(
        node.helper_runs(),
        [format!(
            "-t nfs4 -o vers=4.2,nconnect=4 {FQDN} {}",
            staging.display()
        )]
    );

    node.publish(
        &staging,
        &target,
        false,
        Mode::MULTI_NODE_MULTI_WRITER,
        &["vers=4.2", "noexec", "nosuid"],
    )
    .unwrap();
    let options = node.mount_options(&target).unwrap();
    for want in ["rw", "noexec", "nosuid"] {
        assert!(
            options.contains(&want.to_string()),
            "{want} missing from {options:?}"
        );
    }
    // Read-only on top keeps the other flags.
    let ro = node.kubelet_path("pods/b/mount");
    node.publish(
        &staging,
        &ro,
        true,
        Mode::MULTI_NODE_MULTI_WRITER,
        &["noexec"],
    )
    .unwrap();
    let options = node.mount_options(&ro).unwrap();
    assert!(
        options.contains(&"ro".to_string()) && options.contains(&"noexec".to_string()),
        "{options:?}"
    );
}

#[test]
fn unpublish_and_unstage_of_paths_that_never_existed_succeed() {
    let node = NfsNode::start();
    let missing = node.kubelet_path("pods/never/mount");
    node.unpublish(&missing).unwrap();
    node.unstage(VOLUME, &node.kubelet_path("never/globalmount"))
        .unwrap();

    // A directory that exists but was never mounted is removed too.
    let plain = node.kubelet_path("pods/plain/mount");
    std::fs::create_dir_all(&plain).unwrap();
    node.unpublish(&plain).unwrap();
    assert!(!plain.exists());
}

#[test]
fn a_directory_with_content_is_never_removed() {
    let node = NfsNode::start();
    let target = node.kubelet_path("pods/data/mount");
    std::fs::create_dir_all(&target).unwrap();
    std::fs::write(target.join("precious"), "data").unwrap();
    let err = node.unpublish(&target).unwrap_err();
    assert_eq!(code_of(&err), RpcStatusCode::INTERNAL);
    assert_eq!(
        std::fs::read_to_string(target.join("precious")).unwrap(),
        "data"
    );
}

#[test]
fn a_failed_publish_cleans_up_the_target_and_leaves_staging_mounted() {
    let node = NfsNode::start();
    node.export(FQDN);
    node.control("unbindable", true);
    let staging = node.kubelet_path("staging");
    let target = node.kubelet_path("pods/a/mount");
    node.stage(VOLUME, &staging, &fqdn_context()).unwrap();

    let err = node
        .publish(&staging, &target, false, Mode::MULTI_NODE_MULTI_WRITER, &[])
        .unwrap_err();
    assert_eq!(code_of(&err), RpcStatusCode::INTERNAL, "{err:?}");
    let message = format!("{err:?}");
    assert!(
        message.contains("NodePublishVolume could not mount")
            && message.contains("Invalid argument"),
        "the bind itself failed: {message}"
    );
    assert_gone(&node, &target);
    assert_eq!(
        node.mount_count(&staging),
        1,
        "the staging mount must survive a failed publish"
    );
    std::fs::write(node.inside(&staging).join("still-here"), "yes").unwrap();
}

#[test]
fn publish_of_an_unstaged_volume_is_a_failed_precondition() {
    let node = NfsNode::start();
    let staging = node.kubelet_path("staging");
    std::fs::create_dir_all(&staging).unwrap();
    let target = node.kubelet_path("pods/a/mount");
    let err = node
        .publish(&staging, &target, false, Mode::MULTI_NODE_MULTI_WRITER, &[])
        .unwrap_err();
    assert_eq!(code_of(&err), RpcStatusCode::FAILED_PRECONDITION, "{err:?}");
    assert!(!target.exists());
}

#[test]
fn mtls_required_passes_xprtsec_and_fails_when_tls_fails() {
    let node = NfsNode::start();
    node.export(FQDN);
    let staging = node.kubelet_path("staging");
    let context = [("mount-target", FQDN), ("mtls-mode", "required")];
    node.stage(VOLUME, &staging, &context).unwrap();
    assert_eq!(
        node.helper_runs(),
        [format!(
            "-t nfs4 -o xprtsec=mtls {FQDN} {}",
            staging.display()
        )]
    );
    node.unstage(VOLUME, &staging).unwrap();

    node.control("fail-mtls", true);
    let err = node.stage(VOLUME, &staging, &context).unwrap_err();
    assert_eq!(code_of(&err), RpcStatusCode::INTERNAL);
    let message = format!("{err:?}");
    assert!(
        message.contains("TLS handshake"),
        "helper stderr in the error: {message}"
    );
    assert_eq!(
        node.helper_runs().len(),
        2,
        "required never retries without mTLS"
    );
    assert_eq!(node.mount_count(&staging), 0);
}

#[test]
fn mtls_optional_retries_without_it_when_the_first_attempt_fails() {
    let node = NfsNode::start();
    node.export(FQDN);
    let staging = node.kubelet_path("staging");
    let context = [("mount-target", FQDN), ("mtls-mode", "optional")];

    node.stage_with(VOLUME, &staging, &context, &["vers=4.2"])
        .unwrap();
    assert_eq!(node.helper_runs().len(), 1, "mTLS worked: no retry");
    assert!(node.helper_runs()[0].contains("-o vers=4.2,xprtsec=mtls"));
    node.unstage(VOLUME, &staging).unwrap();

    node.control("fail-mtls", true);
    node.stage_with(VOLUME, &staging, &context, &["vers=4.2"])
        .unwrap();
    let runs = node.helper_runs();
    assert_eq!(runs.len(), 3, "{runs:?}");
    assert!(runs[1].contains("-o vers=4.2,xprtsec=mtls"), "{runs:?}");
    assert_eq!(
        runs[2],
        format!("-t nfs4 -o vers=4.2 {FQDN} {}", staging.display())
    );
    assert_eq!(node.mount_count(&staging), 1);
}

/// A TLS handshake that never completes is a failure like any other for
/// `optional`: the helper is killed at the timeout and the plain mount is
/// tried. `required` has nothing to fall back to and reports the timeout.
#[test]
fn mtls_optional_falls_back_after_a_timed_out_attempt() {
    let node = NfsNode::start_with("1s");
    node.export(FQDN);
    node.control("hang-mtls", true);
    let staging = node.kubelet_path("staging");

    node.stage_with(
        VOLUME,
        &staging,
        &[("mount-target", FQDN), ("mtls-mode", "optional")],
        &["vers=4.2,noatime"],
    )
    .unwrap();
    let runs = node.helper_runs();
    assert_eq!(runs.len(), 2, "{runs:?}");
    assert!(
        runs[0].contains("-o vers=4.2,noatime,xprtsec=mtls"),
        "{runs:?}"
    );
    assert_eq!(
        runs[1],
        format!("-t nfs4 -o vers=4.2,noatime {FQDN} {}", staging.display())
    );
    assert_eq!(node.mount_count(&staging), 1);
    node.unstage(VOLUME, &staging).unwrap();

    let err = node
        .stage(
            VOLUME,
            &staging,
            &[("mount-target", FQDN), ("mtls-mode", "required")],
        )
        .unwrap_err();
    assert_eq!(code_of(&err), RpcStatusCode::DEADLINE_EXCEEDED, "{err:?}");
    assert_eq!(node.helper_runs().len(), 3);
    assert_eq!(node.mount_count(&staging), 0);

    // An explicit xprtsec that contradicts `required` never reaches the helper.
    let err = node
        .stage_with(
            VOLUME,
            &staging,
            &[("mount-target", FQDN), ("mtls-mode", "required")],
            &["xprtsec=tls"],
        )
        .unwrap_err();
    assert_eq!(code_of(&err), RpcStatusCode::INVALID_ARGUMENT, "{err:?}");
    assert_eq!(node.helper_runs().len(), 3);
}

#[test]
fn mtls_disabled_or_absent_adds_nothing_and_an_unknown_mode_is_invalid() {
    let node = NfsNode::start();
    node.export(FQDN);
    let staging = node.kubelet_path("staging");
    node.stage(
        VOLUME,
        &staging,
        &[("mount-target", FQDN), ("mtls-mode", "disabled")],
    )
    .unwrap();
    assert_eq!(
        node.helper_runs(),
        [format!("-t nfs4 {FQDN} {}", staging.display())]
    );
    node.unstage(VOLUME, &staging).unwrap();

    let err = node
        .stage(
            VOLUME,
            &staging,
            &[("mount-target", FQDN), ("mtls-mode", "sometimes")],
        )
        .unwrap_err();
    assert_eq!(code_of(&err), RpcStatusCode::INVALID_ARGUMENT);
    assert!(format!("{err:?}")
        .contains("invalid mtls-mode value, must be one of: required, optional, disabled"));
    assert_eq!(
        node.helper_runs().len(),
        1,
        "nothing mounted for an invalid request"
    );
    assert!(!staging.exists());
}

#[test]
fn source_choice_prefers_the_fqdn_then_ipv6_and_refuses_ipv4_only() {
    let node = NfsNode::start();
    let ipv6 = "[2001:db8::5]:/pvc-2";
    node.export(FQDN);
    node.export(ipv6);

    let staging = node.kubelet_path("fqdn");
    node.stage(VOLUME, &staging, &fqdn_context()).unwrap();
    assert!(
        node.helper_runs()[0].contains(&format!(" {FQDN} ")),
        "{:?}",
        node.helper_runs()
    );

    let staging = node.kubelet_path("ipv6");
    let context = [
        ("mount-target", ""),
        (
            "mount-target-ips",
            "10.1.2.3:/pvc-2,[::ffff:10.1.2.3]:/pvc-2,[2001:db8::5]:/pvc-2",
        ),
    ];
    node.stage("1/3", &staging, &context).unwrap();
    assert!(
        node.helper_runs()[1].contains(&format!(" {ipv6} ")),
        "{:?}",
        node.helper_runs()
    );
    assert_eq!(node.mount_count(&staging), 1);

    let staging = node.kubelet_path("ipv4");
    let err = node
        .stage("1/4", &staging, &[("mount-target-ips", "10.1.2.3:/pvc-3")])
        .unwrap_err();
    assert_eq!(code_of(&err), RpcStatusCode::INVALID_ARGUMENT);
    assert_eq!(node.helper_runs().len(), 2);
}

/// A mount helper that never returns is killed at `NFS_MOUNT_TIMEOUT` and
/// the RPC fails with DeadlineExceeded (kubelet then treats the stage as
/// uncertain and keeps retrying), leaving nothing mounted and the driver
/// serving.
#[test]
fn a_hanging_helper_is_killed_at_the_timeout_and_the_rpc_fails_cleanly() {
    let node = NfsNode::start_with("1s");
    node.export(FQDN);
    node.control("hang", true);
    let staging = node.kubelet_path("staging");

    let started = Instant::now();
    let err = node.stage(VOLUME, &staging, &fqdn_context()).unwrap_err();
    let took = started.elapsed();
    assert_eq!(code_of(&err), RpcStatusCode::DEADLINE_EXCEEDED, "{err:?}");
    assert!(
        took >= Duration::from_secs(1) && took < Duration::from_secs(10),
        "{took:?}"
    );
    assert_eq!(node.mount_count(&staging), 0);

    let sleeper: i32 = std::fs::read_to_string(node.dir.join("hang.pid"))
        .unwrap()
        .trim()
        .parse()
        .unwrap();
    wait_for(
        "the helper's child to be killed",
        Duration::from_secs(10),
        || {
            let stat = std::fs::read_to_string(format!("/proc/{sleeper}/stat")).unwrap_or_default();
            stat.is_empty() || stat.split(' ').nth(2) == Some("Z")
        },
    );

    node.control("hang", false);
    node.stage(VOLUME, &staging, &fqdn_context()).unwrap();
    assert_eq!(node.mount_count(&staging), 1);
}

#[test]
fn a_second_stage_of_a_volume_in_progress_is_aborted_while_others_proceed() {
    let node = NfsNode::start_with("20s");
    node.export(FQDN);
    node.control("hang", true);
    let staging = node.kubelet_path("slow");
    let slow = std::thread::scope(|s| {
        let slow = s.spawn(|| node.stage(VOLUME, &staging, &fqdn_context()));
        wait_for("the first helper to start", Duration::from_secs(10), || {
            node.dir.join("hang.pid").exists()
        });

        let err = node
            .stage(VOLUME, &node.kubelet_path("other-path"), &fqdn_context())
            .unwrap_err();
        assert_eq!(code_of(&err), RpcStatusCode::ABORTED, "{err:?}");

        // Unblock the helper for everything after this point.
        node.control("hang", false);
        let pid: i32 = std::fs::read_to_string(node.dir.join("hang.pid"))
            .unwrap()
            .trim()
            .parse()
            .unwrap();
        node.stage("1/3", &node.kubelet_path("other-volume"), &fqdn_context())
            .unwrap();
        // SAFETY: kill(2) of the stand-in helper's own `sleep`.
        unsafe { libc::kill(pid, libc::SIGKILL) };
        slow.join().unwrap()
    });
    slow.unwrap();
    assert_eq!(node.mount_count(&staging), 1);
}

/// A node that cannot resolve the mount target's name mounts the volume's
/// IPv6 target instead, within the same NodeStageVolume, says so in its log,
/// and the result is the same staging mount a publish can use.
#[test]
fn a_mount_target_that_does_not_resolve_is_mounted_by_its_ipv6_address() {
    let node = NfsNode::start();
    let by_ip = node.export("[2001:db8::1]:/pvc-1");
    node.control("no-dns", true);
    let staging = node.kubelet_path("staging");
    let context = [
        ("mount-target", FQDN),
        ("mount-target-ips", "[2001:db8::1]:/pvc-1"),
        ("mtls-mode", "optional"),
    ];
    node.stage(VOLUME, &staging, &context).unwrap();
    let runs = node.helper_runs();
    assert_eq!(runs.len(), 2, "{runs:?}");
    assert!(runs[0].contains(&format!(" {FQDN} ")), "{runs:?}");
    assert!(runs[1].contains(" [2001:db8::1]:/pvc-1 "), "{runs:?}");
    assert_eq!(node.mount_count(&staging), 1);
    // The staging mount is the address's export (as the driver sees it).
    std::fs::write(node.inside(&by_ip).join("hello"), "served by address").unwrap();
    assert_eq!(
        std::fs::read_to_string(node.inside(&staging).join("hello")).unwrap(),
        "served by address"
    );
    let logs = node.driver.logs();
    assert!(
        logs.contains("mounting its IPv6 target [2001:db8::1]:/pvc-1 instead")
            && logs.contains("staged volume 1/2 from [2001:db8::1]:/pvc-1 at"),
        "{logs}"
    );

    // A retried stage finds it staged; publish binds it as usual.
    node.stage(VOLUME, &staging, &context).unwrap();
    assert_eq!(node.helper_runs().len(), 2);
    let target = node.kubelet_path("pods/a/mount");
    node.publish(&staging, &target, false, Mode::MULTI_NODE_MULTI_WRITER, &[])
        .unwrap();
    assert_eq!(
        std::fs::read_to_string(node.inside(&target).join("hello")).unwrap(),
        "served by address"
    );
    node.unpublish(&target).unwrap();
    node.unstage(VOLUME, &staging).unwrap();
    assert!(node.kubelet_mounts().is_empty());

    // Without an address to fall back to, the name's failure is the answer.
    let err = node
        .stage("1/3", &staging, &[("mount-target", FQDN)])
        .unwrap_err();
    assert_eq!(code_of(&err), RpcStatusCode::INTERNAL, "{err:?}");
    assert!(
        format!("{err:?}").contains("Failed to resolve server"),
        "{err:?}"
    );
    assert_eq!(node.helper_runs().len(), 3);
    assert!(node.kubelet_mounts().is_empty());
}

/// Every node RPC at trace level, succeeding and failing, with CSI secrets
/// on each request and a Linode token in the node's environment: neither
/// value reaches the log, stdout, or an error message.
#[test]
fn secrets_and_the_token_never_reach_a_log_line_or_an_error() {
    const SECRET: &str = "s3cr3t-value-7f1c";
    const TOKEN: &str = "linode-token-marker-9d2e";
    let node = NfsNode::start_configured("2m", &[("RUST_LOG", "trace"), ("LINODE_TOKEN", TOKEN)]);
    let client = node.driver.node();
    node.export(FQDN);
    let secrets: std::collections::HashMap<String, String> =
        [("password", SECRET), ("token", SECRET)]
            .into_iter()
            .map(|(k, v)| (k.to_string(), v.to_string()))
            .collect();
    let staging = node.kubelet_path("staging");
    let target = node.kubelet_path("pods/a/mount");
    let rwx = || mount_capability(Mode::MULTI_NODE_MULTI_WRITER, &[]);
    let stage = |context: &[(&str, &str)]| {
        let mut r = node_stage_req(VOLUME, &staging, rwx());
        r.volume_context = pairs(context);
        r.secrets = secrets.clone();
        client.node_stage_volume_opt(&r, call()).map(|_| ())
    };
    let publish = || {
        let mut r = node_publish_req(VOLUME, &staging, &target, rwx());
        r.secrets = secrets.clone();
        client.node_publish_volume_opt(&r, call()).map(|_| ())
    };
    let mut errors = Vec::new();
    let mut failed = |r: grpcio::Result<()>| errors.push(format!("{:?}", r.unwrap_err()));

    failed(publish()); // not staged yet: FailedPrecondition
    failed(stage(&[("mount-target", "no-export:/x")])); // the helper fails: Internal
    failed(stage(&[("mount-target", "bad target")])); // InvalidArgument
    stage(&[("mount-target", FQDN)]).unwrap();
    publish().unwrap();
    client
        .node_get_volume_stats_opt(&node_stats_req(VOLUME, &target), call())
        .unwrap();
    let expand = csi::NodeExpandVolumeRequest {
        volume_id: VOLUME.into(),
        volume_path: target.to_string_lossy().into_owned(),
        secrets: secrets.clone(),
        ..Default::default()
    };
    failed(client.node_expand_volume_opt(&expand, call()).map(|_| ()));
    failed(
        client
            .node_get_info_opt(&Default::default(), call())
            .map(|_| ()),
    );
    client
        .node_unpublish_volume_opt(&node_unpublish_req(VOLUME, &target), call())
        .unwrap();
    client
        .node_unstage_volume_opt(&node_unstage_req(VOLUME, &staging), call())
        .unwrap();

    assert_eq!(errors.len(), 5, "{errors:?}");
    for e in &errors {
        assert!(!e.contains(SECRET) && !e.contains(TOKEN), "{e}");
    }
    let logs = node.driver.logs() + &node.driver.stdout();
    // The bodies were logged (redacted), so this is not vacuous.
    assert!(
        logs.contains("NodeStageVolume request:") && logs.contains("***"),
        "request bodies not logged"
    );
    assert!(!logs.contains(SECRET), "a secret reached the log");
    assert!(!logs.contains(TOKEN), "the token reached the log");
    assert!(!node.helper_runs().iter().any(|r| r.contains(SECRET)));
}
