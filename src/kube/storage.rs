//! The storage objects the controller reads to tell whether a node still
//! has a volume of a shared filesystem attached (node-mode unpublish): the
//! VolumeAttachments of the cluster, a PersistentVolume's CSI source and a
//! CSINode's node ids per driver. Read-only, each request through
//! `KubeClient::get`; only the fields the driver reads are parsed.

use super::client::{percent_encode, KubeClient};
use serde::Deserialize;
use std::collections::BTreeMap;

/// The part of a VolumeAttachment the driver reads.
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct VolumeAttachment {
    pub name: String,
    /// `spec.attacher`: the CSI driver that attaches it.
    pub attacher: String,
    pub node_name: String,
    /// `spec.source.persistentVolumeName`.
    pub persistent_volume: Option<String>,
    /// `spec.source.inlineVolumeSpec.csi.volumeHandle` (a migrated inline
    /// volume has no PersistentVolume).
    pub inline_handle: Option<String>,
    /// `metadata.deletionTimestamp` is set: a detach is under way.
    pub deleting: bool,
}

/// The CSI source of a PersistentVolume, when it has one.
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct CsiSource {
    pub driver: String,
    pub volume_handle: String,
}

#[derive(Deserialize)]
struct Meta {
    name: String,
    #[serde(rename = "deletionTimestamp")]
    deletion_timestamp: Option<String>,
}

#[derive(Deserialize, Default)]
struct ListMeta {
    #[serde(rename = "continue")]
    next: Option<String>,
}

#[derive(Deserialize)]
struct List<T> {
    #[serde(default = "Vec::new")]
    items: Vec<T>,
    #[serde(default)]
    metadata: ListMeta,
}

#[derive(Deserialize)]
struct AttachmentObject {
    metadata: Meta,
    spec: AttachmentSpec,
}

#[derive(Deserialize)]
struct AttachmentSpec {
    attacher: String,
    #[serde(rename = "nodeName")]
    node_name: String,
    #[serde(default)]
    source: AttachmentSource,
}

#[derive(Deserialize, Default)]
struct AttachmentSource {
    #[serde(rename = "persistentVolumeName")]
    persistent_volume_name: Option<String>,
    #[serde(rename = "inlineVolumeSpec")]
    inline_volume_spec: Option<PvSpec>,
}

#[derive(Deserialize)]
struct PvObject {
    #[serde(default)]
    spec: PvSpec,
}

#[derive(Deserialize, Default)]
struct PvSpec {
    csi: Option<CsiObject>,
}

#[derive(Deserialize)]
struct CsiObject {
    driver: String,
    #[serde(rename = "volumeHandle")]
    volume_handle: String,
}

#[derive(Deserialize)]
struct CsiNodeObject {
    metadata: Meta,
    #[serde(default)]
    spec: CsiNodeSpec,
}

#[derive(Deserialize, Default)]
struct CsiNodeSpec {
    #[serde(default)]
    drivers: Vec<CsiNodeDriver>,
}

#[derive(Deserialize)]
struct CsiNodeDriver {
    name: String,
    #[serde(rename = "nodeID")]
    node_id: String,
}

/// Objects per page of a list; the API server may return fewer.
const PAGE: u32 = 500;
/// Pages followed at most (a million attachments): a bound, not a limit
/// any cluster reaches.
const MAX_PAGES: usize = 2000;

fn bad_object(kind: &str, e: serde_json::Error) -> crate::Error {
    crate::Error::Internal(format!("Kubernetes: bad {kind}: {e}"))
}

impl KubeClient {
    /// Every VolumeAttachment of the cluster, whichever driver attaches it,
    /// read from the API server itself (not a cache), so an attachment
    /// created before the call is in the answer.
    pub fn list_volume_attachments(&self) -> crate::Result<Vec<VolumeAttachment>> {
        let items: Vec<AttachmentObject> = self.list_all(
            "list_volume_attachments",
            "/apis/storage.k8s.io/v1/volumeattachments",
            "VolumeAttachmentList",
        )?;
        Ok(items
            .into_iter()
            .map(|a| VolumeAttachment {
                name: a.metadata.name,
                attacher: a.spec.attacher,
                node_name: a.spec.node_name,
                persistent_volume: a.spec.source.persistent_volume_name,
                inline_handle: a
                    .spec
                    .source
                    .inline_volume_spec
                    .and_then(|s| s.csi)
                    .map(|c| c.volume_handle),
                deleting: a.metadata.deletion_timestamp.is_some(),
            })
            .collect())
    }

    /// For every CSINode (named after its node), the node id each CSI
    /// driver registered there reported (`spec.drivers[].nodeID`).
    pub fn list_csi_node_ids(&self) -> crate::Result<BTreeMap<String, BTreeMap<String, String>>> {
        let items: Vec<CsiNodeObject> = self.list_all(
            "list_csi_nodes",
            "/apis/storage.k8s.io/v1/csinodes",
            "CSINodeList",
        )?;
        Ok(items
            .into_iter()
            .map(|n| {
                let drivers = n
                    .spec
                    .drivers
                    .into_iter()
                    .map(|d| (d.name, d.node_id))
                    .collect();
                (n.metadata.name, drivers)
            })
            .collect())
    }

    /// Every item of the list at `path`, page by page.
    pub(super) fn list_all<T: serde::de::DeserializeOwned>(
        &self,
        request: &'static str,
        path: &str,
        kind: &str,
    ) -> crate::Result<Vec<T>> {
        let mut out = Vec::new();
        let mut next: Option<String> = None;
        for _ in 0..MAX_PAGES {
            let mut page = format!("{path}?limit={PAGE}");
            if let Some(token) = &next {
                page.push_str(&format!("&continue={}", percent_encode(token)));
            }
            let body = self.get(request, &page, &format!("list {path}"))?;
            let list: List<T> = serde_json::from_str(&body).map_err(|e| bad_object(kind, e))?;
            out.extend(list.items);
            next = list.metadata.next.filter(|t| !t.is_empty());
            if next.is_none() {
                return Ok(out);
            }
        }
        Err(crate::Error::Internal(format!(
            "Kubernetes: list {path}: more than {MAX_PAGES} pages"
        )))
    }

    /// The CSI source of PersistentVolume `name`; `None` when it has none.
    /// NotFound when there is no such PV.
    pub fn persistent_volume_csi(&self, name: &str) -> crate::Result<Option<CsiSource>> {
        let body = self.get(
            "get_persistent_volume",
            &format!("/api/v1/persistentvolumes/{}", percent_encode(name)),
            &format!("get persistentvolume {name:?}"),
        )?;
        let pv: PvObject =
            serde_json::from_str(&body).map_err(|e| bad_object("PersistentVolume", e))?;
        Ok(pv.spec.csi.map(|c| CsiSource {
            driver: c.driver,
            volume_handle: c.volume_handle,
        }))
    }
}

#[cfg(test)]
mod tests {
    use super::*;
    use crate::fake::{FakeKube, FakeVolumeAttachment};

    /// A client of `kube` through a kubeconfig written to a fresh directory.
    fn client_of(kube: &FakeKube, tag: &str) -> KubeClient {
        let dir =
            std::env::temp_dir().join(format!("lnc-kube-storage-{}-{tag}", std::process::id()));
        std::fs::create_dir_all(&dir).unwrap();
        let path = dir.join("kubeconfig");
        std::fs::write(
            &path,
            format!("apiVersion: v1\nkind: Config\ncurrent-context: t\nclusters:\n- name: t\n  cluster:\n    server: {}\ncontexts:\n- name: t\n  context:\n    cluster: t\n    user: t\nusers:\n- name: t\n  user:\n    token: {}\n", kube.url(), kube.token()),
        )
        .unwrap();
        let client = KubeClient::from_kubeconfig(&path).unwrap();
        std::fs::remove_dir_all(dir).unwrap();
        client
    }

    #[test]
    fn lists_follow_every_page_and_reads_say_not_found() {
        let kube = FakeKube::start("t").unwrap();
        for i in 0..1201 {
            let a = FakeVolumeAttachment::new(&format!("va-{i:04}"), "d", "n", &format!("pv-{i}"));
            kube.add_volume_attachment(if i % 2 == 0 { a } else { a.deleting() });
        }
        kube.set_csi_node("n1", "d", Some("42"));
        kube.set_csi_node("n1", "other", Some("x"));
        kube.add_persistent_volume("pv-1", "d", "1/2/a");
        let client = client_of(&kube, "pages");
        let before = kube.requests();
        let all = client.list_volume_attachments().unwrap();
        assert_eq!(kube.requests() - before, 3, "500 a page");
        assert_eq!(all.len(), 1201);
        assert_eq!(all.iter().filter(|a| a.deleting).count(), 600);
        assert_eq!(all[1].persistent_volume.as_deref(), Some("pv-1"));
        let nodes = client.list_csi_node_ids().unwrap();
        assert_eq!(nodes["n1"]["d"], "42");
        assert_eq!(nodes["n1"].len(), 2);
        assert_eq!(
            client.persistent_volume_csi("pv-1").unwrap(),
            Some(CsiSource {
                driver: "d".into(),
                volume_handle: "1/2/a".into()
            })
        );
        assert!(matches!(
            client.persistent_volume_csi("pv-gone"),
            Err(crate::Error::NotFound(_))
        ));
        kube.fail_next(503, 1);
        assert!(matches!(
            client.list_volume_attachments(),
            Err(crate::Error::Unavailable(_))
        ));
    }

    #[test]
    fn attachments_parse_with_and_without_optional_fields() {
        let list: List<AttachmentObject> = serde_json::from_str(
            r#"{"items": [
                {"metadata": {"name": "a", "deletionTimestamp": "2026-01-01T00:00:00Z"},
                 "spec": {"attacher": "d", "nodeName": "n", "source": {"persistentVolumeName": "pv"}},
                 "status": {"attached": true}},
                {"metadata": {"name": "b"},
                 "spec": {"attacher": "d", "nodeName": "n",
                          "source": {"inlineVolumeSpec": {"csi": {"driver": "d", "volumeHandle": "1/2/x"}}}}}
            ], "metadata": {"continue": ""}}"#,
        )
        .unwrap();
        assert_eq!(list.items.len(), 2);
        assert!(list.items[0].metadata.deletion_timestamp.is_some());
        assert_eq!(
            list.items[1]
                .spec
                .source
                .inline_volume_spec
                .as_ref()
                .and_then(|s| s.csi.as_ref())
                .map(|c| c.volume_handle.as_str()),
            Some("1/2/x")
        );
    }
}
