//! A stand-in for csi-resizer, for the autogrow tests: it watches claims
//! for a request above the capacity in force (what autogrow's patch makes),
//! calls ControllerExpandVolume for it over the driver's real gRPC socket,
//! and writes the outcome into the claim's status as the resizer does: the
//! new capacity, or `ControllerResizeInfeasible` for an OutOfRange or
//! InvalidArgument answer (what the resizer takes as infeasible). Other
//! answers are retried. The claims are the in-process fake API server's
//! (`FakeKube`) or, for dev mode, any API server's over HTTP (`ApiServer`).

use super::requests::expand_req;
use linode_nfs_csi::fake::FakeKube;
use linode_nfs_csi::kube::quantity_bytes;
use linode_nfs_csi::proto::csi_grpc::ControllerClient;
use serde_json::{json, Value};
use std::path::Path;
use std::sync::atomic::{AtomicBool, AtomicUsize, Ordering};
use std::sync::Arc;
use std::thread::{Scope, ScopedJoinHandle};
use std::time::Duration;

/// The claims it serves: `(namespace, name, volume id)`.
pub type Served = Vec<(String, String, String)>;

/// What the resizer reads and writes of a claim.
pub struct ClaimState {
    pub requested: Option<i64>,
    pub capacity: Option<i64>,
    pub resize_status: Option<String>,
}

/// Where the claims are.
pub trait Claims: Sync {
    fn read(&self, namespace: &str, name: &str) -> Option<ClaimState>;
    /// Writes the claim's status: its capacity, or that its resize is infeasible.
    fn write(&self, namespace: &str, name: &str, capacity: Option<i64>, infeasible: bool);
}

impl Claims for FakeKube {
    fn read(&self, namespace: &str, name: &str) -> Option<ClaimState> {
        self.claim(namespace, name).map(|c| ClaimState {
            requested: c.requested,
            capacity: c.capacity,
            resize_status: c.resize_status,
        })
    }

    fn write(&self, namespace: &str, name: &str, capacity: Option<i64>, infeasible: bool) {
        self.change_claim(namespace, name, |c| {
            if let Some(bytes) = capacity {
                c.capacity = Some(bytes);
            }
            if infeasible {
                c.resize_status = Some("ControllerResizeInfeasible".into());
            }
        });
    }
}

/// An API server over HTTP, with the bearer token of a kubeconfig.
pub struct ApiServer {
    server: String,
    token: String,
    agent: ureq::Agent,
}

impl ApiServer {
    /// The server and token of the (single-cluster, token) kubeconfig at `path`.
    pub fn from_kubeconfig(path: &Path) -> ApiServer {
        let text = std::fs::read_to_string(path).unwrap();
        let field = |key: &str| {
            text.lines()
                .find_map(|l| l.trim().strip_prefix(key))
                .map(|v| v.trim().trim_matches('"').to_string())
                .unwrap_or_else(|| panic!("no {key} in {}", path.display()))
        };
        ApiServer {
            server: field("server:"),
            token: field("token:"),
            agent: ureq::Agent::config_builder()
                .http_status_as_error(false)
                .build()
                .into(),
        }
    }

    /// Sends `body` (JSON) with `method` to `path`: the status and body.
    pub fn send(&self, method: &str, path: &str, body: Option<&Value>) -> (u16, Value) {
        let url = format!("{}{path}", self.server);
        let auth = format!("Bearer {}", self.token);
        let content_type = match method {
            "PATCH" => "application/merge-patch+json",
            _ => "application/json",
        };
        let request = ureq::http::Request::builder()
            .method(method)
            .uri(&url)
            .header("Authorization", auth)
            .header("Content-Type", content_type);
        let mut answer = match body {
            Some(b) => self
                .agent
                .run(request.body(b.to_string()).unwrap())
                .unwrap(),
            None => self.agent.run(request.body(()).unwrap()).unwrap(),
        };
        let status = answer.status().as_u16();
        let text = answer.body_mut().read_to_string().unwrap();
        (status, serde_json::from_str(&text).unwrap_or(Value::Null))
    }

    fn claim_path(namespace: &str, name: &str) -> String {
        format!("/api/v1/namespaces/{namespace}/persistentvolumeclaims/{name}")
    }
}

impl Claims for ApiServer {
    fn read(&self, namespace: &str, name: &str) -> Option<ClaimState> {
        let (status, claim) = self.send("GET", &ApiServer::claim_path(namespace, name), None);
        if status != 200 {
            return None;
        }
        let bytes = |v: &Value| v.as_str().and_then(quantity_bytes);
        Some(ClaimState {
            requested: bytes(&claim["spec"]["resources"]["requests"]["storage"]),
            capacity: bytes(&claim["status"]["capacity"]["storage"]),
            resize_status: claim["status"]["allocatedResourceStatuses"]["storage"]
                .as_str()
                .map(str::to_string),
        })
    }

    fn write(&self, namespace: &str, name: &str, capacity: Option<i64>, infeasible: bool) {
        let mut status = json!({});
        if let Some(bytes) = capacity {
            status["capacity"] = json!({"storage": bytes.to_string()});
        }
        if infeasible {
            status["allocatedResourceStatuses"] = json!({"storage": "ControllerResizeInfeasible"});
        }
        let path = format!("{}/status", ApiServer::claim_path(namespace, name));
        let (code, answer) = self.send("PATCH", &path, Some(&json!({ "status": status })));
        assert_eq!(code, 200, "{answer}");
    }
}

/// Runs on a thread of `scope` until dropped.
pub struct Resizer<'scope> {
    stop: Arc<AtomicBool>,
    expansions: Arc<AtomicUsize>,
    thread: Option<ScopedJoinHandle<'scope, ()>>,
}

impl<'scope> Resizer<'scope> {
    /// Starts watching `served` claims of `claims`, expanding through `client`.
    pub fn start<'env>(
        scope: &'scope Scope<'scope, 'env>,
        claims: &'env dyn Claims,
        client: ControllerClient,
        served: Served,
    ) -> Resizer<'scope> {
        let stop = Arc::new(AtomicBool::new(false));
        let expansions = Arc::new(AtomicUsize::new(0));
        let (stopping, counted) = (stop.clone(), expansions.clone());
        let thread = scope.spawn(move || {
            while !stopping.load(Ordering::SeqCst) {
                for (namespace, name, volume) in &served {
                    let Some(claim) = claims.read(namespace, name) else {
                        continue;
                    };
                    let Some(requested) = claim.requested else {
                        continue;
                    };
                    if requested <= claim.capacity.unwrap_or(0) || claim.resize_status.is_some() {
                        continue;
                    }
                    counted.fetch_add(1, Ordering::SeqCst);
                    match client.controller_expand_volume(&expand_req(volume, requested)) {
                        Ok(resp) => claims.write(namespace, name, Some(resp.capacity_bytes), false),
                        Err(grpcio::Error::RpcFailure(s))
                            if matches!(
                                s.code(),
                                grpcio::RpcStatusCode::OUT_OF_RANGE
                                    | grpcio::RpcStatusCode::INVALID_ARGUMENT
                            ) =>
                        {
                            claims.write(namespace, name, None, true)
                        }
                        Err(_) => {}
                    }
                }
                // The resizer's watch, polled.
                std::thread::sleep(Duration::from_millis(20));
            }
        });
        Resizer {
            stop,
            expansions,
            thread: Some(thread),
        }
    }

    /// ControllerExpandVolume calls made so far.
    pub fn expansions(&self) -> usize {
        self.expansions.load(Ordering::SeqCst)
    }
}

impl Drop for Resizer<'_> {
    fn drop(&mut self) {
        self.stop.store(true, Ordering::SeqCst);
        if let Some(t) = self.thread.take() {
            let _ = t.join();
        }
    }
}
