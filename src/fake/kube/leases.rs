//! The fake Kubernetes API's `coordination.k8s.io/v1` Leases: GET one,
//! POST one (409 when it exists), PUT one whose `metadata.resourceVersion`
//! must be the stored one (409 Conflict otherwise, as the real API server
//! answers an update that lost a race). Counted apart from the other
//! requests, so tests that count those keep their figures; a test can cut
//! the leases off (every lease request 503) to play a partition.

use super::answers::status;
use crate::fake::{HttpRequest, HttpResponse};
use crate::mutex::lock;
use serde_json::{json, Value};
use std::collections::BTreeMap;
use std::sync::atomic::{AtomicBool, AtomicU64, AtomicUsize, Ordering};
use std::sync::Mutex;

const PREFIX: &str = "/apis/coordination.k8s.io/v1/namespaces/";

#[derive(Default)]
pub(super) struct Leases {
    /// `(namespace, name)` → the stored object.
    stored: Mutex<BTreeMap<(String, String), Value>>,
    next_version: AtomicU64,
    pub(super) requests: AtomicUsize,
    pub(super) cut_off: AtomicBool,
}

impl Leases {
    /// Lease `namespace/name` as stored.
    pub(super) fn stored(&self, namespace: &str, name: &str) -> Option<Value> {
        lock(&self.stored)
            .get(&(namespace.to_string(), name.to_string()))
            .cloned()
    }

    /// The answer to a lease request; `None` for any other path.
    pub(super) fn handle(&self, req: &HttpRequest) -> Option<HttpResponse> {
        let rest = req.path.strip_prefix(PREFIX)?;
        let (namespace, rest) = rest.split_once('/')?;
        let name = match rest.strip_prefix("leases") {
            Some("") => None,
            Some(name) => Some(name.strip_prefix('/')?.to_string()),
            None => return None,
        };
        self.requests.fetch_add(1, Ordering::SeqCst);
        if self.cut_off.load(Ordering::SeqCst) {
            return Some(status(
                503,
                "ServiceUnavailable",
                "the server is unreachable",
            ));
        }
        let namespace = namespace.to_string();
        Some(match (req.method.as_str(), name) {
            ("GET", Some(name)) => match lock(&self.stored).get(&(namespace, name.clone())) {
                Some(lease) => HttpResponse::json(200, lease),
                None => status(
                    404,
                    "NotFound",
                    &format!("leases.coordination.k8s.io \"{name}\" not found"),
                ),
            },
            ("POST", None) => self.create(namespace, &req.body),
            ("PUT", Some(name)) => self.replace(namespace, name, &req.body),
            _ => status(
                405,
                "MethodNotAllowed",
                "the server does not allow this method",
            ),
        })
    }

    fn versioned(&self, mut lease: Value, namespace: &str, name: &str) -> Value {
        let version = self.next_version.fetch_add(1, Ordering::SeqCst) + 1;
        lease["metadata"]["resourceVersion"] = json!(version.to_string());
        lease["metadata"]["namespace"] = json!(namespace);
        lease["metadata"]["name"] = json!(name);
        lease
    }

    fn create(&self, namespace: String, body: &str) -> HttpResponse {
        let Ok(lease) = serde_json::from_str::<Value>(body) else {
            return status(400, "BadRequest", "the body is not a Lease");
        };
        let Some(name) = lease["metadata"]["name"].as_str().map(str::to_string) else {
            return status(422, "Invalid", "metadata.name: Required value");
        };
        let mut stored = lock(&self.stored);
        let key = (namespace.clone(), name.clone());
        if stored.contains_key(&key) {
            return status(
                409,
                "AlreadyExists",
                &format!("leases.coordination.k8s.io \"{name}\" already exists"),
            );
        }
        let lease = self.versioned(lease, &namespace, &name);
        stored.insert(key, lease.clone());
        HttpResponse::json(201, &lease)
    }

    fn replace(&self, namespace: String, name: String, body: &str) -> HttpResponse {
        let Ok(lease) = serde_json::from_str::<Value>(body) else {
            return status(400, "BadRequest", "the body is not a Lease");
        };
        let mut stored = lock(&self.stored);
        let key = (namespace.clone(), name.clone());
        let Some(current) = stored.get(&key) else {
            return status(
                404,
                "NotFound",
                &format!("leases.coordination.k8s.io \"{name}\" not found"),
            );
        };
        if lease["metadata"]["resourceVersion"] != current["metadata"]["resourceVersion"] {
            return status(
                409,
                "Conflict",
                &format!("Operation cannot be fulfilled on leases.coordination.k8s.io \"{name}\": the object has been modified; please apply your changes to the latest version and try again"),
            );
        }
        let lease = self.versioned(lease, &namespace, &name);
        stored.insert(key, lease.clone());
        HttpResponse::json(200, &lease)
    }

    /// The holder of lease `namespace/name` as stored (empty: released).
    pub(super) fn holder(&self, namespace: &str, name: &str) -> Option<String> {
        lock(&self.stored)
            .get(&(namespace.to_string(), name.to_string()))
            .map(|l| {
                l["spec"]["holderIdentity"]
                    .as_str()
                    .unwrap_or("")
                    .to_string()
            })
    }
}
