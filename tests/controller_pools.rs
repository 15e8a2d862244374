//! Pools of shared filesystems the driver runs (`shared-filesystem-pool`),
//! through the real binary in the controller role, in a mount namespace of
//! its own, against the fake Linode API over loopback. The
//! `NFS_MOUNT_HELPER` stand-in exports every filesystem the fake makes as a
//! directory of the test. Each test checks the backend: which filesystems
//! exist, with which tags, holding which volumes.

mod common;

use common::controller::*;
use common::requests::*;
use common::rpc::*;
use common::subdir::{mounting, GIB, P_TYPE};
use common::{share, wait_for, TempDir, CLUSTER_ID, CLUSTER_TAG};
use grpcio::RpcStatusCode as Code;
use linode_nfs_csi::build_info::DRIVER_NAME;
use linode_nfs_csi::fake::{FakeMetadata, FakeStorageClass, FilesystemSeed, Lifecycle};
use linode_nfs_csi::linode::{CloneFilesystem, Cloud, Filesystem, NewFilesystem, Status};
use linode_nfs_csi::proto::csi;
use std::collections::BTreeMap;
use std::path::PathBuf;
use std::time::Duration;

const P_POOL: &str = "linodenfs.csi.linode.com/shared-filesystem-pool";
const P_POOL_SIZE: &str = "linodenfs.csi.linode.com/pool-filesystem-size";
const P_POOL_MAX: &str = "linodenfs.csi.linode.com/pool-max-filesystems";
const P_POOL_SPARES: &str = "linodenfs.csi.linode.com/pool-spares";
const ADMIN: &str = "admin-share";
const VOLUME_MARK: &str = "csi.linodenfs.csi.linode.com";
const PATIENCE: Duration = Duration::from_secs(60);

struct PoolWorld {
    env: Env,
    helper_dir: TempDir,
    _shares: TempDir,
}

fn pool_world(setup: impl FnOnce(Setup) -> Setup) -> PoolWorld {
    let helper_dir = TempDir::new("pool-helper");
    let shares = TempDir::new("pool-shares");
    let helper = share::install_creating_bind_helper(helper_dir.path());
    let base = mounting(
        Setup::new().seed(|s| s.with_filesystem(FilesystemSeed::new(SPACE, ADMIN, REGION))),
        &helper,
        shares.path(),
    );
    PoolWorld {
        env: setup(base).start(),
        helper_dir,
        _shares: shares,
    }
}

fn class(pool: &str, extra: &[(&'static str, &str)]) -> Vec<(&'static str, String)> {
    let mut p = by_id();
    p.push((P_TYPE, "subdirectory".into()));
    p.push((P_POOL, pool.into()));
    p.extend(extra.iter().map(|(k, v)| (*k, v.to_string())));
    p
}

fn request(name: &str, size: i64, class: &[(&'static str, String)]) -> csi::CreateVolumeRequest {
    with_capacity(volume_req(name, class), size, 0)
}

impl PoolWorld {
    fn create(
        &self,
        name: &str,
        size: i64,
        class: &[(&'static str, String)],
    ) -> grpcio::Result<csi::Volume> {
        self.env
            .create(&request(name, size, class))
            .map(|r| r.volume.unwrap())
    }

    /// The live filesystems of `pool`, by id.
    fn pool(&self, pool: &str) -> Vec<Filesystem> {
        let tag = format!("csi-pool.{pool}");
        let mut all: Vec<Filesystem> = self
            .env
            .live_filesystems()
            .into_iter()
            .filter(|fs| fs.tags.contains(&tag))
            .collect();
        all.sort_by_key(|fs| fs.id);
        all
    }

    fn export(&self, fs: &Filesystem) -> PathBuf {
        let target = fs.mount_target_fqdn.clone().expect("a mount target");
        share::export_dir(self.helper_dir.path(), &target)
    }

    fn modify(
        &self,
        id: &str,
        pairs: &[(&str, &str)],
    ) -> grpcio::Result<csi::ControllerModifyVolumeResponse> {
        self.env
            .client
            .controller_modify_volume(&modify_req(id, pairs))
    }

    /// GetCapacity of `class`.
    fn capacity(&self, class: &[(&'static str, String)]) -> i64 {
        let mut req = csi::GetCapacityRequest::new();
        req.parameters = params(class.iter().map(|(k, v)| (*k, v.clone())));
        self.env
            .client
            .get_capacity(&req)
            .unwrap()
            .available_capacity
    }

    fn pool_posts(&self) -> usize {
        self.env.linode.calls("POST", "nfs/spaces/*/filesystems")
    }

    /// The methods of the requests sent for pool filesystem `fs`'s access
    /// policy, in order.
    fn policy_calls(&self, fs: u64) -> Vec<String> {
        let path = format!("nfs/spaces/{SPACE}/filesystems/{fs}/access-policy");
        self.env
            .linode
            .requests()
            .into_iter()
            .filter(|r| r.path == path)
            .map(|r| r.method)
            .collect()
    }

    /// A pool filesystem this controller made is made ready by one PUT,
    /// with no read of its policy before it (it is the one it was made with).
    #[track_caller]
    fn readied_by_one_put(&self, fs: u64) {
        let calls = self.policy_calls(fs);
        assert_eq!(calls.first().map(String::as_str), Some("PUT"), "{calls:?}");
        assert_eq!(calls.iter().filter(|m| *m == "PUT").count(), 1, "{calls:?}");
    }

    fn admin_is_untouched(&self) {
        let admin = self.env.filesystem(ADMIN);
        assert_eq!(admin.status, Status::Active);
        assert!(admin.tags.is_empty(), "{:?}", admin.tags);
    }
}

/// The filesystem a directory volume's id names.
fn fs_of(volume_id: &str) -> u64 {
    volume_id.split('/').nth(1).unwrap().parse().unwrap()
}

/// The pool filesystem each volume id names, counted.
fn per_filesystem(ids: &[String]) -> BTreeMap<u64, usize> {
    let mut count = BTreeMap::new();
    for id in ids {
        *count.entry(fs_of(id)).or_default() += 1;
    }
    count
}

#[test]
fn a_pool_grows_one_filesystem_at_a_time_packs_volumes_and_stops_at_its_bound() {
    let w = pool_world(|s| s);
    let small = class("small", &[(P_POOL_SIZE, "3Gi"), (P_POOL_MAX, "2")]);
    assert_eq!(w.capacity(&small), 6 * GIB, "two filesystems it may make");

    // Four creates at once: they wait for one new filesystem, then the one
    // that does not fit on it waits for one more.
    let creates: Vec<_> = (0..4)
        .map(|i| {
            let (client, req) = (
                w.env.client.clone(),
                request(&format!("pvc-{i}"), GIB, &small),
            );
            std::thread::spawn(move || client.create_volume(&req))
        })
        .collect();
    let mut ids: Vec<String> = creates
        .into_iter()
        .map(|t| t.join().unwrap().unwrap().volume.unwrap().volume_id)
        .collect();
    assert_eq!(w.pool_posts(), 2, "one filesystem at a time, one per need");
    let pool = w.pool("small");
    let labels: Vec<&str> = pool.iter().map(|fs| fs.label.as_str()).collect();
    let label = |n: u32| format!("csi-pool-{CLUSTER_ID}-small-{n}");
    assert_eq!(labels, [label(1), label(2)]);
    for fs in &pool {
        assert!(fs.tags.contains(&"csi-pool".to_string()), "{:?}", fs.tags);
        assert!(
            !fs.tags.contains(&VOLUME_MARK.to_string()),
            "never the volume mark"
        );
        assert_eq!(fs.max_capacity_bytes, Some(3 * GIB));
        assert_eq!(w.env.squash(fs.id), "none");
        w.readied_by_one_put(fs.id);
    }
    assert_eq!(
        per_filesystem(&ids),
        BTreeMap::from([(pool[0].id, 3), (pool[1].id, 1)]),
        "packed onto the fullest that fits"
    );
    assert_eq!(
        w.capacity(&small),
        2 * GIB,
        "the second's room, none to make"
    );

    // Two more fit on the second; the one after finds the pool full.
    for i in 4..6 {
        ids.push(
            w.create(&format!("pvc-{i}"), GIB, &small)
                .unwrap()
                .volume_id,
        );
    }
    assert_eq!(per_filesystem(&ids)[&pool[1].id], 3);
    assert_eq!(w.capacity(&small), 0);
    let full = w.create("pvc-6", GIB, &small).unwrap_err();
    assert_eq!(code_of(&full), Code::RESOURCE_EXHAUSTED);
    let message = format!("{full:?}");
    for part in [
        "pool \\\"small\\\"",
        "2 of its 2 filesystems",
        "0 bytes left",
    ] {
        assert!(message.contains(part), "{part} in {message}");
    }
    assert_eq!(w.pool_posts(), 2, "no filesystem past the bound");

    // A repeat lands where its volume is; a volume larger than a pool
    // filesystem, or grown past its filesystem's room, is out of range.
    let again = w.create("pvc-0", GIB, &small).unwrap();
    assert_eq!(
        again.volume_id,
        ids[..4]
            .iter()
            .find(|id| id.ends_with("/pvc-0"))
            .unwrap()
            .as_str()
    );
    assert_eq!(
        err_code(w.create("pvc-big", 4 * GIB, &small)),
        Code::OUT_OF_RANGE
    );
    let grown = w
        .env
        .client
        .controller_expand_volume(&expand_req(&ids[4], 2 * GIB));
    assert_eq!(err_code(grown), Code::OUT_OF_RANGE);

    // No whole-filesystem RPC acts on a pool filesystem, and none is
    // listed as a volume.
    let whole = format!("{SPACE}/{}", pool[0].id);
    assert_eq!(err_code(w.env.delete(&whole)), Code::FAILED_PRECONDITION);
    assert_eq!(
        err_code(w.env.snapshot("snap-whole", &whole)),
        Code::FAILED_PRECONDITION
    );
    assert_eq!(
        err_code(w.modify(&whole, &[("linodenfs.csi.linode.com/tags", "x")])),
        Code::FAILED_PRECONDITION
    );
    assert_eq!(w.pool("small").len(), 2, "{:?}", w.env.live_filesystems());
    let mut listed = w.env.listed_volume_ids();
    listed.sort();
    ids.sort();
    assert_eq!(listed, ids);

    for id in &ids {
        w.env.delete(id).unwrap();
    }
    assert!(w.env.linode.quotas().iter().all(|q| q.is_root));
    assert_eq!(w.pool("small").len(), 2, "no upkeep here: nothing pruned");
    w.admin_is_untouched();
}

/// With `pool-spares: 1` the pool makes its next filesystem while
/// placements use up the ones it has: a single create now and then never
/// makes more than the spare, and a burst on the warm pool never waits for
/// a new filesystem (the driver logs each create that does).
#[test]
fn a_burst_on_a_warm_pool_never_waits_for_a_new_filesystem() {
    let w = pool_world(|s| s);
    let spare = class(
        "spare",
        &[
            (P_POOL_SIZE, "3Gi"),
            (P_POOL_MAX, "6"),
            (P_POOL_SPARES, "1"),
        ],
    );
    let parked = || {
        w.env
            .driver
            .logs()
            .matches("waits for new pool filesystem")
            .count()
    };
    // GetCapacity counts a filesystem's room once the driver has it ready
    // for placements (a filesystem being made counts as one it may make).
    let ready_with = |bytes: i64| {
        wait_for("the filesystem made ahead to be ready", PATIENCE, || {
            w.capacity(&spare) == bytes
        })
    };
    // Cold: the first create waits for the first filesystem; the second is
    // made ahead at once, as the spare.
    w.create("pvc-0", GIB, &spare).unwrap();
    ready_with(2 * GIB + 3 * GIB + 4 * 3 * GIB);
    let cold = parked();
    // One by one, the first filesystem fills; the spare stays the spare.
    for i in 1..3 {
        w.create(&format!("pvc-{i}"), GIB, &spare).unwrap();
    }
    assert_eq!(
        w.pool("spare").len(),
        2,
        "a trickle makes no more than the spare"
    );
    // Two bursts of a filesystem's worth: each fills the spare while the
    // next is made, and none waits.
    for burst in 0..2 {
        let creates: Vec<_> = (0..3)
            .map(|i| {
                let (client, req) = (
                    w.env.client.clone(),
                    request(&format!("pvc-burst-{burst}-{i}"), GIB, &spare),
                );
                std::thread::spawn(move || client.create_volume(&req))
            })
            .collect();
        for c in creates {
            c.join().unwrap().unwrap();
        }
        ready_with(3 * GIB + (6 - 3 - burst) * 3 * GIB);
    }
    assert_eq!(
        parked(),
        cold,
        "a create of a burst waited: {}",
        w.env.driver.logs()
    );
    assert_eq!(w.pool_posts(), 4);
}

#[test]
fn empty_pool_filesystems_are_pruned_after_their_grace_and_spares_kept_across_a_crash() {
    let mut w = pool_world(|s| {
        s.env("MAINTENANCE_INTERVAL", "100ms")
            .env("POOL_EMPTY_GRACE", "2s")
    });
    let warm = class(
        "warm",
        &[
            (P_POOL_SIZE, "3Gi"),
            (P_POOL_MAX, "3"),
            (P_POOL_SPARES, "1"),
        ],
    );
    let parameters: Vec<(&str, &str)> = warm.iter().map(|(k, v)| (*k, v.as_str())).collect();
    w.env
        .kube
        .add_storage_class(FakeStorageClass::new("warm", DRIVER_NAME, &parameters));
    let active = |w: &PoolWorld, n: usize| {
        let pool = w.pool("warm");
        pool.len() == n && pool.iter().all(|fs| fs.status == Status::Active)
    };
    wait_for("the spare", PATIENCE, || active(&w, 1));
    let spare = w.pool("warm")[0].clone();

    // A create takes the spare at once; the upkeep makes the next one.
    let v = w.create("pvc-a", GIB, &warm).unwrap();
    assert_eq!(fs_of(&v.volume_id), spare.id);
    wait_for("a new spare", PATIENCE, || active(&w, 2));
    assert_eq!(w.pool_posts(), 2);
    let second = w.pool("warm")[1].clone();

    // Data of anyone's on a pool filesystem keeps it, empty of volumes or
    // not. Written once the volume is gone: with both in use for a
    // moment, a round in between would rightly make a spare.
    w.env.delete(&v.volume_id).unwrap();
    std::fs::write(w.export(&second).join("notes"), "mine").unwrap();
    wait_for("the first to be empty", PATIENCE, || {
        std::fs::read_dir(w.export(&spare).join("csi-volumes"))
            .map(|d| d.flatten().all(|e| e.file_name() == ".owners"))
            .unwrap_or(false)
    });
    // Nothing to await: that it is not pruned, over several grace periods.
    std::thread::sleep(Duration::from_secs(5));
    assert_eq!(
        w.pool("warm").len(),
        2,
        "a filesystem holding a file is kept"
    );
    assert!(w
        .pool("warm")
        .iter()
        .all(|fs| !fs.tags.iter().any(|t| t.starts_with("csi-pool-empty."))));

    // Once empty it is tagged; the grace survives a crash; then it goes.
    std::fs::remove_file(w.export(&second).join("notes")).unwrap();
    wait_for("the empty mark", PATIENCE, || {
        w.pool("warm").iter().any(|fs| {
            fs.id == second.id && fs.tags.iter().any(|t| t.starts_with("csi-pool-empty."))
        })
    });
    w.env.driver.kill();
    let first_logs = w.env.driver.logs();
    w.env.restart();
    wait_for("the prune", PATIENCE, || {
        w.pool("warm").iter().map(|fs| fs.id).collect::<Vec<_>>() == [spare.id]
    });
    std::thread::sleep(Duration::from_millis(500));
    if w.pool_posts() != 2 {
        for l in w
            .env
            .driver
            .logs()
            .lines()
            .filter(|l| !l.contains("DEBUG") || l.contains("POST") || l.contains("PUT"))
        {
            eprintln!("LOG {l}");
        }
    }
    std::thread::sleep(Duration::from_millis(500));
    if w.pool_posts() != 2 {
        for l in first_logs
            .lines()
            .filter(|l| !l.contains("DEBUG") || l.contains("POST") || l.contains("PUT"))
        {
            eprintln!("LOG1 {l}");
        }
    }
    std::thread::sleep(Duration::from_millis(500));
    if w.pool_posts() != 2 {
        for l in first_logs.lines() {
            eprintln!("LOG1 {l}");
        }
    }
    assert_eq!(w.pool_posts(), 2, "the oldest empty one stays the spare");
    w.admin_is_untouched();
}

#[test]
fn the_upkeep_deletes_temporary_filesystems_no_restore_holds() {
    let w = pool_world(|s| s.env("MAINTENANCE_INTERVAL", "100ms"));
    let parameters = [
        ("linodenfs.csi.linode.com/space-id", "7"),
        (P_TYPE, "subdirectory"),
        ("linodenfs.csi.linode.com/shared-filesystem-label", ADMIN),
    ];
    w.env
        .kube
        .add_storage_class(FakeStorageClass::new("shared", DRIVER_NAME, &parameters));
    // What a restore killed mid-copy leaves: a clone tagged as a restore's
    // source, held by no restore of the running controller.
    let admin = w.env.filesystem(ADMIN);
    let other = w.env.someone_else();
    let snap = other
        .create_snapshot(SPACE, admin.id, "left-behind", &[])
        .unwrap();
    let label = format!("csi-restore-{}-{}", admin.id, snap.id);
    other
        .clone_snapshot(
            SPACE,
            admin.id,
            snap.id,
            &CloneFilesystem {
                label: label.clone(),
                region: REGION.into(),
                space_id: Some(SPACE),
                size_gib: None,
                tags: vec!["csi-restore-source".into(), CLUSTER_TAG.into()],
            },
        )
        .unwrap();
    // Never this cluster's to delete: one without a restore's tag, one a
    // driver made before clusters had identities, another cluster's.
    let kept = [
        ("csi-restore-not-ours".to_string(), vec![]),
        (
            format!("csi-restore-{}-900001", admin.id),
            vec!["csi-restore-source"],
        ),
        (
            format!("csi-restore-{}-900002", admin.id),
            vec!["csi-restore-source", "csi-cluster.staging"],
        ),
    ];
    for (label, tags) in &kept {
        let fs = NewFilesystem {
            label: label.clone(),
            region: REGION.into(),
            max_capacity_bytes: GIB,
            tags: tags.iter().map(|t| t.to_string()).collect(),
        };
        other.create_filesystem(SPACE, &fs).unwrap();
    }
    // One sweep considers every temporary of the Space: once it deleted
    // this cluster's orphan, it has passed the others by.
    wait_for("the orphan's delete", PATIENCE, || {
        !w.env.live_filesystems().iter().any(|fs| fs.label == label)
    });
    for (label, _) in &kept {
        assert!(
            w.env.live_filesystems().iter().any(|fs| fs.label == *label),
            "{label} was deleted"
        );
    }
    w.admin_is_untouched();
}

#[test]
fn node_mode_admits_the_controller_to_the_pool_filesystems_it_makes() {
    const OWN: u64 = 5150;
    let metadata = FakeMetadata::start(OWN, REGION).unwrap();
    let w = pool_world(|s| {
        s.node_mode()
            .seed(|seed| with_nodes(seed, [1001, OWN]))
            .env("METADATA_URL", &metadata.url())
    });
    let v = w.create("pvc-a", GIB, &class("nodes", &[])).unwrap();
    let fs = fs_of(&v.volume_id);
    let policy = w.env.linode.filesystem_policy(fs).unwrap();
    assert_eq!(policy.linode_ids(), [OWN]);
    assert_eq!(policy.squash_policy.unwrap().as_str(), "none");
    // The squash policy and the controller's own Linode went in one PUT.
    w.readied_by_one_put(fs);
    // Publishing a volume admits its node beside the controller.
    w.env.publish(&v.volume_id, "1001").unwrap();
    let mut ids = w.env.linode.filesystem_policy(fs).unwrap().linode_ids();
    ids.sort();
    assert_eq!(ids, [1001, OWN]);
    // Unpublishing revokes the node, but never the controller's own Linode,
    // even when a pod on the controller's node had the volume.
    let own = OWN.to_string();
    w.env.publish(&v.volume_id, &own).unwrap();
    for node in ["1001", own.as_str()] {
        w.env.unpublish(&v.volume_id, node).unwrap();
    }
    let policy = w.env.linode.filesystem_policy(fs).unwrap();
    assert_eq!(policy.linode_ids(), [OWN]);
}

#[test]
fn a_name_taken_on_one_pool_filesystem_by_someone_else_goes_to_another() {
    let w = pool_world(|s| s);
    let small = class("small", &[(P_POOL_SIZE, "3Gi"), (P_POOL_MAX, "2")]);
    let a = w.create("pvc-a", GIB, &small).unwrap();
    let first = w.pool("small")[0].clone();
    assert_eq!(fs_of(&a.volume_id), first.id);
    // Someone's own directory where pvc-b's would go, with room to spare.
    let theirs = w.export(&first).join("csi-volumes/pvc-b");
    std::fs::create_dir_all(&theirs).unwrap();
    std::fs::write(theirs.join("keep"), "mine").unwrap();
    let b = w.create("pvc-b", GIB, &small).unwrap();
    let pool = w.pool("small");
    assert_eq!(pool.len(), 2);
    assert_eq!(fs_of(&b.volume_id), pool[1].id);
    assert_eq!(
        std::fs::read_to_string(theirs.join("keep")).unwrap(),
        "mine"
    );
    // Its repeat finds it there, and its delete leaves theirs alone.
    assert_eq!(w.create("pvc-b", GIB, &small).unwrap(), b);
    w.env.delete(&b.volume_id).unwrap();
    assert_eq!(
        std::fs::read_to_string(theirs.join("keep")).unwrap(),
        "mine"
    );
}

#[test]
fn a_pool_filesystem_whose_creation_fails_is_deleted_and_made_again() {
    let w = pool_world(|s| s.env("MAINTENANCE_INTERVAL", "100ms"));
    let broken = class("broken", &[(P_POOL_MAX, "1")]);
    let broken_label = format!("csi-pool-{CLUSTER_ID}-broken-1");
    w.env
        .linode
        .set_filesystem_lifecycle(&broken_label, Lifecycle::StickInError);
    let failed = w.create("pvc-a", GIB, &broken).unwrap_err();
    assert_eq!(code_of(&failed), Code::UNAVAILABLE, "{failed:?}");
    wait_for("the failed filesystem's delete", PATIENCE, || {
        w.pool("broken").is_empty()
    });
    // With it gone the pool is below its bound again.
    w.env
        .linode
        .set_filesystem_lifecycle(&broken_label, Lifecycle::Normal);
    let v = w.create("pvc-a", GIB, &broken).unwrap();
    assert_eq!(w.pool_posts(), 2);
    assert_eq!(w.pool("broken")[0].id, fs_of(&v.volume_id));
}

#[test]
fn without_a_metadata_service_the_controller_finds_its_linode_through_its_node() {
    const OWN: u64 = 6160;
    let w = pool_world(|s| {
        s.node_mode()
            .seed(|seed| with_nodes(seed, [OWN]))
            .nodes(vec![
                worker("controller-node", REGION).provider_id(&format!("linode://{OWN}"))
            ])
            // Nothing listens there: the metadata service is out of reach.
            .env("METADATA_URL", "http://127.0.0.1:9")
            .env("NODE_NAME", "controller-node")
    });
    let v = w.create("pvc-a", GIB, &class("nodes", &[])).unwrap();
    let policy = w.env.linode.filesystem_policy(fs_of(&v.volume_id)).unwrap();
    assert_eq!(policy.linode_ids(), [OWN]);
}

#[test]
fn without_either_the_create_says_why() {
    let w = pool_world(|s| s.node_mode().env("METADATA_URL", "http://127.0.0.1:9"));
    let failed = w.create("pvc-a", GIB, &class("nodes", &[])).unwrap_err();
    let message = format!("{failed:?}");
    assert!(
        message.contains("own Linode") && message.contains("NODE_NAME"),
        "{message}"
    );
    // The pool filesystem it made waits for the retry (or the prune).
    assert_eq!(w.pool("nodes").len(), 1);
}

/// Pools trust no tags alone (issue 35). A filesystem with the pool's tags
/// but not this cluster's (made by hand, by another cluster, or by a
/// driver before identities) and full of someone's data is never a member;
/// a filesystem holding the label of the pool's next member never stops
/// the pool from growing; and a member whose root quota reports data no
/// quota promises has only the rest as room.
#[test]
fn look_alikes_are_never_members_and_never_stop_growth() {
    let w = pool_world(|s| {
        s.env("MAINTENANCE_INTERVAL", "1s").seed(|mut seed| {
            seed.unique_filesystem_labels = true;
            seed
        })
    });
    let small = class("small", &[(P_POOL_SIZE, "3Gi"), (P_POOL_MAX, "3")]);
    let other = w.env.someone_else();
    let make = |label: &str, tags: &[&str]| {
        let fs = NewFilesystem {
            label: label.into(),
            region: REGION.into(),
            max_capacity_bytes: 3 * GIB,
            tags: tags.iter().map(|t| t.to_string()).collect(),
        };
        other.create_filesystem(SPACE, &fs).unwrap()
    };
    let tagged = make("squatter", &["csi-pool", "csi-pool.small"]);
    let foreign = make(
        "theirs",
        &["csi-pool", "csi-pool.small", "csi-cluster.staging"],
    );
    let first_label = format!("csi-pool-{CLUSTER_ID}-small-1");
    let labelled = make(&first_label, &[]);
    for fs in [&tagged, &foreign] {
        assert!(w.env.linode.set_unquoted_usage(fs.id, 2 * GIB + GIB / 2));
    }
    wait_for("the look-alikes to be active", PATIENCE, || {
        w.env
            .live_filesystems()
            .iter()
            .filter(|fs| [tagged.id, foreign.id, labelled.id].contains(&fs.id))
            .all(|fs| fs.status == Status::Active)
    });
    // The pool grows past the taken label, onto a filesystem of its own.
    let a = w.create("pvc-a", GIB, &small).unwrap();
    let pool = w.pool("small");
    let members: Vec<u64> = pool
        .iter()
        .filter(|fs| fs.tags.contains(&CLUSTER_TAG.to_string()))
        .map(|fs| fs.id)
        .collect();
    assert_eq!(members.len(), 1, "{pool:?}");
    assert_eq!(fs_of(&a.volume_id), members[0]);
    let mine = w.env.filesystem(&format!("csi-pool-{CLUSTER_ID}-small-2"));
    assert_eq!(mine.id, members[0]);
    // Someone's 2.5 GiB lands on the member behind the driver's back: of
    // its 3 GiB, 1 GiB is promised to pvc-a and 2.5 GiB used, so once the
    // member's account is read again (at most MAINTENANCE_INTERVAL later)
    // the next volume needs a new filesystem; nothing is ever placed on
    // the look-alikes.
    assert!(w.env.linode.set_unquoted_usage(mine.id, 2 * GIB + GIB / 2));
    let listed = || {
        w.env.linode.calls(
            "GET",
            &format!("nfs/spaces/*/filesystems/{}/quotas", mine.id),
        )
    };
    let before = listed();
    wait_for("the member's account to be read again", PATIENCE, || {
        listed() > before
    });
    let b = w.create("pvc-b", GIB, &small).unwrap();
    assert_ne!(fs_of(&b.volume_id), mine.id);
    for id in [&a.volume_id, &b.volume_id] {
        assert!(
            ![tagged.id, foreign.id, labelled.id].contains(&fs_of(id)),
            "{id} was placed on a look-alike"
        );
    }
    // No quota was ever posted on a look-alike, and they are all there.
    for fs in [&tagged, &foreign, &labelled] {
        assert!(
            !w.env
                .linode
                .quotas()
                .iter()
                .any(|q| q.filesystem_id == fs.id && !q.is_root),
            "a quota on {}",
            fs.label
        );
        assert!(w.env.live_filesystems().iter().any(|l| l.id == fs.id));
    }
}

/// A directory-snapshot id is the caller's to write. One naming a
/// filesystem that is none of this cluster's parents (no class names it,
/// no pool of this cluster holds it, no volume of it was mounted here) is
/// not found, and the controller never mounts it to find out (issue 35).
#[test]
fn a_forged_directory_snapshot_id_is_not_found_and_mounts_nothing() {
    let w = pool_world(|s| s);
    let small = class("small", &[(P_POOL_SIZE, "3Gi")]);
    let other = w.env.someone_else();
    let foreign = other
        .create_filesystem(
            SPACE,
            &NewFilesystem {
                label: "finance-data".into(),
                region: REGION.into(),
                max_capacity_bytes: 3 * GIB,
                tags: Vec::new(),
            },
        )
        .unwrap();
    let theirs = other
        .create_filesystem(
            SPACE,
            &NewFilesystem {
                label: "staging-pool".into(),
                region: REGION.into(),
                max_capacity_bytes: 3 * GIB,
                tags: vec![
                    "csi-pool".into(),
                    "csi-pool.small".into(),
                    "csi-cluster.staging".into(),
                ],
            },
        )
        .unwrap();
    wait_for("both to be active", PATIENCE, || {
        w.env
            .live_filesystems()
            .iter()
            .filter(|fs| [foreign.id, theirs.id].contains(&fs.id))
            .all(|fs| fs.status == Status::Active)
    });
    let mount_point = |id: u64| w._shares.path().join(format!("{SPACE}-{id}"));
    for fs in [foreign.id, theirs.id] {
        let snap = other.create_snapshot(SPACE, fs, "cut", &[]).unwrap();
        let forged = format!("{SPACE}/{fs}/{}/pvc-anything", snap.id);
        let restore = from_snapshot(request("pvc-forged", GIB, &small), &forged);
        assert_code(w.env.create(&restore), Code::NOT_FOUND, "a forged restore");
        let listed = w
            .env
            .client
            .list_snapshots(&list_snapshots_req(&forged, ""))
            .unwrap();
        assert!(listed.entries.is_empty(), "{listed:?}");
        w.env
            .client
            .delete_snapshot(&delete_snapshot_req(&forged))
            .unwrap();
        assert!(
            !mount_point(fs).exists(),
            "filesystem {fs} was mounted for a forged id"
        );
    }
    w.admin_is_untouched();
}
