//! What the fake Linode holds: the records of spaces, filesystems, policies,
//! snapshots and quotas, the knobs that shape them (`knobs`), and the
//! time-driven status machines that move them ([`State::advance`]). It must
//! not parse requests or render the wire format.

use super::content::ContentHook;
pub(super) use super::knobs::{
    CloneRate, FakeEvent, Lifecycle, PolicyPut, QuotaBehaviour, SnapshotTimes, TagFilter,
};
use super::seed::{FilesystemSeed, InstanceSeed, Seed, SpaceSeed};
use super::wire::api_error::ApiError;
use super::wire::dialect::Dialect;
use serde::{Deserialize, Serialize};
use std::collections::BTreeMap;
use std::time::{SystemTime, UNIX_EPOCH};

#[derive(Debug, Clone, Serialize, Deserialize)]
pub(super) struct SpaceRec {
    pub(super) id: u64,
    pub(super) label: String,
    pub(super) mtls_mode: String,
    pub(super) policy_missing: bool,
    pub(super) tags: Vec<String>,
    pub(super) max_capacity_bytes: i64,
    pub(super) created: i64,
}

#[derive(Debug, Clone, Copy, PartialEq, Eq, Serialize, Deserialize)]
pub(super) enum Phase {
    Creating,
    Active,
    Error,
    Deleting,
}

#[derive(Debug, Clone, Serialize, Deserialize)]
pub(super) struct PolicyRec {
    pub(super) label: String,
    pub(super) enabled: bool,
    pub(super) linode_ids: Vec<u64>,
    pub(super) squash_policy: String,
    pub(super) protocols: Vec<String>,
    /// `updating` until this time (ms), `None` once settled.
    pub(super) updating_until: Option<u64>,
    /// Settled outcome when `updating_until` is `None`.
    pub(super) error: bool,
    pub(super) created: i64,
    pub(super) updated: Option<i64>,
}

#[derive(Debug, Clone, Serialize, Deserialize)]
pub(super) struct FsRec {
    pub(super) id: u64,
    pub(super) space_id: u64,
    pub(super) label: String,
    pub(super) region: String,
    pub(super) tags: Vec<String>,
    pub(super) max_capacity_bytes: i64,
    pub(super) source_snapshot_id: Option<u64>,
    pub(super) phase: Phase,
    /// Creating → settled, or Deleting → gone, at this time (ms).
    pub(super) transition_at: u64,
    /// Mount targets are shown (set on activation).
    pub(super) mount_targets: bool,
    /// A lifecycle hid the FQDN / the IPs.
    pub(super) hide_fqdn: bool,
    pub(super) hide_ips: bool,
    pub(super) created: i64,
    pub(super) updated: i64,
    pub(super) policy: PolicyRec,
    /// Data no quota below the root covers (someone's own files), which
    /// the root quota's usage counts when no one answers for the content.
    #[serde(default)]
    pub(super) unquoted_bytes: i64,
}

#[derive(Debug, Clone, Serialize, Deserialize)]
pub(super) struct SnapRec {
    pub(super) id: u64,
    pub(super) filesystem_id: u64,
    pub(super) space_id: u64,
    pub(super) label: String,
    pub(super) phase: Phase,
    pub(super) transition_at: u64,
    pub(super) locked: bool,
    pub(super) created: i64,
    /// The last status change (seconds); `None` in state files that predate it.
    #[serde(default)]
    pub(super) updated: Option<i64>,
    #[serde(default)]
    pub(super) times: SnapshotTimes,
    #[serde(default)]
    pub(super) tags: Vec<String>,
    /// The bytes of data it holds, sampled from the export's content when
    /// it was taken; `None` when no one answers for the content.
    #[serde(default)]
    pub(super) data_bytes: Option<i64>,
}

/// What an active snapshot shows as `size_bytes`. Modelled, not
/// documented: the fake holds no data, so every snapshot shows the same.
pub(super) const SNAPSHOT_SIZE_BYTES: i64 = 4_194_304;

/// What the backend last sampled of a quota's usage.
#[derive(Debug, Clone, Copy, PartialEq, Eq, Serialize, Deserialize)]
pub(super) struct QuotaUsage {
    pub(super) bytes: i64,
    pub(super) files: i64,
    pub(super) collected_at: i64,
}

#[derive(Debug, Clone, Serialize, Deserialize)]
pub(super) struct QuotaRec {
    pub(super) id: u64,
    pub(super) space_id: u64,
    pub(super) filesystem_id: u64,
    /// Inside the filesystem, without any export name in front.
    pub(super) path: String,
    pub(super) max_capacity_bytes: i64,
    pub(super) max_file_count: Option<i64>,
    /// `Creating` is shown as `updating` (quotas have no `creating`).
    pub(super) phase: Phase,
    /// `updating` → settled at this time (ms).
    pub(super) transition_at: u64,
    pub(super) created: i64,
    pub(super) updated: Option<i64>,
    /// `None` until usage has been sampled (its fields then show null).
    pub(super) usage: Option<QuotaUsage>,
    /// The filesystem's root quota (never stored: see `State::root_quota`).
    #[serde(default)]
    pub(super) is_root: bool,
}

fn first_quota_id() -> u64 {
    501
}

/// A filesystem's root quota is shown with this id plus the filesystem's,
/// far above the ids the counter hands out, so no two quotas share one.
const ROOT_QUOTA_IDS: u64 = 1 << 40;
/// The file limit a root quota shows (the documented answer has one).
const ROOT_QUOTA_FILES: i64 = 2_000_000;

/// Everything that survives a restart when a state file is used.
#[derive(Debug, Clone, Serialize, Deserialize)]
pub(super) struct State {
    pub(super) regions: Vec<String>,
    pub(super) activation_delay_ms: u64,
    pub(super) deletion_delay_ms: u64,
    pub(super) default_squash_policy: String,
    pub(super) unique_filesystem_labels: bool,
    pub(super) page_size: Option<usize>,
    pub(super) policy_put: PolicyPut,
    pub(super) snapshot_duplicate_status: u16,
    pub(super) locked_delete_status: u16,
    pub(super) interfaces_paginated: bool,
    /// An API revision that cannot filter filesystems by `id`.
    #[serde(default)]
    pub(super) no_filesystem_id_filter: bool,
    /// The API as Linode's own client describes it today: the documented
    /// `source_snapshot_id` of a clone is not returned.
    #[serde(default)]
    pub(super) omit_source_snapshot_id: bool,
    /// A snapshot cannot be deleted while a clone made from it exists (one
    /// being deleted no longer counts); how the real backend behaves is
    /// not documented.
    #[serde(default)]
    pub(super) snapshots_held_by_clones: bool,
    #[serde(default)]
    pub(super) tag_filter: TagFilter,
    /// A backend without the filesystem access-policy endpoints (Linode's
    /// own driver once turned every policy call off for one): they answer
    /// 404 for filesystems that exist.
    #[serde(default)]
    pub(super) no_filesystem_policy: bool,
    /// How answers are written (capacity in `stats`, Go-style nulls).
    #[serde(default)]
    pub(super) dialect: Dialect,
    pub(super) spaces: BTreeMap<u64, SpaceRec>,
    pub(super) instances: BTreeMap<u64, InstanceSeed>,
    pub(super) filesystems: BTreeMap<u64, FsRec>,
    pub(super) snapshots: BTreeMap<u64, SnapRec>,
    #[serde(default)]
    pub(super) quotas: BTreeMap<u64, QuotaRec>,
    #[serde(default = "first_quota_id")]
    pub(super) next_quota_id: u64,
    #[serde(default)]
    pub(super) quota_behaviour: QuotaBehaviour,
    /// Clones copy their snapshot's data at this rate; `None`: at once.
    #[serde(default)]
    pub(super) clone_rate: Option<CloneRate>,
    /// The next this many clones of snapshots turn `error`, not `active`.
    #[serde(default)]
    pub(super) failing_clones: usize,
    /// Who answers for the files in the exports (dev mode); installed
    /// again by each process, so never saved.
    #[serde(skip)]
    pub(super) content: ContentHook,
    pub(super) next_filesystem_id: u64,
    pub(super) next_snapshot_id: u64,
    pub(super) filesystem_lifecycles: BTreeMap<String, Lifecycle>,
    pub(super) snapshot_lifecycles: BTreeMap<String, Lifecycle>,
    pub(super) policy_lifecycles: BTreeMap<u64, Lifecycle>,
}

pub(super) fn now_ms() -> u64 {
    SystemTime::now()
        .duration_since(UNIX_EPOCH)
        .map(|d| d.as_millis() as u64)
        .unwrap_or(0)
}

pub(super) fn now_secs() -> i64 {
    (now_ms() / 1000) as i64
}

pub(super) fn export_path(label: &str, id: u64) -> String {
    format!("/{label}-{id:x}")
}

impl State {
    pub(super) fn from_seed(seed: &Seed) -> State {
        let created = now_secs();
        let mut state = State {
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
            omit_source_snapshot_id: false,
            snapshots_held_by_clones: false,
            tag_filter: TagFilter::Honoured,
            no_filesystem_policy: false,
            dialect: Dialect::default(),
            spaces: seed
                .spaces
                .iter()
                .map(|s| (s.id, SpaceRec::from_seed(s, created)))
                .collect(),
            instances: seed.instances.iter().map(|i| (i.id, i.clone())).collect(),
            filesystems: BTreeMap::new(),
            snapshots: BTreeMap::new(),
            quotas: BTreeMap::new(),
            next_quota_id: first_quota_id(),
            quota_behaviour: QuotaBehaviour::default(),
            clone_rate: None,
            failing_clones: 0,
            content: ContentHook::default(),
            next_filesystem_id: 101,
            next_snapshot_id: 9001,
            filesystem_lifecycles: BTreeMap::new(),
            snapshot_lifecycles: BTreeMap::new(),
            policy_lifecycles: BTreeMap::new(),
        };
        for fs in &seed.filesystems {
            state.insert_existing(fs, created);
        }
        state
    }

    /// A filesystem that was already there (made by someone else): active,
    /// mount targets shown, the next id. `None` when its space is unknown.
    pub(super) fn insert_existing(&mut self, seed: &FilesystemSeed, created: i64) -> Option<u64> {
        self.spaces.get(&seed.space_id)?;
        let id = match seed.id {
            Some(id) if id > 0 && !self.filesystems.contains_key(&id) => {
                self.next_filesystem_id = self.next_filesystem_id.max(id + 1);
                id
            }
            _ => {
                let id = self.next_filesystem_id;
                self.next_filesystem_id += 1;
                id
            }
        };
        let policy = PolicyRec::fresh(&seed.label, &self.default_squash_policy, created);
        self.filesystems.insert(
            id,
            FsRec {
                id,
                space_id: seed.space_id,
                label: seed.label.clone(),
                region: seed.region.clone(),
                tags: seed.tags.clone(),
                max_capacity_bytes: seed.max_capacity_bytes,
                source_snapshot_id: None,
                phase: Phase::Active,
                transition_at: 0,
                mount_targets: true,
                hide_fqdn: false,
                hide_ips: false,
                created,
                updated: created,
                policy,
                unquoted_bytes: 0,
            },
        );
        Some(id)
    }

    /// Moves every status machine to `now`; returns whether anything changed.
    pub(super) fn advance(&mut self, now: u64, events: &mut Vec<FakeEvent>) -> bool {
        let mut changed = false;
        let mut gone = Vec::new();
        for fs in self.filesystems.values_mut() {
            if fs.phase == Phase::Creating && now >= fs.transition_at {
                let mut lifecycle = self.filesystem_lifecycles.get(&fs.label).copied();
                if fs.source_snapshot_id.is_some() && self.failing_clones > 0 {
                    self.failing_clones -= 1;
                    lifecycle = Some(Lifecycle::StickInError);
                }
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
            self.quotas.retain(|_, q| q.filesystem_id != id);
            changed = true;
        }
        for quota in self.quotas.values_mut() {
            if quota.phase == Phase::Creating && now >= quota.transition_at {
                // `updated` stays as the POST or PUT left it: the documented
                // list (linode-api.md §7.10) shows an active quota never
                // changed since its creation with `updated: null`.
                match self.quota_behaviour.lifecycle {
                    Some(Lifecycle::NeverActive) => continue,
                    Some(Lifecycle::StickInError) => quota.phase = Phase::Error,
                    _ => quota.phase = Phase::Active,
                }
                changed = true;
            }
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

    pub(super) fn space(&self, id: u64) -> Result<&SpaceRec, ApiError> {
        self.spaces.get(&id).ok_or_else(ApiError::not_found)
    }

    pub(super) fn instance(&self, id: u64) -> Result<&InstanceSeed, ApiError> {
        self.instances.get(&id).ok_or_else(ApiError::not_found)
    }

    /// A filesystem addressed under the wrong space is 404 too.
    pub(super) fn filesystem(&self, space_id: u64, fs_id: u64) -> Result<&FsRec, ApiError> {
        self.space(space_id)?;
        self.filesystems
            .get(&fs_id)
            .filter(|f| f.space_id == space_id)
            .ok_or_else(ApiError::not_found)
    }

    /// The filesystem's quota collection: 404 for a missing filesystem, and
    /// for every filesystem on a backend without the quota API.
    pub(super) fn quota_filesystem(&self, space_id: u64, fs_id: u64) -> Result<&FsRec, ApiError> {
        let fs = self.filesystem(space_id, fs_id)?;
        if self.quota_behaviour.missing {
            return Err(ApiError::not_found());
        }
        Ok(fs)
    }

    pub(super) fn quota(&self, space_id: u64, fs_id: u64, id: u64) -> Result<QuotaRec, ApiError> {
        let fs = self.quota_filesystem(space_id, fs_id)?;
        if id == ROOT_QUOTA_IDS + fs_id {
            return Ok(State::root_quota(fs));
        }
        self.quotas
            .get(&id)
            .filter(|q| q.filesystem_id == fs_id)
            .cloned()
            .ok_or_else(ApiError::not_found)
    }

    /// The quotas of filesystem `fs` as its collection lists them: its root
    /// quota first, then those made through the API.
    pub(super) fn quotas_of(&self, fs: &FsRec) -> Vec<QuotaRec> {
        let made = self.quotas.values().filter(|q| q.filesystem_id == fs.id);
        std::iter::once(State::root_quota(fs))
            .chain(made.cloned())
            .collect()
    }

    /// What the real backend shows of every filesystem (linode-api.md §3.8):
    /// a quota at `/` that is the whole capacity, always active and
    /// read-only. Derived from the filesystem, so it needs no storing.
    fn root_quota(fs: &FsRec) -> QuotaRec {
        QuotaRec {
            id: ROOT_QUOTA_IDS + fs.id,
            space_id: fs.space_id,
            filesystem_id: fs.id,
            path: "/".into(),
            max_capacity_bytes: fs.max_capacity_bytes,
            max_file_count: Some(ROOT_QUOTA_FILES),
            phase: Phase::Active,
            transition_at: 0,
            created: fs.created,
            updated: None,
            usage: None,
            is_root: true,
        }
    }

    /// How long a clone of `snapshot_id` copies its data before it can
    /// turn active (ms): nothing without a clone rate. A snapshot taken
    /// while no one answered for the content holds what it shows.
    pub(super) fn clone_copy_ms(&self, snapshot_id: u64) -> u64 {
        match (self.clone_rate, self.snapshots.get(&snapshot_id)) {
            (Some(rate), Some(snap)) => {
                rate.copy_ms(snap.data_bytes.unwrap_or(SNAPSHOT_SIZE_BYTES))
            }
            _ => 0,
        }
    }

    pub(super) fn snapshot(
        &self,
        space_id: u64,
        fs_id: u64,
        snap_id: u64,
    ) -> Result<&SnapRec, ApiError> {
        self.filesystem(space_id, fs_id)?;
        self.snapshots
            .get(&snap_id)
            .filter(|s| s.filesystem_id == fs_id)
            .ok_or_else(ApiError::not_found)
    }
}

impl PolicyRec {
    /// The policy every new filesystem starts with (contract §9 item 10).
    pub(super) fn fresh(label: &str, squash: &str, created: i64) -> PolicyRec {
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
}

impl SpaceRec {
    pub(super) fn from_seed(s: &SpaceSeed, created: i64) -> SpaceRec {
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
