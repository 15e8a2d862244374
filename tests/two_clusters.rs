//! Two clusters on one Space (issue 35): two controller processes with
//! different identities on one fake backend, as staging and production
//! sharing a Storage Space. Each uses a pool of the same name, takes
//! snapshots of and restores volumes on one shared named parent, and
//! deletes what it made, with its upkeep running; every call of both
//! completes, neither lists, finds, sweeps, places into or rewrites the
//! other's objects or files, and the quotas promised on the shared parent
//! never exceed its capacity.

mod common;

use common::controller::*;
use common::requests::*;
use common::rpc::*;
use common::subdir::{mounting, P_SHARED_LABEL, P_TYPE};
use common::{share, wait_for, Driver, TempDir, CLUSTER_ID, CLUSTER_TAG};
use grpcio::RpcStatusCode as Code;
use linode_nfs_csi::dev::emulate_exports;
use linode_nfs_csi::dev::exports::Exports;
use linode_nfs_csi::fake::FilesystemSeed;
use linode_nfs_csi::proto::{csi, csi_grpc::ControllerClient};
use std::collections::BTreeSet;
use std::path::PathBuf;
use std::sync::Arc;
use std::time::Duration;

const PARENT: &str = "team-share";
const PARENT_BYTES: i64 = 10 << 30;
const GIB: i64 = 1 << 30;
const P_POOL: &str = "linodenfs.csi.linode.com/shared-filesystem-pool";
const P_POOL_SIZE: &str = "linodenfs.csi.linode.com/pool-filesystem-size";
const P_ON_DELETE: &str = "linodenfs.csi.linode.com/on-delete";
const STAGING: &str = "staging";
const PATIENCE: Duration = Duration::from_secs(60);

fn on_parent(name: &str, size: i64, on_delete: &str) -> csi::CreateVolumeRequest {
    let mut req = with_capacity(volume_req(name, &by_id()), size, 0);
    req.parameters.insert(P_TYPE.into(), "subdirectory".into());
    req.parameters.insert(P_SHARED_LABEL.into(), PARENT.into());
    req.parameters.insert(P_ON_DELETE.into(), on_delete.into());
    req
}

fn in_pool(name: &str) -> csi::CreateVolumeRequest {
    let mut req = with_capacity(volume_req(name, &by_id()), GIB, 0);
    req.parameters.insert(P_TYPE.into(), "subdirectory".into());
    req.parameters.insert(P_POOL.into(), "team".into());
    req.parameters.insert(P_POOL_SIZE.into(), "2Gi".into());
    req
}

fn create(client: &ControllerClient, req: &csi::CreateVolumeRequest) -> csi::Volume {
    retry(&SIDECAR, || client.create_volume(req))
        .unwrap_or_else(|e| panic!("CreateVolume {}: {e:?}", req.name))
        .volume
        .unwrap()
}

fn listed(client: &ControllerClient) -> BTreeSet<String> {
    listed_volume_ids(client).into_iter().collect()
}

fn snapshots_listed(client: &ControllerClient) -> BTreeSet<String> {
    listed_snapshot_ids(client).into_iter().collect()
}

/// The pool filesystem a directory volume's id names.
fn parent_of(volume_id: &str) -> u64 {
    volume_id.split('/').nth(1).unwrap().parse().unwrap()
}

/// Our controller and staging's on one fake backend with the shared
/// parent seeded, each mounting under a directory of its own, their
/// upkeep every `interval`.
struct Two {
    env: Env,
    staging: Driver,
    helper_dir: TempDir,
    _shares: [TempDir; 2],
}

fn two_clusters(interval: &str) -> Two {
    let helper_dir = TempDir::new("two-clusters-helper");
    let (shares, their_shares) = (
        TempDir::new("two-clusters-shares"),
        TempDir::new("two-clusters-their-shares"),
    );
    let helper = share::install_bind_helper(helper_dir.path());
    let setup = mounting(
        Setup::new().seed(|s| {
            s.with_filesystem(FilesystemSeed {
                max_capacity_bytes: PARENT_BYTES,
                ..FilesystemSeed::new(SPACE, PARENT, REGION)
            })
        }),
        &helper,
        shares.path(),
    )
    .env("MAINTENANCE_INTERVAL", interval);
    let env = setup.start();
    emulate_exports(
        &env.linode,
        Arc::new(Exports::new(helper_dir.path()).unwrap()),
    );
    let staging = env.another(
        "staging-controller",
        &[
            ("CLUSTER_ID", STAGING),
            ("LEASE_NAME", "staging-lease"),
            (
                "SHARE_MOUNT_DIR",
                &their_shares.path().display().to_string(),
            ),
        ],
    );
    Two {
        env,
        staging,
        helper_dir,
        _shares: [shares, their_shares],
    }
}

/// A parent another cluster writes to is listed again before every create
/// on it, however fresh this controller's account of it is (there is no
/// upkeep here, and the account's age bound is a minute): what the other
/// cluster promised since this one's last list is always counted.
#[test]
fn a_parent_another_cluster_writes_to_is_listed_before_every_create_on_it() {
    let two = two_clusters("0s");
    let (ours, theirs) = (two.env.client.clone(), two.staging.controller());
    create(&theirs, &on_parent("pvc-b", 2 * GIB, "delete"));
    // Our account is seeded now, and finds staging's volume on the parent.
    create(&ours, &on_parent("pvc-a", 2 * GIB, "delete"));
    create(&theirs, &on_parent("pvc-c", 4 * GIB, "delete"));
    // 8 GiB of 10 are promised: 3 GiB more is refused, 2 GiB fits.
    assert_code(
        ours.create_volume(&on_parent("pvc-big", 3 * GIB, "delete")),
        Code::RESOURCE_EXHAUSTED,
        "staging's newest quota is counted",
    );
    create(&ours, &on_parent("pvc-d", 2 * GIB, "delete"));
    let promised: i64 = two
        .env
        .linode
        .quotas()
        .iter()
        .filter(|q| !q.is_root)
        .map(|q| q.max_capacity_bytes.unwrap_or(0))
        .sum();
    assert_eq!(promised, PARENT_BYTES);
}

#[test]
fn two_clusters_share_a_space_a_parent_and_a_pool_name_without_touching_each_other() {
    let two = two_clusters("200ms");
    let (env, staging, helper_dir) = (&two.env, &two.staging, &two.helper_dir);
    let (ours, theirs) = (env.client.clone(), staging.controller());
    let export = share::export_dir(
        helper_dir.path(),
        &env.filesystem(PARENT).mount_target_fqdn.unwrap(),
    );

    // Volumes on the shared parent and in a pool of the same name, both
    // clusters at once.
    let mine = [
        create(&ours, &on_parent("pvc-a", 2 * GIB, "retain")),
        create(&ours, &in_pool("pvc-pa")),
    ];
    let yours = [
        create(&theirs, &on_parent("pvc-b", 2 * GIB, "retain")),
        create(&theirs, &in_pool("pvc-pb")),
    ];
    // The parent is shared, its room is not: 4 GiB promised of 10 GiB, so
    // 7 GiB more is refused to either cluster.
    for client in [&ours, &theirs] {
        assert_code(
            client.create_volume(&on_parent("pvc-big", 7 * GIB, "delete")),
            Code::RESOURCE_EXHAUSTED,
            "the room counts the other cluster's quotas",
        );
    }
    // Each pool is its own: labels and tags say whose.
    let (my_pool, your_pool) = (
        parent_of(&mine[1].volume_id),
        parent_of(&yours[1].volume_id),
    );
    assert_ne!(my_pool, your_pool);
    let label_of = |id: u64| {
        env.live_filesystems()
            .into_iter()
            .find(|fs| fs.id == id)
            .unwrap()
    };
    assert_eq!(
        label_of(my_pool).label,
        format!("csi-pool-{CLUSTER_ID}-team-1")
    );
    assert_eq!(
        label_of(your_pool).label,
        format!("csi-pool-{STAGING}-team-1")
    );
    assert!(label_of(my_pool).tags.contains(&CLUSTER_TAG.to_string()));
    assert!(label_of(your_pool)
        .tags
        .contains(&format!("csi-cluster.{STAGING}")));
    assert_eq!(
        listed(&ours),
        mine.iter().map(|v| v.volume_id.clone()).collect()
    );
    assert_eq!(
        listed(&theirs),
        yours.iter().map(|v| v.volume_id.clone()).collect()
    );

    // Snapshots on the shared parent, and restores of them: every one
    // completes, whichever cluster's upkeep runs meanwhile.
    std::fs::write(export.join("csi-volumes/pvc-a/data"), "a").unwrap();
    std::fs::write(export.join("csi-volumes/pvc-b/data"), "b").unwrap();
    let snap = |client: &ControllerClient, name: &str, source: &str| {
        let s = retry(&SIDECAR, || {
            client.create_snapshot(&snapshot_req(name, source))
        })
        .unwrap()
        .snapshot
        .unwrap();
        wait_for("the snapshot to be ready", PATIENCE, || {
            client
                .create_snapshot(&snapshot_req(name, source))
                .is_ok_and(|r| r.snapshot.unwrap().ready_to_use)
        });
        s
    };
    let my_snap = snap(&ours, "snap-a", &mine[0].volume_id);
    let your_snap = snap(&theirs, "snap-b", &yours[0].volume_id);
    assert_eq!(
        snapshots_listed(&ours),
        BTreeSet::from([my_snap.snapshot_id.clone()])
    );
    assert_eq!(
        snapshots_listed(&theirs),
        BTreeSet::from([your_snap.snapshot_id.clone()])
    );
    let restored = [
        (
            &ours,
            from_snapshot(on_parent("pvc-ra", 2 * GIB, "delete"), &my_snap.snapshot_id),
            "pvc-ra",
            "a",
        ),
        (
            &theirs,
            from_snapshot(
                on_parent("pvc-rb", 2 * GIB, "delete"),
                &your_snap.snapshot_id,
            ),
            "pvc-rb",
            "b",
        ),
    ];
    let calls: Vec<_> = restored
        .iter()
        .map(|(client, req, ..)| {
            let (client, req) = ((*client).clone(), req.clone());
            std::thread::spawn(move || {
                retry(
                    &Retry {
                        limit: PATIENCE,
                        ..SIDECAR
                    },
                    || client.create_volume(&req),
                )
            })
        })
        .collect();
    for (call, (_, _, name, data)) in calls.into_iter().zip(&restored) {
        call.join()
            .unwrap()
            .unwrap_or_else(|e| panic!("restore {name}: {e:?}"));
        assert_eq!(
            std::fs::read_to_string(export.join(format!("csi-volumes/{name}/data"))).unwrap(),
            *data
        );
    }

    // Through a handle, the other's objects are not there, and deleting
    // them changes nothing.
    assert_code(
        theirs.controller_get_volume(&get_volume_req(&mine[0].volume_id)),
        Code::NOT_FOUND,
        "another cluster's directory volume",
    );
    assert_code(
        theirs.create_volume(&from_snapshot(
            on_parent("pvc-stolen", 2 * GIB, "delete"),
            &my_snap.snapshot_id,
        )),
        Code::NOT_FOUND,
        "a restore of another cluster's snapshot",
    );
    theirs
        .delete_volume(&delete_req(&mine[0].volume_id))
        .unwrap();
    theirs
        .delete_snapshot(&delete_snapshot_req(&my_snap.snapshot_id))
        .unwrap();
    assert!(export.join("csi-volumes/pvc-a/data").exists());
    assert_eq!(
        snapshots_listed(&ours),
        BTreeSet::from([my_snap.snapshot_id.clone()])
    );

    // Deletes that keep data record it in each cluster's own ledger, and
    // both count on the shared parent.
    ours.delete_volume(&delete_req(&mine[0].volume_id)).unwrap();
    theirs
        .delete_volume(&delete_req(&yours[0].volume_id))
        .unwrap();
    let ledger = |id: &str| -> PathBuf { export.join(format!("csi-volumes/.kept-{id}")) };
    assert!(std::fs::read_to_string(ledger(CLUSTER_ID))
        .unwrap()
        .contains("pvc-a"));
    assert!(std::fs::read_to_string(ledger(STAGING))
        .unwrap()
        .contains("pvc-b"));

    // What is promised on the parent never exceeds it.
    let parent_id = env.filesystem(PARENT).id;
    let promised: i64 = env
        .linode
        .quotas()
        .iter()
        .filter(|q| q.filesystem_id == parent_id && !q.is_root)
        .map(|q| q.max_capacity_bytes.unwrap_or(0))
        .sum();
    assert!(promised <= PARENT_BYTES, "{promised}");

    // Each cluster's upkeep has run all along: no temporary filesystem or
    // pool filesystem of either was swept from under the other, and each
    // pool still holds its volume.
    for (client, pool_volume) in [(&ours, &mine[1]), (&theirs, &yours[1])] {
        client
            .controller_get_volume(&get_volume_req(&pool_volume.volume_id))
            .unwrap();
    }
    wait_for("both restores' temporaries to go", PATIENCE, || {
        !env.live_filesystems()
            .iter()
            .any(|fs| fs.label.starts_with("csi-restore-"))
    });
}
