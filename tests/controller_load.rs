//! The controller under concurrent slow work, checked by what is in flight
//! rather than by the clock: slow CreateVolume calls run side by side on the
//! worker pool, cheap RPCs are answered while every worker is held, and a
//! full queue refuses with Unavailable instead of growing. The wall-time
//! figures live in the benchmark (`bash .ci/bench`).

mod common;

use common::controller::*;
use grpcio::{CallOption, RpcStatusCode};
use linode_nfs_csi::proto::{csi, csi_grpc};
use std::thread::JoinHandle;
use std::time::Duration;

/// Long enough that only a wedged driver misses it.
const PATIENCE: Duration = Duration::from_secs(30);

fn deadline() -> CallOption {
    CallOption::default().timeout(PATIENCE)
}

/// The Space by its label: a request made on a worker (the warm-up
/// resolved it by id only), shared by the creates that need it at once.
/// The label lookup that follows parks on the poller and holds no worker.
fn by_label() -> Vec<(&'static str, String)> {
    vec![(P_SPACE_LABEL, SPACE_LABEL.to_string())]
}

/// Starts `n` creates at once on clones of `client` (one channel), the
/// Space named by `space`.
fn start_creates(
    client: &csi_grpc::ControllerClient,
    prefix: &str,
    n: usize,
    space: &[(&'static str, String)],
) -> Vec<JoinHandle<grpcio::Result<csi::CreateVolumeResponse>>> {
    (0..n)
        .map(|i| {
            let client = client.clone();
            let req = volume_req(&format!("{prefix}-{i}"), space);
            std::thread::spawn(move || client.create_volume_opt(&req, deadline()))
        })
        .collect()
}

#[test]
fn slow_creates_run_side_by_side_and_cheap_rpcs_answer_while_every_worker_is_held() {
    let env = Setup::new().env("WORKER_THREADS", "8").start();
    let channel = env.driver.channel();
    let controller = csi_grpc::ControllerClient::new(channel.clone());
    let identity = csi_grpc::IdentityClient::new(channel);
    env.create_ok("warm-caches");
    // With the region and the Space cached, the POST of its filesystem is
    // the first request a create makes on a worker.
    let gate = env.linode.hang("POST", "nfs/spaces/*/filesystems");

    let creates = start_creates(&controller, "burst", 8, &by_id());
    // Eight held POSTs at once means eight workers are busy at once: the
    // calls did not queue behind each other.
    assert!(
        gate.wait_for_hits(8, PATIENCE),
        "only {} of 8 creates reached the backend together",
        gate.hits()
    );

    let probe = identity
        .probe_opt(&csi::ProbeRequest::new(), deadline())
        .expect("Probe while every worker is held");
    assert!(probe.ready.unwrap().value);
    controller
        .controller_get_capabilities_opt(&csi::ControllerGetCapabilitiesRequest::new(), deadline())
        .expect("ControllerGetCapabilities while every worker is held");

    gate.release();
    for create in creates {
        create.join().unwrap().expect("CreateVolume after release");
    }
    assert_eq!(env.live_filesystems().len(), 9);
}

#[test]
fn a_full_queue_refuses_with_unavailable_and_loses_nothing() {
    // One worker: one call runs, 256 (the smallest queue) wait in its
    // queue, the rest are refused.
    let env = Setup::new().env("WORKER_THREADS", "1").start();
    env.create_ok("warm-caches");
    let gate = env.linode.hang("GET", "nfs/spaces");

    let (done, results) = std::sync::mpsc::channel();
    let calls: Vec<_> = (0..262)
        .map(|i| {
            let (client, done) = (env.client.clone(), done.clone());
            let req = volume_req(&format!("call-{i}"), &by_label());
            std::thread::spawn(move || {
                let _ = done.send((i, client.create_volume_opt(&req, deadline())));
            })
        })
        .collect();

    // While the only worker is held, the only calls that can finish are
    // the refused ones: exactly the five beyond 1 running + 256 queued.
    let mut refused = Vec::new();
    for _ in 0..5 {
        let (i, result) = results.recv_timeout(PATIENCE).expect("a refusal");
        match result {
            Err(grpcio::Error::RpcFailure(s)) if s.code() == RpcStatusCode::UNAVAILABLE => {
                assert!(s.message().contains("busy"), "{}", s.message());
                refused.push(format!("call-{i}"));
            }
            other => panic!("call-{i} finished while the worker was held: {other:?}"),
        }
    }
    // The running call may reach the backend after the refusals went out.
    assert!(
        gate.wait_for_hits(1, PATIENCE),
        "the running call reached the backend"
    );
    assert_eq!(gate.hits(), 1, "queued calls must not reach the backend");

    gate.release();
    for call in calls {
        call.join().unwrap();
    }
    drop(done);
    let finished: Vec<_> = results.iter().collect();
    assert_eq!(finished.len(), 257);
    for (i, result) in &finished {
        result
            .as_ref()
            .unwrap_or_else(|e| panic!("queued call-{i} failed after release: {e:?}"));
    }
    // Every accepted call created its filesystem; no refused one did.
    let labels: Vec<String> = env
        .live_filesystems()
        .into_iter()
        .map(|f| f.label)
        .collect();
    assert_eq!(labels.len(), 258, "{labels:?}");
    assert!(refused.iter().all(|r| !labels.contains(r)), "{refused:?}");
}
