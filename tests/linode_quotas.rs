//! The real `LinodeCloud`'s quota calls against the fake Linode API over
//! loopback HTTP: create → `updating` → `active`, update, delete, the 404s,
//! pagination, the path filter, a backend without the quota API told apart
//! from a missing filesystem, each quota variant's answer, a quota that
//! needs its directory, usage sampled from the exports' content, and the
//! quota table surviving a restart of the fake.

mod common;

use common::wait_for;
use linode_nfs_csi::fake::{
    DirUsage, ExportContent, FakeLinode, FilesystemSeed, Lifecycle, QuotaBehaviour, Seed, SpaceSeed,
};
use linode_nfs_csi::linode::{
    Cloud, LinodeCloud, LinodeSettings, NewQuota, Quota, QuotaUpdate, RetryPolicy, Status,
};
use linode_nfs_csi::Error;
use std::sync::Arc;
use std::time::Duration;

fn seed() -> Seed {
    let mut seed = Seed::default();
    seed.spaces.push(SpaceSeed::new(7, "shared"));
    seed.filesystems
        .push(FilesystemSeed::new(7, "dev-shared", "us-ord"));
    seed
}

/// The quotas made through the API (every filesystem's root quota aside).
fn made(quotas: Vec<Quota>) -> Vec<Quota> {
    quotas.into_iter().filter(|q| !q.is_root).collect()
}

fn client(fake: &FakeLinode) -> LinodeCloud {
    LinodeCloud::new(LinodeSettings {
        base_url: fake.url(),
        request_timeout: Duration::from_secs(5),
        retry: RetryPolicy {
            max_attempts: 2,
            base_delay: Duration::from_millis(1),
            max_delay: Duration::from_millis(5),
            retry_after_cap: Duration::from_millis(50),
        },
        ..LinodeSettings::new(fake.token())
    })
    .unwrap()
}

fn fs_id(fake: &FakeLinode) -> u64 {
    fake.filesystems()[0].id
}

fn new_quota(path: &str) -> NewQuota {
    NewQuota {
        path: path.to_string(),
        max_capacity_bytes: 1 << 30,
        max_file_count: Some(1000),
    }
}

fn await_status(cloud: &LinodeCloud, fs: u64, id: u64, want: &Status) {
    wait_for(
        &format!("quota {id} to turn {want}"),
        Duration::from_secs(10),
        || &cloud.get_quota(7, fs, id).unwrap().status == want,
    );
}

/// The fake turns into a backend without the quota API: even the list of
/// a filesystem that exists is Unimplemented.
fn lose_the_quota_api(fake: &FakeLinode, cloud: &LinodeCloud, fs: u64) {
    fake.set_quota_behaviour(QuotaBehaviour {
        missing: true,
        ..QuotaBehaviour::default()
    });
    assert!(matches!(
        cloud.list_quotas(7, fs),
        Err(Error::Unimplemented(_))
    ));
}

/// A fake with the seed's Space and filesystem, the client on it, and that
/// filesystem's id.
fn setup() -> (FakeLinode, LinodeCloud, u64) {
    let fake = FakeLinode::start(seed()).unwrap();
    let cloud = client(&fake);
    let fs = fs_id(&fake);
    (fake, cloud, fs)
}

#[test]
fn a_quota_is_created_updating_turns_active_and_is_updated_and_deleted() {
    let (fake, cloud, fs) = setup();
    fake.set_activation_delay(Duration::from_millis(200));
    let q = cloud
        .create_quota(7, fs, &new_quota("/csi-volumes/a"))
        .unwrap();
    assert_eq!(q.status, Status::Updating);
    assert_eq!(q.path, "/csi-volumes/a");
    assert_eq!(q.max_capacity_bytes, Some(1 << 30));
    assert_eq!(q.used_capacity_bytes, None);
    assert_eq!(q.collected_at, None);
    await_status(&cloud, fs, q.id, &Status::Active);

    let grown = QuotaUpdate {
        max_capacity_bytes: Some(2 << 30),
        max_file_count: None,
    };
    let u = cloud.update_quota(7, fs, q.id, &grown).unwrap();
    assert_eq!(u.status, Status::Updating);
    assert_eq!(u.max_capacity_bytes, Some(2 << 30));
    assert_eq!(u.max_file_count, Some(1000));
    await_status(&cloud, fs, q.id, &Status::Active);

    assert!(fake.set_quota_usage(q.id, 3 << 30, 10));
    let used = cloud.get_quota(7, fs, q.id).unwrap();
    assert_eq!(used.used_capacity_bytes, Some(3 << 30));
    assert!(used.quota_exceeded);
    assert!(used.collected_at.is_some());

    cloud.delete_quota(7, fs, q.id).unwrap();
    assert!(made(fake.quotas()).is_empty());
    assert!(matches!(
        cloud.get_quota(7, fs, q.id),
        Err(Error::NotFound(_))
    ));
    assert!(matches!(
        cloud.delete_quota(7, fs, q.id),
        Err(Error::NotFound(_))
    ));
}

#[test]
fn lists_page_and_filter_by_path_and_refuse_bad_posts() {
    let (fake, cloud, fs) = setup();
    fake.set_page_size(Some(2));
    for i in 0..5 {
        cloud
            .create_quota(7, fs, &new_quota(&format!("/csi-volumes/v{i}")))
            .unwrap();
    }
    assert_eq!(made(cloud.list_quotas(7, fs).unwrap()).len(), 5);
    let found = cloud.find_quotas_by_path(7, fs, "/csi-volumes/v3").unwrap();
    assert_eq!(found.len(), 1);
    assert_eq!(found[0].path, "/csi-volumes/v3");

    let dup = cloud
        .create_quota(7, fs, &new_quota("/csi-volumes/v3"))
        .unwrap_err();
    assert!(matches!(dup.error, Error::FailedPrecondition(_)), "{dup}");
    assert!(!dup.maybe_applied);
    for bad in ["relative", "/a/../b", "/", "/a//b"] {
        let e = cloud.create_quota(7, fs, &new_quota(bad)).unwrap_err();
        assert!(matches!(e.error, Error::InvalidArgument(_)), "{bad}: {e}");
    }
    let zero = NewQuota {
        max_capacity_bytes: 0,
        ..new_quota("/csi-volumes/zero")
    };
    assert!(matches!(
        cloud.create_quota(7, fs, &zero).unwrap_err().error,
        Error::InvalidArgument(_)
    ));
    assert!(matches!(cloud.list_quotas(7, 999), Err(Error::NotFound(_))));
    assert!(matches!(
        cloud
            .create_quota(7, 999, &new_quota("/x"))
            .unwrap_err()
            .error,
        Error::NotFound(_)
    ));
    assert_eq!(made(fake.quotas()).len(), 5);
}

#[test]
fn a_backend_without_quotas_is_told_from_a_missing_filesystem() {
    let (fake, cloud, fs) = setup();
    lose_the_quota_api(&fake, &cloud, fs);
    assert!(matches!(
        cloud.find_quotas_by_path(7, fs, "/x"),
        Err(Error::Unimplemented(_))
    ));
    let e = cloud.create_quota(7, fs, &new_quota("/x")).unwrap_err();
    assert!(matches!(e.error, Error::Unimplemented(_)), "{e}");
    assert!(!e.maybe_applied);
    assert!(matches!(cloud.list_quotas(7, 999), Err(Error::NotFound(_))));
}

#[test]
fn each_quota_variant_answers_as_documented() {
    let (fake, cloud, fs) = setup();
    let export = fake.filesystems()[0]
        .mount_target_fqdn
        .clone()
        .unwrap()
        .split_once(':')
        .unwrap()
        .1
        .to_string();

    fake.set_quota_behaviour(QuotaBehaviour {
        refused: true,
        ..QuotaBehaviour::default()
    });
    let e = cloud.create_quota(7, fs, &new_quota("/r")).unwrap_err();
    assert!(matches!(e.error, Error::InvalidArgument(_)), "{e}");
    assert!(e.error.message().contains("[path]"), "{e}");

    fake.set_quota_behaviour(QuotaBehaviour {
        limit: Some(1),
        ..QuotaBehaviour::default()
    });
    cloud.create_quota(7, fs, &new_quota("/l1")).unwrap();
    let e = cloud.create_quota(7, fs, &new_quota("/l2")).unwrap_err();
    assert!(matches!(e.error, Error::InvalidArgument(_)), "{e}");

    fake.set_quota_behaviour(QuotaBehaviour {
        path_with_export: true,
        ..QuotaBehaviour::default()
    });
    let e = cloud.create_quota(7, fs, &new_quota("/p")).unwrap_err();
    assert!(matches!(e.error, Error::InvalidArgument(_)), "{e}");
    let prefixed = format!("{export}/p");
    let q = cloud.create_quota(7, fs, &new_quota(&prefixed)).unwrap();
    assert_eq!(q.path, prefixed);
    assert_eq!(
        cloud.find_quotas_by_path(7, fs, &prefixed).unwrap().len(),
        1
    );

    for (lifecycle, want) in [
        (Lifecycle::NeverActive, Status::Updating),
        (Lifecycle::StickInError, Status::Error),
    ] {
        fake.set_quota_behaviour(QuotaBehaviour {
            lifecycle: Some(lifecycle),
            ..QuotaBehaviour::default()
        });
        let q = cloud
            .create_quota(7, fs, &new_quota(&format!("/{lifecycle:?}")))
            .unwrap();
        // No activation delay: the next read would show the settled status.
        assert_eq!(cloud.get_quota(7, fs, q.id).unwrap().status, want);
    }
}

#[test]
fn quotas_survive_a_restart_of_the_fake() {
    let dir = common::TempDir::new("quotas");
    let file = dir.path().join("linode.json");
    let (fs, id) = {
        let fake = FakeLinode::start_persistent(seed(), &file).unwrap();
        let cloud = client(&fake);
        let fs = fs_id(&fake);
        (
            fs,
            cloud.create_quota(7, fs, &new_quota("/kept")).unwrap().id,
        )
    };
    let fake = FakeLinode::start_persistent(seed(), &file).unwrap();
    let cloud = client(&fake);
    let q = cloud.get_quota(7, fs, id).unwrap();
    assert_eq!(q.path, "/kept");
    assert_eq!(q.status, Status::Active);
}

/// Exports as a table: the directories that exist, and their usage.
#[derive(Default)]
struct Content {
    dirs: std::sync::Mutex<std::collections::BTreeMap<(String, String), DirUsage>>,
}

impl Content {
    fn add(&self, export: &str, path: &str, bytes: i64, files: i64) {
        self.dirs.lock().unwrap().insert(
            (export.to_string(), path.to_string()),
            DirUsage {
                bytes,
                files,
                collected_at: None,
            },
        );
    }
}

impl ExportContent for Content {
    fn is_directory(&self, export: &str, path: &str) -> bool {
        self.usage(export, path).is_some()
    }

    fn usage(&self, export: &str, path: &str) -> Option<DirUsage> {
        self.dirs
            .lock()
            .unwrap()
            .get(&(export.to_string(), path.to_string()))
            .copied()
    }
}

fn export_of(fake: &FakeLinode) -> String {
    fake.active_exports()[0].clone()
}

#[test]
fn a_quota_needing_its_directory_is_refused_until_the_export_has_it() {
    let (fake, cloud, fs) = setup();
    fake.set_quota_behaviour(QuotaBehaviour {
        needs_directory: true,
        ..QuotaBehaviour::default()
    });
    // Nobody answers for the files: no directory exists.
    let e = cloud
        .create_quota(7, fs, &new_quota("/csi-volumes/a"))
        .unwrap_err();
    assert!(matches!(e.error, Error::InvalidArgument(_)), "{e}");
    assert!(e.error.message().contains("[path]"), "{e}");
    assert!(!e.maybe_applied);

    let content = Arc::new(Content::default());
    fake.set_export_content(content.clone());
    assert!(cloud
        .create_quota(7, fs, &new_quota("/csi-volumes/a"))
        .is_err());
    content.add(&export_of(&fake), "/csi-volumes/a", 0, 1);
    let q = cloud
        .create_quota(7, fs, &new_quota("/csi-volumes/a"))
        .unwrap();
    assert_eq!(q.path, "/csi-volumes/a");
    assert_eq!(made(fake.quotas()).len(), 1);

    // Under the export-path variant too, the directory is the plain path.
    fake.set_quota_behaviour(QuotaBehaviour {
        needs_directory: true,
        path_with_export: true,
        ..QuotaBehaviour::default()
    });
    let export = export_of(&fake);
    let prefixed = |p: &str| new_quota(&format!("{export}{p}"));
    assert!(cloud
        .create_quota(7, fs, &prefixed("/csi-volumes/b"))
        .is_err());
    content.add(&export, "/csi-volumes/b", 0, 1);
    cloud
        .create_quota(7, fs, &prefixed("/csi-volumes/b"))
        .unwrap();
    assert_eq!(made(fake.quotas()).len(), 2);
}

#[test]
fn usage_is_sampled_from_the_export_on_every_read() {
    let (fake, cloud, fs) = setup();
    let q = cloud
        .create_quota(7, fs, &new_quota("/csi-volumes/u"))
        .unwrap();
    // The plain fake shows what a test set.
    assert!(fake.set_quota_usage(q.id, 5, 2));
    assert_eq!(
        cloud.get_quota(7, fs, q.id).unwrap().used_capacity_bytes,
        Some(5)
    );

    let content = Arc::new(Content::default());
    fake.set_export_content(content.clone());
    // No directory yet: not sampled, whatever was set before.
    let unsampled = cloud.get_quota(7, fs, q.id).unwrap();
    assert_eq!(
        (
            unsampled.used_capacity_bytes,
            unsampled.used_file_count,
            unsampled.collected_at
        ),
        (None, None, None)
    );
    assert!(!unsampled.quota_exceeded);

    let export = export_of(&fake);
    content.add(&export, "/csi-volumes/u", 4096, 3);
    let used = cloud.get_quota(7, fs, q.id).unwrap();
    assert_eq!(used.used_capacity_bytes, Some(4096));
    assert_eq!(used.used_file_count, Some(3));
    assert!(used.collected_at.is_some());
    assert!(!used.quota_exceeded);

    // Over the file limit (1000), then over the byte limit.
    content.add(&export, "/csi-volumes/u", 4096, 1001);
    assert!(cloud.get_quota(7, fs, q.id).unwrap().quota_exceeded);
    content.add(&export, "/csi-volumes/u", (1 << 30) + 1, 3);
    let listed = made(cloud.list_quotas(7, fs).unwrap());
    assert_eq!(listed[0].used_capacity_bytes, Some((1 << 30) + 1));
    assert!(listed[0].quota_exceeded);
    assert!(made(fake.quotas())[0].quota_exceeded, "inspection agrees");
}

#[test]
fn every_filesystem_shows_a_read_only_root_quota_of_its_whole_capacity() {
    let (fake, cloud, fs) = setup();
    let capacity = fake.filesystems()[0].max_capacity_bytes;
    let listed = cloud.list_quotas(7, fs).unwrap();
    assert_eq!(listed.len(), 1, "{listed:?}");
    let root = &listed[0];
    assert!(root.is_root);
    assert_eq!(root.path, "/");
    assert_eq!(root.max_capacity_bytes, capacity);
    assert_eq!(root.status, Status::Active);
    assert_eq!(cloud.get_quota(7, fs, root.id).unwrap().id, root.id);
    assert!(matches!(
        cloud.get_quota(7, 999, root.id),
        Err(Error::NotFound(_))
    ));

    let grown = QuotaUpdate {
        max_capacity_bytes: Some(1 << 30),
        max_file_count: None,
    };
    let e = cloud.update_quota(7, fs, root.id, &grown).unwrap_err();
    assert!(matches!(e.error, Error::InvalidArgument(_)), "{e}");
    assert!(matches!(
        cloud.delete_quota(7, fs, root.id),
        Err(Error::InvalidArgument(_))
    ));
    let made_one = cloud
        .create_quota(7, fs, &new_quota("/csi-volumes/a"))
        .unwrap();
    assert_ne!(made_one.id, root.id);
    let after = cloud.list_quotas(7, fs).unwrap();
    assert_eq!(after.len(), 2);
    assert_eq!(&after[0], root, "unchanged, and first");

    // A backend that writes the export in front shows the root as the export.
    fake.set_quota_behaviour(QuotaBehaviour {
        path_with_export: true,
        ..QuotaBehaviour::default()
    });
    let export = export_of(&fake);
    assert_eq!(cloud.get_quota(7, fs, root.id).unwrap().path, export);
    // Without the quota API there is no root quota either.
    lose_the_quota_api(&fake, &cloud, fs);
}
