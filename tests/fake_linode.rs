//! The fake Linode API's own contract, spoken to with raw HTTP where the real
//! client would never send such a request: auth, 404/405 bodies, paging and
//! filter validation, full-replace vs merge policy PUTs, seeding from JSON,
//! persistence across restarts, the event hook, the latency/hang faults, and
//! the backend variants (`DEV_QUIRKS`): tag filters refused or ignored,
//! missing filesystem policy endpoints, capacity in `stats`, Go nulls, 408s
//! and nginx pages among the injected faults, filesystems others made; and
//! clones that take time in proportion to their snapshot's data.

mod common;

use common::linode::{request, Reply};
use common::{wait_for, TempDir};
use linode_nfs_csi::dev::exports::Exports;
use linode_nfs_csi::fake::{
    CloneRate, FakeEvent, FakeLinode, FaultProfile, FaultRule, FilesystemSeed, Injected, PolicyPut,
    RateLimit, Seed, TagFilter,
};
use serde_json::{json, Value};
use std::collections::BTreeMap;
use std::sync::{Arc, Mutex};
use std::time::{Duration, Instant};

const SEED: &str = r#"{
  "token": "t0k",
  "regions": ["us-ord"],
  "spaces": [{"id": 7, "label": "shared", "mtls_mode": "optional"}],
  "instances": [{"id": 11, "label": "n1", "region": "us-ord", "interface_generation": "linode",
                 "vpcs": [{"vpc_id": 5, "subnet_id": 6}]}]
}"#;

fn fake() -> FakeLinode {
    FakeLinode::start(Seed::from_json(SEED).unwrap()).unwrap()
}

/// `(status, content-type, JSON body)` of one raw request.
fn raw(
    fake: &FakeLinode,
    method: &str,
    path: &str,
    headers: &[(&str, &str)],
    body: Option<Value>,
) -> (u16, String, Value) {
    let reply = request(fake, method, path, headers, body);
    (reply.status, reply.content_type(), reply.json())
}

fn create_fs(fake: &FakeLinode, label: &str) -> u64 {
    let (status, _, body) = raw(
        fake,
        "POST",
        "v4beta/nfs/spaces/7/filesystems",
        &[],
        Some(json!({"label": label, "region": "us-ord", "max_capacity_bytes": 1024})),
    );
    assert_eq!(status, 200, "{body}");
    body["id"].as_u64().unwrap()
}

#[test]
fn seeds_are_strict_json() {
    assert!(Seed::from_json(r#"{"spaces": [{"id": 1, "label": "x", "colour": "red"}]}"#).is_err());
    let seed = Seed::from_json("{}").unwrap();
    assert!(!seed.regions.is_empty());
    assert_eq!(seed, Seed::default());
}

#[test]
fn auth_envelopes_and_routing() {
    let fake = fake();
    let agent = ureq::Agent::config_builder()
        .http_status_as_error(false)
        .build()
        .new_agent();
    let mut resp = agent
        .get(format!("{}/v4beta/nfs/spaces", fake.url()))
        .header("Authorization", "Bearer wrong")
        .call()
        .unwrap();
    assert_eq!(resp.status().as_u16(), 401);
    assert_eq!(
        resp.body_mut().read_json::<Value>().unwrap(),
        json!({"errors": [{"reason": "Invalid Token"}]})
    );

    let (status, ctype, body) = raw(&fake, "GET", "v4beta/nfs/spaces/77", &[], None);
    assert_eq!((status, ctype.as_str()), (404, "application/json"));
    assert_eq!(body, json!({"errors": [{"reason": "Not found"}]}));
    assert_eq!(raw(&fake, "GET", "v3/nfs/spaces", &[], None).0, 404);
    assert_eq!(raw(&fake, "PATCH", "v4beta/nfs/spaces/7", &[], None).0, 405);
    let (status, _, body) = raw(&fake, "DELETE", "v4/nfs/spaces/7/filesystems/9", &[], None);
    assert_eq!(
        (status, body),
        (404, json!({"errors": [{"reason": "Not found"}]}))
    );

    let id = create_fs(&fake, "a");
    let (status, _, body) = raw(
        &fake,
        "DELETE",
        &format!("v4beta/nfs/spaces/7/filesystems/{id}"),
        &[],
        None,
    );
    assert_eq!((status, body), (200, json!({})));
}

#[test]
fn paging_and_filter_validation() {
    let fake = fake();
    for n in 0..30 {
        create_fs(&fake, &format!("fs-{n}"));
    }
    let (_, _, first) = raw(
        &fake,
        "GET",
        "v4beta/nfs/spaces/7/filesystems?page_size=25",
        &[],
        None,
    );
    assert_eq!(
        (
            first["page"].as_u64(),
            first["pages"].as_u64(),
            first["results"].as_u64()
        ),
        (Some(1), Some(2), Some(30))
    );
    assert_eq!(first["data"].as_array().unwrap().len(), 25);
    let (_, _, second) = raw(
        &fake,
        "GET",
        "v4beta/nfs/spaces/7/filesystems?page_size=25&page=2",
        &[],
        None,
    );
    assert_eq!(second["data"].as_array().unwrap().len(), 5);

    let (status, _, body) = raw(
        &fake,
        "GET",
        "v4beta/nfs/spaces/7/filesystems?page_size=5",
        &[],
        None,
    );
    assert_eq!(
        (status, &body["errors"][0]["field"]),
        (400, &json!("page_size"))
    );

    let filter = [("X-Filter", r#"{"size": 5}"#)];
    let (status, _, body) = raw(
        &fake,
        "GET",
        "v4beta/nfs/spaces/7/filesystems",
        &filter,
        None,
    );
    assert_eq!(status, 400);
    assert_eq!(
        body,
        json!({"errors": [{"reason": "Cannot filter on size", "field": "X-Filter"}]})
    );

    let filter = [("X-Filter", r#"{"label": "fs-3", "region": "us-ord"}"#)];
    let (_, _, body) = raw(
        &fake,
        "GET",
        "v4beta/nfs/spaces/7/filesystems",
        &filter,
        None,
    );
    assert_eq!(body["results"], json!(1));
}

#[test]
fn policy_put_is_full_replace_unless_told_to_merge() {
    let fake = fake();
    let id = create_fs(&fake, "p");
    let path = format!("v4beta/nfs/spaces/7/filesystems/{id}/access-policy");
    let full = json!({"label": "p", "enabled": true, "linode_ids": [11], "squash_policy": "none", "protocols": ["nfsv4"]});
    assert_eq!(raw(&fake, "PUT", &path, &[], Some(full.clone())).0, 200);

    let (_, _, partial) = raw(
        &fake,
        "PUT",
        &path,
        &[],
        Some(json!({"squash_policy": "all_squash"})),
    );
    assert_eq!(partial["enabled"], json!(false), "omitted fields reset");
    assert_eq!(partial["linode_acl"], json!([]));
    assert_eq!(partial["squash_policy"], json!("all_squash"));
    assert_eq!(partial["status"], json!("updating"));

    fake.set_policy_put(PolicyPut::Merge);
    raw(&fake, "PUT", &path, &[], Some(full));
    let (_, _, merged) = raw(
        &fake,
        "PUT",
        &path,
        &[],
        Some(json!({"squash_policy": "all_squash"})),
    );
    assert_eq!(merged["enabled"], json!(true), "merge keeps omitted fields");
    assert_eq!(
        merged["linode_acl"][0]["url"],
        json!("/v4/linode/instances/11")
    );

    let (status, _, body) = raw(
        &fake,
        "PUT",
        &path,
        &[],
        Some(json!({"squash_policy": "some", "protocols": ["nfsv3"]})),
    );
    assert_eq!(status, 400);
    assert_eq!(
        body["errors"].as_array().unwrap().len(),
        2,
        "every invalid field reported: {body}"
    );
}

#[test]
fn state_persists_across_restarts() {
    let dir = std::env::temp_dir().join(format!("lnc-fake-state-{}", std::process::id()));
    std::fs::create_dir_all(&dir).unwrap();
    let file = dir.join("state.json");
    let _ = std::fs::remove_file(&file);
    let seed = Seed::from_json(SEED).unwrap();

    let first = FakeLinode::start_persistent(seed.clone(), &file).unwrap();
    let a = create_fs(&first, "kept");
    drop(first);

    let second = FakeLinode::start_persistent(seed, &file).unwrap();
    let labels: Vec<_> = second
        .filesystems()
        .into_iter()
        .map(|f| (f.id, f.label))
        .collect();
    assert_eq!(labels, [(a, "kept".to_string())]);
    assert_eq!(create_fs(&second, "next"), a + 1, "ids keep counting");
    drop(second);
    std::fs::remove_dir_all(dir).unwrap();
}

#[test]
fn observer_sees_exports_appear_snapshot_clone_and_go() {
    let fake = fake();
    let events = Arc::new(Mutex::new(Vec::new()));
    let sink = Arc::clone(&events);
    fake.set_observer(Arc::new(move |e: &FakeEvent| {
        sink.lock().unwrap().push(e.clone())
    }));

    let id = create_fs(&fake, "data");
    raw(
        &fake,
        "GET",
        &format!("v4beta/nfs/spaces/7/filesystems/{id}"),
        &[],
        None,
    );
    let (_, _, snap) = raw(
        &fake,
        "POST",
        &format!("v4beta/nfs/spaces/7/filesystems/{id}/snapshots"),
        &[],
        Some(json!({"label": "s1"})),
    );
    let snap_id = snap["id"].as_u64().unwrap();
    raw(
        &fake,
        "GET",
        &format!("v4beta/nfs/spaces/7/filesystems/{id}/snapshots/{snap_id}"),
        &[],
        None,
    );
    let (_, _, clone) = raw(
        &fake,
        "POST",
        &format!("v4beta/nfs/spaces/7/filesystems/{id}/snapshots/{snap_id}/clone"),
        &[],
        Some(json!({"label": "copy", "region": "us-ord"})),
    );
    let clone_id = clone["id"].as_u64().unwrap();
    raw(
        &fake,
        "GET",
        &format!("v4beta/nfs/spaces/7/filesystems/{clone_id}"),
        &[],
        None,
    );
    raw(
        &fake,
        "DELETE",
        &format!("v4beta/nfs/spaces/7/filesystems/{id}"),
        &[],
        None,
    );

    let export = format!("/data-{id:x}");
    let clone_export = format!("/copy-{clone_id:x}");
    assert_eq!(
        *events.lock().unwrap(),
        [
            FakeEvent::FilesystemActive {
                space_id: 7,
                filesystem_id: id,
                export: export.clone(),
                source_snapshot_id: None
            },
            FakeEvent::SnapshotCreated {
                space_id: 7,
                filesystem_id: id,
                snapshot_id: snap_id,
                label: "s1".to_string(),
                source_export: export.clone()
            },
            FakeEvent::CloneCreated {
                snapshot_id: snap_id,
                space_id: 7,
                filesystem_id: clone_id,
                export: clone_export.clone()
            },
            FakeEvent::FilesystemActive {
                space_id: 7,
                filesystem_id: clone_id,
                export: clone_export,
                source_snapshot_id: Some(snap_id)
            },
            FakeEvent::FilesystemDeleted {
                space_id: 7,
                filesystem_id: id,
                export
            },
        ]
    );
}

#[test]
fn latency_and_hang_faults() {
    let fake = fake();
    fake.inject(FaultRule::latency("GET", "nfs/spaces/7", Duration::from_millis(150)).times(1));
    let started = Instant::now();
    assert_eq!(raw(&fake, "GET", "v4beta/nfs/spaces/7", &[], None).0, 200);
    assert!(started.elapsed() >= Duration::from_millis(150));

    let hang = fake.hang("GET", "nfs/spaces");
    let url = fake.url();
    let token = fake.token();
    let waiter = std::thread::spawn(move || {
        ureq::get(format!("{url}/v4beta/nfs/spaces"))
            .header("Authorization", format!("Bearer {token}"))
            .call()
            .map(|r| r.status().as_u16())
    });
    assert!(hang.wait_for_hits(1, Duration::from_secs(5)));
    // Other endpoints are not blocked by the held request.
    assert_eq!(raw(&fake, "GET", "v4beta/nfs/spaces/7", &[], None).0, 200);
    assert!(!waiter.is_finished());
    hang.release();
    assert_eq!(waiter.join().unwrap().unwrap(), 200);
    let log = fake.requests();
    assert!(log.iter().all(|r| r.authorized && r.status.is_some()));
}

#[test]
fn a_clone_may_grow_by_size_gib_but_never_shrink() {
    const GIB: u64 = 1 << 30;
    let fake = fake();
    let (status, _, fs) = raw(
        &fake,
        "POST",
        "v4beta/nfs/spaces/7/filesystems",
        &[],
        Some(json!({"label": "src", "region": "us-ord", "max_capacity_bytes": 2 * GIB})),
    );
    assert_eq!(status, 200, "{fs}");
    let id = fs["id"].as_u64().unwrap();
    let (_, _, snap) = raw(
        &fake,
        "POST",
        &format!("v4beta/nfs/spaces/7/filesystems/{id}/snapshots"),
        &[],
        Some(json!({"label": "s"})),
    );
    let snap_path = format!(
        "v4beta/nfs/spaces/7/filesystems/{id}/snapshots/{}",
        snap["id"]
    );
    assert_eq!(
        raw(&fake, "GET", &snap_path, &[], None).2["status"],
        "active"
    );
    let clone = |label: &str, size: Value| {
        let (status, _, body) = raw(
            &fake,
            "POST",
            &format!("{snap_path}/clone"),
            &[],
            Some(json!({"label": label, "region": "us-ord", "size_gib": size})),
        );
        (status, body)
    };

    let (status, body) = clone("same", Value::Null);
    assert_eq!(
        (status, &body["max_capacity_bytes"]),
        (200, &json!(2 * GIB))
    );
    let (status, body) = clone("grown", json!(5));
    assert_eq!(
        (status, &body["max_capacity_bytes"]),
        (200, &json!(5 * GIB))
    );
    for bad in [json!(1), json!(0), json!(-3), json!("2")] {
        let (status, body) = clone("bad", bad.clone());
        assert_eq!(status, 400, "size_gib {bad}: {body}");
        assert_eq!(body["errors"][0]["field"], "size_gib", "{body}");
    }
}

/// `set_clone_rate`: a clone stays `creating` while it copies its
/// snapshot's data, which is what the export held when the snapshot was
/// taken (counted by dev mode's emulated exports), after the rate's setup,
/// at the rate and at most the cap; without a rate it is active at once.
#[test]
fn a_clone_copies_its_snapshot_s_data_at_the_clone_rate() {
    const MIB: u64 = 1 << 20;
    let fake = fake();
    let dir = TempDir::new("fake-clone-rate");
    let exports = Arc::new(Exports::new(dir.path()).unwrap());
    fake.set_export_content(exports.clone());
    let id = create_fs(&fake, "data");
    let export = format!("/data-{id:x}");
    exports.create(&export).unwrap();
    let data = exports.dir_of(&format!("h:{export}")).unwrap().join("data");
    std::fs::write(&data, vec![0u8; 3 * MIB as usize]).unwrap();
    let snaps = format!("v4beta/nfs/spaces/7/filesystems/{id}/snapshots");
    let (_, _, snap) = raw(&fake, "POST", &snaps, &[], Some(json!({"label": "s"})));
    // Only what the export held at the snapshot counts.
    std::fs::write(&data, "").unwrap();
    let clone_path = format!("{snaps}/{}/clone", snap["id"]);

    // How long a clone stays `creating`, polled through the API.
    let creating = |label: &str| {
        let started = Instant::now();
        let (status, _, clone) = raw(
            &fake,
            "POST",
            &clone_path,
            &[],
            Some(json!({"label": label, "region": "us-ord"})),
        );
        assert_eq!((status, &clone["status"]), (200, &json!("creating")));
        let path = format!("v4beta/nfs/spaces/7/filesystems/{}", clone["id"]);
        wait_for(
            &format!("{label} to be active"),
            Duration::from_secs(10),
            || {
                let (_, _, fs) = raw(&fake, "GET", &path, &[], None);
                assert_ne!(fs["status"], "error", "{fs}");
                fs["status"] == "active"
            },
        );
        started.elapsed()
    };
    let about = |took: Duration, want: Duration| {
        assert!(
            took >= want && took < want + Duration::from_secs(1),
            "{took:?}, not about {want:?}"
        );
    };

    about(creating("at-once"), Duration::ZERO);
    fake.set_clone_rate(Some(CloneRate {
        setup: Duration::from_millis(300),
        bytes_per_second: 2 * MIB,
        cap: Duration::from_secs(10),
    }));
    about(creating("copied"), Duration::from_millis(300 + 1500));
    fake.set_clone_rate(Some(CloneRate {
        setup: Duration::ZERO,
        bytes_per_second: MIB / 8,
        cap: Duration::from_millis(700),
    }));
    about(creating("capped"), Duration::from_millis(700));
    fake.set_clone_rate(None);
    about(creating("at-once-again"), Duration::ZERO);
}

/// One raw GET-style exchange, with `filter` as its `X-Filter`.
fn exchange(fake: &FakeLinode, method: &str, path: &str, filter: Option<&str>) -> Reply {
    let headers: Vec<(&str, &str)> = filter.map(|f| ("X-Filter", f)).into_iter().collect();
    request(fake, method, path, &headers, None)
}

const MARK: &str = "csi.linodenfs.csi.linode.com";

/// Space 7 with our volume `ours` (tagged with the driver's mark) and the
/// three filesystems others made; the id of `ours`.
fn shared_space() -> (FakeLinode, u64) {
    let fake = fake();
    for fs in FilesystemSeed::foreign(7, "us-ord") {
        assert!(fake.add_filesystem(fs).is_some());
    }
    let (status, _, body) = raw(
        &fake,
        "POST",
        "v4beta/nfs/spaces/7/filesystems",
        &[],
        Some(
            json!({"label": "ours", "region": "us-ord", "max_capacity_bytes": 1024,
                    "tags": [MARK]}),
        ),
    );
    assert_eq!(status, 200, "{body}");
    (fake, body["id"].as_u64().unwrap())
}

fn labels(page: &Value) -> Vec<String> {
    page["data"]
        .as_array()
        .unwrap_or_else(|| panic!("a page: {page}"))
        .iter()
        .map(|f| f["label"].as_str().unwrap().to_string())
        .collect()
}

const LIST: &str = "v4beta/nfs/spaces/7/filesystems";

#[test]
fn a_tag_filter_is_honoured_refused_or_ignored() {
    let (fake, _) = shared_space();
    let by_mark = format!(r#"{{"tags": "{MARK}"}}"#);
    let mark_and_label = format!(r#"{{"tags": "{MARK}", "label": "foreign-a"}}"#);
    let nested = format!(r#"{{"+and": [{{"tags": "{MARK}"}}, {{"region": "us-ord"}}]}}"#);

    let honoured = exchange(&fake, "GET", LIST, Some(&by_mark));
    assert_eq!(honoured.status, 200);
    assert_eq!(labels(&honoured.json()), ["ours"]);
    assert_eq!(
        exchange(&fake, "GET", LIST, Some(&mark_and_label)).json()["results"],
        0
    );

    fake.set_tag_filter(TagFilter::Refused);
    let want = json!({"errors": [{"reason": "Cannot filter on tags", "field": "X-Filter"}]});
    for filter in [&by_mark, &mark_and_label, &nested] {
        let refused = exchange(&fake, "GET", LIST, Some(filter));
        assert_eq!(refused.status, 400, "{filter}");
        assert_eq!(refused.header("Content-Type"), Some("application/json"));
        assert_eq!(refused.json(), want, "{filter}");
    }
    let by_label = exchange(&fake, "GET", LIST, Some(r#"{"label": "foreign-b"}"#));
    assert_eq!(
        (by_label.status, labels(&by_label.json())),
        (200, vec!["foreign-b".to_string()]),
        "other keys still filter"
    );
    assert_eq!(labels(&exchange(&fake, "GET", LIST, None).json()).len(), 4);

    fake.set_tag_filter(TagFilter::Ignored);
    let ignored = exchange(&fake, "GET", LIST, Some(&by_mark));
    assert_eq!(ignored.status, 200);
    assert_eq!(
        labels(&ignored.json()),
        ["foreign-a", "foreign-b", "foreign-c", "ours"],
        "every filesystem of the Space, ours or not"
    );
    assert_eq!(ignored.json()["results"], 4);
    assert_eq!(
        labels(&exchange(&fake, "GET", LIST, Some(&mark_and_label)).json()),
        ["foreign-a"],
        "the label still filters"
    );
    assert_eq!(
        labels(&exchange(&fake, "GET", LIST, Some(&nested)).json()).len(),
        4
    );
    // Snapshot and space lists are not filesystem lists.
    let spaces = exchange(
        &fake,
        "GET",
        "v4beta/nfs/spaces",
        Some(r#"{"tags": "none"}"#),
    );
    assert_eq!(spaces.json()["results"], 0);

    fake.set_tag_filter(TagFilter::Honoured);
    assert_eq!(
        labels(&exchange(&fake, "GET", LIST, Some(&by_mark)).json()),
        ["ours"]
    );
    let filters: Vec<_> = fake
        .requests()
        .into_iter()
        .filter(|r| r.path == "nfs/spaces/7/filesystems" && r.method == "GET")
        .map(|r| (r.x_filter.is_some(), r.status))
        .collect();
    assert_eq!(filters.len(), 11, "every list is in the log: {filters:?}");
    assert_eq!(filters.iter().filter(|(_, s)| *s == Some(400)).count(), 3);
}

#[test]
fn seeded_filesystems_are_active_strangers() {
    let seed = Seed::from_json(
        r#"{"token": "t0k", "regions": ["us-ord"], "spaces": [{"id": 7, "label": "shared"}],
            "filesystems": [
              {"space_id": 7, "label": "foreign-a", "region": "us-ord"},
              {"space_id": 7, "label": "foreign-b", "region": "us-ord", "tags": ["team-analytics"],
               "max_capacity_bytes": 2048},
              {"space_id": 99, "label": "nowhere", "region": "us-ord"}]}"#,
    )
    .unwrap();
    let fake = FakeLinode::start(seed).unwrap();
    let page = exchange(&fake, "GET", LIST, None).json();
    assert_eq!(
        labels(&page),
        ["foreign-a", "foreign-b"],
        "unknown space skipped"
    );
    let a = &page["data"][0];
    let b = &page["data"][1];
    assert_eq!((a["id"].as_u64(), b["id"].as_u64()), (Some(101), Some(102)));
    assert_eq!(a["status"], "active");
    assert!(a["mount_target_fqdn"]
        .as_str()
        .unwrap()
        .ends_with(":/foreign-a-65"));
    assert_eq!(a["tags"], json!([]));
    assert_eq!(a["max_capacity_bytes"], json!(100u64 << 30));
    assert_eq!(
        (&b["tags"], &b["max_capacity_bytes"]),
        (&json!(["team-analytics"]), &json!(2048))
    );
    let policy = exchange(&fake, "GET", &format!("{LIST}/101/access-policy"), None).json();
    assert_eq!(
        (&policy["label"], &policy["status"]),
        (&json!("foreign-a"), &json!("active"))
    );
    assert_eq!(
        create_fs(&fake, "mine"),
        103,
        "ids keep counting after the seed"
    );

    assert_eq!(
        fake.add_filesystem(FilesystemSeed::new(99, "lost", "us-ord")),
        None
    );
    let foreign = FilesystemSeed::foreign(7, "us-ord");
    assert!(foreign.iter().all(|f| !f.tags.iter().any(|t| t == MARK)));
    assert_eq!(foreign.iter().filter(|f| f.tags.is_empty()).count(), 1);
}

#[test]
fn without_filesystem_policy_endpoints_they_are_not_found() {
    let fake = fake();
    let id = create_fs(&fake, "nopol");
    let path = format!("v4beta/nfs/spaces/7/filesystems/{id}/access-policy");
    let put = json!({"label": "nopol", "enabled": true, "linode_ids": [11],
                     "squash_policy": "none", "protocols": ["nfsv4"]});
    let before = fake.filesystem_policy(id).unwrap();

    fake.set_filesystem_policy_endpoints(false);
    let not_found = json!({"errors": [{"reason": "Not found"}]});
    let got = exchange(&fake, "GET", &path, None);
    assert_eq!(
        (got.status, got.header("Content-Type"), got.json()),
        (404, Some("application/json"), not_found.clone())
    );
    assert_eq!(
        raw(&fake, "PUT", &path, &[], Some(put.clone())),
        (404, "application/json".to_string(), not_found.clone())
    );
    assert_eq!(
        fake.filesystem_policy(id),
        Some(before),
        "the PUT did nothing"
    );
    // Everything else is there.
    assert_eq!(
        exchange(&fake, "GET", "v4beta/nfs/spaces/7/access-policy", None).status,
        200
    );
    assert_eq!(
        exchange(&fake, "GET", &format!("{LIST}/{id}"), None).status,
        200
    );

    fake.set_filesystem_policy_endpoints(true);
    assert_eq!(raw(&fake, "PUT", &path, &[], Some(put)).0, 200);
    assert_eq!(exchange(&fake, "GET", &path, None).json()["enabled"], true);
}

#[test]
fn capacity_in_stats_is_the_forks_filesystem_shape() {
    const FORK_CAPACITY: u64 = 1 << 40;
    let fake = fake();
    fake.set_capacity_in_stats(true);
    let (status, _, created) = raw(
        &fake,
        "POST",
        LIST,
        &[],
        Some(json!({"label": "nocap", "region": "us-ord"})),
    );
    assert_eq!(status, 200, "no capacity needed: {created}");
    assert_eq!(created["status"], "creating");
    assert_eq!(
        created["stats"],
        json!({"used_capacity_bytes": null, "max_capacity_bytes": FORK_CAPACITY,
               "collected_at": null})
    );
    for key in ["max_capacity_bytes", "max_file_count"] {
        assert!(created.get(key).is_none(), "{key}: {created}");
    }
    let sent = create_fs(&fake, "sent");
    let id = created["id"].as_u64().unwrap();
    let one = exchange(&fake, "GET", &format!("{LIST}/{id}"), None).json();
    let stats = one["stats"].as_object().unwrap();
    assert_eq!(
        stats.keys().collect::<Vec<_>>(),
        ["collected_at", "max_capacity_bytes", "used_capacity_bytes"]
    );
    assert_eq!(stats["max_capacity_bytes"], json!(FORK_CAPACITY));
    assert!(stats["collected_at"].is_string(), "active: {one}");
    let listed = exchange(&fake, "GET", LIST, None).json();
    for fs in listed["data"].as_array().unwrap() {
        assert!(fs.get("max_capacity_bytes").is_none(), "{fs}");
        assert_eq!(
            fs["stats"]["max_capacity_bytes"],
            json!(FORK_CAPACITY),
            "a sent capacity is an unknown field, ignored: {fs}"
        );
    }
    // A clone is a filesystem answer too.
    let (_, _, snap) = raw(
        &fake,
        "POST",
        &format!("{LIST}/{sent}/snapshots"),
        &[],
        Some(json!({"label": "s"})),
    );
    let snap_path = format!("{LIST}/{sent}/snapshots/{}", snap["id"]);
    exchange(&fake, "GET", &snap_path, None);
    let (status, _, clone) = raw(
        &fake,
        "POST",
        &format!("{snap_path}/clone"),
        &[],
        Some(json!({"label": "copy", "region": "us-ord"})),
    );
    assert_eq!(status, 200, "{clone}");
    assert!(clone.get("max_capacity_bytes").is_none());
    assert_eq!(clone["stats"]["max_capacity_bytes"], json!(FORK_CAPACITY));
    // Spaces keep their shape; the inspection helpers keep the canonical one.
    let space = exchange(&fake, "GET", "v4beta/nfs/spaces/7", None).json();
    assert!(space["max_capacity_bytes"].is_number(), "{space}");
    assert!(fake
        .filesystems()
        .iter()
        .all(|f| f.max_capacity_bytes == Some(FORK_CAPACITY as i64)));

    fake.set_capacity_in_stats(false);
    let back = exchange(&fake, "GET", &format!("{LIST}/{sent}"), None).json();
    assert_eq!(back["max_capacity_bytes"], json!(FORK_CAPACITY));
    assert!(back["stats"].get("max_capacity_bytes").is_none());
}

/// Keys of a JSON object, sorted.
fn keys(v: &Value) -> Vec<&str> {
    let mut k: Vec<&str> = v
        .as_object()
        .unwrap_or_else(|| panic!("an object: {v}"))
        .keys()
        .map(String::as_str)
        .collect();
    k.sort_unstable();
    k
}

#[test]
fn null_fields_write_go_zero_values() {
    let fake = fake();
    fake.set_null_fields(true);
    let (status, _, creating) = raw(
        &fake,
        "POST",
        LIST,
        &[],
        Some(
            json!({"label": "go", "region": "us-ord", "max_capacity_bytes": 1024,
                    "tags": null}),
        ),
    );
    assert_eq!(status, 200, "a null list counts as not sent: {creating}");
    for (key, want) in [
        ("mount_target_ips", Value::Null),
        ("mount_target_fqdn", Value::Null),
        ("tags", Value::Null),
        ("snapshot_usage_bytes", Value::Null),
        ("source_snapshot_id", Value::Null),
        ("status", json!("creating")),
        ("protocol_versions", json!(["nfsv4"])),
    ] {
        assert_eq!(creating[key], want, "{key}: {creating}");
    }
    assert_eq!(
        keys(&creating),
        [
            "created",
            "id",
            "label",
            "max_capacity_bytes",
            "mount_target_fqdn",
            "mount_target_ips",
            "protocol_versions",
            "region",
            "snapshot_usage_bytes",
            "source_snapshot_id",
            "space_id",
            "stats",
            "status",
            "tags"
        ],
        "ldap_config_id, max_file_count and updated left out"
    );
    let id = creating["id"].as_u64().unwrap();
    let policy_path = format!("{LIST}/{id}/access-policy");
    let policy = exchange(&fake, "GET", &policy_path, None).json();
    assert_eq!(
        policy,
        json!({"filesystem_id": id, "label": null, "enabled": null, "linode_acl": null,
               "squash_policy": "root_squash", "protocols": ["nfsv4"], "status": "active"})
    );
    let (status, _, put) = raw(
        &fake,
        "PUT",
        &policy_path,
        &[],
        Some(json!({"label": null, "enabled": null, "linode_ids": [11],
                    "squash_policy": "none", "protocols": ["nfsv4"]})),
    );
    assert_eq!(status, 200, "nulls echoed back are accepted: {put}");
    assert_eq!(put["linode_acl"][0]["id"], 11);
    assert_eq!(put["linode_acl"][0]["label"], "n1");
    assert_eq!(
        fake.filesystem_policy(id).unwrap().label.as_deref(),
        Some("go"),
        "an unset label is the default"
    );

    let space_policy = exchange(&fake, "GET", "v4beta/nfs/spaces/7/access-policy", None).json();
    assert_eq!(
        space_policy,
        json!({"space_id": 7, "label": null, "enabled": null, "vpc_acl": null,
               "mtls_ca_cert": null, "mtls_mode": "optional", "status": "active"})
    );
    let space = exchange(&fake, "GET", "v4beta/nfs/spaces/7", None).json();
    assert!(
        space.get("description").is_none() && space["tags"].is_null(),
        "{space}"
    );

    let (_, _, snap) = raw(
        &fake,
        "POST",
        &format!("{LIST}/{id}/snapshots"),
        &[],
        Some(json!({"label": "s"})),
    );
    assert_eq!(
        (&snap["locked"], &snap["tags"], &snap["size_bytes"]),
        (&Value::Null, &Value::Null, &Value::Null)
    );
    assert_eq!(
        keys(&snap),
        [
            "created",
            "filesystem_id",
            "id",
            "label",
            "locked",
            "size_bytes",
            "source",
            "space_id",
            "status",
            "tags",
            "updated"
        ]
    );
    let active = exchange(&fake, "GET", &format!("{LIST}/{id}"), None).json();
    assert_eq!(active["stats"]["used_capacity_bytes"], Value::Null);
    assert_eq!(active["stats"]["used_file_count"], 1);
    assert!(active["mount_target_ips"].is_array());

    let empty = exchange(&fake, "GET", LIST, Some(r#"{"label": "none-of-these"}"#)).json();
    assert_eq!(
        empty,
        json!({"data": null, "page": 1, "pages": 1, "results": 0})
    );
    let configs = exchange(&fake, "GET", "v4beta/linode/instances/11/configs", None).json();
    let public = &configs["data"][0]["interfaces"][0];
    assert_eq!(
        (&public["primary"], &public["active"], &public["purpose"]),
        (&Value::Null, &json!(true), &json!("public"))
    );
    assert!(public.get("ipam_address").is_none());
    let instance = exchange(&fake, "GET", "v4beta/linode/instances/11", None).json();
    assert!(instance.get("lke_cluster_id").is_none() && instance["tags"].is_null());
    let interfaces = exchange(&fake, "GET", "v4beta/linode/instances/11/interfaces", None).json();
    assert_eq!(interfaces["interfaces"][0]["vpc"]["vpc_id"], 5);
    assert!(interfaces["interfaces"][0].get("mac_address").is_none());

    // Errors keep the envelope; the inspection helpers decode the canonical shape.
    let missing = exchange(&fake, "GET", &format!("{LIST}/999"), None);
    assert_eq!(missing.json(), json!({"errors": [{"reason": "Not found"}]}));
    assert_eq!(fake.filesystems()[0].tags, Vec::<String>::new());
    assert!(!fake.snapshots()[0].locked);
}

#[test]
fn quirks_combine() {
    let (fake, ours) = shared_space();
    fake.set_tag_filter(TagFilter::Ignored);
    fake.set_capacity_in_stats(true);
    fake.set_null_fields(true);
    fake.set_filesystem_policy_endpoints(false);
    let page = exchange(
        &fake,
        "GET",
        LIST,
        Some(&format!(r#"{{"tags": "{MARK}"}}"#)),
    )
    .json();
    assert_eq!(labels(&page).len(), 4, "the tag filter is ignored: {page}");
    let foreign_a = &page["data"][0];
    assert_eq!(foreign_a["tags"], Value::Null, "untagged is null");
    assert!(foreign_a.get("max_capacity_bytes").is_none());
    assert_eq!(
        foreign_a["stats"]["max_capacity_bytes"],
        json!(100u64 << 30)
    );
    assert_eq!(foreign_a["stats"]["used_capacity_bytes"], Value::Null);
    assert!(foreign_a["stats"].get("used_file_count").is_none());
    let mine = page["data"]
        .as_array()
        .unwrap()
        .iter()
        .find(|f| f["id"] == ours)
        .unwrap();
    assert_eq!(mine["tags"], json!([MARK]));
    assert_eq!(
        exchange(&fake, "GET", &format!("{LIST}/{ours}/access-policy"), None).status,
        404
    );
}

/// `(status, content type, Server header, body)` of each of `n` reads
/// under a fault profile with this seed.
fn faulted_reads(seed: u64, html_errors: bool, n: usize) -> Vec<(u16, String, String, String)> {
    let fake = fake();
    fake.set_html_errors(html_errors);
    let profile = FaultProfile::parse("503:0.3,429:0.3,500:0.1", Duration::from_secs(1)).unwrap();
    fake.set_fault_profile(Some(profile));
    fake.set_fault_seed(seed);
    (0..n)
        .map(|_| {
            let a = exchange(&fake, "GET", "v4beta/nfs/spaces/7", None);
            let ctype = a.header("Content-Type").unwrap_or_default().to_string();
            let server = a.header("Server").unwrap_or_default().to_string();
            // A success carries timestamps of the moment; errors are fixed.
            let body = if a.status == 200 {
                String::new()
            } else {
                a.text
            };
            (a.status, ctype, server, body)
        })
        .collect()
}

#[test]
fn html_errors_turn_part_of_the_injected_refusals_into_408s_and_nginx_pages() {
    const N: usize = 300;
    let plain = faulted_reads(42, false, N);
    let quirky = faulted_reads(42, true, N);
    assert!(
        quirky == faulted_reads(42, true, N),
        "a seed replays it exactly"
    );
    assert!(
        quirky != faulted_reads(44, true, N),
        "another seed, other faults"
    );

    let mut seen = BTreeMap::new();
    for ((status, ..), answer) in plain.iter().zip(&quirky) {
        let (got, ctype, server, body) = answer;
        *seen.entry(*got).or_insert(0) += 1;
        match (*status, *got) {
            (ok, same) if ok == same => {}
            (429 | 503, 408) => {
                assert_eq!(ctype, "application/json");
                assert_eq!(
                    serde_json::from_str::<Value>(body).unwrap(),
                    json!({"errors": [{"reason": "Request Timeout"}]})
                );
            }
            (429 | 503, 400) => {
                assert_eq!((ctype.as_str(), server.as_str()), ("text/html", "nginx"));
                assert!(body.starts_with("<html>") && body.contains("400 Bad Request"));
            }
            other => panic!("only injected 429/503s change, not {other:?}"),
        }
    }
    // The same requests fail; about a third of each refusal kind stays itself.
    for kind in [200, 408, 400, 429, 503, 500] {
        assert!(
            seen.get(&kind).copied().unwrap_or(0) > 5,
            "{kind}: {seen:?}"
        );
    }
    let plain_fails = plain.iter().filter(|a| a.0 != 200).count();
    let quirky_fails = quirky.iter().filter(|a| a.0 != 200).count();
    assert_eq!(plain_fails, quirky_fails);
    assert_eq!(
        plain.iter().filter(|a| a.0 == 500).count(),
        seen[&500],
        "500s are not refusals and stay"
    );
}

#[test]
fn html_errors_are_counted_by_what_was_answered() {
    let fake = fake();
    fake.set_html_errors(true);
    let profile = FaultProfile::parse("503:1", Duration::from_secs(1)).unwrap();
    fake.set_fault_profile(Some(profile));
    fake.set_fault_seed(7);
    let statuses: Vec<u16> = (0..60)
        .map(|_| exchange(&fake, "GET", "v4beta/nfs/spaces", None).status)
        .collect();
    let injected = fake.injected();
    let count = |s: u16| statuses.iter().filter(|x| **x == s).count() as u64;
    assert_eq!(
        injected.get(&Injected::Status(408)).copied(),
        Some(count(408))
    );
    assert_eq!(
        injected.get(&Injected::ProxyBadRequest).copied(),
        Some(count(400))
    );
    assert_eq!(
        injected.get(&Injected::Status(503)).copied(),
        Some(count(503))
    );
    assert_eq!(count(408) + count(400) + count(503), 60);
}

#[test]
fn request_timeouts_and_proxy_pages_can_be_programmed() {
    let fake = fake();
    fake.inject(FaultRule::request_timeout("GET", "nfs/spaces").times(1));
    fake.inject(FaultRule::proxy_bad_request("GET", "nfs/spaces").times(1));
    let first = exchange(&fake, "GET", "v4beta/nfs/spaces", None);
    assert_eq!(
        (first.status, first.header("Content-Type"), first.json()),
        (
            408,
            Some("application/json"),
            json!({"errors": [{"reason": "Request Timeout"}]})
        )
    );
    let second = exchange(&fake, "GET", "v4beta/nfs/spaces", None);
    assert_eq!(
        (
            second.status,
            second.header("Content-Type"),
            second.header("Server")
        ),
        (400, Some("text/html"), Some("nginx"))
    );
    assert!(second.text.contains("<h1>400 Bad Request</h1>"));
    assert_eq!(
        exchange(&fake, "GET", "v4beta/nfs/spaces", None).status,
        200
    );
}

/// The observer (dev mode's exports) sees changes in the order they were
/// made: a snapshot deleted while its clone's POST is being served is
/// removed only after the clone has copied it, so a clone is never
/// reported active with part of the data.
#[test]
fn a_snapshot_deleted_during_its_clone_s_post_goes_only_after_the_clone_has_copied_it() {
    let fake = Arc::new(fake());
    let seen = Arc::new(Mutex::new(Vec::new()));
    let (copying, copy_began) = std::sync::mpsc::channel();
    let copying = Mutex::new(copying);
    let sink = seen.clone();
    fake.set_observer(Arc::new(move |e: &FakeEvent| match e {
        FakeEvent::CloneCreated { .. } => {
            sink.lock().unwrap().push("copy began");
            copying.lock().unwrap().send(()).unwrap();
            // A copy that takes a moment, as dev mode's of a real tree does.
            std::thread::sleep(Duration::from_millis(300));
            sink.lock().unwrap().push("copy done");
        }
        FakeEvent::SnapshotDeleted { .. } => sink.lock().unwrap().push("snapshot removed"),
        _ => {}
    }));
    let id = create_fs(&fake, "data");
    let snaps = format!("v4beta/nfs/spaces/7/filesystems/{id}/snapshots");
    let (_, _, snap) = raw(&fake, "POST", &snaps, &[], Some(json!({"label": "s"})));
    let snap_path = format!("{snaps}/{}", snap["id"]);
    let cloning = {
        let (fake, path) = (fake.clone(), format!("{snap_path}/clone"));
        std::thread::spawn(move || {
            raw(
                &fake,
                "POST",
                &path,
                &[],
                Some(json!({"label": "copy", "region": "us-ord"})),
            )
            .0
        })
    };
    copy_began.recv_timeout(Duration::from_secs(10)).unwrap();
    let (deleted, _, body) = raw(&fake, "DELETE", &snap_path, &[], None);
    assert_eq!(deleted, 200, "{body}");
    assert_eq!(cloning.join().unwrap(), 200);
    assert_eq!(
        *seen.lock().unwrap(),
        ["copy began", "copy done", "snapshot removed"],
        "the snapshot's data went while its clone was copying it"
    );
}

/// Dev mode copies a snapshot's content when it sees the snapshot made. A
/// process killed between the fake saving its state and that copy would
/// restart with a snapshot of no content (clones of it empty), so the
/// state that records a snapshot is saved only once the copy is taken.
#[test]
fn a_snapshot_is_saved_only_after_its_content_is_taken() {
    let dir = std::env::temp_dir().join(format!("lnc-fake-cut-{}", std::process::id()));
    std::fs::create_dir_all(&dir).unwrap();
    let file = dir.join("state.json");
    let _ = std::fs::remove_file(&file);
    let fake = FakeLinode::start_persistent(Seed::from_json(SEED).unwrap(), &file).unwrap();
    let saved_at_cut = Arc::new(Mutex::new(Vec::new()));
    let (sink, state_file) = (saved_at_cut.clone(), file.clone());
    fake.set_observer(Arc::new(move |e: &FakeEvent| {
        if let FakeEvent::SnapshotCreated { .. } = e {
            let saved = std::fs::read_to_string(&state_file).unwrap();
            sink.lock().unwrap().push(saved.contains("cut-me"));
        }
    }));
    let id = create_fs(&fake, "data");
    let snaps = format!("v4beta/nfs/spaces/7/filesystems/{id}/snapshots");
    let (status, _, body) = raw(&fake, "POST", &snaps, &[], Some(json!({"label": "cut-me"})));
    assert_eq!(status, 200, "{body}");
    assert_eq!(
        *saved_at_cut.lock().unwrap(),
        [false],
        "seen once, before it was saved"
    );
    assert!(std::fs::read_to_string(&file).unwrap().contains("cut-me"));
    drop(fake);
    std::fs::remove_dir_all(dir).unwrap();
}

/// A quota list is paginated like every collection, so it spends the
/// scarce list budget, as the driver's pacer and the benches count it; a
/// quota POST spends the other one. What the limits refuse is counted
/// apart from what was executed (issue 36).
#[test]
fn quota_lists_spend_the_list_budget_and_throttled_requests_are_counted_apart() {
    let fake = fake();
    let id = create_fs(&fake, "data");
    fake.set_rate_limit(Some(RateLimit {
        list: 2,
        other: 100,
        window: Duration::from_secs(60),
    }));
    let quotas = format!("v4beta/nfs/spaces/7/filesystems/{id}/quotas");
    let statuses: Vec<u16> = (0..3)
        .map(|_| raw(&fake, "GET", &format!("{quotas}?page=1"), &[], None).0)
        .collect();
    assert_eq!(
        statuses,
        [200, 200, 429],
        "the third list is over its budget"
    );
    let (posted, _, body) = raw(
        &fake,
        "POST",
        &quotas,
        &[],
        Some(json!({"path": "/a", "max_capacity_bytes": 1024})),
    );
    assert_eq!(posted, 200, "a write has its own budget: {body}");
    let list = "GET nfs/spaces/{id}/filesystems/{id}/quotas".to_string();
    assert_eq!(fake.request_counts().get(&list), Some(&2), "executed");
    assert_eq!(fake.throttled_counts(), BTreeMap::from([(list, 1)]));
    assert_eq!(fake.throttled(), 1);
}

/// Tags are at most 50 characters, as the API takes them: the driver's
/// longest (a pool's, with the longest cluster identity and pool name)
/// fits; one over is refused, field `tags`.
#[test]
fn a_tag_over_fifty_characters_is_refused() {
    let fake = fake();
    let post = |tag: &str| {
        raw(
            &fake,
            "POST",
            "v4beta/nfs/spaces/7/filesystems",
            &[],
            Some(
                json!({"label": "t", "region": "us-ord", "max_capacity_bytes": 1024, "tags": [tag]}),
            ),
        )
    };
    let longest_pool = format!("csi-pool.{}", "a".repeat(24));
    let longest_cluster = format!("csi-cluster.{}", "b".repeat(16));
    for tag in [&longest_pool, &longest_cluster, &"c".repeat(50)] {
        let (status, _, body) = post(tag);
        assert_eq!(status, 200, "{tag}: {body}");
    }
    let (status, _, body) = post(&"d".repeat(51));
    assert_eq!(status, 400, "{body}");
    assert_eq!(body["errors"][0]["field"], "tags", "{body}");
}
