//! Every node RPC refuses a malformed request with InvalidArgument before
//! touching anything (the driver runs in a private mount namespace anyway),
//! and an unimplemented RPC says so.

mod common;
mod node_support;

use common::requests::*;
use common::rpc::*;
use grpcio::RpcStatusCode;
use linode_nfs_csi::proto::csi;
use node_support::{NfsNode, VOLUME};
use std::path::Path;

/// Turns a valid request into one with a single defect.
type Breaker<R> = fn(&mut R);

/// Sends `valid` with each case's defect; each must be InvalidArgument.
fn each_defect_is_invalid<R: Clone, T: std::fmt::Debug>(
    valid: &R,
    cases: Vec<(&str, Breaker<R>)>,
    send: impl Fn(&R) -> grpcio::Result<T>,
) {
    for (what, break_it) in cases {
        let mut r = valid.clone();
        break_it(&mut r);
        assert_code(send(&r), RpcStatusCode::INVALID_ARGUMENT, what);
    }
}

/// A valid stage of [`VOLUME`] from `fs:/e` at `staging`.
fn stage_at(staging: &Path) -> csi::NodeStageVolumeRequest {
    let mut stage = node_stage_req(
        VOLUME,
        staging,
        mount_capability(Mode::MULTI_NODE_MULTI_WRITER, &[]),
    );
    stage.volume_context = pairs(&[("mount-target", "fs:/e")]);
    stage
}

fn publish_at(staging: &Path, target: &Path) -> csi::NodePublishVolumeRequest {
    node_publish_req(
        VOLUME,
        staging,
        target,
        mount_capability(Mode::MULTI_NODE_MULTI_WRITER, &[]),
    )
}

#[test]
fn malformed_requests_are_invalid_arguments() {
    let node = NfsNode::start();
    let client = node.driver.node();
    let staging = node.kubelet_path("staging");
    let target = node.kubelet_path("target");

    let stage = stage_at(&staging);
    let stage_cases: Vec<(&str, Breaker<csi::NodeStageVolumeRequest>)> = vec![
        ("stage: empty volume id", |r| r.volume_id.clear()),
        ("stage: empty staging path", |r| {
            r.staging_target_path.clear()
        }),
        ("stage: relative staging path", |r| {
            r.staging_target_path = "rel/dir".into()
        }),
        ("stage: no capability", |r| r.volume_capability.clear()),
        ("stage: block capability", |r| {
            r.volume_capability
                .as_mut()
                .unwrap()
                .set_block(Default::default())
        }),
        ("stage: no mount source", |r| r.volume_context.clear()),
        ("stage: bad mtls mode", |r| {
            r.volume_context.insert("mtls-mode".into(), "maybe".into());
        }),
    ];
    each_defect_is_invalid(&stage, stage_cases, |r| {
        client.node_stage_volume_opt(r, call())
    });

    let publish = publish_at(&staging, &target);
    let publish_cases: Vec<(&str, Breaker<csi::NodePublishVolumeRequest>)> = vec![
        ("publish: empty volume id", |r| r.volume_id.clear()),
        ("publish: empty staging path", |r| {
            r.staging_target_path.clear()
        }),
        ("publish: empty target path", |r| r.target_path.clear()),
        ("publish: no capability", |r| r.volume_capability.clear()),
        ("publish: block capability", |r| {
            r.volume_capability
                .as_mut()
                .unwrap()
                .set_block(Default::default())
        }),
        ("publish: target is the staging path", |r| {
            r.target_path = r.staging_target_path.clone()
        }),
    ];
    each_defect_is_invalid(&publish, publish_cases, |r| {
        client.node_publish_volume_opt(r, call())
    });

    // Each of the other RPCs without its volume id, then without its path.
    let unpublish = |id: &str, path: &Path| {
        client
            .node_unpublish_volume_opt(&node_unpublish_req(id, path), call())
            .map(drop)
    };
    let unstage = |id: &str, path: &Path| {
        client
            .node_unstage_volume_opt(&node_unstage_req(id, path), call())
            .map(drop)
    };
    let stats = |id: &str, path: &Path| {
        client
            .node_get_volume_stats_opt(&node_stats_req(id, path), call())
            .map(drop)
    };
    let none = Path::new("");
    for (what, r) in [
        ("unpublish: empty volume id", unpublish("", &target)),
        ("unpublish: empty target", unpublish(VOLUME, none)),
        ("unstage: empty volume id", unstage("", &staging)),
        ("unstage: empty staging", unstage(VOLUME, none)),
        ("stats: empty volume id", stats("", &target)),
        ("stats: empty path", stats(VOLUME, none)),
    ] {
        assert_code(r, RpcStatusCode::INVALID_ARGUMENT, what);
    }

    assert!(node.helper_runs().is_empty(), "{:?}", node.helper_runs());
    assert!(node.kubelet_mounts().is_empty());
    assert!(!node.kubelet_path("staging").exists() && !node.kubelet_path("target").exists());
}

#[test]
fn stats_of_a_missing_path_is_not_found_and_expand_is_unimplemented() {
    let node = NfsNode::start();
    let err = node.stats(&node.kubelet_path("gone")).unwrap_err();
    assert_eq!(code_of(&err), RpcStatusCode::NOT_FOUND);

    let expand = csi::NodeExpandVolumeRequest {
        volume_id: VOLUME.into(),
        volume_path: node.kubelet_path("x").to_string_lossy().into_owned(),
        ..Default::default()
    };
    let err = node
        .driver
        .node()
        .node_expand_volume_opt(&expand, call())
        .unwrap_err();
    assert_eq!(code_of(&err), RpcStatusCode::UNIMPLEMENTED);
}

/// Paths the kernel would refuse or that climb out with `..`, oversized ids
/// and flags, and malformed volume attributes: InvalidArgument from every
/// RPC, with a short message, before any directory is made or the mount
/// helper runs.
#[test]
fn bad_paths_oversized_inputs_and_bad_attributes_are_refused_before_anything_is_made() {
    let node = NfsNode::start();
    let client = node.driver.node();
    let kubelet = node.kubelet_path("");
    let good = node.kubelet_path("staging");
    let escape = node.dir.join("escaped");
    let bad_paths = [
        // 5000 bytes: mkdir -p failed with ENAMETOOLONG (Internal) before.
        format!("{}/{}", kubelet.display(), ["d"; 2500].join("/")),
        format!("{}/{}/x", kubelet.display(), "n".repeat(256)),
        format!("{}/../escaped/x", kubelet.display()),
        format!("{}/a\0b", kubelet.display()),
    ];
    let short = |what: &str, err: &grpcio::Error| {
        assert_eq!(
            code_of(err),
            RpcStatusCode::INVALID_ARGUMENT,
            "{what}: {err:?}"
        );
        assert!(
            format!("{err:?}").len() < 1024,
            "{what}: message not bounded: {err:?}"
        );
    };

    let target = node.kubelet_path("target");
    for bad in &bad_paths {
        let what = &bad[..bad.len().min(80)];
        let bad = Path::new(bad);
        let mut stats_of_bad_staging = node_stats_req(VOLUME, &good);
        stats_of_bad_staging.staging_target_path = bad.to_string_lossy().into_owned();
        for err in [
            client
                .node_stage_volume_opt(&stage_at(bad), call())
                .map(drop),
            client
                .node_publish_volume_opt(&publish_at(&good, bad), call())
                .map(drop),
            client
                .node_publish_volume_opt(&publish_at(bad, &target), call())
                .map(drop),
            client
                .node_unpublish_volume_opt(&node_unpublish_req(VOLUME, bad), call())
                .map(drop),
            client
                .node_unstage_volume_opt(&node_unstage_req(VOLUME, bad), call())
                .map(drop),
            client
                .node_get_volume_stats_opt(&node_stats_req(VOLUME, bad), call())
                .map(drop),
            client
                .node_get_volume_stats_opt(&stats_of_bad_staging, call())
                .map(drop),
        ] {
            short(what, &err.unwrap_err());
        }
    }
    let mut stats = node_stats_req(VOLUME, &good);
    stats.staging_target_path = "relative/staging".into();
    short(
        "stats: relative staging path",
        &client
            .node_get_volume_stats_opt(&stats, call())
            .unwrap_err(),
    );

    let stage = stage_at(&good);
    let huge_id = "7".repeat(10_000);
    let with_context = |key: &str, value: String| {
        let mut r = stage.clone();
        r.volume_context.insert(key.into(), value);
        r
    };
    let mut huge_id_stage = stage.clone();
    huge_id_stage.volume_id = huge_id.clone();
    let mut many_flags = stage.clone();
    many_flags.volume_capability = Some(mount_capability(
        Mode::MULTI_NODE_MULTI_WRITER,
        &["nconnect=16"; 2000],
    ))
    .into();
    let stage_cases = [
        ("10k volume id", huge_id_stage),
        ("thousands of mount flags", many_flags),
        (
            "mount-target without an export path",
            with_context("mount-target", "fs-1.nfs.example.com".into()),
        ),
        (
            "mount-target with a relative export path",
            with_context("mount-target", "fs-1.nfs.example.com:pvc-1".into()),
        ),
        (
            "mount-target-ips entry that is no address",
            with_context("mount-target-ips", "[2001:db8::1]:/e,fs:/e".into()),
        ),
        (
            "huge mount-target",
            with_context("mount-target", format!("{}:/e", "h".repeat(1 << 20))),
        ),
    ];
    for (what, r) in &stage_cases {
        let err = client.node_stage_volume_opt(r, call()).unwrap_err();
        short(what, &err);
        if what.starts_with("mount-target") {
            let attribute = what.split(' ').next().unwrap();
            assert!(
                format!("{err:?}").contains(&format!("volume attribute {attribute} ")),
                "{what}: the attribute is named: {err:?}"
            );
        }
    }
    for id_only in [
        client
            .node_unstage_volume_opt(&node_unstage_req(&huge_id, &good), call())
            .map(drop),
        client
            .node_get_volume_stats_opt(&node_stats_req(&huge_id, &good), call())
            .map(drop),
    ] {
        short("10k volume id", &id_only.unwrap_err());
    }

    assert!(node.helper_runs().is_empty(), "{:?}", node.helper_runs());
    assert!(node.kubelet_mounts().is_empty());
    let made: Vec<_> = std::fs::read_dir(&kubelet).unwrap().collect();
    assert!(made.is_empty(), "created under the kubelet dir: {made:?}");
    assert!(!escape.exists(), "a `..` path reached outside");
}

/// Keys the node does not read are ignored however many or large, and a
/// stage with them mounts as usual.
#[test]
fn a_huge_volume_context_of_unknown_keys_is_ignored() {
    let node = NfsNode::start();
    node.export("fs:/e");
    let staging = node.kubelet_path("staging");
    let filler = "v".repeat(256);
    let mut context: Vec<(String, String)> = (0..5000)
        .map(|i| (format!("user/attribute-{i}"), filler.clone()))
        .collect();
    context.push(("mount-target".into(), "fs:/e".into()));
    let pairs: Vec<(&str, &str)> = context
        .iter()
        .map(|(k, v)| (k.as_str(), v.as_str()))
        .collect();
    node.stage(VOLUME, &staging, &pairs).unwrap();
    assert_eq!(node.mount_count(&staging), 1);
    node.unstage(VOLUME, &staging).unwrap();
    assert_eq!(node.mount_count(&staging), 0);
}

#[test]
fn stats_of_an_existing_directory_with_nothing_mounted_is_not_found() {
    let node = NfsNode::start();
    let dir = node.kubelet_path("pods/a/volumes/pvc-1/mount");
    std::fs::create_dir_all(&dir).unwrap();
    let err = node.stats(&dir).unwrap_err();
    assert_eq!(code_of(&err), RpcStatusCode::NOT_FOUND, "{err:?}");
}
