//! One active controller: two controller processes on one fake Linode and
//! one fake Kubernetes API, as in a rollout's overlap, `replicas: 2`, or a
//! replaced pod whose predecessor still runs. The holder of the Lease
//! serves; the standby answers every writing RPC Unavailable naming the
//! holder, serves reads, runs no upkeep and reports not ready. After kill
//! -9 of the holder the standby serves within one lease period and one
//! retry; after SIGTERM (the holder hands the lease back) within 2 s. A
//! holder that cannot renew stops writing before its lease can be taken,
//! and settings under which that cannot hold are refused at start.

mod common;

use common::controller::*;
use common::requests::*;
use common::rpc::*;
use common::subdir::{mounting, P_SHARED_LABEL, P_TYPE};
use common::{share, volume_names, wait_for, Driver, TempDir};
use grpcio::RpcStatusCode as Code;
use linode_nfs_csi::build_info::DRIVER_NAME;
use linode_nfs_csi::dev::emulate_exports;
use linode_nfs_csi::dev::exports::Exports;
use linode_nfs_csi::fake::{CloneRate, FakeStorageClass, FilesystemSeed};
use linode_nfs_csi::linode::{Cloud, NewFilesystem};
use linode_nfs_csi::proto::csi;
use linode_nfs_csi::proto::csi_grpc::ControllerClient;
use std::sync::Arc;
use std::time::{Duration, Instant};

const LEASE: &str = "linode-nfs-csi-controller";
const NAMESPACE: &str = "kube-system";
const HOLDER: &str = "test-controller";
/// Fast periods that still fence: 1.5 s + 1 s < 3 s.
const LEASE_DURATION: Duration = Duration::from_secs(3);
const RETRY_PERIOD: Duration = Duration::from_millis(300);
const FAST: [(&str, &str); 5] = [
    ("LINODE_REQUEST_TIMEOUT", "1s"),
    ("LEASE_DURATION", "3s"),
    ("LEASE_RENEW_DEADLINE", "1500ms"),
    ("LEASE_RETRY_PERIOD", "300ms"),
    ("METRICS_ADDRESS", "127.0.0.1:0"),
];

fn holder_and_standby(standby_envs: &[(&str, &str)]) -> (Env, Driver) {
    let mut setup = Setup::new();
    for (k, v) in FAST {
        setup = setup.env(k, v);
    }
    let env = setup.start();
    assert_eq!(
        env.kube.lease_holder(NAMESPACE, LEASE).as_deref(),
        Some(HOLDER),
        "a lone controller holds the lease from its start"
    );
    let standby = env.another("standby", standby_envs);
    (env, standby)
}

/// What `GET /readyz` of `driver`'s metrics endpoint answers.
fn readiness(driver: &Driver) -> (u16, String) {
    let logs = driver.logs();
    let url = logs
        .lines()
        .find_map(|l| l.split("serving metrics on ").nth(1))
        .expect("a metrics endpoint")
        .trim()
        .replace("/metrics", "/readyz");
    let agent: ureq::Agent = ureq::Agent::config_builder()
        .http_status_as_error(false)
        .build()
        .into();
    let mut answer = agent.get(&url).call().unwrap();
    let status = answer.status().as_u16();
    (status, answer.body_mut().read_to_string().unwrap())
}

/// A volume created through `client`, retried as the provisioner does.
fn create(client: &ControllerClient, name: &str) -> grpcio::Result<csi::Volume> {
    retry(&SIDECAR, || {
        client.create_volume(&volume_req(name, &by_id()))
    })
    .map(|r| r.volume.unwrap())
}

#[test]
fn a_standby_answers_writes_unavailable_naming_the_holder_serves_reads_and_runs_no_upkeep() {
    let (mut env, standby) = holder_and_standby(&[("MAINTENANCE_INTERVAL", "200ms")]);
    let made = env.create_ok("pvc-held");
    let client = standby.controller();
    let refused = client
        .create_volume(&volume_req("pvc-standby", &by_id()))
        .unwrap_err();
    assert_eq!(code_of(&refused), Code::UNAVAILABLE);
    assert!(message_of(&refused).contains(HOLDER), "{refused:?}");
    for code in [
        err_code(client.delete_volume(&delete_req(&made.volume_id))),
        err_code(client.create_snapshot(&snapshot_req("snap", &made.volume_id))),
        err_code(client.delete_snapshot(&delete_snapshot_req("7/1/2"))),
    ] {
        assert_eq!(code, Code::UNAVAILABLE);
    }
    // Reads are served by either.
    let listed = client
        .list_volumes(&csi::ListVolumesRequest::new())
        .unwrap();
    assert_eq!(listed.entries.len(), 1);
    client
        .controller_get_volume(&get_volume_req(&made.volume_id))
        .unwrap();
    client
        .get_capacity(&csi::GetCapacityRequest::new())
        .unwrap();
    assert_eq!(readiness(&standby).0, 503);
    assert!(readiness(&standby).1.contains(HOLDER));
    assert_eq!(readiness(&env.driver), (200, "ok".to_string()));
    // An orphaned temporary filesystem in a Space a class names: the
    // holder (no upkeep of its own here) leaves it, and so does the
    // standby, whose upkeep runs only once it holds the lease.
    let class = [
        ("linodenfs.csi.linode.com/space-id", "7"),
        ("linodenfs.csi.linode.com/volume-type", "subdirectory"),
        (
            "linodenfs.csi.linode.com/shared-filesystem-label",
            "nowhere",
        ),
    ];
    env.kube
        .add_storage_class(FakeStorageClass::new("shared", DRIVER_NAME, &class));
    let orphan = NewFilesystem {
        label: "csi-restore-1-2".into(),
        region: REGION.into(),
        max_capacity_bytes: 1 << 30,
        tags: vec!["csi-restore-source".into(), common::CLUSTER_TAG.into()],
    };
    env.someone_else()
        .create_filesystem(SPACE, &orphan)
        .unwrap();
    let orphan_left = |env: &Env| {
        env.live_filesystems()
            .iter()
            .any(|fs| fs.label == "csi-restore-1-2")
    };
    // Nothing to wait for but time: ten of the standby's upkeep periods.
    std::thread::sleep(Duration::from_secs(2));
    assert!(orphan_left(&env), "the standby ran an upkeep round");
    // Once the holder is gone, the new holder's upkeep deletes it.
    env.driver.kill();
    wait_for("the new holder's upkeep", Duration::from_secs(20), || {
        !orphan_left(&env)
    });
    assert_eq!(
        env.kube.lease_holder(NAMESPACE, LEASE).as_deref(),
        Some("standby")
    );
}

/// How long after `since` the standby first answers a repeated create of
/// `name` OK.
fn serves_after(standby: &Driver, name: &str, since: Instant) -> Duration {
    let client = standby.controller();
    let req = volume_req(name, &by_id());
    loop {
        match client.create_volume(&req) {
            Ok(_) => return since.elapsed(),
            Err(e) => {
                assert_eq!(code_of(&e), Code::UNAVAILABLE, "{e:?}");
                assert!(since.elapsed() < Duration::from_secs(30), "never served");
                std::thread::sleep(Duration::from_millis(20));
            }
        }
    }
}

#[test]
fn after_kill_9_the_standby_serves_within_one_lease_period_and_one_retry() {
    let (mut env, standby) = holder_and_standby(&[]);
    env.create_ok("pvc-before");
    let killed = Instant::now();
    env.driver.kill();
    // The provisioner's retry of a create the old holder answered.
    let took = serves_after(&standby, "pvc-before", killed);
    assert!(
        took <= LEASE_DURATION + RETRY_PERIOD + Duration::from_millis(300),
        "the standby served {took:?} after the kill"
    );
    assert_eq!(readiness(&standby), (200, "ok".to_string()));
    assert!(
        standby
            .logs()
            .contains("taken over from a holder that stopped renewing"),
        "{}",
        standby.logs()
    );
    // What the old holder may have left in doubt is looked up first: a new
    // create waits for the window (three request timeouts), then goes.
    let fresh = create(&standby.controller(), "pvc-after").unwrap();
    assert_eq!(env.live_filesystems().len(), 2, "{fresh:?}");
}

#[test]
fn after_sigterm_the_holder_hands_the_lease_over_and_the_standby_serves_within_2s() {
    let (mut env, standby) = holder_and_standby(&[]);
    env.create_ok("pvc-before");
    env.driver.signal(libc::SIGTERM);
    let status = env.driver.wait_exit(Duration::from_secs(30));
    assert!(status.success(), "{}", env.driver.logs());
    let stopped = Instant::now();
    assert!(
        env.driver.logs().contains("released"),
        "{}",
        env.driver.logs()
    );
    let took = serves_after(&standby, "pvc-before", stopped);
    assert!(
        took <= Duration::from_secs(2),
        "served {took:?} after the release"
    );
    // A released lease leaves nothing in doubt: a new create goes at once.
    standby
        .controller()
        .create_volume(&volume_req("pvc-after", &by_id()))
        .unwrap();
}

#[test]
fn a_holder_that_cannot_renew_stops_writing_before_its_lease_can_be_taken() {
    let mut setup = Setup::new();
    for (k, v) in FAST {
        setup = setup.env(k, v);
    }
    let env = setup.start();
    env.create_ok("pvc-before");
    let posts = || {
        env.linode
            .requests()
            .iter()
            .filter(|r| r.method == "POST")
            .count()
    };
    let cut = Instant::now();
    env.kube.cut_off_leases(true);
    // Within the renew deadline (1.5 s) the holder stops; its lease (3 s)
    // has not expired yet for anyone else.
    wait_for("the holder to stop writing", Duration::from_secs(5), || {
        env.create(&volume_req("pvc-cut", &by_id()))
            .is_err_and(|e| code_of(&e) == Code::UNAVAILABLE)
    });
    assert!(
        cut.elapsed() < LEASE_DURATION,
        "stopped after {:?}",
        cut.elapsed()
    );
    let before = posts();
    assert_code(
        env.create(&volume_req("pvc-cut-2", &by_id())),
        Code::UNAVAILABLE,
        "a write past the deadline",
    );
    assert_eq!(posts(), before, "a write was sent without the lease");
    // The partition heals: the lease was never taken, so it holds again.
    env.kube.cut_off_leases(false);
    create(&env.client, "pvc-healed").unwrap();
}

#[test]
fn lease_periods_under_which_fencing_cannot_work_are_refused_at_start() {
    let mut driver = Driver::role("controller")
        .env("LEASE_DURATION", "15s")
        .env("LEASE_RENEW_DEADLINE", "10s")
        .env("LEASE_RETRY_PERIOD", "2s")
        .spawn();
    let status = driver.wait_exit(Duration::from_secs(10));
    assert!(!status.success());
    let logs = driver.logs();
    assert!(
        logs.contains("LEASE_RENEW_DEADLINE") && logs.contains("LINODE_REQUEST_TIMEOUT"),
        "{logs}"
    );
}

#[test]
fn a_restore_under_way_at_kill_9_of_the_holder_is_finished_by_the_new_holder() {
    // The controller role against an emulated NFS server: the fake's
    // snapshots and clones copy their export directories, which the mount
    // helper binds where each controller (in a mount namespace of its own)
    // mounts them.
    let helper_dir = TempDir::new("lease-restore-helper");
    let shares = TempDir::new("lease-restore-shares");
    let helper = share::install_bind_helper(helper_dir.path());
    let parent = "team-share";
    let mut setup = mounting(
        Setup::new().seed(|s| s.with_filesystem(FilesystemSeed::new(SPACE, parent, REGION))),
        &helper,
        shares.path(),
    );
    for (k, v) in FAST.iter().chain(&[("MAINTENANCE_INTERVAL", "1s")]) {
        setup = setup.env(k, v);
    }
    let mut env = setup.start();
    emulate_exports(
        &env.linode,
        Arc::new(Exports::new(helper_dir.path()).unwrap()),
    );
    // A clone takes seconds: the kill comes while it is being made.
    env.linode.set_clone_rate(Some(CloneRate {
        setup: Duration::from_secs(2),
        bytes_per_second: 1 << 20,
        cap: Duration::from_secs(30),
    }));
    let standby = env.another("standby", &[("MAINTENANCE_INTERVAL", "1s")]);
    let class = |name: &str| {
        let mut req = volume_req(name, &by_id());
        req.parameters.insert(P_TYPE.into(), "subdirectory".into());
        req.parameters.insert(P_SHARED_LABEL.into(), parent.into());
        req
    };
    let source = env.create_with(&class("pvc-src"));
    let target = env.filesystem(parent).mount_target_fqdn.unwrap();
    let data = share::export_dir(helper_dir.path(), &target).join("csi-volumes/pvc-src");
    for n in 0..20 {
        std::fs::write(data.join(format!("f{n}")), format!("{n}")).unwrap();
    }
    let snapshot = retry(&SIDECAR, || env.snapshot("snap-src", &source.volume_id)).unwrap();
    wait_for("the snapshot to be ready", Duration::from_secs(30), || {
        env.snapshot("snap-src", &source.volume_id)
            .is_ok_and(|s| s.ready_to_use)
    });
    let restore = {
        let mut req = class("pvc-restored");
        req = from_snapshot(req, &snapshot.snapshot_id);
        req
    };
    let temporaries = |env: &Env| {
        env.live_filesystems()
            .into_iter()
            .filter(|fs| fs.label.starts_with("csi-restore-"))
            .count()
    };
    // The caller gives up; the holder's job goes on until the kill.
    let short = grpcio::CallOption::default().timeout(Duration::from_millis(500));
    assert_code(
        env.client.create_volume_opt(&restore, short),
        Code::DEADLINE_EXCEEDED,
        "a restore slower than its caller",
    );
    wait_for("the temporary clone", Duration::from_secs(30), || {
        temporaries(&env) == 1
    });
    env.driver.kill();
    // The new holder resumes the fill from its marker and adopts the clone.
    let restored = retry(
        &Retry {
            limit: Duration::from_secs(60),
            ..SIDECAR
        },
        || standby.controller().create_volume(&restore),
    )
    .unwrap_or_else(|e| panic!("{e:?}\n{}", standby.logs()))
    .volume
    .unwrap();
    let copied = share::export_dir(helper_dir.path(), &target).join("csi-volumes/pvc-restored");
    assert_eq!(volume_names(&copied), volume_names(&data));
    assert_eq!(std::fs::read_to_string(copied.join("f7")).unwrap(), "7");
    assert!(restored.volume_id.ends_with("/pvc-restored"));
    wait_for(
        "no temporary clone to be left",
        Duration::from_secs(30),
        || temporaries(&env) == 0,
    );
    let logs = standby.logs();
    assert!(
        !logs.contains("into temporary filesystem"),
        "the new holder made a second clone:\n{logs}"
    );
    assert!(logs.contains("taken over"), "{logs}");
    assert!(logs.contains("pvc-restored: filled"), "{logs}");
}
