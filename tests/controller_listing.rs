//! ListVolumes, GetCapacity, GetSnapshot and ControllerModifyVolume through
//! the real binary against the fake Linode: only this driver's filesystems
//! are volumes, pages hold across changes and a walk costs one listing,
//! published nodes come from what the controller read and wrote, capacity
//! follows the Space, and a VolumeAttributesClass changes tags and squash
//! and nothing else.

mod common;

use common::controller::*;
use common::requests::*;
use common::rpc::*;
use common::wait_for;
use grpcio::RpcStatusCode as Code;
use linode_nfs_csi::build_info::DRIVER_NAME;
use linode_nfs_csi::fake::{FakeStorageClass, FaultRule, FilesystemSeed, Seed, SpaceSeed};
use linode_nfs_csi::linode::{Cloud, FilesystemAccessPolicyUpdate, NewFilesystem, SquashPolicy};
use linode_nfs_csi::proto::csi;
use std::collections::{BTreeMap, BTreeSet};
use std::time::Duration;

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
    env.someone_else()
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
        .create_with(&volume_req("vol-in-8", &[(P_SPACE_ID, "8".into())]))
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
fn storage_classes_naming_no_shared_filesystem_of_ours_cost_no_linode_request() {
    let env = Setup::new()
        .seed(|s| s.with_filesystem(FilesystemSeed::new(SPACE, "team-share", REGION)))
        .start();
    let volume = env.create_ok("vol-0").volume_id;
    let baseline = BTreeSet::from([
        "GET nfs/spaces".to_string(),
        "GET nfs/spaces/7/filesystems".to_string(),
    ]);
    let listed_with = |what: &str| {
        env.linode.clear_requests();
        let all = list(&env, 0, "").unwrap_or_else(|e| panic!("{what}: {e:?}"));
        assert_eq!(ids(&all), std::slice::from_ref(&volume), "{what}");
        let seen: BTreeSet<String> = env.requests_since(0).into_iter().collect();
        assert_eq!(seen, baseline, "{what}");
        assert_eq!(env.linode.requests().len(), 2, "{what}");
    };
    listed_with("no StorageClass and no mounted parent");

    let shared = [
        (P_SPACE_ID, "7"),
        ("linodenfs.csi.linode.com/volume-type", "subdirectory"),
        (
            "linodenfs.csi.linode.com/shared-filesystem-label",
            "team-share",
        ),
    ];
    env.kube.add_storage_class(FakeStorageClass::new(
        "someone-elses",
        "nfs.csi.k8s.io",
        &shared,
    ));
    env.kube.add_storage_class(FakeStorageClass::new(
        "whole-filesystems",
        DRIVER_NAME,
        &[(P_SPACE_ID, "7")],
    ));
    env.kube.add_storage_class(FakeStorageClass::new(
        "malformed",
        DRIVER_NAME,
        &[
            ("linodenfs.csi.linode.com/volume-type", "subdirectory"),
            (P_SPACE_ID, "7"),
        ],
    ));
    let asked = env.kube.requests();
    listed_with("classes of another provisioner, of whole filesystems, malformed");
    assert_eq!(env.kube.requests(), asked + 1, "one list of StorageClasses");

    // An API server that cannot be read does not fail the listing.
    env.kube.fail_next(503, 1);
    listed_with("the StorageClasses cannot be read");
}

#[test]
fn node_mode_lists_the_nodes_a_volume_is_published_to() {
    let env = Setup::new()
        .node_mode()
        .seed(|s| with_nodes(s, [1001]))
        .start();
    let v = env.create_ok("published");
    env.publish(&v.volume_id, "1001").unwrap();
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
    let made = env.snapshot("snap", &v.volume_id).unwrap();
    let get = |id: &str| env.client.get_snapshot(&get_snapshot_req(id));
    let got = get(&made.snapshot_id).unwrap().snapshot.unwrap();
    assert_eq!(got.snapshot_id, made.snapshot_id);
    assert_eq!(got.source_volume_id, v.volume_id);
    assert!(got.creation_time.is_some());
    assert_eq!(err_code(get("")), Code::INVALID_ARGUMENT);
    for missing in ["none-exist-id", "7/101/1", "7/999/9001"] {
        assert_eq!(err_code(get(missing)), Code::NOT_FOUND, "{missing}");
    }
    env.client
        .delete_snapshot(&delete_snapshot_req(&made.snapshot_id))
        .unwrap();
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
    env.client
        .controller_modify_volume(&modify_req(volume_id, pairs))
}

#[test]
fn a_volume_attributes_class_changes_tags_and_squash() {
    let env = Setup::new().start();
    let v = env.create_ok("modified");
    let fs_id = env.filesystem("modified").id;
    let squash = || env.squash(fs_id);
    modify(
        &env,
        &v.volume_id,
        &[(P_SQUASH, "all_squash"), (P_TAGS, "gold, team-a")],
    )
    .unwrap();
    assert_eq!(squash(), "all_squash");
    assert_eq!(
        env.filesystem("modified").tags,
        [
            "gold",
            "team-a",
            "csi.linodenfs.csi.linode.com",
            common::CLUSTER_TAG
        ],
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
    assert_eq!(
        fs.tags,
        ["vac", "csi.linodenfs.csi.linode.com", common::CLUSTER_TAG]
    );
    assert_eq!(env.squash(fs.id), "all_squash");
    env.create(&req).expect("a repeat adopts");
}

/// The driver's mark: filesystems seeded with it are its volumes.
const MARK: &str = "csi.linodenfs.csi.linode.com";

/// `n` volumes of the driver already in `space`.
fn with_volumes(seed: Seed, space: u64, n: usize) -> Seed {
    (0..n).fold(seed, |s, i| {
        s.with_filesystem(
            FilesystemSeed::new(space, &format!("pvc-{space}-{i:04}"), REGION).tag(MARK),
        )
    })
}

/// What `f` cost, by `METHOD endpoint template`.
fn cost<T>(env: &Env, f: impl FnOnce() -> T) -> (T, BTreeMap<String, u64>) {
    env.linode.clear_requests();
    let out = f();
    (out, env.linode.request_counts())
}

fn counts(pairs: &[(&str, u64)]) -> BTreeMap<String, u64> {
    pairs.iter().map(|(k, n)| (k.to_string(), *n)).collect()
}

/// Every page of a walk from `token`, `per_page` at a time, with `between`
/// run after each page; the volume ids in the order served.
fn walk_from(env: &Env, token: &str, per_page: i32, mut between: impl FnMut(usize)) -> Vec<String> {
    let mut seen = Vec::new();
    let mut token = token.to_string();
    for page in 0.. {
        let resp = list(env, per_page, &token).unwrap();
        assert!(resp.entries.len() <= per_page as usize);
        seen.extend(ids(&resp));
        if resp.next_token.is_empty() {
            break;
        }
        token = resp.next_token;
        between(page);
    }
    seen
}

fn kill_and_restart(env: &mut Env) {
    env.driver.kill();
    env.restart();
}

#[test]
fn each_listing_shape_costs_one_list_per_space_page_at_most() {
    let mut env = Setup::new()
        .seed(|s| {
            with_volumes(
                with_volumes(s.with_space(SpaceSeed::new(8, "second")), SPACE, 250),
                8,
                50,
            )
        })
        .start();
    // Pages of 100 from the API: three lists for Space 7, one for Space 8.
    env.linode.set_page_size(Some(100));
    // The Spaces' mTLS modes are read once per SPACE_CACHE_TTL: not here.
    list(&env, 0, "").unwrap();
    let one_listing = counts(&[
        ("GET nfs/spaces", 1),
        ("GET nfs/spaces/{id}/filesystems", 4),
    ]);

    let (all, full) = cost(&env, || ids(&list(&env, 0, "").unwrap()));
    assert_eq!(all.len(), 300);
    assert_eq!(full, one_listing, "a full listing");

    let (walked, walk) = cost(&env, || walk_from(&env, "", 40, |_| {}));
    assert_eq!(walked, all, "eight pages, each volume once, in order");
    assert_eq!(
        walk, one_listing,
        "a walk: its first page lists, the rest cost nothing"
    );

    // A token no kept listing handed out (never handed out, or by a
    // process gone since): a fresh listing from there.
    let (rest, unissued) = cost(&env, || ids(&list(&env, 0, &all[150]).unwrap()));
    assert_eq!(rest, all[150..]);
    assert_eq!(unissued, one_listing);
    let first = list(&env, 100, "").unwrap();
    assert_eq!(
        first.next_token, all[100],
        "a token is the next volume's id"
    );
    kill_and_restart(&mut env);
    list(&env, 0, "").unwrap();
    let (rest, after_restart) = cost(&env, || walk_from(&env, &first.next_token, 100, |_| {}));
    assert_eq!(rest, all[100..], "the token outlives its listing");
    assert_eq!(after_restart, one_listing);
}

#[test]
fn a_walk_neither_repeats_nor_skips_what_existed_throughout() {
    let mut env = Setup::new().seed(|s| with_volumes(s, SPACE, 30)).start();
    let before = ids(&list(&env, 0, "").unwrap());
    let mut made = 0;
    let mut deleted: BTreeSet<String> = BTreeSet::new();
    // Between pages: a volume made, one already served deleted and one
    // not served yet deleted.
    let mut churn = |env: &Env, page: usize| {
        env.create_ok(&format!("churn-{made}"));
        made += 1;
        for victim in [&before[page * 4], &before[29 - page]] {
            if deleted.insert(victim.clone()) {
                env.delete(victim).unwrap();
            }
        }
    };
    let check = |walked: &[String], deleted: &BTreeSet<String>| {
        let unique: BTreeSet<&String> = walked.iter().collect();
        assert_eq!(unique.len(), walked.len(), "nothing twice: {walked:?}");
        for id in before.iter().filter(|id| !deleted.contains(*id)) {
            assert!(
                unique.contains(id),
                "{id} existed throughout but was skipped"
            );
        }
        let mut sorted = walked.to_vec();
        sorted.sort_by_key(|id| ids_of(id));
        assert_eq!(sorted, walked, "in volume id order");
    };
    let walked = walk_from(&env, "", 4, |page| churn(&env, page));
    check(&walked, &deleted);

    // The same across a restart between pages: every later page comes
    // from a fresh listing at its token.
    let now = ids(&list(&env, 0, "").unwrap());
    let first = list(&env, 4, "").unwrap();
    kill_and_restart(&mut env);
    let gone = now[6].clone();
    env.delete(&gone).unwrap();
    let made_after = env.create_ok("after-restart").volume_id;
    let mut walked = ids(&first);
    walked.extend(walk_from(&env, &first.next_token, 4, |_| {}));
    let unique: BTreeSet<&String> = walked.iter().collect();
    assert_eq!(unique.len(), walked.len(), "nothing twice: {walked:?}");
    for id in now.iter().filter(|id| **id != gone) {
        assert!(
            unique.contains(id),
            "{id} existed throughout but was skipped"
        );
    }
    assert!(
        !unique.contains(&gone),
        "a fresh listing does not show what is gone"
    );
    assert!(
        unique.contains(&made_after),
        "a fresh listing shows what is new"
    );
}

/// Published nodes by volume, as ListVolumes reports them.
fn published(env: &Env) -> BTreeMap<String, Vec<String>> {
    published_by_volume(&list(env, 0, "").unwrap().entries)
}

fn get_volume_nodes(env: &Env, volume_id: &str) -> Vec<String> {
    env.get_volume(volume_id)
        .unwrap()
        .status
        .unwrap()
        .published_node_ids
}

const POLICY_GET: &str = "GET nfs/spaces/{id}/filesystems/{id}/access-policy";

#[test]
fn published_nodes_follow_publishes_and_unpublishes_and_a_restart_reads_them_again() {
    let mut env = Setup::new()
        .node_mode()
        .seed(|s| with_nodes(with_volumes(s, SPACE, 5), [1001, 1002]))
        .start();
    let (first, read) = cost(&env, || published(&env));
    let vols: Vec<String> = first.keys().cloned().collect();
    assert!(first.values().all(Vec::is_empty));
    assert_eq!(read.get(POLICY_GET), Some(&5), "never read: read once each");
    let (_, again) = cost(&env, || published(&env));
    assert_eq!(again.get(POLICY_GET), None, "known now: {again:?}");

    env.publish(&vols[0], "1001").unwrap();
    env.publish(&vols[0], "1002").unwrap();
    env.publish(&vols[3], "1002").unwrap();
    let expect = |pairs: &[(usize, &[&str])]| -> BTreeMap<String, Vec<String>> {
        let mut want: BTreeMap<String, Vec<String>> =
            vols.iter().map(|v| (v.clone(), Vec::new())).collect();
        for (i, nodes) in pairs {
            want.insert(
                vols[*i].clone(),
                nodes.iter().map(|n| n.to_string()).collect(),
            );
        }
        want
    };
    let (now, listing) = cost(&env, || published(&env));
    assert_eq!(now, expect(&[(0, &["1001", "1002"]), (3, &["1002"])]));
    assert_eq!(
        listing.get(POLICY_GET),
        None,
        "the publishes wrote what the listing shows"
    );
    let (nodes, get) = cost(&env, || get_volume_nodes(&env, &vols[3]));
    assert_eq!(nodes, ["1002"]);
    assert_eq!(
        get.get(POLICY_GET),
        None,
        "ControllerGetVolume too: {get:?}"
    );

    env.unpublish(&vols[0], "1001").unwrap();
    env.unpublish(&vols[3], "1002").unwrap();
    // Nothing to revoke: still what is known.
    env.unpublish(&vols[4], "1001").unwrap();
    let (now, listing) = cost(&env, || published(&env));
    assert_eq!(now, expect(&[(0, &["1002"])]));
    assert_eq!(listing.get(POLICY_GET), None);

    kill_and_restart(&mut env);
    let (after, read) = cost(&env, || published(&env));
    assert_eq!(after, now, "the same, read from the backend");
    assert_eq!(
        read.get(POLICY_GET),
        Some(&5),
        "an empty cache reads each once"
    );
    let (_, again) = cost(&env, || published(&env));
    assert_eq!(again.get(POLICY_GET), None);
}

/// An ACL edited by hand: what the controller knows, until the entry is
/// older than ACL_CACHE_MAX_AGE and is read again; a read again that fails
/// reports what was read last, never nothing.
#[test]
fn a_hand_edit_shows_once_the_entry_is_older_than_its_max_age() {
    let env = Setup::new()
        .node_mode()
        .env("ACL_CACHE_MAX_AGE", "1s")
        .seed(|s| with_nodes(s, [1001, 1002]))
        .start();
    let v = env.create_ok("edited").volume_id;
    env.publish(&v, "1001").unwrap();
    env.publish(&v, "1002").unwrap();
    let fs = ids_of(&v).1;
    let edit = |ids: Vec<u64>| {
        env.someone_else()
            .put_filesystem_access_policy(
                SPACE,
                fs,
                &FilesystemAccessPolicyUpdate {
                    label: "edited".into(),
                    enabled: true,
                    linode_ids: ids,
                    squash_policy: SquashPolicy::RootSquash,
                    protocols: vec!["nfsv4".into()],
                },
            )
            .unwrap()
    };
    edit(vec![1002]);
    wait_for("the hand edit listed", Duration::from_secs(20), || {
        published(&env)[&v] == ["1002"]
    });
    assert_eq!(get_volume_nodes(&env, &v), ["1002"]);

    // The policy cannot be read: the last read is reported.
    edit(vec![]);
    env.linode
        .inject(FaultRule::status("GET", FS_POLICY, 500).times(1000));
    wait_for("a read again", Duration::from_secs(20), || {
        let (now, tried) = cost(&env, || published(&env));
        assert_eq!(now[&v], ["1002"], "as last read");
        tried.contains_key(POLICY_GET)
    });
    env.linode.clear_faults();
    wait_for("the second edit listed", Duration::from_secs(20), || {
        published(&env)[&v].is_empty()
    });
}

#[test]
fn a_zero_max_age_reads_every_policy_for_every_listing() {
    let env = Setup::new()
        .node_mode()
        .env("ACL_CACHE_MAX_AGE", "0s")
        .seed(|s| with_volumes(s, SPACE, 3))
        .start();
    for _ in 0..2 {
        let (_, read) = cost(&env, || published(&env));
        assert_eq!(read.get(POLICY_GET), Some(&3));
    }
}
