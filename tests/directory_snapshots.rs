//! Snapshots of directory volumes through the real binary and the fake
//! Linode API: each is a part of a Linode snapshot of the shared parent,
//! shared by the requests that arrive together, recorded on the parent,
//! deleted with its last part, and never anyone's whole-filesystem
//! snapshot. Every test reads the backend and the parent's files after.

mod common;

use common::controller::{by_id, volume_req};
use common::linode::request;
use common::requests::*;
use common::rpc::*;
use common::subdir::*;
use common::wait_for;
use grpcio::RpcStatusCode as Code;
use linode_nfs_csi::fake::FaultRule;
use linode_nfs_csi::linode::{Snapshot, Status};
use linode_nfs_csi::proto::csi;
use serde_json::json;
use std::time::Duration;

const MARK: &str = "csi-directory-snapshots";

/// The live parent snapshots of the world's parent.
fn parent_snapshots(w: &World) -> Vec<Snapshot> {
    w.env
        .linode
        .snapshots()
        .into_iter()
        .filter(|s| s.filesystem_id == w.parent && s.status != Status::Deleting)
        .collect()
}

fn snapshot_posts(w: &World) -> usize {
    w.env
        .linode
        .calls("POST", "nfs/spaces/*/filesystems/*/snapshots")
}

fn records(w: &World) -> Vec<String> {
    common::volume_names(&w.export.join("csi-volumes/.snapshots"))
}

fn batches(w: &World) -> Vec<String> {
    common::names_in(&w.export.join("csi-volumes/.snapshots/.batches"))
}

fn listed(w: &World, id: &str, source: &str) -> Vec<csi::Snapshot> {
    w.env.listed_snapshots(id, source)
}

/// CreateSnapshot called again, as the snapshotter does, until ready.
fn ready_snapshot(w: &World, name: &str, source: &str) -> csi::Snapshot {
    let mut last = None;
    wait_for("the snapshot to be ready", Duration::from_secs(30), || {
        let s = w
            .env
            .snapshot(name, source)
            .unwrap_or_else(|e| panic!("CreateSnapshot {name}: {e:?}\n{}", w.env.driver.logs()));
        let ready = s.ready_to_use;
        last = Some(s);
        ready
    });
    last.unwrap()
}

#[test]
fn a_directory_snapshot_is_part_of_a_marked_parent_snapshot_and_outlives_its_volume() {
    let w = world();
    let a = w.create_ok("pvc-a", 2 * GIB, &[]);
    let b = w.create_ok("pvc-b", GIB, &[]);

    let snap = ready_snapshot(&w, "snap-a", &a.volume_id);
    let parts: Vec<&str> = snap.snapshot_id.split('/').collect();
    assert_eq!(parts.len(), 4, "{}", snap.snapshot_id);
    assert_eq!(parts[..2], ["7", &w.parent.to_string()][..]);
    assert_eq!(parts[3], "snap-a");
    assert_eq!(snap.source_volume_id, a.volume_id);
    assert_eq!(snap.size_bytes, 2 * GIB, "the source's capacity");
    assert!(snap.creation_time.is_some());
    let parents = parent_snapshots(&w);
    assert_eq!(parents.len(), 1);
    assert!(parents[0].tags.iter().any(|t| t == MARK), "{parents:?}");
    assert_eq!(parts[2], parents[0].id.to_string());

    // Idempotent by name; the name is taken for any other source.
    let again = w.env.snapshot("snap-a", &a.volume_id).unwrap();
    assert_eq!(again.snapshot_id, snap.snapshot_id);
    assert_code(
        w.env.snapshot("snap-a", &b.volume_id),
        Code::ALREADY_EXISTS,
        "the same name of another volume",
    );
    // Two names that map to one record are two snapshots: the second refused.
    assert_code(
        w.env.snapshot("SNAP-A", &a.volume_id),
        Code::ALREADY_EXISTS,
        "another name of the same record",
    );
    assert_eq!(snapshot_posts(&w), 1, "a repeat never POSTs again");

    let snap_b = ready_snapshot(&w, "snap-b", &b.volume_id);
    assert_eq!(snap_b.size_bytes, GIB);
    assert_eq!(
        parent_snapshots(&w).len(),
        2,
        "a request never shares a parent snapshot POSTed before it arrived"
    );

    // Get, and List by id, by source and in all.
    let got = w
        .env
        .client
        .get_snapshot(&get_snapshot_req(&snap.snapshot_id))
        .unwrap()
        .snapshot
        .unwrap();
    assert_eq!(got, snap);
    assert_eq!(
        listed(&w, &snap.snapshot_id, ""),
        std::slice::from_ref(&snap)
    );
    assert_eq!(listed(&w, "", &a.volume_id), std::slice::from_ref(&snap));
    assert!(listed(&w, &snap.snapshot_id, &b.volume_id).is_empty());
    let all: Vec<String> = listed(&w, "", "")
        .into_iter()
        .map(|s| s.snapshot_id)
        .collect();
    assert_eq!(all, [snap.snapshot_id.clone(), snap_b.snapshot_id.clone()]);

    // The parent snapshot is nobody's whole-filesystem snapshot.
    let whole = format!("7/{}/{}", w.parent, parts[2]);
    assert!(listed(&w, &whole, "").is_empty());
    assert_code(
        w.env.client.get_snapshot(&get_snapshot_req(&whole)),
        Code::NOT_FOUND,
        "the parent snapshot as a whole",
    );
    assert_code(
        w.env.client.delete_snapshot(&delete_snapshot_req(&whole)),
        Code::FAILED_PRECONDITION,
        "deleting the parent snapshot as a whole",
    );
    assert_eq!(parent_snapshots(&w).len(), 2);

    // A directory snapshot outlives its volume.
    w.env.delete(&a.volume_id).unwrap();
    assert_eq!(listed(&w, "", "").len(), 2);
    assert_eq!(listed(&w, "", &a.volume_id), std::slice::from_ref(&snap));

    // Deleting a part deletes its parent snapshot when it was the last.
    w.env.delete_snapshot_ok(&snap.snapshot_id);
    w.env.delete_snapshot_ok(&snap.snapshot_id);
    assert_eq!(parent_snapshots(&w).len(), 1);
    assert_code(
        w.env
            .client
            .get_snapshot(&get_snapshot_req(&snap.snapshot_id)),
        Code::NOT_FOUND,
        "a deleted directory snapshot",
    );
    assert_eq!(records(&w), ["snap-b"]);
    w.env.delete_snapshot_ok(&snap_b.snapshot_id);
    assert!(parent_snapshots(&w).is_empty());
    assert!(records(&w).is_empty());
    assert!(batches(&w).is_empty(), "{:?}", batches(&w));
}

#[test]
fn fifty_requests_at_once_share_at_most_two_parent_snapshots() {
    let w = world();
    let names: Vec<String> = (0..50).map(|i| format!("pvc-{i}")).collect();
    let ids: Vec<String> = names
        .iter()
        .map(|n| w.create_ok(n, GIB, &[]).volume_id)
        .collect();
    // A POST takes as long as a real one may: whatever arrives meanwhile
    // waits for the next.
    w.env.linode.inject(FaultRule::latency(
        "POST",
        "nfs/spaces/*/filesystems/*/snapshots",
        Duration::from_millis(300),
    ));
    let answers: Vec<grpcio::Result<csi::CreateSnapshotResponse>> = std::thread::scope(|s| {
        let calls: Vec<_> = ids
            .iter()
            .enumerate()
            .map(|(i, id)| {
                let client = w.env.driver.controller();
                let req = snapshot_req(&format!("snap-{i}"), id);
                s.spawn(move || client.create_snapshot(&req))
            })
            .collect();
        calls.into_iter().map(|c| c.join().unwrap()).collect()
    });
    let mut parents = std::collections::BTreeSet::new();
    for a in answers {
        let s = a.unwrap().snapshot.unwrap();
        parents.insert(s.snapshot_id.split('/').nth(2).unwrap().to_string());
    }
    let posts = snapshot_posts(&w);
    assert!(posts <= 2, "{posts} POSTs for 50 snapshots");
    assert_eq!(parents.len(), posts);
    assert_eq!(records(&w).len(), 50);
    assert_eq!(listed(&w, "", "").len(), 50);
}

#[test]
fn forged_and_foreign_ids_are_not_found_and_delete_nothing() {
    let w = world();
    let a = w.create_ok("pvc-a", GIB, &[]);
    let snap = ready_snapshot(&w, "snap-a", &a.volume_id);
    let parent_snap = snap.snapshot_id.split('/').nth(2).unwrap().to_string();
    let forged = [
        // Another parent snapshot id with a real entry.
        format!(
            "7/{}/{}/snap-a",
            w.parent,
            parent_snap.parse::<u64>().unwrap() + 1000
        ),
        // A real parent snapshot with an entry that has no record.
        format!("7/{}/{parent_snap}/snap-zzz", w.parent),
        // Another filesystem.
        format!("7/99999/{parent_snap}/snap-a"),
    ];
    for id in &forged {
        assert_code(
            w.env.client.get_snapshot(&get_snapshot_req(id)),
            Code::NOT_FOUND,
            id,
        );
        assert!(listed(&w, id, "").is_empty(), "{id}");
        w.env.delete_snapshot_ok(id);
    }
    assert_eq!(records(&w), ["snap-a"], "no forged id removed a record");
    assert_eq!(parent_snapshots(&w).len(), 1);
    // A directory that is not a volume, a volume that is not there.
    std::fs::create_dir_all(w.dir("admin-dir")).unwrap();
    for source in [w.id("admin-dir"), w.id("pvc-none")] {
        assert_code(w.env.snapshot("snap-x", &source), Code::NOT_FOUND, &source);
    }
    assert_eq!(snapshot_posts(&w), 1, "nothing was POSTed for them");
    assert_eq!(records(&w), ["snap-a"]);
}

#[test]
fn orphaned_parent_snapshots_are_swept_and_dead_batches_taken_again() {
    let w = world();
    let a = w.create_ok("pvc-a", GIB, &[]);
    // A marked parent snapshot nothing records, as a crash after the POST
    // of a batch whose records were then dropped would leave.
    let orphan = request(
        &w.env.linode,
        "POST",
        &format!("v4beta/nfs/spaces/7/filesystems/{}/snapshots", w.parent),
        &[],
        Some(json!({"label": "csi-dirsnap-1-1-1", "tags": [MARK]})),
    );
    assert_eq!(orphan.status, 200, "{}", orphan.text);
    // And a record whose batch never POSTed (a crash before the POST).
    let shelf = w.export.join("csi-volumes/.snapshots");
    std::fs::create_dir_all(shelf.join(".batches/csi-dirsnap-2-2-2")).unwrap();
    std::fs::write(shelf.join(".batches/csi-dirsnap-2-2-2/s-snap-a"), "").unwrap();
    std::fs::write(
        shelf.join("snap-a"),
        "csi-name: snap-a\nbatch: csi-dirsnap-2-2-2\nsource: pvc-a\nsize-bytes: 1073741824\n",
    )
    .unwrap();
    assert!(
        listed(&w, "", "").is_empty(),
        "a record without a snapshot is none"
    );

    let snap = ready_snapshot(&w, "snap-a", &a.volume_id);
    assert_eq!(snapshot_posts(&w), 2, "the dead batch was taken again");
    assert!(!batches(&w).contains(&"csi-dirsnap-2-2-2".to_string()));
    let labels: Vec<String> = parent_snapshots(&w).into_iter().map(|s| s.label).collect();
    assert!(
        !labels.contains(&"csi-dirsnap-1-1-1".to_string()),
        "the orphan was swept: {labels:?}"
    );
    assert_eq!(labels.len(), 1);
    w.env.delete_snapshot_ok(&snap.snapshot_id);
    assert!(parent_snapshots(&w).is_empty());
}

/// CreateSnapshot of `source` on its own thread, as a sidecar whose call
/// is cut short by the controller's death.
fn snapshot_in_background(w: &World, name: &str, source: &str) -> std::thread::JoinHandle<()> {
    let client = w.env.driver.controller();
    let req = snapshot_req(name, source);
    std::thread::spawn(move || {
        let _ = client.create_snapshot(&req);
    })
}

#[test]
fn killed_before_its_parent_snapshot_landed_a_retry_takes_the_batch_again() {
    let mut w = world();
    let a = w.create_ok("pvc-a", GIB, &[]);
    // The POST fails unapplied (the driver cannot know): the records stay,
    // in doubt, and the controller dies before anything else.
    w.env.linode.inject(FaultRule::status(
        "POST",
        "nfs/spaces/*/filesystems/*/snapshots",
        500,
    ));
    assert_code(
        w.env.snapshot("snap-a", &a.volume_id),
        Code::INTERNAL,
        "the failed POST",
    );
    assert_eq!(
        records(&w),
        ["snap-a"],
        "kept for a retry: it may have landed"
    );
    w.env.driver.kill();
    w.env.linode.clear_faults();
    w.env.restart();

    let snap = ready_snapshot(&w, "snap-a", &a.volume_id);
    assert_eq!(parent_snapshots(&w).len(), 1);
    assert_eq!(records(&w), ["snap-a"]);
    assert_eq!(batches(&w).len(), 1, "{:?}", batches(&w));
    w.env.delete_snapshot_ok(&snap.snapshot_id);
    assert!(parent_snapshots(&w).is_empty());
    assert!(batches(&w).is_empty());
}

#[test]
fn killed_after_its_parent_snapshot_landed_a_retry_adopts_it() {
    let mut w = world();
    let a = w.create_ok("pvc-a", GIB, &[]);
    let gate = w
        .env
        .linode
        .hang("POST", "nfs/spaces/*/filesystems/*/snapshots");
    let call = snapshot_in_background(&w, "snap-a", &a.volume_id);
    assert!(gate.wait_for_hits(1, Duration::from_secs(30)));
    w.env.driver.kill();
    // The POST is served after all: the reply is lost with the controller.
    gate.release();
    call.join().unwrap();
    wait_for("the late POST to land", Duration::from_secs(10), || {
        parent_snapshots(&w).len() == 1
    });
    w.env.restart();

    let snap = ready_snapshot(&w, "snap-a", &a.volume_id);
    assert_eq!(snapshot_posts(&w), 1, "adopted, not taken again");
    assert_eq!(
        snap.snapshot_id.split('/').nth(2).unwrap(),
        parent_snapshots(&w)[0].id.to_string()
    );
    w.env.delete_snapshot_ok(&snap.snapshot_id);
    assert!(parent_snapshots(&w).is_empty());
    assert!(records(&w).is_empty() && batches(&w).is_empty());
}

fn group_req(name: &str, sources: &[&str]) -> csi::CreateVolumeGroupSnapshotRequest {
    let mut req = csi::CreateVolumeGroupSnapshotRequest::new();
    req.name = name.to_string();
    req.source_volume_ids = sources.iter().map(|s| s.to_string()).collect();
    req
}

#[test]
fn a_group_of_directories_is_one_parent_snapshot_and_goes_as_one() {
    let w = world();
    let groups = w.env.driver.groups();
    let caps = groups
        .group_controller_get_capabilities(&Default::default())
        .unwrap();
    assert_eq!(caps.capabilities.len(), 1);
    let a = w.create_ok("pvc-a", GIB, &[]).volume_id;
    let b = w.create_ok("pvc-b", 2 * GIB, &[]).volume_id;
    let c = w.create_ok("pvc-c", GIB, &[]).volume_id;

    let group = groups
        .create_volume_group_snapshot(&group_req("group-1", &[&a, &b]))
        .unwrap()
        .group_snapshot
        .unwrap();
    assert_eq!(snapshot_posts(&w), 1, "one instant for the whole group");
    let parent = parent_snapshots(&w)[0].id.to_string();
    assert_eq!(group.group_snapshot_id.split('/').nth(2).unwrap(), parent);
    let mut sources: Vec<&str> = group
        .snapshots
        .iter()
        .map(|s| s.source_volume_id.as_str())
        .collect();
    sources.sort();
    assert_eq!(sources, [a.as_str(), b.as_str()]);
    for member in &group.snapshots {
        assert_eq!(member.group_snapshot_id, group.group_snapshot_id);
        assert_eq!(member.snapshot_id.split('/').nth(2).unwrap(), parent);
    }
    // Idempotent by name; the name is taken for other members.
    let again = groups
        .create_volume_group_snapshot(&group_req("group-1", &[&b, &a]))
        .unwrap()
        .group_snapshot
        .unwrap();
    assert_eq!(again.group_snapshot_id, group.group_snapshot_id);
    assert_code(
        groups.create_volume_group_snapshot(&group_req("group-1", &[&a, &c])),
        Code::ALREADY_EXISTS,
        "the same name with other members",
    );
    let mut get = csi::GetVolumeGroupSnapshotRequest::new();
    get.group_snapshot_id = group.group_snapshot_id.clone();
    let got = groups
        .get_volume_group_snapshot(&get)
        .unwrap()
        .group_snapshot
        .unwrap();
    assert_eq!(got.snapshots.len(), 2);

    // Members are snapshots like any other, but go only with their group.
    assert_eq!(listed(&w, "", "").len(), 2);
    let member = &group.snapshots[0].snapshot_id;
    assert_code(
        w.env.client.delete_snapshot(&delete_snapshot_req(member)),
        Code::FAILED_PRECONDITION,
        "a member deleted on its own",
    );
    let mut delete = csi::DeleteVolumeGroupSnapshotRequest::new();
    delete.group_snapshot_id = group.group_snapshot_id.clone();
    delete.snapshot_ids = vec![member.clone()];
    assert_code(
        groups.delete_volume_group_snapshot(&delete),
        Code::INVALID_ARGUMENT,
        "a delete naming other members",
    );
    delete.snapshot_ids = group
        .snapshots
        .iter()
        .map(|s| s.snapshot_id.clone())
        .collect();
    groups.delete_volume_group_snapshot(&delete).unwrap();
    groups.delete_volume_group_snapshot(&delete).unwrap();
    assert!(listed(&w, "", "").is_empty());
    assert!(parent_snapshots(&w).is_empty());
    assert!(records(&w).is_empty() && batches(&w).is_empty());
    assert_code(
        groups.get_volume_group_snapshot(&get),
        Code::NOT_FOUND,
        "a deleted group",
    );
}

#[test]
fn groups_that_cannot_be_taken_at_one_instant_are_refused_and_make_nothing() {
    let w = world();
    let groups = w.env.driver.groups();
    let a = w.create_ok("pvc-a", GIB, &[]).volume_id;
    let whole = {
        let v = w.env.create_with(&volume_req("pvc-whole", &by_id()));
        v.volume_id
    };
    std::fs::create_dir_all(w.dir("admin-dir")).unwrap();
    let elsewhere = format!("7/{}/pvc-a", w.parent + 1000);
    let cases: [(Vec<&str>, Code); 5] = [
        (vec![&a, &whole], Code::INVALID_ARGUMENT),
        (vec![&a, &elsewhere], Code::INVALID_ARGUMENT),
        (vec![&a, &a], Code::INVALID_ARGUMENT),
        (vec![], Code::INVALID_ARGUMENT),
        (vec![&a, "x"], Code::NOT_FOUND),
    ];
    for (sources, code) in cases {
        assert_code(
            groups.create_volume_group_snapshot(&group_req("group-bad", &sources)),
            code,
            &format!("{sources:?}"),
        );
    }
    let foreign = w.id("admin-dir");
    assert_code(
        groups.create_volume_group_snapshot(&group_req("group-bad", &[&a, &foreign])),
        Code::NOT_FOUND,
        "a directory that is no volume",
    );
    assert_code(
        groups.create_volume_group_snapshot(&group_req("", &[&a])),
        Code::INVALID_ARGUMENT,
        "no name",
    );
    assert_eq!(snapshot_posts(&w), 0);
    assert!(records(&w).is_empty());
}
