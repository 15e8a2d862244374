//! What the controller asks the Kubernetes API: the cluster's region,
//! discovered lazily from one workload node and cached for the process
//! lifetime, and which volumes of a shared filesystem the cluster still
//! attaches to a node (from its VolumeAttachments, read fresh every time:
//! they are the record that survives our restarts). The controller may
//! start before any worker node exists, so nothing here runs at startup,
//! and a failed discovery leaves the cache empty for the next request to
//! retry. No lock is held across a Kubernetes request, so no caller queues
//! behind another's slow (or down) API server. The only writes are
//! autogrow's: a claim's requested storage, and events on claims.

use crate::build_info::DRIVER_NAME;
use crate::handles::{SubdirId, VolumeHandle};
use crate::kube::{EventType, KubeClient, PersistentVolumeClaim, VolumeAttachment};
use crate::mutex::lock;
use crate::Error;
use std::collections::{BTreeMap, HashMap};
use std::sync::Mutex;

const REGION_LABEL: &str = "topology.kubernetes.io/region";
const BETA_REGION_LABEL: &str = "failure-domain.beta.kubernetes.io/region";
/// Control-plane nodes may sit outside the workload VPC/region.
const WORKLOAD_NODES: &str =
    "!node-role.kubernetes.io/control-plane,!node-role.kubernetes.io/master";

pub struct Cluster {
    kube: KubeClient,
    region: Mutex<Option<String>>,
}

impl Cluster {
    pub fn new(kube: KubeClient) -> Cluster {
        Cluster {
            kube,
            region: Mutex::new(None),
        }
    }

    /// Every claim of the cluster, in one list.
    pub fn claims(&self) -> Result<Vec<PersistentVolumeClaim>, Error> {
        self.kube.list_claims()
    }

    /// The names of the StorageClasses whose claims may ask for more.
    pub fn expandable_classes(&self) -> Result<std::collections::BTreeSet<String>, Error> {
        Ok(self
            .kube
            .list_storage_classes()?
            .into_iter()
            .filter(|c| c.allow_volume_expansion)
            .map(|c| c.name)
            .collect())
    }

    /// Asks for `bytes` for `claim`, as read (FailedPrecondition when it
    /// changed since).
    pub fn request_storage(&self, claim: &PersistentVolumeClaim, bytes: i64) -> Result<(), Error> {
        self.kube.request_claim_storage(claim, bytes).map(|_| ())
    }

    pub fn claim_event(
        &self,
        claim: &PersistentVolumeClaim,
        kind: EventType,
        reason: &str,
        message: &str,
    ) -> Result<(), Error> {
        self.kube.claim_event(claim, kind, reason, message)
    }

    /// The region new filesystems go to. The cache is never locked across
    /// the lookup: concurrent first requests each list nodes (with their
    /// own timeout) rather than queue behind one slow list.
    pub fn region(&self) -> Result<String, Error> {
        if let Some(region) = lock(&self.region).clone() {
            return Ok(region);
        }
        let region = self.discover()?;
        *lock(&self.region) = Some(region.clone());
        Ok(region)
    }

    /// The volumes other than `volume` of its shared filesystem (its other
    /// directories, or the filesystem itself) that a VolumeAttachment of
    /// this driver still attaches to the node whose CSI node id is `node`,
    /// each named with its attachment. An attachment being deleted does not
    /// count: the CO is detaching it, and two volumes detached at once must
    /// not each keep the node for the other. Every read goes to the API
    /// server; one that fails fails the call, never reads as "none".
    pub fn attached_siblings(&self, volume: &SubdirId, node: u64) -> Result<Vec<String>, Error> {
        let what = "find the other volumes of the shared filesystem attached to the node";
        let attachments = self
            .kube
            .list_volume_attachments()
            .map_err(|e| unreadable(what, e))?;
        let ours: Vec<&VolumeAttachment> = attachments
            .iter()
            .filter(|a| a.attacher == DRIVER_NAME && !a.deleting)
            .collect();
        if ours.is_empty() {
            return Ok(Vec::new());
        }
        let csi_nodes = self
            .kube
            .list_csi_node_ids()
            .map_err(|e| unreadable(what, e))?;
        let mut node_ids: HashMap<&str, NodeId> = HashMap::new();
        let mut siblings = Vec::new();
        let this = VolumeHandle::from(volume.clone());
        for a in ours {
            let id = match node_ids.get(a.node_name.as_str()) {
                Some(id) => *id,
                None => {
                    let id = self
                        .node_id(&a.node_name, &csi_nodes)
                        .map_err(|e| unreadable(what, e))?;
                    node_ids.insert(&a.node_name, id);
                    id
                }
            };
            match id {
                NodeId::Linode(id) if id != node => continue,
                NodeId::Gone => continue,
                NodeId::Linode(_) | NodeId::Unknown => {}
            }
            let Some(raw) = self.handle_of(a).map_err(|e| unreadable(what, e))? else {
                continue;
            };
            let Ok(handle) = VolumeHandle::parse(&raw) else {
                continue;
            };
            if handle.filesystem() != volume.parent() || handle == this {
                continue;
            }
            if matches!(id, NodeId::Unknown) {
                log::warn!(
                    "node {:?} of VolumeAttachment {} maps to no Linode (no CSINode entry for {DRIVER_NAME}, no linode:// providerID); counting it as node {node}",
                    a.node_name,
                    a.name
                );
            }
            siblings.push(format!("{handle} (VolumeAttachment {})", a.name));
        }
        Ok(siblings)
    }

    /// The Linode of node `name`: the node id our node plugin registered in
    /// its CSINode (what ControllerPublishVolume was given), else the Node's
    /// `linode://` providerID (a plugin restarting is briefly absent from
    /// the CSINode; both name the same Linode).
    fn node_id(
        &self,
        name: &str,
        csi_nodes: &BTreeMap<String, BTreeMap<String, String>>,
    ) -> Result<NodeId, Error> {
        let registered = csi_nodes.get(name).and_then(|d| d.get(DRIVER_NAME));
        if let Some(id) = registered {
            return Ok(id.parse().map_or(NodeId::Unknown, NodeId::Linode));
        }
        match self.kube.get_node(name) {
            Ok(n) => {
                Ok(linode_in(n.provider_id.as_deref()).map_or(NodeId::Unknown, NodeId::Linode))
            }
            // No such node: nothing can be using a volume there.
            Err(Error::NotFound(_)) => Ok(NodeId::Gone),
            Err(e) => Err(e),
        }
    }

    /// The Linode Kubernetes node `name` runs on, from its `linode://`
    /// providerID.
    pub fn linode_of(&self, name: &str) -> Result<u64, Error> {
        let node = self.kube.get_node(name)?;
        linode_in(node.provider_id.as_deref()).ok_or_else(|| {
            Error::FailedPrecondition(format!(
                "node {name} names no Linode (spec.providerID {:?})",
                node.provider_id
            ))
        })
    }

    /// The volume handle an attachment of this driver is for; `None` when
    /// its PersistentVolume is gone or not one of ours.
    fn handle_of(&self, a: &VolumeAttachment) -> Result<Option<String>, Error> {
        if let Some(handle) = &a.inline_handle {
            return Ok(Some(handle.clone()));
        }
        let Some(pv) = &a.persistent_volume else {
            return Ok(None);
        };
        match self.kube.persistent_volume_csi(pv) {
            Ok(source) => Ok(source
                .filter(|s| s.driver == DRIVER_NAME)
                .map(|s| s.volume_handle)),
            Err(Error::NotFound(_)) => Ok(None),
            Err(e) => Err(e),
        }
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

/// The Linode a Kubernetes node runs on, as far as the cluster says.
#[derive(Debug, Clone, Copy)]
enum NodeId {
    Linode(u64),
    /// The Node object is gone.
    Gone,
    /// The node exists but names no Linode.
    Unknown,
}

/// A Kubernetes read that failed: an API server that is down or overloaded
/// is worth retrying as it is; a refusal (RBAC, a bad kubeconfig) needs the
/// admin, and says what the role must allow.
fn unreadable(what: &str, e: Error) -> Error {
    match e {
        Error::Unavailable(_) | Error::DeadlineExceeded(_) => e.context(what.to_string()),
        other => Error::FailedPrecondition(format!(
            "{what}: {} (the controller's role needs get and list on volumeattachments, persistentvolumes, csinodes and nodes)",
            other.message()
        )),
    }
}

/// The Linode id in a `linode://<id>` providerID, as the Linode CCM sets it.
fn linode_in(provider_id: Option<&str>) -> Option<u64> {
    provider_id?
        .strip_prefix("linode://")?
        .parse()
        .ok()
        .filter(|id| *id > 0)
}

#[cfg(test)]
mod tests {
    use super::*;
    use crate::fake::{HttpRequest, HttpResponse};
    use std::sync::mpsc;
    use std::sync::Arc;
    use std::time::Duration;

    #[test]
    fn a_slow_node_list_does_not_hold_back_other_callers() {
        // The first list hangs until released; later ones answer at once.
        let (release, hold) = mpsc::channel::<()>();
        let (arrived_tx, arrived) = mpsc::channel::<()>();
        let hold = Mutex::new(Some((hold, arrived_tx)));
        let handler = move |_: HttpRequest| {
            let first = lock(&hold).take();
            if let Some((hold, arrived)) = first {
                let _ = arrived.send(());
                let _ = hold.recv_timeout(Duration::from_secs(30));
            }
            HttpResponse::json(
                200,
                &serde_json::json!({"items": [{"metadata": {"name": "w",
                    "labels": {"topology.kubernetes.io/region": "us-ord"}}}], "metadata": {}}),
            )
        };
        let server = crate::fake::serve("slow-kube", Arc::new(handler)).unwrap();
        let dir = std::env::temp_dir().join(format!("lnc-cluster-{}", std::process::id()));
        std::fs::create_dir_all(&dir).unwrap();
        let kubeconfig = dir.join("kubeconfig");
        std::fs::write(
            &kubeconfig,
            format!("apiVersion: v1\nkind: Config\ncurrent-context: t\nclusters:\n- name: t\n  cluster:\n    server: {}\ncontexts:\n- name: t\n  context:\n    cluster: t\n    user: t\nusers:\n- name: t\n  user:\n    token: x\n", server.url()),
        )
        .unwrap();
        let cluster = Arc::new(Cluster::new(
            KubeClient::from_kubeconfig(&kubeconfig).unwrap(),
        ));
        let slow = {
            let cluster = cluster.clone();
            std::thread::spawn(move || cluster.region())
        };
        arrived
            .recv_timeout(Duration::from_secs(10))
            .expect("the first caller is inside its list");
        let (done_tx, done_rx) = mpsc::channel();
        let quick = cluster.clone();
        std::thread::spawn(move || done_tx.send(quick.region()).unwrap());
        let answer = done_rx
            .recv_timeout(Duration::from_secs(10))
            .expect("a second caller does not wait for the first one's list");
        assert_eq!(answer.unwrap(), "us-ord");
        release.send(()).unwrap();
        assert_eq!(slow.join().unwrap().unwrap(), "us-ord");
        std::fs::remove_dir_all(dir).unwrap();
    }
}
