//! The Linode API boundary: the intent-named `Cloud` trait the controller
//! codes against, its implementation `LinodeCloud` (the endpoints, in
//! `client`) over one HTTP `transport`, the wire types, the error mapping,
//! the request pacer and the shared poller that watches everything the
//! driver waits for. Nothing outside this module
//! builds Linode URLs or reads Linode JSON; nothing inside it knows about CSI.

pub(crate) mod answer;
pub mod client;
pub mod endpoint;
pub mod error;
pub mod pacer;
pub mod poller;
mod quota_api;
pub mod token;
pub mod transport;
pub mod types;

pub use answer::Method;
pub use client::LinodeCloud;
pub use endpoint::endpoint_template;
pub use error::{Error, WriteError};
pub use pacer::{RateLimitState, RequestClass};
pub use poller::{PendingWaits, Poller, WaitPolicy};
pub use transport::{user_agent, LinodeSettings, RetryPolicy, WriteFence};
pub use types::{
    naive_to_unix, unix_to_naive, CloneFilesystem, ConfigInterface, Filesystem,
    FilesystemAccessPolicy, FilesystemAccessPolicyUpdate, FilesystemStats, HasStatus, Instance,
    InstanceConfig, InstanceInterface, InterfaceGeneration, InterfacePurpose, InterfaceVpc,
    LinodeAcl, MtlsMode, NewFilesystem, NewQuota, Quota, QuotaUpdate, Readiness, Snapshot,
    SnapshotSource, Space, SpaceAccessPolicy, SquashPolicy, Status, VpcAcl, VpcAclSubnet,
};

/// What the driver needs from Linode, named by intent. Every error is already
/// a `crate::Error` with the HTTP → gRPC mapping applied and the operation in
/// its message; a write that must not be repeated blindly says whether it
/// may still be carried out (`WriteError`). Ids are the decimal integers of
/// the API.
pub trait Cloud: Send + Sync {
    /// The same backend with every request tried once, never retried, and
    /// served before new work when the budget runs low: for the poller,
    /// whose next tick is its retry and whose requests finish work already
    /// under way.
    fn single_attempt(&self) -> std::sync::Arc<dyn Cloud>;

    /// The same backend, its requests served before new work when the
    /// budget runs low (retried as usual): for the steps that finish what
    /// a call already began, such as a new filesystem's squash policy, so
    /// that they do not queue behind a burst of new creates.
    fn finishing(&self) -> std::sync::Arc<dyn Cloud>;

    /// The token's budget of `class` as the API last reported it (nothing
    /// known for a backend that sends no rate-limit headers).
    fn rate_limit(&self, class: RequestClass) -> RateLimitState {
        let _ = class;
        RateLimitState::default()
    }

    /// Every space of the account (all pages).
    fn list_spaces(&self) -> crate::Result<Vec<Space>>;
    fn get_space(&self, space_id: u64) -> crate::Result<Space>;
    /// Every space with exactly this label (the API does not make labels unique).
    fn find_spaces_by_label(&self, label: &str) -> crate::Result<Vec<Space>>;
    /// `None` when the backend has no policy for the space to show (the
    /// endpoint answers 404 or 501 on backends that lack it).
    fn get_space_access_policy(&self, space_id: u64) -> crate::Result<Option<SpaceAccessPolicy>>;

    /// Every filesystem of a space (all pages).
    fn list_filesystems(&self, space_id: u64) -> crate::Result<Vec<Filesystem>>;
    /// Filesystems of a space with exactly this label and region (`X-Filter`).
    fn find_filesystems(
        &self,
        space_id: u64,
        label: &str,
        region: &str,
    ) -> crate::Result<Vec<Filesystem>>;
    /// POST, sent again only after a 429: on an ambiguous failure, look it up by label.
    fn create_filesystem(
        &self,
        space_id: u64,
        fs: &NewFilesystem,
    ) -> Result<Filesystem, WriteError>;
    /// The filesystems of a space among `ids`, in one list request when the
    /// API can filter by id (a missing id is simply not in the answer).
    fn find_filesystems_by_ids(&self, space_id: u64, ids: &[u64])
        -> crate::Result<Vec<Filesystem>>;
    /// The filesystems of a space whose id is among `ids` or whose label is
    /// among `labels`, in one list request (an `X-Filter` `+or` of them)
    /// when the API can filter so; the whole space when it refuses the
    /// filter or the terms are too many for one. Only matching ones are
    /// returned either way.
    fn find_filesystems_matching(
        &self,
        space_id: u64,
        ids: &[u64],
        labels: &[&str],
    ) -> crate::Result<Vec<Filesystem>>;
    /// Filesystems of a space carrying `tag` (`X-Filter`, all pages; the
    /// whole space once the API refuses the filter). Only filesystems that
    /// carry `tag`, whatever the API did with the filter.
    fn find_filesystems_by_tag(&self, space_id: u64, tag: &str) -> crate::Result<Vec<Filesystem>>;
    fn get_filesystem(&self, space_id: u64, fs_id: u64) -> crate::Result<Filesystem>;
    /// Replaces the filesystem's tags (the API's only other updatable field
    /// is its label, which the driver never changes).
    fn update_filesystem_tags(
        &self,
        space_id: u64,
        fs_id: u64,
        tags: &[String],
    ) -> crate::Result<Filesystem>;
    fn delete_filesystem(&self, space_id: u64, fs_id: u64) -> crate::Result<()>;

    /// `None` when the backend has no per-filesystem access policy (the
    /// endpoint answers 404 or 501 for a filesystem that exists); NotFound
    /// when the filesystem does not exist.
    fn get_filesystem_access_policy(
        &self,
        space_id: u64,
        fs_id: u64,
    ) -> crate::Result<Option<FilesystemAccessPolicy>>;
    /// Whether the backend was seen without per-filesystem access policies
    /// (a read above answered `None`), so a change needing one can be
    /// refused before anything is made.
    fn lacks_filesystem_policies(&self) -> bool;
    /// Full replace: every field of `policy` is sent.
    fn put_filesystem_access_policy(
        &self,
        space_id: u64,
        fs_id: u64,
        policy: &FilesystemAccessPolicyUpdate,
    ) -> Result<FilesystemAccessPolicy, WriteError>;

    /// All snapshots of a filesystem (every page, 500 per page).
    fn list_snapshots(&self, space_id: u64, fs_id: u64) -> crate::Result<Vec<Snapshot>>;
    /// `tags` are omitted from the request when empty.
    fn create_snapshot(
        &self,
        space_id: u64,
        fs_id: u64,
        label: &str,
        tags: &[String],
    ) -> Result<Snapshot, WriteError>;
    fn get_snapshot(&self, space_id: u64, fs_id: u64, snap_id: u64) -> crate::Result<Snapshot>;
    fn delete_snapshot(&self, space_id: u64, fs_id: u64, snap_id: u64) -> crate::Result<()>;
    /// Restore: a NEW filesystem from snapshot `space_id/fs_id/snap_id`.
    fn clone_snapshot(
        &self,
        space_id: u64,
        fs_id: u64,
        snap_id: u64,
        clone: &CloneFilesystem,
    ) -> Result<Filesystem, WriteError>;

    fn get_instance(&self, linode_id: u64) -> crate::Result<Instance>;
    fn list_instance_configs(&self, linode_id: u64) -> crate::Result<Vec<InstanceConfig>>;
    fn list_instance_interfaces(&self, linode_id: u64) -> crate::Result<Vec<InstanceInterface>>;

    // Per-path quotas of a filesystem. A backend without the quota API
    // answers `Unimplemented` (never NotFound) from every quota call, so a
    // caller can tell it from a missing filesystem or quota (NotFound): a
    // 501 anywhere, or a 404 on the collection of a filesystem that exists.
    // A 404 on one quota (`…/quotas/{id}`) is NotFound: that quota or its
    // filesystem is gone, or the API is absent, which the collection tells.

    /// Every quota of a filesystem (all pages).
    fn list_quotas(&self, space_id: u64, fs_id: u64) -> crate::Result<Vec<Quota>>;
    /// The quotas of a filesystem whose `path` is exactly `path`
    /// (`X-Filter`; the whole list once the API refuses the filter).
    fn find_quotas_by_path(
        &self,
        space_id: u64,
        fs_id: u64,
        path: &str,
    ) -> crate::Result<Vec<Quota>>;
    /// POST, sent again only after a 429: on an ambiguous failure, look it up by path.
    fn create_quota(
        &self,
        space_id: u64,
        fs_id: u64,
        quota: &NewQuota,
    ) -> Result<Quota, WriteError>;
    fn get_quota(&self, space_id: u64, fs_id: u64, quota_id: u64) -> crate::Result<Quota>;
    /// PUT of the limits given; the quota then shows `updating` until the
    /// backend has applied them.
    fn update_quota(
        &self,
        space_id: u64,
        fs_id: u64,
        quota_id: u64,
        update: &QuotaUpdate,
    ) -> Result<Quota, WriteError>;
    fn delete_quota(&self, space_id: u64, fs_id: u64, quota_id: u64) -> crate::Result<()>;
}
