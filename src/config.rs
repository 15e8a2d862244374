//! Every setting the driver reads, read once at startup, and validated
//! before anything is served. Values come from the environment (as on
//! Kubernetes) through the lookup `main` passes in; a flag mirrors each
//! documented variable except `LINODE_TOKEN` (a command line is
//! world-readable), and the variables only a service manager or kubelet set
//! (`NOTIFY_SOCKET`, `KUBERNETES_SERVICE_HOST`/`PORT`) have none. Nothing
//! else in the crate reads the environment for configuration: the `client`
//! subcommand's endpoint is resolved here too ([`client_endpoint`]). The
//! value parsers, shared with the client, are in `config/parse.rs`.

mod parse;
mod quirks;

pub use parse::{
    parse_duration, parse_endpoint, parse_listen_address, parse_plugin_endpoint, parse_quantity,
    parse_url,
};

pub use quirks::DevQuirk;

use crate::secret::Secret;
use quirks::parse_quirks;
#[cfg(test)]
use quirks::QUIRK_NAMES;
use std::collections::BTreeMap;
use std::fmt;
use std::path::PathBuf;
use std::time::Duration;

/// Which gRPC services this process serves.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub enum Role {
    Controller,
    Node,
    /// Controller + Node against embedded fakes, for laptops and conformance.
    Dev,
}

/// Where the CSI socket listens.
#[derive(Debug, Clone, PartialEq, Eq)]
pub enum Endpoint {
    Unix(PathBuf),
    Tcp(String),
}

/// Where an HTTP listener binds: an IP address and port, or only a port
/// for every address (`:29662`).
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub struct ListenAddress {
    pub ip: Option<std::net::IpAddr>,
    pub port: u16,
}

impl fmt::Display for ListenAddress {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        match self.ip {
            None => write!(f, ":{}", self.port),
            Some(ip) => write!(f, "{}", std::net::SocketAddr::new(ip, self.port)),
        }
    }
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

/// Options only the `dev` role reads.
#[derive(Debug, Clone)]
pub struct DevConfig {
    pub state_dir: PathBuf,
    pub activation_delay: Duration,
    pub faults: String,
    pub fault_seed: Option<u64>,
    pub quirks: Vec<DevQuirk>,
    /// `DEV_RATE_LIMITS`: the fake's budgets; `None` leaves it unlimited.
    pub rate_limits: Option<DevRateLimits>,
    /// `LINODE_REQUEST_TIMEOUT` for the client of the fake.
    pub request_timeout: Duration,
}

/// Budgets of the dev fake's rate limiter, per fixed window, by the API's
/// request classes.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub struct DevRateLimits {
    /// Paginated GETs (collections) per window.
    pub list: u64,
    /// Every other request per window.
    pub other: u64,
    pub window: Duration,
}

#[derive(Debug, Clone)]
pub struct Config {
    pub role: Role,
    pub endpoint: Endpoint,
    /// Present for the controller role only; the node never sees the token.
    pub linode: Option<LinodeConfig>,
    /// `LINODE_WAIT_TIMEOUT`, for the real client and dev mode's alike.
    pub wait_timeout: Duration,
    pub space_cache_ttl: Duration,
    /// `ACL_CACHE_MAX_AGE` (controller, node mode).
    pub acl_cache_max_age: Duration,
    pub access_policy_mode: AccessPolicyMode,
    pub default_capacity_bytes: i64,
    pub volume_expansion: VolumeExpansion,
    /// `SHARE_MOUNT_DIR`: where the controller mounts the shared parents of
    /// `subdirectory` volumes (dev mode: `<state dir>/shares`).
    pub share_mount_dir: PathBuf,
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

/// What the command line asked for.
#[derive(Debug)]
pub enum Command {
    Serve(Box<Config>),
    Help,
    Version,
}

/// A startup error: one line naming the variable, and the exit code.
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct ConfigError {
    pub message: String,
    pub exit_code: i32,
}

impl ConfigError {
    fn new(message: impl Into<String>) -> ConfigError {
        ConfigError {
            message: message.into(),
            exit_code: 1,
        }
    }
}

impl fmt::Display for ConfigError {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        f.write_str(&self.message)
    }
}

/// One documented setting: its variable, default, and meaning. The table is
/// the single source of `--help` and of which flags exist.
struct Setting {
    var: &'static str,
    default: &'static str,
    help: &'static str,
}

const SETTINGS: &[Setting] = &[
    Setting {
        var: "DRIVER_ROLE",
        default: "",
        help: "controller, node or dev (required; `dev` as first argument also selects it)",
    },
    Setting {
        var: "CSI_ENDPOINT",
        default: "unix:///csi/csi.sock",
        help: "unix:///abs/path or tcp://host:port",
    },
    Setting {
        var: "LINODE_TOKEN",
        default: "",
        help: "Linode API token (controller; required there, never read by the node; environment only, no flag)",
    },
    Setting {
        var: "LINODE_URL",
        default: "https://api.linode.com",
        help: "Linode API base URL, without the version",
    },
    Setting {
        var: "LINODE_API_VERSION",
        default: "v4beta",
        help: "Linode API version appended to LINODE_URL",
    },
    Setting {
        var: "LINODE_CA",
        default: "",
        help: "extra root CA PEM file for the Linode API",
    },
    Setting {
        var: "LINODE_REQUEST_TIMEOUT",
        default: "10s",
        help: "timeout of one Linode API request",
    },
    Setting {
        var: "LINODE_WAIT_TIMEOUT",
        default: "5m",
        help: "bound on every wait for a Linode object to become active",
    },
    Setting {
        var: "SPACE_CACHE_TTL",
        default: "60s",
        help: "how long a Storage Space and its mTLS mode are reused before they are read again (0s: always read)",
    },
    Setting {
        var: "ACL_CACHE_MAX_AGE",
        default: "5m",
        help: "node mode: age past which a filesystem ACL the controller knows is read again for ListVolumes and ControllerGetVolume, at most one a second (0s: always read)",
    },
    Setting {
        var: "NFS_ACCESS_POLICY_MODE",
        default: "space",
        help: "space or node (node: ControllerPublish edits the filesystem ACL)",
    },
    Setting {
        var: "DEFAULT_CAPACITY",
        default: "10Gi",
        help: "filesystem size when a request names none (bytes or Ki/Mi/Gi/Ti)",
    },
    Setting {
        var: "VOLUME_EXPANSION",
        default: "off",
        help: "off or subdirectory (controller and dev roles): advertise EXPAND_VOLUME, which grows subdirectory volumes by their quota; whole filesystems cannot grow",
    },
    Setting {
        var: "SHARE_MOUNT_DIR",
        default: "/var/lib/linode-nfs-csi/shares",
        help: "controller: where the shared filesystems of subdirectory volumes are mounted (dev role: <DEV_STATE_DIR>/shares unless set)",
    },
    Setting {
        var: "NODE_NAME",
        default: "",
        help: "Kubernetes node name (node role; required there)",
    },
    Setting {
        var: "KUBECONFIG",
        default: "",
        help: "kubeconfig file; unset means the in-cluster service account",
    },
    Setting {
        var: "METADATA_URL",
        default: "http://169.254.169.254",
        help: "Linode metadata service base URL (node)",
    },
    Setting {
        var: "KUBELET_REGISTRATION_DIR",
        default: "",
        help: "node and dev roles: kubelet's plugin registry (e.g. /var/lib/kubelet/plugins_registry); when set the driver registers itself there, no node-driver-registrar needed",
    },
    Setting {
        var: "KUBELET_PLUGIN_ENDPOINT",
        default: "",
        help: "the CSI socket path announced to kubelet when registering (default: the CSI_ENDPOINT path)",
    },
    Setting {
        var: "WORKER_THREADS",
        default: "8",
        help: "size of the RPC worker pool (waits for Linode hold no worker)",
    },
    Setting {
        var: "NFS_MOUNT_HELPER",
        default: "mount",
        help: "program run as `<helper> -t nfs4 [-o opts] <source> <target>`",
    },
    Setting {
        var: "NFS_MOUNT_TIMEOUT",
        default: "2m",
        help: "the NFS mount helper is killed after this long",
    },
    Setting {
        var: "SHUTDOWN_GRACE",
        default: "30s",
        help: "on SIGTERM, how long in-flight RPCs may finish",
    },
    Setting {
        var: "METRICS_ADDRESS",
        default: "",
        help: "serve Prometheus /metrics and /healthz on ip:port, or :port for every address (empty: off)",
    },
    Setting {
        var: "DEV_STATE_DIR",
        default: "./dev",
        help: "dev role: directory holding the socket, fake state and exports",
    },
    Setting {
        var: "DEV_ACTIVATION_DELAY",
        default: "0s",
        help: "dev role: how long fake filesystems/snapshots stay `creating`",
    },
    Setting {
        var: "DEV_FAULTS",
        default: "",
        help: "dev role: random faults of the fake API, e.g. 429:0.1,503:0.05,lost:0.02,slow:0.01,drop:0.01 (lost: applied then 500; slow: held past LINODE_REQUEST_TIMEOUT, then applied; drop: applied, reply held past it)",
    },
    Setting {
        var: "DEV_FAULT_SEED",
        default: "",
        help: "dev role: seed of which requests DEV_FAULTS hits, to replay a run (default: the clock)",
    },
    Setting {
        var: "DEV_QUIRKS",
        default: "",
        help: "dev role: backend variants to emulate, comma-separated: no-source-snapshot-id, snapshots-held-by-clones, no-id-filter, tag-filter-refused, tag-filter-ignored, no-filesystem-policy, capacity-in-stats, null-fields, html-errors, foreign-filesystems, no-quotas, quota-refused, quota-needs-directory, quota-path-with-export, quota-stuck-updating, quota-error, quota-limit=N (docs/configuration.md)",
    },
    Setting {
        var: "DEV_RATE_LIMITS",
        default: "",
        help: "dev role: rate-limit the fake API per window, e.g. list:200,other:400,window:60s (Linode's budgets; empty: unlimited)",
    },
    Setting {
        var: "RUST_LOG",
        default: "info",
        help: "log filter (env_logger syntax)",
    },
];

/// `list:N,other:M[,window:DURATION]`; the window defaults to Linode's
/// minute. Both budgets are required and at least 1: a class with no budget
/// could never be served.
fn parse_rate_limits(raw: &str) -> Result<DevRateLimits, String> {
    let (mut list, mut other, mut window) = (None, None, Duration::from_secs(60));
    for part in raw.split(',').map(str::trim).filter(|p| !p.is_empty()) {
        let (key, value) = part
            .split_once(':')
            .ok_or_else(|| format!("\"{part}\" is not KEY:VALUE"))?;
        let count = || match value.trim().parse::<u64>() {
            Ok(n) if n > 0 => Ok(n),
            _ => Err(format!(
                "{key}: \"{value}\" is not a whole number of requests above 0"
            )),
        };
        match key.trim() {
            "list" => list = Some(count()?),
            "other" => other = Some(count()?),
            "window" => {
                window = parse_duration(value)
                    .ok()
                    .filter(|w| !w.is_zero())
                    .ok_or_else(|| format!("window: \"{value}\" is not a duration above 0"))?
            }
            k => return Err(format!("unknown key \"{k}\" (want list, other, window)")),
        }
    }
    match (list, other) {
        (Some(list), Some(other)) => Ok(DevRateLimits {
            list,
            other,
            window,
        }),
        _ => Err("both list:N and other:M are required".to_string()),
    }
}

/// The `--help` text.
pub fn help_text() -> String {
    let mut out = String::from(
        "linode-nfs-csi: Kubernetes CSI driver for Linode managed NFS\n\n\
         Usage: linode-nfs-csi [dev] [--FLAG=VALUE ...]\n\
         Every setting is an environment variable; the flag --lower-case-name\n\
         (e.g. --csi-endpoint for CSI_ENDPOINT) overrides it.\n\n",
    );
    for s in SETTINGS {
        let default = if s.default.is_empty() { "-" } else { s.default };
        out.push_str(&format!(
            "  {:<24} default {:<24} {}\n",
            s.var, default, s.help
        ));
    }
    out
}

/// Parses the process arguments and environment into what to do.
pub fn from_args_and_env(
    args: &[String],
    env: impl Fn(&str) -> Option<String>,
) -> Result<Command, ConfigError> {
    let mut flags: BTreeMap<&'static str, String> = BTreeMap::new();
    let mut iter = args.iter().peekable();
    while let Some(arg) = iter.next() {
        match arg.as_str() {
            "-h" | "--help" | "help" => return Ok(Command::Help),
            "-V" | "--version" | "version" => return Ok(Command::Version),
            "dev" | "controller" | "node" if flags.is_empty() => {
                flags.insert("DRIVER_ROLE", arg.clone());
            }
            other => {
                let Some(flag) = other.strip_prefix("--") else {
                    return Err(ConfigError::new(format!(
                        "unexpected argument {other:?} (see --help)"
                    )));
                };
                let (name, inline) = match flag.split_once('=') {
                    Some((n, v)) => (n, Some(v.to_string())),
                    None => (flag, None),
                };
                let var = name.to_ascii_uppercase().replace('-', "_");
                let Some(setting) = SETTINGS.iter().find(|s| s.var == var) else {
                    return Err(ConfigError::new(format!(
                        "unknown flag --{name} (see --help)"
                    )));
                };
                // A command line is world-readable in /proc and `ps`.
                if setting.var == "LINODE_TOKEN" {
                    return Err(ConfigError::new(
                        "LINODE_TOKEN: set it in the environment; a --linode-token flag would show the token to every process on the host",
                    ));
                }
                let value = match inline {
                    Some(v) => v,
                    None => iter
                        .next()
                        .cloned()
                        .ok_or_else(|| ConfigError::new(format!("flag --{name} needs a value")))?,
                };
                flags.insert(setting.var, value);
            }
        }
    }
    let get = |var: &str| -> Option<String> {
        flags
            .get(var)
            .cloned()
            .or_else(|| env(var))
            .map(|v| v.trim().to_string())
            .filter(|v| !v.is_empty())
    };
    Config::from_lookup(get).map(|c| Command::Serve(Box::new(c)))
}

impl Config {
    fn from_lookup(get: impl Fn(&str) -> Option<String>) -> Result<Config, ConfigError> {
        let or_default = |var: &str| -> String { get(var).unwrap_or_else(|| default_of(var)) };
        let duration = |var: &str| -> Result<Duration, ConfigError> {
            let raw = or_default(var);
            parse_duration(&raw).map_err(|e| ConfigError::new(format!("{var}: {e}")))
        };
        // A zero bound would fail every call it bounds, long after startup.
        let timeout = |var: &str| -> Result<Duration, ConfigError> {
            Some(duration(var)?)
                .filter(|d| !d.is_zero())
                .ok_or_else(|| ConfigError::new(format!("{var}: must be greater than zero")))
        };
        let url = |var: &str| -> Result<String, ConfigError> {
            let raw = or_default(var);
            parse_url(&raw).map_err(|e| ConfigError::new(format!("{var}: {e}")))
        };

        let role = match get("DRIVER_ROLE").as_deref() {
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
        let endpoint = match (role, get("CSI_ENDPOINT")) {
            // dev mode keeps everything, its socket included, in its state dir.
            (Role::Dev, None) => dev_socket(&or_default("DEV_STATE_DIR"))?,
            _ => parse_endpoint(&or_default("CSI_ENDPOINT"))
                .map_err(|e| ConfigError::new(format!("CSI_ENDPOINT: {e}")))?,
        };
        let access_policy_mode = match or_default("NFS_ACCESS_POLICY_MODE").as_str() {
            "space" => AccessPolicyMode::Space,
            "node" => AccessPolicyMode::Node,
            other => {
                return Err(ConfigError::new(format!(
                    "NFS_ACCESS_POLICY_MODE: invalid access policy mode \"{other}\" (want space or node)"
                )))
            }
        };
        let wait_timeout = timeout("LINODE_WAIT_TIMEOUT")?;
        let space_cache_ttl = duration("SPACE_CACHE_TTL")?;
        let request_timeout = timeout("LINODE_REQUEST_TIMEOUT")?;
        let linode = match role {
            Role::Controller => {
                let token = get("LINODE_TOKEN").ok_or_else(|| {
                    ConfigError::new(
                        "LINODE_TOKEN: a Linode API token is required for the controller role",
                    )
                })?;
                Some(LinodeConfig {
                    url: url("LINODE_URL")?,
                    api_version: or_default("LINODE_API_VERSION")
                        .trim_matches('/')
                        .to_string(),
                    token: Secret::new(token),
                    ca_file: get("LINODE_CA").map(PathBuf::from),
                    request_timeout,
                })
            }
            Role::Node | Role::Dev => None,
        };
        let node_name = get("NODE_NAME");
        if role == Role::Node && node_name.is_none() {
            return Err(ConfigError::new(
                "NODE_NAME: the node role needs the Kubernetes node name (downward API spec.nodeName)",
            ));
        }
        let worker_threads = or_default("WORKER_THREADS")
            .parse::<usize>()
            .ok()
            .filter(|n| (1..=1024).contains(n))
            .ok_or_else(|| {
                ConfigError::new("WORKER_THREADS: must be an integer between 1 and 1024")
            })?;
        let default_capacity_bytes = parse_quantity(&or_default("DEFAULT_CAPACITY"))
            .map_err(|e| ConfigError::new(format!("DEFAULT_CAPACITY: {e}")))?;
        let volume_expansion = match or_default("VOLUME_EXPANSION").as_str() {
            "off" => VolumeExpansion::Off,
            "subdirectory" => VolumeExpansion::Subdirectory,
            other => {
                return Err(ConfigError::new(format!(
                    "VOLUME_EXPANSION: invalid value \"{other}\" (want off or subdirectory)"
                )))
            }
        };
        let share_mount_dir = match (role, get("SHARE_MOUNT_DIR")) {
            (Role::Dev, None) => {
                absolute(&PathBuf::from(or_default("DEV_STATE_DIR")))?.join("shares")
            }
            (_, raw) => {
                let dir = PathBuf::from(raw.unwrap_or_else(|| default_of("SHARE_MOUNT_DIR")));
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
            get("KUBELET_REGISTRATION_DIR"),
            get("KUBELET_PLUGIN_ENDPOINT"),
        )?;
        let dev = match role {
            Role::Dev => Some(DevConfig {
                state_dir: absolute(&PathBuf::from(or_default("DEV_STATE_DIR")))?,
                activation_delay: duration("DEV_ACTIVATION_DELAY")?,
                faults: get("DEV_FAULTS").unwrap_or_default(),
                fault_seed: get("DEV_FAULT_SEED")
                    .map(|s| {
                        s.parse::<u64>().map_err(|_| {
                            ConfigError::new(format!("DEV_FAULT_SEED: \"{s}\" is not a number"))
                        })
                    })
                    .transpose()?,
                quirks: parse_quirks(&get("DEV_QUIRKS").unwrap_or_default())
                    .map_err(|e| ConfigError::new(format!("DEV_QUIRKS: {e}")))?,
                rate_limits: get("DEV_RATE_LIMITS")
                    .filter(|s| !s.trim().is_empty())
                    .map(|s| parse_rate_limits(&s))
                    .transpose()
                    .map_err(|e| ConfigError::new(format!("DEV_RATE_LIMITS: {e}")))?,
                request_timeout,
            }),
            _ => None,
        };
        Ok(Config {
            role,
            endpoint,
            linode,
            wait_timeout,
            space_cache_ttl,
            acl_cache_max_age: duration("ACL_CACHE_MAX_AGE")?,
            access_policy_mode,
            default_capacity_bytes,
            volume_expansion,
            share_mount_dir,
            node_name,
            kubeconfig: get("KUBECONFIG").map(PathBuf::from),
            kube_service: kube_service(
                get("KUBERNETES_SERVICE_HOST"),
                get("KUBERNETES_SERVICE_PORT"),
            ),
            metadata_url: url("METADATA_URL")?,
            worker_threads,
            nfs_mount_helper: PathBuf::from(or_default("NFS_MOUNT_HELPER")),
            nfs_mount_timeout: timeout("NFS_MOUNT_TIMEOUT")?,
            shutdown_grace: duration("SHUTDOWN_GRACE")?,
            metrics_address: get("METRICS_ADDRESS")
                .map(|raw| parse_listen_address(&raw))
                .transpose()
                .map_err(|e| ConfigError::new(format!("METRICS_ADDRESS: {e}")))?,
            log_filter: or_default("RUST_LOG"),
            dev,
            registration,
            notify_socket: get("NOTIFY_SOCKET"),
        })
    }
}

/// The documented default of `var`.
fn default_of(var: &str) -> String {
    SETTINGS
        .iter()
        .find(|s| s.var == var)
        .map(|s| s.default.to_string())
        .unwrap_or_default()
}

/// The dev role's socket: `csi.sock` in its state directory.
fn dev_socket(state_dir: &str) -> Result<Endpoint, ConfigError> {
    Ok(Endpoint::Unix(
        absolute(&PathBuf::from(state_dir))?.join("csi.sock"),
    ))
}

/// The endpoint the `client` subcommand dials: `--endpoint`, else
/// `$CSI_ENDPOINT`, else the dev role's socket under the default
/// `DEV_STATE_DIR` (`./dev/csi.sock`).
pub fn client_endpoint(
    flag: Option<String>,
    env: impl Fn(&str) -> Option<String>,
) -> Result<Endpoint, String> {
    match flag.or_else(|| env("CSI_ENDPOINT")) {
        Some(raw) => parse_endpoint(&raw),
        None => dev_socket(&default_of("DEV_STATE_DIR")).map_err(|e| e.message),
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

/// `dir` against the working directory, `.` components dropped, so paths
/// printed and handed to clients work from anywhere.
fn absolute(dir: &std::path::Path) -> Result<PathBuf, ConfigError> {
    let full = if dir.is_absolute() {
        dir.to_path_buf()
    } else {
        std::env::current_dir()
            .map_err(|e| ConfigError::new(format!("DEV_STATE_DIR: {e}")))?
            .join(dir)
    };
    Ok(full.components().collect())
}

#[cfg(test)]
mod tests;
