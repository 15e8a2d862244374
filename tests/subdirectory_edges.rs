//! Directory volumes at their edges, through the real binary and the fake
//! Linode API, as a hostile tenant or a careless admin would try them:
//! forged handles that name a shared parent or a whole-filesystem volume,
//! an admin's own quotas and snapshots, two CSI names of one directory, a
//! tree too deep for a recursive walk, expansions answered before they
//! take effect, and data kept by deleted volumes. Every test reads the
//! state afterwards: the parent and its data, the ACL, the quotas, the
//! tenant's directory, the process.

mod common;

use common::controller::*;
use common::linode::request;
use common::requests::*;
use common::rpc::*;
use common::subdir::*;
use common::wait_for;
use grpcio::RpcStatusCode as Code;
use linode_nfs_csi::fake::{Lifecycle, QuotaBehaviour};
use linode_nfs_csi::fs_tree::Dir;
use linode_nfs_csi::linode::Status;
use linode_nfs_csi::proto::csi;
use serde_json::json;
use std::os::unix::fs::{MetadataExt, PermissionsExt};
use std::time::Duration;

const NODE: u64 = 4242;
const P_ON_DELETE: &str = "linodenfs.csi.linode.com/on-delete";

fn modify_tags(w: &World, id: &str) -> grpcio::Result<csi::ControllerModifyVolumeResponse> {
    w.modify(id, &[(P_TAGS, "stolen")])
}

/// A whole-filesystem volume of the driver in the world's Space.
fn filesystem_volume(w: &World, name: &str) -> String {
    w.env.create_ok(name).volume_id
}

/// Forged handles that name the shared parent itself, or a directory "of"
/// a whole-filesystem volume, never delete, snapshot, change, mount or
/// list either.
#[test]
fn forged_handles_never_act_on_a_shared_parent_or_a_filesystem_volume() {
    let w = world();
    let data = w.create_ok("pvc-tenant", GIB, &[]);
    std::fs::write(w.dir("pvc-tenant").join("secret"), "tenant data").unwrap();
    let parent = format!("{SPACE}/{}", w.parent);
    let tags_before = w.env.filesystem(PARENT).tags;

    let e = w.env.delete(&parent).unwrap_err();
    assert_eq!(code_of(&e), Code::FAILED_PRECONDITION, "{e:?}");
    assert!(
        message_of(&e).contains("not a volume of this driver"),
        "{e:?}"
    );
    let e = w.env.snapshot("snap-all", &parent).unwrap_err();
    assert_eq!(code_of(&e), Code::FAILED_PRECONDITION, "{e:?}");
    let e = modify_tags(&w, &parent).unwrap_err();
    assert_eq!(code_of(&e), Code::FAILED_PRECONDITION, "{e:?}");
    let clone = from_volume(volume_req("pvc-clone-all", &by_id()), &parent);
    let e = w.env.create(&clone).unwrap_err();
    assert_eq!(code_of(&e), Code::FAILED_PRECONDITION, "{e:?}");

    let fs = w.env.filesystem(PARENT);
    assert_eq!(fs.status, Status::Active, "the parent is not being deleted");
    assert_eq!(fs.tags, tags_before);
    assert!(
        w.env.linode.snapshots().is_empty(),
        "no snapshot of every tenant"
    );
    assert_eq!(
        w.env.live_filesystems().len(),
        1,
        "no clone of every tenant"
    );
    assert_eq!(
        std::fs::read_to_string(w.dir("pvc-tenant").join("secret")).unwrap(),
        "tenant data"
    );

    // A directory "of" one of the driver's whole-filesystem volumes.
    let whole = filesystem_volume(&w, "pvc-whole");
    let forged = format!("{whole}/x");
    let mounts = w.mounts();
    w.env.delete(&forged).unwrap();
    assert_eq!(w.mounts(), mounts, "the volume was not mounted as a parent");
    assert_eq!(err_code(w.env.get_volume(&forged)), Code::NOT_FOUND);
    assert_eq!(err_code(w.expand(&forged, 2 * GIB)), Code::NOT_FOUND);
    assert_eq!(w.mounts(), mounts);
    assert_eq!(w.env.listed_volume_ids(), [whole.clone(), data.volume_id]);
    assert_eq!(
        w.env
            .linode
            .filesystems()
            .iter()
            .filter(|f| f.status == Status::Deleting)
            .count(),
        0
    );
}

/// ControllerPublishVolume of a directory that is no volume is NotFound,
/// and no ACL is changed: not the parent's, not a filesystem volume's.
#[test]
fn publishing_a_directory_that_is_not_a_volume_touches_no_acl() {
    let w = world_with(|s| s.node_mode().seed(|seed| with_nodes(seed, [NODE])));
    let whole = filesystem_volume(&w, "pvc-whole");
    let policy_of = |id: u64| {
        w.env
            .linode
            .filesystem_policy(id)
            .map(|p| (p.enabled, p.linode_ids()))
    };
    let (_, whole_fs) = ids_of(&whole);
    let before = (policy_of(w.parent), policy_of(whole_fs));
    for forged in [w.id("ghost"), format!("{whole}/x")] {
        let e = w.env.publish(&forged, &NODE.to_string()).unwrap_err();
        assert_eq!(code_of(&e), Code::NOT_FOUND, "{forged}: {e:?}");
    }
    w.env
        .client
        .controller_unpublish_volume(&controller_unpublish_req(
            &format!("{whole}/x"),
            &NODE.to_string(),
        ))
        .unwrap();
    assert_eq!((policy_of(w.parent), policy_of(whole_fs)), before);

    // A real directory volume is published.
    let v = w.create_ok("pvc-real", GIB, &[]);
    w.env.publish(&v.volume_id, &NODE.to_string()).unwrap();
    assert!(policy_of(w.parent).unwrap().1.contains(&NODE));
}

/// Quotas an admin made under `/csi-volumes/` (with or without a
/// directory) are no volumes: not listed, returned, grown, changed or
/// deleted; but they still count as room promised.
#[test]
fn an_admins_quota_is_never_a_volume_but_counts_as_promised() {
    let w = world();
    std::fs::create_dir_all(w.dir("admin-dir")).unwrap();
    for (path, size) in [
        ("/csi-volumes/admin-dir", 30 * GIB),
        ("/csi-volumes/admin-bare", 30 * GIB),
    ] {
        let made = request(
            &w.env.linode,
            "POST",
            &format!("v4beta/nfs/spaces/{SPACE}/filesystems/{}/quotas", w.parent),
            &[],
            Some(json!({"path": path, "max_capacity_bytes": size})),
        );
        assert_eq!(made.status, 200, "{}", made.text);
    }
    wait_for(
        "the admin's quotas to settle",
        Duration::from_secs(10),
        || w.quotas().iter().all(|q| q.status == Status::Active),
    );
    let admins = w.quotas();
    assert_eq!(admins.len(), 2);

    assert_eq!(w.env.listed_volume_ids(), Vec::<String>::new());
    for name in ["admin-dir", "admin-bare"] {
        let id = w.id(name);
        assert_eq!(err_code(w.env.get_volume(&id)), Code::NOT_FOUND);
        assert_eq!(err_code(w.expand(&id, 40 * GIB)), Code::NOT_FOUND);
        assert_eq!(
            err_code(w.modify(&id, &[("linodenfs.csi.linode.com/max-files", "5")])),
            Code::NOT_FOUND
        );
        // The directory without a marker is refused, the bare quota is no
        // volume to delete: neither is touched.
        match (name, w.env.delete(&id)) {
            ("admin-dir", Err(e)) => assert_eq!(code_of(&e), Code::FAILED_PRECONDITION),
            ("admin-bare", Ok(_)) => {}
            (_, other) => panic!("DeleteVolume {id}: {other:?}"),
        }
        // A create of that name does not adopt the admin's quota.
        let e = w.create(name, 30 * GIB, &[]).unwrap_err();
        assert_eq!(code_of(&e), Code::FAILED_PRECONDITION, "{e:?}");
    }
    assert_eq!(w.quotas(), admins, "the admin's quotas are as they were");
    assert!(w.dir("admin-dir").is_dir());
    assert!(w.markers().is_empty());

    // 100 GiB less the admin's 60: 40 are left.
    let e = w.create("pvc-big", 41 * GIB, &[]).unwrap_err();
    assert_eq!(code_of(&e), Code::RESOURCE_EXHAUSTED, "{e:?}");
    w.create_ok("pvc-fits", 40 * GIB, &[]);
}

/// Two CSI names that map to one directory never share it, and a repeated
/// create never re-owns what the tenant made its own.
#[test]
fn two_names_of_one_directory_never_share_it_and_a_repeat_never_re_owns() {
    let w = world();
    let alice = w.create_ok("pvc-Alice", GIB, &[]);
    let dir = w.dir("pvc-alice");
    std::fs::set_permissions(&dir, std::fs::Permissions::from_mode(0o700)).unwrap();
    std::os::unix::fs::chown(&dir, Some(1234), Some(5678)).unwrap();
    std::fs::write(dir.join("mine"), "alice").unwrap();
    let owned = |d: &std::path::Path| {
        let m = std::fs::metadata(d).unwrap();
        (m.mode() & 0o7777, m.uid(), m.gid())
    };

    for other in ["pvc-alice", "PVC-ALICE"] {
        let e = w.create(other, GIB, &[]).unwrap_err();
        assert_eq!(code_of(&e), Code::ALREADY_EXISTS, "{other}: {e:?}");
    }
    let e = w
        .create("pvc-Alice", GIB, &[(P_ON_DELETE, "retain")])
        .unwrap_err();
    assert_eq!(code_of(&e), Code::ALREADY_EXISTS, "{e:?}");
    assert_eq!(
        w.create_ok("pvc-Alice", GIB, &[]).volume_id,
        alice.volume_id
    );
    assert_eq!(owned(&dir), (0o700, 1234, 5678), "not re-owned");
    assert_eq!(std::fs::read_to_string(dir.join("mine")).unwrap(), "alice");

    // Long names that share their first 63 bytes.
    let stem = "a".repeat(63);
    w.create_ok(&format!("{stem}-one"), GIB, &[]);
    let e = w.create(&format!("{stem}-two"), GIB, &[]).unwrap_err();
    assert_eq!(code_of(&e), Code::ALREADY_EXISTS, "{e:?}");
    assert_eq!(w.quotas().len(), 2);
}

/// `depth` directories inside each other under `top`, made through
/// descriptors (a path that deep is far past PATH_MAX).
fn deep_tree(top: &std::path::Path, depth: usize) {
    let mut here = Dir::open(top).unwrap();
    for n in 0..depth {
        here.make_dir(c"d", 0o755).unwrap();
        here = here.child(c"d").unwrap();
        if n % 1000 == 0 {
            here.make_dir(c"side", 0o555).unwrap();
        }
    }
}

/// A tenant's tree 20,000 levels deep goes with its volume, with the
/// driver limited to 1,024 descriptors, and the driver lives on.
#[test]
fn a_tree_twenty_thousand_levels_deep_is_deleted_under_1024_descriptors() {
    let w = world_with(|s| {
        s.prefix(&[
            "prlimit",
            "--nofile=1024:1024",
            "unshare",
            "--mount",
            "--propagation",
            "private",
        ])
    });
    let v = w.create_ok("pvc-deep", GIB, &[]);
    deep_tree(&w.dir("pvc-deep"), 20_000);
    w.env
        .delete(&v.volume_id)
        .unwrap_or_else(|e| panic!("DeleteVolume: {e:?}\n{}", w.env.driver.logs()));
    assert!(!w.dir("pvc-deep").exists());
    assert!(w.quotas().is_empty());
    assert!(w.markers().is_empty());
    let limits = std::fs::read_to_string(format!("/proc/{}/limits", w.env.driver.pid())).unwrap();
    assert!(
        limits
            .lines()
            .any(|l| l.starts_with("Max open files") && l.contains(" 1024 ")),
        "{limits}"
    );
    w.create_ok("pvc-after", GIB, &[]);
}

/// The resizer is told OK only once the quota is `active` at the size it
/// asked: a quota stuck `updating` is waited for (and times out again on a
/// retry), one in `error` is FailedPrecondition on every retry.
#[test]
fn an_expansion_is_answered_ok_only_once_the_quota_is_active() {
    let w = world_with(|s| s.wait_timeout("2s"));
    let v = w.create_ok("pvc-grow", GIB, &[]);
    for (lifecycle, size, code, status) in [
        (
            Lifecycle::NeverActive,
            2 * GIB,
            Code::DEADLINE_EXCEEDED,
            Status::Updating,
        ),
        (
            Lifecycle::StickInError,
            3 * GIB,
            Code::FAILED_PRECONDITION,
            Status::Error,
        ),
    ] {
        w.env.linode.set_quota_behaviour(QuotaBehaviour {
            lifecycle: Some(lifecycle),
            ..Default::default()
        });
        // The first answer and its retry's.
        for _ in 0..2 {
            let e = w.expand(&v.volume_id, size).unwrap_err();
            assert_eq!(code_of(&e), code, "{e:?}");
        }
        assert_eq!(w.quotas()[0].status, status);
    }
    // A smaller size is no way around an error either.
    let e = w.expand(&v.volume_id, GIB).unwrap_err();
    assert_eq!(code_of(&e), Code::FAILED_PRECONDITION, "{e:?}");
    w.env.linode.set_quota_behaviour(QuotaBehaviour::default());
    let grown = w.expand(&v.volume_id, 4 * GIB).unwrap();
    assert_eq!(grown.capacity_bytes, 4 * GIB);
    assert_eq!(w.quotas()[0].status, Status::Active);
}

/// A growth the parent cannot hold is OUT_OF_RANGE (infeasible: the user
/// may lower the request) with the figures, and changes nothing.
#[test]
fn an_expansion_past_the_parent_is_out_of_range_with_the_figures() {
    let w = world();
    let v = w.create_ok("pvc-grow", 10 * GIB, &[]);
    w.create_ok("pvc-other", 50 * GIB, &[]);
    let e = w.expand(&v.volume_id, 60 * GIB).unwrap_err();
    assert_eq!(code_of(&e), Code::OUT_OF_RANGE, "{e:?}");
    let m = message_of(&e);
    for figure in [
        format!("holds {PARENT_CAPACITY} bytes"),
        format!("quotas promise {}", 50 * GIB),
        format!("needs {} more", 50 * GIB),
    ] {
        assert!(m.contains(&figure), "{figure:?} in {m}");
    }
    assert_eq!(
        w.expand(&v.volume_id, 50 * GIB).unwrap().capacity_bytes,
        50 * GIB
    );
}

/// What archived and retained directories keep still fills the parent:
/// GetCapacity and the room check count it until the admin removes it.
#[test]
fn archived_and_retained_data_still_count_against_the_parent() {
    let w = world();
    let archived = w.create_ok("pvc-arch", 30 * GIB, &[(P_ON_DELETE, "archive")]);
    let retained = w.create_ok("pvc-kept", 20 * GIB, &[(P_ON_DELETE, "retain")]);
    let quota_of = |name: &str| {
        w.quotas()
            .into_iter()
            .find(|q| q.path.ends_with(name))
            .unwrap()
            .id
    };
    // What the backend last saw used: 8 GiB and 5 GiB.
    assert!(w
        .env
        .linode
        .set_quota_usage(quota_of("pvc-arch"), 8 * GIB, 10));
    assert!(w
        .env
        .linode
        .set_quota_usage(quota_of("pvc-kept"), 5 * GIB, 10));
    w.env.delete(&archived.volume_id).unwrap();
    w.env.delete(&retained.volume_id).unwrap();
    assert!(w.quotas().is_empty());

    let mut req = csi::GetCapacityRequest::new();
    req.parameters = params(w.class(&[]));
    let left = PARENT_CAPACITY - 13 * GIB;
    assert_eq!(
        w.env.client.get_capacity(&req).unwrap().available_capacity,
        left
    );
    let e = w.create("pvc-over", left + 1, &[]).unwrap_err();
    assert_eq!(code_of(&e), Code::RESOURCE_EXHAUSTED, "{e:?}");
    assert!(
        message_of(&e).contains(&format!("kept by deleted volumes {}", 13 * GIB)),
        "{e:?}"
    );

    // The admin clears the archive: its room is free again.
    let archive = w.export.join("csi-volumes/.archive");
    for entry in std::fs::read_dir(&archive).unwrap() {
        std::fs::remove_dir_all(entry.unwrap().path()).unwrap();
    }
    assert_eq!(
        w.env.client.get_capacity(&req).unwrap().available_capacity,
        PARENT_CAPACITY - 5 * GIB
    );
    w.create_ok("pvc-fits", PARENT_CAPACITY - 5 * GIB, &[]);
}

/// A snapshot an admin took of the shared parent by hand holds every
/// tenant's data: it is never listed, returned, restored or deleted.
#[test]
fn a_snapshot_the_driver_did_not_take_is_neither_listed_restored_nor_deleted() {
    let w = world();
    w.create_ok("pvc-tenant", GIB, &[]);
    let taken = request(
        &w.env.linode,
        "POST",
        &format!(
            "v4beta/nfs/spaces/{SPACE}/filesystems/{}/snapshots",
            w.parent
        ),
        &[],
        Some(json!({"label": "admin-backup"})),
    );
    assert_eq!(taken.status, 200, "{}", taken.text);
    let foreign = format!("{SPACE}/{}/{}", w.parent, taken.json()["id"]);

    // The driver's own snapshot of one of its volumes is listed, and marked.
    let whole = filesystem_volume(&w, "pvc-whole");
    let ours = w.env.snapshot("snap-ours", &whole).unwrap();
    let listed = |id: &str, source: &str| -> Vec<String> {
        w.env
            .listed_snapshots(id, source)
            .into_iter()
            .map(|s| s.snapshot_id)
            .collect()
    };
    assert_eq!(listed("", ""), [ours.snapshot_id]);
    assert!(listed(&foreign, "").is_empty());
    assert!(listed("", &format!("{SPACE}/{}", w.parent)).is_empty());
    assert_eq!(
        err_code(w.env.client.get_snapshot(&get_snapshot_req(&foreign))),
        Code::NOT_FOUND
    );

    let before = w.env.live_filesystems().len();
    let e = w
        .env
        .create(&from_snapshot(
            volume_req("pvc-everyone", &by_id()),
            &foreign,
        ))
        .unwrap_err();
    assert_eq!(code_of(&e), Code::NOT_FOUND, "{e:?}");
    assert_eq!(w.env.live_filesystems().len(), before, "nothing was cloned");

    let e = w
        .env
        .client
        .delete_snapshot(&delete_snapshot_req(&foreign))
        .unwrap_err();
    assert_eq!(code_of(&e), Code::FAILED_PRECONDITION, "{e:?}");
    assert!(
        w.env
            .linode
            .snapshots()
            .iter()
            .any(|s| s.label == "admin-backup" && s.status != Status::Deleting),
        "the admin's snapshot is still there"
    );
}
