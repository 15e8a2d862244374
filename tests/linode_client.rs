//! The real `LinodeCloud` against the fake Linode API over loopback HTTP:
//! every `Cloud` method, pagination, filters, each error class and its
//! `crate::Error`, retries (bounded; a POST only after a 429), rate-limit pacing, and
//! the token never showing up in an error or a log line. The shared poller
//! has its own suite (`poller.rs`).

mod common;

use common::block_on;
use linode_nfs_csi::fake::{
    FakeLinode, FaultProfile, FaultRule, Injected, InstanceSeed, Lifecycle, RateLimit, Seed,
    SpaceSeed, VpcAttachment,
};
use linode_nfs_csi::flow::done;
use linode_nfs_csi::linode::{
    CloneFilesystem, Cloud, FilesystemAccessPolicyUpdate, InterfaceGeneration, InterfacePurpose,
    LinodeCloud, LinodeSettings, MtlsMode, NewFilesystem, Poller, RequestClass, RetryPolicy,
    SquashPolicy, Status, WaitPolicy,
};
use linode_nfs_csi::Error;
use std::sync::Arc;
use std::sync::{Mutex, OnceLock};
use std::time::{Duration, Instant};

const TOKEN: &str = "sekrit-linode-token-0123456789";

fn seed() -> Seed {
    let mut seed = Seed {
        token: TOKEN.to_string(),
        ..Seed::default()
    };
    seed.spaces.push(SpaceSeed::new(7, "shared"));
    seed.spaces.push(SpaceSeed {
        mtls_mode: "required".into(),
        ..SpaceSeed::new(8, "other")
    });
    seed.spaces.push(SpaceSeed {
        policy_missing: true,
        ..SpaceSeed::new(9, "legacy")
    });
    seed.instances.push(InstanceSeed {
        id: 61234567,
        label: "node-a".into(),
        region: "us-ord".into(),
        interface_generation: Some("legacy_config".into()),
        ipv6: Some("2001:db8::a/128".into()),
        vpcs: vec![VpcAttachment {
            vpc_id: 5521,
            subnet_id: 99001,
            address: Some("10.0.0.5".into()),
        }],
    });
    seed.instances.push(InstanceSeed {
        id: 61234568,
        label: "node-b".into(),
        region: "us-ord".into(),
        interface_generation: Some("linode".into()),
        ipv6: None,
        vpcs: vec![VpcAttachment {
            vpc_id: 5521,
            subnet_id: 99002,
            address: None,
        }],
    });
    seed.instances.push(InstanceSeed {
        id: 61234569,
        label: "node-c".into(),
        region: "us-ord".into(),
        interface_generation: None,
        ipv6: None,
        vpcs: vec![],
    });
    seed
}

fn fast_retry() -> RetryPolicy {
    RetryPolicy {
        max_attempts: 4,
        base_delay: Duration::from_millis(1),
        max_delay: Duration::from_millis(5),
        retry_after_cap: Duration::from_millis(50),
    }
}

fn settings(fake: &FakeLinode) -> LinodeSettings {
    LinodeSettings {
        base_url: fake.url(),
        request_timeout: Duration::from_secs(5),
        retry: fast_retry(),
        ..LinodeSettings::new(fake.token())
    }
}

/// A client that honours a server's `Retry-After` of up to 30 s.
fn patient(fake: &FakeLinode) -> LinodeCloud {
    LinodeCloud::new(LinodeSettings {
        retry: RetryPolicy {
            retry_after_cap: Duration::from_secs(30),
            ..fast_retry()
        },
        ..settings(fake)
    })
    .unwrap()
}

fn setup() -> (FakeLinode, Arc<LinodeCloud>) {
    let fake = FakeLinode::start(seed()).unwrap();
    let cloud = Arc::new(LinodeCloud::new(settings(&fake)).unwrap());
    (fake, cloud)
}

/// A poller over `cloud` that polls fast.
fn poller(cloud: &Arc<LinodeCloud>) -> Poller {
    Poller::new(cloud.clone(), fast_wait(Duration::from_secs(5)))
}

fn new_fs(label: &str) -> NewFilesystem {
    NewFilesystem {
        label: label.into(),
        region: "us-ord".into(),
        max_capacity_bytes: 10 << 30,
        tags: vec![],
    }
}

fn fast_wait(timeout: Duration) -> WaitPolicy {
    WaitPolicy {
        timeout,
        initial_delay: Duration::from_millis(2),
        max_delay: Duration::from_millis(20),
    }
}

/// A disabled, empty policy of `label` that squashes everyone.
fn all_squash(label: &str) -> FilesystemAccessPolicyUpdate {
    FilesystemAccessPolicyUpdate {
        label: label.into(),
        enabled: false,
        linode_ids: vec![],
        squash_policy: SquashPolicy::AllSquash,
        protocols: vec!["nfsv4".into()],
    }
}

fn last(fake: &FakeLinode, method: &str) -> linode_nfs_csi::fake::RequestRecord {
    fake.requests()
        .into_iter()
        .rev()
        .find(|r| r.method == method)
        .expect("a request with that method")
}

#[test]
fn spaces_by_id_and_label_and_the_headers_sent() {
    let (fake, cloud) = setup();
    let space = cloud.get_space(7).unwrap();
    assert_eq!((space.id, space.label.as_str()), (7, "shared"));
    assert_eq!(space.status, Status::Active);

    let req = last(&fake, "GET");
    assert_eq!(req.version, "v4beta");
    assert_eq!(req.content_type.as_deref(), Some("application/json"));
    assert_eq!(req.accept.as_deref(), Some("application/json"));
    assert!(req.user_agent.unwrap().starts_with("linode-nfs-csi/"));
    assert_eq!(req.x_filter, None, "X-Filter only on filtered lists");

    fake.add_space(SpaceSeed::new(10, "shared"));
    let found = cloud.find_spaces_by_label("shared").unwrap();
    assert_eq!(found.iter().map(|s| s.id).collect::<Vec<_>>(), [7, 10]);
    let req = last(&fake, "GET");
    assert_eq!(
        serde_json::from_str::<serde_json::Value>(req.x_filter.as_deref().unwrap()).unwrap(),
        serde_json::json!({"label": "shared"})
    );
    assert!(cloud.find_spaces_by_label("nope").unwrap().is_empty());

    let err = cloud.get_space(999).unwrap_err();
    assert!(matches!(err, Error::NotFound(_)), "{err:?}");
    assert!(err.message().contains("[404] Not found"), "{err}");
    assert!(
        err.message().contains("999"),
        "the operation is named: {err}"
    );
}

#[test]
fn lists_follow_every_page() {
    let (fake, cloud) = setup();
    for id in 100..160 {
        fake.add_space(SpaceSeed::new(id, &format!("s{id}")));
    }
    fake.set_page_size(Some(25));
    fake.clear_requests();
    let spaces = cloud.list_spaces().unwrap();
    assert_eq!(spaces.len(), 63);
    let queries: Vec<_> = fake.requests().into_iter().map(|r| r.query).collect();
    assert_eq!(queries, ["page=1", "page=2", "page=3"]);

    for n in 0..9 {
        cloud
            .create_filesystem(7, &new_fs(&format!("pvc-{n}")))
            .unwrap();
    }
    cloud.create_filesystem(7, &new_fs("pvc-3")).unwrap();
    fake.set_page_size(Some(2));
    fake.clear_requests();
    assert_eq!(cloud.list_filesystems(7).unwrap().len(), 10);
    assert_eq!(fake.calls("GET", "nfs/spaces/7/filesystems"), 5);
    // The filter travels with every page.
    let found = cloud.find_filesystems(7, "pvc-3", "us-ord").unwrap();
    assert_eq!(found.len(), 2, "duplicate labels are not merged");
    assert!(found.iter().all(|f| f.label == "pvc-3"));
}

#[test]
fn snapshot_lists_ask_for_500_per_page_and_aggregate() {
    let (fake, cloud) = setup();
    let fs = cloud.create_filesystem(7, &new_fs("pvc-snaps")).unwrap();
    for n in 0..5 {
        cloud
            .create_snapshot(7, fs.id, &format!("snap-{n}"), &[])
            .unwrap();
    }
    fake.set_page_size(Some(2));
    fake.clear_requests();
    let snaps = cloud.list_snapshots(7, fs.id).unwrap();
    assert_eq!(snaps.len(), 5);
    let queries: Vec<_> = fake.requests().into_iter().map(|r| r.query).collect();
    assert_eq!(
        queries,
        [
            "page=1&page_size=500",
            "page=2&page_size=500",
            "page=3&page_size=500"
        ]
    );
}

#[test]
fn space_access_policy_reports_mtls_mode_or_none_where_the_endpoint_is_missing() {
    let (fake, cloud) = setup();
    let p = cloud.get_space_access_policy(8).unwrap().unwrap();
    assert_eq!(p.mtls_mode, Some(MtlsMode::Required));
    assert_eq!(p.status, Status::Active);
    assert_eq!(
        cloud.get_space_access_policy(7).unwrap().unwrap().mtls_mode,
        Some(MtlsMode::Disabled)
    );
    // A backend without the endpoint: 404 or 501 both mean "no policy".
    assert_eq!(cloud.get_space_access_policy(9).unwrap(), None);
    fake.inject(FaultRule::status("GET", "nfs/spaces/*/access-policy", 501).times(1));
    assert_eq!(cloud.get_space_access_policy(7).unwrap(), None);
    // Elsewhere a 501 stays a failure, and so does any other status here.
    fake.inject(FaultRule::status("GET", "nfs/spaces/*", 501).times(1));
    assert!(matches!(cloud.get_space(7), Err(Error::Internal(_))));
    fake.inject(FaultRule::status("GET", "nfs/spaces/*/access-policy", 500).times(1));
    assert!(matches!(
        cloud.get_space_access_policy(7),
        Err(Error::Internal(_))
    ));
}

#[test]
fn filesystem_create_wait_find_delete() {
    let (fake, cloud) = setup();
    fake.set_deletion_delay(Duration::from_secs(60));
    let created = cloud.create_filesystem(7, &new_fs("pvc-0a1b")).unwrap();
    assert_eq!(created.status, Status::Creating);
    assert_eq!(created.mount_target_fqdn, None);
    assert!(created.mount_target_ips.is_empty());
    let body = last(&fake, "POST").json();
    assert_eq!(
        body,
        serde_json::json!({"label": "pvc-0a1b", "region": "us-ord",
            "max_capacity_bytes": 10u64 << 30, "protocol_versions": ["nfsv4"]}),
        "empty tags are omitted"
    );

    let active = block_on(poller(&cloud).filesystem(created.clone(), done)).unwrap();
    let export = format!("/pvc-0a1b-{:x}", created.id);
    assert_eq!(
        active.mount_target_fqdn.as_deref(),
        Some(format!("shared.nfs.us-ord.example:{export}").as_str())
    );
    assert_eq!(
        active.mount_target_ips,
        [format!("[2001:db8::{:x}]:{export}", created.id)]
    );
    assert_eq!(active.max_capacity_bytes, Some(10 << 30));

    let tagged = NewFilesystem {
        tags: vec!["cluster-blue".into()],
        ..new_fs("pvc-tagged")
    };
    let fs2 = cloud.create_filesystem(7, &tagged).unwrap();
    assert_eq!(
        last(&fake, "POST").json()["tags"],
        serde_json::json!(["cluster-blue"])
    );
    assert_eq!(fs2.tags, ["cluster-blue"]);

    let found = cloud.find_filesystems(7, "pvc-0a1b", "us-ord").unwrap();
    assert_eq!(found.iter().map(|f| f.id).collect::<Vec<_>>(), [created.id]);
    let filter = last(&fake, "GET").x_filter.unwrap();
    assert_eq!(
        serde_json::from_str::<serde_json::Value>(&filter).unwrap(),
        serde_json::json!({"label": "pvc-0a1b", "region": "us-ord"})
    );
    assert!(cloud
        .find_filesystems(7, "pvc-0a1b", "us-sea")
        .unwrap()
        .is_empty());
    assert!(
        cloud
            .get_filesystem(8, created.id)
            .unwrap_err()
            .is_not_found(),
        "wrong space"
    );

    cloud.delete_filesystem(7, created.id).unwrap();
    assert_eq!(
        cloud.get_filesystem(7, created.id).unwrap().status,
        Status::Deleting
    );
    fake.set_deletion_delay(Duration::ZERO);
    // A delete accepted earlier completes on its own clock: gone after 60 s.
    assert_eq!(
        cloud.get_filesystem(7, created.id).unwrap().status,
        Status::Deleting
    );
    cloud.delete_filesystem(7, fs2.id).unwrap();
    assert!(cloud.get_filesystem(7, fs2.id).unwrap_err().is_not_found());
    assert!(cloud
        .delete_filesystem(7, fs2.id)
        .unwrap_err()
        .is_not_found());
}

#[test]
fn validation_errors_are_invalid_argument_with_the_field() {
    let (_fake, cloud) = setup();
    let long = NewFilesystem {
        label: "a".repeat(64),
        ..new_fs("x")
    };
    let err = cloud.create_filesystem(7, &long).unwrap_err().error;
    assert!(matches!(err, Error::InvalidArgument(_)), "{err:?}");
    assert!(err.message().contains("[400] [label]"), "{err}");

    let bad_region = NewFilesystem {
        region: "mars-1".into(),
        ..new_fs("ok")
    };
    let err = cloud.create_filesystem(7, &bad_region).unwrap_err().error;
    assert!(
        err.message().contains("[region] region is not valid"),
        "{err}"
    );

    let zero = NewFilesystem {
        max_capacity_bytes: 0,
        ..new_fs("ok")
    };
    assert!(matches!(
        cloud.create_filesystem(7, &zero).unwrap_err().error,
        Error::InvalidArgument(_)
    ));
    assert!(cloud
        .create_filesystem(999, &new_fs("ok"))
        .unwrap_err()
        .error
        .is_not_found());
}

#[test]
fn filesystem_access_policy_full_replace_and_wait() {
    let (fake, cloud) = setup();
    let fs = cloud.create_filesystem(7, &new_fs("pvc-acl")).unwrap();
    let current = cloud
        .get_filesystem_access_policy(7, fs.id)
        .unwrap()
        .unwrap();
    assert_eq!(current.squash_policy, Some(SquashPolicy::RootSquash));
    assert!(!current.enabled);
    assert!(current.linode_acl.is_empty());
    assert_eq!(current.updated, None);

    fake.set_activation_delay(Duration::from_millis(30));
    let update = FilesystemAccessPolicyUpdate {
        label: "pvc-acl".into(),
        enabled: true,
        linode_ids: vec![61234567],
        squash_policy: SquashPolicy::None,
        protocols: vec!["nfsv4".into()],
    };
    let put = cloud
        .put_filesystem_access_policy(7, fs.id, &update)
        .unwrap();
    assert_eq!(put.status, Status::Updating);
    assert_eq!(
        last(&fake, "PUT").json(),
        serde_json::json!({"label": "pvc-acl", "enabled": true, "linode_ids": [61234567],
            "squash_policy": "none", "protocols": ["nfsv4"]})
    );
    let settled = block_on(poller(&cloud).filesystem_policy(7, fs.id, put, done)).unwrap();
    assert_eq!(settled.linode_ids(), [61234567]);
    assert_eq!(settled.linode_acl[0].label.as_deref(), Some("node-a"));
    assert_eq!(settled.linode_acl[0].ipv6.as_deref(), Some("2001:db8::a"));
    assert_eq!(settled.squash_policy, Some(SquashPolicy::None));
    assert!(settled.updated.is_some());

    let unknown = FilesystemAccessPolicyUpdate {
        linode_ids: vec![42],
        ..update
    };
    let err = cloud
        .put_filesystem_access_policy(7, fs.id, &unknown)
        .unwrap_err()
        .error;
    assert!(err.message().contains("[linode_ids]"), "{err}");
    assert!(matches!(err, Error::InvalidArgument(_)));
}

#[test]
fn snapshots_create_duplicate_lock_delete() {
    let (fake, cloud) = setup();
    let fs = cloud.create_filesystem(7, &new_fs("pvc-src")).unwrap();
    let snap = cloud.create_snapshot(7, fs.id, "snap-1", &[]).unwrap();
    assert_eq!(snap.status, Status::Creating);
    assert_eq!(
        last(&fake, "POST").json(),
        serde_json::json!({"label": "snap-1"})
    );
    assert!(snap.created.is_some());

    let dup = cloud
        .create_snapshot(7, fs.id, "snap-1", &[])
        .unwrap_err()
        .error;
    assert!(matches!(dup, Error::FailedPrecondition(_)), "409: {dup:?}");

    let active = block_on(poller(&cloud).snapshot(snap.clone(), done)).unwrap();
    assert_eq!(active.size_bytes, Some(4_194_304));
    assert!(cloud
        .get_snapshot(7, fs.id + 1, snap.id)
        .unwrap_err()
        .is_not_found());

    assert!(fake.set_snapshot_locked(snap.id, true));
    let locked = cloud.delete_snapshot(7, fs.id, snap.id).unwrap_err();
    assert!(matches!(locked, Error::FailedPrecondition(_)), "{locked:?}");
    fake.set_snapshot_locked(snap.id, false);
    cloud.delete_snapshot(7, fs.id, snap.id).unwrap();
    assert!(cloud
        .delete_snapshot(7, fs.id, snap.id)
        .unwrap_err()
        .is_not_found());
    assert!(cloud.list_snapshots(7, fs.id).unwrap().is_empty());
}

#[test]
fn clone_creates_a_filesystem_in_the_target_space() {
    let (fake, cloud) = setup();
    let fs = cloud.create_filesystem(7, &new_fs("pvc-src")).unwrap();
    let snap = cloud.create_snapshot(7, fs.id, "snap-1", &[]).unwrap();
    let clone = CloneFilesystem {
        label: "pvc-restored".into(),
        region: "us-ord".into(),
        space_id: Some(8),
        size_gib: None,
        tags: vec!["t".into()],
    };
    // `creating` snapshot: the fake refuses, as the API is expected to.
    fake.set_snapshot_lifecycle("snap-never", Lifecycle::NeverActive);
    let pending = cloud.create_snapshot(7, fs.id, "snap-never", &[]).unwrap();
    let err = cloud
        .clone_snapshot(7, fs.id, pending.id, &clone)
        .unwrap_err()
        .error;
    assert!(matches!(err, Error::InvalidArgument(_)), "{err:?}");

    let restored = cloud.clone_snapshot(7, fs.id, snap.id, &clone).unwrap();
    assert_eq!(
        last(&fake, "POST").json(),
        serde_json::json!({"label": "pvc-restored", "region": "us-ord", "space_id": 8, "tags": ["t"]})
    );
    assert_eq!(restored.space_id, 8);
    assert_eq!(restored.source_snapshot_id, Some(snap.id));
    assert_eq!(restored.status, Status::Creating);
    let found = cloud.find_filesystems(8, "pvc-restored", "us-ord").unwrap();
    assert_eq!(found[0].source_snapshot_id, Some(snap.id));

    let nowhere = CloneFilesystem {
        space_id: Some(4040),
        ..clone
    };
    assert!(cloud
        .clone_snapshot(7, fs.id, snap.id, &nowhere)
        .unwrap_err()
        .error
        .is_not_found());
    assert!(cloud
        .clone_snapshot(7, fs.id, 1, &nowhere)
        .unwrap_err()
        .error
        .is_not_found());
}

#[test]
fn instances_configs_and_both_interface_envelopes() {
    let (fake, cloud) = setup();
    let a = cloud.get_instance(61234567).unwrap();
    assert_eq!(
        a.interface_generation,
        Some(InterfaceGeneration::LegacyConfig)
    );
    assert_eq!(a.region.as_deref(), Some("us-ord"));
    let configs = cloud.list_instance_configs(61234567).unwrap();
    let vpc: Vec<_> = configs[0]
        .interfaces
        .iter()
        .filter(|i| i.purpose == Some(InterfacePurpose::Vpc))
        .collect();
    assert_eq!(vpc.len(), 1);
    assert!(vpc[0].active);
    assert_eq!((vpc[0].vpc_id, vpc[0].subnet_id), (Some(5521), Some(99001)));

    let b = cloud.get_instance(61234568).unwrap();
    assert_eq!(b.interface_generation, Some(InterfaceGeneration::Linode));
    let plain = cloud.list_instance_interfaces(61234568).unwrap();
    assert_eq!(plain[0].vpc.as_ref().map(|v| v.vpc_id), Some(5521));
    fake.set_interfaces_paginated(true);
    assert_eq!(cloud.list_instance_interfaces(61234568).unwrap(), plain);

    assert_eq!(
        cloud.get_instance(61234569).unwrap().interface_generation,
        None
    );
    assert!(cloud.get_instance(1).unwrap_err().is_not_found());
    assert!(cloud.list_instance_configs(1).unwrap_err().is_not_found());
}

#[test]
fn each_http_error_class_maps_to_its_outcome() {
    let (fake, cloud) = setup();
    type Check = fn(&Error) -> bool;
    let table: [(u16, Check); 6] = [
        (403, |e| matches!(e, Error::PermissionDenied(_))),
        (409, |e| matches!(e, Error::FailedPrecondition(_))),
        (422, |e| matches!(e, Error::InvalidArgument(_))),
        (400, |e| matches!(e, Error::InvalidArgument(_))),
        (500, |e| matches!(e, Error::Internal(_))),
        (501, |e| matches!(e, Error::Internal(_))),
    ];
    for (status, check) in table {
        fake.clear_requests();
        fake.inject(FaultRule::status("GET", "nfs/spaces/7", status).times(1));
        let err = cloud.get_space(7).unwrap_err();
        assert!(check(&err), "{status}: {err:?}");
        assert!(err.message().contains(&format!("[{status}]")), "{err}");
        assert_eq!(
            fake.calls("GET", "nfs/spaces/7"),
            1,
            "{status} is not retried"
        );
    }

    for status in [429, 502, 503, 504] {
        fake.clear_requests();
        fake.inject(FaultRule::status("GET", "nfs/spaces/7", status));
        let err = cloud.get_space(7).unwrap_err();
        assert!(matches!(err, Error::Unavailable(_)), "{status}: {err:?}");
        assert_eq!(
            fake.calls("GET", "nfs/spaces/7"),
            4,
            "{status}: retried up to the bound"
        );
        fake.clear_faults();
    }

    fake.inject(
        FaultRule::status("GET", "nfs/spaces/7", 502)
            .html()
            .times(4),
    );
    let err = cloud.get_space(7).unwrap_err();
    assert!(err.message().contains("[502] Bad Gateway"), "{err}");

    fake.inject(
        FaultRule::status("GET", "nfs/spaces/7", 200)
            .html()
            .times(1),
    );
    let err = cloud.get_space(7).unwrap_err();
    assert!(
        matches!(err, Error::Internal(_)),
        "undecodable 200: {err:?}"
    );

    let wrong = LinodeCloud::new(LinodeSettings {
        token: linode_nfs_csi::secret::Secret::new("not-the-token"),
        ..settings(&fake)
    })
    .unwrap();
    let err = wrong.get_space(7).unwrap_err();
    assert!(matches!(err, Error::PermissionDenied(_)), "{err:?}");
    assert!(err.message().contains("[401] Invalid Token"), "{err}");

    let unreachable = LinodeCloud::new(LinodeSettings {
        base_url: linode_nfs_csi::fake::unreachable_url(),
        ..settings(&fake)
    })
    .unwrap();
    let err = unreachable.get_space(7).unwrap_err();
    assert!(matches!(err, Error::Internal(_)), "transport: {err:?}");
}

#[test]
fn a_request_timeout_is_unavailable_and_not_retried() {
    let (fake, _) = setup();
    let hang = fake.hang("GET", "nfs/spaces/7");
    let cloud = LinodeCloud::new(LinodeSettings {
        request_timeout: Duration::from_millis(200),
        ..settings(&fake)
    })
    .unwrap();
    let err = cloud.get_space(7).unwrap_err();
    assert!(matches!(err, Error::Unavailable(_)), "{err:?}");
    assert!(err.message().contains("timed out"), "{err}");
    assert_eq!(hang.hits(), 1, "a timeout is not retried");
    hang.release();
    assert_eq!(cloud.get_space(7).unwrap().id, 7);
}

#[test]
fn retry_after_is_honoured_and_capped() {
    let (fake, _) = setup();
    let patient = patient(&fake);
    fake.inject(FaultRule::rate_limited("GET", "nfs/spaces/*", 1).times(1));
    let started = Instant::now();
    assert_eq!(patient.get_space(7).unwrap().id, 7);
    assert!(
        started.elapsed() >= Duration::from_secs(1),
        "waited Retry-After"
    );
    assert_eq!(fake.calls("GET", "nfs/spaces/7"), 2);

    // A huge Retry-After is cut to the cap (50 ms here), and attempts are bounded.
    fake.clear_requests();
    let cloud = LinodeCloud::new(settings(&fake)).unwrap();
    fake.inject(FaultRule::rate_limited("GET", "nfs/spaces/*", 3600));
    let started = Instant::now();
    let err = cloud.get_space(7).unwrap_err();
    assert!(matches!(err, Error::Unavailable(_)), "{err:?}");
    assert!(started.elapsed() < Duration::from_secs(5));
    assert_eq!(fake.calls("GET", "nfs/spaces/7"), 4);
}

/// With the budget in the answers' headers, the client slows down before
/// the API refuses it: a burst several times the budget is never throttled,
/// and the other class is never held back by the scarce one.
#[test]
fn the_client_paces_itself_by_the_rate_limit_headers() {
    let (fake, cloud) = setup();
    fake.set_rate_limit(Some(RateLimit {
        list: 10,
        other: 1000,
        window: Duration::from_secs(1),
    }));
    for _ in 0..25 {
        assert_eq!(cloud.list_spaces().unwrap().len(), 3);
        cloud.get_space(7).unwrap();
    }
    assert_eq!(fake.throttled(), 0, "paced before it ran out");
    assert_eq!(fake.calls("GET", "nfs/spaces"), 25);
    let seen = cloud.rate_limit(RequestClass::List);
    assert_eq!(seen.limit, Some(10));
    assert_eq!(seen.throttled, 0);

    // Without the headers' warning, a 429 holds the class back for its
    // Retry-After, for every caller.
    fake.set_rate_limit(None);
    fake.inject(FaultRule::rate_limited("GET", "nfs/spaces", 1).times(1));
    let patient = patient(&fake);
    let started = Instant::now();
    patient.list_spaces().unwrap();
    assert!(
        started.elapsed() >= Duration::from_secs(1),
        "waited Retry-After"
    );
    assert_eq!(patient.rate_limit(RequestClass::List).throttled, 1);
}

/// Many callers at once across several windows: each window's budget is
/// spent to the last request and the next one's taken as soon as it turns,
/// and no answer of a window gone by makes the pacer overspend: the API
/// never has to refuse one.
#[test]
fn concurrent_callers_spend_each_window_without_a_429() {
    let (fake, cloud) = setup();
    fake.set_rate_limit(Some(RateLimit {
        list: 1000,
        other: 10,
        window: Duration::from_secs(1),
    }));
    let callers: Vec<_> = (0..8)
        .map(|_| {
            let cloud = cloud.clone();
            std::thread::spawn(move || {
                for _ in 0..5 {
                    assert_eq!(cloud.get_space(7).unwrap().id, 7);
                }
            })
        })
        .collect();
    for caller in callers {
        caller.join().unwrap();
    }
    assert_eq!(fake.calls("GET", "nfs/spaces/7"), 40, "one request each");
    assert_eq!(fake.throttled(), 0, "never refused");
    assert_eq!(cloud.rate_limit(RequestClass::Other).throttled, 0);
}

#[test]
fn put_and_delete_are_retried_and_a_post_only_after_a_429() {
    let (fake, cloud) = setup();
    let fs = cloud.create_filesystem(7, &new_fs("pvc-r")).unwrap();
    let update = all_squash("pvc-r");
    fake.inject(FaultRule::status("PUT", "**", 503).times(2));
    cloud
        .put_filesystem_access_policy(7, fs.id, &update)
        .unwrap();
    assert_eq!(fake.calls("PUT", "**"), 3);

    fake.inject(FaultRule::busy("DELETE", "**").times(1));
    cloud.delete_filesystem(7, fs.id).unwrap();
    assert_eq!(fake.calls("DELETE", "**"), 2, "`Linode busy.` is transient");

    // Any other transient answer may have come after the POST was
    // processed: never sent again, the caller looks it up by label.
    for status in [503, 502, 504, 408] {
        fake.clear_requests();
        fake.inject(FaultRule::status("POST", "**", status).times(1));
        let err = cloud
            .create_filesystem(7, &new_fs("pvc-post"))
            .unwrap_err()
            .error;
        assert!(matches!(err, Error::Unavailable(_)), "{status}: {err:?}");
        assert_eq!(fake.calls("POST", "**"), 1, "{status}: no retry");
    }

    fake.clear_requests();
    fake.inject(FaultRule::maintenance("GET", "**").times(1));
    assert!(matches!(
        cloud.get_space(7).unwrap_err(),
        Error::Unavailable(_)
    ));
    assert_eq!(fake.calls("GET", "**"), 1, "maintenance is not retried");
}

#[test]
fn a_post_refused_by_the_rate_limiter_is_sent_again_after_retry_after() {
    let (fake, _) = setup();
    let cloud = patient(&fake);
    fake.inject(FaultRule::rate_limited("POST", "**", 1).times(1));
    let started = Instant::now();
    let fs = cloud
        .create_filesystem(7, &new_fs("pvc-429"))
        .unwrap_or_else(|e| panic!("{:?}", e.error));
    assert!(
        started.elapsed() >= Duration::from_secs(1),
        "waited Retry-After"
    );
    assert_eq!(fake.calls("POST", "**"), 2, "one retry");
    let made: Vec<_> = fake
        .filesystems()
        .into_iter()
        .filter(|f| f.label == "pvc-429")
        .collect();
    assert_eq!(made.len(), 1, "one object");
    assert_eq!(made[0].id, fs.id);
    assert_eq!(cloud.rate_limit(RequestClass::Other).throttled, 1);
}

#[test]
fn a_post_refused_by_the_rate_limiter_every_time_gives_up_unavailable() {
    let (fake, cloud) = setup();
    fake.inject(FaultRule::rate_limited("POST", "**", 0));
    let err = cloud.create_filesystem(7, &new_fs("pvc-429s")).unwrap_err();
    assert!(
        matches!(err.error, Error::Unavailable(_)),
        "{:?}",
        err.error
    );
    assert!(!err.maybe_applied, "every attempt was refused");
    assert_eq!(
        fake.calls("POST", "**"),
        fast_retry().max_attempts as usize,
        "bounded like the other retries"
    );
    assert!(fake.filesystems().iter().all(|f| f.label != "pvc-429s"));
}

/// `DEV_FAULTS` scoped to a method and path: only those requests fail,
/// and a `reset` reaches the client as a broken connection, no answer.
#[test]
fn a_scoped_random_fault_hits_only_its_requests() {
    let (fake, cloud) = setup();
    let profile = FaultProfile::parse("reset:1@GET:nfs/spaces/7", Duration::from_secs(1)).unwrap();
    fake.set_fault_profile(Some(profile));
    let err = cloud.get_space(7).unwrap_err();
    assert!(
        matches!(&err, Error::Internal(m) if !m.contains('[')),
        "a transport failure, not a status: {err:?}"
    );
    assert_eq!(cloud.get_space(8).unwrap().id, 8, "another path");
    assert_eq!(cloud.list_spaces().unwrap().len(), 3, "another path");
    assert_eq!(fake.injected().get(&Injected::Reset), Some(&1));
    assert_eq!(
        fake.calls("GET", "nfs/spaces/7"),
        1,
        "a GET's reset is not retried"
    );
}

#[test]
fn a_create_that_failed_after_its_side_effect_leaves_the_filesystem() {
    let (fake, cloud) = setup();
    fake.inject(FaultRule::fail_after("POST", "nfs/spaces/*/filesystems", 500).times(1));
    let err = cloud
        .create_filesystem(7, &new_fs("pvc-leak"))
        .unwrap_err()
        .error;
    assert!(matches!(err, Error::Internal(_)), "{err:?}");
    let found = cloud.find_filesystems(7, "pvc-leak", "us-ord").unwrap();
    assert_eq!(found.len(), 1, "the retry's lookup by label finds it");
}

#[test]
fn active_filesystems_can_lack_a_mount_target() {
    let (fake, cloud) = setup();
    fake.set_filesystem_lifecycle("pvc-ips", Lifecycle::ActiveWithoutFqdn);
    fake.set_filesystem_lifecycle("pvc-none", Lifecycle::ActiveWithoutMountTarget);
    let ips = cloud.create_filesystem(7, &new_fs("pvc-ips")).unwrap();
    let none = cloud.create_filesystem(7, &new_fs("pvc-none")).unwrap();
    let ips = cloud.get_filesystem(7, ips.id).unwrap();
    assert_eq!((ips.status, ips.mount_target_fqdn), (Status::Active, None));
    assert_eq!(ips.mount_target_ips.len(), 1);
    let none = cloud.get_filesystem(7, none.id).unwrap();
    assert_eq!(none.status, Status::Active);
    assert!(none.mount_target_fqdn.is_none() && none.mount_target_ips.is_empty());
}

#[test]
fn random_fault_profile_drives_retries() {
    let (fake, cloud) = setup();
    fake.set_fault_profile(Some(
        FaultProfile::parse("503:1.0", Duration::from_secs(1)).unwrap(),
    ));
    assert!(matches!(
        cloud.get_space(7).unwrap_err(),
        Error::Unavailable(_)
    ));
    assert_eq!(fake.calls("GET", "**"), 4);
    fake.set_fault_profile(None);
    assert_eq!(cloud.get_space(7).unwrap().id, 7);
}

#[test]
fn the_v4_version_and_a_base_path_with_slashes_work() {
    let (fake, _) = setup();
    let cloud = LinodeCloud::new(LinodeSettings {
        base_url: format!("{}/", fake.url()),
        api_version: "v4".into(),
        ..settings(&fake)
    })
    .unwrap();
    assert_eq!(cloud.get_instance(61234567).unwrap().id, 61234567);
    assert_eq!(last(&fake, "GET").version, "v4");
}

/// Collects every log record of the process (all levels, all crates).
struct Capture(Mutex<Vec<String>>);

impl log::Log for Capture {
    fn enabled(&self, _: &log::Metadata) -> bool {
        true
    }
    fn log(&self, record: &log::Record) {
        let line = format!("{} {} {}", record.level(), record.target(), record.args());
        self.0.lock().unwrap().push(line);
    }
    fn flush(&self) {}
}

fn capture() -> &'static Capture {
    static CAPTURE: OnceLock<&'static Capture> = OnceLock::new();
    CAPTURE.get_or_init(|| {
        let c: &'static Capture = Box::leak(Box::new(Capture(Mutex::new(Vec::new()))));
        log::set_logger(c).expect("no other logger in this test binary");
        log::set_max_level(log::LevelFilter::Trace);
        c
    })
}

#[test]
fn the_token_never_appears_in_errors_or_logs() {
    let logs = capture();
    let (fake, cloud) = setup();
    let mut errors = Vec::new();

    // A backend (or proxy) that echoes the credential in its error body.
    fake.inject(
        FaultRule::status("GET", "nfs/spaces/7", 400)
            .reason(&format!("bad Bearer {TOKEN}"))
            .times(1),
    );
    errors.push(cloud.get_space(7).unwrap_err());
    fake.inject(FaultRule::rate_limited("GET", "nfs/spaces/7", 0).times(2));
    cloud.get_space(7).unwrap();
    fake.inject(FaultRule::status("POST", "**", 500).times(1));
    errors.push(
        cloud
            .create_filesystem(7, &new_fs("pvc-x"))
            .unwrap_err()
            .error,
    );
    errors.push(cloud.get_filesystem(7, 4242).unwrap_err());
    let hang = fake.hang("GET", "linode/**");
    let slow = LinodeCloud::new(LinodeSettings {
        request_timeout: Duration::from_millis(100),
        ..settings(&fake)
    })
    .unwrap();
    errors.push(slow.get_instance(61234567).unwrap_err());
    hang.release();
    let gone = LinodeCloud::new(LinodeSettings {
        base_url: linode_nfs_csi::fake::unreachable_url(),
        ..settings(&fake)
    })
    .unwrap();
    errors.push(gone.get_space(7).unwrap_err());

    assert!(
        errors[0].message().contains("bad Bearer ***"),
        "{}",
        errors[0]
    );
    for e in &errors {
        assert!(!e.message().contains(TOKEN), "error leaks the token: {e}");
        assert!(!format!("{e:?}").contains(TOKEN));
    }
    assert!(!format!("{cloud:?} {:?}", settings(&fake)).contains(TOKEN));
    let lines = logs.0.lock().unwrap();
    assert!(
        lines.iter().any(|l| l.contains("retry")),
        "the capture works and retries are logged"
    );
    for line in lines.iter() {
        assert!(!line.contains(TOKEN), "log line leaks the token: {line}");
    }
}

#[test]
fn a_408_and_a_proxys_html_400_are_retried_like_a_503() {
    let (fake, cloud) = setup();
    for (rule, what) in [
        (FaultRule::status("GET", "nfs/spaces/7", 408), "408"),
        (
            FaultRule::status("GET", "nfs/spaces/7", 400).html(),
            "HTML 400",
        ),
    ] {
        fake.clear_requests();
        fake.inject(rule.clone().times(2));
        assert_eq!(cloud.get_space(7).unwrap().id, 7, "{what}");
        assert_eq!(fake.calls("GET", "nfs/spaces/7"), 3, "{what}: retried");

        fake.clear_requests();
        fake.inject(rule);
        let err = cloud.get_space(7).unwrap_err();
        assert!(matches!(err, Error::Unavailable(_)), "{what}: {err:?}");
        assert_eq!(fake.calls("GET", "nfs/spaces/7"), 4, "{what}: bounded");
        fake.clear_faults();
    }
    // The API's own 400 stays a permanent InvalidArgument.
    fake.clear_requests();
    fake.inject(FaultRule::status("GET", "nfs/spaces/7", 400).times(1));
    let err = cloud.get_space(7).unwrap_err();
    assert!(matches!(err, Error::InvalidArgument(_)), "{err:?}");
    assert_eq!(fake.calls("GET", "nfs/spaces/7"), 1);
}

#[test]
fn a_put_refused_after_an_ambiguous_attempt_may_still_have_been_applied() {
    let (fake, cloud) = setup();
    let fs = cloud.create_filesystem(7, &new_fs("pvc-doubt")).unwrap();
    let update = all_squash("pvc-doubt");
    // The first attempt's outcome is unknown (504); the retries are refused.
    fake.inject(FaultRule::status("PUT", "**", 504).times(1));
    fake.inject(FaultRule::status("PUT", "**", 503));
    let err = cloud
        .put_filesystem_access_policy(7, fs.id, &update)
        .unwrap_err();
    assert_eq!(fake.calls("PUT", "**"), 4);
    assert!(err.maybe_applied, "{err:?}");
    assert!(err.error.message().contains("[504]"), "{err}");
    fake.clear_faults();

    // Refused every time: known not to have happened.
    fake.inject(FaultRule::status("PUT", "**", 503));
    let err = cloud
        .put_filesystem_access_policy(7, fs.id, &update)
        .unwrap_err();
    assert!(!err.maybe_applied, "{err:?}");
}
