//! Objects each cluster owns (issue 35): the cluster identity is derived
//! from the cluster, carried by what the driver makes, recorded on the
//! Lease and never silently changed; two clusters on one Space never list,
//! find or touch each other's volumes and snapshots; objects made before
//! identities existed stay usable. The real binary in the controller role
//! against the fake Linode and Kubernetes APIs.

mod common;

use common::controller::*;
use common::requests::*;
use common::rpc::*;
use grpcio::RpcStatusCode as Code;
use linode_nfs_csi::fake::DEV_CLUSTER_UID;
use linode_nfs_csi::linode::{Cloud, NewFilesystem};
use linode_nfs_csi::proto::csi_grpc;
use std::time::Duration;

const MANAGED: &str = "csi.linodenfs.csi.linode.com";
/// What the fake `kube-system` UID derives.
const DERIVED: &str = "f00dcafe0001";
const LEASE: (&str, &str) = ("kube-system", "linode-nfs-csi-controller");

fn listed(client: &csi_grpc::ControllerClient) -> Vec<String> {
    let mut ids = listed_volume_ids(client);
    ids.sort();
    ids
}

/// The filesystem a whole-filesystem volume's id names.
fn parent_of(volume_id: &str) -> u64 {
    volume_id.split('/').nth(1).unwrap().parse().unwrap()
}

#[test]
fn the_identity_is_derived_from_the_cluster_carried_recorded_and_never_changed() {
    assert!(DEV_CLUSTER_UID.replace('-', "").starts_with(DERIVED));
    let env = Setup::new().start();
    let vol = env.create_ok("pvc-marked");
    let snap = env
        .client
        .create_snapshot(&snapshot_req("snap-marked", &vol.volume_id))
        .unwrap()
        .snapshot
        .unwrap();
    let tag = format!("csi-cluster.{DERIVED}");
    let fs = env.filesystem("pvc-marked");
    assert!(fs.tags.contains(&tag), "{:?}", fs.tags);
    let taken = env
        .linode
        .snapshots()
        .into_iter()
        .find(|s| snap.snapshot_id.ends_with(&format!("/{}", s.id)))
        .unwrap();
    assert!(taken.tags.contains(&tag), "{:?}", taken.tags);
    let lease = env.kube.lease(LEASE.0, LEASE.1).expect("the lease");
    assert_eq!(
        lease["metadata"]["annotations"]["linodenfs.csi.linode.com/cluster-id"],
        DERIVED
    );

    // A process of the same cluster with another identity (a changed
    // CLUSTER_ID, or a changed default) refuses to start, naming both.
    let mut changed = env.spawn_another("changed", &[("CLUSTER_ID", "renamed")]);
    let status = changed.wait_exit(Duration::from_secs(20));
    assert!(!status.success());
    let logs = changed.logs();
    assert!(
        logs.contains("\"renamed\"") && logs.contains(&format!("\"{DERIVED}\"")),
        "{logs}"
    );
    // The identity it was given is no identity at all: refused too.
    let mut bad = env.spawn_another("bad", &[("CLUSTER_ID", "Not_Valid")]);
    assert!(!bad.wait_exit(Duration::from_secs(20)).success());
    assert!(bad.logs().contains("CLUSTER_ID"), "{}", bad.logs());
    // The running one was never disturbed.
    assert_eq!(listed(&env.client), [vol.volume_id]);
}

#[test]
fn two_clusters_on_one_space_never_list_find_or_touch_each_others_objects() {
    let env = Setup::new().start();
    let ours = env.create_ok("pvc-a");
    let our_snap = env
        .client
        .create_snapshot(&snapshot_req("snap-a", &ours.volume_id))
        .unwrap()
        .snapshot
        .unwrap();
    // The second cluster: its own identity and its own Lease (its own
    // Kubernetes API, played by the same fake).
    let other = env.another(
        "other-controller",
        &[("CLUSTER_ID", "staging"), ("LEASE_NAME", "staging-lease")],
    );
    let theirs_client = other.controller();
    let theirs = theirs_client
        .create_volume(&volume_req("pvc-b", &by_id()))
        .unwrap()
        .volume
        .unwrap();
    // Same name in both clusters: two volumes, neither adopts the other's.
    let same = theirs_client
        .create_volume(&volume_req("pvc-a", &by_id()))
        .unwrap()
        .volume
        .unwrap();
    assert_ne!(same.volume_id, ours.volume_id);

    assert_eq!(listed(&env.client), std::slice::from_ref(&ours.volume_id));
    let mut their_list = vec![theirs.volume_id.clone(), same.volume_id.clone()];
    their_list.sort();
    assert_eq!(listed(&theirs_client), their_list);
    assert_eq!(listed_snapshot_ids(&theirs_client), Vec::<String>::new());
    assert_eq!(
        listed_snapshot_ids(&env.client),
        std::slice::from_ref(&our_snap.snapshot_id)
    );

    // Through its handle, the other cluster's volume is not found...
    assert_code(
        theirs_client.controller_get_volume(&get_volume_req(&ours.volume_id)),
        Code::NOT_FOUND,
        "another cluster's volume",
    );
    assert_code(
        theirs_client.create_snapshot(&snapshot_req("snap-x", &ours.volume_id)),
        Code::NOT_FOUND,
        "a snapshot of another cluster's volume",
    );
    assert_code(
        theirs_client.create_volume(&from_volume(
            volume_req("pvc-clone", &by_id()),
            &ours.volume_id,
        )),
        Code::NOT_FOUND,
        "a clone of another cluster's volume",
    );
    assert_eq!(
        theirs_client
            .list_snapshots(&list_snapshots_req(&our_snap.snapshot_id, ""))
            .unwrap()
            .entries
            .len(),
        0
    );
    // ...and deleting it is a delete of a volume that does not exist:
    // OK, and nothing changes.
    theirs_client
        .delete_volume(&delete_req(&ours.volume_id))
        .unwrap();
    theirs_client
        .delete_snapshot(&delete_snapshot_req(&our_snap.snapshot_id))
        .unwrap();
    assert!(env
        .live_filesystems()
        .iter()
        .any(|fs| fs.id == parent_of(&ours.volume_id)));
    assert_eq!(
        listed_snapshot_ids(&env.client),
        std::slice::from_ref(&our_snap.snapshot_id)
    );
    env.client
        .controller_get_volume(&get_volume_req(&ours.volume_id))
        .unwrap();
    assert_code(
        env.client
            .controller_get_volume(&get_volume_req(&theirs.volume_id)),
        Code::NOT_FOUND,
        "the other way round",
    );
}

#[test]
fn volumes_made_before_identities_stay_usable_and_are_marked_by_no_one() {
    let env = Setup::new().start();
    // What a driver without identities made: the volume mark alone.
    let old = env
        .someone_else()
        .create_filesystem(
            SPACE,
            &NewFilesystem {
                label: "pvc-old".into(),
                region: REGION.into(),
                max_capacity_bytes: 10 << 30,
                tags: vec![MANAGED.into()],
            },
        )
        .unwrap();
    let id = format!("{SPACE}/{}", old.id);
    common::wait_for(
        "the old volume to be active",
        Duration::from_secs(20),
        || env.filesystem("pvc-old").status == linode_nfs_csi::linode::Status::Active,
    );
    assert_eq!(listed(&env.client), std::slice::from_ref(&id));
    env.client
        .controller_get_volume(&get_volume_req(&id))
        .unwrap();
    let snap = env
        .client
        .create_snapshot(&snapshot_req("snap-old", &id))
        .unwrap()
        .snapshot
        .unwrap();
    env.client
        .delete_snapshot(&delete_snapshot_req(&snap.snapshot_id))
        .unwrap();
    assert_eq!(env.filesystem("pvc-old").tags, [MANAGED]);
    env.client.delete_volume(&delete_req(&id)).unwrap();
    assert!(!env
        .live_filesystems()
        .iter()
        .any(|fs| fs.label == "pvc-old"));
}

/// Directory volumes on a shared parent: one a driver before identities
/// made (its marker names no cluster, as the old version wrote it) keeps
/// working in full and is never re-marked; one another cluster made on the
/// same parent is not found, not listed, and a delete of it changes
/// nothing.
#[test]
fn directory_volumes_of_no_cluster_work_and_another_cluster_s_are_left_alone() {
    use common::subdir::{world, GIB};
    let w = world();
    let old = w.create_ok("pvc-old", GIB, &[]);
    let without_cluster = |text: String| -> String {
        text.lines()
            .filter(|l| !l.starts_with("cluster:"))
            .map(|l| format!("{l}\n"))
            .collect()
    };
    let marker = w.marker("pvc-old");
    let written = std::fs::read_to_string(&marker).unwrap();
    assert!(
        written.contains(&format!("cluster: {DERIVED}\n")),
        "{written}"
    );
    std::fs::write(&marker, without_cluster(written)).unwrap();
    // Another cluster's volume beside it, as that cluster's driver wrote it.
    let theirs = w.id("pvc-theirs");
    std::fs::create_dir_all(w.dir("pvc-theirs")).unwrap();
    std::fs::write(w.dir("pvc-theirs").join("data"), "theirs").unwrap();
    std::fs::write(
        w.marker("pvc-theirs"),
        format!("volume-id: {theirs}\ncsi-name: pvc-theirs\non-delete: delete\ncluster: staging\n"),
    )
    .unwrap();

    assert_eq!(listed(&w.env.client), std::slice::from_ref(&old.volume_id));
    w.env
        .client
        .controller_get_volume(&get_volume_req(&old.volume_id))
        .unwrap();
    w.expand(&old.volume_id, 2 * GIB).unwrap();
    let snap = w
        .env
        .client
        .create_snapshot(&snapshot_req("snap-old", &old.volume_id))
        .unwrap()
        .snapshot
        .unwrap();
    w.env
        .client
        .delete_snapshot(&delete_snapshot_req(&snap.snapshot_id))
        .unwrap();

    assert_code(
        w.env.client.controller_get_volume(&get_volume_req(&theirs)),
        Code::NOT_FOUND,
        "another cluster's directory volume",
    );
    assert_code(
        w.env
            .client
            .create_snapshot(&snapshot_req("snap-theirs", &theirs)),
        Code::NOT_FOUND,
        "a snapshot of another cluster's directory volume",
    );
    assert_code(
        w.create("pvc-theirs", GIB, &[]),
        Code::ALREADY_EXISTS,
        "a name another cluster holds on the parent",
    );
    w.env.client.delete_volume(&delete_req(&theirs)).unwrap();
    assert_eq!(
        std::fs::read_to_string(w.dir("pvc-theirs").join("data")).unwrap(),
        "theirs"
    );
    assert!(w.marker("pvc-theirs").exists());

    let marker_now = std::fs::read_to_string(&marker).unwrap();
    assert!(!marker_now.contains("cluster:"), "re-marked: {marker_now}");
    w.env
        .client
        .delete_volume(&delete_req(&old.volume_id))
        .unwrap();
    assert!(!w.dir("pvc-old").exists());
    assert!(!w.marker("pvc-old").exists());
}
