//! The dev role's own settings (`DEV_*`): where it keeps its state, and how
//! its embedded fake Linode behaves (activation delay, faults, quirks, rate
//! limits). Only the dev role reads them: `settings.rs` asks this file for
//! them, and for the state directory the dev role's socket and share mounts
//! default to, and must not read a `DEV_*` variable itself.

use super::parse::parse_duration;
use super::quirks::{parse_quirks, DevQuirk};
use super::read::{ConfigError, Lookup, Setting};
use std::path::PathBuf;
use std::time::Duration;

/// The dev role's variables, in `--help` order after the production ones.
pub(super) const SETTINGS: &[Setting] = &[
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
        help: "dev role: backend variants to emulate, comma-separated: no-source-snapshot-id, snapshots-held-by-clones, no-id-filter, tag-filter-refused, tag-filter-ignored, no-filesystem-policy, capacity-in-stats, null-fields, html-errors, foreign-filesystems, no-quotas, quota-refused, quota-needs-directory, quota-path-with-export, quota-stuck-updating, quota-error, quota-limit=N, slow-clones, failing-clones=N, snapshot-directory (docs/configuration.md)",
    },
    Setting {
        var: "DEV_QUOTA_SAMPLE",
        default: "0s",
        help: "dev role: how long a quota's usage lags behind the files: each volume is counted at most this often, as a real backend's periodic count (0s: counted on every read)",
    },
    Setting {
        var: "DEV_NFS_LATENCY",
        default: "",
        help: "dev role: serve the emulated NFS exports through a passthrough that behaves like a server across a network: each file operation costs one round trip of this latency, at most 32 at once per mount, 1 GiB/s (empty: plain bind mounts); touch <DEV_STATE_DIR>/nfs-hung to make it stop answering, remove it to resume",
    },
    Setting {
        var: "DEV_CLAIM_LIST_DELAY",
        default: "0s",
        help: "dev role: how late the fake Kubernetes API answers a list of claims, as of when it was asked (a slow API server)",
    },
    Setting {
        var: "DEV_RATE_LIMITS",
        default: "",
        help: "dev role: rate-limit the fake API per window, e.g. list:200,other:400,window:60s (Linode's budgets; empty: unlimited)",
    },
];

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
    /// `DEV_QUOTA_SAMPLE`: how often the exports' quota usage is counted.
    pub quota_sample: Duration,
    /// `LINODE_REQUEST_TIMEOUT` for the client of the fake.
    pub request_timeout: Duration,
    /// `DEV_NFS_LATENCY`: the emulated network's round trip; `None`: the
    /// exports are plain bind mounts.
    pub nfs_latency: Option<Duration>,
    /// `DEV_CLAIM_LIST_DELAY`.
    pub claim_list_delay: Duration,
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

impl DevConfig {
    /// `request_timeout` is `LINODE_REQUEST_TIMEOUT`, which every role
    /// reads and the dev role's client of its fake obeys too.
    pub(super) fn from_lookup(
        lookup: &Lookup,
        request_timeout: Duration,
    ) -> Result<DevConfig, ConfigError> {
        Ok(DevConfig {
            state_dir: state_dir(lookup)?,
            activation_delay: lookup.duration("DEV_ACTIVATION_DELAY")?,
            faults: lookup.get("DEV_FAULTS").unwrap_or_default(),
            fault_seed: lookup
                .get("DEV_FAULT_SEED")
                .map(|s| {
                    s.parse::<u64>().map_err(|_| {
                        ConfigError::new(format!("DEV_FAULT_SEED: \"{s}\" is not a number"))
                    })
                })
                .transpose()?,
            quirks: parse_quirks(&lookup.get("DEV_QUIRKS").unwrap_or_default())
                .map_err(|e| ConfigError::new(format!("DEV_QUIRKS: {e}")))?,
            rate_limits: lookup
                .get("DEV_RATE_LIMITS")
                .filter(|s| !s.trim().is_empty())
                .map(|s| parse_rate_limits(&s))
                .transpose()
                .map_err(|e| ConfigError::new(format!("DEV_RATE_LIMITS: {e}")))?,
            quota_sample: lookup.duration("DEV_QUOTA_SAMPLE")?,
            request_timeout,
            nfs_latency: lookup
                .get("DEV_NFS_LATENCY")
                .filter(|s| !s.trim().is_empty())
                .map(|_| lookup.duration("DEV_NFS_LATENCY"))
                .transpose()?,
            claim_list_delay: lookup.duration("DEV_CLAIM_LIST_DELAY")?,
        })
    }
}

/// `DEV_STATE_DIR` against the working directory, `.` components dropped,
/// so paths printed and handed to clients work from anywhere.
pub(super) fn state_dir(lookup: &Lookup) -> Result<PathBuf, ConfigError> {
    let dir = PathBuf::from(lookup.or_default("DEV_STATE_DIR"));
    let full = if dir.is_absolute() {
        dir
    } else {
        std::env::current_dir()
            .map_err(|e| ConfigError::new(format!("DEV_STATE_DIR: {e}")))?
            .join(dir)
    };
    Ok(full.components().collect())
}

/// The dev role's socket: `csi.sock` in its state directory.
pub(super) fn socket(lookup: &Lookup) -> Result<PathBuf, ConfigError> {
    Ok(state_dir(lookup)?.join("csi.sock"))
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
