//! ListVolumes, GetCapacity, GetSnapshot and ControllerModifyVolume through
//! the real binary against the fake Linode: only this driver's filesystems
//! are volumes, pages hold across changes, capacity follows the Space, and
//! a VolumeAttributesClass changes tags and squash and nothing else.

mod common;

use common::controller::*;
use grpcio::RpcStatusCode as Code;
use linode_nfs_csi::fake::SpaceSeed;
use linode_nfs_csi::linode::{Cloud, LinodeCloud, LinodeSettings, NewFilesystem};
use linode_nfs_csi::proto::csi;
use std::collections::BTreeSet;

const GIB: i64 = 1 << 30;

fn list(env: &Env, max: i32, token: &str) -> grpcio::Result<csi::ListVolumesResponse> {
    let mut req = csi::ListVolumesRequest::new();
    req.max_entries = max;
    req.starting_token = token.to_string();
    env.client.list_volumes(&req)
}

fn ids(resp: &csi::ListVolumesResponse) -> Vec<String> {
    resp.entries
        .iter()
        .map(|e| e.volume.volume_id.clone())
        .collect()
}

/// A filesystem made behind the driver's back, in a Space it shares.
fn foreign_filesystem(env: &Env, label: &str) {
    let mut settings = LinodeSettings::new(env.linode.token());
    settings.base_url = env.linode.url();
    LinodeCloud::new(settings)
        .unwrap()
        .create_filesystem(
            SPACE,
            &NewFilesystem {
                label: label.into(),
                region: REGION.into(),
                max_capacity_bytes: GIB,
                tags: vec!["someone-else".into()],
            },
        )
        .unwrap();
}

#[test]
fn only_this_drivers_filesystems_are_listed_in_stable_pages() {
    let env = Setup::new()
        .seed(|s| s.with_space(SpaceSeed::new(8, "second")))
        .start();
    foreign_filesystem(&env, "not-a-volume");
    let mut made: Vec<String> = (0..3)
        .map(|i| env.create_ok(&format!("vol-{i}")).volume_id)
        .collect();
    let in_8 = env
        .create(&volume_req("vol-in-8", &[(P_SPACE_ID, "8".into())]))
        .unwrap()
        .volume
        .unwrap()
        .volume_id;
    made.push(in_8);

    let all = list(&env, 0, "").unwrap();
    assert_eq!(ids(&all), made, "every volume of every Space, in id order");
    assert!(all.next_token.is_empty());
    let entry = &all.entries[0];
    assert_eq!(entry.volume.volume_context["space-id"], "7");
    assert!(!entry.status.volume_condition.abnormal);
    assert!(entry.status.published_node_ids.is_empty());

    // Pages of two; the token stays good when its page's last volume goes.
    let first = list(&env, 2, "").unwrap();
    assert_eq!(ids(&first), made[..2]);
    env.delete(&made[1]).unwrap();
    let rest = list(&env, 0, &first.next_token).unwrap();
    assert_eq!(ids(&rest), made[2..]);

    for bad in ["invalid-token", "7", "x/y"] {
        assert_eq!(err_code(list(&env, 0, bad)), Code::ABORTED, "{bad}");
    }
    assert_eq!(err_code(list(&env, -1, "")), Code::INVALID_ARGUMENT);
    // One list of Spaces and one filtered list per Space, nothing per volume.
    env.linode.clear_requests();
    list(&env, 0, "").unwrap();
    let seen: BTreeSet<String> = env.requests_since(0).into_iter().collect();
    assert_eq!(
        seen,
        BTreeSet::from([
            "GET nfs/spaces".to_string(),
            "GET nfs/spaces/7/filesystems".to_string(),
            "GET nfs/spaces/8/filesystems".to_string(),
        ])
    );
    assert_eq!(env.linode.requests().len(), 3);
}

#[test]
fn node_mode_lists_the_nodes_a_volume_is_published_to() {
    let env = Setup::new()
        .node_mode()
        .seed(|s| with_nodes(s, [1001]))
        .start();
    let v = env.create_ok("published");
    let mut publish = csi::ControllerPublishVolumeRequest::new();
    publish.volume_id = v.volume_id.clone();
    publish.node_id = "1001".into();
    publish.volume_capability = Some(mount_cap(Mode::MULTI_NODE_MULTI_WRITER)).into();
    env.client.controller_publish_volume(&publish).unwrap();
    let listed = list(&env, 0, "").unwrap();
    assert_eq!(listed.entries[0].status.published_node_ids, ["1001"]);
}

fn capacity(env: &Env, pairs: &[(&str, String)]) -> grpcio::Result<csi::GetCapacityResponse> {
    let mut req = csi::GetCapacityRequest::new();
    req.parameters = params(pairs.iter().map(|(k, v)| (*k, v.clone())));
    env.client.get_capacity(&req)
}

#[test]
fn capacity_is_what_the_space_can_still_hold() {
    let env = Setup::new()
        .seed(|s| {
            s.with_space(SpaceSeed {
                max_capacity_bytes: 100 * GIB,
                ..SpaceSeed::new(8, "sized")
            })
        })
        .start();
    let in_8 = [(P_SPACE_ID, "8".to_string())];
    let empty = capacity(&env, &in_8).unwrap();
    assert_eq!(empty.available_capacity, 100 * GIB);
    assert!(
        empty.maximum_volume_size.is_none(),
        "the API names no largest filesystem"
    );
    env.create(&with_capacity(volume_req("ten", &in_8), 10 * GIB, 0))
        .unwrap();
    assert_eq!(capacity(&env, &in_8).unwrap().available_capacity, 90 * GIB);
    let by_label = [(P_SPACE_LABEL, "sized".to_string())];
    assert_eq!(
        capacity(&env, &by_label).unwrap().available_capacity,
        90 * GIB
    );

    // No parameters: every Space the token sees.
    let seven = capacity(&env, &by_id()).unwrap().available_capacity;
    assert_eq!(
        capacity(&env, &[]).unwrap().available_capacity,
        seven + 90 * GIB
    );

    assert_eq!(
        err_code(capacity(&env, &[(P_SPACE_LABEL, "nowhere".into())])),
        Code::NOT_FOUND
    );
    assert_eq!(
        err_code(capacity(&env, &[(P_SPACE_ID, "x".into())])),
        Code::INVALID_ARGUMENT
    );
    let mut block = csi::GetCapacityRequest::new();
    block.volume_capabilities = vec![block_cap()];
    assert_eq!(
        env.client.get_capacity(&block).unwrap().available_capacity,
        0
    );
}

#[test]
fn get_snapshot_is_the_lookup_by_id() {
    let env = Setup::new().start();
    let v = env.create_ok("snapped");
    let made = env
        .client
        .create_snapshot(&snapshot_req("snap", &v.volume_id))
        .unwrap()
        .snapshot
        .unwrap();
    let get = |id: &str| {
        let mut req = csi::GetSnapshotRequest::new();
        req.snapshot_id = id.to_string();
        env.client.get_snapshot(&req)
    };
    let got = get(&made.snapshot_id).unwrap().snapshot.unwrap();
    assert_eq!(got.snapshot_id, made.snapshot_id);
    assert_eq!(got.source_volume_id, v.volume_id);
    assert!(got.creation_time.is_some());
    assert_eq!(err_code(get("")), Code::INVALID_ARGUMENT);
    for missing in ["none-exist-id", "7/101/1", "7/999/9001"] {
        assert_eq!(err_code(get(missing)), Code::NOT_FOUND, "{missing}");
    }
    let mut delete = csi::DeleteSnapshotRequest::new();
    delete.snapshot_id = made.snapshot_id.clone();
    env.client.delete_snapshot(&delete).unwrap();
    assert_eq!(
        err_code(get(&made.snapshot_id)),
        Code::NOT_FOUND,
        "deleting is gone"
    );
}

fn modify(
    env: &Env,
    volume_id: &str,
    pairs: &[(&str, &str)],
) -> grpcio::Result<csi::ControllerModifyVolumeResponse> {
    let mut req = csi::ControllerModifyVolumeRequest::new();
    req.volume_id = volume_id.to_string();
    for (k, v) in pairs {
        req.mutable_parameters.insert(k.to_string(), v.to_string());
    }
    env.client.controller_modify_volume(&req)
}

#[test]
fn a_volume_attributes_class_changes_tags_and_squash() {
    let env = Setup::new().start();
    let v = env.create_ok("modified");
    let fs_id = env.filesystem("modified").id;
    let squash = || {
        env.linode
            .filesystem_policy(fs_id)
            .unwrap()
            .squash_policy
            .unwrap()
            .as_str()
            .to_string()
    };
    modify(
        &env,
        &v.volume_id,
        &[(P_SQUASH, "all_squash"), (P_TAGS, "gold, team-a")],
    )
    .unwrap();
    assert_eq!(squash(), "all_squash");
    assert_eq!(
        env.filesystem("modified").tags,
        ["gold", "team-a", "csi.linodenfs.csi.linode.com"],
        "the driver's mark stays"
    );
    // Settled before the answer: the policy is active.
    assert_eq!(
        env.linode.filesystem_policy(fs_id).unwrap().status,
        linode_nfs_csi::linode::Status::Active
    );
    // A repeat writes nothing.
    let writes = env.linode.calls("PUT", "**");
    modify(
        &env,
        &v.volume_id,
        &[(P_SQUASH, "all_squash"), (P_TAGS, "team-a,gold")],
    )
    .unwrap();
    assert_eq!(env.linode.calls("PUT", "**"), writes);

    for (pairs, code) in [
        (
            vec![("XXX_FakeKey", "XXX_FakeValue")],
            Code::INVALID_ARGUMENT,
        ),
        (vec![(P_SPACE_ID, "8")], Code::INVALID_ARGUMENT),
        (vec![(P_SQUASH, "sometimes")], Code::INVALID_ARGUMENT),
        (vec![], Code::INVALID_ARGUMENT),
    ] {
        assert_eq!(
            err_code(modify(&env, &v.volume_id, &pairs)),
            code,
            "{pairs:?}"
        );
    }
    assert_eq!(
        err_code(modify(&env, "", &[(P_SQUASH, "none")])),
        Code::INVALID_ARGUMENT
    );
    for missing in ["non-existing-volume-id", "7/999"] {
        assert_eq!(
            err_code(modify(&env, missing, &[(P_SQUASH, "none")])),
            Code::NOT_FOUND,
            "{missing}"
        );
    }
    assert_eq!(squash(), "all_squash", "refused changes changed nothing");
}

#[test]
fn create_volume_applies_mutable_parameters_over_the_class() {
    let env = Setup::new().start();
    let mut req = volume_req(
        "with-vac",
        &[
            (P_SPACE_ID, "7".into()),
            (P_TAGS, "class".into()),
            (P_SQUASH, "none".into()),
        ],
    );
    req.mutable_parameters.insert(P_TAGS.into(), "vac".into());
    req.mutable_parameters
        .insert(P_SQUASH.into(), "all_squash".into());
    env.create(&req).unwrap();
    let fs = env.filesystem("with-vac");
    assert_eq!(fs.tags, ["vac", "csi.linodenfs.csi.linode.com"]);
    assert_eq!(
        env.linode
            .filesystem_policy(fs.id)
            .unwrap()
            .squash_policy
            .unwrap()
            .as_str(),
        "all_squash"
    );
    env.create(&req).expect("a repeat adopts");
}
