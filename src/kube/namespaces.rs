//! The one Namespace read the controller makes: a Namespace's UID, from
//! which the cluster identity is derived when `CLUSTER_ID` is unset.

use super::client::{percent_encode, KubeClient, Sent};
use serde::Deserialize;
use std::time::Duration;

#[derive(Deserialize)]
struct NamespaceObject {
    metadata: Metadata,
}

#[derive(Deserialize)]
struct Metadata {
    #[serde(default)]
    uid: String,
}

impl KubeClient {
    /// The UID of Namespace `name`.
    pub fn namespace_uid(&self, name: &str, timeout: Duration) -> crate::Result<String> {
        let what = format!("get namespace {name}");
        let text = self.send(
            Sent {
                request: "get_namespace",
                method: "GET",
                path: &format!("/api/v1/namespaces/{}", percent_encode(name)),
                body: None,
                content_type: None,
                timeout: Some(timeout),
            },
            &what,
        )?;
        let object: NamespaceObject = serde_json::from_str(&text)
            .map_err(|e| crate::Error::Internal(format!("Kubernetes: {what}: {e}")))?;
        Ok(object.metadata.uid)
    }
}
