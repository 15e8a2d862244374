//! Every node RPC refuses a malformed request with InvalidArgument before
//! touching anything (the driver runs in a private mount namespace anyway),
//! and an unimplemented RPC says so.

mod common;
mod node_support;

use common::code_of;
use grpcio::RpcStatusCode;
use linode_nfs_csi::proto::csi;
use linode_nfs_csi::proto::csi::volume_capability::access_mode::Mode;
use node_support::{call, capability, pairs, NfsNode};

/// Turns a valid request into one with a single defect.
type Breaker<R> = fn(&mut R);

fn assert_invalid<T: std::fmt::Debug>(what: &str, result: grpcio::Result<T>) {
    let err = result.expect_err(what);
    assert_eq!(
        code_of(&err),
        RpcStatusCode::INVALID_ARGUMENT,
        "{what}: {err:?}"
    );
}

#[test]
fn malformed_requests_are_invalid_arguments() {
    let node = NfsNode::start();
    let client = node.driver.node();
    let staging = node.kubelet_path("staging").to_string_lossy().into_owned();
    let target = node.kubelet_path("target").to_string_lossy().into_owned();

    let mut stage = csi::NodeStageVolumeRequest::new();
    stage.volume_id = "1/2".into();
    stage.staging_target_path = staging.clone();
    stage.volume_capability = Some(capability(Mode::MULTI_NODE_MULTI_WRITER, &[])).into();
    stage.volume_context = pairs(&[("mount-target", "fs:/e")]);
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
    for (what, break_it) in stage_cases {
        let mut r = stage.clone();
        break_it(&mut r);
        assert_invalid(what, client.node_stage_volume_opt(&r, call()));
    }

    let mut publish = csi::NodePublishVolumeRequest::new();
    publish.volume_id = "1/2".into();
    publish.staging_target_path = staging.clone();
    publish.target_path = target.clone();
    publish.volume_capability = Some(capability(Mode::MULTI_NODE_MULTI_WRITER, &[])).into();
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
    for (what, break_it) in publish_cases {
        let mut r = publish.clone();
        break_it(&mut r);
        assert_invalid(what, client.node_publish_volume_opt(&r, call()));
    }

    let mut unpublish = csi::NodeUnpublishVolumeRequest::new();
    unpublish.target_path = target.clone();
    assert_invalid(
        "unpublish: empty volume id",
        client.node_unpublish_volume_opt(&unpublish, call()),
    );
    unpublish.volume_id = "1/2".into();
    unpublish.target_path.clear();
    assert_invalid(
        "unpublish: empty target",
        client.node_unpublish_volume_opt(&unpublish, call()),
    );

    let mut unstage = csi::NodeUnstageVolumeRequest::new();
    unstage.staging_target_path = staging.clone();
    assert_invalid(
        "unstage: empty volume id",
        client.node_unstage_volume_opt(&unstage, call()),
    );
    unstage.volume_id = "1/2".into();
    unstage.staging_target_path.clear();
    assert_invalid(
        "unstage: empty staging",
        client.node_unstage_volume_opt(&unstage, call()),
    );

    let mut stats = csi::NodeGetVolumeStatsRequest::new();
    stats.volume_path = target.clone();
    assert_invalid(
        "stats: empty volume id",
        client.node_get_volume_stats_opt(&stats, call()),
    );
    stats.volume_id = "1/2".into();
    stats.volume_path.clear();
    assert_invalid(
        "stats: empty path",
        client.node_get_volume_stats_opt(&stats, call()),
    );

    assert!(node.helper_runs().is_empty(), "{:?}", node.helper_runs());
    assert!(node.kubelet_mounts().is_empty());
    assert!(!node.kubelet_path("staging").exists() && !node.kubelet_path("target").exists());
}

#[test]
fn stats_of_a_missing_path_is_not_found_and_expand_is_unimplemented() {
    let node = NfsNode::start();
    let err = node.stats(&node.kubelet_path("gone")).unwrap_err();
    assert_eq!(code_of(&err), RpcStatusCode::NOT_FOUND);

    let mut expand = csi::NodeExpandVolumeRequest::new();
    expand.volume_id = "1/2".into();
    expand.volume_path = node.kubelet_path("x").to_string_lossy().into_owned();
    let err = node
        .driver
        .node()
        .node_expand_volume_opt(&expand, call())
        .unwrap_err();
    assert_eq!(code_of(&err), RpcStatusCode::UNIMPLEMENTED);
}
