//! The controller under concurrent slow work: the worker pool keeps slow
//! CreateVolume calls from serialising behind each other and from delaying
//! Probe, and the wall-time figure of many concurrent creates.

mod common;

use common::controller::*;
use linode_nfs_csi::fake::FaultRule;
use linode_nfs_csi::proto::{csi, csi_grpc};
use std::time::{Duration, Instant};

fn timed_create(client: &csi_grpc::ControllerClient, name: &str) -> Duration {
    let started = Instant::now();
    client
        .create_volume(&volume_req(name, &by_id()))
        .unwrap_or_else(|e| panic!("CreateVolume {name}: {e:?}"));
    started.elapsed()
}

/// Starts `n` creates at once on clones of `client` (one channel) and
/// returns the wall time until the last one answered.
fn concurrent_creates(client: &csi_grpc::ControllerClient, prefix: &str, n: usize) -> Duration {
    let started = Instant::now();
    let calls: Vec<_> = (0..n)
        .map(|i| {
            let client = client.clone();
            let name = format!("{prefix}-{i}");
            std::thread::spawn(move || timed_create(&client, &name))
        })
        .collect();
    for call in calls {
        call.join().unwrap();
    }
    started.elapsed()
}

#[test]
fn slow_backend_calls_run_in_parallel_and_probe_stays_fast() {
    let env = Setup::new().start();
    let channel = env.driver.channel();
    let controller = csi_grpc::ControllerClient::new(channel.clone());
    let identity = csi_grpc::IdentityClient::new(channel);
    env.create_ok("warm-region");
    env.linode.inject(FaultRule::latency(
        "GET",
        "nfs/spaces/*",
        Duration::from_secs(1),
    ));

    let single = timed_create(&controller, "single");
    assert!(single >= Duration::from_secs(1), "{single:?}");

    let space_gets_in_flight = || {
        env.linode
            .requests()
            .iter()
            .filter(|r| r.path == format!("nfs/spaces/{SPACE}") && r.status.is_none())
            .count()
    };
    let client = controller.clone();
    let burst = std::thread::spawn(move || concurrent_creates(&client, "burst", 8));
    // At least one, not all eight: the fake's HTTP server (tiny_http's task
    // pool) may hold a new connection until another one closes.
    common::wait_for(
        "slow space lookups in flight",
        Duration::from_secs(10),
        || space_gets_in_flight() >= 1,
    );
    let started = Instant::now();
    let probe = identity.probe(&csi::ProbeRequest::new()).unwrap();
    let probe_time = started.elapsed();
    assert!(probe.ready.unwrap().value);
    assert!(
        probe_time < Duration::from_millis(200),
        "Probe took {probe_time:?} under load"
    );
    let caps = Instant::now();
    controller
        .controller_get_capabilities(&csi::ControllerGetCapabilitiesRequest::new())
        .unwrap();
    assert!(
        caps.elapsed() < Duration::from_millis(200),
        "capabilities took {:?} under load",
        caps.elapsed()
    );

    let all = burst.join().unwrap();
    println!("one slow CreateVolume {single:?}; 8 concurrent on one channel {all:?}; Probe meanwhile {probe_time:?}");
    assert!(
        all < single * 3,
        "8 concurrent creates took {all:?}, one took {single:?}"
    );
    assert_eq!(env.live_filesystems().len(), 10);
}

/// Figure for the report: 50 concurrent CreateVolume calls against a backend
/// that takes 2 s to turn a filesystem active, against one such call, with
/// the default worker pool and with one large enough for all 50.
#[test]
fn figure_fifty_concurrent_creates_against_a_slow_backend() {
    for workers in [None, Some("64")] {
        let mut setup = Setup::new();
        if let Some(w) = workers {
            setup = setup.env("WORKER_THREADS", w);
        }
        let env = setup.start();
        env.create_ok("warm-region");
        env.linode.set_activation_delay(Duration::from_secs(2));

        let single = timed_create(&env.client, "single");
        let fifty = concurrent_creates(&env.client, "many", 50);
        let ratio = fifty.as_secs_f64() / single.as_secs_f64();
        println!(
            "FIGURE WORKER_THREADS={}: one CreateVolume {single:.2?}; 50 concurrent {fifty:.2?} ({ratio:.1}x)",
            workers.unwrap_or("16 (default)")
        );
        assert_eq!(env.live_filesystems().len(), 52);
        // 50 calls on 16 workers are at most four rounds of one call each.
        assert!(ratio < 6.0, "{ratio:.1}x");
    }
}
