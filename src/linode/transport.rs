//! One Linode API request, and a logical call made of several: the URL, the
//! auth and identity headers, `X-Filter`, pagination, the bounded retries
//! and the pacing (see `pacer`) and the request metrics; what an answer
//! means is `answer`'s. It knows no endpoint by name; it never puts the
//! token anywhere but the `Authorization` header, and never blindly
//! retries a POST: only one the rate limiter refused (429) is sent again.

use super::answer::{may_resend, Answer, Method};
use super::endpoint::endpoint_template;
use super::error::Error;
use super::pacer::{Observed, Pacer, RateLimitState, RequestClass, Work};
use super::token::Token;
use super::types::Page;
use crate::backoff::Backoff;
use crate::secret::Secret;
use serde::de::DeserializeOwned;
use serde::Serialize;
use std::path::PathBuf;
use std::sync::Arc;
use std::time::{Duration, Instant};

/// Safety net against a server that reports an absurd `pages`.
const MAX_PAGES: u32 = 10_000;
/// Upper bound on the connect phase; the request timeout bounds the rest.
const MAX_CONNECT_TIMEOUT: Duration = Duration::from_secs(5);

/// What every Linode request says about who sends it (Linode's logs and
/// support see it): the driver and its version with the build revision.
pub fn user_agent() -> String {
    format!("linode-nfs-csi/{}", crate::build_info::version())
}

/// Backoff for retryable answers (429, 408, 502, 503, 504, `Linode busy.`,
/// a proxy's HTML 400).
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
    /// Wait before retry number `retry` (1-based): doubling to the cap.
    fn backoff(&self, retry: u32) -> Duration {
        Backoff::doubling(self.base_delay, self.max_delay).nth(retry)
    }
}

/// Everything the Linode client needs.
#[derive(Debug, Clone)]
pub struct LinodeSettings {
    /// Scheme + host (+ optional path prefix), WITHOUT the API version.
    pub base_url: String,
    pub api_version: String,
    pub token: Secret,
    /// Where `token` was read from (`LINODE_TOKEN_FILE`), to read it again
    /// when it changes; `None` for a token fixed at start.
    pub token_file: Option<PathBuf>,
    /// Extra root CA (PEM) for a non-public endpoint (`LINODE_CA`).
    pub ca_file: Option<PathBuf>,
    /// Per HTTP request; the connect phase gets at most 5 s of it.
    pub request_timeout: Duration,
    pub user_agent: String,
    pub retry: RetryPolicy,
    /// Checked before every POST, PUT and DELETE; none: always sent.
    pub fence: Option<WriteFence>,
}

/// What says whether this process may write to Linode now (the controller
/// holds its Lease): a write it refuses is never sent.
#[derive(Clone)]
pub struct WriteFence(Arc<dyn Fn() -> Result<(), String> + Send + Sync>);

impl WriteFence {
    pub fn new(check: impl Fn() -> Result<(), String> + Send + Sync + 'static) -> WriteFence {
        WriteFence(Arc::new(check))
    }

    fn check(&self) -> Result<(), Error> {
        (self.0)().map_err(Error::Fenced)
    }
}

impl std::fmt::Debug for WriteFence {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        f.write_str("WriteFence")
    }
}

impl LinodeSettings {
    /// Production defaults (`https://api.linode.com`, `v4beta`, 10 s) for `token`.
    pub fn new(token: impl Into<String>) -> LinodeSettings {
        LinodeSettings {
            base_url: "https://api.linode.com".to_string(),
            api_version: "v4beta".to_string(),
            token: Secret::new(token),
            token_file: None,
            ca_file: None,
            request_timeout: Duration::from_secs(10),
            user_agent: user_agent(),
            retry: RetryPolicy::default(),
            fence: None,
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

/// The HTTP side of the client. Clones share the connection pool and the
/// pacer (one budget per token); each clone has its own retry policy.
#[derive(Debug, Clone)]
pub struct Transport {
    agent: ureq::Agent,
    /// `{base_url}/{api_version}` without a trailing slash.
    api_root: String,
    token: Arc<Token>,
    user_agent: String,
    retry: RetryPolicy,
    pacer: Arc<Pacer>,
    /// Whose turn this view's requests are at the pacer.
    work: Work,
    fence: Option<WriteFence>,
}

impl Transport {
    pub fn new(settings: LinodeSettings) -> crate::Result<Transport> {
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
        Ok(Transport {
            agent: config.build().new_agent(),
            api_root,
            token: Arc::new(Token::new(settings.token, settings.token_file)),
            user_agent: settings.user_agent,
            pacer: Arc::new(Pacer::new(settings.retry.retry_after_cap)),
            retry: settings.retry,
            work: Work::New,
            fence: settings.fence,
        })
    }

    /// The same transport, trying each request once: for a caller whose
    /// own schedule is its retry (the poller's next tick). Its requests
    /// serve work already under way, so they are waiting work at the pacer.
    pub fn single_attempt(&self) -> Transport {
        Transport {
            retry: RetryPolicy {
                max_attempts: 1,
                ..self.retry
            },
            work: Work::Waiting,
            ..self.clone()
        }
    }

    /// The same transport, its requests finishing work already under way:
    /// retried as usual, and waiting work at the pacer.
    pub fn finishing(&self) -> Transport {
        Transport {
            work: Work::Waiting,
            ..self.clone()
        }
    }

    /// The token's budget of `class` as the API last reported it.
    pub fn rate_limit(&self, class: RequestClass) -> RateLimitState {
        self.pacer.state(class)
    }

    fn url(&self, path: &str) -> String {
        format!("{}/{}", self.api_root, path.trim_start_matches('/'))
    }

    /// Never lets the token (`sent`, or the one in use now) escape inside
    /// an error (a proxy or a buggy backend could echo the Authorization
    /// header in its body).
    fn scrub(&self, sent: &Secret, e: Error) -> Error {
        let now = self.token.current();
        let clean = |s: String| s.replace(sent.expose(), "***").replace(now.expose(), "***");
        match e {
            Error::Status {
                status,
                transient,
                reasons,
            } => Error::Status {
                status,
                transient,
                reasons: reasons
                    .into_iter()
                    .map(|(f, r)| (f.map(clean), clean(r)))
                    .collect(),
            },
            Error::Transport(m) => Error::Transport(clean(m)),
            Error::Decode(m) => Error::Decode(clean(m)),
            Error::Timeout(m) => Error::Timeout(clean(m)),
            Error::Fenced(m) => Error::Fenced(m),
        }
    }

    fn once(
        &self,
        token: &Secret,
        method: Method,
        url: &str,
        filter: Option<&str>,
        body: Option<&[u8]>,
    ) -> Result<Answer, Error> {
        let mut req = ureq::http::Request::builder()
            .method(method.as_str())
            .uri(url)
            .header("Authorization", format!("Bearer {}", token.expose()))
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
        let budget = Observed::from_headers(response.status().as_u16(), header);
        let maintenance = header("X-Maintenance-Mode").is_some();
        let html = header("Content-Type")
            .is_some_and(|t| t.trim().to_ascii_lowercase().starts_with("text/html"));
        let body = response
            .body_mut()
            .read_to_string()
            .map_err(transport_error)?;
        Ok(Answer {
            status: budget.status,
            retry_after: budget.retry_after,
            maintenance,
            html,
            budget,
            body,
        })
    }

    /// One logical call: retries idempotent methods on transient answers,
    /// returns the success body or the decoded error. Every attempt waits
    /// for its turn at the pacer first, which is also what spaces retries
    /// after a 429.
    pub fn call(
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
        // An attempt the backend may have carried out (a 502, a 504)
        // decides what the call reports, even if a later one was refused.
        let mut maybe_applied: Option<Error> = None;
        let mut token = self.token.current();
        // A refused token is read again once per call (it may have been
        // rotated); a second refusal is the answer.
        let mut reread = false;
        loop {
            self.pacer.wait_turn(class, self.work);
            // Checked before each attempt: the lease may lapse while a
            // retry waits its turn.
            if let (true, Some(fence)) = (method != Method::Get, &self.fence) {
                fence.check()?;
            }
            let started = Instant::now();
            let sent = self.once(&token, method, &url, filter, body);
            let status = sent.as_ref().ok().map(|r| r.status);
            crate::metrics::linode_request(
                method.as_str(),
                &endpoint_template(path),
                status,
                started.elapsed(),
            );
            self.pacer
                .observe(class, sent.as_ref().ok().map(|reply| &reply.budget));
            let reply = sent.map_err(|e| self.scrub(&token, e))?;
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
            if reply.status == 401 {
                crate::metrics::linode_unauthorized();
                // A 401 applied nothing: any method may be sent again.
                if !reread {
                    reread = true;
                    if let Some(rotated) = self.token.after_unauthorized(&token) {
                        token = rotated;
                        continue;
                    }
                }
                let mut refused = reply.into_error();
                if let Error::Status { reasons, .. } = &mut refused {
                    reasons.push((
                        None,
                        format!("the API refused the token ({})", self.token.source()),
                    ));
                }
                return Err(self.scrub(&token, refused));
            }
            if reply.is_retryable()
                && may_resend(method, reply.status)
                && attempt < self.retry.max_attempts
            {
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
                let failed = reply.into_error();
                if failed.maybe_applied() {
                    maybe_applied = Some(failed);
                }
                std::thread::sleep(wait);
                crate::metrics::linode_retry(method.as_str(), &endpoint_template(path));
                attempt += 1;
                continue;
            }
            let failed = reply.into_error();
            let reported = match maybe_applied {
                Some(earlier) if !failed.maybe_applied() => earlier,
                _ => failed,
            };
            return Err(self.scrub(&token, reported));
        }
    }

    fn decode<T: DeserializeOwned>(&self, path: &str, body: &str) -> Result<T, Error> {
        serde_json::from_str(body)
            .map_err(|e| self.scrub(&self.token.current(), Error::Decode(format!("{path}: {e}"))))
    }

    pub fn get<T: DeserializeOwned>(&self, path: &str) -> Result<T, Error> {
        let body = self.call(Method::Get, path, None, None)?;
        self.decode(path, &body)
    }

    pub fn send<B: Serialize, T: DeserializeOwned>(
        &self,
        method: Method,
        path: &str,
        body: &B,
    ) -> Result<T, Error> {
        let bytes = serde_json::to_vec(body).map_err(|e| Error::Decode(e.to_string()))?;
        let reply = self.call(method, path, None, Some(&bytes))?;
        self.decode(path, &reply)
    }

    pub fn delete(&self, path: &str) -> Result<(), Error> {
        // The body is `{}`; nothing in it is worth failing over.
        self.call(Method::Delete, path, None, None).map(drop)
    }

    pub fn page<T: DeserializeOwned>(
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
    pub fn rest_of_pages<T: DeserializeOwned>(
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

    /// Every page of a list, optionally filtered.
    pub fn list<T: DeserializeOwned>(
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
        let t = Transport::new(s).unwrap();
        assert_eq!(
            t.url("/nfs/spaces"),
            "http://127.0.0.1:1/prefix/v4beta/nfs/spaces"
        );
    }

    #[test]
    fn debug_output_hides_the_token() {
        let s = LinodeSettings::new("sekrit-token-value");
        assert!(!format!("{s:?}").contains("sekrit"));
        let t = Transport::new(s).unwrap();
        assert!(!format!("{t:?}").contains("sekrit"));
    }

    #[test]
    fn empty_token_is_rejected() {
        let err = Transport::new(LinodeSettings::new("")).unwrap_err();
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
        let err = Transport::new(s).unwrap_err();
        assert!(matches!(err, crate::Error::InvalidArgument(_)));
        assert!(err.message().contains("LINODE_CA"));
        std::fs::remove_dir_all(dir).unwrap();
    }
}
