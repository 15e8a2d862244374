//! What a Linode API answer means: the success body, or the error
//! envelope, and what its status says. This is the one place an HTTP
//! status is classified (retryable or not, whether a write may have been
//! applied, and the `Error` it becomes, then the gRPC code it maps to).
//! It sends nothing.

use super::error::Error;
use super::pacer::Observed;
use serde::Deserialize;

#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub enum Method {
    Get,
    Post,
    Put,
    Delete,
}

impl Method {
    pub(super) fn as_str(self) -> &'static str {
        match self {
            Method::Get => "GET",
            Method::Post => "POST",
            Method::Put => "PUT",
            Method::Delete => "DELETE",
        }
    }
}

/// Whether a request answered a retryable `status` may be sent again. A
/// POST is not idempotent: only a 429 is known to have been refused before
/// it was processed (Linode's rate limiter answers ahead of the handler);
/// any other failure of a POST may have created the object, and the caller
/// looks it up instead.
pub(super) fn may_resend(method: Method, status: u16) -> bool {
    method != Method::Post || status == 429
}

/// One HTTP answer, any status.
pub(super) struct Answer {
    pub(super) status: u16,
    pub(super) retry_after: Option<u64>,
    pub(super) maintenance: bool,
    /// `Content-Type: text/html`: a proxy's page, not the API's JSON.
    pub(super) html: bool,
    pub(super) budget: Observed,
    pub(super) body: String,
}

#[derive(Deserialize)]
struct ErrorEnvelope {
    #[serde(default)]
    errors: Vec<ErrorItem>,
}

#[derive(Deserialize)]
struct ErrorItem {
    reason: Option<String>,
    field: Option<String>,
}

impl Answer {
    pub(super) fn is_success(&self) -> bool {
        (200..300).contains(&self.status)
    }

    pub(super) fn reasons(&self) -> Vec<(Option<String>, String)> {
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

    pub(super) fn is_busy(&self) -> bool {
        self.status == 400 && self.reasons().iter().any(|(_, r)| r == "Linode busy.")
    }

    /// A 400 the API did not write: nginx answers a request it dropped
    /// (an overloaded or restarting upstream) with an HTML 400.
    pub(super) fn is_proxy_refusal(&self) -> bool {
        self.status == 400 && self.html
    }

    /// Transient by the contract: 429, 408, 502/503/504 (but not a 503
    /// announcing maintenance, which will not clear in seconds), `Linode
    /// busy.` and a proxy's HTML 400.
    pub(super) fn is_retryable(&self) -> bool {
        match self.status {
            408 | 429 | 502 | 504 => true,
            503 => !self.maintenance,
            400 => self.is_busy() || self.is_proxy_refusal(),
            _ => false,
        }
    }

    pub(super) fn into_error(self) -> Error {
        Error::Status {
            status: self.status,
            transient: self.is_proxy_refusal(),
            reasons: self.reasons(),
        }
    }
}

/// What a status means beyond retrying, decided here and nowhere else.
impl Error {
    /// 404 or 501: what backends lacking an endpoint answer (linode-api.md
    /// §3.4), and what a missing object answers too; the caller tells the
    /// two apart where it can.
    pub fn is_missing_endpoint(&self) -> bool {
        matches!(self.status(), Some(404 | 501))
    }

    /// Whether the request may still have been carried out. A 429 (rate
    /// limited), a 503 (not ready, maintenance), a 408 or a proxy's refusal
    /// turned the request away before anything was done, and the 4xx the
    /// contract names are the API refusing it; a timeout, another 5xx, an
    /// unexpected status, a broken connection or an unreadable success
    /// leave the outcome unknown.
    pub fn maybe_applied(&self) -> bool {
        match self {
            Error::Status {
                transient: true, ..
            } => false,
            Error::Status { status, .. } => {
                !matches!(status, 400 | 401 | 403 | 404 | 408 | 409 | 422 | 429 | 503)
            }
            Error::Transport(_) | Error::Decode(_) | Error::Timeout(_) => true,
            Error::Fenced(_) => false,
        }
    }

    /// The status that names a 400 refusing one field, e.g. `X-Filter`.
    pub fn refuses_field(&self, name: &str) -> bool {
        matches!(self, Error::Status { status: 400, transient: false, reasons }
            if reasons.iter().any(|(f, _)| f.as_deref() == Some(name)))
    }
}

/// A timeout maps to `Unavailable` (not `Internal` like other transport
/// failures): the backend was reached or is merely slow, and the CSI sidecar
/// should simply retry later. Connect/TLS/DNS failures stay `Internal` as
/// behaviour.md demands, because they usually mean misconfiguration.
impl From<Error> for crate::Error {
    fn from(e: Error) -> crate::Error {
        let message = e.to_string();
        match e {
            Error::Status {
                transient: true, ..
            } => crate::Error::Unavailable(message),
            Error::Status { status, .. } => match status {
                404 => crate::Error::NotFound(message),
                400 | 422 => crate::Error::InvalidArgument(message),
                401 | 403 => crate::Error::PermissionDenied(message),
                409 => crate::Error::FailedPrecondition(message),
                408 | 429 | 502 | 503 | 504 => crate::Error::Unavailable(message),
                _ => crate::Error::Internal(message),
            },
            Error::Timeout(_) | Error::Fenced(_) => crate::Error::Unavailable(message),
            Error::Transport(_) | Error::Decode(_) => crate::Error::Internal(message),
        }
    }
}

#[cfg(test)]
mod tests {
    use super::*;
    use crate::linode::WriteError;

    fn status(code: u16) -> Error {
        Error::Status {
            status: code,
            transient: false,
            reasons: vec![(None, "x".into())],
        }
    }

    #[test]
    fn http_status_table_matches_behaviour_contract() {
        use crate::Error as E;
        type Outcome = fn(String) -> E;
        let table: [(u16, Outcome); 14] = [
            (404, E::NotFound),
            (400, E::InvalidArgument),
            (422, E::InvalidArgument),
            (401, E::PermissionDenied),
            (403, E::PermissionDenied),
            (409, E::FailedPrecondition),
            (429, E::Unavailable),
            (502, E::Unavailable),
            (503, E::Unavailable),
            (504, E::Unavailable),
            (408, E::Unavailable),
            (500, E::Internal),
            (501, E::Internal),
            (418, E::Internal),
        ];
        for (code, want) in table {
            let got = crate::Error::from(status(code));
            assert_eq!(got, want(format!("[{code}] x")), "status {code}");
        }
    }

    #[test]
    fn only_refusals_are_known_not_to_have_happened() {
        let from = |e: Error| WriteError::new(e, "create filesystem \"x\"").maybe_applied;
        for code in [429, 503, 408] {
            assert!(!from(status(code)), "{code}");
        }
        for code in [500, 502, 504, 418] {
            assert!(from(status(code)), "{code}");
        }
        assert!(from(Error::Timeout("10s".into())));
        assert!(from(Error::Transport("reset".into())));
        assert!(!from(status(400)));
        assert!(!from(status(404)));
        let proxy = Error::Status {
            status: 400,
            transient: true,
            reasons: vec![],
        };
        assert!(!from(proxy.clone()));
        assert!(matches!(
            crate::Error::from(proxy),
            crate::Error::Unavailable(_)
        ));
    }

    #[test]
    fn non_status_failures() {
        assert!(matches!(
            crate::Error::from(Error::Transport("refused".into())),
            crate::Error::Internal(_)
        ));
        assert!(matches!(
            crate::Error::from(Error::Decode("bad json".into())),
            crate::Error::Internal(_)
        ));
        assert!(matches!(
            crate::Error::from(Error::Timeout("10s".into())),
            crate::Error::Unavailable(_)
        ));
    }

    fn answer(status: u16, body: &str, maintenance: bool, html: bool) -> Answer {
        Answer {
            status,
            retry_after: None,
            maintenance,
            html,
            budget: Observed::default(),
            body: body.into(),
        }
    }

    #[test]
    fn reply_classification() {
        let reply = |status, body: &str, maintenance| answer(status, body, maintenance, false);
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

    #[test]
    fn a_timeout_and_a_proxys_html_400_are_transient() {
        assert!(answer(408, "", false, false).is_retryable());
        let html = answer(400, "<html>400 Bad Request</html>", false, true);
        assert!(html.is_retryable());
        let e = crate::Error::from(html.into_error());
        assert!(matches!(e, crate::Error::Unavailable(_)), "{e:?}");
        let json = answer(400, r#"{"errors":[{"reason":"bad"}]}"#, false, false);
        assert!(!json.is_retryable());
        let e = crate::Error::from(json.into_error());
        assert!(matches!(e, crate::Error::InvalidArgument(_)), "{e:?}");
        let e = crate::Error::from(answer(408, "", false, false).into_error());
        assert!(matches!(e, crate::Error::Unavailable(_)), "{e:?}");
    }
}
