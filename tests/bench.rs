//! Benchmarks (`just bench` / `bash .ci/bench`): figures are printed, not
//! asserted against wall-clock limits, so a busy machine never fails a test
//! run. Every function is `#[ignore]`d and runs only when asked for, in
//! release mode.

mod common;
mod node_support;

use common::{wait_for, Driver};
use linode_nfs_csi::fake::{FakeKube, FakeLinode, FakeNode, Seed, SpaceSeed};
use linode_nfs_csi::proto::csi;
use linode_nfs_csi::proto::csi::volume_capability::access_mode::Mode;
use node_support::{capability, pairs, NfsNode};
use std::collections::HashMap;
use std::time::{Duration, Instant};

fn percentile(sorted: &[Duration], p: f64) -> Duration {
    let i = ((sorted.len() as f64 - 1.0) * p).round() as usize;
    sorted[i]
}

fn ms(d: Duration) -> f64 {
    d.as_secs_f64() * 1000.0
}

fn rss_kib(pid: u32) -> u64 {
    std::fs::read_to_string(format!("/proc/{pid}/status"))
        .unwrap()
        .lines()
        .find_map(|l| l.strip_prefix("VmRSS:"))
        .and_then(|v| v.trim().trim_end_matches("kB").trim().parse().ok())
        .unwrap()
}

#[test]
#[ignore = "benchmark: bash .ci/bench"]
fn bench_binary_startup_and_idle_memory() {
    let size = std::fs::metadata(common::binary()).unwrap().len();
    println!(
        "BENCH binary {} size {:.2} MiB",
        common::binary(),
        size as f64 / (1 << 20) as f64
    );

    let mut ready = Vec::new();
    let mut rss = Vec::new();
    for _ in 0..20 {
        let started = Instant::now();
        let mut d = Driver::role("node").env("RUST_LOG", "info").spawn();
        d.wait_ready();
        ready.push(started.elapsed());
        // Idle: after the startup allocations settle.
        std::thread::sleep(Duration::from_millis(300));
        rss.push(rss_kib(d.pid()));
    }
    ready.sort();
    rss.sort();
    println!(
        "BENCH node role exec→Probe ready: median {:.1} ms, max {:.1} ms (20 starts)",
        ms(percentile(&ready, 0.5)),
        ms(*ready.last().unwrap())
    );
    println!(
        "BENCH node role idle RSS: median {} KiB, max {} KiB",
        rss[rss.len() / 2],
        rss.last().unwrap()
    );
}

/// A controller binary against fresh fakes; returns (linode, kube, driver).
fn controller(activation: Duration, workers: usize) -> (FakeLinode, FakeKube, Driver) {
    let seed = Seed {
        regions: vec!["us-ord".into()],
        activation_delay_ms: activation.as_millis() as u64,
        ..Seed::default()
    }
    .with_space(SpaceSeed::new(7, "bench"));
    let linode = FakeLinode::start(seed).unwrap();
    let kube = FakeKube::start("kube-token").unwrap();
    kube.add_node(FakeNode::new("n1").label("topology.kubernetes.io/region", "us-ord"));
    let b = Driver::builder();
    let kubeconfig = common::write_kubeconfig(b.dir(), &kube.url(), "kube-token");
    let driver = b
        .env("DRIVER_ROLE", "controller")
        .env("RUST_LOG", "warn")
        .env("LINODE_URL", linode.url())
        .env("LINODE_TOKEN", linode.token())
        .env("KUBECONFIG", kubeconfig.display().to_string())
        .env("WORKER_THREADS", workers.to_string())
        .start();
    (linode, kube, driver)
}

fn create_request(name: &str) -> csi::CreateVolumeRequest {
    let mut req = csi::CreateVolumeRequest::new();
    req.name = name.into();
    req.parameters = HashMap::from([(
        "linodenfs.csi.linode.com/space-id".to_string(),
        "7".to_string(),
    )]);
    req.volume_capabilities = vec![capability(Mode::MULTI_NODE_MULTI_WRITER, &[])];
    req
}

#[test]
#[ignore = "benchmark: bash .ci/bench"]
fn bench_create_volume_requests_and_concurrency() {
    let (linode, _kube, driver) = controller(Duration::ZERO, 16);
    let client = driver.controller();
    client.create_volume(&create_request("pvc-warmup")).unwrap();
    linode.clear_requests();
    client
        .create_volume(&create_request("pvc-counted"))
        .unwrap();
    let requests = linode.requests();
    println!(
        "BENCH Linode requests per fresh CreateVolume (space by id, warm region cache): {}",
        requests.len()
    );
    for r in &requests {
        println!("BENCH   {} {}", r.method, r.path);
    }

    for workers in [16, 64] {
        let (_linode, _kube, driver) = controller(Duration::from_secs(2), workers);
        let client = driver.controller();
        let one = Instant::now();
        client.create_volume(&create_request("pvc-single")).unwrap();
        let one = one.elapsed();
        let started = Instant::now();
        let calls: Vec<_> = (0..50)
            .map(|i| {
                client
                    .create_volume_async(&create_request(&format!("pvc-many-{i}")))
                    .unwrap()
            })
            .collect();
        for call in calls {
            futures_executor::block_on(call).unwrap();
        }
        println!(
            "BENCH 50 concurrent CreateVolume, backend active after 2 s, WORKER_THREADS={workers}: {:.2} s (one call: {:.2} s)",
            started.elapsed().as_secs_f64(),
            one.as_secs_f64()
        );
    }
}

#[test]
#[ignore = "benchmark: bash .ci/bench"]
fn bench_publish_unpublish_cycle() {
    let node = NfsNode::start();
    let source = "bench.nfs.example:/export";
    node.export(source);
    let staging = node.kubelet_path("staging");
    node.stage("1/2", &staging, &[("mount-target", source)])
        .unwrap();
    let client = node.driver.node();
    let target = node.kubelet_path("pods/p/volumes/v/mount");
    let mut publish = csi::NodePublishVolumeRequest::new();
    publish.volume_id = "1/2".into();
    publish.staging_target_path = staging.display().to_string();
    publish.target_path = target.display().to_string();
    publish.volume_capability = Some(capability(Mode::MULTI_NODE_MULTI_WRITER, &[])).into();
    publish.volume_context = pairs(&[("mount-target", source)]);
    let mut unpublish = csi::NodeUnpublishVolumeRequest::new();
    unpublish.volume_id = "1/2".into();
    unpublish.target_path = target.display().to_string();

    let mut cycles = Vec::with_capacity(1000);
    for _ in 0..1000 {
        let started = Instant::now();
        client.node_publish_volume(&publish).unwrap();
        client.node_unpublish_volume(&unpublish).unwrap();
        cycles.push(started.elapsed());
    }
    wait_for("target removed", Duration::from_secs(5), || {
        !node.inside(&target).exists()
    });
    cycles.sort();
    println!(
        "BENCH NodePublishVolume+NodeUnpublishVolume (bind mount) over gRPC, 1000 cycles: median {:.3} ms, p99 {:.3} ms, max {:.3} ms",
        ms(percentile(&cycles, 0.5)),
        ms(percentile(&cycles, 0.99)),
        ms(*cycles.last().unwrap())
    );
}
