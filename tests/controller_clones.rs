//! PVC-from-PVC clones and restores through the real binary against the
//! fake Linode: a clone is copied through a snapshot of its source that
//! never outlives it, retries and lost replies adopt what was made, and a
//! restore is recognised as one even when the API leaves out
//! `source_snapshot_id`. Nothing may be left behind at any step.

mod common;

use common::controller::*;
use common::requests::*;
use common::rpc::*;
use grpcio::RpcStatusCode as Code;
use linode_nfs_csi::fake::{FaultRule, Lifecycle};
use linode_nfs_csi::linode::Status;
use linode_nfs_csi::proto::csi;

const GIB: i64 = 1 << 30;
const SNAPSHOTS: &str = "nfs/spaces/*/filesystems/*/snapshots";
const CLONE: &str = "nfs/spaces/*/filesystems/*/snapshots/*/clone";

fn clone_req(name: &str, source: &str) -> csi::CreateVolumeRequest {
    from_volume(volume_req(name, &by_id()), source)
}

/// Asserts that the filesystem labelled `label` carries `tag`.
#[track_caller]
fn assert_tagged(env: &Env, label: &str, tag: &str) {
    let tags = env.filesystem(label).tags;
    assert!(tags.iter().any(|t| t == tag), "{tag} not in {tags:?}");
}

/// Snapshots the backend still holds, copies included.
fn live_snapshots(env: &Env) -> Vec<(u64, String)> {
    env.linode
        .snapshots()
        .into_iter()
        .filter(|s| s.status != Status::Deleting)
        .map(|s| (s.id, s.label))
        .collect()
}

#[test]
fn a_clone_is_copied_through_a_snapshot_that_does_not_outlive_it() {
    let env = Setup::new().start();
    let source = env.create_ok("source");
    let resp = env.create(&clone_req("copy", &source.volume_id)).unwrap();
    let clone = resp.volume.unwrap();
    assert_eq!(
        clone.content_source.volume().volume_id,
        source.volume_id,
        "content_source names the source volume"
    );
    let fs = env.filesystem("copy");
    assert_eq!(clone.volume_id, format!("{SPACE}/{}", fs.id));
    assert_eq!(
        fs.max_capacity_bytes,
        env.filesystem("source").max_capacity_bytes
    );
    assert_tagged(
        &env,
        "copy",
        &format!("csi-source-volume.{}", source.volume_id.replace('/', ".")),
    );
    // The copy was made on the source, hidden from CSI, and deleted.
    let posts: Vec<serde_json::Value> = env
        .linode
        .requests()
        .into_iter()
        .filter(|r| r.method == "POST" && r.path.ends_with("/snapshots"))
        .map(|r| r.json())
        .collect();
    assert_eq!(posts.len(), 1);
    assert_eq!(posts[0]["label"], "csi-clone-copy");
    assert_eq!(
        posts[0]["tags"],
        serde_json::json!(["csi-clone-snapshot", common::CLUSTER_TAG])
    );
    assert_eq!(live_snapshots(&env), vec![]);
    let listed = env
        .client
        .list_snapshots(&csi::ListSnapshotsRequest::new())
        .unwrap();
    assert!(listed.entries.is_empty(), "{listed:?}");

    // A repeat returns the same clone and makes nothing.
    let again = env.create_with(&clone_req("copy", &source.volume_id));
    assert_eq!(again, clone);
    assert_eq!(env.linode.calls("POST", CLONE), 1);
    assert_eq!(env.linode.calls("POST", SNAPSHOTS), 1);

    // The name belongs to this clone: another source, or none, is refused.
    let other = env.create_ok("other-source");
    assert_eq!(
        err_code(env.create(&clone_req("copy", &other.volume_id))),
        Code::ALREADY_EXISTS
    );
    assert_eq!(
        err_code(env.create(&volume_req("copy", &by_id()))),
        Code::ALREADY_EXISTS
    );
    env.create(&volume_req("source", &by_id()))
        .expect("a plain volume is not mistaken for a clone");
}

#[test]
fn a_clone_of_a_missing_volume_is_not_found_and_makes_nothing() {
    let env = Setup::new().start();
    env.create_ok("warm");
    let before = env.linode.calls("POST", "**");
    for missing in ["fake-vol-id-12345", "7/999", "99/101"] {
        assert_eq!(
            err_code(env.create(&clone_req("orphan", missing))),
            Code::NOT_FOUND,
            "{missing}"
        );
    }
    assert_eq!(env.linode.calls("POST", "**"), before);
}

#[test]
fn a_clone_grows_to_the_requested_size_and_refuses_to_shrink() {
    let env = Setup::new().start();
    let source = env.create_with(&with_capacity(volume_req("small", &by_id()), GIB, 0));
    let grown = env.create_with(&with_capacity(
        clone_req("bigger", &source.volume_id),
        3 * GIB,
        0,
    ));
    assert_eq!(grown.capacity_bytes, 3 * GIB);
    let shrink = with_capacity(clone_req("smaller", &source.volume_id), 0, GIB / 2);
    assert_eq!(err_code(env.create(&shrink)), Code::OUT_OF_RANGE);
    assert!(env.live_filesystems().iter().all(|f| f.label != "smaller"));
    // The refused clone's copy is not left behind either: it was never
    // taken, or it was deleted.
    assert_eq!(live_snapshots(&env), vec![]);
}

/// Every step of a clone fails once, its reply lost after its side effect
/// where that is possible: the retry finishes the clone, and in the end
/// there is one clone and no copy.
#[test]
fn a_clone_retried_after_a_failure_at_any_step_leaves_nothing_behind() {
    let env = Setup::new().start();
    let source = env.create_ok("origin");
    let steps = [
        FaultRule::fail_after("POST", SNAPSHOTS, 500),
        FaultRule::status("GET", "nfs/spaces/*/filesystems/*/snapshots/*", 503).times(5),
        FaultRule::fail_after("POST", CLONE, 500),
        FaultRule::fail_after("DELETE", "nfs/spaces/*/filesystems/*/snapshots/*", 500),
    ];
    for (n, fault) in steps.into_iter().enumerate() {
        let name = format!("retried-{n}");
        env.linode.inject(fault.times(1));
        env.linode
            .set_activation_delay(std::time::Duration::from_millis(100));
        let first = env.create(&clone_req(&name, &source.volume_id));
        env.linode.clear_faults();
        let clone = match first {
            Ok(resp) => resp.volume.unwrap(),
            Err(e) => {
                assert!(
                    matches!(code_of(&e), Code::INTERNAL | Code::UNAVAILABLE),
                    "step {n}: {e:?}"
                );
                env.create(&clone_req(&name, &source.volume_id))
                    .unwrap_or_else(|e| panic!("retry after step {n}: {e:?}"))
                    .volume
                    .unwrap()
            }
        };
        assert_eq!(
            clone.volume_id,
            format!("{SPACE}/{}", env.filesystem(&name).id)
        );
        assert_eq!(live_snapshots(&env), vec![], "step {n} left a copy");
    }
}

#[test]
fn a_copy_the_backend_keeps_while_the_clone_exists_goes_with_the_clone() {
    let env = Setup::new().start();
    env.linode.set_snapshots_held_by_clones(true);
    let source = env.create_ok("held-source");
    let clone = env.create_with(&clone_req("held-copy", &source.volume_id));
    let copies = live_snapshots(&env);
    assert_eq!(copies.len(), 1, "the backend kept the copy");
    let (copy_id, label) = &copies[0];
    assert_eq!(label, "csi-clone-held-copy");
    let kept = source.volume_id.replace('/', ".");
    assert_tagged(
        &env,
        "held-copy",
        &format!("csi-kept-snapshot.{kept}.{copy_id}"),
    );
    // Still not a VolumeSnapshot.
    let get = get_snapshot_req(&format!("{}/{copy_id}", source.volume_id));
    assert_eq!(err_code(env.client.get_snapshot(&get)), Code::NOT_FOUND);
    // A repeat tags nothing twice.
    env.create(&clone_req("held-copy", &source.volume_id))
        .unwrap();
    let tagged = env.filesystem("held-copy").tags;
    assert_eq!(
        tagged.iter().filter(|t| t.starts_with("csi-kept-")).count(),
        1
    );

    env.delete(&clone.volume_id).unwrap();
    assert_eq!(live_snapshots(&env), vec![], "the copy went with the clone");
    env.delete(&clone.volume_id).unwrap();
}

/// Linode's client notes that `source_snapshot_id` is documented but not
/// returned: a retried restore must still recognise its clone.
#[test]
fn a_restore_is_recognised_without_source_snapshot_id() {
    for omitted in [false, true] {
        let env = Setup::new().start();
        env.linode.set_omit_source_snapshot_id(omitted);
        let source = env.create_ok("snap-source");
        let snap = env.snapshot("snap", &source.volume_id).unwrap();
        let req = from_snapshot(volume_req("restored", &by_id()), &snap.snapshot_id);
        let first = env.create_with(&req);
        assert_eq!(
            env.filesystem("restored").source_snapshot_id.is_some(),
            !omitted
        );
        let again = env.create_with(&req);
        assert_eq!(again, first, "source_snapshot_id omitted: {omitted}");
        // Another snapshot, under the same name, is still refused.
        let other = env.snapshot("snap-2", &source.volume_id).unwrap();
        let wrong = from_snapshot(volume_req("restored", &by_id()), &other.snapshot_id);
        assert_eq!(err_code(env.create(&wrong)), Code::ALREADY_EXISTS);
        assert_eq!(env.linode.calls("POST", CLONE), 1);
    }
}

#[test]
fn a_clone_waits_for_a_source_copy_still_being_taken() {
    let env = Setup::new().start();
    let source = env.create_ok("slow-source");
    env.linode
        .set_snapshot_lifecycle("csi-clone-slow-copy", Lifecycle::NeverActive);
    let req = clone_req("slow-copy", &source.volume_id);
    let short = grpcio::CallOption::default().timeout(std::time::Duration::from_millis(1500));
    assert_eq!(
        err_code(env.client.create_volume_opt(&req, short)),
        Code::DEADLINE_EXCEEDED
    );
    env.linode
        .set_snapshot_lifecycle("csi-clone-slow-copy", Lifecycle::Normal);
    let done = retry(&WHILE_LOCKED, || env.create(&req)).expect("the clone after its copy");
    assert!(done.volume.is_some());
    assert_eq!(
        env.linode.calls("POST", SNAPSHOTS),
        1,
        "one copy, found again"
    );
    assert_eq!(live_snapshots(&env), vec![]);
}

#[test]
fn a_clone_the_backend_refuses_takes_its_copy_away() {
    let env = Setup::new().start();
    let source = env.create_ok("refused-source");
    env.linode.inject(
        FaultRule::status("POST", CLONE, 400)
            .reason("Injected refusal")
            .times(1),
    );
    assert_eq!(
        err_code(env.create(&clone_req("refused", &source.volume_id))),
        Code::INVALID_ARGUMENT
    );
    assert_eq!(live_snapshots(&env), vec![], "the copy was deleted");
    assert!(env.live_filesystems().iter().all(|f| f.label != "refused"));
    // The retry takes a new copy and makes the clone.
    env.create(&clone_req("refused", &source.volume_id))
        .unwrap();
    assert_eq!(live_snapshots(&env), vec![]);
}
