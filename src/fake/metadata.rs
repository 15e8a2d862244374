//! Fake Linode metadata service: `PUT /v1/token` (expiry header required),
//! then `GET /v1/instance` / `GET /v1/network` with a valid, unexpired
//! `Metadata-Token`. Can be slowed down, can have its tokens expired, and can
//! be stopped so connections are refused (the node's fallback path).

use super::{HttpRequest, HttpResponse, HttpServer};
use crate::mutex::lock;
use serde_json::json;
use std::collections::HashMap;
use std::net::SocketAddr;
use std::sync::atomic::{AtomicU64, AtomicUsize, Ordering};
use std::sync::{Arc, Mutex};
use std::time::{Duration, Instant};

struct Shared {
    id: u64,
    region: String,
    tokens: Mutex<HashMap<String, Instant>>,
    delay: Mutex<Duration>,
    issued: AtomicU64,
    requests: AtomicUsize,
}

/// The fake metadata service of one instance.
pub struct FakeMetadata {
    shared: Arc<Shared>,
    http: Mutex<Option<HttpServer>>,
    addr: SocketAddr,
}

fn error(status: u16, reason: &str, field: Option<&str>) -> HttpResponse {
    let mut item = json!({ "reason": reason });
    if let Some(f) = field {
        item["field"] = json!(f);
    }
    HttpResponse::json(status, &json!({ "errors": [item] }))
}

impl Shared {
    fn handle(&self, req: HttpRequest) -> HttpResponse {
        self.requests.fetch_add(1, Ordering::SeqCst);
        let delay = *lock(&self.delay);
        if !delay.is_zero() {
            std::thread::sleep(delay);
        }
        match (req.method.as_str(), req.path.as_str()) {
            ("PUT", "/v1/token") => self.issue_token(&req),
            ("GET", "/v1/instance") | ("GET", "/v1/network") => {
                let valid = req.header("Metadata-Token").is_some_and(|t| {
                    let tokens = lock(&self.tokens);
                    tokens.get(t).is_some_and(|exp| Instant::now() < *exp)
                });
                if !valid {
                    return error(401, "Unauthorized", None);
                }
                if req.path == "/v1/instance" {
                    HttpResponse::json(200, &self.instance())
                } else {
                    HttpResponse::json(200, &self.network())
                }
            }
            _ => error(404, "Not found", None),
        }
    }

    fn issue_token(&self, req: &HttpRequest) -> HttpResponse {
        let field = "Metadata-Token-Expiry-Seconds";
        let secs = match req.header(field).map(|v| v.trim().parse::<u64>()) {
            Some(Ok(s)) if (1..=86_400).contains(&s) => s,
            Some(_) => return error(400, "Must be an integer between 1 and 86400", Some(field)),
            None => return error(400, "Header is required", Some(field)),
        };
        let n = self.issued.fetch_add(1, Ordering::SeqCst);
        let token = format!("{:016x}{:048x}", self.id, u128::from(n) + 1);
        lock(&self.tokens).insert(token.clone(), Instant::now() + Duration::from_secs(secs));
        if req
            .header("Accept")
            .is_some_and(|a| a.contains("application/json"))
        {
            HttpResponse::json(200, &json!([token]))
        } else {
            HttpResponse {
                status: 200,
                headers: vec![("Content-Type".into(), "text/plain".into())],
                body: token.into_bytes(),
            }
        }
    }

    fn instance(&self) -> serde_json::Value {
        json!({
            "id": self.id, "label": format!("fake-linode-{}", self.id), "region": self.region,
            "type": "g6-standard-4", "host_uuid": "3f0c2a9e-0000-4b1d-9e0f-123456789abc",
            "tags": [], "specs": {"vcpus": 4, "memory": 8192, "gpus": 0, "transfer": 5000, "disk": 163840},
            "backups": {"enabled": false, "status": null},
            "image": {"id": "linode/ubuntu24.04", "label": "Ubuntu 24.04 LTS"},
            "account_euuid": "A1B2C3D4-0000-1111-2222333344445555"
        })
    }

    fn network(&self) -> serde_json::Value {
        json!({
            "interfaces": [],
            "ipv4": {"public": ["192.0.2.10/32"], "private": [], "shared": []},
            "ipv6": {"slaac": "2001:db8::10/128", "link_local": "fe80::10/128",
                     "ranges": [], "shared_ranges": []}
        })
    }
}

impl FakeMetadata {
    /// A metadata service for Linode `id` in `region`.
    pub fn start(id: u64, region: &str) -> crate::Result<FakeMetadata> {
        let shared = Arc::new(Shared {
            id,
            region: region.to_string(),
            tokens: Mutex::new(HashMap::new()),
            delay: Mutex::new(Duration::ZERO),
            issued: AtomicU64::new(0),
            requests: AtomicUsize::new(0),
        });
        let handler = Arc::clone(&shared);
        let http = super::serve("fake-metadata", Arc::new(move |r| handler.handle(r)))?;
        Ok(FakeMetadata {
            addr: http.addr(),
            shared,
            http: Mutex::new(Some(http)),
        })
    }

    /// Base URL (`METADATA_URL`), e.g. `http://127.0.0.1:40000`.
    pub fn url(&self) -> String {
        format!("http://{}", self.addr)
    }

    /// Every answer is delayed by `delay` (to exercise client timeouts).
    pub fn set_delay(&self, delay: Duration) {
        *lock(&self.shared.delay) = delay;
    }

    /// Expire every token issued so far (a controllable clock).
    pub fn expire_tokens(&self) {
        let mut tokens = lock(&self.shared.tokens);
        for exp in tokens.values_mut() {
            *exp = Instant::now();
        }
    }

    /// Requests received so far (any path, any outcome).
    pub fn requests(&self) -> usize {
        self.shared.requests.load(Ordering::SeqCst)
    }

    /// Close the listener; returns once connections to `url()` are refused.
    pub fn stop(&self) {
        let server = lock(&self.http).take();
        drop(server);
    }
}
