//! What every controller RPC shares: the `Controller` (the backend client,
//! the poller, the caches, the locks, the access-policy queue, the shared
//! parents' mounts and room) and what it is built from. State only: the
//! RPCs are the handler modules', what they do to volumes the kinds'.

use super::acl::cache::AclCache;
use super::acl::queue::AclQueue;
use super::cluster::Cluster;
use super::directory::autogrowth::Autogrowth;
use super::directory::batches::SnapshotBatches;
use super::directory::group_jobs::GroupJobs;
use super::directory::pools::Pools;
use super::fills::claims::FillWatch;
use super::fills::copies::Copies;
use super::fills::holders::Temporaries;
use super::fills::running::Fills;
use super::in_doubt::InDoubt;
use super::lock_keys::Lock;
use super::spaces::Spaces;
use super::tags::Marks;
use super::walks::Walks;
use crate::cluster_id::ClusterId;
use crate::config::{AccessPolicyMode, FillSettings, VolumeExpansion};
use crate::controller::kind::directory::ledger::account::Accounts;
use crate::controller::kind::directory::ledger::observed::Observed;
use crate::controller::kind::directory::ledger::quota_lists::QuotaLists;
use crate::controller::kind::directory::ledger::room::Room;
use crate::controller::kind::directory::parent::classes::ClassParents;
use crate::controller::kind::directory::parent::parent_cache::ParentCache;
use crate::controller::kind::directory::parent::shares::Shares;
use crate::kube::KubeClient;
use crate::lease::Leadership;
use crate::linode::{Cloud, Poller, WaitPolicy};
use crate::locks::{OpGuard, OpLocks};
use crate::metadata::MetadataClient;
use crate::mount::Mounter;
use crate::mutex::lock;
use crate::rpc::Rpc;
use crate::timers::Timers;
use crate::Error;
use std::path::PathBuf;
use std::sync::Arc;
use std::time::Duration;

/// What the controller is built from.
pub struct ControllerDeps {
    pub cloud: Arc<dyn Cloud>,
    /// Whether this process may write (it holds the cluster's Lease).
    pub lease: Arc<Leadership>,
    /// This cluster's identity, settled at start.
    pub cluster_id: ClusterId,
    pub kube: KubeClient,
    pub mode: AccessPolicyMode,
    pub wait: WaitPolicy,
    pub default_capacity_bytes: i64,
    /// How long a Space and its mTLS mode are reused (`SPACE_CACHE_TTL`).
    pub space_cache_ttl: Duration,
    /// `MAINTENANCE_INTERVAL`: zero runs no `janitor`.
    pub maintenance_interval: Duration,
    /// `POOL_EMPTY_GRACE`.
    pub pool_empty_grace: Duration,
    /// The bounds of the jobs filling directory volumes.
    pub fill: FillSettings,
    /// `LINODE_REQUEST_TIMEOUT`: how long a create may be in doubt.
    pub request_timeout: Duration,
    /// `ACL_CACHE_MAX_AGE`: when a known filesystem ACL is read again.
    pub acl_cache_max_age: Duration,
    /// `VOLUME_EXPANSION`.
    pub expansion: VolumeExpansion,
    /// Mounts the shared parents of `subdirectory` volumes...
    pub mounter: Arc<dyn Mounter>,
    /// ...at `SHARE_MOUNT_DIR/<space>-<fs>`...
    pub share_mount_dir: PathBuf,
    /// ...and checks them within `NFS_MOUNT_TIMEOUT`.
    pub nfs_mount_timeout: Duration,
    /// `COPY_THREADS`.
    pub copy_threads: usize,
    /// Where the controller learns its own Linode (node mode admits it to
    /// the pool filesystems it mounts); `None` where there is none to ask.
    pub metadata: Option<MetadataClient>,
    /// The Kubernetes node the controller runs on (`NODE_NAME`), whose
    /// providerID names its Linode when the metadata service cannot.
    pub node_name: Option<String>,
}

/// Shared state of every controller RPC.
pub struct Controller {
    pub(in crate::controller) cloud: Arc<dyn Cloud>,
    /// Only the holder of the Lease serves writes, upkeep and jobs.
    pub(in crate::controller) lease: Arc<Leadership>,
    /// What this cluster's objects carry: acted on only when they do.
    pub(in crate::controller) marks: Marks,
    pub(in crate::controller) cluster: Cluster,
    pub(in crate::controller) spaces: Spaces,
    pub(in crate::controller) locks: OpLocks,
    pub(in crate::controller) mode: AccessPolicyMode,
    pub(in crate::controller) poller: Poller,
    pub(in crate::controller) default_capacity_bytes: i64,
    pub(in crate::controller) acl: AclQueue,
    pub(in crate::controller) in_doubt: InDoubt,
    /// Runs access-policy batches, which answer no single call.
    pub(in crate::controller) rpc: Rpc,
    pub(in crate::controller) acl_cache: AclCache,
    pub(in crate::controller) walks: Walks,
    pub(in crate::controller) expansion: VolumeExpansion,
    pub(in crate::controller) shares: Shares,
    /// What creates and expansions under way claim of shared parents.
    pub(in crate::controller) room: Room,
    /// The directory snapshots waiting for, or in, a parent snapshot.
    pub(in crate::controller) dir_snapshots: SnapshotBatches,
    /// The group snapshots being taken, which a repeated call joins.
    pub(in crate::controller) group_jobs: GroupJobs,
    /// The temporary filesystems restores copy from, and the copies.
    pub(in crate::controller) temporaries: Temporaries,
    pub(in crate::controller) copies: Copies,
    /// The jobs filling new directory volumes, owned by no call.
    pub(in crate::controller) fills: Fills,
    /// The claims the fills are for, and what the fills tell them.
    pub(in crate::controller) fill_watch: FillWatch,
    /// How long a job may go on (`FILL_TIMEOUT`)...
    pub(in crate::controller) fill_timeout: Duration,
    /// ...and a call wait for one (`LINODE_WAIT_TIMEOUT`).
    pub(in crate::controller) call_wait: Duration,
    /// A job's pauses and the bounds of the calls waiting for it.
    pub(in crate::controller) timers: Timers,
    /// Quota lists of shared parents, shared by the calls that need one at once...
    pub(in crate::controller) quota_lists: QuotaLists,
    /// The backend for steps that finish what a call began (`Cloud::finishing`).
    pub(in crate::controller) finishing: Arc<dyn Cloud>,
    /// ...and what they and the controller's own writes say of each parent.
    pub(in crate::controller) accounts: Accounts,
    /// Shared parents as last read (`SPACE_CACHE_TTL`).
    pub(in crate::controller) parent_cache: ParentCache,
    /// The pools of shared filesystems the driver runs.
    pub(in crate::controller) pools: Pools,
    /// Directory volumes' usage as last sampled, for the metrics...
    pub(in crate::controller) observed: Observed,
    /// ...and what autogrow remembers of them between rounds.
    pub(in crate::controller) autogrowth: Autogrowth,
    metadata: Option<MetadataClient>,
    node_name: Option<String>,
    own_linode: std::sync::Mutex<Option<u64>>,
}

/// How long a parent's account is used before it is listed again: the
/// upkeep's interval (each round samples every parent it tends anyway), or
/// a minute without an upkeep.
fn account_max_age(maintenance: Duration) -> Duration {
    if maintenance.is_zero() {
        Duration::from_secs(60)
    } else {
        maintenance
    }
}

impl Controller {
    pub fn new(deps: ControllerDeps, rpc: Rpc) -> Controller {
        let classes = ClassParents::new(deps.kube.duplicate());
        Controller {
            poller: Poller::new(deps.cloud.clone(), deps.wait),
            spaces: Spaces::new(deps.cloud.clone(), deps.space_cache_ttl),
            finishing: deps.cloud.finishing(),
            cloud: deps.cloud,
            lease: deps.lease,
            marks: Marks::new(&deps.cluster_id),
            cluster: Cluster::new(deps.kube),
            locks: OpLocks::new(),
            mode: deps.mode,
            default_capacity_bytes: deps.default_capacity_bytes,
            acl: AclQueue::default(),
            in_doubt: InDoubt::new(deps.request_timeout),
            rpc,
            acl_cache: AclCache::new(deps.acl_cache_max_age),
            walks: Walks::default(),
            expansion: deps.expansion,
            shares: Shares::new(deps.mounter, deps.share_mount_dir)
                .bounded_by(deps.nfs_mount_timeout)
                .naming(classes),
            room: Room::default(),
            dir_snapshots: SnapshotBatches::default(),
            group_jobs: GroupJobs::default(),
            temporaries: Temporaries::default(),
            quota_lists: QuotaLists::default(),
            accounts: Accounts::new(account_max_age(deps.maintenance_interval)),
            parent_cache: ParentCache::new(deps.space_cache_ttl),
            copies: Copies::new(deps.copy_threads),
            fills: Fills::default(),
            fill_timeout: deps.fill.timeout,
            fill_watch: FillWatch::new(deps.fill.progress_interval, deps.fill.claim_grace),
            call_wait: deps.wait.timeout,
            timers: Timers::new(),
            pools: Pools::default(),
            observed: Observed::default(),
            autogrowth: Autogrowth::default(),
            metadata: deps.metadata,
            node_name: deps.node_name,
            own_linode: std::sync::Mutex::new(None),
        }
    }

    /// The Linode the controller runs on: from the metadata service, else
    /// from its Kubernetes node's providerID (`NODE_NAME`); asked until one
    /// answers, then remembered.
    pub fn own_linode(&self) -> Result<u64, Error> {
        if let Some(id) = *lock(&self.own_linode) {
            return Ok(id);
        }
        let from_metadata = match &self.metadata {
            Some(metadata) => metadata.instance().map(|i| i.id),
            None => Err(Error::FailedPrecondition("no metadata service".into())),
        };
        let id = match (from_metadata, &self.node_name) {
            (Ok(id), _) => id,
            (Err(e), Some(node)) => self.cluster.linode_of(node).map_err(|k| {
                k.context(format!(
                    "the controller's own Linode: metadata service: {}; its node {node}",
                    e.message()
                ))
            })?,
            (Err(e), None) => {
                return Err(e.context(
                    "the controller's own Linode, from the metadata service (NODE_NAME is not set, so its node cannot say)",
                ))
            }
        };
        *lock(&self.own_linode) = Some(id);
        Ok(id)
    }

    /// Takes the operation lock `key` (Aborted while another call holds it).
    pub fn lock(&self, key: Lock) -> Result<OpGuard, Error> {
        self.locks.try_lock(&key.to_string())
    }
}
