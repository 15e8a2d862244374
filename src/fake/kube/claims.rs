//! The fake Kubernetes API's PersistentVolumeClaims and events, as autogrow
//! and a test's resizer use them: `GET /api/v1/persistentvolumeclaims`
//! (every namespace, paged), `GET` and `PATCH`
//! `/api/v1/namespaces/{ns}/persistentvolumeclaims/{name}` (a JSON merge
//! patch of the requested storage, refused as the API server refuses it:
//! 409 when `metadata.resourceVersion` is not the stored one, 422 below
//! the capacity in force or above it when the class does not allow
//! expansion; also of `metadata.annotations`, as `kubectl annotate` sends),
//! `DELETE` of a claim, and `POST` and `GET /api/v1/namespaces/{ns}/events`.
//! A list can be made to answer late, as of when it was asked, as a slow
//! API server's does (`set_list_delay`). What the rest of Kubernetes
//! does is played over the same API (so a test can play it against dev
//! mode): `POST …/persistentvolumeclaims` makes a claim (bound when its
//! spec names a volume), `PATCH …/persistentvolumeclaims/{name}/status`
//! writes its capacity and resize status as the PV binder and the resizer
//! do; or through `FakeKube`'s methods in process.

use super::answers::status;
use crate::fake::{percent_decode, HttpRequest, HttpResponse};
use crate::kube::{quantity_bytes, PersistentVolumeClaim};
use crate::mutex::lock;
use serde_json::{json, Value};
use std::collections::BTreeMap;
use std::sync::atomic::{AtomicU64, AtomicUsize, Ordering};
use std::sync::Mutex;
use std::time::Duration;

/// A claim as the fake stores it.
pub type FakeClaim = PersistentVolumeClaim;

/// An event the driver created, as the fake keeps it.
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct FakeClaimEvent {
    pub namespace: String,
    /// The claim it is about (`involvedObject.name`).
    pub claim: String,
    /// `Normal` or `Warning`.
    pub kind: String,
    pub reason: String,
    pub message: String,
}

#[derive(Default)]
pub(super) struct Claims {
    stored: Mutex<BTreeMap<(String, String), FakeClaim>>,
    events: Mutex<Vec<FakeClaimEvent>>,
    next_version: AtomicU64,
    /// How late a list answers, as of when it was asked.
    list_delay: Mutex<Duration>,
    pub(super) lists: AtomicUsize,
    pub(super) reads: AtomicUsize,
    pub(super) patches: AtomicUsize,
}

const ALL: &str = "/api/v1/persistentvolumeclaims";
const NAMESPACES: &str = "/api/v1/namespaces/";

impl Claims {
    /// The answer to a claim or event request; `None` for any other path.
    /// `expandable` says whether a StorageClass allows expansion.
    pub(super) fn handle(
        &self,
        req: &HttpRequest,
        expandable: impl Fn(&str) -> bool,
    ) -> Option<HttpResponse> {
        if req.path == ALL {
            return Some(match req.method.as_str() {
                "GET" => self.list(req),
                _ => not_allowed(),
            });
        }
        let rest = req.path.strip_prefix(NAMESPACES)?;
        let (namespace, rest) = rest.split_once('/')?;
        let namespace = percent_decode(namespace);
        if rest == "events" {
            return Some(match req.method.as_str() {
                "POST" => self.event(&namespace, &req.body),
                "GET" => self.list_events(req, &namespace),
                _ => not_allowed(),
            });
        }
        if rest == "persistentvolumeclaims" {
            return Some(match req.method.as_str() {
                "POST" => self.create(&namespace, &req.body),
                _ => not_allowed(),
            });
        }
        let name = rest.strip_prefix("persistentvolumeclaims/")?;
        if let Some(name) = name.strip_suffix("/status") {
            return Some(match req.method.as_str() {
                "PATCH" => self.patch_status(req, namespace, percent_decode(name)),
                _ => not_allowed(),
            });
        }
        let name = percent_decode(name);
        Some(match req.method.as_str() {
            "GET" => match self.read(&namespace, &name) {
                Some(claim) => HttpResponse::json(200, &to_json(&claim)),
                None => not_found(&name),
            },
            "PATCH" => self.patch(req, namespace, name, expandable),
            "DELETE" => match lock(&self.stored).remove(&(namespace, name.clone())) {
                Some(claim) => HttpResponse::json(200, &to_json(&claim)),
                None => not_found(&name),
            },
            _ => not_allowed(),
        })
    }

    /// Makes every list answer `delay` late, as of when it was asked.
    pub(super) fn set_list_delay(&self, delay: Duration) {
        *lock(&self.list_delay) = delay;
    }

    /// The events of `namespace`, oldest first, as an EventList.
    fn list_events(&self, req: &HttpRequest, namespace: &str) -> HttpResponse {
        let items: Vec<Value> = lock(&self.events)
            .iter()
            .filter(|e| e.namespace == namespace)
            .map(|e| {
                json!({
                    "metadata": {"namespace": e.namespace},
                    "involvedObject": {"kind": "PersistentVolumeClaim", "namespace": e.namespace, "name": e.claim},
                    "type": e.kind, "reason": e.reason, "message": e.message
                })
            })
            .collect();
        super::answers::paged(req, "EventList", "v1", items)
    }

    fn read(&self, namespace: &str, name: &str) -> Option<FakeClaim> {
        self.reads.fetch_add(1, Ordering::SeqCst);
        self.get(namespace, name)
    }

    fn list(&self, req: &HttpRequest) -> HttpResponse {
        self.lists.fetch_add(1, Ordering::SeqCst);
        let items: Vec<Value> = lock(&self.stored).values().map(to_json).collect();
        let delay = *lock(&self.list_delay);
        if !delay.is_zero() {
            std::thread::sleep(delay);
        }
        super::answers::paged(req, "PersistentVolumeClaimList", "v1", items)
    }

    fn patch(
        &self,
        req: &HttpRequest,
        namespace: String,
        name: String,
        expandable: impl Fn(&str) -> bool,
    ) -> HttpResponse {
        self.patches.fetch_add(1, Ordering::SeqCst);
        if req.header("Content-Type") != Some("application/merge-patch+json") {
            return status(415, "UnsupportedMediaType", "want a JSON merge patch");
        }
        let Ok(patch) = serde_json::from_str::<Value>(&req.body) else {
            return status(400, "BadRequest", "the body is not JSON");
        };
        let mut stored = lock(&self.stored);
        let Some(claim) = stored.get_mut(&(namespace, name.clone())) else {
            return not_found(&name);
        };
        if let Some(version) = patch["metadata"]["resourceVersion"].as_str() {
            if version != claim.resource_version {
                return status(
                    409,
                    "Conflict",
                    &format!("Operation cannot be fulfilled on persistentvolumeclaims \"{name}\": the object has been modified; please apply your changes to the latest version and try again"),
                );
            }
        }
        let asked = &patch["spec"]["resources"]["requests"]["storage"];
        if !asked.is_null() {
            let Some(bytes) = asked.as_str().and_then(quantity_bytes) else {
                return status(
                    422,
                    "Invalid",
                    "spec.resources.requests.storage: Invalid value",
                );
            };
            let growing = bytes > claim.requested.unwrap_or(0);
            let class_allows = claim.storage_class.as_deref().is_some_and(&expandable);
            if growing && (claim.volume_name.is_none() || !class_allows) {
                return status(422, "Invalid", &format!("PersistentVolumeClaim \"{name}\" is invalid: spec: Forbidden: only dynamically provisioned pvc can be resized and the storageclass that provisions the pvc must support resize"));
            }
            if bytes < claim.capacity.unwrap_or(0) {
                return status(422, "Invalid", &format!("PersistentVolumeClaim \"{name}\" is invalid: spec.resources.requests.storage: Forbidden: field can not be less than status.capacity"));
            }
            claim.requested = Some(bytes);
        }
        if let Some(annotations) = patch["metadata"]["annotations"].as_object() {
            for (key, value) in annotations {
                match value.as_str() {
                    Some(v) => claim.annotations.insert(key.clone(), v.to_string()),
                    None => claim.annotations.remove(key),
                };
            }
        }
        claim.resource_version = self.version();
        HttpResponse::json(200, &to_json(claim))
    }

    /// A new claim as a user makes it: its status is the binder's to write.
    fn create(&self, namespace: &str, body: &str) -> HttpResponse {
        let Ok(object) = serde_json::from_str::<Value>(body) else {
            return status(400, "BadRequest", "the body is not a PersistentVolumeClaim");
        };
        let text = |v: &Value| v.as_str().map(str::to_string);
        let Some(name) = text(&object["metadata"]["name"]) else {
            return status(422, "Invalid", "metadata.name: Required value");
        };
        let key = (namespace.to_string(), name.clone());
        if lock(&self.stored).contains_key(&key) {
            return status(
                409,
                "AlreadyExists",
                &format!("persistentvolumeclaims \"{name}\" already exists"),
            );
        }
        let annotations = object["metadata"]["annotations"]
            .as_object()
            .map(|a| {
                a.iter()
                    .filter_map(|(k, v)| Some((k.clone(), v.as_str()?.to_string())))
                    .collect()
            })
            .unwrap_or_default();
        let claim = FakeClaim {
            namespace: namespace.to_string(),
            name: name.clone(),
            uid: new_uid(),
            resource_version: self.version(),
            annotations,
            volume_name: text(&object["spec"]["volumeName"]),
            storage_class: text(&object["spec"]["storageClassName"]),
            requested: object["spec"]["resources"]["requests"]["storage"]
                .as_str()
                .and_then(quantity_bytes),
            capacity: None,
            resize_status: None,
        };
        let answer = to_json(&claim);
        lock(&self.stored).insert(key, claim);
        HttpResponse::json(201, &answer)
    }

    /// The binder's and the resizer's writes: `status.capacity.storage`
    /// and `status.allocatedResourceStatuses.storage` (null removes it).
    fn patch_status(&self, req: &HttpRequest, namespace: String, name: String) -> HttpResponse {
        let Ok(patch) = serde_json::from_str::<Value>(&req.body) else {
            return status(400, "BadRequest", "the body is not JSON");
        };
        let version = self.version();
        let mut stored = lock(&self.stored);
        let Some(claim) = stored.get_mut(&(namespace, name.clone())) else {
            return not_found(&name);
        };
        let capacity = &patch["status"]["capacity"]["storage"];
        if let Some(bytes) = capacity.as_str().and_then(quantity_bytes) {
            claim.capacity = Some(bytes);
        }
        let resize = &patch["status"]["allocatedResourceStatuses"]["storage"];
        if resize.is_null() && patch["status"]["allocatedResourceStatuses"].is_object() {
            claim.resize_status = None;
        } else if let Some(resize) = resize.as_str() {
            claim.resize_status = Some(resize.to_string());
        }
        claim.resource_version = version;
        HttpResponse::json(200, &to_json(claim))
    }

    fn event(&self, namespace: &str, body: &str) -> HttpResponse {
        let Ok(event) = serde_json::from_str::<Value>(body) else {
            return status(400, "BadRequest", "the body is not an Event");
        };
        let text = |v: &Value| v.as_str().unwrap_or_default().to_string();
        let involved = &event["involvedObject"];
        if text(&event["metadata"]["name"]).is_empty() || text(&involved["namespace"]) != namespace
        {
            return status(
                422,
                "Invalid",
                "metadata.name, or involvedObject.namespace: does not match the namespace",
            );
        }
        lock(&self.events).push(FakeClaimEvent {
            namespace: namespace.to_string(),
            claim: text(&involved["name"]),
            kind: text(&event["type"]),
            reason: text(&event["reason"]),
            message: text(&event["message"]),
        });
        HttpResponse::json(201, &event)
    }

    fn version(&self) -> String {
        (self.next_version.fetch_add(1, Ordering::SeqCst) + 1).to_string()
    }

    /// Stores `claim` (replacing one of its name), at a new resourceVersion.
    pub(super) fn put(&self, mut claim: FakeClaim) {
        claim.resource_version = self.version();
        let key = (claim.namespace.clone(), claim.name.clone());
        lock(&self.stored).insert(key, claim);
    }

    /// Changes claim `namespace/name` with `f` (a new resourceVersion), if
    /// it exists.
    pub(super) fn change(&self, namespace: &str, name: &str, f: impl FnOnce(&mut FakeClaim)) {
        let version = self.version();
        if let Some(claim) = lock(&self.stored).get_mut(&(namespace.to_string(), name.to_string()))
        {
            f(claim);
            claim.resource_version = version;
        }
    }

    pub(super) fn get(&self, namespace: &str, name: &str) -> Option<FakeClaim> {
        lock(&self.stored)
            .get(&(namespace.to_string(), name.to_string()))
            .cloned()
    }

    pub(super) fn events(&self) -> Vec<FakeClaimEvent> {
        lock(&self.events).clone()
    }
}

/// A new UID, shaped as the API server's are (a version 4 UUID): unique
/// within the process, so a claim made again under a name is another.
fn new_uid() -> String {
    static NEXT: AtomicU64 = AtomicU64::new(0);
    let n = NEXT.fetch_add(1, Ordering::SeqCst);
    let clock = std::time::SystemTime::now()
        .duration_since(std::time::UNIX_EPOCH)
        .map(|d| d.as_nanos() as u64)
        .unwrap_or(0);
    format!(
        "{:08x}-{:04x}-4{:03x}-8{:03x}-{:012x}",
        (clock >> 32) as u32,
        (clock >> 16) as u16,
        (clock >> 4) & 0xfff,
        n & 0xfff,
        n
    )
}

fn not_found(name: &str) -> HttpResponse {
    status(
        404,
        "NotFound",
        &format!("persistentvolumeclaims \"{name}\" not found"),
    )
}

fn not_allowed() -> HttpResponse {
    status(
        405,
        "MethodNotAllowed",
        "the server does not allow this method",
    )
}

fn to_json(c: &FakeClaim) -> Value {
    let mut requests = json!({});
    if let Some(bytes) = c.requested {
        requests["storage"] = json!(bytes.to_string());
    }
    let mut status = json!({"phase": if c.volume_name.is_some() { "Bound" } else { "Pending" }});
    if let Some(bytes) = c.capacity {
        status["capacity"] = json!({"storage": bytes.to_string()});
    }
    if let Some(resize) = &c.resize_status {
        status["allocatedResourceStatuses"] = json!({"storage": resize});
    }
    json!({
        "kind": "PersistentVolumeClaim", "apiVersion": "v1",
        "metadata": {
            "name": c.name, "namespace": c.namespace, "uid": c.uid,
            "resourceVersion": c.resource_version, "annotations": c.annotations
        },
        "spec": {
            "accessModes": ["ReadWriteMany"],
            "volumeName": c.volume_name, "storageClassName": c.storage_class,
            "resources": {"requests": requests}
        },
        "status": status
    })
}
