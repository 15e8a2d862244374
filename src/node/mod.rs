//! The CSI Node service. Handlers here are thin: each hands its request to
//! the worker pool (`crate::rpc`), where a `NodePlugin` method parses it
//! into typed values and does the work through `dyn Mounter`. Nothing in
//! this module tree calls the kernel or spawns a process directly.

mod context;
mod health;
mod identity;
mod input;
mod publish;
mod stage;
mod stats;
mod volume;

// Each request's validation, which its handler runs before any lock or
// mount: reachable from `crate::fuzzing` so the fuzz targets run exactly it.
pub(crate) use context::{MtlsMode, StageContext};
pub(crate) use publish::{parse_unpublish, PublishRequest};
pub(crate) use stage::{parse_unstage, StageRequest};
pub(crate) use stats::parse_stats;

use crate::capabilities;
use crate::locks::OpLocks;
use crate::mount::probe::Probes;
use crate::mount::Mounter;
use crate::proto::csi;
use crate::rpc::registrar::{rpc_name, Registrar};
use crate::rpc::Rpc;
use crate::{Error, Result};
use identity::NodeIdentity;
use std::os::unix::fs::DirBuilderExt;
use std::path::Path;
use std::sync::Arc;
use std::time::Duration;

/// What the node service needs from the process.
pub struct NodeDeps {
    pub mounter: Arc<dyn Mounter>,
    /// This Kubernetes node (`NODE_NAME`), for the identity fallback.
    pub node_name: String,
    pub metadata: crate::metadata::MetadataClient,
    pub kube: Option<crate::kube::KubeClient>,
}

/// The [`Name`](crate::rpc::registrar::Name) of a Node RPC.
macro_rules! name {
    ($rpc:literal) => {
        rpc_name!("csi.v1.Node", $rpc)
    };
}

/// The Node gRPC service.
pub fn service(deps: NodeDeps, rpc: Rpc) -> grpcio::Service {
    Registrar::new(rpc, Arc::new(NodePlugin::new(deps)))
        .pooled(name!("NodeStageVolume"), |p, req| p.stage(&req))
        .pooled(name!("NodeUnstageVolume"), |p, req| p.unstage(&req))
        .pooled(name!("NodePublishVolume"), |p, req| p.publish(&req))
        .pooled(name!("NodeUnpublishVolume"), |p, req| p.unpublish(&req))
        .pooled(name!("NodeGetVolumeStats"), |p, req| p.stats(&req))
        // The API cannot change an existing filesystem's capacity.
        .unimplemented::<csi::NodeExpandVolumeRequest, csi::NodeExpandVolumeResponse>(name!(
            "NodeExpandVolume"
        ))
        .inline(
            name!("NodeGetCapabilities"),
            |_, _: csi::NodeGetCapabilitiesRequest| {
                let mut resp = csi::NodeGetCapabilitiesResponse::new();
                resp.capabilities = capabilities::node();
                Ok(resp)
            },
        )
        // Network lookups on a cache miss: the pool, not the queue thread.
        .pooled(name!("NodeGetInfo"), |p, _: csi::NodeGetInfoRequest| {
            p.info()
        })
        .build()
}

/// The node's state behind the handlers.
struct NodePlugin {
    mounter: Arc<dyn Mounter>,
    /// Stage, unstage and a remount of the staging mount, keyed by volume id.
    volumes: OpLocks,
    /// Keyed by volume id: publishes share it between their look at the
    /// staging mount and their bind; a remount of it holds it alone, so
    /// none binds from a staging mount being replaced.
    staging_in_use: OpLocks,
    /// Publish/unpublish, keyed by target path, so pods sharing one volume
    /// never wait on each other.
    targets: OpLocks,
    identity: NodeIdentity,
    /// The bounded `statvfs` of stats and of staging mounts' health.
    probes: Arc<Probes>,
}

/// How long NodeGetVolumeStats waits for `statvfs`.
const STATS_TIMEOUT: Duration = Duration::from_secs(10);

impl NodePlugin {
    fn new(deps: NodeDeps) -> NodePlugin {
        let probes = Arc::new(Probes::new(STATS_TIMEOUT));
        let watched = Arc::downgrade(&probes);
        crate::metrics::watch_stuck_statvfs(move || Some(watched.upgrade()?.stuck()));
        NodePlugin {
            mounter: deps.mounter,
            volumes: OpLocks::new(),
            staging_in_use: OpLocks::new(),
            targets: OpLocks::new(),
            identity: NodeIdentity::new(deps.node_name, deps.metadata, deps.kube),
            probes,
        }
    }

    fn info(&self) -> Result<csi::NodeGetInfoResponse> {
        let mut resp = csi::NodeGetInfoResponse::new();
        resp.node_id = self.identity.linode_id()?.to_string();
        Ok(resp)
    }
}

/// The mount access type of a required capability; block is refused.
fn mount_capability(
    capability: Option<&csi::VolumeCapability>,
) -> Result<&csi::volume_capability::MountVolume> {
    let capability =
        capability.ok_or_else(|| Error::InvalidArgument("no volume capability set".into()))?;
    if !capability.has_mount() {
        return Err(Error::InvalidArgument(
            "no mount volume capability set".into(),
        ));
    }
    Ok(capability.mount())
}

/// The capability's mount flags one option per entry: a StorageClass may
/// join several in one (`"vers=4.2,noexec"`), and every later check (the
/// explicit `xprtsec=`, the per-mount bind flags) looks at single options.
fn mount_flags(mount: &csi::volume_capability::MountVolume) -> Result<Vec<String>> {
    input::check_mount_flags(&mount.mount_flags)?;
    Ok(mount
        .mount_flags
        .iter()
        .flat_map(|f| f.split(','))
        .map(str::trim)
        .filter(|f| !f.is_empty())
        .map(str::to_string)
        .collect())
}

/// `mkdir -p` with 0755, like kubelet's own volume directories.
fn create_dir(path: &Path) -> Result<()> {
    std::fs::DirBuilder::new()
        .recursive(true)
        .mode(0o755)
        .create(path)
        .map_err(|e| {
            Error::Internal(format!(
                "Failed to create directory ({}): {e}",
                path.display()
            ))
        })
}

/// More mounts stacked on one path than this means something keeps
/// mounting there; give up and let kubelet retry.
const MAX_STACKED_MOUNTS: usize = 8;

/// Unmounts `path` and removes the directory. Missing or never mounted is
/// success, because kubelet retries unmounts forever otherwise. A directory
/// that still has content after the unmount is an error, never removed
/// recursively: it would be data, not a mount point; only the driver's own
/// file `mark` goes, once nothing is mounted there any more.
fn cleanup_mount_point(mounter: &dyn Mounter, path: &Path, mark: Option<&str>) -> Result<()> {
    for _ in 0..MAX_STACKED_MOUNTS {
        mounter.unmount(path)?;
        if let Some(mark) = mark {
            if mounter.is_mount_point(path)? {
                continue;
            }
            match std::fs::remove_file(path.join(mark)) {
                Ok(()) => {}
                Err(e) if e.kind() == std::io::ErrorKind::NotFound => {}
                Err(e) => {
                    return Err(Error::Internal(format!(
                        "remove {}: {e}",
                        path.join(mark).display()
                    )))
                }
            }
        }
        match std::fs::remove_dir(path) {
            Ok(()) => return Ok(()),
            Err(e) if e.kind() == std::io::ErrorKind::NotFound => return Ok(()),
            // Still a mount point: another mount was stacked below.
            Err(e) if e.raw_os_error() == Some(libc::EBUSY) => continue,
            Err(e) => return Err(Error::Internal(format!("remove {}: {e}", path.display()))),
        }
    }
    Err(Error::Internal(format!(
        "{} is still mounted after {MAX_STACKED_MOUNTS} unmounts",
        path.display()
    )))
}

#[cfg(test)]
mod tests;
