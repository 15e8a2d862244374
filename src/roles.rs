//! Builds what each role serves (beside Identity) from the configuration:
//! clients, mounters, and for `dev` the embedded fakes. Wiring only; no RPC
//! logic.

use crate::config::{Config, LinodeConfig, Role};
use crate::controller::{self, ControllerDeps};
use crate::identity;
use crate::kube::KubeClient;
use crate::linode::{LinodeCloud, LinodeSettings, WaitPolicy};
use crate::metadata::MetadataClient;
use crate::mount::linux::LinuxMounter;
use crate::node::{self, NodeDeps};
use crate::rpc::Rpc;
use std::any::Any;
use std::sync::Arc;
use std::time::Duration;

/// The metadata service is link-local: if it does not answer quickly it is
/// not there, and the node falls back to Kubernetes.
const METADATA_TIMEOUT: Duration = Duration::from_secs(2);

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

pub fn start(config: &Config, rpc: &Rpc) -> Result<Started, String> {
    match config.role {
        Role::Controller => {
            let linode = config.linode.as_ref().ok_or("LINODE_TOKEN: missing")?;
            let kube = KubeClient::from_env(config.kubeconfig.as_deref())
                .map_err(|e| format!("Kubernetes client: {}", e.message()))?;
            Ok(Started {
                services: vec![controller_service(config, linode, kube, rpc)?],
                resources: Box::new(()),
                banner: None,
            })
        }
        Role::Node => {
            let node_name = config.node_name.clone().ok_or("NODE_NAME: missing")?;
            // Only the identity fallback needs Kubernetes; a node that can
            // reach the metadata service works without it. A KUBECONFIG the
            // admin set but that does not work is a startup error, though.
            let kube = match KubeClient::from_env(config.kubeconfig.as_deref()) {
                Ok(k) => Some(k),
                Err(e) if config.kubeconfig.is_some() => {
                    return Err(format!("KUBECONFIG: {}", e.message()))
                }
                Err(e) => {
                    log::warn!(
                        "no Kubernetes client ({}); NodeGetInfo relies on the metadata service",
                        e.message()
                    );
                    None
                }
            };
            let deps = NodeDeps {
                mounter: Arc::new(LinuxMounter::new(
                    config.nfs_mount_helper.clone(),
                    config.nfs_mount_timeout,
                )),
                node_name,
                metadata: MetadataClient::new(&config.metadata_url, METADATA_TIMEOUT),
                kube,
            };
            Ok(Started {
                services: vec![node::service(deps, rpc.clone())],
                resources: Box::new(()),
                banner: None,
            })
        }
        Role::Dev => crate::dev::start(config, rpc),
    }
}

/// The Controller service over the real Linode client.
pub fn controller_service(
    config: &Config,
    linode: &LinodeConfig,
    kube: KubeClient,
    rpc: &Rpc,
) -> Result<grpcio::Service, String> {
    let mut settings = LinodeSettings::new(linode.token.clone());
    settings.base_url = linode.url.clone();
    settings.api_version = linode.api_version.clone();
    settings.ca_file = linode.ca_file.clone();
    settings.request_timeout = linode.request_timeout;
    settings.user_agent = format!("LinodeNfsCsi/{}", identity::version());
    let cloud =
        LinodeCloud::new(settings).map_err(|e| format!("Linode client: {}", e.message()))?;
    Ok(controller::service(
        ControllerDeps {
            cloud: Arc::new(cloud),
            kube,
            mode: config.access_policy_mode,
            wait: WaitPolicy::new(linode.wait_timeout),
            default_capacity_bytes: config.default_capacity_bytes,
            space_cache_ttl: config.space_cache_ttl,
        },
        rpc.clone(),
    ))
}
