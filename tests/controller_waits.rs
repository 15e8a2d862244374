//! Waits for Linode, through the real binary: a CreateVolume waiting for its
//! filesystem holds no worker, a caller that cancels or whose deadline
//! passes is answered and its lock freed for the retry, SIGTERM answers every
//! waiting call, and many node-mode publishes leave every ACL exact. All is
//! checked by state (what the fake holds, codes, counts), never the clock.

mod common;

use common::controller::*;
use common::requests::*;
use common::rpc::*;
use common::wait_for;
use grpcio::{CallOption, RpcStatusCode as Code};
use linode_nfs_csi::fake::Lifecycle;
use linode_nfs_csi::proto::csi;
use std::collections::BTreeSet;
use std::time::Duration;

const PATIENCE: Duration = Duration::from_secs(60);

fn patient() -> CallOption {
    CallOption::default().timeout(PATIENCE)
}

fn held(env: &Env, label: &str) {
    env.linode
        .set_filesystem_lifecycle(label, Lifecycle::NeverActive);
}

fn release(env: &Env, label: &str) {
    env.linode
        .set_filesystem_lifecycle(label, Lifecycle::Normal);
}

/// Starts `n` creates named `prefix-0…` whose filesystems never become
/// active, and waits until each has made its filesystem and is waiting.
fn held_creates(
    env: &Env,
    prefix: &str,
    n: usize,
) -> (
    Vec<String>,
    Vec<grpcio::ClientUnaryReceiver<csi::CreateVolumeResponse>>,
) {
    let names: Vec<String> = (0..n).map(|i| format!("{prefix}-{i}")).collect();
    for name in &names {
        held(env, name);
    }
    let calls = names
        .iter()
        .map(|name| {
            env.client
                .create_volume_async_opt(&volume_req(name, &by_id()), patient())
                .unwrap()
        })
        .collect();
    wait_for("the creates to have posted", PATIENCE, || {
        posted(env, &format!("{prefix}-")) == n
    });
    (names, calls)
}

fn posted(env: &Env, prefix: &str) -> usize {
    env.linode
        .filesystems()
        .iter()
        .filter(|f| f.label.starts_with(prefix))
        .count()
}

#[test]
fn two_hundred_creates_wait_at_once_on_two_workers() {
    let env = Setup::new().env("WORKER_THREADS", "2").start();
    env.create_ok("warm-caches");
    // Every create made its filesystem and is now waiting for it: 200 calls
    // in flight at once on two workers.
    let (names, calls) = held_creates(&env, "held", 200);
    assert_eq!(env.linode.calls("POST", FS_LIST), 201);

    let identity = linode_nfs_csi::proto::csi_grpc::IdentityClient::new(env.driver.channel());
    let probe = identity
        .probe_opt(&csi::ProbeRequest::new(), patient())
        .expect("Probe while 200 creates wait");
    assert!(probe.ready.unwrap().value);
    env.client
        .controller_get_capabilities_opt(&csi::ControllerGetCapabilitiesRequest::new(), patient())
        .expect("ControllerGetCapabilities while 200 creates wait");
    // A create that needs a worker is served too.
    env.create_ok("while-200-wait");

    // The waits are watched by lists of the space, not by one GET each.
    let held_ids: BTreeSet<u64> = env
        .linode
        .filesystems()
        .iter()
        .filter(|f| f.label.starts_with("held-"))
        .map(|f| f.id)
        .collect();
    let own_gets = env
        .linode
        .requests()
        .iter()
        .filter(|r| r.method == "GET")
        .filter(|r| {
            r.path
                .rsplit('/')
                .next()
                .and_then(|id| id.parse::<u64>().ok())
                .is_some_and(|id| held_ids.contains(&id))
        })
        .count();
    assert_eq!(own_gets, 0, "no waiting filesystem was polled on its own");

    for name in &names {
        release(&env, name);
    }
    let mut ids = BTreeSet::new();
    for call in calls {
        let resp = futures_executor::block_on(call).expect("a held create finishes");
        ids.insert(resp.volume.unwrap().volume_id);
    }
    assert_eq!(ids.len(), 200);
    assert_eq!(posted(&env, "held-"), 200, "nothing made twice");
}

/// Retries like a sidecar while the lock a left caller held is not free.
fn retry_until_unlocked(
    env: &Env,
    req: &csi::CreateVolumeRequest,
    opt: CallOption,
) -> grpcio::Result<csi::CreateVolumeResponse> {
    retry(&WHILE_LOCKED, || {
        env.client.create_volume_opt(req, opt.clone())
    })
}

#[test]
fn a_caller_who_cancels_frees_the_lock_and_the_retry_adopts() {
    let env = Setup::new().wait_timeout("10m").start();
    held(&env, "cancelled");
    let req = volume_req("cancelled", &by_id());
    let call = env.client.create_volume_async_opt(&req, patient()).unwrap();
    wait_for("the create to post", PATIENCE, || {
        posted(&env, "cancelled") == 1
    });
    drop(call);

    // Its lock is free: the retry waits again instead of being Aborted.
    let short = CallOption::default().timeout(Duration::from_millis(1500));
    assert_eq!(
        err_code(retry_until_unlocked(&env, &req, short)),
        Code::DEADLINE_EXCEEDED
    );
    wait_for("the cancel to be logged", PATIENCE, || {
        env.driver.logs().contains("CreateVolume 1-CANCELLED in")
    });

    release(&env, "cancelled");
    let adopted = retry_until_unlocked(&env, &req, patient())
        .expect("the retry adopts")
        .volume
        .unwrap();
    assert_eq!(
        adopted.volume_id,
        format!("{SPACE}/{}", env.filesystem("cancelled").id)
    );
    assert_eq!(
        env.linode.calls("POST", FS_LIST),
        1,
        "one filesystem, adopted"
    );
}

#[test]
fn a_caller_whose_deadline_passes_frees_the_lock() {
    let env = Setup::new().wait_timeout("10m").start();
    held(&env, "late");
    let req = volume_req("late", &by_id());
    let short = CallOption::default().timeout(Duration::from_millis(1500));
    assert_eq!(
        err_code(env.client.create_volume_opt(&req, short.clone())),
        Code::DEADLINE_EXCEEDED
    );
    assert_eq!(
        err_code(retry_until_unlocked(&env, &req, short)),
        Code::DEADLINE_EXCEEDED
    );
    wait_for("the deadline to be logged", PATIENCE, || {
        env.driver
            .logs()
            .contains("the caller's deadline passed while the operation was waiting")
    });
    release(&env, "late");
    retry_until_unlocked(&env, &req, patient()).expect("the retry succeeds");
    assert_eq!(env.linode.calls("POST", FS_LIST), 1);
}

#[test]
fn sigterm_answers_every_waiting_create_and_a_restart_adopts() {
    let mut env = Setup::new().env("SHUTDOWN_GRACE", "2s").start();
    let (names, calls) = held_creates(&env, "draining", 5);

    env.driver.signal(libc::SIGTERM);
    for call in calls {
        let err = futures_executor::block_on(call).unwrap_err();
        assert_eq!(code_of(&err), Code::UNAVAILABLE, "{err:?}");
    }
    assert!(env.driver.wait_exit(PATIENCE).success());
    assert!(env.driver.logs().contains("answered 5 waiting RPCs"));

    env.restart();
    for name in &names {
        release(&env, name);
        env.client
            .create_volume_opt(&volume_req(name, &by_id()), patient())
            .unwrap_or_else(|e| panic!("retry of {name} after the restart: {e:?}"));
    }
    assert_eq!(env.linode.calls("POST", FS_LIST), 5, "every retry adopted");
}

const NODES: std::ops::RangeInclusive<u64> = 2001..=2020;

/// Waits for every call, each of which must succeed.
fn all_answered<T: Unpin>(calls: Vec<grpcio::ClientUnaryReceiver<T>>, what: &str) {
    for call in calls {
        futures_executor::block_on(call).unwrap_or_else(|e| panic!("{what}: {e:?}"));
    }
}

#[test]
fn twenty_nodes_publishing_three_volumes_at_once_leave_every_acl_exact() {
    let env = Setup::new()
        .node_mode()
        .env("WORKER_THREADS", "2")
        .seed(|s| with_nodes(s, NODES))
        .start();
    let volumes: Vec<String> = (0..3)
        .map(|i| env.create_ok(&format!("shared-{i}")).volume_id)
        .collect();
    // Every publish at once, then every unpublish of every other node.
    let pairs = |nodes: Vec<u64>| -> Vec<(String, String)> {
        volumes
            .iter()
            .flat_map(|v| nodes.iter().map(move |n| (v.clone(), n.to_string())))
            .collect()
    };
    let publishes = pairs(NODES.collect()).into_iter().map(|(v, n)| {
        env.client
            .controller_publish_volume_async_opt(&controller_publish_req(&v, &n), patient())
            .unwrap()
    });
    all_answered(publishes.collect(), "publish");
    let all: BTreeSet<u64> = NODES.collect();
    for v in &volumes {
        let policy = env.linode.filesystem_policy(ids_of(v).1).unwrap();
        assert!(policy.enabled);
        assert_eq!(
            policy.linode_ids().into_iter().collect::<BTreeSet<_>>(),
            all,
            "{v}"
        );
    }
    let unpublishes = pairs(NODES.step_by(2).collect()).into_iter().map(|(v, n)| {
        env.client
            .controller_unpublish_volume_async_opt(&controller_unpublish_req(&v, &n), patient())
            .unwrap()
    });
    all_answered(unpublishes.collect(), "unpublish");
    let kept: BTreeSet<u64> = NODES.skip(1).step_by(2).collect();
    for v in &volumes {
        let ids: BTreeSet<u64> = env
            .linode
            .filesystem_policy(ids_of(v).1)
            .unwrap()
            .linode_ids()
            .into_iter()
            .collect();
        assert_eq!(ids, kept, "{v}");
    }
}

#[test]
fn server_errors_on_polls_do_not_fail_a_waiting_create() {
    let env = Setup::new()
        .seed(|s| linode_nfs_csi::fake::Seed {
            activation_delay_ms: 400,
            ..s
        })
        .start();
    // Only the waits' polls read one filesystem: the create's own requests
    // are a list (by label) and the POST.
    env.linode
        .inject(linode_nfs_csi::fake::FaultRule::status("GET", FS_ONE, 500).times(3));
    let v = env
        .client
        .create_volume_opt(&volume_req("polled-through-500s", &by_id()), patient())
        .unwrap_or_else(|e| panic!("{e:?}\n{}", env.driver.logs()));
    assert!(!v.volume.unwrap().volume_id.is_empty());
    assert_eq!(
        common::linode::answered(&env.linode, 500),
        3,
        "the polls failed and the wait went on"
    );
    assert_eq!(env.linode.calls("POST", FS_LIST), 1);
}
