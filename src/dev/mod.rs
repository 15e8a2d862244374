//! `dev` mode: the whole driver in one process on one machine. It starts the
//! fake Linode, Kubernetes and metadata services on loopback, points the REAL
//! clients at them, serves Identity + Controller + Node on one socket, and
//! emulates NFS exports with bind mounts of directories under one state
//! directory. It must not change how the controller or node behave: only
//! what they are wired to.

pub mod exports;
mod mounter;
pub mod network;
mod sampled;
mod shown;
mod snapshot_copy;
mod usage;

use crate::client::DEV_SPACE_LABEL;
use crate::config::{Config, DevQuirk, LinodeConfig};
use crate::controller::keys::SPACE_LABEL;
use crate::fake::{
    CloneRate, FakeEvent, FakeKube, FakeLinode, FakeMetadata, FakeNode, FaultProfile,
    FilesystemSeed, InstanceSeed, Lifecycle, QuotaBehaviour, RateLimit, Seed, SpaceSeed, TagFilter,
};
use crate::identity::DRIVER_NAME;
use crate::kube::KubeClient;
use crate::metadata::MetadataClient;
use crate::mount::LinuxMounter;
use crate::node::{self, NodeDeps};
use crate::rpc::Rpc;
use crate::secret::Secret;
use crate::wiring::{self, Started};
use exports::Exports;
use mounter::DevMounter;
use std::path::{Path, PathBuf};
use std::sync::Arc;
use std::time::Duration;

pub const DEV_SPACE_ID: u64 = 1;
pub const DEV_REGION: &str = "us-ord";
pub const DEV_NODE: &str = "dev-node";
pub const DEV_LINODE_ID: u64 = 424242;
/// The filesystem dev mode seeds in its Space for `subdirectory` volumes
/// (`shared-filesystem-label: dev-shared`): made by "the admin", so it does
/// not carry the driver's mark and is never listed as a volume.
pub const DEV_SHARED_LABEL: &str = "dev-shared";
pub const DEV_SHARED_CAPACITY_BYTES: i64 = 10 << 30;
pub const DEV_SHARED_ID: u64 = 100;
/// The bearer token of dev mode's fake Linode API: a fixed stand-in, so a
/// tool can talk to the fake the driver uses (its URL is logged at start).
pub const DEV_LINODE_TOKEN: &str = "dev-linode-token";
/// Marks a directory as a dev state dir, so cleanup never removes anything else.
const MARKER: &str = ".linode-nfs-csi-dev";
const KUBE_TOKEN: &str = "dev-kube-token";
/// `slow-clones`: 2 s before a clone's first byte, then 1 MiB a second,
/// at most a minute more. Even a clone of a nearly empty tree stays
/// `creating` long enough to watch, or to kill the driver mid-clone; one of
/// a few MiB visibly longer.
const SLOW_CLONES: CloneRate = CloneRate {
    setup: Duration::from_secs(2),
    bytes_per_second: 1 << 20,
    cap: Duration::from_secs(60),
};
/// Set on the re-executed process so it does not try again.
const REEXEC_MARK: &str = "LINODE_NFS_CSI_DEV_USERNS";

/// Bind mounts need root. Without it, dev mode re-executes itself as root
/// of a new user + mount namespace (util-linux `unshare`); when the kernel
/// or the system forbids that, it says what to do instead. Call before any
/// thread exists: on success this does not return.
pub fn ensure_mount_privileges() -> Result<(), String> {
    // SAFETY: geteuid has no preconditions.
    if unsafe { libc::geteuid() } == 0 || std::env::var_os(REEXEC_MARK).is_some() {
        return Ok(());
    }
    let usable = std::process::Command::new("unshare")
        .args(["--user", "--map-root-user", "--mount", "true"])
        .stderr(std::process::Stdio::null())
        .status()
        .map(|s| s.success())
        .unwrap_or(false);
    if !usable {
        return Err(
            "dev mode mounts (bind mounts emulate NFS) and needs root, or unprivileged user \
             namespaces with util-linux `unshare`; neither is available: run it as root (sudo)"
                .to_string(),
        );
    }
    let exe = std::env::current_exe()
        .map_err(|e| format!("dev mode: cannot find own executable: {e}"))?;
    use std::os::unix::process::CommandExt;
    let err = std::process::Command::new("unshare")
        .args([
            "--user",
            "--map-root-user",
            "--mount",
            "--propagation",
            "private",
            "--",
        ])
        .arg(exe)
        .args(std::env::args_os().skip(1))
        .env(REEXEC_MARK, "1")
        .exec();
    Err(format!("dev mode: re-executing under unshare: {err}"))
}

/// Everything dev mode runs beside the gRPC services; dropping it unmounts
/// what the node mounted, stops the fakes and removes the state directory.
struct DevResources {
    mounter: Arc<DevMounter>,
    state_dir: PathBuf,
    linode: FakeLinode,
    _kube: FakeKube,
    _metadata: FakeMetadata,
}

impl Drop for DevResources {
    fn drop(&mut self) {
        log::info!("dev: {}", api_cost(&self.linode));
        let served = network::totals();
        if !served.is_empty() {
            let each: Vec<String> = served.iter().map(|(op, n)| format!("{op} {n}")).collect();
            log::info!(
                "dev: the emulated NFS servers served {} operations: {}",
                served.iter().map(|(_, n)| n).sum::<u64>(),
                each.join(", ")
            );
        }
        self.mounter.unmount_all();
        if self.state_dir.join(MARKER).exists() {
            if let Err(e) = std::fs::remove_dir_all(&self.state_dir) {
                log::warn!("dev: remove {}: {e}", self.state_dir.display());
            }
        }
    }
}

/// What the session cost in Linode API calls, on one line: a real token's
/// rate limits count exactly these.
fn api_cost(linode: &FakeLinode) -> String {
    let counts = linode.request_counts();
    let total: u64 = counts.values().sum();
    let each: Vec<String> = counts
        .iter()
        .map(|(call, n)| format!("{call} {n}"))
        .collect();
    let throttled = linode.throttled();
    format!(
        "the fake Linode API served {total} requests: {}{}",
        if each.is_empty() {
            "none".to_string()
        } else {
            each.join(", ")
        },
        if throttled == 0 {
            String::new()
        } else {
            format!("; and refused {throttled} over its rate limits (DEV_RATE_LIMITS)")
        }
    )
}

fn seed(activation_delay: Duration) -> Seed {
    let mut seed = Seed {
        regions: vec![DEV_REGION.to_string()],
        activation_delay_ms: activation_delay.as_millis() as u64,
        ..Seed::default()
    }
    .with_space(SpaceSeed::new(DEV_SPACE_ID, DEV_SPACE_LABEL))
    .with_instance(InstanceSeed {
        id: DEV_LINODE_ID,
        label: DEV_NODE.to_string(),
        region: DEV_REGION.to_string(),
        interface_generation: None,
        ipv6: None,
        vpcs: Vec::new(),
    });
    seed.token = DEV_LINODE_TOKEN.to_string();
    seed
}

/// The seeded filesystems: the foreign ones when a quirk wants them (they
/// take the first ids), then the shared parent.
fn seed_filesystems(quirks: &[DevQuirk]) -> Vec<FilesystemSeed> {
    let foreign = quirks.iter().any(|q| {
        matches!(
            q,
            DevQuirk::ForeignFilesystems | DevQuirk::TagFilterRefused | DevQuirk::TagFilterIgnored
        )
    });
    let mut filesystems = if foreign {
        FilesystemSeed::foreign(DEV_SPACE_ID, DEV_REGION)
    } else {
        Vec::new()
    };
    filesystems.push(FilesystemSeed {
        max_capacity_bytes: DEV_SHARED_CAPACITY_BYTES,
        // Below the ids the fake hands out, so the volumes a user makes
        // start at 101 whether or not the parent is there.
        id: Some(DEV_SHARED_ID),
        ..FilesystemSeed::new(DEV_SPACE_ID, DEV_SHARED_LABEL, DEV_REGION)
    });
    filesystems
}

/// The fake's quota API as the quota quirks describe it (none: the
/// contract as linodego describes it).
fn quota_behaviour(quirks: &[DevQuirk]) -> QuotaBehaviour {
    let on = |q: DevQuirk| quirks.contains(&q);
    QuotaBehaviour {
        missing: on(DevQuirk::NoQuotas),
        refused: on(DevQuirk::QuotaRefused),
        path_with_export: on(DevQuirk::QuotaPathWithExport),
        lifecycle: if on(DevQuirk::QuotaStuckUpdating) {
            Some(Lifecycle::NeverActive)
        } else if on(DevQuirk::QuotaError) {
            Some(Lifecycle::StickInError)
        } else {
            None
        },
        limit: quirks.iter().find_map(|q| match q {
            DevQuirk::QuotaLimit(n) => Some(*n),
            _ => None,
        }),
        needs_directory: on(DevQuirk::QuotaNeedsDirectory),
    }
}

/// Mirrors the fake backend's objects onto the export directories.
fn mirror(exports: &Exports, event: &FakeEvent) {
    let done = match event {
        FakeEvent::FilesystemActive {
            export,
            source_snapshot_id,
            ..
        } => exports.restore_missing(export, *source_snapshot_id),
        FakeEvent::CloneCreated {
            snapshot_id,
            export,
            ..
        } => exports.restore(*snapshot_id, export),
        FakeEvent::SnapshotCreated {
            snapshot_id,
            label,
            source_export,
            ..
        } => exports.snapshot(source_export, *snapshot_id, label),
        FakeEvent::FilesystemDeleted { export, .. } => exports.remove(export),
        FakeEvent::SnapshotDeleted {
            snapshot_id,
            label,
            source_export,
        } => exports.remove_snapshot(*snapshot_id, source_export, label),
    };
    if let Err(e) = done {
        log::warn!("dev: mirroring {event:?}: {e}");
    }
}

/// Makes `exports` the NFS side of `linode`: each filesystem, snapshot and
/// clone the fake makes or deletes is mirrored onto their directories, the
/// fake's quota usage is read from them, and every active filesystem gets
/// its export directory. Dev mode's, and a test's that runs the controller
/// role against its own fake.
pub fn emulate_exports(linode: &FakeLinode, exports: Arc<Exports>) {
    let observed = exports.clone();
    linode.set_observer(Arc::new(move |event| mirror(&observed, event)));
    linode.set_export_content(exports.clone());
    recreate_exports(linode, &exports);
}

/// Gives every active filesystem its export directory, keeping what one
/// holds: the process may have been killed after the state file recorded a
/// filesystem active and before its directory was made, and filesystems
/// seeded or loaded as active never announce themselves.
fn recreate_exports(linode: &FakeLinode, exports: &Exports) {
    for (export, snapshot) in linode.active_clones() {
        if let Err(e) = exports.restore_missing(&export, snapshot) {
            log::warn!("dev: export {export}: {e}");
        }
    }
}

pub fn start(config: &Config, rpc: &Rpc) -> Result<Started, String> {
    let dev = config.dev.as_ref().ok_or("dev settings missing")?;
    let state = dev.state_dir.clone();
    let fail = |what: &str, e: crate::Error| format!("dev mode: {what}: {}", e.message());
    std::fs::create_dir_all(&state)
        .map_err(|e| format!("DEV_STATE_DIR {}: {e}", state.display()))?;
    std::fs::write(state.join(MARKER), "")
        .map_err(|e| format!("DEV_STATE_DIR {}: {e}", state.display()))?;
    let exports = Exports::new(&state).map_err(|e| fail("exports", e))?;
    let exports = Arc::new(
        exports
            .showing_snapshots(dev.quirks.contains(&DevQuirk::SnapshotDirectory))
            .sampled_every(dev.quota_sample),
    );

    let mut linode_seed = seed(dev.activation_delay);
    linode_seed.filesystems = seed_filesystems(&dev.quirks);
    let linode = FakeLinode::start_persistent(linode_seed, &state.join("linode.json"))
        .map_err(|e| fail("fake Linode API", e))?;
    log::info!("dev: the fake Linode API serves {}", linode.url());
    // First of all: every setter below advances the fake's clocks, and a
    // filesystem of the state file that turns active then must get its
    // export directory.
    emulate_exports(&linode, exports.clone());
    exports
        .show_snapshots(&linode.snapshot_exports())
        .map_err(|e| fail("snapshot directories", e))?;
    if !dev.faults.is_empty() {
        // `slow` and `drop` hold a request past the client's timeout.
        let hold = dev.request_timeout + Duration::from_secs(1);
        let profile = FaultProfile::parse(&dev.faults, hold)
            .map_err(|e| format!("DEV_FAULTS: {}", e.message()))?;
        linode.set_fault_profile(Some(profile));
        if let Some(seed) = dev.fault_seed {
            linode.set_fault_seed(seed);
        }
    }
    // Every knob is set either way: a state file left by a session with
    // other quirks must not carry them over.
    let on = |q: DevQuirk| dev.quirks.contains(&q);
    linode.set_omit_source_snapshot_id(on(DevQuirk::NoSourceSnapshotId));
    linode.set_snapshots_held_by_clones(on(DevQuirk::SnapshotsHeldByClones));
    linode.set_filesystem_id_filter(!on(DevQuirk::NoIdFilter));
    linode.set_tag_filter(if on(DevQuirk::TagFilterRefused) {
        TagFilter::Refused
    } else if on(DevQuirk::TagFilterIgnored) {
        TagFilter::Ignored
    } else {
        TagFilter::Honoured
    });
    linode.set_filesystem_policy_endpoints(!on(DevQuirk::NoFilesystemPolicy));
    linode.set_capacity_in_stats(on(DevQuirk::CapacityInStats));
    linode.set_null_fields(on(DevQuirk::NullFields));
    linode.set_html_errors(on(DevQuirk::HtmlErrors));
    linode.set_quota_behaviour(quota_behaviour(&dev.quirks));
    linode.set_clone_rate(on(DevQuirk::SlowClones).then_some(SLOW_CLONES));
    linode.set_failing_clones(
        dev.quirks
            .iter()
            .find_map(|q| match q {
                DevQuirk::FailingClones(n) => Some(*n),
                _ => None,
            })
            .unwrap_or(0),
    );
    if let Some(limits) = dev.rate_limits {
        linode.set_rate_limit(Some(RateLimit {
            list: limits.list,
            other: limits.other,
            window: limits.window,
        }));
        log::info!(
            "dev: the fake Linode API allows {} paginated and {} other requests per {:?}",
            limits.list,
            limits.other,
            limits.window
        );
    }
    let kube = FakeKube::start(KUBE_TOKEN).map_err(|e| fail("fake Kubernetes API", e))?;
    kube.set_claim_list_delay(dev.claim_list_delay);
    kube.add_node(
        FakeNode::new(DEV_NODE)
            .label("topology.kubernetes.io/region", DEV_REGION)
            .provider_id(&format!("linode://{DEV_LINODE_ID}")),
    );
    let metadata = FakeMetadata::start(DEV_LINODE_ID, DEV_REGION)
        .map_err(|e| fail("fake metadata service", e))?;
    let kubeconfig = write_kubeconfig(&state, &kube.url())?;
    let kube_client =
        || KubeClient::new(Some(&kubeconfig), None).map_err(|e| fail("Kubernetes client", e));

    let linode_config = LinodeConfig {
        url: linode.url(),
        api_version: "v4beta".to_string(),
        token: Secret::new(linode.token()),
        token_file: None,
        ca_file: None,
        request_timeout: dev.request_timeout,
    };
    let mut mounter = DevMounter::new(
        LinuxMounter::new(config.nfs_mount_helper.clone(), config.nfs_mount_timeout),
        exports,
    );
    if let Some(latency) = dev.nfs_latency {
        let network = network::Network {
            latency,
            ..network::Network::default()
        };
        log::info!(
            "dev: NFS mounts are served across an emulated network: {latency:?} a round trip, {} requests at once per mount, {} MiB/s; touch {} to make it stop answering",
            network.slots,
            network.bandwidth >> 20,
            state.join(HUNG).display()
        );
        mounter = mounter.across(network, config.nfs_mount_timeout);
        crate::metrics::watch_dev_nfs(network::totals);
        watch_hang(&state);
    }
    let mounter = Arc::new(mounter);
    let mut services = wiring::controller_service_with(
        config,
        &linode_config,
        kube_client()?,
        rpc,
        mounter.clone(),
        MetadataClient::new(&metadata.url(), Duration::from_secs(2)),
    )?;
    services.push(node::service(
        NodeDeps {
            mounter: mounter.clone(),
            node_name: DEV_NODE.to_string(),
            metadata: MetadataClient::new(&metadata.url(), Duration::from_secs(2)),
            kube: Some(kube_client()?),
        },
        rpc.clone(),
    ));

    let storage_class = write_storage_class(&state)?;
    let banner = banner(config, &state, &storage_class);
    Ok(Started {
        services,
        resources: Box::new(DevResources {
            mounter,
            state_dir: state,
            linode,
            _kube: kube,
            _metadata: metadata,
        }),
        banner: Some(banner),
    })
}

/// The file whose presence makes every emulated NFS server stop answering.
const HUNG: &str = "nfs-hung";

/// Hangs the emulated NFS servers while `<state>/nfs-hung` exists, looked
/// at every 100 ms, until the state directory is gone.
fn watch_hang(state: &Path) {
    let (flag, dir) = (state.join(HUNG), state.to_path_buf());
    let watch = move || {
        let mut hung = false;
        while dir.exists() {
            let now = flag.exists();
            if now != hung {
                log::info!(
                    "dev: the emulated NFS servers {}",
                    if now {
                        "stop answering"
                    } else {
                        "answer again"
                    }
                );
                network::set_hung(now);
                hung = now;
            }
            std::thread::sleep(Duration::from_millis(100));
        }
        network::set_hung(false);
    };
    if let Err(e) = std::thread::Builder::new()
        .name("nfs hang watch".into())
        .spawn(watch)
    {
        log::warn!(
            "dev: {} will not be watched: {e}",
            state.join(HUNG).display()
        );
    }
}

fn write_kubeconfig(state: &Path, server: &str) -> Result<PathBuf, String> {
    let path = state.join("kubeconfig");
    let text = format!(
        "apiVersion: v1\nkind: Config\ncurrent-context: dev\nclusters:\n- name: dev\n  cluster:\n    server: {server}\n\
         contexts:\n- name: dev\n  context:\n    cluster: dev\n    user: dev\nusers:\n- name: dev\n  user:\n    token: {KUBE_TOKEN}\n"
    );
    std::fs::write(&path, text).map_err(|e| format!("dev mode: write {}: {e}", path.display()))?;
    Ok(path)
}

fn write_storage_class(state: &Path) -> Result<PathBuf, String> {
    let path = state.join("storageclass.yaml");
    let text = format!(
        "apiVersion: storage.k8s.io/v1\nkind: StorageClass\nmetadata:\n  name: linode-nfs-dev\n\
         provisioner: {DRIVER_NAME}\nparameters:\n  {SPACE_LABEL}: {DEV_SPACE_LABEL}\n\
         reclaimPolicy: Delete\nallowVolumeExpansion: false\n"
    );
    std::fs::write(&path, text).map_err(|e| format!("dev mode: write {}: {e}", path.display()))?;
    Ok(path)
}

fn banner(config: &Config, state: &Path, storage_class: &Path) -> String {
    let socket = match &config.endpoint {
        crate::config::Endpoint::Unix(p) => format!("unix://{}", p.display()),
        crate::config::Endpoint::Tcp(a) => format!("tcp://{a}"),
    };
    let me = std::env::current_exe()
        .map(|p| p.display().to_string())
        .unwrap_or_else(|_| "linode-nfs-csi".into());
    let mnt = state.join("mnt");
    let mnt = mnt.display();
    // The line a fake (or real) kubelet's registry directory needs.
    let registration = match &config.registration {
        Some(r) => format!(
            "kubelet:       registration socket {} (announces {})\n",
            crate::registration::socket_path(&r.dir).display(),
            r.endpoint.display()
        ),
        None => String::new(),
    };
    let metrics = match crate::metrics::endpoint::serving_url() {
        Some(url) => format!("metrics:       {url}\n"),
        None => String::new(),
    };
    format!(
        "\nlinode-nfs-csi dev mode is serving Identity + Controller + Node\n\
         socket:        {socket}\n\
         {registration}\
         {metrics}\
         storage space: id {DEV_SPACE_ID}, label {DEV_SPACE_LABEL:?}, region {DEV_REGION}\n\
         shared fs:     label {DEV_SHARED_LABEL:?} ({shared_gib} GiB) for volume-type: subdirectory\n\
         node:          {DEV_NODE} (Linode id {DEV_LINODE_ID})\n\
         StorageClass:  {sc}\n\
         state dir:     {state} (removed on exit)\n\
         mounts:        {mounts}\n\
         \nTry it (another shell):\n\
         \x20 export CSI_ENDPOINT={socket}\n\
         \x20 {me} client create-volume pvc-demo --size 1Gi\n\
         \x20 {me} client stage {DEV_SPACE_ID}/<fs-id> {mnt}/staging\n\
         \x20 {me} client publish {DEV_SPACE_ID}/<fs-id> {mnt}/staging {mnt}/pod-a\n\
         \x20 {me} client stats {DEV_SPACE_ID}/<fs-id> {mnt}/pod-a\n\
         \x20 {me} client unpublish {DEV_SPACE_ID}/<fs-id> {mnt}/pod-a\n\
         \x20 {me} client unstage {DEV_SPACE_ID}/<fs-id> {mnt}/staging\n\
         \x20 {me} client delete-volume {DEV_SPACE_ID}/<fs-id>\n\
         Stop with Ctrl-C (SIGINT) or SIGTERM: everything mounted is unmounted.\n",
        sc = storage_class.display(),
        shared_gib = DEV_SHARED_CAPACITY_BYTES >> 30,
        state = state.display(),
        mounts = if std::env::var_os(REEXEC_MARK).is_some() {
            format!(
                "in this process's user+mount namespace (see them: nsenter -U -m -t {})",
                std::process::id()
            )
        } else {
            "in the host mount namespace, all unmounted on exit".to_string()
        },
    )
}
