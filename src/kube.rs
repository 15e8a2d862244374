//! Minimal Kubernetes REST client: read one Node, list Nodes by label
//! selector. Connection settings come from a kubeconfig file or the in-cluster
//! service account (whose projected token rotates, so it is re-read
//! periodically). Unsupported auth (exec plugins, auth-provider, basic) fails
//! at construction. Each request's duration and outcome is a metric. It
//! must never log or return a bearer token.

use crate::mutex::lock;
use serde::Deserialize;
use std::collections::BTreeMap;
use std::path::{Path, PathBuf};
use std::sync::Mutex;
use std::time::{Duration, Instant};

/// The in-cluster service-account directory.
pub const SERVICE_ACCOUNT_DIR: &str = "/var/run/secrets/kubernetes.io/serviceaccount";
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
    #[serde(default)]
    labels: Option<BTreeMap<String, String>>,
}

#[derive(Deserialize, Default)]
struct NodeSpec {
    #[serde(rename = "providerID", default)]
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
    #[serde(rename = "continue", default)]
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
    #[serde(default)]
    message: Option<String>,
    #[serde(default)]
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

/// TLS and credentials resolved from a kubeconfig, before any connection.
#[derive(Debug, Clone, PartialEq, Eq)]
pub(crate) struct Target {
    server: String,
    ca_pem: Option<Vec<u8>>,
    insecure: bool,
    token: Option<TokenSource>,
    client_cert: Option<(Vec<u8>, Vec<u8>)>,
}

#[derive(Debug, Clone, PartialEq, Eq)]
enum TokenSource {
    Inline(String),
    File(PathBuf),
}

#[derive(Deserialize)]
struct Kubeconfig {
    #[serde(rename = "current-context", default)]
    current_context: Option<String>,
    #[serde(default)]
    clusters: Vec<NamedCluster>,
    #[serde(default)]
    contexts: Vec<NamedContext>,
    #[serde(default)]
    users: Vec<NamedUser>,
}

#[derive(Deserialize)]
struct NamedCluster {
    name: String,
    cluster: Cluster,
}

#[derive(Deserialize)]
struct Cluster {
    server: String,
    #[serde(rename = "certificate-authority", default)]
    ca_file: Option<String>,
    #[serde(rename = "certificate-authority-data", default)]
    ca_data: Option<String>,
    #[serde(rename = "insecure-skip-tls-verify", default)]
    insecure: bool,
}

#[derive(Deserialize)]
struct NamedContext {
    name: String,
    context: Context,
}

#[derive(Deserialize)]
struct Context {
    cluster: String,
    #[serde(default)]
    user: Option<String>,
}

#[derive(Deserialize)]
struct NamedUser {
    name: String,
    #[serde(default)]
    user: User,
}

#[derive(Deserialize, Default)]
struct User {
    #[serde(default)]
    token: Option<String>,
    #[serde(rename = "tokenFile", default)]
    token_file: Option<String>,
    #[serde(rename = "client-certificate", default)]
    cert_file: Option<String>,
    #[serde(rename = "client-certificate-data", default)]
    cert_data: Option<String>,
    #[serde(rename = "client-key", default)]
    key_file: Option<String>,
    #[serde(rename = "client-key-data", default)]
    key_data: Option<String>,
    #[serde(default)]
    exec: Option<serde_yaml_ng::Value>,
    #[serde(rename = "auth-provider", default)]
    auth_provider: Option<serde_yaml_ng::Value>,
    #[serde(default)]
    username: Option<String>,
}

fn bad_config(msg: String) -> crate::Error {
    crate::Error::InvalidArgument(format!("kubeconfig: {msg}"))
}

/// How a file a kubeconfig names is read: `std::fs::read`, except in the
/// fuzz target (`crate::fuzzing`), whose arbitrary paths must not reach the
/// host's files.
pub(crate) type ReadFile<'a> = &'a dyn Fn(&Path) -> std::io::Result<Vec<u8>>;

/// Inline `*-data` (base64) or a file (relative to the kubeconfig's folder).
fn material(
    data: Option<&str>,
    file: Option<&str>,
    dir: &Path,
    what: &str,
    read: ReadFile,
) -> crate::Result<Option<Vec<u8>>> {
    if let Some(data) = data {
        return base64_decode(data)
            .map(Some)
            .ok_or_else(|| bad_config(format!("{what}-data is not valid base64")));
    }
    match file {
        Some(f) => {
            let path = dir.join(f);
            read(&path)
                .map(Some)
                .map_err(|e| bad_config(format!("{what} {}: {e}", path.display())))
        }
        None => Ok(None),
    }
}

/// The current context's cluster and user, files read, data decoded.
fn resolve_kubeconfig(yaml: &str, dir: &Path) -> crate::Result<Target> {
    resolve_kubeconfig_with(yaml, dir, &|path| std::fs::read(path))
}

/// `resolve_kubeconfig` with the named files read by `read`.
pub(crate) fn resolve_kubeconfig_with(
    yaml: &str,
    dir: &Path,
    read: ReadFile,
) -> crate::Result<Target> {
    let config: Kubeconfig =
        serde_yaml_ng::from_str(yaml).map_err(|e| bad_config(format!("cannot parse: {e}")))?;
    let context_name = config
        .current_context
        .filter(|c| !c.is_empty())
        .ok_or_else(|| bad_config("no current-context".to_string()))?;
    let context = config
        .contexts
        .into_iter()
        .find(|c| c.name == context_name)
        .ok_or_else(|| bad_config(format!("context {context_name:?} not found")))?
        .context;
    let cluster = config
        .clusters
        .into_iter()
        .find(|c| c.name == context.cluster)
        .ok_or_else(|| bad_config(format!("cluster {:?} not found", context.cluster)))?
        .cluster;
    let user = match &context.user {
        Some(name) if !name.is_empty() => {
            config
                .users
                .into_iter()
                .find(|u| &u.name == name)
                .ok_or_else(|| bad_config(format!("user {name:?} not found")))?
                .user
        }
        _ => User::default(),
    };
    let user_name = context.user.unwrap_or_default();
    let unsupported = |what: &str| {
        bad_config(format!(
            "user {user_name:?} uses {what}, which this driver does not support; \
             use a token, tokenFile or client certificate"
        ))
    };
    if user.exec.is_some() {
        return Err(unsupported("an exec credential plugin"));
    }
    if user.auth_provider.is_some() {
        return Err(unsupported("an auth-provider"));
    }
    if user.username.is_some() {
        return Err(unsupported("basic authentication"));
    }
    let ca_pem = material(
        cluster.ca_data.as_deref(),
        cluster.ca_file.as_deref(),
        dir,
        "certificate-authority",
        read,
    )?;
    let cert = material(
        user.cert_data.as_deref(),
        user.cert_file.as_deref(),
        dir,
        "client-certificate",
        read,
    )?;
    let key = material(
        user.key_data.as_deref(),
        user.key_file.as_deref(),
        dir,
        "client-key",
        read,
    )?;
    let client_cert = match (cert, key) {
        (Some(c), Some(k)) => Some((c, k)),
        (None, None) => None,
        _ => {
            return Err(bad_config(format!(
                "user {user_name:?} has a client certificate without a key or vice versa"
            )))
        }
    };
    let token = match (user.token.filter(|t| !t.is_empty()), user.token_file) {
        (Some(t), _) => Some(TokenSource::Inline(t)),
        (None, Some(f)) => Some(TokenSource::File(dir.join(f))),
        (None, None) => None,
    };
    Ok(Target {
        server: cluster.server.trim_end_matches('/').to_string(),
        ca_pem,
        insecure: cluster.insecure,
        token,
        client_cert,
    })
}

/// Standard base64, with or without padding, whitespace ignored (kubeconfig
/// writers wrap long `*-data` values).
fn base64_decode(s: &str) -> Option<Vec<u8>> {
    use base64::engine::{DecodePaddingMode, GeneralPurpose, GeneralPurposeConfig};
    use base64::Engine;
    const LENIENT: GeneralPurpose = GeneralPurpose::new(
        &base64::alphabet::STANDARD,
        GeneralPurposeConfig::new()
            .with_decode_padding_mode(DecodePaddingMode::Indifferent)
            .with_decode_allow_trailing_bits(true),
    );
    let compact: String = s.chars().filter(|c| !c.is_ascii_whitespace()).collect();
    LENIENT.decode(compact).ok()
}

/// RFC 3986's unreserved characters, the only ones kept as they are.
const RESERVED: &percent_encoding::AsciiSet = &percent_encoding::NON_ALPHANUMERIC
    .remove(b'-')
    .remove(b'.')
    .remove(b'_')
    .remove(b'~');

/// Percent-encoding for a path segment or query value.
fn percent_encode(s: &str) -> String {
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
        let ca_path = sa_dir.join("ca.crt");
        let ca_pem = std::fs::read(&ca_path).map_err(|e| {
            crate::Error::InvalidArgument(format!("service account CA {}: {e}", ca_path.display()))
        })?;
        let bearer = Bearer::from_file(sa_dir.join("token"), refresh)?;
        let target = Target {
            server: server.trim_end_matches('/').to_string(),
            ca_pem: Some(ca_pem),
            insecure: false,
            token: None,
            client_cert: None,
        };
        KubeClient::connect(&target, bearer)
    }

    /// The current context of the kubeconfig at `path`.
    pub fn from_kubeconfig(path: &Path) -> crate::Result<KubeClient> {
        let yaml = std::fs::read_to_string(path)
            .map_err(|e| bad_config(format!("{}: {e}", path.display())))?;
        let dir = path.parent().unwrap_or(Path::new("."));
        let target = resolve_kubeconfig(&yaml, dir)?;
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
    fn get(&self, request: &'static str, path: &str, what: &str) -> crate::Result<String> {
        let mut req = self
            .agent
            .get(format!("{}{path}", self.server))
            .header("Accept", "application/json");
        if let Some(token) = self.bearer.current() {
            req = req.header("Authorization", format!("Bearer {token}"));
        }
        // An unreachable API server is transient from the driver's view
        // (rolling control plane, network blip): the caller retries later.
        let unreachable =
            |e: ureq::Error| crate::Error::Unavailable(format!("Kubernetes: {what}: {e}"));
        let (status, body) = crate::http_answer::exchange(
            || req.call(),
            |status, took| crate::metrics::kube_request(request, status, took),
        )
        .map_err(unreachable)?;
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
}

#[cfg(test)]
mod tests {
    use super::*;

    fn temp_dir(name: &str) -> PathBuf {
        let d = std::env::temp_dir().join(format!("lnc-kube-{name}-{}", std::process::id()));
        let _ = std::fs::remove_dir_all(&d);
        std::fs::create_dir_all(&d).unwrap();
        d
    }

    const BASE: &str = r#"
apiVersion: v1
kind: Config
current-context: blue
clusters:
- name: other
  cluster: {server: "https://other:6443"}
- name: c1
  cluster:
    server: https://10.0.0.1:6443/
    certificate-authority-data: LS0tLS1CRUdJTg==
contexts:
- name: green
  context: {cluster: other, user: nobody}
- name: blue
  context: {cluster: c1, user: u1}
users:
"#;

    fn with_user(user: &str) -> String {
        format!("{BASE}- name: u1\n  user:\n{user}")
    }

    #[test]
    fn token_user_and_ca_data() {
        let t = resolve_kubeconfig(&with_user("    token: abc\n"), Path::new("/x")).unwrap();
        assert_eq!(t.server, "https://10.0.0.1:6443");
        assert_eq!(t.ca_pem.as_deref(), Some(&b"-----BEGIN"[..]));
        assert_eq!(t.token, Some(TokenSource::Inline("abc".into())));
        assert_eq!(t.client_cert, None);
        assert!(!t.insecure);
    }

    #[test]
    fn token_file_is_relative_to_the_kubeconfig() {
        let t = resolve_kubeconfig(&with_user("    tokenFile: tok\n"), Path::new("/cfg")).unwrap();
        assert_eq!(t.token, Some(TokenSource::File(PathBuf::from("/cfg/tok"))));
    }

    #[test]
    fn client_certificate_files_and_ca_file() {
        let dir = temp_dir("files");
        std::fs::write(dir.join("cert.pem"), "CERT").unwrap();
        std::fs::write(dir.join("key.pem"), "KEY").unwrap();
        std::fs::write(dir.join("ca.pem"), "CA").unwrap();
        let yaml = with_user("    client-certificate: cert.pem\n    client-key: key.pem\n")
            .replace(
                "certificate-authority-data: LS0tLS1CRUdJTg==",
                "certificate-authority: ca.pem",
            );
        let t = resolve_kubeconfig(&yaml, &dir).unwrap();
        assert_eq!(t.ca_pem.as_deref(), Some(&b"CA"[..]));
        assert_eq!(t.client_cert, Some((b"CERT".to_vec(), b"KEY".to_vec())));
        assert_eq!(t.token, None);
        std::fs::remove_dir_all(dir).unwrap();
    }

    #[test]
    fn client_certificate_data() {
        let t = resolve_kubeconfig(
            &with_user("    client-certificate-data: Q0VSVA==\n    client-key-data: S0VZ\n"),
            Path::new("/x"),
        )
        .unwrap();
        assert_eq!(t.client_cert, Some((b"CERT".to_vec(), b"KEY".to_vec())));
    }

    #[test]
    fn unsupported_and_broken_configs_fail_clearly() {
        let table = [
            (with_user("    exec: {command: aws}\n"), "exec"),
            (
                with_user("    auth-provider: {name: gcp}\n"),
                "auth-provider",
            ),
            (with_user("    username: a\n    password: b\n"), "basic"),
            (
                with_user("    client-certificate-data: Q0VSVA==\n"),
                "without a key",
            ),
            (
                with_user("    client-key-data: '%%%'\n    client-certificate-data: Q0VSVA==\n"),
                "base64",
            ),
            (
                BASE.replace("current-context: blue", "current-context: nope"),
                "\"nope\" not found",
            ),
            (
                BASE.replace("current-context: blue\n", ""),
                "no current-context",
            ),
            (
                BASE.replace("cluster: c1,", "cluster: gone,"),
                "\"gone\" not found",
            ),
            (
                format!("{BASE}- name: someone-else\n  user: {{token: x}}\n"),
                "user \"u1\" not found",
            ),
            ("[not, a, mapping".to_string(), "cannot parse"),
        ];
        for (yaml, needle) in table {
            let err = resolve_kubeconfig(&yaml, Path::new("/x")).unwrap_err();
            assert!(matches!(err, crate::Error::InvalidArgument(_)), "{err:?}");
            assert!(err.message().contains(needle), "{needle}: {err}");
        }
    }

    #[test]
    fn base64_variants() {
        assert_eq!(base64_decode("aGVsbG8=").unwrap(), b"hello");
        assert_eq!(base64_decode("aGVsbG8").unwrap(), b"hello");
        assert_eq!(base64_decode("aGVs\nbG8=\n").unwrap(), b"hello");
        assert_eq!(base64_decode("").unwrap(), b"");
        assert_eq!(base64_decode("a"), None);
        assert_eq!(base64_decode("aGVs*G8="), None);
        assert_eq!(base64_decode("aG=Vs"), None);
    }

    #[test]
    fn percent_encoding() {
        assert_eq!(
            percent_encode("!node-role.kubernetes.io/control-plane,a=b"),
            "%21node-role.kubernetes.io%2Fcontrol-plane%2Ca%3Db"
        );
    }
}
