//! The StorageClasses of the cluster, read so the controller knows every
//! shared filesystem a class of this driver names (ListVolumes after a
//! restart) and whether a claim of autogrow may grow. Read-only, through
//! `KubeClient::list_all`; only the name, the provisioner, the parameters
//! and `allowVolumeExpansion` are parsed.

use super::client::KubeClient;
use serde::Deserialize;
use std::collections::HashMap;

/// The part of a StorageClass the driver reads.
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct StorageClass {
    pub name: String,
    pub provisioner: String,
    pub parameters: HashMap<String, String>,
    /// `allowVolumeExpansion`: whether its claims may ask for more.
    pub allow_volume_expansion: bool,
}

#[derive(Deserialize)]
struct ClassObject {
    metadata: ClassMeta,
    provisioner: String,
    #[serde(default)]
    parameters: HashMap<String, String>,
    #[serde(rename = "allowVolumeExpansion", default)]
    allow_volume_expansion: Option<bool>,
}

#[derive(Deserialize)]
struct ClassMeta {
    name: String,
}

impl KubeClient {
    /// Every StorageClass of the cluster, whichever its provisioner.
    pub fn list_storage_classes(&self) -> crate::Result<Vec<StorageClass>> {
        let items: Vec<ClassObject> = self.list_all(
            "list_storage_classes",
            "/apis/storage.k8s.io/v1/storageclasses",
            "StorageClassList",
        )?;
        Ok(items
            .into_iter()
            .map(|c| StorageClass {
                name: c.metadata.name,
                provisioner: c.provisioner,
                parameters: c.parameters,
                allow_volume_expansion: c.allow_volume_expansion.unwrap_or(false),
            })
            .collect())
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn classes_parse_with_and_without_parameters() {
        let list: Vec<ClassObject> = serde_json::from_str(
            r#"[
                {"metadata": {"name": "a", "resourceVersion": "1"}, "provisioner": "d",
                 "parameters": {"k": "v"}, "reclaimPolicy": "Delete"},
                {"metadata": {"name": "b"}, "provisioner": "other"}
            ]"#,
        )
        .unwrap();
        assert_eq!(list[0].metadata.name, "a");
        assert_eq!(list[0].parameters["k"], "v");
        assert_eq!(list[1].provisioner, "other");
        assert!(list[1].parameters.is_empty());
    }
}
