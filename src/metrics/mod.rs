//! The driver's Prometheus metrics: every family is defined here, with the
//! recording function the instrumented code calls, and [`endpoint`] serves
//! them (`METRICS_ADDRESS`). Recording is always on and costs a short lock;
//! it never blocks on the scrape for longer than a family's copy. Label
//! values come only from fixed sets: RPC method names, gRPC code names,
//! Linode endpoint templates (`nfs/spaces/{id}/filesystems/{id}`), request
//! names and outcomes chosen in code; never an id, a volume's name or a
//! token. The one name is a pool's (`shared-filesystem-pool`): admins
//! choose a handful in their StorageClasses, so it cannot grow unbounded.
//! The one exception is the usage of directory volumes
//! (`csi_directory_volume_used_bytes`, `…_capacity_bytes`), labelled by
//! volume id and claim, because a volume filling up is what an operator
//! must see per volume. Its bound: one series per directory volume that
//! exists now and per family, sampled at scrape time so a deleted volume's
//! series vanish (two series a volume: 2,000 for 1,000 volumes); only the
//! active controller has any. No other family may take a volume label.
//! Likewise the accounts of shared parents (`csi_parent_promised_bytes`,
//! `csi_parent_used_bytes`) are labelled by parent id: one series per
//! parent the active controller keeps an account of (the parents in use),
//! gone with the parent.
//! docs/metrics.md documents every family: keep the two in step.

pub mod endpoint;
mod fills;
mod process;
pub mod registry;

pub use fills::{
    fill_abandoned, restore_clone_active, restore_copy_ended, watch_dev_nfs, watch_fills,
    watch_restore_copies, CopyOutcome, FillAbandoned, RunningCopies,
};

use crate::config::Role;
use registry::{Computed, Counter, Emit, Family, Gauge, Histogram, Sampled};
use std::sync::OnceLock;
use std::time::Duration;

/// RPCs range from an inline Probe to a CreateVolume that waits minutes.
const RPC_BUCKETS: &[f64] = &[
    0.001, 0.005, 0.01, 0.025, 0.05, 0.1, 0.25, 0.5, 1.0, 2.5, 5.0, 10.0, 30.0, 60.0, 120.0, 300.0,
];
/// One HTTP request, bounded by its timeout (10 s by default for Linode).
const HTTP_BUCKETS: &[f64] = &[
    0.005, 0.01, 0.025, 0.05, 0.1, 0.25, 0.5, 1.0, 2.5, 5.0, 10.0, 30.0,
];
/// Filesystems and snapshots take seconds to minutes to become active.
const WAIT_BUCKETS: &[f64] = &[
    0.5, 1.0, 2.0, 5.0, 10.0, 20.0, 30.0, 60.0, 120.0, 300.0, 600.0,
];
/// A temporary clone of a snapshot takes minutes to hours.
const CLONE_BUCKETS: &[f64] = &[
    5.0, 15.0, 30.0, 60.0, 120.0, 300.0, 600.0, 1800.0, 3600.0, 7200.0, 14400.0, 28800.0,
];
/// A mount helper run, bounded by NFS_MOUNT_TIMEOUT (2 min by default).
const MOUNT_BUCKETS: &[f64] = &[
    0.01, 0.05, 0.1, 0.25, 0.5, 1.0, 2.5, 5.0, 10.0, 30.0, 60.0, 120.0,
];

/// Declares the families, one a line, and `FAMILIES`: all of them, in
/// the table's order, which is the scrape's.
macro_rules! families {
    ($(static $id:ident: $ty:ident = $ctor:ident($($arg:expr),* $(,)?);)*) => {
        $(static $id: $ty = $ty::$ctor($($arg),*);)*

        /// Every family, in scrape order.
        static FAMILIES: &[&dyn Family] = &[$(&$id),*];
    };
}

families! {
    static BUILD_INFO: Computed = gauge("csi_build_info", "Always 1: the driver's version, git revision and role.", &["driver", "version", "revision", "role"], build_info);
    static RPC_DURATION: Histogram = new("csi_rpc_duration_seconds", "CSI RPCs answered, by method and gRPC code, and how long each took from arrival to answer.", &["method", "code"], RPC_BUCKETS);
    static RPC_IN_FLIGHT: Sampled = new("csi_rpc_in_flight", "CSI RPCs accepted and not yet answered (queued, running or parked).", &[]);
    static RPC_PARKED: Sampled = new("csi_rpc_parked", "CSI RPCs whose work is parked waiting for Linode or another call's batch (they hold no worker).", &[]);
    static LINODE_DURATION: Histogram = new("csi_linode_request_duration_seconds", "Linode API HTTP requests (each attempt), by method, endpoint template and status class (2xx, 4xx, 5xx, or error when no answer came).", &["method", "endpoint", "status_class"], HTTP_BUCKETS);
    static LINODE_RETRIES: Counter = new("csi_linode_request_retries_total", "Linode API requests sent again after a transient answer (408, 429, 502, 503, 504, Linode busy, a proxy's HTML 400).", &["method", "endpoint"]);
    static LINODE_TOKEN_RELOADS: Counter = new("csi_linode_token_reloads_total", "Reads of LINODE_TOKEN_FILE after start (it changed, or the API refused the token), by outcome: ok, failed (the last good token is kept).", &["outcome"]);
    static LINODE_UNAUTHORIZED: Counter = new("csi_linode_unauthorized_total", "Linode API answers 401: the token was refused (revoked, or rotated and not read yet).", &[]);
    static LINODE_POLL_FAILURES: Counter = new("csi_linode_poll_failures_total", "Polls of the shared poller that failed transiently (429, 5xx, timeout, no answer), by kind polled; their waits went on.", &["kind"]);
    static LINODE_THROTTLED: Counter = new("csi_linode_throttled_total", "Linode API answers 429 Too Many Requests, by the token's request class (list: paginated GETs; other).", &["class"]);
    static LINODE_REMAINING: Gauge = new("csi_linode_rate_limit_remaining", "The last X-RateLimit-Remaining the Linode API sent, by request class.", &["class"]);
    static LINODE_LIMIT: Gauge = new("csi_linode_rate_limit_limit", "The last X-RateLimit-Limit the Linode API sent, by request class.", &["class"]);
    static LINODE_PENDING: Sampled = new("csi_linode_pending_waits", "Waits for a Linode object to become active that are pending now, by kind.", &["kind"]);
    static LINODE_WAIT: Histogram = new("csi_linode_wait_duration_seconds", "Waits that ended with the object active, by kind, and how long since the wait began.", &["kind"], WAIT_BUCKETS);
    static KUBE_DURATION: Histogram = new("csi_kubernetes_request_duration_seconds", "Kubernetes API requests, by request and status class.", &["request", "status_class"], HTTP_BUCKETS);
    static KUBE_ERRORS: Counter = new("csi_kubernetes_request_errors_total", "Kubernetes API requests that got no answer or a non-2xx answer, by request.", &["request"]);
    static METADATA_DURATION: Histogram = new("csi_metadata_request_duration_seconds", "Linode metadata service requests, by request and status class.", &["request", "status_class"], HTTP_BUCKETS);
    static METADATA_ERRORS: Counter = new("csi_metadata_request_errors_total", "Linode metadata service requests that got no answer or a non-2xx answer, by request.", &["request"]);
    static MOUNT_DURATION: Histogram = new("csi_node_mount_duration_seconds", "NFS mount helper runs, by outcome (ok, failed, unresolved_host, timed_out, not_run), and how long each took.", &["outcome"], MOUNT_BUCKETS);
    static UNMOUNTS_DETACHED: Counter = new("csi_node_unmounts_detached_total", "Unmounts that were detached lazily: the mount was busy, or umount did not return within its bound.", &["reason"]);
    static STAGING_REMOUNTS: Counter = new("csi_node_staging_remounts_total", "Staging mounts replaced by NodeStageVolume or NodePublishVolume, by reason: stale (ESTALE), disconnected (EIO, ENOTCONN), missing (gone while kubelet still had it staged).", &["reason"]);
    static STATVFS_STUCK: Sampled = new("csi_node_statvfs_stuck", "statvfs calls of NodeGetVolumeStats still running past their bound (each holds one thread; a dead NFS server).", &[]);
    static RESTORE_COPIES: Counter = new("csi_restore_copies_total", "Copies that filled a subdirectory volume from a snapshot (restores and clones), by outcome: ok, failed, stopped (SIGTERM or DeleteVolume; a later call resumes it).", &["outcome"]);
    static RESTORE_COPIED_FILES: Counter = new("csi_restore_copied_files_total", "Files (and symlinks and extra hard links) the copies of restores wrote, counted as each copy ends.", &[]);
    static RESTORE_COPIED_BYTES: Counter = new("csi_restore_copied_bytes_total", "Bytes of file data the copies of restores wrote, counted as each copy ends.", &[]);
    static RESTORE_RUNNING: Sampled = new("csi_restore_copies_running", "Copies filling subdirectory volumes now.", &[]);
    static RESTORE_PROGRESS_FILES: Sampled = new("csi_restore_copying_files", "Files the copies running now have written so far.", &[]);
    static RESTORE_PROGRESS_BYTES: Sampled = new("csi_restore_copying_bytes", "Bytes the copies running now have written so far.", &[]);
    static RESTORE_PROGRESS_ENTRIES: Sampled = new("csi_restore_copying_entries", "Entries (files, links and directories, made or found made by an earlier attempt) the copies running now have done so far.", &[]);
    static FILLS: Sampled = new("csi_directory_fills", "Jobs filling directory volumes now (restores and clones), by phase: starting, cloning (waiting for the temporary clone of a snapshot to become active), copying.", &["phase"]);
    static CLONE_ACTIVE: Histogram = new("csi_restore_clone_duration_seconds", "How long the temporary clones restores copy from took to become active, from when this process asked for each (or found it being made).", &[], CLONE_BUCKETS);
    static DEV_NFS_OPERATIONS: Sampled = counter("dev_nfs_operations_total", "dev role with DEV_NFS_LATENCY: file operations the emulated NFS servers served, by FUSE operation (lookup, getattr, read, write, create, setattr, ...).", &["op"]);
    static FILLS_ABANDONED: Counter = new("csi_directory_fills_abandoned_total", "Fills of directory volumes ended because the claim they were for is gone, by reason: claim_deleted, claim_replaced (deleted and made again under its name).", &["reason"]);
    static DIRECTORY_USED: Sampled = new("csi_directory_volume_used_bytes", "Bytes a directory volume's quota counts as used, as the backend last sampled them (the active controller's latest round), by volume id and claim (namespace/name, empty when unknown).", &["volume", "claim"]);
    static DIRECTORY_CAPACITY: Sampled = new("csi_directory_volume_capacity_bytes", "A directory volume's size: its quota's maximum, as the active controller's latest round read it, by volume id and claim.", &["volume", "claim"]);
    static AUTOGROW: Counter = new("csi_directory_volume_autogrow_total", "Autogrow decisions, by outcome: grown (a claim was asked to grow), no_room (its shared filesystem cannot hold the growth), at_max (at autogrow-max), refused (the class does not allow expansion). Each outcome other than grown is counted once per volume until what it is about changes.", &["outcome"]);
    static ACCOUNT_READS: Counter = new("csi_parent_account_reads_total", "Quota lists the active controller's account of a shared parent took, by reason: seed (none held yet), periodic (older than its bound), fresh (a fresh list was asked for: the upkeep sampling usage, ControllerGetVolume reporting a volume's condition, a prune confirming a pool filesystem is empty), refused (the backend refused a write to the parent), in_doubt (a write's outcome was unknown), lease (this process gained the Lease), shared (a write to a parent another cluster writes to).", &["reason"]);
    static PARENT_PROMISED: Sampled = new("csi_parent_promised_bytes", "What the quotas of each shared parent promise (the root quota aside), as the active controller's account holds them, by parent (space/filesystem).", &["parent"]);
    static PARENT_USED: Sampled = new("csi_parent_used_bytes", "What each shared parent's root quota said is used at the account's last list, by parent (space/filesystem).", &["parent"]);
    static POOL_FILESYSTEMS: Gauge = new("csi_pool_filesystems", "Filesystems of each pool of shared filesystems the driver runs, by pool and state (in_use, empty, creating), as the controller last tended them.", &["pool", "state"]);
    static POOL_CREATED: Counter = new("csi_pool_filesystems_created_total", "Pool filesystems the driver created, by pool and reason: room (no filesystem of the pool had room for a new volume), ahead (placements were using up the room of the pool's filesystems), spare (kept ready by pool-spares).", &["pool", "reason"]);
    static POOL_PRUNED: Counter = new("csi_pool_filesystems_pruned_total", "Empty pool filesystems the driver deleted after POOL_EMPTY_GRACE, by pool.", &["pool"]);
    static POOL_PLACEMENTS: Counter = new("csi_pool_placements_total", "New directory volumes placed on a pool, by pool and outcome: placed, waited (placed after waiting for a new pool filesystem), exhausted (the pool was at pool-max-filesystems and none had room).", &["pool", "outcome"]);
    static START_TIME: Computed = gauge("process_start_time_seconds", "Start time of the process since the Unix epoch, in seconds.", &[], process::start_time);
    static RESIDENT_MEMORY: Computed = gauge("process_resident_memory_bytes", "Resident memory size in bytes.", &[], process::resident_memory);
    static OPEN_FDS: Computed = gauge("process_open_fds", "Number of open file descriptors.", &[], process::open_fds);
    static MAX_FDS: Computed = gauge("process_max_fds", "Maximum number of open file descriptors.", &[], process::max_fds);
    static CPU_SECONDS: Computed = counter("process_cpu_seconds_total", "Total user and system CPU time spent in seconds.", process::cpu_seconds);
}

/// The whole exposition.
pub fn render() -> String {
    let mut out = String::with_capacity(16 * 1024);
    for family in FAMILIES {
        family.render(&mut out);
    }
    out
}

static ROLE: OnceLock<&'static str> = OnceLock::new();

/// Names the role in `csi_build_info` and shows the series of the role's
/// rare events at zero from the start, so the first 429 or the first
/// failed mount is an increase an alert can see.
pub fn init(role: Role) {
    let name = match role {
        Role::Controller => "controller",
        Role::Node => "node",
        Role::Dev => "dev",
    };
    let _ = ROLE.set(name);
    if role != Role::Node {
        for class in ["list", "other"] {
            LINODE_THROTTLED.touch(&[class]);
        }
        for outcome in ["ok", "failed"] {
            LINODE_TOKEN_RELOADS.touch(&[outcome]);
        }
        LINODE_UNAUTHORIZED.touch(&[]);
        fills::touch();
        for outcome in AUTOGROW_OUTCOMES {
            AUTOGROW.touch(&[outcome]);
        }
        for reason in ACCOUNT_REASONS {
            ACCOUNT_READS.touch(&[reason]);
        }
    }
    if role != Role::Controller {
        for outcome in MOUNT_OUTCOMES {
            MOUNT_DURATION.touch(&[outcome]);
        }
        for reason in ["busy", "timeout"] {
            UNMOUNTS_DETACHED.touch(&[reason]);
        }
        for reason in REMOUNT_REASONS {
            STAGING_REMOUNTS.touch(&[reason]);
        }
    }
}

fn build_info(emit: &mut Emit<'_>) {
    let revision = match crate::build_info::revision() {
        "" => "unknown",
        rev => rev,
    };
    emit(
        &[
            crate::build_info::DRIVER_NAME,
            env!("CARGO_PKG_VERSION"),
            revision,
            ROLE.get().copied().unwrap_or("unknown"),
        ],
        1.0,
    );
}

/// gRPC's own names for its codes (as `grpc_code` labels elsewhere show them).
fn code_name(code: grpcio::RpcStatusCode) -> &'static str {
    const NAMES: [&str; 17] = [
        "OK",
        "Canceled",
        "Unknown",
        "InvalidArgument",
        "DeadlineExceeded",
        "NotFound",
        "AlreadyExists",
        "PermissionDenied",
        "ResourceExhausted",
        "FailedPrecondition",
        "Aborted",
        "OutOfRange",
        "Unimplemented",
        "Internal",
        "Unavailable",
        "DataLoss",
        "Unauthenticated",
    ];
    usize::try_from(i32::from(code))
        .ok()
        .and_then(|i| NAMES.get(i))
        .copied()
        .unwrap_or("Unknown")
}

/// `2xx`, `4xx`, …, or `error` when no HTTP answer came.
fn status_class(status: Option<u16>) -> &'static str {
    match status {
        Some(100..=199) => "1xx",
        Some(200..=299) => "2xx",
        Some(300..=399) => "3xx",
        Some(400..=499) => "4xx",
        Some(500..=599) => "5xx",
        _ => "error",
    }
}

fn is_error(status: Option<u16>) -> bool {
    !matches!(status, Some(200..=299))
}

/// A source for a label-less [`Sampled`] gauge from a function that answers
/// `None` once what it watches is gone.
fn single(mut read: impl FnMut() -> Option<usize> + Send + 'static) -> registry::Source {
    Box::new(move |emit| match read() {
        Some(n) => {
            emit(&[], n as f64);
            true
        }
        None => false,
    })
}

/// An RPC answered with `code` after `elapsed` (the reply helper calls it).
pub fn rpc_answered(method: &str, code: grpcio::RpcStatusCode, elapsed: Duration) {
    RPC_DURATION.observe(&[method, code_name(code)], elapsed.as_secs_f64());
}

/// RPCs in flight, asked at each scrape until `read` answers `None`.
pub fn watch_rpcs_in_flight(read: impl FnMut() -> Option<usize> + Send + 'static) {
    RPC_IN_FLIGHT.register(single(read));
}

/// Parked RPCs, asked at each scrape until `read` answers `None`.
pub fn watch_rpcs_parked(read: impl FnMut() -> Option<usize> + Send + 'static) {
    RPC_PARKED.register(single(read));
}

/// One HTTP attempt to the Linode API; `status` is `None` when no answer
/// came. `endpoint` is the path's template (ids as `{id}`, no query), so
/// the series stay few.
pub fn linode_request(method: &str, endpoint: &str, status: Option<u16>, elapsed: Duration) {
    LINODE_DURATION.observe(
        &[method, endpoint, status_class(status)],
        elapsed.as_secs_f64(),
    );
}

/// A read of the token file after start, and whether it gave a token.
pub fn linode_token_reload(ok: bool) {
    LINODE_TOKEN_RELOADS.inc(&[if ok { "ok" } else { "failed" }]);
}

/// A 401 from the Linode API.
pub fn linode_unauthorized() {
    LINODE_UNAUTHORIZED.inc(&[]);
}

pub fn linode_retry(method: &str, endpoint: &str) {
    LINODE_RETRIES.inc(&[method, endpoint]);
}

/// What one Linode answer said about the token's budget of `class`.
pub fn linode_budget(
    class: &'static str,
    throttled: bool,
    limit: Option<u64>,
    remaining: Option<u64>,
) {
    if throttled {
        LINODE_THROTTLED.inc(&[class]);
    }
    if let Some(limit) = limit {
        LINODE_LIMIT.set(&[class], limit as f64);
    }
    if let Some(remaining) = remaining {
        LINODE_REMAINING.set(&[class], remaining as f64);
    }
}

/// Pending waits by kind, asked at each scrape until `read` answers `None`.
pub fn watch_pending_waits(
    mut read: impl FnMut() -> Option<Vec<(&'static str, usize)>> + Send + 'static,
) {
    LINODE_PENDING.register(Box::new(move |emit| match read() {
        Some(kinds) => {
            for (kind, n) in kinds {
                emit(&[kind], n as f64);
            }
            true
        }
        None => false,
    }));
}

/// A poll of `kind` objects failed transiently; its waits go on.
pub fn poll_failed(kind: &'static str) {
    LINODE_POLL_FAILURES.inc(&[kind]);
}

/// A wait for a `kind` object ended with it active after `waited`.
pub fn wait_ended_active(kind: &'static str, waited: Duration) {
    LINODE_WAIT.observe(&[kind], waited.as_secs_f64());
}

/// One Kubernetes API request (`request` names it, e.g. `get_node`).
pub fn kube_request(request: &'static str, status: Option<u16>, elapsed: Duration) {
    KUBE_DURATION.observe(&[request, status_class(status)], elapsed.as_secs_f64());
    if is_error(status) {
        KUBE_ERRORS.inc(&[request]);
    }
}

/// One metadata service request (`token` or `instance`).
pub fn metadata_request(request: &'static str, status: Option<u16>, elapsed: Duration) {
    METADATA_DURATION.observe(&[request, status_class(status)], elapsed.as_secs_f64());
    if is_error(status) {
        METADATA_ERRORS.inc(&[request]);
    }
}

/// How a mount helper run ended.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub enum MountOutcome {
    Ok,
    /// It exited non-zero.
    Failed,
    /// It exited non-zero because the server's name did not resolve.
    UnresolvedHost,
    /// It was killed at NFS_MOUNT_TIMEOUT.
    TimedOut,
    /// It could not be started.
    NotRun,
}

const MOUNT_OUTCOMES: [&str; 5] = ["ok", "failed", "unresolved_host", "timed_out", "not_run"];

impl MountOutcome {
    fn label(self) -> &'static str {
        MOUNT_OUTCOMES[self as usize]
    }
}

pub fn mount_helper(outcome: MountOutcome, elapsed: Duration) {
    MOUNT_DURATION.observe(&[outcome.label()], elapsed.as_secs_f64());
}

/// Why an unmount was detached lazily.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub enum Detached {
    Busy,
    Timeout,
}

pub fn unmount_detached(why: Detached) {
    UNMOUNTS_DETACHED.inc(&[match why {
        Detached::Busy => "busy",
        Detached::Timeout => "timeout",
    }]);
}

/// Why a staging mount was replaced.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub enum Remount {
    Stale,
    Disconnected,
    Missing,
}

const REMOUNT_REASONS: [&str; 3] = ["stale", "disconnected", "missing"];

impl Remount {
    pub fn label(self) -> &'static str {
        REMOUNT_REASONS[self as usize]
    }
}

pub fn staging_remounted(why: Remount) {
    STAGING_REMOUNTS.inc(&[why.label()]);
}

/// Stuck statvfs calls, asked at each scrape until `read` answers `None`.
pub fn watch_stuck_statvfs(read: impl FnMut() -> Option<usize> + Send + 'static) {
    STATVFS_STUCK.register(single(read));
}

/// One directory volume's usage as the metrics show it.
pub struct DirectoryUsage {
    pub volume: String,
    pub claim: String,
    pub used: Option<i64>,
    pub capacity: i64,
}

/// The directory volumes' usage, asked at each scrape until `read`
/// answers `None` (the controller is gone). A volume whose usage the
/// backend has not counted yet has a capacity series only.
pub fn watch_directory_volumes(
    read: impl Fn() -> Option<Vec<DirectoryUsage>> + Send + Sync + 'static,
) {
    let read = std::sync::Arc::new(read);
    let r = read.clone();
    DIRECTORY_USED.register(Box::new(move |emit| {
        let Some(all) = r() else {
            return false;
        };
        for v in all {
            if let Some(used) = v.used {
                emit(&[&v.volume, &v.claim], used as f64);
            }
        }
        true
    }));
    DIRECTORY_CAPACITY.register(Box::new(move |emit| {
        let Some(all) = read() else {
            return false;
        };
        for v in all {
            emit(&[&v.volume, &v.claim], v.capacity as f64);
        }
        true
    }));
}

/// Why an account of a shared parent was listed again, as the metric
/// names it; every one starts at 0.
pub const ACCOUNT_REASONS: [&str; 7] = [
    "seed", "periodic", "fresh", "refused", "in_doubt", "lease", "shared",
];

/// A quota list an account of a shared parent took, for `reason` (one of
/// `ACCOUNT_REASONS`).
pub fn account_read(reason: &str) {
    ACCOUNT_READS.inc(&[reason]);
}

/// One shared parent's account, as a scrape shows it.
pub struct ParentFigures {
    pub parent: String,
    pub promised: i64,
    pub used: Option<i64>,
}

/// The accounts of shared parents, asked at each scrape until `read`
/// answers `None` (the controller is gone).
pub fn watch_parents(read: impl Fn() -> Option<Vec<ParentFigures>> + Send + Sync + 'static) {
    let read = std::sync::Arc::new(read);
    let r = read.clone();
    PARENT_PROMISED.register(Box::new(move |emit| {
        let Some(all) = r() else {
            return false;
        };
        for p in all {
            emit(&[&p.parent], p.promised as f64);
        }
        true
    }));
    PARENT_USED.register(Box::new(move |emit| {
        let Some(all) = read() else {
            return false;
        };
        for p in all {
            if let Some(used) = p.used {
                emit(&[&p.parent], used as f64);
            }
        }
        true
    }));
}

/// What an autogrow decision came to.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub enum AutogrowOutcome {
    Grown,
    NoRoom,
    AtMax,
    Refused,
}

const AUTOGROW_OUTCOMES: [&str; 4] = ["grown", "no_room", "at_max", "refused"];

pub fn autogrow(outcome: AutogrowOutcome) {
    AUTOGROW.inc(&[AUTOGROW_OUTCOMES[outcome as usize]]);
}

/// Why a pool filesystem was created.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub enum PoolGrowth {
    Room,
    Ahead,
    Spare,
}

pub fn pool_filesystem_created(pool: &str, why: PoolGrowth) {
    let reason = match why {
        PoolGrowth::Room => "room",
        PoolGrowth::Ahead => "ahead",
        PoolGrowth::Spare => "spare",
    };
    POOL_CREATED.inc(&[pool, reason]);
}

pub fn pool_filesystem_pruned(pool: &str) {
    POOL_PRUNED.inc(&[pool]);
}

/// How a placement on a pool ended.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub enum Placement {
    Placed,
    Waited,
    Exhausted,
}

pub fn pool_placement(pool: &str, outcome: Placement) {
    let outcome = match outcome {
        Placement::Placed => "placed",
        Placement::Waited => "waited",
        Placement::Exhausted => "exhausted",
    };
    POOL_PLACEMENTS.inc(&[pool, outcome]);
}

/// A pool's filesystems as last tended: in use, empty, being created.
pub fn pool_filesystems(pool: &str, in_use: usize, empty: usize, creating: usize) {
    for (state, n) in [("in_use", in_use), ("empty", empty), ("creating", creating)] {
        POOL_FILESYSTEMS.set(&[pool, state], n as f64);
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn code_names_and_status_classes() {
        assert_eq!(code_name(grpcio::RpcStatusCode::OK), "OK");
        assert_eq!(
            code_name(grpcio::RpcStatusCode::FAILED_PRECONDITION),
            "FailedPrecondition"
        );
        assert_eq!(
            code_name(grpcio::RpcStatusCode::UNAUTHENTICATED),
            "Unauthenticated"
        );
        assert_eq!(code_name(grpcio::RpcStatusCode::from(99)), "Unknown");
        assert_eq!(status_class(Some(204)), "2xx");
        assert_eq!(status_class(Some(429)), "4xx");
        assert_eq!(status_class(None), "error");
        assert_eq!(MountOutcome::UnresolvedHost.label(), "unresolved_host");
        assert_eq!(MountOutcome::NotRun.label(), "not_run");
    }

    #[test]
    fn every_family_is_rendered_once_with_its_type() {
        let text = render();
        for line in text.lines().filter(|l| l.starts_with("# TYPE ")) {
            let name = line.split(' ').nth(2).unwrap();
            assert_eq!(
                text.matches(&format!("# TYPE {name} ")).count(),
                1,
                "{name}"
            );
        }
        assert_eq!(text.matches("# TYPE ").count(), FAMILIES.len());
        assert!(text.contains("\ncsi_build_info{driver=\"linodenfs.csi.linode.com\","));
    }
}
