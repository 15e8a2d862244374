//! NodeGetInfo and NodeGetCapabilities through the real binary: the Linode
//! id from the metadata service, the Kubernetes `spec.providerID` fallback,
//! the cache, and the errors kubelet would see.

mod common;

use common::rpc::code_of;
use common::{write_kubeconfig, Driver, DriverBuilder};
use grpcio::{CallOption, RpcStatusCode};
use linode_nfs_csi::fake::{unreachable_url, FakeKube, FakeMetadata, FakeNode};
use linode_nfs_csi::proto::csi;
use linode_nfs_csi::proto::csi::node_service_capability::rpc::Type as NodeRpc;
use std::time::Duration;

fn info(driver: &Driver) -> grpcio::Result<csi::NodeGetInfoResponse> {
    driver.node().node_get_info_opt(
        &csi::NodeGetInfoRequest::new(),
        CallOption::default().timeout(Duration::from_secs(30)),
    )
}

/// A node driver whose metadata service is unreachable and whose Kubernetes
/// API is `kube`.
fn node_with_kube(kube: &FakeKube) -> DriverBuilder {
    let b = Driver::role("node").env("METADATA_URL", unreachable_url());
    let kubeconfig = write_kubeconfig(b.dir(), &kube.url(), &kube.token());
    b.env("KUBECONFIG", kubeconfig.to_string_lossy())
}

#[test]
fn the_node_id_comes_from_the_metadata_service_and_is_cached() {
    let metadata = FakeMetadata::start(4242, "us-east").unwrap();
    let driver = Driver::role("node")
        .env("METADATA_URL", metadata.url())
        .start();
    let resp = info(&driver).unwrap();
    assert_eq!(resp.node_id, "4242");
    assert_eq!(resp.max_volumes_per_node, 0);
    assert!(resp.accessible_topology.is_none());

    let asked = metadata.requests();
    metadata.stop();
    assert_eq!(
        info(&driver).unwrap().node_id,
        "4242",
        "answered from the cache"
    );
    assert_eq!(metadata.requests(), asked);
}

#[test]
fn without_metadata_the_kubernetes_provider_id_is_used() {
    let kube = FakeKube::start("kube-token").unwrap();
    kube.add_node(FakeNode::new("test-node").provider_id("linode://777"));
    let driver = node_with_kube(&kube).start();
    assert_eq!(info(&driver).unwrap().node_id, "777");
}

#[test]
fn a_foreign_or_missing_provider_id_is_an_error_logged_loudly_and_not_cached() {
    let kube = FakeKube::start("kube-token").unwrap();
    kube.add_node(FakeNode::new("test-node").provider_id("aws:///us-east-1a/i-0abc"));
    let driver = node_with_kube(&kube).start();

    let err = info(&driver).unwrap_err();
    assert_eq!(code_of(&err), RpcStatusCode::INTERNAL);
    let message = format!("{err:?}");
    assert!(message.contains("invalid provider ID format"), "{message}");
    assert!(message.contains("test-node"), "names the node: {message}");
    assert!(
        driver
            .logs()
            .lines()
            .any(|l| l.contains("ERROR") && l.contains("Linode id")),
        "{}",
        driver.logs()
    );

    kube.add_node(FakeNode::new("test-node"));
    let err = info(&driver).unwrap_err();
    assert!(
        format!("{err:?}").contains("provider ID is not set"),
        "{err:?}"
    );

    // Once the CCM sets it, the next call succeeds: failures are not cached.
    kube.add_node(FakeNode::new("test-node").provider_id("linode://31337"));
    assert_eq!(info(&driver).unwrap().node_id, "31337");
}

#[test]
fn with_neither_source_the_error_names_both() {
    let driver = Driver::role("node")
        .env("METADATA_URL", unreachable_url())
        .start();
    let err = info(&driver).unwrap_err();
    assert_eq!(code_of(&err), RpcStatusCode::INTERNAL);
    let message = format!("{err:?}");
    assert!(
        message.contains("metadata service") && message.contains("kubernetes"),
        "{message}"
    );
}

#[test]
fn capabilities_are_stage_unstage_volume_stats_and_condition() {
    let driver = Driver::role("node").start();
    let caps = driver
        .node()
        .node_get_capabilities(&csi::NodeGetCapabilitiesRequest::new())
        .unwrap();
    let types: Vec<NodeRpc> = caps
        .capabilities
        .iter()
        .map(|c| c.rpc().type_.enum_value_or_default())
        .collect();
    assert_eq!(
        types,
        [
            NodeRpc::STAGE_UNSTAGE_VOLUME,
            NodeRpc::GET_VOLUME_STATS,
            NodeRpc::VOLUME_CONDITION,
            NodeRpc::SINGLE_NODE_MULTI_WRITER
        ]
    );
}

/// kubelet and the sidecars run as root or share the socket's group; no
/// other local user may drive mounts through it, whatever the umask.
#[test]
fn the_csi_socket_is_not_open_to_other_users() {
    use std::os::unix::fs::PermissionsExt;
    let driver = Driver::role("node")
        .prefix(&["sh", "-c", "umask 000; exec \"$0\" \"$@\""])
        .start();
    let mode = std::fs::metadata(&driver.socket)
        .unwrap()
        .permissions()
        .mode()
        & 0o777;
    assert_eq!(mode & !0o660, 0, "socket mode {mode:o}");
}
