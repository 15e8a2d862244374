//! NodeGetInfo's answer: this node's Linode id. The metadata service is
//! asked first; when it cannot answer, the Kubernetes node's
//! `spec.providerID` (`linode://<id>`, nothing else) is. The first success is
//! cached for the process lifetime: a node never changes its Linode. It must
//! not guess an id from anything else.

use crate::kube::KubeClient;
use crate::metadata::MetadataClient;
use crate::mutex::lock;
use crate::{Error, Result};
use std::sync::Mutex;

pub struct NodeIdentity {
    node_name: String,
    metadata: MetadataClient,
    kube: Option<KubeClient>,
    cached: Mutex<Option<u64>>,
}

impl NodeIdentity {
    pub fn new(
        node_name: String,
        metadata: MetadataClient,
        kube: Option<KubeClient>,
    ) -> NodeIdentity {
        NodeIdentity {
            node_name,
            metadata,
            kube,
            cached: Mutex::new(None),
        }
    }

    /// The Linode id, from the cache or resolved now. Failure is logged at
    /// error: kubelet unregisters a driver whose NodeGetInfo fails, and the
    /// only trace the operator gets is this log.
    pub fn linode_id(&self) -> Result<u64> {
        if let Some(id) = *lock(&self.cached) {
            return Ok(id);
        }
        let id = self.resolve().map_err(|e| {
            log::error!("NodeGetInfo cannot determine this node's Linode id; kubelet will not register the driver: {e}");
            e
        })?;
        *lock(&self.cached) = Some(id);
        Ok(id)
    }

    fn resolve(&self) -> Result<u64> {
        let from_metadata = self.metadata.instance().and_then(|instance| {
            if instance.id == 0 {
                Err(Error::Internal(
                    "instance metadata did not include a Linode ID".into(),
                ))
            } else {
                Ok(instance.id)
            }
        });
        let metadata_error = match from_metadata {
            Ok(id) => return Ok(id),
            Err(e) => e,
        };
        log::warn!("metadata service did not give the Linode id ({metadata_error}); falling back to the Kubernetes node");
        let kube_result = match &self.kube {
            None => Err("no Kubernetes client is configured".to_string()),
            Some(_) if self.node_name.is_empty() => Err("node name is not set".to_string()),
            Some(kube) => kube
                .get_node(&self.node_name)
                .map_err(|e| e.message().to_string())
                .and_then(|node| parse_provider_id(node.provider_id.as_deref()))
                .map_err(|e| format!("node {:?}: {e}", self.node_name)),
        };
        kube_result.map_err(|kube_error| {
            Error::Internal(format!(
                "resolve node metadata: metadata service: {}; kubernetes: {kube_error}",
                metadata_error.message()
            ))
        })
    }
}

/// The Linode id in a `linode://<id>` provider ID, as the Linode CCM sets it.
fn parse_provider_id(provider_id: Option<&str>) -> Result<u64, String> {
    let value = provider_id
        .filter(|v| !v.is_empty())
        .ok_or_else(|| "provider ID is not set".to_string())?;
    let digits = value
        .strip_prefix("linode://")
        .ok_or_else(|| format!("invalid provider ID format {value:?}"))?;
    match digits.parse::<u64>() {
        Ok(0) => Err(format!(
            "parse Linode ID from provider ID: {value:?} has id 0"
        )),
        Ok(id) => Ok(id),
        Err(e) => Err(format!("parse Linode ID from provider ID: {value:?}: {e}")),
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn only_linode_provider_ids_with_a_positive_id_are_accepted() {
        assert_eq!(parse_provider_id(Some("linode://12345")), Ok(12345));
        assert_eq!(
            parse_provider_id(None),
            Err("provider ID is not set".to_string())
        );
        assert_eq!(
            parse_provider_id(Some("")),
            Err("provider ID is not set".to_string())
        );
        for bad in [
            "aws:///us-east-1a/i-0abc",
            "12345",
            "linode://",
            "linode://12a",
            "linode://-1",
            "linode://0",
            "linode:/12",
        ] {
            assert!(parse_provider_id(Some(bad)).is_err(), "{bad}");
        }
        assert!(parse_provider_id(Some("gce://p/z/n"))
            .unwrap_err()
            .starts_with("invalid provider ID format"));
    }
}
