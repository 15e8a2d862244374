//! Fake Linode API (the contract's "Fake server checklist", §9): NFS spaces,
//! access policies, filesystems, snapshots, clone, and instance
//! configs/interfaces, served under `/v4beta/` and `/v4/`. Bearer token check,
//! error envelopes, pagination, `X-Filter`, label/region validation and
//! time-driven status machines; fault injection, a request log, inspection
//! helpers, an event hook and optional JSON persistence for `dev` mode.
//! It must model the real service, never shape answers to what a test wants.

use super::rate_limit::{Limiter, RateLimit};
use super::{HttpRequest, HttpResponse, HttpServer};
use crate::linode::types::{unix_to_naive, Filesystem, FilesystemAccessPolicy, Snapshot};
use serde::{Deserialize, Serialize};
use serde_json::{json, Value};
use std::collections::{BTreeMap, VecDeque};
use std::path::{Path, PathBuf};
use std::sync::atomic::{AtomicU64, Ordering};
use std::sync::{Arc, Condvar, Mutex, MutexGuard};
use std::time::{Duration, SystemTime, UNIX_EPOCH};

const MAX_LABEL_BYTES: usize = 63;
const DEFAULT_PAGE_SIZE: usize = 100;
/// The request log keeps the newest entries only, so a long `dev` run stays small.
const REQUEST_LOG_CAP: usize = 10_000;
const DEFAULT_MAX_FILE_COUNT: i64 = 2_000_000;
const SNAPSHOT_SIZE_BYTES: i64 = 4_194_304;

fn default_token() -> String {
    "fake-linode-token".to_string()
}

fn default_regions() -> Vec<String> {
    ["us-east", "us-ord", "us-sea", "fr-par", "jp-osa"]
        .iter()
        .map(|r| r.to_string())
        .collect()
}

fn default_squash() -> String {
    "root_squash".to_string()
}

fn default_mtls() -> String {
    "disabled".to_string()
}

fn default_space_capacity() -> i64 {
    5 * (1 << 40)
}

/// A space to start with.
#[derive(Debug, Clone, PartialEq, Eq, Serialize, Deserialize)]
#[serde(deny_unknown_fields)]
pub struct SpaceSeed {
    pub id: u64,
    pub label: String,
    /// Space access policy `mtls_mode` (default `disabled`).
    #[serde(default = "default_mtls")]
    pub mtls_mode: String,
    /// The space access-policy endpoint answers 404 (backends without it).
    #[serde(default)]
    pub policy_missing: bool,
    #[serde(default)]
    pub tags: Vec<String>,
    #[serde(default = "default_space_capacity")]
    pub max_capacity_bytes: i64,
}

impl SpaceSeed {
    pub fn new(id: u64, label: &str) -> SpaceSeed {
        SpaceSeed {
            id,
            label: label.to_string(),
            mtls_mode: default_mtls(),
            policy_missing: false,
            tags: Vec::new(),
            max_capacity_bytes: default_space_capacity(),
        }
    }
}

/// One VPC interface of an instance.
#[derive(Debug, Clone, PartialEq, Eq, Serialize, Deserialize)]
#[serde(deny_unknown_fields)]
pub struct VpcAttachment {
    pub vpc_id: u64,
    pub subnet_id: u64,
    #[serde(default)]
    pub address: Option<String>,
}

/// A Linode instance to start with. With `interface_generation` `"linode"`
/// its VPCs show under `/interfaces`, otherwise (`legacy_config` or absent)
/// under `/configs`.
#[derive(Debug, Clone, PartialEq, Eq, Serialize, Deserialize)]
#[serde(deny_unknown_fields)]
pub struct InstanceSeed {
    pub id: u64,
    pub label: String,
    pub region: String,
    #[serde(default)]
    pub interface_generation: Option<String>,
    #[serde(default)]
    pub ipv6: Option<String>,
    #[serde(default)]
    pub vpcs: Vec<VpcAttachment>,
}

/// The readable starting point of a scenario (JSON, see [`Seed::from_json`]).
#[derive(Debug, Clone, PartialEq, Eq, Serialize, Deserialize)]
#[serde(deny_unknown_fields)]
pub struct Seed {
    #[serde(default = "default_token")]
    pub token: String,
    /// Regions where NFS may be created.
    #[serde(default = "default_regions")]
    pub regions: Vec<String>,
    #[serde(default)]
    pub spaces: Vec<SpaceSeed>,
    #[serde(default)]
    pub instances: Vec<InstanceSeed>,
    /// Time from create/clone/policy PUT to `active` (0 = active at the next read).
    #[serde(default)]
    pub activation_delay_ms: u64,
    /// Time an object stays `deleting` before it is gone (0 = gone at the next read).
    #[serde(default)]
    pub deletion_delay_ms: u64,
    /// New filesystem policies get this `squash_policy`.
    #[serde(default = "default_squash")]
    pub default_squash_policy: String,
    /// Reject a second filesystem with the same label in a space (400).
    #[serde(default)]
    pub unique_filesystem_labels: bool,
}

impl Default for Seed {
    fn default() -> Seed {
        Seed {
            token: default_token(),
            regions: default_regions(),
            spaces: Vec::new(),
            instances: Vec::new(),
            activation_delay_ms: 0,
            deletion_delay_ms: 0,
            default_squash_policy: default_squash(),
            unique_filesystem_labels: false,
        }
    }
}

impl Seed {
    pub fn from_json(json: &str) -> crate::Result<Seed> {
        serde_json::from_str(json)
            .map_err(|e| crate::Error::InvalidArgument(format!("fake Linode seed: {e}")))
    }

    pub fn with_space(mut self, space: SpaceSeed) -> Seed {
        self.spaces.push(space);
        self
    }

    pub fn with_instance(mut self, instance: InstanceSeed) -> Seed {
        self.instances.push(instance);
        self
    }
}

/// How a matching object moves through its status machine.
#[derive(Debug, Clone, Copy, PartialEq, Eq, Serialize, Deserialize)]
pub enum Lifecycle {
    Normal,
    /// Turns `error` instead of `active`.
    StickInError,
    /// Stays `creating` / `updating` forever.
    NeverActive,
    /// Filesystems only: `active` with `mount_target_ips` but a null
    /// `mount_target_fqdn` (exercises the IPv6 mount source).
    ActiveWithoutFqdn,
    /// Filesystems only: `active` but no mount target at all.
    ActiveWithoutMountTarget,
}

/// Which timestamps a snapshot shows. The contract lets `created` be null,
/// and a client must still be able to date the snapshot (or skip it).
#[derive(Debug, Clone, Copy, Default, PartialEq, Eq, Serialize, Deserialize)]
pub enum SnapshotTimes {
    #[default]
    Both,
    /// `created` is null; `updated` is shown.
    NoCreated,
    /// `created` and `updated` are both null.
    Neither,
}

/// What a filesystem access-policy PUT does with omitted fields.
#[derive(Debug, Clone, Copy, PartialEq, Eq, Serialize, Deserialize)]
pub enum PolicyPut {
    /// Omitted fields reset to defaults (the real API, per the driver).
    FullReplace,
    /// Omitted fields keep their value.
    Merge,
}

/// Something dev mode mirrors on disk. Export paths look like `/<label>-<hex id>`.
#[derive(Debug, Clone, PartialEq, Eq)]
pub enum FakeEvent {
    FilesystemActive {
        space_id: u64,
        filesystem_id: u64,
        export: String,
        source_snapshot_id: Option<u64>,
    },
    SnapshotCreated {
        space_id: u64,
        filesystem_id: u64,
        snapshot_id: u64,
        source_export: String,
    },
    CloneCreated {
        snapshot_id: u64,
        space_id: u64,
        filesystem_id: u64,
        export: String,
    },
    FilesystemDeleted {
        space_id: u64,
        filesystem_id: u64,
        export: String,
    },
    SnapshotDeleted {
        snapshot_id: u64,
    },
}

type Observer = Arc<dyn Fn(&FakeEvent) + Send + Sync>;

/// One request as the fake saw it (the token itself is never kept).
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct RequestRecord {
    pub method: String,
    /// Path after the API version, e.g. `nfs/spaces/7/filesystems`.
    pub path: String,
    /// API version segment, e.g. `v4beta`.
    pub version: String,
    pub query: String,
    pub body: String,
    pub authorized: bool,
    pub user_agent: Option<String>,
    pub content_type: Option<String>,
    pub accept: Option<String>,
    pub x_filter: Option<String>,
    /// Status answered; `None` while the request is in flight.
    pub status: Option<u16>,
}

impl RequestRecord {
    /// Parsed JSON body (`Null` when empty or not JSON).
    pub fn json(&self) -> Value {
        serde_json::from_str(&self.body).unwrap_or(Value::Null)
    }
}

#[derive(Debug, Clone)]
enum FaultAction {
    Status {
        status: u16,
        reason: String,
        headers: Vec<(String, String)>,
        html: bool,
    },
    Latency(Duration),
    Hang(u64),
    FailAfter {
        status: u16,
    },
}

/// A programmed misbehaviour for requests matching method + path pattern.
///
/// Patterns are matched against the path after the version, segment by
/// segment: `*` is one segment, a final `**` any rest, e.g.
/// `nfs/spaces/*/filesystems`. Method `*` matches any method.
#[derive(Debug, Clone)]
pub struct FaultRule {
    method: String,
    pattern: String,
    action: FaultAction,
    /// `None`: every matching request.
    remaining: Option<u32>,
}

impl FaultRule {
    fn new(method: &str, pattern: &str, action: FaultAction) -> FaultRule {
        FaultRule {
            method: method.to_ascii_uppercase(),
            pattern: pattern.trim_matches('/').to_string(),
            action,
            remaining: None,
        }
    }

    /// Answer `status` with a Linode error envelope.
    pub fn status(method: &str, pattern: &str, status: u16) -> FaultRule {
        let reason = match status {
            429 => "Too many requests",
            500 => "Internal Server Error",
            502 => "Bad Gateway",
            503 => "Service Unavailable",
            504 => "Gateway Timeout",
            _ => "Injected failure",
        };
        let headers = if status == 429 {
            vec![("X-Ratelimit-Limit".to_string(), "800".to_string())]
        } else {
            Vec::new()
        };
        FaultRule::new(
            method,
            pattern,
            FaultAction::Status {
                status,
                reason: reason.to_string(),
                headers,
                html: false,
            },
        )
    }

    /// 429 with `Retry-After: <secs>` and `X-Ratelimit-Limit`.
    pub fn rate_limited(method: &str, pattern: &str, retry_after_secs: u64) -> FaultRule {
        FaultRule::status(method, pattern, 429).header("Retry-After", &retry_after_secs.to_string())
    }

    /// 503 with `X-Maintenance-Mode: true` (not worth retrying).
    pub fn maintenance(method: &str, pattern: &str) -> FaultRule {
        FaultRule::status(method, pattern, 503).header("X-Maintenance-Mode", "true")
    }

    /// 400 `Linode busy.` (transient by the contract).
    pub fn busy(method: &str, pattern: &str) -> FaultRule {
        FaultRule::status(method, pattern, 400).reason("Linode busy.")
    }

    /// Delay matching requests, then serve them normally.
    pub fn latency(method: &str, pattern: &str, delay: Duration) -> FaultRule {
        FaultRule::new(method, pattern, FaultAction::Latency(delay))
    }

    /// Perform the request's side effect, then answer `status` anyway (the
    /// create happened but the client saw a failure).
    pub fn fail_after(method: &str, pattern: &str, status: u16) -> FaultRule {
        FaultRule::new(method, pattern, FaultAction::FailAfter { status })
    }

    /// Only the next `n` matching requests.
    pub fn times(mut self, n: u32) -> FaultRule {
        self.remaining = Some(n);
        self
    }

    /// Replace the error reason of a status rule.
    pub fn reason(mut self, text: &str) -> FaultRule {
        if let FaultAction::Status { reason, .. } = &mut self.action {
            *reason = text.to_string();
        }
        self
    }

    /// Answer a status rule with an HTML page instead of the JSON envelope
    /// (a proxy's 502; with status 200, an undecodable success).
    pub fn html(mut self) -> FaultRule {
        if let FaultAction::Status { html, .. } = &mut self.action {
            *html = true;
        }
        self
    }

    /// Add a response header to a status rule.
    pub fn header(mut self, name: &str, value: &str) -> FaultRule {
        if let FaultAction::Status { headers, .. } = &mut self.action {
            headers.push((name.to_string(), value.to_string()));
        }
        self
    }

    fn matches(&self, method: &str, path: &str) -> bool {
        (self.method == "*" || self.method == method) && path_matches(&self.pattern, path)
    }
}

fn path_matches(pattern: &str, path: &str) -> bool {
    let mut want = pattern.split('/');
    let mut got = path.trim_matches('/').split('/');
    loop {
        match (want.next(), got.next()) {
            (Some("**"), _) => return true,
            (Some(w), Some(g)) if w == "*" || w == g => {}
            (None, None) => return true,
            _ => return false,
        }
    }
}

/// Random transient failures for `dev` mode: each request independently gets
/// one of the listed statuses with its probability (429 carries `Retry-After: 1`).
#[derive(Debug, Clone, PartialEq)]
pub struct FaultProfile {
    entries: Vec<(u16, f64)>,
}

impl FaultProfile {
    /// `"429:0.1,503:0.05"`; probabilities in [0, 1] adding up to at most 1.
    pub fn parse(spec: &str) -> crate::Result<FaultProfile> {
        let bad = |m: String| crate::Error::InvalidArgument(format!("fault profile {spec:?}: {m}"));
        let mut entries = Vec::new();
        for part in spec.split(',').map(str::trim).filter(|p| !p.is_empty()) {
            let (code, p) = part
                .split_once(':')
                .ok_or_else(|| bad(format!("{part:?} is not STATUS:PROBABILITY")))?;
            let code: u16 = code
                .trim()
                .parse()
                .ok()
                .filter(|c| (400..=599).contains(c))
                .ok_or_else(|| bad(format!("{code:?} is not an HTTP error status")))?;
            let p: f64 = p
                .trim()
                .parse()
                .ok()
                .filter(|p: &f64| (0.0..=1.0).contains(p))
                .ok_or_else(|| bad(format!("{p:?} is not a probability")))?;
            entries.push((code, p));
        }
        if entries.iter().map(|(_, p)| p).sum::<f64>() > 1.0 + 1e-9 {
            return Err(bad("probabilities add up to more than 1".to_string()));
        }
        Ok(FaultProfile { entries })
    }

    fn pick(&self, roll: f64) -> Option<u16> {
        let mut acc = 0.0;
        for (code, p) in &self.entries {
            acc += p;
            if roll < acc {
                return Some(*code);
            }
        }
        None
    }
}

/// A "hang until released" fault. Matching requests block until
/// [`Hang::release`] (or until the fake is dropped), then are served normally.
pub struct Hang {
    id: u64,
    gates: Arc<Gates>,
}

impl Hang {
    /// Let every held and future matching request through.
    pub fn release(&self) {
        self.gates.release(self.id);
    }

    /// Requests that reached this gate so far (held or released).
    pub fn hits(&self) -> usize {
        self.gates.lock().get(&self.id).map_or(0, |g| g.hits)
    }

    /// Blocks until `n` requests reached the gate; false after `limit`.
    pub fn wait_for_hits(&self, n: usize, limit: Duration) -> bool {
        let guard = self.gates.lock();
        let (guard, _) = self
            .gates
            .changed
            .wait_timeout_while(guard, limit, |g| g.get(&self.id).map_or(0, |g| g.hits) < n)
            .unwrap_or_else(|p| p.into_inner());
        guard.get(&self.id).map_or(0, |g| g.hits) >= n
    }
}

#[derive(Default)]
struct Gate {
    released: bool,
    hits: usize,
}

#[derive(Default)]
struct Gates {
    gates: Mutex<BTreeMap<u64, Gate>>,
    changed: Condvar,
}

impl Gates {
    fn lock(&self) -> MutexGuard<'_, BTreeMap<u64, Gate>> {
        self.gates.lock().unwrap_or_else(|p| p.into_inner())
    }

    fn release(&self, id: u64) {
        if let Some(g) = self.lock().get_mut(&id) {
            g.released = true;
        }
        self.changed.notify_all();
    }

    fn release_all(&self) {
        for g in self.lock().values_mut() {
            g.released = true;
        }
        self.changed.notify_all();
    }

    fn pass(&self, id: u64) {
        let mut gates = self.lock();
        gates.entry(id).or_default().hits += 1;
        self.changed.notify_all();
        let _held = self
            .changed
            .wait_while(gates, |g| !g.get(&id).is_some_and(|g| g.released))
            .unwrap_or_else(|p| p.into_inner());
    }
}

#[derive(Debug, Clone, Serialize, Deserialize)]
struct SpaceRec {
    id: u64,
    label: String,
    mtls_mode: String,
    policy_missing: bool,
    tags: Vec<String>,
    max_capacity_bytes: i64,
    created: i64,
}

#[derive(Debug, Clone, Copy, PartialEq, Eq, Serialize, Deserialize)]
enum Phase {
    Creating,
    Active,
    Error,
    Deleting,
}

#[derive(Debug, Clone, Serialize, Deserialize)]
struct PolicyRec {
    label: String,
    enabled: bool,
    linode_ids: Vec<u64>,
    squash_policy: String,
    protocols: Vec<String>,
    /// `updating` until this time (ms), `None` once settled.
    updating_until: Option<u64>,
    /// Settled outcome when `updating_until` is `None`.
    error: bool,
    created: i64,
    updated: Option<i64>,
}

#[derive(Debug, Clone, Serialize, Deserialize)]
struct FsRec {
    id: u64,
    space_id: u64,
    label: String,
    region: String,
    tags: Vec<String>,
    max_capacity_bytes: i64,
    source_snapshot_id: Option<u64>,
    phase: Phase,
    /// Creating → settled, or Deleting → gone, at this time (ms).
    transition_at: u64,
    /// Mount targets are shown (set on activation).
    mount_targets: bool,
    /// A lifecycle hid the FQDN / the IPs.
    hide_fqdn: bool,
    hide_ips: bool,
    created: i64,
    updated: i64,
    policy: PolicyRec,
}

#[derive(Debug, Clone, Serialize, Deserialize)]
struct SnapRec {
    id: u64,
    filesystem_id: u64,
    space_id: u64,
    label: String,
    phase: Phase,
    transition_at: u64,
    locked: bool,
    created: i64,
    /// The last status change (seconds); `None` in state files that predate it.
    #[serde(default)]
    updated: Option<i64>,
    #[serde(default)]
    times: SnapshotTimes,
}

/// Everything that survives a restart when a state file is used.
#[derive(Debug, Clone, Serialize, Deserialize)]
struct State {
    regions: Vec<String>,
    activation_delay_ms: u64,
    deletion_delay_ms: u64,
    default_squash_policy: String,
    unique_filesystem_labels: bool,
    page_size: Option<usize>,
    policy_put: PolicyPut,
    snapshot_duplicate_status: u16,
    locked_delete_status: u16,
    interfaces_paginated: bool,
    /// An API revision that cannot filter filesystems by `id`.
    #[serde(default)]
    no_filesystem_id_filter: bool,
    spaces: BTreeMap<u64, SpaceRec>,
    instances: BTreeMap<u64, InstanceSeed>,
    filesystems: BTreeMap<u64, FsRec>,
    snapshots: BTreeMap<u64, SnapRec>,
    next_filesystem_id: u64,
    next_snapshot_id: u64,
    filesystem_lifecycles: BTreeMap<String, Lifecycle>,
    snapshot_lifecycles: BTreeMap<String, Lifecycle>,
    policy_lifecycles: BTreeMap<u64, Lifecycle>,
}

fn now_ms() -> u64 {
    SystemTime::now()
        .duration_since(UNIX_EPOCH)
        .map(|d| d.as_millis() as u64)
        .unwrap_or(0)
}

fn now_secs() -> i64 {
    (now_ms() / 1000) as i64
}

fn ts(secs: i64) -> Value {
    json!(unix_to_naive(secs))
}

fn export_path(label: &str, id: u64) -> String {
    format!("/{label}-{id:x}")
}

/// A validation or lookup failure: status + `(field, reason)` items.
struct ApiError {
    status: u16,
    errors: Vec<(Option<String>, String)>,
}

impl ApiError {
    fn new(status: u16, field: Option<&str>, reason: &str) -> ApiError {
        ApiError {
            status,
            errors: vec![(field.map(str::to_string), reason.to_string())],
        }
    }

    fn not_found() -> ApiError {
        ApiError::new(404, None, "Not found")
    }

    fn bad(field: &str, reason: &str) -> ApiError {
        ApiError::new(400, Some(field), reason)
    }

    fn response(&self) -> HttpResponse {
        error_response(self.status, &self.errors)
    }
}

fn error_response(status: u16, errors: &[(Option<String>, String)]) -> HttpResponse {
    let items: Vec<Value> = errors
        .iter()
        .map(|(field, reason)| match field {
            Some(f) => json!({"reason": reason, "field": f}),
            None => json!({"reason": reason}),
        })
        .collect();
    HttpResponse::json(status, &json!({ "errors": items }))
}

type ApiResult = Result<Value, ApiError>;

fn validate_label(value: Option<&Value>, errors: &mut Vec<(Option<String>, String)>) {
    let field = Some("label".to_string());
    match value.and_then(Value::as_str) {
        None => errors.push((field, "label is required".to_string())),
        Some(l) if l.is_empty() || l.len() > MAX_LABEL_BYTES => {
            errors.push((field, "Length must be 1-63 characters".to_string()))
        }
        Some(l)
            if !l
                .bytes()
                .all(|b| b.is_ascii_lowercase() || b.is_ascii_digit() || b"-_.".contains(&b)) =>
        {
            errors.push((
                field,
                "Must only use lowercase ASCII letters, numbers, hyphens, underscores and periods"
                    .to_string(),
            ))
        }
        Some(_) => {}
    }
}

fn string_list(value: Option<&Value>) -> Option<Vec<String>> {
    match value {
        None | Some(Value::Null) => Some(Vec::new()),
        Some(Value::Array(items)) => items
            .iter()
            .map(|v| v.as_str().map(str::to_string))
            .collect(),
        Some(_) => None,
    }
}

impl State {
    fn from_seed(seed: &Seed) -> State {
        let created = now_secs();
        State {
            regions: seed.regions.clone(),
            activation_delay_ms: seed.activation_delay_ms,
            deletion_delay_ms: seed.deletion_delay_ms,
            default_squash_policy: seed.default_squash_policy.clone(),
            unique_filesystem_labels: seed.unique_filesystem_labels,
            page_size: None,
            policy_put: PolicyPut::FullReplace,
            snapshot_duplicate_status: 409,
            locked_delete_status: 409,
            interfaces_paginated: false,
            no_filesystem_id_filter: false,
            spaces: seed
                .spaces
                .iter()
                .map(|s| (s.id, SpaceRec::from_seed(s, created)))
                .collect(),
            instances: seed.instances.iter().map(|i| (i.id, i.clone())).collect(),
            filesystems: BTreeMap::new(),
            snapshots: BTreeMap::new(),
            next_filesystem_id: 101,
            next_snapshot_id: 9001,
            filesystem_lifecycles: BTreeMap::new(),
            snapshot_lifecycles: BTreeMap::new(),
            policy_lifecycles: BTreeMap::new(),
        }
    }

    /// Moves every status machine to `now`; returns whether anything changed.
    fn advance(&mut self, now: u64, events: &mut Vec<FakeEvent>) -> bool {
        let mut changed = false;
        let mut gone = Vec::new();
        for fs in self.filesystems.values_mut() {
            if fs.phase == Phase::Creating && now >= fs.transition_at {
                let lifecycle = self.filesystem_lifecycles.get(&fs.label).copied();
                match lifecycle.unwrap_or(Lifecycle::Normal) {
                    Lifecycle::NeverActive => {}
                    Lifecycle::StickInError => {
                        fs.phase = Phase::Error;
                        changed = true;
                    }
                    lifecycle => {
                        fs.phase = Phase::Active;
                        fs.mount_targets = true;
                        fs.hide_fqdn = matches!(
                            lifecycle,
                            Lifecycle::ActiveWithoutFqdn | Lifecycle::ActiveWithoutMountTarget
                        );
                        fs.hide_ips = lifecycle == Lifecycle::ActiveWithoutMountTarget;
                        fs.updated = (now / 1000) as i64;
                        events.push(FakeEvent::FilesystemActive {
                            space_id: fs.space_id,
                            filesystem_id: fs.id,
                            export: export_path(&fs.label, fs.id),
                            source_snapshot_id: fs.source_snapshot_id,
                        });
                        changed = true;
                    }
                }
            } else if fs.phase == Phase::Deleting && now >= fs.transition_at {
                gone.push(fs.id);
            }
            if let Some(until) = fs.policy.updating_until {
                let lifecycle = self.policy_lifecycles.get(&fs.id).copied();
                let lifecycle = lifecycle.unwrap_or(Lifecycle::Normal);
                if now >= until && lifecycle != Lifecycle::NeverActive {
                    fs.policy.updating_until = None;
                    fs.policy.error = lifecycle == Lifecycle::StickInError;
                    changed = true;
                }
            }
        }
        for id in gone {
            self.filesystems.remove(&id);
            self.snapshots.retain(|_, s| s.filesystem_id != id);
            changed = true;
        }
        let mut gone_snaps = Vec::new();
        for snap in self.snapshots.values_mut() {
            if snap.phase == Phase::Creating && now >= snap.transition_at {
                let lifecycle = self.snapshot_lifecycles.get(&snap.label).copied();
                match lifecycle.unwrap_or(Lifecycle::Normal) {
                    Lifecycle::NeverActive => {}
                    Lifecycle::StickInError => {
                        snap.phase = Phase::Error;
                        snap.updated = Some((now / 1000) as i64);
                        changed = true;
                    }
                    _ => {
                        snap.phase = Phase::Active;
                        snap.updated = Some((now / 1000) as i64);
                        changed = true;
                    }
                }
            } else if snap.phase == Phase::Deleting && now >= snap.transition_at {
                gone_snaps.push(snap.id);
            }
        }
        for id in gone_snaps {
            self.snapshots.remove(&id);
            changed = true;
        }
        changed
    }

    fn space(&self, id: u64) -> Result<&SpaceRec, ApiError> {
        self.spaces.get(&id).ok_or_else(ApiError::not_found)
    }

    /// A filesystem addressed under the wrong space is 404 too.
    fn filesystem(&self, space_id: u64, fs_id: u64) -> Result<&FsRec, ApiError> {
        self.space(space_id)?;
        self.filesystems
            .get(&fs_id)
            .filter(|f| f.space_id == space_id)
            .ok_or_else(ApiError::not_found)
    }

    fn snapshot(&self, space_id: u64, fs_id: u64, snap_id: u64) -> Result<&SnapRec, ApiError> {
        self.filesystem(space_id, fs_id)?;
        self.snapshots
            .get(&snap_id)
            .filter(|s| s.filesystem_id == fs_id)
            .ok_or_else(ApiError::not_found)
    }

    fn space_json(&self, s: &SpaceRec) -> Value {
        json!({
            "id": s.id, "label": s.label, "description": null, "status": "active",
            "max_capacity_bytes": s.max_capacity_bytes, "used_capacity_bytes": 0,
            "created": ts(s.created), "updated": ts(s.created), "tags": s.tags
        })
    }

    fn space_policy_json(&self, s: &SpaceRec) -> Value {
        json!({
            "space_id": s.id, "label": s.label, "enabled": false, "vpc_acl": [],
            "mtls_ca_cert": null, "mtls_mode": s.mtls_mode, "status": "active",
            "created": ts(s.created), "updated": null
        })
    }

    fn fs_json(&self, f: &FsRec) -> Value {
        let status = match f.phase {
            Phase::Creating => "creating",
            Phase::Active => "active",
            Phase::Error => "error",
            Phase::Deleting => "deleting",
        };
        let export = export_path(&f.label, f.id);
        let space_label = self
            .spaces
            .get(&f.space_id)
            .map_or("space", |s| s.label.as_str());
        let (fqdn, ips) = if f.mount_targets {
            let fqdn = format!("{space_label}.nfs.{}.example:{export}", f.region);
            let ip = format!("[2001:db8::{:x}]:{export}", f.id);
            (
                (!f.hide_fqdn).then_some(fqdn),
                if f.hide_ips { vec![] } else { vec![ip] },
            )
        } else {
            (None, vec![])
        };
        let stats = if f.mount_targets {
            json!({"used_capacity_bytes": 0, "used_file_count": 1, "collected_at": ts(f.updated)})
        } else {
            json!({"used_capacity_bytes": null, "used_file_count": null, "collected_at": null})
        };
        json!({
            "id": f.id, "space_id": f.space_id, "label": f.label, "region": f.region,
            "protocol_versions": ["nfsv4"], "status": status,
            "mount_target_ips": ips, "mount_target_fqdn": fqdn,
            "max_capacity_bytes": f.max_capacity_bytes, "max_file_count": DEFAULT_MAX_FILE_COUNT,
            "snapshot_usage_bytes": if f.mount_targets { json!(0) } else { Value::Null },
            "ldap_config_id": null, "source_snapshot_id": f.source_snapshot_id,
            "created": ts(f.created), "updated": ts(f.updated), "tags": f.tags, "stats": stats
        })
    }

    fn fs_policy_json(&self, f: &FsRec) -> Value {
        let p = &f.policy;
        let status = match (p.updating_until, p.error) {
            (Some(_), _) => "updating",
            (None, true) => "error",
            (None, false) => "active",
        };
        let acl: Vec<Value> = p
            .linode_ids
            .iter()
            .map(|id| {
                let inst = self.instances.get(id);
                json!({
                    "id": id,
                    "label": inst.map(|i| i.label.clone()),
                    "url": format!("/v4/linode/instances/{id}"),
                    "ipv6": inst.and_then(|i| i.ipv6.as_ref())
                        .map(|v| v.split('/').next().unwrap_or(v).to_string())
                })
            })
            .collect();
        json!({
            "filesystem_id": f.id, "label": p.label, "enabled": p.enabled, "linode_acl": acl,
            "squash_policy": p.squash_policy, "protocols": p.protocols, "status": status,
            "created": ts(p.created), "updated": p.updated.map(ts)
        })
    }

    fn snap_json(&self, s: &SnapRec) -> Value {
        let (status, size) = match s.phase {
            Phase::Creating => ("creating", 0),
            Phase::Active => ("active", SNAPSHOT_SIZE_BYTES),
            Phase::Error => ("error", 0),
            Phase::Deleting => ("deleting", SNAPSHOT_SIZE_BYTES),
        };
        let (created, updated) = match s.times {
            SnapshotTimes::Both => (ts(s.created), s.updated.map(ts).into()),
            SnapshotTimes::NoCreated => (Value::Null, s.updated.map(ts).into()),
            SnapshotTimes::Neither => (Value::Null, Value::Null),
        };
        json!({
            "id": s.id, "filesystem_id": s.filesystem_id, "space_id": s.space_id,
            "label": s.label, "status": status, "created": created, "updated": updated,
            "expiration": null,
            "locked": s.locked, "source": "manual", "policy_id": null,
            "size_bytes": size, "aggregated_size_bytes": size, "tags": []
        })
    }

    fn instance_json(&self, i: &InstanceSeed) -> Value {
        let mut v = json!({
            "id": i.id, "label": i.label, "region": i.region, "status": "running",
            "type": "g6-standard-4", "ipv4": ["192.0.2.1"], "ipv6": i.ipv6,
            "tags": [], "lke_cluster_id": null
        });
        if let Some(g) = &i.interface_generation {
            v["interface_generation"] = json!(g);
        }
        v
    }

    fn uses_linode_interfaces(i: &InstanceSeed) -> bool {
        i.interface_generation.as_deref() == Some("linode")
    }

    fn configs_json(&self, i: &InstanceSeed) -> Vec<Value> {
        let mut interfaces = vec![json!({
            "id": 1, "purpose": "public", "primary": false, "active": true,
            "vpc_id": null, "subnet_id": null, "label": null, "ipam_address": null,
            "ipv4": null, "ipv6": null, "ip_ranges": null
        })];
        if !State::uses_linode_interfaces(i) {
            for (n, v) in i.vpcs.iter().enumerate() {
                interfaces.push(json!({
                    "id": n + 2, "purpose": "vpc", "primary": n == 0, "active": true,
                    "vpc_id": v.vpc_id, "subnet_id": v.subnet_id, "label": null,
                    "ipam_address": null,
                    "ipv4": {"vpc": v.address.clone().unwrap_or_else(|| "10.0.0.2".into()),
                             "nat_1_1": null},
                    "ipv6": null, "ip_ranges": []
                }));
            }
        }
        vec![json!({
            "id": 70_000 + i.id % 10_000, "label": "boot-config", "kernel": "linode/grub2",
            "root_device": "/dev/sda", "interfaces": interfaces
        })]
    }

    fn interfaces_json(&self, i: &InstanceSeed) -> Vec<Value> {
        if !State::uses_linode_interfaces(i) {
            return Vec::new();
        }
        i.vpcs
            .iter()
            .enumerate()
            .map(|(n, v)| {
                json!({
                    "id": 880 + n as u64, "version": 1, "mac_address": "22:00:AB:CD:EF:10",
                    "default_route": {"ipv4": n == 0, "ipv6": n == 0},
                    "public": null, "vlan": null,
                    "vpc": {"vpc_id": v.vpc_id, "subnet_id": v.subnet_id,
                            "ipv4": {"addresses": [{"address": v.address.clone()
                                .unwrap_or_else(|| "10.0.0.2".into()), "primary": true,
                                "nat_1_1_address": null}], "ranges": []}}
                })
            })
            .collect()
    }
}

impl SpaceRec {
    fn from_seed(s: &SpaceSeed, created: i64) -> SpaceRec {
        SpaceRec {
            id: s.id,
            label: s.label.clone(),
            mtls_mode: s.mtls_mode.clone(),
            policy_missing: s.policy_missing,
            tags: s.tags.clone(),
            max_capacity_bytes: s.max_capacity_bytes,
            created,
        }
    }
}

/// `{data, page, pages, results}` of `items` for the request's paging.
fn paginate(items: Vec<Value>, req: &HttpRequest, forced: Option<usize>) -> ApiResult {
    let page_size = match req.query_param("page_size") {
        Some(s) => match s.parse::<usize>() {
            Ok(n) if (25..=500).contains(&n) => n,
            _ => return Err(ApiError::bad("page_size", "Must be 25-500")),
        },
        None => DEFAULT_PAGE_SIZE,
    };
    let page_size = forced.unwrap_or(page_size).max(1);
    let page = match req.query_param("page") {
        Some(s) => match s.parse::<usize>() {
            Ok(n) if n >= 1 => n,
            _ => return Err(ApiError::bad("page", "Must be a positive integer")),
        },
        None => 1,
    };
    let results = items.len();
    let pages = results.div_ceil(page_size).max(1);
    let data: Vec<Value> = items
        .into_iter()
        .skip((page - 1).saturating_mul(page_size))
        .take(page_size)
        .collect();
    Ok(json!({"data": data, "page": page, "pages": pages, "results": results}))
}

/// Applies an `X-Filter` header: equality on `allowed` keys, `+and`/`+or`,
/// simple operators, `+order_by`/`+order`. Anything else is 400 like the API.
fn apply_filter(
    items: Vec<Value>,
    header: Option<&str>,
    allowed: &[&str],
) -> Result<Vec<Value>, ApiError> {
    let Some(raw) = header else {
        return Ok(items);
    };
    let bad = |reason: String| ApiError::new(400, Some("X-Filter"), &reason);
    let filter: Value =
        serde_json::from_str(raw).map_err(|_| bad("Invalid JSON in X-Filter".to_string()))?;
    let Value::Object(obj) = &filter else {
        return Err(bad("X-Filter must be an object".to_string()));
    };
    // Validate once (an unmatched item must not hide an invalid key).
    check_filter(obj, allowed).map_err(bad)?;
    let mut out: Vec<Value> = items
        .into_iter()
        .filter(|i| filter_matches(obj, i))
        .collect();
    if let Some(key) = obj.get("+order_by").and_then(Value::as_str) {
        let desc = obj.get("+order").and_then(Value::as_str) == Some("desc");
        out.sort_by(|a, b| {
            let ord = compare(&a[key], &b[key]).unwrap_or(std::cmp::Ordering::Equal);
            if desc {
                ord.reverse()
            } else {
                ord
            }
        });
    }
    Ok(out)
}

const OPERATORS: [&str; 7] = ["+eq", "+neq", "+gt", "+gte", "+lt", "+lte", "+contains"];

fn check_filter(obj: &serde_json::Map<String, Value>, allowed: &[&str]) -> Result<(), String> {
    for (key, value) in obj {
        match key.as_str() {
            "+and" | "+or" => {
                let Some(list) = value.as_array() else {
                    return Err(format!("{key} must be an array"));
                };
                for sub in list {
                    let Value::Object(sub) = sub else {
                        return Err(format!("{key} items must be objects"));
                    };
                    check_filter(sub, allowed)?;
                }
            }
            "+order_by" => {
                if !value.as_str().is_some_and(|f| allowed.contains(&f)) {
                    return Err(format!("Cannot order by {value}"));
                }
            }
            "+order" => {
                if !matches!(value.as_str(), Some("asc") | Some("desc")) {
                    return Err("+order must be asc or desc".to_string());
                }
            }
            field if !allowed.contains(&field) => return Err(format!("Cannot filter on {field}")),
            field => {
                if let Value::Object(ops) = value {
                    if let Some(op) = ops.keys().find(|op| !OPERATORS.contains(&op.as_str())) {
                        return Err(format!("Cannot filter on {field} with {op}"));
                    }
                }
            }
        }
    }
    Ok(())
}

fn compare(a: &Value, b: &Value) -> Option<std::cmp::Ordering> {
    match (a, b) {
        (Value::Number(x), Value::Number(y)) => x.as_f64()?.partial_cmp(&y.as_f64()?),
        (Value::String(x), Value::String(y)) => Some(x.cmp(y)),
        _ => None,
    }
}

fn filter_matches(obj: &serde_json::Map<String, Value>, item: &Value) -> bool {
    use std::cmp::Ordering::*;
    obj.iter().all(|(key, want)| match key.as_str() {
        "+and" => want.as_array().is_some_and(|l| {
            l.iter()
                .filter_map(Value::as_object)
                .all(|s| filter_matches(s, item))
        }),
        "+or" => want.as_array().is_some_and(|l| {
            l.iter()
                .filter_map(Value::as_object)
                .any(|s| filter_matches(s, item))
        }),
        "+order_by" | "+order" => true,
        field => {
            let got = &item[field];
            match want {
                Value::Object(ops) => ops.iter().all(|(op, v)| match op.as_str() {
                    "+eq" => got == v,
                    "+neq" => got != v,
                    "+gt" => compare(got, v) == Some(Greater),
                    "+gte" => matches!(compare(got, v), Some(Greater | Equal)),
                    "+lt" => compare(got, v) == Some(Less),
                    "+lte" => matches!(compare(got, v), Some(Less | Equal)),
                    "+contains" => match (got, v.as_str()) {
                        (Value::String(s), Some(n)) => s.contains(n),
                        (Value::Array(a), Some(n)) => a.iter().any(|x| x == n),
                        _ => false,
                    },
                    _ => false,
                }),
                // Tags and other lists match by membership, like the API.
                _ => match got {
                    Value::Array(a) => a.contains(want),
                    _ => got == want,
                },
            }
        }
    })
}

struct Shared {
    token: String,
    state: Mutex<State>,
    state_file: Option<PathBuf>,
    rules: Mutex<Vec<FaultRule>>,
    profile: Mutex<Option<FaultProfile>>,
    rng: Mutex<u64>,
    log: Mutex<VecDeque<(u64, RequestRecord)>>,
    seq: AtomicU64,
    observer: Mutex<Option<Observer>>,
    gates: Arc<Gates>,
    next_gate: AtomicU64,
    /// Requests per `METHOD endpoint-template`, never capped or dropped.
    counts: Mutex<BTreeMap<String, u64>>,
    limiter: Mutex<Option<Limiter>>,
    throttled: AtomicU64,
}

/// The outcome of routing one request against the state.
struct Routed {
    result: ApiResult,
    mutated: bool,
}

fn lock<T>(m: &Mutex<T>) -> MutexGuard<'_, T> {
    m.lock().unwrap_or_else(|p| p.into_inner())
}

/// `v4beta/nfs/spaces/7` → (`v4beta`, `nfs/spaces/7`).
fn split_version(path: &str) -> Option<(&str, &str)> {
    let rest = path.trim_start_matches('/');
    let (version, tail) = rest.split_once('/').unwrap_or((rest, ""));
    matches!(version, "v4" | "v4beta").then_some((version, tail.trim_end_matches('/')))
}

impl Shared {
    fn handle(&self, req: HttpRequest) -> HttpResponse {
        let Some((version, path)) = split_version(&req.path) else {
            return ApiError::not_found().response();
        };
        let path = path.to_string();
        let authorized = req.header("Authorization") == Some(&format!("Bearer {}", self.token));
        let seq = self.seq.fetch_add(1, Ordering::SeqCst);
        {
            let mut log = lock(&self.log);
            if log.len() >= REQUEST_LOG_CAP {
                log.pop_front();
            }
            let header = |n: &str| req.header(n).map(str::to_string);
            log.push_back((
                seq,
                RequestRecord {
                    method: req.method.clone(),
                    path: path.clone(),
                    version: version.to_string(),
                    query: req.query.clone(),
                    body: req.body.clone(),
                    authorized,
                    user_agent: header("User-Agent"),
                    content_type: header("Content-Type"),
                    accept: header("Accept"),
                    x_filter: header("X-Filter"),
                    status: None,
                },
            ));
        }
        *lock(&self.counts)
            .entry(format!(
                "{} {}",
                req.method,
                crate::linode::endpoint_template(&path)
            ))
            .or_default() += 1;
        let response = self.limited(&req, &path, authorized);
        if let Some((_, rec)) = lock(&self.log).iter_mut().find(|(s, _)| *s == seq) {
            rec.status = Some(response.status);
        }
        response
    }

    /// [`Shared::respond`] under the rate limits, when they are on.
    fn limited(&self, req: &HttpRequest, path: &str, authorized: bool) -> HttpResponse {
        let verdict = lock(&self.limiter)
            .as_mut()
            .map(|l| l.admit(is_collection(&req.method, path), now_ms()));
        let Some(verdict) = verdict else {
            return self.respond(req, path, authorized);
        };
        let mut response = match verdict.retry_after {
            Some(secs) => {
                self.throttled.fetch_add(1, Ordering::SeqCst);
                ApiError::new(429, None, "Too many requests")
                    .response()
                    .with_header("Retry-After", &secs.to_string())
            }
            None => self.respond(req, path, authorized),
        };
        for (k, v) in verdict.headers {
            response = response.with_header(&k, &v);
        }
        response
    }

    fn respond(&self, req: &HttpRequest, path: &str, authorized: bool) -> HttpResponse {
        if !authorized {
            return ApiError::new(401, None, "Invalid Token").response();
        }
        let mut fail_after = None;
        for action in self.triggered_faults(&req.method, path) {
            match action {
                FaultAction::Latency(d) => std::thread::sleep(d),
                FaultAction::Hang(id) => self.gates.pass(id),
                FaultAction::FailAfter { status } => fail_after = Some(status),
                FaultAction::Status {
                    status,
                    reason,
                    headers,
                    html,
                } => {
                    let mut r = if html {
                        HttpResponse {
                            status,
                            headers: vec![("Content-Type".into(), "text/html".into())],
                            body: format!("<html><body><h1>{status} {reason}</h1></body></html>")
                                .into_bytes(),
                        }
                    } else {
                        ApiError::new(status, None, &reason).response()
                    };
                    for (k, v) in headers {
                        r = r.with_header(&k, &v);
                    }
                    return r;
                }
            }
        }
        if let Some(code) = self.random_fault() {
            let r = ApiError::new(code, None, "Injected failure").response();
            return if code == 429 {
                r.with_header("Retry-After", "1")
            } else {
                r
            };
        }
        let mut events = Vec::new();
        let routed = {
            let mut state = lock(&self.state);
            let advanced = state.advance(now_ms(), &mut events);
            let routed = route(&mut state, req, path, &mut events);
            if advanced || routed.mutated {
                self.persist(&state);
            }
            routed
        };
        self.notify(&events);
        if let Some(status) = fail_after {
            return ApiError::new(status, None, "Internal Server Error").response();
        }
        match routed.result {
            Ok(v) => HttpResponse::json(200, &v).with_header("Vary", "Authorization, X-Filter"),
            Err(e) => e.response(),
        }
    }

    /// Actions of the rules matching this request, consuming counted ones:
    /// all delays/hangs, then at most one answer-changing rule.
    fn triggered_faults(&self, method: &str, path: &str) -> Vec<FaultAction> {
        let mut rules = lock(&self.rules);
        let mut out = Vec::new();
        let mut answered = false;
        for rule in rules.iter_mut() {
            if rule.remaining == Some(0) || !rule.matches(method, path) {
                continue;
            }
            let answers = matches!(
                rule.action,
                FaultAction::Status { .. } | FaultAction::FailAfter { .. }
            );
            if answers && answered {
                continue;
            }
            answered |= answers;
            if let Some(n) = rule.remaining.as_mut() {
                *n -= 1;
            }
            out.push(rule.action.clone());
        }
        rules.retain(|r| r.remaining != Some(0));
        out
    }

    fn random_fault(&self) -> Option<u16> {
        let profile = lock(&self.profile).clone()?;
        let mut x = lock(&self.rng);
        // xorshift64: plenty for "fail about this often".
        *x ^= *x << 13;
        *x ^= *x >> 7;
        *x ^= *x << 17;
        profile.pick((*x >> 11) as f64 / (1u64 << 53) as f64)
    }

    fn persist(&self, state: &State) {
        let Some(path) = &self.state_file else {
            return;
        };
        let tmp = path.with_extension("tmp");
        let written = serde_json::to_vec_pretty(state)
            .map_err(std::io::Error::other)
            .and_then(|bytes| std::fs::write(&tmp, bytes))
            .and_then(|()| std::fs::rename(&tmp, path));
        if let Err(e) = written {
            log::error!("fake Linode: cannot save state to {}: {e}", path.display());
        }
    }

    fn notify(&self, events: &[FakeEvent]) {
        if events.is_empty() {
            return;
        }
        let observer = lock(&self.observer).clone();
        if let Some(observer) = observer {
            for e in events {
                observer(e);
            }
        }
    }
}

/// A GET of a collection: Linode's paginated (scarce) request class.
fn is_collection(method: &str, path: &str) -> bool {
    method == "GET"
        && matches!(
            path.rsplit('/').next(),
            Some("spaces" | "filesystems" | "snapshots" | "configs" | "interfaces" | "instances")
        )
}

fn ids<S: AsRef<str>>(segments: &[S]) -> Option<Vec<u64>> {
    segments.iter().map(|s| s.as_ref().parse().ok()).collect()
}

fn route(state: &mut State, req: &HttpRequest, path: &str, events: &mut Vec<FakeEvent>) -> Routed {
    let seg: Vec<&str> = path.split('/').collect();
    let read = |result| Routed {
        result,
        mutated: false,
    };
    let method = req.method.as_str();
    let body = || -> Result<serde_json::Map<String, Value>, ApiError> {
        match serde_json::from_str::<Value>(&req.body) {
            Ok(Value::Object(m)) => Ok(m),
            _ => Err(ApiError::new(
                400,
                None,
                "Request body must be a JSON object",
            )),
        }
    };
    let x_filter = req.header("X-Filter");
    let forced = state.page_size;
    match (method, seg.as_slice()) {
        ("GET", ["nfs", "spaces"]) => {
            let items = state.spaces.values().map(|s| state.space_json(s)).collect();
            read(
                apply_filter(items, x_filter, &["id", "label", "status", "tags"])
                    .and_then(|i| paginate(i, req, forced)),
            )
        }
        ("GET", ["nfs", "spaces", id]) => read(
            ids(&[id])
                .ok_or_else(ApiError::not_found)
                .and_then(|v| state.space(v[0]).map(|s| state.space_json(s))),
        ),
        ("GET", ["nfs", "spaces", id, "access-policy"]) => read(
            ids(&[id])
                .ok_or_else(ApiError::not_found)
                .and_then(|v| state.space(v[0]).cloned())
                .and_then(|s| {
                    if s.policy_missing {
                        Err(ApiError::not_found())
                    } else {
                        Ok(state.space_policy_json(&s))
                    }
                }),
        ),
        ("GET", ["nfs", "spaces", sid, "filesystems"]) => read(
            ids(&[sid])
                .ok_or_else(ApiError::not_found)
                .and_then(|v| state.space(v[0]).map(|s| s.id))
                .and_then(|sid| {
                    let items = state
                        .filesystems
                        .values()
                        .filter(|f| f.space_id == sid)
                        .map(|f| state.fs_json(f))
                        .collect();
                    let keys: &[&str] = if state.no_filesystem_id_filter {
                        &["label", "region", "status", "tags"]
                    } else {
                        &["id", "label", "region", "status", "tags"]
                    };
                    apply_filter(items, x_filter, keys)
                })
                .and_then(|i| paginate(i, req, forced)),
        ),
        ("POST", ["nfs", "spaces", sid, "filesystems"]) => {
            let result = ids(&[sid])
                .ok_or_else(ApiError::not_found)
                .and_then(|v| body().map(|b| (v[0], b)))
                .and_then(|(sid, b)| create_filesystem(state, sid, &b));
            Routed {
                mutated: result.is_ok(),
                result,
            }
        }
        ("GET", ["nfs", "spaces", sid, "filesystems", fid]) => read(
            ids(&[sid, fid])
                .ok_or_else(ApiError::not_found)
                .and_then(|v| state.filesystem(v[0], v[1]).map(|f| state.fs_json(f))),
        ),
        ("DELETE", ["nfs", "spaces", sid, "filesystems", fid]) => {
            let result = ids(&[sid, fid])
                .ok_or_else(ApiError::not_found)
                .and_then(|v| delete_filesystem(state, v[0], v[1], events));
            Routed {
                mutated: result.is_ok(),
                result,
            }
        }
        ("GET", ["nfs", "spaces", sid, "filesystems", fid, "access-policy"]) => read(
            ids(&[sid, fid])
                .ok_or_else(ApiError::not_found)
                .and_then(|v| {
                    state
                        .filesystem(v[0], v[1])
                        .map(|f| state.fs_policy_json(f))
                }),
        ),
        ("PUT", ["nfs", "spaces", sid, "filesystems", fid, "access-policy"]) => {
            let result = ids(&[sid, fid])
                .ok_or_else(ApiError::not_found)
                .and_then(|v| body().map(|b| (v, b)))
                .and_then(|(v, b)| put_policy(state, v[0], v[1], &b));
            Routed {
                mutated: result.is_ok(),
                result,
            }
        }
        ("GET", ["nfs", "spaces", sid, "filesystems", fid, "snapshots"]) => read(
            ids(&[sid, fid])
                .ok_or_else(ApiError::not_found)
                .and_then(|v| state.filesystem(v[0], v[1]).map(|f| f.id))
                .and_then(|fid| {
                    let items = state
                        .snapshots
                        .values()
                        .filter(|s| s.filesystem_id == fid)
                        .map(|s| state.snap_json(s))
                        .collect();
                    apply_filter(items, x_filter, &["id", "label", "status"])
                })
                .and_then(|i| paginate(i, req, forced)),
        ),
        ("POST", ["nfs", "spaces", sid, "filesystems", fid, "snapshots"]) => {
            let result = ids(&[sid, fid])
                .ok_or_else(ApiError::not_found)
                .and_then(|v| body().map(|b| (v, b)))
                .and_then(|(v, b)| create_snapshot(state, v[0], v[1], &b, events));
            Routed {
                mutated: result.is_ok(),
                result,
            }
        }
        ("GET", ["nfs", "spaces", sid, "filesystems", fid, "snapshots", snap]) => read(
            ids(&[sid, fid, snap])
                .ok_or_else(ApiError::not_found)
                .and_then(|v| state.snapshot(v[0], v[1], v[2]).map(|s| state.snap_json(s))),
        ),
        ("DELETE", ["nfs", "spaces", sid, "filesystems", fid, "snapshots", snap]) => {
            let result = ids(&[sid, fid, snap])
                .ok_or_else(ApiError::not_found)
                .and_then(|v| delete_snapshot(state, v[0], v[1], v[2], events));
            Routed {
                mutated: result.is_ok(),
                result,
            }
        }
        ("POST", ["nfs", "spaces", sid, "filesystems", fid, "snapshots", snap, "clone"]) => {
            let result = ids(&[sid, fid, snap])
                .ok_or_else(ApiError::not_found)
                .and_then(|v| body().map(|b| (v, b)))
                .and_then(|(v, b)| clone_snapshot(state, v[0], v[1], v[2], &b, events));
            Routed {
                mutated: result.is_ok(),
                result,
            }
        }
        ("GET", ["linode", "instances", id]) => read(
            ids(&[id])
                .and_then(|v| state.instances.get(&v[0]))
                .map(|i| state.instance_json(i))
                .ok_or_else(ApiError::not_found),
        ),
        ("GET", ["linode", "instances", id, "configs"]) => read(
            ids(&[id])
                .and_then(|v| state.instances.get(&v[0]))
                .ok_or_else(ApiError::not_found)
                .and_then(|i| paginate(state.configs_json(i), req, forced)),
        ),
        ("GET", ["linode", "instances", id, "interfaces"]) => read(
            ids(&[id])
                .and_then(|v| state.instances.get(&v[0]))
                .ok_or_else(ApiError::not_found)
                .and_then(|i| {
                    let list = state.interfaces_json(i);
                    if state.interfaces_paginated {
                        paginate(list, req, forced)
                    } else {
                        Ok(json!({ "interfaces": list }))
                    }
                }),
        ),
        (_, ["nfs", ..]) | (_, ["linode", ..]) if known_path(&seg) => {
            read(Err(ApiError::new(405, None, "Method Not Allowed")))
        }
        _ => read(Err(ApiError::not_found())),
    }
}

/// Whether some method is served on this path shape (for 405 vs 404).
fn known_path(seg: &[&str]) -> bool {
    matches!(
        seg,
        ["nfs", "spaces"]
            | ["nfs", "spaces", _]
            | ["nfs", "spaces", _, "access-policy"]
            | ["nfs", "spaces", _, "filesystems", ..]
            | ["linode", "instances", _, ..]
    )
}

fn validate_region(
    state: &State,
    value: Option<&Value>,
    errors: &mut Vec<(Option<String>, String)>,
) {
    match value.and_then(Value::as_str) {
        Some(r) if state.regions.iter().any(|x| x == r) => {}
        _ => errors.push((
            Some("region".to_string()),
            "region is not valid".to_string(),
        )),
    }
}

fn validate_tags(value: Option<&Value>, errors: &mut Vec<(Option<String>, String)>) -> Vec<String> {
    string_list(value).unwrap_or_else(|| {
        errors.push((
            Some("tags".to_string()),
            "Must be a list of strings".to_string(),
        ));
        Vec::new()
    })
}

fn new_policy(label: &str, squash: &str, created: i64) -> PolicyRec {
    PolicyRec {
        label: label.to_string(),
        enabled: false,
        linode_ids: Vec::new(),
        squash_policy: squash.to_string(),
        protocols: vec!["nfsv4".to_string()],
        updating_until: None,
        error: false,
        created,
        updated: None,
    }
}

fn insert_filesystem(
    state: &mut State,
    space_id: u64,
    label: &str,
    region: &str,
    max_capacity_bytes: i64,
    tags: Vec<String>,
    source_snapshot_id: Option<u64>,
) -> u64 {
    let id = state.next_filesystem_id;
    state.next_filesystem_id += 1;
    let now = now_ms();
    let created = (now / 1000) as i64;
    let policy = new_policy(label, &state.default_squash_policy, created);
    state.filesystems.insert(
        id,
        FsRec {
            id,
            space_id,
            label: label.to_string(),
            region: region.to_string(),
            tags,
            max_capacity_bytes,
            source_snapshot_id,
            phase: Phase::Creating,
            transition_at: now + state.activation_delay_ms,
            mount_targets: false,
            hide_fqdn: false,
            hide_ips: false,
            created,
            updated: created,
            policy,
        },
    );
    id
}

fn check_unique_label(state: &State, space_id: u64, label: &str) -> Result<(), ApiError> {
    if state.unique_filesystem_labels
        && state
            .filesystems
            .values()
            .any(|f| f.space_id == space_id && f.label == label)
    {
        return Err(ApiError::bad(
            "label",
            "Label must be unique among filesystems in the space",
        ));
    }
    Ok(())
}

fn create_filesystem(
    state: &mut State,
    space_id: u64,
    b: &serde_json::Map<String, Value>,
) -> ApiResult {
    state.space(space_id)?;
    let capacity = b.get("max_capacity_bytes").and_then(Value::as_i64);
    let id = insert_from_body(state, space_id, b, capacity.unwrap_or(0), None, |errors| {
        if capacity.is_none_or(|c| c <= 0) {
            errors.push((
                Some("max_capacity_bytes".to_string()),
                "Must be a positive integer".to_string(),
            ));
        }
        if let Some(p) = b.get("protocol_versions") {
            if string_list(Some(p)) != Some(vec!["nfsv4".to_string()]) {
                errors.push((
                    Some("protocol_versions".to_string()),
                    "Must be [\"nfsv4\"]".to_string(),
                ));
            }
        }
    })?;
    Ok(state.fs_json(&state.filesystems[&id]))
}

/// The checks create and clone share (label, region, `extra`, tags, label
/// uniqueness), then the new filesystem; its id.
fn insert_from_body(
    state: &mut State,
    space_id: u64,
    b: &serde_json::Map<String, Value>,
    capacity: i64,
    source_snapshot: Option<u64>,
    extra: impl FnOnce(&mut Vec<(Option<String>, String)>),
) -> Result<u64, ApiError> {
    let mut errors = Vec::new();
    validate_label(b.get("label"), &mut errors);
    validate_region(state, b.get("region"), &mut errors);
    extra(&mut errors);
    let tags = validate_tags(b.get("tags"), &mut errors);
    if !errors.is_empty() {
        return Err(ApiError {
            status: 400,
            errors,
        });
    }
    let label = b["label"].as_str().unwrap_or_default();
    check_unique_label(state, space_id, label)?;
    let region = b["region"].as_str().unwrap_or_default();
    Ok(insert_filesystem(
        state,
        space_id,
        label,
        region,
        capacity,
        tags,
        source_snapshot,
    ))
}

fn delete_filesystem(
    state: &mut State,
    space_id: u64,
    fs_id: u64,
    events: &mut Vec<FakeEvent>,
) -> ApiResult {
    state.filesystem(space_id, fs_id)?;
    let delay = state.deletion_delay_ms;
    let fs = state
        .filesystems
        .get_mut(&fs_id)
        .ok_or_else(ApiError::not_found)?;
    if fs.phase != Phase::Deleting {
        fs.phase = Phase::Deleting;
        fs.transition_at = now_ms() + delay;
        events.push(FakeEvent::FilesystemDeleted {
            space_id,
            filesystem_id: fs_id,
            export: export_path(&fs.label, fs_id),
        });
    }
    Ok(json!({}))
}

fn put_policy(
    state: &mut State,
    space_id: u64,
    fs_id: u64,
    b: &serde_json::Map<String, Value>,
) -> ApiResult {
    state.filesystem(space_id, fs_id)?;
    let mut errors = Vec::new();
    if b.contains_key("label") {
        validate_label(b.get("label"), &mut errors);
    }
    let enabled = match b.get("enabled") {
        None => None,
        Some(Value::Bool(e)) => Some(*e),
        Some(_) => {
            errors.push((Some("enabled".to_string()), "Must be a boolean".to_string()));
            None
        }
    };
    let linode_ids = match b.get("linode_ids") {
        None => None,
        Some(v) => {
            let list: Option<Vec<u64>> = v
                .as_array()
                .and_then(|a| a.iter().map(Value::as_u64).collect());
            match list {
                None => {
                    errors.push((
                        Some("linode_ids".to_string()),
                        "Must be a list of IDs".to_string(),
                    ));
                    None
                }
                Some(list) => {
                    let mut seen = std::collections::BTreeSet::new();
                    for id in &list {
                        if !seen.insert(*id) {
                            errors.push((
                                Some("linode_ids".to_string()),
                                format!("Duplicate ID {id}"),
                            ));
                        } else if !state.instances.contains_key(id) {
                            errors.push((
                                Some("linode_ids".to_string()),
                                format!("Linode {id} not found"),
                            ));
                        }
                    }
                    Some(list)
                }
            }
        }
    };
    let squash = match b.get("squash_policy") {
        None => None,
        Some(v) => match v.as_str() {
            Some(s @ ("none" | "root_squash" | "all_squash")) => Some(s.to_string()),
            _ => {
                errors.push((
                    Some("squash_policy".to_string()),
                    "Must be one of none, root_squash, all_squash".to_string(),
                ));
                None
            }
        },
    };
    let protocols = match b.get("protocols") {
        None => None,
        Some(v) if string_list(Some(v)) == Some(vec!["nfsv4".to_string()]) => {
            Some(vec!["nfsv4".to_string()])
        }
        Some(_) => {
            errors.push((
                Some("protocols".to_string()),
                "Must be [\"nfsv4\"]".to_string(),
            ));
            None
        }
    };
    if !errors.is_empty() {
        return Err(ApiError {
            status: 400,
            errors,
        });
    }
    let merge = state.policy_put == PolicyPut::Merge;
    let default_squash = state.default_squash_policy.clone();
    let until = now_ms() + state.activation_delay_ms;
    let fs = state
        .filesystems
        .get_mut(&fs_id)
        .ok_or_else(ApiError::not_found)?;
    let old = fs.policy.clone();
    let fresh = new_policy(&fs.label, &default_squash, old.created);
    let base = if merge { &old } else { &fresh };
    fs.policy = PolicyRec {
        label: b
            .get("label")
            .and_then(Value::as_str)
            .map_or_else(|| base.label.clone(), str::to_string),
        enabled: enabled.unwrap_or(base.enabled),
        linode_ids: linode_ids.unwrap_or_else(|| base.linode_ids.clone()),
        squash_policy: squash.unwrap_or_else(|| base.squash_policy.clone()),
        protocols: protocols.unwrap_or_else(|| base.protocols.clone()),
        updating_until: Some(until),
        error: false,
        created: old.created,
        updated: Some(now_secs()),
    };
    let fs = &state.filesystems[&fs_id];
    Ok(state.fs_policy_json(fs))
}

fn create_snapshot(
    state: &mut State,
    space_id: u64,
    fs_id: u64,
    b: &serde_json::Map<String, Value>,
    events: &mut Vec<FakeEvent>,
) -> ApiResult {
    let fs = state.filesystem(space_id, fs_id)?;
    if fs.phase == Phase::Deleting {
        return Err(ApiError::new(400, None, "Filesystem is being deleted"));
    }
    let source_export = export_path(&fs.label, fs.id);
    let mut errors = Vec::new();
    validate_label(b.get("label"), &mut errors);
    if !errors.is_empty() {
        return Err(ApiError {
            status: 400,
            errors,
        });
    }
    let label = b["label"].as_str().unwrap_or_default().to_string();
    if state
        .snapshots
        .values()
        .any(|s| s.filesystem_id == fs_id && s.label == label)
    {
        return Err(ApiError::new(
            state.snapshot_duplicate_status,
            Some("label"),
            "A snapshot with this label already exists",
        ));
    }
    let id = state.next_snapshot_id;
    state.next_snapshot_id += 1;
    let now = now_ms();
    state.snapshots.insert(
        id,
        SnapRec {
            id,
            filesystem_id: fs_id,
            space_id,
            label,
            phase: Phase::Creating,
            transition_at: now + state.activation_delay_ms,
            locked: b.get("locked").and_then(Value::as_bool).unwrap_or(false),
            created: (now / 1000) as i64,
            updated: Some((now / 1000) as i64),
            times: SnapshotTimes::Both,
        },
    );
    events.push(FakeEvent::SnapshotCreated {
        space_id,
        filesystem_id: fs_id,
        snapshot_id: id,
        source_export,
    });
    Ok(state.snap_json(&state.snapshots[&id]))
}

fn delete_snapshot(
    state: &mut State,
    space_id: u64,
    fs_id: u64,
    snap_id: u64,
    events: &mut Vec<FakeEvent>,
) -> ApiResult {
    let snap = state.snapshot(space_id, fs_id, snap_id)?;
    if snap.locked {
        return Err(ApiError::new(
            state.locked_delete_status,
            None,
            "Snapshot is locked and cannot be deleted",
        ));
    }
    let delay = state.deletion_delay_ms;
    let snap = state
        .snapshots
        .get_mut(&snap_id)
        .ok_or_else(ApiError::not_found)?;
    if snap.phase != Phase::Deleting {
        snap.phase = Phase::Deleting;
        snap.transition_at = now_ms() + delay;
        snap.updated = Some(now_secs());
        events.push(FakeEvent::SnapshotDeleted {
            snapshot_id: snap_id,
        });
    }
    Ok(json!({}))
}

fn clone_snapshot(
    state: &mut State,
    space_id: u64,
    fs_id: u64,
    snap_id: u64,
    b: &serde_json::Map<String, Value>,
    events: &mut Vec<FakeEvent>,
) -> ApiResult {
    let snap = state.snapshot(space_id, fs_id, snap_id)?;
    if snap.phase != Phase::Active {
        return Err(ApiError::new(400, None, "Snapshot is not active"));
    }
    let source = &state.filesystems[&fs_id];
    // Modelled, not documented: a clone may grow but never shrink below
    // the data it copies.
    let capacity = match b.get("size_gib") {
        None | Some(Value::Null) => source.max_capacity_bytes,
        Some(v) => match v.as_i64().filter(|g| (1..=1 << 20).contains(g)) {
            Some(g) if g << 30 >= source.max_capacity_bytes => g << 30,
            Some(_) => {
                return Err(ApiError::bad(
                    "size_gib",
                    "Must not be smaller than the source filesystem",
                ))
            }
            None => return Err(ApiError::bad("size_gib", "Must be a positive integer")),
        },
    };
    let target_space = match b.get("space_id") {
        None | Some(Value::Null) => space_id,
        Some(v) => v
            .as_u64()
            .ok_or_else(|| ApiError::bad("space_id", "Must be an integer"))?,
    };
    state.space(target_space)?;
    let id = insert_from_body(state, target_space, b, capacity, Some(snap_id), |_| {})?;
    events.push(FakeEvent::CloneCreated {
        snapshot_id: snap_id,
        space_id: target_space,
        filesystem_id: id,
        export: export_path(&state.filesystems[&id].label, id),
    });
    Ok(state.fs_json(&state.filesystems[&id]))
}

/// The fake Linode API server. Dropping it stops the server and releases
/// every hung request.
pub struct FakeLinode {
    shared: Arc<Shared>,
    http: HttpServer,
}

impl FakeLinode {
    /// A fresh in-memory fake.
    pub fn start(seed: Seed) -> crate::Result<FakeLinode> {
        FakeLinode::launch(&seed, State::from_seed(&seed), None)
    }

    /// A fake whose state lives in `state_file`: loaded when the file exists
    /// (the file wins over the seed, except for the token), otherwise built
    /// from the seed; saved after every change.
    pub fn start_persistent(seed: Seed, state_file: &Path) -> crate::Result<FakeLinode> {
        let state = match std::fs::read(state_file) {
            Ok(bytes) => serde_json::from_slice(&bytes).map_err(|e| {
                crate::Error::InvalidArgument(format!(
                    "fake Linode state {}: {e}",
                    state_file.display()
                ))
            })?,
            Err(e) if e.kind() == std::io::ErrorKind::NotFound => State::from_seed(&seed),
            Err(e) => {
                return Err(crate::Error::Internal(format!(
                    "fake Linode state {}: {e}",
                    state_file.display()
                )))
            }
        };
        let fake = FakeLinode::launch(&seed, state, Some(state_file.to_path_buf()))?;
        fake.shared.persist(&fake.state());
        Ok(fake)
    }

    fn launch(seed: &Seed, state: State, state_file: Option<PathBuf>) -> crate::Result<FakeLinode> {
        let shared = Arc::new(Shared {
            token: seed.token.clone(),
            state: Mutex::new(state),
            state_file,
            rules: Mutex::new(Vec::new()),
            profile: Mutex::new(None),
            rng: Mutex::new(now_ms() | 1),
            log: Mutex::new(VecDeque::new()),
            seq: AtomicU64::new(0),
            observer: Mutex::new(None),
            gates: Arc::new(Gates::default()),
            next_gate: AtomicU64::new(0),
            counts: Mutex::default(),
            limiter: Mutex::new(None),
            throttled: AtomicU64::new(0),
        });
        let handler = Arc::clone(&shared);
        let http = HttpServer::start("fake-linode", Arc::new(move |r| handler.handle(r)))?;
        Ok(FakeLinode { shared, http })
    }

    fn state(&self) -> MutexGuard<'_, State> {
        lock(&self.shared.state)
    }

    /// Applies `f` to the state after advancing the clocks, saves, notifies.
    fn mutate<R>(&self, f: impl FnOnce(&mut State) -> R) -> R {
        let mut events = Vec::new();
        let out = {
            let mut state = self.state();
            state.advance(now_ms(), &mut events);
            let out = f(&mut state);
            self.shared.persist(&state);
            out
        };
        self.shared.notify(&events);
        out
    }

    /// Base URL WITHOUT the API version (`LINODE_URL`); `/v4beta/` and `/v4/` are served.
    pub fn url(&self) -> String {
        self.http.url()
    }

    /// The bearer token the fake accepts.
    pub fn token(&self) -> String {
        self.shared.token.clone()
    }

    /// Called (outside the fake's locks, before the triggering answer is
    /// sent) for every [`FakeEvent`].
    pub fn set_observer(&self, observer: Arc<dyn Fn(&FakeEvent) + Send + Sync>) {
        *lock(&self.shared.observer) = Some(observer);
    }

    // --- knobs -------------------------------------------------------------

    pub fn set_activation_delay(&self, delay: Duration) {
        self.mutate(|s| s.activation_delay_ms = delay.as_millis() as u64);
    }

    pub fn set_deletion_delay(&self, delay: Duration) {
        self.mutate(|s| s.deletion_delay_ms = delay.as_millis() as u64);
    }

    /// Force every list page to `size` items whatever the client asks (to
    /// test multi-page aggregation); `None` restores the API's rules.
    pub fn set_page_size(&self, size: Option<usize>) {
        self.mutate(|s| s.page_size = size);
    }

    pub fn set_policy_put(&self, mode: PolicyPut) {
        self.mutate(|s| s.policy_put = mode);
    }

    /// Status for a duplicate snapshot label (default 409).
    pub fn set_snapshot_duplicate_status(&self, status: u16) {
        self.mutate(|s| s.snapshot_duplicate_status = status);
    }

    /// Status for deleting a locked snapshot (default 409).
    pub fn set_locked_delete_status(&self, status: u16) {
        self.mutate(|s| s.locked_delete_status = status);
    }

    /// Serve `/interfaces` in the paginated envelope instead of `{"interfaces": [...]}`.
    /// Whether filesystem lists can be filtered by `id` (the default); the
    /// contract does not say, so the client must cope without.
    pub fn set_filesystem_id_filter(&self, allowed: bool) {
        self.mutate(|s| s.no_filesystem_id_filter = !allowed);
    }

    pub fn set_interfaces_paginated(&self, paginated: bool) {
        self.mutate(|s| s.interfaces_paginated = paginated);
    }

    /// Filesystems (created or cloned) with this label follow `lifecycle`.
    pub fn set_filesystem_lifecycle(&self, label: &str, lifecycle: Lifecycle) {
        self.mutate(|s| s.filesystem_lifecycles.insert(label.to_string(), lifecycle));
    }

    pub fn set_snapshot_lifecycle(&self, label: &str, lifecycle: Lifecycle) {
        self.mutate(|s| s.snapshot_lifecycles.insert(label.to_string(), lifecycle));
    }

    /// Access-policy PUTs on filesystem `fs_id` follow `lifecycle`.
    pub fn set_policy_lifecycle(&self, fs_id: u64, lifecycle: Lifecycle) {
        self.mutate(|s| s.policy_lifecycles.insert(fs_id, lifecycle));
    }

    /// Lock or unlock a snapshot (a locked one cannot be deleted).
    pub fn set_snapshot_locked(&self, snapshot_id: u64, locked: bool) -> bool {
        self.mutate(|s| {
            s.snapshots
                .get_mut(&snapshot_id)
                .map(|snap| snap.locked = locked)
                .is_some()
        })
    }

    /// Which timestamps a snapshot shows from now on.
    pub fn set_snapshot_times(&self, snapshot_id: u64, times: SnapshotTimes) -> bool {
        self.mutate(|s| {
            s.snapshots
                .get_mut(&snapshot_id)
                .map(|snap| snap.times = times)
                .is_some()
        })
    }

    pub fn add_space(&self, space: SpaceSeed) {
        let created = now_secs();
        self.mutate(|s| {
            s.spaces
                .insert(space.id, SpaceRec::from_seed(&space, created))
        });
    }

    pub fn add_instance(&self, instance: InstanceSeed) {
        self.mutate(|s| s.instances.insert(instance.id, instance));
    }

    // --- faults ------------------------------------------------------------

    pub fn inject(&self, rule: FaultRule) {
        lock(&self.shared.rules).push(rule);
    }

    /// Matching requests block until the returned [`Hang`] is released.
    pub fn hang(&self, method: &str, pattern: &str) -> Hang {
        let id = self.shared.next_gate.fetch_add(1, Ordering::SeqCst);
        self.shared.gates.lock().insert(id, Gate::default());
        self.inject(FaultRule::new(method, pattern, FaultAction::Hang(id)));
        Hang {
            id,
            gates: Arc::clone(&self.shared.gates),
        }
    }

    /// Remove every programmed rule (held requests stay held until released).
    pub fn clear_faults(&self) {
        lock(&self.shared.rules).clear();
    }

    /// Random failures on every request (`None` turns them off).
    pub fn set_fault_profile(&self, profile: Option<FaultProfile>) {
        *lock(&self.shared.profile) = profile;
    }

    // --- inspection ----------------------------------------------------------

    /// The request log, oldest first (the newest 10 000 entries).
    pub fn requests(&self) -> Vec<RequestRecord> {
        lock(&self.shared.log)
            .iter()
            .map(|(_, r)| r.clone())
            .collect()
    }

    /// Requests seen for `method` (`*` = any) and a path pattern (see [`FaultRule`]).
    pub fn calls(&self, method: &str, pattern: &str) -> usize {
        let probe = FaultRule::new(method, pattern, FaultAction::Latency(Duration::ZERO));
        lock(&self.shared.log)
            .iter()
            .filter(|(_, r)| probe.matches(&r.method, &r.path))
            .count()
    }

    /// Forgets the request log and the counters.
    pub fn clear_requests(&self) {
        lock(&self.shared.log).clear();
        lock(&self.shared.counts).clear();
    }

    /// Requests served, by `METHOD endpoint-template` (ids replaced by
    /// `{id}`), every one counted, however long the fake has run.
    pub fn request_counts(&self) -> BTreeMap<String, u64> {
        lock(&self.shared.counts).clone()
    }

    /// Turns rate limiting on (`Some`) or off; a new limit starts a window.
    pub fn set_rate_limit(&self, limit: Option<RateLimit>) {
        *lock(&self.shared.limiter) = limit.map(|l| Limiter::new(l, now_ms()));
    }

    /// Requests refused with 429 by the rate limits.
    pub fn throttled(&self) -> u64 {
        self.shared.throttled.load(Ordering::SeqCst)
    }

    fn decode<T: serde::de::DeserializeOwned>(value: Value) -> T {
        serde_json::from_value(value).expect("the fake renders the wire types it serves")
    }

    /// Every filesystem as `GET` would show it now.
    pub fn filesystems(&self) -> Vec<Filesystem> {
        self.mutate(|s| {
            s.filesystems
                .values()
                .map(|f| FakeLinode::decode(s.fs_json(f)))
                .collect()
        })
    }

    pub fn snapshots(&self) -> Vec<Snapshot> {
        self.mutate(|s| {
            s.snapshots
                .values()
                .map(|x| FakeLinode::decode(s.snap_json(x)))
                .collect()
        })
    }

    pub fn filesystem_policy(&self, fs_id: u64) -> Option<FilesystemAccessPolicy> {
        self.mutate(|s| {
            s.filesystems
                .get(&fs_id)
                .map(|f| FakeLinode::decode(s.fs_policy_json(f)))
        })
    }
}

impl Drop for FakeLinode {
    fn drop(&mut self) {
        // Held requests must finish or the HTTP server cannot wind down.
        self.shared.gates.release_all();
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn path_patterns() {
        assert!(path_matches(
            "nfs/spaces/*/filesystems",
            "nfs/spaces/7/filesystems"
        ));
        assert!(!path_matches(
            "nfs/spaces/*/filesystems",
            "nfs/spaces/7/filesystems/1"
        ));
        assert!(path_matches("nfs/**", "nfs/spaces/7/filesystems/1"));
        assert!(path_matches("**", "linode/instances/1"));
        assert!(!path_matches("nfs/spaces", "nfs/spaces/7"));
    }

    #[test]
    fn fault_profile_parsing() {
        let p = FaultProfile::parse("429:0.1, 503:0.05").unwrap();
        assert_eq!(p.pick(0.05), Some(429));
        assert_eq!(p.pick(0.12), Some(503));
        assert_eq!(p.pick(0.2), None);
        for bad in ["429", "abc:0.1", "200:0.1", "503:1.5", "429:0.7,503:0.7"] {
            assert!(FaultProfile::parse(bad).is_err(), "{bad}");
        }
        assert_eq!(FaultProfile::parse("").unwrap().pick(0.0), None);
    }

    #[test]
    fn filter_semantics() {
        let items = vec![
            json!({"id": 1, "label": "a", "region": "us-ord", "tags": ["x"]}),
            json!({"id": 2, "label": "b", "region": "us-ord", "tags": []}),
            json!({"id": 3, "label": "a", "region": "us-sea", "tags": []}),
        ];
        let allowed = ["id", "label", "region", "tags"];
        let run = |f: &str| {
            apply_filter(items.clone(), Some(f), &allowed).map(|v| {
                v.iter()
                    .map(|i| i["id"].as_u64().unwrap())
                    .collect::<Vec<_>>()
            })
        };
        assert_eq!(run(r#"{"label":"a"}"#).ok(), Some(vec![1, 3]));
        assert_eq!(
            run(r#"{"label":"a","region":"us-sea"}"#).ok(),
            Some(vec![3])
        );
        assert_eq!(
            run(r#"{"+or":[{"label":"b"},{"region":"us-sea"}]}"#).ok(),
            Some(vec![2, 3])
        );
        assert_eq!(run(r#"{"id":{"+gt":1}}"#).ok(), Some(vec![2, 3]));
        assert_eq!(run(r#"{"tags":"x"}"#).ok(), Some(vec![1]));
        assert_eq!(
            run(r#"{"+order_by":"id","+order":"desc"}"#).ok(),
            Some(vec![3, 2, 1])
        );
        // Unknown keys fail even when nothing would match.
        for bad in [r#"{"size":1}"#, "not json", "[1]", r#"{"id":{"+near":1}}"#] {
            let err = run(bad).unwrap_err();
            assert_eq!(err.status, 400, "{bad}");
            assert_eq!(err.errors[0].0.as_deref(), Some("X-Filter"));
        }
        assert_eq!(
            run(r#"{"size":1}"#).unwrap_err().errors[0].1,
            "Cannot filter on size"
        );
    }

    #[test]
    fn labels_are_validated() {
        let check = |v: Value| {
            let mut e = Vec::new();
            validate_label(Some(&v), &mut e);
            e.len()
        };
        assert_eq!(check(json!("pvc-0a1b.c_d")), 0);
        assert_eq!(check(json!("a".repeat(63))), 0);
        assert_eq!(check(json!("a".repeat(64))), 1);
        assert_eq!(check(json!("")), 1);
        assert_eq!(check(json!("Upper")), 1);
        assert_eq!(check(json!(5)), 1);
    }
}
