//! Client of the Linode metadata service (node identity without an API token):
//! `PUT /v1/token`, then `GET /v1/instance`. Short timeouts; "cannot reach it"
//! is reported as `Unavailable`, the node's signal to fall back to the
//! Kubernetes Node object. Each request's duration and outcome is a metric.
//! It must not cache: the caller decides that.

use serde::Deserialize;
use std::time::Duration;

/// Long enough for the two calls that follow, short enough to be worthless
/// if it leaked.
const TOKEN_EXPIRY_SECONDS: u32 = 60;

/// What the node needs from its own instance.
#[derive(Debug, Clone, PartialEq, Eq, Deserialize)]
pub struct Instance {
    pub id: u64,
    pub region: String,
}

#[derive(Debug, Clone)]
pub struct MetadataClient {
    agent: ureq::Agent,
    base_url: String,
}

impl MetadataClient {
    /// `base_url` is `METADATA_URL` (e.g. `http://169.254.169.254`);
    /// `timeout` bounds connect and each whole request.
    pub fn new(base_url: &str, timeout: Duration) -> MetadataClient {
        let agent = ureq::Agent::config_builder()
            .http_status_as_error(false)
            .timeout_global(Some(timeout))
            .timeout_connect(Some(timeout))
            .max_redirects(0)
            // Asked once or twice per process: a fresh connection each time
            // makes a vanished service show as "refused" at once, instead of
            // a request lost on a stale pooled connection until the timeout.
            .max_idle_connections(0)
            .build()
            .new_agent();
        MetadataClient {
            agent,
            base_url: base_url.trim_end_matches('/').to_string(),
        }
    }

    /// The instance this process runs on.
    ///
    /// Errors: unreachable, timed out or 5xx → Unavailable (fall back);
    /// 401/403 → PermissionDenied; anything else unexpected → Internal.
    pub fn instance(&self) -> crate::Result<Instance> {
        let token = self.token()?;
        let body = self.call("instance", "read instance metadata", || {
            self.agent
                .get(format!("{}/v1/instance", self.base_url))
                .header("Metadata-Token", &token)
                .header("Accept", "application/json")
                .call()
        })?;
        serde_json::from_str(&body).map_err(|e| {
            crate::Error::Internal(format!("metadata service: bad instance document: {e}"))
        })
    }

    fn token(&self) -> crate::Result<String> {
        let body = self.call("token", "get metadata token", || {
            self.agent
                .put(format!("{}/v1/token", self.base_url))
                .header(
                    "Metadata-Token-Expiry-Seconds",
                    TOKEN_EXPIRY_SECONDS.to_string(),
                )
                .header("Accept", "application/json")
                .send_empty()
        })?;
        // `["<token>"]` for JSON; tolerate the text/plain form too.
        let token = match serde_json::from_str::<Vec<String>>(&body) {
            Ok(list) => list.into_iter().next().unwrap_or_default(),
            Err(_) => body.trim().to_string(),
        };
        if token.is_empty() {
            return Err(crate::Error::Internal(
                "metadata service: empty token".to_string(),
            ));
        }
        Ok(token)
    }

    /// Sends one request (`request` names it in the metrics) and maps the
    /// answer.
    fn call(
        &self,
        request: &'static str,
        what: &str,
        send: impl FnOnce() -> Result<ureq::http::Response<ureq::Body>, ureq::Error>,
    ) -> crate::Result<String> {
        let unavailable = |e: ureq::Error| {
            crate::Error::Unavailable(format!(
                "metadata service {} unreachable: {what}: {e}",
                self.base_url
            ))
        };
        let (status, body) = crate::http_answer::exchange(send, |status, took| {
            crate::metrics::metadata_request(request, status, took)
        })
        .map_err(unavailable)?;
        let message = || format!("metadata service: {what}: HTTP {status}");
        match status {
            200..=299 => Ok(body),
            401 | 403 => Err(crate::Error::PermissionDenied(message())),
            500..=599 => Err(crate::Error::Unavailable(message())),
            _ => Err(crate::Error::Internal(message())),
        }
    }
}
