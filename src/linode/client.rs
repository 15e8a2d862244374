//! `LinodeCloud`: the `Cloud` trait spoken over HTTPS with one ureq agent —
//! URL joining, auth headers, pagination, `X-Filter`, bounded retries, rate
//! limit pacing (see `pacer`), the decoding of error envelopes, and the
//! request metrics (durations, retries, throttles, budget). It must
//! never put the token anywhere but the `Authorization` header, and never
//! retry a POST.

use super::error::Error;
use super::pacer::{Observed, Pacer, RateLimitState, RequestClass};
use super::types::{
    CloneFilesystem, Filesystem, FilesystemAccessPolicy, FilesystemAccessPolicyUpdate, Instance,
    InstanceConfig, InstanceInterface, NewFilesystem, Page, Snapshot, Space, SpaceAccessPolicy,
};
use super::Cloud;
use serde::de::DeserializeOwned;
use serde::{Deserialize, Serialize};
use std::fmt;
use std::path::PathBuf;
use std::time::{Duration, Instant};

/// Safety net against a server that reports an absurd `pages`.
const MAX_PAGES: u32 = 10_000;
/// The page size of lists the driver reads whole (the API maximum): fewer
/// of the scarce paginated requests.
const FULL_PAGE_SIZE: u32 = 500;
/// At most this many ids go into one `X-Filter`; more, and the whole list
/// is cheaper than several filtered ones.
const MAX_FILTER_IDS: usize = 100;
/// Upper bound on the connect phase; the request timeout bounds the rest.
const MAX_CONNECT_TIMEOUT: Duration = Duration::from_secs(5);

/// Backoff for retryable answers (429, 502, 503, 504, `Linode busy.`).
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub struct RetryPolicy {
    /// Total tries including the first; 1 disables retries.
    pub max_attempts: u32,
    pub base_delay: Duration,
    pub max_delay: Duration,
    /// A server's `Retry-After` is honoured up to this long.
    pub retry_after_cap: Duration,
}

impl Default for RetryPolicy {
    fn default() -> RetryPolicy {
        RetryPolicy {
            max_attempts: 5,
            base_delay: Duration::from_millis(250),
            max_delay: Duration::from_secs(4),
            retry_after_cap: Duration::from_secs(30),
        }
    }
}

impl RetryPolicy {
    /// Wait before retry number `retry` (1-based).
    fn backoff(&self, retry: u32) -> Duration {
        let factor = 1u32
            .checked_shl(retry.saturating_sub(1))
            .unwrap_or(u32::MAX);
        self.base_delay.saturating_mul(factor).min(self.max_delay)
    }
}

/// Everything `LinodeCloud` needs; `Debug` never shows the token.
#[derive(Clone)]
pub struct LinodeSettings {
    /// Scheme + host (+ optional path prefix), WITHOUT the API version.
    pub base_url: String,
    pub api_version: String,
    pub token: String,
    /// Extra root CA (PEM) for a non-public endpoint (`LINODE_CA`).
    pub ca_file: Option<PathBuf>,
    /// Per HTTP request; the connect phase gets at most 5 s of it.
    pub request_timeout: Duration,
    pub user_agent: String,
    pub retry: RetryPolicy,
}

impl LinodeSettings {
    /// Production defaults (`https://api.linode.com`, `v4beta`, 10 s) for `token`.
    pub fn new(token: impl Into<String>) -> LinodeSettings {
        LinodeSettings {
            base_url: "https://api.linode.com".to_string(),
            api_version: "v4beta".to_string(),
            token: token.into(),
            ca_file: None,
            request_timeout: Duration::from_secs(10),
            user_agent: format!("linode-nfs-csi/{}", env!("CARGO_PKG_VERSION")),
            retry: RetryPolicy::default(),
        }
    }
}

impl fmt::Debug for LinodeSettings {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        f.debug_struct("LinodeSettings")
            .field("base_url", &self.base_url)
            .field("api_version", &self.api_version)
            .field("token", &"***")
            .field("ca_file", &self.ca_file)
            .field("request_timeout", &self.request_timeout)
            .field("user_agent", &self.user_agent)
            .field("retry", &self.retry)
            .finish()
    }
}

/// The real Linode API behind the `Cloud` trait.
pub struct LinodeCloud {
    agent: ureq::Agent,
    /// `{base_url}/{api_version}` without a trailing slash.
    api_root: String,
    token: String,
    user_agent: String,
    retry: RetryPolicy,
    pacer: Pacer,
    /// Set once the API refused to filter filesystems by id.
    no_id_filter: std::sync::atomic::AtomicBool,
}

impl fmt::Debug for LinodeCloud {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        f.debug_struct("LinodeCloud")
            .field("api_root", &self.api_root)
            .field("retry", &self.retry)
            .finish_non_exhaustive()
    }
}

#[derive(Clone, Copy, Debug, PartialEq, Eq)]
enum Method {
    Get,
    Post,
    Put,
    Delete,
}

impl Method {
    fn as_str(self) -> &'static str {
        match self {
            Method::Get => "GET",
            Method::Post => "POST",
            Method::Put => "PUT",
            Method::Delete => "DELETE",
        }
    }
}

/// One HTTP answer, any status.
struct Reply {
    status: u16,
    retry_after: Option<u64>,
    maintenance: bool,
    budget: Observed,
    body: String,
}

#[derive(Deserialize)]
struct ErrorEnvelope {
    #[serde(default)]
    errors: Vec<ErrorItem>,
}

#[derive(Deserialize)]
struct ErrorItem {
    #[serde(default)]
    reason: Option<String>,
    #[serde(default)]
    field: Option<String>,
}

impl Reply {
    fn is_success(&self) -> bool {
        (200..300).contains(&self.status)
    }

    fn reasons(&self) -> Vec<(Option<String>, String)> {
        let parsed: Vec<_> = serde_json::from_str::<ErrorEnvelope>(&self.body)
            .map(|env| {
                env.errors
                    .into_iter()
                    .filter_map(|e| e.reason.map(|r| (e.field, r)))
                    .collect()
            })
            .unwrap_or_default();
        if parsed.is_empty() {
            // Not the envelope (an HTML 502 from a proxy, say): the status text
            // says as much as the body and cannot flood a log line.
            let text = ureq::http::StatusCode::from_u16(self.status)
                .ok()
                .and_then(|s| s.canonical_reason())
                .unwrap_or("unexpected response");
            return vec![(None, text.to_string())];
        }
        parsed
    }

    fn is_busy(&self) -> bool {
        self.status == 400 && self.reasons().iter().any(|(_, r)| r == "Linode busy.")
    }

    /// Transient by the contract: 429, 502/503/504 (but not a 503 announcing
    /// maintenance, which will not clear in seconds) and `Linode busy.`.
    fn is_retryable(&self) -> bool {
        match self.status {
            429 | 502 | 504 => true,
            503 => !self.maintenance,
            400 => self.is_busy(),
            _ => false,
        }
    }
}

/// PEM → certificates; empty input or no CERTIFICATE block is an error
/// naming `what`, so a wrong file fails at startup rather than at first TLS.
pub(crate) fn pem_certificates(
    pem: &[u8],
    what: &str,
) -> crate::Result<Vec<ureq::tls::Certificate<'static>>> {
    let mut certs = Vec::new();
    for item in ureq::tls::parse_pem(pem) {
        match item {
            Ok(ureq::tls::PemItem::Certificate(c)) => certs.push(c),
            Ok(_) => {}
            Err(e) => {
                return Err(crate::Error::InvalidArgument(format!(
                    "{what}: invalid PEM: {e}"
                )))
            }
        }
    }
    if certs.is_empty() {
        return Err(crate::Error::InvalidArgument(format!(
            "{what}: no PEM certificate found"
        )));
    }
    Ok(certs)
}

/// Maps a ureq failure; a timeout is told apart because it maps differently.
pub(crate) fn transport_error(e: ureq::Error) -> Error {
    match e {
        ureq::Error::Timeout(t) => Error::Timeout(t.to_string()),
        other => Error::Transport(other.to_string()),
    }
}

impl LinodeCloud {
    pub fn new(settings: LinodeSettings) -> crate::Result<LinodeCloud> {
        if settings.token.is_empty() {
            return Err(crate::Error::InvalidArgument(
                "Linode API token is empty".to_string(),
            ));
        }
        let mut config = ureq::Agent::config_builder()
            .http_status_as_error(false)
            .timeout_global(Some(settings.request_timeout))
            .timeout_connect(Some(settings.request_timeout.min(MAX_CONNECT_TIMEOUT)))
            // A redirect would cross to a URL we did not configure; surface it.
            .max_redirects(0);
        if let Some(path) = &settings.ca_file {
            let what = format!("LINODE_CA {}", path.display());
            let pem = std::fs::read(path)
                .map_err(|e| crate::Error::InvalidArgument(format!("{what}: {e}")))?;
            // LINODE_CA is an extra root: the public roots stay trusted, so a
            // CA for a private proxy does not break the public endpoint.
            let mut certs: Vec<ureq::tls::Certificate<'static>> =
                webpki_root_certs::TLS_SERVER_ROOT_CERTS
                    .iter()
                    .map(|der| ureq::tls::Certificate::from_der(der.as_ref()))
                    .collect();
            certs.extend(pem_certificates(&pem, &what)?);
            let roots = ureq::tls::RootCerts::new_with_certs(&certs);
            config = config.tls_config(ureq::tls::TlsConfig::builder().root_certs(roots).build());
        }
        let api_root = format!(
            "{}/{}",
            settings.base_url.trim_end_matches('/'),
            settings.api_version.trim_matches('/')
        );
        Ok(LinodeCloud {
            agent: config.build().new_agent(),
            api_root,
            token: settings.token,
            user_agent: settings.user_agent,
            pacer: Pacer::new(settings.retry.retry_after_cap),
            retry: settings.retry,
            no_id_filter: std::sync::atomic::AtomicBool::new(false),
        })
    }

    /// The token's budget of `class` as the API last reported it.
    pub fn rate_limit(&self, class: RequestClass) -> RateLimitState {
        self.pacer.state(class)
    }

    fn url(&self, path: &str) -> String {
        format!("{}/{}", self.api_root, path.trim_start_matches('/'))
    }

    /// Never lets the token escape inside an error (a proxy or a buggy
    /// backend could echo the Authorization header in its body).
    fn scrub(&self, e: Error) -> Error {
        let clean = |s: String| s.replace(&self.token, "***");
        match e {
            Error::Status { status, reasons } => Error::Status {
                status,
                reasons: reasons
                    .into_iter()
                    .map(|(f, r)| (f.map(clean), clean(r)))
                    .collect(),
            },
            Error::Transport(m) => Error::Transport(clean(m)),
            Error::Decode(m) => Error::Decode(clean(m)),
            Error::Timeout(m) => Error::Timeout(clean(m)),
        }
    }

    fn once(
        &self,
        method: Method,
        url: &str,
        filter: Option<&str>,
        body: Option<&[u8]>,
    ) -> Result<Reply, Error> {
        let mut req = ureq::http::Request::builder()
            .method(method.as_str())
            .uri(url)
            .header("Authorization", format!("Bearer {}", self.token))
            .header("Content-Type", "application/json")
            .header("Accept", "application/json")
            .header("User-Agent", &self.user_agent);
        if let Some(f) = filter {
            req = req.header("X-Filter", f);
        }
        let sent = match body {
            Some(b) => req.body(b).map(|r| self.agent.run(r)),
            None => req.body(()).map(|r| self.agent.run(r)),
        };
        let mut response = sent
            // http::Error's text names the problem, never the header value.
            .map_err(|e| Error::Transport(format!("invalid request: {e}")))?
            .map_err(transport_error)?;
        let header = |name: &str| {
            response
                .headers()
                .get(name)
                .and_then(|v| v.to_str().ok())
                .map(str::to_string)
        };
        let number = |name: &str| header(name).and_then(|v| v.trim().parse::<u64>().ok());
        let retry_after = number("Retry-After");
        let maintenance = header("X-Maintenance-Mode").is_some();
        let status = response.status().as_u16();
        let budget = Observed {
            status,
            limit: number("X-RateLimit-Limit"),
            remaining: number("X-RateLimit-Remaining"),
            reset_epoch: number("X-RateLimit-Reset"),
            retry_after,
        };
        let body = response
            .body_mut()
            .read_to_string()
            .map_err(transport_error)?;
        Ok(Reply {
            status,
            retry_after,
            maintenance,
            budget,
            body,
        })
    }

    /// One logical call: retries idempotent methods on transient answers,
    /// returns the success body or the decoded error. Every attempt waits
    /// for its turn at the pacer first, which is also what spaces retries
    /// after a 429.
    fn call(
        &self,
        method: Method,
        path: &str,
        filter: Option<&str>,
        body: Option<&[u8]>,
    ) -> Result<String, Error> {
        let url = self.url(path);
        let class = if method == Method::Get && path.contains("?page=") {
            RequestClass::List
        } else {
            RequestClass::Other
        };
        let mut attempt = 1;
        loop {
            self.pacer.wait_turn(class);
            let started = Instant::now();
            let sent = self.once(method, &url, filter, body);
            let status = sent.as_ref().ok().map(|r| r.status);
            crate::metrics::linode_request(method.as_str(), path, status, started.elapsed());
            let reply = sent.map_err(|e| self.scrub(e))?;
            self.pacer.observe(class, &reply.budget);
            crate::metrics::linode_budget(
                class.label(),
                reply.status == 429,
                reply.budget.limit,
                reply.budget.remaining,
            );
            log::debug!(
                "Linode {} {} -> {} in {:?}",
                method.as_str(),
                path,
                reply.status,
                started.elapsed()
            );
            if reply.is_success() {
                return Ok(reply.body);
            }
            if method != Method::Post && reply.is_retryable() && attempt < self.retry.max_attempts {
                let wait = match reply.status {
                    429 => Duration::ZERO,
                    _ => self.retry.backoff(attempt),
                };
                log::info!(
                    "Linode {} {} answered {}; retry {}/{}{}",
                    method.as_str(),
                    path,
                    reply.status,
                    attempt,
                    self.retry.max_attempts - 1,
                    match reply.status {
                        429 => format!(" after its Retry-After ({:?} s)", reply.retry_after),
                        _ => format!(" in {wait:?}"),
                    }
                );
                std::thread::sleep(wait);
                crate::metrics::linode_retry(method.as_str(), path);
                attempt += 1;
                continue;
            }
            return Err(self.scrub(Error::Status {
                status: reply.status,
                reasons: reply.reasons(),
            }));
        }
    }

    fn decode<T: DeserializeOwned>(&self, path: &str, body: &str) -> Result<T, Error> {
        serde_json::from_str(body).map_err(|e| self.scrub(Error::Decode(format!("{path}: {e}"))))
    }

    fn get<T: DeserializeOwned>(&self, path: &str) -> Result<T, Error> {
        let body = self.call(Method::Get, path, None, None)?;
        self.decode(path, &body)
    }

    fn send<B: Serialize, T: DeserializeOwned>(
        &self,
        method: Method,
        path: &str,
        body: &B,
    ) -> Result<T, Error> {
        let bytes = serde_json::to_vec(body).map_err(|e| Error::Decode(e.to_string()))?;
        let reply = self.call(method, path, None, Some(&bytes))?;
        self.decode(path, &reply)
    }

    fn delete(&self, path: &str) -> Result<(), Error> {
        // The body is `{}`; nothing in it is worth failing over.
        self.call(Method::Delete, path, None, None).map(drop)
    }

    fn page<T: DeserializeOwned>(
        &self,
        path: &str,
        page: u32,
        page_size: Option<u32>,
        filter: Option<&str>,
    ) -> Result<T, Error> {
        let mut full = format!("{path}?page={page}");
        if let Some(size) = page_size {
            full.push_str(&format!("&page_size={size}"));
        }
        let body = self.call(Method::Get, &full, filter, None)?;
        self.decode(&full, &body)
    }

    /// Pages 2..=`first.pages` appended to `first.data`.
    fn rest_of_pages<T: DeserializeOwned>(
        &self,
        path: &str,
        first: Page<T>,
        page_size: Option<u32>,
        filter: Option<&str>,
    ) -> Result<Vec<T>, Error> {
        let pages = first.pages;
        if pages > MAX_PAGES {
            return Err(Error::Decode(format!(
                "{path}: implausible page count {pages}"
            )));
        }
        let mut out = first.data;
        for n in 2..=pages {
            let next: Page<T> = self.page(path, n, page_size, filter)?;
            out.extend(next.data);
        }
        Ok(out)
    }

    fn list<T: DeserializeOwned>(
        &self,
        path: &str,
        page_size: Option<u32>,
        filter: Option<&serde_json::Value>,
    ) -> Result<Vec<T>, Error> {
        let filter = filter.map(|f| f.to_string());
        let first: Page<T> = self.page(path, 1, page_size, filter.as_deref())?;
        self.rest_of_pages(path, first, page_size, filter.as_deref())
    }
}

/// `crate::Error` for a failed call, with the intent in front.
fn ctx<T>(r: Result<T, Error>, what: impl FnOnce() -> String) -> crate::Result<T> {
    r.map_err(|e| crate::Error::from(e).context(what()))
}

#[derive(Serialize)]
struct CreateFilesystemBody<'a> {
    label: &'a str,
    region: &'a str,
    max_capacity_bytes: i64,
    protocol_versions: [&'a str; 1],
    #[serde(skip_serializing_if = "<[String]>::is_empty")]
    tags: &'a [String],
}

#[derive(Serialize)]
struct CreateSnapshotBody<'a> {
    label: &'a str,
    #[serde(skip_serializing_if = "<[String]>::is_empty")]
    tags: &'a [String],
}

#[derive(Serialize)]
struct UpdateFilesystemBody<'a> {
    tags: &'a [String],
}

/// The interfaces endpoint is documented with two envelopes; accept both.
#[derive(Deserialize)]
#[serde(untagged)]
enum InterfacesReply {
    Plain { interfaces: Vec<InstanceInterface> },
    Paged(Page<InstanceInterface>),
}

impl Cloud for LinodeCloud {
    fn list_spaces(&self) -> crate::Result<Vec<Space>> {
        ctx(self.list("nfs/spaces", None, None), || {
            "list NFS spaces".to_string()
        })
    }

    fn get_space(&self, space_id: u64) -> crate::Result<Space> {
        ctx(self.get(&format!("nfs/spaces/{space_id}")), || {
            format!("get NFS space {space_id}")
        })
    }

    fn find_spaces_by_label(&self, label: &str) -> crate::Result<Vec<Space>> {
        let filter = serde_json::json!({ "label": label });
        ctx(self.list("nfs/spaces", None, Some(&filter)), || {
            format!("find NFS spaces labelled {label:?}")
        })
    }

    fn get_space_access_policy(&self, space_id: u64) -> crate::Result<Option<SpaceAccessPolicy>> {
        let policy = match self.get(&format!("nfs/spaces/{space_id}/access-policy")) {
            Ok(policy) => Ok(Some(policy)),
            // Backends without the endpoint answer 404 or 501 (linode-api.md
            // §3.4); only here does 501 mean "absent" rather than a failure.
            Err(e) if matches!(e.status(), Some(404 | 501)) => Ok(None),
            Err(e) => Err(e),
        };
        ctx(policy, || {
            format!("get access policy of NFS space {space_id}")
        })
    }

    fn list_filesystems(&self, space_id: u64) -> crate::Result<Vec<Filesystem>> {
        ctx(
            self.list(&format!("nfs/spaces/{space_id}/filesystems"), None, None),
            || format!("list filesystems of NFS space {space_id}"),
        )
    }

    fn find_filesystems(
        &self,
        space_id: u64,
        label: &str,
        region: &str,
    ) -> crate::Result<Vec<Filesystem>> {
        let filter = serde_json::json!({ "label": label, "region": region });
        ctx(
            self.list(
                &format!("nfs/spaces/{space_id}/filesystems"),
                None,
                Some(&filter),
            ),
            || format!("find filesystem {label:?} in {region} in NFS space {space_id}"),
        )
    }

    fn create_filesystem(&self, space_id: u64, fs: &NewFilesystem) -> crate::Result<Filesystem> {
        let body = CreateFilesystemBody {
            label: &fs.label,
            region: &fs.region,
            max_capacity_bytes: fs.max_capacity_bytes,
            protocol_versions: ["nfsv4"],
            tags: &fs.tags,
        };
        ctx(
            self.send(
                Method::Post,
                &format!("nfs/spaces/{space_id}/filesystems"),
                &body,
            ),
            || format!("create filesystem {:?} in NFS space {space_id}", fs.label),
        )
    }

    fn find_filesystems_by_ids(
        &self,
        space_id: u64,
        ids: &[u64],
    ) -> crate::Result<Vec<Filesystem>> {
        use std::sync::atomic::Ordering;
        let path = format!("nfs/spaces/{space_id}/filesystems");
        let what = || format!("list filesystems {ids:?} of NFS space {space_id}");
        if ids.len() <= MAX_FILTER_IDS && !self.no_id_filter.load(Ordering::Relaxed) {
            let any: Vec<serde_json::Value> = ids
                .iter()
                .map(|id| serde_json::json!({ "id": id }))
                .collect();
            let filter = serde_json::json!({ "+or": any });
            match self.list(&path, Some(FULL_PAGE_SIZE), Some(&filter)) {
                Err(Error::Status {
                    status: 400,
                    reasons,
                }) if reasons
                    .iter()
                    .any(|(f, _)| f.as_deref() == Some("X-Filter")) =>
                {
                    log::warn!(
                        "the Linode API cannot filter filesystems by id ({}); polling lists whole spaces from now on",
                        Error::Status { status: 400, reasons: reasons.clone() }
                    );
                    self.no_id_filter.store(true, Ordering::Relaxed);
                }
                other => return ctx(other, what),
            }
        }
        let all: Result<Vec<Filesystem>, Error> = self.list(&path, Some(FULL_PAGE_SIZE), None);
        ctx(all, what).map(|all| all.into_iter().filter(|fs| ids.contains(&fs.id)).collect())
    }

    fn find_filesystems_by_tag(&self, space_id: u64, tag: &str) -> crate::Result<Vec<Filesystem>> {
        let filter = serde_json::json!({ "tags": tag });
        ctx(
            self.list(
                &format!("nfs/spaces/{space_id}/filesystems"),
                Some(FULL_PAGE_SIZE),
                Some(&filter),
            ),
            || format!("list filesystems tagged {tag:?} in NFS space {space_id}"),
        )
    }

    fn update_filesystem_tags(
        &self,
        space_id: u64,
        fs_id: u64,
        tags: &[String],
    ) -> crate::Result<Filesystem> {
        ctx(
            self.send(
                Method::Put,
                &format!("nfs/spaces/{space_id}/filesystems/{fs_id}"),
                &UpdateFilesystemBody { tags },
            ),
            || format!("update tags of filesystem {space_id}/{fs_id}"),
        )
    }

    fn get_filesystem(&self, space_id: u64, fs_id: u64) -> crate::Result<Filesystem> {
        ctx(
            self.get(&format!("nfs/spaces/{space_id}/filesystems/{fs_id}")),
            || format!("get filesystem {space_id}/{fs_id}"),
        )
    }

    fn delete_filesystem(&self, space_id: u64, fs_id: u64) -> crate::Result<()> {
        ctx(
            self.delete(&format!("nfs/spaces/{space_id}/filesystems/{fs_id}")),
            || format!("delete filesystem {space_id}/{fs_id}"),
        )
    }

    fn get_filesystem_access_policy(
        &self,
        space_id: u64,
        fs_id: u64,
    ) -> crate::Result<FilesystemAccessPolicy> {
        ctx(
            self.get(&format!(
                "nfs/spaces/{space_id}/filesystems/{fs_id}/access-policy"
            )),
            || format!("get access policy of filesystem {space_id}/{fs_id}"),
        )
    }

    fn put_filesystem_access_policy(
        &self,
        space_id: u64,
        fs_id: u64,
        policy: &FilesystemAccessPolicyUpdate,
    ) -> crate::Result<FilesystemAccessPolicy> {
        ctx(
            self.send(
                Method::Put,
                &format!("nfs/spaces/{space_id}/filesystems/{fs_id}/access-policy"),
                policy,
            ),
            || format!("update access policy of filesystem {space_id}/{fs_id}"),
        )
    }

    fn list_snapshots(&self, space_id: u64, fs_id: u64) -> crate::Result<Vec<Snapshot>> {
        ctx(
            self.list(
                &format!("nfs/spaces/{space_id}/filesystems/{fs_id}/snapshots"),
                Some(FULL_PAGE_SIZE),
                None,
            ),
            || format!("list snapshots of filesystem {space_id}/{fs_id}"),
        )
    }

    fn create_snapshot(
        &self,
        space_id: u64,
        fs_id: u64,
        label: &str,
        tags: &[String],
    ) -> crate::Result<Snapshot> {
        ctx(
            self.send(
                Method::Post,
                &format!("nfs/spaces/{space_id}/filesystems/{fs_id}/snapshots"),
                &CreateSnapshotBody { label, tags },
            ),
            || format!("create snapshot {label:?} of filesystem {space_id}/{fs_id}"),
        )
    }

    fn get_snapshot(&self, space_id: u64, fs_id: u64, snap_id: u64) -> crate::Result<Snapshot> {
        ctx(
            self.get(&format!(
                "nfs/spaces/{space_id}/filesystems/{fs_id}/snapshots/{snap_id}"
            )),
            || format!("get snapshot {space_id}/{fs_id}/{snap_id}"),
        )
    }

    fn delete_snapshot(&self, space_id: u64, fs_id: u64, snap_id: u64) -> crate::Result<()> {
        ctx(
            self.delete(&format!(
                "nfs/spaces/{space_id}/filesystems/{fs_id}/snapshots/{snap_id}"
            )),
            || format!("delete snapshot {space_id}/{fs_id}/{snap_id}"),
        )
    }

    fn clone_snapshot(
        &self,
        space_id: u64,
        fs_id: u64,
        snap_id: u64,
        clone: &CloneFilesystem,
    ) -> crate::Result<Filesystem> {
        ctx(
            self.send(
                Method::Post,
                &format!("nfs/spaces/{space_id}/filesystems/{fs_id}/snapshots/{snap_id}/clone"),
                clone,
            ),
            || {
                format!(
                    "clone snapshot {space_id}/{fs_id}/{snap_id} into {:?}",
                    clone.label
                )
            },
        )
    }

    fn get_instance(&self, linode_id: u64) -> crate::Result<Instance> {
        ctx(self.get(&format!("linode/instances/{linode_id}")), || {
            format!("get Linode instance {linode_id}")
        })
    }

    fn list_instance_configs(&self, linode_id: u64) -> crate::Result<Vec<InstanceConfig>> {
        ctx(
            self.list(&format!("linode/instances/{linode_id}/configs"), None, None),
            || format!("list configs of Linode instance {linode_id}"),
        )
    }

    fn list_instance_interfaces(&self, linode_id: u64) -> crate::Result<Vec<InstanceInterface>> {
        let path = format!("linode/instances/{linode_id}/interfaces");
        let all =
            self.page::<InterfacesReply>(&path, 1, None, None)
                .and_then(|reply| match reply {
                    InterfacesReply::Plain { interfaces } => Ok(interfaces),
                    InterfacesReply::Paged(first) => self.rest_of_pages(&path, first, None, None),
                });
        ctx(all, || {
            format!("list interfaces of Linode instance {linode_id}")
        })
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn backoff_doubles_and_caps() {
        let p = RetryPolicy::default();
        let got: Vec<_> = (1..=7).map(|n| p.backoff(n).as_millis()).collect();
        assert_eq!(got, [250, 500, 1000, 2000, 4000, 4000, 4000]);
        assert_eq!(p.backoff(200), Duration::from_secs(4));
    }

    #[test]
    fn url_joins_base_version_and_path_without_duplicate_slashes() {
        let mut s = LinodeSettings::new("t");
        s.base_url = "http://127.0.0.1:1/prefix/".into();
        s.api_version = "/v4beta/".into();
        let c = LinodeCloud::new(s).unwrap();
        assert_eq!(
            c.url("/nfs/spaces"),
            "http://127.0.0.1:1/prefix/v4beta/nfs/spaces"
        );
    }

    #[test]
    fn debug_output_hides_the_token() {
        let s = LinodeSettings::new("sekrit-token-value");
        assert!(!format!("{s:?}").contains("sekrit"));
        let c = LinodeCloud::new(s).unwrap();
        assert!(!format!("{c:?}").contains("sekrit"));
    }

    #[test]
    fn empty_token_is_rejected() {
        let err = LinodeCloud::new(LinodeSettings::new("")).unwrap_err();
        assert!(matches!(err, crate::Error::InvalidArgument(_)));
    }

    #[test]
    fn a_ca_file_without_certificates_is_rejected() {
        let dir = std::env::temp_dir().join(format!("lnc-ca-{}", std::process::id()));
        std::fs::create_dir_all(&dir).unwrap();
        let path = dir.join("empty.pem");
        std::fs::write(&path, "not a pem").unwrap();
        let mut s = LinodeSettings::new("t");
        s.ca_file = Some(path);
        let err = LinodeCloud::new(s).unwrap_err();
        assert!(matches!(err, crate::Error::InvalidArgument(_)));
        assert!(err.message().contains("LINODE_CA"));
        std::fs::remove_dir_all(dir).unwrap();
    }

    #[test]
    fn reply_classification() {
        let reply = |status, body: &str, maintenance| Reply {
            status,
            retry_after: None,
            maintenance,
            budget: Observed::default(),
            body: body.into(),
        };
        assert!(reply(429, "", false).is_retryable());
        assert!(reply(502, "<html>", false).is_retryable());
        assert!(reply(503, "", false).is_retryable());
        assert!(!reply(503, "", true).is_retryable());
        assert!(reply(504, "", false).is_retryable());
        assert!(reply(400, r#"{"errors":[{"reason":"Linode busy."}]}"#, false).is_retryable());
        assert!(!reply(400, r#"{"errors":[{"reason":"bad"}]}"#, false).is_retryable());
        assert!(!reply(500, "", false).is_retryable());
        assert_eq!(
            reply(502, "<html>bad</html>", false).reasons(),
            vec![(None, "Bad Gateway".to_string())]
        );
    }
}
