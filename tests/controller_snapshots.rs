//! CreateSnapshot, DeleteSnapshot, ListSnapshots and restoring a volume from
//! a snapshot, through the real binary against the fake Linode.

mod common;

use common::controller::*;
use common::requests::*;
use common::rpc::*;
use common::wait_for;
use grpcio::RpcStatusCode as Code;
use linode_nfs_csi::fake::{FaultRule, Lifecycle, SnapshotTimes, SpaceSeed};
use linode_nfs_csi::linode::naive_to_unix;
use linode_nfs_csi::proto::csi;
use std::time::Duration;

const SNAPS: &str = "nfs/spaces/*/filesystems/*/snapshots";
const CLONE: &str = "nfs/spaces/*/filesystems/*/snapshots/*/clone";

fn snap_ready(env: &Env, name: &str, source: &str) -> csi::Snapshot {
    let mut last = None;
    wait_for(
        &format!("snapshot {name} to be ready"),
        Duration::from_secs(10),
        || {
            let s = env.snapshot(name, source).unwrap();
            let ready = s.ready_to_use;
            last = Some(s);
            ready
        },
    );
    last.unwrap()
}

fn delete_snap(env: &Env, id: &str) -> grpcio::Result<csi::DeleteSnapshotResponse> {
    env.client.delete_snapshot(&delete_snapshot_req(id))
}

fn list(
    env: &Env,
    f: impl FnOnce(&mut csi::ListSnapshotsRequest),
) -> grpcio::Result<csi::ListSnapshotsResponse> {
    let mut r = csi::ListSnapshotsRequest::new();
    f(&mut r);
    env.client.list_snapshots(&r)
}

fn ids(resp: &csi::ListSnapshotsResponse) -> Vec<String> {
    resp.entries
        .iter()
        .map(|e| e.snapshot.snapshot_id.clone())
        .collect()
}

#[test]
fn create_snapshot_is_ready_only_when_active_with_backend_fields() {
    let env = Setup::new().start();
    let v = env.create_ok("source");
    env.linode.set_activation_delay(Duration::from_millis(300));

    let first = env.snapshot("Snap-One", &v.volume_id).unwrap();
    assert!(!first.ready_to_use);
    let backend = env.linode.snapshots();
    assert_eq!(backend.len(), 1);
    let b = &backend[0];
    assert_eq!(b.label, "snap-one");
    assert_eq!(first.snapshot_id, format!("{}/{}", v.volume_id, b.id));
    assert_eq!(first.source_volume_id, v.volume_id);
    assert_eq!(
        first.creation_time.seconds,
        naive_to_unix(b.created.as_deref().unwrap()).unwrap()
    );

    let ready = snap_ready(&env, "Snap-One", &v.volume_id);
    assert_eq!(ready.snapshot_id, first.snapshot_id);
    assert_eq!(ready.creation_time, first.creation_time);
    let b = env.linode.snapshots().remove(0);
    assert_eq!(b.status.as_str(), "active");
    assert_eq!(ready.size_bytes, b.size_bytes.unwrap());
    assert!(ready.size_bytes > 0);
    assert_eq!(
        env.linode.calls("POST", SNAPS),
        1,
        "repeats find the snapshot by label"
    );
}

#[test]
fn create_snapshot_validation_and_name_conflicts() {
    let env = Setup::new().start();
    let a = env.create_ok("vol-a");
    let b = env.create_ok("vol-b");
    assert_eq!(
        err_code(env.snapshot("", &a.volume_id)),
        Code::INVALID_ARGUMENT
    );
    assert_eq!(err_code(env.snapshot("s", "")), Code::INVALID_ARGUMENT);
    assert_eq!(err_code(env.snapshot("s", "7/99999")), Code::NOT_FOUND);
    assert_eq!(err_code(env.snapshot("s", "not-a-volume")), Code::NOT_FOUND);

    let first = env.snapshot("nightly", &a.volume_id).unwrap();
    assert_eq!(
        env.snapshot("nightly", &a.volume_id).unwrap().snapshot_id,
        first.snapshot_id
    );
    assert_eq!(
        err_code(env.snapshot("nightly", &b.volume_id)),
        Code::ALREADY_EXISTS
    );
    assert_eq!(env.linode.snapshots().len(), 1);

    // A create whose reply was lost is found by label, not repeated.
    env.linode
        .inject(FaultRule::fail_after("POST", SNAPS, 500).times(1));
    let lost = env.snapshot("lost-reply", &b.volume_id).unwrap();
    assert_eq!(
        env.linode
            .snapshots()
            .iter()
            .filter(|s| s.label == "lost-reply")
            .count(),
        1
    );
    assert!(lost.snapshot_id.starts_with(&format!("{}/", b.volume_id)));

    env.linode
        .set_snapshot_lifecycle("broken", Lifecycle::StickInError);
    env.snapshot("broken", &a.volume_id).unwrap();
    assert_eq!(
        err_code(env.snapshot("broken", &a.volume_id)),
        Code::FAILED_PRECONDITION
    );
}

#[test]
fn delete_snapshot_cases() {
    let env = Setup::new().start();
    let v = env.create_ok("vol");
    assert_eq!(err_code(delete_snap(&env, "")), Code::INVALID_ARGUMENT);
    let before = env.linode.requests().len();
    for malformed in ["x", "7/101", "7/101/x", "7/101/1/2"] {
        delete_snap(&env, malformed).unwrap_or_else(|e| panic!("{malformed}: {e:?}"));
    }
    assert_eq!(
        env.linode.requests().len(),
        before,
        "malformed ids need no backend call"
    );

    let s = snap_ready(&env, "keep", &v.volume_id);
    let backend_id = env.linode.snapshots()[0].id;
    assert!(env.linode.set_snapshot_locked(backend_id, true));
    assert_eq!(
        err_code(delete_snap(&env, &s.snapshot_id)),
        Code::FAILED_PRECONDITION
    );
    assert_eq!(env.linode.snapshots().len(), 1);

    env.linode.set_snapshot_locked(backend_id, false);
    delete_snap(&env, &s.snapshot_id).unwrap();
    assert!(env.linode.snapshots().is_empty());
    delete_snap(&env, &s.snapshot_id).unwrap();
    delete_snap(&env, &format!("{}/424242", v.volume_id)).unwrap();
}

#[test]
fn deleted_snapshots_leave_lists_and_names_at_once() {
    let env = Setup::new().start();
    // Deleted snapshots stay visible as `deleting` for the whole test.
    env.linode.set_deletion_delay(Duration::from_secs(600));
    let a = env.create_ok("vol-a");
    let b = env.create_ok("vol-b");
    let gone = env.snapshot("gone", &a.volume_id).unwrap();
    let kept = env.snapshot("kept", &a.volume_id).unwrap();
    let moved = env.snapshot("moved", &a.volume_id).unwrap();
    let other = env.snapshot("other", &b.volume_id).unwrap();
    for s in [&gone, &moved] {
        delete_snap(&env, &s.snapshot_id).unwrap();
    }
    let deleting = env
        .linode
        .snapshots()
        .iter()
        .filter(|s| s.status.as_str() == "deleting")
        .count();
    assert_eq!(deleting, 2, "the backend still shows them");

    assert_eq!(
        ids(&list(&env, |_| {}).unwrap()),
        [kept.snapshot_id.clone(), other.snapshot_id.clone()]
    );
    assert_eq!(
        ids(&list(&env, |r| r.source_volume_id = a.volume_id.clone()).unwrap()),
        vec![kept.snapshot_id.clone()]
    );
    assert!(list(&env, |r| r.snapshot_id = gone.snapshot_id.clone())
        .unwrap()
        .entries
        .is_empty());

    // The name of a deleted snapshot is free for another volume...
    let reused = env.snapshot("moved", &b.volume_id).unwrap();
    assert!(reused.snapshot_id.starts_with(&format!("{}/", b.volume_id)));
    // ...and is never answered with the snapshot on its way out: here the
    // backend still holds the label on that filesystem (409).
    assert_eq!(
        err_code(env.snapshot("gone", &a.volume_id)),
        Code::FAILED_PRECONDITION
    );
}

#[test]
fn snapshots_without_created_are_dated_by_updated_or_left_out() {
    let env = Setup::new().start();
    let v = env.create_ok("vol");
    let dated = env.snapshot("dated", &v.volume_id).unwrap();
    let updated_only = env.snapshot("updated-only", &v.volume_id).unwrap();
    let undated = env.snapshot("undated", &v.volume_id).unwrap();
    let backend = |label: &str| {
        env.linode
            .snapshots()
            .into_iter()
            .find(|s| s.label == label)
            .unwrap()
    };
    env.linode
        .set_snapshot_times(backend("updated-only").id, SnapshotTimes::NoCreated);
    env.linode
        .set_snapshot_times(backend("undated").id, SnapshotTimes::Neither);
    let updated = backend("updated-only");
    assert_eq!(updated.created, None);
    let updated_at = naive_to_unix(updated.updated.as_deref().unwrap()).unwrap();

    // One undated snapshot does not sink the list; it is left out.
    let all = list(&env, |_| {}).unwrap();
    assert_eq!(
        ids(&all),
        [dated.snapshot_id.clone(), updated_only.snapshot_id.clone()]
    );
    assert_eq!(all.entries[1].snapshot.creation_time.seconds, updated_at);
    assert_eq!(
        ids(&list(&env, |r| r.source_volume_id = v.volume_id.clone()).unwrap()),
        [dated.snapshot_id.clone(), updated_only.snapshot_id.clone()]
    );
    assert!(list(&env, |r| r.snapshot_id = undated.snapshot_id.clone())
        .unwrap()
        .entries
        .is_empty());
    assert!(
        env.driver.logs().contains("leaving out NFS snapshot"),
        "{}",
        env.driver.logs()
    );

    // CreateSnapshot must answer with a time: `updated`, else the present.
    let again = env.snapshot("updated-only", &v.volume_id).unwrap();
    assert_eq!(again.creation_time.seconds, updated_at);
    let before = std::time::SystemTime::now()
        .duration_since(std::time::UNIX_EPOCH)
        .unwrap()
        .as_secs() as i64;
    let again = env.snapshot("undated", &v.volume_id).unwrap();
    assert_eq!(again.snapshot_id, undated.snapshot_id);
    assert!(again.creation_time.seconds >= before, "{again:?}");
}

#[test]
fn list_snapshots_filters_and_pagination() {
    let env = Setup::new().start();
    let a = env.create_ok("vol-a");
    let b = env.create_ok("vol-b");
    let mut all = Vec::new();
    for (n, vol) in [&a, &a, &a, &b, &b].iter().enumerate() {
        all.push(
            env.snapshot(&format!("s{n}"), &vol.volume_id)
                .unwrap()
                .snapshot_id,
        );
    }

    let by_id = list(&env, |r| r.snapshot_id = all[1].clone()).unwrap();
    assert_eq!(ids(&by_id), [all[1].clone()]);
    let entry = &by_id.entries[0].snapshot;
    assert_eq!(entry.source_volume_id, a.volume_id);
    assert!(entry.creation_time.is_some());

    let mismatched = list(&env, |r| {
        r.snapshot_id = all[1].clone();
        r.source_volume_id = b.volume_id.clone();
    });
    assert!(mismatched.unwrap().entries.is_empty());
    assert_eq!(
        ids(&list(&env, |r| r.source_volume_id = a.volume_id.clone()).unwrap()),
        all[..3]
    );
    assert_eq!(
        ids(&list(&env, |r| r.source_volume_id = b.volume_id.clone()).unwrap()),
        all[3..]
    );
    let everything = list(&env, |_| {}).unwrap();
    assert_eq!(ids(&everything), all);
    assert!(everything.next_token.is_empty());

    // Walk the whole list two at a time.
    let mut walked = Vec::new();
    let mut token = String::new();
    let mut pages = 0;
    loop {
        let page = list(&env, |r| {
            r.max_entries = 2;
            r.starting_token = token.clone();
        })
        .unwrap();
        assert!(page.entries.len() <= 2);
        walked.extend(ids(&page));
        pages += 1;
        if page.next_token.is_empty() {
            break;
        }
        token = page.next_token;
        assert!(pages < 10, "pagination does not end");
    }
    assert_eq!(walked, all);
    assert_eq!(pages, 3);
    let big = list(&env, |r| r.max_entries = 100).unwrap();
    assert_eq!(ids(&big), all);
    assert!(big.next_token.is_empty());

    for token in ["abc", "-1", "99"] {
        assert_eq!(
            err_code(list(&env, |r| r.starting_token = token.into())),
            Code::ABORTED,
            "{token}"
        );
    }
    assert_eq!(
        err_code(list(&env, |r| r.max_entries = -1)),
        Code::INVALID_ARGUMENT
    );

    for unknown in [
        format!("{}/424242", a.volume_id),
        "7/99999/1".into(),
        "garbage".into(),
        "7/1".into(),
    ] {
        assert!(
            list(&env, |r| r.snapshot_id = unknown.clone())
                .unwrap()
                .entries
                .is_empty(),
            "{unknown}"
        );
    }
    for unknown in ["7/99999", "garbage"] {
        assert!(
            list(&env, |r| r.source_volume_id = unknown.into())
                .unwrap()
                .entries
                .is_empty(),
            "{unknown}"
        );
    }
}

#[test]
fn restore_from_a_snapshot_clones_it_idempotently() {
    let env = Setup::new()
        .seed(|s| s.with_space(SpaceSeed::new(8, "restores")))
        .start();
    let v = env.create_ok("origin");
    let s1 = snap_ready(&env, "first", &v.volume_id);
    let s2 = snap_ready(&env, "second", &v.volume_id);
    let restore = |name: &str, snapshot: &str, space: u64| {
        from_snapshot(
            volume_req(
                name,
                &[(P_SPACE_ID, space.to_string()), (P_TAGS, "restored".into())],
            ),
            snapshot,
        )
    };

    let got = env.create_with(&restore("copy", &s1.snapshot_id, 8));
    assert_eq!(got.content_source.snapshot().snapshot_id, s1.snapshot_id);
    let fs = env.filesystem("copy");
    let snap_id: u64 = s1.snapshot_id.rsplit('/').next().unwrap().parse().unwrap();
    assert_eq!(fs.source_snapshot_id, Some(snap_id));
    assert_eq!(fs.space_id, 8);
    assert_eq!(got.volume_id, format!("8/{}", fs.id));
    let clone = env
        .linode
        .requests()
        .into_iter()
        .find(|r| r.method == "POST" && r.path.ends_with("/clone"))
        .unwrap();
    assert_eq!(
        clone.path,
        format!(
            "nfs/spaces/{}/snapshots/{snap_id}/clone",
            v.volume_id.replace('/', "/filesystems/")
        )
    );
    let body = clone.json();
    assert_eq!(body["space_id"], 8);
    assert_eq!(body["label"], "copy");
    assert_eq!(body["region"], REGION);
    // The user's tag, the driver's mark, and the source, recorded on the
    // clone in case the API leaves out `source_snapshot_id`.
    assert_eq!(
        body["tags"],
        serde_json::json!([
            "restored",
            "csi.linodenfs.csi.linode.com",
            common::CLUSTER_TAG,
            format!("csi-source-snapshot.{}", s1.snapshot_id.replace('/', "."))
        ])
    );

    let again = env.create_with(&restore("copy", &s1.snapshot_id, 8));
    assert_eq!(again, got);
    assert_eq!(env.linode.calls("POST", CLONE), 1);

    assert_eq!(
        err_code(env.create(&restore("copy", &s2.snapshot_id, 8))),
        Code::ALREADY_EXISTS
    );
    assert_eq!(
        err_code(env.create(&volume_req(
            "copy",
            &[(P_SPACE_ID, "8".into()), (P_TAGS, "restored".into())]
        ))),
        Code::ALREADY_EXISTS
    );
    assert_eq!(
        err_code(env.create(&from_snapshot(
            volume_req("origin", &by_id()),
            &s1.snapshot_id
        ))),
        Code::ALREADY_EXISTS
    );
    assert_eq!(
        err_code(env.create(&restore("ghost", &format!("{}/424242", v.volume_id), 8))),
        Code::NOT_FOUND
    );
    assert_eq!(env.linode.calls("POST", CLONE), 1);
}

#[test]
fn restore_waits_for_a_snapshot_that_is_still_being_taken() {
    let env = Setup::new().start();
    let v = env.create_ok("origin");
    env.linode.set_activation_delay(Duration::from_millis(300));
    let s = env.snapshot("fresh", &v.volume_id).unwrap();
    assert!(!s.ready_to_use);
    let got = env
        .create(&from_snapshot(
            volume_req("early-restore", &by_id()),
            &s.snapshot_id,
        ))
        .unwrap();
    assert_eq!(
        got.volume.unwrap().content_source.snapshot().snapshot_id,
        s.snapshot_id
    );
    assert_eq!(env.linode.calls("POST", CLONE), 1);
}

/// The `size_gib` of every clone POST so far, in order (`None` = omitted).
fn clone_sizes(env: &Env) -> Vec<Option<u64>> {
    env.linode
        .requests()
        .iter()
        .filter(|r| r.method == "POST" && r.path.ends_with("/clone"))
        .map(|r| {
            let body: serde_json::Value = serde_json::from_str(&r.body).unwrap();
            body.get("size_gib").map(|g| g.as_u64().unwrap())
        })
        .collect()
}

/// A clone is as large as its source unless asked for more: a restore that
/// fits is sent with no size, a larger one grows to the next whole GiB, and
/// a range no clone can meet is OutOfRange with nothing left behind. A
/// retry of each gives the same answer.
#[test]
fn restore_honours_the_requested_capacity() {
    const GIB: i64 = 1 << 30;
    let env = Setup::new().start();
    let v = env.create_with(&with_capacity(volume_req("small", &by_id()), GIB, 0));
    let s = snap_ready(&env, "small-snap", &v.volume_id);
    let restore = |name: &str, required: i64, limit: i64| {
        with_capacity(
            from_snapshot(volume_req(name, &by_id()), &s.snapshot_id),
            required,
            limit,
        )
    };

    let same = env.create(&restore("same-size", GIB, 0)).unwrap();
    assert_eq!(same.volume.capacity_bytes, GIB);
    assert_eq!(clone_sizes(&env), [None]);

    // 1.5 GiB required: grown to 2 GiB, and the retry adopts that clone.
    let bigger = restore("bigger", GIB + GIB / 2, 0);
    let first = env.create(&bigger).unwrap();
    assert_eq!(first.volume.capacity_bytes, 2 * GIB);
    assert_eq!(env.filesystem("bigger").max_capacity_bytes, Some(2 * GIB));
    assert_eq!(env.create(&bigger).unwrap(), first);
    assert_eq!(clone_sizes(&env), [None, Some(2)]);

    for (name, required, limit) in [
        // Smaller than the source: a clone cannot shrink.
        ("shrunk", 0, GIB / 2),
        // 1.5 GiB up to 1.75 GiB: no whole GiB lies in between.
        ("between", GIB + GIB / 2, GIB + 3 * GIB / 4),
    ] {
        for attempt in 0..2 {
            let err = env.create(&restore(name, required, limit)).unwrap_err();
            assert_eq!(
                code_of(&err),
                Code::OUT_OF_RANGE,
                "{name} #{attempt}: {err:?}"
            );
        }
        assert!(
            env.live_filesystems().iter().all(|f| f.label != name),
            "{name} left a filesystem behind"
        );
    }
    assert_eq!(clone_sizes(&env).len(), 2, "refused restores never POST");
}
