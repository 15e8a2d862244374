//! How the fake Linode is asked to behave beyond the contract's normal
//! course: each object's lifecycle, the snapshot times it shows, how an
//! access-policy PUT and a tag filter are answered, how fast clones copy,
//! what its quota API does; and the events it tells whoever emulates its
//! exports. Plain values: the records are `state`'s.

use serde::{Deserialize, Serialize};

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

/// What a filesystem list does with a `tags` key in its `X-Filter`. The
/// contract documents filtering by `label` and `region` only; no other
/// client filters NFS filesystems by tag.
#[derive(Debug, Clone, Copy, Default, PartialEq, Eq, Serialize, Deserialize)]
pub enum TagFilter {
    /// Filters by tag membership, like other Linode lists.
    #[default]
    Honoured,
    /// `400 Cannot filter on tags` (field `X-Filter`), as the API answers
    /// an unknown filter key.
    Refused,
    /// The `tags` key is dropped; the other keys still filter.
    Ignored,
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
        /// What a backend showing snapshots in the export names it by.
        label: String,
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
        label: String,
        source_export: String,
    },
}

/// How fast a clone copies its snapshot's data: a filesystem cloned from a
/// snapshot stays `creating` for the activation delay plus `setup` plus
/// the snapshot's bytes at this rate, at most `cap` more. Modelled, not
/// documented: how long the real backend takes is not said anywhere.
#[derive(Debug, Clone, Copy, PartialEq, Eq, Serialize, Deserialize)]
pub struct CloneRate {
    /// What every clone takes before its first byte, however small its
    /// snapshot (state files written before it existed read it as none).
    #[serde(default)]
    pub setup: std::time::Duration,
    /// A rate of 0 never finishes a copy: every clone takes the cap.
    pub bytes_per_second: u64,
    pub cap: std::time::Duration,
}

impl CloneRate {
    /// How long copying `bytes` takes, in ms.
    pub(super) fn copy_ms(self, bytes: i64) -> u64 {
        let cap = self.cap.as_millis();
        let bytes = u128::try_from(bytes).unwrap_or(0);
        let copying = (bytes * 1000)
            .checked_div(u128::from(self.bytes_per_second))
            .map_or(cap, |ms| ms.min(cap));
        (self.setup.as_millis() + copying)
            .try_into()
            .unwrap_or(u64::MAX)
    }
}

/// What the quota API of this backend does (the unverified variants of
/// issue 18; all off is the contract as linodego describes it).
#[derive(Debug, Clone, Default, PartialEq, Eq, Serialize, Deserialize)]
pub struct QuotaBehaviour {
    /// The quota collection and its items answer 404 for filesystems that
    /// exist (a backend without the quota API).
    pub missing: bool,
    /// Every quota POST answers 400 with field `path`.
    pub refused: bool,
    /// Quota paths begin with the filesystem's export name
    /// (`/<export>/csi-volumes/x`), in answers and in requests.
    pub path_with_export: bool,
    /// How a quota moves after a POST or PUT: `NeverActive` stays
    /// `updating`, `StickInError` turns `error`; `None` turns `active`.
    pub lifecycle: Option<Lifecycle>,
    /// At most this many quotas per filesystem; the next POST answers 400.
    pub limit: Option<usize>,
    /// A POST for a path that is no directory of the export answers 400
    /// (field `path`); the fake asks its [`ExportContent`](super::ExportContent).
    #[serde(default)]
    pub needs_directory: bool,
}
