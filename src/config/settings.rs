//! The production settings: what the controller and node roles run with
//! ([`Config`] and the types of its fields) and how each documented
//! variable of `table.rs` is checked against the role, the first mistake
//! named in one line. The dev role's own variables are `dev.rs`'s; this
//! file only asks it for them. It must not parse the command line.

use super::address::{Endpoint, ListenAddress};
use super::dev::{self, DevConfig};
use super::lease::LeaseSettings;
use super::parse::{parse_endpoint, parse_listen_address, parse_plugin_endpoint, parse_quantity};
use super::read::{ConfigError, Lookup};
use crate::cluster_id::ClusterId;
use crate::secret::Secret;
use std::path::PathBuf;
use std::time::Duration;

/// The bounds of the jobs that fill directory volumes.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub struct FillSettings {
    /// `FILL_TIMEOUT`: how long a fill job may go on in all.
    pub timeout: Duration,
    /// `FILL_PROGRESS_INTERVAL`: how often a fill tells its claim, and
    /// the claims of the fills running are listed.
    pub progress_interval: Duration,
    /// `FILL_CLAIM_GRACE`: how long a fill's claim may be missing.
    pub claim_grace: Duration,
}

/// The in-cluster service-account directory (its token, CA and namespace).
pub const SERVICE_ACCOUNT_DIR: &str = "/var/run/secrets/kubernetes.io/serviceaccount";

/// Which gRPC services this process serves.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub enum Role {
    Controller,
    Node,
    /// Controller + Node against embedded fakes, for laptops and conformance.
    Dev,
}

/// How nodes are admitted to a filesystem (see behaviour.md, access policy modes).
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub enum AccessPolicyMode {
    /// The Space's VPC ACL admits the cluster; no per-node attach.
    Space,
    /// ControllerPublish adds each node's Linode id to the filesystem ACL.
    Node,
}

/// `VOLUME_EXPANSION`: whether ControllerExpandVolume is offered. The
/// capability is plugin-wide while the volume type is per class, so it is
/// the admin's choice (controller and dev roles).
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub enum VolumeExpansion {
    /// Not advertised; the RPC is Unimplemented.
    Off,
    /// Advertised: `subdirectory` volumes grow by a quota update, a whole
    /// filesystem's expansion is FailedPrecondition.
    Subdirectory,
}

/// Settings of the Linode API client (controller and dev roles).
#[derive(Debug, Clone)]
pub struct LinodeConfig {
    pub url: String,
    pub api_version: String,
    /// A credential: it shows as `***`.
    pub token: Secret,
    /// Where `token` was read from, to read it again (`LINODE_TOKEN_FILE`).
    pub token_file: Option<PathBuf>,
    pub ca_file: Option<PathBuf>,
    pub request_timeout: Duration,
}

/// Registration with kubelet's plugin watcher, done by the driver itself
/// instead of the node-driver-registrar sidecar (node and dev roles).
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct RegistrationConfig {
    /// kubelet's registry directory (`KUBELET_REGISTRATION_DIR`).
    pub dir: PathBuf,
    /// The CSI socket path announced to kubelet: `KUBELET_PLUGIN_ENDPOINT`,
    /// else the `CSI_ENDPOINT` path.
    pub endpoint: PathBuf,
}

#[derive(Debug, Clone)]
pub struct Config {
    pub role: Role,
    pub endpoint: Endpoint,
    /// Present for the controller role only; the node never sees the token.
    pub linode: Option<LinodeConfig>,
    /// The controller's election (controller and dev roles).
    pub lease: Option<LeaseSettings>,
    /// `CLUSTER_ID`; unset, the controller derives it from the cluster.
    pub cluster_id: Option<ClusterId>,
    /// `LINODE_WAIT_TIMEOUT`, for the real client and dev mode's alike.
    pub wait_timeout: Duration,
    pub space_cache_ttl: Duration,
    /// `MAINTENANCE_INTERVAL`: zero tends nothing in the background.
    pub maintenance_interval: Duration,
    /// `POOL_EMPTY_GRACE`.
    pub pool_empty_grace: Duration,
    /// `FILL_TIMEOUT`, `FILL_PROGRESS_INTERVAL`, `FILL_CLAIM_GRACE`.
    pub fill: FillSettings,
    /// `ACL_CACHE_MAX_AGE` (controller, node mode).
    pub acl_cache_max_age: Duration,
    pub access_policy_mode: AccessPolicyMode,
    pub default_capacity_bytes: i64,
    pub volume_expansion: VolumeExpansion,
    /// `SHARE_MOUNT_DIR`: where the controller mounts the shared parents of
    /// `subdirectory` volumes (dev mode: `<state dir>/shares`).
    pub share_mount_dir: PathBuf,
    /// `COPY_THREADS`: files a restore into a directory copies at once.
    pub copy_threads: usize,
    pub node_name: Option<String>,
    pub kubeconfig: Option<PathBuf>,
    /// The in-cluster API server, `https://$KUBERNETES_SERVICE_HOST:$KUBERNETES_SERVICE_PORT`
    /// (kubelet sets both in every pod; no flag); `None` outside a cluster.
    pub kube_service: Option<String>,
    pub metadata_url: String,
    pub worker_threads: usize,
    pub nfs_mount_helper: PathBuf,
    pub nfs_mount_timeout: Duration,
    pub shutdown_grace: Duration,
    /// `METRICS_ADDRESS`; `None`: no metrics endpoint.
    pub metrics_address: Option<ListenAddress>,
    /// `RUST_LOG` (or `--rust-log`), in env_logger's filter syntax.
    pub log_filter: String,
    pub dev: Option<DevConfig>,
    pub registration: Option<RegistrationConfig>,
    /// `NOTIFY_SOCKET`, set by systemd for a `Type=notify` unit; no flag,
    /// since only the service manager knows it.
    pub notify_socket: Option<String>,
}

/// The values `NFS_ACCESS_POLICY_MODE` takes.
const ACCESS_POLICY_MODES: [(&str, AccessPolicyMode); 2] = [
    ("space", AccessPolicyMode::Space),
    ("node", AccessPolicyMode::Node),
];

/// The values `VOLUME_EXPANSION` takes.
const VOLUME_EXPANSIONS: [(&str, VolumeExpansion); 2] = [
    ("off", VolumeExpansion::Off),
    ("subdirectory", VolumeExpansion::Subdirectory),
];

impl Config {
    /// The production settings, checked in a fixed order so that the first
    /// mistake is the one named; the dev role's own come from `dev.rs`.
    pub(super) fn from_lookup(lookup: &Lookup) -> Result<Config, ConfigError> {
        let role = match lookup.get("DRIVER_ROLE").as_deref() {
            Some("controller") => Role::Controller,
            Some("node") => Role::Node,
            Some("dev") => Role::Dev,
            other => {
                return Err(ConfigError {
                    message: format!("invalid driver role \"{}\"", other.unwrap_or("")),
                    exit_code: 2,
                })
            }
        };
        let endpoint = match (role, lookup.get("CSI_ENDPOINT")) {
            // dev mode keeps everything, its socket included, in its state dir.
            (Role::Dev, None) => Endpoint::Unix(dev::socket(lookup)?),
            _ => parse_endpoint(&lookup.or_default("CSI_ENDPOINT"))
                .map_err(|e| ConfigError::new(format!("CSI_ENDPOINT: {e}")))?,
        };
        let access_policy_mode = lookup.choice(
            "NFS_ACCESS_POLICY_MODE",
            "access policy mode",
            &ACCESS_POLICY_MODES,
        )?;
        let wait_timeout = lookup.timeout("LINODE_WAIT_TIMEOUT")?;
        let space_cache_ttl = lookup.duration("SPACE_CACHE_TTL")?;
        let maintenance_interval = lookup.duration("MAINTENANCE_INTERVAL")?;
        let pool_empty_grace = lookup.duration("POOL_EMPTY_GRACE")?;
        let fill = FillSettings {
            timeout: lookup.timeout("FILL_TIMEOUT")?,
            progress_interval: lookup.timeout("FILL_PROGRESS_INTERVAL")?,
            claim_grace: lookup.duration("FILL_CLAIM_GRACE")?,
        };
        let request_timeout = lookup.timeout("LINODE_REQUEST_TIMEOUT")?;
        let linode = match role {
            Role::Controller => {
                let token_file = lookup.get("LINODE_TOKEN_FILE").map(PathBuf::from);
                let token = match (lookup.get("LINODE_TOKEN"), &token_file) {
                    (Some(_), Some(_)) => {
                        return Err(ConfigError::new(
                            "LINODE_TOKEN_FILE: set it or LINODE_TOKEN, not both",
                        ))
                    }
                    (Some(token), None) => Secret::new(token),
                    (None, Some(file)) => Secret::from_file(file)
                        .map_err(|why| ConfigError::new(format!("LINODE_TOKEN_FILE: {why}")))?,
                    (None, None) => {
                        return Err(ConfigError::new(
                            "LINODE_TOKEN: a Linode API token is required for the controller role (or LINODE_TOKEN_FILE, a file holding it)",
                        ))
                    }
                };
                Some(LinodeConfig {
                    url: lookup.url("LINODE_URL")?,
                    api_version: lookup
                        .or_default("LINODE_API_VERSION")
                        .trim_matches('/')
                        .to_string(),
                    token,
                    token_file,
                    ca_file: lookup.get("LINODE_CA").map(PathBuf::from),
                    request_timeout,
                })
            }
            Role::Node | Role::Dev => None,
        };
        let node_name = lookup.get("NODE_NAME");
        if role == Role::Node && node_name.is_none() {
            return Err(ConfigError::new(
                "NODE_NAME: the node role needs the Kubernetes node name (downward API spec.nodeName)",
            ));
        }
        let worker_threads = lookup
            .or_default("WORKER_THREADS")
            .parse::<usize>()
            .ok()
            .filter(|n| (1..=1024).contains(n))
            .ok_or_else(|| {
                ConfigError::new("WORKER_THREADS: must be an integer between 1 and 1024")
            })?;
        let copy_threads = lookup
            .or_default("COPY_THREADS")
            .parse::<usize>()
            .ok()
            .filter(|n| (1..=64).contains(n))
            .ok_or_else(|| ConfigError::new("COPY_THREADS: must be an integer between 1 and 64"))?;
        let default_capacity_bytes = parse_quantity(&lookup.or_default("DEFAULT_CAPACITY"))
            .map_err(|e| ConfigError::new(format!("DEFAULT_CAPACITY: {e}")))?;
        let volume_expansion = lookup.choice("VOLUME_EXPANSION", "value", &VOLUME_EXPANSIONS)?;
        let share_mount_dir = match (role, lookup.get("SHARE_MOUNT_DIR")) {
            (Role::Dev, None) => dev::state_dir(lookup)?.join("shares"),
            (_, raw) => {
                let dir =
                    PathBuf::from(raw.unwrap_or_else(|| lookup.default_of("SHARE_MOUNT_DIR")));
                if !dir.is_absolute() {
                    return Err(ConfigError::new(format!(
                        "SHARE_MOUNT_DIR: want an absolute directory path, got {:?}",
                        dir.display().to_string()
                    )));
                }
                dir.components().collect()
            }
        };
        let registration = registration(
            role,
            &endpoint,
            lookup.get("KUBELET_REGISTRATION_DIR"),
            lookup.get("KUBELET_PLUGIN_ENDPOINT"),
        )?;
        let dev = match role {
            Role::Dev => Some(DevConfig::from_lookup(lookup, request_timeout)?),
            _ => None,
        };
        let lease = match role {
            Role::Controller | Role::Dev => Some(lease(lookup, role, request_timeout)?),
            Role::Node => None,
        };
        let cluster_id = lookup
            .get("CLUSTER_ID")
            .filter(|v| !v.is_empty())
            .map(|v| ClusterId::parse(&v))
            .transpose()
            .map_err(ConfigError::new)?;
        Ok(Config {
            role,
            endpoint,
            linode,
            lease,
            cluster_id,
            wait_timeout,
            space_cache_ttl,
            maintenance_interval,
            pool_empty_grace,
            fill,
            acl_cache_max_age: lookup.duration("ACL_CACHE_MAX_AGE")?,
            access_policy_mode,
            default_capacity_bytes,
            volume_expansion,
            share_mount_dir,
            copy_threads,
            node_name,
            kubeconfig: lookup.get("KUBECONFIG").map(PathBuf::from),
            kube_service: kube_service(
                lookup.get("KUBERNETES_SERVICE_HOST"),
                lookup.get("KUBERNETES_SERVICE_PORT"),
            ),
            metadata_url: lookup.url("METADATA_URL")?,
            worker_threads,
            nfs_mount_helper: PathBuf::from(lookup.or_default("NFS_MOUNT_HELPER")),
            nfs_mount_timeout: lookup.timeout("NFS_MOUNT_TIMEOUT")?,
            shutdown_grace: lookup.duration("SHUTDOWN_GRACE")?,
            metrics_address: lookup
                .get("METRICS_ADDRESS")
                .map(|raw| parse_listen_address(&raw))
                .transpose()
                .map_err(|e| ConfigError::new(format!("METRICS_ADDRESS: {e}")))?,
            log_filter: lookup.or_default("RUST_LOG"),
            dev,
            registration,
            notify_socket: lookup.get("NOTIFY_SOCKET"),
        })
    }
}

/// The in-cluster API server's URL from the variables kubelet sets in every
/// pod, an IPv6 host in brackets; `None` unless both are set.
fn kube_service(host: Option<String>, port: Option<String>) -> Option<String> {
    let (host, port) = (host?, port?);
    let host = if host.contains(':') {
        format!("[{host}]")
    } else {
        host
    };
    Some(format!("https://{host}:{port}"))
}

/// Checks the two registration variables against the role and endpoint.
fn registration(
    role: Role,
    csi_endpoint: &Endpoint,
    dir: Option<String>,
    announced: Option<String>,
) -> Result<Option<RegistrationConfig>, ConfigError> {
    let Some(dir) = dir else {
        return match announced {
            // Set alone it would do nothing, silently.
            Some(_) => Err(ConfigError::new(
                "KUBELET_PLUGIN_ENDPOINT: only used with KUBELET_REGISTRATION_DIR (it is what the driver announces when it registers)",
            )),
            None => Ok(None),
        };
    };
    if role == Role::Controller {
        return Err(ConfigError::new(
            "KUBELET_REGISTRATION_DIR: only the node and dev roles register with kubelet",
        ));
    }
    let dir = PathBuf::from(dir);
    if !dir.is_absolute() {
        return Err(ConfigError::new(format!(
            "KUBELET_REGISTRATION_DIR: want an absolute directory path, got {:?}",
            dir.display().to_string()
        )));
    }
    let endpoint = match (announced, csi_endpoint) {
        (Some(raw), _) => parse_plugin_endpoint(&raw)
            .map_err(|e| ConfigError::new(format!("KUBELET_PLUGIN_ENDPOINT: {e}")))?,
        (None, Endpoint::Unix(path)) => path.clone(),
        (None, Endpoint::Tcp(addr)) => {
            return Err(ConfigError::new(format!(
                "KUBELET_REGISTRATION_DIR: kubelet dials unix sockets only, but CSI_ENDPOINT is tcp://{addr}; set KUBELET_PLUGIN_ENDPOINT to the socket kubelet should dial"
            )))
        }
    };
    Ok(Some(RegistrationConfig {
        dir: dir.components().collect(),
        endpoint,
    }))
}

/// The controller's election: its Lease, this process's name in it and its
/// periods, refused when they cannot fence (`LeaseSettings::check`).
fn lease(
    lookup: &Lookup,
    role: Role,
    request_timeout: Duration,
) -> Result<LeaseSettings, ConfigError> {
    let namespace = match (lookup.get("LEASE_NAMESPACE"), role) {
        (Some(ns), _) => ns,
        // Dev mode's fake API server has no service account of its own.
        (None, Role::Dev) => "kube-system".to_string(),
        (None, _) => {
            let file = std::path::Path::new(SERVICE_ACCOUNT_DIR).join("namespace");
            std::fs::read_to_string(file)
                .ok()
                .map(|ns| ns.trim().to_string())
                .filter(|ns| !ns.is_empty())
                .unwrap_or_else(|| "kube-system".to_string())
        }
    };
    let identity = lookup.get("LEASE_HOLDER_IDENTITY").unwrap_or_else(|| {
        let started = std::time::SystemTime::now()
            .duration_since(std::time::UNIX_EPOCH)
            .map_or(0, |d| d.as_nanos());
        format!(
            "{}_{}_{started:x}",
            lookup
                .get("HOSTNAME")
                .unwrap_or_else(|| "controller".into()),
            std::process::id()
        )
    });
    let renew_deadline = lookup.timeout("LEASE_RENEW_DEADLINE")?;
    let default_duration = lookup.timeout("LEASE_DURATION")?;
    // Unset, the duration grows with a long LINODE_REQUEST_TIMEOUT so that
    // the defaults always fence; a value set is checked as it is.
    let duration = match lookup.get("LEASE_DURATION") {
        Some(_) => default_duration,
        None => {
            let fenced = renew_deadline + request_timeout + Duration::from_secs(5);
            default_duration.max(Duration::from_secs(fenced.as_secs() + 1))
        }
    };
    let settings = LeaseSettings {
        name: lookup.or_default("LEASE_NAME"),
        namespace,
        identity,
        duration,
        renew_deadline,
        retry_period: lookup.timeout("LEASE_RETRY_PERIOD")?,
        cluster: None,
    };
    settings.check(request_timeout).map_err(ConfigError::new)?;
    Ok(settings)
}
