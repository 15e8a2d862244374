//! The cluster's region, discovered lazily from one workload node and cached
//! for the process lifetime. The controller may start before any worker
//! node exists, so nothing here runs at startup, and a failed discovery
//! leaves the cache empty for the next request to retry. No lock is held
//! across the Kubernetes request: one caller looks the region up while the
//! others are answered Unavailable at once rather than queue behind a
//! slow (or down) API server.

use crate::kube::KubeClient;
use crate::mutex::lock;
use crate::Error;
use std::sync::Mutex;

const REGION_LABEL: &str = "topology.kubernetes.io/region";
const BETA_REGION_LABEL: &str = "failure-domain.beta.kubernetes.io/region";
/// Control-plane nodes may sit outside the workload VPC/region.
const WORKLOAD_NODES: &str =
    "!node-role.kubernetes.io/control-plane,!node-role.kubernetes.io/master";

pub struct Cluster {
    kube: KubeClient,
    region: Mutex<Region>,
}

enum Region {
    Unknown,
    /// One caller is listing nodes.
    Resolving,
    Known(String),
}

/// Puts the region back to unknown unless the lookup stored one, however
/// the lookup ended (an error or a panic).
struct Resolving<'a>(&'a Mutex<Region>);

impl Drop for Resolving<'_> {
    fn drop(&mut self) {
        let mut region = lock(self.0);
        if matches!(*region, Region::Resolving) {
            *region = Region::Unknown;
        }
    }
}

impl Cluster {
    pub fn new(kube: KubeClient) -> Cluster {
        Cluster {
            kube,
            region: Mutex::new(Region::Unknown),
        }
    }

    /// The region new filesystems go to. Concurrent first requests make one
    /// Kubernetes call: while it runs, the others are Unavailable.
    pub fn region(&self) -> Result<String, Error> {
        {
            let mut region = lock(&self.region);
            match &*region {
                Region::Known(known) => return Ok(known.clone()),
                Region::Resolving => return Err(Error::Unavailable(
                    "resolve cluster region: another request is listing the nodes; retry shortly"
                        .into(),
                )),
                Region::Unknown => *region = Region::Resolving,
            }
        }
        let _resolving = Resolving(&self.region);
        let region = self.discover()?;
        *lock(&self.region) = Region::Known(region.clone());
        Ok(region)
    }

    fn discover(&self) -> Result<String, Error> {
        // A Kubernetes API that is down or overloaded is worth retrying; a
        // refusal (RBAC, a bad kubeconfig) needs the admin.
        let nodes = self
            .kube
            .list_nodes(WORKLOAD_NODES, 1)
            .map_err(|e| match e {
                Error::Unavailable(_) | Error::DeadlineExceeded(_) => {
                    e.context("resolve cluster region: list nodes")
                }
                other => Error::FailedPrecondition(format!(
                    "resolve cluster region: list nodes: {}",
                    other.message()
                )),
            })?;
        let node = nodes.first().ok_or_else(|| {
            Error::FailedPrecondition(
                "resolve cluster region: cluster has no workload nodes".into(),
            )
        })?;
        let region = [REGION_LABEL, BETA_REGION_LABEL]
            .iter()
            .find_map(|l| node.labels.get(*l).filter(|v| !v.is_empty()))
            .ok_or_else(|| {
                Error::FailedPrecondition(format!(
                    "resolve cluster region: node {:?} has no {REGION_LABEL} label",
                    node.name
                ))
            })?;
        log::info!("cluster region {region:?} (from node {:?})", node.name);
        Ok(region.clone())
    }
}
