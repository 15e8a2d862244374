//! The node service with a directory of a shared filesystem
//! (`{space}/{filesystem}/{name}`), real mounts in a private namespace: the
//! mount helper is handed the export plus `/csi-volumes/<name>`, taken from
//! the volume id alone (the IPv6 fallback likewise); the rest of the
//! lifecycle is a whole filesystem's; a handle that escapes the base, a
//! context that tries to choose a path, and a directory missing on the share
//! are refused without mounting anything else. See `node_support` for the
//! fixture and its stand-in mount helper, which mounts an export directory
//! per source (so a directory's source has an export of its own).

mod common;
mod node_support;

use common::requests::*;
use common::rpc::*;
use grpcio::RpcStatusCode;
use node_support::NfsNode;

const SHARE: &str = "fs-1.nfs.us-east.linode.com:/shared-1";
const SHARE_V6: &str = "[2001:db8::1]:/shared-1";
const VOLUME: &str = "7/11/pvc-a";
const DIRECTORY: &str = "fs-1.nfs.us-east.linode.com:/shared-1/csi-volumes/pvc-a";
const DIRECTORY_V6: &str = "[2001:db8::1]:/shared-1/csi-volumes/pvc-a";

fn shared_context() -> Vec<(&'static str, &'static str)> {
    vec![
        ("mount-target", SHARE),
        ("mount-target-ips", SHARE_V6),
        ("volume-type", "subdirectory"),
        ("space-id", "7"),
        ("filesystem-id", "11"),
    ]
}

/// The source of each helper run (`-t nfs4 [-o opts] <source> <target>`).
fn sources(node: &NfsNode) -> Vec<String> {
    node.helper_runs()
        .iter()
        .map(|run| {
            let words: Vec<&str> = run.split(' ').collect();
            words[words.len() - 2].to_string()
        })
        .collect()
}

/// Every RPC of the lifecycle with the directory's id; repeats are no-ops.
#[test]
fn stage_mounts_the_directory_of_the_volume_id_and_the_rest_is_as_for_a_filesystem() {
    let node = NfsNode::start();
    let share = node.export(SHARE);
    let directory = node.export(DIRECTORY);
    let staging = node.kubelet_path("plugins/linodenfs.csi.linode.com/a/globalmount");
    let target = node.kubelet_path("pods/a/volumes/pvc-a/mount");

    for _ in 0..2 {
        node.stage(VOLUME, &staging, &shared_context()).unwrap();
    }
    assert_eq!(sources(&node), [DIRECTORY], "{:?}", node.helper_runs());
    assert_eq!(node.mount_count(&staging), 1);

    let mut publish = node_publish_req(
        VOLUME,
        &staging,
        &target,
        mount_capability(Mode::MULTI_NODE_MULTI_WRITER, &[]),
    );
    publish.volume_context = pairs(&shared_context());
    node.driver
        .node()
        .node_publish_volume_opt(&publish, call())
        .unwrap();
    std::fs::write(node.inside(&target).join("data"), "tenant a").unwrap();
    assert_eq!(
        std::fs::read_to_string(node.inside(&directory).join("data")).unwrap(),
        "tenant a"
    );
    assert!(
        !node.inside(&share).join("data").exists(),
        "the write went to the volume's directory, not the share's root"
    );
    let stats = node
        .driver
        .node()
        .node_get_volume_stats_opt(&node_stats_req(VOLUME, &target), call())
        .unwrap();
    assert!(!stats.volume_condition.unwrap().abnormal);
    assert!(stats.usage.iter().any(|u| u.total > 0), "{:?}", stats.usage);

    let unpublish = node_unpublish_req(VOLUME, &target);
    for _ in 0..2 {
        node.driver
            .node()
            .node_unpublish_volume_opt(&unpublish, call())
            .unwrap();
        node.unstage(VOLUME, &staging).unwrap();
    }
    assert!(
        node.kubelet_mounts().is_empty(),
        "{:?}",
        node.kubelet_mounts()
    );
    assert!(!staging.exists());
    assert_eq!(node.helper_runs().len(), 1);
}

#[test]
fn a_node_that_cannot_resolve_the_name_mounts_the_directory_by_its_ipv6_address() {
    let node = NfsNode::start();
    node.export(DIRECTORY_V6);
    node.control("no-dns", true);
    let staging = node.kubelet_path("staging");
    node.stage(VOLUME, &staging, &shared_context()).unwrap();
    assert_eq!(sources(&node), [DIRECTORY, DIRECTORY_V6]);
    assert_eq!(node.mount_count(&staging), 1);
}

/// The node never creates a volume's directory: if it is not on the share,
/// the mount fails and nothing is mounted (not the share's root either).
#[test]
fn a_directory_missing_on_the_share_fails_the_mount() {
    let node = NfsNode::start();
    node.export(SHARE);
    let staging = node.kubelet_path("staging");
    let err = node
        .stage("7/11/pvc-gone", &staging, &shared_context())
        .unwrap_err();
    assert_eq!(code_of(&err), RpcStatusCode::INTERNAL, "{err:?}");
    assert_eq!(
        sources(&node),
        [format!("{SHARE}/csi-volumes/pvc-gone")],
        "{:?}",
        node.helper_runs()
    );
    assert_eq!(node.mount_count(&staging), 0);
}

/// A handle whose name would leave the base, or a context that claims a
/// directory the id does not name, is InvalidArgument before any mount;
/// context keys that look like paths change nothing.
#[test]
fn handles_that_escape_and_contexts_that_choose_a_path_are_refused() {
    let node = NfsNode::start();
    node.export(SHARE);
    node.export(DIRECTORY);
    let staging = node.kubelet_path("staging");
    for bad in [
        "7/11/..",
        "7/11/.",
        "7/11/../pvc-a",
        "7/11/pvc-a/..",
        "7/11/pvc-a/../../x",
        "7/11/",
        "7/11/PVC-A",
        "7/11/-a",
        "7/11/9",
    ] {
        for context in [shared_context(), vec![("mount-target", SHARE)]] {
            let err = node.stage(bad, &staging, &context).unwrap_err();
            assert_eq!(
                code_of(&err),
                RpcStatusCode::INVALID_ARGUMENT,
                "{bad:?}: {err:?}"
            );
        }
    }
    // `subdirectory` needs the directory in the id: never the whole share.
    for whole in ["7/11", "my-static-pv"] {
        let err = node.stage(whole, &staging, &shared_context()).unwrap_err();
        assert_eq!(code_of(&err), RpcStatusCode::INVALID_ARGUMENT, "{err:?}");
        assert!(format!("{err:?}").contains("the directory comes from the volume id"));
    }
    let mut odd_type = shared_context();
    odd_type.retain(|(k, _)| *k != "volume-type");
    odd_type.push(("volume-type", "../../etc"));
    let err = node.stage(VOLUME, &staging, &odd_type).unwrap_err();
    assert_eq!(code_of(&err), RpcStatusCode::INVALID_ARGUMENT, "{err:?}");
    assert!(node.helper_runs().is_empty(), "{:?}", node.helper_runs());
    assert!(!staging.exists());

    // Keys a hand-written PV might add to point elsewhere are not read.
    let mut injected = shared_context();
    injected.extend([
        ("subDir", "../pvc-b"),
        ("path", "/"),
        ("directory", "/csi-volumes/pvc-b"),
        ("share", "/"),
    ]);
    node.stage(VOLUME, &staging, &injected).unwrap();
    assert_eq!(sources(&node), [DIRECTORY]);
}
