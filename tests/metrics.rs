//! The metrics endpoint of the real binary, scraped over HTTP after real
//! RPCs through gRPC, real Linode calls against the fake (429s injected),
//! real Kubernetes and metadata calls, and real mounts in a private mount
//! namespace: the counted values must match what the fakes saw. Every
//! scrape is checked by a strict parser of the text exposition format
//! 0.0.4 written here, independently of the driver's encoder. Bad requests
//! to the endpoint are refused and never disturb the RPCs.

mod common;
mod node_support;

use common::controller::*;
use common::rpc::*;
use common::{wait_for, Driver};
use grpcio::RpcStatusCode as Code;
use linode_nfs_csi::fake::{
    FakeLinode, FakeMetadata, FaultRule, Lifecycle, RateLimit, Seed, SpaceSeed,
};
use linode_nfs_csi::linode::endpoint_template;
use linode_nfs_csi::proto::csi;
use node_support::NfsNode;
use std::collections::{BTreeMap, BTreeSet};
use std::io::{Read, Write};
use std::net::{SocketAddr, TcpStream};
use std::time::Duration;

const PATIENCE: Duration = Duration::from_secs(60);

/// One series: its name and labels.
type Series = (String, BTreeMap<String, String>);

/// A scrape, parsed and checked.
struct Exposition {
    types: BTreeMap<String, String>,
    samples: BTreeMap<Series, f64>,
}

fn is_name(s: &str, colons: bool) -> bool {
    let mut chars = s.chars();
    chars
        .next()
        .is_some_and(|c| c.is_ascii_alphabetic() || c == '_' || (colons && c == ':'))
        && chars.all(|c| c.is_ascii_alphanumeric() || c == '_' || (colons && c == ':'))
}

fn parse_value(raw: &str) -> f64 {
    match raw {
        "+Inf" => f64::INFINITY,
        "-Inf" => f64::NEG_INFINITY,
        "NaN" => f64::NAN,
        _ => raw
            .parse()
            .unwrap_or_else(|_| panic!("bad sample value {raw:?}")),
    }
}

/// `name="value",...}` after the `{`; returns the labels and the rest of
/// the line after the `}`.
fn parse_labels<'a>(line: &'a str, mut rest: &'a str) -> (BTreeMap<String, String>, &'a str) {
    let mut labels = BTreeMap::new();
    loop {
        if let Some(after) = rest.strip_prefix('}') {
            return (labels, after);
        }
        let (name, after) = rest
            .split_once("=\"")
            .unwrap_or_else(|| panic!("bad label in {line:?}"));
        assert!(is_name(name, false), "bad label name {name:?} in {line:?}");
        let mut value = String::new();
        let mut chars = after.char_indices();
        let end = loop {
            match chars.next() {
                Some((_, '\\')) => match chars.next() {
                    Some((_, '\\')) => value.push('\\'),
                    Some((_, '"')) => value.push('"'),
                    Some((_, 'n')) => value.push('\n'),
                    other => panic!("bad escape {other:?} in {line:?}"),
                },
                Some((i, '"')) => break i,
                Some((_, c)) => value.push(c),
                None => panic!("unterminated label value in {line:?}"),
            }
        };
        assert!(
            labels.insert(name.to_string(), value).is_none(),
            "label {name} twice in {line:?}"
        );
        rest = &after[end + 1..];
        if let Some(after) = rest.strip_prefix(',') {
            rest = after;
            assert!(!rest.starts_with('}'), "trailing comma in {line:?}");
        } else {
            assert!(rest.starts_with('}'), "bad label list in {line:?}");
        }
    }
}

impl Exposition {
    /// Panics on anything the format forbids, and on what our encoder must
    /// never emit even where the format tolerates it: HELP and TYPE exactly
    /// once per family, both before its first sample; a family's lines
    /// together; no duplicate series; no other comments or blank lines.
    fn parse(text: &str) -> Exposition {
        assert!(text.ends_with('\n'), "the exposition ends with a newline");
        let mut types: BTreeMap<String, String> = BTreeMap::new();
        let mut helped = BTreeSet::new();
        let mut samples: BTreeMap<Series, f64> = BTreeMap::new();
        let mut order: Vec<(String, Series, f64)> = Vec::new();
        let mut current: Option<String> = None;
        let mut closed = BTreeSet::new();
        let mut open = |family: &str, current: &mut Option<String>| {
            if current.as_deref() != Some(family) {
                assert!(
                    !closed.contains(family),
                    "family {family} appears in two places"
                );
                if let Some(old) = current.take() {
                    closed.insert(old);
                }
                *current = Some(family.to_string());
            }
        };
        for line in text.lines() {
            assert!(!line.is_empty(), "blank line");
            if let Some(rest) = line.strip_prefix("# HELP ") {
                let (name, doc) = rest.split_once(' ').unwrap_or((rest, ""));
                assert!(is_name(name, true), "bad name in {line:?}");
                let mut chars = doc.chars();
                while let Some(c) = chars.next() {
                    if c == '\\' {
                        assert!(
                            matches!(chars.next(), Some('\\' | 'n')),
                            "bad escape in HELP {line:?}"
                        );
                    }
                }
                open(name, &mut current);
                assert!(!types.contains_key(name), "HELP after TYPE for {name}");
                assert!(helped.insert(name.to_string()), "HELP twice for {name}");
                continue;
            }
            if let Some(rest) = line.strip_prefix("# TYPE ") {
                let (name, kind) = rest.split_once(' ').expect("TYPE has a type");
                assert!(is_name(name, true), "bad name in {line:?}");
                assert!(
                    ["counter", "gauge", "histogram", "summary", "untyped"].contains(&kind),
                    "bad type in {line:?}"
                );
                open(name, &mut current);
                assert!(helped.contains(name), "TYPE without HELP for {name}");
                assert!(
                    types.insert(name.to_string(), kind.to_string()).is_none(),
                    "TYPE twice for {name}"
                );
                continue;
            }
            assert!(!line.starts_with('#'), "unexpected comment {line:?}");
            let split = line.find(['{', ' ']).expect("a sample has a value");
            let name = &line[..split];
            assert!(is_name(name, true), "bad metric name in {line:?}");
            let (labels, rest) = match line[split..].strip_prefix('{') {
                Some(after) => parse_labels(line, after),
                None => (BTreeMap::new(), &line[split..]),
            };
            let rest = rest.strip_prefix(' ').expect("a space before the value");
            let mut fields = rest.split(' ');
            let value = parse_value(fields.next().unwrap());
            if let Some(ts) = fields.next() {
                ts.parse::<i64>().expect("a timestamp is an integer");
            }
            assert!(fields.next().is_none(), "junk after the value in {line:?}");
            // The family a sample belongs to, declared before it.
            let family = [
                ("_bucket", "histogram"),
                ("_sum", "histogram"),
                ("_count", "histogram"),
            ]
            .iter()
            .find_map(|(suffix, kind)| {
                let base = name.strip_suffix(suffix)?;
                (types.get(base).map(String::as_str) == Some(*kind)).then_some(base)
            })
            .unwrap_or(name);
            let kind = types
                .get(family)
                .unwrap_or_else(|| panic!("sample {name} before its TYPE"));
            assert_eq!(
                current.as_deref(),
                Some(family),
                "sample {name} outside its family's lines"
            );
            if kind == "counter" {
                assert!(value >= 0.0, "negative counter {line:?}");
            }
            assert_eq!(
                labels.contains_key("le"),
                name.ends_with("_bucket") && kind == "histogram",
                "le only on histogram buckets: {line:?}"
            );
            let series = (name.to_string(), labels);
            assert!(
                samples.insert(series.clone(), value).is_none(),
                "duplicate series {line:?}"
            );
            order.push((family.to_string(), series, value));
        }
        let exposition = Exposition { types, samples };
        exposition.check_histograms(&order);
        exposition
    }

    /// Buckets in increasing `le`, cumulative, ending at `+Inf`, which
    /// equals `_count`; `_sum` present.
    fn check_histograms(&self, order: &[(String, Series, f64)]) {
        let mut groups: BTreeMap<Series, Vec<(f64, f64)>> = BTreeMap::new();
        for (family, (name, labels), value) in order {
            if name == &format!("{family}_bucket") {
                let mut rest = labels.clone();
                let le = parse_value(&rest.remove("le").unwrap());
                groups
                    .entry((family.clone(), rest))
                    .or_default()
                    .push((le, *value));
            }
        }
        for ((family, labels), buckets) in &groups {
            let what = format!("{family}{labels:?}");
            for pair in buckets.windows(2) {
                assert!(pair[0].0 < pair[1].0, "{what}: le not increasing");
                assert!(pair[0].1 <= pair[1].1, "{what}: buckets not cumulative");
            }
            let (last_le, inf) = *buckets.last().unwrap();
            assert_eq!(last_le, f64::INFINITY, "{what}: no +Inf bucket");
            let count = self.samples[&(format!("{family}_count"), labels.clone())];
            assert_eq!(count, inf, "{what}: _count is not the +Inf bucket");
            assert!(
                self.samples
                    .contains_key(&(format!("{family}_sum"), labels.clone())),
                "{what}: no _sum"
            );
        }
        for (name, labels) in self.samples.keys() {
            for suffix in ["_sum", "_count"] {
                if let Some(family) = name.strip_suffix(suffix) {
                    if self.types.get(family).map(String::as_str) == Some("histogram") {
                        assert!(
                            groups.contains_key(&(family.to_string(), labels.clone())),
                            "{name}{labels:?} without buckets"
                        );
                    }
                }
            }
        }
    }

    /// The value of the series `name` with exactly `labels`.
    fn value(&self, name: &str, labels: &[(&str, &str)]) -> Option<f64> {
        let labels = labels
            .iter()
            .map(|(k, v)| (k.to_string(), v.to_string()))
            .collect();
        self.samples.get(&(name.to_string(), labels)).copied()
    }

    fn get(&self, name: &str, labels: &[(&str, &str)]) -> f64 {
        self.value(name, labels)
            .unwrap_or_else(|| panic!("no series {name}{labels:?}"))
    }

    /// Every series of `name`, by its labels.
    fn series(&self, name: &str) -> Vec<(&BTreeMap<String, String>, f64)> {
        self.samples
            .iter()
            .filter(|((n, _), _)| n == name)
            .map(|((_, l), v)| (l, *v))
            .collect()
    }
}

/// Writes `raw` and reads the whole answer.
fn exchange(addr: SocketAddr, raw: &[u8]) -> String {
    let mut s = TcpStream::connect(addr).expect("connect to the metrics endpoint");
    s.set_read_timeout(Some(PATIENCE)).unwrap();
    s.write_all(raw).unwrap();
    let mut out = Vec::new();
    s.read_to_end(&mut out).unwrap();
    String::from_utf8(out).expect("a UTF-8 answer")
}

fn status_of(answer: &str) -> u16 {
    answer
        .strip_prefix("HTTP/1.1 ")
        .and_then(|r| r.get(..3))
        .and_then(|s| s.parse().ok())
        .unwrap_or_else(|| panic!("not an HTTP answer: {answer:?}"))
}

/// Where the driver says it serves metrics (it may have bound port 0).
fn metrics_addr(driver: &Driver) -> SocketAddr {
    let mut addr = None;
    wait_for("the metrics endpoint to be announced", PATIENCE, || {
        addr = driver.logs().lines().find_map(|l| {
            let rest = l.split("serving metrics on http://").nth(1)?;
            rest.strip_suffix("/metrics")?.parse().ok()
        });
        addr.is_some()
    });
    addr.unwrap()
}

fn scrape(addr: SocketAddr) -> Exposition {
    let answer = exchange(addr, b"GET /metrics HTTP/1.1\r\nHost: t\r\n\r\n");
    let (head, body) = answer.split_once("\r\n\r\n").expect("head and body");
    assert_eq!(status_of(head), 200, "{head}");
    assert!(
        head.lines()
            .any(|l| l == "Content-Type: text/plain; version=0.0.4; charset=utf-8"),
        "{head}"
    );
    Exposition::parse(body)
}

/// A scrape once no RPC is in flight: a call is counted out just after its
/// answer is on its way, so the client may see the answer first.
fn settled(addr: SocketAddr) -> Exposition {
    let mut m = scrape(addr);
    wait_for("no RPC in flight", PATIENCE, || {
        m = scrape(addr);
        m.get("csi_rpc_in_flight", &[]) == 0.0
    });
    m
}

fn with_metrics() -> Setup {
    Setup::new().env("METRICS_ADDRESS", "127.0.0.1:0")
}

fn probe(driver: &Driver) {
    let resp = driver.identity().probe(&csi::ProbeRequest::new()).unwrap();
    assert!(resp.ready.unwrap().value);
}

fn status_class(status: u16) -> String {
    format!("{}xx", status / 100)
}

/// `(method, endpoint, status class)` → requests, as the fake recorded them.
fn fake_counts(linode: &FakeLinode) -> BTreeMap<(String, String, String), f64> {
    let mut out = BTreeMap::new();
    for r in linode.requests() {
        let status = r.status.expect("no request in flight");
        *out.entry((
            r.method.clone(),
            endpoint_template(&r.path),
            status_class(status),
        ))
        .or_default() += 1.0;
    }
    out
}

/// The same from the scrape.
fn scraped_counts(m: &Exposition) -> BTreeMap<(String, String, String), f64> {
    m.series("csi_linode_request_duration_seconds_count")
        .into_iter()
        .map(|(l, v)| {
            (
                (
                    l["method"].clone(),
                    l["endpoint"].clone(),
                    l["status_class"].clone(),
                ),
                v,
            )
        })
        .collect()
}

#[test]
fn rpcs_linode_requests_retries_and_throttles_are_counted() {
    let env = with_metrics().start();
    let addr = metrics_addr(&env.driver);
    let before = scrape(addr);
    assert_eq!(
        before.get("csi_linode_throttled_total", &[("class", "other")]),
        0.0,
        "throttles show at zero before the first"
    );
    let probes_before = before.get(
        "csi_rpc_duration_seconds_count",
        &[("method", "Probe"), ("code", "OK")],
    );

    env.linode
        .inject(FaultRule::rate_limited("GET", "nfs/spaces/*", 0).times(2));
    let volume = env.create_ok("pvc-metrics");
    assert_eq!(err_code(env.delete("")), Code::INVALID_ARGUMENT);
    for _ in 0..3 {
        probe(&env.driver);
    }

    let m = settled(addr);
    let rpc = |method: &str, code: &str| {
        m.value(
            "csi_rpc_duration_seconds_count",
            &[("method", method), ("code", code)],
        )
    };
    assert_eq!(rpc("CreateVolume", "OK"), Some(1.0));
    assert_eq!(rpc("DeleteVolume", "InvalidArgument"), Some(1.0));
    assert_eq!(rpc("Probe", "OK"), Some(probes_before + 3.0));
    assert_eq!(m.get("csi_rpc_parked", &[]), 0.0);

    // Every attempt the fake answered, by method, endpoint and class, and
    // nothing else.
    assert_eq!(scraped_counts(&m), fake_counts(&env.linode));
    let space = [("method", "GET"), ("endpoint", "nfs/spaces/{id}")];
    let mut throttled = space.to_vec();
    throttled.push(("status_class", "4xx"));
    assert_eq!(
        m.get("csi_linode_request_duration_seconds_count", &throttled),
        2.0
    );
    assert_eq!(m.get("csi_linode_request_retries_total", &space), 2.0);
    assert_eq!(
        m.get("csi_linode_throttled_total", &[("class", "other")]),
        2.0
    );
    assert_eq!(
        m.get("csi_linode_throttled_total", &[("class", "list")]),
        0.0
    );
    // No id, name or token reaches a label (the build's revision aside).
    for (name, labels) in m.samples.keys() {
        if name == "csi_build_info" {
            continue;
        }
        for (label, v) in labels.iter().filter(|(l, _)| *l != "le") {
            assert!(
                !v.split('/').any(|seg| seg.parse::<u64>().is_ok()),
                "an id in {name} {label}: {v:?}"
            );
            assert!(
                !v.contains(&env.linode.token()) && !v.contains("pvc-metrics"),
                "{name}: {v:?}"
            );
        }
    }
    assert!(volume.volume_id.starts_with(&format!("{SPACE}/")));

    // The region came from one Kubernetes list of nodes.
    assert_eq!(
        m.get(
            "csi_kubernetes_request_duration_seconds_count",
            &[("request", "list_nodes"), ("status_class", "2xx")]
        ),
        1.0
    );
    assert_eq!(
        m.value(
            "csi_kubernetes_request_errors_total",
            &[("request", "list_nodes")]
        ),
        None
    );
    for kind in ["filesystem", "snapshot", "access_policy"] {
        assert_eq!(m.get("csi_linode_pending_waits", &[("kind", kind)]), 0.0);
    }

    let info = m.series("csi_build_info");
    assert_eq!(info.len(), 1);
    assert_eq!(info[0].1, 1.0);
    assert_eq!(info[0].0["role"], "controller");
    assert_eq!(info[0].0["driver"], "linodenfs.csi.linode.com");
    assert_eq!(info[0].0["version"], env!("CARGO_PKG_VERSION"));
    assert!(m.get("process_resident_memory_bytes", &[]) > 1e6);
    assert!(m.get("process_open_fds", &[]) >= 3.0);
    assert!(m.get("process_start_time_seconds", &[]) > 1.6e9);
}

#[test]
fn a_parked_create_is_a_pending_wait_and_its_wait_is_timed_when_active() {
    let env = with_metrics().start();
    let addr = metrics_addr(&env.driver);
    env.linode
        .set_filesystem_lifecycle("pvc-held", Lifecycle::NeverActive);
    let call = env
        .client
        .create_volume_async_opt(
            &volume_req("pvc-held", &by_id()),
            grpcio::CallOption::default().timeout(PATIENCE),
        )
        .unwrap();
    let mut m = scrape(addr);
    // It parks first on its label lookup, then (after its POST, which a
    // scrape may fall between) on the activation.
    wait_for("the create to park on its filesystem", PATIENCE, || {
        m = scrape(addr);
        m.get("csi_rpc_parked", &[]) == 1.0
            && m.get("csi_linode_pending_waits", &[("kind", "label_lookup")]) == 0.0
            && m.get("csi_linode_pending_waits", &[("kind", "filesystem")]) == 1.0
    });
    assert_eq!(m.get("csi_rpc_in_flight", &[]), 1.0);
    assert_eq!(
        m.value(
            "csi_linode_wait_duration_seconds_count",
            &[("kind", "filesystem")]
        ),
        None
    );

    env.linode
        .set_filesystem_lifecycle("pvc-held", Lifecycle::Normal);
    futures_executor::block_on(call).expect("the held create finishes");
    // The call counts out just after its answer is on its way.
    let m = settled(addr);
    assert_eq!(
        m.get(
            "csi_linode_wait_duration_seconds_count",
            &[("kind", "filesystem")]
        ),
        1.0
    );
    assert!(
        m.get(
            "csi_linode_wait_duration_seconds_sum",
            &[("kind", "filesystem")]
        ) > 0.0
    );
    assert_eq!(
        m.get("csi_linode_pending_waits", &[("kind", "filesystem")]),
        0.0
    );
    assert_eq!(m.get("csi_rpc_parked", &[]), 0.0);
    assert_eq!(
        m.get(
            "csi_rpc_duration_seconds_count",
            &[("method", "CreateVolume"), ("code", "OK")]
        ),
        1.0
    );
}

#[test]
fn the_last_rate_limit_headers_are_reported_by_request_class() {
    let env = with_metrics().start();
    let addr = metrics_addr(&env.driver);
    env.linode.set_rate_limit(Some(RateLimit {
        list: 900,
        other: 1000,
        window: Duration::from_secs(3600),
    }));
    env.linode.clear_requests();
    env.create_ok("pvc-budget");
    env.client
        .list_volumes(&csi::ListVolumesRequest::new())
        .expect("ListVolumes");

    let m = scrape(addr);
    // The limit per class tells the classes apart as the API counts them;
    // each class's remaining budget is what its last answer said.
    assert_eq!(
        m.get("csi_linode_rate_limit_limit", &[("class", "list")]),
        900.0
    );
    assert_eq!(
        m.get("csi_linode_rate_limit_limit", &[("class", "other")]),
        1000.0
    );
    let sent = env.linode.requests().len() as f64;
    let remaining = m.get("csi_linode_rate_limit_remaining", &[("class", "list")])
        + m.get("csi_linode_rate_limit_remaining", &[("class", "other")]);
    assert_eq!(remaining, 1900.0 - sent);
}

#[test]
fn an_unreachable_kubernetes_api_is_counted_as_an_error() {
    let linode =
        FakeLinode::start(Seed::default().with_space(SpaceSeed::new(SPACE, SPACE_LABEL))).unwrap();
    // The controller role's test default: a kubeconfig naming a closed port.
    let driver = Driver::role("controller")
        .env("LINODE_URL", linode.url())
        .env("LINODE_TOKEN", linode.token())
        .env("METRICS_ADDRESS", "127.0.0.1:0")
        .start();
    let addr = metrics_addr(&driver);
    // Without the API server the controller cannot take its Lease: it
    // stands by, and says so.
    let err = driver
        .controller()
        .create_volume(&volume_req("pvc-no-kube", &by_id()))
        .unwrap_err();
    assert_eq!(code_of(&err), Code::UNAVAILABLE, "{err:?}");
    assert!(message_of(&err).contains("standby"), "{err:?}");
    let m = scrape(addr);
    assert!(
        m.get(
            "csi_kubernetes_request_duration_seconds_count",
            &[("request", "get_lease"), ("status_class", "error")]
        ) >= 1.0
    );
    assert!(
        m.get(
            "csi_kubernetes_request_errors_total",
            &[("request", "get_lease")]
        ) >= 1.0
    );
    assert_eq!(
        m.get(
            "csi_rpc_duration_seconds_count",
            &[("method", "CreateVolume"), ("code", "Unavailable")]
        ),
        1.0
    );
}

/// The endpoint's own bound on connections at once.
const CONNECTION_BOUND: usize = 8;

#[test]
fn bad_requests_are_refused_and_never_disturb_rpcs() {
    let driver = Driver::role("node")
        .env("METRICS_ADDRESS", "127.0.0.1:0")
        .start();
    let addr = metrics_addr(&driver);

    // Clients that connect and send nothing take every connection the
    // endpoint serves at once; the RPCs do not notice.
    let idle: Vec<TcpStream> = (0..CONNECTION_BOUND)
        .map(|_| TcpStream::connect(addr).unwrap())
        .collect();
    let refused = exchange(addr, b"GET /metrics HTTP/1.1\r\n\r\n");
    assert_eq!(status_of(&refused), 503, "{refused}");
    for _ in 0..5 {
        probe(&driver);
    }
    driver
        .node()
        .node_get_capabilities(&csi::NodeGetCapabilitiesRequest::new())
        .expect("NodeGetCapabilities while the endpoint is held");
    drop(idle);
    wait_for("the idle connections to be let go", PATIENCE, || {
        status_of(&exchange(addr, b"GET /healthz HTTP/1.1\r\n\r\n")) == 200
    });

    let answer = |raw: &[u8]| {
        let a = exchange(addr, raw);
        (status_of(&a), a)
    };
    let (status, healthz) = answer(b"GET /healthz HTTP/1.0\r\n\r\n");
    assert_eq!(status, 200);
    assert!(healthz.ends_with("\r\n\r\nok"), "{healthz}");
    for raw in [
        &b"GET /nope HTTP/1.1\r\n\r\n"[..],
        b"GET /metrics/x HTTP/1.1\r\n\r\n",
        b"POST /metrics HTTP/1.1\r\nContent-Length: 2\r\n\r\n{}",
        b"DELETE /healthz HTTP/1.1\r\n\r\n",
    ] {
        let (status, a) = answer(raw);
        assert_eq!(status, 404, "{}: {a}", String::from_utf8_lossy(raw));
    }
    for raw in [
        &b"HELLO\r\n\r\n"[..],
        b"GET metrics HTTP/1.1\r\n\r\n",
        b"GET /metrics HTTP/1.1\r\nno colon\r\n\r\n",
        b"\x16\x03\x01\x02\x00\x01\x00\x01\xfc\x03\x03\r\n\r\n",
    ] {
        let (status, a) = answer(raw);
        assert_eq!(status, 400, "{}: {a}", String::from_utf8_lossy(raw));
    }
    let huge = format!(
        "GET /metrics HTTP/1.1\r\nX: {}\r\n\r\n",
        "a".repeat(16 * 1024)
    );
    assert_eq!(answer(huge.as_bytes()).0, 431);
    let body = format!(
        "GET /metrics HTTP/1.1\r\nContent-Length: {}\r\n\r\n",
        1 << 20
    );
    assert_eq!(answer(body.as_bytes()).0, 413);

    // Still serving, RPCs and metrics alike, and every RPC was counted.
    probe(&driver);
    let m = scrape(addr);
    assert!(
        m.get(
            "csi_rpc_duration_seconds_count",
            &[("method", "Probe"), ("code", "OK")]
        ) >= 6.0
    );
    assert_eq!(
        m.get(
            "csi_rpc_duration_seconds_count",
            &[("method", "NodeGetCapabilities"), ("code", "OK")]
        ),
        1.0
    );
    assert_eq!(m.series("csi_build_info")[0].0["role"], "node");
    let mut driver = driver;
    assert!(driver.try_exit().is_none(), "{}", driver.logs());
}

#[test]
fn a_metrics_address_that_cannot_be_bound_stops_startup() {
    let taken = std::net::TcpListener::bind("127.0.0.1:0").unwrap();
    let port = taken.local_addr().unwrap().port();
    let mut driver = Driver::role("node")
        .env("METRICS_ADDRESS", format!("127.0.0.1:{port}"))
        .spawn();
    let status = driver.wait_exit(PATIENCE);
    assert!(!status.success());
    assert!(
        driver.logs().contains(&format!(
            "METRICS_ADDRESS: cannot listen on 127.0.0.1:{port}"
        )),
        "{}",
        driver.logs()
    );
}

const FQDN: &str = "fs-1.nfs.us-east.linode.com:/pvc-1";

#[test]
fn node_mounts_detaches_and_metadata_requests_are_counted() {
    let metadata = FakeMetadata::start(4242, "us-east").unwrap();
    let node = NfsNode::start_configured(
        "2m",
        &[
            ("METRICS_ADDRESS", "127.0.0.1:0"),
            ("METADATA_URL", &metadata.url()),
        ],
    );
    let addr = metrics_addr(&node.driver);
    let outcome = |m: &Exposition, outcome: &str| {
        m.get(
            "csi_node_mount_duration_seconds_count",
            &[("outcome", outcome)],
        )
    };
    let before = scrape(addr);
    for o in ["ok", "failed", "unresolved_host", "timed_out", "not_run"] {
        assert_eq!(outcome(&before, o), 0.0, "{o} shows at zero");
    }
    assert_eq!(
        before.get("csi_node_unmounts_detached_total", &[("reason", "busy")]),
        0.0
    );

    let info = node
        .driver
        .node()
        .node_get_info(&csi::NodeGetInfoRequest::new())
        .unwrap();
    assert_eq!(info.node_id, "4242");

    node.export(FQDN);
    node.export("[2001:db8::1]:/pvc-1");
    let staging = node.kubelet_path("staging");
    let context = [
        ("mount-target", FQDN),
        ("mount-target-ips", "[2001:db8::1]:/pvc-1"),
    ];
    node.stage("1/2", &staging, &context).unwrap();
    let stats = node.stats(&staging).unwrap();
    assert!(!stats.volume_condition.abnormal);

    // A file held open inside the mount makes it busy: detached lazily.
    let held = std::fs::File::create(node.inside(&staging).join("held")).unwrap();
    node.unstage("1/2", &staging).unwrap();
    drop(held);

    // The name does not resolve: the helper fails, the IPv6 target mounts.
    node.control("no-dns", true);
    node.stage("1/3", &staging, &context).unwrap();
    node.unstage("1/3", &staging).unwrap();
    node.control("no-dns", false);
    // mTLS required and the TLS handshake fails.
    node.control("fail-mtls", true);
    let mtls = [("mount-target", FQDN), ("mtls-mode", "required")];
    node.stage("1/4", &staging, &mtls).unwrap_err();

    let m = scrape(addr);
    assert_eq!(node.helper_runs().len(), 4, "{:?}", node.helper_runs());
    assert_eq!(outcome(&m, "ok"), 2.0);
    assert_eq!(outcome(&m, "unresolved_host"), 1.0);
    assert_eq!(outcome(&m, "failed"), 1.0);
    assert_eq!(outcome(&m, "timed_out"), 0.0);
    assert_eq!(
        m.get("csi_node_unmounts_detached_total", &[("reason", "busy")]),
        1.0
    );
    assert_eq!(
        m.get("csi_node_unmounts_detached_total", &[("reason", "timeout")]),
        0.0
    );
    assert_eq!(m.get("csi_node_statvfs_stuck", &[]), 0.0);
    for request in ["token", "instance"] {
        assert_eq!(
            m.get(
                "csi_metadata_request_duration_seconds_count",
                &[("request", request), ("status_class", "2xx")]
            ),
            1.0,
            "{request}"
        );
        assert_eq!(
            m.value("csi_metadata_request_errors_total", &[("request", request)]),
            None
        );
    }
    assert_eq!(
        m.get(
            "csi_rpc_duration_seconds_count",
            &[("method", "NodeStageVolume"), ("code", "Internal")]
        ),
        1.0
    );
    assert_eq!(
        m.get(
            "csi_rpc_duration_seconds_count",
            &[("method", "NodeStageVolume"), ("code", "OK")]
        ),
        2.0
    );
}

#[test]
fn an_unreachable_metadata_service_is_counted_as_an_error() {
    // The node role's test default: METADATA_URL on a closed port.
    let driver = Driver::role("node")
        .env("METRICS_ADDRESS", "127.0.0.1:0")
        .start();
    let addr = metrics_addr(&driver);
    driver
        .node()
        .node_get_info(&csi::NodeGetInfoRequest::new())
        .unwrap_err();
    let m = scrape(addr);
    assert_eq!(
        m.get(
            "csi_metadata_request_duration_seconds_count",
            &[("request", "token"), ("status_class", "error")]
        ),
        1.0
    );
    assert_eq!(
        m.get("csi_metadata_request_errors_total", &[("request", "token")]),
        1.0
    );
}

#[test]
fn the_parser_refuses_what_the_format_forbids() {
    let ok = "# HELP a_total x\n# TYPE a_total counter\na_total{l=\"v\\\"\\n\\\\\"} 1\n";
    assert_eq!(
        Exposition::parse(ok).get("a_total", &[("l", "v\"\n\\")]),
        1.0
    );
    let hist = |b1: &str, inf: &str, count: &str| {
        format!(
            "# HELP h x\n# TYPE h histogram\nh_bucket{{le=\"1\"}} {b1}\nh_bucket{{le=\"+Inf\"}} {inf}\nh_sum 1\nh_count {count}\n"
        )
    };
    Exposition::parse(&hist("1", "2", "2"));
    for bad in [
        "a 1\n".to_string(),
        "# HELP a x\na 1\n".to_string(),
        "# HELP a x\n# TYPE a gauge\na 1\na 2\n".to_string(),
        "# HELP a x\n# TYPE a gauge\na{l=\"\\x\"} 1\n".to_string(),
        "# HELP a x\n# TYPE a gauge\na{l=\"1\",l=\"2\"} 1\n".to_string(),
        "# HELP a x\n# TYPE a gauge\n# HELP b x\n# TYPE b gauge\nb 1\na 1\n".to_string(),
        "# HELP a x\n# TYPE a counter\na -1\n".to_string(),
        "# HELP a x\n# TYPE a gauge\na 1".to_string(),
        hist("3", "2", "2"),
        hist("1", "2", "3"),
        "# HELP h x\n# TYPE h histogram\nh_bucket{le=\"1\"} 1\nh_sum 1\nh_count 1\n".to_string(),
    ] {
        let refused = std::panic::catch_unwind(|| Exposition::parse(&bad)).is_err();
        assert!(refused, "accepted: {bad:?}");
    }
}

#[test]
fn dev_mode_prints_the_metrics_url_and_serves_both_roles() {
    let state = common::TempDir::new("dev-metrics");
    let driver = Driver::builder()
        .arg("dev")
        .prefix(&["unshare", "--mount", "--propagation", "private"])
        .env("DEV_STATE_DIR", state.join("state").display().to_string())
        .env("METRICS_ADDRESS", "127.0.0.1:0")
        .start();
    let addr = metrics_addr(&driver);
    wait_for("the banner", PATIENCE, || {
        driver.stdout().contains("StorageClass:")
    });
    assert!(
        driver
            .stdout()
            .contains(&format!("metrics:       http://{addr}/metrics\n")),
        "{}",
        driver.stdout()
    );
    let mut req = volume_req("pvc-dev-metrics", &[]);
    req.parameters
        .insert(P_SPACE_LABEL.to_string(), "dev-space".to_string());
    driver
        .controller()
        .create_volume(&req)
        .expect("CreateVolume in dev mode");
    let m = settled(addr);
    assert_eq!(m.series("csi_build_info")[0].0["role"], "dev");
    assert_eq!(
        m.get(
            "csi_rpc_duration_seconds_count",
            &[("method", "CreateVolume"), ("code", "OK")]
        ),
        1.0
    );
    assert!(
        m.get(
            "csi_linode_request_duration_seconds_count",
            &[
                ("method", "POST"),
                ("endpoint", "nfs/spaces/{id}/filesystems"),
                ("status_class", "2xx")
            ]
        ) == 1.0
    );
    // Both roles' rare events show at zero.
    assert_eq!(
        m.get(
            "csi_node_mount_duration_seconds_count",
            &[("outcome", "failed")]
        ),
        0.0
    );
    assert_eq!(
        m.get("csi_linode_throttled_total", &[("class", "list")]),
        0.0
    );
}

#[test]
fn dev_rate_limits_put_the_fake_behind_linode_style_budgets() {
    let state = common::TempDir::new("dev-rate-limits");
    // One paginated GET per second: a CreateVolume needs more (the Space by
    // label, the lookup by label), so the budget the fake announces runs out
    // and the client waits for the next window rather than be refused.
    let driver = Driver::builder()
        .arg("dev")
        .prefix(&["unshare", "--mount", "--propagation", "private"])
        .env("DEV_STATE_DIR", state.join("state").display().to_string())
        .env("METRICS_ADDRESS", "127.0.0.1:0")
        .env("DEV_RATE_LIMITS", "list:1,other:50,window:1s")
        .start();
    let addr = metrics_addr(&driver);
    let mut req = volume_req("pvc-dev-limited", &[]);
    req.parameters
        .insert(P_SPACE_LABEL.to_string(), "dev-space".to_string());
    driver
        .controller()
        .create_volume(&req)
        .expect("CreateVolume in dev mode behind the limiter");
    let m = settled(addr);
    assert_eq!(
        m.get("csi_linode_rate_limit_limit", &[("class", "list")]),
        1.0
    );
    // Every paginated answer spent its window's one request.
    assert_eq!(
        m.get("csi_linode_rate_limit_remaining", &[("class", "list")]),
        0.0
    );
    assert_eq!(
        m.get("csi_linode_throttled_total", &[("class", "list")]),
        0.0,
        "the pacer waits out an announced budget instead of spending a 429"
    );
    assert_eq!(
        m.get("csi_linode_rate_limit_limit", &[("class", "other")]),
        50.0
    );
}

#[test]
fn a_hundred_concurrent_creates_on_four_workers_are_admitted_and_their_lookups_share_a_list() {
    // csi-provisioner's 100 workers, each with one call at a time, against
    // the smallest pool that is still a pool.
    let env = with_metrics().env("WORKER_THREADS", "4").start();
    let addr = metrics_addr(&env.driver);
    env.create_ok("warm-caches");
    let before = env.linode.requests().len();
    // The first lookup's list is held: every other create parks its lookup
    // meanwhile, and none holds a worker.
    let gate = env.linode.hang("GET", FS_LIST);
    let calls: Vec<_> = (0..100)
        .map(|i| {
            let client = env.client.clone();
            let req = volume_req(&format!("pvc-{i:03}"), &by_id());
            std::thread::spawn(move || {
                client.create_volume_opt(&req, grpcio::CallOption::default().timeout(PATIENCE))
            })
        })
        .collect();
    assert!(gate.wait_for_hits(1, PATIENCE));
    wait_for("100 parked lookups", PATIENCE, || {
        scrape(addr).get("csi_linode_pending_waits", &[("kind", "label_lookup")]) == 100.0
    });
    assert_eq!(gate.hits(), 1, "the parked lookups sent nothing yet");
    gate.release();
    for (i, call) in calls.into_iter().enumerate() {
        call.join()
            .unwrap()
            .unwrap_or_else(|e| panic!("pvc-{i:03} was not served: {e:?}"));
    }
    assert_eq!(env.live_filesystems().len(), 101, "every filesystem once");
    let lists = env
        .linode
        .requests()
        .into_iter()
        .skip(before)
        .filter(|r| r.method == "GET" && r.path.ends_with("/filesystems"))
        .count();
    // The held lone lookup, one list for the 99 that parked behind it (the
    // whole Space instead, should the filesystems still activating push it
    // past 100 terms), then one shared list per poller tick until all are
    // active (one or two; a few more on a loaded machine): never one per
    // create.
    assert!(lists <= 6, "{lists} lists for the lookups of 100 creates");
}
