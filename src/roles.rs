//! Builds what each role serves (beside Identity) from the configuration:
//! the real clients and mounters for `controller` and `node`, and
//! [`crate::dev`] for `dev`. Dispatch only; the parts every role is assembled
//! from are in [`crate::wiring`].

use crate::config::{Config, Role};
use crate::kube::KubeClient;
use crate::metadata::MetadataClient;
use crate::mount::linux::LinuxMounter;
use crate::node::{self, NodeDeps};
use crate::rpc::Rpc;
use crate::wiring::{controller_service, Started, METADATA_TIMEOUT};
use std::sync::Arc;

pub fn start(config: &Config, rpc: &Rpc) -> Result<Started, String> {
    match config.role {
        Role::Controller => {
            let linode = config.linode.as_ref().ok_or("LINODE_TOKEN: missing")?;
            let kube =
                KubeClient::new(config.kubeconfig.as_deref(), config.kube_service.as_deref())
                    .map_err(|e| format!("Kubernetes client: {}", e.message()))?;
            Ok(Started {
                services: controller_service(config, linode, kube, rpc)?,
                resources: Box::new(()),
                banner: None,
            })
        }
        Role::Node => {
            let node_name = config.node_name.clone().ok_or("NODE_NAME: missing")?;
            // Only the identity fallback needs Kubernetes; a node that can
            // reach the metadata service works without it. A KUBECONFIG the
            // admin set but that does not work is a startup error, though.
            let kube =
                match KubeClient::new(config.kubeconfig.as_deref(), config.kube_service.as_deref())
                {
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
