//! Every setting the driver reads, read once at startup from the environment
//! (as on Kubernetes) with command-line flags mirroring each variable, and
//! validated before anything is served. Nothing else in the crate reads the
//! environment for configuration.

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

/// Settings of the Linode API client (controller and dev roles).
#[derive(Clone)]
pub struct LinodeConfig {
    pub url: String,
    pub api_version: String,
    pub token: String,
    pub ca_file: Option<PathBuf>,
    pub request_timeout: Duration,
    pub wait_timeout: Duration,
}

impl fmt::Debug for LinodeConfig {
    // The token is a credential: it never reaches a log line.
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        f.debug_struct("LinodeConfig")
            .field("url", &self.url)
            .field("api_version", &self.api_version)
            .field("token", &"***")
            .field("ca_file", &self.ca_file)
            .field("request_timeout", &self.request_timeout)
            .field("wait_timeout", &self.wait_timeout)
            .finish()
    }
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

/// A documented or suspected variant of the Linode API the dev fake can
/// behave as, to try the driver against it.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub enum DevQuirk {
    /// Clones do not show `source_snapshot_id`.
    NoSourceSnapshotId,
    /// A snapshot cannot be deleted while a clone of it exists.
    SnapshotsHeldByClones,
    /// Filesystem lists cannot be filtered by `id`.
    NoIdFilter,
    /// A filesystem list filtered by `tags` answers 400 (field `X-Filter`).
    TagFilterRefused,
    /// A filesystem list ignores `tags` in its filter.
    TagFilterIgnored,
    /// The filesystem access-policy endpoints answer 404.
    NoFilesystemPolicy,
    /// The earlier fork's filesystem: capacity only in `stats`, none on create.
    CapacityInStats,
    /// Go-style nulls and left-out optional fields in answers.
    NullFields,
    /// Part of the injected 429/503s are 408s or nginx `text/html` 400s.
    HtmlErrors,
    /// Filesystems the driver did not make in the dev Space (also seeded
    /// by the tag-filter quirks, which would show nothing without them).
    ForeignFilesystems,
}

/// Every quirk by its `DEV_QUIRKS` name.
const QUIRK_NAMES: [(&str, DevQuirk); 10] = [
    ("no-source-snapshot-id", DevQuirk::NoSourceSnapshotId),
    ("snapshots-held-by-clones", DevQuirk::SnapshotsHeldByClones),
    ("no-id-filter", DevQuirk::NoIdFilter),
    ("tag-filter-refused", DevQuirk::TagFilterRefused),
    ("tag-filter-ignored", DevQuirk::TagFilterIgnored),
    ("no-filesystem-policy", DevQuirk::NoFilesystemPolicy),
    ("capacity-in-stats", DevQuirk::CapacityInStats),
    ("null-fields", DevQuirk::NullFields),
    ("html-errors", DevQuirk::HtmlErrors),
    ("foreign-filesystems", DevQuirk::ForeignFilesystems),
];

#[derive(Debug, Clone)]
pub struct Config {
    pub role: Role,
    pub endpoint: Endpoint,
    /// Present for the controller role only; the node never sees the token.
    pub linode: Option<LinodeConfig>,
    pub wait_timeout: Duration,
    pub space_cache_ttl: Duration,
    /// `ACL_CACHE_MAX_AGE` (controller, node mode).
    pub acl_cache_max_age: Duration,
    pub access_policy_mode: AccessPolicyMode,
    pub default_capacity_bytes: i64,
    pub node_name: Option<String>,
    pub kubeconfig: Option<PathBuf>,
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
        help: "dev role: backend variants to emulate, comma-separated: no-source-snapshot-id, snapshots-held-by-clones, no-id-filter, tag-filter-refused, tag-filter-ignored, no-filesystem-policy, capacity-in-stats, null-fields, html-errors, foreign-filesystems (docs/configuration.md)",
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

fn parse_quirks(raw: &str) -> Result<Vec<DevQuirk>, String> {
    let quirks = raw
        .split(',')
        .map(str::trim)
        .filter(|q| !q.is_empty())
        .map(|q| {
            QUIRK_NAMES
                .iter()
                .find(|(name, _)| *name == q)
                .map(|(_, quirk)| *quirk)
                .ok_or_else(|| {
                    let names: Vec<&str> = QUIRK_NAMES.iter().map(|(n, _)| *n).collect();
                    format!("unknown quirk \"{q}\" (want {})", names.join(", "))
                })
        })
        .collect::<Result<Vec<_>, _>>()?;
    if quirks.contains(&DevQuirk::TagFilterRefused) && quirks.contains(&DevQuirk::TagFilterIgnored)
    {
        return Err("tag-filter-refused and tag-filter-ignored exclude each other".to_string());
    }
    Ok(quirks)
}

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
        let or_default = |var: &str| -> String {
            get(var).unwrap_or_else(|| {
                SETTINGS
                    .iter()
                    .find(|s| s.var == var)
                    .map(|s| s.default.to_string())
                    .unwrap_or_default()
            })
        };
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
            (Role::Dev, None) => {
                let dir = PathBuf::from(or_default("DEV_STATE_DIR"));
                Endpoint::Unix(absolute(&dir)?.join("csi.sock"))
            }
            (_, raw) => parse_endpoint(raw.as_deref().unwrap_or("unix:///csi/csi.sock"))
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
                    token,
                    ca_file: get("LINODE_CA").map(PathBuf::from),
                    request_timeout,
                    wait_timeout,
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
            node_name,
            kubeconfig: get("KUBECONFIG").map(PathBuf::from),
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

/// The socket kubelet dials: an absolute path. kubelet takes the announced
/// endpoint as a plain path, so a `unix://` prefix is dropped here rather
/// than announced.
pub fn parse_plugin_endpoint(raw: &str) -> Result<PathBuf, String> {
    let path = raw.strip_prefix("unix://").unwrap_or(raw);
    if !path.starts_with('/') || path.len() < 2 || path.ends_with('/') {
        return Err(format!(
            "invalid endpoint {raw:?}: want the absolute path of the CSI socket as kubelet sees it"
        ));
    }
    Ok(PathBuf::from(path))
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

/// `500ms`, `10s`, `5m`, `1h`; a bare number is rejected so units are never guessed.
pub fn parse_duration(raw: &str) -> Result<Duration, String> {
    let raw = raw.trim();
    let split = raw
        .find(|c: char| !c.is_ascii_digit())
        .ok_or_else(|| format!("invalid duration {raw:?}: add a unit (ms, s, m or h)"))?;
    let (number, unit) = raw.split_at(split);
    let n: u64 = number
        .parse()
        .map_err(|_| format!("invalid duration {raw:?}: expected e.g. 500ms, 10s, 5m"))?;
    let ms = match unit {
        "ms" => Some(n),
        "s" => n.checked_mul(1_000),
        "m" => n.checked_mul(60_000),
        "h" => n.checked_mul(3_600_000),
        _ => {
            return Err(format!(
                "invalid duration {raw:?}: unit must be ms, s, m or h"
            ))
        }
    };
    ms.map(Duration::from_millis)
        .ok_or_else(|| format!("invalid duration {raw:?}: too large"))
}

/// An `http://` or `https://` base URL with a host, trailing `/` dropped.
pub fn parse_url(raw: &str) -> Result<String, String> {
    let rest = raw
        .strip_prefix("https://")
        .or_else(|| raw.strip_prefix("http://"))
        .ok_or_else(|| format!("invalid URL {raw:?}: want http://host or https://host"))?;
    if rest.is_empty() || rest.starts_with('/') || rest.contains(char::is_whitespace) {
        return Err(format!("invalid URL {raw:?}: no host"));
    }
    Ok(raw.trim_end_matches('/').to_string())
}

/// `unix:///abs/path` or `tcp://host:port`.
pub fn parse_endpoint(raw: &str) -> Result<Endpoint, String> {
    if let Some(path) = raw.strip_prefix("unix://") {
        if !path.starts_with('/') || path.len() < 2 || path.ends_with('/') {
            return Err(format!(
                "invalid endpoint {raw:?}: want unix:///absolute/path/to/socket"
            ));
        }
        return Ok(Endpoint::Unix(PathBuf::from(path)));
    }
    if let Some(addr) = raw.strip_prefix("tcp://") {
        let port_ok = addr
            .rsplit_once(':')
            .map(|(host, port)| !host.is_empty() && port.parse::<u16>().is_ok())
            .unwrap_or(false);
        if !port_ok {
            return Err(format!("invalid endpoint {raw:?}: want tcp://host:port"));
        }
        return Ok(Endpoint::Tcp(addr.to_string()));
    }
    Err(format!(
        "invalid endpoint {raw:?}: scheme must be unix:// or tcp://"
    ))
}

/// `ip:port`, `[ipv6]:port` or `:port`. A name is refused rather than
/// resolved. An IPv6 address without brackets is taken when the port after
/// its last colon leaves a valid address, as `$(POD_IP):port` in a manifest
/// gives on an IPv6 cluster.
pub fn parse_listen_address(raw: &str) -> Result<ListenAddress, String> {
    let invalid =
        || format!("invalid address {raw:?}: want ip:port or :port (e.g. 127.0.0.1:29662)");
    if let Ok(addr) = raw.parse::<std::net::SocketAddr>() {
        return Ok(ListenAddress {
            ip: Some(addr.ip()),
            port: addr.port(),
        });
    }
    let (host, port) = raw.rsplit_once(':').ok_or_else(invalid)?;
    let port = port.parse::<u16>().map_err(|_| invalid())?;
    let ip = match host {
        "" => None,
        _ => Some(
            host.parse::<std::net::Ipv6Addr>()
                .map_err(|_| invalid())?
                .into(),
        ),
    };
    Ok(ListenAddress { ip, port })
}

/// A size as bytes or with a binary suffix (`Ki`, `Mi`, `Gi`, `Ti`), as in Kubernetes quantities.
pub fn parse_quantity(raw: &str) -> Result<i64, String> {
    let raw = raw.trim();
    let (number, factor) = [
        ("Ki", 1i64 << 10),
        ("Mi", 1 << 20),
        ("Gi", 1 << 30),
        ("Ti", 1 << 40),
    ]
    .iter()
    .find_map(|(suffix, f)| raw.strip_suffix(suffix).map(|n| (n, *f)))
    .unwrap_or((raw, 1));
    number
        .parse::<i64>()
        .ok()
        .filter(|n| *n > 0)
        .and_then(|n| n.checked_mul(factor))
        .ok_or_else(|| {
            format!("invalid size {raw:?}: want a positive number of bytes or e.g. 10Gi")
        })
}

#[cfg(test)]
mod tests {
    use super::*;
    use std::collections::HashMap;

    fn parse(args: &[&str], env: &[(&str, &str)]) -> Result<Command, ConfigError> {
        let env: HashMap<String, String> = env
            .iter()
            .map(|(k, v)| (k.to_string(), v.to_string()))
            .collect();
        let args: Vec<String> = args.iter().map(|s| s.to_string()).collect();
        from_args_and_env(&args, |k| env.get(k).cloned())
    }

    fn config(args: &[&str], env: &[(&str, &str)]) -> Config {
        match parse(args, env) {
            Ok(Command::Serve(c)) => *c,
            other => panic!("expected a config, got {other:?}"),
        }
    }

    #[test]
    fn durations() {
        assert_eq!(parse_duration("500ms"), Ok(Duration::from_millis(500)));
        assert_eq!(parse_duration("10s"), Ok(Duration::from_secs(10)));
        assert_eq!(parse_duration("5m"), Ok(Duration::from_secs(300)));
        assert_eq!(parse_duration("1h"), Ok(Duration::from_secs(3600)));
        for bad in [
            "",
            "10",
            "s",
            "1.5s",
            "-1s",
            "10 s",
            "3d",
            "99999999999999999999h",
        ] {
            assert!(parse_duration(bad).is_err(), "{bad:?} should be rejected");
        }
    }

    #[test]
    fn endpoints() {
        assert_eq!(
            parse_endpoint("unix:///csi/csi.sock"),
            Ok(Endpoint::Unix("/csi/csi.sock".into()))
        );
        assert_eq!(
            parse_endpoint("tcp://127.0.0.1:10000"),
            Ok(Endpoint::Tcp("127.0.0.1:10000".into()))
        );
        assert_eq!(
            parse_endpoint("tcp://[::1]:10000"),
            Ok(Endpoint::Tcp("[::1]:10000".into()))
        );
        for bad in [
            "unix://relative",
            "unix:///",
            "/csi/csi.sock",
            "http://x:1",
            "tcp://host",
            "tcp://:80",
            "tcp://h:99999",
        ] {
            assert!(parse_endpoint(bad).is_err(), "{bad:?} should be rejected");
        }
    }

    #[test]
    fn urls_need_a_scheme_and_a_host() {
        assert_eq!(
            parse_url("https://api.linode.com/"),
            Ok("https://api.linode.com".into())
        );
        assert_eq!(
            parse_url("http://169.254.169.254"),
            Ok("http://169.254.169.254".into())
        );
        for bad in [
            "169.254.169.254",
            "ftp://x",
            "https://",
            "http:///x",
            "https://a b",
        ] {
            assert!(parse_url(bad).is_err(), "{bad:?} should be rejected");
        }
        let node = [("DRIVER_ROLE", "node"), ("NODE_NAME", "n")];
        let err = parse(&["--metadata-url", "169.254.169.254"], &node).unwrap_err();
        assert!(err.message.starts_with("METADATA_URL: "), "{}", err.message);
        let err = parse(
            &[],
            &[
                ("DRIVER_ROLE", "controller"),
                ("LINODE_TOKEN", "t"),
                ("LINODE_URL", "api.linode.com"),
            ],
        )
        .unwrap_err();
        assert!(err.message.starts_with("LINODE_URL: "), "{}", err.message);
    }

    #[test]
    fn zero_timeouts_are_refused_but_a_zero_grace_is_not() {
        let controller = [("DRIVER_ROLE", "controller"), ("LINODE_TOKEN", "t")];
        for var in [
            "LINODE_WAIT_TIMEOUT",
            "LINODE_REQUEST_TIMEOUT",
            "NFS_MOUNT_TIMEOUT",
        ] {
            let mut env = controller.to_vec();
            env.push((var, "0s"));
            let err = parse(&[], &env).unwrap_err();
            assert_eq!(err.message, format!("{var}: must be greater than zero"));
        }
        let mut env = controller.to_vec();
        env.push(("SHUTDOWN_GRACE", "0s"));
        assert_eq!(config(&[], &env).shutdown_grace, Duration::ZERO);
    }

    #[test]
    fn the_token_has_no_flag_and_the_log_filter_has_one() {
        let err = parse(&["controller", "--linode-token", "secret-value"], &[]).unwrap_err();
        assert!(err.message.starts_with("LINODE_TOKEN: "), "{}", err.message);
        assert!(!err.message.contains("secret-value"));
        let node = [
            ("DRIVER_ROLE", "node"),
            ("NODE_NAME", "n"),
            ("RUST_LOG", "warn"),
        ];
        assert_eq!(config(&[], &node).log_filter, "warn");
        assert_eq!(config(&["--rust-log=debug"], &node).log_filter, "debug");
    }

    #[test]
    fn metrics_addresses() {
        let ok = |raw: &str| parse_listen_address(raw).unwrap().to_string();
        assert_eq!(ok("127.0.0.1:29662"), "127.0.0.1:29662");
        assert_eq!(ok(":29662"), ":29662");
        assert_eq!(ok("[::1]:29662"), "[::1]:29662");
        assert_eq!(ok("fd00::5:29662"), "[fd00::5]:29662");
        assert_eq!(ok("0.0.0.0:0"), "0.0.0.0:0");
        for bad in [
            "29662",
            "localhost:29662",
            "1.2.3.4",
            ":",
            ":99999",
            "1.2.3.4:x",
            "[::1]",
        ] {
            assert!(
                parse_listen_address(bad).is_err(),
                "{bad:?} should be rejected"
            );
        }
        let node = [("DRIVER_ROLE", "node"), ("NODE_NAME", "n")];
        assert_eq!(config(&[], &node).metrics_address, None);
        let on = config(&["--metrics-address", ":29662"], &node);
        assert_eq!(
            on.metrics_address,
            Some(ListenAddress {
                ip: None,
                port: 29662
            })
        );
        let err = parse(&["--metrics-address=localhost:1"], &node).unwrap_err();
        assert!(
            err.message.starts_with("METRICS_ADDRESS: "),
            "{}",
            err.message
        );
    }

    #[test]
    fn quantities() {
        assert_eq!(parse_quantity("10Gi"), Ok(10 << 30));
        assert_eq!(parse_quantity("1048576"), Ok(1 << 20));
        assert!(parse_quantity("0").is_err());
        assert!(parse_quantity("10G").is_err());
    }

    #[test]
    fn roles() {
        assert_eq!(
            config(&[], &[("DRIVER_ROLE", "controller"), ("LINODE_TOKEN", "t")]).role,
            Role::Controller
        );
        assert_eq!(
            config(&[], &[("DRIVER_ROLE", "node"), ("NODE_NAME", "n1")]).role,
            Role::Node
        );
        let dev = config(&["dev"], &[("DEV_STATE_DIR", "/tmp/devstate")]);
        assert_eq!(dev.role, Role::Dev);
        assert_eq!(
            dev.endpoint,
            Endpoint::Unix("/tmp/devstate/csi.sock".into())
        );
        let err = parse(&[], &[("DRIVER_ROLE", "both")]).unwrap_err();
        assert_eq!(
            err,
            ConfigError {
                message: "invalid driver role \"both\"".into(),
                exit_code: 2
            }
        );
        assert_eq!(parse(&[], &[]).unwrap_err().exit_code, 2);
    }

    #[test]
    fn dev_rate_limits() {
        let limits = |raw: &str| {
            config(&["dev"], &[("DEV_RATE_LIMITS", raw)])
                .dev
                .unwrap()
                .rate_limits
        };
        assert_eq!(limits(""), None);
        assert_eq!(
            limits("list:200,other:400,window:60s"),
            Some(DevRateLimits {
                list: 200,
                other: 400,
                window: Duration::from_secs(60)
            })
        );
        assert_eq!(
            limits(" other:40 , list:20 "),
            Some(DevRateLimits {
                list: 20,
                other: 40,
                window: Duration::from_secs(60)
            })
        );
        assert_eq!(
            limits("list:20,other:40,window:2s").unwrap().window,
            Duration::from_secs(2)
        );
        for bad in [
            "list:20",
            "other:40",
            "list:0,other:40",
            "list:x,other:40",
            "list:20,other:40,window:0s",
            "list:20,other:40,window:2",
            "list:20,other:40,burst:3",
            "list=20,other:40",
        ] {
            let err = parse(&["dev"], &[("DEV_RATE_LIMITS", bad)]).unwrap_err();
            assert!(
                err.message.starts_with("DEV_RATE_LIMITS: "),
                "{bad:?}: {}",
                err.message
            );
        }
    }

    #[test]
    fn role_requirements_name_the_variable() {
        let err = parse(&[], &[("DRIVER_ROLE", "controller")]).unwrap_err();
        assert!(err.message.starts_with("LINODE_TOKEN"), "{}", err.message);
        let err = parse(&[], &[("DRIVER_ROLE", "node")]).unwrap_err();
        assert!(err.message.starts_with("NODE_NAME"), "{}", err.message);
        let err = parse(
            &[],
            &[
                ("DRIVER_ROLE", "node"),
                ("NODE_NAME", "n"),
                ("CSI_ENDPOINT", "csi.sock"),
            ],
        )
        .unwrap_err();
        assert!(err.message.starts_with("CSI_ENDPOINT"), "{}", err.message);
        let err = parse(
            &[],
            &[
                ("DRIVER_ROLE", "node"),
                ("NODE_NAME", "n"),
                ("NFS_MOUNT_TIMEOUT", "2"),
            ],
        )
        .unwrap_err();
        assert!(
            err.message.starts_with("NFS_MOUNT_TIMEOUT"),
            "{}",
            err.message
        );
    }

    #[test]
    fn the_node_never_holds_the_token() {
        let c = config(
            &[],
            &[
                ("DRIVER_ROLE", "node"),
                ("NODE_NAME", "n"),
                ("LINODE_TOKEN", "secret"),
            ],
        );
        assert!(c.linode.is_none());
    }

    #[test]
    fn flags_override_env_and_debug_hides_the_token() {
        let c = config(
            &[
                "--csi-endpoint=tcp://127.0.0.1:9",
                "--linode-wait-timeout",
                "1m",
            ],
            &[
                ("DRIVER_ROLE", "controller"),
                ("LINODE_TOKEN", "s3cr3t"),
                ("CSI_ENDPOINT", "unix:///x/y"),
            ],
        );
        assert_eq!(c.endpoint, Endpoint::Tcp("127.0.0.1:9".into()));
        assert_eq!(
            c.linode.as_ref().unwrap().wait_timeout,
            Duration::from_secs(60)
        );
        assert!(!format!("{c:?}").contains("s3cr3t"));
        assert!(parse(&["--no-such-flag=1"], &[]).is_err());
    }

    #[test]
    fn defaults() {
        let c = config(&[], &[("DRIVER_ROLE", "controller"), ("LINODE_TOKEN", "t")]);
        assert_eq!(c.endpoint, Endpoint::Unix("/csi/csi.sock".into()));
        let l = c.linode.unwrap();
        assert_eq!(
            (l.url.as_str(), l.api_version.as_str()),
            ("https://api.linode.com", "v4beta")
        );
        assert_eq!(l.request_timeout, Duration::from_secs(10));
        assert_eq!(l.wait_timeout, Duration::from_secs(300));
        assert_eq!(c.access_policy_mode, AccessPolicyMode::Space);
        assert_eq!(c.worker_threads, 8);
        assert_eq!(c.space_cache_ttl, Duration::from_secs(60));
        assert_eq!(c.metadata_url, "http://169.254.169.254");
    }

    #[test]
    fn kubelet_registration_announces_the_csi_socket_unless_overridden() {
        let node = [
            ("DRIVER_ROLE", "node"),
            ("NODE_NAME", "n"),
            ("CSI_ENDPOINT", "unix:///var/lib/kubelet/plugins/d/csi.sock"),
        ];
        assert_eq!(config(&[], &node).registration, None);
        let on = config(
            &["--kubelet-registration-dir=/var/lib/kubelet/plugins_registry/"],
            &node,
        );
        assert_eq!(
            on.registration,
            Some(RegistrationConfig {
                dir: "/var/lib/kubelet/plugins_registry".into(),
                endpoint: "/var/lib/kubelet/plugins/d/csi.sock".into(),
            })
        );
        for announced in [
            "/host/plugins/d/csi.sock",
            "unix:///host/plugins/d/csi.sock",
        ] {
            let mut env = node.to_vec();
            env.push(("KUBELET_REGISTRATION_DIR", "/registration"));
            env.push(("KUBELET_PLUGIN_ENDPOINT", announced));
            let r = config(&[], &env).registration.unwrap();
            assert_eq!(r.endpoint, PathBuf::from("/host/plugins/d/csi.sock"));
        }
        let dev = config(&["dev", "--kubelet-registration-dir", "/tmp/reg"], &[]);
        assert_eq!(dev.registration.unwrap().dir, PathBuf::from("/tmp/reg"));
    }

    #[test]
    fn kubelet_registration_mistakes_name_the_variable() {
        let node = [("DRIVER_ROLE", "node"), ("NODE_NAME", "n")];
        let with = |extra: &[(&'static str, &'static str)]| {
            let mut env = node.to_vec();
            env.extend_from_slice(extra);
            parse(&[], &env).unwrap_err().message
        };
        let m = with(&[("KUBELET_REGISTRATION_DIR", "plugins_registry")]);
        assert!(
            m.starts_with("KUBELET_REGISTRATION_DIR: want an absolute"),
            "{m}"
        );
        let m = with(&[("KUBELET_PLUGIN_ENDPOINT", "/csi/csi.sock")]);
        assert!(
            m.starts_with("KUBELET_PLUGIN_ENDPOINT: only used with"),
            "{m}"
        );
        let m = with(&[
            ("KUBELET_REGISTRATION_DIR", "/registration"),
            ("KUBELET_PLUGIN_ENDPOINT", "csi.sock"),
        ]);
        assert!(
            m.starts_with("KUBELET_PLUGIN_ENDPOINT: invalid endpoint"),
            "{m}"
        );
        let m = with(&[
            ("KUBELET_REGISTRATION_DIR", "/registration"),
            ("CSI_ENDPOINT", "tcp://127.0.0.1:10000"),
        ]);
        assert!(m.contains("unix sockets only"), "{m}");
        let mut env = node.to_vec();
        env.extend_from_slice(&[
            ("KUBELET_REGISTRATION_DIR", "/registration"),
            ("CSI_ENDPOINT", "tcp://127.0.0.1:10000"),
            ("KUBELET_PLUGIN_ENDPOINT", "/proxy/csi.sock"),
        ]);
        assert_eq!(
            config(&[], &env).registration.unwrap().endpoint,
            PathBuf::from("/proxy/csi.sock")
        );
        let err = parse(
            &[],
            &[
                ("DRIVER_ROLE", "controller"),
                ("LINODE_TOKEN", "t"),
                ("KUBELET_REGISTRATION_DIR", "/registration"),
            ],
        )
        .unwrap_err();
        assert!(
            err.message
                .starts_with("KUBELET_REGISTRATION_DIR: only the node and dev"),
            "{}",
            err.message
        );
    }

    #[test]
    fn the_notify_socket_comes_from_the_environment_only() {
        let node = [
            ("DRIVER_ROLE", "node"),
            ("NODE_NAME", "n"),
            ("NOTIFY_SOCKET", "@sd-notify"),
        ];
        assert_eq!(
            config(&[], &node).notify_socket.as_deref(),
            Some("@sd-notify")
        );
        assert!(parse(&["--notify-socket=/run/x"], &node).is_err());
    }

    #[test]
    fn help_and_version() {
        assert!(matches!(parse(&["--help"], &[]), Ok(Command::Help)));
        assert!(matches!(parse(&["--version"], &[]), Ok(Command::Version)));
        for s in SETTINGS {
            assert!(help_text().contains(s.var));
        }
    }

    #[test]
    fn quirk_lists_combine_and_reject_contradictions() {
        assert_eq!(
            parse_quirks(" tag-filter-ignored,null-fields , capacity-in-stats,html-errors,"),
            Ok(vec![
                DevQuirk::TagFilterIgnored,
                DevQuirk::NullFields,
                DevQuirk::CapacityInStats,
                DevQuirk::HtmlErrors,
            ])
        );
        assert_eq!(parse_quirks(""), Ok(vec![]));
        for (name, quirk) in QUIRK_NAMES {
            assert_eq!(parse_quirks(name), Ok(vec![quirk]));
        }
        let unknown = parse_quirks("no-id-filter,nulls").unwrap_err();
        assert!(unknown.contains("\"nulls\"") && unknown.contains("foreign-filesystems"));
        assert!(parse_quirks("tag-filter-refused,tag-filter-ignored").is_err());
    }
}
