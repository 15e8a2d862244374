//! Volume group snapshots as csi-snapshotter takes them, against
//! `linode-nfs-csi dev` with a parent snapshot slow to turn `active`
//! (`DEV_ACTIVATION_DELAY`). The snapshotter fills a group's members in
//! from its first OK answer only and never reads their readiness again,
//! so that answer must already say every member is ready: each member
//! then restores, and GetSnapshot, GetVolumeGroupSnapshot and a repeated
//! create say the same. Calls that repeat the group while it waits join
//! it; one whose deadline passes, or whose controller is killed, gets a
//! code the snapshotter retries, and the retry finds the same group: one
//! parent snapshot, the same members.

mod common;
mod e2e_support;

use common::requests::*;
use common::rpc::*;
use common::{wait_for, wait_for_or};
use e2e_support::*;
use grpcio::RpcStatusCode as Code;
use linode_nfs_csi::proto::csi;
use std::collections::BTreeSet;
use std::path::PathBuf;
use std::time::Duration;

fn subdir_req(name: &str, size: i64) -> csi::CreateVolumeRequest {
    let mut req = create_req(name, size);
    req.parameters = subdirectory_params();
    req
}

fn dir_of(state: &StateDir, volume_id: &str) -> PathBuf {
    state
        .shared_base()
        .join(volume_id.rsplit('/').next().unwrap())
}

fn group_req(name: &str, sources: &[csi::Volume]) -> csi::CreateVolumeGroupSnapshotRequest {
    let mut req = csi::CreateVolumeGroupSnapshotRequest::new();
    req.name = name.to_string();
    req.source_volume_ids = sources.iter().map(|v| v.volume_id.clone()).collect();
    req
}

/// The directory volumes `names`, made at once (each waits for its quota
/// to turn active), each holding a file that names it.
fn volumes(state: &StateDir, dev: &Dev, names: &[&str]) -> Vec<csi::Volume> {
    let made: Vec<csi::Volume> = std::thread::scope(|s| {
        let calls: Vec<_> = names
            .iter()
            .map(|name| s.spawn(move || dev.create(&subdir_req(name, GIB))))
            .collect();
        calls.into_iter().map(|c| c.join().unwrap()).collect()
    });
    for v in &made {
        std::fs::write(dir_of(state, &v.volume_id).join("whose"), &v.volume_id).unwrap();
    }
    made
}

/// The group as csi-snapshotter keeps it: the first OK answer of a
/// CreateVolumeGroupSnapshot retried as the sidecar retries.
fn first_ok_answer(
    dev: &Dev,
    req: &csi::CreateVolumeGroupSnapshotRequest,
) -> csi::VolumeGroupSnapshot {
    let groups = dev.driver.groups();
    retry(&SIDECAR, || {
        groups.create_volume_group_snapshot_opt(req, call())
    })
    .unwrap_or_else(|e| {
        panic!(
            "CreateVolumeGroupSnapshot {}: {e:?}\n{}",
            req.name,
            dev.driver.logs()
        )
    })
    .group_snapshot
    .unwrap()
}

fn get_group(dev: &Dev, id: &str) -> csi::VolumeGroupSnapshot {
    let mut req = csi::GetVolumeGroupSnapshotRequest::new();
    req.group_snapshot_id = id.to_string();
    dev.driver
        .groups()
        .get_volume_group_snapshot_opt(&req, call())
        .unwrap()
        .group_snapshot
        .unwrap()
}

fn delete_group(dev: &Dev, group: &csi::VolumeGroupSnapshot) {
    let mut req = csi::DeleteVolumeGroupSnapshotRequest::new();
    req.group_snapshot_id = group.group_snapshot_id.clone();
    req.snapshot_ids = group
        .snapshots
        .iter()
        .map(|s| s.snapshot_id.clone())
        .collect();
    let groups = dev.driver.groups();
    retry(&SIDECAR, || {
        groups.delete_volume_group_snapshot_opt(&req, call())
    })
    .expect("DeleteVolumeGroupSnapshot");
}

/// `(id, phase)` of the Linode snapshots not being deleted.
fn live_snapshots(state: &StateDir) -> Vec<(u64, String)> {
    state
        .snapshots()
        .into_iter()
        .filter(|s| s.3 != "Deleting")
        .map(|s| (s.0, s.3))
        .collect()
}

/// The parent snapshot id in a group or member handle.
fn parent_of(handle: &str) -> u64 {
    handle.split('/').nth(2).unwrap().parse().unwrap()
}

fn member_ids(group: &csi::VolumeGroupSnapshot) -> BTreeSet<String> {
    group
        .snapshots
        .iter()
        .map(|s| s.snapshot_id.clone())
        .collect()
}

/// Every member of `group`, as the snapshotter took it, is ready, says
/// the same on GetSnapshot, and restores its own directory as it was.
fn assert_usable(state: &StateDir, dev: &Dev, group: &csi::VolumeGroupSnapshot, tag: &str) {
    assert!(group.ready_to_use, "{group:?}");
    for member in &group.snapshots {
        assert!(member.ready_to_use, "a member not ready: {member:?}");
        assert_eq!(member.group_snapshot_id, group.group_snapshot_id);
        let got = dev
            .controller
            .get_snapshot_opt(&get_snapshot_req(&member.snapshot_id), call())
            .unwrap()
            .snapshot
            .unwrap();
        assert_eq!(&got, member, "GetSnapshot disagrees with the group");
    }
    let restored: Vec<(String, csi::Volume)> = std::thread::scope(|s| {
        let calls: Vec<_> = group
            .snapshots
            .iter()
            .enumerate()
            .map(|(i, member)| {
                s.spawn(move || {
                    let req = from_snapshot(
                        subdir_req(&format!("{tag}-restored-{i}"), GIB),
                        &member.snapshot_id,
                    );
                    (member.source_volume_id.clone(), dev.create(&req))
                })
            })
            .collect();
        calls.into_iter().map(|c| c.join().unwrap()).collect()
    });
    for (source, volume) in restored {
        let whose = std::fs::read_to_string(dir_of(state, &volume.volume_id).join("whose"));
        assert_eq!(
            whose.unwrap(),
            source,
            "{} restores its own directory",
            volume.volume_id
        );
    }
}

fn as_the_snapshotter_takes_it(node_mode: bool) {
    let mode = if node_mode { "node" } else { "space" };
    let (state, dev) = start_dev(
        &format!("e2e-group-{mode}"),
        &[
            ("DEV_ACTIVATION_DELAY", "2s"),
            ("NFS_ACCESS_POLICY_MODE", mode),
        ],
    );
    let sources = volumes(&state, &dev, &["pvc-a", "pvc-b", "pvc-c"]);
    let req = group_req("groupsnapshot-1", &sources);

    let group = first_ok_answer(&dev, &req);
    assert_eq!(group.snapshots.len(), 3, "{group:?}");
    let answered: BTreeSet<&str> = group
        .snapshots
        .iter()
        .map(|s| s.source_volume_id.as_str())
        .collect();
    let asked: BTreeSet<&str> = sources.iter().map(|v| v.volume_id.as_str()).collect();
    assert_eq!(answered, asked);
    let parents = live_snapshots(&state);
    assert_eq!(parents.len(), 1, "one parent snapshot: {parents:?}");
    assert_eq!(parent_of(&group.group_snapshot_id), parents[0].0);
    assert!(group
        .snapshots
        .iter()
        .all(|s| parent_of(&s.snapshot_id) == parents[0].0));
    assert_usable(&state, &dev, &group, mode);

    // GetVolumeGroupSnapshot and a repeated create say the same.
    assert_eq!(get_group(&dev, &group.group_snapshot_id), group);
    let again = dev
        .driver
        .groups()
        .create_volume_group_snapshot_opt(&req, call())
        .unwrap()
        .group_snapshot
        .unwrap();
    assert_eq!(again, group);

    delete_group(&dev, &group);
    assert_eq!(live_snapshots(&state), Vec::<(u64, String)>::new());
}

#[test]
fn a_group_is_answered_with_every_member_ready_in_space_mode() {
    as_the_snapshotter_takes_it(false);
}

#[test]
fn a_group_is_answered_with_every_member_ready_in_node_mode() {
    as_the_snapshotter_takes_it(true);
}

#[test]
fn calls_that_repeat_a_waiting_group_join_it_and_none_is_refused() {
    let (state, dev) = start_dev("e2e-group-join", &[("DEV_ACTIVATION_DELAY", "2s")]);
    let sources = volumes(&state, &dev, &["pvc-a", "pvc-b"]);
    let req = group_req("groupsnapshot-join", &sources);
    // Each on a connection of its own, taking the first answer: an Aborted
    // one fails the test.
    let call_once = || {
        let groups = dev.driver.groups();
        let req = req.clone();
        move || groups.create_volume_group_snapshot_opt(&req, call())
    };
    let answers: Vec<grpcio::Result<csi::CreateVolumeGroupSnapshotResponse>> =
        std::thread::scope(|s| {
            let mut calls: Vec<_> = (0..3).map(|_| s.spawn(call_once())).collect();
            wait_for(
                "the parent snapshot to be taken",
                Duration::from_secs(30),
                || !live_snapshots(&state).is_empty(),
            );
            let phase = &live_snapshots(&state)[0].1;
            assert_eq!(phase, "Creating", "too late to prove anything");
            calls.push(s.spawn(call_once()));
            // What the waiting group cannot answer is refused, as against
            // its record: other members, another name of its entry.
            let groups = dev.driver.groups();
            for other in [
                group_req("groupsnapshot-join", &sources[..1]),
                group_req("GroupSnapshot-Join", &sources),
            ] {
                let e = groups
                    .create_volume_group_snapshot_opt(&other, call())
                    .unwrap_err();
                assert_eq!(code_of(&e), Code::ALREADY_EXISTS, "{other:?}: {e:?}");
                assert!(message_of(&e).contains("being taken"), "{e:?}");
            }
            calls.into_iter().map(|c| c.join().unwrap()).collect()
        });
    let groups: Vec<csi::VolumeGroupSnapshot> = answers
        .into_iter()
        .map(|a| {
            a.expect("a repeated call while the group waits")
                .group_snapshot
                .unwrap()
        })
        .collect();
    assert!(groups.iter().all(|g| *g == groups[0]), "{groups:#?}");
    assert!(groups[0].snapshots.iter().all(|s| s.ready_to_use));
    assert_eq!(live_snapshots(&state).len(), 1, "one parent snapshot");
    let recorded = common::volume_names(&state.shared_base().join(".snapshots"));
    assert_eq!(recorded.len(), 2, "the members' records only: {recorded:?}");
    delete_group(&dev, &groups[0]);
    assert!(live_snapshots(&state).is_empty());
}

#[test]
fn past_a_deadline_the_group_is_retried_and_the_retry_finds_the_same_group() {
    // Every object takes longer than any one call may wait: the volumes
    // are made by retries, as the provisioner makes them.
    let (state, dev) = start_dev(
        "e2e-group-late",
        &[
            ("DEV_ACTIVATION_DELAY", "4s"),
            ("LINODE_WAIT_TIMEOUT", "1s"),
        ],
    );
    let sources = volumes(&state, &dev, &["pvc-a", "pvc-b"]);
    let req = group_req("groupsnapshot-late", &sources);
    let groups = dev.driver.groups();
    // The caller's deadline first: the wait goes on without it.
    let short = grpcio::CallOption::default().timeout(Duration::from_millis(500));
    assert_code(
        groups.create_volume_group_snapshot_opt(&req, short),
        Code::DEADLINE_EXCEEDED,
        "a caller whose deadline passed",
    );
    // Then LINODE_WAIT_TIMEOUT: the driver's answer, one the sidecar retries.
    let e = groups
        .create_volume_group_snapshot_opt(&req, call())
        .unwrap_err();
    assert_eq!(code_of(&e), Code::DEADLINE_EXCEEDED, "{e:?}");
    assert!(message_of(&e).contains("did not become active"), "{e:?}");
    let parents = live_snapshots(&state);
    assert_eq!(parents.len(), 1, "{parents:?}");

    let group = first_ok_answer(&dev, &req);
    assert!(group.snapshots.iter().all(|s| s.ready_to_use), "{group:?}");
    assert_eq!(parent_of(&group.group_snapshot_id), parents[0].0);
    assert_eq!(live_snapshots(&state).len(), 1, "the retry took no other");
    assert_eq!(get_group(&dev, &group.group_snapshot_id), group);
    delete_group(&dev, &group);
    assert!(live_snapshots(&state).is_empty());
}

/// The member ids the group record `name` on the shared parent names:
/// its parent snapshot and its members' entries.
fn recorded_members(state: &StateDir, name: &str) -> BTreeSet<String> {
    let record = std::fs::read_to_string(state.shared_base().join(".snapshots/.groups").join(name))
        .unwrap_or_else(|e| panic!("no record of group {name}: {e}"));
    let field = |key: &str| {
        record
            .lines()
            .filter_map(|l| l.strip_prefix(key))
            .map(str::to_string)
            .collect::<Vec<_>>()
    };
    let snapshot = &field("snapshot: ")[0];
    let (shared, _) = state.shared_parent();
    field("member: ")
        .into_iter()
        .map(|entry| format!("1/{shared}/{snapshot}/{entry}"))
        .collect()
}

#[test]
fn killed_while_the_group_waits_the_retry_on_the_next_process_finds_the_same_group() {
    let state = StateDir::new("e2e-group-kill");
    let mut first = Dev::start(&state, &[("DEV_ACTIVATION_DELAY", "8s")]);
    let sources = volumes(&state, &first, &["pvc-a", "pvc-b", "pvc-c"]);
    let req = group_req("groupsnapshot-kill", &sources);
    let groups = first.driver.groups();
    let pending = {
        let req = req.clone();
        std::thread::spawn(move || groups.create_volume_group_snapshot_opt(&req, call()))
    };
    wait_for_or(
        "the group to wait for its parent snapshot",
        Duration::from_secs(30),
        || {
            first
                .driver
                .logs()
                .contains("holds 4 directory snapshot record(s)")
        },
        || first.driver.logs(),
    );
    let parents = live_snapshots(&state);
    assert_eq!(parents.len(), 1, "{parents:?}");
    assert_eq!(
        parents[0].1, "Creating",
        "killed too late to prove anything"
    );
    let members = recorded_members(&state, "groupsnapshot-kill");
    assert_eq!(members.len(), 3, "{members:?}");
    first.driver.kill();
    let lost = pending.join().unwrap();
    assert!(lost.is_err(), "answered although killed: {lost:?}");

    let second = Dev::start(&state, &[("DEV_ACTIVATION_DELAY", "8s")]);
    let group = first_ok_answer(&second, &req);
    assert_eq!(member_ids(&group), members, "the retry names other members");
    assert!(group.snapshots.iter().all(|s| s.ready_to_use), "{group:?}");
    assert_eq!(live_snapshots(&state).len(), 1, "one parent snapshot");
    assert_eq!(parent_of(&group.group_snapshot_id), parents[0].0);
    assert_usable(&state, &second, &group, "after-kill");
    delete_group(&second, &group);
    assert!(live_snapshots(&state).is_empty());
}
