//! The pieces roles are assembled from, shared by [`crate::roles`] and
//! [`crate::dev`]: what a started role hands the server, and the Controller
//! services over the real Linode client. Wiring only; no RPC logic.

use crate::config::{Config, LinodeConfig};
use crate::controller::{self, ControllerDeps};
use crate::kube::KubeClient;
use crate::lease::Leadership;
use crate::linode::{LinodeCloud, LinodeSettings, WaitPolicy};
use crate::metadata::MetadataClient;
use crate::mount::{LinuxMounter, Mounter};
use crate::rpc::Rpc;
use std::any::Any;
use std::sync::Arc;
use std::time::Duration;

/// The metadata service is link-local: if it does not answer quickly it is
/// not there.
pub const METADATA_TIMEOUT: Duration = Duration::from_secs(2);

/// The services of a role and whatever must live as long as they do.
pub struct Started {
    pub services: Vec<grpcio::Service>,
    /// Dropped after the server has drained (fakes, dev-mode mounts).
    pub resources: Box<dyn Any>,
    pub banner: Option<String>,
}

impl Started {
    /// Prints what a dev-mode user needs to start using the socket.
    pub fn announce(&self) {
        if let Some(banner) = &self.banner {
            println!("{banner}");
        }
    }
}

/// The Controller and GroupController services over the real Linode
/// client, mounting shared parents with the real mounter.
pub fn controller_service(
    config: &Config,
    linode: &LinodeConfig,
    kube: KubeClient,
    rpc: &Rpc,
) -> Result<Vec<grpcio::Service>, String> {
    let mounter = LinuxMounter::new(config.nfs_mount_helper.clone(), config.nfs_mount_timeout);
    let metadata = MetadataClient::new(&config.metadata_url, METADATA_TIMEOUT);
    controller_service_with(config, linode, kube, rpc, Arc::new(mounter), metadata)
}

/// The Controller service over the real Linode client, mounting shared
/// parents with `mounter` (dev mode's emulated NFS) and learning its own
/// Linode from `metadata` (dev mode's fake).
pub fn controller_service_with(
    config: &Config,
    linode: &LinodeConfig,
    kube: KubeClient,
    rpc: &Rpc,
    mounter: Arc<dyn Mounter>,
    metadata: MetadataClient,
) -> Result<Vec<grpcio::Service>, String> {
    let mut settings = LinodeSettings::new(linode.token.expose());
    settings.base_url = linode.url.clone();
    settings.api_version = linode.api_version.clone();
    settings.ca_file = linode.ca_file.clone();
    settings.token_file = linode.token_file.clone();
    settings.request_timeout = linode.request_timeout;
    let mut lease_settings = config.lease.clone().ok_or("no lease settings")?;
    let cluster_id = crate::lease::identity::settle(
        &kube,
        config.cluster_id.as_ref(),
        &lease_settings.namespace,
        &lease_settings.name,
        lease_settings.call_timeout(),
    )?;
    log::info!(
        "cluster identity {cluster_id}{}: only what carries it is this cluster's",
        match config.cluster_id {
            Some(_) => " (CLUSTER_ID)",
            None => " (derived from the kube-system Namespace)",
        }
    );
    lease_settings.cluster = Some(cluster_id.to_string());
    let lease = Leadership::new(lease_settings);
    settings.fence = Some(lease.fence());
    let cloud =
        LinodeCloud::new(settings).map_err(|e| format!("Linode client: {}", e.message()))?;
    let elector = kube.duplicate();
    let services = controller::services(
        ControllerDeps {
            cloud: Arc::new(cloud),
            lease: lease.clone(),
            cluster_id,
            kube,
            mode: config.access_policy_mode,
            wait: WaitPolicy::new(config.wait_timeout),
            default_capacity_bytes: config.default_capacity_bytes,
            space_cache_ttl: config.space_cache_ttl,
            maintenance_interval: config.maintenance_interval,
            pool_empty_grace: config.pool_empty_grace,
            fill: config.fill,
            request_timeout: linode.request_timeout,
            acl_cache_max_age: config.acl_cache_max_age,
            expansion: config.volume_expansion,
            mounter,
            share_mount_dir: config.share_mount_dir.clone(),
            nfs_mount_timeout: config.nfs_mount_timeout,
            copy_threads: config.copy_threads,
            metadata: Some(metadata),
            node_name: config.node_name.clone(),
        },
        rpc.clone(),
    );
    // After the services, which act on its first gain.
    lease.publish();
    crate::lease::start(elector, &lease);
    Ok(services)
}
