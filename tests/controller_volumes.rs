//! CreateVolume, DeleteVolume, ValidateVolumeCapabilities and
//! ControllerGetVolume through the real binary, against the fake Linode and
//! Kubernetes servers: validation, idempotency, region discovery, backend
//! faults and the per-name lock.

mod common;

use common::controller::*;
use common::requests::*;
use common::rpc::*;
use common::wait_for;
use grpcio::{CallOption, RpcStatusCode as Code};
use linode_nfs_csi::fake::{FakeNode, FaultRule, Lifecycle, SpaceSeed};
use linode_nfs_csi::proto::csi;
use std::time::{Duration, Instant};

const GIB: i64 = 1 << 30;
/// Long enough that only a wedged driver misses it.
const PATIENCE: Duration = Duration::from_secs(30);

#[test]
fn create_volume_returns_backend_state_and_repeats_are_idempotent() {
    let env = Setup::new().start();
    let req = with_capacity(
        volume_req(
            "PVC-Alpha",
            &[
                (P_SPACE_ID, " 7 ".into()),
                (P_TAGS, "team-a, prod,,".into()),
            ],
        ),
        GIB,
        0,
    );
    let first = env.create_with(&req);

    let fs = env.filesystem("pvc-alpha");
    assert_eq!(first.volume_id, format!("{SPACE}/{}", fs.id));
    assert_eq!(first.capacity_bytes, GIB);
    assert_eq!(fs.max_capacity_bytes, Some(GIB));
    assert_eq!(fs.region, REGION);
    // The user's tags, and the mark that makes it one of this driver's volumes.
    assert_eq!(
        fs.tags,
        vec![
            "team-a",
            "prod",
            "csi.linodenfs.csi.linode.com",
            common::CLUSTER_TAG
        ]
    );
    let post = env.last_request("POST").json();
    assert_eq!(post["protocol_versions"], serde_json::json!(["nfsv4"]));
    assert_eq!(post["max_capacity_bytes"], serde_json::json!(GIB));

    assert_eq!(first.volume_context.len(), 6, "{:?}", first.volume_context);
    assert_eq!(ctx(&first, "space-id"), Some("7"));
    assert_eq!(
        ctx(&first, "filesystem-id"),
        Some(fs.id.to_string().as_str())
    );
    assert_eq!(ctx(&first, "mount-target"), fs.mount_target_fqdn.as_deref());
    assert_eq!(
        ctx(&first, "mount-target-ips"),
        Some(fs.mount_target_ips.join(",").as_str())
    );
    assert!(!fs.mount_target_ips.is_empty());
    assert_eq!(ctx(&first, "mtls-mode"), Some("disabled"));
    assert_eq!(ctx(&first, "region"), Some(REGION));
    assert!(first.content_source.is_none());

    let again = env.create_with(&req);
    assert_eq!(again, first);
    assert_eq!(env.live_filesystems().len(), 1);
    assert_eq!(env.linode.calls("POST", FS_LIST), 1);
    // No squash was asked for: the filesystem policy is never read or written.
    assert_eq!(env.linode.calls("*", FS_POLICY), 0);
}

#[test]
fn create_volume_capacity_defaults_and_limits() {
    let env = Setup::new().env("DEFAULT_CAPACITY", "2Gi").start();
    let v = env.create_ok("no-range");
    assert_eq!(v.capacity_bytes, 2 * GIB);
    assert_eq!(env.filesystem("no-range").max_capacity_bytes, Some(2 * GIB));

    // Only a limit: the limit, below the default or above it.
    for (name, limit) in [("limit-below", GIB), ("limit-above", 3 * GIB)] {
        let v = env.create_with(&with_capacity(volume_req(name, &by_id()), 0, limit));
        assert_eq!(v.capacity_bytes, limit, "{name}");
        assert_eq!(env.filesystem(name).max_capacity_bytes, Some(limit));
    }

    let bad = with_capacity(volume_req("inverted", &by_id()), 2 * GIB, GIB);
    assert_eq!(err_code(env.create(&bad)), Code::INVALID_ARGUMENT);
}

#[test]
fn create_volume_rejects_bad_requests_before_any_backend_call() {
    let env = Setup::new().start();
    let no_access_mode = {
        let mut c = csi::VolumeCapability::new();
        c.set_mount(csi::volume_capability::MountVolume::new());
        c
    };
    let unknown_mode = {
        let mut c = mount_cap(Mode::SINGLE_NODE_WRITER);
        c.access_mode.as_mut().unwrap().mode = protobuf::EnumOrUnknown::from_i32(99);
        c
    };
    let pvc_clone = |source: &str| from_volume(volume_req("clone", &by_id()), source);
    let with_caps = |caps: Vec<csi::VolumeCapability>| {
        let mut r = volume_req("v", &by_id());
        r.volume_capabilities = caps;
        r
    };
    let cases: Vec<(&str, csi::CreateVolumeRequest, Code)> = vec![
        (
            "empty name",
            volume_req("", &by_id()),
            Code::INVALID_ARGUMENT,
        ),
        ("no capabilities", with_caps(vec![]), Code::INVALID_ARGUMENT),
        (
            "block",
            with_caps(vec![mount_cap(Mode::SINGLE_NODE_WRITER), block_cap()]),
            Code::INVALID_ARGUMENT,
        ),
        (
            "no access mode",
            with_caps(vec![no_access_mode]),
            Code::INVALID_ARGUMENT,
        ),
        (
            "UNKNOWN access mode",
            with_caps(vec![mount_cap(Mode::UNKNOWN)]),
            Code::INVALID_ARGUMENT,
        ),
        (
            "undefined access mode",
            with_caps(vec![unknown_mode]),
            Code::INVALID_ARGUMENT,
        ),
        (
            "no space",
            volume_req("v", &[(P_TAGS, "a".into())]),
            Code::INVALID_ARGUMENT,
        ),
        (
            "unprefixed space id",
            volume_req("v", &[("space-id", "7".into())]),
            Code::INVALID_ARGUMENT,
        ),
        (
            "both spaces",
            volume_req(
                "v",
                &[(P_SPACE_ID, "7".into()), (P_SPACE_LABEL, "shared".into())],
            ),
            Code::INVALID_ARGUMENT,
        ),
        (
            "space id 0",
            volume_req("v", &[(P_SPACE_ID, "0".into())]),
            Code::INVALID_ARGUMENT,
        ),
        (
            "space id negative",
            volume_req("v", &[(P_SPACE_ID, "-7".into())]),
            Code::INVALID_ARGUMENT,
        ),
        (
            "space id text",
            volume_req("v", &[(P_SPACE_ID, "seven".into())]),
            Code::INVALID_ARGUMENT,
        ),
        (
            "bad squash",
            volume_req(
                "v",
                &[(P_SPACE_ID, "7".into()), (P_SQUASH, "squash_all".into())],
            ),
            Code::INVALID_ARGUMENT,
        ),
        ("clone of no volume", pvc_clone(""), Code::INVALID_ARGUMENT),
        (
            "clone of an opaque id",
            pvc_clone("fake-vol-id-1"),
            Code::NOT_FOUND,
        ),
        (
            "unknown mutable parameter",
            {
                let mut r = volume_req("v", &by_id());
                r.mutable_parameters
                    .insert("XXX_FakeKey".into(), "XXX_FakeValue".into());
                r
            },
            Code::INVALID_ARGUMENT,
        ),
        (
            "empty snapshot id",
            from_snapshot(volume_req("v", &by_id()), ""),
            Code::INVALID_ARGUMENT,
        ),
        (
            "opaque snapshot id",
            from_snapshot(volume_req("v", &by_id()), "snap-123"),
            Code::NOT_FOUND,
        ),
        (
            "two-part snapshot id",
            from_snapshot(volume_req("v", &by_id()), "7/101"),
            Code::NOT_FOUND,
        ),
    ];
    for (what, req, want) in cases {
        let got = err_code(env.create(&req));
        assert_eq!(got, want, "{what}");
    }
    assert!(
        env.linode.requests().is_empty(),
        "{:?}",
        env.requests_since(0)
    );
    assert_eq!(
        env.kube.requests(),
        0,
        "validation must come before region discovery"
    );
}

#[test]
fn every_defined_access_mode_is_accepted() {
    let env = Setup::new().start();
    let mut req = volume_req("all-modes", &by_id());
    req.volume_capabilities = [
        Mode::SINGLE_NODE_WRITER,
        Mode::SINGLE_NODE_READER_ONLY,
        Mode::MULTI_NODE_READER_ONLY,
        Mode::MULTI_NODE_SINGLE_WRITER,
        Mode::MULTI_NODE_MULTI_WRITER,
        Mode::SINGLE_NODE_SINGLE_WRITER,
        Mode::SINGLE_NODE_MULTI_WRITER,
    ]
    .into_iter()
    .map(mount_cap)
    .collect();
    env.create(&req).unwrap();
}

#[test]
fn same_name_with_incompatible_parameters_is_already_exists() {
    let env = Setup::new().start();
    let base = |tags: &str| {
        volume_req(
            "pvc-reuse",
            &[(P_SPACE_ID, "7".into()), (P_TAGS, tags.into())],
        )
    };
    let first = env.create_with(&with_capacity(base("a,b"), GIB, 4 * GIB));

    // Tags are a set: another order is the same request.
    let same = env.create_with(&with_capacity(base("b, a"), GIB, 4 * GIB));
    assert_eq!(same.volume_id, first.volume_id);

    let cases = [
        ("more than it has", with_capacity(base("a,b"), 2 * GIB, 0)),
        ("limit below it", with_capacity(base("a,b"), 0, GIB / 2)),
        ("other tags", with_capacity(base("a,c"), GIB, 0)),
        ("fewer tags", with_capacity(base("a"), GIB, 0)),
        ("no tags", with_capacity(base(""), GIB, 0)),
    ];
    for (what, req) in cases {
        assert_eq!(err_code(env.create(&req)), Code::ALREADY_EXISTS, "{what}");
    }
    assert_eq!(env.live_filesystems().len(), 1);
    assert_eq!(env.linode.calls("POST", FS_LIST), 1);
}

#[test]
fn space_by_label_zero_one_or_many_matches() {
    let env = Setup::new()
        .seed(|s| {
            s.with_space(SpaceSeed::new(8, "dup"))
                .with_space(SpaceSeed::new(9, "dup"))
        })
        .start();
    let by_label = |name: &str, label: &str| volume_req(name, &[(P_SPACE_LABEL, label.into())]);

    let v = env.create_with(&by_label("by-label", SPACE_LABEL));
    assert_eq!(ids_of(&v.volume_id).0, SPACE);
    assert_eq!(env.filesystem("by-label").space_id, SPACE);

    assert_eq!(
        err_code(env.create(&by_label("nowhere", "missing"))),
        Code::NOT_FOUND
    );
    assert_eq!(
        err_code(env.create(&by_label("ambiguous", "dup"))),
        Code::FAILED_PRECONDITION
    );
    let unknown = env
        .create(&volume_req("unknown-id", &[(P_SPACE_ID, "99".into())]))
        .unwrap_err();
    assert_eq!(code_of(&unknown), Code::NOT_FOUND);
    // The client names the call and the object once; nothing repeats it.
    assert_eq!(message_of(&unknown), "get NFS space 99: [404] Not found");
    assert_eq!(env.live_filesystems().len(), 1);
}

#[test]
fn names_of_128_characters_map_to_a_stable_63_byte_label() {
    let env = Setup::new().start();
    let name = format!("PVC-{}", "x".repeat(124));
    assert_eq!(name.len(), 128);
    let first = env.create_ok(&name);
    let fs = env.filesystem(&format!("pvc-{}", "x".repeat(59)));
    assert_eq!(fs.label.len(), 63);
    assert_eq!(env.create_ok(&name), first);
    assert_eq!(env.live_filesystems().len(), 1);
}

#[test]
fn space_mtls_mode_lands_in_the_volume_context() {
    let env = Setup::new()
        .seed(|s| {
            let mut required = SpaceSeed::new(8, "mtls");
            required.mtls_mode = "required".into();
            let mut legacy = SpaceSeed::new(9, "legacy");
            legacy.policy_missing = true;
            s.with_space(required).with_space(legacy)
        })
        .start();
    let v = env.create_with(&volume_req("on-mtls", &[(P_SPACE_ID, "8".into())]));
    assert_eq!(ctx(&v, "mtls-mode"), Some("required"));

    let v = env.create_with(&volume_req("on-legacy", &[(P_SPACE_ID, "9".into())]));
    assert_eq!(ctx(&v, "mtls-mode"), None, "{:?}", v.volume_context);
    assert_eq!(v.volume_context.len(), 5);
    // The space policy is read, never written.
    assert!(env
        .linode
        .requests()
        .iter()
        .all(|r| !(r.path.ends_with("access-policy") && r.method != "GET")));
}

#[test]
fn a_space_policy_endpoint_answering_501_leaves_the_mtls_mode_unknown() {
    // Uncached, so that every call reads the policy.
    let env = Setup::new().env("SPACE_CACHE_TTL", "0s").start();
    env.linode
        .inject(FaultRule::status("GET", "nfs/spaces/*/access-policy", 501));
    let v = env.create_ok("no-policy-endpoint");
    assert_eq!(ctx(&v, "mtls-mode"), None, "{:?}", v.volume_context);
    assert_eq!(v.volume_context.len(), 5);

    let got = env.get_volume(&v.volume_id).unwrap().volume.unwrap();
    assert_eq!(got.volume_context, v.volume_context);

    // Only 404 and 501 mean "no policy"; other failures still fail.
    env.linode.clear_faults();
    env.linode
        .inject(FaultRule::status("GET", "nfs/spaces/*/access-policy", 500).times(1));
    assert_eq!(
        err_code(env.create(&volume_req("policy-broken", &by_id()))),
        Code::INTERNAL
    );
}

#[test]
fn region_is_discovered_lazily_from_one_workload_node_and_cached() {
    let env = Setup::new()
        .nodes(vec![
            worker("a-control", "fr-par").label("node-role.kubernetes.io/control-plane", ""),
            worker("b-worker", REGION),
            worker("c-worker", "us-sea"),
        ])
        .spy_kube()
        .start();
    env.client
        .controller_get_capabilities(&csi::ControllerGetCapabilitiesRequest::new())
        .unwrap();
    assert_eq!(
        env.kube.requests(),
        0,
        "the controller must start without asking for nodes"
    );

    env.create_ok("first");
    assert_eq!(env.filesystem("first").region, REGION);
    // One node per page; the control-plane node scanned first leaves the
    // first page empty, and its continue token leads to the worker.
    let seen = env.spy.as_ref().unwrap().seen();
    assert_eq!(seen.len(), 2, "{seen:?}");
    for request in &seen {
        assert!(request.starts_with("/api/v1/nodes?"), "{seen:?}");
        assert!(
            request.split(['?', '&']).any(|p| p == "limit=1"),
            "{seen:?}"
        );
        assert!(request.contains("control-plane"), "{seen:?}");
    }
    assert!(
        seen[1].split(['?', '&']).any(|p| p == "continue=1"),
        "{seen:?}"
    );

    for name in ["second", "third", "fourth"] {
        env.create_ok(name);
    }
    assert_eq!(env.kube.requests(), 2, "the region is cached");
}

#[test]
fn region_discovery_failures_are_retried_by_later_calls() {
    let env = Setup::new().nodes(vec![]).start();
    assert_eq!(
        err_code(env.create(&volume_req("early", &by_id()))),
        Code::FAILED_PRECONDITION
    );

    env.kube.add_node(FakeNode::new("unlabelled"));
    assert_eq!(
        err_code(env.create(&volume_req("early", &by_id()))),
        Code::FAILED_PRECONDITION
    );

    env.kube.remove_node("unlabelled");
    env.kube.add_node(worker("w", REGION));
    // A failing Kubernetes API is transient: Unavailable, so it is retried.
    env.kube.fail_next(500, 1);
    assert_eq!(
        err_code(env.create(&volume_req("early", &by_id()))),
        Code::UNAVAILABLE
    );
    assert!(
        env.linode.requests().is_empty(),
        "no backend call without a region"
    );

    env.create_ok("early");
    assert_eq!(env.filesystem("early").region, REGION);
    let asked = env.kube.requests();
    env.create_ok("later");
    assert_eq!(env.kube.requests(), asked);
}

#[test]
fn beta_region_label_is_the_fallback() {
    let env = Setup::new()
        .nodes(vec![
            FakeNode::new("old-node").label("failure-domain.beta.kubernetes.io/region", "us-sea")
        ])
        .start();
    let v = env.create_ok("beta");
    assert_eq!(ctx(&v, "region"), Some("us-sea"));
    assert_eq!(env.filesystem("beta").region, "us-sea");
}

/// Each GET/PUT step of a CreateVolume with squash: the client retries 429
/// (here with `Retry-After: 0`), so four failures pass and five do not; a
/// failed call leaves at most one filesystem, which the retry adopts. A poll
/// of a wait is different: its failure keeps the wait going.
#[test]
fn transient_failures_on_each_create_step() {
    // Uncached, so that every create reads the Space and its policy.
    let env = Setup::new().env("SPACE_CACHE_TTL", "0s").start();
    let squash = |name: &str| {
        volume_req(
            name,
            &[(P_SPACE_ID, "7".into()), (P_SQUASH, "all_squash".into())],
        )
    };
    let steps = [
        ("GET", "nfs/spaces/*", false),
        ("GET", "nfs/spaces/*/access-policy", false),
        ("GET", FS_LIST, false),
        ("GET", FS_ONE, true),
        ("GET", FS_POLICY, false),
        ("PUT", FS_POLICY, false),
    ];
    for (n, (method, pattern, polled)) in steps.iter().enumerate() {
        let name = format!("step-{n}");
        env.linode
            .inject(FaultRule::rate_limited(method, pattern, 0).times(5));
        if *polled {
            let before = env.linode.calls(method, pattern);
            env.create(&squash(&name))
                .unwrap_or_else(|e| panic!("5 x 429 on the poll {method} {pattern}: {e:?}"));
            assert!(
                env.linode.calls(method, pattern) - before > 5,
                "the wait outlasted the failures of {method} {pattern}"
            );
            env.linode.clear_faults();
            continue;
        }
        let got = err_code(env.create(&squash(&name)));
        assert_eq!(got, Code::UNAVAILABLE, "{method} {pattern}");
        assert!(
            env.live_filesystems()
                .iter()
                .filter(|f| f.label == name)
                .count()
                <= 1
        );

        env.linode.clear_faults();
        env.create(&squash(&name))
            .unwrap_or_else(|e| panic!("retry after {method} {pattern}: {e:?}"));
        let fs = env.filesystem(&name);
        assert_eq!(env.squash(fs.id), "all_squash");

        let name = format!("step-{n}-retried");
        env.linode
            .inject(FaultRule::rate_limited(method, pattern, 0).times(4));
        env.create(&squash(&name))
            .unwrap_or_else(|e| panic!("4 x 429 on {method} {pattern}: {e:?}"));
        env.filesystem(&name);
        env.linode.clear_faults();
    }

    // 503 is retried with backoff too.
    env.linode
        .inject(FaultRule::status("GET", "nfs/spaces/*", 503).times(1));
    env.create_ok("after-503");
    env.linode
        .inject(FaultRule::status("GET", "nfs/spaces/*", 503).times(5));
    assert_eq!(
        err_code(env.create(&volume_req("after-5x503", &by_id()))),
        Code::UNAVAILABLE
    );
    env.linode.clear_faults();
}

#[test]
fn a_failed_post_is_never_repeated_blindly() {
    // A short request timeout: a create in doubt is held back for three.
    let env = Setup::new().env("LINODE_REQUEST_TIMEOUT", "1s").start();
    for status in [503, 500] {
        let name = format!("post-{status}");
        let posts = env.linode.calls("POST", FS_LIST);
        env.linode
            .inject(FaultRule::status("POST", FS_LIST, status).times(1));
        let got = err_code(env.create(&volume_req(&name, &by_id())));
        let want = if status == 500 {
            Code::INTERNAL
        } else {
            Code::UNAVAILABLE
        };
        assert_eq!(got, want, "{status}");
        assert_eq!(
            env.linode.calls("POST", FS_LIST),
            posts + 1,
            "{status}: one POST per call"
        );
        assert!(
            env.live_filesystems().is_empty()
                || env.live_filesystems().iter().all(|f| f.label != name)
        );
        if status == 500 {
            // A 500 may hide a create that happened: until that could
            // still land, a retry that finds nothing does not POST again.
            assert_eq!(
                err_code(env.create(&volume_req(&name, &by_id()))),
                Code::UNAVAILABLE
            );
            assert_eq!(env.linode.calls("POST", FS_LIST), posts + 1);
            wait_for("the doubt to pass", Duration::from_secs(30), || {
                env.create(&volume_req(&name, &by_id())).is_ok()
            });
        } else {
            // A refusal is known not to have happened: retried at once.
            env.create_ok(&name);
        }
        env.filesystem(&name);
        assert_eq!(env.linode.calls("POST", FS_LIST), posts + 2);
    }

    // A 429 was refused before it was processed: the client sends the POST
    // again after its Retry-After, and the one call makes one filesystem.
    let posts = env.linode.calls("POST", FS_LIST);
    env.linode
        .inject(FaultRule::status("POST", FS_LIST, 429).times(1));
    env.create_ok("post-429");
    assert_eq!(
        env.linode.calls("POST", FS_LIST),
        posts + 2,
        "429: one retry"
    );
    let made = env.live_filesystems();
    assert_eq!(made.iter().filter(|f| f.label == "post-429").count(), 1);
}

#[test]
fn a_create_whose_response_was_lost_is_adopted() {
    let env = Setup::new().start();
    // The backend made the filesystem but answered 500: the same call finds it.
    env.linode
        .inject(FaultRule::fail_after("POST", FS_LIST, 500).times(1));
    let v = env.create_ok("lost-reply");
    assert_eq!(
        v.volume_id,
        format!("{SPACE}/{}", env.filesystem("lost-reply").id)
    );
    assert_eq!(env.linode.calls("POST", FS_LIST), 1);

    // Same, but the lookup after the lost reply fails too: the call fails,
    // and the sidecar's retry adopts the filesystem instead of making another.
    let gate = env.linode.hang("POST", FS_LIST);
    env.linode
        .inject(FaultRule::fail_after("POST", FS_LIST, 504).times(1));
    let client = env.client.clone();
    let call =
        std::thread::spawn(move || client.create_volume(&volume_req("lost-twice", &by_id())));
    assert!(gate.wait_for_hits(1, Duration::from_secs(10)));
    env.linode
        .inject(FaultRule::rate_limited("GET", FS_LIST, 0).times(5));
    gate.release();
    assert_eq!(err_code(call.join().unwrap()), Code::UNAVAILABLE);
    env.linode.clear_faults();
    let fs = env.filesystem("lost-twice");

    let v = env.create_ok("lost-twice");
    assert_eq!(v.volume_id, format!("{SPACE}/{}", fs.id));
    assert_eq!(
        env.live_filesystems()
            .iter()
            .filter(|f| f.label == "lost-twice")
            .count(),
        1
    );
    assert_eq!(env.linode.calls("POST", FS_LIST), 2);
}

#[test]
fn wait_deadline_then_the_creating_filesystem_is_waited_for_not_duplicated() {
    let env = Setup::new().wait_timeout("1s").start();
    env.linode
        .set_filesystem_lifecycle("slow", Lifecycle::NeverActive);
    let started = Instant::now();
    assert_eq!(
        err_code(env.create(&volume_req("slow", &by_id()))),
        Code::DEADLINE_EXCEEDED
    );
    assert!(
        started.elapsed() < Duration::from_secs(5),
        "{:?}",
        started.elapsed()
    );
    let fs = env.filesystem("slow");
    assert_eq!(fs.status.as_str(), "creating");

    let polls = env.linode.calls("GET", FS_ONE);
    let client = env.client.clone();
    let retry = std::thread::spawn(move || client.create_volume(&volume_req("slow", &by_id())));
    wait_for(
        "the retry to poll the existing filesystem",
        Duration::from_secs(10),
        || env.linode.calls("GET", FS_ONE) > polls,
    );
    env.linode
        .set_filesystem_lifecycle("slow", Lifecycle::Normal);
    let v = retry.join().unwrap().unwrap().volume.unwrap();
    assert_eq!(v.volume_id, format!("{SPACE}/{}", fs.id));
    assert_eq!(env.linode.calls("POST", FS_LIST), 1);
    assert_eq!(env.live_filesystems().len(), 1);
}

#[test]
fn filesystems_that_fail_or_lack_a_mount_target_are_failed_precondition() {
    let env = Setup::new().wait_timeout("30s").start();
    env.linode
        .set_filesystem_lifecycle("broken", Lifecycle::StickInError);
    env.linode
        .set_filesystem_lifecycle("no-target", Lifecycle::ActiveWithoutMountTarget);
    env.linode
        .set_filesystem_lifecycle("ipv6-only", Lifecycle::ActiveWithoutFqdn);

    let started = Instant::now();
    assert_eq!(
        err_code(env.create(&volume_req("broken", &by_id()))),
        Code::FAILED_PRECONDITION
    );
    assert_eq!(
        err_code(env.create(&volume_req("broken", &by_id()))),
        Code::FAILED_PRECONDITION
    );
    assert!(
        started.elapsed() < Duration::from_secs(10),
        "error must end the wait early"
    );
    assert_eq!(env.linode.calls("POST", FS_LIST), 1);

    // ControllerGetVolume reports the broken filesystem as abnormal.
    let broken = env.filesystem("broken");
    let status = env
        .get_volume(&format!("{SPACE}/{}", broken.id))
        .unwrap()
        .status
        .unwrap();
    assert!(status.volume_condition.abnormal, "{status:?}");

    assert_eq!(
        err_code(env.create(&volume_req("no-target", &by_id()))),
        Code::FAILED_PRECONDITION
    );

    let v = env.create_ok("ipv6-only");
    assert_eq!(ctx(&v, "mount-target"), Some(""));
    assert!(
        ctx(&v, "mount-target-ips")
            .unwrap()
            .starts_with("[2001:db8::"),
        "{v:?}"
    );
}

#[test]
fn concurrent_creates_of_one_name_make_one_filesystem() {
    let env = Setup::new().start();
    // Long enough that the first caller still holds the name while the rest arrive.
    env.linode.set_activation_delay(Duration::from_millis(400));
    let calls: Vec<_> = (0..20)
        .map(|_| {
            let client = env.client.clone();
            std::thread::spawn(move || client.create_volume(&volume_req("contended", &by_id())))
        })
        .collect();
    let mut ids = Vec::new();
    let mut aborted = 0;
    for call in calls {
        match call.join().unwrap() {
            Ok(resp) => ids.push(resp.volume.unwrap().volume_id),
            Err(e) => {
                assert_eq!(code_of(&e), Code::ABORTED, "{e:?}");
                aborted += 1;
            }
        }
    }
    assert!(!ids.is_empty());
    assert!(aborted > 0, "the name lock was never contended");
    ids.sort();
    ids.dedup();
    assert_eq!(ids.len(), 1, "{ids:?}");
    assert_eq!(env.live_filesystems().len(), 1);
    assert_eq!(env.linode.calls("POST", FS_LIST), 1);
    assert_eq!(env.create_ok("contended").volume_id, ids[0]);
}

#[test]
fn names_that_map_to_one_label_share_the_create_lock() {
    let env = Setup::new().start();
    let lookup = env.linode.hang("GET", FS_LIST);
    let client = env.client.clone();
    let first =
        std::thread::spawn(move || client.create_volume(&volume_req("Case-Twin", &by_id())));
    assert!(
        lookup.wait_for_hits(1, PATIENCE),
        "the first create never looked up its label"
    );
    // Another name, the same label "case-twin": the same filesystem.
    let twin = env.client.create_volume_opt(
        &volume_req("case-twin", &by_id()),
        CallOption::default().timeout(PATIENCE),
    );
    assert_eq!(err_code(twin), Code::ABORTED);
    lookup.release();
    let made = first.join().unwrap().unwrap().volume.unwrap();
    assert_eq!(env.live_filesystems().len(), 1);
    assert_eq!(env.linode.calls("POST", FS_LIST), 1);
    assert_eq!(env.create_ok("case-twin").volume_id, made.volume_id);
}

#[test]
fn squash_is_applied_after_create_with_a_full_policy_put() {
    let env = Setup::new().start();
    let req = |name: &str, squash: &str| {
        volume_req(name, &[(P_SPACE_ID, "7".into()), (P_SQUASH, squash.into())])
    };
    env.create(&req("squashed", "all_squash")).unwrap();
    let fs = env.filesystem("squashed");
    let puts: Vec<_> = env
        .linode
        .requests()
        .into_iter()
        .filter(|r| r.method == "PUT")
        .collect();
    assert_eq!(puts.len(), 1, "{puts:?}");
    assert_eq!(
        puts[0].path,
        format!("nfs/spaces/{SPACE}/filesystems/{}/access-policy", fs.id)
    );
    let body = puts[0].json();
    let mut keys: Vec<&str> = body
        .as_object()
        .unwrap()
        .keys()
        .map(String::as_str)
        .collect();
    keys.sort();
    assert_eq!(
        keys,
        [
            "enabled",
            "label",
            "linode_ids",
            "protocols",
            "squash_policy"
        ]
    );
    assert_eq!(body["squash_policy"], "all_squash");
    assert_eq!(body["label"], "squashed");
    assert_eq!(body["enabled"], false);
    assert_eq!(body["linode_ids"], serde_json::json!([]));
    assert_eq!(body["protocols"], serde_json::json!(["nfsv4"]));
    let policy = env.linode.filesystem_policy(fs.id).unwrap();
    assert_eq!(policy.squash_policy.unwrap().as_str(), "all_squash");
    assert_eq!(policy.status.as_str(), "active");

    // A repeat changes nothing; another squash for the same name conflicts.
    env.create(&req("squashed", "all_squash")).unwrap();
    assert_eq!(env.linode.calls("PUT", FS_POLICY), 1);
    assert_eq!(
        err_code(env.create(&req("squashed", "none"))),
        Code::ALREADY_EXISTS
    );
    assert_eq!(env.squash(fs.id), "all_squash");

    // The backend default already matches: nothing to write.
    env.create(&req("default-squash", "root_squash")).unwrap();
    assert_eq!(env.linode.calls("PUT", FS_POLICY), 1);
}

#[test]
fn delete_volume_cases() {
    let env = Setup::new().start();
    assert_eq!(err_code(env.delete("")), Code::INVALID_ARGUMENT);
    for malformed in ["abc", "7", "7/", "7/x", " 7/101", "7/101/5", "0/101", "  "] {
        env.delete(malformed)
            .unwrap_or_else(|e| panic!("{malformed:?}: {e:?}"));
    }
    assert!(
        env.linode.requests().is_empty(),
        "{:?}",
        env.requests_since(0)
    );

    let v = env.create_ok("doomed");
    let fs = env.filesystem("doomed");
    env.linode
        .inject(FaultRule::status("DELETE", FS_ONE, 409).times(1));
    assert_eq!(
        err_code(env.delete(&v.volume_id)),
        Code::FAILED_PRECONDITION
    );
    assert_eq!(env.live_filesystems().len(), 1);

    env.delete(&v.volume_id).unwrap();
    assert!(env.live_filesystems().is_empty());
    let (gets, deletes) = (
        env.linode.calls("GET", FS_ONE),
        env.linode.calls("DELETE", FS_ONE),
    );
    env.delete(&v.volume_id).unwrap();
    assert_eq!(
        (
            env.linode.calls("GET", FS_ONE),
            env.linode.calls("DELETE", FS_ONE)
        ),
        (gets + 1, deletes),
        "the repeat asked, got 404, and had nothing to delete"
    );
    env.delete(&format!("{SPACE}/{}", fs.id + 1000)).unwrap();
    env.delete("99/1").unwrap();
    // Deleting never touches the space itself.
    assert!(env
        .linode
        .requests()
        .iter()
        .all(|r| r.method != "DELETE" || r.path.contains("/filesystems/")));
}

#[test]
fn validate_volume_capabilities_cases() {
    let env = Setup::new().start();
    let v = env.create_ok("validated");
    let req = |id: &str, caps: Vec<csi::VolumeCapability>| {
        let mut r = csi::ValidateVolumeCapabilitiesRequest::new();
        r.volume_id = id.to_string();
        r.volume_capabilities = caps;
        r.volume_context = v.volume_context.clone();
        r
    };
    let rwx = || {
        vec![
            mount_cap(Mode::MULTI_NODE_MULTI_WRITER),
            mount_cap(Mode::SINGLE_NODE_READER_ONLY),
        ]
    };

    let resp = env
        .client
        .validate_volume_capabilities(&req(&v.volume_id, rwx()))
        .unwrap();
    let confirmed = resp.confirmed.unwrap();
    assert_eq!(confirmed.volume_capabilities, rwx());
    assert_eq!(confirmed.volume_context, v.volume_context);

    let resp = env
        .client
        .validate_volume_capabilities(&req(&v.volume_id, vec![block_cap()]))
        .unwrap();
    assert!(resp.confirmed.is_none());
    assert!(!resp.message.is_empty());

    assert_eq!(
        err_code(env.client.validate_volume_capabilities(&req("", rwx()))),
        Code::INVALID_ARGUMENT
    );
    assert_eq!(
        err_code(
            env.client
                .validate_volume_capabilities(&req(&v.volume_id, vec![]))
        ),
        Code::INVALID_ARGUMENT
    );
    assert_eq!(
        err_code(
            env.client
                .validate_volume_capabilities(&req("7/99999", rwx()))
        ),
        Code::NOT_FOUND
    );
    let before = env.linode.requests().len();
    for malformed in ["not-a-volume", "7", " ", "7/1/2"] {
        assert_eq!(
            err_code(
                env.client
                    .validate_volume_capabilities(&req(malformed, rwx()))
            ),
            Code::NOT_FOUND
        );
    }
    assert_eq!(
        env.linode.requests().len(),
        before,
        "malformed ids need no backend call"
    );
}

#[test]
fn validate_volume_capabilities_confirms_only_what_holds_for_the_volume() {
    let env = Setup::new()
        .seed(|s| s.with_space(SpaceSeed::new(8, "other")))
        .start();
    let tagged = |name: &str| {
        volume_req(
            name,
            &[(P_SPACE_ID, "7".into()), (P_TAGS, "team-a,prod".into())],
        )
    };
    let v = env.create_with(&tagged("checked"));
    let other = env.create_with(&tagged("neighbour"));
    let validate = |f: &dyn Fn(&mut csi::ValidateVolumeCapabilitiesRequest)| {
        let mut r = csi::ValidateVolumeCapabilitiesRequest::new();
        r.volume_id = v.volume_id.clone();
        r.volume_capabilities = vec![mount_cap(Mode::MULTI_NODE_MULTI_WRITER)];
        f(&mut r);
        env.client.validate_volume_capabilities(&r).unwrap()
    };
    let confirmed = |what: &str, f: &dyn Fn(&mut csi::ValidateVolumeCapabilitiesRequest)| {
        let resp = validate(f);
        assert!(resp.message.is_empty(), "{what}: {}", resp.message);
        resp.confirmed
            .unwrap_or_else(|| panic!("{what}: not confirmed"))
    };
    let refused = |what: &str, f: &dyn Fn(&mut csi::ValidateVolumeCapabilitiesRequest)| {
        let resp = validate(f);
        assert!(resp.confirmed.is_none(), "{what}: confirmed {resp:?}");
        assert!(!resp.message.is_empty(), "{what}: no message");
        resp.message
    };

    // Parameters: those that made the volume, in any order, or none at all.
    for (what, pairs) in [
        (
            "space id, tags reordered",
            vec![(P_SPACE_ID, " 7 "), (P_TAGS, "prod, team-a")],
        ),
        (
            "space label",
            vec![(P_SPACE_LABEL, SPACE_LABEL), (P_TAGS, "team-a,prod")],
        ),
        (
            "squash it has",
            vec![
                (P_SPACE_ID, "7"),
                (P_TAGS, "team-a,prod"),
                (P_SQUASH, "root_squash"),
            ],
        ),
        (
            "provisioner keys",
            vec![
                (P_SPACE_ID, "7"),
                (P_TAGS, "team-a,prod"),
                ("csi.storage.k8s.io/pvc/name", "x"),
            ],
        ),
        ("none", vec![]),
    ] {
        let given = params(pairs.iter().map(|(k, v)| (*k, v.to_string())));
        let got = confirmed(what, &|r| r.parameters = given.clone());
        assert_eq!(got.parameters, given, "{what}");
    }
    for (what, pairs, says) in [
        ("another space by id", vec![(P_SPACE_ID, "8")], "space 8"),
        (
            "another space by label",
            vec![(P_SPACE_LABEL, "other"), (P_TAGS, "team-a,prod")],
            "space 8",
        ),
        (
            "an unknown label",
            vec![(P_SPACE_LABEL, "nowhere")],
            "nowhere",
        ),
        (
            "both space keys",
            vec![(P_SPACE_ID, "7"), (P_SPACE_LABEL, SPACE_LABEL)],
            "mutually exclusive",
        ),
        ("no space", vec![(P_TAGS, "team-a,prod")], "space-id"),
        (
            "other tags",
            vec![(P_SPACE_ID, "7"), (P_TAGS, "team-a")],
            "tags",
        ),
        (
            "another squash",
            vec![
                (P_SPACE_ID, "7"),
                (P_TAGS, "team-a,prod"),
                (P_SQUASH, "all_squash"),
            ],
            "squash",
        ),
    ] {
        let given = params(pairs.iter().map(|(k, v)| (*k, v.to_string())));
        let message = refused(what, &|r| r.parameters = given.clone());
        assert!(message.contains(says), "{what}: {message}");
    }

    // Mutable parameters: only the keys a VolumeAttributesClass may set, and
    // only the values the volume has.
    let message = refused("unknown mutable parameters", &|r| {
        r.mutable_parameters.insert("iops".into(), "100".into());
    });
    assert!(message.contains("unknown mutable parameter"), "{message}");
    let message = refused("other mutable tags", &|r| {
        r.mutable_parameters.insert(P_TAGS.into(), "team-b".into());
    });
    assert!(message.contains("tags"), "{message}");
    let got = confirmed("its own tags as mutable parameters", &|r| {
        r.mutable_parameters
            .insert(P_TAGS.into(), "prod,team-a".into());
    });
    assert_eq!(
        got.mutable_parameters.get(P_TAGS).map(String::as_str),
        Some("prod,team-a")
    );

    // The context: every key the driver derives must match; others pass.
    let mut with_extra = v.volume_context.clone();
    with_extra.insert("csi.storage.k8s.io/pv/name".into(), "pv-1".into());
    let got = confirmed("its own context plus a foreign key", &|r| {
        r.volume_context = with_extra.clone()
    });
    assert_eq!(got.volume_context, with_extra);
    let mut partial = v.volume_context.clone();
    partial.retain(|k, _| k == "mount-target");
    confirmed("part of its context", &|r| {
        r.volume_context = partial.clone()
    });
    for (key, value) in [
        ("mount-target", "elsewhere.example:/x"),
        ("mtls-mode", "required"),
        ("region", "fr-par"),
        ("space-id", "8"),
    ] {
        let mut wrong = v.volume_context.clone();
        wrong.insert(key.into(), value.into());
        let message = refused(key, &|r| r.volume_context = wrong.clone());
        assert!(message.contains(key), "{key}: {message}");
    }
    refused("another volume's context", &|r| {
        r.volume_context = other.volume_context.clone()
    });

    // Unsupported capabilities are still a message, whatever else is asked.
    let message = refused("block", &|r| r.volume_capabilities = vec![block_cap()]);
    assert!(message.contains("mount"), "{message}");
}

#[test]
fn volume_condition_is_abnormal_only_for_a_status_that_does_not_pass() {
    let env = Setup::new().wait_timeout("1s").start();
    env.linode
        .set_filesystem_lifecycle("stuck-creating", Lifecycle::NeverActive);
    env.linode
        .set_filesystem_lifecycle("broken", Lifecycle::StickInError);
    env.linode.set_deletion_delay(Duration::from_secs(600));
    for name in ["stuck-creating", "broken"] {
        env.create(&volume_req(name, &by_id())).unwrap_err();
    }
    let leaving = env.create_ok("leaving");
    env.delete(&leaving.volume_id).unwrap();
    let condition = |id: &str| {
        let status = env.get_volume(id).unwrap().status.unwrap();
        status.volume_condition.unwrap()
    };
    let id_of = |label: &str| {
        let fs = env
            .linode
            .filesystems()
            .into_iter()
            .find(|f| f.label == label)
            .unwrap();
        format!("{SPACE}/{}", fs.id)
    };
    let creating = condition(&id_of("stuck-creating"));
    assert!(!creating.abnormal, "{creating:?}");
    assert!(creating.message.ends_with("is creating"), "{creating:?}");
    for (label, status) in [("broken", "error"), ("leaving", "deleting")] {
        let c = condition(&id_of(label));
        assert!(c.abnormal, "{label}: {c:?}");
        assert!(c.message.ends_with(&format!("is {status}")), "{c:?}");
    }
}

#[test]
fn controller_get_volume_in_space_mode() {
    let env = Setup::new().start();
    let v = env.create_ok("looked-up");
    let get = |id: &str| env.get_volume(id);
    let resp = get(&v.volume_id).unwrap();
    let vol = resp.volume.unwrap();
    assert_eq!(vol.volume_id, v.volume_id);
    assert_eq!(vol.capacity_bytes, v.capacity_bytes);
    assert_eq!(
        vol.volume_context.get("mount-target"),
        v.volume_context.get("mount-target")
    );
    let status = resp.status.unwrap();
    assert!(status.published_node_ids.is_empty());
    assert!(!status.volume_condition.abnormal);
    // Space mode has no per-node ACL to read.
    assert_eq!(env.linode.calls("*", FS_POLICY), 0);

    assert_eq!(err_code(get("")), Code::INVALID_ARGUMENT);
    assert_eq!(err_code(get("7/99999")), Code::NOT_FOUND);
    assert_eq!(err_code(get("garbage")), Code::NOT_FOUND);
}

#[test]
fn unimplemented_controller_rpcs() {
    let env = Setup::new().start();
    let c = &env.client;
    // The API cannot change an existing filesystem's capacity.
    assert_eq!(
        err_code(c.controller_expand_volume(&csi::ControllerExpandVolumeRequest::new())),
        Code::UNIMPLEMENTED
    );
}

/// Figure for the report: backend requests of one fresh CreateVolume with
/// the space named by id, and the region and the Space already cached: the
/// lookup by label, the POST, and the poll of its wait (a lone waiter costs
/// a plain GET). A cold cache adds the Space and its access policy.
#[test]
fn figure_linode_requests_per_fresh_create() {
    let env = Setup::new().start();
    env.create_ok("warm-up");
    let cold: Vec<String> = env.requests_since(0);
    assert_eq!(
        cold[..2],
        [
            format!("GET nfs/spaces/{SPACE}"),
            format!("GET nfs/spaces/{SPACE}/access-policy"),
        ]
    );
    let before = env.linode.requests().len();
    env.create_ok("measured");
    let seen = env.requests_since(before);
    println!(
        "FIGURE linode requests per fresh CreateVolume (space by id, warm caches): {} {seen:?}",
        seen.len()
    );
    let fs = env.filesystem("measured");
    assert_eq!(
        seen,
        [
            format!("GET nfs/spaces/{SPACE}/filesystems"),
            format!("POST nfs/spaces/{SPACE}/filesystems"),
            format!("GET nfs/spaces/{SPACE}/filesystems/{}", fs.id),
        ]
    );
}

#[test]
fn secrets_and_the_token_never_reach_the_log() {
    let env = Setup::new().env("RUST_LOG", "debug").start();
    let mut req = volume_req("with-secrets", &by_id());
    req.secrets.insert("password".into(), "hunter2".into());
    env.create(&req).unwrap();
    // A failing call is logged too.
    req.name = String::new();
    assert_eq!(err_code(env.create(&req)), Code::INVALID_ARGUMENT);
    env.linode
        .inject(FaultRule::status("GET", FS_LIST, 401).times(1));
    req.name = "denied".into();
    assert_eq!(err_code(env.create(&req)), Code::PERMISSION_DENIED);

    let log = env.driver.logs();
    assert!(
        log.contains("CreateVolume request"),
        "debug request log missing:\n{log}"
    );
    assert!(log.contains("***"), "{log}");
    assert!(!log.contains("hunter2"), "{log}");
    assert!(!log.contains(&env.linode.token()), "{log}");
    assert!(!log.contains(KUBE_TOKEN), "{log}");
}

#[test]
fn a_squash_retry_waits_for_the_policy_an_earlier_attempt_wrote() {
    let env = Setup::new().wait_timeout("1s").start();
    // The first filesystem of a fresh fake is 101; its policy PUT never settles.
    env.linode.set_policy_lifecycle(101, Lifecycle::NeverActive);
    let req = volume_req(
        "settling",
        &[(P_SPACE_ID, "7".into()), (P_SQUASH, "none".into())],
    );
    let puts = || {
        env.linode
            .requests()
            .iter()
            .filter(|r| r.method == "PUT")
            .count()
    };
    assert_eq!(err_code(env.create(&req)), Code::DEADLINE_EXCEEDED);
    assert_eq!(env.filesystem("settling").id, 101);
    assert_eq!(puts(), 1);
    // The retry has nothing left to write, but the policy is not in force yet.
    assert_eq!(err_code(env.create(&req)), Code::DEADLINE_EXCEEDED);
    assert_eq!(puts(), 1);
    env.linode.set_policy_lifecycle(101, Lifecycle::Normal);
    env.create(&req).unwrap();
    assert_eq!(puts(), 1);
}

/// The Space and its mTLS mode are read once per `SPACE_CACHE_TTL`, read
/// again once it expires, and forgotten as soon as the Space answers 404.
#[test]
fn the_space_is_cached_refreshed_after_its_ttl_and_forgotten_on_a_404() {
    let env = Setup::new().env("SPACE_CACHE_TTL", "1s").start();
    let space_reads = || {
        (
            env.linode.calls("GET", "nfs/spaces/7"),
            env.linode.calls("GET", "nfs/spaces/7/access-policy"),
        )
    };
    env.create_ok("cached-0");
    env.create_ok("cached-1");
    env.create_ok("cached-2");
    assert_eq!(space_reads(), (1, 1), "one read for three creates");

    let mut n = 3;
    wait_for("the cache to expire", Duration::from_secs(30), || {
        env.create_ok(&format!("cached-{n}"));
        n += 1;
        space_reads() == (2, 2)
    });

    // The Space is gone (404 under it): the next create reads it afresh.
    let (before, _) = space_reads();
    env.linode
        .inject(FaultRule::status("GET", FS_LIST, 404).times(1));
    assert_eq!(
        err_code(env.create(&volume_req("after-404", &by_id()))),
        Code::NOT_FOUND
    );
    env.create_ok("after-404");
    assert_eq!(space_reads().0, before + 1);
}

/// Creates that find the Space uncached at once share one read of it: the
/// others wait for the first caller's answer instead of each asking.
#[test]
fn concurrent_creates_on_a_cold_cache_read_the_space_once() {
    let env = Setup::new().start();
    let gate = env.linode.hang("GET", "nfs/spaces/7");
    let calls: Vec<_> = (0..6)
        .map(|i| {
            let client = env.client.clone();
            std::thread::spawn(move || {
                client.create_volume(&volume_req(&format!("cold-{i}"), &by_id()))
            })
        })
        .collect();
    assert!(gate.wait_for_hits(1, Duration::from_secs(10)));
    assert!(
        !gate.wait_for_hits(2, Duration::from_secs(1)),
        "a second create asked for the Space while the first's read was under way"
    );
    gate.release();
    for call in calls {
        call.join().unwrap().expect("every create succeeds");
    }
    assert_eq!(env.linode.calls("GET", "nfs/spaces/7"), 1);
    assert_eq!(env.linode.calls("GET", "nfs/spaces/7/access-policy"), 1);
}

/// A create the backend applies after the client gave up on it (the POST
/// outlived LINODE_REQUEST_TIMEOUT): retries do not POST a second time while
/// it may still land, and adopt it once it has.
#[test]
fn a_create_that_lands_after_its_timeout_is_made_once() {
    let env = Setup::new().env("LINODE_REQUEST_TIMEOUT", "1s").start();
    env.create_ok("warm");
    env.linode
        .inject(FaultRule::latency("POST", FS_LIST, Duration::from_millis(1800)).times(1));
    let req = volume_req("late", &by_id());
    assert_eq!(
        err_code(env.create(&req)),
        Code::UNAVAILABLE,
        "the POST timed out"
    );
    // Retried as the provisioner does while Unavailable: any other answer,
    // or none in time, fails here.
    retry(&WHILE_UNAVAILABLE, || env.create(&req)).expect("the late create is adopted");
    assert_eq!(
        env.linode.calls("POST", FS_LIST),
        2,
        "the warm create and the late one"
    );
    assert_eq!(
        env.live_filesystems()
            .iter()
            .filter(|f| f.label == "late")
            .count(),
        1
    );
}

/// Two of our filesystems with one label are a create made twice across a
/// restart: the first made is the volume, the other is deleted, and
/// deleting the volume takes any twin along.
#[test]
fn twins_of_a_volume_are_swept() {
    use linode_nfs_csi::linode::{Cloud, NewFilesystem};
    let env = Setup::new().start();
    let cloud = env.someone_else();
    let twin = |label: &str| {
        cloud
            .create_filesystem(
                SPACE,
                &NewFilesystem {
                    label: label.into(),
                    region: REGION.into(),
                    max_capacity_bytes: 10 << 30,
                    tags: vec!["csi.linodenfs.csi.linode.com".into()],
                },
            )
            .unwrap()
    };
    let first = twin("doubled");
    let second = twin("doubled");
    let v = env.create_ok("doubled");
    assert_eq!(
        v.volume_id,
        format!("{SPACE}/{}", first.id),
        "the first made"
    );
    let live: Vec<u64> = env.live_filesystems().iter().map(|f| f.id).collect();
    assert!(!live.contains(&second.id), "the twin was deleted: {live:?}");

    let again = twin("doubled");
    env.delete(&v.volume_id).unwrap();
    let live: Vec<u64> = env.live_filesystems().iter().map(|f| f.id).collect();
    assert!(
        !live.contains(&again.id),
        "the late twin went with the volume: {live:?}"
    );

    // Someone else's filesystem with the label is no twin: refused.
    let v = env.create_ok("shared-label");
    cloud
        .create_filesystem(
            SPACE,
            &NewFilesystem {
                label: "shared-label".into(),
                region: REGION.into(),
                max_capacity_bytes: 10 << 30,
                tags: vec![],
            },
        )
        .unwrap();
    assert_eq!(
        err_code(env.create(&volume_req("shared-label", &by_id()))),
        Code::FAILED_PRECONDITION
    );
    env.delete(&v.volume_id).unwrap();
}
