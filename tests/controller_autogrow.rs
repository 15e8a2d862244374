//! Autogrow of directory volumes, through the real binary in the controller
//! role: the fake Linode API's quota usage plays the backend's samples,
//! the fake API server holds the claims and StorageClasses, and a stand-in
//! resizer (`common::resizer`) turns each patch of a claim into a
//! ControllerExpandVolume over the driver's gRPC socket. Each test reads
//! the claim, the quota and ControllerGetVolume, the events and the claim
//! lists the fake counted.

mod common;

use common::controller::*;
use common::requests::get_volume_req;
use common::resizer::Resizer;
use common::subdir::*;
use common::wait_for_or;
use linode_nfs_csi::fake::FakeStorageClass;
use linode_nfs_csi::identity::DRIVER_NAME;
use std::io::{Read, Write};
use std::time::{Duration, Instant};

const MIB: i64 = 1 << 20;
const THRESHOLD: &str = "linodenfs.csi.linode.com/autogrow-threshold";
const STEP: &str = "linodenfs.csi.linode.com/autogrow-step";
const MAX: &str = "linodenfs.csi.linode.com/autogrow-max";
const ANNOTATION: &str = "linodenfs.csi.linode.com/autogrow";
const PVC_NAME: &str = "csi.storage.k8s.io/pvc/name";
const PVC_NAMESPACE: &str = "csi.storage.k8s.io/pvc/namespace";
const PV_NAME: &str = "csi.storage.k8s.io/pv/name";
/// Upkeep rounds of these tests.
const ROUND: Duration = Duration::from_millis(300);
const NAMESPACE: &str = "team";
const CLASS: &str = "shared-autogrow";
const PATIENCE: Duration = Duration::from_secs(20);

fn autogrow_world() -> World {
    let world = world_with(|s| {
        s.env("MAINTENANCE_INTERVAL", &format!("{}ms", ROUND.as_millis()))
            .env("METRICS_ADDRESS", "127.0.0.1:0")
    });
    world
        .env
        .kube
        .add_storage_class(FakeStorageClass::new(CLASS, DRIVER_NAME, &[]).expandable());
    world
}

/// A volume `pv` of `size` for claim `team/<claim>` of `class`, bound,
/// made with the autogrow keys `policy`.
fn claimed(
    world: &World,
    claim: &str,
    pv: &str,
    class: &str,
    size: i64,
    policy: &[(&'static str, &str)],
) -> String {
    let mut extra = policy.to_vec();
    extra.extend([(PVC_NAME, claim), (PVC_NAMESPACE, NAMESPACE), (PV_NAME, pv)]);
    world.create_ok(pv, size, &extra);
    world
        .env
        .kube
        .add_claim(NAMESPACE, claim, class, Some(pv), size);
    world.id(pv)
}

/// The backend counts `bytes` used in volume `pv` now: a new sample.
fn sample(world: &World, pv: &str, bytes: i64) {
    let path = format!("/csi-volumes/{pv}");
    let quota = world
        .quotas()
        .into_iter()
        .find(|q| q.path == path)
        .unwrap_or_else(|| panic!("no quota at {path}"));
    assert!(world.env.linode.set_quota_usage(quota.id, bytes, 1));
}

fn quota_size(world: &World, pv: &str) -> i64 {
    let path = format!("/csi-volumes/{pv}");
    world
        .quotas()
        .into_iter()
        .find(|q| q.path == path)
        .and_then(|q| q.max_capacity_bytes)
        .unwrap()
}

fn requested(world: &World, claim: &str) -> i64 {
    world
        .env
        .kube
        .claim(NAMESPACE, claim)
        .unwrap()
        .requested
        .unwrap()
}

fn capacity(world: &World, claim: &str) -> i64 {
    world
        .env
        .kube
        .claim(NAMESPACE, claim)
        .unwrap()
        .capacity
        .unwrap_or(0)
}

fn reasons(world: &World, claim: &str) -> Vec<String> {
    world
        .env
        .kube
        .claim_events()
        .into_iter()
        .filter(|e| e.claim == claim)
        .map(|e| e.reason)
        .collect()
}

fn state(world: &World) -> String {
    format!(
        "events {:?}\n{}",
        world.env.kube.claim_events(),
        world.env.driver.logs()
    )
}

fn wait(world: &World, what: &str, cond: impl FnMut() -> bool) {
    wait_for_or(what, PATIENCE, cond, || state(world));
}

/// `rounds` more upkeep rounds have run (each lists the claims once while
/// some volume grows automatically).
fn after_rounds(world: &World, rounds: usize) {
    let from = world.env.kube.claim_lists();
    wait(world, &format!("{rounds} upkeep rounds"), || {
        world.env.kube.claim_lists() >= from + rounds
    });
}

fn metrics(world: &World) -> String {
    let addr: std::net::SocketAddr = world
        .env
        .driver
        .logs()
        .lines()
        .find_map(|l| {
            let rest = l.split("serving metrics on http://").nth(1)?;
            rest.strip_suffix("/metrics")?.parse().ok()
        })
        .expect("the metrics address is logged");
    let mut stream = std::net::TcpStream::connect(addr).unwrap();
    stream
        .write_all(b"GET /metrics HTTP/1.1\r\nHost: t\r\nConnection: close\r\n\r\n")
        .unwrap();
    let mut text = String::new();
    stream.read_to_string(&mut text).unwrap();
    text
}

#[test]
fn a_full_volume_grows_through_its_claim_once_per_sample_up_to_its_max() {
    let world = autogrow_world();
    let policy = [(THRESHOLD, "80"), (STEP, "1Gi"), (MAX, "4Gi")];
    let id = claimed(&world, "data", "pvc-data", CLASS, GIB, &policy);
    std::thread::scope(|scope| {
        let served = vec![(NAMESPACE.into(), "data".into(), id.clone())];
        let resizer = Resizer::start(
            scope,
            &world.env.kube,
            world.env.driver.controller(),
            served,
        );
        sample(&world, "pvc-data", 100 * MIB);
        after_rounds(&world, 2);
        assert_eq!(
            requested(&world, "data"),
            GIB,
            "nothing grows below the threshold"
        );

        // 900 MiB of 1 GiB: past 80 %.
        let written = Instant::now();
        sample(&world, "pvc-data", 900 * MIB);
        wait(
            &world,
            "the claim, the quota and the volume at 2 GiB",
            || capacity(&world, "data") == 2 * GIB,
        );
        let took = written.elapsed();
        assert_eq!(requested(&world, "data"), 2 * GIB);
        assert_eq!(quota_size(&world, "pvc-data"), 2 * GIB);
        let described = world
            .env
            .client
            .controller_get_volume(&get_volume_req(&id))
            .unwrap();
        assert_eq!(described.volume.unwrap().capacity_bytes, 2 * GIB);
        // Two rounds, and the resizer's turn, with room to spare on a busy machine.
        assert!(took < ROUND * 2 + Duration::from_secs(2), "took {took:?}");
        assert_eq!(resizer.expansions(), 1);

        // 3000 MiB: past the threshold at 2 GiB, and still at 3 GiB; but
        // that one sample grows the volume once, however many rounds pass.
        sample(&world, "pvc-data", 3000 * MIB);
        wait(&world, "3 GiB after a new sample", || {
            capacity(&world, "data") == 3 * GIB
        });
        after_rounds(&world, 3);
        assert_eq!(requested(&world, "data"), 3 * GIB, "one growth per sample");
        // A newer sample grows it again, to autogrow-max.
        sample(&world, "pvc-data", 3010 * MIB);
        wait(&world, "4 GiB after a newer sample", || {
            capacity(&world, "data") == 4 * GIB
        });

        // At autogrow-max: told once, never grown.
        sample(&world, "pvc-data", 3900 * MIB);
        wait(&world, "the at-max event", || {
            reasons(&world, "data").contains(&"AutogrowAtMax".to_string())
        });
        sample(&world, "pvc-data", 3950 * MIB);
        after_rounds(&world, 3);
        assert_eq!(requested(&world, "data"), 4 * GIB);
        assert_eq!(quota_size(&world, "pvc-data"), 4 * GIB);
        assert_eq!(
            reasons(&world, "data"),
            [
                "AutogrowGrowing",
                "AutogrowGrowing",
                "AutogrowGrowing",
                "AutogrowAtMax"
            ]
        );
        assert_eq!(resizer.expansions(), 3);
    });
    let text = metrics(&world);
    let series = |family: &str| format!("{family}{{volume=\"{id}\",claim=\"team/data\"}} ");
    assert!(
        text.contains(&format!(
            "{}{}",
            series("csi_directory_volume_capacity_bytes"),
            4 * GIB
        )),
        "{text}"
    );
    assert!(
        text.contains(&format!(
            "{}{}",
            series("csi_directory_volume_used_bytes"),
            3950 * MIB
        )),
        "{text}"
    );
    assert!(text.contains("csi_directory_volume_autogrow_total{outcome=\"grown\"} 3\n"));
    assert!(text.contains("csi_directory_volume_autogrow_total{outcome=\"at_max\"} 1\n"));
    // The parent's account: what its quotas promise now, one seed, and
    // the upkeep's samples each a fresh list.
    let parent = id.rsplit_once('/').unwrap().0;
    assert!(
        text.contains(&format!(
            "csi_parent_promised_bytes{{parent=\"{parent}\"}} {}\n",
            4 * GIB
        )),
        "{text}"
    );
    assert!(
        text.contains("csi_parent_account_reads_total{reason=\"seed\"} 1\n"),
        "{text}"
    );
    assert!(
        text.contains("csi_parent_account_reads_total{reason=\"lease\"} 0\n"),
        "{text}"
    );
    let fresh: u64 = text
        .lines()
        .find_map(|l| l.strip_prefix("csi_parent_account_reads_total{reason=\"fresh\"} "))
        .and_then(|v| v.parse().ok())
        .unwrap();
    assert!(fresh >= 3, "{text}");
}

#[test]
fn growth_the_parent_cannot_hold_is_never_asked_and_told_once() {
    let world = autogrow_world();
    // The parent holds 100 GiB: a step of 200 GiB never fits.
    let id = claimed(
        &world,
        "big",
        "pvc-big",
        CLASS,
        GIB,
        &[(THRESHOLD, "80"), (STEP, "200Gi")],
    );
    sample(&world, "pvc-big", 900 * MIB);
    wait(&world, "the no-room event", || {
        reasons(&world, "big").contains(&"AutogrowNoRoom".to_string())
    });
    sample(&world, "pvc-big", 950 * MIB);
    after_rounds(&world, 3);
    assert_eq!(
        reasons(&world, "big"),
        ["AutogrowNoRoom"],
        "once per target size"
    );
    assert_eq!(world.env.kube.claim_patches(), 0);
    assert_eq!(requested(&world, "big"), GIB);
    assert_eq!(quota_size(&world, "pvc-big"), GIB);
    let message = &world.env.kube.claim_events()[0].message;
    assert!(message.contains("does not fit"), "{message}");
    // Deleted: its usage series vanish at once.
    world
        .env
        .client
        .delete_volume(&common::requests::delete_req(&id))
        .unwrap();
    assert!(!metrics(&world).contains(&format!("volume=\"{id}\"")));
}

#[test]
fn claims_opted_out_bound_elsewhere_or_of_a_fixed_class_are_not_grown() {
    let world = autogrow_world();
    let started = Instant::now();
    world
        .env
        .kube
        .add_storage_class(FakeStorageClass::new("fixed", DRIVER_NAME, &[]));
    let policy = [(THRESHOLD, "80"), (STEP, "1Gi")];
    for (claim, pv, class) in [
        ("off", "pvc-off", CLASS),
        ("typo", "pvc-typo", CLASS),
        ("fixed", "pvc-fixed", "fixed"),
        ("moved", "pvc-moved", CLASS),
        ("grows", "pvc-grows", CLASS),
    ] {
        claimed(&world, claim, pv, class, GIB, &policy);
    }
    let kube = &world.env.kube;
    kube.change_claim(NAMESPACE, "off", |c| {
        c.annotations.insert(ANNOTATION.into(), "off".into());
    });
    kube.change_claim(NAMESPACE, "typo", |c| {
        c.annotations.insert(ANNOTATION.into(), "false".into());
    });
    // Deleted and made again: the claim of that name is bound to another PV.
    kube.change_claim(NAMESPACE, "moved", |c| {
        c.volume_name = Some("pvc-other".into());
    });
    for pv in ["pvc-off", "pvc-typo", "pvc-fixed", "pvc-moved", "pvc-grows"] {
        sample(&world, pv, 900 * MIB);
    }
    wait(&world, "the one claim that may grow to grow", || {
        requested(&world, "grows") == 2 * GIB
    });
    after_rounds(&world, 3);
    for claim in ["off", "typo", "fixed", "moved"] {
        assert_eq!(requested(&world, claim), GIB, "{claim}");
    }
    assert_eq!(reasons(&world, "off"), Vec::<String>::new());
    assert_eq!(reasons(&world, "moved"), Vec::<String>::new());
    assert_eq!(reasons(&world, "typo"), ["AutogrowBadAnnotation"]);
    assert_eq!(reasons(&world, "fixed"), ["AutogrowNotExpandable"]);
    // One patch, the one that grew; the claims of five volumes read by
    // one list a round (and the lease's first round), never one by one.
    assert_eq!(kube.claim_patches(), 1);
    assert_eq!(kube.claim_reads(), 0);
    let rounds = started.elapsed().as_millis() / ROUND.as_millis() + 1;
    assert!(
        kube.claim_lists() as u128 <= rounds + 1,
        "{} lists in at most {rounds} rounds",
        kube.claim_lists()
    );
}

#[test]
fn a_resize_the_resizer_found_infeasible_stops_autogrow_until_the_claim_changes() {
    let world = autogrow_world();
    claimed(
        &world,
        "stuck",
        "pvc-stuck",
        CLASS,
        GIB,
        &[(THRESHOLD, "80"), (STEP, "1Gi")],
    );
    let kube = &world.env.kube;
    // A resize someone asked for, which the resizer gave up on.
    kube.change_claim(NAMESPACE, "stuck", |c| {
        c.requested = Some(GIB + 512 * MIB);
        c.resize_status = Some("ControllerResizeInfeasible".into());
    });
    sample(&world, "pvc-stuck", 900 * MIB);
    wait(&world, "the stopped event", || {
        reasons(&world, "stuck") == ["AutogrowStopped"]
    });
    sample(&world, "pvc-stuck", 950 * MIB);
    after_rounds(&world, 3);
    assert_eq!(kube.claim_patches(), 0);
    assert_eq!(reasons(&world, "stuck"), ["AutogrowStopped"]);
    // The user lowers the request again (recovery): autogrow resumes.
    kube.change_claim(NAMESPACE, "stuck", |c| {
        c.requested = Some(GIB);
        c.resize_status = None;
    });
    wait(&world, "the claim to grow", || {
        requested(&world, "stuck") == 2 * GIB
    });
}

#[test]
fn autogrow_keys_are_refused_where_they_cannot_work() {
    let world = world();
    let refused = |size: i64, policy: &[(&'static str, &str)], naming: &str| {
        let err = world.create("pvc-bad", size, policy).unwrap_err();
        let grpcio::Error::RpcFailure(s) = &err else {
            panic!("{err:?}")
        };
        assert_eq!(s.code(), grpcio::RpcStatusCode::INVALID_ARGUMENT, "{err:?}");
        assert!(s.message().contains(naming), "{err:?}");
    };
    refused(GIB, &[(THRESHOLD, "100")], THRESHOLD);
    refused(GIB, &[(THRESHOLD, "49")], THRESHOLD);
    refused(GIB, &[(THRESHOLD, "80"), (STEP, "0")], STEP);
    refused(GIB, &[(THRESHOLD, "80"), (STEP, "512Ki")], STEP);
    refused(2 * GIB, &[(THRESHOLD, "80"), (MAX, "1Gi")], MAX);
    assert!(world.dirs().is_empty() && world.quotas().is_empty());
    // A whole-filesystem class: its size cannot change.
    let mut p = by_id();
    p.push((THRESHOLD, "80".into()));
    let err = world
        .env
        .create(&with_capacity(volume_req("pvc-fs", &p), GIB, 0))
        .unwrap_err();
    assert!(format!("{err:?}").contains(THRESHOLD), "{err:?}");

    // Without VOLUME_EXPANSION=subdirectory nothing can grow.
    let fixed = world_with(|s| s.env("VOLUME_EXPANSION", "off"));
    let err = fixed
        .create("pvc-bad", GIB, &[(THRESHOLD, "80")])
        .unwrap_err();
    assert!(format!("{err:?}").contains("VOLUME_EXPANSION"), "{err:?}");
    assert!(fixed.dirs().is_empty());
}

#[test]
fn a_new_controller_does_not_grow_again_on_the_sample_that_grew_the_volume() {
    let mut world = autogrow_world();
    let policy = [(THRESHOLD, "80"), (STEP, "1Gi")];
    let id = claimed(&world, "data", "pvc-data", CLASS, GIB, &policy);
    let served = vec![(NAMESPACE.to_string(), "data".to_string(), id)];
    // 3000 MiB: past the threshold at 1 GiB, and still at 2 GiB.
    sample(&world, "pvc-data", 3000 * MIB);
    std::thread::scope(|scope| {
        let _resizer = Resizer::start(
            scope,
            &world.env.kube,
            world.env.driver.controller(),
            served.clone(),
        );
        wait(&world, "2 GiB", || capacity(&world, "data") == 2 * GIB);
    });
    // A new process, which never saw what the old one asked.
    world.env.driver.kill();
    world.env.restart();
    std::thread::scope(|scope| {
        let _resizer = Resizer::start(
            scope,
            &world.env.kube,
            world.env.driver.controller(),
            served.clone(),
        );
        after_rounds(&world, 3);
        assert_eq!(requested(&world, "data"), 2 * GIB, "the same sample again");
        // The backend counts anew, in a later second than the resize.
        let resized = world
            .quotas()
            .into_iter()
            .find(|q| q.path == "/csi-volumes/pvc-data")
            .and_then(|q| q.updated)
            .and_then(|t| linode_nfs_csi::linode::naive_to_unix(&t))
            .expect("the quota's last update");
        wait(&world, "a second after the resize", || {
            let now = std::time::SystemTime::now()
                .duration_since(std::time::UNIX_EPOCH)
                .unwrap();
            now.as_secs() as i64 > resized
        });
        sample(&world, "pvc-data", 3000 * MIB);
        wait(&world, "3 GiB on a newer sample", || {
            capacity(&world, "data") == 3 * GIB
        });
    });
}

#[test]
fn another_cluster_s_volume_on_the_same_parent_is_neither_grown_nor_shown() {
    let world = autogrow_world();
    let policy = [(THRESHOLD, "80"), (STEP, "1Gi")];
    let ours = claimed(&world, "ours", "pvc-ours", CLASS, GIB, &policy);
    let theirs = claimed(&world, "theirs", "pvc-theirs", CLASS, GIB, &policy);
    // Its marker says another cluster made it (a second cluster sharing
    // the parent, with a claim of the same namespace and name here).
    let marker = world.marker("pvc-theirs");
    let text = std::fs::read_to_string(&marker).unwrap();
    let mut lines: Vec<String> = text
        .lines()
        .filter(|l| !l.starts_with("cluster: "))
        .map(str::to_string)
        .collect();
    lines.push("cluster: elsewhere".into());
    std::fs::write(&marker, lines.join("\n") + "\n").unwrap();
    sample(&world, "pvc-ours", 900 * MIB);
    sample(&world, "pvc-theirs", 900 * MIB);
    wait(&world, "our claim to grow", || {
        requested(&world, "ours") == 2 * GIB
    });
    after_rounds(&world, 2);
    assert_eq!(requested(&world, "theirs"), GIB);
    assert!(reasons(&world, "theirs").is_empty());
    let text = metrics(&world);
    assert!(text.contains(&format!("volume=\"{ours}\"")), "{text}");
    assert!(!text.contains(&format!("volume=\"{theirs}\"")), "{text}");
}
