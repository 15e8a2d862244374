//! `subdirectory` volumes through the real binary in the controller role,
//! in a mount namespace of its own, against the fake Linode API over
//! loopback: a shared parent filesystem seeded in Space 7, whose export is
//! a directory of the test that the `NFS_MOUNT_HELPER` stand-in bind-mounts
//! where the controller asks. Every test checks state: the fake's quota
//! table and the export's directory tree after each step and each retry.

mod common;

use common::controller::*;
use common::names_in;
use common::requests::*;
use common::rpc::*;
use common::subdir::*;
use grpcio::RpcStatusCode as Code;
use linode_nfs_csi::build_info::DRIVER_NAME;
use linode_nfs_csi::fake::{FakeStorageClass, FaultRule, Lifecycle, QuotaBehaviour};
use linode_nfs_csi::linode::Status;
use linode_nfs_csi::proto::csi;
use std::os::unix::fs::PermissionsExt;

#[test]
fn create_is_idempotent_and_delete_removes_directory_quota_and_marker() {
    let w = world();
    let v = w.create_ok("PVC-One", GIB, &[(P_MAX_FILES, "1000")]);
    assert_eq!(v.volume_id, w.id("pvc-one"));
    assert_eq!(v.capacity_bytes, GIB);
    assert_eq!(ctx(&v, "volume-type"), Some("subdirectory"));
    assert_eq!(ctx(&v, "quota"), None, "capped");
    assert_eq!(
        ctx(&v, "filesystem-id"),
        Some(w.parent.to_string().as_str())
    );
    let parent = w.env.filesystem(PARENT);
    assert_eq!(ctx(&v, "mount-target"), parent.mount_target_fqdn.as_deref());

    let quotas = w.quotas();
    assert_eq!(quotas.len(), 1);
    assert_eq!(quotas[0].path, "/csi-volumes/pvc-one");
    assert_eq!(quotas[0].max_capacity_bytes, Some(GIB));
    assert_eq!(quotas[0].max_file_count, Some(1000));
    assert_eq!(quotas[0].status, Status::Active);
    assert_eq!(w.dirs(), ["pvc-one"]);
    let mode = std::fs::metadata(w.dir("pvc-one"))
        .unwrap()
        .permissions()
        .mode();
    assert_eq!(mode & 0o7777, 0o770);
    let marker = std::fs::read_to_string(w.marker("pvc-one")).unwrap();
    assert!(
        marker.contains(&format!("volume-id: {}", w.id("pvc-one"))),
        "{marker}"
    );
    assert!(marker.contains("csi-name: PVC-One"), "{marker}");

    // A retry finds what is there; another size is another volume.
    let again = w.create_ok("PVC-One", GIB, &[(P_MAX_FILES, "1000")]);
    assert_eq!(again, v);
    assert_eq!(w.quota_calls("POST"), 1);
    assert_eq!(w.quotas().len(), 1);
    assert_eq!(
        err_code(w.create("PVC-One", 2 * GIB, &[])),
        Code::ALREADY_EXISTS
    );
    assert_eq!(w.quotas().len(), 1);
    assert_eq!(w.dirs(), ["pvc-one"]);
    assert_eq!(w.mounts(), 1, "the parent is mounted once");

    // Visible to ControllerGetVolume and ListVolumes.
    let got = w.env.get_volume(&v.volume_id).unwrap();
    assert_eq!(got.volume.capacity_bytes, GIB);
    assert!(!got.status.volume_condition.abnormal);
    assert_eq!(w.env.listed_volume_ids(), [v.volume_id.as_str()]);

    std::fs::write(w.dir("pvc-one").join("data"), "x").unwrap();
    w.env.delete(&v.volume_id).unwrap();
    assert!(w.quotas().is_empty());
    assert!(w.dirs().is_empty());
    assert!(w.markers().is_empty());
    w.env.delete(&v.volume_id).unwrap();
    assert_eq!(err_code(w.env.get_volume(&v.volume_id)), Code::NOT_FOUND);
}

#[test]
fn a_quota_in_error_is_rolled_back_with_its_directory() {
    let w = world();
    w.env.linode.set_quota_behaviour(QuotaBehaviour {
        lifecycle: Some(Lifecycle::StickInError),
        ..QuotaBehaviour::default()
    });
    let e = w.create("pvc-err", GIB, &[]).unwrap_err();
    assert_eq!(code_of(&e), Code::FAILED_PRECONDITION, "{e:?}");
    assert!(message_of(&e).contains("quota"), "{}", message_of(&e));
    assert!(w.quotas().is_empty());
    assert!(w.dirs().is_empty());
    assert!(w.markers().is_empty());
    // A retry once the backend behaves makes it whole.
    w.env.linode.set_quota_behaviour(QuotaBehaviour::default());
    w.create_ok("pvc-err", GIB, &[]);
    assert_eq!(w.quota_paths(), ["/csi-volumes/pvc-err"]);
    assert_eq!(w.dirs(), ["pvc-err"]);
}

#[test]
fn a_refused_or_missing_quota_fails_required_and_marks_best_effort() {
    let w = world();
    w.env.linode.set_quota_behaviour(QuotaBehaviour {
        refused: true,
        ..QuotaBehaviour::default()
    });
    let e = w.create("pvc-req", GIB, &[]).unwrap_err();
    assert_eq!(code_of(&e), Code::FAILED_PRECONDITION, "{e:?}");
    assert!(message_of(&e).contains("required"), "{}", message_of(&e));
    assert!(w.quotas().is_empty());
    assert!(w.dirs().is_empty(), "nothing is left behind");
    assert!(w.markers().is_empty());

    let v = w.create_ok("pvc-be", GIB, &[(P_QUOTA, "best-effort")]);
    assert_eq!(ctx(&v, "quota"), Some("absent"));
    assert_eq!(v.capacity_bytes, GIB);
    assert!(w.quotas().is_empty());
    assert_eq!(w.dirs(), ["pvc-be"]);

    w.env.linode.set_quota_behaviour(QuotaBehaviour {
        missing: true,
        ..QuotaBehaviour::default()
    });
    let e = w.create("pvc-none", GIB, &[]).unwrap_err();
    assert_eq!(code_of(&e), Code::FAILED_PRECONDITION, "{e:?}");
    assert_eq!(w.dirs(), ["pvc-be"]);

    // Without a quota it has nothing to grow or limit.
    assert_eq!(
        err_code(w.expand(&v.volume_id, 2 * GIB)),
        Code::FAILED_PRECONDITION
    );
    // It is listed through its marker.
    let listed = w
        .env
        .client
        .list_volumes(&csi::ListVolumesRequest::new())
        .unwrap();
    assert_eq!(listed.entries.len(), 1);
    assert_eq!(listed.entries[0].volume.volume_id, v.volume_id);
    w.env.delete(&v.volume_id).unwrap();
    assert!(w.dirs().is_empty() && w.markers().is_empty());
}

#[test]
fn quota_off_makes_no_quota_call() {
    let w = world();
    let v = w.create_ok("pvc-off", GIB, &[(P_QUOTA, "off"), (P_MODE, "0750")]);
    assert_eq!(ctx(&v, "quota"), Some("absent"));
    assert_eq!(w.quota_calls("*"), 0);
    let mode = std::fs::metadata(w.dir("pvc-off"))
        .unwrap()
        .permissions()
        .mode();
    assert_eq!(mode & 0o7777, 0o750);
}

#[test]
fn a_lost_quota_reply_is_adopted_on_retry() {
    let w = world();
    w.env
        .linode
        .inject(FaultRule::fail_after("POST", "nfs/spaces/*/filesystems/*/quotas", 500).times(1));
    let v = w.create_ok("pvc-lost", GIB, &[]);
    assert_eq!(v.capacity_bytes, GIB);
    assert_eq!(w.quota_paths(), ["/csi-volumes/pvc-lost"]);
    w.create_ok("pvc-lost", GIB, &[]);
    assert_eq!(w.quotas().len(), 1);
    assert_eq!(w.quota_calls("POST"), 1);
}

#[test]
fn the_root_quota_of_the_parent_is_never_a_volume() {
    let w = world();
    let root = |w: &World| -> Vec<(String, Option<i64>)> {
        w.env
            .linode
            .quotas()
            .into_iter()
            .filter(|q| q.is_root && q.filesystem_id == w.parent)
            .map(|q| (q.path, q.max_capacity_bytes))
            .collect()
    };
    let whole = vec![("/".to_string(), Some(PARENT_CAPACITY))];
    assert_eq!(root(&w), whole, "the fake shows the real shape");
    let v = w.create_ok("pvc-a", GIB, &[]);
    assert_eq!(w.env.listed_volume_ids(), [v.volume_id.as_str()]);
    // Growing to the whole parent fits: the root quota promises nothing.
    let grown = w.expand(&v.volume_id, PARENT_CAPACITY).unwrap();
    assert_eq!(grown.capacity_bytes, PARENT_CAPACITY);
    w.env.delete(&v.volume_id).unwrap();
    assert!(w.quotas().is_empty());
    assert_eq!(root(&w), whole, "deleting a volume leaves the root quota");
    assert_eq!(w.quota_calls("DELETE"), 1);
    assert_eq!(w.quota_calls("PUT"), 1, "the expansion's, never the root's");
}

#[test]
fn capacity_beyond_the_parent_is_refused_before_anything_is_made() {
    let w = world();
    w.create_ok("pvc-big", 60 * GIB, &[]);
    let e = w.create("pvc-more", 41 * GIB, &[]).unwrap_err();
    assert_eq!(code_of(&e), Code::RESOURCE_EXHAUSTED, "{e:?}");
    assert_eq!(w.dirs(), ["pvc-big"]);
    assert_eq!(w.quotas().len(), 1);
    w.create_ok("pvc-more", 40 * GIB, &[]);

    let mut req = csi::GetCapacityRequest::new();
    req.parameters = params(w.class(&[]));
    let cap = w.env.client.get_capacity(&req).unwrap();
    assert_eq!(cap.available_capacity, PARENT_CAPACITY - 100 * GIB);
    w.env.delete(&w.id("pvc-more")).unwrap();
    let cap = w.env.client.get_capacity(&req).unwrap();
    assert_eq!(cap.available_capacity, PARENT_CAPACITY - 60 * GIB);
}

/// Creates that read the parent's quota list at the same time cannot
/// together promise more than it holds: each claims its room before its
/// POST, and the others count the claim until the quota is listed.
#[test]
fn concurrent_creates_never_promise_more_than_the_parent_holds() {
    let w = world();
    w.create_ok("pvc-first", 10 * GIB, &[]);
    // Slow quota POSTs: every create below reads the list before one lands.
    w.env.linode.inject(FaultRule::latency(
        "POST",
        "nfs/spaces/*/filesystems/*/quotas",
        std::time::Duration::from_millis(500),
    ));
    // 90 GiB are left: two of these fit, not six.
    let size = 40 * GIB;
    let results: Vec<grpcio::Result<csi::CreateVolumeResponse>> = std::thread::scope(|s| {
        let calls: Vec<_> = (0..6)
            .map(|i| {
                let client = w.env.driver.controller();
                let req =
                    with_capacity(volume_req(&format!("pvc-race-{i}"), &w.class(&[])), size, 0);
                s.spawn(move || client.create_volume(&req))
            })
            .collect();
        calls.into_iter().map(|c| c.join().unwrap()).collect()
    });
    for e in results.iter().filter_map(|r| r.as_ref().err()) {
        assert_eq!(code_of(e), Code::RESOURCE_EXHAUSTED, "{e:?}");
        assert!(format!("{e:?}").contains("does not fit"), "{e:?}");
    }
    let codes: Vec<Result<(), Code>> = results
        .iter()
        .map(|r| r.as_ref().map(|_| ()).map_err(code_of))
        .collect();
    assert_eq!(codes.iter().filter(|c| c.is_ok()).count(), 2, "{codes:?}");
    let promised: i64 = w.quotas().iter().filter_map(|q| q.max_capacity_bytes).sum();
    assert_eq!(promised, 10 * GIB + 2 * size);
    assert!(promised <= PARENT_CAPACITY);
    assert_eq!(w.dirs().len(), 3, "a refused create makes nothing");
    assert_eq!(w.markers().len(), 3);
    // The claims end with their calls: what is left is there to have.
    w.env.linode.clear_faults();
    w.create_ok("pvc-rest", 10 * GIB, &[]);
    assert_eq!(
        w.create("pvc-over", 1, &[])
            .map(|_| ())
            .map_err(|e| code_of(&e)),
        Err(Code::RESOURCE_EXHAUSTED)
    );
}

#[test]
fn delete_touches_only_what_carries_our_marker() {
    let w = world();
    w.create_ok("pvc-a", GIB, &[]);
    w.create_ok("pvc-b", GIB, &[]);
    std::fs::write(w.dir("pvc-b").join("keep"), "b").unwrap();
    std::os::unix::fs::symlink(w.dir("pvc-b"), w.dir("pvc-a").join("to-b")).unwrap();
    std::os::unix::fs::symlink("../pvc-b/keep", w.dir("pvc-a").join("keep-link")).unwrap();
    let ro = w.dir("pvc-a").join("read-only");
    std::fs::create_dir_all(ro.join("inner")).unwrap();
    std::fs::write(ro.join("inner/file"), "x").unwrap();
    std::fs::set_permissions(ro.join("inner"), std::fs::Permissions::from_mode(0o555)).unwrap();
    std::fs::set_permissions(&ro, std::fs::Permissions::from_mode(0o555)).unwrap();

    w.env.delete(&w.id("pvc-a")).unwrap();
    assert_eq!(w.dirs(), ["pvc-b"]);
    assert_eq!(
        std::fs::read_to_string(w.dir("pvc-b").join("keep")).unwrap(),
        "b"
    );
    assert_eq!(w.quota_paths(), ["/csi-volumes/pvc-b"]);
    assert_eq!(w.markers(), ["pvc-b"]);

    // A directory the driver did not make is left alone, whatever the id says.
    std::fs::create_dir_all(w.dir("foreign")).unwrap();
    std::fs::write(w.dir("foreign").join("f"), "mine").unwrap();
    let e = w.env.delete(&w.id("foreign")).unwrap_err();
    assert_eq!(code_of(&e), Code::FAILED_PRECONDITION, "{e:?}");
    assert_eq!(
        std::fs::read_to_string(w.dir("foreign").join("f")).unwrap(),
        "mine"
    );
    // Nor is another volume's directory reached through a marker of its own.
    let e = w.create("foreign", GIB, &[]).unwrap_err();
    assert_eq!(code_of(&e), Code::FAILED_PRECONDITION, "{e:?}");
    assert_eq!(w.quota_paths(), ["/csi-volumes/pvc-b"]);
}

#[test]
fn archive_and_retain_keep_the_data() {
    let w = world();
    w.create_ok("pvc-arch", GIB, &[(P_ON_DELETE, "archive")]);
    w.create_ok("pvc-keep", GIB, &[(P_ON_DELETE, "retain")]);
    std::fs::write(w.dir("pvc-arch").join("f"), "a").unwrap();
    w.env.delete(&w.id("pvc-arch")).unwrap();
    w.env.delete(&w.id("pvc-keep")).unwrap();
    w.env.delete(&w.id("pvc-keep")).unwrap();
    assert!(w.quotas().is_empty());
    assert_eq!(w.dirs(), ["pvc-keep"]);
    let archived = names_in(&w.export.join("csi-volumes/.archive"));
    assert_eq!(archived.len(), 1);
    assert!(archived[0].starts_with("pvc-arch-"), "{archived:?}");
    let kept = w.export.join("csi-volumes/.archive").join(&archived[0]);
    assert_eq!(std::fs::read_to_string(kept.join("f")).unwrap(), "a");
    let listed = w
        .env
        .client
        .list_volumes(&csi::ListVolumesRequest::new())
        .unwrap();
    assert!(listed.entries.is_empty(), "{listed:?}");
}

#[test]
fn expansion_grows_the_quota_within_the_parent() {
    let w = world();
    let v = w.create_ok("pvc-grow", GIB, &[]);
    let grown = w.expand(&v.volume_id, 2 * GIB).unwrap();
    assert_eq!(grown.capacity_bytes, 2 * GIB);
    assert!(!grown.node_expansion_required);
    assert_eq!(w.quotas()[0].max_capacity_bytes, Some(2 * GIB));
    assert_eq!(w.quotas()[0].status, Status::Active);
    let same = w.expand(&v.volume_id, GIB).unwrap();
    assert_eq!(same.capacity_bytes, 2 * GIB, "never shrinks");
    assert_eq!(
        err_code(w.expand(&v.volume_id, PARENT_CAPACITY + 1)),
        Code::OUT_OF_RANGE,
        "infeasible, so the resizer lets the user lower the request"
    );
    assert_eq!(w.quotas()[0].max_capacity_bytes, Some(2 * GIB));
    assert_eq!(
        err_code(w.expand(&format!("{SPACE}/{}", w.parent), 2 * GIB)),
        Code::FAILED_PRECONDITION
    );
    assert_eq!(
        err_code(w.expand(&w.id("nobody"), 2 * GIB)),
        Code::NOT_FOUND
    );
    assert_eq!(err_code(w.expand("../x", 2 * GIB)), Code::NOT_FOUND);
    assert_eq!(err_code(w.expand("", 2 * GIB)), Code::INVALID_ARGUMENT);
}

#[test]
fn max_files_is_the_mutable_key_of_a_subdirectory_volume() {
    let w = world();
    let v = w.create_ok("pvc-files", GIB, &[]);
    assert_eq!(w.quotas()[0].max_file_count, None);
    w.modify(&v.volume_id, &[(P_MAX_FILES, "500")]).unwrap();
    assert_eq!(w.quotas()[0].max_file_count, Some(500));
    assert_eq!(w.quotas()[0].status, Status::Active);
    for key in [P_TAGS, P_SQUASH] {
        let value = if key == P_SQUASH { "none" } else { "a" };
        assert_eq!(
            err_code(w.modify(&v.volume_id, &[(key, value)])),
            Code::INVALID_ARGUMENT,
            "{key}"
        );
    }
    let fs = w.env.create_ok("pvc-whole");
    assert_eq!(
        err_code(w.modify(&fs.volume_id, &[(P_MAX_FILES, "5")])),
        Code::INVALID_ARGUMENT
    );
}

#[test]
fn whole_filesystem_keys_and_foreign_sources_are_refused() {
    let w = world();
    for key in [P_TAGS, P_SQUASH] {
        let e = w.create("pvc-x", GIB, &[(key, "none")]).unwrap_err();
        assert_eq!(code_of(&e), Code::INVALID_ARGUMENT);
        assert!(message_of(&e).contains(key), "{}", message_of(&e));
    }
    let v = w.create_ok("pvc-src", GIB, &[]);
    // A snapshot the driver never took is nothing to restore.
    let clone = from_snapshot(volume_req("pvc-clone", &w.class(&[])), "7/1/2");
    assert_eq!(err_code(w.env.create(&clone)), Code::NOT_FOUND);
    // A source that cannot exist is NotFound first, as csi-sanity expects.
    let missing = from_snapshot(volume_req("pvc-clone", &w.class(&[])), "no-such-snapshot");
    assert_eq!(err_code(w.env.create(&missing)), Code::NOT_FOUND);
    // A directory volume is never copied into a whole filesystem.
    let mut of_volume = volume_req("pvc-clone", &by_id());
    let mut src = csi::VolumeContentSource::new();
    let mut vol = csi::volume_content_source::VolumeSource::new();
    vol.volume_id = v.volume_id.clone();
    src.set_volume(vol);
    of_volume.volume_content_source = Some(src).into();
    assert_eq!(err_code(w.env.create(&of_volume)), Code::INVALID_ARGUMENT);
    assert_eq!(w.dirs(), ["pvc-src"]);
}

#[test]
fn a_parent_by_label_must_exist_and_not_be_a_volume() {
    let w = world();
    let by_label = |label: &str| {
        let mut p = by_id();
        p.push((P_TYPE, "subdirectory".into()));
        p.push((P_SHARED_LABEL, label.to_string()));
        p
    };
    let v = w
        .env
        .create_with(&volume_req("pvc-label", &by_label(PARENT)));
    assert_eq!(v.volume_id, w.id("pvc-label"));
    assert_eq!(
        err_code(w.env.create(&volume_req("pvc-n", &by_label("nope")))),
        Code::NOT_FOUND
    );
    // A volume of the driver is never anyone's parent.
    w.env.create_ok("pvc-whole");
    assert_eq!(
        err_code(w.env.create(&volume_req("pvc-in", &by_label("pvc-whole")))),
        Code::FAILED_PRECONDITION
    );
    assert_eq!(w.dirs(), ["pvc-label"]);
}

#[test]
fn a_restarted_controller_mounts_the_parent_again_and_deletes() {
    let mut w = world();
    let v = w.create_ok("pvc-restart", GIB, &[]);
    w.env.driver.kill();
    w.env.restart();
    let listed = w
        .env
        .client
        .list_volumes(&csi::ListVolumesRequest::new())
        .unwrap();
    assert_eq!(listed.entries.len(), 1, "found through its mounted parent");
    w.env.delete(&v.volume_id).unwrap();
    assert!(w.quotas().is_empty() && w.dirs().is_empty() && w.markers().is_empty());
    assert_eq!(w.mounts(), 2);
}

#[test]
fn a_controller_on_an_empty_share_mount_dir_lists_the_volumes_of_the_parents_its_classes_name() {
    let mut w = world();
    let by_id = w.create_ok("pvc-by-id", GIB, &[]);
    let mut by_label = w.class(&[]);
    by_label.retain(|(k, _)| *k != P_SHARED_ID);
    by_label.push((P_SHARED_LABEL, PARENT.into()));
    let req = with_capacity(volume_req("pvc-by-label", &by_label), GIB, 0);
    let labelled = w.env.create_with(&req);
    // A rescheduled pod: a new process and an empty SHARE_MOUNT_DIR.
    w.env.driver.kill();
    for entry in std::fs::read_dir(w.shares.path()).unwrap() {
        std::fs::remove_dir(entry.unwrap().path()).unwrap();
    }
    w.env.restart();
    let list = |w: &World| -> Vec<String> {
        let mut ids = w.env.listed_volume_ids();
        ids.sort();
        ids
    };
    assert!(list(&w).is_empty(), "no class names the parent yet");

    let class = |name: &str, provisioner: &str, params: &[(&'static str, String)]| {
        let pairs: Vec<(&str, &str)> = params.iter().map(|(k, v)| (*k, v.as_str())).collect();
        FakeStorageClass::new(name, provisioner, &pairs)
    };
    w.env
        .kube
        .add_storage_class(class("elsewhere", "nfs.csi.k8s.io", &w.class(&[])));
    assert!(list(&w).is_empty(), "a class of another provisioner");
    assert_eq!(w.mounts(), 1, "nothing mounted since the restart");

    w.env
        .kube
        .add_storage_class(class("shared", DRIVER_NAME, &by_label));
    let mut want = vec![by_id.volume_id.clone(), labelled.volume_id.clone()];
    want.sort();
    assert_eq!(
        list(&w),
        want,
        "found through the class that names the parent"
    );
    // The label was looked up once; later listings reuse it.
    let lookups = w.env.linode.calls("GET", FS_LIST);
    assert_eq!(list(&w), want);
    assert_eq!(
        w.env.linode.calls("GET", FS_LIST) - lookups,
        1,
        "only the listing's own filtered list of the Space"
    );
    w.env.delete(&by_id.volume_id).unwrap();
    w.env.delete(&labelled.volume_id).unwrap();
    assert!(w.quotas().is_empty() && w.dirs().is_empty() && w.markers().is_empty());
}

#[test]
fn expand_volume_is_advertised_only_when_configured() {
    let has_expand = |env: &Env| {
        env.client
            .controller_get_capabilities(&csi::ControllerGetCapabilitiesRequest::new())
            .unwrap()
            .capabilities
            .iter()
            .any(|c| {
                c.rpc().type_.value()
                    == csi::controller_service_capability::rpc::Type::EXPAND_VOLUME as i32
            })
    };
    let online = |env: &Env| {
        env.driver
            .identity()
            .get_plugin_capabilities(&csi::GetPluginCapabilitiesRequest::new())
            .unwrap()
            .capabilities
            .iter()
            .filter(|c| c.has_volume_expansion())
            .map(|c| c.volume_expansion().type_.value())
            .collect::<Vec<i32>>()
    };
    let w = world();
    assert!(has_expand(&w.env));
    assert_eq!(
        online(&w.env),
        [csi::plugin_capability::volume_expansion::Type::ONLINE as i32]
    );
    let plain = Setup::new().start();
    assert!(!has_expand(&plain));
    assert!(online(&plain).is_empty());
    let req = csi::ControllerExpandVolumeRequest {
        volume_id: "7/1/x".into(),
        ..Default::default()
    };
    assert_eq!(
        err_code(plain.client.controller_expand_volume(&req)),
        Code::UNIMPLEMENTED
    );
}

#[test]
fn a_backend_that_wants_the_export_in_quota_paths_gets_it() {
    let w = world();
    w.env.linode.set_quota_behaviour(QuotaBehaviour {
        path_with_export: true,
        ..QuotaBehaviour::default()
    });
    let v = w.create_ok("pvc-exp", GIB, &[]);
    let export = w.export.file_name().unwrap().to_string_lossy().into_owned();
    assert_eq!(w.quota_paths(), [format!("/{export}/csi-volumes/pvc-exp")]);
    // Found again in that form: a retry, a growth, a delete.
    w.create_ok("pvc-exp", GIB, &[]);
    assert_eq!(w.quotas().len(), 1);
    assert_eq!(
        w.expand(&v.volume_id, 2 * GIB).unwrap().capacity_bytes,
        2 * GIB
    );
    w.env.delete(&v.volume_id).unwrap();
    assert!(w.quotas().is_empty() && w.dirs().is_empty());
}

#[test]
fn list_pages_through_directory_volumes_and_reports_their_condition() {
    let w = world();
    let whole = w.env.create_ok("pvc-whole");
    let a = w.create_ok("pvc-a", GIB, &[]);
    let b = w.create_ok("pvc-b", GIB, &[]);
    let list = |token: &str| {
        let mut req = csi::ListVolumesRequest::new();
        req.max_entries = 1;
        req.starting_token = token.to_string();
        w.env.client.list_volumes(&req).unwrap()
    };
    let mut seen = Vec::new();
    let mut token = String::new();
    loop {
        let page = list(&token);
        assert_eq!(page.entries.len(), 1);
        seen.push(page.entries[0].volume.volume_id.clone());
        if page.next_token.is_empty() {
            break;
        }
        token = page.next_token;
    }
    assert_eq!(
        seen,
        [whole.volume_id, a.volume_id.clone(), b.volume_id.clone()]
    );
    // A token naming a directory volume is good for a fresh walk too.
    let mut fresh = csi::ListVolumesRequest::new();
    fresh.starting_token = b.volume_id.clone();
    let rest = w.env.client.list_volumes(&fresh).unwrap();
    assert_eq!(rest.entries.len(), 1);
    assert_eq!(rest.entries[0].volume.volume_id, b.volume_id);

    let quota = w
        .quotas()
        .into_iter()
        .find(|q| q.path.ends_with("pvc-a"))
        .unwrap();
    assert!(w.env.linode.set_quota_usage(quota.id, 2 * GIB, 10));
    let got = w.env.get_volume(&a.volume_id).unwrap();
    assert!(got.status.volume_condition.abnormal);
    assert!(
        got.status.volume_condition.message.contains("exceeded"),
        "{}",
        got.status.volume_condition.message
    );
    let all = w
        .env
        .client
        .list_volumes(&csi::ListVolumesRequest::new())
        .unwrap();
    let abnormal: Vec<&str> = all
        .entries
        .iter()
        .filter(|e| e.status.volume_condition.abnormal)
        .map(|e| e.volume.volume_id.as_str())
        .collect();
    assert_eq!(abnormal, [a.volume_id.as_str()]);
}

#[test]
fn validate_confirms_only_what_holds_for_a_directory_volume() {
    let w = world();
    let v = w.create_ok("pvc-val", GIB, &[]);
    let validate = |params: Vec<(&'static str, String)>, ctx: &[(&str, &str)]| {
        let mut req = csi::ValidateVolumeCapabilitiesRequest::new();
        req.volume_id = v.volume_id.clone();
        req.volume_capabilities = vec![mount_cap(Mode::MULTI_NODE_MULTI_WRITER)];
        req.parameters = common::controller::params(params);
        req.volume_context = ctx
            .iter()
            .map(|(k, val)| (k.to_string(), val.to_string()))
            .collect();
        w.env.client.validate_volume_capabilities(&req).unwrap()
    };
    assert!(validate(w.class(&[]), &[("volume-type", "subdirectory")])
        .confirmed
        .is_some());
    assert!(validate(vec![], &[]).confirmed.is_some());
    let whole = validate(by_id(), &[]);
    assert!(whole.confirmed.is_none() && !whole.message.is_empty());
    let ctx = validate(vec![], &[("quota", "absent")]);
    assert!(ctx.confirmed.is_none(), "it has a quota");
    let mut req = csi::ValidateVolumeCapabilitiesRequest::new();
    req.volume_id = w.id("nobody");
    req.volume_capabilities = vec![mount_cap(Mode::MULTI_NODE_MULTI_WRITER)];
    assert_eq!(
        code_of(&w.env.client.validate_volume_capabilities(&req).unwrap_err()),
        Code::NOT_FOUND
    );
}

#[test]
fn a_create_cut_short_by_its_wait_is_finished_by_a_retry_after_a_restart() {
    let mut w = world_with(|s| s.wait_timeout("1s"));
    w.env.linode.set_quota_behaviour(QuotaBehaviour {
        lifecycle: Some(Lifecycle::NeverActive),
        ..QuotaBehaviour::default()
    });
    let e = w.create("pvc-slow", GIB, &[]).unwrap_err();
    assert_eq!(code_of(&e), Code::DEADLINE_EXCEEDED, "{e:?}");
    // Nothing handed out, nothing lost: the directory keeps its quota.
    assert_eq!(w.quota_paths(), ["/csi-volumes/pvc-slow"]);
    assert_eq!(w.quotas()[0].status, Status::Updating);
    assert_eq!(w.dirs(), ["pvc-slow"]);
    assert_eq!(w.markers(), ["pvc-slow"]);

    w.env.driver.kill();
    w.env.restart();
    w.env.linode.set_quota_behaviour(QuotaBehaviour::default());
    let v = w.create_ok("pvc-slow", GIB, &[]);
    assert_eq!(v.capacity_bytes, GIB);
    assert_eq!(w.quotas().len(), 1);
    assert_eq!(w.quotas()[0].status, Status::Active);
    assert_eq!(
        w.quota_calls("POST"),
        1,
        "the quota was found, not made again"
    );
    assert_eq!(w.dirs(), ["pvc-slow"]);
}

/// Creates on one parent that need its quota list at the same time share
/// one: a create waits for the next list that starts after it arrived, and
/// every create waiting then shares it. A list here takes a second, so the
/// creates that arrive while the first is under way (all of them, each a
/// few milliseconds behind the other) share the second. Once that list has
/// seeded the parent's account, creates read the account: ten more, one
/// after the other (so that each waits for its own quota with a plain GET,
/// never a list), list nothing, and the parent, read by the first create,
/// is not read again either.
#[test]
fn concurrent_creates_share_the_parents_quota_list_then_its_account() {
    const CREATES: usize = 30;
    let w = world_with(|s| s.env("WORKER_THREADS", "32"));
    let lists = || {
        w.env
            .linode
            .calls("GET", "nfs/spaces/*/filesystems/*/quotas")
    };
    let parent_reads = || w.env.linode.calls("GET", "nfs/spaces/*/filesystems/*");
    w.env.linode.inject(FaultRule::latency(
        "GET",
        "nfs/spaces/*/filesystems/*/quotas",
        std::time::Duration::from_secs(1),
    ));
    let burst = || {
        std::thread::scope(|s| {
            let calls: Vec<_> = (0..CREATES)
                .map(|i| {
                    let w = &w;
                    s.spawn(move || w.create_ok(&format!("pvc-{i:02}"), GIB, &[]))
                })
                .collect();
            for c in calls {
                c.join().unwrap();
            }
        })
    };
    burst();
    let seeded = lists();
    assert!(
        (1..=3).contains(&seeded),
        "{seeded} quota lists for {CREATES} concurrent creates on a parent never read"
    );
    let before = parent_reads();
    for i in CREATES..CREATES + 10 {
        w.create_ok(&format!("pvc-{i:02}"), GIB, &[]);
    }
    assert_eq!(lists(), seeded, "the account was listed again");
    assert_eq!(parent_reads(), before, "the parent read again");
    assert_eq!(w.quotas().len(), CREATES + 10, "one quota each");
}

/// An admin's quota made behind the driver's back during a burst is
/// counted from the parent account's next read, at most a second later
/// here (`MAINTENANCE_INTERVAL=1s` bounds the account's age): creates
/// decided before that read may not count it, but none decided after it
/// promises what the parent does not hold, and the driver's own quotas
/// alone never exceed its capacity.
#[test]
fn an_admins_quota_made_during_a_burst_is_counted_from_the_next_read() {
    const SIZE: i64 = 5 * GIB;
    const ADMIN: i64 = 50 * GIB;
    let w = world_with(|s| {
        s.env("MAINTENANCE_INTERVAL", "1s")
            .env("WORKER_THREADS", "16")
    });
    let own = || -> i64 {
        w.quotas()
            .iter()
            .filter(|q| q.path.starts_with("/csi-volumes/"))
            .map(|q| q.max_capacity_bytes.unwrap_or(0))
            .sum()
    };
    let made = std::sync::atomic::AtomicUsize::new(0);
    let burst = |from: usize, to: usize, admin: bool| {
        let next = std::sync::atomic::AtomicUsize::new(from);
        std::thread::scope(|s| {
            for _ in 0..4 {
                s.spawn(|| loop {
                    let i = next.fetch_add(1, std::sync::atomic::Ordering::SeqCst);
                    if i >= to {
                        return;
                    }
                    match w.create(&format!("pvc-burst-{i:02}"), SIZE, &[]) {
                        Ok(_) => {
                            let n = made.fetch_add(1, std::sync::atomic::Ordering::SeqCst) + 1;
                            if admin && n == 4 {
                                let added = common::linode::request(
                                    &w.env.linode,
                                    "POST",
                                    &format!("v4beta/nfs/spaces/7/filesystems/{}/quotas", w.parent),
                                    &[],
                                    Some(serde_json::json!({"path": "/team-data", "max_capacity_bytes": ADMIN})),
                                );
                                assert_eq!(added.status, 200, "{}", added.text);
                            }
                        }
                        Err(e) => assert_eq!(code_of(&e), Code::RESOURCE_EXHAUSTED, "{e:?}"),
                    }
                });
            }
        })
    };
    // 12 × 5 GiB, the admin's 50 GiB arriving after the 4th: the driver
    // may count it late, but never promises more than 100 GiB itself.
    burst(0, 12, true);
    let blind = own();
    assert!(blind <= PARENT_CAPACITY, "{blind} promised");
    // Past the account's bound, every create counts the admin's quota.
    let listed = || {
        w.env
            .linode
            .calls("GET", "nfs/spaces/*/filesystems/*/quotas")
    };
    let before = listed();
    common::wait_for(
        "the account to be read again",
        std::time::Duration::from_secs(10),
        || listed() > before,
    );
    burst(12, 30, false);
    // What fits beside the admin's quota is made, and no more.
    assert_eq!(own(), blind.max(PARENT_CAPACITY - ADMIN));
}

/// A controller whose lease lapsed may have missed another process's
/// writes while it stood by: once it holds the lease again it lists each
/// parent before trusting its account, so a quota made meanwhile is
/// counted by the very first create.
#[test]
fn a_regained_lease_lists_the_parent_again_before_the_first_create() {
    let w = world_with(|s| {
        s.env("LINODE_REQUEST_TIMEOUT", "1s")
            .env("LEASE_DURATION", "3s")
            .env("LEASE_RENEW_DEADLINE", "1500ms")
            .env("LEASE_RETRY_PERIOD", "300ms")
    });
    w.create_ok("pvc-a", 10 * GIB, &[]);
    w.env.kube.cut_off_leases(true);
    common::wait_for(
        "the holder to stop writing",
        std::time::Duration::from_secs(10),
        || {
            w.create("pvc-cut", GIB, &[])
                .is_err_and(|e| code_of(&e) == Code::UNAVAILABLE)
        },
    );
    // Another writer's 85 GiB while this one stands by.
    let added = common::linode::request(
        &w.env.linode,
        "POST",
        &format!("v4beta/nfs/spaces/7/filesystems/{}/quotas", w.parent),
        &[],
        Some(serde_json::json!({"path": "/team-data", "max_capacity_bytes": 85 * GIB})),
    );
    assert_eq!(added.status, 200, "{}", added.text);
    w.env.kube.cut_off_leases(false);
    let mut answer = None;
    common::wait_for(
        "the holder to write again",
        std::time::Duration::from_secs(10),
        || {
            let got = w.create("pvc-big", 5 * GIB, &[]);
            let writing = !got.as_ref().is_err_and(|e| code_of(e) == Code::UNAVAILABLE);
            answer = Some(got);
            writing
        },
    );
    // 10 GiB + pvc-cut's 1 GiB (made before the holder stopped, or not) and
    // the other writer's 85 GiB leave less than 5 GiB.
    assert_eq!(err_code(answer.unwrap()), Code::RESOURCE_EXHAUSTED);
}
