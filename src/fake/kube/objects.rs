//! The objects the fake Kubernetes API stores besides claims and Leases:
//! Nodes, VolumeAttachments, PersistentVolumes and StorageClasses, as a
//! test or a scenario makes them, and how the API shows each.

use serde::{Deserialize, Serialize};
use serde_json::json;
use std::collections::BTreeMap;

/// A Node as the fake stores it; also readable from a scenario's JSON
/// (`{"name": "n1", "labels": {...}, "provider_id": "linode://1",
/// "addresses": [["InternalIP", "10.0.0.5"]]}`).
#[derive(Debug, Clone, PartialEq, Eq, Serialize, Deserialize)]
#[serde(deny_unknown_fields)]
pub struct FakeNode {
    pub name: String,
    #[serde(default)]
    pub labels: BTreeMap<String, String>,
    pub provider_id: Option<String>,
    /// `(type, address)`, e.g. `("InternalIP", "10.0.0.5")`.
    #[serde(default)]
    pub addresses: Vec<(String, String)>,
}

impl FakeNode {
    pub fn new(name: &str) -> FakeNode {
        FakeNode {
            name: name.to_string(),
            labels: BTreeMap::new(),
            provider_id: None,
            addresses: Vec::new(),
        }
    }

    pub fn label(mut self, key: &str, value: &str) -> FakeNode {
        self.labels.insert(key.to_string(), value.to_string());
        self
    }

    pub fn provider_id(mut self, id: &str) -> FakeNode {
        self.provider_id = Some(id.to_string());
        self
    }

    pub fn address(mut self, kind: &str, address: &str) -> FakeNode {
        self.addresses.push((kind.to_string(), address.to_string()));
        self
    }

    pub(super) fn to_json(&self) -> serde_json::Value {
        let mut spec = json!({});
        if let Some(p) = &self.provider_id {
            spec["providerID"] = json!(p);
        }
        let addresses: Vec<_> = self
            .addresses
            .iter()
            .map(|(t, a)| json!({"type": t, "address": a}))
            .collect();
        json!({
            "kind": "Node", "apiVersion": "v1",
            "metadata": {"name": self.name, "labels": self.labels, "resourceVersion": "1"},
            "spec": spec,
            "status": {"addresses": addresses}
        })
    }
}

/// A VolumeAttachment as the fake stores it: what the driver reads of
/// one, which is all the fake serves.
pub type FakeVolumeAttachment = crate::kube::VolumeAttachment;

impl FakeVolumeAttachment {
    /// An attached VolumeAttachment of PV `pv` to `node` by `attacher`.
    pub fn new(name: &str, attacher: &str, node: &str, pv: &str) -> FakeVolumeAttachment {
        FakeVolumeAttachment {
            name: name.to_string(),
            attacher: attacher.to_string(),
            node_name: node.to_string(),
            persistent_volume: Some(pv.to_string()),
            inline_handle: None,
            deleting: false,
        }
    }

    pub fn deleting(mut self) -> FakeVolumeAttachment {
        self.deleting = true;
        self
    }

    pub(super) fn to_json(&self) -> serde_json::Value {
        let mut metadata = json!({"name": self.name, "resourceVersion": "1"});
        if self.deleting {
            metadata["deletionTimestamp"] = json!("2026-01-01T00:00:00Z");
            metadata["finalizers"] = json!([format!("external-attacher/{}", self.attacher)]);
        }
        let mut source = json!({});
        if let Some(pv) = &self.persistent_volume {
            source["persistentVolumeName"] = json!(pv);
        }
        if let Some(handle) = &self.inline_handle {
            source["inlineVolumeSpec"] =
                json!({"csi": {"driver": self.attacher, "volumeHandle": handle}});
        }
        json!({
            "kind": "VolumeAttachment", "apiVersion": "storage.k8s.io/v1",
            "metadata": metadata,
            "spec": {"attacher": self.attacher, "nodeName": self.node_name, "source": source},
            "status": {"attached": !self.deleting}
        })
    }
}

/// A PersistentVolume with a CSI source, as the fake stores it.
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct FakePersistentVolume {
    pub name: String,
    pub driver: String,
    pub volume_handle: String,
}

impl FakePersistentVolume {
    pub(super) fn to_json(&self) -> serde_json::Value {
        json!({
            "kind": "PersistentVolume", "apiVersion": "v1",
            "metadata": {"name": self.name, "resourceVersion": "1"},
            "spec": {
                "capacity": {"storage": "1Gi"},
                "accessModes": ["ReadWriteMany"],
                "csi": {"driver": self.driver, "volumeHandle": self.volume_handle}
            },
            "status": {"phase": "Bound"}
        })
    }
}

/// A StorageClass as the fake stores it.
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct FakeStorageClass {
    pub name: String,
    pub provisioner: String,
    pub parameters: BTreeMap<String, String>,
    pub allow_volume_expansion: bool,
}

impl FakeStorageClass {
    /// A class of `provisioner` with `parameters`.
    pub fn new(name: &str, provisioner: &str, parameters: &[(&str, &str)]) -> FakeStorageClass {
        FakeStorageClass {
            name: name.to_string(),
            provisioner: provisioner.to_string(),
            parameters: parameters
                .iter()
                .map(|(k, v)| (k.to_string(), v.to_string()))
                .collect(),
            allow_volume_expansion: false,
        }
    }

    /// With `allowVolumeExpansion: true`.
    pub fn expandable(mut self) -> FakeStorageClass {
        self.allow_volume_expansion = true;
        self
    }

    pub(super) fn to_json(&self) -> serde_json::Value {
        json!({
            "kind": "StorageClass", "apiVersion": "storage.k8s.io/v1",
            "metadata": {"name": self.name, "resourceVersion": "1"},
            "provisioner": self.provisioner,
            "parameters": self.parameters,
            "reclaimPolicy": "Delete",
            "volumeBindingMode": "Immediate",
            "allowVolumeExpansion": self.allow_volume_expansion
        })
    }
}
