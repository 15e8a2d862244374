//! The startup check that this cluster's identity never changes between
//! runs: the Lease records it, and a process whose identity differs from
//! the recorded one refuses to start rather than silently orphan every
//! volume, pool, temporary and record the driver made.

use crate::cluster_id::{ClusterId, NAMESPACE};
use crate::kube::KubeClient;
use std::time::Duration;

/// This process's identity: `configured`, else derived from the cluster;
/// refused when the Lease `namespace/name` records another one. A Lease
/// that cannot be read now is no refusal (the API server may be starting
/// too): the election never takes one that records another identity.
pub fn settle(
    kube: &KubeClient,
    configured: Option<&ClusterId>,
    namespace: &str,
    name: &str,
    timeout: Duration,
) -> Result<ClusterId, String> {
    let id = match configured {
        Some(id) => id.clone(),
        None => {
            let uid = kube.namespace_uid(NAMESPACE, timeout).map_err(|e| {
                format!(
                    "CLUSTER_ID is unset and cannot be derived from the {NAMESPACE} Namespace's UID ({}): set CLUSTER_ID, or grant get on namespaces/{NAMESPACE}",
                    e.message()
                )
            })?;
            ClusterId::from_uid(&uid).ok_or_else(|| {
                format!("CLUSTER_ID is unset and the {NAMESPACE} Namespace's UID {uid:?} is no UID to derive it from: set CLUSTER_ID")
            })?
        }
    };
    let lease = match kube.get_lease(namespace, name, timeout) {
        Ok(lease) => lease,
        Err(e) => {
            log::warn!(
                "lease {namespace}/{name} cannot be read to check the cluster identity {id} against it ({}); the election checks it when it reads the lease",
                e.message()
            );
            None
        }
    };
    match lease.and_then(|l| l.cluster) {
        Some(recorded) if recorded != id.as_str() => Err(format!(
            "this controller's CLUSTER_ID is {id:?}, but lease {namespace}/{name} records {recorded:?}, the identity this cluster's volumes and snapshots carry: a changed identity would orphan every one of them. Set CLUSTER_ID={recorded}; to change it on purpose, follow docs/upgrade-uninstall.md"
        )),
        _ => Ok(id),
    }
}
