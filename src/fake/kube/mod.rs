//! Fake Kubernetes API: Nodes and the storage objects node-mode unpublish
//! reads. `GET /api/v1/nodes/{name}` and
//! `GET /api/v1/nodes?limit=&continue=&labelSelector=` (equality `k=v`/`k==v`,
//! `k!=v`, existence `k`, `!k`, comma = AND; `limit` counts scanned nodes,
//! so a selective page can come back short);
//! `GET /apis/storage.k8s.io/v1/volumeattachments`,
//! `GET /apis/storage.k8s.io/v1/csinodes` (both `?limit=&continue=`, by
//! name), `GET /apis/storage.k8s.io/v1/csinodes/{name}`,
//! `GET /apis/storage.k8s.io/v1/storageclasses` (paged likewise) and
//! `GET /api/v1/persistentvolumes/{name}`, the claims autogrow reads and
//! patches and the events it creates (`claims`), the controller's Leases
//! (`leases`), and `GET /api/v1/namespaces/{name}` (the UID the cluster
//! identity is derived from). Requires the bearer token; errors are `Status` objects.
//! Everything can change at runtime.

mod answers;
pub(crate) mod claims;
mod leases;
mod objects;

pub use objects::{FakeNode, FakePersistentVolume, FakeStorageClass, FakeVolumeAttachment};

use super::{percent_decode, HttpRequest, HttpResponse, HttpServer};
use crate::mutex::lock;
use answers::{paged, parse_selector, status, window};
use claims::{Claims, FakeClaim, FakeClaimEvent};
use leases::Leases;

use serde_json::json;
use std::collections::BTreeMap;
use std::sync::atomic::{AtomicUsize, Ordering};
use std::sync::{Arc, Mutex};

/// Every object of a collection as the API shows it, in name order.
fn all<T>(
    stored: &Mutex<BTreeMap<String, T>>,
    json: impl Fn(&str, &T) -> serde_json::Value,
) -> Vec<serde_json::Value> {
    lock(stored).iter().map(|(name, o)| json(name, o)).collect()
}

fn csi_node_json(name: &str, drivers: &BTreeMap<String, String>) -> serde_json::Value {
    let drivers: Vec<_> = drivers
        .iter()
        .map(|(driver, id)| json!({"name": driver, "nodeID": id, "topologyKeys": null}))
        .collect();
    json!({
        "kind": "CSINode", "apiVersion": "storage.k8s.io/v1",
        "metadata": {"name": name, "resourceVersion": "1"},
        "spec": {"drivers": drivers}
    })
}

struct Shared {
    token: Mutex<String>,
    nodes: Mutex<BTreeMap<String, FakeNode>>,
    attachments: Mutex<BTreeMap<String, FakeVolumeAttachment>>,
    persistent_volumes: Mutex<BTreeMap<String, FakePersistentVolume>>,
    storage_classes: Mutex<BTreeMap<String, FakeStorageClass>>,
    /// Node name → driver name → node id.
    csi_nodes: Mutex<BTreeMap<String, BTreeMap<String, String>>>,
    failures: Mutex<Option<(u16, u32)>>,
    requests: AtomicUsize,
    leases: Leases,
    /// Namespace name → UID.
    namespaces: Mutex<BTreeMap<String, String>>,
    claims: Claims,
}

/// The `kube-system` UID every fake API server starts with, so dev mode
/// derives the same cluster identity (`f00dcafe0001`) on every run.
pub const DEV_CLUSTER_UID: &str = "f00dcafe-0001-4000-8000-000000000001";

/// The fake API server.
pub struct FakeKube {
    shared: Arc<Shared>,
    http: HttpServer,
}

impl Shared {
    fn handle(&self, req: HttpRequest) -> HttpResponse {
        let want = format!("Bearer {}", lock(&self.token));
        let authorised = req.header("Authorization") == Some(want.as_str());
        // Leases are counted and failed apart: the election's background
        // requests never change what a test counts or injects.
        if authorised {
            if let Some(answer) = self.leases.handle(&req) {
                return answer;
            }
            if let Some(answer) = self.namespace(&req) {
                return answer;
            }
        }
        self.requests.fetch_add(1, Ordering::SeqCst);
        if !authorised {
            return status(401, "Unauthorized", "Unauthorized");
        }
        {
            let mut failures = lock(&self.failures);
            if let Some((code, left)) = failures.as_mut() {
                let code = *code;
                *left -= 1;
                if *left == 0 {
                    *failures = None;
                }
                return status(code, "InternalError", "injected failure");
            }
        }
        let expandable = |class: &str| {
            lock(&self.storage_classes)
                .get(class)
                .is_some_and(|c| c.allow_volume_expansion)
        };
        if let Some(answer) = self.claims.handle(&req, expandable) {
            return answer;
        }
        if req.method == "POST" && req.path == "/apis/storage.k8s.io/v1/storageclasses" {
            return self.create_storage_class(&req.body);
        }
        if req.method != "GET" {
            return status(
                405,
                "MethodNotAllowed",
                "the server does not allow this method",
            );
        }
        if let Some(answer) = self.storage(&req) {
            return answer;
        }
        let nodes = lock(&self.nodes);
        if req.path == "/api/v1/nodes" {
            return self.list(&req, &nodes);
        }
        match req.path.strip_prefix("/api/v1/nodes/") {
            Some(name) => {
                let name = percent_decode(name);
                match nodes.get(&name) {
                    Some(n) => HttpResponse::json(200, &n.to_json()),
                    None => status(404, "NotFound", &format!("nodes \"{name}\" not found")),
                }
            }
            None => status(
                404,
                "NotFound",
                "the server could not find the requested resource",
            ),
        }
    }

    /// `GET /api/v1/namespaces/{name}`, what the cluster identity is
    /// derived from at start (counted apart, like the leases); `None` for
    /// any other path.
    fn namespace(&self, req: &HttpRequest) -> Option<HttpResponse> {
        let name = req.path.strip_prefix("/api/v1/namespaces/")?;
        if name.contains('/') || req.method != "GET" {
            return None;
        }
        let name = percent_decode(name);
        Some(match lock(&self.namespaces).get(&name) {
            Some(uid) => HttpResponse::json(
                200,
                &json!({"kind": "Namespace", "apiVersion": "v1", "metadata": {"name": name, "uid": uid}}),
            ),
            None => status(404, "NotFound", &format!("namespaces \"{name}\" not found")),
        })
    }

    /// A StorageClass as an admin makes it.
    fn create_storage_class(&self, body: &str) -> HttpResponse {
        let Ok(object) = serde_json::from_str::<serde_json::Value>(body) else {
            return status(400, "BadRequest", "the body is not a StorageClass");
        };
        let (Some(name), Some(provisioner)) = (
            object["metadata"]["name"].as_str(),
            object["provisioner"].as_str(),
        ) else {
            return status(422, "Invalid", "metadata.name, provisioner: Required value");
        };
        let parameters = object["parameters"]
            .as_object()
            .map(|p| {
                p.iter()
                    .filter_map(|(k, v)| Some((k.clone(), v.as_str()?.to_string())))
                    .collect()
            })
            .unwrap_or_default();
        let class = FakeStorageClass {
            name: name.to_string(),
            provisioner: provisioner.to_string(),
            parameters,
            allow_volume_expansion: object["allowVolumeExpansion"].as_bool() == Some(true),
        };
        let answer = class.to_json();
        lock(&self.storage_classes).insert(class.name.clone(), class);
        HttpResponse::json(201, &answer)
    }

    /// The storage endpoints; `None` for any other path.
    fn storage(&self, req: &HttpRequest) -> Option<HttpResponse> {
        const STORAGE: &str = "/apis/storage.k8s.io/v1/";
        let not_found = |kind: &str, name: &str| {
            status(404, "NotFound", &format!("{kind} \"{name}\" not found"))
        };
        let listed = match req.path.strip_prefix(STORAGE) {
            Some("volumeattachments") => Some((
                "VolumeAttachmentList",
                all(&self.attachments, |_, a| a.to_json()),
            )),
            Some("storageclasses") => Some((
                "StorageClassList",
                all(&self.storage_classes, |_, c| c.to_json()),
            )),
            Some("csinodes") => Some(("CSINodeList", all(&self.csi_nodes, csi_node_json))),
            _ => None,
        };
        if let Some((kind, items)) = listed {
            return Some(paged(req, kind, "storage.k8s.io/v1", items));
        }
        if let Some(name) = req.path.strip_prefix(&format!("{STORAGE}csinodes/")) {
            let name = percent_decode(name);
            return Some(match lock(&self.csi_nodes).get(&name) {
                Some(drivers) => HttpResponse::json(200, &csi_node_json(&name, drivers)),
                None => not_found("csinodes.storage.k8s.io", &name),
            });
        }
        if let Some(name) = req.path.strip_prefix("/api/v1/persistentvolumes/") {
            let name = percent_decode(name);
            return Some(match lock(&self.persistent_volumes).get(&name) {
                Some(pv) => HttpResponse::json(200, &pv.to_json()),
                None => not_found("persistentvolumes", &name),
            });
        }
        None
    }

    fn list(&self, req: &HttpRequest, nodes: &BTreeMap<String, FakeNode>) -> HttpResponse {
        let selector = match parse_selector(&req.query_param("labelSelector").unwrap_or_default()) {
            Ok(s) => s,
            Err(e) => return status(400, "BadRequest", &e),
        };
        // Like the real API server reading `limit` objects from storage and
        // then filtering them, a page holds the matches among `limit`
        // scanned nodes: with a selector it may be short, even empty, and
        // `continue` is what says more may follow.
        let all: Vec<&FakeNode> = nodes.values().collect();
        let (scanned, metadata) = match window(req, &all) {
            Ok(w) => w,
            Err(refused) => return refused,
        };
        let page: Vec<_> = scanned
            .iter()
            .filter(|n| selector.iter().all(|r| r.matches(&n.labels)))
            .map(|n| n.to_json())
            .collect();
        HttpResponse::json(
            200,
            &json!({"kind": "NodeList", "apiVersion": "v1", "metadata": metadata, "items": page}),
        )
    }
}

impl FakeKube {
    /// An API server that accepts `Authorization: Bearer <token>`.
    pub fn start(token: &str) -> crate::Result<FakeKube> {
        let shared = Arc::new(Shared {
            token: Mutex::new(token.to_string()),
            nodes: Mutex::new(BTreeMap::new()),
            attachments: Mutex::new(BTreeMap::new()),
            persistent_volumes: Mutex::new(BTreeMap::new()),
            storage_classes: Mutex::new(BTreeMap::new()),
            csi_nodes: Mutex::new(BTreeMap::new()),
            failures: Mutex::new(None),
            requests: AtomicUsize::new(0),
            leases: Leases::default(),
            namespaces: Mutex::new(BTreeMap::from([(
                crate::cluster_id::NAMESPACE.to_string(),
                DEV_CLUSTER_UID.to_string(),
            )])),
            claims: Claims::default(),
        });
        let handler = Arc::clone(&shared);
        let http = super::serve("fake-kube", Arc::new(move |r| handler.handle(r)))?;
        Ok(FakeKube { shared, http })
    }

    /// Gives Namespace `name` the UID `uid` (`None`: removes it).
    pub fn set_namespace_uid(&self, name: &str, uid: Option<&str>) {
        let mut namespaces = lock(&self.shared.namespaces);
        match uid {
            Some(uid) => namespaces.insert(name.to_string(), uid.to_string()),
            None => namespaces.remove(name),
        };
    }

    /// Base URL (the kubeconfig `server`), plain HTTP.
    pub fn url(&self) -> String {
        self.http.url()
    }

    pub fn token(&self) -> String {
        lock(&self.shared.token).clone()
    }

    /// Rotate the accepted token; the old one is rejected from now on.
    pub fn set_token(&self, token: &str) {
        *lock(&self.shared.token) = token.to_string();
    }

    /// Add or replace (by name) a node.
    pub fn add_node(&self, node: FakeNode) {
        lock(&self.shared.nodes).insert(node.name.clone(), node);
    }

    pub fn remove_node(&self, name: &str) {
        lock(&self.shared.nodes).remove(name);
    }

    /// Add or replace (by name) a VolumeAttachment.
    pub fn add_volume_attachment(&self, attachment: FakeVolumeAttachment) {
        lock(&self.shared.attachments).insert(attachment.name.clone(), attachment);
    }

    pub fn remove_volume_attachment(&self, name: &str) {
        lock(&self.shared.attachments).remove(name);
    }

    /// Add or replace (by name) a PersistentVolume with CSI source
    /// `driver`/`volume_handle`.
    pub fn add_persistent_volume(&self, name: &str, driver: &str, volume_handle: &str) {
        lock(&self.shared.persistent_volumes).insert(
            name.to_string(),
            FakePersistentVolume {
                name: name.to_string(),
                driver: driver.to_string(),
                volume_handle: volume_handle.to_string(),
            },
        );
    }

    /// Add or replace (by name) a StorageClass.
    pub fn add_storage_class(&self, class: FakeStorageClass) {
        lock(&self.shared.storage_classes).insert(class.name.clone(), class);
    }

    /// Records that `driver` registered on node `node` with node id `id`
    /// (creating the CSINode); `None` takes the driver off it again.
    pub fn set_csi_node(&self, node: &str, driver: &str, id: Option<&str>) {
        let mut nodes = lock(&self.shared.csi_nodes);
        let drivers = nodes.entry(node.to_string()).or_default();
        match id {
            Some(id) => drivers.insert(driver.to_string(), id.to_string()),
            None => drivers.remove(driver),
        };
    }

    /// Adds (or replaces) claim `namespace/name` of `class`, bound to PV
    /// `pv` (`None`: pending) with `bytes` requested and in force.
    pub fn add_claim(
        &self,
        namespace: &str,
        name: &str,
        class: &str,
        pv: Option<&str>,
        bytes: i64,
    ) {
        self.shared.claims.put(FakeClaim {
            namespace: namespace.to_string(),
            name: name.to_string(),
            uid: format!("uid-{namespace}-{name}"),
            resource_version: String::new(),
            annotations: BTreeMap::new(),
            volume_name: pv.map(str::to_string),
            storage_class: Some(class.to_string()),
            requested: Some(bytes),
            capacity: pv.map(|_| bytes),
            resize_status: None,
        });
    }

    /// Claim `namespace/name` as stored.
    pub fn claim(&self, namespace: &str, name: &str) -> Option<FakeClaim> {
        self.shared.claims.get(namespace, name)
    }

    /// Changes claim `namespace/name` as a user or a controller of the
    /// cluster would (an annotation, its status as the resizer writes it).
    pub fn change_claim(&self, namespace: &str, name: &str, f: impl FnOnce(&mut FakeClaim)) {
        self.shared.claims.change(namespace, name, f);
    }

    /// The events created so far, oldest first.
    pub fn claim_events(&self) -> Vec<FakeClaimEvent> {
        self.shared.claims.events()
    }

    /// Makes every list of claims answer `delay` late, as of when it was
    /// asked (a slow API server).
    pub fn set_claim_list_delay(&self, delay: std::time::Duration) {
        self.shared.claims.set_list_delay(delay);
    }

    /// Lists of every claim answered so far.
    pub fn claim_lists(&self) -> usize {
        self.shared.claims.lists.load(Ordering::SeqCst)
    }

    /// Reads of one claim (GET) answered so far.
    pub fn claim_reads(&self) -> usize {
        self.shared.claims.reads.load(Ordering::SeqCst)
    }

    /// Patches of a claim received so far, refused or not.
    pub fn claim_patches(&self) -> usize {
        self.shared.claims.patches.load(Ordering::SeqCst)
    }

    /// The next `times` authorised requests answer `status` (a Status body).
    pub fn fail_next(&self, status: u16, times: u32) {
        *lock(&self.shared.failures) = (times > 0).then_some((status, times));
    }

    /// Requests received so far, authorised or not, Leases' aside.
    pub fn requests(&self) -> usize {
        self.shared.requests.load(Ordering::SeqCst)
    }

    /// Lease requests received so far.
    pub fn lease_requests(&self) -> usize {
        self.shared.leases.requests.load(Ordering::SeqCst)
    }

    /// The holder of lease `namespace/name` (empty: released), if it exists.
    pub fn lease_holder(&self, namespace: &str, name: &str) -> Option<String> {
        self.shared.leases.holder(namespace, name)
    }

    /// Lease `namespace/name` as stored, if it exists.
    pub fn lease(&self, namespace: &str, name: &str) -> Option<serde_json::Value> {
        self.shared.leases.stored(namespace, name)
    }

    /// Every lease request answers 503 while `cut` (a partition between
    /// the controllers and the API server).
    pub fn cut_off_leases(&self, cut: bool) {
        self.shared.leases.cut_off.store(cut, Ordering::SeqCst);
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    fn labels(pairs: &[(&str, &str)]) -> BTreeMap<String, String> {
        crate::test_support::owned(pairs)
    }

    #[test]
    fn selector_semantics() {
        let l = labels(&[("a", "1"), ("node-role.kubernetes.io/control-plane", "")]);
        let table = [
            ("", true),
            ("a=1", true),
            ("a==1", true),
            ("a=2", false),
            ("a!=2", true),
            ("a!=1", false),
            ("b!=1", true),
            ("a", true),
            ("b", false),
            ("!b", true),
            ("!node-role.kubernetes.io/control-plane", false),
            ("a=1,!b", true),
            ("a=1,b", false),
        ];
        for (sel, want) in table {
            let reqs = parse_selector(sel).unwrap();
            assert_eq!(reqs.iter().all(|r| r.matches(&l)), want, "{sel}");
        }
        assert!(parse_selector("a in (x,y)").is_err());
        assert!(parse_selector("=x").is_err());
    }

    #[test]
    fn nodes_read_from_scenario_json() {
        let n: FakeNode = serde_json::from_str(
            r#"{"name": "n1", "labels": {"a": "b"}, "provider_id": "linode://1",
                "addresses": [["InternalIP", "10.0.0.5"]]}"#,
        )
        .unwrap();
        assert_eq!(
            n,
            FakeNode::new("n1")
                .label("a", "b")
                .provider_id("linode://1")
                .address("InternalIP", "10.0.0.5")
        );
    }
}
