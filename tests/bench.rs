//! Benchmarks (`just bench` / `bash .ci/bench`): figures are printed, not
//! asserted against wall-clock limits, so a busy machine never fails a test
//! run. Every function is `#[ignore]`d and runs only when asked for, in
//! release mode.

mod common;
mod e2e_support;
mod node_support;

use common::controller::published_by_volume;
use common::requests::{controller_publish_req, node_publish_req, node_unpublish_req, pairs, rwx};
use common::rpc::{retry, Retry};
use common::{wait_for, Driver};
use grpcio::RpcStatusCode as Code;
use linode_nfs_csi::backoff::Backoff;
use linode_nfs_csi::fake::{FakeKube, FakeLinode, FakeNode, InstanceSeed, Seed, SpaceSeed};
use linode_nfs_csi::proto::csi;
use linode_nfs_csi::proto::csi_grpc::ControllerClient;
use node_support::{NfsNode, VOLUME};
use std::collections::{BTreeMap, HashMap};
use std::sync::atomic::{AtomicBool, Ordering};
use std::sync::Arc;
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

/// What `f` returns, and the peak RSS (KiB) of process `pid` while it ran,
/// sampled every 50 ms.
fn peak_rss_during<T>(pid: u32, f: impl FnOnce() -> T) -> (T, u64) {
    let done = Arc::new(AtomicBool::new(false));
    let sampler = {
        let done = done.clone();
        std::thread::spawn(move || {
            let mut peak = 0;
            while !done.load(Ordering::Relaxed) {
                peak = peak.max(rss_kib(pid));
                std::thread::sleep(Duration::from_millis(50));
            }
            peak
        })
    };
    let out = f();
    let after = rss_kib(pid);
    done.store(true, Ordering::Relaxed);
    (out, sampler.join().unwrap().max(after))
}

/// Median idle RSS of a role over 5 starts with `envs`, after `scrapes`
/// scrapes of its metrics when `envs` turn them on.
fn idle_rss(role: &str, envs: &[(&str, &str)], scrapes: usize) -> u64 {
    let mut rss = Vec::new();
    for _ in 0..5 {
        let mut b = Driver::role(role).env("RUST_LOG", "info");
        for (k, v) in envs {
            b = b.env(k, *v);
        }
        let mut d = b.spawn();
        d.wait_ready();
        if envs.iter().any(|(k, _)| *k == "METRICS_ADDRESS") {
            let addr = announced_metrics(&d);
            for _ in 0..scrapes {
                scrape_metrics(addr);
            }
        }
        // Idle: after the startup allocations settle, which nothing
        // announces.
        std::thread::sleep(Duration::from_millis(300));
        rss.push(rss_kib(d.pid()));
    }
    rss.sort();
    rss[rss.len() / 2]
}

#[test]
#[ignore = "benchmark: bash .ci/bench"]
fn bench_idle_memory_by_role_and_pool_size() {
    for role in ["controller", "node"] {
        for workers in ["4", "8", "16"] {
            println!(
                "BENCH {role} role idle RSS with WORKER_THREADS={workers}: median {} KiB",
                idle_rss(role, &[("WORKER_THREADS", workers)], 0)
            );
        }
    }
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

/// The benches' backend: Space 7 (`bench`) in us-ord holding `volumes` of
/// the driver's volumes (seeded, not created), new objects active after
/// `activation`, Linodes 1001..=1010 to publish to, and a Kubernetes API
/// with one node in us-ord.
fn bench_world(activation: Duration, volumes: usize) -> (FakeLinode, FakeKube) {
    let seed = Seed {
        regions: vec!["us-ord".into()],
        activation_delay_ms: activation.as_millis() as u64,
        ..Seed::default()
    }
    .with_space(SpaceSeed::new(7, "bench"));
    let seed = (0..volumes).fold(seed, |s, i| {
        s.with_filesystem(
            linode_nfs_csi::fake::FilesystemSeed::new(7, &format!("pvc-{i:05}"), "us-ord")
                .tag("csi.linodenfs.csi.linode.com"),
        )
    });
    let seed = (1001..=1010).fold(seed, |s, id| {
        s.with_instance(InstanceSeed {
            id,
            label: format!("node-{id}"),
            region: "us-ord".into(),
            interface_generation: None,
            ipv6: None,
            vpcs: vec![],
        })
    });
    let kube = FakeKube::start("kube-token").unwrap();
    kube.add_node(FakeNode::new("n1").label("topology.kubernetes.io/region", "us-ord"));
    (FakeLinode::start(seed).unwrap(), kube)
}

/// A controller binary against fresh fakes; returns (linode, kube, driver).
fn controller(activation: Duration, envs: &[(&str, &str)]) -> (FakeLinode, FakeKube, Driver) {
    controller_with_volumes(activation, 0, envs)
}

/// The same with `volumes` of the driver's volumes already there.
fn controller_with_volumes(
    activation: Duration,
    volumes: usize,
    envs: &[(&str, &str)],
) -> (FakeLinode, FakeKube, Driver) {
    let (linode, kube) = bench_world(activation, volumes);
    let mut b = Driver::builder();
    let kubeconfig = common::write_kubeconfig(b.dir(), &kube.url(), "kube-token");
    b = b
        .env("DRIVER_ROLE", "controller")
        .env("RUST_LOG", "warn")
        .env("LINODE_URL", linode.url())
        .env("LINODE_TOKEN", linode.token())
        .env("KUBECONFIG", kubeconfig.display().to_string());
    for (k, v) in envs {
        b = b.env(k, *v);
    }
    (linode, kube, b.start())
}

fn create_request(name: &str) -> csi::CreateVolumeRequest {
    let mut req = csi::CreateVolumeRequest::new();
    req.name = name.into();
    req.parameters = HashMap::from([(
        "linodenfs.csi.linode.com/space-id".to_string(),
        "7".to_string(),
    )]);
    req.volume_capabilities = vec![rwx()];
    req
}

fn total(linode: &FakeLinode) -> u64 {
    linode.request_counts().values().sum()
}

fn print_request_counts(linode: &FakeLinode) {
    for (call, n) in linode.request_counts() {
        println!("BENCH   {call}: {n}");
    }
}

/// Warms the caches, then times one fresh create; the fake counts afresh
/// from there.
fn one_warm_create(client: &ControllerClient, linode: &FakeLinode) -> Duration {
    client.create_volume(&create_request("pvc-warm")).unwrap();
    let started = Instant::now();
    client.create_volume(&create_request("pvc-single")).unwrap();
    let one = started.elapsed();
    linode.clear_requests();
    one
}

/// `n` creates named `prefix-<i>`, all sent before any is answered.
fn creates_at_once(
    client: &ControllerClient,
    prefix: &str,
    n: usize,
) -> Vec<grpcio::ClientUnaryReceiver<csi::CreateVolumeResponse>> {
    creates_of(client, n, |i| create_request(&format!("{prefix}-{i}")))
}

/// The creates `req(0..n)`, all sent before any is answered.
fn creates_of(
    client: &ControllerClient,
    n: usize,
    req: impl Fn(usize) -> csi::CreateVolumeRequest,
) -> Vec<grpcio::ClientUnaryReceiver<csi::CreateVolumeResponse>> {
    (0..n)
        .map(|i| client.create_volume_async(&req(i)).unwrap())
        .collect()
}

/// Waits for every call, each of which must succeed.
fn all_answered<T: Unpin>(calls: Vec<grpcio::ClientUnaryReceiver<T>>) {
    for call in calls {
        futures_executor::block_on(call).unwrap();
    }
}

/// A load run on a thread of its own, one `step` after another on its
/// `state`, until [`Meanwhile::stop`] hands the state back.
struct Meanwhile<S> {
    stop: Arc<AtomicBool>,
    thread: std::thread::JoinHandle<S>,
}

impl<S: Send + 'static> Meanwhile<S> {
    fn run(mut state: S, mut step: impl FnMut(&mut S) + Send + 'static) -> Meanwhile<S> {
        let stop = Arc::new(AtomicBool::new(false));
        let stopped = stop.clone();
        let thread = std::thread::spawn(move || {
            while !stopped.load(Ordering::SeqCst) {
                step(&mut state);
            }
            state
        });
        Meanwhile { stop, thread }
    }

    fn stop(self) -> S {
        self.stop.store(true, Ordering::SeqCst);
        self.thread.join().unwrap()
    }
}

#[test]
#[ignore = "benchmark: bash .ci/bench"]
fn bench_create_volume_requests_and_concurrency() {
    let (linode, _kube, driver) = controller(Duration::ZERO, &[]);
    let client = driver.controller();
    client.create_volume(&create_request("pvc-cold")).unwrap();
    println!(
        "BENCH Linode requests of the first CreateVolume (space by id, cold caches): {}",
        total(&linode)
    );
    linode.clear_requests();
    client
        .create_volume(&create_request("pvc-counted"))
        .unwrap();
    println!(
        "BENCH Linode requests per fresh CreateVolume (warm caches): {}",
        total(&linode)
    );
    print_request_counts(&linode);

    for workers in ["4", "16"] {
        let (linode, _kube, driver) =
            controller(Duration::from_secs(2), &[("WORKER_THREADS", workers)]);
        let client = driver.controller();
        let one = one_warm_create(&client, &linode);

        // Probe on the same channel as the creates, every 5 ms meanwhile.
        let identity = linode_nfs_csi::proto::csi_grpc::IdentityClient::new(driver.channel());
        let prober = Meanwhile::run(Vec::new(), move |probes| {
            let t = Instant::now();
            identity.probe(&csi::ProbeRequest::new()).unwrap();
            probes.push(t.elapsed());
            std::thread::sleep(Duration::from_millis(5));
        });
        let started = Instant::now();
        all_answered(creates_at_once(&client, "pvc-many", 50));
        let many = started.elapsed();
        let mut probes = prober.stop();
        probes.sort();
        println!(
            "BENCH 50 concurrent fresh CreateVolume, activation 2 s, WORKER_THREADS={workers}: {:.2} s = {:.2}x one create ({:.2} s); {} Linode requests for the 50; Probe p50 {:.2} ms p99 {:.2} ms max {:.2} ms over {} probes",
            many.as_secs_f64(),
            many.as_secs_f64() / one.as_secs_f64(),
            one.as_secs_f64(),
            total(&linode),
            ms(percentile(&probes, 0.5)),
            ms(percentile(&probes, 0.99)),
            ms(*probes.last().unwrap()),
            probes.len()
        );
        print_request_counts(&linode);
    }

    // 200 creates waiting at once on two workers.
    let (linode, _kube, driver) = controller(Duration::from_secs(3), &[("WORKER_THREADS", "2")]);
    let client = driver.controller();
    client.create_volume(&create_request("pvc-warm")).unwrap();
    linode.clear_requests();
    let started = Instant::now();
    let calls = creates_at_once(&client, "pvc-wave", 200);
    wait_for("200 filesystems posted", Duration::from_secs(60), || {
        linode.filesystems().len() == 201
    });
    let all_posted = started.elapsed();
    all_answered(calls);
    println!(
        "BENCH 200 concurrent fresh CreateVolume, activation 3 s, WORKER_THREADS=2: all posted (waiting together) after {:.2} s, all done after {:.2} s; {} Linode requests",
        all_posted.as_secs_f64(),
        started.elapsed().as_secs_f64(),
        total(&linode)
    );

    // Node mode: one volume published to 10 nodes at once.
    let (linode, _kube, driver) = controller(
        Duration::from_millis(300),
        &[("NFS_ACCESS_POLICY_MODE", "node"), ("WORKER_THREADS", "4")],
    );
    let client = driver.controller();
    let volume = client
        .create_volume(&create_request("pvc-rwx"))
        .unwrap()
        .volume
        .unwrap()
        .volume_id;
    linode.clear_requests();
    let calls: Vec<_> = (1001..=1010)
        .map(|node: u64| {
            let req = controller_publish_req(&volume, &node.to_string());
            client.controller_publish_volume_async(&req).unwrap()
        })
        .collect();
    all_answered(calls);
    println!(
        "BENCH node mode, 10 concurrent ControllerPublish of one volume: {} policy PUTs, {} Linode requests",
        linode.calls("PUT", "nfs/spaces/*/filesystems/*/access-policy"),
        total(&linode)
    );
}

#[test]
#[ignore = "benchmark: bash .ci/bench"]
fn bench_publish_unpublish_cycle() {
    let node = NfsNode::start();
    let source = "bench.nfs.example:/export";
    node.export(source);
    let staging = node.kubelet_path("staging");
    node.stage(VOLUME, &staging, &[("mount-target", source)])
        .unwrap();
    let client = node.driver.node();
    let target = node.kubelet_path("pods/p/volumes/v/mount");
    let mut publish = node_publish_req(VOLUME, &staging, &target, rwx());
    publish.volume_context = pairs(&[("mount-target", source)]);
    let unpublish = node_unpublish_req(VOLUME, &target);

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

/// `GET /metrics` over a fresh connection; the body's length.
fn scrape_metrics(addr: std::net::SocketAddr) -> usize {
    let out = metrics_text(addr);
    assert!(out.starts_with("HTTP/1.1 200 "));
    out.len()
}

/// Where the driver announced its metrics endpoint.
fn announced_metrics(d: &Driver) -> std::net::SocketAddr {
    let mut addr = None;
    wait_for("the metrics endpoint", Duration::from_secs(30), || {
        addr = d.logs().lines().find_map(|l| {
            l.split("serving metrics on http://")
                .nth(1)?
                .strip_suffix("/metrics")?
                .parse()
                .ok()
        });
        addr.is_some()
    });
    addr.unwrap()
}

/// Sequential Probes for `run`, each timed.
fn probe_latencies(d: &Driver, run: Duration) -> Vec<Duration> {
    let identity = d.identity();
    let mut lat = Vec::new();
    let end = Instant::now() + run;
    while Instant::now() < end {
        let t = Instant::now();
        identity.probe(&csi::ProbeRequest::new()).unwrap();
        lat.push(t.elapsed());
    }
    lat.sort();
    lat
}

#[test]
#[ignore = "benchmark: bash .ci/bench"]
fn bench_probe_latency_while_metrics_are_scraped() {
    // The controller role: the richest exposition (Linode families).
    // At info, so the endpoint's address is logged; Probe logs at debug.
    let envs = [("METRICS_ADDRESS", "127.0.0.1:0"), ("RUST_LOG", "info")];
    let (_linode, _kube, d) = controller(Duration::ZERO, &envs);
    let addr = announced_metrics(&d);
    let create = d.controller();
    create
        .create_volume(&create_request("pvc-bench-metrics"))
        .unwrap();
    let bytes = scrape_metrics(addr);
    println!("BENCH controller exposition after one CreateVolume: {bytes} bytes");
    let mut scrape_ms = Vec::new();
    for _ in 0..200 {
        let t = Instant::now();
        scrape_metrics(addr);
        scrape_ms.push(t.elapsed());
    }
    scrape_ms.sort();
    println!(
        "BENCH one scrape (connect, render, read): p50 {:.2} ms, p99 {:.2} ms (200 scrapes)",
        ms(percentile(&scrape_ms, 0.5)),
        ms(percentile(&scrape_ms, 0.99))
    );

    let report = |what: &str, lat: &[Duration], scrapes: usize| {
        println!(
            "BENCH Probe {what}: p50 {:.3} ms, p99 {:.3} ms, max {:.3} ms ({} Probes, {scrapes} scrapes)",
            ms(percentile(lat, 0.5)),
            ms(percentile(lat, 0.99)),
            ms(*lat.last().unwrap()),
            lat.len()
        );
    };
    let run = Duration::from_secs(10);
    probe_latencies(&d, Duration::from_secs(1));
    for round in 0..2 {
        report(
            &format!("without scraping (round {})", round + 1),
            &probe_latencies(&d, run),
            0,
        );
        let scraper = Meanwhile::run(0, move |n| {
            scrape_metrics(addr);
            *n += 1;
            std::thread::sleep(Duration::from_secs(1));
        });
        let lat = probe_latencies(&d, run);
        let n = scraper.stop();
        report(
            &format!("scraped every second (round {})", round + 1),
            &lat,
            n,
        );
    }
    // The worst case: a scraper in a tight loop.
    let scraper = Meanwhile::run(0, move |n| {
        scrape_metrics(addr);
        *n += 1;
    });
    let lat = probe_latencies(&d, run);
    let n = scraper.stop();
    report("scraped back to back", &lat, n);
}

const METRICS_ON: [(&str, &str); 1] = [("METRICS_ADDRESS", "127.0.0.1:0")];

#[test]
#[ignore = "benchmark: bash .ci/bench"]
fn bench_idle_memory_with_metrics_on_and_off() {
    for role in ["controller", "node"] {
        println!(
            "BENCH {role} role idle RSS: metrics off {} KiB, on {} KiB, after 100 scrapes {} KiB, after 2000 scrapes {} KiB (medians of 5)",
            idle_rss(role, &[], 0),
            idle_rss(role, &METRICS_ON, 0),
            idle_rss(role, &METRICS_ON, 100),
            idle_rss(role, &METRICS_ON, 2000),
        );
    }
}

/// Paginated GETs (collections: the scarce class of a token's budget) and
/// every other request, from the fake's counters.
fn by_class(linode: &FakeLinode) -> (u64, u64) {
    let mut list = 0;
    let mut other = 0;
    for (call, n) in linode.request_counts() {
        let (method, template) = call.split_once(' ').unwrap();
        let last = template.rsplit('/').next().unwrap();
        let collection = matches!(
            last,
            "spaces" | "filesystems" | "snapshots" | "configs" | "interfaces" | "quotas"
        );
        if method == "GET" && collection {
            list += n;
        } else {
            other += n;
        }
    }
    (list, other)
}

/// Paginated GETs of the creates (label lookups and status polls: lists of
/// filesystems filtered by id or label, or the whole Space once too many
/// are pending) and of the rest (ListVolumes lists by the driver's tag,
/// both list the Spaces), told apart by the request log's `X-Filter`.
fn lists_for_creates(linode: &FakeLinode) -> (u64, u64) {
    let (mut creates, mut rest) = (0, 0);
    for r in linode.requests() {
        if r.method != "GET" || !r.query.contains("page=") {
            continue;
        }
        let by_tag = r
            .x_filter
            .as_deref()
            .is_some_and(|f| f.contains("\"tags\""));
        if r.path.ends_with("/filesystems") && !by_tag {
            creates += 1;
        } else {
            rest += 1;
        }
    }
    (creates, rest)
}

/// csi-provisioner's pace: its retries of a create answered Unavailable or
/// Aborted back off from 100 ms to 5 s.
const PROVISIONER: Retry<'static> = Retry {
    codes: &[Code::UNAVAILABLE, Code::ABORTED],
    pauses: Backoff::doubling(Duration::from_millis(100), Duration::from_secs(5)),
    limit: Duration::from_secs(600),
};

/// The scaled-down budgets of the bulk benches (list and other requests
/// per window), set on `linode`.
fn scaled_down_limits(linode: &FakeLinode) -> (u64, u64, Duration) {
    let (list, other, window) = (20, 40, Duration::from_secs(2));
    linode.set_rate_limit(Some(linode_nfs_csi::fake::RateLimit {
        list,
        other,
        window,
    }));
    (list, other, window)
}

/// What `n` CreateVolume calls cost when `callers` threads send them as
/// csi-provisioner's workers do: one call per worker at a time, retried
/// with backoff on Unavailable and Aborted. Returns the wall time, and the
/// non-OK answers seen on the way by code.
fn provision_through_callers(
    driver: &Driver,
    n: usize,
    callers: usize,
    prefix: &str,
    request: impl Fn(&str) -> csi::CreateVolumeRequest + Send + Sync + 'static,
) -> (Duration, BTreeMap<String, usize>) {
    let request = Arc::new(request);
    let next = Arc::new(std::sync::atomic::AtomicUsize::new(0));
    let started = Instant::now();
    let threads: Vec<_> = (0..callers)
        .map(|_| {
            let client = driver.controller();
            let (next, request) = (next.clone(), request.clone());
            let prefix = prefix.to_string();
            std::thread::spawn(move || {
                let mut seen: BTreeMap<String, usize> = BTreeMap::new();
                loop {
                    let i = next.fetch_add(1, Ordering::SeqCst);
                    if i >= n {
                        return seen;
                    }
                    let req = request(&format!("{prefix}-{i:04}"));
                    retry(&PROVISIONER, || {
                        let answer = client.create_volume(&req);
                        if let Err(grpcio::Error::RpcFailure(s)) = &answer {
                            *seen.entry(format!("{:?}", s.code())).or_default() += 1;
                        }
                        answer
                    })
                    .unwrap_or_else(|e| panic!("CreateVolume {}: {e:?}", req.name));
                }
            })
        })
        .collect();
    let mut seen: BTreeMap<String, usize> = BTreeMap::new();
    for t in threads {
        for (code, count) in t.join().unwrap() {
            *seen.entry(code).or_default() += count;
        }
    }
    (started.elapsed(), seen)
}

#[test]
#[ignore = "benchmark: bash .ci/bench"]
fn bench_bulk_provisioning_through_provisioner_workers() {
    // Without limits: 1000 PVCs through csi-provisioner's 100 workers.
    let (linode, _kube, driver) = controller(Duration::from_secs(2), &[("WORKER_THREADS", "4")]);
    let client = driver.controller();
    let one = one_warm_create(&client, &linode);
    let (wall, seen) =
        provision_through_callers(&driver, 1000, 100, "pvc-thousand", create_request);
    let (list, other) = by_class(&linode);
    println!(
        "BENCH 1000 CreateVolume through 100 retrying callers, activation 2 s, WORKER_THREADS=4, no rate limits: {:.2} s = {:.1}x one create ({:.2} s); {:.2} paginated + {:.2} other Linode requests per create; non-OK answers {seen:?}",
        wall.as_secs_f64(),
        wall.as_secs_f64() / one.as_secs_f64(),
        one.as_secs_f64(),
        list as f64 / 1000.0,
        other as f64 / 1000.0,
    );
    assert_eq!(linode.filesystems().len(), 1002, "every filesystem once");

    // The real budgets scaled down (windows 30x shorter, budgets 10x smaller),
    // with 500 volumes there already, so that ListVolumes lists 1000 by the end.
    let (linode, _kube, driver) =
        controller_with_volumes(Duration::from_secs(2), 500, &[("WORKER_THREADS", "4")]);
    let client = driver.controller();
    client.create_volume(&create_request("pvc-warm")).unwrap();
    let (list_budget, other_budget, window) = scaled_down_limits(&linode);
    linode.clear_requests();
    // ListVolumes and GetCapacity keep being asked meanwhile.
    let client = driver.controller();
    let reader = Meanwhile::run(
        (Vec::new(), Vec::new(), 0),
        move |(lists, capacities, listed)| {
            let t = Instant::now();
            *listed = client
                .list_volumes(&csi::ListVolumesRequest::new())
                .unwrap()
                .entries
                .len();
            lists.push(t.elapsed());
            let mut cap = csi::GetCapacityRequest::new();
            cap.parameters = create_request("x").parameters;
            let t = Instant::now();
            client.get_capacity(&cap).unwrap();
            capacities.push(t.elapsed());
            std::thread::sleep(Duration::from_millis(500));
        },
    );
    let (wall, seen) = provision_through_callers(&driver, 500, 100, "pvc-limited", create_request);
    let (mut lists, mut capacities, listed) = reader.stop();
    lists.sort();
    capacities.sort();
    let (list, other) = by_class(&linode);
    let (creates, reader) = lists_for_creates(&linode);
    let floor = window.as_secs_f64() * (500.0 / other_budget as f64);
    println!(
        "BENCH 500 CreateVolume through 100 retrying callers under list:{list_budget},other:{other_budget},window:{window:?}, activation 2 s: {:.2} s = {:.2}x the floor of 500 POSTs at the other budget ({floor:.1} s); {list} paginated GETs ({creates} for the creates' lookups and polls, {reader} for ListVolumes and GetCapacity), {other} other requests, {} answered 429; non-OK answers {seen:?}; meanwhile ListVolumes of 500 growing to {listed} volumes p99 {:.0} ms ({} calls), GetCapacity p99 {:.0} ms ({} calls)",
        wall.as_secs_f64(),
        wall.as_secs_f64() / floor,
        linode.throttled(),
        ms(percentile(&lists, 0.99)),
        lists.len(),
        ms(percentile(&capacities, 0.99)),
        capacities.len(),
    );
    print_request_counts(&linode);
    assert_eq!(linode.filesystems().len(), 1001, "every filesystem once");
}

/// A controller binary in `mode` against `linode`, with its own kubeconfig.
fn listing_controller(linode: &FakeLinode, kube: &FakeKube, mode: &str) -> Driver {
    let b = Driver::builder();
    let kubeconfig = common::write_kubeconfig(b.dir(), &kube.url(), "kube-token");
    b.env("DRIVER_ROLE", "controller")
        .env("RUST_LOG", "warn")
        .env("LINODE_URL", linode.url())
        .env("LINODE_TOKEN", linode.token())
        .env("KUBECONFIG", kubeconfig.display().to_string())
        .env("NFS_ACCESS_POLICY_MODE", mode)
        .start()
}

/// Fakes holding `volumes` of the driver's volumes in Space 7 (seeded, not
/// created) and Linodes 1001..=1010 to publish to.
fn listing_world(volumes: usize) -> (FakeLinode, FakeKube) {
    bench_world(Duration::ZERO, volumes)
}

/// Every page of a ListVolumes walk, `per_page` at a time (0: one call);
/// the entries, the Linode requests it cost and its wall time.
fn listing_walk(
    client: &linode_nfs_csi::proto::csi_grpc::ControllerClient,
    linode: &FakeLinode,
    per_page: i32,
) -> (Vec<csi::list_volumes_response::Entry>, u64, Duration) {
    linode.clear_requests();
    let started = Instant::now();
    let mut entries = Vec::new();
    let mut req = csi::ListVolumesRequest::new();
    req.max_entries = per_page;
    loop {
        let resp = client.list_volumes(&req).unwrap();
        entries.extend(resp.entries);
        if resp.next_token.is_empty() {
            break;
        }
        req.starting_token = resp.next_token;
    }
    (entries, total(linode), started.elapsed())
}

#[test]
#[ignore = "benchmark: bash .ci/bench"]
fn bench_list_volumes_walks_and_published_nodes_at_scale() {
    for mode in ["space", "node"] {
        // 1000 volumes: a full listing, again, a paged walk; each against
        // a fresh process (cold: nothing known) and again (warm).
        let (linode, kube) = listing_world(1000);
        let driver = listing_controller(&linode, &kube, mode);
        let client = driver.controller();
        let (all, full_cold, _) = listing_walk(&client, &linode, 0);
        assert_eq!(all.len(), 1000);
        let (_, full_warm, _) = listing_walk(&client, &linode, 0);
        drop(client);
        drop(driver);
        let driver = listing_controller(&linode, &kube, mode);
        let client = driver.controller();
        let (walked, walk_cold, _) = listing_walk(&client, &linode, 100);
        let (_, walk_warm, _) = listing_walk(&client, &linode, 100);
        assert_eq!(
            walked
                .iter()
                .map(|e| &e.volume.volume_id)
                .collect::<Vec<_>>(),
            all.iter().map(|e| &e.volume.volume_id).collect::<Vec<_>>(),
            "the walk is the listing"
        );
        println!(
            "BENCH {mode} mode, 1000 volumes: one full ListVolumes {full_cold} Linode requests (fresh controller), {full_warm} right after; a walk of 100 per page (10 calls) {walk_cold} (fresh controller) = {:.2}x, {walk_warm} right after = {:.2}x",
            walk_cold as f64 / full_cold as f64,
            walk_warm as f64 / full_warm as f64,
        );
        assert!(walk_cold as f64 <= 1.2 * full_cold as f64);
        assert!(walk_warm as f64 <= 1.2 * full_warm as f64);
        if mode == "node" {
            assert!(full_warm <= 10, "a second listing: {full_warm} requests");
            // Publishes and unpublishes between listings: each listing
            // shows exactly what the ACLs hold.
            let mut want = published_by_volume(&all);
            let mut cap = csi::ControllerPublishVolumeRequest::new();
            cap.volume_capability = Some(rwx()).into();
            for round in 0..3usize {
                for i in 0..20usize {
                    let vol = &all[(round * 37 + i * 41) % all.len()].volume.volume_id;
                    let node = (1001 + (i + round) % 10).to_string();
                    let nodes = want.get_mut(vol).unwrap();
                    if nodes.contains(&node) {
                        let mut req = csi::ControllerUnpublishVolumeRequest::new();
                        req.volume_id = vol.clone();
                        req.node_id = node.clone();
                        client.controller_unpublish_volume(&req).unwrap();
                        nodes.retain(|n| *n != node);
                    } else {
                        let mut req = cap.clone();
                        req.volume_id = vol.clone();
                        req.node_id = node.clone();
                        client.controller_publish_volume(&req).unwrap();
                        nodes.push(node);
                        nodes.sort();
                    }
                }
                let (listed, cost, _) = listing_walk(&client, &linode, 0);
                assert_eq!(published_by_volume(&listed), want, "round {round}");
                let truth: BTreeMap<String, Vec<String>> = listed
                    .iter()
                    .map(|e| {
                        let fs = e.volume.volume_context["filesystem-id"].parse().unwrap();
                        let policy = linode.filesystem_policy(fs).unwrap();
                        let mut ids: Vec<String> = if policy.enabled {
                            policy.linode_ids().iter().map(u64::to_string).collect()
                        } else {
                            Vec::new()
                        };
                        ids.sort();
                        (e.volume.volume_id.clone(), ids)
                    })
                    .collect();
                assert_eq!(want, truth, "the backend agrees");
                println!(
                    "BENCH node mode, 1000 volumes: ListVolumes after 20 publishes/unpublishes (round {round}): {cost} Linode requests, published nodes exact"
                );
            }
        }
        drop(client);
        drop(driver);

        // 10,000 volumes: one full listing on a fresh controller, and again.
        let (linode, kube) = listing_world(10_000);
        let driver = listing_controller(&linode, &kube, mode);
        let client = driver.controller();
        let (all, cold, cold_wall) = listing_walk(&client, &linode, 0);
        assert_eq!(all.len(), 10_000);
        let (list, other) = by_class(&linode);
        let (_, warm, warm_wall) = listing_walk(&client, &linode, 0);
        let (_, walk, walk_wall) = listing_walk(&client, &linode, 100);
        println!(
            "BENCH {mode} mode, 10,000 volumes: one full ListVolumes on a fresh controller {:.2} s, {cold} Linode requests ({list} paginated, {other} other); right after {:.2} s, {warm} requests; a walk of 100 per page (100 calls) {:.2} s, {walk} requests",
            cold_wall.as_secs_f64(),
            warm_wall.as_secs_f64(),
            walk_wall.as_secs_f64(),
        );
    }
}

/// A controller mounting shared filesystems through the bind stand-in for
/// `mount -t nfs4`, in a mount namespace of its own: with a shared parent
/// `team-share` in Space 7 (`parent`), or exporting whatever the fake makes.
fn mounting_controller(
    activation: Duration,
    dir: &std::path::Path,
    parent: bool,
) -> common::controller::Env {
    use common::controller::{Setup, REGION, SPACE};
    use linode_nfs_csi::fake::FilesystemSeed;
    let helper = if parent {
        common::share::install_bind_helper(dir)
    } else {
        common::share::install_creating_bind_helper(dir)
    };
    let shares = dir.join("shares");
    std::fs::create_dir_all(&shares).unwrap();
    Setup::new()
        .seed(|s| {
            let s = Seed {
                activation_delay_ms: activation.as_millis() as u64,
                ..s
            };
            match parent {
                true => s.with_filesystem(FilesystemSeed::new(SPACE, "team-share", REGION)),
                false => s,
            }
        })
        .env("RUST_LOG", "warn")
        .env("NFS_MOUNT_HELPER", &helper.display().to_string())
        .env("SHARE_MOUNT_DIR", &shares.display().to_string())
        .prefix(&["unshare", "--mount", "--propagation", "private"])
        .start()
}

/// A controller with a shared parent `team-share` (see
/// `mounting_controller`); the parent's id.
fn subdirectory_controller(
    activation: Duration,
    dir: &std::path::Path,
) -> (common::controller::Env, u64) {
    let env = mounting_controller(activation, dir, true);
    let parent = env.filesystem("team-share");
    common::share::export_dir(dir, parent.mount_target_fqdn.as_deref().unwrap());
    (env, parent.id)
}

fn subdirectory_request(name: &str, parent: u64) -> csi::CreateVolumeRequest {
    let mut req = create_request(name);
    for (k, v) in [
        ("volume-type", "subdirectory".to_string()),
        ("shared-filesystem-id", parent.to_string()),
    ] {
        req.parameters
            .insert(format!("linodenfs.csi.linode.com/{k}"), v);
    }
    let mut range = csi::CapacityRange::new();
    range.required_bytes = 1 << 30;
    req.capacity_range = Some(range).into();
    req
}

#[test]
#[ignore = "benchmark: bash .ci/bench"]
fn bench_subdirectory_create_next_to_a_filesystem_create() {
    for activation in [Duration::ZERO, Duration::from_secs(2)] {
        let dir = common::TempDir::new("bench-subdir");
        let (env, parent) = subdirectory_controller(activation, dir.path());
        let linode = &env.linode;
        let client = &env.client;
        // Warm the Space, region and parent mount, as a running controller is.
        client.create_volume(&create_request("pvc-warm")).unwrap();
        client
            .create_volume(&subdirectory_request("pvc-sub-warm", parent))
            .unwrap();
        for (kind, req) in [
            ("filesystem", create_request("pvc-fs-one")),
            ("subdirectory", subdirectory_request("pvc-sub-one", parent)),
        ] {
            linode.clear_requests();
            let started = Instant::now();
            client.create_volume(&req).unwrap();
            let took = started.elapsed();
            println!(
                "BENCH one {kind} CreateVolume (warm), activation {:.0} s: {:.3} s, {} Linode requests",
                activation.as_secs_f64(),
                took.as_secs_f64(),
                total(linode)
            );
            print_request_counts(linode);
        }
        linode.clear_requests();
        let started = Instant::now();
        all_answered(creates_of(client, 50, |i| {
            subdirectory_request(&format!("pvc-sub-{i}"), parent)
        }));
        println!(
            "BENCH 50 concurrent subdirectory CreateVolume on one parent, activation {:.0} s: {:.2} s, {} Linode requests ({} quota POSTs)",
            activation.as_secs_f64(),
            started.elapsed().as_secs_f64(),
            total(linode),
            linode.calls("POST", "nfs/spaces/*/filesystems/*/quotas"),
        );
    }

    // 500 small directory volumes of one parent through csi-provisioner's
    // 100 workers, under the scaled-down budgets of the bulk bench.
    let dir = common::TempDir::new("bench-subdir-limited");
    let (env, parent) = subdirectory_controller(Duration::from_secs(2), dir.path());
    env.client
        .create_volume(&subdirectory_request("pvc-sub-warm", parent))
        .unwrap();
    let (list_budget, other_budget, window) = scaled_down_limits(&env.linode);
    env.linode.clear_requests();
    let (wall, seen) =
        provision_through_callers(&env.driver, 500, 100, "pvc-sub-limited", move |name| {
            let mut req = subdirectory_request(name, parent);
            req.capacity_range.as_mut().unwrap().required_bytes = 64 << 20;
            req
        });
    let (list, other) = by_class(&env.linode);
    let floor = window.as_secs_f64() * (500.0 / other_budget as f64);
    println!(
        "BENCH 500 subdirectory CreateVolume on one parent through 100 retrying callers under list:{list_budget},other:{other_budget},window:{window:?}, activation 2 s: {:.2} s = {:.2}x the floor of 500 quota POSTs at the other budget ({floor:.1} s); {list} paginated GETs, {other} other requests, {} answered 429; non-OK answers {seen:?}",
        wall.as_secs_f64(),
        wall.as_secs_f64() / floor,
        env.linode.throttled(),
    );
    print_request_counts(&env.linode);
}

#[test]
#[ignore = "benchmark: bash .ci/bench"]
fn bench_a_thousand_pool_volumes_under_rate_limits() {
    // A pool of 20Gi filesystems holds 320 volumes of 64Mi each: 1000
    // volumes make four, one at a time, while the creates wait.
    let dir = common::TempDir::new("bench-pool");
    let env = mounting_controller(Duration::from_secs(2), dir.path(), false);
    let (list_budget, other_budget, window) = scaled_down_limits(&env.linode);
    let (wall, seen) = provision_through_callers(&env.driver, 1000, 100, "pvc-pool", |name| {
        let mut req = create_request(name);
        for (k, v) in [
            ("volume-type", "subdirectory"),
            ("shared-filesystem-pool", "bench"),
            ("pool-filesystem-size", "20Gi"),
            ("pool-max-filesystems", "8"),
        ] {
            req.parameters
                .insert(format!("linodenfs.csi.linode.com/{k}"), v.to_string());
        }
        let mut range = csi::CapacityRange::new();
        range.required_bytes = 64 << 20;
        req.capacity_range = Some(range).into();
        req
    });
    let (list, other) = by_class(&env.linode);
    let made = env.linode.calls("POST", "nfs/spaces/*/filesystems");
    let floor = window.as_secs_f64() * ((1000 + made) as f64 / other_budget as f64);
    println!(
        "BENCH 1000 pool CreateVolume (64Mi each, 20Gi pool filesystems) through 100 retrying callers under list:{list_budget},other:{other_budget},window:{window:?}, activation 2 s, cold: {:.2} s = {:.2}x the floor of its POSTs at the other budget ({floor:.1} s); {made} pool filesystems made, {list} paginated GETs, {other} other requests, {} answered 429; non-OK answers {seen:?}",
        wall.as_secs_f64(),
        wall.as_secs_f64() / floor,
        env.linode.throttled(),
    );
    print_request_counts(&env.linode);
}

/// Issue 36's shape: 1000 volumes of 1 GiB on a cold pool of 100Gi
/// filesystems with a spare, up to 20 of them (ten are needed), through the
/// provisioner's 100 workers under the scaled-down budgets. The floor is
/// the quota POSTs at the write budget; what the limits refused is shown
/// apart from what ran.
#[test]
#[ignore = "benchmark: bash .ci/bench"]
fn bench_a_thousand_gib_volumes_on_a_cold_pool_with_a_spare() {
    let dir = common::TempDir::new("bench-pool-gib");
    let env = mounting_controller(Duration::from_secs(2), dir.path(), false);
    let (list_budget, other_budget, window) = scaled_down_limits(&env.linode);
    let (wall, seen) = provision_through_callers(&env.driver, 1000, 100, "pvc-gib", |name| {
        let mut req = create_request(name);
        for (k, v) in [
            ("volume-type", "subdirectory"),
            ("shared-filesystem-pool", "bench"),
            ("pool-filesystem-size", "100Gi"),
            ("pool-spares", "1"),
            ("pool-max-filesystems", "20"),
        ] {
            req.parameters
                .insert(format!("linodenfs.csi.linode.com/{k}"), v.to_string());
        }
        let mut range = csi::CapacityRange::new();
        range.required_bytes = 1 << 30;
        req.capacity_range = Some(range).into();
        req
    });
    let (list, other) = by_class(&env.linode);
    let made = env.linode.calls("POST", "nfs/spaces/*/filesystems");
    let quota_posts = env
        .linode
        .request_counts()
        .get("POST nfs/spaces/{id}/filesystems/{id}/quotas")
        .copied()
        .unwrap_or(0);
    let floor = window.as_secs_f64() * (1000.0 / other_budget as f64);
    println!(
        "BENCH 1000 pool CreateVolume (1Gi each, 100Gi pool filesystems, 1 spare, at most 20) through 100 retrying callers under list:{list_budget},other:{other_budget},window:{window:?}, activation 2 s, cold: {:.2} s = {:.2}x the floor of 1000 quota POSTs at the other budget ({floor:.1} s); {made} pool filesystems made; executed: {list} paginated GETs, {other} other requests, {quota_posts} quota POSTs; refused with 429: {:?}; non-OK answers {seen:?}",
        wall.as_secs_f64(),
        wall.as_secs_f64() / floor,
        env.linode.throttled_counts(),
    );
    print_request_counts(&env.linode);
}

/// Writes pages out and drops the page cache, so the next copy reads from
/// the disk; the drop needs root and a writable /proc, and is skipped
/// without them.
fn cold_caches() {
    let _ = std::process::Command::new("sync").status();
    let _ = std::fs::write("/proc/sys/vm/drop_caches", "3");
}

/// How long `cp -a from to` takes, from cold caches.
fn cp_a(from: &std::path::Path, to: &std::path::Path) -> Duration {
    cold_caches();
    let started = Instant::now();
    let cp = std::process::Command::new("cp")
        .arg("-a")
        .arg(from)
        .arg(to)
        .status()
        .unwrap();
    assert!(cp.success());
    started.elapsed()
}

/// 20,000 files totalling 1 GiB under `src`: 10 × 10 directories of 200
/// files, 19,990 of 4 KiB and one of ~95 MiB in ten of the directories.
fn copy_bench_tree(src: &std::path::Path) -> u64 {
    const FILES: u64 = 20_000;
    const TOTAL: u64 = 1 << 30;
    const SMALL: u64 = 4096;
    let big = (TOTAL - (FILES - 10) * SMALL) / 10;
    let mut noise = vec![0u8; 1 << 20];
    let mut x = 0x9e37_79b9_7f4a_7c15u64;
    for b in &mut noise {
        x ^= x << 13;
        x ^= x >> 7;
        x ^= x << 17;
        *b = x as u8;
    }
    let mut written = 0;
    for t in 0..10 {
        for d in 0..10 {
            let dir = src.join(format!("t{t}/d{d}"));
            std::fs::create_dir_all(&dir).unwrap();
            for f in 0..200u64 {
                let len = if d == 0 && f == 0 {
                    big + if t == 9 {
                        TOTAL - (FILES - 10) * SMALL - 10 * big
                    } else {
                        0
                    }
                } else {
                    SMALL
                };
                let mut out = std::fs::File::create(dir.join(format!("f{f}"))).unwrap();
                let mut left = len;
                let mut at = ((t * 2000 + d * 200 + f) * 4099) as usize % (noise.len() - 4096);
                while left > 0 {
                    let n = left.min((noise.len() - at) as u64) as usize;
                    std::io::Write::write_all(&mut out, &noise[at..at + n]).unwrap();
                    left -= n as u64;
                    at = 0;
                }
                written += len;
            }
        }
    }
    written
}

#[test]
#[ignore = "benchmark: bash .ci/bench"]
fn bench_copy_tree_against_cp_a() {
    use linode_nfs_csi::fs_tree::{copy_tree, remove_tree, CopyOptions, Dir};
    let scratch = std::env::temp_dir().join(format!("lnc-bench-copy-{}", std::process::id()));
    let remove = |name: &str| {
        remove_tree(
            &Dir::open(&scratch).unwrap(),
            &std::ffi::CString::new(name).unwrap(),
        )
        .unwrap()
    };
    std::fs::create_dir_all(&scratch).unwrap();
    let src = scratch.join("src");
    assert_eq!(copy_bench_tree(&src), 1 << 30);
    for round in 1..=2 {
        let cp_took = cp_a(&src, &scratch.join("cp"));

        cold_caches();
        std::fs::create_dir(scratch.join("copy")).unwrap();
        let me = std::process::id();
        let before = rss_kib(me);
        let options = CopyOptions {
            threads: 8,
            ..CopyOptions::default()
        };
        let started = Instant::now();
        let (stats, peak) = peak_rss_during(me, || {
            copy_tree(
                &Dir::open(&src).unwrap(),
                &Dir::open(&scratch.join("copy")).unwrap(),
                &options,
            )
            .unwrap()
        });
        let copy_took = started.elapsed();
        let after = rss_kib(me);
        assert_eq!((stats.files, stats.bytes), (20_000, 1 << 30));
        println!(
            "BENCH copy of 20000 files, 1 GiB: cp -a {:.2} s, copy_tree {:.2} s = {:.2}x (round {round}, caches dropped)",
            cp_took.as_secs_f64(),
            copy_took.as_secs_f64(),
            copy_took.as_secs_f64() / cp_took.as_secs_f64()
        );
        println!(
            "BENCH copy_tree RSS growth: {} KiB (round {round}: {before} KiB before, peak {peak} KiB, {after} KiB at the end)",
            peak.saturating_sub(before)
        );
        remove("cp");
        remove("copy");
    }
    remove("src");
    std::fs::remove_dir(&scratch).unwrap();
}

/// `GET /metrics` over a fresh connection: the whole answer as text.
fn metrics_text(addr: std::net::SocketAddr) -> String {
    use std::io::{Read, Write};
    let mut s = std::net::TcpStream::connect(addr).unwrap();
    s.write_all(b"GET /metrics HTTP/1.1\r\nHost: bench\r\n\r\n")
        .unwrap();
    let mut out = String::new();
    s.read_to_string(&mut out).unwrap();
    out
}

/// Linode API requests the driver has sent (every attempt), by its metrics.
fn linode_requests(addr: std::net::SocketAddr) -> u64 {
    metrics_text(addr)
        .lines()
        .filter(|l| l.starts_with("csi_linode_request_duration_seconds_count{"))
        .filter_map(|l| l.rsplit(' ').next()?.parse::<u64>().ok())
        .sum()
}

/// Seconds a copy took, from the driver's "copy done in N s" line.
fn copy_seconds(logs: &str, volume: &str) -> f64 {
    logs.lines()
        .filter(|l| l.contains(&format!("filling volume {volume}: copy done in ")))
        .find_map(|l| {
            l.split("copy done in ")
                .nth(1)?
                .split(' ')
                .next()?
                .parse()
                .ok()
        })
        .unwrap_or_else(|| panic!("no copy of {volume} in the log"))
}

fn subdir_create_req(name: &str, size: i64) -> csi::CreateVolumeRequest {
    let mut req = e2e_support::create_req(name, size);
    req.parameters = e2e_support::subdirectory_params();
    req
}

#[test]
#[ignore = "benchmark: bash .ci/bench"]
fn bench_directory_snapshots_and_a_restore_of_20000_files() {
    use common::requests::{from_snapshot, snapshot_req};
    const GIB: i64 = 1 << 30;
    let (state, dev) = e2e_support::start_dev(
        "bench-dirsnap",
        &[("METRICS_ADDRESS", "127.0.0.1:0"), ("RUST_LOG", "info")],
    );
    let addr = announced_metrics(&dev.driver);

    let ids: Vec<String> = (0..50)
        .map(|i| {
            dev.create(&subdir_create_req(&format!("pvc-{i}"), 64 << 20))
                .volume_id
        })
        .collect();
    let before = linode_requests(addr);
    let started = Instant::now();
    let answers: Vec<csi::Snapshot> = std::thread::scope(|s| {
        let calls: Vec<_> = ids
            .iter()
            .enumerate()
            .map(|(i, id)| {
                let client = dev.another_controller();
                let req = snapshot_req(&format!("snap-{i}"), id);
                s.spawn(move || {
                    retry(&common::rpc::SIDECAR, || {
                        client.create_snapshot_opt(&req, common::rpc::call())
                    })
                })
            })
            .collect();
        calls
            .into_iter()
            .map(|c| c.join().unwrap().unwrap().snapshot.unwrap())
            .collect()
    });
    let took = started.elapsed();
    let parents: std::collections::BTreeSet<&str> = answers
        .iter()
        .map(|s| s.snapshot_id.split('/').nth(2).unwrap())
        .collect();
    let posts = state.snapshots().len();
    assert_eq!(posts, parents.len());
    assert!(posts <= 2, "{posts} parent snapshots for 50 requests");
    println!(
        "BENCH 50 directory snapshots of one parent requested at once: {posts} Linode snapshot POSTs, {} Linode requests, answered in {:.2} s",
        linode_requests(addr) - before,
        took.as_secs_f64()
    );

    // The source: 20,000 files, 1 GiB, written where the volume's
    // directory lives.
    let src = dev.create(&subdir_create_req("pvc-src", 2 * GIB));
    let src_dir = state
        .shared_base()
        .join(src.volume_id.rsplit('/').next().unwrap());
    assert_eq!(copy_bench_tree(&src_dir), 1 << 30);
    let scratch = state.path().join("bench-cp");
    std::fs::create_dir(&scratch).unwrap();
    let cp_took = cp_a(&src_dir, &scratch.join("cp"));

    let before = linode_requests(addr);
    let started = Instant::now();
    let snap = e2e_support::snapshot_until_ready(&dev, "snap-src", &src.volume_id);
    let snapshot_took = started.elapsed();
    let snapshot_requests = linode_requests(addr) - before;

    cold_caches();
    let pid = dev.pid();
    let rss_before = rss_kib(pid);
    let before = linode_requests(addr);
    let started = Instant::now();
    let (restored, peak) = peak_rss_during(pid, || {
        dev.create(&from_snapshot(
            subdir_create_req("pvc-restored", 2 * GIB),
            &snap.snapshot_id,
        ))
    });
    let restore_took = started.elapsed();
    let restore_requests = linode_requests(addr) - before;
    let restored_name = restored.volume_id.rsplit('/').next().unwrap().to_string();
    let restored_dir = state.shared_base().join(&restored_name);
    let copy_took = copy_seconds(&dev.driver.logs(), &restored.volume_id);
    let files = std::fs::read_dir(restored_dir.join("t9/d9"))
        .unwrap()
        .count();
    assert_eq!(files, 200);
    println!(
        "BENCH restore of a directory of 20000 files, 1 GiB: copy step {copy_took:.2} s vs cp -a {:.2} s = {:.2}x; controller RSS growth {} KiB ({rss_before} KiB before, peak {peak} KiB)",
        cp_took.as_secs_f64(),
        copy_took / cp_took.as_secs_f64(),
        peak.saturating_sub(rss_before)
    );
    println!(
        "BENCH the whole restore (clone of the parent snapshot, mount, copy, clean-up): {:.2} s, {restore_requests} Linode requests; the snapshot before it {:.2} s, {snapshot_requests} requests",
        restore_took.as_secs_f64(),
        snapshot_took.as_secs_f64()
    );
}

/// What dev mode's emulated NFS servers have served so far, by operation,
/// from its metrics.
fn nfs_operations(addr: std::net::SocketAddr) -> BTreeMap<String, u64> {
    metrics_text(addr)
        .lines()
        .filter_map(|l| {
            let rest = l.strip_prefix("dev_nfs_operations_total{op=\"")?;
            let (op, n) = rest.split_once("\"} ")?;
            Some((op.to_string(), n.parse().ok()?))
        })
        .collect()
}

/// The operations served between `before` and `after`, and their sum.
fn served(before: &BTreeMap<String, u64>, after: &BTreeMap<String, u64>) -> (u64, String) {
    let each: Vec<(String, u64)> = after
        .iter()
        .map(|(op, n)| (op.clone(), n - before.get(op).copied().unwrap_or(0)))
        .filter(|(_, n)| *n > 0)
        .collect();
    let text: Vec<String> = each.iter().map(|(op, n)| format!("{op} {n}")).collect();
    (each.iter().map(|(_, n)| n).sum(), text.join(", "))
}

#[test]
#[ignore = "benchmark: bash .ci/bench"]
fn bench_a_restore_across_an_emulated_network_against_cp_a() {
    use common::requests::from_snapshot;
    const GIB: i64 = 1 << 30;
    // The driver's default unless BENCH_COPY_THREADS names another.
    let threads = std::env::var("BENCH_COPY_THREADS").unwrap_or_else(|_| "32".into());
    let envs = [
        ("DEV_NFS_LATENCY", "1ms"),
        ("COPY_THREADS", threads.as_str()),
        ("METRICS_ADDRESS", "127.0.0.1:0"),
        ("RUST_LOG", "info"),
    ];
    let (state, dev) = e2e_support::start_dev("bench-network", &envs);
    let addr = announced_metrics(&dev.driver);
    let src = dev.create(&subdir_create_req("pvc-src", 2 * GIB));
    let name = |v: &csi::Volume| v.volume_id.rsplit('/').next().unwrap().to_string();
    // The tree is written on the export directly, not across the network.
    assert_eq!(
        copy_bench_tree(&state.shared_base().join(name(&src))),
        1 << 30
    );

    // cp -a across the emulated network: from the source volume staged on
    // the node (one mount, one server) into a new volume's directory
    // through the controller's mount of the parent (another), inside dev
    // mode's mount namespace.
    let into = dev.create(&subdir_create_req("pvc-cp", 2 * GIB));
    let staging = state.staging("src");
    e2e_support::mount(&dev, &src, &staging, &[]);
    let parent = state.shared_parent().0;
    let target = state
        .path()
        .join("shares")
        .join(format!("1-{parent}/csi-volumes"))
        .join(name(&into));
    let before = nfs_operations(addr);
    cold_caches();
    let started = Instant::now();
    let cp = std::process::Command::new("cp")
        .arg("-a")
        .arg(dev.inside(&staging).join("."))
        .arg(dev.inside(&target))
        .status()
        .unwrap();
    assert!(cp.success());
    let cp_took = started.elapsed();
    let (cp_ops, cp_each) = served(&before, &nfs_operations(addr));
    e2e_support::unmount(&dev, &src.volume_id, &staging, &[]);

    let snap = e2e_support::snapshot_until_ready(&dev, "snap-src", &src.volume_id);
    cold_caches();
    let before = nfs_operations(addr);
    println!(
        "BENCH   cp -a across the emulated network: {:.2} s, {cp_ops} NFS operations: {cp_each}",
        cp_took.as_secs_f64()
    );
    let req = from_snapshot(
        subdir_create_req("pvc-restored", 2 * GIB),
        &snap.snapshot_id,
    );
    // The restore outlasts a call: each retry joins the job.
    let restored = loop {
        let answer = dev.controller.create_volume_opt(
            &req,
            grpcio::CallOption::default().timeout(Duration::from_secs(600)),
        );
        match answer {
            Ok(resp) => break resp.volume.unwrap(),
            Err(e) if common::rpc::code_of(&e) == Code::DEADLINE_EXCEEDED => {}
            Err(e) => panic!("CreateVolume pvc-restored: {e:?}"),
        }
    };
    let copy_took = copy_seconds(&dev.driver.logs(), &restored.volume_id);
    let (copy_ops, copy_each) = served(&before, &nfs_operations(addr));
    let files = std::fs::read_dir(state.shared_base().join(name(&restored)).join("t9/d9"))
        .unwrap()
        .count();
    assert_eq!(files, 200);
    println!(
        "BENCH restore copy of 20000 files, 1 GiB across an emulated network (1 ms a round trip, 32 requests at once per mount, 1 GiB/s): copy step {copy_took:.2} s with COPY_THREADS={threads} vs cp -a {:.2} s = {:.3}x",
        cp_took.as_secs_f64(),
        copy_took / cp_took.as_secs_f64()
    );
    println!(
        "BENCH   the restore (clone mount, marker, copy) served {copy_ops} NFS operations: {copy_each}"
    );
}
