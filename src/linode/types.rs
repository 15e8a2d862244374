//! Serde wire types of the Linode API (these structs ARE the JSON contract of
//! linode-api.md). Responses ignore unknown fields and keep nullable fields as
//! `Option`; every status is an open enum so a new backend value never breaks
//! decoding. No HTTP and no behaviour beyond decoding lives here.
//!
//! Backends differ (linode-api.md and the variants others have seen), and Go
//! clients read a `null` or missing value as its zero value; so do these
//! types, except for the ESSENTIAL fields, without which an object cannot be
//! named or addressed: `id` of every object, `space_id` of a filesystem, and
//! `space_id` and `filesystem_id` of a snapshot (its handle and its poll key
//! are made of them), `vpc_id` of an interface's VPC. Everything else
//! defaults: a string to `""`, a list to empty, a bool to false, an optional
//! value to `None`, a status to an unknown (empty) one, which waits treat
//! like any status they do not know. An object of a list missing an
//! essential field is skipped with a warning (see `Page`); a single object
//! missing one fails to decode.

use serde::{Deserialize, Deserializer, Serialize, Serializer};
use std::fmt;

/// Declares an enum of known wire strings plus `Unknown(String)`, with
/// string (de)serialisation that never fails on a new value.
macro_rules! open_enum {
    ($(#[$meta:meta])* $name:ident { $($variant:ident => $wire:literal),+ $(,)? }) => {
        $(#[$meta])*
        #[derive(Debug, Clone, PartialEq, Eq, Hash)]
        pub enum $name {
            $($variant,)+
            /// A value this client does not know yet, kept verbatim.
            Unknown(String),
        }

        impl $name {
            pub fn as_str(&self) -> &str {
                match self {
                    $($name::$variant => $wire,)+
                    $name::Unknown(s) => s,
                }
            }
        }

        impl From<&str> for $name {
            fn from(s: &str) -> Self {
                match s {
                    $($wire => $name::$variant,)+
                    other => $name::Unknown(other.to_string()),
                }
            }
        }

        impl fmt::Display for $name {
            fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
                f.write_str(self.as_str())
            }
        }

        impl Serialize for $name {
            fn serialize<S: Serializer>(&self, s: S) -> Result<S::Ok, S::Error> {
                s.serialize_str(self.as_str())
            }
        }

        impl<'de> Deserialize<'de> for $name {
            fn deserialize<D: Deserializer<'de>>(d: D) -> Result<Self, D::Error> {
                let s = String::deserialize(d)?;
                Ok($name::from(s.as_str()))
            }
        }
    };
}

open_enum!(
    /// Lifecycle status shared by spaces, filesystems, snapshots and access
    /// policies (`failed` is the early-beta spelling of `error`; `pending`
    /// was seen right after a policy PUT).
    Status {
        Creating => "creating",
        Active => "active",
        Updating => "updating",
        Deleting => "deleting",
        Error => "error",
        Failed => "failed",
        Pending => "pending",
    }
);

open_enum!(
    /// Space access policy TLS mode.
    MtlsMode {
        Required => "required",
        Optional => "optional",
        Disabled => "disabled",
    }
);

open_enum!(
    /// Filesystem access policy squash setting.
    SquashPolicy {
        None => "none",
        RootSquash => "root_squash",
        AllSquash => "all_squash",
    }
);

open_enum!(
    /// How a snapshot came to be.
    SnapshotSource {
        Manual => "manual",
        Policy => "policy",
    }
);

open_enum!(
    /// Which interface API an instance uses (`configs` vs `interfaces`).
    InterfaceGeneration {
        LegacyConfig => "legacy_config",
        Linode => "linode",
    }
);

open_enum!(
    /// Purpose of a config-profile interface.
    InterfacePurpose {
        Public => "public",
        Vlan => "vlan",
        Vpc => "vpc",
    }
);

/// A status the answer did not give (null or missing): unknown, so waited
/// on like any status this client does not know.
impl Default for Status {
    fn default() -> Status {
        Status::Unknown(String::new())
    }
}

/// What a poll of an asynchronous object says about waiting for `active`.
#[derive(Debug, Clone, PartialEq, Eq)]
pub enum Readiness {
    Ready,
    Pending,
    /// Terminal: waiting longer cannot help. Carries the observed status.
    Failed(String),
}

impl Status {
    /// `deleting` counts as terminal too: an object on its way out never
    /// becomes active, and waiting the full deadline for it helps nobody.
    pub fn readiness(&self) -> Readiness {
        match self {
            Status::Active => Readiness::Ready,
            Status::Error | Status::Failed | Status::Deleting => {
                Readiness::Failed(self.as_str().to_string())
            }
            _ => Readiness::Pending,
        }
    }
}

/// Objects that carry a lifecycle status (what `wait_until_active` polls).
pub trait HasStatus {
    fn status(&self) -> &Status;
}

macro_rules! has_status {
    ($($t:ty),+) => {
        $(impl HasStatus for $t {
            fn status(&self) -> &Status {
                &self.status
            }
        })+
    };
}

/// `null` and absent both decode as the type's default (lists that the API
/// documents as arrays are sometimes `null` while an object is provisioning).
fn null_as_default<'de, D, T>(d: D) -> Result<T, D::Error>
where
    D: Deserializer<'de>,
    T: Default + Deserialize<'de>,
{
    Ok(Option::<T>::deserialize(d)?.unwrap_or_default())
}

/// Each item that decodes; one that does not (an essential field missing or
/// of the wrong type) is logged and left out, so one odd object never fails
/// a whole list.
fn decodable_items<'de, D, T>(d: D) -> Result<Vec<T>, D::Error>
where
    D: Deserializer<'de>,
    T: Deserialize<'de>,
{
    let items: Vec<serde_json::Value> = null_as_default(d)?;
    Ok(items
        .into_iter()
        .filter_map(|item| match T::deserialize(item) {
            Ok(v) => Some(v),
            Err(e) => {
                log::warn!(
                    "Linode API: skipping a {} of a list: {e}",
                    std::any::type_name::<T>()
                        .rsplit("::")
                        .next()
                        .unwrap_or("value")
                );
                None
            }
        })
        .collect())
}

/// `{data, page, pages, results}` list envelope.
#[derive(Debug, Clone, Deserialize)]
#[serde(bound(deserialize = "T: Deserialize<'de>"))]
pub struct Page<T> {
    #[serde(default = "Vec::new", deserialize_with = "decodable_items")]
    pub data: Vec<T>,
    #[serde(default, deserialize_with = "null_as_default")]
    pub page: u32,
    #[serde(default, deserialize_with = "null_as_default")]
    pub pages: u32,
    #[serde(default, deserialize_with = "null_as_default")]
    pub results: u64,
}

#[derive(Debug, Clone, PartialEq, Deserialize)]
pub struct Space {
    pub id: u64,
    #[serde(default, deserialize_with = "null_as_default")]
    pub label: String,
    pub description: Option<String>,
    #[serde(default, deserialize_with = "null_as_default")]
    pub status: Status,
    pub max_capacity_bytes: Option<i64>,
    pub used_capacity_bytes: Option<i64>,
    pub created: Option<String>,
    pub updated: Option<String>,
    #[serde(default, deserialize_with = "null_as_default")]
    pub tags: Vec<String>,
}

#[derive(Debug, Clone, PartialEq, Deserialize)]
pub struct VpcAclSubnet {
    pub id: u64,
    pub label: Option<String>,
    pub url: Option<String>,
    pub range: Option<String>,
}

#[derive(Debug, Clone, PartialEq, Deserialize)]
pub struct VpcAcl {
    pub id: u64,
    pub label: Option<String>,
    pub url: Option<String>,
    pub range: Option<String>,
    #[serde(default, deserialize_with = "null_as_default")]
    pub subnets: Vec<VpcAclSubnet>,
}

#[derive(Debug, Clone, PartialEq, Deserialize)]
pub struct SpaceAccessPolicy {
    pub space_id: Option<u64>,
    pub label: Option<String>,
    #[serde(default, deserialize_with = "null_as_default")]
    pub enabled: bool,
    #[serde(default, deserialize_with = "null_as_default")]
    pub vpc_acl: Vec<VpcAcl>,
    pub mtls_ca_cert: Option<String>,
    pub mtls_mode: Option<MtlsMode>,
    #[serde(default, deserialize_with = "null_as_default")]
    pub status: Status,
    pub created: Option<String>,
    pub updated: Option<String>,
}

#[derive(Debug, Clone, PartialEq, Deserialize)]
pub struct FilesystemStats {
    /// Where an earlier API shape reports the size (not on the filesystem).
    pub max_capacity_bytes: Option<i64>,
    pub used_capacity_bytes: Option<i64>,
    pub used_file_count: Option<i64>,
    pub collected_at: Option<String>,
}

#[derive(Debug, Clone, PartialEq, Deserialize)]
pub struct Filesystem {
    pub id: u64,
    pub space_id: u64,
    #[serde(default, deserialize_with = "null_as_default")]
    pub label: String,
    #[serde(default, deserialize_with = "null_as_default")]
    pub region: String,
    #[serde(default, deserialize_with = "null_as_default")]
    pub protocol_versions: Vec<String>,
    #[serde(default, deserialize_with = "null_as_default")]
    pub status: Status,
    /// Each entry is `[ipv6]:/export`; empty until the filesystem is active.
    #[serde(default, deserialize_with = "null_as_default")]
    pub mount_target_ips: Vec<String>,
    /// `host:/export`, the authoritative mount source; `None` until ready.
    pub mount_target_fqdn: Option<String>,
    pub max_capacity_bytes: Option<i64>,
    pub max_file_count: Option<i64>,
    pub snapshot_usage_bytes: Option<i64>,
    /// A string although other ids are integers (per the contract).
    pub ldap_config_id: Option<String>,
    pub source_snapshot_id: Option<u64>,
    pub created: Option<String>,
    pub updated: Option<String>,
    #[serde(default, deserialize_with = "null_as_default")]
    pub tags: Vec<String>,
    pub stats: Option<FilesystemStats>,
}

#[derive(Debug, Clone, PartialEq, Deserialize)]
pub struct LinodeAcl {
    pub id: u64,
    pub label: Option<String>,
    pub url: Option<String>,
    pub ipv6: Option<String>,
}

#[derive(Debug, Clone, PartialEq, Deserialize)]
pub struct FilesystemAccessPolicy {
    #[serde(default, deserialize_with = "null_as_default")]
    pub filesystem_id: u64,
    pub label: Option<String>,
    #[serde(default, deserialize_with = "null_as_default")]
    pub enabled: bool,
    #[serde(default, deserialize_with = "null_as_default")]
    pub linode_acl: Vec<LinodeAcl>,
    pub squash_policy: Option<SquashPolicy>,
    #[serde(default, deserialize_with = "null_as_default")]
    pub protocols: Vec<String>,
    #[serde(default, deserialize_with = "null_as_default")]
    pub status: Status,
    pub created: Option<String>,
    pub updated: Option<String>,
}

impl Filesystem {
    /// The size, from either documented shape: the filesystem's own
    /// `max_capacity_bytes`, or else its `stats.max_capacity_bytes`.
    pub fn capacity_bytes(&self) -> Option<i64> {
        self.max_capacity_bytes.or_else(|| {
            self.stats
                .as_ref()
                .and_then(|stats| stats.max_capacity_bytes)
        })
    }
}

impl FilesystemAccessPolicy {
    /// The Linode ids in the ACL, in ACL order.
    pub fn linode_ids(&self) -> Vec<u64> {
        self.linode_acl.iter().map(|a| a.id).collect()
    }
}

#[derive(Debug, Clone, PartialEq, Deserialize)]
pub struct Snapshot {
    pub id: u64,
    pub filesystem_id: u64,
    pub space_id: u64,
    #[serde(default, deserialize_with = "null_as_default")]
    pub label: String,
    #[serde(default, deserialize_with = "null_as_default")]
    pub status: Status,
    pub created: Option<String>,
    /// Missing from the documented snapshot schema, but Linode objects carry
    /// it; the driver reads it only when `created` is null or unreadable.
    pub updated: Option<String>,
    pub expiration: Option<String>,
    #[serde(default, deserialize_with = "null_as_default")]
    pub locked: bool,
    pub source: Option<SnapshotSource>,
    pub policy_id: Option<u64>,
    pub size_bytes: Option<i64>,
    pub aggregated_size_bytes: Option<i64>,
    #[serde(default, deserialize_with = "null_as_default")]
    pub tags: Vec<String>,
}

impl Snapshot {
    /// When it was taken, in seconds since the epoch: `created`, else
    /// `updated` (the nearest time the backend shows; `created` is nullable).
    pub fn taken_at(&self) -> Option<i64> {
        [&self.created, &self.updated]
            .into_iter()
            .flatten()
            .find_map(|t| naive_to_unix(t))
    }
}

/// A per-path quota of a filesystem (`…/filesystems/{id}/quotas`). Usage is
/// sampled by the backend: `used_*` and `collected_at` are `None` until the
/// first sample. `path` is as the backend writes it (a backend may put the
/// export name in front).
#[derive(Debug, Clone, PartialEq, Deserialize)]
pub struct Quota {
    pub id: u64,
    pub filesystem_id: u64,
    #[serde(default, deserialize_with = "null_as_default")]
    pub path: String,
    #[serde(default, deserialize_with = "null_as_default")]
    pub is_root: bool,
    pub max_capacity_bytes: Option<i64>,
    pub used_capacity_bytes: Option<i64>,
    #[serde(default, deserialize_with = "null_as_default")]
    pub quota_exceeded: bool,
    pub max_file_count: Option<i64>,
    pub used_file_count: Option<i64>,
    /// `active`, `updating` or `error` (the shared open `Status`).
    #[serde(default, deserialize_with = "null_as_default")]
    pub status: Status,
    pub created: Option<String>,
    pub updated: Option<String>,
    pub collected_at: Option<String>,
    /// Per-user and per-group limits; the driver never sets them and only
    /// keeps what the backend shows, undecoded.
    pub user_group_config: Option<serde_json::Value>,
}

has_status!(
    Space,
    SpaceAccessPolicy,
    Filesystem,
    FilesystemAccessPolicy,
    Snapshot,
    Quota
);

#[derive(Debug, Clone, PartialEq, Deserialize)]
pub struct Instance {
    pub id: u64,
    pub label: Option<String>,
    pub region: Option<String>,
    pub status: Option<String>,
    #[serde(default, deserialize_with = "null_as_default")]
    pub ipv4: Vec<String>,
    pub ipv6: Option<String>,
    /// Absent on instances predating Linode Interfaces.
    pub interface_generation: Option<InterfaceGeneration>,
    pub lke_cluster_id: Option<u64>,
    #[serde(default, deserialize_with = "null_as_default")]
    pub tags: Vec<String>,
}

#[derive(Debug, Clone, PartialEq, Deserialize)]
pub struct ConfigInterfaceIpv4 {
    pub vpc: Option<String>,
    pub nat_1_1: Option<String>,
}

#[derive(Debug, Clone, PartialEq, Deserialize)]
pub struct ConfigInterface {
    pub id: Option<u64>,
    pub purpose: Option<InterfacePurpose>,
    #[serde(default, deserialize_with = "null_as_default")]
    pub primary: bool,
    #[serde(default, deserialize_with = "null_as_default")]
    pub active: bool,
    pub vpc_id: Option<u64>,
    pub subnet_id: Option<u64>,
    pub ipv4: Option<ConfigInterfaceIpv4>,
}

#[derive(Debug, Clone, PartialEq, Deserialize)]
pub struct InstanceConfig {
    pub id: u64,
    pub label: Option<String>,
    #[serde(default, deserialize_with = "null_as_default")]
    pub interfaces: Vec<ConfigInterface>,
}

#[derive(Debug, Clone, PartialEq, Deserialize)]
pub struct InterfaceVpc {
    pub vpc_id: u64,
    pub subnet_id: Option<u64>,
}

/// A Linode Interfaces (new generation) interface; only the VPC part matters.
#[derive(Debug, Clone, PartialEq, Deserialize)]
pub struct InstanceInterface {
    pub id: u64,
    pub vpc: Option<InterfaceVpc>,
}

/// Body of `POST nfs/spaces/{id}/filesystems` (what the caller decides).
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct NewFilesystem {
    pub label: String,
    pub region: String,
    pub max_capacity_bytes: i64,
    /// Omitted from the request when empty.
    pub tags: Vec<String>,
}

/// Body of `POST …/snapshots/{id}/clone`.
#[derive(Debug, Clone, PartialEq, Eq, Serialize)]
pub struct CloneFilesystem {
    pub label: String,
    pub region: String,
    /// Target space; `None` lets the API default to the source space.
    #[serde(skip_serializing_if = "Option::is_none")]
    pub space_id: Option<u64>,
    /// Size of the new filesystem in GiB; `None` keeps the source's size.
    #[serde(skip_serializing_if = "Option::is_none")]
    pub size_gib: Option<u64>,
    #[serde(skip_serializing_if = "Vec::is_empty")]
    pub tags: Vec<String>,
}

/// Body of `POST …/filesystems/{id}/quotas`.
#[derive(Debug, Clone, PartialEq, Eq, Serialize)]
pub struct NewQuota {
    pub path: String,
    pub max_capacity_bytes: i64,
    /// Omitted from the request when `None` (no file-count limit).
    #[serde(skip_serializing_if = "Option::is_none")]
    pub max_file_count: Option<i64>,
}

/// Body of `PUT …/quotas/{id}`: only the limits given are sent; an omitted
/// one keeps its value.
#[derive(Debug, Clone, Default, PartialEq, Eq, Serialize)]
pub struct QuotaUpdate {
    #[serde(skip_serializing_if = "Option::is_none")]
    pub max_capacity_bytes: Option<i64>,
    #[serde(skip_serializing_if = "Option::is_none")]
    pub max_file_count: Option<i64>,
}

/// Full-replace body of `PUT …/filesystems/{id}/access-policy`: every field
/// is always sent, because an omitted field resets to its default; except an
/// empty label, which the API refuses (1-63 characters): a backend that shows
/// the policy's label as `null` is sent none back.
#[derive(Debug, Clone, PartialEq, Eq, Serialize)]
pub struct FilesystemAccessPolicyUpdate {
    #[serde(skip_serializing_if = "String::is_empty")]
    pub label: String,
    pub enabled: bool,
    pub linode_ids: Vec<u64>,
    pub squash_policy: SquashPolicy,
    pub protocols: Vec<String>,
}

/// Seconds since the Unix epoch (UTC) of a Linode naive timestamp
/// `YYYY-MM-DDTHH:MM:SS` (no zone suffix; UTC implied). `None` if malformed.
pub fn naive_to_unix(ts: &str) -> Option<i64> {
    let b = ts.as_bytes();
    if b.len() != 19 || b[4] != b'-' || b[7] != b'-' || b[10] != b'T' {
        return None;
    }
    if b[13] != b':' || b[16] != b':' {
        return None;
    }
    let num = |r: std::ops::Range<usize>| -> Option<i64> {
        let s = ts.get(r)?;
        if !s.bytes().all(|c| c.is_ascii_digit()) {
            return None;
        }
        s.parse().ok()
    };
    let (y, mo, d) = (num(0..4)?, num(5..7)?, num(8..10)?);
    let (h, mi, s) = (num(11..13)?, num(14..16)?, num(17..19)?);
    if !(1..=12).contains(&mo) || d < 1 || d > days_in_month(y, mo) || h > 23 || mi > 59 || s > 59 {
        return None;
    }
    Some(days_from_civil(y, mo, d) * 86_400 + h * 3600 + mi * 60 + s)
}

/// The Linode naive timestamp for `secs` since the epoch (UTC).
pub fn unix_to_naive(secs: i64) -> String {
    let days = secs.div_euclid(86_400);
    let rem = secs.rem_euclid(86_400);
    let (y, m, d) = civil_from_days(days);
    format!(
        "{y:04}-{m:02}-{d:02}T{:02}:{:02}:{:02}",
        rem / 3600,
        rem % 3600 / 60,
        rem % 60
    )
}

fn is_leap(y: i64) -> bool {
    (y % 4 == 0 && y % 100 != 0) || y % 400 == 0
}

fn days_in_month(y: i64, m: i64) -> i64 {
    match m {
        2 if is_leap(y) => 29,
        2 => 28,
        4 | 6 | 9 | 11 => 30,
        _ => 31,
    }
}

// Howard Hinnant's civil-date algorithms (proleptic Gregorian calendar).
fn days_from_civil(y: i64, m: i64, d: i64) -> i64 {
    let y = if m <= 2 { y - 1 } else { y };
    let era = y.div_euclid(400);
    let yoe = y - era * 400;
    let mp = (m + 9) % 12;
    let doy = (153 * mp + 2) / 5 + d - 1;
    let doe = yoe * 365 + yoe / 4 - yoe / 100 + doy;
    era * 146_097 + doe - 719_468
}

fn civil_from_days(z: i64) -> (i64, i64, i64) {
    let z = z + 719_468;
    let era = z.div_euclid(146_097);
    let doe = z - era * 146_097;
    let yoe = (doe - doe / 1460 + doe / 36_524 - doe / 146_096) / 365;
    let doy = doe - (365 * yoe + yoe / 4 - yoe / 100);
    let mp = (5 * doy + 2) / 153;
    let d = doy - (153 * mp + 2) / 5 + 1;
    let m = if mp < 10 { mp + 3 } else { mp - 9 };
    (
        if m <= 2 {
            yoe + era * 400 + 1
        } else {
            yoe + era * 400
        },
        m,
        d,
    )
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn naive_timestamps_round_trip_as_utc() {
        let table = [
            ("1970-01-01T00:00:00", 0),
            ("2000-02-29T12:34:56", 951_827_696),
            ("2026-05-01T14:00:00", 1_777_644_000),
            ("1969-12-31T23:59:59", -1),
        ];
        for (ts, secs) in table {
            assert_eq!(naive_to_unix(ts), Some(secs), "{ts}");
            assert_eq!(unix_to_naive(secs), ts);
        }
    }

    #[test]
    fn malformed_timestamps_are_rejected() {
        for ts in [
            "",
            "2026-05-01T14:00:00Z",
            "2026-05-01 14:00:00",
            "2026-13-01T00:00:00",
            "2025-02-29T00:00:00",
            "2026-05-01T24:00:00",
            "2026-05-01T14:00:+0",
            "２０２6-05-01T14:00",
        ] {
            assert_eq!(naive_to_unix(ts), None, "{ts:?}");
        }
    }

    #[test]
    fn unknown_status_values_decode() {
        let s: Status = serde_json::from_str("\"resizing\"").unwrap();
        assert_eq!(s, Status::Unknown("resizing".into()));
        assert_eq!(s.readiness(), Readiness::Pending);
        assert_eq!(serde_json::to_string(&s).unwrap(), "\"resizing\"");
        let m: MtlsMode = serde_json::from_str("\"required\"").unwrap();
        assert_eq!(m, MtlsMode::Required);
        assert_eq!(
            Status::from("failed").readiness(),
            Readiness::Failed("failed".into())
        );
        assert_eq!(Status::from("active").readiness(), Readiness::Ready);
    }

    #[test]
    fn filesystem_decodes_provisioning_shape_with_nulls_and_unknown_fields() {
        let fs: Filesystem = serde_json::from_str(
            r#"{"id":301,"space_id":7,"label":"pvc-a","region":"us-ord",
                "protocol_versions":["nfsv4"],"status":"creating","mount_target_ips":null,
                "mount_target_fqdn":null,"max_capacity_bytes":10737418240,
                "snapshot_usage_bytes":null,"ldap_config_id":"ldap-123","source_snapshot_id":null,
                "created":"2026-09-30T10:00:00","updated":null,"tags":null,
                "stats":{"used_capacity_bytes":null,"used_file_count":null,"collected_at":null},
                "brand_new_field":{"x":1}}"#,
        )
        .unwrap();
        assert_eq!(fs.status, Status::Creating);
        assert!(fs.mount_target_ips.is_empty());
        assert!(fs.tags.is_empty());
        assert_eq!(fs.ldap_config_id.as_deref(), Some("ldap-123"));
        assert_eq!(fs.max_file_count, None);
    }

    #[test]
    fn request_bodies_serialise_as_the_contract_says() {
        let clone = CloneFilesystem {
            label: "pvc-b".into(),
            region: "us-ord".into(),
            space_id: Some(7),
            size_gib: None,
            tags: vec![],
        };
        assert_eq!(
            serde_json::to_value(&clone).unwrap(),
            serde_json::json!({"label":"pvc-b","region":"us-ord","space_id":7})
        );
        let grown = CloneFilesystem {
            size_gib: Some(3),
            tags: vec!["a".into()],
            ..clone
        };
        assert_eq!(
            serde_json::to_value(&grown).unwrap(),
            serde_json::json!({"label":"pvc-b","region":"us-ord","space_id":7,
                "size_gib":3,"tags":["a"]})
        );
        let put = FilesystemAccessPolicyUpdate {
            label: "pvc-b".into(),
            enabled: false,
            linode_ids: vec![],
            squash_policy: SquashPolicy::RootSquash,
            protocols: vec!["nfsv4".into()],
        };
        assert_eq!(
            serde_json::to_value(&put).unwrap(),
            serde_json::json!({"label":"pvc-b","enabled":false,"linode_ids":[],
                "squash_policy":"root_squash","protocols":["nfsv4"]})
        );
    }

    #[test]
    fn nulls_and_missing_fields_decode_to_defaults() {
        let fs: Filesystem = serde_json::from_str(
            r#"{"id":301,"space_id":7,"label":null,"status":null,"tags":null,
                "stats":{"max_capacity_bytes":5368709120}}"#,
        )
        .unwrap();
        assert_eq!((fs.label.as_str(), fs.region.as_str()), ("", ""));
        assert_eq!(fs.status, Status::default());
        assert_eq!(fs.status.readiness(), Readiness::Pending);
        assert_eq!(fs.capacity_bytes(), Some(5 << 30), "capacity in stats");
        let policy: FilesystemAccessPolicy =
            serde_json::from_str(r#"{"enabled":null,"linode_acl":null,"status":"active"}"#)
                .unwrap();
        assert!(!policy.enabled && policy.linode_ids().is_empty());
        let snap: Snapshot = serde_json::from_str(
            r#"{"id":9,"filesystem_id":301,"space_id":7,"locked":null,"label":null}"#,
        )
        .unwrap();
        assert!(!snap.locked);
        let space: Space = serde_json::from_str(r#"{"id":7}"#).unwrap();
        assert_eq!(space.label, "");
    }

    #[test]
    fn a_list_skips_objects_missing_an_essential_field() {
        let page: Page<Filesystem> = serde_json::from_str(
            r#"{"data":[{"id":1,"space_id":7},{"space_id":7,"label":"no-id"},
                {"id":3,"label":"no-space"},{"id":4,"space_id":7}],
                "page":1,"pages":null,"results":4}"#,
        )
        .unwrap();
        let ids: Vec<u64> = page.data.iter().map(|f| f.id).collect();
        assert_eq!(ids, [1, 4]);
        assert_eq!(page.pages, 0);
        assert!(serde_json::from_str::<Filesystem>(r#"{"space_id":7}"#).is_err());
    }

    #[test]
    fn capacity_is_read_from_either_shape() {
        let top: Filesystem = serde_json::from_str(
            r#"{"id":1,"space_id":7,"max_capacity_bytes":10,"stats":{"max_capacity_bytes":20}}"#,
        )
        .unwrap();
        assert_eq!(top.capacity_bytes(), Some(10));
        let none: Filesystem =
            serde_json::from_str(r#"{"id":1,"space_id":7,"stats":null}"#).unwrap();
        assert_eq!(none.capacity_bytes(), None);
    }
}
