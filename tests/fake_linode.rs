//! The fake Linode API's own contract, spoken to with raw HTTP where the real
//! client would never send such a request: auth, 404/405 bodies, paging and
//! filter validation, full-replace vs merge policy PUTs, seeding from JSON,
//! persistence across restarts, the event hook and the latency/hang faults.

use linode_nfs_csi::fake::{FakeEvent, FakeLinode, FaultRule, PolicyPut, Seed};
use serde_json::{json, Value};
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
    let agent = ureq::Agent::config_builder()
        .http_status_as_error(false)
        .build()
        .new_agent();
    let mut req = ureq::http::Request::builder()
        .method(method)
        .uri(format!("{}/{path}", fake.url()))
        .header("Authorization", format!("Bearer {}", fake.token()));
    for (k, v) in headers {
        req = req.header(*k, *v);
    }
    let mut resp = match body {
        Some(b) => agent.run(req.body(b.to_string()).unwrap()),
        None => agent.run(req.body(()).unwrap()),
    }
    .unwrap();
    let ctype = resp
        .headers()
        .get("Content-Type")
        .map(|v| v.to_str().unwrap().to_string())
        .unwrap_or_default();
    let text = resp.body_mut().read_to_string().unwrap();
    (
        resp.status().as_u16(),
        ctype,
        serde_json::from_str(&text).unwrap_or(Value::Null),
    )
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
