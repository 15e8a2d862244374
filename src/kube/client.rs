//! The Kubernetes REST requests the driver makes (read one Node, list Nodes
//! by label selector; the storage objects are `storage`'s, the Lease
//! `lease`'s) over a connection built from resolved settings
//! ([`super::config`]), with the bearer token re-read as the projected
//! service-account token rotates. Each request's duration and outcome is a
//! metric. It must never log or return a bearer token.

use super::config::{self, bad_config, Target, TokenSource, SERVICE_ACCOUNT_DIR};
use crate::mutex::lock;
use serde::Deserialize;
use std::collections::BTreeMap;
use std::path::{Path, PathBuf};
use std::sync::Mutex;
use std::time::{Duration, Instant};

/// Projected tokens rotate hourly and stay valid a while after; a minute
/// between reads keeps file I/O negligible and never serves a stale token.
pub const TOKEN_REFRESH: Duration = Duration::from_secs(60);
const CONNECT_TIMEOUT: Duration = Duration::from_secs(5);
const REQUEST_TIMEOUT: Duration = Duration::from_secs(30);

/// The part of a Kubernetes Node the driver reads.
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct Node {
    pub name: String,
    pub labels: BTreeMap<String, String>,
    /// `spec.providerID`, e.g. `linode://12345`.
    pub provider_id: Option<String>,
}

#[derive(Deserialize)]
struct NodeObject {
    metadata: ObjectMeta,
    #[serde(default)]
    spec: NodeSpec,
}

#[derive(Deserialize)]
struct ObjectMeta {
    name: String,
    labels: Option<BTreeMap<String, String>>,
}

#[derive(Deserialize, Default)]
struct NodeSpec {
    #[serde(rename = "providerID")]
    provider_id: Option<String>,
}

#[derive(Deserialize)]
struct NodeList {
    #[serde(default)]
    items: Vec<NodeObject>,
    #[serde(default)]
    metadata: ListMeta,
}

#[derive(Deserialize, Default)]
struct ListMeta {
    #[serde(rename = "continue")]
    next: Option<String>,
}

/// Pages followed for one `list_nodes` with a limit, at most: a selective
/// page can be short or empty while more nodes follow.
const MAX_NODE_PAGES: usize = 50;

impl From<NodeObject> for Node {
    fn from(n: NodeObject) -> Node {
        Node {
            name: n.metadata.name,
            labels: n.metadata.labels.unwrap_or_default(),
            provider_id: n.spec.provider_id,
        }
    }
}

/// A Kubernetes `Status` error body.
#[derive(Deserialize)]
struct StatusBody {
    message: Option<String>,
    reason: Option<String>,
}

/// Where the bearer token comes from.
enum Bearer {
    None,
    Static(String),
    /// Re-read when the cached copy is older than `refresh`.
    File {
        path: PathBuf,
        refresh: Duration,
        cached: Mutex<(String, Instant)>,
    },
}

impl Bearer {
    fn from_file(path: PathBuf, refresh: Duration) -> crate::Result<Bearer> {
        let token = read_token(&path)?;
        Ok(Bearer::File {
            path,
            refresh,
            cached: Mutex::new((token, Instant::now())),
        })
    }

    fn current(&self) -> Option<String> {
        match self {
            Bearer::None => None,
            Bearer::Static(t) => Some(t.clone()),
            Bearer::File {
                path,
                refresh,
                cached,
            } => {
                let mut guard = lock(cached);
                if guard.1.elapsed() >= *refresh {
                    match read_token(path) {
                        Ok(t) => *guard = (t, Instant::now()),
                        // A rotated-away file is usually a transient remount;
                        // the old token may still be valid, try it.
                        Err(e) => log::warn!("keeping the previous Kubernetes token: {e}"),
                    }
                }
                Some(guard.0.clone())
            }
        }
    }
}

fn read_token(path: &Path) -> crate::Result<String> {
    let raw = std::fs::read_to_string(path).map_err(|e| {
        crate::Error::Unavailable(format!("read token file {}: {e}", path.display()))
    })?;
    let token = raw.trim().to_string();
    if token.is_empty() {
        return Err(crate::Error::Unavailable(format!(
            "token file {} is empty",
            path.display()
        )));
    }
    Ok(token)
}

/// A Kubernetes API connection.
pub struct KubeClient {
    agent: ureq::Agent,
    server: String,
    bearer: Bearer,
}

impl std::fmt::Debug for KubeClient {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        f.debug_struct("KubeClient")
            .field("server", &self.server)
            .finish_non_exhaustive()
    }
}

/// RFC 3986's unreserved characters, the only ones kept as they are.
const RESERVED: &percent_encoding::AsciiSet = &percent_encoding::NON_ALPHANUMERIC
    .remove(b'-')
    .remove(b'.')
    .remove(b'_')
    .remove(b'~');

/// Percent-encoding for a path segment or query value.
pub(super) fn percent_encode(s: &str) -> String {
    percent_encoding::utf8_percent_encode(s, RESERVED).to_string()
}

impl KubeClient {
    /// A kubeconfig file when given (`KUBECONFIG`), else the in-cluster
    /// service account and `in_cluster`, the API server's URL
    /// ([`crate::config::Config::kube_service`]).
    pub fn new(kubeconfig: Option<&Path>, in_cluster: Option<&str>) -> crate::Result<KubeClient> {
        match (kubeconfig, in_cluster) {
            (Some(path), _) => KubeClient::from_kubeconfig(path),
            (None, Some(server)) => {
                KubeClient::in_cluster(server, Path::new(SERVICE_ACCOUNT_DIR), TOKEN_REFRESH)
            }
            (None, None) => Err(crate::Error::InvalidArgument(
                "not running in a cluster (KUBERNETES_SERVICE_HOST/PORT unset) \
                 and KUBECONFIG not set"
                    .to_string(),
            )),
        }
    }

    /// In-cluster settings with the server URL, the service-account folder
    /// (`ca.crt`, `token`) and the token re-read interval made explicit.
    pub fn in_cluster(server: &str, sa_dir: &Path, refresh: Duration) -> crate::Result<KubeClient> {
        let target = config::in_cluster(server, sa_dir)?;
        let bearer = Bearer::from_file(sa_dir.join("token"), refresh)?;
        KubeClient::connect(&target, bearer)
    }

    /// The current context of the kubeconfig at `path`.
    pub fn from_kubeconfig(path: &Path) -> crate::Result<KubeClient> {
        let target = config::from_file(path)?;
        let bearer = match &target.token {
            Some(TokenSource::Inline(t)) => Bearer::Static(t.clone()),
            Some(TokenSource::File(f)) => Bearer::from_file(f.clone(), TOKEN_REFRESH)?,
            None => Bearer::None,
        };
        KubeClient::connect(&target, bearer)
    }

    fn connect(target: &Target, bearer: Bearer) -> crate::Result<KubeClient> {
        let mut tls = ureq::tls::TlsConfig::builder();
        if let Some(pem) = &target.ca_pem {
            let certs = crate::linode::client::pem_certificates(pem, "Kubernetes CA")?;
            tls = tls.root_certs(ureq::tls::RootCerts::new_with_certs(&certs));
        }
        if target.insecure {
            log::warn!(
                "kubeconfig asks to skip TLS verification of {}",
                target.server
            );
            tls = tls.disable_verification(true);
        }
        if let Some((cert_pem, key_pem)) = &target.client_cert {
            let chain = crate::linode::client::pem_certificates(cert_pem, "client certificate")?;
            let key = ureq::tls::PrivateKey::from_pem(key_pem)
                .map_err(|e| bad_config(format!("client key: {e}")))?;
            tls = tls.client_cert(Some(ureq::tls::ClientCert::new_with_certs(&chain, key)));
        }
        let agent = ureq::Agent::config_builder()
            .http_status_as_error(false)
            .timeout_connect(Some(CONNECT_TIMEOUT))
            .timeout_global(Some(REQUEST_TIMEOUT))
            .tls_config(tls.build())
            .build()
            .new_agent();
        Ok(KubeClient {
            agent,
            server: target.server.clone(),
            bearer,
        })
    }

    pub fn get_node(&self, name: &str) -> crate::Result<Node> {
        let body = self.get(
            "get_node",
            &format!("/api/v1/nodes/{}", percent_encode(name)),
            &format!("get node {name:?}"),
        )?;
        let node: NodeObject = serde_json::from_str(&body)
            .map_err(|e| crate::Error::Internal(format!("Kubernetes: bad Node object: {e}")))?;
        Ok(node.into())
    }

    /// One page of nodes matching `label_selector` (empty = all); `limit` 0
    /// means the server's default.
    pub fn list_nodes(&self, label_selector: &str, limit: u32) -> crate::Result<Vec<Node>> {
        let mut nodes = Vec::new();
        let mut next: Option<String> = None;
        for _ in 0..MAX_NODE_PAGES {
            let mut query = Vec::new();
            if limit > 0 {
                query.push(format!("limit={limit}"));
            }
            if !label_selector.is_empty() {
                query.push(format!("labelSelector={}", percent_encode(label_selector)));
            }
            if let Some(token) = &next {
                query.push(format!("continue={}", percent_encode(token)));
            }
            let path = if query.is_empty() {
                "/api/v1/nodes".to_string()
            } else {
                format!("/api/v1/nodes?{}", query.join("&"))
            };
            let body = self.get(
                "list_nodes",
                &path,
                &format!("list nodes {label_selector:?}"),
            )?;
            let list: NodeList = serde_json::from_str(&body)
                .map_err(|e| crate::Error::Internal(format!("Kubernetes: bad NodeList: {e}")))?;
            nodes.extend(list.items.into_iter().map(Node::from));
            next = list.metadata.next.filter(|t| !t.is_empty());
            // The API server may return fewer than `limit` (even none) with
            // a continue token; only an exhausted list or a full page ends.
            if next.is_none() || (limit > 0 && nodes.len() >= limit as usize) {
                break;
            }
        }
        if limit > 0 {
            nodes.truncate(limit as usize);
        }
        Ok(nodes)
    }

    /// `request` names the request in the metrics.
    pub(super) fn get(
        &self,
        request: &'static str,
        path: &str,
        what: &str,
    ) -> crate::Result<String> {
        self.send(
            Sent {
                request,
                method: "GET",
                path,
                body: None,
                content_type: None,
                timeout: None,
            },
            what,
        )
    }

    /// One request: the success body, or the error its status maps to (the
    /// one place that maps the API server's statuses).
    pub(super) fn send(&self, sent: Sent<'_>, what: &str) -> crate::Result<String> {
        let mut req = ureq::http::Request::builder()
            .method(sent.method)
            .uri(format!("{}{}", self.server, sent.path))
            .header("Accept", "application/json");
        if sent.body.is_some() {
            req = req.header(
                "Content-Type",
                sent.content_type.unwrap_or("application/json"),
            );
        }
        if let Some(token) = self.bearer.current() {
            req = req.header("Authorization", format!("Bearer {token}"));
        }
        let bad = |e: ureq::http::Error| crate::Error::Internal(format!("Kubernetes: {what}: {e}"));
        let answered = match sent.body {
            Some(body) => self.exchange(req.body(body.to_string()).map_err(bad)?, &sent),
            None => self.exchange(req.body(()).map_err(bad)?, &sent),
        };
        // An unreachable API server is transient from the driver's view
        // (rolling control plane, network blip): the caller retries later.
        let (status, body) =
            answered.map_err(|e| crate::Error::Unavailable(format!("Kubernetes: {what}: {e}")))?;
        if (200..300).contains(&status) {
            return Ok(body);
        }
        let detail = serde_json::from_str::<StatusBody>(&body)
            .ok()
            .and_then(|s| s.message.or(s.reason))
            .unwrap_or_else(|| "unexpected response".to_string());
        let message = format!("Kubernetes: {what}: [{status}] {detail}");
        Err(match status {
            400 | 422 => crate::Error::InvalidArgument(message),
            401 | 403 => crate::Error::PermissionDenied(message),
            404 => crate::Error::NotFound(message),
            409 => crate::Error::FailedPrecondition(message),
            429 | 500..=599 => crate::Error::Unavailable(message),
            _ => crate::Error::Internal(message),
        })
    }

    /// Sends `req` within `sent`'s timeout, if it has one: the status and body.
    fn exchange(
        &self,
        req: ureq::http::Request<impl ureq::AsSendBody>,
        sent: &Sent<'_>,
    ) -> Result<(u16, String), ureq::Error> {
        let mut config = self.agent.configure_request(req);
        if let Some(timeout) = sent.timeout {
            config = config.timeout_global(Some(timeout));
        }
        let req = config.build();
        crate::http_answer::exchange(
            || self.agent.run(req),
            |status, took| crate::metrics::kube_request(sent.request, status, took),
        )
    }
}

/// One request as `KubeClient::send` sends it.
pub(super) struct Sent<'a> {
    /// Its name in the metrics.
    pub request: &'static str,
    pub method: &'static str,
    pub path: &'a str,
    pub body: Option<&'a str>,
    /// Of the body, when not plain JSON (a merge patch).
    pub content_type: Option<&'static str>,
    /// Below the client's own bound, for a caller with a deadline of its own.
    pub timeout: Option<Duration>,
}

impl Bearer {
    /// A copy that re-reads its file on its own schedule.
    fn duplicate(&self) -> Bearer {
        match self {
            Bearer::None => Bearer::None,
            Bearer::Static(t) => Bearer::Static(t.clone()),
            Bearer::File {
                path,
                refresh,
                cached,
            } => Bearer::File {
                path: path.clone(),
                refresh: *refresh,
                cached: Mutex::new(lock(cached).clone()),
            },
        }
    }
}

impl KubeClient {
    /// A second client of the same API server with the same credentials
    /// (and the same connection pool), for a part of the driver that needs
    /// its own.
    pub fn duplicate(&self) -> KubeClient {
        KubeClient {
            agent: self.agent.clone(),
            server: self.server.clone(),
            bearer: self.bearer.duplicate(),
        }
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn percent_encoding() {
        assert_eq!(
            percent_encode("!node-role.kubernetes.io/control-plane,a=b"),
            "%21node-role.kubernetes.io%2Fcontrol-plane%2Ca%3Db"
        );
    }
}
