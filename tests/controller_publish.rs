//! ControllerPublishVolume / ControllerUnpublishVolume and the capabilities
//! per access-policy mode, through the real binary against the fake Linode:
//! in node mode a publish is an entry in the filesystem's Linode ACL.

mod common;

use common::controller::*;
use common::requests::*;
use common::rpc::*;
use common::subdir::{world_with, World, GIB};
use common::wait_for;
use grpcio::RpcStatusCode as Code;
use linode_nfs_csi::fake::{FakeVolumeAttachment, FaultRule, Lifecycle};
use linode_nfs_csi::linode::Status;
use linode_nfs_csi::proto::csi;
use std::collections::{BTreeSet, HashSet};
use std::time::Duration;

use csi::controller_service_capability::rpc::Type as Rpc;

const NODES: std::ops::RangeInclusive<u64> = 1001..=1010;

fn node_env() -> Env {
    Setup::new()
        .node_mode()
        .seed(|s| with_nodes(s, NODES))
        .start()
}

/// Node mode with a shared filesystem of directory volumes (see
/// `common::subdir`).
fn shared_world(setup: impl FnOnce(Setup) -> Setup) -> World {
    world_with(|s| setup(s.node_mode().seed(|seed| with_nodes(seed, NODES))))
}

fn acl(env: &Env, volume_id: &str) -> (BTreeSet<u64>, bool) {
    let policy = env.linode.filesystem_policy(ids_of(volume_id).1).unwrap();
    (policy.linode_ids().into_iter().collect(), policy.enabled)
}

fn published_ids(env: &Env, volume_id: &str) -> Vec<String> {
    let mut ids = env
        .get_volume(volume_id)
        .unwrap()
        .status
        .unwrap()
        .published_node_ids;
    ids.sort();
    ids
}

fn advertised(env: &Env) -> HashSet<Rpc> {
    env.client
        .controller_get_capabilities(&csi::ControllerGetCapabilitiesRequest::new())
        .unwrap()
        .capabilities
        .iter()
        .map(|c| c.rpc().type_.enum_value().unwrap())
        .collect()
}

#[test]
fn capabilities_follow_the_access_policy_mode() {
    let space = Setup::new().start();
    let node = node_env();
    let common: HashSet<Rpc> = [
        Rpc::CREATE_DELETE_VOLUME,
        Rpc::GET_VOLUME,
        Rpc::LIST_VOLUMES,
        Rpc::GET_CAPACITY,
        Rpc::CREATE_DELETE_SNAPSHOT,
        Rpc::LIST_SNAPSHOTS,
        Rpc::GET_SNAPSHOT,
        Rpc::CLONE_VOLUME,
        Rpc::MODIFY_VOLUME,
        Rpc::VOLUME_CONDITION,
        Rpc::SINGLE_NODE_MULTI_WRITER,
    ]
    .into();
    assert_eq!(advertised(&space), common);
    let mut with_publish = common.clone();
    with_publish.insert(Rpc::PUBLISH_UNPUBLISH_VOLUME);
    with_publish.insert(Rpc::LIST_VOLUMES_PUBLISHED_NODES);
    assert_eq!(advertised(&node), with_publish);
}

#[test]
fn space_mode_has_no_publish() {
    let env = Setup::new().seed(|s| with_nodes(s, NODES)).start();
    let v = env.create_ok("space-vol");
    let before = env.linode.requests().len();
    assert_eq!(
        err_code(env.publish(&v.volume_id, "1001")),
        Code::UNIMPLEMENTED
    );
    assert_eq!(
        err_code(env.unpublish(&v.volume_id, "1001")),
        Code::UNIMPLEMENTED
    );
    assert_eq!(env.linode.requests().len(), before);
}

#[test]
fn publish_adds_the_node_enables_the_policy_and_repeats_write_nothing() {
    let env = node_env();
    let v = env.create_with(&volume_req(
        "shared-data",
        &[(P_SPACE_ID, "7".into()), (P_SQUASH, "all_squash".into())],
    ));
    assert!(
        published_ids(&env, &v.volume_id).is_empty(),
        "a disabled, empty policy publishes nothing"
    );
    let puts = env.linode.calls("PUT", FS_POLICY);

    let resp = env.publish(&v.volume_id, "1001").unwrap();
    assert!(resp.publish_context.is_empty());
    assert_eq!(acl(&env, &v.volume_id), ([1001].into(), true));
    assert_eq!(env.linode.calls("PUT", FS_POLICY), puts + 1);
    let put = env.last_request("PUT").json();
    assert_eq!(put["linode_ids"], serde_json::json!([1001]));
    assert_eq!(put["enabled"], true);
    assert_eq!(
        put["squash_policy"], "all_squash",
        "a publish must keep the squash policy"
    );
    assert_eq!(put["protocols"], serde_json::json!(["nfsv4"]));
    assert_eq!(put["label"], "shared-data");
    let policy = env
        .linode
        .filesystem_policy(ids_of(&v.volume_id).1)
        .unwrap();
    assert_eq!(policy.status.as_str(), "active");
    assert_eq!(policy.squash_policy.unwrap().as_str(), "all_squash");

    env.publish(&v.volume_id, "1001").unwrap();
    assert_eq!(
        env.linode.calls("PUT", FS_POLICY),
        puts + 1,
        "already allowed: no write"
    );

    env.publish(&v.volume_id, "1002").unwrap();
    assert_eq!(acl(&env, &v.volume_id), ([1001, 1002].into(), true));
    assert_eq!(published_ids(&env, &v.volume_id), ["1001", "1002"]);
}

#[test]
fn publish_rejects_bad_requests_and_unknown_objects() {
    let env = node_env();
    let v = env.create_ok("guarded");
    let no_cap = {
        let mut r = controller_publish_req(&v.volume_id, "1001");
        r.volume_capability = None.into();
        r
    };
    let block = {
        let mut r = controller_publish_req(&v.volume_id, "1001");
        r.volume_capability = Some(block_cap()).into();
        r
    };
    let cases = [
        (
            "empty volume",
            controller_publish_req("", "1001"),
            Code::INVALID_ARGUMENT,
        ),
        (
            "empty node",
            controller_publish_req(&v.volume_id, ""),
            Code::INVALID_ARGUMENT,
        ),
        ("no capability", no_cap, Code::INVALID_ARGUMENT),
        ("block", block, Code::INVALID_ARGUMENT),
        (
            "unknown volume",
            controller_publish_req("7/99999", "1001"),
            Code::NOT_FOUND,
        ),
        (
            "malformed volume",
            controller_publish_req("not-a-volume", "1001"),
            Code::NOT_FOUND,
        ),
        (
            "unknown node",
            controller_publish_req(&v.volume_id, "424242"),
            Code::NOT_FOUND,
        ),
        (
            "node that is no Linode id",
            controller_publish_req(&v.volume_id, "worker-1"),
            Code::NOT_FOUND,
        ),
    ];
    for (what, req, want) in cases {
        assert_eq!(
            err_code(env.client.controller_publish_volume(&req)),
            want,
            "{what}"
        );
    }
    assert_eq!(env.linode.calls("PUT", FS_POLICY), 0);
    assert_eq!(acl(&env, &v.volume_id), (BTreeSet::new(), false));
}

#[test]
fn concurrent_publishes_from_ten_nodes_lose_nothing_and_share_writes() {
    let env = node_env();
    let v = env.create_ok("rwx");
    // Policy PUTs stay `updating` for a while, so publishes pile up behind them.
    env.linode.set_activation_delay(Duration::from_millis(300));
    let calls: Vec<_> = NODES
        .map(|node| {
            let client = env.client.clone();
            let req = controller_publish_req(&v.volume_id, &node.to_string());
            std::thread::spawn(move || client.controller_publish_volume(&req))
        })
        .collect();
    for call in calls {
        call.join().unwrap().unwrap();
    }
    assert_eq!(acl(&env, &v.volume_id), (NODES.collect(), true));
    let puts = env.linode.calls("PUT", FS_POLICY);
    println!("10 concurrent publishes: {puts} policy PUTs");
    assert!(puts < 10, "{puts} PUTs for 10 publishes");
    assert_eq!(published_ids(&env, &v.volume_id).len(), 10);
}

#[test]
fn unpublish_removes_only_its_node_and_keeps_the_policy_enabled() {
    let env = node_env();
    let v = env.create_ok("detach");
    for node in ["1001", "1002"] {
        env.publish(&v.volume_id, node).unwrap();
    }
    let puts = env.linode.calls("PUT", FS_POLICY);

    env.unpublish(&v.volume_id, "1001").unwrap();
    assert_eq!(acl(&env, &v.volume_id), ([1002].into(), true));
    assert_eq!(env.linode.calls("PUT", FS_POLICY), puts + 1);
    let put = env.last_request("PUT").json();
    assert_eq!(put["enabled"], true);
    assert_eq!(put["squash_policy"], "root_squash");

    // Nothing to do: no write.
    for (volume, node) in [
        (v.volume_id.as_str(), "1001"),
        (v.volume_id.as_str(), "1003"),
        (v.volume_id.as_str(), ""),
        ("7/99999", "1002"),
        ("not-a-volume", "1002"),
        (v.volume_id.as_str(), "not-a-node"),
    ] {
        env.unpublish(volume, node)
            .unwrap_or_else(|e| panic!("unpublish {volume:?} from {node:?}: {e:?}"));
    }
    assert_eq!(env.linode.calls("PUT", FS_POLICY), puts + 1);
    assert_eq!(err_code(env.unpublish("", "1002")), Code::INVALID_ARGUMENT);

    env.unpublish(&v.volume_id, "1002").unwrap();
    assert_eq!(
        acl(&env, &v.volume_id),
        (BTreeSet::new(), true),
        "unpublish never disables the policy"
    );
    assert!(published_ids(&env, &v.volume_id).is_empty());
}

#[test]
fn unpublishing_an_absent_node_does_not_wait_on_a_stuck_policy() {
    let env = Setup::new()
        .node_mode()
        .seed(|s| with_nodes(s, NODES))
        .wait_timeout("1s")
        .start();
    let v = env.create_ok("stuck");
    let fs = ids_of(&v.volume_id).1;
    env.publish(&v.volume_id, "1001").unwrap();

    // A PUT that leaves the policy in `error`.
    env.linode.set_policy_lifecycle(fs, Lifecycle::StickInError);
    assert_eq!(
        err_code(env.publish(&v.volume_id, "1002")),
        Code::FAILED_PRECONDITION
    );
    let puts = env.linode.calls("PUT", FS_POLICY);
    env.unpublish(&v.volume_id, "1003").unwrap();

    // A PUT that never settles: the unpublish that wrote it waits...
    env.linode.set_policy_lifecycle(fs, Lifecycle::NeverActive);
    assert_eq!(
        err_code(env.unpublish(&v.volume_id, "1002")),
        Code::DEADLINE_EXCEEDED
    );
    assert_eq!(env.linode.calls("PUT", FS_POLICY), puts + 1);
    assert_eq!(
        env.linode.filesystem_policy(fs).unwrap().status,
        Status::Updating
    );
    // ...but one with nothing to remove has nothing to wait for: it reads
    // the policy once and polls nothing.
    for node in ["1002", "1003"] {
        let reads = env.linode.calls("GET", FS_POLICY);
        env.unpublish(&v.volume_id, node)
            .unwrap_or_else(|e| panic!("unpublish {node}: {e:?}"));
        assert_eq!(env.linode.calls("GET", FS_POLICY), reads + 1, "{node}");
    }
    assert_eq!(env.linode.calls("PUT", FS_POLICY), puts + 1);
    assert_eq!(acl(&env, &v.volume_id), ([1001].into(), true));
}

#[test]
fn publish_and_unpublish_of_different_nodes_at_once_keep_each_other() {
    let env = node_env();
    let v = env.create_ok("churn");
    for node in [1001, 1002, 1003, 1004, 1005] {
        env.publish(&v.volume_id, &node.to_string()).unwrap();
    }
    env.linode.set_activation_delay(Duration::from_millis(200));
    let mut calls = Vec::new();
    for node in [1001u64, 1002, 1003] {
        let client = env.client.clone();
        let req = controller_unpublish_req(&v.volume_id, &node.to_string());
        calls.push(std::thread::spawn(move || {
            client.controller_unpublish_volume(&req).map(drop)
        }));
    }
    for node in [1006u64, 1007, 1008] {
        let client = env.client.clone();
        let req = controller_publish_req(&v.volume_id, &node.to_string());
        calls.push(std::thread::spawn(move || {
            client.controller_publish_volume(&req).map(drop)
        }));
    }
    for call in calls {
        call.join().unwrap().unwrap();
    }
    assert_eq!(
        acl(&env, &v.volume_id),
        ([1004, 1005, 1006, 1007, 1008].into(), true)
    );
}

/// A publish the CO gave up on while it was still checking the node, then
/// the unpublish the CO sent next: the unpublish is applied first, and the
/// stale publish must not allow the node again after it.
#[test]
fn a_publish_overtaken_by_its_unpublish_is_not_applied_after_it() {
    let env = node_env();
    let v = env.create_ok("overtaken");
    let checking = env.linode.hang("GET", "linode/instances/*");
    let stale = {
        let client = env.client.clone();
        let req = controller_publish_req(&v.volume_id, "1001");
        std::thread::spawn(move || client.controller_publish_volume(&req))
    };
    wait_for(
        "the publish to check its node",
        Duration::from_secs(10),
        || checking.hits() == 1,
    );
    env.unpublish(&v.volume_id, "1001").unwrap();
    checking.release();
    let err = stale.join().unwrap().unwrap_err();
    assert_eq!(code_of(&err), Code::ABORTED, "{err:?}");
    assert!(message_of(&err).contains("overtaken"), "{err:?}");
    assert!(!acl(&env, &v.volume_id).0.contains(&1001));

    // A publish that arrives after the unpublish is applied as usual, and a
    // retry overtaking its original is not refused by it.
    env.publish(&v.volume_id, "1001").unwrap();
    assert_eq!(acl(&env, &v.volume_id), ([1001].into(), true));
}

/// A policy PUT that outlives LINODE_REQUEST_TIMEOUT and lands later: an
/// unpublish sent after it failed waits for it to land instead of finding
/// nothing to remove and being undone by it.
#[test]
fn an_unpublish_after_a_timed_out_publish_is_not_undone_when_it_lands() {
    let env = Setup::new()
        .node_mode()
        .seed(|s| with_nodes(s, NODES))
        .env("LINODE_REQUEST_TIMEOUT", "1s")
        .start();
    let v = env.create_ok("late-put");
    env.linode
        .inject(FaultRule::latency("PUT", FS_POLICY, Duration::from_millis(1800)).times(1));
    assert_eq!(
        err_code(env.publish(&v.volume_id, "1001")),
        Code::UNAVAILABLE,
        "the PUT timed out"
    );
    // Retried as the attacher does while Unavailable: any other answer, or
    // none in time, fails here.
    let mut refused = 0;
    retry(&WHILE_UNAVAILABLE, || {
        let answer = env.unpublish(&v.volume_id, "1001");
        refused += usize::from(answer.is_err());
        answer
    })
    .expect("the unpublish is applied once the late PUT landed");
    assert!(refused > 0, "the unpublish did not wait for the late PUT");
    assert!(!acl(&env, &v.volume_id).0.contains(&1001));
    assert_eq!(
        env.linode.calls("PUT", FS_POLICY),
        2,
        "the late allow, the revoke"
    );
}

#[test]
fn without_filesystem_policies_node_mode_fails_clearly_and_reads_degrade() {
    let env = node_env();
    let v = env.create_ok("no-policy");
    // The backend lacks the endpoint: 404 for a filesystem that exists.
    env.linode
        .inject(FaultRule::status("*", FS_POLICY, 404).reason("Not found"));
    let e = env.publish(&v.volume_id, "1001").unwrap_err();
    let message = message_of(&e);
    assert_eq!(code_of(&e), Code::FAILED_PRECONDITION, "{message}");
    assert!(
        message.contains("no per-filesystem access policy")
            && message.contains("NFS_ACCESS_POLICY_MODE=space"),
        "{message}"
    );
    assert_eq!(
        err_code(env.unpublish(&v.volume_id, "1001")),
        Code::FAILED_PRECONDITION
    );
    assert!(
        env.linode
            .requests()
            .iter()
            .all(|r| !(r.method == "PUT" && r.path.ends_with("access-policy"))),
        "nothing is written"
    );

    // Reads report the published nodes unknown (none) instead of failing.
    assert!(published_ids(&env, &v.volume_id).is_empty());
    let listed = env
        .client
        .list_volumes(&csi::ListVolumesRequest::new())
        .unwrap();
    assert_eq!(listed.entries.len(), 1);
    assert!(listed.entries[0].status.published_node_ids.is_empty());

    // A squash parameter needs the policy too.
    let squashed = volume_req(
        "no-policy-squash",
        &[(P_SPACE_ID, SPACE.to_string()), (P_SQUASH, "none".into())],
    );
    let e = env.create(&squashed).unwrap_err();
    let message = message_of(&e);
    assert_eq!(code_of(&e), Code::FAILED_PRECONDITION, "{message}");
    assert!(message.contains("filesystem-root-squash"), "{message}");
    // Known now: the next one is refused before anything is made.
    let posts = env.linode.calls("POST", FS_LIST);
    let e = env
        .create(&volume_req(
            "no-policy-squash-2",
            &[(P_SPACE_ID, SPACE.to_string()), (P_SQUASH, "none".into())],
        ))
        .unwrap_err();
    assert_eq!(code_of(&e), Code::FAILED_PRECONDITION, "{}", message_of(&e));
    assert_eq!(
        env.linode.calls("POST", FS_LIST),
        posts,
        "no filesystem made"
    );

    // A volume that does not exist is still NotFound, not the backend's lack.
    let gone = format!("{SPACE}/424242");
    assert_eq!(err_code(env.publish(&gone, "1001")), Code::NOT_FOUND);
}

const DRIVER: &str = "linodenfs.csi.linode.com";

/// Volume `name` of the shared filesystem `parent` (a `{s}/{f}` id) as the
/// cluster records it attached to Kubernetes node `node`: its PV and its
/// VolumeAttachment (`va-<name>-<node>`).
fn attach_in_cluster(env: &Env, parent: &str, name: &str, node: &str) -> String {
    let handle = format!("{parent}/{name}");
    env.kube
        .add_persistent_volume(&format!("pv-{name}"), DRIVER, &handle);
    let va = format!("va-{name}-{node}");
    env.kube.add_volume_attachment(FakeVolumeAttachment::new(
        &va,
        DRIVER,
        node,
        &format!("pv-{name}"),
    ));
    va
}

/// Node mode with directories of one shared filesystem: the ACL is the
/// parent's; unpublishing one directory from a node keeps the node while
/// the cluster's VolumeAttachments still attach another volume of the
/// parent there (its own attachment, being deleted, does not count), and
/// revokes it with the last one.
#[test]
fn a_shared_filesystem_keeps_a_node_until_its_last_volume_there_is_unpublished() {
    let w = shared_world(|s| s);
    let env = &w.env;
    let parent = format!("{SPACE}/{}", w.parent);
    for (node, id) in [("worker-1", "1001"), ("worker-2", "1002")] {
        env.kube.set_csi_node(node, DRIVER, Some(id));
    }
    let a = w.create_ok("vol-a", GIB, &[]).volume_id;
    let b = w.create_ok("vol-b", GIB, &[]).volume_id;
    for (volume, node) in [(&a, "1001"), (&b, "1001"), (&a, "1002")] {
        env.publish(volume, node).unwrap();
    }
    assert_eq!(acl(env, &parent), ([1001, 1002].into(), true));
    let puts = env.linode.calls("PUT", FS_POLICY);
    assert_eq!(puts, 2, "one write per node admitted, none per volume");

    let va_a1 = attach_in_cluster(env, &parent, "vol-a", "worker-1");
    attach_in_cluster(env, &parent, "vol-b", "worker-1");
    let va_a2 = attach_in_cluster(env, &parent, "vol-a", "worker-2");
    // Noise that must not count: another driver's attachment of the same
    // handle, a volume of another filesystem, a detach under way.
    env.kube
        .add_persistent_volume("pv-other-driver", "nfs.csi.k8s.io", &b);
    env.kube.add_volume_attachment(FakeVolumeAttachment::new(
        "va-other-driver",
        "nfs.csi.k8s.io",
        "worker-2",
        "pv-other-driver",
    ));
    attach_in_cluster(env, "7/99999", "vol-z", "worker-2");
    env.kube
        .add_persistent_volume("pv-leaving", DRIVER, &format!("{parent}/vol-c"));
    env.kube.add_volume_attachment(
        FakeVolumeAttachment::new("va-leaving", DRIVER, "worker-2", "pv-leaving").deleting(),
    );

    // vol-a leaves worker-1, vol-b is still there: the node stays.
    env.kube.add_volume_attachment(
        FakeVolumeAttachment::new(&va_a1, DRIVER, "worker-1", "pv-vol-a").deleting(),
    );
    env.unpublish(&a, "1001").unwrap();
    assert_eq!(acl(env, &parent), ([1001, 1002].into(), true));
    assert_eq!(env.linode.calls("PUT", FS_POLICY), puts, "nothing written");

    // vol-a leaves worker-2, where nothing else of the parent is attached.
    env.kube.add_volume_attachment(
        FakeVolumeAttachment::new(&va_a2, DRIVER, "worker-2", "pv-vol-a").deleting(),
    );
    env.unpublish(&a, "1002").unwrap();
    assert_eq!(acl(env, &parent), ([1001].into(), true));

    // vol-b leaves worker-1: the last one there.
    env.kube.remove_volume_attachment(&va_a1);
    env.kube.add_volume_attachment(
        FakeVolumeAttachment::new("va-vol-b-worker-1", DRIVER, "worker-1", "pv-vol-b").deleting(),
    );
    env.unpublish(&b, "1001").unwrap();
    assert_eq!(acl(env, &parent), (BTreeSet::new(), true));
    // Repeats are no-ops.
    env.unpublish(&b, "1001").unwrap();
    assert_eq!(env.linode.calls("PUT", FS_POLICY), puts + 2);
}

/// The whole parent published as a volume of its own also holds the node;
/// a node without our CSINode entry is mapped by its `linode://`
/// providerID; a node gone from the cluster holds nothing.
#[test]
fn a_node_is_found_by_its_provider_id_and_the_parent_itself_counts() {
    let w = shared_world(|s| {
        s.nodes(vec![
            worker("worker-1", REGION).provider_id("linode://1001"),
            worker("worker-3", REGION).provider_id("linode://1003"),
        ])
    });
    let env = &w.env;
    let parent = format!("{SPACE}/{}", w.parent);
    let a = w.create_ok("vol-a", GIB, &[]).volume_id;
    env.publish(&a, "1001").unwrap();
    env.kube.add_persistent_volume("pv-whole", DRIVER, &parent);
    env.kube.add_volume_attachment(FakeVolumeAttachment::new(
        "va-whole", DRIVER, "worker-1", "pv-whole",
    ));
    attach_in_cluster(env, &parent, "vol-b", "worker-gone");
    attach_in_cluster(env, &parent, "vol-c", "worker-3");
    env.unpublish(&a, "1001").unwrap();
    assert_eq!(
        acl(env, &parent),
        ([1001].into(), true),
        "the parent is attached"
    );

    env.kube.remove_volume_attachment("va-whole");
    env.unpublish(&a, "1001").unwrap();
    assert_eq!(acl(env, &parent), (BTreeSet::new(), true));
}

/// When the attachments cannot be read the unpublish fails (the CO
/// retries) and the ACL is untouched: it never guesses "none"; a refusal
/// says what the role must allow. A whole filesystem's unpublish reads
/// nothing from Kubernetes.
#[test]
fn an_unreadable_cluster_fails_the_unpublish_and_a_filesystem_never_asks() {
    let w = shared_world(|s| s);
    let env = &w.env;
    let parent = format!("{SPACE}/{}", w.parent);
    let a = w.create_ok("vol-a", GIB, &[]).volume_id;
    env.publish(&a, "1001").unwrap();
    let puts = env.linode.calls("PUT", FS_POLICY);
    env.kube.fail_next(503, 1);
    assert_eq!(err_code(env.unpublish(&a, "1001")), Code::UNAVAILABLE);
    env.kube.fail_next(403, 1);
    let e = env.unpublish(&a, "1001").unwrap_err();
    assert_eq!(code_of(&e), Code::FAILED_PRECONDITION);
    assert!(message_of(&e).contains("volumeattachments"), "{e:?}");
    assert_eq!(acl(env, &parent), ([1001].into(), true));
    assert_eq!(env.linode.calls("PUT", FS_POLICY), puts);

    let whole = env.create_ok("whole").volume_id;
    env.publish(&whole, "1001").unwrap();
    let asked = env.kube.requests();
    env.unpublish(&whole, "1001").unwrap();
    assert_eq!(acl(env, &whole), (BTreeSet::new(), true));
    assert_eq!(env.kube.requests(), asked, "no Kubernetes request");

    // Unpublishing a directory of a filesystem that is gone is success.
    env.unpublish("7/99999/vol-a", "1001").unwrap();
    assert_eq!(
        err_code(env.publish("7/99999/vol-a", "1001")),
        Code::NOT_FOUND
    );
    assert_eq!(
        err_code(env.publish(&format!("{parent}/../x"), "1001")),
        Code::NOT_FOUND
    );
}
