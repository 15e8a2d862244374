//! The CSI Controller service: one registration table of thin handlers
//! (see [`crate::rpc::registrar`]),
//! each handing its request to the worker pool and a plain function in
//! `provision`, `publish`, `snapshots`, `inspect`, `listing`, `modify` or
//! `expand` (`subdirs` for the directory volumes of shared filesystems).
//! RPCs that may wait for Linode (CreateVolume, ControllerModifyVolume, and
//! ControllerPublish/Unpublish in node mode) return flows
//! that park on the shared poller instead of holding a worker. Nothing here
//! talks to Linode directly.

mod acl_cache;
mod classes;
mod clone;
mod cluster;
mod directories;
mod expand;
mod in_doubt;
mod inspect;
mod kept;
mod listing;
mod modify;
mod params;
mod provision;
mod publish;
mod quotas;
mod room;
mod shares;
mod snapshots;
mod spaces;
mod subdirs;
mod tags;
mod volume_capability;
mod walks;

pub use cluster::Cluster;
pub use params::{keys, Mutable, OnDelete, Params, ParentRef, QuotaMode, SpaceRef, SubdirParams};
pub use publish::inject_batch_panics;
// The request parsers the handlers run first, for `crate::fuzzing`.
pub(crate) use provision::parse_create;
pub(crate) use publish::linode_id;
pub(crate) use volume_capability::{capability_problem, check_capabilities};

use crate::capabilities;
use crate::config::{AccessPolicyMode, VolumeExpansion};
use crate::kube::KubeClient;
use crate::linode::{Cloud, Poller, WaitPolicy};
use crate::locks::OpLocks;
use crate::mount::Mounter;
use crate::proto::csi;
use crate::rpc::registrar::{rpc_name, Registrar};
use crate::rpc::Rpc;
use spaces::Spaces;
use std::path::PathBuf;
use std::sync::Arc;
use std::time::Duration;

/// What the controller is built from.
pub struct ControllerDeps {
    pub cloud: Arc<dyn Cloud>,
    pub kube: KubeClient,
    pub mode: AccessPolicyMode,
    pub wait: WaitPolicy,
    pub default_capacity_bytes: i64,
    /// How long a Space and its mTLS mode are reused (`SPACE_CACHE_TTL`).
    pub space_cache_ttl: Duration,
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
}

/// Shared state of every controller RPC.
pub struct Controller {
    cloud: Arc<dyn Cloud>,
    cluster: Cluster,
    spaces: Spaces,
    locks: OpLocks,
    mode: AccessPolicyMode,
    poller: Poller,
    default_capacity_bytes: i64,
    acl: publish::AclQueue,
    in_doubt: in_doubt::InDoubt,
    /// Runs access-policy batches, which answer no single call.
    rpc: Rpc,
    acl_cache: acl_cache::AclCache,
    walks: walks::Walks,
    expansion: VolumeExpansion,
    shares: shares::Shares,
    /// What creates and expansions under way claim of shared parents.
    room: room::Room,
}

/// The [`Name`](crate::rpc::registrar::Name) of a Controller RPC.
macro_rules! name {
    ($rpc:literal) => {
        rpc_name!("csi.v1.Controller", $rpc)
    };
}

/// The Controller gRPC service.
pub fn service(deps: ControllerDeps, rpc: Rpc) -> grpcio::Service {
    let classes = classes::ClassParents::new(deps.kube.duplicate());
    let c = Arc::new(Controller {
        poller: Poller::new(deps.cloud.clone(), deps.wait),
        spaces: Spaces::new(deps.cloud.clone(), deps.space_cache_ttl),
        cloud: deps.cloud,
        cluster: Cluster::new(deps.kube),
        locks: OpLocks::new(),
        mode: deps.mode,
        default_capacity_bytes: deps.default_capacity_bytes,
        acl: publish::AclQueue::default(),
        in_doubt: in_doubt::InDoubt::new(deps.request_timeout),
        rpc: rpc.clone(),
        acl_cache: acl_cache::AclCache::new(deps.acl_cache_max_age),
        walks: walks::Walks::default(),
        expansion: deps.expansion,
        shares: shares::Shares::new(deps.mounter, deps.share_mount_dir)
            .bounded_by(deps.nfs_mount_timeout)
            .naming(classes),
        room: room::Room::default(),
    });
    let expansion = c.expansion;
    let node_mode = c.mode == AccessPolicyMode::Node;
    let r = Registrar::new(rpc, c);
    let r = r
        .parking(name!("CreateVolume"), provision::create_volume)
        .pooled(name!("DeleteVolume"), provision::delete_volume)
        .pooled(
            name!("ValidateVolumeCapabilities"),
            inspect::validate_capabilities,
        )
        .pooled(name!("ControllerGetVolume"), inspect::get_volume)
        .pooled(name!("CreateSnapshot"), snapshots::create)
        .pooled(name!("DeleteSnapshot"), snapshots::delete)
        .pooled(name!("ListSnapshots"), snapshots::list)
        .pooled(name!("GetSnapshot"), snapshots::get)
        .pooled(name!("ListVolumes"), listing::list_volumes)
        .pooled(name!("GetCapacity"), listing::get_capacity)
        .parking(name!("ControllerModifyVolume"), modify::modify);
    // The API cannot change an existing filesystem's capacity; only a
    // subdirectory volume's quota grows, and only when the admin asks.
    let r = match expansion {
        VolumeExpansion::Subdirectory => r.parking(name!("ControllerExpandVolume"), expand::expand),
        VolumeExpansion::Off => r.unimplemented::<
            csi::ControllerExpandVolumeRequest,
            csi::ControllerExpandVolumeResponse,
        >(name!("ControllerExpandVolume")),
    };
    let r = if node_mode {
        r.parking(name!("ControllerPublishVolume"), publish::publish)
            .parking(name!("ControllerUnpublishVolume"), publish::unpublish)
    } else {
        r.unimplemented::<csi::ControllerPublishVolumeRequest, csi::ControllerPublishVolumeResponse>(
            name!("ControllerPublishVolume"),
        )
        .unimplemented::<csi::ControllerUnpublishVolumeRequest, csi::ControllerUnpublishVolumeResponse>(
            name!("ControllerUnpublishVolume"),
        )
    };
    r.inline(
        name!("ControllerGetCapabilities"),
        |c, _: csi::ControllerGetCapabilitiesRequest| {
            let mut resp = csi::ControllerGetCapabilitiesResponse::new();
            resp.capabilities = capabilities::controller(c.mode, c.expansion);
            Ok(resp)
        },
    )
    .build()
}
